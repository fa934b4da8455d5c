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
//! Commits older than the oldest the stream remembers were decoded long
//! before the load (walshadow decodes in commit order, and the memory is
//! bounded by count): a transaction invisible that long after its commit
//! record is a stuck synchronous-replication wait, which also holds the
//! snapshot check of every other tool.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use walshadow_types::{Lsn, Xid};

/// How many commits [`RecentCommits`] keeps.
pub const RECENT_COMMITS: usize = 200_000;

/// The xids of the last commits the stream decoded, with their end LSNs.
#[derive(Debug)]
pub struct RecentCommits {
    inner: Mutex<VecDeque<(Xid, Lsn)>>,
    cap: usize,
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
