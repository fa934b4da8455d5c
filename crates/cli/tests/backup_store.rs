//! The `[backup]` store against a real pgBackRest repository: the source
//! archives its WAL with `pgbackrest archive-push` and pgBackRest takes a
//! full, a differential and an incremental backup (gzip). Then:
//!
//! - every file of the incremental backup reads through the manifest's
//!   references (most of its files are the full backup's) and matches its
//!   size and SHA-1, and `pg_control` holds the source's system identifier;
//! - `walshadow backup list` shows the three, each able to serve a load;
//! - `walshadow backup check` passes, then fails naming the segment once
//!   one is removed from the archive, names another cluster as one, and
//!   an unknown backup or stanza by what the store holds;
//! - a stored file whose bytes were replaced fails its SHA-1 check.
//!
//! PostgreSQL 15 only: Debian's pgBackRest (2.45) predates 16.
//!
//! And a barman-cloud store on S3 (a local S3 server, moto), on 15 and 18:
//! the source archives with `barman-cloud-wal-archive`, one
//! `barman-cloud-backup`; `backup list` and `backup check` read it through
//! S3 with the keys of a `credentials_file`; after a standby is promoted
//! the timeline-1 backup serves the new primary, and `check` names the
//! history file of timeline 2 once it is deleted from the bucket, and a
//! segment deleted from it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::BIN;
use common::stores::{Repo, STANZA, barman_cloud_backup, switch_and_archive, with_aws_env};
use walshadow_backup_store::pgbackrest::PgBackRest;
use walshadow_backup_store::{BackupKind, Repository, S3Options, StoreError};
use walshadow_testkit::{
    Cluster, ClusterOptions, PgMajor, S3Server, WorkDir, block_on, per_major, wait_until,
    write_walshadow_config,
};

/// `walshadow backup <verb> --config <config>`: (success, stdout + stderr).
fn walshadow_backup(verb: &str, config: &Path, json: bool) -> Result<(bool, String)> {
    let mut cmd = Command::new(BIN);
    cmd.args(["backup", verb, "--config"]).arg(config);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output()?;
    Ok((
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

fn with_backup_section(config: &Path, repo: &Path, extra: &str) -> Result<PathBuf> {
    let text = std::fs::read_to_string(config)?;
    let path = config.with_file_name(format!("with-backup-{}.toml", extra.len()));
    std::fs::write(
        &path,
        format!(
            "{text}\n[backup]\ntool = \"pgbackrest\"\nrepo = \"{}\"\nstanza = \"{STANZA}\"\n{extra}",
            repo.display()
        ),
    )?;
    Ok(path)
}

fn pgbackrest_store(major: PgMajor) -> Result<()> {
    let repo = Repo::new("pgbackrest")?;
    let opts = ClusterOptions::default()
        .conf("archive_mode", "on")
        .conf("archive_command", repo.archive_command());
    let source = Cluster::start(major, opts)?;
    repo.configure(&source)?;
    repo.run(&["stanza-create"])?;
    source.psql(
        "create table t (id int primary key, v text);
         insert into t select g, md5(g::text) from generate_series(1, 20000) g;",
    )?;
    repo.run(&["backup", "--type=full"])?;
    source.psql("insert into t select g, md5(g::text) from generate_series(20001, 30000) g")?;
    repo.run(&["backup", "--type=diff"])?;
    source.psql("update t set v = v || 'x' where id <= 500")?;
    repo.run(&["backup", "--type=incr"])?;
    // WAL after the last backup: three more archived segments.
    let mut after = Vec::new();
    for i in 0..3 {
        source.psql(&format!("insert into t values ({}, 'after')", 100_000 + i))?;
        after.push(switch_and_archive(&source)?);
    }
    let system_id: u64 = source
        .query_one("select system_identifier from pg_control_system()")?
        .parse()?;

    // The library: every file of the incremental backup, through its references.
    let store = PgBackRest::new(
        Repository::open(&repo.repo_dir().to_string_lossy(), &S3Options::default())?,
        STANZA,
    );
    let (full, incr) = block_on(async {
        let backups = store.backups().await?;
        let kinds: Vec<_> = backups.iter().map(|b| b.kind).collect();
        ensure!(
            kinds == [BackupKind::Full, BackupKind::Diff, BackupKind::Incr],
            "{kinds:?}"
        );
        let full = backups[0].label.clone();
        let incr = store.manifest(&backups[2].label).await?;
        let (mut own, mut referenced) = (0, 0);
        for (path, file) in &incr.files {
            let content = store
                .read_file(&incr, path)
                .await
                .with_context(|| format!("reading {path}"))?;
            ensure!(content.len() as u64 == file.size, "{path}");
            match file.reference {
                Some(_) => referenced += 1,
                None => own += 1,
            }
        }
        println!(
            "incremental backup {}: {own} files of its own, {referenced} from earlier backups",
            incr.label
        );
        ensure!(
            own > 0 && referenced > own,
            "{own} own, {referenced} referenced"
        );
        let control = store.read_file(&incr, "pg_data/global/pg_control").await?;
        let id = u64::from_le_bytes(control[..8].try_into()?);
        ensure!(
            id == system_id,
            "pg_control says {id}, the source {system_id}"
        );
        Ok((full, incr))
    })?;

    // `backup list` and `backup check`.
    let work = repo.work.path();
    let shadow = work.join("shadow");
    let plain = write_walshadow_config(&source, work, &shadow, "walshadow")?;
    let config = with_backup_section(&plain, &repo.repo_dir(), "")?;
    let (ok, out) = walshadow_backup("list", &config, true)?;
    ensure!(ok, "{out}");
    let rows: serde_json::Value = serde_json::from_str(&out).context(out.clone())?;
    let rows = rows.as_array().context("an array")?;
    ensure!(rows.len() == 3, "{out}");
    ensure!(rows.iter().all(|r| r["unusable"].is_null()), "{out}");
    ensure!(rows[2]["label"] == incr.label.as_str(), "{out}");
    let (ok, out) = walshadow_backup("list", &config, false)?;
    ensure!(ok && out.contains(&full) && out.contains("incr"), "{out}");
    let (ok, out) = walshadow_backup("check", &config, false)?;
    println!("{out}");
    ensure!(
        ok && out.contains("ok: the backup and its archive can serve"),
        "{out}"
    );
    let last = after.last().context("segments")?;
    ensure!(
        out.contains(&format!("to {last}")),
        "the newest archived segment: {out}"
    );

    // A segment gone from the archive is a hole, named.
    let gone = &after[1];
    let archived = store_segment_file(&repo.repo_dir(), gone)?;
    let kept = repo.work.path().join("kept-segment");
    std::fs::rename(&archived, &kept)?;
    let (ok, out) = walshadow_backup("check", &config, false)?;
    ensure!(
        !ok && out.contains("misses 1 segment") && out.contains(gone.as_str()),
        "{out}"
    );
    std::fs::rename(&kept, &archived)?;
    ensure!(walshadow_backup("check", &config, false)?.0);

    // An unknown backup, a wrong stanza: named with what the store holds.
    let named = with_backup_section(&plain, &repo.repo_dir(), "backup = \"20990101-000000F\"\n")?;
    let (ok, out) = walshadow_backup("check", &named, false)?;
    ensure!(
        !ok && out.contains("20990101-000000F") && out.contains(&full),
        "{out}"
    );
    let text = std::fs::read_to_string(&config)?.replace("stanza = \"main\"", "stanza = \"mian\"");
    let wrong = work.join("wrong-stanza.toml");
    std::fs::write(&wrong, text)?;
    let (ok, out) = walshadow_backup("list", &wrong, false)?;
    ensure!(!ok && out.contains("\"mian\""), "{out}");

    // Another cluster as the source: the store is not its.
    let other = Cluster::start(major, ClusterOptions::default())?;
    let other_plain = write_walshadow_config(&other, work, &shadow, "walshadow")?;
    let other_config = with_backup_section(&other_plain, &repo.repo_dir(), "\n")?;
    let (ok, out) = walshadow_backup("check", &other_config, false)?;
    ensure!(!ok && out.contains("another cluster's"), "{out}");

    // A stored file replaced: its SHA-1 says so.
    let version = repo
        .repo_dir()
        .join(format!("backup/{STANZA}/{full}/pg_data/PG_VERSION.gz"));
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, b"99\n")?;
    std::fs::write(&version, gz.finish()?)?;
    let err = block_on(async { store.read_file(&incr, "pg_data/PG_VERSION").await })
        .expect_err("a replaced file reads");
    ensure!(
        matches!(&err, StoreError::Malformed { reason, .. } if reason.contains("SHA-1")),
        "{err}"
    );
    Ok(())
}

/// The archived file of segment `name` (`<name>-<sha1>.gz`).
fn store_segment_file(repo: &Path, name: &str) -> Result<PathBuf> {
    let dir = repo.join(format!("archive/{STANZA}/15-1/{}", &name[..16]));
    std::fs::read_dir(&dir)?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{name}-")))
        })
        .with_context(|| format!("{name} in {}", dir.display()))
}

per_major!(pgbackrest_store => a_pgbackrest_repository_serves_list_and_check: pg15);

const BUCKET: &str = "backups";
const SERVER: &str = "source";

fn barman_cloud_store(major: PgMajor) -> Result<()> {
    let s3 = S3Server::start()?;
    s3.create_bucket(BUCKET)?;
    let url = format!("s3://{BUCKET}/pg");
    let opts = ClusterOptions::default().conf("archive_mode", "on").conf(
        "archive_command",
        format!(
            "{} --gzip {url} {SERVER} %p",
            with_aws_env(&s3, "barman-cloud-wal-archive")?
        ),
    );
    let mut source = Cluster::start(major, opts)?;
    source.psql(
        "create table t (id int primary key, v text);
         insert into t select g, md5(g::text) from generate_series(1, 20000) g;",
    )?;
    let work = WorkDir::new(&format!("barman-cloud-pg{}", major.number()))?;
    barman_cloud_backup(&s3, &source, work.path(), &url, SERVER)?;
    let mut after = Vec::new();
    for i in 0..3 {
        source.psql(&format!("insert into t values ({}, 'after')", 100_000 + i))?;
        after.push(switch_and_archive(&source)?);
    }

    let creds = work.path().join("s3.env");
    std::fs::write(
        &creds,
        format!(
            "# the local S3 server's keys\nAWS_ACCESS_KEY_ID={}\nAWS_SECRET_ACCESS_KEY={}\n",
            S3Server::ACCESS_KEY,
            S3Server::SECRET_KEY
        ),
    )?;
    std::fs::set_permissions(&creds, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    // A config for `cluster` as the source, with the store.
    let config_for = |cluster: &Cluster, name: &str| -> Result<PathBuf> {
        let dir = work.path().join(name);
        std::fs::create_dir_all(&dir)?;
        let plain = write_walshadow_config(cluster, &dir, &dir.join("shadow"), "walshadow")?;
        let config = dir.join("barman.toml");
        std::fs::write(
            &config,
            format!(
                "{}\n[backup]\ntool = \"barman-cloud\"\nrepo = \"{url}\"\nserver_name = \"{SERVER}\"\n\
                 endpoint = \"{}\"\nregion = \"{}\"\npath_style = true\ncredentials_file = \"{}\"\n",
                std::fs::read_to_string(&plain)?,
                s3.endpoint(),
                S3Server::REGION,
                creds.display()
            ),
        )?;
        Ok(config)
    };
    let config = config_for(&source, "primary")?;
    let (ok, out) = walshadow_backup("list", &config, true)?;
    ensure!(ok, "{out}");
    let rows: serde_json::Value = serde_json::from_str(&out).context(out.clone())?;
    let rows = rows.as_array().context("an array")?;
    ensure!(
        rows.len() == 1 && rows[0]["unusable"].is_null() && rows[0]["kind"] == "full",
        "{out}"
    );
    let (ok, out) = walshadow_backup("check", &config, false)?;
    println!("pg{}: {out}", major.number());
    let last = after.last().context("segments")?;
    ensure!(
        ok && out.contains("ok: the backup") && out.contains(&format!("to {last}")),
        "{out}"
    );
    // A new timeline: the standby promoted once the primary stopped
    // archives its history and its segments; the backup, of timeline 1,
    // serves the new primary while the history file is there.
    let standby = source.start_standby()?;
    source.psql("insert into t values (200000, 'before the switch')")?;
    let lsn = source.query_one("select pg_current_wal_insert_lsn()")?;
    wait_until(Duration::from_secs(60), "the standby to replay", || {
        Ok(standby.query_one(&format!(
            "select pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn"
        ))? == "t")
    })?;
    source.stop()?;
    standby.promote()?;
    standby.psql("insert into t values (300000, 'on timeline 2')")?;
    let on_two = switch_and_archive(&standby)?;
    ensure!(on_two.starts_with("00000002"), "{on_two}");
    let promoted = config_for(&standby, "promoted")?;
    let (ok, out) = walshadow_backup("check", &promoted, false)?;
    ensure!(
        ok && out.contains("timeline 2") && out.contains(&format!("to {on_two}")),
        "{out}"
    );
    let wals = s3.keys(BUCKET, &format!("pg/{SERVER}/wals/"))?;
    let history = wals
        .iter()
        .find(|k| k.contains("00000002.history"))
        .with_context(|| format!("no history of timeline 2 archived: {wals:?}"))?;
    s3.delete_object(BUCKET, history)?;
    let (ok, out) = walshadow_backup("check", &promoted, false)?;
    ensure!(
        !ok && out.contains("no history file of timeline 2"),
        "{out}"
    );
    let config = promoted;

    // A segment deleted from the bucket: a hole, named.
    let gone = &after[1];
    s3.delete_object(
        BUCKET,
        &format!("pg/{SERVER}/wals/{}/{gone}.gz", &gone[..16]),
    )?;
    let (ok, out) = walshadow_backup("check", &config, false)?;
    ensure!(
        !ok && out.contains("misses 1 segment") && out.contains(gone.as_str()),
        "{out}"
    );
    Ok(())
}

per_major!(barman_cloud_store => a_barman_cloud_store_on_s3_serves_list_and_check: pg15, pg18);
