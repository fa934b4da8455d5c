//! `<state>/status.json`: what `walshadow status` prints, written by the
//! running daemon about once a second (write-temp + rename; a reader never
//! sees half a file). Not durable state: losing it loses nothing.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use walshadow_types::Lsn;

use crate::progress::Stopped;

/// One pinned table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableStatus {
    pub destination: String,
    /// Rows written to ClickHouse since the table was first created
    /// (inserts, updates and delete markers).
    pub rows: u64,
    pub stopped: Option<Stopped>,
    /// What a table in scope waits for (its source table does not exist).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// A table no longer streamed, since when and why (its ClickHouse
    /// table stays as it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out: Option<String>,
    /// A load under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadStatus>,
    /// Columns not replicated, with why (`exclude_columns`,
    /// `unsupported_columns = "skip"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub left_out: BTreeMap<String, String>,
    /// Values written as the columns' `out_of_range` policies say.
    #[serde(default, skip_serializing_if = "crate::progress::is_zero")]
    pub values_replaced: u64,
}

/// How far a table's load is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadStatus {
    pub mode: String,
    /// Heap blocks read of blocks to read (`copy`; 0 of 0 until planned,
    /// and for `base_backup`, whose walk reads the whole backup).
    pub blocks_done: u64,
    pub blocks_total: u64,
    /// `blocks_done / blocks_total`, when there is a total.
    pub fraction: Option<f64>,
    /// Seconds left at the rate seen since the daemon saw the load start.
    pub eta_secs: Option<f64>,
    pub rows: u64,
}

impl TableStatus {
    /// The status of every table in `tables` (from the progress file).
    pub fn all(
        tables: &BTreeMap<String, crate::progress::TableProgress>,
    ) -> BTreeMap<String, TableStatus> {
        tables
            .iter()
            .map(|(k, t)| {
                let status = TableStatus {
                    destination: t.destination.clone(),
                    rows: t.rows,
                    stopped: t.stopped.clone(),
                    waiting: None,
                    out: t.opted_out.filter(|_| t.stopped.is_none()).map(|at| {
                        format!(
                            "not streamed since {at}: {}; its ClickHouse table stays as it was",
                            t.out_why.as_deref().unwrap_or("opted out")
                        )
                    }),
                    load: None,
                    left_out: t.left_out.clone(),
                    values_replaced: t.values_replaced,
                };
                (k.clone(), status)
            })
            .collect()
    }
}

/// The daemon's positions and counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusFile {
    pub pid: u32,
    pub updated_unix_ms: u64,
    /// End of the raw WAL received from the source.
    pub received: Lsn,
    /// End of the last record decoded.
    pub decoded: Lsn,
    /// Every transaction committed up to here is in ClickHouse.
    pub applied: Lsn,
    /// Where decoding restarts after a crash; the slot's flush position
    /// never passes it.
    pub restart: Lsn,
    pub shadow_ceiling: Lsn,
    pub shadow_replayed: Lsn,
    /// Commit time (µs since 2000-01-01 UTC) of the last applied
    /// transaction; 0 when none yet.
    pub applied_commit_time: i64,
    pub open_transactions: usize,
    pub memory_used: usize,
    pub spilled_bytes: u64,
    /// The TOAST chunk mirror (absent in files of older versions).
    #[serde(default)]
    pub toast: Option<ToastStatus>,
    pub tables: BTreeMap<String, TableStatus>,
    /// The source's WAL end as its walsender last reported it (0 while
    /// unknown): lag counts from here whatever ClickHouse does.
    #[serde(default)]
    pub source_end: Lsn,
    /// ClickHouse as the stream sees it (absent in older files).
    #[serde(default)]
    pub destination: DestinationStatus,
    /// The source no longer had the WAL: the `[backup]` store's archive
    /// serves it now.
    #[serde(default)]
    pub wal_from_archive: bool,
    /// Segments read from the archive since the start.
    #[serde(default)]
    pub archive_segments_read: u64,
    /// Why the config table's rows are ignored, while they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_table_ignored: Option<String>,
    /// Paused by `walshadow ctl pause`: no WAL is taken until `resume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<crate::progress::Paused>,
}

/// Whether ClickHouse takes what the stream sends. While `failing_since`
/// is set, the stream is paused on one request, retrying it with backoff;
/// progress stays behind it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestinationStatus {
    /// Unix ms of the first failure of the request being retried now.
    pub failing_since_unix_ms: Option<u64>,
    /// Attempts of that request that failed.
    pub failures: u64,
    /// What the stream is trying to do ("INSERT INTO `app`.`t`").
    pub waiting_for: Option<String>,
    /// The last error and its class (transient, environment).
    pub last_error: Option<String>,
    pub last_class: Option<String>,
    /// Unix ms of the last request ClickHouse took.
    pub last_success_unix_ms: Option<u64>,
}

/// Milliseconds since the Unix epoch, now.
pub fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The TOAST chunk mirror's size and traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToastStatus {
    /// Values, chunks and chunk bytes held.
    pub values: u64,
    pub chunks: u64,
    pub data_bytes: u64,
    /// Size of the mirror's file.
    pub file_bytes: u64,
    /// Deletions waiting for progress to be durable.
    pub pending: u64,
    /// Pointers resolved from the mirror, and not found there.
    pub hits: u64,
    pub misses: u64,
    /// Values read from the source; not found there; reads that failed.
    pub source_fetches: u64,
    pub source_misses: u64,
    pub source_errors: u64,
    /// Row versions skipped for a value gone from the source, waiting for
    /// a newer version of their row.
    pub waiting_rows: u64,
}

impl ToastStatus {
    pub fn new(
        m: walshadow_toast_mirror::MirrorStats,
        c: crate::toast::ToastCounters,
    ) -> ToastStatus {
        ToastStatus {
            values: m.values,
            chunks: m.chunks,
            data_bytes: m.data_bytes,
            file_bytes: m.file_bytes,
            pending: m.pending,
            hits: m.hits,
            misses: m.misses,
            source_fetches: c.source_fetches,
            source_misses: c.source_misses,
            source_errors: c.source_errors,
            waiting_rows: c.waiting_rows,
        }
    }
}

impl StatusFile {
    pub const FILE: &'static str = "status.json";

    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let tmp = dir.join(format!("{}.tmp", Self::FILE));
        let text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, dir.join(Self::FILE))
    }

    pub fn read(dir: &Path) -> std::io::Result<StatusFile> {
        let text = std::fs::read(dir.join(Self::FILE))?;
        serde_json::from_slice(&text).map_err(std::io::Error::other)
    }
}
