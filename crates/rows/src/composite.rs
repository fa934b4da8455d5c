//! Composite (row) values (rowtypes.c), as `record_out` writes them.
//!
//! Stored: the datum is a whole `HeapTupleHeaderData` whose first word is
//! the varlena header (`datum_len_`), then `datum_typmod` and
//! `datum_typeid`, `t_ctid`, `t_infomask2`, `t_infomask` and `t_hoff`;
//! its fields follow as a tuple's attributes do (null bitmap, alignment
//! relative to `t_hoff`), dropped fields' bytes included, fields added to
//! the type after the value was written absent (NULL). TOAST pointers are
//! flattened into the value when it is stored, so none are followed here.
//!
//! Sent (`record_send`): an int32 count of live fields, then per field its
//! type OID, an int32 length (-1 for NULL) and its `_send` bytes.
//!
//! Text: `(`, the live fields' text comma-separated, `)`; NULL as nothing;
//! a value that is empty or holds `"`, `\`, `(`, `)`, `,` or white space
//! double-quoted, with `"` and `\` doubled inside.

use crate::error::DatumError;
use crate::kind::{CompositeKind, Kind};
use crate::tuple::{DeformError, SIZEOF_HEAP_TUPLE_HEADER, TupleRef, deform};
use crate::value::Value;

/// Decodes one field's bytes of kind `Kind` (stored or sent).
type FieldDecoder<'a, E> = &'a dyn Fn(&Kind, &[u8]) -> Result<Value, E>;

fn bad(detail: impl Into<String>) -> DatumError {
    DatumError::bad("record", detail)
}

/// A stored composite's text (varlena body: header stripped, detoasted);
/// `field` decodes one field's datum.
pub(crate) fn stored_text(
    b: &[u8],
    ck: &CompositeKind,
    field: FieldDecoder<'_, DatumError>,
) -> Result<String, DatumError> {
    // Body offsets: the header's 4 bytes are not here.
    let u16_at = |at: usize| -> Option<u16> {
        b.get(at..at + 2)?
            .first_chunk::<2>()
            .map(|w| u16::from_le_bytes(*w))
    };
    let (Some(infomask2), Some(infomask), Some(&hoff)) = (u16_at(14), u16_at(16), b.get(18)) else {
        return Err(bad("shorter than a tuple header"));
    };
    let data = b.get(SIZEOF_HEAP_TUPLE_HEADER - 4..).unwrap_or_default();
    let tuple = TupleRef::from_wal(infomask2, infomask, hoff, data);
    let raw = deform(&tuple, &ck.storage).map_err(|e| match e {
        DeformError::Tuple(s) => bad(s),
        DeformError::Datum(i, e) => bad(format!("field {}: {e:?}", i + 1)),
    })?;
    let mut values = Vec::with_capacity(ck.fields.len());
    for (i, (name, kind)) in ck.fields.iter().enumerate() {
        let Some(kind) = kind else {
            continue;
        };
        let v = match raw.get(i).copied().flatten() {
            Some(bytes) => field(kind, bytes).map_err(|e| bad(format!("field {name:?}: {e:?}")))?,
            None => Value::Null,
        };
        values.push(v);
    }
    Ok(record_text(&values))
}

/// `record_send`'s form; `field` decodes one field's `_send` bytes.
pub(crate) fn sent_text(
    b: &[u8],
    ck: &CompositeKind,
    field: FieldDecoder<'_, String>,
) -> Result<String, String> {
    let mut rest = b;
    let count = take_i32(&mut rest)?;
    let live: Vec<(&String, &Kind)> = ck
        .fields
        .iter()
        .filter_map(|(n, k)| Some((n, k.as_ref()?)))
        .collect();
    if usize::try_from(count).ok() != Some(live.len()) {
        return Err(format!("{count} fields, the type has {}", live.len()));
    }
    let mut values = Vec::with_capacity(live.len());
    for (name, kind) in live {
        let _type_oid = take_i32(&mut rest)?;
        let len = take_i32(&mut rest)?;
        if len == -1 {
            values.push(Value::Null);
            continue;
        }
        let len = usize::try_from(len).map_err(|_| format!("field {name:?} of length {len}"))?;
        let bytes = rest
            .get(..len)
            .ok_or_else(|| format!("field {name:?} past the end"))?;
        rest = rest.get(len..).unwrap_or_default();
        values.push(field(kind, bytes).map_err(|e| format!("field {name:?}: {e}"))?);
    }
    if !rest.is_empty() {
        return Err(format!("{} bytes after the fields", rest.len()));
    }
    Ok(record_text(&values))
}

/// The big-endian int32 at the front of `rest`, which moves past it.
fn take_i32(rest: &mut &[u8]) -> Result<i32, String> {
    let (w, after) = rest.split_first_chunk::<4>().ok_or("past the end")?;
    *rest = after;
    Ok(i32::from_be_bytes(*w))
}

/// `record_out` over the live fields' values.
fn record_text(values: &[Value]) -> String {
    let mut out = String::from("(");
    let mut text = String::new();
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        text.clear();
        if !v.write_pg_text(&mut text) {
            continue;
        }
        let quote = text.is_empty()
            || text.bytes().any(|c| {
                matches!(c, b'"' | b'\\' | b'(' | b')' | b',')
                    || matches!(c, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
            });
        if quote {
            out.push('"');
        }
        for c in text.chars() {
            if c == '"' || c == '\\' {
                out.push(c);
            }
            out.push(c);
        }
        if quote {
            out.push('"');
        }
    }
    out.push(')');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_out_quoting() {
        assert_eq!(
            record_text(&[
                Value::Int32(1),
                Value::Null,
                Value::Text(String::new()),
                Value::Text("a b".into()),
                Value::Text(r#"q"\"#.into()),
                Value::Text("(x,y)".into()),
                Value::Text("plain".into()),
            ]),
            r#"(1,,"","a b","q""\\","(x,y)",plain)"#
        );
        assert_eq!(record_text(&[]), "()");
    }
}
