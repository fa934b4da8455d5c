//! `walshadow ctl`: wiring only; the socket and its protocol are in
//! `walshadow_pipeline::control`.

use std::path::PathBuf;

use anyhow::Context;
use walshadow_config::Config;
use walshadow_pipeline::control::{Command, request};

#[derive(Debug, clap::Args)]
pub struct CtlArgs {
    /// The TOML config file (its [state] dir holds the socket).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
    #[arg(value_enum)]
    command: CtlCommand,
}

/// What to ask the running `walshadow run`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum CtlCommand {
    /// The running stream's status document, now (the fields of
    /// status.json: positions, tables, ClickHouse's health, the pause).
    Status,
    /// Land the rows the stream decoded in ClickHouse, then take no more
    /// WAL: nothing is applied until `resume`, across restarts too. The
    /// source's slot keeps the WAL meanwhile (its pg_wal grows). Loads
    /// under way go on; none starts or swaps until `resume`.
    Pause,
    /// Take WAL again after a pause.
    Resume,
    /// Read the config file again (as SIGHUP does). A file that does not
    /// validate changes nothing; otherwise [log] level, the batch and flush
    /// settings, ClickHouse's url, credentials and TLS, and [table]
    /// sections added or removed (by name or by pattern) apply at once, and
    /// the answer names what else changed and waits for a restart.
    Reload,
}

pub fn ctl(args: CtlArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let cmd = match args.command {
        CtlCommand::Status => Command::Status,
        CtlCommand::Pause => Command::Pause,
        CtlCommand::Resume => Command::Resume,
        CtlCommand::Reload => Command::Reload,
    };
    let reply = crate::shadow_cmd::runtime()?
        .block_on(request(&config.state.dir, cmd))
        .with_context(|| format!("walshadow ctl {}", cmd.name()))?;
    if args.json {
        crate::print_quietly(&format!("{}\n", serde_json::to_string_pretty(&reply)?))?;
    } else if let Some(status) = &reply.status {
        crate::print_quietly(&format!("{}\n", serde_json::to_string_pretty(status)?))?;
    } else {
        crate::print_quietly(&format!("{}\n", reply.message))?;
    }
    if reply.ok {
        Ok(())
    } else {
        anyhow::bail!("{}", reply.message)
    }
}
