//! `walshadow backup list` and `walshadow backup check`: wiring only; the
//! work is in `walshadow_pipeline::backup_admin`.

use std::path::PathBuf;

use walshadow_config::Config;
use walshadow_pipeline::backup_admin;

#[derive(Debug, clap::Args)]
pub struct BackupArgs {
    /// The TOML config file (its [backup] section names the store).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn list(args: BackupArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let rows = crate::shadow_cmd::runtime()?.block_on(backup_admin::list(&config))?;
    let text = if args.json {
        format!("{}\n", serde_json::to_string_pretty(&rows)?)
    } else {
        backup_admin::BackupList(rows).to_string()
    };
    crate::print_quietly(&text)
}

pub fn check(args: BackupArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let report = crate::shadow_cmd::runtime()?.block_on(backup_admin::check(&config))?;
    let text = if args.json {
        format!("{}\n", serde_json::to_string_pretty(&report)?)
    } else {
        report.to_string()
    };
    crate::print_quietly(&text)?;
    anyhow::ensure!(
        report.problems.is_empty(),
        "backup {} cannot serve a load ({} problem(s) above)",
        report.backup.backup.label,
        report.problems.len()
    );
    Ok(())
}
