//! Reading `pg_class` rows out of WAL and heap pages: just the leading
//! fixed-width columns the filter needs to tell a catalog's file from a user
//! table's (see `pg_class.h`; 18 added `relallfrozen` before
//! `reltoastrelid`).
//!
//! Catalogs are not logged in full even at `wal_level = logical`: an insert
//! whose page got a full-page image carries the row only in the image, and an
//! update on the same page may log only the bytes between a prefix and a
//! suffix it shares with the old row (`log_heap_update` in heapam.c). So the
//! filter keeps the data of every `pg_class` row by its position (block,
//! offset), seeded from the base backup's pages and kept current from the
//! WAL, to rebuild what a record leaves out.

use rustc_hash::FxHashMap as HashMap;
use walshadow_pg_format::cursor::u32_at;

use walshadow_types::{BlockNumber, Oid, PgMajor};

/// The columns the filter reads, by byte offset in the row's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PgClassRow {
    pub oid: Oid,
    /// `relname`, NUL-trimmed.
    pub relname: [u8; 64],
    pub relnamespace: Oid,
    pub relfilenode: Oid,
    pub reltablespace: Oid,
    pub reltoastrelid: Oid,
    pub relisshared: bool,
    pub relkind: u8,
    /// Set on the transient heap of a rewrite: the relation being rewritten.
    pub relrewrite: Option<Oid>,
}

/// Byte offsets of the leading `pg_class` columns (MAXALIGNed data start;
/// `NameData` is 64 bytes with char alignment).
struct Layout {
    reltoastrelid: usize,
    relisshared: usize,
    relkind: usize,
    relrewrite: usize,
}

fn layout(major: PgMajor) -> Layout {
    // oid 0, relname 4..68, relnamespace 68, reltype 72, reloftype 76,
    // relowner 80, relam 84, relfilenode 88, reltablespace 92, relpages 96,
    // reltuples 100, relallvisible 104, [18: relallfrozen 108], then
    // reltoastrelid, relhasindex, relisshared, relpersistence, relkind.
    let shift = if major >= PgMajor::V18 { 4 } else { 0 };
    let reltoastrelid = 108 + shift;
    let relkind = reltoastrelid + 7;
    // relnatts (int2, 2-aligned) after relkind, relchecks (int2), six bools
    // (relhasrules .. relispopulated), relreplident, relispartition, then
    // relrewrite (oid, 4-aligned): 128 on 15, 132 on 18.
    let relnatts = (relkind + 1 + 1) & !1;
    let after_flags = relnatts + 2 + 2 + 6 + 1 + 1;
    let relrewrite = (after_flags + 3) & !3;
    Layout {
        reltoastrelid,
        relisshared: reltoastrelid + 5,
        relkind,
        relrewrite,
    }
}

impl PgClassRow {
    /// Parses the leading columns of a row's data (the bytes after `t_hoff`).
    pub fn parse(data: &[u8], major: PgMajor) -> Option<PgClassRow> {
        let l = layout(major);
        let mut relname = [0u8; 64];
        relname.copy_from_slice(data.get(4..68)?);
        let relrewrite = u32_at(data, l.relrewrite)?;
        Some(PgClassRow {
            oid: u32_at(data, 0)?,
            relname,
            relnamespace: u32_at(data, 68)?,
            relfilenode: u32_at(data, 88)?,
            reltablespace: u32_at(data, 92)?,
            reltoastrelid: u32_at(data, l.reltoastrelid)?,
            relisshared: *data.get(l.relisshared)? != 0,
            relkind: *data.get(l.relkind)?,
            relrewrite: (relrewrite != 0).then_some(relrewrite),
        })
    }

    pub fn name(&self) -> &str {
        let end = self.relname.iter().position(|&b| b == 0).unwrap_or(64);
        std::str::from_utf8(self.relname.get(..end).unwrap_or_default()).unwrap_or("")
    }
}

/// Items of a heap page: `(offset number, tuple bytes)` of every normal
/// line pointer (bufpage.h, itemid.h). Malformed pointers are skipped.
pub fn heap_page_items(page: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let Some(lower) = page
        .get(12..14)
        .and_then(|b| b.try_into().ok())
        .map(u16::from_le_bytes)
    else {
        return out;
    };
    let n = (usize::from(lower).saturating_sub(24)) / 4;
    for i in 0..n {
        let Some(lp) = u32_at(page, 24 + i * 4) else {
            break;
        };
        let off = (lp & 0x7FFF) as usize;
        let flags = (lp >> 15) & 3;
        let len = (lp >> 17) as usize;
        if flags != 1 || len < 23 {
            continue; // LP_NORMAL only
        }
        if let Some(tuple) = page.get(off..off + len) {
            out.push(((i + 1) as u16, tuple));
        }
    }
    out
}

/// The data part of a heap tuple (after `t_hoff`).
pub fn tuple_data(tuple: &[u8]) -> Option<&[u8]> {
    let hoff = usize::from(*tuple.get(22)?);
    tuple.get(hoff..)
}

/// `pg_class` rows of one database by position, for rebuilding rows that
/// records log only in part.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RowCache {
    rows: HashMap<(BlockNumber, u16), Vec<u8>>,
}

impl RowCache {
    pub fn get(&self, blk: BlockNumber, off: u16) -> Option<&[u8]> {
        self.rows.get(&(blk, off)).map(Vec::as_slice)
    }

    pub fn put(&mut self, blk: BlockNumber, off: u16, data: Vec<u8>) {
        self.rows.insert((blk, off), data);
    }

    /// Replaces everything known about block `blk` with the rows of `page`
    /// (a full-page image or a page of the base backup). Returns the rows'
    /// data.
    pub fn load_page(&mut self, blk: BlockNumber, page: &[u8]) -> Vec<Vec<u8>> {
        self.rows.retain(|(b, _), _| *b != blk);
        let mut out = Vec::new();
        for (off, tuple) in heap_page_items(page) {
            if let Some(data) = tuple_data(tuple) {
                self.rows.insert((blk, off), data.to_vec());
                out.push(data.to_vec());
            }
        }
        out
    }

    /// Every row: `((block, offset), data)`.
    pub fn iter(&self) -> impl Iterator<Item = ((BlockNumber, u16), &[u8])> + '_ {
        self.rows.iter().map(|(&k, v)| (k, v.as_slice()))
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}
