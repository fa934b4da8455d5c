//! SLRU segment files as a backup copied them (src/backend/access/transam/
//! slru.c): pages of `BLCKSZ`, [`SLRU_PAGES_PER_SEGMENT`] to a segment
//! file, page numbers wrapping with the 32-bit ids they hold.
//!
//! A page the copy does not hold is classified against the copied range:
//! the SLRU always holds one circular run of pages (truncation removes
//! whole segments from its old end, new pages extend its new end), so a
//! missing page past the newest one was never copied (written after the
//! copy), one before the oldest was truncated, and one between copied
//! pages is a hole in a damaged copy.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::error::GateError;

/// `BLCKSZ` of the builds walshadow reads (the page walk refuses others).
pub use walshadow_pg_format::page::BLCKSZ;
/// `SLRU_PAGES_PER_SEGMENT` (slru.h, 15 to 18).
pub const SLRU_PAGES_PER_SEGMENT: u32 = 32;

/// The SLRUs the gate reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slru {
    /// `pg_xact/`: commit status, two bits per xid (clog.c).
    Xact,
    /// `pg_multixact/offsets/`: a member offset per multixact.
    MultiXactOffsets,
    /// `pg_multixact/members/`: member xids and their lock modes.
    MultiXactMembers,
}

impl Slru {
    /// The directory under the data directory.
    pub fn dir(self) -> &'static str {
        match self {
            Slru::Xact => "pg_xact",
            Slru::MultiXactOffsets => "pg_multixact/offsets",
            Slru::MultiXactMembers => "pg_multixact/members",
        }
    }

    /// Which SLRU a backup member path (`pg_xact/0000`, with or without a
    /// leading `./`) belongs to, and its file name.
    pub fn of_backup_path(path: &str) -> Option<(Slru, &str)> {
        let path = path.strip_prefix("./").unwrap_or(path);
        [Slru::Xact, Slru::MultiXactOffsets, Slru::MultiXactMembers]
            .into_iter()
            .find_map(|s| {
                let name = path.strip_prefix(s.dir())?.strip_prefix('/')?;
                (!name.contains('/')).then_some((s, name))
            })
    }

    /// Entries one page holds: `CLOG_XACTS_PER_PAGE`,
    /// `MULTIXACT_OFFSETS_PER_PAGE`, `MULTIXACT_MEMBERS_PER_PAGE`.
    pub(crate) fn items_per_page(self) -> u32 {
        match self {
            Slru::Xact => super::xact::CLOG_XACTS_PER_PAGE,
            Slru::MultiXactOffsets => super::multixact::MULTIXACT_OFFSETS_PER_PAGE,
            Slru::MultiXactMembers => super::multixact::MULTIXACT_MEMBERS_PER_PAGE,
        }
    }

    /// Pages of the circular page space: 2^32 entries, the last page
    /// partial for members (1636 entries do not divide 2^32).
    pub(crate) fn page_count(self) -> u32 {
        let per = u64::from(self.items_per_page());
        u32::try_from((1u64 << 32).div_ceil(per)).unwrap_or(u32::MAX)
    }

    pub(crate) fn segment_count(self) -> u32 {
        self.page_count().div_ceil(SLRU_PAGES_PER_SEGMENT)
    }

    /// What one entry is, for messages.
    pub(crate) fn item_name(self) -> &'static str {
        match self {
            Slru::Xact => "xid",
            Slru::MultiXactOffsets => "multixact",
            Slru::MultiXactMembers => "member offset",
        }
    }
}

/// The segment number an SLRU file name spells, or `None` for a name that
/// is not a segment (PostgreSQL ignores those too). Short names are
/// `%04X` (4 to 6 digits, the only form `pg_xact` and `pg_multixact` use
/// in 15 to 18); long names (`long_segment_names`, 17+) are `%015llX`.
/// Both are accepted, as `SlruCorrectSegmentFilenameLength` and
/// `SlruScanDirectory` do: upper-case hex digits only.
pub fn segment_number(name: &str) -> Option<u64> {
    let len_ok = matches!(name.len(), 4..=6 | 15);
    let digits_ok = name
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b));
    if !len_ok || !digits_ok {
        return None;
    }
    u64::from_str_radix(name, 16).ok()
}

/// Where a page the copy lacks sits relative to the pages it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Missing {
    /// Past the newest copied page: written after the copy, if ever.
    Newer,
    /// Before the oldest copied page: truncated.
    Older { oldest_item: u32 },
    /// Between copied pages.
    Hole,
    /// Past the newest copied page, yet before the bound the backup is
    /// known to cover ([`SlruStore::set_bound`]): a file was lost.
    Lost { bound: u32 },
    /// The backup carried no page of this SLRU.
    NothingCopied,
}

/// One SLRU's copied segments. Only whole pages are kept: a trailing
/// partial page was being written while the backup read the file, so it
/// holds nothing the checkpoint before the backup flushed.
#[derive(Debug, Clone)]
pub(crate) struct SlruStore {
    slru: Slru,
    segments: BTreeMap<u32, Bytes>,
    bytes: u64,
    bound: Option<u32>,
}

impl SlruStore {
    pub fn new(slru: Slru) -> SlruStore {
        SlruStore {
            slru,
            segments: BTreeMap::new(),
            bytes: 0,
            bound: None,
        }
    }

    /// Entries before `next` (on the circle) had their pages created
    /// before the backup started, so the copy must hold those pages.
    pub fn set_bound(&mut self, next: u32) {
        self.bound = Some(next);
    }

    /// Adds segment file `name`; `Ok(false)` for a name that is not a
    /// segment's.
    pub fn add_file(&mut self, name: &str, data: Bytes) -> Result<bool, GateError> {
        let Some(segno) = segment_number(name) else {
            return Ok(false);
        };
        self.add_segment(segno, data).map(|()| true)
    }

    pub fn add_segment(&mut self, segno: u64, data: Bytes) -> Result<(), GateError> {
        let dir = self.slru.dir();
        let segments = self.slru.segment_count();
        let segno = u32::try_from(segno).ok().filter(|s| *s < segments).ok_or(
            GateError::SegmentOutOfRange {
                dir,
                segno,
                segments,
            },
        )?;
        if self.segments.contains_key(&segno) {
            return Err(GateError::DuplicateSegment { dir, segno });
        }
        let max = SLRU_PAGES_PER_SEGMENT as usize * BLCKSZ;
        if data.len() > max {
            return Err(GateError::SegmentTooLong {
                dir,
                segno,
                len: data.len(),
            });
        }
        let whole = data.slice(..data.len() / BLCKSZ * BLCKSZ);
        self.bytes += whole.len() as u64;
        self.segments.insert(segno, whole);
        Ok(())
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Page `pageno`, if the copy holds it whole.
    pub fn page(&self, pageno: u32) -> Option<&[u8]> {
        let seg = self.segments.get(&(pageno / SLRU_PAGES_PER_SEGMENT))?;
        let start = (pageno % SLRU_PAGES_PER_SEGMENT) as usize * BLCKSZ;
        seg.get(start..start + BLCKSZ)
    }

    /// The copied pages as circular runs, for classifying missing pages.
    pub fn runs(&self) -> Runs {
        let pages = self.slru.page_count();
        // Half-open [start, end) page intervals in page order, merged.
        let mut spans: Vec<(u32, u32)> = Vec::new();
        for (&segno, data) in &self.segments {
            let start = segno * SLRU_PAGES_PER_SEGMENT;
            let n = u32::try_from(data.len() / BLCKSZ).unwrap_or(SLRU_PAGES_PER_SEGMENT);
            let end = start.saturating_add(n).min(pages);
            if end <= start {
                continue;
            }
            match spans.last_mut() {
                Some(last) if last.1 == start => last.1 = end,
                _ => spans.push((start, end)),
            }
        }
        // A run crossing the wrap of the page space is one run, stored
        // with start > end.
        if spans.len() > 1
            && let (Some(&(0, first_end)), Some(&(last_start, last_end))) =
                (spans.first(), spans.last())
            && last_end == pages
        {
            spans.pop();
            spans.remove(0);
            spans.push((last_start, first_end));
        }
        // Circular distance from page `from` forward to page `to`.
        let dist = |from: u32, to: u32| -> u32 {
            if to >= from {
                to - from
            } else {
                pages - from + to
            }
        };
        // The largest gap between consecutive runs separates the newest
        // page from the oldest. One run covering every page leaves none.
        let mut gap: Option<(u32, u32)> = None;
        let k = spans.len();
        for i in 0..k {
            let (Some(this), Some(next)) = (spans.get(i), spans.get((i + 1) % k)) else {
                continue;
            };
            let (from, to) = (this.1 % pages, next.0);
            let g = dist(from, to);
            if g > 0 && gap.is_none_or(|(f, t)| dist(f, t) < g) {
                gap = Some((from, to));
            }
        }
        Runs {
            slru: self.slru,
            empty: spans.is_empty(),
            gap,
            bound: self.bound,
        }
    }
}

/// Where the copied pages of one SLRU begin and end ([`SlruStore::runs`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Runs {
    slru: Slru,
    empty: bool,
    /// The largest gap, `[from, to)` in page numbers (circular): `from` is
    /// one past the newest copied page, `to` the oldest.
    gap: Option<(u32, u32)>,
    bound: Option<u32>,
}

impl Runs {
    /// Classifies the missing page holding `item`.
    pub fn classify(&self, item: u32) -> Missing {
        if self.empty {
            return Missing::NothingCopied;
        }
        let Some((from, to)) = self.gap else {
            return Missing::Hole;
        };
        let pages = self.slru.page_count();
        let per = self.slru.items_per_page();
        let page = item / per;
        let dist = |from: u32, to: u32| {
            if to >= from {
                to - from
            } else {
                pages - from + to
            }
        };
        if dist(from, page) >= dist(from, to) {
            return Missing::Hole;
        }
        let first_item = |p: u32| (u64::from(p) * u64::from(per)) as u32;
        // Ids compare on the circle, as TransactionIdPrecedes and
        // MultiXactIdPrecedes do.
        if (item.wrapping_sub(first_item(from)) as i32) >= 0 {
            match self.bound {
                Some(bound) if (item.wrapping_sub(bound) as i32) < 0 => Missing::Lost { bound },
                _ => Missing::Newer,
            }
        } else {
            Missing::Older {
                oldest_item: first_item(to),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(slru: Slru, segs: &[(u64, usize)]) -> SlruStore {
        let mut s = SlruStore::new(slru);
        for &(n, pages) in segs {
            s.add_segment(n, Bytes::from(vec![0u8; pages * BLCKSZ]))
                .unwrap();
        }
        s
    }

    #[test]
    fn names() {
        assert_eq!(segment_number("0000"), Some(0));
        assert_eq!(segment_number("0A1F"), Some(0x0A1F));
        assert_eq!(segment_number("14078"), Some(0x14078));
        assert_eq!(segment_number("000000000000012"), Some(0x12));
        for bad in [
            "000",
            "0a1f",
            "0000000",
            "README",
            "00000000000001",
            "0000.tmp",
        ] {
            assert_eq!(segment_number(bad), None, "{bad}");
        }
        assert_eq!(
            Slru::of_backup_path("./pg_xact/0000"),
            Some((Slru::Xact, "0000"))
        );
        assert_eq!(
            Slru::of_backup_path("pg_multixact/members/14078"),
            Some((Slru::MultiXactMembers, "14078"))
        );
        assert_eq!(Slru::of_backup_path("pg_multixact/offsets"), None);
        assert_eq!(Slru::of_backup_path("pg_xactx/0000"), None);
        assert_eq!(Slru::of_backup_path("base/1/pg_xact/0000"), None);
    }

    #[test]
    fn geometry() {
        assert_eq!(Slru::Xact.page_count(), 131_072);
        assert_eq!(Slru::Xact.segment_count(), 4096);
        assert_eq!(Slru::MultiXactOffsets.segment_count(), 65_536);
        assert_eq!(Slru::MultiXactMembers.page_count(), 2_625_286);
        assert_eq!(Slru::MultiXactMembers.segment_count(), 82_041);
    }

    #[test]
    fn rejects_bad_segments() {
        let mut s = SlruStore::new(Slru::Xact);
        assert!(matches!(
            s.add_segment(4096, Bytes::new()),
            Err(GateError::SegmentOutOfRange { .. })
        ));
        assert!(matches!(
            s.add_segment(1, Bytes::from(vec![0u8; 33 * BLCKSZ])),
            Err(GateError::SegmentTooLong { .. })
        ));
        s.add_segment(1, Bytes::from(vec![0u8; BLCKSZ + 100]))
            .unwrap();
        assert!(matches!(
            s.add_segment(1, Bytes::new()),
            Err(GateError::DuplicateSegment { .. })
        ));
        // The partial page is dropped.
        assert!(s.page(32).is_some());
        assert!(s.page(33).is_none());
        assert_eq!(s.bytes(), BLCKSZ as u64);
        assert!(!s.add_file("README", Bytes::new()).unwrap());
    }

    #[test]
    fn classifies_missing_pages() {
        let per = Slru::Xact.items_per_page();
        // Segments 2 (full) and 3 (4 pages): pages 64..100.
        let r = store(Slru::Xact, &[(2, 32), (3, 4)]).runs();
        assert_eq!(r.classify(100 * per), Missing::Newer);
        assert_eq!(r.classify(4000 * per), Missing::Newer);
        assert_eq!(
            r.classify(63 * per + 5),
            Missing::Older {
                oldest_item: 64 * per
            }
        );
        // A hole: segment 5 present too.
        let r = store(Slru::Xact, &[(2, 32), (5, 32)]).runs();
        assert_eq!(r.classify(100 * per), Missing::Hole);
        assert_eq!(r.classify(6 * 32 * per), Missing::Newer);
        // Nothing copied.
        assert_eq!(
            store(Slru::Xact, &[]).runs().classify(7),
            Missing::NothingCopied
        );
        // With a bound: missing pages before it were lost.
        let mut s = store(Slru::Xact, &[(2, 32), (3, 4)]);
        s.set_bound(101 * per);
        let r = s.runs();
        assert_eq!(
            r.classify(100 * per + 7),
            Missing::Lost { bound: 101 * per }
        );
        assert_eq!(r.classify(101 * per), Missing::Newer);
        // A segment without a whole page holds nothing.
        let mut s = SlruStore::new(Slru::Xact);
        s.add_segment(0, Bytes::from(vec![1u8; 100])).unwrap();
        assert_eq!(s.runs().classify(5), Missing::NothingCopied);
        // Everything copied: a missing page cannot be.
        let all: Vec<(u64, usize)> = (0..4096).map(|n| (n, 32)).collect();
        assert_eq!(store(Slru::Xact, &all).runs().classify(5), Missing::Hole);
    }

    #[test]
    fn runs_cross_the_wrap() {
        // Members: the last (partial) segment 82040 holds pages
        // 2625280..2625286, then segment 0 page 0 continues the run.
        let r = store(Slru::MultiXactMembers, &[(82_040, 6), (0, 1)]).runs();
        let per = Slru::MultiXactMembers.items_per_page();
        assert_eq!(r.classify(5 * per), Missing::Newer);
        assert_eq!(r.classify(per), Missing::Newer);
        assert!(matches!(r.classify(2_625_000 * per), Missing::Older { .. }));
        // pg_xact wrapping from segment 0FFF to 0000.
        let r = store(Slru::Xact, &[(4095, 32), (0, 2)]).runs();
        assert_eq!(r.classify(2 * 32_768), Missing::Newer);
        assert_eq!(
            r.classify(4094 * 32 * 32_768),
            Missing::Older {
                oldest_item: 4095 * 32 * 32_768
            }
        );
    }
}
