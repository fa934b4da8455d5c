//! Heap pages as a base backup carries them: one 8 KiB block of a table's
//! main fork in, its header, line pointers and tuple headers out.
//!
//! ```text
//!  0        24             pd_lower       pd_upper                pd_special = BLCKSZ
//!  ├────────┼──────────────┼──── free ────┼────────────────────────┤
//!  │ header │ ItemIdData × n              │ tuples (items), each a │
//!  │        │ (lp_off:15,lp_flags:2,      │ HeapTupleHeaderData +  │
//!  │        │  lp_len:15)                 │ null bitmap + data     │
//! ```
//!
//! Layouts: `PageHeaderData` (storage/bufpage.h), `ItemIdData`
//! (storage/itemid.h), `HeapTupleHeaderData` (access/htup_details.h); all
//! three are the same in PostgreSQL 15 to 18. A heap page has no special
//! space (`pd_special == BLCKSZ`, heap's `PageInit(page, BLCKSZ, 0)`).
//!
//! Checks, so that no hostile page can make a tuple slice point outside it:
//!
//! - the page is `BLCKSZ` (8192) bytes and says so in
//!   `pd_pagesize_version`, with layout version 4 (`PG_PAGE_LAYOUT_VERSION`);
//!   other block sizes are refused (walshadow reads only 8192-byte pages);
//! - a new page (`pd_upper == 0`, `PageIsNew`) must be all zeros and holds
//!   no tuples; the header of any other page passes PageIsVerified's sanity
//!   test (bufpage.c: known flag bits, `pd_lower <= pd_upper <= pd_special
//!   <= BLCKSZ`), and optionally its checksum (`pg_checksum_page` with the
//!   block number in the relation, not in the segment file);
//! - at most `MaxHeapTuplesPerPage` line pointers; an `LP_NORMAL` item lies
//!   in `[pd_upper, pd_special)` (PageRepairFragmentation's "corrupted line
//!   pointer" test) and is long enough for its tuple header; `t_hoff` lies
//!   inside the item; an `LP_REDIRECT` points at a line pointer of the page.
//!
//! A page that fails is a [`PageDamage`]; callers name the file and block
//! with [`PageError`]. Nothing here panics on page bytes.
//!
//! What this does not judge: whether a tuple is visible (the visibility
//! gate reads xmin/xmax/infomask), nor the attribute bytes (the row
//! decoder walks them from [`PageTuple::tuple_ref`]).

#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use walshadow_pg_format::cursor::{u16_at, u32_at};
use walshadow_pg_format::page::checksum_page as pg_checksum_page;
use walshadow_rows::{SIZEOF_HEAP_TUPLE_HEADER, TupleRef};
use walshadow_types::{BlockNumber, Lsn, Xid};

pub use walshadow_pg_format::page::BLCKSZ;

/// `SizeOfPageHeaderData`: where the line pointer array starts.
pub const SIZE_OF_PAGE_HEADER_DATA: usize = 24;
/// `PG_PAGE_LAYOUT_VERSION` (4 since PostgreSQL 8.3).
pub const PG_PAGE_LAYOUT_VERSION: u8 = 4;
/// `MaxHeapTuplesPerPage` for 8 KiB pages: (8192 - 24) / (MAXALIGN(23) + 4).
pub const MAX_HEAP_TUPLES_PER_PAGE: usize = 291;
/// `PD_VALID_FLAG_BITS`: `PD_HAS_FREE_LINES | PD_PAGE_FULL | PD_ALL_VISIBLE`.
const PD_VALID_FLAG_BITS: u16 = 0x0007;
/// `sizeof(ItemIdData)`.
const ITEM_ID_SIZE: usize = 4;

/// Why a page is not a heap page walshadow can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageDamage {
    #[error("{len} bytes is not a whole {BLCKSZ}-byte page")]
    Length { len: usize },
    #[error(
        "pd_pagesize_version says {size}-byte pages; walshadow reads only {BLCKSZ}-byte pages \
         (a server built with another --with-blocksize cannot be loaded from a backup: use \
         initial_load 'copy')"
    )]
    PageSize { size: usize },
    #[error("page layout version {version}, expected {PG_PAGE_LAYOUT_VERSION}")]
    LayoutVersion { version: u8 },
    #[error("pd_upper is 0 (a new page) but the page is not all zeros")]
    NewNotZero,
    #[error(
        "insane page header: pd_flags {flags:#06x}, pd_lower {lower}, pd_upper {upper}, \
         pd_special {special}"
    )]
    Header {
        flags: u16,
        lower: u16,
        upper: u16,
        special: u16,
    },
    #[error("pd_special {special} leaves special space: not a heap page")]
    SpecialSpace { special: u16 },
    #[error("{count} line pointers, more than a heap page can hold ({MAX_HEAP_TUPLES_PER_PAGE})")]
    TooManyItems { count: usize },
    #[error(
        "checksum {stored:#06x} stored, {computed:#06x} computed (pd_lsn {lsn}; a page \
         written while the backup read it can read torn)"
    )]
    Checksum {
        stored: u16,
        computed: u16,
        lsn: Lsn,
    },
    #[error("line pointer {offset}: {detail}")]
    LinePointer { offset: u16, detail: String },
    #[error("tuple at line pointer {offset}: {detail}")]
    TupleHeader { offset: u16, detail: String },
}

impl PageDamage {
    /// A checksum mismatch on a page last changed at or after `lsn`: when
    /// `lsn` is the backup's start, the server may have been writing the
    /// page while it was read (basebackup.c skips verifying such pages for
    /// the same reason; WAL replay would restore them).
    pub fn is_checksum_after(&self, lsn: Lsn) -> bool {
        matches!(self, PageDamage::Checksum { lsn: l, .. } if *l >= lsn)
    }
}

/// A damaged page, with the relation file and block it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("relation file {file}, block {block}: {damage}")]
pub struct PageError {
    /// The file as the backup names it (`base/<db>/<relfilenode>[.<seg>]`).
    pub file: String,
    /// The block number in the relation (`segment * RELSEG_SIZE + page`).
    pub block: BlockNumber,
    pub damage: PageDamage,
}

/// `PageHeaderData`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PageHeader {
    /// `pd_lsn`: the LSN of the last WAL record that changed the page.
    pub lsn: Lsn,
    pub checksum: u16,
    pub flags: u16,
    pub lower: u16,
    pub upper: u16,
    pub special: u16,
    pub pagesize_version: u16,
    pub prune_xid: Xid,
}

impl PageHeader {
    fn read(page: &[u8]) -> Option<PageHeader> {
        let xlogid = u32_at(page, 0)?;
        let xrecoff = u32_at(page, 4)?;
        Some(PageHeader {
            lsn: Lsn((u64::from(xlogid) << 32) | u64::from(xrecoff)),
            checksum: u16_at(page, 8)?,
            flags: u16_at(page, 10)?,
            lower: u16_at(page, 12)?,
            upper: u16_at(page, 14)?,
            special: u16_at(page, 16)?,
            pagesize_version: u16_at(page, 18)?,
            prune_xid: u32_at(page, 20)?,
        })
    }

    /// `PageGetPageSize`.
    pub fn page_size(&self) -> usize {
        usize::from(self.pagesize_version & 0xFF00)
    }

    /// `PageGetPageLayoutVersion`.
    pub fn layout_version(&self) -> u8 {
        (self.pagesize_version & 0x00FF) as u8
    }
}

/// `lp_flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LpFlags {
    /// `LP_UNUSED`: free for reuse.
    Unused,
    /// `LP_NORMAL`: a tuple with storage.
    Normal,
    /// `LP_REDIRECT`: a HOT chain's root, pointing at line pointer `lp_off`.
    Redirect,
    /// `LP_DEAD`: dead, storage maybe reclaimed.
    Dead,
}

/// `ItemIdData`: one line pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemId {
    /// Offset of the item from the page start; for a redirect, the offset
    /// number it points at.
    pub lp_off: u16,
    pub lp_flags: LpFlags,
    pub lp_len: u16,
}

impl ItemId {
    /// The bit fields of one little-endian word: `lp_off` bits 0..15,
    /// `lp_flags` 15..17, `lp_len` 17..32 (GCC's layout on every platform
    /// PostgreSQL ships on little-endian).
    fn from_word(w: u32) -> ItemId {
        ItemId {
            lp_off: (w & 0x7FFF) as u16,
            lp_flags: match (w >> 15) & 0x3 {
                0 => LpFlags::Unused,
                1 => LpFlags::Normal,
                2 => LpFlags::Redirect,
                _ => LpFlags::Dead,
            },
            lp_len: (w >> 17) as u16,
        }
    }
}

/// One `LP_NORMAL` item: a heap tuple as it sits on the page, live or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageTuple<'a> {
    /// Its line pointer's offset number (1-based), the `ip_posid` of its
    /// own ctid.
    pub offset: u16,
    /// `t_xmin`.
    pub xmin: Xid,
    /// `t_xmax`.
    pub xmax: Xid,
    /// `t_cid`, or `t_xvac` with `HEAP_MOVED` in `infomask`.
    pub cid_or_xvac: u32,
    /// `t_ctid` (block, offset): itself, or its newer version after an
    /// update.
    pub ctid: (BlockNumber, u16),
    pub infomask: u16,
    pub infomask2: u16,
    /// `t_hoff`: where the attributes start.
    pub hoff: u8,
    /// The whole item, `HeapTupleHeaderData` first (`lp_len` bytes).
    pub data: &'a [u8],
}

impl<'a> PageTuple<'a> {
    /// The header fields the visibility gate decides on (already read by
    /// [`HeapPage::parse`]; no second parse of the bytes).
    pub fn visibility_header(&self) -> crate::visibility::TupleHeader {
        crate::visibility::TupleHeader {
            xmin: self.xmin,
            xmax: self.xmax,
            xvac: self.cid_or_xvac,
            infomask: self.infomask,
            infomask2: self.infomask2,
        }
    }

    /// The tuple as the row decoder reads it (the same shape the WAL path
    /// builds from `xl_heap_header`: the bytes from `t_bits` on).
    pub fn tuple_ref(&self) -> TupleRef<'a> {
        TupleRef::from_wal(
            self.infomask2,
            self.infomask,
            self.hoff,
            // parse checked the item is longer than its header.
            self.data
                .get(SIZEOF_HEAP_TUPLE_HEADER..)
                .unwrap_or_default(),
        )
    }

    fn read(offset: u16, item: &'a [u8]) -> Result<PageTuple<'a>, PageDamage> {
        let bad = |detail: String| PageDamage::TupleHeader { offset, detail };
        if item.len() < SIZEOF_HEAP_TUPLE_HEADER {
            return Err(bad(format!(
                "lp_len {} is shorter than a tuple header",
                item.len()
            )));
        }
        let field32 = |at| u32_at(item, at).unwrap_or_default();
        let field16 = |at| u16_at(item, at).unwrap_or_default();
        let hoff = item.get(22).copied().unwrap_or_default();
        if usize::from(hoff) < SIZEOF_HEAP_TUPLE_HEADER || usize::from(hoff) > item.len() {
            return Err(bad(format!(
                "t_hoff {hoff} outside {SIZEOF_HEAP_TUPLE_HEADER}..={}",
                item.len()
            )));
        }
        Ok(PageTuple {
            offset,
            xmin: field32(0),
            xmax: field32(4),
            cid_or_xvac: field32(8),
            // BlockIdData is two uint16 halves, high first.
            ctid: (
                (u32::from(field16(12)) << 16) | u32::from(field16(14)),
                field16(16),
            ),
            infomask2: field16(18),
            infomask: field16(20),
            hoff,
            data: item,
        })
    }
}

/// A parsed heap page. Borrowing: tuples are slices of the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeapPage<'a> {
    header: PageHeader,
    is_new: bool,
    item_ids: Vec<ItemId>,
    tuples: Vec<PageTuple<'a>>,
}

impl<'a> HeapPage<'a> {
    /// Parses block `block` of a heap relation's main fork. With
    /// `verify_checksum` (a cluster with data checksums), a page whose
    /// `pd_checksum` does not match is [`PageDamage::Checksum`].
    pub fn parse(
        page: &'a [u8],
        block: BlockNumber,
        verify_checksum: bool,
    ) -> Result<HeapPage<'a>, PageDamage> {
        if page.len() != BLCKSZ {
            return Err(PageDamage::Length { len: page.len() });
        }
        let header = PageHeader::read(page).ok_or(PageDamage::Length { len: page.len() })?;
        if header.upper == 0 {
            // PageIsNew: only an all-zero page is a valid new page.
            if page.iter().any(|b| *b != 0) {
                return Err(PageDamage::NewNotZero);
            }
            return Ok(HeapPage {
                header,
                is_new: true,
                item_ids: Vec::new(),
                tuples: Vec::new(),
            });
        }
        if header.page_size() != BLCKSZ {
            return Err(PageDamage::PageSize {
                size: header.page_size(),
            });
        }
        if header.layout_version() != PG_PAGE_LAYOUT_VERSION {
            return Err(PageDamage::LayoutVersion {
                version: header.layout_version(),
            });
        }
        if verify_checksum {
            let computed = pg_checksum_page(page, block);
            if computed != header.checksum {
                return Err(PageDamage::Checksum {
                    stored: header.checksum,
                    computed,
                    lsn: header.lsn,
                });
            }
        }
        let (lower, upper, special) = (
            usize::from(header.lower),
            usize::from(header.upper),
            usize::from(header.special),
        );
        let sane = header.flags & !PD_VALID_FLAG_BITS == 0
            && lower <= upper
            && upper <= special
            && special <= BLCKSZ
            && lower >= SIZE_OF_PAGE_HEADER_DATA
            && (lower - SIZE_OF_PAGE_HEADER_DATA).is_multiple_of(ITEM_ID_SIZE);
        if !sane {
            return Err(PageDamage::Header {
                flags: header.flags,
                lower: header.lower,
                upper: header.upper,
                special: header.special,
            });
        }
        if special != BLCKSZ {
            return Err(PageDamage::SpecialSpace {
                special: header.special,
            });
        }
        let count = (lower - SIZE_OF_PAGE_HEADER_DATA) / ITEM_ID_SIZE;
        if count > MAX_HEAP_TUPLES_PER_PAGE {
            return Err(PageDamage::TooManyItems { count });
        }
        let linp = page
            .get(SIZE_OF_PAGE_HEADER_DATA..lower)
            .unwrap_or_default();
        let item_ids: Vec<ItemId> = linp
            .chunks_exact(ITEM_ID_SIZE)
            .map(|w| ItemId::from_word(u32_at(w, 0).unwrap_or_default()))
            .collect();
        let mut tuples = Vec::with_capacity(item_ids.len());
        for (i, id) in item_ids.iter().enumerate() {
            // count <= 291, so offset numbers fit.
            let offset = (i + 1) as u16;
            let bad = |detail: String| PageDamage::LinePointer { offset, detail };
            match id.lp_flags {
                LpFlags::Unused | LpFlags::Dead => {}
                LpFlags::Redirect => {
                    if id.lp_off == 0 || usize::from(id.lp_off) > count {
                        return Err(bad(format!(
                            "redirect to {} outside 1..={count}",
                            id.lp_off
                        )));
                    }
                }
                LpFlags::Normal => {
                    let (off, len) = (usize::from(id.lp_off), usize::from(id.lp_len));
                    if off < upper || off + len > special {
                        return Err(bad(format!(
                            "item {off}+{len} outside the tuple space {upper}..{special}"
                        )));
                    }
                    let item = page.get(off..off + len).unwrap_or_default();
                    tuples.push(PageTuple::read(offset, item)?);
                }
            }
        }
        Ok(HeapPage {
            header,
            is_new: false,
            item_ids,
            tuples,
        })
    }

    pub fn header(&self) -> &PageHeader {
        &self.header
    }

    /// A new (all-zero) page: never initialised, no tuples.
    pub fn is_new(&self) -> bool {
        self.is_new
    }

    /// Every line pointer, offset number `i + 1` at index `i`.
    pub fn item_ids(&self) -> &[ItemId] {
        &self.item_ids
    }

    /// The `LP_NORMAL` items in offset order: live tuples and dead ones a
    /// vacuum has not pruned yet alike.
    pub fn tuples(&self) -> &[PageTuple<'a>] {
        &self.tuples
    }
}

/// Pages built in memory for tests of the page walk (this crate's and the
/// `BASE_BACKUP` sink's).
#[doc(hidden)]
#[allow(clippy::indexing_slicing)]
pub mod test_page {
    use super::*;

    /// Builds a heap page the way PageAddItem does: items from the end,
    /// line pointers from the front. Each item is a tuple header with
    /// `xmin = 100 + i` and `t_hoff` 24, then `payload`.
    pub fn build_page(items: &[&[u8]], block: BlockNumber, checksum: bool) -> Vec<u8> {
        let mut page = vec![0u8; BLCKSZ];
        let mut upper = BLCKSZ;
        for (i, payload) in items.iter().enumerate() {
            let len = 24 + payload.len();
            upper -= len.div_ceil(8) * 8;
            let t = &mut page[upper..upper + len];
            t[0..4].copy_from_slice(&(100 + i as u32).to_le_bytes());
            t[12..14].copy_from_slice(&((block >> 16) as u16).to_le_bytes());
            t[14..16].copy_from_slice(&(block as u16).to_le_bytes());
            t[16..18].copy_from_slice(&(i as u16 + 1).to_le_bytes());
            t[18..20].copy_from_slice(&1u16.to_le_bytes()); // one attribute
            t[20..22].copy_from_slice(&0x0800u16.to_le_bytes()); // HEAP_XMAX_INVALID
            t[22] = 24;
            t[24..].copy_from_slice(payload);
            let w = upper as u32 | (1 << 15) | ((len as u32) << 17);
            let at = SIZE_OF_PAGE_HEADER_DATA + 4 * i;
            page[at..at + 4].copy_from_slice(&w.to_le_bytes());
        }
        let lower = SIZE_OF_PAGE_HEADER_DATA + 4 * items.len();
        page[12..14].copy_from_slice(&(lower as u16).to_le_bytes());
        page[14..16].copy_from_slice(&(upper as u16).to_le_bytes());
        page[16..18].copy_from_slice(&(BLCKSZ as u16).to_le_bytes());
        page[18..20].copy_from_slice(&(BLCKSZ as u16 | 4).to_le_bytes());
        if checksum {
            let sum = pg_checksum_page(&page, block);
            page[8..10].copy_from_slice(&sum.to_le_bytes());
        }
        page
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::test_page::build_page;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_items_and_headers() {
        let page = build_page(&[b"abcd", b"", b"0123456789"], 7, true);
        let p = HeapPage::parse(&page, 7, true).unwrap();
        assert!(!p.is_new());
        assert_eq!(p.item_ids().len(), 3);
        let t = p.tuples();
        assert_eq!(t.len(), 3);
        assert_eq!(
            (t[0].offset, t[0].xmin, t[0].ctid, t[0].hoff),
            (1, 100, (7, 1), 24)
        );
        assert_eq!(t[2].data.len(), 34);
        assert_eq!(t[2].infomask, 0x0800);
        let r = t[2].tuple_ref();
        assert_eq!((r.natts(), r.hoff, r.data.len()), (1, 24, 11));
        assert_eq!(&r.data[1..], b"0123456789");
        for t in t {
            assert_eq!(
                Some(t.visibility_header()),
                crate::visibility::TupleHeader::parse(t.data).ok()
            );
        }
        // The checksum is per block: the same page as block 8 fails.
        assert!(matches!(
            HeapPage::parse(&page, 8, true),
            Err(PageDamage::Checksum { .. })
        ));
        assert!(HeapPage::parse(&page, 8, false).is_ok());
        // High ctid blocks.
        let page = build_page(&[b"x"], 0x0102_0304, false);
        let p = HeapPage::parse(&page, 0, false).unwrap();
        assert_eq!(p.tuples()[0].ctid, (0x0102_0304, 1));
    }

    #[test]
    fn new_pages_and_refusals() {
        let zero = vec![0u8; BLCKSZ];
        let p = HeapPage::parse(&zero, 0, true).unwrap();
        assert!(p.is_new() && p.tuples().is_empty());
        let mut dirty = zero.clone();
        dirty[5000] = 1;
        assert_eq!(
            HeapPage::parse(&dirty, 0, false),
            Err(PageDamage::NewNotZero)
        );
        assert_eq!(
            HeapPage::parse(&zero[..100], 0, false),
            Err(PageDamage::Length { len: 100 })
        );
        let good = build_page(&[b"abc"], 0, false);
        let mut p16 = good.clone();
        p16[18..20].copy_from_slice(&(16384u16 | 4).to_le_bytes());
        let e = HeapPage::parse(&p16, 0, false).unwrap_err();
        assert_eq!(e, PageDamage::PageSize { size: 16384 });
        assert!(e.to_string().contains("only 8192-byte pages"), "{e}");
        let mut v5 = good.clone();
        v5[18] = 5;
        assert_eq!(
            HeapPage::parse(&v5, 0, false),
            Err(PageDamage::LayoutVersion { version: 5 })
        );
        let mut btree = good.clone();
        btree[16..18].copy_from_slice(&8176u16.to_le_bytes());
        assert_eq!(
            HeapPage::parse(&btree, 0, false),
            Err(PageDamage::SpecialSpace { special: 8176 })
        );
        let mut flags = good.clone();
        flags[10] = 0x08;
        assert!(matches!(
            HeapPage::parse(&flags, 0, false),
            Err(PageDamage::Header { .. })
        ));
        // A line pointer into the free space.
        let mut lp = good.clone();
        lp[24..28].copy_from_slice(&(100u32 | (1 << 15) | (30 << 17)).to_le_bytes());
        assert!(matches!(
            HeapPage::parse(&lp, 0, false),
            Err(PageDamage::LinePointer { offset: 1, .. })
        ));
        // t_hoff past the item.
        let mut hoff = good.clone();
        let off = usize::from(u16::from_le_bytes([good[14], good[15]]));
        hoff[off + 22] = 200;
        assert!(matches!(
            HeapPage::parse(&hoff, 0, false),
            Err(PageDamage::TupleHeader { offset: 1, .. })
        ));
        let at = PageDamage::Checksum {
            stored: 1,
            computed: 2,
            lsn: Lsn(0x500),
        };
        assert!(at.is_checksum_after(Lsn(0x400)) && !at.is_checksum_after(Lsn(0x600)));
    }

    #[test]
    fn redirect_and_dead_pointers() {
        let mut page = build_page(&[b"abc", b"def"], 0, false);
        // Line pointer 1 redirects to 2; add a dead one without storage.
        page[24..28].copy_from_slice(&(2u32 | (2 << 15)).to_le_bytes());
        page[12..14].copy_from_slice(&(24u16 + 12).to_le_bytes());
        page[32..36].copy_from_slice(&(3u32 << 15).to_le_bytes());
        let p = HeapPage::parse(&page, 0, false).unwrap();
        assert_eq!(p.item_ids()[0].lp_flags, LpFlags::Redirect);
        assert_eq!(p.item_ids()[2].lp_flags, LpFlags::Dead);
        assert_eq!(p.tuples().len(), 1);
        assert_eq!(p.tuples()[0].offset, 2);
        page[24..28].copy_from_slice(&(9u32 | (2 << 15)).to_le_bytes());
        assert!(matches!(
            HeapPage::parse(&page, 0, false),
            Err(PageDamage::LinePointer { offset: 1, .. })
        ));
    }

    /// Every tuple parse hands out stays inside the page and the decoder
    /// can walk it without panicking.
    fn check_no_panic(page: &[u8]) {
        if let Ok(p) = HeapPage::parse(page, 3, false) {
            for t in p.tuples() {
                assert!(t.data.len() >= SIZEOF_HEAP_TUPLE_HEADER);
                let _ = walshadow_rows::ToastChunk::from_tuple(t.tuple_ref());
            }
        }
        let _ = HeapPage::parse(page, 3, true);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn corrupted_pages_never_panic(
            flips in proptest::collection::vec((0usize..BLCKSZ, any::<u8>()), 1..24),
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..12),
        ) {
            let items: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
            let mut page = build_page(&items, 3, false);
            prop_assert!(HeapPage::parse(&page, 3, false).is_ok());
            for (at, v) in flips {
                page[at] = v;
            }
            check_no_panic(&page);
        }

        #[test]
        fn header_corruption_never_panics(
            header in proptest::collection::vec(any::<u8>(), 24..=24),
            linp in proptest::collection::vec(any::<u32>(), 0..300),
        ) {
            let mut page = build_page(&[&b"abcdefgh"[..]; 4], 3, false);
            page[..24].copy_from_slice(&header);
            for (i, w) in linp.iter().enumerate() {
                let at = 24 + 4 * i;
                page[at..at + 4].copy_from_slice(&w.to_le_bytes());
            }
            check_no_panic(&page);
        }
    }
}
