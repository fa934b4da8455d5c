//! Which tables stream: those pinned in the config file, and those opted
//! in by rows of the config table in the source database, read from the
//! WAL like any other change so that an opt-in takes effect exactly at its
//! own commit LSN `S`.
//!
//! The config table (created by `walshadow init`, name in `[source]
//! config_table`):
//!
//! ```sql
//! CREATE TABLE walshadow.tables (
//!     schema_name  text NOT NULL,
//!     table_name   text NOT NULL,
//!     replicate    boolean NOT NULL DEFAULT true,
//!     initial_load text CHECK (…), -- none (NULL) | copy | base_backup | object_store
//!     destination  text,           -- the ClickHouse table (NULL: the default name)
//!     resync       bigint NOT NULL DEFAULT 0, -- raised: load again, swap in
//!     exclude_columns text[],          -- columns left out of ClickHouse
//!     unsupported_columns text CHECK (…), -- stop (NULL) | skip
//!     out_of_range text CHECK (…),     -- stop (NULL) | null | clamp | string
//!     out_of_range_columns jsonb CHECK (…), -- {"column": policy, …}
//!     PRIMARY KEY (schema_name, table_name)
//! );
//! ```
//!
//! A row with `replicate = true` opts its table in; `replicate = false`
//! or deleting the row opts it out. Changes apply after the rest of their
//! transaction: rows the opting-in transaction writes to the table are
//! part of what its initial load reads (the snapshot is taken after `S`).

use std::collections::{BTreeMap, HashMap};

use walshadow_config::{OutOfRange, TableConfig, UnsupportedColumns};
use walshadow_emitter::{ColumnRules, DestRules, TypeOverride, ValuePolicy, ValueRules};
use walshadow_rows::{RowDecoder, Value};

/// The column rules of the pinned tables that have any.
pub fn column_rules(tables: &BTreeMap<String, TableConfig>) -> HashMap<String, ColumnRules> {
    tables
        .iter()
        .map(|(key, t)| (key.clone(), table_column_rules(t)))
        .filter(|(_, r)| !r.is_empty())
        .collect()
}

/// The column rules of one config-file section (a table's or a pattern's).
pub fn table_column_rules(t: &TableConfig) -> ColumnRules {
    let policy = |p: OutOfRange| match p {
        OutOfRange::Stop => ValuePolicy::Stop,
        OutOfRange::Null => ValuePolicy::Null,
        OutOfRange::Clamp => ValuePolicy::Clamp,
        OutOfRange::String => ValuePolicy::String,
    };
    ColumnRules {
        exclude: t.exclude_columns.iter().cloned().collect(),
        include: t.include_columns.iter().cloned().collect(),
        skip_unsupported: t.unsupported_columns == UnsupportedColumns::Skip,
        values: ValueRules {
            table: policy(t.out_of_range),
            columns: t
                .out_of_range_columns
                .iter()
                .map(|(c, p)| (c.clone(), policy(*p)))
                .collect(),
        },
        rename: t.rename_columns.clone(),
        types: t.column_types.clone(),
    }
}

/// An opt-in or opt-out read from the config table.
// One per config-table row change, short-lived: no need to box `Set`.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopeChange {
    /// A row was written: `replicate`, `initial_load` and `destination`
    /// as it has them (a config table made by an older `init` has no
    /// `destination` column).
    Set {
        key: String,
        replicate: bool,
        initial_load: Option<String>,
        destination: Option<String>,
        /// The row's `resync` counter (absent in older config tables).
        resync: Option<i64>,
        /// The row's column rules.
        columns: RowColumnRules,
    },
    /// The row was deleted (or its key changed away).
    Remove { key: String },
}

impl ScopeChange {
    /// The table (or pattern) the change is about.
    pub fn key(&self) -> &String {
        match self {
            ScopeChange::Set { key, .. } | ScopeChange::Remove { key } => key,
        }
    }
}

/// The fields of a config-table row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigRow {
    /// The table's key ([`walshadow_types::table_key`]).
    pub key: String,
    /// `None` when the tuple does not carry it (an old key).
    pub replicate: Option<bool>,
    pub initial_load: Option<String>,
    pub destination: Option<String>,
    pub resync: Option<i64>,
    pub columns: RowColumnRules,
}

/// A config-table row's column rules (NULL or absent: none).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RowColumnRules {
    /// `exclude_columns text[]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// `include_columns text[]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<String>,
    /// `unsupported_columns = 'skip'`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_unsupported: bool,
    /// `out_of_range` (a [`ValuePolicy::name`]; absent: stop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_of_range: Option<String>,
    /// `out_of_range_columns`: column name to policy name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub out_of_range_columns: BTreeMap<String, String>,
    /// `rename_columns`: source column name to ClickHouse column name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rename_columns: BTreeMap<String, String>,
    /// `column_types`: column name to a [`TypeOverride::name`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub column_types: BTreeMap<String, String>,
}

impl RowColumnRules {
    pub fn is_empty(&self) -> bool {
        self.exclude.is_empty()
            && self.include.is_empty()
            && !self.skip_unsupported
            && self.out_of_range.is_none()
            && self.out_of_range_columns.is_empty()
            && self.rename_columns.is_empty()
            && self.column_types.is_empty()
    }

    /// From the row's `out_of_range` text.
    pub fn set_out_of_range(&mut self, text: &str) {
        self.out_of_range = ValuePolicy::parse(text)
            .filter(|p| *p != ValuePolicy::Stop)
            .map(|p| p.name().to_owned());
    }

    /// From the row's `out_of_range_columns` JSON, which the config
    /// table's check keeps an object of policy names.
    pub fn set_out_of_range_columns(&mut self, json: &str) {
        self.out_of_range_columns =
            serde_json::from_str::<BTreeMap<String, serde_json::Value>>(json)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(c, p)| {
                    let p = ValuePolicy::parse(p.as_str()?)?;
                    Some((c, p.name().to_owned()))
                })
                .collect();
    }

    /// From the row's `rename_columns` JSON, an object of names (the
    /// config table's check); a value that is not a name is skipped.
    pub fn set_rename_columns(&mut self, json: &str) {
        self.rename_columns = serde_json::from_str::<BTreeMap<String, serde_json::Value>>(json)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(c, n)| Some((c, n.as_str()?.to_owned())))
            .collect();
    }

    /// From the row's `column_types` JSON, an object of type names (the
    /// config table's check); one walshadow does not know is skipped.
    pub fn set_column_types(&mut self, json: &str) {
        self.column_types = serde_json::from_str::<BTreeMap<String, serde_json::Value>>(json)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(c, t)| {
                let t = TypeOverride::parse(t.as_str()?)?;
                Some((c, t.name()))
            })
            .collect();
    }

    /// The layout part of `rules` (policies, names, types), as recorded in
    /// `progress.json` ([`crate::progress::TableProgress::layout_rules`]).
    pub fn from_dest(rules: &DestRules) -> RowColumnRules {
        RowColumnRules {
            out_of_range: Some(rules.values.table)
                .filter(|p| *p != ValuePolicy::Stop)
                .map(|p| p.name().to_owned()),
            out_of_range_columns: rules
                .values
                .columns
                .iter()
                .map(|(c, p)| (c.clone(), p.name().to_owned()))
                .collect(),
            rename_columns: rules.rename.clone(),
            column_types: rules
                .types
                .iter()
                .map(|(c, t)| (c.clone(), t.name()))
                .collect(),
            ..RowColumnRules::default()
        }
    }

    /// The rules; a policy name the config table's checks would refuse
    /// (a row written before them) reads as `stop`.
    pub fn rules(&self) -> ColumnRules {
        let policy = |name: &str| ValuePolicy::parse(name).unwrap_or_default();
        ColumnRules {
            exclude: self.exclude.iter().cloned().collect(),
            include: self.include.iter().cloned().collect(),
            skip_unsupported: self.skip_unsupported,
            values: ValueRules {
                table: self.out_of_range.as_deref().map(policy).unwrap_or_default(),
                columns: self
                    .out_of_range_columns
                    .iter()
                    .map(|(c, p)| (c.clone(), policy(p)))
                    .collect(),
            },
            rename: self.rename_columns.clone(),
            types: self
                .column_types
                .iter()
                .filter_map(|(c, t)| Some((c.clone(), TypeOverride::parse(t)?)))
                .collect(),
        }
    }
}

/// The non-empty names of a `text[]`.
fn names(a: &walshadow_rows::ArrayValue) -> Vec<String> {
    a.elements
        .iter()
        .filter_map(|e| match e {
            Value::Text(t) if !t.is_empty() => Some(t.clone()),
            _ => None,
        })
        .collect()
}

/// The fields of a config-table row decoded by `decoder`; `None` if the
/// key columns are missing or NULL.
pub fn config_row(decoder: &RowDecoder, values: &[Value]) -> Option<ConfigRow> {
    let mut schema = None;
    let mut table = None;
    let mut replicate = None;
    let mut initial_load = None;
    let mut destination = None;
    let mut resync = None;
    let mut columns = RowColumnRules::default();
    for (name, v) in decoder.column_names().zip(values) {
        match (name, v) {
            ("schema_name", Value::Text(t)) => schema = Some(t.clone()),
            ("table_name", Value::Text(t)) => table = Some(t.clone()),
            ("replicate", Value::Bool(b)) => replicate = Some(*b),
            ("initial_load", Value::Text(t)) => initial_load = Some(t.clone()),
            ("destination", Value::Text(t)) if !t.is_empty() => destination = Some(t.clone()),
            ("resync", Value::Int64(n)) => resync = Some(*n),
            ("exclude_columns", Value::Array(a)) => columns.exclude = names(a),
            ("include_columns", Value::Array(a)) => columns.include = names(a),
            ("unsupported_columns", Value::Text(t)) => {
                columns.skip_unsupported = t.eq_ignore_ascii_case("skip");
            }
            ("out_of_range", Value::Text(t)) => columns.set_out_of_range(t),
            ("out_of_range_columns", Value::Jsonb(j)) => columns.set_out_of_range_columns(j),
            ("rename_columns", Value::Jsonb(j)) => columns.set_rename_columns(j),
            ("column_types", Value::Jsonb(j)) => columns.set_column_types(j),
            _ => {}
        }
    }
    Some(ConfigRow {
        key: walshadow_types::table_key(&schema?, &table?),
        replicate,
        initial_load,
        destination,
        resync,
        columns,
    })
}
