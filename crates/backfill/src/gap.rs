//! The WAL leg of an `object_store` load: the archive's segments from the
//! backup's start `B_redo` to the opt-ins' `S`, fetched into the pass's
//! scratch folder and read twice (seed 000, "object_store mode" 2 and 4).
//!
//! ```text
//!  store archive ──fetch──▶ scratch/wal/<segments along the source's branch>
//!      1. outcomes: every commit and abort in [B_redo, S) (subtransactions
//!         included) ─▶ the pg_xact patch, and the transactions that may
//!         have changed a loaded table's catalog rows
//!      2. replay: the loaded relations' changes, assembled into
//!         transactions as the stream does, handed on at their commits
//! ```
//!
//! Segments are named here with the newest timeline of the range, so one
//! reader crosses a timeline switch the way recovery does: each segment is
//! the copy of the timeline the source's branch was on for it.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use walshadow_backup_store::continuity::Branch;
use walshadow_backup_store::{Backup, BackupStore, SourceFacts, StoreError};
use walshadow_changes::assemble::{Assembled, assemble};
use walshadow_changes::change::{Change, ChangeKind};
use walshadow_changes::decode::{CommitEvent, Event, aligned_end, record_events};
use walshadow_heap::visibility::XactPatch;
use walshadow_pg_format::wal_files::segment_file_name;
use walshadow_txn::{Assembler, AssemblerConfig, CommittedTxn};
use walshadow_types::{
    BlockNumber, ForkNumber, Lsn, Oid, PgMajor, RelFileLocator, TimeLineId, Xid,
};
use walshadow_wal_decode::{RmgrId, XactRecord, decode_smgr_create, decode_xact};
use walshadow_wal_reader::replication::{ConnConfig, ReplicationClient, ReplicationError};
use walshadow_wal_reader::segments::{SegmentRecords, SegmentSet};

/// What the source says of itself over replication (`IDENTIFY_SYSTEM`,
/// `SHOW wal_segment_size`, `TIMELINE_HISTORY`): no SQL, no scan.
#[derive(Debug, Clone)]
pub struct SourceAsked {
    pub facts: SourceFacts,
    pub seg_size: u32,
    /// Where its WAL is now.
    pub at: Lsn,
}

/// Why the source could not say.
#[derive(Debug, thiserror::Error)]
#[error("the source, {what}: {message}")]
pub struct AskError {
    pub what: &'static str,
    pub message: String,
    /// It may answer later (connection lost, out of slots, restarting).
    pub transient: bool,
}

/// Asks the source at `cfg` (a replication connection) who it is.
pub async fn ask_source(cfg: &ConnConfig) -> Result<SourceAsked, AskError> {
    let fail = |what: &'static str| {
        move |e: ReplicationError| AskError {
            what,
            transient: e.is_transient(),
            message: e.to_string(),
        }
    };
    let mut c = ReplicationClient::connect(cfg)
        .await
        .map_err(fail("connecting for replication"))?;
    let asked = async {
        let ident = c.identify_system().await.map_err(fail("IDENTIFY_SYSTEM"))?;
        let seg = c
            .show("wal_segment_size")
            .await
            .map_err(fail("SHOW wal_segment_size"))?;
        let history = if ident.timeline > 1 {
            c.timeline_history(ident.timeline)
                .await
                .map_err(fail("TIMELINE_HISTORY"))?
                .entries
        } else {
            Vec::new()
        };
        let version = c
            .server_param("server_version")
            .unwrap_or_default()
            .to_owned();
        Ok::<_, AskError>((ident, seg, history, version))
    }
    .await;
    c.close().await;
    let (ident, seg, history, version) = asked?;
    // initdb allows powers of two from 1 MB to 1 GB.
    let seg_size = walshadow_shadow::bootstrap::source::parse_size(&seg)
        .filter(|n| n.is_power_of_two() && (1 << 20..=1 << 30).contains(n))
        .ok_or_else(|| AskError {
            what: "SHOW wal_segment_size",
            message: format!("{seg:?} is not a WAL segment size (a power of two, 1MB to 1GB)"),
            transient: false,
        })?;
    Ok(SourceAsked {
        facts: SourceFacts {
            system_id: ident.systemid,
            version,
            branch: Branch {
                timeline: ident.timeline,
                history,
            },
        },
        seg_size,
        at: ident.xlogpos,
    })
}

/// `XLOG_PARAMETER_CHANGE` (pg_control.h).
const XLOG_PARAMETER_CHANGE: u8 = 0x60;
/// `XLOG_CHECKPOINT_ONLINE` (pg_control.h).
const XLOG_CHECKPOINT_ONLINE: u8 = 0x10;

/// What the backup's start checkpoint says was assigned before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartCheckpoint {
    /// `nextXid` (its low 32 bits).
    pub next_xid: Xid,
    pub next_multi: u32,
    pub next_multi_offset: u32,
    /// `oldestActiveXid`: the oldest transaction still running when the
    /// checkpoint was made (0 when none was, or below `replica`).
    pub oldest_active_xid: Xid,
}

impl StartCheckpoint {
    /// The body of a checkpoint record (`CheckPoint`, pg_control.h) if it
    /// is the one whose redo point is `redo`. On 15 to 18 `nextXid`
    /// (a `FullTransactionId`, 8-aligned) is at 24 whether or not
    /// `wal_level` (an int, 17 on) follows `fullPageWrites`; `nextOid`,
    /// `nextMulti` and `nextMultiOffset` follow it.
    fn parse(body: &[u8], redo: Lsn) -> Option<StartCheckpoint> {
        let mut c = walshadow_pg_format::cursor::Cursor::new(body);
        if c.u64().ok()? != redo.0 {
            return None;
        }
        c.take(16).ok()?;
        let next_xid = c.u64().ok()? as u32;
        c.take(4).ok()?;
        let next_multi = c.u32().ok()?;
        let next_multi_offset = c.u32().ok()?;
        // oldestXid, oldestXidDB, oldestMulti, oldestMultiDB, padding, time
        // (8-aligned), oldestCommitTsXid, newestCommitTsXid: 36 bytes.
        c.take(36).ok()?;
        Some(StartCheckpoint {
            next_xid,
            next_multi,
            next_multi_offset,
            oldest_active_xid: c.u32().ok()?,
        })
    }
}

/// Why the WAL leg cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum GapError {
    /// The archive has not received this segment yet (the source archives
    /// a segment once it is full, or after `archive_timeout`): wait.
    #[error(
        "the archive does not hold WAL segment {segment} yet (newest archived on the source's \
         branch: {newest}); the load needs the WAL up to {to} and waits for the source to \
         archive it (archive_timeout bounds the wait; pg_switch_wal() ends the segment now)"
    )]
    NotYetArchived {
        segment: String,
        newest: String,
        to: Lsn,
    },
    /// A segment is missing while later ones are there: it never comes.
    #[error(
        "the archive misses WAL segment {segment} between the backup's start {from} and {to}; \
         remedy: take a new backup, or use initial_load = 'copy'"
    )]
    Hole { segment: String, from: Lsn, to: Lsn },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("reading the archived WAL: {0}")]
    Read(#[from] walshadow_wal_reader::segments::SegmentError),
    #[error(
        "the archived WAL at {lsn}: {detail}; remedy: check the archive's copy of that segment \
         (the backup tool's verify), take a new backup, or use initial_load = 'copy'"
    )]
    Decode { lsn: Lsn, detail: String },
    #[error(
        "the archived WAL ended at {at} before {to}: {reason}; remedy: check the archive's \
         copy of that segment, take a new backup, or use initial_load = 'copy'"
    )]
    EndedEarly { at: Lsn, to: Lsn, reason: String },
    #[error("assembling the archived WAL's transactions: {0}")]
    Assemble(#[from] walshadow_txn::TxnError),
}

impl GapError {
    /// Passes by itself: the store did not answer, or the archive is behind.
    pub fn waits(&self) -> bool {
        match self {
            GapError::NotYetArchived { .. } => true,
            GapError::Store(e) => e.is_transient(),
            _ => false,
        }
    }
}

/// The fetched segments of `[from, to)`.
#[derive(Debug)]
pub struct GapWal {
    set: SegmentSet,
    tli: TimeLineId,
    pub from: Lsn,
    pub to: Lsn,
    pub segments: usize,
    pub bytes: u64,
    /// Segments fetched from the store by this call (the rest were here
    /// from an earlier attempt).
    pub fetched: usize,
}

/// Fetches the segments holding `[from, to)` along `branch` into `dir`.
pub async fn fetch(
    store: &BackupStore,
    backup: &Backup,
    branch: &Branch,
    seg_size: u32,
    from: Lsn,
    to: Lsn,
    dir: &Path,
) -> Result<GapWal, GapError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| GapError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let archived: HashMap<String, _> = store
        .archived_segments(backup)
        .await?
        .into_iter()
        .map(|f| (f.name.clone(), f))
        .collect();
    let first = from.segment_number(seg_size);
    // `to` is exclusive: its segment is needed only if it starts before it.
    let last = Lsn(to.0.saturating_sub(1).max(from.0)).segment_number(seg_size);
    let tli_of = |segno| branch.timeline_of_segment(segno, seg_size);
    let read_tli = tli_of(last);
    // Every segment's name against the listing before a byte is fetched:
    // a wait for the last one costs a listing, not the gap again.
    for segno in first..=last {
        let name = segment_file_name(tli_of(segno), segno, seg_size);
        if !archived.contains_key(&name) {
            let later = (segno + 1..=last + 64)
                .any(|s| archived.contains_key(&segment_file_name(tli_of(s), s, seg_size)));
            if later {
                return Err(GapError::Hole {
                    segment: name,
                    from,
                    to,
                });
            }
            let newest = archived
                .keys()
                .filter(|n| {
                    walshadow_pg_format::wal_files::parse_segment_name(n, seg_size)
                        .is_some_and(|(t, s, _)| t == tli_of(s))
                })
                .max()
                .cloned()
                .unwrap_or_else(|| "none".into());
            return Err(GapError::NotYetArchived {
                segment: name,
                newest,
                to,
            });
        }
    }
    let mut bytes = 0u64;
    let mut fetched = 0;
    for segno in first..=last {
        let name = segment_file_name(tli_of(segno), segno, seg_size);
        let Some(file) = archived.get(&name) else {
            return Err(GapError::Hole {
                segment: name,
                from,
                to,
            });
        };
        let path = dir.join(segment_file_name(read_tli, segno, seg_size));
        // Fetched by an earlier attempt of the pass (written whole, then
        // renamed: a file of the full size is complete).
        if std::fs::metadata(&path).is_ok_and(|m| m.len() == u64::from(seg_size)) {
            bytes += u64::from(seg_size);
            continue;
        }
        let content = store.read_segment(file, seg_size).await?;
        bytes += content.len() as u64;
        fetched += 1;
        let part = path.with_extension("part");
        std::fs::write(&part, &content).map_err(io(&part))?;
        std::fs::rename(&part, &path).map_err(io(&path))?;
    }
    let set = SegmentSet::scan(&[dir.to_owned()])?;
    Ok(GapWal {
        set,
        tli: read_tli,
        from,
        to,
        segments: (last - first + 1) as usize,
        bytes,
        fetched,
    })
}

impl GapWal {
    /// The segments of `[from, to)` on timeline `tli` already in `dir` (a
    /// backup's own `pg_wal`, taken with `WAL`): each must be there, whole.
    pub fn in_dir(
        dir: &Path,
        tli: TimeLineId,
        seg_size: u32,
        from: Lsn,
        to: Lsn,
    ) -> Result<GapWal, GapError> {
        let first = from.segment_number(seg_size);
        let last = Lsn(to.0.saturating_sub(1).max(from.0)).segment_number(seg_size);
        for segno in first..=last {
            let name = segment_file_name(tli, segno, seg_size);
            if !std::fs::metadata(dir.join(&name)).is_ok_and(|m| m.len() == u64::from(seg_size)) {
                return Err(GapError::Hole {
                    segment: name,
                    from,
                    to,
                });
            }
        }
        let set = SegmentSet::scan(&[dir.to_owned()])?;
        let segments = (last - first + 1) as usize;
        Ok(GapWal {
            set,
            tli,
            from,
            to,
            segments,
            bytes: segments as u64 * u64::from(seg_size),
            fetched: 0,
        })
    }

    fn records(&self) -> Result<SegmentRecords<'_>, GapError> {
        Ok(self.set.records(self.tli, Some(self.from), Some(self.to))?)
    }

    /// Every transaction outcome in the range (pass 1), with the commit
    /// positions of the `watched` transactions (the writers of the loaded
    /// tables' catalog rows) and the relation files made in it.
    pub fn outcomes(&self, major: PgMajor, watched: &HashSet<Xid>) -> Result<Outcomes, GapError> {
        let mut out = Outcomes::default();
        let mut records = self.records()?;
        let mut last = self.from;
        while let Some(rec) = records.next_ref()? {
            out.records += 1;
            last = rec.end;
            if rec.rmgr() == RmgrId::XLOG
                && rec.header.rmgr_info() == XLOG_CHECKPOINT_ONLINE
                && out.start_checkpoint.is_none()
            {
                out.start_checkpoint = StartCheckpoint::parse(rec.main_data(), self.from);
            }
            if rec.rmgr() == RmgrId::XLOG
                && rec.header.rmgr_info() == XLOG_PARAMETER_CHANGE
                && out.parameter_change.is_none()
            {
                // xl_parameter_change: five ints, then wal_level.
                let wal_level = rec
                    .main_data()
                    .get(20..24)
                    .and_then(|b| b.try_into().ok())
                    .map(i32::from_le_bytes);
                out.parameter_change = Some((rec.lsn, wal_level));
            }
            if let Some(file) = decode_smgr_create(&rec) {
                out.created.entry(file).or_insert(rec.lsn);
                continue;
            }
            if rec.rmgr() != RmgrId::XACT {
                continue;
            }
            let decoded = decode_xact(&rec, major).map_err(|e| GapError::Decode {
                lsn: rec.lsn,
                detail: e.to_string(),
            })?;
            let (top, subxacts, committed) = match decoded {
                Some(XactRecord::Commit(c)) => (c.twophase_xid.unwrap_or(c.xid), c.subxacts, true),
                Some(XactRecord::Abort(a)) => (a.twophase_xid.unwrap_or(a.xid), a.subxacts, false),
                _ => continue,
            };
            let at = aligned_end(rec.end);
            for xid in std::iter::once(top).chain(subxacts) {
                out.patch.set(xid, committed);
                if committed && watched.contains(&xid) {
                    out.watched.insert(xid, at);
                }
            }
        }
        self.reached(&records, last)?;
        Ok(out)
    }

    /// Reading must have reached `to`: a shorter archive is damage.
    fn reached(&self, records: &SegmentRecords<'_>, last: Lsn) -> Result<(), GapError> {
        match records.end_of_wal() {
            Some((at, reason)) if last < self.to => Err(GapError::EndedEarly {
                at: *at,
                to: self.to,
                reason: reason.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// What the WAL in `[from, until)` holds of the walked relations
    /// `files` (`(tablespace, relfilenumber)` of database `db`), in WAL
    /// order (pass 3):
    ///
    /// - every main-fork page it defines whole: a full-page image redo
    ///   applies, or a block redo initialises. The first change of a page
    ///   after the backup's redo point is one of the two (the backup forces
    ///   full-page writes), so a page the window holds nothing of was not
    ///   written while it was copied;
    /// - every tuple inserted into one of `toasts` (TOAST relations), by
    ///   any transaction: a TOAST chunk, whose bytes never change.
    pub fn window<E: From<GapError>>(
        &self,
        major: PgMajor,
        db: Oid,
        files: &HashSet<(Oid, Oid)>,
        toasts: &HashSet<(Oid, Oid)>,
        until: Lsn,
        mut item: impl FnMut(WindowItem) -> Result<(), E>,
    ) -> Result<u64, E> {
        if until <= self.from {
            return Ok(0);
        }
        let mut records = self
            .set
            .records(self.tli, Some(self.from), Some(until))
            .map_err(GapError::from)?;
        let mut last = self.from;
        let mut n = 0;
        let mut events = Vec::new();
        let ours = |b: &walshadow_wal_decode::BlockRef, set: &HashSet<(Oid, Oid)>| {
            let l = b.locator;
            b.fork == ForkNumber::Main && l.db_oid == db && set.contains(&(l.spc_oid, l.rel_number))
        };
        while let Some(rec) = records.next_ref().map_err(GapError::from)? {
            last = rec.end;
            let decode_failed = |detail: String| GapError::Decode {
                lsn: rec.lsn,
                detail,
            };
            for b in rec.blocks.iter().filter(|b| ours(b, files)) {
                let image = if b.apply_image() {
                    Some(
                        rec.restore_page(b)
                            .map_err(|e| decode_failed(e.to_string()))?,
                    )
                } else if b.will_init() {
                    None
                } else {
                    continue;
                };
                n += 1;
                item(WindowItem::Page(DefinedPage {
                    lsn: rec.lsn,
                    locator: b.locator,
                    block: b.blkno,
                    image,
                }))?;
            }
            if rec.rmgr() == RmgrId::HEAP && rec.blocks.iter().any(|b| ours(b, toasts)) {
                events.clear();
                record_events(&rec, Some(db), major, &mut events)
                    .map_err(|e| decode_failed(e.to_string()))?;
                for e in events.drain(..) {
                    let Event::Change { payload, .. } = e else {
                        continue;
                    };
                    let change =
                        Change::decode(&payload).map_err(|e| decode_failed(e.to_string()))?;
                    if change.kind == ChangeKind::Insert
                        && toasts.contains(&(change.rel.spc_oid, change.rel.rel_number))
                    {
                        n += 1;
                        item(WindowItem::ToastInsert {
                            lsn: rec.lsn,
                            change,
                        })?;
                    }
                }
            }
        }
        if let Some((at, reason)) = records.end_of_wal()
            && last < until
        {
            return Err(GapError::EndedEarly {
                at: *at,
                to: until,
                reason: reason.clone(),
            }
            .into());
        }
        Ok(n)
    }

    /// The changes of `files` (`(tablespace, relfilenumber)` of database
    /// `db`) in the range, assembled (pass 2).
    pub fn replay(
        &self,
        major: PgMajor,
        db: Oid,
        files: HashSet<(Oid, Oid)>,
        assembler: AssemblerConfig,
    ) -> Result<Replay<'_>, GapError> {
        Ok(Replay {
            gap: self,
            records: self.records()?,
            assembler: Assembler::open(assembler)?,
            major,
            db,
            files,
            events: Vec::new(),
            prepared: HashSet::new(),
            last: self.from,
            done: false,
            records_read: 0,
        })
    }
}

/// What [`GapWal::window`] hands on.
#[derive(Debug)]
pub enum WindowItem {
    Page(DefinedPage),
    /// A tuple inserted into a TOAST relation (a chunk), by the record at
    /// `lsn`.
    ToastInsert {
        lsn: Lsn,
        change: Change,
    },
}

/// A page the window's WAL defines whole (see [`GapWal::window`]).
#[derive(Debug)]
pub struct DefinedPage {
    /// The record that defines it.
    pub lsn: Lsn,
    pub locator: RelFileLocator,
    pub block: BlockNumber,
    /// The page as of the record (a full-page image holds the record's
    /// change), or `None` when the record initialises it: everything it
    /// holds then was written in the window.
    pub image: Option<Vec<u8>>,
}

/// What pass 1 read in the archive's WAL.
#[derive(Debug, Default)]
pub struct Outcomes {
    /// Every commit and abort, for the gate.
    pub patch: XactPatch,
    /// Watched transactions that committed, with their commit's end.
    pub watched: HashMap<Xid, Lsn>,
    /// Relation files made in the range (`XLOG_SMGR_CREATE` of a main
    /// fork: a new relation, a TRUNCATE or a rewrite), with where first.
    pub created: HashMap<RelFileLocator, Lsn>,
    /// The first `XLOG_PARAMETER_CHANGE` (a restart with other settings)
    /// and the `wal_level` it set: WAL before it may have been written
    /// below `logical`.
    pub parameter_change: Option<(Lsn, Option<i32>)>,
    /// The backup's start checkpoint (its record, redo = the gap's
    /// start): the gate's bounds, as `pg_control_checkpoint()` gives
    /// `base_backup` before its `BASE_BACKUP`.
    pub start_checkpoint: Option<StartCheckpoint>,
    pub records: u64,
}

/// The replay's transactions, one commit at a time.
#[derive(Debug)]
pub struct Replay<'a> {
    gap: &'a GapWal,
    records: SegmentRecords<'a>,
    assembler: Assembler,
    major: PgMajor,
    db: Oid,
    files: HashSet<(Oid, Oid)>,
    events: Vec<Event>,
    /// Transactions prepared in the range, not yet ended.
    prepared: HashSet<Xid>,
    last: Lsn,
    done: bool,
    pub records_read: u64,
}

impl Replay<'_> {
    /// The next commit with changes of the replayed files, `None` at `to`.
    pub fn next_commit(&mut self) -> Result<Option<(CommitEvent, CommittedTxn)>, GapError> {
        loop {
            while let Some(event) = self.events.pop() {
                match &event {
                    Event::Change { payload, .. } => {
                        let ours = Change::peek_rel(payload)
                            .is_some_and(|r| self.files.contains(&(r.spc_oid, r.rel_number)));
                        if !ours {
                            continue;
                        }
                    }
                    Event::Prepare { xid, .. } => {
                        self.prepared.insert(*xid);
                    }
                    // Prepared before the backup's start: its changes are
                    // on the backup's pages, its outcome in the patch.
                    Event::Commit(c) if c.prepared && !self.prepared.remove(&c.xid) => continue,
                    Event::Abort {
                        xid,
                        prepared: true,
                        ..
                    } if !self.prepared.remove(xid) => continue,
                    _ => {}
                }
                if let Assembled::Commit(c, Some(txn)) = assemble(&mut self.assembler, event)?
                    && txn.change_count() > 0
                {
                    return Ok(Some((c, txn)));
                }
            }
            if self.done {
                return Ok(None);
            }
            let Some(rec) = self.records.next_ref()? else {
                self.done = true;
                self.gap.reached(&self.records, self.last)?;
                continue;
            };
            self.records_read += 1;
            self.last = rec.end;
            let mut events = Vec::new();
            record_events(&rec, Some(self.db), self.major, &mut events).map_err(|e| {
                GapError::Decode {
                    lsn: rec.lsn,
                    detail: e.to_string(),
                }
            })?;
            // Popped from the back: keep the record's order.
            events.reverse();
            self.events = events;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backups_own_wal_with_a_segment_missing_or_short_is_a_hole() {
        let dir = std::env::temp_dir().join(format!("walshadow-gap-in-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let seg: u32 = 1 << 20;
        let write = |segno: u64, len: usize| {
            std::fs::write(dir.join(segment_file_name(1, segno, seg)), vec![0u8; len]).unwrap();
        };
        // From inside segment 2 to inside segment 3: both are needed.
        let (from, to) = (Lsn(2 * u64::from(seg) + 40), Lsn(3 * u64::from(seg) + 8));
        write(2, seg as usize);
        let hole = |dir: &Path| {
            GapWal::in_dir(dir, 1, seg, from, to)
                .unwrap_err()
                .to_string()
        };
        let e = hole(&dir);
        assert!(e.contains(&segment_file_name(1, 3, seg)), "{e}");
        write(3, 100);
        let e = hole(&dir);
        assert!(e.contains(&segment_file_name(1, 3, seg)), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
