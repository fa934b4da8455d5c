//! Standby records (RM_STANDBY_ID, storage/standbydefs.h): only
//! `XLOG_RUNNING_XACTS` is decoded, the snapshot of running transactions
//! that `standby_decode` in decode.c feeds to the snapshot builder and uses
//! to forget transactions older than `oldestRunningXid` (their commit or
//! abort record was never written: a crash, or a subtransaction whose abort
//! is implied).
//!
//! `xl_running_xacts` (identical in 15 to 18), written by
//! `LogCurrentRunningXacts` in standby.c:
//!
//! ```text
//!  xcnt(4) subxcnt(4) subxid_overflow(1) pad(3) nextXid(4) oldestRunningXid(4)
//!  latestCompletedXid(4) | xids[xcnt] subxids[subxcnt]   (the array only when xcnt > 0)
//! ```

use walshadow_types::{Lsn, Xid};

use crate::cursor::{Cursor, Truncated};
use crate::record::RecordView;
use crate::rmgr::RmgrId;

pub const XLOG_STANDBY_LOCK: u8 = 0x00;
pub const XLOG_RUNNING_XACTS: u8 = 0x10;
pub const XLOG_INVALIDATIONS: u8 = 0x20;

/// `MinSizeOfXactRunningXacts`.
const MIN_SIZE_OF_RUNNING_XACTS: usize = 24;

/// The transactions running when the record was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningXacts {
    pub next_xid: Xid,
    /// The oldest xid still running (not `oldestXmin`): every older xid
    /// has finished, whether or not its end is in WAL.
    pub oldest_running_xid: Xid,
    pub latest_completed_xid: Xid,
    /// Running top-level transactions (prepared ones included).
    pub xids: Vec<Xid>,
    /// Their subtransactions, unless the snapshot overflowed.
    pub subxids: Vec<Xid>,
    /// Some subxids did not fit in the snapshot and are missing.
    pub subxid_overflow: bool,
}

/// A Standby record that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Standby record at {lsn} (xl_info {info:#04x}): {kind}")]
pub struct StandbyDecodeError {
    pub lsn: Lsn,
    pub info: u8,
    pub kind: StandbyErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StandbyErrorKind {
    #[error("not a Standby record (rmgr {0})")]
    WrongRmgr(RmgrId),
    #[error("unknown record type")]
    UnknownInfo,
    #[error("xl_running_xacts is truncated")]
    Truncated,
    #[error("xl_running_xacts has {0} bytes past its end")]
    TrailingBytes(usize),
    #[error("xl_running_xacts counts are negative (xcnt {xcnt}, subxcnt {subxcnt})")]
    NegativeCount { xcnt: i32, subxcnt: i32 },
}

impl From<Truncated> for StandbyErrorKind {
    fn from(_: Truncated) -> Self {
        StandbyErrorKind::Truncated
    }
}

/// Decodes `XLOG_RUNNING_XACTS`; the other Standby records give `None`.
pub fn decode_running_xacts(
    rec: &RecordView<'_>,
) -> Result<Option<RunningXacts>, StandbyDecodeError> {
    let info = rec.header.rmgr_info();
    let err = |kind| StandbyDecodeError {
        lsn: rec.lsn,
        info,
        kind,
    };
    if rec.rmgr() != RmgrId::STANDBY {
        return Err(err(StandbyErrorKind::WrongRmgr(rec.rmgr())));
    }
    match info {
        XLOG_RUNNING_XACTS => parse_running_xacts(rec.main_data()).map(Some).map_err(err),
        // AccessExclusiveLocks held, for a hot standby's lock table; decode.c
        // ignores it too.
        XLOG_STANDBY_LOCK => Ok(None),
        // Invalidations of transactions without an xid, for a hot standby;
        // logical decoding takes them from XLOG_XACT_INVALIDATIONS instead.
        XLOG_INVALIDATIONS => Ok(None),
        _ => Err(err(StandbyErrorKind::UnknownInfo)),
    }
}

fn parse_running_xacts(data: &[u8]) -> Result<RunningXacts, StandbyErrorKind> {
    let mut c = Cursor::new(data);
    let xcnt = c.i32()?;
    let subxcnt = c.i32()?;
    let subxid_overflow = c.u8()? != 0;
    c.take(3)?; // padding before nextXid
    let next_xid = c.u32()?;
    let oldest_running_xid = c.u32()?;
    let latest_completed_xid = c.u32()?;
    debug_assert_eq!(c.position(), MIN_SIZE_OF_RUNNING_XACTS);
    let (Ok(n), Ok(m)) = (usize::try_from(xcnt), usize::try_from(subxcnt)) else {
        return Err(StandbyErrorKind::NegativeCount { xcnt, subxcnt });
    };
    // LogCurrentRunningXacts logs the array only when there is a top xid.
    let (xids, subxids) = if n > 0 {
        (c.u32s(n)?, c.u32s(m)?)
    } else {
        (Vec::new(), Vec::new())
    };
    if c.remaining() > 0 {
        return Err(StandbyErrorKind::TrailingBytes(c.remaining()));
    }
    Ok(RunningXacts {
        next_xid,
        oldest_running_xid,
        latest_completed_xid,
        xids,
        subxids,
        subxid_overflow,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_record::{Bytes, record};

    fn running(xcnt: i32, subxcnt: i32, xids: &[u32]) -> crate::WalRecord {
        let mut b = Bytes::default()
            .i32(xcnt)
            .i32(subxcnt)
            .u8(0)
            .raw(&[0; 3])
            .u32(900)
            .u32(850)
            .u32(899);
        for x in xids {
            b = b.u32(*x);
        }
        record(RmgrId::STANDBY.0, XLOG_RUNNING_XACTS, 0, &[], &b.0)
    }

    #[test]
    fn running_xacts() {
        let r = running(2, 1, &[850, 860, 861]);
        assert_eq!(
            decode_running_xacts(&r.view()).unwrap(),
            Some(RunningXacts {
                next_xid: 900,
                oldest_running_xid: 850,
                latest_completed_xid: 899,
                xids: vec![850, 860],
                subxids: vec![861],
                subxid_overflow: false,
            })
        );
        // No top xid: LogCurrentRunningXacts logs no array at all.
        let r = running(0, 3, &[]);
        let rx = decode_running_xacts(&r.view()).unwrap().unwrap();
        assert!(rx.xids.is_empty() && rx.subxids.is_empty());

        let r = running(-1, 0, &[]);
        assert!(matches!(
            decode_running_xacts(&r.view()).unwrap_err().kind,
            StandbyErrorKind::NegativeCount { xcnt: -1, .. }
        ));
        let r = running(1, 0, &[850, 851]);
        assert_eq!(
            decode_running_xacts(&r.view()).unwrap_err().kind,
            StandbyErrorKind::TrailingBytes(4)
        );
        let r = running(1, i32::MAX, &[850]);
        assert_eq!(
            decode_running_xacts(&r.view()).unwrap_err().kind,
            StandbyErrorKind::Truncated
        );
    }

    #[test]
    fn other_standby_records() {
        for info in [XLOG_STANDBY_LOCK, XLOG_INVALIDATIONS] {
            let r = record(RmgrId::STANDBY.0, info, 0, &[], &[1, 0, 0, 0]);
            assert_eq!(decode_running_xacts(&r.view()), Ok(None));
        }
        let r = record(RmgrId::STANDBY.0, 0x30, 0, &[], &[1]);
        let e = decode_running_xacts(&r.view()).unwrap_err();
        assert_eq!(e.kind, StandbyErrorKind::UnknownInfo);
        assert!(
            e.to_string().starts_with("Standby record at 0/1000028"),
            "{e}"
        );
        let r = record(RmgrId::HEAP.0, XLOG_RUNNING_XACTS, 0, &[], &[1]);
        assert!(matches!(
            decode_running_xacts(&r.view()).unwrap_err().kind,
            StandbyErrorKind::WrongRmgr(_)
        ));
    }
}
