//! Backfills: the `initial_load` modes, the ledger of passes, staging
//! tables and the swap.
//!
//! - [`copy`]: `initial_load = 'copy'`, a snapshot read with binary `COPY`
//!   after the opt-in, in resumable block ranges, on its own connections.
//! - [`backup`]: `initial_load = 'base_backup'` and `'object_store'`, a
//!   pass over a backup for one or more tables: walk, gate, staging, swap;
//!   a fresh `BASE_BACKUP`, or a backup in the operator's store.
//! - [`store_walk`]: a stored backup's files fed to the same walk.
//! - [`gap`]: `object_store`'s WAL leg: the archive's segments from the
//!   backup's start to the opt-ins, their transaction outcomes (the
//!   `pg_xact` patch) and the loaded tables' changes replayed.
//! - [`window_pages`]: the walked pages the backup's WAL window defines
//!   (full-page images, initialisations), read instead of the copies.
//! - [`walk_sink`]: the `BASE_BACKUP` sink that walks the pages of a few
//!   relations and keeps `pg_xact`/`pg_multixact` in memory.
//! - [`snapshot`]: whether a snapshot sees every commit up to the opt-in.
//! - [`staging`]: a backup-mode load's staging table beside the
//!   destination, published with `EXCHANGE TABLES`, live-window rows
//!   copied back, recovery by the staging table's uuid.
//! - [`ledger`]: `backfills.toml`, one entry per pass, marks behind what
//!   ClickHouse took.
//! - [`pass_progress`]: where an interrupted `object_store` pass resumes:
//!   the relation segments already in staging.
//!
//! The pure decoders they use live beneath: the binary `COPY` decoder in
//! `walshadow-rows` (`copy_binary`), the heap page parser and the
//! visibility gate in `walshadow-heap`.

mod attempts;
pub mod backup;
pub mod copy;
pub mod gap;
pub mod ledger;
pub mod pass_progress;
pub mod snapshot;
pub mod staging;
pub mod store_walk;
pub mod walk_sink;
pub mod window_pages;
