//! `walshadow backup list` and `walshadow backup check`: what the `[backup]`
//! store holds, and whether its chosen backup and WAL archive can serve the
//! source now. Reads only; the source is asked over a replication
//! connection (`IDENTIFY_SYSTEM`, `TIMELINE_HISTORY`), never with SQL.

use std::collections::BTreeSet;
use std::fmt;

use walshadow_backup_store::barman_cloud::BarmanCloud;
use walshadow_backup_store::continuity::{self, Branch, Continuity};
use walshadow_backup_store::pgbackrest::PgBackRest;
use walshadow_backup_store::{Backup, BackupKind, BackupStore, Repository, S3Options, StoreError};
use walshadow_config::{BackupConfig, BackupTool, Config};
use walshadow_types::{Lsn, TimeLineId};
use walshadow_wal_reader::replication::{ConnConfig, ReplicationClient};

/// Why a `walshadow backup` command could not answer.
#[derive(Debug, thiserror::Error)]
pub enum BackupAdminError {
    #[error("the config has no [backup] section: add one naming the store (tool, repo, stanza)")]
    NoStore,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("backup {wanted:?} is not in the store (it holds: {held})")]
    NoSuchBackup { wanted: String, held: String },
    #[error("the source, {what}: {message}")]
    Source { what: &'static str, message: String },
}

/// One backup of the store, as `backup list` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BackupRow {
    #[serde(flatten)]
    pub backup: Backup,
    /// Why it cannot serve a load, as far as the store tells (the source's
    /// side is `backup check`'s); `None`: it can.
    pub unusable: Option<String>,
}

/// `backup list`'s rows, printed as a table.
#[derive(Debug)]
pub struct BackupList(pub Vec<BackupRow>);

/// The `[backup]` store.
pub fn open(settings: &BackupConfig) -> Result<BackupStore, StoreError> {
    let creds = settings.credentials.as_ref();
    let s3 = S3Options {
        endpoint: settings.endpoint.clone(),
        region: settings.region.clone(),
        path_style: settings.path_style,
        access_key_id: creds.map(|c| c.access_key_id.clone()),
        secret_access_key: creds.map(|c| c.secret_access_key.clone()),
        session_token: creds.and_then(|c| c.session_token.clone()),
    };
    let repo = Repository::open(&settings.repo, &s3)?;
    Ok(match settings.tool {
        BackupTool::Pgbackrest => BackupStore::PgBackRest(PgBackRest::new(
            repo,
            settings.stanza.as_deref().unwrap_or_default(),
        )),
        BackupTool::BarmanCloud => BackupStore::BarmanCloud(BarmanCloud::new(
            repo,
            settings.server_name.as_deref().unwrap_or_default(),
        )),
    })
}

fn settings(config: &Config) -> Result<&BackupConfig, BackupAdminError> {
    config.backup.as_ref().ok_or(BackupAdminError::NoStore)
}

/// What the store alone says against a backup serving a load.
async fn unusable(store: &BackupStore, b: &Backup, archived: &BTreeSet<String>) -> Option<String> {
    if let Some(flaw) = &b.flaw {
        return Some(flaw.clone());
    }
    if let Err(e) = store.check_readable(b).await {
        return Some(e.to_string());
    }
    if !archived.contains(&b.archive_start) {
        return Some(format!(
            "its first WAL segment {} is not in the archive",
            b.archive_start
        ));
    }
    if !archived.contains(&b.archive_stop) {
        return Some(format!(
            "its last WAL segment {} is not in the archive",
            b.archive_stop
        ));
    }
    None
}

async fn archived_names(store: &BackupStore, b: &Backup) -> Result<BTreeSet<String>, StoreError> {
    Ok(store
        .archived_segments(b)
        .await?
        .into_iter()
        .map(|f| f.name)
        .collect())
}

/// Every backup of the store, oldest first, with whether it can serve.
pub async fn list(config: &Config) -> Result<Vec<BackupRow>, BackupAdminError> {
    let store = open(settings(config)?)?;
    let backups = store.backups().await?;
    let mut rows = Vec::with_capacity(backups.len());
    // One listing of the archive per cluster the backups belong to.
    let mut archived: Option<(String, BTreeSet<String>)> = None;
    for b in backups {
        let names = match archived.take() {
            Some((id, names)) if id == b.archive => names,
            _ => archived_names(&store, &b).await?,
        };
        let unusable = unusable(&store, &b, &names).await;
        archived = Some((b.archive.clone(), names));
        rows.push(BackupRow {
            backup: b,
            unusable,
        });
    }
    Ok(rows)
}

/// `backup check`'s findings.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckReport {
    pub backup: BackupRow,
    pub source_system_id: u64,
    pub source_timeline: TimeLineId,
    pub source_at: Lsn,
    pub continuity: Continuity,
    /// What stops the backup serving a load now; empty: it can.
    pub problems: Vec<String>,
}

fn source_error(
    what: &'static str,
) -> impl Fn(walshadow_wal_reader::replication::ReplicationError) -> BackupAdminError {
    move |e| BackupAdminError::Source {
        what,
        message: e.to_string(),
    }
}

/// Checks the chosen backup (`[backup] backup`) against the store and the
/// source: it is readable, of this cluster, on the source's branch of
/// timelines, and the archive holds every segment from its start to the
/// newest archived one.
pub async fn check(config: &Config) -> Result<CheckReport, BackupAdminError> {
    let settings = settings(config)?;
    let store = open(settings)?;
    let backups = store.backups().await?;
    let chosen = if settings.backup == "latest" {
        backups.last()
    } else {
        backups.iter().find(|b| b.label == settings.backup)
    };
    let Some(chosen) = chosen.cloned() else {
        return Err(BackupAdminError::NoSuchBackup {
            wanted: settings.backup.clone(),
            held: if backups.is_empty() {
                "no backups".into()
            } else {
                backups
                    .iter()
                    .map(|b| b.label.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        });
    };
    let mut cfg = ConnConfig::from_url(&config.source.url).map_err(source_error("[source] url"))?;
    cfg.physical = true;
    cfg.application_name = Some("walshadow-backup-check".into());
    let mut c = ReplicationClient::connect(&cfg)
        .await
        .map_err(source_error("connecting for replication"))?;
    let asked = async {
        let ident = c
            .identify_system()
            .await
            .map_err(source_error("IDENTIFY_SYSTEM"))?;
        let seg = c
            .show("wal_segment_size")
            .await
            .map_err(source_error("SHOW wal_segment_size"))?;
        let history = if ident.timeline > 1 {
            c.timeline_history(ident.timeline)
                .await
                .map_err(source_error("TIMELINE_HISTORY"))?
                .entries
        } else {
            Vec::new()
        };
        let version = c
            .server_param("server_version")
            .unwrap_or_default()
            .to_owned();
        Ok::<_, BackupAdminError>((ident, seg, history, version))
    }
    .await;
    c.close().await;
    let (ident, seg_text, history, version) = asked?;
    let seg_size = walshadow_shadow::bootstrap::source::parse_size(&seg_text).ok_or(
        BackupAdminError::Source {
            what: "SHOW wal_segment_size",
            message: format!("{seg_text:?} is not a size"),
        },
    )?;
    let branch = Branch {
        timeline: ident.timeline,
        history,
    };
    let names = archived_names(&store, &chosen).await?;
    let mut problems = Vec::new();
    if chosen.system_id != ident.systemid {
        problems.push(format!(
            "the backup is of cluster {}, the source is cluster {}: the [backup] store, stanza \
             or server name is another cluster's",
            chosen.system_id, ident.systemid
        ));
    }
    // "15.20", "17devel", "16beta1", "18.6 (Debian …)": the leading digits.
    let major: String = version.chars().take_while(char::is_ascii_digit).collect();
    if chosen.pg_version != major {
        problems.push(format!(
            "the backup is of PostgreSQL {}, the source runs {}",
            chosen.pg_version,
            if version.is_empty() {
                "a version it did not report"
            } else {
                &version
            }
        ));
    }
    if let Some(why) = branch.off_branch(chosen.timeline, chosen.start_lsn, chosen.stop_lsn) {
        problems.push(format!(
            "the backup is off the source's timeline branch: {why}"
        ));
    }
    // Recovery follows the branch onto each newer timeline by its history
    // file: without it, replay stays on the old timeline and diverges.
    let newer = branch
        .history
        .iter()
        .map(|e| e.parent)
        .chain([ident.timeline])
        .filter(|&t| t > chosen.timeline);
    for tli in newer.collect::<BTreeSet<_>>() {
        if !store.has_history(&chosen, tli).await? {
            problems.push(format!(
                "the archive has no history file of timeline {tli} ({}), which replay from \
                 the backup needs to follow the source's branch: archive it (PostgreSQL \
                 archives it at promotion; check archive_command)",
                walshadow_pg_format::wal_files::history_file_name(tli)
            ));
        }
    }
    let continuity = continuity::check(&names, chosen.start_lsn, ident.xlogpos, &branch, seg_size);
    if continuity.last_archived.is_none() {
        problems.push(format!(
            "the archive holds no WAL from the backup's start ({}) on: is archive_command \
             pushing to this stanza?",
            continuity.first
        ));
    } else if continuity.holes_count > 0 {
        problems.push(format!(
            "the archive misses {} segment(s) after the backup's start: {}{} (a load from this \
             backup cannot replay past them; take a new backup)",
            continuity.holes_count,
            continuity.holes.join(", "),
            if continuity.holes_count > continuity.holes.len() as u64 {
                ", …"
            } else {
                ""
            }
        ));
    }
    let unusable = unusable(&store, &chosen, &names).await;
    if let Some(why) = &unusable
        && !problems.iter().any(|p| p.contains(why.as_str()))
    {
        problems.push(why.clone());
    }
    // The first segment is read whole: the archive is readable, and its
    // content is a segment (matching the SHA-1 pgBackRest named it by).
    if let Some(first) = store
        .archived_segments(&chosen)
        .await?
        .into_iter()
        .find(|f| f.name == chosen.archive_start)
        && let Err(e) = store.read_segment(&first, seg_size).await
    {
        problems.push(e.to_string());
    }
    Ok(CheckReport {
        backup: BackupRow {
            backup: chosen,
            unusable,
        },
        source_system_id: ident.systemid,
        source_timeline: ident.timeline,
        source_at: ident.xlogpos,
        continuity,
        problems,
    })
}

fn kind(k: BackupKind) -> &'static str {
    match k {
        BackupKind::Full => "full",
        BackupKind::Diff => "diff",
        BackupKind::Incr => "incr",
    }
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

impl fmt::Display for BackupList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return writeln!(f, "no backups in the store");
        }
        writeln!(
            f,
            "{:<36} {:<4} {:>12} {:>12} {:>3} {:>10} {:>10}  serves a load",
            "backup", "type", "start (redo)", "stop", "tli", "size", "stored"
        )?;
        for r in &self.0 {
            let b = &r.backup;
            writeln!(
                f,
                "{:<36} {:<4} {:>12} {:>12} {:>3} {:>10} {:>10}  {}",
                b.label,
                kind(b.kind),
                b.start_lsn.to_string(),
                b.stop_lsn.to_string(),
                b.timeline,
                b.size.map_or("-".into(), mb),
                b.stored_size.map_or("-".into(), mb),
                r.unusable
                    .as_deref()
                    .map_or("yes".into(), |w| format!("no: {w}"))
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.backup.backup;
        writeln!(
            f,
            "backup {} ({}, PostgreSQL {}, timeline {}, {} to {})",
            b.label,
            kind(b.kind),
            b.pg_version,
            b.timeline,
            b.start_lsn,
            b.stop_lsn
        )?;
        writeln!(
            f,
            "source: cluster {}, timeline {}, at {}",
            self.source_system_id, self.source_timeline, self.source_at
        )?;
        let c = &self.continuity;
        writeln!(
            f,
            "archive: from {} to {}, {} segment(s) missing; {} complete segment(s) of the \
             source not archived yet",
            c.first,
            c.last_archived.as_deref().unwrap_or("(none)"),
            c.holes_count,
            c.not_yet_archived
        )?;
        if self.problems.is_empty() {
            writeln!(f, "ok: the backup and its archive can serve a load")
        } else {
            for p in &self.problems {
                writeln!(f, "problem: {p}")?;
            }
            Ok(())
        }
    }
}
