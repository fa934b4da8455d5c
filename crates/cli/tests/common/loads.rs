//! Initial loads seen from outside: the ledger (`backfills.toml`), waiting
//! for a load, and the `orders` table and workload the load drills share.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use walshadow_testkit::{Lsn, wait_until};

use super::{OracleColumn, StreamHarness, col, same, tail};

pub const CATCH_UP: Duration = Duration::from_secs(180);

pub fn ledger(h: &StreamHarness) -> Result<toml::Value> {
    let text = std::fs::read_to_string(h.state_dir.join("backfills.toml")).unwrap_or_default();
    Ok(toml::from_str(&text)?)
}

/// `v[a][b]…`, `None` where a key is missing.
pub fn path<'a>(v: &'a toml::Value, keys: &[&str]) -> Option<&'a toml::Value> {
    keys.iter().try_fold(v, |v, k| v.get(*k))
}

/// Field `field` of `key`'s ledger entry.
pub fn entry(h: &StreamHarness, key: &str, field: &str) -> Result<Option<toml::Value>> {
    Ok(path(&ledger(h)?, &["table", key, field]).cloned())
}

pub fn phase(h: &StreamHarness, key: &str) -> Result<Option<String>> {
    Ok(entry(h, key, "phase")?.and_then(|p| p.as_str().map(str::to_owned)))
}

/// `key`'s `S` in the ledger.
pub fn entry_s(h: &StreamHarness, key: &str) -> Result<Lsn> {
    entry(h, key, "s")?
        .and_then(|s| s.as_str().map(str::to_owned))
        .context("no s in the ledger")?
        .parse()
        .map_err(|e| anyhow::anyhow!("S in the ledger: {e:?}"))
}

/// Waits for `key`'s load to be done, running `each` on every poll;
/// returns its `S`.
pub fn wait_loaded_with(
    h: &mut StreamHarness,
    key: &str,
    mut each: impl FnMut(&StreamHarness) -> Result<()>,
) -> Result<Lsn> {
    let mut last = None;
    let r = wait_until(CATCH_UP, &format!("the initial load of {key}"), || {
        h.check_running()?;
        each(h)?;
        last = phase(h, key)?;
        Ok(last.as_deref() == Some("done"))
    });
    if let Err(e) = r {
        anyhow::bail!(
            "{e}; phase {last:?}; ledger:\n{}\nrun log:\n{}",
            std::fs::read_to_string(h.state_dir.join("backfills.toml")).unwrap_or_default(),
            tail(&h.run_log(), 60)
        );
    }
    entry_s(h, key)
}

pub fn wait_loaded(h: &mut StreamHarness, key: &str) -> Result<Lsn> {
    wait_loaded_with(h, key, |_| Ok(()))
}

/// `orders (id bigint primary key, customer int, amount numeric(12,2),
/// note text)` compared with its ClickHouse table.
pub fn orders_cols() -> Vec<OracleColumn> {
    vec![
        same("id"),
        same("customer"),
        col("trim_scale(amount)::text", "toString(amount)"),
        col("md5(note)", "lower(hex(MD5(note)))"),
    ]
}

/// A writer on `orders` on its own thread: inserts, updates (some of the
/// TOASTed note), deletes, each its own transaction.
/// Three tables for backup loads: `orders` (3,000 rows, every 50th with a
/// TOASTed note, stored external), `dead` (deleted rows and dead update
/// versions left for the gate, a rolled-back insert; no autovacuum) and `m`
/// (100 rows, no autovacuum: for multixact lockers).
pub const ORDERS_DEAD_M_SQL: &str = "create table orders (id bigint primary key, customer int, amount numeric(12,2), note text);
     alter table orders alter column note set storage external;
     insert into orders select g, g % 100, g * 1.25, case when g % 50 = 0 then repeat(md5(g::text), 300) else 'n' || g end
       from generate_series(1, 3000) g;
     create table dead (id int primary key, v text) with (autovacuum_enabled = false);
     insert into dead select g, 'orig' from generate_series(1, 1000) g;
     delete from dead where id % 3 = 0;
     update dead set v = 'updated' where id % 3 = 1;
     begin; insert into dead values (5000, 'rolled back'); rollback;
     create table m (id int primary key, v text) with (autovacuum_enabled = false);
     insert into m select g, 'orig' from generate_series(1, 100) g;";

pub struct OrdersWorkload {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<Result<u64>>,
}

impl OrdersWorkload {
    /// Starts writing and returns once the first transactions committed.
    pub fn start(h: &StreamHarness) -> Result<OrdersWorkload> {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let source = Arc::clone(&h.source);
        let (stop_w, done_w) = (Arc::clone(&stop), Arc::clone(&done));
        let thread = std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop_w.load(Ordering::Relaxed) {
                i += 1;
                let k = (i * 37) % 3000 + 1;
                source.psql(&format!(
                    "insert into orders values ({n}, {c}, {k}.5, 'new') on conflict (id) do update set amount = orders.amount + 1;
                     update orders set customer = customer + 1 where id = {k};
                     update orders set note = repeat(md5({i}::text), 200) where id = {k2};
                     delete from orders where id = {d};",
                    n = 100_000 + i,
                    c = i % 17,
                    k2 = (k + 5) % 3000 + 1,
                    d = (k + 11) % 3000 + 1,
                ))?;
                done_w.store(i, Ordering::Relaxed);
            }
            Ok(i)
        });
        let w = OrdersWorkload { stop, done, thread };
        w.wait_more(3, "the workload to start")?;
        Ok(w)
    }

    /// Waits until `n` more transactions committed.
    pub fn wait_more(&self, n: u64, what: &str) -> Result<()> {
        let from = self.done.load(Ordering::Relaxed);
        wait_until(Duration::from_secs(60), what, || {
            Ok(self.done.load(Ordering::Relaxed) >= from + n)
        })
    }

    /// Lets a few more transactions commit, stops, and returns how many
    /// there were.
    pub fn finish(self) -> Result<u64> {
        self.wait_more(3, "more workload")?;
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("workload panicked"))?
    }
}

/// A free loopback port (for `[metrics] listen`).
pub fn free_port() -> Result<u16> {
    walshadow_testkit::free_port()
}

/// `GET /metrics` from the daemon's endpoint.
pub fn scrape(port: u16) -> Result<String> {
    http_get(port, "/metrics")
}

/// The whole HTTP/1.0 answer (status line, headers, body) to `GET path`.
pub fn http_get(port: u16, path: &str) -> Result<String> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port))?;
    c.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())?;
    let mut out = String::new();
    c.read_to_string(&mut out)?;
    Ok(out)
}
