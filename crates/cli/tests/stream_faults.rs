//! Everyday faults, on PostgreSQL 15 and 18, each ending with the row-by-row
//! oracle (source table = ClickHouse `FINAL`):
//!
//! - the source shuts down (`pg_ctl stop -m fast`) while ClickHouse is down
//!   and walshadow far behind: it returns within seconds, the source
//!   recycles its WAL on the way back up, nothing is lost; walshadow and
//!   its walsender idle near zero CPU meanwhile;
//! - SIGTERM stops `run` within 10 s whatever ClickHouse does;
//! - a second `run` (and `init --force`, `toast compact`) on the same state
//!   directory is refused, and the first keeps streaming through DDL;
//! - ClickHouse erring or lying (401/403/404/502 from a proxy, a rotated
//!   password, a proxy answering `200 Ok.`, the table renamed away) pauses
//!   the stream with the error in `status` and the metrics, and never moves
//!   progress past the rows it holds;
//! - catalog churn: hundreds of temporary-table commits and unrelated DDL
//!   refresh nothing, while each change that does concern a table in scope
//!   (a new enum label, a new partition, a column, a table created under
//!   an awaited name, or moved there) still takes effect at its commit;
//! - a commit is visible once the stream idles, not at `batch_ms`, and a
//!   flush's tables are inserted at once: one whose ClickHouse table is
//!   renamed away waits without holding back the others;
//! - ClickHouse holding an insert: the WAL after it is decoded meanwhile,
//!   progress stays behind the held rows;
//! - ClickHouse down long enough for the backoff to reach its 10 s, then
//!   back: the rows written meanwhile arrive within seconds of its return,
//!   not at the end of the wait.

mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use walshadow_testkit::per_major;

use anyhow::{Context, Result, bail, ensure};
use common::{BIN, OracleColumn, StreamHarness, same};
use walshadow_testkit::{FaultProxy, Lsn, PgMajor, ProxyMode, wait_until};

const CATCH_UP: Duration = Duration::from_secs(180);

fn cols() -> Vec<OracleColumn> {
    vec![same("id"), same("v")]
}

/// [`harness`] streaming, with 100 rows of `t` in ClickHouse.
fn streaming(major: PgMajor, tag: &str) -> Result<StreamHarness> {
    let mut h = harness(major, tag, "")?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into t select g, 'a' from generate_series(1, 100) g")?;
    h.wait_caught_up(CATCH_UP)?;
    Ok(h)
}

fn harness(major: PgMajor, tag: &str, extra: &str) -> Result<StreamHarness> {
    let h = StreamHarness::new(BIN, major, tag, &["public.t"], extra)?;
    h.source
        .psql("create table t (id int primary key, v text)")?;
    Ok(h)
}

/// CPU seconds (user + system) a process used so far.
fn cpu_secs(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').context("stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>()? + f[12].parse::<f64>()?;
    Ok(ticks / 100.0)
}

/// CPU share of `pids` over `window`.
fn cpu_share(pids: &[u32], window: Duration) -> Result<f64> {
    let before: f64 = pids.iter().map(|&p| cpu_secs(p).unwrap_or(0.0)).sum();
    std::thread::sleep(window);
    let after: f64 = pids.iter().map(|&p| cpu_secs(p).unwrap_or(0.0)).sum();
    Ok((after - before) / window.as_secs_f64())
}

fn walsender_pids(h: &StreamHarness) -> Result<Vec<u32>> {
    let out = h
        .source
        .psql("select pid from pg_stat_activity where backend_type = 'walsender'")?;
    Ok(out.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

fn run_pid(h: &StreamHarness) -> Result<u32> {
    h.run_pid().context("run is not running")
}

/// walshadow and its walsenders use under 15 % of a core each.
fn assert_quiet(h: &StreamHarness, state: &str) -> Result<()> {
    let run = cpu_share(&[run_pid(h)?], Duration::from_secs(3))?;
    let ws = cpu_share(&walsender_pids(h)?, Duration::from_secs(2))?;
    println!(
        "pg{}: CPU ({state}): walshadow {run:.3}, walsender {ws:.3}",
        h.source.major().number()
    );
    ensure!(
        run < 0.15 && ws < 0.15,
        "{state}: CPU walshadow {run:.3}, walsender {ws:.3}"
    );
    Ok(())
}

/// `pg_ctl stop -m fast` of the source, timed.
fn timed_source_stop(h: &mut StreamHarness, state: &str) -> Result<()> {
    let started = Instant::now();
    Arc::get_mut(&mut h.source)
        .context("source shared")?
        .stop()?;
    let took = started.elapsed();
    println!(
        "pg{}: pg_ctl stop -m fast ({state}) took {took:?}",
        h.source.major().number()
    );
    ensure!(
        took < Duration::from_secs(15),
        "{state}: pg_ctl stop took {took:?}"
    );
    Ok(())
}

fn shutdown_while_behind(major: PgMajor) -> Result<()> {
    let mut h = streaming(major, "shutdown")?;

    // Idle: nothing to do, nearly no CPU on either side.
    assert_quiet(&h, "idle")?;

    h.ch.stop()?;
    // More WAL than the feed's queue to the pipeline holds (≈ 8 MB), and a
    // small transaction after it.
    h.source.psql(
        "insert into t select g, repeat(md5(g::text), 8) from generate_series(101, 120000) g",
    )?;
    h.source.psql("update t set v = 'b' where id % 7 = 0")?;
    h.source.psql("delete from t where id % 11 = 0")?;
    let target = h.source.flush_lsn()?;
    // Walshadow holds it all back: the destination is down.
    wait_until(
        Duration::from_secs(60),
        "the stream to see ClickHouse down",
        || {
            let s = h.status_json()?;
            Ok(s["destination"]["failing_since_unix_ms"].is_u64())
        },
    )?;
    let applied: Lsn = h.status_json()?["applied"]
        .as_str()
        .context("applied")?
        .parse()?;
    ensure!(applied < target, "applied {applied} with ClickHouse down");
    // While ClickHouse is down: no spin on either side.
    assert_quiet(&h, "ClickHouse down")?;

    // The source shuts down promptly though walshadow is far behind and
    // still connected (its walsender's last pings are answered).
    timed_source_stop(&mut h, "connected, behind")?;
    Arc::get_mut(&mut h.source)
        .context("source shared")?
        .restart()?;

    // The pipeline waits on ClickHouse and the feed reconnected: more WAL
    // than the queue between them holds. The feed lets the walsender go
    // rather than leave it unanswered, and the source stops as promptly.
    h.source.psql(
        "insert into t select g, repeat(md5(g::text), 8) from generate_series(120001, 180000) g",
    )?;
    wait_until(
        Duration::from_secs(60),
        "the feed to release the source",
        || Ok(h.run_log().contains("released the source's walsender")),
    )?;
    let paused = cpu_share(&[run_pid(&h)?], Duration::from_secs(3))?;
    println!("pg{}: CPU paused: walshadow {paused:.3}", major.number());
    ensure!(paused < 0.15, "CPU {paused:.3} while paused");
    timed_source_stop(&mut h, "paused")?;

    // Back up with a small WAL budget: checkpoints recycle every segment
    // the slot does not hold.
    let src = Arc::get_mut(&mut h.source).context("source shared")?;
    src.restart()?;
    src.psql("alter system set max_wal_size = '32MB'")?;
    src.psql("alter system set min_wal_size = '32MB'")?;
    src.psql("select pg_reload_conf()")?;
    for _ in 0..3 {
        src.psql("insert into t select g, 'c' from generate_series(200001, 201000) g on conflict (id) do update set v = 'c'")?;
        src.switch_wal()?;
        src.checkpoint()?;
    }
    h.ch.start_again()?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("t", "t", &cols())?;
    ensure!(n > 150_000, "{n} rows");
    h.check_running()?;
    h.stop_run()?;
    Ok(())
}

/// A stalled pipeline (ClickHouse down, more WAL than the queue holds)
/// lets the walsender go; once it takes WAL again the feed hands it what
/// follows what it took, so it goes on decoding where it was instead of
/// again from the start of a transaction open across the pause.
fn stall_continues(major: PgMajor) -> Result<()> {
    let mut h = streaming(major, "stall")?;
    let decoding = |h: &StreamHarness| h.run_log().matches("decoding the source's WAL").count();
    let started = decoding(&h);
    // A transaction open across the pause.
    let source = h.source.clone();
    let long = std::thread::spawn(move || {
        source.psql(
            "begin; insert into t select g, 'open across the pause' from generate_series(500001, 520000) g;
             select pg_sleep(30); commit;",
        )
    });
    h.wait_for_session("pg_sleep(30)")?;
    h.ch.stop()?;
    h.source
        .psql("insert into t select g, 'b' from generate_series(101, 200) g")?;
    h.source.psql(
        "insert into t select g, repeat(md5(g::text), 8) from generate_series(1001, 61000) g",
    )?;
    wait_until(
        Duration::from_secs(60),
        "the feed to release the source",
        || Ok(h.run_log().contains("released the source's walsender")),
    )?;
    h.ch.start_again()?;
    wait_until(
        Duration::from_secs(60),
        "the pipeline to take WAL again",
        || {
            Ok(h.run_log()
                .contains("the streaming pipeline takes WAL again"))
        },
    )?;
    long.join()
        .map_err(|_| anyhow::anyhow!("the open transaction's session panicked"))??;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("t", "t", &cols())?;
    ensure!(n == 200 + 60_000 + 20_000, "{n} rows");
    ensure!(
        decoding(&h) == started,
        "the pipeline decoded again from its restart position after the pause:\n{}",
        common::tail(&h.run_log(), 30)
    );
    h.stop_run()?;
    Ok(())
}

/// A load that meets a source refusing new connections (every client slot
/// taken: `53300`) waits for as long as that lasts, without using up
/// `backfill.max_attempts`, and loads once the slots free up. The load is
/// held after its snapshot (a failpoint) while the slots fill, so its
/// workers are the ones refused.
fn load_waits_out_the_source(major: PgMajor) -> Result<()> {
    let opts = common::source_options()
        .conf("max_connections", "20")
        .conf("superuser_reserved_connections", "1");
    let mut h = StreamHarness::with_options(
        BIN,
        major,
        "loadwait",
        &["public.t"],
        "\n[backfill]\nmax_attempts = 2\n",
        opts,
    )?;
    let pauses = h.arm_holds(&[walshadow_failpoints::COPY_AFTER_SNAPSHOT])?;
    h.source.psql(
        "create table t (id int primary key, v text);
         insert into t select g, 'existing' from generate_series(1, 500) g;",
    )?;
    {
        let text = std::fs::read_to_string(&h.config)?;
        std::fs::write(&h.config, format!("{text}initial_load = \"copy\"\n"))?;
    }
    h.init()?;
    h.start_run()?;
    let paused = pauses.join("public.t.1.paused");
    wait_until(CATCH_UP, "the load to hold after its snapshot", || {
        h.check_running()?;
        Ok(paused.exists())
    })?;
    // Every client slot taken for a while.
    let full = common::fill_source(&h.source, 24, Duration::from_secs(20))?;
    // Every later attempt goes on at once.
    let release = |dir: &std::path::Path| {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    };
    release(&pauses);
    let ledger = |h: &StreamHarness| {
        std::fs::read_to_string(h.state_dir.join("backfills.toml")).unwrap_or_default()
    };
    wait_until(Duration::from_secs(60), "the load to wait", || {
        h.check_running()?;
        release(&pauses);
        Ok(ledger(&h).contains("waiting:"))
    })
    .with_context(|| {
        format!(
            "ledger:\n{}\nrun log:\n{}",
            ledger(&h),
            common::tail(&h.run_log(), 30)
        )
    })?;
    full.release();
    common::loads::wait_loaded_with(&mut h, "public.t", |_| {
        release(&pauses);
        Ok(())
    })?;
    h.source
        .psql("update t set v = 'after' where id % 10 = 0")?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("t", "t", &cols())?;
    ensure!(n == 500, "{n} rows");
    ensure!(
        !h.run_log().contains("attempts failed"),
        "the load used up its attempts:\n{}",
        common::tail(&h.run_log(), 30)
    );
    h.stop_run()?;
    Ok(())
}

per_major!(load_waits_out_the_source => a_load_waits_out_a_source_refusing_connections: pg15, pg18);
per_major!(stall_continues => a_stalled_pipeline_continues_where_it_was: pg15, pg18);
per_major!(shutdown_while_behind => source_shutdown_never_waits_on_walshadow: pg15, pg18);

/// SIGTERM, timed.
fn term_within(h: &mut StreamHarness, limit: Duration) -> Result<()> {
    let started = Instant::now();
    let status = h.signal_run("-TERM")?;
    let took = started.elapsed();
    ensure!(
        status.success(),
        "run exited {status} on SIGTERM:\n{}",
        common::tail(&h.run_log(), 30)
    );
    ensure!(took < limit, "run took {took:?} to stop");
    Ok(())
}

fn prompt_stop(major: PgMajor) -> Result<()> {
    let mut h = harness(major, "stop", "")?;
    h.init()?;
    // ClickHouse down from the start: `run` waits to create its database.
    h.ch.stop()?;
    h.start_run()?;
    wait_until(
        Duration::from_secs(60),
        "run to wait for ClickHouse",
        || {
            Ok(h.run_log()
                .contains("ClickHouse: creating the destination database"))
        },
    )?;
    term_within(&mut h, Duration::from_secs(10))?;

    // Streaming, then ClickHouse goes down with rows in flight.
    h.ch.start_again()?;
    h.start_run()?;
    h.source
        .psql("insert into t select g, 'a' from generate_series(1, 1000) g")?;
    h.wait_caught_up(CATCH_UP)?;
    h.ch.stop()?;
    h.source
        .psql("insert into t select g, 'b' from generate_series(1001, 3000) g")?;
    wait_until(
        Duration::from_secs(60),
        "the stream to wait for ClickHouse",
        || {
            let s = h.status_json()?;
            Ok(s["destination"]["failures"]
                .as_u64()
                .is_some_and(|n| n >= 2))
        },
    )?;
    let text = h.cli_ok(&["status", "--config", h.config()])?;
    ensure!(
        text.contains("walshadow: running")
            && text.contains("ClickHouse:      not taking requests"),
        "{text}"
    );
    term_within(&mut h, Duration::from_secs(10))?;

    h.ch.start_again()?;
    h.start_run()?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("t", "t", &cols())?;
    ensure!(n == 3000, "{n} rows");
    h.stop_run()?;
    Ok(())
}

per_major!(prompt_stop => sigterm_stops_run_promptly_with_clickhouse_down: pg15, pg18);

fn one_run_per_state_dir(major: PgMajor) -> Result<()> {
    let mut h = streaming(major, "lock")?;
    let first = run_pid(&h)?;
    let holder = format!("another walshadow (pid {first}, `walshadow run`)");

    let second = Command::new(BIN)
        .args(["run", "--config", h.config()])
        .stdin(Stdio::null())
        .output()?;
    let err = String::from_utf8_lossy(&second.stderr);
    ensure!(!second.status.success(), "a second run started:\n{err}");
    ensure!(err.contains(&holder), "{err}");
    for args in [
        vec!["init", "--force", "--config", h.config()],
        vec!["toast", "compact", "--config", h.config()],
    ] {
        let out = h.cli(&args)?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(!out.status.success(), "{args:?} ran:\n{err}");
        ensure!(err.contains(&holder), "{args:?}: {err}");
    }

    // The first one never noticed: it streams on, through DDL.
    h.check_running()?;
    h.source.psql("alter table t add column w int")?;
    h.source
        .psql("insert into t select g, 'b', g from generate_series(101, 200) g")?;
    h.wait_caught_up(CATCH_UP)?;
    let mut with_w = cols();
    with_w.push(same("w"));
    let n = h.assert_equal("t", "t", &with_w)?;
    ensure!(n == 200, "{n} rows");
    h.stop_run()?;
    // Released with the process.
    h.start_run()?;
    h.wait_caught_up(CATCH_UP)?;
    h.stop_run()?;
    Ok(())
}

per_major!(one_run_per_state_dir => one_run_per_state_directory: pg15, pg18);

/// `h` streaming through a proxy the drill switches (with `settings` for
/// `batch_ms` in `[clickhouse]`), with 100 rows of `t` in ClickHouse.
fn streaming_through_proxy(h: &mut StreamHarness, settings: &str) -> Result<FaultProxy> {
    let proxy = FaultProxy::start(&h.ch.url())?;
    let mut text = std::fs::read_to_string(&h.config)?.replace(
        &format!("url = \"{}\"", h.ch.url()),
        &format!("url = \"{}\"", proxy.url()),
    );
    if !settings.is_empty() {
        text = text.replace("batch_ms = 200", settings);
    }
    std::fs::write(&h.config, text)?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into t select g, 'a' from generate_series(1, 100) g")?;
    h.wait_caught_up(CATCH_UP)?;
    Ok(proxy)
}

fn errors_pause(major: PgMajor) -> Result<()> {
    let metrics_port = common::loads::free_port()?;
    let mut h = harness(
        major,
        "cherr",
        &format!("\n[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n"),
    )?;
    let proxy = streaming_through_proxy(&mut h, "")?;

    let modes = [
        (ProxyMode::Status(401), "http_401"),
        (ProxyMode::Status(403), "http_403"),
        (ProxyMode::Status(404), "http_404"),
        (ProxyMode::Status(502), "http_502"),
        (ProxyMode::BadKey, "516"),
        (ProxyMode::Fake200, "bad_response"),
    ];
    let mut next = 101;
    for (mode, label) in modes {
        proxy.set_mode(mode.clone());
        h.source.psql(&format!(
            "insert into t select g, 'm' from generate_series({next}, {}) g",
            next + 99
        ))?;
        next += 100;
        let written = h.source.flush_lsn()?;
        wait_until(
            Duration::from_secs(60),
            &format!("{mode:?} to be retried"),
            || {
                let s = h.status_json()?;
                Ok(s["destination"]["failures"]
                    .as_u64()
                    .is_some_and(|n| n >= 2))
            },
        )?;
        let s = h.status_json()?;
        let applied: Lsn = s["applied"].as_str().context("applied")?.parse()?;
        ensure!(
            applied < written,
            "{mode:?}: applied {applied} past rows ClickHouse never took"
        );
        ensure!(
            s["tables"]["public.t"]["stopped"].is_null(),
            "{mode:?}: {s}"
        );
        let metrics = common::loads::scrape(metrics_port)?;
        ensure!(
            metrics.contains(&format!(
                "walshadow_destination_errors_total{{code=\"{label}\""
            )),
            "{mode:?}: no walshadow_destination_errors_total{{code=\"{label}\"}}:\n{metrics}"
        );
        ensure!(metrics.contains("walshadow_destination_up 0"), "{metrics}");
        let ready = common::loads::http_get(metrics_port, "/readyz")?;
        ensure!(
            ready.starts_with("HTTP/1.0 503") || ready.starts_with("HTTP/1.1 503"),
            "{mode:?}: {ready}"
        );
        let alive = common::loads::http_get(metrics_port, "/healthz")?;
        ensure!(alive.contains(" 200 "), "{alive}");
        proxy.set_mode(ProxyMode::Forward);
        h.wait_caught_up(CATCH_UP)?;
        h.assert_equal("t", "t", &cols())?;
        let ready = common::loads::http_get(metrics_port, "/readyz")?;
        ensure!(
            ready.contains(" 200 ") && ready.contains("ready"),
            "{mode:?}: {ready}"
        );
    }

    // The table renamed away for a while: UNKNOWN_TABLE pauses, the rows
    // written meanwhile (and after) arrive once it is back.
    h.ch.query("RENAME TABLE app.t TO app.t_away")?;
    h.source.psql(&format!(
        "insert into t select g, 'r' from generate_series({next}, {}) g",
        next + 99
    ))?;
    wait_until(
        Duration::from_secs(60),
        "UNKNOWN_TABLE to be retried",
        || {
            Ok(common::loads::scrape(metrics_port)?
                .contains("walshadow_destination_errors_total{code=\"60\",class=\"environment\"}"))
        },
    )?;
    h.ch.query("RENAME TABLE app.t_away TO app.t")?;
    h.source.psql("update t set v = 'after' where id % 3 = 0")?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("t", "t", &cols())?;
    ensure!(n == 800, "{n} rows");
    let s = h.status_json()?;
    ensure!(s["tables"]["public.t"]["stopped"].is_null(), "{s}");
    ensure!(s["destination"]["failing_since_unix_ms"].is_null(), "{s}");
    let metrics = common::loads::scrape(metrics_port)?;
    ensure!(metrics.contains("walshadow_destination_up 1"), "{metrics}");
    ensure!(
        metrics
            .lines()
            .any(|l| l.starts_with("walshadow_destination_retries_total ") && !l.ends_with(" 0")),
        "no retries counted:\n{metrics}"
    );
    ensure!(
        !metrics.contains("walshadow_table_stopped{table=\"public.t\"} 1"),
        "{metrics}"
    );
    h.stop_run()?;
    if h.run_log().contains("table stopped") {
        bail!("a table stopped:\n{}", h.run_log());
    }
    Ok(())
}

per_major!(errors_pause => clickhouse_errors_pause_and_never_lose_rows: pg15, pg18);

/// `walshadow_catalog_commits_total{outcome="…"}` now.
fn catalog_commits(port: u16, outcome: &str) -> Result<u64> {
    let metrics = common::loads::scrape(port)?;
    let prefix = format!("walshadow_catalog_commits_total{{outcome=\"{outcome}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no {prefix}in:\n{metrics}"))
}

/// One psql call of `n` short transactions, each built by `txn(i)`.
fn storm(h: &StreamHarness, n: usize, txn: impl Fn(usize) -> String) -> Result<()> {
    let sql: String = (0..n).map(txn).collect::<Vec<_>>().join("\n");
    h.source.psql(&sql)?;
    Ok(())
}

fn catalog_churn(major: PgMajor) -> Result<()> {
    let metrics_port = common::loads::free_port()?;
    let mut h = StreamHarness::new(
        BIN,
        major,
        "churn",
        &[
            "public.t",
            "public.p",
            "public.e",
            "public.later",
            "public.moved",
        ],
        &format!("\n[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n"),
    )?;
    h.source.psql(
        "create type mood as enum ('a', 'b');
         create table t (id int primary key, v text);
         create table p (id int primary key, v text) partition by range (id);
         create table p1 partition of p for values from (0) to (1000);
         create table e (id int primary key, m mood);
         create schema side;
         create table side.moved (id int primary key, v text);",
    )?;
    h.init()?;
    h.start_run()?;
    h.source.psql(
        "insert into t values (2, 'streamed'); insert into p values (1, 'streamed');
         insert into e values (1, 'a');",
    )?;
    h.wait_caught_up(CATCH_UP)?;

    // The storm: temporary tables (with a serial key, an index, ON COMMIT
    // DROP, rows), regular tables created and dropped, and one commit
    // that changes a pinned table's rows beside a temporary table.
    let refreshed =
        catalog_commits(metrics_port, "refreshed")? + catalog_commits(metrics_port, "coalesced")?;
    let skipped = catalog_commits(metrics_port, "skipped")?;
    storm(&h, 300, |i| {
        format!(
            "begin; create temp table tt{i} (id serial primary key, v text) on commit drop;
             create index on tt{i} (v); insert into tt{i} (v) values ('x'); commit;"
        )
    })?;
    storm(&h, 50, |i| {
        format!("create table unrelated{i} (id int primary key, v text); drop table unrelated{i};")
    })?;
    h.source.psql(
        "begin; create temp table z (id int) on commit drop; insert into t values (3, 'beside a temp table'); commit;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let refreshed_now =
        catalog_commits(metrics_port, "refreshed")? + catalog_commits(metrics_port, "coalesced")?;
    let skipped_now = catalog_commits(metrics_port, "skipped")?;
    ensure!(
        refreshed_now == refreshed,
        "the storm refreshed {} times; run log:\n{}",
        refreshed_now - refreshed,
        common::tail(&h.run_log(), 30)
    );
    ensure!(
        // 300 temporary tables, 50 × (create, drop), one beside a row.
        skipped_now - skipped > 300 + 100,
        "only {} catalog commits skipped",
        skipped_now - skipped
    );

    // What does concern a pinned table still takes effect at its commit.
    h.source.psql(
        "alter type mood add value 'c';
         insert into e values (2, 'c');
         begin; create temp table z (id int) on commit drop; alter type mood add value 'd'; commit;
         insert into e values (3, 'd');
         create table p2 partition of p for values from (1000) to (2000);
         insert into p values (1500, 'new partition');
         alter table t add column w int;
         insert into t values (4, 'new column', 7);
         create table later (id int primary key, v text);
         insert into later values (1, 'created after the start');
         alter table side.moved set schema public;
         insert into moved values (1, 'moved under an awaited name');",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("t", "t", &[same("id"), same("v"), same("w")])?;
    ensure!(n == 3, "t: {n} rows");
    h.assert_equal("e", "e", &[same("id"), common::col("m::text", "m")])?;
    h.assert_equal("p", "p", &cols())?;
    h.assert_equal("later", "later", &cols())?;
    h.assert_equal("moved", "moved", &cols())?;
    ensure!(
        catalog_commits(metrics_port, "refreshed")? + catalog_commits(metrics_port, "coalesced")?
            >= refreshed + 6,
        "changes that concern pinned tables were not refreshed"
    );
    h.stop_run()?;
    if h.run_log().contains("table stopped") {
        bail!("a table stopped:\n{}", h.run_log());
    }
    Ok(())
}

/// `[clickhouse] batch_ms` of the harness's config set to `ms`, with the
/// idle flush off: rows stay held in their batch until it comes of age.
fn set_batch_ms(h: &StreamHarness, ms: u64) -> Result<()> {
    let text = std::fs::read_to_string(&h.config)?;
    let (head, rest) = text.split_once("batch_ms = ").context("no batch_ms")?;
    let rest = rest.split_once('\n').map_or("", |(_, r)| r);
    let rest = match rest.split_once("idle_flush_ms = ") {
        Some((before, after)) => {
            format!("{before}{}", after.split_once('\n').map_or("", |(_, r)| r))
        }
        None => rest.to_owned(),
    };
    std::fs::write(
        &h.config,
        format!("{head}batch_ms = {ms}\nidle_flush_ms = 0\n{rest}"),
    )?;
    Ok(())
}

/// Catalog commits that concern a table coalesce when the table has
/// nothing past durable progress, and never otherwise:
///
/// 1. rows of `t` waiting in a batch (a long `batch_ms`), then `VACUUM FULL
///    t` (a new relation file, so after a crash the rows' old file would
///    resolve to nothing under the new catalog): the rows become durable
///    before the shadow moves past, so `kill -9` once it has loses none;
/// 2. a run of GRANT/REVOKE on an idle `t` and on `u`: coalesced (no
///    flush, no fsync each), then rows, a new column, rows and `kill -9`;
///
/// each ending with the oracle.
fn catalog_coalescing(major: PgMajor) -> Result<()> {
    let metrics_port = common::loads::free_port()?;
    let mut h = StreamHarness::new(
        BIN,
        major,
        "coalesce",
        &["public.t", "public.u"],
        &format!("\n[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n"),
    )?;
    h.source.psql(
        "create table t (id int primary key, v text);
         create table u (id int primary key, v text);",
    )?;
    h.init()?;
    h.start_run()?;
    h.source.psql(
        "insert into t select g, 'before' from generate_series(1, 100) g;
         insert into u select g, 'before' from generate_series(1, 100) g;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    h.stop_run()?;

    // 1. Rows held in a batch, then a rewrite of their table.
    set_batch_ms(&h, 600_000)?;
    h.start_run()?;
    h.source.psql(
        "insert into t select g, 'waiting in a batch' from generate_series(101, 300) g;
         update t set v = 'updated, waiting' where id <= 50;
         insert into u select g, 'waiting too' from generate_series(101, 200) g;",
    )?;
    let before_vacuum = h.source.flush_lsn()?;
    h.source.psql("vacuum full t")?;
    wait_until(CATCH_UP, "the shadow past VACUUM FULL", || {
        h.check_running()?;
        let s = h.status_json()?;
        let replayed: Lsn = s["shadow_replayed"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(Lsn::INVALID);
        Ok(replayed > before_vacuum)
    })?;
    h.kill_run()?;
    // Rows wait 200 ms in their batch from here on (no idle flush), so a
    // grant right after a change finds the change not yet durable.
    set_batch_ms(&h, 200)?;
    h.start_run()?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("t", "t", &cols())?;
    ensure!(n == 300, "t: {n} rows");
    h.assert_equal("u", "u", &cols())?;

    // 2. A run of grants on idle tables coalesces.
    let coalesced = catalog_commits(metrics_port, "coalesced")?;
    let refreshed = catalog_commits(metrics_port, "refreshed")?;
    storm(&h, 100, |i| {
        let table = if i % 2 == 0 { "t" } else { "u" };
        format!("grant select on {table} to public; revoke select on {table} from public;")
    })?;
    h.wait_caught_up(CATCH_UP)?;
    let coalesced_now = catalog_commits(metrics_port, "coalesced")?;
    let refreshed_now = catalog_commits(metrics_port, "refreshed")?;
    ensure!(
        coalesced_now - coalesced >= 190 && refreshed_now - refreshed <= 10,
        "grants on idle tables: {} coalesced, {} refreshed",
        coalesced_now - coalesced,
        refreshed_now - refreshed
    );
    // A grant after a change of its table is refreshed (made durable).
    h.source
        .psql("insert into t values (1000, 'then a grant'); grant select on t to public;")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(
        catalog_commits(metrics_port, "refreshed")? > refreshed_now,
        "a grant after a change of its table was not refreshed"
    );
    h.source.psql(
        "insert into t values (1001, 'before the column');
         grant select on t to public;
         alter table t add column w int;
         insert into t values (1002, 'after the column', 7);
         revoke select on t from public;
         update t set w = id where id < 10;",
    )?;
    h.kill_run()?;
    h.start_run()?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("t", "t", &[same("id"), same("v"), same("w")])?;
    ensure!(n == 303, "t: {n} rows");
    h.assert_equal("u", "u", &cols())?;
    h.stop_run()?;
    if h.run_log().contains("table stopped") {
        bail!("a table stopped:\n{}", h.run_log());
    }
    Ok(())
}

per_major!(catalog_coalescing => catalog_commits_coalesce_only_when_nothing_waits: pg15, pg18);
per_major!(catalog_churn => catalog_churn_refreshes_only_what_concerns_a_table: pg15, pg18);

/// Rows in ClickHouse table `app.{table}` (`FINAL`); 0 while it is missing.
/// A position `status` shows (`applied`, `decoded`, …).
fn status_lsn(h: &StreamHarness, field: &str) -> Result<Lsn> {
    let s = h.status_json()?;
    Ok(s[field].as_str().context(field.to_owned())?.parse()?)
}

fn ch_count(h: &StreamHarness, table: &str) -> Result<u64> {
    match h
        .ch
        .query(&format!("SELECT count() FROM app.{table} FINAL"))
    {
        Ok(n) => Ok(n.trim().parse()?),
        Err(_) => Ok(0),
    }
}

/// A commit is visible without waiting for `batch_ms` once the stream has
/// decoded all it received, and a flush inserts its tables at once: with
/// `a` renamed away in ClickHouse (its insert waits), the rows of `b` that
/// the same transaction wrote still arrive, while progress stays behind
/// `a`'s rows; once `a` is back both are equal to the source.
fn idle_flush_and_tables_at_once(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "idleflush", &["public.a", "public.b"], "")?;
    h.source.psql(
        "create table a (id int primary key, v text);
         create table b (id int primary key, v text);",
    )?;
    // Batches wait ten minutes for their age: only idleness flushes them.
    let text = std::fs::read_to_string(&h.config)?.replace(
        "batch_ms = 200",
        "batch_ms = 600000\nidle_flush_ms = 20\ninsert_concurrency = 4",
    );
    std::fs::write(&h.config, text)?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into a values (1, 'first'); insert into b values (1, 'first');")?;
    wait_until(
        Duration::from_secs(60),
        "the first rows, without waiting for batch_ms",
        || {
            h.check_running()?;
            Ok(ch_count(&h, "a")? == 1 && ch_count(&h, "b")? == 1)
        },
    )?;

    h.ch.query("RENAME TABLE app.a TO app.a_away")?;
    h.source.psql(
        "begin;
         insert into a select g, 'waits' from generate_series(2, 100) g;
         insert into b select g, 'arrives' from generate_series(2, 100) g;
         commit;",
    )?;
    let written = h.source.flush_lsn()?;
    wait_until(
        Duration::from_secs(60),
        "b's rows while a's insert waits",
        || {
            h.check_running()?;
            Ok(ch_count(&h, "b")? == 100)
        },
    )?;
    wait_until(
        Duration::from_secs(60),
        "status to say a's insert waits",
        || {
            let s = h.status_json()?;
            Ok(s["destination"]["waiting_for"]
                .as_str()
                .is_some_and(|w| w.contains("`a`")))
        },
    )?;
    let applied = status_lsn(&h, "applied")?;
    ensure!(
        applied < written,
        "applied {applied} past a's rows ClickHouse never took"
    );
    ensure!(ch_count(&h, "a_away")? == 1, "a's rows went elsewhere");
    h.ch.query("RENAME TABLE app.a_away TO app.a")?;
    wait_until(Duration::from_secs(60), "a's rows once it is back", || {
        h.check_running()?;
        Ok(ch_count(&h, "a")? == 100)
    })?;
    h.assert_equal("a", "a", &cols())?;
    h.assert_equal("b", "b", &cols())?;
    h.stop_run()?;
    if h.run_log().contains("table stopped") {
        bail!("a table stopped:\n{}", h.run_log());
    }
    Ok(())
}

per_major!(idle_flush_and_tables_at_once => idle_commits_are_visible_and_a_flush_inserts_its_tables_at_once: pg15, pg18);

/// `destination.failures` in status (0 while ClickHouse takes requests).
fn destination_failures(h: &StreamHarness) -> Result<u64> {
    Ok(h.status_json()?["destination"]["failures"]
        .as_u64()
        .unwrap_or(0))
}

fn back_after_outage(major: PgMajor) -> Result<()> {
    let mut h = streaming(major, "chback")?;
    h.ch.stop()?;
    h.source
        .psql("insert into t select g, 'b' from generate_series(101, 200) g")?;
    // The backoff is 0.2 s doubling to 10 s: the 7th failed try waits 10 s.
    wait_until(Duration::from_secs(120), "7 failed inserts", || {
        Ok(destination_failures(&h)? >= 7)
    })?;
    let seventh = Instant::now();
    h.ch.start_again()?;
    let started = seventh.elapsed();
    h.wait_caught_up(Duration::from_secs(60))?;
    let took = seventh.elapsed();
    eprintln!(
        "pg{}: ClickHouse answered {started:.1?} after the 7th failed insert, the rows were in after {took:.1?}",
        major.number()
    );
    ensure!(
        took < Duration::from_secs(8),
        "the rows arrived {took:.1?} after the 7th failed insert (ClickHouse was back after \
         {started:.1?}): the stream waited out its backoff"
    );
    ensure!(
        h.run_log().contains("ClickHouse answers again"),
        "no log line of ClickHouse answering again:\n{}",
        h.run_log()
    );
    let n = h.assert_equal("t", "t", &cols())?;
    ensure!(n == 200, "{n} rows");
    ensure!(destination_failures(&h)? == 0, "{}", h.status_json()?);
    h.stop_run()?;
    Ok(())
}

per_major!(back_after_outage => a_clickhouse_back_after_an_outage_is_retried_at_once: pg15, pg18);

/// Decoding goes on while a flush's inserts are in flight: with ClickHouse
/// holding an insert, the WAL committed after it is decoded (status'
/// `decoded` passes it) while progress stays behind the held rows; once the
/// insert is answered everything arrives, equal row by row.
fn decodes_while_inserting(major: PgMajor) -> Result<()> {
    let mut h = harness(major, "inflight", "")?;
    // Only idleness flushes: batches wait ten minutes for their age.
    let proxy = streaming_through_proxy(&mut h, "batch_ms = 600000\nidle_flush_ms = 20")?;

    proxy.set_mode(ProxyMode::HoldInserts);
    h.source.psql("insert into t values (101, 'held')")?;
    let held_rows = h.source.flush_lsn()?;
    wait_until(Duration::from_secs(60), "an insert to be held", || {
        h.check_running()?;
        Ok(proxy.held() >= 1)
    })?;
    h.source
        .psql("insert into t select g, 'after' from generate_series(102, 300) g")?;
    let written = h.source.flush_lsn()?;
    wait_until(
        Duration::from_secs(60),
        "the WAL after the held insert to be decoded",
        || {
            h.check_running()?;
            Ok(status_lsn(&h, "decoded")? >= written)
        },
    )?;
    let applied = status_lsn(&h, "applied")?;
    ensure!(
        applied < held_rows,
        "applied {applied} past the held rows (committed up to {held_rows})"
    );
    ensure!(
        ch_count(&h, "t")? == 100,
        "rows arrived past the held insert"
    );

    proxy.set_mode(ProxyMode::Forward);
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("t", "t", &cols())?;
    ensure!(n == 300, "{n} rows");
    // Nothing held now: a commit outside the tables in scope (the marker
    // table's) moves progress once the stream is idle, not after
    // `batch_ms` (ten minutes here).
    h.wait_caught_up(Duration::from_secs(30))?;
    h.stop_run()?;
    if h.run_log().contains("table stopped") {
        bail!("a table stopped:\n{}", h.run_log());
    }
    Ok(())
}

per_major!(decodes_while_inserting => decoding_goes_on_while_a_flush_is_in_flight: pg15, pg18);
