//! Block references of a record (`XLogRecordBlockHeader` and
//! `XLogRecordBlockImageHeader` in xlogrecord.h) and full-page image
//! restoration (`RestoreBlockImage` in xlogreader.c).

use std::io::Read;
use std::ops::Range;

use walshadow_types::{BlockNumber, ForkNumber, RelFileLocator};

use crate::page::XLOG_BLCKSZ;
use crate::pglz::pglz_decompress;

pub(crate) const BKPBLOCK_FORK_MASK: u8 = 0x0F;
pub(crate) const BKPBLOCK_HAS_IMAGE: u8 = 0x10;
pub(crate) const BKPBLOCK_HAS_DATA: u8 = 0x20;
pub(crate) const BKPBLOCK_WILL_INIT: u8 = 0x40;
pub(crate) const BKPBLOCK_SAME_REL: u8 = 0x80;

pub(crate) const BKPIMAGE_HAS_HOLE: u8 = 0x01;
pub(crate) const BKPIMAGE_APPLY: u8 = 0x02;
pub(crate) const BKPIMAGE_COMPRESS_PGLZ: u8 = 0x04;
pub(crate) const BKPIMAGE_COMPRESS_LZ4: u8 = 0x08;
pub(crate) const BKPIMAGE_COMPRESS_ZSTD: u8 = 0x10;

/// How a full-page image is compressed (`wal_compression`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FpiCompression {
    None,
    Pglz,
    Lz4,
    Zstd,
}

/// A byte range of a record. Records are under 1 GiB, so `u32` offsets
/// suffice and keep [`BlockRef`] small (it is written once per block
/// reference on the hot path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) start: u32,
    pub(crate) end: u32,
}

impl Span {
    pub(crate) fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }

    pub(crate) fn len(self) -> usize {
        self.end.saturating_sub(self.start) as usize
    }
}

/// A full-page image as stored in the record: the page minus its hole,
/// possibly compressed. `range` indexes the record's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockImage {
    pub(crate) range: Span,
    pub hole_offset: u16,
    pub hole_length: u16,
    pub bimg_info: u8,
}

impl BlockImage {
    /// `BKPIMAGE_APPLY`: redo restores this image (clear when it only serves
    /// `wal_consistency_checking`).
    pub fn apply(&self) -> bool {
        self.bimg_info & BKPIMAGE_APPLY != 0
    }

    pub fn compression(&self) -> FpiCompression {
        if self.bimg_info & BKPIMAGE_COMPRESS_PGLZ != 0 {
            FpiCompression::Pglz
        } else if self.bimg_info & BKPIMAGE_COMPRESS_LZ4 != 0 {
            FpiCompression::Lz4
        } else if self.bimg_info & BKPIMAGE_COMPRESS_ZSTD != 0 {
            FpiCompression::Zstd
        } else {
            FpiCompression::None
        }
    }

    /// Stored length of the image (`bimg_len`).
    pub fn stored_len(&self) -> usize {
        self.range.len()
    }

    /// Rebuilds the 8 KiB page from `stored` (the image bytes of the record):
    /// decompress, then put the zeroed hole back.
    pub(crate) fn restore(&self, stored: &[u8]) -> Result<Vec<u8>, String> {
        let blcksz = XLOG_BLCKSZ as usize;
        let hole_offset = usize::from(self.hole_offset);
        let hole_length = usize::from(self.hole_length);
        let body_len = blcksz
            .checked_sub(hole_length)
            .ok_or_else(|| format!("hole length {hole_length} exceeds the block size"))?;
        if hole_offset > body_len {
            return Err(format!(
                "hole at {hole_offset} of length {hole_length} does not fit the block"
            ));
        }
        let body = match self.compression() {
            FpiCompression::None => stored.to_vec(),
            FpiCompression::Pglz => {
                pglz_decompress(stored, body_len, true).map_err(|e| format!("pglz image: {e}"))?
            }
            FpiCompression::Lz4 => {
                let mut out = vec![0u8; body_len];
                let n = lz4_flex::block::decompress_into(stored, &mut out)
                    .map_err(|e| format!("lz4 image: {e}"))?;
                out.truncate(n);
                out
            }
            FpiCompression::Zstd => {
                let mut dec = ruzstd::decoding::StreamingDecoder::new(stored)
                    .map_err(|e| format!("zstd image: {e}"))?;
                let mut out = Vec::with_capacity(body_len);
                // Read one byte past the expected size to detect overlong output.
                (&mut dec)
                    .take(body_len as u64 + 1)
                    .read_to_end(&mut out)
                    .map_err(|e| format!("zstd image: {e}"))?;
                out
            }
        };
        if body.len() != body_len {
            return Err(format!(
                "image decodes to {} bytes, expected {body_len}",
                body.len()
            ));
        }
        let mut page = Vec::with_capacity(blcksz);
        let (before, after) = body.split_at(hole_offset);
        page.extend_from_slice(before);
        page.resize(hole_offset + hole_length, 0);
        page.extend_from_slice(after);
        Ok(page)
    }
}

/// One block reference (`DecodedBkpBlock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRef {
    /// Block reference id, 0..=32.
    pub id: u8,
    pub locator: RelFileLocator,
    pub fork: ForkNumber,
    pub blkno: BlockNumber,
    /// `fork_flags` as stored: fork number in the low nibble, `BKPBLOCK_*`.
    pub fork_flags: u8,
    pub image: Option<BlockImage>,
    pub(crate) data: Span,
}

impl BlockRef {
    pub fn has_image(&self) -> bool {
        self.image.is_some()
    }

    /// The image is present and redo applies it.
    pub fn apply_image(&self) -> bool {
        self.image.as_ref().is_some_and(BlockImage::apply)
    }

    pub fn has_data(&self) -> bool {
        self.fork_flags & BKPBLOCK_HAS_DATA != 0
    }

    /// `BKPBLOCK_WILL_INIT`: redo initialises the page from scratch.
    pub fn will_init(&self) -> bool {
        self.fork_flags & BKPBLOCK_WILL_INIT != 0
    }

    /// Length of the block's rmgr data.
    pub fn data_len(&self) -> usize {
        self.data.len()
    }
}
