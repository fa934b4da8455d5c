//! Tables the config file takes by pattern (`[table."public.*"]`,
//! `[table."~regex"]`): the ones the catalog holds when the stream first
//! reads it, and the ones a commit makes match later (created, renamed,
//! moved to another schema, detached), taken at that commit before its
//! rows, so a table's creating transaction streams too. Each streams as a
//! table pinned by name would, with the pattern's section as its own.
//!
//! A commit is looked at when its invalidations may have changed a
//! relation's name (`catalog_reach::changes_relation_names`): that costs a
//! flush of the rows held and a catalog query, only while patterns exist.

use std::collections::{BTreeMap, BTreeSet};

use walshadow_changes::decode::CommitEvent;
use walshadow_config::InitialLoad;
use walshadow_types::Lsn;

use super::{StreamError, Streamer, Table, destinations};
use crate::progress::{ConfigPattern, TableProgress};
use crate::scope::ScopeChange;
use walshadow_config::pattern::TablePattern;

/// The matcher of a config-table row that names tables by pattern: a
/// glob (`*`, `?`) in `schema_name` or `table_name`, or `schema_name = '~'`
/// with a regular expression over `schema.name` in `table_name`. `None`
/// for a row naming one table (or a pattern that does not parse).
pub(super) fn config_pattern(key: &str) -> Option<TablePattern> {
    if !is_config_pattern(key) {
        return None;
    }
    let (schema, name) = walshadow_types::split_table_key(key)?;
    let text = if schema == "~" {
        format!("~{name}")
    } else {
        key.to_owned()
    };
    TablePattern::new(&text, walshadow_config::TableConfig::default()).ok()
}

/// Whether a config-table row's key is a pattern, by its parts: a glob in
/// either, or the schema `~`.
pub(super) fn is_config_pattern(key: &str) -> bool {
    walshadow_types::split_table_key(key).is_some_and(|(schema, name)| {
        schema == "~" || schema.contains(['*', '?']) || name.contains(['*', '?'])
    })
}

impl Streamer {
    /// A pattern row of the config table changed: kept in progress (the
    /// rows are read from the WAL only when they change); the tables it
    /// concerns are looked at once this commit's rows are in.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn config_pattern_row(
        &mut self,
        key: &str,
        s: Lsn,
        removed: bool,
        replicate: bool,
        initial_load: Option<String>,
        destination: Option<String>,
        columns: crate::scope::RowColumnRules,
    ) {
        if config_pattern(key).is_none() {
            tracing::warn!(pattern = %key, lsn = %s, "a pattern row of the config table that does not parse (a regular expression?): ignored");
            return;
        }
        self.scope.config_patterns_due = true;
        if removed {
            tracing::info!(pattern = %key, lsn = %s, "config table pattern row removed: the tables it took stream on");
            self.progress.config_patterns.remove(key);
        } else {
            if destination.is_some() {
                tracing::warn!(pattern = %key, lsn = %s, "a pattern row's destination is ignored: each table it takes streams into its own default destination");
            }
            tracing::info!(pattern = %key, lsn = %s, replicate, "config table pattern row");
            self.progress.config_patterns.insert(
                key.to_owned(),
                ConfigPattern {
                    replicate,
                    initial_load,
                    columns,
                },
            );
        }
        self.progress_dirty = true;
    }

    /// The config table's pattern rows at `c`: tables an exclusion row now
    /// matches are opted out (those a pattern row took), tables an
    /// inclusion row matches and nothing else manages are opted in with
    /// its initial load and column rules.
    pub(super) async fn apply_config_patterns(
        &mut self,
        c: &CommitEvent,
        later: bool,
    ) -> Result<(), StreamError> {
        let (changes, by) = self.config_pattern_changes(c.end, later).await?;
        if changes.is_empty() {
            return Ok(());
        }
        self.scope.by_config_pattern = by;
        self.scope.changes.extend(changes);
        let applied = self.apply_scope_batch(c).await;
        self.scope.by_config_pattern.clear();
        applied
    }

    /// The opt-ins and opt-outs the config table's pattern rows ask for
    /// at `s`, with the row each concerns. With `later` (tables a commit
    /// may have made or renamed to match, taken once its rows are in), a
    /// table loads with `copy` as of `s` whatever the row says: that holds
    /// the rows of its creating transaction, and no backup holds it.
    async fn config_pattern_changes(
        &mut self,
        s: Lsn,
        later: bool,
    ) -> Result<(Vec<ScopeChange>, BTreeMap<String, String>), StreamError> {
        let mut changes = Vec::new();
        let mut takes = BTreeMap::new();
        if self.progress.config_patterns.is_empty() {
            return Ok((changes, takes));
        }
        let rows: Vec<(String, TablePattern, ConfigPattern)> = self
            .progress
            .config_patterns
            .iter()
            .filter_map(|(k, row)| Some((k.clone(), config_pattern(k)?, row.clone())))
            .collect();
        let excluded = |schema: &str, name: &str| {
            rows.iter()
                .any(|(_, m, row)| !row.replicate && m.takes(schema, name))
        };
        // Exclusions win over inclusions: what a pattern row took goes.
        for key in &self.scope.pinned {
            let by_pattern = self
                .progress
                .tables
                .get(key)
                .is_some_and(|t| t.config_pattern.is_some());
            if let Some((schema, name)) = walshadow_types::split_table_key(key)
                && by_pattern
                && excluded(&schema, &name)
            {
                tracing::info!(table = %key, lsn = %s, "excluded by a pattern row of the config table");
                changes.push(ScopeChange::Set {
                    key: key.clone(),
                    replicate: false,
                    initial_load: None,
                    destination: None,
                    resync: None,
                    columns: Default::default(),
                });
                continue;
            }
            // Its row's column rules changed: they follow.
            let Some(t) = self.progress.tables.get(key) else {
                continue;
            };
            if let Some(pattern) = &t.config_pattern
                && let Some((_, _, row)) = rows.iter().find(|(k, _, _)| k == pattern)
                && row.replicate
                && row.columns != t.columns
            {
                changes.push(ScopeChange::Set {
                    key: key.clone(),
                    replicate: true,
                    initial_load: row.initial_load.clone(),
                    destination: None,
                    resync: None,
                    columns: row.columns.clone(),
                });
                takes.insert(key.clone(), pattern.clone());
            }
        }
        let feeder = &self.shadow.feeder;
        let Some(relations) = self.catalog.relations.as_mut() else {
            return Ok((changes, takes));
        };
        let tables = relations.user_tables(feeder).await?;
        for (schema, name) in tables {
            let key = walshadow_types::table_key(&schema, &name);
            if self.scope.pinned.contains(&key)
                || self.settings.tables.contains_key(&key)
                || self
                    .settings
                    .patterns
                    .iter()
                    .any(|p| p.takes(&schema, &name))
                || key == self.settings.config_key()
                || self.progress.config_rows_off.contains(&key)
                // Managed by its own row (one a pattern row took, then an
                // exclusion let go, may be taken again).
                || self
                    .progress
                    .tables
                    .get(&key)
                    .is_some_and(|t| t.opted_in && t.config_pattern.is_none())
                || self.config_row_pending(&key).is_some()
                || excluded(&schema, &name)
                // Outside `config_table_allow`: not the config table's to take.
                || !self.settings.source_config.allows(&key)
            {
                continue;
            }
            let Some((pattern, _, row)) = rows
                .iter()
                .find(|(_, m, row)| row.replicate && m.takes(&schema, &name))
            else {
                continue;
            };
            let initial_load = if later {
                Some(InitialLoad::Copy.as_str().to_owned())
            } else {
                row.initial_load.clone()
            };
            tracing::info!(table = %key, pattern = %pattern, lsn = %s, "taken by a pattern row of the config table");
            changes.push(ScopeChange::Set {
                key: key.clone(),
                replicate: true,
                initial_load,
                destination: None,
                resync: None,
                columns: row.columns.clone(),
            });
            takes.insert(key, pattern.clone());
        }
        Ok((changes, takes))
    }

    /// Takes every table a pattern takes and the stream does not follow
    /// yet, as the catalog is at its position (`s`: where they start;
    /// `at_start`: the stream's first look). Returns the keys taken.
    pub(super) async fn take_pattern_tables(
        &mut self,
        s: Lsn,
        at_start: bool,
    ) -> Result<BTreeSet<String>, StreamError> {
        let mut taken = BTreeSet::new();
        if self.settings.patterns.is_empty() {
            return Ok(taken);
        }
        let feeder = &self.shadow.feeder;
        let Some(relations) = self.catalog.relations.as_mut() else {
            return Ok(taken);
        };
        let tables = relations.user_tables(feeder).await?;
        for (schema, name) in tables {
            let key = walshadow_types::table_key(&schema, &name);
            if self.scope.pinned.contains(&key)
                || self.settings.tables.contains_key(&key)
                || self.scope.refused_by_pattern.contains(&key)
                || key == self.settings.config_key()
                // The config table's (opted in or out there, or a row of
                // it waiting for its first commit): that row decides.
                || self.progress.tables.get(&key).is_some_and(|t| t.opted_in)
                || self.config_row_pending(&key).is_some()
            {
                continue;
            }
            let Some(pattern) = self
                .settings
                .patterns
                .iter()
                .find(|p| p.takes(&schema, &name))
            else {
                continue;
            };
            let (pattern_key, config) = (pattern.key.clone(), pattern.config.clone());
            if self.take_table(&key, config, s, at_start, Some(pattern_key))? {
                taken.insert(key);
            }
        }
        if !taken.is_empty() {
            self.scope_changed();
        }
        Ok(taken)
    }

    /// Takes `key` into the stream at `s` with `config` (a section of the
    /// file: a pattern's, `pattern` naming it, or the table's own pin added
    /// by a reload); `false` when its destination is taken (said in the
    /// log, status and metrics, once).
    pub(super) fn take_table(
        &mut self,
        key: &str,
        config: walshadow_config::TableConfig,
        s: Lsn,
        at_start: bool,
        pattern: Option<String>,
    ) -> Result<bool, StreamError> {
        let key = key.to_owned();
        let dest = match (&pattern, config.destination_of(&key)) {
            // A pin's own destination.
            (None, Some(d)) => d,
            _ => self
                .progress
                .tables
                .get(&key)
                .map(|t| t.destination.clone())
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| destinations::default_destination(&key)),
        };
        let by = match &pattern {
            Some(p) => format!("taken by pattern [table.{p:?}]"),
            None => format!("pinned by [table.{key:?}] (added by a reload)"),
        };
        if let Some(reason) = self.destination_refused(&key, &dest) {
            // Said in the log, in status and in the metrics, once.
            let kind = crate::stop::StopKind::DestinationTaken;
            let remedy = match &pattern {
                Some(p) => format!(
                    "pin it by name in a [table.{key:?}] section with destination = \"…\", or \
                     add it to the exclude of [table.{p:?}]; then restart"
                ),
                None => format!("give [table.{key:?}] another destination = \"…\" and reload"),
            };
            tracing::error!(table = %key, code = kind.code(), "not taken: {by}, but {reason}; {remedy}");
            let entry = self
                .progress
                .tables
                .entry(key.clone())
                .or_insert_with(|| TableProgress::new(dest, s));
            entry.stopped = Some(crate::progress::Stopped {
                lsn: s,
                code: kind.code().into(),
                reason: format!("{by}, but {reason}"),
                remedy,
            });
            self.metrics.set_table_stopped(&key, Some(kind.code()));
            self.progress_dirty = true;
            if pattern.is_none() {
                // Not the file's yet: a reload with another destination
                // adds it again.
                self.settings.tables.remove(&key);
            }
            self.scope.refused_by_pattern.insert(key);
            return Ok(false);
        }
        let load = match InitialLoad::parse(config.initial_load.as_deref())
            .unwrap_or(InitialLoad::None)
        {
            // A backup cannot hold a table that came to match after
            // the stream started (made since, or renamed): its rows as
            // of this commit are read with COPY.
            InitialLoad::BaseBackup | InitialLoad::ObjectStore if !at_start => InitialLoad::Copy,
            l => l,
        };
        match &pattern {
            Some(p) => {
                tracing::info!(table = %key, pattern = %p, s = %s, initial_load = load.as_str(), destination = %dest, "table taken by a pattern")
            }
            None => {
                tracing::info!(table = %key, s = %s, initial_load = load.as_str(), destination = %dest, "table taken: its [table] section was added by a reload")
            }
        }
        self.settings.tables.insert(key.clone(), config);
        if let Some(p) = pattern {
            self.settings.by_pattern.insert(key.clone(), p);
        }
        self.scope.pinned.insert(key.clone());
        let first_seen = !self.progress.tables.contains_key(&key);
        let entry = self
            .progress
            .tables
            .entry(key.clone())
            .or_insert_with(|| TableProgress::new(dest.clone(), s));
        // Out before (let go, opted out, refused): what changed meanwhile
        // is loaded again, and a refusal is over.
        let was_out = entry.opted_out.is_some() || entry.stopped.is_some();
        if entry.destination != dest {
            // Another ClickHouse table: made afresh.
            entry.schema = None;
        }
        entry.destination = dest;
        entry.opted_out = None;
        entry.out_why = None;
        if was_out {
            entry.stopped = None;
            entry.since = s;
            self.metrics.set_table_stopped(&key, None);
        }
        self.tables.insert(key.clone(), Table::default());
        if (first_seen || was_out) && load != InitialLoad::None {
            self.backfills.request(&key, load.as_str(), s)?;
        }
        Ok(true)
    }

    /// bootstrap: a table its own config-table row opts in, which `init
    /// --bootstrap` selected and loads, taken where the stream starts (its
    /// load's `S`), as pins are. The row is applied again at the first
    /// commit, where it changes nothing more (the table is in scope with
    /// the row's rules and its load under way). False when its destination
    /// is refused: the first commit says so.
    pub(super) fn take_row_at_start(
        &mut self,
        key: &str,
        destination: Option<String>,
        resync: Option<i64>,
        columns: crate::scope::RowColumnRules,
        s: Lsn,
    ) -> bool {
        let dest = destination
            .or_else(|| {
                self.progress
                    .tables
                    .get(key)
                    .map(|t| t.destination.clone())
                    .filter(|d| !d.is_empty())
            })
            .unwrap_or_else(|| destinations::default_destination(key));
        if self.destination_refused(key, &dest).is_some() {
            return false;
        }
        tracing::info!(table = %key, s = %s, destination = %dest, "table opted in by its config table row, taken where the stream starts: init --bootstrap's backup loads it");
        self.scope.pinned.insert(key.to_owned());
        let entry = self
            .progress
            .tables
            .entry(key.to_owned())
            .or_insert_with(|| TableProgress::new(dest.clone(), s));
        entry.destination = dest;
        entry.opted_in = true;
        entry.opted_out = None;
        entry.out_why = None;
        entry.since = s;
        entry.resync_seen = resync.unwrap_or(0);
        entry.columns = columns;
        self.tables.insert(key.to_owned(), Table::default());
        true
    }

    /// Patterns changed by a reload: the tables they take now are taken at
    /// the last transaction boundary decoded, where the catalog moves
    /// (rows up to it flushed first, as for any catalog refresh).
    pub(super) async fn take_reloaded_patterns(&mut self) -> Result<(), StreamError> {
        // Kept due until the catalog session is up (pins wait with it).
        if !self.scope.patterns_due || self.catalog.relations.is_none() {
            return Ok(());
        }
        self.scope.patterns_due = false;
        self.scope.refused_by_pattern.clear();
        self.flush_all().await?;
        self.write_progress()?;
        // Flushed: `applied` is the last transaction boundary decoded.
        let at = self.progress.applied;
        self.connect_relations().await?.catalog_changed(at);
        // Pins a reload removed, then those it added, then the patterns
        // (which may take a table a removed pin let go).
        let mut let_go = false;
        for key in std::mem::take(&mut self.scope.pins_removed) {
            if !self.scope.pinned.contains(&key) {
                // Refused when added: its refusal goes with its section.
                if self
                    .progress
                    .tables
                    .get(&key)
                    .is_some_and(|t| t.schema.is_none())
                {
                    self.progress.tables.remove(&key);
                    self.metrics.forget_table(&key);
                }
                continue;
            }
            // A pattern of the file takes it: it streams on under the
            // pattern's section, its load or resync untouched.
            let by = walshadow_types::split_table_key(&key).and_then(|(schema, name)| {
                self.settings
                    .patterns
                    .iter()
                    .find(|p| p.takes(&schema, &name))
                    .map(|p| (p.key.clone(), p.config.clone()))
            });
            if let Some((pattern, config)) = by {
                tracing::info!(table = %key, pattern = %pattern, lsn = %at, "[table] section removed by a reload: the table streams on, taken by a pattern");
                self.settings.tables.insert(key.clone(), config);
                self.settings.by_pattern.insert(key, pattern);
                let_go = true;
                continue;
            }
            tracing::info!(table = %key, lsn = %at, "[table] section removed by a reload: no longer streamed (its ClickHouse table stays)");
            self.let_go(&key, at, "its [table] section was removed by a reload")
                .await?;
            let_go = true;
        }
        let mut taken = BTreeSet::new();
        for (key, config) in std::mem::take(&mut self.scope.pins_added) {
            if !self.scope.pinned.contains(&key)
                && self.take_table(&key, config, at, false, None)?
            {
                taken.insert(key);
            }
        }
        taken.extend(self.take_pattern_tables(at, false).await?);
        if let_go && taken.is_empty() {
            self.scope_changed();
        }
        if !taken.is_empty() {
            self.scope_changed();
            self.refresh_tables(at, Some(&taken)).await?;
            self.toast_catalog_now(at, at).await?;
            self.start_loads();
        }
        Ok(())
    }

    /// The config table's row of `key` that waits for the first commit
    /// (read with SQL at a first start).
    pub(super) fn config_row_pending(&self, key: &str) -> Option<&ScopeChange> {
        self.scope.changes.iter().find(|c| match c {
            ScopeChange::Set { key: k, .. } | ScopeChange::Remove { key: k } => k == key,
        })
    }

    /// Commit `c` may have changed relations' names: a table it made
    /// match a pattern is taken at this commit, before its rows are
    /// applied, with the catalog moved to the commit.
    pub(super) async fn take_matching_tables(
        &mut self,
        c: &CommitEvent,
    ) -> Result<(), StreamError> {
        if self.settings.patterns.is_empty() && self.progress.config_patterns.is_empty() {
            return Ok(());
        }
        let db = self.connect_relations().await?.db_oid;
        if !crate::catalog_reach::changes_relation_names(&c.invals, self.major, db) {
            return Ok(());
        }
        // The config table's pattern rows: a table made or renamed to
        // match is taken once this commit's rows are in (its own config
        // rows may say otherwise), loaded with COPY as of the commit.
        if !self.progress.config_patterns.is_empty() {
            self.scope.config_patterns_later = true;
        }
        if self.settings.patterns.is_empty() {
            return Ok(());
        }
        // The shadow moves to this commit: rows of earlier commits become
        // durable first, as for any catalog refresh.
        if self.positions.any_changed_since_durable() {
            self.flush_all().await?;
            self.write_progress()?;
        }
        self.connect_relations().await?.catalog_changed(c.end);
        let taken = self.take_pattern_tables(c.end, false).await?;
        if !taken.is_empty() {
            self.refresh_tables(c.end, Some(&taken)).await?;
            // The mirror learns the new tables' TOAST relations.
            self.toast_catalog_now(c.lsn, c.end).await?;
            self.start_loads();
        }
        Ok(())
    }
}
