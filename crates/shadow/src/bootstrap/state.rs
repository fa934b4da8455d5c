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
}

impl InitState {
    pub const FORMAT_VERSION: u32 = 1;
    pub const FILE: &'static str = "init.json";
}

/// Why `init.json` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {problem}; re-run `walshadow init --force`")]
    Invalid {
        path: std::path::PathBuf,
        problem: String,
    },
}

/// `init.json` on disk: the state's fields plus `crc32c`, the CRC-32C of
/// the state serialized without it (so a reader that only knows
/// [`InitState`] still parses the file, and a torn or edited file is
/// caught by [`InitState::read`]).
#[derive(Serialize, Deserialize)]
struct InitFile {
    #[serde(flatten)]
    state: InitState,
    crc32c: u32,
}

impl InitState {
    fn checksum(&self) -> u32 {
        crc32c::crc32c(&serde_json::to_vec(self).unwrap_or_default())
    }

    /// Writes `<dir>/init.json` durably: temp file, fsync, rename, fsync of
    /// the directory. A crash leaves either the old file or the new one.
    pub fn write(&self, dir: &std::path::Path) -> Result<(), StateFileError> {
        let path = dir.join(Self::FILE);
        let file = InitFile {
            state: self.clone(),
            crc32c: self.checksum(),
        };
        let text = serde_json::to_vec_pretty(&file).map_err(|e| StateFileError::Invalid {
            path: path.clone(),
            problem: e.to_string(),
        })?;
        crate::durable::write_file(dir, Self::FILE, &text)
            .map_err(|source| StateFileError::Io { path, source })
    }

    /// Reads and checks `<dir>/init.json`.
    pub fn read(dir: &std::path::Path) -> Result<InitState, StateFileError> {
        let path = dir.join(Self::FILE);
        let text = std::fs::read(&path).map_err(|source| StateFileError::Io {
            path: path.clone(),
            source,
        })?;
        let invalid = |problem: String| StateFileError::Invalid {
            path: path.clone(),
            problem,
        };
        let file: InitFile = serde_json::from_slice(&text).map_err(|e| invalid(e.to_string()))?;
        if file.state.format_version != Self::FORMAT_VERSION {
            return Err(invalid(format!(
                "format version {} (this walshadow reads {})",
                file.state.format_version,
                Self::FORMAT_VERSION
            )));
        }
        if file.state.checksum() != file.crc32c {
            return Err(invalid("checksum mismatch (torn or edited file)".into()));
        }
        Ok(file.state)
    }
}
