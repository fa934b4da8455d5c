//! Whether the shadow's postmaster is up, read from its lock file.
//!
//! `pg_ctl start -W` returns before the postmaster has read its settings, and
//! a hot standby does not accept connections until it is consistent (which
//! needs WAL the feeder has not sent yet), so neither `pg_ctl -w` nor a
//! connection can tell "starting" from "already stopped". `postmaster.pid`
//! can: the postmaster writes it before it reads `pg_control`, adds the
//! status line (`starting`, `standby`, `ready`) once shared memory is up,
//! and removes it when it exits.

use std::path::Path;
use std::time::{Duration, Instant};

/// `LOCK_FILE_LINE_PM_STATUS` in miscadmin.h (1-based).
const PM_STATUS_LINE: usize = 8;

/// What the lock file says about the postmaster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Postmaster {
    /// No lock file: not started yet, or stopped.
    Absent,
    /// The lock file names a live process that has not set a status yet
    /// (still checking its settings and `pg_control`).
    Checking(u32),
    /// A live process past its start-up checks (status `starting`,
    /// `standby` or `ready`).
    Up(u32),
    /// The lock file names a process that no longer exists (killed without
    /// removing it).
    Gone(u32),
    /// The lock file cannot be read or parsed (permissions, a partial
    /// write): treated as up, never as a reason to restart.
    Unknown,
}

impl Postmaster {
    /// Reads `<data_dir>/postmaster.pid`.
    pub fn read(data_dir: &Path) -> Postmaster {
        let text = match std::fs::read_to_string(data_dir.join("postmaster.pid")) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Postmaster::Absent,
            Err(_) => return Postmaster::Unknown,
        };
        Self::parse(&text, process_exists)
    }

    fn parse(text: &str, exists: impl Fn(u32) -> Option<bool>) -> Postmaster {
        let mut lines = text.lines();
        // A standalone backend writes its pid negated.
        let Some(pid) = lines.next().and_then(|l| l.trim().parse::<u32>().ok()) else {
            return Postmaster::Unknown;
        };
        match exists(pid) {
            Some(false) => return Postmaster::Gone(pid),
            None => return Postmaster::Unknown,
            Some(true) => {}
        }
        let status = text.lines().nth(PM_STATUS_LINE - 1).map(str::trim);
        match status {
            Some(s) if !s.is_empty() => Postmaster::Up(pid),
            _ => Postmaster::Checking(pid),
        }
    }

    /// The process the lock file names, when there is one.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Postmaster::Checking(p) | Postmaster::Up(p) | Postmaster::Gone(p) => Some(*p),
            Postmaster::Absent | Postmaster::Unknown => None,
        }
    }

    /// Running or about to: not a reason to start it again.
    pub fn is_alive(&self) -> bool {
        matches!(
            self,
            Postmaster::Checking(_) | Postmaster::Up(_) | Postmaster::Unknown
        )
    }
}

/// Whether process `pid` exists (`None` where `/proc` is not there to say).
fn process_exists(pid: u32) -> Option<bool> {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return None;
    }
    Some(proc.join(pid.to_string()).exists())
}

/// Waits until a just-started postmaster is past its start-up checks, or
/// has stopped. `Ok(())` once it is up; `Err(state)` when it stopped (or
/// never wrote its lock file within `patience`).
pub async fn await_started(data_dir: &Path, patience: Duration) -> Result<(), Postmaster> {
    let deadline = Instant::now() + patience;
    loop {
        let state = Postmaster::read(data_dir);
        match state {
            Postmaster::Up(_) | Postmaster::Unknown => return Ok(()),
            Postmaster::Gone(_) => return Err(state),
            Postmaster::Absent | Postmaster::Checking(_) if Instant::now() >= deadline => {
                // Still checking after all this time is slow, not dead.
                return if state == Postmaster::Absent {
                    Err(state)
                } else {
                    Ok(())
                };
            }
            Postmaster::Absent | Postmaster::Checking(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The last `n` lines of a log file (empty when it cannot be read).
pub fn log_tail(path: &Path, n: usize) -> String {
    let Ok(bytes) = std::fs::read(path) else {
        return String::new();
    };
    // Only the end matters; a long-running shadow's log can be large.
    let start = bytes.len().saturating_sub(64 * 1024);
    let text = String::from_utf8_lossy(bytes.get(start..).unwrap_or_default());
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// How often the shadow may be started again after stopping on its own
/// before `run` gives up: more than [`RestartBudget::MAX`] restarts within
/// [`RestartBudget::WINDOW`] means something keeps killing it.
#[derive(Debug, Default)]
pub struct RestartBudget {
    recent: Vec<Instant>,
}

impl RestartBudget {
    pub const MAX: usize = 3;
    pub const WINDOW: Duration = Duration::from_secs(600);

    /// Records a restart at `now`; false when the budget is spent.
    pub fn take(&mut self, now: Instant) -> bool {
        self.recent
            .retain(|t| now.saturating_duration_since(*t) < Self::WINDOW);
        if self.recent.len() >= Self::MAX {
            return false;
        }
        self.recent.push(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from a shadow (PostgreSQL 15, consistent, so `ready`), and
    // the same before the postmaster set a status.
    const STANDBY: &str = "2053\n/tmp/walshadow-stream-crash-pg15-32077/shadow\n1795977952\n41663\n/tmp/walshadow-stream-crash-pg15-32077/state/shadow-socket\n\n 10873289  11108414\nready   \n";
    const CHECKING: &str = "2053\n/tmp/walshadow-stream-crash-pg15-32077/shadow\n1795977952\n41663\n/tmp/walshadow-stream-crash-pg15-32077/state/shadow-socket\n\n";

    #[test]
    fn reads_the_lock_file() {
        assert_eq!(
            Postmaster::parse(STANDBY, |_| Some(true)),
            Postmaster::Up(2053)
        );
        assert_eq!(
            Postmaster::parse(CHECKING, |_| Some(true)),
            Postmaster::Checking(2053)
        );
        assert_eq!(
            Postmaster::parse(STANDBY, |_| Some(false)),
            Postmaster::Gone(2053)
        );
        assert_eq!(Postmaster::parse(STANDBY, |_| None), Postmaster::Unknown);
        assert_eq!(Postmaster::parse("", |_| Some(true)), Postmaster::Unknown);
        assert_eq!(
            Postmaster::parse("-4242\n", |_| Some(true)),
            Postmaster::Unknown
        );
        assert_eq!(Postmaster::Up(7).pid(), Some(7));
        assert_eq!(Postmaster::Absent.pid(), None);
        assert!(!Postmaster::Gone(1).is_alive());
        assert!(!Postmaster::Absent.is_alive());
        assert!(Postmaster::Unknown.is_alive());
    }

    #[test]
    fn restart_budget() {
        let t0 = Instant::now();
        let mut b = RestartBudget::default();
        for i in 0..RestartBudget::MAX {
            assert!(b.take(t0 + Duration::from_secs(i as u64)));
        }
        assert!(!b.take(t0 + Duration::from_secs(10)));
        // Old restarts fall out of the window.
        assert!(b.take(t0 + RestartBudget::WINDOW + Duration::from_secs(1)));
    }

    #[test]
    fn tail_of_a_log() {
        let dir = std::env::temp_dir().join(format!("walshadow-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("shadow.log");
        std::fs::write(&log, "a\nb\nc\nd\n").unwrap();
        assert_eq!(log_tail(&log, 2), "c\nd");
        assert_eq!(log_tail(&log, 10), "a\nb\nc\nd");
        assert_eq!(log_tail(&dir.join("none"), 3), "");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
