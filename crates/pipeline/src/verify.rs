//! `walshadow verify`: a table at the source beside its ClickHouse table,
//! key by key, at one source snapshot.
//!
//! ```text
//!  source:   L0 = pg_current_wal_insert_lsn()
//!            BEGIN REPEATABLE READ READ ONLY; LOCK TABLE … IN ACCESS SHARE MODE (no snapshot yet)
//!            descriptor (the snapshot is taken here) ─▶ the table's rules ─▶ its ClickHouse layout
//!            pg_current_snapshot() (xmax, xip); L1 = pg_current_wal_insert_lsn()
//!  nudge:    another session commits an empty transaction (a commit past L1 to decode)
//!  stream:   wait until status.json's `applied` ≥ L1, the snapshot still held
//!  copy:     <dest>__wsverify (CREATE TABLE … AS <dest>)
//!              ◀─ RowBinary, as a load writes it ◀─ COPY (SELECT … FROM [ONLY] table) TO STDOUT binary
//!  compare:  per key, in ClickHouse: the copied row's hash beside the hash of the
//!            destination's latest version (argMax by _version over every version)
//!            equal │ missing │ extra │ differing │ changed since the snapshot (not compared)
//!  recheck:  any difference: the whole pass again, with a new snapshot; that pass is reported
//! ```
//!
//! Why it is exact: `applied` ≥ L1 puts every commit the snapshot sees in
//! ClickHouse (a commit record the snapshot sees went in before L1), so
//! each key's latest version there is at least as new as the snapshot's
//! row. It is the snapshot's row unless a transaction the snapshot does
//! not see wrote it: its `_xid` is in the snapshot's `xip` or not before
//! its `xmax` (a commit can be in the WAL and still be marking itself
//! committed when the snapshot is taken: an fsync, a synchronous standby),
//! or its `_lsn` ≥ L0 (loaded rows carry no xid). Those keys are counted
//! as changed since, not compared. The lock, taken before the snapshot,
//! keeps a `TRUNCATE` or a rewrite (not MVCC-safe) from emptying the COPY,
//! and a DDL from changing the layout between the wait and the COPY.
//!
//! Why in ClickHouse: the copied rows go through the encoder that writes
//! the destination, into a table of the destination's own layout, so the
//! two sides compare in ClickHouse's types (a float, a timestamp, a JSON
//! value alike), hashed as RowBinary; neither side is held in walshadow's
//! memory, and ClickHouse's aggregation spills to disk past its limits.
//! Deleted keys are seen because every version is read, not `FINAL`'s.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use walshadow_config::Config;
use walshadow_emitter::{
    BatchConfig, ClickHouseClient, ColumnRules, DestTable, MetaColumns, RetryPolicy,
    RowBinaryEncoder, RowMeta, TableBatch, Topology, quote_ident,
};
use walshadow_rows::Value;
use walshadow_rows::copy_binary::CopyDecoder;
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_types::Lsn;
use walshadow_wal_reader::replication::{ConnConfig, ReplicationClient};

use walshadow_backfill::snapshot::PgSnapshot;
use walshadow_state_file::StateFile;

use crate::progress::Progress;
use crate::status::StatusFile;

/// Differences listed per table at most (all are counted).
pub const DEFAULT_SHOW: usize = 10;

/// What to verify and how.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// `schema.name` keys; empty: every table streaming.
    pub tables: Vec<String>,
    /// How long to wait for `run` to apply up to a pass's position.
    pub wait: Duration,
    /// Differences listed per table.
    pub show: usize,
    /// Keep the `__wsverify` tables (to look at the copied rows).
    pub keep: bool,
}

/// One key that differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// `missing` (at the source, not in ClickHouse), `extra` (in
    /// ClickHouse, not at the source) or `differing`.
    pub kind: String,
    /// The key's values, as ClickHouse prints a tuple.
    pub key: String,
    /// For `differing`: column, source value, ClickHouse value (as
    /// ClickHouse prints them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<(String, String, String)>,
}

/// What verifying one table found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TableVerdict {
    pub table: String,
    pub destination: String,
    /// Why the table was not compared (stopped, loading…); the counts are
    /// then zero.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_verified: Option<String>,
    /// L0 of the pass reported.
    pub at: Lsn,
    pub source_rows: u64,
    pub equal: u64,
    /// Keys changed at or after `at`: not compared.
    pub changed_since: u64,
    pub missing: u64,
    pub extra: u64,
    pub differing: u64,
    /// Passes run (2 when the first found differences).
    pub passes: u32,
    pub differences: Vec<Difference>,
}

impl TableVerdict {
    pub fn differs(&self) -> bool {
        self.missing + self.extra + self.differing > 0
    }
}

/// Why verify could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("{0}")]
    Config(String),
    #[error("{key} is not in scope (`walshadow table list` shows the tables walshadow streams)")]
    NotInScope { key: String },
    #[error("reading the state directory: {0}")]
    State(String),
}

/// Verifies the tables `opts` names (every streaming one when none).
pub async fn verify(
    config: &Config,
    opts: &VerifyOptions,
) -> Result<Vec<TableVerdict>, VerifyError> {
    let ch_cfg = config
        .clickhouse
        .as_ref()
        .ok_or_else(|| VerifyError::Config("the config has no [clickhouse] section".into()))?;
    // A comparison reads both tables whole: an hour, not the stream's
    // bound on an insert.
    let mut long = ch_cfg.clone();
    long.request_timeout_s = long.request_timeout_s.max(3600);
    let ch = crate::stream::clickhouse_client(&long)
        .map_err(|e| VerifyError::Config(format!("[clickhouse]: {e}")))?;
    // One verify at a time: they share the scratch tables.
    let lock_path = config.state.dir.join("verify.lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| VerifyError::State(format!("{}: {e}", lock_path.display())))?;
    lock.try_lock().map_err(|_| {
        VerifyError::State(format!(
            "another walshadow verify runs on this state directory ({} is locked)",
            lock_path.display()
        ))
    })?;
    let mut source = ConnConfig::from_url(&config.source.url)
        .map_err(|e| VerifyError::Config(format!("source.url: {e}")))?;
    source.physical = false;
    source.application_name = Some("walshadow-verify".into());
    if let Some(db) = &config.source.database {
        source.dbname = Some(db.clone());
    }
    let progress = Progress::read(&config.state.dir)
        .map_err(|e| VerifyError::State(e.to_string()))?
        .ok_or_else(|| {
            VerifyError::State(format!(
                "{} has no progress.json: walshadow run has not streamed yet",
                config.state.dir.display()
            ))
        })?;
    let ledger = walshadow_backfill::ledger::Ledger::read(&config.state.dir)
        .map_err(|e| VerifyError::State(e.to_string()))?;
    let keys: Vec<String> = if opts.tables.is_empty() {
        progress
            .tables
            .iter()
            .filter(|(_, t)| t.opted_out.is_none())
            .map(|(k, _)| k.clone())
            .collect()
    } else {
        for key in &opts.tables {
            if !progress.tables.contains_key(key) {
                return Err(VerifyError::NotInScope { key: key.clone() });
            }
        }
        opts.tables.clone()
    };
    let meta = MetaColumns {
        lsn: ch_cfg.lsn_column.clone(),
        seq: ch_cfg.seq_column.clone(),
        xid: ch_cfg.xid_column.clone(),
        commit_time: ch_cfg.commit_time_column.clone(),
        is_deleted: ch_cfg.deleted_column.clone(),
        ..MetaColumns::default()
    };
    let opts = &VerifyOptions {
        show: opts.show.clamp(1, 1000),
        ..opts.clone()
    };
    let mut out = Vec::new();
    for key in keys {
        let Some(t) = progress.tables.get(&key) else {
            continue;
        };
        let mut verdict = TableVerdict {
            table: key.clone(),
            destination: t.destination.clone(),
            ..TableVerdict::default()
        };
        let scratch = format!("{}{}", t.destination, walshadow_types::VERIFY_SUFFIX);
        let taken = progress
            .tables
            .iter()
            .find(|(_, o)| o.destination == scratch)
            .map(|(k, _)| {
                format!("{scratch}, the table verify would copy into, is {k}'s destination")
            });
        if let Some(why) = taken.or_else(|| busy(&progress, &ledger, &key)) {
            verdict.not_verified = Some(why);
            out.push(verdict);
            continue;
        }
        let table = TableCheck {
            key: key.clone(),
            rules: rules_for(config, &progress, &key),
            dest: t.destination.clone(),
            database: ch_cfg.database.clone(),
            meta: meta.clone(),
            batch_rows: config.backfill.batch_rows,
        };
        let mut passes = 0;
        loop {
            passes += 1;
            match table.pass(&ch, &source, config, opts).await {
                Ok(pass) => {
                    verdict.at = pass.at;
                    verdict.source_rows = pass.counts.source_rows;
                    verdict.equal = pass.counts.equal;
                    verdict.changed_since = pass.counts.changed_since;
                    verdict.missing = pass.counts.missing;
                    verdict.extra = pass.counts.extra;
                    verdict.differing = pass.counts.differing;
                    verdict.differences = pass.differences;
                    verdict.not_verified = None;
                }
                Err(why) => {
                    // What an earlier pass found is not a verdict.
                    verdict = TableVerdict {
                        table: verdict.table,
                        destination: verdict.destination,
                        not_verified: Some(why),
                        ..TableVerdict::default()
                    };
                    break;
                }
            }
            if !verdict.differs() || passes == 2 {
                break;
            }
            tracing::info!(table = %key, missing = verdict.missing, extra = verdict.extra, differing = verdict.differing, "differences found; checking again with a new snapshot");
        }
        verdict.passes = passes;
        if !opts.keep {
            let topology = ch.known_topology().unwrap_or_default();
            let _ = ch.execute(&table.drop_scratch(&topology)).await;
        }
        out.push(verdict);
    }
    Ok(out)
}

/// Why `key` cannot be compared now, if it cannot: its ClickHouse table
/// is not the stream's alone, or not all there.
fn busy(
    progress: &Progress,
    ledger: &walshadow_backfill::ledger::Ledger,
    key: &str,
) -> Option<String> {
    let Some(t) = progress.tables.get(key) else {
        return Some("no longer in scope".into());
    };
    if let Some(s) = &t.stopped {
        Some(format!("stopped ({}); remedy: {}", s.reason, s.remedy))
    } else if t.opted_out.is_some() {
        Some("opted out".into())
    } else if t.resync.is_some() {
        Some("a resync is under way".into())
    } else if t.waiting_for_key.is_some() {
        Some("it waits for a primary key or replica identity".into())
    } else if ledger.tables.get(key).is_some_and(|p| p.is_open()) {
        Some("its initial load is under way".into())
    } else {
        None
    }
}

/// [`busy`], read again from the state directory.
fn busy_now(config: &Config, key: &str) -> Result<(), String> {
    let progress = Progress::read(&config.state.dir)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "progress.json is gone".to_owned())?;
    let ledger =
        walshadow_backfill::ledger::Ledger::read(&config.state.dir).map_err(|e| e.to_string())?;
    match busy(&progress, &ledger, key) {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// `key`'s column rules, as the stream applies them: its section in the
/// file (by name, else the pattern that takes it), else its config-table
/// row's.
fn rules_for(config: &Config, progress: &Progress, key: &str) -> ColumnRules {
    if let Some(t) = config.tables.get(key) {
        return crate::scope::table_column_rules(t);
    }
    if let Some((schema, name)) = walshadow_types::split_table_key(key)
        && let Some(p) = config.pattern_for(&schema, &name)
        && !progress.tables.get(key).is_some_and(|t| t.opted_in)
    {
        return crate::scope::table_column_rules(&p.config);
    }
    progress
        .tables
        .get(key)
        .map(|t| t.columns.rules())
        .unwrap_or_default()
}

/// The comparison's counts.
#[derive(Debug, Clone, Default, Deserialize)]
struct Counts {
    source_rows: u64,
    equal: u64,
    changed_since: u64,
    missing: u64,
    extra: u64,
    differing: u64,
}

struct Pass {
    at: Lsn,
    counts: Counts,
    differences: Vec<Difference>,
}

/// One table's check.
struct TableCheck {
    key: String,
    rules: ColumnRules,
    dest: String,
    database: String,
    meta: MetaColumns,
    batch_rows: usize,
}

impl TableCheck {
    fn scratch(&self) -> String {
        format!("{}{}", self.dest, walshadow_types::VERIFY_SUFFIX)
    }

    fn qualified(&self, table: &str) -> String {
        format!("{}.{}", quote_ident(&self.database), quote_ident(table))
    }

    fn drop_scratch(&self, topology: &Topology) -> String {
        format!(
            "DROP TABLE IF EXISTS {}{} SYNC",
            self.qualified(&self.scratch()),
            topology.on_cluster()
        )
    }

    /// One pass: a snapshot, the wait for the stream, the copy, the
    /// comparison. An `Err` says why the table could not be compared.
    async fn pass(
        &self,
        ch: &ClickHouseClient,
        source: &ConnConfig,
        config: &Config,
        opts: &VerifyOptions,
    ) -> Result<Pass, String> {
        busy_now(config, &self.key)?;
        // Dropped on an error: the server ends the transaction.
        let conn = ReplicationClient::connect(source)
            .await
            .map_err(|e| format!("connecting to the source: {e}"))?;
        self.pass_on(conn, ch, source, config, opts).await
    }

    async fn pass_on(
        &self,
        mut conn: ReplicationClient,
        ch: &ClickHouseClient,
        source: &ConnConfig,
        config: &Config,
        opts: &VerifyOptions,
    ) -> Result<Pass, String> {
        let (schema, name) = walshadow_types::split_table_key(&self.key)
            .ok_or_else(|| format!("{}: not schema.name", self.key))?;
        let qualified = format!("{}.{}", pg_ident(&schema), pg_ident(&name));
        let l0 = insert_lsn(&mut conn).await?;
        // LOCK takes no snapshot: the descriptor's query does, after it.
        conn.simple_query(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; LOCK TABLE {qualified} IN ACCESS SHARE MODE"
        ))
        .await
        .map_err(|e| format!("locking {}: {e}", self.key))?;
        let mut catalog = ShadowCatalog::over(conn);
        let desc = catalog.relation_by_name(&schema, &name).await;
        let mut conn = catalog.into_client();
        let desc = desc
            .map_err(|e| format!("reading {}'s descriptor: {e}", self.key))?
            .ok_or_else(|| format!("{} does not exist at the source", self.key))?;
        let snap = conn
            .simple_query("SELECT pg_current_snapshot()::text")
            .await
            .map_err(|e| format!("reading the snapshot: {e}"))?;
        let snap = snap
            .text(0, 0)
            .and_then(PgSnapshot::parse)
            .ok_or_else(|| "pg_current_snapshot() gave nothing".to_owned())?;
        let l1 = insert_lsn(&mut conn).await?;
        nudge(source).await?;
        wait_applied(config, l1, opts.wait).await?;
        busy_now(config, &self.key)?;
        let masked = self.rules.apply(desc);
        if let Some(why) = masked.refused {
            return Err(why);
        }
        let (desc, rules) = (masked.desc, masked.dest);
        let dest = DestTable::with_rules(&desc, &self.meta, &rules).map_err(|e| e.to_string())?;
        self.prepare_scratch(ch, &dest).await?;
        // A partitioned table's rows are its partitions'; an inheritance
        // parent's are its own (the children are tables of their own).
        let only = if desc.relkind == "p" { "" } else { "ONLY " };
        self.copy(
            &mut conn,
            ch,
            &desc,
            &dest,
            &format!("{only}{qualified}"),
            l0,
        )
        .await?;
        let _ = conn.simple_query("COMMIT").await;
        conn.close().await;
        let compare = Comparison {
            check: self,
            dest: &dest,
            at: l0,
            snapshot: &snap,
        };
        let counts = compare.counts(ch).await?;
        let differences = if counts.missing + counts.extra + counts.differing > 0 {
            compare.differences(ch, opts.show).await?
        } else {
            Vec::new()
        };
        Ok(Pass {
            at: l0,
            counts,
            differences,
        })
    }

    /// Makes the scratch table anew, as the destination is laid out.
    async fn prepare_scratch(&self, ch: &ClickHouseClient, dest: &DestTable) -> Result<(), String> {
        let scratch = self.scratch();
        let topology = ch
            .topology()
            .await
            .map_err(|e| format!("reading the database's engine: {e}"))?;
        ch.execute(&self.drop_scratch(&topology))
            .await
            .map_err(|e| format!("dropping an old {scratch}: {e}"))?;
        ch.execute_with_settings(
            &format!(
                "CREATE TABLE {}{} AS {}",
                self.qualified(&scratch),
                topology.on_cluster(),
                self.qualified(&self.dest)
            ),
            &dest.query_settings(),
        )
        .await
        .map_err(|e| format!("creating {scratch} beside {}: {e}", self.dest))?;
        let found = ch
            .column_types(&self.database, &scratch)
            .await
            .map_err(|e| format!("reading {scratch}'s columns: {e}"))?;
        if let Some(diff) = dest.layout_mismatch(&found) {
            return Err(format!(
                "ClickHouse table {}.{} is not laid out as the source table is ({diff}): its rules changed in the config since the table was made, or it was changed by hand; `walshadow table resync` makes it again",
                self.database, self.dest
            ));
        }
        Ok(())
    }

    /// Copies the snapshot's rows of `from` into the scratch table.
    async fn copy(
        &self,
        conn: &mut ReplicationClient,
        ch: &ClickHouseClient,
        desc: &walshadow_types::catalog::RelationDesc,
        dest: &DestTable,
        from: &str,
        l0: Lsn,
    ) -> Result<(), String> {
        let mut decoder = CopyDecoder::new(desc).map_err(|e| e.to_string())?;
        let sql = format!(
            "COPY (SELECT {} FROM {from}) TO STDOUT (FORMAT binary)",
            decoder.select_list(),
        );
        let mut batch = TableBatch::new(
            self.scratch(),
            RowBinaryEncoder::new(dest),
            BatchConfig::for_load(self.batch_rows),
        );
        let meta = RowMeta {
            lsn: l0,
            seq: Lsn(1),
            xid: 0,
            commit_time: 0,
            deleted: false,
        };
        let mut rows: Vec<Vec<Value>> = Vec::new();
        let mut inserts = 0u32;
        let mut copy = conn
            .copy_out(&sql)
            .await
            .map_err(|e| format!("COPY of {}: {e}", self.key))?;
        while let Some(data) = copy
            .next()
            .await
            .map_err(|e| format!("COPY of {}: {e}", self.key))?
        {
            decoder
                .feed(&data, &mut rows)
                .map_err(|e| format!("{}: {e}", self.key))?;
            for row in rows.drain(..) {
                batch
                    .push(&row, &meta)
                    .map_err(|e| format!("{}: {e}", self.key))?;
            }
            if batch.is_full() {
                inserts += 1;
                self.insert(ch, &mut batch, l0, inserts).await?;
            }
        }
        drop(copy);
        decoder.finish().map_err(|e| format!("{}: {e}", self.key))?;
        inserts += 1;
        self.insert(ch, &mut batch, l0, inserts).await
    }

    async fn insert(
        &self,
        ch: &ClickHouseClient,
        batch: &mut TableBatch,
        at: Lsn,
        n: u32,
    ) -> Result<(), String> {
        let Some(sealed) = batch.seal() else {
            return Ok(());
        };
        let token = format!("verify/{}/{at}/{n}", self.dest);
        sealed
            .insert(ch, &token, &RetryPolicy::default())
            .await
            .map(|_| ())
            .map_err(|e| format!("inserting into {}: {e}", self.scratch()))
    }
}

/// Commits an empty transaction with an xid on a session of its own: a
/// commit record past the positions read so far, so `applied` passes
/// them even on a source with nothing else to commit (a position read at
/// a page's start is past the header no record of its own ends at).
async fn nudge(source: &ConnConfig) -> Result<(), String> {
    let mut conn = ReplicationClient::connect(source)
        .await
        .map_err(|e| format!("connecting to the source: {e}"))?;
    let r = conn
        // `local`: a synchronous standby not answering holds no verify.
        .simple_query(
            "BEGIN; SET LOCAL synchronous_commit = local; SELECT pg_current_xact_id(); COMMIT",
        )
        .await
        .map(drop)
        .map_err(|e| format!("committing an empty transaction at the source: {e}"));
    conn.close().await;
    r
}

/// The source's WAL insert position now.
async fn insert_lsn(conn: &mut ReplicationClient) -> Result<Lsn, String> {
    let r = conn
        .simple_query("SELECT pg_current_wal_insert_lsn()")
        .await
        .map_err(|e| format!("reading the source's WAL position: {e}"))?;
    r.text(0, 0)
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| "pg_current_wal_insert_lsn() gave nothing".to_owned())
}

/// PostgreSQL's quoting of an identifier.
fn pg_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Waits until `run` has applied every commit before `lsn`.
async fn wait_applied(config: &Config, lsn: Lsn, wait: Duration) -> Result<(), String> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(20);
    loop {
        let status = StatusFile::read(&config.state.dir).ok();
        let applied = status.as_ref().map(|s| s.applied);
        if applied.is_some_and(|a| a >= lsn) {
            return Ok(());
        }
        if started.elapsed() >= wait {
            let since = status.as_ref().map_or_else(
                || "no status.json".to_owned(),
                |s| {
                    let age = crate::status::unix_ms_now().saturating_sub(s.updated_unix_ms);
                    format!("status.json last written {:.1} s ago", age as f64 / 1000.0)
                },
            );
            return Err(format!(
                "walshadow run has not applied up to {lsn} within {wait:?} (applied: {}; {since}): verify compares at a position the stream has applied, so run must be running and keeping up; is it paused, stopped, or waiting for ClickHouse (`walshadow status`)?",
                applied.map_or_else(|| "unknown".into(), |a| a.to_string())
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

/// The comparison of the scratch table with the destination. Every alias
/// is `__wsv_…`: ClickHouse resolves a name to an alias of the same
/// SELECT before a column, and a table may have a column `side` or `key`.
struct Comparison<'a> {
    check: &'a TableCheck,
    dest: &'a DestTable,
    at: Lsn,
    snapshot: &'a PgSnapshot,
}

/// Settings of every comparison query: 64-bit counts as JSON numbers
/// (servers quote them by default before 25.x), values that are not
/// UTF-8 (a bytea in a String) replaced rather than refused, aggregation
/// spilled to disk.
const COMPARE_SETTINGS: &str = "SETTINGS output_format_json_quote_64bit_integers = 0, \
     output_format_json_validate_utf8 = 1, max_bytes_before_external_group_by = 500000000, \
     cancel_http_readonly_queries_on_client_close = 1";

impl Comparison<'_> {
    fn keys(&self) -> Vec<String> {
        self.dest
            .columns
            .iter()
            .filter(|c| c.key)
            .map(|c| quote_ident(&c.name))
            .collect()
    }

    fn values(&self) -> Vec<String> {
        self.dest
            .columns
            .iter()
            .map(|c| quote_ident(&c.name))
            .collect()
    }

    /// A row's hash: its values as RowBinary (a NULL, a JSON value and an
    /// array of NULLs hash alike on every server version, unlike a tuple).
    fn row_hash(&self) -> String {
        format!(
            "cityHash64(formatRowNoNewline('RowBinary', {}))",
            self.values().join(", ")
        )
    }

    /// Per key: whether each side has it, the copied row's hash, and the
    /// destination's latest version's hash, delete flag, `_lsn` and `_xid`.
    fn per_key(&self, filter: &str) -> String {
        let keys = self.keys().join(", ");
        let hash = self.row_hash();
        let m = &self.check.meta;
        format!(
            "SELECT {keys},
                    max(__wsv_side = 0) AS __wsv_in_src, anyIf(__wsv_h, __wsv_side = 0) AS __wsv_src_h,
                    max(__wsv_side = 1) AS __wsv_in_dst, argMaxIf(__wsv_h, __wsv_ver, __wsv_side = 1) AS __wsv_dst_h,
                    argMaxIf(__wsv_del, __wsv_ver, __wsv_side = 1) AS __wsv_dst_del,
                    argMaxIf(__wsv_lsn, __wsv_ver, __wsv_side = 1) AS __wsv_dst_lsn,
                    argMaxIf(__wsv_xid, __wsv_ver, __wsv_side = 1) AS __wsv_dst_xid
               FROM (
                 SELECT {keys}, {hash} AS __wsv_h, toUInt8(0) AS __wsv_side, toUInt128(0) AS __wsv_ver,
                        toUInt8(0) AS __wsv_del, toUInt64(0) AS __wsv_lsn, toUInt32(0) AS __wsv_xid
                   FROM {scratch} {filter}
                 UNION ALL
                 SELECT {keys}, {hash}, toUInt8(1), toUInt128({version}), toUInt8({deleted}),
                        toUInt64({lsn}), toUInt32({xid})
                   FROM {dest} {filter}
               )
              GROUP BY {keys}",
            scratch = self.check.qualified(&self.check.scratch()),
            dest = self.check.qualified(&self.check.dest),
            version = quote_ident(&m.version),
            deleted = quote_ident(&m.is_deleted),
            lsn = quote_ident(&m.lsn),
            xid = quote_ident(&m.xid),
        )
    }

    /// Whether the destination's latest version of a key was written by
    /// a transaction the snapshot does not see (`PgSnapshot::sees`, in
    /// ClickHouse: in `xip`, or not before `xmax` modulo 2^32), or at or
    /// after L0 (a load's rows carry no xid).
    fn changed_since(&self) -> String {
        let xip: Vec<String> = self
            .snapshot
            .xip
            .iter()
            .map(|x| (*x as u32).to_string())
            .collect();
        format!(
            "(__wsv_dst_lsn >= {at} OR (__wsv_dst_xid != 0 AND (has([{xip}], __wsv_dst_xid) \
              OR bitAnd(toInt64(__wsv_dst_xid) - {xmax}, 4294967295) < 2147483648)))",
            at = self.at.0,
            xip = xip.join(", "),
            xmax = self.snapshot.xmax as u32,
        )
    }

    /// The kind of a key's comparison, as a ClickHouse expression over
    /// [`Comparison::per_key`]'s columns.
    fn kind(&self) -> String {
        format!(
            "multiIf(__wsv_in_dst AND {changed}, 'changed_since',
                     __wsv_in_src AND (NOT __wsv_in_dst OR __wsv_dst_del = 1), 'missing',
                     NOT __wsv_in_src AND __wsv_in_dst AND __wsv_dst_del = 0, 'extra',
                     __wsv_in_src AND __wsv_src_h != __wsv_dst_h, 'differing',
                     __wsv_in_src, 'equal',
                     'absent')",
            changed = self.changed_since()
        )
    }

    async fn counts(&self, ch: &ClickHouseClient) -> Result<Counts, String> {
        let sql = format!(
            "SELECT countIf(__wsv_in_src) AS source_rows,
                    countIf(__wsv_kind = 'equal') AS equal,
                    countIf(__wsv_kind = 'changed_since') AS changed_since,
                    countIf(__wsv_kind = 'missing') AS missing,
                    countIf(__wsv_kind = 'extra') AS extra,
                    countIf(__wsv_kind = 'differing') AS differing
               FROM (SELECT __wsv_in_src, {kind} AS __wsv_kind FROM ({per_key}))
             {COMPARE_SETTINGS}
             FORMAT JSONEachRow",
            kind = self.kind(),
            per_key = self.per_key(""),
        );
        let text = ch
            .query(&sql)
            .await
            .map_err(|e| format!("comparing in ClickHouse: {e}"))?;
        serde_json::from_str(text.trim()).map_err(|e| {
            format!("comparing in ClickHouse: an answer that is not the counts ({e}): {text:?}")
        })
    }

    /// Up to `show` differing keys, each with its differing columns.
    async fn differences(
        &self,
        ch: &ClickHouseClient,
        show: usize,
    ) -> Result<Vec<Difference>, String> {
        #[derive(Deserialize)]
        struct Found {
            kind: String,
            key: String,
            key_hash: String,
        }
        let keys = self.keys().join(", ");
        let sql = format!(
            "SELECT __wsv_kind AS kind, toString(tuple({keys})) AS key,
                    toString(cityHash64(formatRowNoNewline('RowBinary', {keys}))) AS key_hash
               FROM (SELECT *, {kind} AS __wsv_kind FROM ({per_key}))
              WHERE __wsv_kind IN ('missing', 'extra', 'differing')
              ORDER BY key_hash
              LIMIT {show}
             {COMPARE_SETTINGS}
             FORMAT JSONEachRow",
            kind = self.kind(),
            per_key = self.per_key(""),
        );
        let found: Vec<Found> = json_lines(ch, &sql).await?;
        if found.is_empty() {
            return Ok(Vec::new());
        }
        // The values of the differing keys, both sides, as text.
        #[derive(Deserialize)]
        struct Row {
            side: u8,
            key_hash: String,
            vals: Vec<Option<String>>,
            ver: String,
        }
        let hashes: Vec<&str> = found.iter().map(|f| f.key_hash.as_str()).collect();
        let key_hash = format!("cityHash64(formatRowNoNewline('RowBinary', {keys}))");
        let filter = format!("WHERE {key_hash} IN ({})", hashes.join(", "));
        let vals = self
            .values()
            .iter()
            .map(|c| format!("toString({c})"))
            .collect::<Vec<_>>()
            .join(", ");
        let m = &self.check.meta;
        let sql = format!(
            "SELECT 0 AS side, toString({key_hash}) AS key_hash, [{vals}] AS vals, '0' AS ver
               FROM {scratch} {filter}
             UNION ALL
             SELECT 1, toString({key_hash}), [{vals}], toString({version})
               FROM {dest} {filter}
             {COMPARE_SETTINGS}
             FORMAT JSONEachRow",
            scratch = self.check.qualified(&self.check.scratch()),
            dest = self.check.qualified(&self.check.dest),
            version = quote_ident(&m.version),
        );
        let rows: Vec<Row> = json_lines(ch, &sql).await?;
        let mut source: BTreeMap<&str, &Vec<Option<String>>> = BTreeMap::new();
        let mut latest: BTreeMap<&str, (u128, &Vec<Option<String>>)> = BTreeMap::new();
        for r in &rows {
            if r.side == 0 {
                source.insert(&r.key_hash, &r.vals);
            } else {
                let ver = r.ver.parse::<u128>().unwrap_or(0);
                let slot = latest.entry(&r.key_hash).or_insert((ver, &r.vals));
                if ver >= slot.0 {
                    *slot = (ver, &r.vals);
                }
            }
        }
        let names: Vec<&str> = self.dest.columns.iter().map(|c| c.name.as_str()).collect();
        let mut out: Vec<Difference> = found
            .iter()
            .map(|f| {
                let columns = match (
                    f.kind.as_str(),
                    source.get(f.key_hash.as_str()),
                    latest.get(f.key_hash.as_str()),
                ) {
                    ("differing", Some(s), Some((_, d))) => names
                        .iter()
                        .zip(s.iter().zip(d.iter()))
                        .filter(|(_, (a, b))| a != b)
                        .map(|(n, (a, b))| ((*n).to_owned(), shown(a), shown(b)))
                        .collect(),
                    _ => Vec::new(),
                };
                Difference {
                    kind: f.kind.clone(),
                    key: f.key.clone(),
                    columns,
                }
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
}

/// A value as a report line shows it: NULL, or its text shortened.
fn shown(v: &Option<String>) -> String {
    let Some(s) = v else {
        return "NULL".into();
    };
    const MAX: usize = 120;
    if s.chars().count() <= MAX {
        return s.to_owned();
    }
    let head: String = s.chars().take(MAX).collect();
    format!("{head}… ({} characters)", s.chars().count())
}

async fn json_lines<T: serde::de::DeserializeOwned>(
    ch: &ClickHouseClient,
    sql: &str,
) -> Result<Vec<T>, String> {
    let text = ch
        .query(sql)
        .await
        .map_err(|e| format!("comparing in ClickHouse: {e}"))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).map_err(|e| {
                format!("comparing in ClickHouse: an answer line not understood ({e}): {l:?}")
            })
        })
        .collect()
}

/// The verdicts as text, a paragraph per table.
#[derive(Debug)]
pub struct Report<'a>(pub &'a [TableVerdict]);

impl std::fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for v in self.0 {
            if let Some(why) = &v.not_verified {
                writeln!(f, "{} → {}: not verified: {why}", v.table, v.destination)?;
                continue;
            }
            let verdict = if v.differs() { "DIFFERS" } else { "equal" };
            writeln!(
                f,
                "{} → {}: {verdict} at {} ({} source rows; {} keys equal, {} changed since and not compared; {} missing in ClickHouse, {} extra in ClickHouse, {} differing{})",
                v.table,
                v.destination,
                v.at,
                v.source_rows,
                v.equal,
                v.changed_since,
                v.missing,
                v.extra,
                v.differing,
                if v.passes > 1 { "; checked twice" } else { "" }
            )?;
            for d in &v.differences {
                writeln!(f, "  {:<9} {}", d.kind, d.key)?;
                for (c, s, ch) in &d.columns {
                    writeln!(f, "            {c}: source {s}, ClickHouse {ch}")?;
                }
            }
        }
        Ok(())
    }
}
