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
//!
//! A multirange (multirangetypes.c), stored: after the header its type's
//! OID and a uint32 range count `n`, then `n - 1` uint32 items (offsets or
//! lengths of each range after the first: read sequentially here, they are
//! not needed), `n` flag bytes (a range's flags), then — from the next
//! offset aligned to the subtype's `typalign` — each range's bounds laid
//! out as in a range (lower, then upper aligned), each range's bounds
//! padded to `typalign`. Sent (`multirange_send`): an int32 count, then
//! each range as an int32 length and its `range_send` bytes. Text
//! (`multirange_out`): `{`, the ranges' text comma-separated, `}`.

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
    let next = |pos: &mut usize| read_bound(p, pos, end, rk, bound);
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

/// A stored multirange's body (varlena header stripped, detoasted).
pub(crate) fn decode_multirange_stored(
    p: &[u8],
    rk: &RangeKind,
    bound: &dyn Fn(&[u8]) -> Result<Value, DatumError>,
) -> Result<String, DatumError> {
    // Offsets are those of the whole varlena, as the alignment is.
    let end = p.len() + VARHDRSZ;
    let count = p
        .get(4..8)
        .and_then(|c| c.first_chunk::<4>())
        .map(|c| u32::from_le_bytes(*c))
        .ok_or_else(|| bad("multirange shorter than its header"))?;
    let n = usize::try_from(count).map_err(|_| bad("range count"))?;
    let align = rk.subtype_storage.align;
    if n == 0 {
        // multirange_size_estimate: the header aligned to the subtype's
        // typalign (16 bytes for a `d` subtype such as timestamptz).
        let size = align.align(12).ok_or_else(|| bad("offset overflow"))?;
        return if p.len() + VARHDRSZ == size {
            Ok("{}".into())
        } else {
            Err(bad(format!("an empty multirange of {} bytes", p.len())))
        };
    }
    // Items, then flags (datum offsets).
    let flags_at = (n - 1)
        .checked_mul(4)
        .and_then(|items| items.checked_add(12))
        .ok_or_else(|| bad("range count"))?;
    let bounds_at = flags_at.checked_add(n).ok_or_else(|| bad("range count"))?;
    if bounds_at > end {
        return Err(bad(format!("{count} ranges in {} bytes", p.len())));
    }
    let mut pos = align
        .align(bounds_at)
        .ok_or_else(|| bad("offset overflow"))?;
    let mut out = String::from("{");
    for i in 0..n {
        let flags = p
            .get(flags_at + i - VARHDRSZ)
            .copied()
            .ok_or_else(|| bad("flags past the end"))?;
        let next = |pos: &mut usize| read_bound(p, pos, end, rk, bound);
        if flags & RANGE_EMPTY != 0 {
            return Err(bad("an empty range inside a multirange"));
        }
        let lower = has_lower(flags).then(|| next(&mut pos)).transpose()?;
        let upper = has_upper(flags).then(|| next(&mut pos)).transpose()?;
        pos = align.align(pos).ok_or_else(|| bad("offset overflow"))?;
        if i > 0 {
            out.push(',');
        }
        out.push_str(&text(flags, lower.as_ref(), upper.as_ref())?);
    }
    // The last range's padding may run past the end of the value.
    if pos < end {
        return Err(bad(format!("{} bytes after the ranges", end - pos)));
    }
    out.push('}');
    Ok(out)
}

/// A multirange in binary COPY (`multirange_send`).
pub(crate) fn decode_multirange_sent(
    b: &[u8],
    bound: &dyn Fn(&[u8]) -> Result<Value, String>,
) -> Result<String, String> {
    let (count, mut rest) = b
        .split_first_chunk::<4>()
        .ok_or("multirange shorter than its count")?;
    let count = u32::from_be_bytes(*count);
    let mut out = String::from("{");
    for i in 0..count {
        let (len, after) = rest
            .split_first_chunk::<4>()
            .ok_or("a range without its length")?;
        let len = usize::try_from(i32::from_be_bytes(*len))
            .map_err(|_| "a negative range length".to_owned())?;
        let range = after.get(..len).ok_or("a range past the end")?;
        rest = after.get(len..).unwrap_or_default();
        if i > 0 {
            out.push(',');
        }
        out.push_str(&decode_sent(range, bound)?);
    }
    if !rest.is_empty() {
        return Err(format!("{} bytes after the ranges", rest.len()));
    }
    out.push('}');
    Ok(out)
}

/// The bound at datum offset `pos` of `p` (a body whose datum ends at
/// `end`); `pos` moves past it.
fn read_bound(
    p: &[u8],
    pos: &mut usize,
    end: usize,
    rk: &RangeKind,
    bound: &dyn Fn(&[u8]) -> Result<Value, DatumError>,
) -> Result<Value, DatumError> {
    let (start, len) = locate(p, *pos, rk.subtype_storage)?;
    let stop = start.checked_add(len).filter(|s| *s <= end);
    let stop = stop.ok_or_else(|| bad("a bound past the end"))?;
    *pos = stop;
    let raw = p.get(start - VARHDRSZ..stop - VARHDRSZ);
    bound(raw.ok_or_else(|| bad("a bound past the end"))?)
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

    #[test]
    fn hostile_multiranges_are_refused_not_panics() {
        let rk = RangeKind {
            subtype: crate::kind::Kind::Int4,
            subtype_storage: Storage {
                len: 4,
                align: crate::kind::Align::Int,
            },
        };
        let bound = |b: &[u8]| -> Result<Value, DatumError> {
            let w = b.first_chunk::<4>().ok_or_else(|| bad("short"))?;
            Ok(Value::Int32(i32::from_le_bytes(*w)))
        };
        // {[1,3)}: type OID, count 1, no items, flags [LB_INC], bounds at 16.
        let mut one = 3904u32.to_le_bytes().to_vec();
        one.extend(1u32.to_le_bytes());
        one.extend([RANGE_LB_INC, 0, 0, 0]);
        one.extend(1i32.to_le_bytes());
        one.extend(3i32.to_le_bytes());
        assert_eq!(
            decode_multirange_stored(&one, &rk, &bound).unwrap(),
            "{[1,3)}"
        );
        let mut empty = 3904u32.to_le_bytes().to_vec();
        empty.extend(0u32.to_le_bytes());
        assert_eq!(decode_multirange_stored(&empty, &rk, &bound).unwrap(), "{}");
        for cut in 0..one.len() {
            assert!(
                decode_multirange_stored(&one[..cut], &rk, &bound).is_err(),
                "{cut}"
            );
        }
        let mut huge = 3904u32.to_le_bytes().to_vec();
        huge.extend(u32::MAX.to_le_bytes());
        assert!(decode_multirange_stored(&huge, &rk, &bound).is_err());
        let mut emptied = one.clone();
        emptied[8] = RANGE_EMPTY;
        assert!(decode_multirange_stored(&emptied, &rk, &bound).is_err());
        let sent_bound = |b: &[u8]| -> Result<Value, String> {
            let w = b.first_chunk::<4>().ok_or("short")?;
            Ok(Value::Int32(i32::from_be_bytes(*w)))
        };
        let mut sent = 1i32.to_be_bytes().to_vec();
        sent.extend(17i32.to_be_bytes());
        sent.push(RANGE_LB_INC);
        for (len, v) in [(4i32, 1i32), (4, 3)] {
            sent.extend(len.to_be_bytes());
            sent.extend(v.to_be_bytes());
        }
        assert_eq!(
            decode_multirange_sent(&sent, &sent_bound).unwrap(),
            "{[1,3)}"
        );
        assert!(decode_multirange_sent(&sent[..sent.len() - 1], &sent_bound).is_err());
    }
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
