//! The drills' failpoints: the places where a test makes `walshadow run`
//! crash as `kill -9` would, or hold until the test lets it go. They exist
//! only in builds with the `failpoints` feature, which `cargo test` turns on
//! for the binary it runs (the binary crate's dev-dependency); in a release
//! build every call here is empty and no environment variable reaches them.
//!
//! Armed through `FAILPOINTS` (the [`fail`](https://docs.rs/fail) crate's
//! syntax, `name=action` joined by `;`):
//!
//! ```text
//! FAILPOINTS='resync-before-exchange=return'                 crash there
//! FAILPOINTS='copy-after-snapshot=return(/tmp/drill/pauses)'  hold there
//! ```
//!
//! A hold creates `<dir>/<stem>.paused` and waits until the test removes it
//! (two minutes at most, so a drill that forgets still ends). The names are
//! the constants below.

use std::time::Duration;

/// Crash points ([`crash`]).
pub const RESYNC_BEFORE_EXCHANGE: &str = "resync-before-exchange";
pub const RESYNC_AFTER_EXCHANGE: &str = "resync-after-exchange";
pub const BACKUP_AFTER_EXCHANGE: &str = "backup-after-exchange";
/// An `object_store` walk, right after it recorded a segment as in staging.
pub const BACKUP_WALK_AFTER_SEGMENT_DONE: &str = "backup-walk-after-segment-done";

/// Hold points ([`hold`]), with the stem of the file each creates.
/// A `copy` load, after each attempt's snapshot: `<table>.<attempt>`.
pub const COPY_AFTER_SNAPSHOT: &str = "copy-after-snapshot";
/// Each `copy` worker, before its first insert: `<table>.<S>.<worker>`.
pub const COPY_BEFORE_FIRST_INSERT: &str = "copy-before-first-insert";
/// A `base_backup` walk, once a table's rows reached staging: `<table>.walk`.
pub const BACKUP_WALK_AFTER_STAGING: &str = "backup-walk-after-staging";
/// `init --bootstrap`, at the first file its backup keeps (the backup has
/// started; its window is open): `bootstrap.backup`.
pub const BOOTSTRAP_BACKUP_STREAMING: &str = "bootstrap-backup-streaming";
/// The stream, after a row version starts waiting for a newer one (its
/// TOAST value gone at the source): `<table>.gone`.
pub const STREAM_AFTER_TOAST_GONE: &str = "stream-after-toast-gone";

/// The longest a hold waits for its file to go.
const HOLD_AT_MOST: Duration = Duration::from_secs(120);

/// Reads `FAILPOINTS`; keep the guard for the life of the process.
#[must_use]
pub fn setup() -> Scenario {
    Scenario {
        #[cfg(feature = "failpoints")]
        _inner: fail::FailScenario::setup(),
    }
}

/// The armed failpoints, for as long as it lives.
#[derive(Debug)]
pub struct Scenario {
    #[cfg(feature = "failpoints")]
    _inner: fail::FailScenario<'static>,
}

/// `Some(argument)` when `name` is armed with `return` (an empty argument
/// for a bare `return`).
#[cfg(feature = "failpoints")]
fn armed(name: &str) -> Option<String> {
    let armed = || -> Option<String> {
        fail::fail_point!(name, |arg| Some(arg.unwrap_or_default()));
        None
    };
    armed()
}

#[cfg(not(feature = "failpoints"))]
fn armed(_name: &str) -> Option<String> {
    None
}

/// Ends the process here, as `kill -9` would (no unwinding, no flush), when
/// `name` is armed.
pub fn crash(name: &str) {
    if armed(name).is_some() {
        tracing::warn!("failpoint {name}: ending the process");
        std::process::abort();
    }
}

/// Holds here when `name` is armed with `return(DIR)`: creates
/// `DIR/<stem>.paused` and waits until it is removed.
pub async fn hold(name: &str, stem: &str) {
    let Some(dir) = armed(name).filter(|d| !d.is_empty()) else {
        return;
    };
    let file = std::path::Path::new(&dir).join(format!("{stem}.paused"));
    if let Err(e) = std::fs::write(&file, b"") {
        tracing::warn!(file = %file.display(), "failpoint {name}: cannot create the hold file: {e}");
        return;
    }
    tracing::info!(file = %file.display(), "failpoint {name}: holding until the file is removed");
    let started = tokio::time::Instant::now();
    while file.exists() && started.elapsed() < HOLD_AT_MOST {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
