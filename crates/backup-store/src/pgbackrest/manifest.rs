//! `backup.manifest`: every file of the cluster at the backup, and which
//! backup stored each (keys as pgBackRest's `manifest.c` reads them).

use std::collections::BTreeMap;

use walshadow_types::Lsn;

use super::ini::Ini;
use crate::Compression;

/// One file of a backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestFile {
    /// The file's size in the cluster.
    pub size: u64,
    /// What the repository stores for it (absent: the same as `size`).
    pub repo_size: Option<u64>,
    /// SHA-1 of the content, hex (absent for an empty file).
    pub checksum: Option<String>,
    /// The backup that stored it, when an earlier one did.
    pub reference: Option<String>,
    /// `(bundle id, offset)` when stored in a bundle (`repo-bundle`).
    pub bundle: Option<(u64, u64)>,
    /// pgBackRest found page checksum errors in it.
    pub page_errors: bool,
}

/// A backup's manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub label: String,
    pub start_lsn: Lsn,
    pub stop_lsn: Lsn,
    pub archive_start: String,
    /// How this backup's own files are compressed.
    pub compression: Compression,
    /// Databases by name: their OIDs (`base/<oid>/`).
    pub databases: BTreeMap<String, u32>,
    /// By path below the cluster (`pg_data/base/5/16384`).
    pub files: BTreeMap<String, ManifestFile>,
    /// A feature the manifest uses that walshadow does not read.
    pub unsupported: Option<String>,
}

fn compression(name: &str) -> Result<Compression, String> {
    Ok(match name {
        "none" => Compression::None,
        "gz" => Compression::Gz,
        "lz4" => Compression::Lz4,
        "zst" => Compression::Zst,
        "bz2" => Compression::Bz2,
        other => return Err(format!("unknown option-compress-type {other:?}")),
    })
}

/// Parses a manifest.
pub fn parse_manifest(text: &str) -> Result<Manifest, String> {
    let ini = Ini::parse(text)?;
    let lsn = |key: &str| -> Result<Lsn, String> {
        ini.str("backup", key)?
            .parse()
            .map_err(|e| format!("[backup] {key}: {e}"))
    };
    // Older manifests say only option-compress (gzip or none).
    let compression = match ini.get("backup:option", "option-compress-type") {
        Some(v) => compression(v.as_str().ok_or("option-compress-type is not a string")?)?,
        None if ini.get("backup:option", "option-compress") == Some(&true.into()) => {
            Compression::Gz
        }
        None => Compression::None,
    };
    let mut unsupported = None;
    if ini.has_section("cipher") {
        unsupported = Some("an encrypted backup (repo-cipher-type)".to_owned());
    }
    let mut databases = BTreeMap::new();
    for (name, v) in ini.section("db") {
        let oid = v["db-id"]
            .as_u64()
            .and_then(|o| u32::try_from(o).ok())
            .ok_or_else(|| format!("[db] {name}: no db-id"))?;
        databases.insert(name.clone(), oid);
    }
    let mut files = BTreeMap::new();
    for (path, v) in ini.section("target:file") {
        let at = |e: &str| format!("[target:file] {path}: {e}");
        // Block incremental (pgBackRest 2.46 and later) stores a file as a
        // map of blocks across backups.
        if v.get("bi").is_some() || v.get("bims").is_some() {
            unsupported.get_or_insert_with(|| "block incremental backup (repo-block)".to_owned());
        }
        let size = v["size"].as_u64().ok_or_else(|| at("no size"))?;
        let bundle = match (v.get("bni"), v.get("bno")) {
            (None, _) => None,
            (Some(id), offset) => Some((
                id.as_u64().ok_or_else(|| at("bad bundle id"))?,
                match offset {
                    Some(o) => o.as_u64().ok_or_else(|| at("bad bundle offset"))?,
                    None => 0,
                },
            )),
        };
        files.insert(
            path.clone(),
            ManifestFile {
                size,
                repo_size: v["repo-size"].as_u64(),
                checksum: v["checksum"].as_str().map(str::to_owned),
                reference: v["reference"].as_str().map(str::to_owned),
                bundle,
                page_errors: v["checksum-page"] == false,
            },
        );
    }
    Ok(Manifest {
        label: ini.str("backup", "backup-label")?.to_owned(),
        start_lsn: lsn("backup-lsn-start")?,
        stop_lsn: lsn("backup-lsn-stop")?,
        archive_start: ini.str("backup", "backup-archive-start")?.to_owned(),
        compression,
        databases,
        files,
        unsupported,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An incremental backup's manifest by pgBackRest 2.45 (PostgreSQL 15),
    /// cut to a few files.
    const INCR: &str = include_str!("../../tests/data/pgbackrest-2.45/incr.manifest");

    #[test]
    fn files_name_the_backup_that_stored_them() {
        let m = parse_manifest(INCR).unwrap();
        assert_eq!(m.label, "20261203-184938F_20261203-184943I");
        assert_eq!(m.start_lsn, "0/6000028".parse().unwrap());
        assert_eq!(m.compression, Compression::Lz4);
        assert_eq!(m.databases["postgres"], 5);
        let changed = &m.files["pg_data/base/5/16384"];
        assert_eq!(
            (changed.size, changed.reference.as_deref()),
            (1376256, None)
        );
        assert_eq!(
            changed.checksum.as_deref(),
            Some("3e841fe21da013fc9565739b3076a5a8d4bd9acf")
        );
        let kept = &m.files["pg_data/base/5/16384_fsm"];
        assert_eq!(kept.reference.as_deref(), Some("20261203-184938F"));
        let empty = &m.files["pg_data/base/1/13394"];
        assert_eq!((empty.size, empty.checksum.as_deref()), (0, None));
        assert!(
            m.files
                .values()
                .all(|f| f.bundle.is_none() && !f.page_errors)
        );
        assert_eq!(m.unsupported, None);
    }

    #[test]
    fn block_incremental_and_bundles_are_told() {
        let text = INCR.replace(
            "pg_data/base/5/16384={",
            "pg_data/base/5/16384={\"bi\":1,\"bni\":3,\"bno\":4096,",
        );
        let m = parse_manifest(&text).unwrap();
        assert_eq!(m.files["pg_data/base/5/16384"].bundle, Some((3, 4096)));
        assert!(m.unsupported.unwrap().contains("block incremental"));
    }
}
