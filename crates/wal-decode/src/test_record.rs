//! Crafted records for unit tests: `XLogRecordAssemble`'s layout (block
//! headers, main data header, block data, main data), CRC computed, then
//! decoded as real WAL would be.

use walshadow_types::{Lsn, RelFileLocator};

use crate::record::{WalRecord, decode_record};

pub(crate) const REL: RelFileLocator = RelFileLocator {
    spc_oid: 1663,
    db_oid: 5,
    rel_number: 16384,
};

/// A block reference with data (no image).
pub(crate) struct Blk<'a> {
    pub(crate) id: u8,
    pub(crate) blkno: u32,
    pub(crate) data: &'a [u8],
}

pub(crate) fn record(rmid: u8, info: u8, xid: u32, blocks: &[Blk<'_>], main: &[u8]) -> WalRecord {
    let mut r = vec![0u8; 24];
    for b in blocks {
        r.push(b.id);
        r.push(if b.data.is_empty() { 0 } else { 0x20 }); // BKPBLOCK_HAS_DATA
        r.extend_from_slice(&(b.data.len() as u16).to_le_bytes());
        for w in [REL.spc_oid, REL.db_oid, REL.rel_number, b.blkno] {
            r.extend_from_slice(&w.to_le_bytes());
        }
    }
    if !main.is_empty() {
        if main.len() < 256 {
            r.extend_from_slice(&[255, main.len() as u8]);
        } else {
            r.push(254);
            r.extend_from_slice(&(main.len() as u32).to_le_bytes());
        }
    }
    for b in blocks {
        r.extend_from_slice(b.data);
    }
    r.extend_from_slice(main);
    finish(r, rmid, info, xid)
}

/// A record whose only block, 0 (`blkno`), carries an uncompressed
/// full-page image (24 stored bytes, a hole over the rest, applied at redo)
/// and `data`, which may be empty.
pub(crate) fn record_with_image(
    rmid: u8,
    info: u8,
    blkno: u32,
    data: &[u8],
    main: &[u8],
) -> WalRecord {
    let mut r = vec![0u8; 24];
    r.push(0);
    // BKPBLOCK_HAS_IMAGE, BKPBLOCK_HAS_DATA
    r.push(0x10 | if data.is_empty() { 0 } else { 0x20 });
    r.extend_from_slice(&(data.len() as u16).to_le_bytes());
    r.extend_from_slice(&24u16.to_le_bytes()); // bimg_len
    r.extend_from_slice(&24u16.to_le_bytes()); // hole_offset
    r.push(0x01 | 0x02); // BKPIMAGE_HAS_HOLE | BKPIMAGE_APPLY
    for w in [REL.spc_oid, REL.db_oid, REL.rel_number, blkno] {
        r.extend_from_slice(&w.to_le_bytes());
    }
    if !main.is_empty() {
        r.extend_from_slice(&[255, main.len() as u8]);
    }
    r.extend_from_slice(&[0u8; 24]); // the page header
    r.extend_from_slice(data);
    r.extend_from_slice(main);
    finish(r, rmid, info, 0)
}

/// Sets the fixed header's lengths, ids and CRC, then decodes `r`.
fn finish(mut r: Vec<u8>, rmid: u8, info: u8, xid: u32) -> WalRecord {
    let len = r.len() as u32;
    r[0..4].copy_from_slice(&len.to_le_bytes());
    r[4..8].copy_from_slice(&xid.to_le_bytes());
    r[16] = info;
    r[17] = rmid;
    let crc = crc32c::crc32c_append(crc32c::crc32c(&r[24..]), &r[..20]);
    r[20..24].copy_from_slice(&crc.to_le_bytes());
    let lsn = Lsn(0x0100_0028);
    let mut blocks = Vec::new();
    decode_record(lsn, Lsn(lsn.0 + u64::from(len)), &r, &mut blocks)
        .unwrap()
        .to_owned()
}

/// Little-endian concatenation helper.
#[derive(Default)]
pub(crate) struct Bytes(pub(crate) Vec<u8>);

impl Bytes {
    pub(crate) fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    pub(crate) fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(crate) fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
}
