//! Tables added at runtime through the config table, on PostgreSQL 15 and
//! 18: the opt-in applies at its commit `S`, `initial_load = 'copy'` loads
//! the rows from before `S` tagged `_lsn = S`, opt-outs stop streaming, a
//! re-opt-in leaves no phantom, loads survive rewrites timed between
//! snapshot and lock and `kill -9`.
//!
//! - `opt_in_under_load`: `orders` (rows, some TOASTed) opted in with
//!   `copy` while a workload writes it; `a` and `b` opted in by one
//!   transaction that also writes `a`; a partitioned table through its
//!   root; `legacy` with `initial_load = 'none'` (streaming from `S` only;
//!   unknown modes are refused, see stream_mistakes); opt-out, deletes,
//!   opt back in: no phantoms.
//! - `rewrites_retry`: the load pauses after its snapshot (a failpoint); a
//!   VACUUM FULL, a TRUNCATE and a drop-and-recreate there make it retry
//!   on a fresh snapshot and end equal; with attempts exhausted the entry
//!   stays pending with the error.
//! - `resumes_after_kill`: `kill -9` while a load is half done; the restart
//!   resumes from the marks (the log says so) and ends equal.

mod common;

use std::sync::Arc;
use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use common::loads::*;
use common::{BIN, StreamHarness, same};
use walshadow_testkit::{PgMajor, wait_until};

fn opt_in_under_load(major: PgMajor) -> Result<()> {
    let port = walshadow_testkit::free_port()?;
    let mut h = StreamHarness::new(
        BIN,
        major,
        "optin",
        &[],
        &format!(
            "[backfill]\nworkers = 2\nchunk_blocks = 8\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n"
        ),
    )?;
    h.source.psql(
        "create table orders (id bigint primary key, customer int, amount numeric(12,2), note text);
         insert into orders select g, g % 100, g * 1.25, case when g % 50 = 0 then repeat(md5(g::text), 300) else 'n' || g end
           from generate_series(1, 3000) g;
         create table a (id int primary key, v text);
         create table b (id int primary key, v text);
         insert into a select g, 'a' || g from generate_series(1, 50) g;
         insert into b select g, 'b' || g from generate_series(1, 50) g;
         create table parts (id int, region text, v int, primary key (id, region)) partition by list (region);
         create table parts_eu partition of parts for values in ('eu');
         create table parts_us partition of parts for values in ('us');
         create table parts_other partition of parts default;
         insert into parts select g, (array['eu','us','asia'])[g % 3 + 1], g from generate_series(1, 600) g;
         create table d (id int primary key);
         create table c (id int primary key, v text);
         insert into c select g, 'c' || g from generate_series(1, 20) g;
         create table legacy (id int primary key, v text);
         insert into legacy select g, 'old' from generate_series(1, 10) g;",
    )?;
    let init = h.init()?;
    ensure!(
        !init.contains("could not be created"),
        "init did not create the config table:\n{init}"
    );
    h.start_run()?;
    // The workload is under way before the opt-ins.
    let workload = OrdersWorkload::start(&h)?;
    // A transaction that begins before c's opt-in and commits after it.
    let spanning = {
        let source = Arc::clone(&h.source);
        std::thread::spawn(move || {
            source.psql(
                "begin;
                 insert into c select g, 'spanning' from generate_series(1001, 1010) g;
                 update c set v = 'spanning' where id <= 5;
                 select pg_sleep(2);
                 insert into c select g, 'spanning late' from generate_series(1011, 1020) g;
                 delete from c where id = 20;
                 commit;",
            )
        })
    };
    // Opt c in once that transaction has written (holds an xid) and sleeps.
    wait_until(
        Duration::from_secs(60),
        "the spanning transaction to write",
        || {
            let n = h.source.query_one(
            "select count(*) from pg_stat_activity where backend_xid is not null and query like 'select pg_sleep(2)%'",
        )?;
            Ok(n.trim() == "1")
        },
    )?;
    h.source
        .psql("insert into walshadow.tables values ('public', 'c', true, 'copy');")?;
    h.source.psql(
        "insert into walshadow.tables values ('public', 'orders', true, 'copy');
         begin;
           insert into a values (1000, 'same transaction as the opt-in');
           insert into walshadow.tables values ('public', 'a', true, 'copy'), ('public', 'b', true, 'copy');
           update a set v = 'changed with the opt-in' where id = 1;
         commit;
         insert into walshadow.tables values ('public', 'parts', true, 'copy');
         insert into walshadow.tables (schema_name, table_name, initial_load) values ('public', 'legacy', 'none');",
    )?;
    let s_orders = wait_loaded(&mut h, "public.orders")?;
    // Rows of a streaming table still in its batch when another table is
    // opted in must not be lost.
    h.source.psql(
        "insert into orders values (200000, 1, 1, 'right before an opt-in');
         insert into walshadow.tables values ('public', 'd', true, 'none');",
    )?;
    wait_loaded(&mut h, "public.a")?;
    wait_loaded(&mut h, "public.b")?;
    wait_loaded(&mut h, "public.parts")?;
    wait_loaded(&mut h, "public.c")?;
    spanning
        .join()
        .map_err(|_| anyhow::anyhow!("spanning transaction panicked"))??;
    // The endpoint follows within a status tick.
    let series = [
        "walshadow_backfills_pending{mode=\"copy\"} 0",
        "walshadow_backfill_rows_total{",
        "walshadow_rows_written_total{",
    ];
    let mut metrics = String::new();
    wait_until(
        Duration::from_secs(30),
        "the metrics to show the loads",
        || {
            metrics = scrape(port)?;
            Ok(series.iter().all(|s| metrics.contains(s)))
        },
    )
    .with_context(|| format!("/metrics:\n{metrics}"))?;
    // Some workload after the loads, streamed over the loaded rows.
    let writes = workload.finish()?;
    h.source.psql("insert into legacy values (100, 'after the opt-in'); update a set v = 'later' where id = 2;")?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("public.orders", "orders", &orders_cols())?;
    eprintln!("orders: {n} rows equal after {writes} workload transactions");
    for t in ["a", "b"] {
        h.assert_equal(&format!("public.{t}"), t, &[same("id"), same("v")])?;
    }
    h.assert_equal("public.c", "c", &[same("id"), same("v")])?;
    h.assert_equal(
        "public.parts",
        "parts",
        &[same("id"), same("region"), same("v")],
    )?;
    // Rows from before S carry S: the untouched ones still show it.
    let tagged = h.ch.query(&format!(
        "SELECT count() FROM app.orders FINAL WHERE _lsn = {} AND _is_deleted = 0",
        s_orders.0
    ))?;
    ensure!(
        tagged.trim().parse::<u64>()? > 1000,
        "rows loaded at S={s_orders} are not tagged with it: {tagged}"
    );
    let older = h.ch.query(&format!(
        "SELECT count() FROM app.orders WHERE _lsn < {}",
        s_orders.0
    ))?;
    ensure!(
        older.trim() == "0",
        "rows older than S in ClickHouse: {older}"
    );
    // No load: streamed from S only.
    let legacy = h.clickhouse_rows("legacy", &[same("id"), same("v")])?;
    ensure!(
        legacy == ["100\tafter the opt-in"],
        "legacy (initial_load 'none') in ClickHouse: {legacy:?}"
    );

    // Opt out, delete and change rows while out, opt back in: no phantom.
    h.source
        .psql("update walshadow.tables set replicate = false where table_name = 'b';")?;
    h.wait_caught_up(CATCH_UP)?;
    h.source.psql(
        "delete from b where id <= 20; update b set v = 'while out' where id = 30; insert into b values (500, 'new while out');",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let stale = h.clickhouse_rows("b", &[same("id"), same("v")])?;
    ensure!(
        stale.len() == 50,
        "b changed in ClickHouse while opted out: {} rows",
        stale.len()
    );
    h.source
        .psql("update walshadow.tables set replicate = true where table_name = 'b';")?;
    h.wait_caught_up(CATCH_UP)?;
    let s_b2 = wait_loaded(&mut h, "public.b")?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.b", "b", &[same("id"), same("v")])?;
    eprintln!("b re-opted in at {s_b2}: no phantoms");
    h.stop_run()?;
    let status = h.cli_ok(&["status", "--config", h.config()])?;
    ensure!(
        status.contains("public.orders"),
        "status lists no loads:\n{status}"
    );
    Ok(())
}

per_major!(opt_in_under_load => tables_opted_in_at_runtime: pg15, pg16, pg17, pg18);

fn wait_paused(
    h: &mut StreamHarness,
    dir: &std::path::Path,
    name: &str,
) -> Result<std::path::PathBuf> {
    let file = dir.join(name);
    let r = wait_until(
        Duration::from_secs(120),
        &format!("{name} to appear"),
        || {
            h.check_running()?;
            Ok(file.exists())
        },
    );
    if let Err(e) = r {
        anyhow::bail!("{e}\nrun log:\n{}", common::tail(&h.run_log(), 30));
    }
    Ok(file)
}

fn rewrites_retry(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(
        BIN,
        major,
        "optin-rewrite",
        &[],
        "[backfill]\nmax_attempts = 4\n",
    )?;
    let pause = h.arm_holds(&[walshadow_failpoints::COPY_AFTER_SNAPSHOT])?;
    h.source.psql(
        "create table t (id int primary key, v text);
         insert into t select g, 'v' || g from generate_series(1, 500) g;
         create table u (id int primary key, v text);
         insert into u select g, 'u' || g from generate_series(1, 100) g;",
    )?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into walshadow.tables values ('public', 't', true, 'copy');")?;
    // Attempt 1: VACUUM FULL between the snapshot and the lock.
    let f = wait_paused(&mut h, &pause, "public.t.1.paused")?;
    h.source.psql("vacuum full t;")?;
    std::fs::remove_file(f)?;
    // Attempt 2: TRUNCATE and new rows.
    let f = wait_paused(&mut h, &pause, "public.t.2.paused")?;
    h.source.psql("begin; truncate t; insert into t select g, 'after truncate' from generate_series(1, 300) g; commit;")?;
    std::fs::remove_file(f)?;
    // Attempt 3: dropped and created again.
    let f = wait_paused(&mut h, &pause, "public.t.3.paused")?;
    h.source.psql(
        "drop table t; create table t (id int primary key, v text);
         insert into t select g, 'recreated' from generate_series(1, 200) g;",
    )?;
    std::fs::remove_file(f)?;
    // Attempt 4 goes through.
    let f = wait_paused(&mut h, &pause, "public.t.4.paused")?;
    std::fs::remove_file(f)?;
    wait_loaded(&mut h, "public.t")?;
    h.source
        .psql("update t set v = 'streamed' where id < 10;")?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.t", "t", &[same("id"), same("v")])?;
    let log = h.run_log();
    for what in [
        "was rewritten after the snapshot",
        "dropped and created again",
    ] {
        ensure!(log.contains(what), "the log does not say {what:?}");
    }

    // Every attempt disturbed: the entry stays pending with the error.
    h.source
        .psql("insert into walshadow.tables values ('public', 'u', true, 'copy');")?;
    for attempt in 1..=4 {
        let f = wait_paused(&mut h, &pause, &format!("public.u.{attempt}.paused"))?;
        h.source.psql("vacuum full u;")?;
        std::fs::remove_file(f)?;
    }
    let mut entry = toml::Value::Boolean(false);
    wait_until(Duration::from_secs(60), "u's attempts to run out", || {
        entry = path(&ledger(&h)?, &["table", "public.u"])
            .cloned()
            .unwrap_or(toml::Value::Boolean(false));
        Ok(entry["attempts"].as_integer() == Some(4)
            && entry["error"]
                .as_str()
                .is_some_and(|e| e.contains("4 attempts")))
    })
    .with_context(|| format!("ledger entry of u: {entry}"))?;
    ensure!(
        entry["phase"].as_str() == Some("pending"),
        "u is not pending after its attempts ran out: {entry}"
    );
    ensure!(
        entry["error"]
            .as_str()
            .unwrap_or_default()
            .contains("rewritten"),
        "u's error does not say why: {entry}"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(rewrites_retry => copy_load_retries_after_rewrites: pg15, pg18);

fn resumes_after_kill(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(
        BIN,
        major,
        "optin-resume",
        &[],
        "[backfill]\nworkers = 2\nchunk_blocks = 4\nbatch_rows = 2000\n",
    )?;
    h.source.psql(
        "create table big (id bigint primary key, pad text);
         insert into big select g, repeat('x', 200) || g from generate_series(1, 60000) g;",
    )?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into walshadow.tables values ('public', 'big', true, 'copy');")?;
    // Half done: some range has moved, not all.
    let mut progressed = false;
    wait_until(CATCH_UP, "the load to be under way", || {
        h.check_running()?;
        let l = ledger(&h)?;
        let ranges: Vec<(i64, i64, i64)> = path(
            &l,
            &["table", "public.big", "relations", "public.big", "ranges"],
        )
        .and_then(|r| r.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|r| {
                    Some((
                        r["start"].as_integer()?,
                        r["end"].as_integer()?,
                        r["next"].as_integer()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
        let done: i64 = ranges.iter().map(|(s, _, n)| n - s).sum();
        let total: i64 = ranges.iter().map(|(s, e, _)| e - s).sum();
        progressed = done > 0 && done < total;
        Ok(progressed || (total > 0 && done == total))
    })?;
    ensure!(
        progressed,
        "the load finished before it could be killed; make the table bigger"
    );
    h.kill_run()?;
    h.source.psql("update big set pad = 'changed while down' where id % 1000 = 0; delete from big where id % 777 = 0;")?;
    h.start_run()?;
    wait_loaded(&mut h, "public.big")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(
        h.run_log().contains("resuming from the marks"),
        "the restart did not resume from the marks:\n{}",
        common::tail(&h.run_log(), 30)
    );
    let resumes =
        path(&ledger(&h)?, &["table", "public.big", "resumes"]).and_then(|r| r.as_integer());
    ensure!(resumes >= Some(1), "no resume counted: {resumes:?}");
    h.assert_equal("public.big", "big", &[same("id"), same("pad")])?;
    h.stop_run()?;
    Ok(())
}

per_major!(resumes_after_kill => copy_load_resumes_after_kill: pg15, pg18);

fn toml_initial_load(major: PgMajor) -> Result<()> {
    // Pinned in the config file with `initial_load = "copy"`: its rows
    // from before walshadow started are loaded at the resume position.
    let mut h = StreamHarness::new(
        BIN,
        major,
        "optin-toml",
        &[],
        "[table.\"public.pinned\"]\ninitial_load = \"copy\"\n[table.\"public.plain\"]\n",
    )?;
    // A config-table row written before walshadow's start point (the
    // table made by hand before init, as init would): read at the first
    // start, not from the WAL.
    h.source.psql(&format!(
        "{}
         insert into walshadow.tables values ('public', 'early', true, 'copy');
         create table early (id int primary key, v text);
         insert into early select g, 'early' from generate_series(1, 40) g;",
        walshadow_config::config_table_sql("walshadow", "tables")
    ))?;
    h.source.psql(
        "create table pinned (id int primary key, v text);
         insert into pinned select g, 'before' from generate_series(1, 500) g;
         create table plain (id int primary key, v text);
         insert into plain select g, 'before' from generate_series(1, 10) g;",
    )?;
    h.init()?;
    h.start_run()?;
    let s = wait_loaded(&mut h, "public.pinned")?;
    h.source
        .psql("update early set v = 'streamed' where id = 1;")?;
    wait_loaded(&mut h, "public.early")?;
    h.source.psql(
        "update pinned set v = 'after' where id <= 10; delete from pinned where id > 490;
         insert into plain values (100, 'after');",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.pinned", "pinned", &[same("id"), same("v")])?;
    h.assert_equal("public.early", "early", &[same("id"), same("v")])?;
    let untouched = h.ch.query(&format!(
        "SELECT count() FROM app.pinned FINAL WHERE _lsn = {} AND _is_deleted = 0",
        s.0
    ))?;
    ensure!(
        untouched.trim() == "480",
        "rows loaded at the resume position {s} are not tagged with it: {untouched}"
    );
    // Without initial_load the table streams from the start only.
    let plain = h.clickhouse_rows("plain", &[same("id"), same("v")])?;
    ensure!(plain == ["100\tafter"], "plain: {plain:?}");
    // A restart does not load it again.
    h.stop_run()?;
    h.start_run()?;
    h.wait_caught_up(CATCH_UP)?;
    let attempts =
        path(&ledger(&h)?, &["table", "public.pinned", "attempts"]).and_then(|a| a.as_integer());
    ensure!(
        attempts == Some(1),
        "the pinned table was loaded again after a restart: {attempts:?}"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(toml_initial_load => pinned_table_initial_load: pg15, pg18);
