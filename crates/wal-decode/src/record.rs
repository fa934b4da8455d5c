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
    BlockImage, BlockRef,
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
        let mut c = Cursor::new(raw);
        let xl_tot_len = c.u32().ok()?;
        let xl_xid = c.u32().ok()?;
        let xl_prev = Lsn(c.u64().ok()?);
        let xl_info = c.u8().ok()?;
        let xl_rmid = RmgrId(c.u8().ok()?);
        c.take(2).ok()?;
        let xl_crc = c.u32().ok()?;
        Some(RecordHeader {
            xl_tot_len,
            xl_xid,
            xl_prev,
            xl_info,
            xl_rmid,
            xl_crc,
        })
    }

    /// The rmgr-private bits of `xl_info` (`XLR_RMGR_INFO_MASK`).
    pub fn rmgr_info(&self) -> u8 {
        self.xl_info & !XLR_INFO_MASK
    }

    pub(crate) fn is_xlog_switch(&self) -> bool {
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
        self.raw.get(b.data.clone()).unwrap_or_default()
    }

    /// Block reference with id `id`, if the record has one.
    pub fn block(&self, id: u8) -> Option<&'a BlockRef> {
        self.blocks.iter().find(|b| b.id == id)
    }

    /// The stored (possibly compressed, hole removed) image bytes of `b`.
    pub fn image_bytes(&self, b: &BlockRef) -> Option<&'a [u8]> {
        let img = b.image.as_ref()?;
        self.raw.get(img.range.clone())
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
            .get(img.range.clone())
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
        self.raw.get(b.data.clone()).unwrap_or_default()
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
    let mut remaining = c.remaining();
    // Sum of payload bytes the headers announce; headers end where the
    // announced payload fills the rest of the record.
    let mut datatotal: usize = 0;
    let mut origin = None;
    let mut toplevel_xid = None;
    let mut main_data_len: usize = 0;
    let mut max_block_id: Option<u8> = None;
    let mut last_locator: Option<RelFileLocator> = None;

    while remaining > datatotal {
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
                let fork_flags = c.u8()?;
                let fork =
                    ForkNumber::from_u8(fork_flags & BKPBLOCK_FORK_MASK).ok_or_else(|| {
                        BodyError(format!(
                            "invalid fork number {}",
                            fork_flags & BKPBLOCK_FORK_MASK
                        ))
                    })?;
                let has_image = fork_flags & BKPBLOCK_HAS_IMAGE != 0;
                let has_data = fork_flags & BKPBLOCK_HAS_DATA != 0;
                let data_len = usize::from(c.u16()?);
                if has_data && data_len == 0 {
                    return Err(BodyError(
                        "BKPBLOCK_HAS_DATA set, but no data included".into(),
                    ));
                }
                if !has_data && data_len != 0 {
                    return Err(BodyError(format!(
                        "BKPBLOCK_HAS_DATA not set, but data length is {data_len}"
                    )));
                }
                datatotal = datatotal.saturating_add(data_len);
                let mut image = None;
                if has_image {
                    let bimg_len = c.u16()?;
                    let hole_offset = c.u16()?;
                    let bimg_info = c.u8()?;
                    let compressed = bimg_info
                        & (BKPIMAGE_COMPRESS_PGLZ | BKPIMAGE_COMPRESS_LZ4 | BKPIMAGE_COMPRESS_ZSTD)
                        != 0;
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
                    let image_len = usize::from(bimg_len);
                    datatotal = datatotal.saturating_add(image_len);
                    image = Some(BlockImage {
                        // Length for now; placed after the headers are read.
                        range: 0..image_len,
                        hole_offset,
                        hole_length,
                        bimg_info,
                    });
                }
                let locator = if fork_flags & BKPBLOCK_SAME_REL == 0 {
                    let l = RelFileLocator {
                        spc_oid: c.u32()?,
                        db_oid: c.u32()?,
                        rel_number: c.u32()?,
                    };
                    last_locator = Some(l);
                    l
                } else {
                    last_locator.ok_or_else(|| {
                        BodyError("BKPBLOCK_SAME_REL set but no previous rel".into())
                    })?
                };
                let blkno = c.u32()?;
                blocks.push(BlockRef {
                    id,
                    locator,
                    fork,
                    blkno,
                    fork_flags,
                    image,
                    // Length for now; placed after the headers are read.
                    data: 0..data_len,
                });
            }
            other => return Err(BodyError(format!("invalid block_id {other}"))),
        }
        remaining = c.remaining();
    }
    remaining = c.remaining();
    if remaining != datatotal {
        return Err(BodyError(format!(
            "record with invalid length: {remaining} payload bytes, headers announce {datatotal}"
        )));
    }
    // Payload: per block its image then its data, then the main data.
    let mut pos = c.position();
    for b in blocks.iter_mut() {
        if let Some(img) = b.image.as_mut() {
            let image_len = img.range.len();
            img.range = pos..pos + image_len;
            pos += image_len;
        }
        let data_len = b.data.len();
        b.data = pos..pos + data_len;
        pos += data_len;
    }
    let main_data = (pos, pos + main_data_len);
    if main_data.1 != raw.len() {
        return Err(BodyError("payload does not end with the record".into()));
    }
    Ok(Fragments {
        origin,
        toplevel_xid,
        main_data,
    })
}
