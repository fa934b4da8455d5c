//! The shadow end to end on PostgreSQL 15 and 18: `init` lands the catalog,
//! `run` feeds filtered WAL, and after a DDL drill interleaved with DML the
//! shadow's catalog describes every user table exactly as the source's does,
//! while no user value (a marker written before and after init) is in any
//! file under the shadow's data directory, pg_wal included.

use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_shadow::run::{Shadow, ShadowSettings};

mod common;
use walshadow_testkit::{Cluster, ClusterOptions, PgMajor, WorkDir};

const MARKER: &str = "okapi-marker-5be1";

async fn run(major: PgMajor) -> Result<()> {
    let source = Cluster::start(
        major,
        ClusterOptions::default()
            .conf("wal_keep_size", "1GB")
            .conf("autovacuum", "off"),
    )?;
    source.psql(&format!(
        "create table before_init (id int primary key, v text);
         insert into before_init select g, '{MARKER}' || g from generate_series(1, 2000) g;
         create sequence before_seq;"
    ))?;
    let work = WorkDir::new(&format!("e2e-pg{}", major.number()))?;
    let config = common::shadow_config(&source, &work, "walshadow_e2e")?;
    let report = walshadow_shadow::bootstrap::init(&config, false, false).await?;
    eprintln!("init: {report}");

    let shadow = Shadow::start(&ShadowSettings::from(&config)).await?;
    let source = std::sync::Arc::new(source);
    let src = source.clone();
    let target = common::feed_until_replayed(
        &config,
        &shadow,
        move || {
            for sql in [
                "create type mood as enum ('sad', 'ok', 'happy')".to_owned(),
                "create domain posint as int check (value > 0)".into(),
                "create table t1 (id int primary key, v text, m mood, p posint)".into(),
                format!(
                    "insert into t1 select g, '{MARKER}', 'ok', g from generate_series(1, 3000) g"
                ),
                "alter table t1 add column d int default 7".into(),
                "alter table t1 drop column p".into(),
                "alter table t1 rename column v to v2".into(),
                "create index on t1 (v2)".into(),
                "vacuum full t1".into(),
                "vacuum full pg_constraint".into(),
                "create table parent (id int, k int) partition by range (k)".into(),
                "create table part1 partition of parent for values from (0) to (100)".into(),
                "insert into parent select g, g % 100 from generate_series(1, 500) g".into(),
                "truncate part1".into(),
                "create sequence s2".into(),
                "select nextval('s2')".into(),
                "alter table before_init replica identity full".into(),
            ] {
                src.psql(&sql).with_context(|| sql.clone())?;
            }
            common::replay_target(&src)
        },
        Duration::from_secs(120),
    )
    .await?;
    eprintln!("shadow replayed {target}");
    common::assert_same_relations(
        &source,
        &shadow,
        &[
            ("public", "before_init"),
            ("public", "t1"),
            ("public", "parent"),
            ("public", "part1"),
            ("public", "s2"),
        ],
    )
    .await?;
    let mut theirs =
        ShadowCatalog::connect(&shadow.socket_dir, shadow.port, "postgres", "postgres").await?;
    let t1 = theirs
        .relation_by_name("public", "t1")
        .await?
        .context("t1 on the shadow")?;
    let mood = t1
        .types
        .iter()
        .find(|t| t.name == "mood")
        .context("enum mood")?;
    ensure!(mood.enum_labels == ["sad", "ok", "happy"], "{mood:?}");
    ensure!(
        t1.attributes.iter().any(|a| a.dropped),
        "the dropped column is listed"
    );
    let found = common::files_containing(shadow.data_dir(), MARKER.as_bytes())?;
    ensure!(found.is_empty(), "the marker is in {found:?}");
    shadow.stop().await?;
    Ok(())
}

per_major!(async run => shadow_follows_the_catalog: pg15, pg16, pg17, pg18);
