//! `walshadow teardown`: drops what `init` made on the source.

use std::path::PathBuf;

use walshadow_config::Config;

#[derive(Debug, clap::Args)]
pub struct TeardownArgs {
    /// The TOML config file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Drop the config table ([source] config_table) too, and its schema
    /// once nothing else is in it. Its rows (which tables are opted in)
    /// are lost.
    #[arg(long)]
    drop_config_table: bool,
    /// Do it. Without, print what would be done and change nothing.
    #[arg(long)]
    yes: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn teardown(args: TeardownArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    if !args.yes {
        let mut plan = format!(
            "walshadow teardown would drop the replication slot {:?} on {}",
            config.source.slot,
            walshadow_wal_reader::replication::ConnConfig::from_url(&config.source.url)
                .map(|c| format!("{}:{}", c.host, c.port))
                .unwrap_or_else(|_| "the source".into())
        );
        if args.drop_config_table {
            plan.push_str(&format!(
                " and the config table {} (its schema too once empty)",
                config.source.config_table
            ));
            if !config.source.databases.is_empty() {
                plan.push_str(", and each other followed database's");
            }
        }
        plan.push_str(
            ", then remove init.json from the state directory so that nothing starts on what \
             is left; nothing was changed: pass --yes to do it",
        );
        anyhow::bail!(plan);
    }
    let report = crate::shadow_cmd::runtime()?.block_on(walshadow_pipeline::teardown::teardown(
        &config,
        args.drop_config_table,
    ))?;
    let text = if args.json {
        format!("{}\n", serde_json::to_string_pretty(&report)?)
    } else {
        let mut t = format!(
            "replication slot {:?}: {}\n",
            report.slot,
            if report.slot_dropped {
                "dropped"
            } else {
                "there was none"
            }
        );
        if let Some(dropped) = report.config_table_dropped {
            t.push_str(&format!(
                "config table {}: {}{}\n",
                report.config_table,
                if dropped { "dropped" } else { "there was none" },
                if report.schema_dropped {
                    ", and its empty schema"
                } else {
                    ""
                }
            ));
        }
        for d in &report.databases {
            t.push_str(&format!(
                "config table {} of database {:?}: {}{}\n",
                d.config_table,
                d.database,
                if d.config_table_dropped {
                    "dropped"
                } else {
                    "there was none"
                },
                if d.schema_dropped {
                    ", and its empty schema"
                } else {
                    ""
                }
            ));
        }
        t.push_str("init.json removed: `walshadow init --force` starts over\nleft in place:\n");
        for l in &report.left {
            t.push_str(&format!("  {l}\n"));
        }
        t
    };
    crate::print_quietly(&text)
}
