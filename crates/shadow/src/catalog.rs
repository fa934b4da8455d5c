//! `ShadowCatalog`: relation descriptors read from a catalog over SQL.
//!
//! The stream reads the shadow's: it replays the source's catalog
//! continuously, and a lookup "at LSN L" first waits until the shadow has
//! replayed L. Initial loads read the source's own, inside their snapshot
//! transaction ([`ShadowCatalog::over`]), so the descriptor is the one the
//! snapshot's rows have. Which relation file a record written before a
//! rewrite's commit belongs to is the pipeline's (`relations.rs`).

use std::path::Path;
use std::time::{Duration, Instant};

pub use walshadow_types::catalog::{AttributeDesc, RelationDesc, TypeDesc};
use walshadow_types::{Lsn, Oid};
use walshadow_wal_reader::replication::{
    ConnConfig, QueryResult, ReplicationClient, ReplicationError,
};

/// Why a lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("shadow catalog: {0}")]
    Query(#[from] ReplicationError),
    #[error("the shadow has replayed up to {replayed}, not yet {wanted}, after {waited:?}")]
    NotReplayed {
        wanted: Lsn,
        replayed: Lsn,
        waited: Duration,
    },
    #[error("shadow catalog: unexpected answer: {0}")]
    Unexpected(String),
}

/// What a table's descriptor depends on in the catalog: the objects whose
/// invalidation messages can concern it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableDependencies {
    /// The OID of the table's schema, if the schema exists.
    pub namespace: Option<Oid>,
    /// The table, its partitions, their TOAST relations and indexes, the
    /// relations of composite column types; empty if the table does not
    /// exist.
    pub relations: Vec<Oid>,
    /// The column types, what they are built from (elements, domain bases,
    /// range subtypes), and the namespaces of the relations and types.
    pub objects: Vec<Oid>,
}

/// A SQL session on the shadow.
#[derive(Debug)]
pub struct ShadowCatalog {
    client: ReplicationClient,
    /// How to connect again when the session is lost (the shadow was
    /// restarted): set by [`ShadowCatalog::reconnecting`].
    reconnect: Option<ConnConfig>,
    /// How this session was made; `None` for one lent by [`ShadowCatalog::over`].
    conn: Option<ConnConfig>,
    /// What answers must reflect at least (see [`ShadowCatalog::expect_replayed`]).
    floor: Lsn,
}

/// How long a lookup waits for a restarted shadow to take connections
/// again (it replays to consistency first).
const RECONNECT_WAIT: Duration = Duration::from_secs(300);

const REPLAY_LSN: &str = "select coalesce(pg_last_wal_replay_lsn(), '0/0')";

fn replay_answer(r: &QueryResult) -> Result<Lsn, CatalogError> {
    r.text(0, 0)
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| CatalogError::Unexpected("replay LSN".into()))
}

fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

impl ShadowCatalog {
    /// Connects to database `db` on the shadow's private socket as `user`
    /// (a role of the source: the shadow holds the source's roles).
    pub async fn connect(
        socket_dir: &Path,
        port: u16,
        user: &str,
        db: &str,
    ) -> Result<Self, CatalogError> {
        let mut cfg = ConnConfig::unix_socket(socket_dir, port, user, db);
        cfg.application_name = Some("walshadow-catalog".into());
        Ok(ShadowCatalog {
            client: ReplicationClient::connect(&cfg).await?,
            reconnect: None,
            conn: Some(cfg),
            floor: Lsn(0),
        })
    }

    /// Connects again when the session is lost and retries the query, for
    /// long-lived users that outlive a shadow restart (`run`'s streaming
    /// pipeline). Not for code on the path that restarts the shadow: it
    /// would wait for itself.
    pub fn reconnecting(mut self) -> ShadowCatalog {
        self.reconnect = self.conn.clone();
        self
    }

    /// Reads the catalog over an existing SQL session (e.g. the source's,
    /// inside a snapshot transaction: plain catalog queries see the
    /// catalog as of that snapshot).
    pub fn over(client: ReplicationClient) -> ShadowCatalog {
        ShadowCatalog {
            client,
            reconnect: None,
            conn: None,
            floor: Lsn(0),
        }
    }

    /// The session back.
    pub fn into_client(self) -> ReplicationClient {
        self.client
    }

    /// From now on, answers must reflect the catalog at `lsn` or later: the
    /// caller waited for the shadow to replay it. A restarted shadow takes
    /// connections once consistent, which can be before `lsn` (its replay
    /// restarts at its last restartpoint); a session connected again waits
    /// for replay to pass the floor before answering.
    pub fn expect_replayed(&mut self, lsn: Lsn) {
        self.floor = self.floor.max(lsn);
    }

    /// Runs `sql`; a session lost to a shadow restart (or a query cancelled
    /// by a recovery conflict) is connected again and the query retried
    /// once. Every query stands alone, so nothing else is lost with it.
    async fn query(&mut self, sql: &str) -> Result<QueryResult, CatalogError> {
        match self.client.simple_query(sql).await {
            Ok(r) => Ok(r),
            Err(e) if e.is_transient() && self.reconnect.is_some() => {
                tracing::warn!("shadow catalog session lost ({e}); connecting again");
                self.connect_again().await?;
                Ok(self.client.simple_query(sql).await?)
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn connect_again(&mut self) -> Result<(), CatalogError> {
        let Some(cfg) = &self.reconnect else {
            return Ok(());
        };
        let started = Instant::now();
        loop {
            match ReplicationClient::connect(cfg).await {
                Ok(client) => {
                    self.client = client;
                    break;
                }
                Err(e) if e.is_transient() && started.elapsed() < RECONNECT_WAIT => {
                    tracing::debug!("shadow not taking connections yet: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        loop {
            // Not `replay_lsn`: that would connect again from in here.
            let replayed = replay_answer(&self.client.simple_query(REPLAY_LSN).await?)?;
            if replayed >= self.floor {
                break;
            }
            if started.elapsed() >= RECONNECT_WAIT {
                return Err(CatalogError::NotReplayed {
                    wanted: self.floor,
                    replayed,
                    waited: started.elapsed(),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tracing::info!(
            floor = %self.floor,
            "shadow catalog session connected again after {:?}",
            started.elapsed()
        );
        Ok(())
    }

    /// `pg_last_wal_replay_lsn()`.
    pub async fn replay_lsn(&mut self) -> Result<Lsn, CatalogError> {
        replay_answer(&self.query(REPLAY_LSN).await?)
    }

    /// The redo position of the shadow's last restartpoint: where its replay
    /// would start again after a crash (`pg_control_checkpoint()`).
    pub async fn restartpoint_redo(&mut self) -> Result<Lsn, CatalogError> {
        let r = self
            .query("select redo_lsn from pg_control_checkpoint()")
            .await?;
        r.text(0, 0)
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| CatalogError::Unexpected("restartpoint redo LSN".into()))
    }

    /// Waits until the shadow has replayed `lsn`. In-process users have the
    /// feeder's `wait_for_replay` (no polling); this is for other processes.
    pub async fn wait_for_lsn(&mut self, lsn: Lsn, timeout: Duration) -> Result<Lsn, CatalogError> {
        let started = Instant::now();
        loop {
            let replayed = self.replay_lsn().await?;
            if replayed >= lsn {
                return Ok(replayed);
            }
            if started.elapsed() >= timeout {
                return Err(CatalogError::NotReplayed {
                    wanted: lsn,
                    replayed,
                    waited: started.elapsed(),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The OID of the database this session is connected to.
    pub async fn current_database_oid(&mut self) -> Result<Oid, CatalogError> {
        let r = self
            .query("select oid from pg_database where datname = current_database()")
            .await?;
        r.text(0, 0)
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| CatalogError::Unexpected("current database OID".into()))
    }

    /// The TOAST tables of the tables `keys` (`schema.name`) and of their
    /// partitions: `(toast relation OID, its relfilenumber, key)`.
    pub async fn pinned_toast_tables(
        &mut self,
        keys: &std::collections::BTreeSet<String>,
    ) -> Result<Vec<(Oid, Oid, String)>, CatalogError> {
        let named: Vec<(&String, String, String)> = keys
            .iter()
            .filter_map(|k| {
                let (schema, name) = walshadow_types::split_table_key(k)?;
                Some((k, schema, name))
            })
            .collect();
        let mut out = Vec::new();
        // A query per few hundred tables, not one each: thousands of
        // tables in scope are asked for after every refresh.
        for part in named.chunks(500) {
            let quoted = |v: Vec<&str>| {
                v.into_iter()
                    .map(quote_literal)
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let schemas = quoted(part.iter().map(|(_, s, _)| s.as_str()).collect());
            let names = quoted(part.iter().map(|(_, _, n)| n.as_str()).collect());
            let r = self
                .query(&format!(
                    // pg_partition_tree gives nothing for a table that is
                    // not partitioned: the table itself is asked for
                    // separately.
                    "select k.i, c.reltoastrelid, t.relfilenode
                       from unnest(array[{schemas}]::text[], array[{names}]::text[])
                            with ordinality as k(s, n, i)
                       cross join lateral (select to_regclass(format('%I.%I', k.s, k.n)) as r) r
                       cross join lateral (select r.r::oid as oid union all
                                           select relid::oid from pg_partition_tree(r.r)) rel
                       join pg_class c on c.oid = rel.oid
                       join pg_class t on t.oid = c.reltoastrelid
                      order by k.i",
                ))
                .await?;
            out.extend((0..r.rows.len()).filter_map(|i| {
                let index = r.text(i, 0)?.parse::<usize>().ok()?;
                let toast = r.text(i, 1)?.parse::<Oid>().ok()?;
                let file = r.text(i, 2)?.parse::<Oid>().ok()?;
                let (key, _, _) = part.get(index.checked_sub(1)?)?;
                Some((toast, file, (*key).clone()))
            }));
        }
        Ok(out)
    }

    /// Every table a pattern may take, as `(schema, name)`: ordinary and
    /// partitioned tables that are not partitions themselves (those stream
    /// through their root), not temporary or unlogged, outside the
    /// system's schemas.
    pub async fn user_tables(&mut self) -> Result<Vec<(String, String)>, CatalogError> {
        let r = self
            .query(
                "select n.nspname, c.relname from pg_catalog.pg_class c \
                   join pg_catalog.pg_namespace n on n.oid operator(pg_catalog.=) c.relnamespace \
                  where c.relkind operator(pg_catalog.=) any ('{r,p}'::pg_catalog.\"char\"[]) \
                    and not c.relispartition \
                    and c.relpersistence operator(pg_catalog.=) 'p' \
                    and n.nspname operator(pg_catalog.<>) 'information_schema' \
                    and pg_catalog.left(n.nspname, 3) operator(pg_catalog.<>) 'pg_' \
                  order by 1, 2",
            )
            .await?;
        Ok((0..r.rows.len())
            .filter_map(|i| Some((r.text(i, 0)?.to_owned(), r.text(i, 1)?.to_owned())))
            .collect())
    }

    /// The leaf partitions of partitioned table `oid` (empty for a table
    /// that is not partitioned).
    pub async fn leaf_partitions(&mut self, oid: Oid) -> Result<Vec<Oid>, CatalogError> {
        let r = self
            .query(&format!(
                // relid is a regclass: as an OID, not a name.
                "select relid::oid from pg_partition_tree({oid}) where isleaf and relid <> {oid}"
            ))
            .await?;
        Ok((0..r.rows.len())
            .filter_map(|i| r.text(i, 0)?.parse().ok())
            .collect())
    }

    /// The leaf partitions of partitioned table `oid`, each with its
    /// relation file (0 for one without: a foreign table).
    pub async fn partition_leaves(&mut self, oid: Oid) -> Result<Vec<(Oid, Oid)>, CatalogError> {
        let r = self
            .query(&format!(
                "select t.relid::oid, coalesce(pg_relation_filenode(t.relid), 0)
                   from pg_partition_tree({oid}) t where t.isleaf and t.relid <> {oid}"
            ))
            .await?;
        Ok((0..r.rows.len())
            .filter_map(|i| Some((r.text(i, 0)?.parse().ok()?, r.text(i, 1)?.parse().ok()?)))
            .collect())
    }

    /// What the descriptor of table `schema.name` depends on in the
    /// catalog (see [`TableDependencies`]).
    pub async fn table_dependencies(
        &mut self,
        schema: &str,
        name: &str,
    ) -> Result<TableDependencies, CatalogError> {
        let (s, n) = (quote_literal(schema), quote_literal(name));
        let r = self
            .query(&format!(
                "with recursive
                   root as (select c.oid from pg_class c join pg_namespace n on n.oid = c.relnamespace
                             where n.nspname = {s} and c.relname = {n}),
                   rels(oid) as (select oid from root
                                 union select i.inhrelid from pg_inherits i join rels r on i.inhparent = r.oid),
                   types(oid) as (select a.atttypid from pg_attribute a join rels r on r.oid = a.attrelid
                                   where a.attnum > 0
                                  union
                                  select v.x from types t join pg_type y on y.oid = t.oid
                                    left join pg_range g on g.rngtypid = y.oid
                                    left join pg_range m on m.rngmultitypid = y.oid
                                   cross join lateral (select y.typelem union all select y.typbasetype
                                                       union all select g.rngsubtype union all select m.rngtypid
                                                       union all select a.atttypid from pg_attribute a
                                                        where a.attrelid = y.typrelid and a.attnum > 0
                                                          and not a.attisdropped) v(x)
                                   where v.x <> 0)
                 select 'n', oid from pg_namespace where nspname = {s}
                 union all select 'r', oid from rels
                 union all select 'r', reltoastrelid from pg_class join rels using (oid) where reltoastrelid <> 0
                 union all select 'r', indexrelid from pg_index join rels on indrelid = rels.oid
                 union all select 'r', typrelid from pg_type join types using (oid) where typrelid <> 0
                 union all select 'o', relnamespace from pg_class join rels using (oid)
                 union all select 'o', oid from types
                 union all select 'o', typnamespace from pg_type join types using (oid)"
            ))
            .await?;
        let mut deps = TableDependencies::default();
        for i in 0..r.rows.len() {
            let Some(oid) = r.text(i, 1).and_then(|t| t.parse::<Oid>().ok()) else {
                return Err(CatalogError::Unexpected("a dependency's OID".into()));
            };
            match r.text(i, 0) {
                Some("n") => deps.namespace = Some(oid),
                Some("r") => deps.relations.push(oid),
                _ => deps.objects.push(oid),
            }
        }
        deps.relations.sort_unstable();
        deps.relations.dedup();
        deps.objects.sort_unstable();
        deps.objects.dedup();
        Ok(deps)
    }

    /// The owner of relation `oid`, unless it is this session's role or a
    /// superuser: `Some(owner)` names a role walshadow does not trust.
    pub async fn foreign_owner(&mut self, oid: Oid) -> Result<Option<String>, CatalogError> {
        let r = self
            .query(&format!(
                "select pg_get_userbyid(c.relowner), r.rolsuper, c.relowner = (select oid from pg_roles where rolname = current_user)
                   from pg_class c join pg_roles r on r.oid = c.relowner where c.oid = {oid}"
            ))
            .await?;
        Ok(match (r.text(0, 0), r.text(0, 1), r.text(0, 2)) {
            (Some(owner), Some("f"), Some("f")) => Some(owner.to_owned()),
            _ => None,
        })
    }

    /// The relation `schema.name`, if it exists.
    pub async fn relation_by_name(
        &mut self,
        schema: &str,
        name: &str,
    ) -> Result<Option<RelationDesc>, CatalogError> {
        let r = self
            .query(&format!(
                "select c.oid from pg_class c join pg_namespace n on n.oid = c.relnamespace
                  where n.nspname = {} and c.relname = {}",
                quote_literal(schema),
                quote_literal(name)
            ))
            .await?;
        match r.text(0, 0).and_then(|t| t.parse::<Oid>().ok()) {
            Some(oid) => self.relation(oid).await,
            None => Ok(None),
        }
    }

    /// The relation stored in file `relfilenode` of tablespace `spc` (0 for
    /// the database's default), mapped catalogs included.
    pub async fn relation_by_file(
        &mut self,
        spc: Oid,
        relfilenode: Oid,
    ) -> Result<Option<RelationDesc>, CatalogError> {
        let r = self
            .query(&format!(
                "select pg_filenode_relation({spc}, {relfilenode})::oid"
            ))
            .await?;
        match r.text(0, 0).and_then(|t| t.parse::<Oid>().ok()) {
            Some(oid) => self.relation(oid).await,
            None => Ok(None),
        }
    }

    /// The descriptor of relation `oid`.
    pub async fn relation(&mut self, oid: Oid) -> Result<Option<RelationDesc>, CatalogError> {
        let r = self
            .query(&format!(
                "select c.oid, n.nspname, c.relname, c.relkind, coalesce(pg_relation_filenode(c.oid), 0),
                        c.relpersistence, c.relreplident, c.reltoastrelid,
                        (select inhparent from pg_inherits i where i.inhrelid = c.oid and c.relispartition)
                   from pg_class c join pg_namespace n on n.oid = c.relnamespace where c.oid = {oid}"
            ))
            .await?;
        if r.rows.is_empty() {
            return Ok(None);
        }
        let t = |c| r.text(0, c).unwrap_or_default().to_owned();
        let num = |c| r.text(0, c).and_then(|s| s.parse::<Oid>().ok());
        let replica_identity_kind = t(6);
        // A partitioned table stores no rows, so an added column's default
        // for the rows before it lives in its leaves: the same value in
        // each leaf the ADD COLUMN reached (the default is evaluated once),
        // which is the only time it is read (an added column's DEFAULT).
        let attrs = self
            .query(&format!(
                "select a.attnum, a.attname, a.atttypid, a.atttypmod, a.attlen, a.attbyval, a.attalign,
                        a.attstorage, a.attnotnull, a.attisdropped,
                        case when a.atthasmissing then a.attmissingval::text
                             when c.relkind = 'p' then
                               (select l.attmissingval::text from pg_partition_tree(c.oid) t
                                  join pg_attribute l on l.attrelid = t.relid and l.attname = a.attname
                                 where t.isleaf and l.atthasmissing order by t.relid limit 1)
                        end, a.attndims
                   from pg_attribute a join pg_class c on c.oid = a.attrelid
                  where a.attrelid = {oid} and a.attnum > 0 order by a.attnum"
            ))
            .await?;
        let mut attributes = Vec::new();
        for row in 0..attrs.rows.len() {
            let at = |c| attrs.text(row, c).unwrap_or_default();
            attributes.push(AttributeDesc {
                attnum: at(0).parse().unwrap_or(0),
                name: at(1).to_owned(),
                type_oid: at(2).parse().unwrap_or(0),
                typmod: at(3).parse().unwrap_or(-1),
                len: at(4).parse().unwrap_or(0),
                by_value: at(5) == "t",
                align: at(6).to_owned(),
                storage: at(7).to_owned(),
                not_null: at(8) == "t",
                dropped: at(9) == "t",
                missing_value: attrs.text(row, 10).map(str::to_owned),
                ndims: at(11).parse().unwrap_or(0),
            });
        }
        let key_sql = match replica_identity_kind.as_str() {
            "f" => None,
            "n" => Some(String::new()),
            "i" => Some(format!(
                "select indexrelid from pg_index where indrelid = {oid} and indisreplident"
            )),
            _ => Some(format!(
                "select indexrelid from pg_index where indrelid = {oid} and indisprimary"
            )),
        };
        let replica_identity = match key_sql {
            None => attributes
                .iter()
                .filter(|a| !a.dropped)
                .map(|a| a.name.clone())
                .collect(),
            Some(sql) if sql.is_empty() => Vec::new(),
            Some(sql) => {
                let r = self
                    .query(&format!(
                        "select a.attname from pg_index i
                           join lateral unnest(i.indkey::int2[]) with ordinality k(attnum, n) on true
                           join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
                          where i.indexrelid = ({sql}) order by k.n"
                    ))
                    .await?;
                (0..r.rows.len())
                    .filter_map(|i| r.text(i, 0).map(str::to_owned))
                    .collect()
            }
        };
        let mut wanted: Vec<Oid> = attributes
            .iter()
            .filter(|a| !a.dropped)
            .map(|a| a.type_oid)
            .collect();
        let types = self.types_closure(&mut wanted).await?;
        Ok(Some(RelationDesc {
            types,
            oid: num(0).unwrap_or(oid),
            schema: t(1),
            name: t(2),
            relkind: t(3),
            relfilenode: num(4).unwrap_or(0),
            persistence: t(5),
            replica_identity,
            replica_identity_kind,
            toast_relid: num(7).filter(|o| *o != 0),
            partition_parent: num(8),
            attributes,
        }))
    }
}

impl ShadowCatalog {
    /// The type `oid`.
    pub async fn type_desc(&mut self, oid: Oid) -> Result<Option<TypeDesc>, CatalogError> {
        let r = self
            .query(&format!(
                "select t.oid, n.nspname, t.typname, t.typtype, t.typcategory, t.typlen, t.typbyval,
                        t.typalign, t.typstorage,
                        case when t.typelem <> 0 and t.typsubscript = 'array_subscript_handler'::regproc
                             then t.typelem end,
                        nullif(t.typbasetype, 0), case when t.typtype = 'd' then t.typtypmod end,
                        nullif(t.typrelid, 0),
                        coalesce((select rngsubtype from pg_range where rngtypid = t.oid),
                                 (select rngtypid from pg_range where rngmultitypid = t.oid)),
                        (select string_agg(e.enumlabel, E'\\n' order by e.enumsortorder)
                           from pg_enum e where e.enumtypid = t.oid),
                        (select string_agg(e.oid::text, ',' order by e.enumsortorder)
                           from pg_enum e where e.enumtypid = t.oid),
                        (select x.extname from pg_depend d join pg_extension x on x.oid = d.refobjid
                          where d.classid = 'pg_type'::regclass and d.objid = t.oid
                            and d.refclassid = 'pg_extension'::regclass and d.deptype = 'e'),
                        (select json_agg(json_build_array(a.attname, a.atttypid::int8, a.atttypmod, a.attlen,
                                                          a.attalign, a.attisdropped) order by a.attnum)
                           from pg_attribute a where t.typtype = 'c' and a.attrelid = t.typrelid and a.attnum > 0)
                   from pg_type t join pg_namespace n on n.oid = t.typnamespace where t.oid = {oid}"
            ))
            .await?;
        if r.rows.is_empty() {
            return Ok(None);
        }
        let t = |c| r.text(0, c).unwrap_or_default().to_owned();
        let num = |c| r.text(0, c).and_then(|s| s.parse::<Oid>().ok());
        Ok(Some(TypeDesc {
            oid: num(0).unwrap_or(oid),
            schema: t(1),
            name: t(2),
            typtype: t(3),
            category: t(4),
            len: t(5).parse().unwrap_or(0),
            by_value: t(6) == "t",
            align: t(7),
            storage: t(8),
            element: num(9),
            base_type: num(10),
            base_typmod: r.text(0, 11).and_then(|s| s.parse().ok()),
            composite_relid: num(12),
            range_subtype: num(13),
            enum_labels: r
                .text(0, 14)
                .map(|s| s.split('\n').map(str::to_owned).collect())
                .unwrap_or_default(),
            enum_oids: r
                .text(0, 15)
                .map(|s| s.split(',').filter_map(|o| o.parse().ok()).collect())
                .unwrap_or_default(),
            extension: r.text(0, 16).map(str::to_owned),
            fields: match r.text(0, 17) {
                Some(json) => fields(json)?,
                None => Vec::new(),
            },
        }))
    }

    /// The types in `wanted` and everything they are built from, sorted by
    /// OID.
    async fn types_closure(
        &mut self,
        wanted: &mut Vec<Oid>,
    ) -> Result<Vec<TypeDesc>, CatalogError> {
        let mut seen = std::collections::BTreeMap::new();
        while let Some(oid) = wanted.pop() {
            if seen.contains_key(&oid) {
                continue;
            }
            let Some(t) = self.type_desc(oid).await? else {
                continue;
            };
            wanted.extend(t.element);
            wanted.extend(t.base_type);
            wanted.extend(t.range_subtype);
            if let Some(rel) = t.composite_relid {
                let r = self
                    .query(&format!(
                        "select atttypid from pg_attribute where attrelid = {rel} and attnum > 0 and not attisdropped"
                    ))
                    .await?;
                wanted.extend((0..r.rows.len()).filter_map(|i| r.text(i, 0)?.parse::<Oid>().ok()));
            }
            seen.insert(oid, t);
        }
        Ok(seen.into_values().collect())
    }
}

/// A composite's fields from the type query's `json_agg` of
/// `[attname, atttypid, atttypmod, attlen, attalign, attisdropped]`.
fn fields(json: &str) -> Result<Vec<walshadow_types::catalog::FieldDesc>, CatalogError> {
    type Row = (String, Oid, i32, i16, String, bool);
    let rows: Vec<Row> = serde_json::from_str(json)
        .map_err(|e| CatalogError::Unexpected(format!("a composite type's fields: {e}")))?;
    Ok(rows
        .into_iter()
        .map(
            |(name, type_oid, typmod, len, align, dropped)| walshadow_types::catalog::FieldDesc {
                name,
                type_oid,
                typmod,
                len,
                align,
                dropped,
            },
        )
        .collect())
}
