//! `walshadow init`: from an empty state to a shadow ready to replay.
//!
//! ```text
//!  checks (major, wal_level, REPLICATION, full_page_writes)
//!    └─▶ physical slot (RESERVE_WAL)
//!        └─▶ catalog classes per database (SQL)
//!            └─▶ BASE_BACKUP ─▶ landing: control files, every catalog file;
//!                │               user files never touch disk
//!                └─▶ re-check classes (a catalog rewritten during the
//!                    backup means: retry on a fresh backup)
//!                    └─▶ seed for the filter, shadow configuration,
//!                        state file
//! ```
//!
//! `walshadow run` starts the shadow and feeds it; `init` only prepares.

pub mod state;

pub use state::InitState;
