//! Is a source snapshot at or after `S`?
//!
//! A `copy` load reads the rows that existed before the opt-in at `S` from
//! a snapshot taken after walshadow decoded `S`. That is not enough by
//! itself: a transaction is visible to snapshots only once it has left the
//! proc array, which happens after its commit record is flushed — and
//! with synchronous replication only after the standbys confirm. So the
//! stream can have decoded a commit at or before `S` that a snapshot taken
//! afterwards still sees as running; its rows would be neither loaded nor
//! streamed (they are before `S`). The stream keeps the xids of recent
//! commits with their LSNs ([`RecentCommits`]); a snapshot is accepted only
//! if every commit at or before `S` that the stream saw is visible in it
//! (not in `xip`, below `xmax`), else the load takes a new one.
//!
//! A transaction that wrote before the stream's first decoded position
//! (`init`'s backup start) and commits later reaches ClickHouse only in
//! part from the stream (what it wrote after that position): the rest must
//! come from the loads, so a load reads only once every such transaction
//! has ended ([`RecentCommits::set_horizon`], [`wait_for_horizon`]).
//!
//! Commits older than the oldest the stream remembers were decoded long
//! before the load (walshadow decodes in commit order, and the memory is
//! bounded by count): a transaction invisible that long after its commit
//! record is a stuck synchronous-replication wait, which also holds the
//! snapshot check of every other tool.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use walshadow_types::{Lsn, Xid};
use walshadow_wal_reader::replication::{ReplicationClient, ReplicationError};

/// How many commits [`RecentCommits`] keeps.
pub const RECENT_COMMITS: usize = 200_000;

/// The xids of the last commits the stream decoded, with their end LSNs.
#[derive(Debug)]
pub struct RecentCommits {
    inner: Mutex<VecDeque<(Xid, Lsn)>>,
    cap: usize,
    /// `init`'s xid horizon (xid8; 0: none, or passed).
    horizon: AtomicU64,
}

impl Default for RecentCommits {
    fn default() -> Self {
        RecentCommits::new(RECENT_COMMITS)
    }
}

impl RecentCommits {
    pub fn new(cap: usize) -> RecentCommits {
        RecentCommits {
            inner: Mutex::new(VecDeque::new()),
            cap,
            horizon: AtomicU64::new(0),
        }
    }

    /// Every transaction that wrote before the stream's first decoded
    /// position has an xid8 below `xid8` (`init` had one assigned after its
    /// backup): loads read only once none of them runs.
    pub fn set_horizon(&self, xid8: u64) {
        self.horizon.store(xid8, Ordering::Release);
    }

    /// The horizon a load must wait for, unless already passed.
    pub fn horizon(&self) -> Option<u64> {
        Some(self.horizon.load(Ordering::Acquire)).filter(|&h| h != 0)
    }

    /// A snapshot with `xmin` at or past the horizon saw it passed: no load
    /// waits for it again.
    pub fn passed(&self, xmin: u64) -> bool {
        match self.horizon() {
            Some(h) if xmin < h => false,
            Some(_) => {
                self.horizon.store(0, Ordering::Release);
                true
            }
            None => true,
        }
    }

    /// The stream decoded the commit of top-level transaction `xid`, ending
    /// at `end`.
    pub fn record(&self, xid: Xid, end: Lsn) {
        if let Ok(mut q) = self.inner.lock() {
            if q.len() >= self.cap {
                q.pop_front();
            }
            q.push_back((xid, end));
        }
    }

    /// A commit at or before `s` that `snapshot` does not see, if any.
    pub fn invisible_in(&self, snapshot: &PgSnapshot, s: Lsn) -> Option<(Xid, Lsn)> {
        let q = self.inner.lock().ok()?;
        q.iter()
            .copied()
            .find(|&(xid, end)| end <= s && !snapshot.sees(xid))
    }
}

/// How often a wait for the horizon says so.
const HORIZON_TELL_EVERY: Duration = Duration::from_secs(30);

/// Waits on `sql` (a SQL session on the source) until no transaction
/// below `recent`'s horizon runs, saying so through `tell` (the log, the
/// load's status) when it has to, at most every 30 s.
pub async fn wait_for_horizon(
    sql: &mut ReplicationClient,
    recent: &RecentCommits,
    mut tell: impl FnMut(Option<String>),
) -> Result<(), ReplicationError> {
    let mut told = None::<Instant>;
    let since = Instant::now();
    loop {
        // Passed (by this wait or another load's): a wait said is unsaid.
        if recent.horizon().is_none() {
            if told.is_some() {
                tell(None);
            }
            return Ok(());
        }
        // The oldest first: they hold the snapshot's xmin back.
        let r = sql
            .simple_query(
                "SELECT pg_snapshot_xmin(pg_current_snapshot())::text, \
                        concat_ws(', ', \
                          (SELECT string_agg(format('pid %s (xid %s, database %s)', pid, backend_xid, datname), ', ' \
                                             ORDER BY age(backend_xid) DESC) \
                             FROM (SELECT * FROM pg_stat_activity WHERE backend_xid IS NOT NULL \
                                    ORDER BY age(backend_xid) DESC LIMIT 5) a), \
                          (SELECT string_agg(format('prepared transaction %L (xid %s, database %s)', gid, transaction, database), ', ') \
                             FROM pg_prepared_xacts))",
            )
            .await?;
        let xmin: u64 = r.text(0, 0).and_then(|t| t.parse().ok()).unwrap_or(0);
        if recent.passed(xmin) {
            continue;
        }
        if told.is_none_or(|t| t.elapsed() >= HORIZON_TELL_EVERY) {
            told = Some(Instant::now());
            tell(Some(format!(
                "waiting for transactions open since before walshadow's start to end \
                 (the oldest running: {}; {:?} so far): what they wrote before it is not in \
                 the WAL walshadow decodes, so the load reads once they have ended; remedy: \
                 end them (commit or roll back; pg_terminate_backend; COMMIT PREPARED or \
                 ROLLBACK PREPARED for a prepared transaction)",
                r.text(0, 1)
                    .filter(|t| !t.is_empty())
                    .unwrap_or("none listed"),
                since.elapsed()
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `pg_current_snapshot()`: `xmin:xmax:xip,…` (xid8 values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgSnapshot {
    pub xmin: u64,
    pub xmax: u64,
    pub xip: Vec<u64>,
    xip32: HashSet<u32>,
}

impl PgSnapshot {
    pub fn parse(text: &str) -> Option<PgSnapshot> {
        let mut parts = text.trim().splitn(3, ':');
        let xmin: u64 = parts.next()?.parse().ok()?;
        let xmax: u64 = parts.next()?.parse().ok()?;
        let xip: Vec<u64> = match parts.next()? {
            "" => Vec::new(),
            list => list
                .split(',')
                .map(|x| x.parse().ok())
                .collect::<Option<_>>()?,
        };
        let xip32 = xip.iter().map(|&x| x as u32).collect();
        Some(PgSnapshot {
            xmin,
            xmax,
            xip,
            xip32,
        })
    }

    /// Whether a committed transaction `xid` (32 bits, compared modulo
    /// 2^32 around `xmax` like `TransactionIdPrecedes`) is visible.
    pub fn sees(&self, xid: Xid) -> bool {
        let xmax = self.xmax as u32;
        let before_xmax = (xid.wrapping_sub(xmax) as i32) < 0;
        before_xmax && !self.xip32.contains(&xid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_visibility() {
        let s = PgSnapshot::parse("100:110:102,105").unwrap();
        assert!(s.sees(99));
        assert!(s.sees(101));
        assert!(!s.sees(102));
        assert!(!s.sees(110));
        assert!(!s.sees(200));
        let empty = PgSnapshot::parse("7:7:").unwrap();
        assert!(empty.sees(6) && !empty.sees(7));
        assert!(PgSnapshot::parse("1:x:").is_none());
        // xid8 past the first epoch: compared by the low 32 bits.
        let wrapped = PgSnapshot::parse("4294967390:4294967400:").unwrap();
        assert!(wrapped.sees(95) && !wrapped.sees(104));
    }

    #[test]
    fn the_horizon_passes_once() {
        let r = RecentCommits::new(3);
        assert!(r.passed(5));
        r.set_horizon(100);
        assert_eq!(r.horizon(), Some(100));
        assert!(!r.passed(99));
        assert!(r.passed(100));
        assert_eq!(r.horizon(), None);
        assert!(r.passed(1));
    }

    #[test]
    fn recent_commits() {
        let r = RecentCommits::new(3);
        for (x, l) in [(100, 10), (102, 20), (105, 30), (111, 40)] {
            r.record(x, Lsn(l));
        }
        let s = PgSnapshot::parse("100:110:102,105").unwrap();
        // 100 fell out of the window; 102 committed at 20 is not seen.
        assert_eq!(r.invisible_in(&s, Lsn(25)), Some((102, Lsn(20))));
        assert_eq!(r.invisible_in(&s, Lsn(15)), None);
        let later = PgSnapshot::parse("112:112:").unwrap();
        assert_eq!(r.invisible_in(&later, Lsn(40)), None);
    }
}
