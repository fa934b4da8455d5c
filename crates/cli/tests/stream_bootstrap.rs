//! `walshadow init --bootstrap` on PostgreSQL 15 and 18: one backup builds
//! the shadow and loads every selected table's existing rows.
//!
//! - `one_backup_under_load`: four tables selected by `[table]` pins and a
//!   pattern, one of them partitioned, one TOASTed, one with dead tuples
//!   left unvacuumed, one with multixact lockers; a table pinned with
//!   `none`, one not selected, and two with config-table rows, left to
//!   their own loads: one its row opts in (loaded from the backup too),
//!   one a pattern takes (the file wins over its row; `copy`). A workload writes during `init` and after. Two transactions
//!   wrote before the backup and stay open across it: the load waits for
//!   them (status says so), one commits and one aborts. Every table equal
//!   row by row; no dead tuple resurrected; the four loaded from init's
//!   backup (their ledger entries), no second backup; the landed files
//!   removed once loaded.
//! - `killed_mid_walk_and_after_exchange`: `kill -9` (a failpoint) after
//!   the walk recorded its first relation segment; the restart resumes and
//!   skips it. Then a crash right after a table's exchange; the restart
//!   finishes the swap. Equal, no staging table left; the table its
//!   config-table row opts in keeps its load from the backup across both.
//! - `rewritten_before_first_run`: a table rewritten between `init` and
//!   `run` loads by `copy`, the other from the backup.
//! - `torn_copies_read_from_the_window`: pages changed while the backup
//!   streamed, torn in the landed copy, are read from the window; a TOAST
//!   value nothing holds sets its table aside.

mod common;

use std::sync::Arc;
use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use common::loads::*;
use common::{BIN, StreamHarness, same};
use walshadow_testkit::{PgMajor, wait_until};

const CONFIG: &str = "\n[table.\"public.orders\"]\ninitial_load = \"copy\"\n\n[table.\"public.dead\"]\ninitial_load = \"copy\"\n\n[table.\"public.m\"]\ninitial_load = \"base_backup\"\n\n[table.\"public.par?s\"]\ninitial_load = \"copy\"\nexclude_columns = [\"v\"]\n\n[table.\"public.skipped\"]\ninitial_load = \"none\"\n";

/// The tables `one_backup_under_load` loads from init's backup.
const BOOTSTRAPPED: [&str; 5] = [
    "public.orders",
    "public.dead",
    "public.m",
    "public.parts",
    "public.cfg",
];

fn count(h: &StreamHarness, sql: &str) -> Result<u64> {
    let n = h.ch.query(sql)?;
    n.trim()
        .parse()
        .with_context(|| format!("{sql} answered {n:?}"))
}

fn staging_left(h: &StreamHarness) -> Result<u64> {
    count(
        h,
        "SELECT count() FROM system.tables WHERE database = 'app' AND name LIKE '%__wsstg'",
    )
}

/// A session that writes `sql` in a transaction, then holds it open until
/// the test writes `release` into `gate` (commits) or `abort` (rolls back
/// by an error).
fn held_writer(h: &StreamHarness, sql: &str, release: &str) -> std::thread::JoinHandle<Result<()>> {
    let source = Arc::clone(&h.source);
    let text = format!(
        "begin;
         {sql}
         do $$ begin -- held:{release}
           while not exists (select 1 from gate where what in ('{release}', 'abort {release}')) loop
             perform pg_sleep(0.05);
           end loop;
           if exists (select 1 from gate where what = 'abort {release}') then
             raise exception 'rolled back on purpose';
           end if;
         end $$;
         commit;"
    );
    std::thread::spawn(move || source.psql(&text).map(drop))
}

/// Lets the two held writers go: `commit` commits, `abort` rolls back.
fn end_writers(
    h: &StreamHarness,
    committer: std::thread::JoinHandle<Result<()>>,
    aborter: std::thread::JoinHandle<Result<()>>,
) -> Result<()> {
    h.source
        .psql("insert into gate values ('commit'), ('abort abort');")?;
    committer
        .join()
        .map_err(|_| anyhow::anyhow!("writer panicked"))??;
    let aborted = aborter
        .join()
        .map_err(|_| anyhow::anyhow!("writer panicked"))?;
    ensure!(aborted.is_err(), "the aborting writer committed");
    Ok(())
}

fn setup(h: &StreamHarness) -> Result<()> {
    h.source.psql(ORDERS_DEAD_M_SQL)?;
    h.source.psql(
        "create table gate (what text);
         -- Written by the held writers only (the workload keeps to 1..3000).
         insert into orders values (8001, 1, 1, 'held'), (8002, 2, 2, 'held');
         create table parts (id int, region text, v text, primary key (id, region)) partition by list (region);
         create table parts_eu partition of parts for values in ('eu');
         create table parts_us partition of parts for values in ('us');
         insert into parts select g, case when g % 2 = 0 then 'eu' else 'us' end, 'p' || g from generate_series(1, 2000) g;
         delete from parts where id % 7 = 0;
         create table skipped (id int primary key, v text);
         insert into skipped select g, 's' from generate_series(1, 100) g;
         create table other (id int primary key, v text);
         insert into other select g, 'x' from generate_series(1, 100) g;
         create table parks (id int primary key, v text);
         insert into parks select g, 'k' from generate_series(1, 100) g;
         create table cfg (id int primary key, v text);
         insert into cfg select g, 'c' from generate_series(1, 300) g;",
    )?;
    // Multixacts: a key-share locker holds rows 1..20 while another locks
    // them too and updates 1..10 (a non-key update: the new xmax is a
    // multixact of a locker and an updater).
    let locker = held_writer(
        h,
        "select count(*) from (select 1 from m where id <= 20 for key share) l;",
        "unlock",
    );
    h.wait_for_session("held:unlock")?;
    h.source.psql(
        "begin; select count(*) from (select 1 from m where id <= 20 for key share) l;
         update m set v = 'updated by a locker' where id <= 10; commit;
         insert into gate values ('unlock');",
    )?;
    locker
        .join()
        .map_err(|_| anyhow::anyhow!("locker panicked"))??;
    let multis = h
        .source
        .query_one("select count(*) from m where (xmax::text::bigint) <> 0 and id <= 20")?;
    ensure!(multis.trim() != "0", "no row of m carries a locker's xmax");
    Ok(())
}

fn one_backup_under_load(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "bootstrap", &[], CONFIG)?;
    setup(&h)?;
    // Tables with rows of their own in the config table at init: `cfg`,
    // which its row opts in, loads from the backup too (taken where the
    // stream starts); `parks` (the file pattern takes it, and wins over
    // its row) loads by the pattern's `copy`.
    h.source.psql(&format!(
        "{}\ninsert into walshadow.tables (schema_name, table_name, replicate, initial_load) values
           ('public', 'cfg', true, 'copy'), ('public', 'parks', false, null);",
        walshadow_config::config_table_sql("walshadow", "tables")
    ))?;
    // Written before the backup, open across it.
    let committer = held_writer(
        &h,
        "insert into dead values (7001, 'open, commits'); update dead set v = 'open update' where id = 2;
         delete from dead where id = 4; update orders set customer = -1 where id = 8001;",
        "commit",
    );
    let aborter = held_writer(
        &h,
        "insert into orders values (9001, 1, 1, 'open, aborts'); delete from orders where id = 8002;
         update dead set v = 'aborted update' where id = 5; delete from parts where id = 1;",
        "abort",
    );
    h.wait_for_session("held:commit")?;
    h.wait_for_session("held:abort")?;
    let workload = OrdersWorkload::start(&h)?;
    let out = h.cli_ok(&["init", "--bootstrap", "--config", h.config()])?;
    eprintln!("{out}");
    ensure!(
        out.contains("bootstrap     5 tables"),
        "init --bootstrap selected other tables:\n{out}"
    );
    let landed = h.state_dir.join("bootstrap");
    ensure!(
        landed.join("backup.json").exists(),
        "no landed backup after init"
    );
    // After the backup's end, before the stream's first commit is decoded:
    // the stream has it (the table is taken where the stream starts).
    h.source
        .psql("update cfg set v = 'after init' where id <= 5;")?;
    h.start_run()?;
    // The load waits for the writers open across the backup's start, and
    // says so.
    wait_until(CATCH_UP, "the load to wait for the open writers", || {
        Ok(h.run_log()
            .contains("waiting for transactions open since before backup"))
    })
    .with_context(|| common::tail(&h.run_log(), 40))?;
    let status = h.cli_ok(&["status", "--config", h.config()])?;
    ensure!(
        status.contains("waiting for transactions open since before backup"),
        "status does not say the load waits:\n{status}"
    );
    end_writers(&h, committer, aborter)?;
    for key in BOOTSTRAPPED.iter().chain(&["public.parks"]) {
        wait_loaded(&mut h, key)?;
    }
    let writes = workload.finish()?;
    h.source
        .psql("update dead set v = 'after' where id = 7; delete from m where id = 50;")?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("public.orders", "orders", &orders_cols())?;
    eprintln!("orders: {n} rows equal after {writes} workload transactions");
    h.assert_equal("public.dead", "dead", &[same("id"), same("v")])?;
    h.assert_equal("public.cfg", "cfg", &[same("id"), same("v")])?;
    // The pattern's column rules hold for the tables it takes (`v` left out).
    h.assert_equal("public.parks", "parks", &[same("id")])?;
    h.assert_equal("public.m", "m", &[same("id"), same("v")])?;
    h.assert_equal("public.parts", "parts", &[same("id"), same("region")])?;
    ensure!(
        count(
            &h,
            "SELECT count() FROM system.columns WHERE database = 'app' AND table IN ('parts', 'parks') AND name = 'v'"
        )? == 0,
        "a column the pattern excludes reached ClickHouse"
    );
    let resurrected = count(
        &h,
        "SELECT count() FROM app.dead FINAL WHERE id % 3 = 0 OR v IN ('rolled back', 'aborted update') OR id = 4",
    )?;
    ensure!(resurrected == 0, "{resurrected} dead rows in ClickHouse");
    ensure!(
        count(&h, "SELECT count() FROM app.dead FINAL WHERE id = 7001")? == 1,
        "the committed open writer's row written before the backup is missing"
    );
    ensure!(
        count(
            &h,
            "SELECT count() FROM app.m FINAL WHERE v = 'orig' AND id <= 10"
        )? == 0,
        "a version of m that the locker's update replaced reached ClickHouse"
    );
    // Not selected: nothing loaded.
    ensure!(
        count(
            &h,
            "SELECT count() FROM system.tables WHERE database = 'app' AND name IN ('other', 'skipped') AND total_rows > 0"
        )? == 0,
        "a table not selected for the bootstrap was loaded"
    );
    // One backup: no other load ran.
    let log = h.run_log();
    for line in log.lines().filter(|l| {
        l.contains("initial load (bootstrap)") || l.contains("initial load (object_store)")
    }) {
        eprintln!("{line}");
    }
    for key in BOOTSTRAPPED {
        let mode = entry(&h, key, "mode")?;
        ensure!(
            mode.as_ref().and_then(|m| m.as_str()) == Some("bootstrap"),
            "{key} was loaded by {mode:?}, not from init's backup"
        );
    }
    let mode = entry(&h, "public.parks", "mode")?;
    ensure!(
        mode.as_ref().and_then(|m| m.as_str()) == Some("copy"),
        "public.parks, which a pattern and a config-table row of its own take, was loaded by {mode:?}"
    );
    ensure!(
        !log.contains("initial load (base_backup)"),
        "a second backup was taken:\n{}",
        common::tail(&log, 40)
    );
    ensure!(
        log.matches("initial load (bootstrap) starting").count() == 1,
        "not one bootstrap pass:\n{}",
        common::tail(&log, 40)
    );
    wait_until(Duration::from_secs(30), "the landed files to go", || {
        Ok(!landed.exists())
    })?;
    ensure!(staging_left(&h)? == 0, "staging tables left");
    h.stop_run()?;
    Ok(())
}

fn killed_mid_walk_and_after_exchange(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(
        BIN,
        major,
        "bootstrap-kill",
        &[],
        "\n[table.\"public.ra\"]\ninitial_load = \"copy\"\n",
    )?;
    // Each table over 128 pages: its segment is recorded once walked.
    for t in ["ra", "rb"] {
        h.source.psql(&format!(
            "create table {t} (id int primary key, pad text);
             insert into {t} select g, repeat('x', 200) || g from generate_series(1, 20000) g;
             delete from {t} where id % 10 = 0;"
        ))?;
    }
    // rb is opted in by its config-table row: taken where the stream
    // starts, and still in scope with its load after each crash.
    h.source.psql(&format!(
        "{}\ninsert into walshadow.tables (schema_name, table_name, replicate, initial_load) values
           ('public', 'rb', true, 'copy');",
        walshadow_config::config_table_sql("walshadow", "tables")
    ))?;
    let out = h.cli_ok(&["init", "--bootstrap", "--config", h.config()])?;
    ensure!(out.contains("bootstrap     2 tables"), "{out}");
    h.arm(
        walshadow_failpoints::BACKUP_WALK_AFTER_SEGMENT_DONE,
        "return",
    );
    h.start_run()?;
    wait_until(CATCH_UP, "run to end after the first segment", || {
        Ok(h.run_exited().is_some())
    })
    .with_context(|| common::tail(&h.run_log(), 40))?;
    let progress = h.state_dir.join("bootstrap").join("object-store-pass.json");
    ensure!(progress.exists(), "no progress recorded before the crash");
    h.source
        .psql("update ra set pad = 'moved' where id = 1; insert into rb values (30000, 'late');")?;
    h.disarm();
    h.arm(walshadow_failpoints::BACKUP_AFTER_EXCHANGE, "return");
    h.start_run()?;
    wait_until(CATCH_UP, "run to end after an exchange", || {
        Ok(h.run_exited().is_some())
    })
    .with_context(|| common::tail(&h.run_log(), 40))?;
    ensure!(
        h.run_log().contains(
            "resuming; the segments an interrupted attempt put in staging are not walked again"
        ),
        "the second run walked everything again:\n{}",
        common::tail(&h.run_log(), 40)
    );
    h.disarm();
    h.start_run()?;
    wait_loaded(&mut h, "public.ra")?;
    wait_loaded(&mut h, "public.rb")?;
    h.wait_caught_up(CATCH_UP)?;
    for t in ["ra", "rb"] {
        h.assert_equal(&format!("public.{t}"), t, &[same("id"), same("pad")])?;
    }
    let mode = entry(&h, "public.rb", "mode")?;
    ensure!(
        mode.as_ref().and_then(|m| m.as_str()) == Some("bootstrap"),
        "rb, opted in by its row, was loaded by {mode:?} after the restarts"
    );
    ensure!(staging_left(&h)? == 0, "staging tables left");
    let landed = h.state_dir.join("bootstrap");
    wait_until(Duration::from_secs(30), "the landed files to go", || {
        Ok(!landed.exists())
    })?;
    h.stop_run()?;
    Ok(())
}

/// A selected table truncated and filled again between `init --bootstrap`
/// and the first `run`: the landed backup does not hold the file it is on,
/// so its load from the backup fails (one attempt here) and it loads by
/// `copy` instead; the other table loads from the backup.
fn rewritten_before_first_run(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(
        BIN,
        major,
        "bootstrap-rewritten",
        &[],
        "\n[backfill]\nmax_attempts = 1\n\n[table.\"public.ra\"]\ninitial_load = \"copy\"\n\n[table.\"public.rb\"]\ninitial_load = \"copy\"\n",
    )?;
    h.source.psql(
        "create table ra (id int primary key, v text);
         insert into ra select g, 'before' from generate_series(1, 500) g;
         create table rb (id int primary key, v text);
         insert into rb select g, 'b' from generate_series(1, 500) g;",
    )?;
    let out = h.cli_ok(&["init", "--bootstrap", "--config", h.config()])?;
    ensure!(out.contains("bootstrap     2 tables"), "{out}");
    h.source
        .psql("truncate ra; insert into ra select g, 'after' from generate_series(1, 300) g;")?;
    h.start_run()?;
    wait_loaded(&mut h, "public.ra")?;
    wait_loaded(&mut h, "public.rb")?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.ra", "ra", &[same("id"), same("v")])?;
    h.assert_equal("public.rb", "rb", &[same("id"), same("v")])?;
    let modes = (
        entry(&h, "public.ra", "mode")?,
        entry(&h, "public.rb", "mode")?,
    );
    ensure!(
        modes.0.as_ref().and_then(|m| m.as_str()) == Some("copy")
            && modes.1.as_ref().and_then(|m| m.as_str()) == Some("bootstrap"),
        "loaded by {modes:?}"
    );
    ensure!(
        h.run_log().contains("it loads by copy as of here instead"),
        "the fallback is not logged"
    );
    ensure!(staging_left(&h)? == 0, "staging tables left");
    let landed = h.state_dir.join("bootstrap");
    wait_until(Duration::from_secs(30), "the landed files to go", || {
        Ok(!landed.exists())
    })?;
    h.stop_run()?;
    Ok(())
}

/// Zeroes the second half of every page of `file` that is not all zeros:
/// a page read while it was being written, its first sectors new and the
/// rest lost.
fn tear_pages(file: &std::path::Path) -> Result<usize> {
    let mut bytes = std::fs::read(file).with_context(|| file.display().to_string())?;
    let mut torn = 0;
    for page in bytes.chunks_mut(8192) {
        if page.iter().any(|&b| b != 0) {
            if let Some(half) = page.get_mut(4096..) {
                half.fill(0);
            }
            torn += 1;
        }
    }
    std::fs::write(file, bytes)?;
    Ok(torn)
}

/// Pages init's backup copied while the source wrote them: `init
/// --bootstrap` holds (a failpoint) once its backup streams, the test
/// changes every page of `tt` and every TOAST page of `tx` then, and after
/// `init` it tears the landed copies of those pages (as a read racing a
/// write can, without data checksums to tell). The walk takes them from the
/// window's full-page images, or skips the pages the window initialised (the
/// window's replay has their rows): both load from the backup, equal. A
/// TOAST page of `ty`, which the window never touched, is zeroed: its
/// values cannot be reassembled, so `ty` is set aside (named in the log) and
/// loads by `copy` instead of with rows missing.
fn torn_copies_read_from_the_window(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(
        BIN,
        major,
        "bootstrap-torn",
        &[],
        "\n[table.\"public.tt\"]\ninitial_load = \"copy\"\n\n[table.\"public.tx\"]\ninitial_load = \"copy\"\n\n[table.\"public.ty\"]\ninitial_load = \"copy\"\n",
    )?;
    h.source.psql(
        "create table tt (id int primary key, v text) with (fillfactor = 50);
         insert into tt select g, repeat('t', 100) || g from generate_series(1, 2000) g;
         create table tx (id int primary key, big text);
         alter table tx alter column big set storage external;
         insert into tx select g, repeat(md5(g::text), 200) from generate_series(1, 40) g;
         create table ty (like tx including all);
         insert into ty select g, repeat(md5((g + 100)::text), 200) from generate_series(1, 40) g;
         checkpoint;",
    )?;
    let holds = h.arm_holds(&[walshadow_failpoints::BOOTSTRAP_BACKUP_STREAMING])?;
    let hold = holds.join("bootstrap.backup.paused");
    let out = std::thread::scope(|s| -> Result<String> {
        let init = s.spawn(|| h.cli_ok(&["init", "--bootstrap", "--config", h.config()]));
        wait_until(Duration::from_secs(120), "init's backup to hold", || {
            ensure!(!init.is_finished(), "init ended before its backup held");
            Ok(hold.exists())
        })?;
        // In the backup's window: every page of tt and every TOAST page of
        // tx changes (the first change of each carries its image); new
        // pages are initialised.
        h.source.psql(
            "update tt set v = v || 'u';
             insert into tt select g, 'new' || g from generate_series(2001, 2600) g;
             update tx set big = big || 'u';",
        )?;
        std::fs::remove_file(&hold)?;
        init.join().map_err(|_| anyhow::anyhow!("init panicked"))?
    })?;
    h.disarm();
    ensure!(out.contains("bootstrap     3 tables"), "{out}");
    let landed = |sql: &str| -> Result<std::path::PathBuf> {
        let rel = h.source.query_one(sql)?;
        let path = h.state_dir.join("bootstrap").join("data").join(rel.trim());
        ensure!(path.exists(), "{} was not landed", path.display());
        Ok(path)
    };
    let toast_of = |t: &str| {
        format!("select pg_relation_filepath(reltoastrelid) from pg_class where relname = '{t}'")
    };
    let torn = tear_pages(&landed("select pg_relation_filepath('tt')")?)?
        + tear_pages(&landed(&toast_of("tx"))?)?;
    ensure!(torn > 20, "only {torn} pages torn");
    let ty_toast = landed(&toast_of("ty"))?;
    let mut bytes = std::fs::read(&ty_toast)?;
    bytes
        .get_mut(..8192)
        .context("ty's TOAST file is empty")?
        .fill(0);
    std::fs::write(&ty_toast, bytes)?;
    h.start_run()?;
    for key in ["public.tt", "public.tx", "public.ty"] {
        wait_loaded(&mut h, key)?;
    }
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.tt", "tt", &[same("id"), same("v")])?;
    h.assert_equal("public.tx", "tx", &[same("id"), same("big")])?;
    h.assert_equal("public.ty", "ty", &[same("id"), same("big")])?;
    let log = h.run_log();
    let modes = (
        entry(&h, "public.tt", "mode")?,
        entry(&h, "public.tx", "mode")?,
        entry(&h, "public.ty", "mode")?,
    );
    ensure!(
        modes.0.as_ref().and_then(|m| m.as_str()) == Some("bootstrap")
            && modes.1.as_ref().and_then(|m| m.as_str()) == Some("bootstrap")
            && modes.2.as_ref().and_then(|m| m.as_str()) == Some("copy"),
        "loaded by {modes:?}:\n{}",
        common::tail(&log, 40)
    );
    ensure!(
        log.contains("do not hold every chunk of public.ty (TOAST)")
            || log.contains("do not hold every chunk of public.ty:"),
        "ty's unreassemblable value is not named in the log:\n{}",
        common::tail(&log, 40)
    );
    let from_window: u64 = log
        .lines()
        .filter_map(|l| l.split("pages_from_window=").nth(1))
        .filter_map(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    ensure!(
        from_window >= 20,
        "{from_window} pages read from the window's images"
    );
    ensure!(staging_left(&h)? == 0, "staging tables left");
    h.stop_run()?;
    Ok(())
}

/// Plain `init`, then loads by `copy` and `base_backup`, with transactions
/// that wrote the tables before init's backup and stay open across it: the
/// stream decodes from the backup's start, so what they wrote before it
/// reaches ClickHouse only through the loads, which must read after they
/// end (the log and status say they wait). One commits (its rows there),
/// one aborts (its rows not). Without the wait the committed writer's rows
/// from before the backup are lost.
fn writers_open_across_plain_init(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(
        BIN,
        major,
        "open-across-init",
        &[],
        "\n[table.\"public.wa\"]\ninitial_load = \"copy\"\n\n[table.\"public.wb\"]\ninitial_load = \"base_backup\"\n",
    )?;
    h.source.psql(
        "create table gate (what text);
         create table wa (id int primary key, v text);
         insert into wa select g, 'a' from generate_series(1, 100) g;
         create table wb (id int primary key, v text);
         insert into wb select g, 'b' from generate_series(1, 100) g;",
    )?;
    let committer = held_writer(
        &h,
        "insert into wa values (1001, 'open, commits'); delete from wa where id = 1;
         update wb set v = 'open update' where id = 2; insert into wb values (1001, 'open');",
        "commit",
    );
    let aborter = held_writer(
        &h,
        "insert into wa values (2001, 'open, aborts'); delete from wb where id = 3;",
        "abort",
    );
    h.wait_for_session("held:commit")?;
    h.wait_for_session("held:abort")?;
    h.init()?;
    h.start_run()?;
    // Both loads wait for the writers, and say so (log and status).
    wait_until(CATCH_UP, "both loads to wait for the open writers", || {
        let log = h.run_log();
        Ok(
            log.contains("initial load (copy) waiting for transactions open since before walshadow's start")
                && log.contains("initial load (base_backup) waiting for transactions open since before walshadow's start"),
        )
    })
    .with_context(|| common::tail(&h.run_log(), 30))?;
    let status = h.cli_ok(&["status", "--config", h.config()])?;
    ensure!(
        status.contains("open since before walshadow's start"),
        "status does not say the loads wait:\n{status}"
    );
    end_writers(&h, committer, aborter)?;
    wait_loaded(&mut h, "public.wa")?;
    wait_loaded(&mut h, "public.wb")?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.wa", "wa", &[same("id"), same("v")])?;
    h.assert_equal("public.wb", "wb", &[same("id"), same("v")])?;
    h.stop_run()?;
    Ok(())
}

per_major!(writers_open_across_plain_init => open_across_init: pg15, pg18);
per_major!(torn_copies_read_from_the_window => bootstrap_torn: pg15, pg18);
per_major!(rewritten_before_first_run => bootstrap_rewritten: pg15, pg18);
per_major!(one_backup_under_load => bootstrap_under_load: pg15, pg18);
per_major!(killed_mid_walk_and_after_exchange => bootstrap_killed: pg15, pg18);
