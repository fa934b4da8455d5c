//! The ClickHouse side of each table: created and altered to follow the
//! catalog, stopped alone on a definite error, truncated.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use walshadow_changes::decode::CommitEvent;
use walshadow_emitter::{DestTable, RowBinaryEncoder, RowMeta, SchemaDiff, TableBatch};
use walshadow_rows::{RowDecoder, Value};
use walshadow_types::catalog::RelationDesc;
use walshadow_types::{Lsn, Oid};

use super::{StreamError, Streamer};
use crate::progress::{Stopped, TableProgress};

/// From this many tables seen for the first time in one refresh, their
/// ClickHouse columns are read in one query.
const PREFETCH_COLUMNS_FROM: usize = 8;

impl Streamer {
    /// The `Distributed` table beside `dest` (`[clickhouse]
    /// distributed_suffix`), made again once `dest` was made or changed,
    /// so it has `dest`'s columns. A refusal is logged, not a stop: the
    /// rows are in `dest` whatever reads them.
    pub(super) async fn refresh_distributed(
        &mut self,
        key: &str,
        dest: &str,
    ) -> Result<(), StreamError> {
        let Some(suffix) = self.settings.clickhouse.distributed_suffix.clone() else {
            return Ok(());
        };
        // A resync's table gets none: its own does, after the swap.
        if dest.ends_with(walshadow_types::RESYNC_SUFFIX) {
            return Ok(());
        }
        let name = format!("{dest}{suffix}");
        let Some(sql) = walshadow_emitter::distributed_table_sql(
            self.database(),
            dest,
            &name,
            &self.destinations.topology,
        ) else {
            return Ok(());
        };
        // Never over a table of another kind of the same name.
        let engine = self
            .destinations
            .client
            .query(&format!(
                "SELECT engine FROM system.tables WHERE database = {} AND name = {}",
                walshadow_emitter::quote_string(self.database()),
                walshadow_emitter::quote_string(&name)
            ))
            .await;
        let refused = match engine {
            // Tables that hold no rows of their own may go (a Merge table
            // too: the test engine stands in for Distributed with one).
            Ok(e) if !matches!(e.trim(), "" | "Distributed" | "Merge") => Some(format!(
                "{name} exists and is a {} table, not walshadow's Distributed table: rename it or change distributed_suffix",
                e.trim()
            )),
            Ok(_) => {
                tracing::info!(table = %key, "ClickHouse: {sql}");
                // Once: a refusal (an unknown cluster, a missing grant)
                // must not hold the stream, whose rows go to `dest`.
                self.destinations
                    .client
                    .execute(&sql)
                    .await
                    .err()
                    .map(|e| e.to_string())
            }
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = refused {
            tracing::warn!(table = %key, distributed = %name, "the Distributed table was not made (reads through it miss this table's rows or new columns until it is; the rows are in {dest}; it is made again at the table's next change or at the next start): {why}");
        }
        Ok(())
    }

    /// Brings each pinned table's ClickHouse table in line with the catalog
    /// now: creates it, applies added/dropped/renamed columns, or stops the
    /// table on a change ClickHouse cannot follow.
    pub(super) async fn refresh_tables(
        &mut self,
        lsn: Lsn,
        only: Option<&BTreeSet<String>>,
    ) -> Result<(), StreamError> {
        let keys: Vec<String> = self
            .scope
            .pinned
            .iter()
            .filter(|k| only.is_none_or(|o| o.contains(*k)))
            .cloned()
            .collect();
        // Changes ClickHouse cannot follow in place that a load of the
        // table at this commit does: (key, reason code, why).
        let mut reloads: Vec<(String, &'static str, String)> = Vec::new();
        let mut loads = false;
        // Many tables seen for the first time (a start): ClickHouse's
        // columns of them all in one query, not one each.
        let first_sights: Vec<String> = keys
            .iter()
            .filter(|k| self.tables.get(*k).is_none_or(|t| t.dest.is_none()))
            .map(|k| self.dest_of(k))
            .collect();
        let mut found_columns = if first_sights.len() >= PREFETCH_COLUMNS_FROM {
            let db = self.database().to_owned();
            let tables = std::sync::Arc::new(first_sights);
            Some(
                self.query_clickhouse("reading the tables' columns", move |ch| {
                    let (db, tables) = (db.clone(), tables.clone());
                    async move { ch.tables_column_types(&db, &tables).await }
                })
                .await?,
            )
        } else {
            None
        };
        let mut let_go = false;
        for key in keys {
            if self.is_stopped(&key) {
                continue;
            }
            let feeder = &self.shadow.feeder;
            let Some(relations) = self.catalog.relations.as_mut() else {
                return Ok(());
            };
            let Some(masked) = relations.pinned_table(feeder, &key).await? else {
                // A pattern took the table it matched, which is gone
                // (dropped, or renamed away): let go, and taken again
                // if a table of the name is made.
                let of_file = self.settings.by_pattern.get(&key).cloned();
                let of_row = self
                    .progress
                    .tables
                    .get(&key)
                    .and_then(|t| t.config_pattern.clone().filter(|_| t.opted_in));
                if let Some(pattern) = of_file.clone().or(of_row) {
                    tracing::info!(table = %key, pattern = %pattern, lsn = %lsn, "the table a pattern took was dropped or renamed at the source: no longer streamed (its ClickHouse table stays)");
                    let why = format!(
                        "dropped or renamed at the source (the pattern {pattern} had taken it)"
                    );
                    self.let_go(&key, lsn, &why).await?;
                    if of_file.is_some() {
                        self.settings.by_pattern.remove(&key);
                        self.settings.tables.remove(&key);
                    }
                    let_go = true;
                    continue;
                }
                // Streams once created; until then status says so.
                self.scope.missing.insert(key);
                continue;
            };
            self.scope.missing.remove(&key);
            let walshadow_emitter::Masked {
                desc,
                left_out,
                unknown,
                refused,
                dest: rules,
            } = masked;
            if let Some(why) = refused {
                self.stop_table(&key, lsn, crate::stop::StopKind::ColumnRules, why);
                continue;
            }
            let desc = Arc::new(desc);
            let Some(relations) = self.catalog.relations.as_mut() else {
                return Ok(());
            };
            relations.remember_file(&key, &desc);
            if let Err(e) = RowDecoder::new(&desc) {
                self.stop_table(
                    &key,
                    lsn,
                    crate::stop::StopKind::UnsupportedType,
                    e.to_string(),
                );
                continue;
            }
            let old_schema = self
                .progress
                .tables
                .get(&key)
                .and_then(|t| t.schema.clone());
            let new = match DestTable::with_rules(&desc, &self.settings.meta, &rules) {
                Ok(d) => d,
                // Created without a key, given one by a later transaction
                // (a table made, then its primary key or replica identity
                // set): until then nothing is written; its rows are loaded
                // when it has one.
                Err(e @ walshadow_emitter::SchemaError::NoKey { .. }) if old_schema.is_none() => {
                    if let Some(t) = self.progress.tables.get_mut(&key)
                        && t.waiting_for_key.is_none()
                    {
                        tracing::warn!(table = %key, lsn = %lsn, "{e}; the table waits: nothing of it is streamed until it has a key, then its rows are loaded (copy)");
                        t.waiting_for_key = Some(lsn);
                        self.progress_dirty = true;
                    }
                    continue;
                }
                Err(
                    e @ (walshadow_emitter::SchemaError::KeyPolicy { .. }
                    | walshadow_emitter::SchemaError::ColumnRule { .. }),
                ) => {
                    self.stop_table(&key, lsn, crate::stop::StopKind::ColumnRules, e.to_string());
                    continue;
                }
                Err(e) => {
                    self.stop_table(&key, lsn, crate::stop::StopKind::NoKey, e.to_string());
                    continue;
                }
            };
            // The layout rows go into now: a change of the value policies
            // alone (a config-table row updated) changes it with the
            // descriptor as it was.
            let current = self.tables.get(&key).and_then(|t| t.dest.clone());
            // Before this process made it, the layout is the one the rules
            // recorded with the schema made (a rule changed in the file
            // since shows as a change).
            let recorded = self
                .progress
                .tables
                .get(&key)
                .and_then(|t| t.layout_rules.as_ref())
                .map(|r| r.rules().dest());
            let dest_name = self.dest_of(&key);
            let statements = match &old_schema {
                None => {
                    let mut settings = self.settings.table_settings(&key);
                    settings.topology = self.destinations.topology.clone();
                    let checked = if settings.order_by.is_empty() {
                        Ok(())
                    } else {
                        new.check_order_by(&settings.order_by)
                    };
                    let checked = checked.and_then(|()| {
                        settings
                            .partition_by
                            .as_deref()
                            .map_or(Ok(()), |p| new.check_partition_by(p))
                    });
                    if let Err(why) = checked {
                        self.stop_table(&key, lsn, crate::stop::StopKind::ColumnRules, why);
                        continue;
                    }
                    let sql = new.create_table_sql(self.database(), &dest_name, &settings);
                    tracing::info!(table = %key, destination = %dest_name, "creating the ClickHouse table");
                    vec![sql]
                }
                Some(old_desc)
                    if *old_desc == *desc
                        && match &current {
                            Some(c) => c.columns == new.columns,
                            None => recorded.as_ref().is_none_or(|r| *r == rules),
                        } =>
                {
                    Vec::new()
                }
                Some(old_desc) => {
                    let old = match current.map_or_else(
                        || {
                            DestTable::with_rules(
                                old_desc,
                                &self.settings.meta,
                                recorded.as_ref().unwrap_or(&rules),
                            )
                        },
                        Ok,
                    ) {
                        Ok(d) => d,
                        Err(e) => {
                            self.stop_table(
                                &key,
                                lsn,
                                crate::stop::StopKind::SchemaChange,
                                format!("the schema walshadow recorded for the table cannot be mapped any more: {e}"),
                            );
                            continue;
                        }
                    };
                    let diff = SchemaDiff::between(&old, &new);
                    // A composite type's fields changed (ALTER TYPE … ADD
                    // or DROP ATTRIBUTE): the text of every value of it
                    // changes, rows already in ClickHouse included.
                    let recomposed = recomposed_types(old_desc, &desc);
                    if !recomposed.is_empty() && diff.is_ok() {
                        reloads.push((
                            key.clone(),
                            "type_changed",
                            format!(
                                "composite type(s) {} that {key} holds gained or lost fields, which changes the text of every value",
                                recomposed.join(", ")
                            ),
                        ));
                        continue;
                    }
                    // A column type change. With a rewrite of the table
                    // (a new file) every row is inserted again into the
                    // new file, its new values (USING's included) with
                    // it, and streamed like any insert: the DDL follows.
                    // Without one the stored bytes are as they were, but
                    // the text of a value may not be (cidr to inet): only
                    // changes known to keep it follow; the rest reload.
                    // A partitioned table's leaves are rewritten unseen
                    // here (its own relfilenode is 0): such a change
                    // reloads it, which is exact either way.
                    let rewritten = old_desc.relfilenode != desc.relfilenode;
                    let relabeled = if rewritten {
                        Vec::new()
                    } else {
                        relabeled_columns(old_desc, &desc, &new)
                    };
                    if !relabeled.is_empty() && diff.is_ok() {
                        reloads.push((
                            key.clone(),
                            "type_changed",
                            format!(
                                "column(s) {} of {key} changed type without a rewrite, which can change the text of the values already written",
                                relabeled.join(", ")
                            ),
                        ));
                        continue;
                    }
                    // A column leaving the `null` policy would turn the
                    // NULLs it wrote into its type's default.
                    if let Ok(d) = &diff {
                        let left_null = d.changes.iter().find_map(|c| match c {
                            // By attnum: a rename in the same change gave
                            // the column its new name.
                            walshadow_emitter::SchemaChange::MakeNotNull { name, .. }
                                if new
                                    .column(name)
                                    .and_then(|n| old.columns.iter().find(|o| o.attnum == n.attnum))
                                    .is_some_and(|c| {
                                        c.out_of_range == walshadow_emitter::ValuePolicy::Null
                                    }) =>
                            {
                                Some(name.clone())
                            }
                            _ => None,
                        });
                        if let Some(column) = left_null {
                            self.stop_table(
                                &key,
                                lsn,
                                crate::stop::StopKind::SchemaChange,
                                format!("column {column:?} of {key} no longer has out_of_range = \"null\": the values it wrote as NULL cannot be told from the source's NULLs, so the table must be loaded again"),
                            );
                            continue;
                        }
                    }
                    let statements = diff.and_then(|d| {
                        let decoder = RowDecoder::new(&desc).ok();
                        d.ddl(
                            self.database(),
                            &dest_name,
                            self.destinations.topology.on_cluster(),
                            |col| decoder.as_ref()?.missing_value(col.attnum),
                        )
                    });
                    match statements {
                        Ok(s) => s,
                        // A REPLICA IDENTITY FULL table is keyed by every
                        // column in ClickHouse: a column added or dropped
                        // changes its sorting key.
                        Err(walshadow_emitter::SchemaError::KeyChange { reason, .. })
                            if old_desc.replica_identity_kind == "f"
                                && desc.replica_identity_kind == "f" =>
                        {
                            reloads.push((
                                key.clone(),
                                "full_identity_columns",
                                format!("a column of REPLICA IDENTITY FULL table {key} was added, dropped or renamed ({reason}), and ClickHouse keys such a table by every column"),
                            ));
                            continue;
                        }
                        Err(e) => {
                            self.stop_table(
                                &key,
                                lsn,
                                crate::stop::StopKind::SchemaChange,
                                e.to_string(),
                            );
                            continue;
                        }
                    }
                }
            };
            if let Some(old) = &old_schema
                && old.oid != desc.oid
            {
                // Dropped and created again under the name: the old
                // relation's rows are gone with it (no delete records say
                // so).
                self.flush_table(&key).await?;
                let sql = format!(
                    "TRUNCATE TABLE {}.{}{}",
                    walshadow_emitter::quote_ident(self.database()),
                    walshadow_emitter::quote_ident(&dest_name),
                    self.destinations.topology.on_cluster()
                );
                tracing::info!(table = %key, lsn = %lsn, old_oid = old.oid, new_oid = desc.oid, "the table was dropped and created again: its ClickHouse rows are removed");
                let _guard = self.destinations.locks.lock(&dest_name).await;
                self.retry_clickhouse("truncating a re-created table", move |ch| {
                    let sql = sql.clone();
                    async move { ch.execute(&sql).await }
                })
                .await?;
            }
            let changed_now = !statements.is_empty();
            if changed_now {
                // Rows encoded for the old layout go first.
                self.flush_table(&key).await?;
                let mut settings = new.query_settings();
                if self.destinations.topology != walshadow_emitter::Topology::Server {
                    // Every replica has the change before the next insert
                    // or the Distributed table copies its columns.
                    settings.push(("alter_sync".into(), "2".into()));
                }
                let mut refused = None;
                let guard = self.destinations.locks.lock(&dest_name).await;
                for sql in &statements {
                    tracing::info!(table = %key, "ClickHouse: {sql}");
                    let settings = settings.clone();
                    let sql = sql.clone();
                    let done = self
                        .retry_clickhouse("changing a table", move |ch| {
                            let sql = sql.clone();
                            let settings = settings.clone();
                            async move { ch.execute_with_settings(&sql, &settings).await }
                        })
                        .await;
                    match done {
                        Ok(()) => {}
                        // Transient errors were retried; a refusal is this
                        // table's, not the stream's.
                        Err(StreamError::ClickHouse(e)) => {
                            refused = Some(e);
                            break;
                        }
                        Err(e) => return Err(e),
                    }
                }
                drop(guard);
                if let Some(e) = refused {
                    self.stop_table(
                        &key,
                        lsn,
                        crate::stop::StopKind::DdlRefused,
                        format!("ClickHouse refused the schema change: {e}"),
                    );
                    continue;
                }
                self.refresh_distributed(&key, &dest_name).await?;
            }
            let first_sight = self.tables.get(&key).is_none_or(|t| t.dest.is_none());
            if first_sight {
                // Made by this process's mapping, or by an earlier one
                // (or by hand, or already there for CREATE … IF NOT
                // EXISTS): rows go only into the layout they are encoded
                // for.
                let found = match found_columns.as_mut() {
                    // Not there before: made just now, as `new` says.
                    Some(known) if old_schema.is_none() && !known.contains_key(&dest_name) => None,
                    // Read before this refresh, and changed by none of it.
                    Some(known) if !changed_now => {
                        Some(known.remove(&dest_name).unwrap_or_default())
                    }
                    _ => {
                        let (db, table) = (self.database().to_owned(), dest_name.clone());
                        Some(
                            self.query_clickhouse("reading a table's columns", move |ch| {
                                let (db, table) = (db.clone(), table.clone());
                                async move { ch.column_types(&db, &table).await }
                            })
                            .await?,
                        )
                    }
                };
                if let Some(diff) = found.and_then(|found| new.layout_mismatch(&found)) {
                    self.stop_table(
                        &key,
                        lsn,
                        crate::stop::StopKind::SchemaChange,
                        format!(
                            "ClickHouse table {}.{dest_name} is not laid out as walshadow writes the table's rows ({diff}); rows sent to it would be misread",
                            self.database()
                        ),
                    );
                    continue;
                }
                if !changed_now {
                    // At each start too: a suffix set since, or a table
                    // ClickHouse refused the last time.
                    self.refresh_distributed(&key, &dest_name).await?;
                }
            }
            if desc.relkind == "p"
                && let Some(why) = self.partitions_changed(&key, &desc).await?
            {
                reloads.push((key.clone(), "partitions_changed", why));
                continue;
            }
            if let Some(t) = self.progress.tables.get_mut(&key) {
                t.schema = Some((*desc).clone());
                t.layout_rules = Some(crate::scope::RowColumnRules::from_dest(&rules));
                note_left_out(t, &key, lsn, &left_out, &unknown);
                if let Some(since) = t.waiting_for_key.take() {
                    tracing::info!(table = %key, lsn = %lsn, since = %since, "the table has a key now: its rows are loaded (copy) and it streams from here");
                    t.loaded_at = Some(lsn);
                    self.backfills.request(&key, "copy", lsn)?;
                    loads = true;
                }
            }
            self.progress_dirty = true;
            let unchanged = self
                .tables
                .get(&key)
                .is_some_and(|t| t.dest.as_ref() == Some(&new) && t.batch.is_some());
            if unchanged {
                // Its batch holds rows not in ClickHouse yet: kept as it is
                // (a refresh for another table's sake must not drop them).
                if let Some(t) = self.tables.get_mut(&key) {
                    t.decoders.clear();
                }
                continue;
            }
            // Rows encoded for the previous layout go first.
            self.flush_table(&key).await?;
            if let Some(t) = self.tables.get_mut(&key) {
                t.dest = Some(new.clone());
                t.decoders.clear();
                let encoder = RowBinaryEncoder::new(&new);
                t.batch = Some(TableBatch::new(
                    dest_name,
                    encoder,
                    self.settings.batch.clone(),
                ));
            }
        }
        if let_go {
            self.scope_changed();
        }
        if loads {
            self.start_loads();
        }
        if !reloads.is_empty() {
            self.reload(lsn, reloads).await?;
        }
        Ok(())
    }

    /// Whether the changes of table `key` in the commit ending at `end` are
    /// in the rows a load of the whole table at its `S` (≥ `end`) wrote.
    pub(super) fn covered_by_load(&self, key: &str, end: Lsn) -> bool {
        self.progress
            .tables
            .get(key)
            .and_then(|t| t.loaded_at)
            .is_some_and(|s| end <= s)
    }

    /// Whether table `key` waits for a key (see `refresh_tables`): its
    /// changes are not streamed yet.
    pub(super) fn waits_for_key(&self, key: &str) -> bool {
        self.progress
            .tables
            .get(key)
            .is_some_and(|t| t.waiting_for_key.is_some())
    }

    /// Records the leaf partitions of partitioned table `key` and says
    /// why its rows changed without row changes in the WAL, if they did: a
    /// partition left (DETACH, DROP: its rows are no longer the table's),
    /// or one joined on a file older than the transaction that made it a
    /// partition (ATTACH of a table that may hold rows). One on a file its
    /// own transaction made (`CREATE TABLE … PARTITION OF`, a table created
    /// or truncated and filled in the attaching transaction) holds only
    /// rows of that transaction, which the stream delivers as the table's.
    async fn partitions_changed(
        &mut self,
        key: &str,
        desc: &RelationDesc,
    ) -> Result<Option<String>, StreamError> {
        let feeder = &self.shadow.feeder;
        let Some(relations) = self.catalog.relations.as_mut() else {
            return Ok(None);
        };
        let leaves = relations.partition_leaves(feeder, desc.oid).await?;
        let now: BTreeSet<Oid> = leaves.iter().map(|(oid, _)| *oid).collect();
        let made_here = |file: Oid| {
            file != 0
                && self
                    .catalog
                    .committing
                    .iter()
                    .filter_map(|x| self.catalog.created_files.get(x))
                    .any(|files| files.contains(&file))
        };
        let made: BTreeSet<Oid> = leaves
            .iter()
            .filter(|(_, file)| made_here(*file))
            .map(|(oid, _)| *oid)
            .collect();
        let Some(t) = self.progress.tables.get_mut(key) else {
            return Ok(None);
        };
        let Some(before) = t.leaves.clone() else {
            t.leaves = Some(now);
            self.progress_dirty = true;
            return Ok(None);
        };
        if before == now {
            return Ok(None);
        }
        let left: Vec<Oid> = before.difference(&now).copied().collect();
        let joined: Vec<Oid> = now
            .iter()
            .filter(|oid| !before.contains(oid) && !made.contains(oid))
            .copied()
            .collect();
        if left.is_empty() && joined.is_empty() {
            if let Some(t) = self.progress.tables.get_mut(key) {
                t.leaves = Some(now);
            }
            self.progress_dirty = true;
            return Ok(None);
        }
        // Recorded with the reload (`start_resync` makes both durable at
        // once): a crash before it finds the change again.
        self.catalog.new_leaves.insert(key.to_owned(), now);
        Ok(Some(format!(
            "partitions of {key} changed without row changes in the WAL (relations {left:?} left it, {joined:?} were attached with rows they may hold)"
        )))
    }

    pub(super) fn is_stopped(&self, key: &str) -> bool {
        self.progress
            .tables
            .get(key)
            .is_some_and(|t| t.stopped.is_some())
    }

    pub(super) fn stop_table(
        &mut self,
        key: &str,
        lsn: Lsn,
        kind: crate::stop::StopKind,
        reason: String,
    ) {
        let remedy = kind.remedy(key);
        tracing::error!(table = %key, lsn = %lsn, code = kind.code(), "table stopped: {reason}; remedy: {remedy}");
        if let Some(t) = self.progress.tables.get_mut(key) {
            t.stopped = Some(Stopped {
                lsn,
                code: kind.code().to_owned(),
                reason,
                remedy,
            });
        }
        if let Some(t) = self.tables.get_mut(key) {
            t.batch = None;
            t.decoders.clear();
        }
        self.toast.clear_waits(key);
        self.metrics.set_table_stopped(key, Some(kind.code()));
        self.progress_dirty = true;
    }

    /// Adds one row to the table's batch, starting a flush first when it
    /// is full (the flush goes on while decoding does; progress moves only
    /// to the last transaction boundary, before this row's commit).
    pub(super) async fn push_row(
        &mut self,
        key: &str,
        lsn: Lsn,
        row: &[Value],
        meta: &RowMeta,
    ) -> Result<(), StreamError> {
        let full = self
            .tables
            .get(key)
            .and_then(|t| t.batch.as_ref())
            .is_some_and(TableBatch::is_full);
        if full {
            self.begin_flush().await?;
        }
        let Some(batch) = self.tables.get_mut(key).and_then(|t| t.batch.as_mut()) else {
            return Ok(());
        };
        if batch.is_empty() {
            self.held.insert(key.to_owned());
        }
        if let Err(e) = batch.push(row, meta) {
            self.stop_table(
                key,
                lsn,
                crate::stop::StopKind::ValueOutOfRange,
                e.to_string(),
            );
        }
        Ok(())
    }

    pub(super) async fn apply_truncate(
        &mut self,
        c: &CommitEvent,
        oids: &[Oid],
    ) -> Result<(), StreamError> {
        let feeder = &self.shadow.feeder;
        let tables = match self.catalog.relations.as_mut() {
            Some(r) => r.truncated_tables(feeder, oids).await?,
            None => return Ok(()),
        };
        for (key, whole) in tables {
            self.refresh_pending(Some(&key)).await?;
            self.changed(&key, c.end);
            if self.is_stopped(&key)
                || self.waits_for_key(&key)
                || self.covered_by_load(&key, c.end)
            {
                continue;
            }
            if !whole {
                // The ClickHouse table cannot tell which rows came from
                // which partition: the table as it is after the TRUNCATE
                // is loaded instead.
                self.reload(
                    c.end,
                    vec![(
                        key.clone(),
                        "partial_truncate",
                        format!("TRUNCATE of some partitions of {key} (not all of them), whose rows ClickHouse cannot single out"),
                    )],
                )
                .await?;
                continue;
            }
            self.toast.clear_waits(&key);
            // Rows before the TRUNCATE land first, then all of them go; a
            // crash between replays this transaction (its commit is past
            // `applied`), which truncates again.
            self.flush_table(&key).await?;
            let sql = format!(
                "TRUNCATE TABLE {}.{}{}",
                walshadow_emitter::quote_ident(self.database()),
                walshadow_emitter::quote_ident(&self.dest_of(&key)),
                self.destinations.topology.on_cluster()
            );
            tracing::info!(table = %key, lsn = %c.lsn, "TRUNCATE");
            let _guard = self.destinations.locks.lock(&self.dest_of(&key)).await;
            self.retry_clickhouse("truncating a table", move |ch| {
                let sql = sql.clone();
                async move { ch.execute(&sql).await }
            })
            .await?;
            if self.backfills.has_staging(&key) {
                // A base_backup load's rows predate this TRUNCATE: its
                // staging table (loading, or holding the swapped-out
                // storage) is emptied too. One walked after it is caught
                // by the pass's file check.
                let sql = format!(
                    "TRUNCATE TABLE IF EXISTS {}.{}{}",
                    walshadow_emitter::quote_ident(self.database()),
                    walshadow_emitter::quote_ident(&walshadow_backfill::staging::staging_name(
                        &self.dest_of(&key)
                    )),
                    self.destinations.topology.on_cluster()
                );
                self.retry_clickhouse("truncating a staging table", move |ch| {
                    let sql = sql.clone();
                    async move { ch.execute(&sql).await }
                })
                .await?;
            }
        }
        Ok(())
    }
}

/// Composite types of both descriptors' type lists whose fields differ.
fn recomposed_types(old: &RelationDesc, new: &RelationDesc) -> Vec<String> {
    new.types
        .iter()
        .filter(|n| n.typtype == "c")
        .filter(|n| {
            old.types
                .iter()
                .any(|o| o.oid == n.oid && o.fields != n.fields)
        })
        .map(|n| format!("{}.{}", n.schema, n.name))
        .collect()
}

/// Live columns of both descriptors (by attnum) whose type changed in a
/// way that may change their values' text: another type OID, unless the
/// change keeps the text (between `text` and `varchar`, a domain and its
/// base, `timestamp` to `timestamptz` into a `DateTime64`). A typmod-only
/// change (a wider `varchar` or `numeric`) keeps it.
fn relabeled_columns(old: &RelationDesc, new: &RelationDesc, dest: &DestTable) -> Vec<String> {
    use walshadow_pg_format::type_oid as oid;
    let base = |d: &RelationDesc, t: walshadow_types::Oid| {
        d.types
            .iter()
            .find(|x| x.oid == t)
            .and_then(|x| x.base_type)
            .unwrap_or(t)
    };
    let keeps_text = |o: walshadow_types::Oid, n: walshadow_types::Oid, column: &str| {
        let (bo, bn) = (base(old, o), base(new, n));
        let texts = [oid::TEXT, oid::VARCHAR];
        o == n
            || bo == bn
            || (texts.contains(&bo) && texts.contains(&bn))
            || (bo == oid::TIMESTAMP
                && bn == oid::TIMESTAMPTZ
                && dest.column_of_source(column).is_some_and(|c| {
                    matches!(
                        c.ch_type.to_not_null(),
                        walshadow_emitter::ChType::DateTime64Utc(_)
                    )
                }))
    };
    new.attributes
        .iter()
        .filter(|n| !n.dropped)
        .filter(|n| {
            old.attributes.iter().any(|o| {
                !o.dropped && o.attnum == n.attnum && !keeps_text(o.type_oid, n.type_oid, &n.name)
            })
        })
        .map(|n| format!("{:?}", n.name))
        .collect()
}

/// Records the columns `key`'s rules leave out (status shows them) and
/// logs what changed; names in `exclude_columns` the table lacks are
/// warned of at every schema sync.
fn note_left_out(
    t: &mut TableProgress,
    key: &str,
    lsn: Lsn,
    left_out: &[walshadow_emitter::LeftOut],
    unknown: &[String],
) {
    let now: BTreeMap<String, String> = left_out
        .iter()
        .map(|l| (l.column.clone(), l.reason.clone()))
        .collect();
    for (column, reason) in &now {
        if t.left_out.get(column) != Some(reason) {
            tracing::warn!(table = %key, column = %column, lsn = %lsn, "column left out of ClickHouse and of every load: {reason}");
        }
    }
    for column in t.left_out.keys().filter(|c| !now.contains_key(*c)) {
        tracing::info!(table = %key, column = %column, lsn = %lsn, "column no longer left out: it is added to the ClickHouse table; rows written before hold NULL (or its type's default) until `walshadow table resync {key}` loads them again");
    }
    for column in unknown {
        tracing::warn!(table = %key, column = %column, "a column rule (exclude_columns, include_columns, out_of_range_columns, rename_columns, column_types) names a column the table does not have (a typo, or since dropped)");
    }
    t.left_out = now;
}
