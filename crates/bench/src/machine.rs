//! The machine a figure was taken on: cores, CPU model, the load average
//! before and after the run, and the checkout. Every report prints it and
//! writes it into its JSON (the benches run on shared machines, so the
//! load around a figure is part of the figure).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, ensure};

/// The context of one run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MachineContext {
    pub cores: usize,
    pub cpu_model: String,
    /// `/proc/loadavg`'s 1, 5 and 15 minute figures.
    pub loadavg_before: String,
    pub loadavg_after: String,
    /// `git describe --always --dirty` of the checkout built from.
    pub walshadow_git: Option<String>,
}

impl MachineContext {
    /// Taken as the run starts.
    pub fn before_run() -> MachineContext {
        MachineContext {
            cores: cores(),
            cpu_model: cpu_model(),
            loadavg_before: loadavg(),
            loadavg_after: String::new(),
            walshadow_git: git_rev(),
        }
    }

    /// The load average as the run ends.
    pub fn after_run(&mut self) {
        self.loadavg_after = loadavg();
    }

    /// The report's `machine:` line; `detail` follows the CPU model (who
    /// shares the cores).
    pub fn line(&self, detail: &str) -> String {
        format!(
            "machine: {} cores, {}{detail}; load average {} before, {} after; checkout {} at run time",
            self.cores,
            self.cpu_model,
            self.loadavg_before,
            self.loadavg_after,
            self.walshadow_git.as_deref().unwrap_or("?")
        )
    }

    /// Writes `figures` (a JSON object) to `path`, with `benchmark` and
    /// this context's fields added.
    pub fn write_json(
        &self,
        path: &Path,
        benchmark: &str,
        mut figures: serde_json::Value,
    ) -> Result<()> {
        let serde_json::Value::Object(ctx) = serde_json::to_value(self)? else {
            anyhow::bail!("the machine context is not a JSON object");
        };
        let doc = figures
            .as_object_mut()
            .context("a report's figures must be a JSON object")?;
        ensure!(
            ctx.keys().all(|k| !doc.contains_key(k)),
            "the figures already hold a machine context field"
        );
        doc.extend(ctx);
        doc.insert("benchmark".into(), benchmark.into());
        std::fs::write(path, serde_json::to_vec_pretty(&figures)?)
            .with_context(|| format!("writing {}", path.display()))
    }
}

/// Cores this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0)
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` writes them.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The first `model name` of `/proc/cpuinfo`.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// `git describe --always --dirty` of the checkout this was built from;
/// `None` outside a git checkout.
pub fn git_rev() -> Option<String> {
    let out = Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR")])
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
