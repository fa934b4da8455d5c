//! WAL parse throughput, side by side with `pg_waldump` on the same
//! segments in the same run.
//!
//! ```text
//! cargo run --release -p walshadow-bench --bin wal-parse-bench -- --major 15
//! ```
//!
//! Without `--wal-dir` it starts a throwaway cluster, writes about
//! `--wal-mb` of WAL with a mixed workload (inserts, updates, deletes,
//! TOASTed values, an index, full-page images after checkpoints) and
//! measures that range. Each side runs `--runs` times alternately; the
//! figures are the median. walshadow's side reads the segment files,
//! reassembles every record, verifies its CRC-32C and decodes its block
//! references, exactly what `pg_waldump --quiet` does on its side.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use walshadow_testkit::{Cluster, ClusterOptions, PgInstall};
use walshadow_types::{Lsn, PgMajor};
use walshadow_wal_reader::segments::SegmentSet;

#[derive(Debug, Parser)]
#[command(about = "WAL parse throughput: walshadow vs pg_waldump on the same segments")]
struct Args {
    /// PostgreSQL major for the generated WAL (and whose pg_waldump runs).
    #[arg(long, default_value_t = 15)]
    major: u32,
    /// Approximate MB of WAL to generate.
    #[arg(long, default_value_t = 256)]
    wal_mb: u64,
    /// Workload: `narrow` (pgbench-like small rows, ~100-byte records) or
    /// `wide` (2 KB rows and frequent checkpoints: large records and
    /// full-page images).
    #[arg(long, default_value = "narrow")]
    mix: Mix,
    /// Measure existing segments instead of generating (needs --start, --end).
    #[arg(long, requires_all = ["start", "end"])]
    wal_dir: Option<PathBuf>,
    #[arg(long)]
    start: Option<Lsn>,
    #[arg(long)]
    end: Option<Lsn>,
    /// Runs per side.
    #[arg(long, default_value_t = 5)]
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

#[derive(Debug, serde::Serialize)]
struct Side {
    tool: String,
    median_secs: f64,
    mb_per_sec: f64,
    records: Option<u64>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let major = PgMajor::from_number(args.major)?;
    let install = PgInstall::find(major)?;

    let mut _cluster = None;
    let (wal_dir, start, end) = match (&args.wal_dir, args.start, args.end) {
        (Some(d), Some(s), Some(e)) => (d.clone(), s, e),
        _ => {
            let c = Cluster::start(
                major,
                ClusterOptions::default()
                    .conf("wal_keep_size", "4GB")
                    .conf("max_wal_size", "4GB"),
            )?;
            let (s, e) = generate(&c, args.wal_mb, args.mix)?;
            let dir = c.wal_dir();
            _cluster = Some(c);
            (dir, s, e)
        }
    };
    let bytes = end.distance_from(start);
    let mb = bytes as f64 / 1e6;
    eprintln!(
        "measuring {mb:.1} MB of WAL {start}..{end} in {}",
        wal_dir.display()
    );

    let waldump = install.bin("pg_waldump");
    let mut ours = Vec::new();
    let mut theirs_quiet = Vec::new();
    let mut theirs_stats = Vec::new();
    let mut records = 0;
    for _ in 0..args.runs {
        let (d, n) = parse_ours(&wal_dir, start, end)?;
        ours.push(d);
        records = n;
        theirs_quiet.push(run_waldump(&waldump, &wal_dir, start, end, "--quiet")?);
        theirs_stats.push(run_waldump(&waldump, &wal_dir, start, end, "--stats")?);
    }
    let side = |tool: &str, times: &mut Vec<Duration>, recs: Option<u64>| {
        let m = median(times).as_secs_f64();
        Side {
            tool: tool.into(),
            median_secs: m,
            mb_per_sec: mb / m,
            records: recs,
        }
    };
    let sides = [
        side("walshadow (decode + CRC)", &mut ours, Some(records)),
        side("pg_waldump --quiet", &mut theirs_quiet, None),
        side("pg_waldump --stats", &mut theirs_stats, None),
    ];
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    println!(
        "WAL parse throughput, PostgreSQL {} ({}), {:?} mix, {mb:.1} MB, {records} records ({:.0} bytes avg), {} runs each, {cores} cores",
        major,
        install.version(),
        args.mix,
        bytes as f64 / records.max(1) as f64,
        args.runs
    );
    println!("{:<28} {:>12} {:>10}", "tool", "median s", "MB/s");
    for s in &sides {
        println!(
            "{:<28} {:>12.3} {:>10.1}",
            s.tool, s.median_secs, s.mb_per_sec
        );
    }
    let ratio_quiet = sides[0].mb_per_sec / sides[1].mb_per_sec;
    let ratio_stats = sides[0].mb_per_sec / sides[2].mb_per_sec;
    println!("ratio walshadow / pg_waldump --quiet: {ratio_quiet:.2}x");
    println!("ratio walshadow / pg_waldump --stats: {ratio_stats:.2}x");
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "benchmark": "wal-parse",
            "mix": args.mix,
            "postgres": install.version(),
            "cores": cores,
            "wal_bytes": bytes,
            "records": records,
            "runs": args.runs,
            "sides": sides,
            "ratio_vs_waldump_quiet": ratio_quiet,
            "ratio_vs_waldump_stats": ratio_stats,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Writes about `mb` of WAL; returns the range.
fn generate(c: &Cluster, mb: u64, mix: Mix) -> Result<(Lsn, Lsn)> {
    if mix == Mix::Wide {
        return generate_wide(c, mb);
    }
    c.checkpoint()?;
    let start = c.insert_lsn()?;
    c.psql(
        "create table bench_narrow (id bigint primary key, a int, b int, c text);
         create table bench_wide (id bigint primary key, payload text, j jsonb, ts timestamptz default now());",
    )?;
    let target = start.0 + mb * 1_000_000;
    let mut round: u64 = 0;
    while c.insert_lsn()?.0 < target {
        let base = round * 50_000;
        c.psql(&format!(
            "insert into bench_narrow select g, g % 1000, g % 7, md5(g::text) from generate_series({}, {}) g;
             update bench_narrow set a = a + 1 where id % 3 = 0 and id > {base};
             delete from bench_narrow where id % 10 = 0 and id > {base};
             insert into bench_wide select g, repeat(md5(g::text), (g % 200) + 1), jsonb_build_object('k', g, 'v', md5(g::text))
               from generate_series({}, {}) g;",
            base + 1,
            base + 50_000,
            base + 1,
            base + 5_000,
        ))?;
        if round % 4 == 3 {
            c.checkpoint()?;
        }
        round += 1;
    }
    let end = c.insert_lsn()?;
    c.switch_wal()?;
    Ok((start, end))
}

/// Wide rows (about 2 KB of incompressible text each, so 3 to 4 per page)
/// and a checkpoint every round, so records are large and pages are logged
/// whole after each checkpoint.
fn generate_wide(c: &Cluster, mb: u64) -> Result<(Lsn, Lsn)> {
    c.checkpoint()?;
    let start = c.insert_lsn()?;
    c.psql("create table bench_rows (id bigint primary key, a text, b text, n numeric)")?;
    let target = start.0 + mb * 1_000_000;
    let mut round: u64 = 0;
    while c.insert_lsn()?.0 < target {
        let base = round * 20_000;
        c.psql(&format!(
            "insert into bench_rows select g,
                 (select string_agg(md5((g * 64 + i)::text), '') from generate_series(1, 32) i),
                 md5(g::text), g from generate_series({}, {}) g;
             update bench_rows set n = n + 1 where id % 4 = 0 and id > {base};",
            base + 1,
            base + 20_000,
        ))?;
        c.checkpoint()?;
        round += 1;
    }
    let end = c.insert_lsn()?;
    c.switch_wal()?;
    Ok((start, end))
}

fn parse_ours(dir: &std::path::Path, start: Lsn, end: Lsn) -> Result<(Duration, u64)> {
    let t = Instant::now();
    let set = SegmentSet::scan(&[dir.to_path_buf()])?;
    let tli = set
        .default_timeline(Some(start))
        .context("no segment holds the start")?;
    let mut n = 0u64;
    let mut blocks = 0usize;
    let mut records = set.records(tli, Some(start), Some(end))?;
    while let Some(rec) = records.next_ref()? {
        blocks += rec.blocks.len();
        n += 1;
    }
    std::hint::black_box(blocks);
    Ok((t.elapsed(), n))
}

fn run_waldump(
    bin: &std::path::Path,
    dir: &std::path::Path,
    start: Lsn,
    end: Lsn,
    mode: &str,
) -> Result<Duration> {
    let t = Instant::now();
    let out = Command::new(bin)
        .arg(mode)
        .arg("--path")
        .arg(dir)
        .arg("--start")
        .arg(start.to_string())
        .arg("--end")
        .arg(end.to_string())
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    let d = t.elapsed();
    if !out.status.success() {
        bail!(
            "pg_waldump {mode} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(d)
}
