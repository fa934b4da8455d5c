//! PostgreSQL column types → ClickHouse column types.
//!
//! Built-in types are recognised by OID (fixed below `FirstGenbkiObjectId`,
//! see `pg_type.dat`); domains, enums and arrays by the catalog facts in
//! [`TypeDesc`]. Every type not in the table is refused with
//! [`UnsupportedType`] naming the column: a value is never silently
//! rewritten into something the reader cannot tell apart from the source.
//!
//! | PostgreSQL | ClickHouse | notes |
//! | --- | --- | --- |
//! | `bool` | `Bool` | |
//! | `int2` / `int4` / `int8` | `Int16` / `Int32` / `Int64` | |
//! | `oid` | `UInt32` | |
//! | `float4` / `float8` | `Float32` / `Float64` | NaN and ±Infinity kept |
//! | `numeric(p,s)`, `1 ≤ p ≤ 76`, `0 ≤ s ≤ p` | `Decimal(p,s)` | a NaN or ±Infinity value is a definite error naming the column |
//! | `numeric` (no typmod), `p > 76`, `s < 0` or `s > p` | `String` | PostgreSQL's text (`numeric_out`), `NaN`/`Infinity` included |
//! | `money` | `Decimal(19,2)` | assumes `lc_monetary` with 2 fractional digits (the stored int8 is in cents): 19 digits hold every int8, so the whole range of `money` |
//! | `"char"`, `bpchar`, `varchar`, `text`, `name` | `String` | `bpchar` padding kept |
//! | `bytea` | `String` | raw bytes, not the `\x` text |
//! | `date` | `Date32` | 1900-01-01 ..= 2299-12-31, else a definite error |
//! | `time` | `Time64(6)` | the type exists from ClickHouse 25.6, behind `enable_time_time64_type` (on by default in 26.x; [`crate::DestTable::query_settings`] sets it for the DDL) |
//! | `timetz` | `String` | PostgreSQL's text, e.g. `12:34:56.5+05:30` |
//! | `timestamp` | `DateTime64(6, 'UTC')` | the wall-clock value; see below |
//! | `timestamptz` | `DateTime64(6, 'UTC')` | the instant; ranges as `date` |
//! | `interval` | `String` | PostgreSQL's text in `IntervalStyle = postgres` |
//! | `uuid` | `UUID` | |
//! | `json`, `jsonb` | `String` | JSON text (`jsonb` as `jsonb_out` renders it) |
//! | `inet`, `cidr`, `macaddr`, `macaddr8`, `bit`, `varbit`, `xml` | `String` | PostgreSQL's text |
//! | `point`, `line`, `lseg`, `box`, `path`, `polygon`, `circle`, `pg_lsn` | `String` | PostgreSQL's text (`geo_ops.c`'s forms, `%X/%X`) |
//! | `pg_snapshot`, `txid_snapshot`, `int2vector`, `oidvector` | `String` | PostgreSQL's text (`xmin:xmax:xip,…`; elements space-separated) |
//! | `citext`, `ltree` (by extension and name, see `TypeDesc::is_extension_type`) | `String` | the text |
//! | `vector`, `halfvec`, `sparsevec` (pgvector, by extension and name) | `Array(Float32)` | never `Nullable` (a NULL vector is `[]`); `sparsevec` dense, zeros between its dimensions, refused past 2^20 dimensions; an array of vectors is `Array(Array(Float32))`, a NULL element `[]` |
//! | `tsvector`, `tsquery` | `String` | `tsvectorout`'s, `tsqueryout`'s text |
//! | `geometry`, `geography` (PostGIS, by extension and name) | `String` | ISO WKB as `ST_AsBinary` writes it (Z and M kept, the SRID not); `column_types = "String"` writes `geometry_out`'s hex EWKB instead |
//! | range (over a subtype the row decoder reads) | `String` | `range_out`'s text, `timestamptz` bounds in UTC |
//! | multirange (of such a range) | `String` | `multirange_out`'s text |
//! | composite (of fields the row decoder reads) | `String` | `record_out`'s text |
//! | `hstore` (by extension and name) | `Map(String, Nullable(String))` | never `Nullable` (a NULL hstore is `{}`); pairs in stored order; an array of hstores is `Array(Map(…))`, a NULL element `{}` |
//! | enum | `LowCardinality(String)` | the label |
//! | domain | its base type's mapping (with the domain's typmod) | |
//! | `T[]` | `Array(Nullable(T'))` nested `max(attndims, 1)` deep | see below |
//!
//! Nullability: a column without `NOT NULL` becomes `Nullable(T)`; an enum
//! becomes `LowCardinality(Nullable(String))`. ClickHouse has no
//! `Nullable(Array(..))` ("Nested type Array(..) cannot be inside Nullable
//! type", code 43), so an array column is a plain `Array` and a NULL array is
//! written as `[]`: the one place where ClickHouse cannot tell two source
//! values (`NULL` and `'{}'`) apart; a row-by-row comparison with the
//! source must read a NULL array as `{}`.
//!
//! Arrays: PostgreSQL does not enforce `attndims`, ClickHouse fixes the
//! nesting per column, so a value whose dimension count differs from the
//! declared one (an empty array excepted) is a definite error naming the
//! column. Lower bounds other than 1 are not kept.
//!
//! `timestamp` (without time zone) is `DateTime64(6, 'UTC')` rather than a
//! zone-less `DateTime64(6)`: ClickHouse renders a zone-less column in the
//! server's time zone, which would shift every wall-clock value on a server
//! not set to UTC. With `'UTC'` the stored microseconds read back as the
//! source's text.
//!
//! `numeric(p,s)` with `p ≤ 76`: PostgreSQL has already rounded every value
//! to `s` fractional digits and checked `p`, so the conversion is exact; a
//! value that does not fit anyway is an error, never rounded.

use std::fmt;

use walshadow_types::Oid;
use walshadow_types::catalog::{AttributeDesc, TypeDesc};

pub(crate) use walshadow_pg_format::type_oid as oid;

/// The widest ClickHouse `Decimal` (`Decimal256`).
pub const MAX_DECIMAL_PRECISION: u8 = 76;

/// A ClickHouse column type, as far as the emitter writes them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ChType {
    Bool,
    UInt8,
    Int16,
    Int32,
    Int64,
    UInt32,
    UInt64,
    UInt128,
    Float32,
    Float64,
    /// `Decimal(p, s)`, `1 ≤ p ≤ 76`, `s ≤ p`.
    Decimal {
        precision: u8,
        scale: u8,
    },
    String,
    Date32,
    /// `Time64(6)`.
    Time64,
    /// `DateTime64(p, 'UTC')`, `p ≤ 6`: 6 by default, less where a column
    /// asks for it (`column_types`; values are floored to the precision).
    DateTime64Utc(u8),
    /// `JSON`: a `json`/`jsonb` column that asks for it (`column_types`);
    /// written as the document's text, which ClickHouse parses.
    Json,
    Uuid,
    LowCardinality(Box<ChType>),
    Nullable(Box<ChType>),
    Array(Box<ChType>),
    /// `Map(String, Nullable(String))` (an `hstore`; never `Nullable`:
    /// NULL is `{}`).
    StringMap,
    /// One of ClickHouse's geo types (`column_types`), for a PostGIS
    /// column: never `Nullable` (NULL and POINT EMPTY are `(nan, nan)`
    /// in a `Point`, `[]` in the others).
    Geo(walshadow_types::GeoShape),
    /// `String` holding a PostGIS value as ISO WKB (`ST_AsBinary`'s bytes;
    /// the SRID is not kept).
    Wkb,
    /// `Array(Float32)` holding one pgvector value (never `Nullable`: NULL
    /// is `[]`); its own type, not an array level, so an array of vectors
    /// is `Array(Array(Float32))` with one PostgreSQL dimension.
    Vector,
}

impl ChType {
    pub fn nullable(inner: ChType) -> ChType {
        ChType::Nullable(Box::new(inner))
    }

    pub fn array(inner: ChType) -> ChType {
        ChType::Array(Box::new(inner))
    }

    pub fn low_cardinality(inner: ChType) -> ChType {
        ChType::LowCardinality(Box::new(inner))
    }

    /// `Nullable(..)` at the top, or `LowCardinality(Nullable(..))`.
    pub fn is_nullable(&self) -> bool {
        match self {
            ChType::Nullable(_) => true,
            ChType::LowCardinality(inner) => inner.is_nullable(),
            _ => false,
        }
    }

    /// The same type with (top-level) nullability added; arrays stay as they
    /// are since ClickHouse has no nullable array.
    pub fn to_nullable(&self) -> ChType {
        match self {
            ChType::Nullable(_)
            | ChType::Array(_)
            | ChType::StringMap
            | ChType::Vector
            | ChType::Geo(_) => self.clone(),
            ChType::LowCardinality(inner) => ChType::low_cardinality(inner.to_nullable()),
            other => ChType::nullable(other.clone()),
        }
    }

    /// The same type with top-level nullability removed.
    pub fn to_not_null(&self) -> ChType {
        match self {
            ChType::Nullable(inner) => (**inner).clone(),
            ChType::LowCardinality(inner) => ChType::low_cardinality(inner.to_not_null()),
            other => other.clone(),
        }
    }

    /// Whether some value of the PostgreSQL type mapped here has no
    /// ClickHouse value: `Decimal` (NaN, infinities), `Date32` and
    /// `DateTime64` (infinities, years outside 1900–2299), `JSON` (a
    /// document that is not an object), also as a nullable, array or
    /// low-cardinality element.
    pub fn has_limited_range(&self) -> bool {
        match self {
            ChType::Decimal { .. }
            | ChType::Date32
            | ChType::DateTime64Utc(_)
            | ChType::Json
            | ChType::Geo(_) => true,
            ChType::Nullable(i) | ChType::Array(i) | ChType::LowCardinality(i) => {
                i.has_limited_range()
            }
            _ => false,
        }
    }

    /// Whether ClickHouse's `MODIFY COLUMN` from `self` to `new` keeps
    /// every stored value exactly as PostgreSQL's own conversion gives it,
    /// so a source `ALTER COLUMN … TYPE` can be followed in place: wider
    /// integers, `float4` to `float8`, a `Decimal` with room for at least
    /// the same integer and fractional digits, an integer to a `String`
    /// (both sides write the digits), the same inside `Nullable` and
    /// `Array`, and a column that becomes nullable on the way. Not
    /// `Decimal` to `String` (ClickHouse drops trailing zeros PostgreSQL
    /// keeps) nor anything to do with dates (`timestamptz` from `date`
    /// depends on the session's time zone).
    pub fn widens_to(&self, new: &ChType) -> bool {
        use ChType as C;
        match (self, new) {
            (C::Nullable(a), C::Nullable(b)) | (C::Array(a), C::Array(b)) => a.widens_to(b),
            (a, C::Nullable(b)) if !a.is_nullable() => a == &**b || a.widens_to(b),
            (C::Int16, C::Int32 | C::Int64) | (C::Int32, C::Int64) | (C::Float32, C::Float64) => {
                true
            }
            (C::Int16 | C::Int32 | C::Int64, C::String) => true,
            (
                C::Decimal {
                    precision: p,
                    scale: s,
                },
                C::Decimal {
                    precision: p2,
                    scale: s2,
                },
            ) => s2 >= s && p2.saturating_sub(*s2) >= p.saturating_sub(*s) && (p2, s2) != (p, s),
            _ => false,
        }
    }

    /// The type for messages: as ClickHouse names it, and what a `String`
    /// holds where that is not text (`String of ISO WKB`).
    pub fn described(&self) -> String {
        match self {
            ChType::Wkb => "String of ISO WKB".into(),
            ChType::Nullable(i) => format!("Nullable({})", i.described()),
            ChType::Array(i) => format!("Array({})", i.described()),
            other => other.to_string(),
        }
    }

    /// Array nesting depth (0 for a scalar).
    pub fn array_depth(&self) -> usize {
        match self {
            ChType::Array(inner) => 1 + inner.array_depth(),
            _ => 0,
        }
    }
}

impl fmt::Display for ChType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChType::Bool => f.write_str("Bool"),
            ChType::UInt8 => f.write_str("UInt8"),
            ChType::Int16 => f.write_str("Int16"),
            ChType::Int32 => f.write_str("Int32"),
            ChType::Int64 => f.write_str("Int64"),
            ChType::UInt32 => f.write_str("UInt32"),
            ChType::UInt64 => f.write_str("UInt64"),
            ChType::UInt128 => f.write_str("UInt128"),
            ChType::Float32 => f.write_str("Float32"),
            ChType::Float64 => f.write_str("Float64"),
            ChType::Decimal { precision, scale } => write!(f, "Decimal({precision}, {scale})"),
            ChType::String => f.write_str("String"),
            ChType::Date32 => f.write_str("Date32"),
            ChType::Time64 => f.write_str("Time64(6)"),
            ChType::DateTime64Utc(p) => write!(f, "DateTime64({p}, 'UTC')"),
            ChType::Json => f.write_str("JSON"),
            ChType::Uuid => f.write_str("UUID"),
            ChType::LowCardinality(inner) => write!(f, "LowCardinality({inner})"),
            ChType::Nullable(inner) => write!(f, "Nullable({inner})"),
            ChType::Array(inner) => write!(f, "Array({inner})"),
            ChType::StringMap => f.write_str("Map(String, Nullable(String))"),
            ChType::Vector => f.write_str("Array(Float32)"),
            ChType::Wkb => f.write_str("String"),
            ChType::Geo(g) => f.write_str(g.name()),
        }
    }
}

/// A column whose type the emitter cannot represent faithfully.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "column {column:?}: type {type_name} cannot be replicated to ClickHouse ({reason}); \
     change the column's type, or leave the column out: exclude_columns = [\"{column}\"] or \
     unsupported_columns = \"skip\" in the table's [table] section"
)]
pub struct UnsupportedType {
    pub column: String,
    pub type_name: String,
    pub reason: String,
}

/// What a PostgreSQL type maps to before the column's nullability and
/// dimensions are applied.
enum Mapped {
    Scalar(ChType),
    /// Taken as it is: never wrapped in `Nullable`.
    Plain(ChType),
    Enum,
    Array {
        element: Oid,
        typmod: i32,
    },
}

/// The ClickHouse type of one column (see the module doc for the table).
pub fn clickhouse_type(
    attr: &AttributeDesc,
    types: &[TypeDesc],
) -> Result<ChType, UnsupportedType> {
    let unsupported = |type_oid: Oid, reason: String| UnsupportedType {
        column: attr.name.clone(),
        type_name: type_name(type_oid, types),
        reason,
    };
    let mapped =
        map_type(attr.type_oid, attr.typmod, types, 0).map_err(|(o, r)| unsupported(o, r))?;
    Ok(match mapped {
        Mapped::Plain(t) => t,
        Mapped::Scalar(t) if attr.not_null => t,
        Mapped::Scalar(t) => ChType::nullable(t),
        Mapped::Enum if attr.not_null => ChType::low_cardinality(ChType::String),
        Mapped::Enum => ChType::low_cardinality(ChType::nullable(ChType::String)),
        Mapped::Array { element, typmod } => {
            let mut t =
                match map_type(element, typmod, types, 0).map_err(|(o, r)| unsupported(o, r))? {
                    Mapped::Scalar(t) => ChType::nullable(t),
                    Mapped::Enum => ChType::low_cardinality(ChType::nullable(ChType::String)),
                    Mapped::Array { .. } => {
                        return Err(unsupported(
                        element,
                        "an array whose elements are themselves arrays (a domain over an array)"
                            .into(),
                    ));
                    }
                    // A NULL element is [] or {}, as a NULL value is.
                    Mapped::Plain(t) => t,
                };
            for _ in 0..attr.ndims.max(1) {
                t = ChType::array(t);
            }
            t
        }
    })
}

fn map_type(
    type_oid: Oid,
    typmod: i32,
    types: &[TypeDesc],
    depth: u8,
) -> Result<Mapped, (Oid, String)> {
    use ChType as C;
    let scalar = |t| Ok(Mapped::Scalar(t));
    match type_oid {
        oid::BOOL => return scalar(C::Bool),
        oid::INT2 => return scalar(C::Int16),
        oid::INT4 => return scalar(C::Int32),
        oid::INT8 => return scalar(C::Int64),
        oid::OID => return scalar(C::UInt32),
        oid::FLOAT4 => return scalar(C::Float32),
        oid::FLOAT8 => return scalar(C::Float64),
        oid::NUMERIC => return scalar(numeric_type(typmod)),
        oid::MONEY => {
            return scalar(C::Decimal {
                precision: 19,
                scale: 2,
            });
        }
        oid::CHAR | oid::BPCHAR | oid::VARCHAR | oid::TEXT | oid::NAME | oid::BYTEA => {
            return scalar(C::String);
        }
        oid::DATE => return scalar(C::Date32),
        oid::TIME => return scalar(C::Time64),
        oid::TIMESTAMP | oid::TIMESTAMPTZ => return scalar(C::DateTime64Utc(6)),
        oid::UUID => return scalar(C::Uuid),
        oid::TIMETZ
        | oid::INTERVAL
        | oid::JSON
        | oid::JSONB
        | oid::INET
        | oid::CIDR
        | oid::MACADDR
        | oid::MACADDR8
        | oid::BIT
        | oid::VARBIT
        | oid::XML
        | oid::POINT
        | oid::LINE
        | oid::LSEG
        | oid::BOX
        | oid::PATH
        | oid::POLYGON
        | oid::CIRCLE
        | oid::PG_LSN
        | oid::TSVECTOR
        | oid::TSQUERY
        | oid::PG_SNAPSHOT
        | oid::TXID_SNAPSHOT
        | oid::INT2VECTOR
        | oid::OIDVECTOR => return scalar(C::String),
        _ => {}
    }
    let Some(t) = types.iter().find(|t| t.oid == type_oid) else {
        return Err((
            type_oid,
            "the type is not in the relation's catalog description".into(),
        ));
    };
    if t.is_extension_type("citext", "citext") || t.is_extension_type("ltree", "ltree") {
        return Ok(Mapped::Scalar(ChType::String));
    }
    if t.is_extension_type("postgis", "geometry") || t.is_extension_type("postgis", "geography") {
        return Ok(Mapped::Scalar(ChType::Wkb));
    }
    if t.is_extension_type("hstore", "hstore") {
        // ClickHouse has no Nullable(Map): a NULL hstore is {}.
        return Ok(Mapped::Plain(ChType::StringMap));
    }
    if t.is_extension_type("vector", "vector")
        || t.is_extension_type("vector", "halfvec")
        || t.is_extension_type("vector", "sparsevec")
    {
        // ClickHouse has no Nullable(Array): a NULL vector is [].
        return Ok(Mapped::Plain(ChType::Vector));
    }
    match t.typtype.as_str() {
        "d" => {
            let base = t.base_type.ok_or_else(|| {
                (
                    type_oid,
                    "domain without a base type in the catalog description".into(),
                )
            })?;
            // A domain over a domain over ... is bounded by the catalog; the
            // cap only guards against a cyclic description.
            if depth > 32 {
                return Err((type_oid, "domain nesting deeper than 32 levels".into()));
            }
            map_type(base, t.base_typmod.unwrap_or(-1), types, depth + 1)
        }
        "e" => Ok(Mapped::Enum),
        "b" if t.category == "A" => match t.element {
            Some(element) => Ok(Mapped::Array { element, typmod }),
            None => Err((type_oid, "array type without an element type".into())),
        },
        // `record_out`'s text; the row decoder refuses a field it cannot
        // read.
        "c" => Ok(Mapped::Scalar(ChType::String)),
        // PostgreSQL's text, as for the geometric types; the row decoder
        // refuses a subtype it cannot read.
        "r" | "m" => Ok(Mapped::Scalar(ChType::String)),
        _ => Err((type_oid, "no ClickHouse mapping for this type".into())),
    }
}

/// Whether `type_oid` is `money`, or a domain or array of it.
pub(crate) fn is_money(type_oid: Oid, types: &[TypeDesc]) -> bool {
    let mut oid = type_oid;
    // A cyclic description cannot hold this up: the catalog bounds nesting.
    for _ in 0..=32 {
        if oid == oid::MONEY {
            return true;
        }
        match types.iter().find(|t| t.oid == oid) {
            Some(t) => match t.base_type.or(t.element) {
                Some(next) => oid = next,
                None => return false,
            },
            None => return false,
        }
    }
    false
}

/// `numeric(p,s)` → `Decimal(p,s)` when ClickHouse can hold it exactly.
/// The typmod layout follows numeric.c (`NUMERIC_TYPMOD_PRECISION`,
/// `NUMERIC_TYPMOD_SCALE`; the scale is an 11-bit signed field since 15).
fn numeric_type(typmod: i32) -> ChType {
    const VARHDRSZ: i32 = 4;
    if typmod < VARHDRSZ {
        return ChType::String;
    }
    let precision = ((typmod - VARHDRSZ) >> 16) & 0xffff;
    let scale = (((typmod - VARHDRSZ) & 0x7ff) ^ 1024) - 1024;
    match (u8::try_from(precision), u8::try_from(scale)) {
        (Ok(p), Ok(s)) if (1..=MAX_DECIMAL_PRECISION).contains(&p) && s <= p => ChType::Decimal {
            precision: p,
            scale: s,
        },
        _ => ChType::String,
    }
}

fn type_name(type_oid: Oid, types: &[TypeDesc]) -> String {
    match types.iter().find(|t| t.oid == type_oid) {
        Some(t) => format!("{}.{}", t.schema, t.name),
        None => format!("OID {type_oid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_keeps_every_value() {
        use ChType as C;
        let dec = |precision, scale| C::Decimal { precision, scale };
        let n = C::nullable;
        for (from, to) in [
            (C::Int16, C::Int32),
            (C::Int32, C::Int64),
            (C::Int16, n(C::Int64)),
            (n(C::Int32), n(C::Int64)),
            (C::Float32, C::Float64),
            (C::Int64, C::String),
            (n(C::Int32), n(C::String)),
            (dec(10, 2), dec(12, 2)),
            (dec(10, 2), dec(12, 4)),
            (dec(10, 2), dec(40, 2)),
            (C::array(n(C::Int32)), C::array(n(C::Int64))),
            (C::Int32, n(C::Int32)),
        ] {
            assert!(from.widens_to(&to), "{from} -> {to}");
        }
        for (from, to) in [
            (C::Int64, C::Int32),
            (n(C::Int32), C::Int64),
            (C::Float64, C::Float32),
            (C::Int32, C::Float64),
            (dec(10, 2), C::String),
            (dec(10, 2), dec(10, 2)),
            (dec(10, 2), dec(11, 4)),
            (dec(10, 2), dec(12, 1)),
            (C::Date32, C::DateTime64Utc(6)),
            (C::String, C::Int64),
            (C::Int32, C::Int32),
            (C::array(n(C::Int32)), n(C::Int64)),
        ] {
            assert!(!from.widens_to(&to), "{from} -> {to}");
        }
    }
    use walshadow_types::catalog::fixtures::type_desc;

    fn attr(name: &str, type_oid: Oid, typmod: i32, not_null: bool) -> AttributeDesc {
        AttributeDesc {
            typmod,
            ..crate::schema::tests::attr(1, name, type_oid, not_null)
        }
    }

    fn numeric_typmod(p: i32, s: i32) -> i32 {
        ((p << 16) | (s & 0x7ff)) + 4
    }

    fn ty(a: &AttributeDesc, types: &[TypeDesc]) -> String {
        clickhouse_type(a, types).unwrap().to_string()
    }

    #[test]
    fn scalars_and_nullability() {
        assert_eq!(ty(&attr("a", oid::INT4, -1, true), &[]), "Int32");
        assert_eq!(ty(&attr("a", oid::INT4, -1, false), &[]), "Nullable(Int32)");
        assert_eq!(
            ty(&attr("a", oid::TIMESTAMPTZ, -1, true), &[]),
            "DateTime64(6, 'UTC')"
        );
        assert_eq!(ty(&attr("a", oid::TIME, -1, true), &[]), "Time64(6)");
        assert_eq!(ty(&attr("a", oid::MONEY, -1, true), &[]), "Decimal(19, 2)");
        assert_eq!(ty(&attr("a", oid::UUID, -1, false), &[]), "Nullable(UUID)");
    }

    #[test]
    fn numeric_typmods() {
        assert_eq!(
            ty(&attr("n", oid::NUMERIC, numeric_typmod(10, 2), true), &[]),
            "Decimal(10, 2)"
        );
        assert_eq!(
            ty(&attr("n", oid::NUMERIC, numeric_typmod(76, 76), true), &[]),
            "Decimal(76, 76)"
        );
        assert_eq!(
            ty(&attr("n", oid::NUMERIC, numeric_typmod(77, 0), true), &[]),
            "String"
        );
        assert_eq!(
            ty(&attr("n", oid::NUMERIC, numeric_typmod(5, -2), true), &[]),
            "String"
        );
        assert_eq!(
            ty(&attr("n", oid::NUMERIC, numeric_typmod(3, 5), true), &[]),
            "String"
        );
        assert_eq!(
            ty(&attr("n", oid::NUMERIC, -1, false), &[]),
            "Nullable(String)"
        );
    }

    #[test]
    fn enums_domains_arrays() {
        let mut e = type_desc(50000, "mood", "e", "E");
        e.enum_labels = vec!["sad".into(), "ok".into()];
        let mut d = type_desc(50001, "posint", "d", "N");
        d.base_type = Some(oid::NUMERIC);
        d.base_typmod = Some(numeric_typmod(12, 3));
        let mut arr = type_desc(50002, "_mood", "b", "A");
        arr.element = Some(50000);
        let mut int_arr = type_desc(1007, "_int4", "b", "A");
        int_arr.element = Some(oid::INT4);
        let types = vec![e, d, arr, int_arr];

        assert_eq!(
            ty(&attr("e", 50000, -1, true), &types),
            "LowCardinality(String)"
        );
        assert_eq!(
            ty(&attr("e", 50000, -1, false), &types),
            "LowCardinality(Nullable(String))"
        );
        assert_eq!(
            ty(&attr("d", 50001, -1, false), &types),
            "Nullable(Decimal(12, 3))"
        );
        assert_eq!(
            ty(&attr("a", 50002, -1, false), &types),
            "Array(LowCardinality(Nullable(String)))"
        );
        let mut a2 = attr("a2", 1007, -1, false);
        a2.ndims = 2;
        assert_eq!(ty(&a2, &types), "Array(Array(Nullable(Int32)))");
    }

    #[test]
    fn unsupported_names_column() {
        let mut jp = type_desc(4072, "jsonpath", "b", "U");
        jp.schema = "pg_catalog".into();
        let err = clickhouse_type(&attr("where", 4072, -1, true), &[jp]).unwrap_err();
        assert_eq!(err.column, "where");
        assert!(err.to_string().contains("pg_catalog.jsonpath"), "{err}");
        let err = clickhouse_type(&attr("x", 99999, -1, true), &[]).unwrap_err();
        assert!(err.to_string().contains("OID 99999"), "{err}");
    }
}
