//! The initial loads the stream starts: requests at an opt-in's `S`,
//! recorded in the ledger before anything else can depend on them, started
//! once the stream has decoded `S`, each on its own task, connections and
//! ClickHouse insert path (the stream never waits for a load), cancelled on
//! opt-out, resumed from the ledger after a restart.
//!
//! `copy` loads run one task per table. `base_backup` and `object_store`
//! requests that are due wait [`COALESCE_WINDOW`] for siblings, then one
//! pass (one backup) loads them all; one pass of each mode runs at a time
//! (an `object_store` pass waiting for the archive holds up no
//! `base_backup`). An opt-out does not stop a
//! pass (it loads other tables too): the pass drops that table's staging
//! instead of publishing it. An entry recorded as swapped (its staging
//! table may already be exchanged) is never loaded again nor dropped: its
//! swap is recovered, at start or once its pass gave up on it.
//!
//! `bootstrap` entries load the tables `init --bootstrap` selected from the
//! backup it landed in `<state>/bootstrap/` (an `object_store` pass over
//! that landed backup); they are recorded at the first start, at the
//! backup's end, and the landed files are removed once none is open.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use std::time::Instant;

use tokio::task::JoinHandle;
use walshadow_backfill::backup::{
    BackupPass, COALESCE_WINDOW, Origin, PassError, PassSummary, PassTable, StoreOrigin,
    ToastHandoff,
};
use walshadow_backfill::copy::{CopyLoad, LoadError, LoadSummary};
use walshadow_backfill::ledger::{Ledger, LedgerError, NextLoad, Pass};
use walshadow_backfill::snapshot::RecentCommits;
use walshadow_backfill::staging::{DestLocks, StagingTable, SwapMark};
use walshadow_backup_store::BackupStore;
use walshadow_config::{BackfillConfig, BackupCheckpoint, BackupConfig};
use walshadow_emitter::{ClickHouseClient, ColumnRules, MetaColumns};
use walshadow_types::Lsn;
use walshadow_wal_reader::replication::ConnConfig;

type LoadTask = JoinHandle<Result<LoadSummary, LoadError>>;
type PassTask = JoinHandle<Result<PassSummary, PassError>>;

/// How long [`Backfills::cancel`] lets a load end by itself (its workers
/// finish the insert they are in) before it aborts what is left.
const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// The modes of backup loads (one pass loads all the tables due in one).
pub const BASE_BACKUP: &str = "base_backup";
pub const OBJECT_STORE: &str = "object_store";
/// `init --bootstrap`'s loads (not an `initial_load` value).
pub const BOOTSTRAP: &str = "bootstrap";

/// The stream's loads.
#[derive(Debug)]
pub struct Backfills {
    /// The runtime the loads run on: the one [`Backfills::open`] ran in
    /// (the daemon's), not the stream's own thread.
    tasks: tokio::runtime::Handle,
    ledger: Arc<Mutex<Ledger>>,
    running: HashMap<String, LoadTask>,
    /// Each running `copy` load's cancel flag ([`CopyLoad::cancelled`]).
    cancels: HashMap<String, Arc<std::sync::atomic::AtomicBool>>,
    /// `copy` loads a newer request of their table replaced, ending (their
    /// workers stop at their next chunk or insert): the newer load starts
    /// once they have, so no row of the older snapshot lands after its
    /// purge; past [`CANCEL_GRACE`] they are aborted.
    draining: HashMap<String, (LoadTask, std::time::Instant)>,
    /// Open entries not started yet.
    queued: BTreeSet<String>,
    recent: Arc<RecentCommits>,
    config: BackfillConfig,
    source: ConnConfig,
    replication: ConnConfig,
    ch: ClickHouseClient,
    database: String,
    meta: MetaColumns,
    state_dir: PathBuf,
    spill_dir: PathBuf,
    spool_memory_bytes: usize,
    toast_cache_mb: usize,
    /// The running backup passes by mode (`base_backup`, `object_store`:
    /// one of each, so that a pass waiting for the archive holds up no
    /// `base_backup`), with their tables.
    passes: BTreeMap<String, (Vec<String>, PassTask)>,
    /// When the first request of each mode became due.
    due_since: BTreeMap<String, Instant>,
    /// Swapped entries whose swap is being recovered.
    recovering: HashMap<String, JoinHandle<()>>,
    /// Tables whose entry carries a load to request once its swap is done
    /// (`Pass::then`).
    following: BTreeSet<String>,
    /// Walked TOAST chunks of finished passes, for the chunk mirror.
    toast_handoffs: Vec<ToastHandoff>,
    dest_locks: DestLocks,
    /// `object_store` loads' store (opened once) and shadow session.
    store: Option<(Arc<BackupStore>, StoreResources)>,
    /// The backup `init --bootstrap` landed, while a `bootstrap` entry is
    /// open.
    landed: Option<Arc<BackupStore>>,
    /// A SQL session on the shadow, for `bootstrap` loads.
    shadow: ConnConfig,
    /// Tables whose load from `init --bootstrap`'s backup ended without
    /// them (set aside, attempts used up, the backup gone): each loads by
    /// `copy` at the next decoded position instead. The table has streamed
    /// since the backup's end, so that load is all it lacks.
    fallback: BTreeSet<String>,
    column_rules: HashMap<String, ColumnRules>,
}

/// What `object_store` loads read: the `[backup]` store, and the shadow
/// for the tables' relations and descriptors (the source is asked nothing
/// but who it is, over replication).
#[derive(Debug, Clone)]
pub struct StoreResources {
    pub settings: BackupConfig,
    /// A SQL session on the shadow, in the streamed database.
    pub shadow: ConnConfig,
}

/// Where a load's scratch files and memory come from.
#[derive(Debug, Clone)]
pub struct LoadResources {
    /// `None`: no `[backup]` section, no `object_store` loads.
    pub store: Option<StoreResources>,
    pub spill_dir: PathBuf,
    /// Deferred tuples of a backup pass held in memory before spilling.
    pub spool_memory_bytes: usize,
    pub toast_cache_mb: usize,
    /// The stream's per-table write locks (see [`DestLocks`]).
    pub dest_locks: DestLocks,
    /// Tables' column rules, which loads apply as the stream does.
    pub column_rules: HashMap<String, ColumnRules>,
    /// A SQL session on the shadow, in the streamed database.
    pub shadow: ConnConfig,
}

impl Backfills {
    /// The ClickHouse client of loads started from now on (a reloaded
    /// config); loads under way keep theirs.
    pub fn set_client(&mut self, ch: ClickHouseClient) {
        self.ch = ch;
    }

    /// Reads the ledger; every open entry is queued again (resumed from its
    /// marks when it starts).
    pub fn open(
        state_dir: PathBuf,
        config: BackfillConfig,
        source: &ConnConfig,
        ch: ClickHouseClient,
        database: String,
        meta: MetaColumns,
        resources: LoadResources,
    ) -> Result<Backfills, LedgerError> {
        let mut ledger = Ledger::read(&state_dir)?;
        let landed = open_landed(&state_dir, &mut ledger)?;
        let queued: BTreeSet<String> = ledger
            .tables
            .iter()
            .filter(|(_, p)| p.is_open())
            .map(|(k, _)| k.clone())
            .collect();
        for key in &queued {
            tracing::info!(table = %key, "initial load pending from an earlier run: it goes on");
        }
        let following: BTreeSet<String> = ledger
            .tables
            .iter()
            .filter(|(_, p)| p.then.is_some())
            .map(|(k, _)| k.clone())
            .collect();
        remove_scratch(&resources.spill_dir);
        let store = match resources.store {
            Some(r) => match crate::backup_admin::open(&r.settings) {
                Ok(store) => Some((Arc::new(store), r)),
                Err(e) => {
                    tracing::error!(
                        "the [backup] store cannot be opened ({e}): object_store loads wait for a restart with it fixed"
                    );
                    None
                }
            },
            None => None,
        };
        let mut replication = source.clone();
        replication.physical = true;
        replication.application_name = Some("walshadow base_backup".into());
        let mut source = source.clone();
        source.physical = false;
        source.application_name = Some("walshadow load".into());
        Ok(Backfills {
            tasks: tokio::runtime::Handle::current(),
            replication,
            spill_dir: resources.spill_dir,
            spool_memory_bytes: resources.spool_memory_bytes,
            toast_cache_mb: resources.toast_cache_mb,
            passes: BTreeMap::new(),
            due_since: BTreeMap::new(),
            recovering: HashMap::new(),
            following,
            toast_handoffs: Vec::new(),
            dest_locks: resources.dest_locks,
            column_rules: resources.column_rules,
            shadow: resources.shadow,
            fallback: BTreeSet::new(),
            landed,
            store,
            ledger: Arc::new(Mutex::new(ledger)),
            running: HashMap::new(),
            cancels: HashMap::new(),
            draining: HashMap::new(),
            queued,
            recent: Arc::new(RecentCommits::default()),
            config,
            source,
            ch,
            database,
            meta,
            state_dir,
        })
    }

    pub fn recent(&self) -> &RecentCommits {
        &self.recent
    }

    /// A load of `key` at `s` in `mode`. A request for a table with an open
    /// entry at the same `s` collapses into it; an older entry is replaced.
    /// Written to the ledger before returning.
    pub fn request(&mut self, key: &str, mode: &str, s: Lsn) -> Result<(), LedgerError> {
        let mut ledger = self.lock();
        if let Some(p) = ledger.tables.get_mut(key)
            && p.is_open()
            && (p.s == s || p.swap.is_some())
        {
            if p.s != s {
                // The swap must finish (its staging name may hold the only
                // copy of live rows); the new load follows it, durably.
                p.then = Some(NextLoad {
                    mode: mode.to_owned(),
                    s,
                });
                ledger.write(&self.state_dir)?;
                drop(ledger);
                self.following.insert(key.to_owned());
                tracing::info!(table = %key, mode, s = %s, "initial load requested; it starts once the staging swap of the earlier one is done");
            }
            return Ok(());
        }
        ledger.tables.insert(key.to_owned(), Pass::new(mode, s));
        ledger.write(&self.state_dir)?;
        drop(ledger);
        if let Some(t) = self.stop_running(key) {
            self.draining
                .insert(key.to_owned(), (t, std::time::Instant::now()));
        }
        self.queued.insert(key.to_owned());
        tracing::info!(table = %key, mode, s = %s, "initial load requested");
        Ok(())
    }

    /// Ends `key`'s running `copy` load and waits until it has ended,
    /// its workers with it: nothing of it inserts after this returns. A
    /// worker inside an insert finishes it (ClickHouse has answered, or it
    /// is aborted past [`CANCEL_GRACE`], when ClickHouse has long had the
    /// request: a `DROP … SYNC` after this waits for it).
    pub async fn cancel(&mut self, key: &str) {
        if let Some(mut t) = self.stop_running(key) {
            if tokio::time::timeout(CANCEL_GRACE, &mut t).await.is_err() {
                t.abort();
                let _ = t.await;
            }
            tracing::info!(table = %key, "initial load cancelled: a new one starts over");
        }
    }

    /// Takes `key`'s running `copy` load out, its cancel flag set.
    fn stop_running(&mut self, key: &str) -> Option<LoadTask> {
        if let Some(flag) = self.cancels.remove(key) {
            flag.store(true, std::sync::atomic::Ordering::Release);
        }
        self.running.remove(key)
    }

    /// The table was opted out: its load stops and its entry goes. A
    /// backup pass goes on for its other tables and drops this one's
    /// staging table; a swapped entry stays until its swap is recovered
    /// (the staging name may hold the only copy of live rows).
    pub fn withdraw(&mut self, key: &str) -> Result<(), LedgerError> {
        self.fallback.remove(key);
        let mut ledger = self.lock();
        if let Some(p) = ledger.tables.get_mut(key)
            && p.swap.is_some()
        {
            tracing::warn!(table = %key, "opted out while its staging swap is under way: the swap finishes first");
            if p.then.take().is_some() {
                ledger.write(&self.state_dir)?;
            }
            drop(ledger);
            self.following.remove(key);
            return Ok(());
        }
        drop(ledger);
        if let Some(t) = self.stop_running(key) {
            t.abort();
            tracing::info!(table = %key, "initial load cancelled: the table was opted out");
        }
        if let Some(mode) = self
            .passes
            .iter()
            .find(|(_, (keys, _))| keys.iter().any(|k| k == key))
            .map(|(m, _)| m)
        {
            tracing::info!(table = %key, "opted out during a {mode} pass: its staging table is dropped when the pass ends");
        }
        self.queued.remove(key);
        ledger = self.lock();
        if ledger.tables.get(key).is_some_and(|p| p.is_open()) {
            ledger.tables.remove(key);
            ledger.write(&self.state_dir)?;
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        // A panicking load task cannot leave the ledger half-changed: it is
        // only ever replaced whole.
        match self.ledger.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    pub fn has_queued(&self) -> bool {
        !self.queued.is_empty() || !self.fallback.is_empty()
    }

    /// Loads queued, or waiting behind a swap (checked once per tick).
    pub fn has_work(&self) -> bool {
        !self.queued.is_empty() || !self.following.is_empty() || !self.fallback.is_empty()
    }

    /// The tables whose load from `init --bootstrap`'s backup is open.
    pub fn bootstrap_keys(&self) -> Vec<String> {
        self.lock()
            .tables
            .iter()
            .filter(|(_, p)| p.is_open() && p.mode == BOOTSTRAP)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Whether `key` has ever had a load (any phase).
    pub fn has_entry(&self, key: &str) -> bool {
        self.lock().tables.contains_key(key)
    }

    /// Whether `key` has a staging table that may be loading or swapping
    /// (its destination's TRUNCATE must empty staging too).
    pub fn has_staging(&self, key: &str) -> bool {
        self.lock().tables.get(key).is_some_and(|p| {
            p.is_open() && (p.mode == BASE_BACKUP || p.mode == OBJECT_STORE || p.mode == BOOTSTRAP)
        })
    }

    /// Requests the loads that waited behind a swap now done.
    fn follow_swaps(&mut self) {
        let keys: Vec<String> = self.following.iter().cloned().collect();
        for key in keys {
            let entry = self.lock().tables.get(&key).cloned();
            let next = match entry {
                // Done, or failed for good: the newer opt-in takes over.
                Some(p) if p.is_open() && p.then.is_some() => continue,
                Some(p) => p.then,
                None => None,
            };
            self.following.remove(&key);
            let Some(load) = next else { continue };
            if let Err(e) = self.request(&key, &load.mode, load.s) {
                self.following.insert(key.clone());
                tracing::error!(table = %key, "recording the initial load that followed a swap: {e}; retrying");
            }
        }
    }

    /// Starts the queued loads whose `S` the stream has decoded; `dest`
    /// names a table's ClickHouse table (`None`: not streamable, e.g.
    /// stopped: the load waits).
    pub fn start_due(&mut self, decoded: Lsn, dest: impl Fn(&str) -> Option<String>) {
        self.follow_swaps();
        for key in std::mem::take(&mut self.fallback) {
            // Still the bootstrap's, untouched since the pass ended.
            let still = self
                .lock()
                .tables
                .get(&key)
                .is_some_and(|p| p.is_open() && p.mode == BOOTSTRAP && p.swap.is_none());
            if !still {
                continue;
            }
            tracing::warn!(table = %key, s = %decoded, "the load from init --bootstrap's backup did not load the table (see the log and status): it loads by copy as of here instead");
            if let Err(e) = self.request(&key, "copy", decoded) {
                tracing::error!(table = %key, "requesting its copy load: {e}; `walshadow table resync` of the table loads it");
                continue;
            }
            // What the pass staged for it is of no use to the copy.
            if let Some(dest_name) = dest(&key) {
                let staging = StagingTable::new(
                    self.ch.clone(),
                    self.database.clone(),
                    dest_name,
                    decoded,
                    &self.meta,
                );
                self.tasks.spawn(async move {
                    if let Err(e) = staging
                        .discard(
                            "its table loads by copy instead of from init --bootstrap's backup",
                        )
                        .await
                    {
                        tracing::warn!(table = %key, "dropping the staging table: {e}");
                    }
                });
            }
        }
        let keys: Vec<String> = self.queued.iter().cloned().collect();
        let mut backups = Vec::new();
        for key in keys {
            let Some(pass) = self.lock().tables.get(&key).cloned() else {
                self.queued.remove(&key);
                continue;
            };
            let Some(dest_name) = dest(&key) else {
                continue;
            };
            if let Some(swap) = &pass.swap {
                self.queued.remove(&key);
                self.recover(key, pass.s, dest_name, swap.staging_uuid.clone());
                continue;
            }
            if pass.s > decoded {
                continue;
            }
            if let Some((t, since)) = self.draining.get(&key) {
                if !t.is_finished() && since.elapsed() < CANCEL_GRACE {
                    continue;
                }
                if let Some((t, _)) = self.draining.remove(&key)
                    && !t.is_finished()
                {
                    tracing::warn!(table = %key, "the replaced load did not end within {CANCEL_GRACE:?}: aborted");
                    t.abort();
                }
            }
            match pass.mode.as_str() {
                "copy" => {
                    self.queued.remove(&key);
                    self.start_copy(key, pass.s, dest_name);
                }
                BASE_BACKUP | OBJECT_STORE | BOOTSTRAP => backups.push((
                    pass.mode.clone(),
                    PassTable {
                        columns: self.column_rules.get(&key).cloned().unwrap_or_default(),
                        key,
                        s: pass.s,
                        dest_name,
                    },
                )),
                other => {
                    tracing::warn!(table = %key, mode = %other, "initial load mode not available in this release; the table streams from its opt-in only");
                    self.queued.remove(&key);
                }
            }
        }
        let modes: BTreeSet<String> = backups.iter().map(|(m, _)| m.clone()).collect();
        self.due_since.retain(|m, _| modes.contains(m));
        // One pass per mode at a time, with every due table of that mode.
        for mode in modes {
            if self.passes.contains_key(&mode) {
                continue;
            }
            let since = *self
                .due_since
                .entry(mode.clone())
                .or_insert_with(Instant::now);
            if since.elapsed() < COALESCE_WINDOW {
                continue;
            }
            self.due_since.remove(&mode);
            let tables: Vec<PassTable> = backups
                .iter()
                .filter(|(m, _)| *m == mode)
                .map(|(_, t)| t.clone())
                .collect();
            self.start_pass(mode, tables);
        }
    }

    /// Starts a backup pass of `mode` over `tables`.
    fn start_pass(&mut self, mode: String, tables: Vec<PassTable>) {
        let (catalog, origin) = if mode == BOOTSTRAP {
            let Some(landed) = &self.landed else {
                for t in &tables {
                    self.queued.remove(&t.key);
                    self.fallback.insert(t.key.clone());
                }
                return;
            };
            let backup = match landed.as_ref() {
                BackupStore::Landed(l) => l.manifest().label.clone(),
                _ => String::new(),
            };
            let mut replication = self.replication.clone();
            replication.application_name = Some("walshadow bootstrap".into());
            (
                self.shadow.clone(),
                Origin::Store(StoreOrigin {
                    store: Arc::clone(landed),
                    backup,
                    replication,
                    parallelism: 1,
                    bootstrap: Some(Box::new(self.source.clone())),
                }),
            )
        } else if mode == OBJECT_STORE {
            let Some((store, r)) = &self.store else {
                self.refuse_without_store(&tables);
                return;
            };
            let mut replication = self.replication.clone();
            replication.application_name = Some("walshadow object_store".into());
            (
                r.shadow.clone(),
                Origin::Store(StoreOrigin {
                    store: Arc::clone(store),
                    backup: r.settings.backup.clone(),
                    replication,
                    parallelism: r.settings.parallelism,
                    bootstrap: None,
                }),
            )
        } else {
            (
                self.source.clone(),
                Origin::Stream {
                    replication: self.replication.clone(),
                    max_rate_kb: (self.config.backup_max_rate_kb != 0)
                        .then_some(self.config.backup_max_rate_kb),
                    checkpoint: match self.config.backup_checkpoint {
                        BackupCheckpoint::Spread => {
                            walshadow_wal_reader::replication::Checkpoint::Spread
                        }
                        BackupCheckpoint::Fast => {
                            walshadow_wal_reader::replication::Checkpoint::Fast
                        }
                    },
                },
            )
        };
        for t in &tables {
            self.queued.remove(&t.key);
        }
        let keys: Vec<String> = tables.iter().map(|t| t.key.clone()).collect();
        let pass = BackupPass {
            tables,
            catalog,
            origin,
            ch: self.ch.clone(),
            database: self.database.clone(),
            meta: self.meta.clone(),
            max_attempts: self.config.max_attempts,
            batch_rows: self.config.batch_rows,
            spill_dir: self.spill_dir.clone(),
            spool_memory_bytes: self.spool_memory_bytes,
            toast_cache_mb: self.toast_cache_mb,
            state_dir: self.state_dir.clone(),
            ledger: Arc::clone(&self.ledger),
            dest_locks: self.dest_locks.clone(),
            set_aside: Default::default(),
            recent: Arc::clone(&self.recent),
        };
        tracing::info!(tables = %keys.join(", "), "initial load ({mode}) starting: one backup for these tables");
        self.passes
            .insert(mode, (keys, self.tasks.spawn(pass.run())));
    }

    /// `object_store` loads without a `[backup]` store: each entry stays
    /// pending with the remedy (status shows it); a restart with the
    /// section (or another mode) runs it.
    fn refuse_without_store(&mut self, tables: &[PassTable]) {
        self.refuse(
            tables,
            "initial_load = 'object_store' reads the backup store the [backup] section \
             names, and the config has none (or it did not open: see the log); remedy: \
             add [backup] and restart walshadow, or set initial_load to 'copy' or \
             'base_backup'",
        );
    }

    /// Loads that cannot start: each entry stays pending with `why`
    /// (status shows it) until a restart or a new opt-in.
    fn refuse(&mut self, tables: &[PassTable], why: &str) {
        let mut ledger = self.lock();
        for t in tables {
            if let Some(p) = ledger.tables.get_mut(&t.key) {
                p.error = Some(why.to_owned());
            }
            tracing::error!(table = %t.key, "initial load cannot start: {why}");
        }
        if let Err(e) = ledger.write(&self.state_dir) {
            tracing::warn!("recording a load that cannot start in the ledger: {e}");
        }
        drop(ledger);
        for t in tables {
            self.queued.remove(&t.key);
        }
    }

    /// The tables' column rules from now on (loads started later apply
    /// them).
    pub fn set_column_rules(&mut self, rules: HashMap<String, ColumnRules>) {
        self.column_rules = rules;
    }

    fn start_copy(&mut self, key: String, s: Lsn, dest_name: String) {
        let cancelled = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let load = CopyLoad {
            columns: self.column_rules.get(&key).cloned().unwrap_or_default(),
            key: key.clone(),
            s,
            source: self.source.clone(),
            ch: self.ch.clone(),
            dest_name,
            database: self.database.clone(),
            meta: self.meta.clone(),
            dest_locks: self.dest_locks.clone(),
            workers: self.config.workers,
            max_attempts: self.config.max_attempts,
            batch_rows: self.config.batch_rows,
            chunk_blocks: self.config.chunk_blocks,
            state_dir: self.state_dir.clone(),
            ledger: Arc::clone(&self.ledger),
            recent: Arc::clone(&self.recent),
            cancelled: Arc::clone(&cancelled),
        };
        tracing::info!(table = %key, s = %s, workers = self.config.workers, "initial load (copy) starting");
        self.cancels.insert(key.clone(), cancelled);
        self.running.insert(key, self.tasks.spawn(load.run()));
    }

    /// Finishes the staging swap of an entry recorded as swapped: the
    /// staging table's uuid tells which steps are owed. Retried until it
    /// succeeds (the only copy of live-window rows may be in staging).
    fn recover(&mut self, key: String, s: Lsn, dest_name: String, uuid: String) {
        if self.recovering.get(&key).is_some_and(|t| !t.is_finished()) {
            return;
        }
        let locks = self.dest_locks.clone();
        let staging = StagingTable::new(
            self.ch.clone(),
            self.database.clone(),
            dest_name.clone(),
            s,
            &self.meta,
        )
        .with_insert_timeout(std::time::Duration::ZERO);
        let ledger = Arc::clone(&self.ledger);
        let state_dir = self.state_dir.clone();
        let task_key = key.clone();
        let task = self.tasks.spawn(async move {
            let key = task_key;
            let mut mark = |m: &SwapMark| -> Result<(), LedgerError> {
                let mut l = match ledger.lock() {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
                if let Some(p) = l.tables.get_mut(&key) {
                    m.apply(p);
                }
                l.write(&state_dir)
            };
            let mut backoff = walshadow_types::Backoff::new(
                std::time::Duration::from_secs(1),
                std::time::Duration::from_secs(60),
            );
            loop {
                // Inserts of the process that crashed are replayed from its
                // progress; this one's wait on the lock: no copy-back wait.
                let guard = locks.lock(&dest_name).await;
                let r = staging.recover(&uuid, &mut mark).await;
                drop(guard);
                match r {
                    Ok(r) => {
                        tracing::info!(table = %key, found = ?r.found, outcome = ?r.outcome, "initial load (base_backup): staging swap recovered");
                        return;
                    }
                    Err(e) => {
                        let delay = backoff.next_delay();
                        tracing::warn!(table = %key, "staging swap recovery failed, trying again in {delay:?}: {e}");
                        tokio::time::sleep(delay).await;
                    }
                }
            }
        });
        self.recovering.insert(key, task);
    }

    /// Forgets finished loads (their outcome is in the ledger and the log).
    pub fn reap(&mut self) {
        self.recovering.retain(|_, t| !t.is_finished());
        let finished: Vec<String> = self
            .passes
            .iter()
            .filter(|(_, (_, t))| t.is_finished())
            .map(|(m, _)| m.clone())
            .collect();
        let bootstrap_ended = finished.iter().any(|m| m == BOOTSTRAP);
        for mode in finished {
            let Some((keys, t)) = self.passes.remove(&mode) else {
                continue;
            };
            match futures_now(t) {
                Some(Ok(Err(e))) => tracing::error!(tables = %keys.join(", "), "{e}"),
                Some(Ok(Ok(summary))) => {
                    self.toast_handoffs.extend(summary.toast);
                    // A swap the pass could not finish is recovered now.
                    for (key, _, outcome) in summary.tables {
                        if matches!(
                            outcome,
                            walshadow_backfill::backup::TableOutcome::LeftSwapped { .. }
                        ) {
                            self.queued.insert(key);
                        }
                    }
                }
                Some(Err(e)) => {
                    tracing::error!(tables = %keys.join(", "), "initial load ({mode}) task ended abnormally ({e}); the entries stay pending and run again at the next start");
                }
                None => {}
            }
        }
        // A bootstrap pass that ended left its tables it did not load (no
        // swap under way) to a copy.
        if bootstrap_ended {
            let left: Vec<String> = self
                .lock()
                .tables
                .iter()
                .filter(|(k, p)| {
                    p.is_open()
                        && p.mode == BOOTSTRAP
                        && p.swap.is_none()
                        && !self.queued.contains(*k)
                })
                .map(|(k, _)| k.clone())
                .collect();
            self.fallback.extend(left);
        }
        // A bootstrap entry closes when its pass publishes it, or when the
        // swap a crash interrupted is recovered.
        self.drop_landed_when_done();
        let done: Vec<String> = self
            .running
            .iter()
            .filter(|(_, t)| t.is_finished())
            .map(|(k, _)| k.clone())
            .collect();
        for key in done {
            self.cancels.remove(&key);
            match self.running.remove(&key).and_then(futures_now) {
                Some(Ok(Err(e))) => tracing::error!(table = %key, "{e}"),
                Some(Err(e)) => {
                    tracing::error!(table = %key, "initial load task ended abnormally ({e}); the entry stays pending and runs again at the next start")
                }
                _ => {}
            }
        }
    }

    /// Walked TOAST chunks of published `base_backup` loads, for the
    /// chunk mirror (taken once).
    pub fn take_toast_handoffs(&mut self) -> Vec<ToastHandoff> {
        std::mem::take(&mut self.toast_handoffs)
    }

    /// Every entry of the ledger (a copy).
    pub fn passes(&self) -> Vec<(String, Pass)> {
        self.lock()
            .tables
            .iter()
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect()
    }

    pub fn running(&self) -> usize {
        self.running.len()
            + self
                .passes
                .values()
                .map(|(keys, _)| keys.len())
                .sum::<usize>()
            + self.recovering.len()
    }

    /// Open entries by mode.
    pub fn pending_by_mode(&self) -> std::collections::BTreeMap<String, u64> {
        self.lock().pending_by_mode()
    }

    /// Stops every load (walshadow is stopping); their marks are in the
    /// ledger.
    pub fn abort_all(&mut self) {
        self.cancels.clear();
        for (_, t) in self.running.drain() {
            t.abort();
        }
        for (_, (_, t)) in std::mem::take(&mut self.passes) {
            t.abort();
        }
        for (_, t) in self.recovering.drain() {
            t.abort();
        }
    }
}

impl Backfills {
    /// Removes the landed backup once no `bootstrap` entry is open (each
    /// loaded, withdrawn or replaced).
    fn drop_landed_when_done(&mut self) {
        if self.landed.is_none()
            || self
                .lock()
                .tables
                .values()
                .any(|p| p.is_open() && p.mode == BOOTSTRAP)
        {
            return;
        }
        self.landed = None;
        remove_landed(&self.state_dir);
    }
}

/// The backup `init --bootstrap` landed, with an entry recorded for each
/// table it holds that has none yet (the first start after `init`); `None`
/// when there is none, or when every entry is closed (then its files go).
fn open_landed(
    state_dir: &std::path::Path,
    ledger: &mut Ledger,
) -> Result<Option<Arc<BackupStore>>, LedgerError> {
    use walshadow_backup_store::landed::Landed;
    let dir = state_dir.join(walshadow_shadow::bootstrap::kept::DIR);
    let landed = match Landed::open(&dir) {
        Ok(l) => l,
        Err(walshadow_backup_store::StoreError::NotFound { .. }) => {
            // An init that stopped before its manifest: nothing to load.
            if dir.exists() {
                remove_landed(state_dir);
            }
            return Ok(None);
        }
        Err(e) => {
            tracing::error!(
                "the backup init --bootstrap landed cannot be read ({e}): its tables load by copy instead"
            );
            return Ok(None);
        }
    };
    let m = landed.manifest().clone();
    // Recorded once, at the first start: an entry withdrawn since (the
    // table opted out, or let go) stays withdrawn.
    let recorded = dir.join(ENTRIES_RECORDED);
    if !recorded.exists() {
        for key in &m.tables {
            if !ledger.tables.contains_key(key) {
                ledger
                    .tables
                    .insert(key.clone(), Pass::new(BOOTSTRAP, m.stop_lsn));
                tracing::info!(table = %key, s = %m.stop_lsn, backup = %m.label, "initial load from init --bootstrap's backup requested");
            }
        }
        ledger.write(state_dir)?;
        if let Err(e) = walshadow_state_file::write_durably(&dir, ENTRIES_RECORDED, b"") {
            tracing::warn!(
                "recording that the bootstrap's loads are in the ledger ({}): {e}",
                recorded.display()
            );
        }
    }
    if !ledger
        .tables
        .values()
        .any(|p| p.is_open() && p.mode == BOOTSTRAP)
    {
        remove_landed(state_dir);
        return Ok(None);
    }
    Ok(Some(Arc::new(BackupStore::Landed(landed))))
}

/// Beside the landed backup once its entries are in the ledger.
const ENTRIES_RECORDED: &str = "entries-recorded";

fn remove_landed(state_dir: &std::path::Path) {
    let dir = state_dir.join(walshadow_shadow::bootstrap::kept::DIR);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {
            tracing::info!(dir = %dir.display(), "init --bootstrap's backup is no longer needed: removed")
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("removing {}: {e}", dir.display()),
    }
}

/// Scratch files of backup passes of an earlier process (killed mid-pass,
/// or stopped before its walked TOAST chunks were copied).
fn remove_scratch(spill_dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(spill_dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let r = if name.starts_with("backup-pass-") {
            std::fs::remove_dir_all(e.path())
        } else if name.starts_with("backup-toast-") {
            std::fs::remove_file(e.path())
        } else {
            continue;
        };
        match r {
            Ok(()) => {
                tracing::info!(path = %e.path().display(), "removed scratch of an earlier base_backup pass")
            }
            Err(err) => {
                tracing::warn!(path = %e.path().display(), "removing scratch of an earlier base_backup pass: {err}")
            }
        }
    }
}

/// The result of a finished task, without waiting.
fn futures_now<T>(t: JoinHandle<T>) -> Option<Result<T, tokio::task::JoinError>> {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let mut t = t;
    let mut cx = Context::from_waker(Waker::noop());
    match std::pin::Pin::new(&mut t).poll(&mut cx) {
        Poll::Ready(r) => Some(r),
        Poll::Pending => None,
    }
}
