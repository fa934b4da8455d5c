//! The source raises a setting a hot standby must match (max_connections):
//! its `XLOG_PARAMETER_CHANGE` makes `run` restart the shadow with at least
//! the new value, and the shadow goes on replaying the catalog.

use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_shadow::run::{Shadow, ShadowSettings};
use walshadow_testkit::{Cluster, ClusterOptions, PgMajor, WorkDir};

mod common;

async fn run(major: PgMajor) -> Result<()> {
    let source = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    let work = WorkDir::new(&format!("params-pg{}", major.number()))?;
    let config = common::shadow_config(&source, &work, "walshadow_params")?;
    walshadow_shadow::bootstrap::init(&config, false, false).await?;
    let shadow = Shadow::start(&ShadowSettings::from(&config)).await?;
    source.psql("create table before (id int primary key)")?;
    let before: i32 = source.query_one("show max_connections")?.parse()?;
    let raised = before + 37;
    let source = std::sync::Arc::new(source);
    let src = source.clone();
    common::feed_until_replayed(
        &config,
        &shadow,
        move || common::replay_target(&src),
        Duration::from_secs(120),
    )
    .await?;

    // Raise it on the source: the restart logs XLOG_PARAMETER_CHANGE.
    let mut source =
        std::sync::Arc::try_unwrap(source).map_err(|_| anyhow::anyhow!("source shared"))?;
    source.psql(&format!("alter system set max_connections = {raised}"))?;
    source.restart()?;
    // The testkit restarts on a new port: the config follows.
    let config = common::shadow_config(&source, &work, "walshadow_params")?;
    source.psql("create table after (id int primary key, v text)")?;
    let source = std::sync::Arc::new(source);
    let src = source.clone();
    common::feed_until_replayed(
        &config,
        &shadow,
        move || common::replay_target(&src),
        Duration::from_secs(120),
    )
    .await?;

    let params = std::fs::read_to_string(shadow.data_dir().join("walshadow.params.conf"))
        .context("walshadow.params.conf")?;
    ensure!(
        params.contains(&format!("max_connections = {raised}")),
        "{params}"
    );
    let mut cat =
        ShadowCatalog::connect(&shadow.socket_dir, shadow.port, "postgres", "postgres").await?;
    ensure!(
        cat.relation_by_name("public", "after").await?.is_some(),
        "the shadow did not replay past the change"
    );
    common::assert_same_relations(
        &source,
        &shadow,
        &[("public", "before"), ("public", "after")],
    )
    .await?;
    shadow.stop().await?;
    Ok(())
}

per_major!(async run => shadow_follows_raised_settings: pg15, pg16, pg17, pg18);
