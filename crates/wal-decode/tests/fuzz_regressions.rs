//! Reproducers of panics and mismatches found by the fuzz targets in
//! `fuzz/` (see fuzz/README.md), each minimized and kept here so the bug
//! stays fixed without a fuzzing toolchain.

use walshadow_types::{Lsn, PgMajor};
use walshadow_wal_decode::{WalStreamDecoder, pglz_decompress};

/// A short page header (`XLogPageHeaderData`, MAXALIGNed to 24 bytes).
fn short_page_header(pageaddr: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(24);
    h.extend_from_slice(&PgMajor::V15.xlog_page_magic().to_le_bytes());
    h.extend_from_slice(&0u16.to_le_bytes()); // xlp_info
    h.extend_from_slice(&1u32.to_le_bytes()); // xlp_tli
    h.extend_from_slice(&pageaddr.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes()); // xlp_rem_len
    h.extend_from_slice(&[0; 4]);
    h
}

/// A record with no fragments, its CRC computed as PostgreSQL does.
fn bare_record(xl_prev: u64, xl_info: u8, xl_rmid: u8) -> Vec<u8> {
    let mut r = Vec::with_capacity(24);
    r.extend_from_slice(&24u32.to_le_bytes()); // xl_tot_len
    r.extend_from_slice(&0u32.to_le_bytes()); // xl_xid
    r.extend_from_slice(&xl_prev.to_le_bytes());
    r.push(xl_info);
    r.push(xl_rmid);
    r.extend_from_slice(&[0; 2]);
    let crc = crc32c::crc32c(&r[..20]);
    r.extend_from_slice(&crc.to_le_bytes());
    r
}

/// An `XLOG_SWITCH` in the last segment of the LSN space: the start of the
/// next segment is 2^64, and computing it overflowed (a panic with overflow
/// checks, a wrap to LSN 0 without).
#[test]
fn xlog_switch_in_last_segment_does_not_overflow() {
    let page = u64::MAX - 8191; // the last page
    let mut wal = short_page_header(page);
    wal.extend_from_slice(&bare_record(page, 0x40, 0)); // XLOG_SWITCH
    let mut dec = WalStreamDecoder::new(Lsn(page), Lsn(page), 1 << 20).unwrap();
    dec.feed(&wal);
    let r = dec.poll().unwrap().unwrap();
    assert_eq!(r.lsn, Lsn(page + 24));
    // There is no next segment: nothing more may come out (an error is fine).
    assert!(!matches!(dec.poll(), Ok(Some(_))));
    assert!(dec.position() >= Lsn(page + 48));
}

/// `pglz_decompress` reserved the caller's `rawsize` before reading a byte:
/// a hostile size (a TOAST header says up to 1 GiB, the API takes any
/// `usize`) cost that much memory for a few input bytes.
#[test]
fn pglz_huge_rawsize_is_an_error_not_an_allocation() {
    assert!(pglz_decompress(&[0, b'a'], usize::MAX, true).is_err());
    assert_eq!(
        pglz_decompress(&[0, b'a'], usize::MAX, false).unwrap(),
        b"a"
    );
}
