//! Catalog churn: how late the next row is after a storm of temporary-table
//! commits, against the same row's lag on an idle source, with commits
//! judged by what they invalidate and, side by side in the same run, with
//! every catalog-changing commit refreshing every table (the behaviour
//! before; `WALSHADOW_TEST_REFRESH_EVERY_CATALOG_COMMIT`).
//!
//! ```text
//! cargo build --release -p walshadow -p walshadow-bench
//! target/release/catalog-storm-bench --major 15
//! ```
//!
//! One run: a throwaway source with `--tables` pinned tables, `walshadow
//! init`, then per mode (`judged`, then `refresh-every`) a `walshadow run`
//! on the same state, and `--rounds` of:
//!
//! - idle: one row into the probe table; its lag is the time from its
//!   commit until ClickHouse returns it (polled every `--poll-ms`);
//! - storm: `--storm` commits sent by one session as fast as it goes,
//!   each creating a temporary table with a serial key and an index `ON
//!   COMMIT DROP` and writing a row into it (`--kind temp`), or granting or
//!   revoking on a pinned table (`--kind grant`: every commit concerns a
//!   table in scope); then one probe row at once, and its lag as above.
//!
//! The figure the issue asks for is `storm / idle` per mode (medians).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use clap::Parser;
use walshadow_bench::daemon::{self, walshadow_binary};
use walshadow_bench::machine::MachineContext;
use walshadow_bench::source::start_source;
use walshadow_pipeline::stream::REFRESH_EVERY_ENV;
use walshadow_testkit::{ClickHouseEngine, Cluster, Walshadow, WorkDir};

#[derive(Debug, Parser)]
#[command(
    about = "Catalog churn: the next row's lag after a storm of temporary-table commits, against the idle lag, judged vs refresh-every"
)]
struct Args {
    /// PostgreSQL major of the throwaway source.
    #[arg(long, default_value_t = 15)]
    major: u32,
    /// Pinned tables (the probe table is one of them).
    #[arg(long, default_value_t = 11)]
    tables: u32,
    /// Commits per storm.
    #[arg(long, default_value_t = 600)]
    storm: u32,
    /// What each storm commit does: `temp` (a temporary table, which
    /// concerns no table in scope) or `grant` (a GRANT on one pinned
    /// table, which concerns it).
    #[arg(long, default_value = "temp", value_parser = ["temp", "grant"])]
    kind: String,
    /// Idle and storm measurements per mode.
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    /// Interval between ClickHouse polls for the probe row, ms.
    #[arg(long, default_value_t = 20)]
    poll_ms: u64,
    /// The walshadow binary; default: `walshadow` next to this program.
    #[arg(long)]
    walshadow: Option<PathBuf>,
    /// Also write the figures as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Longest wait for one probe row: far beyond any healthy figure.
const PROBE_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug, Default, serde::Serialize)]
struct ModeFigures {
    mode: String,
    idle_ms: Vec<f64>,
    storm_ms: Vec<f64>,
    /// How long each storm took to commit, ms.
    storm_commit_ms: Vec<f64>,
    idle_median_ms: f64,
    storm_median_ms: f64,
    ratio: f64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(args.tables >= 1 && args.rounds >= 1 && args.storm >= 1);
    let walshadow = walshadow_binary(args.walshadow.as_deref())?;
    let mut machine = MachineContext::before_run();
    let cluster = start_source(args.major, &[("max_wal_size", "2GB")])?;
    let mut schema = String::new();
    for i in 0..args.tables {
        schema.push_str(&format!(
            "create table t{i} (id bigint primary key, v text, n int);\n"
        ));
    }
    schema.push_str("create role storm_reader;\n");
    cluster.psql(&schema)?;
    let work = WorkDir::new(&format!("catalog-storm-bench-pg{}", args.major))?;
    let ch = ClickHouseEngine::start()?;
    let mut d = daemon::walshadow(&walshadow, &cluster, work.path(), "walshadow_bench")?;
    let mut text = format!(
        "\n[clickhouse]\nurl = \"{}\"\ndatabase = \"app\"\n",
        ch.url()
    );
    for i in 0..args.tables {
        text.push_str(&format!("\n[table.\"public.t{i}\"]\n"));
    }
    d.append_config(&text)?;
    eprintln!("walshadow init …");
    d.init()?;

    let mut next_id = 0i64;
    let mut modes = Vec::new();
    for (mode, env) in [
        ("judged", Vec::new()),
        ("refresh-every", vec![(REFRESH_EVERY_ENV, "1")]),
    ] {
        eprintln!("mode {mode} …");
        d.env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        d.start_run()?;
        // Every table gets a row, so each has its ClickHouse table and
        // descriptor, as in a running system.
        let mut warm = String::new();
        for i in 0..args.tables {
            next_id += 1;
            warm.push_str(&format!(
                "insert into t{i} values ({next_id}, 'warm', 0);\n"
            ));
        }
        cluster.psql(&warm)?;
        probe(&cluster, &ch, &mut d, &mut next_id, args.poll_ms)?;
        let mut fig = ModeFigures {
            mode: mode.into(),
            ..ModeFigures::default()
        };
        for _ in 0..args.rounds {
            fig.idle_ms
                .push(probe(&cluster, &ch, &mut d, &mut next_id, args.poll_ms)?);
            let started = Instant::now();
            storm(&cluster, args.storm, &args.kind)?;
            fig.storm_commit_ms.push(ms(started.elapsed()));
            fig.storm_ms
                .push(probe(&cluster, &ch, &mut d, &mut next_id, args.poll_ms)?);
        }
        d.stop_run()?;
        fig.idle_median_ms = median(&fig.idle_ms);
        fig.storm_median_ms = median(&fig.storm_ms);
        fig.ratio = fig.storm_median_ms / fig.idle_median_ms.max(1.0);
        modes.push(fig);
    }
    machine.after_run();

    println!(
        "catalog storm, PostgreSQL {} ({}), {} pinned tables, {} `{}` commits per storm, {} rounds",
        args.major,
        cluster.install().version(),
        args.tables,
        args.storm,
        args.kind,
        args.rounds
    );
    println!(
        "{}",
        machine.line(" (source, shadow, engine and walshadow on the same cores)")
    );
    println!(
        "{:<14} {:>14} {:>15} {:>12} {:>16}",
        "mode", "idle lag (ms)", "storm lag (ms)", "storm/idle", "storm commit (ms)"
    );
    for f in &modes {
        println!(
            "{:<14} {:>14.0} {:>15.0} {:>12.2} {:>16.0}",
            f.mode,
            f.idle_median_ms,
            f.storm_median_ms,
            f.ratio,
            median(&f.storm_commit_ms)
        );
    }
    if let Some(path) = &args.json {
        machine.write_json(
            path,
            "catalog-storm-bench",
            serde_json::json!({ "major": args.major, "tables": args.tables, "storm": args.storm, "kind": args.kind, "modes": modes }),
        )?;
    }
    Ok(())
}

/// One probe row into `t0`; ms from its commit until ClickHouse has it.
fn probe(
    cluster: &Cluster,
    ch: &ClickHouseEngine,
    d: &mut Walshadow,
    next_id: &mut i64,
    poll_ms: u64,
) -> Result<f64> {
    *next_id += 1;
    let id = *next_id;
    cluster.psql(&format!("insert into t0 values ({id}, 'probe', 0)"))?;
    let committed = Instant::now();
    let sql = format!("SELECT count() FROM app.t0 WHERE id = {id}");
    loop {
        // The table may not exist yet right after the start.
        if ch.query(&sql).is_ok_and(|r| r.trim() == "1") {
            return Ok(ms(committed.elapsed()));
        }
        d.check_running()?;
        if committed.elapsed() > PROBE_TIMEOUT {
            bail!(
                "probe {id} not in ClickHouse after {PROBE_TIMEOUT:?}:\n{}",
                d.run_log_for_errors()
            );
        }
        std::thread::sleep(Duration::from_millis(poll_ms));
    }
}

/// `n` commits of `kind` from one session.
fn storm(cluster: &Cluster, n: u32, kind: &str) -> Result<()> {
    let mut sql = String::new();
    for i in 0..n {
        if kind == "grant" {
            // Alternating, so each commit changes the ACL.
            let verb = if i % 2 == 0 {
                "grant select on t1 to"
            } else {
                "revoke select on t1 from"
            };
            sql.push_str(&format!("{verb} storm_reader;\n"));
        } else {
            sql.push_str(&format!(
                "begin; create temp table s{i} (id serial primary key, v text) on commit drop; \
                 create index on s{i} (v); insert into s{i} (v) values ('x'); commit;\n"
            ));
        }
    }
    cluster.psql(&sql)?;
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}
