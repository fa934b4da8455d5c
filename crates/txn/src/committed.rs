//! A committed transaction streamed back in LSN order: a k-way merge over
//! the spill files and in-memory queues of its buffers.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use walshadow_types::{Lsn, Xid};

use crate::assembler::{Change, TxnBuf};
use crate::error::TxnError;
use crate::memory::Accounting;
use crate::spill::{FILE_HEADER_LEN, SpillFile, SpillReader};

/// Read buffer per open spill file.
pub const READ_BUFFER_BYTES: usize = 16 * 1024;
/// Most spill files one merge reads at once; more are first merged in
/// passes of this many into fewer files.
pub const MERGE_FAN_IN: usize = 16;
/// Most a live [`CommittedTxn`] charges beyond the buffered changes it took
/// over at commit: its read buffers.
pub const COMMITTED_READ_OVERHEAD: usize = MERGE_FAN_IN * READ_BUFFER_BYTES;

pub(crate) struct MergeCtx<'a> {
    pub dir: &'a Path,
    pub next_seq: &'a mut u64,
    pub fan_in: usize,
    pub acct: &'a Arc<Accounting>,
}

enum Stream {
    /// Frames of `files[file]`.
    File {
        reader: SpillReader,
        file: usize,
    },
    Mem(VecDeque<Change>),
    Done,
}

/// A committed transaction's changes, yielded in LSN order as
/// `(lsn, payload)`. Memory stays bounded whatever the size: spilled parts
/// are read frame by frame through [`READ_BUFFER_BYTES`] buffers. The
/// in-memory changes it took over (of parts that never spilled: a spilled
/// part's tail goes to its file at commit) and its read buffers stay charged to the
/// assembler's budget until yielded or dropped. Spill files are deleted as
/// each is read to its end, and all of them when it is dropped.
///
/// After an `Err` item the iterator ends; the transaction cannot be
/// produced in this run.
pub struct CommittedTxn {
    xid: Xid,
    /// Spill files owned; `None` once removed.
    files: Vec<Option<SpillFile>>,
    /// File streams first, then memory streams: at equal LSNs a buffer's
    /// spilled changes (older) come before its in-memory ones.
    streams: Vec<Stream>,
    /// `(next LSN, stream)`; ties go to the lower stream index.
    heap: BinaryHeap<Reverse<(Lsn, usize)>>,
    acct: Arc<Accounting>,
    /// Bytes this transaction has charged to `acct`.
    held: usize,
    changes: u64,
    remaining: u64,
    /// A frame header that failed to read while looking ahead: reported on
    /// the next call, after the change already read.
    deferred: Option<TxnError>,
    ended: bool,
}

impl fmt::Debug for CommittedTxn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommittedTxn")
            .field("xid", &self.xid)
            .field("changes", &self.changes)
            .field("remaining", &self.remaining)
            .field("held", &self.held)
            .field("files", &self.files.iter().flatten().count())
            .finish_non_exhaustive()
    }
}

impl CommittedTxn {
    pub(crate) fn assemble(
        xid: Xid,
        parts: Vec<TxnBuf>,
        mut ctx: MergeCtx<'_>,
    ) -> Result<CommittedTxn, TxnError> {
        // Built first so that an error below drops it, which removes the
        // files and releases the memory.
        let mut txn = CommittedTxn {
            xid,
            files: Vec::new(),
            streams: Vec::new(),
            heap: BinaryHeap::new(),
            acct: Arc::clone(ctx.acct),
            held: 0,
            changes: 0,
            remaining: 0,
            deferred: None,
            ended: false,
        };
        let mut mems = Vec::new();
        for p in parts {
            txn.changes += p.changes;
            // Already charged while buffered; the charge moves here.
            txn.held += p.mem_bytes;
            txn.files.extend(p.spill.map(Some));
            if !p.mem.is_empty() {
                mems.push(p.mem);
            }
        }
        txn.remaining = txn.changes;
        let live = txn.merge_down(&mut ctx)?;
        if !live.is_empty() {
            tracing::debug!(
                xid,
                files = live.len(),
                changes = txn.changes,
                "streaming committed transaction back from spill files"
            );
        }
        for file in live {
            let Some(f) = txn.files.get(file).and_then(Option::as_ref) else {
                continue;
            };
            let reader = SpillReader::open(f, READ_BUFFER_BYTES)?;
            txn.acct.charge(READ_BUFFER_BYTES);
            txn.held += READ_BUFFER_BYTES;
            txn.streams.push(Stream::File { reader, file });
        }
        txn.streams.extend(mems.into_iter().map(Stream::Mem));
        for i in 0..txn.streams.len() {
            txn.refill(i)?;
        }
        Ok(txn)
    }

    /// Merges spill files in passes of `fan_in` until at most `fan_in` are
    /// left; returns the indices of those. A pass's buffers (`fan_in` read
    /// buffers and one write buffer) are freed before `commit` returns.
    fn merge_down(&mut self, ctx: &mut MergeCtx<'_>) -> Result<Vec<usize>, TxnError> {
        let fan_in = ctx.fan_in.max(2);
        let mut live: VecDeque<usize> = (0..self.files.len()).collect();
        while live.len() > fan_in {
            let group: Vec<usize> = live.drain(..fan_in).collect();
            let seq = *ctx.next_seq;
            *ctx.next_seq += 1;
            let mut out = SpillFile::create(ctx.dir, self.xid, seq)?;
            ctx.acct.spill_grew(FILE_HEADER_LEN);
            let merged = self.merge_group(&group, &mut out);
            match merged {
                Ok(written) => ctx.acct.spill_grew(written),
                Err(e) => {
                    out.remove();
                    ctx.acct.spill_shrank(out.len);
                    return Err(e);
                }
            }
            for g in group {
                self.remove_file(g);
            }
            live.push_back(self.files.len());
            self.files.push(Some(out));
        }
        Ok(live.into())
    }

    fn merge_group(&self, group: &[usize], out: &mut SpillFile) -> Result<u64, TxnError> {
        let mut readers = Vec::with_capacity(group.len());
        for &g in group {
            if let Some(f) = self.files.get(g).and_then(Option::as_ref) {
                readers.push(SpillReader::open(f, READ_BUFFER_BYTES)?);
            }
        }
        let mut heap = BinaryHeap::with_capacity(readers.len());
        for (k, r) in readers.iter_mut().enumerate() {
            if let Some(lsn) = r.peek_lsn()? {
                heap.push(Reverse((lsn, k)));
            }
        }
        out.append(|w| {
            while let Some(Reverse((_, k))) = heap.pop() {
                let Some(r) = readers.get_mut(k) else {
                    continue;
                };
                let (lsn, payload) = r.take()?;
                w.push(lsn, &payload)?;
                if let Some(next) = r.peek_lsn()? {
                    heap.push(Reverse((next, k)));
                }
            }
            Ok(())
        })
    }

    fn remove_file(&mut self, i: usize) {
        if let Some(f) = self.files.get_mut(i).and_then(Option::take) {
            f.remove();
            self.acct.spill_shrank(f.len);
        }
    }

    /// Puts stream `i`'s next LSN on the heap, or closes it.
    fn refill(&mut self, i: usize) -> Result<(), TxnError> {
        let next = match self.streams.get_mut(i) {
            Some(Stream::File { reader, .. }) => reader.peek_lsn()?,
            Some(Stream::Mem(q)) => q.front().map(|c| c.lsn),
            Some(Stream::Done) | None => None,
        };
        match next {
            Some(lsn) => self.heap.push(Reverse((lsn, i))),
            None => self.close_stream(i),
        }
        Ok(())
    }

    fn close_stream(&mut self, i: usize) {
        let Some(s) = self.streams.get_mut(i) else {
            return;
        };
        if let Stream::File { file, .. } = std::mem::replace(s, Stream::Done) {
            self.acct.release(READ_BUFFER_BYTES);
            self.held -= READ_BUFFER_BYTES;
            self.remove_file(file);
        }
    }

    /// Takes stream `i`'s next change; the heap said it has one.
    fn take(&mut self, i: usize) -> Result<Vec<u8>, TxnError> {
        let payload = match self.streams.get_mut(i) {
            Some(Stream::File { reader, .. }) => reader.take()?.1,
            Some(Stream::Mem(q)) => match q.pop_front() {
                Some(c) => {
                    let cost = c.cost();
                    self.held -= cost;
                    self.acct.release(cost);
                    c.payload.into_vec()
                }
                None => unreachable!("heap entry for an empty queue"),
            },
            Some(Stream::Done) | None => unreachable!("heap entry for a finished stream"),
        };
        if let Err(e) = self.refill(i) {
            self.deferred = Some(e);
        }
        Ok(payload)
    }

    /// Removes every file left and releases every byte still charged.
    fn end(&mut self) {
        self.ended = true;
        self.heap.clear();
        for s in &mut self.streams {
            *s = Stream::Done;
        }
        for i in 0..self.files.len() {
            self.remove_file(i);
        }
        self.acct.release(self.held);
        self.held = 0;
    }

    pub fn xid(&self) -> Xid {
        self.xid
    }

    /// Changes in the transaction.
    pub fn change_count(&self) -> u64 {
        self.changes
    }

    /// Changes not yet yielded.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }
}

impl Iterator for CommittedTxn {
    type Item = Result<(Lsn, Vec<u8>), TxnError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.ended {
            return None;
        }
        if let Some(e) = self.deferred.take() {
            self.end();
            return Some(Err(e));
        }
        let Some(Reverse((lsn, i))) = self.heap.pop() else {
            self.end();
            return None;
        };
        match self.take(i) {
            Ok(payload) => {
                self.remaining = self.remaining.saturating_sub(1);
                Some(Ok((lsn, payload)))
            }
            Err(e) => {
                self.end();
                Some(Err(e))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.remaining).unwrap_or(usize::MAX);
        if self.ended {
            (0, Some(0))
        } else {
            (0, Some(n))
        }
    }
}

impl Drop for CommittedTxn {
    fn drop(&mut self) {
        self.end();
    }
}
