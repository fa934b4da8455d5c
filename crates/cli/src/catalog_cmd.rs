//! `walshadow catalog show` and `walshadow export-schema`: read the shadow
//! (started by `walshadow run`), never the source.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use walshadow_config::Config;
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_shadow::run::{StatePaths, load_init_state};
use walshadow_types::Lsn;
use walshadow_wal_reader::replication::{ConnConfig, Host, ReplicationClient, SslMode};

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The TOML config file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Wait until the shadow has replayed this LSN first.
    #[arg(long, value_name = "LSN")]
    lsn: Option<Lsn>,
    /// Database (default: the one in [source] url).
    #[arg(long)]
    db: Option<String>,
    /// How long to wait for --lsn.
    #[arg(long, default_value = "60", value_name = "SECONDS")]
    timeout: u64,
    /// The relation, as SCHEMA.TABLE.
    #[arg(value_name = "SCHEMA.TABLE")]
    relation: String,
}

/// Export the source's schema from the shadow (pg_dump --schema-only).
///
/// The schema as the shadow holds it, as SQL (`pg_dump --schema-only`
/// against the shadow's private socket), at or after an LSN. The source sees
/// no connection.
///
/// Out of scope, and so preconditions on the target: extensions must be
/// installable there (the dump says `CREATE EXTENSION`, not what the
/// extension's install script creates); roles and grants (ACLs) are not
/// created (`--no-owner --no-privileges` is used); trigger functions may
/// reference objects the target lacks. Statistics are not exported.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The TOML config file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Wait until the shadow has replayed this LSN first.
    #[arg(long, value_name = "LSN")]
    lsn: Option<Lsn>,
    /// Database (default: the one in [source] url).
    #[arg(long)]
    db: Option<String>,
    /// Write here instead of standard output.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// How long to wait for --lsn.
    #[arg(long, default_value = "60", value_name = "SECONDS")]
    timeout: u64,
}

struct Target {
    socket_dir: PathBuf,
    port: u16,
    user: String,
    db: String,
    /// The database of [source] url, which exists on the shadow before any
    /// LSN walshadow serves (unlike a --db created later on the source).
    url_db: String,
}

fn target(config: &Config, db: Option<String>) -> anyhow::Result<Target> {
    let paths = StatePaths {
        dir: config.state.dir.clone(),
    };
    let state = load_init_state(&paths)?;
    let source = ConnConfig::from_url(&config.source.url)?;
    let url_db = source.dbname.clone().unwrap_or_else(|| "postgres".into());
    Ok(Target {
        socket_dir: paths.shadow_socket_dir(),
        port: state.shadow_port,
        user: source.user.clone(),
        db: db.unwrap_or_else(|| url_db.clone()),
        url_db,
    })
}

async fn connect(t: &Target, db: &str) -> anyhow::Result<ShadowCatalog> {
    ShadowCatalog::connect(&t.socket_dir, t.port, &t.user, db)
        .await
        .with_context(|| {
            format!(
                "connecting to database {db} of the shadow at {}/.s.PGSQL.{} (is `walshadow run` running?)",
                t.socket_dir.display(),
                t.port
            )
        })
}

/// A session on `t.db` once the shadow has replayed `lsn`. The wait runs in
/// the url's database: `t.db` may be created by WAL not yet replayed.
async fn session(t: &Target, lsn: Option<Lsn>, timeout: u64) -> anyhow::Result<ShadowCatalog> {
    if let Some(lsn) = lsn {
        let mut cat = connect(t, &t.url_db).await?;
        cat.wait_for_lsn(lsn, Duration::from_secs(timeout)).await?;
        if t.db == t.url_db {
            return Ok(cat);
        }
    }
    connect(t, &t.db).await
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

pub fn show(args: ShowArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let t = target(&config, args.db.clone())?;
    let Some((schema, table)) = args.relation.split_once('.') else {
        bail!("{:?}: give the relation as SCHEMA.TABLE", args.relation);
    };
    let desc = runtime()?.block_on(async {
        let mut cat = session(&t, args.lsn, args.timeout).await?;
        anyhow::Ok(cat.relation_by_name(schema, table).await?)
    })?;
    let Some(desc) = desc else {
        bail!(
            "{schema}.{table}: no such relation in database {} of the shadow",
            t.db
        );
    };
    println!("{}", serde_json::to_string(&desc)?);
    Ok(())
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

/// A plain SQL session on the shadow (`ShadowCatalog` keeps its own).
async fn sql_session(t: &Target) -> anyhow::Result<ReplicationClient> {
    let mut cfg = ConnConfig::from_url(&format!("postgres://{}@localhost/{}", t.user, t.db))?;
    cfg.host = Host::UnixDir(t.socket_dir.clone());
    cfg.port = t.port;
    cfg.sslmode = SslMode::Disable;
    cfg.physical = false;
    cfg.application_name = Some("walshadow-export".into());
    Ok(ReplicationClient::connect(&cfg).await?)
}

/// `pg_dump --schema-only` of the shadow, then the sequences' values (a
/// schema-only dump leaves them out), both read in one exported snapshot so
/// that every `setval` names a sequence the dump creates.
pub fn export(args: ExportArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let t = target(&config, args.db.clone())?;
    runtime()?.block_on(async {
        session(&t, args.lsn, args.timeout).await?;
        let mut snap = sql_session(&t).await?;
        snap.simple_query("begin transaction isolation level repeatable read, read only")
            .await?;
        let snapshot = snap
            .simple_query("select pg_export_snapshot()")
            .await?
            .text(0, 0)
            .context("pg_export_snapshot() on the shadow returned nothing")?
            .to_owned();
        let values = snap
            .simple_query(SEQUENCE_VALUES_SQL)
            .await
            .context("reading sequence values on the shadow (needs SELECT on every sequence)")?;
        let setvals: Vec<&str> = (0..values.rows.len())
            .filter_map(|i| values.text(i, 0))
            .collect();

        let mut cmd = std::process::Command::new(config.shadow.pg_bin.join("pg_dump"));
        cmd.args(["--schema-only", "--no-owner", "--no-privileges"])
            .arg(format!("--snapshot={snapshot}"))
            .arg("-h")
            .arg(&t.socket_dir)
            .args(["-p", &t.port.to_string(), "-U", &t.user, "-d", &t.db]);
        if let Some(out) = &args.out {
            cmd.arg("-f").arg(out);
        }
        // The session holding the snapshot stays open until pg_dump is done.
        let status = cmd.status().context("running pg_dump")?;
        if !status.success() {
            bail!("pg_dump against the shadow failed ({status})");
        }
        let mut tail = String::from("\n-- Sequence values, as the shadow holds them\n");
        for line in setvals {
            tail.push_str(line);
            tail.push('\n');
        }
        match &args.out {
            Some(out) => {
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(out)
                    .with_context(|| format!("appending to {}", out.display()))?;
                f.write_all(tail.as_bytes())
                    .with_context(|| format!("appending to {}", out.display()))?;
            }
            None => std::io::stdout().write_all(tail.as_bytes())?,
        }
        snap.simple_query("commit").await?;
        anyhow::Ok(())
    })
}
