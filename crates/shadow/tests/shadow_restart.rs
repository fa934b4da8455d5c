//! Restarting `run` from a filter checkpoint, on PostgreSQL 15 and 18.
//!
//! Run 1 feeds the shadow through a DDL drill; a periodic checkpoint (1 s)
//! advances the slot while it runs, and the clean stop checkpoints again.
//! While walshadow is down the source runs more DDL and DML and recycles its
//! WAL (no `wal_keep_size`): the base backup's segment is gone, so run 2 can
//! only work from the checkpoint. Oracles: the slot's `restart_lsn` equals
//! the checkpoint and is past the backup's segment; the backup's segment is
//! no longer on the source; after run 2 the shadow's catalog describes every
//! user table as the source's does; no user value (a marker) is in the
//! shadow's data directory or the filtered WAL.

use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use walshadow_config::Config;
use walshadow_intake::feed;
use walshadow_shadow::filter::checkpoint::{self, Identity};
use walshadow_shadow::run::{Shadow, ShadowSettings};
use walshadow_testkit::{
    Cluster, ClusterOptions, Lsn, PgMajor, WorkDir, wait_until, write_walshadow_config,
};

mod common;

const MARKER: &str = "quokka-marker-91c2";
const SLOT: &str = "walshadow_restart";

fn slot_restart_lsn(source: &Cluster) -> Result<Lsn> {
    let text = source.query_one(&format!(
        "select restart_lsn from pg_replication_slots where slot_name = '{SLOT}'"
    ))?;
    text.trim().parse().context("restart_lsn")
}

/// Runs `sqls` on the source while `feed` runs, waits until the shadow
/// replayed them, runs `during` (blocking) while feeding goes on, then stops
/// feeding and the shadow.
async fn feed_through(
    config: &Config,
    source: &std::sync::Arc<Cluster>,
    sqls: Vec<String>,
    during: impl FnOnce() -> Result<()> + Send + 'static,
) -> Result<()> {
    let settings = ShadowSettings::from(config);
    let shadow = Shadow::start(&settings).await?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let src = source.clone();
    let drill = tokio::task::spawn_blocking(move || -> Result<Lsn> {
        for sql in &sqls {
            src.psql(sql).with_context(|| sql.clone())?;
        }
        common::replay_target(&src)
    });
    let result = async {
        let fed = feed(&settings, &shadow, async {
            let _ = stop_rx.await;
        });
        tokio::pin!(fed);
        let target = tokio::select! {
            r = &mut fed => { r?; anyhow::bail!("feeding stopped early") }
            t = drill => t??,
        };
        tokio::select! {
            r = &mut fed => { r?; anyhow::bail!("feeding stopped early") }
            w = shadow.feeder.wait_for_replay(target, Duration::from_secs(120)) => {
                w.map_err(|e| anyhow::anyhow!("{e:?}"))?;
            }
        };
        eprintln!("shadow replayed {target}");
        let checked = tokio::select! {
            r = &mut fed => { r?; anyhow::bail!("feeding stopped early") }
            c = tokio::task::spawn_blocking(during) => c?,
        };
        let _ = stop_tx.send(());
        fed.await?;
        checked
    }
    .await;
    let stopped = shadow.stop().await;
    result?;
    stopped?;
    Ok(())
}

async fn run(major: PgMajor) -> Result<()> {
    // No wal_keep_size: only the slot holds WAL.
    let source = Cluster::start(
        major,
        ClusterOptions::default()
            .conf("autovacuum", "off")
            .conf("wal_keep_size", "0"),
    )?;
    source.psql(&format!(
        "create table before_init (id int primary key, v text);
         insert into before_init select g, '{MARKER}' || g from generate_series(1, 2000) g;"
    ))?;
    let work = WorkDir::new(&format!("restart-pg{}", major.number()))?;
    let config_path =
        write_walshadow_config(&source, work.path(), &work.path().join("shadow"), SLOT)?;
    let text = std::fs::read_to_string(&config_path)?
        .replace("[shadow]\n", "[shadow]\ncheckpoint_every_secs = 1\n");
    std::fs::write(&config_path, text)?;
    let config = Config::load(&config_path)?;
    let report = walshadow_shadow::bootstrap::init(&config, false, false).await?;
    eprintln!("init: {report}");
    let state = report.state.clone();
    let identity = Identity {
        system_id: state.system_id,
        major,
        backup_start: state.backup_start,
    };
    let seg = u64::from(state.segment_size);
    let backup_segment =
        source.query_one(&format!("select pg_walfile_name('{}')", state.backup_start))?;
    let source = std::sync::Arc::new(source);

    // Run 1: a drill crossing segments; a periodic checkpoint moves the slot.
    let run1 = vec![
        "create type mood as enum ('sad', 'ok', 'happy')".to_owned(),
        "create table t1 (id int primary key, v text, m mood)".into(),
        format!("insert into t1 select g, '{MARKER}', 'ok' from generate_series(1, 3000) g"),
        "select pg_switch_wal()".into(),
        "alter table t1 add column d int default 7".into(),
        "create index on t1 (v)".into(),
        "vacuum full t1".into(),
        "select pg_switch_wal()".into(),
        "create sequence s1".into(),
        "select nextval('s1')".into(),
    ];
    let state_dir = config.state.dir.clone();
    let src = source.clone();
    feed_through(&config, &source, run1, move || {
        wait_until(
            Duration::from_secs(30),
            "a checkpoint past the backup's segment reported to the slot",
            || {
                let Some(c) = checkpoint::read(&state_dir, identity)? else {
                    return Ok(false);
                };
                Ok(c.lsn.0 / seg > state.backup_start.0 / seg && slot_restart_lsn(&src)? == c.lsn)
            },
        )
    })
    .await?;

    let ckpt = checkpoint::read(&config.state.dir, identity)?
        .context("no checkpoint after a clean stop")?;
    eprintln!(
        "checkpoint at {} (backup start {})",
        ckpt.lsn, state.backup_start
    );
    ensure!(
        ckpt.lsn.0 / seg > state.backup_start.0 / seg,
        "checkpoint {} is still in the backup's segment ({})",
        ckpt.lsn,
        state.backup_start
    );
    // The walsender takes the last status update as it sees the stream end.
    wait_until(
        Duration::from_secs(10),
        "the slot at the final checkpoint",
        || Ok(slot_restart_lsn(&source)? == ckpt.lsn),
    )?;

    // walshadow is down: DDL and DML go on, the source recycles its WAL.
    for sql in [
        "alter table t1 rename column v to v2".to_owned(),
        format!("insert into t1 select g, '{MARKER}', 'sad', 1 from generate_series(3001, 4000) g"),
        "create table parent (id int, k int) partition by range (k)".into(),
        "create table part1 partition of parent for values from (0) to (100)".into(),
        "insert into parent select g, g % 100 from generate_series(1, 500) g".into(),
        "select pg_switch_wal()".into(),
        "checkpoint".into(),
        "select pg_switch_wal()".into(),
        "checkpoint".into(),
    ] {
        source.psql(&sql).with_context(|| sql.clone())?;
    }
    let gone = source.query_one(&format!(
        "select count(*) from pg_ls_waldir() where name = '{backup_segment}'"
    ))?;
    ensure!(
        gone.trim() == "0",
        "the source still holds the backup's segment {backup_segment}: the restart would not prove it resumes from the checkpoint"
    );

    // Run 2: resumes from the checkpoint; more DDL while it runs.
    let run2 = vec![
        "alter table t1 drop column d".to_owned(),
        "truncate part1".into(),
        "vacuum full pg_constraint".into(),
        "alter table before_init replica identity full".into(),
        format!("insert into before_init values (-1, '{MARKER}')"),
    ];
    let src = source.clone();
    let done = ckpt.lsn;
    feed_through(&config, &source, run2, move || {
        ensure!(slot_restart_lsn(&src)? >= done, "the slot went back");
        Ok(())
    })
    .await?;
    let ckpt2 = checkpoint::read(&config.state.dir, identity)?.context("no checkpoint")?;
    ensure!(ckpt2.lsn > ckpt.lsn, "run 2 did not checkpoint past run 1");

    // The shadow's catalog, as of the end: start it once more (feeding
    // from the second checkpoint) and compare.
    let shadow = Shadow::start(&ShadowSettings::from(&config)).await?;
    let compared = async {
        let src = source.clone();
        common::feed_until_replayed(
            &config,
            &shadow,
            move || common::replay_target(&src),
            Duration::from_secs(120),
        )
        .await?;
        common::assert_same_relations(
            &source,
            &shadow,
            &[
                ("public", "before_init"),
                ("public", "t1"),
                ("public", "parent"),
                ("public", "part1"),
                ("public", "s1"),
            ],
        )
        .await
    }
    .await;
    let stopped = shadow.stop().await;
    compared?;
    stopped?;

    let mut found = common::files_containing(&config.shadow.data_dir, MARKER.as_bytes())?;
    found.extend(common::files_containing(
        &config.state.dir.join("wal"),
        MARKER.as_bytes(),
    )?);
    ensure!(found.is_empty(), "the marker is in {found:?}");
    Ok(())
}

per_major!(async run => run_resumes_from_the_filter_checkpoint: pg15, pg16, pg17, pg18);
