//! The chaos workload's findings, one drill each, on PostgreSQL 15 and 18,
//! each ending with the row-by-row oracle (source table = ClickHouse
//! `FINAL`) and the table still streaming:
//!
//! - a TOAST value older than walshadow read while the source refuses
//!   sessions (all connection slots taken: `53300`) is waited for, with the
//!   wait in `status`, not a stop;
//! - `REPLICA IDENTITY FULL` and an old TOAST value: two updates while
//!   walshadow is down, the first pointing at a value the second removed;
//!   the second supersedes the first (and the first's old version goes);
//! - a superseding change that itself waits for a newer version takes over
//!   the earlier version's wait (the row deleted only after walshadow read
//!   the first update).
//! - a rewrite that stores an old value anew under its value id: a ~36 kB
//!   text stored uncompressed (storage external), an update of another
//!   column while walshadow is down, then storage extended (and lz4 on 15)
//!   and VACUUM FULL, which compresses it: the older pointer's row is
//!   delivered whole.
//! - `ADD COLUMN … DEFAULT` on a partitioned table: the rows from before
//!   it read the default in ClickHouse, as they do in a plain table.
//! - `money` at its limits, into a ClickHouse table an older mapping made
//!   (`Decimal(18, 2)`, which holds neither limit): walshadow does not
//!   write rows into a layout they are not encoded for (the table stops
//!   with `schema_change`, naming the column and both types), and
//!   `walshadow table resync` brings it back as `Decimal(19, 2)`. A column
//!   type changed in ClickHouse while walshadow is down stops that table
//!   alone at the next start (on 18 with eight more tables in scope, so
//!   the start reads every table's columns in one query).
//! - partitions that change a table's rows without row changes in the WAL:
//!   a TRUNCATE of one partition, a DETACH, the ATTACH of a filled table,
//!   a DROP of a partition, a re-ATTACH after a TRUNCATE of the root: each
//!   makes walshadow load the table again by itself (a resync at that
//!   commit), so the detached and dropped rows go and the attached ones
//!   arrive; so do the ATTACH of a filled partitioned table, a RENAME and
//!   ATTACH in one transaction, and a DETACH, change and ATTACH in quick
//!   succession; a partition created as one (a new range), or made, filled
//!   and attached in one transaction, reloads nothing.
//! - a `copy` load whose snapshot sees a newer shape than its ClickHouse
//!   table has (the stream still behind a backlog and a `DROP NOT NULL`,
//!   an `ADD COLUMN`): it waits for the stream to apply the DDL instead of
//!   sending rows of another layout (which ClickHouse would misread, or
//!   refuse until the attempts run out), and never reports rows it did
//!   not write.
//! - a table created without a key, given one by a later transaction
//!   (`REPLICA IDENTITY FULL`, a primary key): it waits, shown in `status`,
//!   instead of stopping for good, and its rows (those from before the key
//!   included) are loaded once it has one.
//! - column DDL on a `REPLICA IDENTITY FULL` table (keyed by every column
//!   in ClickHouse): an `ADD COLUMN` and a `DROP COLUMN` are followed by a
//!   load of the table, not a stop.

mod common;

use std::process::Command;
use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use common::{BIN, OracleColumn, StreamHarness, same};
use walshadow_testkit::{PgMajor, wait_until};

const CATCH_UP: Duration = Duration::from_secs(180);

fn ensure_streaming(h: &StreamHarness, table: &str) -> Result<()> {
    let st = h.status_json()?;
    let stopped = &st["tables"][table]["stopped"];
    ensure!(
        stopped.is_null(),
        "{table} stopped: {stopped}\nrun log:\n{}",
        common::tail(&h.run_log(), 30)
    );
    Ok(())
}

/// Out of line, uncompressed (storage external), ~6.4 kB of md5 text.
const BIG: &str = "create function big(seed int) returns text language sql immutable as
    $$ select string_agg(md5((seed * 1000 + g)::text), '') from generate_series(1, 200) g $$;";

fn signal(pid: u32, sig: &str) -> Result<()> {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()?;
    ensure!(status.success(), "kill {sig} {pid}: {status}");
    Ok(())
}

/// Rows older than walshadow: the table is loaded by `copy`, so none of
/// its TOAST values are in the chunk mirror.
fn load_old_rows(h: &mut StreamHarness, table: &str, setup: &str) -> Result<()> {
    h.source.psql(&format!("{BIG}\n{setup}"))?;
    let text = std::fs::read_to_string(&h.config)?;
    std::fs::write(&h.config, format!("{text}initial_load = \"copy\"\n"))?;
    h.init()?;
    h.start_run()?;
    common::loads::wait_loaded(h, table)?;
    h.wait_caught_up(CATCH_UP)
}

fn toast_cols() -> Vec<OracleColumn> {
    vec![same("id"), same("label"), same("note")]
}

fn source_refusing_sessions(major: PgMajor) -> Result<()> {
    let opts = common::source_options()
        .conf("max_connections", "20")
        .conf("superuser_reserved_connections", "1");
    let mut h = StreamHarness::with_options(BIN, major, "toastbusy", &["public.t"], "", opts)?;
    load_old_rows(
        &mut h,
        "public.t",
        "create table t (id int primary key, label text, note text);
         alter table t alter column note set storage external;
         insert into t select g, 'old', big(g) from generate_series(1, 3) g;",
    )?;
    // Held while the update arrives and every session slot fills up, so
    // the value's read meets a full source.
    let pid = h.run_pid().context("run")?;
    signal(pid, "-STOP")?;
    let filled = h
        .source
        .psql("update t set label = 'new' where id = 2")
        .and_then(|_| common::fill_source(&h.source, 24, Duration::from_secs(30)));
    signal(pid, "-CONT")?;
    let full = filled?;
    let waiting = |h: &StreamHarness| -> Result<String> {
        let st = h.status_json()?;
        ensure!(
            st["tables"]["public.t"]["stopped"].is_null(),
            "stopped: {}",
            st["tables"]["public.t"]["stopped"]
        );
        Ok(st["tables"]["public.t"]["waiting"]
            .as_str()
            .unwrap_or_default()
            .to_owned())
    };
    let mut shown = String::new();
    wait_until(Duration::from_secs(30), "status to show the wait", || {
        h.check_running()?;
        shown = waiting(&h)?;
        Ok(!shown.is_empty())
    })
    .with_context(|| common::tail(&h.run_log(), 30))?;
    println!(
        "pg{}: status while the source is full: {shown}",
        major.number()
    );
    ensure!(
        shown.contains("53300") && !shown.contains("authentication"),
        "{shown}"
    );
    full.release();
    h.wait_caught_up(CATCH_UP)?;
    ensure_streaming(&h, "public.t")?;
    ensure!(
        waiting(&h)?.is_empty(),
        "still waiting after the source came back"
    );
    let n = h.assert_equal("t", "t", &toast_cols())?;
    ensure!(n == 3, "{n} rows");
    h.stop_run()?;
    Ok(())
}

per_major!(source_refusing_sessions => a_toast_read_waits_out_a_source_refusing_sessions: pg15, pg18);

fn full_identity_old_value(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "fullgone", &["public.f"], "")?;
    load_old_rows(
        &mut h,
        "public.f",
        "create table f (id int, label text, note text);
         alter table f replica identity full;
         alter table f alter column note set storage external;
         insert into f select g, 'old', big(g) from generate_series(1, 3) g;",
    )?;
    h.kill_run()?;
    // The first new version points at a value the second update removes.
    h.source.psql("update f set label = 'new' where id = 1")?;
    h.source.psql("update f set note = big(11) where id = 1")?;
    h.start_run()?;
    h.wait_caught_up(CATCH_UP)?;
    ensure_streaming(&h, "public.f")?;
    h.source.psql("update f set label = 'later' where id = 2")?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("f", "f", &toast_cols())?;
    ensure!(n == 3, "{n} rows");
    h.stop_run()?;
    Ok(())
}

per_major!(full_identity_old_value => full_identity_row_with_a_gone_toast_value_is_superseded: pg15, pg18);

fn waiting_supersedes(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "waitchain", &["public.t"], "")?;
    let pauses = h.arm_holds(&[walshadow_failpoints::STREAM_AFTER_TOAST_GONE])?;
    load_old_rows(
        &mut h,
        "public.t",
        "create table t (id int primary key, label text, note text, memo text);
         alter table t alter column note set storage external;
         alter table t alter column memo set storage external;
         insert into t select g, 'old', big(g), big(g + 100) from generate_series(1, 5) g;",
    )?;
    h.kill_run()?;
    // U1 points at note and memo as they were; U2 replaces note (U1's
    // note is gone from then on) and still points at the old memo.
    h.source.psql("update t set label = 'u1' where id = 4")?;
    h.source.psql("update t set note = big(44) where id = 4")?;
    h.start_run()?;
    // walshadow found U1's note gone (source position F1): only now is the
    // row deleted, so when walshadow reads U2 its memo is gone too, and
    // the delete comes after F1.
    let paused = pauses.join("public.t.gone.paused");
    wait_until(CATCH_UP, "U1 to wait for a newer version", || {
        h.check_running()?;
        Ok(paused.exists())
    })
    .with_context(|| common::tail(&h.run_log(), 30))?;
    for i in 0..50 {
        h.source
            .psql(&format!("update t set label = 'busy {i}' where id = 1"))?;
    }
    h.source.psql("delete from t where id = 4")?;
    let release = |dir: &std::path::Path| {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    };
    release(&pauses);
    let target = h.source.flush_lsn()?;
    wait_until(CATCH_UP, "walshadow to apply the delete", || {
        h.check_running()?;
        release(&pauses);
        Ok(h.applied()?.is_some_and(|a| a >= target))
    })
    .with_context(|| common::tail(&h.run_log(), 30))?;
    h.wait_caught_up(CATCH_UP)?;
    ensure_streaming(&h, "public.t")?;
    let st = h.status_json()?;
    ensure!(
        st["toast"]["waiting_rows"] == 0,
        "rows still wait: {}",
        st["toast"]
    );
    let cols = vec![same("id"), same("label"), same("note"), same("memo")];
    let n = h.assert_equal("t", "t", &cols)?;
    ensure!(n == 4, "{n} rows");
    h.stop_run()?;
    Ok(())
}

per_major!(waiting_supersedes => a_waiting_newer_version_takes_over_the_wait: pg15, pg18);

fn rewrite_stores_anew(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "restored", &["public.t"], "")?;
    load_old_rows(
        &mut h,
        "public.t",
        "create table t (id int primary key, label text, note text);
         alter table t alter column note set storage external;
         insert into t select g, 'old', (select string_agg(md5((g * 1000 + i)::text) || ' lorem ipsum dolor sit amet ', '') from generate_series(1, 600) i) from generate_series(1, 3) g;",
    )?;
    let compression = if major == PgMajor::V15 {
        "alter table t alter column note set compression lz4;"
    } else {
        // This 18 build has no lz4.
        ""
    };
    h.kill_run()?;
    h.source.psql("update t set label = 'new' where id = 2")?;
    h.source.psql(&format!(
        "alter table t alter column note set storage extended; {compression}"
    ))?;
    h.source.psql("vacuum full t")?;
    let stored = h
        .source
        .query_one("select pg_column_compression(note) from t where id = 2")?;
    // Compressed now, and still out of line under the same value id.
    let external = h
        .source
        .query_one("select pg_column_size(note) > 2000 from t where id = 2")?;
    ensure!(
        !stored.is_empty() && external == "t",
        "the rewrite did not store the value anew out of line ({stored:?}, {external}): the drill proves nothing"
    );
    h.start_run()?;
    h.wait_caught_up(CATCH_UP)?;
    ensure_streaming(&h, "public.t")?;
    let n = h.assert_equal("t", "t", &toast_cols())?;
    ensure!(n == 3, "{n} rows");
    h.stop_run()?;
    Ok(())
}

per_major!(rewrite_stores_anew => a_value_a_rewrite_stored_anew_is_delivered: pg15, pg18);

fn partitioned_add_column_default(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "ptdefault", &["public.pt"], "")?;
    h.source.psql(
        "create table pt (id int primary key, v text) partition by range (id);
         create table pt_1 partition of pt for values from (0) to (100);
         create table pt_2 partition of pt for values from (100) to (200);",
    )?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into pt select g, 'v' || g from generate_series(1, 180, 7) g")?;
    h.wait_caught_up(CATCH_UP)?;
    h.source.psql(
        "alter table pt add column extra text default 'dflt';
         alter table pt add column n int not null default 7;
         insert into pt values (150, 'after', 'given', 1);
         update pt set v = 'updated' where id = 8;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    ensure_streaming(&h, "public.pt")?;
    let cols = vec![same("id"), same("v"), same("extra"), same("n")];
    let n = h.assert_equal("pt", "pt", &cols)?;
    ensure!(n == 27, "{n} rows");
    h.stop_run()?;
    Ok(())
}

per_major!(partitioned_add_column_default => add_column_default_on_a_partitioned_table: pg15, pg18);

fn money_into_an_older_layout(major: PgMajor) -> Result<()> {
    // On 18 with eight more tables in scope: a start that meets that many
    // tables reads ClickHouse's columns of all of them in one query, and
    // must find the older layout that way too.
    let fillers: Vec<String> = match major {
        PgMajor::V18 => (1..=8).map(|i| format!("f{i}")).collect(),
        _ => Vec::new(),
    };
    let keys: Vec<String> = std::iter::once("public.m".to_owned())
        .chain(fillers.iter().map(|f| format!("public.{f}")))
        .collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let mut h = StreamHarness::new(BIN, major, "money", &keys, "")?;
    h.source
        .psql("create table m (id int primary key, price money)")?;
    for f in &fillers {
        h.source
            .psql(&format!("create table {f} (id int primary key)"))?;
    }
    // As an older walshadow made it.
    h.ch.query("CREATE DATABASE IF NOT EXISTS app")?;
    h.ch.query(
        "CREATE TABLE app.m (id Int32, price Nullable(Decimal(18, 2)), _lsn UInt64, _seq UInt64, \
         _xid UInt32, _commit_time DateTime64(6, 'UTC'), _is_deleted UInt8, \
         _version UInt128 MATERIALIZED bitOr(bitShiftLeft(toUInt128(_lsn), 64), toUInt128(_seq))) \
         ENGINE = ReplacingMergeTree(_version, _is_deleted) ORDER BY id",
    )?;
    h.init()?;
    h.start_run()?;
    h.source.psql(
        "insert into m values (1, '-92233720368547758.08'), (2, '92233720368547758.07'), (3, '12.34'), (4, null)",
    )?;
    let mut last = serde_json::Value::Null;
    wait_until(CATCH_UP, "public.m to stop", || {
        h.check_running()?;
        last = h.status_json()?["tables"]["public.m"]["stopped"].clone();
        Ok(!last.is_null())
    })
    .with_context(|| common::tail(&h.run_log(), 30))?;
    let reason = last["reason"].as_str().unwrap_or_default();
    ensure!(
        last["code"] == "schema_change"
            && reason.contains(
                "\"price\" is Nullable(Decimal(18, 2)), walshadow writes Nullable(Decimal(19, 2))"
            ),
        "{last}"
    );
    let rows = h.ch.query("SELECT count() FROM app.m")?;
    ensure!(
        rows.trim() == "0",
        "rows went into the older layout: {rows}"
    );
    for f in &fillers {
        h.source.psql(&format!("insert into {f} values (1)"))?;
    }
    h.wait_caught_up(CATCH_UP)?;
    for f in &fillers {
        let n = h.assert_equal(f, f, &[same("id")])?;
        ensure!(n == 1, "{f}: {n} rows");
    }
    h.cli_ok(&["table", "resync", "public.m", "--config", h.config()])?;
    wait_until(CATCH_UP, "public.m to stream again", || {
        h.check_running()?;
        Ok(h.table_state("public.m")?["state"] == "streaming")
    })
    .with_context(|| common::tail(&h.run_log(), 30))?;
    h.source
        .psql("update m set price = price / 2 where id = 1")?;
    h.wait_caught_up(CATCH_UP)?;
    let cols = vec![
        same("id"),
        OracleColumn {
            pg: "trim_scale(price::numeric)".into(),
            ch: "price".into(),
        },
    ];
    let n = h.assert_equal("m", "m", &cols)?;
    ensure!(n == 4, "{n} rows");
    let ty = h.ch.query(
        "SELECT type FROM system.columns WHERE database = 'app' AND table = 'm' AND name = 'price'",
    )?;
    ensure!(ty.trim() == "Nullable(Decimal(19, 2))", "price is {ty}");
    // Changed behind walshadow's back while it was down: found at the
    // start (on 18 from the one query for all tables), and that table
    // alone stops.
    h.stop_run()?;
    let changed = fillers.first().map_or("m", String::as_str);
    h.ch.query(&format!(
        "ALTER TABLE app.{changed} MODIFY COLUMN _xid UInt64"
    ))?;
    h.start_run()?;
    let key = format!("public.{changed}");
    wait_until(CATCH_UP, &format!("{key} to stop"), || {
        h.check_running()?;
        last = h.status_json()?["tables"][&key]["stopped"].clone();
        Ok(!last.is_null())
    })
    .with_context(|| common::tail(&h.run_log(), 30))?;
    ensure!(
        last["code"] == "schema_change"
            && last["reason"].as_str().unwrap_or_default().contains("_xid"),
        "{last}"
    );
    let others = h.status_json()?;
    for k in keys.iter().filter(|k| **k != key) {
        ensure!(others["tables"][k]["stopped"].is_null(), "{k}: {others}");
    }
    h.stop_run()?;
    Ok(())
}

per_major!(money_into_an_older_layout => money_at_its_limits_never_goes_into_an_older_layout: pg15, pg18);

/// Waits until walshadow has loaded `key` again by itself `n` times in all
/// and streams it.
fn wait_reloaded(h: &mut StreamHarness, key: &str, n: usize) -> Result<()> {
    wait_reloads(h, key, n, n)
}

/// [`wait_reloaded`] when reloads overlap: `n` started, at least `done`
/// swapped in (a reload started while another loads replaces it).
fn wait_reloads(h: &mut StreamHarness, key: &str, n: usize, done: usize) -> Result<()> {
    h.wait_caught_up(CATCH_UP)?;
    wait_until(CATCH_UP, &format!("reload {n} of {key}"), || {
        h.check_running()?;
        Ok(h.run_log().matches("resync done").count() >= done
            && h.table_state(key)?["state"] == "streaming")
    })
    .with_context(|| common::tail(&h.run_log(), 30))?;
    let reloads = h.run_log().matches("loads the table again").count();
    ensure!(
        reloads == n,
        "{reloads} reloads, expected {n}\n{}",
        common::tail(&h.run_log(), 30)
    );
    h.wait_caught_up(CATCH_UP)
}

fn partitions_change_rows(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "partmoves", &["public.pm"], "")?;
    h.source.psql(
        "create table pm (id int primary key, v text) partition by range (id);
         create table pm_a partition of pm for values from (0) to (100);
         create table pm_b partition of pm for values from (100) to (200);
         create table pm_c partition of pm for values from (200) to (300);",
    )?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into pm select g, 'v' || g from generate_series(1, 299, 3) g")?;
    h.wait_caught_up(CATCH_UP)?;
    let cols = vec![same("id"), same("v")];
    let equal = |h: &StreamHarness, what: &str| -> Result<usize> {
        ensure_streaming(h, "public.pm")?;
        h.assert_equal("pm", "pm", &cols).context(what.to_owned())
    };
    equal(&h, "before")?;
    // Created as a partition: nothing to load.
    h.source.psql(
        "create table pm_d partition of pm for values from (300) to (400);
         insert into pm values (350, 'd');",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    equal(&h, "a new partition")?;
    ensure!(
        !h.run_log().contains("loads the table again"),
        "a new partition reloaded the table"
    );
    h.source
        .psql("truncate pm_a; insert into pm values (5, 'after the truncate')")?;
    wait_reloaded(&mut h, "public.pm", 1)?;
    equal(&h, "after a TRUNCATE of one partition")?;
    h.source
        .psql("alter table pm detach partition pm_b; insert into pm_b values (150, 'detached')")?;
    wait_reloaded(&mut h, "public.pm", 2)?;
    equal(&h, "after a DETACH")?;
    h.source.psql(
        "create table pm_e (id int not null, v text);
         insert into pm_e values (450, 'e1'), (460, 'e2');
         alter table pm attach partition pm_e for values from (400) to (500);",
    )?;
    wait_reloaded(&mut h, "public.pm", 3)?;
    equal(&h, "after the ATTACH of a filled table")?;
    h.source.psql("drop table pm_c")?;
    wait_reloaded(&mut h, "public.pm", 4)?;
    h.source.psql("update pm set v = 'later' where id = 460")?;
    h.wait_caught_up(CATCH_UP)?;
    equal(&h, "after a DROP of a partition")?;
    // The root emptied, then the detached partition (holding rows) back.
    h.source.psql(
        "truncate pm;
         alter table pm attach partition pm_b for values from (100) to (200);",
    )?;
    wait_reloaded(&mut h, "public.pm", 5)?;
    let n = equal(&h, "after a TRUNCATE of the root and a re-ATTACH")?;
    ensure!(
        n > 30,
        "{n} rows: the re-attached partition's rows are missing"
    );
    // Made, filled and attached in one transaction: the stream has every
    // row of it, nothing to load.
    h.source.psql(
        "begin;
         create table pm_f (id int not null, v text);
         insert into pm_f values (550, 'f');
         alter table pm attach partition pm_f for values from (500) to (600);
         commit;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    equal(&h, "after a partition made and attached in one transaction")?;
    // On 16 the file of a transaction's first new table is logged before
    // the transaction has an xid (XLOG_SMGR_CREATE with xid 0), so the
    // stream cannot tell it was made here: it reloads once more.
    let extra = usize::from(major == PgMajor::V16);
    let log = h.run_log();
    let reloads: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("loads the table again"))
        .collect();
    ensure!(
        reloads.len() == 5 + extra,
        "{} reloads, expected {}:\n{}",
        reloads.len(),
        5 + extra,
        reloads.join("\n")
    );
    // A partitioned table with rows, attached: its leaves are old files.
    h.source.psql(
        "create table pm_g (id int not null, v text) partition by range (id);
         create table pm_g1 partition of pm_g for values from (600) to (650);
         insert into pm_g values (610, 'g');
         alter table pm attach partition pm_g for values from (600) to (700);",
    )?;
    wait_reloaded(&mut h, "public.pm", 6 + extra)?;
    equal(&h, "after the ATTACH of a filled partitioned table")?;
    // Filled earlier, renamed and attached in one transaction.
    h.source.psql(
        "create table pm_h_src (id int not null, v text);
         insert into pm_h_src values (710, 'h');
         begin;
         alter table pm_h_src rename to pm_h;
         alter table pm attach partition pm_h for values from (700) to (800);
         commit;",
    )?;
    wait_reloaded(&mut h, "public.pm", 7 + extra)?;
    equal(&h, "after a RENAME and ATTACH in one transaction")?;
    // Detached, changed and attached again in quick succession: each
    // commit is judged on its own.
    h.source.psql(
        "alter table pm detach partition pm_h;
         delete from pm_h;
         insert into pm_h values (720, 'h2');
         alter table pm attach partition pm_h for values from (700) to (800);",
    )?;
    wait_reloads(&mut h, "public.pm", 9 + extra, 8 + extra)?;
    let n = equal(&h, "after a DETACH, a change and an ATTACH")?;
    let expected = h.source.query_one("select count(*) from pm")?;
    ensure!(
        n.to_string() == expected,
        "{n} rows, the source has {expected}"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(partitions_change_rows => partitions_that_move_rows_reload_the_table: pg15, pg18);

fn full_identity_column_ddl(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "fullddl", &["public.f"], "")?;
    h.source.psql(
        "create table f (a int, b text);
         alter table f replica identity full;",
    )?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into f select g, 'b' || g from generate_series(1, 50) g")?;
    h.wait_caught_up(CATCH_UP)?;
    h.source.psql(
        "alter table f add column c text default 'dflt';
         insert into f values (51, 'b51', 'given');
         update f set b = 'changed' where a = 3;",
    )?;
    wait_reloaded(&mut h, "public.f", 1)?;
    // Rows from before the ADD, keyed by the new column too.
    h.source
        .psql("update f set c = 'set' where a = 4; delete from f where a = 5;")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure_streaming(&h, "public.f")?;
    h.assert_equal("f", "f", &[same("a"), same("b"), same("c")])?;
    h.source.psql(
        "alter table f drop column b;
         update f set c = 'after the drop' where a = 6;
         delete from f where a = 7;",
    )?;
    wait_reloaded(&mut h, "public.f", 2)?;
    h.source
        .psql("update f set c = 'later' where a = 8; delete from f where a = 51;")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure_streaming(&h, "public.f")?;
    let n = h.assert_equal("f", "f", &[same("a"), same("c")])?;
    ensure!(n == 48, "{n} rows");
    let ty = h.ch.query(
        "SELECT count() FROM system.columns WHERE database = 'app' AND table = 'f' AND name = 'b'",
    )?;
    ensure!(
        ty.trim() == "0",
        "the dropped column is still in ClickHouse"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(full_identity_column_ddl => column_ddl_on_a_full_identity_table_is_followed: pg15, pg18);

fn copy_load_newer_shape(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(
        BIN,
        major,
        "copyshape",
        &["public.big"],
        "[backfill]\nmax_attempts = 2\n[table.\"public.nn\"]\ninitial_load = \"copy\"\n[table.\"public.added\"]\ninitial_load = \"copy\"\n",
    )?;
    h.source.psql(
        "create table big (id int primary key, v int);
         create table nn (id int primary key, a int not null, b text not null);
         insert into nn select g, g, 'b' || g from generate_series(1, 37) g;
         create table added (id int primary key, a int);
         insert into added select g, g from generate_series(1, 37) g;",
    )?;
    h.init()?;
    // A backlog the stream must apply before it reaches the DDL, which the
    // loads' snapshots already see.
    h.source
        .psql("insert into big select g, g from generate_series(1, 600000) g")?;
    h.source.psql(
        "alter table nn alter column a drop not null;
         alter table added add column extra text default 'dflt';",
    )?;
    h.start_run()?;
    common::loads::wait_loaded(&mut h, "public.nn")?;
    common::loads::wait_loaded(&mut h, "public.added")?;
    h.source.psql(
        "update nn set a = null where id = 3; update added set extra = 'set' where id = 4;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    ensure_streaming(&h, "public.nn")?;
    ensure_streaming(&h, "public.added")?;
    let n = h.assert_equal("nn", "nn", &[same("id"), same("a"), same("b")])?;
    ensure!(n == 37, "{n} rows in nn");
    let n = h.assert_equal("added", "added", &[same("id"), same("a"), same("extra")])?;
    ensure!(n == 37, "{n} rows in added");
    // The loads met the older layout (the backlog holds the stream far
    // longer than a load of 37 rows takes), and waited it out.
    ensure!(
        h.run_log()
            .contains("waiting for the stream to apply the table's DDL"),
        "the loads never met the older layout: the drill proves nothing"
    );
    let ledger = std::fs::read_to_string(h.state_dir.join("backfills.toml"))?;
    ensure!(
        !ledger.contains("attempts failed"),
        "a load used up its attempts:\n{ledger}"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(copy_load_newer_shape => a_copy_load_waits_for_the_shape_its_snapshot_sees: pg15, pg18);

fn key_set_later(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "laterkey", &["public.k", "public.n"], "")?;
    h.init()?;
    h.start_run()?;
    h.source.psql(
        "create table k (a int, b text);
         insert into k values (1, 'x'), (2, 'y');
         update k set b = 'y2' where a = 2;
         create table n (id int not null, v text);
         insert into n select g, 'n' || g from generate_series(1, 20) g;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let st = h.status_json()?;
    for key in ["public.k", "public.n"] {
        let t = &st["tables"][key];
        ensure!(
            t["stopped"].is_null()
                && t["waiting"]
                    .as_str()
                    .is_some_and(|w| w.contains("no primary key or replica identity")),
            "{key}: {t}"
        );
    }
    h.source.psql(
        "alter table k replica identity full;
         insert into k values (3, 'z');
         update k set b = 'x2' where a = 1;
         alter table n add primary key (id);
         update n set v = 'changed' where id = 5;
         delete from n where id = 6;",
    )?;
    common::loads::wait_loaded(&mut h, "public.k")?;
    common::loads::wait_loaded(&mut h, "public.n")?;
    h.source
        .psql("delete from k where a = 2; update n set v = 'later' where id = 7;")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure_streaming(&h, "public.k")?;
    ensure_streaming(&h, "public.n")?;
    let n = h.assert_equal("k", "k", &[same("a"), same("b")])?;
    ensure!(n == 2, "{n} rows in k");
    let n = h.assert_equal("n", "n", &[same("id"), same("v")])?;
    ensure!(n == 19, "{n} rows in n");
    h.stop_run()?;
    Ok(())
}

per_major!(key_set_later => a_key_set_in_a_later_transaction_is_waited_for: pg15, pg18);
