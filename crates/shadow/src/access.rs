//! Reaching the shadow from outside `walshadow run` (the `catalog show` and
//! `export-schema` commands): its address from the config and init state, a
//! session once it has replayed an LSN, and the schema export.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use walshadow_config::Config;
use walshadow_types::Lsn;
use walshadow_wal_reader::replication::{ConnConfig, ReplicationClient};

use crate::catalog::{CatalogError, ShadowCatalog};
use crate::run::{RunError, StatePaths, load_init_state};

/// Why the shadow could not be reached or exported.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error(transparent)]
    State(#[from] RunError),
    #[error("[source] url: {0}")]
    Url(walshadow_wal_reader::replication::ReplicationError),
    #[error(
        "connecting to database {db} of the shadow at {socket}: {source} (is `walshadow run` running?)"
    )]
    Connect {
        db: String,
        socket: String,
        source: CatalogError,
    },
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("shadow session: {0}")]
    Session(#[from] walshadow_wal_reader::replication::ReplicationError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("pg_dump against the shadow failed ({0})")]
    PgDump(std::process::ExitStatus),
    #[error("{tool} failed ({status}): {stderr}; {remedy}")]
    Tool {
        tool: &'static str,
        status: std::process::ExitStatus,
        stderr: String,
        remedy: &'static str,
    },
    #[error(transparent)]
    Process(#[from] crate::process::ProcessError),
    #[error("emptying the tables of the exported directory: {source}; its server's log:\n{log}")]
    Hollow {
        source: Box<AccessError>,
        log: String,
    },
}

impl AccessError {
    /// The shadow closed or lost the session (it was being restarted).
    fn is_connection_lost(&self) -> bool {
        match self {
            AccessError::Catalog(CatalogError::Query(e))
            | AccessError::Connect {
                source: CatalogError::Query(e),
                ..
            } => e.is_transient(),
            AccessError::Session(e) => e.is_transient(),
            _ => false,
        }
    }
}

/// Where the shadow listens and who to connect as.
#[derive(Debug, Clone)]
pub struct ShadowAddress {
    pub socket_dir: PathBuf,
    pub port: u16,
    pub user: String,
    /// The database to read.
    pub db: String,
    /// The database of [source] url, which exists on the shadow before any
    /// LSN walshadow serves (unlike a database created later on the source).
    pub url_db: String,
}

impl ShadowAddress {
    /// From the config and the init state; `db` defaults to the url's.
    pub fn from_config(config: &Config, db: Option<String>) -> Result<Self, AccessError> {
        let paths = StatePaths {
            dir: config.state.dir.clone(),
        };
        let state = load_init_state(&paths)?;
        let source = ConnConfig::from_url(&config.source.url).map_err(AccessError::Url)?;
        let url_db = source.database();
        Ok(ShadowAddress {
            socket_dir: paths.shadow_socket_dir(),
            port: state.shadow_port,
            user: source.user.clone(),
            db: db.unwrap_or_else(|| url_db.clone()),
            url_db,
        })
    }

    async fn connect(&self, db: &str) -> Result<ShadowCatalog, AccessError> {
        ShadowCatalog::connect(&self.socket_dir, self.port, &self.user, db)
            .await
            .map_err(|source| AccessError::Connect {
                db: db.to_owned(),
                socket: format!("{}/.s.PGSQL.{}", self.socket_dir.display(), self.port),
                source,
            })
    }

    /// [`connect`](Self::connect), tried again until `deadline`: `walshadow
    /// run` restarts its shadow at start (and after a crash), and the socket
    /// is briefly gone or refusing then.
    async fn connect_by(
        &self,
        db: &str,
        deadline: tokio::time::Instant,
    ) -> Result<ShadowCatalog, AccessError> {
        loop {
            match self.connect(db).await {
                Ok(c) => return Ok(c),
                Err(e) if tokio::time::Instant::now() < deadline => {
                    tracing::debug!("{e}; trying again");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A session on `db` once the shadow has replayed `lsn`. The wait runs
    /// in the url's database: `db` may be created by WAL not yet replayed.
    /// Within `timeout`, a shadow not accepting connections yet (being
    /// restarted) is waited for too.
    pub async fn session(
        &self,
        lsn: Option<Lsn>,
        timeout: Duration,
    ) -> Result<ShadowCatalog, AccessError> {
        if let Some(lsn) = lsn {
            let deadline = tokio::time::Instant::now() + timeout;
            let mut cat = self.connect_by(&self.url_db, deadline).await?;
            cat.wait_for_lsn(lsn, timeout).await?;
            if self.db == self.url_db {
                return Ok(cat);
            }
        }
        self.connect(&self.db).await
    }

    /// `read` on a [`session`](Self::session), begun again while within
    /// `timeout` when the shadow drops the connection: `walshadow run`
    /// stops a shadow left up by an earlier run and starts it again, and a
    /// session opened on the old one is cut.
    pub async fn read<T>(
        &self,
        lsn: Option<Lsn>,
        timeout: Duration,
        mut read: impl AsyncFnMut(&mut ShadowCatalog) -> Result<T, CatalogError>,
    ) -> Result<T, AccessError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let result = match self.session(lsn, left).await {
                Ok(mut cat) => read(&mut cat).await.map_err(AccessError::from),
                Err(e) => Err(e),
            };
            match result {
                Err(e) if e.is_connection_lost() && tokio::time::Instant::now() < deadline => {
                    tracing::debug!("{e}; reading again");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                r => return r,
            }
        }
    }

    /// A plain SQL session on `db` (`ShadowCatalog` keeps its own).
    pub(crate) async fn sql_session(&self) -> Result<ReplicationClient, AccessError> {
        let mut cfg = ConnConfig::unix_socket(&self.socket_dir, self.port, &self.user, &self.db);
        cfg.application_name = Some("walshadow-export".into());
        Ok(ReplicationClient::connect(&cfg).await?)
    }
}

/// `setval` for every permanent sequence not owned by an extension whose
/// value was ever taken (the dump's `CREATE SEQUENCE` covers the others).
/// What a standby holds is what `nextval` logged: up to 32 increments ahead
/// of the source (`SEQ_LOG_VALS` in sequence.c), never a value handed out.
const SEQUENCE_VALUES_SQL: &str = "\
select format('SELECT pg_catalog.setval(%L, %s, true);',
              format('%I.%I', n.nspname, c.relname), v.last_value)
  from pg_class c
  join pg_namespace n on n.oid = c.relnamespace
  cross join lateral (select pg_sequence_last_value(c.oid) as last_value) v
 where c.relkind = 'S' and c.relpersistence = 'p' and v.last_value is not null
   and not exists (select 1 from pg_depend d where d.classid = 'pg_class'::regclass
                    and d.objid = c.oid and d.deptype = 'e')
 order by n.nspname, c.relname";

/// `pg_dump --schema-only` of the shadow (from `pg_bin`), then the
/// sequences' values (a schema-only dump leaves them out), both read in one
/// exported snapshot so that every `setval` names a sequence the dump
/// creates. Written to `out`, or standard output.
pub async fn export_schema(
    addr: &ShadowAddress,
    lsn: Option<Lsn>,
    timeout: Duration,
    pg_bin: &Path,
    out: Option<&Path>,
) -> Result<(), AccessError> {
    // The shadow may be restarting (a new `run`): the snapshot is taken
    // again. pg_dump is not, as it may have written to stdout already.
    let deadline = tokio::time::Instant::now() + timeout;
    let (mut snap, snapshot, tail) = loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match export_snapshot(addr, lsn, left).await {
            Err(e) if e.is_connection_lost() && tokio::time::Instant::now() < deadline => {
                tracing::debug!("{e}; taking the snapshot again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            r => break r?,
        }
    };
    let mut cmd = crate::process::child_command(&pg_bin.join("pg_dump"));
    cmd.args(["--schema-only", "--no-owner", "--no-privileges"])
        .arg(format!("--snapshot={snapshot}"))
        .arg("-h")
        .arg(&addr.socket_dir)
        .args([
            "-p",
            &addr.port.to_string(),
            "-U",
            &addr.user,
            "-d",
            &addr.db,
        ]);
    if let Some(out) = out {
        cmd.arg("-f").arg(out);
    }
    // The session holding the snapshot stays open until pg_dump is done.
    let status = cmd.status().map_err(|source| AccessError::Io {
        what: "running pg_dump".into(),
        source,
    })?;
    if !status.success() {
        return Err(AccessError::PgDump(status));
    }
    let io = |source| AccessError::Io {
        what: format!(
            "appending to {}",
            out.map_or("stdout".into(), |o| o.display().to_string())
        ),
        source,
    };
    match out {
        Some(out) => std::fs::OpenOptions::new()
            .append(true)
            .open(out)
            .and_then(|mut f| f.write_all(tail.as_bytes()))
            .map_err(io)?,
        None => std::io::stdout().write_all(tail.as_bytes()).map_err(io)?,
    }
    snap.simple_query("commit").await?;
    Ok(())
}

/// A session on the shadow (at `lsn` or later) holding an exported
/// snapshot, its name, and the sequence values it sees as SQL.
async fn export_snapshot(
    addr: &ShadowAddress,
    lsn: Option<Lsn>,
    timeout: Duration,
) -> Result<(ReplicationClient, String, String), AccessError> {
    addr.session(lsn, timeout).await?;
    let mut snap = addr.sql_session().await?;
    snap.simple_query("begin transaction isolation level repeatable read, read only")
        .await?;
    let snapshot = snap
        .simple_query("select pg_export_snapshot()")
        .await?
        .text(0, 0)
        .unwrap_or_default()
        .to_owned();
    let values = snap.simple_query(SEQUENCE_VALUES_SQL).await?;
    let mut tail = String::from("\n-- Sequence values, as the shadow holds them\n");
    for i in 0..values.rows.len() {
        if let Some(line) = values.text(i, 0) {
            tail.push_str(line);
            tail.push('\n');
        }
    }
    Ok((snap, snapshot, tail))
}
