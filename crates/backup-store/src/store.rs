//! One face for every tool's store: what `walshadow backup` (and the loads
//! to come) ask of it.

use bytes::Bytes;

use crate::StoreError;
use crate::backup::{ArchivedFile, Backup};
use crate::barman_cloud::BarmanCloud;
use crate::landed::Landed;
use crate::pgbackrest::PgBackRest;
use crate::walg::WalG;

/// A backup store of one of the tools walshadow reads.
#[derive(Debug)]
pub enum BackupStore {
    PgBackRest(PgBackRest),
    BarmanCloud(BarmanCloud),
    WalG(WalG),
    /// What `init --bootstrap` landed in the state directory.
    Landed(Landed),
}

impl BackupStore {
    /// The store's name for messages: its location.
    pub fn name(&self) -> &str {
        match self {
            BackupStore::PgBackRest(s) => s.repository().name(),
            BackupStore::BarmanCloud(s) => s.repository().name(),
            BackupStore::WalG(s) => s.repository().name(),
            BackupStore::Landed(s) => s.repository().name(),
        }
    }

    /// Every backup, oldest first.
    pub async fn backups(&self) -> Result<Vec<Backup>, StoreError> {
        match self {
            BackupStore::PgBackRest(s) => s.backups().await,
            BackupStore::BarmanCloud(s) => s.backups().await,
            BackupStore::WalG(s) => s.backups().await,
            BackupStore::Landed(s) => Ok(vec![s.backup()]),
        }
    }

    /// The WAL segments archived beside `backup` (its cluster's), by name.
    pub async fn archived_segments(
        &self,
        backup: &Backup,
    ) -> Result<Vec<ArchivedFile>, StoreError> {
        self.archive_segments(&backup.archive).await
    }

    /// Where the store keeps the WAL of the cluster `system_id` at major
    /// `version` (`15`): pgBackRest's archive id from `archive.info`; the
    /// other tools keep one archive per store (an empty name).
    pub async fn archive_of(&self, system_id: u64, version: &str) -> Result<String, StoreError> {
        match self {
            BackupStore::PgBackRest(s) => s
                .archive_info()
                .await?
                .archive_id(version, system_id)
                .ok_or_else(|| StoreError::Malformed {
                    store: self.name().to_owned(),
                    path: format!("archive/{}/archive.info", s.stanza()),
                    reason: format!(
                        "it names no archive of PostgreSQL {version} with system identifier \
                             {system_id}: is this the source's stanza?"
                    ),
                }),
            BackupStore::BarmanCloud(_) | BackupStore::WalG(_) | BackupStore::Landed(_) => {
                Ok(String::new())
            }
        }
    }

    /// The WAL segments of archive `archive` ([`BackupStore::archive_of`]),
    /// by name.
    pub async fn archive_segments(&self, archive: &str) -> Result<Vec<ArchivedFile>, StoreError> {
        match self {
            BackupStore::PgBackRest(s) => s.archived_segments(archive).await,
            BackupStore::BarmanCloud(s) => s.archived_segments().await,
            BackupStore::WalG(s) => s.archived_segments().await,
            BackupStore::Landed(s) => s.archived_segments(),
        }
    }

    /// Segment `name` in archive `archive`, if it is archived: one narrow
    /// listing (its directory, or from its name on), not the whole archive.
    pub async fn archive_segment(
        &self,
        archive: &str,
        name: &str,
    ) -> Result<Option<ArchivedFile>, StoreError> {
        match self {
            BackupStore::PgBackRest(s) => s.archived_segment(archive, name).await,
            BackupStore::BarmanCloud(s) => s.archived_segment(name).await,
            BackupStore::WalG(s) => s.archived_segment(name).await,
            BackupStore::Landed(s) => {
                Ok(s.archived_segments()?.into_iter().find(|f| f.name == name))
            }
        }
    }

    /// An archived segment's content, checked as far as the store allows
    /// ([`ArchivedFile::read`]).
    pub async fn read_segment(
        &self,
        file: &ArchivedFile,
        seg_size: u32,
    ) -> Result<Bytes, StoreError> {
        let repo = match self {
            BackupStore::PgBackRest(s) => s.repository(),
            BackupStore::BarmanCloud(s) => s.repository(),
            BackupStore::WalG(s) => s.repository(),
            BackupStore::Landed(s) => s.repository(),
        };
        file.read(repo, seg_size).await
    }

    /// Whether the history file of timeline `tli` is archived beside
    /// `backup`: recovery needs it to follow the branch onto `tli`.
    pub async fn has_history(
        &self,
        backup: &Backup,
        tli: walshadow_types::TimeLineId,
    ) -> Result<bool, StoreError> {
        match self {
            BackupStore::PgBackRest(s) => Ok(s.history(&backup.archive, tli).await?.is_some()),
            BackupStore::BarmanCloud(s) => s.has_history(tli).await,
            BackupStore::WalG(s) => s.has_history(tli).await,
            // Its window ends at the backup's end, on the backup's own
            // timeline: nothing replays from it onto another.
            BackupStore::Landed(_) => Ok(true),
        }
    }

    /// Whether the backup's own description reads (pgBackRest: its
    /// manifest, refusing what walshadow does not read).
    pub async fn check_readable(&self, backup: &Backup) -> Result<(), StoreError> {
        match self {
            BackupStore::PgBackRest(s) => s.manifest(&backup.label).await.map(|_| ()),
            BackupStore::BarmanCloud(_) | BackupStore::WalG(_) | BackupStore::Landed(_) => Ok(()),
        }
    }
}
