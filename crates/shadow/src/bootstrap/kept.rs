//! `init --bootstrap`: what of the backup the selected tables' load keeps.
//!
//! ```text
//!  selection (SQL, before each backup): tables pinned by the config file,
//!      opted in by a config-table row of their own, or taken by a pattern
//!      of the file (and no row of their own), with an initial_load other
//!      than none ─▶ their leaf relations and TOAST relations ─▶ main-fork
//!      files
//!  BASE_BACKUP (WAL) ─▶ BackupTee ─┬─▶ Landing (catalogs: the shadow)
//!                                  └─▶ KeptBackup ─▶ <state>/bootstrap/
//!                                        data/base/<db>/<file>[.N]   selected files
//!                                        data/pg_xact, pg_multixact  the gate's
//!                                        tablespaces/<oid>/…          selected files
//!                                        pg_wal/<segment>            the window
//!  backup.json last (walshadow_types::landed): the first `run`
//!  loads the tables from it as an object_store pass
//! ```
//!
//! The files stay until their load is done: a load interrupted by a crash
//! reads them again instead of needing another backup.

use std::collections::{BTreeSet, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use walshadow_config::{Config, InitialLoad};
use walshadow_types::Oid;
use walshadow_wal_reader::replication::{
    ArchiveInfo, BackupSink, EntryKind, FileAction, ReplicationClient, SinkError, TarEntry,
};

use super::landing::parse_rel_file_name;
use super::{InitError, io_err};

/// The directory under the state directory.
pub const DIR: &str = "bootstrap";

/// PostgreSQL's default tablespace, whose files are in the data directory's
/// archive (`base/`).
const DEFAULT_TABLESPACE: Oid = 1663;

/// The tables `init --bootstrap` loads and the files that hold them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// `schema.name` ([`walshadow_types::table_key`]).
    pub tables: Vec<String>,
    /// `(tablespace, database, relfilenumber)` of each main fork.
    pub files: BTreeSet<(Oid, Oid, Oid)>,
}

fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Which tables of the source's database walshadow would load at its first
/// start: a `[table]` pin, else a row of the table's own in the config
/// table that opts it in (allowed by `config_table_allow`), else a pattern,
/// with an `initial_load` other than `none`. The first `run` takes them
/// where the stream starts. A table that both a pattern and a row of its
/// own take is left out (it loads by its own load at the first commit).
pub async fn select(config: &Config) -> Result<Selection, InitError> {
    let conn = super::source::sql_config(&config.source.url, None)?;
    let mut sql = ReplicationClient::connect(&conn)
        .await
        .map_err(|e| InitError::source("connecting to the source ([source] url)", e))?;
    let r = super::source::query(
        &mut sql,
        "listing the source's tables",
        "SELECT c.oid::text, n.nspname, c.relname FROM pg_class c
           JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND c.relpersistence = 'p'
            AND n.nspname NOT IN ('pg_catalog', 'information_schema')
            AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          ORDER BY 2, 3",
    )
    .await?;
    let config_table = walshadow_types::split_table_key(&config.source.config_table);
    // Tables with a row of their own in the config table (made by init
    // before this): whether it opts the table in, and its initial_load.
    let mut rows = std::collections::HashMap::new();
    if let Some((s, t)) = &config_table {
        let q = |x: &str| format!("\"{}\"", x.replace('"', "\"\""));
        let r = super::source::query(
            &mut sql,
            "reading the config table's rows",
            &format!(
                "SELECT schema_name, table_name, replicate::text, initial_load FROM {}.{}",
                q(s),
                q(t)
            ),
        )
        .await?;
        for i in 0..r.rows.len() {
            if let (Some(s), Some(t)) = (r.text(i, 0), r.text(i, 1)) {
                // As the stream reads it: only false opts out.
                let replicate = r.text(i, 2) != Some("false");
                let load = r.text(i, 3).map(str::to_owned);
                rows.insert(walshadow_types::table_key(s, t), (replicate, load));
            }
        }
    }
    let mut oids = Vec::new();
    let mut tables = Vec::new();
    for i in 0..r.rows.len() {
        let (Some(oid), Some(schema), Some(name)) = (r.text(i, 0), r.text(i, 1), r.text(i, 2))
        else {
            continue;
        };
        if config_table
            .as_ref()
            .is_some_and(|(s, t)| s == schema && t == name)
        {
            continue;
        }
        let key = walshadow_types::table_key(schema, name);
        let load = if let Some(pin) = config.tables.get(&key) {
            pin.initial_load.clone()
        } else if let Some((replicate, load)) = rows.get(&key) {
            // A row of its own opts it in (the stream takes it at its
            // start, as a pin), unless a pattern of the file takes it.
            if config.pattern_for(schema, name).is_some() {
                tracing::info!(table = %key, "init --bootstrap: the table has a config-table row and a pattern takes it: it loads by its own initial_load");
                continue;
            }
            if !replicate || !config.source.allows(&key) {
                continue;
            }
            load.clone()
        } else if let Some(p) = config.pattern_for(schema, name) {
            p.config.initial_load.clone()
        } else {
            continue;
        };
        if matches!(
            InitialLoad::parse(load.as_deref()),
            Ok(InitialLoad::None) | Err(_)
        ) {
            continue;
        }
        oids.push(oid.to_owned());
        tables.push(key);
    }
    let mut files = BTreeSet::new();
    if !oids.is_empty() {
        let list = quote_literal(&format!("{{{}}}", oids.join(",")));
        let f = super::source::query(
            &mut sql,
            "listing the selected tables' files",
            &format!(
                "WITH leaves AS (
                   SELECT c.oid AS relid FROM pg_class c
                    WHERE c.oid = ANY ({list}::oid[]) AND c.relkind = 'r'
                   UNION SELECT p.relid FROM unnest({list}::oid[]) s(oid), pg_partition_tree(s.oid) p
                    WHERE p.isleaf),
                 rels AS (
                   SELECT relid AS oid FROM leaves
                   UNION SELECT c.reltoastrelid FROM pg_class c
                          WHERE c.reltoastrelid <> 0 AND c.oid IN (SELECT relid FROM leaves))
                 SELECT (CASE WHEN r.reltablespace = 0 THEN d.dattablespace ELSE r.reltablespace END)::text,
                        d.oid::text, pg_relation_filenode(r.oid)::text
                   FROM pg_class r, pg_database d
                  WHERE d.datname = current_database() AND r.oid IN (SELECT oid FROM rels)
                    AND pg_relation_filenode(r.oid) IS NOT NULL"
            ),
        )
        .await?;
        for i in 0..f.rows.len() {
            let parse = |c| f.text(i, c).and_then(|t| t.parse::<Oid>().ok());
            if let (Some(spc), Some(db), Some(file)) = (parse(0), parse(1), parse(2)) {
                files.insert((spc, db, file));
            }
        }
    }
    sql.close().await;
    Ok(Selection { tables, files })
}

/// Counts for the report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KeptStats {
    pub files: u64,
    pub bytes: u64,
    pub wal_segments: u64,
}

/// Keeps the selected files, `pg_xact`, `pg_multixact` and the window's
/// WAL of a `BASE_BACKUP` under `dir` (see the module doc).
#[derive(Debug)]
pub struct KeptBackup {
    dir: PathBuf,
    files: HashSet<(Oid, Oid, Oid)>,
    current: Option<(PathBuf, BufWriter<File>)>,
    /// Every file kept, relative to `dir`, with its size.
    pub kept: std::collections::BTreeMap<String, u64>,
    pub stats: KeptStats,
    /// A drill's hold point was passed (it holds once).
    held: bool,
}

/// A WAL segment's file name: 24 hex digits.
fn is_segment_name(name: &str) -> bool {
    name.len() == 24 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

impl KeptBackup {
    pub fn new(dir: &Path, selection: &Selection) -> KeptBackup {
        KeptBackup {
            dir: dir.to_owned(),
            files: selection.files.iter().copied().collect(),
            current: None,
            kept: Default::default(),
            stats: KeptStats::default(),
            held: false,
        }
    }

    /// Where member `path` of `archive` lands, or `None` if it is not kept.
    fn target(&self, spcoid: Option<Oid>, path: &str) -> Option<PathBuf> {
        use walshadow_types::landed::{DATA, TABLESPACES, WAL};
        let parts: Vec<&str> = path.split('/').collect();
        let main_fork_of = |spc: Oid, db: &str, name: &str| {
            let db: Oid = db.parse().ok()?;
            let rel = parse_rel_file_name(name)?;
            (rel.fork.is_none() && self.files.contains(&(spc, db, rel.number))).then_some(())
        };
        match (spcoid, parts.as_slice()) {
            (None, ["pg_wal", name]) if is_segment_name(name) => {
                Some(self.dir.join(WAL).join(name))
            }
            (None, ["pg_xact", _] | ["pg_multixact", "offsets" | "members", _]) => {
                Some(self.dir.join(DATA).join(path))
            }
            (None, ["base", db, name]) => {
                main_fork_of(DEFAULT_TABLESPACE, db, name).map(|()| self.dir.join(DATA).join(path))
            }
            (Some(spc), [_version, db, name]) => main_fork_of(spc, db, name)
                .map(|()| self.dir.join(TABLESPACES).join(spc.to_string()).join(path)),
            _ => None,
        }
    }
}

impl BackupSink for KeptBackup {
    async fn begin_file(
        &mut self,
        archive: &ArchiveInfo,
        file: &TarEntry,
    ) -> Result<FileAction, SinkError> {
        if !matches!(file.kind, EntryKind::File)
            || file.path.starts_with('/')
            || file.path.split('/').any(|c| c == ".." || c.is_empty())
        {
            return Ok(FileAction::Skip);
        }
        let Some(target) = self.target(archive.spcoid, &file.path) else {
            return Ok(FileAction::Skip);
        };
        if !self.held {
            self.held = true;
            walshadow_failpoints::hold(
                walshadow_failpoints::BOOTSTRAP_BACKUP_STREAMING,
                "bootstrap.backup",
            )
            .await;
        }
        if let Some(parent) = target.parent() {
            crate::process::private_dir(parent, 0o700)
                .map_err(|e| format!("creating {}: {e}", parent.display()))?;
        }
        let f = File::create(&target).map_err(|e| format!("creating {}: {e}", target.display()))?;
        if let Ok(rel) = target.strip_prefix(&self.dir) {
            self.kept.insert(rel.display().to_string(), file.size);
        }
        if target.starts_with(self.dir.join(walshadow_types::landed::WAL)) {
            self.stats.wal_segments += 1;
        } else {
            self.stats.files += 1;
        }
        self.current = Some((target, BufWriter::with_capacity(256 * 1024, f)));
        Ok(FileAction::Keep)
    }

    async fn file_data(&mut self, chunk: Bytes) -> Result<(), SinkError> {
        if let Some((path, w)) = self.current.as_mut() {
            w.write_all(&chunk)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            self.stats.bytes += chunk.len() as u64;
        }
        Ok(())
    }

    async fn end_file(&mut self) -> Result<(), SinkError> {
        if let Some((path, w)) = self.current.take() {
            let f = w
                .into_inner()
                .map_err(|e| format!("writing {}: {}", path.display(), e.error()))?;
            f.sync_all()
                .map_err(|e| format!("syncing {}: {e}", path.display()))?;
        }
        Ok(())
    }
}

impl KeptBackup {
    /// Syncs every directory it made (the files were synced as written),
    /// so that the manifest written next never names a file a crash lost.
    pub fn sync_dirs(&self) -> Result<(), InitError> {
        let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
        for rel in self.kept.keys() {
            let mut p = self.dir.join(rel);
            while p.pop() && p.starts_with(&self.dir) {
                dirs.insert(p.clone());
            }
        }
        for d in dirs {
            File::open(&d)
                .and_then(|f| f.sync_all())
                .map_err(io_err("syncing", &d))?;
        }
        Ok(())
    }
}

/// Removes what an earlier, unfinished `init --bootstrap` kept.
pub fn clear(state_dir: &Path) -> Result<(), InitError> {
    let dir = state_dir.join(DIR);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("removing", &dir)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_selected_main_forks_the_slrus_and_the_window() {
        let sel = Selection {
            tables: vec!["public.t".into()],
            files: [(1663, 5, 16384), (16400, 5, 16390)].into_iter().collect(),
        };
        let k = KeptBackup::new(Path::new("/s/bootstrap"), &sel);
        let t = |spc, p: &str| k.target(spc, p).map(|p| p.display().to_string());
        assert_eq!(
            t(None, "base/5/16384").as_deref(),
            Some("/s/bootstrap/data/base/5/16384")
        );
        assert_eq!(
            t(None, "base/5/16384.2").as_deref(),
            Some("/s/bootstrap/data/base/5/16384.2")
        );
        assert_eq!(t(None, "base/5/16384_fsm"), None);
        assert_eq!(t(None, "base/5/16385"), None);
        assert_eq!(t(None, "base/6/16384"), None);
        assert_eq!(t(None, "global/1262"), None);
        assert_eq!(
            t(None, "pg_xact/0000").as_deref(),
            Some("/s/bootstrap/data/pg_xact/0000")
        );
        assert_eq!(
            t(None, "pg_multixact/members/0000").as_deref(),
            Some("/s/bootstrap/data/pg_multixact/members/0000")
        );
        assert_eq!(
            t(None, "pg_wal/000000010000000000000003").as_deref(),
            Some("/s/bootstrap/pg_wal/000000010000000000000003")
        );
        assert_eq!(t(None, "pg_wal/archive_status/x.done"), None);
        assert_eq!(
            t(Some(16400), "PG_15_202209061/5/16390").as_deref(),
            Some("/s/bootstrap/tablespaces/16400/PG_15_202209061/5/16390")
        );
        assert_eq!(t(Some(16400), "PG_15_202209061/5/16384"), None);
    }
}
