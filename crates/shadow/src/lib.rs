//! The shadow: a PostgreSQL standby of the source's major that replays only
//! the catalog. WAL records that touch user relations are rewritten to
//! `XLOG_NOOP` of the same length before the shadow sees them, so LSNs hold and
//! no user data lands on its disk. `ShadowCatalog` answers "what did relation R
//! look like at LSN L" from it.
//!
//! - [`filter`]: which records reach the shadow, and their NOOP rewrite.

pub mod feeder;
pub mod filter;
pub mod segment_store;
