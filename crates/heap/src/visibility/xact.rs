//! `pg_xact` (the commit log) as a backup copied it: two status bits per
//! xid, four xids to a byte, low bits first (src/backend/access/transam/
//! clog.c: `TransactionIdToPage`, `TransactionIdToByte`,
//! `TransactionIdToBIndex`).

use std::collections::HashMap;

use bytes::Bytes;
use walshadow_types::Xid;

use super::error::GateError;
use super::slru::{BLCKSZ, Runs, Slru, SlruStore};
use super::tuple::{BOOTSTRAP_TRANSACTION_ID, FROZEN_TRANSACTION_ID};

/// `CLOG_BITS_PER_XACT`.
pub const CLOG_BITS_PER_XACT: u32 = 2;
/// `CLOG_XACTS_PER_BYTE`.
pub const CLOG_XACTS_PER_BYTE: u32 = 4;
/// `CLOG_XACTS_PER_PAGE`.
pub const CLOG_XACTS_PER_PAGE: u32 = BLCKSZ as u32 * CLOG_XACTS_PER_BYTE;

/// `XidStatus` (clog.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum XactStatus {
    /// `TRANSACTION_STATUS_IN_PROGRESS` (0): running, or crashed, or not
    /// yet started when the page was written.
    InProgress,
    /// `TRANSACTION_STATUS_COMMITTED` (1).
    Committed,
    /// `TRANSACTION_STATUS_ABORTED` (2).
    Aborted,
    /// `TRANSACTION_STATUS_SUB_COMMITTED` (3): a subtransaction whose
    /// parent was committing as the page was written. Without pg_subtrans
    /// (which a backup leaves out) the parent is unknown, so it answers
    /// nothing yet.
    SubCommitted,
}

impl XactStatus {
    fn from_bits(bits: u8) -> XactStatus {
        match bits & 0b11 {
            0 => XactStatus::InProgress,
            1 => XactStatus::Committed,
            2 => XactStatus::Aborted,
            _ => XactStatus::SubCommitted,
        }
    }
}

/// Transaction outcomes read from WAL: two bits per xid as `pg_xact` lays
/// them out (0: none known), in pages allocated as outcomes arrive, so its
/// memory follows the span of xids the WAL covers (8 KiB per 32,768), not
/// the number of transactions times a hash entry.
#[derive(Debug, Clone, Default)]
pub struct XactPatch {
    pages: HashMap<u32, Box<[u8]>>,
    committed: u64,
    aborted: u64,
}

impl XactPatch {
    /// Records `xid` as committed or aborted (the last word wins).
    pub fn set(&mut self, xid: Xid, committed: bool) {
        let page = self
            .pages
            .entry(xid / CLOG_XACTS_PER_PAGE)
            .or_insert_with(|| vec![0u8; BLCKSZ].into_boxed_slice());
        let index = xid % CLOG_XACTS_PER_PAGE;
        let shift = (index % CLOG_XACTS_PER_BYTE) * CLOG_BITS_PER_XACT;
        let Some(byte) = page.get_mut((index / CLOG_XACTS_PER_BYTE) as usize) else {
            return;
        };
        match (*byte >> shift) & 0b11 {
            1 => self.committed -= 1,
            2 => self.aborted -= 1,
            _ => {}
        }
        let bits: u8 = if committed { 1 } else { 2 };
        *byte = (*byte & !(0b11 << shift)) | (bits << shift);
        if committed {
            self.committed += 1;
        } else {
            self.aborted += 1;
        }
    }

    /// `xid`'s outcome, if the WAL told one.
    pub fn get(&self, xid: Xid) -> Option<XactStatus> {
        let page = self.pages.get(&(xid / CLOG_XACTS_PER_PAGE))?;
        let index = xid % CLOG_XACTS_PER_PAGE;
        let byte = page.get((index / CLOG_XACTS_PER_BYTE) as usize)?;
        match (byte >> ((index % CLOG_XACTS_PER_BYTE) * CLOG_BITS_PER_XACT)) & 0b11 {
            1 => Some(XactStatus::Committed),
            2 => Some(XactStatus::Aborted),
            _ => None,
        }
    }

    pub fn committed(&self) -> u64 {
        self.committed
    }

    pub fn aborted(&self) -> u64 {
        self.aborted
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        (self.pages.len() * BLCKSZ) as u64
    }
}

/// The backup's `pg_xact`, fed segment by segment as the walk copies it.
#[derive(Debug, Clone)]
pub struct XactLog {
    store: SlruStore,
    /// Outcomes read from WAL past the copy ([`XactLog::patch`]).
    patch: XactPatch,
}

impl Default for XactLog {
    fn default() -> Self {
        XactLog::new()
    }
}

impl XactLog {
    pub fn new() -> XactLog {
        XactLog {
            store: SlruStore::new(Slru::Xact),
            patch: XactPatch::default(),
        }
    }

    /// A log of the given `(file name, bytes)` segment files.
    pub fn from_files<N, B>(files: impl IntoIterator<Item = (N, B)>) -> Result<XactLog, GateError>
    where
        N: AsRef<str>,
        B: Into<Bytes>,
    {
        let mut log = XactLog::new();
        for (name, bytes) in files {
            log.add_file(name.as_ref(), bytes)?;
        }
        Ok(log)
    }

    /// Adds segment file `name` (`0000`, as in `pg_xact/0000`). `Ok(false)`
    /// when the name is not a segment's (ignored, as PostgreSQL does).
    pub fn add_file(&mut self, name: &str, bytes: impl Into<Bytes>) -> Result<bool, GateError> {
        self.store.add_file(name, bytes.into())
    }

    /// Adds segment `segno`.
    pub fn add_segment(&mut self, segno: u64, bytes: impl Into<Bytes>) -> Result<(), GateError> {
        self.store.add_segment(segno, bytes.into())
    }

    /// Declares that xids before `next_xid` (on the circle) were assigned
    /// before the backup started: any `nextXid` read from the source
    /// before `BASE_BACKUP` (`pg_control_checkpoint()`, the start
    /// checkpoint). Their pages were zeroed in memory when assigned and
    /// flushed by the backup's checkpoint, so after the walk a missing page
    /// below it is an error ([`GateError::Lost`]) instead of "newer than
    /// the copy". Optional: without it a lost last segment would read as
    /// transactions that started after the copy.
    pub fn set_next_xid(&mut self, next_xid: Xid) {
        self.store.set_bound(next_xid);
    }

    /// Lays `patch` over the copied pages: outcomes WAL after the copy's
    /// start told (commit and abort records, subtransactions included) win.
    /// The `object_store` load reads the archive from the backup's start to
    /// the opt-in, so a transaction in flight across the backup's start that
    /// committed before the opt-in counts as committed: its rows written
    /// before the backup's start are only on the backup's pages (seed 000,
    /// "PgXact patch").
    pub fn patch(&mut self, patch: XactPatch) {
        self.patch = patch;
    }

    /// Outcomes patched in.
    pub fn patched(&self) -> u64 {
        self.patch.committed() + self.patch.aborted()
    }

    /// `xid`'s status as copied, or `None` when the copy holds no page for
    /// it (yet). Special xids answer as `TransactionLogFetch` does:
    /// bootstrap and frozen committed, invalid aborted.
    pub fn status(&self, xid: Xid) -> Option<XactStatus> {
        match xid {
            BOOTSTRAP_TRANSACTION_ID | FROZEN_TRANSACTION_ID => {
                return Some(XactStatus::Committed);
            }
            0 => return Some(XactStatus::Aborted),
            _ => {}
        }
        if let Some(s) = self.patch.get(xid) {
            return Some(s);
        }
        let page = self.store.page(xid / CLOG_XACTS_PER_PAGE)?;
        let index = xid % CLOG_XACTS_PER_PAGE;
        let byte = page.get((index / CLOG_XACTS_PER_BYTE) as usize)?;
        let shift = (index % CLOG_XACTS_PER_BYTE) * CLOG_BITS_PER_XACT;
        Some(XactStatus::from_bits(byte >> shift))
    }

    /// Segment files held.
    pub fn segment_count(&self) -> usize {
        self.store.segment_count()
    }

    /// Bytes held (whole pages).
    pub fn bytes(&self) -> u64 {
        self.store.bytes()
    }

    pub(crate) fn runs(&self) -> Runs {
        self.store.runs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_two_bits_per_xid() {
        // Segment 1 holds xids 1 Mi ..; set a few statuses on its page 1.
        let mut seg = vec![0u8; 2 * BLCKSZ];
        let base = 32 * CLOG_XACTS_PER_PAGE;
        let set = |seg: &mut Vec<u8>, xid: u32, bits: u8| {
            let index = xid - base;
            let byte = (index / 4) as usize;
            seg[byte] |= bits << ((index % 4) * 2);
        };
        let x = base + CLOG_XACTS_PER_PAGE + 5;
        set(&mut seg, x, 1);
        set(&mut seg, x + 1, 2);
        set(&mut seg, x + 2, 3);
        let log = XactLog::from_files([("0001", seg)]).unwrap();
        assert_eq!(log.status(x), Some(XactStatus::Committed));
        assert_eq!(log.status(x + 1), Some(XactStatus::Aborted));
        assert_eq!(log.status(x + 2), Some(XactStatus::SubCommitted));
        assert_eq!(log.status(x + 3), Some(XactStatus::InProgress));
        assert_eq!(log.status(x - 1), Some(XactStatus::InProgress));
        // Page 2 of the segment was not copied; segment 0 neither.
        assert_eq!(log.status(base + 2 * CLOG_XACTS_PER_PAGE), None);
        assert_eq!(log.status(1000), None);
        assert_eq!(log.status(2), Some(XactStatus::Committed));
        assert_eq!(log.status(1), Some(XactStatus::Committed));
        assert_eq!(log.status(0), Some(XactStatus::Aborted));
        assert_eq!(log.segment_count(), 1);
        assert_eq!(log.bytes(), 2 * BLCKSZ as u64);
    }

    #[test]
    fn a_patch_wins_over_the_copy() {
        let base = 32 * CLOG_XACTS_PER_PAGE;
        let mut log = XactLog::from_files([("0001", vec![0u8; BLCKSZ])]).unwrap();
        let mut patch = XactPatch::default();
        // In progress on the copied page, committed in the WAL after it.
        patch.set(base + 3, true);
        // Newer than the copy, aborted in the WAL (first read as committed:
        // the last word wins).
        patch.set(base + 10 * CLOG_XACTS_PER_PAGE, true);
        patch.set(base + 10 * CLOG_XACTS_PER_PAGE, false);
        assert_eq!((patch.committed(), patch.aborted()), (1, 1));
        assert_eq!(patch.get(base + 4), None);
        assert_eq!(patch.bytes(), 2 * BLCKSZ as u64);
        log.patch(patch);
        assert_eq!(log.status(base + 3), Some(XactStatus::Committed));
        assert_eq!(log.status(base + 4), Some(XactStatus::InProgress));
        assert_eq!(
            log.status(base + 10 * CLOG_XACTS_PER_PAGE),
            Some(XactStatus::Aborted)
        );
        assert_eq!(log.patched(), 2);
    }
}
