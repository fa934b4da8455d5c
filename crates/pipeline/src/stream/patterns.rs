//! Tables the config file takes by pattern (`[table."public.*"]`,
//! `[table."~regex"]`): the ones the catalog holds when the stream first
//! reads it, and the ones a commit creates later, taken at that commit so
//! its own rows stream too. Each streams as a table pinned by name would,
//! with the pattern's section as its own.

use std::collections::BTreeSet;

use walshadow_types::Lsn;

use super::{StreamError, Streamer, Table, destinations};
use crate::progress::TableProgress;

impl Streamer {
    /// Takes every table a pattern takes and the stream does not follow
    /// yet, as the catalog is at its position (`s`: where they start).
    /// Returns the keys taken.
    pub(super) async fn take_pattern_tables(
        &mut self,
        s: Lsn,
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
                // Opted out through the config table: that row decides.
                || self.progress.tables.get(&key).is_some_and(|t| t.opted_in)
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
            let dest = self
                .progress
                .tables
                .get(&key)
                .map(|t| t.destination.clone())
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| destinations::default_destination(&key));
            if let Some(reason) = self.destination_refused(&key, &dest) {
                tracing::error!(table = %key, pattern = %pattern_key, "not taken by the pattern: {reason}; pin it by name with destination = \"…\", or exclude it");
                self.scope.refused_by_pattern.insert(key);
                continue;
            }
            let load = walshadow_config::InitialLoad::parse(config.initial_load.as_deref())
                .unwrap_or(walshadow_config::InitialLoad::None);
            tracing::info!(table = %key, pattern = %pattern_key, s = %s, initial_load = load.as_str(), destination = %dest, "table taken by a pattern");
            self.settings.tables.insert(key.clone(), config);
            self.settings.by_pattern.insert(key.clone(), pattern_key);
            self.scope.pinned.insert(key.clone());
            let first_seen = !self.progress.tables.contains_key(&key);
            let entry = self
                .progress
                .tables
                .entry(key.clone())
                .or_insert_with(|| TableProgress::new(dest.clone(), s));
            entry.destination = dest;
            entry.opted_out = None;
            self.tables.insert(key.clone(), Table::default());
            if first_seen && load != walshadow_config::InitialLoad::None {
                self.backfills.request(&key, load.as_str(), s)?;
            }
            taken.insert(key);
        }
        if !taken.is_empty() {
            self.scope_changed();
        }
        Ok(taken)
    }

    /// Commit `c` made relation files: a table it created (or renamed
    /// into a pattern) is taken at its own commit, before its rows are
    /// applied, with the catalog moved to the commit.
    pub(super) async fn take_created_tables(&mut self, end: Lsn) -> Result<(), StreamError> {
        if self.settings.patterns.is_empty()
            || !self
                .catalog
                .committing
                .iter()
                .any(|x| self.catalog.created_files.contains_key(x))
        {
            return Ok(());
        }
        // The shadow moves to this commit: rows of earlier commits become
        // durable first, as for any catalog refresh.
        if self.positions.any_changed_since_durable() {
            self.flush_all().await?;
            self.write_progress()?;
        }
        self.connect_relations().await?.catalog_changed(end);
        let taken = self.take_pattern_tables(end).await?;
        if !taken.is_empty() {
            self.refresh_tables(end, Some(&taken)).await?;
            self.start_loads();
        }
        Ok(())
    }
}
