//! `CREATE TABLESPACE` after init: the source's location means nothing on
//! the shadow's host, so the shadow gets an in-place tablespace
//! (`pg_tblspc/<oid>` a directory) — tables and a whole database in it are
//! described as on the source, and their rows never reach the shadow.

use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_shadow::run::{Shadow, ShadowSettings};
use walshadow_testkit::{Cluster, ClusterOptions, PgMajor, WorkDir};

mod common;

const MARKER: &str = "tapir-marker-0d4e";

async fn run(major: PgMajor) -> Result<()> {
    let source = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    let work = WorkDir::new(&format!("tblspc-pg{}", major.number()))?;
    let config = common::shadow_config(&source, &work, "walshadow_tblspc")?;
    walshadow_shadow::bootstrap::init(&config, false, false).await?;
    let shadow = Shadow::start(&ShadowSettings::from(&config)).await?;
    let location = work.sub("source-tablespace")?;
    let source = std::sync::Arc::new(source);
    let src = source.clone();
    common::feed_until_replayed(
        &config,
        &shadow,
        move || {
            src.psql(&format!("create tablespace ts location '{}'", location.display()))?;
            src.psql(&format!(
                "create table tt (id int primary key, v text) tablespace ts;
                 insert into tt select g, '{MARKER}' from generate_series(1, 2000) g;"
            ))?;
            src.psql("create database dts tablespace ts")?;
            src.psql_db(
                "dts",
                &format!("create table in_dts (id int, v text); insert into in_dts values (1, '{MARKER}')"),
            )?;
            common::replay_target(&src)
        },
        Duration::from_secs(120),
    )
    .await?;
    let ts_oid = source.query_one("select oid from pg_tablespace where spcname = 'ts'")?;
    let link = shadow.data_dir().join("pg_tblspc").join(ts_oid.trim());
    let meta = std::fs::symlink_metadata(&link).with_context(|| link.display().to_string())?;
    ensure!(
        meta.is_dir(),
        "{} is not an in-place tablespace directory",
        link.display()
    );
    common::assert_same_relations(&source, &shadow, &[("public", "tt")]).await?;
    let mut dts =
        ShadowCatalog::connect(&shadow.socket_dir, shadow.port, "postgres", "dts").await?;
    ensure!(
        dts.relation_by_name("public", "in_dts").await?.is_some(),
        "the database in the tablespace is not readable on the shadow"
    );
    let found = common::files_containing(shadow.data_dir(), MARKER.as_bytes())?;
    ensure!(found.is_empty(), "the marker is in {found:?}");
    shadow.stop().await?;
    Ok(())
}

per_major!(async run => tablespace_created_after_init: pg15, pg16, pg17, pg18);
