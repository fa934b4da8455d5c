//! Relation files to pinned tables, as of the commit being decoded.
//!
//! A heap record names a relation *file*; which table that is, and what its
//! columns are, is the catalog's answer at the record's commit. The shadow
//! gives that answer exactly because the pipeline holds it there: the
//! feeder's replay ceiling never passes the last catalog-changing commit the
//! pipeline has processed (see [`crate::stream`]), so the shadow's catalog
//! equals the catalog at every commit since. Answers are cached until the
//! next catalog-changing commit clears them.
//!
//! ```text
//!  (spc, db, relfilenode) ──cache──▶ Resolved::{Pinned, Toast, Other}
//!          │ miss: wait replay ≥ catalog LSN
//!          ▼
//!  ShadowCatalog: pg_filenode_relation → RelationDesc → partition root
//! ```

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use walshadow_emitter::{ColumnRules, Masked};
use walshadow_shadow::catalog::{CatalogError, ShadowCatalog};
use walshadow_shadow::feeder::{Feeder, ReplayWaitError};
use walshadow_types::catalog::RelationDesc;
use walshadow_types::{Lsn, Oid, RelFileLocator};

use crate::catalog_reach::TableInterest;

/// How long a lookup waits for the shadow to replay the catalog it needs.
const REPLAY_WAIT: Duration = Duration::from_secs(120);

/// What a relation file is, for the pipeline.
#[derive(Debug, Clone)]
pub enum Resolved {
    /// A pinned table, or a partition of one: `key` is the pinned
    /// `schema.name` (the partition root), `desc` the relation the file
    /// belongs to (whose layout its tuples have).
    Pinned {
        key: String,
        desc: Arc<RelationDesc>,
    },
    /// The TOAST table of `owner_key`'s relation.
    Toast { owner_key: String, toast_relid: Oid },
    /// The config table (`[source] config_table`): its rows opt tables in
    /// and out.
    Config { desc: Arc<RelationDesc> },
    /// Anything else: its changes are not streamed.
    Other,
}

/// Why a lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Replay(#[from] ReplayWaitError),
}

/// Resolves relation files through the shadow, cached per catalog version.
#[derive(Debug)]
pub struct Relations {
    catalog: ShadowCatalog,
    /// The source database the pinned tables live in.
    pub db_oid: Oid,
    pinned: BTreeSet<String>,
    /// `schema.name` of the config table.
    config_key: String,
    /// The catalog is the same from here to the decode position.
    catalog_lsn: Lsn,
    /// `catalog_lsn` has been replayed by the shadow.
    replayed: bool,
    by_file: HashMap<RelFileLocator, Resolved>,
    /// Relation files of pinned tables as earlier catalog versions had
    /// them, by relfilenumber (this database only). A transaction that
    /// writes rows and then moves its table to a new file (`CLUSTER`,
    /// `SET TABLESPACE`, `TRUNCATE`, a rewriting `ALTER TABLE`) commits with
    /// the old file pointing nowhere; its rows are still the table's.
    earlier_files: HashMap<Oid, Resolved>,
    by_oid: HashMap<Oid, Option<Arc<RelationDesc>>>,
    /// TOAST relation OID → its relfilenumber and the pinned key of its
    /// owner (pinned tables and their partitions), learned once per
    /// catalog version.
    toast_owner: HashMap<Oid, (Oid, String)>,
    toast_owners_known: bool,
    /// Why the config table's rows are ignored, since its last change was
    /// classified (another role owns it).
    config_ignored: Option<String>,
    /// Pinned tables' column rules (`exclude_columns`,
    /// `unsupported_columns`): every descriptor of a pinned table handed
    /// out has them applied.
    column_rules: HashMap<String, ColumnRules>,
    /// The stream's holder of the shadow's replay ceiling.
    ceiling_share: usize,
}

impl Relations {
    pub async fn new(
        mut catalog: ShadowCatalog,
        pinned: BTreeSet<String>,
        column_rules: HashMap<String, ColumnRules>,
        config_key: String,
        catalog_lsn: Lsn,
        ceiling_share: usize,
    ) -> Result<Relations, ResolveError> {
        let db_oid = catalog.current_database_oid().await?;
        Ok(Relations {
            catalog,
            db_oid,
            pinned,
            config_key,
            catalog_lsn,
            replayed: false,
            by_file: HashMap::new(),
            earlier_files: HashMap::new(),
            by_oid: HashMap::new(),
            toast_owner: HashMap::new(),
            toast_owners_known: false,
            config_ignored: None,
            column_rules,
            ceiling_share,
        })
    }

    /// New column rules (a config-table row changed them): descriptors
    /// resolved under the old ones are forgotten.
    pub fn set_column_rules(&mut self, rules: HashMap<String, ColumnRules>) {
        if rules != self.column_rules {
            self.column_rules = rules;
            self.by_file.clear();
        }
    }

    /// `desc` of pinned table `key` with the table's column rules applied.
    fn masked(&self, key: &str, desc: RelationDesc) -> Masked {
        match self.column_rules.get(key) {
            Some(rules) => rules.apply(desc),
            None => ColumnRules::default().apply(desc),
        }
    }

    /// Why the config table's rows are ignored, while they are.
    pub fn config_table_ignored(&self) -> Option<&str> {
        self.config_ignored.as_deref()
    }

    /// The catalog changed at `lsn` (the end of a commit whose invalidation
    /// messages concern this database): forget every answer.
    pub fn catalog_changed(&mut self, lsn: Lsn) {
        self.catalog_lsn = lsn;
        self.replayed = false;
        for (file, r) in self.by_file.drain() {
            if matches!(r, Resolved::Pinned { .. } | Resolved::Toast { .. }) {
                self.earlier_files.insert(file.rel_number, r);
            }
        }
        self.by_oid.clear();
        self.toast_owner.clear();
        self.toast_owners_known = false;
    }

    /// The tables in scope changed (an opt-in or opt-out): files resolve
    /// anew.
    pub fn set_pinned(&mut self, pinned: BTreeSet<String>) {
        self.pinned = pinned;
        self.by_file.clear();
        self.toast_owner.clear();
        self.toast_owners_known = false;
    }

    pub fn catalog_lsn(&self) -> Lsn {
        self.catalog_lsn
    }

    /// The tables a pattern may take, as the catalog is at `catalog_lsn`.
    pub async fn user_tables(
        &mut self,
        feeder: &Feeder,
    ) -> Result<Vec<(String, String)>, ResolveError> {
        self.ready(feeder).await?;
        Ok(self.catalog.user_tables().await?)
    }

    /// Makes sure the shadow shows the catalog as of `catalog_lsn`.
    async fn ready(&mut self, feeder: &Feeder) -> Result<(), ResolveError> {
        if !self.replayed {
            // What ClickHouse holds was allowed when it became durable.
            crate::stream::raise_replay_ceiling(
                feeder,
                self.ceiling_share,
                self.catalog_lsn,
                Lsn::INVALID,
            );
            feeder
                .wait_for_replay(self.catalog_lsn, REPLAY_WAIT)
                .await?;
            self.catalog.expect_replayed(self.catalog_lsn);
            self.replayed = true;
        }
        Ok(())
    }

    /// What relation file `file` is at the current catalog.
    pub async fn resolve(
        &mut self,
        feeder: &Feeder,
        file: RelFileLocator,
    ) -> Result<Resolved, ResolveError> {
        // A system catalog's own file (its rows are the shadow's business):
        // answered without waiting for the shadow, which a run of catalog
        // commits would otherwise do once for each.
        if file.db_oid != self.db_oid || file.rel_number < walshadow_types::FIRST_NORMAL_OBJECT_ID {
            return Ok(Resolved::Other);
        }
        if let Some(r) = self.by_file.get(&file) {
            return Ok(r.clone());
        }
        self.ready(feeder).await?;
        let resolved = match self
            .catalog
            .relation_by_file(file.spc_oid, file.rel_number)
            .await?
        {
            None => self
                .earlier_files
                .get(&file.rel_number)
                .cloned()
                .unwrap_or(Resolved::Other),
            Some(desc) => self.classify(desc).await?,
        };
        self.by_file.insert(file, resolved.clone());
        Ok(resolved)
    }

    async fn classify(&mut self, desc: RelationDesc) -> Result<Resolved, ResolveError> {
        if desc.relkind == "t" {
            self.learn_toast_owners().await?;
            return Ok(match self.toast_owner.get(&desc.oid) {
                Some((_, owner)) => Resolved::Toast {
                    owner_key: owner.clone(),
                    toast_relid: desc.oid,
                },
                None => Resolved::Other,
            });
        }
        let desc = Arc::new(desc);
        let (key, _) = self.root_of(Arc::clone(&desc)).await?;
        if key == self.config_key {
            // Its rows decide what walshadow reads: only a table of
            // walshadow's role (or a superuser's) is believed.
            if let Some(owner) = self.catalog.foreign_owner(desc.oid).await? {
                let why = format!(
                    "the config table {key} belongs to role {owner:?}, neither walshadow's role nor a superuser: its rows are ignored; as a superuser run ALTER TABLE {key} OWNER TO <walshadow's role>, or drop it and run walshadow init"
                );
                tracing::error!(table = %key, owner = %owner, "{why}");
                self.config_ignored = Some(why);
                return Ok(Resolved::Other);
            }
            self.config_ignored = None;
            return Ok(Resolved::Config { desc });
        }
        if self.pinned.contains(&key) {
            let desc = if self.column_rules.contains_key(&key) {
                Arc::new(self.masked(&key, Arc::unwrap_or_clone(desc)).desc)
            } else {
                desc
            };
            Ok(Resolved::Pinned { key, desc })
        } else {
            Ok(Resolved::Other)
        }
    }

    async fn learn_toast_owners(&mut self) -> Result<(), ResolveError> {
        if !self.toast_owners_known {
            for (toast, file, key) in self.catalog.pinned_toast_tables(&self.pinned).await? {
                self.toast_owner.insert(toast, (file, key));
            }
            self.toast_owners_known = true;
        }
        Ok(())
    }

    /// The TOAST relations of the pinned tables (and their partitions) at
    /// the current catalog: OID → relfilenumber. The chunk mirror compares
    /// two catalog versions' maps to see TOAST relations rewritten,
    /// truncated or gone.
    pub async fn toast_files(
        &mut self,
        feeder: &Feeder,
    ) -> Result<HashMap<Oid, Oid>, ResolveError> {
        self.ready(feeder).await?;
        self.learn_toast_owners().await?;
        Ok(self
            .toast_owner
            .iter()
            .map(|(toast, (file, _))| (*toast, *file))
            .collect())
    }

    /// `schema.name` and OID of the partition root of `desc` (itself when
    /// it is not a partition): partitions stream into their root's table.
    async fn root_of(&mut self, desc: Arc<RelationDesc>) -> Result<(String, Oid), ResolveError> {
        let mut root = desc;
        // Bounded: partition trees are shallow; a cycle cannot hang us.
        for _ in 0..64 {
            let Some(parent) = root.partition_parent else {
                break;
            };
            match self.by_oid_cached(parent).await? {
                Some(p) => root = p,
                None => break,
            }
        }
        Ok((
            walshadow_types::table_key(&root.schema, &root.name),
            root.oid,
        ))
    }

    async fn by_oid_cached(&mut self, oid: Oid) -> Result<Option<Arc<RelationDesc>>, ResolveError> {
        if let Some(d) = self.by_oid.get(&oid) {
            return Ok(d.clone());
        }
        let d = self.catalog.relation(oid).await?.map(Arc::new);
        self.by_oid.insert(oid, d.clone());
        Ok(d)
    }

    /// Remembers `desc`'s file as pinned table `key`'s (see
    /// `earlier_files`); a file number reused later by another relation
    /// is resolved by the catalog first.
    pub fn remember_file(&mut self, key: &str, desc: &Arc<RelationDesc>) {
        if desc.relfilenode != 0 {
            self.earlier_files.insert(
                desc.relfilenode,
                Resolved::Pinned {
                    key: key.to_owned(),
                    desc: Arc::clone(desc),
                },
            );
        }
    }

    /// What table `key` (`schema.name`) depends on at the current catalog,
    /// for judging which later catalog changes concern it.
    pub async fn interest(
        &mut self,
        feeder: &Feeder,
        key: &str,
    ) -> Result<TableInterest, ResolveError> {
        self.ready(feeder).await?;
        let Some((schema, name)) = walshadow_types::split_table_key(key) else {
            return Ok(TableInterest::default());
        };
        let deps = self.catalog.table_dependencies(&schema, &name).await?;
        Ok(if deps.relations.is_empty() {
            TableInterest::awaited(&schema, &name, deps.namespace)
        } else {
            TableInterest {
                relations: deps.relations,
                objects: deps.objects,
                awaited: Vec::new(),
            }
        })
    }

    /// The pinned table `key` (`schema.name`) as the catalog has it now,
    /// its column rules applied, or `None` if it does not exist (yet).
    pub async fn pinned_table(
        &mut self,
        feeder: &Feeder,
        key: &str,
    ) -> Result<Option<Masked>, ResolveError> {
        self.ready(feeder).await?;
        let Some((schema, name)) = walshadow_config::split_table_name(key) else {
            return Ok(None);
        };
        Ok(self
            .catalog
            .relation_by_name(&schema, &name)
            .await?
            .map(|d| self.masked(key, d)))
    }

    /// See [`ShadowCatalog::partition_leaves`].
    pub async fn partition_leaves(
        &mut self,
        feeder: &Feeder,
        oid: Oid,
    ) -> Result<Vec<(Oid, Oid)>, ResolveError> {
        self.ready(feeder).await?;
        Ok(self.catalog.partition_leaves(oid).await?)
    }

    /// The pinned tables a TRUNCATE of relations `oids` touches, as
    /// `schema.name` of their partition root, each with whether the whole
    /// table is truncated (every leaf partition, or the table itself).
    pub async fn truncated_tables(
        &mut self,
        feeder: &Feeder,
        oids: &[Oid],
    ) -> Result<Vec<(String, bool)>, ResolveError> {
        self.ready(feeder).await?;
        let mut roots: Vec<(String, Oid, Vec<Oid>)> = Vec::new();
        for &oid in oids {
            let Some(d) = self.by_oid_cached(oid).await? else {
                continue;
            };
            let (key, root_oid) = self.root_of(d).await?;
            if !self.pinned.contains(&key) {
                continue;
            }
            match roots.iter_mut().find(|(k, _, _)| *k == key) {
                Some((_, _, parts)) => parts.push(oid),
                None => roots.push((key, root_oid, vec![oid])),
            }
        }
        let mut out = Vec::new();
        for (key, root, truncated) in roots {
            let leaves = self.catalog.leaf_partitions(root).await?;
            let whole = leaves.iter().all(|l| truncated.contains(l))
                && (!leaves.is_empty() || truncated.contains(&root));
            out.push((key, whole));
        }
        Ok(out)
    }
}
