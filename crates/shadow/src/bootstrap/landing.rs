//! The landing sink: a `BASE_BACKUP` stream in, a catalog-only data
//! directory out.
//!
//! ```text
//!  member                                   landed as
//!  ───────────────────────────────────────  ─────────────────────────────
//!  pg_wal/<file> (a backup taken with WAL)  skipped: the shadow replays
//!                                           the filtered stream
//!  outside base/, global/, pg_tblspc/       as is (control files, pg_xact,
//!                                           pg_multixact, backup_label, ...)
//!  global/*                                 as is (shared catalogs only)
//!  base/<db>/<non-relation file>            as is (PG_VERSION, pg_filenode.map)
//!  base/<db>/<n>[_fsm|_vm|_init][.<seg>]    class of (db, n):
//!      Catalog, Sequence                      as is
//!      statistics catalog heap               empty main fork, other forks skipped
//!      statistics catalog index              an empty btree's metapage
//!      UserData                              skipped (never written)
//!  <spcoid>.tar: PG_<v>_<cat>/<db>/...      pg_tblspc/<spcoid>/PG_<v>_<cat>/<db>/...
//!                                           (a plain directory: in-place), same rules
//!  pg_tblspc/<spcoid> symlink               skipped (the directory above replaces it)
//! ```
//!
//! Statistics catalogs (`pg_statistic`, `pg_statistic_ext_data`, their TOAST
//! and indexes) hold samples of user columns; the filter drops their WAL, so
//! the shadow gets them empty and keeps them empty.
//!
//! Every relation file the stream carried is remembered with what was done
//! to it, so `init` can tell whether a catalog was rewritten into a file it
//! skipped (see [`Landing::skipped_catalogs`]).
//!
//! Writes are synchronous: init is a one-off on its own runtime, and the
//! sink's futures are awaited in stream order anyway.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use walshadow_types::Oid;
use walshadow_wal_reader::replication::{
    ArchiveInfo, BackupSink, EntryKind, FileAction, SinkError, TarEntry,
};

use super::page::empty_btree_metapage;
use super::source::{ClassList, StatsFile};
use crate::filter::classes::FileClass;
use walshadow_pg_format::page::BLCKSZ;

/// A relation file name: `<number>[_fsm|_vm|_init][.<segno>]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelFileName {
    pub number: Oid,
    /// `None` for the main fork.
    pub fork: Option<&'static str>,
    pub segno: u32,
}

/// Parses a relation file name (md.c's naming); `None` for anything else.
pub fn parse_rel_file_name(name: &str) -> Option<RelFileName> {
    let (base, segno) = match name.split_once('.') {
        Some((b, s)) if !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()) => {
            (b, s.parse().ok()?)
        }
        Some(_) => return None,
        None => (name, 0),
    };
    let (digits, fork) = match base.split_once('_') {
        Some((d, "fsm")) => (d, Some("fsm")),
        Some((d, "vm")) => (d, Some("vm")),
        Some((d, "init")) => (d, Some("init")),
        Some(_) => return None,
        None => (base, None),
    };
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some(RelFileName {
        number: digits.parse().ok()?,
        fork,
        segno,
    })
}

/// Where a landed path sits: a database directory's relation file, or
/// anything else.
enum Place {
    /// `(database, file name)` for members of `base/<db>/` and
    /// `pg_tblspc/<spc>/<verdir>/<db>/`.
    InDatabase(Oid, String),
    /// `global/...`.
    Global,
    Other,
}

fn place(path: &str) -> Place {
    let parts: Vec<&str> = path.split('/').collect();
    let db_and_name = match parts.as_slice() {
        ["global", ..] => return Place::Global,
        ["base", db, name] => (db, name),
        ["pg_tblspc", _spc, _ver, db, name] => (db, name),
        _ => return Place::Other,
    };
    match db_and_name.0.parse::<Oid>() {
        Ok(db) => Place::InDatabase(db, (*db_and_name.1).to_owned()),
        Err(_) => Place::Other,
    }
}

/// What happens to the data of the member being received.
enum Writing {
    Plain(BufWriter<File>),
    /// The first block of a statistics index, turned into an empty btree's
    /// metapage at the end.
    Metapage {
        path: PathBuf,
        first: Vec<u8>,
    },
}

/// Counts for the report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LandingStats {
    pub files_kept: u64,
    pub files_skipped: u64,
    pub bytes_landed: u64,
    pub stats_files_emptied: u64,
}

/// Writes the catalog-only subset of a base backup into `data_dir`.
#[derive(Debug)]
pub struct Landing<'a> {
    data_dir: PathBuf,
    classes: &'a ClassList,
    checksums: bool,
    current: Option<WritingFile>,
    /// Every relation file (main fork, segment 0 or any) the stream carried:
    /// (db, number) → whether any of its files was landed.
    pub streamed: HashMap<(Oid, Oid), bool>,
    /// Database directories (holding `pg_filenode.map`) by database OID.
    pub db_dirs: HashMap<Oid, PathBuf>,
    /// Files of unlisted databases numbered past initdb's, skipped as user
    /// data: (db, file name).
    pub unlisted_skipped: Vec<(Oid, String)>,
    pub stats: LandingStats,
}

struct WritingFile {
    path: PathBuf,
    writing: Writing,
}

impl std::fmt::Debug for WritingFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WritingFile")
            .field("path", &self.path)
            .finish()
    }
}

/// Where a member lands and what is done with it.
enum Decision {
    Skip,
    Keep,
    EmptyHeap,
    EmptyIndex,
}

impl<'a> Landing<'a> {
    pub fn new(data_dir: &Path, classes: &'a ClassList, checksums: bool) -> Self {
        Landing {
            data_dir: data_dir.to_owned(),
            classes,
            checksums,
            current: None,
            streamed: HashMap::new(),
            db_dirs: HashMap::new(),
            unlisted_skipped: Vec::new(),
            stats: LandingStats::default(),
        }
    }

    /// Catalog files (by the `after` listing) that the stream carried and
    /// this landing skipped: a catalog rewritten between the listing the
    /// landing used and the backup's checkpoint.
    pub fn skipped_catalogs(&self, after: &ClassList) -> Vec<(Oid, Oid)> {
        let mut out: Vec<_> = self
            .streamed
            .iter()
            .filter(|&(&(db, file), &kept)| {
                !kept
                    && after.class(db, file).reaches_shadow()
                    && after.stats_file(db, file).is_none()
            })
            .map(|(k, _)| *k)
            .collect();
        out.sort_unstable();
        out
    }

    fn decide(&mut self, path: &str) -> Decision {
        // WAL the backup carries (`init --bootstrap` takes it for the
        // window): the shadow replays the filtered stream, never these.
        if let Some(name) = path.strip_prefix("pg_wal/")
            && !name.contains('/')
        {
            return Decision::Skip;
        }
        let (db, name) = match place(path) {
            Place::InDatabase(db, name) => (db, name),
            Place::Global | Place::Other => return Decision::Keep,
        };
        if name == "pg_filenode.map"
            && let Some(dir) = Path::new(path).parent()
        {
            self.db_dirs.insert(db, self.data_dir.join(dir));
        }
        let Some(rel) = parse_rel_file_name(&name) else {
            // Temporary relations (t<backend>_<n>) are a session's user
            // data; the backup normally leaves them out.
            return if name.starts_with('t') && name[1..].starts_with(|c: char| c.is_ascii_digit()) {
                Decision::Skip
            } else {
                Decision::Keep
            };
        };
        let class = self.classes.class(db, rel.number);
        let stats = self.classes.stats_file(db, rel.number);
        let decision = match (stats, class) {
            (Some(StatsFile::Heap), _) if rel.fork.is_none() && rel.segno == 0 => {
                Decision::EmptyHeap
            }
            (Some(StatsFile::Index), _) if rel.fork.is_none() && rel.segno == 0 => {
                Decision::EmptyIndex
            }
            (Some(_), _) => Decision::Skip,
            (None, FileClass::Catalog | FileClass::Sequence) => Decision::Keep,
            (None, FileClass::UserData | FileClass::StatisticsIndex) => {
                if !self.classes.is_listed(db) {
                    self.unlisted_skipped.push((db, name.clone()));
                }
                Decision::Skip
            }
        };
        let landed = !matches!(decision, Decision::Skip);
        let e = self.streamed.entry((db, rel.number)).or_insert(false);
        *e |= landed;
        decision
    }

    fn create_file(&self, path: &Path) -> Result<File, SinkError> {
        if let Some(parent) = path.parent() {
            mkdirs(parent)?;
        }
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| format!("creating {}: {e}", path.display()).into())
    }
}

fn mkdirs(dir: &Path) -> Result<(), SinkError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("creating {}: {e}", dir.display()).into())
}

impl BackupSink for Landing<'_> {
    async fn begin_file(
        &mut self,
        archive: &ArchiveInfo,
        file: &TarEntry,
    ) -> Result<FileAction, SinkError> {
        if file.path.split('/').any(|c| c == ".." || c.is_empty()) || file.path.starts_with('/') {
            return Err(format!("backup member {:?} escapes the data directory", file.path).into());
        }
        let rel = match archive.spcoid {
            None => file.path.clone(),
            Some(spc) => format!("pg_tblspc/{spc}/{}", file.path),
        };
        let path = self.data_dir.join(&rel);
        match &file.kind {
            EntryKind::Directory => {
                mkdirs(&path)?;
                self.stats.files_kept += 1;
                Ok(FileAction::Skip)
            }
            EntryKind::Symlink(_) => {
                // pg_tblspc/<oid>: its archive already landed as a directory
                // there (tablespace archives come before base.tar).
                if rel.starts_with("pg_tblspc/") {
                    mkdirs(&path)?;
                } else {
                    tracing::warn!(member = %rel, "base backup symlink outside pg_tblspc skipped");
                }
                self.stats.files_skipped += 1;
                Ok(FileAction::Skip)
            }
            EntryKind::File => match self.decide(&rel) {
                Decision::Skip => {
                    self.stats.files_skipped += 1;
                    Ok(FileAction::Skip)
                }
                Decision::Keep => {
                    let f = self.create_file(&path)?;
                    self.stats.files_kept += 1;
                    self.current = Some(WritingFile {
                        path,
                        writing: Writing::Plain(BufWriter::with_capacity(64 * 1024, f)),
                    });
                    Ok(FileAction::Keep)
                }
                Decision::EmptyHeap => {
                    self.create_file(&path)?;
                    self.stats.files_kept += 1;
                    self.stats.stats_files_emptied += 1;
                    Ok(FileAction::Skip)
                }
                Decision::EmptyIndex => {
                    self.stats.files_kept += 1;
                    self.stats.stats_files_emptied += 1;
                    self.current = Some(WritingFile {
                        path: path.clone(),
                        writing: Writing::Metapage {
                            path,
                            first: Vec::new(),
                        },
                    });
                    Ok(FileAction::Keep)
                }
            },
        }
    }

    async fn file_data(&mut self, chunk: Bytes) -> Result<(), SinkError> {
        let Some(cur) = self.current.as_mut() else {
            return Err("file data outside a kept member".into());
        };
        match &mut cur.writing {
            Writing::Plain(w) => {
                w.write_all(&chunk)
                    .map_err(|e| format!("writing {}: {e}", cur.path.display()))?;
                self.stats.bytes_landed += chunk.len() as u64;
            }
            Writing::Metapage { first, .. } => {
                let room = BLCKSZ.saturating_sub(first.len());
                first.extend_from_slice(&chunk[..room.min(chunk.len())]);
            }
        }
        Ok(())
    }

    async fn end_file(&mut self) -> Result<(), SinkError> {
        let Some(cur) = self.current.take() else {
            return Ok(());
        };
        match cur.writing {
            Writing::Plain(w) => {
                w.into_inner()
                    .map_err(|e| format!("writing {}: {e}", cur.path.display()))?;
            }
            Writing::Metapage { path, first } => {
                let page = empty_btree_metapage(
                    (first.len() == BLCKSZ).then_some(first.as_slice()),
                    self.checksums,
                );
                let mut f = self.create_file(&path)?;
                f.write_all(&page)
                    .map_err(|e| format!("writing {}: {e}", path.display()))?;
                self.stats.bytes_landed += page.len() as u64;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relation_file_names() {
        let p = |s| parse_rel_file_name(s);
        assert_eq!(
            p("16384"),
            Some(RelFileName {
                number: 16384,
                fork: None,
                segno: 0
            })
        );
        assert_eq!(p("1259_fsm").and_then(|r| r.fork), Some("fsm"));
        assert_eq!(
            p("16390_vm.2").map(|r| (r.fork, r.segno)),
            Some((Some("vm"), 2))
        );
        assert_eq!(p("16390.1").map(|r| r.segno), Some(1));
        for bad in [
            "PG_VERSION",
            "pg_filenode.map",
            "t3_16384",
            "12_x",
            "12.",
            "_fsm",
            "1.a",
        ] {
            assert_eq!(p(bad), None, "{bad}");
        }
    }
}
