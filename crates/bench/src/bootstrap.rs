//! `walshadow init --bootstrap` against `walshadow init` followed by a
//! `copy` load of each table: the same tables, in one run, from nothing to
//! every table loaded — wall time and the source's CPU.
//!
//! ```text
//! cargo build --release -p walshadow -p walshadow-bench
//! target/release/bootstrap-bench --major 15 --gb 1 --tables 4
//! ```
//!
//! On a throwaway source of `--major`:
//!
//! ```text
//!  items_1..items_N: --gb GB of heap in all (bigint key, int, text of
//!         100–200 bytes), filled before walshadow exists; primary keys,
//!         VACUUM ANALYZE, CHECKPOINT
//!  per way, from scratch (own slot, shadow, state, ClickHouse engine),
//!  every table pinned with initial_load = "copy":
//!    t0  walshadow init [--bootstrap]       (its BASE_BACKUP; with
//!                                            --bootstrap the tables' files
//!                                            and the backup's WAL kept)
//!    t1  walshadow run: bootstrap: one pass over the landed backup;
//!                       copy: one COPY load per table
//!    t2  <state>/backfills.toml: every table's entry done (polled every 20 ms)
//!    check: count and sums of each table FINAL = the source's
//! ```
//!
//! The source's CPU is its postmaster with its reaped and live children
//! from `t0` to `t2` (checkpoints and walsenders included), and the part of
//! it before `t1` (the init).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use clap::Parser;
use walshadow_backfill::ledger::{Ledger, Phase};
use walshadow_bench::daemon::{self, walshadow_binary};
use walshadow_bench::machine::MachineContext;
use walshadow_bench::procfs::{own_cpu, postmaster_cpu};
use walshadow_bench::source::start_source;
use walshadow_testkit::{ClickHouseEngine, Cluster, WorkDir};

#[derive(Debug, Parser)]
#[command(about = "init --bootstrap against init plus a copy load of each table")]
struct Args {
    /// PostgreSQL major of the source (15 to 18).
    #[arg(long, default_value_t = 15)]
    major: u32,
    /// Heap of all the tables together, GB.
    #[arg(long, default_value_t = 0.5)]
    gb: f64,
    /// How many tables share it.
    #[arg(long, default_value_t = 4)]
    tables: usize,
    /// The walshadow binary (default: `walshadow` next to this program).
    #[arg(long)]
    walshadow: Option<PathBuf>,
}

/// Rows per fill transaction.
const FILL_BATCH: u64 = 1_000_000;
/// Heap bytes per row, about (checked after the fill).
const ROW_BYTES: f64 = 200.0;
/// Longest wait for the loads.
const LOAD_TIMEOUT: Duration = Duration::from_secs(4 * 3600);

/// One way's figures.
#[derive(Debug, Default)]
struct Way {
    name: &'static str,
    init_secs: f64,
    load_secs: f64,
    source_cpu_init: f64,
    source_cpu_total: f64,
    walshadow_cpu: f64,
}

fn table(i: usize) -> String {
    format!("items_{i}")
}

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(
        args.gb > 0.0 && args.tables > 0,
        "--gb and --tables must be positive"
    );
    let walshadow = walshadow_binary(args.walshadow.as_deref())?;
    let mut machine = MachineContext::before_run();
    let cluster = start_source(
        args.major,
        &[("max_wal_size", "8GB"), ("checkpoint_timeout", "1h")],
    )?;
    let rows_each = ((args.gb * 1e9 / ROW_BYTES) as u64 / args.tables as u64).max(1);
    let fill = Instant::now();
    for i in 1..=args.tables {
        let t = table(i);
        cluster.psql(&format!(
            "create table {t} (id bigint not null, customer int not null, note text)"
        ))?;
        let mut from = 1;
        while from <= rows_each {
            let to = (from + FILL_BATCH - 1).min(rows_each);
            cluster.psql(&format!(
                "insert into {t} select g, (g * 7919) % 100000, left(repeat(md5(g::text), 7), 100 + (g % 101)::int)
                   from generate_series({from}::bigint, {to}::bigint) g"
            ))?;
            from = to + 1;
        }
        cluster.psql(&format!(
            "alter table {t} add primary key (id); vacuum analyze {t}"
        ))?;
    }
    cluster.psql("checkpoint")?;
    let heap: u64 = cluster
        .query_one(&format!(
            "select {}",
            (1..=args.tables)
                .map(|i| format!("pg_relation_size('{}')", table(i)))
                .collect::<Vec<_>>()
                .join(" + ")
        ))?
        .trim()
        .parse()?;
    eprintln!(
        "filled {} tables of {rows_each} rows, {:.0} MB of heap, in {:.1} s",
        args.tables,
        heap as f64 / 1e6,
        fill.elapsed().as_secs_f64()
    );
    let mut ways = Vec::new();
    for (index, bootstrap) in [true, false].into_iter().enumerate() {
        ways.push(one_way(
            &args, &cluster, &walshadow, index, bootstrap, rows_each,
        )?);
    }
    machine.after_run();
    println!(
        "bootstrap-bench: PostgreSQL {}, {} tables, {:.0} MB of heap; {}",
        cluster.install().version(),
        args.tables,
        heap as f64 / 1e6,
        machine.line("")
    );
    println!(
        "{:<22} {:>9} {:>9} {:>9} {:>13} {:>13} {:>13}",
        "way", "init s", "load s", "total s", "src CPU init", "src CPU all", "walshadow CPU"
    );
    for w in &ways {
        println!(
            "{:<22} {:>9.2} {:>9.2} {:>9.2} {:>13.2} {:>13.2} {:>13.2}",
            w.name,
            w.init_secs,
            w.load_secs,
            w.init_secs + w.load_secs,
            w.source_cpu_init,
            w.source_cpu_total,
            w.walshadow_cpu
        );
    }
    if let [b, c] = ways.as_slice() {
        println!(
            "bootstrap / (init + copy): wall {:.3}, source CPU {:.3}",
            (b.init_secs + b.load_secs) / (c.init_secs + c.load_secs),
            b.source_cpu_total / c.source_cpu_total
        );
    }
    Ok(())
}

fn one_way(
    args: &Args,
    cluster: &Cluster,
    walshadow: &std::path::Path,
    index: usize,
    bootstrap: bool,
    rows_each: u64,
) -> Result<Way> {
    let name = if bootstrap {
        "init --bootstrap"
    } else {
        "init + copy per table"
    };
    eprintln!("{name}");
    let work = WorkDir::new(&format!(
        "bootstrap-bench-pg{}-{}",
        args.major,
        if bootstrap { "bootstrap" } else { "copy" }
    ))?;
    let ch = ClickHouseEngine::start()?;
    let slot = format!("walshadow_bootstrap_{index}");
    let mut daemon = daemon::walshadow(walshadow, cluster, work.path(), &slot)?;
    let mut text = format!(
        "\n[clickhouse]\nurl = \"{}\"\ndatabase = \"app\"\n\n[backfill]\nworkers = 2\n",
        ch.url()
    );
    for i in 1..=args.tables {
        text.push_str(&format!(
            "\n[table.\"public.{}\"]\ninitial_load = \"copy\"\n",
            table(i)
        ));
    }
    daemon.append_config(&text)?;
    let data_dir = cluster.data_dir();
    let cpu0 = postmaster_cpu(&data_dir);
    let t0 = Instant::now();
    let config = daemon.config().to_owned();
    let mut init = vec!["init", "--config", config.as_str()];
    if bootstrap {
        init.push("--bootstrap");
    }
    daemon.cli_ok(&init)?;
    let init_secs = t0.elapsed().as_secs_f64();
    let cpu_init = postmaster_cpu(&data_dir) - cpu0;
    let t1 = Instant::now();
    daemon.start_run()?;
    let keys: Vec<String> = (1..=args.tables)
        .map(|i| format!("public.{}", table(i)))
        .collect();
    let state_dir = daemon.state_dir().to_owned();
    let deadline = Instant::now() + LOAD_TIMEOUT;
    let mut walshadow_cpu = 0.0;
    loop {
        daemon.check_running()?;
        walshadow_cpu = daemon.run_pid().and_then(own_cpu).unwrap_or(walshadow_cpu);
        let ledger = Ledger::read(&state_dir).context("reading the ledger")?;
        if keys
            .iter()
            .all(|k| ledger.tables.get(k).is_some_and(|p| p.phase == Phase::Done))
        {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "the loads did not end in {LOAD_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let load_secs = t1.elapsed().as_secs_f64();
    let cpu_total = postmaster_cpu(&data_dir) - cpu0;
    for i in 1..=args.tables {
        let t = table(i);
        let want = cluster.query_one(&format!(
            "select count(*) || ' ' || sum(id) || ' ' || sum(customer) from {t}"
        ))?;
        let got = ch.query(&format!(
            "SELECT concat(toString(count()), ' ', toString(sum(id)), ' ', toString(sum(customer))) FROM app.{t} FINAL WHERE _is_deleted = 0"
        ))?;
        ensure!(
            want.trim() == got.trim(),
            "{name}: {t}: source {want}, ClickHouse FINAL {got}"
        );
    }
    eprintln!(
        "{name}: {} tables of {rows_each} rows equal; init {init_secs:.1} s, loads {load_secs:.1} s",
        args.tables
    );
    daemon.stop_run()?;
    cluster.psql(&format!("select pg_drop_replication_slot('{slot}')"))?;
    Ok(Way {
        name,
        init_secs,
        load_secs,
        source_cpu_init: cpu_init,
        source_cpu_total: cpu_total,
        walshadow_cpu,
    })
}
