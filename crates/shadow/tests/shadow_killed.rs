//! The shadow's postmaster killed (`kill -9`, the OOM killer's way) while it
//! is fed: the feed starts it again, and a reconnecting catalog session
//! answers again only once the shadow has replayed what it answered at
//! before (a restarted standby takes connections at consistency, which can
//! be behind that).

use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use walshadow_intake::feed;
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_shadow::postmaster::Postmaster;
use walshadow_shadow::run::{Shadow, ShadowSettings};
use walshadow_testkit::{Cluster, ClusterOptions, PgMajor, WorkDir};

mod common;

async fn run(major: PgMajor) -> Result<()> {
    let source = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    let work = WorkDir::new(&format!("killed-pg{}", major.number()))?;
    let config = common::shadow_config(&source, &work, "walshadow_killed")?;
    walshadow_shadow::bootstrap::init(&config, false, false).await?;
    let settings = ShadowSettings::from(&config);
    let shadow = Shadow::start(&settings).await?;
    let source = std::sync::Arc::new(source);
    let src = source.clone();
    let target = common::feed_until_replayed(
        &config,
        &shadow,
        move || {
            src.psql("create table t1 (id int primary key, v text)")?;
            common::replay_target(&src)
        },
        Duration::from_secs(120),
    )
    .await?;
    let mut cat = ShadowCatalog::connect(&shadow.socket_dir, shadow.port, "postgres", "postgres")
        .await?
        .reconnecting();
    cat.expect_replayed(target);
    ensure!(cat.relation_by_name("public", "t1").await?.is_some());

    let pid = Postmaster::read(shadow.data_dir())
        .pid()
        .context("no shadow postmaster to kill")?;
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()?;
    ensure!(killed.success(), "kill -9 {pid}");

    // Fed again, the shadow is started again by the feed's check; the
    // session's next query connects again and waits for the floor.
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (t1, replayed) = {
        let fed = feed(&settings, &shadow, async {
            let _ = stop_rx.await;
        });
        tokio::pin!(fed);
        let answer = tokio::select! {
            r = &mut fed => { r?; anyhow::bail!("feeding stopped early") }
            a = async {
                // The killed postmaster's backends may answer for a moment:
                // query once a new postmaster is up.
                let deadline = std::time::Instant::now() + Duration::from_secs(60);
                loop {
                    match Postmaster::read(shadow.data_dir()) {
                        Postmaster::Up(p) if p != pid => break,
                        _ => {}
                    }
                    ensure!(std::time::Instant::now() < deadline, "the shadow was not started again");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let t1 = cat.relation_by_name("public", "t1").await?;
                let replayed = cat.replay_lsn().await?;
                anyhow::Ok((t1, replayed))
            } => a?,
        };
        let _ = stop_tx.send(());
        fed.await?;
        answer
    };
    ensure!(t1.is_some(), "t1 is gone after the restart");
    ensure!(
        replayed >= target,
        "the session answered at {replayed}, before {target} it had answered at"
    );
    shadow.stop().await?;
    Ok(())
}

per_major!(async run => killed_shadow_is_started_again: pg15, pg16, pg17, pg18);
