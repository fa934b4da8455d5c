//! One datum's bytes → [`Value`], by kind. The stored forms are the types'
//! internal representations (little-endian): see the modules of the
//! composite ones (numeric, jsonb, array, network, datetime).

use crate::array;
use crate::bytes::{exact, i32_at, i64_at};
use crate::datetime;
use crate::error::DatumError;
use crate::geometric;
use crate::jsonb;
use crate::kind::{Kind, fixed_len};
use crate::network;
use crate::numeric;
use crate::range;
use crate::toast::ToastSource;
use crate::value::Value;
use crate::varlena;

/// A column datum as the tuple holds it (varlena header included).
pub(crate) fn decode_datum(
    kind: &Kind,
    raw: &[u8],
    toast: &dyn ToastSource,
) -> Result<Value, DatumError> {
    if fixed_len(kind) == Some(-1) {
        let body = varlena::detoast(raw, toast)?;
        decode_body(kind, &body)
    } else {
        decode_fixed(kind, raw)
    }
}

/// An array element (varlena header included, never compressed or
/// external).
fn decode_element(kind: &Kind, raw: &[u8]) -> Result<Value, DatumError> {
    if fixed_len(kind) == Some(-1) {
        decode_body(kind, array::element_payload(raw)?)
    } else {
        decode_fixed(kind, raw)
    }
}

fn utf8(b: &[u8], type_name: &'static str) -> Result<String, DatumError> {
    String::from_utf8(b.to_vec()).map_err(|e| {
        DatumError::bad(
            type_name,
            format!("not valid UTF-8 at byte {}", e.utf8_error().valid_up_to()),
        )
    })
}

/// `charout`: a high-bit byte as `\ooo`, NUL as the empty string.
pub(crate) fn char_text(b: u8) -> String {
    if b & 0x80 != 0 {
        format!("\\{:03o}", b)
    } else if b == 0 {
        String::new()
    } else {
        char::from(b).to_string()
    }
}

fn decode_fixed(kind: &Kind, b: &[u8]) -> Result<Value, DatumError> {
    let name = kind.type_name();
    Ok(match kind {
        Kind::Bool => Value::Bool(exact::<1>(b, name)?[0] != 0),
        Kind::Int2 => Value::Int16(i16::from_le_bytes(exact(b, name)?)),
        Kind::Int4 => Value::Int32(i32::from_le_bytes(exact(b, name)?)),
        Kind::Int8 => Value::Int64(i64::from_le_bytes(exact(b, name)?)),
        Kind::Oid => Value::Oid(u32::from_le_bytes(exact(b, name)?)),
        Kind::Float4 => Value::Float32(f32::from_le_bytes(exact(b, name)?)),
        Kind::Float8 => Value::Float64(f64::from_le_bytes(exact(b, name)?)),
        Kind::Money => Value::Money(i64::from_le_bytes(exact(b, name)?)),
        Kind::Char => Value::Text(char_text(exact::<1>(b, name)?[0])),
        Kind::Name => {
            let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
            Value::Text(utf8(b.get(..end).unwrap_or_default(), name)?)
        }
        Kind::Date => {
            let d = i32::from_le_bytes(exact(b, name)?);
            datetime::check_date(d)?;
            Value::Date(d)
        }
        Kind::Time => {
            let t = i64::from_le_bytes(exact(b, name)?);
            datetime::check_time(t, name)?;
            Value::Time(t)
        }
        Kind::TimeTz => {
            let b: [u8; 12] = exact(b, name)?;
            let micros = i64_at(&b, 0)?;
            let zone = i32_at(&b, 8)?;
            datetime::check_time(micros, name)?;
            datetime::check_zone(zone)?;
            Value::TimeTz {
                micros,
                zone_secs_west: zone,
            }
        }
        Kind::Timestamp => {
            let t = i64::from_le_bytes(exact(b, name)?);
            datetime::check_timestamp(t, name)?;
            Value::Timestamp(t)
        }
        Kind::TimestampTz => {
            let t = i64::from_le_bytes(exact(b, name)?);
            datetime::check_timestamp(t, name)?;
            Value::TimestampTz(t)
        }
        Kind::Interval => {
            let b: [u8; 16] = exact(b, name)?;
            Value::Interval {
                micros: i64_at(&b, 0)?,
                days: i32_at(&b, 8)?,
                months: i32_at(&b, 12)?,
            }
        }
        Kind::Uuid => Value::Uuid(exact(b, name)?),
        Kind::MacAddr => Value::MacAddr(exact(b, name)?),
        Kind::MacAddr8 => Value::MacAddr8(exact(b, name)?),
        Kind::PgLsn => Value::Text(geometric::lsn_text(u64::from_le_bytes(exact(b, name)?))),
        Kind::Geometric(g) => Value::Text(geometric::stored_text(*g, b)?),
        Kind::Enum(labels) => {
            let oid = u32::from_le_bytes(exact(b, name)?);
            let label = labels.labels.get(&oid).ok_or_else(|| {
                DatumError::bad(
                    "enum",
                    format!(
                        "{oid} is not a label of type {} known to the catalog",
                        labels.type_name
                    ),
                )
            })?;
            Value::Enum(label.clone())
        }
        // Varlena kinds (`fixed_len` is the one exhaustive list).
        _ => return decode_body(kind, b),
    })
}

/// A varlena kind's body (header stripped, detoasted).
fn decode_body(kind: &Kind, b: &[u8]) -> Result<Value, DatumError> {
    let name = kind.type_name();
    Ok(match kind {
        Kind::Numeric => Value::Numeric(numeric::decode(b)?),
        Kind::Text => Value::Text(utf8(b, name)?),
        Kind::Bytea => Value::Bytea(b.to_vec()),
        Kind::Json => Value::Json(utf8(b, name)?),
        Kind::Xml => Value::Xml(utf8(b, name)?),
        Kind::Jsonb => Value::Jsonb(jsonb::to_text(b)?),
        Kind::Inet => Value::Inet(network::decode_inet(b, false)?),
        Kind::Cidr => Value::Inet(network::decode_inet(b, true)?),
        Kind::Bit => {
            // VarBit: int32 bit_len, then the bits, most significant first.
            let len = i32_at(b, 0).map_err(|_| DatumError::bad(name, "no bit length"))?;
            let bytes = b.get(4..).unwrap_or_default();
            let len = u32::try_from(len)
                .map_err(|_| DatumError::bad(name, format!("bit length {len}")))?;
            if (len as usize).div_ceil(8) != bytes.len() {
                return Err(DatumError::bad(
                    name,
                    format!("{len} bits in {} bytes", bytes.len()),
                ));
            }
            Value::Bits {
                len,
                bytes: bytes.to_vec(),
            }
        }
        Kind::Array(ak) => {
            let element = |raw: &[u8]| decode_element(&ak.element, raw);
            Value::Array(array::decode(b, ak, &element)?)
        }
        Kind::SpaceVector(ak) => {
            let element = |raw: &[u8]| decode_element(&ak.element, raw);
            Value::Text(crate::snapshot::space_separated(&array::decode(
                b, ak, &element,
            )?))
        }
        Kind::Snapshot => {
            Value::Text(crate::snapshot::stored_text(b).map_err(|e| DatumError::bad(name, e))?)
        }
        Kind::Range(rk) => {
            let bound = |raw: &[u8]| decode_element(&rk.subtype, raw);
            Value::Text(range::decode_stored(b, rk, &bound)?)
        }
        Kind::Composite(ck) => Value::Text(crate::composite::stored_text(b, ck, &|kind, raw| {
            decode_datum(kind, raw, &crate::toast::NoToast)
        })?),
        Kind::Multirange(rk) => {
            let bound = |raw: &[u8]| decode_element(&rk.subtype, raw);
            Value::Text(range::decode_multirange_stored(b, rk, &bound)?)
        }
        Kind::Ltree => Value::Text(crate::extension::ltree_stored(b)?),
        Kind::TsVector => {
            Value::Text(crate::tsvector::stored_text(b).map_err(|e| DatumError::bad(name, e))?)
        }
        Kind::TsQuery => {
            Value::Text(crate::tsquery::stored_text(b).map_err(|e| DatumError::bad(name, e))?)
        }
        Kind::Geometry => {
            Value::Geometry(crate::geometry::stored_ewkb(b).map_err(|e| DatumError::bad(name, e))?)
        }
        Kind::Vector => {
            Value::Vector(crate::extension::vector(b, false).map_err(|e| DatumError::bad(name, e))?)
        }
        Kind::HalfVec => Value::Vector(
            crate::extension::halfvec(b, false).map_err(|e| DatumError::bad(name, e))?,
        ),
        Kind::Hstore => {
            Value::Hstore(crate::hstore::stored(b).map_err(|e| DatumError::bad(name, e))?)
        }
        Kind::SparseVec => {
            let (dim, indices, values) =
                crate::extension::sparsevec(b, false).map_err(|e| DatumError::bad(name, e))?;
            Value::SparseVector {
                dim,
                indices,
                values,
            }
        }
        _ => return decode_fixed(kind, b),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toast::NoToast;

    #[test]
    fn fixed_lengths_are_checked() {
        assert!(decode_fixed(&Kind::Int4, &[1, 0, 0]).is_err());
        assert!(decode_fixed(&Kind::Int4, &[1, 0, 0, 0, 0]).is_err());
        assert_eq!(
            decode_fixed(&Kind::Int2, &[0xff, 0xff]),
            Ok(Value::Int16(-1))
        );
        assert!(decode_fixed(&Kind::Time, &(-1i64).to_le_bytes()).is_err());
        assert!(decode_fixed(&Kind::Date, &(i32::MAX - 1).to_le_bytes()).is_err());
        assert!(decode_fixed(&Kind::Timestamp, &(i64::MAX - 1).to_le_bytes()).is_err());
        let mut tz = 0i64.to_le_bytes().to_vec();
        tz.extend_from_slice(&100_000i32.to_le_bytes());
        assert!(decode_fixed(&Kind::TimeTz, &tz).is_err());
    }

    #[test]
    fn chars_and_names() {
        assert_eq!(char_text(b'a'), "a");
        assert_eq!(char_text(0), "");
        assert_eq!(char_text(0xe9), "\\351");
        let mut name = b"abc".to_vec();
        name.resize(64, 0);
        assert_eq!(
            decode_fixed(&Kind::Name, &name),
            Ok(Value::Text("abc".into()))
        );
        assert!(decode_fixed(&Kind::Name, &[0xff, 0]).is_err());
    }

    /// Random bytes, with and without a plausible varlena header, never
    /// panic any kind's decoder (the seed is fixed; failures reproduce).
    #[test]
    fn random_bytes_never_panic() {
        use crate::kind::{Align, ArrayKind, Storage};
        let array_of = |element: Kind, len: i16, align: Align| {
            Kind::Array(Box::new(ArrayKind {
                element,
                element_oid: 0,
                element_storage: Storage { len, align },
            }))
        };
        let kinds = [
            Kind::Numeric,
            Kind::Text,
            Kind::Jsonb,
            Kind::Inet,
            Kind::Bit,
            Kind::TimeTz,
            Kind::Interval,
            Kind::Name,
            Kind::Geometric(crate::geometric::Geometric::Path),
            Kind::Geometric(crate::geometric::Geometric::Polygon),
            Kind::Geometric(crate::geometric::Geometric::Box),
            Kind::TsVector,
            Kind::TsQuery,
            array_of(Kind::Int4, 4, Align::Int),
            array_of(Kind::Numeric, -1, Align::Int),
            array_of(Kind::Jsonb, -1, Align::Int),
            array_of(Kind::Interval, 16, Align::Double),
        ];
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let len = (next() % 96) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if next() % 2 == 0 && b.len() >= 4 {
                let header = ((b.len() as u32) << 2).to_le_bytes();
                b[..4].copy_from_slice(&header);
                if next() % 2 == 0 && b.len() >= 16 {
                    // An array header with few dimensions, or a jsonb one.
                    b[4..8].copy_from_slice(&((next() % 3) as i32).to_le_bytes());
                }
            }
            for k in &kinds {
                let _ = decode_datum(k, &b, &NoToast);
            }
        }
    }

    #[test]
    fn bits() {
        // 4-byte header, bit_len 10, 2 bytes.
        let mut v = ((4u32 + 4 + 2) << 2).to_le_bytes().to_vec();
        v.extend_from_slice(&10i32.to_le_bytes());
        v.extend_from_slice(&[0b1010_0000, 0b1100_0000]);
        let b = decode_datum(&Kind::Bit, &v, &NoToast).unwrap();
        assert_eq!(b.to_pg_text().as_deref(), Some("1010000011"));
        v[0] = ((4u32 + 4 + 1) << 2) as u8;
        assert!(decode_datum(&Kind::Bit, &v[..9], &NoToast).is_err());
    }
}
