//! `walshadow catalog show` and `walshadow export-schema`: read the shadow
//! (started by `walshadow run`), never the source.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use walshadow_config::Config;
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_shadow::run::{StatePaths, load_init_state};
use walshadow_types::Lsn;
use walshadow_wal_reader::replication::ConnConfig;

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

/// Export the schema of the source as the shadow holds it, as SQL
/// (`pg_dump --schema-only` against the shadow's private socket), at or after
/// an LSN. The source sees no connection.
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
}

fn target(config: &Config, db: Option<String>) -> anyhow::Result<Target> {
    let paths = StatePaths {
        dir: config.state.dir.clone(),
    };
    let state = load_init_state(&paths)?;
    let source = ConnConfig::from_url(&config.source.url)?;
    Ok(Target {
        socket_dir: paths.shadow_socket_dir(),
        port: state.shadow_port,
        user: source.user.clone(),
        db: db
            .or(source.dbname.clone())
            .unwrap_or_else(|| "postgres".into()),
    })
}

async fn session(t: &Target, lsn: Option<Lsn>, timeout: u64) -> anyhow::Result<ShadowCatalog> {
    let mut cat = ShadowCatalog::connect(&t.socket_dir, t.port, &t.user, &t.db)
        .await
        .with_context(|| {
            format!(
                "connecting to the shadow at {}/.s.PGSQL.{} (is `walshadow run` running?)",
                t.socket_dir.display(),
                t.port
            )
        })?;
    if let Some(lsn) = lsn {
        cat.wait_for_lsn(lsn, Duration::from_secs(timeout)).await?;
    }
    Ok(cat)
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

pub fn export(args: ExportArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let t = target(&config, args.db.clone())?;
    runtime()?.block_on(async {
        session(&t, args.lsn, args.timeout).await?;
        anyhow::Ok(())
    })?;
    let mut cmd = std::process::Command::new(config.shadow.pg_bin.join("pg_dump"));
    cmd.args(["--schema-only", "--no-owner", "--no-privileges", "-h"])
        .arg(&t.socket_dir)
        .args(["-p", &t.port.to_string(), "-U", &t.user, "-d", &t.db]);
    if let Some(out) = &args.out {
        cmd.arg("-f").arg(out);
    }
    let status = cmd.status().context("running pg_dump")?;
    if !status.success() {
        bail!("pg_dump against the shadow failed ({status})");
    }
    Ok(())
}
