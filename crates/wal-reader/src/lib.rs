//! WAL sources around the pure decoder in `walshadow-wal-decode`: the physical
//! replication client (`replication`) and the segment-file reader (`segments`).
//! Both hand raw WAL bytes with their start LSN to the same
//! [`walshadow_wal_decode::WalStreamDecoder`], so records come out identical
//! whichever way the WAL arrived.

pub mod segments;

pub mod replication;
