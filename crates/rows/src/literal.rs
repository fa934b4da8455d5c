//! Text → [`Value`] for the output forms of the supported types: how a
//! column's `attmissingval` (read from the catalog as text) becomes the
//! value that tuples written before `ADD COLUMN … DEFAULT` lack.
//!
//! `attmissingval` is an `anyarray` holding one element of the column's
//! type, so its text is an array literal with one element (`{42}`,
//! `{"a b"}`, `{"{1,2}"}` for an array column); each element is in the
//! type's output form, which these parsers read back. They expect the
//! default output settings that [`Value::to_pg_text`] writes.

use crate::array;
use crate::datetime;
use crate::float;
use crate::kind::Kind;
use crate::network;
use crate::numeric;
use crate::render::parse_money;
use crate::value::{ArrayValue, Value};

/// The value of a column's `attmissingval` text.
pub(crate) fn parse_missing(kind: &Kind, text: &str) -> Result<Value, String> {
    let lit = array::parse_literal(text, kind.array_delimiter())?;
    match lit.elements.as_slice() {
        [Some(one)] => parse_value(kind, one),
        [None] => Ok(Value::Null),
        _ => Err(format!(
            "{} elements where one is expected",
            lit.elements.len()
        )),
    }
}

fn int<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("{s:?} is not {what}"))
}

/// The bytes of hex digits `hex` (of `s`, for messages).
fn unhex(hex: &str, s: &str) -> Result<Vec<u8>, String> {
    if !hex.len().is_multiple_of(2) {
        return Err(format!("{s:?} has an odd number of hex digits"));
    }
    let mut out = Vec::with_capacity(hex.len() / 2);
    for pair in hex.as_bytes().chunks(2) {
        let p = std::str::from_utf8(pair).map_err(|_| format!("{s:?} is not hex"))?;
        out.push(u8::from_str_radix(p, 16).map_err(|_| format!("{s:?} is not hex"))?);
    }
    Ok(out)
}

/// One value in its type's output form.
pub(crate) fn parse_value(kind: &Kind, s: &str) -> Result<Value, String> {
    Ok(match kind {
        Kind::Bool => match s {
            "t" | "true" => Value::Bool(true),
            "f" | "false" => Value::Bool(false),
            _ => return Err(format!("{s:?} is not a boolean")),
        },
        Kind::Int2 => Value::Int16(int(s, "a smallint")?),
        Kind::Int4 => Value::Int32(int(s, "an integer")?),
        Kind::Int8 => Value::Int64(int(s, "a bigint")?),
        Kind::Oid => Value::Oid(int(s, "an oid")?),
        Kind::Float4 => Value::Float32(float::parse_f32(s)?),
        Kind::Float8 => Value::Float64(float::parse_f64(s)?),
        Kind::Numeric => Value::Numeric(numeric::parse(s)?),
        Kind::Money => Value::Money(parse_money(s)?),
        Kind::Char | Kind::Name | Kind::Text => Value::Text(s.to_owned()),
        Kind::Json => Value::Json(s.to_owned()),
        Kind::Jsonb => Value::Jsonb(s.to_owned()),
        Kind::Xml => Value::Xml(s.to_owned()),
        // attmissingval comes as the type's own output, which is what
        // these are written as.
        Kind::Geometric(_)
        | Kind::PgLsn
        | Kind::Range(_)
        | Kind::Multirange(_)
        | Kind::Composite(_)
        | Kind::Ltree
        | Kind::TsVector
        | Kind::TsQuery
        | Kind::Snapshot
        | Kind::SpaceVector(_) => Value::Text(s.to_owned()),
        Kind::Vector | Kind::HalfVec => Value::Vector(crate::extension::parse_vector(s)?),
        Kind::Hstore => Value::Hstore(crate::hstore::parse(s)?),
        Kind::SparseVec => {
            let (dim, indices, values) = crate::extension::parse_sparsevec(s)?;
            Value::SparseVector {
                dim,
                indices,
                values,
            }
        }
        Kind::Enum(labels) => {
            if !labels.labels.values().any(|l| l == s) {
                return Err(format!("{s:?} is not a label of {}", labels.type_name));
            }
            Value::Enum(s.to_owned())
        }
        Kind::Bytea => {
            let hex = s
                .strip_prefix("\\x")
                .ok_or_else(|| format!("{s:?} is not hex bytea"))?;
            Value::Bytea(unhex(hex, s)?)
        }
        // geometry_out: hex EWKB.
        Kind::Geometry => Value::Geometry(crate::geometry::sent_ewkb(&unhex(s, s)?)?),
        Kind::Date => Value::Date(datetime::parse_date(s)?),
        Kind::Time => Value::Time(datetime::parse_time(s)?),
        Kind::TimeTz => {
            let (micros, zone_secs_west) = datetime::parse_timetz(s)?;
            Value::TimeTz {
                micros,
                zone_secs_west,
            }
        }
        Kind::Timestamp => Value::Timestamp(datetime::parse_timestamp(s, false)?),
        Kind::TimestampTz => Value::TimestampTz(datetime::parse_timestamp(s, true)?),
        Kind::Interval => {
            let (months, days, micros) = datetime::parse_interval(s)?;
            Value::Interval {
                months,
                days,
                micros,
            }
        }
        Kind::Uuid => {
            let hex: String = s.chars().filter(|c| *c != '-').collect();
            if hex.len() != 32 {
                return Err(format!("{s:?} is not a uuid"));
            }
            let mut u = [0u8; 16];
            for (i, b) in u.iter_mut().enumerate() {
                let p = hex
                    .get(2 * i..2 * i + 2)
                    .ok_or_else(|| format!("{s:?} is not a uuid"))?;
                *b = u8::from_str_radix(p, 16).map_err(|_| format!("{s:?} is not a uuid"))?;
            }
            Value::Uuid(u)
        }
        Kind::Inet => Value::Inet(network::parse_inet(s, false)?),
        Kind::Cidr => Value::Inet(network::parse_inet(s, true)?),
        Kind::MacAddr => Value::MacAddr(network::parse_mac(s)?),
        Kind::MacAddr8 => Value::MacAddr8(network::parse_mac(s)?),
        Kind::Bit => {
            let len = u32::try_from(s.len()).map_err(|_| "bit string too long".to_owned())?;
            let mut bytes = vec![0u8; s.len().div_ceil(8)];
            for (i, c) in s.chars().enumerate() {
                match c {
                    '0' => {}
                    '1' => {
                        if let Some(b) = bytes.get_mut(i / 8) {
                            *b |= 0x80 >> (i % 8);
                        }
                    }
                    _ => return Err(format!("{s:?} is not a bit string")),
                }
            }
            Value::Bits { len, bytes }
        }
        Kind::Array(ak) => {
            let lit = array::parse_literal(s, ak.element.array_delimiter())?;
            let elements = lit
                .elements
                .iter()
                .map(|e| match e {
                    Some(t) => parse_value(&ak.element, t),
                    None => Ok(Value::Null),
                })
                .collect::<Result<_, _>>()?;
            Value::Array(ArrayValue {
                element_type: ak.element_oid,
                dims: lit.dims,
                elements,
                delimiter: ak.element.array_delimiter(),
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::{Align, ArrayKind, Storage};

    #[test]
    fn round_trips() {
        let text_array = Kind::Array(Box::new(ArrayKind {
            element: Kind::Text,
            element_oid: 25,
            element_storage: Storage {
                len: -1,
                align: Align::Int,
            },
        }));
        for (kind, s) in [
            (Kind::Bool, "t"),
            (Kind::Int8, "-9223372036854775808"),
            (Kind::Float8, "1e+300"),
            (Kind::Float4, "-Infinity"),
            (Kind::Numeric, "-12.340"),
            (Kind::Money, "-$1,234.50"),
            (Kind::Bytea, "\\xdeadbeef"),
            (Kind::Date, "0001-01-01 BC"),
            (Kind::TimeTz, "12:00:00-01"),
            (Kind::TimestampTz, "2024-02-29 12:34:56.789+00"),
            (Kind::Interval, "1 day -00:00:01"),
            (Kind::Uuid, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
            (Kind::Cidr, "10.0.0.0/8"),
            (Kind::MacAddr8, "08:00:2b:01:02:03:04:05"),
            (Kind::Bit, "1010000011"),
            (text_array.clone(), r#"[0:1]={"a b",NULL}"#),
        ] {
            let v = parse_value(&kind, s).unwrap();
            assert_eq!(v.to_pg_text().as_deref(), Some(s), "{kind:?}");
        }
        assert_eq!(parse_missing(&Kind::Int4, "{42}"), Ok(Value::Int32(42)));
        assert_eq!(parse_missing(&Kind::Int4, "{NULL}"), Ok(Value::Null));
        assert!(parse_missing(&Kind::Int4, "{1,2}").is_err());
        let v = parse_missing(&text_array, r#"{"{x,\"y z\"}"}"#).unwrap();
        assert_eq!(v.to_pg_text().as_deref(), Some(r#"{x,"y z"}"#));
        assert!(parse_value(&Kind::Bit, "102").is_err());
        assert!(parse_value(&Kind::Bytea, "\\xabc").is_err());
    }
}
