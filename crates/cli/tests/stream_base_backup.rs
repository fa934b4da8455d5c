//! `initial_load = 'base_backup'` on PostgreSQL 15 and 18 (18's clusters
//! have data checksums, 15's do not): tables loaded from the pages of a
//! fresh `BASE_BACKUP` through the visibility gate and a staging table.
//!
//! - `opt_in_under_load`: three tables opted in by one transaction (one
//!   pass walks them all, and only their files) while a workload writes
//!   one of them: `orders` (TOASTed values), `dead` (deleted rows and dead
//!   update versions left for the gate, no vacuum), `m` (rows locked by
//!   several transactions, some updated by one of the lockers: multixact
//!   deleters). Equal row by row; no dead version ever reaches ClickHouse.
//! - `failures_recover`: the source crashes mid-walk (paused by the test
//!   hook after rows reached staging): the destination holds only live
//!   rows, the partial load sits in staging, the entry stays pending, the
//!   retry publishes exactly once. Then `kill -9` (an abort hook) right
//!   after a table's exchange: the restart recovers the swap, the
//!   live-window rows are copied back, staging is dropped, the entry is done.
//! - `partitions_and_pinned`: a TOML-pinned table with `initial_load =
//!   "base_backup"`, and a partitioned table whose partitions lay out their
//!   columns differently (an attached one, a dropped and re-added column),
//!   loaded into the root's table.

mod common;

use std::sync::Arc;
use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use common::loads::*;
use common::{BIN, StreamHarness, col, same};
use walshadow_testkit::{Lsn, PgMajor, wait_until};

/// A fast checkpoint (no wait for a spread one).
const CONFIG: &str = "[backfill]\nbackup_checkpoint = \"fast\"\n";

fn count(h: &StreamHarness, sql: &str) -> Result<u64> {
    let n = h.ch.query(sql)?;
    n.trim()
        .parse()
        .with_context(|| format!("{sql} answered {n:?}"))
}

/// The value of `field=N` in the last log line containing `message`.
fn logged(h: &StreamHarness, message: &str, field: &str) -> Option<u64> {
    let log = h.run_log();
    let line = log.lines().rev().find(|l| l.contains(message))?;
    let at = line.find(&format!("{field}="))? + field.len() + 1;
    line.get(at..)?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn staging_tables_left(h: &StreamHarness) -> Result<u64> {
    count(
        h,
        "SELECT count() FROM system.tables WHERE database = 'app' AND name LIKE '%__wsstg'",
    )
}

fn opt_in_under_load(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "bb-load", &[], CONFIG)?;
    h.source.psql(ORDERS_DEAD_M_SQL)?;
    h.source.psql(
        "create table other (id int primary key, v text);
         insert into other select g, 'x' from generate_series(1, 500) g;",
    )?;
    // Multixacts: rows 1..20 key-share locked by a transaction that stays
    // open while another locks them too and updates 1..10 (a non-key
    // update: the new xmax is a multixact of a locker and an updater).
    let holder = {
        let source = Arc::clone(&h.source);
        std::thread::spawn(move || {
            source.psql(
                "begin; select count(*) from (select 1 from m where id <= 20 for key share) l; select pg_sleep(3); commit;",
            )
        })
    };
    wait_until(Duration::from_secs(30), "the first locker", || {
        let n = h.source.query_one(
            "select count(*) from pg_stat_activity where query like 'select pg_sleep(3)%'",
        )?;
        Ok(n.trim() == "1")
    })?;
    h.source.psql(
        "begin; select count(*) from (select 1 from m where id <= 20 for key share) l;
         update m set v = 'updated by a locker' where id <= 10; commit;",
    )?;
    holder
        .join()
        .map_err(|_| anyhow::anyhow!("locker panicked"))??;
    let multis = h.source.query_one(
        "select count(*) from m where (xmax::text::bigint) <> 0 and id > 10 and id <= 20",
    )?;
    eprintln!("m: {multis} rows still carry a locker's xmax");
    h.init()?;
    h.start_run()?;
    // The workload is under way before the opt-ins.
    let workload = OrdersWorkload::start(&h)?;
    h.source.psql(
        "insert into walshadow.tables values
           ('public', 'orders', true, 'base_backup'),
           ('public', 'dead', true, 'base_backup'),
           ('public', 'm', true, 'base_backup');",
    )?;
    let s = wait_loaded(&mut h, "public.orders")?;
    wait_loaded(&mut h, "public.dead")?;
    wait_loaded(&mut h, "public.m")?;
    // Some workload after the loads, streamed over the loaded rows.
    let writes = workload.finish()?;
    h.source
        .psql("update dead set v = 'after' where id = 2; delete from m where id = 50;")?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("public.orders", "orders", &orders_cols())?;
    eprintln!("orders: {n} rows equal after {writes} workload transactions");
    h.assert_equal("public.dead", "dead", &[same("id"), same("v")])?;
    h.assert_equal("public.m", "m", &[same("id"), same("v")])?;

    // The walked TOAST chunks went into the chunk mirror: an UPDATE that
    // leaves the large values alone resolves them without the source.
    wait_until(
        Duration::from_secs(60),
        "walked TOAST chunks in the mirror",
        || Ok(h.run_log().contains("copied into the chunk mirror")),
    )?;
    let fetches = |h: &StreamHarness| -> Result<u64> {
        let out = h.cli_ok(&["status", "--json", "--config", h.config()])?;
        let status: serde_json::Value = serde_json::from_str(&out)?;
        Ok(status["toast"]["source_fetches"].as_u64().unwrap_or(0))
    };
    let before = fetches(&h)?;
    h.source
        .psql("update orders set customer = customer + 1000 where id % 50 = 0;")?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.orders", "orders", &orders_cols())?;
    let after = fetches(&h)?;
    ensure!(
        after == before,
        "{} TOAST values read from the source though the walk had them",
        after - before
    );

    // One pass, one backup, for the three tables.
    let log = h.run_log();
    let starts = log
        .matches("initial load (base_backup) starting: one backup")
        .count();
    ensure!(
        starts == 1,
        "{starts} backup passes for one transaction of opt-ins:\n{}",
        common::tail(&log, 40)
    );
    // Only their files: each table and its TOAST relation.
    let expected: u64 = h
        .source
        .query_one(
            "select count(*) from pg_class where oid in ('orders'::regclass, 'dead'::regclass, 'm'::regclass)
                or oid in (select reltoastrelid from pg_class where oid in ('orders'::regclass, 'dead'::regclass, 'm'::regclass))",
        )?
        .trim()
        .parse()?;
    if let Some(line) = h
        .run_log()
        .lines()
        .find(|l| l.contains("initial load (base_backup) done"))
    {
        eprintln!("{line}");
    }
    let walked = logged(&h, "initial load (base_backup) done", "files_walked");
    ensure!(
        walked == Some(expected),
        "files walked: {walked:?}, expected {expected} (the tables and their TOAST relations)"
    );
    let gated = logged(&h, "initial load (base_backup) done", "gated").unwrap_or(0);
    ensure!(
        gated > 0,
        "no dead tuple gated (the drill left none on the pages?)"
    );
    eprintln!("{gated} dead tuples dropped by the gate");
    // Dead versions never reached ClickHouse, in any version.
    let resurrected = count(
        &h,
        "SELECT count() FROM app.dead WHERE id % 3 = 0 OR v = 'rolled back' OR (id % 3 = 1 AND v = 'orig')",
    )?;
    ensure!(
        resurrected == 0,
        "{resurrected} dead versions of dead rows in ClickHouse"
    );
    let old_m = count(
        &h,
        "SELECT count() FROM app.m WHERE id <= 10 AND v = 'orig'",
    )?;
    ensure!(
        old_m == 0,
        "{old_m} versions of m updated by a multixact member in ClickHouse"
    );
    // Loaded rows carry S (dead's rows are untouched since, but id 2);
    // none is older.
    let tagged = count(
        &h,
        &format!(
            "SELECT count() FROM app.dead FINAL WHERE _lsn = {} AND _is_deleted = 0",
            s.0
        ),
    )?;
    let live: u64 = h
        .source
        .query_one("select count(*) from dead")?
        .trim()
        .parse()?;
    ensure!(
        tagged == live - 1,
        "{tagged} rows of dead tagged S={s}, expected {}",
        live - 1
    );
    let older = count(
        &h,
        &format!(
            "SELECT count() FROM merge('app', '^(orders|dead|m)$') WHERE _lsn < {}",
            s.0
        ),
    )?;
    ensure!(older == 0, "{older} rows older than S in ClickHouse");
    // Staging tables are gone.
    let staging = staging_tables_left(&h)?;
    ensure!(staging == 0, "{staging} staging tables left");
    h.stop_run()?;
    Ok(())
}

fn failures_recover(major: PgMajor) -> Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut h = StreamHarness::new(
        BIN,
        major,
        "bb-fail",
        &[],
        &format!(
            "{CONFIG}batch_rows = 200\nmax_attempts = 8\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n"
        ),
    )?;
    h.source.psql(
        "create table big (id int primary key, v text);
         insert into big select g, 'v' || g from generate_series(1, 3000) g;
         create table gone (id int primary key, v text);
         insert into gone select g, 'g' || g from generate_series(1, 50) g;
         create table t2 (id int primary key, v text);
         insert into t2 select g, 'w' || g from generate_series(1, 800) g;",
    )?;
    h.init()?;
    let pause_dir = h.arm_holds(&[
        walshadow_failpoints::COPY_AFTER_SNAPSHOT,
        walshadow_failpoints::BACKUP_WALK_AFTER_STAGING,
    ])?;
    h.start_run()?;
    let cols = [same("id"), same("v")];

    // 1. The source crashes mid-walk; another table of the pass is opted
    // out meanwhile.
    h.source.psql(
        "insert into walshadow.tables values ('public', 'big', true, 'base_backup'), ('public', 'gone', true, 'base_backup');",
    )?;
    let paused = pause_dir.join("public.big.walk.paused");
    wait_until(CATCH_UP, "the walk to pause", || {
        h.check_running()?;
        Ok(paused.exists())
    })
    .with_context(|| common::tail(&h.run_log(), 40))?;
    let s_text = entry(&h, "public.big", "s")?
        .and_then(|s| s.as_str().map(str::to_owned))
        .context("no S")?;
    let s: Lsn = s_text
        .parse()
        .map_err(|e| anyhow::anyhow!("S in the ledger: {e:?}"))?;
    let staged = count(&h, "SELECT count() FROM app.big__wsstg")?;
    ensure!(staged >= 200, "only {staged} rows in staging at the pause");
    let pending = "walshadow_backfills_pending{mode=\"base_backup\"} 2";
    let mut metrics = String::new();
    wait_until(
        Duration::from_secs(30),
        "the pending loads in the metrics",
        || {
            metrics = scrape(port)?;
            Ok(metrics.contains(pending))
        },
    )
    .with_context(|| format!("/metrics:\n{metrics}"))?;
    h.source
        .psql("update walshadow.tables set replicate = false where table_name = 'gone';")?;
    h.source
        .psql("insert into big values (5001, 'live during the walk'); update big set v = 'live update' where id = 7;")?;
    h.wait_caught_up(CATCH_UP)?;
    Arc::get_mut(&mut h.source)
        .context("the source is shared")?
        .crash()?;
    std::fs::remove_file(&paused)?;
    wait_until(CATCH_UP, "the attempt to fail", || {
        h.check_running()?;
        Ok(entry(&h, "public.big", "error")?.is_some())
    })
    .with_context(|| common::tail(&h.run_log(), 40))?;
    ensure!(
        phase(&h, "public.big")?.as_deref() != Some("done"),
        "the load is done with the source down"
    );
    let at_s = count(
        &h,
        &format!("SELECT count() FROM app.big WHERE _lsn = {}", s.0),
    )?;
    ensure!(
        at_s == 0,
        "{at_s} loaded rows in the destination after a failed walk"
    );
    let dest = h.clickhouse_rows("big", &cols)?;
    ensure!(
        dest == ["5001\tlive during the walk", "7\tlive update"]
            || dest == ["7\tlive update", "5001\tlive during the walk"],
        "the destination holds more than the live rows: {dest:?}"
    );
    let staged = count(&h, "SELECT count() FROM app.big__wsstg")?;
    ensure!(
        staged >= 200,
        "the partial load left staging: {staged} rows"
    );
    Arc::get_mut(&mut h.source)
        .context("the source is shared")?
        .restart()?;
    let s2 = wait_loaded_with(&mut h, "public.big", |_| {
        if let Ok(dir) = std::fs::read_dir(&pause_dir) {
            for f in dir.flatten() {
                let _ = std::fs::remove_file(f.path());
            }
        }
        Ok(())
    })?;
    ensure!(s2 == s, "S moved: {s} → {s2}");
    ensure!(
        entry(&h, "public.gone", "phase")?.is_none(),
        "the opted-out table kept its ledger entry"
    );
    let gone = count(
        &h,
        "SELECT count() FROM system.tables WHERE database = 'app' AND name = 'gone__wsstg'",
    )? + count(&h, "SELECT count() FROM app.gone")?;
    ensure!(
        gone == 0,
        "the opted-out table's load left rows or its staging table"
    );
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.big", "big", &cols)?;
    let loaded = count(
        &h,
        &format!("SELECT count() FROM app.big WHERE _lsn = {}", s.0),
    )?;
    let distinct = count(
        &h,
        &format!("SELECT uniqExact(id) FROM app.big WHERE _lsn = {}", s.0),
    )?;
    ensure!(
        loaded == distinct && loaded >= 2999,
        "published {loaded} rows at S for {distinct} keys (not exactly once)"
    );

    // 2. kill -9 between the exchange and the copy-back.
    h.stop_run()?;
    h.arm(walshadow_failpoints::BACKUP_AFTER_EXCHANGE, "return");
    h.start_run()?;
    h.source
        .psql("insert into walshadow.tables values ('public', 't2', true, 'base_backup');")?;
    let paused = pause_dir.join("public.t2.walk.paused");
    wait_until(CATCH_UP, "the walk of t2 to pause", || {
        h.check_running()?;
        Ok(paused.exists())
    })
    .with_context(|| common::tail(&h.run_log(), 40))?;
    h.source.psql(
        "insert into t2 values (9001, 'live window'); update t2 set v = 'live window update' where id = 3; delete from t2 where id = 4;",
    )?;
    wait_until(CATCH_UP, "the live rows in ClickHouse", || {
        Ok(count(&h, "SELECT count() FROM app.t2 WHERE id = 9001")? == 1)
    })?;
    std::fs::remove_file(&paused)?;
    let mut exited = None;
    wait_until(CATCH_UP, "walshadow to abort after the exchange", || {
        exited = h.run_exited();
        Ok(exited.is_some())
    })
    .with_context(|| common::tail(&h.run_log(), 40))?;
    ensure!(
        h.run_log().contains(&format!(
            "failpoint {}: ending the process",
            walshadow_failpoints::BACKUP_AFTER_EXCHANGE
        )),
        "walshadow exited, but not at the hook ({exited:?}):\n{}",
        common::tail(&h.run_log(), 40)
    );
    ensure!(
        entry(&h, "public.t2", "swap")?.is_some(),
        "no swap recorded before the exchange"
    );
    let s1 = entry_s(&h, "public.t2")?;
    // While walshadow is down, t2 is opted out and in again: the new
    // opt-in (S2) must wait for the swap's recovery, then load again.
    h.source.psql(
        "update walshadow.tables set replicate = false where table_name = 't2';
         insert into t2 values (9002, 'while opted out');
         update walshadow.tables set replicate = true where table_name = 't2';",
    )?;
    h.disarm();
    h.start_run()?;
    let mut last = None;
    wait_until(CATCH_UP, "t2 loaded again after the recovery", || {
        h.check_running()?;
        last = Some((phase(&h, "public.t2")?, entry_s(&h, "public.t2")?));
        Ok(matches!(&last, Some((Some(p), s)) if p == "done" && *s > s1))
    })
    .with_context(|| format!("last {last:?}\n{}", common::tail(&h.run_log(), 60)))?;
    eprintln!(
        "t2 reloaded at {:?} after the swap at {s1} (the opt-in waited behind the swap: {})",
        last,
        h.run_log()
            .contains("it starts once the staging swap of the earlier one is done")
    );
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.t2", "t2", &cols)?;
    ensure!(
        h.run_log().contains("found=Exchanged"),
        "recovery did not find the exchange applied:\n{}",
        common::tail(&h.run_log(), 40)
    );
    let staging = staging_tables_left(&h)?;
    ensure!(staging == 0, "{staging} staging tables left");
    h.stop_run()?;
    Ok(())
}

/// A pinned table with `initial_load = "base_backup"` in the TOML (loaded
/// from where streaming starts), and a partitioned table whose partitions
/// order their columns differently from the root (one attached after being
/// created on its own), loaded through its root.
fn partitions_and_pinned(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(
        BIN,
        major,
        "bb-parts",
        &[],
        &format!("{CONFIG}\n[table.\"public.pinned\"]\ninitial_load = \"base_backup\"\n"),
    )?;
    h.source.psql(
        "create table pinned (id int primary key, v text, n numeric);
         insert into pinned select g, 'p' || g, g / 7.0 from generate_series(1, 700) g;
         delete from pinned where id % 10 = 0;
         create table parts (id int, region text, v int, note text, primary key (id, region)) partition by list (region);
         create table parts_eu partition of parts for values in ('eu');
         create table parts_us (note text, v int, region text not null, id int not null);
         alter table parts attach partition parts_us for values in ('us');
         create table parts_other partition of parts default;
         alter table parts drop column v;
         alter table parts add column v bigint;
         insert into parts select g, (array['eu','us','asia'])[g % 3 + 1], 'n' || g, g * 10 from generate_series(1, 900) g;
         update parts set region = 'eu' where id % 9 = 1 and region = 'us';
         delete from parts where id % 11 = 0;",
    )?;
    h.init()?;
    h.start_run()?;
    wait_loaded(&mut h, "public.pinned")?;
    h.source
        .psql("insert into walshadow.tables values ('public', 'parts', true, 'base_backup');")?;
    wait_loaded(&mut h, "public.parts")?;
    h.source.psql(
        "update pinned set v = 'after' where id = 1; insert into parts values (5000, 'us', 'late', 1);",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal(
        "public.pinned",
        "pinned",
        &[same("id"), same("v"), col("n::text", "toString(n)")],
    )?;
    h.assert_equal(
        "public.parts",
        "parts",
        &[same("id"), same("region"), same("note"), same("v")],
    )?;
    ensure!(staging_tables_left(&h)? == 0, "staging tables left");
    h.stop_run()?;
    Ok(())
}

per_major!(partitions_and_pinned => base_backup_partitions_and_pinned: pg15, pg18);
per_major!(opt_in_under_load => base_backup_under_load: pg15, pg16, pg17, pg18);
per_major!(failures_recover => base_backup_failures_recover: pg15, pg18);
