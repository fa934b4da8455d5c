//! A transaction ten times the memory budget streams with walshadow's
//! peak resident memory under the budget plus a stated overhead.
//!
//! Default: a 64 MB budget and a 640 MB transaction, on PostgreSQL 15 and
//! 18. The heavier drill of docs/operator-guide.md sets
//! `WALSHADOW_BIG_TXN_MB=2048` (and optionally `WALSHADOW_BUDGET_MB`).

mod common;

use std::time::{Duration, Instant};
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use common::{BIN, StreamHarness, col, same};
use walshadow_testkit::PgMajor;

/// What walshadow holds besides the transaction buffers: the raw-WAL queue
/// between feed and pipeline (64 × 128 KiB), two ClickHouse batches per
/// table (16 MiB each: one filling while one is inserted), decoder and
/// filter buffers, the binary itself (~30 MB), and what glibc's malloc keeps
/// of freed memory (the heap in use peaked at 73 MB under heaptrack while
/// resident memory stood about 90 MB higher, binary included).
const OVERHEAD_MB: u64 = 112;

fn env_mb(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// `VmHWM` (peak resident set) of process `pid`, in MB.
fn peak_rss_mb(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .context("no VmHWM")?;
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .context("VmHWM value")?
        .parse()?;
    Ok(kb / 1024)
}

fn big_transaction(major: PgMajor) -> Result<()> {
    let budget = env_mb("WALSHADOW_BUDGET_MB", 64);
    let txn_mb = env_mb("WALSHADOW_BIG_TXN_MB", budget * 10);
    let mut h = StreamHarness::new(
        BIN,
        major,
        "memory",
        &["public.big"],
        &format!("[stream]\nmemory_mb = {budget}\n"),
    )?;
    h.source
        .psql("create table big (id bigint primary key, payload text not null, n int)")?;
    h.init()?;
    h.start_run()?;
    h.wait_caught_up(Duration::from_secs(120))?;
    // Rows of ~700 bytes of WAL each (not TOASTed, not compressed).
    let rows = txn_mb * 1024 * 1024 / 700;
    let started = Instant::now();
    let before = h.source.current_lsn()?;
    h.source.psql(&format!(
        "insert into big select g, repeat(md5(g::text), 20), g % 1000 from generate_series(1, {rows}) g"
    ))?;
    let wal_mb = h.source.current_lsn()?.0.saturating_sub(before.0) / (1 << 20);
    h.wait_caught_up(Duration::from_secs(1800))?;
    let elapsed = started.elapsed();
    let pid = h.run_pid().context("run")?;
    let peak = peak_rss_mb(pid)?;
    let spill = std::fs::read_to_string(h.state_dir.join("status.json")).unwrap_or_default();
    eprintln!(
        "pg{}: one transaction of {rows} rows ({wal_mb} MB of WAL) with a {budget} MB budget: \
         walshadow peak RSS {peak} MB (bound: budget + {OVERHEAD_MB} MB overhead), \
         source to ClickHouse in {:.1} s",
        major.number(),
        elapsed.as_secs_f64()
    );
    ensure!(
        wal_mb >= txn_mb,
        "the transaction wrote only {wal_mb} MB of WAL, wanted {txn_mb} MB"
    );
    ensure!(
        peak <= budget + OVERHEAD_MB,
        "walshadow's peak RSS {peak} MB exceeds the {budget} MB budget + {OVERHEAD_MB} MB\n{spill}"
    );
    let n = h.assert_equal(
        "public.big",
        "big",
        &[
            same("id"),
            col("md5(payload)", "lower(hex(MD5(payload)))"),
            same("n"),
        ],
    )?;
    ensure!(n as u64 == rows, "{n} rows, wanted {rows}");
    let leftovers: Vec<_> = std::fs::read_dir(h.state_dir.join("spill"))?
        .filter_map(|e| e.ok())
        .collect();
    ensure!(
        leftovers.is_empty(),
        "spill files left behind: {leftovers:?}"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(big_transaction => transaction_ten_times_the_budget: pg15, pg18);
