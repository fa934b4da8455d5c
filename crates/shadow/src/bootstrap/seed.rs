//! The filter's seed: what it knows at the base backup's start, written by
//! `init` into `<state>/seed/` and read by every `run`.
//!
//! ```text
//! seed/global.map      copy of global/pg_filenode.map
//! seed/<db>.map        copy of base/<db>/pg_filenode.map (or its tablespace's)
//! seed/<db>.pg_class   the database's whole pg_class file (main fork,
//!                      segments concatenated), number from its map
//! seed/classes.json    SeedClasses: (db, file) → class and oid → class from
//!                      the source's catalog after the backup
//! ```
//!
//! Loading applies `classes.json` first, then the maps and pg_class pages
//! (what the backup itself holds has the last word); the WAL from the
//! backup's start corrects whatever changed while the files were copied
//! (full-page writes repair torn pg_class pages).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use walshadow_types::{Oid, PgMajor};

use super::InitError;
use super::source::ClassList;
use crate::filter::RecordFilter;
use crate::filter::classes::FileClass;

pub const SEED_DIR: &str = "seed";
const CLASSES_FILE: &str = "classes.json";
const PG_CLASS_OID: Oid = 1259;

/// [`FileClass`] on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeedClass {
    Catalog,
    Sequence,
    UserData,
    StatisticsIndex,
}

impl From<FileClass> for SeedClass {
    fn from(c: FileClass) -> Self {
        match c {
            FileClass::Catalog => SeedClass::Catalog,
            FileClass::Sequence => SeedClass::Sequence,
            FileClass::UserData => SeedClass::UserData,
            FileClass::StatisticsIndex => SeedClass::StatisticsIndex,
        }
    }
}

impl From<SeedClass> for FileClass {
    fn from(c: SeedClass) -> Self {
        match c {
            SeedClass::Catalog => FileClass::Catalog,
            SeedClass::Sequence => FileClass::Sequence,
            SeedClass::UserData => FileClass::UserData,
            SeedClass::StatisticsIndex => FileClass::StatisticsIndex,
        }
    }
}

/// `classes.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeedClasses {
    pub format_version: u32,
    /// Databases with a `<db>.map` (and `<db>.pg_class`) in the seed.
    pub databases: Vec<Oid>,
    /// `(database or 0 for shared, file number, class)`.
    pub files: Vec<(Oid, Oid, SeedClass)>,
    /// `(relation OID, class)`.
    pub relations: Vec<(Oid, SeedClass)>,
}

impl SeedClasses {
    pub const FORMAT_VERSION: u32 = 1;
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> InitError {
    let path = path.to_owned();
    move |source| InitError::Io { what, path, source }
}

fn seed_err(path: &Path, problem: impl Into<String>) -> InitError {
    InitError::Seed {
        path: path.to_owned(),
        problem: problem.into(),
    }
}

/// The relation map file's `(oid, file)` pairs (relmapper.c `RelMapFile`).
fn relmap_entry(bytes: &[u8], oid: Oid) -> Option<Oid> {
    let u32_at = |o: usize| walshadow_pg_format::cursor::u32_at(bytes, o);
    let n = u32_at(4)? as usize;
    (0..n.min(64)).find_map(|i| (u32_at(8 + 8 * i)? == oid).then(|| u32_at(12 + 8 * i))?)
}

/// Writes the seed from the landed data directory. `db_dirs` are the
/// landed database directories; `classes` the listing after the backup.
pub fn write_seed(
    state_dir: &Path,
    data_dir: &Path,
    db_dirs: &HashMap<Oid, PathBuf>,
    classes: &ClassList,
) -> Result<(), InitError> {
    let seed = state_dir.join(SEED_DIR);
    std::fs::create_dir_all(&seed).map_err(io_err("creating", &seed))?;
    let global = data_dir.join("global/pg_filenode.map");
    std::fs::copy(&global, seed.join("global.map")).map_err(io_err("copying", &global))?;
    let mut databases: Vec<Oid> = db_dirs.keys().copied().collect();
    databases.sort_unstable();
    for db in &databases {
        let dir = &db_dirs[db];
        let map_path = dir.join("pg_filenode.map");
        let map = std::fs::read(&map_path).map_err(io_err("reading", &map_path))?;
        let file = relmap_entry(&map, PG_CLASS_OID)
            .ok_or_else(|| seed_err(&map_path, "no pg_class (1259) in the relation map"))?;
        std::fs::write(seed.join(format!("{db}.map")), &map).map_err(io_err("writing", &seed))?;
        let mut pg_class = Vec::new();
        for segno in 0.. {
            let name = if segno == 0 {
                file.to_string()
            } else {
                format!("{file}.{segno}")
            };
            match std::fs::read(dir.join(&name)) {
                Ok(b) => pg_class.extend_from_slice(&b),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && segno > 0 => break,
                Err(e) => return Err(io_err("reading", &dir.join(name))(e)),
            }
        }
        std::fs::write(seed.join(format!("{db}.pg_class")), &pg_class)
            .map_err(io_err("writing", &seed))?;
    }
    let mut files: Vec<_> = classes
        .files
        .iter()
        .map(|(&(db, f), &c)| (db, f, c.into()))
        .collect();
    files.sort_unstable_by_key(|&(d, f, _)| (d, f));
    let mut relations: Vec<_> = classes
        .relations
        .iter()
        .map(|(&o, &c)| (o, c.into()))
        .collect();
    relations.sort_unstable_by_key(|&(o, _)| o);
    let doc = SeedClasses {
        format_version: SeedClasses::FORMAT_VERSION,
        databases,
        files,
        relations,
    };
    let path = seed.join(CLASSES_FILE);
    let text = serde_json::to_vec(&doc).map_err(|e| seed_err(&path, e.to_string()))?;
    std::fs::write(&path, text).map_err(io_err("writing", &path))?;
    sync_dir_files(&seed)
}

fn sync_dir_files(dir: &Path) -> Result<(), InitError> {
    for entry in std::fs::read_dir(dir).map_err(io_err("listing", dir))? {
        let p = entry.map_err(io_err("listing", dir))?.path();
        std::fs::File::open(&p)
            .and_then(|f| f.sync_all())
            .map_err(io_err("syncing", &p))?;
    }
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(io_err("syncing", dir))
}

/// Rebuilds the filter's starting knowledge from `<state_dir>/seed/`.
pub fn load_seed(state_dir: &Path, major: PgMajor) -> Result<RecordFilter, InitError> {
    let seed = state_dir.join(SEED_DIR);
    let path = seed.join(CLASSES_FILE);
    let text = std::fs::read(&path).map_err(io_err("reading", &path))?;
    let doc: SeedClasses =
        serde_json::from_slice(&text).map_err(|e| seed_err(&path, e.to_string()))?;
    if doc.format_version != SeedClasses::FORMAT_VERSION {
        return Err(seed_err(
            &path,
            format!(
                "format version {} (this walshadow reads {}); re-run `walshadow init --force`",
                doc.format_version,
                SeedClasses::FORMAT_VERSION
            ),
        ));
    }
    let mut f = RecordFilter::new(major);
    {
        let classes = f.classes_mut();
        for &(db, file, c) in &doc.files {
            classes.set_file(db, file, c.into());
        }
        for &(oid, c) in &doc.relations {
            classes.set_relation(oid, c.into());
        }
    }
    let global = seed.join("global.map");
    let bytes = std::fs::read(&global).map_err(io_err("reading", &global))?;
    if !f.load_relmap_file(0, &bytes) {
        return Err(seed_err(&global, "not a relation map file"));
    }
    for &db in &doc.databases {
        let map = seed.join(format!("{db}.map"));
        let bytes = std::fs::read(&map).map_err(io_err("reading", &map))?;
        if !f.load_relmap_file(db, &bytes) {
            return Err(seed_err(&map, "not a relation map file"));
        }
        let pages = seed.join(format!("{db}.pg_class"));
        let bytes = std::fs::read(&pages).map_err(io_err("reading", &pages))?;
        for (blk, page) in bytes.chunks(walshadow_pg_format::page::BLCKSZ).enumerate() {
            f.load_pg_class_page(db, blk as u32, page);
        }
    }
    Ok(f)
}
