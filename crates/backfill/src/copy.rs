//! `initial_load = 'copy'`: the rows a table had when it was opted in at
//! `S`, read from the source with binary `COPY` and inserted into its
//! ClickHouse table tagged `_lsn = S`.
//!
//! ```text
//!  leader session: BEGIN REPEATABLE READ; pg_export_snapshot(); pg_current_snapshot()
//!        │ snapshot sees every commit ≤ S the stream decoded?  (else a new one)
//!        │ [test hook: pause]
//!        │ LOCK TABLE … IN ACCESS SHARE MODE (the table and its leaf partitions)
//!        │ relfilenode (as of the snapshot) = pg_relation_filenode() (now)?
//!        │     else a rewrite/TRUNCATE/re-create happened: a new attempt
//!        │ descriptor read in the snapshot; block count per relation
//!        ▼
//!  workers (N sessions, SET TRANSACTION SNAPSHOT): block ranges, chunk by chunk
//!     COPY (SELECT cols FROM ONLY rel WHERE ctid >= '(a,0)' AND ctid < '(b,0)') TO STDOUT (FORMAT binary)
//!        ▼ CopyDecoder → RowBinary → INSERT (own ClickHouse path) → mark `next = b` in the ledger
//!  done: phantoms of an earlier life purged, ledger entry done, one INFO line
//! ```
//!
//! Why any snapshot at or after `S` is right (`_lsn` tagging): a row the
//! snapshot shows is the source row as of the snapshot; every change after
//! `S` reaches ClickHouse from the stream at its own commit LSN, which is
//! larger than `S`, so it wins over the loaded copy (`_version` =
//! `_lsn << 64 | _seq`, loaded rows have `_seq = 1`). Loaded rows never
//! beat streamed ones; streamed ones of commits up to the snapshot are
//! already in the loaded rows.
//!
//! Resuming from marks with a later snapshot cannot lose a row: a row not
//! yet read that an UPDATE moves into the part already read was changed
//! after `S`, and the stream delivers that UPDATE whole — unchanged TOAST
//! values included (the chunk mirror), unlike logical decoding, where the
//! peer this follows (seed 002) must restart from scratch when TOASTed
//! columns exist. Marks are only kept while the relation's file
//! (relfilenode) is the same: a rewrite moves every tuple.
//!
//! Partitioned tables load each leaf partition as its own relation (own
//! file, own marks) into the root's one ClickHouse table, selecting the
//! root's columns by name.

use crate::attempts::{AttemptError, Attempts};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use walshadow_emitter::{
    BatchConfig, ClickHouseClient, ColumnRules, DestTable, MetaColumns, RetryPolicy,
    RowBinaryEncoder, RowMeta, TableBatch,
};
use walshadow_rows::Value;
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_types::Lsn;
use walshadow_types::catalog::RelationDesc;
use walshadow_wal_reader::replication::{ConnConfig, ReplicationClient};

use crate::ledger::{BlockRange, Ledger, Phase, RelationMarks};
use crate::snapshot::{PgSnapshot, RecentCommits};
use walshadow_rows::copy_binary::CopyDecoder;

/// Blocks read by one `COPY` (and marked at once): 8 MiB of heap.
pub const CHUNK_BLOCKS: u32 = 1024;

/// How long a load waits for a snapshot that sees every commit up to `S`.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(120);

/// Everything one `copy` pass needs.
#[derive(Debug, Clone)]
pub struct CopyLoad {
    /// `schema.name` of the table (the partition root for a partitioned one).
    pub key: String,
    /// Its column rules, applied to its descriptor as the stream does.
    pub columns: ColumnRules,
    pub s: Lsn,
    /// A SQL session on the source database (`physical = false`).
    pub source: ConnConfig,
    pub ch: ClickHouseClient,
    /// The table's ClickHouse table, in `ch`'s database.
    pub dest_name: String,
    pub database: String,
    pub meta: MetaColumns,
    /// Held across each insert's layout check and the insert, so the
    /// stream's DDL on the table cannot come between them.
    pub dest_locks: crate::staging::DestLocks,
    pub workers: usize,
    pub max_attempts: u32,
    pub batch_rows: usize,
    pub chunk_blocks: u32,
    pub state_dir: PathBuf,
    pub ledger: Arc<Mutex<Ledger>>,
    pub recent: Arc<RecentCommits>,
    /// Set when the load is to end (a new one starts over): the attempt
    /// ends, and its workers at their next chunk or insert; one inside an
    /// insert finishes it first, so none is left in flight.
    pub cancelled: Arc<std::sync::atomic::AtomicBool>,
}

/// What a finished pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadSummary {
    pub rows: u64,
    pub bytes: u64,
    pub duration: Duration,
    pub attempts: u32,
    pub resumes: u32,
    /// Rows of an earlier life of the table tombstoned after the load.
    pub purged: u64,
}

/// Why a pass ended without loading the table.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("initial load of {key}: {attempts} attempts failed; the last: {last}")]
    Exhausted {
        key: String,
        attempts: u32,
        last: String,
    },
    #[error("initial load of {key}: the ledger: {detail}")]
    Ledger { key: String, detail: String },
    #[error("initial load of {key}: cancelled, a new load starts over")]
    Cancelled { key: String },
}

/// A source error: [`AttemptError::Waiting`] when reconnecting may get
/// past it by itself.
fn failed(
    what: &str,
) -> impl Fn(walshadow_wal_reader::replication::ReplicationError) -> AttemptError + '_ {
    move |e| {
        if e.is_transient() {
            AttemptError::Waiting(format!("{what}: {e}"))
        } else {
            AttemptError::Failed(format!("{what}: {e}"))
        }
    }
}

/// A ClickHouse error: [`AttemptError::Waiting`] unless it is about the
/// load's own rows or table.
fn clickhouse_failed(
    what: &str,
) -> impl Fn(walshadow_emitter::ClickHouseError) -> AttemptError + '_ {
    move |e| {
        if e.is_definite() {
            AttemptError::Failed(format!("{what}: {e}"))
        } else {
            AttemptError::Waiting(format!("{what}: {e}"))
        }
    }
}

fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A relation to read: the table or one leaf partition.
#[derive(Debug, Clone)]
struct Source {
    /// `schema.name`.
    name: String,
    oid: u32,
    relfilenode: u32,
    blocks: u32,
}

impl CopyLoad {
    /// Runs attempts until the table is loaded or `max_attempts` failed.
    pub async fn run(self) -> Result<LoadSummary, LoadError> {
        let started = Instant::now();
        let mut tries = Attempts::new(self.max_attempts, Duration::from_millis(200), |_| {
            Duration::from_secs(2)
        });
        loop {
            if self.is_cancelled() {
                return Err(LoadError::Cancelled {
                    key: self.key.clone(),
                });
            }
            let Some(attempts) = tries.start() else { break };
            self.update(|p| {
                p.attempts += 1;
                p.phase = Phase::Loading;
            })?;
            let result = self.attempt(attempts).await;
            if result.is_err() && self.is_cancelled() {
                // Not a failure of the load: no retry, no error recorded.
                return Err(LoadError::Cancelled {
                    key: self.key.clone(),
                });
            }
            match result {
                Ok(purged) => {
                    let (rows, bytes, resumes, attempts) = self.update(|p| {
                        p.phase = Phase::Done;
                        p.error = None;
                        (p.rows, p.bytes, p.resumes, p.attempts)
                    })?;
                    let summary = LoadSummary {
                        rows,
                        bytes,
                        duration: started.elapsed(),
                        attempts,
                        resumes,
                        purged,
                    };
                    tracing::info!(
                        table = %self.key,
                        s = %self.s,
                        rows,
                        bytes,
                        duration_ms = summary.duration.as_millis() as u64,
                        attempts,
                        resumes,
                        purged,
                        "initial load (copy) done"
                    );
                    return Ok(summary);
                }
                Err(e) => {
                    let setback = tries.failed(e);
                    if setback.waiting {
                        tracing::warn!(table = %self.key, "initial load (copy) waits for the source or ClickHouse ({}); trying again in {:?}", setback.why, setback.pause);
                    } else {
                        tracing::warn!(table = %self.key, attempt = attempts, "initial load (copy) attempt failed: {}", setback.why);
                    }
                    self.update(|p| {
                        p.phase = Phase::Pending;
                        p.error = Some(setback.recorded());
                    })?;
                    tokio::time::sleep(setback.pause).await;
                }
            }
        }
        let err = LoadError::Exhausted {
            key: self.key.clone(),
            attempts: tries.used(),
            last: tries.last().to_owned(),
        };
        let text = format!(
            "{err}; remedy: see the error; the load runs again when the table is opted in again or walshadow restarts"
        );
        self.update(|p| {
            p.phase = Phase::Pending;
            p.error = Some(text);
        })?;
        Err(err)
    }

    /// Changes this table's ledger entry and writes the ledger.
    fn update<T>(&self, f: impl FnOnce(&mut crate::ledger::Pass) -> T) -> Result<T, LoadError> {
        let err = |detail: String| LoadError::Ledger {
            key: self.key.clone(),
            detail,
        };
        let mut ledger = self
            .ledger
            .lock()
            .map_err(|_| err("poisoned lock".into()))?;
        let pass = ledger
            .tables
            .get_mut(&self.key)
            .ok_or_else(|| err("the entry is gone (opted out?)".into()))?;
        let out = f(pass);
        ledger
            .write(&self.state_dir)
            .map_err(|e| err(e.to_string()))?;
        Ok(out)
    }

    async fn connect(&self) -> Result<ReplicationClient, AttemptError> {
        ReplicationClient::connect(&self.source)
            .await
            .map_err(failed("connecting to the source"))
    }

    /// One attempt: a snapshot, the lock and checks, the reads. Returns the
    /// rows purged.
    async fn attempt(&self, attempt: u32) -> Result<u64, AttemptError> {
        let mut leader = self.connect().await?;
        let snapshot_id = self.take_snapshot(&mut leader).await?;
        walshadow_failpoints::hold(
            walshadow_failpoints::COPY_AFTER_SNAPSHOT,
            &format!("{}.{attempt}", self.key),
        )
        .await;
        let (schema, name) = walshadow_types::split_table_key(&self.key)
            .ok_or_else(|| AttemptError::Failed(format!("{}: not schema.name", self.key)))?;
        let (schema, name) = (schema.as_str(), name.as_str());
        let qualified = format!("{}.{}", quote_ident(schema), quote_ident(name));
        // Locking the root locks its partitions too.
        leader
            .simple_query(&format!("LOCK TABLE {qualified} IN ACCESS SHARE MODE"))
            .await
            .map_err(|e| AttemptError::Retry(format!("locking {}: {e}", self.key)))?;
        let sources = self.sources(&mut leader, schema, name).await?;
        let mut catalog = ShadowCatalog::over(leader);
        let desc = catalog
            .relation_by_name(schema, name)
            .await
            .map_err(|e| AttemptError::Failed(format!("reading {}'s descriptor: {e}", self.key)))?
            .ok_or_else(|| {
                AttemptError::Retry(format!("{} does not exist at the snapshot", self.key))
            })?;
        let masked = self.columns.apply(desc);
        if let Some(why) = masked.refused {
            return Err(AttemptError::Failed(why));
        }
        let (desc, rules) = (masked.desc, masked.dest);
        let leader = catalog.into_client();
        let decoder = CopyDecoder::new(&desc).map_err(|e| AttemptError::Failed(e.to_string()))?;
        let dest = DestTable::with_rules(&desc, &self.meta, &rules).map_err(|e| match e {
            // The stream loads it again once it has a key.
            walshadow_emitter::SchemaError::NoKey { .. } => AttemptError::Waiting(e.to_string()),
            e => AttemptError::Failed(e.to_string()),
        })?;
        let work = self.plan(&sources)?;
        let select = decoder.select_list();
        let queue = Arc::new(Mutex::new(work));
        let n = self.workers.max(1);
        // Owned by this attempt: a load cancelled (its task aborted, say by
        // a resync that starts over) takes its workers with it, so none
        // inserts into a table that was dropped and made again under it.
        let mut tasks = tokio::task::JoinSet::new();
        for worker in 0..n {
            let me = self.clone();
            let queue = Arc::clone(&queue);
            let snapshot_id = snapshot_id.clone();
            let select = select.clone();
            let desc = desc.clone();
            let dest = dest.clone();
            tasks.spawn(async move {
                me.worker(worker, &snapshot_id, &select, &desc, &dest, queue)
                    .await
            });
        }
        let mut first_err = None;
        while let Some(t) = tasks.join_next().await {
            let r = match t {
                Ok(r) => r,
                Err(e) => Err(AttemptError::Failed(format!("a load worker ended: {e}"))),
            };
            if let Err(e) = r
                && first_err.is_none()
            {
                first_err = Some(e);
            }
        }
        // The exported snapshot (and the lock) lived until every worker
        // was done.
        let _ = leader.close().await;
        if let Some(e) = first_err {
            return Err(e);
        }
        self.purge(&dest).await
    }

    /// Opens the snapshot on `leader` and checks that it sees every commit
    /// up to `S` the stream decoded (waiting for one that does).
    async fn take_snapshot(&self, leader: &mut ReplicationClient) -> Result<String, AttemptError> {
        let mut started = Instant::now();
        loop {
            if self.recent.horizon().is_some() {
                crate::snapshot::wait_for_horizon(leader, &self.recent, |why| {
                    self.tell_waiting(why);
                })
                .await
                .map_err(failed(
                    "waiting for transactions open since before walshadow's start",
                ))?;
                started = Instant::now();
            }
            let r = leader
                .simple_query(
                    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT pg_export_snapshot(), pg_current_snapshot()::text",
                )
                .await
                .map_err(failed("taking a snapshot"))?;
            let (Some(id), Some(snap)) = (r.text(0, 0), r.text(0, 1)) else {
                return Err(AttemptError::Failed(
                    "pg_export_snapshot() gave nothing".into(),
                ));
            };
            let snap = PgSnapshot::parse(snap)
                .ok_or_else(|| AttemptError::Failed(format!("pg_current_snapshot() = {snap:?}")))?;
            if !self.recent.passed(snap.xmin) {
                leader
                    .simple_query("ROLLBACK")
                    .await
                    .map_err(failed("ending a snapshot"))?;
                continue;
            }
            match self.recent.invisible_in(&snap, self.s) {
                None => return Ok(id.to_owned()),
                Some((xid, end)) => {
                    leader
                        .simple_query("ROLLBACK")
                        .await
                        .map_err(failed("ending a snapshot"))?;
                    if started.elapsed() > SNAPSHOT_WAIT {
                        return Err(AttemptError::Failed(format!(
                            "transaction {xid} committed at {end} (before the opt-in at {}) is still not visible to new snapshots after {SNAPSHOT_WAIT:?} (a synchronous standby not answering?)",
                            self.s
                        )));
                    }
                    tracing::debug!(xid, end = %end, "snapshot does not see a commit before S yet; taking another");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }

    /// A wait the load is in (`None`: over), in the log and its ledger
    /// entry (`status`).
    fn tell_waiting(&self, why: Option<String>) {
        match &why {
            Some(w) => tracing::warn!(table = %self.key, "initial load (copy) {w}"),
            None => {
                tracing::info!(table = %self.key, "initial load (copy): the transactions open since before walshadow's start have ended")
            }
        }
        let mut ledger = match self.ledger.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        if let Some(p) = ledger.tables.get_mut(&self.key)
            && p.s == self.s
        {
            p.error = why;
            if let Err(e) = ledger.write(&self.state_dir) {
                tracing::warn!(table = %self.key, "recording the load's wait in the ledger: {e}");
            }
        }
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The relations to read, checked against the lock: the table (or its
    /// leaf partitions) as the snapshot has them, still the same objects on
    /// the same files now.
    async fn sources(
        &self,
        leader: &mut ReplicationClient,
        schema: &str,
        name: &str,
    ) -> Result<Vec<Source>, AttemptError> {
        let r = leader
            .simple_query(&format!(
                "SELECT c.oid, c.relkind, to_regclass(format('%I.%I', {s}, {n}))::oid
                   FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
                  WHERE ns.nspname = {s} AND c.relname = {n}",
                s = quote_literal(schema),
                n = quote_literal(name)
            ))
            .await
            .map_err(failed("reading the table"))?;
        let (Some(oid), Some(relkind)) = (r.text(0, 0), r.text(0, 1)) else {
            return Err(AttemptError::Retry(format!(
                "{}.{} does not exist at the snapshot",
                schema, name
            )));
        };
        if r.text(0, 2) != Some(oid) {
            return Err(AttemptError::Retry(format!(
                "{schema}.{name} was dropped and created again after the snapshot"
            )));
        }
        let leaves = match relkind {
            "r" => format!("SELECT {oid}::oid AS relid"),
            "p" => format!(
                "SELECT t.relid FROM pg_partition_tree({oid}) t JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf AND c.relkind = 'r'"
            ),
            other => {
                return Err(AttemptError::Failed(format!(
                    "{schema}.{name} has relkind {other:?}: only tables and partitioned tables load"
                )));
            }
        };
        let r = leader
            .simple_query(&format!(
                "SELECT ns.nspname, c.relname, c.oid, c.relfilenode, pg_relation_filenode(c.oid),
                        (pg_relation_size(c.oid) + current_setting('block_size')::bigint - 1) / current_setting('block_size')::bigint
                   FROM ({leaves}) l JOIN pg_class c ON c.oid = l.relid JOIN pg_namespace ns ON ns.oid = c.relnamespace
                  ORDER BY c.oid"
            ))
            .await
            .map_err(failed("reading the partitions"))?;
        let mut out = Vec::new();
        for i in 0..r.rows.len() {
            let parse = |c: usize| r.text(i, c).and_then(|t| t.parse::<u64>().ok());
            let (Some(ns), Some(relname), Some(oid), Some(snap_file), Some(blocks)) =
                (r.text(i, 0), r.text(i, 1), parse(2), parse(3), parse(5))
            else {
                return Err(AttemptError::Failed(format!(
                    "unexpected row {i} reading {schema}.{name}'s files"
                )));
            };
            let rel = walshadow_types::table_key(ns, relname);
            let now_file = parse(4);
            if now_file != Some(snap_file) {
                return Err(AttemptError::Retry(format!(
                    "{rel} was rewritten after the snapshot (relfilenode {snap_file} at the snapshot, {} now: VACUUM FULL, CLUSTER, TRUNCATE or a rewriting ALTER TABLE)",
                    now_file.map_or("none".into(), |f| f.to_string())
                )));
            }
            out.push(Source {
                name: rel,
                oid: oid as u32,
                relfilenode: snap_file as u32,
                blocks: u32::try_from(blocks).unwrap_or(u32::MAX),
            });
        }
        Ok(out)
    }

    /// The ranges to read: kept from the ledger where the relation is on the
    /// same file, else new ones (one per worker).
    fn plan(&self, sources: &[Source]) -> Result<VecDeque<(Source, usize)>, AttemptError> {
        let workers = self.workers.max(1) as u32;
        let mut resumed = false;
        let work = self
            .update(|pass| {
                pass.relations.retain(|name, _| sources.iter().any(|s| &s.name == name));
                let mut work = VecDeque::new();
                for src in sources {
                    let marks = pass.relations.entry(src.name.clone()).or_insert_with(|| {
                        RelationMarks {
                            oid: src.oid,
                            relfilenode: 0,
                            ranges: Vec::new(),
                        }
                    });
                    if marks.relfilenode == src.relfilenode && marks.oid == src.oid {
                        if marks.ranges.iter().any(|r| r.next > r.start) {
                            resumed = true;
                        }
                    } else {
                        if !marks.ranges.is_empty() {
                            tracing::info!(relation = %src.name, old = marks.relfilenode, new = src.relfilenode, "initial load: the relation is on a new file; its marks are void, reading it from the start");
                        }
                        let per = src.blocks.div_ceil(workers).max(1);
                        marks.oid = src.oid;
                        marks.relfilenode = src.relfilenode;
                        marks.ranges = (0..src.blocks.div_ceil(per).max(1))
                            .map(|i| {
                                let start = i * per;
                                let end = (start + per).min(src.blocks);
                                BlockRange {
                                    start,
                                    end,
                                    next: start,
                                }
                            })
                            .collect();
                    }
                    for (i, r) in marks.ranges.iter().enumerate() {
                        if !r.is_done() {
                            work.push_back((src.clone(), i));
                        }
                    }
                }
                if resumed {
                    pass.resumes += 1;
                }
                work
            })
            .map_err(|e| AttemptError::Failed(e.to_string()))?;
        if resumed && !work.is_empty() {
            tracing::info!(table = %self.key, ranges = work.len(), "initial load: resuming from the marks of an earlier attempt");
        }
        Ok(work)
    }

    async fn worker(
        &self,
        worker: usize,
        snapshot_id: &str,
        select: &str,
        desc: &RelationDesc,
        dest: &DestTable,
        queue: Arc<Mutex<VecDeque<(Source, usize)>>>,
    ) -> Result<(), AttemptError> {
        let mut conn = self.connect().await?;
        conn.simple_query(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {}",
            quote_literal(snapshot_id)
        ))
        .await
        .map_err(failed("importing the load's snapshot"))?;
        // Inserted once full, checked after each COPY message.
        let mut batch = TableBatch::new(
            self.dest_name.clone(),
            RowBinaryEncoder::new(dest),
            BatchConfig::for_load(self.batch_rows),
        );
        let meta = RowMeta {
            lsn: self.s,
            seq: Lsn(1),
            xid: 0,
            commit_time: 0,
            deleted: false,
        };
        // Chunks read whose rows sit in `batch`: their marks move once the
        // insert holding them is answered. Inserts span chunks (fewer, larger
        // parts for ClickHouse); a restart re-reads at most the unmarked ones.
        let mut unmarked: Vec<(String, usize, u32, u64)> = Vec::new();
        let mut inserts = 0u64;
        loop {
            let next = queue.lock().ok().and_then(|mut q| q.pop_front());
            let Some((src, range)) = next else {
                break;
            };
            let mut mark = self.range_mark(&src.name, range)?;
            while !mark.is_done() {
                if self.is_cancelled() {
                    return Err(AttemptError::Failed("the load was cancelled".into()));
                }
                let a = mark.next;
                let b = a.saturating_add(self.chunk_blocks).min(mark.end);
                let (schema, name) =
                    walshadow_types::split_table_key(&src.name).unwrap_or_default();
                let (schema, name) = (schema.as_str(), name.as_str());
                let sql = format!(
                    "COPY (SELECT {select} FROM ONLY {}.{} WHERE ctid >= '({a},0)'::tid AND ctid < '({b},0)'::tid) TO STDOUT (FORMAT binary)",
                    quote_ident(schema),
                    quote_ident(name)
                );
                let mut decoder =
                    CopyDecoder::new(desc).map_err(|e| AttemptError::Failed(e.to_string()))?;
                let mut rows: Vec<Vec<Value>> = Vec::new();
                let what = format!("COPY of {} blocks {a}..{b}", src.name);
                let mut copy = conn.copy_out(&sql).await.map_err(failed(&what))?;
                let mut bytes = 0u64;
                loop {
                    let data = copy.next().await.map_err(failed(&what))?;
                    let Some(data) = data else {
                        break;
                    };
                    bytes += data.len() as u64;
                    decoder.feed(&data, &mut rows).map_err(|e| {
                        AttemptError::Failed(format!("{} blocks {a}..{b}: {e}", src.name))
                    })?;
                    for row in rows.drain(..) {
                        batch
                            .push(&row, &meta)
                            .map_err(|e| AttemptError::Failed(format!("{}: {e}", src.name)))?;
                    }
                    if batch.is_full() {
                        // Mid-chunk: this chunk's mark waits for its end.
                        self.insert(&mut batch, dest, snapshot_id, worker, &mut inserts)
                            .await?;
                        self.mark(&mut unmarked)?;
                    }
                }
                drop(copy);
                decoder.finish().map_err(|e| {
                    AttemptError::Failed(format!("{} blocks {a}..{b}: {e}", src.name))
                })?;
                unmarked.push((src.name.clone(), range, b, bytes));
                mark.next = b;
                if batch.is_full() {
                    self.insert(&mut batch, dest, snapshot_id, worker, &mut inserts)
                        .await?;
                    self.mark(&mut unmarked)?;
                }
            }
        }
        self.insert(&mut batch, dest, snapshot_id, worker, &mut inserts)
            .await?;
        self.mark(&mut unmarked)?;
        let _ = conn.simple_query("COMMIT").await;
        conn.close().await;
        Ok(())
    }

    fn range_mark(&self, rel: &str, range: usize) -> Result<BlockRange, AttemptError> {
        let ledger = self
            .ledger
            .lock()
            .map_err(|_| AttemptError::Failed("ledger lock poisoned".into()))?;
        ledger
            .tables
            .get(&self.key)
            .and_then(|p| p.relations.get(rel))
            .and_then(|m| m.ranges.get(range))
            .copied()
            .ok_or_else(|| {
                AttemptError::Failed(format!(
                    "the ledger lost {rel}'s range {range} (opted out?)"
                ))
            })
    }

    /// Inserts what `batch` holds, if anything, once the ClickHouse table
    /// has the layout the rows are encoded for. The rows are as of the
    /// load's snapshot, and so is their layout; the stream, which may still
    /// be behind a DDL the snapshot sees (a column added, made nullable),
    /// lays the table out as of its own position. RowBinary carries no
    /// types, so rows of another layout would be misread, or refused
    /// whole: the attempt waits for the stream instead (and reads the rows
    /// again under a new snapshot, whose layout the table then has).
    /// Columns only ClickHouse has take their defaults, which is what
    /// those rows hold at the source.
    async fn insert(
        &self,
        batch: &mut TableBatch,
        dest: &DestTable,
        snapshot_id: &str,
        worker: usize,
        inserts: &mut u64,
    ) -> Result<(), AttemptError> {
        let Some(sealed) = batch.seal() else {
            return Ok(());
        };
        if *inserts == 0 {
            walshadow_failpoints::hold(
                walshadow_failpoints::COPY_BEFORE_FIRST_INSERT,
                &format!("{}.{:X}.{worker}", self.key, self.s.0),
            )
            .await;
        }
        let _guard = self.dest_locks.share(&self.dest_name).await;
        // Checked under the lock: a cancel waits for the insert it misses.
        if self.is_cancelled() {
            return Err(AttemptError::Failed("the load was cancelled".into()));
        }
        let found = self
            .ch
            .column_types(&self.database, &self.dest_name)
            .await
            .map_err(|e| {
                if e.is_definite() {
                    AttemptError::Failed(e.to_string())
                } else {
                    AttemptError::Waiting(e.to_string())
                }
            })?;
        if let Some(diff) = dest.layout_mismatch(&found) {
            return Err(AttemptError::Waiting(format!(
                "ClickHouse table {}.{} is not laid out as the rows at the load's snapshot ({diff}): waiting for the stream to apply the table's DDL (a table the stream stopped gets a new load with its resync)",
                self.database, self.dest_name
            )));
        }
        // Named by snapshot, worker and sequence: a retry of this very insert
        // is deduplicated, a later attempt's read of the same blocks is not.
        *inserts += 1;
        let token = format!(
            "copy/{}/{}/{snapshot_id}/{worker}/{inserts}",
            self.dest_name, self.s
        );
        let policy = RetryPolicy {
            max_attempts: 30,
            max_elapsed: Duration::from_secs(600),
            ..RetryPolicy::default()
        };
        sealed
            .insert(&self.ch, &token, &policy)
            .await
            .map_err(|e| {
                if e.is_transient() {
                    AttemptError::Waiting(e.to_string())
                } else {
                    AttemptError::Failed(e.to_string())
                }
            })?;
        let (rows, replaced) = (sealed.rows as u64, sealed.replaced);
        // Replaced by a newer load meanwhile: the ledger entry is the
        // newer one's now.
        if self.is_cancelled() {
            return Err(AttemptError::Failed("the load was cancelled".into()));
        }
        self.update(|p| {
            p.rows += rows;
            p.values_replaced += replaced;
        })
        .map_err(|e| AttemptError::Failed(e.to_string()))?;
        Ok(())
    }

    /// Moves the marks of chunks whose rows ClickHouse now holds.
    fn mark(&self, unmarked: &mut Vec<(String, usize, u32, u64)>) -> Result<(), AttemptError> {
        if unmarked.is_empty() {
            return Ok(());
        }
        let done = std::mem::take(unmarked);
        self.update(|p| {
            for (rel, range, b, bytes) in &done {
                if let Some(r) = p
                    .relations
                    .get_mut(rel)
                    .and_then(|m| m.ranges.get_mut(*range))
                {
                    r.next = r.next.max(*b);
                }
                p.bytes += bytes;
            }
        })
        .map_err(|e| AttemptError::Failed(e.to_string()))
    }

    /// Tombstones rows of an earlier life of the table (it was opted out,
    /// rows were deleted at the source meanwhile, it is opted in again):
    /// every row that still exists has a version from this load (`S`, 1) or
    /// from the stream (after `S`); a key whose newest version is older is
    /// gone at the source. The tombstone's version (`S`, 0) loses to both.
    async fn purge(&self, dest: &DestTable) -> Result<u64, AttemptError> {
        let m = &self.meta;
        let db = quote_ch(&self.database);
        let table = quote_ch(&self.dest_name);
        let cols: Vec<String> = dest.columns.iter().map(|c| quote_ch(&c.name)).collect();
        let inner = format!(
            "SELECT {cols}, {ct}, {v} FROM {db}.{table} FINAL WHERE {del} = 0",
            cols = cols.join(", "),
            ct = quote_ch(&m.commit_time),
            v = quote_ch(&m.version),
            del = quote_ch(&m.is_deleted),
        );
        let older = format!(
            "{} < bitShiftLeft(toUInt128({}), 64)",
            quote_ch(&m.version),
            self.s.0
        );
        let count_sql = format!("SELECT count() FROM ({inner}) WHERE {older}");
        let n: u64 = self
            .ch
            .query(&count_sql)
            .await
            .map_err(clickhouse_failed("counting rows to purge"))?
            .trim()
            .parse()
            .unwrap_or(0);
        if n == 0 {
            return Ok(0);
        }
        let sql = format!(
            "INSERT INTO {db}.{table} ({cols}, {lsn}, {seq}, {xid}, {ct}, {del})
             SELECT {cols}, {s}, 0, 0, {ct}, 1 FROM ({inner}) WHERE {older}",
            cols = cols.join(", "),
            lsn = quote_ch(&m.lsn),
            seq = quote_ch(&m.seq),
            xid = quote_ch(&m.xid),
            ct = quote_ch(&m.commit_time),
            del = quote_ch(&m.is_deleted),
            s = self.s.0
        );
        self.ch
            .execute(&sql)
            .await
            .map_err(clickhouse_failed("purging rows of an earlier opt-in"))?;
        tracing::info!(table = %self.key, rows = n, "initial load: rows deleted at the source while the table was opted out are gone from ClickHouse too");
        Ok(n)
    }
}

fn quote_ch(s: &str) -> String {
    walshadow_emitter::quote_ident(s)
}
