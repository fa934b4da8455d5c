//! What `walshadow init` leaves in the state directory for `walshadow run`.
//!
//! ```text
//! <state>/init.json          InitState (format version, crc32c), written last
//! <state>/init.partial       present while an init runs (names the data dir
//!                            it fills, so a rerun may clear it)
//! <state>/seed/              the filter's starting knowledge, as of the backup
//!                            (see `seed.rs`):
//!     global.map             global/pg_filenode.map
//!     <db>.map               base/<db>/pg_filenode.map
//!     <db>.pg_class          base/<db>/<pg_class file>, whole
//!     classes.json           (db, file) → class and oid → class from the
//!                            source's catalog at init
//! <state>/filter.ckpt        the filter's state at a record boundary, written
//!                            by `run` (see `filter/checkpoint.rs`)
//! <state>/wal/               the filtered WAL (SegmentStore)
//! <state>/feeder/            the feeder's socket directory
//! <state>/shadow-socket/     the shadow's socket directory (owned by run_as)
//! ```

use serde::{Deserialize, Serialize};
use walshadow_state_file::Envelope;
pub use walshadow_state_file::{StateFile, StateFileError};
use walshadow_types::Lsn;

/// Written once by `init`, read by every `run`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitState {
    pub format_version: u32,
    pub system_id: u64,
    /// PostgreSQL major number (15..18).
    pub major: u32,
    /// The source's `server_version` (the feeder reports it to the shadow).
    pub server_version: String,
    pub timeline: u32,
    pub segment_size: u32,
    /// The base backup's start (its checkpoint's redo pointer): the shadow
    /// replays from here, the filter learns from here.
    pub backup_start: Lsn,
    /// The base backup's end: the shadow is consistent from here.
    pub backup_end: Lsn,
    pub slot: String,
    /// The shadow's port (on its private socket directory only).
    pub shadow_port: u16,
    /// The feeder's port (on its private socket directory).
    pub feeder_port: u16,
    /// The source database walshadow streams tables of (`source.url`'s
    /// database, else the user name, as libpq does). Absent in states of
    /// older versions, which are not checked.
    #[serde(default)]
    pub database: Option<String>,
    /// A transaction id (xid8) assigned right after the backup
    /// (`pg_current_xact_id()`): every transaction that wrote before
    /// `backup_start` has a lower one.
    /// The stream decodes from `backup_start`, so such a transaction still
    /// open then reaches ClickHouse only through the initial loads, which
    /// read once none is running (`pg_snapshot_xmin` at or past this).
    /// Absent in states of older versions (no wait).
    #[serde(default)]
    pub xid_horizon: Option<u64>,
}

impl StateFile for InitState {
    const FILE: &'static str = "init.json";
    const FORMAT_VERSION: u32 = 1;
    const ENVELOPE: Envelope = Envelope::Flat;
    const REMEDY: &'static str = "re-run `walshadow init --force`";

    fn format_version(&self) -> u32 {
        self.format_version
    }
}
