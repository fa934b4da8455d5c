//! One WAL record: the fixed `XLogRecord` header, its fragment headers and
//! payload, decoded as `DecodeXLogRecord` in xlogreader.c does.
//!
//! Layout (xlogrecord.h):
//!
//! ```text
//! XLogRecord (24) | block headers... | [origin] [toplevel xid] | main data header
//!                 | block 0 image, block 0 data, block 1 image, ... | main data
//! ```
//!
//! CRC-32C covers everything after the fixed header, then the fixed header
//! up to `xl_crc`.

use walshadow_types::{ForkNumber, Lsn, RelFileLocator, Xid};

use crate::block::{
    BKPBLOCK_FORK_MASK, BKPBLOCK_HAS_DATA, BKPBLOCK_HAS_IMAGE, BKPBLOCK_SAME_REL,
    BKPIMAGE_COMPRESS_LZ4, BKPIMAGE_COMPRESS_PGLZ, BKPIMAGE_COMPRESS_ZSTD, BKPIMAGE_HAS_HOLE,
    BlockImage, BlockRef, Span,
};
use crate::cursor::{Cursor, Truncated};
use crate::error::WalErrorKind;
use crate::page::XLOG_BLCKSZ;
use crate::rmgr::RmgrId;

/// `SizeOfXLogRecord`.
pub const SIZE_OF_XLOG_RECORD: usize = 24;
/// Offset of `xl_crc` in the fixed header.
const XL_CRC_OFFSET: usize = 20;

const XLR_MAX_BLOCK_ID: u8 = 32;
const XLR_BLOCK_ID_DATA_SHORT: u8 = 255;
const XLR_BLOCK_ID_DATA_LONG: u8 = 254;
const XLR_BLOCK_ID_ORIGIN: u8 = 253;
const XLR_BLOCK_ID_TOPLEVEL_XID: u8 = 252;

/// `XLR_INFO_MASK`: the info bits the WAL machinery owns.
pub const XLR_INFO_MASK: u8 = 0x0F;
/// `XLOG_SWITCH` in the XLOG rmgr.
pub(crate) const XLOG_SWITCH: u8 = 0x40;

/// The fixed `XLogRecord` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub xl_tot_len: u32,
    pub xl_xid: Xid,
    pub xl_prev: Lsn,
    pub xl_info: u8,
    pub xl_rmid: RmgrId,
    pub xl_crc: u32,
}

impl RecordHeader {
    /// Parses the first 24 bytes of `raw`.
    pub(crate) fn parse(raw: &[u8]) -> Option<RecordHeader> {
        let bytes: &[u8; SIZE_OF_XLOG_RECORD] = raw.get(..SIZE_OF_XLOG_RECORD)?.try_into().ok()?;
        Some(RecordHeader::from_bytes(bytes))
    }

    /// The header from its 24 bytes, read in one go (no per-field checks).
    pub(crate) fn from_bytes(bytes: &[u8; SIZE_OF_XLOG_RECORD]) -> RecordHeader {
        let [
            l0,
            l1,
            l2,
            l3,
            x0,
            x1,
            x2,
            x3,
            p0,
            p1,
            p2,
            p3,
            p4,
            p5,
            p6,
            p7,
            info,
            rmid,
            _,
            _,
            c0,
            c1,
            c2,
            c3,
        ] = *bytes;
        RecordHeader {
            xl_tot_len: u32::from_le_bytes([l0, l1, l2, l3]),
            xl_xid: u32::from_le_bytes([x0, x1, x2, x3]),
            xl_prev: Lsn(u64::from_le_bytes([p0, p1, p2, p3, p4, p5, p6, p7])),
            xl_info: info,
            xl_rmid: RmgrId(rmid),
            xl_crc: u32::from_le_bytes([c0, c1, c2, c3]),
        }
    }

    /// The rmgr-private bits of `xl_info` (`XLR_RMGR_INFO_MASK`).
    pub fn rmgr_info(&self) -> u8 {
        self.xl_info & !XLR_INFO_MASK
    }

    pub fn is_xlog_switch(&self) -> bool {
        self.xl_rmid == RmgrId::XLOG && self.rmgr_info() == XLOG_SWITCH
    }
}

/// A decoded record borrowed from the decoder's buffers: valid until the
/// next `poll`. Block data, images and main data are ranges into `raw`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// Where the record starts (`ReadRecPtr`).
    pub lsn: Lsn,
    /// Just past its last byte (`EndRecPtr`, before alignment).
    pub end: Lsn,
    pub header: RecordHeader,
    pub blocks: &'a [BlockRef],
    /// `XLR_BLOCK_ID_ORIGIN`: the replication origin that wrote it.
    pub origin: Option<u16>,
    /// `XLR_BLOCK_ID_TOPLEVEL_XID`: the top transaction of a subxact's first record.
    pub toplevel_xid: Option<Xid>,
    pub(crate) main_data: (usize, usize),
    raw: &'a [u8],
}

impl<'a> RecordView<'a> {
    /// Re-lends a record already decoded (by [`decode_record`]) from its
    /// parts: no CRC or fragment work again.
    pub(crate) fn from_parts(parts: &RecordParts, raw: &'a [u8], blocks: &'a [BlockRef]) -> Self {
        RecordView {
            lsn: parts.lsn,
            end: parts.end,
            header: parts.header,
            blocks,
            origin: parts.origin,
            toplevel_xid: parts.toplevel_xid,
            main_data: parts.main_data,
            raw,
        }
    }

    pub(crate) fn parts(&self) -> RecordParts {
        RecordParts {
            lsn: self.lsn,
            end: self.end,
            header: self.header,
            origin: self.origin,
            toplevel_xid: self.toplevel_xid,
            main_data: self.main_data,
        }
    }

    /// The record as stored (`xl_tot_len` bytes, page headers removed).
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    pub fn rmgr(&self) -> RmgrId {
        self.header.xl_rmid
    }

    pub fn xid(&self) -> Xid {
        self.header.xl_xid
    }

    pub fn main_data(&self) -> &'a [u8] {
        self.raw
            .get(self.main_data.0..self.main_data.1)
            .unwrap_or_default()
    }

    /// The rmgr data attached to block reference `b` (empty if none).
    pub fn block_data(&self, b: &BlockRef) -> &'a [u8] {
        self.raw.get(b.data.range()).unwrap_or_default()
    }

    /// Block reference with id `id`, if the record has one.
    pub fn block(&self, id: u8) -> Option<&'a BlockRef> {
        self.blocks.iter().find(|b| b.id == id)
    }

    /// The stored (possibly compressed, hole removed) image bytes of `b`.
    pub fn image_bytes(&self, b: &BlockRef) -> Option<&'a [u8]> {
        let img = b.image.as_ref()?;
        self.raw.get(img.range.range())
    }

    /// Rebuilds the full 8 KiB page of `b`'s image, decompressing on demand.
    pub fn restore_page(&self, b: &BlockRef) -> Result<Vec<u8>, WalErrorKind> {
        let bad = |reason: String| WalErrorKind::BadImage {
            block_id: b.id,
            reason,
        };
        let img = b
            .image
            .as_ref()
            .ok_or_else(|| bad("block has no image".into()))?;
        let stored = self
            .raw
            .get(img.range.range())
            .ok_or_else(|| bad("image outside the record".into()))?;
        img.restore(stored).map_err(bad)
    }

    /// An owned copy, to keep past the next `poll`.
    pub fn to_owned(&self) -> WalRecord {
        WalRecord {
            lsn: self.lsn,
            end: self.end,
            header: self.header,
            blocks: self.blocks.to_vec(),
            origin: self.origin,
            toplevel_xid: self.toplevel_xid,
            main_data: self.main_data,
            raw: self.raw.to_vec(),
        }
    }
}

/// The scalar parts of a decoded record, kept to lend it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordParts {
    lsn: Lsn,
    end: Lsn,
    header: RecordHeader,
    origin: Option<u16>,
    toplevel_xid: Option<Xid>,
    main_data: (usize, usize),
}

/// A decoded record that owns its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalRecord {
    pub lsn: Lsn,
    pub end: Lsn,
    pub header: RecordHeader,
    pub blocks: Vec<BlockRef>,
    pub origin: Option<u16>,
    pub toplevel_xid: Option<Xid>,
    main_data: (usize, usize),
    raw: Vec<u8>,
}

impl WalRecord {
    /// Borrows the record as a [`RecordView`], which has the accessors.
    pub fn view(&self) -> RecordView<'_> {
        RecordView {
            lsn: self.lsn,
            end: self.end,
            header: self.header,
            blocks: &self.blocks,
            origin: self.origin,
            toplevel_xid: self.toplevel_xid,
            main_data: self.main_data,
            raw: &self.raw,
        }
    }

    pub fn raw(&self) -> &[u8] {
        &self.raw
    }

    pub fn rmgr(&self) -> RmgrId {
        self.header.xl_rmid
    }

    pub fn xid(&self) -> Xid {
        self.header.xl_xid
    }

    pub fn main_data(&self) -> &[u8] {
        self.view().main_data()
    }

    pub fn block_data(&self, b: &BlockRef) -> &[u8] {
        self.raw.get(b.data.range()).unwrap_or_default()
    }

    pub fn block(&self, id: u8) -> Option<&BlockRef> {
        self.blocks.iter().find(|b| b.id == id)
    }

    pub fn restore_page(&self, b: &BlockRef) -> Result<Vec<u8>, WalErrorKind> {
        self.view().restore_page(b)
    }
}

/// Checks a whole record's CRC-32C (`ValidXLogRecord`).
pub(crate) fn verify_crc(raw: &[u8], stored: u32) -> Result<(), WalErrorKind> {
    let (Some(head), Some(body)) = (raw.get(..XL_CRC_OFFSET), raw.get(SIZE_OF_XLOG_RECORD..))
    else {
        return Err(WalErrorKind::RecordTooShort(raw.len() as u32));
    };
    let computed = crc32c::crc32c_append(crc32c::crc32c(body), head);
    if computed != stored {
        return Err(WalErrorKind::BadCrc { computed, stored });
    }
    Ok(())
}

/// Decodes a complete record that starts at `lsn` and ends at `end`:
/// verifies its CRC, then parses its fragments (`DecodeXLogRecord`) into
/// `blocks` (cleared first; reused across records to spare allocations).
/// `raw` must be exactly `xl_tot_len` bytes.
pub fn decode_record<'a>(
    lsn: Lsn,
    end: Lsn,
    raw: &'a [u8],
    blocks: &'a mut Vec<BlockRef>,
) -> Result<RecordView<'a>, WalErrorKind> {
    let header = RecordHeader::parse(raw).ok_or(WalErrorKind::RecordTooShort(raw.len() as u32))?;
    decode_with_header(lsn, end, raw, header, blocks)
}

/// [`decode_record`] for a caller that already parsed the fixed header
/// (the stream decoder reads it to check the prev-link).
pub(crate) fn decode_with_header<'a>(
    lsn: Lsn,
    end: Lsn,
    raw: &'a [u8],
    header: RecordHeader,
    blocks: &'a mut Vec<BlockRef>,
) -> Result<RecordView<'a>, WalErrorKind> {
    if header.xl_tot_len as usize != raw.len() {
        return Err(WalErrorKind::BadBody(format!(
            "record holds {} bytes but xl_tot_len says {}",
            raw.len(),
            header.xl_tot_len
        )));
    }
    verify_crc(raw, header.xl_crc)?;
    blocks.clear();
    let parsed = parse_fragments(raw, blocks).map_err(|e| WalErrorKind::BadBody(e.0))?;
    Ok(RecordView {
        lsn,
        end,
        header,
        blocks,
        origin: parsed.origin,
        toplevel_xid: parsed.toplevel_xid,
        main_data: parsed.main_data,
        raw,
    })
}

struct Fragments {
    origin: Option<u16>,
    toplevel_xid: Option<Xid>,
    main_data: (usize, usize),
}

struct BodyError(String);

impl From<Truncated> for BodyError {
    fn from(_: Truncated) -> Self {
        BodyError("record with invalid length (fragment headers run past its end)".into())
    }
}

fn parse_fragments(raw: &[u8], blocks: &mut Vec<BlockRef>) -> Result<Fragments, BodyError> {
    let mut c = Cursor::new(raw);
    c.take(SIZE_OF_XLOG_RECORD)?;
    // Sum of payload bytes the headers announce; headers end where the
    // announced payload fills the rest of the record.
    let mut datatotal: usize = 0;
    let mut origin = None;
    let mut toplevel_xid = None;
    let mut main_data_len: usize = 0;
    let mut max_block_id: Option<u8> = None;
    let mut last_locator: Option<RelFileLocator> = None;

    while c.remaining() > datatotal {
        let block_id = c.u8()?;
        match block_id {
            XLR_BLOCK_ID_DATA_SHORT => {
                main_data_len = usize::from(c.u8()?);
                datatotal = datatotal.saturating_add(main_data_len);
                break; // by convention, the main data fragment is always last
            }
            XLR_BLOCK_ID_DATA_LONG => {
                main_data_len = c.u32()? as usize;
                datatotal = datatotal.saturating_add(main_data_len);
                break;
            }
            XLR_BLOCK_ID_ORIGIN => origin = Some(c.u16()?),
            XLR_BLOCK_ID_TOPLEVEL_XID => toplevel_xid = Some(c.u32()?),
            id if id <= XLR_MAX_BLOCK_ID => {
                if max_block_id.is_some_and(|m| id <= m) {
                    return Err(BodyError(format!("out-of-order block_id {id}")));
                }
                max_block_id = Some(id);
                // fork_flags and data_length in one read.
                let [fork_flags, dl0, dl1] = c.array::<3>()?;
                let fork = ForkNumber::from_u8(fork_flags & BKPBLOCK_FORK_MASK)
                    .ok_or_else(|| bad_fork(fork_flags))?;
                let has_data = fork_flags & BKPBLOCK_HAS_DATA != 0;
                let data_len = u16::from_le_bytes([dl0, dl1]);
                if has_data != (data_len != 0) {
                    return Err(bad_data_len(has_data, data_len));
                }
                datatotal = datatotal.saturating_add(usize::from(data_len));
                let image = if fork_flags & BKPBLOCK_HAS_IMAGE != 0 {
                    let img = parse_image_header(&mut c)?;
                    datatotal = datatotal.saturating_add(img.range.len());
                    Some(img)
                } else {
                    None
                };
                let locator = if fork_flags & BKPBLOCK_SAME_REL == 0 {
                    // RelFileLocator and BlockNumber in one read.
                    let [
                        s0,
                        s1,
                        s2,
                        s3,
                        d0,
                        d1,
                        d2,
                        d3,
                        r0,
                        r1,
                        r2,
                        r3,
                        b0,
                        b1,
                        b2,
                        b3,
                    ] = c.array::<16>()?;
                    let l = RelFileLocator {
                        spc_oid: u32::from_le_bytes([s0, s1, s2, s3]),
                        db_oid: u32::from_le_bytes([d0, d1, d2, d3]),
                        rel_number: u32::from_le_bytes([r0, r1, r2, r3]),
                    };
                    last_locator = Some(l);
                    blocks.push(block_ref(
                        id,
                        l,
                        fork,
                        fork_flags,
                        [b0, b1, b2, b3],
                        image,
                        data_len,
                    ));
                    continue;
                } else {
                    last_locator.ok_or_else(|| {
                        BodyError("BKPBLOCK_SAME_REL set but no previous rel".into())
                    })?
                };
                let blkno = c.array::<4>()?;
                blocks.push(block_ref(
                    id, locator, fork, fork_flags, blkno, image, data_len,
                ));
            }
            other => return Err(BodyError(format!("invalid block_id {other}"))),
        }
    }
    let remaining = c.remaining();
    if remaining != datatotal {
        return Err(BodyError(format!(
            "record with invalid length: {remaining} payload bytes, headers announce {datatotal}"
        )));
    }
    // Payload: per block its image then its data, then the main data. The
    // sums fit: they add up to `remaining`, which is under `raw.len()`.
    let mut pos = c.position() as u32;
    for b in blocks.iter_mut() {
        if let Some(img) = b.image.as_mut() {
            let image_len = img.range.end;
            img.range = Span {
                start: pos,
                end: pos + image_len,
            };
            pos += image_len;
        }
        let data_len = b.data.end;
        b.data = Span {
            start: pos,
            end: pos + data_len,
        };
        pos += data_len;
    }
    let main_data = (pos as usize, pos as usize + main_data_len);
    if main_data.1 != raw.len() {
        return Err(BodyError("payload does not end with the record".into()));
    }
    Ok(Fragments {
        origin,
        toplevel_xid,
        main_data,
    })
}

/// A block reference whose image and data spans still hold only lengths
/// (`0..len`); [`parse_fragments`] places them once the headers are read.
#[inline(always)]
fn block_ref(
    id: u8,
    locator: RelFileLocator,
    fork: ForkNumber,
    fork_flags: u8,
    blkno: [u8; 4],
    image: Option<BlockImage>,
    data_len: u16,
) -> BlockRef {
    BlockRef {
        id,
        locator,
        fork,
        blkno: u32::from_le_bytes(blkno),
        fork_flags,
        image,
        data: Span {
            start: 0,
            end: u32::from(data_len),
        },
    }
}

#[cold]
fn bad_fork(fork_flags: u8) -> BodyError {
    BodyError(format!(
        "invalid fork number {}",
        fork_flags & BKPBLOCK_FORK_MASK
    ))
}

#[cold]
fn bad_data_len(has_data: bool, data_len: u16) -> BodyError {
    if has_data {
        BodyError("BKPBLOCK_HAS_DATA set, but no data included".into())
    } else {
        BodyError(format!(
            "BKPBLOCK_HAS_DATA not set, but data length is {data_len}"
        ))
    }
}

/// `XLogRecordBlockImageHeader` (and `XLogRecordBlockCompressHeader`) with
/// `DecodeXLogRecord`'s checks; the image span holds only its length.
fn parse_image_header(c: &mut Cursor<'_>) -> Result<BlockImage, BodyError> {
    let [l0, l1, o0, o1, bimg_info] = c.array::<5>()?;
    let bimg_len = u16::from_le_bytes([l0, l1]);
    let hole_offset = u16::from_le_bytes([o0, o1]);
    let compressed =
        bimg_info & (BKPIMAGE_COMPRESS_PGLZ | BKPIMAGE_COMPRESS_LZ4 | BKPIMAGE_COMPRESS_ZSTD) != 0;
    let has_hole = bimg_info & BKPIMAGE_HAS_HOLE != 0;
    let hole_length = if compressed {
        if has_hole { c.u16()? } else { 0 }
    } else {
        (XLOG_BLCKSZ as u16).wrapping_sub(bimg_len)
    };
    let blcksz = XLOG_BLCKSZ as u16;
    if has_hole && (hole_offset == 0 || hole_length == 0 || bimg_len == blcksz) {
        return Err(BodyError(format!(
            "BKPIMAGE_HAS_HOLE set, but hole offset {hole_offset} length {hole_length} block image length {bimg_len}"
        )));
    }
    if !has_hole && (hole_offset != 0 || hole_length != 0) {
        return Err(BodyError(format!(
            "BKPIMAGE_HAS_HOLE not set, but hole offset {hole_offset} length {hole_length}"
        )));
    }
    if compressed && bimg_len == blcksz {
        return Err(BodyError(format!(
            "BKPIMAGE_COMPRESSED set, but block image length {bimg_len}"
        )));
    }
    if !has_hole && !compressed && bimg_len != blcksz {
        return Err(BodyError(format!(
            "neither BKPIMAGE_HAS_HOLE nor BKPIMAGE_COMPRESSED set, but block image length is {bimg_len}"
        )));
    }
    if u32::from(hole_offset) + u32::from(hole_length) > XLOG_BLCKSZ {
        return Err(BodyError(format!(
            "hole offset {hole_offset} length {hole_length} exceed the block"
        )));
    }
    Ok(BlockImage {
        // Length for now; placed after the headers are read.
        range: Span {
            start: 0,
            end: u32::from(bimg_len),
        },
        hole_offset,
        hole_length,
        bimg_info,
    })
}
