//! pgBackRest repositories, as pgBackRest 2.x writes them (read off 2.45's
//! own output):
//!
//! ```text
//!  backup/<stanza>/backup.info            [backup:current] label = {LSNs, type, prior, …}
//!                                         [db:history] id = {system id, version}
//!  backup/<stanza>/<label>/backup.manifest [target:file] pg_data/<path> = {size,
//!                                            checksum (SHA-1), reference: the
//!                                            backup holding it, bundle-id/offset}
//!  backup/<stanza>/<holder>/pg_data/<path><.ext>   or  <holder>/bundle/<id> at an offset
//!  archive/<stanza>/archive.info          [db:history] id = {db-id: system id, version}
//!  archive/<stanza>/<version>-<id>/<tli+log>/<segment>-<sha1><.ext>
//!  archive/<stanza>/<version>-<id>/<tli>.history
//! ```
//!
//! A differential or incremental backup's manifest lists every file of the
//! cluster and names, per file, the backup that stored it: following the
//! reference is all it takes to read a file of any backup.

mod info;
pub mod ini;
mod manifest;

use std::collections::HashMap;
use std::sync::Mutex;

use sha1::{Digest, Sha1};
use walshadow_types::TimeLineId;

use crate::backup::{ArchivedFile, Backup, hex};
use crate::repository::Entry;
use crate::{Compression, Repository, StoreError};
pub use info::{ArchiveInfo, parse_archive_info, parse_backup_info};
pub use manifest::{Manifest, ManifestFile, parse_manifest};

/// One stanza of a pgBackRest repository.
#[derive(Debug)]
pub struct PgBackRest {
    repo: Repository,
    stanza: String,
    /// Each backup's compression, from its manifest (a file's holder may
    /// compress differently from the backup that references it).
    compressions: Mutex<HashMap<String, Compression>>,
}

impl PgBackRest {
    pub fn new(repo: Repository, stanza: &str) -> Self {
        PgBackRest {
            repo,
            stanza: stanza.to_owned(),
            compressions: Mutex::new(HashMap::new()),
        }
    }

    pub fn repository(&self) -> &Repository {
        &self.repo
    }

    pub fn stanza(&self) -> &str {
        &self.stanza
    }

    /// An info file parsed by `parse`, or its `.copy` when the file is
    /// missing or does not parse (pgBackRest writes both, one after the
    /// other, and reads the copy the same way). An encrypted file
    /// (OpenSSL's `Salted__` header) is refused by name.
    async fn info_file<T>(
        &self,
        key: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, StoreError> {
        let mut torn = None;
        for key in [key.to_owned(), format!("{key}.copy")] {
            let bytes = match self.repo.get(&key).await {
                Ok(bytes) => bytes,
                Err(StoreError::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            if bytes.starts_with(b"Salted__") {
                return Err(StoreError::Unsupported {
                    store: self.repo.name().to_owned(),
                    what: format!("an encrypted repository (repo-cipher-type): {key}"),
                    remedy: "give walshadow an unencrypted repository".to_owned(),
                });
            }
            let parsed = std::str::from_utf8(&bytes)
                .map_err(|_| "not UTF-8".to_owned())
                .and_then(&parse);
            match parsed {
                Ok(v) => return Ok(v),
                Err(reason) => {
                    torn.get_or_insert(self.repo.malformed(&key, reason));
                }
            }
        }
        Err(torn.unwrap_or_else(|| StoreError::NotFound {
            store: self.repo.name().to_owned(),
            path: key.to_owned(),
        }))
    }

    /// The stanza's backups, oldest first.
    pub async fn backups(&self) -> Result<Vec<Backup>, StoreError> {
        let key = format!("backup/{}/backup.info", self.stanza);
        self.info_file(&key, parse_backup_info)
            .await
            .map_err(|e| match e {
                StoreError::NotFound { store, path } => StoreError::NotFound {
                    store,
                    path: format!("{path} (is the stanza {:?} right?)", self.stanza),
                },
                e => e,
            })
    }

    /// The stanza's `archive.info`.
    pub async fn archive_info(&self) -> Result<ArchiveInfo, StoreError> {
        let key = format!("archive/{}/archive.info", self.stanza);
        self.info_file(&key, parse_archive_info).await
    }

    /// The manifest of backup `label`.
    pub async fn manifest(&self, label: &str) -> Result<Manifest, StoreError> {
        let key = format!("backup/{}/{label}/backup.manifest", self.stanza);
        let manifest = self.info_file(&key, parse_manifest).await?;
        if let Some(what) = &manifest.unsupported {
            return Err(StoreError::Unsupported {
                store: self.repo.name().to_owned(),
                what: format!("backup {label}: {what}"),
                remedy: "take a backup without it, or use initial_load = \"copy\" or \
                         \"base_backup\""
                    .to_owned(),
            });
        }
        if let Ok(mut known) = self.compressions.lock() {
            known.insert(label.to_owned(), manifest.compression);
        }
        Ok(manifest)
    }

    async fn compression_of(&self, label: &str) -> Result<Compression, StoreError> {
        let known = self
            .compressions
            .lock()
            .ok()
            .and_then(|k| k.get(label).copied());
        match known {
            Some(c) => Ok(c),
            None => Ok(self.manifest(label).await?.compression),
        }
    }

    /// The content of `path` (`pg_data/base/5/16384`, say) as backup
    /// `manifest` holds it, read from the backup that stored it and checked
    /// against the manifest's size and SHA-1.
    pub async fn read_file(&self, manifest: &Manifest, path: &str) -> Result<Vec<u8>, StoreError> {
        let file = self.file_of(manifest, path)?;
        if file.size == 0 {
            return Ok(Vec::new());
        }
        let holder = file.reference.as_deref().unwrap_or(&manifest.label);
        let compression = self.compression_of(holder).await?;
        let (key, stored) = match file.bundle {
            Some((id, offset)) => {
                let key = format!("backup/{}/{holder}/bundle/{id}", self.stanza);
                let len = file.repo_size.unwrap_or(file.size);
                let bytes = self.repo.get_range(&key, offset, len).await?;
                (key, bytes)
            }
            None => {
                let key = format!(
                    "backup/{}/{holder}/{path}{}",
                    self.stanza,
                    compression.extension()
                );
                let bytes = self.repo.get(&key).await?;
                (key, bytes)
            }
        };
        let content = compression
            .decompress(&stored, file.size)
            .map_err(|e| self.repo.malformed(&key, e.to_string()))?;
        if content.len() as u64 != file.size {
            return Err(self.repo.malformed(
                &key,
                format!(
                    "holds {} bytes, the manifest of backup {} says {}",
                    content.len(),
                    manifest.label,
                    file.size
                ),
            ));
        }
        let Some(want) = &file.checksum else {
            return Err(self.repo.malformed(
                &key,
                format!(
                    "the manifest of backup {} gives no checksum for {path} (a partial \
                     manifest)",
                    manifest.label
                ),
            ));
        };
        {
            let got = hex(&Sha1::digest(&content));
            if &got != want {
                return Err(self.repo.malformed(
                    &key,
                    format!(
                        "SHA-1 {got}, the manifest of backup {} says {want}",
                        manifest.label
                    ),
                ));
            }
        }
        Ok(content)
    }

    /// `path`'s entry in `manifest`.
    fn file_of<'m>(
        &self,
        manifest: &'m Manifest,
        path: &str,
    ) -> Result<&'m ManifestFile, StoreError> {
        manifest
            .files
            .get(path)
            .ok_or_else(|| StoreError::NotFound {
                store: self.repo.name().to_owned(),
                path: format!("{path} in the manifest of backup {}", manifest.label),
            })
    }

    /// [`PgBackRest::read_file`] written to the local file `dest` as it is
    /// decompressed, checked the same: a relation's segment is up to 1 GB,
    /// and the walk reads several ahead, so none is held in memory. The
    /// stored bytes land beside `dest` first (`.stored`, removed after).
    /// Returns the file's size.
    pub async fn fetch_file(
        &self,
        manifest: &Manifest,
        path: &str,
        dest: &std::path::Path,
    ) -> Result<u64, StoreError> {
        let file = self.file_of(manifest, path)?;
        let holder = file.reference.as_deref().unwrap_or(&manifest.label);
        let local = |what: &std::path::Path, e: std::io::Error| StoreError::Unreachable {
            store: self.repo.name().to_owned(),
            path: format!("{path} (writing {})", what.display()),
            source: Box::new(e),
        };
        if file.size == 0 {
            std::fs::write(dest, b"").map_err(|e| local(dest, e))?;
            return Ok(0);
        }
        let compression = self.compression_of(holder).await?;
        let stored = dest.with_extension("stored");
        let key = match file.bundle {
            Some((id, offset)) => {
                // Bundles hold small files (pgBackRest's bundle-limit).
                let key = format!("backup/{}/{holder}/bundle/{id}", self.stanza);
                let len = file.repo_size.unwrap_or(file.size);
                let bytes = self.repo.get_range(&key, offset, len).await?;
                std::fs::write(&stored, &bytes).map_err(|e| local(&stored, e))?;
                key
            }
            None => {
                let key = format!(
                    "backup/{}/{holder}/{path}{}",
                    self.stanza,
                    compression.extension()
                );
                self.repo.download(&key, &stored).await?;
                key
            }
        };
        let (size, limit, out) = (file.size, file.size.saturating_add(1), dest.to_owned());
        let inflated = tokio::task::spawn_blocking(move || {
            let inflate = || -> std::io::Result<(u64, String)> {
                use std::io::{Read, Write};
                let input = std::io::BufReader::new(std::fs::File::open(&stored)?);
                let mut reader = compression.reader(input)?.take(limit);
                let mut writer = std::io::BufWriter::new(std::fs::File::create(&out)?);
                let mut sha = Sha1::new();
                let mut buf = vec![0u8; 1 << 20];
                let mut total = 0u64;
                loop {
                    let n = reader.read(&mut buf)?;
                    let Some(chunk) = buf.get(..n).filter(|c| !c.is_empty()) else {
                        break;
                    };
                    sha.update(chunk);
                    writer.write_all(chunk)?;
                    total += n as u64;
                }
                writer.flush()?;
                Ok((total, hex(&sha.finalize())))
            };
            let r = inflate();
            let _ = std::fs::remove_file(&stored);
            r
        })
        .await
        .map_err(|e| self.repo.malformed(&key, format!("decompressing: {e}")))?
        .map_err(|e| {
            self.repo
                .malformed(&key, format!("decompressing ({compression:?}): {e}"))
        })?;
        let (got_size, got_sha) = inflated;
        if got_size != size {
            return Err(self.repo.malformed(
                &key,
                format!(
                    "holds {got_size} bytes or more, the manifest of backup {} says {size}",
                    manifest.label
                ),
            ));
        }
        match &file.checksum {
            Some(want) if *want == got_sha => Ok(size),
            Some(want) => Err(self.repo.malformed(
                &key,
                format!(
                    "SHA-1 {got_sha}, the manifest of backup {} says {want}",
                    manifest.label
                ),
            )),
            None => Err(self.repo.malformed(
                &key,
                format!(
                    "the manifest of backup {} gives no checksum for {path} (a partial manifest)",
                    manifest.label
                ),
            )),
        }
    }

    /// The archive's directory for the cluster a backup belongs to: pgBackRest
    /// keys the archive by PostgreSQL version and the history id of the
    /// cluster (`15-1`), which a stanza-upgrade moves on.
    pub fn archive_dir(&self, archive_id: &str) -> String {
        format!("archive/{}/{archive_id}", self.stanza)
    }

    /// Every WAL segment archived under `archive_id`, sorted by name
    /// (partial segments and backup history files left out).
    pub async fn archived_segments(
        &self,
        archive_id: &str,
    ) -> Result<Vec<ArchivedFile>, StoreError> {
        let dir = self.archive_dir(archive_id);
        let mut out: Vec<ArchivedFile> = self
            .repo
            .list_all(&dir)
            .await?
            .iter()
            .filter_map(archived_file)
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Segment `name` as archived under `archive_id`, if it is: one listing
    /// of its directory (`<archive>/<first 16 characters>/`), not of the
    /// whole archive.
    pub async fn archived_segment(
        &self,
        archive_id: &str,
        name: &str,
    ) -> Result<Option<ArchivedFile>, StoreError> {
        let Some(dir) = name.get(..16) else {
            return Ok(None);
        };
        let dir = format!("{}/{dir}", self.archive_dir(archive_id));
        Ok(self
            .repo
            .list(&dir)
            .await?
            .iter()
            .filter_map(archived_file)
            .find(|f| f.name == name))
    }

    /// The history file of timeline `tli` in the archive, if archived.
    pub async fn history(
        &self,
        archive_id: &str,
        tli: TimeLineId,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let dir = self.archive_dir(archive_id);
        let name = walshadow_pg_format::wal_files::history_file_name(tli);
        for entry in self.repo.list(&dir).await? {
            let file = entry.key.rsplit('/').next().unwrap_or_default();
            let (compression, stem) = Compression::from_name(file);
            if stem == name {
                let bytes = self.repo.get(&entry.key).await?;
                return compression
                    .decompress(&bytes, 16 << 20)
                    .map(Some)
                    .map_err(|e| self.repo.malformed(&entry.key, e.to_string()));
            }
        }
        Ok(None)
    }
}

/// An archive entry that is a segment: `<24 hex>-<40 hex SHA-1>[.ext]`
/// (partial segments and backup history files are not).
fn archived_file(entry: &Entry) -> Option<ArchivedFile> {
    let file = entry.key.rsplit('/').next().unwrap_or_default();
    let (compression, stem) = Compression::from_name(file);
    let (name, sha1) = stem.split_once('-')?;
    let hex = |s: &str, len| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(name, 24) && hex(sha1, 40)).then(|| ArchivedFile {
        name: name.to_owned(),
        key: entry.key.clone(),
        compression,
        sha1: Some(sha1.to_owned()),
    })
}
