//! Which tables stream: pinned in the config file or opted in by the
//! config table, whose opt-ins and opt-outs are applied at their commit,
//! with the initial loads they start.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use walshadow_changes::change::{Change, ChangeKind, OwnedTuple};
use walshadow_changes::decode::CommitEvent;
use walshadow_rows::RowDecoder;
use walshadow_types::Lsn;
use walshadow_types::catalog::RelationDesc;

use super::{StreamError, Streamer, Table, destinations};
use crate::progress::{Progress, TableProgress};
use crate::scope::{ScopeChange, config_row};
use walshadow_emitter::ColumnRules;

/// See the module doc.
#[derive(Debug)]
pub(super) struct Scope {
    /// Tables streaming now: pinned in the config file or opted in.
    pub pinned: BTreeSet<String>,
    /// Opt-ins and opt-outs of the commit being applied.
    pub changes: Vec<ScopeChange>,
    /// The config table's row decoder, for its layout now.
    pub config_decoder: Option<(Arc<RelationDesc>, RowDecoder)>,
    /// Tables in scope the catalog does not have (yet).
    pub missing: BTreeSet<String>,
    /// Tables a pattern takes that were refused (their destination is
    /// taken): said once, not taken at every look.
    pub refused_by_pattern: BTreeSet<String>,
    /// The patterns changed (a reload): the catalog is looked at again at
    /// the next tick.
    pub patterns_due: bool,
    /// A pattern row of the config table changed: the tables it takes
    /// (or, an exclusion, no longer takes) are looked at after this
    /// commit's rows.
    pub config_patterns_due: bool,
    /// A commit may have made tables match the config table's pattern
    /// rows (created, renamed): they are taken once its rows are in (its
    /// own config-table rows may say otherwise), loaded with `copy`.
    pub config_patterns_later: bool,
    /// Pins added and removed by a reload, for the next commit boundary.
    pub pins_added: Vec<(String, walshadow_config::TableConfig)>,
    pub pins_removed: Vec<String>,
    /// Keys whose changes in `changes` a pattern row made (not rows of
    /// their own), with the row's key.
    pub by_config_pattern: std::collections::BTreeMap<String, String>,
}

impl Scope {
    pub fn new(pinned: BTreeSet<String>) -> Scope {
        Scope {
            pinned,
            changes: Vec::new(),
            config_decoder: None,
            missing: BTreeSet::new(),
            refused_by_pattern: BTreeSet::new(),
            patterns_due: false,
            config_patterns_due: false,
            config_patterns_later: false,
            pins_added: Vec::new(),
            pins_removed: Vec::new(),
            by_config_pattern: Default::default(),
        }
    }
}

/// Every table's column rules: the config file's for pinned tables, the
/// config table's (kept in progress) for opted-in ones.
pub(super) fn column_rules(
    settings: &super::settings::StreamSettings,
    progress: &Progress,
) -> HashMap<String, ColumnRules> {
    let mut rules = settings.column_rules();
    for (key, t) in &progress.tables {
        if t.opted_in && !t.columns.is_empty() && !settings.tables.contains_key(key) {
            rules.insert(key.clone(), t.columns.rules());
        }
    }
    rules
}

impl Streamer {
    /// See [`column_rules`].
    pub(super) fn column_rules(&self) -> HashMap<String, ColumnRules> {
        column_rules(&self.settings, &self.progress)
    }

    /// Tables came into scope or left it: progress is written at the next
    /// tick, and the loads and the catalog session see the new set.
    pub(super) fn scope_changed(&mut self) {
        self.progress_dirty = true;
        let rules = self.column_rules();
        self.backfills.set_column_rules(rules.clone());
        if let Some(r) = self.catalog.relations.as_mut() {
            r.set_pinned(self.scope.pinned.clone());
            r.set_column_rules(rules);
        }
    }

    /// Starts the loads whose `S` has been decoded, into tables whose
    /// ClickHouse table exists.
    pub(super) fn start_loads(&mut self) {
        let ready: HashMap<String, String> = self
            .tables
            .iter()
            .filter(|(k, t)| t.dest.is_some() && !self.is_stopped(k))
            .map(|(k, _)| (k.clone(), self.dest_of(k)))
            .collect();
        self.backfills
            .start_due(self.positions.decoded, |key| ready.get(key).cloned());
    }

    /// An opt-in at `s` that cannot take effect: recorded as opted in and
    /// out at once, stopped with `kind`, so `status`, `table list` and the
    /// metrics show why until its row is corrected.
    fn refuse_opt_in(
        &mut self,
        key: &str,
        dest: String,
        s: Lsn,
        kind: crate::stop::StopKind,
        reason: String,
    ) {
        tracing::error!(table = %key, lsn = %s, code = kind.code(), "table not opted in: {reason}");
        let entry = self
            .progress
            .tables
            .entry(key.to_owned())
            .or_insert_with(|| TableProgress::new(dest, s));
        entry.opted_in = true;
        entry.opted_out = Some(s);
        // Refused when a pattern row took it: the pattern's still, tried
        // again at its next look.
        entry.config_pattern = self.scope.by_config_pattern.get(key).cloned();
        entry.stopped = Some(crate::progress::Stopped {
            lsn: s,
            code: kind.code().into(),
            reason,
            remedy: kind.remedy(key),
        });
        self.metrics.set_table_stopped(key, Some(kind.code()));
        self.progress_dirty = true;
    }

    /// Stops streaming `key` at `s` (an opt-out, a pin removed by a
    /// reload): its rows up to here land first; its ClickHouse table stays.
    pub(super) async fn let_go(&mut self, key: &str, s: Lsn, why: &str) -> Result<(), StreamError> {
        self.flush_table(key).await?;
        self.scope.pinned.remove(key);
        self.tables.remove(key);
        self.backfills.withdraw(key)?;
        self.toast.clear_waits(key);
        self.metrics.forget_table(key);
        if let Some(t) = self.progress.tables.get_mut(key) {
            t.opted_out = Some(s);
            t.out_why = Some(why.to_owned());
        }
        self.abandon_resync(key).await?;
        // A table that never existed (no ClickHouse table was made for it:
        // a typo, a table dropped before it streamed) leaves nothing
        // behind in progress.json or status.
        if self
            .progress
            .tables
            .get(key)
            .is_some_and(|t| t.schema.is_none() && t.rows == 0 && t.resync.is_none())
        {
            self.progress.tables.remove(key);
            self.scope.missing.remove(key);
        }
        Ok(())
    }

    /// A change of the config table: remembered, applied after the commit.
    pub(super) fn config_change(&mut self, seq: Lsn, desc: &Arc<RelationDesc>, change: &Change) {
        if !self
            .scope
            .config_decoder
            .as_ref()
            .is_some_and(|(d, _)| Arc::ptr_eq(d, desc))
        {
            match RowDecoder::new(desc) {
                Ok(dec) => self.scope.config_decoder = Some((Arc::clone(desc), dec)),
                Err(e) => {
                    tracing::error!(lsn = %seq, "the config table {} cannot be read: {e}", self.settings.config_key());
                    return;
                }
            }
        }
        let Some((_, decoder)) = &self.scope.config_decoder else {
            return;
        };
        let source = self.toast.source();
        let row = |t: &OwnedTuple| {
            decoder
                .decode(t.tuple_ref(), &source)
                .ok()
                .and_then(|v| config_row(decoder, &v))
        };
        let old_key = change
            .old
            .as_ref()
            .and_then(|o| row(o.tuple()))
            .map(|r| r.key);
        let mut out = Vec::new();
        match change.kind {
            ChangeKind::Insert | ChangeKind::Update => {
                let Some(crate::scope::ConfigRow {
                    key,
                    replicate,
                    initial_load,
                    destination,
                    resync,
                    columns,
                }) = change.new.as_ref().and_then(row)
                else {
                    tracing::warn!(lsn = %seq, "a row of the config table {} without schema_name/table_name: ignored", self.settings.config_key());
                    return;
                };
                if let Some(old) = old_key
                    && old != key
                {
                    out.push(ScopeChange::Remove { key: old });
                }
                out.push(ScopeChange::Set {
                    key,
                    replicate: replicate.unwrap_or(true),
                    initial_load,
                    destination,
                    resync,
                    columns,
                });
            }
            ChangeKind::Delete => {
                if let Some(key) = old_key {
                    out.push(ScopeChange::Remove { key });
                }
            }
            _ => {}
        }
        self.scope.changes.extend(out);
    }

    /// Applies the opt-ins and opt-outs of the commit `c` (its `end` is
    /// `S`), then, when a pattern row of the config table changed, the
    /// tables it takes or lets go at that commit.
    pub(super) async fn apply_scope_changes(&mut self, c: &CommitEvent) -> Result<(), StreamError> {
        self.apply_scope_batch(c).await?;
        let later = std::mem::take(&mut self.scope.config_patterns_later);
        if std::mem::take(&mut self.scope.config_patterns_due) || later {
            self.apply_config_patterns(c, later).await?;
        }
        Ok(())
    }

    /// The opt-ins and opt-outs in `scope.changes`, at `c`.
    pub(super) async fn apply_scope_batch(&mut self, c: &CommitEvent) -> Result<(), StreamError> {
        let s = c.end;
        // Tables waiting for a refresh get it at the catalog they were
        // judged under, before the catalog moves to this commit.
        self.refresh_pending(None).await?;
        // Tables coming into scope are read as the catalog has them at
        // their opt-in, not at the last commit that concerned the tables
        // in scope before: the catalog commits skipped since concerned
        // none of those, so the shadow may replay them now, and a restart
        // re-decoding them sees the same answers for those tables.
        if let Some(r) = self.catalog.relations.as_mut()
            && r.catalog_lsn() < s
        {
            r.catalog_changed(s);
        }
        let mut changed = false;
        let mut added = false;
        let mut rules_changed = Vec::new();
        for change in std::mem::take(&mut self.scope.changes) {
            let removed = matches!(change, ScopeChange::Remove { .. });
            let (key, opt_in, load_text, destination, resync, columns) = match change {
                ScopeChange::Set {
                    key,
                    replicate,
                    initial_load,
                    destination,
                    resync,
                    columns,
                } => (key, replicate, initial_load, destination, resync, columns),
                ScopeChange::Remove { key } => (key, false, None, None, None, Default::default()),
            };
            let pattern_row = super::patterns::is_config_pattern(&key);
            if !pattern_row && !self.scope.by_config_pattern.contains_key(&key) {
                // A table's own row: it decides, over any pattern row.
                if opt_in {
                    self.progress.config_rows_off.remove(&key);
                } else if removed {
                    self.progress.config_rows_off.remove(&key);
                    // Gone: a pattern row may take the table now.
                    if !self.scope.pinned.contains(&key)
                        && let Some(t) = self.progress.tables.get_mut(&key)
                    {
                        t.opted_in = false;
                    }
                    if !self.progress.config_patterns.is_empty() {
                        self.scope.config_patterns_due = true;
                    }
                } else {
                    self.progress.config_rows_off.insert(key.clone());
                }
                if let Some(t) = self.progress.tables.get_mut(&key) {
                    t.config_pattern = None;
                }
            }
            // A raised resync counter on a table walshadow streams (or
            // stopped): load it again and swap it in, whatever else the
            // row says.
            let seen = self.progress.tables.get(&key).map(|t| t.resync_seen);
            if opt_in
                && let (Some(n), Some(seen)) = (resync, seen)
                && n != seen
                && self.scope.pinned.contains(&key)
            {
                let mode = match walshadow_config::InitialLoad::parse(load_text.as_deref()) {
                    Ok(walshadow_config::InitialLoad::BaseBackup) => crate::backfills::BASE_BACKUP,
                    _ => "copy",
                };
                self.start_resync(&key, mode, s, n, None).await?;
                changed = true;
                added = true;
                continue;
            }
            if walshadow_config::split_table_name(&key).is_none() {
                tracing::warn!(table = %key, lsn = %s, "a config table row names no table as schema.name: ignored");
                continue;
            }
            if pattern_row {
                self.config_pattern_row(&key, s, removed, opt_in, load_text, destination, columns);
                continue;
            }
            if let Some(pattern) = self.settings.by_pattern.get(&key) {
                tracing::warn!(table = %key, lsn = %s, pattern = %pattern, "the table is taken by a pattern of the config file; its config table row changes nothing (add it to the pattern's exclude to manage it by the table)");
                continue;
            }
            if self.settings.tables.contains_key(&key) {
                tracing::warn!(table = %key, lsn = %s, "the table is pinned in the config file; its config table row changes nothing (remove it from the file to manage it by the table)");
                continue;
            }
            if opt_in
                && !self.scope.pinned.contains(&key)
                && !self.settings.source_config.allows(&key)
            {
                // Whoever may insert into the config table may not stream
                // what the operator did not allow.
                let reason = format!(
                    "the config table {} asks for it, and [source] config_table_allow does not allow it",
                    self.settings.config_key()
                );
                let dest = self.dest_of(&key);
                self.refuse_opt_in(&key, dest, s, crate::stop::StopKind::NotAllowed, reason);
                changed = true;
                continue;
            }
            if opt_in {
                let load = match walshadow_config::InitialLoad::parse(load_text.as_deref()) {
                    Ok(l) => l,
                    Err(text) if self.scope.pinned.contains(&key) => {
                        // Streaming already: it goes on (stopping it would
                        // leave a gap); only the new value is ignored.
                        tracing::error!(table = %key, lsn = %s, "initial_load {text:?} in the config table {} is not a mode: ignored, the table keeps streaming (use none, copy or base_backup)", self.settings.config_key());
                        continue;
                    }
                    Err(text) => {
                        // A config table made without the CHECK (older
                        // `init`, or by hand) let it through: the table
                        // waits, visibly, for a valid value.
                        let reason = format!(
                            "initial_load {text:?} in the config table {} is not a mode",
                            self.settings.config_key()
                        );
                        let dest = self.dest_of(&key);
                        self.refuse_opt_in(
                            &key,
                            dest,
                            s,
                            crate::stop::StopKind::UnknownInitialLoad,
                            reason,
                        );
                        changed = true;
                        continue;
                    }
                };
                if self.scope.pinned.contains(&key)
                    && let Some(t) = self.progress.tables.get_mut(&key)
                    && t.columns != columns
                {
                    // Applied at this commit: the ClickHouse table follows
                    // (columns dropped, or added) at the refresh below.
                    tracing::info!(table = %key, lsn = %s, "the table's column rules changed in the config table");
                    t.columns = columns.clone();
                    rules_changed.push(key.clone());
                    changed = true;
                }
                if self.scope.pinned.contains(&key) {
                    // A duplicate request collapses, but a table that was
                    // opted in without a load and never loaded takes the
                    // load its row now asks for.
                    let loads = matches!(
                        load,
                        walshadow_config::InitialLoad::Copy
                            | walshadow_config::InitialLoad::BaseBackup
                    );
                    if loads && !self.backfills.has_entry(&key) {
                        let mode = match load {
                            walshadow_config::InitialLoad::None => "copy",
                            other => other.as_str(),
                        };
                        tracing::info!(table = %key, s = %s, initial_load = mode, "initial_load set on a table that streams but was never loaded: loading it");
                        self.backfills.request(&key, mode, s)?;
                        added = true;
                    }
                    continue;
                }
                let dest = destination
                    .clone()
                    .or_else(|| {
                        self.progress
                            .tables
                            .get(&key)
                            .map(|t| t.destination.clone())
                    })
                    .unwrap_or_else(|| destinations::default_destination(&key));
                if let Some(reason) = self.destination_refused(&key, &dest) {
                    let kind = crate::stop::StopKind::DestinationTaken;
                    self.refuse_opt_in(&key, dest, s, kind, reason);
                    changed = true;
                    continue;
                }
                tracing::info!(table = %key, s = %s, initial_load = load.as_str(), destination = %dest, "table opted in");
                let resync_seen = resync.unwrap_or(0);
                self.scope.pinned.insert(key.clone());
                let entry = self
                    .progress
                    .tables
                    .entry(key.clone())
                    .or_insert_with(|| TableProgress::new(dest.clone(), s));
                if entry.destination != dest {
                    // Another ClickHouse table: made afresh (the rows the
                    // old one holds stay there).
                    entry.schema = None;
                }
                entry.destination = dest;
                entry.opted_in = true;
                entry.opted_out = None;
                entry.out_why = None;
                entry.since = s;
                entry.stopped = None;
                entry.resync_seen = resync_seen;
                entry.columns = columns;
                entry.config_pattern = self.scope.by_config_pattern.get(&key).cloned();
                self.tables.insert(key.clone(), Table::default());
                if load != walshadow_config::InitialLoad::None {
                    self.backfills.request(&key, load.as_str(), s)?;
                }
                added = true;
                changed = true;
            } else {
                if !self.scope.pinned.contains(&key) {
                    continue;
                }
                tracing::info!(table = %key, lsn = %s, "table opted out: it is no longer streamed (its ClickHouse table stays)");
                self.let_go(&key, s, "opted out by its config table row")
                    .await?;
                changed = true;
            }
        }
        if !changed {
            return Ok(());
        }
        self.scope_changed();
        let (pinned, config) = (&self.scope.pinned, self.settings.config_key());
        self.catalog
            .interest
            .retain(|k| pinned.contains(k) || k == config);
        if added {
            self.refresh_tables(s, None).await?;
        } else if !rules_changed.is_empty() {
            let only: BTreeSet<String> = rules_changed.into_iter().collect();
            self.refresh_tables(s, Some(&only)).await?;
        }
        self.toast_catalog_now(c.lsn, c.end).await?;
        self.start_loads();
        Ok(())
    }
}
