//! A flush's inserts, in flight while decoding goes on.
//!
//! A flush seals every table's batch at the last transaction boundary and
//! hands the sealed batches to a task that tries each once,
//! `insert_concurrency` at a time; the stream meanwhile decodes the WAL
//! that follows into new batches. One flush is in flight at most: the next
//! one, and every other request the stream sends ClickHouse (DDL, a
//! table's own flush, a swap), first waits for it to land. Landing applies
//! the outcomes in the stream: what went through is counted, a definite
//! refusal stops its table at the batch's first row, and what did not go
//! through is retried on its own with the same bytes and token, so
//! ClickHouse keeps one copy whatever the first try did. Only then does
//! progress move, to the boundary the flush was sealed at, so the slot and
//! the shadow never pass rows ClickHouse has not taken.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::{JoinError, JoinHandle};
use walshadow_emitter::SealedBatch;

use super::positions::Boundary;
use std::time::{Duration, Instant};

use walshadow_emitter::ClickHouseError;

use super::{StreamError, Streamer, key_display};

/// One try of each sealed batch; `None` where the task ended before the
/// try did.
pub(super) type Tries = Vec<Option<Result<(), ClickHouseError>>>;

/// A flush whose inserts are under way.
#[derive(Debug)]
pub(super) struct InFlight {
    /// Each table's key and sealed batch, in the order of `tries`' answer.
    sealed: Vec<(String, SealedBatch)>,
    /// Where progress moves once every batch is in.
    boundary: Boundary,
    tries: JoinHandle<Tries>,
    started: Instant,
    since_last: Duration,
}

impl InFlight {
    /// The tries, answered.
    pub(super) fn answered(&mut self) -> &mut JoinHandle<Tries> {
        &mut self.tries
    }
}

impl Streamer {
    /// Flushes every table and waits for the inserts: progress is at the
    /// last transaction boundary when it returns (called between records,
    /// never inside a commit's changes).
    pub(super) async fn flush_all(&mut self) -> Result<(), StreamError> {
        self.begin_flush().await?;
        self.finish_flush().await
    }

    /// Starts a flush: seals every batch holding rows at the last
    /// transaction boundary and sends them, the stream going on meanwhile.
    /// A flush still in flight lands first.
    pub(super) async fn begin_flush(&mut self) -> Result<(), StreamError> {
        self.finish_flush().await?;
        let boundary = self.positions.boundary();
        let mut sealed = Vec::new();
        for key in std::mem::take(&mut self.held) {
            if let Some(s) = self
                .tables
                .get_mut(&key)
                .and_then(|t| t.batch.as_mut())
                .and_then(|b| b.seal())
            {
                sealed.push((key, s));
            }
        }
        let started = Instant::now();
        let since_last = started.duration_since(self.last_flush);
        self.last_flush = started;
        if sealed.is_empty() {
            self.flushed_to(boundary);
            return Ok(());
        }
        // Each destination's lock, in key order, held until the tries end
        // (a load's swap waits for them, as for a single insert).
        let mut guards = Vec::with_capacity(sealed.len());
        for (_, s) in &sealed {
            guards.push(self.destinations.locks.share(&s.table).await);
        }
        let batches: Vec<SealedBatch> = sealed.iter().map(|(_, s)| s.clone()).collect();
        let client = self.destinations.client.clone();
        let at_once = Arc::new(Semaphore::new(
            self.settings.clickhouse.insert_concurrency.max(1),
        ));
        let tries = self.tasks.spawn(async move {
            let mut set = tokio::task::JoinSet::new();
            for (i, s) in batches.into_iter().enumerate() {
                let (client, at_once) = (client.clone(), at_once.clone());
                set.spawn(async move {
                    let _permit = at_once.acquire_owned().await;
                    (i, s.insert_once(&client, &insert_token(&s)).await)
                });
            }
            let mut answers: Tries = (0..set.len()).map(|_| None).collect();
            while let Some(joined) = set.join_next().await {
                if let Ok((i, r)) = joined
                    && let Some(slot) = answers.get_mut(i)
                {
                    *slot = Some(r);
                }
            }
            drop(guards);
            answers
        });
        self.in_flight = Some(InFlight {
            sealed,
            boundary,
            tries,
            started,
            since_last,
        });
        Ok(())
    }

    /// Waits for the flush in flight, if any, and lands it.
    pub(super) async fn finish_flush(&mut self) -> Result<(), StreamError> {
        let Some(mut f) = self.in_flight.take() else {
            return Ok(());
        };
        let answers = (&mut f.tries).await;
        self.land_flush(f, answers).await
    }

    /// Whether a flush is in flight and its tries have not all answered.
    pub(super) fn flush_under_way(&self) -> bool {
        self.in_flight
            .as_ref()
            .is_some_and(|f| !f.tries.is_finished())
    }

    /// Applies the answers of the flush in flight `f` (taken out of
    /// `in_flight`), retrying what did not go through, then moves
    /// progress to its boundary.
    pub(super) async fn land_flush(
        &mut self,
        f: InFlight,
        answers: Result<Tries, JoinError>,
    ) -> Result<(), StreamError> {
        let answers = answers.map_err(|e| StreamError::State(format!("an insert task: {e}")))?;
        let (rows, tables) = (
            f.sealed.iter().map(|(_, s)| s.rows).sum::<usize>(),
            f.sealed.len(),
        );
        let mut answers = answers.into_iter();
        for (key, s) in f.sealed {
            match answers.next().flatten() {
                Some(Ok(())) => {
                    self.destination_ok();
                    self.inserted(&key, &s);
                }
                Some(Err(e)) if e.is_definite() => {
                    self.destination_ok();
                    self.insert_refused(&key, &s, &e);
                }
                // Counted and shown like any failed try, then waited out
                // on its own, as one insert would be.
                Some(Err(e)) => {
                    let what = self.insert_what(&s);
                    self.destination_failed(&what, &e, Duration::ZERO);
                    self.insert_sealed(&key, s).await?;
                }
                None => self.insert_sealed(&key, s).await?,
            }
        }
        tracing::debug!(
            rows,
            tables,
            since_last_ms = f.since_last.as_millis() as u64,
            insert_ms = f.started.elapsed().as_millis() as u64,
            "flushed"
        );
        self.flushed_to(f.boundary);
        Ok(())
    }

    /// Every batch sealed at `boundary` is in: progress moves there, and
    /// TOAST values still missing by then stop their tables.
    pub(super) fn flushed_to(&mut self, boundary: Boundary) {
        if self.positions.flushed_to(boundary, &mut self.progress) {
            self.progress_dirty = true;
        }
        for (key, w) in self.toast.overdue(self.progress.applied) {
            let reason = format!(
                "table {key}, column {}, WAL at {}: TOAST value {} (TOAST relation {}) is neither in the chunk mirror nor on the source, and no later change of the row (key {}) arrived up to {}",
                w.column,
                w.lsn,
                w.value_id,
                w.toast_relid,
                key_display(&w.key),
                w.source_lsn
            );
            self.stop_table(&key, w.lsn, crate::stop::StopKind::ToastGone, reason);
        }
    }

    /// Inserts one table's batch, waiting out a destination that does not
    /// take it (after the flush in flight).
    pub(super) async fn flush_table(&mut self, key: &str) -> Result<(), StreamError> {
        self.finish_flush().await?;
        let sealed = self
            .tables
            .get_mut(key)
            .and_then(|t| t.batch.as_mut())
            .and_then(|b| b.seal());
        match sealed {
            Some(sealed) => self.insert_sealed(key, sealed).await,
            None => Ok(()),
        }
    }

    /// Inserts `sealed` (a batch of `key`) until ClickHouse takes or
    /// refuses it.
    async fn insert_sealed(&mut self, key: &str, sealed: SealedBatch) -> Result<(), StreamError> {
        let token = insert_token(&sealed);
        let guard = self.destinations.locks.share(&sealed.table).await;
        let what = self.insert_what(&sealed);
        // The same bytes and token on every attempt: ClickHouse keeps one
        // copy whatever an unknown outcome was.
        let inserted = self
            .retry_clickhouse(&what, |ch| {
                let sealed = sealed.clone();
                let token = token.clone();
                async move { sealed.insert_once(&ch, &token).await }
            })
            .await;
        drop(guard);
        match inserted {
            Ok(()) => {
                self.inserted(key, &sealed);
                Ok(())
            }
            Err(StreamError::ClickHouse(e)) => {
                self.insert_refused(key, &sealed, &e);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// What an insert of `sealed` is, for status and the log.
    fn insert_what(&self, sealed: &SealedBatch) -> String {
        format!(
            "inserting {} rows into {}.{}",
            sealed.rows,
            walshadow_emitter::quote_ident(self.database()),
            walshadow_emitter::quote_ident(&sealed.table)
        )
    }

    fn inserted(&mut self, key: &str, sealed: &SealedBatch) {
        if let Some(t) = self.progress.tables.get_mut(key) {
            t.rows += sealed.rows as u64;
            if sealed.replaced > 0 {
                if t.values_replaced == 0 {
                    // Once per table (the count is in status and the
                    // metrics): the policy is the operator's choice, but
                    // the first time it acts is news.
                    tracing::warn!(table = %key, values = sealed.replaced, "values ClickHouse cannot hold were written as the columns' out_of_range policies say (NULL or the nearest value), not as the source has them");
                }
                t.values_replaced += sealed.replaced;
            }
        }
        self.metrics.add_rows(key, sealed.rows as u64);
        if sealed.replaced > 0 {
            self.metrics.add_values_replaced(key, sealed.replaced);
        }
    }

    /// A definite refusal stops the table at the batch's first row.
    fn insert_refused(&mut self, key: &str, sealed: &SealedBatch, e: &ClickHouseError) {
        self.stop_table(
            key,
            sealed.first.0,
            crate::stop::StopKind::RowsRefused,
            format!("ClickHouse refused the rows: {e}"),
        );
    }
}

/// The insert's deduplication token: the batch's LSN range and a checksum
/// of its bytes.
fn insert_token(sealed: &SealedBatch) -> String {
    format!(
        "{}/{:08x}",
        sealed.range_token(),
        crc32c::crc32c(&sealed.body)
    )
}
