//! Pure WAL decoding for PostgreSQL 15 to 18: bytes in, records out. No
//! sockets, no files, no async — so it can be fuzzed, benchmarked and tested
//! on captured bytes alone.
//!
//! ```text
//!  raw WAL bytes (any chunk size,       ┌──────────────────┐
//!  page headers included) ─── feed ───▶ │ WalStreamDecoder │ ── poll ──▶ WalRecord
//!  from segment files or XLogData       │  page headers,   │            (header, block refs,
//!                                       │  contrecords,    │             FPIs on demand,
//!                                       │  CRC-32C, prev   │             main data)
//!                                       └──────────────────┘
//! ```
//!
//! The layouts follow PostgreSQL's `xlog_internal.h` (pages), `xlogrecord.h`
//! (records and block references) and `xlogreader.c` (`XLogDecodeNextRecord`,
//! `DecodeXLogRecord`, `RestoreBlockImage`), whose checks are mirrored here so
//! that what PostgreSQL would refuse to replay is refused here too, with the
//! LSN it is about. Nothing in this crate panics on input bytes.
//!
//! Every layout that differs between majors is looked up through
//! [`walshadow_types::PgMajor`]; for pages and records that is only the page
//! magic, since 15 to 18 share the record format.

#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::indexing_slicing))]

mod block;
mod cursor;
mod error;
mod page;
mod pglz;
mod record;
mod rmgr;
mod stream;
mod summary;

pub use block::{BlockImage, BlockRef, FpiCompression};
pub use error::{WalDecodeError, WalErrorKind};
pub use page::{
    PageHeader, XLOG_BLCKSZ, XLP_BKP_REMOVABLE, XLP_FIRST_IS_CONTRECORD,
    XLP_FIRST_IS_OVERWRITE_CONTRECORD, XLP_LONG_HEADER,
};
pub use pglz::{PglzError, pglz_decompress};
pub use record::{RecordHeader, RecordView, SIZE_OF_XLOG_RECORD, WalRecord, decode_record};
pub use rmgr::RmgrId;
pub use stream::WalStreamDecoder;
pub use summary::{BlockSummary, RecordSummary};
