//! barman-cloud stores (what `barman-cloud-backup` and
//! `barman-cloud-wal-archive` write, and CloudNativePG with them), as
//! barman 3.x lays them out:
//!
//! ```text
//!  <prefix>/<server>/base/<backup id>/backup.info    key=value lines (begin_xlog, end_xlog,
//!                                                    timeline, systemid, version, status, …)
//!  <prefix>/<server>/base/<backup id>/data.tar[.gz|.bz2|…]   the cluster as one tar
//!  <prefix>/<server>/wals/<tli+log>/<segment>[.gz|.bz2|.zst|.lz4|.xz|.snappy]
//!  <prefix>/<server>/wals/<tli>.history
//! ```
//!
//! barman-cloud takes full backups only.

use std::collections::BTreeMap;

use walshadow_types::Lsn;

use crate::backup::{ArchivedFile, Backup, BackupKind};
use crate::repository::Entry;
use crate::{Compression, Repository, StoreError};

/// One server of a barman-cloud store.
#[derive(Debug)]
pub struct BarmanCloud {
    repo: Repository,
    server: String,
}

/// `backup.info`'s `key=value` lines, values as barman wrote them (Python's
/// `str()`: `None`, numbers, bare or quoted text).
pub fn parse_backup_info(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// A backup from its `backup.info`, or why it is not one.
pub fn backup_from_info(label: &str, info: &BTreeMap<String, String>) -> Result<Backup, String> {
    let get = |k: &str| {
        info.get(k)
            .map(String::as_str)
            .filter(|v| *v != "None" && !v.is_empty())
            .ok_or_else(|| format!("no {k}"))
    };
    let lsn = |k: &str| -> Result<Lsn, String> { get(k)?.parse().map_err(|e| format!("{k}: {e}")) };
    let number = |k: &str| -> Result<u64, String> {
        get(k)?.parse().map_err(|_| format!("{k} is not a number"))
    };
    let status = get("status")?;
    // server_version_num: 150020 is 15.20 (10 and later).
    let version = number("version")?;
    Ok(Backup {
        label: label.to_owned(),
        kind: BackupKind::Full,
        prior: None,
        start_lsn: lsn("begin_xlog")?,
        stop_lsn: lsn("end_xlog")?,
        timeline: number("timeline")?
            .try_into()
            .map_err(|_| "timeline out of range".to_owned())?,
        archive_start: get("begin_wal")?.to_owned(),
        archive_stop: get("end_wal")?.to_owned(),
        // 2026-12-03 19:21:55.103421+00:00
        ended: get("end_time")?.get(..19).unwrap_or_default().to_owned(),
        size: number("cluster_size").or_else(|_| number("size")).ok(),
        stored_size: None,
        pg_version: (version / 10_000).to_string(),
        system_id: number("systemid")?,
        archive: "wals".to_owned(),
        flaw: (status != "DONE").then(|| format!("barman-cloud recorded it as {status}")),
    })
}

impl BarmanCloud {
    pub fn new(repo: Repository, server: &str) -> Self {
        BarmanCloud {
            repo,
            server: server.to_owned(),
        }
    }

    pub fn repository(&self) -> &Repository {
        &self.repo
    }

    /// The server's backups, oldest first (backup ids are their start
    /// times, `20261203T192149`).
    pub async fn backups(&self) -> Result<Vec<Backup>, StoreError> {
        let base = format!("{}/base", self.server);
        let entries = self.repo.list_all(&base).await?;
        let mut backups = Vec::new();
        for info in entries.iter().filter(|e| e.key.ends_with("/backup.info")) {
            let label = info
                .key
                .strip_suffix("/backup.info")
                .and_then(|k| k.rsplit('/').next())
                .unwrap_or_default();
            let text = self.repo.get(&info.key).await?;
            let text = String::from_utf8_lossy(&text);
            let mut backup = backup_from_info(label, &parse_backup_info(&text))
                .map_err(|reason| self.repo.malformed(&info.key, reason))?;
            let dir = format!("{base}/{label}/");
            let files: Vec<_> = entries.iter().filter(|e| e.key.starts_with(&dir)).collect();
            backup.stored_size = Some(files.iter().map(|e| e.size).sum());
            if backup.flaw.is_none() && !files.iter().any(|e| is_data_tar(&e.key)) {
                backup.flaw = Some("its data.tar is not in the store".to_owned());
            }
            backups.push(backup);
        }
        backups.sort_by(|a, b| a.label.cmp(&b.label));
        Ok(backups)
    }

    /// Whether the history file of timeline `tli` is archived (barman keeps
    /// histories at the top of `wals/`).
    pub async fn has_history(&self, tli: walshadow_types::TimeLineId) -> Result<bool, StoreError> {
        let name = walshadow_pg_format::wal_files::history_file_name(tli);
        Ok(self
            .repo
            .list(&format!("{}/wals", self.server))
            .await?
            .iter()
            .any(|e| {
                let file = e.key.rsplit('/').next().unwrap_or_default();
                Compression::from_name(file).1 == name
            }))
    }

    /// Every WAL segment archived for the server, sorted by name (partial
    /// segments, backup labels and histories left out). xz and snappy, which
    /// walshadow does not decompress, are refused by name.
    pub async fn archived_segments(&self) -> Result<Vec<ArchivedFile>, StoreError> {
        let mut out = Vec::new();
        for entry in self.repo.list_all(&format!("{}/wals", self.server)).await? {
            out.extend(self.archived_file(&entry)?);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Segment `name` as archived, if it is: one listing of its directory
    /// (`wals/<first 16 characters>/`), not of the whole archive.
    pub async fn archived_segment(&self, name: &str) -> Result<Option<ArchivedFile>, StoreError> {
        let Some(dir) = name.get(..16) else {
            return Ok(None);
        };
        for entry in self
            .repo
            .list(&format!("{}/wals/{dir}", self.server))
            .await?
        {
            if let Some(f) = self.archived_file(&entry)?.filter(|f| f.name == name) {
                return Ok(Some(f));
            }
        }
        Ok(None)
    }

    /// An archive entry that is a segment; one compressed as walshadow does
    /// not read is refused.
    fn archived_file(&self, entry: &Entry) -> Result<Option<ArchivedFile>, StoreError> {
        let file = entry.key.rsplit('/').next().unwrap_or_default();
        if [".xz", ".snappy"].iter().any(|ext| file.ends_with(ext)) {
            return Err(StoreError::Unsupported {
                store: self.repo.name().to_owned(),
                what: format!("WAL compressed as {file} (xz, snappy)"),
                remedy: "archive with barman-cloud-wal-archive --gzip, --bzip2, --zstd or --lz4"
                    .to_owned(),
            });
        }
        let (compression, name) = Compression::from_name(file);
        Ok(ArchivedFile::segment(name, &entry.key, compression))
    }
}

/// One tar of a barman-cloud backup: the data directory's (`data.tar`) or
/// a tablespace's (`<oid>.tar`), as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupTar {
    /// `None`: the data directory.
    pub tablespace: Option<u32>,
    pub key: String,
    pub compression: Compression,
    pub size: u64,
}

impl BarmanCloud {
    /// The tars of backup `label`, tablespaces first, the data directory
    /// last. A compression walshadow does not read is refused by name.
    pub async fn backup_tars(&self, label: &str) -> Result<Vec<BackupTar>, StoreError> {
        let dir = format!("{}/base/{label}", self.server);
        let mut tars = Vec::new();
        for e in self.repo.list(&dir).await? {
            let file = e.key.rsplit('/').next().unwrap_or_default();
            if !file.contains(".tar") {
                continue;
            }
            if [".xz", ".snappy"].iter().any(|ext| file.ends_with(ext)) {
                return Err(StoreError::Unsupported {
                    store: self.repo.name().to_owned(),
                    what: format!("backup {label} compressed as {file} (xz, snappy)"),
                    remedy: "back up with barman-cloud-backup --gzip, --bzip2 or without \
                             compression"
                        .to_owned(),
                });
            }
            let (compression, stem) = Compression::from_name(file);
            let tablespace = match stem.strip_suffix(".tar") {
                Some("data") => None,
                Some(oid) => match oid.parse() {
                    Ok(oid) => Some(oid),
                    Err(_) => continue,
                },
                None => continue,
            };
            tars.push(BackupTar {
                tablespace,
                key: e.key,
                compression,
                size: e.size,
            });
        }
        if !tars.iter().any(|t| t.tablespace.is_none()) {
            return Err(StoreError::NotFound {
                store: self.repo.name().to_owned(),
                path: format!("{dir}/data.tar"),
            });
        }
        tars.sort_by_key(|t| (t.tablespace.is_none(), t.tablespace));
        Ok(tars)
    }
}

fn is_data_tar(key: &str) -> bool {
    let file = key.rsplit('/').next().unwrap_or_default();
    file == "data.tar" || file.starts_with("data.tar.")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by barman-cloud-backup 3.19.1 for a PostgreSQL 15 cluster.
    const INFO: &str = include_str!("../tests/data/barman-cloud-3.19/backup.info");

    #[test]
    fn a_real_backup_info() {
        let b = backup_from_info("20261203T192149", &parse_backup_info(INFO)).unwrap();
        assert_eq!(b.start_lsn, "0/8000028".parse().unwrap());
        assert_eq!(b.stop_lsn, "0/8000138".parse().unwrap());
        assert_eq!(b.archive_start, "000000010000000000000008");
        assert_eq!((b.timeline, b.pg_version.as_str()), (1, "15"));
        assert_eq!(b.system_id, 7715151869477729070);
        assert_eq!(b.ended, "2026-12-03 19:21:55");
        assert_eq!(b.flaw, None);
        let failed = INFO.replace("status=DONE", "status=FAILED");
        let b = backup_from_info("x", &parse_backup_info(&failed)).unwrap();
        assert!(b.flaw.unwrap().contains("FAILED"));
        let torn = INFO.replace("begin_xlog=0/8000028", "begin_xlog=None");
        assert!(backup_from_info("x", &parse_backup_info(&torn)).is_err());
    }
}
