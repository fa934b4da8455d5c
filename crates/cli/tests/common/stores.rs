//! Backup stores for the drills: a pgBackRest repository on a local path
//! (the source archives into it with `archive-push`, pgBackRest backs it
//! up), and the commands that reach a local S3 server for barman-cloud.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use walshadow_testkit::{Cluster, S3Server, ServerUser, WorkDir, venv_program, wait_until};

pub const STANZA: &str = "main";

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

/// `env AWS_…=… <program>`: the archiver and barman-cloud-backup get the
/// S3 server's keys without the test's environment.
pub fn with_aws_env(s3: &S3Server, program: &str) -> Result<String> {
    let env: Vec<String> = s3
        .aws_env()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    Ok(format!(
        "env {} {} --endpoint-url {}",
        env.join(" "),
        venv_program(program)?.display(),
        s3.endpoint()
    ))
}

/// `barman-cloud-backup --gzip` of `source` into `url` as `server`, run as
/// the server's user from `dir`.
pub fn barman_cloud_backup(
    s3: &S3Server,
    source: &Cluster,
    dir: &Path,
    url: &str,
    server: &str,
) -> Result<()> {
    let cmd = format!(
        "{} --gzip -h {} -p {} -U {} {url} {server}",
        with_aws_env(s3, "barman-cloud-backup")?,
        source.socket_dir().display(),
        source.port(),
        source.options().superuser
    );
    let out = ServerUser::get()?
        .command(Path::new("sh"), dir)
        .args(["-c", &cmd])
        .output()?;
    ensure!(
        out.status.success(),
        "barman-cloud-backup: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
