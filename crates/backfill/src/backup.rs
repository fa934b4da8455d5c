//! `initial_load = 'base_backup'`: the rows tables had when they were opted
//! in, read from the pages of a fresh `BASE_BACKUP` and published through
//! staging tables (seed 000, "base_backup mode", "Staging swap").
//!
//! ```text
//!  SQL session: each table's relations (the table or its leaf partitions,
//!               their TOAST relations) and files, descriptors, pg_control
//!               bounds for the gate; staging tables prepared
//!  replication connection: BASE_BACKUP (no WAL: the live stream has it)
//!     └─▶ PageWalkSink: main forks of those relations, pg_xact, pg_multixact
//!           TOAST pages ─▶ per-pass chunk store (disk-backed, bounded cache)
//!           heap tuples ─▶ Gate::decide ─┬─ Emit ─▶ RowDecoder ─▶ staging (_lsn = S)
//!                                        │           └ TOAST not walked yet ─▶ spool
//!                                        ├─ Drop (dead, aborted)
//!                                        └─ Defer ─▶ spool (memory, then disk)
//!  walk ended OK ─▶ spool resolved against the complete pg_xact/pg_multixact
//!  files unchanged since the plan? (else a rewrite or TRUNCATE ran: retry)
//!  per table: gate schemas ─▶ mark swapped ─▶ EXCHANGE ─▶ copy-back ─▶ drop ─▶ done
//! ```
//!
//! Why `_lsn = S` is right: the backup starts after `S` was decoded, so it
//! reflects every commit up to `S` (they are in `pg_xact` before the
//! backup's checkpoint), and every change after `S` reaches ClickHouse from
//! the stream at its own, larger, commit LSN. A tuple whose writer was in
//! flight during the copy is dropped (inserter) or emitted (deleter): the
//! stream redelivers that transaction.
//!
//! A value of a walked row whose TOAST chunks the walk never found was
//! removed after its page was copied, which only VACUUM does, and only
//! once the row version pointing at it is dead to everyone: its deleter
//! committed after `S` (else the gate had dropped it), so the stream
//! delivers that change and the row is skipped (counted).
//!
//! A rewrite (TRUNCATE, VACUUM FULL, CLUSTER) of a table after its files
//! were read shows as a changed file after the walk: the attempt is retried
//! on a fresh backup. One committed after that check is applied by the
//! stream to the destination and to the staging table alike.
//!
//! Torn pages: with data checksums on, a page whose checksum fails and
//! whose LSN is past the opt-in was being written while the backup read it
//! (basebackup.c skips verifying such pages for this reason); the attempt
//! is retried on a fresh backup. Without data checksums a torn read cannot
//! be told from a consistent one (documented in the operator guide).
//!
//! `object_store` and bootstrap passes hold the backup's WAL window: a
//! page it defines is read from its last full-page image, or skipped if
//! the window initialised it ([`crate::window_pages`]), so no torn copy is
//! walked; the chunks of every image of a TOAST page and every chunk the
//! window inserts fill the chunk store first (`Walker::load_window`), so a
//! value still missing after the walk means a damaged copy, and its table
//! is set aside instead of loaded without the row.

use crate::attempts::{AttemptError, Attempts};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use walshadow_emitter::{
    BatchConfig, ClickHouseClient, ColumnRules, DestTable, MetaColumns, RetryPolicy,
    RowBinaryEncoder, RowMeta, TableBatch,
};
use walshadow_rows::{RowDecoder, RowError, ToastChunk, ToastSource, TupleRef, Value};
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_toast_mirror::{ChunkMirror, MirrorError, Tid};
use walshadow_types::catalog::RelationDesc;
use walshadow_types::{Lsn, Oid, RelFileLocator};
use walshadow_wal_reader::replication::{
    BaseBackupOptions, Checkpoint, ConnConfig, ReplicationClient, ReplicationError, SinkError,
};

use crate::ledger::{Ledger, LedgerError, Pass, Phase};
use crate::pass_progress::{PassProgress, TableProgress};
use crate::staging::{DestLocks, Gate as SchemaGate, StagingTable, SwapMark};
use crate::walk_sink::{PageConsumer, PageWalkSink, SlruKind, WalkOptions, WalkStats, WalkedPage};
use walshadow_backup_store::suitability;
use walshadow_backup_store::{Backup, BackupStore, StoreError};
use walshadow_changes::change::{Change, ChangeKind};
use walshadow_changes::decode::CommitEvent;
use walshadow_changes::rows::{ChangeRowsError, Layout, change_rows};
use walshadow_heap::visibility::{
    DeferredSpool, Gate, GateCounters, MultiXacts, SpoolConfig, TupleHeader, Verdict, XactLog,
};
use walshadow_txn::AssemblerConfig;
use walshadow_types::{PgMajor, Xid};

use crate::gap::{self, GapError, GapWal, Outcomes, WindowItem};
use crate::window_pages::{WindowPage, WindowPages};

/// How long the first due `base_backup` request waits for siblings (more
/// opt-ins in the same transaction or burst) before its pass starts: one
/// backup serves them all.
pub const COALESCE_WINDOW: Duration = Duration::from_secs(1);

/// One table of a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassTable {
    /// `schema.name` (the partition root for a partitioned table).
    pub key: String,
    /// Its opt-in's commit LSN: its rows are tagged with it.
    pub s: Lsn,
    /// Its ClickHouse table (in the pass's database).
    pub dest_name: String,
    /// Its column rules, applied to its descriptors as the stream does.
    pub columns: ColumnRules,
}

/// Where a pass's backup comes from.
#[derive(Debug, Clone)]
pub enum Origin {
    /// `base_backup`: a fresh `BASE_BACKUP` over a replication connection
    /// (`physical = true`).
    Stream {
        replication: ConnConfig,
        /// `MAX_RATE` in kB/s.
        max_rate_kb: Option<u32>,
        checkpoint: Checkpoint,
    },
    /// `object_store`: a backup in the operator's store, and its archive's
    /// WAL from the backup's start to the opt-ins (see [`crate::gap`]).
    Store(StoreOrigin),
}

/// An `object_store` pass's store.
#[derive(Debug, Clone)]
pub struct StoreOrigin {
    pub store: Arc<BackupStore>,
    /// `latest`, or a backup's name.
    pub backup: String,
    /// A replication connection to the source, for `IDENTIFY_SYSTEM` and
    /// `TIMELINE_HISTORY` only: which cluster and branch the backup must be
    /// of. No SQL, no `BASE_BACKUP`.
    pub replication: ConnConfig,
    /// Files read from the store at once (`[backup] parallelism`).
    pub parallelism: usize,
    /// `Some` for the load of `init --bootstrap` (the store is its landed
    /// backup): a SQL session on the source, which tells how transactions
    /// open across the backup's start ended (see
    /// [`BackupPass::wait_for_writers`]).
    pub bootstrap: Option<Box<ConnConfig>>,
}

/// Everything one `base_backup` or `object_store` pass needs.
#[derive(Debug, Clone)]
pub struct BackupPass {
    pub tables: Vec<PassTable>,
    /// The SQL session the pass reads relations, files and descriptors
    /// from (`physical = false`): the source for `base_backup`, the shadow
    /// for `object_store` (which asks the source nothing).
    pub catalog: ConnConfig,
    pub origin: Origin,
    pub ch: ClickHouseClient,
    pub database: String,
    pub meta: MetaColumns,
    pub max_attempts: u32,
    pub batch_rows: usize,
    /// Where the pass keeps its TOAST chunks and spilled deferred tuples.
    pub spill_dir: PathBuf,
    /// Memory for deferred tuples before they spill.
    pub spool_memory_bytes: usize,
    /// redb cache of the per-pass TOAST store.
    pub toast_cache_mb: usize,
    pub state_dir: PathBuf,
    pub ledger: Arc<Mutex<Ledger>>,
    /// Shared with the stream: held from a table's schema gate to its
    /// exchange.
    pub dest_locks: DestLocks,
    /// Tables the pass set aside (their catalog changed after the backup's
    /// start): their entries stay pending with the reason while the others
    /// load. Empty at the start.
    pub set_aside: Arc<Mutex<BTreeSet<String>>>,
    /// The stream's recent commits and `init`'s xid horizon: a
    /// `base_backup` pass reads once the transactions open since before
    /// walshadow's start have ended.
    pub recent: Arc<crate::snapshot::RecentCommits>,
}

/// What a pass did, for its summary and the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassSummary {
    pub attempts: u32,
    pub duration: Duration,
    /// Per table: rows loaded into staging by the successful attempt, and
    /// how the table ended.
    pub tables: Vec<(String, u64, TableOutcome)>,
    pub walk: WalkStats,
    pub gate: GateCounters,
    /// Rows that waited for TOAST chunks later in the backup.
    pub toast_waits: u64,
    /// Rows skipped: a TOAST value the backup no longer held (superseded
    /// after the opt-in).
    pub toast_missing: u64,
    pub toast_chunks: u64,
    /// Walked pages the backup's WAL window defines: read from its last
    /// full-page image instead of the copy, or (initialised there) not
    /// walked.
    pub pages_from_window: u64,
    pub pages_initialised_in_window: u64,
    /// Deferred tuples spilled to disk (bytes).
    pub spilled_bytes: u64,
    pub backup_start: Lsn,
    pub backup_end: Lsn,
    pub bytes_streamed: u64,
    /// The walked TOAST chunks of the published tables, for the daemon's
    /// chunk mirror.
    pub toast: Option<ToastHandoff>,
    /// `object_store`: the WAL replayed from the backup's start.
    pub gap: Option<GapSummary>,
}

/// What an `object_store` pass read of the archive's WAL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GapSummary {
    pub backup: String,
    /// `[from, to)`: the backup's start to the newest opt-in.
    pub from: Lsn,
    pub to: Lsn,
    pub segments: usize,
    pub records: u64,
    /// Transaction outcomes patched over the backup's `pg_xact`.
    pub patched: u64,
    /// Transactions replayed (with changes of the loaded tables) and the
    /// rows they wrote.
    pub transactions: u64,
    pub rows: u64,
    /// Rows of commits past a table's `S`: the stream has them.
    pub past_s: u64,
}

/// A pass's chunk store, kept after the pass so that the daemon copies the
/// published tables' TOAST chunks into its own mirror (later UPDATEs that
/// leave a value unchanged then resolve without reading the source).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToastHandoff {
    /// A [`ChunkMirror`] file (committed); the importer deletes it.
    pub path: PathBuf,
    /// `(TOAST relation OID, relfilenumber walked)` per relation.
    pub relations: Vec<(Oid, Oid)>,
}

/// How one table of a pass ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableOutcome {
    /// Exchanged in; live-window rows copied back.
    Published { copied_back: u64 },
    /// Its staging was dropped; the entry stays pending (`reason`).
    Discarded { reason: String },
    /// Opted out during the pass: staging dropped, no entry left.
    Withdrawn,
    /// The swap's tail failed after the exchange was recorded: recovery
    /// (at the next start) finishes it.
    LeftSwapped { error: String },
}

/// Why a pass ended without loading its tables.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error("initial load ({mode}) of {keys}: {attempts} attempts failed; the last: {last}")]
    Exhausted {
        mode: &'static str,
        keys: String,
        attempts: u32,
        last: String,
    },
    #[error("initial load of {keys}: the ledger: {detail}")]
    Ledger { keys: String, detail: String },
}

fn failed<E: std::fmt::Display>(what: &str) -> impl Fn(E) -> AttemptError + '_ {
    move |e| AttemptError::Failed(format!("{what}: {e}"))
}

/// A source error: [`AttemptError::Waiting`] when reconnecting may get
/// past it by itself; a sink's error by what the sink met (an insert
/// ClickHouse did not take for now waits too).
fn source_failed(what: &str) -> impl Fn(ReplicationError) -> AttemptError + '_ {
    move |e| {
        let waits = match &e {
            ReplicationError::Sink { source, .. } => sink_waits(source.as_ref()),
            e => e.is_transient(),
        };
        if waits {
            AttemptError::Waiting(format!("{what}: {e}"))
        } else {
            AttemptError::Failed(format!("{what}: {e}"))
        }
    }
}

/// Whether a sink error is an insert ClickHouse refused for a reason that
/// is not the rows' own (it is down, out of space, a password rotated).
pub(crate) fn sink_waits(e: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    e.downcast_ref::<walshadow_emitter::FlushError>()
        .is_some_and(walshadow_emitter::FlushError::is_transient)
}

fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A relation file the walk reads, and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PlannedFile {
    /// `schema.name` of the relation (for messages).
    name: String,
    oid: Oid,
    locator: RelFileLocator,
}

/// One relation with tuples: the table or a leaf partition.
struct Leaf {
    /// Index into the attempt's targets.
    target: usize,
    name: String,
    decoder: RowDecoder,
    /// Position in the destination's columns of each decoded value.
    positions: Vec<Option<usize>>,
}

/// One table's load into its staging table.
struct Target {
    table: PassTable,
    /// `_lsn` of the walked rows.
    tag: Lsn,
    staging: StagingTable,
    batch: TableBatch,
    width: usize,
    /// Per destination column: part of the key.
    key: Vec<bool>,
    /// Rows inserted by this attempt, and by earlier ones into the staging
    /// it resumed.
    rows: u64,
    rows_before: u64,
    /// Values the `out_of_range` policies replaced in this attempt's rows.
    replaced: u64,
    inserts: u64,
    /// The attempt, unique across restarts: insert tokens must not repeat
    /// one an earlier run used on a staging table kept since.
    attempt: String,
    paused: bool,
}

#[derive(Debug, Clone, Copy)]
enum Role {
    Heap(usize),
    Toast(Oid),
}

/// What an attempt read from the source before the backup.
struct Plan {
    /// `(target, TOAST relation OID, relfilenumber)`.
    toasts: Vec<(usize, Oid, Oid)>,
    files: Vec<PlannedFile>,
    roles: HashMap<(Oid, Oid), Role>,
    leaves: Vec<Leaf>,
    dests: Vec<DestTable>,
    walk: WalkOptions,
    next_xid: Option<u32>,
    next_multi: Option<(u32, u32)>,
}

impl Plan {
    /// Each planned file with the pass's table it belongs to.
    fn file_targets(&self) -> impl Iterator<Item = (&PlannedFile, usize)> {
        self.files.iter().filter_map(|f| {
            let target = match self.roles.get(&(f.locator.spc_oid, f.locator.rel_number))? {
                Role::Heap(l) => self.leaves.get(*l).map(|l| l.target),
                Role::Toast(relid) => self
                    .toasts
                    .iter()
                    .find(|(_, r, _)| r == relid)
                    .map(|(t, _, _)| *t),
            }?;
            Some((f, target))
        })
    }
}

impl BackupPass {
    /// The `initial_load` mode this pass serves.
    pub fn mode(&self) -> &'static str {
        match &self.origin {
            Origin::Stream { .. } => "base_backup",
            Origin::Store(o) if o.bootstrap.is_some() => "bootstrap",
            Origin::Store(_) => "object_store",
        }
    }

    /// Where a stored backup's pass keeps its [`PassProgress`]: beside the
    /// landed backup for a bootstrap (so it goes with it), else the state
    /// directory.
    fn progress_dir(&self) -> PathBuf {
        match &self.origin {
            Origin::Store(o) => match o.store.as_ref() {
                BackupStore::Landed(l) => l.dir().to_owned(),
                _ => self.state_dir.clone(),
            },
            Origin::Stream { .. } => self.state_dir.clone(),
        }
    }

    fn keys(&self) -> String {
        self.tables
            .iter()
            .map(|t| t.key.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Runs attempts until the tables are published or `max_attempts`
    /// failed (their entries stay pending with the error).
    pub async fn run(self) -> Result<PassSummary, PassError> {
        let started = Instant::now();
        let mut tries = Attempts::new(self.max_attempts, Duration::from_millis(500), |n| {
            Duration::from_secs(2 << n.min(4))
        });
        while let Some(attempts) = tries.start() {
            let live = self.update_each(|p| {
                p.attempts += 1;
                p.phase = Phase::Loading;
            })?;
            if live == 0 {
                tracing::info!(tables = %self.keys(), "initial load ({}): every table was opted out; the pass ends", self.mode());
                return Ok(PassSummary::default());
            }
            let scratch = self.spill_dir.join(format!(
                "backup-pass-{}-{}-{attempts}",
                std::process::id(),
                self.mode()
            ));
            let outcome = self.attempt(attempts, &scratch).await;
            let _ = std::fs::remove_dir_all(&scratch);
            if outcome.is_ok() {
                let _ = std::fs::remove_dir_all(self.wal_cache());
                if matches!(self.origin, Origin::Store(_)) {
                    PassProgress::remove(&self.progress_dir());
                }
            }
            match outcome {
                Ok(mut summary) => {
                    summary.attempts = attempts;
                    summary.duration = started.elapsed();
                    self.log_summary(&summary);
                    return Ok(summary);
                }
                Err(e) => {
                    let setback = tries.failed(e);
                    if setback.waiting {
                        tracing::warn!(tables = %self.keys(), "initial load ({}) waits for the source, the store or ClickHouse ({}); trying again in {:?}", self.mode(), setback.why, setback.pause);
                    } else {
                        tracing::warn!(tables = %self.keys(), attempt = attempts, "initial load ({}) attempt failed: {}", self.mode(), setback.why);
                    }
                    self.update_each(|p| {
                        p.phase = Phase::Pending;
                        p.error = Some(setback.recorded());
                    })?;
                    tokio::time::sleep(setback.pause).await;
                }
            }
        }
        let err = PassError::Exhausted {
            mode: self.mode(),
            keys: self.keys(),
            attempts: tries.used(),
            last: tries.last().to_owned(),
        };
        let _ = std::fs::remove_dir_all(self.wal_cache());
        let text = format!(
            "{err}; remedy: see the error; the load runs again when the table is opted in again or walshadow restarts"
        );
        self.update_each(|p| {
            p.phase = Phase::Pending;
            p.error = Some(text.clone());
        })?;
        Err(err)
    }

    /// Where an `object_store` pass keeps the archive's segments it
    /// fetched, across its attempts: an attempt that waited for the last
    /// segment fetches only what is new.
    fn wal_cache(&self) -> PathBuf {
        self.spill_dir.join(format!(
            "backup-pass-{}-{}-wal",
            std::process::id(),
            self.mode()
        ))
    }

    /// Changes the open entries of this pass's tables (those still at
    /// their `S`: an opt-out removed the others) and writes the ledger.
    /// Returns how many there were.
    fn update_each(&self, mut f: impl FnMut(&mut Pass)) -> Result<usize, PassError> {
        let err = |detail: String| PassError::Ledger {
            keys: self.keys(),
            detail,
        };
        let mut ledger = self
            .ledger
            .lock()
            .map_err(|_| err("poisoned lock".into()))?;
        let mut n = 0;
        for t in &self.tables {
            if self.is_set_aside(t) {
                continue;
            }
            if let Some(p) = ledger.tables.get_mut(&t.key)
                && p.s == t.s
                && p.swap.is_none()
            {
                f(p);
                n += 1;
            }
        }
        ledger
            .write(&self.state_dir)
            .map_err(|e| err(e.to_string()))?;
        Ok(n)
    }

    /// Changes `t`'s entry if it is still this pass's.
    fn update_one(&self, t: &PassTable, f: impl FnOnce(&mut Pass)) -> Result<(), LedgerError> {
        let mut ledger = match self.ledger.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        if let Some(p) = ledger.tables.get_mut(&t.key)
            && p.s == t.s
        {
            f(p);
            ledger.write(&self.state_dir)?;
        }
        Ok(())
    }

    /// `t`'s staging table. No copy-back wait: the stream's inserts are
    /// held off across the exchange (`dest_locks`).
    fn staging_of(&self, t: &PassTable) -> StagingTable {
        StagingTable::new(
            self.ch.clone(),
            self.database.clone(),
            t.dest_name.clone(),
            t.s,
            &self.meta,
        )
        .with_insert_timeout(Duration::ZERO)
    }

    fn is_set_aside(&self, t: &PassTable) -> bool {
        self.set_aside.lock().is_ok_and(|s| s.contains(&t.key))
    }

    /// Sets `t` aside for `why`: its entry stays pending with it.
    fn put_aside(&self, t: &PassTable, why: String) -> Result<(), AttemptError> {
        if let Ok(mut s) = self.set_aside.lock() {
            s.insert(t.key.clone());
        }
        self.update_one(t, |p| {
            p.phase = Phase::Pending;
            p.error = Some(why);
        })
        .map_err(|e| AttemptError::Failed(format!("the ledger: {e}")))
    }

    /// Whether `t`'s entry is still this pass's (not opted out since).
    fn is_current(&self, t: &PassTable) -> bool {
        self.ledger.lock().is_ok_and(|l| {
            l.tables
                .get(&t.key)
                .is_some_and(|p| p.s == t.s && p.is_open())
        })
    }

    async fn attempt(&self, attempt: u32, scratch: &PathBuf) -> Result<PassSummary, AttemptError> {
        let (tables, gone): (Vec<PassTable>, Vec<PassTable>) = self
            .tables
            .iter()
            .cloned()
            .partition(|t| self.is_current(t) || self.is_set_aside(t));
        let tables: Vec<PassTable> = tables
            .into_iter()
            .filter(|t| !self.is_set_aside(t))
            .collect();
        // Opted out since an earlier attempt: its staging table goes.
        for t in &gone {
            if let Err(e) = self
                .staging_of(t)
                .discard("the table was opted out during its load")
                .await
            {
                tracing::warn!(table = %t.key, "dropping the staging table of an opted-out table: {e}");
            }
        }
        if tables.is_empty() {
            return Ok(PassSummary::default());
        }
        let mut sql = ReplicationClient::connect(&self.catalog)
            .await
            .map_err(source_failed(match self.origin {
                Origin::Stream { .. } => "connecting to the source",
                Origin::Store(_) => "connecting to the shadow",
            }))?;
        // object_store: the backup, its WAL to the opt-ins and the skew
        // check before a staging table is made, so that a catalog change in
        // between stops the pass before a row is written.
        let store = match &self.origin {
            Origin::Store(o) => Some(o),
            Origin::Stream { .. } => None,
        };
        if store.is_some() {
            self.wait_shadow_replayed(&mut sql, &tables).await?;
        } else {
            // base_backup: before the plan, which a long wait would age.
            crate::snapshot::wait_for_horizon(&mut sql, &self.recent, |why| {
                match &why {
                    Some(w) => tracing::warn!(tables = %self.keys(), "initial load (base_backup) {w}"),
                    None => tracing::info!(tables = %self.keys(), "initial load (base_backup): the transactions open since before walshadow's start have ended"),
                }
                let _ = self.update_each(|p| p.error = why.clone());
            })
            .await
            .map_err(source_failed(
                "waiting for transactions open since before walshadow's start",
            ))?;
        }
        let (plan, mut sql) = self.plan(sql, &tables, store.is_none()).await?;
        let mut leg = match store {
            Some(o) => {
                let writers = self.catalog_writers(&mut sql, &plan).await?;
                let watched = writers.iter().map(|w| w.xmin).collect();
                let leg = self.store_leg(o, &tables, &watched).await?;
                let skewed = self.skewed(&writers, &plan, &leg, &tables);
                if !skewed.is_empty() {
                    if skewed.len() == tables.len() {
                        let all = skewed.into_values().flatten().collect();
                        return Err(AttemptError::Failed(skew_message(&leg, all)));
                    }
                    // The others load without them: planned again.
                    for (i, reasons) in skewed {
                        if let Some(t) = tables.get(i) {
                            let why = skew_message(&leg, reasons);
                            tracing::warn!(table = %t.key, "initial load (object_store): set aside, the others go on: {why}");
                            self.put_aside(t, why)?;
                        }
                    }
                    return Box::pin(self.attempt(attempt, scratch)).await;
                }
                Some(leg)
            }
            None => None,
        };
        // bootstrap: a table whose file init's backup does not hold (it was
        // rewritten or truncated since) is set aside; the others load.
        if let Some(BackupStore::Landed(landed)) = store.map(|o| o.store.as_ref()) {
            let held: HashSet<(Oid, Oid, Oid)> = landed
                .files()
                .map_err(store_failed("reading the landed backup"))?
                .iter()
                .filter_map(walshadow_backup_store::landed::LandedFile::relation)
                .collect();
            let mut missing: BTreeMap<usize, Vec<String>> = BTreeMap::new();
            for (f, target) in plan.file_targets() {
                let l = f.locator;
                if !held.contains(&(l.spc_oid, l.db_oid, l.rel_number)) {
                    missing
                        .entry(target)
                        .or_default()
                        .push(format!("{} (file {})", f.name, l.rel_number));
                }
            }
            if !missing.is_empty() {
                for (i, files) in missing {
                    if let Some(t) = tables.get(i) {
                        let why = format!(
                            "init's backup {} does not hold {}: the table was rewritten or \
                             truncated since",
                            leg.as_ref().map_or("", |l| l.backup.label.as_str()),
                            files.join(", ")
                        );
                        tracing::warn!(table = %t.key, "initial load (bootstrap): set aside, the others go on: {why}");
                        self.put_aside(t, why)?;
                    }
                }
                return Box::pin(self.attempt(attempt, scratch)).await;
            }
        }
        // object_store: staging an interrupted attempt left keeps its rows.
        let mut progress = match &leg {
            Some(leg) => Some(self.resume_plan(leg, &tables, &plan).await?),
            None => None,
        };
        let mut targets = Vec::with_capacity(tables.len());
        for (i, (t, dest)) in tables.iter().zip(&plan.dests).enumerate() {
            let staging = self.staging_of(t).with_settings(dest.query_settings());
            let kept = progress
                .as_ref()
                .and_then(|p| p.tables.get(i))
                .filter(|e| e.staging_uuid.is_some());
            let rows_before = kept.map_or(0, |e| e.rows);
            if kept.is_none() {
                staging
                    .prepare()
                    .await
                    .map_err(|e| AttemptError::of(e.is_transient(), e))?;
                if let Some(e) = progress.as_mut().and_then(|p| p.tables.get_mut(i)) {
                    e.staging_uuid = staging
                        .staging_uuid()
                        .await
                        .map_err(|e| AttemptError::of(e.is_transient(), e))?;
                }
            }
            let batch = TableBatch::new(
                staging.name().to_owned(),
                RowBinaryEncoder::new(dest),
                // Inserted once full, checked between pages (a page's rows
                // go in together).
                BatchConfig::for_load(self.batch_rows),
            );
            // Walked rows lose to every change the stream or the gap
            // replay delivers (seed 000, "_lsn tagging"): tagged where
            // continuous WAL coverage of the table begins.
            let tag = leg.as_ref().map_or(t.s, |l| l.backup.start_lsn.min(t.s));
            targets.push(Target {
                table: t.clone(),
                tag,
                staging,
                batch,
                width: dest.columns.len(),
                key: dest.columns.iter().map(|c| c.key).collect(),
                rows: 0,
                rows_before,
                replaced: 0,
                inserts: 0,
                attempt: format!("{attempt}-{}", attempt_nonce()),
                paused: false,
            });
        }
        let done: Vec<(Oid, Oid, u32)> = progress
            .iter()
            .flat_map(|p| p.tables.iter().flat_map(|e| e.done.iter().copied()))
            .collect();
        if let Some(p) = &progress {
            p.write(&self.progress_dir())
                .map_err(|e| AttemptError::Failed(format!("recording the pass's progress: {e}")))?;
        }
        std::fs::create_dir_all(scratch)
            .map_err(|e| AttemptError::Failed(format!("{}: {e}", scratch.display())))?;
        let toast = ChunkMirror::open(&scratch.join("toast.redb"), self.toast_cache_mb)
            .map_err(failed("opening the pass's TOAST store"))?;
        let spool = DeferredSpool::open(SpoolConfig {
            memory_budget_bytes: self.spool_memory_bytes,
            spill_dir: scratch.join("spool"),
        })
        .map_err(failed("opening the deferred-tuple spool"))?;
        let mut xact = XactLog::new();
        let mut multi = MultiXacts::new();
        // The gate's bounds: read from the source before its BASE_BACKUP,
        // or from the stored backup's start checkpoint in the archive.
        let start = leg.as_ref().and_then(|l| l.outcomes.start_checkpoint);
        let next_xid = plan.next_xid.or(start.map(|c| c.next_xid));
        let next_multi = plan
            .next_multi
            .or(start.map(|c| (c.next_multi, c.next_multi_offset)));
        if let Some(x) = next_xid {
            xact.set_next_xid(x);
        }
        if let Some((m, o)) = next_multi {
            multi.set_next(m, o);
        }
        if let Some(leg) = leg.as_mut() {
            xact.patch(std::mem::take(&mut leg.outcomes.patch));
        }
        // A page torn by the copy shows past this position.
        let s_min = match &leg {
            Some(l) => l.backup.start_lsn,
            None => tables.iter().map(|t| t.s).min().unwrap_or(Lsn(0)),
        };
        let mut walker = Walker {
            roles: plan.roles,
            leaves: plan.leaves,
            targets,
            gate: Some(Gate::new(xact, multi)),
            spool: Some(spool),
            toast,
            ch: self.ch.clone(),
            gate_counters: GateCounters::default(),
            spilled_bytes: 0,
            s_min,
            walk_done: false,
            window: None,
            pages_from_window: 0,
            pages_initialised_in_window: 0,
            strict_toast: false,
            unassembled: BTreeMap::new(),
            toast_waits: 0,
            toast_missing: 0,
            toast_chunks: 0,
            deferred: 0,
            deferred_at_file: 0,
            writers_seen: store
                .and_then(|o| o.bootstrap.as_ref())
                .map(|_| WritersSeen::default()),
            progress: progress.map(|doc| ProgressKeeper {
                doc,
                dir: self.progress_dir(),
            }),
        };
        if let Some(leg) = &leg {
            walker.load_window(leg, &plan.files, scratch)?;
        }
        let mut sink = PageWalkSink::new(plan.files.iter().map(|f| f.locator), walker, plan.walk)
            .map_err(|e| AttemptError::Failed(e.to_string()))?
            .with_done(done);
        let (backup_start, backup_end, bytes_streamed) = match (&self.origin, &leg) {
            (
                Origin::Stream {
                    replication,
                    max_rate_kb,
                    checkpoint,
                },
                _,
            ) => {
                let opts = BaseBackupOptions {
                    label: format!("walshadow initial load of {}", self.keys()),
                    checkpoint: *checkpoint,
                    max_rate: *max_rate_kb,
                    verify_checksums: false,
                    ..BaseBackupOptions::default()
                };
                let mut repl = ReplicationClient::connect(replication)
                    .await
                    .map_err(source_failed("connecting for BASE_BACKUP"))?;
                tracing::info!(tables = %self.keys(), attempt, files = plan.files.len(), "initial load (base_backup): backup starting");
                let result = repl.base_backup(&opts, &mut sink).await;
                repl.close().await;
                let result = result.map_err(|e| {
                    // A torn page is worth a quick retry; the sink's error says so.
                    let text = e.to_string();
                    if text.contains(TORN) {
                        AttemptError::Retry(format!("BASE_BACKUP: {text}"))
                    } else {
                        source_failed("BASE_BACKUP")(e)
                    }
                })?;
                (result.start_lsn, result.end_lsn, result.bytes_streamed)
            }
            (Origin::Store(o), Some(leg)) => {
                tracing::info!(tables = %self.keys(), attempt, backup = %leg.backup.label, files = plan.files.len(), "initial load (object_store): walking the backup");
                let bytes = crate::store_walk::walk(&o.store, &leg.backup, &mut sink, scratch, o.parallelism)
                    .await
                    .map_err(|e| {
                        let text = e.to_string();
                        if text.contains(TORN) {
                            AttemptError::Failed(format!(
                                "backup {}: {text}; remedy: use a newer backup, or initial_load = 'copy'",
                                leg.backup.label
                            ))
                        } else {
                            e.into_attempt()
                        }
                    })?;
                (leg.backup.start_lsn, leg.backup.stop_lsn, bytes)
            }
            (Origin::Store(_), None) => {
                return Err(AttemptError::Failed("the store's leg is missing".into()));
            }
        };
        let outcome = sink.finish().map_err(|e| match &leg {
            None => AttemptError::Retry(format!(
                "{e} (rewritten or dropped after its files were read)"
            )),
            Some(l) => AttemptError::Failed(format!(
                "{e}: backup {} does not hold the file the table is on now (rewritten, \
                 truncated or created since the backup); remedy: take a new backup, or use \
                 initial_load = 'copy'",
                l.backup.label
            )),
        })?;
        let walk = outcome.stats;
        let mut walker = outcome.consumer;
        if let (Some(leg), Some(source)) = (&leg, store.and_then(|o| o.bootstrap.as_ref())) {
            self.wait_for_writers(leg, source, &mut walker).await?;
        }
        walker.resolve_deferred().await?;
        let unassembled = std::mem::take(&mut walker.unassembled);
        if !unassembled.is_empty() {
            let label = leg
                .as_ref()
                .map_or("", |l| l.backup.label.as_str())
                .to_owned();
            drop(walker);
            drop(leg);
            sql.close().await;
            let _ = std::fs::remove_dir_all(scratch);
            let whys: Vec<(usize, String)> = unassembled
                .into_iter()
                .map(|(i, value)| {
                    (
                        i,
                        format!(
                            "backup {label} and its WAL window do not hold every chunk of {value}: \
                             the backup's copy of them is damaged (a storage or archive fault); the \
                             load stops rather than leave the row out; remedy: take a new backup, \
                             or use initial_load = 'copy'"
                        ),
                    )
                })
                .collect();
            if whys.len() == tables.len() {
                let all: Vec<String> = whys.into_iter().map(|(_, w)| w).collect();
                return Err(AttemptError::Failed(all.join("; ")));
            }
            for (i, why) in whys {
                if let Some(t) = tables.get(i) {
                    tracing::warn!(table = %t.key, "initial load: set aside, the others go on: {why}");
                    if let Err(e) = self.staging_of(t).discard("set aside").await {
                        tracing::warn!(table = %t.key, "dropping the staging table of a table set aside: {e}");
                    }
                    self.put_aside(t, why)?;
                }
            }
            return Box::pin(self.attempt(attempt, scratch)).await;
        }
        let gap = match &leg {
            Some(leg) => Some(
                self.replay_gap(leg, &plan.files, &mut walker, scratch)
                    .await?,
            ),
            None => None,
        };
        walker.flush_all().await?;
        // Files still the ones walked? A TRUNCATE or rewrite committed during
        // the walk may have been read half: load again.
        self.recheck_files(&mut sql, &plan.files).await?;
        sql.close().await;
        let gate = walker.gate_counters;
        let spilled = walker.spilled_bytes;
        let mut summary = PassSummary {
            walk,
            gate,
            toast_waits: walker.toast_waits,
            toast_missing: walker.toast_missing,
            toast_chunks: walker.toast_chunks,
            pages_from_window: walker.pages_from_window,
            pages_initialised_in_window: walker.pages_initialised_in_window,
            spilled_bytes: spilled,
            backup_start,
            backup_end,
            bytes_streamed,
            gap,
            ..PassSummary::default()
        };
        for target in &walker.targets {
            let rows = target.rows_before + target.rows;
            let replaced = target.replaced;
            if let Err(e) = self.update_one(&target.table, |p| {
                p.rows = rows;
                p.values_replaced = replaced;
            }) {
                tracing::warn!(table = %target.table.key, "recording the rows loaded in the ledger: {e}");
            }
        }
        // Tables publish side by side: each copy-back waits an insert
        // timeout after its exchange.
        let mut publishing = tokio::task::JoinSet::new();
        for target in &walker.targets {
            let me = self.clone();
            let table = target.table.clone();
            let staging = target.staging.clone();
            let rows = target.rows_before + target.rows;
            publishing.spawn(async move {
                let outcome = me.publish(&table, &staging).await;
                (table.key, rows, outcome)
            });
        }
        while let Some(r) = publishing.join_next().await {
            let r = r.map_err(|e| AttemptError::Failed(format!("publishing: {e}")))?;
            summary.tables.push(r);
        }
        summary.tables.sort_by(|a, b| a.0.cmp(&b.0));
        let relations: Vec<(Oid, Oid)> =
            plan.toasts
                .iter()
                .filter(|(ti, _, _)| {
                    tables.get(*ti).is_some_and(|t| {
                        summary.tables.iter().any(|(k, _, o)| {
                            k == &t.key && matches!(o, TableOutcome::Published { .. })
                        })
                    })
                })
                .map(|(_, relid, file)| (*relid, *file))
                .collect();
        if !relations.is_empty() && walker.toast_chunks > 0 {
            summary.toast = self.hand_off(walker, scratch, attempt, relations);
        }
        Ok(summary)
    }

    /// The store's backup for this pass, checked against the source, and
    /// the archive's WAL from its start to the opt-ins with the outcomes it
    /// tells. The source is asked over replication only.
    async fn store_leg(
        &self,
        o: &StoreOrigin,
        tables: &[PassTable],
        watched: &HashSet<Xid>,
    ) -> Result<StoreLeg, AttemptError> {
        let source = gap::ask_source(&o.replication)
            .await
            .map_err(|e| AttemptError::of(e.transient, &e))?;
        let (facts, seg_size) = (source.facts, source.seg_size);
        let store = &o.store;
        let backup = suitability::choose(store, &o.backup)
            .await
            .map_err(store_failed("choosing the backup"))?;
        let refuse = |why: String| {
            AttemptError::Failed(format!(
                "backup {} of {} cannot serve this load: {why}; remedy: take a backup of the \
                 source (or name one in [backup] backup), or use initial_load = 'copy'",
                backup.label,
                store.name()
            ))
        };
        if let Some(flaw) = &backup.flaw {
            return Err(refuse(flaw.clone()));
        }
        store
            .check_readable(&backup)
            .await
            .map_err(store_failed("reading the backup's manifest"))?;
        let problems = suitability::problems(store, &backup, &facts)
            .await
            .map_err(store_failed("checking the backup"))?;
        if !problems.is_empty() {
            return Err(refuse(problems.join("; ")));
        }
        let major = backup
            .pg_version
            .parse()
            .ok()
            .and_then(|n| PgMajor::from_number(n).ok())
            .ok_or_else(|| refuse(format!("PostgreSQL {} is not 15 to 18", backup.pg_version)))?;
        let s_max = tables.iter().map(|t| t.s).max().unwrap_or(Lsn(0));
        let mut leg = StoreLeg {
            backup,
            major,
            gap: None,
            window: None,
            outcomes: Outcomes::default(),
            patched: 0,
        };
        // A backup that started at or after every opt-in needs no WAL: the
        // stream covers what came after.
        if leg.backup.start_lsn < s_max {
            let gap = gap::fetch(
                store,
                &leg.backup,
                &facts.branch,
                seg_size,
                leg.backup.start_lsn,
                s_max,
                &self.wal_cache(),
            )
            .await
            .map_err(gap_failed)?;
            let watched = watched.clone();
            let (gap, outcomes) = tokio::task::spawn_blocking(move || {
                let r = gap.outcomes(major, &watched);
                (gap, r)
            })
            .await
            .map_err(|e| AttemptError::Failed(format!("reading the archived WAL: {e}")))?;
            leg.outcomes = outcomes.map_err(gap_failed)?;
            let patch = &leg.outcomes.patch;
            leg.patched = patch.committed() + patch.aborted();
            tracing::info!(tables = %self.keys(), backup = %leg.backup.label, from = %gap.from, to = %gap.to, segments = gap.segments, fetched = gap.fetched, bytes = gap.bytes, next_xid = ?leg.outcomes.start_checkpoint.map(|c| c.next_xid), records = leg.outcomes.records, committed = patch.committed(), aborted = patch.aborted(), patch_bytes = patch.bytes(), "initial load (object_store): the archive's WAL from the backup's start to the opt-ins is here");
            if let Some((at, wal_level)) = leg.outcomes.parameter_change {
                return Err(AttemptError::Failed(format!(
                    "the source restarted with other settings at {at} (wal_level {}), between \
                     backup {}'s start {} and the opt-in: WAL written before that may lack the \
                     rows and old keys the load replays (they are logged only at wal_level = \
                     logical); remedy: take a new backup of the source, or use initial_load = \
                     'copy'",
                    wal_level.map_or("unknown".into(), |l| match l {
                        0 => "minimal".to_owned(),
                        1 => "replica".to_owned(),
                        2 => "logical".to_owned(),
                        n => n.to_string(),
                    }),
                    leg.backup.label,
                    gap.from
                )));
            }
            leg.gap = Some(gap);
        }
        // The backup's own WAL, for the pages written while it was copied.
        if leg.gap.as_ref().is_none_or(|g| g.to < leg.backup.stop_lsn) {
            let window = gap::fetch(
                store,
                &leg.backup,
                &facts.branch,
                seg_size,
                leg.backup.start_lsn,
                leg.backup.stop_lsn,
                &self.wal_cache(),
            )
            .await
            .map_err(gap_failed)?;
            leg.window = Some(window);
        }
        Ok(leg)
    }

    /// bootstrap: the stream starts at the backup's end and decodes from
    /// its start, so a transaction that wrote before the start and was
    /// still open at the end left those rows on the walked pages alone.
    /// Its outcome decides them: each such writer of a deferred tuple
    /// (running at the start checkpoint, no outcome in the window) is
    /// waited for on the source, and its commit or abort patched into the
    /// gate before the deferred tuples resolve. A committed one's rows keep
    /// the walk's tag; its later changes come from the stream at its
    /// commit. (Seed 001 keeps such rows in pending tables and publishes
    /// the rest meanwhile; here the table's swap waits.)
    async fn wait_for_writers(
        &self,
        leg: &StoreLeg,
        source: &ConnConfig,
        walker: &mut Walker,
    ) -> Result<(), AttemptError> {
        let Some(ckpt) = leg.outcomes.start_checkpoint else {
            return Err(AttemptError::Failed(format!(
                "backup {}: its window holds no start checkpoint, which tells which \
                 transactions were open at its start; remedy: run `walshadow init --force \
                 --bootstrap` again",
                leg.backup.label
            )));
        };
        let gate = walker
            .gate
            .as_mut()
            .ok_or_else(|| AttemptError::Failed("the walk's gate is gone".into()))?;
        // Running at the checkpoint: [oldestActiveXid, nextXid), modulo 2^32.
        let oldest = ckpt.oldest_active_xid;
        let span = ckpt.next_xid.wrapping_sub(oldest);
        let seen = walker.writers_seen.take().unwrap_or_default();
        let mut xids = seen.xids;
        for m in seen.multis {
            match gate.multi().updater(m) {
                Ok(walshadow_heap::visibility::MultiLookup::Updater(u)) => {
                    xids.insert(u.xid);
                }
                Ok(_) => {}
                Err(e) => {
                    return Err(AttemptError::Failed(format!(
                        "multixact {m} of a deferred tuple: {e}"
                    )));
                }
            }
        }
        let mut open: Vec<Xid> = xids
            .into_iter()
            .filter(|&x| {
                oldest >= 3
                    && x >= 3
                    && x.wrapping_sub(oldest) < span
                    && !matches!(
                        gate.xact().status(x),
                        Some(
                            walshadow_heap::visibility::XactStatus::Committed
                                | walshadow_heap::visibility::XactStatus::Aborted
                        )
                    )
            })
            .collect();
        if open.is_empty() {
            return Ok(());
        }
        open.sort_unstable();
        let mut sql = ReplicationClient::connect(source)
            .await
            .map_err(source_failed("connecting to the source"))?;
        let since = Instant::now();
        let mut told = None::<Instant>;
        let mut patch = walshadow_heap::visibility::XactPatch::default();
        loop {
            let r = sql
                .simple_query("SELECT pg_snapshot_xmax(pg_current_snapshot())::text")
                .await
                .map_err(source_failed(
                    "asking the source for its next transaction id",
                ))?;
            let next: u64 = r.text(0, 0).and_then(|t| t.parse().ok()).ok_or_else(|| {
                AttemptError::Failed("the source's next xid8 is not a number".into())
            })?;
            // The full id of each: the epoch of `next`, or the one before.
            let full = |x: Xid| {
                let f = (next & !0xffff_ffff) | u64::from(x);
                if f >= next {
                    f.wrapping_sub(1 << 32)
                } else {
                    f
                }
            };
            let list = open
                .iter()
                .map(|&x| full(x).to_string())
                .collect::<Vec<_>>()
                .join(",");
            let r = sql
                .simple_query(&format!(
                    "SELECT x, pg_xact_status(x::xid8), \
                            (SELECT string_agg(pid::text, ',') FROM pg_stat_activity a \
                              WHERE a.backend_xid::text = (x::numeric % 4294967296)::text) \
                       FROM unnest('{{{list}}}'::text[]) x"
                ))
                .await
                .map_err(source_failed("asking the source how transactions ended"))?;
            let mut still = Vec::new();
            for i in 0..r.rows.len() {
                let Some(x) = r.text(i, 0).and_then(|t| t.parse::<u64>().ok()) else {
                    return Err(AttemptError::Failed(format!(
                        "the source answered {:?} for a transaction id",
                        r.text(i, 0)
                    )));
                };
                let xid = x as u32;
                match r.text(i, 1) {
                    Some("committed") => patch.set(xid, true),
                    Some("aborted") => patch.set(xid, false),
                    Some("in progress") => still.push((xid, r.text(i, 2).map(str::to_owned))),
                    other => {
                        return Err(AttemptError::Failed(format!(
                            "transaction {xid}, open at backup {}'s start, has no status on the \
                             source ({other:?}); remedy: run `walshadow init --force --bootstrap` \
                             again",
                            leg.backup.label
                        )));
                    }
                }
            }
            if still.is_empty() {
                break;
            }
            if told.is_none_or(|t| t.elapsed() >= Duration::from_secs(30)) {
                told = Some(Instant::now());
                let who = still
                    .iter()
                    .map(|(x, pids)| match pids {
                        Some(p) => format!("{x} (pid {p})"),
                        None => x.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                let why = format!(
                    "waiting for transactions open since before backup {}'s start to end \
                     ({who}; {:?} so far): rows they wrote before it are only on the backup's \
                     pages, and their outcome decides them",
                    leg.backup.label,
                    since.elapsed()
                );
                tracing::warn!(tables = %self.keys(), "initial load (bootstrap) {why}");
                let _ = self.update_each(|p| p.error = Some(why.clone()));
            }
            open = still.into_iter().map(|(x, _)| x).collect();
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        sql.close().await;
        tracing::info!(tables = %self.keys(), committed = patch.committed(), aborted = patch.aborted(), "initial load (bootstrap): the writers open across the backup's start have ended");
        gate.xact_mut().patch(patch);
        let _ = self.update_each(|p| p.error = None);
        Ok(())
    }

    /// Waits (a minute at most) for the shadow to have replayed every
    /// opt-in of the pass: the plan reads the tables as of their `S`.
    async fn wait_shadow_replayed(
        &self,
        sql: &mut ReplicationClient,
        tables: &[PassTable],
    ) -> Result<(), AttemptError> {
        let s_max = tables.iter().map(|t| t.s).max().unwrap_or(Lsn(0));
        let since = Instant::now();
        loop {
            let r = sql
                .simple_query(&format!(
                    "SELECT coalesce(pg_last_wal_replay_lsn() >= '{s_max}'::pg_lsn, true)"
                ))
                .await
                .map_err(source_failed("asking the shadow how far it replayed"))?;
            if r.text(0, 0) == Some("t") {
                return Ok(());
            }
            if since.elapsed() > Duration::from_secs(60) {
                return Err(AttemptError::Waiting(format!(
                    "the shadow has not replayed the opt-in at {s_max} yet"
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Who wrote the loaded relations' `pg_class` and `pg_attribute` rows
    /// as the shadow has them: each row's `xmin`, with the pass's table it
    /// belongs to.
    async fn catalog_writers(
        &self,
        sql: &mut ReplicationClient,
        plan: &Plan,
    ) -> Result<Vec<CatalogWriter>, AttemptError> {
        let target_of: HashMap<Oid, usize> = plan
            .file_targets()
            .map(|(f, target)| (f.oid, target))
            .collect();
        if target_of.is_empty() {
            return Ok(Vec::new());
        }
        let list = target_of
            .keys()
            .map(Oid::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let r = sql
            .simple_query(&format!(
                "SELECT c.oid::text, c.oid::regclass::text, 'pg_class', c.xmin::text FROM pg_class c WHERE c.oid IN ({list})
                 UNION ALL
                 SELECT a.attrelid::text, a.attrelid::regclass::text, format('pg_attribute %I', a.attname), a.xmin::text
                   FROM pg_attribute a WHERE a.attrelid IN ({list})"
            ))
            .await
            .map_err(source_failed("reading the tables' catalog rows on the shadow"))?;
        Ok((0..r.rows.len())
            .filter_map(|i| {
                let oid: Oid = r.text(i, 0)?.parse().ok()?;
                Some(CatalogWriter {
                    relation: r.text(i, 1)?.to_owned(),
                    row: r.text(i, 2)?.to_owned(),
                    xmin: r.text(i, 3)?.parse().ok()?,
                    target: *target_of.get(&oid)?,
                })
            })
            .collect())
    }

    /// Seed 000's catalog skew: a loaded relation whose shape or file is
    /// not the backup's ([`writer_skews`] for its catalog rows). Its file
    /// also changed when the archive's WAL from the backup's start made the
    /// file the pass would walk (TRUNCATE, a rewrite, a table made after
    /// the backup).
    fn skewed(
        &self,
        writers: &[CatalogWriter],
        plan: &Plan,
        leg: &StoreLeg,
        tables: &[PassTable],
    ) -> BTreeMap<usize, Vec<String>> {
        let mut skewed: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        let next_xid = leg.outcomes.start_checkpoint.map(|c| c.next_xid);
        for w in writers {
            let Some(at) = leg.outcomes.watched.get(&w.xmin) else {
                continue;
            };
            let Some(t) = tables.get(w.target) else {
                continue;
            };
            let row = if w.row == "pg_class" {
                CatalogRow::Class
            } else {
                CatalogRow::Attribute
            };
            if writer_skews(row, w.xmin, *at, leg.backup.start_lsn, t.s, next_xid) {
                skewed.entry(w.target).or_default().push(format!(
                    "{} ({}, transaction {} committed at {at}, before {}'s opt-in at {})",
                    w.relation, w.row, w.xmin, t.key, t.s
                ));
            }
        }
        // The gap begins at the backup's start: a file made there or later
        // may be missing from the backup, or partly written.
        for (f, target) in plan.file_targets() {
            let Some(at) = leg.outcomes.created.get(&f.locator) else {
                continue;
            };
            if *at >= leg.backup.start_lsn {
                skewed.entry(target).or_default().push(format!(
                    "{} (its file {} was made at {at}, after the backup started: \
                     a TRUNCATE, a rewrite or a new table)",
                    f.name, f.locator.rel_number
                ));
            }
        }
        skewed
    }

    /// object_store (seed 001, "an interrupted load resumes"): which
    /// tables keep the staging an interrupted attempt left, with the
    /// segments it holds, and the progress this attempt records. It is
    /// written before a table's staging is made anew (its entry then has
    /// no segments and no staging uuid), so a crash in between never pairs
    /// the old segments with a new, empty staging table.
    async fn resume_plan(
        &self,
        leg: &StoreLeg,
        tables: &[PassTable],
        plan: &Plan,
    ) -> Result<PassProgress, AttemptError> {
        let saved = PassProgress::load(&self.progress_dir());
        let mut progress = PassProgress::new(&leg.backup.label);
        for (i, t) in tables.iter().enumerate() {
            let fingerprint =
                crate::staging::schema_fingerprint(&self.ch, &self.database, &t.dest_name)
                    .await
                    .map_err(|e| AttemptError::of(e.is_transient(), e))?;
            let mut want = TableProgress {
                key: t.key.clone(),
                s: t.s,
                dest_name: t.dest_name.clone(),
                columns: fingerprint
                    .map(|f| f.columns.iter().map(ToString::to_string).collect())
                    .unwrap_or_default(),
                files: plan
                    .file_targets()
                    .filter(|(_, target)| *target == i)
                    .map(|(f, _)| (f.locator.spc_oid, f.locator.rel_number))
                    .collect(),
                ..TableProgress::default()
            };
            let kept = match saved
                .as_ref()
                .and_then(|p| p.resumable(&leg.backup.label, &want))
            {
                Some(old) if old.staging_uuid.is_some() => {
                    let now = self
                        .staging_of(t)
                        .staging_uuid()
                        .await
                        .map_err(|e| AttemptError::of(e.is_transient(), e))?;
                    (now == old.staging_uuid).then(|| old.clone())
                }
                _ => None,
            };
            if let Some(old) = kept {
                tracing::info!(
                    table = %t.key,
                    backup = %leg.backup.label,
                    segments = old.done.len(),
                    rows = old.rows,
                    "initial load (object_store): resuming; the segments an interrupted attempt put in staging are not walked again"
                );
                want = old;
            }
            progress.tables.push(want);
        }
        progress
            .write(&self.progress_dir())
            .map_err(|e| AttemptError::Failed(format!("recording the pass's progress: {e}")))?;
        Ok(progress)
    }

    /// Seed 000 step 4: the loaded relations' committed changes from the
    /// backup's start to each table's `S`, decoded as the stream does, into
    /// the staging tables at their commits' positions.
    async fn replay_gap(
        &self,
        leg: &StoreLeg,
        files: &[PlannedFile],
        walker: &mut Walker,
        scratch: &Path,
    ) -> Result<GapSummary, AttemptError> {
        let mut summary = GapSummary {
            backup: leg.backup.label.clone(),
            from: leg.backup.start_lsn,
            to: leg.backup.start_lsn,
            ..GapSummary::default()
        };
        let Some(gap) = &leg.gap else {
            return Ok(summary);
        };
        summary.to = gap.to;
        summary.segments = gap.segments;
        summary.patched = leg.patched;
        let Some(db) = files.first().map(|f| f.locator.db_oid) else {
            return Ok(summary);
        };
        let wanted = walker.roles.keys().copied().collect();
        let mut replay = gap
            .replay(
                leg.major,
                db,
                wanted,
                AssemblerConfig {
                    memory_budget_bytes: self.spool_memory_bytes,
                    spill_dir: scratch.join("gap-transactions"),
                },
            )
            .map_err(gap_failed)?;
        // Reading and assembling is CPU work: off the runtime's workers'
        // queue (the stream shares them) while it runs.
        while let Some((c, txn)) = blocking(|| replay.next_commit()).map_err(gap_failed)? {
            summary.transactions += 1;
            let mut spec = None;
            for item in txn {
                let (seq, payload) =
                    item.map_err(|e| AttemptError::Failed(format!("the gap's transactions: {e}")))?;
                let change = Change::decode(&payload)
                    .map_err(|e| AttemptError::Failed(format!("the gap's changes: {e}")))?;
                walker
                    .gap_change(&c, seq, change, &mut spec, &mut summary)
                    .map_err(|e| AttemptError::Failed(format!("replaying the gap: {e}")))?;
            }
            walker
                .flush_full()
                .await
                .map_err(|e| AttemptError::of(sink_waits(e.as_ref()), e))?;
        }
        summary.records = replay.records_read;
        Ok(summary)
    }

    /// Commits the walk's chunk store and moves it out of the scratch
    /// folder for the daemon's mirror; `None` (logged) if that fails: the
    /// daemon then reads such values from the source when it needs them.
    fn hand_off(
        &self,
        walker: Walker,
        scratch: &std::path::Path,
        attempt: u32,
        relations: Vec<(Oid, Oid)>,
    ) -> Option<ToastHandoff> {
        let mut store = walker.toast;
        let path = self.spill_dir.join(format!(
            "backup-toast-{}-{attempt}.redb",
            std::process::id()
        ));
        let r = store
            .commit(Lsn(0))
            .map_err(|e| e.to_string())
            .and_then(|()| {
                drop(store);
                std::fs::rename(scratch.join("toast.redb"), &path).map_err(|e| e.to_string())
            });
        match r {
            Ok(()) => Some(ToastHandoff { path, relations }),
            Err(e) => {
                tracing::warn!(
                    "keeping the walked TOAST chunks for the chunk mirror failed ({e}); values are read from the source when needed"
                );
                None
            }
        }
    }

    /// Reads what the walk needs: relations, files, descriptors, bounds.
    /// `bounds`: read the gate's bounds (`pg_control_checkpoint()`) from
    /// the session; only the source's are the backup's.
    async fn plan(
        &self,
        mut sql: ReplicationClient,
        tables: &[PassTable],
        bounds: bool,
    ) -> Result<(Plan, ReplicationClient), AttemptError> {
        let show = |r: &walshadow_wal_reader::replication::QueryResult| {
            r.text(0, 0).unwrap_or_default().to_owned()
        };
        let block = sql
            .simple_query("SHOW block_size")
            .await
            .map_err(source_failed("SHOW block_size"))?;
        let seg = sql
            .simple_query("SHOW segment_size")
            .await
            .map_err(source_failed("SHOW segment_size"))?;
        let sums = sql
            .simple_query("SHOW data_checksums")
            .await
            .map_err(source_failed("SHOW data_checksums"))?;
        let walk = WalkOptions::for_server(&show(&block), &show(&seg), &show(&sums))
            .map_err(|e| AttemptError::Failed(e.to_string()))?;
        // The gate's bounds: pages below them were flushed by the backup's
        // checkpoint, so a missing one is a lost file, not a newer id.
        // pg_control_checkpoint() may be refused to a role without
        // pg_monitor-like rights: then the gate goes without bounds.
        let read = match bounds {
            false => Ok(None),
            true => sql.simple_query(
                "SELECT split_part(next_xid, ':', 2), next_multixact_id::text, next_multi_offset::text FROM pg_control_checkpoint()",
            )
            .await.map(Some),
        };
        let (next_xid, next_multi) = match read {
            Ok(None) => (None, None),
            Ok(Some(r)) => (
                r.text(0, 0).and_then(|t| t.parse::<u32>().ok()),
                r.text(0, 1)
                    .and_then(|m| m.parse::<u32>().ok())
                    .zip(r.text(0, 2).and_then(|o| o.parse::<u32>().ok())),
            ),
            Err(e) => {
                tracing::debug!(
                    "pg_control_checkpoint() not readable ({e}); the gate goes without bounds"
                );
                (None, None)
            }
        };
        let mut files = Vec::new();
        let mut toasts = Vec::new();
        let mut roles = HashMap::new();
        let mut leaf_oids: Vec<(usize, Oid, String)> = Vec::new();
        for (ti, t) in tables.iter().enumerate() {
            let (schema, name) = walshadow_types::split_table_key(&t.key)
                .ok_or_else(|| AttemptError::Failed(format!("{}: not schema.name", t.key)))?;
            let (schema, name) = (schema.as_str(), name.as_str());
            let rel = format!(
                "to_regclass(format('%I.%I', {}, {}))",
                quote_literal(schema),
                quote_literal(name)
            );
            let r = sql
                .simple_query(&format!(
                    "WITH root AS (SELECT {rel}::oid AS oid),
                          leaves AS (SELECT oid AS relid FROM root WHERE (SELECT relkind FROM pg_class WHERE oid = root.oid) = 'r'
                                     UNION ALL
                                     SELECT t.relid FROM root, pg_partition_tree(root.oid) t JOIN pg_class c ON c.oid = t.relid
                                      WHERE t.isleaf AND c.relkind = 'r')
                     SELECT format('%s.%s', ns.nspname, c.relname), c.oid, pg_relation_filenode(c.oid),
                            COALESCE(NULLIF(c.reltablespace, 0), d.dattablespace), c.reltoastrelid,
                            CASE WHEN c.reltoastrelid <> 0 THEN pg_relation_filenode(c.reltoastrelid) END,
                            COALESCE(NULLIF(tc.reltablespace, 0), d.dattablespace), d.oid, c.relpersistence
                       FROM leaves l JOIN pg_class c ON c.oid = l.relid
                       JOIN pg_namespace ns ON ns.oid = c.relnamespace
                       LEFT JOIN pg_class tc ON tc.oid = c.reltoastrelid
                       JOIN pg_database d ON d.datname = current_database()
                      ORDER BY c.oid"
                ))
                .await
                .map_err(source_failed("reading the tables' files"))?;
            if r.rows.is_empty() {
                return Err(AttemptError::Failed(format!(
                    "{} does not exist (or is not a table or partitioned table with partitions)",
                    t.key
                )));
            }
            for i in 0..r.rows.len() {
                let num = |c: usize| r.text(i, c).and_then(|v| v.parse::<u32>().ok());
                let (Some(rel_name), Some(oid), Some(file), Some(spc), Some(db)) =
                    (r.text(i, 0), num(1), num(2), num(3), num(7))
                else {
                    return Err(AttemptError::Failed(format!(
                        "unexpected row {i} reading {}'s files",
                        t.key
                    )));
                };
                if r.text(i, 8) != Some("p") {
                    return Err(AttemptError::Failed(format!(
                        "{rel_name} is unlogged or temporary: a backup holds no rows of it; use initial_load = 'copy'"
                    )));
                }
                let locator = RelFileLocator {
                    spc_oid: spc,
                    db_oid: db,
                    rel_number: file,
                };
                roles.insert((spc, file), Role::Heap(leaf_oids.len()));
                leaf_oids.push((ti, oid, rel_name.to_owned()));
                files.push(PlannedFile {
                    name: rel_name.to_owned(),
                    oid,
                    locator,
                });
                if let (Some(toast), Some(tfile), Some(tspc)) = (num(4), num(5), num(6))
                    && toast != 0
                {
                    roles.insert((tspc, tfile), Role::Toast(toast));
                    toasts.push((ti, toast, tfile));
                    files.push(PlannedFile {
                        name: format!("{rel_name} (TOAST)"),
                        oid: toast,
                        locator: RelFileLocator {
                            spc_oid: tspc,
                            db_oid: db,
                            rel_number: tfile,
                        },
                    });
                }
            }
        }
        let mut catalog = ShadowCatalog::over(sql);
        let mut dests = Vec::with_capacity(tables.len());
        for t in tables {
            let (schema, name) = walshadow_types::split_table_key(&t.key).unwrap_or_default();
            let desc = self.describe(&mut catalog, &schema, &name, t).await?;
            dests.push(
                DestTable::with_rules(&desc, &self.meta, &t.columns.dest())
                    .map_err(|e| AttemptError::Failed(format!("{}: {e}", t.key)))?,
            );
        }
        let mut leaves = Vec::with_capacity(leaf_oids.len());
        for (ti, oid, name) in leaf_oids {
            let desc: RelationDesc = catalog
                .relation(oid)
                .await
                .map_err(failed("reading a descriptor"))?
                .ok_or_else(|| AttemptError::Retry(format!("{name} was dropped meanwhile")))?;
            let desc = match tables.get(ti) {
                Some(t) => masked(t, desc)?,
                None => desc,
            };
            let decoder =
                RowDecoder::new(&desc).map_err(|e| AttemptError::Failed(format!("{name}: {e}")))?;
            let dest = dests
                .get(ti)
                .ok_or_else(|| AttemptError::Failed("planned table out of range".into()))?;
            let positions = decoder
                .column_names()
                .map(|n| dest.columns.iter().position(|c| c.source == n))
                .collect();
            leaves.push(Leaf {
                target: ti,
                name,
                decoder,
                positions,
            });
        }
        let sql = catalog.into_client();
        let plan = Plan {
            toasts,
            files,
            roles,
            leaves,
            dests,
            walk,
            next_xid,
            next_multi,
        };
        Ok((plan, sql))
    }

    async fn describe(
        &self,
        catalog: &mut ShadowCatalog,
        schema: &str,
        name: &str,
        t: &PassTable,
    ) -> Result<RelationDesc, AttemptError> {
        let key = &t.key;
        let desc = catalog
            .relation_by_name(schema, name)
            .await
            .map_err(|e| AttemptError::Failed(format!("reading {key}'s descriptor: {e}")))?
            .ok_or_else(|| AttemptError::Retry(format!("{key} does not exist")))?;
        masked(t, desc)
    }

    /// Every walked relation is still on the file the walk read.
    async fn recheck_files(
        &self,
        sql: &mut ReplicationClient,
        files: &[PlannedFile],
    ) -> Result<(), AttemptError> {
        for f in files {
            let r = sql
                .simple_query(&format!("SELECT pg_relation_filenode({})", f.oid))
                .await
                .map_err(source_failed("checking the walked files"))?;
            let now = r.text(0, 0).and_then(|t| t.parse::<u32>().ok());
            if now != Some(f.locator.rel_number) {
                return Err(AttemptError::Retry(format!(
                    "{} moved to a new file during the backup (relfilenode {} walked, {} now: TRUNCATE, VACUUM FULL, CLUSTER or a rewriting ALTER TABLE)",
                    f.name,
                    f.locator.rel_number,
                    now.map_or("none".into(), |n| n.to_string())
                )));
            }
        }
        Ok(())
    }

    /// Publishes one table's staging table, or discards it.
    async fn publish(&self, t: &PassTable, staging: &StagingTable) -> TableOutcome {
        if !self.is_current(t) {
            if let Err(e) = staging
                .discard("the table was opted out during its load")
                .await
            {
                tracing::warn!(table = %t.key, "dropping the staging table of an opted-out table: {e}");
            }
            return TableOutcome::Withdrawn;
        }
        let mut mark = |m: &SwapMark| self.mark(t, m);
        let result: Result<TableOutcome, crate::staging::StagingError> = async {
            // The stream's inserts and DDL into the table wait from the gate
            // to the exchange: none straddles it, the copy-back needs no wait.
            let guard = self.dest_locks.lock(&t.dest_name).await;
            if !self.is_current(t) {
                // Opted out, or a resync started over, while this waited
                // for the lock: the table under the name may be a new one.
                drop(guard);
                staging
                    .discard("the table was opted out during its load")
                    .await?;
                return Ok(TableOutcome::Withdrawn);
            }
            if let SchemaGate::Differs { reason } = staging.gate().await? {
                drop(guard);
                let reason = format!(
                    "{}'s ClickHouse table changed shape during the load ({reason}); the load runs again at the next start",
                    t.key
                );
                staging.discard(&reason).await?;
                mark(&SwapMark::Discarded {
                    reason: reason.clone(),
                })?;
                return Ok(TableOutcome::Discarded { reason });
            }
            let uuid = staging.mark_swapped(&mut mark).await?;
            staging.exchange(&uuid, false).await?;
            drop(guard);
            walshadow_failpoints::crash(walshadow_failpoints::BACKUP_AFTER_EXCHANGE);
            let copied_back = staging
                .copy_back(tokio::time::Instant::now())
                .await?;
            staging.finish(&mut mark).await?;
            Ok(TableOutcome::Published { copied_back })
        }
        .await;
        match result {
            Ok(o) => o,
            Err(e) => {
                let swapped = self
                    .ledger
                    .lock()
                    .ok()
                    .and_then(|l| l.tables.get(&t.key).and_then(|p| p.swap.clone()));
                match swapped {
                    Some(state) => {
                        // Past the mark: only recovery may go on.
                        for round in 0..3u32 {
                            tokio::time::sleep(Duration::from_secs(1 << round)).await;
                            let guard = self.dest_locks.lock(&t.dest_name).await;
                            let r = staging.recover(&state.staging_uuid, &mut mark).await;
                            drop(guard);
                            match r {
                                Ok(r) => {
                                    return match r.outcome {
                                        crate::staging::SwapOutcome::Published { copied_back } => {
                                            TableOutcome::Published { copied_back }
                                        }
                                        crate::staging::SwapOutcome::Discarded { reason } => {
                                            TableOutcome::Discarded { reason }
                                        }
                                    };
                                }
                                Err(e) => {
                                    tracing::warn!(table = %t.key, "staging swap recovery failed: {e}")
                                }
                            }
                        }
                        TableOutcome::LeftSwapped {
                            error: e.to_string(),
                        }
                    }
                    None => {
                        let reason = e.to_string();
                        if let Err(e) = self.mark(
                            t,
                            &SwapMark::Discarded {
                                reason: reason.clone(),
                            },
                        ) {
                            tracing::warn!(table = %t.key, "recording the discarded load in the ledger: {e}");
                        }
                        TableOutcome::Discarded { reason }
                    }
                }
            }
        }
    }

    /// Applies a swap transition to `t`'s entry and writes the ledger.
    fn mark(&self, t: &PassTable, m: &SwapMark) -> Result<(), LedgerError> {
        let mut ledger = match self.ledger.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        match ledger.tables.get_mut(&t.key) {
            Some(p) if p.s == t.s => m.apply(p),
            _ if matches!(m, SwapMark::Swapped(_)) => {
                return Err(LedgerError::Invalid {
                    path: self.state_dir.join(Ledger::FILE),
                    detail: format!("{}'s entry is gone (opted out)", t.key),
                });
            }
            _ => return Ok(()),
        }
        ledger.write(&self.state_dir)
    }

    fn log_summary(&self, s: &PassSummary) {
        let loaded: Vec<String> = s
            .tables
            .iter()
            .map(|(k, rows, o)| match o {
                TableOutcome::Published { copied_back } => {
                    format!("{k}: {rows} rows published ({copied_back} copied back)")
                }
                TableOutcome::Discarded { reason } => format!("{k}: discarded ({reason})"),
                TableOutcome::Withdrawn => format!("{k}: opted out, discarded"),
                TableOutcome::LeftSwapped { error } => {
                    format!("{k}: swap left for recovery ({error})")
                }
            })
            .collect();
        let gap = s.gap.clone().unwrap_or_default();
        tracing::info!(
            tables = %loaded.join("; "),
            attempts = s.attempts,
            duration_ms = s.duration.as_millis() as u64,
            backup_start = %s.backup_start,
            backup_end = %s.backup_end,
            bytes_streamed = s.bytes_streamed,
            files_walked = s.walk.files_walked,
            bytes_walked = s.walk.bytes_walked,
            files_skipped = s.walk.files_skipped,
            files_resumed = s.walk.files_resumed,
            bytes_resumed = s.walk.bytes_resumed,
            pages_walked = s.walk.pages_walked,
            tuples_walked = s.gate.walked,
            gated = s.gate.gated,
            deferred = s.gate.deferred,
            deferred_emitted = s.gate.deferred_emitted,
            deferred_dropped = s.gate.deferred_dropped,
            not_committed_dropped = s.gate.not_committed_dropped,
            multixact_emitted = s.gate.multixact_emitted,
            toast_chunks = s.toast_chunks,
            toast_waits = s.toast_waits,
            toast_missing = s.toast_missing,
            pages_from_window = s.pages_from_window,
            pages_initialised_in_window = s.pages_initialised_in_window,
            spilled_bytes = s.spilled_bytes,
            slru_files = s.walk.slru_files,
            slru_bytes = s.walk.slru_bytes,
            backup = %gap.backup,
            gap_from = %gap.from,
            gap_to = %gap.to,
            gap_segments = gap.segments,
            gap_records = gap.records,
            gap_transactions = gap.transactions,
            gap_rows = gap.rows,
            gap_past_s = gap.past_s,
            pg_xact_patch = gap.patched,
            "initial load ({}) done",
            self.mode()
        );
    }
}

/// Which catalog row of a loaded relation a transaction wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CatalogRow {
    Class,
    Attribute,
}

/// Whether a transaction `xmin` that wrote a loaded relation's catalog
/// row and committed at `at` makes the backup's pages unfit for it. Only
/// a commit after the backup's `start` and up to the table's opt-in `s`
/// counts (later ones are the stream's). A `pg_attribute` row changes the
/// shape (ADD, DROP, ALTER COLUMN). A `pg_class` row written alone (GRANT,
/// CREATE INDEX, a storage option, a rename) changes neither shape nor
/// file when its transaction began after the start: a new file it made
/// would be in the gap, which the file check sees. One already running at
/// the start (`xmin` before the start checkpoint's `next_xid`) may have
/// made the file before the start and written it after the copy (a
/// VACUUM FULL or CLUSTER spanning the start, by page images the replay
/// does not read as rows): refused. Without the start checkpoint every
/// `pg_class` writer is.
fn writer_skews(
    row: CatalogRow,
    xmin: Xid,
    at: Lsn,
    start: Lsn,
    s: Lsn,
    next_xid: Option<Xid>,
) -> bool {
    if at <= start || at > s {
        return false;
    }
    match (row, next_xid) {
        (CatalogRow::Attribute, _) | (CatalogRow::Class, None) => true,
        // TransactionIdPrecedes: modulo 2^32.
        (CatalogRow::Class, Some(next)) => (xmin.wrapping_sub(next) as i32) < 0,
    }
}

/// The refusal of tables whose catalog changed after the backup's start.
fn skew_message(leg: &StoreLeg, mut skew: Vec<String>) -> String {
    let n = skew.len();
    skew.truncate(5);
    format!(
        "catalog skew: backup {} started at {} and the catalog of loaded tables changed \
         after that: {}{} (ALTER TABLE, TRUNCATE, a rewrite, GRANT, CREATE INDEX, or the \
         table made after the backup); its pages may not hold the table's rows as they are \
         now; remedy: take a new backup of the source and restart walshadow (or opt the \
         table in again), or use initial_load = 'copy'",
        leg.backup.label,
        leg.backup.start_lsn,
        skew.join(", "),
        if n > 5 {
            format!(" and {} more", n - 5)
        } else {
            String::new()
        }
    )
}

/// The store and what the pass learned of it before the walk.
impl StoreLeg {
    /// The WAL from the backup's start to its stop.
    fn window_wal(&self) -> Option<&GapWal> {
        self.window
            .as_ref()
            .or(self.gap.as_ref())
            .filter(|w| w.from <= self.backup.start_lsn && w.to >= self.backup.stop_lsn)
    }
}

struct StoreLeg {
    backup: Backup,
    major: PgMajor,
    /// `None` when the backup started at or after every opt-in.
    gap: Option<GapWal>,
    /// The backup's own WAL (its start to its stop), when `gap` does not
    /// reach the stop: read for page images and TOAST chunks only.
    window: Option<GapWal>,
    outcomes: Outcomes,
    /// Outcomes in the patch (it moves into the gate).
    patched: u64,
}

/// A catalog row of a loaded relation and who wrote it.
struct CatalogWriter {
    relation: String,
    /// `pg_class`, or `pg_attribute <column>`.
    row: String,
    xmin: Xid,
    /// The pass's table it belongs to.
    target: usize,
}

fn store_failed(what: &str) -> impl Fn(StoreError) -> AttemptError + '_ {
    move |e| AttemptError::of(e.is_transient(), format!("{what}: {e}"))
}

/// Runs CPU-bound `f` in place, letting the multi-threaded runtime move
/// its other tasks off this worker meanwhile (as is, on a current-thread
/// runtime).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

fn gap_failed(e: GapError) -> AttemptError {
    AttemptError::of(e.waits(), e)
}

/// Marker in a sink error that makes the attempt a quick retry.
const TORN: &str = "torn read";

/// The page consumer of one attempt: gates tuples, decodes rows into the
/// staging tables' batches, keeps TOAST chunks.
struct Walker {
    roles: HashMap<(Oid, Oid), Role>,
    leaves: Vec<Leaf>,
    targets: Vec<Target>,
    gate: Option<Gate>,
    spool: Option<DeferredSpool>,
    toast: ChunkMirror,
    ch: ClickHouseClient,
    gate_counters: GateCounters,
    spilled_bytes: u64,
    s_min: Lsn,
    /// The walk ended: a TOAST value still missing now never comes from
    /// the backup.
    walk_done: bool,
    /// The pages the backup's WAL window defines (object_store, bootstrap).
    window: Option<WindowPages>,
    pages_from_window: u64,
    pages_initialised_in_window: u64,
    /// The chunk store holds every chunk the backup's WAL window saw (its
    /// images and inserts): a walked row's value missing after the walk
    /// means a damaged copy. The first such value of each target.
    strict_toast: bool,
    unassembled: BTreeMap<usize, String>,
    toast_waits: u64,
    toast_missing: u64,
    toast_chunks: u64,
    /// Tuples deferred so far, and when the current segment began: a
    /// segment that deferred none has all its rows in its batch at its end.
    deferred: u64,
    deferred_at_file: u64,
    /// object_store: the segments whose rows are in staging, recorded.
    progress: Option<ProgressKeeper>,
    /// bootstrap: the writers (inserter, deleter or updater) of deferred
    /// tuples, some of which may have begun before the backup's start, and
    /// the multixacts in their xmax (their updaters are read once the walk
    /// has every `pg_multixact` file: a tablespace's files come first).
    writers_seen: Option<WritersSeen>,
}

/// See [`Walker::writers_seen`].
#[derive(Debug, Default)]
struct WritersSeen {
    xids: HashSet<Xid>,
    multis: HashSet<u32>,
}

/// An `object_store` pass's [`PassProgress`] and where it is kept.
struct ProgressKeeper {
    doc: PassProgress,
    dir: PathBuf,
}

/// A heap segment shorter than this is not recorded as done (walking it
/// again is cheap, an insert per small file is not).
const RESUME_MIN_PAGES: u64 = 128;

/// Unique per attempt across restarts (insert tokens).
fn attempt_nonce() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}{:x}", std::process::id(), nanos)
}

impl Walker {
    /// Decides and decodes one page's tuples (no I/O but the TOAST store
    /// and the spool).
    fn take_page(&mut self, page: &WalkedPage<'_>, lsn: Lsn) -> Result<(), SinkError> {
        let heap = match page.heap() {
            Ok(h) => h,
            Err(e) if e.damage.is_checksum_after(self.s_min) => {
                return Err(format!("{TORN}: {e}").into());
            }
            Err(e) => return Err(e.into()),
        };
        let key = (page.locator.spc_oid, page.locator.rel_number);
        match self.roles.get(&key) {
            Some(Role::Toast(toast_relid)) => {
                self.keep_chunks(
                    *toast_relid,
                    page.locator.rel_number,
                    page.block,
                    &heap,
                    lsn,
                )
                .map_err(|e| format!("{}, block {}: {e}", page.file, page.block))?;
            }
            Some(Role::Heap(leaf)) => {
                let leaf = *leaf;
                for t in heap.tuples() {
                    let header = t.visibility_header();
                    let gate = self.gate.as_mut().ok_or("the walk's gate is gone")?;
                    match gate.decide(&header)? {
                        Verdict::Emit => self.emit(leaf, &header, t.data)?,
                        Verdict::Drop(_) => {}
                        Verdict::Defer => self.defer(leaf, &header, t.data)?,
                    }
                }
            }
            None => {}
        }
        Ok(())
    }

    /// A walked page, or the window's own state of it (see
    /// [`crate::window_pages`]).
    fn take_walked(&mut self, page: &WalkedPage<'_>) -> Result<(), SinkError> {
        let defined = match &self.window {
            Some(w) => w
                .get(page.locator, page.block)
                .map_err(|e| format!("the window's page images: {e}"))?,
            None => None,
        };
        match defined {
            None => self.take_page(page, Lsn(0)),
            Some(WindowPage::Initialised) => {
                self.pages_initialised_in_window += 1;
                Ok(())
            }
            Some(WindowPage::Image { page: bytes, lsn }) => {
                self.pages_from_window += 1;
                self.take_page(&page.replaced(&bytes), lsn)
            }
        }
    }

    /// object_store, bootstrap: before the walk, the backup's WAL window
    /// (its start to its stop): the walked relations' pages it defines
    /// (see [`crate::window_pages`]), and into the chunk store every TOAST
    /// chunk it saw: those of every image of a TOAST page and every one
    /// inserted, by any transaction (a chunk's bytes never change). With
    /// them, every chunk a walked row can point at is in the store: one
    /// inserted before the window is in the copy or, if its page changed
    /// since, in the image of that page's first change.
    fn load_window(
        &mut self,
        leg: &StoreLeg,
        files: &[PlannedFile],
        scratch: &Path,
    ) -> Result<(), AttemptError> {
        let Some(wal) = leg.window_wal() else {
            return Ok(());
        };
        let Some(db) = files.first().map(|f| f.locator.db_oid) else {
            return Ok(());
        };
        std::fs::create_dir_all(scratch)
            .map_err(|e| AttemptError::Failed(format!("{}: {e}", scratch.display())))?;
        let wanted: HashSet<(Oid, Oid)> = self.roles.keys().copied().collect();
        let toasts: HashSet<(Oid, Oid)> = self
            .roles
            .iter()
            .filter(|(_, r)| matches!(r, Role::Toast(_)))
            .map(|(k, _)| *k)
            .collect();
        let path = scratch.join("window-pages");
        let mut pages = WindowPages::create(&path)
            .map_err(|e| AttemptError::Failed(format!("{}: {e}", path.display())))?;
        let until = leg.backup.stop_lsn;
        let chunks_before = self.toast_chunks;
        let items = blocking(|| {
            wal.window(
                leg.major,
                db,
                &wanted,
                &toasts,
                until,
                |item| -> Result<(), SinkError> {
                    match item {
                        WindowItem::Page(p) => {
                            let role = self
                                .roles
                                .get(&(p.locator.spc_oid, p.locator.rel_number))
                                .copied();
                            if let (Some(Role::Toast(relid)), Some(image)) = (role, &p.image) {
                                let heap = walshadow_heap::heap_page::HeapPage::parse(
                                    image, p.block, false,
                                )
                                .map_err(|damage| {
                                    format!(
                                        "the image of {} block {} at {}: {damage}",
                                        p.locator, p.block, p.lsn
                                    )
                                })?;
                                self.keep_chunks(
                                    relid,
                                    p.locator.rel_number,
                                    p.block,
                                    &heap,
                                    p.lsn,
                                )?;
                            }
                            pages
                                .define(p.locator, p.block, p.lsn, p.image.as_deref())
                                .map_err(|e| format!("{}: {e}", path.display()).into())
                        }
                        WindowItem::ToastInsert { lsn, change } => {
                            let file = change.rel.rel_number;
                            let role = self.roles.get(&(change.rel.spc_oid, file)).copied();
                            match (role, change.tid, &change.new) {
                                (Some(Role::Toast(relid)), Some(tid), Some(t)) => {
                                    self.keep_chunk(relid, file, tid, t.tuple_ref(), lsn)
                                }
                                _ => Ok(()),
                            }
                        }
                    }
                },
            )
        })
        .map_err(|e| {
            AttemptError::Failed(format!(
                "reading backup {}'s WAL window for its page images and TOAST chunks: {e}",
                leg.backup.label
            ))
        })?;
        tracing::debug!(backup = %leg.backup.label, items, blocks = pages.len(), images = pages.images, initialised = pages.initialised, chunks = self.toast_chunks - chunks_before, "initial load: what the backup's WAL window holds of the walked relations");
        self.window = Some(pages);
        self.strict_toast = true;
        Ok(())
    }

    /// Every chunk on a TOAST page (walked, or a window image).
    fn keep_chunks(
        &mut self,
        toast_relid: Oid,
        file: Oid,
        block: u32,
        heap: &walshadow_heap::heap_page::HeapPage<'_>,
        lsn: Lsn,
    ) -> Result<(), SinkError> {
        for t in heap.tuples() {
            let tid = Tid {
                block,
                offset: t.offset,
            };
            self.keep_chunk(toast_relid, file, tid, t.tuple_ref(), lsn)?;
        }
        Ok(())
    }

    /// A TOAST chunk (walked, in a window image, or inserted in the gap)
    /// into the pass's store; at `lsn` where the WAL says when it was
    /// there (a later one at the same tid wins), else 0.
    fn keep_chunk(
        &mut self,
        toast_relid: Oid,
        file: Oid,
        tid: Tid,
        tuple: TupleRef<'_>,
        lsn: Lsn,
    ) -> Result<(), SinkError> {
        let chunk = ToastChunk::from_tuple(tuple).map_err(|e| format!("TOAST chunk: {e}"))?;
        self.toast.insert_chunk(
            toast_relid,
            file,
            tid,
            chunk.chunk_id,
            chunk.chunk_seq,
            lsn,
            &chunk.data,
        )?;
        self.toast_chunks += 1;
        Ok(())
    }

    fn defer(&mut self, leaf: usize, header: &TupleHeader, tuple: &[u8]) -> Result<(), SinkError> {
        self.deferred += 1;
        if let Some(seen) = self.writers_seen.as_mut() {
            use walshadow_heap::visibility::{
                HEAP_XMAX_INVALID, HEAP_XMAX_IS_MULTI, heap_xmax_is_locked_only,
            };
            seen.xids.insert(header.xmin);
            // A locker decides nothing (the gate reads such a tuple as live
            // whatever the locker does), nor does an xmax hinted invalid.
            let im = header.infomask;
            if im & HEAP_XMAX_INVALID == 0 && !heap_xmax_is_locked_only(im) && header.xmax != 0 {
                if im & HEAP_XMAX_IS_MULTI != 0 {
                    seen.multis.insert(header.xmax);
                } else {
                    seen.xids.insert(header.xmax);
                }
            }
        }
        let mut payload = Vec::with_capacity(4 + tuple.len());
        payload.extend_from_slice(&(leaf as u32).to_le_bytes());
        payload.extend_from_slice(tuple);
        self.spool
            .as_mut()
            .ok_or("the walk's spool is gone")?
            .push(header, &payload)?;
        Ok(())
    }

    /// A live tuple into its table's batch; one whose TOAST the walk has
    /// not reached yet waits in the spool.
    fn emit(&mut self, leaf: usize, header: &TupleHeader, tuple: &[u8]) -> Result<(), SinkError> {
        let l = self.leaves.get(leaf).ok_or("leaf out of range")?;
        let source = PassToast {
            store: &self.toast,
            error: std::cell::RefCell::new(None),
        };
        let decoded = TupleRef::from_heap_tuple(tuple).and_then(|t| l.decoder.decode(t, &source));
        if let Some(e) = source.error.into_inner() {
            return Err(e.into());
        }
        let values = match decoded {
            Ok(v) => v,
            Err(RowError::UnresolvedToast { .. }) if !self.walk_done => {
                self.toast_waits += 1;
                return self.defer(leaf, header, tuple);
            }
            Err(RowError::UnresolvedToast {
                column, value_id, ..
            }) if self.strict_toast => {
                // Its table is set aside once the walk ends.
                self.toast_missing += 1;
                let xmin = header.xmin;
                self.unassembled.entry(l.target).or_insert_with(|| {
                    format!(
                        "{}: column {column}, TOAST value {value_id} (a row written by transaction {xmin})",
                        l.name
                    )
                });
                return Ok(());
            }
            Err(RowError::UnresolvedToast {
                column, value_id, ..
            }) => {
                // Removed after the page was copied: superseded after S.
                tracing::debug!(relation = %l.name, column, value_id, "walked row skipped: its TOAST value is gone from the backup (changed after the opt-in; the stream has the change)");
                self.toast_missing += 1;
                return Ok(());
            }
            Err(e) => return Err(format!("{}: {e}", l.name).into()),
        };
        self.push_walked(leaf, values)
    }

    /// A walked row's values into its table's batch, at the walk's tag.
    fn push_walked(&mut self, leaf: usize, values: Vec<Value>) -> Result<(), SinkError> {
        let l = self.leaves.get(leaf).ok_or("leaf out of range")?;
        let target = self
            .targets
            .get_mut(l.target)
            .ok_or("target out of range")?;
        let mut row = vec![Value::Null; target.width];
        for (v, pos) in values.into_iter().zip(&l.positions) {
            if let Some(slot) = pos.and_then(|p| row.get_mut(p)) {
                *slot = v;
            }
        }
        let meta = RowMeta {
            lsn: target.tag,
            seq: Lsn(1),
            xid: 0,
            commit_time: 0,
            deleted: false,
        };
        target
            .batch
            .push(&row, &meta)
            .map_err(|e| format!("{}: {e}", l.name))?;
        Ok(())
    }

    /// One committed change of the gap: TOAST chunks into the pass's
    /// store, rows of commits up to the table's `S` into its batch.
    fn gap_change(
        &mut self,
        c: &CommitEvent,
        seq: Lsn,
        change: Change,
        spec: &mut Option<(Lsn, Change)>,
        summary: &mut GapSummary,
    ) -> Result<(), SinkError> {
        let (seq, change) = match change.kind {
            ChangeKind::SpecInsert => {
                *spec = Some((seq, change));
                return Ok(());
            }
            ChangeKind::SpecConfirm => match spec.take() {
                Some((seq, c)) => (
                    seq,
                    Change {
                        kind: ChangeKind::Insert,
                        ..c
                    },
                ),
                None => return Ok(()),
            },
            ChangeKind::SpecAbort => {
                *spec = None;
                return Ok(());
            }
            // A TRUNCATE gave the table a new file: the skew check refused
            // the pass before it got here.
            ChangeKind::Truncate => return Ok(()),
            _ => (seq, change),
        };
        let file = change.rel.rel_number;
        match self.roles.get(&(change.rel.spc_oid, file)) {
            Some(Role::Toast(toast_relid)) => {
                let toast_relid = *toast_relid;
                // Chunks deleted in the gap are kept: the values stay
                // readable for rows that still point at them here.
                if let (ChangeKind::Insert, Some(tid), Some(t)) =
                    (change.kind, change.tid, &change.new)
                {
                    self.keep_chunk(toast_relid, file, tid, t.tuple_ref(), seq)
                        .map_err(|e| format!("at {seq}: {e}"))?;
                }
            }
            Some(Role::Heap(leaf)) => {
                let l = self.leaves.get(*leaf).ok_or("leaf out of range")?;
                let target = self
                    .targets
                    .get_mut(l.target)
                    .ok_or("target out of range")?;
                if c.end > target.table.s {
                    summary.past_s += 1;
                    return Ok(());
                }
                let layout = Layout {
                    decoder: &l.decoder,
                    positions: &l.positions,
                    key: &target.key,
                };
                let source = PassToast {
                    store: &self.toast,
                    error: std::cell::RefCell::new(None),
                };
                let rows = change_rows(&layout, &change, seq, &source);
                if let Some(e) = source.error.into_inner() {
                    return Err(e.into());
                }
                let rows = match rows {
                    Ok(rows) => rows,
                    // Its chunks were gone before the backup copied them:
                    // the row version is dead by a later change.
                    Err(ChangeRowsError::Row(RowError::UnresolvedToast {
                        column,
                        value_id,
                        ..
                    })) => {
                        tracing::debug!(relation = %l.name, column, value_id, lsn = %seq, "a replayed row skipped: its TOAST value is in neither the backup nor the archive's WAL");
                        self.toast_missing += 1;
                        return Ok(());
                    }
                    Err(e) => return Err(format!("{} at {seq}: {e}", l.name).into()),
                };
                for r in rows {
                    let meta = RowMeta {
                        lsn: c.end,
                        seq: r.seq,
                        xid: c.xid,
                        commit_time: c.commit_time,
                        deleted: r.deleted,
                    };
                    target
                        .batch
                        .push(&r.values, &meta)
                        .map_err(|e| format!("{}: {e}", l.name))?;
                    summary.rows += 1;
                }
            }
            None => {}
        }
        Ok(())
    }

    /// Inserts the batches that are full.
    async fn flush_full(&mut self) -> Result<(), SinkError> {
        let ch = self.ch.clone();
        for t in &mut self.targets {
            if t.batch.is_full() {
                t.insert(&ch).await?;
                if !t.paused {
                    t.paused = true;
                    walshadow_failpoints::hold(
                        walshadow_failpoints::BACKUP_WALK_AFTER_STAGING,
                        &format!("{}.walk", t.table.key),
                    )
                    .await;
                }
            }
        }
        Ok(())
    }

    async fn flush_all(&mut self) -> Result<(), AttemptError> {
        let ch = self.ch.clone();
        for t in &mut self.targets {
            t.insert(&ch)
                .await
                .map_err(|e| AttemptError::of(sink_waits(e.as_ref()), e))?;
        }
        Ok(())
    }

    /// The walk ended well: deferred tuples (and rows that waited for
    /// their TOAST) resolve against the complete copy.
    async fn resolve_deferred(&mut self) -> Result<(), AttemptError> {
        self.walk_done = true;
        let gate = self
            .gate
            .take()
            .ok_or_else(|| AttemptError::Failed("the walk's gate is gone".into()))?;
        let spool = self
            .spool
            .take()
            .ok_or_else(|| AttemptError::Failed("the walk's spool is gone".into()))?;
        self.spilled_bytes = spool.spilled_bytes();
        let mut walked = gate.finish_walk();
        let (tx, mut rx) =
            tokio::sync::mpsc::channel::<walshadow_heap::visibility::DeferredTuple>(256);
        let resolver = tokio::task::spawn_blocking(move || {
            let r = spool.resolve(&mut walked, |t| tx.blocking_send(t).map_err(|_| "stopped"));
            (r.map(|_| ()).map_err(|e| e.to_string()), walked.counters())
        });
        let mut failure = None;
        while let Some(t) = rx.recv().await {
            let r = (|| -> Result<(), SinkError> {
                let (leaf, tuple) = t.payload.split_at_checked(4).ok_or("short spool frame")?;
                let leaf = u32::from_le_bytes(leaf.try_into().map_err(|_| "short spool frame")?);
                self.emit(leaf as usize, &t.header, tuple)
            })();
            if let Err(e) = r {
                failure = Some(e.to_string());
                break;
            }
            if let Err(e) = self.flush_full().await {
                failure = Some(e.to_string());
                break;
            }
        }
        drop(rx);
        let (resolved, counters) = resolver
            .await
            .map_err(|e| AttemptError::Failed(format!("resolving deferred tuples: {e}")))?;
        self.gate_counters = counters;
        if let Some(f) = failure {
            return Err(AttemptError::Failed(format!(
                "resolving deferred tuples: {f}"
            )));
        }
        resolved.map_err(|e| AttemptError::Failed(format!("resolving deferred tuples: {e}")))
    }
}

impl Target {
    async fn insert(&mut self, ch: &ClickHouseClient) -> Result<(), SinkError> {
        let Some(sealed) = self.batch.seal() else {
            return Ok(());
        };
        self.inserts += 1;
        // A retry of this very insert is deduplicated; the staging table is
        // new per attempt.
        let token = format!(
            "base_backup/{}/{}/{}/{}",
            self.staging.name(),
            self.table.s,
            self.attempt,
            self.inserts
        );
        let policy = RetryPolicy {
            max_attempts: 30,
            max_elapsed: Duration::from_secs(600),
            ..RetryPolicy::default()
        };
        sealed.insert(ch, &token, &policy).await?;
        self.rows += sealed.rows as u64;
        self.replaced += sealed.replaced;
        Ok(())
    }
}

impl Walker {
    /// A heap segment ended with all its rows emitted: they go to staging
    /// now, and the segment is recorded as done once ClickHouse took them.
    async fn segment_done(&mut self, locator: RelFileLocator, segno: u32) -> Result<(), SinkError> {
        let Some(Role::Heap(leaf)) = self.roles.get(&(locator.spc_oid, locator.rel_number)) else {
            return Ok(());
        };
        let target = self.leaves.get(*leaf).ok_or("leaf out of range")?.target;
        let ch = self.ch.clone();
        let t = self.targets.get_mut(target).ok_or("target out of range")?;
        t.insert(&ch).await?;
        let rows = t.rows_before + t.rows;
        let Some(keeper) = self.progress.as_mut() else {
            return Ok(());
        };
        let Some(entry) = keeper.doc.tables.get_mut(target) else {
            return Ok(());
        };
        entry
            .done
            .insert((locator.spc_oid, locator.rel_number, segno));
        entry.rows = rows;
        keeper
            .doc
            .write(&keeper.dir)
            .map_err(|e| format!("recording the pass's progress: {e}"))?;
        walshadow_failpoints::crash(walshadow_failpoints::BACKUP_WALK_AFTER_SEGMENT_DONE);
        Ok(())
    }
}

impl PageConsumer for Walker {
    fn page(
        &mut self,
        page: WalkedPage<'_>,
    ) -> impl std::future::Future<Output = Result<(), SinkError>> + Send {
        let taken = self.take_walked(&page);
        async move {
            taken?;
            self.flush_full().await
        }
    }

    fn file_begin(&mut self, _locator: RelFileLocator, _segno: u32) {
        self.deferred_at_file = self.deferred;
    }

    fn file_end(
        &mut self,
        locator: RelFileLocator,
        segno: u32,
        pages: u64,
    ) -> impl std::future::Future<Output = Result<(), SinkError>> + Send {
        let whole = self.progress.is_some()
            && pages >= RESUME_MIN_PAGES
            && self.deferred == self.deferred_at_file;
        async move {
            if whole {
                self.segment_done(locator, segno).await?;
            }
            Ok(())
        }
    }

    fn slru_segment(&mut self, kind: SlruKind, segno: u64, data: &[u8]) -> Result<(), SinkError> {
        let gate = self.gate.as_mut().ok_or("the walk's gate is gone")?;
        let bytes = bytes::Bytes::copy_from_slice(data);
        match kind {
            SlruKind::Xact => gate.xact_mut().add_segment(segno, bytes)?,
            SlruKind::MultiXactOffsets => gate.multi_mut().add_offsets_segment(segno, bytes)?,
            SlruKind::MultiXactMembers => gate.multi_mut().add_members_segment(segno, bytes)?,
        }
        Ok(())
    }
}

/// The per-pass TOAST store as the row decoder's source; a store error is
/// kept for the caller (never read as a missing value).
struct PassToast<'a> {
    store: &'a ChunkMirror,
    error: std::cell::RefCell<Option<MirrorError>>,
}

impl ToastSource for PassToast<'_> {
    fn fetch(&self, toast_relid: Oid, value_id: Oid) -> Option<Vec<u8>> {
        match self.store.fetch(toast_relid, value_id) {
            Ok(v) => v,
            Err(e) => {
                *self.error.borrow_mut() = Some(e);
                None
            }
        }
    }
}

/// `desc` (table `t`'s, or one of its partitions') with `t`'s column rules
/// applied; rules the stream refuses fail the load the same way.
fn masked(t: &PassTable, desc: RelationDesc) -> Result<RelationDesc, AttemptError> {
    let m = t.columns.apply(desc);
    match m.refused {
        Some(why) => Err(AttemptError::Failed(why)),
        None => Ok(m.desc),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use walshadow_emitter::{ClickHouseError, FlushError};

    fn gave_up(source: ClickHouseError) -> SinkError {
        Box::new(FlushError::GaveUp {
            table: "t".into(),
            attempts: 30,
            elapsed: Duration::from_secs(600),
            source,
        })
    }

    #[test]
    fn which_catalog_writers_skew_a_table() {
        let (start, s) = (Lsn(0x0300_0000), Lsn(0x0500_0000));
        let inside = Lsn(0x0400_0000);
        let skews = |row, xmin, at, next| writer_skews(row, xmin, at, start, s, next);
        // A column changed in the gap, whenever its transaction began.
        assert!(skews(CatalogRow::Attribute, 900, inside, Some(800)));
        assert!(skews(CatalogRow::Attribute, 700, inside, Some(800)));
        // Outside (start, s]: the backup has it, or the stream does.
        assert!(!skews(CatalogRow::Attribute, 900, start, Some(800)));
        assert!(!skews(
            CatalogRow::Attribute,
            900,
            Lsn(0x0500_0001),
            Some(800)
        ));
        // pg_class alone: only a transaction running at the start.
        assert!(!skews(CatalogRow::Class, 900, inside, Some(800)));
        assert!(skews(CatalogRow::Class, 700, inside, Some(800)));
        assert!(skews(CatalogRow::Class, 900, inside, None));
        // Around the wrap of 32-bit xids.
        assert!(skews(CatalogRow::Class, u32::MAX - 5, inside, Some(10)));
        assert!(!skews(CatalogRow::Class, 20, inside, Some(10)));
    }

    #[test]
    fn an_environment_that_refuses_for_now_waits() {
        let down = ClickHouseError::Connection {
            endpoint: "http://ch".into(),
            context: "INSERT".into(),
            message: "connection refused".into(),
        };
        assert!(sink_waits(gave_up(down).as_ref()));
        let refused = FlushError::Definite {
            table: "t".into(),
            source: ClickHouseError::Server {
                context: "INSERT".into(),
                status: 400,
                code: Some(53),
                message: "TYPE_MISMATCH".into(),
            },
        };
        assert!(!sink_waits(&refused));
        let other: SinkError = "a torn page".into();
        assert!(!sink_waits(other.as_ref()));
        let lost = ReplicationError::ConnectionClosed {
            context: String::new(),
        };
        assert!(matches!(
            source_failed("BASE_BACKUP")(lost),
            AttemptError::Waiting(_)
        ));
        let sink = ReplicationError::Sink {
            archive: "base".into(),
            path: None,
            source: gave_up(ClickHouseError::Timeout {
                endpoint: "http://ch".into(),
                context: "INSERT".into(),
                after: Duration::from_secs(1),
            }),
        };
        assert!(matches!(
            source_failed("BASE_BACKUP")(sink),
            AttemptError::Waiting(_)
        ));
    }
}
