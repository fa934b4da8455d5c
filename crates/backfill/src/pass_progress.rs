//! Where an interrupted `object_store` pass resumes (seed 001, "an
//! interrupted load resumes rather than repeating"): the relation segments
//! whose rows ClickHouse has durably taken into staging, per table, beside
//! what makes them valid — the backup, the table's opt-in and destination,
//! the destination's columns and the relation files walked.
//!
//! ```text
//!  attempt ─▶ staging kept? (same backup, S, destination, columns, files,
//!             and the staging table still there) ─ yes ─▶ its done segments
//!             are not read again
//!                                               └ no ──▶ staging made anew
//!  segment walked ─▶ its rows all emitted (none deferred, none waiting for
//!             TOAST) ─▶ its table's batch inserted ─▶ recorded here, durably
//!  pass published ─▶ this file goes
//! ```
//!
//! A segment is recorded only after the insert that holds its last rows was
//! acknowledged, so a crash at any point loses nothing: a segment not
//! recorded is walked again, and its rows, already partly in staging, come
//! again with the same key and version (the backup's start as `_lsn`, and
//! `_seq` one) and collapse. The gap's replay always runs whole for the same reason.
//! TOAST relations are always walked again: their chunks live in the
//! attempt's own store. `base_backup` takes a new backup per attempt and
//! keeps nothing.

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};
use walshadow_state_file::{Envelope, StateFile, StateFileError};
use walshadow_types::{Lsn, Oid};

/// The file, in the state directory: one `object_store` pass runs at a time.
pub const FILE: &str = "object-store-pass.json";

/// One pass's progress.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassProgress {
    format_version: u32,
    /// The backup's label.
    pub backup: String,
    pub tables: Vec<TableProgress>,
}

/// One table's staging and what it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableProgress {
    pub key: String,
    /// The opt-in: a new one starts over.
    pub s: Lsn,
    pub dest_name: String,
    /// The destination's columns when staging was made (`name type`): a
    /// changed mapping starts over.
    pub columns: Vec<String>,
    /// The relation files planned, `(tablespace, relfilenumber)`, heap and
    /// TOAST: a rewrite or a new partition starts over.
    pub files: BTreeSet<(Oid, Oid)>,
    /// Heap segments `(tablespace, relfilenumber, segment)` whose rows
    /// are all in staging.
    pub done: BTreeSet<(Oid, Oid, u32)>,
    /// Rows inserted into staging so far, for the summary (rows of a
    /// segment walked again after a crash count again).
    pub rows: u64,
    /// The staging table's uuid once made: a staging table made again
    /// since (by another pass of the table) starts over.
    pub staging_uuid: Option<String>,
}

impl StateFile for PassProgress {
    const FILE: &'static str = FILE;
    const FORMAT_VERSION: u32 = 1;
    const ENVELOPE: Envelope = Envelope::Flat;
    const REMEDY: &'static str =
        "remove it: the next object_store pass walks its backup again from the start";
    // Rewritten after each segment.
    const PRETTY: bool = false;

    fn format_version(&self) -> u32 {
        self.format_version
    }
}

impl PassProgress {
    pub fn new(backup: &str) -> Self {
        PassProgress {
            format_version: <Self as StateFile>::FORMAT_VERSION,
            backup: backup.to_owned(),
            tables: Vec::new(),
        }
    }

    /// The saved progress in `dir`; none when there is none or it cannot be
    /// used (said in the log: the pass then starts over, which is safe).
    pub fn load(dir: &Path) -> Option<Self> {
        match <Self as StateFile>::read(dir) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("the object_store pass's progress is unusable, starting over: {e}");
                None
            }
        }
    }

    /// What this file says of `want`'s table, if it is the same table of
    /// the same backup: same opt-in, destination, columns and files.
    pub fn resumable(&self, backup: &str, want: &TableProgress) -> Option<&TableProgress> {
        if self.backup != backup {
            return None;
        }
        self.tables.iter().find(|t| {
            t.key == want.key
                && t.s == want.s
                && t.dest_name == want.dest_name
                && t.columns == want.columns
                && t.files == want.files
        })
    }

    pub fn write(&self, dir: &Path) -> Result<(), StateFileError> {
        <Self as StateFile>::write(self, dir)
    }

    /// Removes the file (the pass published, or it is another pass's).
    pub fn remove(dir: &Path) {
        match std::fs::remove_file(dir.join(FILE)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("removing {}: {e}", dir.join(FILE).display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> TableProgress {
        TableProgress {
            key: "public.t".into(),
            s: Lsn(0x0300_0100),
            dest_name: "t".into(),
            columns: vec!["id Int32".into(), "v Nullable(String)".into()],
            files: [(1663, 16384), (1663, 16390)].into(),
            done: BTreeSet::new(),
            rows: 0,
            staging_uuid: Some("0f6e3c1a".into()),
        }
    }

    #[test]
    fn only_the_same_table_of_the_same_backup_resumes() {
        let mut saved = PassProgress::new("20261205-010000F");
        let mut t = table();
        t.done.insert((1663, 16384, 0));
        t.rows = 1000;
        saved.tables.push(t);
        let want = table();
        let found = saved.resumable("20261205-010000F", &want);
        assert_eq!(found.map(|t| t.rows), Some(1000));
        assert!(saved.resumable("20261205-020000F", &want).is_none());
        for changed in [
            TableProgress {
                s: Lsn(0x0400_0000),
                ..table()
            },
            TableProgress {
                dest_name: "t2".into(),
                ..table()
            },
            TableProgress {
                columns: vec!["id Int64".into()],
                ..table()
            },
            TableProgress {
                files: [(1663, 16999), (1663, 16390)].into(),
                ..table()
            },
        ] {
            assert!(saved.resumable("20261205-010000F", &changed).is_none());
        }
    }

    #[test]
    fn it_survives_a_write_and_a_read() {
        let dir =
            std::env::temp_dir().join(format!("walshadow-pass-progress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(PassProgress::load(&dir), None);
        let mut saved = PassProgress::new("b");
        let mut t = table();
        t.done.insert((1663, 16384, 2));
        saved.tables.push(t);
        saved.write(&dir).unwrap();
        assert_eq!(PassProgress::load(&dir), Some(saved));
        std::fs::write(dir.join(FILE), b"{\"torn").unwrap();
        assert_eq!(PassProgress::load(&dir), None);
        PassProgress::remove(&dir);
        assert!(!dir.join(FILE).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
