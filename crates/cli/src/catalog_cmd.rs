//! `walshadow catalog show` and `walshadow export-schema`: read the shadow
//! (started by `walshadow run`), never the source.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use walshadow_config::Config;
use walshadow_shadow::access::{ShadowAddress, export_schema};
use walshadow_types::Lsn;

/// Which shadow database to read, and from which LSN on: both commands'.
#[derive(Debug, clap::Args)]
struct ShadowAt {
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
}

impl ShadowAt {
    fn address(&self) -> anyhow::Result<(Config, ShadowAddress)> {
        let config = Config::load(&self.config)?;
        let addr = ShadowAddress::from_config(&config, self.db.clone())?;
        Ok((config, addr))
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout)
    }
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    #[command(flatten)]
    at: ShadowAt,
    /// The relation, as SCHEMA.TABLE.
    #[arg(value_name = "SCHEMA.TABLE")]
    relation: String,
}

/// Export the source's schema from the shadow (pg_dump --schema-only, or a
/// hollow data directory).
///
/// The schema as the shadow holds it, at or after an LSN; the source sees no
/// connection. `--format sql` (default): `pg_dump --schema-only` against the
/// shadow's private socket, plus the sequences' values. `--format datadir`:
/// the shadow's own data directory (a `pg_basebackup` of it), run briefly as
/// a throwaway primary on a private socket to empty every table (TRUNCATE:
/// new empty files, indexes rebuilt) — a data directory of the source's
/// major that starts as a server with every table present and empty,
/// indexes valid, sequences at the shadow's values (OIDs as the source's);
/// `--out DIR` (new or empty) or `--out FILE.tar`. Materialized views are
/// left unpopulated and large objects are removed. Its postgresql.conf is a
/// plain one (the source's is beside it as postgresql.conf.source) and its
/// pg_hba.conf admits local peers and password logins from localhost.
///
/// Out of scope, and so preconditions on the target: extensions must be
/// installable there (the dump says `CREATE EXTENSION`, not what the
/// extension's install script creates); roles and grants (ACLs) are not
/// created (`--no-owner --no-privileges` is used); trigger functions may
/// reference objects the target lacks. Statistics are not exported.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    #[command(flatten)]
    at: ShadowAt,
    /// Write here instead of standard output (`--format datadir`: a new
    /// or empty directory, or FILE.tar).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// sql (pg_dump's) or datadir (a hollow data directory).
    #[arg(long, value_enum, default_value_t = ExportFormat::Sql)]
    format: ExportFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ExportFormat {
    Sql,
    Datadir,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

pub fn show(args: ShowArgs) -> anyhow::Result<()> {
    let (_, addr) = args.at.address()?;
    let Some((schema, table)) = walshadow_types::split_table_key(&args.relation) else {
        bail!("{:?}: give the relation as SCHEMA.TABLE", args.relation);
    };
    let (schema, table) = (schema.as_str(), table.as_str());
    let desc = runtime()?.block_on(addr.read(args.at.lsn, args.at.timeout(), async |cat| {
        cat.relation_by_name(schema, table).await
    }))?;
    let Some(desc) = desc else {
        bail!(
            "{schema}.{table}: no such relation in database {} of the shadow",
            addr.db
        );
    };
    println!("{}", serde_json::to_string(&desc)?);
    Ok(())
}

pub fn export(args: ExportArgs) -> anyhow::Result<()> {
    let (config, addr) = args.at.address()?;
    if args.format == ExportFormat::Datadir {
        let Some(out) = args.out.as_deref() else {
            bail!("--format datadir needs --out DIR (new or empty) or --out FILE.tar");
        };
        let user = walshadow_shadow::process::ServerUser::resolve(config.shadow.run_as.as_deref())?;
        let summary = runtime()?.block_on(walshadow_shadow::export_datadir::export_datadir(
            &addr,
            args.at.lsn,
            args.at.timeout(),
            &config.shadow.pg_bin,
            &user,
            out,
            &config.state.dir,
        ))?;
        eprintln!(
            "exported {}: {} databases, {} tables emptied, {} materialized views left unpopulated, {} large objects removed",
            out.display(),
            summary.databases,
            summary.tables,
            summary.materialized_views,
            summary.large_objects
        );
        return Ok(());
    }
    runtime()?.block_on(export_schema(
        &addr,
        args.at.lsn,
        args.at.timeout(),
        &config.shadow.pg_bin,
        args.out.as_deref(),
    ))?;
    Ok(())
}
