//! The shadow: a PostgreSQL standby of the source's major that replays only
//! the catalog. WAL records that touch user relations are rewritten to
//! `XLOG_NOOP` of the same length before the shadow sees them, so LSNs hold and
//! no user data lands on its disk. `ShadowCatalog` answers "what did relation R
//! look like at LSN L" from it.
//!
//! - [`bootstrap`]: `walshadow init` — base backup landed catalog-only, the
//!   filter's seed, the shadow's configuration.
//! - [`filter`]: which records reach the shadow, and their NOOP rewrite.
//! - [`segment_store`]: the filtered WAL, durable, served from segment starts.
//! - [`feeder`]: the walsender the shadow's walreceiver connects to.
//! - [`process`]: running PostgreSQL binaries as the unprivileged user.
//! - [`run`]: the shadow's lifecycle: started, kept running, stopped.
//!
//! The daemon's WAL intake (the source's WAL through the filter into the
//! store, and to the streaming pipeline) is the crate above this one,
//! `walshadow-intake`.
//! - [`postmaster`]: whether the shadow's postmaster is up (its lock file).
//! - [`state_lock`]: one process per state directory.
//! - [`catalog`]: `ShadowCatalog`, relation descriptors from the shadow.
//! - [`access`]: reaching the shadow from other processes; schema export.

pub mod access;
pub mod bootstrap;
pub mod catalog;
pub mod export_datadir;
pub mod feeder;
pub mod filter;
pub mod postmaster;
pub mod process;
pub mod run;
pub mod segment_store;
pub mod state_lock;
