//! A pgBackRest repository on a local path for the drills and benches:
//! the source archives into it with `archive-push`, pgBackRest backs it up
//! (Debian's 2.45, installed by `scripts/setup`, serves PostgreSQL 15).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};

use crate::{Cluster, ServerUser, WorkDir, wait_until};

pub const STANZA: &str = "main";

#[derive(Debug)]
pub struct Repo {
    pub work: WorkDir,
    pub conf: PathBuf,
}

impl Repo {
    pub fn new(tag: &str) -> Result<Repo> {
        let work = WorkDir::new(tag)?;
        for d in ["repo", "lock", "log"] {
            work.sub(d)?;
        }
        let conf = work.path().join("pgbackrest.conf");
        Ok(Repo { work, conf })
    }

    pub fn repo_dir(&self) -> PathBuf {
        self.work.path().join("repo")
    }

    /// The `archive_command` a source pushes its WAL with.
    pub fn archive_command(&self) -> String {
        format!(
            "pgbackrest --config={} --stanza={STANZA} archive-push %p",
            self.conf.display()
        )
    }

    /// The config for `source`, written once it runs (its data directory
    /// is known then, and nothing is archived before the first backup).
    pub fn configure(&self, source: &Cluster) -> Result<()> {
        let w = self.work.path();
        let text = format!(
            "[global]\nrepo1-path={}\nlock-path={}\nlog-path={}\nlog-level-file=off\n\
             log-level-console=warn\nstart-fast=y\ncompress-type=gz\n\n[{STANZA}]\n\
             pg1-path={}\npg1-port={}\npg1-socket-path={}\npg1-user={}\n",
            w.join("repo").display(),
            w.join("lock").display(),
            w.join("log").display(),
            source.data_dir().display(),
            source.port(),
            source.socket_dir().display(),
            source.options().superuser,
        );
        std::fs::write(&self.conf, text)?;
        let user = ServerUser::get()?;
        if user.switches_user {
            std::os::unix::fs::chown(&self.conf, Some(user.uid), Some(user.gid))?;
        }
        Ok(())
    }

    /// Sets `[global]` options (`repo1-bundle=y`: small files go into
    /// bundles, read back by range; `compress-type=zst`, …), replacing one
    /// already set. Call after [`Repo::configure`].
    pub fn set_global(&self, options: &[(&str, &str)]) -> Result<()> {
        let text = std::fs::read_to_string(&self.conf)?;
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| !options.iter().any(|(k, _)| l.starts_with(&format!("{k}="))))
            .map(str::to_owned)
            .collect();
        let at = lines
            .iter()
            .position(|l| l == "[global]")
            .map_or(0, |i| i + 1);
        for (i, (k, v)) in options.iter().enumerate() {
            lines.insert(at + i, format!("{k}={v}"));
        }
        std::fs::write(&self.conf, lines.join("\n") + "\n")?;
        Ok(())
    }

    /// Runs pgBackRest as the server's user.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        let user = ServerUser::get()?;
        let out = user
            .command(Path::new("pgbackrest"), self.work.path())
            .arg(format!("--config={}", self.conf.display()))
            .arg(format!("--stanza={STANZA}"))
            .args(args)
            .output()
            .context("running pgbackrest (scripts/setup installs it)")?;
        ensure!(
            out.status.success(),
            "pgbackrest {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// Ends the current segment and waits for the archiver to push it.
pub fn switch_and_archive(source: &Cluster) -> Result<String> {
    let name = source.query_one("select pg_walfile_name(pg_switch_wal())")?;
    wait_until(
        Duration::from_secs(60),
        "the archiver to push the segment",
        || {
            Ok(
                source.query_one("select coalesce(last_archived_wal, '') from pg_stat_archiver")?
                    >= name,
            )
        },
    )?;
    Ok(name)
}
