//! The ledger of initial-load passes: `<state>/backfills.toml`.
//!
//! One entry per table and opt-in: the mode, `S` (the commit LSN the
//! opt-in took effect at; every loaded row is tagged with it), the phase
//! and, for `copy`, the progress marks: per relation read (the table, or
//! each leaf partition) its relfilenode (the timeline the marks mean
//! something on) and block ranges with the block up to which rows are in
//! ClickHouse. A mark moves only after the insert holding its rows was
//! answered 200 (`wait_end_of_query=1`), so a restart re-reads at most one
//! chunk per range and the repeats collapse (same `_version`).
//!
//! Entries are keyed by table: a second request for a table with a pending
//! or running entry collapses into it; an opt-out removes it (a running
//! load is cancelled first). Done entries stay as the record of the load.
//! The file is rewritten whole (write-temp, fsync, rename).
//!
//! A backup-mode pass publishes through a staging table
//! ([`crate::staging`]): `swap` holds the staging table's uuid from the
//! moment the exchange may have happened until the pass is done, so boot
//! resumes the swap's tail instead of loading again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use walshadow_types::Lsn;

/// Where a pass is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Waiting to start (or to be retried after a failed attempt).
    Pending,
    /// An attempt is reading.
    Loading,
    /// Every row is in ClickHouse.
    Done,
    /// Attempts exhausted: stays until the table is opted in again (or
    /// walshadow restarts, which tries again).
    Failed,
}

/// Blocks `[start, end)` of one relation, read up to `next`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockRange {
    pub start: u32,
    pub end: u32,
    pub next: u32,
}

impl BlockRange {
    pub fn is_done(&self) -> bool {
        self.next >= self.end
    }
}

/// Progress of one relation of a `copy` pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelationMarks {
    pub oid: u32,
    /// The timeline of the marks: a rewrite (VACUUM FULL, CLUSTER,
    /// TRUNCATE) moves every tuple, and the marks are void.
    pub relfilenode: u32,
    pub ranges: Vec<BlockRange>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pass {
    /// `copy` or `base_backup`.
    pub mode: String,
    /// The opt-in's commit LSN.
    pub s: Lsn,
    pub phase: Phase,
    /// Attempts started (fresh snapshots).
    #[serde(default)]
    pub attempts: u32,
    /// Attempts that went on from marks of an earlier one.
    #[serde(default)]
    pub resumes: u32,
    /// Rows inserted so far (repeats after a resume included).
    #[serde(default)]
    pub rows: u64,
    #[serde(default)]
    pub bytes: u64,
    /// Values the columns' `out_of_range` policies replaced (NULL or the
    /// nearest value) in the rows inserted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub values_replaced: u64,
    /// The last attempt's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Relations read, by `schema.name`.
    #[serde(default)]
    pub relations: BTreeMap<String, RelationMarks>,
    /// Set while a staging swap is under way (persisted before `EXCHANGE
    /// TABLES`); a pass with it resumes the swap, never loads again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapState>,
    /// An opt-in (after an opt-out) that arrived while this pass's swap was
    /// under way: it replaces this entry once the swap is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub then: Option<NextLoad>,
}

/// A load requested behind a swap (see [`Pass::then`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextLoad {
    pub mode: String,
    pub s: Lsn,
}

/// A staging swap recorded before its exchange (see [`crate::staging`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwapState {
    /// `system.tables.uuid` of the staging table before the exchange.
    pub staging_uuid: String,
}

impl Pass {
    pub fn new(mode: &str, s: Lsn) -> Pass {
        Pass {
            mode: mode.to_owned(),
            s,
            phase: Phase::Pending,
            attempts: 0,
            resumes: 0,
            rows: 0,
            bytes: 0,
            values_replaced: 0,
            error: None,
            relations: BTreeMap::new(),
            swap: None,
            then: None,
        }
    }

    pub fn is_open(&self) -> bool {
        matches!(self.phase, Phase::Pending | Phase::Loading)
    }

    /// Blocks read and blocks to read, over every relation's ranges (a
    /// `copy` load's marks; 0 of 0 before they are planned).
    pub fn blocks(&self) -> (u64, u64) {
        self.relations
            .values()
            .flat_map(|m| &m.ranges)
            .fold((0, 0), |(d, t), r| {
                (
                    d + u64::from(r.next.saturating_sub(r.start)),
                    t + u64::from(r.end.saturating_sub(r.start)),
                )
            })
    }
}

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Passes by table (`schema.name`).
    #[serde(default, rename = "table")]
    pub tables: BTreeMap<String, Pass>,
}

/// The ledger could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a ledger ({detail}); move it away to start the loads again")]
    Invalid { path: PathBuf, detail: String },
}

impl Ledger {
    pub const FILE: &'static str = "backfills.toml";

    /// Reads `<dir>/backfills.toml` (empty when there is none).
    pub fn read(dir: &Path) -> Result<Ledger, LedgerError> {
        let path = dir.join(Self::FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Ledger::default()),
            Err(source) => return Err(LedgerError::Io { path, source }),
        };
        toml::from_str(&text).map_err(|e| LedgerError::Invalid {
            path,
            detail: e.to_string(),
        })
    }

    pub fn write(&self, dir: &Path) -> Result<(), LedgerError> {
        let text = toml::to_string(self).map_err(|e| LedgerError::Invalid {
            path: dir.join(Self::FILE),
            detail: e.to_string(),
        })?;
        let body = format!(
            "# walshadow's initial loads; rewritten by `walshadow run`, do not edit while it runs.\n{text}"
        );
        walshadow_state_file::write_durably(dir, Self::FILE, body.as_bytes()).map_err(|source| {
            LedgerError::Io {
                path: dir.join(Self::FILE),
                source,
            }
        })
    }

    /// Passes not done, by mode.
    pub fn pending_by_mode(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for p in self.tables.values().filter(|p| p.is_open()) {
            *out.entry(p.mode.clone()).or_insert(0) += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let dir = std::env::temp_dir().join(format!("walshadow-ledger-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(Ledger::read(&dir).unwrap(), Ledger::default());
        let mut l = Ledger::default();
        let mut p = Pass::new("copy", Lsn(0x1_0000_0028));
        p.relations.insert(
            "public.t".into(),
            RelationMarks {
                oid: 16384,
                relfilenode: 16390,
                ranges: vec![
                    BlockRange {
                        start: 0,
                        end: 10,
                        next: 4,
                    },
                    BlockRange {
                        start: 10,
                        end: 20,
                        next: 20,
                    },
                ],
            },
        );
        p.error = Some("relation rewritten".into());
        l.tables.insert("public.t".into(), p);
        let mut u = Pass::new("base_backup", Lsn(0x28));
        u.swap = Some(SwapState {
            staging_uuid: "9532ac90-521f-4837-86b5-f3148003d072".into(),
        });
        u.then = Some(NextLoad {
            mode: "base_backup".into(),
            s: Lsn(0x2_0000_0040),
        });
        l.tables.insert("public.u".into(), u);
        l.write(&dir).unwrap();
        let back = Ledger::read(&dir).unwrap();
        assert_eq!(back, l);
        let text = std::fs::read_to_string(dir.join(Ledger::FILE)).unwrap();
        assert!(text.contains("s = \"1/28\""), "{text}");
        assert!(text.contains("s = \"2/40\""), "{text}");
        assert_eq!(back.pending_by_mode().get("copy"), Some(&1));
        assert_eq!(back.pending_by_mode().get("base_backup"), Some(&1));
        // A ledger written before swaps existed still reads.
        std::fs::write(
            dir.join(Ledger::FILE),
            "[table.\"public.v\"]\nmode = \"copy\"\ns = \"0/28\"\nphase = \"pending\"\n",
        )
        .unwrap();
        let old = Ledger::read(&dir).unwrap();
        assert_eq!(old.tables["public.v"], Pass::new("copy", Lsn(0x28)));
        std::fs::write(dir.join(Ledger::FILE), "table = 3").unwrap();
        assert!(Ledger::read(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
