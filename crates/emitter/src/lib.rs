//! The emitter: one ClickHouse `ReplacingMergeTree` table per source table,
//! rows encoded as `RowBinary`, batched inserts over HTTP that a retry
//! cannot duplicate.
//!
//! ```text
//!  RelationDesc ──▶ DestTable ──▶ CREATE TABLE / ALTER (ddl)
//!                      │
//!  Value rows ──▶ RowBinaryEncoder ──▶ TableBatch ──seal──▶ SealedBatch
//!                                                               │ insert(token, retry policy)
//!                                                               ▼
//!                                                    ClickHouseClient (HTTP)
//! ```
//!
//! - [`types`]: PostgreSQL → ClickHouse type mapping (the table is in its
//!   module doc).
//! - [`schema`]: the destination layout (live columns, metadata columns,
//!   the replica identity as sorting key) and [`SchemaDiff`].
//! - [`ddl`]: `CREATE DATABASE`, `CREATE TABLE`, `ALTER TABLE` text.
//! - [`rowbinary`]: values → bytes, with the range checks that keep values
//!   exact.
//! - [`batch`]: per-table batches, flush with bounded exponential backoff,
//!   and the durability contract.
//! - [`client`] and [`error`]: the HTTP client and its transient/definite
//!   error split.
//!
//! Every row carries `_lsn` (commit LSN), `_seq` (its own record LSN),
//! `_xid`, `_commit_time` and `_is_deleted`; ClickHouse computes
//! `_version = _lsn << 64 | _seq`, the `ReplacingMergeTree` version, so
//! `SELECT … FINAL` shows the last change of each key as of the last
//! inserted commit and hides deleted keys.

pub mod batch;
pub mod client;
pub mod columns;
mod datetime;
pub mod ddl;
mod decimal;
pub mod error;
mod pg_text;
pub mod rowbinary;
pub mod schema;
pub mod topology;
pub mod types;

pub use batch::{BatchConfig, FlushError, NotEmpty, RetryPolicy, SealedBatch, TableBatch};
pub use client::{ClickHouseClient, ClientConfig, InsertSettings, TlsOptions};
pub use columns::{ColumnRules, DestRules, LeftOut, Masked, TypeOverride, ValuePolicy, ValueRules};
pub use ddl::{
    TableEngine, TableSettings, add_column_sql, create_database_sql, create_table_sql,
    distributed_table_sql, drop_column_sql, modify_nullability_sql, quote_ident, quote_string,
    rename_column_sql,
};
pub use error::{ClickHouseError, ErrorClass, code_name, is_transient_code};
pub use rowbinary::{EncodeError, EncodeErrorKind, RowBinaryEncoder, RowMeta};
pub use schema::{DestColumn, DestTable, MetaColumns, SchemaChange, SchemaDiff, SchemaError};
pub use topology::{OnCluster, Topology};
pub use types::{ChType, UnsupportedType, clickhouse_type};
