//! Raw WAL in, filtered raw WAL out: the decoder finds the records, the
//! [`RecordFilter`] judges them, NOOPs are written back into the page-framed
//! bytes, and bytes are released up to the end of the last judged record.
//!
//! ```text
//!  chunks at LSN ──▶ buffer (page-framed) ──▶ released chunk [from, to)
//!         └──▶ WalStreamDecoder ──▶ RecordFilter ──▶ NOOP patches ┘
//! ```
//!
//! A record still being reassembled holds back the bytes from its start, so
//! the shadow is never handed part of a record that might yet be rewritten
//! (a record spanning segments is rewritten consistently on both sides).

use std::collections::VecDeque;

use walshadow_types::{Lsn, Oid, PgMajor};
use walshadow_wal_decode::{WalDecodeError, WalStreamDecoder};

use super::noop::{noop_record, write_framed};
use super::{FilterError, RecordFilter, Verdict};

/// Why the pipeline stopped.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Decode(#[from] WalDecodeError),
    #[error(transparent)]
    Filter(#[from] FilterError),
    #[error("WAL at {0}: record cannot be rewritten to XLOG_NOOP")]
    Unrewritable(Lsn),
    #[error(
        "WAL at {lsn}: {bytes} bytes of records wait for their relation files to be classified, \
         more than the {limit}-byte budget"
    )]
    TooMuchUndecided {
        lsn: Lsn,
        bytes: usize,
        limit: usize,
    },
}

/// A record waiting for its files' class.
#[derive(Debug)]
struct Pending {
    lsn: Lsn,
    noop: Vec<u8>,
    files: Vec<(Oid, Oid)>,
}

/// Bytes of undecided records held in memory before giving up.
/// TODO(shadow issue): spill to the segment store instead.
const UNDECIDED_BUDGET: usize = 256 << 20;

/// Filters a contiguous WAL stream for the shadow.
#[derive(Debug)]
pub struct FilterPipeline {
    decoder: WalStreamDecoder,
    filter: RecordFilter,
    seg_size: u32,
    /// Unreleased page-framed bytes; `buf[0]` is at `buf_start`.
    buf: Vec<u8>,
    buf_start: Lsn,
    /// Everything before this is judged and may be released.
    judged_upto: Lsn,
    /// Undecided records, in LSN order; nothing at or after the first is
    /// released.
    pending: VecDeque<Pending>,
    pending_bytes: usize,
    /// Records before this are never replayed by the shadow (they precede
    /// its base backup's redo pointer): they become NOOPs unjudged, so no
    /// user data sits in its pg_wal and the filter learns nothing stale.
    replay_start: Lsn,
}

impl FilterPipeline {
    /// A pipeline whose input starts at `start` (a page boundary; the
    /// segment start the shadow will ask for).
    pub fn new(filter: RecordFilter, start: Lsn, seg_size: u32) -> Result<Self, PipelineError> {
        let decoder = WalStreamDecoder::new(start, start, seg_size)?;
        Ok(FilterPipeline {
            decoder,
            filter,
            seg_size,
            buf: Vec::new(),
            buf_start: start,
            judged_upto: start,
            pending: VecDeque::new(),
            pending_bytes: 0,
            replay_start: start,
        })
    }

    /// Records starting before `lsn` (the shadow's redo pointer) are
    /// rewritten to NOOPs without being judged.
    pub fn with_replay_start(mut self, lsn: Lsn) -> Self {
        self.replay_start = lsn;
        self
    }

    pub fn filter(&self) -> &RecordFilter {
        &self.filter
    }

    pub fn major(&self) -> Option<PgMajor> {
        self.decoder.major()
    }

    /// Takes the next raw chunk (contiguous with the previous one) and
    /// returns the filtered bytes that became final: `(start, bytes)`.
    pub fn push(&mut self, lsn: Lsn, chunk: &[u8]) -> Result<(Lsn, Vec<u8>), PipelineError> {
        self.decoder.feed_at(lsn, chunk)?;
        self.buf.extend_from_slice(chunk);
        loop {
            let rec = match self.decoder.poll_ref() {
                Ok(Some(rec)) => rec,
                Ok(None) => break,
                Err(e) => return Err(e.into()),
            };
            let verdict = if rec.lsn < self.replay_start {
                // XLOG records (checkpoints, switches) carry no user data and
                // keep the stream's shape; everything else goes.
                let xlog_fpi = matches!(rec.header.rmgr_info(), 0xA0 | 0xB0);
                if rec.rmgr() == walshadow_wal_decode::RmgrId::XLOG && !xlog_fpi {
                    Verdict::Keep
                } else {
                    Verdict::Noop
                }
            } else {
                self.filter.process(&rec)?
            };
            let (rec_lsn, end) = (rec.lsn, rec.end);
            match verdict {
                Verdict::Keep => {}
                Verdict::Noop => {
                    let noop =
                        noop_record(rec.raw()).ok_or(PipelineError::Unrewritable(rec_lsn))?;
                    if !write_framed(&mut self.buf, self.buf_start, rec_lsn, &noop, self.seg_size) {
                        return Err(PipelineError::Unrewritable(rec_lsn));
                    }
                }
                Verdict::Undecided => {
                    let noop =
                        noop_record(rec.raw()).ok_or(PipelineError::Unrewritable(rec_lsn))?;
                    let files = rec
                        .blocks
                        .iter()
                        .map(|b| (b.locator.db_oid, b.locator.rel_number))
                        .collect();
                    self.pending_bytes += noop.len();
                    self.pending.push_back(Pending {
                        lsn: rec_lsn,
                        noop,
                        files,
                    });
                    if self.pending_bytes > UNDECIDED_BUDGET {
                        return Err(PipelineError::TooMuchUndecided {
                            lsn: rec_lsn,
                            bytes: self.pending_bytes,
                            limit: UNDECIDED_BUDGET,
                        });
                    }
                }
            }
            self.judged_upto = end;
            if !self.pending.is_empty() {
                self.resolve_pending()?;
            }
        }
        // Bytes after the last judged record (alignment padding, the start
        // of the next record) wait for that record; an undecided record
        // holds back everything from its start.
        let release = self.pending.front().map_or(self.judged_upto, |p| p.lsn);
        let n = release.distance_from(self.buf_start) as usize;
        let out: Vec<u8> = self.buf.drain(..n.min(self.buf.len())).collect();
        let from = self.buf_start;
        self.buf_start = Lsn(from.0 + out.len() as u64);
        Ok((from, out))
    }

    /// Decides the waiting records whose files are now all classified.
    fn resolve_pending(&mut self) -> Result<(), PipelineError> {
        let filter = &self.filter;
        let mut i = 0;
        while i < self.pending.len() {
            let Some(p) = self.pending.get(i) else { break };
            let classes: Option<Vec<_>> = p
                .files
                .iter()
                .map(|(db, rel)| filter.class_of(*db, *rel))
                .collect();
            let Some(classes) = classes else {
                i += 1;
                continue;
            };
            let Some(p) = self.pending.remove(i) else {
                break;
            };
            self.pending_bytes -= p.noop.len();
            if classes.iter().any(|c| !c.reaches_shadow())
                && !write_framed(&mut self.buf, self.buf_start, p.lsn, &p.noop, self.seg_size)
            {
                return Err(PipelineError::Unrewritable(p.lsn));
            }
        }
        Ok(())
    }

    /// Records waiting for their files' class.
    pub fn undecided(&self) -> usize {
        self.pending.len()
    }
}
