//! Columns a table's rules leave out of its replication: named in
//! `exclude_columns`, or of a type walshadow cannot replicate when the
//! table says `unsupported_columns = "skip"`.
//!
//! A column left out is marked dropped in the relation's descriptor, and
//! every reader downstream takes that descriptor: the stream's row decoder
//! walks past its bytes without decoding them, the ClickHouse table has no
//! such column, a `copy` load leaves it out of its select list and a page
//! walk out of its rows. So one function decides, the same on every path.
//!
//! A column of the replica identity is never left out: ClickHouse keys the
//! rows by it. Rules that would leave one out refuse the table instead.
//!
//! The rules also say what a column writes for a value its ClickHouse type
//! cannot hold ([`ValuePolicy`], `out_of_range`): the policy travels in the
//! destination layout ([`crate::DestTable`]), so the encoder every path
//! shares applies it the same way to the stream, a `copy` load and a page
//! walk, in array elements too.

use std::collections::{BTreeMap, BTreeSet};

use walshadow_rows::RowDecoder;
use walshadow_types::catalog::RelationDesc;

pub use walshadow_types::TypeOverride;

use crate::types::clickhouse_type;

/// One table's column rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColumnRules {
    /// Column names left out whatever their type.
    pub exclude: BTreeSet<String>,
    /// When not empty, the only columns kept besides the replica identity's
    /// (`include_columns`).
    pub include: BTreeSet<String>,
    /// Columns of types walshadow cannot replicate are left out rather
    /// than stopping the table.
    pub skip_unsupported: bool,
    /// What columns write for values ClickHouse cannot hold.
    pub values: ValueRules,
    /// ClickHouse column names by source column name (`rename_columns`).
    pub rename: BTreeMap<String, String>,
    /// ClickHouse types by source column name (`column_types`).
    pub types: BTreeMap<String, TypeOverride>,
}

/// What a table's rules give its ClickHouse layout
/// ([`crate::DestTable::with_rules`]): value policies, column names and
/// type overrides, all keyed by the source's column names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DestRules {
    pub values: ValueRules,
    pub rename: BTreeMap<String, String>,
    pub types: BTreeMap<String, TypeOverride>,
}

impl From<ValueRules> for DestRules {
    fn from(values: ValueRules) -> DestRules {
        DestRules {
            values,
            ..DestRules::default()
        }
    }
}

/// What a column writes for a value its ClickHouse type cannot hold:
/// `numeric` NaN or an infinity in a `Decimal`, a `date` or `timestamp`
/// that is infinite or outside `Date32`/`DateTime64`'s 1900–2299.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ValuePolicy {
    /// Stop the table, the message naming the column and these options.
    #[default]
    Stop,
    /// NULL (the column becomes `Nullable`; array elements already are).
    Null,
    /// The nearest value the type holds: 1900-01-01 or 2299-12-31 (and
    /// their timestamps), ±99…9 for a `Decimal`. NaN has none: it stops.
    Clamp,
    /// The column becomes a `String` of PostgreSQL's text for every value.
    String,
}

impl ValuePolicy {
    /// The spelling in the config file and the config table.
    pub fn name(self) -> &'static str {
        match self {
            ValuePolicy::Stop => "stop",
            ValuePolicy::Null => "null",
            ValuePolicy::Clamp => "clamp",
            ValuePolicy::String => "string",
        }
    }

    /// Case-insensitive [`ValuePolicy::name`].
    pub fn parse(s: &str) -> Option<ValuePolicy> {
        [
            ValuePolicy::Stop,
            ValuePolicy::Null,
            ValuePolicy::Clamp,
            ValuePolicy::String,
        ]
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(s.trim()))
    }
}

/// One table's value policies: its own (`out_of_range`) and per column
/// (`out_of_range_columns`, which win).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValueRules {
    pub table: ValuePolicy,
    pub columns: BTreeMap<String, ValuePolicy>,
}

impl ValueRules {
    pub fn is_empty(&self) -> bool {
        self.table == ValuePolicy::Stop && self.columns.is_empty()
    }

    /// The policy of the column named `name`.
    pub fn for_column(&self, name: &str) -> ValuePolicy {
        self.columns.get(name).copied().unwrap_or(self.table)
    }
}

/// A column left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    pub column: String,
    pub reason: String,
}

/// A descriptor with the rules applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Masked {
    /// The relation as walshadow replicates it: left-out columns dropped.
    pub desc: RelationDesc,
    pub left_out: Vec<LeftOut>,
    /// Names in `exclude` or the value policies that the relation has no
    /// live column of (a typo, or a column since dropped).
    pub unknown: Vec<String>,
    /// Why the rules cannot apply: a replica identity column would be left
    /// out. The table cannot stream until the rules or the key change.
    pub refused: Option<String>,
    /// The value policies, names and types, for
    /// [`crate::DestTable::with_rules`].
    pub dest: DestRules,
}

impl ColumnRules {
    /// Whether these rules leave nothing out of any table.
    pub fn is_empty(&self) -> bool {
        self.exclude.is_empty()
            && self.include.is_empty()
            && !self.skip_unsupported
            && self.values.is_empty()
            && self.rename.is_empty()
            && self.types.is_empty()
    }

    /// What these rules give the ClickHouse layout.
    pub fn dest(&self) -> DestRules {
        DestRules {
            values: self.values.clone(),
            rename: self.rename.clone(),
            types: self.types.clone(),
        }
    }

    /// `desc` with the columns these rules leave out marked dropped.
    pub fn apply(&self, mut desc: RelationDesc) -> Masked {
        if self.is_empty() {
            return Masked {
                desc,
                left_out: Vec::new(),
                unknown: Vec::new(),
                refused: None,
                dest: self.dest(),
            };
        }
        let undecodable: Vec<(String, String)> = if self.skip_unsupported {
            let mut v: Vec<(String, String)> = RowDecoder::refusals(&desc)
                .into_iter()
                .map(|u| (u.column, format!("type {}: {}", u.type_name, u.reason)))
                .collect();
            let mapped: Vec<(String, String)> = desc
                .attributes
                .iter()
                .filter(|a| !a.dropped && !v.iter().any(|(c, _)| *c == a.name))
                .filter_map(|a| {
                    clickhouse_type(a, &desc.types)
                        .err()
                        .map(|u| (u.column, format!("type {}: {}", u.type_name, u.reason)))
                })
                .collect();
            v.extend(mapped);
            v
        } else {
            Vec::new()
        };
        let key: BTreeSet<&str> = desc.replica_identity.iter().map(String::as_str).collect();
        // Under FULL every column is the key: include_columns cannot keep
        // the key and leave the rest out.
        let full = desc.replica_identity_kind == "f";
        let table = format!("{}.{}", desc.schema, desc.name);
        let mut refused = Vec::new();
        let mut left_out = Vec::new();
        for a in desc.attributes.iter_mut().filter(|a| !a.dropped) {
            let reason = if self.exclude.contains(&a.name) {
                "exclude_columns".to_owned()
            } else if !self.include.is_empty()
                && !self.include.contains(&a.name)
                && (full || !key.contains(a.name.as_str()))
            {
                "not in include_columns".to_owned()
            } else if let Some((_, why)) = undecodable.iter().find(|(c, _)| *c == a.name) {
                format!("unsupported_columns = \"skip\" ({why})")
            } else {
                continue;
            };
            // FULL identity lists every column: none can go.
            if key.contains(a.name.as_str()) {
                refused.push(format!("{:?} ({reason})", a.name));
                continue;
            }
            a.dropped = true;
            left_out.push(LeftOut {
                column: a.name.clone(),
                reason,
            });
        }
        let unknown = self
            .exclude
            .iter()
            .chain(&self.include)
            .chain(self.values.columns.keys())
            .chain(self.rename.keys())
            .chain(self.types.keys())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter(|n| {
                let live = desc.attributes.iter().any(|a| !a.dropped && a.name == **n);
                !live && !left_out.iter().any(|l: &LeftOut| l.column == **n)
            })
            .cloned()
            .collect();
        let refused = (!refused.is_empty()).then(|| {
            let them = if refused.len() == 1 { "it" } else { "them" };
            format!(
                "table {table}: the column rules would leave out {} of its replica identity, \
                 by which ClickHouse keys its rows; take {them} out of exclude_columns (or add \
                 {them} to include_columns), or give the table a key without {them}",
                refused.join(", "),
            )
        });
        Masked {
            desc,
            left_out,
            unknown,
            refused,
            dest: self.dest(),
        }
    }
}

#[cfg(test)]
mod tests {
    use walshadow_types::catalog::fixtures::{attribute, relation, type_desc};
    use walshadow_types::catalog::{AttributeDesc, RelationDesc};

    use super::*;

    /// `id int4` (the key), `note text`, `shape` of a composite type whose
    /// field the decoders do not know, `gone` (dropped).
    fn table() -> RelationDesc {
        relation(
            "t",
            vec![
                AttributeDesc {
                    not_null: true,
                    len: 4,
                    by_value: true,
                    ..attribute(1, "id", 23)
                },
                attribute(2, "note", 25),
                attribute(3, "shape", 90_001),
                AttributeDesc {
                    dropped: true,
                    ..attribute(4, "gone", 25)
                },
            ],
            &["id"],
            vec![walshadow_types::catalog::TypeDesc {
                // A field of a type the decoders do not know.
                fields: vec![walshadow_types::catalog::FieldDesc {
                    name: "q".into(),
                    type_oid: 99_999,
                    typmod: -1,
                    len: -1,
                    align: "i".into(),
                    dropped: false,
                }],
                ..type_desc(90_001, "shape", "c", "C")
            }],
        )
    }

    fn rules(exclude: &[&str], skip: bool) -> ColumnRules {
        ColumnRules {
            exclude: exclude.iter().map(|s| s.to_string()).collect(),
            skip_unsupported: skip,
            ..ColumnRules::default()
        }
    }

    fn live(d: &RelationDesc) -> Vec<&str> {
        d.attributes
            .iter()
            .filter(|a| !a.dropped)
            .map(|a| a.name.as_str())
            .collect()
    }

    #[test]
    fn no_rules_leave_the_descriptor_as_it_is() {
        let m = ColumnRules::default().apply(table());
        assert_eq!(m.desc, table());
        assert!(m.left_out.is_empty() && m.unknown.is_empty() && m.refused.is_none());
    }

    #[test]
    fn an_excluded_column_is_dropped_and_named() {
        let m = rules(&["note"], false).apply(table());
        assert_eq!(live(&m.desc), ["id", "shape"]);
        assert_eq!(m.left_out[0].column, "note");
        assert_eq!(m.left_out[0].reason, "exclude_columns");
        assert!(RowDecoder::new(&m.desc).is_err(), "shape still refuses");
    }

    #[test]
    fn include_keeps_the_named_columns_and_the_key() {
        let include = |names: &[&str]| ColumnRules {
            include: names.iter().map(|s| s.to_string()).collect(),
            ..ColumnRules::default()
        };
        let m = include(&["note", "nope"]).apply(table());
        assert_eq!(live(&m.desc), ["id", "note"], "the key is kept unnamed");
        assert_eq!(m.left_out[0].column, "shape");
        assert_eq!(m.left_out[0].reason, "not in include_columns");
        assert_eq!(m.unknown, ["nope"]);
        assert!(m.refused.is_none());
        // Under REPLICA IDENTITY FULL every column is the key: none can go.
        let mut full = table();
        full.replica_identity_kind = "f".into();
        full.replica_identity = vec!["id".into(), "note".into(), "shape".into()];
        let m = include(&["note"]).apply(full);
        let why = m.refused.expect("refused");
        assert!(why.contains("include_columns"), "{why}");
    }

    #[test]
    fn skip_leaves_out_exactly_the_undecodable_columns() {
        let m = rules(&[], true).apply(table());
        assert_eq!(live(&m.desc), ["id", "note"]);
        assert_eq!(m.left_out.len(), 1);
        assert!(m.left_out[0].reason.contains("shape"), "{:?}", m.left_out);
        RowDecoder::new(&m.desc).expect("what is left decodes");
        crate::DestTable::new(&m.desc, &crate::MetaColumns::default())
            .expect("and maps to ClickHouse");
    }

    #[test]
    fn unknown_names_are_reported_and_key_columns_refused() {
        let m = rules(&["nope", "gone"], false).apply(table());
        assert_eq!(m.unknown, ["gone", "nope"]);
        let m = rules(&["id"], false).apply(table());
        assert_eq!(live(&m.desc), ["id", "note", "shape"], "the key stays");
        let why = m.refused.expect("refused");
        assert!(
            why.contains("\"id\"") && why.contains("replica identity"),
            "{why}"
        );
    }
}
