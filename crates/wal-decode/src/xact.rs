//! Transaction records (RM_XACT_ID, access/xact.h): commit, abort,
//! prepare, subtransaction assignment and command-level invalidations,
//! parsed as `ParseCommitRecord`, `ParseAbortRecord` and
//! `ParsePrepareRecord` (rmgrdesc/xactdesc.c) read them and read as
//! `xact_decode` in decode.c uses them.
//!
//! Commit and abort main data: `xl_xact_commit`/`xl_xact_abort` (the
//! timestamp), then `xl_xact_xinfo` when `XLOG_XACT_HAS_INFO` is set in
//! `xl_info`, then the optional parts its bits announce, in this order:
//!
//! ```text
//!  xact_time(8) [xinfo(4)] [dbinfo: dbId tsId] [nsubxacts, xids] [nrels, RelFileLocator(12)...]
//!  [nitems, xl_xact_stats_item...] [nmsgs, SharedInvalidationMessage(16)...]   (commit only)
//!  [twophase xid [gid NUL-terminated]] [origin_lsn(8) origin_timestamp(8), unaligned]
//! ```
//!
//! A prepare record is the two-phase state file without its CRC
//! (`StartPrepare`/`EndPrepare` in twophase.c): `xl_xact_prepare`
//! (`TwoPhaseFileHeader`), then gid, subxacts, commit rels, abort rels,
//! commit stats, abort stats and invalidations, each MAXALIGNed, then the
//! rmgrs' two-phase records, which this module does not read.
//!
//! Between majors only the size of `xl_xact_stats_item` differs: 12 bytes
//! (`kind, dboid, objoid`) up to 17, 16 bytes (`kind, dboid, objid_lo,
//! objid_hi`) from 18, where stats keys widened to 64 bits. Invalidation
//! ids differ too (see [`crate::sinval`]). So the decoder takes the major.

use walshadow_types::{Lsn, Oid, PgMajor, RelFileLocator, Xid};

use crate::cursor::{Cursor, Truncated};
use crate::record::RecordView;
use crate::rmgr::RmgrId;
use crate::sinval::{Inval, SIZE_OF_INVAL};

pub const XLOG_XACT_COMMIT: u8 = 0x00;
pub const XLOG_XACT_PREPARE: u8 = 0x10;
pub const XLOG_XACT_ABORT: u8 = 0x20;
pub const XLOG_XACT_COMMIT_PREPARED: u8 = 0x30;
pub const XLOG_XACT_ABORT_PREPARED: u8 = 0x40;
pub const XLOG_XACT_ASSIGNMENT: u8 = 0x50;
pub const XLOG_XACT_INVALIDATIONS: u8 = 0x60;
pub const XLOG_XACT_OPMASK: u8 = 0x70;
/// The record has an `xl_xact_xinfo` (commit and abort only).
pub const XLOG_XACT_HAS_INFO: u8 = 0x80;

pub const XACT_XINFO_HAS_DBINFO: u32 = 1 << 0;
pub const XACT_XINFO_HAS_SUBXACTS: u32 = 1 << 1;
/// `XACT_XINFO_HAS_RELFILENODES` before 16.
pub const XACT_XINFO_HAS_RELFILELOCATORS: u32 = 1 << 2;
pub const XACT_XINFO_HAS_INVALS: u32 = 1 << 3;
pub const XACT_XINFO_HAS_TWOPHASE: u32 = 1 << 4;
pub const XACT_XINFO_HAS_ORIGIN: u32 = 1 << 5;
pub const XACT_XINFO_HAS_AE_LOCKS: u32 = 1 << 6;
pub const XACT_XINFO_HAS_GID: u32 = 1 << 7;
pub const XACT_XINFO_HAS_DROPPED_STATS: u32 = 1 << 8;
pub const XACT_COMPLETION_APPLY_FEEDBACK: u32 = 1 << 29;
pub const XACT_COMPLETION_UPDATE_RELCACHE_FILE: u32 = 1 << 30;
pub const XACT_COMPLETION_FORCE_SYNC_COMMIT: u32 = 1 << 31;

/// `TWOPHASE_MAGIC` of the state file header, 15 to 18 alike.
pub const TWOPHASE_MAGIC: u32 = 0x57F9_4534;

/// `sizeof(xl_xact_prepare)`, already a multiple of MAXALIGN (8).
const SIZE_OF_XACT_PREPARE: usize = 72;
const SIZE_OF_RELFILELOCATOR: usize = 12;
const MAXALIGN: usize = 8;

/// One transaction record's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XactRecord<'a> {
    /// XLOG_XACT_COMMIT and XLOG_XACT_COMMIT_PREPARED.
    Commit(XactCommit<'a>),
    /// XLOG_XACT_ABORT (top transaction or subtransaction rollback) and
    /// XLOG_XACT_ABORT_PREPARED.
    Abort(XactAbort<'a>),
    /// XLOG_XACT_PREPARE.
    Prepare(XactPrepare<'a>),
    /// XLOG_XACT_ASSIGNMENT: subxacts of `top` (logged every
    /// `PGPROC_MAX_CACHED_SUBXIDS` assignments; at logical level every
    /// subxact's first record also names its top xid).
    Assignment { top: Xid, subxacts: Vec<Xid> },
    /// XLOG_XACT_INVALIDATIONS: a command's catalog invalidations
    /// (logical level), for the record's xid.
    Invalidations(Vec<Inval>),
}

/// `xl_xact_origin`: where a replicated transaction came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XactOrigin {
    pub origin_lsn: Lsn,
    pub origin_timestamp: i64,
}

/// `xl_xact_stats_item`: a statistics entry dropped with the transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DroppedStats {
    pub kind: i32,
    pub db: Oid,
    /// `objoid` up to 17; `objid_lo | objid_hi << 32` from 18.
    pub objid: u64,
}

/// A commit (`xl_xact_parsed_commit`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XactCommit<'a> {
    /// The committing top transaction: the record's xid, or for COMMIT
    /// PREPARED the prepared transaction's (`twophase_xid`).
    pub xid: Xid,
    /// `TimestampTz`: microseconds since 2000-01-01 00:00 UTC.
    pub commit_time: i64,
    /// `xl_xact_xinfo` (0 without `XLOG_XACT_HAS_INFO`).
    pub xinfo: u32,
    /// `MyDatabaseId`/`MyDatabaseTableSpace` (0 without
    /// `XACT_XINFO_HAS_DBINFO`, which commits set when they carry
    /// invalidations or at logical level).
    pub db_id: Oid,
    pub ts_id: Oid,
    /// Committed subtransactions.
    pub subxacts: Vec<Xid>,
    /// Relation files deleted at commit.
    pub dropped_rels: Vec<RelFileLocator>,
    pub dropped_stats: Vec<DroppedStats>,
    pub invals: Vec<Inval>,
    /// COMMIT PREPARED: the prepared transaction's xid.
    pub twophase_xid: Option<Xid>,
    /// COMMIT PREPARED at logical level: the GID, as stored (server
    /// encoding, no terminator).
    pub gid: Option<&'a [u8]>,
    pub origin: Option<XactOrigin>,
}

/// An abort (`xl_xact_parsed_abort`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XactAbort<'a> {
    /// The aborted transaction: the record's xid (a subtransaction's for a
    /// rollback to savepoint), or for ROLLBACK PREPARED the prepared one's.
    pub xid: Xid,
    pub abort_time: i64,
    pub xinfo: u32,
    pub db_id: Oid,
    pub ts_id: Oid,
    /// Aborted subtransactions (children of `xid`).
    pub subxacts: Vec<Xid>,
    /// Relation files deleted at abort (created by the transaction).
    pub dropped_rels: Vec<RelFileLocator>,
    pub dropped_stats: Vec<DroppedStats>,
    pub twophase_xid: Option<Xid>,
    pub gid: Option<&'a [u8]>,
    pub origin: Option<XactOrigin>,
}

/// A prepare (`xl_xact_prepare` and what follows it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XactPrepare<'a> {
    /// The prepared transaction.
    pub xid: Xid,
    pub gid: &'a [u8],
    pub prepared_at: i64,
    pub db_id: Oid,
    /// Role running the transaction.
    pub owner: Oid,
    pub subxacts: Vec<Xid>,
    /// Relation files to delete at COMMIT PREPARED / ROLLBACK PREPARED.
    pub commit_rels: Vec<RelFileLocator>,
    pub abort_rels: Vec<RelFileLocator>,
    pub commit_stats: Vec<DroppedStats>,
    pub abort_stats: Vec<DroppedStats>,
    pub invals: Vec<Inval>,
    pub init_file_inval: bool,
    /// Replication origin, `0/0` and 0 when none.
    pub origin_lsn: Lsn,
    pub origin_timestamp: i64,
}

/// A transaction record that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Transaction record at {lsn} (xl_info {info:#04x}): {kind}")]
pub struct XactDecodeError {
    pub lsn: Lsn,
    pub info: u8,
    pub kind: XactErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XactErrorKind {
    #[error("not a Transaction record (rmgr {0})")]
    WrongRmgr(RmgrId),
    #[error("unknown record type {0:#04x}")]
    UnknownInfo(u8),
    #[error("{0} is truncated")]
    Truncated(&'static str),
    #[error("{what} has {extra} bytes past its end")]
    TrailingBytes { what: &'static str, extra: usize },
    #[error("{what} count {count} is negative")]
    NegativeCount { what: &'static str, count: i32 },
    #[error("two-phase header magic {found:#010x}, expected {TWOPHASE_MAGIC:#010x}")]
    BadMagic { found: u32 },
    #[error("two-phase header says {total_len} bytes (with CRC), the record holds {found}")]
    BadTotalLen { total_len: u32, found: usize },
    #[error("GID is not NUL-terminated")]
    UnterminatedGid,
}

fn trunc(what: &'static str) -> impl Fn(Truncated) -> XactErrorKind {
    move |_| XactErrorKind::Truncated(what)
}

/// Decodes a Transaction record. `None` is never returned for a valid
/// record today (every opcode carries something); it is kept so callers
/// treat all rmgr decoders alike.
pub fn decode_xact<'a>(
    rec: &RecordView<'a>,
    major: PgMajor,
) -> Result<Option<XactRecord<'a>>, XactDecodeError> {
    let info = rec.header.rmgr_info();
    let err = |kind| XactDecodeError {
        lsn: rec.lsn,
        info,
        kind,
    };
    if rec.rmgr() != RmgrId::XACT {
        return Err(err(XactErrorKind::WrongRmgr(rec.rmgr())));
    }
    let has_info = info & XLOG_XACT_HAS_INFO != 0;
    let data = rec.main_data();
    let out = match info & XLOG_XACT_OPMASK {
        XLOG_XACT_COMMIT | XLOG_XACT_COMMIT_PREPARED => {
            parse_commit(data, has_info, rec.xid(), major).map(XactRecord::Commit)
        }
        XLOG_XACT_ABORT | XLOG_XACT_ABORT_PREPARED => {
            parse_abort(data, has_info, rec.xid(), major).map(XactRecord::Abort)
        }
        XLOG_XACT_PREPARE => parse_prepare(data, major).map(XactRecord::Prepare),
        XLOG_XACT_ASSIGNMENT => parse_assignment(data),
        XLOG_XACT_INVALIDATIONS => parse_invalidations(data, major),
        op => Err(XactErrorKind::UnknownInfo(op)),
    };
    out.map(Some).map_err(err)
}

/// The parts commit and abort share, in record order.
struct Common<'a> {
    time: i64,
    xinfo: u32,
    db_id: Oid,
    ts_id: Oid,
    subxacts: Vec<Xid>,
    rels: Vec<RelFileLocator>,
    stats: Vec<DroppedStats>,
    invals: Vec<Inval>,
    twophase_xid: Option<Xid>,
    gid: Option<&'a [u8]>,
    origin: Option<XactOrigin>,
}

/// `ParseCommitRecord` (with `invals`) and `ParseAbortRecord` (without).
fn parse_common<'a>(
    data: &'a [u8],
    has_info: bool,
    with_invals: bool,
    major: PgMajor,
) -> Result<Common<'a>, XactErrorKind> {
    let mut c = Cursor::new(data);
    let time = c.i64().map_err(trunc("xact_time"))?;
    let xinfo = if has_info {
        c.u32().map_err(trunc("xl_xact_xinfo"))?
    } else {
        0
    };
    let (mut db_id, mut ts_id) = (0, 0);
    if xinfo & XACT_XINFO_HAS_DBINFO != 0 {
        db_id = c.u32().map_err(trunc("xl_xact_dbinfo"))?;
        ts_id = c.u32().map_err(trunc("xl_xact_dbinfo"))?;
    }
    let subxacts = if xinfo & XACT_XINFO_HAS_SUBXACTS != 0 {
        let n = count(&mut c, "nsubxacts")?;
        xids(&mut c, n, "subxacts")?
    } else {
        Vec::new()
    };
    let rels = if xinfo & XACT_XINFO_HAS_RELFILELOCATORS != 0 {
        let n = count(&mut c, "nrels")?;
        locators(&mut c, n, "relfilelocators")?
    } else {
        Vec::new()
    };
    let stats = if xinfo & XACT_XINFO_HAS_DROPPED_STATS != 0 {
        let n = count(&mut c, "dropped stats nitems")?;
        stats_items(&mut c, n, major, "dropped stats")?
    } else {
        Vec::new()
    };
    let invals = if with_invals && xinfo & XACT_XINFO_HAS_INVALS != 0 {
        let n = count(&mut c, "nmsgs")?;
        invals(&mut c, n, major, "invalidation messages")?
    } else {
        Vec::new()
    };
    let (mut twophase_xid, mut gid) = (None, None);
    if xinfo & XACT_XINFO_HAS_TWOPHASE != 0 {
        twophase_xid = Some(c.u32().map_err(trunc("xl_xact_twophase"))?);
        // The GID only ever follows the two-phase xid.
        if xinfo & XACT_XINFO_HAS_GID != 0 {
            gid = Some(cstring(&mut c)?);
        }
    }
    // No alignment from here on: the origin is stored unaligned.
    let origin = if xinfo & XACT_XINFO_HAS_ORIGIN != 0 {
        Some(XactOrigin {
            origin_lsn: Lsn(c.u64().map_err(trunc("xl_xact_origin"))?),
            origin_timestamp: c.i64().map_err(trunc("xl_xact_origin"))?,
        })
    } else {
        None
    };
    if c.remaining() > 0 {
        return Err(XactErrorKind::TrailingBytes {
            what: if with_invals {
                "commit record"
            } else {
                "abort record"
            },
            extra: c.remaining(),
        });
    }
    Ok(Common {
        time,
        xinfo,
        db_id,
        ts_id,
        subxacts,
        rels,
        stats,
        invals,
        twophase_xid,
        gid,
        origin,
    })
}

fn parse_commit(
    data: &[u8],
    has_info: bool,
    record_xid: Xid,
    major: PgMajor,
) -> Result<XactCommit<'_>, XactErrorKind> {
    let p = parse_common(data, has_info, true, major)?;
    Ok(XactCommit {
        xid: p.twophase_xid.unwrap_or(record_xid),
        commit_time: p.time,
        xinfo: p.xinfo,
        db_id: p.db_id,
        ts_id: p.ts_id,
        subxacts: p.subxacts,
        dropped_rels: p.rels,
        dropped_stats: p.stats,
        invals: p.invals,
        twophase_xid: p.twophase_xid,
        gid: p.gid,
        origin: p.origin,
    })
}

fn parse_abort(
    data: &[u8],
    has_info: bool,
    record_xid: Xid,
    major: PgMajor,
) -> Result<XactAbort<'_>, XactErrorKind> {
    let p = parse_common(data, has_info, false, major)?;
    Ok(XactAbort {
        xid: p.twophase_xid.unwrap_or(record_xid),
        abort_time: p.time,
        xinfo: p.xinfo,
        db_id: p.db_id,
        ts_id: p.ts_id,
        subxacts: p.subxacts,
        dropped_rels: p.rels,
        dropped_stats: p.stats,
        twophase_xid: p.twophase_xid,
        gid: p.gid,
        origin: p.origin,
    })
}

/// `ParsePrepareRecord`: the two-phase file header, then its MAXALIGNed
/// arrays.
fn parse_prepare(data: &[u8], major: PgMajor) -> Result<XactPrepare<'_>, XactErrorKind> {
    let what = "xl_xact_prepare";
    let mut c = Cursor::new(data);
    let magic = c.u32().map_err(trunc(what))?;
    if magic != TWOPHASE_MAGIC {
        return Err(XactErrorKind::BadMagic { found: magic });
    }
    let total_len = c.u32().map_err(trunc(what))?;
    let xid = c.u32().map_err(trunc(what))?;
    let db_id = c.u32().map_err(trunc(what))?;
    let prepared_at = c.i64().map_err(trunc(what))?;
    let owner = c.u32().map_err(trunc(what))?;
    let nsubxacts = count(&mut c, "nsubxacts")?;
    let ncommitrels = count(&mut c, "ncommitrels")?;
    let nabortrels = count(&mut c, "nabortrels")?;
    let ncommitstats = count(&mut c, "ncommitstats")?;
    let nabortstats = count(&mut c, "nabortstats")?;
    let ninvalmsgs = count(&mut c, "ninvalmsgs")?;
    let init_file_inval = c.u8().map_err(trunc(what))? != 0;
    c.take(1).map_err(trunc(what))?; // padding before gidlen
    let gidlen = c.u16().map_err(trunc(what))?;
    let origin_lsn = Lsn(c.u64().map_err(trunc(what))?);
    let origin_timestamp = c.i64().map_err(trunc(what))?;
    debug_assert_eq!(c.position(), SIZE_OF_XACT_PREPARE);
    // total_len counts the state file's trailing CRC, which WAL leaves out.
    if usize::try_from(total_len).ok() != data.len().checked_add(4) {
        return Err(XactErrorKind::BadTotalLen {
            total_len,
            found: data.len(),
        });
    }

    let gid_bytes = c.take(usize::from(gidlen)).map_err(trunc("gid"))?;
    let gid = match gid_bytes.iter().position(|&b| b == 0) {
        Some(end) => gid_bytes.get(..end).unwrap_or_default(),
        None => return Err(XactErrorKind::UnterminatedGid),
    };
    c.align(MAXALIGN).map_err(trunc("gid"))?;
    let subxacts = xids(&mut c, nsubxacts, "subxacts")?;
    c.align(MAXALIGN).map_err(trunc("subxacts"))?;
    let commit_rels = locators(&mut c, ncommitrels, "commit rels")?;
    c.align(MAXALIGN).map_err(trunc("commit rels"))?;
    let abort_rels = locators(&mut c, nabortrels, "abort rels")?;
    c.align(MAXALIGN).map_err(trunc("abort rels"))?;
    let commit_stats = stats_items(&mut c, ncommitstats, major, "commit stats")?;
    c.align(MAXALIGN).map_err(trunc("commit stats"))?;
    let abort_stats = stats_items(&mut c, nabortstats, major, "abort stats")?;
    c.align(MAXALIGN).map_err(trunc("abort stats"))?;
    let invals = invals(&mut c, ninvalmsgs, major, "invalidation messages")?;
    // The rmgrs' TwoPhaseRecordOnDisk entries follow (at least the end
    // sentinel); they hold locks and stats, nothing decoding needs.
    Ok(XactPrepare {
        xid,
        gid,
        prepared_at,
        db_id,
        owner,
        subxacts,
        commit_rels,
        abort_rels,
        commit_stats,
        abort_stats,
        invals,
        init_file_inval,
        origin_lsn,
        origin_timestamp,
    })
}

/// `xl_xact_assignment`.
fn parse_assignment(data: &[u8]) -> Result<XactRecord<'_>, XactErrorKind> {
    let mut c = Cursor::new(data);
    let top = c.u32().map_err(trunc("xl_xact_assignment"))?;
    let n = count(&mut c, "nsubxacts")?;
    let subxacts = xids(&mut c, n, "assigned subxacts")?;
    if c.remaining() > 0 {
        return Err(XactErrorKind::TrailingBytes {
            what: "xl_xact_assignment",
            extra: c.remaining(),
        });
    }
    Ok(XactRecord::Assignment { top, subxacts })
}

/// `xl_xact_invals`.
fn parse_invalidations(data: &[u8], major: PgMajor) -> Result<XactRecord<'_>, XactErrorKind> {
    let mut c = Cursor::new(data);
    let n = count(&mut c, "nmsgs")?;
    let msgs = invals(&mut c, n, major, "invalidation messages")?;
    if c.remaining() > 0 {
        return Err(XactErrorKind::TrailingBytes {
            what: "xl_xact_invals",
            extra: c.remaining(),
        });
    }
    Ok(XactRecord::Invalidations(msgs))
}

/// An `int` element count, refused when negative.
fn count(c: &mut Cursor<'_>, what: &'static str) -> Result<usize, XactErrorKind> {
    let n = c.i32().map_err(trunc(what))?;
    usize::try_from(n).map_err(|_| XactErrorKind::NegativeCount { what, count: n })
}

/// `n` elements of `size` bytes, taken before anything is allocated so a
/// hostile count costs nothing.
fn array<'a>(
    c: &mut Cursor<'a>,
    n: usize,
    size: usize,
    what: &'static str,
) -> Result<&'a [u8], XactErrorKind> {
    let len = n.checked_mul(size).ok_or(XactErrorKind::Truncated(what))?;
    c.take(len).map_err(trunc(what))
}

fn xids(c: &mut Cursor<'_>, n: usize, what: &'static str) -> Result<Vec<Xid>, XactErrorKind> {
    c.u32s(n).map_err(trunc(what))
}

fn locators(
    c: &mut Cursor<'_>,
    n: usize,
    what: &'static str,
) -> Result<Vec<RelFileLocator>, XactErrorKind> {
    let mut items = Cursor::new(array(c, n, SIZE_OF_RELFILELOCATOR, what)?);
    (0..n)
        .map(|_| {
            Ok(RelFileLocator {
                spc_oid: items.u32()?,
                db_oid: items.u32()?,
                rel_number: items.u32()?,
            })
        })
        .collect::<Result<_, Truncated>>()
        .map_err(trunc(what))
}

/// `sizeof(xl_xact_stats_item)` of `major`.
fn stats_item_size(major: PgMajor) -> usize {
    if major >= PgMajor::V18 { 16 } else { 12 }
}

fn stats_items(
    c: &mut Cursor<'_>,
    n: usize,
    major: PgMajor,
    what: &'static str,
) -> Result<Vec<DroppedStats>, XactErrorKind> {
    let mut items = Cursor::new(array(c, n, stats_item_size(major), what)?);
    (0..n)
        .map(|_| {
            Ok(DroppedStats {
                kind: items.i32()?,
                db: items.u32()?,
                // objid_lo, objid_hi from 18: one little-endian u64.
                objid: if major >= PgMajor::V18 {
                    items.u64()?
                } else {
                    u64::from(items.u32()?)
                },
            })
        })
        .collect::<Result<_, Truncated>>()
        .map_err(trunc(what))
}

fn invals(
    c: &mut Cursor<'_>,
    n: usize,
    major: PgMajor,
    what: &'static str,
) -> Result<Vec<Inval>, XactErrorKind> {
    Ok(Inval::parse_all(array(c, n, SIZE_OF_INVAL, what)?, major))
}

/// A NUL-terminated string; the cursor moves past the NUL.
fn cstring<'a>(c: &mut Cursor<'a>) -> Result<&'a [u8], XactErrorKind> {
    let rest = c.clone().rest();
    let end = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or(XactErrorKind::UnterminatedGid)?;
    let s = c.take(end).map_err(trunc("gid"))?;
    c.take(1).map_err(trunc("gid"))?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_record::{Bytes, record};

    fn xact(info: u8, xid: u32, main: &[u8]) -> crate::WalRecord {
        record(RmgrId::XACT.0, info, xid, &[], main)
    }

    fn inval(id: i8, db: u32, w: u32) -> [u8; 16] {
        let mut m = [0u8; 16];
        m[0] = id as u8;
        m[4..8].copy_from_slice(&db.to_le_bytes());
        m[8..12].copy_from_slice(&w.to_le_bytes());
        m
    }

    /// A commit with every optional part, stats items sized for `major`.
    fn full_commit(major: PgMajor) -> Vec<u8> {
        let xinfo = XACT_XINFO_HAS_DBINFO
            | XACT_XINFO_HAS_SUBXACTS
            | XACT_XINFO_HAS_RELFILELOCATORS
            | XACT_XINFO_HAS_DROPPED_STATS
            | XACT_XINFO_HAS_INVALS
            | XACT_XINFO_HAS_TWOPHASE
            | XACT_XINFO_HAS_GID
            | XACT_XINFO_HAS_ORIGIN
            | XACT_COMPLETION_FORCE_SYNC_COMMIT;
        let mut b = Bytes::default()
            .i64(123_456_789)
            .u32(xinfo)
            .u32(5)
            .u32(1663)
            .i32(2)
            .u32(801)
            .u32(802)
            .i32(1)
            .u32(1663)
            .u32(5)
            .u32(16390)
            .i32(1)
            .i32(2) // kind
            .u32(5); // dboid
        b = if major >= PgMajor::V18 {
            b.u32(16390).u32(1) // objid_lo, objid_hi
        } else {
            b.u32(16390)
        };
        b.i32(2)
            .raw(&inval(7, 5, 0xABCD))
            .raw(&inval(-2, 5, 16390))
            .u32(800)
            .raw(b"gid-1\0")
            .raw(&0x0123_4567_89AB_CDEFu64.to_le_bytes())
            .i64(42)
            .0
    }

    #[test]
    fn commit_with_every_part() {
        for major in [PgMajor::V15, PgMajor::V18] {
            let r = xact(
                XLOG_XACT_COMMIT_PREPARED | XLOG_XACT_HAS_INFO,
                0,
                &full_commit(major),
            );
            let Some(XactRecord::Commit(c)) = decode_xact(&r.view(), major).unwrap() else {
                panic!("not a commit");
            };
            assert_eq!(c.xid, 800, "COMMIT PREPARED: the prepared xid");
            assert_eq!(c.commit_time, 123_456_789);
            assert_eq!((c.db_id, c.ts_id), (5, 1663));
            assert_eq!(c.subxacts, [801, 802]);
            assert_eq!(c.dropped_rels.len(), 1);
            assert_eq!(c.dropped_rels[0].rel_number, 16390);
            let objid = if major >= PgMajor::V18 {
                16390 | 1 << 32
            } else {
                16390
            };
            assert_eq!(
                c.dropped_stats,
                [DroppedStats {
                    kind: 2,
                    db: 5,
                    objid
                }]
            );
            assert_eq!(
                c.invals,
                [
                    Inval::Catcache {
                        cache_id: 7,
                        db: 5,
                        hash: 0xABCD
                    },
                    Inval::Relcache { db: 5, rel: 16390 }
                ]
            );
            assert_eq!((c.twophase_xid, c.gid), (Some(800), Some(&b"gid-1"[..])));
            assert_eq!(
                c.origin,
                Some(XactOrigin {
                    origin_lsn: Lsn(0x0123_4567_89AB_CDEF),
                    origin_timestamp: 42
                })
            );
            assert_ne!(c.xinfo & XACT_COMPLETION_FORCE_SYNC_COMMIT, 0);
        }
        // Read with the other major's stats size, the parts no longer line up.
        let r = xact(
            XLOG_XACT_COMMIT | XLOG_XACT_HAS_INFO,
            0,
            &full_commit(PgMajor::V15),
        );
        assert!(decode_xact(&r.view(), PgMajor::V18).is_err());
    }

    #[test]
    fn bare_commit_and_abort() {
        let r = xact(XLOG_XACT_COMMIT, 700, &Bytes::default().i64(-5).0);
        let Some(XactRecord::Commit(c)) = decode_xact(&r.view(), PgMajor::V15).unwrap() else {
            panic!();
        };
        assert_eq!((c.xid, c.commit_time, c.xinfo), (700, -5, 0));
        // Without XLOG_XACT_HAS_INFO nothing may follow the timestamp.
        let r = xact(XLOG_XACT_COMMIT, 700, &Bytes::default().i64(1).u32(0).0);
        assert!(matches!(
            decode_xact(&r.view(), PgMajor::V15).unwrap_err().kind,
            XactErrorKind::TrailingBytes { extra: 4, .. }
        ));
        // An abort carries no invalidations, even with the bit set.
        let main = Bytes::default().i64(1).u32(XACT_XINFO_HAS_INVALS).0;
        let r = xact(XLOG_XACT_ABORT | XLOG_XACT_HAS_INFO, 701, &main);
        let Some(XactRecord::Abort(a)) = decode_xact(&r.view(), PgMajor::V15).unwrap() else {
            panic!();
        };
        assert_eq!((a.xid, a.subxacts.len()), (701, 0));
    }

    #[test]
    fn hostile_counts_and_strings() {
        let with_subxacts = |n: i32| {
            Bytes::default()
                .i64(1)
                .u32(XACT_XINFO_HAS_SUBXACTS)
                .i32(n)
                .u32(1)
                .0
        };
        let r = xact(XLOG_XACT_COMMIT | XLOG_XACT_HAS_INFO, 1, &with_subxacts(-1));
        assert!(matches!(
            decode_xact(&r.view(), PgMajor::V15).unwrap_err().kind,
            XactErrorKind::NegativeCount { count: -1, .. }
        ));
        let r = xact(
            XLOG_XACT_COMMIT | XLOG_XACT_HAS_INFO,
            1,
            &with_subxacts(i32::MAX),
        );
        assert_eq!(
            decode_xact(&r.view(), PgMajor::V15).unwrap_err().kind,
            XactErrorKind::Truncated("subxacts")
        );
        let main = Bytes::default()
            .i64(1)
            .u32(XACT_XINFO_HAS_TWOPHASE | XACT_XINFO_HAS_GID)
            .u32(9)
            .raw(b"no-nul")
            .0;
        let r = xact(XLOG_XACT_ABORT_PREPARED | XLOG_XACT_HAS_INFO, 0, &main);
        assert_eq!(
            decode_xact(&r.view(), PgMajor::V18).unwrap_err().kind,
            XactErrorKind::UnterminatedGid
        );
        let r = xact(0x70, 1, &[0; 8]);
        assert_eq!(
            decode_xact(&r.view(), PgMajor::V18).unwrap_err().kind,
            XactErrorKind::UnknownInfo(0x70)
        );
        let r = record(RmgrId::HEAP.0, 0, 1, &[], &[0; 8]);
        assert!(matches!(
            decode_xact(&r.view(), PgMajor::V18).unwrap_err().kind,
            XactErrorKind::WrongRmgr(_)
        ));
    }

    /// A prepare record as `StartPrepare`/`EndPrepare` write it.
    fn prepare(magic: u32, total_len_delta: i64, major: PgMajor) -> Vec<u8> {
        let stats = if major >= PgMajor::V18 { 16 } else { 12 };
        let body = Bytes::default()
            .raw(b"g1\0\0\0\0\0\0") // gid, MAXALIGNed
            .u32(901)
            .u32(902)
            .u32(903)
            .u32(0) // 3 subxacts + padding
            .u32(1663)
            .u32(5)
            .u32(16400)
            .u32(0) // 1 abort rel + padding
            .raw(&vec![0x11; stats])
            .raw(&vec![0; stats.next_multiple_of(8) - stats]) // MAXALIGN padding
            .raw(&inval(-5, 5, 2608))
            .u32(0)
            .u8(0)
            .u8(0)
            .u16(0) // TwoPhaseRecordOnDisk end sentinel
            .0;
        let len = (SIZE_OF_XACT_PREPARE + body.len()) as i64 + 4 + total_len_delta;
        Bytes::default()
            .u32(magic)
            .u32(len as u32)
            .u32(900)
            .u32(5)
            .i64(77)
            .u32(10)
            .i32(3)
            .i32(0)
            .i32(1)
            .i32(0)
            .i32(1)
            .i32(1)
            .u8(1)
            .u8(0)
            .u16(3)
            .u32(0)
            .u32(0)
            .i64(0)
            .raw(&body)
            .0
    }

    #[test]
    fn prepare_layout() {
        for major in [PgMajor::V15, PgMajor::V18] {
            let main = prepare(TWOPHASE_MAGIC, 0, major);
            let r = xact(XLOG_XACT_PREPARE, 900, &main);
            let Some(XactRecord::Prepare(p)) = decode_xact(&r.view(), major).unwrap() else {
                panic!("not a prepare");
            };
            assert_eq!(
                (p.xid, p.gid, p.prepared_at, p.owner),
                (900, &b"g1"[..], 77, 10)
            );
            assert_eq!(p.subxacts, [901, 902, 903]);
            assert!(p.commit_rels.is_empty());
            assert_eq!(p.abort_rels[0].rel_number, 16400);
            assert_eq!(p.abort_stats.len(), 1);
            assert_eq!(p.invals, [Inval::Snapshot { db: 5, rel: 2608 }]);
            assert!(p.init_file_inval);

            let r = xact(XLOG_XACT_PREPARE, 900, &prepare(0x57F9_4533, 0, major));
            assert!(matches!(
                decode_xact(&r.view(), major).unwrap_err().kind,
                XactErrorKind::BadMagic { .. }
            ));
            let r = xact(XLOG_XACT_PREPARE, 900, &prepare(TWOPHASE_MAGIC, 8, major));
            assert!(matches!(
                decode_xact(&r.view(), major).unwrap_err().kind,
                XactErrorKind::BadTotalLen { .. }
            ));
        }
    }

    #[test]
    fn assignment_and_invalidations() {
        let main = Bytes::default().u32(10).i32(2).u32(11).u32(12).0;
        let r = xact(XLOG_XACT_ASSIGNMENT, 12, &main);
        assert_eq!(
            decode_xact(&r.view(), PgMajor::V15).unwrap(),
            Some(XactRecord::Assignment {
                top: 10,
                subxacts: vec![11, 12]
            })
        );
        let main = Bytes::default().i32(1).raw(&inval(-4, 5, 0)).0;
        let r = xact(XLOG_XACT_INVALIDATIONS, 12, &main);
        assert_eq!(
            decode_xact(&r.view(), PgMajor::V15).unwrap(),
            Some(XactRecord::Invalidations(vec![Inval::Relmap { db: 5 }]))
        );
    }
}
