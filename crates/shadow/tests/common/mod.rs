//! Helpers the shadow's end-to-end tests share.
#![allow(dead_code)] // each test file uses a subset

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use walshadow_config::Config;
use walshadow_intake::feed;
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_shadow::run::{Shadow, ShadowSettings};
use walshadow_testkit::{Cluster, Lsn};

/// The LSN to wait for after work on the source: its flush position, or the
/// page start when that sits right after a page header (replay stops at the
/// page boundary then).
pub fn replay_target(source: &Cluster) -> Result<Lsn> {
    let target = source.flush_lsn()?;
    Ok(if target.0 % 8192 == 24 || target.0 % 8192 == 40 {
        Lsn(target.0 - target.0 % 8192)
    } else {
        target
    })
}

/// Feeds the shadow while `work` runs on a blocking thread, until the
/// shadow has replayed the LSN `work` returns; then stops feeding (the
/// shadow keeps running).
pub async fn feed_until_replayed(
    config: &Config,
    shadow: &Shadow,
    work: impl FnOnce() -> Result<Lsn> + Send + 'static,
    timeout: Duration,
) -> Result<Lsn> {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let work = tokio::task::spawn_blocking(work);
    let settings = ShadowSettings::from(config);
    let fed = feed(&settings, shadow, async {
        let _ = stop_rx.await;
    });
    tokio::pin!(fed);
    let target = tokio::select! {
        r = &mut fed => { r?; anyhow::bail!("feeding stopped early") }
        t = work => t??,
    };
    tokio::select! {
        r = &mut fed => { r?; anyhow::bail!("feeding stopped early") }
        w = shadow.feeder.wait_for_replay(target, timeout) => {
            w.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        }
    };
    let _ = stop_tx.send(());
    fed.await?;
    Ok(target)
}

/// The shadow describes each `(schema, table)` exactly as the source does.
pub async fn assert_same_relations(
    source: &Cluster,
    shadow: &Shadow,
    tables: &[(&str, &str)],
) -> Result<()> {
    let mut theirs =
        ShadowCatalog::connect(&shadow.socket_dir, shadow.port, "postgres", "postgres").await?;
    let mut ours =
        ShadowCatalog::connect(&source.socket_dir(), source.port(), "postgres", "postgres").await?;
    for (schema, table) in tables {
        let a = ours.relation_by_name(schema, table).await?;
        let b = theirs.relation_by_name(schema, table).await?;
        ensure!(
            a.is_some() && a == b,
            "{schema}.{table}: source {a:?}\nshadow {b:?}"
        );
    }
    Ok(())
}

/// Files under `dir` whose bytes contain `needle`.
pub fn files_containing(dir: &std::path::Path, needle: &[u8]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| dir.display().to_string())? {
        let path = entry?.path();
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.is_dir() {
            out.extend(files_containing(&path, needle)?);
        } else if meta.is_file() {
            let bytes = std::fs::read(&path)?;
            if bytes.windows(needle.len()).any(|w| w == needle) {
                out.push(path.display().to_string());
            }
        }
    }
    Ok(out)
}

/// The walshadow config for `source` in `work` (shadow data directory
/// `work/shadow`, slot `slot`).
pub fn shadow_config(
    source: &Cluster,
    work: &walshadow_testkit::WorkDir,
    slot: &str,
) -> Result<Config> {
    let path = walshadow_testkit::write_walshadow_config(
        source,
        work.path(),
        &work.path().join("shadow"),
        slot,
    )?;
    Ok(Config::load(&path)?)
}
