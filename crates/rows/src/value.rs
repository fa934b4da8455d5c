//! Decoded column values: PostgreSQL's on-disk representation lifted into
//! Rust, still in PostgreSQL's units (days and microseconds since
//! 2000-01-01, base-10000 numeric digits), so nothing is lost before the
//! emitter picks a ClickHouse encoding.

/// A `numeric` (see numeric.c: `NumericVar`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Numeric {
    NaN,
    PosInfinity,
    NegInfinity,
    Finite {
        negative: bool,
        /// Weight of the first digit: the value is
        /// `sum(digits[i] * 10000^(weight - i))`.
        weight: i16,
        /// Display scale: digits after the decimal point.
        dscale: u16,
        /// Base-10000 digits, most significant first (no leading or
        /// trailing zero digits).
        digits: Vec<i16>,
    },
}

/// An `inet` or `cidr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InetValue {
    /// 4 bytes for IPv4, 16 for IPv6.
    pub addr: Vec<u8>,
    pub bits: u8,
    /// `cidr` (network) rather than `inet` (host).
    pub is_cidr: bool,
}

/// An array value: dimensions and elements in row-major order.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayValue {
    /// Element type OID, as declared (the domain, for an array of a
    /// domain).
    pub element_type: u32,
    /// (length, lower bound) per dimension; empty for `{}`.
    pub dims: Vec<(i32, i32)>,
    pub elements: Vec<Value>,
    /// What separates elements in the array's text (the element type's
    /// `typdelim`): `,`, but `;` for `box` and `:` for PostGIS types.
    pub delimiter: char,
}

/// One column's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int16(i16),
    Int32(i32),
    Int64(i64),
    Oid(u32),
    Float32(f32),
    Float64(f64),
    Numeric(Numeric),
    /// `money`: an int8 in the smallest currency unit.
    Money(i64),
    /// text, varchar, bpchar (padding kept), name, and `"char"` as
    /// `charout` writes it (a high-bit byte as `\ooo`, NUL as empty).
    Text(String),
    Bytea(Vec<u8>),
    /// Days since 2000-01-01; `i32::MIN`/`i32::MAX` are -infinity/infinity.
    Date(i32),
    /// Microseconds since midnight.
    Time(i64),
    /// Microseconds since midnight and the zone offset in seconds west of
    /// UTC (PostgreSQL's sign convention).
    TimeTz {
        micros: i64,
        zone_secs_west: i32,
    },
    /// Microseconds since 2000-01-01 00:00; `i64::MIN`/`i64::MAX` are
    /// -infinity/infinity.
    Timestamp(i64),
    /// Microseconds since 2000-01-01 00:00 UTC; infinities as `Timestamp`.
    TimestampTz(i64),
    /// From 17 on, all three fields at their minimum (maximum) are
    /// -infinity (infinity).
    Interval {
        months: i32,
        days: i32,
        micros: i64,
    },
    Uuid([u8; 16]),
    /// `json`: the text as stored.
    Json(String),
    /// `jsonb`: rendered to JSON text exactly as PostgreSQL's `jsonb_out`.
    Jsonb(String),
    Inet(InetValue),
    MacAddr([u8; 6]),
    MacAddr8([u8; 8]),
    /// `bit`/`varbit`: length in bits and the bits, most significant first.
    Bits {
        len: u32,
        bytes: Vec<u8>,
    },
    Xml(String),
    /// An enum's label.
    Enum(String),
    Array(ArrayValue),
    /// pgvector's `vector`: its dimensions.
    Vector(Vec<f32>),
    /// contrib's `hstore`: its pairs in stored order (a `None` value is
    /// NULL).
    Hstore(Vec<(String, Option<String>)>),
    /// pgvector's `sparsevec`: `dim` dimensions, zero but at `indices`
    /// (0-based, ascending), which hold `values`.
    SparseVector {
        dim: u32,
        indices: Vec<u32>,
        values: Vec<f32>,
    },
    /// PostGIS `geometry` or `geography`: the EWKB `geometry_send` sends
    /// (little-endian, the SRID when it is not 0).
    Geometry(Vec<u8>),
}
