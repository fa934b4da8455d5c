//! What each relation file is, as far as the shadow is concerned.
//!
//! A file is known by `(database, relfilenumber)`; shared catalogs use
//! database 0. The class of a file follows from the `pg_class` row that
//! points at it (or from the relation map, for mapped catalogs):
//!
//! - `relkind = 'S'` → [`FileClass::Sequence`]: kept, sequence state is
//!   schema (seed 003);
//! - statistics catalogs (`pg_statistic`, `pg_statistic_ext_data`, their
//!   TOAST and indexes) → [`FileClass::UserData`]: they hold samples of user
//!   columns;
//! - OID below `FirstNormalObjectId` (16384), namespace `pg_catalog`, the
//!   TOAST table or TOAST index of a catalog (`pg_toast_<oid>[_index]`), or
//!   the transient heap of a catalog rewrite (`relrewrite`) →
//!   [`FileClass::Catalog`];
//! - anything else → [`FileClass::UserData`].
//!
//! The row pointing at a new file is always written before data goes into
//! the file (`heap_create_with_catalog`, `make_new_heap`,
//! `RelationSetNewRelfilenumber` all update `pg_class` first), so a file is
//! classified before the filter meets its first page.

use rustc_hash::FxHashMap as HashMap;

use walshadow_types::Oid;

use super::pg_class::PgClassRow;

pub use walshadow_types::FIRST_NORMAL_OBJECT_ID;
pub const PG_CATALOG_NAMESPACE: Oid = 11;
pub const PG_TOAST_NAMESPACE: Oid = 99;
/// `pg_statistic` and `pg_statistic_ext_data` (whose rows carry user
/// values: most common values, histograms) and their indexes, which point
/// at those rows.
pub const STATISTICS_CATALOGS: [Oid; 4] = [2619, 2696, 3429, 3433];

/// What a relation file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileClass {
    /// System catalog: replayed by the shadow.
    Catalog,
    /// A sequence: replayed (its state is part of the schema).
    Sequence,
    /// User rows (or statistics on them): never reaches the shadow.
    UserData,
    /// An index of a statistics catalog (or of its TOAST table): its keys
    /// point at rows the shadow never gets, so it stays an empty btree on
    /// the shadow — `init` lands a bare metapage, and a page image of its
    /// metapage (CREATE DATABASE copying a template) is replaced by one.
    StatisticsIndex,
}

impl FileClass {
    pub fn reaches_shadow(self) -> bool {
        matches!(self, FileClass::Catalog | FileClass::Sequence)
    }
}

/// The classes of all files walshadow knows, and of relations by OID.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Classes {
    files: HashMap<(Oid, Oid), FileClass>,
    relations: HashMap<Oid, FileClass>,
}

impl Classes {
    /// Class of file `rel_number` in database `db` (0 for shared).
    pub fn file(&self, db: Oid, rel_number: Oid) -> Option<FileClass> {
        if let Some(c) = self.files.get(&(db, rel_number)) {
            return Some(*c);
        }
        // A database made by CREATE DATABASE copies its template's files
        // under the same numbers (and the WAL does not name the template):
        // fall back on what the number means elsewhere, if that is one thing.
        let mut elsewhere = self
            .files
            .iter()
            .filter(|((_, r), _)| *r == rel_number)
            .map(|(_, c)| *c);
        let first = elsewhere.next()?;
        elsewhere.all(|c| c == first).then_some(first)
    }

    pub fn set_file(&mut self, db: Oid, rel_number: Oid, class: FileClass) {
        self.files.insert((db, rel_number), class);
    }

    pub fn relation(&self, oid: Oid) -> Option<FileClass> {
        self.relations.get(&oid).copied()
    }

    pub fn set_relation(&mut self, oid: Oid, class: FileClass) {
        self.relations.insert(oid, class);
    }

    /// Copies database `from`'s files to `to` (CREATE DATABASE ... FILE_COPY).
    pub fn copy_database(&mut self, from: Oid, to: Oid) {
        let copied: Vec<_> = self
            .files
            .iter()
            .filter(|((db, _), _)| *db == from)
            .map(|((_, r), c)| (*r, *c))
            .collect();
        for (r, c) in copied {
            self.files.insert((to, r), c);
        }
    }

    pub fn drop_database(&mut self, db: Oid) {
        self.files.retain(|(d, _), _| *d != db);
    }

    /// Every known file: `((database, file number), class)`.
    pub fn files(&self) -> impl Iterator<Item = ((Oid, Oid), FileClass)> + '_ {
        self.files.iter().map(|(&k, &c)| (k, c))
    }

    /// Every known relation: `(OID, class)`.
    pub fn relations(&self) -> impl Iterator<Item = (Oid, FileClass)> + '_ {
        self.relations.iter().map(|(&o, &c)| (o, c))
    }

    pub fn file_count(&self) -> usize {
        self.files.len()
    }

    /// Learns from a `pg_class` row of database `db`: the relation's class
    /// and its file's. A mapped relation has `relfilenode = 0`; its first
    /// file is numbered after its OID (`heap_create`) — that is how the
    /// transient heap of `VACUUM FULL pg_class` starts — and later ones come
    /// from relation map updates.
    pub fn learn_row(&mut self, db: Oid, row: &PgClassRow) -> FileClass {
        let class = self.row_class(row);
        self.relations.insert(row.oid, class);
        let file = if row.relfilenode != 0 {
            row.relfilenode
        } else {
            row.oid
        };
        let file_db = if row.relisshared { 0 } else { db };
        self.files.entry((file_db, file)).or_insert(class);
        if row.relfilenode != 0 {
            self.files.insert((file_db, file), class);
        }
        class
    }

    /// The class rules of the module doc.
    pub fn row_class(&self, row: &PgClassRow) -> FileClass {
        if row.relkind == b'S' {
            return FileClass::Sequence;
        }
        let stats = |kind: u8| {
            if kind == b'i' {
                FileClass::StatisticsIndex
            } else {
                FileClass::UserData
            }
        };
        if STATISTICS_CATALOGS.contains(&row.oid) {
            return stats(row.relkind);
        }
        if row.relnamespace == PG_TOAST_NAMESPACE {
            // pg_toast_<owner> and pg_toast_<owner>_index follow their owner.
            let name = row.name();
            let owner = name
                .strip_prefix("pg_toast_")
                .map(|rest| rest.strip_suffix("_index").unwrap_or(rest))
                .and_then(|n| n.parse::<Oid>().ok());
            if let Some(owner) = owner {
                if STATISTICS_CATALOGS.contains(&owner) {
                    return stats(row.relkind);
                }
                if owner < FIRST_NORMAL_OBJECT_ID {
                    return FileClass::Catalog;
                }
                return self.relation(owner).unwrap_or(FileClass::UserData);
            }
        }
        if let Some(of) = row.relrewrite
            && let Some(c) = self.relation(of)
        {
            return c;
        }
        if row.oid < FIRST_NORMAL_OBJECT_ID || row.relnamespace == PG_CATALOG_NAMESPACE {
            return FileClass::Catalog;
        }
        FileClass::UserData
    }
}
