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
    pub(super) backfill: BackfillConfig,
    pub(super) state_dir: PathBuf,
    pub(super) spill_dir: PathBuf,
    /// `[stream] memory_mb`, in bytes.
    pub(super) memory_bytes: usize,
    pub(super) toast_cache_mb: usize,
    /// `[backup]`: the store `object_store` loads read.
    pub(super) backup: Option<BackupConfig>,
}

impl StreamSettings {
    /// The stream's settings; refuses a config without `[clickhouse]` or
    /// with a source URL that does not parse.
    pub fn new(config: &Config) -> Result<StreamSettings, StreamError> {
        let ch = config
            .clickhouse
            .clone()
            .ok_or_else(|| StreamError::State("no [clickhouse] section".into()))?;
        let source = ConnConfig::from_url(&config.source.url)
            .map_err(|e| StreamError::State(e.to_string()))?;
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
            backfill: config.backfill.clone(),
            state_dir: config.state.dir.clone(),
            spill_dir: config.state.spill_dir(),
            memory_bytes,
            toast_cache_mb: config.stream.toast_cache_mb,
            backup: config.backup.clone(),
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
