//! Pages `init` writes itself: the metapage of an empty btree, for the
//! statistics catalogs' indexes whose real pages point at user values.

use walshadow_pg_format::page::{BLCKSZ, PAGE_HEADER_SIZE as PAGE_HEADER, checksum_page};

/// `BTREE_MAGIC`, `BTREE_VERSION`, `BTP_META` (nbtree.h).
const BTREE_MAGIC: u32 = 0x0005_3162;
const BTREE_VERSION: u32 = 4;
const BTREE_MIN_VERSION: u32 = 2;
const BTP_META: u16 = 1 << 3;
/// `sizeof(BTMetaPageData)`: seven uint32, a float8 (8-aligned at 32), a
/// bool at 40; MAXALIGNed.
const BT_META_SIZE: usize = 48;
/// `sizeof(BTPageOpaqueData)`.
const BT_OPAQUE_SIZE: usize = 16;
/// `PG_PAGE_LAYOUT_VERSION`.
const PAGE_LAYOUT_VERSION: u16 = 4;

/// The metapage of an empty btree (`_bt_initmetapage` in nbtpage.c: no
/// root, level 0). `source` is the index's real metapage, if one was
/// read: its version and `btm_allequalimage` are kept when it looks like a
/// metapage (deduplication is then allowed as before); otherwise version 4
/// without `allequalimage` (always safe). With `checksums`, the page
/// carries its checksum for block 0.
pub fn empty_btree_metapage(source: Option<&[u8]>, checksums: bool) -> Vec<u8> {
    let mut version = BTREE_VERSION;
    let mut allequalimage = false;
    if let Some(src) = source {
        let meta = |off: usize| {
            src.get(PAGE_HEADER + off..PAGE_HEADER + off + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        if meta(0) == Some(BTREE_MAGIC)
            && let Some(v) = meta(4)
            && (BTREE_MIN_VERSION..=BTREE_VERSION).contains(&v)
        {
            version = v;
            allequalimage = v >= 4 && src.get(PAGE_HEADER + 40).is_some_and(|&b| b == 1);
        }
    }
    let mut page = vec![0u8; BLCKSZ];
    let special = (BLCKSZ - BT_OPAQUE_SIZE) as u16;
    // PageHeaderData: pd_lsn 0, pd_checksum (later), pd_flags 0, pd_lower,
    // pd_upper, pd_special, pd_pagesize_version, pd_prune_xid 0.
    put_u16(&mut page, 12, (PAGE_HEADER + BT_META_SIZE) as u16);
    put_u16(&mut page, 14, special);
    put_u16(&mut page, 16, special);
    put_u16(&mut page, 18, BLCKSZ as u16 | PAGE_LAYOUT_VERSION);
    // BTMetaPageData: magic, version, root P_NONE, level 0, fastroot,
    // fastlevel, last_cleanup_num_delpages 0, num_heap_tuples -1,
    // allequalimage.
    put_u32(&mut page, PAGE_HEADER, BTREE_MAGIC);
    put_u32(&mut page, PAGE_HEADER + 4, version);
    page[PAGE_HEADER + 32..PAGE_HEADER + 40].copy_from_slice(&(-1.0f64).to_le_bytes());
    page[PAGE_HEADER + 40] = u8::from(allequalimage);
    // BTPageOpaqueData: prev, next, level 0, flags BTP_META, cycleid 0.
    put_u16(&mut page, BLCKSZ - 4, BTP_META);
    if checksums {
        let sum = checksum_page(&page, 0);
        put_u16(&mut page, 8, sum);
    }
    page
}

fn put_u16(page: &mut [u8], off: usize, v: u16) {
    page[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(page: &mut [u8], off: usize, v: u32) {
    page[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metapage_layout() {
        let p = empty_btree_metapage(None, false);
        assert_eq!(p.len(), BLCKSZ);
        assert_eq!(u16::from_le_bytes([p[12], p[13]]), 72); // pd_lower
        assert_eq!(u16::from_le_bytes([p[14], p[15]]), 8176); // pd_upper
        assert_eq!(u16::from_le_bytes([p[18], p[19]]), 0x2004);
        assert_eq!(u16::from_le_bytes([p[8], p[9]]), 0); // no checksum
        let with = empty_btree_metapage(Some(&p), true);
        let sum = u16::from_le_bytes([with[8], with[9]]);
        assert_ne!(sum, 0);
        assert_eq!(checksum_page(&with, 0), sum);
    }
}
