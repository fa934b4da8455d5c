//! The record filter: for every WAL record, before the shadow replays it,
//! decide whether it touches user data. Records that do become `XLOG_NOOP`
//! of the same length ([`noop`]); everything else reaches the shadow as it
//! was written.
//!
//! ```text
//!  record ──▶ learn (relation map updates, CREATE/DROP DATABASE,
//!        │           pg_class rows from records and page images)
//!        └──▶ verdict: blocks of user files, logical messages,
//!                      heap TRUNCATE ─▶ Noop; all else ─▶ Keep
//! ```
//!
//! Kept: catalogs (including their rewrites, through `relrewrite` and the
//! relation map), sequences, and every record without user blocks
//! (transactions, running-xacts and locks a hot standby needs, storage
//! create/truncate, CLOG, multixact). A block of a file the filter cannot
//! classify stops the stream with an error naming it: guessing either way
//! would corrupt the shadow's catalog or put user data on its disk.

#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)
)]

pub mod checkpoint;
pub mod classes;
pub mod noop;
pub mod pg_class;
pub mod pipeline;

use rustc_hash::FxHashMap as HashMap;
use walshadow_pg_format::cursor::{u16_at as le_u16, u32_at as le_u32};

use walshadow_types::{BlockNumber, ForkNumber, Lsn, Oid, PgMajor, RelFileLocator};
use walshadow_wal_decode::{BlockRef, RecordView, RmgrId};

use classes::{Classes, FIRST_NORMAL_OBJECT_ID, FileClass};
use pg_class::{PgClassRow, RowCache};

/// `RelationRelationId`: pg_class's own OID.
const PG_CLASS_OID: Oid = 1259;
/// `RELMAPPER_FILEMAGIC` (relmapper.c) and the map's size.
const RELMAPPER_FILEMAGIC: u32 = 0x0059_2717;
const MAX_MAPPINGS: usize = 64;

const XLOG_FPI: u8 = 0xB0;
const XLOG_PARAMETER_CHANGE: u8 = 0x60;
const XLOG_TBLSPC_CREATE: u8 = 0x00;
const XLOG_FPI_FOR_HINT: u8 = 0xA0;
const XLOG_HEAP_OPMASK: u8 = 0x70;
const XLOG_HEAP_INSERT: u8 = 0x00;
const XLOG_HEAP_UPDATE: u8 = 0x20;
const XLOG_HEAP_TRUNCATE: u8 = 0x30;
const XLOG_HEAP_HOT_UPDATE: u8 = 0x40;
const XLOG_HEAP_INPLACE: u8 = 0x70;
const XLOG_HEAP2_MULTI_INSERT: u8 = 0x50;
const XLH_UPDATE_PREFIX_FROM_OLD: u8 = 0x20;
const XLH_UPDATE_SUFFIX_FROM_OLD: u8 = 0x40;
const XLOG_DBASE_CREATE_FILE_COPY: u8 = 0x00;
const XLOG_SMGR_CREATE: u8 = 0x10;
const XLOG_XACT_OPMASK: u8 = 0x70;
const XLOG_XACT_HAS_INFO: u8 = 0x80;
const XLOG_XACT_COMMIT: u8 = 0x00;
const XLOG_XACT_ABORT: u8 = 0x20;
const XLOG_XACT_COMMIT_PREPARED: u8 = 0x30;
const XLOG_XACT_ABORT_PREPARED: u8 = 0x40;
const XACT_XINFO_HAS_DBINFO: u32 = 1;
const XACT_XINFO_HAS_SUBXACTS: u32 = 2;
const XACT_XINFO_HAS_RELFILELOCATORS: u32 = 4;
const XLOG_DBASE_DROP: u8 = 0x20;
/// `SizeofHeapTupleHeader`.
const HEAP_TUPLE_HEADER: usize = 23;

/// What happens to a record on its way to the shadow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    /// Rewritten to `XLOG_NOOP`.
    Noop,
    /// Touches a file created in this stream that nothing has classified
    /// yet: `ALTER TABLE SET TABLESPACE` copies a table before updating its
    /// `pg_class` row, and a mapped catalog's new file (`VACUUM FULL
    /// pg_class`, `REINDEX` of a mapped index) is named only by the relation
    /// map update written at commit. The record waits ([`pipeline`]) until
    /// [`RecordFilter::class_of`] knows all its files.
    Undecided,
    /// A page image of a statistics index's metapage (CREATE DATABASE
    /// copying its template, a rebuild): replaced by an image of an empty
    /// btree's metapage, so the index stays valid and empty on the shadow.
    EmptyMetapage,
    /// `CREATE TABLESPACE`: the source's location means nothing on the
    /// shadow's host, so the record is rewritten (same length) to create an
    /// in-place tablespace (`pg_tblspc/<oid>` as a directory; the shadow runs
    /// with `allow_in_place_tablespaces`).
    InPlaceTablespace,
}

/// Why the filter cannot go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error(
        "WAL at {lsn}: block {blkno} of relation file {locator} belongs to no relation walshadow knows; \
         the shadow cannot tell whether it is catalog or user data (rebuild with `walshadow init --force`)"
    )]
    UnknownFile {
        lsn: Lsn,
        locator: RelFileLocator,
        blkno: BlockNumber,
    },
    #[error("WAL at {lsn}: one record touches both catalog and user files ({catalog} and {user})")]
    MixedRecord {
        lsn: Lsn,
        catalog: RelFileLocator,
        user: RelFileLocator,
    },
    #[error(
        "WAL at {lsn}: transaction {xid} committed without saying what relation file {db}/{rel} \
         (created at {created}) belongs to"
    )]
    Unclassified {
        lsn: Lsn,
        xid: u32,
        db: Oid,
        rel: Oid,
        created: Lsn,
    },
    #[error(
        "WAL at {lsn}: pg_class row at block {blkno} offset {offnum} of database {db}: {problem}"
    )]
    PgClassRow {
        lsn: Lsn,
        db: Oid,
        blkno: BlockNumber,
        offnum: u16,
        problem: String,
    },
}

/// Settings a hot standby needs at least as high as its primary's
/// (`xl_parameter_change` in pg_control.h; CheckRequiredParameterValues).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParameterChange {
    pub lsn: Lsn,
    pub max_connections: i32,
    pub max_worker_processes: i32,
    pub max_wal_senders: i32,
    pub max_prepared_transactions: i32,
    pub max_locks_per_transaction: i32,
}

impl ParameterChange {
    /// `(setting name, value)` pairs.
    pub fn settings(&self) -> [(&'static str, i32); 5] {
        [
            ("max_connections", self.max_connections),
            ("max_worker_processes", self.max_worker_processes),
            ("max_wal_senders", self.max_wal_senders),
            ("max_prepared_transactions", self.max_prepared_transactions),
            ("max_locks_per_transaction", self.max_locks_per_transaction),
        ]
    }
}

/// Counts for logs and metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FilterStats {
    pub kept: u64,
    pub nooped: u64,
    pub pg_class_rows_learned: u64,
}

/// The filter's knowledge: file classes, relation maps, pg_class rows.
/// [`checkpoint`] saves and restores all of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordFilter {
    major: PgMajor,
    classes: Classes,
    /// Relation map per database (0: shared): relation OID → file number.
    relmaps: HashMap<Oid, HashMap<Oid, Oid>>,
    /// pg_class rows per (database, file): the live pg_class file and the
    /// transient heap of a `VACUUM FULL pg_class`, which becomes pg_class at
    /// commit through the relation map.
    rows: HashMap<(Oid, Oid), RowCache>,
    /// Files created in the stream and not classified yet: (db, file) →
    /// (creating xid, LSN of the create).
    created: HashMap<(Oid, Oid), (u32, Lsn)>,
    stats: FilterStats,
    /// The last `XLOG_PARAMETER_CHANGE` seen and not yet taken.
    parameter_change: Option<ParameterChange>,
}

impl RecordFilter {
    pub fn new(major: PgMajor) -> Self {
        RecordFilter {
            major,
            classes: Classes::default(),
            relmaps: HashMap::default(),
            rows: HashMap::default(),
            created: HashMap::default(),
            stats: FilterStats::default(),
            parameter_change: None,
        }
    }

    /// Class of file `rel` of database `db` (0: shared), if known. Files
    /// initdb made keep their OID as number until first rewritten, so an
    /// unknown number below `FirstNormalObjectId` is a catalog's.
    pub fn class_of(&self, db: Oid, rel: Oid) -> Option<FileClass> {
        match self.classes.file(db, rel) {
            Some(c) => Some(c),
            None if rel < FIRST_NORMAL_OBJECT_ID => Some(FileClass::Catalog),
            None => None,
        }
    }

    pub fn classes(&self) -> &Classes {
        &self.classes
    }

    pub fn classes_mut(&mut self) -> &mut Classes {
        &mut self.classes
    }

    pub fn stats(&self) -> FilterStats {
        self.stats
    }

    /// Seeds a database's relation map from its `pg_filenode.map` file
    /// (`db` 0 for `global/`).
    pub fn load_relmap_file(&mut self, db: Oid, bytes: &[u8]) -> bool {
        let Some(map) = parse_relmap(bytes) else {
            return false;
        };
        self.set_relmap(db, map);
        true
    }

    fn set_relmap(&mut self, db: Oid, map: HashMap<Oid, Oid>) {
        for (&oid, &file) in &map {
            let class = if classes::STATISTICS_CATALOGS.contains(&oid) {
                FileClass::UserData
            } else {
                FileClass::Catalog
            };
            self.classes.set_file(db, file, class);
            self.classes.set_relation(oid, class);
        }
        self.relmaps.insert(db, map);
    }

    /// Seeds database `db`'s pg_class rows from block `blkno` of its
    /// pg_class file.
    pub fn load_pg_class_page(&mut self, db: Oid, blkno: BlockNumber, page: &[u8]) {
        if let Some(file) = self.pg_class_file(db) {
            self.load_rows_page(db, file, blkno, page);
        }
    }

    fn load_rows_page(&mut self, db: Oid, file: Oid, blkno: BlockNumber, page: &[u8]) {
        let rows = self
            .rows
            .entry((db, file))
            .or_default()
            .load_page(blkno, page);
        self.learn_rows(db, &rows);
    }

    /// The file number of database `db`'s pg_class, once its map is known.
    pub fn pg_class_file(&self, db: Oid) -> Option<Oid> {
        self.relmaps.get(&db)?.get(&PG_CLASS_OID).copied()
    }

    /// Whether `file` of `db` holds pg_class rows: pg_class's file, or the
    /// transient heap of its rewrite.
    fn holds_pg_class(&self, db: Oid, file: Oid) -> bool {
        Some(file) == self.pg_class_file(db) || self.rows.contains_key(&(db, file))
    }

    fn learn_rows(&mut self, db: Oid, rows: &[Vec<u8>]) {
        // Owners before their TOAST: learn twice so `pg_toast_<oid>` finds a
        // row that comes later on the page.
        for _ in 0..2 {
            for data in rows {
                if let Some(row) = PgClassRow::parse(data, self.major) {
                    self.learn_row(db, &row);
                }
            }
        }
        self.stats.pg_class_rows_learned += rows.len() as u64;
    }

    /// Learns what `rec` teaches, then says where it goes.
    pub fn process(&mut self, rec: &RecordView<'_>) -> Result<Verdict, FilterError> {
        self.learn(rec)?;
        let v = self.verdict(rec)?;
        match v {
            Verdict::Keep => self.stats.kept += 1,
            Verdict::Noop | Verdict::EmptyMetapage => self.stats.nooped += 1,
            Verdict::InPlaceTablespace => self.stats.kept += 1,
            Verdict::Undecided => {}
        }
        Ok(v)
    }

    /// The source's last `XLOG_PARAMETER_CHANGE` since the previous call:
    /// the shadow must run with at least these settings to replay past it.
    pub fn take_parameter_change(&mut self) -> Option<ParameterChange> {
        self.parameter_change.take()
    }

    fn learn(&mut self, rec: &RecordView<'_>) -> Result<(), FilterError> {
        let info = rec.header.rmgr_info();
        match rec.rmgr() {
            RmgrId::XLOG if info == XLOG_PARAMETER_CHANGE => {
                let m = rec.main_data();
                let at = |i: usize| le_u32(m, i * 4).map(|v| v as i32);
                if let (Some(c), Some(w), Some(s), Some(p), Some(l)) =
                    (at(0), at(1), at(2), at(3), at(4))
                {
                    self.parameter_change = Some(ParameterChange {
                        lsn: rec.lsn,
                        max_connections: c,
                        max_worker_processes: w,
                        max_wal_senders: s,
                        max_prepared_transactions: p,
                        max_locks_per_transaction: l,
                    });
                }
            }
            RmgrId::SMGR if info == XLOG_SMGR_CREATE => {
                // xl_smgr_create: RelFileLocator (spc, db, rel), fork.
                let main = rec.main_data();
                if let (Some(db), Some(rel)) = (le_u32(main, 4), le_u32(main, 8))
                    && self.class_of(db, rel).is_none()
                {
                    self.created
                        .entry((db, rel))
                        .or_insert((rec.xid(), rec.lsn));
                }
            }
            RmgrId::XACT => self.learn_xact_end(rec, info)?,
            RmgrId::RELMAP => {
                // xl_relmap_update: dbid, tsid, nbytes, then the map file.
                let main = rec.main_data();
                let db = le_u32(main, 0).unwrap_or(0);
                if let Some(map) = main.get(12..).and_then(parse_relmap) {
                    self.set_relmap(db, map);
                }
            }
            RmgrId::DBASE => {
                let main = rec.main_data();
                let db = le_u32(main, 0).unwrap_or(0);
                match info {
                    XLOG_DBASE_CREATE_FILE_COPY => {
                        let src = le_u32(main, 8).unwrap_or(0);
                        self.classes.copy_database(src, db);
                        if let Some(m) = self.relmaps.get(&src).cloned() {
                            self.relmaps.insert(db, m);
                        }
                        let copied: Vec<_> = self
                            .rows
                            .iter()
                            .filter(|((d, _), _)| *d == src)
                            .map(|((_, f), r)| ((db, *f), r.clone()))
                            .collect();
                        self.rows.extend(copied);
                    }
                    XLOG_DBASE_DROP => {
                        self.classes.drop_database(db);
                        self.relmaps.remove(&db);
                        self.rows.retain(|(d, _), _| *d != db);
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        // pg_class pages: images first (they show the page after the change),
        // then the change itself where no image covers it.
        let mut imaged = Vec::new();
        // Only main-fork pages hold rows: a full-page image of pg_class's
        // visibility map (logged with heap changes that clear all-visible)
        // must not replace the rows of the heap block with the same number.
        for b in rec.blocks {
            let (db, file) = (b.locator.db_oid, b.locator.rel_number);
            if b.fork != ForkNumber::Main || !self.holds_pg_class(db, file) || !b.apply_image() {
                continue;
            }
            if let Ok(page) = rec.restore_page(b) {
                self.load_rows_page(db, file, b.blkno, &page);
                imaged.push(b.id);
            }
        }
        let Some(b0) = rec.block(0) else {
            return Ok(());
        };
        let (db, file) = (b0.locator.db_oid, b0.locator.rel_number);
        if b0.fork != ForkNumber::Main || !self.holds_pg_class(db, file) || imaged.contains(&0) {
            return Ok(());
        }
        match rec.rmgr() {
            RmgrId::HEAP => self.learn_heap(rec, b0, info),
            RmgrId::HEAP2 if info & XLOG_HEAP_OPMASK == XLOG_HEAP2_MULTI_INSERT => {
                Err(self.row_error(rec, b0, 0, "multi-insert into pg_class is not handled"))
            }
            _ => Ok(()),
        }
    }

    /// At commit or abort: files the transaction dropped are gone (their
    /// records can only be NOOPs); files it created and never classified
    /// are an error at commit.
    fn learn_xact_end(&mut self, rec: &RecordView<'_>, info: u8) -> Result<(), FilterError> {
        let op = info & XLOG_XACT_OPMASK;
        if ![
            XLOG_XACT_COMMIT,
            XLOG_XACT_ABORT,
            XLOG_XACT_COMMIT_PREPARED,
            XLOG_XACT_ABORT_PREPARED,
        ]
        .contains(&op)
        {
            return Ok(());
        }
        let parsed = parse_xact_end(rec.main_data(), info & XLOG_XACT_HAS_INFO != 0);
        for (db, rel) in &parsed.dropped {
            if self.class_of(*db, *rel).is_none() {
                self.classes.set_file(*db, *rel, FileClass::UserData);
            }
            self.created.remove(&(*db, *rel));
        }
        let mut xids = parsed.subxacts;
        xids.push(rec.xid());
        self.created
            .retain(|_, (xid, _)| !(op == XLOG_XACT_ABORT && xids.contains(xid)));
        if op == XLOG_XACT_COMMIT {
            let left = self.created.iter().find(|(file, (xid, _))| {
                xids.contains(xid) && self.class_of(file.0, file.1).is_none()
            });
            if let Some((&(db, rel), &(xid, created))) = left {
                return Err(FilterError::Unclassified {
                    lsn: rec.lsn,
                    xid,
                    db,
                    rel,
                    created,
                });
            }
            self.created.retain(|_, (xid, _)| !xids.contains(xid));
        }
        Ok(())
    }

    fn row_error(
        &self,
        rec: &RecordView<'_>,
        b: &BlockRef,
        offnum: u16,
        problem: &str,
    ) -> FilterError {
        FilterError::PgClassRow {
            lsn: rec.lsn,
            db: b.locator.db_oid,
            blkno: b.blkno,
            offnum,
            problem: problem.into(),
        }
    }

    /// A heap change to pg_class whose new row is in the record.
    fn learn_heap(
        &mut self,
        rec: &RecordView<'_>,
        b0: &BlockRef,
        info: u8,
    ) -> Result<(), FilterError> {
        let (db, file) = (b0.locator.db_oid, b0.locator.rel_number);
        let main = rec.main_data();
        let data = rec.block_data(b0);
        match info & XLOG_HEAP_OPMASK {
            XLOG_HEAP_INSERT => {
                let offnum = le_u16(main, 0).unwrap_or(0);
                if data.is_empty() {
                    return Ok(()); // no new tuple logged: nothing to learn
                }
                let row = tuple_from_header_and_body(data)
                    .ok_or_else(|| self.row_error(rec, b0, offnum, "truncated inserted row"))?;
                self.store_row(db, file, b0.blkno, offnum, row);
            }
            XLOG_HEAP_UPDATE | XLOG_HEAP_HOT_UPDATE => {
                let old_offnum = le_u16(main, 4).unwrap_or(0);
                let flags = main.get(7).copied().unwrap_or(0);
                let new_offnum = le_u16(main, 12).unwrap_or(0);
                if data.is_empty() {
                    return Ok(());
                }
                let old_blk = rec.block(1).map_or(b0.blkno, |b| b.blkno);
                let mut pos = 0usize;
                let mut prefix = 0usize;
                let mut suffix = 0usize;
                if flags & XLH_UPDATE_PREFIX_FROM_OLD != 0 {
                    prefix = usize::from(le_u16(data, pos).unwrap_or(0));
                    pos += 2;
                }
                if flags & XLH_UPDATE_SUFFIX_FROM_OLD != 0 {
                    suffix = usize::from(le_u16(data, pos).unwrap_or(0));
                    pos += 2;
                }
                let body = data.get(pos..).unwrap_or_default();
                let middle = tuple_from_header_and_body(body)
                    .ok_or_else(|| self.row_error(rec, b0, new_offnum, "truncated updated row"))?;
                let row = if prefix + suffix > 0 {
                    let old = self
                        .rows
                        .get(&(db, file))
                        .and_then(|r| r.get(old_blk, old_offnum))
                        .ok_or_else(|| {
                            self.row_error(
                                rec,
                                b0,
                                old_offnum,
                                "the old row an update shares bytes with is unknown",
                            )
                        })?;
                    let tail = old.len().checked_sub(suffix).and_then(|s| old.get(s..));
                    match (old.get(..prefix), tail) {
                        (Some(p), Some(s)) => [p, middle.as_slice(), s].concat(),
                        _ => {
                            return Err(self.row_error(
                                rec,
                                b0,
                                old_offnum,
                                "prefix or suffix longer than the old row",
                            ));
                        }
                    }
                } else {
                    middle
                };
                self.store_row(db, file, b0.blkno, new_offnum, row);
            }
            XLOG_HEAP_INPLACE => {
                let offnum = le_u16(main, 0).unwrap_or(0);
                if !data.is_empty() {
                    self.store_row(db, file, b0.blkno, offnum, data.to_vec());
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn store_row(&mut self, db: Oid, file: Oid, blk: BlockNumber, off: u16, data: Vec<u8>) {
        if let Some(row) = PgClassRow::parse(&data, self.major) {
            self.learn_row(db, &row);
            self.stats.pg_class_rows_learned += 1;
        }
        self.rows.entry((db, file)).or_default().put(blk, off, data);
    }

    fn learn_row(&mut self, db: Oid, row: &PgClassRow) {
        self.classes.learn_row(db, row);
        if row.relrewrite == Some(PG_CLASS_OID) {
            // The transient heap of VACUUM FULL pg_class: follow its pages.
            let file = if row.relfilenode != 0 {
                row.relfilenode
            } else {
                row.oid
            };
            self.rows.entry((db, file)).or_default();
        }
    }

    fn verdict(&self, rec: &RecordView<'_>) -> Result<Verdict, FilterError> {
        let info = rec.header.rmgr_info();
        match rec.rmgr() {
            // pg_logical_emit_message payloads are the application's.
            RmgrId::LOGICALMSG => return Ok(Verdict::Noop),
            // Logged for logical decoding only; redo does nothing with it.
            RmgrId::HEAP if info & XLOG_HEAP_OPMASK == XLOG_HEAP_TRUNCATE => {
                return Ok(Verdict::Noop);
            }
            RmgrId::XLOG if info != XLOG_FPI && info != XLOG_FPI_FOR_HINT => {
                return Ok(Verdict::Keep);
            }
            RmgrId::TBLSPC if info == XLOG_TBLSPC_CREATE => {
                return Ok(Verdict::InPlaceTablespace);
            }
            _ => {}
        }
        let mut catalog: Option<RelFileLocator> = None;
        let mut user: Option<RelFileLocator> = None;
        let mut undecided = false;
        let mut stats_index_meta = false;
        for b in rec.blocks {
            let l = b.locator;
            let class = match self.class_of(l.db_oid, l.rel_number) {
                Some(c) => c,
                None if self.created.contains_key(&(l.db_oid, l.rel_number)) => {
                    undecided = true;
                    continue;
                }
                None => {
                    return Err(FilterError::UnknownFile {
                        lsn: rec.lsn,
                        locator: l,
                        blkno: b.blkno,
                    });
                }
            };
            if class.reaches_shadow() {
                catalog.get_or_insert(l);
            } else {
                user.get_or_insert(l);
            }
            stats_index_meta = class == FileClass::StatisticsIndex
                && b.blkno == 0
                && b.fork == walshadow_types::ForkNumber::Main
                && b.apply_image();
        }
        let image_record =
            rec.rmgr() == RmgrId::XLOG && (info == XLOG_FPI || info == XLOG_FPI_FOR_HINT);
        if stats_index_meta && image_record && rec.blocks.len() == 1 && !undecided {
            return Ok(Verdict::EmptyMetapage);
        }
        match (catalog, user) {
            (_, None) if undecided => Ok(Verdict::Undecided),
            (None, Some(_)) if undecided => Ok(Verdict::Undecided),
            (Some(catalog), Some(user)) => Err(FilterError::MixedRecord {
                lsn: rec.lsn,
                catalog,
                user,
            }),
            (None, Some(_)) => Ok(Verdict::Noop),
            _ => Ok(Verdict::Keep),
        }
    }
}

/// What a commit or abort record says that the filter needs.
#[derive(Debug, Default)]
struct XactEnd {
    subxacts: Vec<u32>,
    /// Files dropped at this commit (or created by the aborted xact).
    dropped: Vec<(Oid, Oid)>,
}

/// `ParseCommitRecord` / `ParseAbortRecord` (xactdesc.c), the parts up to
/// the dropped files: time, xinfo, dbinfo, subxacts, relfilelocators.
fn parse_xact_end(main: &[u8], has_info: bool) -> XactEnd {
    let mut out = XactEnd::default();
    let mut pos = 8; // xact_time
    let xinfo = if has_info {
        let x = le_u32(main, pos).unwrap_or(0);
        pos += 4;
        x
    } else {
        0
    };
    if xinfo & XACT_XINFO_HAS_DBINFO != 0 {
        pos += 8;
    }
    if xinfo & XACT_XINFO_HAS_SUBXACTS != 0 {
        let n = le_u32(main, pos).unwrap_or(0) as usize;
        pos += 4;
        for i in 0..n.min(main.len() / 4) {
            if let Some(x) = le_u32(main, pos + 4 * i) {
                out.subxacts.push(x);
            }
        }
        pos += 4 * n;
    }
    if xinfo & XACT_XINFO_HAS_RELFILELOCATORS != 0 {
        let n = le_u32(main, pos).unwrap_or(0) as usize;
        pos += 4;
        for i in 0..n.min(main.len() / 12) {
            if let (Some(db), Some(rel)) = (
                le_u32(main, pos + 12 * i + 4),
                le_u32(main, pos + 12 * i + 8),
            ) {
                out.dropped.push((db, rel));
            }
        }
    }
    out
}

/// A row's data from `xl_heap_header` + the tuple bytes from offset 23 on
/// (null bitmap, padding, data): the data after `t_hoff`.
fn tuple_from_header_and_body(bytes: &[u8]) -> Option<Vec<u8>> {
    let t_hoff = usize::from(*bytes.get(4)?);
    let skip = t_hoff.checked_sub(HEAP_TUPLE_HEADER)?;
    Some(bytes.get(5 + skip..)?.to_vec())
}

/// Parses a `RelMapFile` (relmapper.c): magic, count, 64 (oid, file)
/// pairs, CRC.
fn parse_relmap(bytes: &[u8]) -> Option<HashMap<Oid, Oid>> {
    if le_u32(bytes, 0)? != RELMAPPER_FILEMAGIC {
        return None;
    }
    let n = le_u32(bytes, 4)? as usize;
    if n > MAX_MAPPINGS {
        return None;
    }
    (0..n)
        .map(|i| Some((le_u32(bytes, 8 + i * 8)?, le_u32(bytes, 12 + i * 8)?)))
        .collect()
}
