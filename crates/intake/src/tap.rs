//! The second consumer of the source's raw WAL: the streaming pipeline.

use std::time::Duration;

use walshadow_types::Lsn;

/// A second consumer of the source's raw WAL: the streaming pipeline. It
/// sees every byte the filter sees (and possibly earlier ones, from its own
/// restart position), in order, after the filtered bytes went to the store.
#[derive(Debug, Clone)]
pub struct WalTap {
    pub tx: tokio::sync::mpsc::Sender<TapEvent>,
    /// Where the tap must restart after a crash or reconnect: the stream
    /// starts no later than this page, and the slot's flush position never
    /// passes it.
    pub hold: tokio::sync::watch::Receiver<Lsn>,
    /// The source's WAL end as its walsender last reported it (keepalives
    /// and WAL messages), whatever the tap's consumer is doing: lag is
    /// measured against it.
    pub source_end: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Whether the archive serves the WAL now, and how much it served.
    pub archive: std::sync::Arc<ArchiveTurns>,
}

/// The intake's turns on the `[backup]` store's WAL archive, for status
/// and metrics.
#[derive(Debug, Default)]
pub struct ArchiveTurns {
    /// The source no longer has the WAL: the archive serves it now.
    pub reading: std::sync::atomic::AtomicBool,
    /// Segments read from the archive since the start.
    pub segments: std::sync::atomic::AtomicU64,
}

/// How long the tap may stay full before the feed lets go of the source.
/// A consumer that takes nothing for this long waits on something else
/// (ClickHouse down, a long commit): the feed ends its replication
/// connection instead of leaving the walsender unanswered, so the source
/// can shut down (its walsender waits for the standby's answers), and
/// connects again from the tap's hold once the tap has room.
pub const TAP_STALL: Duration = Duration::from_secs(5);

/// What a [`WalTap`] receives (a clone shares the WAL's bytes).
#[derive(Debug, Clone)]
pub enum TapEvent {
    /// A new stream (first connection, or again after a transient error):
    /// the raw WAL that follows starts at `from`, a page boundary.
    Start { from: Lsn },
    /// Raw WAL from `start`, contiguous with the previous chunk.
    Wal { start: Lsn, data: bytes::Bytes },
}
