//! Durable checkpoints of the filter's state, so `run` resumes at a record
//! boundary instead of the base backup's start, and the source's slot can
//! advance.
//!
//! ```text
//!  FilterPipeline ──checkpoint_lsn() = L──▶ store.flush() ≥ L ──▶ <state>/filter.ckpt ──▶ slot flush = L
//!        ▲                                                                 │
//!        └──────── next run: RecordFilter at L, stream from L's page ◀─────┘
//! ```
//!
//! A checkpoint at `L` holds everything the [`RecordFilter`] knows after
//! judging every record that ends at or before `L` (file and relation
//! classes, relation maps, `pg_class` rows by position, files created and not
//! yet classified, counters). `L` is taken only where no record waits
//! undecided and every byte before `L` has been released to the store; the
//! file is written only once the store holds `L` durably, and the slot's
//! flush position (which a physical slot's `restart_lsn` follows) is reported
//! as `L` only after the file is durable. So what the slot lets the source
//! remove is never needed again: a restart reads from the page holding `L`.
//!
//! # File
//!
//! `<state>/filter.ckpt`, replaced by write-temp + fsync + rename + directory
//! fsync (a crash leaves the old checkpoint or the new one). Little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `WSFC` |
//! | 4 | 4 | format version (1) |
//! | 8 | 8 | body length `B` |
//! | 16 | `B` | body |
//! | 16 + `B` | 4 | CRC-32C of bytes `0..16 + B` |
//!
//! Body, in order; each list is a `u32` count then its entries, sorted so the
//! same state always gives the same bytes:
//!
//! | field | encoding |
//! |---|---|
//! | system identifier | u64 |
//! | PostgreSQL major | u32 |
//! | base backup start (ties the file to one `init`) | u64 |
//! | timeline of `L` | u32 |
//! | `L` | u64 |
//! | counters kept, nooped, pg_class rows learned | 3 × u64 |
//! | file classes | (db u32, file u32, class u8)* |
//! | relation classes | (oid u32, class u8)* |
//! | relation maps | (db u32, count u32, (oid u32, file u32)*)* |
//! | pg_class rows | (db u32, file u32, count u32, (block u32, offset u16, length u32, data)*)* |
//! | created, unclassified files | (db u32, file u32, xid u32, create LSN u64)* |
//!
//! Class bytes: 0 catalog, 1 sequence, 2 user data. The reader checks every
//! length against the bytes left (no allocation from an unchecked count),
//! and rejects trailing bytes.
//!
//! The size is bounded by the catalog (a few hundred bytes per `pg_class`
//! row), not by the WAL.

use rustc_hash::FxHashMap as HashMap;
use std::path::{Path, PathBuf};

use walshadow_types::{Lsn, PgMajor};

use super::classes::FileClass;
use super::pg_class::RowCache;
use super::{FilterStats, RecordFilter};

pub const FILE: &str = "filter.ckpt";
const MAGIC: [u8; 4] = *b"WSFC";
pub const FORMAT_VERSION: u32 = 1;
const HEADER_LEN: usize = 16;

/// Why a checkpoint could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("filter checkpoint {path}: {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "filter checkpoint {path} is damaged: {problem}; the source may no longer hold the WAL \
         before it, so rebuild the shadow with `walshadow init --force`"
    )]
    Damaged { path: PathBuf, problem: String },
    #[error(
        "filter checkpoint {path} has format version {found}, this walshadow reads {FORMAT_VERSION}; \
         run the walshadow that wrote it, or rebuild with `walshadow init --force`"
    )]
    UnsupportedVersion { path: PathBuf, found: u32 },
    #[error(
        "filter checkpoint {path} does not belong to this state directory ({problem}); \
         rebuild with `walshadow init --force`"
    )]
    Foreign { path: PathBuf, problem: String },
}

/// Which `init` a checkpoint belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub system_id: u64,
    pub major: PgMajor,
    pub backup_start: Lsn,
}

/// A checkpoint read back: resume filtering at `lsn` on `timeline`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterCheckpoint {
    pub identity: Identity,
    pub timeline: u32,
    pub lsn: Lsn,
    pub filter: RecordFilter,
}

/// Writes `<dir>/filter.ckpt` durably.
pub fn write(
    dir: &Path,
    identity: Identity,
    timeline: u32,
    lsn: Lsn,
    filter: &RecordFilter,
) -> Result<(), CheckpointError> {
    let bytes = encode(identity, timeline, lsn, filter);
    walshadow_state_file::write_durably(dir, FILE, &bytes).map_err(|source| CheckpointError::Io {
        path: dir.join(FILE),
        what: "writing durably",
        source,
    })
}

/// Reads `<dir>/filter.ckpt`: `None` if there is none. `expect` is the
/// state directory's `init`; a checkpoint of another is refused.
pub fn read(dir: &Path, expect: Identity) -> Result<Option<FilterCheckpoint>, CheckpointError> {
    let path = dir.join(FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(CheckpointError::Io {
                path,
                what: "reading",
                source,
            });
        }
    };
    let ckpt = decode(&bytes).map_err(|e| match e {
        DecodeError::Version(found) => CheckpointError::UnsupportedVersion {
            path: path.clone(),
            found,
        },
        DecodeError::Damaged(problem) => CheckpointError::Damaged {
            path: path.clone(),
            problem,
        },
    })?;
    if ckpt.identity != expect {
        return Err(CheckpointError::Foreign {
            path,
            problem: format!(
                "written for system {} PostgreSQL {} backup start {}, the state is system {} \
                 PostgreSQL {} backup start {}",
                ckpt.identity.system_id,
                ckpt.identity.major.number(),
                ckpt.identity.backup_start,
                expect.system_id,
                expect.major.number(),
                expect.backup_start
            ),
        });
    }
    Ok(Some(ckpt))
}

fn class_byte(c: FileClass) -> u8 {
    match c {
        FileClass::Catalog => 0,
        FileClass::Sequence => 1,
        FileClass::UserData => 2,
        FileClass::StatisticsIndex => 3,
    }
}

fn byte_class(b: u8) -> Result<FileClass, String> {
    match b {
        0 => Ok(FileClass::Catalog),
        1 => Ok(FileClass::Sequence),
        2 => Ok(FileClass::UserData),
        3 => Ok(FileClass::StatisticsIndex),
        other => Err(format!("unknown file class {other}")),
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_len(out: &mut Vec<u8>, n: usize) {
    put_u32(out, u32::try_from(n).unwrap_or(u32::MAX));
}

/// The file's bytes (see the module doc).
pub fn encode(identity: Identity, timeline: u32, lsn: Lsn, f: &RecordFilter) -> Vec<u8> {
    let mut b = Vec::new();
    put_u64(&mut b, identity.system_id);
    put_u32(&mut b, identity.major.number());
    put_u64(&mut b, identity.backup_start.0);
    put_u32(&mut b, timeline);
    put_u64(&mut b, lsn.0);
    put_u64(&mut b, f.stats.kept);
    put_u64(&mut b, f.stats.nooped);
    put_u64(&mut b, f.stats.pg_class_rows_learned);

    let mut files: Vec<_> = f.classes.files().collect();
    files.sort_unstable_by_key(|&(k, _)| k);
    put_len(&mut b, files.len());
    for ((db, file), c) in files {
        put_u32(&mut b, db);
        put_u32(&mut b, file);
        b.push(class_byte(c));
    }
    let mut relations: Vec<_> = f.classes.relations().collect();
    relations.sort_unstable_by_key(|&(o, _)| o);
    put_len(&mut b, relations.len());
    for (oid, c) in relations {
        put_u32(&mut b, oid);
        b.push(class_byte(c));
    }
    let mut maps: Vec<_> = f.relmaps.iter().collect();
    maps.sort_unstable_by_key(|&(db, _)| *db);
    put_len(&mut b, maps.len());
    for (&db, map) in maps {
        let mut entries: Vec<_> = map.iter().map(|(&o, &f)| (o, f)).collect();
        entries.sort_unstable();
        put_u32(&mut b, db);
        put_len(&mut b, entries.len());
        for (oid, file) in entries {
            put_u32(&mut b, oid);
            put_u32(&mut b, file);
        }
    }
    let mut caches: Vec<_> = f.rows.iter().collect();
    caches.sort_unstable_by_key(|&(k, _)| *k);
    put_len(&mut b, caches.len());
    for (&(db, file), cache) in caches {
        let mut rows: Vec<_> = cache.iter().collect();
        rows.sort_unstable_by_key(|&(k, _)| k);
        put_u32(&mut b, db);
        put_u32(&mut b, file);
        put_len(&mut b, rows.len());
        for ((blk, off), data) in rows {
            put_u32(&mut b, blk);
            b.extend_from_slice(&off.to_le_bytes());
            put_len(&mut b, data.len());
            b.extend_from_slice(data);
        }
    }
    let mut created: Vec<_> = f.created.iter().map(|(&k, &v)| (k, v)).collect();
    created.sort_unstable_by_key(|&(k, _)| k);
    put_len(&mut b, created.len());
    for ((db, file), (xid, at)) in created {
        put_u32(&mut b, db);
        put_u32(&mut b, file);
        put_u32(&mut b, xid);
        put_u64(&mut b, at.0);
    }

    let mut out = Vec::with_capacity(HEADER_LEN + b.len() + 4);
    out.extend_from_slice(&MAGIC);
    put_u32(&mut out, FORMAT_VERSION);
    put_u64(&mut out, b.len() as u64);
    out.extend_from_slice(&b);
    let crc = crc32c::crc32c(&out);
    put_u32(&mut out, crc);
    out
}

#[derive(Debug)]
enum DecodeError {
    Version(u32),
    Damaged(String),
}

impl From<String> for DecodeError {
    fn from(s: String) -> Self {
        DecodeError::Damaged(s)
    }
}

/// A checked cursor over the body, naming the field a truncation cut.
struct Cursor<'a>(walshadow_pg_format::cursor::Cursor<'a>);

impl<'a> Cursor<'a> {
    fn cut(&self, what: &str) -> String {
        format!("truncated in {what} at body offset {}", self.0.position())
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        self.0.take(n).map_err(|_| self.cut(what))
    }

    fn u8(&mut self, what: &str) -> Result<u8, String> {
        self.0.u8().map_err(|_| self.cut(what))
    }

    fn u16(&mut self, what: &str) -> Result<u16, String> {
        self.0.u16().map_err(|_| self.cut(what))
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        self.0.u32().map_err(|_| self.cut(what))
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        self.0.u64().map_err(|_| self.cut(what))
    }

    /// A count of entries of at least `entry_len` bytes each, checked
    /// against what is left so a damaged count cannot allocate.
    fn count(&mut self, entry_len: usize, what: &str) -> Result<usize, String> {
        let n = self.u32(what)? as usize;
        let left = self.0.remaining();
        if n.saturating_mul(entry_len) > left {
            return Err(format!(
                "{what}: {n} entries do not fit in the {left} bytes left"
            ));
        }
        Ok(n)
    }
}

fn decode(bytes: &[u8]) -> Result<FilterCheckpoint, DecodeError> {
    let header = bytes
        .get(..HEADER_LEN)
        .ok_or_else(|| format!("{} bytes, shorter than the header", bytes.len()))?;
    if header.get(..4) != Some(&MAGIC[..]) {
        return Err(DecodeError::Damaged(
            "bad magic (not a filter checkpoint)".into(),
        ));
    }
    let version = header
        .get(4..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes);
    if version != FORMAT_VERSION {
        return Err(DecodeError::Version(version));
    }
    let body_len = header
        .get(8..16)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    let total = usize::try_from(body_len)
        .ok()
        .and_then(|b| b.checked_add(HEADER_LEN + 4))
        .filter(|&t| t == bytes.len())
        .ok_or_else(|| {
            format!(
                "{} bytes, the header announces a {body_len}-byte body (torn or truncated file)",
                bytes.len()
            )
        })?;
    let (covered, crc) = bytes.split_at(total - 4);
    let stored = u32::from_le_bytes(crc.try_into().unwrap_or_default());
    if crc32c::crc32c(covered) != stored {
        return Err(DecodeError::Damaged(
            "checksum mismatch (torn or edited file)".into(),
        ));
    }
    let mut c = Cursor(walshadow_pg_format::cursor::Cursor::new(
        covered.get(HEADER_LEN..).unwrap_or_default(),
    ));
    let system_id = c.u64("header")?;
    let major_n = c.u32("header")?;
    let major = PgMajor::from_number(major_n).map_err(|e| e.to_string())?;
    let backup_start = Lsn(c.u64("header")?);
    let timeline = c.u32("header")?;
    let lsn = Lsn(c.u64("header")?);
    let mut f = RecordFilter::new(major);
    f.stats = FilterStats {
        kept: c.u64("counters")?,
        nooped: c.u64("counters")?,
        pg_class_rows_learned: c.u64("counters")?,
    };
    for _ in 0..c.count(9, "file classes")? {
        let (db, file) = (c.u32("file classes")?, c.u32("file classes")?);
        f.classes
            .set_file(db, file, byte_class(c.u8("file classes")?)?);
    }
    for _ in 0..c.count(5, "relation classes")? {
        let oid = c.u32("relation classes")?;
        f.classes
            .set_relation(oid, byte_class(c.u8("relation classes")?)?);
    }
    for _ in 0..c.count(8, "relation maps")? {
        let db = c.u32("relation maps")?;
        let mut map = HashMap::default();
        for _ in 0..c.count(8, "relation maps")? {
            map.insert(c.u32("relation maps")?, c.u32("relation maps")?);
        }
        // Not through set_relmap: the classes it would derive are saved
        // above, as they stood.
        f.relmaps.insert(db, map);
    }
    for _ in 0..c.count(12, "pg_class rows")? {
        let key = (c.u32("pg_class rows")?, c.u32("pg_class rows")?);
        let mut cache = RowCache::default();
        for _ in 0..c.count(10, "pg_class rows")? {
            let blk = c.u32("pg_class rows")?;
            let off = c.u16("pg_class rows")?;
            let len = c.u32("pg_class rows")? as usize;
            cache.put(blk, off, c.take(len, "pg_class rows")?.to_vec());
        }
        f.rows.insert(key, cache);
    }
    for _ in 0..c.count(20, "created files")? {
        let key = (c.u32("created files")?, c.u32("created files")?);
        let xid = c.u32("created files")?;
        f.created.insert(key, (xid, Lsn(c.u64("created files")?)));
    }
    if c.0.remaining() != 0 {
        return Err(DecodeError::Damaged(format!(
            "{} bytes after the last entry",
            c.0.remaining()
        )));
    }
    Ok(FilterCheckpoint {
        identity: Identity {
            system_id,
            major,
            backup_start,
        },
        timeline,
        lsn,
        filter: f,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::pg_class::RowCache;

    fn sample() -> RecordFilter {
        let mut f = RecordFilter::new(PgMajor::V18);
        f.classes.set_file(0, 1262, FileClass::Catalog);
        f.classes.set_file(5, 16400, FileClass::UserData);
        f.classes.set_file(5, 16410, FileClass::Sequence);
        f.classes.set_relation(16400, FileClass::UserData);
        f.relmaps
            .insert(0, HashMap::from_iter([(1262, 1262), (1260, 1260)]));
        f.relmaps.insert(5, HashMap::from_iter([(1259, 16999)]));
        let mut cache = RowCache::default();
        cache.put(0, 1, vec![1, 2, 3]);
        cache.put(3, 7, vec![0xAB; 300]);
        cache.put(4, 2, Vec::new());
        f.rows.insert((5, 16999), cache);
        f.rows.insert((5, 17001), RowCache::default());
        f.created.insert((5, 17002), (777, Lsn(0x1_0000_0040)));
        f.stats = FilterStats {
            kept: 10,
            nooped: 20,
            pg_class_rows_learned: 30,
        };
        f
    }

    const ID: Identity = Identity {
        system_id: 7_000_000_000_000_000_001,
        major: PgMajor::V18,
        backup_start: Lsn(0x3000028),
    };

    #[test]
    fn round_trip() {
        let dir = std::env::temp_dir().join(format!("walshadow-ckpt-rt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = sample();
        assert!(read(&dir, ID).unwrap().is_none());
        write(&dir, ID, 2, Lsn(0x5001234), &f).unwrap();
        let back = read(&dir, ID).unwrap().unwrap();
        assert_eq!(back.filter, f);
        assert_eq!(
            (back.timeline, back.lsn, back.identity),
            (2, Lsn(0x5001234), ID)
        );
        // Deterministic bytes.
        assert_eq!(
            encode(ID, 2, Lsn(0x5001234), &back.filter),
            std::fs::read(dir.join(FILE)).unwrap()
        );
        // Another init's checkpoint is refused.
        let other = Identity {
            backup_start: Lsn(0x9000028),
            ..ID
        };
        let e = read(&dir, other).unwrap_err();
        assert!(matches!(e, CheckpointError::Foreign { .. }), "{e}");
        assert!(e.to_string().contains("walshadow init --force"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn damage_is_caught_and_named() {
        let dir = std::env::temp_dir().join(format!("walshadow-ckpt-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = encode(ID, 1, Lsn(0x5000000), &sample());
        let mut flipped = good.clone();
        flipped[40] ^= 1;
        let mut bad_version = good.clone();
        bad_version[4] = 9;
        for (bytes, expect) in [
            (flipped, "checksum mismatch"),
            (good[..good.len() - 3].to_vec(), "torn or truncated"),
            (good[..10].to_vec(), "shorter than the header"),
            (b"{\"json\": true}     ".to_vec(), "bad magic"),
            (bad_version, "format version 9"),
        ] {
            std::fs::write(dir.join(FILE), &bytes).unwrap();
            let e = read(&dir, ID).unwrap_err().to_string();
            assert!(e.contains(expect), "{e}");
            assert!(e.contains(&dir.join(FILE).display().to_string()), "{e}");
            assert!(e.contains("walshadow init --force"), "{e}");
        }
        // Every truncation with a consistent header and CRC still errors.
        for cut in [HEADER_LEN, HEADER_LEN + 5, good.len() - 4 - 1] {
            let mut b = good[..cut].to_vec();
            b[8..16].copy_from_slice(&((cut - HEADER_LEN) as u64).to_le_bytes());
            let crc = crc32c::crc32c(&b);
            b.extend_from_slice(&crc.to_le_bytes());
            assert!(
                matches!(decode(&b), Err(DecodeError::Damaged(_))),
                "cut {cut}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
