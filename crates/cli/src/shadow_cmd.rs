//! `walshadow init` and `walshadow run`: wiring only; the work is in
//! `walshadow_shadow::{bootstrap, run}`.

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
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The TOML config file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

pub fn init(args: InitArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let report = runtime()?.block_on(walshadow_shadow::bootstrap::init(&config, args.force))?;
    println!("{report}");
    Ok(())
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    runtime()?.block_on(async {
        let shadow = walshadow_shadow::run::Shadow::start(&config).await?;
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
        let fed = walshadow_shadow::run::feed_until_stopped(&config, &shadow, stop_rx).await;
        let stopped = shadow.stop().await;
        fed?;
        stopped?;
        anyhow::Ok(())
    })
}
