//! A source with 64 MB WAL segments: the shadow's own WAL sizes hold two of
//! them (PostgreSQL refuses to start otherwise: "min_wal_size must be at
//! least twice wal_segment_size"), and it replays the catalog.

use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Result, ensure};
use walshadow_shadow::run::{Shadow, ShadowSettings};
use walshadow_testkit::{Cluster, ClusterOptions, PgMajor, WorkDir};

mod common;

async fn run(major: PgMajor) -> Result<()> {
    let source = Cluster::start(
        major,
        ClusterOptions::default()
            .wal_segment_size_mb(64)
            .conf("autovacuum", "off"),
    )?;
    let work = WorkDir::new(&format!("segsize-pg{}", major.number()))?;
    let config = common::shadow_config(&source, &work, "walshadow_segsize")?;
    walshadow_shadow::bootstrap::init(&config, false, false).await?;
    let shadow = Shadow::start(&ShadowSettings::from(&config)).await?;
    let conf = std::fs::read_to_string(shadow.data_dir().join("postgresql.conf"))?;
    ensure!(conf.contains("min_wal_size = '128MB'"), "{conf}");
    ensure!(conf.contains("max_wal_size = '256MB'"), "{conf}");
    source.psql("create table later (id int primary key, v text)")?;
    let source = std::sync::Arc::new(source);
    let src = source.clone();
    common::feed_until_replayed(
        &config,
        &shadow,
        move || common::replay_target(&src),
        Duration::from_secs(120),
    )
    .await?;
    common::assert_same_relations(&source, &shadow, &[("public", "later")]).await?;
    shadow.stop().await?;
    Ok(())
}

per_major!(async run => shadow_runs_on_64mb_segments: pg15, pg16, pg17, pg18);
