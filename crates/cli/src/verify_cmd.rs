//! `walshadow verify`: wiring only; the work is in
//! `walshadow_pipeline::verify`.

use std::path::PathBuf;
use std::time::Duration;

use walshadow_pipeline::verify::{DEFAULT_SHOW, Report, VerifyOptions, verify};

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The TOML config file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// With [source] databases: the database the tables are in (default:
    /// the url's).
    #[arg(long, value_name = "NAME")]
    database: Option<String>,
    /// The tables, as `schema.name` (default: every table streaming).
    #[arg(value_name = "SCHEMA.TABLE")]
    tables: Vec<String>,
    /// Seconds to wait for `walshadow run` to apply up to the position a
    /// table is compared at.
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    wait: u64,
    /// Differing keys listed per table, at most 1000 (all are counted).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SHOW)]
    show: usize,
    /// Keep each `<destination>__wsverify` table (the source rows as
    /// copied) instead of dropping it.
    #[arg(long)]
    keep: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn verify_cmd(args: VerifyArgs) -> anyhow::Result<()> {
    let config = crate::load_view(&args.config, args.database.as_deref())?;
    let opts = VerifyOptions {
        tables: args.tables,
        wait: Duration::from_secs(args.wait),
        show: args.show,
        keep: args.keep,
    };
    let verdicts = crate::shadow_cmd::runtime()?.block_on(verify(&config, &opts))?;
    let text = if args.json {
        format!("{}\n", serde_json::to_string_pretty(&verdicts)?)
    } else {
        Report(&verdicts).to_string()
    };
    crate::print_quietly(&text)?;
    let differing = verdicts.iter().filter(|v| v.differs()).count();
    let unverified = verdicts.iter().filter(|v| v.not_verified.is_some()).count();
    if differing > 0 {
        anyhow::bail!("{differing} of {} tables differ", verdicts.len());
    }
    if unverified > 0 {
        anyhow::bail!(
            "{unverified} of {} tables could not be verified",
            verdicts.len()
        );
    }
    Ok(())
}
