//! Arrays: the stored `ArrayType` (utils/array.h), `array_out`'s text and
//! the parse of that text.
//!
//! ```text
//!  int32 vl_len_ | int32 ndim | int32 dataoffset (0: no NULLs) | Oid elemtype
//!  int32 dims[ndim] | int32 lbound[ndim]
//!  bits8 nullbitmap[(nitems + 7) / 8]       only when dataoffset != 0
//!  elements from dataoffset, or from MAXALIGN(16 + 8 * ndim) without NULLs
//! ```
//!
//! Offsets count from the start of the 4-byte varlena header: arrays are
//! always handled detoasted, with that header and MAXALIGNed. Each non-NULL
//! element is aligned to the element type's `typalign` (`array_iter_next`:
//! `att_align_nominal`, never the short-varlena exception); NULLs take no
//! bytes. A set bitmap bit means NOT NULL, as in tuples.

use crate::bytes::{i32_at, slice};
use crate::error::DatumError;
use crate::kind::ArrayKind;
use crate::value::{ArrayValue, Value};
use crate::varlena::{plain_payload, varsize_any};

/// `MAXDIM`.
const MAXDIM: i32 = 6;
/// `MaxArraySize`: `MaxAllocSize / sizeof(Datum)`.
const MAX_ARRAY_SIZE: i64 = 0x3FFF_FFFF / 8;
const VARHDRSZ: usize = 4;

fn bad(detail: impl Into<String>) -> DatumError {
    DatumError::bad("array", detail)
}

/// Decodes an array varlena body (header stripped), each element with
/// `element`.
pub(crate) fn decode(
    p: &[u8],
    ak: &ArrayKind,
    element: &dyn Fn(&[u8]) -> Result<Value, DatumError>,
) -> Result<ArrayValue, DatumError> {
    let empty = ArrayValue {
        element_type: ak.element_oid,
        dims: Vec::new(),
        elements: Vec::new(),
        delimiter: ak.element.array_delimiter(),
    };
    // Positions below are array offsets (header included); `at` maps one
    // to an index into `p`.
    let at = |pos: usize| pos - VARHDRSZ;
    let ndim = i32_at(p, at(4)).map_err(|_| bad("shorter than its header"))?;
    let dataoffset = i32_at(p, at(8)).map_err(|_| bad("shorter than its header"))?;
    if ndim == 0 {
        return Ok(empty);
    }
    if !(1..=MAXDIM).contains(&ndim) {
        return Err(bad(format!("{ndim} dimensions")));
    }
    let ndim = ndim as usize;
    let mut dims = Vec::with_capacity(ndim);
    let mut nitems: i64 = 1;
    for d in 0..ndim {
        let len = i32_at(p, at(16 + 4 * d))?;
        let lb = i32_at(p, at(16 + 4 * ndim + 4 * d))?;
        if len < 0 || lb.checked_add(len).is_none() {
            return Err(bad(format!("dimension {len} from {lb}")));
        }
        nitems = nitems.saturating_mul(i64::from(len));
        dims.push((len, lb));
    }
    if nitems > MAX_ARRAY_SIZE {
        return Err(bad(format!("{nitems} elements")));
    }
    let nitems = nitems as usize;
    if nitems == 0 {
        return Ok(empty);
    }
    let header_end = 16 + 8 * ndim;
    let (bitmap, data_start) = if dataoffset != 0 {
        let bitmap = slice(p, at(header_end), nitems.div_ceil(8))
            .map_err(|_| bad("null bitmap past the end"))?;
        let start =
            usize::try_from(dataoffset).map_err(|_| bad(format!("data offset {dataoffset}")))?;
        if start < header_end + bitmap.len() || start > p.len() + VARHDRSZ {
            return Err(bad(format!("data offset {dataoffset}")));
        }
        (Some(bitmap), start)
    } else {
        (None, header_end.next_multiple_of(8))
    };
    let st = ak.element_storage;
    let mut elements = Vec::new();
    let mut pos = data_start;
    for i in 0..nitems {
        if let Some(bm) = bitmap
            && bm.get(i / 8).copied().unwrap_or(0) & (1 << (i % 8)) == 0
        {
            elements.push(Value::Null);
            continue;
        }
        pos = st.align.align(pos).ok_or(DatumError::Truncated(pos))?;
        let size = match st.len {
            -1 => varsize_any(p, at(pos))?,
            n if n > 0 => n as usize,
            n => return Err(bad(format!("element length {n}"))),
        };
        let raw = slice(p, at(pos), size)?;
        elements.push(element(raw)?);
        pos += size;
    }
    Ok(ArrayValue {
        element_type: ak.element_oid,
        dims,
        elements,
        delimiter: ak.element.array_delimiter(),
    })
}

/// An element's varlena body.
pub(crate) fn element_payload(raw: &[u8]) -> Result<&[u8], DatumError> {
    plain_payload(raw)
}

/// `array_isspace`.
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\u{b}' | '\u{c}')
}

/// Appends one element as `array_out` does: quoted when empty, `NULL`
/// spelled any way, or holding `"`, `\`, braces, the delimiter or space.
fn write_element(out: &mut String, v: &Value, delimiter: char) {
    let Some(text) = v.to_pg_text() else {
        out.push_str("NULL");
        return;
    };
    let needs_quotes = text.is_empty()
        || text.eq_ignore_ascii_case("NULL")
        || text
            .chars()
            .any(|c| matches!(c, '"' | '\\' | '{' | '}') || c == delimiter || is_space(c));
    if !needs_quotes {
        out.push_str(&text);
        return;
    }
    out.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

/// `array_out`.
pub(crate) fn write_array(out: &mut String, a: &ArrayValue) {
    let nitems = a.dims.iter().try_fold(1usize, |n, (len, _)| {
        n.checked_mul(usize::try_from(*len).unwrap_or(0))
    });
    if a.dims.is_empty() || nitems == Some(0) {
        out.push_str("{}");
        return;
    }
    if nitems != Some(a.elements.len()) {
        // Not a decoded value: dimensions that do not fit the elements are
        // ignored rather than trusted.
        out.push('{');
        for (i, v) in a.elements.iter().enumerate() {
            if i > 0 {
                out.push(a.delimiter);
            }
            write_element(out, v, a.delimiter);
        }
        out.push('}');
        return;
    }
    if a.dims.iter().any(|(_, lb)| *lb != 1) {
        for (len, lb) in &a.dims {
            out.push_str(&format!("[{lb}:{}]", i64::from(*lb) + i64::from(*len) - 1));
        }
        out.push('=');
    }
    let mut next = 0usize;
    write_level(out, a, 0, &mut next);
}

fn write_level(out: &mut String, a: &ArrayValue, depth: usize, next: &mut usize) {
    let Some((len, _)) = a.dims.get(depth) else {
        return;
    };
    out.push('{');
    for i in 0..usize::try_from(*len).unwrap_or(0) {
        if i > 0 {
            out.push(a.delimiter);
        }
        if depth + 1 == a.dims.len() {
            match a.elements.get(*next) {
                Some(v) => write_element(out, v, a.delimiter),
                None => out.push_str("NULL"),
            }
            *next += 1;
        } else {
            write_level(out, a, depth + 1, next);
        }
    }
    out.push('}');
}

/// An array literal taken apart: `(length, lower bound)` per dimension and
/// the elements' texts in row-major order (`None` for an unquoted NULL).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Literal {
    pub dims: Vec<(i32, i32)>,
    pub elements: Vec<Option<String>>,
}

/// Parses `array_out`'s output (and the common input forms: optional
/// `[lb:ub]` decoration, spaces around elements).
pub(crate) fn parse_literal(s: &str, delimiter: char) -> Result<Literal, String> {
    let bad = |why: &str| format!("{s:?} is not an array literal: {why}");
    let mut rest = s.trim_start_matches(is_space);
    let mut bounds: Vec<(i32, i32)> = Vec::new();
    while let Some(r) = rest.strip_prefix('[') {
        let (range, r) = r.split_once(']').ok_or_else(|| bad("unclosed ["))?;
        let (lb, ub) = range.split_once(':').unwrap_or(("1", range));
        let lb: i32 = lb.trim().parse().map_err(|_| bad("bad bound"))?;
        let ub: i32 = ub.trim().parse().map_err(|_| bad("bad bound"))?;
        bounds.push((lb, ub));
        rest = r;
    }
    if !bounds.is_empty() {
        rest = rest
            .trim_start_matches(is_space)
            .strip_prefix('=')
            .ok_or_else(|| bad("bounds without ="))?
            .trim_start_matches(is_space);
    }
    let mut chars = rest.chars().peekable();
    let mut elements = Vec::new();
    let mut counts: Vec<Option<i32>> = Vec::new();
    // The number of items seen at each open level.
    let mut open: Vec<i32> = Vec::new();
    let mut ndim: Option<usize> = None;
    let mut expect_item = true;
    loop {
        let Some(c) = chars.next() else {
            return Err(bad("unbalanced braces"));
        };
        match c {
            c if is_space(c) => {}
            '{' => {
                if !expect_item || open.len() >= MAXDIM as usize {
                    return Err(bad("misplaced {"));
                }
                if let Some(n) = open.last_mut() {
                    *n += 1;
                }
                open.push(0);
                if counts.len() < open.len() {
                    counts.push(None);
                }
            }
            '}' => {
                let n = open.pop().ok_or_else(|| bad("unbalanced }"))?;
                let level = open.len();
                if n > 0 && expect_item {
                    return Err(bad("trailing delimiter"));
                }
                if n > 0 || level > 0 {
                    let slot = counts.get_mut(level).ok_or_else(|| bad("levels"))?;
                    match slot {
                        Some(m) if *m != n => return Err(bad("dimensions do not match")),
                        _ => *slot = Some(n),
                    }
                }
                expect_item = false;
                if open.is_empty() {
                    break;
                }
            }
            c if c == delimiter => {
                if expect_item || open.is_empty() {
                    return Err(bad("misplaced delimiter"));
                }
                expect_item = true;
            }
            _ => {
                if !expect_item || open.is_empty() {
                    return Err(bad("misplaced element"));
                }
                // Elements sit at the innermost level only.
                match ndim {
                    Some(d) if d != open.len() => return Err(bad("element at the wrong depth")),
                    _ => ndim = Some(open.len()),
                }
                let mut text = String::new();
                let mut quoted_any = false;
                let mut c = c;
                let mut trailing_space = 0usize;
                loop {
                    match c {
                        '"' => {
                            quoted_any = true;
                            loop {
                                match chars.next() {
                                    Some('"') => break,
                                    Some('\\') => {
                                        text.push(chars.next().ok_or_else(|| bad("dangling \\"))?)
                                    }
                                    Some(ch) => text.push(ch),
                                    None => return Err(bad("unclosed quote")),
                                }
                            }
                            trailing_space = 0;
                        }
                        '\\' => {
                            text.push(chars.next().ok_or_else(|| bad("dangling \\"))?);
                            trailing_space = 0;
                        }
                        c if is_space(c) => {
                            text.push(c);
                            trailing_space += 1;
                        }
                        '{' => return Err(bad("misplaced {")),
                        c => {
                            text.push(c);
                            trailing_space = 0;
                        }
                    }
                    match chars.peek() {
                        Some(&d) if d == delimiter || d == '}' => break,
                        None => break,
                        Some(_) => c = chars.next().unwrap_or(' '),
                    }
                }
                for _ in 0..trailing_space {
                    text.pop();
                }
                if let Some(n) = open.last_mut() {
                    *n += 1;
                }
                let is_null = !quoted_any && text.eq_ignore_ascii_case("NULL");
                elements.push((!is_null).then_some(text));
                expect_item = false;
            }
        }
    }
    if chars.any(|c| !is_space(c)) {
        return Err(bad("text after the closing brace"));
    }
    if elements.is_empty() {
        if counts.iter().flatten().any(|n| *n > 0) {
            return Err(bad("nested empty arrays"));
        }
        return Ok(Literal {
            dims: Vec::new(),
            elements,
        });
    }
    let lens: Vec<i32> = counts.iter().map(|n| n.unwrap_or(0)).collect();
    let dims = if bounds.is_empty() {
        lens.iter().map(|l| (*l, 1)).collect()
    } else {
        if bounds.len() != lens.len()
            || bounds
                .iter()
                .zip(&lens)
                .any(|((lb, ub), l)| i64::from(*ub) - i64::from(*lb) + 1 != i64::from(*l))
        {
            return Err(bad("bounds do not match the elements"));
        }
        bounds
            .iter()
            .zip(&lens)
            .map(|((lb, _), l)| (*l, *lb))
            .collect()
    };
    Ok(Literal { dims, elements })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::{Align, Kind, Storage};

    fn int4_array() -> ArrayKind {
        ArrayKind {
            element: Kind::Int4,
            element_oid: 23,
            element_storage: Storage {
                len: 4,
                align: Align::Int,
            },
        }
    }

    fn int4(raw: &[u8]) -> Result<Value, DatumError> {
        Ok(Value::Int32(i32::from_le_bytes(crate::bytes::exact::<4>(
            raw, "integer",
        )?)))
    }

    fn body(
        ndim: i32,
        dataoffset: i32,
        dims: &[(i32, i32)],
        bitmap: &[u8],
        elems: &[i32],
    ) -> Vec<u8> {
        let mut v = Vec::new();
        for x in [ndim, dataoffset, 23] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        for (len, _) in dims {
            v.extend_from_slice(&len.to_le_bytes());
        }
        for (_, lb) in dims {
            v.extend_from_slice(&lb.to_le_bytes());
        }
        v.extend_from_slice(bitmap);
        while !(v.len() + 4).is_multiple_of(8) {
            v.push(0);
        }
        for e in elems {
            v.extend_from_slice(&e.to_le_bytes());
        }
        v
    }

    fn text(a: &ArrayValue) -> String {
        let mut s = String::new();
        write_array(&mut s, a);
        s
    }

    #[test]
    fn stored_arrays() {
        let a = decode(
            &body(1, 0, &[(3, 1)], &[], &[1, 2, 3]),
            &int4_array(),
            &int4,
        )
        .unwrap();
        assert_eq!(text(&a), "{1,2,3}");
        // 2x2 with a NULL: bitmap 0b1011, data offset MAXALIGN(16+16+1) = 40.
        let a = decode(
            &body(2, 40, &[(2, 1), (2, 0)], &[0b1011], &[1, 2, 4]),
            &int4_array(),
            &int4,
        )
        .unwrap();
        assert_eq!(text(&a), "[1:2][0:1]={{1,2},{NULL,4}}");
        let a = decode(&body(0, 0, &[], &[], &[]), &int4_array(), &int4).unwrap();
        assert_eq!(text(&a), "{}");
    }

    #[test]
    fn hostile_arrays() {
        let good = body(2, 40, &[(2, 1), (2, 1)], &[0b1011], &[1, 2, 4]);
        for n in 0..good.len() {
            assert!(decode(&good[..n], &int4_array(), &int4).is_err(), "{n}");
        }
        assert!(decode(&body(7, 0, &[(1, 1); 7], &[], &[1]), &int4_array(), &int4).is_err());
        assert!(decode(&body(1, 0, &[(-1, 1)], &[], &[]), &int4_array(), &int4).is_err());
        assert!(
            decode(
                &body(1, 0, &[(1, i32::MAX)], &[], &[1]),
                &int4_array(),
                &int4
            )
            .is_err()
        );
        assert!(
            decode(
                &body(2, 0, &[(1 << 16, 1), (1 << 16, 1)], &[], &[]),
                &int4_array(),
                &int4
            )
            .is_err()
        );
        assert!(decode(&body(1, 8, &[(1, 1)], &[1], &[1]), &int4_array(), &int4).is_err());
    }

    #[test]
    fn literals() {
        let l = parse_literal(r#"{"a b",NULL,"NULL","",  x\,y  ,"q\"\\"}"#, ',').unwrap();
        assert_eq!(l.dims, vec![(6, 1)]);
        assert_eq!(
            l.elements,
            vec![
                Some("a b".into()),
                None,
                Some("NULL".into()),
                Some(String::new()),
                Some("x,y".into()),
                Some("q\"\\".into())
            ]
        );
        let l = parse_literal("[0:1][2:3]={{1,2},{3,4}}", ',').unwrap();
        assert_eq!(l.dims, vec![(2, 0), (2, 2)]);
        assert_eq!(parse_literal("{}", ',').unwrap().dims, vec![]);
        for bad in [
            "{1,2",
            "{1,,2}",
            "{{1},2}",
            "{{1,2},{3}}",
            "1",
            "{1}x",
            "[1:3]={1,2}",
            "{\"a}",
            "{1,}",
        ] {
            assert!(parse_literal(bad, ',').is_err(), "{bad}");
        }
    }

    #[test]
    fn element_quoting() {
        let a = ArrayValue {
            element_type: 25,
            dims: vec![(6, 1)],
            elements: vec![
                Value::Text("plain".into()),
                Value::Text(String::new()),
                Value::Text("null".into()),
                Value::Text("a\"b\\c".into()),
                Value::Text("x y".into()),
                Value::Null,
            ],
            delimiter: ',',
        };
        let s = text(&a);
        assert_eq!(s, r#"{plain,"","null","a\"b\\c","x y",NULL}"#);
        let l = parse_literal(&s, ',').unwrap();
        assert_eq!(l.elements.len(), 6);
        assert_eq!(l.elements[3].as_deref(), Some("a\"b\\c"));
    }
}
