//! `run` recycles the filtered WAL the shadow will not read again: after the
//! shadow's restartpoint and a filter checkpoint past it, the store no
//! longer starts at the base backup's segment — and the shadow still works.

use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use walshadow_config::Config;
use walshadow_shadow::run::{Shadow, ShadowSettings};
use walshadow_testkit::{Cluster, ClusterOptions, PgMajor, WorkDir, write_walshadow_config};

mod common;

async fn run(major: PgMajor) -> Result<()> {
    let source = Cluster::start(
        major,
        ClusterOptions::default()
            .wal_segment_size_mb(1)
            .conf("autovacuum", "off")
            .conf("wal_keep_size", "1GB"),
    )?;
    source.psql("create table t (id int primary key, v text)")?;
    let work = WorkDir::new(&format!("recycle-pg{}", major.number()))?;
    let path = write_walshadow_config(
        &source,
        work.path(),
        &work.path().join("shadow"),
        "walshadow_recycle",
    )?;
    // Checkpoint the filter every second.
    let text =
        std::fs::read_to_string(&path)?.replace("[state]", "checkpoint_every_secs = 1\n\n[state]");
    std::fs::write(&path, text)?;
    let config = Config::load(&path)?;
    walshadow_shadow::bootstrap::init(&config, false, false).await?;
    let shadow = Shadow::start(&ShadowSettings::from(&config)).await?;
    let first = shadow.store.start();
    let source = std::sync::Arc::new(source);

    // Several segments of WAL, replayed.
    let src = source.clone();
    common::feed_until_replayed(
        &config,
        &shadow,
        move || {
            for i in 0..6 {
                src.psql(&format!(
                    "insert into t select g, md5(g::text) from generate_series({}, {}) g",
                    i * 20_000 + 1,
                    (i + 1) * 20_000
                ))?;
            }
            // A checkpoint record for the shadow to restart at.
            src.checkpoint()?;
            common::replay_target(&src)
        },
        Duration::from_secs(120),
    )
    .await?;
    // A restartpoint on the shadow (CHECKPOINT on a standby, at the last
    // checkpoint record it replayed), then more WAL
    // and time for a filter checkpoint, which recycles.
    shadow_psql(&shadow, &config, "checkpoint")?;
    let src = source.clone();
    let store = shadow.store.clone();
    common::feed_until_replayed(
        &config,
        &shadow,
        move || {
            src.psql("insert into t select g, 'more' from generate_series(200001, 220000) g")?;
            // The next filter checkpoint (every second) recycles.
            walshadow_testkit::wait_until(
                Duration::from_secs(60),
                "filtered WAL recycled",
                || Ok(store.start() > first),
            )?;
            common::replay_target(&src)
        },
        Duration::from_secs(120),
    )
    .await?;
    common::assert_same_relations(&source, &shadow, &[("public", "t")]).await?;
    shadow.stop().await?;
    Ok(())
}

/// Runs `sql` on the shadow over its socket, as walshadow's own OS user
/// (the one peer authentication lets in as the source's role).
fn shadow_psql(shadow: &Shadow, config: &Config, sql: &str) -> Result<String> {
    let out = std::process::Command::new(config.shadow.pg_bin.join("psql"))
        .current_dir("/")
        .env_remove("PGPASSWORD")
        .args(["-X", "-q", "-A", "-t", "-h"])
        .arg(&shadow.socket_dir)
        .args([
            "-p",
            &shadow.port.to_string(),
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-c",
            sql,
        ])
        .output()
        .context("running psql")?;
    ensure!(
        out.status.success(),
        "psql on the shadow: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

per_major!(async run => filtered_wal_is_recycled: pg15, pg16, pg17, pg18);
