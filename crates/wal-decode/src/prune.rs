//! Heap pruning and vacuum records as the line pointers they free: which
//! tuples of a page stopped existing, so that a mirror keyed by TID (the
//! TOAST chunk mirror) can forget them.
//!
//! ```text
//!  RecordView (Heap2) ── decode_prune(major) ──▶ Some(PruneRecord)  rel, block, redirected,
//!                                          │                         dead, unused
//!                                          └──▶ None                 any other record
//! ```
//!
//! [`decode_heap`](crate::decode_heap) keeps returning `None` for these
//! records (they carry no row change); this is a separate reading of the same
//! records. The layouts changed in 17, and opcode 0x30 changed meaning with
//! them:
//!
//! | major  | 0x10               | 0x20                 | 0x30                   |
//! |--------|--------------------|----------------------|------------------------|
//! | 15, 16 | PRUNE              | VACUUM               | FREEZE_PAGE (not here) |
//! | 17, 18 | PRUNE_ON_ACCESS    | PRUNE_VACUUM_SCAN    | PRUNE_VACUUM_CLEANUP   |
//!
//! Up to 16 (heapam_xlog.h; written by `heap_page_prune` in pruneheap.c and
//! `lazy_vacuum_heap_page` in vacuumlazy.c, read by `heap_xlog_prune` and
//! `heap_xlog_vacuum` in heapam.c):
//!
//! - PRUNE main data: `xl_heap_prune` = `latestRemovedXid` (16:
//!   `snapshotConflictHorizon`) `u32`, `nredirected` `u16`, `ndead` `u16`,
//!   and from 16 `isCatalogRel` `bool` (`SizeOfHeapPrune` 8 on 15, 9 on 16).
//!   Block 0 data: `2 * nredirected` offsets (from, to pairs), `ndead`
//!   offsets, then the unused offsets, as many as the data length leaves.
//! - VACUUM main data: `xl_heap_vacuum` = `nunused` `u16`. Block 0 data:
//!   `nunused` offsets, LP_DEAD line pointers becoming LP_UNUSED.
//!
//! From 17 (written by `log_heap_prune_and_freeze` in pruneheap.c, read by
//! `heap_xlog_deserialize_prune_and_freeze` in heapdesc.c), all three
//! opcodes share one layout:
//!
//! - main data: `xl_heap_prune` = `reason` `u8` (never filled in by the
//!   writer: ignored), `flags` `u8`, then the conflict horizon `u32`,
//!   unaligned, when `XLHP_HAS_CONFLICT_HORIZON` is set.
//! - block 0 data, each part present when its flag is set, in this order:
//!   `xlhp_freeze_plans` (`nplans` `u16`, 2 bytes of padding, `nplans` ×
//!   12-byte `xlhp_freeze_plan`), redirections (`xlhp_prune_items`:
//!   `ntargets` `u16`, `2 * ntargets` offsets), dead items, unused items
//!   (each `ntargets` `u16` + offsets), then the frozen tuples' offsets
//!   (the plans' `ntuples` added up). The freeze plans come first because
//!   they hold a `TransactionId`; everything after them is 2-byte data, so
//!   there is no padding between parts.
//!
//! **Full-page images.** Every writer registers block 0 with
//! `REGBUF_STANDARD` only (no `REGBUF_KEEP_DATA`), so when `XLogInsert`
//! takes a full-page image of it, the offset arrays are left out of the
//! record and redo restores the image instead. Such a record decodes with
//! empty lists and [`PruneRecord::image_only`] set: which line pointers it
//! freed is then only known from the image (line pointers that are no
//! longer `LP_NORMAL`), not from the record.
//!
//! Offsets are handed out as logged; their range is not checked against a
//! page.

use walshadow_types::{BlockNumber, PgMajor, RelFileLocator};

use crate::cursor::{Cursor, Truncated};
use crate::heap::{
    HeapDecodeError, HeapErrorKind, XLOG_HEAP_INIT_PAGE, XLOG_HEAP_OPMASK, XLOG_HEAP2_FREEZE_PAGE,
    XLOG_HEAP2_PRUNE, XLOG_HEAP2_VACUUM, block0, no_trailing, trunc,
};
use crate::record::RecordView;
use crate::rmgr::RmgrId;

/// 17+ names of the Heap2 opcodes 0x10..0x30 (the same values as
/// [`XLOG_HEAP2_PRUNE`], [`XLOG_HEAP2_VACUUM`] and [`XLOG_HEAP2_FREEZE_PAGE`]
/// up to 16).
pub const XLOG_HEAP2_PRUNE_ON_ACCESS: u8 = 0x10;
pub const XLOG_HEAP2_PRUNE_VACUUM_SCAN: u8 = 0x20;
pub const XLOG_HEAP2_PRUNE_VACUUM_CLEANUP: u8 = 0x30;

// xl_heap_prune flags (17+).
pub const XLHP_IS_CATALOG_REL: u8 = 1 << 1;
pub const XLHP_CLEANUP_LOCK: u8 = 1 << 2;
pub const XLHP_HAS_CONFLICT_HORIZON: u8 = 1 << 3;
pub const XLHP_HAS_FREEZE_PLANS: u8 = 1 << 4;
pub const XLHP_HAS_REDIRECTIONS: u8 = 1 << 5;
pub const XLHP_HAS_DEAD_ITEMS: u8 = 1 << 6;
pub const XLHP_HAS_NOW_UNUSED_ITEMS: u8 = 1 << 7;

const SIZE_OF_HEAP_PRUNE_15: usize = 8; // SizeOfHeapPrune, 15
const SIZE_OF_HEAP_PRUNE_16: usize = 9; // SizeOfHeapPrune, 16 (+ isCatalogRel)
const SIZE_OF_HEAP_PRUNE_17: usize = 2; // SizeOfHeapPrune, 17+ (reason, flags)
const SIZE_OF_HEAP_VACUUM: usize = 2; // SizeOfHeapVacuum
/// `offsetof(xlhp_freeze_plans, plans)`: `nplans` and 2 bytes of padding.
const SIZE_OF_FREEZE_PLANS_HEADER: usize = 4;
/// `sizeof(xlhp_freeze_plan)`: xmax, t_infomask2, t_infomask, frzflags,
/// padding, ntuples.
const SIZE_OF_FREEZE_PLAN: usize = 12;
/// Offset of `ntuples` in `xlhp_freeze_plan`.
const FREEZE_PLAN_NTUPLES_AT: usize = 10;

/// The line pointers of one heap page that a pruning or vacuum record
/// changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneRecord {
    pub rel: RelFileLocator,
    pub block: BlockNumber,
    /// `(from, to)`: line pointer `from` now redirects to `to` (the root of
    /// a HOT chain whose first tuples were removed); `from`'s tuple is gone,
    /// `to`'s lives on.
    pub redirected: Vec<(u16, u16)>,
    /// Line pointers now `LP_DEAD`: the tuple's storage is gone, the line
    /// pointer stays until index entries pointing at it are removed.
    pub dead: Vec<u16>,
    /// Line pointers now `LP_UNUSED`: removed heap-only tuples (pruning), or
    /// `LP_DEAD` line pointers released once their index entries are gone
    /// (VACUUM, PRUNE_VACUUM_CLEANUP); free for a new tuple from now on.
    pub unused: Vec<u16>,
    /// Block 0 carries a full-page image and the record left its offset
    /// arrays out: the lists are empty, and only the image tells which line
    /// pointers changed.
    pub image_only: bool,
}

impl PruneRecord {
    /// Every line pointer that stopped holding a tuple: redirect sources,
    /// dead and unused items (an unused one may already have been reported
    /// dead by an earlier record).
    pub fn vacated(&self) -> impl Iterator<Item = u16> + '_ {
        self.redirected
            .iter()
            .map(|&(from, _)| from)
            .chain(self.dead.iter().copied())
            .chain(self.unused.iter().copied())
    }
}

/// Which layout a Heap2 opcode has under `major`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// XLOG_HEAP2_PRUNE, up to 16.
    Prune,
    /// XLOG_HEAP2_VACUUM, up to 16.
    Vacuum,
    /// XLOG_HEAP2_PRUNE_*, 17+.
    PruneFreeze,
}

/// Decodes a pruning or vacuum record of `major` into the line pointers it
/// freed: `Some` for PRUNE and VACUUM (15, 16) and PRUNE_ON_ACCESS,
/// PRUNE_VACUUM_SCAN and PRUNE_VACUUM_CLEANUP (17+), `None` for any other
/// record (FREEZE_PAGE of 15 and 16 included: it frees nothing).
pub fn decode_prune(
    rec: &RecordView<'_>,
    major: PgMajor,
) -> Result<Option<PruneRecord>, HeapDecodeError> {
    if rec.rmgr() != RmgrId::HEAP2 {
        return Ok(None);
    }
    let info = rec.header.rmgr_info();
    let before_17 = major < PgMajor::V17;
    let layout = match info & XLOG_HEAP_OPMASK {
        XLOG_HEAP2_PRUNE if before_17 => Layout::Prune,
        XLOG_HEAP2_VACUUM if before_17 => Layout::Vacuum,
        XLOG_HEAP2_FREEZE_PAGE if before_17 => return Ok(None),
        XLOG_HEAP2_PRUNE_ON_ACCESS
        | XLOG_HEAP2_PRUNE_VACUUM_SCAN
        | XLOG_HEAP2_PRUNE_VACUUM_CLEANUP => Layout::PruneFreeze,
        _ => return Ok(None),
    };
    let out = if info & XLOG_HEAP_INIT_PAGE != 0 {
        // heap2_identify knows no PRUNE/VACUUM+INIT; decode_heap refuses it too.
        Err(HeapErrorKind::UnknownInfo)
    } else {
        match layout {
            Layout::Prune => decode_prune_15(rec, major),
            Layout::Vacuum => decode_vacuum_15(rec),
            Layout::PruneFreeze => decode_prune_freeze(rec),
        }
    };
    out.map(Some).map_err(|kind| HeapDecodeError {
        lsn: rec.lsn,
        rmgr: rec.rmgr(),
        info,
        kind,
    })
}

/// Block 0's data, or `None` when an image took its place.
fn block_data<'a>(
    rec: &RecordView<'a>,
) -> Result<(RelFileLocator, BlockNumber, Option<&'a [u8]>), HeapErrorKind> {
    let b = block0(rec)?;
    let data = rec.block_data(b);
    let data = (!(data.is_empty() && b.has_image())).then_some(data);
    Ok((b.locator, b.blkno, data))
}

fn image_only(rel: RelFileLocator, block: BlockNumber) -> PruneRecord {
    PruneRecord {
        rel,
        block,
        redirected: Vec::new(),
        dead: Vec::new(),
        unused: Vec::new(),
        image_only: true,
    }
}

/// Reads `n` `(from, to)` offset pairs.
fn pairs(c: &mut Cursor<'_>, n: u16, what: &'static str) -> Result<Vec<(u16, u16)>, HeapErrorKind> {
    let raw = c.take(usize::from(n) * 4).map_err(trunc(what))?;
    let mut p = Cursor::new(raw);
    (0..n)
        .map(|_| Ok((p.u16()?, p.u16()?)))
        .collect::<Result<_, Truncated>>()
        .map_err(trunc(what))
}

/// XLOG_HEAP2_PRUNE up to 16 (`heap_xlog_prune`).
fn decode_prune_15(rec: &RecordView<'_>, major: PgMajor) -> Result<PruneRecord, HeapErrorKind> {
    let mut c = Cursor::new(rec.main_data());
    let what = "xl_heap_prune";
    let _conflict_horizon = c.u32().map_err(trunc(what))?;
    let nredirected = c.u16().map_err(trunc(what))?;
    let ndead = c.u16().map_err(trunc(what))?;
    if major >= PgMajor::V16 {
        let _is_catalog_rel = c.u8().map_err(trunc(what))?;
        debug_assert_eq!(c.position(), SIZE_OF_HEAP_PRUNE_16);
    } else {
        debug_assert_eq!(c.position(), SIZE_OF_HEAP_PRUNE_15);
    }
    no_trailing(&c, what)?;

    let (rel, block, data) = block_data(rec)?;
    let Some(data) = data else {
        return Ok(image_only(rel, block));
    };
    let mut c = Cursor::new(data);
    let redirected = pairs(&mut c, nredirected, "prune redirected offsets")?;
    let dead = c
        .u16s(usize::from(ndead))
        .map_err(trunc("prune dead offsets"))?;
    // nunused is not logged: the rest of the data is the unused offsets.
    if !c.remaining().is_multiple_of(2) {
        return Err(HeapErrorKind::Truncated("prune unused offsets"));
    }
    let unused = c
        .u16s(c.remaining() / 2)
        .map_err(trunc("prune unused offsets"))?;
    Ok(PruneRecord {
        rel,
        block,
        redirected,
        dead,
        unused,
        image_only: false,
    })
}

/// XLOG_HEAP2_VACUUM up to 16 (`heap_xlog_vacuum`).
fn decode_vacuum_15(rec: &RecordView<'_>) -> Result<PruneRecord, HeapErrorKind> {
    let mut c = Cursor::new(rec.main_data());
    let what = "xl_heap_vacuum";
    let nunused = c.u16().map_err(trunc(what))?;
    debug_assert_eq!(c.position(), SIZE_OF_HEAP_VACUUM);
    no_trailing(&c, what)?;

    let (rel, block, data) = block_data(rec)?;
    let Some(data) = data else {
        return Ok(image_only(rel, block));
    };
    let mut c = Cursor::new(data);
    let unused = c
        .u16s(usize::from(nunused))
        .map_err(trunc("vacuum unused offsets"))?;
    no_trailing(&c, "vacuum unused offsets")?;
    Ok(PruneRecord {
        rel,
        block,
        redirected: Vec::new(),
        dead: Vec::new(),
        unused,
        image_only: false,
    })
}

/// XLOG_HEAP2_PRUNE_ON_ACCESS, _VACUUM_SCAN and _VACUUM_CLEANUP, 17+
/// (`heap_xlog_deserialize_prune_and_freeze`).
fn decode_prune_freeze(rec: &RecordView<'_>) -> Result<PruneRecord, HeapErrorKind> {
    let mut c = Cursor::new(rec.main_data());
    let what = "xl_heap_prune";
    let _reason = c.u8().map_err(trunc(what))?;
    let flags = c.u8().map_err(trunc(what))?;
    debug_assert_eq!(c.position(), SIZE_OF_HEAP_PRUNE_17);
    if flags & XLHP_HAS_CONFLICT_HORIZON != 0 {
        let _conflict_horizon = c.u32().map_err(trunc("xl_heap_prune conflict horizon"))?;
    }
    no_trailing(&c, what)?;

    let (rel, block, data) = block_data(rec)?;
    let Some(data) = data else {
        return Ok(image_only(rel, block));
    };
    let mut c = Cursor::new(data);
    let mut nfrozen = 0usize;
    if flags & XLHP_HAS_FREEZE_PLANS != 0 {
        let what = "xlhp_freeze_plans";
        let nplans = c.u16().map_err(trunc(what))?;
        c.take(SIZE_OF_FREEZE_PLANS_HEADER - 2)
            .map_err(trunc(what))?;
        for _ in 0..nplans {
            let plan = c
                .take(SIZE_OF_FREEZE_PLAN)
                .map_err(trunc("xlhp_freeze_plan"))?;
            let mut p = Cursor::new(plan);
            p.take(FREEZE_PLAN_NTUPLES_AT)
                .map_err(trunc("xlhp_freeze_plan"))?;
            let ntuples = p.u16().map_err(trunc("xlhp_freeze_plan"))?;
            nfrozen += usize::from(ntuples);
        }
    }
    let redirected = if flags & XLHP_HAS_REDIRECTIONS != 0 {
        let what = "redirected xlhp_prune_items";
        let n = c.u16().map_err(trunc(what))?;
        pairs(&mut c, n, what)?
    } else {
        Vec::new()
    };
    let dead = prune_items(
        &mut c,
        flags & XLHP_HAS_DEAD_ITEMS != 0,
        "dead xlhp_prune_items",
    )?;
    let unused = prune_items(
        &mut c,
        flags & XLHP_HAS_NOW_UNUSED_ITEMS != 0,
        "unused xlhp_prune_items",
    )?;
    c.take(nfrozen.saturating_mul(2))
        .map_err(trunc("frozen tuple offsets"))?;
    no_trailing(&c, "prune block data")?;
    Ok(PruneRecord {
        rel,
        block,
        redirected,
        dead,
        unused,
        image_only: false,
    })
}

/// One `xlhp_prune_items` of single offsets, when `present`.
fn prune_items(
    c: &mut Cursor<'_>,
    present: bool,
    what: &'static str,
) -> Result<Vec<u16>, HeapErrorKind> {
    if !present {
        return Ok(Vec::new());
    }
    let n = c.u16().map_err(trunc(what))?;
    c.u16s(usize::from(n)).map_err(trunc(what))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_record::{Blk, Bytes, REL, record, record_with_image};

    fn heap2(info: u8, data: &[u8], main: &[u8]) -> crate::WalRecord {
        record(
            RmgrId::HEAP2.0,
            info,
            0,
            &[Blk {
                id: 0,
                blkno: 7,
                data,
            }],
            main,
        )
    }

    fn offsets(v: &[u16]) -> Bytes {
        v.iter().fold(Bytes::default(), |b, &o| b.u16(o))
    }

    fn decoded(r: &crate::WalRecord, major: PgMajor) -> PruneRecord {
        decode_prune(&r.view(), major).unwrap().unwrap()
    }

    fn kind(r: &crate::WalRecord, major: PgMajor) -> HeapErrorKind {
        decode_prune(&r.view(), major).unwrap_err().kind
    }

    #[test]
    fn prune_15_and_16() {
        // 1 redirection, 2 dead, the rest (3) unused.
        let data = offsets(&[1, 4, 2, 3, 5, 6, 8]).0;
        let main15 = Bytes::default().u32(900).u16(1).u16(2).0;
        let main16 = Bytes::default().raw(&main15).u8(1).0;
        let want = PruneRecord {
            rel: REL,
            block: 7,
            redirected: vec![(1, 4)],
            dead: vec![2, 3],
            unused: vec![5, 6, 8],
            image_only: false,
        };
        let r = heap2(XLOG_HEAP2_PRUNE, &data, &main15);
        assert_eq!(decoded(&r, PgMajor::V15), want);
        assert_eq!(want.vacated().collect::<Vec<_>>(), [1, 2, 3, 5, 6, 8]);
        let r = heap2(XLOG_HEAP2_PRUNE, &data, &main16);
        assert_eq!(decoded(&r, PgMajor::V16), want);
        // Each major's main data is exactly its SizeOfHeapPrune.
        assert!(matches!(
            kind(&r, PgMajor::V15),
            HeapErrorKind::TrailingBytes { extra: 1, .. }
        ));
        let r = heap2(XLOG_HEAP2_PRUNE, &data, &main15);
        assert_eq!(
            kind(&r, PgMajor::V16),
            HeapErrorKind::Truncated("xl_heap_prune")
        );
        // Counts past the data; an odd byte in the unused part.
        let main = Bytes::default().u32(0).u16(2).u16(4).0;
        let r = heap2(XLOG_HEAP2_PRUNE, &data, &main);
        assert_eq!(
            kind(&r, PgMajor::V15),
            HeapErrorKind::Truncated("prune dead offsets")
        );
        let r = heap2(XLOG_HEAP2_PRUNE, &data[..13], &main15);
        assert_eq!(
            kind(&r, PgMajor::V15),
            HeapErrorKind::Truncated("prune unused offsets")
        );
    }

    #[test]
    fn vacuum_15() {
        let main = Bytes::default().u16(3).0;
        let r = heap2(XLOG_HEAP2_VACUUM, &offsets(&[2, 3, 9]).0, &main);
        let p = decoded(&r, PgMajor::V16);
        assert_eq!(
            (p.unused, p.dead, p.redirected),
            (vec![2, 3, 9], vec![], vec![])
        );
        // One offset too many, one too few.
        let r = heap2(XLOG_HEAP2_VACUUM, &offsets(&[2, 3, 9, 10]).0, &main);
        assert!(matches!(
            kind(&r, PgMajor::V15),
            HeapErrorKind::TrailingBytes { extra: 2, .. }
        ));
        let r = heap2(XLOG_HEAP2_VACUUM, &offsets(&[2, 3]).0, &main);
        assert_eq!(
            kind(&r, PgMajor::V15),
            HeapErrorKind::Truncated("vacuum unused offsets")
        );
    }

    /// Every sub-record, in `heap_xlog_deserialize_prune_and_freeze`'s order.
    fn prune_freeze_data() -> Vec<u8> {
        Bytes::default()
            .u16(2) // nplans
            .u16(0xEEEE) // padding
            .u32(0) // plan 1: xmax
            .u16(0)
            .u16(0)
            .u8(0)
            .u8(0xEE)
            .u16(2) // ntuples
            .u32(0) // plan 2
            .u16(0)
            .u16(0)
            .u8(0)
            .u8(0xEE)
            .u16(1)
            .u16(1) // redirections
            .u16(10)
            .u16(12)
            .u16(2) // dead
            .u16(3)
            .u16(4)
            .u16(1) // unused
            .u16(5)
            .u16(20) // frozen offsets, 2 + 1
            .u16(21)
            .u16(22)
            .0
    }

    #[test]
    fn prune_freeze_17() {
        let all = XLHP_HAS_FREEZE_PLANS
            | XLHP_HAS_REDIRECTIONS
            | XLHP_HAS_DEAD_ITEMS
            | XLHP_HAS_NOW_UNUSED_ITEMS;
        let main = Bytes::default()
            .u8(0xAB) // reason: not filled in by the writer
            .u8(all | XLHP_HAS_CONFLICT_HORIZON | XLHP_CLEANUP_LOCK)
            .u32(900)
            .0;
        let data = prune_freeze_data();
        for info in [
            XLOG_HEAP2_PRUNE_ON_ACCESS,
            XLOG_HEAP2_PRUNE_VACUUM_SCAN,
            XLOG_HEAP2_PRUNE_VACUUM_CLEANUP,
        ] {
            let r = heap2(info, &data, &main);
            for major in [PgMajor::V17, PgMajor::V18] {
                assert_eq!(
                    decoded(&r, major),
                    PruneRecord {
                        rel: REL,
                        block: 7,
                        redirected: vec![(10, 12)],
                        dead: vec![3, 4],
                        unused: vec![5],
                        image_only: false,
                    }
                );
            }
        }
        // Without the horizon flag the main data is two bytes.
        let mut no_horizon = main.clone();
        no_horizon[1] &= !XLHP_HAS_CONFLICT_HORIZON;
        let r = heap2(XLOG_HEAP2_PRUNE_ON_ACCESS, &data, &no_horizon);
        assert!(matches!(
            kind(&r, PgMajor::V18),
            HeapErrorKind::TrailingBytes { extra: 4, .. }
        ));
        let r = heap2(XLOG_HEAP2_PRUNE_ON_ACCESS, &data, &no_horizon[..2]);
        assert!(!decoded(&r, PgMajor::V18).dead.is_empty());
        // Frozen offsets missing or in excess.
        let r = heap2(XLOG_HEAP2_PRUNE_ON_ACCESS, &data[..data.len() - 2], &main);
        assert_eq!(
            kind(&r, PgMajor::V18),
            HeapErrorKind::Truncated("frozen tuple offsets")
        );
        let long = Bytes::default().raw(&data).u16(23).0;
        let r = heap2(XLOG_HEAP2_PRUNE_ON_ACCESS, &long, &main);
        assert!(matches!(
            kind(&r, PgMajor::V18),
            HeapErrorKind::TrailingBytes { extra: 2, .. }
        ));
        // Only unused items (PRUNE_VACUUM_CLEANUP's usual shape).
        let main = Bytes::default().u8(0).u8(XLHP_HAS_NOW_UNUSED_ITEMS).0;
        let data = Bytes::default().u16(2).u16(7).u16(8).0;
        let r = heap2(XLOG_HEAP2_PRUNE_VACUUM_CLEANUP, &data, &main);
        let p = decoded(&r, PgMajor::V17);
        assert_eq!(
            (p.unused, p.dead, p.redirected),
            (vec![7, 8], vec![], vec![])
        );
        // A count past the data.
        let data = Bytes::default().u16(3).u16(7).u16(8).0;
        let r = heap2(XLOG_HEAP2_PRUNE_VACUUM_CLEANUP, &data, &main);
        assert_eq!(
            kind(&r, PgMajor::V17),
            HeapErrorKind::Truncated("unused xlhp_prune_items")
        );
    }

    #[test]
    fn opcodes_per_major() {
        let main = Bytes::default().u16(1).0;
        let data = offsets(&[4]).0;
        // 0x30 is FREEZE_PAGE up to 16: not a pruning record.
        let r = heap2(XLOG_HEAP2_FREEZE_PAGE, &data, &main);
        assert_eq!(decode_prune(&r.view(), PgMajor::V15), Ok(None));
        assert_eq!(decode_prune(&r.view(), PgMajor::V16), Ok(None));
        // From 17, the same bytes read as xl_heap_prune (flags 0): no items,
        // so the offset is left over.
        assert!(matches!(
            kind(&r, PgMajor::V17),
            HeapErrorKind::TrailingBytes { .. }
        ));
        for info in [0x00, 0x40, 0x50, 0x60, 0x70] {
            let r = heap2(info, &data, &main);
            for major in PgMajor::ALL {
                assert_eq!(decode_prune(&r.view(), major), Ok(None), "{info:#x}");
            }
        }
        // Heap (not Heap2) 0x10 is DELETE.
        let r = record(RmgrId::HEAP.0, 0x10, 0, &[], &main);
        assert_eq!(decode_prune(&r.view(), PgMajor::V15), Ok(None));
        // XLOG_HEAP_INIT_PAGE on a pruning opcode, and no block 0.
        let r = heap2(XLOG_HEAP2_VACUUM | XLOG_HEAP_INIT_PAGE, &data, &main);
        assert_eq!(kind(&r, PgMajor::V15), HeapErrorKind::UnknownInfo);
        let r = record(RmgrId::HEAP2.0, XLOG_HEAP2_VACUUM, 0, &[], &main);
        let e = decode_prune(&r.view(), PgMajor::V15).unwrap_err();
        assert_eq!(e.kind, HeapErrorKind::MissingBlock(0));
        assert!(e.to_string().contains("0/1000028"), "{e}");
    }

    #[test]
    fn full_page_image_drops_the_offsets() {
        let cases = [
            (
                PgMajor::V15,
                XLOG_HEAP2_PRUNE,
                Bytes::default().u32(5).u16(1).u16(2).0,
            ),
            (PgMajor::V16, XLOG_HEAP2_VACUUM, Bytes::default().u16(3).0),
            (
                PgMajor::V18,
                XLOG_HEAP2_PRUNE_VACUUM_SCAN,
                Bytes::default()
                    .u8(0)
                    .u8(XLHP_HAS_DEAD_ITEMS | XLHP_HAS_CONFLICT_HORIZON)
                    .u32(5)
                    .0,
            ),
        ];
        for (major, info, main) in cases {
            let r = record_with_image(RmgrId::HEAP2.0, info, 3, &[], &main);
            assert_eq!(
                decoded(&r, major),
                PruneRecord {
                    rel: REL,
                    block: 3,
                    redirected: vec![],
                    dead: vec![],
                    unused: vec![],
                    image_only: true,
                },
                "{major}"
            );
            // The main data is still checked.
            let long = Bytes::default().raw(&main).u8(0).0;
            let r = record_with_image(RmgrId::HEAP2.0, info, 3, &[], &long);
            assert!(matches!(
                kind(&r, major),
                HeapErrorKind::TrailingBytes { extra: 1, .. }
            ));
        }
        // An image with the data kept (wal_consistency_checking) reads the data.
        let main = Bytes::default().u16(1).0;
        let r = record_with_image(RmgrId::HEAP2.0, XLOG_HEAP2_VACUUM, 3, &[9, 0], &main);
        let p = decoded(&r, PgMajor::V15);
        assert_eq!((p.unused, p.image_only), (vec![9], false));
        // Without an image, missing data is a truncation, not image_only.
        let r = heap2(XLOG_HEAP2_VACUUM, &[], &main);
        assert_eq!(
            kind(&r, PgMajor::V15),
            HeapErrorKind::Truncated("vacuum unused offsets")
        );
    }
}
