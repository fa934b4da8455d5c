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
const XLOG_BLCKSZ: u64 = 8192;

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
}
