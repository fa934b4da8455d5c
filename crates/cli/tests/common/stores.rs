//! Backup stores for the drills: a pgBackRest repository on a local path
//! (the test kit's, shared with `load-bench`), the commands that reach a
//! local S3 server for barman-cloud, and a wal-g store's writer.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use walshadow_testkit::{Cluster, S3Server, ServerUser, WorkDir, venv_program, wait_until};

pub use walshadow_testkit::pgbackrest::{Repo, STANZA, switch_and_archive};

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

/// A wal-g store on a local path, written the way wal-g lays one out
/// (wal-g cannot be installed here; its layout is read from its source:
/// `shared/notes/walg-layout.md`). This writer follows a remote
/// `backup-push` (a `BASE_BACKUP` stream: member names without a leading
/// `/`) and `wal-push` with lz4 (frame format):
///
/// ```text
///  basebackups_005/base_<start segment>_backup_stop_sentinel.json
///  basebackups_005/base_<start segment>/tar_partitions/part_001.tar.lz4
///  wal_005/<segment>.lz4
/// ```
///
/// The source archives into `incoming/` (`cp`); [`WalGStore::push_wal`]
/// compresses what arrived into `wal_005/`, as `wal-g wal-push` would.
pub struct WalGStore {
    pub work: WorkDir,
}

impl WalGStore {
    pub fn new(tag: &str) -> Result<WalGStore> {
        let work = WorkDir::new(tag)?;
        work.sub("incoming")?;
        let user = ServerUser::get()?;
        if user.switches_user {
            std::os::unix::fs::chown(work.path().join("incoming"), Some(user.uid), Some(user.gid))?;
        }
        for d in ["store/basebackups_005", "store/wal_005"] {
            std::fs::create_dir_all(work.path().join(d))?;
        }
        Ok(WalGStore { work })
    }

    /// The store's root (`[backup] repo`).
    pub fn root(&self) -> PathBuf {
        self.work.path().join("store")
    }

    pub fn archive_command(&self) -> String {
        format!(
            "test ! -f {dir}/%f && cp %p {dir}/%f",
            dir = self.work.path().join("incoming").display()
        )
    }

    /// Every segment and history file archived so far, into `wal_005/`.
    pub fn push_wal(&self) -> Result<()> {
        for e in std::fs::read_dir(self.work.path().join("incoming"))? {
            let path = e?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let dest = self.root().join(format!("wal_005/{name}.lz4"));
            if !dest.exists() {
                std::fs::write(&dest, lz4_frame(&std::fs::read(&path)?)?)?;
            }
        }
        Ok(())
    }

    /// A full backup of `source` (`pg_basebackup -Ft -X none`, as a remote
    /// `backup-push` streams it) with its sentinel, written last.
    pub fn backup(&self, source: &Cluster) -> Result<String> {
        let dir = self.work.path().join("basebackup");
        let _ = std::fs::remove_dir_all(&dir);
        let out = source
            .pg_command("pg_basebackup")
            .arg("-D")
            .arg(&dir)
            .args(["-Ft", "-X", "none", "-c", "fast", "--no-sync", "-h"])
            .arg(source.socket_dir())
            .args([
                "-p",
                &source.port().to_string(),
                "-U",
                &source.options().superuser,
            ])
            .output()
            .context("running pg_basebackup")?;
        ensure!(
            out.status.success(),
            "pg_basebackup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("backup_manifest"))?)?;
        let range = &manifest["WAL-Ranges"][0];
        let lsn = |k: &str| -> Result<u64> {
            let text = range[k].as_str().context("a WAL range")?;
            let (hi, lo) = text.split_once('/').context("an LSN")?;
            Ok((u64::from_str_radix(hi, 16)? << 32) | u64::from_str_radix(lo, 16)?)
        };
        let (start, finish) = (lsn("Start-LSN")?, lsn("End-LSN")?);
        let name = format!(
            "base_{}",
            source.query_one(&format!(
                "select pg_walfile_name('{}')",
                range["Start-LSN"].as_str().unwrap_or_default()
            ))?
        );
        let parts = self
            .root()
            .join(format!("basebackups_005/{name}/tar_partitions"));
        std::fs::create_dir_all(&parts)?;
        let tar = std::fs::read(dir.join("base.tar"))?;
        std::fs::write(parts.join("part_001.tar.lz4"), lz4_frame(&tar)?)?;
        // A tablespace's files go into the partitions under the symlink's
        // path, `pg_tblspc/<oid>/…` (wal-g's TablespaceSpec), and the
        // sentinel's `Spec` says where each tablespace was.
        let mut spec = serde_json::json!({
            "base_prefix": source.data_dir(),
            "tablespaces": [],
        });
        let mut part = 1;
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let Some(oid) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".tar"))
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            let location = source.query_one(&format!("select pg_tablespace_location({oid})"))?;
            let mut out = tar::Builder::new(Vec::new());
            let mut members = tar::Archive::new(std::fs::File::open(&path)?);
            for member in members.entries()? {
                let mut member = member?;
                let name = format!("pg_tblspc/{oid}/{}", member.path()?.display());
                let mut header = member.header().clone();
                out.append_data(&mut header, name, &mut member)?;
            }
            part += 1;
            std::fs::write(
                parts.join(format!("part_{part:03}.tar.lz4")),
                lz4_frame(&out.into_inner()?)?,
            )?;
            spec["tablespaces"]
                .as_array_mut()
                .context("the spec's list")?
                .push(oid.into());
            spec[oid] = serde_json::json!({"loc": location, "link": format!("pg_tblspc/{oid}")});
        }
        let sentinel = serde_json::json!({
            "LSN": start,
            "DeltaLSN": null,
            "DeltaFrom": null,
            "DeltaFullName": null,
            "DeltaCount": 0,
            "FinishLSN": finish,
            "PgVersion": source.query_one("show server_version_num")?.parse::<u64>()?,
            "SystemIdentifier": source
                .query_one("select system_identifier from pg_control_system()")?
                .parse::<u64>()?,
            "UncompressedSize": tar.len(),
            "CompressedSize": std::fs::metadata(parts.join("part_001.tar.lz4"))?.len(),
            "Version": 2,
            "Hostname": "test",
            "DataDir": source.data_dir(),
            "IsPermanent": false,
            "Spec": spec,
        });
        std::fs::write(
            self.root()
                .join(format!("basebackups_005/{name}_backup_stop_sentinel.json")),
            serde_json::to_vec(&sentinel)?,
        )?;
        Ok(name)
    }
}

/// `data` as an LZ4 frame (wal-g's lz4: pierrec/lz4's frame writer).
fn lz4_frame(data: &[u8]) -> Result<Vec<u8>> {
    use std::io::Write;
    let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
    enc.write_all(data)?;
    Ok(enc.finish()?)
}
