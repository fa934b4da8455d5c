//! The destination table of one source relation: its columns (live source
//! columns in attnum order with their ClickHouse types, then the metadata
//! columns), its sorting key, and how a later descriptor of the same
//! relation differs from it ([`SchemaDiff`]).
//!
//! The sorting key is the replica identity: the primary key, the
//! `USING INDEX` columns, or for `REPLICA IDENTITY FULL` every column. The
//! key is what `ReplacingMergeTree` collapses versions on, so a table
//! without one cannot be kept exact and is refused. With FULL, two source
//! rows with identical contents collapse into one (PostgreSQL cannot tell
//! them apart in WAL either).
//!
//! Schema changes that ClickHouse can follow in place (add, drop, rename a
//! non-key column, drop NOT NULL, widen a non-key column's type) become
//! `ALTER TABLE` statements; another type change or a key change cannot be
//! applied to rows already written and is a definite error whose remedy is
//! to load the table again.

use std::collections::HashSet;

use walshadow_types::catalog::{AttributeDesc, RelationDesc};

use crate::columns::{DestRules, TypeOverride, ValuePolicy, ValueRules};
use crate::types::{ChType, UnsupportedType, clickhouse_type};

/// Names of the metadata columns every destination table carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaColumns {
    /// `UInt64`: the commit LSN of the change's transaction (or the load LSN
    /// of an initial-load row).
    pub lsn: String,
    /// `UInt64`: the change's own record LSN, ordering changes within one
    /// transaction.
    pub seq: String,
    /// `UInt32`: the transaction id as WAL carries it (32 bits, no epoch).
    pub xid: String,
    /// `DateTime64(6, 'UTC')`: the commit timestamp.
    pub commit_time: String,
    /// `UInt8`: 1 for a delete.
    pub is_deleted: String,
    /// `UInt128 MATERIALIZED (lsn << 64) | seq`: the `ReplacingMergeTree`
    /// version, so a later commit wins and, within a commit, a later change.
    pub version: String,
}

impl Default for MetaColumns {
    fn default() -> Self {
        MetaColumns {
            lsn: "_lsn".into(),
            seq: "_seq".into(),
            xid: "_xid".into(),
            commit_time: "_commit_time".into(),
            is_deleted: "_is_deleted".into(),
            version: "_version".into(),
        }
    }
}

impl MetaColumns {
    fn names(&self) -> [&str; 6] {
        [
            &self.lsn,
            &self.seq,
            &self.xid,
            &self.commit_time,
            &self.is_deleted,
            &self.version,
        ]
    }

    /// The metadata columns written on insert, in insert order, with types.
    pub fn inserted(&self) -> [(&str, ChType); 5] {
        [
            (&self.lsn, ChType::UInt64),
            (&self.seq, ChType::UInt64),
            (&self.xid, ChType::UInt32),
            (&self.commit_time, ChType::DateTime64Utc(6)),
            (&self.is_deleted, ChType::UInt8),
        ]
    }
}

/// One destination column from a live source column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestColumn {
    pub attnum: i16,
    /// The ClickHouse column's name: the source's, or the one
    /// `rename_columns` gives it.
    pub name: String,
    /// The source column's name.
    pub source: String,
    pub ch_type: ChType,
    /// Part of the sorting key (the replica identity).
    pub key: bool,
    /// What the column writes for a value `ch_type` cannot hold; `Stop`
    /// for a type that holds every value.
    pub out_of_range: ValuePolicy,
    /// Index in `RelationDesc::attributes` (dropped columns included).
    pub(crate) position: usize,
}

/// The destination table of one relation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestTable {
    /// `schema.name` of the source relation, for messages.
    pub source: String,
    /// Live columns in attnum order.
    pub columns: Vec<DestColumn>,
    /// Sorting key column names, in replica-identity order.
    pub order_by: Vec<String>,
    pub meta: MetaColumns,
    /// `RelationDesc::attributes.len()`, dropped columns included.
    pub(crate) attribute_count: usize,
}

/// A relation the emitter cannot replicate, or a change it cannot follow.
/// All are definite: retrying does not help, the message names the remedy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error(
        "table {table} has no primary key and no replica identity, so updates and deletes \
         cannot be matched in ClickHouse; add a primary key or run \
         ALTER TABLE {table} REPLICA IDENTITY FULL"
    )]
    NoKey { table: String },
    #[error("table {table}: {source}")]
    Unsupported {
        table: String,
        #[source]
        source: UnsupportedType,
    },
    #[error("table {table}: replica identity column {column:?} is not a live column of the table")]
    KeyColumnMissing { table: String, column: String },
    #[error(
        "table {table}: column {column:?} has the name of a metadata column; \
         choose other metadata column names in the [clickhouse] section (*_column keys)"
    )]
    MetaNameClash { table: String, column: String },
    #[error(
        "table {table}: the default of added column {column:?} cannot be written to ClickHouse: {reason}"
    )]
    BadDefault {
        table: String,
        column: String,
        reason: String,
    },
    #[error(
        "table {table}: column {column:?} is part of the replica identity, by which ClickHouse \
         keys the rows, and out_of_range = \"{policy}\" would make distinct keys one (clamp) or \
         NULL (null); give it \"string\" in out_of_range_columns"
    )]
    KeyPolicy {
        table: String,
        column: String,
        policy: &'static str,
    },
    #[error(
        "table {table}: column {column:?}: {reason}; change its entry in rename_columns or \
         column_types ([table.\"{table}\"] in the config file, or the config table's row)"
    )]
    ColumnRule {
        table: String,
        column: String,
        reason: String,
    },
    #[error("metadata column names must be distinct and non-empty, got {names:?}")]
    BadMetaNames { names: Vec<String> },
    #[error(
        "table {table}: column {column:?} changed type from {} to {} in ClickHouse terms, \
         which ClickHouse cannot convert the rows already written to exactly (a sorting key \
         column, or not a widening); load the table again: walshadow table resync {table}",
        .from.described(),
        .to.described()
    )]
    TypeChange {
        table: String,
        column: String,
        from: ChType,
        to: ChType,
    },
    #[error(
        "table {table}: the replica identity changed ({reason}); ClickHouse's sorting key \
         cannot change in place; load the table again: walshadow table resync {table}"
    )]
    KeyChange { table: String, reason: String },
}

impl DestTable {
    /// The destination layout of `desc`, or why it cannot be replicated;
    /// every column stops on a value its type cannot hold.
    pub fn new(desc: &RelationDesc, meta: &MetaColumns) -> Result<DestTable, SchemaError> {
        DestTable::with_values(desc, meta, &ValueRules::default())
    }

    /// [`DestTable::new`] with the table's value policies: a column under
    /// `null` becomes `Nullable`, one under `string` a `String`.
    pub fn with_values(
        desc: &RelationDesc,
        meta: &MetaColumns,
        values: &ValueRules,
    ) -> Result<DestTable, SchemaError> {
        DestTable::with_rules(desc, meta, &DestRules::from(values.clone()))
    }

    /// [`DestTable::with_values`] with the table's column names
    /// (`rename_columns`) and types (`column_types`) too.
    pub fn with_rules(
        desc: &RelationDesc,
        meta: &MetaColumns,
        rules: &DestRules,
    ) -> Result<DestTable, SchemaError> {
        let table = format!("{}.{}", desc.schema, desc.name);
        let names = meta.names();
        let distinct: HashSet<&str> = names.iter().copied().collect();
        if distinct.len() != names.len() || names.iter().any(|n| n.is_empty()) {
            return Err(SchemaError::BadMetaNames {
                names: names.iter().map(|n| n.to_string()).collect(),
            });
        }
        let live: Vec<(usize, &AttributeDesc)> = desc
            .attributes
            .iter()
            .enumerate()
            .filter(|(_, a)| !a.dropped)
            .collect();
        let key_names = key_columns(desc, &table, &live)?;
        let rule = |column: &str, reason: String| SchemaError::ColumnRule {
            table: table.clone(),
            column: column.to_owned(),
            reason,
        };
        let mut columns: Vec<DestColumn> = Vec::with_capacity(live.len());
        for (position, attr) in live {
            let name = rules.rename.get(&attr.name).unwrap_or(&attr.name).clone();
            if name.is_empty() {
                return Err(rule(
                    &attr.name,
                    "rename_columns gives it an empty name".into(),
                ));
            }
            if distinct.contains(name.as_str()) {
                return Err(SchemaError::MetaNameClash {
                    table,
                    column: name,
                });
            }
            if let Some(other) = columns.iter().find(|c| c.name == name) {
                return Err(rule(
                    &attr.name,
                    format!(
                        "it would be named {name:?} in ClickHouse, as column {:?} is",
                        other.source
                    ),
                ));
            }
            let mapped =
                clickhouse_type(attr, &desc.types).map_err(|source| SchemaError::Unsupported {
                    table: table.clone(),
                    source,
                })?;
            let key = key_names.contains(&attr.name);
            let over = rules.types.get(&attr.name).copied();
            let ch_type = match over {
                None => mapped,
                Some(o) => overridden(o, attr, key, &desc.types)
                    .map_err(|reason| rule(&attr.name, reason))?,
            };
            // money maps to a Decimal that holds every amount.
            let out_of_range = if ch_type.has_limited_range()
                && !crate::types::is_money(attr.type_oid, &desc.types)
            {
                rules.values.for_column(&attr.name)
            } else {
                ValuePolicy::Stop
            };
            let ch_type = match out_of_range {
                // Clamped or NULL, distinct keys could become one row.
                p @ (ValuePolicy::Clamp | ValuePolicy::Null) if key => {
                    return Err(SchemaError::KeyPolicy {
                        table,
                        column: attr.name.clone(),
                        policy: p.name(),
                    });
                }
                p @ (ValuePolicy::Null | ValuePolicy::Clamp)
                    if matches!(ch_type, ChType::Geo(_)) =>
                {
                    return Err(rule(
                        &attr.name,
                        format!(
                            "ClickHouse's {ch_type} has no NULL and no nearest value, so out_of_range = \"{}\" cannot apply; a value of another shape stops the table",
                            p.name()
                        ),
                    ));
                }
                ValuePolicy::String if over.is_some() => {
                    return Err(rule(
                        &attr.name,
                        "out_of_range = \"string\" would make it a String, against its column_types entry; drop one of the two".into(),
                    ));
                }
                ValuePolicy::Stop | ValuePolicy::Clamp => ch_type,
                ValuePolicy::String if attr.not_null => ChType::String,
                ValuePolicy::String => ChType::nullable(ChType::String),
                // Array elements are Nullable already.
                ValuePolicy::Null if matches!(ch_type, ChType::Array(_)) => ch_type,
                ValuePolicy::Null => ch_type.to_nullable(),
            };
            columns.push(DestColumn {
                attnum: attr.attnum,
                name,
                source: attr.name.clone(),
                ch_type,
                key,
                out_of_range,
                position,
            });
        }
        // The sorting key by the ClickHouse names.
        let order_by = key_names
            .iter()
            .filter_map(|k| columns.iter().find(|c| &c.source == k))
            .map(|c| c.name.clone())
            .collect();
        Ok(DestTable {
            source: table,
            columns,
            order_by,
            meta: meta.clone(),
            attribute_count: desc.attributes.len(),
        })
    }

    /// Column names in insert order: the live columns, then the metadata
    /// columns (the version is computed by ClickHouse).
    pub fn insert_columns(&self) -> Vec<String> {
        self.columns
            .iter()
            .map(|c| c.name.clone())
            .chain(self.meta.inserted().iter().map(|(n, _)| n.to_string()))
            .collect()
    }

    /// Whether a key column is `Nullable` (REPLICA IDENTITY FULL over
    /// nullable columns), which ClickHouse allows only with
    /// `allow_nullable_key = 1`.
    pub fn has_nullable_key(&self) -> bool {
        self.columns
            .iter()
            .any(|c| c.key && c.ch_type.is_nullable())
    }

    /// Query-level settings the DDL of this table needs: the `Time64` type
    /// is behind `enable_time_time64_type` on ClickHouse 25.x.
    pub fn query_settings(&self) -> Vec<(String, String)> {
        fn has_time64(t: &ChType) -> bool {
            match t {
                ChType::Time64 => true,
                ChType::Nullable(i) | ChType::Array(i) | ChType::LowCardinality(i) => has_time64(i),
                _ => false,
            }
        }
        let mut settings = Vec::new();
        if self.columns.iter().any(|c| has_time64(&c.ch_type)) {
            settings.push(("enable_time_time64_type".into(), "1".into()));
        }
        if self.has_json() {
            // Generally available from ClickHouse 25.3; experimental
            // before (and the setting harmless after).
            settings.push(("allow_experimental_json_type".into(), "1".into()));
        }
        settings
    }

    /// Whether a column is `JSON`, whose inserts read the document's text
    /// ([`DestTable::insert_settings`]).
    fn has_json(&self) -> bool {
        self.columns
            .iter()
            .any(|c| c.ch_type.to_not_null() == ChType::Json)
    }

    /// Settings every insert of rows in this layout needs: a `JSON`
    /// column's value is written as its text.
    pub fn insert_settings(&self) -> Vec<(String, String)> {
        if self.has_json() {
            vec![("input_format_binary_read_json_as_string".into(), "1".into())]
        } else {
            Vec::new()
        }
    }

    /// The column the source names `source`.
    pub fn column_of_source(&self, source: &str) -> Option<&DestColumn> {
        self.columns.iter().find(|c| c.source == source)
    }

    /// Whether `order` may be the ClickHouse table's `ORDER BY`: the
    /// sorting key's columns, each once, in any order. Nothing more: a
    /// delete carries only the replica identity's values (the other
    /// columns are written as their defaults), so a key with another
    /// column would not collapse a deleted row.
    pub fn check_order_by(&self, order: &[String]) -> Result<(), String> {
        let mut given = order.to_vec();
        given.sort();
        let mut key = self.order_by.clone();
        key.sort();
        if given == key {
            return Ok(());
        }
        Err(format!(
            "table {}: order_by = {order:?} must list exactly the replica identity's columns {:?} \
             (in any order): a delete carries only those, so a sorting key with another column \
             would not collapse the row it deletes",
            self.source, self.order_by
        ))
    }

    /// Whether `expr` may be the ClickHouse table's `PARTITION BY`: it may
    /// name no column outside the sorting key. A delete carries only the
    /// replica identity's values (the other columns are written as their
    /// defaults), so its tombstone would land in another partition than
    /// the row, and a query whose filter prunes partitions would still
    /// see the deleted row (or an updated row's old version). Columns are
    /// found as the expression's words (backquoted or bare).
    pub fn check_partition_by(&self, expr: &str) -> Result<(), String> {
        let mut words = Vec::new();
        let mut word = String::new();
        let mut quoted = false;
        for c in expr.chars().chain(std::iter::once(' ')) {
            match c {
                '`' if quoted => {
                    words.push(std::mem::take(&mut word));
                    quoted = false;
                }
                '`' => {
                    words.push(std::mem::take(&mut word));
                    quoted = true;
                }
                c if quoted || c.is_alphanumeric() || c == '_' => word.push(c),
                _ => words.push(std::mem::take(&mut word)),
            }
        }
        // The metadata columns differ between a row's versions and its
        // tombstone too.
        let outside: Vec<&str> = self
            .columns
            .iter()
            .filter(|c| !c.key && words.contains(&c.name))
            .map(|c| c.name.as_str())
            .chain(
                self.meta
                    .names()
                    .into_iter()
                    .filter(|n| words.iter().any(|w| w == n)),
            )
            .collect();
        if outside.is_empty() {
            return Ok(());
        }
        Err(format!(
            "table {}: partition_by = {expr:?} uses {outside:?}, outside the replica identity \
             {:?}: a delete carries only the identity, so its tombstone would land in another \
             partition and a query that prunes partitions would still see the deleted row; \
             partition by the identity's columns, or give the source table REPLICA IDENTITY FULL",
            self.source, self.order_by
        ))
    }

    pub fn column(&self, name: &str) -> Option<&DestColumn> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// How the ClickHouse table's columns as `found` (`system.columns`:
    /// name, type) differ from what this layout writes, if they do: a
    /// column missing, or of another type (a table made by an older
    /// mapping, or changed by hand). RowBinary has no column types of its
    /// own, so rows written to another layout would be misread, not
    /// refused. Columns only ClickHouse has are fine (they take their
    /// defaults).
    pub fn layout_mismatch(&self, found: &[(String, String)]) -> Option<String> {
        let expected = self
            .columns
            .iter()
            .map(|c| (c.name.as_str(), c.ch_type.clone()))
            .chain(self.meta.inserted());
        let mut differences = Vec::new();
        for (name, ch_type) in expected {
            let want = ch_type.to_string();
            match found.iter().find(|(n, _)| n == name) {
                None => differences.push(format!(
                    "column {name:?} is missing (walshadow writes {want})"
                )),
                Some((_, have)) if !same_type_name(have, &want) => differences.push(format!(
                    "column {name:?} is {have}, walshadow writes {want}"
                )),
                Some(_) => {}
            }
        }
        (!differences.is_empty()).then(|| differences.join("; "))
    }
}

/// Type names compared as ClickHouse prints them, spacing aside.
fn same_type_name(a: &str, b: &str) -> bool {
    a.chars()
        .filter(|c| !c.is_whitespace())
        .eq(b.chars().filter(|c| !c.is_whitespace()))
}

/// The ClickHouse type `over` gives column `attr`, or why it cannot.
fn overridden(
    over: TypeOverride,
    attr: &AttributeDesc,
    key: bool,
    types: &[walshadow_types::catalog::TypeDesc],
) -> Result<ChType, String> {
    use crate::types::oid;
    let nullable = |t: ChType| {
        if attr.not_null {
            t
        } else {
            ChType::nullable(t)
        }
    };
    match over {
        TypeOverride::String => Ok(nullable(ChType::String)),
        TypeOverride::Json if key => Err(
            "column_types = \"JSON\" cannot be a key column's: ClickHouse sorts by the key".into(),
        ),
        TypeOverride::Json if matches!(attr.type_oid, oid::JSON | oid::JSONB) => {
            Ok(nullable(ChType::Json))
        }
        TypeOverride::Json => Err("column_types = \"JSON\" is for a json or jsonb column".into()),
        // Floored, distinct keys could become one row.
        TypeOverride::DateTime64(p) if key && p < 6 => Err(format!(
            "column_types = \"DateTime64({p})\" on a key column would make distinct keys one"
        )),
        TypeOverride::DateTime64(p)
            if matches!(attr.type_oid, oid::TIMESTAMP | oid::TIMESTAMPTZ) =>
        {
            Ok(nullable(ChType::DateTime64Utc(p)))
        }
        TypeOverride::DateTime64(_) => {
            Err("column_types = \"DateTime64(p)\" is for a timestamp or timestamptz column".into())
        }
        TypeOverride::Geo(g) if key => Err(format!(
            "column_types = \"{}\" cannot be a key column's",
            g.name()
        )),
        TypeOverride::Geo(g) => {
            let postgis = types.iter().any(|t| {
                t.oid == attr.type_oid
                    && (t.is_extension_type("postgis", "geometry")
                        || t.is_extension_type("postgis", "geography"))
            });
            if postgis {
                Ok(ChType::Geo(g))
            } else {
                Err(format!(
                    "column_types = \"{}\" is for a PostGIS geometry or geography column",
                    g.name()
                ))
            }
        }
    }
}

fn key_columns(
    desc: &RelationDesc,
    table: &str,
    live: &[(usize, &AttributeDesc)],
) -> Result<Vec<String>, SchemaError> {
    let no_key = || SchemaError::NoKey {
        table: table.into(),
    };
    let names: Vec<String> = match desc.replica_identity_kind.as_str() {
        "n" => return Err(no_key()),
        // FULL: the descriptor lists every column; fall back to them if not.
        "f" if desc.replica_identity.is_empty() => {
            live.iter().map(|(_, a)| a.name.clone()).collect()
        }
        _ => desc.replica_identity.clone(),
    };
    if names.is_empty() {
        return Err(no_key());
    }
    for n in &names {
        if !live.iter().any(|(_, a)| &a.name == n) {
            return Err(SchemaError::KeyColumnMissing {
                table: table.into(),
                column: n.clone(),
            });
        }
    }
    Ok(names)
}

/// One change between two descriptors of the same relation that ClickHouse
/// can follow in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaChange {
    /// A new column; `after` is the previous live column in attnum order
    /// (`None`: first).
    AddColumn {
        column: DestColumn,
        after: Option<String>,
    },
    DropColumn {
        name: String,
    },
    RenameColumn {
        attnum: i16,
        from: String,
        to: String,
    },
    /// `DROP NOT NULL`: the column becomes `Nullable`.
    MakeNullable {
        name: String,
        ch_type: ChType,
    },
    /// `ALTER COLUMN … TYPE` to a type every stored value converts to
    /// exactly ([`ChType::widens_to`]).
    Widen {
        name: String,
        from: ChType,
        to: ChType,
    },
    /// `SET NOT NULL`: the column loses `Nullable`. Rows already written may
    /// hold NULL (deletes carry NULL in non-key columns); they become the
    /// type's default, which only deleted or superseded rows can have.
    MakeNotNull {
        name: String,
        ch_type: ChType,
    },
}

/// How `new` differs from `old`, matched by attnum.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SchemaDiff {
    pub changes: Vec<SchemaChange>,
}

impl SchemaDiff {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Classify the differences; a type change or a key change is refused.
    pub fn between(old: &DestTable, new: &DestTable) -> Result<SchemaDiff, SchemaError> {
        let table = new.source.clone();
        let key_attnums = |t: &DestTable| -> Vec<i16> {
            t.order_by
                .iter()
                .filter_map(|n| t.column(n).map(|c| c.attnum))
                .collect()
        };
        if key_attnums(old) != key_attnums(new) {
            return Err(SchemaError::KeyChange {
                table,
                reason: format!(
                    "key columns were {:?}, now {:?}",
                    old.order_by, new.order_by
                ),
            });
        }
        let mut changes = Vec::new();
        for o in &old.columns {
            match new.columns.iter().find(|n| n.attnum == o.attnum) {
                None => changes.push(SchemaChange::DropColumn {
                    name: o.name.clone(),
                }),
                Some(n) => {
                    if n.name != o.name {
                        if o.key {
                            return Err(SchemaError::KeyChange {
                                table,
                                reason: format!(
                                    "key column {:?} was renamed to {:?}, and ClickHouse cannot rename a sorting key column",
                                    o.name, n.name
                                ),
                            });
                        }
                        changes.push(SchemaChange::RenameColumn {
                            attnum: o.attnum,
                            from: o.name.clone(),
                            to: n.name.clone(),
                        });
                    }
                    if n.ch_type != o.ch_type {
                        if n.ch_type == o.ch_type.to_nullable() && !o.key {
                            changes.push(SchemaChange::MakeNullable {
                                name: n.name.clone(),
                                ch_type: n.ch_type.clone(),
                            });
                        } else if n.ch_type == o.ch_type.to_not_null() && !o.key {
                            changes.push(SchemaChange::MakeNotNull {
                                name: n.name.clone(),
                                ch_type: n.ch_type.clone(),
                            });
                        } else if o.ch_type.widens_to(&n.ch_type) && !o.key {
                            // ClickHouse forbids changing a sorting key
                            // column's type.
                            changes.push(SchemaChange::Widen {
                                name: n.name.clone(),
                                from: o.ch_type.clone(),
                                to: n.ch_type.clone(),
                            });
                        } else {
                            return Err(SchemaError::TypeChange {
                                table,
                                column: n.name.clone(),
                                from: o.ch_type.clone(),
                                to: n.ch_type.clone(),
                            });
                        }
                    }
                }
            }
        }
        for (i, n) in new.columns.iter().enumerate() {
            if !old.columns.iter().any(|o| o.attnum == n.attnum) {
                let after = i
                    .checked_sub(1)
                    .and_then(|p| new.columns.get(p))
                    .map(|p| p.name.clone());
                changes.push(SchemaChange::AddColumn {
                    column: n.clone(),
                    after,
                });
            }
        }
        // Drops before renames before adds, so a name freed by one change is
        // free for the next (drop a, rename b to a, add b).
        changes.sort_by_key(|c| match c {
            SchemaChange::DropColumn { .. } => 0,
            SchemaChange::RenameColumn { .. } => 1,
            SchemaChange::MakeNullable { .. }
            | SchemaChange::MakeNotNull { .. }
            | SchemaChange::Widen { .. } => 2,
            SchemaChange::AddColumn { .. } => 3,
        });
        Ok(SchemaDiff { changes })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use walshadow_types::Oid;
    use walshadow_types::catalog::TypeDesc;
    use walshadow_types::catalog::fixtures::{attribute, relation};

    use super::*;
    use crate::types::oid;

    pub(crate) fn attr(attnum: i16, name: &str, type_oid: Oid, not_null: bool) -> AttributeDesc {
        AttributeDesc {
            not_null,
            ..attribute(attnum, name, type_oid)
        }
    }

    /// Table `public.t`, replica identity `kind` on `key`.
    pub(crate) fn rel(
        attributes: Vec<AttributeDesc>,
        key: &[&str],
        kind: &str,
        types: Vec<TypeDesc>,
    ) -> RelationDesc {
        RelationDesc {
            replica_identity_kind: kind.into(),
            ..relation("t", attributes, key, types)
        }
    }

    impl DestTable {
        fn with_policy(mut self, column: &str, policy: ValuePolicy) -> DestTable {
            for c in self.columns.iter_mut().filter(|c| c.name == column) {
                c.out_of_range = policy;
            }
            self
        }
    }

    fn dest(desc: &RelationDesc) -> DestTable {
        DestTable::new(desc, &MetaColumns::default()).unwrap()
    }

    fn shaped(rename: &[(&str, &str)], types: &[(&str, TypeOverride)]) -> DestRules {
        DestRules {
            rename: rename
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            types: types.iter().map(|(a, t)| (a.to_string(), *t)).collect(),
            ..DestRules::default()
        }
    }

    #[test]
    fn renamed_columns_keep_their_source_and_key_by_their_new_names() {
        let d = rel(
            vec![
                attr(1, "id", oid::INT4, true),
                attr(2, "ts", oid::TIMESTAMPTZ, false),
                attr(3, "v", oid::TEXT, false),
            ],
            &["id"],
            "d",
            vec![],
        );
        let m = MetaColumns::default();
        let t = DestTable::with_rules(
            &d,
            &m,
            &shaped(&[("id", "ident"), ("ts", "created_at")], &[]),
        )
        .unwrap();
        let names: Vec<(&str, &str)> = t
            .columns
            .iter()
            .map(|c| (c.source.as_str(), c.name.as_str()))
            .collect();
        assert_eq!(names, [("id", "ident"), ("ts", "created_at"), ("v", "v")]);
        assert_eq!(t.order_by, ["ident"]);
        assert_eq!(t.column_of_source("ts").unwrap().name, "created_at");
        assert!(
            t.create_table_sql("db", "t", &Default::default())
                .contains("ORDER BY (`ident`)")
        );
        // Two columns cannot share a name, nor take a metadata column's.
        let e = DestTable::with_rules(&d, &m, &shaped(&[("ts", "v")], &[])).unwrap_err();
        assert!(matches!(e, SchemaError::ColumnRule { .. }), "{e}");
        assert!(e.to_string().contains("as column \"ts\" is"), "{e}");
        let e = DestTable::with_rules(&d, &m, &shaped(&[("v", "_lsn")], &[])).unwrap_err();
        assert!(matches!(e, SchemaError::MetaNameClash { .. }), "{e}");
        // Swapped names are fine.
        let t = DestTable::with_rules(&d, &m, &shaped(&[("ts", "v"), ("v", "ts")], &[])).unwrap();
        assert_eq!(t.column_of_source("v").unwrap().name, "ts");
        // A source rename of a renamed column (the rule no longer names it)
        // is a rename in ClickHouse.
        let mut later = d.clone();
        later.attributes[1].name = "ts2".into();
        let rules = shaped(&[("ts", "created_at")], &[]);
        let diff = SchemaDiff::between(
            &DestTable::with_rules(&d, &m, &rules).unwrap(),
            &DestTable::with_rules(&later, &m, &rules).unwrap(),
        )
        .unwrap();
        assert_eq!(
            diff.changes,
            [SchemaChange::RenameColumn {
                attnum: 2,
                from: "created_at".into(),
                to: "ts2".into()
            }]
        );
    }

    #[test]
    fn type_overrides_apply_where_they_fit() {
        let d = rel(
            vec![
                attr(1, "id", oid::INT8, true),
                attr(2, "doc", oid::JSONB, false),
                attr(3, "ts", oid::TIMESTAMPTZ, true),
                attr(4, "n", oid::NUMERIC, false),
            ],
            &["id"],
            "d",
            vec![],
        );
        let m = MetaColumns::default();
        let t = DestTable::with_rules(
            &d,
            &m,
            &shaped(
                &[],
                &[
                    ("doc", TypeOverride::Json),
                    ("ts", TypeOverride::DateTime64(3)),
                    ("n", TypeOverride::String),
                    ("id", TypeOverride::String),
                ],
            ),
        )
        .unwrap();
        let types: Vec<String> = t.columns.iter().map(|c| c.ch_type.to_string()).collect();
        assert_eq!(
            types,
            [
                "String",
                "Nullable(JSON)",
                "DateTime64(3, 'UTC')",
                "Nullable(String)"
            ]
        );
        assert_eq!(
            t.insert_settings(),
            [(
                "input_format_binary_read_json_as_string".to_string(),
                "1".to_string()
            )]
        );
        assert!(
            t.query_settings()
                .iter()
                .any(|(k, _)| k == "allow_experimental_json_type")
        );
        assert!(DestTable::new(&d, &m).unwrap().insert_settings().is_empty());
        let refused = |column: &str, over: TypeOverride, key: &[&str]| {
            let d = rel(d.attributes.clone(), key, "d", vec![]);
            let e = DestTable::with_rules(&d, &m, &shaped(&[], &[(column, over)])).unwrap_err();
            assert!(matches!(e, SchemaError::ColumnRule { .. }), "{e}");
            e.to_string()
        };
        assert!(refused("n", TypeOverride::Json, &["id"]).contains("json or jsonb"));
        assert!(refused("doc", TypeOverride::DateTime64(3), &["id"]).contains("timestamp"));
        assert!(refused("doc", TypeOverride::Json, &["doc"]).contains("key"));
        assert!(refused("ts", TypeOverride::DateTime64(0), &["ts"]).contains("distinct keys"));
        // A key keeps its microseconds under DateTime64(6).
        let k = rel(d.attributes.clone(), &["ts"], "d", vec![]);
        assert!(
            DestTable::with_rules(&k, &m, &shaped(&[], &[("ts", TypeOverride::DateTime64(6))]))
                .is_ok()
        );
        // out_of_range = "string" and a type override contradict.
        let mut rules = shaped(&[], &[("ts", TypeOverride::DateTime64(3))]);
        rules
            .values
            .columns
            .insert("ts".into(), ValuePolicy::String);
        let e = DestTable::with_rules(&d, &m, &rules).unwrap_err();
        assert!(e.to_string().contains("drop one of the two"), "{e}");
        // The policy applies to the type asked for.
        let mut rules = shaped(&[], &[("doc", TypeOverride::Json)]);
        rules.values.table = ValuePolicy::Null;
        let t = DestTable::with_rules(&d, &m, &rules).unwrap();
        assert_eq!(t.column("doc").unwrap().out_of_range, ValuePolicy::Null);
    }

    #[test]
    fn layout_skips_dropped_and_marks_keys() {
        let mut dropped = attr(2, "........pg.dropped.2........", 0, false);
        dropped.dropped = true;
        let d = rel(
            vec![
                attr(1, "id", oid::INT4, true),
                dropped,
                attr(3, "v", oid::TEXT, false),
            ],
            &["id"],
            "d",
            vec![],
        );
        let t = dest(&d);
        assert_eq!(t.columns.len(), 2);
        assert_eq!(t.columns[1].position, 2);
        assert!(t.columns[0].key && !t.columns[1].key);
        assert_eq!(
            t.insert_columns(),
            [
                "id",
                "v",
                "_lsn",
                "_seq",
                "_xid",
                "_commit_time",
                "_is_deleted"
            ]
        );
        assert!(!t.has_nullable_key());
    }

    #[test]
    fn value_policies_shape_the_columns_they_can_act_on() {
        let d = rel(
            vec![
                attr(1, "day", oid::DATE, true),
                attr(2, "amount", oid::NUMERIC, true),
                attr(3, "note", oid::TEXT, true),
                attr(4, "at", oid::TIMESTAMPTZ, false),
            ],
            &["day"],
            "d",
            vec![],
        );
        let rules = |table: ValuePolicy, columns: &[(&str, ValuePolicy)]| ValueRules {
            table,
            columns: columns.iter().map(|(c, p)| (c.to_string(), *p)).collect(),
        };
        let t = DestTable::with_values(
            &d,
            &MetaColumns::default(),
            &rules(ValuePolicy::String, &[("day", ValuePolicy::Stop)]),
        )
        .unwrap();
        let shape = |t: &DestTable| -> Vec<(ChType, ValuePolicy)> {
            t.columns
                .iter()
                .map(|c| (c.ch_type.clone(), c.out_of_range))
                .collect()
        };
        assert_eq!(
            shape(&t),
            [
                (ChType::Date32, ValuePolicy::Stop),
                // Unconstrained numeric is a String already: no policy.
                (ChType::String, ValuePolicy::Stop),
                (ChType::String, ValuePolicy::Stop),
                (ChType::nullable(ChType::String), ValuePolicy::String),
            ]
        );
        // null or clamp on the key: refused, naming the column and string.
        for policy in [ValuePolicy::Null, ValuePolicy::Clamp] {
            let e = DestTable::with_values(&d, &MetaColumns::default(), &rules(policy, &[]))
                .unwrap_err();
            assert!(
                matches!(&e, SchemaError::KeyPolicy { column, .. } if column == "day")
                    && e.to_string().contains("\"string\""),
                "{e}"
            );
        }
        let t = DestTable::with_values(
            &d,
            &MetaColumns::default(),
            &rules(ValuePolicy::Stop, &[("at", ValuePolicy::Null)]),
        )
        .unwrap();
        assert_eq!(
            t,
            dest(&d).with_policy("at", ValuePolicy::Null),
            "already Nullable"
        );
    }

    #[test]
    fn layout_mismatch_names_each_difference() {
        let d = rel(
            vec![
                attr(1, "id", oid::INT4, true),
                attr(2, "m", oid::MONEY, false),
            ],
            &["id"],
            "d",
            vec![],
        );
        let t = dest(&d);
        let mut found: Vec<(String, String)> = [
            ("id", "Int32"),
            ("m", "Nullable(Decimal(19,2))"),
            ("_lsn", "UInt64"),
            ("_seq", "UInt64"),
            ("_xid", "UInt32"),
            ("_commit_time", "DateTime64(6, 'UTC')"),
            ("_is_deleted", "UInt8"),
            ("_version", "UInt128"),
            ("added_by_hand", "String"),
        ]
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
        assert_eq!(t.layout_mismatch(&found), None);
        found[1].1 = "Nullable(Decimal(18, 2))".into();
        found.retain(|(n, _)| n != "_xid");
        let diff = t.layout_mismatch(&found).unwrap();
        assert!(
            diff.contains(
                "\"m\" is Nullable(Decimal(18, 2)), walshadow writes Nullable(Decimal(19, 2))"
            ) && diff.contains("\"_xid\" is missing"),
            "{diff}"
        );
    }

    #[test]
    fn refusals_name_table_and_remedy() {
        let d = rel(vec![attr(1, "id", oid::INT4, true)], &[], "d", vec![]);
        let e = DestTable::new(&d, &MetaColumns::default()).unwrap_err();
        assert!(matches!(e, SchemaError::NoKey { .. }));
        let msg = e.to_string();
        assert!(
            msg.contains("public.t") && msg.contains("REPLICA IDENTITY FULL"),
            "{msg}"
        );

        let d = rel(vec![attr(1, "id", oid::INT4, true)], &["id"], "n", vec![]);
        assert!(matches!(
            DestTable::new(&d, &MetaColumns::default()),
            Err(SchemaError::NoKey { .. })
        ));

        let d = rel(
            vec![attr(1, "_lsn", oid::INT4, true)],
            &["_lsn"],
            "d",
            vec![],
        );
        assert!(matches!(
            DestTable::new(&d, &MetaColumns::default()),
            Err(SchemaError::MetaNameClash { .. })
        ));

        let d = rel(vec![attr(1, "p", 4072, true)], &["p"], "d", vec![]);
        let e = DestTable::new(&d, &MetaColumns::default()).unwrap_err();
        assert!(
            e.to_string().contains("public.t") && e.to_string().contains("\"p\""),
            "{e}"
        );
    }

    #[test]
    fn full_identity_keys_every_column() {
        let d = rel(
            vec![
                attr(1, "a", oid::INT4, false),
                attr(2, "b", oid::TEXT, true),
            ],
            &[],
            "f",
            vec![],
        );
        let t = dest(&d);
        assert_eq!(t.order_by, ["a", "b"]);
        assert!(t.has_nullable_key());
    }

    #[test]
    fn diff_classifies() {
        let old = rel(
            vec![
                attr(1, "id", oid::INT4, true),
                attr(2, "a", oid::TEXT, false),
                attr(3, "b", oid::INT8, true),
                attr(4, "c", oid::INT8, false),
            ],
            &["id"],
            "d",
            vec![],
        );
        let mut new = old.clone();
        new.attributes[1].dropped = true; // drop a
        new.attributes[2].name = "b2".into(); // rename b
        new.attributes[2].not_null = false; // b drops NOT NULL
        new.attributes[3].not_null = true; // c sets NOT NULL
        new.attributes.push(attr(5, "d", oid::BOOL, false)); // add d
        let diff = SchemaDiff::between(&dest(&old), &dest(&new)).unwrap();
        assert_eq!(
            diff.changes,
            vec![
                SchemaChange::DropColumn { name: "a".into() },
                SchemaChange::RenameColumn {
                    attnum: 3,
                    from: "b".into(),
                    to: "b2".into()
                },
                SchemaChange::MakeNullable {
                    name: "b2".into(),
                    ch_type: ChType::nullable(ChType::Int64)
                },
                SchemaChange::MakeNotNull {
                    name: "c".into(),
                    ch_type: ChType::Int64
                },
                SchemaChange::AddColumn {
                    column: dest(&new).columns[3].clone(),
                    after: Some("c".into())
                },
            ]
        );

        // int8 to text: ClickHouse converts the digits as PostgreSQL does.
        let mut widened = old.clone();
        widened.attributes[2].type_oid = oid::TEXT;
        let d = SchemaDiff::between(&dest(&old), &dest(&widened)).unwrap();
        assert_eq!(
            d.changes,
            [SchemaChange::Widen {
                name: "b".into(),
                from: ChType::Int64,
                to: ChType::String
            }]
        );
        let sql = d.ddl("db", "t", crate::OnCluster(None), |_| None).unwrap();
        assert_eq!(sql, ["ALTER TABLE `db`.`t` MODIFY COLUMN `b` String"]);

        let mut retyped = old.clone();
        retyped.attributes[2].type_oid = oid::FLOAT8;
        let e = SchemaDiff::between(&dest(&old), &dest(&retyped)).unwrap_err();
        assert!(matches!(e, SchemaError::TypeChange { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("load the table again: walshadow table resync public.t"),
            "{e}"
        );
        // A key column cannot change type in ClickHouse, widening or not.
        let mut key_widened = old.clone();
        key_widened.attributes[0].type_oid = oid::INT8;
        assert!(matches!(
            SchemaDiff::between(&dest(&old), &dest(&key_widened)),
            Err(SchemaError::TypeChange { .. })
        ));

        let mut rekeyed = old.clone();
        rekeyed.replica_identity = vec!["id".into(), "b".into()];
        assert!(matches!(
            SchemaDiff::between(&dest(&old), &dest(&rekeyed)),
            Err(SchemaError::KeyChange { .. })
        ));

        let mut key_renamed = old.clone();
        key_renamed.attributes[0].name = "ident".into();
        key_renamed.replica_identity = vec!["ident".into()];
        let e = SchemaDiff::between(&dest(&old), &dest(&key_renamed)).unwrap_err();
        assert!(
            e.to_string().contains("cannot rename a sorting key column"),
            "{e}"
        );
    }
}
