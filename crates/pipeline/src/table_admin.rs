//! `walshadow table list` and `walshadow table resync`: the tables in
//! scope as the state directory records them, and the way back for a
//! stopped one.
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
    #[error(
        "the config table {table}: {message}; walshadow table resync writes it as source.url's \
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
    let table = &config.source.config_table;
    let (cs, cn) =
        walshadow_types::split_table_key(table).ok_or_else(|| AdminError::BadKey(table.clone()))?;
    let qualified = format!("{}.{}", quote_ident(&cs), quote_ident(&cn));
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
    let source_error = |message: String| AdminError::Source {
        table: table.clone(),
        message,
        sql: upsert.clone(),
    };
    let mut cfg =
        ConnConfig::from_url(&config.source.url).map_err(|e| source_error(e.to_string()))?;
    cfg.physical = false;
    cfg.application_name = Some("walshadow-table-resync".into());
    let mut c = ReplicationClient::connect(&cfg)
        .await
        .map_err(|e| source_error(e.to_string()))?;
    let result = async {
        let has = c
            .simple_query(&format!(
                "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass({}) AND attname = 'resync' AND NOT attisdropped",
                quote_literal(&qualified)
            ))
            .await?;
        if has.rows.is_empty() {
            c.simple_query(&add_column).await?;
        }
        c.simple_query(&upsert).await?;
        c.simple_query("SELECT pg_current_wal_insert_lsn()").await
    }
    .await;
    c.close().await;
    let r = result.map_err(|e| source_error(e.to_string()))?;
    r.text(0, 0)
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| source_error("no WAL position after the request".into()))
}
