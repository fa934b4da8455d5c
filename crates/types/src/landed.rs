//! The layout of the backup `walshadow init --bootstrap` lands in
//! `<state>/bootstrap/`: written by the shadow's `init`, read as a backup
//! store (`walshadow_backup_store::landed`). One definition for both sides.

use serde::{Deserialize, Serialize};

use crate::{Lsn, TimeLineId};

/// The manifest's file name; its presence means a complete landing.
pub const MANIFEST: &str = "backup.json";
/// Members of the data directory's archive.
pub const DATA: &str = "data";
/// Members of each tablespace's archive, under its OID.
pub const TABLESPACES: &str = "tablespaces";
/// The window's WAL segments.
pub const WAL: &str = "pg_wal";

/// What `init --bootstrap` recorded of its backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandedManifest {
    pub label: String,
    /// The backup's redo (`BASE_BACKUP`'s start).
    pub start_lsn: Lsn,
    /// Where replay from it is consistent.
    pub stop_lsn: Lsn,
    pub timeline: TimeLineId,
    pub system_id: u64,
    /// PostgreSQL's major (`15`).
    pub pg_version: String,
    pub segment_size: u32,
    /// When it ended, in seconds since the Unix epoch.
    pub ended_unix: u64,
    /// The tables (`schema.name`) whose files it holds: each is loaded from
    /// it.
    pub tables: Vec<String>,
    /// Every file landed (relative to the directory: `data/base/5/16384`,
    /// `pg_wal/…`) with its size: a file missing or of another size is
    /// damage, never rows silently left out.
    #[serde(default)]
    pub files: std::collections::BTreeMap<String, u64>,
}
