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
//!
//! Checkpoints ([`super::checkpoint`]): [`FilterPipeline::checkpoint_lsn`]
//! names a point `L` where nothing waits undecided and every byte before `L`
//! has been released; [`FilterPipeline::resume`] rebuilds the pipeline there
//! from the saved filter, fed from the page holding `L` (the decoder skips
//! the records before `L`, and the bytes before `L` are dropped, not
//! released: they are already in the store).

use std::collections::VecDeque;

use walshadow_types::{Lsn, Oid, PgMajor};
use walshadow_wal_decode::{WalDecodeError, WalStreamDecoder};

use super::noop::{noop_record, write_framed, write_noop_framed};
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
        "WAL at {0}: the page image of a statistics index's metapage cannot be replaced by an \
         empty one of the same record length (a compressed image, or a record with other \
         fragments); use CREATE DATABASE ... STRATEGY FILE_COPY, or wal_compression = off"
    )]
    MetapageDoesNotFit(Lsn),
    #[error(
        "WAL at {lsn}: a record touching relation file {db}/{rel}, created in the stream and not \
         yet classified, holds back {bytes} bytes of WAL, more than the {limit}-byte budget \
         (spilling held-back WAL is not implemented); the transaction that created the file is \
         too large for the shadow: finish or cancel it, then rebuild with `walshadow init --force`"
    )]
    TooMuchUndecided {
        lsn: Lsn,
        db: Oid,
        rel: Oid,
        bytes: usize,
        limit: usize,
    },
}

/// The zeros of an empty btree metapage: after the page header and
/// `BTMetaPageData` (pd_lower 72), before the special space (8176).
const EMPTY_META_HOLE: (usize, usize) = (72, 8176);

/// A record waiting for its files' class.
#[derive(Debug)]
struct Pending {
    lsn: Lsn,
    noop: Vec<u8>,
    files: Vec<(Oid, Oid)>,
}

/// Bytes held back in memory by undecided records (the framed WAL from the
/// first of them on, and their NOOP copies) before giving up.
/// TODO(shadow issue): spill to the segment store instead.
const UNDECIDED_BUDGET: usize = 256 << 20;

/// The input buffer's capacity kept after a long stretch was released.
const BUF_KEEP: usize = 1 << 20;

/// `XLOG_BLCKSZ`, as the offsets here count.
const XLOG_BLCKSZ: u64 = walshadow_pg_format::page::XLOG_BLCKSZ as u64;

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
    /// Bytes before this are dropped unreleased (resuming at a checkpoint:
    /// they were judged and released by an earlier run).
    discard_before: Lsn,
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
            discard_before: start,
        })
    }

    /// A pipeline resuming at checkpoint `at` (a record boundary named by
    /// [`Self::checkpoint_lsn`]) with the filter saved there. Its input
    /// starts at the page holding `at`; the first bytes it releases are at
    /// `at`.
    pub fn resume(filter: RecordFilter, at: Lsn, seg_size: u32) -> Result<Self, PipelineError> {
        let page = Self::resume_page(at);
        let decoder = WalStreamDecoder::new(page, at, seg_size)?;
        Ok(FilterPipeline {
            decoder,
            filter,
            seg_size,
            buf: Vec::new(),
            buf_start: page,
            judged_upto: at,
            pending: VecDeque::new(),
            pending_bytes: 0,
            replay_start: page,
            discard_before: at,
        })
    }

    /// Where the input of a pipeline resuming at `at` starts: its page.
    pub fn resume_page(at: Lsn) -> Lsn {
        Lsn(at.0 - at.0 % XLOG_BLCKSZ)
    }

    /// A point a checkpoint may be taken at: the end of the last judged
    /// record (after an `XLOG_SWITCH`, the next segment's start), when no
    /// record waits undecided and everything before it has been released.
    /// `None` while something is pending.
    pub fn checkpoint_lsn(&self) -> Option<Lsn> {
        (self.pending.is_empty() && self.buf_start == self.judged_upto).then_some(self.judged_upto)
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

    /// See [`RecordFilter::take_parameter_change`].
    pub fn take_parameter_change(&mut self) -> Option<super::ParameterChange> {
        self.filter.take_parameter_change()
    }

    pub fn major(&self) -> Option<PgMajor> {
        self.decoder.major()
    }

    /// Takes the next raw chunk (contiguous with the previous one) and
    /// returns the filtered bytes that became final: `(start, bytes)`.
    pub fn push(&mut self, lsn: Lsn, chunk: &[u8]) -> Result<(Lsn, Vec<u8>), PipelineError> {
        self.decoder.feed_at(lsn, chunk)?;
        self.buf.extend_from_slice(chunk);
        if self.buf_start < self.discard_before {
            let n =
                (self.discard_before.distance_from(self.buf_start) as usize).min(self.buf.len());
            self.buf.drain(..n);
            self.buf_start = Lsn(self.buf_start.0 + n as u64);
        }
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
            let (rec_lsn, end, switch) = (rec.lsn, rec.end, rec.header.is_xlog_switch());
            match verdict {
                Verdict::Keep => {}
                Verdict::InPlaceTablespace => {
                    let rewritten =
                        super::noop::zero_main_data_after(rec.raw(), rec.main_data().len(), 4)
                            .ok_or(PipelineError::Unrewritable(rec_lsn))?;
                    if !write_framed(
                        &mut self.buf,
                        self.buf_start,
                        rec_lsn,
                        &rewritten,
                        self.seg_size,
                    ) {
                        return Err(PipelineError::Unrewritable(rec_lsn));
                    }
                }
                Verdict::EmptyMetapage => {
                    let replaced = (rec.toplevel_xid.is_none() && rec.origin.is_none())
                        .then(|| {
                            let b = rec.blocks.first()?;
                            let original = rec.restore_page(b).ok()?;
                            let page = crate::bootstrap::page::empty_btree_metapage(
                                Some(&original),
                                false,
                            );
                            super::noop::replace_single_image(rec.raw(), &page, EMPTY_META_HOLE)
                        })
                        .flatten()
                        .ok_or(PipelineError::MetapageDoesNotFit(rec_lsn))?;
                    if !write_framed(
                        &mut self.buf,
                        self.buf_start,
                        rec_lsn,
                        &replaced,
                        self.seg_size,
                    ) {
                        return Err(PipelineError::Unrewritable(rec_lsn));
                    }
                }
                Verdict::Noop => {
                    if !write_noop_framed(
                        &mut self.buf,
                        self.buf_start,
                        rec_lsn,
                        rec.raw(),
                        self.seg_size,
                    ) {
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
                }
            }
            // The zeros after an XLOG_SWITCH up to the next segment are
            // final as they arrive (the decoder skips them): releasing them
            // only with the next record held a segment's worth here.
            self.judged_upto = if switch {
                end.max(self.decoder.position())
            } else {
                end
            };
            if !self.pending.is_empty() {
                self.resolve_pending()?;
            }
        }
        // Bytes after the last judged record (alignment padding, the start
        // of the next record) wait for that record; an undecided record
        // holds back everything from its start.
        let release = self.pending.front().map_or(self.judged_upto, |p| p.lsn);
        let n = release.distance_from(self.buf_start) as usize;
        // The released bytes keep the buffer's allocation; only the tail
        // (usually part of one record) is copied into a new one.
        let tail = self.buf.split_off(n.min(self.buf.len()));
        let out = std::mem::replace(&mut self.buf, tail);
        // A long record or an undecided stretch grew the buffer: give the
        // memory back once it has gone.
        if self.buf.capacity() > BUF_KEEP && self.buf.len() < self.buf.capacity() / 4 {
            self.buf.shrink_to(self.buf.len().max(BUF_KEEP));
        }
        let from = self.buf_start;
        self.buf_start = Lsn(from.0 + out.len() as u64);
        // Held back: the framed bytes from the first undecided record on,
        // plus the NOOP copies of the undecided records.
        let held = self.held();
        if let Some(first) = self.pending.front()
            && held > UNDECIDED_BUDGET
        {
            let (db, rel) = first
                .files
                .iter()
                .copied()
                .find(|(db, rel)| self.filter.class_of(*db, *rel).is_none())
                .unwrap_or_default();
            return Err(PipelineError::TooMuchUndecided {
                lsn: first.lsn,
                db,
                rel,
                bytes: held,
                limit: UNDECIDED_BUDGET,
            });
        }
        Ok((from, out))
    }

    /// The stream's timeline ends at `at` (a switch point: the end of its
    /// last record, MAXALIGNed): the bytes held after the last judged
    /// record up to `at`, its alignment padding, are final now, as the new
    /// timeline's first record will not come on this one. Records still
    /// undecided there touch files made by transactions in progress at the
    /// switch, which the new timeline never commits (a promotion ends them;
    /// a prepared transaction's files were classified before its PREPARE):
    /// they go as NOOPs. Returns the released bytes as
    /// [`FilterPipeline::push`] does.
    pub fn end_timeline_at(&mut self, at: Lsn) -> Result<(Lsn, Vec<u8>), PipelineError> {
        while self.pending.front().is_some_and(|p| p.lsn < at) {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            self.pending_bytes -= p.noop.len();
            if !write_framed(&mut self.buf, self.buf_start, p.lsn, &p.noop, self.seg_size) {
                return Err(PipelineError::Unrewritable(p.lsn));
            }
        }
        let buf_end = Lsn(self.buf_start.0 + self.buf.len() as u64);
        let release = at.min(buf_end);
        if !self.pending.is_empty() || release <= self.buf_start {
            return Ok((self.buf_start, Vec::new()));
        }
        self.judged_upto = self.judged_upto.max(release);
        let n = release.distance_from(self.buf_start) as usize;
        let tail = self.buf.split_off(n.min(self.buf.len()));
        let out = std::mem::replace(&mut self.buf, tail);
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

    /// Bytes taken in and not yet released (the framed input from the
    /// first unjudged or undecided record on, and the undecided records'
    /// NOOP copies).
    pub fn held(&self) -> usize {
        self.buf.len() + self.pending_bytes
    }
}
