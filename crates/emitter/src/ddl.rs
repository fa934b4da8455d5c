//! ClickHouse DDL for destination tables.
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS `db`.`orders`
//! (
//!     `id` Int64,
//!     `note` Nullable(String),
//!     `_lsn` UInt64,
//!     `_seq` UInt64,
//!     `_xid` UInt32,
//!     `_commit_time` DateTime64(6, 'UTC'),
//!     `_is_deleted` UInt8,
//!     `_version` UInt128 MATERIALIZED bitOr(bitShiftLeft(toUInt128(`_lsn`), 64), toUInt128(`_seq`))
//! )
//! ENGINE = ReplacingMergeTree(`_version`, `_is_deleted`)
//! ORDER BY (`id`)
//! SETTINGS non_replicated_deduplication_window = 1000
//! ```
//!
//! `_version` orders every change: a later commit wins, and within one
//! commit the later record. `SELECT … FINAL` keeps the highest version per
//! key and drops it when it is a delete. `non_replicated_deduplication_window`
//! makes ClickHouse remember the `insert_deduplication_token`s of the last N
//! inserts, so a retried batch is a no-op (replicated tables have their own
//! window in Keeper, `replicated_deduplication_window`).

use std::fmt::Write as _;

use walshadow_rows::Value;
use walshadow_types::catalog::RelationDesc;

use crate::datetime;
use crate::pg_text;
use crate::rowbinary::EncodeErrorKind;
use crate::schema::{DestColumn, DestTable, MetaColumns, SchemaChange, SchemaDiff, SchemaError};
use crate::topology::{OnCluster, Topology};
use crate::types::ChType;

/// Table settings of created tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSettings {
    /// Which `ReplacingMergeTree`.
    pub engine: TableEngine,
    /// The deduplication window (`non_replicated_deduplication_window`, or
    /// `replicated_deduplication_window` for a replicated engine): how many recent inserts'
    /// deduplication tokens ClickHouse remembers per table. Must exceed the
    /// number of batches that can be in doubt at once (retries of one batch
    /// need 1).
    pub dedup_window: u64,
    /// `PARTITION BY`, a ClickHouse expression as the operator wrote it.
    pub partition_by: Option<String>,
    /// `ORDER BY`: the sorting key's columns in this order (empty: the
    /// replica identity's). See [`DestTable::check_order_by`].
    pub order_by: Vec<String>,
    /// More `SETTINGS`: name, and the value as a ClickHouse literal.
    pub extra: Vec<(String, String)>,
    /// One server or a cluster: `ON CLUSTER`, and the replicated engine
    /// a cluster needs.
    pub topology: Topology,
}

impl Default for TableSettings {
    fn default() -> Self {
        TableSettings {
            engine: TableEngine::Replacing,
            dedup_window: 1000,
            partition_by: None,
            order_by: Vec::new(),
            extra: Vec::new(),
            topology: Topology::Server,
        }
    }
}

/// `` `name` `` with backslash and backtick escaped, as ClickHouse's lexer
/// reads back-quoted identifiers.
pub fn quote_ident(name: &str) -> String {
    let mut s = String::with_capacity(name.len() + 2);
    s.push('`');
    for c in name.chars() {
        if c == '\\' || c == '`' {
            s.push('\\');
        }
        s.push(c);
    }
    s.push('`');
    s
}

/// `'text'` with backslash and quote escaped.
pub fn quote_string(text: &str) -> String {
    quote_bytes(text.as_bytes())
}

/// A string literal from arbitrary bytes (non-UTF-8 and control bytes as
/// `\xHH`, which ClickHouse string literals accept).
fn quote_bytes(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() + 2);
    s.push('\'');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => s.push_str("\\\\"),
                '\'' => s.push_str("\\'"),
                c if c.is_control() => {
                    let mut buf = [0u8; 4];
                    for b in c.encode_utf8(&mut buf).bytes() {
                        let _ = write!(s, "\\x{b:02X}");
                    }
                }
                c => s.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(s, "\\x{b:02X}");
        }
    }
    s.push('\'');
    s
}

pub fn create_database_sql(database: &str, on: OnCluster<'_>) -> String {
    format!(
        "CREATE DATABASE IF NOT EXISTS {}{on}",
        quote_ident(database)
    )
}

/// `CREATE TABLE IF NOT EXISTS` for `desc` with default [`TableSettings`].
pub fn create_table_sql(
    database: &str,
    table: &str,
    desc: &RelationDesc,
    meta: &MetaColumns,
) -> Result<String, SchemaError> {
    let dest = DestTable::new(desc, meta)?;
    Ok(dest.create_table_sql(database, table, &TableSettings::default()))
}

impl DestTable {
    /// `CREATE TABLE IF NOT EXISTS` for this layout.
    pub fn create_table_sql(
        &self,
        database: &str,
        table: &str,
        settings: &TableSettings,
    ) -> String {
        let m = &self.meta;
        let mut sql = format!(
            "CREATE TABLE IF NOT EXISTS {}.{}{}\n(\n",
            quote_ident(database),
            quote_ident(table),
            settings.topology.on_cluster()
        );
        for c in &self.columns {
            let _ = writeln!(sql, "    {} {},", quote_ident(&c.name), c.ch_type);
        }
        for (name, ty) in m.inserted() {
            let _ = writeln!(sql, "    {} {},", quote_ident(name), ty);
        }
        let _ = writeln!(
            sql,
            "    {} UInt128 MATERIALIZED bitOr(bitShiftLeft(toUInt128({}), 64), toUInt128({}))",
            quote_ident(&m.version),
            quote_ident(&m.lsn),
            quote_ident(&m.seq)
        );
        let order = if settings.order_by.is_empty() {
            &self.order_by
        } else {
            &settings.order_by
        };
        let key: Vec<String> = order.iter().map(|k| quote_ident(k)).collect();
        // A cluster's tables are replicated whatever `engine` says: a
        // plain one on each host would hold only the rows sent to it. A
        // Replicated database gives them its own path (it refuses ours).
        let engine = match (&settings.topology, settings.engine) {
            (Topology::Cluster(_), TableEngine::Replacing) => TableEngine::Replicated,
            (Topology::ReplicatedDatabase { shared: false, .. }, TableEngine::Replacing) => {
                TableEngine::Replicated
            }
            (_, e) => e,
        };
        let own_path = matches!(settings.topology, Topology::ReplicatedDatabase { .. });
        let (engine, window) = match engine {
            TableEngine::Replicated if own_path => (
                "ReplicatedReplacingMergeTree(".to_owned(),
                "replicated_deduplication_window",
            ),
            TableEngine::Replacing => (
                "ReplacingMergeTree(".to_owned(),
                "non_replicated_deduplication_window",
            ),
            TableEngine::Replicated => (
                "ReplicatedReplacingMergeTree('/clickhouse/tables/{uuid}/{shard}', '{replica}', "
                    .to_owned(),
                "replicated_deduplication_window",
            ),
            TableEngine::Shared => (
                "SharedReplacingMergeTree(".to_owned(),
                "replicated_deduplication_window",
            ),
        };
        let _ = write!(
            sql,
            ")\nENGINE = {engine}{}, {})\n",
            quote_ident(&m.version),
            quote_ident(&m.is_deleted),
        );
        if let Some(p) = &settings.partition_by {
            let _ = writeln!(sql, "PARTITION BY {p}");
        }
        let _ = write!(
            sql,
            "ORDER BY ({})\nSETTINGS {window} = {}",
            key.join(", "),
            settings.dedup_window
        );
        if self.has_nullable_key() {
            sql.push_str(", allow_nullable_key = 1");
        }
        for (name, value) in &settings.extra {
            let _ = write!(sql, ", {name} = {value}");
        }
        sql
    }
}

/// The `Distributed` table `name` reading `table` on every shard of the
/// cluster, made again (`CREATE OR REPLACE`) so it follows `table`'s
/// columns after each change. `None` on one server.
pub fn distributed_table_sql(
    database: &str,
    table: &str,
    name: &str,
    topology: &Topology,
) -> Option<String> {
    let cluster = topology.distributed_cluster(database)?;
    Some(format!(
        "CREATE OR REPLACE TABLE {db}.{name}{on} AS {db}.{table} ENGINE = Distributed({}, {}, {})",
        quote_string(cluster),
        quote_string(database),
        quote_string(table),
        db = quote_ident(database),
        name = quote_ident(name),
        on = topology.on_cluster(),
        table = quote_ident(table),
    ))
}

fn alter(database: &str, table: &str, on: OnCluster<'_>) -> String {
    format!(
        "ALTER TABLE {}.{}{on}",
        quote_ident(database),
        quote_ident(table)
    )
}

/// `ADD COLUMN`, placed after `after` (or first). A column added in
/// PostgreSQL with a default (`attmissingval`) gets it as the ClickHouse
/// `DEFAULT`, so rows written before the change read back with the value
/// PostgreSQL shows for them.
pub fn add_column_sql(
    database: &str,
    table: &str,
    on: OnCluster<'_>,
    column: &DestColumn,
    after: Option<&str>,
    default: Option<&Value>,
) -> Result<String, EncodeErrorKind> {
    let mut sql = format!(
        "{} ADD COLUMN IF NOT EXISTS {} {}",
        alter(database, table, on),
        quote_ident(&column.name),
        column.ch_type
    );
    if let Some(v) = default {
        let _ = write!(sql, " DEFAULT {}", default_literal(column, v)?);
    }
    match after {
        Some(a) => {
            let _ = write!(sql, " AFTER {}", quote_ident(a));
        }
        None => sql.push_str(" FIRST"),
    }
    Ok(sql)
}

pub fn drop_column_sql(database: &str, table: &str, on: OnCluster<'_>, column: &str) -> String {
    format!(
        "{} DROP COLUMN IF EXISTS {}",
        alter(database, table, on),
        quote_ident(column)
    )
}

pub fn rename_column_sql(
    database: &str,
    table: &str,
    on: OnCluster<'_>,
    from: &str,
    to: &str,
) -> String {
    format!(
        "{} RENAME COLUMN IF EXISTS {} TO {}",
        alter(database, table, on),
        quote_ident(from),
        quote_ident(to)
    )
}

/// `MODIFY COLUMN` to a nullable type or from one. ClickHouse refuses to
/// drop `Nullable` without a `DEFAULT` for the NULLs already stored, so that
/// case carries the type's default and removes it again afterwards.
pub fn modify_nullability_sql(
    database: &str,
    table: &str,
    on: OnCluster<'_>,
    column: &str,
    ch_type: &ChType,
) -> Vec<String> {
    let alter = alter(database, table, on);
    let col = quote_ident(column);
    if ch_type.is_nullable() {
        vec![format!("{alter} MODIFY COLUMN {col} {ch_type}")]
    } else {
        vec![
            format!(
                "{alter} MODIFY COLUMN {col} {ch_type} DEFAULT defaultValueOfTypeName({})",
                quote_string(&ch_type.to_string())
            ),
            format!("{alter} MODIFY COLUMN {col} REMOVE DEFAULT"),
        ]
    }
}

impl SchemaDiff {
    /// The statements that bring the destination table from the old layout
    /// to the new one. `default_of` gives the decoded `attmissingval` of an
    /// added column, if it has one.
    pub fn ddl(
        &self,
        database: &str,
        table: &str,
        on: OnCluster<'_>,
        default_of: impl Fn(&DestColumn) -> Option<Value>,
    ) -> Result<Vec<String>, SchemaError> {
        let mut out = Vec::new();
        // Drops first: a rename may take a dropped column's name.
        for change in &self.changes {
            if let SchemaChange::DropColumn { name } = change {
                out.push(drop_column_sql(database, table, on, name));
            }
        }
        // Renames that take each other's names (a→b, b→a) go through a
        // temporary name each: ClickHouse refuses a rename onto a live column.
        let renames: Vec<(i16, &str, &str)> = self
            .changes
            .iter()
            .filter_map(|c| match c {
                SchemaChange::RenameColumn { attnum, from, to } => {
                    Some((*attnum, from.as_str(), to.as_str()))
                }
                _ => None,
            })
            .collect();
        let crossing = renames
            .iter()
            .any(|(_, _, to)| renames.iter().any(|(_, from, _)| from == to));
        if crossing {
            for (attnum, from, _) in &renames {
                let tmp = format!("__walshadow_rename_{attnum}");
                out.push(rename_column_sql(database, table, on, from, &tmp));
            }
            for (attnum, _, to) in &renames {
                let tmp = format!("__walshadow_rename_{attnum}");
                out.push(rename_column_sql(database, table, on, &tmp, to));
            }
        } else {
            for (_, from, to) in &renames {
                out.push(rename_column_sql(database, table, on, from, to));
            }
        }
        for change in &self.changes {
            match change {
                SchemaChange::DropColumn { .. } | SchemaChange::RenameColumn { .. } => {}
                SchemaChange::MakeNullable { name, ch_type }
                | SchemaChange::MakeNotNull { name, ch_type } => {
                    out.extend(modify_nullability_sql(database, table, on, name, ch_type))
                }
                SchemaChange::Widen { name, to, .. } => out.push(format!(
                    "{} MODIFY COLUMN {} {to}",
                    alter(database, table, on),
                    quote_ident(name)
                )),
                SchemaChange::AddColumn { column, after } => {
                    let default = default_of(column);
                    let sql = add_column_sql(
                        database,
                        table,
                        on,
                        column,
                        after.as_deref(),
                        default.as_ref(),
                    )
                    .map_err(|kind| SchemaError::BadDefault {
                        table: table.into(),
                        column: column.name.clone(),
                        reason: kind.to_string(),
                    })?;
                    out.push(sql)
                }
            }
        }
        Ok(out)
    }
}

/// The `DEFAULT` of an added column: `value` as its out_of_range policy
/// writes it, the same as the encoder would (NULL, or the clamped date,
/// in array elements too).
fn default_literal(column: &DestColumn, value: &Value) -> Result<String, EncodeErrorKind> {
    use crate::columns::ValuePolicy;
    match literal(&column.ch_type, value) {
        Err(e) if e.is_out_of_range() => match column.out_of_range {
            ValuePolicy::Null | ValuePolicy::Clamp => {
                let replaced = under_policy(value, column.out_of_range);
                literal(&column.ch_type, &replaced).map_err(|_| e)
            }
            ValuePolicy::Stop | ValuePolicy::String => Err(e),
        },
        r => r,
    }
}

/// `value` with each date or timestamp ClickHouse cannot hold (and, for
/// `null`, each numeric NaN or infinity) replaced as `policy` says.
fn under_policy(value: &Value, policy: crate::columns::ValuePolicy) -> Value {
    use crate::columns::ValuePolicy;
    let null = policy == ValuePolicy::Null;
    match value {
        Value::Array(a) => Value::Array(walshadow_rows::ArrayValue {
            elements: a.elements.iter().map(|e| under_policy(e, policy)).collect(),
            ..a.clone()
        }),
        Value::Date(d) if datetime::date32(*d).is_none() => {
            let pg = i64::from(datetime::date32_clamped(*d)) - datetime::PG_EPOCH_UNIX_DAYS;
            match i32::try_from(pg) {
                Ok(pg) if !null => Value::Date(pg),
                _ => Value::Null,
            }
        }
        Value::Timestamp(t) | Value::TimestampTz(t) if datetime::datetime64(*t).is_none() => {
            let pg = datetime::datetime64_clamped(*t) - datetime::PG_EPOCH_UNIX_MICROS;
            match value {
                _ if null => Value::Null,
                Value::Timestamp(_) => Value::Timestamp(pg),
                _ => Value::TimestampTz(pg),
            }
        }
        Value::Numeric(walshadow_rows::Numeric::NaN) if null => Value::Null,
        other => other.clone(),
    }
}

/// `(1.5, 2.0)::Point`, `[[(0.0, 0.0), …]]::Polygon`, …; an empty point
/// `(nan, nan)`, an empty anything else `[]`.
fn geo_literal(shape: walshadow_types::GeoShape, p: &walshadow_rows::geometry::Planar) -> String {
    use walshadow_rows::geometry::Planar as P;
    let point = |[x, y]: [f64; 2]| format!("({x:?}, {y:?})");
    let points = |ps: &[[f64; 2]]| {
        let items: Vec<String> = ps.iter().copied().map(point).collect();
        format!("[{}]", items.join(", "))
    };
    let rings = |rs: &[Vec<[f64; 2]>]| {
        let items: Vec<String> = rs.iter().map(|r| points(r)).collect();
        format!("[{}]", items.join(", "))
    };
    let body = match p {
        P::Point(xy) => point(xy.unwrap_or([f64::NAN; 2])),
        P::LineString(ps) => points(ps),
        P::Polygon(rs) | P::MultiLineString(rs) => rings(rs),
        P::MultiPolygon(polys) => {
            let items: Vec<String> = polys.iter().map(|rs| rings(rs)).collect();
            format!("[{}]", items.join(", "))
        }
    };
    format!("{body}::{}", shape.name())
}

/// `[1.5, -2.0]::Array(Float32)`.
fn vector_literal(v: &[f32]) -> String {
    let floats: Vec<String> = v.iter().map(|f| format!("{f:?}")).collect();
    format!("[{}]::Array(Float32)", floats.join(", "))
}

/// The engines walshadow creates tables with: the `ReplacingMergeTree`
/// family, which collapses a row's versions by `_version` and drops
/// deleted rows by `_is_deleted`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TableEngine {
    #[default]
    Replacing,
    /// Replicated through Keeper, at `/clickhouse/tables/{uuid}/{shard}`
    /// as replica `{replica}`: `{uuid}` makes every table's path its own,
    /// so a load's staging copy (`CREATE TABLE … AS`) and the swap by
    /// `EXCHANGE TABLES` never share one.
    Replicated,
    /// ClickHouse Cloud's.
    Shared,
}

/// A ClickHouse literal of type `ty` for `value` (for `DEFAULT`).
pub fn literal(ty: &ChType, value: &Value) -> Result<String, EncodeErrorKind> {
    let mismatch = || EncodeErrorKind::Mismatch {
        ch_type: ty.to_string(),
        value: crate::rowbinary::variant_name(value),
    };
    Ok(match (ty, value) {
        (ChType::Nullable(_), Value::Null) => "NULL".into(),
        (ChType::LowCardinality(inner), Value::Null) if inner.is_nullable() => "NULL".into(),
        (ChType::Array(_), Value::Null) => "[]".into(),
        (ChType::StringMap, Value::Null) => "map()::Map(String, Nullable(String))".into(),
        (ChType::Vector, Value::Null) => "[]::Array(Float32)".into(),
        (ChType::Vector, Value::Vector(v)) => vector_literal(v),
        (
            ChType::Vector,
            Value::SparseVector {
                dim,
                indices,
                values,
            },
        ) => {
            // The encoder checks the indices and the size.
            crate::rowbinary::encode_value(&mut Vec::new(), ty, value)?;
            let mut dense = vec![0f32; *dim as usize];
            for (&i, &x) in indices.iter().zip(values) {
                if let Some(d) = dense.get_mut(i as usize) {
                    *d = x;
                }
            }
            vector_literal(&dense)
        }
        (ChType::StringMap, Value::Hstore(pairs)) => {
            let mut args = Vec::with_capacity(2 * pairs.len());
            for (k, v) in pairs {
                args.push(quote_string(k));
                args.push(v.as_deref().map_or_else(|| "NULL".into(), quote_string));
            }
            format!("map({})::Map(String, Nullable(String))", args.join(", "))
        }
        (ChType::Geo(shape), Value::Null) => geo_literal(
            *shape,
            &match shape {
                walshadow_types::GeoShape::Point => walshadow_rows::geometry::Planar::Point(None),
                _ => walshadow_rows::geometry::Planar::LineString(Vec::new()),
            },
        ),
        (_, Value::Null) => return Err(EncodeErrorKind::NullInNotNull),
        (ChType::Nullable(inner) | ChType::LowCardinality(inner), v) => return literal(inner, v),
        (ChType::Array(_), Value::Array(_)) => {
            // The encoder validates dimensions and elements.
            crate::rowbinary::encode_value(&mut Vec::new(), ty, value)?;
            array_literal(ty, value)?
        }
        (ChType::Bool, Value::Bool(b)) => b.to_string(),
        (ChType::Int16, Value::Int16(v)) => v.to_string(),
        (ChType::Int32, Value::Int32(v)) => v.to_string(),
        (ChType::Int64, Value::Int64(v)) => v.to_string(),
        (ChType::UInt32, Value::Oid(v)) => v.to_string(),
        (ChType::Float32 | ChType::Float64, Value::Float32(_) | Value::Float64(_)) => {
            let f = match value {
                Value::Float32(f) => f64::from(*f),
                Value::Float64(f) => *f,
                _ => return Err(mismatch()),
            };
            if f.is_nan() {
                "nan".into()
            } else if f.is_infinite() {
                if f > 0.0 { "inf".into() } else { "-inf".into() }
            } else {
                format!("{f:?}")
            }
        }
        (ChType::Decimal { precision, scale }, Value::Numeric(n)) => {
            // Validate through the encoder, then write PostgreSQL's text.
            crate::rowbinary::encode_value(&mut Vec::new(), ty, value)?;
            format!(
                "toDecimal256({}, {scale})::Decimal({precision}, {scale})",
                quote_string(&pg_text::numeric_text(n))
            )
        }
        (ChType::Decimal { precision, scale }, Value::Money(m)) => {
            crate::rowbinary::encode_value(&mut Vec::new(), ty, value)?;
            let sign = if *m < 0 { "-" } else { "" };
            let cents = m.unsigned_abs();
            format!(
                "toDecimal256('{sign}{}.{:02}', {scale})::Decimal({precision}, {scale})",
                cents / 100,
                cents % 100
            )
        }
        (ChType::String, Value::Bytea(b)) => quote_bytes(b),
        (ChType::Geo(shape), Value::Geometry(e)) => {
            geo_literal(*shape, &crate::rowbinary::planar_as(*shape, e)?)
        }
        (ChType::Wkb, Value::Geometry(e)) => quote_bytes(
            &walshadow_rows::geometry::ewkb_to_iso_wkb(e)
                .map_err(|reason| EncodeErrorKind::BadGeometry { reason })?,
        ),
        (ChType::String, v) => match text_of(v) {
            Some(t) => quote_string(&t),
            None => return Err(mismatch()),
        },
        (ChType::Date32, Value::Date(d)) => {
            crate::rowbinary::encode_value(&mut Vec::new(), ty, value)?;
            format!("toDate32({})", quote_string(&datetime::pg_date_text(*d)))
        }
        (ChType::DateTime64Utc(precision), Value::Timestamp(t) | Value::TimestampTz(t)) => {
            crate::rowbinary::encode_value(&mut Vec::new(), ty, value)?;
            format!(
                "toDateTime64({}, {precision}, 'UTC')",
                quote_string(&datetime::pg_timestamp_text(*t))
            )
        }
        (ChType::Json, Value::Json(s) | Value::Jsonb(s)) => {
            crate::rowbinary::encode_value(&mut Vec::new(), ty, value)?;
            format!("{}::JSON", quote_string(s))
        }
        (ChType::Time64, Value::Time(us)) => {
            format!("toTime64({}, 6)", quote_string(&time_text(*us)))
        }
        (ChType::Uuid, Value::Uuid(b)) => {
            let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
            format!(
                "toUUID('{}-{}-{}-{}-{}')",
                &h[0..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..32]
            )
        }
        _ => return Err(mismatch()),
    })
}

fn time_text(us: i64) -> String {
    let secs = us / 1_000_000;
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        us % 1_000_000
    )
}

/// The text a `String` column holds for `v`, for literals.
fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::Text(s) | Value::Json(s) | Value::Jsonb(s) | Value::Xml(s) | Value::Enum(s) => {
            Some(s.clone())
        }
        other => pg_text::pg_text(other),
    }
}

fn array_literal(ty: &ChType, value: &Value) -> Result<String, EncodeErrorKind> {
    let Value::Array(a) = value else {
        return Err(EncodeErrorKind::Mismatch {
            ch_type: ty.to_string(),
            value: crate::rowbinary::variant_name(value),
        });
    };
    let depth = ty.array_depth();
    let mut elem_ty = ty;
    while let ChType::Array(inner) = elem_ty {
        elem_ty = inner;
    }
    let lens: Vec<usize> = a
        .dims
        .iter()
        .map(|(l, _)| usize::try_from(*l).unwrap_or(0))
        .collect();
    fn level(
        out: &mut String,
        lens: &[usize],
        elems: &[Value],
        elem_ty: &ChType,
    ) -> Result<(), EncodeErrorKind> {
        out.push('[');
        match lens.split_first() {
            None => {}
            Some((&n, [])) => {
                for (i, e) in elems.iter().take(n).enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push_str(&literal(elem_ty, e)?);
                }
            }
            Some((&n, rest)) => {
                let stride: usize = rest.iter().product();
                for i in 0..n {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    let chunk = elems.get(i * stride..(i + 1) * stride).unwrap_or(&[]);
                    level(out, rest, chunk, elem_ty)?;
                }
            }
        }
        out.push(']');
        Ok(())
    }
    let mut out = String::new();
    if lens.is_empty() || depth == 0 {
        return Ok("[]".into());
    }
    level(&mut out, &lens, &a.elements, elem_ty)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::tests::{attr, rel};
    use crate::types::oid;

    #[test]
    fn quoting() {
        assert_eq!(quote_ident("a"), "`a`");
        assert_eq!(quote_ident("we`ird\\n"), "`we\\`ird\\\\n`");
        assert_eq!(quote_string("it's \\"), "'it\\'s \\\\'");
        assert_eq!(quote_bytes(&[0xff, b'a', b'\n']), "'\\xFFa\\x0A'");
    }

    #[test]
    fn create_table_text() {
        let d = rel(
            vec![
                attr(1, "id", oid::INT8, true),
                attr(2, "note", oid::TEXT, false),
            ],
            &["id"],
            "d",
            vec![],
        );
        let sql = create_table_sql("db", "orders", &d, &MetaColumns::default()).unwrap();
        assert_eq!(
            sql,
            "CREATE TABLE IF NOT EXISTS `db`.`orders`\n(\n    `id` Int64,\n    `note` Nullable(String),\n    \
             `_lsn` UInt64,\n    `_seq` UInt64,\n    `_xid` UInt32,\n    `_commit_time` DateTime64(6, 'UTC'),\n    \
             `_is_deleted` UInt8,\n    `_version` UInt128 MATERIALIZED bitOr(bitShiftLeft(toUInt128(`_lsn`), 64), toUInt128(`_seq`))\n)\n\
             ENGINE = ReplacingMergeTree(`_version`, `_is_deleted`)\nORDER BY (`id`)\n\
             SETTINGS non_replicated_deduplication_window = 1000"
        );
        let full = rel(vec![attr(1, "a", oid::INT4, false)], &["a"], "f", vec![]);
        let sql = create_table_sql("db", "t", &full, &MetaColumns::default()).unwrap();
        assert!(sql.ends_with(", allow_nullable_key = 1"), "{sql}");

        // A pinned table's options.
        let two = rel(
            vec![attr(1, "a", oid::INT4, true), attr(2, "b", oid::INT4, true)],
            &["a", "b"],
            "d",
            vec![],
        );
        let dest = DestTable::new(&two, &MetaColumns::default()).unwrap();
        let options = TableSettings {
            partition_by: Some("intDiv(b, 100)".into()),
            order_by: vec!["b".into(), "a".into()],
            extra: vec![("index_granularity".into(), "1024".into())],
            ..TableSettings::default()
        };
        let sql = dest.create_table_sql("db", "t", &options);
        assert!(
            sql.ends_with(
                "ENGINE = ReplacingMergeTree(`_version`, `_is_deleted`)\nPARTITION BY intDiv(b, 100)\n\
                 ORDER BY (`b`, `a`)\nSETTINGS non_replicated_deduplication_window = 1000, \
                 index_granularity = 1024"
            ),
            "{sql}"
        );
        // The replicated engines: Keeper's path by the table's own uuid, the
        // replicated deduplication window.
        let replicated = TableSettings {
            engine: TableEngine::Replicated,
            ..TableSettings::default()
        };
        let sql = dest.create_table_sql("db", "t", &replicated);
        assert!(
            sql.contains(
                "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{uuid}/{shard}', '{replica}', \
                 `_version`, `_is_deleted`)\nORDER BY (`a`, `b`)\nSETTINGS replicated_deduplication_window = 1000"
            ),
            "{sql}"
        );
        let shared = TableSettings {
            engine: TableEngine::Shared,
            ..TableSettings::default()
        };
        let sql = dest.create_table_sql("db", "t", &shared);
        assert!(
            sql.contains(
                "ENGINE = SharedReplacingMergeTree(`_version`, `_is_deleted`)\nORDER BY (`a`, `b`)\n\
                 SETTINGS replicated_deduplication_window = 1000"
            ),
            "{sql}"
        );
        // On a cluster over an Atomic database: ON CLUSTER, and replicated
        // even when `engine` is left at its default.
        let on_cluster = TableSettings {
            topology: Topology::of(Some("prod"), Some("Atomic")),
            ..TableSettings::default()
        };
        let sql = dest.create_table_sql("db", "t", &on_cluster);
        assert!(
            sql.starts_with("CREATE TABLE IF NOT EXISTS `db`.`t` ON CLUSTER `prod`\n(")
                && sql.contains(
                    "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{uuid}/{shard}', '{replica}', \
                     `_version`, `_is_deleted`)"
                ),
            "{sql}"
        );
        // In a Replicated database: no ON CLUSTER (it refuses it) and no
        // Keeper path (the database gives its own).
        for engine in [TableEngine::Replacing, TableEngine::Replicated] {
            let replicated_db = TableSettings {
                engine,
                topology: Topology::of(Some("prod"), Some("Replicated")),
                ..TableSettings::default()
            };
            let sql = dest.create_table_sql("db", "t", &replicated_db);
            assert!(
                sql.starts_with("CREATE TABLE IF NOT EXISTS `db`.`t`\n(")
                    && sql.contains(
                        "ENGINE = ReplicatedReplacingMergeTree(`_version`, `_is_deleted`)\nORDER BY (`a`, `b`)\n\
                         SETTINGS replicated_deduplication_window = 1000"
                    ),
                "{sql}"
            );
        }
        let cloud = TableSettings {
            engine: TableEngine::Shared,
            topology: Topology::of(None, Some("Shared")),
            ..TableSettings::default()
        };
        assert!(
            dest.create_table_sql("db", "t", &cloud)
                .contains("ENGINE = SharedReplacingMergeTree(`_version`, `_is_deleted`)")
        );
        assert_eq!(
            distributed_table_sql(
                "db",
                "t",
                "t_all",
                &Topology::of(Some("prod"), Some("Atomic"))
            )
            .as_deref(),
            Some(
                "CREATE OR REPLACE TABLE `db`.`t_all` ON CLUSTER `prod` AS `db`.`t` \
                 ENGINE = Distributed('prod', 'db', 't')"
            )
        );
        assert_eq!(
            distributed_table_sql("db", "t", "t_all", &Topology::of(None, Some("Replicated")))
                .as_deref(),
            Some(
                "CREATE OR REPLACE TABLE `db`.`t_all` AS `db`.`t` ENGINE = Distributed('db', 'db', 't')"
            )
        );
        assert_eq!(
            distributed_table_sql("db", "t", "t_all", &Topology::Server),
            None
        );
        dest.check_order_by(&options.order_by).unwrap();
        dest.check_partition_by("intDiv(b, 100)").unwrap();
        dest.check_partition_by("(`a`, b % 7)").unwrap();
        let with_note = rel(
            vec![
                attr(1, "a", oid::INT4, true),
                attr(2, "created", oid::DATE, true),
            ],
            &["a"],
            "d",
            vec![],
        );
        let noted = DestTable::new(&with_note, &MetaColumns::default()).unwrap();
        let e = noted.check_partition_by("toYYYYMM(`created`)").unwrap_err();
        assert!(
            e.contains("\"created\"") && e.contains("REPLICA IDENTITY FULL"),
            "{e}"
        );
        noted.check_partition_by("toYYYYMM(toDate(a))").unwrap();
        assert!(noted.check_partition_by("toYYYYMM(_commit_time)").is_err());
        let e = dest
            .check_order_by(&["a".into(), "b".into(), "c".into()])
            .unwrap_err();
        assert!(
            e.contains("replica identity") && e.contains("delete"),
            "{e}"
        );
        assert!(dest.check_order_by(&["a".into()]).is_err(), "b missing");
        assert!(
            dest.check_order_by(&["a".into(), "a".into()]).is_err(),
            "a twice"
        );
    }

    #[test]
    fn added_defaults_follow_the_columns_policy() {
        use crate::columns::{ValuePolicy, ValueRules};
        let d = rel(
            vec![
                attr(1, "id", oid::INT4, true),
                attr(2, "born", oid::DATE, true),
                attr(3, "seen", oid::TIMESTAMPTZ, false),
            ],
            &["id"],
            "d",
            vec![],
        );
        let values = ValueRules {
            table: ValuePolicy::Clamp,
            columns: [("seen".to_owned(), ValuePolicy::Null)].into(),
        };
        let t = DestTable::with_values(&d, &MetaColumns::default(), &values).unwrap();
        let born = t.column("born").unwrap();
        let sql = add_column_sql(
            "db",
            "t",
            OnCluster(None),
            born,
            Some("id"),
            Some(&Value::Date(i32::MAX)),
        )
        .unwrap();
        assert!(sql.contains("DEFAULT toDate32('2299-12-31')"), "{sql}");
        let seen = t.column("seen").unwrap();
        let sql = add_column_sql(
            "db",
            "t",
            OnCluster(None),
            seen,
            Some("born"),
            Some(&Value::TimestampTz(i64::MIN)),
        )
        .unwrap();
        assert!(sql.contains("DEFAULT NULL"), "{sql}");
        let arr = rel(
            vec![attr(1, "id", oid::INT4, true), {
                let mut a = attr(2, "ds", 1182, false);
                a.ndims = 1;
                a
            }],
            &["id"],
            "d",
            vec![walshadow_types::catalog::TypeDesc {
                element: Some(oid::DATE),
                ..walshadow_types::catalog::fixtures::type_desc(1182, "_date", "b", "A")
            }],
        );
        for (policy, want) in [
            (ValuePolicy::Null, "DEFAULT [NULL, toDate32('2000-01-01')]"),
            (
                ValuePolicy::Clamp,
                "DEFAULT [toDate32('2299-12-31'), toDate32('2000-01-01')]",
            ),
        ] {
            let values = ValueRules {
                table: policy,
                columns: Default::default(),
            };
            let t = DestTable::with_values(&arr, &MetaColumns::default(), &values).unwrap();
            let ds = Value::Array(walshadow_rows::ArrayValue {
                element_type: oid::DATE,
                dims: vec![(2, 1)],
                elements: vec![Value::Date(i32::MAX), Value::Date(0)],
                delimiter: ',',
            });
            let sql = add_column_sql(
                "db",
                "t",
                OnCluster(None),
                t.column("ds").unwrap(),
                None,
                Some(&ds),
            )
            .unwrap();
            assert!(sql.contains(want), "{policy:?}: {sql}");
        }
        let strict = DestTable::new(&d, &MetaColumns::default()).unwrap();
        assert!(
            add_column_sql(
                "db",
                "t",
                OnCluster(None),
                strict.column("born").unwrap(),
                None,
                Some(&Value::Date(i32::MAX))
            )
            .is_err(),
            "stop refuses"
        );
    }

    #[test]
    fn alters() {
        assert_eq!(
            drop_column_sql("d", "t", OnCluster(None), "c"),
            "ALTER TABLE `d`.`t` DROP COLUMN IF EXISTS `c`"
        );
        assert_eq!(
            rename_column_sql("d", "t", OnCluster(None), "a", "b"),
            "ALTER TABLE `d`.`t` RENAME COLUMN IF EXISTS `a` TO `b`"
        );
        let d = rel(
            vec![
                attr(1, "id", oid::INT8, true),
                attr(2, "n", oid::INT4, true),
            ],
            &["id"],
            "d",
            vec![],
        );
        let t = DestTable::new(&d, &MetaColumns::default()).unwrap();
        assert_eq!(
            add_column_sql(
                "d",
                "t",
                OnCluster(None),
                &t.columns[1],
                Some("id"),
                Some(&Value::Int32(5))
            )
            .unwrap(),
            "ALTER TABLE `d`.`t` ADD COLUMN IF NOT EXISTS `n` Int32 DEFAULT 5 AFTER `id`"
        );
        assert_eq!(
            modify_nullability_sql("d", "t", OnCluster(None), "n", &ChType::Int32),
            vec![
                "ALTER TABLE `d`.`t` MODIFY COLUMN `n` Int32 DEFAULT defaultValueOfTypeName('Int32')".to_string(),
                "ALTER TABLE `d`.`t` MODIFY COLUMN `n` REMOVE DEFAULT".to_string(),
            ]
        );
    }
}
