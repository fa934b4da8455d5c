//! CPU and memory of the processes a benchmark runs next to, from
//! `/proc` (proc(5)): `stat` for utime/stime (in clock ticks, USER_HZ =
//! 100 on Linux), `schedstat` for ns on CPU, `status` for `VmRSS`/`VmHWM`.

use std::path::Path;

use walshadow_testkit::{Cluster, Walshadow};

/// USER_HZ: the unit of `stat`'s time fields.
pub const TICKS_PER_SEC: f64 = 100.0;

/// The fields of `/proc/<pid>/stat` after the command name (state first,
/// so an index is proc(5)'s field number minus 3).
pub fn proc_stat(pid: u32) -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

fn parse_stat(stat: &str) -> Option<Vec<u64>> {
    // The command may hold spaces and parentheses: it ends at the last ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    // The state is a letter; it keeps its slot as 0.
    Some(
        rest.split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect(),
    )
}

/// utime + stime (all threads) of `pid`, seconds.
pub fn own_cpu(pid: u32) -> Option<f64> {
    let f = proc_stat(pid)?;
    Some((f.get(11)? + f.get(12)?) as f64 / TICKS_PER_SEC)
}

/// utime + stime + cutime + cstime (reaped children included), seconds.
pub fn reaped_cpu(pid: u32) -> Option<f64> {
    let f = proc_stat(pid)?;
    Some((f.get(11)? + f.get(12)? + f.get(13)? + f.get(14)?) as f64 / TICKS_PER_SEC)
}

/// cutime + cstime of this program: the children it has waited for
/// (pgbench, psql), seconds.
pub fn waited_children_cpu() -> f64 {
    proc_stat(std::process::id())
        .and_then(|f| Some((f.get(13)? + f.get(14)?) as f64 / TICKS_PER_SEC))
        .unwrap_or(0.0)
}

/// ns on CPU of the process or thread at `dir` (`/proc/<pid>`), from
/// `schedstat`, else (a kernel without schedstats) `stat`'s utime + stime.
pub fn proc_cpu_ns(dir: &Path) -> Option<u64> {
    if let Ok(s) = std::fs::read_to_string(dir.join("schedstat"))
        && let Some(ns) = s.split_whitespace().next().and_then(|v| v.parse().ok())
    {
        return Some(ns);
    }
    let f = parse_stat(&std::fs::read_to_string(dir.join("stat")).ok()?)?;
    Some((f.get(11)? + f.get(12)?) * (1e9 / TICKS_PER_SEC) as u64)
}

/// A postmaster's CPU: its own, its reaped children's, and its live
/// children's (backends, walsenders, background workers), seconds.
pub fn postmaster_cpu(data_dir: &Path) -> f64 {
    let Some(pid) = std::fs::read_to_string(data_dir.join("postmaster.pid"))
        .ok()
        .and_then(|s| s.lines().next()?.trim().parse::<u32>().ok())
    else {
        return 0.0;
    };
    let mut total = reaped_cpu(pid).unwrap_or(0.0);
    for child in children_of(pid) {
        total += reaped_cpu(child).unwrap_or(0.0);
    }
    total
}

/// The live processes whose parent is `ppid`.
pub fn children_of(ppid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| proc_stat(pid).and_then(|f| f.get(1).copied()) == Some(u64::from(ppid)))
        .collect()
}

/// The ClickHouse engine's process (`clickhouse_engine.py --port PORT`).
pub fn find_engine_pid(port: u16) -> Option<u32> {
    let port = port.to_string();
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let args: Vec<&[u8]> = c.split(|&b| b == 0).collect();
                args.iter().any(|a| a.ends_with(b"clickhouse_engine.py"))
                    && args
                        .windows(2)
                        .any(|w| w[0] == b"--port" && w[1] == port.as_bytes())
            })
        })
}

/// A `kB` line of `/proc/<pid>/status` (`VmRSS`, `VmHWM`).
pub fn proc_status_kb(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Cumulative CPU seconds of each party of an end-to-end run.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct CpuSplit {
    /// The source's postmaster with its reaped and live children.
    pub source_postgres: f64,
    /// This program's waited-for children: pgbench and the psql runs.
    pub pgbench_and_psql: f64,
    pub clickhouse_engine: Option<f64>,
    pub walshadow: f64,
    /// The shadow's postmaster with its children.
    pub shadow_postgres: f64,
}

impl CpuSplit {
    /// Each party's CPU so far.
    pub fn now(cluster: &Cluster, daemon: &Walshadow, engine_pid: Option<u32>) -> CpuSplit {
        CpuSplit {
            source_postgres: postmaster_cpu(&cluster.data_dir()),
            pgbench_and_psql: waited_children_cpu(),
            clickhouse_engine: engine_pid.and_then(own_cpu),
            walshadow: daemon.run_pid().and_then(own_cpu).unwrap_or(0.0),
            shadow_postgres: postmaster_cpu(daemon.shadow_dir()),
        }
    }

    /// What each party spent from `earlier` to `self`.
    pub fn since(&self, earlier: &CpuSplit) -> CpuSplit {
        CpuSplit {
            source_postgres: self.source_postgres - earlier.source_postgres,
            pgbench_and_psql: self.pgbench_and_psql - earlier.pgbench_and_psql,
            clickhouse_engine: self
                .clickhouse_engine
                .zip(earlier.clickhouse_engine)
                .map(|(b, a)| b - a),
            walshadow: self.walshadow - earlier.walshadow,
            shadow_postgres: self.shadow_postgres - earlier.shadow_postgres,
        }
    }
}
