//! The visibility fields of a heap tuple header, and the infomask bits the
//! gate reads (src/include/access/htup_details.h, same in 15 to 18).

use walshadow_types::Xid;

use super::error::GateError;

/// `t_xmax` is a key-share locker.
pub const HEAP_XMAX_KEYSHR_LOCK: u16 = 0x0010;
/// `t_xmax` is an exclusive locker.
pub const HEAP_XMAX_EXCL_LOCK: u16 = 0x0040;
/// `t_xmax`, if valid, only locks the tuple.
pub const HEAP_XMAX_LOCK_ONLY: u16 = 0x0080;
/// `t_xmax` is a share locker.
pub const HEAP_XMAX_SHR_LOCK: u16 = HEAP_XMAX_EXCL_LOCK | HEAP_XMAX_KEYSHR_LOCK;
pub const HEAP_LOCK_MASK: u16 = HEAP_XMAX_SHR_LOCK | HEAP_XMAX_EXCL_LOCK | HEAP_XMAX_KEYSHR_LOCK;
pub const HEAP_XMIN_COMMITTED: u16 = 0x0100;
pub const HEAP_XMIN_INVALID: u16 = 0x0200;
/// Both bits: the inserter is frozen (committed, and older than any snapshot).
pub const HEAP_XMIN_FROZEN: u16 = HEAP_XMIN_COMMITTED | HEAP_XMIN_INVALID;
pub const HEAP_XMAX_COMMITTED: u16 = 0x0400;
pub const HEAP_XMAX_INVALID: u16 = 0x0800;
pub const HEAP_XMAX_IS_MULTI: u16 = 0x1000;
pub const HEAP_UPDATED: u16 = 0x2000;
/// Moved away by a pre-9.0 `VACUUM FULL` (`t_xvac` did it).
pub const HEAP_MOVED_OFF: u16 = 0x4000;
/// Moved in by a pre-9.0 `VACUUM FULL` (`t_xvac` did it).
pub const HEAP_MOVED_IN: u16 = 0x8000;
pub const HEAP_MOVED: u16 = HEAP_MOVED_OFF | HEAP_MOVED_IN;

/// `InvalidTransactionId`.
pub const INVALID_TRANSACTION_ID: Xid = 0;
/// `BootstrapTransactionId`: committed by definition.
pub const BOOTSTRAP_TRANSACTION_ID: Xid = 1;
/// `FrozenTransactionId`: committed by definition (pre-9.4 freezing wrote it
/// into `t_xmin`).
pub const FROZEN_TRANSACTION_ID: Xid = 2;

/// `HEAP_XMAX_IS_LOCKED_ONLY()`: `t_xmax` locks the tuple and did not
/// update or delete it. Besides `HEAP_XMAX_LOCK_ONLY`, a plain (not multi)
/// xmax with only `HEAP_XMAX_EXCL_LOCK` is a pg_upgrade'd 9.2 locker.
pub fn heap_xmax_is_locked_only(infomask: u16) -> bool {
    infomask & HEAP_XMAX_LOCK_ONLY != 0
        || infomask & (HEAP_XMAX_IS_MULTI | HEAP_LOCK_MASK) == HEAP_XMAX_EXCL_LOCK
}

/// `SizeofHeapTupleHeader`: the fixed part of `HeapTupleHeaderData`.
pub const SIZEOF_HEAP_TUPLE_HEADER: usize = 23;

/// What the gate reads of a heap tuple header (`HeapTupleHeaderData`):
///
/// ```text
///  0 t_xmin  u32   4 t_xmax  u32   8 t_field3 (t_cid / t_xvac) u32
/// 12 t_ctid  6 bytes   18 t_infomask2 u16   20 t_infomask u16   22 t_hoff u8
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TupleHeader {
    /// `t_xmin`, raw (a frozen tuple keeps its xid and sets `HEAP_XMIN_FROZEN`).
    pub xmin: Xid,
    /// `t_xmax`, raw: an xid, or a `MultiXactId` with `HEAP_XMAX_IS_MULTI`.
    pub xmax: Xid,
    /// `t_field3`: `t_xvac` when a `HEAP_MOVED` bit is set, else the command
    /// id (then ignored).
    pub xvac: Xid,
    pub infomask: u16,
    pub infomask2: u16,
}

/// Bytes of [`TupleHeader::encode`].
pub(crate) const ENCODED_LEN: usize = 16;

impl TupleHeader {
    /// The header fields of an on-page tuple (the bytes a line pointer
    /// points at).
    pub fn parse(tuple: &[u8]) -> Result<TupleHeader, GateError> {
        let short = || GateError::ShortTuple { len: tuple.len() };
        // t_xmin, t_xmax, t_field3 at 0; t_ctid at 12; t_infomask2 and
        // t_infomask at 18; t_hoff at 22.
        if tuple.len() < SIZEOF_HEAP_TUPLE_HEADER {
            return Err(short());
        }
        Self::from_parts(tuple.get(..12), tuple.get(18..22)).ok_or_else(short)
    }

    /// The fields from the three xids' 12 bytes and the two masks' 4
    /// (infomask2 first), little-endian as on the page.
    fn from_parts(xids: Option<&[u8]>, masks: Option<&[u8]>) -> Option<TupleHeader> {
        let [x0, x1, x2, x3, m0, m1, m2, m3, f0, f1, f2, f3] =
            *<&[u8; 12]>::try_from(xids?).ok()?;
        let [i20, i21, i0, i1] = *<&[u8; 4]>::try_from(masks?).ok()?;
        Some(TupleHeader {
            xmin: u32::from_le_bytes([x0, x1, x2, x3]),
            xmax: u32::from_le_bytes([m0, m1, m2, m3]),
            xvac: u32::from_le_bytes([f0, f1, f2, f3]),
            infomask2: u16::from_le_bytes([i20, i21]),
            infomask: u16::from_le_bytes([i0, i1]),
        })
    }

    /// The spool's frame form: xmin, xmax, xvac, infomask2, infomask, LE.
    pub(crate) fn encode(&self) -> [u8; ENCODED_LEN] {
        let mut out = [0u8; ENCODED_LEN];
        let parts = self
            .xmin
            .to_le_bytes()
            .into_iter()
            .chain(self.xmax.to_le_bytes())
            .chain(self.xvac.to_le_bytes())
            .chain(self.infomask2.to_le_bytes())
            .chain(self.infomask.to_le_bytes());
        for (slot, b) in out.iter_mut().zip(parts) {
            *slot = b;
        }
        out
    }

    /// Inverse of [`TupleHeader::encode`]; `None` when `bytes` is short.
    pub(crate) fn decode(bytes: &[u8]) -> Option<TupleHeader> {
        Self::from_parts(bytes.get(..12), bytes.get(12..ENCODED_LEN))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_fixed_header() {
        let mut t = vec![0u8; 30];
        t[..4].copy_from_slice(&1234u32.to_le_bytes());
        t[4..8].copy_from_slice(&77u32.to_le_bytes());
        t[8..12].copy_from_slice(&5u32.to_le_bytes());
        t[18..20].copy_from_slice(&0x4002u16.to_le_bytes());
        t[20..22].copy_from_slice(&0x1142u16.to_le_bytes());
        let h = TupleHeader::parse(&t).unwrap();
        assert_eq!(
            h,
            TupleHeader {
                xmin: 1234,
                xmax: 77,
                xvac: 5,
                infomask: 0x1142,
                infomask2: 0x4002
            }
        );
        assert_eq!(TupleHeader::decode(&h.encode()), Some(h));
        assert!(matches!(
            TupleHeader::parse(&t[..22]),
            Err(GateError::ShortTuple { len: 22 })
        ));
        assert_eq!(TupleHeader::decode(&[0; 15]), None);
    }

    #[test]
    fn locked_only_follows_the_macro() {
        assert!(heap_xmax_is_locked_only(HEAP_XMAX_LOCK_ONLY));
        assert!(heap_xmax_is_locked_only(
            HEAP_XMAX_LOCK_ONLY | HEAP_XMAX_IS_MULTI
        ));
        // A 9.2 exclusive locker, upgraded: plain xmax, EXCL_LOCK alone.
        assert!(heap_xmax_is_locked_only(HEAP_XMAX_EXCL_LOCK));
        assert!(!heap_xmax_is_locked_only(
            HEAP_XMAX_EXCL_LOCK | HEAP_XMAX_IS_MULTI
        ));
        assert!(!heap_xmax_is_locked_only(HEAP_XMAX_SHR_LOCK));
        assert!(!heap_xmax_is_locked_only(0));
        assert!(!heap_xmax_is_locked_only(HEAP_XMAX_KEYSHR_LOCK));
    }
}
