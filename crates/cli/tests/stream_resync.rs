//! A stopped table's way back, on PostgreSQL 15 and 18: a column type
//! change ClickHouse cannot follow stops the table; `walshadow table
//! resync` (with `run` running, then with it stopped and `base_backup`)
//! loads it again with its new shape and swaps it in; `walshadow table
//! list` shows each state, and metrics the stop's reason (after a restart
//! too); the oracle holds after each.

mod common;

use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use common::{BIN, OracleColumn, StreamHarness, same};
use walshadow_testkit::{PgMajor, wait_until};

const CATCH_UP: Duration = Duration::from_secs(180);

fn cols() -> Vec<OracleColumn> {
    vec![same("id"), same("v"), same("n")]
}

fn wait_state(h: &mut StreamHarness, key: &str, state: &str) -> Result<serde_json::Value> {
    let mut last = serde_json::Value::Null;
    let r = wait_until(CATCH_UP, &format!("{key} to be {state}"), || {
        h.check_running()?;
        last = h.table_state(key)?;
        Ok(last["state"] == state)
    });
    r.with_context(|| format!("last: {last}\nrun log:\n{}", common::tail(&h.run_log(), 40)))?;
    Ok(last)
}

fn resync(major: PgMajor) -> Result<()> {
    let port = common::loads::free_port()?;
    let mut h = StreamHarness::new(
        BIN,
        major,
        "resync",
        &["public.t"],
        &format!("\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n"),
    )?;
    h.source
        .psql("create table t (id int primary key, v text, n int)")?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into t select g, 'a', g from generate_series(1, 200) g")?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("t", "t", &cols())?;

    // A change ClickHouse cannot follow in place: the table stops, the
    // rows after it wait for the way back.
    h.source.psql(
        "alter table t alter column n type numeric(20, 0);
         update t set n = n + 5000000000 where id <= 10;
         insert into t select g, 'b', g from generate_series(201, 300) g;",
    )?;
    let stopped = wait_state(&mut h, "public.t", "stopped")?;
    let detail = stopped["detail"].as_str().unwrap_or_default().to_owned();
    ensure!(
        detail.contains("walshadow table resync public.t") && !detail.contains("progress.json"),
        "{detail}"
    );
    let status = h.cli_ok(&["status", "--json", "--config", h.config()])?;
    ensure!(status.contains("\"code\": \"schema_change\""), "{status}");
    // Metrics say so, with the reason, also after a restart.
    let stopped_series = [
        "walshadow_table_stopped{table=\"public.t\"} 1",
        "walshadow_table_stop_reason{table=\"public.t\",reason=\"schema_change\"} 1",
    ];
    for restart in [false, true] {
        if restart {
            h.stop_run()?;
            h.start_run()?;
        }
        let mut metrics = String::new();
        wait_until(CATCH_UP, "the stop in metrics", || {
            metrics = common::loads::scrape(port).unwrap_or_default();
            Ok(stopped_series.iter().all(|s| metrics.contains(s)))
        })
        .with_context(|| format!("restart {restart}:\n{metrics}"))?;
    }

    // Resync with run running, changes landing meanwhile.
    let out = h.cli_ok(&["table", "resync", "public.t", "--config", h.config()])?;
    ensure!(out.contains("resync of public.t requested"), "{out}");
    h.source
        .psql("update t set v = 'after' where id % 5 = 0; delete from t where id > 290;")?;
    let done = wait_state(&mut h, "public.t", "streaming")?;
    ensure!(done["destination"] == "t", "{done}");
    ensure!(
        done["rows_loaded"].as_u64().is_some_and(|n| n > 0),
        "{done}"
    );
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("t", "t", &cols())?;
    ensure!(n == 290, "{n} rows");
    let ty = h.ch.query(
        "SELECT type FROM system.columns WHERE database = 'app' AND table = 't' AND name = 'n'",
    )?;
    ensure!(ty.contains("Decimal(20, 0)"), "n is {ty}");
    let leftovers = h.ch.query(
        "SELECT name FROM system.tables WHERE database = 'app' AND name LIKE 't\\\\_\\\\_ws%'",
    )?;
    ensure!(leftovers.trim().is_empty(), "leftover tables: {leftovers}");
    let metrics = common::loads::scrape(port)?;
    ensure!(
        metrics.contains("walshadow_table_stopped{table=\"public.t\"} 0")
            && !metrics.contains("walshadow_table_stop_reason{table=\"public.t\""),
        "{metrics}"
    );

    // With run stopped, by base_backup: the request waits in the WAL.
    h.stop_run()?;
    h.cli_ok(&[
        "table",
        "resync",
        "public.t",
        "--initial-load",
        "base_backup",
        "--config",
        h.config(),
    ])?;
    h.source.psql(
        "insert into t values (1000, 'while down', 1); update t set v = 'down' where id = 1;",
    )?;
    h.start_run()?;
    wait_until(CATCH_UP, "the resync to start", || {
        Ok(h.run_log()
            .matches("resync: loading the table again")
            .count()
            >= 2)
    })?;
    wait_state(&mut h, "public.t", "streaming")?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("t", "t", &cols())?;
    ensure!(n == 291, "{n} rows");
    ensure!(
        h.run_log().matches("resync done").count() == 2,
        "{}",
        common::tail(&h.run_log(), 30)
    );
    // Unknown tables and modes are refused by the command itself.
    let out = h.cli(&["table", "resync", "public.nope", "--config", h.config()])?;
    ensure!(!out.status.success(), "resync of a table out of scope ran");
    let out = h.cli(&[
        "table",
        "resync",
        "public.t",
        "--initial-load",
        "none",
        "--config",
        h.config(),
    ])?;
    ensure!(!out.status.success(), "resync with none ran");
    h.stop_run()?;
    Ok(())
}

per_major!(resync => stopped_table_comes_back_with_resync: pg15, pg18);

/// A resync asked for again while its load is still reading starts over
/// cleanly: the first load's workers end with it (none of their rows, read
/// at the older snapshot, reaches the table made again), the second load
/// is swapped in, and the table equals the source.
fn resync_started_over(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "resyncagain", &["public.t"], "")?;
    let pauses = h.arm_holds(&[walshadow_failpoints::COPY_BEFORE_FIRST_INSERT])?;
    let paused = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
        entries.map(|e| e.path()).collect()
    };
    h.source
        .psql("create table t (id int primary key, v text, n int)")?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into t select g, 'a', g from generate_series(1, 300) g")?;
    h.wait_caught_up(CATCH_UP)?;
    h.cli_ok(&["table", "resync", "public.t", "--config", h.config()])?;
    wait_until(CATCH_UP, "the first load to hold before inserting", || {
        h.check_running()?;
        Ok(!paused(&pauses).is_empty())
    })
    .with_context(|| common::tail(&h.run_log(), 30))?;
    let first = paused(&pauses);
    // Rows the first load read go, then the resync is asked for again.
    h.source
        .psql("delete from t where id <= 100; update t set v = 'b' where id > 250;")?;
    h.cli_ok(&["table", "resync", "public.t", "--config", h.config()])?;
    wait_until(CATCH_UP, "the second resync to start", || {
        h.check_running()?;
        Ok(h.run_log()
            .matches("resync: loading the table again")
            .count()
            >= 2)
    })?;
    // The first load's workers, if they still run, go on now.
    for f in &first {
        let _ = std::fs::remove_file(f);
    }
    wait_until(CATCH_UP, "the second load to be swapped in", || {
        h.check_running()?;
        for f in paused(&pauses) {
            let _ = std::fs::remove_file(f);
        }
        Ok(h.run_log().contains("resync done")
            && h.table_state("public.t")?["state"] == "streaming")
    })
    .with_context(|| common::tail(&h.run_log(), 40))?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("t", "t", &cols())?;
    ensure!(n == 200, "{n} rows");
    ensure!(
        h.run_log().matches("resync done").count() == 1
            && h.run_log()
                .contains("initial load cancelled: a new one starts over"),
        "{}",
        common::tail(&h.run_log(), 30)
    );
    h.stop_run()?;
    Ok(())
}

per_major!(resync_started_over => resync_asked_again_while_loading_starts_over: pg15, pg18);

/// A load's progress shows in `status` (fraction of blocks, ETA) and the
/// metrics while it runs; once done, `status` counts its rows as loaded.
fn load_progress(major: PgMajor) -> Result<()> {
    let port = walshadow_testkit::free_port()?;
    let mut h = StreamHarness::new(
        BIN,
        major,
        "progress",
        &[],
        &format!(
            "\n[backfill]\nchunk_blocks = 8\nbatch_rows = 2000\nworkers = 1\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n"
        ),
    )?;
    h.source.psql(
        "create table big (id int primary key, v text);
         insert into big select g, md5(g::text) from generate_series(1, 400000) g;",
    )?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into walshadow.tables values ('public', 'big', true, 'copy')")?;
    let mut seen_fraction = None;
    let mut seen_eta = None;
    let mut seen_metric = false;
    wait_until(CATCH_UP, "the load to finish", || {
        h.check_running()?;
        let out = h.cli_ok(&["status", "--json", "--config", h.config()])?;
        let s: serde_json::Value = serde_json::from_str(&out)?;
        let load = &s["tables"]["public.big"]["load"];
        if let Some(f) = load["fraction"].as_f64()
            && f > 0.0
            && f < 1.0
        {
            seen_fraction = Some(f);
            if let Some(e) = load["eta_secs"].as_f64() {
                seen_eta = Some(e);
            }
            if !seen_metric {
                seen_metric = common::loads::scrape(port)?
                    .contains("walshadow_backfill_progress_ratio{table=\"public.big\"}");
            }
        }
        Ok(common::loads::phase(&h, "public.big")?.as_deref() == Some("done"))
    })?;
    println!(
        "pg{}: seen mid-load: fraction {seen_fraction:?}, ETA {seen_eta:?} s",
        major.number()
    );
    ensure!(
        seen_fraction.is_some() && seen_eta.is_some(),
        "no progress seen"
    );
    ensure!(
        seen_metric,
        "no walshadow_backfill_progress_ratio while loading"
    );
    h.wait_caught_up(CATCH_UP)?;
    let text = h.cli_ok(&["status", "--config", h.config()])?;
    ensure!(
        text.contains("public.big -> big: 0 rows streamed, 400000 loaded"),
        "{text}"
    );
    // Done: no progress series left behind.
    wait_until(
        Duration::from_secs(30),
        "the load's progress series to go",
        || {
            Ok(!common::loads::scrape(port)?
                .contains("walshadow_backfill_eta_seconds{table=\"public.big\"}"))
        },
    )?;
    let n = h.assert_equal("big", "big", &[same("id"), same("v")])?;
    ensure!(n == 400_000);
    h.stop_run()?;
    Ok(())
}

per_major!(load_progress => load_progress_is_shown: pg15, pg18);

/// `kill -9` at either side of a resync's exchange (the process ends there
/// at a failpoint): the next start finishes the resync exactly once,
/// never exchanging back.
fn resync_crashes(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "resync-crash", &["public.t"], "")?;
    h.source
        .psql("create table t (id int primary key, v text, n int)")?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into t select g, 'a', g from generate_series(1, 100) g")?;
    h.wait_caught_up(CATCH_UP)?;
    for (round, point) in [
        walshadow_failpoints::RESYNC_BEFORE_EXCHANGE,
        walshadow_failpoints::RESYNC_AFTER_EXCHANGE,
    ]
    .into_iter()
    .enumerate()
    {
        h.stop_run()?;
        h.disarm();
        h.arm(point, "return");
        h.start_run()?;
        h.cli_ok(&["table", "resync", "public.t", "--config", h.config()])?;
        h.source.psql(&format!(
            "update t set v = 'round {round}' where id % 3 = {round}"
        ))?;
        let mut exit = None;
        wait_until(CATCH_UP, &format!("run to end at {point}"), || {
            exit = h.run_exited();
            Ok(exit.is_some())
        })?;
        ensure!(exit.is_some_and(|s| !s.success()), "{point}: {exit:?}");
        ensure!(
            h.run_log()
                .contains(&format!("failpoint {point}: ending the process")),
            "{point}: did not end at the failpoint"
        );
        h.disarm();
        h.start_run()?;
        wait_state(&mut h, "public.t", "streaming")?;
        h.wait_caught_up(CATCH_UP)?;
        let n = h.assert_equal("t", "t", &cols())?;
        ensure!(n == 100, "{point}: {n} rows");
        let tables =
            h.ch.query("SELECT name FROM system.tables WHERE database = 'app' ORDER BY name")?;
        ensure!(tables.trim() == "t", "{point}: tables {tables:?}");
    }
    h.stop_run()?;
    Ok(())
}

per_major!(resync_crashes => resync_survives_kill_9_around_its_exchange: pg15, pg18);
