//! The streaming loop: raw WAL from the tap, decoded into transactions,
//! committed ones turned into rows, rows into ClickHouse, progress recorded
//! behind what ClickHouse took.
//!
//! ```text
//!  TapEvent ─▶ WalStreamDecoder ─▶ record_events ─▶ Assembler (per xid, spills)
//!                                                        │ commit, in commit order
//!                                                        ▼
//!        Relations (shadow at the commit) ◀── apply_change ──▶ RowDecoder ──▶ TableBatch
//!                                                        │                        │ flush
//!        feeder ceiling ◀── catalog LSN / applied ◀── Progress ◀── ClickHouse 200 ┘
//! ```
//!
//! Exactness of the catalog: the shadow never replays past
//! `max(catalog LSN, applied)`. The catalog LSN is the end of the last
//! commit with invalidation messages for this database that was processed;
//! before processing such a commit every earlier row is flushed and
//! progress written, so after a crash the only transaction re-decoded with
//! the shadow at that commit is the commit itself.
//!
//! The loop, decoding and the catalog's refreshes live here; beside it,
//! one concern each:
//!
//! - `settings`: what the stream takes from the config file, once;
//! - `positions`: received, decoded, the last transaction boundary, what
//!   is durable, and the replay-ceiling rule;
//! - `flush`: when batches are flushed; `inserts`: a flush's inserts, in
//!   flight while decoding goes on, and where progress moves when they land;
//! - `scope`: which tables stream, the config table's opt-ins and
//!   opt-outs, the loads they start;
//! - `destinations`: the ClickHouse client, destination names, requests
//!   that wait out a destination that refuses them;
//! - `rows`: committed changes into rows; `tables`: each ClickHouse table
//!   in line with the catalog; `resync`: reloads and their swap.
//!
//! Ordering in ClickHouse: `_lsn` is the commit LSN, `_seq` the change's
//! own position (the record's LSN, plus the tuple's index in a
//! multi-insert, plus one for the new row of a key-changing update: always
//! inside the record's own bytes, so unique per row); `_version` orders by
//! both.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use walshadow_changes::assemble::Assembled;
use walshadow_changes::change::Change;
use walshadow_changes::decode::{CommitEvent, Event, record_events};
use walshadow_emitter::{DestTable, TableBatch};
use walshadow_intake::TapEvent;
use walshadow_rows::{RowDecoder, RowError};
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_shadow::run::Shadow;
use walshadow_txn::{Assembler, CommittedTxn};
use walshadow_types::catalog::RelationDesc;
use walshadow_types::{Lsn, Oid};
use walshadow_wal_decode::WalStreamDecoder;

use crate::backfills::Backfills;
use crate::catalog_reach::Reach;
use crate::progress::{Progress, Stopped, TableProgress};
use crate::relations::{Relations, Resolved};
use crate::scope::ScopeChange;
use crate::status::{StatusFile, TableStatus, ToastStatus};
use crate::toast::Toast;

mod catalog;
mod control;
mod destinations;
mod flush;
mod inserts;
mod loads;
mod patterns;
mod positions;
mod resync;
mod rows;
mod scope;
mod settings;
mod tables;
mod thread;

pub use destinations::clickhouse_client;
pub(crate) use positions::raise_replay_ceiling;
pub use settings::{Reloaded, StreamSettings};
pub use thread::StreamThread;

/// Walked TOAST chunks of a `base_backup` load copied into the mirror per
/// timer tick (about 2 KB each).
/// Pauses between tries of a ClickHouse statement or a source read the
/// stream cannot go on without: 200 ms, doubling, at most 10 s.
const DESTINATION_BACKOFF: walshadow_types::Backoff =
    walshadow_types::Backoff::new(Duration::from_millis(200), Duration::from_secs(10));

const TOAST_IMPORT_STEP: usize = 20_000;

/// The catalog-storm benchmark's hook: set, every catalog-changing commit
/// refreshes every table (the behaviour before commits were judged by
/// what they invalidate), so both figures come from one run.
pub const REFRESH_EVERY_ENV: &str = "WALSHADOW_TEST_REFRESH_EVERY_CATALOG_COMMIT";

/// Why streaming stopped (definite errors of one table stop only that
/// table and are not here).
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Progress(#[from] crate::progress::ProgressError),
    #[error(transparent)]
    Txn(#[from] walshadow_txn::TxnError),
    #[error(transparent)]
    Decode(#[from] walshadow_changes::decode::DecodeError),
    #[error(transparent)]
    Wal(#[from] walshadow_wal_decode::WalDecodeError),
    #[error(transparent)]
    Resolve(#[from] crate::relations::ResolveError),
    #[error(transparent)]
    Payload(#[from] walshadow_changes::change::BadPayload),
    #[error("ClickHouse: {0}")]
    ClickHouse(#[from] walshadow_emitter::ClickHouseError),
    #[error("ClickHouse: {0}")]
    Flush(#[from] walshadow_emitter::FlushError),
    #[error("the shadow's catalog did not answer within {0:?}: {1}")]
    ShadowUnavailable(Duration, String),
    #[error("TOAST chunk mirror: {0}")]
    Mirror(#[from] walshadow_toast_mirror::MirrorError),
    #[error("initial loads: {0}")]
    Ledger(#[from] walshadow_backfill::ledger::LedgerError),
    #[error("{0}")]
    State(String),
    /// `run` was asked to stop while ClickHouse did not take a request;
    /// what it held was not recorded and is replayed at the next start.
    #[error("stopped while waiting for ClickHouse")]
    Stopping,
}

/// A relation's row decoder, with the position in the destination's live
/// columns of each value it decodes (partitions may order columns
/// differently from their root).
#[derive(Debug)]
struct RelationDecoder {
    desc: Arc<RelationDesc>,
    decoder: RowDecoder,
    positions: Vec<Option<usize>>,
    /// Per destination column: part of the key.
    key: Vec<bool>,
}

/// A table-level definite error: `(reason, remedy)`.
type TableFault = (crate::stop::StopKind, String);

/// Why a change's rows could not be made.
#[derive(Debug)]
enum RowsFault {
    /// A TOAST value neither this transaction nor the mirror has.
    Unresolved {
        column: String,
        toast_relid: Oid,
        value_id: Oid,
    },
    /// Definite for the table.
    Table(TableFault),
    /// The mirror could not be read.
    Mirror(walshadow_toast_mirror::MirrorError),
}

impl From<TableFault> for RowsFault {
    fn from(f: TableFault) -> Self {
        RowsFault::Table(f)
    }
}

/// Per pinned table, while running.
#[derive(Debug, Default)]
struct Table {
    /// The ClickHouse layout rows are encoded for (from the root relation).
    dest: Option<DestTable>,
    batch: Option<TableBatch>,
    /// Row decoders by relation OID (the root or a partition).
    decoders: rustc_hash::FxHashMap<Oid, RelationDecoder>,
}

/// What the daemon hands the stream besides its state: the stop request,
/// the source's WAL end as the feed hears it, and `walshadow ctl`'s
/// requests.
#[derive(Debug)]
pub struct StreamControl {
    /// Turns true when `run` is asked to stop.
    pub stop: watch::Receiver<bool>,
    /// The source's WAL end (LSN as a number; 0 while unknown).
    pub source_end: Arc<std::sync::atomic::AtomicU64>,
    /// The intake's turns on the `[backup]` store's WAL archive.
    pub archive: Arc<walshadow_intake::ArchiveTurns>,
    /// Requests of `walshadow ctl` and SIGHUP, answered between chunks.
    pub requests: mpsc::Receiver<StreamRequest>,
    /// This stream's holder of the shadow's replay ceiling (0 when the
    /// stream has the shadow to itself; see `Feeder::share_ceiling`).
    pub ceiling_share: usize,
}

/// A request to the running stream.
#[derive(Debug)]
pub enum StreamRequest {
    /// The status document (`walshadow status --json`).
    Status(tokio::sync::oneshot::Sender<serde_json::Value>),
    /// Stop taking WAL once the rows in hand are in ClickHouse.
    Pause(tokio::sync::oneshot::Sender<crate::control::Reply>),
    /// Take WAL again.
    Resume(tokio::sync::oneshot::Sender<crate::control::Reply>),
    /// New settings from a reloaded config file: what changed is applied
    /// where it can be, the answer says what and what waits for a restart.
    Reload(
        Box<StreamSettings>,
        tokio::sync::oneshot::Sender<Result<settings::Reloaded, String>>,
    ),
}

/// The streaming state machine; see the module doc.
#[derive(Debug)]
pub struct Streamer {
    /// The daemon's runtime, which runs a flush's inserts: the loop itself
    /// runs on a thread of its own ([`StreamThread`]).
    tasks: tokio::runtime::Handle,
    shadow: Arc<Shadow>,
    source_user: String,
    source_db: String,
    settings: StreamSettings,
    destinations: destinations::Destinations,
    assembler: Assembler,
    scope: scope::Scope,
    catalog: catalog::CatalogFollow,
    backfills: Backfills,
    metrics: crate::metrics::Metrics,
    loads: loads::LoadView,
    progress: Progress,
    /// `progress` changed since it was last written.
    progress_dirty: bool,
    progress_writer: crate::progress::ProgressWriter,
    tables: BTreeMap<String, Table>,
    /// Every table whose batch took rows since it was last sealed (and
    /// may name some sealed, stopped or gone since): the only ones the
    /// flush rule and a flush look at, however many are in scope.
    held: BTreeSet<String>,
    decoder: Option<WalStreamDecoder>,
    seg_size: u32,
    major: walshadow_types::PgMajor,
    positions: positions::Positions,
    toast: Toast,
    /// A speculative insertion waiting for its confirmation.
    spec: Option<(Lsn, Change)>,
    last_status: Instant,
    /// When the last flush began.
    last_flush: Instant,
    /// The flush whose inserts are under way.
    in_flight: Option<inserts::InFlight>,
    events: Vec<Event>,
    /// Turns true when `run` is asked to stop: retries give up.
    stop: watch::Receiver<bool>,
    /// The source's WAL end (from the feed).
    source_end: Arc<std::sync::atomic::AtomicU64>,
    /// The intake's turns on the archive (from the feed).
    archive: Arc<walshadow_intake::ArchiveTurns>,
    /// Tables whose row waits for a TOAST read the source cannot serve
    /// now, with what status shows.
    source_waits: BTreeMap<String, String>,
    /// `walshadow ctl` and SIGHUP.
    requests: mpsc::Receiver<StreamRequest>,
}

impl Streamer {
    /// Every table's status, with what a table in scope waits for.
    fn table_status(&mut self) -> BTreeMap<String, TableStatus> {
        let mut all = TableStatus::all(&self.progress.tables);
        self.loads
            .show(&self.backfills.passes(), &self.metrics, &mut all);
        for (key, t) in &self.progress.tables {
            if let (Some(since), Some(st)) = (t.waiting_for_key, all.get_mut(key)) {
                st.waiting = Some(format!(
                    "no primary key or replica identity (since {since}): nothing is streamed until it has one (ALTER TABLE … ADD PRIMARY KEY, or REPLICA IDENTITY FULL), then its rows are loaded"
                ));
            }
        }
        for (key, why) in &self.source_waits {
            if let Some(t) = all.get_mut(key) {
                t.waiting = Some(why.clone());
            }
        }
        for key in &self.scope.missing {
            if let Some(t) = all.get_mut(key)
                && self.scope.pinned.contains(key)
            {
                t.waiting = Some(format!(
                    "no table {key} in database {}: it streams once created",
                    self.source_db
                ));
            }
        }
        all
    }
}

impl Streamer {
    /// Tables of the progress file that nothing takes any more (their
    /// `[table]` section or the pattern that took them gone while walshadow
    /// was stopped): let go, so status says they are not streamed rather
    /// than list them as if they were (or as stopped for a refusal that no
    /// longer applies).
    async fn let_go_left_behind(&mut self) -> Result<(), StreamError> {
        let at = self.progress.applied;
        let scope = &self.scope;
        let left: Vec<String> = self
            .progress
            .tables
            .iter()
            .filter(|(key, t)| {
                !(scope.pinned.contains(*key)
                    || scope.refused_by_pattern.contains(*key)
                    || t.opted_in
                    || t.opted_out.is_some()
                    || scope.changes.iter().any(|c| c.key() == *key))
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in left {
            tracing::warn!(table = %key, lsn = %at, "no [table] section, pattern or config table row takes this table any more: not streamed (its ClickHouse table stays as it was)");
            if let Some(t) = self.progress.tables.get_mut(&key) {
                t.stopped = None;
            }
            let why = "no [table] section, pattern or config table row took it at this start";
            self.let_go(&key, at, why).await?;
            self.progress_dirty = true;
        }
        Ok(())
    }

    /// Prepares streaming: ClickHouse reachable and its database present,
    /// the spill directory cleaned, progress read (or started at the
    /// shadow's consistency point).
    pub async fn new(
        settings: StreamSettings,
        shadow: Arc<Shadow>,
        progress: Progress,
        hold: watch::Sender<Lsn>,
        metrics: crate::metrics::Metrics,
        first_run: bool,
        control: StreamControl,
    ) -> Result<Streamer, StreamError> {
        let StreamControl {
            stop,
            source_end,
            archive,
            requests,
            ceiling_share,
        } = control;
        // Its requests run on the daemon's runtime, which runs the inserts
        // and loads that share its connections ([`StreamThread`]).
        let ch =
            clickhouse_client(&settings.clickhouse)?.on_runtime(tokio::runtime::Handle::current());
        let assembler = Assembler::open(settings.assembler.clone())?;
        let source = settings.source.clone();
        let toml_tables = settings.toml_tables();
        // A table the config table opted in before `config_table_allow`
        // said otherwise stops streaming now, visibly.
        let mut progress = progress;
        let applied = progress.applied;
        for (key, t) in progress.tables.iter_mut() {
            if t.opted_in
                && t.opted_out.is_none()
                && !toml_tables.contains(key)
                && !settings.source_config.allows(key)
            {
                let kind = crate::stop::StopKind::NotAllowed;
                let reason =
                    "[source] config_table_allow does not allow it (it was opted in before)"
                        .to_owned();
                tracing::error!(table = %key, code = kind.code(), "table no longer streamed: {reason}");
                t.opted_out = Some(applied);
                t.stopped = Some(Stopped {
                    lsn: applied,
                    code: kind.code().into(),
                    reason,
                    remedy: kind.remedy(key),
                });
            }
        }
        let mut pinned = toml_tables.clone();
        pinned.extend(
            progress
                .tables
                .iter()
                .filter(|(_, t)| t.opted_in && t.opted_out.is_none())
                .map(|(k, _)| k.clone()),
        );
        let dest_locks = walshadow_backfill::staging::DestLocks::default();
        let mut backfills = Backfills::open(
            settings.state_dir.clone(),
            settings.backfill.clone(),
            &source,
            ch.clone(),
            settings.clickhouse.database.clone(),
            settings.meta.clone(),
            crate::backfills::LoadResources {
                store: settings
                    .backup
                    .as_ref()
                    .map(|b| crate::backfills::StoreResources {
                        settings: b.clone(),
                        shadow: walshadow_wal_reader::replication::ConnConfig::unix_socket(
                            &shadow.socket_dir,
                            shadow.port,
                            &source.user,
                            &source.database(),
                        ),
                    }),
                spill_dir: settings.spill_dir.clone(),
                spool_memory_bytes: settings.memory_bytes / 4,
                toast_cache_mb: settings.toast_cache_mb,
                dest_locks: dest_locks.clone(),
                column_rules: scope::column_rules(&settings, &progress),
                shadow: walshadow_wal_reader::replication::ConnConfig::unix_socket(
                    &shadow.socket_dir,
                    shadow.port,
                    &source.user,
                    &source.database(),
                ),
            },
        )?;
        if let Some(h) = settings.xid_horizon {
            backfills.recent().set_horizon(h);
        }
        // A pinned table seen for the first time loads per its
        // `initial_load`, at the position streaming resumes from.
        // One that was out (opted out, let go, refused by
        // `config_table_allow`) streams again, and loads again what
        // changed meanwhile, as when a reload adds its section.
        for (key, t) in &settings.tables {
            match progress.tables.get_mut(key) {
                Some(p) if p.opted_out.is_some() => {
                    tracing::info!(table = %key, "a [table] section takes the table, which was not streamed ({}): it streams again", p.out_why.as_deref().unwrap_or("opted out"));
                    p.opted_out = None;
                    p.out_why = None;
                    p.stopped = None;
                    p.since = progress.applied;
                }
                Some(_) => continue,
                None => {}
            }
            match walshadow_config::InitialLoad::parse(t.initial_load.as_deref()) {
                Ok(walshadow_config::InitialLoad::None) => {}
                Ok(load) => backfills.request(key, load.as_str(), progress.applied)?,
                Err(text) => {
                    tracing::warn!(table = %key, "unknown initial_load {text:?} ([table.\"{key}\"]): the table streams from {} without an initial load", progress.applied)
                }
            }
        }
        let mut toast = Toast::open(&settings.state_dir, settings.toast_cache_mb, &source)?;
        toast.compact_if_sparse(progress.applied)?;
        let positions = positions::Positions::new(&progress, hold, ceiling_share);
        let major = walshadow_types::PgMajor::from_number(shadow.state.major)
            .map_err(|e| StreamError::State(e.to_string()))?;
        let mut s = Streamer {
            tasks: tokio::runtime::Handle::current(),
            major,
            seg_size: shadow.state.segment_size,
            shadow,
            source_db: source.database(),
            source_user: source.user.clone(),
            settings,
            destinations: destinations::Destinations {
                client: ch,
                health: Default::default(),
                locks: dest_locks,
                topology: Default::default(),
            },
            assembler,
            scope: scope::Scope::new(pinned.clone()),
            catalog: catalog::CatalogFollow::new(std::env::var_os(REFRESH_EVERY_ENV).is_some()),
            backfills,
            metrics,
            loads: loads::LoadView::default(),
            progress,
            progress_dirty: false,
            progress_writer: Default::default(),
            tables: BTreeMap::new(),
            held: BTreeSet::new(),
            decoder: None,
            positions,
            toast,
            spec: None,
            last_status: Instant::now(),
            last_flush: Instant::now(),
            in_flight: None,
            events: Vec::new(),
            stop,
            source_end,
            archive,
            source_waits: BTreeMap::new(),
            requests,
        };
        let progress_applied = s.progress.applied;
        for key in &pinned {
            let dest = s
                .settings
                .tables
                .get(key)
                .and_then(|t| t.destination_of(key))
                .or_else(|| s.progress.tables.get(key).map(|t| t.destination.clone()))
                .unwrap_or_else(|| destinations::default_destination(key));
            if s.settings.tables.contains_key(key)
                && let Some(reason) = s.destination_refused(key, &dest)
            {
                return Err(StreamError::State(format!(
                    "[table.{key:?}]: {reason}; name another with destination = \"…\""
                )));
            }
            let entry = s
                .progress
                .tables
                .entry(key.clone())
                .or_insert_with(|| TableProgress::new(String::new(), progress_applied));
            // A resync under way streams into its own table until the swap.
            if entry.resync.is_none() {
                if entry.schema.is_some()
                    && !entry.destination.is_empty()
                    && entry.destination != dest
                {
                    return Err(StreamError::State(format!(
                        "[table.{key:?}]: its destination is {dest:?} in the config file but it streams into \
                         {:?}; set destination = {:?} again (renaming a destination is not supported)",
                        entry.destination, entry.destination
                    )));
                }
                entry.destination = dest;
            }
            s.tables.insert(key.clone(), Table::default());
        }
        if first_run {
            // Rows written to the config table before the stream's start
            // point (while `init` ran) are not in the WAL walshadow reads:
            // read them once, applied at the first commit decoded (any S
            // at or after the start is right: the load's snapshot is taken
            // after it, the stream covers what follows). Later changes come
            // from the WAL; duplicates collapse.
            s.scope.changes = config_rows_now(&s.settings).await;
            // Their resync counters are where a resync starts from, not a
            // request (a pinned table's row may be there from before).
            for change in &s.scope.changes {
                if let ScopeChange::Set {
                    key,
                    resync: Some(n),
                    ..
                } = change
                    && let Some(t) = s.progress.tables.get_mut(key)
                {
                    t.resync_seen = *n;
                }
            }
        }
        // Tables init --bootstrap loads that a pattern of the file or a
        // config-table row of their own takes are taken here, where the
        // stream starts (their load's `S`), as pins are: taken at the first
        // catalog session or commit instead, the commits decoded before it
        // would miss them. After the pins (a pin's destination wins); a
        // table with a row of its own is the row's, as at the first commit
        // (which applies the row again, changing nothing); one nothing
        // takes any more is let go.
        let mut taken_early = false;
        for key in s.backfills.bootstrap_keys() {
            if s.settings.tables.contains_key(&key) {
                continue;
            }
            let pattern = walshadow_types::split_table_key(&key).and_then(|(schema, name)| {
                s.settings
                    .patterns
                    .iter()
                    .find(|p| p.takes(&schema, &name))
                    .cloned()
            });
            let row = s.config_row_pending(&key).cloned();
            let opted_in = s.progress.tables.get(&key).is_some_and(|t| t.opted_in);
            let streamed_by_row = s
                .progress
                .tables
                .get(&key)
                .is_some_and(|t| t.opted_in && t.opted_out.is_none());
            match (pattern, row) {
                // Taken by its row at an earlier start: in scope already
                // (its row decides, over a pattern added since).
                (_, None) if streamed_by_row => {}
                (Some(p), None) if !opted_in => {
                    taken_early |=
                        s.take_table(&key, p.config, progress_applied, true, Some(p.key))?;
                }
                (
                    None,
                    Some(ScopeChange::Set {
                        replicate: true,
                        initial_load,
                        destination,
                        resync,
                        columns,
                        ..
                    }),
                ) if !matches!(
                    walshadow_config::InitialLoad::parse(initial_load.as_deref()),
                    Ok(walshadow_config::InitialLoad::None) | Err(_)
                ) && s.settings.source_config.allows(&key)
                    && s.take_row_at_start(
                        &key,
                        destination.clone(),
                        resync,
                        columns.clone(),
                        progress_applied,
                    ) =>
                {
                    taken_early = true;
                }
                _ => {
                    tracing::warn!(table = %key, "init --bootstrap selected the table, but nothing takes it now where the stream starts (no [table] section or pattern, or a pattern and a config-table row of its own both do, or its row no longer opts it in, or config_table_allow or its destination refuses it: the first commit says which): its load from the backup is withdrawn");
                    s.backfills.withdraw(&key)?;
                }
            }
        }
        if taken_early {
            // Their column rules, for their loads.
            s.scope_changed();
        }
        s.retry_clickhouse("creating the destination database", |ch| async move {
            ch.ensure_database().await
        })
        .await?;
        s.retry_clickhouse(
            "reading the destination database's engine",
            |ch| async move { ch.topology().await.map(drop) },
        )
        .await?;
        let Some(topology) = s.destinations.client.known_topology() else {
            return Err(StreamError::State(format!(
                "database {} does not exist on the ClickHouse server [clickhouse] url names, right after CREATE DATABASE{}: make it there (is that server a host of the cluster?)",
                s.database(),
                s.settings
                    .clickhouse
                    .cluster
                    .as_deref()
                    .map(|c| format!(" ON CLUSTER {c:?}"))
                    .unwrap_or_default()
            )));
        };
        if let walshadow_emitter::Topology::Cluster(c) = &topology {
            let engine = s
                .destinations
                .client
                .query(&format!(
                    "SELECT engine FROM system.databases WHERE name = {}",
                    walshadow_emitter::quote_string(s.database())
                ))
                .await?;
            let engine = engine.trim();
            if engine != "Atomic" {
                return Err(StreamError::State(format!(
                    "[clickhouse] cluster {c:?}: database {} has engine {engine}, which cannot hold the replicated tables and swaps walshadow makes on a cluster: use an Atomic or a Replicated database",
                    s.database()
                )));
            }
        }
        s.destinations.topology = topology;
        tracing::info!(database = %s.database(), "ClickHouse: {}", s.destinations.topology);
        if s.settings.clickhouse.distributed_suffix.is_some()
            && s.destinations.topology == walshadow_emitter::Topology::Server
        {
            return Err(StreamError::State(format!(
                "[clickhouse] distributed_suffix makes Distributed tables over a cluster, and database {} is on one server: set [clickhouse] cluster (or use a Replicated database), or leave distributed_suffix out",
                s.database()
            )));
        }
        Ok(s)
    }

    /// Waits `d` before a retry, writing the status file every second so
    /// `walshadow status` shows the wait; a stop request ends it with
    /// [`StreamError::Stopping`].
    pub(super) async fn pause(&mut self, d: Duration) -> Result<(), StreamError> {
        self.pause_asking(d, None).await.map(drop)
    }

    /// [`Streamer::pause`]; with `ping`, ClickHouse's health check is asked
    /// every `ping` meanwhile and the wait ends once it answers (`true`).
    pub(super) async fn pause_asking(
        &mut self,
        d: Duration,
        ping: Option<Duration>,
    ) -> Result<bool, StreamError> {
        if *self.stop.borrow() {
            return Err(StreamError::Stopping);
        }
        let until = Instant::now() + d;
        let mut status_at = Instant::now();
        while Instant::now() < until {
            let step = until
                .saturating_duration_since(Instant::now())
                .min(ping.unwrap_or(Duration::from_secs(1)));
            let mut stop = self.stop.clone();
            tokio::select! {
                _ = tokio::time::sleep(step) => {}
                _ = stop.wait_for(|s| *s) => return Err(StreamError::Stopping),
                // `walshadow ctl` is answered meanwhile: a reload may be
                // what ClickHouse waits for (a password, a certificate).
                Some(req) = self.requests.recv() => {
                    if self.on_request_while_waiting(req)? {
                        return Ok(true);
                    }
                }
            }
            if let Some(within) = ping
                && self.destinations.client.ping(within).await.is_ok()
            {
                return Ok(true);
            }
            if ping.is_none() || status_at.elapsed() >= Duration::from_secs(1) {
                self.write_status();
                status_at = Instant::now();
            }
        }
        Ok(false)
    }

    /// Runs until the tap closes (the feed stopped), then flushes and
    /// records progress. Paused, it also ends on a stop request (the tap
    /// is not read then, so its closing is not seen).
    pub async fn run(mut self, mut rx: mpsc::Receiver<TapEvent>) -> Result<(), StreamError> {
        // `status` has something to show from the start.
        self.write_status();
        if let Some(p) = &self.progress.paused {
            tracing::warn!(
                at = %p.at,
                "paused (by `walshadow ctl pause`): no WAL is taken, the slot keeps it; `walshadow ctl resume` streams again"
            );
        }
        loop {
            let paused = self.progress.paused.is_some();
            if paused && *self.stop.borrow_and_update() {
                break;
            }
            let deadline = self.next_deadline();
            // While a flush is in flight the next waits for it to land.
            let under_way = self.flush_under_way();
            let idle_at = self
                .settings
                .flush
                .idle_wake(self.batches(), self.last_flush)
                .filter(|_| !under_way);
            // WAL first: the clocks fire only while none waits (the age
            // rule is also checked after each chunk, in `on_wal`), so an
            // idle flush happens only when the stream is idle, and a
            // stream behind does no per-tick work per chunk.
            let wake = tokio::select! {
                biased;
                Some(req) = self.requests.recv() => Wake::Request(req),
                ev = rx.recv(), if !paused => Wake::Wal(ev),
                Ok(()) = self.stop.changed(), if paused => continue,
                answers = async {
                    match self.in_flight.as_mut() {
                        Some(f) => f.answered().await,
                        None => std::future::pending().await,
                    }
                }, if under_way => Wake::Landed(answers),
                _ = tokio::time::sleep_until(deadline.into()) => Wake::Clock,
                _ = tokio::time::sleep_until(idle_at.unwrap_or(deadline).into()), if idle_at.is_some() => Wake::Idle,
            };
            match wake {
                Wake::Wal(None) => break,
                Wake::Wal(Some(TapEvent::Start { from })) => self.restart_decoding(from).await?,
                Wake::Wal(Some(TapEvent::Wal { start, data })) => {
                    self.on_wal(start, &data).await?;
                }
                Wake::Landed(answers) => {
                    if let Some(f) = self.in_flight.take() {
                        self.land_flush(f, answers).await?;
                    }
                }
                Wake::Clock => {
                    self.on_timer().await?;
                    continue;
                }
                Wake::Idle => {
                    self.begin_flush().await?;
                    continue;
                }
                Wake::Request(req) => {
                    self.on_request(req).await?;
                    continue;
                }
            }
            if rx.is_empty()
                && !self.flush_under_way()
                && self
                    .settings
                    .flush
                    .idle(self.batches(), self.last_flush, Instant::now())
            {
                self.begin_flush().await?;
            } else if rx.is_empty()
                && self.in_flight.is_none()
                && self.batches().all(TableBatch::is_empty)
                && self.positions.boundary_past(&self.progress)
            {
                // Idle with nothing held: commits that wrote no row in
                // scope move progress now, not when `batch_ms` has passed
                // (which may be long). No flush: the idle rule's clock is
                // for rows.
                self.flushed_to(self.positions.boundary());
            }
        }
        self.backfills.abort_all();
        self.flush_all().await?;
        self.write_progress()?;
        self.write_status();
        self.toast.close().await;
        tracing::info!(applied = %self.progress.applied, "streaming stopped");
        Ok(())
    }

    fn next_deadline(&self) -> Instant {
        self.settings
            .flush
            .next_wake(self.batches(), self.last_status)
    }

    /// The batches that may hold rows (every batch that holds any).
    fn batches(&self) -> impl Iterator<Item = &TableBatch> {
        self.held
            .iter()
            .filter_map(|k| self.tables.get(k)?.batch.as_ref())
    }

    async fn on_timer(&mut self) -> Result<(), StreamError> {
        // Paused, nothing is applied: no refresh, flush, swap or new load
        // until `resume` (loads under way go on in their own tasks).
        let paused = self.progress.paused.is_some();
        if !paused {
            self.refresh_pending(None).await?;
            self.take_reloaded_patterns().await?;
        }
        if !paused
            && self
                .settings
                .flush
                .due(self.batches(), self.last_flush, Instant::now())
        {
            self.begin_flush().await?;
        }
        if self.progress_dirty {
            self.write_progress()?;
        }
        self.backfills.reap();
        if !paused && self.progress.tables.values().any(|t| t.resync.is_some()) {
            self.finish_resyncs().await?;
        }
        for h in self.backfills.take_toast_handoffs() {
            self.toast.queue_import(h.path, h.relations);
        }
        if self.toast.importing() {
            // Bounded per tick: the stream goes on meanwhile.
            self.toast.import_step(TOAST_IMPORT_STEP)?;
        }
        if !paused && self.backfills.has_work() {
            self.connect_relations().await?;
            self.start_loads();
        }
        self.write_status();
        Ok(())
    }

    /// A new stream from `from`: everything not durable is rebuilt from the
    /// restart position.
    async fn restart_decoding(&mut self, from: Lsn) -> Result<(), StreamError> {
        if self.decoder.is_some() {
            self.flush_all().await?;
            self.write_progress()?;
        }
        let restart = self.progress.restart.max(from);
        tracing::info!(from = %from, restart = %restart, applied = %self.progress.applied, "decoding the source's WAL");
        self.decoder = Some(WalStreamDecoder::new(from, restart, self.seg_size)?);
        // Open transactions are rebuilt from the restart position.
        self.assembler = Assembler::open(self.settings.assembler.clone())?;
        self.spec = None;
        self.positions.received = from;
        Ok(())
    }

    async fn on_wal(&mut self, start: Lsn, data: &[u8]) -> Result<(), StreamError> {
        let Some(decoder) = self.decoder.as_mut() else {
            return Err(StreamError::State("WAL before the stream started".into()));
        };
        decoder.feed_at(start, data)?;
        self.positions.received = Lsn(start.0 + data.len() as u64);
        let db_oid = self.catalog.relations.as_ref().map(|r| r.db_oid);
        let major = self.major;
        while let Some(decoder) = self.decoder.as_mut() {
            let mut events = std::mem::take(&mut self.events);
            let end = match decoder.poll_ref()? {
                None => {
                    self.events = events;
                    break;
                }
                Some(rec) => {
                    record_events(&rec, db_oid, major, &mut events)?;
                    rec.end
                }
            };
            for event in events.drain(..) {
                self.on_event(event).await?;
            }
            self.events = events;
            let end = walshadow_changes::decode::aligned_end(end);
            let idle = self.assembler.restart_lsn().is_none();
            self.positions.decoded_to(end, idle);
        }
        if self.backfills.has_queued() && self.catalog.relations.is_some() {
            // A load waiting for its S starts as soon as S is decoded.
            self.start_loads();
        }
        if self
            .settings
            .flush
            .due(self.batches(), self.last_flush, Instant::now())
        {
            self.begin_flush().await?;
        } else if self.in_flight.is_some() && !self.flush_under_way() {
            // Under a steady stream the answers land here, as they come.
            self.finish_flush().await?;
        }
        if self.last_status.elapsed() >= flush::TICK {
            self.on_timer().await?;
        }
        Ok(())
    }

    async fn on_event(&mut self, event: Event) -> Result<(), StreamError> {
        match walshadow_changes::assemble::assemble(&mut self.assembler, event)? {
            Assembled::Done => {}
            Assembled::Commit(c, txn) => self.on_commit(c, txn).await?,
            Assembled::Upkeep(Event::Abort { xid, subxacts, .. }) => {
                for x in std::iter::once(&xid).chain(&subxacts) {
                    self.catalog.created_files.remove(x);
                }
            }
            Assembled::Upkeep(Event::FileCreated { xid, rel }) => {
                // Past the bound new files are forgotten: a partition on
                // one counts as one that may hold older rows (a reload,
                // never a lost row).
                let kept: usize = self.catalog.created_files.values().map(Vec::len).sum();
                if kept < catalog::CREATED_FILES_KEPT {
                    self.catalog
                        .created_files
                        .entry(xid)
                        .or_default()
                        .push(rel.rel_number);
                }
            }
            Assembled::Upkeep(Event::Pruned {
                rel,
                block,
                offsets,
                lsn,
                end,
            }) => self.on_pruned(rel, block, offsets, lsn, end).await?,
            Assembled::Upkeep(_) => {}
        }
        Ok(())
    }

    async fn on_commit(
        &mut self,
        c: CommitEvent,
        txn: Option<CommittedTxn>,
    ) -> Result<(), StreamError> {
        self.catalog.committing = std::iter::once(c.xid)
            .chain(c.subxacts.iter().copied())
            .collect();
        let r = self.apply_commit(c, txn).await;
        for x in std::mem::take(&mut self.catalog.committing) {
            self.catalog.created_files.remove(&x);
        }
        r
    }

    async fn apply_commit(
        &mut self,
        c: CommitEvent,
        txn: Option<CommittedTxn>,
    ) -> Result<(), StreamError> {
        // Loads check their snapshots against the commits seen.
        self.backfills.recent().record(c.xid, c.end);
        let skip = c.end <= self.progress.applied;
        if !skip {
            self.connect_relations().await?;
            self.toast.begin_commit();
        }
        let reach = if c.catalog_changed && !skip {
            self.catalog_reach(&c).await?
        } else {
            Reach::Nothing
        };
        // Tables waiting for a refresh were not judged: any catalog change
        // may concern them, so the catalog position follows every one.
        let refresh = reach != Reach::Nothing
            || (c.catalog_changed && !skip && !self.catalog.pending_refresh.is_empty());
        if refresh {
            // The shadow moves past no commit whose rows might be
            // re-decoded (after a crash, from durable progress) with a
            // catalog they were not written under: rows of the tables this
            // commit reaches become durable first. When none of them
            // changed since durable progress there is nothing to protect,
            // and a run of such commits (GRANTs, comments, ANALYZE on an
            // idle table) costs no flush and no fsync each.
            if self.changed_since_durable(&reach) || self.pending_changed_since_durable() {
                self.flush_all().await?;
                self.write_progress()?;
                self.metrics.add_catalog_commit("refreshed");
            } else {
                self.metrics.add_catalog_commit("coalesced");
            }
            self.connect_relations().await?.catalog_changed(c.end);
            match &reach {
                Reach::Nothing => {}
                Reach::Tables(keys) => {
                    for key in keys {
                        self.catalog.interest.forget(key);
                    }
                    let pinned = &self.scope.pinned;
                    self.catalog
                        .pending_refresh
                        .extend(keys.iter().filter(|k| pinned.contains(*k)).cloned());
                }
                Reach::Everything => {
                    self.catalog.interest.forget_all();
                    self.catalog
                        .pending_refresh
                        .extend(self.scope.pinned.iter().cloned());
                }
            }
            // A table's descriptor is read again, and its ClickHouse table
            // changed, at its next change or the next tick, whichever comes
            // first: a run of catalog commits costs one read. Not so for a
            // partitioned table: its partitions are judged at each commit
            // that reaches it (a DETACH, a change to the detached table and
            // its ATTACH again would look like nothing at the end of the run).
            if self.catalog.refresh_every {
                self.refresh_pending(None).await?;
            } else {
                let partitioned: Vec<String> = self
                    .catalog
                    .pending_refresh
                    .iter()
                    .filter(|k| {
                        self.progress
                            .tables
                            .get(*k)
                            .is_some_and(|t| t.leaves.is_some())
                    })
                    .cloned()
                    .collect();
                for key in partitioned {
                    self.refresh_pending(Some(&key)).await?;
                }
            }
        }
        if c.catalog_changed && !skip {
            self.take_matching_tables(&c).await?;
        }
        if let Some(txn) = txn {
            if skip {
                drop(txn);
            } else {
                for item in txn {
                    let (seq, payload) = item?;
                    let change = Change::decode(&payload)?;
                    self.apply_change(&c, seq, change).await?;
                }
            }
        }
        if (!self.scope.changes.is_empty()
            || self.scope.config_patterns_due
            || self.scope.config_patterns_later)
            && !skip
        {
            self.apply_scope_changes(&c).await?;
        }
        if refresh && (self.catalog.refresh_every || self.may_move_toast(&c, &reach)) {
            // TOAST relations rewritten, truncated or gone with this commit
            // (the mirror needs the chunks this very commit wrote).
            self.toast_catalog_now(c.lsn, c.end).await?;
        }
        self.spec = None;
        // Decoding restarts at the first change of the oldest transaction
        // still open, or right after this commit.
        let restart = self.assembler.restart_lsn().unwrap_or(c.end).min(c.end);
        if skip {
            // Already in ClickHouse: only the restart position moves.
            self.positions.skipped(c.end, restart);
        } else {
            self.positions.committed(c.end, restart, c.commit_time);
        }
        Ok(())
    }

    /// A change of `key` was decoded at `lsn`.
    pub(super) fn changed(&mut self, key: &str, lsn: Lsn) {
        self.positions.changed(key, lsn);
    }

    /// Whether a table waiting for its refresh has a change past durable
    /// progress (TOAST chunks: its rows refresh it first).
    fn pending_changed_since_durable(&self) -> bool {
        self.positions
            .changed_since_durable(self.catalog.pending_refresh.iter())
    }

    /// Whether commit `c` can have given a TOAST relation of a table in
    /// scope a new file, or dropped one: its messages name one (by
    /// relcache id or `RELOID`), or reach everything.
    fn may_move_toast(&self, c: &CommitEvent, reach: &Reach) -> bool {
        if *reach == Reach::Everything {
            return true;
        }
        let Some(relations) = self.catalog.relations.as_ref() else {
            return true;
        };
        match self.toast.known_relations() {
            Some(relids) => crate::catalog_reach::names_relation(
                &c.invals,
                self.major,
                relations.db_oid,
                &relids,
            ),
            None => true,
        }
    }

    /// The TOAST relations of the tables in scope as the catalog is now,
    /// to the mirror (at the commit `lsn`..`end` that may have moved them).
    pub(super) async fn toast_catalog_now(
        &mut self,
        lsn: Lsn,
        end: Lsn,
    ) -> Result<(), StreamError> {
        let feeder = &self.shadow.feeder;
        if let Some(r) = self.catalog.relations.as_mut() {
            let files = r.toast_files(feeder).await?;
            self.toast.catalog_now(files, lsn, end)?;
        }
        Ok(())
    }

    /// Refreshes the tables waiting for it (`only`: that one, if it waits),
    /// at the catalog position of the last catalog commit.
    pub(super) async fn refresh_pending(&mut self, only: Option<&str>) -> Result<(), StreamError> {
        let keys: BTreeSet<String> = match only {
            Some(k) if self.catalog.pending_refresh.contains(k) => BTreeSet::from([k.to_owned()]),
            Some(_) => return Ok(()),
            None => std::mem::take(&mut self.catalog.pending_refresh),
        };
        if keys.is_empty() {
            return Ok(());
        }
        for k in &keys {
            self.catalog.pending_refresh.remove(k);
        }
        let Some(lsn) = self.catalog.relations.as_ref().map(|r| r.catalog_lsn()) else {
            return Ok(());
        };
        self.refresh_tables(lsn, Some(&keys)).await?;
        // A TOAST relation the tables gained (ADD COLUMN of a toastable
        // type) is known to the mirror from here.
        let feeder = &self.shadow.feeder;
        if let Some(r) = self.catalog.relations.as_mut() {
            let files = r.toast_files(feeder).await?;
            self.toast.learn_files(files);
        }
        Ok(())
    }

    /// Whether a table `reach` names (every table, for `Everything`) has a
    /// change past durable progress.
    fn changed_since_durable(&self, reach: &Reach) -> bool {
        if self.catalog.refresh_every {
            return true;
        }
        match reach {
            Reach::Nothing => false,
            Reach::Tables(keys) => self.positions.changed_since_durable(keys.iter()),
            _ => self.positions.any_changed_since_durable(),
        }
    }

    /// Which tables in scope commit `c`'s catalog changes can concern
    /// (see [`crate::catalog_reach`]), learning first what any table not
    /// judged before depends on (tables waiting for a refresh are not
    /// judged: they are refreshed anyway).
    async fn catalog_reach(&mut self, c: &CommitEvent) -> Result<Reach, StreamError> {
        if self.catalog.refresh_every {
            return Ok(Reach::Everything);
        }
        let keys: Vec<String> = self
            .scope
            .pinned
            .iter()
            .chain(std::iter::once(&self.settings.source_config.config_table))
            .filter(|k| {
                !self.catalog.interest.knows(k) && !self.catalog.pending_refresh.contains(*k)
            })
            .cloned()
            .collect();
        self.connect_relations().await?;
        let feeder = &self.shadow.feeder;
        let Some(relations) = self.catalog.relations.as_mut() else {
            return Ok(Reach::Everything);
        };
        for key in keys {
            let interest = relations.interest(feeder, &key).await?;
            self.catalog.interest.set(&key, interest);
        }
        let reach = self
            .catalog
            .interest
            .reach(&c.invals, self.major, relations.db_oid);
        if reach == Reach::Nothing {
            tracing::trace!(lsn = %c.lsn, "catalog change concerns no table in scope");
            self.metrics.add_catalog_commit("skipped");
        } else {
            tracing::debug!(lsn = %c.lsn, ?reach, "catalog change: refreshing");
        }
        Ok(reach)
    }

    /// VACUUM or pruning removed tuples: the mirror forgets the TOAST
    /// chunks among them once progress past `lsn` is durable (deleted
    /// chunks are usually gone already, by their delete; this catches
    /// tuples that die without one, like the recently-dead copies a VACUUM
    /// FULL carries over).
    async fn on_pruned(
        &mut self,
        rel: walshadow_types::RelFileLocator,
        block: u32,
        offsets: Vec<u16>,
        lsn: Lsn,
        end: Lsn,
    ) -> Result<(), StreamError> {
        self.connect_relations().await?;
        let feeder = &self.shadow.feeder;
        let Some(relations) = self.catalog.relations.as_mut() else {
            return Ok(());
        };
        if let Resolved::Toast {
            toast_relid,
            owner_key,
        } = relations.resolve(feeder, rel).await?
        {
            self.changed(&owner_key, end);
            let n = self.toast.pruned(
                toast_relid,
                rel.rel_number,
                block,
                offsets.into_iter(),
                lsn,
                end,
            )?;
            if n > 0 {
                tracing::debug!(toast_relid, block, chunks = n, lsn = %lsn, "TOAST chunks pruned");
            }
        }
        Ok(())
    }

    async fn connect_relations(&mut self) -> Result<&mut Relations, StreamError> {
        if self.catalog.relations.is_none() {
            let wait = Duration::from_secs(300);
            let started = Instant::now();
            // The shadow takes connections once it is consistent (on a first
            // run: at the end of its base backup, which `applied` starts at;
            // it was started held there).
            let catalog = loop {
                match ShadowCatalog::connect(
                    &self.shadow.socket_dir,
                    self.shadow.port,
                    &self.source_user,
                    &self.source_db,
                )
                .await
                {
                    Ok(c) => break c.reconnecting(),
                    Err(e) if started.elapsed() < wait => {
                        tracing::debug!("shadow not taking connections yet: {e}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => return Err(StreamError::ShadowUnavailable(wait, e.to_string())),
                }
            };
            let relations = Relations::new(
                catalog,
                self.scope.pinned.clone(),
                self.column_rules(),
                self.settings.config_key().to_owned(),
                self.progress.applied,
                self.positions.ceiling_share(),
            )
            .await?;
            self.catalog.relations = Some(relations);
            // The tables the file's patterns take, as the catalog is where
            // the stream resumes.
            self.take_pattern_tables(self.progress.applied, true)
                .await?;
            self.let_go_left_behind().await?;
            self.refresh_tables(self.progress.applied, None).await?;
            if !self.toast.knows_catalog() {
                let feeder = &self.shadow.feeder;
                if let Some(r) = self.catalog.relations.as_mut() {
                    let files = r.toast_files(feeder).await?;
                    let applied = self.progress.applied;
                    self.toast.catalog_now(files, applied, applied)?;
                }
            }
        }
        self.catalog
            .relations
            .as_mut()
            .ok_or_else(|| StreamError::State("shadow catalog".into()))
    }

    fn write_progress(&mut self) -> Result<(), StreamError> {
        // The mirror holds every chunk up to `applied` before progress says
        // so; its deletions wait for the progress already on disk.
        self.toast.commit(self.positions.durable_applied)?;
        self.progress_writer
            .write(&self.progress, &self.settings.state_dir)?;
        self.progress_dirty = false;
        let catalog = self
            .catalog
            .relations
            .as_ref()
            .map_or(Lsn::INVALID, |r| r.catalog_lsn());
        self.positions
            .made_durable(&self.progress, &self.shadow.feeder, catalog);
        Ok(())
    }

    fn write_status(&mut self) {
        self.last_status = Instant::now();
        let status = self.status_now();
        self.update_metrics(&status);
        if let Err(e) = status.write(&self.settings.state_dir) {
            tracing::debug!("writing status: {e}");
        }
    }

    fn status_now(&mut self) -> StatusFile {
        StatusFile {
            pid: std::process::id(),
            updated_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            received: self.positions.received,
            decoded: self.positions.decoded,
            applied: self.progress.applied,
            restart: self.progress.restart,
            shadow_ceiling: self.shadow.feeder.ceiling(),
            shadow_replayed: self.shadow.feeder.positions().borrow().apply,
            applied_commit_time: self.positions.applied_commit_time,
            open_transactions: self.assembler.open_transactions().len(),
            memory_used: self.assembler.memory_used(),
            spilled_bytes: self.assembler.spilled_bytes(),
            toast: Some(ToastStatus::new(self.toast.stats(), self.toast.counters())),
            tables: self.table_status(),
            source_end: Lsn(self.source_end.load(std::sync::atomic::Ordering::Relaxed)),
            destination: self.destinations.health.clone(),
            wal_from_archive: self
                .archive
                .reading
                .load(std::sync::atomic::Ordering::Relaxed),
            archive_segments_read: self
                .archive
                .segments
                .load(std::sync::atomic::Ordering::Relaxed),
            config_table_ignored: self
                .catalog
                .relations
                .as_ref()
                .and_then(|r| r.config_table_ignored().map(str::to_owned)),
            paused: self.progress.paused.clone(),
        }
    }
}

/// The config table's rows as the source has them now (first run only).
/// The non-empty names of a `text[]` column read as JSON.
fn json_names(json: Option<&str>) -> Vec<String> {
    json.and_then(|j| serde_json::from_str::<Vec<Option<String>>>(j).ok())
        .map(|v| v.into_iter().flatten().filter(|c| !c.is_empty()).collect())
        .unwrap_or_default()
}

async fn config_rows_now(settings: &StreamSettings) -> Vec<ScopeChange> {
    let config_key = settings.config_key();
    let Some((schema, name)) = walshadow_config::split_table_name(config_key) else {
        return Vec::new();
    };
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let sql = format!(
        // to_jsonb: a config table made by an older `init` has no
        // destination column.
        // The owner check: as at runtime, only a table of walshadow's
        // role (or a superuser's) is believed.
        "select schema_name, table_name, initial_load, to_jsonb(c)->>'destination', to_jsonb(c)->>'resync', \
         to_jsonb(c)->>'exclude_columns', to_jsonb(c)->>'unsupported_columns', \
         to_jsonb(c)->>'out_of_range', to_jsonb(c)->>'out_of_range_columns', \
         to_jsonb(c)->>'rename_columns', to_jsonb(c)->>'column_types', \
         to_jsonb(c)->>'include_columns', replicate from {}.{} c \
         where exists (select 1 from pg_catalog.pg_class k join pg_catalog.pg_roles r on r.oid = k.relowner \
         where k.oid = c.tableoid and (r.rolname = current_user or r.rolsuper))",
        quote(&schema),
        quote(&name)
    );
    let rows = async {
        let mut cfg = settings.source.clone();
        cfg.physical = false;
        cfg.application_name = Some("walshadow".into());
        let mut c = walshadow_wal_reader::replication::ReplicationClient::connect(&cfg).await?;
        let r = c.simple_query(&sql).await;
        c.close().await;
        r
    }
    .await;
    match rows {
        Ok(r) => (0..r.rows.len())
            .filter_map(|i| {
                Some(ScopeChange::Set {
                    key: walshadow_types::table_key(r.text(i, 0)?, r.text(i, 1)?),
                    // Rows saying not to replicate matter too: a table's
                    // own keeps a pattern row off it, and a pattern's
                    // excludes.
                    replicate: r.text(i, 12) != Some("f"),
                    initial_load: r.text(i, 2).map(str::to_owned),
                    destination: r.text(i, 3).filter(|d| !d.is_empty()).map(str::to_owned),
                    resync: r.text(i, 4).and_then(|n| n.parse().ok()),
                    columns: {
                        let mut columns = crate::scope::RowColumnRules {
                            exclude: json_names(r.text(i, 5)),
                            include: json_names(r.text(i, 11)),
                            skip_unsupported: r
                                .text(i, 6)
                                .is_some_and(|u| u.eq_ignore_ascii_case("skip")),
                            ..Default::default()
                        };
                        if let Some(t) = r.text(i, 7) {
                            columns.set_out_of_range(t);
                        }
                        if let Some(j) = r.text(i, 8) {
                            columns.set_out_of_range_columns(j);
                        }
                        if let Some(j) = r.text(i, 9) {
                            columns.set_rename_columns(j);
                        }
                        if let Some(j) = r.text(i, 10) {
                            columns.set_column_types(j);
                        }

                        columns
                    },
                })
            })
            .collect(),
        Err(e) => {
            tracing::warn!(table = %config_key, "reading the config table at the first start: {e}; rows written before walshadow's start point are not applied until they change");
            Vec::new()
        }
    }
}

impl Streamer {
    fn update_metrics(&mut self, status: &StatusFile) {
        let m = &self.metrics;
        let source = (status.source_end.is_valid()).then_some(status.source_end.0);
        m.set_positions(
            status.received.0,
            status.decoded.0,
            status.applied.0,
            source,
        );
        if status.applied_commit_time != 0 {
            // µs since 2000-01-01 → Unix seconds.
            m.set_applied_commit_time(status.applied_commit_time as f64 / 1e6 + 946_684_800.0);
        }
        m.set_assembler(
            status.open_transactions as u64,
            status.memory_used as u64,
            status.spilled_bytes,
        );
        if let Some(t) = &status.toast {
            m.set_toast(t);
        }
        // From the status, so tables stopped before a restart show too.
        for (key, t) in &status.tables {
            m.set_table_stopped(key, t.stopped.as_ref().map(|s| s.code.as_str()));
        }
        m.set_config_table_ignored(status.config_table_ignored.is_some());
        m.set_paused(status.paused.is_some());
        m.set_archive(status.wal_from_archive, status.archive_segments_read);
        let pending = self.backfills.pending_by_mode();
        for mode in ["copy", "base_backup", "object_store", "bootstrap"] {
            m.set_backfills_pending(mode, pending.get(mode).copied().unwrap_or(0));
        }
        m.set_backfills_running(self.backfills.running() as u64);
        self.loads.count(&self.backfills.passes(), m);
    }
}

/// What woke the streaming loop.
enum Wake {
    Wal(Option<TapEvent>),
    /// The flush in flight has its answers.
    Landed(Result<inserts::Tries, tokio::task::JoinError>),
    Clock,
    Idle,
    Request(StreamRequest),
}

fn key_display(key: &[Option<String>]) -> String {
    let parts: Vec<&str> = key.iter().map(|k| k.as_deref().unwrap_or("NULL")).collect();
    format!("({})", parts.join(", "))
}

fn row_error(key: &str, lsn: Lsn, e: RowError) -> RowsFault {
    match e {
        RowError::UnresolvedToast {
            column,
            toast_relid,
            value_id,
        } => RowsFault::Unresolved {
            column,
            toast_relid,
            value_id,
        },
        other => RowsFault::Table((
            crate::stop::StopKind::UndecodableRow,
            format!("table {key}, WAL at {lsn}: {other}"),
        )),
    }
}
