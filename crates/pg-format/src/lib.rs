//! PostgreSQL's on-disk facts, in one pure place beneath every other crate.
//!
//! - [`cursor`]: the one checked byte reader.
//! - [`page`]: the block sizes and the page checksum (`checksum_impl.h`).
//! - [`wal_files`]: WAL segment and timeline history file names
//!   (`xlog_internal.h`) and the history file's contents (`timeline.c`).
//! - [`epoch`]: PostgreSQL's epoch (2000-01-01) in the units the formats use.
//! - [`type_oid`]: the built-in type OIDs walshadow reads.
//!
//! No I/O and no async runtime: the decoders, the fuzz targets and the I/O
//! layers all build on it.

#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)
)]

pub mod cursor;
pub mod epoch;
pub mod page;
pub mod type_oid;
pub mod wal_files;
