//! `jsonb` → JSON text, byte for byte what `jsonb_out` writes
//! (`JsonbToCString` in jsonb.c): keys in stored order, `", "` between
//! members, `": "` after keys, strings escaped as `escape_json` does,
//! numbers as `numeric_out`, a raw scalar at the top without brackets.
//!
//! The stored form (utils/jsonb.h, jsonb_util.c):
//!
//! ```text
//!  JsonbContainer: uint32 header = count | JB_FSCALAR | JB_FOBJECT | JB_FARRAY
//!                  JEntry children[count]   (objects: 2*count — all keys, then all values)
//!                  data
//!  JEntry:         uint32 = JENTRY_HAS_OFF | type (3 bits) | off-or-len (28 bits)
//! ```
//!
//! A child's data ends at the sum of the lengths before it, restarted at
//! every entry that stores its end offset (`JENTRY_HAS_OFF`, every
//! `JB_OFFSET_STRIDE`th). Numerics (a numeric varlena) and nested
//! containers start at the next 4-byte boundary of the data area
//! (`INTALIGN(offset)` in `fillJsonbValue`).
//!
//! Rendering is iterative, so no depth of nesting can exhaust the stack.

use std::fmt::Write;

use crate::bytes::u32_at;
use crate::error::DatumError;
use crate::numeric;

const JB_CMASK: u32 = 0x0FFF_FFFF;
const JB_FSCALAR: u32 = 0x1000_0000;
const JB_FOBJECT: u32 = 0x2000_0000;
const JB_FARRAY: u32 = 0x4000_0000;
const JENTRY_OFFLENMASK: u32 = 0x0FFF_FFFF;
const JENTRY_TYPEMASK: u32 = 0x7000_0000;
const JENTRY_HAS_OFF: u32 = 0x8000_0000;
const JENTRY_ISSTRING: u32 = 0x0000_0000;
const JENTRY_ISNUMERIC: u32 = 0x1000_0000;
const JENTRY_ISBOOL_FALSE: u32 = 0x2000_0000;
const JENTRY_ISBOOL_TRUE: u32 = 0x3000_0000;
const JENTRY_ISNULL: u32 = 0x4000_0000;
const JENTRY_ISCONTAINER: u32 = 0x5000_0000;

fn bad(detail: impl Into<String>) -> DatumError {
    DatumError::bad("jsonb", detail)
}

/// One container, its children located.
struct Container<'a> {
    is_object: bool,
    /// Pairs for objects, elements for arrays.
    count: usize,
    /// (type bits, start, end) of each child, relative to `data`.
    children: Vec<(u32, usize, usize)>,
    data: &'a [u8],
    next: usize,
}

impl<'a> Container<'a> {
    fn parse(bytes: &'a [u8]) -> Result<(Container<'a>, bool), DatumError> {
        let header = u32_at(bytes, 0).map_err(|_| bad("container without a header"))?;
        let count = (header & JB_CMASK) as usize;
        let is_object = header & JB_FOBJECT != 0;
        let is_array = header & JB_FARRAY != 0;
        if is_object == is_array {
            return Err(bad(format!("container header {header:#010x}")));
        }
        let is_scalar = header & JB_FSCALAR != 0;
        if is_scalar && (is_object || count != 1) {
            return Err(bad("malformed scalar container"));
        }
        let n = if is_object {
            count.checked_mul(2)
        } else {
            Some(count)
        }
        .ok_or_else(|| bad("child count overflows"))?;
        // Every child needs its 4-byte JEntry: bound the count by the bytes.
        let data_at = n
            .checked_mul(4)
            .and_then(|x| x.checked_add(4))
            .filter(|x| *x <= bytes.len())
            .ok_or_else(|| bad(format!("{n} children do not fit in {} bytes", bytes.len())))?;
        let data = bytes.get(data_at..).unwrap_or_default();
        let mut children = Vec::with_capacity(n);
        let mut end = 0usize;
        for i in 0..n {
            let je = u32_at(bytes, 4 + 4 * i)?;
            let field = (je & JENTRY_OFFLENMASK) as usize;
            let start = end;
            end = if je & JENTRY_HAS_OFF != 0 {
                field
            } else {
                start
                    .checked_add(field)
                    .ok_or_else(|| bad("child length overflows"))?
            };
            if end < start || end > data.len() {
                return Err(bad(format!(
                    "child {i} at {start}..{end} is outside the {} data bytes",
                    data.len()
                )));
            }
            children.push((je & JENTRY_TYPEMASK, start, end));
        }
        Ok((
            Container {
                is_object,
                count,
                children,
                data,
                next: 0,
            },
            is_scalar,
        ))
    }

    /// The bytes of child `i`, from `INTALIGN(start)` when `aligned`.
    fn child(&self, i: usize, aligned: bool) -> Result<(u32, &'a [u8]), DatumError> {
        let &(ty, start, end) = self.children.get(i).ok_or_else(|| bad("child index"))?;
        let start = if aligned {
            start.next_multiple_of(4).min(end)
        } else {
            start
        };
        Ok((
            ty,
            self.data
                .get(start..end)
                .ok_or_else(|| bad("child bytes"))?,
        ))
    }
}

/// `escape_json`.
pub(crate) fn escape_json(out: &mut String, s: &str) {
    out.push('"');
    // Runs that need no escape are copied whole: every byte that does is
    // ASCII, so the runs between them end on character boundaries.
    let mut run = 0;
    for (i, b) in s.bytes().enumerate() {
        let escaped = match b {
            0x08 => "\\b",
            0x0c => "\\f",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b if b < 0x20 => "",
            _ => continue,
        };
        out.push_str(s.get(run..i).unwrap_or_default());
        if escaped.is_empty() {
            let _ = write!(out, "\\u{:04x}", b);
        } else {
            out.push_str(escaped);
        }
        run = i + 1;
    }
    out.push_str(s.get(run..).unwrap_or_default());
    out.push('"');
}

/// Writes a scalar child, or returns the bytes of a container child for
/// the caller to descend into.
fn write_scalar<'a>(
    out: &mut String,
    c: &Container<'a>,
    i: usize,
) -> Result<Option<&'a [u8]>, DatumError> {
    let (ty, b) = c.child(i, false)?;
    match ty {
        JENTRY_ISSTRING => {
            let s = std::str::from_utf8(b).map_err(|_| bad("string is not valid UTF-8"))?;
            escape_json(out, s);
        }
        JENTRY_ISNUMERIC => {
            let (_, b) = c.child(i, true)?;
            let body = crate::varlena::plain_payload(b)?;
            numeric::decode(body)?.write_text(out);
        }
        JENTRY_ISBOOL_FALSE => out.push_str("false"),
        JENTRY_ISBOOL_TRUE => out.push_str("true"),
        JENTRY_ISNULL => out.push_str("null"),
        JENTRY_ISCONTAINER => return Ok(Some(c.child(i, true)?.1)),
        _ => return Err(bad(format!("child type {ty:#010x}"))),
    }
    Ok(None)
}

/// Renders a jsonb varlena body as `jsonb_out` does.
pub(crate) fn to_text(body: &[u8]) -> Result<String, DatumError> {
    let mut out = String::with_capacity(body.len());
    let (root, is_scalar) = Container::parse(body)?;
    if is_scalar {
        if write_scalar(&mut out, &root, 0)?.is_some() {
            return Err(bad("scalar container holds a container"));
        }
        return Ok(out);
    }
    out.push(if root.is_object { '{' } else { '[' });
    // Deep enough for most documents without growing.
    let mut stack = Vec::with_capacity(8);
    stack.push(root);
    while let Some(top) = stack.last_mut() {
        if top.next == top.count {
            out.push(if top.is_object { '}' } else { ']' });
            stack.pop();
            continue;
        }
        let i = top.next;
        top.next += 1;
        if i > 0 {
            out.push_str(", ");
        }
        let value_index = if top.is_object {
            let (ty, _) = top.child(i, false)?;
            if ty != JENTRY_ISSTRING {
                return Err(bad("object key is not a string"));
            }
            write_scalar(&mut out, top, i)?;
            out.push_str(": ");
            i + top.count
        } else {
            i
        };
        if let Some(nested) = write_scalar(&mut out, top, value_index)? {
            let (child, is_scalar) = Container::parse(nested)?;
            if is_scalar {
                return Err(bad("nested scalar container"));
            }
            out.push(if child.is_object { '{' } else { '[' });
            stack.push(child);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `escape_json` (json.c) character by character, as PostgreSQL writes it.
    fn escape_reference(s: &str) -> String {
        let mut out = String::from('"');
        for c in s.chars() {
            match c {
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    #[test]
    fn escapes_as_postgres_does() {
        let controls: String = (0u8..0x20).map(char::from).collect();
        for s in [
            "",
            "plain",
            "\"quoted\" and \\ back",
            "line\nbreak\ttab\r",
            "ünïcödé ✓ 𝄞 at the end",
            "\u{1}start and end\u{1f}",
            "€\"€\\€\n€",
            controls.as_str(),
        ] {
            let mut out = String::new();
            escape_json(&mut out, s);
            assert_eq!(out, escape_reference(s), "{s:?}");
        }
    }

    /// Builds a container from (type, bytes) children, lengths only.
    fn container(flags: u32, children: &[(u32, Vec<u8>)], pairs: usize) -> Vec<u8> {
        let mut out = (flags | pairs as u32).to_le_bytes().to_vec();
        let mut data: Vec<u8> = Vec::new();
        let mut entries = Vec::new();
        for (ty, bytes) in children {
            let start = data.len();
            if *ty == JENTRY_ISNUMERIC || *ty == JENTRY_ISCONTAINER {
                while !data.len().is_multiple_of(4) {
                    data.push(0);
                }
            }
            data.extend_from_slice(bytes);
            entries.push(ty | (data.len() - start) as u32);
        }
        for e in entries {
            out.extend_from_slice(&e.to_le_bytes());
        }
        // The data area starts right after the entries; alignment above is
        // relative to it, as in PostgreSQL.
        out.extend_from_slice(&data);
        out
    }

    fn string(s: &str) -> (u32, Vec<u8>) {
        (JENTRY_ISSTRING, s.as_bytes().to_vec())
    }

    fn num(text: &str) -> (u32, Vec<u8>) {
        // A numeric varlena with a 4-byte header: short form, via the parser.
        let n = crate::numeric::parse(text).unwrap();
        let crate::value::Numeric::Finite {
            negative,
            weight,
            dscale,
            digits,
        } = n
        else {
            panic!()
        };
        let mut h: u16 = 0x8000 | (dscale << 7) | ((weight as u16) & 0x7f);
        if negative {
            h |= 0x2000;
        }
        let mut body = h.to_le_bytes().to_vec();
        for d in digits {
            body.extend_from_slice(&d.to_le_bytes());
        }
        let mut v = (((body.len() + 4) as u32) << 2).to_le_bytes().to_vec();
        v.extend_from_slice(&body);
        (JENTRY_ISNUMERIC, v)
    }

    #[test]
    fn renders_like_jsonb_out() {
        let inner = container(
            JB_FARRAY,
            &[
                num("1.50"),
                (JENTRY_ISNULL, vec![]),
                (JENTRY_ISBOOL_TRUE, vec![]),
            ],
            3,
        );
        let obj = container(
            JB_FOBJECT,
            &[
                string("a"),
                string("bb"),
                string("x\"\n\u{1}é"),
                (JENTRY_ISCONTAINER, inner),
            ],
            2,
        );
        assert_eq!(
            to_text(&obj).unwrap(),
            r#"{"a": "x\"\n\u0001é", "bb": [1.50, null, true]}"#
        );
        let scalar = container(JB_FARRAY | JB_FSCALAR, &[num("-7")], 1);
        assert_eq!(to_text(&scalar).unwrap(), "-7");
        assert_eq!(to_text(&container(JB_FOBJECT, &[], 0)).unwrap(), "{}");
        assert_eq!(to_text(&container(JB_FARRAY, &[], 0)).unwrap(), "[]");
    }

    #[test]
    fn deep_nesting_does_not_recurse() {
        // Level k is an array holding level k-1; level 0 is `[]`.
        let depth = 100_000usize;
        let mut v = Vec::with_capacity(4 + 8 * depth);
        for k in (1..=depth).rev() {
            v.extend_from_slice(&(JB_FARRAY | 1).to_le_bytes());
            v.extend_from_slice(&(JENTRY_ISCONTAINER | (4 + 8 * (k - 1)) as u32).to_le_bytes());
        }
        v.extend_from_slice(&JB_FARRAY.to_le_bytes());
        let s = to_text(&v).unwrap();
        assert_eq!(s.len(), 2 * (depth + 1));
    }

    #[test]
    fn hostile() {
        let good = container(JB_FOBJECT, &[string("k"), num("12")], 1);
        for n in 0..good.len() {
            assert!(to_text(&good[..n]).is_err(), "{n}");
        }
        assert!(to_text(&(JB_FARRAY | 0x0FFF_FFFF).to_le_bytes()).is_err());
        assert!(to_text(&(JB_FARRAY | JB_FOBJECT).to_le_bytes()).is_err());
        let bad_key = container(JB_FOBJECT, &[num("1"), num("2")], 1);
        assert!(to_text(&bad_key).is_err());
        let bad_type = container(JB_FARRAY, &[(0x6000_0000, vec![])], 1);
        assert!(to_text(&bad_type).is_err());
    }
}
