//! Transaction assembler throughput: `add` then `commit` and streaming the
//! committed transaction back, once with a budget that holds everything in
//! memory and once with a small one that spills nearly all of it.
//!
//! ```text
//! cargo run --release -p walshadow-bench --bin txn-assembly-bench
//! ```
//!
//! The workload is `--txns` transactions of `--txn-changes` changes of
//! `--payload-bytes` each; a third of each transaction's changes go to
//! two subtransactions, so the commit merges three buffers. Each path runs
//! `--runs` times; the figures are the median. Needs nothing but a
//! writable spill directory.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use walshadow_txn::{Assembler, AssemblerConfig, CHANGE_OVERHEAD};
use walshadow_types::{Lsn, Xid};

#[derive(Debug, Parser)]
#[command(about = "Transaction assembler throughput: in-memory and spilled paths")]
struct Args {
    /// Transactions per run.
    #[arg(long, default_value_t = 20)]
    txns: u64,
    /// Changes per transaction.
    #[arg(long, default_value_t = 50_000)]
    txn_changes: u64,
    /// Payload bytes per change.
    #[arg(long, default_value_t = 128)]
    payload_bytes: usize,
    /// Memory budget of the spilled path, in KiB.
    #[arg(long, default_value_t = 1024)]
    spill_budget_kib: usize,
    /// Spill directory (default: a fresh directory under the system temp
    /// dir, removed afterwards). Spill files already in it are deleted.
    #[arg(long)]
    spill_dir: Option<PathBuf>,
    /// Runs per path.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Also write the figures as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, serde::Serialize)]
struct Figures {
    path: &'static str,
    budget_bytes: usize,
    changes: u64,
    payload_mb: f64,
    add_median_secs: f64,
    commit_stream_median_secs: f64,
    changes_per_sec: f64,
    mb_per_sec: f64,
    peak_memory_bytes: usize,
    spilled_mb: f64,
}

struct Run {
    add: Duration,
    stream: Duration,
    peak: usize,
    spilled: u64,
}

fn one_run(args: &Args, dir: &std::path::Path, budget: usize) -> Result<Run> {
    let mut asm = Assembler::open(AssemblerConfig {
        memory_budget_bytes: budget,
        spill_dir: dir.to_path_buf(),
    })?;
    let payload: Vec<u8> = (0..args.payload_bytes).map(|i| i as u8).collect();
    let (mut add, mut stream) = (Duration::ZERO, Duration::ZERO);
    let (mut lsn, mut spilled, mut checksum) = (0x1_0000_0000u64, 0u64, 0u64);
    for t in 0..args.txns {
        let top = 1000 + (t as Xid) * 3;
        let subs = [top + 1, top + 2];
        let start = Instant::now();
        for i in 0..args.txn_changes {
            // Runs of 1000 changes: top, sub 1, top, sub 2, ...
            let xid = match (i / 1000) % 4 {
                1 => subs[0],
                3 => subs[1],
                _ => top,
            };
            asm.add(xid, Lsn(lsn), &payload)?;
            lsn += 64;
        }
        add += start.elapsed();
        spilled = spilled.max(asm.spilled_bytes());
        let start = Instant::now();
        for item in asm.commit(top, &subs)? {
            let (l, p) = item?;
            checksum = checksum.wrapping_add(l.0 ^ p.len() as u64);
        }
        stream += start.elapsed();
    }
    // Keeps the loop from being optimised away.
    anyhow::ensure!(checksum != 0, "no changes streamed");
    Ok(Run {
        add,
        stream,
        peak: asm.memory_peak(),
        spilled,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let dir = args.spill_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("walshadow-txn-bench-{}", std::process::id()))
    });
    let changes = args.txns * args.txn_changes;
    let payload_mb = (changes as f64) * args.payload_bytes as f64 / 1e6;
    // One transaction at a time is buffered: this holds any of them.
    let in_memory_budget = (args.txn_changes as usize) * (args.payload_bytes + CHANGE_OVERHEAD) * 2;
    let paths = [
        ("in-memory", in_memory_budget),
        ("spilled", args.spill_budget_kib * 1024),
    ];

    println!(
        "{} transactions x {} changes x {} B payload ({changes} changes, {payload_mb:.1} MB), median of {} runs",
        args.txns, args.txn_changes, args.payload_bytes, args.runs
    );
    println!(
        "{:<10} {:>10} {:>9} {:>9} {:>12} {:>9} {:>10} {:>10}",
        "path", "budget KiB", "add s", "commit s", "changes/s", "MB/s", "peak KiB", "spilled MB"
    );
    let mut all = Vec::new();
    for (name, budget) in paths {
        let mut runs = Vec::new();
        for _ in 0..args.runs.max(1) {
            runs.push(
                one_run(&args, &dir, budget)
                    .with_context(|| format!("{name} run in {}", dir.display()))?,
            );
        }
        let add = median(runs.iter().map(|r| r.add.as_secs_f64()).collect());
        let stream = median(runs.iter().map(|r| r.stream.as_secs_f64()).collect());
        let total = median(
            runs.iter()
                .map(|r| (r.add + r.stream).as_secs_f64())
                .collect(),
        );
        let f = Figures {
            path: name,
            budget_bytes: budget,
            changes,
            payload_mb,
            add_median_secs: add,
            commit_stream_median_secs: stream,
            changes_per_sec: changes as f64 / total,
            mb_per_sec: payload_mb / total,
            peak_memory_bytes: runs.iter().map(|r| r.peak).max().unwrap_or(0),
            spilled_mb: runs.iter().map(|r| r.spilled).max().unwrap_or(0) as f64 / 1e6,
        };
        println!(
            "{:<10} {:>10} {:>9.3} {:>9.3} {:>12.0} {:>9.1} {:>10} {:>10.1}",
            f.path,
            f.budget_bytes / 1024,
            f.add_median_secs,
            f.commit_stream_median_secs,
            f.changes_per_sec,
            f.mb_per_sec,
            f.peak_memory_bytes / 1024,
            f.spilled_mb
        );
        all.push(f);
    }
    if args.spill_dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&all)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
