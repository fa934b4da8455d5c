//! Whether a backup can serve the source: the one set of checks `walshadow
//! backup check` reports and an `object_store` load refuses on.

use std::collections::BTreeSet;

use walshadow_types::TimeLineId;

use crate::continuity::Branch;
use crate::{Backup, BackupStore, StoreError};

/// What the source says of itself (over replication: `IDENTIFY_SYSTEM`,
/// `TIMELINE_HISTORY`, the `server_version` parameter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFacts {
    pub system_id: u64,
    /// `server_version` as reported ("15.20", "18.1 (Debian …)").
    pub version: String,
    pub branch: Branch,
}

/// The backup called `wanted` (`latest`: the newest without a flaw the
/// tool recorded) among the store's.
pub async fn choose(store: &BackupStore, wanted: &str) -> Result<Backup, StoreError> {
    let backups = store.backups().await?;
    // `latest`: the newest the tool recorded as whole (a failed or
    // damaged newer one does not hide a good one).
    let chosen = if wanted == "latest" {
        backups
            .iter()
            .rev()
            .find(|b| b.flaw.is_none())
            .or(backups.last())
    } else {
        backups.iter().find(|b| b.label == wanted)
    };
    chosen.cloned().ok_or_else(|| StoreError::NoSuchBackup {
        store: store.name().to_owned(),
        wanted: wanted.to_owned(),
        held: if backups.is_empty() {
            "no backups".into()
        } else {
            backups
                .iter()
                .map(|b| b.label.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        },
    })
}

/// Why backup `b` cannot serve `source`: another cluster, another major,
/// off the source's branch of timelines, or a history file replay needs
/// missing from the archive. Empty: it can, as far as these go.
pub async fn problems(
    store: &BackupStore,
    b: &Backup,
    source: &SourceFacts,
) -> Result<Vec<String>, StoreError> {
    let mut problems = Vec::new();
    if b.system_id != source.system_id {
        problems.push(format!(
            "the backup is of cluster {}, the source is cluster {}: the [backup] store, stanza \
             or server name is another cluster's",
            b.system_id, source.system_id
        ));
    }
    // "15.20", "17devel", "16beta1", "18.6 (Debian …)": the leading digits.
    let major: String = source
        .version
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    if b.pg_version != major {
        problems.push(format!(
            "the backup is of PostgreSQL {}, the source runs {}",
            b.pg_version,
            if source.version.is_empty() {
                "a version it did not report"
            } else {
                &source.version
            }
        ));
    }
    let branch = &source.branch;
    if let Some(why) = branch.off_branch(b.timeline, b.start_lsn, b.stop_lsn) {
        problems.push(format!(
            "the backup is off the source's timeline branch: {why}"
        ));
    }
    // Replay follows the branch onto each newer timeline by its history
    // file: without it, replay stays on the old timeline and diverges.
    let newer: BTreeSet<TimeLineId> = branch
        .history
        .iter()
        .map(|e| e.parent)
        .chain([branch.timeline])
        .filter(|&t| t > b.timeline)
        .collect();
    for tli in newer {
        if !store.has_history(b, tli).await? {
            problems.push(format!(
                "the archive has no history file of timeline {tli} ({}), which replay from \
                 the backup needs to follow the source's branch: archive it (PostgreSQL \
                 archives it at promotion; check archive_command)",
                walshadow_pg_format::wal_files::history_file_name(tli)
            ));
        }
    }
    Ok(problems)
}
