//! `walshadow backup list` and `walshadow backup check`: what the `[backup]`
//! store holds, and whether its chosen backup and WAL archive can serve the
//! source now. Reads only; the source is asked over a replication
//! connection (`IDENTIFY_SYSTEM`, `TIMELINE_HISTORY`), never with SQL.

use std::collections::BTreeSet;
use std::fmt;

use walshadow_backup_store::barman_cloud::BarmanCloud;
use walshadow_backup_store::continuity::{self, Continuity};
use walshadow_backup_store::pgbackrest::PgBackRest;
use walshadow_backup_store::suitability;
use walshadow_backup_store::{Backup, BackupKind, BackupStore, Repository, S3Options, StoreError};
use walshadow_config::{BackupConfig, BackupTool, Config};
use walshadow_types::{Lsn, TimeLineId};
use walshadow_wal_reader::replication::ConnConfig;

/// Why a `walshadow backup` command could not answer.
#[derive(Debug, thiserror::Error)]
pub enum BackupAdminError {
    #[error("the config has no [backup] section: add one naming the store (tool, repo, stanza)")]
    NoStore,
    #[error(transparent)]
    Store(#[from] StoreError),
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
        BackupTool::WalG => BackupStore::WalG(walshadow_backup_store::walg::WalG::new(repo)),
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
    let chosen = suitability::choose(&store, &settings.backup).await?;
    let mut cfg = ConnConfig::from_url(&config.source.url).map_err(source_error("[source] url"))?;
    cfg.physical = true;
    cfg.application_name = Some("walshadow-backup-check".into());
    let asked = walshadow_backfill::gap::ask_source(&cfg)
        .await
        .map_err(|e| BackupAdminError::Source {
            what: e.what,
            message: e.message,
        })?;
    let (seg_size, source_at) = (asked.seg_size, asked.at);
    let names = archived_names(&store, &chosen).await?;
    let facts = asked.facts;
    let mut problems = suitability::problems(&store, &chosen, &facts).await?;
    let branch = facts.branch;
    let continuity = continuity::check(&names, chosen.start_lsn, source_at, &branch, seg_size);
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
        source_system_id: facts.system_id,
        source_timeline: branch.timeline,
        source_at,
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
