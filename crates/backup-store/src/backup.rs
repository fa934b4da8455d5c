//! What every tool's store holds, in one shape: backups, and the archived
//! WAL files beside them.

use bytes::Bytes;
use sha1::{Digest, Sha1};
use walshadow_types::{Lsn, TimeLineId};

use crate::{Compression, Repository, StoreError};

/// The kinds of backup: a whole cluster, or the files changed since an
/// earlier backup (pgBackRest's diff and incr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackupKind {
    Full,
    Diff,
    Incr,
}

/// One backup of a store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Backup {
    /// The tool's name for it (pgBackRest's label, barman's backup id).
    pub label: String,
    pub kind: BackupKind,
    /// The backup this one is a difference from (diff, incr).
    pub prior: Option<String>,
    /// Where the backup's redo starts (`pg_backup_start`'s LSN).
    pub start_lsn: Lsn,
    /// Where the cluster is consistent once replayed (`pg_backup_stop`'s LSN).
    pub stop_lsn: Lsn,
    /// The timeline of `start_lsn`.
    pub timeline: TimeLineId,
    /// The WAL segments holding `start_lsn` and `stop_lsn`.
    pub archive_start: String,
    pub archive_stop: String,
    /// When it ended, UTC (`2026-12-03 19:21:55`).
    pub ended: String,
    /// The cluster's size, and what the store keeps for the backup (with
    /// the backups it references), where the tool records them.
    pub size: Option<u64>,
    pub stored_size: Option<u64>,
    /// PostgreSQL's major version (`15`) and the cluster's system identifier.
    pub pg_version: String,
    pub system_id: u64,
    /// Where the store keeps this backup's WAL (pgBackRest's archive id,
    /// `15-1`; barman-cloud's `wals`).
    pub archive: String,
    /// What the tool itself recorded against the backup (page checksum
    /// errors, a failed or unfinished backup).
    pub flaw: Option<String>,
}

/// An archived WAL segment: its name as PostgreSQL gives it and its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedFile {
    pub name: String,
    pub key: String,
    pub compression: Compression,
    /// The SHA-1 of the content, where the store names files by it.
    pub sha1: Option<String>,
}

impl ArchivedFile {
    /// The archive's file `name` at `key`, if `name` is a WAL segment's
    /// (24 hex digits: partial segments, backup labels and histories are
    /// not).
    pub fn segment(name: &str, key: &str, compression: Compression) -> Option<ArchivedFile> {
        (name.len() == 24 && name.bytes().all(|b| b.is_ascii_hexdigit())).then(|| ArchivedFile {
            name: name.to_owned(),
            key: key.to_owned(),
            compression,
            sha1: None,
        })
    }

    /// The segment's content from `repo`: one segment long, and matching the
    /// SHA-1 its name carries where it carries one.
    pub async fn read(&self, repo: &Repository, seg_size: u32) -> Result<Bytes, StoreError> {
        let stored = repo.get(&self.key).await?;
        let content = self
            .compression
            .decompress(&stored, u64::from(seg_size))
            .map_err(|e| repo.malformed(&self.key, e.to_string()))?;
        if let Some(want) = &self.sha1 {
            let got = hex(&Sha1::digest(&content));
            if &got != want {
                return Err(repo.malformed(&self.key, format!("SHA-1 {got}, its name says {want}")));
            }
        }
        if content.len() != seg_size as usize {
            return Err(repo.malformed(
                &self.key,
                format!(
                    "holds {} bytes, not a {seg_size}-byte segment",
                    content.len()
                ),
            ));
        }
        Ok(Bytes::from(content))
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `YYYY-MM-DD HH:MM:SS` of Unix time `secs` (UTC).
pub fn utc_text(secs: u64) -> String {
    let (y, m, d) = walshadow_pg_format::epoch::civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn unix_time_as_utc_text() {
        assert_eq!(super::utc_text(0), "1970-01-01 00:00:00");
        assert_eq!(super::utc_text(1_796_323_780), "2026-12-03 18:49:40");
        assert_eq!(super::utc_text(951_782_400), "2000-02-29 00:00:00");
    }
}
