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
    let (head, head_len) = noop_head(raw)?;
    let mut out = vec![0u8; raw.len()];
    out.get_mut(..head_len)?
        .copy_from_slice(head.get(..head_len)?);
    Some(out)
}

/// The header part of the NOOP replacement of `raw`, CRC included: the
/// record header and the fragment header (the first `.1` bytes); the rest
/// of the record is zeros.
fn noop_head(raw: &[u8]) -> Option<([u8; NOOP_HEAD_MAX], usize)> {
    let body_len = raw.len().checked_sub(SIZE_OF_XLOG_RECORD)?;
    let mut head = [0u8; NOOP_HEAD_MAX];
    head.get_mut(..16)?.copy_from_slice(raw.get(..16)?); // tot_len, xid, prev
    *head.get_mut(16)? = XLOG_NOOP;
    *head.get_mut(17)? = RM_XLOG_ID;
    let fragment = match body_len {
        0 => 0,
        1 => return None,
        2..=257 => {
            *head.get_mut(24)? = XLR_BLOCK_ID_DATA_SHORT;
            *head.get_mut(25)? = (body_len - 2) as u8;
            2
        }
        _ => {
            *head.get_mut(24)? = XLR_BLOCK_ID_DATA_LONG;
            let n = u32::try_from(body_len - 5).ok()?;
            head.get_mut(25..29)?.copy_from_slice(&n.to_le_bytes());
            5
        }
    };
    let head_len = SIZE_OF_XLOG_RECORD + fragment;
    // The body's CRC over its zeros a page of zeros at a time: nothing of
    // the record's length is built.
    let mut crc = crc32c::crc32c(head.get(SIZE_OF_XLOG_RECORD..head_len)?);
    let mut zeros = body_len - fragment;
    while zeros > 0 {
        let n = zeros.min(ZEROS.len());
        crc = crc32c::crc32c_append(crc, ZEROS.get(..n)?);
        zeros -= n;
    }
    let crc = crc32c::crc32c_append(crc, head.get(..20)?);
    head.get_mut(20..24)?.copy_from_slice(&crc.to_le_bytes());
    Some((head, head_len))
}

/// Longest NOOP head: the record header and a long fragment header.
const NOOP_HEAD_MAX: usize = SIZE_OF_XLOG_RECORD + 5;
static ZEROS: [u8; XLOG_BLCKSZ as usize] = [0; XLOG_BLCKSZ as usize];

/// Writes the NOOP replacement of record `raw`, which starts at `lsn`, over
/// its page-framed bytes in `framed` (first byte at `framed_start`), in
/// place: [`noop_record`] without building the record. `false` if `raw`
/// has no NOOP or `framed` does not hold all of it.
pub fn write_noop_framed(
    framed: &mut [u8],
    framed_start: Lsn,
    lsn: Lsn,
    raw: &[u8],
    seg_size: u32,
) -> bool {
    let Some((head, head_len)) = noop_head(raw) else {
        return false;
    };
    let head = head.get(..head_len).unwrap_or_default();
    for_each_framed_span(framed, framed_start, lsn, raw.len(), seg_size, |at, dst| {
        // Bytes of the head in this span, then zeros.
        let from_head = head.get(at..).unwrap_or_default();
        let n = from_head.len().min(dst.len());
        let (h, z) = dst.split_at_mut(n);
        h.copy_from_slice(from_head.get(..n).unwrap_or_default());
        z.fill(0);
    })
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
    for_each_framed_span(
        framed,
        framed_start,
        lsn,
        record.len(),
        seg_size,
        |at, dst| {
            if let Some(src) = record.get(at..at + dst.len()) {
                dst.copy_from_slice(src);
            }
        },
    )
}

/// Calls `write(offset in the record, bytes)` for each stretch of the
/// `len`-byte record at `lsn` between page headers in `framed` (first byte
/// at `framed_start`). `false` if `framed` does not hold all of it; what
/// was written by then is the caller's to throw away (every caller gives
/// up on the batch).
fn for_each_framed_span(
    framed: &mut [u8],
    framed_start: Lsn,
    lsn: Lsn,
    len: usize,
    seg_size: u32,
    mut write: impl FnMut(usize, &mut [u8]),
) -> bool {
    if lsn < framed_start {
        return false;
    }
    let (mut pos, mut at) = (lsn.0, 0usize);
    while at < len {
        if pos.is_multiple_of(XLOG_BLCKSZ) {
            pos += page_header_size(Lsn(pos), seg_size) as u64;
        }
        let n = ((XLOG_BLCKSZ - pos % XLOG_BLCKSZ) as usize).min(len - at);
        let off = (pos - framed_start.0) as usize;
        let Some(dst) = framed.get_mut(off..off + n) else {
            return false;
        };
        write(at, dst);
        at += n;
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

    /// Page-framed WAL from `start` holding `records` back to back (8-byte
    /// aligned), page headers filled with 0xEE.
    fn framed(start: u64, records: &[Vec<u8>], seg_size: u32) -> (Vec<u8>, Vec<u64>) {
        let mut out = Vec::new();
        let mut lsns = Vec::new();
        let mut pos = start;
        let put = |out: &mut Vec<u8>, pos: &mut u64, byte: Option<u8>| {
            if pos.is_multiple_of(XLOG_BLCKSZ) {
                let h = page_header_size(Lsn(*pos), seg_size);
                out.extend(std::iter::repeat_n(0xEE, h));
                *pos += h as u64;
            }
            out.push(byte.unwrap_or(0));
            *pos += 1;
        };
        for r in records {
            if pos.is_multiple_of(XLOG_BLCKSZ) {
                let h = page_header_size(Lsn(pos), seg_size);
                out.extend(std::iter::repeat_n(0xEE, h));
                pos += h as u64;
            }
            lsns.push(pos);
            for &b in r {
                put(&mut out, &mut pos, Some(b));
            }
            while !pos.is_multiple_of(8) {
                put(&mut out, &mut pos, None);
            }
        }
        (out, lsns)
    }

    #[test]
    fn noop_in_place_equals_the_built_noop_across_pages() {
        let seg_size = 16 * 1024 * 1024;
        // Starting near a segment's end so records cross into its long
        // page header, with short, long and page-spanning bodies.
        let start = u64::from(seg_size) - 8192 - 4000;
        let records: Vec<Vec<u8>> = [60usize, 300, 9000, 24, 26, 20_000]
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let mut r = vec![0x40 + i as u8; len];
                r[..4].copy_from_slice(&(len as u32).to_le_bytes());
                r
            })
            .collect();
        let (original, lsns) = framed(start, &records, seg_size);
        let (mut built, mut in_place) = (original.clone(), original.clone());
        for (r, &lsn) in records.iter().zip(&lsns) {
            let noop = noop_record(r).unwrap();
            assert!(write_framed(
                &mut built,
                Lsn(start),
                Lsn(lsn),
                &noop,
                seg_size
            ));
            assert!(write_noop_framed(
                &mut in_place,
                Lsn(start),
                Lsn(lsn),
                r,
                seg_size
            ));
        }
        assert_eq!(built, in_place);
        assert_ne!(built, original);
        // Page headers untouched.
        assert_eq!(&in_place[4000..4024], &[0xEE; 24]);
        // A record that runs past the buffer, or starts before it, is
        // refused.
        let mut short = original[..original.len() - 100].to_vec();
        let last = *lsns.last().unwrap();
        assert!(!write_noop_framed(
            &mut short,
            Lsn(start),
            Lsn(last),
            &records[5],
            seg_size
        ));
        assert!(!write_noop_framed(
            &mut short,
            Lsn(start + 8),
            Lsn(start),
            &records[0],
            seg_size
        ));
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
