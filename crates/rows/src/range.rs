//! Range types (`int4range`, `tstzrange`, … and ranges a user defines over
//! a supported subtype), read into `range_out`'s text.
//!
//! Stored form (rangetypes.c, `range_serialize`), offsets from the start of
//! the detoasted varlena (4-byte header, MAXALIGNed):
//!
//! ```text
//!  int32 vl_len_ | Oid rangetypid
//!  lower bound datum, if it has one | upper bound datum, if it has one
//!  char flags                         the varlena's last byte
//! ```
//!
//! Each bound is written as a tuple attribute is (`datum_write`): aligned
//! to the subtype's `typalign`, except a varlena with a 1-byte header,
//! which is never aligned (read back with `att_align_pointer`: a non-zero
//! byte where a varlena starts is a header, not padding). The `_send` form
//! is the flags byte, then each present bound as int32 length and the
//! subtype's own `_send` bytes.
//!
//! Text (`range_deparse`): `empty`, or `[`/`(`, the lower bound, `,`, the
//! upper bound, `]`/`)`, an absent (infinite) bound left empty, a bound
//! double-quoted when empty or holding `"\()[],` or white space
//! (`range_bound_escape`), `"` and `\` doubled inside the quotes.

use crate::error::DatumError;
use crate::kind::{RangeKind, Storage};
use crate::value::Value;
use crate::varlena::varsize_any;

const RANGE_EMPTY: u8 = 0x01;
const RANGE_LB_INC: u8 = 0x02;
const RANGE_UB_INC: u8 = 0x04;
const RANGE_LB_INF: u8 = 0x08;
const RANGE_UB_INF: u8 = 0x10;
const RANGE_LB_NULL: u8 = 0x20;
const RANGE_UB_NULL: u8 = 0x40;
const VARHDRSZ: usize = 4;

fn bad(detail: impl Into<String>) -> DatumError {
    DatumError::bad("range", detail)
}

fn has_lower(flags: u8) -> bool {
    flags & (RANGE_EMPTY | RANGE_LB_NULL | RANGE_LB_INF) == 0
}

fn has_upper(flags: u8) -> bool {
    flags & (RANGE_EMPTY | RANGE_UB_NULL | RANGE_UB_INF) == 0
}

/// A stored range's body (varlena header stripped, detoasted); `bound`
/// decodes one bound datum of the subtype (header included for a varlena).
pub(crate) fn decode_stored(
    p: &[u8],
    rk: &RangeKind,
    bound: &dyn Fn(&[u8]) -> Result<Value, DatumError>,
) -> Result<String, DatumError> {
    let (&flags, rest) = p.split_last().ok_or_else(|| bad("no flags byte"))?;
    // Offsets are those of the whole varlena: header and rangetypid first.
    let end = rest.len() + VARHDRSZ;
    let mut pos = VARHDRSZ + 4;
    if end < pos {
        return Err(bad("shorter than its header"));
    }
    let next = |pos: &mut usize| -> Result<Value, DatumError> {
        let (start, len) = locate(p, *pos, rk.subtype_storage)?;
        let stop = start.checked_add(len).filter(|s| *s <= end);
        let stop = stop.ok_or_else(|| bad("a bound past the end"))?;
        *pos = stop;
        let raw = p.get(start - VARHDRSZ..stop - VARHDRSZ);
        bound(raw.ok_or_else(|| bad("a bound past the end"))?)
    };
    let lower = has_lower(flags).then(|| next(&mut pos)).transpose()?;
    let upper = has_upper(flags).then(|| next(&mut pos)).transpose()?;
    if pos != end {
        return Err(bad(format!(
            "{} bytes after the bounds",
            end.saturating_sub(pos)
        )));
    }
    text(flags, lower.as_ref(), upper.as_ref())
}

/// Where the bound at `pos` starts and how long it is.
fn locate(p: &[u8], pos: usize, s: Storage) -> Result<(usize, usize), DatumError> {
    let byte_at = |at: usize| p.get(at.wrapping_sub(VARHDRSZ)).copied();
    if s.len == -1 {
        let short = byte_at(pos).is_some_and(|b| b != 0);
        let start = if short {
            pos
        } else {
            s.align.align(pos).ok_or_else(|| bad("offset overflow"))?
        };
        let len = varsize_any(p, start - VARHDRSZ)?;
        Ok((start, len))
    } else {
        let len = usize::try_from(s.len).map_err(|_| bad(format!("subtype length {}", s.len)))?;
        let start = s.align.align(pos).ok_or_else(|| bad("offset overflow"))?;
        Ok((start, len))
    }
}

/// A range in binary COPY (`range_send`); `bound` decodes one bound's
/// `_send` bytes.
pub(crate) fn decode_sent(
    b: &[u8],
    bound: &dyn Fn(&[u8]) -> Result<Value, String>,
) -> Result<String, String> {
    let (&flags, mut rest) = b.split_first().ok_or("no flags byte")?;
    let mut next = || -> Result<Value, String> {
        let (len, after) = rest
            .split_first_chunk::<4>()
            .ok_or("a bound without its length")?;
        let len = usize::try_from(i32::from_be_bytes(*len))
            .map_err(|_| "a negative bound length".to_owned())?;
        let bytes = after.get(..len).ok_or("a bound past the end")?;
        rest = after.get(len..).unwrap_or_default();
        bound(bytes)
    };
    let lower = has_lower(flags).then(&mut next).transpose()?;
    let upper = has_upper(flags).then(&mut next).transpose()?;
    if !rest.is_empty() {
        return Err(format!("{} bytes after the bounds", rest.len()));
    }
    text(flags, lower.as_ref(), upper.as_ref()).map_err(|e| format!("{e:?}"))
}

fn text(flags: u8, lower: Option<&Value>, upper: Option<&Value>) -> Result<String, DatumError> {
    if flags & RANGE_EMPTY != 0 {
        return Ok("empty".into());
    }
    let mut out = String::new();
    out.push(if flags & RANGE_LB_INC != 0 { '[' } else { '(' });
    if let Some(v) = lower {
        escaped(&mut out, v)?;
    }
    out.push(',');
    if let Some(v) = upper {
        escaped(&mut out, v)?;
    }
    out.push(if flags & RANGE_UB_INC != 0 { ']' } else { ')' });
    Ok(out)
}

/// `range_bound_escape`.
fn escaped(out: &mut String, v: &Value) -> Result<(), DatumError> {
    let text = v.to_pg_text().ok_or_else(|| bad("a NULL bound"))?;
    let quote = text.is_empty()
        || text.chars().any(|c| {
            matches!(
                c,
                '"' | '\\'
                    | '('
                    | ')'
                    | '['
                    | ']'
                    | ','
                    | ' '
                    | '\t'
                    | '\n'
                    | '\r'
                    | '\u{b}'
                    | '\u{c}'
            )
        });
    if quote {
        out.push('"');
    }
    for c in text.chars() {
        if matches!(c, '"' | '\\') {
            out.push(c);
        }
        out.push(c);
    }
    if quote {
        out.push('"');
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::{Align, Kind};

    fn int4range() -> RangeKind {
        RangeKind {
            subtype: Kind::Int4,
            subtype_storage: Storage {
                len: 4,
                align: Align::Int,
            },
        }
    }

    fn int4(b: &[u8]) -> Result<Value, DatumError> {
        let a: [u8; 4] = b.try_into().map_err(|_| bad("int4 length"))?;
        Ok(Value::Int32(i32::from_le_bytes(a)))
    }

    fn stored(bounds: &[i32], flags: u8) -> Vec<u8> {
        let mut p = 3904u32.to_le_bytes().to_vec();
        for b in bounds {
            p.extend(b.to_le_bytes());
        }
        p.push(flags);
        p
    }

    #[test]
    fn stored_ranges() {
        let rk = int4range();
        let t = |bounds: &[i32], flags| decode_stored(&stored(bounds, flags), &rk, &int4);
        assert_eq!(t(&[1, 10], RANGE_LB_INC).unwrap(), "[1,10)");
        assert_eq!(t(&[], RANGE_EMPTY).unwrap(), "empty");
        assert_eq!(t(&[5], RANGE_LB_INF).unwrap(), "(,5)");
        assert_eq!(t(&[], RANGE_LB_INF | RANGE_UB_INF).unwrap(), "(,)");
        assert_eq!(t(&[-3], RANGE_LB_INC | RANGE_UB_INF).unwrap(), "[-3,)");
        assert!(t(&[1], RANGE_LB_INC).is_err(), "the upper bound is missing");
        assert!(t(&[1, 2, 3], RANGE_LB_INC).is_err(), "a byte too many");
        assert!(decode_stored(&[], &rk, &int4).is_err());
        assert!(decode_stored(&[1, 2], &rk, &int4).is_err());
    }

    #[test]
    fn sent_ranges() {
        let int4 = |b: &[u8]| -> Result<Value, String> {
            let a: [u8; 4] = b.try_into().map_err(|_| "length".to_owned())?;
            Ok(Value::Int32(i32::from_be_bytes(a)))
        };
        let mut b = vec![RANGE_LB_INC | RANGE_UB_INC];
        for v in [1i32, 9] {
            b.extend(4i32.to_be_bytes());
            b.extend(v.to_be_bytes());
        }
        assert_eq!(decode_sent(&b, &int4).unwrap(), "[1,9]");
        assert_eq!(decode_sent(&[RANGE_EMPTY], &int4).unwrap(), "empty");
        assert!(decode_sent(&b[..b.len() - 1], &int4).is_err());
        let mut neg = vec![RANGE_UB_INF];
        neg.extend((-1i32).to_be_bytes());
        assert!(decode_sent(&neg, &int4).is_err());
    }

    #[test]
    fn bounds_are_quoted_as_range_out_does() {
        let mut out = String::new();
        escaped(&mut out, &Value::Text("2024-01-01 00:00:00+00".into())).unwrap();
        assert_eq!(out, "\"2024-01-01 00:00:00+00\"");
        let mut out = String::new();
        escaped(&mut out, &Value::Text(r#"a"b\c"#.into())).unwrap();
        assert_eq!(out, r#""a""b\\c""#);
        let mut out = String::new();
        escaped(&mut out, &Value::Text(String::new())).unwrap();
        assert_eq!(out, "\"\"");
    }
}
