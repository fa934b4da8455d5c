//! `walshadow verify`, on PostgreSQL 15 and 18:
//!
//! - two tables streaming (one partitioned, with NULLs, numerics, arrays
//!   and a jsonb), a workload of inserts, updates and deletes running all
//!   through the verify: both equal, no false difference from rows
//!   changing under it (they are counted as changed since, not compared);
//! - then differences planted in ClickHouse behind the stream's back: a
//!   value changed, a row deleted, a row that never existed at the
//!   source; verify names each (differing with the column and both
//!   values, missing, extra), exits non-zero, and still finds the other
//!   table equal;
//! - a table not in scope is refused with the remedy; a `run` that is not
//!   running is reported as such instead of compared.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Result, ensure};
use common::{BIN, StreamHarness, same};
use walshadow_testkit::{PgMajor, wait_until};

const CATCH_UP: Duration = Duration::from_secs(180);

/// A workload on both tables until `stop` is set, on rows of its own
/// (`lane` 0 or 1: two run at once without waiting on each other's locks);
/// returns the transactions run.
fn workload(
    h: &StreamHarness,
    stop: Arc<AtomicBool>,
    lane: u64,
) -> std::thread::JoinHandle<Result<u64>> {
    let source = Arc::clone(&h.source);
    std::thread::spawn(move || {
        let mut n = 0u64;
        while !stop.load(Ordering::Acquire) {
            n += 1;
            let id = 1000 + lane * 100_000 + n;
            source.psql(&format!(
                "begin; \
                 insert into items values ({id}, 'w{n}', {n}.5, array[{n}, null], '{{\"w\": {n}}}'); \
                 update items set name = name || '+', amount = amount + 1 where id = {}; \
                 delete from items where id = {}; \
                 update events set side = 'n{n}' where id = {}; \
                 commit",
                1 + lane * 40 + n % 40,
                900 - lane * 50 + n % 50,
                1 + lane * 30 + n % 30,
            ))?;
        }
        Ok(n)
    })
}

fn verify(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "verify", &["public.items", "public.events"], "")?;
    h.source.psql(
        "create table items (id int primary key, name text, amount numeric(12,2), tags int[], doc jsonb); \
         create table events (id int, at date, side text, primary key (id, at)) partition by range (at); \
         create table events_a partition of events for values from ('2020-01-01') to ('2021-01-01'); \
         create table events_b partition of events for values from ('2021-01-01') to ('2022-01-01')",
    )?;
    h.init()?;
    h.start_run()?;
    h.source.psql(
        "insert into items select g, case when g % 7 = 0 then null else 'n' || g end, g * 1.25, \
                array[g, g + 1], jsonb_build_object('g', g) from generate_series(1, 950) g; \
         insert into events select g, date '2020-06-01' + (g % 400), 'e' || g from generate_series(1, 300) g",
    )?;
    h.wait_caught_up(CATCH_UP)?;

    // Not in scope: refused, with where to look.
    let out = h.cli(&["verify", "--config", h.config(), "public.nope"])?;
    ensure!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        err.contains("public.nope is not in scope") && err.contains("walshadow table list"),
        "{err}"
    );

    // Equal, under a workload.
    let stop = Arc::new(AtomicBool::new(false));
    let writers = [
        workload(&h, Arc::clone(&stop), 0),
        workload(&h, Arc::clone(&stop), 1),
    ];
    let result = h.cli(&["verify", "--config", h.config(), "--json"]);
    stop.store(true, Ordering::Release);
    let mut statements = 0;
    for w in writers {
        statements += w.join().expect("a workload thread")?;
    }
    let out = result?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure!(
        out.status.success(),
        "verify under a workload ({statements} transactions):\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let verdicts: serde_json::Value = serde_json::from_str(&text)?;
    let items = &verdicts[1];
    ensure!(items["table"] == "public.items", "{text}");
    ensure!(
        items["source_rows"].as_u64().is_some_and(|n| n >= 900)
            && items["missing"] == 0
            && items["extra"] == 0
            && items["differing"] == 0
            && items["equal"].as_u64().is_some_and(|n| n >= 800),
        "{text}"
    );
    ensure!(
        verdicts[0]["table"] == "public.events"
            && verdicts[0]["equal"]
                .as_u64()
                .zip(verdicts[0]["changed_since"].as_u64())
                == Some((
                    300 - verdicts[0]["changed_since"].as_u64().unwrap_or(0),
                    verdicts[0]["changed_since"].as_u64().unwrap_or(0)
                ))
            && verdicts[0]["differing"] == 0,
        "{text}"
    );
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("items", "items", &[same("id"), same("name")])?;

    // A commit in the WAL that snapshots do not see yet (it waits for a
    // synchronous standby that never answers): walshadow applied it, the
    // source's snapshot does not have it. Counted as changed, not as a
    // difference.
    h.source
        .psql("alter system set synchronous_standby_names = 'nobody'; select pg_reload_conf()")?;
    let source = Arc::clone(&h.source);
    let held =
        std::thread::spawn(move || source.psql("update items set name = 'held' where id = 3"));
    wait_until(CATCH_UP, "the held commit in ClickHouse", || {
        Ok(h.ch
            .query("SELECT name FROM app.items FINAL WHERE id = 3")?
            .trim()
            == "held")
    })?;
    ensure!(
        h.source.query_one("select name from items where id = 3")? != "held",
        "the held commit is visible"
    );
    // WAL after it (not held: `local`), so its commit is not the last
    // record when verify reads the source's position.
    h.source
        .psql("set synchronous_commit = local; update events set side = 'after' where id = 1")?;
    let out = h.cli(&["verify", "--config", h.config(), "--json", "public.items"])?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure!(
        out.status.success(),
        "a commit not yet visible reported:\n{text}"
    );
    eprintln!(
        "HELD VERIFY: {text} {} {}",
        h.ch.query("SELECT _lsn, _xid, name FROM app.items WHERE id = 3 ORDER BY _version")?,
        h.ch.query("SELECT id, _lsn, _xid, name FROM app.items ORDER BY _lsn DESC LIMIT 3")?
    );
    let verdicts: serde_json::Value = serde_json::from_str(&text)?;
    ensure!(
        verdicts[0]["changed_since"]
            .as_u64()
            .is_some_and(|n| n >= 1),
        "{text}"
    );
    h.source
        .psql("alter system reset synchronous_standby_names; select pg_reload_conf()")?;
    held.join().expect("the held update")?;
    h.wait_caught_up(CATCH_UP)?;

    // Differences planted behind the stream's back.
    h.ch.query(
        "ALTER TABLE app.items UPDATE name = 'tampered' WHERE id = 5 SETTINGS mutations_sync = 2",
    )?;
    h.ch.query("ALTER TABLE app.items DELETE WHERE id = 8 SETTINGS mutations_sync = 2")?;
    h.ch.query(
        "INSERT INTO app.items (id, name, amount, tags, doc, _lsn, _seq, _xid, _commit_time, _is_deleted) \
         VALUES (77777, 'ghost', 1, [], '{}', 1, 1, 0, 0, 0)",
    )?;
    let out = h.cli(&["verify", "--config", h.config()])?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure!(
        !out.status.success(),
        "verify missed the planted differences:\n{text}"
    );
    ensure!(err.contains("1 of 2 tables differ"), "{err}");
    ensure!(
        text.contains("public.items → items: DIFFERS")
            && text.contains(
                "1 missing in ClickHouse, 1 extra in ClickHouse, 1 differing; checked twice"
            ),
        "{text}"
    );
    ensure!(
        text.contains("differing (5)")
            && text.contains("name: source n5")
            && text.contains(", ClickHouse tampered"),
        "{text}"
    );
    ensure!(
        text.contains("missing   (8)") && text.contains("extra     (77777)"),
        "{text}"
    );
    ensure!(text.contains("public.events → events: equal"), "{text}");
    let scratch = h.ch.query(
        "SELECT count() FROM system.tables WHERE database = 'app' AND name LIKE '%__wsverify'",
    )?;
    ensure!(scratch.trim() == "0", "scratch tables left: {scratch}");

    // Without run, nothing is compared at a position nobody applies.
    h.stop_run()?;
    h.source
        .psql("insert into items values (5000, 'late', 1, null, null)")?;
    let out = h.cli(&[
        "verify",
        "--config",
        h.config(),
        "--wait",
        "2",
        "public.events",
    ])?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure!(!out.status.success(), "{text}");
    ensure!(
        text.contains("not verified: walshadow run has not applied up to"),
        "{text}"
    );
    Ok(())
}

per_major!(verify => verify_finds_planted_differences_and_none_under_a_workload: pg15, pg18);
