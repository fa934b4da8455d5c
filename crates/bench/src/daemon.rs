//! walshadow itself, as the benches run it: the release binary (next to
//! the bench, or a given path) driven by the test kit's [`Walshadow`]
//! (`init`, `run` as a child process stopped with its shadow however the
//! bench ends), its log at the level the bench is asked for.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};
use walshadow_testkit::{Cluster, Walshadow};

/// The walshadow binary: `given`, else `walshadow` next to this program.
pub fn walshadow_binary(given: Option<&Path>) -> Result<PathBuf> {
    let path = match given {
        Some(p) => p.to_owned(),
        None => std::env::current_exe()?
            .parent()
            .context("this program has no directory")?
            .join("walshadow"),
    };
    ensure!(
        path.is_file(),
        "{} not found: build it with `cargo build --release -p walshadow -p walshadow-bench`, or pass --walshadow PATH",
        path.display()
    );
    Ok(path)
}

/// walshadow `bin` configured for `cluster` in `work` with slot `slot`
/// (the test kit's layout: `work/shadow`, `work/state`, `work/run.log`).
/// `run` logs at the level `BENCH_WALSHADOW_LOG` names (a `WALSHADOW_LOG`
/// filter; default `info`): `walshadow_pipeline=debug,info` to see where
/// time goes, with `WALSHADOW_KEEP_CLUSTERS=1` to keep the log. Errors
/// carry the log's last 40 lines.
pub fn walshadow(bin: &Path, cluster: &Cluster, work: &Path, slot: &str) -> Result<Walshadow> {
    let mut w = Walshadow::configure(bin, cluster, work, slot)?;
    if let Ok(filter) = std::env::var("BENCH_WALSHADOW_LOG") {
        w.log_filter = filter;
    }
    w.error_log_lines = Some(40);
    Ok(w)
}
