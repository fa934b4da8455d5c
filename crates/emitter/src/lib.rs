//! The emitter: one ClickHouse `ReplacingMergeTree(_lsn, _is_deleted)` table
//! per source table, batched inserts over HTTP, and durable progress that
//! advances only behind what ClickHouse has taken.
//!
//! Empty until the streaming issue; the folder marks its place in the design.
