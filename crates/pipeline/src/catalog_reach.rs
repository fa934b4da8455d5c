//! Which tables in scope a catalog-changing commit can concern, from its
//! invalidation messages alone.
//!
//! Any session can create temporary tables, and every one of them commits
//! catalog changes. Refreshing at such a commit costs a flush, a durable
//! progress write, a wait for the shadow and a re-read of descriptors, so
//! only commits whose messages can concern a table in scope refresh it,
//! and only the tables they can concern.
//!
//! What PostgreSQL invalidates (inval.c `CacheInvalidateHeapTuple`): a
//! change to a `pg_class` or `pg_attribute` row sends a relcache message for
//! the relation it describes; a change to any row with syscaches sends a
//! catcache message per cache of its catalog, hashed from that row's keys.
//! A table's descriptor depends on its own relation, its partitions, TOAST
//! relations and indexes (relcache ids), and on its column types, what they
//! are built from and the namespaces of all of these (oid-keyed caches:
//! `RELOID`, `TYPEOID`, `NAMESPACEOID`, …). A table not in the catalog yet
//! appears through a `pg_class` row under its name (`RELNAMENSP`) or its
//! schema's creation (`NAMESPACENAME`). Caches whose changes always come
//! with one of those (`ATTNUM` beside its relcache message, `TYPENAMENSP`
//! beside `TYPEOID`) or that describe nothing walshadow reads
//! (`STATRELATTINH`, `CONSTROID`) concern nobody; any other cache — enum
//! labels, above all — concerns every table, as does a message kind that
//! names no object.
//!
//! A hash collision only costs a refresh; a message is never taken as
//! harmless without a reason above.

use std::collections::{BTreeSet, HashMap};

use walshadow_types::{Oid, PgMajor};
use walshadow_wal_decode::sinval::Inval;
use walshadow_wal_decode::syscache::{entry_hash, name_key_hash, oid_key_hash, syscache_name};

/// What one table's descriptor depends on in the catalog.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableInterest {
    /// Relcache ids: the table, its partitions, their TOAST relations and
    /// indexes, the relations of composite column types.
    pub relations: Vec<Oid>,
    /// Objects behind oid-keyed syscache entries: those relations, the
    /// column types and what they are built from, their namespaces.
    pub objects: Vec<Oid>,
    /// Set while the table is not in the catalog: the entry hashes its
    /// creation (or a rename to its name) would invalidate.
    pub awaited: Vec<u32>,
}

impl TableInterest {
    /// A table `schema.name` that does not exist; `namespace` is its
    /// schema's OID if the schema exists.
    pub fn awaited(schema: &str, name: &str, namespace: Option<Oid>) -> TableInterest {
        // NAMESPACENAME (nspname): the schema made, renamed to or from the
        // name (a swap brings a table along), or dropped; the table may
        // follow in a later commit, judged with the interest learned anew.
        let mut awaited = vec![name_key_hash(schema)];
        // RELNAMENSP (relname, relnamespace): the table made or renamed
        // into the existing schema.
        awaited.extend(namespace.map(|nsp| entry_hash(&[name_key_hash(name), oid_key_hash(nsp)])));
        TableInterest {
            awaited,
            // NAMESPACEOID: the schema itself changed (renamed, dropped).
            objects: namespace.into_iter().collect(),
            ..TableInterest::default()
        }
    }
}

/// How far a commit's catalog changes reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// No table in scope: nothing to refresh.
    Nothing,
    /// These tables (keys).
    Tables(BTreeSet<String>),
    /// Every table: a message that names no object, or one walshadow cannot
    /// attribute.
    Everything,
}

/// The interest of every table in scope, indexed by what messages carry.
#[derive(Debug, Default)]
pub struct CatalogInterest {
    tables: HashMap<String, TableInterest>,
    index: Option<Index>,
}

#[derive(Debug, Default)]
struct Index {
    relations: HashMap<Oid, Vec<String>>,
    objects: HashMap<u32, Vec<String>>,
    awaited: HashMap<u32, Vec<String>>,
}

/// How a catcache message is judged, by its cache.
enum CacheRule {
    /// Keyed by one OID: concerns the tables with that object.
    ByObject,
    /// Keyed by a name: concerns tables awaited under it.
    ByName,
    /// Never alone decisive (see the module docs).
    Harmless,
    /// Concerns every table.
    All,
}

fn cache_rule(name: Option<&str>) -> CacheRule {
    match name {
        Some("RELOID" | "TYPEOID" | "INDEXRELID" | "NAMESPACEOID" | "PARTRELID" | "SEQRELID") => {
            CacheRule::ByObject
        }
        Some("RELNAMENSP" | "NAMESPACENAME") => CacheRule::ByName,
        Some("ATTNAME" | "ATTNUM" | "TYPENAMENSP" | "STATRELATTINH" | "CONSTROID") => {
            CacheRule::Harmless
        }
        _ => CacheRule::All,
    }
}

impl CatalogInterest {
    pub fn knows(&self, key: &str) -> bool {
        self.tables.contains_key(key)
    }

    pub fn set(&mut self, key: &str, interest: TableInterest) {
        if self.tables.get(key) != Some(&interest) {
            self.tables.insert(key.to_owned(), interest);
            self.index = None;
        }
    }

    /// Forgets `key` (its catalog changed; learned again before the next
    /// judgement).
    pub fn forget(&mut self, key: &str) {
        if self.tables.remove(key).is_some() {
            self.index = None;
        }
    }

    pub fn forget_all(&mut self) {
        self.tables.clear();
        self.index = None;
    }

    /// Keeps only the tables `keep` says to.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        let before = self.tables.len();
        self.tables.retain(|k, _| keep(k));
        if self.tables.len() != before {
            self.index = None;
        }
    }

    /// How far the messages `invals` of a commit in database `db` reach.
    pub fn reach(&mut self, invals: &[Inval], major: PgMajor, db: Oid) -> Reach {
        let index = self.index.get_or_insert_with(|| {
            let mut index = Index::default();
            for (key, t) in &self.tables {
                for r in &t.relations {
                    index.relations.entry(*r).or_default().push(key.clone());
                }
                for o in t.relations.iter().chain(&t.objects) {
                    index
                        .objects
                        .entry(oid_key_hash(*o))
                        .or_default()
                        .push(key.clone());
                }
                for h in &t.awaited {
                    index.awaited.entry(*h).or_default().push(key.clone());
                }
            }
            index
        });
        let mut reached = BTreeSet::new();
        let mut add = |keys: Option<&Vec<String>>| {
            reached.extend(keys.into_iter().flatten().cloned());
        };
        for inval in invals {
            match *inval {
                // Shared catalogs (roles, databases, tablespaces) describe
                // no table; other databases are not ours.
                Inval::Catcache { db: d, .. }
                | Inval::Catalog { db: d, .. }
                | Inval::Relcache { db: d, .. }
                | Inval::Relmap { db: d }
                    if d != db => {}
                Inval::Catcache { cache_id, hash, .. } => {
                    match cache_rule(syscache_name(major, cache_id)) {
                        CacheRule::ByObject => add(index.objects.get(&hash)),
                        CacheRule::ByName => add(index.awaited.get(&hash)),
                        CacheRule::Harmless => {}
                        CacheRule::All => return Reach::Everything,
                    }
                }
                Inval::Relcache { rel: 0, .. } => return Reach::Everything,
                Inval::Relcache { rel, .. } => add(index.relations.get(&rel)),
                // A whole catalog (after its rewrite) or the relation map.
                Inval::Catalog { .. } | Inval::Relmap { .. } => return Reach::Everything,
                // Catalogs without syscaches (pg_depend, pg_description …)
                // and pgoutput's cache.
                Inval::Snapshot { .. } | Inval::RelSync { .. } => {}
                // A temporary relation's storage; its WAL is not written.
                Inval::Smgr { backend, .. } if backend >= 0 => {}
                Inval::Smgr { locator, .. } if locator.db_oid != db => {}
                Inval::Smgr { .. } | Inval::Other(_) => return Reach::Everything,
            }
        }
        if reached.is_empty() {
            Reach::Nothing
        } else {
            Reach::Tables(reached)
        }
    }
}

/// A message of another database, or of a shared catalog (roles,
/// databases, tablespaces): about no table of database `db`.
fn elsewhere(inval: &Inval, db: Oid) -> bool {
    matches!(
        *inval,
        Inval::Catcache { db: d, .. }
            | Inval::Catalog { db: d, .. }
            | Inval::Relcache { db: d, .. }
            | Inval::Relmap { db: d }
            if d != db
    )
}

/// Whether `invals` (of a commit in database `db`) name one of `relids`,
/// by its relcache id or its `RELOID` entry, or may concern any relation
/// (relcache 0, a whole catalog, the relation map, storage, a message kind
/// walshadow does not know).
pub fn names_relation(
    invals: &[Inval],
    major: PgMajor,
    db: Oid,
    relids: &std::collections::HashSet<Oid>,
) -> bool {
    invals
        .iter()
        .filter(|i| !elsewhere(i, db))
        .any(|inval| match *inval {
            Inval::Relcache { rel: 0, .. } | Inval::Catalog { .. } | Inval::Relmap { .. } => true,
            Inval::Relcache { rel, .. } => relids.contains(&rel),
            Inval::Catcache { cache_id, hash, .. } => {
                syscache_name(major, cache_id) == Some("RELOID")
                    && relids.iter().any(|r| oid_key_hash(*r) == hash)
            }
            Inval::Smgr { backend, .. } if backend >= 0 => false,
            Inval::Smgr { locator, .. } => locator.db_oid == db,
            Inval::Snapshot { .. } | Inval::RelSync { .. } => false,
            Inval::Other(_) => true,
        })
}

/// Whether `invals` (of a commit in database `db`) may have changed the
/// names of relations: a `pg_class` row made, renamed, moved to another
/// schema or changed otherwise (its `RELNAMENSP` entry), or anything that
/// may concern any relation. Tables taken by pattern are looked for then.
pub fn changes_relation_names(invals: &[Inval], major: PgMajor, db: Oid) -> bool {
    invals
        .iter()
        .filter(|i| !elsewhere(i, db))
        .any(|inval| match *inval {
            Inval::Catcache { cache_id, .. } => matches!(
                syscache_name(major, cache_id),
                Some("RELNAMENSP" | "NAMESPACENAME")
            ),
            Inval::Relcache { rel: 0, .. } | Inval::Catalog { .. } | Inval::Relmap { .. } => true,
            Inval::Other(_) => true,
            Inval::Relcache { .. }
            | Inval::Smgr { .. }
            | Inval::Snapshot { .. }
            | Inval::RelSync { .. } => false,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DB: Oid = 5;

    fn cat(major: PgMajor, cache: &str, hash: u32) -> Inval {
        let id = (0..=i8::MAX)
            .find(|i| syscache_name(major, *i) == Some(cache))
            .unwrap();
        Inval::Catcache {
            cache_id: id,
            db: DB,
            hash,
        }
    }

    #[test]
    fn names_change_with_pg_class_rows_of_this_database() {
        for major in [PgMajor::V15, PgMajor::V18] {
            let yes = |invals: &[Inval]| changes_relation_names(invals, major, DB);
            assert!(yes(&[cat(major, "RELNAMENSP", 7)]));
            assert!(yes(&[cat(major, "NAMESPACENAME", 7)]));
            assert!(!yes(&[cat(major, "RELOID", 7)]));
            let Inval::Catcache { cache_id, hash, .. } = cat(major, "RELNAMENSP", 7) else {
                unreachable!()
            };
            assert!(!yes(&[Inval::Catcache {
                cache_id,
                db: DB + 1,
                hash,
            }]));
            assert!(!yes(&[Inval::Relcache { db: DB, rel: 16384 }]));
            assert!(yes(&[Inval::Relcache { db: DB, rel: 0 }]));
        }
    }

    fn interest() -> CatalogInterest {
        let mut i = CatalogInterest::default();
        i.set(
            "public.t",
            TableInterest {
                relations: vec![16389, 16392],
                objects: vec![16385, 2200, 23],
                awaited: vec![],
            },
        );
        i.set(
            "public.later",
            TableInterest::awaited("public", "later", Some(2200)),
        );
        i.set("nowhere.x", TableInterest::awaited("nowhere", "x", None));
        i
    }

    #[test]
    fn toast_relations_named_by_their_messages() {
        let major = PgMajor::V15;
        let toast = std::collections::HashSet::from([16392]);
        let named = |invals: &[Inval]| names_relation(invals, major, DB, &toast);
        assert!(named(&[Inval::Relcache { db: DB, rel: 16392 }]));
        assert!(named(&[cat(major, "RELOID", oid_key_hash(16392))]));
        assert!(named(&[Inval::Relcache { db: DB, rel: 0 }]));
        // A GRANT on the table: its own relation only.
        assert!(!named(&[
            Inval::Relcache { db: DB, rel: 16389 },
            cat(major, "RELOID", oid_key_hash(16389))
        ]));
        assert!(!named(&[Inval::Relcache {
            db: DB + 1,
            rel: 16392
        }]));
    }

    #[test]
    fn a_temporary_table_reaches_nothing() {
        for major in PgMajor::ALL {
            let mut i = interest();
            let invals = [
                cat(major, "TYPEOID", oid_key_hash(16500)),
                cat(major, "TYPENAMENSP", 1),
                cat(major, "RELOID", oid_key_hash(16501)),
                cat(major, "RELNAMENSP", 2),
                cat(major, "ATTNUM", 3),
                cat(major, "ATTNAME", 4),
                cat(major, "INDEXRELID", oid_key_hash(16502)),
                cat(major, "CONSTROID", 5),
                Inval::Relcache { db: DB, rel: 16501 },
                Inval::Snapshot { db: DB, rel: 2608 },
            ];
            assert_eq!(i.reach(&invals, major, DB), Reach::Nothing, "{major:?}");
        }
    }

    #[test]
    fn the_tables_own_objects_reach_it() {
        let one = Reach::Tables(BTreeSet::from(["public.t".to_owned()]));
        for major in PgMajor::ALL {
            let mut i = interest();
            let relcache = [Inval::Relcache { db: DB, rel: 16392 }];
            assert_eq!(i.reach(&relcache, major, DB), one);
            // ALTER TYPE … RENAME of a column's type.
            let ty = [cat(major, "TYPEOID", oid_key_hash(16385))];
            assert_eq!(i.reach(&ty, major, DB), one);
            // ALTER SCHEMA … RENAME of its schema (also the schema an
            // awaited table would appear in).
            let nsp = [cat(major, "NAMESPACEOID", oid_key_hash(2200))];
            assert_eq!(
                i.reach(&nsp, major, DB),
                Reach::Tables(BTreeSet::from([
                    "public.later".to_owned(),
                    "public.t".to_owned()
                ]))
            );
        }
    }

    #[test]
    fn an_awaited_name_is_reached_by_its_creation() {
        let major = PgMajor::V18;
        let mut i = interest();
        let created = [cat(
            major,
            "RELNAMENSP",
            entry_hash(&[name_key_hash("later"), oid_key_hash(2200)]),
        )];
        assert_eq!(
            i.reach(&created, major, DB),
            Reach::Tables(BTreeSet::from(["public.later".to_owned()]))
        );
        let schema = [cat(major, "NAMESPACENAME", name_key_hash("nowhere"))];
        assert_eq!(
            i.reach(&schema, major, DB),
            Reach::Tables(BTreeSet::from(["nowhere.x".to_owned()]))
        );
        // The awaited table's existing schema swapped for another of its
        // name (ALTER SCHEMA … RENAME), or dropped and made again.
        let swapped = [cat(major, "NAMESPACENAME", name_key_hash("public"))];
        assert!(
            matches!(i.reach(&swapped, major, DB), Reach::Tables(t) if t.contains("public.later"))
        );
        let renamed = [cat(major, "NAMESPACEOID", oid_key_hash(2200))];
        assert!(
            matches!(i.reach(&renamed, major, DB), Reach::Tables(t) if t.contains("public.later"))
        );
    }

    #[test]
    fn what_cannot_be_attributed_reaches_everything() {
        for major in PgMajor::ALL {
            let mut i = interest();
            // ALTER TYPE … ADD VALUE: pg_enum only.
            let label = [cat(major, "ENUMOID", 7), cat(major, "ENUMTYPOIDNAME", 8)];
            assert_eq!(i.reach(&label, major, DB), Reach::Everything);
            let all = [Inval::Relcache { db: DB, rel: 0 }];
            assert_eq!(i.reach(&all, major, DB), Reach::Everything);
            let unknown = [Inval::Catcache {
                cache_id: 120,
                db: DB,
                hash: 0,
            }];
            assert_eq!(i.reach(&unknown, major, DB), Reach::Everything);
            assert_eq!(
                i.reach(&[Inval::Relmap { db: DB }], major, DB),
                Reach::Everything
            );
        }
    }

    #[test]
    fn other_databases_and_shared_catalogs_reach_nothing() {
        let major = PgMajor::V15;
        let mut i = interest();
        let invals = [
            Inval::Relcache { db: 7, rel: 16389 },
            Inval::Catcache {
                cache_id: 11, // AUTHOID
                db: 0,
                hash: 1,
            },
            Inval::Relmap { db: 0 },
        ];
        assert_eq!(i.reach(&invals, major, DB), Reach::Nothing);
    }

    #[test]
    fn a_changed_interest_is_reindexed() {
        let major = PgMajor::V16;
        let mut i = interest();
        let msg = [Inval::Relcache { db: DB, rel: 17000 }];
        assert_eq!(i.reach(&msg, major, DB), Reach::Nothing);
        i.set(
            "public.later",
            TableInterest {
                relations: vec![17000],
                ..TableInterest::default()
            },
        );
        assert_eq!(
            i.reach(&msg, major, DB),
            Reach::Tables(BTreeSet::from(["public.later".to_owned()]))
        );
        i.forget("public.later");
        assert_eq!(i.reach(&msg, major, DB), Reach::Nothing);
    }
}
