//! [`Value::to_pg_text`]: each type's output function with PostgreSQL's
//! default settings — `DateStyle = 'ISO, MDY'`, `IntervalStyle =
//! postgres`, `TimeZone = UTC` (for timestamptz), `bytea_output = hex`,
//! `extra_float_digits = 1`, `lc_monetary = C`.

use std::fmt::Write;

use crate::array;
use crate::datetime;
use crate::float;
use crate::network;
use crate::value::Value;

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The text PostgreSQL's output function gives for this value (what
    /// `col::text` shows); `None` for NULL.
    pub fn to_pg_text(&self) -> Option<String> {
        let mut out = String::new();
        self.write_pg_text(&mut out).then_some(out)
    }

    /// Appends [`Value::to_pg_text`] to `out`; false (and nothing written)
    /// for NULL.
    pub fn write_pg_text(&self, out: &mut String) -> bool {
        match self {
            Value::Null => return false,
            Value::Bool(b) => out.push(if *b { 't' } else { 'f' }),
            Value::Int16(v) => {
                let _ = write!(out, "{v}");
            }
            Value::Int32(v) => {
                let _ = write!(out, "{v}");
            }
            Value::Int64(v) => {
                let _ = write!(out, "{v}");
            }
            Value::Oid(v) => {
                let _ = write!(out, "{v}");
            }
            Value::Float32(v) => float::write_f32(out, *v),
            Value::Float64(v) => float::write_f64(out, *v),
            Value::Numeric(n) => n.write_text(out),
            Value::Money(v) => write_money(out, *v),
            Value::Text(s) | Value::Json(s) | Value::Jsonb(s) | Value::Xml(s) | Value::Enum(s) => {
                out.push_str(s)
            }
            Value::Bytea(b) => {
                out.reserve(2 + 2 * b.len());
                out.push_str("\\x");
                for byte in b {
                    let _ = write!(out, "{byte:02x}");
                }
            }
            Value::Date(d) => datetime::write_date(out, *d),
            Value::Time(t) => datetime::write_time(out, *t),
            Value::TimeTz {
                micros,
                zone_secs_west,
            } => datetime::write_timetz(out, *micros, *zone_secs_west),
            Value::Timestamp(t) => datetime::write_timestamp(out, *t, false),
            Value::TimestampTz(t) => datetime::write_timestamp(out, *t, true),
            Value::Interval {
                months,
                days,
                micros,
            } => datetime::write_interval(out, *months, *days, *micros),
            Value::Uuid(u) => {
                for (i, b) in u.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        out.push('-');
                    }
                    let _ = write!(out, "{b:02x}");
                }
            }
            Value::Inet(v) => network::write_inet(out, v),
            Value::MacAddr(m) => network::write_mac(out, m),
            Value::MacAddr8(m) => network::write_mac(out, m),
            Value::Bits { len, bytes } => {
                // A hand-built value may claim more bits than it holds.
                for i in 0..(*len as usize).min(bytes.len() * 8) {
                    let byte = bytes.get(i / 8).copied().unwrap_or(0);
                    out.push(if byte & (0x80 >> (i % 8)) != 0 {
                        '1'
                    } else {
                        '0'
                    });
                }
            }
            Value::Array(a) => array::write_array(out, a),
            // geometry_out: the EWKB in upper-case hex.
            Value::Geometry(e) => {
                out.reserve(2 * e.len());
                for byte in e {
                    let _ = write!(out, "{byte:02X}");
                }
            }
            Value::Hstore(pairs) => crate::hstore::write_text(out, pairs),
            // sparsevec_out: 1-based indices.
            Value::SparseVector {
                dim,
                indices,
                values,
            } => {
                out.push('{');
                for (n, (i, v)) in indices.iter().zip(values).enumerate() {
                    if n > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{}:", u64::from(*i) + 1);
                    crate::float::write_f32(out, *v);
                }
                let _ = write!(out, "}}/{dim}");
            }
            // vector_out: shortest float4 text, as float4out writes it.
            Value::Vector(v) => {
                out.push('[');
                for (i, f) in v.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    crate::float::write_f32(out, *f);
                }
                out.push(']');
            }
        }
        true
    }
}

/// `cash_out` in the C locale: `$`, `,` every three digits, two decimals,
/// a leading `-` for negative amounts.
fn write_money(out: &mut String, v: i64) {
    let abs = v.unsigned_abs();
    let digits = format!("{:03}", abs);
    let (int, cents) = digits.split_at(digits.len() - 2);
    if v < 0 {
        out.push('-');
    }
    out.push('$');
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out.push('.');
    out.push_str(cents);
}

/// Parses `write_money`'s form.
pub(crate) fn parse_money(s: &str) -> Result<i64, String> {
    let bad = || format!("{s:?} is not a money amount");
    let (neg, rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let rest = rest.strip_prefix('$').ok_or_else(bad)?;
    let (int, cents) = rest.split_once('.').unwrap_or((rest, "00"));
    let int: String = int.chars().filter(|c| *c != ',').collect();
    if int.is_empty()
        || cents.len() != 2
        || !int.bytes().chain(cents.bytes()).all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let abs: i128 = format!("{int}{cents}").parse().map_err(|_| bad())?;
    i64::try_from(if neg { -abs } else { abs }).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_like_cash_out() {
        for (v, s) in [
            (0, "$0.00"),
            (5, "$0.05"),
            (-5, "-$0.05"),
            (123456, "$1,234.56"),
            (100000000, "$1,000,000.00"),
            (i64::MAX, "$92,233,720,368,547,758.07"),
            (i64::MIN, "-$92,233,720,368,547,758.08"),
        ] {
            let mut out = String::new();
            write_money(&mut out, v);
            assert_eq!(out, s);
            assert_eq!(parse_money(s), Ok(v));
        }
    }

    #[test]
    fn scalars() {
        assert_eq!(Value::Null.to_pg_text(), None);
        assert_eq!(Value::Bool(true).to_pg_text().as_deref(), Some("t"));
        assert_eq!(
            Value::Bytea(vec![0, 0xab]).to_pg_text().as_deref(),
            Some("\\x00ab")
        );
        assert_eq!(Value::Bytea(vec![]).to_pg_text().as_deref(), Some("\\x"));
        let u = [
            0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38,
            0x0a, 0x11,
        ];
        assert_eq!(
            Value::Uuid(u).to_pg_text().as_deref(),
            Some("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
        );
        assert_eq!(
            Value::Bits {
                len: 3,
                bytes: vec![0b1010_0000]
            }
            .to_pg_text()
            .as_deref(),
            Some("101")
        );
    }
}
