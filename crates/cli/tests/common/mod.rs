//! What the cli drills share beyond the test kit's stream harness
//! ([`walshadow_testkit::stream_harness`]): the `walshadow` binary this
//! crate builds (with the drills' failpoints compiled in), which every
//! harness is given, and the initial-load helpers in [`loads`].

// Each test file uses a subset.
#![allow(dead_code, unused_imports)]

pub use walshadow_testkit::daemon::tail;
pub use walshadow_testkit::oracle::{OracleColumn, col, same};
pub use walshadow_testkit::stream_harness::{StreamHarness, source_options};

pub mod loads;
pub mod stores;

pub const BIN: &str = env!("CARGO_BIN_EXE_walshadow");

/// Sessions holding every client slot of a source, for drills of a source
/// that refuses new sessions (`53300`).
pub struct FullSource {
    holders: Vec<std::thread::JoinHandle<()>>,
}

/// Fills every client slot of `source` (its `max_connections` is low in
/// such drills) with `select pg_sleep(hold)` sessions and returns once a
/// new session is refused. A holder refused while the source was not yet
/// full (the probe had a slot for a moment, say) tries again, so a busy
/// machine that starts them slowly still fills it.
pub fn fill_source(
    source: &std::sync::Arc<walshadow_testkit::Cluster>,
    holders: usize,
    hold: std::time::Duration,
) -> anyhow::Result<FullSource> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let full = std::sync::Arc::new(AtomicBool::new(false));
    let sql = format!("select pg_sleep({})", hold.as_secs_f64());
    let holders = (0..holders)
        .map(|_| {
            let (source, full, sql) = (source.clone(), full.clone(), sql.clone());
            std::thread::spawn(move || {
                while source.psql(&sql).is_err() && !full.load(Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
            })
        })
        .collect();
    let filled = walshadow_testkit::wait_until(
        std::time::Duration::from_secs(90),
        "the source to refuse new sessions",
        || match source.psql("select 1") {
            Ok(_) => Ok(false),
            Err(e) => Ok(format!("{e:#}").contains("too many clients")),
        },
    );
    full.store(true, Ordering::Relaxed);
    filled?;
    Ok(FullSource { holders })
}

impl FullSource {
    /// Waits for every holding session to end.
    pub fn release(self) {
        for holder in self.holders {
            let _ = holder.join();
        }
    }
}
