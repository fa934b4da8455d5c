//! Staging tables and the crash-safe swap: how a backup-mode load
//! (`base_backup`, `object_store`) reaches its ClickHouse table.
//!
//! A backup-mode pass never inserts into the destination. Its rows (tagged
//! `_lsn = S`) land in `<dest>__wsstg`, a structure clone of the
//! destination in the same database, rebuilt from scratch per attempt, while
//! the live stream keeps writing the destination. A failed pass therefore
//! leaves nothing visible for a retry to tombstone, and a re-opt-in replaces
//! stale rows wholesale. On success the pass publishes, per table:
//!
//! ```text
//!  prepare:  DROP TABLE IF EXISTS db.stg SYNC; CREATE TABLE db.stg AS db.dest
//!            … the pass loads db.stg; the stream writes db.dest (_lsn > S) …
//!  1 gate:      fingerprint(dest) == fingerprint(stg)?   no ─▶ drop stg, mark Discarded (pending)
//!  2 exchange:  uuid(stg) ─▶ mark Swapped{uuid} (ledger, durable) ─▶ EXCHANGE TABLES db.dest AND db.stg
//!  3 copy-back: wait the insert timeout after the exchange (zero when the
//!              caller holds the stream's inserts off across it), then
//!               INSERT INTO db.dest (cols) SELECT cols FROM db.stg WHERE _lsn > S
//!  4 finish:    DROP TABLE db.stg SYNC ─▶ mark Done
//! ```
//!
//! - The gate compares `system.columns` name and type by position (and the
//!   default kind, so a column that turned `MATERIALIZED` counts as a
//!   change): DDL applied mid-pass means the loaded copy has the old shape,
//!   so it is dropped and the entry stays pending for a fresh load.
//! - `Swapped` is persisted before the exchange: afterwards the staging name
//!   holds the only copy of the live-window rows, and an entry that looked
//!   pending would rebuild staging over them.
//! - An `EXCHANGE` is never sent twice on a guess: a timed-out one may have
//!   applied and a second would swap back. The staging name's uuid tells:
//!   unchanged ⇒ not applied, changed ⇒ applied, missing ⇒ dropped already.
//! - Copy-back: live inserts that resolved the destination name before the
//!   exchange write into the storage now called staging; each finishes
//!   within one insert timeout (a retry resolves the name again), so the
//!   copy-back waits that long after the exchange — unless the caller
//!   serializes its inserts with the swap ([`DestLocks`]; walshadow does,
//!   and sets the timeout to zero). Only rows with
//!   `_lsn > S` come back (older ones are a previous life's, which a
//!   re-opt-in purges). The column list is the destination's insertable
//!   columns that staging also has, in destination order, so DDL applied
//!   after the exchange cannot wedge it. A repeated copy-back (after a
//!   crash) inserts rows with the versions they had, which `FINAL` collapses.
//!
//! Boot recovery ([`StagingTable::recover`]) of an entry recorded as swapped
//! looks up the staging name's uuid: unchanged ⇒ re-gate and exchange;
//! changed ⇒ copy-back and finish; missing ⇒ only the done mark is owed.
//!
//! The ledger stays with the caller: every transition goes through a
//! `FnMut(&SwapMark) -> Result<(), LedgerError>` that must return only once
//! the mark is durable ([`SwapMark::apply`] changes a [`Pass`]).
//!
//! What the caller must uphold:
//! - Never [`StagingTable::prepare`] or [`StagingTable::discard`] an entry
//!   whose ledger pass has `swap` set: resume it with `recover`.
//! - After an error from any step past the `Swapped` mark, go on with
//!   `recover` (now or at boot), never with `publish`.
//! - Hold off destination DDL for the table between the gate and the
//!   exchange, or it lands on the storage that is swapped out.
//! - A failed pass joins every inserter into staging before a retry
//!   prepares it again.
//!
//! Needs an `Atomic` (or `Replicated`) database: other engines cannot
//! exchange tables, which [`StagingTable::prepare`] checks first. `CREATE
//! TABLE … AS` clones the engine with its arguments (a `Replicated*`
//! destination with a hard-coded Keeper path collides), and materialized
//! views on the destination do not see loaded rows and see copied-back
//! rows twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;
use walshadow_emitter::{
    ClickHouseClient, ClickHouseError, MetaColumns, Topology, quote_ident, quote_string,
};
use walshadow_types::Lsn;

use crate::ledger::{LedgerError, Pass, Phase, SwapState};

/// The staging table's suffix (one definition, with the destination rules).
pub use walshadow_types::STAGING_SUFFIX;

/// The staging table of destination table `dest`.
pub fn staging_name(dest: &str) -> String {
    // No replicated table's destination ends with the suffix
    // (`walshadow_types::destination_problem`), so a staging table never
    // is, or drops, one.
    format!("{dest}{STAGING_SUFFIX}")
}

/// A ledger transition of the swap, handed to the caller's mark callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SwapMark {
    /// About to exchange (or exchanged): resume, never reload.
    Swapped(SwapState),
    /// Published and staging dropped.
    Done,
    /// The loaded copy was dropped (schema changed); the entry is pending
    /// again for a fresh load.
    Discarded { reason: String },
}

impl SwapMark {
    /// The mark applied to a ledger pass.
    pub fn apply(&self, pass: &mut Pass) {
        match self {
            SwapMark::Swapped(state) => pass.swap = Some(state.clone()),
            SwapMark::Done => {
                pass.phase = Phase::Done;
                pass.swap = None;
                pass.error = None;
            }
            SwapMark::Discarded { reason } => {
                pass.phase = Phase::Pending;
                pass.swap = None;
                pass.error = Some(reason.clone());
            }
        }
    }
}

/// One column of a table as the gate compares it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ColumnSig {
    pub name: String,
    #[serde(rename = "type")]
    pub ch_type: String,
    /// `''`, `DEFAULT`, `MATERIALIZED`, `ALIAS` or `EPHEMERAL`.
    pub default_kind: String,
}

impl ColumnSig {
    /// Whether an `INSERT` writes it (a stored column that is not computed).
    fn is_insertable(&self) -> bool {
        matches!(self.default_kind.as_str(), "" | "DEFAULT")
    }
}

impl std::fmt::Display for ColumnSig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.name, self.ch_type)?;
        if !self.default_kind.is_empty() {
            write!(f, " {}", self.default_kind)?;
        }
        Ok(())
    }
}

/// A table's columns by position, from `system.columns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaFingerprint {
    pub columns: Vec<ColumnSig>,
}

impl SchemaFingerprint {
    /// How `other` differs from `self`, for the log; `None` when equal.
    pub fn difference(&self, other: &SchemaFingerprint) -> Option<String> {
        let show =
            |c: Option<&ColumnSig>| c.map_or_else(|| "nothing".to_owned(), |c| c.to_string());
        let n = self.columns.len().max(other.columns.len());
        (0..n).find_map(|i| {
            let (a, b) = (self.columns.get(i), other.columns.get(i));
            (a != b).then(|| format!("column {}: {} vs {}", i + 1, show(a), show(b)))
        })
    }
}

/// Name, type and default kind of `db.table`'s columns by position;
/// `None` when the table does not exist.
pub async fn schema_fingerprint(
    ch: &ClickHouseClient,
    database: &str,
    table: &str,
) -> Result<Option<SchemaFingerprint>, StagingError> {
    let sql = format!(
        "SELECT name, type, default_kind FROM system.columns \
         WHERE database = {} AND table = {} ORDER BY position FORMAT JSONEachRow",
        quote_string(database),
        quote_string(table)
    );
    let columns: Vec<ColumnSig> = json_rows(ch, &sql, table, "reading system.columns").await?;
    Ok((!columns.is_empty()).then_some(SchemaFingerprint { columns }))
}

/// `system.tables.uuid` of `db.table`; `None` when it does not exist.
pub async fn table_uuid(
    ch: &ClickHouseClient,
    database: &str,
    table: &str,
) -> Result<Option<String>, StagingError> {
    #[derive(Deserialize)]
    struct Row {
        uuid: String,
    }
    let sql = format!(
        "SELECT toString(uuid) AS uuid FROM system.tables \
         WHERE database = {} AND name = {} FORMAT JSONEachRow",
        quote_string(database),
        quote_string(table)
    );
    let rows: Vec<Row> = json_rows(ch, &sql, table, "reading system.tables").await?;
    Ok(rows.into_iter().next().map(|r| r.uuid))
}

/// How far an `EXCHANGE TABLES` went over the hosts of the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spread {
    Everywhere,
    Nowhere,
    Partly { done: usize, hosts: usize },
}

/// Whether `database.a` has uuid `a_after` (what an exchange gives it) on
/// every host of the database, on none, or on some: one server, or every
/// replica of the cluster (`clusterAllReplicas`; a host that does not
/// answer is an error, so nothing is decided without it).
async fn spread(
    ch: &ClickHouseClient,
    topology: &Topology,
    database: &str,
    a: &str,
    a_after: &str,
) -> Result<Spread, ClickHouseError> {
    let where_ = format!(
        "WHERE database = {} AND name = {}",
        quote_string(database),
        quote_string(a)
    );
    let (hosts, sql) = match topology.distributed_cluster(database) {
        None => (
            1,
            format!("SELECT toString(uuid) FROM system.tables {where_}"),
        ),
        Some(cluster) => {
            let c = quote_string(cluster);
            let hosts: usize = ch
                .query(&format!(
                    "SELECT count() FROM clusterAllReplicas({c}, system.one)"
                ))
                .await?
                .trim()
                .parse()
                .unwrap_or(0);
            (
                hosts,
                format!(
                    "SELECT toString(uuid) FROM clusterAllReplicas({c}, system.tables) {where_}"
                ),
            )
        }
    };
    let text = ch.query(&sql).await?;
    let done = text.lines().filter(|u| u.trim() == a_after).count();
    Ok(match done {
        0 => Spread::Nowhere,
        d if d >= hosts => Spread::Everywhere,
        d => Spread::Partly { done: d, hosts },
    })
}

/// Whether the cluster's distributed DDL queue holds an exchange of `a`
/// and `b` some host has not finished.
async fn exchange_queued(
    ch: &ClickHouseClient,
    cluster: &str,
    a: &str,
    b: &str,
) -> Result<bool, ClickHouseError> {
    let n: u64 = ch
        .query(&format!(
            "SELECT count() FROM system.distributed_ddl_queue \
             WHERE cluster = {} AND status != 'Finished' AND query ILIKE '%EXCHANGE TABLES%' \
               AND position(query, {}) > 0 AND position(query, {}) > 0",
            quote_string(cluster),
            quote_string(a),
            quote_string(b)
        ))
        .await?
        .trim()
        .parse()
        .unwrap_or(1);
    Ok(n > 0)
}

/// How long an exchange sent to a Replicated database is taken as maybe
/// still on its way to a replica (its log has no queue to look at).
const EXCHANGE_DOUBT: Duration = Duration::from_secs(300);

/// `EXCHANGE TABLES database.a AND database.b`, applied exactly once: done
/// when `a` has uuid `a_after` (`b`'s before) on every host.
///
/// An exchange is its own undo, so one sent twice is none. On one server
/// the statement is synchronous: an error with `a` unchanged means it did
/// not apply, and the error is returned for the caller to try again. On a
/// cluster, an `ON CLUSTER` task can be queued whatever the answer (a host
/// slow or down runs it later): after any doubt it is sent again only
/// once every host shows it unapplied and no unfinished exchange of the
/// two is in the distributed DDL queue (a Replicated database: after
/// [`EXCHANGE_DOUBT`]); meanwhile the hosts are read until they agree.
/// The queue is read before the first send too, and with `resumed` (a
/// swap recorded before a restart, whose exchange may be on its way) a
/// Replicated database's doubt starts at once.
pub async fn exchange_once(
    ch: &ClickHouseClient,
    database: &str,
    a: &str,
    b: &str,
    a_after: &str,
    settings: &[(String, String)],
    resumed: bool,
) -> Result<(), ClickHouseError> {
    let topology = ch.topology().await?;
    let sql = format!(
        "EXCHANGE TABLES {db}.{} AND {db}.{}{}",
        quote_ident(a),
        quote_ident(b),
        topology.on_cluster(),
        db = quote_ident(database)
    );
    let mut in_doubt: Option<Instant> = match &topology {
        Topology::Server => None,
        Topology::Cluster(_) => Some(Instant::now()),
        Topology::ReplicatedDatabase { .. } => resumed.then(Instant::now),
    };
    let mut told = Instant::now();
    let mut pause = Duration::from_millis(200);
    loop {
        let state = match spread(ch, &topology, database, a, a_after).await {
            Ok(s) => s,
            Err(e) if in_doubt.is_some() && !e.is_definite() => {
                if told.elapsed() > Duration::from_secs(30) {
                    told = Instant::now();
                    tracing::warn!(
                        database,
                        table = a,
                        "waiting to read {a}'s uuid on every host before deciding on its exchange: {e}"
                    );
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
                continue;
            }
            Err(e) => return Err(e),
        };
        match state {
            Spread::Everywhere => return Ok(()),
            Spread::Partly { done, hosts } => {
                if told.elapsed() > Duration::from_secs(30) {
                    told = Instant::now();
                    tracing::warn!(
                        database,
                        table = a,
                        done,
                        hosts,
                        "EXCHANGE TABLES {a} AND {b} applied on {done} of {hosts} hosts: waiting for the others (never sent twice)"
                    );
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
                continue;
            }
            Spread::Nowhere => {}
        }
        if let Some(since) = in_doubt {
            let pending = match &topology {
                Topology::Server => None,
                Topology::Cluster(c) => match exchange_queued(ch, c, a, b).await {
                    Ok(false) => None,
                    Ok(true) => Some("an unfinished exchange of the two is in the distributed DDL queue".to_owned()),
                    Err(e) => Some(format!("system.distributed_ddl_queue cannot be read ({e}); grant walshadow's user SELECT on it")),
                },
                Topology::ReplicatedDatabase { .. } => (since.elapsed() < EXCHANGE_DOUBT)
                    .then(|| format!("a Replicated database's exchange may still be on its way to a replica; sent again after {EXCHANGE_DOUBT:?} with none applied")),
            };
            if let Some(why) = pending {
                // Never silent: the swap (and the stream, for a resync) waits here.
                if told.elapsed() > Duration::from_secs(30) {
                    told = Instant::now();
                    tracing::warn!(
                        database,
                        table = a,
                        "EXCHANGE TABLES {a} AND {b} applied on no host yet, not sent again: {why}"
                    );
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
                continue;
            }
        }
        match ch.execute_with_settings(&sql, settings).await {
            Ok(()) if topology == Topology::Server => return Ok(()),
            Ok(()) => in_doubt = Some(Instant::now()),
            Err(e) if topology == Topology::Server => {
                // Lost after it applied?
                return match spread(ch, &topology, database, a, a_after).await {
                    Ok(Spread::Everywhere) => {
                        tracing::info!(
                            database,
                            table = a,
                            "EXCHANGE TABLES answered with an error but applied: {e}"
                        );
                        Ok(())
                    }
                    _ => Err(e),
                };
            }
            Err(e) => {
                tracing::warn!(
                    database,
                    table = a,
                    "EXCHANGE TABLES {a} AND {b}: {e}; reading every host before anything else"
                );
                in_doubt = Some(Instant::now());
            }
        }
    }
}

async fn json_rows<T: for<'de> Deserialize<'de>>(
    ch: &ClickHouseClient,
    sql: &str,
    table: &str,
    step: &'static str,
) -> Result<Vec<T>, StagingError> {
    let text = ch
        .query(sql)
        .await
        .map_err(|source| StagingError::ClickHouse {
            table: table.to_owned(),
            step,
            source,
        })?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).map_err(|e| StagingError::Response {
                table: table.to_owned(),
                step,
                detail: format!("{e}: {l}"),
            })
        })
        .collect()
}

/// Whether destination and staging still have the same columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    Match,
    Differs { reason: String },
}

/// What a publish (or a recovery) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SwapOutcome {
    /// The loaded copy is the destination now; `copied_back` live-window
    /// rows were copied back in this call.
    Published { copied_back: u64 },
    /// The loaded copy was dropped; the entry is pending.
    Discarded { reason: String },
}

/// The phase a recovery found, by the staging name's uuid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoundPhase {
    /// Same uuid as recorded: the exchange never applied.
    NotExchanged,
    /// Another uuid: the exchange applied, copy-back and drop are owed.
    Exchanged,
    /// No staging table: dropped, only the done mark is owed.
    Dropped,
}

/// What [`StagingTable::recover`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    pub found: FoundPhase,
    pub outcome: SwapOutcome,
}

/// Counters of the swap's steps, shareable across tables.
#[derive(Debug, Default)]
pub struct SwapCounters {
    pub prepared: AtomicU64,
    pub discarded: AtomicU64,
    pub exchanged: AtomicU64,
    pub copied_back_rows: AtomicU64,
    pub dropped: AtomicU64,
    pub recovered: AtomicU64,
}

impl SwapCounters {
    fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }
}

/// A step of the swap failed.
#[derive(Debug, thiserror::Error)]
pub enum StagingError {
    #[error("staging swap of {table}: {step}: {source}")]
    ClickHouse {
        table: String,
        step: &'static str,
        #[source]
        source: ClickHouseError,
    },
    #[error("staging swap of {table}: {step}: unexpected answer from ClickHouse: {detail}")]
    Response {
        table: String,
        step: &'static str,
        detail: String,
    },
    #[error("staging swap: table {database}.{table} does not exist{remedy}")]
    Missing {
        database: String,
        table: String,
        remedy: &'static str,
    },
    #[error("staging swap: database {database} does not exist")]
    NoDatabase { database: String },
    #[error(
        "database {database} has engine {engine}, which cannot EXCHANGE TABLES; backup-mode loads \
         need an Atomic (or Replicated) database: move the tables to one, or use initial_load = 'copy'"
    )]
    DatabaseEngine { database: String, engine: String },
    #[error(
        "staging swap of {table}: EXCHANGE TABLES failed and the staging table still has the uuid \
         recorded before it, so it did not apply; the ledger entry stays swapped and recovery \
         tries again: {source}"
    )]
    Exchange {
        table: String,
        #[source]
        source: ClickHouseError,
    },
    #[error("staging swap: marking the ledger: {0}")]
    Ledger(#[from] LedgerError),
}

impl StagingError {
    /// Worth retrying: every ClickHouse error but a definite refusal
    /// (connection, timeout, overload, and the destination's state —
    /// credentials, disk, a table renamed away — which someone fixes).
    pub fn is_transient(&self) -> bool {
        match self {
            StagingError::ClickHouse { source, .. } | StagingError::Exchange { source, .. } => {
                !source.is_definite()
            }
            StagingError::Ledger(LedgerError::Io { .. }) => true,
            _ => false,
        }
    }
}

/// Per destination table, a lock that orders the daemon's own writes to it
/// around a staging swap. The stream holds a table's lock for each insert
/// and DDL statement; a swap holds it from its schema gate to its exchange.
/// No insert that resolved the old storage is then still running after the
/// exchange, so the copy-back needs no wait (seed 000 waits one insert
/// timeout because it assumes no such coordination; inserts of a crashed
/// process are replayed from its durable progress, so recovery needs none
/// either). Also keeps the stream's DDL off the storage being swapped out.
/// Inserts share the lock; DDL, truncates and swaps take it alone.
#[derive(Debug, Clone, Default)]
pub struct DestLocks(
    Arc<std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::RwLock<()>>>>>,
);

impl DestLocks {
    fn of(&self, dest: &str) -> Arc<tokio::sync::RwLock<()>> {
        let mut map = match self.0.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        Arc::clone(map.entry(dest.to_owned()).or_default())
    }

    /// Waits for and takes the lock of ClickHouse table `dest` alone (its
    /// DDL, a truncate, a swap).
    pub async fn lock(&self, dest: &str) -> tokio::sync::OwnedRwLockWriteGuard<()> {
        self.of(dest).write_owned().await
    }

    /// Waits for and takes a share of the lock of ClickHouse table `dest`
    /// (an insert: inserts do not wait for each other).
    pub async fn share(&self, dest: &str) -> tokio::sync::OwnedRwLockReadGuard<()> {
        self.of(dest).read_owned().await
    }
}

/// The staging table of one destination table, and the steps of its swap.
#[derive(Debug, Clone)]
pub struct StagingTable {
    ch: ClickHouseClient,
    database: String,
    dest: String,
    staging: String,
    lsn_column: String,
    s: Lsn,
    insert_timeout: Duration,
    settings: Vec<(String, String)>,
    counters: Arc<SwapCounters>,
}

impl StagingTable {
    /// The staging table of `database.dest` for a pass at `s`. The insert
    /// timeout defaults to `ch`'s request timeout.
    pub fn new(
        ch: ClickHouseClient,
        database: impl Into<String>,
        dest: impl Into<String>,
        s: Lsn,
        meta: &MetaColumns,
    ) -> StagingTable {
        let dest = dest.into();
        StagingTable {
            insert_timeout: ch.config().request_timeout,
            ch,
            database: database.into(),
            staging: staging_name(&dest),
            dest,
            lsn_column: meta.lsn.clone(),
            s,
            settings: Vec::new(),
            counters: Arc::default(),
        }
    }

    /// The longest a live insert attempt into the destination takes (the
    /// insert tail's request timeout); copy-back waits this long after the
    /// exchange.
    pub fn with_insert_timeout(mut self, timeout: Duration) -> StagingTable {
        self.insert_timeout = timeout;
        self
    }

    /// Query-level settings sent with its DDL and inserts (e.g.
    /// `DestTable::query_settings`).
    pub fn with_settings(mut self, settings: Vec<(String, String)>) -> StagingTable {
        self.settings = settings;
        self
    }

    pub fn with_counters(mut self, counters: Arc<SwapCounters>) -> StagingTable {
        self.counters = counters;
        self
    }

    pub fn counters(&self) -> &Arc<SwapCounters> {
        &self.counters
    }

    /// The staging table's name (in the destination's database).
    pub fn name(&self) -> &str {
        &self.staging
    }

    pub fn dest(&self) -> &str {
        &self.dest
    }

    fn qualified(&self, table: &str) -> String {
        format!("{}.{}", quote_ident(&self.database), quote_ident(table))
    }

    /// `` ON CLUSTER `c` `` when the database's DDL goes to a cluster.
    async fn on_cluster(&self, step: &'static str) -> Result<String, StagingError> {
        self.ch
            .topology()
            .await
            .map(|t| t.on_cluster().to_string())
            .map_err(|source| StagingError::ClickHouse {
                table: self.dest.clone(),
                step,
                source,
            })
    }

    async fn execute(&self, sql: &str, step: &'static str) -> Result<(), StagingError> {
        self.ch
            .execute_with_settings(sql, &self.settings)
            .await
            .map_err(|source| StagingError::ClickHouse {
                table: self.dest.clone(),
                step,
                source,
            })
    }

    /// The staging table's uuid now; `None` when it does not exist.
    pub async fn staging_uuid(&self) -> Result<Option<String>, StagingError> {
        table_uuid(&self.ch, &self.database, &self.staging).await
    }

    /// A fresh, empty staging table shaped like the destination (any
    /// earlier one dropped). Fails when the database cannot exchange
    /// tables or the destination does not exist.
    pub async fn prepare(&self) -> Result<(), StagingError> {
        #[derive(Deserialize)]
        struct Row {
            engine: String,
        }
        let sql = format!(
            "SELECT engine FROM system.databases WHERE name = {} FORMAT JSONEachRow",
            quote_string(&self.database)
        );
        let rows: Vec<Row> =
            json_rows(&self.ch, &sql, &self.dest, "reading system.databases").await?;
        let Some(engine) = rows.into_iter().next().map(|r| r.engine) else {
            return Err(StagingError::NoDatabase {
                database: self.database.clone(),
            });
        };
        if !matches!(engine.as_str(), "Atomic" | "Replicated") {
            return Err(StagingError::DatabaseEngine {
                database: self.database.clone(),
                engine,
            });
        }
        if schema_fingerprint(&self.ch, &self.database, &self.dest)
            .await?
            .is_none()
        {
            return Err(self.missing(
                &self.database,
                &self.dest,
                "; it is created before its load starts",
            ));
        }
        self.drop_table("dropping an old staging table").await?;
        let sql = format!(
            "CREATE TABLE {}{} AS {}",
            self.qualified(&self.staging),
            self.on_cluster("creating the staging table").await?,
            self.qualified(&self.dest)
        );
        self.execute(&sql, "creating the staging table").await?;
        SwapCounters::bump(&self.counters.prepared, 1);
        tracing::info!(
            database = %self.database,
            table = %self.dest,
            staging = %self.staging,
            "staging table prepared"
        );
        Ok(())
    }

    fn missing(&self, database: &str, table: &str, remedy: &'static str) -> StagingError {
        StagingError::Missing {
            database: database.to_owned(),
            table: table.to_owned(),
            remedy,
        }
    }

    async fn drop_table(&self, step: &'static str) -> Result<(), StagingError> {
        let sql = format!(
            "DROP TABLE IF EXISTS {}{} SYNC",
            self.qualified(&self.staging),
            self.on_cluster(step).await?
        );
        self.execute(&sql, step).await
    }

    /// Drops the staging table (an opt-out mid-pass, or a failed gate).
    /// Not for an entry recorded as swapped.
    pub async fn discard(&self, reason: &str) -> Result<(), StagingError> {
        self.drop_table("dropping the staging table").await?;
        SwapCounters::bump(&self.counters.discarded, 1);
        tracing::info!(
            database = %self.database,
            table = %self.dest,
            staging = %self.staging,
            reason,
            "staging table discarded"
        );
        Ok(())
    }

    /// Step 1: whether destination and staging still fingerprint equal. A
    /// missing staging table differs (there is nothing to publish); a
    /// missing destination is an error.
    pub async fn gate(&self) -> Result<Gate, StagingError> {
        let Some(dest) = schema_fingerprint(&self.ch, &self.database, &self.dest).await? else {
            return Err(self.missing(
                &self.database,
                &self.dest,
                "; it is created again when the table is, and loaded again then",
            ));
        };
        let gate = match schema_fingerprint(&self.ch, &self.database, &self.staging).await? {
            None => Gate::Differs {
                reason: format!("staging table {} is gone", self.staging),
            },
            Some(staging) => match dest.difference(&staging) {
                None => Gate::Match,
                Some(d) => Gate::Differs {
                    reason: format!(
                        "the destination's columns changed during the load (destination vs staging {d})"
                    ),
                },
            },
        };
        tracing::info!(
            database = %self.database,
            table = %self.dest,
            matches = gate == Gate::Match,
            "staging swap: schema gate"
        );
        Ok(gate)
    }

    /// Step 2a: reads the staging table's uuid and marks the entry
    /// `Swapped` with it. Returns the recorded uuid.
    pub async fn mark_swapped<F>(&self, mark: &mut F) -> Result<String, StagingError>
    where
        F: FnMut(&SwapMark) -> Result<(), LedgerError>,
    {
        let Some(uuid) = self.staging_uuid().await? else {
            return Err(self.missing(&self.database, &self.staging, "; the load is run again"));
        };
        mark(&SwapMark::Swapped(SwapState {
            staging_uuid: uuid.clone(),
        }))?;
        tracing::info!(
            database = %self.database,
            table = %self.dest,
            staging_uuid = %uuid,
            "staging swap: marked swapped"
        );
        Ok(uuid)
    }

    /// Step 2b: `EXCHANGE TABLES`, once, after the entry was marked
    /// swapped with `recorded_uuid`. An error is resolved through the
    /// staging name's uuid: changed ⇒ the exchange applied, which is
    /// success; otherwise [`StagingError::Exchange`] (or the lookup's
    /// error), and only [`StagingTable::recover`] goes on.
    pub async fn exchange(&self, recorded_uuid: &str, resumed: bool) -> Result<(), StagingError> {
        exchange_once(
            &self.ch,
            &self.database,
            &self.dest,
            &self.staging,
            recorded_uuid,
            &self.settings,
            resumed,
        )
        .await
        .map_err(|source| StagingError::Exchange {
            table: self.dest.clone(),
            source,
        })?;
        SwapCounters::bump(&self.counters.exchanged, 1);
        tracing::info!(
            database = %self.database,
            table = %self.dest,
            staging = %self.staging,
            "staging swap: tables exchanged"
        );
        Ok(())
    }

    /// Step 3: waits until one insert timeout after `exchanged_at`, then
    /// copies the live-window rows (`_lsn > S`) from the swapped-out
    /// storage (now under the staging name) into the destination. Returns
    /// the rows copied. Safe to repeat.
    pub async fn copy_back(&self, exchanged_at: Instant) -> Result<u64, StagingError> {
        tokio::time::sleep_until(exchanged_at + self.insert_timeout).await;
        let step = "copying live-window rows back";
        let Some(dest) = schema_fingerprint(&self.ch, &self.database, &self.dest).await? else {
            return Err(self.missing(&self.database, &self.dest, ""));
        };
        let Some(staging) = schema_fingerprint(&self.ch, &self.database, &self.staging).await?
        else {
            return Err(self.missing(&self.database, &self.staging, ""));
        };
        if !staging.columns.iter().any(|c| c.name == self.lsn_column) {
            return Err(StagingError::Response {
                table: self.dest.clone(),
                step,
                detail: format!("{} has no column {}", self.staging, self.lsn_column),
            });
        }
        let columns: Vec<String> = dest
            .columns
            .iter()
            .filter(|c| c.is_insertable())
            .filter(|c| staging.columns.iter().any(|s| s.name == c.name))
            .map(|c| quote_ident(&c.name))
            .collect();
        let filter = format!("{} > {}", quote_ident(&self.lsn_column), self.s.0);
        #[derive(Deserialize)]
        struct Count {
            // JSON output quotes 64-bit integers.
            n: String,
        }
        let counted: Vec<Count> = json_rows(
            &self.ch,
            &format!(
                "SELECT toString(count()) AS n FROM {} WHERE {filter} FORMAT JSONEachRow",
                self.qualified(&self.staging)
            ),
            &self.dest,
            step,
        )
        .await?;
        let rows = counted
            .first()
            .and_then(|c| c.n.parse::<u64>().ok())
            .ok_or_else(|| StagingError::Response {
                table: self.dest.clone(),
                step,
                detail: "no row count".into(),
            })?;
        let list = columns.join(", ");
        let sql = format!(
            "INSERT INTO {} ({list}) SELECT {list} FROM {} WHERE {filter}",
            self.qualified(&self.dest),
            self.qualified(&self.staging)
        );
        self.execute(&sql, step).await?;
        SwapCounters::bump(&self.counters.copied_back_rows, rows);
        tracing::info!(
            database = %self.database,
            table = %self.dest,
            s = %self.s,
            rows,
            "staging swap: live-window rows copied back"
        );
        Ok(rows)
    }

    /// Step 4a: drops the staging table (the swapped-out storage).
    pub async fn drop_staging(&self) -> Result<(), StagingError> {
        self.drop_table("dropping the swapped-out table").await?;
        SwapCounters::bump(&self.counters.dropped, 1);
        tracing::info!(
            database = %self.database,
            table = %self.dest,
            staging = %self.staging,
            "staging swap: swapped-out table dropped"
        );
        Ok(())
    }

    /// Step 4: drop, then mark the entry done.
    pub async fn finish<F>(&self, mark: &mut F) -> Result<(), StagingError>
    where
        F: FnMut(&SwapMark) -> Result<(), LedgerError>,
    {
        self.drop_staging().await?;
        self.mark_done(mark)
    }

    fn mark_done<F>(&self, mark: &mut F) -> Result<(), StagingError>
    where
        F: FnMut(&SwapMark) -> Result<(), LedgerError>,
    {
        mark(&SwapMark::Done)?;
        tracing::info!(
            database = %self.database,
            table = %self.dest,
            s = %self.s,
            "staging swap: load published"
        );
        Ok(())
    }

    async fn discard_marked<F>(
        &self,
        reason: String,
        mark: &mut F,
    ) -> Result<SwapOutcome, StagingError>
    where
        F: FnMut(&SwapMark) -> Result<(), LedgerError>,
    {
        self.discard(&reason).await?;
        mark(&SwapMark::Discarded {
            reason: reason.clone(),
        })?;
        Ok(SwapOutcome::Discarded { reason })
    }

    /// Publishes a loaded staging table: gate, mark swapped, exchange,
    /// copy-back, drop, mark done. A failed gate drops staging and marks
    /// the entry `Discarded` (pending again). After an error past the
    /// swapped mark, go on with [`StagingTable::recover`].
    pub async fn publish<F>(&self, mark: &mut F) -> Result<SwapOutcome, StagingError>
    where
        F: FnMut(&SwapMark) -> Result<(), LedgerError>,
    {
        if let Gate::Differs { reason } = self.gate().await? {
            return self.discard_marked(reason, mark).await;
        }
        let uuid = self.mark_swapped(mark).await?;
        self.exchange(&uuid, false).await?;
        let copied_back = self.copy_back(Instant::now()).await?;
        self.finish(mark).await?;
        Ok(SwapOutcome::Published { copied_back })
    }

    /// Resumes an entry recorded as swapped with `recorded_uuid` (at boot,
    /// or after a step failed): the staging name's uuid now tells which
    /// steps are owed. The exchange is re-sent only when the uuid proves
    /// it never applied; copy-back waits a full insert timeout, as inserts
    /// sent before the crash may still be running.
    pub async fn recover<F>(
        &self,
        recorded_uuid: &str,
        mark: &mut F,
    ) -> Result<Recovered, StagingError>
    where
        F: FnMut(&SwapMark) -> Result<(), LedgerError>,
    {
        let found = match self.staging_uuid().await? {
            None => FoundPhase::Dropped,
            Some(now) if now == recorded_uuid => FoundPhase::NotExchanged,
            Some(_) => FoundPhase::Exchanged,
        };
        SwapCounters::bump(&self.counters.recovered, 1);
        tracing::info!(
            database = %self.database,
            table = %self.dest,
            staging_uuid = %recorded_uuid,
            found = ?found,
            "staging swap: recovering a swapped entry"
        );
        let outcome = match found {
            FoundPhase::NotExchanged => {
                if let Gate::Differs { reason } = self.gate().await? {
                    let outcome = self.discard_marked(reason, mark).await?;
                    return Ok(Recovered { found, outcome });
                }
                self.exchange(recorded_uuid, true).await?;
                let copied_back = self.copy_back(Instant::now()).await?;
                self.finish(mark).await?;
                SwapOutcome::Published { copied_back }
            }
            FoundPhase::Exchanged => {
                let copied_back = self.copy_back(Instant::now()).await?;
                self.finish(mark).await?;
                SwapOutcome::Published { copied_back }
            }
            FoundPhase::Dropped => {
                self.mark_done(mark)?;
                SwapOutcome::Published { copied_back: 0 }
            }
        };
        Ok(Recovered { found, outcome })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, ty: &str, kind: &str) -> ColumnSig {
        ColumnSig {
            name: name.into(),
            ch_type: ty.into(),
            default_kind: kind.into(),
        }
    }

    #[test]
    fn fingerprint_difference() {
        let a = SchemaFingerprint {
            columns: vec![
                col("id", "Int32", ""),
                col("_version", "UInt128", "MATERIALIZED"),
            ],
        };
        assert_eq!(a.difference(&a.clone()), None);
        let mut b = a.clone();
        b.columns.insert(1, col("x", "Int32", "DEFAULT"));
        assert_eq!(
            a.difference(&b).as_deref(),
            Some("column 2: _version UInt128 MATERIALIZED vs x Int32 DEFAULT")
        );
        let c = SchemaFingerprint {
            columns: vec![col("id", "Int32", "")],
        };
        assert_eq!(
            a.difference(&c).as_deref(),
            Some("column 2: _version UInt128 MATERIALIZED vs nothing")
        );
        assert_eq!(staging_name("orders"), "orders__wsstg");
    }

    #[test]
    fn marks_apply() {
        let mut p = Pass::new("base_backup", Lsn(0x28));
        p.phase = Phase::Loading;
        let swapped = SwapMark::Swapped(SwapState {
            staging_uuid: "u".into(),
        });
        swapped.apply(&mut p);
        assert!(p.is_open());
        assert_eq!(p.swap.as_ref().map(|s| s.staging_uuid.as_str()), Some("u"));
        SwapMark::Done.apply(&mut p);
        assert_eq!((p.phase, p.swap.is_none()), (Phase::Done, true));
        swapped.apply(&mut p);
        SwapMark::Discarded { reason: "r".into() }.apply(&mut p);
        assert_eq!((p.phase, p.swap.is_none()), (Phase::Pending, true));
        assert_eq!(p.error.as_deref(), Some("r"));
    }
}
