//! What the stream takes from the config file, read once at its start:
//! `[clickhouse]`, `[stream]`, `[state]`, `[backfill]`, `[backup]`, the config table
//! of `[source]` and the `[table]` pins. Nothing later reads the file.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use walshadow_config::{
    BackfillConfig, BackupConfig, ClickHouseConfig, Config, SettingValue, SourceConfig, TableConfig,
};
use walshadow_emitter::{BatchConfig, ColumnRules, MetaColumns, TableEngine, TableSettings};
use walshadow_txn::AssemblerConfig;
use walshadow_wal_reader::replication::ConnConfig;

use super::StreamError;
use super::flush::FlushRule;

/// See the module doc.
#[derive(Debug, Clone)]
pub struct StreamSettings {
    pub(super) clickhouse: ClickHouseConfig,
    pub(super) meta: MetaColumns,
    pub(super) batch: BatchConfig,
    pub(super) flush: FlushRule,
    pub(super) assembler: AssemblerConfig,
    /// The source as `[source] url` names it (loads and TOAST reads connect
    /// to it; the stream itself reads the feed).
    pub(super) source: ConnConfig,
    /// `[source]`: the config table and `config_table_allow`.
    pub(super) source_config: SourceConfig,
    pub(super) tables: BTreeMap<String, TableConfig>,
    /// `[table]` sections naming tables by pattern.
    pub(super) patterns: Vec<walshadow_config::pattern::TablePattern>,
    /// Tables in `tables` that a pattern took, with the pattern's key.
    pub(super) by_pattern: BTreeMap<String, String>,
    pub(super) backfill: BackfillConfig,
    pub(super) state_dir: PathBuf,
    pub(super) spill_dir: PathBuf,
    /// `[stream] memory_mb`, in bytes.
    pub(super) memory_bytes: usize,
    pub(super) toast_cache_mb: usize,
    /// `[backup]`: the store `object_store` loads read.
    pub(super) backup: Option<BackupConfig>,
    /// `init`'s xid horizon: `copy` and `base_backup` loads read once no
    /// transaction below it runs (`walshadow_backfill::snapshot`).
    pub(super) xid_horizon: Option<u64>,
}

impl StreamSettings {
    /// With `init`'s xid horizon: loads read once no transaction below it
    /// runs (`walshadow_backfill::snapshot`).
    pub fn with_xid_horizon(mut self, horizon: Option<u64>) -> StreamSettings {
        self.xid_horizon = horizon;
        self
    }

    /// One of `n` databases' streams, which share `[stream] memory_mb`
    /// and `toast_cache_mb` evenly (each has its own assembler, loads and
    /// TOAST mirror).
    pub fn sharing_memory(mut self, n: usize) -> StreamSettings {
        let n = n.max(1);
        self.memory_bytes /= n;
        self.assembler.memory_budget_bytes /= n;
        self.toast_cache_mb = (self.toast_cache_mb / n).max(1);
        self
    }

    /// The stream's settings; refuses a config without `[clickhouse]` or
    /// with a source URL that does not parse.
    pub fn new(config: &Config) -> Result<StreamSettings, StreamError> {
        let ch = config
            .clickhouse
            .clone()
            .ok_or_else(|| StreamError::State("no [clickhouse] section".into()))?;
        let mut source = ConnConfig::from_url(&config.source.url)
            .map_err(|e| StreamError::State(e.to_string()))?;
        if let Some(db) = &config.source.database {
            source.dbname = Some(db.clone());
        }
        let memory_bytes = config.stream.memory_mb << 20;
        Ok(StreamSettings {
            meta: MetaColumns {
                lsn: ch.lsn_column.clone(),
                seq: ch.seq_column.clone(),
                xid: ch.xid_column.clone(),
                commit_time: ch.commit_time_column.clone(),
                is_deleted: ch.deleted_column.clone(),
                ..MetaColumns::default()
            },
            batch: BatchConfig {
                max_rows: ch.batch_rows,
                max_bytes: ch.batch_mb << 20,
            },
            flush: FlushRule {
                max_age: Duration::from_millis(ch.batch_ms),
                idle_gap: (ch.idle_flush_ms > 0).then(|| Duration::from_millis(ch.idle_flush_ms)),
            },
            assembler: AssemblerConfig {
                memory_budget_bytes: memory_bytes,
                spill_dir: config.state.spill_dir(),
            },
            clickhouse: ch,
            source,
            source_config: config.source.clone(),
            tables: config.tables.clone(),
            patterns: config.patterns.clone(),
            by_pattern: BTreeMap::new(),
            backfill: config.backfill.clone(),
            state_dir: config.state.dir.clone(),
            spill_dir: config.state.spill_dir(),
            memory_bytes,
            toast_cache_mb: config.stream.toast_cache_mb,
            backup: config.backup.clone(),
            xid_horizon: None,
        })
    }

    /// The tables pinned in the config file.
    pub(super) fn toml_tables(&self) -> BTreeSet<String> {
        self.tables.keys().cloned().collect()
    }

    /// How the ClickHouse table of `key` is created: a pinned table's
    /// `engine`, `partition_by`, `order_by` and `settings`, else the
    /// defaults.
    pub(super) fn table_settings(&self, key: &str) -> TableSettings {
        let Some(t) = self.tables.get(key) else {
            return TableSettings::default();
        };
        TableSettings {
            engine: match t.engine {
                walshadow_config::TableEngine::ReplacingMergeTree => TableEngine::Replacing,
                walshadow_config::TableEngine::ReplicatedReplacingMergeTree => {
                    TableEngine::Replicated
                }
                walshadow_config::TableEngine::SharedReplacingMergeTree => TableEngine::Shared,
            },
            partition_by: t.partition_by.clone(),
            order_by: t.order_by.clone(),
            extra: t
                .settings
                .iter()
                .map(|(name, value)| {
                    let literal = match value {
                        SettingValue::Bool(b) => u8::from(*b).to_string(),
                        SettingValue::Int(n) => n.to_string(),
                        SettingValue::Text(s) => walshadow_emitter::quote_string(s),
                    };
                    (name.clone(), literal)
                })
                .collect(),
            ..TableSettings::default()
        }
    }

    /// The column rules of the tables pinned in the config file that have
    /// any.
    pub(super) fn column_rules(&self) -> HashMap<String, ColumnRules> {
        crate::scope::column_rules(&self.tables)
    }

    /// `schema.name` of the config table.
    pub(super) fn config_key(&self) -> &str {
        &self.source_config.config_table
    }
}

/// What a reloaded config file changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// Applied now, each as `[section] key: old → new`.
    pub applied: Vec<String>,
    /// Changed in the file, applied at the next start.
    pub needs_restart: Vec<String>,
    /// A new ClickHouse client was made (the endpoint, credentials or TLS).
    pub new_client: bool,
    /// The pattern sections changed: the catalog is looked at again.
    pub patterns_changed: bool,
    /// `[table."s.t"]` sections added (with their section) and removed,
    /// applied at the next commit boundary.
    pub pins_added: Vec<(String, TableConfig)>,
    pub pins_removed: Vec<String>,
}

impl StreamSettings {
    /// What differs in `new`: what the stream applies while it runs (the
    /// batch and flush settings, ClickHouse's endpoint, credentials and
    /// TLS), and what waits for a restart (everything else it reads).
    pub(super) fn reload_plan(&self, new: &StreamSettings) -> Reloaded {
        let mut r = Reloaded::default();
        let (o, n) = (&self.clickhouse, &new.clickhouse);
        macro_rules! compare {
            ($into:ident: $($field:ident),*) => {$(
                if o.$field != n.$field {
                    r.$into.push(format!(
                        "[clickhouse] {}: {:?} → {:?}",
                        stringify!($field), o.$field, n.$field
                    ));
                }
            )*};
        }
        compare!(applied: url, user, password_file, ca_file, client_cert, client_key,
            insecure_skip_tls_verify, batch_rows, batch_mb, batch_ms, idle_flush_ms,
            insert_concurrency, request_timeout_s);
        if o.password != n.password {
            r.applied.push("[clickhouse] password: changed".into());
        }
        compare!(needs_restart: database, lsn_column, seq_column, xid_column,
            commit_time_column, deleted_column, cluster, distributed_suffix);
        for key in self
            .tables
            .keys()
            .filter(|k| !new.tables.contains_key(*k) && !self.by_pattern.contains_key(*k))
        {
            r.applied.push(format!(
                "[table.{key:?}]: removed: no longer streamed from the next commit boundary (its ClickHouse table stays)"
            ));
            r.pins_removed.push(key.clone());
        }
        if self.patterns != new.patterns {
            r.applied.push(
                "[table] patterns: the tables they take now are taken at the next commit \
                 boundary (a table they no longer take streams on until a restart)"
                    .into(),
            );
            r.patterns_changed = true;
        }
        for (key, t) in &new.tables {
            match self
                .tables
                .get(key)
                .filter(|_| !self.by_pattern.contains_key(key))
            {
                None if !self.tables.contains_key(key) => {
                    r.applied.push(format!(
                        "[table.{key:?}]: added: streamed from the next commit boundary, its rows loaded with its initial_load (copy in place of a backup mode)"
                    ));
                    r.pins_added.push((key.clone(), t.clone()));
                }
                // Taken by a pattern now: the pin's own section waits.
                None => r.needs_restart.push(format!("[table.{key:?}]: added")),
                Some(old) if old != t => r.needs_restart.push(format!("[table.{key:?}]: changed")),
                Some(_) => {}
            }
        }
        let sections = [
            ("[source]", self.source_config != new.source_config),
            ("[backfill]", self.backfill != new.backfill),
            ("[backup]", self.backup != new.backup),
            (
                "[stream]",
                self.memory_bytes != new.memory_bytes || self.toast_cache_mb != new.toast_cache_mb,
            ),
            (
                "[state]",
                self.state_dir != new.state_dir || self.spill_dir != new.spill_dir,
            ),
        ];
        for (section, changed) in sections {
            if changed {
                r.needs_restart.push(format!("{section}: changed"));
            }
        }
        r
    }

    /// Whether `new` makes another ClickHouse client: endpoint,
    /// credentials, TLS or request timeout.
    pub(super) fn client_differs(&self, new: &StreamSettings) -> bool {
        let (o, n) = (&self.clickhouse, &new.clickhouse);
        (&o.url, &o.user, &o.password, &o.password_file, &o.ca_file)
            != (&n.url, &n.user, &n.password, &n.password_file, &n.ca_file)
            || (
                &o.client_cert,
                &o.client_key,
                o.insecure_skip_tls_verify,
                o.request_timeout_s,
            ) != (
                &n.client_cert,
                &n.client_key,
                n.insecure_skip_tls_verify,
                n.request_timeout_s,
            )
    }

    /// Takes what [`StreamSettings::reload_plan`] applies live from `new`.
    pub(super) fn apply_live(&mut self, new: &StreamSettings) {
        self.clickhouse = self.clickhouse.with_live_from(&new.clickhouse);
        self.batch = new.batch.clone();
        self.flush = new.flush;
        self.patterns = new.patterns.clone();
    }
}
