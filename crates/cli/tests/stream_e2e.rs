//! Streaming end to end through the `walshadow` binary, on PostgreSQL 15
//! and 18: a random workload (inserts, multi-row statements, COPY, updates
//! incl. primary-key changes, deletes, INSERT … ON CONFLICT, savepoints
//! rolled back, 2PC, aborted transactions, TRUNCATE, a transaction many
//! times the memory budget, ADD/DROP/RENAME COLUMN mid-stream) runs while
//! `walshadow run` streams; afterwards every pinned table equals its
//! ClickHouse table `FINAL`, row by row.

mod common;

use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Result, ensure};
use common::{BIN, OracleColumn, StreamHarness, col, same};
use walshadow_testkit::{Cluster, PgMajor, Rng, wait_until};

const CATCH_UP: Duration = Duration::from_secs(180);

const SCHEMA: &str = "
create table public.orders (
    id bigint primary key,
    customer text not null,
    amount numeric(12,2),
    status text,
    created timestamptz default now(),
    note text,
    qty int
);
create table public.events (
    id serial primary key,
    ts timestamp,
    payload jsonb,
    tags text[] not null default '{}',
    flag boolean,
    u uuid,
    d date
);
create table public.full_ident (a int, b text);
alter table public.full_ident replica identity full;
create table public.scratch (k int primary key, v text);
create table public.not_pinned (k int primary key, v text);
";

fn orders_columns(after_ddl: bool) -> Vec<OracleColumn> {
    let mut cols = vec![
        same("id"),
        same("customer"),
        col("trim_scale(amount)", "amount"),
        col(
            "to_char(created at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')",
            "formatDateTime(created, '%Y-%m-%d %H:%i:%S.%f')",
        ),
        same("qty"),
    ];
    if after_ddl {
        cols.push(same("state"));
        cols.push(same("region"));
    } else {
        cols.push(same("status"));
        cols.push(same("note"));
    }
    cols
}

fn events_columns() -> Vec<OracleColumn> {
    vec![
        same("id"),
        col(
            "to_char(ts, 'YYYY-MM-DD HH24:MI:SS.US')",
            "formatDateTime(ts, '%Y-%m-%d %H:%i:%S.%f')",
        ),
        col("payload::text", "payload"),
        col(
            "array_to_string(tags, ',', 'NULL')",
            "arrayStringConcat(arrayMap(x -> ifNull(x, 'NULL'), tags), ',')",
        ),
        col(
            "case when flag then 'true' when not flag then 'false' end",
            "flag",
        ),
        col("u::text", "u"),
        col("d::text", "d"),
    ]
}

fn full_columns() -> Vec<OracleColumn> {
    vec![same("a"), same("b")]
}

/// One random statement batch against the source.
fn workload_step(
    source: &Cluster,
    rng: &mut Rng,
    next_id: &mut i64,
    copy_file: &str,
) -> Result<()> {
    let id = *next_id;
    let pick = |rng: &mut Rng| 1 + rng.below((id - 1).max(1) as u64) as i64;
    let sql = match rng.below(14) {
        0 => {
            *next_id += 1;
            format!(
                "insert into orders (id, customer, amount, status, note, qty) values ({id}, 'c{}', {}.{:02}, 'new', repeat('n', {}), {})",
                rng.below(50),
                rng.below(100000),
                rng.below(100),
                rng.below(40),
                rng.below(1000)
            )
        }
        1 => {
            *next_id += 20;
            format!(
                "insert into orders (id, customer, amount, qty) select g, 'multi' || g, g * 1.5, g % 7 from generate_series({id}, {}) g",
                id + 19
            )
        }
        2 => {
            *next_id += 200;
            let rows: String = (id..id + 200)
                .map(|i| format!("{i},copy{i},{}.25,copied,{}\n", i % 1000, i % 13))
                .collect();
            std::fs::write(copy_file, rows)?;
            format!(
                "copy orders (id, customer, amount, status, qty) from '{copy_file}' with (format csv)"
            )
        }
        3 => format!(
            "update orders set amount = amount + 1, status = 'upd' where id between {} and {}",
            pick(rng),
            pick(rng) + 3
        ),
        4 => {
            // Primary-key change: the old key's row must go.
            let from = pick(rng);
            *next_id += 1;
            format!("update orders set id = {id} where id = {from}")
        }
        5 => format!(
            "delete from orders where id in ({}, {})",
            pick(rng),
            pick(rng)
        ),
        6 => format!(
            "insert into orders (id, customer, qty) values ({}, 'upsert', 1) on conflict (id) do update set qty = orders.qty + 1, customer = excluded.customer",
            pick(rng)
        ),
        7 => format!(
            "insert into orders (id, customer) values ({}, 'nothing') on conflict do nothing",
            pick(rng)
        ),
        8 => {
            *next_id += 2;
            format!(
                "begin; insert into orders (id, customer) values ({id}, 'kept'); savepoint s1; insert into orders (id, customer) values ({}, 'rolled back'); update orders set customer = 'rb' where id = {}; rollback to savepoint s1; update orders set note = 'after sp' where id = {id}; commit",
                id + 1,
                pick(rng)
            )
        }
        9 => format!(
            "begin; update orders set customer = 'aborted' where id = {}; insert into orders (id, customer) values ({}, 'aborted'); rollback",
            pick(rng),
            id + 1_000_000
        ),
        10 => {
            *next_id += 2;
            let gid = format!("g{}", rng.next_u64());
            let finish = if rng.below(2) == 0 {
                "commit"
            } else {
                "rollback"
            };
            format!(
                "begin; insert into orders (id, customer) values ({id}, '2pc'); update orders set qty = -1 where id = {}; prepare transaction '{gid}'; {finish} prepared '{gid}'",
                pick(rng)
            )
        }
        11 => format!(
            "insert into events (ts, payload, tags, flag, u, d) values (now()::timestamp, '{{\"k\": {}, \"s\": \"x\\\"y\", \"a\": [1, null, true]}}', array['a', null, 'c{}'], {}, gen_random_uuid(), date '2024-01-01' + {}); update events set flag = not coalesce(flag, false) where id = {}",
            rng.below(1000),
            rng.below(9),
            if rng.below(3) == 0 { "null" } else { "true" },
            rng.below(3000),
            1 + rng.below(50)
        ),
        // REPLICA IDENTITY FULL has no key: identical rows would collapse
        // into one in ClickHouse (documented), so rows stay distinct here.
        12 => format!(
            "insert into full_ident select coalesce(max(a), 0) + 1, 'f' || {0} from full_ident; update full_ident set b = b || '+' where a % 10 = {1}; delete from full_ident where a % 17 = {2}",
            rng.below(100),
            rng.below(10),
            rng.below(17)
        ),
        _ => format!(
            "insert into scratch values ({0}, 'x') on conflict (k) do update set v = 'y'; insert into not_pinned values ({0}, 'z') on conflict do nothing",
            rng.below(30)
        ),
    };
    source.psql(&sql)?;
    Ok(())
}

fn oracle(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(
        BIN,
        major,
        "oracle",
        &[
            "public.orders",
            "public.events",
            "public.full_ident",
            "public.scratch",
        ],
        "[stream]\nmemory_mb = 4\n",
    )?;
    h.source.psql(SCHEMA)?;
    h.init()?;
    h.start_run()?;
    let copy_file = format!(
        "/tmp/walshadow-copy-{}-{}.csv",
        std::process::id(),
        major.number()
    );
    let mut rng = Rng::from_env("WALSHADOW_SEED");
    let mut next_id = 2i64;
    for _ in 0..150 {
        workload_step(&h.source, &mut rng, &mut next_id, &copy_file)?;
    }
    // A transaction many times the 4 MB budget: it spills and streams back.
    h.source.psql(&format!(
        "insert into orders (id, customer, note) select g, 'big', repeat(md5(g::text), 3) from generate_series({next_id}, {}) g",
        next_id + 199_999
    ))?;
    next_id += 200_000;
    h.source.psql(
        "begin; truncate scratch; insert into scratch values (1000, 'after truncate'); commit",
    )?;
    // Rows written, then the table moved to a new file in the same
    // transaction: the rows are still the table's.
    h.source.psql(
        "begin; insert into scratch values (2000, 'before cluster'); cluster scratch using scratch_pkey; insert into scratch values (2001, 'after cluster'); commit;
         set allow_in_place_tablespaces = on; create tablespace walshadow_ts location '';
         begin; insert into scratch values (2002, 'before set tablespace'); update scratch set v = 'moved' where k = 1000; alter table scratch set tablespace walshadow_ts; insert into scratch values (2003, 'after set tablespace'); commit;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("public.orders", "orders", &orders_columns(false))?;
    ensure!(n > 200_000, "only {n} orders rows");
    h.assert_equal("public.events", "events", &events_columns())?;
    h.assert_equal("public.full_ident", "full_ident", &full_columns())?;
    h.assert_equal("public.scratch", "scratch", &[same("k"), same("v")])?;
    let unpinned = h.ch.query("EXISTS TABLE app.not_pinned")?;
    ensure!(
        unpinned.trim() == "0",
        "an unpinned table reached ClickHouse"
    );

    // Columns change mid-stream; rows keep flowing around the DDL.
    h.source.psql(
        "alter table orders add column region text not null default 'eu';
         insert into orders (id, customer, region) values (-1, 'with region', 'us');
         alter table orders drop column note;
         update orders set qty = 7 where id = -1;
         alter table orders rename column status to state;
         update orders set state = 'renamed' where id = -1;
         begin; alter table orders add column extra int; insert into orders (id, customer, extra) values (-2, 'same txn', 5); alter table orders drop column extra; commit;",
    )?;
    for _ in 0..30 {
        workload_step_after_ddl(&h, &mut rng, &mut next_id)?;
    }
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.orders", "orders", &orders_columns(true))?;

    let status = h.cli_ok(&["status", "--config", h.config()])?;
    eprintln!("{status}");
    ensure!(
        status.contains("public.orders -> orders"),
        "status: {status}"
    );
    ensure!(!status.contains("STOPPED"), "a table stopped:\n{status}");
    h.stop_run()?;
    let _ = std::fs::remove_file(&copy_file);
    Ok(())
}

fn workload_step_after_ddl(h: &StreamHarness, rng: &mut Rng, next_id: &mut i64) -> Result<()> {
    let id = *next_id;
    *next_id += 1;
    let sql = match rng.below(3) {
        0 => format!(
            "insert into orders (id, customer, state, region) values ({id}, 'post', 'p', 'apac')"
        ),
        1 => format!(
            "update orders set region = 'moved', state = 's' where id % 97 = {}",
            rng.below(97)
        ),
        _ => format!("delete from orders where id % 89 = {}", rng.below(89)),
    };
    h.source.psql(&sql)?;
    Ok(())
}

/// What `run` logs when it starts a shadow that stopped on its own.
const SHADOW_RESTARTED: &str = "the shadow PostgreSQL stopped; starting it again";

/// What `run` logs once its shadow is up (at start, and again after a restart).
const SHADOW_STARTED: &str = "shadow started";

/// `kill -9` of `walshadow run` at random moments (at least 20 times; every
/// fifth one hits the shadow's postmaster instead, which `run` starts again)
/// and the ClickHouse engine stopped for a minute, while the workload runs:
/// afterwards equal, nothing twice.
fn crashes(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(
        BIN,
        major,
        "crash",
        &[
            "public.orders",
            "public.events",
            "public.full_ident",
            "public.scratch",
        ],
        "[stream]\nmemory_mb = 2\n",
    )?;
    h.source.psql(SCHEMA)?;
    h.init()?;
    let mut run_started_at = h.run_log().len();
    h.start_run()?;
    let copy_file = format!(
        "/tmp/walshadow-crash-{}-{}.csv",
        std::process::id(),
        major.number()
    );
    let mut rng = Rng::from_env("WALSHADOW_SEED");
    let kills = std::env::var("WALSHADOW_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20usize);
    let done = std::sync::atomic::AtomicBool::new(false);
    let mut shadow_kills = 0;
    let mut workload_rng = Rng::new(rng.next_u64());
    std::thread::scope(|scope| -> Result<()> {
        let source = std::sync::Arc::clone(&h.source);
        let done_ref = &done;
        let copy_file = &copy_file;
        let workload = scope.spawn(move || -> Result<usize> {
            let mut next_id = 2i64;
            let mut steps = 0;
            while !done_ref.load(std::sync::atomic::Ordering::Relaxed) {
                workload_step(&source, &mut workload_rng, &mut next_id, copy_file)?;
                steps += 1;
                // A steady stream, not a flood: the point is the kills.
                std::thread::sleep(Duration::from_millis(20));
                if steps % 100 == 0 {
                    // Now and then a transaction larger than the 2 MB budget.
                    source.psql(&format!(
                        "insert into orders (id, customer, note) select g, 'big', repeat(md5(g::text), 4) from generate_series({next_id}, {}) g",
                        next_id + 9_999
                    ))?;
                    next_id += 10_000;
                }
            }
            Ok(steps)
        });
        let result = (|| -> Result<()> {
            for i in 0..kills {
                std::thread::sleep(Duration::from_millis(300 + rng.below(1500)));
                // A kill that lands while `run` starts (it stops a shadow
                // left up by the killed run and starts its own) is handled
                // by that start and logs no restart: kill the shadow only
                // once this run has started it.
                if i % 5 == 2 {
                    wait_until(Duration::from_secs(60), "run to start its shadow", || {
                        h.check_running()?;
                        Ok(h.run_log()
                            .get(run_started_at..)
                            .is_some_and(|log| log.contains(SHADOW_STARTED)))
                    })?;
                }
                if i % 5 == 2 && h.kill_shadow()? {
                    // The shadow's postmaster killed instead: `run` starts it
                    // again and its catalog lookups connect again.
                    shadow_kills += 1;
                    wait_until(
                        Duration::from_secs(60),
                        "run to start the shadow again",
                        || {
                            h.check_running()?;
                            Ok(h.run_log().matches(SHADOW_RESTARTED).count() >= shadow_kills)
                        },
                    )?;
                    continue;
                }
                h.check_running()?;
                h.kill_run()?;
                run_started_at = h.run_log().len();
                h.start_run()?;
                if i == kills / 2 {
                    // ClickHouse away for a minute: walshadow waits, keeps the
                    // slot, and catches up when it is back.
                    h.ch.stop()?;
                    std::thread::sleep(Duration::from_secs(60));
                    h.ch.start_again()?;
                }
            }
            Ok(())
        })();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let steps = workload
            .join()
            .map_err(|_| anyhow::anyhow!("workload panicked"))??;
        eprintln!("{kills} kills ({shadow_kills} of the shadow) during {steps} workload steps");
        result
    })?;
    h.check_running()?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.orders", "orders", &orders_columns(false))?;
    h.assert_equal("public.events", "events", &events_columns())?;
    h.assert_equal("public.full_ident", "full_ident", &full_columns())?;
    h.assert_equal("public.scratch", "scratch", &[same("k"), same("v")])?;
    let restarts = h.run_log().matches(SHADOW_RESTARTED).count();
    ensure!(
        restarts >= shadow_kills && (kills < 5 || shadow_kills > 0),
        "{shadow_kills} shadow kills, {restarts} restarts logged"
    );
    let status = h.cli_ok(&["status", "--config", h.config()])?;
    ensure!(!status.contains("STOPPED"), "a table stopped:\n{status}");
    h.stop_run()?;
    let _ = std::fs::remove_file(&copy_file);
    Ok(())
}

per_major!(crashes => kill_9_and_clickhouse_down_stay_equal: pg15, pg16, pg17, pg18);
per_major!(oracle => random_workload_equals_clickhouse_final: pg15, pg18);
