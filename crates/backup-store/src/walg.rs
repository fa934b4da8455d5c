//! wal-g stores (PostgreSQL), as wal-g lays them out (read from its source:
//! `internal/backup_sentinel_dto.go`, `internal/storage_tar_ball.go`,
//! `internal/uploader.go`, `internal/backup_util.go`; see
//! `shared/notes/walg-layout.md`):
//!
//! ```text
//!  <prefix>/basebackups_005/<backup>_backup_stop_sentinel.json   JSON: LSN, FinishLSN,
//!                                  PgVersion, SystemIdentifier, DeltaFrom, …; written last
//!  <prefix>/basebackups_005/<backup>/tar_partitions/part_NNN.tar[.lz4|.zst|…]
//!                                                   pg_control.tar[…], backup_label.tar[…]
//!  <prefix>/wal_005/<segment>[.lz4|.zst|.gz|…], <tli>.history[…]
//!  <backup> = base_<the segment of LSN>[_D_<parent's segment>]
//! ```
//!
//! `latest` is the backup whose sentinel was written last. Delta backups
//! (`DeltaFrom`) carry increments of pages, not pages: refused. Encryption
//! leaves no name behind, so a tar whose first bytes are not its
//! compression's (or a tar's) is refused as encrypted.

use std::collections::BTreeMap;

use walshadow_types::{Lsn, TimeLineId};

use crate::backup::{ArchivedFile, Backup, BackupKind, utc_text};
use crate::barman_cloud::BackupTar;
use crate::repository::Entry;
use crate::{Compression, Repository, StoreError};

const BACKUPS: &str = "basebackups_005";
const WALS: &str = "wal_005";
const SENTINEL: &str = "_backup_stop_sentinel.json";

/// A wal-g store (its prefix is the repository's root).
#[derive(Debug)]
pub struct WalG {
    repo: Repository,
}

/// The sentinel's fields walshadow reads (`BackupSentinelDto`).
#[derive(Debug, serde::Deserialize)]
struct Sentinel {
    #[serde(rename = "LSN")]
    lsn: Option<u64>,
    #[serde(rename = "FinishLSN")]
    finish_lsn: Option<u64>,
    #[serde(rename = "PgVersion", default)]
    pg_version: u64,
    #[serde(rename = "SystemIdentifier")]
    system_identifier: Option<u64>,
    #[serde(rename = "DeltaFrom")]
    delta_from: Option<String>,
    #[serde(rename = "UncompressedSize", default)]
    uncompressed_size: Option<u64>,
    #[serde(rename = "CompressedSize", default)]
    compressed_size: Option<u64>,
}

/// `base_<24 hex>`, optionally `_D_<24 hex>`: its timeline and start
/// segment.
fn parse_backup_name(name: &str) -> Option<(TimeLineId, &str)> {
    let seg = name.strip_prefix("base_")?.get(..24)?;
    if !seg.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let tli = u32::from_str_radix(seg.get(..8)?, 16).ok()?;
    Some((tli, seg))
}

/// A backup from its sentinel, or why it is not one.
fn backup_from_sentinel(name: &str, json: &[u8], ended_ms: i64) -> Result<Backup, String> {
    let s: Sentinel = serde_json::from_slice(json).map_err(|e| format!("not a sentinel: {e}"))?;
    let (timeline, start_segment) =
        parse_backup_name(name).ok_or_else(|| format!("{name:?} is not a wal-g backup name"))?;
    let start = s.lsn.ok_or("no LSN")?;
    let stop = s.finish_lsn.ok_or("no FinishLSN")?;
    let flaw = s.delta_from.as_ref().map(|from| {
        format!(
            "a delta backup (from {from}): it holds page increments, not pages; take a full \
             backup (wal-g backup-push --full)"
        )
    });
    Ok(Backup {
        label: name.to_owned(),
        kind: if s.delta_from.is_some() {
            BackupKind::Incr
        } else {
            BackupKind::Full
        },
        prior: s.delta_from,
        start_lsn: Lsn(start),
        stop_lsn: Lsn(stop),
        timeline,
        archive_start: start_segment.to_owned(),
        // The sentinel does not say the segment size: the default one's.
        archive_stop: walshadow_pg_format::wal_files::segment_file_name(
            timeline,
            Lsn(stop).segment_number(16 << 20),
            16 << 20,
        ),
        ended: utc_text(u64::try_from(ended_ms / 1000).unwrap_or(0)),
        size: s.uncompressed_size,
        stored_size: s.compressed_size,
        // server_version_num: 150020 is 15.20.
        pg_version: (s.pg_version / 10_000).to_string(),
        system_id: s.system_identifier.ok_or("no SystemIdentifier")?,
        archive: WALS.to_owned(),
        flaw,
    })
}

/// The compressions wal-g writes that walshadow reads, by extension.
fn compression_of(file: &str) -> Result<(Compression, &str), String> {
    for ext in [".lzma", ".br", ".lzo"] {
        if file.ends_with(ext) {
            return Err(format!(
                "{file}: compressed as {ext} (set WALG_COMPRESSION_METHOD to lz4 or zstd)"
            ));
        }
    }
    if let Some(stem) = file.strip_suffix(".zst") {
        return Ok((Compression::Zst, stem));
    }
    // Releases before eec5327f wrote uncompressed files with a trailing dot.
    let file = file.strip_suffix('.').unwrap_or(file);
    Ok(Compression::from_name(file))
}

impl WalG {
    pub fn new(repo: Repository) -> Self {
        WalG { repo }
    }

    pub fn repository(&self) -> &Repository {
        &self.repo
    }

    fn unsupported(&self, what: String) -> StoreError {
        StoreError::Unsupported {
            store: self.repo.name().to_owned(),
            what,
            remedy: "use lz4 or zstd without encryption, or initial_load = 'copy' or \
                     'base_backup'"
                .to_owned(),
        }
    }

    /// The store's finished backups (those with a sentinel), oldest first
    /// by when their sentinel was written, as wal-g orders them.
    pub async fn backups(&self) -> Result<Vec<Backup>, StoreError> {
        let mut found = Vec::new();
        for e in self.repo.list(BACKUPS).await? {
            let file = e.key.rsplit('/').next().unwrap_or_default();
            let Some(name) = file.strip_suffix(SENTINEL) else {
                continue;
            };
            let json = self.repo.get(&e.key).await?;
            let backup = backup_from_sentinel(name, &json, e.modified_ms)
                .map_err(|reason| self.repo.malformed(&e.key, reason))?;
            found.push((e.modified_ms, backup));
        }
        found.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.label.cmp(&b.1.label)));
        Ok(found.into_iter().map(|(_, b)| b).collect())
    }

    /// The WAL segments archived, by name (partial segments, backup labels
    /// and histories left out).
    pub async fn archived_segments(&self) -> Result<Vec<ArchivedFile>, StoreError> {
        let mut out = Vec::new();
        for entry in self.repo.list(WALS).await? {
            out.extend(self.archived_file(&entry)?);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Segment `name` as archived, if it is. `wal_005/` is flat: the listing
    /// starts at the name (S3's start-after) and reads a few keys, not the
    /// whole archive (enough for the backup labels and the partial copy
    /// that sort between the name and its compressed file).
    pub async fn archived_segment(&self, name: &str) -> Result<Option<ArchivedFile>, StoreError> {
        let after = format!("{WALS}/{name}");
        for entry in self.repo.list_after(WALS, &after, 32).await? {
            if !entry.key.starts_with(&after) {
                break;
            }
            if let Some(f) = self.archived_file(&entry)?.filter(|f| f.name == name) {
                return Ok(Some(f));
            }
        }
        Ok(None)
    }

    /// An archive entry that is a segment; a compression walshadow does not
    /// read is refused.
    fn archived_file(&self, entry: &Entry) -> Result<Option<ArchivedFile>, StoreError> {
        let file = entry.key.rsplit('/').next().unwrap_or_default();
        let (compression, name) = compression_of(file).map_err(|what| self.unsupported(what))?;
        Ok(ArchivedFile::segment(name, &entry.key, compression))
    }

    /// Whether the history file of timeline `tli` is archived.
    pub async fn has_history(&self, tli: TimeLineId) -> Result<bool, StoreError> {
        let name = walshadow_pg_format::wal_files::history_file_name(tli);
        Ok(self.repo.list(WALS).await?.iter().any(|e| {
            let file = e.key.rsplit('/').next().unwrap_or_default();
            compression_of(file).is_ok_and(|(_, stem)| stem == name)
        }))
    }

    /// The tars of backup `label` (wal-g puts tablespaces' files into the
    /// same partitions, under `pg_tblspc/<oid>/`), each checked for an
    /// encrypted content by its first bytes.
    pub async fn backup_tars(&self, label: &str) -> Result<Vec<BackupTar>, StoreError> {
        let dir = format!("{BACKUPS}/{label}/tar_partitions");
        let mut tars = BTreeMap::new();
        for e in self.repo.list(&dir).await? {
            let file = e.key.rsplit('/').next().unwrap_or_default();
            let (compression, stem) = compression_of(file).map_err(|w| self.unsupported(w))?;
            if !stem.ends_with(".tar") {
                continue;
            }
            let head = self.repo.get_range(&e.key, 0, e.size.min(512)).await?;
            if !looks_like(compression, &head) {
                return Err(self.unsupported(format!(
                    "{}: its first bytes are not {} (an encrypted backup: \
                     WALG_LIBSODIUM_KEY, WALG_PGP_KEY, …)",
                    e.key,
                    match compression {
                        Compression::None => "a tar's",
                        _ => "its compression's",
                    }
                )));
            }
            tars.insert(
                e.key.clone(),
                BackupTar {
                    tablespace: None,
                    key: e.key,
                    compression,
                    size: e.size,
                },
            );
        }
        if tars.is_empty() {
            return Err(StoreError::NotFound {
                store: self.repo.name().to_owned(),
                path: format!("{dir}/part_001.tar"),
            });
        }
        Ok(tars.into_values().collect())
    }
}

/// Whether `head` starts as `compression` (or a tar) does.
fn looks_like(compression: Compression, head: &[u8]) -> bool {
    match compression {
        Compression::Lz4 => head.starts_with(&[0x04, 0x22, 0x4D, 0x18]),
        Compression::Zst => head.starts_with(&[0x28, 0xB5, 0x2F, 0xFD]),
        Compression::Gz => head.starts_with(&[0x1F, 0x8B]),
        Compression::Bz2 => head.starts_with(b"BZh"),
        Compression::None => head.get(257..262) == Some(b"ustar".as_slice()) || head.len() < 262,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sentinel as wal-g 3.x writes one (`BackupSentinelDtoV2`).
    const SENTINEL_JSON: &str = r#"{"LSN":33554472,"DeltaLSN":null,"DeltaFrom":null,"DeltaFullName":null,"DeltaCount":0,"FinishLSN":33554688,"PgVersion":150020,"SystemIdentifier":7715151869477729070,"UncompressedSize":23456789,"CompressedSize":3456789,"DataCatalogSize":23000000,"UserData":null,"FilesMetadataDisabled":false,"Version":2,"StartTime":"2026-12-04T14:00:00.000000Z","FinishTime":"2026-12-04T14:00:05.000000Z","DateFmt":"%Y-%m-%dT%H:%M:%S.%fZ","Hostname":"db","DataDir":"/var/lib/postgresql/15/main","IsPermanent":false}"#;

    #[test]
    fn a_sentinel_and_its_name() {
        let b = backup_from_sentinel(
            "base_000000010000000000000002",
            SENTINEL_JSON.as_bytes(),
            1_796_392_805_000,
        )
        .unwrap();
        assert_eq!(b.start_lsn, "0/2000028".parse().unwrap());
        assert_eq!(b.stop_lsn, "0/2000100".parse().unwrap());
        assert_eq!((b.timeline, b.pg_version.as_str()), (1, "15"));
        assert_eq!(b.system_id, 7715151869477729070);
        assert_eq!(b.archive_start, "000000010000000000000002");
        assert_eq!((b.kind, b.flaw.is_none()), (BackupKind::Full, true));
        let delta = SENTINEL_JSON.replace(
            r#""DeltaFrom":null"#,
            r#""DeltaFrom":"base_000000010000000000000001""#,
        );
        let b = backup_from_sentinel(
            "base_000000010000000000000002_D_000000010000000000000001",
            delta.as_bytes(),
            0,
        )
        .unwrap();
        assert!(b.flaw.unwrap().contains("delta"));
        assert!(backup_from_sentinel("base_xyz", SENTINEL_JSON.as_bytes(), 0).is_err());
        let torn = SENTINEL_JSON.replace(r#""FinishLSN":33554688,"#, "");
        assert!(backup_from_sentinel("base_000000010000000000000002", torn.as_bytes(), 0).is_err());
    }

    #[test]
    fn extensions_and_first_bytes() {
        assert_eq!(
            compression_of("000000010000000000000002.lz4").unwrap(),
            (Compression::Lz4, "000000010000000000000002")
        );
        assert_eq!(
            compression_of("part_001.tar.zst").unwrap(),
            (Compression::Zst, "part_001.tar")
        );
        assert_eq!(
            compression_of("part_001.tar.").unwrap(),
            (Compression::None, "part_001.tar")
        );
        assert!(compression_of("part_001.tar.lzma").is_err());
        assert!(looks_like(Compression::Lz4, &[0x04, 0x22, 0x4D, 0x18, 0]));
        assert!(!looks_like(Compression::Lz4, b"\x00\x00encrypted"));
        let mut tar = vec![0u8; 512];
        tar[257..262].copy_from_slice(b"ustar");
        assert!(looks_like(Compression::None, &tar));
        assert!(!looks_like(Compression::None, &[1u8; 512]));
    }
}
