//! End to end: a sustained offered load on the source while `walshadow run`
//! streams it into the ClickHouse engine; rows/s committed and applied,
//! commit-to-visible lag, catch-up after the load, walshadow's peak RSS and
//! CPU, and a correctness check of every table at the end.
//!
//! ```text
//! cargo build --release -p walshadow -p walshadow-bench
//! target/release/e2e-bench --major 15 --seconds 60
//! target/release/e2e-bench --major 15 --catch-up 5000000   # the backlog mode (catch_up.rs)
//! target/release/e2e-bench --major 15 --idle-tables 2000    # the same load, 2,003 tables in scope
//! ```
//!
//! One run, on a throwaway source of `--major`:
//!
//! ```text
//!  source PG ──physical slot──▶ walshadow run (release binary) ──HTTP──▶ ClickHouse engine
//!     ▲   ▲                         (pins accounts, history, probe)           │
//!     │   └── prober: INSERT probe(id, clock_timestamp()) every 100 ms        │
//!     └────── pgbench -c C -T N -f <script>   (accounts/history mix)          │
//!  watcher: SELECT id, sent FROM probe WHERE id > … every 20 ms ◀─────────────┘
//!           lag = time the row was first seen − sent   (one machine clock)
//! ```
//!
//! Phases: schema, `walshadow init`, `walshadow run`; a warm-up probe; a
//! preload of `--accounts` rows streamed through walshadow (initial loads
//! of existing rows are not built yet, so every row ClickHouse holds comes
//! from the WAL); a fence probe; the measured load (pgbench plus the
//! periodic prober); a final fence probe inserted once the load has
//! stopped, whose visibility is the catch-up time. walshadow flushes every
//! table's batch together and applies commits in commit order, so once the
//! final fence is visible every earlier commit is in ClickHouse.
//!
//! The load, per pgbench transaction: two updates of narrow `accounts` rows
//! (in ascending key order, so concurrent clients cannot deadlock), one
//! insert into `history` and one delete of the `history` row the same
//! client inserted 1,000 transactions earlier: four row changes.
//!
//! What is counted where:
//! - changes committed at the source: `pg_stat_user_tables`
//!   (`n_tup_ins + n_tup_upd + n_tup_del`) over the load, cross-checked
//!   against the rows walshadow reports written (`progress.json`);
//! - rows applied: walshadow's per-table row counters in `progress.json`
//!   (written after each flush ClickHouse accepted, about once a second);
//! - lag: each probe's `sent` (its `clock_timestamp()`, taken just before
//!   its commit) to the reply of the watcher's first poll that returned
//!   it: an upper bound, late by at most one poll interval plus one poll's
//!   round trip;
//! - lag as of the engine's log: the same probes against the time the
//!   engine logged the end of the INSERT that carried them (the k-th probe
//!   row inserted is probe k: probes commit, and walshadow applies, in id
//!   order), which has no polling error but still pays for the polls'
//!   share of the engine (chDB runs one query at a time);
//! - CPU: `/proc/<pid>/stat` utime + stime; for the two PostgreSQL servers
//!   the postmaster plus its reaped (`cutime`/`cstime`) and live children;
//!   peak RSS: walshadow's `VmHWM`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use walshadow_pipeline::progress::StateFile;

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use walshadow_bench::daemon::{self, walshadow_binary};
use walshadow_bench::engine_log;
use walshadow_bench::machine::MachineContext;
use walshadow_bench::procfs::{CpuSplit, find_engine_pid, proc_status_kb};
use walshadow_bench::source::{sql_session, start_source};
use walshadow_pipeline::progress::Progress;
use walshadow_testkit::{ClickHouseEngine, Cluster, Walshadow, WorkDir, wait_until};

#[path = "e2e/catch_up.rs"]
mod catch_up;

#[derive(Debug, Parser)]
#[command(
    about = "End to end: sustained load on the source, walshadow streaming into the ClickHouse engine; rows/s, commit-to-visible lag, RSS"
)]
struct Args {
    /// PostgreSQL major of the throwaway source (15 to 18).
    #[arg(long, default_value_t = 15)]
    major: u32,
    /// Seconds of offered load.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// pgbench client connections (one pgbench thread each).
    #[arg(long, default_value_t = 2)]
    clients: u32,
    /// Total transactions per second to offer (pgbench `-R`); as fast as
    /// the clients go when absent.
    #[arg(long)]
    rate: Option<u32>,
    /// walshadow's `clickhouse.batch_ms`: a table's batch is flushed at
    /// most this long after its first row (walshadow's default).
    #[arg(long, default_value_t = 1000)]
    batch_ms: u64,
    /// walshadow's `clickhouse.idle_flush_ms`: once the stream has decoded
    /// all it received, rows held are flushed at most this often; 0 is off.
    /// Absent: walshadow's default, and not written into the config (so a
    /// walshadow from before the setting runs too).
    #[arg(long)]
    idle_flush_ms: Option<u64>,
    /// walshadow's `clickhouse.insert_concurrency` (absent: its default,
    /// not written).
    #[arg(long)]
    insert_concurrency: Option<u32>,
    /// Rows in `accounts`, streamed through walshadow before the load.
    #[arg(long, default_value_t = 100_000)]
    accounts: u32,
    /// Interval between probe rows, ms.
    #[arg(long, default_value_t = 100)]
    probe_ms: u64,
    /// Interval between the watcher's ClickHouse polls, ms.
    #[arg(long, default_value_t = 20)]
    poll_ms: u64,
    /// The walshadow binary; default: `walshadow` next to this program.
    #[arg(long)]
    walshadow: Option<PathBuf>,
    /// Also write the figures as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// The catch-up mode instead of the sustained load: ClickHouse stopped
    /// while this many row changes are committed, then started; rows
    /// applied per second until caught up, against the engine's own
    /// insert ceiling for the same rows (see `catch_up.rs`).
    #[arg(long)]
    catch_up: Option<u64>,
    /// The scale of tables: this many more tables in scope
    /// (`public.idle_0001` …), idle but for one row each written before
    /// the load, so walshadow follows them all while the load runs on the
    /// other three.
    #[arg(long, default_value_t = 0)]
    idle_tables: u32,
}

/// Longest wait for walshadow to stream something (start-up, preload,
/// catch-up): far beyond any healthy figure, so a stuck daemon fails the run.
const STREAM_TIMEOUT: Duration = Duration::from_secs(600);
/// Changes per pgbench transaction once each client is past its first 1,000.
const CHANGES_PER_TXN: u64 = 4;
const TABLES: [&str; 3] = ["public.accounts", "public.history", "public.probe"];
const LOAD_TABLES: [&str; 2] = ["public.accounts", "public.history"];

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(args.seconds > 0, "--seconds must be at least 1");
    ensure!(args.clients > 0, "--clients must be at least 1");
    ensure!(args.accounts > 1000, "--accounts must be above 1000");
    ensure!(
        args.probe_ms > 0 && args.poll_ms > 0,
        "--probe-ms and --poll-ms must be positive"
    );
    let walshadow = walshadow_binary(args.walshadow.as_deref())?;
    let machine = MachineContext::before_run();
    let cluster = start_source(
        args.major,
        &[("wal_keep_size", "4GB"), ("max_wal_size", "4GB")],
    )?;
    cluster.psql(SCHEMA)?;
    if args.idle_tables > 0 {
        cluster.psql(IDLE_TABLE_FN)?;
        for (from, to) in idle_ranges(args.idle_tables) {
            cluster.psql(&format!(
                "do $$ begin for i in {from}..{to} loop \
                 execute format('create table %I (id int primary key, v text)', idle_table(i)); \
                 end loop; end $$"
            ))?;
        }
    }
    let work = WorkDir::new(&format!("e2e-bench-pg{}", args.major))?;
    let mut ch = ClickHouseEngine::start()?;
    let ch_version = ch.query("SELECT version()")?.trim().to_owned();
    let clock = EngineClock::calibrate(&ch)?;
    let mut daemon = daemon::walshadow(&walshadow, &cluster, work.path(), "walshadow_bench")?;
    let state_dir = daemon.state_dir().to_owned();
    let mut text = format!(
        "\n[clickhouse]\nurl = \"{}\"\ndatabase = \"app\"\nbatch_ms = {}\n{}",
        ch.url(),
        args.batch_ms,
        args.idle_flush_ms
            .map_or_else(String::new, |ms| format!("idle_flush_ms = {ms}\n"))
            + &args
                .insert_concurrency
                .map_or_else(String::new, |n| format!("insert_concurrency = {n}\n"))
    );
    for t in TABLES {
        text.push_str(&format!("\n[table.\"{t}\"]\n"));
    }
    for i in 1..=args.idle_tables {
        text.push_str(&format!("\n[table.\"public.{}\"]\n", idle_table(i)));
    }
    daemon.append_config(&text)?;

    eprintln!("walshadow init …");
    daemon.init()?;
    daemon.start_run()?;
    if args.idle_tables > 0 {
        idle_tables_first_rows(&cluster, &ch, args.idle_tables)?;
    }
    if let Some(changes) = args.catch_up {
        let fig = catch_up::run(&args, changes, &cluster, &mut daemon, &mut ch, &state_dir)?;
        let checks = verify_tables(&cluster, &ch)?;
        daemon.stop_run()?;
        let versions = Versions::after_run(&cluster, ch_version, machine);
        return catch_up::report(&args, &versions, &fig, &checks);
    }
    let engine_pid = find_engine_pid(ch.port());

    let probes = Probes::default();
    let stop_watch = AtomicBool::new(false);
    let poll = Duration::from_millis(args.poll_ms);
    let fig = std::thread::scope(|s| -> Result<Figures> {
        let watcher = s.spawn(|| watch(&ch, &probes, &stop_watch, poll));
        let r = measure(
            &args,
            &cluster,
            &mut daemon,
            &probes,
            &state_dir,
            engine_pid,
        );
        stop_watch.store(true, Ordering::Relaxed);
        let polls = watcher
            .join()
            .map_err(|_| anyhow::anyhow!("the watcher thread panicked"))?;
        let mut fig = r?;
        fig.polls = polls;
        Ok(fig)
    })?;
    let checks = verify(&cluster, &ch, &probes, &fig)?;
    let engine = EngineLog::read(&ch.log_path(), clock, &fig);
    daemon.stop_run()?;
    let versions = Versions::after_run(&cluster, ch_version, machine);
    report(&args, &versions, &fig, &probes, &engine, &checks)
}

/// Versions and machine load, for the report.
#[derive(Debug)]
struct Versions {
    postgres: String,
    clickhouse: String,
    machine: MachineContext,
}

impl Versions {
    /// Once the run is over (the machine's load after it).
    fn after_run(cluster: &Cluster, clickhouse: String, mut machine: MachineContext) -> Versions {
        machine.after_run();
        Versions {
            postgres: cluster.install().version().to_owned(),
            clickhouse,
            machine,
        }
    }
}

/// The name of idle table `i` (`--idle-tables`).
fn idle_table(i: u32) -> String {
    format!("idle_{i:04}")
}

/// The same name, server-side, for the set-up's loops.
const IDLE_TABLE_FN: &str = "create or replace function idle_table(i int) returns text language sql immutable \
     as $$ select 'idle_' || lpad(i::text, 4, '0') $$";

/// The idle tables `1..=n` in runs of 250, a transaction each (one
/// transaction for all would outgrow the source's lock table).
fn idle_ranges(n: u32) -> impl Iterator<Item = (u32, u32)> {
    (1..=n)
        .step_by(250)
        .map(move |from| (from, (from + 249).min(n)))
}

/// One row into each idle table, 250 tables per transaction, and waits
/// until ClickHouse has every one.
fn idle_tables_first_rows(cluster: &Cluster, ch: &ClickHouseEngine, n: u32) -> Result<()> {
    let started = Instant::now();
    for (from, to) in idle_ranges(n) {
        cluster.psql(&format!(
            "do $$ begin for i in {from}..{to} loop \
             execute format('insert into %I values (1, ''x'')', idle_table(i)); \
             end loop; end $$"
        ))?;
    }
    let want = n.to_string();
    wait_until(STREAM_TIMEOUT, "the idle tables' first rows", || {
        let got = ch.query("SELECT count() FROM merge('app', '^idle_')")?;
        Ok(got.trim() == want)
    })?;
    eprintln!(
        "{n} idle tables in scope: one row each, visible in ClickHouse {:.1} s after the commit",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

const SCHEMA: &str = "
create table accounts (aid int primary key, bid int not null, abalance int not null, filler char(84));
create table history (hid bigint primary key, tid int, bid int, aid int, delta int, mtime timestamp, filler char(22));
create table probe (id bigint primary key, sent timestamptz not null);
";

/// The pgbench script: 2 updates (ascending keys), 1 insert, 1 delete.
/// `:n` is a per-client counter (pgbench variables live as long as the
/// client), started by `-D n=0`.
const PGBENCH_SCRIPT: &str = "\\set aid1 random(1, :naccounts - 1000)
\\set aid2 :aid1 + random(1, 1000)
\\set delta random(-5000, 5000)
\\set n :n + 1
\\set hid :client_id * 1000000000 + :n
BEGIN;
UPDATE accounts SET abalance = abalance + :delta WHERE aid = :aid1;
UPDATE accounts SET abalance = abalance - :delta WHERE aid = :aid2;
INSERT INTO history (hid, tid, bid, aid, delta, mtime) VALUES (:hid, 1, 1, :aid1, :delta, CURRENT_TIMESTAMP);
DELETE FROM history WHERE hid = :hid - 1000;
END;
";

// ---------------------------------------------------------------- measuring

/// Everything measured, in the order it happened.
#[derive(Debug, Default, serde::Serialize)]
struct Figures {
    load_secs: f64,
    pgbench_transactions: Option<u64>,
    pgbench_tps: Option<f64>,
    pgbench_latency_ms: Option<f64>,
    pgbench_failed: Option<u64>,
    /// `n_tup_ins + n_tup_upd + n_tup_del` over the load, per table.
    source_changes: BTreeMap<String, u64>,
    /// Rows walshadow wrote over the load and catch-up, per table.
    walshadow_rows: BTreeMap<String, u64>,
    /// Rows walshadow had written when the load stopped (load tables).
    rows_applied_during_load: u64,
    catch_up_secs: f64,
    /// `n_tup_*` equal walshadow's rows for the load tables.
    counts_agree: bool,
    periodic_probes: Vec<i64>,
    fences: BTreeSet<i64>,
    final_fence: i64,
    /// Seconds from load start to the final fence's visibility.
    total_secs: f64,
    t0_unix_us: i64,
    /// (seconds since load start, walshadow VmRSS MB, rows written by then).
    timeline: Vec<(f64, f64, u64)>,
    peak_rss_mb: f64,
    cpu: CpuSplit,
    walshadow_cpu_total_secs: f64,
    #[serde(skip)]
    polls: PollStats,
}

fn measure(
    args: &Args,
    cluster: &Cluster,
    daemon: &mut Walshadow,
    probes: &Probes,
    state_dir: &Path,
    engine_pid: Option<u32>,
) -> Result<Figures> {
    let mut fig = Figures::default();
    let next_id = AtomicI64::new(1);
    let fence = |fig: &mut Figures, what: &str, daemon: &mut Walshadow| -> Result<i64> {
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        cluster.psql(&format!(
            "insert into public.probe values ({id}, clock_timestamp())"
        ))?;
        fig.fences.insert(id);
        wait_until(STREAM_TIMEOUT, what, || {
            daemon.check_running()?;
            Ok(probes.max_seen.load(Ordering::Relaxed) >= id)
        })?;
        Ok(id)
    };

    eprintln!("waiting for walshadow to stream …");
    fence(&mut fig, "walshadow to stream the first probe", daemon)?;
    eprintln!("preloading {} accounts through walshadow …", args.accounts);
    cluster.psql(&format!(
        "insert into accounts select g, 1 + (g - 1) / 100000, 0, '' from generate_series(1, {}) g;
         vacuum analyze accounts",
        args.accounts
    ))?;
    fence(&mut fig, "walshadow to stream the preload", daemon)?;
    let rows0 = wait_progress(cluster, state_dir, daemon)?;
    let stats0 = table_changes(cluster)?;
    let cpu0 = CpuSplit::now(cluster, daemon, engine_pid);

    let script = pgbench_script()?;
    let mut cmd = pgbench_command(args, cluster, &script, &["-T", &args.seconds.to_string()]);

    eprintln!(
        "load: {} s from {} clients{} …",
        args.seconds,
        args.clients,
        args.rate
            .map_or_else(String::new, |r| format!(" at {r} tx/s"))
    );
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let t0_unix = unix_us();
    fig.t0_unix_us = t0_unix;
    let (pgbench, periodic, timeline) = std::thread::scope(|s| -> Result<_> {
        let prober = s.spawn(|| {
            probe_loop(
                cluster,
                &next_id,
                Duration::from_millis(args.probe_ms),
                &stop,
            )
        });
        let sampler = s.spawn(|| sample_loop(daemon.run_pid().unwrap_or(0), state_dir, t0, &stop));
        let r = cmd.output().context("running pgbench");
        stop.store(true, Ordering::Relaxed);
        let periodic = prober
            .join()
            .map_err(|_| anyhow::anyhow!("the prober thread panicked"))?;
        let timeline = sampler
            .join()
            .map_err(|_| anyhow::anyhow!("the sampler thread panicked"))?;
        Ok((r?, periodic?, timeline))
    })?;
    fig.load_secs = t0.elapsed().as_secs_f64();
    let t_end_unix = unix_us();
    let _ = std::fs::remove_file(&script);
    let pg_out = String::from_utf8_lossy(&pgbench.stdout).into_owned();
    if !pgbench.status.success() {
        bail!(
            "pgbench failed ({}):\n{pg_out}\n{}",
            pgbench.status,
            String::from_utf8_lossy(&pgbench.stderr)
        );
    }
    eprint!("{pg_out}");
    fig.pgbench_transactions = pgbench_value(&pg_out, "number of transactions actually processed:")
        .and_then(|v| v.split('/').next()?.parse().ok());
    fig.pgbench_failed =
        pgbench_value(&pg_out, "number of failed transactions:").and_then(|v| v.parse().ok());
    fig.pgbench_tps = pgbench_value(&pg_out, "tps =").and_then(|v| v.parse().ok());
    fig.pgbench_latency_ms =
        pgbench_value(&pg_out, "latency average =").and_then(|v| v.parse().ok());
    fig.periodic_probes = periodic;
    fig.rows_applied_during_load = timeline
        .last()
        .map_or(0, |&(_, _, rows)| rows)
        .saturating_sub(load_rows(&rows0));
    fig.timeline = timeline
        .into_iter()
        .map(|(t, rss, rows)| (t, rss, rows.saturating_sub(load_rows(&rows0))))
        .collect();

    eprintln!("load stopped; waiting for walshadow to catch up …");
    daemon.check_running()?;
    let last = fence(&mut fig, "walshadow to catch up after the load", daemon)?;
    fig.final_fence = last;
    let seen = probes
        .get(last)
        .context("the final fence was not recorded")?;
    fig.catch_up_secs = (seen.visible_us - t_end_unix) as f64 / 1e6;
    fig.total_secs = (seen.visible_us - t0_unix) as f64 / 1e6;
    let cpu1 = CpuSplit::now(cluster, daemon, engine_pid);
    fig.peak_rss_mb =
        proc_status_kb(daemon.run_pid().unwrap_or(0), "VmHWM").unwrap_or(0) as f64 / 1024.0;
    fig.walshadow_cpu_total_secs = cpu1.walshadow;
    fig.cpu = cpu1.since(&cpu0);

    let rows1 = wait_progress(cluster, state_dir, daemon)?;
    fig.walshadow_rows = rows1
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.saturating_sub(rows0.get(k).copied().unwrap_or(0)),
            )
        })
        .collect();
    // The clients' backends flush their statistics as they exit, which may
    // trail pgbench's own exit a little.
    let mut changes = BTreeMap::new();
    let agree = wait_until(
        Duration::from_secs(10),
        "pg_stat_user_tables to count what walshadow wrote",
        || {
            let now = table_changes(cluster)?;
            changes = now
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.saturating_sub(stats0.get(k).copied().unwrap_or(0)),
                    )
                })
                .collect();
            Ok(LOAD_TABLES
                .iter()
                .all(|t| changes.get(*t) == fig.walshadow_rows.get(*t)))
        },
    );
    fig.counts_agree = agree.is_ok();
    fig.source_changes = changes;
    Ok(fig)
}

/// The load's script, written to a temporary file.
fn pgbench_script() -> Result<PathBuf> {
    let script = std::env::temp_dir().join(format!("e2e-bench-{}.sql", std::process::id()));
    std::fs::write(&script, PGBENCH_SCRIPT)?;
    Ok(script)
}

/// pgbench running `script` from `--clients` clients (at `--rate`, if
/// given) for as long as `how` says (`-T secs` or `-t transactions`).
fn pgbench_command(
    args: &Args,
    cluster: &Cluster,
    script: &Path,
    how: &[&str],
) -> std::process::Command {
    let mut cmd = cluster.pg_command("pgbench");
    cmd.args(["-n", "-h"])
        .arg(cluster.socket_dir())
        .args(["-p", &cluster.port().to_string(), "-U", cluster.superuser()])
        .args([
            "-c",
            &args.clients.to_string(),
            "-j",
            &args.clients.to_string(),
        ])
        .args(how)
        .args(["-D", "n=0", "-D", &format!("naccounts={}", args.accounts)])
        .arg("-f")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(rate) = args.rate {
        cmd.args(["-R", &rate.to_string()]);
    }
    cmd.arg("postgres");
    cmd
}

fn load_rows(rows: &BTreeMap<String, u64>) -> u64 {
    LOAD_TABLES
        .iter()
        .map(|t| rows.get(*t).copied().unwrap_or(0))
        .sum()
}

/// Waits until walshadow's progress file covers everything the source has
/// flushed now; returns its per-table row counters.
fn wait_progress(
    cluster: &Cluster,
    state_dir: &Path,
    daemon: &mut Walshadow,
) -> Result<BTreeMap<String, u64>> {
    daemon.wait_applied(cluster, STREAM_TIMEOUT)?;
    let p = Progress::read(state_dir)?.context("no progress file")?;
    Ok(p.tables.iter().map(|(k, t)| (k.clone(), t.rows)).collect())
}

/// `n_tup_ins + n_tup_upd + n_tup_del` per pinned table.
fn table_changes(cluster: &Cluster) -> Result<BTreeMap<String, u64>> {
    let out = cluster.psql(
        "select schemaname || '.' || relname, n_tup_ins + n_tup_upd + n_tup_del
           from pg_stat_user_tables where relname in ('accounts', 'history', 'probe')",
    )?;
    let mut m = BTreeMap::new();
    for line in out.lines() {
        let (k, v) = line
            .split_once('|')
            .context("bad pg_stat_user_tables row")?;
        m.insert(k.to_owned(), v.parse()?);
    }
    Ok(m)
}

/// The value after `key` on the pgbench summary line that starts with it.
fn pgbench_value<'a>(out: &'a str, key: &str) -> Option<&'a str> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
}

// ---------------------------------------------------------------- probes

/// A probe row: its `sent` and when the watcher first saw it, µs since the epoch.
#[derive(Debug, Clone, Copy)]
struct Seen {
    sent_us: i64,
    visible_us: i64,
}

#[derive(Debug, Default)]
struct Probes {
    seen: Mutex<BTreeMap<i64, Seen>>,
    /// Every id up to here has been seen.
    max_seen: AtomicI64,
}

impl Probes {
    fn get(&self, id: i64) -> Option<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .copied()
    }
}

#[derive(Debug, Default, Clone, serde::Serialize)]
struct PollStats {
    polls: u64,
    failed: u64,
    mean_rtt_ms: f64,
    max_rtt_ms: f64,
    last_error: Option<String>,
}

/// Polls the probe table every `interval` until `stop`: rows above the
/// contiguous watermark, each recorded at the reply of the first poll
/// that returns it. Errors (before the table exists) are counted.
fn watch(
    ch: &ClickHouseEngine,
    probes: &Probes,
    stop: &AtomicBool,
    interval: Duration,
) -> PollStats {
    let mut st = PollStats::default();
    let mut rtt_sum = 0.0;
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let low = probes.max_seen.load(Ordering::Relaxed);
        let t = Instant::now();
        let r = ch.query(&format!(
            "SELECT id, toUnixTimestamp64Micro(sent) FROM app.probe WHERE id > {low} ORDER BY id FORMAT TabSeparated"
        ));
        let visible_us = unix_us();
        let rtt = t.elapsed().as_secs_f64() * 1e3;
        st.polls += 1;
        match r {
            Ok(text) => {
                rtt_sum += rtt;
                st.max_rtt_ms = st.max_rtt_ms.max(rtt);
                let mut seen = probes.seen.lock().unwrap_or_else(|e| e.into_inner());
                for line in text.lines() {
                    let mut f = line.split('\t');
                    let id = f.next().and_then(|v| v.parse::<i64>().ok());
                    let sent = f.next().and_then(|v| v.parse::<i64>().ok());
                    if let (Some(id), Some(sent_us)) = (id, sent) {
                        seen.entry(id).or_insert(Seen {
                            sent_us,
                            visible_us,
                        });
                    }
                }
                let mut w = low;
                while seen.contains_key(&(w + 1)) {
                    w += 1;
                }
                probes.max_seen.store(w, Ordering::Relaxed);
            }
            Err(e) => {
                st.failed += 1;
                st.last_error = Some(format!("{e:#}"));
            }
        }
        next += interval;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    let ok = st.polls - st.failed;
    st.mean_rtt_ms = if ok > 0 { rtt_sum / ok as f64 } else { 0.0 };
    st
}

/// Inserts a probe row every `interval` (each its own transaction, on one
/// connection) until `stop`; returns the ids inserted.
fn probe_loop(
    cluster: &Cluster,
    next_id: &AtomicI64,
    interval: Duration,
    stop: &AtomicBool,
) -> Result<Vec<i64>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut sql = rt.block_on(sql_session(cluster, "e2e-bench-probe"))?;
    let mut ids = Vec::new();
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        rt.block_on(sql.simple_query(&format!(
            "insert into public.probe values ({id}, clock_timestamp())"
        )))
        .with_context(|| format!("inserting probe {id}"))?;
        ids.push(id);
        next += interval;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    rt.block_on(sql.close());
    Ok(ids)
}

/// Every second until `stop`: walshadow's RSS and the rows of the load
/// tables its progress file reports written.
fn sample_loop(pid: u32, state_dir: &Path, t0: Instant, stop: &AtomicBool) -> Vec<(f64, f64, u64)> {
    let mut out = Vec::new();
    let mut next = t0;
    loop {
        let rss = proc_status_kb(pid, "VmRSS").unwrap_or(0) as f64 / 1024.0;
        let rows = Progress::read(state_dir).ok().flatten().map_or(0, |p| {
            let m = p.tables.iter().map(|(k, t)| (k.clone(), t.rows)).collect();
            load_rows(&m)
        });
        out.push((t0.elapsed().as_secs_f64(), rss, rows));
        if stop.load(Ordering::Relaxed) {
            return out;
        }
        next += Duration::from_secs(1);
        // Short naps, so the last sample follows the load's end closely.
        while Instant::now() < next && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

// ---------------------------------------------------------------- the oracle

/// One table's count and checksums on both sides.
#[derive(Debug, serde::Serialize)]
struct Check {
    table: &'static str,
    source: String,
    clickhouse: String,
}

/// The source tables against their ClickHouse tables `FINAL`: row count
/// and key-weighted sums must be equal; every probe must have been seen.
fn verify(
    cluster: &Cluster,
    ch: &ClickHouseEngine,
    probes: &Probes,
    fig: &Figures,
) -> Result<Vec<Check>> {
    let checks = verify_tables(cluster, ch)?;
    let seen = probes.seen.lock().unwrap_or_else(|e| e.into_inner());
    let missing: Vec<i64> = fig
        .periodic_probes
        .iter()
        .chain(&fig.fences)
        .filter(|id| !seen.contains_key(id))
        .copied()
        .collect();
    ensure!(
        missing.is_empty(),
        "probes never seen by the watcher: {missing:?}"
    );
    Ok(checks)
}

/// Each table's count and key-weighted sums, source against ClickHouse
/// `FINAL`: equal, or an error.
fn verify_tables(cluster: &Cluster, ch: &ClickHouseEngine) -> Result<Vec<Check>> {
    let pairs: [(&str, &str, &str); 3] = [
        (
            "accounts",
            "select count(*) || ' ' || sum(aid) || ' ' || sum(abalance) || ' ' || sum(abalance::numeric * aid) from accounts",
            "SELECT concat(toString(count()), ' ', toString(sum(aid)), ' ', toString(sum(abalance)), ' ', toString(sum(toInt128(abalance) * aid))) FROM app.accounts FINAL WHERE _is_deleted = 0",
        ),
        (
            "history",
            "select count(*) || ' ' || sum(hid) || ' ' || sum(delta) || ' ' || sum(aid::numeric * delta) from history",
            "SELECT concat(toString(count()), ' ', toString(sum(hid)), ' ', toString(sum(delta)), ' ', toString(sum(toInt128(aid) * delta))) FROM app.history FINAL WHERE _is_deleted = 0",
        ),
        (
            "probe",
            "select count(*) || ' ' || sum(id) || ' ' || sum((extract(epoch from sent) * 1000000)::bigint) from probe",
            "SELECT concat(toString(count()), ' ', toString(sum(id)), ' ', toString(sum(toInt128(toUnixTimestamp64Micro(sent))))) FROM app.probe FINAL WHERE _is_deleted = 0",
        ),
    ];
    let mut checks = Vec::new();
    for (table, pg, chq) in pairs {
        let source = cluster.query_one(pg)?;
        let clickhouse = ch.query(chq)?.trim().to_owned();
        let c = Check {
            table,
            source,
            clickhouse,
        };
        eprintln!(
            "verify {table}: source {} | ClickHouse FINAL {}",
            c.source, c.clickhouse
        );
        ensure!(
            c.source == c.clickhouse,
            "MISMATCH in {table}: source (count, sums) {} but ClickHouse FINAL {}",
            c.source,
            c.clickhouse
        );
        checks.push(c);
    }
    Ok(checks)
}

// ---------------------------------------------------------------- the engine's log

/// The offset of the engine's log clock (local time, written as
/// `YYYY-MM-DD HH:MM:SS.mmm`) from UTC, found by a marked query.
#[derive(Debug, Clone, Copy)]
struct EngineClock {
    offset_us: i64,
}

impl EngineClock {
    fn calibrate(ch: &ClickHouseEngine) -> Result<EngineClock> {
        let before = unix_us();
        ch.query("SELECT 'e2e-bench-clock'")?;
        let after = unix_us();
        let log = std::fs::read_to_string(ch.log_path())?;
        let stamp = log
            .lines()
            .rev()
            .find(|l| l.contains("e2e-bench-clock"))
            .and_then(engine_log::log_stamp_us)
            .context("the engine's log has no line for the clock query")?;
        // Time zones are whole quarter hours.
        let quarter = 900_000_000;
        let offset_us = ((before + after) / 2 - stamp + quarter / 2).div_euclid(quarter) * quarter;
        Ok(EngineClock { offset_us })
    }
}

/// What the engine's log says: when each probe row's INSERT finished (the
/// line is written after chDB has taken the rows, before the reply goes
/// out), and walshadow's INSERTs during the load.
#[derive(Debug, Default, serde::Serialize)]
struct EngineLog {
    /// Finish time of the INSERT that carried probe `i + 1`, µs; empty when
    /// the log's probe rows do not line up with the ids.
    #[serde(skip)]
    probe_visible_us: Vec<i64>,
    /// walshadow's INSERTs from the load's start until caught up.
    inserts: usize,
    insert_rows: u64,
    /// Engine-side time of each, ms (includes waiting for the engine's
    /// one-query-at-a-time lock).
    insert_p50_ms: f64,
    insert_p95_ms: f64,
    insert_max_ms: f64,
    /// Sum of insert times over the span: how busy the engine was with
    /// walshadow's inserts (lock waits included).
    insert_busy_share: f64,
    /// The same for the watcher's polls.
    poll_busy_share: f64,
}

impl EngineLog {
    fn read(path: &Path, clock: EngineClock, fig: &Figures) -> EngineLog {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let span = (
            fig.t0_unix_us,
            fig.t0_unix_us + (fig.total_secs * 1e6) as i64,
        );
        let mut out = EngineLog::default();
        let mut probe_rows = Vec::new();
        let mut times = Vec::new();
        let mut poll_ms = 0.0;
        for req in engine_log::posts_ok(&text) {
            let at = req.logged_us + clock.offset_us;
            let (ms, what) = (req.ms, req.what);
            let in_span = at >= span.0 && at <= span.1;
            if what.starts_with("INSERT INTO ") {
                let rows = req.rows_written();
                if what.starts_with("INSERT INTO `app`.`probe`") {
                    probe_rows.extend(std::iter::repeat_n(at, rows as usize));
                }
                if in_span {
                    out.inserts += 1;
                    out.insert_rows += rows;
                    times.push(ms);
                }
            } else if in_span && what.contains("FROM app.probe WHERE id >") {
                poll_ms += ms;
            }
        }
        if probe_rows.len() as i64 == fig.final_fence {
            out.probe_visible_us = probe_rows;
        }
        times.sort_by(f64::total_cmp);
        let pct = |p: f64| {
            let rank = ((p / 100.0) * times.len() as f64).ceil() as usize;
            times
                .get(rank.clamp(1, times.len().max(1)) - 1)
                .copied()
                .unwrap_or(0.0)
        };
        out.insert_p50_ms = pct(50.0);
        out.insert_p95_ms = pct(95.0);
        out.insert_max_ms = times.last().copied().unwrap_or(0.0);
        let span_ms = (span.1 - span.0) as f64 / 1e3;
        if span_ms > 0.0 {
            out.insert_busy_share = times.iter().sum::<f64>() / span_ms;
            out.poll_busy_share = poll_ms / span_ms;
        }
        out
    }

    fn probe_visible_us(&self, id: i64) -> Option<i64> {
        let i = usize::try_from(id.checked_sub(1)?).ok()?;
        self.probe_visible_us.get(i).copied()
    }
}

// ---------------------------------------------------------------- report

#[derive(Debug, Clone, serde::Serialize)]
struct LagStats {
    probes: usize,
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    mean_ms: f64,
}

fn lag_stats(mut v: Vec<f64>) -> Option<LagStats> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    // Nearest rank.
    let pct = |p: f64| {
        let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
        v.get(rank.clamp(1, v.len()) - 1)
            .copied()
            .unwrap_or(f64::NAN)
    };
    Some(LagStats {
        probes: v.len(),
        p50_ms: pct(50.0),
        p95_ms: pct(95.0),
        p99_ms: pct(99.0),
        max_ms: v.last().copied().unwrap_or(f64::NAN),
        mean_ms: v.iter().sum::<f64>() / v.len() as f64,
    })
}

#[derive(Debug, serde::Serialize)]
struct Window {
    from_secs: f64,
    to_secs: f64,
    lag: Option<LagStats>,
}

/// Keeping up: a pipeline slower than the load builds a backlog, so its
/// lag climbs through the run (and once the load stops and frees the CPU
/// it may still drain quickly: the catch-up alone does not tell). So: the
/// median lag of the load's last window and the catch-up after it are both
/// within `batch_ms` plus this long.
const KEPT_UP_SECS: f64 = 1.0;

fn report(
    args: &Args,
    v: &Versions,
    fig: &Figures,
    probes: &Probes,
    engine: &EngineLog,
    checks: &[Check],
) -> Result<()> {
    let (version, ch_version) = (&v.postgres, &v.clickhouse);
    // (seconds since the load started, lag ms) per periodic probe.
    let lags: Vec<(f64, f64)> = fig
        .periodic_probes
        .iter()
        .filter_map(|&id| probes.get(id))
        .map(|s| {
            (
                (s.sent_us - fig.t0_unix_us) as f64 / 1e6,
                (s.visible_us - s.sent_us) as f64 / 1e3,
            )
        })
        .collect();
    let lag = lag_stats(lags.iter().map(|&(_, l)| l).collect());
    // The same probes, visible as of the engine's log (no polling error).
    let engine_lag = lag_stats(
        fig.periodic_probes
            .iter()
            .filter_map(|&id| {
                let sent = probes.get(id)?.sent_us;
                Some((engine.probe_visible_us(id)? - sent) as f64 / 1e3)
            })
            .collect(),
    );
    // Windows of about 10 s (the last one takes the remainder).
    let n_windows = ((fig.load_secs / 10.0).floor() as usize).max(1);
    let width = fig.load_secs / n_windows as f64;
    let windows: Vec<Window> = (0..n_windows)
        .map(|i| {
            let a = i as f64 * width;
            let b = if i + 1 == n_windows {
                f64::INFINITY
            } else {
                a + width
            };
            Window {
                from_secs: a,
                to_secs: b.min(fig.load_secs),
                lag: lag_stats(
                    lags.iter()
                        .filter(|&&(t, _)| t >= a && t < b)
                        .map(|&(_, l)| l)
                        .collect(),
                ),
            }
        })
        .collect();
    let source_changes: u64 = LOAD_TABLES
        .iter()
        .map(|t| fig.source_changes.get(*t).copied().unwrap_or(0))
        .sum();
    let applied: u64 = LOAD_TABLES
        .iter()
        .map(|t| fig.walshadow_rows.get(*t).copied().unwrap_or(0))
        .sum();
    let offered_rate = source_changes as f64 / fig.load_secs;
    let applied_during_rate = fig.rows_applied_during_load as f64 / fig.load_secs;
    let applied_total_rate = applied as f64 / fig.total_secs;
    let last_window_p50_ms = windows
        .last()
        .and_then(|w| w.lag.as_ref())
        .map_or(f64::INFINITY, |l| l.p50_ms);
    let bound_secs = KEPT_UP_SECS + args.batch_ms as f64 / 1e3;
    let kept_up = fig.catch_up_secs <= bound_secs && last_window_p50_ms <= bound_secs * 1e3;
    let cpu_per_m = fig.cpu.walshadow / (applied as f64 / 1e6);

    let cores = v.machine.cores;
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0} ms"));
    let met = |ok: bool| if ok { "met" } else { "MISSED" };

    println!(
        "End to end, PostgreSQL {version} -> walshadow -> ClickHouse engine {ch_version}: {} s of load from {} pgbench clients ({}), {} tables in scope, batch_ms {}, idle_flush_ms {}, insert_concurrency {}",
        args.seconds,
        args.clients,
        args.rate.map_or_else(
            || "as fast as they go".to_owned(),
            |r| format!("-R {r} tx/s")
        ),
        TABLES.len() as u32 + args.idle_tables,
        args.batch_ms,
        args.idle_flush_ms
            .map_or_else(|| "default".to_owned(), |ms| ms.to_string()),
        args.insert_concurrency
            .map_or_else(|| "default".to_owned(), |n| n.to_string())
    );
    println!(
        "{}",
        v.machine.line(", shared by the source PostgreSQL, pgbench, the ClickHouse engine, walshadow and its shadow PostgreSQL")
    );
    let row = |k: &str, v: String| println!("  {k:<44} {v}");
    row(
        "pgbench transactions",
        format!(
            "{} ({} tps, {} ms average latency, {} failed)",
            fig.pgbench_transactions
                .map_or_else(|| "?".into(), |v| v.to_string()),
            fig.pgbench_tps
                .map_or_else(|| "?".into(), |v| format!("{v:.0}")),
            fig.pgbench_latency_ms
                .map_or_else(|| "?".into(), |v| format!("{v:.2}")),
            fig.pgbench_failed
                .map_or_else(|| "?".into(), |v| v.to_string()),
        ),
    );
    row(
        "row changes committed at the source",
        format!(
            "{source_changes} in {:.1} s = {offered_rate:.0}/s (+ {} probe rows)",
            fig.load_secs,
            fig.periodic_probes.len()
        ),
    );
    row(
        "rows applied in ClickHouse during the load",
        format!(
            "{} = {applied_during_rate:.0}/s ({:.0}% of offered)",
            fig.rows_applied_during_load,
            100.0 * applied_during_rate / offered_rate
        ),
    );
    row(
        "rows applied, load start to caught up",
        format!(
            "{applied} in {:.1} s = {applied_total_rate:.0}/s; equals the source's count: {}",
            fig.total_secs,
            if fig.counts_agree { "yes" } else { "NO" }
        ),
    );
    if let Some(l) = &lag {
        row(
            &format!("commit-to-visible lag ({} probes)", l.probes),
            format!(
                "p50 {}  p95 {}  p99 {}  max {}  mean {}",
                ms(Some(l.p50_ms)),
                ms(Some(l.p95_ms)),
                ms(Some(l.p99_ms)),
                ms(Some(l.max_ms)),
                ms(Some(l.mean_ms))
            ),
        );
    }
    match &engine_lag {
        Some(l) => row(
            "  the same, insert done per the engine's log",
            format!(
                "p50 {}  p95 {}  p99 {}  max {}  mean {}",
                ms(Some(l.p50_ms)),
                ms(Some(l.p95_ms)),
                ms(Some(l.p99_ms)),
                ms(Some(l.max_ms)),
                ms(Some(l.mean_ms))
            ),
        ),
        None => row(
            "  the same, insert done per the engine's log",
            "- (the log's probe rows do not line up with the probe ids)".into(),
        ),
    }
    let wline: Vec<String> = windows
        .iter()
        .map(|w| {
            format!(
                "{:.0}-{:.0}s {}/{}",
                w.from_secs,
                w.to_secs,
                ms(w.lag.as_ref().map(|l| l.p50_ms)).trim_end_matches(" ms"),
                ms(w.lag.as_ref().map(|l| l.p95_ms)).trim_end_matches(" ms"),
            )
        })
        .collect();
    row("lag p50/p95 ms per 10 s of load", wline.join("  "));
    row(
        "catch-up after the load stopped",
        format!(
            "{:.3} s; kept up (median lag of the last window and catch-up both within batch_ms + {KEPT_UP_SECS} s): {}",
            fig.catch_up_secs,
            if kept_up { "yes" } else { "NO" }
        ),
    );
    row(
        "walshadow peak RSS (VmHWM)",
        format!("{:.1} MB", fig.peak_rss_mb),
    );
    row(
        "walshadow CPU, load start to caught up",
        format!(
            "{:.2} s = {:.1}% of one core, {cpu_per_m:.2} s per million rows ({:.2} s since start)",
            fig.cpu.walshadow,
            100.0 * fig.cpu.walshadow / fig.total_secs,
            fig.walshadow_cpu_total_secs
        ),
    );
    row(
        "CPU s, same span (2 cores = 2 s per s)",
        format!(
            "source PG {:.1}, pgbench+psql {:.1}, ClickHouse engine {}, walshadow {:.1}, shadow PG {:.1} (of {:.1} available)",
            fig.cpu.source_postgres,
            fig.cpu.pgbench_and_psql,
            fig.cpu
                .clickhouse_engine
                .map_or_else(|| "?".into(), |v| format!("{v:.1}")),
            fig.cpu.walshadow,
            fig.cpu.shadow_postgres,
            cores as f64 * fig.total_secs
        ),
    );
    row(
        "watcher polls",
        format!(
            "{} every {} ms, mean round trip {:.1} ms (max {:.1}); lag is late by at most one interval plus one round trip",
            fig.polls.polls, args.poll_ms, fig.polls.mean_rtt_ms, fig.polls.max_rtt_ms
        ),
    );
    row(
        "engine: walshadow INSERTs, load to caught up",
        format!(
            "{} ({:.1}/s, {:.0} rows each), p50 {:.1} ms p95 {:.1} ms max {:.1} ms; engine busy with inserts {:.0}%, with the watcher's polls {:.0}%",
            engine.inserts,
            engine.inserts as f64 / fig.total_secs,
            engine.insert_rows as f64 / engine.inserts.max(1) as f64,
            engine.insert_p50_ms,
            engine.insert_p95_ms,
            engine.insert_max_ms,
            100.0 * engine.insert_busy_share,
            100.0 * engine.poll_busy_share
        ),
    );
    for c in checks {
        row(
            &format!("verify {} (count, sums)", c.table),
            format!("source = ClickHouse FINAL: {}", c.source),
        );
    }
    // The lag targets are judged by the engine's log (the issue's
    // definition: no polling error); the watcher's figure is only a
    // fallback when the log has none.
    if let Some(l) = engine_lag.as_ref().or(lag.as_ref()) {
        println!(
            "targets: lag p95 < 100 ms {}, p99 < 250 ms {} (by {}), peak RSS < 512 MB {}, keeps up {}",
            met(l.p95_ms < 100.0),
            met(l.p99_ms < 250.0),
            if engine_lag.is_some() {
                "the engine's log"
            } else {
                "the watcher"
            },
            met(fig.peak_rss_mb < 512.0),
            met(kept_up)
        );
    }

    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "postgres": version,
            "clickhouse": ch_version,
            "settings": {
                "seconds": args.seconds,
                "clients": args.clients,
                "rate": args.rate,
                "batch_ms": args.batch_ms,
                "idle_flush_ms": args.idle_flush_ms,
                "insert_concurrency": args.insert_concurrency,
                "accounts": args.accounts,
                "probe_ms": args.probe_ms,
                "poll_ms": args.poll_ms,
                "changes_per_transaction": CHANGES_PER_TXN,
            },
            "source_changes": source_changes,
            "source_changes_per_sec": offered_rate,
            "rows_applied_during_load_per_sec": applied_during_rate,
            "rows_applied_total_per_sec": applied_total_rate,
            "kept_up": kept_up,
            "lag": lag,
            "lag_engine_log": engine_lag,
            "engine": engine,
            "lag_windows": windows,
            "walshadow_cpu_secs_per_million_rows": cpu_per_m,
            "watcher": fig.polls,
            "verify": checks,
            "figures": fig,
        });
        v.machine.write_json(path, "e2e", doc)?;
    }
    Ok(())
}
