//! Backfills: the `initial_load` modes, the ledger of passes, and (later)
//! staging tables and the swap.
//!
//! - [`copy`]: `initial_load = 'copy'`, a snapshot read with binary `COPY`
//!   after the opt-in, in resumable block ranges, on its own connections.
//! - [`copy_binary`]: the binary `COPY` format into row values, the same
//!   values the WAL path decodes from heap tuples.
//! - [`snapshot`]: whether a snapshot sees every commit up to the opt-in.
//! - [`ledger`]: `backfills.toml`, one entry per pass, marks behind what
//!   ClickHouse took.
//!
//! `base_backup` and `object_store` come with later releases.

pub mod copy;
pub mod copy_binary;
pub mod ledger;
pub mod snapshot;
