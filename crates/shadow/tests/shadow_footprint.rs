//! The shadow stays catalog-sized while the source loads user data: after
//! `WALSHADOW_FOOTPRINT_MB` (default 2048) of rows, TOASTed and not, the
//! shadow's data directory (pg_wal aside) is under 100 MB, and the marker
//! in every row is in no file under it, pg_wal included.

use std::path::Path;
use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use walshadow_shadow::run::{Shadow, ShadowSettings};

mod common;
use walshadow_testkit::{Cluster, ClusterOptions, Lsn, PgMajor, WorkDir};

const MARKER: &str = "narwhal-marker-31c7";

/// Bytes of the files under `dir`, skipping `pg_wal`; and whether any file
/// (pg_wal included) contains `needle`.
fn scan(
    dir: &Path,
    needle: &[u8],
    size: &mut u64,
    hits: &mut Vec<String>,
    in_wal: bool,
) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.is_dir() {
            let wal = in_wal || entry.file_name() == "pg_wal";
            scan(&path, needle, size, hits, wal)?;
        } else if meta.is_file() {
            if !in_wal {
                *size += meta.len();
            }
            let bytes = std::fs::read(&path)?;
            if bytes.windows(needle.len()).any(|w| w == needle) {
                hits.push(path.display().to_string());
            }
        }
    }
    Ok(())
}

/// Waits until the feed's slot is within `lag` bytes of the source's
/// insert position, so the source can recycle its WAL as it would under a
/// feed that keeps up (the drill inserts far faster than any real load).
fn wait_for_slot(source: &Cluster, lag: u64) -> Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    loop {
        let behind: u64 = source
            .query_one(
                "select pg_current_wal_insert_lsn() - restart_lsn from pg_replication_slots
                 where slot_name = 'walshadow_footprint'",
            )?
            .trim()
            .parse()
            .context("slot lag")?;
        if behind <= lag {
            return Ok(());
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "the feed's slot stayed {behind} bytes behind for 300 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The two drills hold up to ~3 GB of disk each; one at a time keeps a CI
/// machine's disk out of the picture.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn run(major: PgMajor) -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let mb: u64 = std::env::var("WALSHADOW_FOOTPRINT_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2048);
    let source = Cluster::start(
        major,
        ClusterOptions::default()
            .conf("autovacuum", "off")
            // The source checkpoints every ~130 MB, so its pg_wal, the
            // feeder's store and the shadow's pg_wal all recycle as they
            // would in production: the drill's disk use stays near the
            // source's 2 GB of data instead of four copies of its WAL (the
            // testkit's wal_keep_size would hold 1 GB of it).
            .conf("max_wal_size", "256MB")
            .conf("wal_keep_size", "0"),
    )?;
    source.psql(
        "create table narrow (id bigint primary key, v text);
         create table wide (id bigint primary key, v text);
         alter table wide alter column v set storage external;",
    )?;
    let work = WorkDir::new(&format!("footprint-pg{}", major.number()))?;
    let config = common::shadow_config(&source, &work, "walshadow_footprint")?;
    walshadow_shadow::bootstrap::init(&config, false, false).await?;
    let shadow = Shadow::start(&ShadowSettings::from(&config)).await?;
    let source = std::sync::Arc::new(source);
    let src = source.clone();
    common::feed_until_replayed(
        &config,
        &shadow,
        move || -> Result<Lsn> {
            let start = src.insert_lsn()?;
            let mut round = 0u64;
            while src.insert_lsn()?.distance_from(start) < mb << 20 {
                let base = round * 20_000;
                // ~20 MB of narrow rows and ~80 MB of TOASTed ones per round.
                src.psql(&format!(
                    "insert into narrow select g, '{MARKER}' || md5(g::text) from generate_series({}, {}) g;
                     insert into wide select g, repeat('{MARKER}' || md5(g::text), 80) from generate_series({}, {}) g;",
                    base * 10 + 1,
                    base * 10 + 200_000,
                    base + 1,
                    base + 20_000,
                ))?;
                round += 1;
                wait_for_slot(&src, 256 << 20)?;
            }
            common::replay_target(&src)
        },
        Duration::from_secs(600),
    )
    .await?;
    let data_dir = shadow.data_dir().to_owned();
    shadow.stop().await?;
    let (mut size, mut hits) = (0u64, Vec::new());
    scan(&data_dir, MARKER.as_bytes(), &mut size, &mut hits, false)
        .context("scanning the shadow")?;
    eprintln!(
        "PostgreSQL {major}: {mb} MB loaded; shadow data directory {:.1} MB without pg_wal",
        size as f64 / 1e6
    );
    ensure!(hits.is_empty(), "the marker is in {hits:?}");
    ensure!(size < 100 << 20, "shadow data directory is {size} bytes");
    Ok(())
}

per_major!(async run => shadow_stays_catalog_sized: pg15, pg18);
