//! `walshadow init`, `run` and `status`: wiring only; the work is in
//! `walshadow_shadow::bootstrap` and `walshadow_pipeline`.

use std::path::PathBuf;

use anyhow::Context;
use walshadow_config::Config;

#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// The TOML config file (see the README's configuration reference).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Rebuild from scratch: remove the shadow's data directory and the
    /// state, then initialise again (the slot is reused).
    #[arg(long)]
    force: bool,
    /// Load the selected tables' existing rows from the same backup: the
    /// tables the config selects (a [table] pin, a config-table row that
    /// opts the table in, or a pattern without such a row, with an
    /// initial_load other than none)
    /// have their files and the backup's WAL kept in the state directory
    /// (disk: about their size), and the first `run` loads them from there
    /// instead of by their initial_load.
    #[arg(long)]
    bootstrap: bool,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The TOML config file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

pub fn init(args: InitArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    // What `run` would refuse of [clickhouse] (a URL, a CA file, a client
    // certificate) is refused before anything is built.
    if let Some(ch) = &config.clickhouse {
        walshadow_pipeline::stream::clickhouse_client(ch)
            .context("the [clickhouse] section cannot be used")?;
    }
    let report = runtime()?.block_on(walshadow_shadow::bootstrap::init(
        &config,
        args.force,
        args.bootstrap,
    ))?;
    println!("{report}");
    Ok(())
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let log_level = crate::log_level();
    if let (Some(set), Some(level)) = (&log_level, &config.log.level) {
        set(level).map_err(|e| anyhow::anyhow!("[log] level {level:?}: {e}"))?;
    }
    runtime()?.block_on(async {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
            }
            tracing::info!("stopping");
            let _ = stop_tx.send(true);
        });
        // On a worker, not on this thread: the intake's task wakes the
        // stream's at every WAL message, and a worker runs a task it woke
        // itself, where `block_on`'s thread wakes another thread each time
        // (about 20 context switches per source transaction, a third of
        // walshadow's CPU at 1,000 transactions a second).
        let daemon = tokio::spawn(async move {
            walshadow_pipeline::daemon::run(
                &config,
                walshadow_pipeline::daemon::RunOptions {
                    config_path: args.config.clone(),
                    log_level,
                },
                stop_rx,
            )
            .await
        });
        daemon.await.context("the daemon's task failed")??;
        anyhow::Ok(())
    })
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The TOML config file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Print the status as JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn status(args: StatusArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let databases = walshadow_pipeline::databases::all(&config)?;
    if let [only] = databases.as_slice() {
        let report = runtime()?.block_on(walshadow_pipeline::report::status(&only.view))?;
        let text = if args.json {
            format!("{}\n", serde_json::to_string_pretty(&report)?)
        } else {
            report.to_string()
        };
        return crate::print_quietly(&text);
    }
    // Several databases: each one's status under its name. One that has
    // not streamed yet says so and does not hide the others.
    let rt = runtime()?;
    let mut reports = serde_json::Map::new();
    let mut text = String::new();
    for d in &databases {
        let report = rt.block_on(walshadow_pipeline::report::status(&d.view));
        text.push_str(&format!("== database {:?} ==\n", d.name));
        match report {
            Ok(r) => {
                text.push_str(&r.to_string());
                reports.insert(d.name.clone(), serde_json::to_value(&r)?);
            }
            Err(e) => {
                text.push_str(&format!("{e}\n"));
                reports.insert(
                    d.name.clone(),
                    serde_json::json!({ "error": e.to_string() }),
                );
            }
        }
        text.push('\n');
    }
    if args.json {
        text = format!(
            "{}\n",
            serde_json::to_string_pretty(&serde_json::json!({ "databases": reports }))?
        );
    }
    crate::print_quietly(&text)
}
