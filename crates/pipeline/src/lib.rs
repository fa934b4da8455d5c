//! The streaming pipeline: the source's raw WAL, tapped from the shadow's
//! feed, decoded into transactions; committed ones become rows in
//! ClickHouse; progress is recorded only behind what ClickHouse took.
//!
//! ```text
//!  source ══ slot ══▶ walshadow run ──filtered──▶ shadow (catalog at the commit)
//!                          │ raw WAL (WalTap)              ▲ replay ceiling
//!                          ▼                               │
//!   decode ─▶ Assembler ─▶ Streamer ─▶ RowDecoder ─▶ emitter ─▶ ClickHouse
//!                             │ progress.json (applied, restart) ─▶ slot flush
//!                             └─▶ toast: chunk mirror (TOAST values written long ago)
//! ```

pub mod backfills;
pub mod backup_admin;
pub mod catalog_reach;
pub mod control;
pub mod daemon;
pub mod database_streams;
pub mod databases;
pub mod load_bars;
pub mod metrics;
pub mod progress;
pub mod relations;
pub mod report;
pub mod scope;
pub mod status;
pub mod stop;
pub mod stream;
pub mod table_admin;
pub mod teardown;
pub mod toast;
pub mod verify;
