//! What the stream keeps to follow the source's catalog: the shadow
//! session that names relation files at a commit, which tables a catalog
//! commit reached, and the relation files and partitions that moved.

use std::collections::{BTreeSet, HashMap};

use walshadow_types::{Oid, Xid};

use crate::catalog_reach::CatalogInterest;
use crate::relations::Relations;

/// How many relation files made by open transactions are remembered.
pub(super) const CREATED_FILES_KEPT: usize = 4096;

/// See the module doc.
#[derive(Debug)]
pub(super) struct CatalogFollow {
    /// The shadow session, once connected.
    pub relations: Option<Relations>,
    /// Tables a catalog commit reached whose descriptors are not read
    /// again yet: at their next change, a scope change or the next tick.
    pub pending_refresh: BTreeSet<String>,
    /// What each table in scope (and the config table) depends on in the
    /// catalog: which catalog-changing commits refresh which tables.
    pub interest: CatalogInterest,
    /// [`super::REFRESH_EVERY_ENV`] is set: every catalog-changing commit
    /// refreshes every table, as before commits were judged (for the
    /// benchmark's side-by-side figure).
    pub refresh_every: bool,
    /// Relation files made by transactions not ended yet (the newest
    /// [`CREATED_FILES_KEPT`]): a partition that joins a table on a file its
    /// own transaction made holds only rows that transaction wrote, which
    /// the stream has.
    pub created_files: HashMap<Xid, Vec<Oid>>,
    /// The transaction whose commit is being applied, with its
    /// subtransactions.
    pub committing: Vec<Xid>,
    /// Partitioned tables whose leaf partitions changed, with the new set,
    /// until their reload records it.
    pub new_leaves: HashMap<String, BTreeSet<Oid>>,
}

impl CatalogFollow {
    pub fn new(refresh_every: bool) -> Self {
        Self {
            relations: None,
            pending_refresh: BTreeSet::new(),
            interest: CatalogInterest::default(),
            refresh_every,
            created_files: HashMap::new(),
            committing: Vec::new(),
            new_leaves: HashMap::new(),
        }
    }
}
