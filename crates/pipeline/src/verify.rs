//! `walshadow verify`: a table at the source beside its ClickHouse table,
//! key by key, at one source position.
//!
//! ```text
//!  source:   L0 = pg_current_wal_insert_lsn()
//!            BEGIN REPEATABLE READ READ ONLY   (the snapshot: every commit before L0, and some after)
//!            descriptor in the snapshot ─▶ the table's column rules ─▶ its ClickHouse layout
//!            L1 = pg_current_wal_insert_lsn()  (every commit the snapshot sees is before L1)
//!            COPY (SELECT … FROM table) TO STDOUT (FORMAT binary)
//!              ─▶ RowBinary, as a load writes it ─▶ <dest>__wsverify (CREATE TABLE … AS <dest>)
//!  stream:   wait until status.json's `applied` ≥ L1
//!  compare:  per key, in ClickHouse: the copied row's hash beside the hash of the
//!            destination's latest version (argMax by _version over every version)
//!            equal │ missing │ extra │ differing │ changed at or after L0 (not compared)
//!  recheck:  any difference: the whole pass again, with a new snapshot; what differs
//!            then is reported
//! ```
//!
//! Why it is exact: every commit before L0 is visible to the snapshot and,
//! once `applied` ≥ L1, in ClickHouse; a key whose latest version there
//! was committed at or after L0 may be newer or older than the snapshot's
//! row, so it is counted as changed and not compared. Every other key's
//! latest version is the key as of the snapshot. A transaction whose commit
//! record went in just before L0 can still be marking itself committed
//! when the snapshot is taken (a window of microseconds): the recheck,
//! with its own snapshot, tells such a race from a real difference.
//!
//! Why in ClickHouse: the copied rows go through the encoder that writes
//! the destination, into a table of the destination's own layout, so the
//! two sides compare in ClickHouse's types (a float, a timestamp, a JSON
//! value alike); neither side is held in walshadow's memory, and
//! ClickHouse's aggregation spills to disk past its memory limits.
//! Deleted keys are seen because every version is read, not `FINAL`'s.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use walshadow_config::Config;
use walshadow_emitter::{
    BatchConfig, ClickHouseClient, ColumnRules, DestTable, MetaColumns, RetryPolicy,
    RowBinaryEncoder, RowMeta, TableBatch, quote_ident,
};
use walshadow_rows::Value;
use walshadow_rows::copy_binary::CopyDecoder;
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_types::Lsn;
use walshadow_wal_reader::replication::{ConnConfig, ReplicationClient};

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
    let ch = crate::stream::clickhouse_client(ch_cfg)
        .map_err(|e| VerifyError::Config(format!("[clickhouse]: {e}")))?;
    let mut source = ConnConfig::from_url(&config.source.url)
        .map_err(|e| VerifyError::Config(format!("source.url: {e}")))?;
    source.physical = false;
    source.application_name = Some("walshadow-verify".into());
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
        let busy = if let Some(s) = &t.stopped {
            Some(format!("stopped ({}); remedy: {}", s.reason, s.remedy))
        } else if t.opted_out.is_some() {
            Some("opted out".into())
        } else if t.resync.is_some() {
            Some("a resync is under way".into())
        } else if t.waiting_for_key.is_some() {
            Some("it waits for a primary key or replica identity".into())
        } else if ledger.tables.get(&key).is_some_and(|p| p.is_open()) {
            Some("its initial load is under way".into())
        } else {
            None
        };
        if let Some(why) = busy {
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
                    verdict.not_verified = Some(why);
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
            let _ = ch.execute(&table.drop_scratch()).await;
        }
        out.push(verdict);
    }
    Ok(out)
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

    fn drop_scratch(&self) -> String {
        format!(
            "DROP TABLE IF EXISTS {} SYNC",
            self.qualified(&self.scratch())
        )
    }

    /// One pass: the copy at a snapshot, the wait for the stream, the
    /// comparison. An `Err` says why the table could not be compared.
    async fn pass(
        &self,
        ch: &ClickHouseClient,
        source: &ConnConfig,
        config: &Config,
        opts: &VerifyOptions,
    ) -> Result<Pass, String> {
        let (l0, l1, dest) = self.copy(ch, source).await?;
        wait_applied(config, l1, opts.wait).await?;
        let compare = Comparison {
            check: self,
            dest: &dest,
            at: l0,
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

    /// Copies the table's rows at a new snapshot into the scratch table.
    /// Returns L0, L1 and the layout the rows were written in.
    async fn copy(
        &self,
        ch: &ClickHouseClient,
        source: &ConnConfig,
    ) -> Result<(Lsn, Lsn, DestTable), String> {
        let (schema, name) = walshadow_types::split_table_key(&self.key)
            .ok_or_else(|| format!("{}: not schema.name", self.key))?;
        let mut conn = ReplicationClient::connect(source)
            .await
            .map_err(|e| format!("connecting to the source: {e}"))?;
        let l0 = insert_lsn(&mut conn).await?;
        conn.simple_query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(|e| format!("taking a snapshot: {e}"))?;
        // The first query takes the snapshot: the catalog as of it.
        let mut catalog = ShadowCatalog::over(conn);
        let desc = catalog.relation_by_name(&schema, &name).await;
        let mut conn = catalog.into_client();
        let desc = desc
            .map_err(|e| format!("reading {}'s descriptor: {e}", self.key))?
            .ok_or_else(|| format!("{} does not exist at the source", self.key))?;
        let masked = self.rules.apply(desc);
        if let Some(why) = masked.refused {
            return Err(why);
        }
        let (desc, rules) = (masked.desc, masked.dest);
        let dest = DestTable::with_rules(&desc, &self.meta, &rules).map_err(|e| e.to_string())?;
        let l1 = insert_lsn(&mut conn).await?;
        let scratch = self.scratch();
        ch.execute(&self.drop_scratch())
            .await
            .map_err(|e| format!("dropping an old {scratch}: {e}"))?;
        ch.execute(&format!(
            "CREATE TABLE {} AS {}",
            self.qualified(&scratch),
            self.qualified(&self.dest)
        ))
        .await
        .map_err(|e| format!("creating {scratch} beside {}: {e}", self.dest))?;
        let found = ch
            .column_types(&self.database, &scratch)
            .await
            .map_err(|e| format!("reading {scratch}'s columns: {e}"))?;
        if let Some(diff) = dest.layout_mismatch(&found) {
            return Err(format!(
                "ClickHouse table {}.{} is not laid out as the source table is now ({diff}): the stream has not applied its DDL yet, or its rules changed since; verify it again later",
                self.database, self.dest
            ));
        }
        let mut decoder = CopyDecoder::new(&desc).map_err(|e| e.to_string())?;
        let sql = format!(
            "COPY (SELECT {} FROM {}.{}) TO STDOUT (FORMAT binary)",
            decoder.select_list(),
            pg_ident(&schema),
            pg_ident(&name)
        );
        let mut batch = TableBatch::new(
            scratch.clone(),
            RowBinaryEncoder::new(&dest),
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
        self.insert(ch, &mut batch, l0, inserts).await?;
        let _ = conn.simple_query("COMMIT").await;
        conn.close().await;
        Ok((l0, l1, dest))
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

/// The comparison of the scratch table with the destination.
struct Comparison<'a> {
    check: &'a TableCheck,
    dest: &'a DestTable,
    at: Lsn,
}

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

    /// Per key: whether each side has it, the copied row's hash, and the
    /// destination's latest version's hash, delete flag and `_lsn`.
    fn per_key(&self, filter: &str) -> String {
        let keys = self.keys().join(", ");
        let hash = format!("cityHash64(tuple({}))", self.values().join(", "));
        let m = &self.check.meta;
        format!(
            "SELECT {keys},
                    max(side = 0) AS in_src, anyIf(h, side = 0) AS src_h,
                    max(side = 1) AS in_dst, argMaxIf(h, ver, side = 1) AS dst_h,
                    argMaxIf(del, ver, side = 1) AS dst_del, argMaxIf(lsn, ver, side = 1) AS dst_lsn
               FROM (
                 SELECT {keys}, {hash} AS h, toUInt8(0) AS side, toUInt128(0) AS ver, toUInt8(0) AS del, toUInt64(0) AS lsn
                   FROM {scratch} {filter}
                 UNION ALL
                 SELECT {keys}, {hash}, toUInt8(1), toUInt128({version}), toUInt8({deleted}), toUInt64({lsn})
                   FROM {dest} {filter}
               )
              GROUP BY {keys}",
            scratch = self.check.qualified(&self.check.scratch()),
            dest = self.check.qualified(&self.check.dest),
            version = quote_ident(&m.version),
            deleted = quote_ident(&m.is_deleted),
            lsn = quote_ident(&m.lsn),
        )
    }

    /// The kind of a key's comparison, as a ClickHouse expression over
    /// [`Comparison::per_key`]'s columns.
    fn kind(&self) -> String {
        let at = self.at.0;
        format!(
            "multiIf(in_dst AND dst_lsn >= {at}, 'changed_since',
                     in_src AND (NOT in_dst OR dst_del = 1), 'missing',
                     NOT in_src AND in_dst AND dst_del = 0, 'extra',
                     in_src AND src_h != dst_h, 'differing',
                     in_src, 'equal',
                     'absent')"
        )
    }

    async fn counts(&self, ch: &ClickHouseClient) -> Result<Counts, String> {
        let sql = format!(
            "SELECT countIf(in_src) AS source_rows,
                    countIf(kind = 'equal') AS equal,
                    countIf(kind = 'changed_since') AS changed_since,
                    countIf(kind = 'missing') AS missing,
                    countIf(kind = 'extra') AS extra,
                    countIf(kind = 'differing') AS differing
               FROM (SELECT in_src, {kind} AS kind FROM ({per_key}))
             SETTINGS max_bytes_before_external_group_by = 1000000000
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
            "SELECT kind, toString(tuple({keys})) AS key, toString(cityHash64(tuple({keys}))) AS key_hash
               FROM (SELECT *, {kind} AS kind FROM ({per_key}))
              WHERE kind IN ('missing', 'extra', 'differing')
              ORDER BY key
              LIMIT {show}
             SETTINGS max_bytes_before_external_group_by = 1000000000
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
        let filter = format!("WHERE cityHash64(tuple({keys})) IN ({})", hashes.join(", "));
        let vals = self
            .values()
            .iter()
            .map(|c| format!("toString({c})"))
            .collect::<Vec<_>>()
            .join(", ");
        let m = &self.check.meta;
        let sql = format!(
            "SELECT 0 AS side, toString(cityHash64(tuple({keys}))) AS key_hash, [{vals}] AS vals, '0' AS ver
               FROM {scratch} {filter}
             UNION ALL
             SELECT 1, toString(cityHash64(tuple({keys}))), [{vals}], toString({version})
               FROM {dest} {filter}
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
        Ok(found
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
            .collect())
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
