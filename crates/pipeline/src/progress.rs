//! Durable progress: `<state>/progress.json`, what ClickHouse has proven to
//! hold and where decoding restarts.
//!
//! The contract (invariant 4): `applied` is the end of a commit record such
//! that every transaction committed up to it has all its rows accepted by
//! ClickHouse (an INSERT answered 200 with `wait_end_of_query=1`); `restart`
//! is where the WAL must be decoded again to rebuild every transaction that
//! was still open at `applied`. The file is written only after such a flush,
//! by write-temp + fsync + rename, with a format version and a CRC-32C. The
//! slot's flush position never passes `restart`. After a crash, transactions
//! committed at or before `applied` are skipped; later ones are emitted again,
//! and their rows collapse with the copies ClickHouse may already hold (same
//! `_version`).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
pub use walshadow_state_file::StateFile;
use walshadow_state_file::{Envelope, StateFileError};
use walshadow_types::Lsn;
use walshadow_types::catalog::RelationDesc;

/// A table that stopped on a definite error; the others keep streaming.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stopped {
    /// The commit (or change) LSN the error is about.
    pub lsn: Lsn,
    /// The kind ([`crate::stop::StopKind::code`]); empty in files of older
    /// versions.
    #[serde(default)]
    pub code: String,
    pub reason: String,
    pub remedy: String,
}

/// What walshadow knows durably about one pinned table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableProgress {
    /// The ClickHouse table (in `clickhouse.database`).
    pub destination: String,
    /// The source relation as its ClickHouse table was last made to match.
    pub schema: Option<RelationDesc>,
    /// The column names, types and value policies its ClickHouse table was
    /// last made with (`rename_columns`, `column_types`, `out_of_range`…),
    /// so a start tells a rule changed in the file from one unchanged.
    /// Absent in files of earlier versions: the current rules are taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout_rules: Option<crate::scope::RowColumnRules>,
    pub stopped: Option<Stopped>,
    /// Rows written to ClickHouse (inserts, updates and delete markers).
    pub rows: u64,
    /// Opted in by the config table (not pinned in the config file).
    #[serde(default)]
    pub opted_in: bool,
    /// Where streaming of the table began (its opt-in's commit).
    #[serde(default)]
    pub since: Lsn,
    /// Opted out at this commit: not streamed; its ClickHouse table stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opted_out: Option<Lsn>,
    /// Why the table is out since `opted_out` (its config table row, its
    /// `[table]` section removed, its source table gone from a pattern).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_why: Option<String>,
    /// A resync under way: the table streams and loads into
    /// `destination` (`<its own>__wsresync`) until that is swapped in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync: Option<Resync>,
    /// The config table's `resync` counter last acted on.
    #[serde(default)]
    pub resync_seen: i64,
    /// A partitioned table's leaf partitions at the last catalog read: a
    /// partition that leaves (DETACH, DROP) or joins with rows of its own
    /// (ATTACH) changes the table's rows without a row change in the WAL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaves: Option<std::collections::BTreeSet<walshadow_types::Oid>>,
    /// Since when a table in scope that has no ClickHouse table yet waits
    /// for a primary key or replica identity (its rows meanwhile are not
    /// streamed; they are loaded once it has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for_key: Option<Lsn>,
    /// The `S` of the last load of the whole table into a fresh ClickHouse
    /// table (a resync, or the load once a key appeared): changes of
    /// commits up to it are in the loaded rows, so they are not streamed
    /// again — a replay after a crash would otherwise send a commit's
    /// changes from before a TRUNCATE into the new table, with versions
    /// above the loaded rows'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_at: Option<Lsn>,
    /// Columns the table's rules leave out (`exclude_columns`,
    /// `unsupported_columns = "skip"`), with why, as of its last schema
    /// sync.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub left_out: BTreeMap<String, String>,
    /// Values the stream wrote as the columns' `out_of_range` policies say
    /// (NULL or the nearest value) instead of stopping the table.
    #[serde(default, skip_serializing_if = "crate::progress::is_zero")]
    pub values_replaced: u64,
    /// An opted-in table's column rules, from its config-table row (a
    /// pinned table's are in the config file).
    #[serde(
        default,
        skip_serializing_if = "crate::scope::RowColumnRules::is_empty"
    )]
    pub columns: crate::scope::RowColumnRules,
    /// Taken by this pattern row of the config table (not a row of its
    /// own): an exclusion row may opt it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_pattern: Option<String>,
}

pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A resync (`walshadow table resync`): from its `s` the table streams into
/// a fresh table made from the catalog, which a load fills with the rows
/// at `s`; once loaded it is exchanged with the table's own destination
/// (readers see the old rows until then) and the old rows are dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resync {
    /// The table's own destination, which the resync replaces.
    pub destination: String,
    /// The commit of the request: the load's `S`.
    pub s: Lsn,
    /// `copy` or `base_backup`.
    pub mode: String,
    /// The resync table's uuid, recorded before the exchange: after a
    /// crash, the destination having it means the exchange applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Why walshadow reloads the table by itself (a change ClickHouse
    /// cannot follow in place); `None` for a resync someone asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl TableProgress {
    pub fn new(destination: String, since: Lsn) -> TableProgress {
        TableProgress {
            destination,
            schema: None,
            layout_rules: None,
            stopped: None,
            rows: 0,
            opted_in: false,
            since,
            opted_out: None,
            out_why: None,
            resync: None,
            resync_seen: 0,
            leaves: None,
            waiting_for_key: None,
            loaded_at: None,
            left_out: BTreeMap::new(),
            values_replaced: 0,
            columns: Default::default(),
            config_pattern: None,
        }
    }
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    pub format_version: u32,
    /// The source's system identifier: a state dir is never reused for
    /// another cluster.
    pub system_id: u64,
    pub applied: Lsn,
    pub restart: Lsn,
    /// Pinned tables by `schema.name`.
    pub tables: BTreeMap<String, TableProgress>,
    /// Paused by `walshadow ctl pause` (kept across restarts until
    /// `resume`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<Paused>,
    /// The config table's pattern rows, by their key (`public.ord_*`,
    /// `~."regex"`): the config table is read from the WAL, so what its
    /// rows say is kept here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config_patterns: BTreeMap<String, ConfigPattern>,
    /// Tables the config table's own rows say not to replicate: a pattern
    /// row does not take them.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub config_rows_off: std::collections::BTreeSet<String>,
}

/// A pattern row of the config table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigPattern {
    /// `false`: an exclusion, which wins over the rows that include.
    pub replicate: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_load: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "crate::scope::RowColumnRules::is_empty"
    )]
    pub columns: crate::scope::RowColumnRules,
}

/// The stream takes no WAL: `walshadow ctl pause`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paused {
    /// Unix ms of the pause.
    pub since_unix_ms: u64,
    /// `applied` when it paused: everything committed up to here is in
    /// ClickHouse, nothing later is applied until `resume`.
    pub at: Lsn,
}

/// Why the progress file could not be used.
pub type ProgressError = StateFileError;

impl Progress {
    pub fn new(system_id: u64, start: Lsn) -> Progress {
        Progress {
            format_version: Self::FORMAT_VERSION,
            system_id,
            applied: start,
            restart: start,
            tables: BTreeMap::new(),
            paused: None,
            config_patterns: BTreeMap::new(),
            config_rows_off: Default::default(),
        }
    }
}

impl StateFile for Progress {
    const FILE: &'static str = "progress.json";
    const FORMAT_VERSION: u32 = 1;
    const ENVELOPE: Envelope = Envelope::Nested("progress");
    const REMEDY: &'static str = "remove it to stream again from the shadow's start (rows already in ClickHouse are rewritten, not duplicated)";
    // Rewritten at every flush.
    const PRETTY: bool = false;

    fn format_version(&self) -> u32 {
        self.format_version
    }
}

/// Writes the progress file, serializing again only the tables whose entry
/// changed since the last write. The file is rewritten every second while
/// rows flow; with thousands of tables in scope their schemas are most of
/// it and hardly ever change.
#[derive(Debug, Default)]
pub struct ProgressWriter {
    tables: BTreeMap<String, (TableProgress, Box<serde_json::value::RawValue>)>,
}

/// [`Progress`] as it serializes, with the tables already serialized (the
/// same fields in the same order, so the bytes are the same).
#[derive(Serialize)]
struct ProgressParts<'a> {
    format_version: u32,
    system_id: u64,
    applied: Lsn,
    restart: Lsn,
    tables: BTreeMap<&'a str, &'a serde_json::value::RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    paused: &'a Option<Paused>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    config_patterns: &'a BTreeMap<String, ConfigPattern>,
    #[serde(skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    config_rows_off: &'a std::collections::BTreeSet<String>,
}

impl ProgressWriter {
    pub fn write(&mut self, p: &Progress, dir: &std::path::Path) -> Result<(), StateFileError> {
        let body = self.serialize(p).map_err(|e| StateFileError::Invalid {
            path: dir.join(Progress::FILE),
            problem: e.to_string(),
            remedy: Progress::REMEDY,
        })?;
        Progress::write_serialized(dir, &body)
    }

    /// What `serde_json::to_vec(p)` gives.
    fn serialize(&mut self, p: &Progress) -> Result<Vec<u8>, serde_json::Error> {
        self.tables.retain(|k, _| p.tables.contains_key(k));
        for (k, t) in &p.tables {
            if self.tables.get(k).is_none_or(|(old, _)| old != t) {
                let raw = serde_json::value::to_raw_value(t)?;
                self.tables.insert(k.clone(), (t.clone(), raw));
            }
        }
        // Every field, so a new one cannot be left out of the bytes.
        let Progress {
            format_version,
            system_id,
            applied,
            restart,
            tables: _,
            ref paused,
            ref config_patterns,
            ref config_rows_off,
        } = *p;
        let parts = ProgressParts {
            format_version,
            system_id,
            applied,
            restart,
            tables: self
                .tables
                .iter()
                .map(|(k, (_, raw))| (k.as_str(), raw.as_ref()))
                .collect(),
            paused,
            config_patterns,
            config_rows_off,
        };
        serde_json::to_vec(&parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_and_detect_damage() {
        let dir = std::env::temp_dir().join(format!("walshadow-progress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(Progress::read(&dir).unwrap().is_none());
        let mut p = Progress::new(42, Lsn(0x100));
        p.applied = Lsn(0x200);
        p.tables.insert(
            "public.t".into(),
            TableProgress {
                rows: 7,
                ..TableProgress::new("t".into(), Lsn(0x100))
            },
        );
        p.write(&dir).unwrap();
        assert_eq!(Progress::read(&dir).unwrap().unwrap(), p);
        let path = dir.join(Progress::FILE);
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("\"rows\":7", "\"rows\":8");
        std::fs::write(&path, text).unwrap();
        let err = Progress::read(&dir).unwrap_err().to_string();
        assert!(err.contains("checksum"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_writer_makes_the_same_bytes_from_what_it_kept() {
        let dir = std::env::temp_dir().join(format!("walshadow-progress-w-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut w = ProgressWriter::default();
        let mut p = Progress::new(42, Lsn(0x100));
        for i in 0..5 {
            p.tables.insert(
                format!("public.t{i}"),
                TableProgress::new(format!("t{i}"), Lsn(0x100)),
            );
        }
        let steps: [&dyn Fn(&mut Progress); 4] = [
            &|_| {},
            &|p| {
                p.applied = Lsn(0x300);
                p.tables.get_mut("public.t2").unwrap().rows = 9;
            },
            &|p| {
                p.tables.remove("public.t0");
                p.tables.get_mut("public.t4").unwrap().stopped = None;
                p.tables.get_mut("public.t4").unwrap().loaded_at = Some(Lsn(0x280));
            },
            &|p| {
                p.tables.insert(
                    "public.new".into(),
                    TableProgress::new("new".into(), Lsn(0x300)),
                );
            },
        ];
        for step in steps {
            step(&mut p);
            assert_eq!(w.serialize(&p).unwrap(), serde_json::to_vec(&p).unwrap());
            w.write(&p, &dir).unwrap();
            assert_eq!(Progress::read(&dir).unwrap().unwrap(), p);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
