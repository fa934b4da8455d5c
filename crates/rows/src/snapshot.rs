//! `pg_snapshot` and `txid_snapshot` (one layout, xid8funcs.c), and the
//! space-separated text of `int2vector` and `oidvector`.
//!
//! A snapshot, after the varlena header: a uint32 `nxip`, then the 8-byte
//! `xmin` and `xmax` (the struct aligns them: `xmin` sits at offset 8 of
//! the datum, 4 of its body), then `nxip` in-progress xids ascending, each
//! a uint64 full transaction id. `pg_snapshot_send` writes an int32 `nxip`
//! and the three as int64s, in network order. `pg_snapshot_out` writes
//! `xmin:xmax:xip1,xip2`.

use crate::value::ArrayValue;

/// The text of a stored snapshot (varlena body).
pub(crate) fn stored_text(b: &[u8]) -> Result<String, String> {
    snapshot_text(b, u32::from_le_bytes, u64::from_le_bytes)
}

/// The text of `pg_snapshot_send`'s form.
pub(crate) fn sent_text(b: &[u8]) -> Result<String, String> {
    snapshot_text(b, u32::from_be_bytes, u64::from_be_bytes)
}

fn snapshot_text(
    b: &[u8],
    count: fn([u8; 4]) -> u32,
    full_xid: fn([u8; 8]) -> u64,
) -> Result<String, String> {
    let n = b
        .first_chunk::<4>()
        .map(|w| count(*w))
        .ok_or("shorter than its header")?;
    let xid = |i: usize| -> Option<u64> {
        let at = 4 + 8 * i;
        b.get(at..at + 8)?.first_chunk::<8>().map(|w| full_xid(*w))
    };
    text(n, b.len(), 4, xid)
}

/// `xmin:xmax:xip,…` from `nxip` and the `i`-th uint64 after the count
/// (xmin, xmax, then the in-progress ones); the body must be exactly
/// that long.
fn text(
    nxip: u32,
    len: usize,
    head: usize,
    xid: impl Fn(usize) -> Option<u64>,
) -> Result<String, String> {
    let n = usize::try_from(nxip).map_err(|_| "nxip past usize")?;
    if n.checked_add(2)
        .and_then(|k| k.checked_mul(8))
        .and_then(|k| k.checked_add(head))
        != Some(len)
    {
        return Err(format!("{nxip} in-progress xids in {len} bytes"));
    }
    let get = |i: usize| xid(i).ok_or_else(|| format!("xid {i} past the end"));
    let mut out = format!("{}:{}:", get(0)?, get(1)?);
    for i in 0..n {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&get(i + 2)?.to_string());
    }
    Ok(out)
}

/// `int2vectorout` / `oidvectorout`: the elements, space-separated.
pub(crate) fn space_separated(a: &ArrayValue) -> String {
    let mut out = String::new();
    for (i, e) in a.elements.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        e.write_pg_text(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;

    #[test]
    fn snapshots() {
        let mut b = 2u32.to_le_bytes().to_vec();
        for x in [10u64, 20, 12, 15] {
            b.extend(x.to_le_bytes());
        }
        assert_eq!(stored_text(&b).unwrap(), "10:20:12,15");
        let mut s = 0u32.to_be_bytes().to_vec();
        for x in [u64::MAX - 1, u64::MAX] {
            s.extend(x.to_be_bytes());
        }
        assert_eq!(
            sent_text(&s).unwrap(),
            format!("{}:{}:", u64::MAX - 1, u64::MAX)
        );
        b.pop();
        assert!(stored_text(&b).is_err());
        assert!(stored_text(&[1, 0, 0, 0]).is_err());
        let mut huge = u32::MAX.to_le_bytes().to_vec();
        huge.extend([0; 16]);
        assert!(stored_text(&huge).is_err());
    }

    #[test]
    fn space_vectors() {
        let a = ArrayValue {
            element_type: 21,
            dims: vec![(3, 0)],
            elements: vec![Value::Int16(1), Value::Int16(-2), Value::Int16(3)],
            delimiter: ',',
        };
        assert_eq!(space_separated(&a), "1 -2 3");
        let empty = ArrayValue {
            element_type: 26,
            dims: vec![],
            elements: vec![],
            delimiter: ',',
        };
        assert_eq!(space_separated(&empty), "");
    }
}
