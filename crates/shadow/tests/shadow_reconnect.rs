//! `run` survives losing the source: the walsender is terminated mid-stream,
//! feeding starts again from the last checkpoint, and the shadow catches up.

use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result};
use walshadow_intake::feed_until_stopped;
use walshadow_shadow::run::{Shadow, ShadowSettings};
use walshadow_testkit::{Cluster, ClusterOptions, PgMajor, WorkDir};

mod common;

async fn run(major: PgMajor) -> Result<()> {
    let source = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    let work = WorkDir::new(&format!("reconnect-pg{}", major.number()))?;
    let config = common::shadow_config(&source, &work, "walshadow_reconnect")?;
    walshadow_shadow::bootstrap::init(&config, false, false).await?;
    let shadow = Shadow::start(&ShadowSettings::from(&config)).await?;
    let source = std::sync::Arc::new(source);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let src = source.clone();
    let work_done = tokio::task::spawn_blocking(move || -> Result<_> {
        src.psql("create table one (id int primary key)")?;
        // Wait for the walsender, then cut it.
        walshadow_testkit::wait_until(Duration::from_secs(30), "walshadow streaming", || {
            Ok(src.query_one("select count(*) from pg_stat_replication")? == "1")
        })?;
        src.psql("select pg_terminate_backend(pid) from pg_stat_replication")?;
        src.psql("create table two (id int primary key, v text)")?;
        common::replay_target(&src)
    });
    let settings = ShadowSettings::from(&config);
    {
        let fed = feed_until_stopped(&settings, &shadow, stop_rx);
        tokio::pin!(fed);
        let target = tokio::select! {
            r = &mut fed => { r?; anyhow::bail!("feeding stopped early") }
            t = work_done => t??,
        };
        tokio::select! {
            r = &mut fed => { r?; anyhow::bail!("feeding stopped early") }
            w = shadow.feeder.wait_for_replay(target, Duration::from_secs(120)) => {
                w.map_err(|e| anyhow::anyhow!("{e:?}")).context("after the walsender was terminated")?;
            }
        };
        stop_tx.send(true)?;
        fed.await?;
    }
    common::assert_same_relations(&source, &shadow, &[("public", "one"), ("public", "two")])
        .await?;
    shadow.stop().await?;
    Ok(())
}

per_major!(async run => feeding_survives_a_lost_source_connection: pg15, pg16, pg17, pg18);
