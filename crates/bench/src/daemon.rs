//! walshadow itself, as the benches run it: the release binary (next to
//! the bench, or a given path), `walshadow init`, and `walshadow run` as a
//! child process that is stopped, with its shadow, however the bench ends.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use walshadow_pipeline::progress::StateFile;

use anyhow::{Context, Result, bail, ensure};
use walshadow_pipeline::progress::Progress;
use walshadow_testkit::{Cluster, ServerUser, wait_until};

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

/// `walshadow init --config CONFIG`; its stdout.
pub fn init(bin: &Path, config: &Path) -> Result<String> {
    let out = Command::new(bin)
        .args(["init", "--config"])
        .arg(config)
        .stdin(Stdio::null())
        .output()
        .context("running walshadow init")?;
    ensure!(
        out.status.success(),
        "walshadow init failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `walshadow run` as a child; stopped (and its shadow with it) on drop.
#[derive(Debug)]
pub struct Daemon {
    child: Option<Child>,
    log: PathBuf,
    shadow_dir: PathBuf,
    pg_ctl: PathBuf,
    cwd: PathBuf,
}

impl Daemon {
    /// Starts `run` (returns at once); its log goes to `work/run.log`, at
    /// the level `BENCH_WALSHADOW_LOG` names (a `WALSHADOW_LOG` filter;
    /// default `info`): `walshadow_pipeline=debug,info` to see where time
    /// goes, with `WALSHADOW_KEEP_CLUSTERS=1` to keep the log.
    pub fn start(
        bin: &Path,
        config: &Path,
        work: &Path,
        shadow_dir: &Path,
        cluster: &Cluster,
    ) -> Result<Daemon> {
        Self::start_with_env(bin, config, work, shadow_dir, cluster, &[])
    }

    /// [`Daemon::start`] with extra environment (test hooks); the log is
    /// appended to.
    pub fn start_with_env(
        bin: &Path,
        config: &Path,
        work: &Path,
        shadow_dir: &Path,
        cluster: &Cluster,
        env: &[(&str, &str)],
    ) -> Result<Daemon> {
        let log = work.join("run.log");
        let child = Command::new(bin)
            .args(["run", "--config"])
            .arg(config)
            .env(
                "WALSHADOW_LOG",
                std::env::var("BENCH_WALSHADOW_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::options().create(true).append(true).open(&log)?)
            .spawn()
            .context("starting walshadow run")?;
        Ok(Daemon {
            child: Some(child),
            log,
            shadow_dir: shadow_dir.to_owned(),
            pg_ctl: cluster.install().bin("pg_ctl"),
            cwd: work.to_owned(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn shadow_dir(&self) -> &Path {
        &self.shadow_dir
    }

    /// The last 40 lines of the run log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Fails if `run` exited.
    pub fn check(&mut self) -> Result<()> {
        if let Some(status) = self
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            self.child = None;
            bail!("walshadow run exited ({status}):\n{}", self.log_tail());
        }
        Ok(())
    }

    /// Waits until walshadow's progress file covers everything the source
    /// has flushed now (there must be a commit at or after it to apply);
    /// returns that progress.
    pub fn wait_applied(
        &mut self,
        cluster: &Cluster,
        state_dir: &Path,
        timeout: Duration,
    ) -> Result<Progress> {
        let target = cluster.flush_lsn()?;
        let mut last = None;
        wait_until(
            timeout,
            &format!("walshadow's progress to reach {target}"),
            || {
                self.check()?;
                last = Progress::read(state_dir)?;
                Ok(last.as_ref().is_some_and(|p| p.applied >= target))
            },
        )?;
        last.context("no progress file")
    }

    /// SIGTERM and wait; a clean exit is expected.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            bail!("walshadow run is not running");
        };
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()?;
        ensure!(sent.success(), "kill -TERM {}: {sent}", child.id());
        let mut status = None;
        wait_until(Duration::from_secs(60), "walshadow run to exit", || {
            status = child.try_wait()?;
            Ok(status.is_some())
        })?;
        let status = status.context("no exit status")?;
        ensure!(
            status.success(),
            "walshadow run exited with {status} on SIGTERM:\n{}",
            self.log_tail()
        );
        Ok(())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let _ = wait_until(Duration::from_secs(30), "walshadow run to exit", || {
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
                .command(&self.pg_ctl, &self.cwd)
                .arg("-D")
                .arg(&self.shadow_dir)
                .args(["stop", "-m", "immediate"])
                .output();
        }
    }
}
