//! Configuration: the TOML file every command reads (`--config FILE`).
//!
//! ```toml
//! [source]
//! url  = "postgres://walshadow@db:5432/postgres?sslmode=verify-full&sslrootcert=/etc/walshadow/ca.pem"
//! slot = "walshadow"                       # physical slot, created by `walshadow init`
//! # config_table = "walshadow.tables"       # runtime opt-in/out rows (created by init)
//! # config_table_allow = ["public.*"]        # what its rows may opt in (default: any table)
//!
//! [shadow]
//! data_dir = "/var/lib/walshadow/shadow"    # the catalog-only standby's PGDATA
//! pg_bin   = "/usr/lib/postgresql/15/bin"   # binaries of the source's major
//! # run_as = "postgres"                     # when walshadow runs as root
//! # checkpoint_every_mb = 64                # filter-state checkpoint every N MB of WAL
//! # checkpoint_every_secs = 30              # ... or every T seconds, whichever first
//!
//! [state]
//! dir = "/var/lib/walshadow/state"          # progress, filtered WAL, feeder socket
//! # spill_dir = "/var/lib/walshadow/spill"  # default <state.dir>/spill
//!
//! [clickhouse]
//! url = "http://127.0.0.1:8123"             # ClickHouse's HTTP interface
//! database = "app"                          # destination database (created if missing)
//! # user = "default"
//! # password_file = "/etc/walshadow/clickhouse.pass"  # 0600; or WALSHADOW_CLICKHOUSE_PASSWORD
//! # password = ""                          # clear text here: prefer the two above
//! # ca_file = "/etc/walshadow/clickhouse-ca.pem"  # https: trust these CAs, not the system's
//! # client_cert = "/etc/walshadow/client.pem"     # https: a client certificate ...
//! # client_key = "/etc/walshadow/client.key"      # ... and its key (0600)
//! # insecure_skip_tls_verify = false       # https without checking the certificate: never in production
//! # batch_rows = 100000                     # flush a table's batch at N rows,
//! # batch_mb = 16                           # ... or N MB,
//! # batch_ms = 1000                         # ... or after N ms, whichever first
//! # idle_flush_ms = 20                      # once no WAL waits: flush, at most every N ms (0: off)
//! # insert_concurrency = 4                  # tables of one flush inserted at once
//! # request_timeout_s = 120                 # bound on one HTTP request (an insert attempt, DDL)
//! # cluster = "prod"                        # every DDL ON CLUSTER, tables Replicated* (an Atomic database)
//! # distributed_suffix = "_all"             # with a cluster: a Distributed table <dest>_all per table, for reads
//! # lsn_column = "_lsn"                     # commit LSN (UInt64)
//! # seq_column = "_seq"                     # the change's own LSN (UInt64)
//! # xid_column = "_xid"                     # transaction id (UInt32)
//! # commit_time_column = "_commit_time"     # commit timestamp (DateTime64(6,'UTC'))
//! # deleted_column = "_is_deleted"          # 1 for a deleted row (UInt8)
//!
//! [stream]
//! # memory_mb = 256                         # transaction buffers past this spill to disk
//! # toast_cache_mb = 64                      # cache of the TOAST chunk mirror (on disk)
//!
//! [metrics]                                 # optional; absent = no endpoint
//! listen = "127.0.0.1:9187"                 # Prometheus scrapes GET /metrics here
//!
//! [backfill]
//! # workers = 2                             # connections per `copy` load (block ranges)
//! # max_attempts = 5                        # fresh snapshots before a load stays pending
//! # batch_rows = 50000                      # rows per ClickHouse insert of a load
//! # chunk_blocks = 1024                     # 8 KiB blocks per COPY: the resume granularity
//! # backup_max_rate_kb = 0                  # base_backup: MAX_RATE in kB/s (0 = unthrottled; 32..1048576)
//! # backup_checkpoint = "spread"            # base_backup: "spread" (gentle, can wait minutes) or "fast"
//!
//! [table."public.orders"]                   # a pinned table: streams from the start
//! # initial_load = "copy"                   # none (default) | copy | base_backup | object_store: load its rows first
//! # exclude_columns = ["blob"]              # columns left out of ClickHouse and of every load
//! # include_columns = ["name", "email"]     # or: the only columns kept (and the key's)
//! # unsupported_columns = "stop"            # a column walshadow cannot decode: stop the table, or "skip" the column
//! # out_of_range = "stop"                   # a value ClickHouse cannot hold (numeric NaN, dates outside 1900-2299, infinity): stop | null | clamp | string
//! # out_of_range_columns = { born = "clamp" } # the same per column, over the table's
//! # rename_columns = { ts = "created_at" }  # ClickHouse column names, by source column
//! # column_types = { doc = "JSON", ts = "DateTime64(3)" } # ClickHouse types instead of the mapping's: String | JSON | DateTime64(0-6) | Point | Polygon | …
//! # engine = "ReplacingMergeTree"          # or ReplicatedReplacingMergeTree, SharedReplacingMergeTree
//! # partition_by = "intDiv(id, 1000000)"    # the ClickHouse table's PARTITION BY (over key columns), when walshadow creates it
//! # order_by = ["tenant_id", "id"]          # its ORDER BY: the replica identity columns in another order
//! # settings = { index_granularity = 8192 } # its SETTINGS (beside walshadow's own)
//! ```
//!
//! Unknown keys are errors (a typo must not silently fall back to a
//! default); every error names the key and what to write instead. Tables
//! are also opted in and out at runtime by rows of the source-side config
//! table (`[source] config_table`), read from the WAL.

pub mod pattern;

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Why a config file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    // The cause is in the message, not a `source`: a chain printed whole
    // would say it twice.
    #[error("reading config file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config file {path}: {key}: {problem}")]
    Invalid {
        path: PathBuf,
        key: &'static str,
        problem: String,
    },
}

impl ConfigError {
    /// The same error, said of file `path`.
    fn in_file(self, path: &Path) -> ConfigError {
        match self {
            ConfigError::Invalid { key, problem, .. } => ConfigError::Invalid {
                path: path.to_owned(),
                key,
                problem,
            },
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.to_owned(),
                message,
            },
            e => e,
        }
    }

    /// The same error, said of database `db`'s view of the file.
    fn of_database(self, db: &str) -> ConfigError {
        match self {
            ConfigError::Invalid { path, key, problem } => ConfigError::Invalid {
                path,
                key,
                problem: format!("database {db:?}: {problem}"),
            },
            e => e,
        }
    }
}

/// The first line of secret file `file`, which only its owner may read.
fn read_secret(file: &Path) -> Result<String, String> {
    Ok(read_private(file)?
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned())
}

/// `[backup] credentials_file`: `AWS_ACCESS_KEY_ID=…`,
/// `AWS_SECRET_ACCESS_KEY=…` and optionally `AWS_SESSION_TOKEN=…` lines
/// (`#` comments and blank lines skipped), readable by its owner only.
fn read_s3_credentials(file: &Path) -> Result<S3Credentials, String> {
    let text = read_private(file)?;
    let mut c = S3Credentials::default();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| format!("{} line {}: expected KEY=value", file.display(), n + 1))?;
        let value = value.trim().trim_matches('"').to_owned();
        match key.trim() {
            "AWS_ACCESS_KEY_ID" => c.access_key_id = value,
            "AWS_SECRET_ACCESS_KEY" => c.secret_access_key = value,
            "AWS_SESSION_TOKEN" => c.session_token = Some(value),
            other => {
                return Err(format!(
                    "{} line {}: unknown key {other:?} (AWS_ACCESS_KEY_ID, \
                     AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN)",
                    file.display(),
                    n + 1
                ));
            }
        }
    }
    if c.access_key_id.is_empty() || c.secret_access_key.is_empty() {
        return Err(format!(
            "{}: give both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
            file.display()
        ));
    }
    Ok(c)
}

/// A file readable by its owner only, whole.
fn read_private(file: &Path) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(file).map_err(|e| format!("{}: {e}", file.display()))?;
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{} is readable by others (mode {:o}): chmod 600 it",
            file.display(),
            meta.mode() & 0o777
        ));
    }
    std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))
}

/// The environment variable the ClickHouse password may come from.
pub const CLICKHOUSE_PASSWORD_ENV: &str = "WALSHADOW_CLICKHOUSE_PASSWORD";

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub source: SourceConfig,
    pub shadow: ShadowConfig,
    pub state: StateConfig,
    /// Where rows go; without it `run` only keeps the shadow fed.
    #[serde(default)]
    pub clickhouse: Option<ClickHouseConfig>,
    #[serde(default)]
    pub stream: StreamConfig,
    #[serde(default)]
    pub backfill: BackfillConfig,
    /// The Prometheus endpoint; without it `run` serves none.
    #[serde(default)]
    pub metrics: Option<MetricsConfig>,
    /// The operator's backup store (`walshadow backup`); credentials for it
    /// live here, never in a source table.
    #[serde(default)]
    pub backup: Option<BackupConfig>,
    /// Pinned tables by `schema.name` (one table each; pattern sections are
    /// in `patterns`).
    #[serde(default, rename = "table")]
    pub tables: std::collections::BTreeMap<String, TableConfig>,
    /// `[table]` sections that name tables by pattern, in key order.
    #[serde(skip)]
    pub patterns: Vec<pattern::TablePattern>,
    #[serde(default)]
    pub log: LogConfig,
    /// `[database."name"]`: the tables and config table of one database
    /// of `[source] databases` (see [`Config::database_view`]).
    #[serde(default, rename = "database")]
    pub databases: std::collections::BTreeMap<String, DatabaseConfig>,
}

/// `[database."name"]`: what belongs to one database of `[source]
/// databases`. The url's database keeps the top-level `[table]` sections
/// and `[source]`'s config table; a section of its own may add to them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// The config table in this database; `[source] config_table` when
    /// absent.
    #[serde(default)]
    pub config_table: Option<String>,
    /// `[source] config_table_allow` for this database's config table;
    /// `[source]`'s when absent.
    #[serde(default)]
    pub config_table_allow: Option<Vec<String>>,
    /// This database's tables, as top-level `[table]` sections are the
    /// url database's: `[database."crm".table."public.orders"]`.
    #[serde(default, rename = "table")]
    pub tables: std::collections::BTreeMap<String, TableConfig>,
}

/// `[source] databases = ["*"]`: every database of the cluster that takes
/// connections and is not a template, those created later included.
pub const EVERY_DATABASE: &str = "*";

/// The placeholder `[clickhouse] database` names each source database's
/// ClickHouse database with, when several are followed.
pub const DATABASE_PLACEHOLDER: &str = "{db}";

/// `[log]`: what `run` logs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// Which events are written, as `WALSHADOW_LOG` takes them (`info`,
    /// `debug`, `warn,walshadow_pipeline=debug`); `info` when absent.
    /// `WALSHADOW_LOG`, when set, wins. A reload applies it at once.
    pub level: Option<String>,
}

/// `[clickhouse]`: the destination.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClickHouseConfig {
    /// `http://host:8123` (or https).
    pub url: String,
    pub database: String,
    #[serde(default = "default_ch_user")]
    pub user: String,
    /// Clear text in the file; prefer `password_file` or the
    /// `WALSHADOW_CLICKHOUSE_PASSWORD` environment variable.
    #[serde(default)]
    pub password: String,
    /// A file holding the password (its first line), readable by its owner
    /// only; read when the config is loaded, into `password`.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// For an `https://` url: PEM certificates of the CAs to trust instead
    /// of the system's.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// For an `https://` url: a PEM certificate chain (with `client_key`,
    /// 0600) presented when ClickHouse asks for a client certificate.
    #[serde(default)]
    pub client_cert: Option<PathBuf>,
    #[serde(default)]
    pub client_key: Option<PathBuf>,
    /// Accept any certificate ClickHouse presents (encrypted, but not
    /// authenticated); warned about at every start.
    #[serde(default)]
    pub insecure_skip_tls_verify: bool,
    #[serde(default = "default_batch_rows")]
    pub batch_rows: usize,
    #[serde(default = "default_batch_mb")]
    pub batch_mb: usize,
    #[serde(default = "default_batch_ms")]
    pub batch_ms: u64,
    /// When the stream has decoded all the WAL it has received and a batch
    /// holds rows, flush once the last flush is this many ms old (commits
    /// become visible without waiting for `batch_ms`); 0 turns it off.
    #[serde(default = "default_idle_flush_ms")]
    pub idle_flush_ms: u64,
    /// How many tables of one flush are inserted at once. Progress moves
    /// once all of them are in, whatever the order they finish in.
    #[serde(default = "default_insert_concurrency")]
    pub insert_concurrency: usize,
    /// Bound on one HTTP request to ClickHouse, in seconds (an insert
    /// attempt, DDL); a slower one is retried.
    #[serde(default = "default_request_timeout_s")]
    pub request_timeout_s: u64,
    /// A cluster in the servers' `remote_servers`: every table walshadow
    /// makes, alters, truncates, swaps or drops, it does `ON CLUSTER`,
    /// with a replicated engine. Not used over a `Replicated` database,
    /// which replicates DDL itself.
    #[serde(default)]
    pub cluster: Option<String>,
    /// With a cluster (or a Replicated database): beside each table a
    /// `Distributed` table of this suffix reading it on every shard.
    #[serde(default)]
    pub distributed_suffix: Option<String>,
    #[serde(default = "default_lsn_column")]
    pub lsn_column: String,
    #[serde(default = "default_seq_column")]
    pub seq_column: String,
    #[serde(default = "default_xid_column")]
    pub xid_column: String,
    #[serde(default = "default_commit_time_column")]
    pub commit_time_column: String,
    #[serde(default = "default_deleted_column")]
    pub deleted_column: String,
}

fn default_request_timeout_s() -> u64 {
    120
}

/// `[stream]`: the streaming pipeline's resources.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamConfig {
    /// Memory for buffered transactions, in MB; past it the largest spill
    /// to `state.spill_dir`.
    #[serde(default = "default_memory_mb")]
    pub memory_mb: usize,
    /// Cache of the TOAST chunk mirror (`<state dir>/toast-mirror.redb`),
    /// in MB; the mirror itself lives on disk.
    #[serde(default = "default_toast_cache_mb")]
    pub toast_cache_mb: usize,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            memory_mb: default_memory_mb(),
            toast_cache_mb: default_toast_cache_mb(),
        }
    }
}

/// `[metrics]`: the Prometheus scrape endpoint of `walshadow run`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// `IP:port` serving `GET /metrics`; `0.0.0.0:9187` (or `[::]:9187`)
    /// for every interface.
    #[serde(deserialize_with = "socket_addr")]
    pub listen: std::net::SocketAddr,
    /// `GET /readyz` answers 200 while the stream is this many seconds
    /// behind the source or less (and ClickHouse takes its requests).
    #[serde(default = "default_ready_max_lag_secs")]
    pub ready_max_lag_secs: u64,
    /// A file (0600; its first line) with the bearer token `GET /metrics`
    /// then asks for; read when the config is loaded, into `token`.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    #[serde(skip)]
    pub token: Option<String>,
}

fn default_ready_max_lag_secs() -> u64 {
    300
}

/// An `IP:port`; host names are refused rather than resolved, so the
/// address bound is the one written.
fn socket_addr<'de, D: serde::Deserializer<'de>>(d: D) -> Result<std::net::SocketAddr, D::Error> {
    let text = String::deserialize(d)?;
    text.parse().map_err(|_| {
        serde::de::Error::custom(format!(
            "{text:?}: expected IP:port such as \"127.0.0.1:9187\" or \"[::]:9187\" (host names are not resolved)"
        ))
    })
}

/// `[table."schema.name"]`: one pinned table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableConfig {
    /// How the rows the table had before streaming began are loaded:
    /// `none` (default), `copy`, `base_backup`, `object_store`. Applies
    /// once, when the table is first seen (at the resume position).
    #[serde(default)]
    pub initial_load: Option<String>,
    /// The ClickHouse table it streams into (in `clickhouse.database`);
    /// default `name` in `public`, `schema__name` elsewhere.
    #[serde(default)]
    pub destination: Option<String>,
    /// Columns left out of the ClickHouse table and of every load: not
    /// decoded, not written. A replica identity column cannot be.
    #[serde(default)]
    pub exclude_columns: Vec<String>,
    /// When given, the only columns replicated besides the replica
    /// identity's (which always are); the others are left out as if
    /// excluded.
    #[serde(default)]
    pub include_columns: Vec<String>,
    /// A column of a type walshadow cannot replicate: `stop` the table
    /// (default, naming the column) or `skip` the column.
    #[serde(default)]
    pub unsupported_columns: UnsupportedColumns,
    /// A value the column's ClickHouse type cannot hold (numeric NaN in a
    /// `Decimal`, a date or timestamp that is infinite or outside
    /// 1900–2299): what every column of the table writes.
    #[serde(default)]
    pub out_of_range: OutOfRange,
    /// The same per column, over `out_of_range`.
    #[serde(default)]
    pub out_of_range_columns: std::collections::BTreeMap<String, OutOfRange>,
    /// ClickHouse column names by source column name: the ClickHouse
    /// table's column is named so (a key column too).
    #[serde(default)]
    pub rename_columns: std::collections::BTreeMap<String, String>,
    /// ClickHouse types by source column name, instead of walshadow's
    /// mapping: `"String"` (PostgreSQL's text, any column), `"JSON"` (a
    /// `json` or `jsonb` column), `"DateTime64(p)"` (a timestamp column,
    /// `p` from 0 to 6, values floored), or a ClickHouse geo type for a
    /// PostGIS column of that shape (`"Point"`, `"Ring"`, `"LineString"`,
    /// `"MultiLineString"`, `"Polygon"`, `"MultiPolygon"`).
    #[serde(default, deserialize_with = "column_types")]
    pub column_types: std::collections::BTreeMap<String, walshadow_types::TypeOverride>,
    /// The engine of the ClickHouse table walshadow creates, of the
    /// `ReplacingMergeTree` family its versions and deletes need.
    #[serde(default)]
    pub engine: TableEngine,
    /// `PARTITION BY` of the ClickHouse table walshadow creates (a
    /// ClickHouse expression over its columns).
    #[serde(default)]
    pub partition_by: Option<String>,
    /// `ORDER BY` of the ClickHouse table walshadow creates: the replica
    /// identity's columns in the order given (empty: the identity's own).
    #[serde(default)]
    pub order_by: Vec<String>,
    /// `SETTINGS` of the ClickHouse table walshadow creates, beside its own.
    #[serde(default)]
    pub settings: std::collections::BTreeMap<String, SettingValue>,
    /// A pattern section only: tables it does not take, by name or by
    /// pattern (`"public.tmp_*"`, `"~_old$"`), whatever it matches.
    #[serde(default)]
    pub exclude: Vec<String>,
}

/// `column_types`: each value a [`walshadow_types::TypeOverride`]'s spelling.
fn column_types<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<std::collections::BTreeMap<String, walshadow_types::TypeOverride>, D::Error> {
    let raw = std::collections::BTreeMap::<String, String>::deserialize(d)?;
    raw.into_iter()
        .map(
            |(column, text)| match walshadow_types::TypeOverride::parse(&text) {
                Some(t) => Ok((column, t)),
                None => Err(serde::de::Error::custom(format!(
                    "column {column:?}: {text:?} is not a type walshadow writes a column as: \
                 \"String\", \"JSON\" (json, jsonb), \"DateTime64(p)\" with p from 0 to 6 \
                 (timestamp, timestamptz), or \"Point\", \"Ring\", \"LineString\", \
                 \"MultiLineString\", \"Polygon\", \"MultiPolygon\" (PostGIS geometry, geography)"
                ))),
            },
        )
        .collect()
}

/// `engine`: which `ReplacingMergeTree` walshadow creates a table with.
/// Only this family collapses a row's versions by `_version` and drops
/// deleted rows by `_is_deleted`, which the replication relies on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum TableEngine {
    /// One server's table (default).
    #[default]
    ReplacingMergeTree,
    /// A replicated table: Keeper path `/clickhouse/tables/{uuid}/{shard}`
    /// and replica `{replica}`, from the server's macros (`{uuid}` keeps
    /// the staging copies of loads apart).
    ReplicatedReplacingMergeTree,
    /// ClickHouse Cloud's (which also turns `ReplacingMergeTree` into it).
    SharedReplacingMergeTree,
}

/// A ClickHouse table setting's value.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum SettingValue {
    Bool(bool),
    Int(i64),
    Text(String),
}

/// Table settings walshadow sets itself and relies on.
const OWN_TABLE_SETTINGS: [&str; 3] = [
    "non_replicated_deduplication_window",
    "replicated_deduplication_window",
    "allow_nullable_key",
];

/// `out_of_range`: what a column writes for a value its ClickHouse type
/// cannot hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutOfRange {
    /// The table stops; the message names the column and these options.
    #[default]
    Stop,
    /// NULL (the ClickHouse column is Nullable).
    Null,
    /// The nearest value the type holds (1900-01-01, 2299-12-31, ±99…9);
    /// NaN has none and still stops.
    Clamp,
    /// The column is a String of PostgreSQL's text.
    String,
}

/// `unsupported_columns`: what a column of a type walshadow cannot
/// replicate does to its table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnsupportedColumns {
    /// The table stops; the message names the column and these options.
    #[default]
    Stop,
    /// The column is left out, as if excluded; status names it.
    Skip,
}

impl TableConfig {
    /// The destination of table `key` pinned with this section.
    pub fn destination_of(&self, key: &str) -> Option<String> {
        match &self.destination {
            Some(d) => Some(d.clone()),
            None => {
                split_table_name(key).map(|(s, n)| walshadow_types::default_destination(&s, &n))
            }
        }
    }
}

/// The config table's DDL (`walshadow init` runs it): one row per table
/// opted in (`replicate`) with its `initial_load`.
pub fn config_table_sql(schema: &str, name: &str) -> String {
    let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let (s, t) = (q(schema), q(name));
    format!(
        "CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.{t} (
    schema_name  text NOT NULL,
    table_name   text NOT NULL,
    replicate    boolean NOT NULL DEFAULT true,
    initial_load text CHECK (lower(initial_load) IN ('none', 'copy', 'base_backup', 'object_store')),
    destination  text,
    resync       bigint NOT NULL DEFAULT 0,
    exclude_columns text[],
    include_columns text[],
    unsupported_columns text CHECK (lower(unsupported_columns) IN ('stop', 'skip')),
    out_of_range text CHECK ({OUT_OF_RANGE_CHECK}),
    out_of_range_columns jsonb CHECK ({OUT_OF_RANGE_COLUMNS_CHECK}),
    rename_columns jsonb CHECK ({RENAME_COLUMNS_CHECK}),
    column_types jsonb CHECK ({COLUMN_TYPES_CHECK}),
    PRIMARY KEY (schema_name, table_name)
);
ALTER TABLE {s}.{t} ADD COLUMN IF NOT EXISTS exclude_columns text[];
ALTER TABLE {s}.{t} ADD COLUMN IF NOT EXISTS include_columns text[];
ALTER TABLE {s}.{t} ADD COLUMN IF NOT EXISTS unsupported_columns text CHECK (lower(unsupported_columns) IN ('stop', 'skip'));
ALTER TABLE {s}.{t} ADD COLUMN IF NOT EXISTS out_of_range text CHECK ({OUT_OF_RANGE_CHECK});
ALTER TABLE {s}.{t} ADD COLUMN IF NOT EXISTS out_of_range_columns jsonb CHECK ({OUT_OF_RANGE_COLUMNS_CHECK});
ALTER TABLE {s}.{t} ADD COLUMN IF NOT EXISTS rename_columns jsonb CHECK ({RENAME_COLUMNS_CHECK});
ALTER TABLE {s}.{t} ADD COLUMN IF NOT EXISTS column_types jsonb CHECK ({COLUMN_TYPES_CHECK});
COMMENT ON TABLE {s}.{t} IS 'walshadow: a row per table to stream (replicate), how to load its existing rows (initial_load: none or NULL, copy, base_backup, object_store) the ClickHouse table it streams into (destination; NULL: table_name in public, schema_name__table_name elsewhere); raising resync (walshadow table resync) loads the table again and swaps it in; exclude_columns, include_columns (the only columns kept besides the key) and unsupported_columns (stop or skip) leave columns out of ClickHouse; out_of_range (stop, null, clamp, string) and out_of_range_columns (a JSON object of column to the same) say what a value ClickHouse cannot hold is written as; rename_columns (a JSON object of column to ClickHouse name) and column_types (a JSON object of column to String, JSON, DateTime64(0-6) or a geo type such as Point or MultiPolygon) shape the ClickHouse table';"
    )
}

/// The config table's check of `rename_columns`: an object of non-empty
/// names.
const RENAME_COLUMNS_CHECK: &str = "jsonb_typeof(rename_columns) = 'object' AND NOT jsonb_path_exists(rename_columns, 'strict $.* ? (@.type() != \"string\" || @ == \"\")')";
/// The config table's check of `column_types`: an object of the spellings
/// [`walshadow_types::TypeOverride::parse`] reads.
const COLUMN_TYPES_CHECK: &str = "jsonb_typeof(column_types) = 'object' AND NOT jsonb_path_exists(column_types, 'strict $.* ? (@.type() != \"string\" || !(@ like_regex \"^ *(string|json|datetime64[(] *[0-6] *[)]|point|ring|linestring|multilinestring|polygon|multipolygon) *$\" flag \"i\"))')";
/// The config table's check of `out_of_range`.
const OUT_OF_RANGE_CHECK: &str = "lower(out_of_range) IN ('stop', 'null', 'clamp', 'string')";
/// The config table's check of `out_of_range_columns`: an object whose
/// every value is one of the policies (`jsonb_path_exists` is immutable,
/// so a check may call it).
const OUT_OF_RANGE_COLUMNS_CHECK: &str = "jsonb_typeof(out_of_range_columns) = 'object' AND NOT jsonb_path_exists(out_of_range_columns, 'strict $.* ? (@.type() != \"string\" || (@ != \"stop\" && @ != \"null\" && @ != \"clamp\" && @ != \"string\"))')";

/// How a table's rows from before its opt-in are loaded (`initial_load`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InitialLoad {
    /// Nothing loaded: the table streams from its opt-in on.
    None,
    /// A snapshot read with `COPY` after the opt-in.
    Copy,
    /// From the pages of a fresh `BASE_BACKUP`, through a staging table.
    BaseBackup,
    /// From a backup in object storage (not in this release).
    ObjectStore,
}

impl InitialLoad {
    /// Parses a config value (case-insensitive; NULL or empty is `none`).
    /// An unknown value comes back as the error, for the caller's warning.
    pub fn parse(text: Option<&str>) -> Result<InitialLoad, String> {
        let t = text.map(str::trim).unwrap_or("");
        match t.to_ascii_lowercase().as_str() {
            "" | "none" => Ok(InitialLoad::None),
            "copy" => Ok(InitialLoad::Copy),
            "base_backup" => Ok(InitialLoad::BaseBackup),
            "object_store" => Ok(InitialLoad::ObjectStore),
            _ => Err(t.to_owned()),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            InitialLoad::None => "none",
            InitialLoad::Copy => "copy",
            InitialLoad::BaseBackup => "base_backup",
            InitialLoad::ObjectStore => "object_store",
        }
    }
}

/// `[backfill]`: initial loads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackfillConfig {
    /// Connections a `copy` load reads one table with (block ranges of one
    /// exported snapshot).
    #[serde(default = "default_backfill_workers")]
    pub workers: usize,
    /// Attempts of a load (a fresh snapshot each) before its entry stays
    /// pending with the error.
    #[serde(default = "default_backfill_attempts")]
    pub max_attempts: u32,
    /// Rows per ClickHouse insert of a load.
    #[serde(default = "default_backfill_batch_rows")]
    pub batch_rows: usize,
    /// Heap blocks (8 KiB) one `COPY` reads: the resume granularity (a
    /// restart reads at most this much again per worker).
    #[serde(default = "default_backfill_chunk_blocks")]
    pub chunk_blocks: u32,
    /// `base_backup` loads: the backup's `MAX_RATE` in kB/s (0: as fast as
    /// the source sends).
    #[serde(default)]
    pub backup_max_rate_kb: u32,
    /// `base_backup` loads: the checkpoint the backup starts with.
    #[serde(default)]
    pub backup_checkpoint: BackupCheckpoint,
}

/// `[backup]`: the backup store the operator's backup tool writes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupConfig {
    /// The tool that writes the store.
    pub tool: BackupTool,
    /// Where the store is: an absolute path (pgBackRest's `repo1-path`), or
    /// `s3://bucket/prefix` (barman-cloud's destination URL).
    pub repo: String,
    /// pgBackRest: the stanza of the source cluster.
    #[serde(default)]
    pub stanza: Option<String>,
    /// barman-cloud: the server name the backups and WAL are kept under.
    #[serde(default)]
    pub server_name: Option<String>,
    /// Which backup serves: `latest` (the newest) or a backup's name.
    #[serde(default = "default_backup_name")]
    pub backup: String,
    /// S3: an S3-compatible server's URL (AWS itself without).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// S3: the bucket's region.
    #[serde(default)]
    pub region: Option<String>,
    /// S3: `endpoint/bucket/key` addressing rather than `bucket.endpoint/key`.
    #[serde(default)]
    pub path_style: bool,
    /// S3: a file (0600) of `AWS_ACCESS_KEY_ID=…`, `AWS_SECRET_ACCESS_KEY=…`
    /// (and `AWS_SESSION_TOKEN=…`) lines; without it the environment's.
    #[serde(default)]
    pub credentials_file: Option<PathBuf>,
    /// Read from `credentials_file` when the config is loaded.
    #[serde(skip)]
    pub credentials: Option<S3Credentials>,
    /// Files an `object_store` load reads from the store at once.
    #[serde(default = "default_backup_parallelism")]
    pub parallelism: usize,
}

fn default_backup_parallelism() -> usize {
    4
}

/// S3 keys read from `[backup] credentials_file`.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct S3Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

// Never print the keys.
impl std::fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Credentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// The backup tools whose stores walshadow reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackupTool {
    Pgbackrest,
    BarmanCloud,
    /// `wal-g`: the store's prefix is `repo`.
    #[serde(rename = "wal-g")]
    WalG,
}

fn default_backup_name() -> String {
    "latest".into()
}

/// The checkpoint a `BASE_BACKUP` begins with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackupCheckpoint {
    /// Paced by the server's `checkpoint_completion_target`: gentle on the
    /// source; the load can wait most of `checkpoint_timeout` to start.
    #[default]
    Spread,
    /// As fast as possible: an I/O burst on the source, no wait.
    Fast,
}

fn default_backfill_chunk_blocks() -> u32 {
    1024
}

impl Default for BackfillConfig {
    fn default() -> Self {
        BackfillConfig {
            workers: default_backfill_workers(),
            max_attempts: default_backfill_attempts(),
            batch_rows: default_backfill_batch_rows(),
            chunk_blocks: default_backfill_chunk_blocks(),
            backup_max_rate_kb: 0,
            backup_checkpoint: BackupCheckpoint::Spread,
        }
    }
}

fn default_backfill_workers() -> usize {
    2
}

fn default_backfill_attempts() -> u32 {
    5
}

fn default_backfill_batch_rows() -> usize {
    50_000
}

/// A table key split in schema and name (see [`walshadow_types::table_key`]:
/// a part holding a dot or a quote is double-quoted, so `x."y.z"` and
/// `"x.y".z` are different tables).
pub fn split_table_name(key: &str) -> Option<(String, String)> {
    walshadow_types::split_table_key(key)
}

impl ClickHouseConfig {
    /// This section with what a reload applies live taken from `new`: the
    /// endpoint, credentials, TLS, timeouts, batch and flush settings.
    /// What names or shapes the tables (the database, the meta columns,
    /// the cluster) stays until a restart.
    pub fn with_live_from(&self, new: &ClickHouseConfig) -> ClickHouseConfig {
        let kept = self.clone();
        ClickHouseConfig {
            database: kept.database,
            lsn_column: kept.lsn_column,
            seq_column: kept.seq_column,
            xid_column: kept.xid_column,
            commit_time_column: kept.commit_time_column,
            deleted_column: kept.deleted_column,
            cluster: kept.cluster,
            distributed_suffix: kept.distributed_suffix,
            ..new.clone()
        }
    }
}

/// `[source]`: the PostgreSQL server walshadow replicates from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// libpq-style URL of a role with REPLICATION.
    pub url: String,
    /// Physical replication slot holding WAL for walshadow.
    #[serde(default = "default_slot")]
    pub slot: String,
    /// The config table in the source database (`schema.name`): a row per
    /// table opted in or out at runtime. `walshadow init` creates it.
    #[serde(default = "default_config_table")]
    pub config_table: String,
    /// Which tables the config table may opt in (`schema.name` patterns,
    /// `*` matching any run of characters within a part: `public.*`,
    /// `sales.order*`). Empty: any table walshadow's role can read —
    /// whoever may insert into the config table may then stream it into
    /// ClickHouse. Tables pinned in this file are not limited by it.
    #[serde(default)]
    pub config_table_allow: Vec<String>,
    /// Every source database streamed, the url's among them; empty: only
    /// the url's. Each has its own config table, `[database."name"]`
    /// tables, state and ClickHouse database (`[clickhouse] database`
    /// with `{db}`); they share the slot and the shadow.
    #[serde(default)]
    pub databases: Vec<String>,
    /// The database SQL sessions reach instead of the url's: set in a
    /// view of another database ([`Config::database_view`]), never read
    /// from the file.
    #[serde(skip)]
    pub database: Option<String>,
}

impl SourceConfig {
    /// `databases = ["*"]`.
    pub fn every_database(&self) -> bool {
        self.databases.iter().any(|d| d == EVERY_DATABASE)
    }

    /// Whether the config table may opt in table `key`.
    pub fn allows(&self, key: &str) -> bool {
        if self.config_table_allow.is_empty() {
            return true;
        }
        let Some((schema, name)) = split_table_name(key) else {
            return false;
        };
        self.config_table_allow.iter().any(|p| {
            split_table_name(p)
                .is_some_and(|(ps, pn)| wildcard_match(&ps, &schema) && wildcard_match(&pn, &name))
        })
    }
}

/// `pattern` (`*` any run of characters, `?` one) matches all of `text`.
fn wildcard_match(pattern: &str, text: &str) -> bool {
    pattern::glob(pattern, text)
}

fn default_config_table() -> String {
    "walshadow.tables".into()
}

/// `[shadow]`: the catalog-only standby walshadow runs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShadowConfig {
    pub data_dir: PathBuf,
    /// Folder with `postgres`, `pg_ctl`, `initdb`, `pg_dump` of the
    /// source's major version.
    pub pg_bin: PathBuf,
    /// Unprivileged user to run the shadow as when walshadow runs as root
    /// (PostgreSQL refuses to run as root).
    #[serde(default)]
    pub run_as: Option<String>,
    /// A checkpoint of the shadow filter's state is taken after this many
    /// MB of WAL (and at clean shutdown); the slot advances only to the
    /// last checkpoint, so this bounds the WAL a restart re-reads.
    #[serde(default = "default_checkpoint_every_mb")]
    pub checkpoint_every_mb: u64,
    /// ... or after this many seconds, whichever comes first.
    #[serde(default = "default_checkpoint_every_secs")]
    pub checkpoint_every_secs: u64,
}

/// `[state]`: where walshadow keeps what must survive a restart.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    pub dir: PathBuf,
    /// Spill files of transactions past `stream.memory_mb`; default
    /// `<dir>/spill`.
    #[serde(default)]
    pub spill_dir: Option<PathBuf>,
}

impl StateConfig {
    pub fn spill_dir(&self) -> PathBuf {
        self.spill_dir
            .clone()
            .unwrap_or_else(|| self.dir.join("spill"))
    }
}

fn default_slot() -> String {
    "walshadow".into()
}

fn default_checkpoint_every_mb() -> u64 {
    64
}

fn default_checkpoint_every_secs() -> u64 {
    30
}

fn default_ch_user() -> String {
    "default".into()
}
fn default_batch_rows() -> usize {
    100_000
}
fn default_batch_mb() -> usize {
    16
}
fn default_batch_ms() -> u64 {
    1000
}
fn default_idle_flush_ms() -> u64 {
    20
}
fn default_insert_concurrency() -> usize {
    4
}
fn default_lsn_column() -> String {
    "_lsn".into()
}
fn default_seq_column() -> String {
    "_seq".into()
}
fn default_xid_column() -> String {
    "_xid".into()
}
fn default_commit_time_column() -> String {
    "_commit_time".into()
}
fn default_deleted_column() -> String {
    "_is_deleted".into()
}
fn default_memory_mb() -> usize {
    256
}

fn default_toast_cache_mb() -> usize {
    64
}

impl Config {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })?;
        Self::parse(path, &text)
    }

    /// Parses and checks `text` (read from `path`, named in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        config.split_patterns(path)?;
        config.check(path)?;
        // Each database's sections are checked as a file of their own
        // would be (the url's database is not known here: it is the
        // daemon's to check that `databases` names it).
        for db in config.listed_or_sections() {
            config.database_view(&db, "").map_err(|e| e.in_file(path))?;
        }
        let mut config = config;
        config.load_secrets(path)?;
        Ok(config)
    }

    /// Moves the pattern sections of `[table]` into `patterns`; a pattern
    /// that does not parse, one with a `destination` (each table it takes
    /// streams into its own), or an `exclude` on one table is an error.
    fn split_patterns(&mut self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |problem| ConfigError::Invalid {
            path: path.to_owned(),
            key: "table",
            problem,
        };
        let keys: Vec<String> = self
            .tables
            .keys()
            .filter(|k| pattern::is_pattern(k))
            .cloned()
            .collect();
        for key in keys {
            let Some(config) = self.tables.remove(&key) else {
                continue;
            };
            if config.destination.is_some() {
                return Err(invalid(format!(
                    "[table.{key:?}] is a pattern: each table it takes streams into its own \
                     ClickHouse table (its default name), so it has no destination"
                )));
            }
            let p = pattern::TablePattern::new(&key, config)
                .map_err(|problem| invalid(format!("[table.{key:?}]: {problem}")))?;
            self.patterns.push(p);
        }
        if let Some((key, _)) = self.tables.iter().find(|(_, t)| !t.exclude.is_empty()) {
            return Err(invalid(format!(
                "[table.{key:?}] names one table: exclude belongs to pattern sections \
                 ([table.\"public.*\"], [table.\"~regex\"])"
            )));
        }
        Ok(())
    }

    /// The file as one followed database sees it: its tables (the
    /// top-level `[table]` sections for the url's database, `url_db`, and
    /// its own `[database."db"]` sections), its config table, and `{db}`
    /// in `[clickhouse] database` replaced by its name; no other
    /// database's sections.
    pub fn database_view(&self, db: &str, url_db: &str) -> Result<Config, ConfigError> {
        if db == EVERY_DATABASE {
            return Err(ConfigError::Invalid {
                path: Path::new("the config file").to_owned(),
                key: "source.databases",
                problem: "\"*\" is not a database".into(),
            });
        }
        self.view_of(db, url_db).map_err(|e| e.of_database(db))
    }

    /// The databases whose views a check covers: those listed, or with
    /// `"*"` those with a section.
    fn listed_or_sections(&self) -> Vec<String> {
        if self.source.every_database() {
            self.databases.keys().cloned().collect()
        } else {
            self.source.databases.clone()
        }
    }

    fn view_of(&self, db: &str, url_db: &str) -> Result<Config, ConfigError> {
        let mut view = self.clone();
        view.databases.clear();
        view.source.databases.clear();
        let section = self.databases.get(db).cloned().unwrap_or_default();
        if db != url_db {
            view.tables.clear();
            view.patterns.clear();
            view.source.database = Some(db.to_owned());
        } else {
            // The patterns are split again below, with the section's.
            for p in std::mem::take(&mut view.patterns) {
                view.tables.insert(p.key, p.config);
            }
        }
        let path = Path::new("the config file");
        for (key, t) in section.tables {
            if view.tables.insert(key.clone(), t).is_some() {
                return Err(ConfigError::Invalid {
                    path: path.to_owned(),
                    key: "database.table",
                    problem: format!(
                        "[table.{key:?}] and [database.{db:?}.table.{key:?}] both name a table of \
                         the url's database {db:?}: keep one"
                    ),
                });
            }
        }
        if let Some(t) = section.config_table {
            view.source.config_table = t;
        }
        if let Some(a) = section.config_table_allow {
            view.source.config_table_allow = a;
        }
        if let Some(ch) = view.clickhouse.as_mut() {
            ch.database = ch.database.replace(DATABASE_PLACEHOLDER, db);
        }
        view.split_patterns(path)?;
        view.check(path)?;
        Ok(view)
    }

    /// The pattern section that takes `schema.name`, if any (the first in
    /// key order; a table pinned by name is the file's own, whatever
    /// patterns say).
    pub fn pattern_for(&self, schema: &str, name: &str) -> Option<&pattern::TablePattern> {
        self.patterns.iter().find(|p| p.takes(schema, name))
    }

    /// The ClickHouse password from `password_file` or
    /// [`CLICKHOUSE_PASSWORD_ENV`], into `clickhouse.password`; only one
    /// of the three may be given.
    fn load_secrets(&mut self, path: &Path) -> Result<(), ConfigError> {
        if let Some(m) = self.metrics.as_mut()
            && let Some(file) = &m.token_file
        {
            let invalid = |problem| ConfigError::Invalid {
                path: path.to_owned(),
                key: "metrics.token_file",
                problem,
            };
            let token = read_secret(file).map_err(invalid)?;
            if token.is_empty() {
                return Err(invalid(format!(
                    "{}: the first line is empty",
                    file.display()
                )));
            }
            m.token = Some(token);
        }
        if let Some(b) = self.backup.as_mut()
            && let Some(file) = &b.credentials_file
        {
            let invalid = |problem| ConfigError::Invalid {
                path: path.to_owned(),
                key: "backup.credentials_file",
                problem,
            };
            b.credentials = Some(read_s3_credentials(file).map_err(invalid)?);
        }
        let Some(ch) = self.clickhouse.as_mut() else {
            return Ok(());
        };
        let invalid = |problem: String| ConfigError::Invalid {
            path: path.to_owned(),
            key: "clickhouse.password_file",
            problem,
        };
        let env = std::env::var(CLICKHOUSE_PASSWORD_ENV)
            .ok()
            .filter(|v| !v.is_empty());
        let given = [
            !ch.password.is_empty(),
            ch.password_file.is_some(),
            env.is_some(),
        ];
        if given.iter().filter(|g| **g).count() > 1 {
            return Err(invalid(format!(
                "give the ClickHouse password one way: password, password_file or {CLICKHOUSE_PASSWORD_ENV}"
            )));
        }
        if let Some(file) = &ch.password_file {
            ch.password = read_secret(file).map_err(invalid)?;
        } else if let Some(p) = env {
            ch.password = p;
        }
        Ok(())
    }

    fn check(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |key, problem: String| ConfigError::Invalid {
            path: path.to_owned(),
            key,
            problem,
        };
        let url = &self.source.url;
        if !(url.starts_with("postgres://")
            || url.starts_with("postgresql://")
            || url.contains('='))
        {
            return Err(invalid(
                "source.url",
                "expected a URL such as postgres://user@host:5432/postgres, or a libpq connection string such as \"host=db user=walshadow dbname=postgres\"".into(),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for db in &self.source.databases {
            if db.is_empty() || db.contains('\0') {
                return Err(invalid(
                    "source.databases",
                    format!("{db:?} is not a database name"),
                ));
            }
            if !seen.insert(db) {
                return Err(invalid(
                    "source.databases",
                    format!("{db:?} is named twice"),
                ));
            }
        }
        if self.source.every_database() && self.source.databases.len() > 1 {
            return Err(invalid(
                "source.databases",
                "\"*\" (every database) stands alone: name databases, or write [\"*\"]".into(),
            ));
        }
        if let Some(db) = self
            .databases
            .keys()
            .find(|d| !self.source.every_database() && !seen.contains(d))
        {
            return Err(invalid(
                "database",
                format!(
                    "[database.{db:?}] names a database that [source] databases does not list \
                     (databases = {:?}): add it there, or fix the section's name",
                    self.source.databases
                ),
            ));
        }
        let slot = &self.source.slot;
        if slot.is_empty()
            || slot.len() > 63
            || !slot
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(invalid(
                "source.slot",
                format!("{slot:?}: slot names are 1 to 63 characters of a-z, 0-9 and _"),
            ));
        }
        if let Some(b) = &self.backup {
            let given = |v: &Option<String>| v.as_deref().is_some_and(|v| !v.is_empty());
            match b.tool {
                BackupTool::Pgbackrest if !given(&b.stanza) => {
                    return Err(invalid(
                        "backup.stanza",
                        "pgBackRest stores are read by stanza: give the source's stanza \
                         (pgBackRest's --stanza)"
                            .into(),
                    ));
                }
                BackupTool::BarmanCloud if !given(&b.server_name) => {
                    return Err(invalid(
                        "backup.server_name",
                        "barman-cloud stores are read by server name: give the one \
                         barman-cloud-backup was given"
                            .into(),
                    ));
                }
                _ => {}
            }
            let s3 = b.repo.starts_with("s3://");
            if !s3 && !Path::new(&b.repo).is_absolute() {
                return Err(invalid(
                    "backup.repo",
                    format!(
                        "{}: use the repository's absolute path or s3://bucket/prefix",
                        b.repo
                    ),
                ));
            }
            if !s3
                && (b.endpoint.is_some()
                    || b.region.is_some()
                    || b.path_style
                    || b.credentials_file.is_some())
            {
                return Err(invalid(
                    "backup.endpoint",
                    "endpoint, region, path_style and credentials_file are for an s3:// repo"
                        .into(),
                ));
            }
        }
        for (key, dir) in [
            ("shadow.data_dir", &self.shadow.data_dir),
            ("shadow.pg_bin", &self.shadow.pg_bin),
            ("state.dir", &self.state.dir),
        ] {
            if !dir.is_absolute() {
                return Err(invalid(
                    key,
                    format!("{}: use an absolute path", dir.display()),
                ));
            }
        }
        // Every number within what the code can hold and an operator can
        // mean: a duration that overflows a clock or a size that wraps
        // when turned into bytes is refused here, naming the key.
        let in_range = |key: &'static str, v: u64, min: u64, max: u64| {
            if (min..=max).contains(&v) {
                Ok(())
            } else {
                Err(invalid(key, format!("{v} is outside {min}..={max}")))
            }
        };
        let sh = &self.shadow;
        in_range(
            "shadow.checkpoint_every_mb",
            sh.checkpoint_every_mb,
            1,
            65_536,
        )?;
        in_range(
            "shadow.checkpoint_every_secs",
            sh.checkpoint_every_secs,
            1,
            86_400,
        )?;
        let st = &self.stream;
        in_range("stream.memory_mb", st.memory_mb as u64, 1, 1 << 20)?;
        in_range(
            "stream.toast_cache_mb",
            st.toast_cache_mb as u64,
            0,
            1 << 20,
        )?;
        let bf = &self.backfill;
        in_range("backfill.max_attempts", u64::from(bf.max_attempts), 1, 1000)?;
        in_range(
            "backfill.chunk_blocks",
            u64::from(bf.chunk_blocks),
            1,
            1 << 17,
        )?;
        in_range("backfill.batch_rows", bf.batch_rows as u64, 1, 10_000_000)?;
        if let Some(b) = &self.backup {
            in_range("backup.parallelism", b.parallelism as u64, 1, 64)?;
        }
        if let Some(ch) = &self.clickhouse {
            in_range("clickhouse.batch_rows", ch.batch_rows as u64, 1, 10_000_000)?;
            in_range("clickhouse.batch_mb", ch.batch_mb as u64, 1, 4096)?;
            in_range("clickhouse.batch_ms", ch.batch_ms, 1, 3_600_000)?;
            in_range("clickhouse.idle_flush_ms", ch.idle_flush_ms, 0, 3_600_000)?;
            in_range(
                "clickhouse.insert_concurrency",
                ch.insert_concurrency as u64,
                1,
                64,
            )?;
            in_range(
                "clickhouse.request_timeout_s",
                ch.request_timeout_s,
                1,
                86_400,
            )?;
            if ch.cluster.as_deref().is_some_and(|c| c.trim().is_empty()) {
                return Err(invalid(
                    "clickhouse.cluster",
                    "is empty: name a cluster of the servers' remote_servers, or leave it out"
                        .into(),
                ));
            }
            if let Some(suffix) = &ch.distributed_suffix {
                if suffix.is_empty() {
                    return Err(invalid(
                        "clickhouse.distributed_suffix",
                        "is empty: a Distributed table cannot share its table's name".into(),
                    ));
                }
                if let Some(problem) = walshadow_types::destination_problem(&format!("t{suffix}")) {
                    return Err(invalid("clickhouse.distributed_suffix", problem));
                }
            }
        }
        if split_table_name(&self.source.config_table)
            .is_none_or(|(s, n)| walshadow_types::table_key(&s, &n) != self.source.config_table)
        {
            return Err(invalid(
                "source.config_table",
                format!(
                    "{:?}: name the table as \"schema.name\"",
                    self.source.config_table
                ),
            ));
        }
        for p in &self.source.config_table_allow {
            if split_table_name(p).is_none() {
                return Err(invalid(
                    "source.config_table_allow",
                    format!(
                        "{p:?}: write each pattern as \"schema.name\" (\"public.*\", \"sales.order*\")"
                    ),
                ));
            }
        }
        if self.backfill.workers == 0 || self.backfill.workers > 64 {
            return Err(invalid("backfill.workers", "must be 1 to 64".into()));
        }
        let rate = self.backfill.backup_max_rate_kb;
        if rate != 0 && !(32..=1_048_576).contains(&rate) {
            return Err(invalid(
                "backfill.backup_max_rate_kb",
                format!(
                    "{rate} is outside 32..=1048576 kB/s (BASE_BACKUP's MAX_RATE); 0 means unthrottled"
                ),
            ));
        }
        if let Some(sd) = &self.state.spill_dir
            && !sd.is_absolute()
        {
            return Err(invalid(
                "state.spill_dir",
                format!("{}: use an absolute path", sd.display()),
            ));
        }
        let mut destinations: std::collections::BTreeMap<String, &str> = Default::default();
        // Pattern sections are checked as sections naming one table are,
        // but for what only a single table has: its name and destination.
        let sections = self
            .tables
            .iter()
            .map(|(k, t)| (k, t, false))
            .chain(self.patterns.iter().map(|p| (&p.key, &p.config, true)));
        for (key, t, is_pattern) in sections {
            if !is_pattern && let Some(dest) = t.destination_of(key) {
                if let Some(problem) = walshadow_types::destination_problem(&dest) {
                    return Err(invalid(
                        "table.destination",
                        format!(
                            "[table.{key:?}]: {problem}; name another with destination = \"…\""
                        ),
                    ));
                }
                if let Some(other) = destinations.insert(dest.clone(), key) {
                    return Err(invalid(
                        "table.destination",
                        format!(
                            "[table.{other:?}] and [table.{key:?}] would both stream into ClickHouse table {dest:?}; \
                             name another for one of them with destination = \"…\""
                        ),
                    ));
                }
            }
            if let Some(bad) = t.settings.keys().find(|n| {
                n.is_empty() || !n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            }) {
                return Err(invalid(
                    "table.settings",
                    format!(
                        "[table.{key:?}] settings has {bad:?}, which is not a ClickHouse setting name (letters, digits, _)"
                    ),
                ));
            }
            if let Some(own) = OWN_TABLE_SETTINGS
                .iter()
                .find(|s| t.settings.keys().any(|n| n.eq_ignore_ascii_case(s)))
            {
                return Err(invalid(
                    "table.settings",
                    format!(
                        "[table.{key:?}] settings sets {own}, which walshadow sets itself (retries rely on it); leave it out"
                    ),
                ));
            }
            if t.partition_by
                .as_deref()
                .is_some_and(|p| p.trim().is_empty())
            {
                return Err(invalid(
                    "table.partition_by",
                    format!(
                        "[table.{key:?}] partition_by is empty: give a ClickHouse expression over the replica identity's columns such as \"intDiv(id, 1000000)\", or leave the key out"
                    ),
                ));
            }
            if let Some(bad) = t.order_by.iter().find(|c| c.is_empty()) {
                return Err(invalid(
                    "table.order_by",
                    format!(
                        "[table.{key:?}] order_by has an empty column name {bad:?}: list the replica identity's columns as the ClickHouse table names them"
                    ),
                ));
            }
            if let Some(bad) = t
                .rename_columns
                .iter()
                .find(|(c, n)| c.is_empty() || n.trim().is_empty())
            {
                return Err(invalid(
                    "table.rename_columns",
                    format!(
                        "[table.{key:?}] rename_columns has an empty name in {bad:?}: map the column as the source spells it to the name its ClickHouse column takes"
                    ),
                ));
            }
            let mut renamed = std::collections::BTreeMap::new();
            for (c, n) in &t.rename_columns {
                if let Some(other) = renamed.insert(n, c) {
                    return Err(invalid(
                        "table.rename_columns",
                        format!(
                            "[table.{key:?}] rename_columns names both {other:?} and {c:?} {n:?}: ClickHouse column names are distinct"
                        ),
                    ));
                }
            }
            if let Some(bad) = t.column_types.keys().find(|c| c.is_empty()) {
                return Err(invalid(
                    "table.column_types",
                    format!(
                        "[table.{key:?}] column_types has an empty column name {bad:?}: name columns as the source spells them"
                    ),
                ));
            }
            if let Some(bad) = t.out_of_range_columns.keys().find(|c| c.is_empty()) {
                return Err(invalid(
                    "table.out_of_range_columns",
                    format!(
                        "[table.{key:?}] out_of_range_columns has an empty column name {bad:?}: name columns as the source spells them"
                    ),
                ));
            }
            if let Some(bad) = t.include_columns.iter().find(|c| c.is_empty()) {
                return Err(invalid(
                    "table.include_columns",
                    format!(
                        "[table.{key:?}] include_columns has an empty name {bad:?}: list column names as the source spells them"
                    ),
                ));
            }
            if let Some(bad) = t.exclude_columns.iter().find(|c| c.is_empty()) {
                return Err(invalid(
                    "table.exclude_columns",
                    format!(
                        "[table.{key:?}] exclude_columns has an empty name {bad:?}: list column names as the source spells them"
                    ),
                ));
            }
            if let Err(bad) = InitialLoad::parse(t.initial_load.as_deref()) {
                return Err(invalid(
                    "table.initial_load",
                    format!(
                        "[table.{key:?}] initial_load = {bad:?}: expected one of none, copy, base_backup, object_store"
                    ),
                ));
            }
            if is_pattern {
                continue;
            }
            if let Some((schema, name)) = split_table_name(key)
                && walshadow_types::table_key(&schema, &name) != *key
            {
                return Err(invalid(
                    "table",
                    format!(
                        "[table.{key:?}]: write it as [table.{:?}] (quotes only around a part with a dot or a quote)",
                        walshadow_types::table_key(&schema, &name)
                    ),
                ));
            }
            if split_table_name(key).is_none() {
                return Err(invalid(
                    "table",
                    format!(
                        "[table.{key:?}]: name a table as \"schema.name\", e.g. [table.\"public.orders\"]"
                    ),
                ));
            }
        }
        if (!self.tables.is_empty() || !self.patterns.is_empty()) && self.clickhouse.is_none() {
            return Err(invalid(
                "clickhouse",
                "tables are pinned but there is no [clickhouse] section (url, database) to stream them to".into(),
            ));
        }
        if let Some(ch) = &self.clickhouse {
            if !(ch.url.starts_with("http://") || ch.url.starts_with("https://")) {
                return Err(invalid(
                    "clickhouse.url",
                    format!(
                        "{:?}: expected ClickHouse's HTTP interface, e.g. http://127.0.0.1:8123",
                        ch.url
                    ),
                ));
            }
            if ch.database.is_empty() {
                return Err(invalid("clickhouse.database", "must not be empty".into()));
            }
            let placeholder = ch.database.contains(DATABASE_PLACEHOLDER);
            if (self.source.databases.len() > 1 || self.source.every_database()) && !placeholder {
                return Err(invalid(
                    "clickhouse.database",
                    format!(
                        "{:?} would hold the tables of every database of [source] databases, \
                         whose names can clash: name each its own, as \"{{db}}\" or \"pg_{{db}}\"",
                        ch.database
                    ),
                ));
            }
            if self.source.databases.is_empty() && placeholder {
                return Err(invalid(
                    "clickhouse.database",
                    format!(
                        "{:?}: {{db}} stands for each database of [source] databases, which is \
                         not set",
                        ch.database
                    ),
                ));
            }
            if ch.client_cert.is_some() != ch.client_key.is_some() {
                return Err(invalid(
                    "clickhouse.client_cert",
                    "client_cert and client_key go together: give both or neither".into(),
                ));
            }
            if ch.insecure_skip_tls_verify && ch.ca_file.is_some() {
                return Err(invalid(
                    "clickhouse.insecure_skip_tls_verify",
                    "contradicts ca_file (which verifies against that CA): remove one".into(),
                ));
            }
            let meta = [
                &ch.lsn_column,
                &ch.seq_column,
                &ch.xid_column,
                &ch.commit_time_column,
                &ch.deleted_column,
            ];
            for (i, c) in meta.iter().enumerate() {
                if c.is_empty() || meta.iter().skip(i + 1).any(|o| o == c) {
                    return Err(invalid(
                        "clickhouse.*_column",
                        format!("{c:?}: meta column names must be non-empty and distinct"),
                    ));
                }
            }
        }
        if !self.shadow.pg_bin.join("postgres").is_file() {
            return Err(invalid(
                "shadow.pg_bin",
                format!(
                    "{} has no `postgres` binary; point it at the bin folder of the source's PostgreSQL major (e.g. /usr/lib/postgresql/15/bin)",
                    self.shadow.pg_bin.display()
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("test.toml"), text)
    }

    const GOOD: &str = r#"
        [source]
        url = "postgres://walshadow@127.0.0.1:5432/postgres"
        [shadow]
        data_dir = "/tmp/shadow"
        pg_bin = "/usr/lib/postgresql/15/bin"
        [state]
        dir = "/tmp/state"
    "#;

    fn with_databases(extra_source: &str, rest: &str) -> Result<Config, ConfigError> {
        parse(&format!(
            "{}\n{rest}",
            GOOD.replace("[shadow]", &format!("{extra_source}\n[shadow]"))
        ))
    }

    const CH: &str = "[clickhouse]\nurl = \"http://127.0.0.1:8123\"\ndatabase = \"pg_{db}\"\n";

    #[test]
    fn several_databases_each_see_their_own_sections() {
        let c = with_databases(
            "databases = [\"postgres\", \"crm\"]",
            &format!(
                "{CH}[table.\"public.a\"]\n[table.\"sales.*\"]\n\
                 [database.\"crm\"]\nconfig_table = \"ws.rows\"\n\
                 [database.\"crm\".table.\"public.b\"]\ninitial_load = \"copy\"\n"
            ),
        )
        .unwrap();
        let url = c.database_view("postgres", "postgres").unwrap();
        assert_eq!(url.tables.keys().collect::<Vec<_>>(), ["public.a"]);
        assert_eq!(url.patterns.len(), 1);
        assert_eq!(url.source.database, None);
        assert_eq!(url.source.config_table, "walshadow.tables");
        assert_eq!(url.clickhouse.as_ref().unwrap().database, "pg_postgres");
        let crm = c.database_view("crm", "postgres").unwrap();
        assert_eq!(crm.tables.keys().collect::<Vec<_>>(), ["public.b"]);
        assert!(crm.patterns.is_empty());
        assert_eq!(crm.source.database.as_deref(), Some("crm"));
        assert_eq!(crm.source.config_table, "ws.rows");
        assert_eq!(crm.clickhouse.as_ref().unwrap().database, "pg_crm");
    }

    #[test]
    fn several_databases_mistakes_are_named() {
        let err = |extra: &str, rest: &str| with_databases(extra, rest).unwrap_err().to_string();
        let e = err("databases = [\"a\", \"b\"]", &CH.replace("pg_{db}", "app"));
        assert!(
            e.contains("clickhouse.database") && e.contains("{db}"),
            "{e}"
        );
        let e = err("", CH);
        assert!(
            e.contains("[source] databases") && e.contains("not set"),
            "{e}"
        );
        let e = err("databases = [\"a\", \"a\"]", CH);
        assert!(e.contains("\"a\" is named twice"), "{e}");
        let e = err("databases = [\"a\"]", &format!("{CH}[database.\"crn\"]\n"));
        assert!(
            e.contains("[database.\"crn\"]") && e.contains("does not list"),
            "{e}"
        );
        let e = err(
            "databases = [\"a\", \"b\"]",
            &format!("{CH}[database.\"b\".table.\"nodot\"]\n"),
        );
        assert!(e.contains("database \"b\"") && e.contains("nodot"), "{e}");
        let e = err(
            "databases = [\"a\", \"b\"]",
            &format!("{CH}[database.\"b\"]\nsurprise = 1\n"),
        );
        assert!(e.contains("surprise"), "{e}");
        let e = err("databases = [\"*\", \"a\"]", CH);
        assert!(e.contains("stands alone"), "{e}");
        let e = err("databases = [\"*\"]", &CH.replace("pg_{db}", "app"));
        assert!(e.contains("{db}"), "{e}");
        // Every database: a section for any name.
        let c = with_databases(
            "databases = [\"*\"]",
            &format!("{CH}[database.\"later\".table.\"public.t\"]\n"),
        )
        .unwrap();
        assert!(c.source.every_database());
        let later = c.database_view("later", "postgres").unwrap();
        assert_eq!(later.tables.keys().collect::<Vec<_>>(), ["public.t"]);
        assert!(c.database_view("*", "postgres").is_err());
    }

    #[test]
    fn config_table_allowlist() {
        let c = parse(&GOOD.replace(
            "[shadow]",
            "config_table_allow = [\"public.*\", \"sales.order*\", \"x.\\\"a.b\\\"\"]\n[shadow]",
        ))
        .unwrap();
        let s = &c.source;
        assert!(s.allows("public.t") && s.allows("public.anything"));
        assert!(s.allows("sales.orders") && s.allows("sales.order"));
        assert!(!s.allows("sales.customers") && !s.allows("secret.t"));
        assert!(s.allows("x.\"a.b\"") && !s.allows("x.a"));
        assert!(wildcard_match("a*b*c", "axxbyyc") && !wildcard_match("a*b*c", "axxc"));
        assert!(wildcard_match("*", "") && !wildcard_match("ab*ba", "aba"));
        let e = parse(&GOOD.replace("[shadow]", "config_table_allow = [\"nodot\"]\n[shadow]"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("config_table_allow"), "{e}");
        // Empty: anything.
        assert!(parse(GOOD).unwrap().source.allows("secret.t"));
    }

    #[test]
    fn pattern_sections_are_checked_as_tables_are() {
        let with = |section: &str| {
            parse(&format!(
                "{GOOD}\n[clickhouse]\nurl = \"http://localhost:8123\"\ndatabase = \"app\"\n{section}"
            ))
        };
        let c =
            with("[table.\"public.*\"]\nexclude = [\"public.tmp_*\"]\n[table.\"public.orders\"]\n")
                .unwrap();
        assert_eq!(c.patterns.len(), 1);
        assert!(c.tables.contains_key("public.orders"));
        assert!(c.pattern_for("public", "items").is_some());
        assert!(c.pattern_for("public", "tmp_1").is_none());
        for (section, needle) in [
            (
                "[table.\"public.*\"]\ninitial_load = \"snapshot\"\n",
                "initial_load",
            ),
            (
                "[table.\"public.*\"]\ndestination = \"x\"\n",
                "no destination",
            ),
            (
                "[table.\"public.*\"]\nsettings = { non_replicated_deduplication_window = 1 }\n",
                "walshadow sets itself",
            ),
            ("[table.'~(']\n", "regular expression"),
            (
                "[table.\"public.orders\"]\nexclude = [\"x.y\"]\n",
                "exclude belongs to pattern sections",
            ),
        ] {
            let e = with(section).unwrap_err().to_string();
            assert!(e.contains(needle), "{section}: {e}");
        }
    }

    #[test]
    fn clickhouse_password_from_a_private_file_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("walshadow-config-pw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ch.pass");
        std::fs::write(&file, "s3cret\nignored\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let ch = format!(
            "\n[clickhouse]\nurl = \"http://127.0.0.1:8123\"\ndatabase = \"app\"\npassword_file = \"{}\"\n",
            file.display()
        );
        let c = parse(&format!("{GOOD}{ch}")).unwrap();
        assert_eq!(c.clickhouse.unwrap().password, "s3cret");
        // Readable by others: refused, and the password is not echoed.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = parse(&format!("{GOOD}{ch}")).unwrap_err().to_string();
        assert!(e.contains("chmod 600") && !e.contains("s3cret"), "{e}");
        // Two ways at once: refused.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = parse(&format!("{GOOD}{ch}password = \"x\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("one way"), "{e}");
        // The metrics token, the same way.
        let m = format!(
            "\n[metrics]\nlisten = \"127.0.0.1:9187\"\ntoken_file = \"{}\"\n",
            file.display()
        );
        let c = parse(&format!("{GOOD}{m}")).unwrap();
        assert_eq!(c.metrics.unwrap().token.as_deref(), Some("s3cret"));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = parse(&format!("{GOOD}{m}")).unwrap_err().to_string();
        assert!(
            e.contains("metrics.token_file") && e.contains("chmod 600"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn clickhouse_tls_keys_that_contradict() {
        let ch = "\n[clickhouse]\nurl = \"https://ch:8443\"\ndatabase = \"app\"\n";
        let e = parse(&format!("{GOOD}{ch}client_cert = \"/c.pem\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("give both or neither"), "{e}");
        let e = parse(&format!(
            "{GOOD}{ch}ca_file = \"/ca.pem\"\ninsecure_skip_tls_verify = true\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("contradicts ca_file"), "{e}");
        let e = parse(&format!("{GOOD}{ch}cafile = \"/ca.pem\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cafile"), "a typo is an unknown key: {e}");
    }

    #[test]
    fn backup_store_section() {
        let b = "\n[backup]\ntool = \"pgbackrest\"\nrepo = \"/var/lib/pgbackrest\"\n";
        let c = parse(&format!("{GOOD}{b}stanza = \"main\"\n")).unwrap();
        let backup = c.backup.unwrap();
        assert_eq!(
            (
                backup.tool,
                backup.stanza.as_deref(),
                backup.backup.as_str()
            ),
            (BackupTool::Pgbackrest, Some("main"), "latest")
        );
        let e = parse(&format!("{GOOD}{b}")).unwrap_err().to_string();
        assert!(e.contains("backup.stanza"), "{e}");
        let e = parse(&format!("{GOOD}{b}stanza = \"main\"\n").replace("/var/lib", "var/lib"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("backup.repo"), "{e}");
        let e =
            parse(&format!("{GOOD}{b}stanza = \"main\"\n").replace("pgbackrest\"", "pgbackrst\""))
                .unwrap_err()
                .to_string();
        assert!(e.contains("pgbackrest"), "a typo names the tools: {e}");
    }

    #[test]
    fn minimal_file_with_defaults() {
        if !Path::new("/usr/lib/postgresql/15/bin/postgres").exists() {
            return; // the check needs a real bin folder
        }
        let c = parse(GOOD).unwrap();
        assert_eq!(c.source.slot, "walshadow");
        assert_eq!(c.shadow.run_as, None);
        assert_eq!(
            (c.shadow.checkpoint_every_mb, c.shadow.checkpoint_every_secs),
            (64, 30)
        );
    }

    #[test]
    fn streaming_sections() {
        if !Path::new("/usr/lib/postgresql/15/bin/postgres").exists() {
            return;
        }
        let text = format!(
            "{GOOD}\n[clickhouse]\nurl = \"http://127.0.0.1:8123\"\ndatabase = \"app\"\n[table.\"public.orders\"]\n"
        );
        let c = parse(&text).unwrap();
        let ch = c.clickhouse.as_ref().unwrap();
        assert_eq!((ch.batch_rows, ch.lsn_column.as_str()), (100_000, "_lsn"));
        assert_eq!(c.stream.memory_mb, 256);
        assert_eq!(c.state.spill_dir(), Path::new("/tmp/state/spill"));
        assert!(c.tables.contains_key("public.orders"));
        let err = parse(&format!("{GOOD}\n[table.\"orders\"]\n")).unwrap_err();
        assert!(err.to_string().contains("schema.name"), "{err}");
        let err = parse(&format!("{GOOD}\n[table.\"public.orders\"]\n")).unwrap_err();
        assert!(err.to_string().contains("[clickhouse]"), "{err}");
    }

    #[test]
    fn numbers_are_bounded() {
        if !Path::new("/usr/lib/postgresql/15/bin/postgres").exists() {
            return;
        }
        let ch = "\n[clickhouse]\nurl = \"http://127.0.0.1:8123\"\ndatabase = \"app\"\n";
        // (section text, key named in the error): each refused at parse
        // time instead of panicking or wrapping later.
        let cases = [
            (
                "[shadow]\ncheckpoint_every_secs = 9223372036854775807",
                "shadow.checkpoint_every_secs",
            ),
            (
                "[shadow]\ncheckpoint_every_secs = 0",
                "shadow.checkpoint_every_secs",
            ),
            (
                "[shadow]\ncheckpoint_every_mb = 9223372036854775807",
                "shadow.checkpoint_every_mb",
            ),
            ("[stream]\nmemory_mb = 17592186044416", "stream.memory_mb"),
            (
                "[stream]\ntoast_cache_mb = 17592186044416",
                "stream.toast_cache_mb",
            ),
            (
                "[backfill]\nchunk_blocks = 4294967295",
                "backfill.chunk_blocks",
            ),
            ("[backfill]\nmax_attempts = 0", "backfill.max_attempts"),
        ];
        for (section, key) in cases {
            let text = GOOD.replacen(section.split('\n').next().unwrap(), section, 1);
            let text = if text == GOOD {
                format!("{GOOD}\n{section}\n")
            } else {
                text
            };
            let err = parse(&text).unwrap_err().to_string();
            assert!(
                err.contains(key) && err.contains("outside"),
                "{section}: {err}"
            );
        }
        for (line, key) in [
            ("batch_mb = 17592186044416", "clickhouse.batch_mb"),
            ("batch_ms = 0", "clickhouse.batch_ms"),
            ("insert_concurrency = 0", "clickhouse.insert_concurrency"),
            ("idle_flush_ms = 3600001", "clickhouse.idle_flush_ms"),
            (
                "request_timeout_s = 9223372036854775807",
                "clickhouse.request_timeout_s",
            ),
        ] {
            let err = parse(&format!("{GOOD}{ch}{line}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{line}: {err}");
        }
        let backup = "[backup]\ntool = \"pgbackrest\"\nrepo = \"/r\"\nstanza = \"main\"\n";
        let err = parse(&format!("{GOOD}{ch}{backup}parallelism = 0\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("backup.parallelism"), "{err}");
        assert_eq!(
            parse(&format!("{GOOD}{ch}{backup}"))
                .unwrap()
                .backup
                .map(|b| b.parallelism),
            Some(4)
        );
        let err = parse(&format!(
            "{GOOD}{ch}[table.\"public.t\"]\ninitial_load = \"cpy\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("\"cpy\"") && err.contains("base_backup"),
            "{err}"
        );
        parse(&format!(
            "{GOOD}{ch}[table.\"public.t\"]\ninitial_load = \"Copy\"\n"
        ))
        .unwrap();
        let t = parse(&format!(
            "{GOOD}{ch}[table.\"public.t\"]\nexclude_columns = [\"geom\", \"Blob\"]\nunsupported_columns = \"skip\"\n"
        ))
        .unwrap()
        .tables["public.t"]
        .clone();
        assert_eq!(t.exclude_columns, ["geom", "Blob"]);
        assert_eq!(t.unsupported_columns, UnsupportedColumns::Skip);
        let err = parse(&format!(
            "{GOOD}{ch}[table.\"public.t\"]\nunsupported_columns = \"skp\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("skp") && err.contains("skip"), "{err}");
        let err = parse(&format!(
            "{GOOD}{ch}[table.\"public.t\"]\nexclude_columns = [\"\"]\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("exclude_columns"), "{err}");
        let t = parse(&format!(
            "{GOOD}{ch}[table.\"public.t\"]\nout_of_range = \"null\"\nout_of_range_columns = {{ born = \"clamp\", amount = \"string\" }}\n"
        ))
        .unwrap()
        .tables["public.t"]
        .clone();
        assert_eq!(t.out_of_range, OutOfRange::Null);
        assert_eq!(
            t.out_of_range_columns,
            [
                ("amount".to_owned(), OutOfRange::String),
                ("born".to_owned(), OutOfRange::Clamp)
            ]
            .into()
        );
        let t = parse(&format!(
            "{GOOD}{ch}[table.\"public.t\"]\npartition_by = \"toYYYYMM(d)\"\norder_by = [\"b\", \"a\"]\nsettings = {{ index_granularity = 1024, storage_policy = \"s3\", ttl_only_drop_parts = true }}\n"
        ))
        .unwrap()
        .tables["public.t"]
        .clone();
        assert_eq!(t.partition_by.as_deref(), Some("toYYYYMM(d)"));
        assert_eq!(t.order_by, ["b", "a"]);
        assert_eq!(t.settings["index_granularity"], SettingValue::Int(1024));
        assert_eq!(
            t.settings["storage_policy"],
            SettingValue::Text("s3".into())
        );
        assert_eq!(t.settings["ttl_only_drop_parts"], SettingValue::Bool(true));
        assert_eq!(t.engine, TableEngine::ReplacingMergeTree);
        let t = parse(&format!(
            "{GOOD}{ch}[table.\"public.t\"]\nengine = \"ReplicatedReplacingMergeTree\"\n"
        ))
        .unwrap()
        .tables["public.t"]
            .clone();
        assert_eq!(t.engine, TableEngine::ReplicatedReplacingMergeTree);
        for (bad, key) in [
            (
                "settings = { non_replicated_deduplication_window = 5 }",
                "walshadow sets itself",
            ),
            (
                "settings = { \"a b\" = 1 }",
                "not a ClickHouse setting name",
            ),
            ("partition_by = \" \"", "partition_by is empty"),
            ("engine = \"MergeTree\"", "ReplicatedReplacingMergeTree"),
            (
                "settings = { replicated_deduplication_window = 5 }",
                "walshadow sets itself",
            ),
            ("order_by = [\"\"]", "order_by has an empty"),
        ] {
            let err = parse(&format!("{GOOD}{ch}[table.\"public.t\"]\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{bad}: {err}");
        }
        for bad in [
            "out_of_range = \"nul\"",
            "out_of_range_columns = { born = \"zero\" }",
            "out_of_range_columns = { \"\" = \"null\" }",
        ] {
            let err = parse(&format!("{GOOD}{ch}[table.\"public.t\"]\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("out_of_range"), "{bad}: {err}");
        }
        let t = parse(&format!(
            "{GOOD}{ch}[table.\"public.t\"]\nrename_columns = {{ ts = \"created_at\" }}\ncolumn_types = {{ doc = \"JSON\", ts = \"DateTime64(3)\", n = \"string\" }}\n"
        ))
        .unwrap()
        .tables
        .remove("public.t")
        .unwrap();
        assert_eq!(t.rename_columns["ts"], "created_at");
        assert_eq!(t.column_types["doc"], walshadow_types::TypeOverride::Json);
        assert_eq!(
            t.column_types["ts"],
            walshadow_types::TypeOverride::DateTime64(3)
        );
        assert_eq!(t.column_types["n"], walshadow_types::TypeOverride::String);
        for (bad, key) in [
            (
                "column_types = { ts = \"DateTime64(9)\" }",
                "\"DateTime64(p)\" with p from 0 to 6",
            ),
            (
                "column_types = { ts = \"Int64\" }",
                "not a type walshadow writes",
            ),
            (
                "column_types = { \"\" = \"JSON\" }",
                "column_types has an empty column name",
            ),
            (
                "rename_columns = { ts = \" \" }",
                "rename_columns has an empty name",
            ),
            ("rename_columns = { a = \"x\", b = \"x\" }", "names both"),
        ] {
            let err = parse(&format!("{GOOD}{ch}[table.\"public.t\"]\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{bad}: {err}");
        }
        // One spelling per table: a quoted part that needs no quotes would
        // never match the rows' keys.
        let err = parse(&format!("{GOOD}{ch}[table.'\"public\".t']\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("write it as") && err.contains("public.t"),
            "{err}"
        );
        parse(&format!("{GOOD}{ch}[table.'x.\"y.z\"']\n")).unwrap();
    }

    #[test]
    fn metrics_section() {
        if !Path::new("/usr/lib/postgresql/15/bin/postgres").exists() {
            return;
        }
        assert_eq!(parse(GOOD).unwrap().metrics, None);
        let c = parse(&format!("{GOOD}\n[metrics]\nlisten = \"127.0.0.1:9187\"\n")).unwrap();
        let listen = c.metrics.unwrap().listen;
        assert_eq!(listen, "127.0.0.1:9187".parse().unwrap());
        let c = parse(&format!("{GOOD}\n[metrics]\nlisten = \"[::]:9187\"\n")).unwrap();
        assert!(c.metrics.unwrap().listen.is_ipv6());
        let err = parse(&format!("{GOOD}\n[metrics]\nlisten = \"localhost:9187\"\n")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("listen") && msg.contains("IP:port"), "{msg}");
        let err = parse(&format!("{GOOD}\n[metrics]\nlisten = \"127.0.0.1\"\n")).unwrap_err();
        assert!(err.to_string().contains("IP:port"), "{err}");
        let err = parse(&format!("{GOOD}\n[metrics]\n")).unwrap_err();
        assert!(err.to_string().contains("listen"), "{err}");
        let err = parse(&format!(
            "{GOOD}\n[metrics]\nlisten = \"127.0.0.1:9187\"\nport = 1\n"
        ))
        .unwrap_err();
        assert!(err.to_string().contains("port"), "{err}");
    }

    #[test]
    fn unknown_keys_are_errors() {
        let err = parse(&GOOD.replace("[state]", "[state]\ndirr = \"/x\"")).unwrap_err();
        assert!(err.to_string().contains("dirr"), "{err}");
    }

    #[test]
    fn bad_values_name_the_key() {
        let err = parse(&GOOD.replace("postgres://", "mysql://")).unwrap_err();
        assert!(err.to_string().contains("source.url"), "{err}");
        let err = parse(&GOOD.replace("[source]", "[source]\nslot = \"Bad-Name\"")).unwrap_err();
        assert!(err.to_string().contains("source.slot"), "{err}");
        let err = parse(&GOOD.replace("\"/tmp/state\"", "\"state\"")).unwrap_err();
        assert!(err.to_string().contains("state.dir"), "{err}");
        let err = parse(&GOOD.replace("/usr/lib/postgresql/15/bin", "/nonexistent")).unwrap_err();
        assert!(err.to_string().contains("shadow.pg_bin"), "{err}");
    }
}
