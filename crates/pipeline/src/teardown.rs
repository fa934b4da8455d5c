//! `walshadow teardown`: what `init` made on the source goes. The physical
//! slot first (the source stops keeping WAL for walshadow), then, when
//! asked, the config table (and its schema once nothing else is in it).
//! Locally `init.json` goes last: neither `run` nor a plain `init` starts
//! on what is left (`init --force` starts over). The state and shadow
//! directories and the ClickHouse tables stay, named in the report, for the
//! operator to keep or remove.
//!
//! Run while `walshadow run` is stopped: the state directory's lock refuses
//! it otherwise, as a slot held by a running `run` could not be dropped.

use std::path::PathBuf;

use serde::Serialize;
use walshadow_config::Config;
use walshadow_shadow::run::StatePaths;
use walshadow_shadow::state_lock::{StateLock, StateLockError};
use walshadow_wal_reader::replication::{ConnConfig, ReplicationClient};

use crate::table_admin::{quote_ident, quote_literal};

/// Why a teardown stopped (what was done before is in the message).
#[derive(Debug, thiserror::Error)]
pub enum TeardownError {
    #[error(transparent)]
    Locked(#[from] StateLockError),
    #[error("{what}: {message}{remedy}")]
    Source {
        what: String,
        message: String,
        remedy: String,
    },
    #[error("removing {path}: {source}")]
    State {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Another database's config table, dropped when asked.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DatabaseTeardown {
    pub database: String,
    pub config_table: String,
    /// false: there was none.
    pub config_table_dropped: bool,
    pub schema_dropped: bool,
}

/// What a teardown did, and what it left.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TeardownReport {
    pub slot: String,
    /// The slot was there and is dropped (false: there was none).
    pub slot_dropped: bool,
    pub config_table: String,
    /// `None`: not asked; `Some(false)`: there was none.
    pub config_table_dropped: Option<bool>,
    /// The config table's schema, dropped once empty.
    pub schema_dropped: bool,
    /// With several databases: the others' config tables.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub databases: Vec<DatabaseTeardown>,
    /// Left for the operator: the state and shadow directories, the
    /// ClickHouse database.
    pub left: Vec<String>,
}

/// Drops the slot and, with `drop_config_table`, the config table; then
/// `init.json`.
pub async fn teardown(
    config: &Config,
    drop_config_table: bool,
) -> Result<TeardownReport, TeardownError> {
    let _lock = StateLock::acquire(&config.state.dir, "teardown")?;
    let slot = config.source.slot.clone();
    let source_error =
        |what: &str, e: &dyn std::fmt::Display, remedy: &str| TeardownError::Source {
            what: what.to_owned(),
            message: e.to_string(),
            remedy: remedy.to_owned(),
        };
    let mut cfg =
        ConnConfig::from_url(&config.source.url).map_err(|e| source_error("source.url", &e, ""))?;
    cfg.application_name = Some("walshadow-teardown".into());
    let mut repl = ReplicationClient::connect(&cfg)
        .await
        .map_err(|e| source_error("connecting to the source", &e, ""))?;
    let dropped = async {
        match repl.read_replication_slot(&slot).await? {
            None => Ok(false),
            Some(_) => repl.drop_slot(&slot, false).await.map(|()| true),
        }
    }
    .await;
    repl.close().await;
    let slot_dropped = dropped.map_err(|e| {
        source_error(
            &format!("dropping replication slot {slot:?}"),
            &e,
            "; if another process streams from it (pg_replication_slots.active_pid), stop \
             that first",
        )
    })?;
    tracing::info!(slot, slot_dropped, "teardown: the replication slot");
    let table = config.source.config_table.clone();
    let (mut config_table_dropped, mut schema_dropped) = (None, false);
    let mut databases = Vec::new();
    // With several databases, each one's config table (and its
    // ClickHouse database, left).
    let views =
        crate::databases::all(config).map_err(|e| source_error("[source] databases", &e, ""))?;
    if drop_config_table {
        for f in &views {
            let mut sql = cfg.clone();
            sql.physical = false;
            if let Some(db) = &f.view.source.database {
                sql.dbname = Some(db.clone());
            }
            let table = &f.view.source.config_table;
            let (existed, empty) = drop_one_config_table(&sql, table).await?;
            if f.is_url_db {
                config_table_dropped = Some(existed);
                schema_dropped = empty;
            } else {
                databases.push(DatabaseTeardown {
                    database: f.name.clone(),
                    config_table: table.clone(),
                    config_table_dropped: existed,
                    schema_dropped: empty,
                });
            }
        }
    }
    let init = StatePaths {
        dir: config.state.dir.clone(),
    }
    .init_file();
    match std::fs::remove_file(&init) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(TeardownError::State { path: init, source }),
    }
    let mut left = vec![
        format!("state directory {}", config.state.dir.display()),
        format!("shadow data directory {}", config.shadow.data_dir.display()),
    ];
    // A shadow a killed `run` left up.
    let shadow = walshadow_shadow::postmaster::Postmaster::read(&config.shadow.data_dir);
    if let (true, Some(pid)) = (shadow.is_alive(), shadow.pid()) {
        left.push(format!(
            "the shadow PostgreSQL, still running (pid {pid}): pg_ctl -D {} stop",
            config.shadow.data_dir.display()
        ));
    }
    for f in &views {
        if let Some(ch) = &f.view.clickhouse {
            left.push(format!(
                "ClickHouse database {} (the replicated tables)",
                ch.database
            ));
        }
    }
    Ok(TeardownReport {
        slot,
        slot_dropped,
        config_table: table,
        config_table_dropped,
        schema_dropped,
        databases,
        left,
    })
}

/// Drops config table `table` through session `sql`, and its schema once
/// nothing else is in it: whether it existed, whether the schema went.
async fn drop_one_config_table(
    sql: &ConnConfig,
    table: &str,
) -> Result<(bool, bool), TeardownError> {
    let source_error =
        |what: &str, e: &dyn std::fmt::Display, remedy: &str| TeardownError::Source {
            what: what.to_owned(),
            message: e.to_string(),
            remedy: remedy.to_owned(),
        };
    let (schema, name) = walshadow_types::split_table_key(table).ok_or_else(|| {
        source_error(
            "[source] config_table",
            &format!("{table:?} is not schema.name"),
            "",
        )
    })?;
    let qualified = format!("{}.{}", quote_ident(&schema), quote_ident(&name));
    let drop_table = format!("DROP TABLE {qualified}");
    let db = sql.database();
    let mut c = ReplicationClient::connect(sql).await.map_err(|e| {
        source_error(
            &format!("connecting to the source's database {db:?}"),
            &e,
            "",
        )
    })?;
    let done = async {
        let exists = !c
            .simple_query(&format!(
                "SELECT 1 FROM pg_class WHERE oid = to_regclass({})",
                quote_literal(&qualified)
            ))
            .await?
            .rows
            .is_empty();
        if exists {
            c.simple_query(&drop_table).await?;
        }
        // The schema init made for it goes once nothing else is in it.
        let empty = schema != "public"
            && c.simple_query(&format!(
                "SELECT 1 FROM pg_namespace n WHERE n.nspname = {} AND NOT EXISTS \
                 (SELECT 1 FROM pg_class WHERE relnamespace = n.oid) AND NOT EXISTS \
                 (SELECT 1 FROM pg_proc WHERE pronamespace = n.oid) AND NOT EXISTS \
                 (SELECT 1 FROM pg_type WHERE typnamespace = n.oid)",
                quote_literal(&schema)
            ))
            .await?
            .rows
            .len()
                == 1;
        if empty {
            c.simple_query(&format!("DROP SCHEMA {}", quote_ident(&schema)))
                .await?;
        }
        Ok::<_, walshadow_wal_reader::replication::ReplicationError>((exists, empty))
    }
    .await;
    c.close().await;
    let (existed, empty) = done.map_err(|e| {
        source_error(
            &format!("dropping the config table {table} of database {db:?}"),
            &e,
            &format!(
                " (the slot is dropped); run as a role that may, or as the table's owner: \
                 {drop_table}"
            ),
        )
    })?;
    tracing::info!(
        table,
        database = %db,
        existed,
        schema_dropped = empty,
        "teardown: the config table"
    );
    Ok((existed, empty))
}
