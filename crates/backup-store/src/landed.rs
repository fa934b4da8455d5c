//! A backup `walshadow init --bootstrap` landed in the state directory:
//! the part of its `BASE_BACKUP` the selected tables' load needs, kept on
//! local disk so that the load (an `object_store` pass at the first `run`)
//! reads it like any stored backup, and reads it again after a crash.
//!
//! ```text
//!  <state>/bootstrap/backup.json          LandedManifest (written last)
//!                   data/<path>            members of the data directory's
//!                                          archive: the selected relations'
//!                                          files, pg_xact, pg_multixact
//!                   tablespaces/<oid>/<path>  members of tablespace <oid>'s
//!                   pg_wal/<segment>       the backup's window, its start
//!                                          to its end (BASE_BACKUP WAL)
//! ```
//!
//! The window's segments are the store's archive: the load's gap replay
//! reads them as it reads an archive's.

use std::path::{Path, PathBuf};

use walshadow_pg_format::wal_files::parse_segment_name;
pub use walshadow_types::landed::{DATA, LandedManifest, MANIFEST, TABLESPACES, WAL};
use walshadow_types::{Lsn, Oid};

use crate::backup::{ArchivedFile, Backup, BackupKind};
use crate::{Compression, Repository, S3Options, StoreError};

/// One member of a landed backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandedFile {
    /// `None`: the data directory's archive; else the tablespace's OID.
    pub tablespace: Option<Oid>,
    /// Its path in that archive (`base/5/16384`).
    pub path: String,
    pub local: PathBuf,
    pub size: u64,
}

impl LandedFile {
    /// `(tablespace, database, relfilenumber)` when this is the first
    /// segment of a relation's main fork (`base/5/16384`, or
    /// `PG_15_…/5/16384` in a tablespace's archive).
    pub fn relation(&self) -> Option<(Oid, Oid, Oid)> {
        /// The default tablespace, whose files are under `base/`.
        const DEFAULT: Oid = 1663;
        let parts: Vec<&str> = self.path.split('/').collect();
        let (spc, db, name) = match (self.tablespace, parts.as_slice()) {
            (None, ["base", db, name]) => (DEFAULT, *db, *name),
            (Some(spc), [_version, db, name]) => (spc, *db, *name),
            _ => return None,
        };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some((spc, db.parse().ok()?, name.parse().ok()?))
    }
}

/// A landed backup, opened.
#[derive(Debug)]
pub struct Landed {
    dir: PathBuf,
    repo: Repository,
    manifest: LandedManifest,
}

fn unreachable(store: &Path, path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Unreachable {
        store: store.display().to_string(),
        path: path.display().to_string(),
        source: Box::new(e),
    }
}

impl Landed {
    /// The landed backup in `dir`; [`StoreError::NotFound`] when no
    /// complete landing is there.
    pub fn open(dir: &Path) -> Result<Landed, StoreError> {
        let store = dir.display().to_string();
        let path = dir.join(MANIFEST);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::NotFound {
                    store,
                    path: MANIFEST.into(),
                });
            }
            Err(e) => return Err(unreachable(dir, &path, e)),
        };
        let manifest: LandedManifest =
            serde_json::from_str(&text).map_err(|e| StoreError::Malformed {
                store: store.clone(),
                path: MANIFEST.into(),
                reason: e.to_string(),
            })?;
        let repo = Repository::open(&store, &S3Options::default())?;
        Ok(Landed {
            dir: dir.to_owned(),
            repo,
            manifest,
        })
    }

    pub fn manifest(&self) -> &LandedManifest {
        &self.manifest
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn repository(&self) -> &Repository {
        &self.repo
    }

    /// The backup, as every store describes one.
    pub fn backup(&self) -> Backup {
        let m = &self.manifest;
        let seg = |lsn: Lsn| {
            walshadow_pg_format::wal_files::segment_file_name(
                m.timeline,
                lsn.segment_number(m.segment_size),
                m.segment_size,
            )
        };
        Backup {
            label: m.label.clone(),
            kind: BackupKind::Full,
            prior: None,
            start_lsn: m.start_lsn,
            stop_lsn: m.stop_lsn,
            timeline: m.timeline,
            archive_start: seg(m.start_lsn),
            archive_stop: seg(m.stop_lsn),
            ended: crate::backup::utc_text(m.ended_unix),
            size: None,
            stored_size: None,
            pg_version: m.pg_version.clone(),
            system_id: m.system_id,
            archive: String::new(),
            flaw: None,
        }
    }

    /// Every member, the data directory's after the tablespaces' (as
    /// `BASE_BACKUP` sends them), each archive's in path order; each file
    /// the manifest lists must be there with its size.
    pub fn files(&self) -> Result<Vec<LandedFile>, StoreError> {
        for (rel, size) in &self.manifest.files {
            let path = self.dir.join(rel);
            let found = std::fs::metadata(&path).map(|m| m.len());
            if found.as_ref().ok() != Some(size) {
                return Err(StoreError::Malformed {
                    store: self.dir.display().to_string(),
                    path: rel.clone(),
                    reason: match found {
                        Ok(n) => format!("{n} bytes, the landing wrote {size}"),
                        Err(e) => format!("{e} (the landing wrote {size} bytes)"),
                    },
                });
            }
        }
        let mut out = Vec::new();
        let spc_root = self.dir.join(TABLESPACES);
        if spc_root.exists() {
            let mut spcs = Vec::new();
            for e in
                std::fs::read_dir(&spc_root).map_err(|e| unreachable(&self.dir, &spc_root, e))?
            {
                let e = e.map_err(|e| unreachable(&self.dir, &spc_root, e))?;
                let name = e.file_name().to_string_lossy().into_owned();
                let oid: Oid = name.parse().map_err(|_| StoreError::Malformed {
                    store: self.dir.display().to_string(),
                    path: format!("{TABLESPACES}/{name}"),
                    reason: "not a tablespace OID".into(),
                })?;
                spcs.push(oid);
            }
            spcs.sort_unstable();
            for oid in spcs {
                self.collect(&spc_root.join(oid.to_string()), "", Some(oid), &mut out)?;
            }
        }
        let data = self.dir.join(DATA);
        if data.exists() {
            self.collect(&data, "", None, &mut out)?;
        }
        Ok(out)
    }

    fn collect(
        &self,
        dir: &Path,
        prefix: &str,
        tablespace: Option<Oid>,
        out: &mut Vec<LandedFile>,
    ) -> Result<(), StoreError> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| unreachable(&self.dir, dir, e))?
            .collect::<Result<_, _>>()
            .map_err(|e| unreachable(&self.dir, dir, e))?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let meta = e
                .metadata()
                .map_err(|err| unreachable(&self.dir, &e.path(), err))?;
            if meta.is_dir() {
                self.collect(&e.path(), &path, tablespace, out)?;
            } else if meta.is_file() {
                out.push(LandedFile {
                    tablespace,
                    path,
                    local: e.path(),
                    size: meta.len(),
                });
            }
        }
        Ok(())
    }

    /// The window's segments, by name.
    pub fn archived_segments(&self) -> Result<Vec<ArchivedFile>, StoreError> {
        let wal = self.dir.join(WAL);
        let mut out = Vec::new();
        let entries = match std::fs::read_dir(&wal) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(unreachable(&self.dir, &wal, e)),
        };
        for e in entries {
            let e = e.map_err(|e| unreachable(&self.dir, &wal, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if parse_segment_name(&name, self.manifest.segment_size).is_some() {
                out.push(ArchivedFile {
                    key: format!("{WAL}/{name}"),
                    name,
                    compression: Compression::None,
                    sha1: None,
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_manifest_files_and_window() {
        let dir = std::env::temp_dir().join(format!("landed-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(matches!(
            Landed::open(&dir),
            Err(StoreError::NotFound { .. })
        ));
        std::fs::create_dir_all(dir.join("data/base/5")).unwrap();
        std::fs::create_dir_all(dir.join("data/pg_xact")).unwrap();
        std::fs::create_dir_all(dir.join("tablespaces/16400/PG_15_202209061/5")).unwrap();
        std::fs::create_dir_all(dir.join(WAL)).unwrap();
        std::fs::write(dir.join("data/base/5/16384"), [0u8; 8192]).unwrap();
        std::fs::write(dir.join("data/pg_xact/0000"), [0u8; 8192]).unwrap();
        std::fs::write(
            dir.join("tablespaces/16400/PG_15_202209061/5/16390"),
            [0u8; 16],
        )
        .unwrap();
        std::fs::write(dir.join("pg_wal/000000010000000000000003"), [0u8; 4]).unwrap();
        std::fs::write(dir.join("pg_wal/not-a-segment"), [0u8; 4]).unwrap();
        let m = LandedManifest {
            label: "walshadow bootstrap".into(),
            start_lsn: Lsn(0x300_0028),
            stop_lsn: Lsn(0x300_0138),
            timeline: 1,
            system_id: 7,
            pg_version: "15".into(),
            segment_size: 16 << 20,
            ended_unix: 1_764_928_800,
            tables: vec!["public.a".into()],
            files: [("data/base/5/16384".to_owned(), 8192)]
                .into_iter()
                .collect(),
        };
        std::fs::write(dir.join(MANIFEST), serde_json::to_string(&m).unwrap()).unwrap();
        let landed = Landed::open(&dir).unwrap();
        assert_eq!(landed.manifest(), &m);
        let b = landed.backup();
        assert_eq!(b.archive_start, "000000010000000000000003");
        assert_eq!(b.start_lsn, m.start_lsn);
        let files: Vec<(Option<Oid>, String)> = landed
            .files()
            .unwrap()
            .into_iter()
            .map(|f| (f.tablespace, f.path))
            .collect();
        assert_eq!(
            files,
            vec![
                (Some(16400), "PG_15_202209061/5/16390".to_owned()),
                (None, "base/5/16384".to_owned()),
                (None, "pg_xact/0000".to_owned()),
            ]
        );
        let rels: Vec<_> = landed
            .files()
            .unwrap()
            .iter()
            .filter_map(LandedFile::relation)
            .collect();
        assert_eq!(rels, vec![(16400, 5, 16390), (1663, 5, 16384)]);
        let segs = landed.archived_segments().unwrap();
        assert_eq!(segs.len(), 1);
        assert_eq!(segs[0].key, "pg_wal/000000010000000000000003");
        // A landed file lost or cut short is named.
        std::fs::write(dir.join("data/base/5/16384"), [0u8; 100]).unwrap();
        let e = landed.files().unwrap_err().to_string();
        assert!(
            e.contains("data/base/5/16384") && e.contains("100 bytes"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
