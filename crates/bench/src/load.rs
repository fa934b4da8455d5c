//! Initial load (`initial_load = 'copy'`): how fast walshadow loads a large
//! existing table into ClickHouse, with 1 and N load workers, and what it
//! costs the source.
//!
//! ```text
//! cargo build --release -p walshadow -p walshadow-bench
//! target/release/load-bench --major 15 --gb 2 --workers 1,2
//! ```
//!
//! On a throwaway source of `--major`:
//!
//! ```text
//!  items: about --gb GB of heap (bigint key, int, numeric, timestamptz, text of
//!         100–200 bytes, some NULLs), filled by INSERT … SELECT generate_series
//!         before walshadow exists; then primary key, VACUUM ANALYZE, CHECKPOINT
//!  per worker count W, from scratch (own slot, shadow, state, ClickHouse engine):
//!    walshadow init ─▶ walshadow run ([backfill] workers = W) ─▶ caught up
//!    t0  INSERT INTO walshadow.tables VALUES ('public', 'items', true, 'copy') committed
//!          walshadow decodes the opt-in at S, takes a snapshot, W sessions
//!          'walshadow load': COPY … TO STDOUT (FORMAT binary) by block range
//!          ─▶ RowBinary INSERTs into app.items ─▶ marks in backfills.toml
//!    t1  <state>/backfills.toml: phase = "done"        (polled every 20 ms)
//!    check: count, sums and non-NULL counts of app.items FINAL = the source's
//! ```
//!
//! What is counted where:
//! - the load's time: `t0` (the opt-in's commit answered) to the first
//!   poll of the ledger that shows `phase = "done"`; late by at most one
//!   poll. Split by the ledger's own record: until the entry is `loading`
//!   (walshadow decoded `S` and started an attempt), until its `rows`
//!   reach the source's count (the last insert was answered), and the rest
//!   (the last marks, the session ends, and the check for rows of an
//!   earlier opt-in: a `FINAL` count over the loaded table);
//! - MB/s two ways: heap MB (`pg_relation_size`, the main fork, read by
//!   the COPYs) and the binary `COPY` stream walshadow received (the
//!   ledger's `bytes`), both 10^6 bytes;
//! - the source's CPU for the load: the backends with `application_name
//!   = 'walshadow load'` (found in `pg_stat_activity` every 100 ms by a
//!   monitor session, their `/proc/<pid>/schedstat` read every 10 ms until
//!   they exit: short by at most one reading each), and the whole source
//!   (postmaster, reaped and live children; the monitor included);
//! - walshadow's CPU (`utime + stime`) and peak RSS (`VmHWM` of a `run`
//!   started for this load alone), the engine's and the shadow's CPU;
//! - walshadow's INSERTs as the engine's log has them: how many, their
//!   durations, and the time at least one was in progress (the engine
//!   runs one query at a time, so that share says how close it is to
//!   bounding the load).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use walshadow_backfill::ledger::{Ledger, Phase};
use walshadow_bench::daemon::{self, Daemon, walshadow_binary};
use walshadow_bench::engine_log;
use walshadow_bench::machine::MachineContext;
use walshadow_bench::procfs::{CpuSplit, find_engine_pid, proc_cpu_ns, proc_stat, proc_status_kb};
use walshadow_bench::source::{sql_session, start_source};
use walshadow_testkit::{ClickHouseEngine, Cluster, WorkDir, write_walshadow_config};
use walshadow_wal_reader::replication::ReplicationClient;

#[derive(Debug, Parser)]
#[command(
    about = "Initial load (copy) of a large table: time from opt-in to done with 1 and N workers, rows/s, MB/s, source CPU, walshadow RSS"
)]
struct Args {
    /// PostgreSQL major of the throwaway source (15 or 18).
    #[arg(long, default_value_t = 15)]
    major: u32,
    /// Heap size of the table to load, GB (10^9 bytes of `pg_relation_size`).
    #[arg(long, default_value_t = 2.0)]
    gb: f64,
    /// Worker counts to load with (`[backfill] workers`), one load each.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    workers: Vec<usize>,
    /// `[backfill] batch_rows` (walshadow's default when absent).
    #[arg(long)]
    batch_rows: Option<usize>,
    /// `[backfill] chunk_blocks` (walshadow's default when absent).
    #[arg(long)]
    chunk_blocks: Option<u32>,
    /// The walshadow binary; default: `walshadow` next to this program.
    #[arg(long)]
    walshadow: Option<PathBuf>,
    /// Also write the figures as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The table and its ledger key.
const TABLE: &str = "items";
const KEY: &str = "public.items";
/// `application_name` of the load's sessions (pipeline/src/backfills.rs).
const LOAD_APP: &str = "walshadow load";
/// Longest wait for walshadow to start streaming.
const START_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest wait for one load: far beyond any healthy figure.
const LOAD_TIMEOUT: Duration = Duration::from_secs(4 * 3600);
/// Rows per fill transaction.
const FILL_BATCH: u64 = 1_000_000;
/// A first guess of heap bytes per row, corrected after each fill batch.
const GUESS_ROW_BYTES: f64 = 210.0;

const SCHEMA: &str = "
create table items (
    id       bigint not null,
    customer int not null,
    amount   numeric(12,2),
    created  timestamptz not null,
    note     text
);
create table load_bench_marker (n int);
";

/// Rows `from..=to`: every 10th `amount` and every 20th `note` NULL, notes
/// of 100 to 200 characters (under the TOAST threshold: stored inline).
fn fill_sql(from: u64, to: u64) -> String {
    format!(
        "insert into items
         select g,
                (g * 7919) % 100000,
                case when g % 10 = 0 then null else (g * 37 % 10000000) / 100.0 end,
                timestamptz '2024-01-01 00:00:00+00' + (g * 7 % 31536000) * interval '1 second',
                case when g % 20 = 0 then null else left(repeat(md5(g::text), 7), 100 + (g % 101)::int) end
           from generate_series({from}::bigint, {to}::bigint) g"
    )
}

/// The same figures from both sides: count, key and int sums, non-NULL
/// counts, total note length (ASCII: characters = bytes).
const SOURCE_CHECK: &str = "select count(*) || ' ' || sum(id) || ' ' || sum(customer) || ' ' || count(amount) || ' ' || count(note) || ' ' || coalesce(sum(length(note)), 0) from items";
const CLICKHOUSE_CHECK: &str = "SELECT concat(toString(count()), ' ', toString(sum(id)), ' ', toString(sum(customer)), ' ', toString(count(amount)), ' ', toString(count(note)), ' ', toString(sum(length(note)))) FROM app.items FINAL WHERE _is_deleted = 0";

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(args.gb > 0.0, "--gb must be positive");
    ensure!(
        !args.workers.is_empty() && args.workers.iter().all(|&w| w > 0),
        "--workers takes worker counts of at least 1"
    );
    let walshadow = walshadow_binary(args.walshadow.as_deref())?;
    let mut machine = MachineContext::before_run();
    // No checkpoint during the fill; the one after it is explicit.
    let cluster = start_source(
        args.major,
        &[("max_wal_size", "8GB"), ("checkpoint_timeout", "1h")],
    )?;
    let table = fill(&cluster, args.gb)?;
    let mut runs = Vec::new();
    let mut ch_version = String::new();
    for (i, &workers) in args.workers.iter().enumerate() {
        let (run, version) = load_once(&args, &cluster, &walshadow, &table, i, workers)?;
        ch_version = version;
        runs.push(run);
    }
    machine.after_run();
    let versions = Versions {
        postgres: cluster.install().version().to_owned(),
        clickhouse: ch_version,
        machine,
    };
    report(&args, &versions, &table, &runs)
}

/// Versions and machine load, for the report.
#[derive(Debug)]
struct Versions {
    postgres: String,
    clickhouse: String,
    machine: MachineContext,
}

// ---------------------------------------------------------------- the table

/// The table as filled.
#[derive(Debug, serde::Serialize)]
struct Table {
    rows: u64,
    /// `pg_relation_size` (main fork).
    heap_bytes: u64,
    index_bytes: u64,
    fill_secs: f64,
    /// Primary key, VACUUM ANALYZE and CHECKPOINT after the fill.
    prepare_secs: f64,
    /// [`SOURCE_CHECK`]'s answer.
    check: String,
}

/// Fills `items` in transactions of [`FILL_BATCH`] rows until its heap
/// reaches `gb`, each batch's size correcting the rows still wanted.
fn fill(cluster: &Cluster, gb: f64) -> Result<Table> {
    let target = gb * 1e9;
    cluster.psql(SCHEMA)?;
    let t = Instant::now();
    let mut rows = 0u64;
    let mut want = (target / GUESS_ROW_BYTES).ceil() as u64;
    let mut heap = 0u64;
    // Within 0.1% of the estimate is close enough: no batches of a few rows.
    while (rows as f64) < want as f64 * 0.999 {
        let n = (want - rows).min(FILL_BATCH);
        cluster.psql(&fill_sql(rows + 1, rows + n))?;
        rows += n;
        heap = cluster
            .query_one(&format!("select pg_relation_size('{TABLE}')"))?
            .parse()?;
        want = (target / (heap as f64 / rows as f64)).ceil() as u64;
        eprintln!(
            "filled {rows} of about {want} rows, heap {:.0} MB, {:.0} s",
            heap as f64 / 1e6,
            t.elapsed().as_secs_f64()
        );
    }
    let fill_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    cluster.psql(&format!(
        "alter table {TABLE} add primary key (id); vacuum analyze {TABLE}"
    ))?;
    cluster.checkpoint()?;
    let prepare_secs = t.elapsed().as_secs_f64();
    let index_bytes = cluster
        .query_one(&format!("select pg_indexes_size('{TABLE}')"))?
        .parse()?;
    let check = cluster.query_one(SOURCE_CHECK)?;
    eprintln!(
        "table ready: {rows} rows, heap {:.0} MB, index {:.0} MB; filled in {fill_secs:.0} s, key + vacuum + checkpoint {prepare_secs:.0} s",
        heap as f64 / 1e6,
        index_bytes as f64 / 1e6
    );
    Ok(Table {
        rows,
        heap_bytes: heap,
        index_bytes,
        fill_secs,
        prepare_secs,
        check,
    })
}

// ---------------------------------------------------------------- one load

/// One load, measured.
#[derive(Debug, Default, serde::Serialize)]
struct Run {
    workers: usize,
    /// Opt-in committed to the ledger's `done`.
    secs: f64,
    /// Opt-in committed to the entry's first `loading`.
    start_secs: Option<f64>,
    /// Opt-in committed to the ledger's rows reaching the source's count.
    rows_in_secs: Option<f64>,
    /// The ledger's record of the pass.
    rows: u64,
    copy_bytes: u64,
    attempts: u32,
    resumes: u32,
    /// walshadow's own `duration_ms` of the pass (its INFO line), s.
    walshadow_secs: Option<f64>,
    rows_per_sec: f64,
    heap_mb_per_sec: f64,
    copy_mb_per_sec: f64,
    /// CPU of the `walshadow load` backends, s, and how many were seen.
    load_backends_cpu_secs: f64,
    load_backends: usize,
    /// Every party, opt-in to done.
    cpu: CpuSplit,
    rss_before_mb: f64,
    peak_rss_mb: f64,
    /// (seconds since the opt-in, rows in the ledger, walshadow VmRSS MB).
    timeline: Vec<(f64, u64, f64)>,
    /// walshadow's INSERTs into the table, per the engine's log.
    engine: EngineInserts,
    /// `system.parts` of the loaded table: (rows, uncompressed, compressed bytes).
    clickhouse_parts: Option<(u64, u64, u64)>,
    /// [`CLICKHOUSE_CHECK`]'s answer (equal to the source's, or the run fails).
    check: String,
}

/// A fresh walshadow (own slot, shadow, state and engine) loading `items`
/// with `workers`; returns the figures and the engine's version.
fn load_once(
    args: &Args,
    cluster: &Cluster,
    walshadow: &Path,
    table: &Table,
    index: usize,
    workers: usize,
) -> Result<(Run, String)> {
    eprintln!("load {}: {workers} worker(s)", index + 1);
    if index > 0 {
        // The config table outlives the previous walshadow: the opt-in
        // below must be new to this one.
        cluster.psql("delete from walshadow.tables")?;
    }
    let work = WorkDir::new(&format!(
        "load-bench-pg{}-w{workers}",
        cluster.major().number()
    ))?;
    let ch = ClickHouseEngine::start()?;
    let ch_version = ch.query("SELECT version()")?.trim().to_owned();
    let shadow_dir = work.path().join("shadow");
    let state_dir = work.path().join("state");
    let slot = format!("walshadow_load_{index}");
    let config = write_walshadow_config(cluster, work.path(), &shadow_dir, &slot)?;
    let mut text = std::fs::read_to_string(&config)?;
    text.push_str(&format!(
        "\n[clickhouse]\nurl = \"{}\"\ndatabase = \"app\"\n\n[backfill]\nworkers = {workers}\n",
        ch.url()
    ));
    if let Some(n) = args.batch_rows {
        text.push_str(&format!("batch_rows = {n}\n"));
    }
    if let Some(n) = args.chunk_blocks {
        text.push_str(&format!("chunk_blocks = {n}\n"));
    }
    std::fs::write(&config, text)?;
    daemon::init(walshadow, &config)?;
    let mut daemon = Daemon::start(walshadow, &config, work.path(), &shadow_dir, cluster)?;
    let engine_pid = find_engine_pid(ch.port());
    cluster.psql("insert into load_bench_marker values (1)")?;
    daemon.wait_applied(cluster, &state_dir, START_TIMEOUT)?;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut sql = rt.block_on(sql_session(cluster, "load-bench"))?;
    let stop = AtomicBool::new(false);
    let (mut run, backends) = std::thread::scope(|s| -> Result<_> {
        let sampler = s.spawn(|| sample_backends(cluster, &stop));
        let r = measure(
            &rt,
            &mut sql,
            cluster,
            &mut daemon,
            &state_dir,
            table,
            engine_pid,
        );
        stop.store(true, Ordering::Relaxed);
        let backends = sampler
            .join()
            .map_err(|_| anyhow::anyhow!("the sampler thread panicked"))?;
        Ok((r?, backends?))
    })?;
    rt.block_on(sql.close());
    run.workers = workers;
    (run.load_backends, run.load_backends_cpu_secs) = backends;
    run.walshadow_secs = walshadow_duration(&work.path().join("run.log"));
    run.engine = EngineInserts::read(&ch.log_path());
    run.clickhouse_parts = clickhouse_parts(&ch);
    run.check = ch.query(CLICKHOUSE_CHECK)?.trim().to_owned();
    eprintln!(
        "verify: source {} | ClickHouse FINAL {}",
        table.check, run.check
    );
    ensure!(
        run.check == table.check,
        "MISMATCH: source (count, sums, non-NULL counts, note length) {} but ClickHouse FINAL {}",
        table.check,
        run.check
    );
    daemon.stop()?;
    cluster.psql(&format!("select pg_drop_replication_slot('{slot}')"))?;
    Ok((run, ch_version))
}

/// Opts the table in and follows the ledger until the load is done.
fn measure(
    rt: &tokio::runtime::Runtime,
    sql: &mut ReplicationClient,
    cluster: &Cluster,
    daemon: &mut Daemon,
    state_dir: &Path,
    table: &Table,
    engine_pid: Option<u32>,
) -> Result<Run> {
    let mut run = Run {
        rss_before_mb: proc_status_kb(daemon.pid(), "VmRSS").unwrap_or(0) as f64 / 1024.0,
        ..Run::default()
    };
    let cpu0 = CpuSplit::now(cluster, daemon, engine_pid);
    rt.block_on(sql.simple_query(&format!(
        "insert into walshadow.tables values ('public', '{TABLE}', true, 'copy')"
    )))
    .context("opting the table in")?;
    let t0 = Instant::now();
    let mut next_sample = Duration::ZERO;
    let pass = loop {
        daemon.check()?;
        let at = t0.elapsed();
        let ledger = Ledger::read(state_dir)?;
        let pass = ledger.tables.get(KEY);
        let rows = pass.map_or(0, |p| p.rows);
        if at >= next_sample {
            let rss = proc_status_kb(daemon.pid(), "VmRSS").unwrap_or(0) as f64 / 1024.0;
            run.timeline.push((at.as_secs_f64(), rows, rss));
            next_sample += Duration::from_secs(1);
        }
        if let Some(p) = pass {
            if p.phase != Phase::Pending && run.start_secs.is_none() {
                run.start_secs = Some(at.as_secs_f64());
            }
            if p.rows >= table.rows && run.rows_in_secs.is_none() {
                run.rows_in_secs = Some(at.as_secs_f64());
            }
            match p.phase {
                Phase::Done => break p.clone(),
                Phase::Failed => bail!(
                    "the load failed: {}\n{}",
                    p.error.as_deref().unwrap_or("?"),
                    daemon.log_tail()
                ),
                Phase::Pending | Phase::Loading => {}
            }
        }
        ensure!(
            at < LOAD_TIMEOUT,
            "no load done after {LOAD_TIMEOUT:?}; ledger: {pass:?}\n{}",
            daemon.log_tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    run.secs = t0.elapsed().as_secs_f64();
    run.cpu = CpuSplit::now(cluster, daemon, engine_pid).since(&cpu0);
    run.peak_rss_mb = proc_status_kb(daemon.pid(), "VmHWM").unwrap_or(0) as f64 / 1024.0;
    let rss = proc_status_kb(daemon.pid(), "VmRSS").unwrap_or(0) as f64 / 1024.0;
    run.timeline.push((run.secs, pass.rows, rss));
    run.rows = pass.rows;
    run.copy_bytes = pass.bytes;
    run.attempts = pass.attempts;
    run.resumes = pass.resumes;
    run.rows_per_sec = table.rows as f64 / run.secs;
    run.heap_mb_per_sec = table.heap_bytes as f64 / 1e6 / run.secs;
    run.copy_mb_per_sec = pass.bytes as f64 / 1e6 / run.secs;
    Ok(run)
}

/// Until `stop`: the `walshadow load` backends (looked up every 100 ms)
/// and their CPU (read every 10 ms while they live). Returns how many
/// there were and their CPU seconds.
fn sample_backends(cluster: &Cluster, stop: &AtomicBool) -> Result<(usize, f64)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut sql = rt.block_on(sql_session(cluster, "load-bench-monitor"))?;
    let query = format!("select pid from pg_stat_activity where application_name = '{LOAD_APP}'");
    // pid -> (start time in ticks since boot, last ns on CPU): a pid the
    // kernel hands to another process later is not counted twice.
    let mut seen: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let started = |pid: u32| proc_stat(pid).and_then(|f| f.get(19).copied());
    for tick in 0u64.. {
        let stopping = stop.load(Ordering::Relaxed);
        if tick % 10 == 0 || stopping {
            let r = rt.block_on(sql.simple_query(&query))?;
            for i in 0..r.rows.len() {
                if let Some(pid) = r.text(i, 0).and_then(|t| t.parse().ok())
                    && !seen.contains_key(&pid)
                    && let Some(start) = started(pid)
                {
                    seen.insert(pid, (start, 0));
                }
            }
        }
        for (&pid, (start, ns)) in seen.iter_mut() {
            if started(pid) == Some(*start)
                && let Some(now) = proc_cpu_ns(Path::new(&format!("/proc/{pid}")))
            {
                *ns = now;
            }
        }
        if stopping {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    rt.block_on(sql.close());
    let ns: u64 = seen.values().map(|&(_, ns)| ns).sum();
    Ok((seen.len(), ns as f64 / 1e9))
}

/// `duration_ms` of the pass's `initial load (copy) done` line in the run log.
fn walshadow_duration(log: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains("initial load (copy) done"))?;
    let ms: f64 = line
        .split_once("duration_ms=")?
        .1
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some(ms / 1e3)
}

/// walshadow's INSERTs into `app.items` as the engine logged them.
#[derive(Debug, Default, serde::Serialize)]
struct EngineInserts {
    inserts: usize,
    rows: u64,
    mean_ms: f64,
    max_ms: f64,
    /// Their durations added up (a wait for the engine's lock counts in
    /// each insert that waits).
    sum_secs: f64,
    /// Time at least one of them was in progress.
    busy_secs: f64,
}

impl EngineInserts {
    fn read(log: &Path) -> EngineInserts {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let inserts: Vec<_> = engine_log::posts_ok(&text)
            .filter(|r| r.what.starts_with(&format!("INSERT INTO `app`.`{TABLE}`")))
            .collect();
        let sum_ms: f64 = inserts.iter().map(|r| r.ms).sum();
        EngineInserts {
            inserts: inserts.len(),
            rows: inserts.iter().map(|r| r.rows_written()).sum(),
            mean_ms: sum_ms / inserts.len().max(1) as f64,
            max_ms: inserts.iter().map(|r| r.ms).fold(0.0, f64::max),
            sum_secs: sum_ms / 1e3,
            busy_secs: engine_log::busy_secs(&inserts),
        }
    }
}

/// Active parts of `app.items`: rows, uncompressed and compressed bytes.
fn clickhouse_parts(ch: &ClickHouseEngine) -> Option<(u64, u64, u64)> {
    let text = ch
        .query(&format!(
            "SELECT sum(rows), sum(data_uncompressed_bytes), sum(data_compressed_bytes) FROM system.parts WHERE database = 'app' AND table = '{TABLE}' AND active FORMAT TabSeparated"
        ))
        .ok()?;
    let mut f = text.trim().split('\t').map(|v| v.parse::<u64>().ok());
    Some((f.next()??, f.next()??, f.next()??))
}

// ---------------------------------------------------------------- report

fn report(args: &Args, v: &Versions, table: &Table, runs: &[Run]) -> Result<()> {
    let cores = v.machine.cores;
    let mb = |b: u64| b as f64 / 1e6;
    let secs = |s: Option<f64>| s.map_or_else(|| "?".to_owned(), |s| format!("{s:.1}"));
    println!(
        "Initial load (copy), PostgreSQL {} -> walshadow -> ClickHouse engine {}: {TABLE}, {} rows, heap {:.0} MB (pg_relation_size), primary key {:.0} MB; filled in {:.0} s",
        v.postgres,
        v.clickhouse,
        table.rows,
        mb(table.heap_bytes),
        mb(table.index_bytes),
        table.fill_secs
    );
    println!(
        "{}",
        v.machine.line(
            ", shared by the source PostgreSQL, the ClickHouse engine, walshadow and its shadow PostgreSQL"
        )
    );
    println!(
        "{:>7} {:>8} {:>9} {:>9} {:>9} {:>12} {:>12} {:>10} {:>9}",
        "workers",
        "load s",
        "rows/s",
        "heap MB/s",
        "COPY MB/s",
        "src COPY CPU",
        "walshadow CPU",
        "engine CPU",
        "peak RSS"
    );
    for r in runs {
        println!(
            "{:>7} {:>8.1} {:>9.0} {:>9.1} {:>9.1} {:>10.1} s {:>11.1} s {:>8} s {:>6.0} MB",
            r.workers,
            r.secs,
            r.rows_per_sec,
            r.heap_mb_per_sec,
            r.copy_mb_per_sec,
            r.load_backends_cpu_secs,
            r.cpu.walshadow,
            r.cpu
                .clickhouse_engine
                .map_or_else(|| "?".into(), |c| format!("{c:.1}")),
            r.peak_rss_mb
        );
    }
    let row = |k: &str, v: String| println!("  {k:<46} {v}");
    for r in runs {
        println!("{} worker(s):", r.workers);
        row(
            "opt-in to loading / rows in / done",
            format!(
                "{} s / {} s / {:.1} s (walshadow's own duration {} s)",
                secs(r.start_secs),
                secs(r.rows_in_secs),
                r.secs,
                secs(r.walshadow_secs)
            ),
        );
        row(
            "ledger: rows, COPY bytes, attempts",
            format!(
                "{} rows, {:.0} MB of binary COPY, {} attempt(s), {} resume(s)",
                r.rows,
                mb(r.copy_bytes),
                r.attempts,
                r.resumes
            ),
        );
        row(
            "source CPU: load backends / all",
            format!(
                "{:.1} s in {} sessions / {:.1} s",
                r.load_backends_cpu_secs, r.load_backends, r.cpu.source_postgres
            ),
        );
        row(
            "CPU s, opt-in to done (2 cores = 2 s per s)",
            format!(
                "walshadow {:.1}, ClickHouse engine {}, shadow PG {:.1}, source PG {:.1} (of {:.1} available)",
                r.cpu.walshadow,
                r.cpu
                    .clickhouse_engine
                    .map_or_else(|| "?".into(), |c| format!("{c:.1}")),
                r.cpu.shadow_postgres,
                r.cpu.source_postgres,
                cores as f64 * r.secs
            ),
        );
        row(
            "walshadow RSS: before the opt-in / peak",
            format!("{:.1} MB / {:.1} MB", r.rss_before_mb, r.peak_rss_mb),
        );
        let e = &r.engine;
        row(
            "engine: walshadow's INSERTs",
            format!(
                "{} ({} rows), mean {:.0} ms, max {:.0} ms; in progress {:.1} s = {:.0}% of the load (durations added: {:.1} s)",
                e.inserts,
                e.rows,
                e.mean_ms,
                e.max_ms,
                e.busy_secs,
                100.0 * e.busy_secs / r.secs,
                e.sum_secs
            ),
        );
        if let Some((rows, raw, packed)) = r.clickhouse_parts {
            row(
                "ClickHouse parts: rows, uncompressed, on disk",
                format!("{rows}, {:.0} MB, {:.0} MB", mb(raw), mb(packed)),
            );
        }
        row(
            "verify (count, sums, non-NULL, note length)",
            format!("source = ClickHouse FINAL: {}", r.check),
        );
    }

    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "postgres": v.postgres,
            "clickhouse": v.clickhouse,
            "settings": {
                "gb": args.gb,
                "workers": args.workers,
                "batch_rows": args.batch_rows,
                "chunk_blocks": args.chunk_blocks,
            },
            "table": table,
            "runs": runs,
        });
        v.machine.write_json(path, "load", doc)?;
    }
    Ok(())
}
