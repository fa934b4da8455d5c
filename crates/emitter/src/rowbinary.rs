//! Rows → ClickHouse `RowBinary`.
//!
//! A row is the live columns in attnum order followed by the metadata
//! columns (`_lsn`, `_seq`, `_xid`, `_commit_time`, `_is_deleted`), each
//! value encoded back to back with no separators (ClickHouse's "RowBinary"
//! format page, "Data types wire format"):
//!
//! | type | bytes |
//! | --- | --- |
//! | `Nullable(T)` | `0x01` for NULL, else `0x00` then `T` |
//! | `Bool`, `UInt8` | 1 byte |
//! | `(U)IntN`, `FloatN` | N/8 bytes little-endian |
//! | `Decimal(p,s)` | the unscaled integer, little-endian two's complement, 4/8/16/32 bytes for p ≤ 9/18/38/76 |
//! | `String` | unsigned LEB128 length, then the bytes |
//! | `Date32` | Int32 days since 1970-01-01 (PostgreSQL counts from 2000-01-01: +10957) |
//! | `DateTime64(6, tz)` | Int64 µs since 1970-01-01 UTC (PostgreSQL: +946684800000000) |
//! | `Time64(6)` | Int64 µs since midnight |
//! | `UUID` | two little-endian u64: the first 8 bytes of the UUID as a big-endian number, then the last 8 |
//! | `Array(T)` | LEB128 element count, then the elements |
//! | `LowCardinality(T)` | as `T` |
//!
//! A deleted row carries its key columns; every other column gets its
//! type's default (NULL for `Nullable`, zero or empty otherwise), since
//! `FINAL` drops the row anyway and the old values may not be in the WAL.
//!
//! Values ClickHouse cannot hold exactly are errors naming the table and
//! column ([`EncodeError`]), never silently altered: NaN/±Infinity in a
//! `Decimal` column, dates and timestamps outside 1900..2299 (infinities
//! included), arrays with a dimension count other than the declared one.
//! A NULL array is written as `[]` (see [`crate::types`]).

use std::fmt;

use walshadow_rows::{ArrayValue, Numeric, Value};
use walshadow_types::{Lsn, Xid};

use crate::columns::ValuePolicy;
use crate::datetime;
use crate::decimal::{self, decimal_width};
use crate::pg_text;
use crate::schema::DestTable;
use crate::types::ChType;

/// The metadata of one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowMeta {
    /// Commit LSN of the transaction (initial loads: the load's LSN).
    pub lsn: Lsn,
    /// The change's own record LSN (orders changes within a transaction).
    pub seq: Lsn,
    pub xid: Xid,
    /// Commit time, PostgreSQL `TimestampTz` (µs since 2000-01-01 UTC).
    pub commit_time: i64,
    pub deleted: bool,
}

/// A value the destination cannot hold exactly. Definite: the same row
/// fails the same way on every retry.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct EncodeError {
    pub table: String,
    /// `None` when the row as a whole is wrong (value count).
    pub column: Option<String>,
    pub kind: EncodeErrorKind,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.column {
            Some(c) => write!(f, "table {}, column {c:?}: {}", self.table, self.kind)?,
            None => write!(f, "table {}: {}", self.table, self.kind)?,
        }
        let range = match &self.kind {
            EncodeErrorKind::OutOfRange { range, .. } => Some(*range),
            _ => None,
        };
        match (&self.column, range) {
            // A geo type has no NULL and no nearest value.
            (Some(c), Some(GEO_RANGE)) => write!(
                f,
                "; change the value on the source, or take {c:?} out of column_types in \
                 [table.\"{}\"] (it is then ISO WKB), then `walshadow table resync {}`",
                self.table, self.table
            )?,
            (Some(c), Some(JSON_RANGE)) => write!(
                f,
                "; or write it as NULL: out_of_range_columns = {{ {c:?} = \"null\" }}, or take \
                 {c:?} out of column_types (it is then a String of the document), in \
                 [table.\"{}\"] (or the config table's row), then `walshadow table resync {}`",
                self.table, self.table
            )?,
            (Some(c), _) if self.kind.is_out_of_range() => write!(
                f,
                "; or say what the column writes instead: out_of_range_columns = \
                 {{ {c:?} = \"null\" | \"clamp\" | \"string\" }} in [table.\"{}\"] (or the \
                 config table's out_of_range_columns), then `walshadow table resync {}`",
                self.table, self.table
            )?,
            _ => {}
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeErrorKind {
    #[error(
        "numeric {value} cannot be stored in {ch_type}, which has no NaN or infinity (and NaN no \
         nearest value); declare the column as unconstrained numeric (replicated as String) and \
         load the table again"
    )]
    NotFinite { value: String, ch_type: String },
    #[error("numeric {value} cannot be written as {ch_type}: {reason}")]
    DecimalInvalid {
        value: String,
        ch_type: String,
        reason: String,
    },
    #[error("numeric {value} does not fit {ch_type}: {reason}")]
    DecimalRange {
        value: String,
        ch_type: String,
        reason: &'static str,
    },
    #[error("{value} is outside the range of ClickHouse's {ch_type} ({range})")]
    OutOfRange {
        value: String,
        ch_type: String,
        range: &'static str,
    },
    #[error(
        "array with {found} dimension(s) in a column replicated with {declared}; ClickHouse needs \
         the same dimension count in every row, so declare the column with that many \
         (e.g. int[][] for 2) and load the table again"
    )]
    Dimensions { declared: usize, found: usize },
    #[error(
        "a sparsevec of {dimensions} dimensions: ClickHouse holds it dense (Array(Float32)), \
         and past {max} dimensions that is too large a value; leave the column out \
         (exclude_columns)"
    )]
    TooManyDimensions { dimensions: u32, max: u32 },
    #[error("malformed array: dimension lengths {lens:?} for {elements} elements")]
    MalformedArray { lens: Vec<i32>, elements: usize },
    #[error("NULL in a NOT NULL column")]
    NullInNotNull,
    #[error("a geometry that cannot be written as WKB: {reason}")]
    BadGeometry { reason: String },
    #[error("a {value} value cannot be written to a {ch_type} column")]
    Mismatch {
        ch_type: String,
        value: &'static str,
    },
    #[error("row has {found} values, expected {expected} (live columns) or {all} (all attributes)")]
    ValueCount {
        expected: usize,
        all: usize,
        found: usize,
    },
}

impl EncodeErrorKind {
    /// A value the column's type has no room for, which its
    /// `out_of_range` policy may replace.
    pub fn is_out_of_range(&self) -> bool {
        matches!(
            self,
            EncodeErrorKind::NotFinite { .. }
                | EncodeErrorKind::DecimalRange { .. }
                | EncodeErrorKind::OutOfRange { .. }
        )
    }
}

/// The range of a ClickHouse geo type, in [`EncodeErrorKind::OutOfRange`].
const GEO_RANGE: &str = "2D values of that shape only";
/// The range of ClickHouse's `JSON`.
const JSON_RANGE: &str = "a JSON object; this document is an array or a scalar";

/// A column's `out_of_range` policy while one of its values is encoded,
/// and how many values (the column's, or its array elements) it replaced.
struct OnRange {
    policy: ValuePolicy,
    replaced: u32,
}

/// The most dimensions a `sparsevec` is written with (as dense
/// `Array(Float32)`: 4 MiB per value at most).
const MAX_DENSE_DIMENSIONS: u32 = 1 << 20;

/// Encodes rows of one destination table.
#[derive(Debug, Clone)]
pub struct RowBinaryEncoder {
    table: DestTable,
}

impl RowBinaryEncoder {
    pub fn new(table: &DestTable) -> RowBinaryEncoder {
        RowBinaryEncoder {
            table: table.clone(),
        }
    }

    pub fn table(&self) -> &DestTable {
        &self.table
    }

    /// The `INSERT` column list matching the encoded rows.
    pub fn columns(&self) -> Vec<String> {
        self.table.insert_columns()
    }

    /// Append one row to `out`. `values` holds either one value per
    /// attribute of the relation descriptor (dropped ones included and
    /// ignored) or one per live column, in attnum order. Returns how many
    /// values the columns' `out_of_range` policies replaced (NULL or the
    /// nearest value). On error `out` is left as it was.
    pub fn encode_row(
        &self,
        out: &mut Vec<u8>,
        values: &[Value],
        meta: &RowMeta,
    ) -> Result<u32, EncodeError> {
        let start = out.len();
        let result = self.encode_row_inner(out, values, meta);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    fn encode_row_inner(
        &self,
        out: &mut Vec<u8>,
        values: &[Value],
        meta: &RowMeta,
    ) -> Result<u32, EncodeError> {
        let t = &self.table;
        let mut replaced = 0;
        let by_position = if values.len() == t.attribute_count {
            true
        } else if values.len() == t.columns.len() {
            false
        } else {
            return Err(EncodeError {
                table: t.source.clone(),
                column: None,
                kind: EncodeErrorKind::ValueCount {
                    expected: t.columns.len(),
                    all: t.attribute_count,
                    found: values.len(),
                },
            });
        };
        for (live_index, c) in t.columns.iter().enumerate() {
            // The source's name: the one every column rule is keyed by.
            let at = |kind| EncodeError {
                table: t.source.clone(),
                column: Some(c.source.clone()),
                kind,
            };
            if meta.deleted && !c.key {
                write_default(out, &c.ch_type);
                continue;
            }
            let index = if by_position { c.position } else { live_index };
            let value = values.get(index).unwrap_or(&Value::Null);
            let mut on_range = OnRange {
                policy: c.out_of_range,
                replaced: 0,
            };
            encode_under(out, &c.ch_type, value, &mut on_range).map_err(at)?;
            replaced += on_range.replaced;
        }
        out.extend_from_slice(&meta.lsn.0.to_le_bytes());
        out.extend_from_slice(&meta.seq.0.to_le_bytes());
        out.extend_from_slice(&meta.xid.to_le_bytes());
        let commit = datetime::datetime64(meta.commit_time).ok_or_else(|| EncodeError {
            table: t.source.clone(),
            column: Some(t.meta.commit_time.clone()),
            kind: out_of_range(
                datetime::pg_timestamp_text(meta.commit_time),
                &ChType::DateTime64Utc(6),
            ),
        })?;
        out.extend_from_slice(&commit.to_le_bytes());
        out.push(u8::from(meta.deleted));
        Ok(replaced)
    }
}

/// Unsigned LEB128.
pub(crate) fn write_leb128(out: &mut Vec<u8>, mut n: u64) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn write_bytes(out: &mut Vec<u8>, b: &[u8]) {
    write_leb128(out, b.len() as u64);
    out.extend_from_slice(b);
}

pub(crate) fn variant_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "NULL",
        Value::Bool(_) => "bool",
        Value::Int16(_) => "int2",
        Value::Int32(_) => "int4",
        Value::Int64(_) => "int8",
        Value::Oid(_) => "oid",
        Value::Float32(_) => "float4",
        Value::Float64(_) => "float8",
        Value::Numeric(_) => "numeric",
        Value::Money(_) => "money",
        Value::Text(_) => "text",
        Value::Bytea(_) => "bytea",
        Value::Date(_) => "date",
        Value::Time(_) => "time",
        Value::TimeTz { .. } => "timetz",
        Value::Timestamp(_) => "timestamp",
        Value::TimestampTz(_) => "timestamptz",
        Value::Interval { .. } => "interval",
        Value::Uuid(_) => "uuid",
        Value::Json(_) => "json",
        Value::Jsonb(_) => "jsonb",
        Value::Inet(_) => "inet",
        Value::MacAddr(_) => "macaddr",
        Value::MacAddr8(_) => "macaddr8",
        Value::Bits { .. } => "bit",
        Value::Vector(_) => "vector",
        Value::SparseVector { .. } => "sparsevec",
        Value::Hstore(_) => "hstore",
        Value::Geometry(_) => "geometry",
        Value::Xml(_) => "xml",
        Value::Enum(_) => "enum",
        Value::Array(_) => "array",
    }
}

fn out_of_range(value: String, ty: &ChType) -> EncodeErrorKind {
    EncodeErrorKind::OutOfRange {
        value,
        ch_type: ty.to_string(),
        range: match ty {
            ChType::Date32 => "1900-01-01 to 2299-12-31",
            _ => "1900-01-01 00:00:00 to 2299-12-31 23:59:59.999999",
        },
    }
}

/// A PostGIS value (EWKB) as ClickHouse geo type `shape`: a `POLYGON` is
/// a one-polygon `MultiPolygon`, a `LINESTRING` a one-line
/// `MultiLineString`; another shape, or Z or M coordinates, is out of the
/// type's range.
pub(crate) fn planar_as(
    shape: walshadow_types::GeoShape,
    ewkb: &[u8],
) -> Result<walshadow_rows::geometry::Planar, EncodeErrorKind> {
    use walshadow_rows::geometry::Planar as P;
    use walshadow_types::GeoShape as G;
    let outside = |what: String| EncodeErrorKind::OutOfRange {
        value: format!("a {what}"),
        ch_type: shape.name().into(),
        range: GEO_RANGE,
    };
    let p = walshadow_rows::geometry::planar(ewkb).map_err(outside)?;
    Ok(match (shape, p) {
        (G::Point, p @ P::Point(_))
        | (G::LineString | G::Ring, p @ P::LineString(_))
        | (G::Polygon, p @ P::Polygon(_))
        | (G::MultiLineString, p @ P::MultiLineString(_))
        | (G::MultiPolygon, p @ P::MultiPolygon(_)) => p,
        (G::MultiLineString, P::LineString(l)) => P::MultiLineString(vec![l]),
        (G::MultiPolygon, P::Polygon(p)) => P::MultiPolygon(vec![p]),
        (_, p) => {
            return Err(outside(
                match p {
                    P::Point(_) => "POINT",
                    P::LineString(_) => "LINESTRING",
                    P::Polygon(_) => "POLYGON",
                    P::MultiLineString(_) => "MULTILINESTRING",
                    P::MultiPolygon(_) => "MULTIPOLYGON",
                }
                .into(),
            ));
        }
    })
}

fn write_points(out: &mut Vec<u8>, points: &[[f64; 2]]) {
    write_leb128(out, points.len() as u64);
    for [x, y] in points {
        out.extend_from_slice(&x.to_le_bytes());
        out.extend_from_slice(&y.to_le_bytes());
    }
}

fn write_rings(out: &mut Vec<u8>, rings: &[Vec<[f64; 2]>]) {
    write_leb128(out, rings.len() as u64);
    for r in rings {
        write_points(out, r);
    }
}

/// A geo type's RowBinary: a point is two Float64s, the others arrays.
fn write_planar(out: &mut Vec<u8>, p: &walshadow_rows::geometry::Planar) {
    use walshadow_rows::geometry::Planar as P;
    match p {
        P::Point(xy) => {
            let [x, y] = xy.unwrap_or([f64::NAN; 2]);
            out.extend_from_slice(&x.to_le_bytes());
            out.extend_from_slice(&y.to_le_bytes());
        }
        P::LineString(points) => write_points(out, points),
        P::Polygon(rings) | P::MultiLineString(rings) => write_rings(out, rings),
        P::MultiPolygon(polygons) => {
            write_leb128(out, polygons.len() as u64);
            for rings in polygons {
                write_rings(out, rings);
            }
        }
    }
}

/// A geo column's NULL: `(nan, nan)` for a point (as POINT EMPTY), `[]`
/// for the others.
fn write_geo_default(out: &mut Vec<u8>, ty: &ChType) {
    if ty == &ChType::Geo(walshadow_types::GeoShape::Point) {
        write_planar(out, &walshadow_rows::geometry::Planar::Point(None));
    } else {
        out.push(0);
    }
}

/// Encode `v` as `ty`; a value `ty` cannot hold is an error.
pub(crate) fn encode_value(
    out: &mut Vec<u8>,
    ty: &ChType,
    v: &Value,
) -> Result<(), EncodeErrorKind> {
    let mut stop = OnRange {
        policy: ValuePolicy::Stop,
        replaced: 0,
    };
    encode_under(out, ty, v, &mut stop)
}

/// Encode `v` as `ty`, a value `ty` cannot hold handled by `on`'s policy:
/// `null` at the nearest `Nullable` (the column, or the array element),
/// `clamp` where the value is written.
fn encode_under(
    out: &mut Vec<u8>,
    ty: &ChType,
    v: &Value,
    on: &mut OnRange,
) -> Result<(), EncodeErrorKind> {
    let mismatch = || EncodeErrorKind::Mismatch {
        ch_type: ty.to_string(),
        value: variant_name(v),
    };
    match (ty, v) {
        (ChType::Nullable(_), Value::Null) => out.push(1),
        (ChType::Nullable(inner), v) => {
            let mark = out.len();
            out.push(0);
            match encode_under(out, inner, v, on) {
                Err(e) if on.policy == ValuePolicy::Null && e.is_out_of_range() => {
                    out.truncate(mark);
                    out.push(1);
                    on.replaced += 1;
                }
                r => r?,
            }
        }
        (ChType::LowCardinality(inner), v) => encode_under(out, inner, v, on)?,
        // ClickHouse has no nullable arrays: NULL is written as [].
        (ChType::Array(_), Value::Null) => out.push(0),
        (ChType::Array(_), Value::Array(a)) => encode_array(out, ty, a, on)?,
        (ChType::Vector, Value::Null) => out.push(0),
        (ChType::Vector, Value::Vector(v)) => {
            write_leb128(out, v.len() as u64);
            for f in v {
                out.extend_from_slice(&f.to_le_bytes());
            }
        }
        // A Map is an array of (key, value) tuples on the wire.
        (ChType::StringMap, Value::Null) => out.push(0),
        (ChType::StringMap, Value::Hstore(pairs)) => {
            write_leb128(out, pairs.len() as u64);
            for (k, v) in pairs {
                write_bytes(out, k.as_bytes());
                match v {
                    Some(v) => {
                        out.push(0);
                        write_bytes(out, v.as_bytes());
                    }
                    None => out.push(1),
                }
            }
        }
        // Dense in ClickHouse: zeros between the stored dimensions.
        (
            ChType::Vector,
            Value::SparseVector {
                dim,
                indices,
                values,
            },
        ) => {
            if *dim > MAX_DENSE_DIMENSIONS {
                return Err(EncodeErrorKind::TooManyDimensions {
                    dimensions: *dim,
                    max: MAX_DENSE_DIMENSIONS,
                });
            }
            // Written as the count says only if the indices ascend below
            // dim, one value each (the decoders check; a hand-built value
            // might not).
            let ascending = indices.windows(2).all(|w| w.first() < w.get(1));
            if indices.len() != values.len()
                || !ascending
                || indices.last().is_some_and(|&i| i >= *dim)
            {
                return Err(EncodeErrorKind::MalformedArray {
                    lens: vec![i32::try_from(*dim).unwrap_or(i32::MAX)],
                    elements: values.len(),
                });
            }
            write_leb128(out, u64::from(*dim));
            let mut next = 0u32;
            for (&i, v) in indices.iter().zip(values) {
                // The decoders keep indices ascending and below dim.
                let zeros = i.saturating_sub(next) as usize;
                out.resize(out.len() + 4 * zeros, 0);
                out.extend_from_slice(&v.to_le_bytes());
                next = i.saturating_add(1);
            }
            let zeros = dim.saturating_sub(next) as usize;
            out.resize(out.len() + 4 * zeros, 0);
        }
        // ClickHouse's geo types have no NULL.
        (ChType::Geo(_), Value::Null) => write_geo_default(out, ty),
        (_, Value::Null) => return Err(EncodeErrorKind::NullInNotNull),
        (ChType::Bool, Value::Bool(b)) => out.push(u8::from(*b)),
        (ChType::Int16, Value::Int16(n)) => out.extend_from_slice(&n.to_le_bytes()),
        (ChType::Int32, Value::Int32(n)) => out.extend_from_slice(&n.to_le_bytes()),
        (ChType::Int64, Value::Int64(n)) => out.extend_from_slice(&n.to_le_bytes()),
        (ChType::UInt32, Value::Oid(n)) => out.extend_from_slice(&n.to_le_bytes()),
        (ChType::Float32, Value::Float32(f)) => out.extend_from_slice(&f.to_le_bytes()),
        (ChType::Float64, Value::Float64(f)) => out.extend_from_slice(&f.to_le_bytes()),
        (ChType::Decimal { precision, scale }, Value::Numeric(n)) => {
            encode_numeric(out, *precision, *scale, n, ty, on)?;
        }
        (ChType::Decimal { precision, scale }, Value::Money(cents)) => {
            // The stored int8 is in the currency's smallest unit; the
            // mapping assumes two fractional digits (see crate::types).
            let digits = i128::from(*cents).unsigned_abs();
            // 10^p overflows u128 from p = 39 on; every i64 fits there.
            let too_wide = 10u128
                .checked_pow(u32::from(*precision))
                .is_some_and(|limit| digits >= limit);
            if *scale != 2 || too_wide {
                return Err(EncodeErrorKind::DecimalRange {
                    value: cents.to_string(),
                    ch_type: ty.to_string(),
                    reason: "more significant digits than the precision",
                });
            }
            let wide = i128::from(*cents).to_le_bytes();
            out.extend_from_slice(wide.get(..decimal_width(*precision)).unwrap_or(&wide));
        }
        (ChType::String, Value::Text(s))
        | (ChType::String, Value::Json(s))
        | (ChType::String, Value::Jsonb(s))
        | (ChType::String, Value::Xml(s))
        | (ChType::String, Value::Enum(s)) => write_bytes(out, s.as_bytes()),
        (ChType::String, Value::Bytea(b)) => write_bytes(out, b),
        (ChType::Geo(shape), Value::Geometry(e)) => write_planar(out, &planar_as(*shape, e)?),
        (ChType::Wkb, Value::Geometry(e)) => {
            let wkb = walshadow_rows::geometry::ewkb_to_iso_wkb(e)
                .map_err(|reason| EncodeErrorKind::BadGeometry { reason })?;
            write_bytes(out, &wkb);
        }
        (ChType::String, other) => match pg_text::pg_text(other) {
            Some(text) => write_bytes(out, text.as_bytes()),
            None => return Err(mismatch()),
        },
        (ChType::Date32, Value::Date(d)) => {
            let days = match datetime::date32(*d) {
                Some(days) => days,
                None if on.policy == ValuePolicy::Clamp => {
                    on.replaced += 1;
                    datetime::date32_clamped(*d)
                }
                None => return Err(out_of_range(datetime::pg_date_text(*d), ty)),
            };
            out.extend_from_slice(&days.to_le_bytes());
        }
        (ChType::DateTime64Utc(precision), Value::Timestamp(t) | Value::TimestampTz(t)) => {
            let us = match datetime::datetime64(*t) {
                Some(us) => us,
                None if on.policy == ValuePolicy::Clamp => {
                    on.replaced += 1;
                    datetime::datetime64_clamped(*t)
                }
                None => return Err(out_of_range(datetime::pg_timestamp_text(*t), ty)),
            };
            // Ticks of 10^-precision s, floored (a column asking for less
            // than microseconds).
            let ticks = us.div_euclid(10i64.pow(u32::from(6u8.saturating_sub(*precision))));
            out.extend_from_slice(&ticks.to_le_bytes());
        }
        // The document's text, which ClickHouse parses into its paths
        // (inserts say `input_format_binary_read_json_as_string`); it holds
        // objects only.
        (ChType::Json, Value::Json(s) | Value::Jsonb(s)) => {
            if !s.trim_start().starts_with('{') {
                let shown: String = s.chars().take(40).collect();
                return Err(EncodeErrorKind::OutOfRange {
                    value: if shown.len() < s.len() {
                        format!("{shown}…")
                    } else {
                        shown
                    },
                    ch_type: ty.to_string(),
                    range: JSON_RANGE,
                });
            }
            write_bytes(out, s.as_bytes());
        }
        (ChType::Time64, Value::Time(us)) => out.extend_from_slice(&us.to_le_bytes()),
        (ChType::Uuid, Value::Uuid(b)) => {
            let (hi, lo) = b.split_at(8);
            out.extend(hi.iter().rev());
            out.extend(lo.iter().rev());
        }
        _ => return Err(mismatch()),
    }
    Ok(())
}

fn encode_numeric(
    out: &mut Vec<u8>,
    precision: u8,
    scale: u8,
    n: &Numeric,
    ty: &ChType,
    on: &mut OnRange,
) -> Result<(), EncodeErrorKind> {
    let width = decimal_width(precision);
    let mut clamp = |out: &mut Vec<u8>, negative: bool| {
        on.replaced += 1;
        let bytes = decimal::extreme(precision, negative);
        out.extend_from_slice(bytes.get(..width).unwrap_or(&bytes));
    };
    match n {
        Numeric::PosInfinity | Numeric::NegInfinity if on.policy == ValuePolicy::Clamp => {
            clamp(out, matches!(n, Numeric::NegInfinity));
            Ok(())
        }
        Numeric::NaN | Numeric::PosInfinity | Numeric::NegInfinity => {
            Err(EncodeErrorKind::NotFinite {
                value: pg_text::numeric_text(n),
                ch_type: ty.to_string(),
            })
        }
        Numeric::Finite {
            negative,
            weight,
            digits,
            ..
        } => match decimal::unscaled(*negative, *weight, digits, precision, scale) {
            Ok(bytes) => {
                out.extend_from_slice(bytes.get(..width).unwrap_or(&bytes));
                Ok(())
            }
            // Too large: the nearest value is the type's end. (Too many
            // fractional digits would be rounding, not clamping.)
            Err(decimal::DecimalError::TooManyDigits) if on.policy == ValuePolicy::Clamp => {
                clamp(out, *negative);
                Ok(())
            }
            // Too many digits is a value the type has no room for; the
            // others are a corrupt value or a wrong layout, never replaced.
            Err(decimal::DecimalError::TooManyDigits) => Err(EncodeErrorKind::DecimalRange {
                value: pg_text::numeric_text(n),
                ch_type: ty.to_string(),
                reason: "more significant digits than the precision",
            }),
            Err(e) => Err(EncodeErrorKind::DecimalInvalid {
                value: pg_text::numeric_text(n),
                ch_type: ty.to_string(),
                reason: e.to_string(),
            }),
        },
    }
}

fn encode_array(
    out: &mut Vec<u8>,
    ty: &ChType,
    a: &ArrayValue,
    on: &mut OnRange,
) -> Result<(), EncodeErrorKind> {
    let malformed = || EncodeErrorKind::MalformedArray {
        lens: a.dims.iter().map(|(l, _)| *l).collect(),
        elements: a.elements.len(),
    };
    if a.dims.is_empty() {
        if !a.elements.is_empty() {
            return Err(malformed());
        }
        out.push(0);
        return Ok(());
    }
    let declared = ty.array_depth();
    if a.dims.len() != declared {
        return Err(EncodeErrorKind::Dimensions {
            declared,
            found: a.dims.len(),
        });
    }
    let mut lens = Vec::with_capacity(a.dims.len());
    let mut total = 1usize;
    for (len, _) in &a.dims {
        // PostgreSQL writes an empty array with no dimensions at all.
        let len = usize::try_from(*len)
            .ok()
            .filter(|&l| l > 0)
            .ok_or_else(malformed)?;
        total = total.checked_mul(len).ok_or_else(malformed)?;
        lens.push(len);
    }
    if total != a.elements.len() {
        return Err(malformed());
    }
    let mut elem_ty = ty;
    while let ChType::Array(inner) = elem_ty {
        elem_ty = inner;
    }
    encode_level(out, &lens, &a.elements, elem_ty, on)
}

/// One dimension: its length, then each sub-array (or element).
fn encode_level(
    out: &mut Vec<u8>,
    lens: &[usize],
    elems: &[Value],
    elem_ty: &ChType,
    on: &mut OnRange,
) -> Result<(), EncodeErrorKind> {
    let Some((&n, rest)) = lens.split_first() else {
        return Ok(());
    };
    write_leb128(out, n as u64);
    if rest.is_empty() {
        for e in elems {
            encode_under(out, elem_ty, e, on)?;
        }
        return Ok(());
    }
    let stride: usize = rest.iter().product::<usize>().max(1);
    for chunk in elems.chunks(stride) {
        encode_level(out, rest, chunk, elem_ty, on)?;
    }
    Ok(())
}

/// The default a column gets in a delete row.
fn write_default(out: &mut Vec<u8>, ty: &ChType) {
    let zeros = |out: &mut Vec<u8>, n: usize| out.resize(out.len() + n, 0);
    match ty {
        ChType::Nullable(_) => out.push(1),
        ChType::LowCardinality(inner) => write_default(out, inner),
        ChType::Bool
        | ChType::UInt8
        | ChType::String
        | ChType::Array(_)
        | ChType::StringMap
        | ChType::Vector
        | ChType::Wkb => out.push(0),
        ChType::Geo(_) => write_geo_default(out, ty),
        ChType::Int16 => zeros(out, 2),
        ChType::Int32 | ChType::UInt32 | ChType::Float32 | ChType::Date32 => zeros(out, 4),
        ChType::Int64
        | ChType::UInt64
        | ChType::Float64
        | ChType::DateTime64Utc(_)
        | ChType::Time64 => zeros(out, 8),
        // An empty object: ClickHouse parses the text.
        ChType::Json => write_bytes(out, b"{}"),
        ChType::UInt128 | ChType::Uuid => zeros(out, 16),
        ChType::Decimal { precision, .. } => zeros(out, decimal_width(*precision)),
    }
}

#[cfg(test)]
mod tests {
    use walshadow_rows::InetValue;

    use super::*;
    use crate::columns::ValueRules;
    use crate::schema::tests::{attr, rel};
    use crate::schema::{DestTable, MetaColumns};
    use crate::types::oid;

    fn enc(ty: &ChType, v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        encode_value(&mut out, ty, v).unwrap();
        out
    }

    fn err(ty: &ChType, v: &Value) -> EncodeErrorKind {
        encode_value(&mut Vec::new(), ty, v).unwrap_err()
    }

    fn finite(negative: bool, weight: i16, dscale: u16, digits: &[i16]) -> Value {
        Value::Numeric(Numeric::Finite {
            negative,
            weight,
            dscale,
            digits: digits.to_vec(),
        })
    }

    #[test]
    fn leb128() {
        let mut out = Vec::new();
        for n in [0u64, 127, 128, 300, u64::MAX] {
            write_leb128(&mut out, n);
        }
        assert_eq!(
            out,
            [
                0x00, 0x7f, 0x80, 0x01, 0xac, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                0xff, 0x01
            ]
        );
    }

    #[test]
    fn scalars() {
        assert_eq!(enc(&ChType::Bool, &Value::Bool(true)), [1]);
        assert_eq!(enc(&ChType::Int16, &Value::Int16(-2)), [0xfe, 0xff]);
        assert_eq!(enc(&ChType::UInt32, &Value::Oid(0x0102_0304)), [4, 3, 2, 1]);
        assert_eq!(
            enc(&ChType::Float64, &Value::Float64(1.0)),
            1.0f64.to_le_bytes()
        );
        assert_eq!(
            enc(&ChType::nullable(ChType::Int32), &Value::Int32(7)),
            [0, 7, 0, 0, 0]
        );
        assert_eq!(enc(&ChType::nullable(ChType::Int32), &Value::Null), [1]);
        assert_eq!(
            enc(&ChType::String, &Value::Text("hé".into())),
            [3, b'h', 0xc3, 0xa9]
        );
        assert_eq!(
            enc(&ChType::String, &Value::Bytea(vec![0, 255])),
            [2, 0, 255]
        );
        assert_eq!(
            enc(
                &ChType::low_cardinality(ChType::nullable(ChType::String)),
                &Value::Enum("ok".into())
            ),
            [0, 2, b'o', b'k']
        );
        assert_eq!(
            err(&ChType::Int32, &Value::Null),
            EncodeErrorKind::NullInNotNull
        );
        assert!(matches!(
            err(&ChType::Int32, &Value::Int64(1)),
            EncodeErrorKind::Mismatch { .. }
        ));
    }

    #[test]
    fn uuid_halves_reversed() {
        // ClickHouse: SELECT toUUID('00112233-4455-6677-8899-aabbccddeeff') FORMAT RowBinary
        let b: [u8; 16] = [
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
            0xee, 0xff,
        ];
        assert_eq!(
            enc(&ChType::Uuid, &Value::Uuid(b)),
            [
                0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x00, 0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa,
                0x99, 0x88
            ]
        );
    }

    #[test]
    fn dates_and_times() {
        // ClickHouse: toDate32('1900-01-01') is 21 9c ff ff.
        assert_eq!(
            enc(&ChType::Date32, &Value::Date(-36_524)),
            [0x21, 0x9c, 0xff, 0xff]
        );
        assert_eq!(
            enc(&ChType::Date32, &Value::Date(0)),
            10_957i32.to_le_bytes()
        );
        assert!(matches!(
            err(&ChType::Date32, &Value::Date(i32::MAX)),
            EncodeErrorKind::OutOfRange { ref value, .. } if value == "infinity"
        ));
        assert!(matches!(
            err(&ChType::Date32, &Value::Date(-36_525)),
            EncodeErrorKind::OutOfRange { ref value, .. } if value == "1899-12-31"
        ));
        assert_eq!(
            enc(&ChType::DateTime64Utc(6), &Value::TimestampTz(0)),
            946_684_800_000_000i64.to_le_bytes()
        );
        assert!(matches!(
            err(&ChType::DateTime64Utc(6), &Value::Timestamp(i64::MIN)),
            EncodeErrorKind::OutOfRange { .. }
        ));
        assert_eq!(
            enc(&ChType::Time64, &Value::Time(86_400_000_000)),
            86_400_000_000i64.to_le_bytes()
        );
    }

    #[test]
    fn decimals() {
        let d = |p, s| ChType::Decimal {
            precision: p,
            scale: s,
        };
        assert_eq!(
            enc(&d(9, 2), &finite(false, 0, 2, &[12, 3400])),
            1234i32.to_le_bytes()
        );
        assert_eq!(
            enc(&d(18, 2), &finite(true, 0, 2, &[12, 3400])),
            (-1234i64).to_le_bytes()
        );
        assert_eq!(
            enc(&d(38, 0), &finite(false, 0, 0, &[5])),
            5i128.to_le_bytes()
        );
        let wide = enc(&d(76, 0), &finite(true, 0, 0, &[5]));
        assert_eq!(wide.len(), 32);
        assert_eq!(wide[0], 0xfb);
        assert!(wide[1..].iter().all(|&b| b == 0xff));
        assert!(matches!(
            err(&d(10, 2), &Value::Numeric(Numeric::NaN)),
            EncodeErrorKind::NotFinite { ref value, .. } if value == "NaN"
        ));
        assert!(matches!(
            err(&d(3, 0), &finite(false, 0, 0, &[1234])),
            EncodeErrorKind::DecimalRange { .. }
        ));
        assert_eq!(
            enc(&d(18, 2), &Value::Money(-12_345)),
            (-12_345i64).to_le_bytes()
        );
        assert!(matches!(
            err(&d(18, 2), &Value::Money(i64::MAX)),
            EncodeErrorKind::DecimalRange { .. }
        ));
        // A precision whose 10^p overflows u128 holds any money value.
        let wide = enc(&d(76, 2), &Value::Money(i64::MIN));
        assert_eq!(wide[..16], i128::from(i64::MIN).to_le_bytes());
        assert!(wide[16..].iter().all(|&b| b == 0xff));
        // Unconstrained numeric is text.
        assert_eq!(
            enc(&ChType::String, &Value::Numeric(Numeric::NegInfinity)),
            b"\x09-Infinity"
        );
    }

    #[test]
    fn text_renderings() {
        assert_eq!(
            enc(
                &ChType::String,
                &Value::Inet(InetValue {
                    addr: vec![10, 0, 0, 0],
                    bits: 8,
                    is_cidr: true
                })
            ),
            b"\x0a10.0.0.0/8"
        );
        assert_eq!(
            enc(
                &ChType::String,
                &Value::Interval {
                    months: 0,
                    days: 1,
                    micros: 0
                }
            ),
            b"\x051 day"
        );
    }

    /// A one-dimensional array of `elements`.
    fn arr_of(elements: Vec<Value>) -> Value {
        let n = elements.len() as i32;
        arr(&[n], elements)
    }

    fn arr(dims: &[i32], elements: Vec<Value>) -> Value {
        Value::Array(ArrayValue {
            element_type: oid::INT4,
            dims: dims.iter().map(|&l| (l, 1)).collect(),
            elements,
            delimiter: ',',
        })
    }

    #[test]
    fn arrays() {
        let a1 = ChType::array(ChType::nullable(ChType::Int32));
        assert_eq!(
            enc(&a1, &arr(&[2], vec![Value::Int32(1), Value::Null])),
            [2, 0, 1, 0, 0, 0, 1]
        );
        assert_eq!(enc(&a1, &arr(&[], vec![])), [0]);
        assert_eq!(enc(&a1, &Value::Null), [0]);
        let a2 = ChType::array(a1.clone());
        assert_eq!(
            enc(&a2, &arr(&[2, 1], vec![Value::Int32(1), Value::Int32(2)])),
            [2, 1, 0, 1, 0, 0, 0, 1, 0, 2, 0, 0, 0]
        );
        assert_eq!(enc(&a2, &arr(&[], vec![])), [0]);
        assert_eq!(
            err(&a1, &arr(&[1, 1], vec![Value::Int32(1)])),
            EncodeErrorKind::Dimensions {
                declared: 1,
                found: 2
            }
        );
        assert!(matches!(
            err(&a1, &arr(&[3], vec![Value::Int32(1)])),
            EncodeErrorKind::MalformedArray { .. }
        ));
        assert!(matches!(
            err(&a1, &arr(&[-1], vec![])),
            EncodeErrorKind::MalformedArray { .. }
        ));
    }

    fn under(
        ty: &ChType,
        v: &Value,
        policy: ValuePolicy,
    ) -> Result<(Vec<u8>, u32), EncodeErrorKind> {
        let mut out = Vec::new();
        let mut on = OnRange {
            policy,
            replaced: 0,
        };
        encode_under(&mut out, ty, v, &mut on)?;
        Ok((out, on.replaced))
    }

    #[test]
    fn hstores_are_maps() {
        let h = Value::Hstore(vec![("a".into(), Some("1".into())), ("b".into(), None)]);
        assert_eq!(
            enc(&ChType::StringMap, &h),
            [2, 1, b'a', 0, 1, b'1', 1, b'b', 1]
        );
        assert_eq!(enc(&ChType::StringMap, &Value::Null), [0], "NULL is {{}}");
        assert_eq!(
            crate::ddl::literal(&ChType::StringMap, &h).unwrap(),
            "map('a', '1', 'b', NULL)::Map(String, Nullable(String))"
        );
    }

    #[test]
    fn geo_types_take_their_shapes() {
        use walshadow_types::GeoShape as G;
        let unhex = |h: &str| -> Vec<u8> {
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
                .collect()
        };
        // POINT(1 2) and POLYGON((0 0,1 0,1 1,0 0)), as EWKB.
        let point = Value::Geometry(unhex("0101000000000000000000f03f0000000000000040"));
        let polygon = Value::Geometry(unhex(concat!(
            "01030000000100000004000000",
            "00000000000000000000000000000000",
            "000000000000f03f0000000000000000",
            "000000000000f03f000000000000f03f",
            "00000000000000000000000000000000",
        )));
        let mut want = 1f64.to_le_bytes().to_vec();
        want.extend_from_slice(&2f64.to_le_bytes());
        assert_eq!(enc(&ChType::Geo(G::Point), &point), want);
        // NULL in a point column: (nan, nan).
        let null = enc(&ChType::Geo(G::Point), &Value::Null);
        assert!(f64::from_le_bytes(null[..8].try_into().unwrap()).is_nan());
        // A polygon is a one-polygon MultiPolygon: [[[4 points]]].
        let mp = enc(&ChType::Geo(G::MultiPolygon), &polygon);
        assert_eq!(&mp[..3], &[1, 1, 4]);
        assert_eq!(mp.len(), 3 + 4 * 16);
        assert_eq!(enc(&ChType::Geo(G::Polygon), &polygon)[..2], [1, 4]);
        // Another shape is out of the type's range, naming what it is.
        let e = err(&ChType::Geo(G::Point), &polygon);
        assert!(
            e.is_out_of_range() && e.to_string().contains("a POLYGON"),
            "{e}"
        );
        let z = Value::Geometry(unhex(
            "0101000080000000000000f03f00000000000000400000000000000840",
        ));
        assert!(
            err(&ChType::Geo(G::Point), &z)
                .to_string()
                .contains("POINT Z")
        );
        assert_eq!(
            crate::ddl::literal(&ChType::Geo(G::Polygon), &polygon).unwrap(),
            "[[(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 0.0)]]::Polygon"
        );
        assert_eq!(ChType::Geo(G::Ring).to_string(), "Ring");
    }

    #[test]
    fn arrays_of_vectors_and_hstores_write_a_null_element_empty() {
        let ty = ChType::array(ChType::Vector);
        assert_eq!(ty.to_string(), "Array(Array(Float32))");
        assert_eq!(
            ty.array_depth(),
            1,
            "a vector is not a PostgreSQL dimension"
        );
        let v = arr_of(vec![Value::Vector(vec![1.5]), Value::Null]);
        let mut want = vec![2, 1];
        want.extend_from_slice(&1.5f32.to_le_bytes());
        want.push(0);
        assert_eq!(enc(&ty, &v), want);
        let ty = ChType::array(ChType::StringMap);
        let h = arr_of(vec![Value::Null, Value::Hstore(vec![("k".into(), None)])]);
        assert_eq!(enc(&ty, &h), [2, 0, 1, 1, b'k', 1]);
        assert_eq!(
            crate::ddl::literal(&ChType::Vector, &Value::Vector(vec![1.5, -2.0])).unwrap(),
            "[1.5, -2.0]::Array(Float32)"
        );
        let sparse = Value::SparseVector {
            dim: 3,
            indices: vec![1],
            values: vec![4.0],
        };
        assert_eq!(
            crate::ddl::literal(&ChType::Vector, &sparse).unwrap(),
            "[0.0, 4.0, 0.0]::Array(Float32)"
        );
    }

    #[test]
    fn sparse_vectors_are_written_dense() {
        let ty = ChType::Vector;
        let sparse = |dim, indices: Vec<u32>, values: Vec<f32>| Value::SparseVector {
            dim,
            indices,
            values,
        };
        let mut want = vec![4];
        for f in [0.0f32, 1.5, 0.0, -2.0] {
            want.extend_from_slice(&f.to_le_bytes());
        }
        assert_eq!(enc(&ty, &sparse(4, vec![1, 3], vec![1.5, -2.0])), want);
        assert_eq!(enc(&ty, &sparse(0, vec![], vec![])), [0]);
        assert_eq!(
            enc(&ty, &sparse(2, vec![], vec![])),
            [2, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert!(matches!(
            err(&ty, &sparse(MAX_DENSE_DIMENSIONS + 1, vec![0], vec![1.0])),
            EncodeErrorKind::TooManyDimensions { .. }
        ));
        assert_eq!(
            sparse(5, vec![0, 3], vec![1.5, -2.0])
                .to_pg_text()
                .as_deref(),
            Some("{1:1.5,4:-2}/5")
        );
    }

    #[test]
    fn clamp_writes_the_ends_of_the_range() {
        use crate::datetime::{DATE32_MAX, DATE32_MIN, DATETIME64_MAX, DATETIME64_MIN};
        let clamp = ValuePolicy::Clamp;
        for (pg, want) in [
            (i32::MAX, DATE32_MAX),
            (i32::MIN, DATE32_MIN),
            (-36_525, DATE32_MIN), // 1899-12-31
            (109_573, DATE32_MAX), // 2300-01-01
        ] {
            let (out, n) = under(&ChType::Date32, &Value::Date(pg), clamp).unwrap();
            assert_eq!((out, n), ((want as i32).to_le_bytes().to_vec(), 1), "{pg}");
        }
        let (out, n) = under(&ChType::Date32, &Value::Date(0), clamp).unwrap();
        assert_eq!((out, n), (10_957i32.to_le_bytes().to_vec(), 0), "in range");
        for (pg, want) in [(i64::MAX, DATETIME64_MAX), (i64::MIN, DATETIME64_MIN)] {
            let (out, n) =
                under(&ChType::DateTime64Utc(6), &Value::TimestampTz(pg), clamp).unwrap();
            assert_eq!((out, n), (want.to_le_bytes().to_vec(), 1));
        }
        let d = ChType::Decimal {
            precision: 5,
            scale: 2,
        };
        let (out, _) = under(&d, &Value::Numeric(Numeric::NegInfinity), clamp).unwrap();
        assert_eq!(out, (-99_999i32).to_le_bytes(), "-999.99");
        let (out, _) = under(&d, &finite(false, 1, 0, &[1, 0]), clamp).unwrap();
        assert_eq!(out, 99_999i32.to_le_bytes(), "10000 is past 999.99");
        let wide = ChType::Decimal {
            precision: 76,
            scale: 0,
        };
        let (out, _) = under(&wide, &Value::Numeric(Numeric::PosInfinity), clamp).unwrap();
        assert_eq!(out, crate::decimal::extreme(76, false), "Decimal256");
        // NaN has no nearest value.
        assert!(matches!(
            under(&d, &Value::Numeric(Numeric::NaN), clamp),
            Err(EncodeErrorKind::NotFinite { .. })
        ));
        // Array elements clamp one by one.
        let a = ChType::array(ChType::nullable(ChType::Date32));
        let (out, n) = under(
            &a,
            &arr_of(vec![Value::Date(0), Value::Date(i32::MAX)]),
            clamp,
        )
        .unwrap();
        let mut want = vec![2, 0];
        want.extend_from_slice(&10_957i32.to_le_bytes());
        want.push(0);
        want.extend_from_slice(&(DATE32_MAX as i32).to_le_bytes());
        assert_eq!((out, n), (want, 1));
    }

    #[test]
    fn null_replaces_at_the_nearest_nullable() {
        let null = ValuePolicy::Null;
        let nd = ChType::nullable(ChType::Date32);
        assert_eq!(
            under(&nd, &Value::Date(i32::MAX), null).unwrap(),
            (vec![1], 1)
        );
        assert_eq!(
            under(
                &ChType::nullable(ChType::Decimal {
                    precision: 10,
                    scale: 2
                }),
                &Value::Numeric(Numeric::NaN),
                null
            )
            .unwrap(),
            (vec![1], 1)
        );
        let a = ChType::array(ChType::nullable(ChType::DateTime64Utc(6)));
        let (out, n) = under(
            &a,
            &arr_of(vec![Value::Timestamp(i64::MIN), Value::Timestamp(0)]),
            null,
        )
        .unwrap();
        let mut want = vec![2, 1, 0];
        want.extend_from_slice(&946_684_800_000_000i64.to_le_bytes());
        assert_eq!((out, n), (want, 1));
        // Not a range problem: still an error.
        assert_eq!(
            under(&nd, &Value::Int32(1), null).unwrap_err(),
            EncodeErrorKind::Mismatch {
                ch_type: "Date32".into(),
                value: "int4"
            }
        );
        // Without a Nullable around it, null cannot act (the layout makes
        // one; this guards the encoder).
        assert!(under(&ChType::Date32, &Value::Date(i32::MAX), null).is_err());
    }

    #[test]
    fn string_writes_postgres_text_of_any_value() {
        let s = ChType::String;
        assert_eq!(enc(&s, &Value::Date(i32::MAX)), b"\x08infinity");
        assert_eq!(enc(&s, &Value::Date(109_573)), b"\x0a2300-01-01");
        assert_eq!(
            enc(&s, &arr_of(vec![Value::Date(0), Value::Date(i32::MIN)])),
            b"\x16{2000-01-01,-infinity}"
        );
    }

    #[test]
    fn a_range_error_names_the_policy_options() {
        let e = EncodeError {
            table: "public.t".into(),
            column: Some("born".into()),
            kind: err(&ChType::Date32, &Value::Date(i32::MAX)),
        };
        let text = e.to_string();
        assert!(
            text.contains(
                "out_of_range_columns = { \"born\" = \"null\" | \"clamp\" | \"string\" }"
            ) && text.contains("[table.\"public.t\"]"),
            "{text}"
        );
        let e = EncodeError {
            kind: EncodeErrorKind::NullInNotNull,
            ..e
        };
        assert!(!e.to_string().contains("out_of_range"), "{e}");
    }

    #[test]
    fn a_datetime64_column_asking_for_less_precision_floors() {
        // 2000-01-01 00:00:00.123456 UTC, and 0.000001 s before 1970.
        let pg_2000 = 123_456;
        let before_1970 = -946_684_800_000_001;
        for (p, pg, want) in [
            (6u8, pg_2000, 946_684_800_123_456i64),
            (3, pg_2000, 946_684_800_123),
            (0, pg_2000, 946_684_800),
            (3, before_1970, -1),
            (0, before_1970, -1),
        ] {
            assert_eq!(
                enc(&ChType::DateTime64Utc(p), &Value::TimestampTz(pg)),
                want.to_le_bytes(),
                "DateTime64({p}) of {pg}"
            );
        }
        // The range is the type's whatever the precision.
        assert!(err(&ChType::DateTime64Utc(3), &Value::Timestamp(i64::MAX)).is_out_of_range());
        let (out, n) = under(
            &ChType::DateTime64Utc(3),
            &Value::Timestamp(i64::MAX),
            ValuePolicy::Clamp,
        )
        .unwrap();
        assert_eq!(
            (out, n),
            ((10_413_791_999_999i64).to_le_bytes().to_vec(), 1)
        );
    }

    #[test]
    fn a_json_column_holds_objects_and_writes_their_text() {
        let doc = r#"{"a": 1, "b": [1, 2]}"#;
        let mut want = vec![doc.len() as u8];
        want.extend_from_slice(doc.as_bytes());
        assert_eq!(enc(&ChType::Json, &Value::Jsonb(doc.into())), want);
        assert_eq!(
            enc(&ChType::Json, &Value::Json(format!(" {doc}"))).len(),
            want.len() + 1
        );
        for not_object in ["[1, 2]", "5", "\"x\"", "null"] {
            let e = err(&ChType::Json, &Value::Jsonb(not_object.into()));
            assert!(e.is_out_of_range(), "{not_object}: {e}");
            assert!(e.to_string().contains("JSON object"), "{e}");
            // Under `null` it is NULL, and counted.
            let (out, n) = under(
                &ChType::nullable(ChType::Json),
                &Value::Jsonb(not_object.into()),
                ValuePolicy::Null,
            )
            .unwrap();
            assert_eq!((out, n), (vec![1], 1));
        }
        // A delete's non-key JSON column: an empty object.
        let mut out = Vec::new();
        write_default(&mut out, &ChType::Json);
        assert_eq!(out, b"\x02{}");
    }

    #[test]
    fn rows_count_the_values_their_policies_replaced() {
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
            columns: [("born".to_owned(), ValuePolicy::Null)].into(),
        };
        let t = DestTable::with_values(&d, &MetaColumns::default(), &values).unwrap();
        assert_eq!(
            t.column("born").unwrap().ch_type,
            ChType::nullable(ChType::Date32),
            "NOT NULL, but null says NULL"
        );
        let e = RowBinaryEncoder::new(&t);
        let mut out = Vec::new();
        let n = e
            .encode_row(
                &mut out,
                &[
                    Value::Int32(1),
                    Value::Date(i32::MIN),
                    Value::TimestampTz(i64::MAX),
                ],
                &meta(false),
            )
            .unwrap();
        assert_eq!(n, 2);
        let mut want = vec![1, 0, 0, 0, 1, 0];
        want.extend_from_slice(&crate::datetime::DATETIME64_MAX.to_le_bytes());
        assert_eq!(out.get(..want.len()), Some(&want[..]));
    }

    fn meta(deleted: bool) -> RowMeta {
        RowMeta {
            lsn: Lsn(0x10),
            seq: Lsn(0x08),
            xid: 7,
            commit_time: 0,
            deleted,
        }
    }

    #[test]
    fn rows_and_deletes() {
        let mut dropped = attr(2, "gone", 0, false);
        dropped.dropped = true;
        let d = rel(
            vec![
                attr(1, "id", oid::INT4, true),
                dropped,
                attr(3, "v", oid::TEXT, true),
            ],
            &["id"],
            "d",
            vec![],
        );
        let e = RowBinaryEncoder::new(&DestTable::new(&d, &MetaColumns::default()).unwrap());
        let mut tail = Vec::new();
        tail.extend_from_slice(&0x10u64.to_le_bytes());
        tail.extend_from_slice(&0x08u64.to_le_bytes());
        tail.extend_from_slice(&7u32.to_le_bytes());
        tail.extend_from_slice(&946_684_800_000_000i64.to_le_bytes());

        let mut out = Vec::new();
        e.encode_row(
            &mut out,
            &[Value::Int32(1), Value::Null, Value::Text("x".into())],
            &meta(false),
        )
        .unwrap();
        let mut want = vec![1, 0, 0, 0, 1, b'x'];
        want.extend_from_slice(&tail);
        want.push(0);
        assert_eq!(out, want);

        // Live-only values, and a delete: the non-key String gets "".
        out.clear();
        e.encode_row(&mut out, &[Value::Int32(1), Value::Null], &meta(true))
            .unwrap();
        let mut want = vec![1, 0, 0, 0, 0];
        want.extend_from_slice(&tail);
        want.push(1);
        assert_eq!(out, want);

        // Errors leave the buffer as it was and name the column.
        let before = out.clone();
        let er = e
            .encode_row(&mut out, &[Value::Int32(1), Value::Null], &meta(false))
            .unwrap_err();
        assert_eq!(out, before);
        assert_eq!(er.column.as_deref(), Some("v"));
        assert!(er.to_string().contains("public.t"), "{er}");
        let er = e
            .encode_row(&mut out, &[Value::Int32(1)], &meta(false))
            .unwrap_err();
        assert!(matches!(er.kind, EncodeErrorKind::ValueCount { .. }));
    }
}
