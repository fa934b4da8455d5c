//! Initial load: `initial_load = 'copy'`, `'base_backup'` and
//! `'object_store'` side by side on the same table in one run — how fast
//! walshadow loads a large existing table into ClickHouse each way, and
//! what each costs the source.
//!
//! ```text
//! cargo build --release -p walshadow -p walshadow-bench
//! target/release/load-bench --major 15 --gb 2 --modes copy,base_backup,object_store --workers 1,2
//! ```
//!
//! On a throwaway source of `--major`:
//!
//! ```text
//!  items: about --gb GB of heap (bigint key, int, numeric, timestamptz, text of
//!         100–200 bytes, some NULLs), filled by INSERT … SELECT generate_series
//!         before walshadow exists; then primary key, VACUUM ANALYZE, CHECKPOINT
//!  per load (copy once per worker count W, base_backup once), from scratch
//!  (own slot, shadow, state, ClickHouse engine):
//!    walshadow init ─▶ walshadow run ─▶ caught up
//!    t0  INSERT INTO walshadow.tables VALUES ('public', 'items', true, MODE) committed
//!      copy:        walshadow decodes the opt-in at S, takes a snapshot, W
//!                   sessions 'walshadow load': COPY … TO STDOUT (FORMAT binary)
//!                   by block range ─▶ RowBinary INSERTs into app.items ─▶ marks
//!      base_backup: 1 s coalesce window, a 'walshadow load' SQL session (the
//!                   catalog), a replication connection 'walshadow base_backup'
//!                   (a walsender): BASE_BACKUP (CHECKPOINT 'fast', no WAL) ─▶
//!                   page walk ─▶ app.items__wsstg ─▶ EXCHANGE TABLES ─▶
//!                   copy-back ─▶ drop staging
//!      object_store: (15 only: pgBackRest 2.45) the source archives to a
//!                   pgBackRest repository; a full backup is taken after
//!                   the fill (timed apart: the operator's); after the
//!                   opt-in the bench ends its WAL segment (pg_switch_wal)
//!                   ─▶ walshadow fetches the gap from the archive, walks
//!                   the backup's files ─▶ staging ─▶ swap, as base_backup;
//!                   no session of walshadow's on the source
//!    t1  <state>/backfills.toml: phase = "done"        (polled every 20 ms)
//!    check: count, sums and non-NULL counts of app.items FINAL = the source's
//! ```
//!
//! What is counted where:
//! - the load's time: `t0` (the opt-in's commit answered) to the first
//!   poll of the ledger that shows `phase = "done"`; late by at most one
//!   poll. Split by the ledger's own record: until the entry is `loading`
//!   (copy: walshadow decoded `S`; base_backup: the coalesce window ended
//!   and the attempt started), until its `rows` reach the source's count
//!   (copy: the last insert was answered; base_backup: the walk ended and
//!   staging holds every row), for base_backup until `swap` is recorded
//!   (just before `EXCHANGE TABLES`), and the rest (copy: the last marks,
//!   the sessions end, a `FINAL` count; base_backup: the exchange, the
//!   copy-back, the drop: the publish tail);
//! - MB/s two ways: heap MB (`pg_relation_size`, the main fork) and the
//!   stream walshadow received (copy: the ledger's binary `COPY` bytes;
//!   base_backup: `bytes_streamed` of the `BASE_BACKUP`, every file of the
//!   cluster), both 10^6 bytes;
//! - the source's CPU for the load ([`walshadow_bench::backends`]): the
//!   backends with `application_name = 'walshadow load'` and, for
//!   base_backup, the walsender with `'walshadow base_backup'`; the
//!   checkpointer (base_backup's fast checkpoint is part of its cost) and
//!   the checkpoints requested meanwhile; and the whole source (postmaster,
//!   reaped and live children, checkpointer included; the monitor too);
//! - walshadow's CPU (`utime + stime`) and peak RSS (`VmHWM` of a `run`
//!   started for this load alone), the engine's and the shadow's CPU;
//! - walshadow's INSERTs as the engine's log has them (into `items`, or
//!   into `items__wsstg` for base_backup): how many, their durations, and
//!   the time at least one was in progress (the engine runs one query at a
//!   time, so that share says how close it is to bounding the load);
//! - the ratio of base_backup's source CPU to each copy load's, backends
//!   and whole source, against the target of at most 1/4.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clap::{Parser, ValueEnum};
use walshadow_backfill::ledger::{Ledger, Phase};
use walshadow_bench::backends::{Backends, sample_backends};
use walshadow_bench::daemon::{self, walshadow_binary};
use walshadow_bench::machine::MachineContext;
use walshadow_bench::procfs::{CpuSplit, find_engine_pid, proc_cpu_ns, proc_status_kb};
use walshadow_bench::source::{sql_session, start_source};
use walshadow_bench::{engine_log, run_log};
use walshadow_testkit::pgbackrest::{Repo, STANZA, switch_and_archive};
use walshadow_testkit::{ClickHouseEngine, Cluster, Walshadow, WorkDir, wait_until};
use walshadow_wal_reader::replication::ReplicationClient;

#[derive(Debug, Parser)]
#[command(
    about = "Initial load of a large table, copy (1 and N workers), base_backup and object_store side by side: time from opt-in to done, rows/s, MB/s, source CPU, walshadow RSS"
)]
struct Args {
    /// PostgreSQL major of the throwaway source (15 to 18).
    #[arg(long, default_value_t = 15)]
    major: u32,
    /// Heap size of the table to load, GB (10^9 bytes of `pg_relation_size`).
    #[arg(long, default_value_t = 2.0)]
    gb: f64,
    /// Initial-load modes, in order: copy once per `--workers` count,
    /// base_backup once.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "copy,base_backup"
    )]
    modes: Vec<Mode>,
    /// Worker counts to load with (`[backfill] workers`), one copy load each.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    workers: Vec<usize>,
    /// `[backfill] batch_rows` (walshadow's default when absent).
    #[arg(long)]
    batch_rows: Option<usize>,
    /// `[backfill] chunk_blocks` of the copy loads (walshadow's default when absent).
    #[arg(long)]
    chunk_blocks: Option<u32>,
    /// The walshadow binary; default: `walshadow` next to this program.
    #[arg(long)]
    walshadow: Option<PathBuf>,
    /// Also write the figures as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// An `initial_load` mode the bench runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
enum Mode {
    #[default]
    Copy,
    #[value(name = "base_backup")]
    BaseBackup,
    /// From a pgBackRest backup taken after the fill (PostgreSQL 15: the
    /// pgBackRest here is 2.45) and the WAL its archive holds.
    #[value(name = "object_store")]
    ObjectStore,
}

impl Mode {
    /// The `initial_load` value, as the config table and the ledger spell it.
    fn name(self) -> &'static str {
        match self {
            Mode::Copy => "copy",
            Mode::BaseBackup => "base_backup",
            Mode::ObjectStore => "object_store",
        }
    }

    /// Loads through a page walk and a staging table.
    fn walks(self) -> bool {
        matches!(self, Mode::BaseBackup | Mode::ObjectStore)
    }
}

/// The table and its ledger key.
const TABLE: &str = "items";
const KEY: &str = "public.items";
/// Its staging table in base_backup mode (backfill/src/staging.rs).
const STAGING: &str = "items__wsstg";
/// `application_name`s of the load's sessions (pipeline/src/backfills.rs):
/// copy's leader and workers, base_backup's catalog session, and
/// base_backup's replication connection (a walsender).
const LOAD_APP: &str = "walshadow load";
const BACKUP_APP: &str = "walshadow base_backup";
/// `[backfill] backup_checkpoint` of the base_backup load: a spread
/// checkpoint paces its writes over up to `checkpoint_timeout` × 0.9 (1 h
/// here), so its wait would follow the dirty data, not the load.
const BACKUP_CHECKPOINT: &str = "fast";
/// The issue's target: base_backup's source CPU at most this share of copy's.
const TARGET_RATIO: f64 = 0.25;
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
        !args.modes.is_empty(),
        "--modes takes copy and/or base_backup"
    );
    ensure!(
        !args.workers.is_empty() && args.workers.iter().all(|&w| w > 0),
        "--workers takes worker counts of at least 1"
    );
    let walshadow = walshadow_binary(args.walshadow.as_deref())?;
    let mut loads = Vec::new();
    for &mode in &args.modes {
        match mode {
            Mode::Copy => loads.extend(args.workers.iter().map(|&w| (mode, Some(w)))),
            Mode::BaseBackup | Mode::ObjectStore => loads.push((mode, None)),
        }
    }
    let store = args.modes.contains(&Mode::ObjectStore);
    ensure!(
        !store || args.major == 15,
        "--modes object_store needs --major 15: the pgBackRest here (2.45) predates 16"
    );
    let mut machine = MachineContext::before_run();
    // The repository the source archives to, for object_store.
    let repo = if store {
        Some(Repo::new(&format!("load-bench-pg{}-repo", args.major))?)
    } else {
        None
    };
    let archive_command = repo.as_ref().map(Repo::archive_command);
    let mut conf = vec![("max_wal_size", "8GB"), ("checkpoint_timeout", "1h")];
    if let Some(c) = &archive_command {
        conf.extend([("archive_mode", "on"), ("archive_command", c.as_str())]);
    }
    // No checkpoint during the fill; the one after it is explicit.
    let cluster = start_source(args.major, &conf)?;
    if let Some(repo) = &repo {
        // Before the fill: its WAL is archived as it is written.
        repo.configure(&cluster)?;
        repo.run(&["stanza-create"])?;
    }
    let mut table = fill(&cluster, args.gb)?;
    if let Some(repo) = &repo {
        table.backup = Some(take_backup(repo)?);
    }
    let mut runs = Vec::new();
    let mut ch_version = String::new();
    for (i, &(mode, workers)) in loads.iter().enumerate() {
        let (run, version) = load_once(
            &args,
            &cluster,
            repo.as_ref(),
            &walshadow,
            &table,
            i,
            mode,
            workers,
        )?;
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
    /// The pgBackRest backup object_store loads from (the operator's,
    /// taken before any load: not counted in one).
    backup: Option<StoreBackup>,
}

/// The backup in the store, as taken.
#[derive(Debug, serde::Serialize)]
struct StoreBackup {
    secs: f64,
    /// The repository's size on disk after it, 10^6 bytes.
    repo_mb: f64,
}

/// A full pgBackRest backup into `repo` (its stanza made before the fill).
fn take_backup(repo: &Repo) -> Result<StoreBackup> {
    eprintln!("pgbackrest: a full backup for the object_store load");
    let t = Instant::now();
    // The fill's WAL may still be on its way into the archive.
    repo.run(&["backup", "--type=full", "--archive-timeout=1800"])?;
    let secs = t.elapsed().as_secs_f64();
    let repo_mb = walshadow_shadow::bootstrap::dir_size(&repo.repo_dir()) as f64 / 1e6;
    eprintln!("pgbackrest: {secs:.1} s, repository {repo_mb:.0} MB");
    Ok(StoreBackup { secs, repo_mb })
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
        backup: None,
    })
}

// ---------------------------------------------------------------- one load

/// One load, measured.
#[derive(Debug, Default, serde::Serialize)]
struct Run {
    mode: Mode,
    /// `[backfill] workers` of a copy load.
    workers: Option<usize>,
    /// Opt-in committed to the ledger's `done`.
    secs: f64,
    /// Opt-in committed to the entry's first `loading`.
    start_secs: Option<f64>,
    /// Opt-in committed to the ledger's rows reaching the source's count.
    rows_in_secs: Option<f64>,
    /// base_backup: opt-in committed to the ledger's `swap` (recorded just
    /// before `EXCHANGE TABLES`).
    swap_secs: Option<f64>,
    /// The ledger's record of the pass.
    rows: u64,
    attempts: u32,
    resumes: u32,
    /// copy: binary `COPY` bytes (the ledger); base_backup: the
    /// `BASE_BACKUP` stream (walshadow's log), every file of the cluster.
    stream_bytes: u64,
    /// walshadow's own `duration_ms` of the pass (its `done` line), s.
    walshadow_secs: Option<f64>,
    rows_per_sec: f64,
    heap_mb_per_sec: f64,
    stream_mb_per_sec: f64,
    /// base_backup, object_store: the rest of walshadow's `done` line.
    backup: Option<BackupFigures>,
    /// object_store: the archive's segments fetched for the gap.
    gap_segments: Option<u64>,
    /// walshadow's backends on the source, per `application_name`.
    backends: Vec<BackendFigures>,
    /// Their CPU added up, s.
    source_backends_cpu_secs: f64,
    /// The source's processes alive at the opt-in (checkpointer, io
    /// workers, walshadow's WAL stream, the bench's sessions, …), by
    /// `backend_type` and `application_name`: CPU opt-in to done, s.
    source_processes: BTreeMap<String, f64>,
    /// The checkpointer's share of that, s.
    checkpointer_cpu_secs: Option<f64>,
    /// The bench's monitor session (the backend lookups every 100 ms), opt-in
    /// to done, s: part of the whole source's figure, no cost of walshadow's.
    monitor_cpu_secs: Option<f64>,
    /// The whole source less the monitor, s.
    source_less_monitor_secs: f64,
    /// Checkpoints requested (not timed) during the load and the buffers
    /// checkpoints wrote (`pg_stat_bgwriter`, `pg_stat_checkpointer` on 17+).
    checkpoints_requested: Option<u64>,
    checkpoint_buffers: Option<u64>,
    /// Every party, opt-in to done.
    cpu: CpuSplit,
    rss_before_mb: f64,
    peak_rss_mb: f64,
    /// (seconds since the opt-in, rows in the ledger, walshadow VmRSS MB).
    timeline: Vec<(f64, u64, f64)>,
    /// walshadow's INSERTs into the table (base_backup: its staging
    /// table), per the engine's log.
    engine: EngineInserts,
    /// base_backup: the engine's requests of the publish tail (exchange,
    /// copy-back, drop): (the request's start, ms).
    publish_requests: Vec<(String, f64)>,
    /// `system.parts` of the loaded table: (rows, uncompressed, compressed bytes).
    clickhouse_parts: Option<(u64, u64, u64)>,
    /// `WARN` and `ERROR` lines of the run log.
    log_warnings: Vec<String>,
    /// [`CLICKHOUSE_CHECK`]'s answer (equal to the source's, or the run fails).
    check: String,
}

/// base_backup's pass as walshadow's `done` line has it.
#[derive(Debug, Default, serde::Serialize)]
struct BackupFigures {
    bytes_streamed: u64,
    files_walked: u64,
    bytes_walked: u64,
    files_skipped: u64,
    pages_walked: u64,
    tuples_walked: u64,
    gated: u64,
    deferred: u64,
}

/// One `application_name`'s backends on the source.
#[derive(Debug, serde::Serialize)]
struct BackendFigures {
    application_name: String,
    backend_types: Vec<String>,
    sessions: usize,
    cpu_secs: f64,
    /// Seconds since the opt-in: the first found, the last seen alive.
    first_seen_secs: Option<f64>,
    last_alive_secs: Option<f64>,
}

impl BackendFigures {
    fn new(b: Backends, t0: Instant) -> BackendFigures {
        let since = |t: Option<Instant>| {
            t.map(|t| match t.checked_duration_since(t0) {
                Some(d) => d.as_secs_f64(),
                None => -t0.duration_since(t).as_secs_f64(),
            })
        };
        BackendFigures {
            first_seen_secs: since(b.first_seen),
            last_alive_secs: since(b.last_alive),
            application_name: b.application_name,
            backend_types: b.backend_types,
            sessions: b.sessions,
            cpu_secs: b.cpu_secs,
        }
    }
}

/// A fresh walshadow (own slot, shadow, state and engine) loading `items`
/// in `mode` (copy with `workers`); returns the figures and the engine's
/// version.
#[allow(clippy::too_many_arguments)]
fn load_once(
    args: &Args,
    cluster: &Cluster,
    repo: Option<&Repo>,
    walshadow: &Path,
    table: &Table,
    index: usize,
    mode: Mode,
    workers: Option<usize>,
) -> Result<(Run, String)> {
    match workers {
        Some(w) => eprintln!("load {}: {} with {w} worker(s)", index + 1, mode.name()),
        None if mode == Mode::ObjectStore => eprintln!("load {}: object_store", index + 1),
        None => eprintln!(
            "load {}: {} (backup_checkpoint = \"{BACKUP_CHECKPOINT}\")",
            index + 1,
            mode.name()
        ),
    }
    if index > 0 {
        // The config table outlives the previous walshadow: the opt-in
        // below must be new to this one.
        cluster.psql("delete from walshadow.tables")?;
    }
    let label = match workers {
        Some(w) => format!("{}-w{w}", mode.name()),
        None => mode.name().to_owned(),
    };
    let work = WorkDir::new(&format!(
        "load-bench-pg{}-{label}",
        cluster.major().number()
    ))?;
    let ch = ClickHouseEngine::start()?;
    let ch_version = ch.query("SELECT version()")?.trim().to_owned();
    let slot = format!("walshadow_load_{index}");
    let mut daemon = daemon::walshadow(walshadow, cluster, work.path(), &slot)?;
    let state_dir = daemon.state_dir().to_owned();
    let mut text = format!(
        "\n[clickhouse]\nurl = \"{}\"\ndatabase = \"app\"\n",
        ch.url()
    );
    match mode {
        Mode::Copy => {
            text.push_str(&format!(
                "\n[backfill]\nworkers = {}\n",
                workers.unwrap_or(1)
            ));
            if let Some(n) = args.chunk_blocks {
                text.push_str(&format!("chunk_blocks = {n}\n"));
            }
        }
        Mode::BaseBackup => {
            text.push_str(&format!(
                "\n[backfill]\nbackup_checkpoint = \"{BACKUP_CHECKPOINT}\"\n"
            ));
        }
        Mode::ObjectStore => {
            let repo = repo.context("object_store without a repository")?;
            text.push_str(&format!(
                "\n[backup]\ntool = \"pgbackrest\"\nrepo = \"{}\"\nstanza = \"{STANZA}\"\n\n[backfill]\n",
                repo.repo_dir().display()
            ));
        }
    }
    if let Some(n) = args.batch_rows {
        text.push_str(&format!("batch_rows = {n}\n"));
    }
    daemon.append_config(&text)?;
    daemon.init()?;
    daemon.start_run()?;
    let engine_pid = find_engine_pid(ch.port());
    cluster.psql("insert into load_bench_marker values (1)")?;
    daemon.wait_applied(cluster, START_TIMEOUT)?;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut sql = rt.block_on(sql_session(cluster, "load-bench"))?;
    let apps: &[&str] = match mode {
        Mode::Copy => &[LOAD_APP],
        Mode::BaseBackup => &[BACKUP_APP, LOAD_APP],
        // Nothing of walshadow's should show: sampled to prove it.
        Mode::ObjectStore => &[BACKUP_APP, LOAD_APP],
    };
    let stop = AtomicBool::new(false);
    let monitor = AtomicU32::new(0);
    let (mut run, t0, backends) = std::thread::scope(|s| -> Result<_> {
        let sampler = s.spawn(|| sample_backends(cluster, apps, &stop, &monitor));
        let mut source = Source {
            rt: &rt,
            sql: &mut sql,
            cluster,
        };
        let r = wait_until(
            Duration::from_secs(30),
            "the monitor session to connect",
            || Ok(monitor.load(Ordering::Relaxed) != 0 || sampler.is_finished()),
        )
        .and_then(|()| {
            let monitor = Some(monitor.load(Ordering::Relaxed)).filter(|&p| p != 0);
            measure(
                &mut source,
                mode,
                &mut daemon,
                &state_dir,
                table,
                engine_pid,
                monitor,
            )
        });
        stop.store(true, Ordering::Relaxed);
        let backends = sampler
            .join()
            .map_err(|_| anyhow::anyhow!("the sampler thread panicked"))?;
        let (run, t0) = r?;
        Ok((run, t0, backends?))
    })?;
    rt.block_on(sql.close());
    run.mode = mode;
    run.workers = workers;
    run.backends = backends
        .into_iter()
        .map(|b| BackendFigures::new(b, t0))
        .collect();
    run.source_backends_cpu_secs = run.backends.iter().map(|b| b.cpu_secs).sum();
    let log = daemon.run_log();
    run.log_warnings = run_log::warnings(&log);
    let done = run_log::last_fields(&log, &format!("initial load ({}) done", mode.name()));
    run.walshadow_secs = done
        .as_ref()
        .and_then(|f| f.get("duration_ms"))
        .map(|&ms| ms as f64 / 1e3);
    if mode.walks() {
        let f = done.unwrap_or_default();
        let get = |k: &str| f.get(k).copied().unwrap_or(0);
        let backup = BackupFigures {
            bytes_streamed: get("bytes_streamed"),
            files_walked: get("files_walked"),
            bytes_walked: get("bytes_walked"),
            files_skipped: get("files_skipped"),
            pages_walked: get("pages_walked"),
            tuples_walked: get("tuples_walked"),
            gated: get("gated"),
            deferred: get("deferred"),
        };
        if mode == Mode::BaseBackup {
            run.stream_bytes = backup.bytes_streamed;
            run.stream_mb_per_sec = backup.bytes_streamed as f64 / 1e6 / run.secs;
        } else {
            // What walshadow read from the store: the walked files.
            run.stream_bytes = backup.bytes_walked;
            run.stream_mb_per_sec = backup.bytes_walked as f64 / 1e6 / run.secs;
            run.gap_segments = Some(get("gap_segments"));
        }
        run.backup = Some(backup);
    }
    let into = if mode.walks() { STAGING } else { TABLE };
    let engine_text = std::fs::read_to_string(ch.log_path()).unwrap_or_default();
    run.engine = EngineInserts::read(&engine_text, into);
    if mode.walks() {
        run.publish_requests = publish_requests(&engine_text);
    }
    run.clickhouse_parts = clickhouse_parts(&ch);
    run.check = ch.query(CLICKHOUSE_CHECK)?.trim().to_owned();
    eprintln!(
        "verify: source {} | ClickHouse FINAL {}",
        table.check, run.check
    );
    for w in &run.log_warnings {
        eprintln!("run log: {w}");
    }
    ensure!(
        run.check == table.check,
        "MISMATCH: source (count, sums, non-NULL counts, note length) {} but ClickHouse FINAL {}",
        table.check,
        run.check
    );
    daemon.stop_run()?;
    cluster.psql(&format!("select pg_drop_replication_slot('{slot}')"))?;
    Ok((run, ch_version))
}

/// The bench's own session on the source.
struct Source<'a> {
    rt: &'a tokio::runtime::Runtime,
    sql: &'a mut ReplicationClient,
    cluster: &'a Cluster,
}

impl Source<'_> {
    fn query(&mut self, q: &str) -> Result<Vec<Option<String>>> {
        let r = self
            .rt
            .block_on(self.sql.simple_query(q))
            .with_context(|| format!("running {q}"))?;
        Ok((0..r.columns.len())
            .map(|c| r.text(0, c).map(str::to_owned))
            .collect())
    }

    /// The source's processes now: pid, its label (`backend_type`, and
    /// `application_name` when set), ns on CPU so far.
    fn processes(&mut self) -> Result<Vec<(u32, String, u64)>> {
        let r = self
            .rt
            .block_on(self.sql.simple_query(
                "select pid, backend_type, coalesce(application_name, '') from pg_stat_activity",
            ))
            .context("listing the source's processes")?;
        Ok((0..r.rows.len())
            .filter_map(|i| {
                let pid: u32 = r.text(i, 0)?.parse().ok()?;
                let kind = r.text(i, 1).unwrap_or("?");
                let label = match r.text(i, 2).unwrap_or("") {
                    "" => kind.to_owned(),
                    app => format!("{kind} '{app}'"),
                };
                Some((pid, label, pid_cpu_ns(Some(pid))?))
            })
            .collect())
    }

    /// Checkpoints requested so far and buffers checkpoints wrote.
    fn checkpoint_counts(&mut self) -> Result<(Option<u64>, Option<u64>)> {
        let q = if self.cluster.major().number() >= 17 {
            "select num_requested, buffers_written from pg_stat_checkpointer"
        } else {
            "select checkpoints_req, buffers_checkpoint from pg_stat_bgwriter"
        };
        let r = self.query(q)?;
        let num = |i: usize| r.get(i).cloned().flatten().and_then(|v| v.parse().ok());
        Ok((num(0), num(1)))
    }
}

/// ns on CPU of `pid` so far.
fn pid_cpu_ns(pid: Option<u32>) -> Option<u64> {
    proc_cpu_ns(Path::new(&format!("/proc/{}", pid?)))
}

/// Opts the table in and follows the ledger until the load is done;
/// returns the figures and the instant of the opt-in's commit.
fn measure(
    source: &mut Source<'_>,
    mode: Mode,
    daemon: &mut Walshadow,
    state_dir: &Path,
    table: &Table,
    engine_pid: Option<u32>,
    monitor: Option<u32>,
) -> Result<(Run, Instant)> {
    let mut run = Run {
        rss_before_mb: proc_status_kb(daemon.run_pid().unwrap_or(0), "VmRSS").unwrap_or(0) as f64
            / 1024.0,
        ..Run::default()
    };
    let processes0 = source.processes()?;
    let monitor0 = pid_cpu_ns(monitor);
    let checkpoints0 = source.checkpoint_counts()?;
    let cpu0 = CpuSplit::now(source.cluster, daemon, engine_pid);
    source
        .rt
        .block_on(source.sql.simple_query(&format!(
            "insert into walshadow.tables values ('public', '{TABLE}', true, '{}')",
            mode.name()
        )))
        .context("opting the table in")?;
    let t0 = Instant::now();
    if mode == Mode::ObjectStore {
        // The load needs the opt-in's segment archived; a source does
        // this within archive_timeout, the bench at once.
        switch_and_archive(source.cluster)?;
    }
    let mut next_sample = Duration::ZERO;
    let pass = loop {
        daemon.check_running()?;
        let at = t0.elapsed();
        let ledger = Ledger::read(state_dir)?;
        let pass = ledger.tables.get(KEY);
        let rows = pass.map_or(0, |p| p.rows);
        if at >= next_sample {
            let rss =
                proc_status_kb(daemon.run_pid().unwrap_or(0), "VmRSS").unwrap_or(0) as f64 / 1024.0;
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
            if p.swap.is_some() && run.swap_secs.is_none() {
                run.swap_secs = Some(at.as_secs_f64());
            }
            match p.phase {
                Phase::Done => break p.clone(),
                Phase::Failed => bail!(
                    "the load failed: {}\n{}",
                    p.error.as_deref().unwrap_or("?"),
                    daemon.run_log_for_errors()
                ),
                Phase::Pending | Phase::Loading => {}
            }
        }
        ensure!(
            at < LOAD_TIMEOUT,
            "no load done after {LOAD_TIMEOUT:?}; ledger: {pass:?}\n{}",
            daemon.run_log_for_errors()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    run.secs = t0.elapsed().as_secs_f64();
    run.cpu = CpuSplit::now(source.cluster, daemon, engine_pid).since(&cpu0);
    // A pid keeps its meaning: these processes outlive the load, and a
    // reused one would have started after the opt-in with fewer ns.
    for (pid, label, ns0) in &processes0 {
        if let Some(ns) = pid_cpu_ns(Some(*pid)).filter(|ns| ns >= ns0) {
            *run.source_processes.entry(label.clone()).or_default() += (ns - ns0) as f64 / 1e9;
        }
    }
    run.checkpointer_cpu_secs = run.source_processes.get("checkpointer").copied();
    run.monitor_cpu_secs = pid_cpu_ns(monitor)
        .zip(monitor0)
        .map(|(b, a)| b.saturating_sub(a) as f64 / 1e9);
    run.source_less_monitor_secs = run.cpu.source_postgres - run.monitor_cpu_secs.unwrap_or(0.0);
    let checkpoints1 = source.checkpoint_counts()?;
    run.checkpoints_requested = checkpoints1
        .0
        .zip(checkpoints0.0)
        .map(|(b, a)| b.saturating_sub(a));
    run.checkpoint_buffers = checkpoints1
        .1
        .zip(checkpoints0.1)
        .map(|(b, a)| b.saturating_sub(a));
    run.peak_rss_mb =
        proc_status_kb(daemon.run_pid().unwrap_or(0), "VmHWM").unwrap_or(0) as f64 / 1024.0;
    let rss = proc_status_kb(daemon.run_pid().unwrap_or(0), "VmRSS").unwrap_or(0) as f64 / 1024.0;
    run.timeline.push((run.secs, pass.rows, rss));
    ensure!(
        pass.mode == mode.name(),
        "the ledger's entry is a {} load, not {}",
        pass.mode,
        mode.name()
    );
    run.rows = pass.rows;
    run.stream_bytes = pass.bytes;
    run.attempts = pass.attempts;
    run.resumes = pass.resumes;
    run.rows_per_sec = table.rows as f64 / run.secs;
    run.heap_mb_per_sec = table.heap_bytes as f64 / 1e6 / run.secs;
    run.stream_mb_per_sec = pass.bytes as f64 / 1e6 / run.secs;
    Ok((run, t0))
}

/// walshadow's INSERTs into one table as the engine logged them.
#[derive(Debug, Default, serde::Serialize)]
struct EngineInserts {
    /// The table (`items`, or base_backup's staging table).
    into: String,
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
    /// RowBinary inserts into `app.<into>` (not base_backup's copy-back,
    /// an `INSERT … SELECT`).
    fn read(log: &str, into: &str) -> EngineInserts {
        let prefix = format!("INSERT INTO `app`.`{into}`");
        let inserts: Vec<_> = engine_log::posts_ok(log)
            .filter(|r| r.what.starts_with(&prefix) && r.what.contains("FORMAT RowBinary"))
            .collect();
        let sum_ms: f64 = inserts.iter().map(|r| r.ms).sum();
        EngineInserts {
            into: into.to_owned(),
            inserts: inserts.len(),
            rows: inserts.iter().map(|r| r.rows_written()).sum(),
            mean_ms: sum_ms / inserts.len().max(1) as f64,
            max_ms: inserts.iter().map(|r| r.ms).fold(0.0, f64::max),
            sum_secs: sum_ms / 1e3,
            busy_secs: engine_log::busy_secs(&inserts),
        }
    }
}

/// base_backup's publish tail in the engine's log: from `EXCHANGE TABLES`
/// on, the requests naming the staging table, cut to 100 characters.
fn publish_requests(log: &str) -> Vec<(String, f64)> {
    engine_log::posts_ok(log)
        .skip_while(|r| !r.what.starts_with("EXCHANGE TABLES"))
        .filter(|r| r.what.contains(STAGING))
        .map(|r| (r.what.chars().take(100).collect(), r.ms))
        .collect()
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

// ---------------------------------------------------------------- comparison

/// base_backup's source CPU against one copy load's.
#[derive(Debug, serde::Serialize)]
struct Ratio {
    copy_workers: Option<usize>,
    copy_backends_cpu_secs: f64,
    copy_source_cpu_secs: f64,
    copy_source_less_monitor_secs: f64,
    /// base_backup / copy: walshadow's backends, the whole source, and the
    /// whole source less the bench's monitor session.
    backends: f64,
    whole_source: f64,
    whole_source_less_monitor: f64,
}

/// The side-by-side figures of a run that loaded both ways.
#[derive(Debug, serde::Serialize)]
struct Comparison {
    /// The walking mode compared (its figures in the `base_backup_*` fields).
    mode: Mode,
    base_backup_backends_cpu_secs: f64,
    base_backup_source_cpu_secs: f64,
    base_backup_source_less_monitor_secs: f64,
    against_copy: Vec<Ratio>,
    target_ratio: f64,
    /// Against every copy load of the run.
    target_met_backends: bool,
    target_met_whole_source: bool,
    target_met_whole_source_less_monitor: bool,
}

fn compare(runs: &[Run], mode: Mode) -> Option<Comparison> {
    let backup = runs.iter().find(|r| r.mode == mode)?;
    let against_copy: Vec<Ratio> = runs
        .iter()
        .filter(|r| r.mode == Mode::Copy)
        .map(|c| Ratio {
            copy_workers: c.workers,
            copy_backends_cpu_secs: c.source_backends_cpu_secs,
            copy_source_cpu_secs: c.cpu.source_postgres,
            copy_source_less_monitor_secs: c.source_less_monitor_secs,
            backends: backup.source_backends_cpu_secs / c.source_backends_cpu_secs,
            whole_source: backup.cpu.source_postgres / c.cpu.source_postgres,
            whole_source_less_monitor: backup.source_less_monitor_secs / c.source_less_monitor_secs,
        })
        .collect();
    if against_copy.is_empty() {
        return None;
    }
    Some(Comparison {
        mode,
        base_backup_backends_cpu_secs: backup.source_backends_cpu_secs,
        base_backup_source_cpu_secs: backup.cpu.source_postgres,
        base_backup_source_less_monitor_secs: backup.source_less_monitor_secs,
        target_met_backends: against_copy.iter().all(|r| r.backends <= TARGET_RATIO),
        target_met_whole_source: against_copy.iter().all(|r| r.whole_source <= TARGET_RATIO),
        target_met_whole_source_less_monitor: against_copy
            .iter()
            .all(|r| r.whole_source_less_monitor <= TARGET_RATIO),
        against_copy,
        target_ratio: TARGET_RATIO,
    })
}

// ---------------------------------------------------------------- report

fn report(args: &Args, v: &Versions, table: &Table, runs: &[Run]) -> Result<()> {
    let cores = v.machine.cores;
    let mb = |b: u64| b as f64 / 1e6;
    let secs = |s: Option<f64>| s.map_or_else(|| "?".to_owned(), |s| format!("{s:.1}"));
    let opt1 = |s: Option<f64>| s.map_or_else(|| "?".to_owned(), |s| format!("{s:.1}"));
    let what = |r: &Run| match r.workers {
        Some(w) => format!(
            "{} ({w} worker{})",
            r.mode.name(),
            if w == 1 { "" } else { "s" }
        ),
        None => r.mode.name().to_owned(),
    };
    println!(
        "Initial load ({}), PostgreSQL {} -> walshadow -> ClickHouse engine {}: {TABLE}, {} rows, heap {:.0} MB (pg_relation_size), primary key {:.0} MB; filled in {:.0} s",
        args.modes
            .iter()
            .map(|m| m.name())
            .collect::<Vec<_>>()
            .join(" vs "),
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
    if args.modes.contains(&Mode::BaseBackup) {
        println!(
            "base_backup settings: backup_checkpoint = \"{BACKUP_CHECKPOINT}\", backup_max_rate_kb unthrottled"
        );
    }
    if let Some(b) = &table.backup {
        println!(
            "object_store: from a full pgBackRest backup (gz) taken after the fill in {:.1} s, repository {:.0} MB (the operator's, not counted in the load); the bench ends the opt-in's WAL segment at once (pg_switch_wal) so the archive holds it",
            b.secs, b.repo_mb
        );
    }
    println!(
        "{:<22} {:>7} {:>8} {:>9} {:>11} {:>12} {:>11} {:>10} {:>10} {:>9}",
        "load",
        "load s",
        "rows/s",
        "heap MB/s",
        "stream MB/s",
        "src backends",
        "src all",
        "walshadow",
        "engine",
        "peak RSS"
    );
    for r in runs {
        println!(
            "{:<22} {:>7.1} {:>8.0} {:>9.1} {:>11.1} {:>10.2} s {:>9.2} s {:>8.1} s {:>8} s {:>6.0} MB",
            what(r),
            r.secs,
            r.rows_per_sec,
            r.heap_mb_per_sec,
            r.stream_mb_per_sec,
            r.source_backends_cpu_secs,
            r.cpu.source_postgres,
            r.cpu.walshadow,
            opt1(r.cpu.clickhouse_engine),
            r.peak_rss_mb
        );
    }
    println!(
        "(CPU seconds from the opt-in to done; src backends: walshadow's sessions on the source; src all: the source's postmaster and every child; stream: COPY bytes, or the BASE_BACKUP's)"
    );
    let row = |k: &str, v: String| println!("  {k:<46} {v}");
    for r in runs {
        println!("{}:", what(r));
        match r.mode {
            Mode::Copy => row(
                "opt-in to loading / rows in / done",
                format!(
                    "{} s / {} s / {:.1} s (walshadow's own duration {} s)",
                    secs(r.start_secs),
                    secs(r.rows_in_secs),
                    r.secs,
                    secs(r.walshadow_secs)
                ),
            ),
            Mode::BaseBackup | Mode::ObjectStore => {
                row(
                    "opt-in to loading / rows in / swap / done",
                    format!(
                        "{} s / {} s / {} s / {:.1} s (walshadow's own duration {} s)",
                        secs(r.start_secs),
                        secs(r.rows_in_secs),
                        secs(r.swap_secs),
                        r.secs,
                        secs(r.walshadow_secs)
                    ),
                );
                if let Some(rows_in) = r.rows_in_secs {
                    row(
                        "publish tail: rows in to done",
                        format!(
                            "{:.1} s (the exchange, the copy-back, the drop)",
                            r.secs - rows_in
                        ),
                    );
                }
                for (q, ms) in &r.publish_requests {
                    row("  engine, publish", format!("{ms:.0} ms {q}"));
                }
            }
        }
        row(
            "ledger: rows, stream bytes, attempts",
            format!(
                "{} rows, {:.0} MB of {}, {} attempt(s), {} resume(s)",
                r.rows,
                mb(r.stream_bytes),
                match r.mode {
                    Mode::Copy => "binary COPY",
                    Mode::BaseBackup => "BASE_BACKUP stream (walshadow's log)",
                    Mode::ObjectStore => "backup files walked (walshadow's log)",
                },
                r.attempts,
                r.resumes
            ),
        );
        if let Some(b) = &r.backup {
            row(
                "walk: files walked / skipped, pages, tuples",
                format!(
                    "{} ({:.0} MB) / {}, {} pages, {} tuples walked, {} gated, {} deferred",
                    b.files_walked,
                    mb(b.bytes_walked),
                    b.files_skipped,
                    b.pages_walked,
                    b.tuples_walked,
                    b.gated,
                    b.deferred
                ),
            );
        }
        for b in &r.backends {
            let life = match (b.first_seen_secs, b.last_alive_secs) {
                (Some(a), Some(z)) => format!(", seen {a:.1} s to {z:.1} s after the opt-in"),
                _ => String::new(),
            };
            row(
                &format!("source: '{}'", b.application_name),
                format!(
                    "{:.2} CPU s in {} session(s) ({}){life}",
                    b.cpu_secs,
                    b.sessions,
                    if b.backend_types.is_empty() {
                        "none seen".to_owned()
                    } else {
                        b.backend_types.join(", ")
                    }
                ),
            );
        }
        let cpu2 = |c: Option<f64>| c.map_or_else(|| "?".into(), |c| format!("{c:.2}"));
        row(
            "source: checkpointer / checkpoints requested",
            format!(
                "{} CPU s / {} (buffers written {})",
                cpu2(r.checkpointer_cpu_secs),
                r.checkpoints_requested
                    .map_or_else(|| "?".into(), |c| c.to_string()),
                r.checkpoint_buffers
                    .map_or_else(|| "?".into(), |c| c.to_string())
            ),
        );
        let others: f64 = r.source_processes.values().sum();
        let shown: Vec<String> = r
            .source_processes
            .iter()
            .filter(|&(_, &c)| c >= 0.005)
            .map(|(k, c)| format!("{k} {c:.2}"))
            .collect();
        row(
            "source all: the load's + alive before + rest",
            format!(
                "{:.2} = {:.2} + {others:.2} + {:.2} CPU s; less the bench's monitor {:.2} s",
                r.cpu.source_postgres,
                r.source_backends_cpu_secs,
                r.cpu.source_postgres - r.source_backends_cpu_secs - others,
                r.source_less_monitor_secs
            ),
        );
        row(
            "  processes alive before the opt-in",
            if shown.is_empty() {
                "none spent 0.005 s".to_owned()
            } else {
                shown.join(", ")
            },
        );
        row(
            "CPU s, opt-in to done (2 cores = 2 s per s)",
            format!(
                "walshadow {:.1}, ClickHouse engine {}, shadow PG {:.1}, source PG {:.2} (of {:.1} available)",
                r.cpu.walshadow,
                opt1(r.cpu.clickhouse_engine),
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
            &format!("engine: walshadow's INSERTs into {}", e.into),
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
            "run log: WARN/ERROR lines",
            format!("{}", r.log_warnings.len()),
        );
        for w in r.log_warnings.iter().take(5) {
            println!("    {w}");
        }
        row(
            "verify (count, sums, non-NULL, note length)",
            format!("source = ClickHouse FINAL: {}", r.check),
        );
    }

    let comparisons: Vec<Comparison> = [Mode::BaseBackup, Mode::ObjectStore]
        .into_iter()
        .filter_map(|m| compare(runs, m))
        .collect();
    for c in &comparisons {
        let name = c.mode.name();
        println!("{name} vs copy, same table, this run, source CPU {name} / copy:");
        for r in &c.against_copy {
            let w = r.copy_workers.unwrap_or(0);
            row(
                &format!("against copy with {w} worker(s)"),
                format!(
                    "backends {:.2} / {:.2} s = {:.3}; whole source {:.2} / {:.2} s = {:.3}; less the monitor {:.2} / {:.2} s = {:.3}",
                    c.base_backup_backends_cpu_secs,
                    r.copy_backends_cpu_secs,
                    r.backends,
                    c.base_backup_source_cpu_secs,
                    r.copy_source_cpu_secs,
                    r.whole_source,
                    c.base_backup_source_less_monitor_secs,
                    r.copy_source_less_monitor_secs,
                    r.whole_source_less_monitor
                ),
            );
        }
        let verdict = |met: bool| if met { "met" } else { "NOT met" };
        row(
            &format!("target: {name} <= 1/4 of copy's"),
            format!(
                "backends {}, whole source {}, whole source less the monitor {} (against every copy load of this run)",
                verdict(c.target_met_backends),
                verdict(c.target_met_whole_source),
                verdict(c.target_met_whole_source_less_monitor)
            ),
        );
    }

    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "postgres": v.postgres,
            "clickhouse": v.clickhouse,
            "settings": {
                "gb": args.gb,
                "modes": args.modes,
                "workers": args.workers,
                "batch_rows": args.batch_rows,
                "chunk_blocks": args.chunk_blocks,
                "base_backup": {
                    "backup_checkpoint": BACKUP_CHECKPOINT,
                },
            },
            "table": table,
            "runs": runs,
            "comparisons": comparisons,
        });
        v.machine.write_json(path, "load", doc)?;
    }
    Ok(())
}
