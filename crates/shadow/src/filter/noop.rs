//! Rewriting a record to `XLOG_NOOP` of the same length, and writing the
//! result back into page-framed WAL.
//!
//! The NOOP keeps `xl_tot_len`, `xl_xid` (the standby tracks running
//! transactions from it) and `xl_prev`; its body is one main-data fragment
//! of zeros filling the record, so `DecodeXLogRecord` accepts it and
//! `xlog_redo` does nothing with it. The CRC is recomputed.

use walshadow_types::Lsn;

/// `XLOG_NOOP` in the XLOG rmgr (xlog_internal.h... pg_control.h).
const XLOG_NOOP: u8 = 0x20;
const RM_XLOG_ID: u8 = 0;
const SIZE_OF_XLOG_RECORD: usize = 24;
const XLR_BLOCK_ID_DATA_SHORT: u8 = 255;
const XLR_BLOCK_ID_DATA_LONG: u8 = 254;
/// `XLOG_BLCKSZ`, as the offsets here count.
const XLOG_BLCKSZ: u64 = walshadow_pg_format::page::XLOG_BLCKSZ as u64;

/// The NOOP replacement of record `raw` (same length). `None` if `raw` is
/// shorter than a record header or has a body no fragment can fill (one
/// byte, which no real record has).
pub fn noop_record(raw: &[u8]) -> Option<Vec<u8>> {
    let body_len = raw.len().checked_sub(SIZE_OF_XLOG_RECORD)?;
    let mut out = vec![0u8; raw.len()];
    out.get_mut(..16)?.copy_from_slice(raw.get(..16)?); // tot_len, xid, prev
    *out.get_mut(16)? = XLOG_NOOP;
    *out.get_mut(17)? = RM_XLOG_ID;
    match body_len {
        0 => {}
        1 => return None,
        2..=257 => {
            *out.get_mut(24)? = XLR_BLOCK_ID_DATA_SHORT;
            *out.get_mut(25)? = (body_len - 2) as u8;
        }
        _ => {
            *out.get_mut(24)? = XLR_BLOCK_ID_DATA_LONG;
            let n = u32::try_from(body_len - 5).ok()?;
            out.get_mut(25..29)?.copy_from_slice(&n.to_le_bytes());
        }
    }
    let crc = crc32c::crc32c_append(crc32c::crc32c(out.get(24..)?), out.get(..20)?);
    out.get_mut(20..24)?.copy_from_slice(&crc.to_le_bytes());
    Some(out)
}

/// Size of the page header at page-aligned `lsn`: long on a segment's first
/// page.
pub fn page_header_size(lsn: Lsn, seg_size: u32) -> usize {
    if lsn.0.is_multiple_of(u64::from(seg_size)) {
        40
    } else {
        24
    }
}

/// Writes `record` (a whole record's bytes, page headers removed) over the
/// page-framed WAL in `framed`, whose first byte is at `framed_start`; the
/// record starts at `lsn`. Returns `false` if `framed` does not hold all of
/// it.
pub fn write_framed(
    framed: &mut [u8],
    framed_start: Lsn,
    lsn: Lsn,
    record: &[u8],
    seg_size: u32,
) -> bool {
    let mut pos = lsn.0;
    let mut rest = record;
    while !rest.is_empty() {
        if pos.is_multiple_of(XLOG_BLCKSZ) {
            pos += page_header_size(Lsn(pos), seg_size) as u64;
        }
        let page_left = (XLOG_BLCKSZ - pos % XLOG_BLCKSZ) as usize;
        let n = page_left.min(rest.len());
        let Some(off) = pos.checked_sub(framed_start.0).map(|o| o as usize) else {
            return false;
        };
        let Some(dst) = framed.get_mut(off..off + n) else {
            return false;
        };
        let (piece, tail) = rest.split_at(n);
        dst.copy_from_slice(piece);
        rest = tail;
        pos += n as u64;
    }
    true
}

/// The replacement for an `XLOG_FPI` record whose single block image is a
/// btree metapage: the same record (xid, prev, block reference, other
/// fragments) carrying `page` instead, stored uncompressed with its zeros
/// as the hole, padded to the original length with main data (which
/// `xlog_redo` ignores for page images). `None` when `page` cannot fit.
pub fn replace_single_image(raw: &[u8], page: &[u8], hole: (usize, usize)) -> Option<Vec<u8>> {
    let tot_len = raw.len();
    let (hole_start, hole_end) = hole;
    // Block header (id, fork_flags, data_len), image header (len, hole
    // offset, info), locator, block number: XLOG_FPI names the relation.
    let fork_flags = *raw.get(25)?;
    let locator = {
        // Find the locator and block number after the original image header.
        let bimg_info = *raw.get(32)?;
        let compressed = bimg_info & (0x04 | 0x08 | 0x10) != 0;
        let has_hole = bimg_info & 0x01 != 0;
        let after = 33 + if compressed && has_hole { 2 } else { 0 };
        if fork_flags & 0x80 != 0 {
            return None; // SAME_REL on a first block cannot be
        }
        raw.get(after..after + 16)?
    };
    let max_hole = hole_end.checked_sub(hole_start)?;
    let fixed = SIZE_OF_XLOG_RECORD + 4 + 5 + 16;
    let min_image = page.len().checked_sub(max_hole)?;
    // Shrink the hole until the image fills the record; the rest (if the
    // hole cannot shrink to nothing) is main data.
    let room = tot_len.checked_sub(fixed)?;
    if room < min_image {
        return None;
    }
    let (image_len, main_len) = if room - min_image <= max_hole {
        (room, 0)
    } else {
        // The whole page, then main data (short or long header).
        let rest = room - page.len();
        if rest < 2 {
            return None;
        }
        (page.len(), rest)
    };
    let hole_len = page.len() - image_len;
    let mut out = Vec::with_capacity(tot_len);
    out.extend_from_slice(raw.get(..SIZE_OF_XLOG_RECORD)?);
    out.push(0); // block id 0
    out.push((fork_flags & 0x0F) | 0x10); // fork, HAS_IMAGE
    out.extend_from_slice(&0u16.to_le_bytes()); // no block data
    out.extend_from_slice(&(image_len as u16).to_le_bytes());
    let info: u8 = if hole_len > 0 { 0x01 | 0x02 } else { 0x02 }; // HAS_HOLE, APPLY
    let hole_off = if hole_len > 0 { hole_start } else { 0 };
    out.extend_from_slice(&(hole_off as u16).to_le_bytes());
    out.push(info);
    out.extend_from_slice(locator);
    let mut main = Vec::new();
    if main_len > 0 {
        if main_len - 2 <= 255 {
            out.push(XLR_BLOCK_ID_DATA_SHORT);
            out.push((main_len - 2) as u8);
            main.resize(main_len - 2, 0);
        } else {
            out.push(XLR_BLOCK_ID_DATA_LONG);
            out.extend_from_slice(&u32::try_from(main_len - 5).ok()?.to_le_bytes());
            main.resize(main_len - 5, 0);
        }
    }
    out.extend_from_slice(page.get(..hole_off)?);
    out.extend_from_slice(page.get(hole_off + hole_len..)?);
    out.extend_from_slice(&main);
    if out.len() != tot_len {
        return None;
    }
    let crc = crc32c::crc32c_append(crc32c::crc32c(out.get(24..)?), out.get(..20)?);
    out.get_mut(20..24)?.copy_from_slice(&crc.to_le_bytes());
    Some(out)
}

/// `raw` (a record whose main data, the last `main_len` bytes, it ends
/// with) with the main data after its first `keep` bytes zeroed (same
/// length, CRC recomputed): for `xl_tblspc_create_rec`, keeping the
/// tablespace OID and emptying its location (an in-place tablespace).
pub fn zero_main_data_after(raw: &[u8], main_len: usize, keep: usize) -> Option<Vec<u8>> {
    let mut out = raw.to_vec();
    let start = out.len().checked_sub(main_len)?.checked_add(keep)?;
    out.get_mut(start..)?.fill(0);
    let crc = crc32c::crc32c_append(crc32c::crc32c(out.get(24..)?), out.get(..20)?);
    out.get_mut(20..24)?.copy_from_slice(&crc.to_le_bytes());
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noop_keeps_length_xid_prev_and_checks() {
        for body in [0usize, 2, 100, 255, 257, 258, 9000] {
            let mut raw = vec![0xABu8; 24 + body];
            raw[..4].copy_from_slice(&((24 + body) as u32).to_le_bytes());
            let out = noop_record(&raw).unwrap();
            assert_eq!(out.len(), raw.len());
            assert_eq!(out[..16], raw[..16]);
            assert_eq!((out[16], out[17]), (XLOG_NOOP, RM_XLOG_ID));
            let crc = u32::from_le_bytes(out[20..24].try_into().unwrap());
            assert_eq!(
                crc,
                crc32c::crc32c_append(crc32c::crc32c(&out[24..]), &out[..20])
            );
        }
        assert!(noop_record(&[0u8; 25]).is_none());
    }

    /// An `XLOG_FPI` record carrying `page` with `hole` removed.
    fn fpi_record(page: &[u8], hole: (usize, usize)) -> Vec<u8> {
        let image: Vec<u8> = [&page[..hole.0], &page[hole.1..]].concat();
        let tot = SIZE_OF_XLOG_RECORD + 4 + 5 + 16 + image.len();
        let mut r = Vec::new();
        r.extend_from_slice(&(tot as u32).to_le_bytes());
        r.extend_from_slice(&7u32.to_le_bytes()); // xid
        r.extend_from_slice(&0x1_0000_0000u64.to_le_bytes()); // prev
        r.extend_from_slice(&[0xB0, 0, 0, 0, 0, 0, 0, 0]); // info FPI, rmid XLOG, pad, crc
        r.extend_from_slice(&[0, 0x10, 0, 0]); // block 0, main fork + HAS_IMAGE, no data
        r.extend_from_slice(&(image.len() as u16).to_le_bytes());
        let has_hole = hole.1 > hole.0;
        r.extend_from_slice(&(if has_hole { hole.0 as u16 } else { 0 }).to_le_bytes());
        r.push(if has_hole { 0x03 } else { 0x02 });
        for v in [1663u32, 5, 16999, 0] {
            r.extend_from_slice(&v.to_le_bytes());
        }
        r.extend_from_slice(&image);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&r[24..]), &r[..20]);
        r[20..24].copy_from_slice(&crc.to_le_bytes());
        r
    }

    #[test]
    fn metapage_image_replaced_in_place() {
        use walshadow_types::Lsn;
        let empty = crate::bootstrap::page::empty_btree_metapage(None, false);
        let mut original = vec![0u8; 8192];
        original[..72].fill(0x5A);
        original[8176..].fill(0x5A);
        for (page, hole) in [(&original, (72, 8176)), (&vec![0x11u8; 8192], (0, 0))] {
            let raw = fpi_record(page, hole);
            let out = replace_single_image(&raw, &empty, (72, 8176)).unwrap();
            assert_eq!(out.len(), raw.len());
            assert_eq!(out[..16], raw[..16]);
            let mut blocks = Vec::new();
            let rec =
                walshadow_wal_decode::decode_record(Lsn(0x100), Lsn(0x100), &out, &mut blocks)
                    .unwrap();
            let b = rec.blocks[0];
            assert_eq!((b.locator.rel_number, b.blkno), (16999, 0));
            assert_eq!(rec.restore_page(&b).unwrap(), empty);
        }
        // A compressed image too small for the empty page: no replacement.
        let mut short = fpi_record(&original, (72, 8176));
        short.truncate(short.len() - 20);
        let len = short.len() as u32;
        short[..4].copy_from_slice(&len.to_le_bytes());
        assert!(replace_single_image(&short, &empty, (72, 8176)).is_none());
    }
}
