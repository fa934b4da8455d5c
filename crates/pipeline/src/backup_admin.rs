//! `walshadow backup list` and `walshadow backup check`: what the `[backup]`
//! store holds, and whether its chosen backup and WAL archive can serve the
//! source now. Reads only; the source is asked over a replication
//! connection (`IDENTIFY_SYSTEM`, `TIMELINE_HISTORY`), never with SQL.

use std::collections::BTreeSet;
use std::fmt;

use walshadow_backup_store::continuity::{self, Branch, Continuity};
use walshadow_backup_store::pgbackrest::{Backup, BackupKind, PgBackRest};
use walshadow_backup_store::{Repository, StoreError};
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

fn open(config: &Config) -> Result<(PgBackRest, &BackupConfig), BackupAdminError> {
    let b = config.backup.as_ref().ok_or(BackupAdminError::NoStore)?;
    let repo = Repository::open(&b.repo)?;
    let store = match b.tool {
        BackupTool::Pgbackrest => PgBackRest::new(repo, b.stanza.as_deref().unwrap_or_default()),
    };
    Ok((store, b))
}

/// What the store alone says against a backup serving a load.
async fn unusable(store: &PgBackRest, b: &Backup, archived: &BTreeSet<String>) -> Option<String> {
    if b.page_errors {
        return Some("pgBackRest found page checksum errors while copying it".into());
    }
    if let Err(e) = store.manifest(&b.label).await {
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

async fn archived_names(store: &PgBackRest, b: &Backup) -> Result<BTreeSet<String>, StoreError> {
    let info = store.archive_info().await?;
    let Some(id) = info.archive_id(&b.pg_version, b.system_id) else {
        return Ok(BTreeSet::new());
    };
    Ok(store
        .archived_segments(&id)
        .await?
        .into_iter()
        .map(|f| f.name)
        .collect())
}

/// Every backup of the store, oldest first, with whether it can serve.
pub async fn list(config: &Config) -> Result<Vec<BackupRow>, BackupAdminError> {
    let (store, _) = open(config)?;
    let backups = store.backups().await?;
    let mut rows = Vec::with_capacity(backups.len());
    let mut archived: Option<(String, BTreeSet<String>)> = None;
    for b in backups {
        if archived
            .as_ref()
            .is_none_or(|(id, _)| *id != b.archive_id())
        {
            archived = Some((b.archive_id(), archived_names(&store, &b).await?));
        }
        let names = archived.as_ref().map(|(_, n)| n).expect("just set");
        let unusable = unusable(&store, &b, names).await;
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
    let (store, settings) = open(config)?;
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
            "the backup is of cluster {}, the source is cluster {}: the [backup] store or stanza \
             is another cluster's",
            chosen.system_id, ident.systemid
        ));
    }
    let major = version.split(['.', ' ']).next().unwrap_or_default();
    if chosen.pg_version != major {
        problems.push(format!(
            "the backup is of PostgreSQL {}, the source runs {version}",
            chosen.pg_version
        ));
    }
    if let Some(why) = branch.off_branch(chosen.timeline, chosen.start_lsn, chosen.stop_lsn) {
        problems.push(format!(
            "the backup is off the source's timeline branch: {why}"
        ));
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
    // The first segment is read whole: the archive is readable, its
    // content matches the SHA-1 pgBackRest named it by.
    if let Some(id) = store
        .archive_info()
        .await?
        .archive_id(&chosen.pg_version, chosen.system_id)
        && let Some(first) = store
            .archived_segments(&id)
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
                mb(b.size),
                mb(b.repo_size),
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
