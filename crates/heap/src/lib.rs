//! Heap pages as a base backup stores them, pure: bytes in, tuples and
//! verdicts out.
//!
//! - [`heap_page`]: a heap page into its line pointers and tuples, checked
//!   (header bounds, item bounds, the page checksum when the cluster has them).
//! - [`visibility`]: the `base_backup` visibility gate: each walked tuple
//!   emitted, dropped or deferred by the backup's `pg_xact`/`pg_multixact`,
//!   deferred ones resolved once the walk ends.
//!
//! The `BASE_BACKUP` sink that feeds them (`walshadow-backfill`'s
//! `walk_sink`) and the fuzz targets build on this crate; nothing here
//! reads a file or a socket.

#![forbid(unsafe_code)]

pub mod heap_page;
pub mod visibility;
