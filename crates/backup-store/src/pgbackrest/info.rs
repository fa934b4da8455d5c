//! `backup.info` (the stanza's backups) and `archive.info` (the archive's
//! clusters).

use std::collections::BTreeMap;

use walshadow_types::Lsn;

use super::ini::Ini;
use crate::backup::{Backup, BackupKind, utc_text};

fn lsn(v: &serde_json::Value, key: &str) -> Result<Lsn, String> {
    v[key]
        .as_str()
        .ok_or_else(|| format!("no {key}"))?
        .parse()
        .map_err(|e| format!("{key}: {e}"))
}

fn string(v: &serde_json::Value, key: &str) -> Result<String, String> {
    v[key]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("no {key}"))
}

fn number(v: &serde_json::Value, key: &str) -> Result<u64, String> {
    v[key].as_u64().ok_or_else(|| format!("no {key}"))
}

/// Clusters by history id: (version, system identifier), the shape both
/// files' `[db:history]` share but for the system identifier's key.
fn history(ini: &Ini, system_id_key: &str) -> Result<BTreeMap<u64, (String, u64)>, String> {
    let mut out = BTreeMap::new();
    for (id, v) in ini.section("db:history") {
        let id: u64 = id
            .parse()
            .map_err(|_| format!("[db:history]: bad id {id:?}"))?;
        let at = |e: String| format!("[db:history] {id}: {e}");
        out.insert(
            id,
            (
                string(v, "db-version").map_err(at)?,
                number(v, system_id_key).map_err(at)?,
            ),
        );
    }
    Ok(out)
}

fn refuse_encryption(ini: &Ini) -> Result<(), String> {
    if ini.has_section("cipher") {
        return Err(
            "the repository is encrypted (repo-cipher-type), which walshadow does not \
                    read; give walshadow an unencrypted repository"
                .to_owned(),
        );
    }
    Ok(())
}

/// Parses `backup.info`: its backups, oldest first.
pub fn parse_backup_info(text: &str) -> Result<Vec<Backup>, String> {
    let ini = Ini::parse(text)?;
    refuse_encryption(&ini)?;
    let clusters = history(&ini, "db-system-id")?;
    let mut backups = Vec::new();
    for (label, v) in ini.section("backup:current") {
        let at = |e: String| format!("backup {label}: {e}");
        let kind = match v["backup-type"].as_str() {
            Some("full") => BackupKind::Full,
            Some("diff") => BackupKind::Diff,
            Some("incr") => BackupKind::Incr,
            other => return Err(at(format!("unknown backup-type {other:?}"))),
        };
        let archive_start = string(v, "backup-archive-start").map_err(at)?;
        let timeline = archive_start
            .get(..8)
            .and_then(|t| u32::from_str_radix(t, 16).ok())
            .ok_or_else(|| at(format!("bad backup-archive-start {archive_start:?}")))?;
        let db_id = number(v, "db-id").map_err(at)?;
        let (pg_version, system_id) = clusters
            .get(&db_id)
            .cloned()
            .ok_or_else(|| at(format!("db-id {db_id} is not in [db:history]")))?;
        let page_errors = v["backup-error"].as_bool().unwrap_or(false);
        let started = number(v, "backup-timestamp-start").map_err(at)?;
        backups.push((
            started,
            Backup {
                label: label.clone(),
                kind,
                prior: v["backup-prior"].as_str().map(str::to_owned),
                start_lsn: lsn(v, "backup-lsn-start").map_err(at)?,
                stop_lsn: lsn(v, "backup-lsn-stop").map_err(at)?,
                timeline,
                archive_start,
                archive_stop: string(v, "backup-archive-stop").map_err(at)?,
                ended: utc_text(number(v, "backup-timestamp-stop").map_err(at)?),
                size: Some(number(v, "backup-info-size").map_err(at)?),
                stored_size: Some(number(v, "backup-info-repo-size").map_err(at)?),
                archive: format!("{pg_version}-{db_id}"),
                pg_version,
                system_id,
                flaw: page_errors
                    .then(|| "pgBackRest found page checksum errors while copying it".to_owned()),
            },
        ));
    }
    backups.sort_by(|(a, x), (b, y)| (a, &x.label).cmp(&(b, &y.label)));
    Ok(backups.into_iter().map(|(_, b)| b).collect())
}

/// `archive.info`: the clusters whose WAL the archive holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveInfo {
    /// History id → (version, system identifier).
    pub clusters: BTreeMap<u64, (String, u64)>,
}

impl ArchiveInfo {
    /// The archive id (`15-1`) of the newest cluster with this system
    /// identifier and version.
    pub fn archive_id(&self, pg_version: &str, system_id: u64) -> Option<String> {
        self.clusters
            .iter()
            .rev()
            .find(|(_, (v, s))| v == pg_version && *s == system_id)
            .map(|(id, (v, _))| format!("{v}-{id}"))
    }
}

/// Parses `archive.info` (its `[db:history]` names the system identifier
/// `db-id`).
pub fn parse_archive_info(text: &str) -> Result<ArchiveInfo, String> {
    let ini = Ini::parse(text)?;
    refuse_encryption(&ini)?;
    Ok(ArchiveInfo {
        clusters: history(&ini, "db-id")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by pgBackRest 2.45 for a PostgreSQL 15 cluster (a full, a
    /// differential and an incremental backup); one backup line kept per kind.
    const BACKUP_INFO: &str = include_str!("../../tests/data/pgbackrest-2.45/backup.info");
    const ARCHIVE_INFO: &str = include_str!("../../tests/data/pgbackrest-2.45/archive.info");

    #[test]
    fn backups_of_a_real_backup_info() {
        let backups = parse_backup_info(BACKUP_INFO).unwrap();
        let kinds: Vec<_> = backups.iter().map(|b| b.kind).collect();
        assert_eq!(
            kinds,
            [BackupKind::Full, BackupKind::Diff, BackupKind::Incr]
        );
        let incr = &backups[2];
        assert_eq!(incr.label, "20261203-184938F_20261203-184943I");
        assert_eq!(
            incr.prior.as_deref(),
            Some("20261203-184938F_20261203-184940D")
        );
        assert_eq!(incr.start_lsn, "0/6000028".parse().unwrap());
        assert_eq!(incr.stop_lsn, "0/6000100".parse().unwrap());
        assert_eq!(incr.timeline, 1);
        assert_eq!(incr.archive, "15-1");
        assert_eq!(incr.system_id, 7715151869477729070);
        assert_eq!(incr.ended, "2026-12-03 18:49:45");
        assert_eq!(incr.flaw, None);
    }

    #[test]
    fn archive_info_names_the_archive_id() {
        let info = parse_archive_info(ARCHIVE_INFO).unwrap();
        assert_eq!(
            info.archive_id("15", 7715151869477729070).as_deref(),
            Some("15-1")
        );
        assert_eq!(info.archive_id("16", 7715151869477729070), None);
    }

    #[test]
    fn an_encrypted_repository_is_refused() {
        let text = format!("{BACKUP_INFO}\n[cipher]\ncipher-pass=\"x\"\n");
        assert!(parse_backup_info(&text).unwrap_err().contains("encrypted"));
    }
}
