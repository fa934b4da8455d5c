//! One field of binary COPY → [`Value`]: the inverse of each type's `*send`
//! function, checked as its `*recv` function checks (so a value the server
//! could not have sent is an error, not a silently odd value).
//!
//! Every integer is big-endian (pq_sendint*). Per kind:
//!
//! ```text
//!  bool, "char"            1 byte (boolsend, charsend)
//!  int2/int4/int8, oid     2/4/8/4 bytes; money: int8 (cash_send)
//!  float4/float8           IEEE bits, 4/8 bytes (float4send: pq_sendfloat4)
//!  text, varchar, bpchar,  the text as stored, padding kept (textsend,
//!  name, json, xml, enum   namesend, json_send, xml_send, enum_send: label)
//!  bytea                   the bytes
//!  jsonb                   version byte 1, then jsonb_out's text (jsonb_send)
//!  numeric                 int16 ndigits, weight, sign, dscale; int16 digits
//!                          (numeric_send; sign 0x0000, 0x4000 negative,
//!                          0xC000 NaN, 0xD000 +Infinity, 0xF000 -Infinity)
//!  date                    int32 days since 2000-01-01 (date_send)
//!  time                    int64 µs (time_send); timetz: + int32 zone (s west)
//!  timestamp[tz]           int64 µs since 2000-01-01 (timestamp_send)
//!  interval                int64 µs, int32 days, int32 months (interval_send)
//!  uuid, macaddr, macaddr8 16, 6, 8 bytes
//!  inet, cidr              family (2 IPv4, 3 IPv6), bits, is_cidr, nb, nb
//!                          address bytes (inet_send in network.c)
//!  bit, varbit             int32 bit length, then the bytes (bit_send)
//!  arrays                  int32 ndim, int32 has-nulls, oid element type,
//!                          ndim × (int32 length, int32 lower bound), then per
//!                          element int32 length (-1 NULL) and its send bytes
//!                          (array_send in arrayfuncs.c)
//! ```
//!
//! Domains send as their base type (DefineDomain copies `typsend`), which
//! is what their resolved [`Kind`] is. The Values are those the heap
//! decoder gives for the same datum: the same variants, numerics
//! normalized the same way, empty arrays without dimensions.

use crate::{ArrayKind, ArrayValue, InetValue, Kind, Numeric, Value};

/// A field that is not its type's send output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SendError {
    pub type_name: &'static str,
    pub detail: String,
}

fn bad(kind: &Kind, detail: impl Into<String>) -> SendError {
    SendError {
        type_name: kind.type_name(),
        detail: detail.into(),
    }
}

/// Exactly `N` bytes.
fn exact<const N: usize>(kind: &Kind, b: &[u8]) -> Result<[u8; N], SendError> {
    <[u8; N]>::try_from(b)
        .map_err(|_| bad(kind, format!("{} bytes where {N} are expected", b.len())))
}

/// A checked big-endian reader over one field (the one cursor, with
/// `None` for a field cut short).
struct Reader<'a>(walshadow_pg_format::cursor::Cursor<'a>);

impl<'a> Reader<'a> {
    fn new(b: &'a [u8]) -> Self {
        Reader(walshadow_pg_format::cursor::Cursor::new(b))
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        self.0.take(n).ok()
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.0.array().ok()
    }

    fn u8(&mut self) -> Option<u8> {
        self.0.u8().ok()
    }

    fn u16(&mut self) -> Option<u16> {
        self.0.u16_be().ok()
    }

    fn i16(&mut self) -> Option<i16> {
        self.0.i16_be().ok()
    }

    fn i32(&mut self) -> Option<i32> {
        self.0.i32_be().ok()
    }

    fn rest(&self) -> &'a [u8] {
        self.0.peek_rest()
    }
}

fn utf8(kind: &Kind, b: &[u8]) -> Result<String, SendError> {
    String::from_utf8(b.to_vec()).map_err(|e| {
        bad(
            kind,
            format!("not valid UTF-8 at byte {}", e.utf8_error().valid_up_to()),
        )
    })
}

/// `charout`: a high-bit byte as `\ooo`, NUL as the empty string (the
/// heap decoder's form of a `"char"`).
fn char_text(b: u8) -> String {
    if b & 0x80 != 0 {
        format!("\\{b:03o}")
    } else if b == 0 {
        String::new()
    } else {
        char::from(b).to_string()
    }
}

/// Decodes one non-NULL field of kind `kind`.
pub(crate) fn decode(kind: &Kind, b: &[u8]) -> Result<Value, SendError> {
    Ok(match kind {
        // boolrecv: any non-zero byte is true.
        Kind::Bool => Value::Bool(exact::<1>(kind, b)? != [0]),
        Kind::Int2 => Value::Int16(i16::from_be_bytes(exact(kind, b)?)),
        Kind::Int4 => Value::Int32(i32::from_be_bytes(exact(kind, b)?)),
        Kind::Int8 => Value::Int64(i64::from_be_bytes(exact(kind, b)?)),
        Kind::Oid => Value::Oid(u32::from_be_bytes(exact(kind, b)?)),
        Kind::Float4 => Value::Float32(f32::from_bits(u32::from_be_bytes(exact(kind, b)?))),
        Kind::Float8 => Value::Float64(f64::from_bits(u64::from_be_bytes(exact(kind, b)?))),
        Kind::Money => Value::Money(i64::from_be_bytes(exact(kind, b)?)),
        Kind::Char => {
            let [c] = exact::<1>(kind, b)?;
            Value::Text(char_text(c))
        }
        Kind::Name | Kind::Text => Value::Text(utf8(kind, b)?),
        Kind::Json => Value::Json(utf8(kind, b)?),
        Kind::Xml => Value::Xml(utf8(kind, b)?),
        Kind::Bytea => Value::Bytea(b.to_vec()),
        Kind::Jsonb => match b.split_first() {
            Some((1, text)) => Value::Jsonb(utf8(kind, text)?),
            Some((v, _)) => return Err(bad(kind, format!("format version {v}"))),
            None => return Err(bad(kind, "no format version")),
        },
        Kind::Enum(labels) => {
            let label = utf8(kind, b)?;
            // enum_recv refuses labels the type does not have.
            if !labels.labels.values().any(|l| *l == label) {
                return Err(bad(
                    kind,
                    format!(
                        "{label:?} is not a label of type {} known to the catalog",
                        labels.type_name
                    ),
                ));
            }
            Value::Enum(label)
        }
        Kind::Numeric => Value::Numeric(numeric(kind, b)?),
        Kind::Date => {
            let d = i32::from_be_bytes(exact(kind, b)?);
            limits::check_date(d).map_err(|m| bad(kind, m))?;
            Value::Date(d)
        }
        Kind::Time => {
            let t = i64::from_be_bytes(exact(kind, b)?);
            limits::check_time(t).map_err(|m| bad(kind, m))?;
            Value::Time(t)
        }
        Kind::TimeTz => {
            let raw: [u8; 12] = exact(kind, b)?;
            let mut r = Reader::new(&raw);
            let micros = r.array().map(i64::from_be_bytes).unwrap_or_default();
            let zone = r.i32().unwrap_or_default();
            limits::check_time(micros).map_err(|m| bad(kind, m))?;
            limits::check_zone(zone).map_err(|m| bad(kind, m))?;
            Value::TimeTz {
                micros,
                zone_secs_west: zone,
            }
        }
        Kind::Timestamp | Kind::TimestampTz => {
            let t = i64::from_be_bytes(exact(kind, b)?);
            limits::check_timestamp(t).map_err(|m| bad(kind, m))?;
            if matches!(kind, Kind::Timestamp) {
                Value::Timestamp(t)
            } else {
                Value::TimestampTz(t)
            }
        }
        Kind::Interval => {
            let raw: [u8; 16] = exact(kind, b)?;
            let mut r = Reader::new(&raw);
            Value::Interval {
                micros: r.array().map(i64::from_be_bytes).unwrap_or_default(),
                days: r.i32().unwrap_or_default(),
                months: r.i32().unwrap_or_default(),
            }
        }
        Kind::Uuid => Value::Uuid(exact(kind, b)?),
        Kind::MacAddr => Value::MacAddr(exact(kind, b)?),
        Kind::MacAddr8 => Value::MacAddr8(exact(kind, b)?),
        Kind::PgLsn => Value::Text(crate::geometric::lsn_text(u64::from_be_bytes(exact(
            kind, b,
        )?))),
        Kind::Geometric(g) => {
            Value::Text(crate::geometric::sent_text(*g, b).map_err(|e| bad(kind, e))?)
        }
        Kind::Inet | Kind::Cidr => Value::Inet(inet(kind, b)?),
        Kind::Bit => bits(kind, b)?,
        Kind::Array(ak) => Value::Array(array(kind, ak, b)?),
        // int2vectorsend and oidvectorsend are array_send.
        Kind::SpaceVector(ak) => {
            Value::Text(crate::snapshot::space_separated(&array(kind, ak, b)?))
        }
        Kind::Snapshot => Value::Text(crate::snapshot::sent_text(b).map_err(|e| bad(kind, e))?),
        Kind::Ltree => Value::Text(crate::extension::ltree_sent(b).map_err(|e| bad(kind, e))?),
        Kind::TsVector => Value::Text(crate::tsvector::sent_text(b).map_err(|e| bad(kind, e))?),
        Kind::TsQuery => Value::Text(crate::tsquery::sent_text(b).map_err(|e| bad(kind, e))?),
        Kind::Geometry => Value::Geometry(crate::geometry::sent_ewkb(b).map_err(|e| bad(kind, e))?),
        Kind::Vector => Value::Vector(crate::extension::vector(b, true).map_err(|e| bad(kind, e))?),
        Kind::HalfVec => {
            Value::Vector(crate::extension::halfvec(b, true).map_err(|e| bad(kind, e))?)
        }
        Kind::Hstore => Value::Hstore(crate::hstore::sent(b).map_err(|e| bad(kind, e))?),
        Kind::SparseVec => {
            let (dim, indices, values) =
                crate::extension::sparsevec(b, true).map_err(|e| bad(kind, e))?;
            Value::SparseVector {
                dim,
                indices,
                values,
            }
        }
        Kind::Range(rk) => {
            let bound = |x: &[u8]| {
                decode(&rk.subtype, x)
                    .map_err(|e| format!("its {} bound: {}", e.type_name, e.detail))
            };
            Value::Text(crate::range::decode_sent(b, &bound).map_err(|e| bad(kind, e))?)
        }
        Kind::Composite(ck) => Value::Text(
            crate::composite::sent_text(b, ck, &|k, x| {
                decode(k, x).map_err(|e| format!("{}: {}", e.type_name, e.detail))
            })
            .map_err(|e| bad(kind, e))?,
        ),
        Kind::Multirange(rk) => {
            let bound = |x: &[u8]| {
                decode(&rk.subtype, x)
                    .map_err(|e| format!("its {} bound: {}", e.type_name, e.detail))
            };
            Value::Text(crate::range::decode_multirange_sent(b, &bound).map_err(|e| bad(kind, e))?)
        }
    })
}

const NUMERIC_POS: u16 = 0x0000;
const NUMERIC_NEG: u16 = 0x4000;
const NUMERIC_NAN: u16 = 0xC000;
const NUMERIC_PINF: u16 = 0xD000;
const NUMERIC_NINF: u16 = 0xF000;
const NUMERIC_DSCALE_MASK: u16 = 0x3FFF;
const NBASE: i16 = 10000;

/// numeric_send's form, checked as numeric_recv does, normalized as the
/// heap decoder normalizes the stored form (`make_result`).
fn numeric(kind: &Kind, b: &[u8]) -> Result<Numeric, SendError> {
    let mut r = Reader::new(b);
    let (Some(ndigits), Some(weight), Some(sign), Some(dscale)) =
        (r.u16(), r.i16(), r.u16(), r.u16())
    else {
        return Err(bad(kind, "shorter than its header"));
    };
    if r.rest().len() != usize::from(ndigits) * 2 {
        return Err(bad(
            kind,
            format!("{ndigits} digits in {} bytes", r.rest().len()),
        ));
    }
    let negative = match sign {
        NUMERIC_POS => false,
        NUMERIC_NEG => true,
        NUMERIC_NAN => return Ok(Numeric::NaN),
        NUMERIC_PINF => return Ok(Numeric::PosInfinity),
        NUMERIC_NINF => return Ok(Numeric::NegInfinity),
        other => return Err(bad(kind, format!("sign {other:#06x}"))),
    };
    if dscale & NUMERIC_DSCALE_MASK != dscale {
        return Err(bad(kind, format!("display scale {dscale}")));
    }
    let mut digits = Vec::with_capacity(usize::from(ndigits));
    while let Some(d) = r.i16() {
        if !(0..NBASE).contains(&d) {
            return Err(bad(kind, format!("digit {d} outside 0..9999")));
        }
        digits.push(d);
    }
    // Leading and trailing zero digits stripped; zero is positive with
    // weight 0 (see numeric.rs of walshadow-rows).
    let lead = digits.iter().take_while(|d| **d == 0).count();
    digits.drain(..lead);
    let weight = weight.saturating_sub(i16::try_from(lead).unwrap_or(i16::MAX));
    while digits.last() == Some(&0) {
        digits.pop();
    }
    Ok(if digits.is_empty() {
        Numeric::Finite {
            negative: false,
            weight: 0,
            dscale,
            digits,
        }
    } else {
        Numeric::Finite {
            negative,
            weight,
            dscale,
            digits,
        }
    })
}

const PGSQL_AF_INET: u8 = 2;
const PGSQL_AF_INET6: u8 = 3;

/// inet_send's form. The is_cidr byte is ignored, as inet_recv ignores
/// it: the column's type decides.
fn inet(kind: &Kind, b: &[u8]) -> Result<InetValue, SendError> {
    let mut r = Reader::new(b);
    let (Some(family), Some(bits), Some(_is_cidr), Some(nb)) = (r.u8(), r.u8(), r.u8(), r.u8())
    else {
        return Err(bad(kind, "shorter than its header"));
    };
    let (len, max_bits) = match family {
        PGSQL_AF_INET => (4, 32),
        PGSQL_AF_INET6 => (16, 128),
        _ => return Err(bad(kind, format!("address family {family}"))),
    };
    if bits > max_bits {
        return Err(bad(kind, format!("{bits} netmask bits")));
    }
    if usize::from(nb) != len || r.rest().len() != len {
        return Err(bad(
            kind,
            format!(
                "{nb} address bytes announced, {} present, for family {family}",
                r.rest().len()
            ),
        ));
    }
    Ok(InetValue {
        addr: r.rest().to_vec(),
        bits,
        is_cidr: matches!(kind, Kind::Cidr),
    })
}

/// bit_send's form; pad bits cleared as bit_recv clears them.
fn bits(kind: &Kind, b: &[u8]) -> Result<Value, SendError> {
    let mut r = Reader::new(b);
    let len = r.i32().ok_or_else(|| bad(kind, "no bit length"))?;
    let len = u32::try_from(len).map_err(|_| bad(kind, format!("bit length {len}")))?;
    let mut bytes = r.rest().to_vec();
    if (len as usize).div_ceil(8) != bytes.len() {
        return Err(bad(kind, format!("{len} bits in {} bytes", bytes.len())));
    }
    let used = len % 8;
    if used != 0
        && let Some(last) = bytes.last_mut()
    {
        *last &= 0xFFu8 << (8 - used);
    }
    Ok(Value::Bits { len, bytes })
}

/// `MAXDIM`.
const MAXDIM: i32 = 6;
/// `MaxArraySize`.
const MAX_ARRAY_SIZE: i64 = 0x3FFF_FFFF / 8;

/// array_send's form, checked as array_recv/ReadArrayBinary check it.
fn array(kind: &Kind, ak: &ArrayKind, b: &[u8]) -> Result<ArrayValue, SendError> {
    let empty = ArrayValue {
        element_type: ak.element_oid,
        dims: Vec::new(),
        elements: Vec::new(),
        delimiter: ak.element.array_delimiter(),
    };
    let mut r = Reader::new(b);
    // The element type OID on the wire is not compared with the catalog:
    // for an array of a domain it may be the domain or its base.
    let (Some(ndim), Some(flags), Some(_element_type)) = (r.i32(), r.i32(), r.i32()) else {
        return Err(bad(kind, "shorter than its header"));
    };
    if !(0..=MAXDIM).contains(&ndim) {
        return Err(bad(kind, format!("{ndim} dimensions")));
    }
    if flags != 0 && flags != 1 {
        return Err(bad(kind, format!("flags {flags}")));
    }
    let mut dims = Vec::with_capacity(ndim as usize);
    let mut nitems: i64 = 1;
    for _ in 0..ndim {
        let (Some(len), Some(lb)) = (r.i32(), r.i32()) else {
            return Err(bad(kind, "dimensions past the end"));
        };
        if len < 0 || lb.checked_add(len).is_none() {
            return Err(bad(kind, format!("dimension {len} from {lb}")));
        }
        nitems = nitems.saturating_mul(i64::from(len));
        dims.push((len, lb));
    }
    if nitems > MAX_ARRAY_SIZE {
        return Err(bad(kind, format!("{nitems} elements")));
    }
    if ndim == 0 || nitems == 0 {
        if !r.rest().is_empty() {
            return Err(bad(kind, "bytes after an empty array"));
        }
        return Ok(empty);
    }
    // Each element takes at least its 4-byte length: no hostile count
    // reserves more than the field could hold.
    let mut elements = Vec::with_capacity((nitems as usize).min(r.rest().len() / 4));
    for i in 0..nitems {
        let len = r
            .i32()
            .ok_or_else(|| bad(kind, format!("element {} past the end", i + 1)))?;
        if len == -1 {
            elements.push(Value::Null);
            continue;
        }
        let data = usize::try_from(len)
            .ok()
            .and_then(|n| r.take(n))
            .ok_or_else(|| bad(kind, format!("element {} of length {len}", i + 1)))?;
        let v = decode(&ak.element, data).map_err(|e| SendError {
            type_name: e.type_name,
            detail: format!("array element {}: {}", i + 1, e.detail),
        })?;
        elements.push(v);
    }
    if !r.rest().is_empty() {
        return Err(bad(
            kind,
            format!("{} bytes after the last element", r.rest().len()),
        ));
    }
    Ok(ArrayValue {
        element_type: ak.element_oid,
        dims,
        elements,
        delimiter: ak.element.array_delimiter(),
    })
}

/// The ranges date_recv, time_recv, timetz_recv and timestamp_recv accept
/// (date.h, timestamp.h).
mod limits {
    /// `POSTGRES_EPOCH_JDATE`: the Julian day of 2000-01-01.
    use walshadow_pg_format::epoch::JULIAN_DAY as POSTGRES_EPOCH_JDATE;
    /// `DATE_END_JULIAN`: 5874898-01-01.
    const DATE_END_JULIAN: i64 = 2_147_483_494;
    /// `MIN_TIMESTAMP` (4714-11-24 BC) and `END_TIMESTAMP` (294277-01-01).
    const MIN_TIMESTAMP: i64 = -211_813_488_000_000_000;
    const END_TIMESTAMP: i64 = 9_223_371_331_200_000_000;
    const USECS_PER_DAY: i64 = 86_400_000_000;
    /// `TZDISP_LIMIT`.
    const TZDISP_LIMIT: i32 = 16 * 3600;

    /// `IS_VALID_DATE`, or ±infinity.
    pub(super) fn check_date(days: i32) -> Result<(), String> {
        let jd = i64::from(days) + POSTGRES_EPOCH_JDATE;
        if days == i32::MIN || days == i32::MAX || (0..DATE_END_JULIAN).contains(&jd) {
            Ok(())
        } else {
            Err(format!("{days} days from 2000-01-01 is out of range"))
        }
    }

    /// `IS_VALID_TIMESTAMP`, or ±infinity.
    pub(super) fn check_timestamp(ts: i64) -> Result<(), String> {
        if ts == i64::MIN || ts == i64::MAX || (MIN_TIMESTAMP..END_TIMESTAMP).contains(&ts) {
            Ok(())
        } else {
            Err(format!("{ts} µs from 2000-01-01 is out of range"))
        }
    }

    pub(super) fn check_time(micros: i64) -> Result<(), String> {
        if (0..=USECS_PER_DAY).contains(&micros) {
            Ok(())
        } else {
            Err(format!("{micros} µs after midnight is out of range"))
        }
    }

    pub(super) fn check_zone(zone: i32) -> Result<(), String> {
        if zone > -TZDISP_LIMIT && zone < TZDISP_LIMIT {
            Ok(())
        } else {
            Err(format!("zone offset {zone} s is out of range"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    #[test]
    fn scalars() {
        assert_eq!(decode(&Kind::Bool, &[2]), Ok(Value::Bool(true)));
        assert_eq!(decode(&Kind::Int2, &[0xff, 0xfe]), Ok(Value::Int16(-2)));
        assert_eq!(
            decode(&Kind::Float8, &(-0.0f64).to_bits().to_be_bytes()),
            Ok(Value::Float64(-0.0))
        );
        assert_eq!(
            decode(&Kind::Char, &[0xe9]),
            Ok(Value::Text("\\351".into()))
        );
        assert_eq!(decode(&Kind::Char, &[0]), Ok(Value::Text(String::new())));
        assert!(decode(&Kind::Int4, &[0, 0, 1]).is_err());
        assert!(decode(&Kind::Text, &[0xff]).is_err());
        assert_eq!(
            decode(&Kind::Jsonb, b"\x01{\"a\": 1}"),
            Ok(Value::Jsonb("{\"a\": 1}".into()))
        );
        assert!(decode(&Kind::Jsonb, b"\x02{}").is_err());
        assert!(decode(&Kind::Jsonb, b"").is_err());
        let tz = be(&[&5i64.to_be_bytes(), &(-3600i32).to_be_bytes()]);
        assert_eq!(
            decode(&Kind::TimeTz, &tz),
            Ok(Value::TimeTz {
                micros: 5,
                zone_secs_west: -3600
            })
        );
        let tz = be(&[&5i64.to_be_bytes(), &(16 * 3600i32).to_be_bytes()]);
        assert!(decode(&Kind::TimeTz, &tz).is_err());
        assert!(decode(&Kind::Date, &(i32::MAX - 1).to_be_bytes()).is_err());
        assert_eq!(
            decode(&Kind::Date, &i32::MIN.to_be_bytes()),
            Ok(Value::Date(i32::MIN))
        );
        assert!(decode(&Kind::Timestamp, &(i64::MAX - 1).to_be_bytes()).is_err());
        assert!(decode(&Kind::Time, &(-1i64).to_be_bytes()).is_err());
        let iv = be(&[
            &(-1i64).to_be_bytes(),
            &2i32.to_be_bytes(),
            &3i32.to_be_bytes(),
        ]);
        assert_eq!(
            decode(&Kind::Interval, &iv),
            Ok(Value::Interval {
                months: 3,
                days: 2,
                micros: -1
            })
        );
    }

    #[test]
    fn numerics() {
        let n = |ndigits: u16, weight: i16, sign: u16, dscale: u16, digits: &[i16]| {
            let mut v = be(&[
                &ndigits.to_be_bytes(),
                &weight.to_be_bytes(),
                &sign.to_be_bytes(),
                &dscale.to_be_bytes(),
            ]);
            for d in digits {
                v.extend_from_slice(&d.to_be_bytes());
            }
            decode(&Kind::Numeric, &v).map(|v| v.to_pg_text().unwrap())
        };
        assert_eq!(n(0, 0, NUMERIC_NAN, 0, &[]).as_deref(), Ok("NaN"));
        assert_eq!(n(0, 0, NUMERIC_PINF, 0, &[]).as_deref(), Ok("Infinity"));
        assert_eq!(n(0, 0, NUMERIC_NINF, 0, &[]).as_deref(), Ok("-Infinity"));
        assert_eq!(
            n(2, 1, NUMERIC_NEG, 3, &[12, 3456]).as_deref(),
            Ok("-123456.000")
        );
        assert_eq!(n(0, 0, NUMERIC_POS, 2, &[]).as_deref(), Ok("0.00"));
        // Zero digits around are stripped; a negative zero is zero.
        assert_eq!(n(4, 1, NUMERIC_NEG, 0, &[0, 0, 0, 0]).as_deref(), Ok("0"));
        assert_eq!(
            n(3, 1, NUMERIC_POS, 4, &[0, 7, 5000]).as_deref(),
            Ok("7.5000")
        );
        assert!(n(1, 0, NUMERIC_POS, 0, &[10000]).is_err());
        assert!(n(2, 0, NUMERIC_POS, 0, &[1]).is_err());
        assert!(n(0, 0, 0x1234, 0, &[]).is_err());
        assert!(n(0, 0, NUMERIC_POS, 0x4000, &[]).is_err());
    }

    #[test]
    fn inets_and_bits() {
        let v = decode(&Kind::Cidr, &[2, 8, 1, 4, 10, 0, 0, 0]).unwrap();
        assert_eq!(v.to_pg_text().as_deref(), Some("10.0.0.0/8"));
        assert!(decode(&Kind::Inet, &[2, 33, 0, 4, 1, 2, 3, 4]).is_err());
        assert!(decode(&Kind::Inet, &[3, 8, 0, 4, 1, 2, 3, 4]).is_err());
        assert!(decode(&Kind::Inet, &[2, 8, 0, 4, 1, 2, 3]).is_err());
        let b = decode(&Kind::Bit, &[0, 0, 0, 10, 0b1010_0000, 0b1111_1111]).unwrap();
        assert_eq!(b.to_pg_text().as_deref(), Some("1010000011"));
        assert_eq!(
            b,
            Value::Bits {
                len: 10,
                bytes: vec![0b1010_0000, 0b1100_0000]
            }
        );
        assert!(decode(&Kind::Bit, &[0, 0, 0, 10, 0]).is_err());
        assert!(decode(&Kind::Bit, &[0xff, 0, 0, 0]).is_err());
    }

    fn int4_array() -> Kind {
        array_of(23)
    }

    /// An array kind as walshadow-rows resolves it (its storage is private
    /// there), from a hand-made descriptor.
    fn array_of(element_oid: u32) -> Kind {
        crate::copy_binary::tests::array_kind(element_oid)
    }

    #[test]
    fn arrays() {
        let kind = int4_array();
        let mut v = be(&[
            &2i32.to_be_bytes(),
            &1i32.to_be_bytes(),
            &23u32.to_be_bytes(),
            &2i32.to_be_bytes(),
            &(-1i32).to_be_bytes(),
            &2i32.to_be_bytes(),
            &1i32.to_be_bytes(),
        ]);
        for e in [Some(1i32), None, None, Some(4)] {
            match e {
                Some(x) => {
                    v.extend_from_slice(&4i32.to_be_bytes());
                    v.extend_from_slice(&x.to_be_bytes());
                }
                None => v.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        let a = decode(&kind, &v).unwrap();
        assert_eq!(
            a.to_pg_text().as_deref(),
            Some("[-1:0][1:2]={{1,NULL},{NULL,4}}")
        );
        // Every truncation errors.
        for n in 0..v.len() {
            assert!(decode(&kind, &v[..n]).is_err(), "cut at {n}");
        }
        let mut extra = v.clone();
        extra.push(0);
        assert!(decode(&kind, &extra).is_err());
        // Empty, with and without dimensions.
        let empty = be(&[
            &0i32.to_be_bytes(),
            &0i32.to_be_bytes(),
            &23u32.to_be_bytes(),
        ]);
        assert_eq!(
            decode(&kind, &empty).unwrap().to_pg_text().as_deref(),
            Some("{}")
        );
        let zero_len = be(&[
            &1i32.to_be_bytes(),
            &0i32.to_be_bytes(),
            &23u32.to_be_bytes(),
            &0i32.to_be_bytes(),
            &1i32.to_be_bytes(),
        ]);
        assert_eq!(
            decode(&kind, &zero_len),
            Ok(Value::Array(ArrayValue {
                element_type: 23,
                dims: vec![],
                elements: vec![],
                delimiter: ',',
            }))
        );
        // Hostile counts.
        let huge = be(&[
            &1i32.to_be_bytes(),
            &0i32.to_be_bytes(),
            &23u32.to_be_bytes(),
            &i32::MAX.to_be_bytes(),
            &1i32.to_be_bytes(),
        ]);
        assert!(decode(&kind, &huge).is_err());
        let seven = be(&[
            &7i32.to_be_bytes(),
            &0i32.to_be_bytes(),
            &23u32.to_be_bytes(),
        ]);
        assert!(decode(&kind, &seven).is_err());
        let flags = be(&[
            &0i32.to_be_bytes(),
            &2i32.to_be_bytes(),
            &23u32.to_be_bytes(),
        ]);
        assert!(decode(&kind, &flags).is_err());
        let overflow = be(&[
            &1i32.to_be_bytes(),
            &0i32.to_be_bytes(),
            &23u32.to_be_bytes(),
            &2i32.to_be_bytes(),
            &i32::MAX.to_be_bytes(),
        ]);
        assert!(decode(&kind, &overflow).is_err());
    }

    /// Random bytes never panic any kind's decoder (fixed seed: failures
    /// reproduce).
    #[test]
    fn random_bytes_never_panic() {
        let kinds = [
            Kind::Numeric,
            Kind::Text,
            Kind::Jsonb,
            Kind::Inet,
            Kind::Cidr,
            Kind::Bit,
            Kind::TimeTz,
            Kind::Interval,
            Kind::Date,
            Kind::Timestamp,
            Kind::Char,
            Kind::Geometric(crate::geometric::Geometric::Path),
            Kind::Geometric(crate::geometric::Geometric::Polygon),
            Kind::PgLsn,
            Kind::TsVector,
            Kind::TsQuery,
            int4_array(),
            array_of(1700),
            array_of(25),
            array_of(869),
        ];
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..30_000 {
            let len = (next() % 64) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if next() % 2 == 0 && b.len() >= 12 {
                // A plausible array header: few dimensions, flags 0.
                b[..4].copy_from_slice(&((next() % 3) as i32).to_be_bytes());
                b[4..8].copy_from_slice(&0i32.to_be_bytes());
            }
            for k in &kinds {
                let _ = decode(k, &b);
            }
        }
    }
}
