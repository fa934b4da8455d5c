//! `walshadow table list`, `add`, `remove` and `resync`: the tables in
//! scope as the state directory records them, opting tables in and out,
//! and the way back for a stopped one.
//!
//! `add` and `remove` write the config table's row of the table (`replicate`
//! true or false), as an operator's SQL would: the change is in the source's
//! WAL, so `run` applies it at its commit whether it runs now or later. A
//! table pinned in the config file is the file's: its `[table]` section wins
//! over any row, so both commands refuse it and name the section.
//!
//! A resync is asked for through the config table, like every change of
//! scope: the command raises the row's `resync` counter (inserting the row
//! when there is none, as for a table pinned in the config file). `run`
//! reads that change from the WAL and acts at its commit `S` — so the
//! command works the same whether `run` is running or not, and the load
//! (rows as of `S`, later changes winning) is exact either way. See
//! `stream/resync.rs` for what `run` does.

use std::fmt;
use walshadow_state_file::StateFile;

use serde::Serialize;
use walshadow_backfill::ledger::{Ledger, Phase};
use walshadow_config::Config;
use walshadow_types::Lsn;
use walshadow_wal_reader::replication::{ConnConfig, ReplicationClient};

use crate::progress::Progress;
use crate::status::StatusFile;

/// Why a table command failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(transparent)]
    Progress(#[from] crate::progress::ProgressError),
    #[error(transparent)]
    Ledger(#[from] walshadow_backfill::ledger::LedgerError),
    #[error(
        "{0} is not a table walshadow streams (not pinned in the config file, never opted in); \
         opt it in with a row of the config table instead"
    )]
    NotInScope(String),
    #[error("{0:?} is not a table name (schema.name)")]
    BadKey(String),
    #[error("--initial-load {0:?}: a resync loads with copy or base_backup")]
    BadMode(String),
    #[error("--initial-load {0:?}: one of none, copy, base_backup, object_store")]
    BadLoad(String),
    #[error(
        "{0} is pinned in the config file: its [table.{0:?}] section decides, not the config \
         table; edit or remove the section, then `walshadow ctl reload` names it and the next \
         start of `walshadow run` applies it"
    )]
    Pinned(String),
    #[error(
        "{0} is taken by the config file's pattern [table.{1:?}]: the file decides, not the \
         config table; add it to that section's exclude to manage it by the config table"
    )]
    ByPattern(String, String),
    #[error("{0} has no row in the config table {1}: it was never added there")]
    NoRow(String, String),
    #[error(
        "the config table {table}: {message}; walshadow table writes it as source.url's \
         role: give that role INSERT and UPDATE on it (or run, as a role that may: {sql})"
    )]
    Source {
        table: String,
        message: String,
        sql: String,
    },
}

/// One table in scope.
#[derive(Debug, Clone, Serialize)]
pub struct TableRow {
    pub table: String,
    /// streaming, loading, resyncing, waiting, stopped, opted out.
    pub state: String,
    /// What the state is about (the stop reason and remedy, the load's
    /// phase, what the table waits for).
    pub detail: Option<String>,
    pub destination: String,
    /// Rows the stream wrote.
    pub rows_streamed: u64,
    /// Rows the last load wrote.
    pub rows_loaded: u64,
    /// Columns not replicated, with why (`exclude_columns`,
    /// `unsupported_columns = "skip"`).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub left_out: std::collections::BTreeMap<String, String>,
    /// Values written as the columns' `out_of_range` policies say, by the
    /// stream and the last load.
    #[serde(skip_serializing_if = "crate::progress::is_zero")]
    pub values_replaced: u64,
}

/// The tables of the state directory, in key order.
pub fn list(config: &Config) -> Result<Vec<TableRow>, AdminError> {
    let dir = &config.state.dir;
    let progress = Progress::read(dir)?;
    let ledger = Ledger::read(dir)?;
    let status = StatusFile::read(dir).ok();
    let mut keys: std::collections::BTreeSet<String> = config.tables.keys().cloned().collect();
    if let Some(p) = &progress {
        keys.extend(p.tables.keys().cloned());
    }
    let mut out = Vec::new();
    for key in keys {
        let t = progress.as_ref().and_then(|p| p.tables.get(&key));
        let pass = ledger.tables.get(&key);
        let waiting = status
            .as_ref()
            .and_then(|s| s.tables.get(&key))
            .and_then(|s| s.waiting.clone());
        let destination = t.map_or_else(
            || {
                config
                    .tables
                    .get(&key)
                    .and_then(|c| c.destination_of(&key))
                    .unwrap_or_default()
            },
            |t| {
                t.resync
                    .as_ref()
                    .map_or_else(|| t.destination.clone(), |r| r.destination.clone())
            },
        );
        let load = |p: &walshadow_backfill::ledger::Pass| {
            let phase = match p.phase {
                Phase::Pending => "pending",
                Phase::Loading => "loading",
                Phase::Done => "done",
                Phase::Failed => "failed",
            };
            format!("{} at {}: {phase}, {} rows", p.mode, p.s, p.rows)
        };
        let (state, detail) = match (t, pass) {
            (Some(t), _) if t.stopped.is_some() => {
                let s = t
                    .stopped
                    .as_ref()
                    .map(|s| format!("at {}: {}; remedy: {}", s.lsn, s.reason, s.remedy));
                ("stopped", s)
            }
            (Some(t), _) if t.opted_out.is_some() => ("opted out", None),
            (Some(t), p) if t.resync.is_some() => {
                let r = t.resync.as_ref();
                let what = r.map(|r| {
                    format!(
                        "{}{} into {}{}; swapped in when loaded{}",
                        r.reason
                            .as_ref()
                            .map(|why| format!("reloading by itself ({why}): "))
                            .unwrap_or_default(),
                        r.mode,
                        destination,
                        walshadow_types::RESYNC_SUFFIX,
                        p.map(|p| format!(" ({})", load(p))).unwrap_or_default()
                    )
                });
                ("resyncing", what)
            }
            (_, Some(p)) if p.is_open() => ("loading", Some(load(p))),
            _ if waiting.is_some() => ("waiting", waiting),
            (None, _) => (
                "not seen yet",
                Some("run has not started streaming it".into()),
            ),
            _ => ("streaming", None),
        };
        out.push(TableRow {
            table: key.clone(),
            state: state.into(),
            detail,
            destination,
            rows_streamed: t.map_or(0, |t| t.rows),
            rows_loaded: pass.map_or(0, |p| p.rows),
            left_out: t.map(|t| t.left_out.clone()).unwrap_or_default(),
            values_replaced: t.map_or(0, |t| t.values_replaced)
                + pass.map_or(0, |p| p.values_replaced),
        });
    }
    Ok(out)
}

/// The table list as text, one line per table.
#[derive(Debug)]
pub struct TableList(pub Vec<TableRow>);

impl fmt::Display for TableList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return writeln!(f, "no tables in scope");
        }
        for t in &self.0 {
            write!(
                f,
                "{} -> {}: {}; {} rows streamed, {} rows loaded",
                t.table, t.destination, t.state, t.rows_streamed, t.rows_loaded
            )?;
            match &t.detail {
                Some(d) => writeln!(f, "\n    {d}")?,
                None => writeln!(f)?,
            }
            for (column, why) in &t.left_out {
                writeln!(f, "    column {column} left out: {why}")?;
            }
            if t.values_replaced > 0 {
                writeln!(
                    f,
                    "    {} values written as out_of_range says (NULL or the nearest value)",
                    t.values_replaced
                )?;
            }
        }
        Ok(())
    }
}

pub(crate) fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

pub(crate) fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Asks `run` to load `key` again (in `mode`) and swap it in: raises its
/// config-table row's `resync` counter. Returns the source's WAL position
/// after the request's commit.
pub async fn request_resync(config: &Config, key: &str, mode: &str) -> Result<Lsn, AdminError> {
    if !matches!(mode, "copy" | "base_backup") {
        return Err(AdminError::BadMode(mode.into()));
    }
    let (schema, name) =
        walshadow_types::split_table_key(key).ok_or_else(|| AdminError::BadKey(key.into()))?;
    let in_scope = config.tables.contains_key(key)
        || Progress::read(&config.state.dir)?.is_some_and(|p| p.tables.contains_key(key));
    if !in_scope {
        return Err(AdminError::NotInScope(key.into()));
    }
    let qualified = config_table(config)?;
    let upsert = format!(
        "INSERT INTO {qualified} AS c (schema_name, table_name, replicate, initial_load, resync) \
         VALUES ({}, {}, true, {}, 1) \
         ON CONFLICT (schema_name, table_name) DO UPDATE \
         SET replicate = true, initial_load = EXCLUDED.initial_load, resync = c.resync + 1",
        quote_literal(&schema),
        quote_literal(&name),
        quote_literal(mode)
    );
    // Config tables made by an older `init` have no resync column.
    let add_column = format!(
        "ALTER TABLE {qualified} ADD COLUMN IF NOT EXISTS resync bigint NOT NULL DEFAULT 0"
    );
    let check = format!(
        "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass({}) AND attname = 'resync' AND NOT attisdropped",
        quote_literal(&qualified)
    );
    write_config_table(config, "walshadow-table-resync", &upsert, |c| {
        Box::pin(async move {
            if c.simple_query(&check).await?.rows.is_empty() {
                c.simple_query(&add_column).await?;
            }
            Ok(())
        })
    })
    .await
    .map(|(lsn, _)| lsn)
}

/// `walshadow table add`: the table's config-table row says replicate,
/// with `mode` as its initial load (and `destination`, when given). Returns
/// the source's WAL position after the change.
pub async fn add(
    config: &Config,
    key: &str,
    mode: &str,
    destination: Option<&str>,
) -> Result<Lsn, AdminError> {
    let load = walshadow_config::InitialLoad::parse(Some(mode))
        .map_err(|_| AdminError::BadLoad(mode.into()))?;
    let (schema, name) =
        walshadow_types::split_table_key(key).ok_or_else(|| AdminError::BadKey(key.into()))?;
    refuse_file_tables(config, key, &schema, &name)?;
    let qualified = config_table(config)?;
    let dest = destination.map_or_else(|| "NULL".into(), quote_literal);
    let upsert = format!(
        "INSERT INTO {qualified} AS c (schema_name, table_name, replicate, initial_load, destination) \
         VALUES ({}, {}, true, {}, {dest}) \
         ON CONFLICT (schema_name, table_name) DO UPDATE \
         SET replicate = true, initial_load = EXCLUDED.initial_load, destination = EXCLUDED.destination",
        quote_literal(&schema),
        quote_literal(&name),
        quote_literal(load.as_str()),
    );
    write_config_table(config, "walshadow-table-add", &upsert, |_| {
        Box::pin(async { Ok(()) })
    })
    .await
    .map(|(lsn, _)| lsn)
}

/// `walshadow table remove`: the table's config-table row says not to
/// replicate (the row stays, as its history). Its ClickHouse table stays.
pub async fn remove(config: &Config, key: &str) -> Result<Lsn, AdminError> {
    let (schema, name) =
        walshadow_types::split_table_key(key).ok_or_else(|| AdminError::BadKey(key.into()))?;
    refuse_file_tables(config, key, &schema, &name)?;
    let qualified = config_table(config)?;
    let update = format!(
        "UPDATE {qualified} SET replicate = false WHERE schema_name = {} AND table_name = {}",
        quote_literal(&schema),
        quote_literal(&name),
    );
    let (lsn, rows) = write_config_table(config, "walshadow-table-remove", &update, |_| {
        Box::pin(async { Ok(()) })
    })
    .await?;
    if rows == 0 {
        return Err(AdminError::NoRow(
            key.into(),
            config.source.config_table.clone(),
        ));
    }
    Ok(lsn)
}

/// A table the config file pins, by name or by pattern, is the file's.
fn refuse_file_tables(
    config: &Config,
    key: &str,
    schema: &str,
    name: &str,
) -> Result<(), AdminError> {
    if config.tables.contains_key(key) {
        return Err(AdminError::Pinned(key.into()));
    }
    // The config table keeps a table it managed before a pattern came.
    let managed = Progress::read(&config.state.dir)?
        .and_then(|p| p.tables.get(key).map(|t| t.opted_in))
        .unwrap_or(false);
    match config.pattern_for(schema, name) {
        Some(p) if !managed => Err(AdminError::ByPattern(key.into(), p.key.clone())),
        _ => Ok(()),
    }
}

/// The config table, quoted.
fn config_table(config: &Config) -> Result<String, AdminError> {
    let table = &config.source.config_table;
    let (cs, cn) =
        walshadow_types::split_table_key(table).ok_or_else(|| AdminError::BadKey(table.clone()))?;
    Ok(format!("{}.{}", quote_ident(&cs), quote_ident(&cn)))
}

type Prepare<'a> = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = Result<(), walshadow_wal_reader::replication::ReplicationError>,
            > + Send
            + 'a,
    >,
>;

/// Runs `statement` on the config table as source.url's role, after
/// `prepare`; returns the WAL position after it and the rows it touched.
async fn write_config_table(
    config: &Config,
    application: &str,
    statement: &str,
    prepare: impl for<'a> FnOnce(&'a mut ReplicationClient) -> Prepare<'a>,
) -> Result<(Lsn, u64), AdminError> {
    let source_error = |message: String| AdminError::Source {
        table: config.source.config_table.clone(),
        message,
        sql: statement.to_owned(),
    };
    let mut cfg =
        ConnConfig::from_url(&config.source.url).map_err(|e| source_error(e.to_string()))?;
    cfg.physical = false;
    cfg.application_name = Some(application.into());
    if let Some(db) = &config.source.database {
        cfg.dbname = Some(db.clone());
    }
    let mut c = ReplicationClient::connect(&cfg)
        .await
        .map_err(|e| source_error(e.to_string()))?;
    let result = async {
        prepare(&mut c).await?;
        let done = c.simple_query(statement).await?;
        let at = c.simple_query("SELECT pg_current_wal_insert_lsn()").await?;
        Ok::<_, walshadow_wal_reader::replication::ReplicationError>((done, at))
    }
    .await;
    c.close().await;
    let (done, at) = result.map_err(|e| source_error(e.to_string()))?;
    let lsn = at
        .text(0, 0)
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| source_error("no WAL position after the change".into()))?;
    Ok((lsn, done.affected_rows()))
}
