//! Deferred deletions kept in the `pending` table, and their byte encoding.
//!
//! ```text
//! Prune: 0x01 | toast_relid u32 | value_id u32 | chunk_seq i32 | before u64      (21 bytes)
//! Sweep: 0x02 | toast_relid u32 | before u64   | has_keep u8  | keep_file u32   (18 bytes)
//! ```
//! All integers little-endian; `keep_file` is zero when `has_keep` is zero.

#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)
)]

use walshadow_types::{Lsn, Oid};

const TAG_PRUNE: u8 = 1;
const TAG_SWEEP: u8 = 2;
const PRUNE_LEN: usize = 21;
const SWEEP_LEN: usize = 18;

/// A deletion that runs once durable progress has passed its due LSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PendingOp {
    /// Remove chunk `(toast_relid, value_id, chunk_seq)` if it was inserted
    /// before `before` (the deleting record's LSN): a chunk re-inserted later
    /// under a reused value id survives.
    Prune {
        toast_relid: Oid,
        value_id: Oid,
        chunk_seq: i32,
        before: Lsn,
    },
    /// Remove every chunk of `toast_relid` inserted before `before`, and every
    /// tid row of it that is not in `keep_file` or was inserted before `before`.
    Sweep {
        toast_relid: Oid,
        before: Lsn,
        keep_file: Option<u32>,
    },
}

impl PendingOp {
    pub(crate) fn toast_relid(&self) -> Oid {
        match *self {
            PendingOp::Prune { toast_relid, .. } | PendingOp::Sweep { toast_relid, .. } => {
                toast_relid
            }
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        match *self {
            PendingOp::Prune {
                toast_relid,
                value_id,
                chunk_seq,
                before,
            } => {
                let mut out = Vec::with_capacity(PRUNE_LEN);
                out.push(TAG_PRUNE);
                out.extend_from_slice(&toast_relid.to_le_bytes());
                out.extend_from_slice(&value_id.to_le_bytes());
                out.extend_from_slice(&chunk_seq.to_le_bytes());
                out.extend_from_slice(&before.0.to_le_bytes());
                out
            }
            PendingOp::Sweep {
                toast_relid,
                before,
                keep_file,
            } => {
                let mut out = Vec::with_capacity(SWEEP_LEN);
                out.push(TAG_SWEEP);
                out.extend_from_slice(&toast_relid.to_le_bytes());
                out.extend_from_slice(&before.0.to_le_bytes());
                out.push(u8::from(keep_file.is_some()));
                out.extend_from_slice(&keep_file.unwrap_or(0).to_le_bytes());
                out
            }
        }
    }

    /// Decodes one entry; `Err` carries a description for the caller's error.
    pub(crate) fn decode(bytes: &[u8]) -> Result<PendingOp, String> {
        let mut cur = Cursor(walshadow_pg_format::cursor::Cursor::new(bytes));
        let op = match cur.u8()? {
            TAG_PRUNE => PendingOp::Prune {
                toast_relid: cur.u32()?,
                value_id: cur.u32()?,
                chunk_seq: cur.i32()?,
                before: Lsn(cur.u64()?),
            },
            TAG_SWEEP => {
                let toast_relid = cur.u32()?;
                let before = Lsn(cur.u64()?);
                let has_keep = cur.u8()?;
                let file = cur.u32()?;
                let keep_file = match has_keep {
                    0 => None,
                    1 => Some(file),
                    other => return Err(format!("pending sweep with keep flag {other}")),
                };
                PendingOp::Sweep {
                    toast_relid,
                    before,
                    keep_file,
                }
            }
            tag => return Err(format!("pending op with unknown tag {tag}")),
        };
        if cur.0.remaining() != 0 {
            return Err(format!(
                "pending op of {} bytes has {} trailing bytes",
                bytes.len(),
                cur.0.remaining()
            ));
        }
        Ok(op)
    }
}

/// The one checked little-endian reader, with this file's error text.
struct Cursor<'a>(walshadow_pg_format::cursor::Cursor<'a>);

impl Cursor<'_> {
    fn cut<T>(r: Result<T, walshadow_pg_format::cursor::Truncated>, n: usize) -> Result<T, String> {
        r.map_err(|_| format!("pending op truncated: wanted {n} more bytes"))
    }

    fn u8(&mut self) -> Result<u8, String> {
        Self::cut(self.0.u8(), 1)
    }

    fn u32(&mut self) -> Result<u32, String> {
        Self::cut(self.0.u32(), 4)
    }

    fn i32(&mut self) -> Result<i32, String> {
        Self::cut(self.0.i32(), 4)
    }

    fn u64(&mut self) -> Result<u64, String> {
        Self::cut(self.0.u64(), 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let ops = [
            PendingOp::Prune {
                toast_relid: 7,
                value_id: u32::MAX,
                chunk_seq: -3,
                before: Lsn(0x1_0000_0002),
            },
            PendingOp::Sweep {
                toast_relid: 9,
                before: Lsn(5),
                keep_file: Some(44),
            },
            PendingOp::Sweep {
                toast_relid: 9,
                before: Lsn(5),
                keep_file: None,
            },
        ];
        for op in ops {
            let bytes = op.encode();
            assert_eq!(PendingOp::decode(&bytes), Ok(op));
            for cut in 0..bytes.len() {
                assert!(
                    PendingOp::decode(&bytes[..cut]).is_err(),
                    "{op:?} cut {cut}"
                );
            }
            let mut long = bytes.clone();
            long.push(0);
            assert!(PendingOp::decode(&long).is_err());
        }
        assert!(PendingOp::decode(&[3, 0, 0]).is_err());
        let mut bad_flag = ops[1].encode();
        bad_flag[13] = 2;
        assert!(PendingOp::decode(&bad_flag).is_err());
    }
}
