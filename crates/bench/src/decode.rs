//! Decode throughput and source CPU: walshadow decoding the physical WAL
//! into rows, side by side with PostgreSQL's logical decoding of the same
//! WAL range (`pg_recvlogical` with `pgoutput` and with `test_decoding`)
//! and with a physical walsender streaming that range.
//!
//! ```text
//! cargo run --release -p walshadow-bench --bin decode-bench -- --major 15 --mix narrow
//! ```
//!
//! One run, on a throwaway cluster of `--major`:
//!
//! ```text
//!  tables + preload ─▶ publication ─▶ logical slots (pgoutput, test_decoding; one per run)
//!       ─▶ start LSN ─▶ seeded workload, server-side (CALL …; 10–20 changes per commit)
//!       ─▶ end LSN ─▶ per run, one after the other on the same range:
//!            physical  : START_REPLICATION PHYSICAL start … end   (walsender CPU)
//!            walshadow : segments ─▶ records ─▶ Assembler ─▶ RowDecoder → Values
//!            pgoutput  : pg_recvlogical --endpos end > /dev/null  (walsender CPU)
//!            test_dec. : pg_recvlogical --endpos end | count rows (walsender CPU)
//! ```
//!
//! walshadow's side is the streaming pipeline's own path without a
//! destination: `changes::decode::record_events`, each change serialized
//! into the transaction assembler (generous budget, so in memory), and
//! every committed change of the workload's tables decoded into `Value`s
//! (old keys included; TOAST chunks gathered per transaction as the
//! pipeline does). Relation descriptors are read once, up front, from the
//! source itself. It runs on one thread; its CPU is that thread's
//! `/proc/thread-self/schedstat`.
//!
//! A walsender's CPU is its `/proc/<pid>/schedstat` (ns on CPU since the
//! process started; each replication connection gets a fresh walsender),
//! sampled until it exits, so it includes connection start-up and is
//! short by at most one sampling interval (2 ms) at the end. The pid is
//! found by `application_name` in `pg_stat_activity`.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use walshadow_bench::machine::MachineContext;
use walshadow_bench::procfs::proc_cpu_ns;
use walshadow_bench::source::{conn_config, sql_session};
use walshadow_changes::assemble::{Assembled, assemble};
use walshadow_changes::change::{Change, ChangeKind};
use walshadow_changes::decode::record_events;
use walshadow_rows::{RowDecoder, ToastChunks};
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_testkit::{Cluster, ClusterOptions};
use walshadow_txn::{Assembler, AssemblerConfig};
use walshadow_types::{Lsn, Oid, PgMajor};
use walshadow_wal_reader::replication::{FollowEvent, ReplicationClient, WalFollower};
use walshadow_wal_reader::segments::SegmentSet;

#[derive(Debug, Parser)]
#[command(
    about = "Decode throughput and source CPU: walshadow vs pgoutput/test_decoding vs a physical walsender"
)]
struct Args {
    /// PostgreSQL major of the throwaway source (15 to 18).
    #[arg(long, default_value_t = 15)]
    major: u32,
    /// Row changes the workload makes (rounded up to whole transactions).
    #[arg(long, default_value_t = 1_000_000)]
    changes: u64,
    /// `narrow`: pgbench-like (12 updates of 120-byte rows, 6 inserts,
    /// 2 deletes per transaction); `wide`: 20 columns of mixed types, every
    /// fifth inserted row with a TOASTed 6 KB text (6 inserts, 3 updates,
    /// 1 delete per transaction).
    #[arg(long, default_value = "narrow")]
    mix: Mix,
    /// Seed of the workload's `random()` (`setseed`).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Runs of each side (one logical slot per plugin per run).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Also write the figures as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Mix {
    Narrow,
    Wide,
}

impl Mix {
    fn changes_per_txn(self) -> u64 {
        match self {
            Mix::Narrow => 20,
            Mix::Wide => 10,
        }
    }

    fn tables(self) -> &'static [&'static str] {
        match self {
            Mix::Narrow => &["bench_accounts", "bench_history"],
            Mix::Wide => &["bench_wide"],
        }
    }
}

const PRELOAD_ROWS: u64 = 100_000;
const PUBLICATION: &str = "bench_pub";

/// One measurement of one side.
#[derive(Debug, Clone, serde::Serialize)]
struct Measure {
    wall_secs: f64,
    /// walshadow's own thread (walshadow side only).
    cpu_secs: Option<f64>,
    /// The walsender's CPU (not for walshadow: its source cost is the
    /// physical walsender's).
    source_cpu_secs: Option<f64>,
    /// Changes counted by the consumer, where it can count them.
    changes: Option<u64>,
    records: Option<u64>,
}

#[derive(Debug, serde::Serialize)]
struct Row {
    tool: &'static str,
    runs: Vec<Measure>,
    median_wall_secs: f64,
    changes_per_sec: f64,
    wal_mb_per_sec: f64,
    records_per_sec: Option<f64>,
    records_per_cpu_sec: Option<f64>,
    median_cpu_secs: Option<f64>,
    median_source_cpu_secs: Option<f64>,
    source_cpu_secs_per_million_changes: Option<f64>,
    ratio_vs_pgoutput: f64,
    source_cpu_pct_of_pgoutput: Option<f64>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let major = PgMajor::from_number(args.major)?;
    let mut machine = MachineContext::before_run();
    let cluster = Cluster::start(
        major,
        ClusterOptions::default()
            .conf("wal_keep_size", "16GB")
            .conf("max_wal_size", "16GB")
            .conf("checkpoint_timeout", "1h")
            .conf("shared_buffers", "256MB")
            .conf("autovacuum", "off")
            .conf("max_replication_slots", "40")
            .conf("max_wal_senders", "20"),
    )?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;

    let txns = args.changes.div_ceil(args.mix.changes_per_txn());
    let changes = txns * args.mix.changes_per_txn();
    setup(&cluster, args.mix, args.runs)?;
    let (start, end, gen_secs) = generate(&cluster, args.mix, txns, args.seed)?;
    let wal_bytes = end.distance_from(start);
    let wal_mb = wal_bytes as f64 / 1e6;
    eprintln!(
        "{changes} changes in {txns} transactions, {wal_mb:.1} MB of WAL {start}..{end}, generated in {gen_secs:.1} s"
    );

    let db_oid: Oid = cluster
        .query_one("select oid from pg_database where datname = 'postgres'")?
        .parse()?;
    let targets = rt.block_on(fetch_targets(&cluster, args.mix))?;
    let mut sql = rt.block_on(sql_session(&cluster, "decode-bench-monitor"))?;

    let mut physical = Vec::new();
    let mut ours = Vec::new();
    let mut pgoutput = Vec::new();
    let mut test_decoding = Vec::new();
    for run in 0..args.runs {
        eprintln!("run {}/{}", run + 1, args.runs);
        physical.push(stream_physical(&rt, &cluster, &mut sql, start, end)?);
        let m = decode_ours(&cluster, start, end, db_oid, major, &targets)?;
        check_count("walshadow", m.changes, changes)?;
        ours.push(m);
        pgoutput.push(recvlogical(
            &rt,
            &cluster,
            &mut sql,
            Plugin::Pgoutput,
            run,
            end,
        )?);
        let m = recvlogical(&rt, &cluster, &mut sql, Plugin::TestDecoding, run, end)?;
        check_count("test_decoding", m.changes, changes)?;
        test_decoding.push(m);
    }
    machine.after_run();

    let pg_rate = changes as f64 / median(pgoutput.iter().map(|m| m.wall_secs));
    let pg_src = median_opt(pgoutput.iter().map(|m| m.source_cpu_secs));
    let phys_src = median_opt(physical.iter().map(|m| m.source_cpu_secs));
    let row = |tool, runs: Vec<Measure>, source: Option<f64>| {
        let wall = median(runs.iter().map(|m| m.wall_secs));
        let cpu = median_opt(runs.iter().map(|m| m.cpu_secs));
        let records = runs.first().and_then(|m| m.records);
        Row {
            tool,
            median_wall_secs: wall,
            changes_per_sec: changes as f64 / wall,
            wal_mb_per_sec: wal_mb / wall,
            records_per_sec: records.map(|r| r as f64 / wall),
            records_per_cpu_sec: records.zip(cpu).map(|(r, c)| r as f64 / c),
            median_cpu_secs: cpu,
            median_source_cpu_secs: source,
            source_cpu_secs_per_million_changes: source.map(|s| s / (changes as f64 / 1e6)),
            ratio_vs_pgoutput: changes as f64 / wall / pg_rate,
            source_cpu_pct_of_pgoutput: source.zip(pg_src).map(|(s, p)| 100.0 * s / p),
            runs,
        }
    };
    let rows = [
        row("walshadow decode", ours, phys_src),
        row("pgoutput (pg_recvlogical)", pgoutput, pg_src),
        row(
            "test_decoding (pg_recvlogical)",
            test_decoding.clone(),
            median_opt(test_decoding.iter().map(|m| m.source_cpu_secs)),
        ),
        row("physical walsender", physical, phys_src),
    ];

    let version = cluster.install().version().to_owned();
    println!(
        "Decode throughput, PostgreSQL {version}, {:?} mix, seed {}, {changes} changes in {txns} transactions, {wal_mb:.1} MB of WAL, medians of {} runs",
        args.mix, args.seed, args.runs
    );
    println!("{}", machine.line(""));
    println!(
        "{:<32} {:>12} {:>9} {:>12} {:>14} {:>10} {:>12}",
        "side", "changes/s", "WAL MB/s", "records/s", "src CPU s/M", "vs pgoutput", "src CPU %pgo"
    );
    for r in &rows {
        println!(
            "{:<32} {:>12.0} {:>9.1} {:>12} {:>14} {:>10.2}x {:>12}",
            r.tool,
            r.changes_per_sec,
            r.wal_mb_per_sec,
            r.records_per_sec
                .map_or_else(|| "-".into(), |v| format!("{v:.0}")),
            r.source_cpu_secs_per_million_changes
                .map_or_else(|| "-".into(), |v| format!("{v:.3}")),
            r.ratio_vs_pgoutput,
            r.source_cpu_pct_of_pgoutput
                .map_or_else(|| "-".into(), |v| format!("{v:.1}%")),
        );
    }
    if let Some(ours) = rows.first() {
        println!(
            "walshadow: {:.2} s CPU on one thread for {} records ({:.0} records per CPU second); its source cost is the physical walsender's",
            ours.median_cpu_secs.unwrap_or(f64::NAN),
            ours.runs.first().and_then(|m| m.records).unwrap_or(0),
            ours.records_per_cpu_sec.unwrap_or(f64::NAN),
        );
    }
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "mix": args.mix,
            "seed": args.seed,
            "postgres": version,
            "changes": changes,
            "transactions": txns,
            "wal_bytes": wal_bytes,
            "start_lsn": start.to_string(),
            "end_lsn": end.to_string(),
            "generate_secs": gen_secs,
            "runs": args.runs,
            "rows": rows,
        });
        machine.write_json(path, "decode", doc)?;
    }
    Ok(())
}

fn check_count(side: &str, got: Option<u64>, want: u64) -> Result<()> {
    match got {
        Some(n) if n != want => {
            bail!(
                "{side} saw {n} changes, the workload made {want}: the sides did not read the same changes"
            )
        }
        _ => Ok(()),
    }
}

fn median(v: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn median_opt(v: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = v.flatten().collect();
    (!v.is_empty()).then(|| median(v.into_iter()))
}

// ---------------------------------------------------------------- workload

/// The columns of `bench_wide` for the row with id `g`: 20 columns of
/// mixed types; rows above 1,000,000 with `g % 5 = 0` get a 6.4 KB text of
/// md5 hex (too big even after pglz: stored out of line).
const WIDE_ROW: &str = "g, (random() * 1e6)::int, (random() * 1e12)::bigint,
    round((random() * 1e6)::numeric, 2), random() * 1000, (random() * 100)::real, random() < 0.5,
    timestamptz '2024-01-01 00:00+00' + random() * interval '365 days',
    date '2024-01-01' + (random() * 365)::int, time '00:00' + random() * interval '24 hours',
    random() * interval '30 days', md5(random()::text)::uuid, 'name-' || md5(random()::text),
    left(md5(random()::text), 20), left(md5(g::text), 8),
    jsonb_build_object('k', g, 'v', md5(random()::text), 'tags', jsonb_build_array(1, 2, 3)),
    array[(random() * 100)::int, (random() * 100)::int, g::int], decode(md5(random()::text), 'hex'),
    ('10.' || (g % 256) || '.' || ((g / 256) % 256) || '.1')::inet,
    case when g > 1000000 and g % 5 = 0
         then (select string_agg(md5(random()::text || i || g), '') from generate_series(1, 200) i)
         else repeat(md5(g::text), 4) end";

/// Tables, preload, publication and the logical slots, all before the
/// measured range begins.
fn setup(c: &Cluster, mix: Mix, runs: usize) -> Result<()> {
    match mix {
        Mix::Narrow => c.psql(&format!(
            "create table bench_accounts (aid int primary key, bid int not null, abalance int not null, filler char(84));
             create table bench_history (hid bigint primary key, tid int, bid int, aid int, delta int, mtime timestamp, filler char(22));
             insert into bench_accounts select g, 1 + (g - 1) / 100000, 0, '' from generate_series(1, {PRELOAD_ROWS}) g;
             create procedure bench_gen(txns int, seed float8) language plpgsql as $$
             declare t int; r int; h bigint := 0; dn bigint := 0;
             begin
               perform setseed(seed);
               perform set_config('enable_seqscan', 'off', false);
               for t in 0 .. txns - 1 loop
                 r := 1 + floor(random() * ({PRELOAD_ROWS} - 12))::int;
                 update bench_accounts set abalance = abalance + (random() * 10000)::int - 5000
                  where aid between r and r + 11;
                 insert into bench_history (hid, tid, bid, aid, delta, mtime)
                   select g, 1 + (random() * 99)::int, 1 + (random() * 9)::int,
                          1 + (random() * ({PRELOAD_ROWS} - 1))::int, (random() * 10000)::int - 5000, now()
                     from generate_series(h + 1, h + 6) g;
                 h := h + 6;
                 delete from bench_history where hid between dn + 1 and dn + 2;
                 dn := dn + 2;
                 commit;
               end loop;
             end $$;
             create publication {PUBLICATION} for table bench_accounts, bench_history;"
        ))?,
        Mix::Wide => c.psql(&format!(
            "create table bench_wide (id bigint primary key, i4 int, i8 bigint, n numeric(14, 2), f8 float8,
                f4 real, flag bool, ts timestamptz, d date, tm time, iv interval, u uuid, name text,
                code varchar(32), ch char(8), j jsonb, arr int[], bin bytea, ip inet, doc text);
             insert into bench_wide select {WIDE_ROW} from generate_series(1, {PRELOAD_ROWS}) g;
             create procedure bench_gen(txns int, seed float8) language plpgsql as $$
             declare t int; r int; h bigint := 1000000; dn bigint := 1000000;
             begin
               perform setseed(seed);
               perform set_config('enable_seqscan', 'off', false);
               for t in 0 .. txns - 1 loop
                 insert into bench_wide select {WIDE_ROW} from generate_series(h + 1, h + 6) g;
                 h := h + 6;
                 r := 1 + floor(random() * ({PRELOAD_ROWS} - 3))::int;
                 update bench_wide set i4 = i4 + 1, n = n + 0.01, ts = ts + interval '1 second',
                        name = 'u-' || md5(random()::text), j = j || jsonb_build_object('u', t)
                  where id between r and r + 2;
                 delete from bench_wide where id = dn + 1;
                 dn := dn + 1;
                 commit;
               end loop;
             end $$;
             create publication {PUBLICATION} for table bench_wide;"
        ))?,
    };
    c.psql("vacuum analyze")?;
    c.checkpoint()?;
    let mut slots = String::new();
    for run in 0..runs {
        for p in [Plugin::Pgoutput, Plugin::TestDecoding] {
            slots.push_str(&format!(
                "select pg_create_logical_replication_slot('{}', '{}');\n",
                p.slot(run),
                p.name()
            ));
        }
    }
    c.psql(&slots)?;
    Ok(())
}

/// Runs the workload; returns the range it wrote and how long it took.
/// (The procedures turn sequential scans off: a plan cached while
/// `bench_history` was empty would otherwise scan it for every delete.)
fn generate(c: &Cluster, mix: Mix, txns: u64, seed: u64) -> Result<(Lsn, Lsn, f64)> {
    // setseed takes [-1, 1].
    let seed = ((seed % 2001) as f64 - 1000.0) / 1000.0;
    let start = c.insert_lsn()?;
    let t = Instant::now();
    c.psql(&format!("call bench_gen({txns}, {seed})"))
        .with_context(|| format!("running the {mix:?} workload"))?;
    let secs = t.elapsed().as_secs_f64();
    let end = c.insert_lsn()?;
    // Everything up to `end` reaches pg_wal, and the walsenders see WAL past it.
    c.switch_wal()?;
    Ok((start, end, secs))
}

// ---------------------------------------------------------------- walshadow

enum Target {
    Table(RowDecoder),
    Toast(Oid),
}

/// Decoders of the workload's tables and their TOAST tables, by relfilenode,
/// read once from the source's catalog.
async fn fetch_targets(c: &Cluster, mix: Mix) -> Result<HashMap<Oid, Target>> {
    let mut cat =
        ShadowCatalog::connect(&c.socket_dir(), c.port(), c.superuser(), "postgres").await?;
    let mut out = HashMap::new();
    for name in mix.tables() {
        let desc = cat
            .relation_by_name("public", name)
            .await?
            .with_context(|| format!("table {name} not found"))?;
        if let Some(toast) = desc.toast_relid {
            let t = cat
                .relation(toast)
                .await?
                .with_context(|| format!("TOAST table {toast} of {name} not found"))?;
            out.insert(t.relfilenode, Target::Toast(toast));
        }
        let decoder = RowDecoder::new(&desc)?;
        out.insert(desc.relfilenode, Target::Table(decoder));
    }
    Ok(out)
}

fn thread_cpu_secs() -> Option<f64> {
    proc_cpu_ns(Path::new("/proc/thread-self")).map(|ns| ns as f64 / 1e9)
}

/// Reads, decodes, assembles and turns into values every committed change
/// of the range, as the streaming pipeline does, without a destination.
fn decode_ours(
    c: &Cluster,
    start: Lsn,
    end: Lsn,
    db_oid: Oid,
    major: PgMajor,
    targets: &HashMap<Oid, Target>,
) -> Result<Measure> {
    let spill_dir = std::env::temp_dir().join(format!("decode-bench-{}", std::process::id()));
    std::fs::create_dir_all(&spill_dir)?;
    let cpu0 = thread_cpu_secs();
    let t = Instant::now();
    let mut asm = Assembler::open(AssemblerConfig {
        memory_budget_bytes: 4 << 30,
        spill_dir: spill_dir.clone(),
    })?;
    let set = SegmentSet::scan(&[c.wal_dir()])?;
    let tli = set
        .default_timeline(Some(start))
        .context("no segment holds the start")?;
    let mut records = set.records(tli, Some(start), Some(end))?;
    let (mut n_records, mut n_changes, mut n_values) = (0u64, 0u64, 0usize);
    let mut events = Vec::new();
    let mut toast = ToastChunks::new();
    while let Some(rec) = records.next_ref()? {
        n_records += 1;
        record_events(&rec, Some(db_oid), major, &mut events)?;
        for event in events.drain(..) {
            // The TOAST mirror's and partitions' upkeep is not part of
            // decoding rows.
            let Assembled::Commit(_, Some(txn)) = assemble(&mut asm, event)? else {
                continue;
            };
            for item in txn {
                let (seq, bytes) = item?;
                let change = Change::decode(&bytes)?;
                if change.rel.db_oid != db_oid {
                    continue;
                }
                match targets.get(&change.rel.rel_number) {
                    None => {}
                    Some(Target::Toast(relid)) => {
                        if change.kind == ChangeKind::Insert
                            && let Some(t) = &change.new
                        {
                            toast.add_chunk_tuple(*relid, t.tuple_ref())?;
                        }
                    }
                    Some(Target::Table(decoder)) => {
                        n_values += decode_change(decoder, &change, &toast)
                            .with_context(|| format!("{} at {seq}", decoder.table()))?;
                        n_changes += 1;
                    }
                }
            }
            toast = ToastChunks::new();
        }
    }
    let wall = t.elapsed().as_secs_f64();
    let cpu = thread_cpu_secs().zip(cpu0).map(|(b, a)| b - a);
    std::hint::black_box(n_values);
    drop(asm);
    let _ = std::fs::remove_dir_all(&spill_dir);
    Ok(Measure {
        wall_secs: wall,
        cpu_secs: cpu,
        source_cpu_secs: None,
        changes: Some(n_changes),
        records: Some(n_records),
    })
}

/// Decodes the change's new row and old key; returns the values made.
fn decode_change(decoder: &RowDecoder, change: &Change, toast: &ToastChunks) -> Result<usize> {
    let mut n = 0;
    if let Some(t) = &change.new {
        n += std::hint::black_box(decoder.decode(t.tuple_ref(), toast)?).len();
    }
    if let Some(old) = &change.old {
        n += std::hint::black_box(decoder.decode(old.tuple().tuple_ref(), toast)?).len();
    }
    if change.kind == ChangeKind::Delete && change.old.is_none() {
        bail!("a DELETE without its old key");
    }
    Ok(n)
}

// ---------------------------------------------------------------- walsenders

/// The pid of the walsender serving `app`, waiting until it appears (or
/// `gone` says the consumer already ended).
fn walsender_pid(
    rt: &tokio::runtime::Runtime,
    sql: &mut ReplicationClient,
    app: &str,
    mut gone: impl FnMut() -> Result<bool>,
) -> Result<u32> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let query = format!(
        "select pid from pg_stat_activity where backend_type = 'walsender' and application_name = '{app}'"
    );
    loop {
        let r = rt.block_on(sql.simple_query(&query))?;
        if let Some(pid) = r.text(0, 0).and_then(|t| t.parse().ok()) {
            return Ok(pid);
        }
        if gone()? {
            bail!("{app} ended before its walsender was seen");
        }
        if Instant::now() > deadline {
            bail!("no walsender with application_name {app} after 30 s");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Samples a process's CPU every 2 ms until it exits (or, once `done` is
/// set, for at most 5 s more); returns the last reading in seconds.
fn sample_cpu(pid: u32, done: Arc<AtomicBool>) -> std::thread::JoinHandle<Option<f64>> {
    std::thread::spawn(move || {
        let dir = PathBuf::from(format!("/proc/{pid}"));
        let mut last = None;
        let mut done_at = None;
        while let Some(ns) = proc_cpu_ns(&dir) {
            last = Some(ns);
            if done.load(Ordering::Relaxed) {
                let at = *done_at.get_or_insert_with(Instant::now);
                if at.elapsed() > Duration::from_secs(5) {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        last.map(|ns| ns as f64 / 1e9)
    })
}

/// Streams `start..end` over a physical replication connection (walshadow's
/// own client) and discards it.
fn stream_physical(
    rt: &tokio::runtime::Runtime,
    c: &Cluster,
    sql: &mut ReplicationClient,
    start: Lsn,
    end: Lsn,
) -> Result<Measure> {
    let app = "decode-bench-physical";
    let cfg = conn_config(c, app)?;
    let t = Instant::now();
    let mut client = rt.block_on(ReplicationClient::connect(&cfg))?;
    let pid = walsender_pid(rt, sql, app, || Ok(false))?;
    let done = Arc::new(AtomicBool::new(false));
    let sampler = sample_cpu(pid, done.clone());
    let received = rt.block_on(async {
        let tli = client.identify_system().await?.timeline;
        let mut f = WalFollower::start(client, None, start, tli).await?;
        let mut bytes = 0u64;
        while f.received_upto().is_none_or(|r| r < end) {
            match f.next().await? {
                FollowEvent::Wal { data, .. } => bytes += data.len() as u64,
                FollowEvent::ServerWalEnd(_) => {}
                FollowEvent::TimelineSwitch { .. } => bail!("unexpected timeline switch"),
            }
        }
        f.stop().await?.close().await;
        anyhow::Ok(bytes)
    })?;
    let wall = t.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let src = sampler.join().ok().flatten();
    std::hint::black_box(received);
    Ok(Measure {
        wall_secs: wall,
        cpu_secs: None,
        source_cpu_secs: src,
        changes: None,
        records: None,
    })
}

#[derive(Debug, Clone, Copy)]
enum Plugin {
    Pgoutput,
    TestDecoding,
}

impl Plugin {
    fn name(self) -> &'static str {
        match self {
            Plugin::Pgoutput => "pgoutput",
            Plugin::TestDecoding => "test_decoding",
        }
    }

    fn slot(self, run: usize) -> String {
        format!("bench_{}_{run}", self.name())
    }
}

/// `pg_recvlogical` from the plugin's slot of this run up to `end`:
/// pgoutput's output to /dev/null, test_decoding's read back and its row
/// lines counted (a cross-check of the change count).
fn recvlogical(
    rt: &tokio::runtime::Runtime,
    c: &Cluster,
    sql: &mut ReplicationClient,
    plugin: Plugin,
    run: usize,
    end: Lsn,
) -> Result<Measure> {
    let app = format!("decode-bench-{}", plugin.name());
    let mut cmd = c.pg_command("pg_recvlogical");
    cmd.arg("-d")
        .arg(format!(
            "host={} port={} user={} dbname=postgres application_name={app}",
            c.socket_dir().display(),
            c.port(),
            c.superuser()
        ))
        .args([
            "--slot",
            &plugin.slot(run),
            "--start",
            "--no-loop",
            "-F",
            "0",
        ])
        .args(["--endpos", &end.to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    match plugin {
        Plugin::Pgoutput => {
            cmd.args(["-o", "proto_version=1", "-o"])
                .arg(format!("publication_names={PUBLICATION}"))
                .args(["-f", "/dev/null"])
                .stdout(Stdio::null());
        }
        Plugin::TestDecoding => {
            cmd.args(["-f", "-"]).stdout(Stdio::piped());
        }
    }
    let t = Instant::now();
    let mut child = cmd.spawn().context("starting pg_recvlogical")?;
    let counter = child
        .stdout
        .take()
        .map(|out| std::thread::spawn(move || -> std::io::Result<u64> { count_row_lines(out) }));
    let pid = walsender_pid(rt, sql, &app, || exited(&mut child))?;
    let done = Arc::new(AtomicBool::new(false));
    let sampler = sample_cpu(pid, done.clone());
    let out = child.wait_with_output()?;
    let wall = t.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    if !out.status.success() {
        bail!(
            "pg_recvlogical ({}) failed: {}",
            plugin.name(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let changes = match counter {
        Some(h) => Some(
            h.join()
                .map_err(|_| anyhow::anyhow!("the counting thread panicked"))??,
        ),
        None => None,
    };
    Ok(Measure {
        wall_secs: wall,
        cpu_secs: None,
        source_cpu_secs: sampler.join().ok().flatten(),
        changes,
        records: None,
    })
}

fn exited(child: &mut Child) -> Result<bool> {
    Ok(child.try_wait()?.is_some())
}

/// Lines of test_decoding output that are row changes (`table s.t: KIND: …`).
fn count_row_lines(mut r: impl Read) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    // Bytes of the current line seen so far (up to 6, for the prefix).
    let mut head: Vec<u8> = Vec::with_capacity(6);
    loop {
        let k = r.read(&mut buf)?;
        if k == 0 {
            return Ok(n);
        }
        for &b in buf.iter().take(k) {
            if b == b'\n' {
                head.clear();
            } else if head.len() < 6 {
                head.push(b);
                if head.as_slice() == b"table " {
                    n += 1;
                }
            }
        }
    }
}
