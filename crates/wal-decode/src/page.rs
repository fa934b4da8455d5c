//! WAL page headers (`XLogPageHeaderData`, `XLogLongPageHeaderData` in
//! xlog_internal.h) and their validation (`XLogReaderValidatePageHeader`).

use walshadow_types::{Lsn, PgMajor, TimeLineId};

use crate::cursor::Cursor;
use crate::error::WalErrorKind;

/// `XLOG_BLCKSZ`: walshadow supports only the default 8 KiB WAL pages.
pub use walshadow_pg_format::page::XLOG_BLCKSZ;
/// `SizeOfXLogShortPHD`: MAXALIGN(20).
pub const SIZE_OF_SHORT_PHD: usize = 24;
/// `SizeOfXLogLongPHD`: MAXALIGN(36 + 4).
pub const SIZE_OF_LONG_PHD: usize = 40;

pub const XLP_FIRST_IS_CONTRECORD: u16 = 0x0001;
pub const XLP_LONG_HEADER: u16 = 0x0002;
pub const XLP_BKP_REMOVABLE: u16 = 0x0004;
pub const XLP_FIRST_IS_OVERWRITE_CONTRECORD: u16 = 0x0008;
const XLP_ALL_FLAGS: u16 = 0x000F;

/// A parsed page header; the long fields are present on the first page of
/// each segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageHeader {
    pub magic: u16,
    pub info: u16,
    pub tli: TimeLineId,
    pub pageaddr: Lsn,
    pub rem_len: u32,
    /// `(xlp_sysid, xlp_seg_size, xlp_xlog_blcksz)` of a long header.
    pub long: Option<(u64, u32, u32)>,
}

impl PageHeader {
    /// Bytes the header occupies: `XLogPageHeaderSize`.
    pub fn size(&self) -> usize {
        if self.info & XLP_LONG_HEADER != 0 {
            SIZE_OF_LONG_PHD
        } else {
            SIZE_OF_SHORT_PHD
        }
    }

    pub fn is_contrecord(&self) -> bool {
        self.info & XLP_FIRST_IS_CONTRECORD != 0
    }

    pub fn is_overwrite_contrecord(&self) -> bool {
        self.info & XLP_FIRST_IS_OVERWRITE_CONTRECORD != 0
    }

    /// Bytes needed to parse the header that starts `buf`: 24, or 40 when
    /// the info bits announce a long header. `None` until 4 bytes are there.
    pub(crate) fn needed(buf: &[u8]) -> Option<usize> {
        let info = u16::from_le_bytes(buf.get(2..4)?.try_into().ok()?);
        Some(if info & XLP_LONG_HEADER != 0 {
            SIZE_OF_LONG_PHD
        } else {
            SIZE_OF_SHORT_PHD
        })
    }

    /// Parses a header from `buf`, which must hold [`PageHeader::needed`]
    /// bytes; checks only what needs no context.
    pub(crate) fn parse(buf: &[u8]) -> Result<PageHeader, WalErrorKind> {
        let truncated = || WalErrorKind::BadBody("truncated page header".into());
        let mut c = Cursor::new(buf);
        let magic = c.u16().map_err(|_| truncated())?;
        let info = c.u16().map_err(|_| truncated())?;
        let tli = c.u32().map_err(|_| truncated())?;
        let pageaddr = Lsn(c.u64().map_err(|_| truncated())?);
        let rem_len = c.u32().map_err(|_| truncated())?;
        if magic == 0 && info == 0 && tli == 0 && pageaddr.0 == 0 {
            return Err(WalErrorKind::ZeroPage);
        }
        if PgMajor::from_xlog_page_magic(magic).is_none() {
            return Err(WalErrorKind::BadMagic(magic));
        }
        if info & !XLP_ALL_FLAGS != 0 {
            return Err(WalErrorKind::BadPageInfo(info));
        }
        let long = if info & XLP_LONG_HEADER != 0 {
            c.take(4).map_err(|_| truncated())?; // padding to 8-byte alignment
            let sysid = c.u64().map_err(|_| truncated())?;
            let seg_size = c.u32().map_err(|_| truncated())?;
            let blcksz = c.u32().map_err(|_| truncated())?;
            Some((sysid, seg_size, blcksz))
        } else {
            None
        };
        Ok(PageHeader {
            magic,
            info,
            tli,
            pageaddr,
            rem_len,
            long,
        })
    }
}

/// Checks that `seg_size` is one PostgreSQL allows (`IsValidWalSegSize`).
pub(crate) fn valid_segment_size(seg_size: u64) -> bool {
    seg_size.is_power_of_two() && (1 << 20..=1 << 30).contains(&seg_size)
}
