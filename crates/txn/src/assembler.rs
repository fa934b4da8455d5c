//! The assembler: per-xid buffers, their association with top-level
//! transactions, 2PC, and the spill policy. The design is in the crate docs.

use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use walshadow_types::{Lsn, Xid};

use crate::committed::{CommittedTxn, MergeCtx};
use crate::error::TxnError;
use crate::memory::Accounting;
use crate::spill::{self, FILE_HEADER_LEN, SpillFile};
use crate::xid::{xid_is_normal, xid_precedes};

/// Bytes charged per buffered change on top of its payload: the `Change`
/// slot in its queue (24 B, up to twice that while the queue grows) and the
/// allocator's header for the payload's own allocation.
pub const CHANGE_OVERHEAD: usize = 64;

/// Spilling goes on until memory use is this fraction (7/8) of the budget,
/// so that many small transactions filling the budget are not spilled one
/// `add` at a time.
const LOW_WATER_DIVISOR: usize = 8;

/// Where and how much to buffer.
#[derive(Debug, Clone)]
pub struct AssemblerConfig {
    /// Bytes of buffered changes kept in memory (payload + [`CHANGE_OVERHEAD`]
    /// each) before the largest transactions are spilled.
    pub memory_budget_bytes: usize,
    /// Directory for spill files. It belongs to one assembler: `open`
    /// removes every spill file it finds there.
    pub spill_dir: PathBuf,
}

/// One buffered change.
pub(crate) struct Change {
    pub lsn: Lsn,
    pub payload: Box<[u8]>,
}

impl Change {
    pub fn cost(&self) -> usize {
        self.payload.len() + CHANGE_OVERHEAD
    }
}

/// The changes of one xid (top-level or subtransaction): the older part in
/// its spill file, the newer part in memory.
pub(crate) struct TxnBuf {
    pub xid: Xid,
    /// Set by `assign`: the top-level transaction this subxact belongs to.
    pub top: Option<Xid>,
    /// Subxacts assigned to this (top-level) xid. May name subxacts since
    /// dropped; each is checked against its buffer's `top` before use.
    pub subs: Vec<Xid>,
    /// Set once the transaction this buffer belongs to is prepared.
    pub prepared_as: Option<Xid>,
    pub first_lsn: Option<Lsn>,
    pub last_lsn: Lsn,
    pub mem: VecDeque<Change>,
    /// Sum of `Change::cost` over `mem`; charged to the accounting.
    pub mem_bytes: usize,
    /// Changes ever added (in memory and spilled).
    pub changes: u64,
    pub spill: Option<SpillFile>,
}

impl TxnBuf {
    fn new(xid: Xid) -> TxnBuf {
        TxnBuf {
            xid,
            top: None,
            subs: Vec::new(),
            prepared_as: None,
            first_lsn: None,
            last_lsn: Lsn::INVALID,
            mem: VecDeque::new(),
            mem_bytes: 0,
            changes: 0,
            spill: None,
        }
    }

    fn spilled_bytes(&self) -> u64 {
        self.spill.as_ref().map_or(0, |f| f.len)
    }
}

/// Status of one open or prepared top-level transaction (subxacts folded
/// in), for status pages and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenTxn {
    /// Top-level xid (or a subxact's own, while nothing assigned it).
    pub xid: Xid,
    pub prepared: bool,
    /// Subxact buffers folded into this entry.
    pub subxacts: usize,
    /// LSN of its first buffered change, if any.
    pub first_lsn: Option<Lsn>,
    pub changes: u64,
    pub memory_bytes: usize,
    pub spilled_bytes: u64,
}

/// Buffers decoded changes per transaction until commit or abort. See the
/// crate docs for the design and the memory bound.
pub struct Assembler {
    budget: usize,
    spill_dir: PathBuf,
    bufs: HashMap<Xid, TxnBuf>,
    /// Prepared top-level xid → xids of its buffers (kept in `bufs`, so they
    /// stay spillable while the transaction waits).
    prepared: HashMap<Xid, Vec<Xid>>,
    /// `(first_lsn, xid)` of every buffer holding changes: its first entry
    /// is the restart LSN.
    first_lsns: BTreeSet<(Lsn, Xid)>,
    acct: Arc<Accounting>,
    /// Makes spill file names unique within this run.
    next_seq: u64,
    merge_fan_in: usize,
}

impl fmt::Debug for Assembler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Assembler")
            .field("budget", &self.budget)
            .field("spill_dir", &self.spill_dir)
            .field("buffers", &self.bufs.len())
            .field("prepared", &self.prepared.len())
            .field("memory_used", &self.acct.used())
            .field("spilled_bytes", &self.acct.spilled())
            .finish()
    }
}

struct SpillCtx<'a> {
    dir: &'a Path,
    next_seq: &'a mut u64,
    acct: &'a Accounting,
}

/// Moves `buf`'s in-memory changes (and then `extra`, a change that does not
/// fit in memory) to the end of its spill file.
fn spill_buffer(
    buf: &mut TxnBuf,
    ctx: &mut SpillCtx<'_>,
    extra: Option<(Lsn, &[u8])>,
) -> Result<(), TxnError> {
    if buf.mem.is_empty() && extra.is_none() {
        return Ok(());
    }
    let file = match &mut buf.spill {
        Some(f) => f,
        None => {
            let seq = *ctx.next_seq;
            *ctx.next_seq += 1;
            let f = SpillFile::create(ctx.dir, buf.xid, seq)?;
            ctx.acct.spill_grew(FILE_HEADER_LEN);
            buf.spill.insert(f)
        }
    };
    let mem = &buf.mem;
    let written = file.append(|w| {
        for c in mem {
            w.push(c.lsn, &c.payload)?;
        }
        if let Some((lsn, payload)) = extra {
            w.push(lsn, payload)?;
        }
        Ok(())
    })?;
    ctx.acct.spill_grew(written);
    ctx.acct.release(buf.mem_bytes);
    tracing::debug!(
        xid = buf.xid,
        changes = buf.mem.len() + usize::from(extra.is_some()),
        bytes = written,
        path = %file.path.display(),
        "spilled transaction buffer"
    );
    buf.mem = VecDeque::new();
    buf.mem_bytes = 0;
    Ok(())
}

/// Creates the spill directory (0700) if needed and makes sure it is
/// walshadow's alone: spill files hold rows of open transactions. A
/// directory another user owns (planted in `/tmp`, say) is refused; one of
/// ours that others can enter is closed to them.
fn private_spill_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = fs::metadata(dir)?;
    let me = fs::metadata("/proc/self")?.uid();
    if meta.uid() != me {
        return Err(io::Error::other(format!(
            "it belongs to uid {}, not to walshadow's uid {me}, who could then read or replace \
             spill files; give walshadow a directory of its own",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
        tracing::info!(dir = %dir.display(), "spill directory closed to other users (0700)");
    }
    Ok(())
}

impl Assembler {
    /// Creates the spill directory if needed and removes the spill files a
    /// crashed earlier run left there (logging each one).
    pub fn open(config: AssemblerConfig) -> Result<Assembler, TxnError> {
        let dir = config.spill_dir;
        let dir_err = |source| TxnError::SpillDir {
            path: dir.clone(),
            source,
        };
        private_spill_dir(&dir).map_err(dir_err)?;
        let (mut files, mut bytes) = (0u64, 0u64);
        for entry in fs::read_dir(&dir).map_err(dir_err)? {
            let entry = entry.map_err(dir_err)?;
            let name = entry.file_name();
            if !name.to_str().is_some_and(spill::is_spill_file_name) {
                continue;
            }
            let meta = entry.metadata().map_err(dir_err)?;
            if !meta.is_file() {
                continue;
            }
            let path = entry.path();
            fs::remove_file(&path).map_err(|source| TxnError::SpillDir {
                path: path.clone(),
                source,
            })?;
            tracing::info!(
                path = %path.display(),
                bytes = meta.len(),
                "removed spill file left by an earlier run"
            );
            files += 1;
            bytes += meta.len();
        }
        if files > 0 {
            tracing::info!(
                dir = %dir.display(),
                files,
                bytes,
                "spill directory cleaned of leftovers"
            );
        }
        Ok(Assembler {
            budget: config.memory_budget_bytes,
            spill_dir: dir,
            bufs: HashMap::default(),
            prepared: HashMap::default(),
            first_lsns: BTreeSet::new(),
            acct: Arc::new(Accounting::default()),
            next_seq: 0,
            merge_fan_in: crate::committed::MERGE_FAN_IN,
        })
    }

    pub fn spill_dir(&self) -> &Path {
        &self.spill_dir
    }

    pub fn memory_budget(&self) -> usize {
        self.budget
    }

    /// Appends a change to `xid`'s buffer (`xid` may be a subxact's).
    /// Changes of one xid must come in WAL order; several may share an LSN.
    pub fn add(&mut self, xid: Xid, lsn: Lsn, payload: &[u8]) -> Result<(), TxnError> {
        if !xid_is_normal(xid) {
            return Err(TxnError::InvalidXid { xid });
        }
        if u32::try_from(payload.len()).is_err() {
            return Err(TxnError::PayloadTooLarge {
                xid,
                lsn,
                len: payload.len(),
            });
        }
        if self.is_prepared(xid) {
            return Err(TxnError::Prepared {
                xid,
                what: "adding a change",
            });
        }
        if let Some(b) = self.bufs.get(&xid)
            && lsn < b.last_lsn
        {
            return Err(TxnError::LsnOutOfOrder {
                xid,
                lsn,
                last: b.last_lsn,
            });
        }
        let cost = payload.len() + CHANGE_OVERHEAD;
        if self.acct.used() + cost > self.budget {
            self.make_room(cost)?;
        }
        let fits = self.acct.used() + cost <= self.budget;
        let buf = self.bufs.entry(xid).or_insert_with(|| TxnBuf::new(xid));
        if fits {
            buf.mem.push_back(Change {
                lsn,
                payload: payload.into(),
            });
            buf.mem_bytes += cost;
            self.acct.charge(cost);
        } else {
            // Everything spillable is on disk already, this buffer's
            // in-memory part included, so the change goes after its file.
            let mut ctx = SpillCtx {
                dir: &self.spill_dir,
                next_seq: &mut self.next_seq,
                acct: &self.acct,
            };
            spill_buffer(buf, &mut ctx, Some((lsn, payload)))?;
        }
        buf.changes += 1;
        buf.last_lsn = lsn;
        if buf.first_lsn.is_none() {
            buf.first_lsn = Some(lsn);
            self.first_lsns.insert((lsn, xid));
        }
        Ok(())
    }

    /// Spills the largest in-memory buffers until `need` more bytes fit
    /// under the low-water mark, or nothing is left in memory.
    fn make_room(&mut self, need: usize) -> Result<(), TxnError> {
        let target = (self.budget - self.budget / LOW_WATER_DIVISOR).saturating_sub(need);
        let mut candidates: Vec<(usize, Xid)> = self
            .bufs
            .values()
            .filter(|b| b.mem_bytes > 0)
            .map(|b| (b.mem_bytes, b.xid))
            .collect();
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        let mut ctx = SpillCtx {
            dir: &self.spill_dir,
            next_seq: &mut self.next_seq,
            acct: &self.acct,
        };
        for (_, xid) in candidates {
            if ctx.acct.used() <= target {
                break;
            }
            if let Some(buf) = self.bufs.get_mut(&xid) {
                spill_buffer(buf, &mut ctx, None)?;
            }
        }
        Ok(())
    }

    /// Associates subxact `sub` with top-level `top` (from a record's
    /// top-level xid or XLOG_XACT_ASSIGNMENT), so that aborting or
    /// forgetting `top` takes `sub` with it and a commit of `top` that does
    /// not list `sub` discards it.
    pub fn assign(&mut self, top: Xid, sub: Xid) {
        if top == sub || !xid_is_normal(top) || !xid_is_normal(sub) {
            return;
        }
        // PostgreSQL assigns subxacts to the top level only; a top that is
        // itself assigned passes the subxact on.
        let top = self.bufs.get(&top).and_then(|b| b.top).unwrap_or(top);
        if top == sub {
            return;
        }
        if self.is_prepared(top) || self.is_prepared(sub) {
            tracing::warn!(
                top,
                sub,
                "subxact assignment to a prepared transaction ignored"
            );
            return;
        }
        let s = self.bufs.entry(sub).or_insert_with(|| TxnBuf::new(sub));
        if s.top == Some(top) {
            return;
        }
        s.top = Some(top);
        self.bufs
            .entry(top)
            .or_insert_with(|| TxnBuf::new(top))
            .subs
            .push(sub);
    }

    /// A prepared transaction's xid, or one of its buffers'.
    fn is_prepared(&self, xid: Xid) -> bool {
        self.prepared.contains_key(&xid)
            || self.bufs.get(&xid).is_some_and(|b| b.prepared_as.is_some())
    }

    /// Removes a buffer from the maps; its memory stays charged and its file
    /// in place until the caller discards it or hands it on.
    fn remove_buf(&mut self, xid: Xid) -> Option<TxnBuf> {
        let b = self.bufs.remove(&xid)?;
        if let Some(lsn) = b.first_lsn {
            self.first_lsns.remove(&(lsn, xid));
        }
        Some(b)
    }

    fn discard(&self, b: TxnBuf) {
        self.acct.release(b.mem_bytes);
        if let Some(f) = b.spill {
            f.remove();
            self.acct.spill_shrank(f.len);
        }
    }

    /// A committed transaction that spilled streams back from its files
    /// alone: the in-memory tail of each part that spilled goes after its
    /// file first (at most the budget written once more). Its apply then
    /// holds read buffers and batches, not the budget besides: that apply
    /// is where the batches fill, so holding both was the process's peak.
    /// A tail that cannot be written stays in memory (a failed append
    /// leaves file and buffer as they were); reading the file back reports
    /// what is wrong with it.
    fn spill_tails(&mut self, parts: &mut [TxnBuf]) {
        let mut ctx = SpillCtx {
            dir: &self.spill_dir,
            next_seq: &mut self.next_seq,
            acct: &self.acct,
        };
        for p in parts.iter_mut().filter(|p| p.spill.is_some()) {
            if let Err(e) = spill_buffer(p, &mut ctx, None) {
                tracing::debug!(xid = p.xid, error = %e, "committed tail kept in memory");
            }
        }
    }

    /// Takes `xid`'s buffer and the listed subxacts' out of the maps, and
    /// discards subxacts assigned to `xid` but not listed (rolled back).
    /// Buffers of prepared transactions are left alone.
    fn take_parts(&mut self, xid: Xid, subxacts: &[Xid]) -> Vec<TxnBuf> {
        let mut parts = Vec::with_capacity(1 + subxacts.len());
        let mut assigned = Vec::new();
        if self.bufs.get(&xid).is_some_and(|b| b.prepared_as.is_none())
            && let Some(mut b) = self.remove_buf(xid)
        {
            assigned = std::mem::take(&mut b.subs);
            parts.push(b);
        }
        for &s in subxacts {
            match self.bufs.get(&s) {
                Some(b) if b.prepared_as.is_some() => {
                    tracing::warn!(
                        xid,
                        subxact = s,
                        "listed subxact belongs to a prepared transaction; left alone"
                    );
                }
                Some(_) => parts.extend(self.remove_buf(s)),
                None => {}
            }
        }
        // Listed subxacts are out of the map already: what is left with
        // `top == xid` was rolled back without its own abort record.
        for s in assigned {
            if self
                .bufs
                .get(&s)
                .is_some_and(|b| b.top == Some(xid) && b.prepared_as.is_none())
                && let Some(b) = self.remove_buf(s)
            {
                self.discard(b);
            }
        }
        parts
    }

    fn merge_ctx(&mut self) -> MergeCtx<'_> {
        MergeCtx {
            dir: &self.spill_dir,
            next_seq: &mut self.next_seq,
            fan_in: self.merge_fan_in,
            acct: &self.acct,
        }
    }

    /// The committed transaction: `xid`'s changes and those of the listed
    /// subxacts, in LSN order. Subxacts assigned to `xid` but not listed
    /// were rolled back and are discarded. An xid with no buffered changes
    /// gives an empty transaction.
    pub fn commit(&mut self, xid: Xid, subxacts: &[Xid]) -> Result<CommittedTxn, TxnError> {
        if self.prepared.contains_key(&xid) {
            return Err(TxnError::Prepared {
                xid,
                what: "a plain COMMIT (use commit_prepared)",
            });
        }
        let mut parts = self.take_parts(xid, subxacts);
        self.spill_tails(&mut parts);
        CommittedTxn::assemble(xid, parts, self.merge_ctx())
    }

    /// Drops `xid`'s buffer and the listed subxacts' (and subxacts assigned
    /// to `xid`). Also the subxact rollback: an abort record whose xid is
    /// the subxact. An abort of a prepared xid is ROLLBACK PREPARED.
    pub fn abort(&mut self, xid: Xid, subxacts: &[Xid]) {
        if self.prepared.contains_key(&xid) {
            self.abort_prepared(xid);
            return;
        }
        if self.bufs.get(&xid).is_some_and(|b| b.prepared_as.is_some()) {
            tracing::warn!(xid, "abort of a subxact of a prepared transaction ignored");
            return;
        }
        for b in self.take_parts(xid, subxacts) {
            self.discard(b);
        }
    }

    /// PREPARE TRANSACTION: `xid` with the listed subxacts waits, still
    /// counted in `restart_lsn` and still spillable, for `commit_prepared`
    /// or `abort_prepared`.
    pub fn prepare(&mut self, xid: Xid, subxacts: &[Xid]) {
        if !xid_is_normal(xid) {
            tracing::warn!(xid, "PREPARE of a special xid ignored");
            return;
        }
        if self.is_prepared(xid) {
            tracing::warn!(xid, "PREPARE of an already prepared xid ignored");
            return;
        }
        let parts = self.take_parts(xid, subxacts);
        let mut xids = Vec::with_capacity(parts.len());
        for mut b in parts {
            b.prepared_as = Some(xid);
            if let Some(lsn) = b.first_lsn {
                self.first_lsns.insert((lsn, b.xid));
            }
            xids.push(b.xid);
            self.bufs.insert(b.xid, b);
        }
        self.prepared.insert(xid, xids);
    }

    /// COMMIT PREPARED.
    pub fn commit_prepared(&mut self, xid: Xid) -> Result<CommittedTxn, TxnError> {
        let xids = self
            .prepared
            .remove(&xid)
            .ok_or(TxnError::NotPrepared { xid })?;
        let mut parts: Vec<_> = xids.iter().filter_map(|&x| self.remove_buf(x)).collect();
        self.spill_tails(&mut parts);
        CommittedTxn::assemble(xid, parts, self.merge_ctx())
    }

    /// ROLLBACK PREPARED. An xid not prepared here is ignored.
    pub fn abort_prepared(&mut self, xid: Xid) {
        let Some(xids) = self.prepared.remove(&xid) else {
            tracing::debug!(xid, "ROLLBACK PREPARED of a transaction not buffered here");
            return;
        };
        for x in xids {
            if let Some(b) = self.remove_buf(x) {
                self.discard(b);
            }
        }
    }

    /// From XLOG_RUNNING_XACTS: drops the transactions (not prepared ones)
    /// whose top-level xid precedes `oldest_running_xid` and that never
    /// committed or aborted, because the source crashed under them. Their
    /// commit or abort record would have come before this record (it is
    /// written before the transaction leaves the proc array).
    pub fn forget_older_than(&mut self, oldest_running_xid: Xid) {
        if !xid_is_normal(oldest_running_xid) {
            tracing::debug!(
                oldest_running_xid,
                "running-xacts record without a normal oldest xid ignored"
            );
            return;
        }
        let doomed: Vec<Xid> = self
            .bufs
            .values()
            .filter(|b| {
                b.prepared_as.is_none() && xid_precedes(b.top.unwrap_or(b.xid), oldest_running_xid)
            })
            .map(|b| b.xid)
            .collect();
        for xid in doomed {
            if let Some(b) = self.remove_buf(xid) {
                tracing::warn!(
                    xid,
                    top = b.top,
                    first_lsn = ?b.first_lsn,
                    changes = b.changes,
                    oldest_running_xid,
                    "dropping a transaction that ended without a commit or abort record (source crash)"
                );
                self.discard(b);
            }
        }
    }

    /// Where decoding must restart after a crash to rebuild every open and
    /// prepared transaction: the first LSN of the oldest one. `None` when no
    /// buffer holds changes.
    pub fn restart_lsn(&self) -> Option<Lsn> {
        self.first_lsns.first().map(|&(lsn, _)| lsn)
    }

    /// Open and prepared transactions (subxacts folded into their top-level
    /// transaction), oldest first.
    pub fn open_transactions(&self) -> Vec<OpenTxn> {
        let empty = |xid| OpenTxn {
            xid,
            prepared: false,
            subxacts: 0,
            first_lsn: None,
            changes: 0,
            memory_bytes: 0,
            spilled_bytes: 0,
        };
        let mut by_top: HashMap<Xid, OpenTxn> = HashMap::default();
        for b in self.bufs.values() {
            let top = b.prepared_as.or(b.top).unwrap_or(b.xid);
            let e = by_top.entry(top).or_insert_with(|| empty(top));
            if b.xid != top {
                e.subxacts += 1;
            }
            e.prepared |= b.prepared_as.is_some();
            e.first_lsn = match (e.first_lsn, b.first_lsn) {
                (Some(a), Some(c)) => Some(a.min(c)),
                (a, c) => a.or(c),
            };
            e.changes += b.changes;
            e.memory_bytes += b.mem_bytes;
            e.spilled_bytes += b.spilled_bytes();
        }
        for &xid in self.prepared.keys() {
            by_top.entry(xid).or_insert_with(|| empty(xid)).prepared = true;
        }
        let mut out: Vec<OpenTxn> = by_top.into_values().collect();
        // Transactions without changes last.
        out.sort_by_key(|t| (t.first_lsn.is_none(), t.first_lsn, t.xid));
        out
    }

    /// Bytes charged against the budget now: buffered changes plus what
    /// live [`CommittedTxn`]s hold (unread in-memory changes, read buffers).
    pub fn memory_used(&self) -> usize {
        self.acct.used()
    }

    /// High-water mark of [`Assembler::memory_used`] since open or the last
    /// [`Assembler::reset_memory_peak`].
    pub fn memory_peak(&self) -> usize {
        self.acct.peak()
    }

    pub fn reset_memory_peak(&self) {
        self.acct.reset_peak();
    }

    /// Bytes in spill files now, those of live [`CommittedTxn`]s included.
    pub fn spilled_bytes(&self) -> u64 {
        self.acct.spilled()
    }

    #[cfg(test)]
    pub(crate) fn set_merge_fan_in(&mut self, fan_in: usize) {
        self.merge_fan_in = fan_in.max(2);
    }
}

impl Drop for Assembler {
    /// Spill files are scratch: a clean shutdown leaves none behind.
    fn drop(&mut self) {
        for b in std::mem::take(&mut self.bufs).into_values() {
            self.discard(b);
        }
    }
}
