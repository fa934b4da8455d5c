//! Backup stores: the backups an operator's backup tool keeps, their files
//! and the WAL archive beside them, for loads that cost the source nothing
//! (`initial_load = "object_store"`) and for WAL the source no longer has.
//!
//! ```text
//!  [backup] config ─▶ Repository (object_store: a local path, or S3 with a prefix)
//!                        ├─▶ BarmanCloud: base/<id>/backup.info ─▶ Backup; wals/<tli+log>/…
//!                        ├─▶ WalG: basebackups_005/<name>_backup_stop_sentinel.json ─▶
//!                        │         Backup; tar_partitions/; wal_005/<segment>[.ext]
//!                        └─▶ PgBackRest: backup.info ─▶ Backup (label, LSNs, timeline)
//!                                        backup.manifest ─▶ files, each in the backup
//!                                                           that holds it (diff/incr)
//!                                        archive/<stanza>/<pg>-<id>/ ─▶ WAL segments
//!                                                                      and histories
//!  Compression: gz, lz4, zst, bz2 as the store names them
//!  continuity: the archive from a backup's start to the source's branch, hole by hole
//!  Landed: <state>/bootstrap/, what `init --bootstrap` kept of its BASE_BACKUP
//! ```
//!
//! Everything here reads; nothing writes to a store (`init` writes the
//! landed backup).

pub mod backup;
pub mod barman_cloud;
pub mod compression;
pub mod continuity;
pub mod error;
pub mod landed;
pub mod pgbackrest;
pub mod repository;
pub mod store;
pub mod suitability;
pub mod walg;

pub use backup::{ArchivedFile, Backup, BackupKind};
pub use compression::Compression;
pub use error::StoreError;
pub use repository::{Repository, S3Options};
pub use store::BackupStore;
pub use suitability::SourceFacts;
