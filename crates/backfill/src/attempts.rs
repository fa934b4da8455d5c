//! The attempt loop both loads run (`copy` per table, `base_backup` per
//! pass): how an attempt failed, which failures count against
//! `max_attempts`, and the pause before the next one.

use std::time::Duration;

/// How an attempt ended when it did not succeed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AttemptError {
    /// What the attempt rested on no longer fits (a rewrite, a re-created
    /// table, a torn page): a new snapshot or backup soon.
    #[error("{0}")]
    Retry(String),
    /// Anything else; retried after a longer pause, progress kept.
    #[error("{0}")]
    Failed(String),
    /// The source or ClickHouse cannot be reached or refuses for now (a
    /// connection lost, too many clients, a shutdown, ClickHouse down or out
    /// of space): retried with backoff for as long as it lasts, not counted
    /// against `max_attempts`, progress kept.
    #[error("{0}")]
    Waiting(String),
}

impl AttemptError {
    /// `Waiting` when what failed may pass by itself (`waits`), else
    /// `Failed`.
    pub(crate) fn of(waits: bool, why: impl std::fmt::Display) -> AttemptError {
        if waits {
            AttemptError::Waiting(why.to_string())
        } else {
            AttemptError::Failed(why.to_string())
        }
    }
}

/// What the load does after a failed attempt.
#[derive(Debug)]
pub(crate) struct Setback {
    /// What went wrong.
    pub(crate) why: String,
    /// Whether the failure waited on the source or ClickHouse (no attempt
    /// used up).
    pub(crate) waiting: bool,
    pub(crate) pause: Duration,
}

impl Setback {
    /// The table entry's `error`, as `table list` shows it.
    pub(crate) fn recorded(&self) -> String {
        if self.waiting {
            format!("waiting: {}", self.why)
        } else {
            self.why.clone()
        }
    }
}

/// The count of one load's attempts.
#[derive(Debug)]
pub(crate) struct Attempts {
    max: u32,
    used: u32,
    /// Waiting failures in a row, for their backoff.
    waits: u32,
    last: String,
    retry_pause: Duration,
    failed_pause: fn(u32) -> Duration,
}

impl Attempts {
    /// `max` attempts; after a [`AttemptError::Retry`] the load pauses
    /// `retry_pause`, after a failure `failed_pause(attempts so far)`.
    pub(crate) fn new(max: u32, retry_pause: Duration, failed_pause: fn(u32) -> Duration) -> Self {
        Self {
            max,
            used: 0,
            waits: 0,
            last: String::new(),
            retry_pause,
            failed_pause,
        }
    }

    /// Starts the next attempt, numbered from 1; `None` once `max` failed.
    pub(crate) fn start(&mut self) -> Option<u32> {
        (self.used < self.max).then(|| {
            self.used += 1;
            self.used
        })
    }

    /// Attempts used up so far.
    pub(crate) fn used(&self) -> u32 {
        self.used
    }

    /// The last failure's message (empty before one).
    pub(crate) fn last(&self) -> &str {
        &self.last
    }

    /// Records how the current attempt failed and says what comes next. A
    /// wait hands its attempt back: it was not the table's fault.
    pub(crate) fn failed(&mut self, e: AttemptError) -> Setback {
        match e {
            AttemptError::Waiting(why) => {
                self.used = self.used.saturating_sub(1);
                let pause = waiting_backoff(self.waits);
                self.waits = self.waits.saturating_add(1);
                Setback {
                    why,
                    waiting: true,
                    pause,
                }
            }
            AttemptError::Retry(why) => self.counted(why, self.retry_pause),
            AttemptError::Failed(why) => {
                let pause = (self.failed_pause)(self.used);
                self.counted(why, pause)
            }
        }
    }

    fn counted(&mut self, why: String, pause: Duration) -> Setback {
        self.waits = 0;
        self.last.clone_from(&why);
        Setback {
            why,
            waiting: false,
            pause,
        }
    }
}

/// Pause before a load's next try after `waits` tries in a row that met
/// the source or ClickHouse not ready (not counted as attempts): 1 s,
/// doubling, at most 30 s.
pub(crate) fn waiting_backoff(waits: u32) -> Duration {
    walshadow_types::Backoff::new(Duration::from_secs(1), Duration::from_secs(30)).after(waits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_backs_off_and_hands_its_attempt_back() {
        assert_eq!(waiting_backoff(0), Duration::from_secs(1));
        assert_eq!(waiting_backoff(3), Duration::from_secs(8));
        assert_eq!(waiting_backoff(40), Duration::from_secs(30));

        let mut a = Attempts::new(2, Duration::from_millis(5), |n| {
            Duration::from_secs(n.into())
        });
        assert_eq!(a.start(), Some(1));
        let s = a.failed(AttemptError::Waiting("ClickHouse down".into()));
        assert!(s.waiting);
        assert_eq!(s.recorded(), "waiting: ClickHouse down");
        assert_eq!(s.pause, Duration::from_secs(1));
        assert_eq!(a.last(), "");
        // The wait used nothing up: still two attempts, and waits back off.
        assert_eq!(a.start(), Some(1));
        assert_eq!(
            a.failed(AttemptError::Waiting("x".into())).pause,
            Duration::from_secs(2)
        );
        assert_eq!(a.start(), Some(1));
        let s = a.failed(AttemptError::Retry("rewritten".into()));
        assert_eq!((s.waiting, s.pause), (false, Duration::from_millis(5)));
        assert_eq!(a.start(), Some(2));
        let s = a.failed(AttemptError::Failed("bad".into()));
        assert_eq!(s.pause, Duration::from_secs(2));
        assert_eq!((a.last(), a.used()), ("bad", 2));
        assert_eq!(a.start(), None);
        // A failure resets the wait backoff.
        let mut b = Attempts::new(3, Duration::ZERO, |_| Duration::ZERO);
        b.start();
        b.failed(AttemptError::Waiting("x".into()));
        b.start();
        b.failed(AttemptError::Failed("y".into()));
        b.start();
        assert_eq!(
            b.failed(AttemptError::Waiting("z".into())).pause,
            Duration::from_secs(1)
        );
    }
}
