//! Decode errors. Each carries the LSN it is about, so an operator can find
//! the spot with `pg_waldump --start`.

use walshadow_types::Lsn;

/// A WAL decoding failure at `lsn`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("WAL at {lsn}: {kind}")]
pub struct WalDecodeError {
    pub lsn: Lsn,
    pub kind: WalErrorKind,
}

impl WalDecodeError {
    pub(crate) fn new(lsn: Lsn, kind: WalErrorKind) -> Self {
        WalDecodeError { lsn, kind }
    }

    /// True when the bytes look like the end of written WAL rather than
    /// damage: a zero record length, a zeroed page, or a page from an older
    /// segment that was recycled (its address is not the one expected). This
    /// is how PostgreSQL itself finds the end of WAL in `pg_wal`.
    pub fn is_end_of_wal(&self) -> bool {
        matches!(
            self.kind,
            WalErrorKind::RecordTooShort(0)
                | WalErrorKind::ZeroPage
                | WalErrorKind::UnexpectedPageAddr { .. }
        )
    }
}

/// What went wrong; the wording follows `xlogreader.c` where it has one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WalErrorKind {
    #[error("page header is all zeros (end of written WAL)")]
    ZeroPage,
    #[error(
        "invalid magic number {0:#06X} in page header (not WAL of PostgreSQL 15, 16, 17 or 18)"
    )]
    BadMagic(u16),
    #[error("page magic {found:#06X} differs from the stream's {expected:#06X}")]
    MagicChanged { found: u16, expected: u16 },
    #[error("invalid info bits {0:#06X} in page header")]
    BadPageInfo(u16),
    #[error("unexpected page address {found} in page header (expected {expected})")]
    UnexpectedPageAddr { found: Lsn, expected: Lsn },
    #[error("WAL is from a different system: identifier {found}, expected {expected}")]
    SystemIdMismatch { found: u64, expected: u64 },
    #[error("WAL segment size {found} in page header, expected {expected}")]
    SegmentSizeMismatch { found: u32, expected: u32 },
    #[error("WAL block size {0} in page header, expected 8192")]
    BlockSizeMismatch(u32),
    #[error("out-of-sequence timeline ID {found} (after {latest}) in page header")]
    TimelineBackwards { found: u32, latest: u32 },
    #[error("there is no contrecord flag on the page continuing the record at {record}")]
    MissingContrecord { record: Lsn },
    #[error("invalid contrecord length {found} (expected {expected}) for the record at {record}")]
    BadContrecordLength {
        found: u32,
        expected: u64,
        record: Lsn,
    },
    #[error("contrecord is requested where a record should start")]
    UnexpectedContrecord,
    #[error("invalid record offset inside a page header")]
    RecordInPageHeader,
    #[error("invalid record length: expected at least 24, got {0}")]
    RecordTooShort(u32),
    #[error("record length {0} exceeds the 1 GiB maximum")]
    RecordTooLong(u32),
    #[error("invalid resource manager ID {0}")]
    BadRmgr(u8),
    #[error("record with incorrect prev-link {found} (expected {expected})")]
    BadPrevLink { found: Lsn, expected: Lsn },
    #[error(
        "incorrect resource manager data checksum in record (computed {computed:#010X}, stored {stored:#010X})"
    )]
    BadCrc { computed: u32, stored: u32 },
    #[error("invalid record body: {0}")]
    BadBody(String),
    #[error("full-page image of block reference {block_id}: {reason}")]
    BadImage { block_id: u8, reason: String },
    #[error("bytes fed at {got} do not continue the stream, which is at {expected}")]
    NonContiguous { got: Lsn, expected: Lsn },
    #[error("a WAL segment size of {0} bytes is not a power of two between 1 MiB and 1 GiB")]
    BadSegmentSize(u64),
}
