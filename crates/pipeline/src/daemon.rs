//! `walshadow run`: the shadow kept fed and, with tables pinned, the
//! streaming pipeline beside it on the same WAL.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use walshadow_config::Config;
use walshadow_shadow::run::{RunError, Shadow, StatePaths, WalTap, load_init_state};

use crate::progress::Progress;
use crate::stream::{StreamError, Streamer};

/// Raw WAL chunks (≤ 128 KiB each) queued between the feed and the
/// pipeline: bounds the memory between them.
const TAP_QUEUE: usize = 64;

/// Why `run` stopped.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Stream(#[from] StreamError),
    #[error(transparent)]
    Progress(#[from] crate::progress::ProgressError),
    #[error(
        "{path}: progress of the source with system identifier {found}, but this state \
         directory follows {expected}; use a new state directory for another source"
    )]
    OtherSource {
        path: std::path::PathBuf,
        found: u64,
        expected: u64,
    },
}

/// Runs until `stop` turns true.
pub async fn run(config: &Config, stop: watch::Receiver<bool>) -> Result<(), DaemonError> {
    // Without a destination only the shadow runs; with one, tables come
    // from the config file and from the config table.
    if config.clickhouse.is_none() {
        let shadow = Shadow::start(config).await?;
        let fed = walshadow_shadow::run::feed_until_stopped(config, &shadow, stop).await;
        let stopped = shadow.stop().await;
        fed?;
        stopped?;
        return Ok(());
    }
    let paths = StatePaths {
        dir: config.state.dir.clone(),
    };
    let init = load_init_state(&paths)?;
    let mut first_run = false;
    let progress = match Progress::read(&config.state.dir)? {
        Some(p) if p.system_id != init.system_id => {
            return Err(DaemonError::OtherSource {
                path: config.state.dir.join(Progress::FILE),
                found: p.system_id,
                expected: init.system_id,
            });
        }
        Some(p) => p,
        None => {
            // Tables stream from the point the shadow becomes consistent:
            // transactions committed before it are not emitted.
            let mut p = Progress::new(init.system_id, init.backup_end);
            p.restart = init.backup_start;
            first_run = true;
            p
        }
    };
    tracing::info!(
        applied = %progress.applied,
        restart = %progress.restart,
        tables = config.tables.len(),
        "streaming to ClickHouse"
    );
    // The shadow never replays past what the pipeline has settled.
    let shadow = Arc::new(Shadow::start_held(config, progress.applied).await?);
    let (hold_tx, hold_rx) = watch::channel(progress.restart);
    let (tx, rx) = mpsc::channel(TAP_QUEUE);
    let metrics = crate::metrics::Metrics::new();
    // Kept for the whole run: dropping it stops the endpoint.
    let _metrics_server = match &config.metrics {
        Some(m) => match metrics.serve(m.listen).await {
            Ok(server) => {
                tracing::info!(listen = %server.local_addr(), "serving Prometheus metrics at /metrics");
                Some(server)
            }
            Err(e) => {
                stop_shadow(shadow).await;
                return Err(StreamError::State(e.to_string()).into());
            }
        },
        None => None,
    };
    let streamer = match Streamer::new(
        config,
        Arc::clone(&shadow),
        progress,
        hold_tx,
        metrics,
        first_run,
    )
    .await
    {
        Ok(s) => s,
        Err(e) => {
            stop_shadow(shadow).await;
            return Err(e.into());
        }
    };
    let stream_task = tokio::spawn(streamer.run(rx));
    let tap = WalTap { tx, hold: hold_rx };
    let fed =
        walshadow_shadow::run::feed_tapped_until_stopped(config, &shadow, Some(tap), stop).await;
    // The tap is closed: the pipeline flushes and records its progress.
    let streamed = match stream_task.await {
        Ok(r) => r,
        Err(e) => Err(StreamError::State(format!(
            "the streaming task failed: {e}"
        ))),
    };
    stop_shadow(shadow).await;
    // The pipeline's own error explains a feed that stopped because of it.
    streamed?;
    fed?;
    Ok(())
}

async fn stop_shadow(shadow: Arc<Shadow>) {
    match Arc::try_unwrap(shadow) {
        Ok(s) => {
            if let Err(e) = s.stop().await {
                tracing::warn!("stopping the shadow: {e}");
            }
        }
        Err(_) => tracing::warn!("the shadow is still in use; leaving it running"),
    }
}
