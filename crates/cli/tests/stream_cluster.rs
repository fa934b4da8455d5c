//! `[clickhouse] cluster`, on PostgreSQL 15 and 18. The engine here runs no
//! cluster (no Keeper, no `remote_servers`), so it stands in for one: each
//! DDL statement walshadow sends is recorded as sent, then run as one server
//! would run it (`ON CLUSTER` dropped, `Replicated*` without its Keeper path,
//! `Distributed` as `Merge`). What is checked:
//!
//! - every DDL statement walshadow sent — the database, each table, its
//!   `Distributed` table, a column added, a `TRUNCATE`, a `base_backup`
//!   load's staging table and swap, a resync's table, swap and drop,
//!   `verify`'s scratch table — went `ON CLUSTER`, and every table made
//!   from the catalog is `ReplicatedReplacingMergeTree` on a Keeper path
//!   with `{uuid}` (so staging copies never share one);
//! - the rows, through all of it, equal row by row, and the same through
//!   the `Distributed` table as through the table;
//! - a table whose destination would be another's `Distributed` table is
//!   refused (stopped, naming `distributed_suffix`).
//!
//! Not run here: a real cluster's replication and distributed DDL queue.

mod common;

use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use common::{BIN, StreamHarness, same, source_options};
use walshadow_testkit::{ClickHouseOptions, PgMajor, wait_until};

const CATCH_UP: Duration = Duration::from_secs(180);

fn cluster(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::with_engine(
        BIN,
        major,
        "cluster",
        &["public.a"],
        "cluster = \"prod\"\ndistributed_suffix = \"_all\"",
        source_options(),
        ClickHouseOptions::default().cluster_standin("prod"),
    )?;
    h.source.psql(
        "create table a (id int primary key, v text); \
         create table a_all (id int primary key); \
         create table b (id int primary key, v text); \
         insert into b select g, 'b' || g from generate_series(1, 100) g",
    )?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into a select g, 'a' || g from generate_series(1, 200) g")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(
        h.run_log()
            .contains(r#"ClickHouse: cluster \"prod\" (DDL ON CLUSTER)"#)
            || h.run_log()
                .contains(r#"ClickHouse: cluster "prod" (DDL ON CLUSTER)"#),
        "the topology is not logged:\n{}",
        common::tail(&h.run_log(), 30)
    );

    // A table whose destination is another's Distributed table's name: refused.
    h.cli_ok(&[
        "table",
        "add",
        "public.a_all",
        "--initial-load",
        "none",
        "--config",
        h.config(),
    ])?;
    let mut clash = serde_json::Value::Null;
    wait_until(CATCH_UP, "public.a_all refused", || {
        h.check_running()?;
        clash = h.table_state("public.a_all")?;
        Ok(clash["state"] == "stopped")
    })
    .with_context(|| format!("{clash}"))?;
    ensure!(
        clash["detail"]
            .as_str()
            .is_some_and(|d| d.contains("distributed_suffix")),
        "{clash}"
    );

    // A column added, then a TRUNCATE, then rows again.
    h.source.psql(
        "alter table a add column n int default 7; \
         insert into a values (201, 'x', 1); \
         truncate a; \
         insert into a select g, 'c' || g, g from generate_series(1, 50) g",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let cols = [same("id"), same("v"), same("n")];
    ensure!(h.assert_equal("a", "a", &cols)? == 50);

    // A base_backup load: its staging table and swap.
    h.cli_ok(&[
        "table",
        "add",
        "public.b",
        "--initial-load",
        "base_backup",
        "--config",
        h.config(),
    ])?;
    common::loads::wait_loaded(&mut h, "public.b")?;
    // A resync: its own table, the swap, the drop.
    h.cli_ok(&["table", "resync", "public.a", "--config", h.config()])?;
    h.source.psql("update a set v = 'r' where id <= 10")?;
    let mut last = serde_json::Value::Null;
    wait_until(CATCH_UP, "the resync of public.a", || {
        h.check_running()?;
        last = h.table_state("public.a")?;
        Ok(last["state"] == "streaming" && last["rows_loaded"].as_u64().is_some_and(|n| n > 0))
    })
    .with_context(|| format!("{last}\n{}", common::tail(&h.run_log(), 40)))?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(h.assert_equal("a", "a", &cols)? == 50);
    ensure!(h.assert_equal("b", "b", &[same("id"), same("v")])? == 100);
    h.cli_ok(&["verify", "--config", h.config()])?;

    // Reads through the Distributed table see the table's rows.
    let through = h.ch.query("SELECT count(), sum(n) FROM app.a_all FINAL")?;
    let direct = h.ch.query("SELECT count(), sum(n) FROM app.a FINAL")?;
    ensure!(
        through == direct && direct.starts_with("50\t"),
        "{through} vs {direct}"
    );

    let ddl = h.ch.cluster_ddl()?;
    let all = ddl.join("\n---\n");
    for sql in &ddl {
        ensure!(
            sql.contains(" ON CLUSTER `prod`"),
            "not ON CLUSTER: {sql}\nall:\n{all}"
        );
        if sql.starts_with("CREATE TABLE IF NOT EXISTS") {
            ensure!(
                sql.contains(
                    "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{uuid}/{shard}', '{replica}', `_version`, `_is_deleted`)"
                ) && sql.contains("replicated_deduplication_window"),
                "not replicated on a {{uuid}} path: {sql}"
            );
        }
    }
    for want in [
        "CREATE DATABASE IF NOT EXISTS `app` ON CLUSTER `prod`",
        "CREATE TABLE IF NOT EXISTS `app`.`a` ON CLUSTER `prod`",
        "CREATE OR REPLACE TABLE `app`.`a_all` ON CLUSTER `prod` AS `app`.`a` ENGINE = Distributed('prod', 'app', 'a')",
        "ALTER TABLE `app`.`a` ON CLUSTER `prod` ADD COLUMN IF NOT EXISTS `n`",
        "TRUNCATE TABLE `app`.`a` ON CLUSTER `prod`",
        "CREATE TABLE `app`.`b__wsstg` ON CLUSTER `prod` AS `app`.`b`",
        "EXCHANGE TABLES `app`.`b` AND `app`.`b__wsstg` ON CLUSTER `prod`",
        "CREATE TABLE IF NOT EXISTS `app`.`a__wsresync` ON CLUSTER `prod`",
        "EXCHANGE TABLES `app`.`a` AND `app`.`a__wsresync` ON CLUSTER `prod`",
        "DROP TABLE IF EXISTS `app`.`a__wsresync` ON CLUSTER `prod` SYNC",
        "CREATE TABLE `app`.`a__wsverify` ON CLUSTER `prod` AS `app`.`a`",
        "DROP TABLE IF EXISTS `app`.`b__wsverify` ON CLUSTER `prod` SYNC",
    ] {
        ensure!(
            ddl.iter().any(|s| s.starts_with(want)),
            "no {want}\nall:\n{all}"
        );
    }
    // The Distributed table follows the columns: made again after the ADD COLUMN.
    let alter = ddl
        .iter()
        .position(|s| s.contains("ADD COLUMN IF NOT EXISTS `n`"))
        .context("the ADD COLUMN")?;
    ensure!(
        ddl[alter..]
            .iter()
            .any(|s| s.starts_with("CREATE OR REPLACE TABLE `app`.`a_all`")),
        "a_all not made again after the ADD COLUMN:\n{all}"
    );
    Ok(())
}

per_major!(cluster => every_ddl_goes_on_cluster_and_the_rows_stay_equal: pg15, pg18);
