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
//!
//! On top of records, the rmgr decoders read what logical decoding
//! (decode.c) reads, zero-copy: [`heap`] (row changes of Heap/Heap2
//! records), [`prune`] (the line pointers pruning and vacuum records free,
//! read apart from `heap` since they change no row), [`xact`] (commit, abort, prepare, assignment, invalidations),
//! [`standby`] (running transactions) and [`sinval`] (invalidation
//! messages). Each takes a [`RecordView`] and returns values borrowing it.

#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

mod block;
use walshadow_pg_format::cursor;
mod error;
pub mod heap;
pub mod identify;
mod page;
mod pglz;
pub mod prune;
mod record;
mod rmgr;
pub mod sinval;
pub mod smgr;
pub mod standby;
mod stream;
mod summary;
pub mod syscache;
#[cfg(test)]
mod test_record;
pub mod xact;

pub use block::{BlockImage, BlockRef, FpiCompression};
pub use error::{WalDecodeError, WalErrorKind};
pub use heap::{
    HeapChange, HeapDecodeError, HeapErrorKind, OldTuple, Tid, TupleBytes, decode_heap,
    heap_record_name,
};
pub use page::{
    PageHeader, XLOG_BLCKSZ, XLP_BKP_REMOVABLE, XLP_FIRST_IS_CONTRECORD,
    XLP_FIRST_IS_OVERWRITE_CONTRECORD, XLP_LONG_HEADER,
};
pub use pglz::{PglzError, pglz_decompress};
pub use prune::{PruneRecord, decode_prune};
pub use record::{RecordHeader, RecordView, SIZE_OF_XLOG_RECORD, WalRecord, decode_record};
pub use rmgr::RmgrId;
pub use sinval::Inval;
pub use smgr::decode_smgr_create;
pub use standby::{RunningXacts, StandbyDecodeError, StandbyErrorKind, decode_running_xacts};
pub use stream::WalStreamDecoder;
pub use summary::{BlockSummary, RecordSummary};
pub use xact::{
    DroppedStats, XactAbort, XactCommit, XactDecodeError, XactErrorKind, XactOrigin, XactPrepare,
    XactRecord, decode_xact,
};
