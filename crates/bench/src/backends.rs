//! The source's backends that walshadow opens, told apart by their
//! `application_name`, and the CPU they spend.
//!
//! A monitor session looks them up in `pg_stat_activity` every 100 ms
//! (walsenders are listed there too, with `backend_type = 'walsender'`);
//! each one found is then read every 10 ms (`/proc/<pid>/schedstat`) until
//! it exits, so a backend's figure is short by at most one reading, and a
//! backend that lives less than 100 ms may be missed. A pid is keyed with
//! its start time, so one the kernel hands to another process later is not
//! counted twice.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use walshadow_testkit::Cluster;

use crate::procfs::{proc_cpu_ns, proc_stat};
use crate::source::sql_session;

/// The backends of one `application_name`.
#[derive(Debug, Clone)]
pub struct Backends {
    pub application_name: String,
    /// `backend_type`s seen (`client backend`, `walsender`).
    pub backend_types: Vec<String>,
    pub sessions: usize,
    pub cpu_secs: f64,
    /// When the first of them was found.
    pub first_seen: Option<Instant>,
    /// The last reading at which one of them was still alive.
    pub last_alive: Option<Instant>,
}

struct Seen {
    app: usize,
    /// Start time (ticks since boot): `stat`'s field 22.
    started: u64,
    ns: u64,
}

/// Until `stop`: the backends whose `application_name` is one of `apps`,
/// and their CPU; one [`Backends`] per name, in the order given. The
/// monitor's own backend (it costs the source CPU too) is stored in
/// `monitor_pid` once connected.
pub fn sample_backends(
    cluster: &Cluster,
    apps: &[&str],
    stop: &AtomicBool,
    monitor_pid: &AtomicU32,
) -> Result<Vec<Backends>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut sql = rt.block_on(sql_session(cluster, "load-bench-monitor"))?;
    let me = rt.block_on(sql.simple_query("select pg_backend_pid()"))?;
    if let Some(pid) = me.text(0, 0).and_then(|t| t.parse().ok()) {
        monitor_pid.store(pid, Ordering::Relaxed);
    }
    let names = apps
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', "''")))
        .collect::<Vec<_>>()
        .join(", ");
    let query = format!(
        "select pid, application_name, backend_type from pg_stat_activity where application_name in ({names})"
    );
    let mut out: Vec<Backends> = apps
        .iter()
        .map(|a| Backends {
            application_name: (*a).to_owned(),
            backend_types: Vec::new(),
            sessions: 0,
            cpu_secs: 0.0,
            first_seen: None,
            last_alive: None,
        })
        .collect();
    let mut seen: BTreeMap<u32, Seen> = BTreeMap::new();
    let started = |pid: u32| proc_stat(pid).and_then(|f| f.get(19).copied());
    for tick in 0u64.. {
        let stopping = stop.load(Ordering::Relaxed);
        if tick % 10 == 0 || stopping {
            let r = rt.block_on(sql.simple_query(&query))?;
            for i in 0..r.rows.len() {
                let Some(pid) = r.text(i, 0).and_then(|t| t.parse().ok()) else {
                    continue;
                };
                let Some(app) = r.text(i, 1).and_then(|n| apps.iter().position(|a| *a == n)) else {
                    continue;
                };
                if seen.contains_key(&pid) {
                    continue;
                }
                let Some(start) = started(pid) else {
                    continue;
                };
                seen.insert(
                    pid,
                    Seen {
                        app,
                        started: start,
                        ns: 0,
                    },
                );
                if let Some(b) = out.get_mut(app) {
                    b.sessions += 1;
                    b.first_seen.get_or_insert_with(Instant::now);
                    if let Some(t) = r.text(i, 2)
                        && !b.backend_types.iter().any(|k| k == t)
                    {
                        b.backend_types.push(t.to_owned());
                    }
                }
            }
        }
        let now = Instant::now();
        for (&pid, s) in seen.iter_mut() {
            if started(pid) == Some(s.started)
                && let Some(ns) = proc_cpu_ns(Path::new(&format!("/proc/{pid}")))
            {
                s.ns = ns;
                if let Some(b) = out.get_mut(s.app) {
                    b.last_alive = Some(now);
                }
            }
        }
        if stopping {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    rt.block_on(sql.close());
    for s in seen.values() {
        if let Some(b) = out.get_mut(s.app) {
            b.cpu_secs += s.ns as f64 / 1e9;
        }
    }
    Ok(out)
}
