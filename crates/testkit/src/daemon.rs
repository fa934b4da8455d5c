//! walshadow driven from outside, as the drills and the benches run it: a
//! binary the caller names (a test crate's `CARGO_BIN_EXE_walshadow`, a
//! bench's release build), a config for a source, its commands run to
//! completion, and `walshadow run` as a child process that is signalled,
//! restarted, and stopped with its shadow however the caller ends.
//!
//! ```text
//!  Walshadow::configure(bin, source, work, slot)
//!      work/walshadow.toml   the config (append sections with append_config)
//!      work/shadow/          the shadow's data directory
//!      work/state/           progress.json, backfills.toml, …
//!      work/run.log          every run's stderr, appended
//! ```
//!
//! The test kit stays below walshadow's own crates: what it reads of
//! walshadow's files it reads as text or JSON on the few fields it needs
//! (the postmaster's pid on the first line of `postmaster.pid`, `applied` in
//! `progress.json`), and a shadow left behind is stopped with the install's
//! `pg_ctl`, as [`Cluster`] stops its own servers.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use crate::{Cluster, Lsn, ServerUser, wait_until, write_walshadow_config};

/// How long `run` gets to exit after a signal.
const EXIT_WAIT: Duration = Duration::from_secs(60);
/// How long a dropped driver lets `run` stop cleanly before killing it.
const DROP_GRACE: Duration = Duration::from_secs(30);

/// One walshadow: a binary, a config, and `walshadow run` when started.
/// Dropping it stops `run` and a shadow left behind.
#[derive(Debug)]
pub struct Walshadow {
    bin: PathBuf,
    config: PathBuf,
    work: PathBuf,
    shadow_dir: PathBuf,
    state_dir: PathBuf,
    pg_ctl: PathBuf,
    run_log: PathBuf,
    run: Option<Child>,
    /// Extra environment of `run` and every command (test hooks,
    /// `PGPASSFILE`, failpoints).
    pub env: Vec<(String, String)>,
    /// `WALSHADOW_LOG` of `run`; empty: unset (`[log] level` decides).
    pub log_filter: String,
    /// How many of the run log's last lines an error carries; `None`: all.
    pub error_log_lines: Option<usize>,
}

impl Walshadow {
    /// `bin` with the config [`write_walshadow_config`] writes for `source`
    /// into `work` (layout in the module docs), replication slot `slot`.
    pub fn configure(bin: &Path, source: &Cluster, work: &Path, slot: &str) -> Result<Walshadow> {
        let shadow_dir = work.join("shadow");
        let config = write_walshadow_config(source, work, &shadow_dir, slot)?;
        Ok(Walshadow {
            bin: bin.to_owned(),
            config,
            work: work.to_owned(),
            shadow_dir,
            state_dir: work.join("state"),
            pg_ctl: source.install().bin("pg_ctl"),
            run_log: work.join("run.log"),
            run: None,
            env: Vec::new(),
            log_filter: "info".into(),
            error_log_lines: None,
        })
    }

    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// The config path as `--config` takes it.
    pub fn config(&self) -> &str {
        self.config.to_str().unwrap_or_default()
    }

    /// Appends `text` (TOML sections) to the config.
    pub fn append_config(&self, text: &str) -> Result<()> {
        let mut config = std::fs::read_to_string(&self.config)?;
        config.push_str(text);
        std::fs::write(&self.config, config)?;
        Ok(())
    }

    pub fn shadow_dir(&self) -> &Path {
        &self.shadow_dir
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    pub fn run_log_path(&self) -> &Path {
        &self.run_log
    }

    /// Runs `walshadow ARGS...` to completion.
    pub fn cli(&self, args: &[&str]) -> Result<Output> {
        Command::new(&self.bin)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running walshadow {}", args.join(" ")))
    }

    /// Runs `walshadow ARGS...`, which must succeed; returns its stdout.
    pub fn cli_ok(&self, args: &[&str]) -> Result<String> {
        let out = self.cli(args)?;
        ensure!(
            out.status.success(),
            "walshadow {} failed ({}):\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?)
    }

    /// `walshadow init`; its stdout.
    pub fn init(&self) -> Result<String> {
        self.cli_ok(&["init", "--config", self.config()])
    }

    /// Every run's log so far.
    pub fn run_log(&self) -> String {
        std::fs::read_to_string(&self.run_log).unwrap_or_default()
    }

    /// The run log as errors carry it (see [`Walshadow::error_log_lines`]).
    pub fn run_log_for_errors(&self) -> String {
        let log = self.run_log();
        match self.error_log_lines {
            Some(n) => tail(&log, n),
            None => log,
        }
    }

    /// Arms failpoint `name` (see `walshadow_failpoints`) with `action` for
    /// the next `run`: `return` to crash there, `return(DIR)` to hold.
    pub fn arm(&mut self, name: &str, action: &str) {
        let entry = format!("{name}={action}");
        match self.env.iter_mut().find(|(k, _)| k == "FAILPOINTS") {
            Some((_, v)) => {
                v.push(';');
                v.push_str(&entry);
            }
            None => self.env.push(("FAILPOINTS".into(), entry)),
        }
    }

    /// Holds at each of `names` in the next `run`, the hold files in a
    /// fresh folder, which this returns.
    pub fn arm_holds(&mut self, names: &[&str]) -> Result<PathBuf> {
        let dir = self.work.join("holds");
        std::fs::create_dir_all(&dir)?;
        for name in names {
            self.arm(name, &format!("return({})", dir.display()));
        }
        Ok(dir)
    }

    /// No failpoint armed in the next `run`.
    pub fn disarm(&mut self) {
        self.env.retain(|(k, _)| k != "FAILPOINTS");
    }

    /// Starts `walshadow run` (returns at once); its stderr is appended to
    /// the run log.
    pub fn start_run(&mut self) -> Result<()> {
        ensure!(self.run.is_none(), "walshadow run is already running");
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.run_log)?;
        let mut cmd = Command::new(&self.bin);
        cmd.args(["run", "--config", self.config()]);
        if self.log_filter.is_empty() {
            cmd.env_remove("WALSHADOW_LOG");
        } else {
            cmd.env("WALSHADOW_LOG", &self.log_filter);
        }
        let child = cmd
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting walshadow run")?;
        self.run = Some(child);
        Ok(())
    }

    /// The pid of `run`, while it is started.
    pub fn run_pid(&self) -> Option<u32> {
        self.run.as_ref().map(Child::id)
    }

    /// `run`'s exit status once it has exited (then it is no longer
    /// started); `None` while it runs or when it is not started.
    pub fn run_exited(&mut self) -> Option<ExitStatus> {
        let status = self.run.as_mut()?.try_wait().ok().flatten()?;
        self.run = None;
        Some(status)
    }

    /// Fails if `run` exited.
    pub fn check_running(&mut self) -> Result<()> {
        if let Some(status) = self.run_exited() {
            bail!(
                "walshadow run exited ({status}):\n{}",
                self.run_log_for_errors()
            );
        }
        Ok(())
    }

    /// Sends `signal` (`-TERM`, `-KILL`, …) to `run` and waits for it to
    /// exit.
    pub fn signal_run(&mut self, signal: &str) -> Result<ExitStatus> {
        let child = self.run.as_mut().context("walshadow run is not running")?;
        let pid = child.id().to_string();
        let status = Command::new("kill").args([signal, &pid]).status()?;
        ensure!(status.success(), "kill {signal} {pid}: {status}");
        let mut exit = None;
        wait_until(EXIT_WAIT, "walshadow run to exit", || {
            exit = child.try_wait()?;
            Ok(exit.is_some())
        })?;
        self.run = None;
        exit.context("no exit status")
    }

    /// SIGTERM and wait; a clean exit is expected.
    pub fn stop_run(&mut self) -> Result<()> {
        let status = self.signal_run("-TERM")?;
        ensure!(
            status.success(),
            "walshadow run exited with {status} on SIGTERM:\n{}",
            self.run_log_for_errors()
        );
        Ok(())
    }

    /// `kill -9` of `run` (its shadow PostgreSQL stays up; the next `run`
    /// takes it over).
    pub fn kill_run(&mut self) -> Result<()> {
        self.signal_run("-KILL")?;
        Ok(())
    }

    /// `kill -9` of the shadow's postmaster (as the OOM killer would);
    /// false when it has no lock file to name it (not started yet).
    pub fn kill_shadow(&self) -> Result<bool> {
        let Some(pid) = postmaster_pid(&self.shadow_dir) else {
            return Ok(false);
        };
        let status = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()?;
        Ok(status.success())
    }

    /// `walshadow status --json`.
    pub fn status_json(&self) -> Result<serde_json::Value> {
        let out = self.cli_ok(&["status", "--json", "--config", self.config()])?;
        serde_json::from_str(&out).context("status --json is not JSON")
    }

    /// The applied position `walshadow status --json` reports; `None`
    /// while status fails or reports none.
    pub fn applied(&self) -> Result<Option<Lsn>> {
        let out = self.cli(&["status", "--json", "--config", self.config()])?;
        if !out.status.success() {
            return Ok(None);
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        // Several databases: the one furthest behind of those streaming
        // (one awaited or dropped reports an error instead).
        if let Some(dbs) = v["databases"].as_object() {
            return Ok(dbs
                .values()
                .filter(|d| d.get("error").is_none())
                .map(|d| d["applied"].as_str().and_then(|s| s.parse().ok()))
                .min()
                .flatten());
        }
        Ok(v["applied"].as_str().and_then(|s| s.parse().ok()))
    }

    /// Table `key`'s row of `walshadow table list --json`.
    pub fn table_state(&self, key: &str) -> Result<serde_json::Value> {
        let out = self.cli_ok(&["table", "list", "--json", "--config", self.config()])?;
        let rows: Vec<serde_json::Value> = serde_json::from_str(&out)?;
        rows.into_iter()
            .find(|r| r["table"] == key)
            .with_context(|| format!("{key} not in the table list: {out}"))
    }

    /// The applied position in walshadow's progress file; `None` before
    /// the first one is written.
    pub fn progress_applied(&self) -> Result<Option<Lsn>> {
        progress_applied(&self.state_dir)
    }

    /// Waits until the progress file covers everything `source` has
    /// flushed now (there must be a commit at or after it to apply);
    /// returns the position reached. Fails when `run` exits.
    pub fn wait_applied(&mut self, source: &Cluster, timeout: Duration) -> Result<Lsn> {
        let target = source.flush_lsn()?;
        let mut last = None;
        wait_until(
            timeout,
            &format!("walshadow's progress to reach {target}"),
            || {
                self.check_running()?;
                last = self.progress_applied()?;
                Ok(last.is_some_and(|a| a >= target))
            },
        )?;
        last.context("no progress file")
    }
}

impl Drop for Walshadow {
    fn drop(&mut self) {
        if let Some(mut c) = self.run.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let _ = wait_until(DROP_GRACE, "walshadow run to exit", || {
                Ok(c.try_wait()?.is_some())
            });
            let _ = c.kill();
            let _ = c.wait();
        }
        // A shadow left behind by a run that did not stop cleanly.
        if self.shadow_dir.join("postmaster.pid").exists()
            && let Ok(user) = ServerUser::get()
        {
            let _ = user
                .command(&self.pg_ctl, &self.work)
                .arg("-D")
                .arg(&self.shadow_dir)
                .args(["stop", "-m", "immediate"])
                .output();
        }
    }
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The postmaster's pid: the first line of `postmaster.pid` (see
/// CreateLockFile in miscinit.c).
fn postmaster_pid(data_dir: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    text.lines().next()?.trim().parse().ok()
}

/// `applied` of `<state_dir>/progress.json` (`{"progress": {"applied":
/// "X/X", …}, "crc32c": N}`); walshadow checks the checksum, a reader of
/// one position need not.
pub fn progress_applied(state_dir: &Path) -> Result<Option<Lsn>> {
    let path = state_dir.join("progress.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| path.display().to_string()),
    };
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let lsn = serde_json::from_value(v["progress"]["applied"].clone())
        .with_context(|| format!("{}: progress.applied", path.display()))?;
    Ok(Some(lsn))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }

    #[test]
    fn reads_applied_from_a_progress_file() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("walshadow-progress-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        assert_eq!(progress_applied(&dir)?, None);
        std::fs::write(
            dir.join("progress.json"),
            r#"{"progress":{"format_version":1,"system_id":7,"applied":"0/16B3748","restart":"0/16B3700","tables":{}},"crc32c":1}"#,
        )?;
        assert_eq!(progress_applied(&dir)?, Some(Lsn(0x16B_3748)));
        std::fs::write(dir.join("progress.json"), "{}")?;
        assert!(progress_applied(&dir).is_err());
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[test]
    fn postmaster_pid_is_the_first_line() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("walshadow-pmpid-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        assert_eq!(postmaster_pid(&dir), None);
        std::fs::write(
            dir.join("postmaster.pid"),
            "4242\n/data\n1700000000\n5432\n",
        )?;
        assert_eq!(postmaster_pid(&dir), Some(4242));
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
