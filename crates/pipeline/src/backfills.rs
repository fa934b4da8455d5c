//! The initial loads the stream starts: requests at an opt-in's `S`,
//! recorded in the ledger before anything else can depend on them, started
//! once the stream has decoded `S`, each on its own task, connections and
//! ClickHouse insert path (the stream never waits for a load), cancelled on
//! opt-out, resumed from the ledger after a restart.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;
use walshadow_backfill::copy::{CopyLoad, LoadError, LoadSummary};
use walshadow_backfill::ledger::{Ledger, LedgerError, Pass};
use walshadow_backfill::snapshot::RecentCommits;
use walshadow_config::BackfillConfig;
use walshadow_emitter::{ClickHouseClient, MetaColumns};
use walshadow_types::Lsn;
use walshadow_wal_reader::replication::ConnConfig;

/// Environment variable of the test hook that pauses a load after its
/// snapshot (a folder; see `CopyLoad::pause_dir`).
pub const PAUSE_ENV: &str = "WALSHADOW_TEST_PAUSE_AFTER_SNAPSHOT";

type LoadTask = JoinHandle<Result<LoadSummary, LoadError>>;

/// The stream's loads.
#[derive(Debug)]
pub struct Backfills {
    ledger: Arc<Mutex<Ledger>>,
    running: HashMap<String, LoadTask>,
    /// Open entries not started yet.
    queued: BTreeSet<String>,
    recent: Arc<RecentCommits>,
    config: BackfillConfig,
    source: ConnConfig,
    ch: ClickHouseClient,
    database: String,
    meta: MetaColumns,
    state_dir: PathBuf,
}

impl Backfills {
    /// Reads the ledger; every open entry is queued again (resumed from its
    /// marks when it starts).
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        state_dir: PathBuf,
        config: BackfillConfig,
        source: &ConnConfig,
        ch: ClickHouseClient,
        database: String,
        meta: MetaColumns,
    ) -> Result<Backfills, LedgerError> {
        let ledger = Ledger::read(&state_dir)?;
        let queued: BTreeSet<String> = ledger
            .tables
            .iter()
            .filter(|(_, p)| p.is_open())
            .map(|(k, _)| k.clone())
            .collect();
        for key in &queued {
            tracing::info!(table = %key, "initial load pending from an earlier run: it goes on");
        }
        let mut source = source.clone();
        source.physical = false;
        source.application_name = Some("walshadow load".into());
        Ok(Backfills {
            ledger: Arc::new(Mutex::new(ledger)),
            running: HashMap::new(),
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
        if let Some(p) = ledger.tables.get(key)
            && p.is_open()
            && p.s == s
        {
            return Ok(());
        }
        ledger.tables.insert(key.to_owned(), Pass::new(mode, s));
        ledger.write(&self.state_dir)?;
        drop(ledger);
        if let Some(t) = self.running.remove(key) {
            t.abort();
        }
        self.queued.insert(key.to_owned());
        tracing::info!(table = %key, mode, s = %s, "initial load requested");
        Ok(())
    }

    /// The table was opted out: its load stops and its entry goes.
    pub fn withdraw(&mut self, key: &str) -> Result<(), LedgerError> {
        if let Some(t) = self.running.remove(key) {
            t.abort();
            tracing::info!(table = %key, "initial load cancelled: the table was opted out");
        }
        self.queued.remove(key);
        let mut ledger = self.lock();
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
        !self.queued.is_empty()
    }

    /// Starts the queued loads whose `S` the stream has decoded; `dest`
    /// names a table's ClickHouse table (`None`: not streamable, e.g.
    /// stopped: the load waits).
    pub fn start_due(&mut self, decoded: Lsn, dest: impl Fn(&str) -> Option<String>) {
        let keys: Vec<String> = self.queued.iter().cloned().collect();
        for key in keys {
            let Some(pass) = self.lock().tables.get(&key).cloned() else {
                self.queued.remove(&key);
                continue;
            };
            if pass.s > decoded {
                continue;
            }
            let Some(dest_name) = dest(&key) else {
                continue;
            };
            if pass.mode != "copy" {
                tracing::warn!(table = %key, mode = %pass.mode, "initial load mode not available in this release; the table streams from its opt-in only");
                self.queued.remove(&key);
                continue;
            }
            self.queued.remove(&key);
            let load = CopyLoad {
                key: key.clone(),
                s: pass.s,
                source: self.source.clone(),
                ch: self.ch.clone(),
                dest_name,
                database: self.database.clone(),
                meta: self.meta.clone(),
                workers: self.config.workers,
                max_attempts: self.config.max_attempts,
                batch_rows: self.config.batch_rows,
                chunk_blocks: self.config.chunk_blocks,
                state_dir: self.state_dir.clone(),
                ledger: Arc::clone(&self.ledger),
                recent: Arc::clone(&self.recent),
                pause_dir: std::env::var_os(PAUSE_ENV).map(PathBuf::from),
            };
            tracing::info!(table = %key, s = %pass.s, workers = self.config.workers, "initial load (copy) starting");
            self.running.insert(key, tokio::spawn(load.run()));
        }
    }

    /// Forgets finished loads (their outcome is in the ledger and the log).
    pub fn reap(&mut self) {
        let done: Vec<String> = self
            .running
            .iter()
            .filter(|(_, t)| t.is_finished())
            .map(|(k, _)| k.clone())
            .collect();
        for key in done {
            if let Some(t) = self.running.remove(&key)
                && let Some(Ok(Err(e))) = futures_now(t)
            {
                tracing::error!(table = %key, "{e}");
            }
        }
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
    }

    /// Open entries by mode.
    pub fn pending_by_mode(&self) -> std::collections::BTreeMap<String, u64> {
        self.lock().pending_by_mode()
    }

    /// Stops every load (walshadow is stopping); their marks are in the
    /// ledger.
    pub fn abort_all(&mut self) {
        for (_, t) in self.running.drain() {
            t.abort();
        }
    }
}

/// The result of a finished task, without waiting.
fn futures_now(
    t: LoadTask,
) -> Option<Result<Result<LoadSummary, LoadError>, tokio::task::JoinError>> {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let mut t = t;
    let mut cx = Context::from_waker(Waker::noop());
    match std::pin::Pin::new(&mut t).poll(&mut cx) {
        Poll::Ready(r) => Some(r),
        Poll::Pending => None,
    }
}
