//! Polling with a deadline, so tests wait for a condition rather than for a guess.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// Calls `check` until it returns `Ok(true)`, for at most `timeout`.
///
/// An `Err` from `check` is remembered and polling goes on (the server may still be
/// starting); on timeout the error names `what` and carries the last such error.
pub fn wait_until(
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(10);
    loop {
        let last_err = match check() {
            Ok(true) => return Ok(()),
            Ok(false) => None,
            Err(e) => Some(e),
        };
        if start.elapsed() >= timeout {
            match last_err {
                Some(e) => {
                    bail!("timed out after {timeout:?} waiting for {what}; last error: {e:#}")
                }
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        std::thread::sleep(pause.min(timeout.saturating_sub(start.elapsed())));
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_when_condition_holds() {
        let mut n = 0;
        wait_until(Duration::from_secs(5), "n to reach 3", || {
            n += 1;
            Ok(n >= 3)
        })
        .unwrap();
        assert_eq!(n, 3);
    }

    #[test]
    fn timeout_names_what_and_last_error() {
        let err = wait_until(Duration::from_millis(50), "the moon", || {
            anyhow::bail!("cloudy")
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("the moon") && err.contains("cloudy"), "{err}");
    }
}
