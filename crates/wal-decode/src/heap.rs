//! Heap and Heap2 records as logical change data: what `heap_decode` and
//! `heap2_decode` in decode.c (replication/logical) read out of them, taken
//! from a [`RecordView`] without copying tuple bytes.
//!
//! ```text
//!  RecordView (Heap/Heap2) ── decode_heap ──▶ Some(HeapChange)  insert, multi-insert, update,
//!                                       │                        delete, truncate, confirm
//!                                       └──▶ None                a record with no row change
//!                                                                (lock, prune, vacuum, ...)
//! ```
//!
//! Layouts follow access/heapam_xlog.h, which 15 to 18 share for every
//! record read here (`log_heap_update`, `heap_insert`, `heap_multi_insert`,
//! `heap_delete` in heapam.c write them). What differs between majors is
//! only in records this module skips: Heap2 opcodes 0x10..0x30 are
//! PRUNE/VACUUM/FREEZE_PAGE up to 16 and PRUNE_ON_ACCESS/PRUNE_VACUUM_SCAN/
//! PRUNE_VACUUM_CLEANUP from 17 (their line pointers are read by
//! [`crate::prune`]), and `xl_heap_inplace` carries invalidation messages
//! from 18. [`heap_record_name`] names them per major.
//!
//! Where the tuples are:
//!
//! - INSERT: `xl_heap_header` + tuple in block 0's data. At
//!   `wal_level=logical` a user table's insert sets
//!   `XLH_INSERT_CONTAINS_NEW_TUPLE` and keeps the data even when block 0
//!   has a full-page image (`REGBUF_KEEP_DATA`); otherwise an image drops it.
//! - MULTI_INSERT: block 0's data holds per tuple an `xl_multi_insert_tuple`
//!   (SHORTALIGNed from the start of the block data), then its bytes.
//! - UPDATE/HOT_UPDATE: the new tuple in block 0's data, after one or two
//!   `uint16` prefix/suffix lengths when `XLH_UPDATE_PREFIX_FROM_OLD` /
//!   `_SUFFIX_FROM_OLD` are set (never at logical level for tables that are
//!   logically logged: `log_heap_update` turns compression off for them).
//!   The old key or old tuple follows `xl_heap_update` in the main data.
//! - DELETE: the old key or tuple follows `xl_heap_delete` in the main data.
//!
//! A tuple is handed out as [`TupleBytes`]: the `xl_heap_header` fields and
//! the bytes from `offsetof(HeapTupleHeaderData, t_bits)` on, exactly what
//! `DecodeXLogTuple` copies. Prefix/suffix-compressed new tuples are reported
//! with their lengths and not rebuilt (that needs the old page).

use walshadow_types::{BlockNumber, Lsn, Oid, PgMajor, RelFileLocator};

use crate::block::BlockRef;
use crate::cursor::{Cursor, Truncated};
use crate::record::RecordView;
use crate::rmgr::RmgrId;

// Heap opcodes (xl_info & XLOG_HEAP_OPMASK).
pub const XLOG_HEAP_INSERT: u8 = 0x00;
pub const XLOG_HEAP_DELETE: u8 = 0x10;
pub const XLOG_HEAP_UPDATE: u8 = 0x20;
pub const XLOG_HEAP_TRUNCATE: u8 = 0x30;
pub const XLOG_HEAP_HOT_UPDATE: u8 = 0x40;
pub const XLOG_HEAP_CONFIRM: u8 = 0x50;
pub const XLOG_HEAP_LOCK: u8 = 0x60;
pub const XLOG_HEAP_INPLACE: u8 = 0x70;
pub const XLOG_HEAP_OPMASK: u8 = 0x70;
/// The record's first tuple starts a freshly initialised page.
pub const XLOG_HEAP_INIT_PAGE: u8 = 0x80;

// Heap2 opcodes.
pub const XLOG_HEAP2_REWRITE: u8 = 0x00;
/// PRUNE up to 16, PRUNE_ON_ACCESS from 17.
pub const XLOG_HEAP2_PRUNE: u8 = 0x10;
/// VACUUM up to 16, PRUNE_VACUUM_SCAN from 17.
pub const XLOG_HEAP2_VACUUM: u8 = 0x20;
/// FREEZE_PAGE up to 16, PRUNE_VACUUM_CLEANUP from 17.
pub const XLOG_HEAP2_FREEZE_PAGE: u8 = 0x30;
pub const XLOG_HEAP2_VISIBLE: u8 = 0x40;
pub const XLOG_HEAP2_MULTI_INSERT: u8 = 0x50;
pub const XLOG_HEAP2_LOCK_UPDATED: u8 = 0x60;
pub const XLOG_HEAP2_NEW_CID: u8 = 0x70;

// xl_heap_insert / xl_heap_multi_insert flags.
pub const XLH_INSERT_ALL_VISIBLE_CLEARED: u8 = 1 << 0;
pub const XLH_INSERT_LAST_IN_MULTI: u8 = 1 << 1;
pub const XLH_INSERT_IS_SPECULATIVE: u8 = 1 << 2;
pub const XLH_INSERT_CONTAINS_NEW_TUPLE: u8 = 1 << 3;
pub const XLH_INSERT_ON_TOAST_RELATION: u8 = 1 << 4;
pub const XLH_INSERT_ALL_FROZEN_SET: u8 = 1 << 5;

// xl_heap_update flags.
pub const XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED: u8 = 1 << 0;
pub const XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED: u8 = 1 << 1;
pub const XLH_UPDATE_CONTAINS_OLD_TUPLE: u8 = 1 << 2;
pub const XLH_UPDATE_CONTAINS_OLD_KEY: u8 = 1 << 3;
pub const XLH_UPDATE_CONTAINS_NEW_TUPLE: u8 = 1 << 4;
pub const XLH_UPDATE_PREFIX_FROM_OLD: u8 = 1 << 5;
pub const XLH_UPDATE_SUFFIX_FROM_OLD: u8 = 1 << 6;

// xl_heap_delete flags.
pub const XLH_DELETE_ALL_VISIBLE_CLEARED: u8 = 1 << 0;
pub const XLH_DELETE_CONTAINS_OLD_TUPLE: u8 = 1 << 1;
pub const XLH_DELETE_CONTAINS_OLD_KEY: u8 = 1 << 2;
pub const XLH_DELETE_IS_SUPER: u8 = 1 << 3;
pub const XLH_DELETE_IS_PARTITION_MOVE: u8 = 1 << 4;

// xl_heap_truncate flags.
pub const XLH_TRUNCATE_CASCADE: u8 = 1 << 0;
pub const XLH_TRUNCATE_RESTART_SEQS: u8 = 1 << 1;

/// `SizeofHeapTupleHeader`: `offsetof(HeapTupleHeaderData, t_bits)`, the
/// part of a tuple header WAL leaves out.
pub const SIZEOF_HEAP_TUPLE_HEADER: u8 = 23;
/// `HEAP_NATTS_MASK` of `t_infomask2`.
pub const HEAP_NATTS_MASK: u16 = 0x07FF;
/// `HEAP_HASNULL` of `t_infomask`.
pub const HEAP_HASNULL: u16 = 0x0001;

const SIZE_OF_HEAP_HEADER: usize = 5; // SizeOfHeapHeader
const SIZE_OF_HEAP_INSERT: usize = 3; // SizeOfHeapInsert
const SIZE_OF_HEAP_DELETE: usize = 8; // SizeOfHeapDelete
const SIZE_OF_HEAP_UPDATE: usize = 14; // SizeOfHeapUpdate
const SIZE_OF_HEAP_TRUNCATE: usize = 12; // SizeOfHeapTruncate
const SIZE_OF_HEAP_MULTI_INSERT: usize = 4; // SizeOfHeapMultiInsert
const SIZE_OF_HEAP_CONFIRM: usize = 2; // SizeOfHeapConfirm

/// A heap tuple as WAL carries it: the `xl_heap_header` fields and the
/// bytes from `offsetof(HeapTupleHeaderData, t_bits)` on (null bitmap,
/// padding, attribute data). The 23 header bytes before them are not in WAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TupleBytes<'a> {
    pub infomask2: u16,
    pub infomask: u16,
    pub hoff: u8,
    pub data: &'a [u8],
}

impl<'a> TupleBytes<'a> {
    /// Number of attributes (`HeapTupleHeaderGetNatts`).
    pub fn natts(&self) -> u16 {
        self.infomask2 & HEAP_NATTS_MASK
    }

    pub fn has_nulls(&self) -> bool {
        self.infomask & HEAP_HASNULL != 0
    }

    /// The null bitmap (`t_bits`, one bit per attribute, set = not null),
    /// when the tuple has one.
    pub fn null_bitmap(&self) -> Option<&'a [u8]> {
        if !self.has_nulls() {
            return None;
        }
        self.data.get(..usize::from(self.natts()).div_ceil(8))
    }

    /// The attribute data, from `t_hoff` on.
    pub fn user_data(&self) -> &'a [u8] {
        let skip = usize::from(self.hoff.saturating_sub(SIZEOF_HEAP_TUPLE_HEADER));
        self.data.get(skip..).unwrap_or_default()
    }
}

/// The old row an update or delete logged: its replica identity key
/// (`XLH_*_CONTAINS_OLD_KEY`, the key columns of a tuple formed from the
/// identity index) or the whole row (`_CONTAINS_OLD_TUPLE`, `REPLICA
/// IDENTITY FULL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OldTuple<'a> {
    Key(TupleBytes<'a>),
    Full(TupleBytes<'a>),
}

impl<'a> OldTuple<'a> {
    pub fn tuple(&self) -> &TupleBytes<'a> {
        match self {
            OldTuple::Key(t) | OldTuple::Full(t) => t,
        }
    }
}

pub use walshadow_types::Tid;

/// One row-level change, as logical decoding queues it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeapChange<'a> {
    /// XLOG_HEAP_INSERT. `tuple` is `None` when the record carries no tuple
    /// data (a full-page image without `XLH_INSERT_CONTAINS_NEW_TUPLE`);
    /// decode.c also ignores an insert without that flag (catalog rows,
    /// `HEAP_INSERT_NO_LOGICAL`).
    Insert {
        rel: RelFileLocator,
        tid: Tid,
        tuple: Option<TupleBytes<'a>>,
        /// `XLH_INSERT_IS_SPECULATIVE`: an `INSERT ... ON CONFLICT` tuple,
        /// confirmed by a later [`HeapChange::Confirm`] or killed by a
        /// super-delete.
        speculative: bool,
        /// `XLH_INSERT_*` flags as logged.
        flags: u8,
    },
    /// XLOG_HEAP2_MULTI_INSERT (COPY, catalog multi-inserts). `tuples` is
    /// empty when the record carries no tuple data; `offsets` always holds
    /// one line pointer per tuple of the record.
    MultiInsert {
        rel: RelFileLocator,
        block: BlockNumber,
        offsets: Vec<u16>,
        tuples: Vec<TupleBytes<'a>>,
        flags: u8,
    },
    /// XLOG_HEAP_UPDATE and XLOG_HEAP_HOT_UPDATE.
    Update {
        rel: RelFileLocator,
        hot: bool,
        old_tid: Tid,
        new_tid: Tid,
        old: Option<OldTuple<'a>>,
        /// Block 0's tuple; with `prefix_len`/`suffix_len` non-zero its
        /// attribute data lacks that many bytes taken from the old tuple.
        new: Option<TupleBytes<'a>>,
        prefix_len: u16,
        suffix_len: u16,
        flags: u8,
    },
    /// XLOG_HEAP_DELETE.
    Delete {
        rel: RelFileLocator,
        tid: Tid,
        old: Option<OldTuple<'a>>,
        /// `XLH_DELETE_IS_SUPER`: a speculative insertion was aborted.
        super_delete: bool,
        flags: u8,
    },
    /// XLOG_HEAP_TRUNCATE: relation OIDs (not relfilenumbers) of every
    /// logically logged relation truncated.
    Truncate {
        db: Oid,
        relids: Vec<Oid>,
        cascade: bool,
        restart_seqs: bool,
    },
    /// XLOG_HEAP_CONFIRM: a speculative insertion was confirmed.
    Confirm { rel: RelFileLocator, tid: Tid },
}

/// A Heap/Heap2 record that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{rmgr} record at {lsn} (xl_info {info:#04x}): {kind}")]
pub struct HeapDecodeError {
    pub lsn: Lsn,
    pub rmgr: RmgrId,
    pub info: u8,
    pub kind: HeapErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeapErrorKind {
    #[error("not a Heap or Heap2 record")]
    WrongRmgr,
    #[error("unknown record type (XLOG_HEAP_INIT_PAGE on an opcode that never sets it)")]
    UnknownInfo,
    #[error("{0} is truncated")]
    Truncated(&'static str),
    #[error("{what} has {extra} bytes past its end")]
    TrailingBytes { what: &'static str, extra: usize },
    #[error("no block reference {0}")]
    MissingBlock(u8),
    #[error("flags say the new tuple is logged, but block 0 carries no data")]
    MissingTupleData,
    #[error("{what}: t_hoff {hoff} does not fit a tuple of {len} bytes after the fixed header")]
    BadTupleHeader {
        what: &'static str,
        hoff: u8,
        len: usize,
    },
    #[error("multi-insert announces {announced} tuples but its block data holds {found}")]
    TupleCount { announced: u16, found: usize },
}

/// The record kind as pg_waldump names it (`heap_identify`,
/// `heap2_identify`), or `None` for an info value PostgreSQL never writes.
pub fn heap_record_name(rmgr: RmgrId, info: u8, major: PgMajor) -> Option<&'static str> {
    let init = info & XLOG_HEAP_INIT_PAGE != 0;
    let op = info & XLOG_HEAP_OPMASK;
    let name = match (rmgr, op, init) {
        (RmgrId::HEAP, XLOG_HEAP_INSERT, false) => "INSERT",
        (RmgrId::HEAP, XLOG_HEAP_INSERT, true) => "INSERT+INIT",
        (RmgrId::HEAP, XLOG_HEAP_DELETE, false) => "DELETE",
        (RmgrId::HEAP, XLOG_HEAP_UPDATE, false) => "UPDATE",
        (RmgrId::HEAP, XLOG_HEAP_UPDATE, true) => "UPDATE+INIT",
        (RmgrId::HEAP, XLOG_HEAP_TRUNCATE, false) => "TRUNCATE",
        (RmgrId::HEAP, XLOG_HEAP_HOT_UPDATE, false) => "HOT_UPDATE",
        (RmgrId::HEAP, XLOG_HEAP_HOT_UPDATE, true) => "HOT_UPDATE+INIT",
        (RmgrId::HEAP, XLOG_HEAP_CONFIRM, false) => "HEAP_CONFIRM",
        (RmgrId::HEAP, XLOG_HEAP_LOCK, false) => "LOCK",
        (RmgrId::HEAP, XLOG_HEAP_INPLACE, false) => "INPLACE",
        (RmgrId::HEAP2, XLOG_HEAP2_REWRITE, false) => "REWRITE",
        (RmgrId::HEAP2, XLOG_HEAP2_PRUNE, false) if major < PgMajor::V17 => "PRUNE",
        (RmgrId::HEAP2, XLOG_HEAP2_PRUNE, false) => "PRUNE_ON_ACCESS",
        (RmgrId::HEAP2, XLOG_HEAP2_VACUUM, false) if major < PgMajor::V17 => "VACUUM",
        (RmgrId::HEAP2, XLOG_HEAP2_VACUUM, false) => "PRUNE_VACUUM_SCAN",
        (RmgrId::HEAP2, XLOG_HEAP2_FREEZE_PAGE, false) if major < PgMajor::V17 => "FREEZE_PAGE",
        (RmgrId::HEAP2, XLOG_HEAP2_FREEZE_PAGE, false) => "PRUNE_VACUUM_CLEANUP",
        (RmgrId::HEAP2, XLOG_HEAP2_VISIBLE, false) => "VISIBLE",
        (RmgrId::HEAP2, XLOG_HEAP2_MULTI_INSERT, false) => "MULTI_INSERT",
        (RmgrId::HEAP2, XLOG_HEAP2_MULTI_INSERT, true) => "MULTI_INSERT+INIT",
        (RmgrId::HEAP2, XLOG_HEAP2_LOCK_UPDATED, false) => "LOCK_UPDATED",
        (RmgrId::HEAP2, XLOG_HEAP2_NEW_CID, false) => "NEW_CID",
        _ => return None,
    };
    Some(name)
}

/// Decodes a Heap or Heap2 record into the row change it carries, or
/// `None` for a record that carries none (each listed below with why).
pub fn decode_heap<'a>(rec: &RecordView<'a>) -> Result<Option<HeapChange<'a>>, HeapDecodeError> {
    let info = rec.header.rmgr_info();
    let err = |kind| HeapDecodeError {
        lsn: rec.lsn,
        rmgr: rec.rmgr(),
        info,
        kind,
    };
    let op = info & XLOG_HEAP_OPMASK;
    let init = info & XLOG_HEAP_INIT_PAGE != 0;
    let out = match (rec.rmgr(), op) {
        (RmgrId::HEAP, XLOG_HEAP_INSERT) => decode_insert(rec).map(Some),
        (RmgrId::HEAP, XLOG_HEAP_UPDATE | XLOG_HEAP_HOT_UPDATE) => {
            decode_update(rec, op == XLOG_HEAP_HOT_UPDATE).map(Some)
        }
        (RmgrId::HEAP2, XLOG_HEAP2_MULTI_INSERT) => decode_multi_insert(rec, init).map(Some),
        _ if init => Err(HeapErrorKind::UnknownInfo),
        (RmgrId::HEAP, XLOG_HEAP_DELETE) => decode_delete(rec).map(Some),
        (RmgrId::HEAP, XLOG_HEAP_TRUNCATE) => decode_truncate(rec).map(Some),
        (RmgrId::HEAP, XLOG_HEAP_CONFIRM) => decode_confirm(rec).map(Some),
        // Row locks (SELECT ... FOR UPDATE, the lock half of an update that
        // waited) change xmax and infomask bits only; no row changes.
        (RmgrId::HEAP, XLOG_HEAP_LOCK) | (RmgrId::HEAP2, XLOG_HEAP2_LOCK_UPDATED) => Ok(None),
        // In-place updates touch catalog rows only (relfrozenxid, relhasindex,
        // datfrozenxid...): no user row changes, and the catalog is the shadow's.
        (RmgrId::HEAP, XLOG_HEAP_INPLACE) => Ok(None),
        // Logical rewrite mappings of a rewritten catalog: serve logical
        // decoding's historic snapshots, which walshadow does not build.
        (RmgrId::HEAP2, XLOG_HEAP2_REWRITE) => Ok(None),
        // Pruning, vacuuming and freezing (all three opcodes, both namings)
        // remove or freeze tuples already dead or committed: physical upkeep.
        // decode_prune (prune.rs) reads which line pointers they free.
        (RmgrId::HEAP2, XLOG_HEAP2_PRUNE | XLOG_HEAP2_VACUUM | XLOG_HEAP2_FREEZE_PAGE) => Ok(None),
        // Visibility map bits: physical only.
        (RmgrId::HEAP2, XLOG_HEAP2_VISIBLE) => Ok(None),
        // cmin/cmax of catalog tuples for historic catalog snapshots; the
        // catalog as of an LSN comes from the shadow instead.
        (RmgrId::HEAP2, XLOG_HEAP2_NEW_CID) => Ok(None),
        (RmgrId::HEAP | RmgrId::HEAP2, _) => Err(HeapErrorKind::UnknownInfo),
        _ => Err(HeapErrorKind::WrongRmgr),
    };
    out.map_err(err)
}

pub(crate) fn block0<'a>(rec: &RecordView<'a>) -> Result<&'a BlockRef, HeapErrorKind> {
    rec.block(0).ok_or(HeapErrorKind::MissingBlock(0))
}

pub(crate) fn trunc(what: &'static str) -> impl Fn(Truncated) -> HeapErrorKind {
    move |_| HeapErrorKind::Truncated(what)
}

pub(crate) fn no_trailing(c: &Cursor<'_>, what: &'static str) -> Result<(), HeapErrorKind> {
    match c.remaining() {
        0 => Ok(()),
        extra => Err(HeapErrorKind::TrailingBytes { what, extra }),
    }
}

/// `xl_heap_header` followed by the tuple bytes, all of `buf`
/// (`DecodeXLogTuple`).
fn tuple_with_header<'a>(
    buf: &'a [u8],
    what: &'static str,
) -> Result<TupleBytes<'a>, HeapErrorKind> {
    let mut c = Cursor::new(buf);
    let t_infomask2 = c.u16().map_err(trunc(what))?;
    let t_infomask = c.u16().map_err(trunc(what))?;
    let t_hoff = c.u8().map_err(trunc(what))?;
    debug_assert_eq!(c.position(), SIZE_OF_HEAP_HEADER);
    tuple(t_infomask2, t_infomask, t_hoff, c.rest(), what)
}

fn tuple<'a>(
    infomask2: u16,
    infomask: u16,
    hoff: u8,
    data: &'a [u8],
    what: &'static str,
) -> Result<TupleBytes<'a>, HeapErrorKind> {
    // The null bitmap and padding up to t_hoff are always logged.
    let fits = hoff
        .checked_sub(SIZEOF_HEAP_TUPLE_HEADER)
        .is_some_and(|bits| usize::from(bits) <= data.len());
    if !fits {
        return Err(HeapErrorKind::BadTupleHeader {
            what,
            hoff,
            len: data.len(),
        });
    }
    Ok(TupleBytes {
        infomask2,
        infomask,
        hoff,
        data,
    })
}

/// The old key or tuple after the fixed part of an update or delete.
fn old_tuple<'a>(
    rest: &'a [u8],
    has_full: bool,
    has_key: bool,
    what: &'static str,
) -> Result<Option<OldTuple<'a>>, HeapErrorKind> {
    if !has_full && !has_key {
        if !rest.is_empty() {
            return Err(HeapErrorKind::TrailingBytes {
                what,
                extra: rest.len(),
            });
        }
        return Ok(None);
    }
    let t = tuple_with_header(rest, "old tuple")?;
    Ok(Some(if has_full {
        OldTuple::Full(t)
    } else {
        OldTuple::Key(t)
    }))
}

/// `xl_heap_insert` in the main data, `xl_heap_header` + tuple in block 0.
fn decode_insert<'a>(rec: &RecordView<'a>) -> Result<HeapChange<'a>, HeapErrorKind> {
    let mut c = Cursor::new(rec.main_data());
    let what = "xl_heap_insert";
    let offnum = c.u16().map_err(trunc(what))?;
    let flags = c.u8().map_err(trunc(what))?;
    no_trailing(&c, what)?;
    debug_assert_eq!(c.position(), SIZE_OF_HEAP_INSERT);
    let b = block0(rec)?;
    let data = rec.block_data(b);
    let tuple = if data.is_empty() {
        if flags & XLH_INSERT_CONTAINS_NEW_TUPLE != 0 {
            return Err(HeapErrorKind::MissingTupleData);
        }
        None
    } else {
        Some(tuple_with_header(data, "inserted tuple")?)
    };
    Ok(HeapChange::Insert {
        rel: b.locator,
        tid: Tid {
            block: b.blkno,
            offset: offnum,
        },
        tuple,
        speculative: flags & XLH_INSERT_IS_SPECULATIVE != 0,
        flags,
    })
}

/// `xl_heap_multi_insert` (+ offsets unless the page is initialised) in the
/// main data, `xl_multi_insert_tuple` entries in block 0.
fn decode_multi_insert<'a>(
    rec: &RecordView<'a>,
    init: bool,
) -> Result<HeapChange<'a>, HeapErrorKind> {
    let mut c = Cursor::new(rec.main_data());
    let what = "xl_heap_multi_insert";
    let flags = c.u8().map_err(trunc(what))?;
    c.take(1).map_err(trunc(what))?; // padding before ntuples
    let ntuples = c.u16().map_err(trunc(what))?;
    debug_assert_eq!(c.position(), SIZE_OF_HEAP_MULTI_INSERT);
    let offsets = if init {
        // heap_multi_insert omits them: the tuples fill the new page from 1.
        (1..=ntuples).collect()
    } else {
        let raw = c
            .take(usize::from(ntuples) * 2)
            .map_err(trunc("multi-insert offsets"))?;
        raw.chunks_exact(2)
            .map(|p| p.try_into().map_or(0, u16::from_le_bytes))
            .collect()
    };
    no_trailing(&c, what)?;
    let b = block0(rec)?;
    let data = rec.block_data(b);
    let mut tuples = Vec::new();
    if data.is_empty() && flags & XLH_INSERT_CONTAINS_NEW_TUPLE != 0 && ntuples > 0 {
        return Err(HeapErrorKind::MissingTupleData);
    }
    if !data.is_empty() {
        tuples.reserve(usize::from(ntuples));
        let mut c = Cursor::new(data);
        let what = "xl_multi_insert_tuple";
        while c.remaining() > 0 {
            c.align(2).map_err(trunc(what))?;
            let datalen = c.u16().map_err(trunc(what))?;
            let infomask2 = c.u16().map_err(trunc(what))?;
            let infomask = c.u16().map_err(trunc(what))?;
            let hoff = c.u8().map_err(trunc(what))?;
            let bytes = c
                .take(usize::from(datalen))
                .map_err(trunc("multi-insert tuple data"))?;
            tuples.push(tuple(
                infomask2,
                infomask,
                hoff,
                bytes,
                "multi-insert tuple",
            )?);
        }
        if tuples.len() != usize::from(ntuples) {
            return Err(HeapErrorKind::TupleCount {
                announced: ntuples,
                found: tuples.len(),
            });
        }
    }
    Ok(HeapChange::MultiInsert {
        rel: b.locator,
        block: b.blkno,
        offsets,
        tuples,
        flags,
    })
}

/// `xl_heap_update` (+ old key/tuple) in the main data; prefix/suffix
/// lengths, `xl_heap_header` and the new tuple in block 0; the old page is
/// block 1 when it differs.
fn decode_update<'a>(rec: &RecordView<'a>, hot: bool) -> Result<HeapChange<'a>, HeapErrorKind> {
    let mut c = Cursor::new(rec.main_data());
    let what = "xl_heap_update";
    let _old_xmax = c.u32().map_err(trunc(what))?;
    let old_offnum = c.u16().map_err(trunc(what))?;
    let _old_infobits_set = c.u8().map_err(trunc(what))?;
    let flags = c.u8().map_err(trunc(what))?;
    let _new_xmax = c.u32().map_err(trunc(what))?;
    let new_offnum = c.u16().map_err(trunc(what))?;
    debug_assert_eq!(c.position(), SIZE_OF_HEAP_UPDATE);
    let old = old_tuple(
        c.rest(),
        flags & XLH_UPDATE_CONTAINS_OLD_TUPLE != 0,
        flags & XLH_UPDATE_CONTAINS_OLD_KEY != 0,
        what,
    )?;

    let new_block = block0(rec)?;
    let old_blkno = rec.block(1).map_or(new_block.blkno, |b| b.blkno);
    let data = rec.block_data(new_block);
    let (mut prefix_len, mut suffix_len) = (0, 0);
    let new = if data.is_empty() {
        if flags & XLH_UPDATE_CONTAINS_NEW_TUPLE != 0 {
            return Err(HeapErrorKind::MissingTupleData);
        }
        None
    } else {
        let mut c = Cursor::new(data);
        if flags & XLH_UPDATE_PREFIX_FROM_OLD != 0 {
            prefix_len = c.u16().map_err(trunc("update prefix length"))?;
        }
        if flags & XLH_UPDATE_SUFFIX_FROM_OLD != 0 {
            suffix_len = c.u16().map_err(trunc("update suffix length"))?;
        }
        Some(tuple_with_header(c.rest(), "new tuple")?)
    };
    Ok(HeapChange::Update {
        rel: new_block.locator,
        hot,
        old_tid: Tid {
            block: old_blkno,
            offset: old_offnum,
        },
        new_tid: Tid {
            block: new_block.blkno,
            offset: new_offnum,
        },
        old,
        new,
        prefix_len,
        suffix_len,
        flags,
    })
}

/// `xl_heap_delete` (+ old key/tuple) in the main data.
fn decode_delete<'a>(rec: &RecordView<'a>) -> Result<HeapChange<'a>, HeapErrorKind> {
    let mut c = Cursor::new(rec.main_data());
    let what = "xl_heap_delete";
    let _xmax = c.u32().map_err(trunc(what))?;
    let offnum = c.u16().map_err(trunc(what))?;
    let _infobits_set = c.u8().map_err(trunc(what))?;
    let flags = c.u8().map_err(trunc(what))?;
    debug_assert_eq!(c.position(), SIZE_OF_HEAP_DELETE);
    let old = old_tuple(
        c.rest(),
        flags & XLH_DELETE_CONTAINS_OLD_TUPLE != 0,
        flags & XLH_DELETE_CONTAINS_OLD_KEY != 0,
        what,
    )?;
    let b = block0(rec)?;
    Ok(HeapChange::Delete {
        rel: b.locator,
        tid: Tid {
            block: b.blkno,
            offset: offnum,
        },
        old,
        super_delete: flags & XLH_DELETE_IS_SUPER != 0,
        flags,
    })
}

/// `xl_heap_truncate` and its relids (ExecuteTruncateGuts in tablecmds.c
/// logs exactly `nrelids` of them).
fn decode_truncate<'a>(rec: &RecordView<'a>) -> Result<HeapChange<'a>, HeapErrorKind> {
    let mut c = Cursor::new(rec.main_data());
    let what = "xl_heap_truncate";
    let db = c.u32().map_err(trunc(what))?;
    let nrelids = c.u32().map_err(trunc(what))?;
    let flags = c.u8().map_err(trunc(what))?;
    c.take(3).map_err(trunc(what))?; // padding before relids
    debug_assert_eq!(c.position(), SIZE_OF_HEAP_TRUNCATE);
    let relids = usize::try_from(nrelids)
        .map_err(|_| Truncated)
        .and_then(|n| c.u32s(n))
        .map_err(trunc("truncate relids"))?;
    no_trailing(&c, what)?;
    Ok(HeapChange::Truncate {
        db,
        relids,
        cascade: flags & XLH_TRUNCATE_CASCADE != 0,
        restart_seqs: flags & XLH_TRUNCATE_RESTART_SEQS != 0,
    })
}

/// `xl_heap_confirm` in the main data, the page in block 0.
fn decode_confirm<'a>(rec: &RecordView<'a>) -> Result<HeapChange<'a>, HeapErrorKind> {
    let mut c = Cursor::new(rec.main_data());
    let offnum = c.u16().map_err(trunc("xl_heap_confirm"))?;
    no_trailing(&c, "xl_heap_confirm")?;
    debug_assert_eq!(c.position(), SIZE_OF_HEAP_CONFIRM);
    let b = block0(rec)?;
    Ok(HeapChange::Confirm {
        rel: b.locator,
        tid: Tid {
            block: b.blkno,
            offset: offnum,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_record::{Blk, Bytes, REL, record};

    /// `xl_heap_header` + bitmap-less tuple (id int4, v text 'abc').
    fn tuple_bytes() -> Vec<u8> {
        Bytes::default()
            .u16(2) // natts
            .u16(0x0802) // HEAP_XMAX_INVALID | HEAP_HASVARWIDTH
            .u8(24) // t_hoff: MAXALIGN(23)
            .u8(0) // padding up to t_hoff
            .i32(7)
            .raw(&[(4 << 1) | 1, b'a', b'b', b'c']) // short varlena
            .0
    }

    fn heap(info: u8, blocks: &[Blk<'_>], main: &[u8]) -> crate::WalRecord {
        record(RmgrId::HEAP.0, info, 900, blocks, main)
    }

    #[test]
    fn insert() {
        let data = tuple_bytes();
        let main = Bytes::default().u16(3).u8(XLH_INSERT_CONTAINS_NEW_TUPLE).0;
        for info in [XLOG_HEAP_INSERT, XLOG_HEAP_INSERT | XLOG_HEAP_INIT_PAGE] {
            let r = heap(
                info,
                &[Blk {
                    id: 0,
                    blkno: 9,
                    data: &data,
                }],
                &main,
            );
            let Some(HeapChange::Insert {
                rel,
                tid,
                tuple: Some(t),
                speculative: false,
                flags: XLH_INSERT_CONTAINS_NEW_TUPLE,
            }) = decode_heap(&r.view()).unwrap()
            else {
                panic!("not an insert with a tuple");
            };
            assert_eq!(
                (rel, tid),
                (
                    REL,
                    Tid {
                        block: 9,
                        offset: 3
                    }
                )
            );
            assert_eq!((t.natts(), t.hoff, t.has_nulls()), (2, 24, false));
            assert_eq!(t.user_data(), &data[6..]);
            assert_eq!(t.null_bitmap(), None);
        }
        // The flag says a tuple is there, but the block has no data.
        let r = heap(
            XLOG_HEAP_INSERT,
            &[Blk {
                id: 0,
                blkno: 9,
                data: &[],
            }],
            &main,
        );
        let e = decode_heap(&r.view()).unwrap_err();
        assert_eq!(e.kind, HeapErrorKind::MissingTupleData);
        assert!(e.to_string().contains("0/1000028"), "{e}");
        // No block 0.
        let r = heap(XLOG_HEAP_INSERT, &[], &main);
        assert_eq!(
            decode_heap(&r.view()).unwrap_err().kind,
            HeapErrorKind::MissingBlock(0)
        );
        // Main data one byte too long.
        let long = Bytes::default().raw(&main).u8(0).0;
        let r = heap(
            XLOG_HEAP_INSERT,
            &[Blk {
                id: 0,
                blkno: 9,
                data: &data,
            }],
            &long,
        );
        assert!(matches!(
            decode_heap(&r.view()).unwrap_err().kind,
            HeapErrorKind::TrailingBytes { extra: 1, .. }
        ));
    }

    #[test]
    fn tuple_header_must_fit() {
        let main = Bytes::default().u16(1).u8(0).0;
        for (hoff, data) in [(22u8, vec![]), (40, vec![0u8; 5])] {
            let block = Bytes::default().u16(1).u16(0).u8(hoff).raw(&data).0;
            let r = heap(
                XLOG_HEAP_INSERT,
                &[Blk {
                    id: 0,
                    blkno: 0,
                    data: &block,
                }],
                &main,
            );
            assert!(matches!(
                decode_heap(&r.view()).unwrap_err().kind,
                HeapErrorKind::BadTupleHeader { .. }
            ));
        }
        // Shorter than xl_heap_header.
        let r = heap(
            XLOG_HEAP_INSERT,
            &[Blk {
                id: 0,
                blkno: 0,
                data: &[1, 0, 0],
            }],
            &main,
        );
        assert_eq!(
            decode_heap(&r.view()).unwrap_err().kind,
            HeapErrorKind::Truncated("inserted tuple")
        );
    }

    #[test]
    fn multi_insert_shortaligns_entries() {
        // Entry 1 ends at 7 + 5 = 12 (aligned), entry 2 at 12 + 7 + 6 = 25:
        // entry 3 starts after one byte of SHORTALIGN padding.
        let block = Bytes::default()
            .u16(5)
            .u16(1)
            .u16(0)
            .u8(24)
            .raw(&[0, 1, 2, 3, 4])
            .u16(6)
            .u16(1)
            .u16(0)
            .u8(24)
            .raw(&[0, 9, 9, 9, 9, 9])
            .u8(0xEE) // padding
            .u16(5)
            .u16(1)
            .u16(0)
            .u8(24)
            .raw(&[0, 7, 7, 7, 7])
            .0;
        let main = Bytes::default()
            .u8(XLH_INSERT_CONTAINS_NEW_TUPLE)
            .u8(0)
            .u16(3)
            .0;
        let r = record(
            RmgrId::HEAP2.0,
            XLOG_HEAP2_MULTI_INSERT | XLOG_HEAP_INIT_PAGE,
            900,
            &[Blk {
                id: 0,
                blkno: 4,
                data: &block,
            }],
            &main,
        );
        let Some(HeapChange::MultiInsert {
            block: 4,
            offsets,
            tuples,
            ..
        }) = decode_heap(&r.view()).unwrap()
        else {
            panic!("not a multi-insert");
        };
        assert_eq!(offsets, [1, 2, 3]);
        let data: Vec<&[u8]> = tuples.iter().map(|t| t.user_data()).collect();
        // Each tuple's first byte is the padding up to t_hoff.
        assert_eq!(data, [&[1, 2, 3, 4][..], &[9, 9, 9, 9, 9], &[7, 7, 7, 7]]);

        // Without XLOG_HEAP_INIT_PAGE the offsets are logged; a count that
        // disagrees with the entries is an error.
        let main = Bytes::default()
            .u8(XLH_INSERT_CONTAINS_NEW_TUPLE)
            .u8(0)
            .u16(4)
            .u16(5)
            .u16(6)
            .u16(7)
            .u16(8)
            .0;
        let r = record(
            RmgrId::HEAP2.0,
            XLOG_HEAP2_MULTI_INSERT,
            900,
            &[Blk {
                id: 0,
                blkno: 4,
                data: &block,
            }],
            &main,
        );
        assert_eq!(
            decode_heap(&r.view()).unwrap_err().kind,
            HeapErrorKind::TupleCount {
                announced: 4,
                found: 3
            }
        );
    }

    #[test]
    fn update_prefix_suffix_and_old_key() {
        let tuple = tuple_bytes();
        let block = Bytes::default().u16(5).u16(7).raw(&tuple).0;
        let main = Bytes::default()
            .u32(900) // old_xmax
            .u16(2) // old_offnum
            .u8(0)
            .u8(XLH_UPDATE_PREFIX_FROM_OLD
                | XLH_UPDATE_SUFFIX_FROM_OLD
                | XLH_UPDATE_CONTAINS_OLD_KEY)
            .u32(0) // new_xmax
            .u16(8) // new_offnum
            .raw(&tuple) // the old key
            .0;
        let r = heap(
            XLOG_HEAP_UPDATE,
            &[
                Blk {
                    id: 0,
                    blkno: 3,
                    data: &block,
                },
                Blk {
                    id: 1,
                    blkno: 1,
                    data: &[],
                },
            ],
            &main,
        );
        let Some(HeapChange::Update {
            hot: false,
            old_tid,
            new_tid,
            old: Some(OldTuple::Key(k)),
            new: Some(n),
            prefix_len: 5,
            suffix_len: 7,
            ..
        }) = decode_heap(&r.view()).unwrap()
        else {
            panic!("not the update");
        };
        assert_eq!(
            old_tid,
            Tid {
                block: 1,
                offset: 2
            }
        );
        assert_eq!(
            new_tid,
            Tid {
                block: 3,
                offset: 8
            }
        );
        assert_eq!(k.user_data(), n.user_data());

        // HOT, same page, no old tuple: nothing may follow xl_heap_update.
        let main = Bytes::default()
            .u32(0)
            .u16(2)
            .u8(0)
            .u8(0)
            .u32(0)
            .u16(8)
            .u8(1)
            .0;
        let r = heap(
            XLOG_HEAP_HOT_UPDATE,
            &[Blk {
                id: 0,
                blkno: 3,
                data: &tuple,
            }],
            &main,
        );
        assert!(matches!(
            decode_heap(&r.view()).unwrap_err().kind,
            HeapErrorKind::TrailingBytes { extra: 1, .. }
        ));
    }

    #[test]
    fn delete_and_truncate() {
        let main = Bytes::default()
            .u32(900)
            .u16(4)
            .u8(0)
            .u8(XLH_DELETE_CONTAINS_OLD_TUPLE | XLH_DELETE_IS_SUPER)
            .raw(&tuple_bytes())
            .0;
        let r = heap(
            XLOG_HEAP_DELETE,
            &[Blk {
                id: 0,
                blkno: 2,
                data: &[],
            }],
            &main,
        );
        assert!(matches!(
            decode_heap(&r.view()).unwrap(),
            Some(HeapChange::Delete {
                old: Some(OldTuple::Full(_)),
                super_delete: true,
                tid: Tid {
                    block: 2,
                    offset: 4
                },
                ..
            })
        ));
        // XLOG_HEAP_INIT_PAGE is never set on a delete.
        let r = heap(
            XLOG_HEAP_DELETE | XLOG_HEAP_INIT_PAGE,
            &[Blk {
                id: 0,
                blkno: 2,
                data: &[],
            }],
            &main,
        );
        assert_eq!(
            decode_heap(&r.view()).unwrap_err().kind,
            HeapErrorKind::UnknownInfo
        );

        let main = Bytes::default()
            .u32(5)
            .u32(2)
            .u8(XLH_TRUNCATE_RESTART_SEQS)
            .raw(&[0; 3])
            .u32(16400)
            .u32(16500)
            .0;
        let r = heap(XLOG_HEAP_TRUNCATE, &[], &main);
        assert_eq!(
            decode_heap(&r.view()).unwrap(),
            Some(HeapChange::Truncate {
                db: 5,
                relids: vec![16400, 16500],
                cascade: false,
                restart_seqs: true
            })
        );
        // nrelids past the data, and a huge one: errors, no allocation.
        for n in [3, u32::MAX] {
            let mut bad = main.clone();
            bad[4..8].copy_from_slice(&n.to_le_bytes());
            let r = heap(XLOG_HEAP_TRUNCATE, &[], &bad);
            assert_eq!(
                decode_heap(&r.view()).unwrap_err().kind,
                HeapErrorKind::Truncated("truncate relids")
            );
        }
    }

    #[test]
    fn records_without_row_changes() {
        for (rmid, info) in [
            (RmgrId::HEAP, XLOG_HEAP_LOCK),
            (RmgrId::HEAP, XLOG_HEAP_INPLACE),
            (RmgrId::HEAP2, XLOG_HEAP2_REWRITE),
            (RmgrId::HEAP2, XLOG_HEAP2_PRUNE),
            (RmgrId::HEAP2, XLOG_HEAP2_VACUUM),
            (RmgrId::HEAP2, XLOG_HEAP2_FREEZE_PAGE),
            (RmgrId::HEAP2, XLOG_HEAP2_VISIBLE),
            (RmgrId::HEAP2, XLOG_HEAP2_LOCK_UPDATED),
            (RmgrId::HEAP2, XLOG_HEAP2_NEW_CID),
        ] {
            let r = record(rmid.0, info, 0, &[], &[1, 2, 3]);
            assert_eq!(decode_heap(&r.view()), Ok(None), "{rmid:?} {info:#x}");
        }
        let r = record(RmgrId::XACT.0, 0, 0, &[], &[0; 8]);
        assert_eq!(
            decode_heap(&r.view()).unwrap_err().kind,
            HeapErrorKind::WrongRmgr
        );
    }

    #[test]
    fn names_per_major() {
        use PgMajor::*;
        assert_eq!(heap_record_name(RmgrId::HEAP2, 0x10, V15), Some("PRUNE"));
        assert_eq!(heap_record_name(RmgrId::HEAP2, 0x10, V16), Some("PRUNE"));
        assert_eq!(
            heap_record_name(RmgrId::HEAP2, 0x10, V17),
            Some("PRUNE_ON_ACCESS")
        );
        assert_eq!(
            heap_record_name(RmgrId::HEAP2, 0x30, V18),
            Some("PRUNE_VACUUM_CLEANUP")
        );
        assert_eq!(
            heap_record_name(RmgrId::HEAP2, 0x30, V15),
            Some("FREEZE_PAGE")
        );
        assert_eq!(
            heap_record_name(RmgrId::HEAP, 0xC0, V18),
            Some("HOT_UPDATE+INIT")
        );
        assert_eq!(heap_record_name(RmgrId::HEAP, 0x90, V18), None);
        assert_eq!(heap_record_name(RmgrId::XACT, 0x00, V18), None);
    }
}
