//! Prometheus metrics of `walshadow run`: a registry that the stream and the
//! backfills update through cheap setters, served at `GET /metrics` on
//! `[metrics] listen`.
//!
//! ```text
//!  Streamer ── set_positions, add_rows, set_assembler, set_toast ──┐
//!  backfills ─ set_backfills_pending, add_backfill_rows, … ────────┤
//!                                                                  ▼
//!                           Metrics (atomics behind an Arc; clones share them)
//!                                                                  │ encoded per scrape
//!  Prometheus ──── GET /metrics ───▶ MetricsServer (hyper http1) ──┘ text format 0.0.4
//! ```
//!
//! | metric | type | what |
//! | --- | --- | --- |
//! | `walshadow_received_lsn`, `_decoded_lsn`, `_applied_lsn` | gauge | WAL positions as byte offsets (LSN as a number) |
//! | `walshadow_source_current_lsn` | gauge | the source's WAL position, when known |
//! | `walshadow_lag_bytes` | gauge | source position (else received end) minus applied |
//! | `walshadow_lag_seconds` | gauge | now minus the last applied commit's time; 0 when caught up |
//! | `walshadow_applied_commit_time_seconds` | gauge | that commit time, Unix seconds |
//! | `walshadow_rows_written_total{table}` | counter | rows written to ClickHouse by the stream |
//! | `walshadow_values_replaced_total{table}` | counter | values the stream wrote as the columns' `out_of_range` policies say (NULL or the nearest value) |
//! | `walshadow_table_stopped{table}` | gauge | 1 while the table is stopped by a definite error |
//! | `walshadow_table_stop_reason{table,reason}` | gauge | 1 while the table is stopped, `reason` its stop code (the operator guide's stop table) |
//! | `walshadow_table_reloads_total{table,reason}` | counter | tables walshadow loaded again by itself after a change ClickHouse cannot follow in place (`reason`: `full_identity_columns`, `partial_truncate`, `partitions_changed`, `type_changed`: a type change without a rewrite that may change the values' text, or a composite type gaining or losing a field) |
//! | `walshadow_config_table_ignored` | gauge | 1 while the config table's rows are ignored (it belongs to another role) |
//! | `walshadow_paused` | gauge | 1 while the stream is paused by `walshadow ctl pause` |
//! | `walshadow_wal_from_archive` | gauge | 1 while the source no longer has the WAL the intake needs and the `[backup]` store's archive serves it |
//! | `walshadow_archive_segments_read_total` | counter | WAL segments read from the archive |
//! | `walshadow_destination_errors_total{code,class}` | counter | failed ClickHouse requests of the stream, by exception code (`http_NNN` without one, `connection`, `timeout`, `bad_response`) and class (transient, environment, definite) |
//! | `walshadow_destination_retries_total` | counter | ClickHouse requests of the stream tried again after a transient or environment error |
//! | `walshadow_destination_up` | gauge | 0 while the stream waits on a ClickHouse request it retries, else 1 |
//! | `walshadow_destination_last_success_seconds` | gauge | Unix time of the last request ClickHouse took |
//! | `walshadow_catalog_commits_total{outcome}` | counter | catalog-changing commits: `refreshed` (they could concern a table in scope: its rows so far made durable, its descriptor read again), `coalesced` (the same without the flush: none of the tables it concerns changed since durable progress) or `skipped` (temporary tables, unrelated DDL) |
//! | `walshadow_open_transactions`, `walshadow_assembler_memory_bytes`, `walshadow_assembler_spilled_bytes` | gauge | transaction assembler |
//! | `walshadow_toast_*` | gauge, counter | the TOAST chunk mirror (size, hits, source reads) |
//! | `walshadow_backfills_pending{mode}` | gauge | backfills waiting, per `initial_load` mode |
//! | `walshadow_backfills_running` | gauge | backfills in progress |
//! | `walshadow_backfill_rows_total{table,mode}`, `walshadow_backfill_bytes_total{table,mode}` | counter | what backfills loaded |
//! | `walshadow_backfill_progress_ratio{table}`, `walshadow_backfill_eta_seconds{table}` | gauge | a `copy` load's blocks read of blocks to read, and the time left at its rate so far |
//!
//! Positions and both lags appear only after the first
//! [`Metrics::set_positions`] (an absent series, not a made-up 0), and
//! `walshadow_lag_seconds` only once a commit time is known or the stream
//! is caught up. The lag follows `walshadow status` (see `report.rs`):
//! caught up means no bytes behind the head, or no open transaction and
//! nothing decoded past the applied commit; an idle source then shows 0,
//! not the age of its last commit.
//!
//! The exposition is Prometheus's text format 0.0.4
//! (`text/plain; version=0.0.4`), which every Prometheus version and
//! compatible scraper accepts; Prometheus 3 refuses a scrape without a
//! valid `Content-Type`, so it is always sent. Gauges are floats to
//! Prometheus, so an LSN is exact up to 2^53 (8 PiB of WAL).
//!
//! The endpoint runs on hyper's HTTP/1 server, the HTTP stack the emitter
//! already links: one route does not warrant a framework (axum, tower) or
//! a second HTTP implementation in a 2-core build. Connections are capped
//! (32 in all, 4 per peer address) and their headers must arrive within a
//! timeout, so a stuck or hostile client cannot hold the daemon's memory
//! or sockets, nor keep the scraper out. With `[metrics] token_file`,
//! `/metrics` asks for `Authorization: Bearer <token>`; `/healthz` and
//! `/readyz` stay open. What `/metrics` shows: WAL positions and lags,
//! table names with their row counts and stop state, load progress,
//! destination error codes — no row data, no credentials.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::status::ToastStatus;

/// The paths served: metrics, liveness (the process answers) and
/// readiness (streaming, lag within `[metrics] ready_max_lag_secs`).
pub const METRICS_PATH: &str = "/metrics";
pub const HEALTH_PATH: &str = "/healthz";
pub const READY_PATH: &str = "/readyz";

/// Connections served at once; more are closed at accept. A scraper needs
/// one, a few people with curl a few more.
const MAX_CONNECTIONS: usize = 32;

/// Connections one peer address may hold at once, so one client cannot
/// take every slot and keep the scraper out.
const MAX_PER_PEER: usize = 4;

/// A client must send its request headers within this long.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause after an accept error that is not about one connection (out of
/// file descriptors): retrying at once would spin and flood the log.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// The `initial_load` modes and `init --bootstrap`'s loads; their pending gauges exist from the start so
/// a dashboard shows 0 rather than no data.
const BACKFILL_MODES: [&str; 5] = ["none", "copy", "base_backup", "object_store", "bootstrap"];

type U64Gauge = Gauge<u64, AtomicU64>;

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error(
        "metrics endpoint: cannot listen on {addr}: {source}; set [metrics] listen to a free local IP:port"
    )]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TableLabels {
    table: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StopLabels {
    table: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    code: String,
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabels {
    mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackfillLabels {
    table: String,
    mode: String,
}

/// The daemon's metrics. Clones share one registry; every setter is a few
/// atomic stores (the per-table ones also look the table up), so call them
/// once per flush or status tick, not per row.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    positions: Arc<Positions>,
    rows_written: Family<TableLabels, Counter>,
    values_replaced: Family<TableLabels, Counter>,
    table_stopped: Family<TableLabels, U64Gauge>,
    table_stop_reason: Family<StopLabels, U64Gauge>,
    /// The reason series shown per stopped table, to remove it when the
    /// table resumes or stops for another reason.
    stop_reasons: std::sync::Mutex<std::collections::HashMap<String, String>>,
    config_table_ignored: U64Gauge,
    paused: U64Gauge,
    wal_from_archive: U64Gauge,
    archive_segments_read: Counter,
    table_reloads: Family<StopLabels, Counter>,
    destination_retries: Counter,
    assembler_memory: U64Gauge,
    assembler_spilled: U64Gauge,
    toast: ToastMetrics,
    backfills_pending: Family<ModeLabels, U64Gauge>,
    backfill_rows: Family<BackfillLabels, Counter>,
    backfill_bytes: Family<BackfillLabels, Counter>,
    backfills_running: U64Gauge,
    destination_errors: Family<ErrorLabels, Counter>,
    catalog_commits: Family<OutcomeLabels, Counter>,
    destination_up: U64Gauge,
    destination_last_success: Gauge<f64, AtomicU64>,
    ready_max_lag: AtomicU64,
    /// `Authorization: Bearer …` that `/metrics` asks for, when set.
    token: std::sync::OnceLock<String>,
    load_ratio: Family<TableLabels, Gauge<f64, AtomicU64>>,
    load_eta: Family<TableLabels, Gauge<f64, AtomicU64>>,
    /// One child per source database when a `run` follows several
    /// ([`Metrics::database`]): the endpoint shows theirs, each series
    /// labelled `database`, instead of its own.
    databases: std::sync::Mutex<Vec<(String, Metrics)>>,
}

/// The TOAST chunk mirror; the `_total` ones mirror counters the stream
/// keeps since it started.
struct ToastMetrics {
    values: U64Gauge,
    chunks: U64Gauge,
    data_bytes: U64Gauge,
    file_bytes: U64Gauge,
    pending: U64Gauge,
    waiting_rows: U64Gauge,
    hits: Counter,
    misses: Counter,
    source_fetches: Counter,
    source_misses: Counter,
    source_errors: Counter,
}

/// Positions and what is derived from them at scrape time (the lags).
#[derive(Debug, Default)]
struct Positions {
    known: AtomicBool,
    received: AtomicU64,
    decoded: AtomicU64,
    applied: AtomicU64,
    /// 0 (InvalidXLogRecPtr) while unknown.
    source_current: AtomicU64,
    /// `f64` bits of Unix seconds; NaN while unknown.
    commit_time: AtomicU64,
    /// Registered as a gauge of its own; read here for "caught up".
    open_transactions: U64Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("positions", &self.inner.positions)
            .finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut r = Registry::default();
        let positions = Arc::new(Positions {
            commit_time: AtomicU64::new(f64::NAN.to_bits()),
            ..Positions::default()
        });
        r.register_collector(Box::new(PositionsCollector(positions.clone())));

        // Counters are registered without `_total`: the encoder appends it.
        let rows_written = Family::default();
        r.register(
            "walshadow_rows_written",
            "Rows written to ClickHouse by the stream (inserts, updates, delete markers), per source table",
            rows_written.clone(),
        );
        let values_replaced = Family::default();
        r.register(
            "walshadow_values_replaced",
            "Values the stream wrote as the columns' out_of_range policies say (NULL or the nearest value) instead of stopping the table, per source table",
            values_replaced.clone(),
        );
        let table_stopped = Family::default();
        r.register(
            "walshadow_table_stopped",
            "1 while the table is stopped by a definite error (walshadow status says why), else 0",
            table_stopped.clone(),
        );
        let table_stop_reason = Family::default();
        r.register(
            "walshadow_table_stop_reason",
            "1 while the table is stopped, reason its stop code (the operator guide lists each with its remedy)",
            table_stop_reason.clone(),
        );
        let config_table_ignored = U64Gauge::default();
        r.register(
            "walshadow_config_table_ignored",
            "1 while the config table's rows are ignored because another role owns it (walshadow status says which), else 0",
            config_table_ignored.clone(),
        );
        let paused = U64Gauge::default();
        r.register(
            "walshadow_paused",
            "1 while the stream is paused by `walshadow ctl pause` (no WAL is taken; the slot keeps it), else 0",
            paused.clone(),
        );
        let wal_from_archive = U64Gauge::default();
        r.register(
            "walshadow_wal_from_archive",
            "1 while the source no longer has the WAL the intake needs and the [backup] store's archive serves it, else 0",
            wal_from_archive.clone(),
        );
        let archive_segments_read = Counter::default();
        r.register(
            "walshadow_archive_segments_read",
            "WAL segments read from the [backup] store's archive since the start",
            archive_segments_read.clone(),
        );
        let destination_retries = Counter::default();
        r.register(
            "walshadow_destination_retries",
            "ClickHouse requests of the stream tried again after a transient or environment error",
            destination_retries.clone(),
        );
        r.register(
            "walshadow_open_transactions",
            "Transactions begun and not yet committed or aborted, held by the assembler",
            positions.open_transactions.clone(),
        );
        let mut gauge = |name: &str, help: &str| {
            let g = U64Gauge::default();
            r.register(name, help, g.clone());
            g
        };
        let assembler_memory = gauge(
            "walshadow_assembler_memory_bytes",
            "Memory held by transactions being assembled (bounded by stream.memory_mb)",
        );
        let assembler_spilled = gauge(
            "walshadow_assembler_spilled_bytes",
            "Bytes of transactions in spill files now",
        );
        let backfills_running = gauge(
            "walshadow_backfills_running",
            "Backfills (initial loads) in progress",
        );
        let toast_values = gauge(
            "walshadow_toast_values",
            "TOAST values held by the chunk mirror",
        );
        let toast_chunks = gauge(
            "walshadow_toast_chunks",
            "TOAST chunks held by the chunk mirror",
        );
        let toast_data_bytes = gauge(
            "walshadow_toast_data_bytes",
            "Bytes of TOAST chunk data held by the chunk mirror",
        );
        let toast_file_bytes = gauge(
            "walshadow_toast_file_bytes",
            "Size of the chunk mirror's file",
        );
        let toast_pending = gauge(
            "walshadow_toast_pending_deletions",
            "Chunk mirror deletions waiting for progress to be durable",
        );
        let toast_waiting_rows = gauge(
            "walshadow_toast_waiting_rows",
            "Row versions held back for a TOAST value gone from the source, waiting for a newer version of their row",
        );
        let mut counter = |name: &str, help: &str| {
            let c = Counter::default();
            r.register(name, help, c.clone());
            c
        };
        let toast = ToastMetrics {
            values: toast_values,
            chunks: toast_chunks,
            data_bytes: toast_data_bytes,
            file_bytes: toast_file_bytes,
            pending: toast_pending,
            waiting_rows: toast_waiting_rows,
            hits: counter(
                "walshadow_toast_hits",
                "TOAST pointers resolved from the chunk mirror",
            ),
            misses: counter(
                "walshadow_toast_misses",
                "TOAST pointers not found in the chunk mirror",
            ),
            source_fetches: counter(
                "walshadow_toast_source_fetches",
                "TOAST values read from the source into the chunk mirror",
            ),
            source_misses: counter(
                "walshadow_toast_source_misses",
                "TOAST values the source no longer had",
            ),
            source_errors: counter(
                "walshadow_toast_source_errors",
                "Reads of TOAST values from the source that failed",
            ),
        };

        let backfills_pending: Family<ModeLabels, U64Gauge> = Family::default();
        r.register(
            "walshadow_backfills_pending",
            "Backfills (initial loads) requested in the config table and not started yet, per initial_load mode",
            backfills_pending.clone(),
        );
        for mode in BACKFILL_MODES {
            backfills_pending
                .get_or_create(&ModeLabels { mode: mode.into() })
                .set(0);
        }
        let backfill_rows = Family::default();
        r.register(
            "walshadow_backfill_rows",
            "Rows loaded by backfills, per table and initial_load mode",
            backfill_rows.clone(),
        );
        let backfill_bytes = Family::default();
        r.register(
            "walshadow_backfill_bytes",
            "Bytes read by backfills, per table and initial_load mode",
            backfill_bytes.clone(),
        );
        let load_ratio = Family::default();
        r.register(
            "walshadow_backfill_progress_ratio",
            "A copy load's heap blocks read of blocks to read (0 to 1), per table",
            load_ratio.clone(),
        );
        let load_eta = Family::default();
        r.register(
            "walshadow_backfill_eta_seconds",
            "Seconds a load still needs at the rate it went so far, per table",
            load_eta.clone(),
        );
        let table_reloads = Family::<StopLabels, Counter>::default();
        r.register(
            "walshadow_table_reloads",
            "Tables walshadow loaded again by itself after a change ClickHouse cannot follow in place, by reason",
            table_reloads.clone(),
        );
        let destination_errors = Family::default();
        r.register(
            "walshadow_destination_errors",
            "Failed ClickHouse requests of the stream, by exception code (http_NNN without one) and class (transient, environment, definite)",
            destination_errors.clone(),
        );
        let catalog_commits = Family::<OutcomeLabels, Counter>::default();
        for outcome in ["refreshed", "coalesced", "skipped"] {
            drop(catalog_commits.get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            }));
        }
        r.register(
            "walshadow_catalog_commits",
            "Catalog-changing commits of the source database: refreshed (they could concern a table in scope; its rows so far made durable first), coalesced (the same, with nothing to make durable) or skipped (temporary tables, unrelated DDL)",
            catalog_commits.clone(),
        );
        let destination_up = U64Gauge::default();
        destination_up.set(1);
        r.register(
            "walshadow_destination_up",
            "0 while the stream waits on a ClickHouse request it is retrying (walshadow status says which and why), else 1",
            destination_up.clone(),
        );
        let destination_last_success = Gauge::<f64, AtomicU64>::default();
        r.register(
            "walshadow_destination_last_success_seconds",
            "Unix time of the last request of the stream ClickHouse took",
            destination_last_success.clone(),
        );

        Metrics {
            inner: Arc::new(Inner {
                registry: r,
                positions,
                rows_written,
                values_replaced,
                table_stopped,
                table_stop_reason,
                stop_reasons: Default::default(),
                config_table_ignored,
                paused,
                wal_from_archive,
                archive_segments_read,
                table_reloads,
                destination_retries,
                assembler_memory,
                assembler_spilled,
                toast,
                backfills_pending,
                backfill_rows,
                backfill_bytes,
                backfills_running,
                destination_errors,
                catalog_commits,
                destination_up,
                destination_last_success,
                ready_max_lag: AtomicU64::new(300),
                token: std::sync::OnceLock::new(),
                load_ratio,
                load_eta,
                databases: Default::default(),
            }),
        }
    }

    /// The metrics of source database `name`'s stream, which this
    /// endpoint shows from now on with `database="name"` on every series.
    pub fn database(&self, name: &str) -> Metrics {
        if let Some((_, m)) = self.children().iter().find(|(n, _)| n == name) {
            return m.clone();
        }
        let child = Metrics::new();
        child.inner.ready_max_lag.store(
            self.inner.ready_max_lag.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        self.children().push((name.to_owned(), child.clone()));
        child
    }

    /// Database `name`'s series are no longer shown (it was dropped).
    pub fn forget_database(&self, name: &str) {
        self.children().retain(|(n, _)| n != name);
    }

    fn children(&self) -> std::sync::MutexGuard<'_, Vec<(String, Metrics)>> {
        self.inner
            .databases
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A load's progress (absent parts are left as they are).
    pub fn set_load_progress(&self, table: &str, fraction: Option<f64>, eta_secs: Option<f64>) {
        let l = table_labels(table);
        if let Some(f) = fraction {
            self.inner.load_ratio.get_or_create(&l).set(f);
        }
        if let Some(e) = eta_secs {
            self.inner.load_eta.get_or_create(&l).set(e);
        }
    }

    /// A load ended: its progress and ETA series go.
    pub fn forget_load_progress(&self, table: &str) {
        let l = table_labels(table);
        self.inner.load_ratio.remove(&l);
        self.inner.load_eta.remove(&l);
    }

    /// A catalog-changing commit was judged: `refreshed` or `skipped`.
    pub fn add_catalog_commit(&self, outcome: &str) {
        self.inner
            .catalog_commits
            .get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            })
            .inc();
    }

    /// A ClickHouse request of the stream failed.
    pub fn add_destination_error(&self, code: &str, class: &str) {
        self.inner
            .destination_errors
            .get_or_create(&ErrorLabels {
                code: code.into(),
                class: class.into(),
            })
            .inc();
    }

    /// Whether the stream's last ClickHouse request succeeded.
    pub fn set_destination_ok(&self, ok: bool) {
        self.inner.destination_up.set(u64::from(ok));
        if ok {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            self.inner.destination_last_success.set(now);
        }
    }

    /// The stream's positions (LSNs as numbers): end of the WAL received,
    /// end of the last record decoded, end of the last commit applied, and
    /// the source's current position when the daemon knows it.
    pub fn set_positions(
        &self,
        received: u64,
        decoded: u64,
        applied: u64,
        source_current: Option<u64>,
    ) {
        let p = &self.inner.positions;
        p.received.store(received, Ordering::Relaxed);
        p.decoded.store(decoded, Ordering::Relaxed);
        p.applied.store(applied, Ordering::Relaxed);
        p.source_current
            .store(source_current.unwrap_or(0), Ordering::Relaxed);
        p.known.store(true, Ordering::Release);
    }

    /// Commit time of the last applied transaction, in Unix seconds (a
    /// PostgreSQL timestamp is µs since 2000-01-01: add 946 684 800 s).
    /// A non-finite value means unknown.
    pub fn set_applied_commit_time(&self, unix_seconds: f64) {
        let v = if unix_seconds.is_finite() {
            unix_seconds
        } else {
            f64::NAN
        };
        self.inner
            .positions
            .commit_time
            .store(v.to_bits(), Ordering::Relaxed);
    }

    /// `n` more rows written to ClickHouse for `table` (`schema.name`).
    pub fn add_rows(&self, table: &str, n: u64) {
        self.inner
            .rows_written
            .get_or_create(&table_labels(table))
            .inc_by(n);
    }

    pub fn add_values_replaced(&self, table: &str, n: u64) {
        self.inner
            .values_replaced
            .get_or_create(&table_labels(table))
            .inc_by(n);
    }

    /// Whether `table` is stopped, and its stop code.
    pub fn set_table_stopped(&self, table: &str, reason: Option<&str>) {
        self.inner
            .table_stopped
            .get_or_create(&table_labels(table))
            .set(u64::from(reason.is_some()));
        let mut shown = self
            .inner
            .stop_reasons
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if shown.get(table).map(String::as_str) == reason {
            return;
        }
        if let Some(old) = shown.remove(table) {
            self.inner.table_stop_reason.remove(&StopLabels {
                table: table.into(),
                reason: old,
            });
        }
        if let Some(reason) = reason {
            self.inner
                .table_stop_reason
                .get_or_create(&StopLabels {
                    table: table.into(),
                    reason: reason.into(),
                })
                .set(1);
            shown.insert(table.into(), reason.into());
        }
    }

    /// Whether the stream is paused (`walshadow ctl pause`).
    pub fn set_paused(&self, paused: bool) {
        self.inner.paused.set(u64::from(paused));
    }

    /// Whether the config table's rows are ignored (another role owns it).
    pub fn set_config_table_ignored(&self, ignored: bool) {
        self.inner.config_table_ignored.set(u64::from(ignored));
    }

    /// Whether the archive serves the intake now, and how many segments
    /// it served.
    pub fn set_archive(&self, reading: bool, segments: u64) {
        self.inner.wal_from_archive.set(u64::from(reading));
        // The intake counts; the counter follows.
        let counted = self.inner.archive_segments_read.get();
        if segments > counted {
            self.inner.archive_segments_read.inc_by(segments - counted);
        }
    }

    /// `table` is loaded again by walshadow itself, for `reason`.
    pub fn add_table_reload(&self, table: &str, reason: &str) {
        self.inner
            .table_reloads
            .get_or_create(&StopLabels {
                table: table.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// A ClickHouse request of the stream is tried again.
    pub fn add_destination_retry(&self) {
        self.inner.destination_retries.inc();
    }

    /// Drops `table`'s stream series (rows, stopped), for a table no
    /// longer replicated.
    pub fn forget_table(&self, table: &str) {
        let labels = table_labels(table);
        self.inner.rows_written.remove(&labels);
        self.inner.values_replaced.remove(&labels);
        self.inner.table_stopped.remove(&labels);
        self.set_table_stopped(table, None);
        self.inner.table_stopped.remove(&labels);
    }

    pub fn set_assembler(&self, open_transactions: u64, memory_bytes: u64, spilled_bytes: u64) {
        self.inner
            .positions
            .open_transactions
            .set(open_transactions);
        self.inner.assembler_memory.set(memory_bytes);
        self.inner.assembler_spilled.set(spilled_bytes);
    }

    /// The chunk mirror's state, as `status.json` carries it.
    pub fn set_toast(&self, t: &ToastStatus) {
        let m = &self.inner.toast;
        m.values.set(t.values);
        m.chunks.set(t.chunks);
        m.data_bytes.set(t.data_bytes);
        m.file_bytes.set(t.file_bytes);
        m.pending.set(t.pending);
        m.waiting_rows.set(t.waiting_rows);
        // Totals kept by the mirror and the stream since start: mirrored,
        // not added, so a repeated call counts nothing twice.
        for (c, v) in [
            (&m.hits, t.hits),
            (&m.misses, t.misses),
            (&m.source_fetches, t.source_fetches),
            (&m.source_misses, t.source_misses),
            (&m.source_errors, t.source_errors),
        ] {
            c.inner().store(v, Ordering::Relaxed);
        }
    }

    /// Backfills waiting to start with initial_load `mode`.
    pub fn set_backfills_pending(&self, mode: &str, n: u64) {
        self.inner
            .backfills_pending
            .get_or_create(&ModeLabels { mode: mode.into() })
            .set(n);
    }

    /// `rows` more rows (and `bytes` more bytes) loaded into `table` by a
    /// backfill of `mode`.
    pub fn add_backfill_rows(&self, table: &str, mode: &str, rows: u64, bytes: u64) {
        let labels = BackfillLabels {
            table: table.into(),
            mode: mode.into(),
        };
        self.inner.backfill_rows.get_or_create(&labels).inc_by(rows);
        self.inner
            .backfill_bytes
            .get_or_create(&labels)
            .inc_by(bytes);
    }

    pub fn set_backfills_running(&self, n: u64) {
        self.inner.backfills_running.set(n);
    }

    /// The exposition, as a scrape gets it.
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let children = self.children().clone();
        if !children.is_empty() {
            let mut texts = Vec::with_capacity(children.len());
            for (name, m) in &children {
                texts.push((name.clone(), m.render()?));
            }
            return Ok(merge_labelled(&texts));
        }
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &self.inner.registry)
            .map(|()| text)
    }

    /// Serves `GET /metrics` on `addr` (port 0 picks a free one; see
    /// [`MetricsServer::local_addr`]) until the returned server is dropped.
    pub async fn serve(&self, addr: SocketAddr) -> Result<MetricsServer, MetricsError> {
        let bind_error = |source| MetricsError::Bind { addr, source };
        let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
        let local_addr = listener.local_addr().map_err(bind_error)?;
        tracing::info!(%local_addr, "serving Prometheus metrics at {METRICS_PATH}");
        let task = tokio::spawn(accept_loop(listener, self.clone()));
        Ok(MetricsServer { local_addr, task })
    }

    /// The bearer token `GET /metrics` must carry (`[metrics] token_file`);
    /// `/healthz` and `/readyz` stay open (they say no more than up or
    /// not). Set once, before serving.
    pub fn set_token(&self, token: String) {
        let _ = self.inner.token.set(token);
    }

    /// The lag `/readyz` allows (seconds).
    pub fn set_ready_max_lag(&self, secs: u64) {
        self.inner.ready_max_lag.store(secs, Ordering::Relaxed);
    }

    /// `/readyz`: streaming (ClickHouse takes the stream's requests) and no
    /// more than the configured lag behind; else why not.
    fn readiness(&self) -> Result<String, String> {
        let children = self.children().clone();
        if !children.is_empty() {
            let mut ready = String::new();
            for (name, m) in &children {
                match m.readiness() {
                    Ok(text) => ready.push_str(&format!("database {name:?}: {text}")),
                    Err(text) => return Err(format!("database {name:?}: {text}")),
                }
            }
            return Ok(ready);
        }
        let p = &self.inner.positions;
        if !p.known.load(Ordering::Acquire) {
            return Err("not streaming yet\n".into());
        }
        if self.inner.destination_up.get() == 0 {
            return Err(
                "ClickHouse does not take the stream's requests (see walshadow status)\n".into(),
            );
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let max = self.inner.ready_max_lag.load(Ordering::Relaxed) as f64;
        match p.lags(now) {
            (_, Some(l)) if l <= max => Ok(format!("ready: {l:.1} s behind\n")),
            (_, Some(l)) => Err(format!("{l:.1} s behind, more than {max} s\n")),
            (bytes, None) => Err(format!(
                "{bytes} bytes behind, lag in seconds not known yet\n"
            )),
        }
    }

    fn respond(
        &self,
        method: &Method,
        path: &str,
        authorization: Option<&[u8]>,
    ) -> Response<Full<Bytes>> {
        if method == Method::GET && path == HEALTH_PATH {
            // The process serves: alive.
            return plain(StatusCode::OK, "ok\n".into());
        }
        if method == Method::GET && path == READY_PATH {
            return match self.readiness() {
                Ok(text) => plain(StatusCode::OK, text),
                Err(text) => plain(StatusCode::SERVICE_UNAVAILABLE, text),
            };
        }
        if path != METRICS_PATH {
            return plain(
                StatusCode::NOT_FOUND,
                format!(
                    "not found; metrics are at {METRICS_PATH}, liveness at {HEALTH_PATH}, readiness at {READY_PATH}\n"
                ),
            );
        }
        if method != Method::GET {
            let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "use GET\n".into());
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET"));
            return r;
        }
        if let Some(token) = self.inner.token.get() {
            let given = authorization.and_then(|a| a.strip_prefix(b"Bearer "));
            if !given.is_some_and(|g| walshadow_types::same_secret(g, token.as_bytes())) {
                let mut r = plain(
                    StatusCode::UNAUTHORIZED,
                    "the metrics need the bearer token of [metrics] token_file\n".into(),
                );
                r.headers_mut()
                    .insert("www-authenticate", HeaderValue::from_static("Bearer"));
                return r;
            }
        }
        match self.render() {
            Ok(text) => {
                let mut r = Response::new(Full::new(Bytes::from(text)));
                r.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static(
                        prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
                    ),
                );
                r
            }
            Err(std::fmt::Error) => plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "encoding the metrics failed\n".into(),
            ),
        }
    }
}

/// The expositions of several databases' registries as one: each family
/// once, its `# HELP`/`# TYPE` lines first, then every database's samples
/// with `database="name"` added. Done on the text because
/// prometheus_client encodes a family per registry, and the registries
/// hold the same families (Prometheus refuses a family named twice).
fn merge_labelled(texts: &[(String, String)]) -> String {
    let mut order: Vec<String> = Vec::new();
    let mut families: std::collections::HashMap<String, (Vec<String>, Vec<String>)> =
        Default::default();
    for (db, text) in texts {
        let label = format!("database=\"{}\"", escape_label(db));
        let mut family = String::new();
        for line in text.lines() {
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# ") {
                // `# HELP name …`, `# TYPE name …`, `# UNIT name …`.
                let name = rest.split(' ').nth(1).unwrap_or_default().to_owned();
                family = name.clone();
                let entry = families.entry(name.clone()).or_insert_with(|| {
                    order.push(name);
                    Default::default()
                });
                if !entry.0.iter().any(|l| l == line) {
                    entry.0.push(line.to_owned());
                }
                continue;
            }
            let sample = match line.find(['{', ' ']) {
                Some(at) if line.as_bytes()[at] == b'{' => {
                    let close = if line[at + 1..].starts_with('}') {
                        ""
                    } else {
                        ","
                    };
                    format!("{}{{{label}{close}{}", &line[..at], &line[at + 1..])
                }
                Some(at) => format!("{}{{{label}}}{}", &line[..at], &line[at..]),
                None => line.to_owned(),
            };
            families
                .entry(family.clone())
                .or_insert_with(|| {
                    order.push(family.clone());
                    Default::default()
                })
                .1
                .push(sample);
        }
    }
    let mut out = String::new();
    for name in order {
        if let Some((head, samples)) = families.get(&name) {
            for l in head.iter().chain(samples) {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    out
}

/// A label value as the text format writes it.
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn table_labels(table: &str) -> TableLabels {
    TableLabels {
        table: table.into(),
    }
}

fn plain(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(text)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The running endpoint. Dropping it stops the server and its connections
/// (the accept task owns them, so aborting it drops them all).
#[derive(Debug)]
pub struct MetricsServer {
    local_addr: SocketAddr,
    task: JoinHandle<()>,
}

impl MetricsServer {
    /// The address bound (the real port when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops serving and waits until the socket is closed.
    pub async fn shutdown(mut self) {
        self.task.abort();
        // Cancelled is the expected outcome; the loop never ends otherwise.
        let _ = (&mut self.task).await;
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, metrics: Metrics) {
    let mut connections = JoinSet::new();
    let mut per_peer: std::collections::HashMap<std::net::IpAddr, usize> = Default::default();
    // By task: a connection's peer is given back however its task ends
    // (a panic included), so no slot leaks.
    let mut peer_of: std::collections::HashMap<tokio::task::Id, std::net::IpAddr> =
        Default::default();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let held = per_peer.get(&peer.ip()).copied().unwrap_or(0);
                    if connections.len() >= MAX_CONNECTIONS || held >= MAX_PER_PEER {
                        tracing::debug!(%peer, "metrics endpoint: too many connections, closing");
                        continue;
                    }
                    per_peer.insert(peer.ip(), held + 1);
                    let metrics = metrics.clone();
                    let task = connections.spawn(serve_connection(stream, metrics));
                    peer_of.insert(task.id(), peer.ip());
                }
                Err(e) if is_connection_error(&e) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "metrics endpoint: accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            },
            Some(ended) = connections.join_next_with_id(), if !connections.is_empty() => {
                let id = match ended {
                    Ok((id, ())) => id,
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics endpoint: a connection's task failed");
                        e.id()
                    }
                };
                if let Some(ip) = peer_of.remove(&id)
                    && let Some(n) = per_peer.get_mut(&ip)
                {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        per_peer.remove(&ip);
                    }
                }
            }
        }
    }
}

/// An accept error about the one connection (gone before accept), not the
/// listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused
    )
}

async fn serve_connection(stream: TcpStream, metrics: Metrics) {
    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let auth = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .map(HeaderValue::as_bytes);
        let response = metrics.respond(req.method(), req.uri().path(), auth);
        std::future::ready(Ok::<_, Infallible>(response))
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(e) = served {
        tracing::debug!(error = %e, "metrics endpoint: connection ended with an error");
    }
}

impl Positions {
    /// Bytes behind the source (its position when known, else the
    /// received end) and seconds since the last applied commit (0 when
    /// caught up: nothing behind, or no open transaction and nothing
    /// decoded past the applied commit; `None` while unknown).
    fn lags(&self, now: f64) -> (u64, Option<f64>) {
        let received = self.received.load(Ordering::Relaxed);
        let decoded = self.decoded.load(Ordering::Relaxed);
        let applied = self.applied.load(Ordering::Relaxed);
        let source_current = Some(self.source_current.load(Ordering::Relaxed)).filter(|&l| l != 0);
        let commit_time = Some(f64::from_bits(self.commit_time.load(Ordering::Relaxed)))
            .filter(|t| t.is_finite());
        let open = self.open_transactions.get();
        let lag_bytes = source_current.unwrap_or(received).saturating_sub(applied);
        let caught_up = lag_bytes == 0 || (open == 0 && decoded <= applied);
        let lag_seconds = if caught_up {
            Some(0.0)
        } else {
            commit_time.map(|t| (now - t).max(0.0))
        };
        (lag_bytes, lag_seconds)
    }
}

/// Encodes the positions and the lags derived from them, at scrape time.
#[derive(Debug)]
struct PositionsCollector(Arc<Positions>);

impl Collector for PositionsCollector {
    // Help texts end in a period as the registry's own do (it adds one).
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let p = &self.0;
        if !p.known.load(Ordering::Acquire) {
            return Ok(());
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let received = p.received.load(Ordering::Relaxed);
        let decoded = p.decoded.load(Ordering::Relaxed);
        let applied = p.applied.load(Ordering::Relaxed);
        let source_current = Some(p.source_current.load(Ordering::Relaxed)).filter(|&l| l != 0);
        let commit_time =
            Some(f64::from_bits(p.commit_time.load(Ordering::Relaxed))).filter(|t| t.is_finite());

        let mut gauge = |name: &str, help: &str, g: ConstGauge<u64>| {
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
        };
        gauge(
            "walshadow_received_lsn",
            "End of the WAL received from the source (LSN as a byte position).",
            ConstGauge::new(received),
        )?;
        gauge(
            "walshadow_decoded_lsn",
            "End of the last WAL record decoded (LSN as a byte position).",
            ConstGauge::new(decoded),
        )?;
        gauge(
            "walshadow_applied_lsn",
            "Every transaction committed up to this LSN (a byte position) is in ClickHouse.",
            ConstGauge::new(applied),
        )?;
        if let Some(s) = source_current {
            gauge(
                "walshadow_source_current_lsn",
                "The source's current WAL position as last asked (LSN as a byte position).",
                ConstGauge::new(s),
            )?;
        }
        // As `walshadow status`: behind the source when known, else behind
        // what was received.
        let (lag_bytes, lag_seconds) = p.lags(now);
        gauge(
            "walshadow_lag_bytes",
            "Bytes of WAL between the source's position (else the received end) and the applied position.",
            ConstGauge::new(lag_bytes),
        )?;

        let mut gauge = |name: &str, help: &str, g: ConstGauge<f64>| {
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
        };
        if let Some(l) = lag_seconds {
            gauge(
                "walshadow_lag_seconds",
                "Seconds since the commit of the last applied transaction, 0 when caught up.",
                ConstGauge::new(l),
            )?;
        }
        if let Some(t) = commit_time {
            gauge(
                "walshadow_applied_commit_time_seconds",
                "Commit time of the last applied transaction, Unix seconds.",
                ConstGauge::new(t),
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// The value of the sample `series` (name with labels), if present.
    fn sample<'a>(text: &'a str, series: &str) -> Option<&'a str> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
    }

    fn value(text: &str, series: &str) -> f64 {
        sample(text, series)
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
            .parse()
            .unwrap()
    }

    fn now() -> f64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    }

    /// Every sample belongs to a family announced by `# HELP` and `# TYPE`
    /// lines before it, as the text format requires.
    fn assert_well_formed(text: &str) {
        let mut family: Option<(&str, &str)> = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap();
                assert!(!help.trim().is_empty(), "{line}");
                family = Some((name, ""));
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert_eq!(family.map(|f| f.0), Some(name), "TYPE without HELP: {line}");
                assert!(["counter", "gauge"].contains(&kind), "{line}");
                family = Some((name, kind));
            } else {
                let (name, kind) = family.unwrap_or_else(|| panic!("sample before HELP: {line}"));
                let series = line.split([' ', '{']).next().unwrap();
                assert_eq!(series, name, "{line}");
                if kind == "counter" {
                    assert!(name.ends_with("_total"), "{line}");
                }
                let v = line.rsplit(' ').next().unwrap();
                assert!(v.parse::<f64>().is_ok(), "{line}");
            }
        }
    }

    /// The Grafana dashboard in packaging/ queries only metrics this
    /// registry exports (every family given a series first).
    #[test]
    fn the_dashboard_queries_exported_metrics() {
        let m = Metrics::new();
        m.set_positions(0x3000, 0x2800, 0x2000, Some(0x4000));
        m.set_applied_commit_time(1.7e9);
        m.add_rows("public.t", 1);
        m.add_values_replaced("public.t", 1);
        m.set_table_stopped("public.t", Some("type_change"));
        m.set_config_table_ignored(false);
        m.set_archive(false, 1);
        m.add_table_reload("public.t", "partial_truncate");
        m.add_destination_retry();
        m.add_destination_error("http_500", "transient");
        m.set_destination_ok(true);
        m.add_catalog_commit("refreshed");
        m.set_assembler(1, 2, 3);
        m.set_toast(&ToastStatus::default());
        m.set_backfills_pending("copy", 1);
        m.add_backfill_rows("public.t", "copy", 1, 1);
        m.set_backfills_running(1);
        m.set_load_progress("public.t", Some(0.5), Some(10.0));
        let text = m.render().unwrap();
        let exported: std::collections::BTreeSet<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .collect();
        let dashboard: serde_json::Value = serde_json::from_str(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../packaging/grafana/walshadow.json"
        )))
        .unwrap();
        fn exprs<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a str>) {
            match v {
                serde_json::Value::Object(o) => {
                    for (k, v) in o {
                        match (k.as_str(), v.as_str()) {
                            ("expr", Some(e)) => out.push(e),
                            _ => exprs(v, out),
                        }
                    }
                }
                serde_json::Value::Array(a) => a.iter().for_each(|v| exprs(v, out)),
                _ => {}
            }
        }
        let mut all = Vec::new();
        exprs(&dashboard, &mut all);
        assert!(all.len() > 20, "{} queries", all.len());
        let mut queried = std::collections::BTreeSet::new();
        for e in &all {
            for word in e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("walshadow_") {
                    queried.insert(word);
                }
            }
        }
        let missing: Vec<_> = queried.difference(&exported).collect();
        assert!(
            missing.is_empty(),
            "the dashboard queries {missing:?}, not exported"
        );
        // And it shows every exported family.
        let unshown: Vec<_> = exported
            .iter()
            .filter(|n| !queried.contains(*n) && !n.starts_with("walshadow_toast_"))
            .filter(|n| !matches!(**n, "walshadow_applied_commit_time_seconds"))
            .collect();
        assert!(unshown.is_empty(), "the dashboard leaves out {unshown:?}");
    }

    #[test]
    fn fresh_registry_has_no_made_up_positions() {
        let m = Metrics::new();
        let text = m.render().unwrap();
        assert_well_formed(&text);
        assert!(!text.contains("walshadow_applied_lsn"), "{text}");
        assert!(!text.contains("walshadow_lag_"), "{text}");
        for mode in ["none", "copy", "base_backup", "object_store"] {
            let series = format!("walshadow_backfills_pending{{mode=\"{mode}\"}}");
            assert_eq!(value(&text, &series), 0.0);
        }
        assert!(
            text.contains("# TYPE walshadow_backfills_pending gauge\n"),
            "{text}"
        );
        assert_eq!(value(&text, "walshadow_backfills_running"), 0.0);
        // A family without series is left out whole (no HELP/TYPE alone).
        assert!(!text.contains("walshadow_rows_written"), "{text}");
    }

    #[test]
    fn several_databases_show_as_one_labelled_exposition() {
        let m = Metrics::new();
        let (shop, crm) = (m.database("shop"), m.database("c\"rm"));
        shop.add_rows("public.docs", 5);
        crm.add_rows("public.docs", 7);
        shop.set_positions(0x3000, 0x2800, 0x2000, None);
        let text = m.render().unwrap();
        assert_well_formed(&text);
        // Each family once, every series with its database.
        assert_eq!(
            text.matches("# TYPE walshadow_rows_written_total counter")
                .count()
                + text
                    .matches("# TYPE walshadow_rows_written counter")
                    .count(),
            1,
            "{text}"
        );
        assert_eq!(
            text.matches("# HELP walshadow_backfills_running ").count(),
            1,
            "{text}"
        );
        assert_eq!(
            value(
                &text,
                "walshadow_rows_written_total{database=\"shop\",table=\"public.docs\"}"
            ),
            5.0
        );
        assert_eq!(
            value(
                &text,
                "walshadow_rows_written_total{database=\"c\\\"rm\",table=\"public.docs\"}"
            ),
            7.0
        );
        assert_eq!(
            value(&text, "walshadow_applied_lsn{database=\"shop\"}"),
            8192.0
        );
        assert!(
            !text
                .lines()
                .any(|l| !l.starts_with('#') && !l.contains("database=")),
            "{text}"
        );
        // Ready only when every database is.
        assert!(m.readiness().is_err());
    }

    #[test]
    fn setters_show_in_the_exposition() {
        let m = Metrics::new();
        m.set_positions(0x3000, 0x2800, 0x2000, Some(0x1_0000_0000));
        m.add_rows("public.orders", 5);
        m.clone().add_rows("public.orders", 7);
        m.add_rows("shop.customers", 1);
        m.set_table_stopped("shop.customers", Some("type_change"));
        m.set_table_stopped("public.orders", Some("no_key"));
        m.set_table_stopped("public.orders", None);
        m.set_config_table_ignored(true);
        m.add_destination_retry();
        m.set_assembler(3, 1 << 20, 4096);
        m.set_toast(&ToastStatus {
            values: 10,
            chunks: 40,
            data_bytes: 80_000,
            file_bytes: 1 << 21,
            pending: 2,
            hits: 100,
            misses: 1,
            source_fetches: 6,
            source_misses: 4,
            source_errors: 3,
            waiting_rows: 5,
        });
        m.set_backfills_pending("copy", 2);
        m.set_backfills_pending("object_store", 1);
        m.add_backfill_rows("public.orders", "copy", 1000, 65536);
        m.add_backfill_rows("public.orders", "copy", 500, 100);
        m.set_backfills_running(1);
        let text = m.render().unwrap();
        assert_well_formed(&text);

        for (series, v) in [
            ("walshadow_received_lsn", 0x3000 as f64),
            ("walshadow_decoded_lsn", 0x2800 as f64),
            ("walshadow_applied_lsn", 0x2000 as f64),
            ("walshadow_source_current_lsn", 4294967296.0),
            ("walshadow_lag_bytes", (0x1_0000_0000u64 - 0x2000) as f64),
            (
                "walshadow_rows_written_total{table=\"public.orders\"}",
                12.0,
            ),
            (
                "walshadow_rows_written_total{table=\"shop.customers\"}",
                1.0,
            ),
            ("walshadow_table_stopped{table=\"shop.customers\"}", 1.0),
            ("walshadow_table_stopped{table=\"public.orders\"}", 0.0),
            (
                "walshadow_table_stop_reason{table=\"shop.customers\",reason=\"type_change\"}",
                1.0,
            ),
            ("walshadow_config_table_ignored", 1.0),
            ("walshadow_destination_retries_total", 1.0),
            ("walshadow_open_transactions", 3.0),
            ("walshadow_assembler_memory_bytes", 1048576.0),
            ("walshadow_assembler_spilled_bytes", 4096.0),
            ("walshadow_toast_values", 10.0),
            ("walshadow_toast_chunks", 40.0),
            ("walshadow_toast_data_bytes", 80000.0),
            ("walshadow_toast_file_bytes", 2097152.0),
            ("walshadow_toast_pending_deletions", 2.0),
            ("walshadow_toast_waiting_rows", 5.0),
            ("walshadow_toast_hits_total", 100.0),
            ("walshadow_toast_misses_total", 1.0),
            ("walshadow_toast_source_fetches_total", 6.0),
            ("walshadow_toast_source_misses_total", 4.0),
            ("walshadow_toast_source_errors_total", 3.0),
            ("walshadow_backfills_pending{mode=\"copy\"}", 2.0),
            ("walshadow_backfills_pending{mode=\"object_store\"}", 1.0),
            ("walshadow_backfills_pending{mode=\"base_backup\"}", 0.0),
            (
                "walshadow_backfill_rows_total{table=\"public.orders\",mode=\"copy\"}",
                1500.0,
            ),
            (
                "walshadow_backfill_bytes_total{table=\"public.orders\",mode=\"copy\"}",
                65636.0,
            ),
            ("walshadow_backfills_running", 1.0),
        ] {
            assert_eq!(value(&text, series), v, "{series}");
        }
        // The LSN is printed exactly, not as a rounded float.
        assert_eq!(
            sample(&text, "walshadow_source_current_lsn"),
            Some("4294967296")
        );
        assert!(
            text.contains("# HELP walshadow_table_stopped 1 while the table is stopped"),
            "{text}"
        );
        assert!(
            !text.contains("reason=\"no_key\""),
            "a resumed table keeps no reason series: {text}"
        );
        // Open transactions, no commit time yet: the time lag is unknown.
        assert!(!text.contains("walshadow_lag_seconds"), "{text}");

        // Totals are mirrored: the same status twice counts once.
        let mut t = ToastStatus {
            hits: 100,
            ..ToastStatus::default()
        };
        m.set_toast(&t);
        t.hits = 150;
        m.set_toast(&t);
        assert_eq!(
            value(&m.render().unwrap(), "walshadow_toast_hits_total"),
            150.0
        );

        m.forget_table("shop.customers");
        let text = m.render().unwrap();
        assert!(!text.contains("shop.customers"), "{text}");
        assert!(text.contains("table=\"public.orders\""), "{text}");
    }

    #[test]
    fn lag_seconds_at_scrape_time() {
        let m = Metrics::new();
        m.set_assembler(1, 0, 0);
        m.set_positions(5000, 4000, 3000, Some(9000));
        let commit = now() - 100.0;
        m.set_applied_commit_time(commit);
        let text = m.render().unwrap();
        let lag = value(&text, "walshadow_lag_seconds");
        assert!((100.0..160.0).contains(&lag), "{lag}");
        assert_eq!(
            value(&text, "walshadow_applied_commit_time_seconds"),
            commit
        );
        assert_eq!(value(&text, "walshadow_lag_bytes"), 6000.0);

        // Source position unknown: the lag is behind what was received.
        m.set_positions(5000, 4000, 3000, None);
        let text = m.render().unwrap();
        assert_eq!(value(&text, "walshadow_lag_bytes"), 2000.0);
        assert!(!text.contains("walshadow_source_current_lsn"), "{text}");

        // Idle source, everything applied: 0, not the age of the commit.
        m.set_positions(9000, 9000, 9000, Some(9000));
        assert_eq!(value(&m.render().unwrap(), "walshadow_lag_seconds"), 0.0);
        // Nothing open and nothing decoded past the applied commit.
        m.set_assembler(0, 0, 0);
        m.set_positions(9500, 9000, 9000, Some(9800));
        let text = m.render().unwrap();
        assert_eq!(value(&text, "walshadow_lag_seconds"), 0.0);
        assert_eq!(value(&text, "walshadow_lag_bytes"), 800.0);

        // A commit time in the future (clock skew) is not a negative lag.
        m.set_assembler(1, 0, 0);
        m.set_applied_commit_time(now() + 3600.0);
        assert_eq!(value(&m.render().unwrap(), "walshadow_lag_seconds"), 0.0);
        m.set_applied_commit_time(f64::NAN);
        let text = m.render().unwrap();
        assert!(!text.contains("walshadow_lag_seconds"), "{text}");
        assert!(!text.contains("walshadow_applied_commit_time"), "{text}");
    }

    #[test]
    fn label_values_are_escaped() {
        let m = Metrics::new();
        m.add_rows("odd\"schema.ta\\ble\nx", 1);
        let text = m.render().unwrap();
        assert_eq!(
            value(
                &text,
                "walshadow_rows_written_total{table=\"odd\\\"schema.ta\\\\ble\\nx\"}"
            ),
            1.0
        );
        assert_well_formed(&text);
    }

    /// One HTTP/1.1 exchange over a plain socket: status line and headers
    /// (lowercased), body.
    async fn request(addr: SocketAddr, method: &str, path: &str) -> (String, String) {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.unwrap();
        let text = String::from_utf8(buf).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        (head.to_ascii_lowercase(), body.to_owned())
    }

    #[tokio::test]
    async fn serves_get_metrics() {
        let m = Metrics::new();
        let server = m.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = server.local_addr();
        assert_ne!(addr.port(), 0);
        // Set after serving: a scrape sees the registry as it is now.
        m.add_rows("public.orders", 42);
        m.set_positions(10, 10, 10, None);

        let (head, body) = request(addr, "GET", "/metrics").await;
        assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
        assert!(
            head.contains("\r\ncontent-type: text/plain; version=0.0.4; charset=utf-8"),
            "{head}"
        );
        assert_eq!(
            value(
                &body,
                "walshadow_rows_written_total{table=\"public.orders\"}"
            ),
            42.0
        );
        assert_eq!(value(&body, "walshadow_applied_lsn"), 10.0);
        assert_eq!(body, m.render().unwrap());

        let (head, body) = request(addr, "GET", "/").await;
        assert!(head.starts_with("http/1.1 404 "), "{head}");
        assert!(body.contains("/metrics"), "{body}");
        let (head, _) = request(addr, "GET", "/metricsx").await;
        assert!(head.starts_with("http/1.1 404 "), "{head}");
        let (head, _) = request(addr, "POST", "/metrics").await;
        assert!(head.starts_with("http/1.1 405 "), "{head}");
        assert!(head.contains("\r\nallow: get"), "{head}");

        // The port is taken: the error names the address.
        let err = Metrics::new().serve(addr).await.unwrap_err();
        assert!(err.to_string().contains(&addr.to_string()), "{err}");

        server.shutdown().await;
        let refused = TcpStream::connect(addr).await.unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    }

    /// A connection from loopback address `127.0.0.<n>`.
    async fn connect_from(n: u8, addr: SocketAddr) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::from(([127, 0, 0, n], 0))).unwrap();
        socket.connect(addr).await.unwrap()
    }

    /// Whether a GET /metrics on `s` gets any answer.
    async fn answered(mut s: TcpStream, authorization: &str) -> Vec<u8> {
        let req = format!(
            "GET /metrics HTTP/1.1\r\nHost: test\r\n{authorization}Connection: close\r\n\r\n"
        );
        let _ = s.write_all(req.as_bytes()).await;
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf).await;
        buf
    }

    #[tokio::test]
    async fn one_peer_cannot_take_every_connection() {
        let server = Metrics::new()
            .serve("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = server.local_addr();
        let mut idle = Vec::new();
        for _ in 0..MAX_PER_PEER {
            idle.push(connect_from(1, addr).await);
        }
        let refused = answered(connect_from(1, addr).await, "").await;
        assert!(refused.is_empty(), "{}", String::from_utf8_lossy(&refused));
        let other = answered(connect_from(2, addr).await, "").await;
        assert!(
            other.starts_with(b"HTTP/1.1 200 "),
            "{}",
            String::from_utf8_lossy(&other)
        );
    }

    #[tokio::test]
    async fn a_token_guards_the_metrics_only() {
        let m = Metrics::new();
        m.set_token("s3cret-token".into());
        let server = m.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = server.local_addr();
        let none = answered(TcpStream::connect(addr).await.unwrap(), "").await;
        let text = String::from_utf8_lossy(&none).to_ascii_lowercase();
        assert!(text.starts_with("http/1.1 401 "), "{text}");
        assert!(
            text.contains("www-authenticate: bearer") && !text.contains("s3cret"),
            "{text}"
        );
        let wrong = answered(
            TcpStream::connect(addr).await.unwrap(),
            "Authorization: Bearer s3cret-tokeN\r\n",
        )
        .await;
        assert!(wrong.starts_with(b"HTTP/1.1 401 "));
        let right = answered(
            TcpStream::connect(addr).await.unwrap(),
            "Authorization: Bearer s3cret-token\r\n",
        )
        .await;
        assert!(
            right.starts_with(b"HTTP/1.1 200 "),
            "{}",
            String::from_utf8_lossy(&right)
        );
        let (head, _) = request(addr, "GET", "/healthz").await;
        assert!(head.starts_with("http/1.1 200 "), "{head}");
    }

    #[tokio::test]
    async fn connections_are_capped() {
        let server = Metrics::new()
            .serve("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = server.local_addr();
        let mut idle = Vec::new();
        for i in 0..MAX_CONNECTIONS {
            // From enough addresses that no one peer's cap is reached.
            let from = u8::try_from(1 + i / MAX_PER_PEER).unwrap();
            idle.push(connect_from(from, addr).await);
        }
        // Accepted in order after the idle ones, and closed unanswered.
        let mut extra = connect_from(200, addr).await;
        let _ = extra
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
            .await;
        let mut buf = Vec::new();
        let answered = extra.read_to_end(&mut buf).await.map_or(0, |_| buf.len());
        assert_eq!(answered, 0, "{}", String::from_utf8_lossy(&buf));
        // A closed connection frees its place (once the loop has reaped it).
        idle.pop();
        let served = async {
            loop {
                let mut s = connect_from(201, addr).await;
                let req = b"GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n";
                let mut buf = Vec::new();
                if s.write_all(req).await.is_ok()
                    && s.read_to_end(&mut buf).await.is_ok()
                    && buf.starts_with(b"HTTP/1.1 200 ")
                {
                    break;
                }
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), served)
            .await
            .expect("no connection served after one closed");
    }

    #[tokio::test]
    async fn dropping_the_server_stops_it() {
        let server = Metrics::new()
            .serve("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = server.local_addr();
        let (head, _) = request(addr, "GET", "/metrics").await;
        assert!(head.starts_with("http/1.1 200 "), "{head}");
        drop(server);
        // The abort lands at the task's next poll; rebinding the port
        // proves the listener is gone.
        let rebind = async {
            loop {
                match TcpListener::bind(addr).await {
                    Ok(l) => break l,
                    Err(_) => tokio::task::yield_now().await,
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), rebind)
            .await
            .expect("the dropped server still holds its port");
    }
}
