//! Batching encoded rows per destination table, and flushing a batch with
//! retries that cannot duplicate it.
//!
//! ```text
//!  rows ──push──▶ TableBatch (RowBinary bytes; full at max_rows / max_bytes)
//!                    │ is_full / seal
//!                    ▼
//!                SealedBatch ──insert(token, policy)──▶ ClickHouse
//!                               transient/environment error: same bytes, same token, backoff
//!                               definite error (these rows refused): returned at once
//! ```
//!
//! Durability contract: `SealedBatch::insert` returns `Ok` only after
//! ClickHouse answered `200` to an insert sent with `wait_end_of_query=1`,
//! i.e. the rows are in parts on disk (or were recognised as a duplicate of
//! an insert that is). Only then may the caller count the batch's LSN range
//! as durable. A transient failure leaves the outcome unknown; the retry
//! sends the same bytes with the same `insert_deduplication_token`, so
//! ClickHouse keeps at most one copy (within the table's
//! `non_replicated_deduplication_window`). The token must therefore name
//! the batch's contents: the caller derives it from the LSN range
//! ([`SealedBatch::range_token`] is one such derivation). A batch replayed
//! after a restart with different boundaries gets a different token; its
//! rows are then written again and collapse by `_version` instead.
//!
//! Memory: a full batch still takes rows; its owner seals it at the next
//! boundary of what it adds (a row for the stream, a COPY message for a
//! `copy` load, a heap page for a `base_backup` walk, which must not split
//! one), so a batch holds at most its limit plus one such unit. When the
//! stream flushes for age is the stream's rule, not the batch's.

use std::time::{Duration, Instant};

use bytes::Bytes;
use walshadow_rows::Value;
use walshadow_types::Lsn;

use crate::client::{ClickHouseClient, InsertSettings};
use crate::error::ClickHouseError;
use crate::rowbinary::{EncodeError, RowBinaryEncoder, RowMeta};

/// When a table's batch is full: whichever limit is reached first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchConfig {
    pub max_rows: usize,
    pub max_bytes: usize,
}

impl BatchConfig {
    /// An initial load's batches: `max_rows` rows or 32 MiB. Loads flush
    /// by size alone; nobody waits on their rows one by one.
    pub fn for_load(max_rows: usize) -> BatchConfig {
        BatchConfig {
            max_rows,
            max_bytes: 32 << 20,
        }
    }
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_rows: 100_000,
            max_bytes: 16 << 20,
        }
    }
}

/// Rows for one destination table, encoded as they arrive.
#[derive(Debug)]
pub struct TableBatch {
    table: String,
    encoder: RowBinaryEncoder,
    config: BatchConfig,
    buf: Vec<u8>,
    rows: usize,
    /// Values the columns' `out_of_range` policies replaced in `buf`.
    replaced: u64,
    opened: Option<Instant>,
    first: Option<(Lsn, Lsn)>,
    last: Option<(Lsn, Lsn)>,
}

impl TableBatch {
    /// A batch for `table` (in the client's database).
    pub fn new(
        table: impl Into<String>,
        encoder: RowBinaryEncoder,
        config: BatchConfig,
    ) -> TableBatch {
        TableBatch {
            table: table.into(),
            encoder,
            config,
            buf: Vec::new(),
            rows: 0,
            replaced: 0,
            opened: None,
            first: None,
            last: None,
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// New size limits (a reloaded config): they apply to the rows held
    /// too, at the next check.
    pub fn set_config(&mut self, config: BatchConfig) {
        self.config = config;
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The size rule every flush follows: `max_rows` rows or `max_bytes`
    /// bytes (see the module doc for what a full batch takes).
    pub fn is_full(&self) -> bool {
        self.rows >= self.config.max_rows || self.buf.len() >= self.config.max_bytes
    }

    /// When the oldest row went in (`None` while empty).
    pub fn opened_at(&self) -> Option<Instant> {
        self.opened
    }

    /// Encode and add one row (see [`RowBinaryEncoder::encode_row`]); a row
    /// that does not encode leaves the batch as it was.
    pub fn push(&mut self, values: &[Value], meta: &RowMeta) -> Result<(), EncodeError> {
        let replaced = self.encoder.encode_row(&mut self.buf, values, meta)?;
        self.replaced += u64::from(replaced);
        self.rows += 1;
        self.opened.get_or_insert_with(Instant::now);
        self.first.get_or_insert((meta.lsn, meta.seq));
        self.last = Some((meta.lsn, meta.seq));
        Ok(())
    }

    /// Take the rows out as an insert, leaving the batch empty (`None` if
    /// it was empty).
    pub fn seal(&mut self) -> Option<SealedBatch> {
        if self.is_empty() {
            return None;
        }
        let body = Bytes::from(std::mem::take(&mut self.buf));
        let sealed = SealedBatch {
            table: self.table.clone(),
            columns: self.encoder.columns(),
            settings: self.encoder.table().insert_settings(),
            body,
            rows: self.rows,
            replaced: std::mem::take(&mut self.replaced),
            first: self.first.take().unwrap_or_default(),
            last: self.last.take().unwrap_or_default(),
        };
        self.rows = 0;
        self.opened = None;
        Some(sealed)
    }

    /// Switch to a new layout after a schema change. Rows encoded for the
    /// old layout must be flushed first, so a non-empty batch refuses.
    pub fn set_encoder(&mut self, encoder: RowBinaryEncoder) -> Result<(), NotEmpty> {
        if !self.is_empty() {
            return Err(NotEmpty {
                table: self.table.clone(),
                rows: self.rows,
            });
        }
        self.encoder = encoder;
        Ok(())
    }
}

/// A layout change on a batch that still holds rows of the old layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the batch for {table} still holds {rows} rows of the old layout; flush it before the schema change"
)]
pub struct NotEmpty {
    pub table: String,
    pub rows: usize,
}

/// A batch ready to insert; retries send exactly these bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedBatch {
    pub table: String,
    pub columns: Vec<String>,
    /// Settings the rows' layout needs on insert
    /// ([`crate::DestTable::insert_settings`]).
    pub settings: Vec<(String, String)>,
    pub body: Bytes,
    pub rows: usize,
    /// Values the columns' `out_of_range` policies replaced (NULL or the
    /// nearest value), for the table's count once the rows are in.
    pub replaced: u64,
    /// `(lsn, seq)` of the first and last row.
    pub first: (Lsn, Lsn),
    pub last: (Lsn, Lsn),
}

/// Backoff for transient errors: `initial`, doubling up to `max_backoff`,
/// until `max_attempts` attempts or `max_elapsed` have passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub max_attempts: u32,
    pub max_elapsed: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            max_attempts: 20,
            max_elapsed: Duration::from_secs(300),
        }
    }
}

/// A flush that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum FlushError {
    /// ClickHouse refuses these rows (a value or type it cannot take).
    #[error("insert into {table}: {source}")]
    Definite {
        table: String,
        #[source]
        source: ClickHouseError,
    },
    /// Transient or environment errors until the policy's cap; the caller
    /// may try again later with the same batch and token.
    #[error("insert into {table}: gave up after {attempts} attempts in {elapsed:?}: {source}")]
    GaveUp {
        table: String,
        attempts: u32,
        elapsed: Duration,
        #[source]
        source: ClickHouseError,
    },
}

impl FlushError {
    pub fn is_transient(&self) -> bool {
        matches!(self, FlushError::GaveUp { .. })
    }

    pub fn clickhouse_error(&self) -> &ClickHouseError {
        match self {
            FlushError::Definite { source, .. } | FlushError::GaveUp { source, .. } => source,
        }
    }
}

impl SealedBatch {
    /// A token naming this batch by table and LSN range:
    /// `table/first_lsn.first_seq-last_lsn.last_seq/rows`.
    pub fn range_token(&self) -> String {
        format!(
            "{}/{:X}.{:X}-{:X}.{:X}/{}",
            self.table, self.first.0.0, self.first.1.0, self.last.0.0, self.last.1.0, self.rows
        )
    }

    /// One insert attempt with `token` as `insert_deduplication_token`:
    /// for a caller that runs its own retries (the stream pauses on them
    /// and reports; see [`SealedBatch::insert`] for the policy-driven
    /// loop). Retries must send the same batch with the same token.
    pub async fn insert_once(
        &self,
        client: &ClickHouseClient,
        token: &str,
    ) -> Result<(), ClickHouseError> {
        client
            .insert(
                &self.table,
                &self.columns,
                self.body.clone(),
                self.rows,
                &self.settings(token),
            )
            .await
    }

    /// A synchronous, deduplicated insert whatever the user's profile
    /// says: the durability contract depends on both.
    fn settings(&self, token: &str) -> InsertSettings {
        let mut extra = vec![
            ("insert_deduplicate".into(), "1".into()),
            ("async_insert".into(), "0".into()),
        ];
        extra.extend(self.settings.iter().cloned());
        InsertSettings {
            deduplication_token: Some(token.to_string()),
            extra,
        }
    }

    /// Insert with `token` as `insert_deduplication_token`, retrying
    /// transient and environment errors per `policy`. Returns the number
    /// of attempts.
    pub async fn insert(
        &self,
        client: &ClickHouseClient,
        token: &str,
        policy: &RetryPolicy,
    ) -> Result<u32, FlushError> {
        let settings = self.settings(token);
        let started = Instant::now();
        let mut backoff = walshadow_types::Backoff::new(policy.initial_backoff, policy.max_backoff);
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let err = match client
                .insert(
                    &self.table,
                    &self.columns,
                    self.body.clone(),
                    self.rows,
                    &settings,
                )
                .await
            {
                Ok(()) => return Ok(attempts),
                Err(e) => e,
            };
            if err.is_definite() {
                return Err(FlushError::Definite {
                    table: self.table.clone(),
                    source: err,
                });
            }
            let elapsed = started.elapsed();
            let delay = backoff.next_delay();
            if attempts >= policy.max_attempts || elapsed + delay > policy.max_elapsed {
                return Err(FlushError::GaveUp {
                    table: self.table.clone(),
                    attempts,
                    elapsed,
                    source: err,
                });
            }
            tracing::warn!(
                table = %self.table, attempt = attempts, retry_in = ?delay, error = %err,
                class = err.class().as_str(),
                "ClickHouse error, retrying the insert with the same token"
            );
            tokio::time::sleep(delay).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::tests::{attr, rel};
    use crate::schema::{DestTable, MetaColumns};
    use crate::types::oid;

    fn batch(config: BatchConfig) -> TableBatch {
        let d = rel(vec![attr(1, "id", oid::INT4, true)], &["id"], "d", vec![]);
        let enc = RowBinaryEncoder::new(&DestTable::new(&d, &MetaColumns::default()).unwrap());
        TableBatch::new("t", enc, config)
    }

    fn meta(lsn: u64) -> RowMeta {
        RowMeta {
            lsn: Lsn(lsn),
            seq: Lsn(lsn - 1),
            xid: 1,
            commit_time: 0,
            deleted: false,
        }
    }

    #[test]
    fn limits_and_seal() {
        let mut b = batch(BatchConfig {
            max_rows: 2,
            max_bytes: 1 << 20,
        });
        assert!(b.seal().is_none());
        assert!(b.opened_at().is_none());
        b.push(&[Value::Int32(1)], &meta(10)).unwrap();
        assert!(!b.is_full() && b.opened_at().is_some());
        b.push(&[Value::Int32(2)], &meta(20)).unwrap();
        assert!(b.is_full());
        // A full batch still takes a row: its owner flushes at the end of
        // what it is adding.
        b.push(&[Value::Int32(3)], &meta(30)).unwrap();
        let s = b.seal().unwrap();
        assert_eq!(s.rows, 3);
        assert_eq!(s.body.len(), 3 * (4 + 8 + 8 + 4 + 8 + 1));
        assert_eq!(s.first, (Lsn(10), Lsn(9)));
        assert_eq!(s.last, (Lsn(30), Lsn(29)));
        assert_eq!(s.range_token(), "t/A.9-1E.1D/3");
        assert!(b.is_empty() && b.opened_at().is_none() && !b.is_full());
        // A bad row is refused without touching the batch.
        assert!(b.push(&[Value::Null], &meta(30)).is_err());
        assert!(b.is_empty() && b.bytes() == 0);

        // A layout change waits for the old rows to be flushed.
        let enc = b.encoder.clone();
        b.push(&[Value::Int32(4)], &meta(40)).unwrap();
        assert!(b.set_encoder(enc.clone()).is_err());
        b.seal().unwrap();
        b.set_encoder(enc).unwrap();
    }

    #[test]
    fn full_by_bytes() {
        let mut b = batch(BatchConfig {
            max_rows: 1000,
            max_bytes: 40,
        });
        b.push(&[Value::Int32(1)], &meta(10)).unwrap();
        assert!(!b.is_full(), "33 bytes < 40");
        b.push(&[Value::Int32(2)], &meta(11)).unwrap();
        assert!(b.is_full(), "66 bytes ≥ 40");
    }
}
