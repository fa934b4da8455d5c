//! Resyncs: a table loaded again from scratch and swapped in — the way back
//! for a stopped table (`walshadow table resync`, or raising the config
//! table's `resync` column), and how walshadow follows a change ClickHouse
//! cannot follow in place by itself (`Streamer::reload`: a TRUNCATE of
//! some partitions, partitions leaving or joining with rows, column DDL on
//! a REPLICA IDENTITY FULL table).
//!
//! ```text
//!  resync at S (the request's commit):
//!    flush the table; DROP R (a leftover); progress: destination = R, stopped cleared
//!    R created from the catalog now (R = <dest>__wsresync) ── the stream writes R from S on
//!    a load (copy | base_backup) of the rows at S into R
//!  the load done:
//!    flush; record uuid(R) (progress, durable) ─▶ EXCHANGE TABLES dest AND R ─▶ DROP R (the old rows)
//!    progress: destination = dest
//! ```
//!
//! Readers of the destination see the old rows until the exchange, then the
//! table as of the source (rows loaded at `S`, every later change winning
//! by `_version`, as for any load). The new table is made from the catalog
//! as it is, so a table stopped by a change ClickHouse could not follow (a
//! column type, the key) comes back with the new shape. An `EXCHANGE` is
//! never repeated on a guess: after a crash, the uuid recorded before it
//! says whether it applied (the destination has it) or not (`R` still has
//! it).

use std::collections::{BTreeMap, BTreeSet};

use walshadow_emitter::{ClickHouseClient, RowBinaryEncoder, TableBatch};
use walshadow_types::Lsn;

use super::{StreamError, Streamer, Table};

impl Streamer {
    /// Starts (or starts again) a resync of `key` at `s`, loading in `mode`;
    /// `counter` is the config row's `resync` value it answers.
    pub(super) async fn start_resync(
        &mut self,
        key: &str,
        mode: &str,
        s: Lsn,
        counter: i64,
        reason: Option<String>,
    ) -> Result<(), StreamError> {
        let own = match self.progress.tables.get(key) {
            Some(t) => t
                .resync
                .as_ref()
                .map_or_else(|| t.destination.clone(), |r| r.destination.clone()),
            None => self.dest_of(key),
        };
        let staged = format!("{own}{}", walshadow_types::RESYNC_SUFFIX);
        tracing::info!(table = %key, s = %s, mode, into = %staged, destination = %own, "resync: loading the table again beside its ClickHouse table, to swap it in");
        if !self.is_stopped(key) {
            // Rows up to here belong to the table being replaced.
            self.flush_table(key).await?;
        }
        // A load of an earlier resync still running (this one starts over)
        // ends before its table goes: none of its rows, as of its older
        // snapshot, may land in the table made again below.
        self.backfills.cancel(key).await;
        // A pass of an earlier `base_backup` resync finds its entry gone
        // once it holds the table's lock, and publishes nothing.
        self.backfills.withdraw(key)?;
        {
            let _guard = self.destinations.locks.lock(&staged).await;
            self.drop_table("dropping a leftover resync table", &staged)
                .await?;
        }
        if let Some(t) = self.progress.tables.get_mut(key) {
            t.destination = staged;
            t.schema = None;
            t.stopped = None;
            t.resync = Some(crate::progress::Resync {
                destination: own,
                s,
                mode: mode.to_owned(),
                uuid: None,
                reason,
            });
            t.resync_seen = counter;
        }
        if let Some(t) = self.progress.tables.get_mut(key) {
            // Every change up to `s` is in the rows the load writes.
            t.loaded_at = Some(s);
            if let Some(leaves) = self.catalog.new_leaves.remove(key) {
                t.leaves = Some(leaves);
            }
        }
        self.metrics.set_table_stopped(key, None);
        self.toast.clear_waits(key);
        self.tables.insert(key.to_owned(), Table::default());
        self.scope.pinned.insert(key.to_owned());
        // A fresh load: marks of an earlier one (say, this same resync
        // before a crash) name blocks of a table dropped above.
        self.backfills.withdraw(key)?;
        self.backfills.request(key, mode, s)?;
        // Durable with the ledger entry: a replay of the request after a
        // crash must find the resync recorded, not start it again over a
        // load's marks.
        self.write_progress()?;
        Ok(())
    }

    /// Loads the tables of `reloads` (`(key, code, why)`) again by
    /// themselves, as a resync at `s` (the commit of a change ClickHouse
    /// cannot follow in place, whose catalog the stream reads now), in
    /// `copy` mode: readers keep the old rows until the new ones are
    /// swapped in. A commit replayed after a crash finds its reload
    /// recorded and does not start it again.
    pub(super) async fn reload(
        &mut self,
        s: Lsn,
        reloads: Vec<(String, &'static str, String)>,
    ) -> Result<(), StreamError> {
        let mut keys = BTreeSet::new();
        for (key, code, why) in reloads {
            let (started, counter) = match self.progress.tables.get(&key) {
                Some(t) => (t.resync.as_ref().is_some_and(|r| r.s == s), t.resync_seen),
                None => (false, 0),
            };
            if started {
                continue;
            }
            tracing::warn!(table = %key, lsn = %s, reason = code, "{why}: walshadow loads the table again (copy) beside its ClickHouse table and swaps it in; readers see the old rows until then");
            self.metrics.add_table_reload(&key, code);
            self.start_resync(&key, "copy", s, counter, Some(why))
                .await?;
            keys.insert(key);
        }
        if keys.is_empty() {
            return Ok(());
        }
        Box::pin(self.refresh_tables(s, Some(&keys))).await?;
        self.start_loads();
        Ok(())
    }

    /// Swaps in every resync whose load is done (and finishes one a crash
    /// interrupted around its exchange).
    pub(super) async fn finish_resyncs(&mut self) -> Result<(), StreamError> {
        let loaded: BTreeMap<String, Lsn> = self
            .backfills
            .passes()
            .into_iter()
            .filter(|(_, p)| p.phase == walshadow_backfill::ledger::Phase::Done)
            .map(|(k, p)| (k, p.s))
            .collect();
        let due: Vec<(String, crate::progress::Resync)> = self
            .progress
            .tables
            .iter()
            .filter_map(|(k, t)| t.resync.clone().map(|r| (k.clone(), r)))
            .filter(|(k, r)| r.uuid.is_some() || loaded.get(k) == Some(&r.s))
            .collect();
        for (key, r) in due {
            if self.is_stopped(&key) {
                continue;
            }
            self.swap_in(&key, r).await?;
        }
        Ok(())
    }

    async fn swap_in(&mut self, key: &str, r: crate::progress::Resync) -> Result<(), StreamError> {
        let staged = self.dest_of(key);
        let own = r.destination.clone();
        if staged == own {
            // Nothing to swap: the resync's table is the destination.
            if let Some(t) = self.progress.tables.get_mut(key) {
                t.resync = None;
            }
            self.progress_dirty = true;
            return Ok(());
        }
        let db = self.database().to_owned();
        let uuid_of = |name: String| {
            let db = db.clone();
            move |ch: ClickHouseClient| {
                let (db, name) = (db.clone(), name.clone());
                async move {
                    walshadow_backfill::staging::table_uuid(&ch, &db, &name)
                        .await
                        .map_err(|e| match e {
                            walshadow_backfill::staging::StagingError::ClickHouse {
                                source,
                                ..
                            } => source,
                            other => walshadow_emitter::ClickHouseError::Response {
                                context: "system.tables".into(),
                                message: other.to_string(),
                            },
                        })
                }
            }
        };
        // Everything streamed so far is in the resync table first.
        self.flush_table(key).await?;
        let _own_guard = self.destinations.locks.lock(&own).await;
        let _staged_guard = self.destinations.locks.lock(&staged).await;
        let exchanged = match &r.uuid {
            None => false,
            Some(u) => {
                let now = self
                    .query_clickhouse("reading the destination's uuid", uuid_of(own.clone()))
                    .await?;
                now.as_deref() == Some(u.as_str())
            }
        };
        if !exchanged {
            let Some(uuid) = self
                .query_clickhouse("reading the resync table's uuid", uuid_of(staged.clone()))
                .await?
            else {
                self.stop_table(
                    key,
                    r.s,
                    crate::stop::StopKind::ResyncTableGone,
                    format!("the resync table {staged} is gone before it was swapped in"),
                );
                return Ok(());
            };
            if let Some(t) = self.progress.tables.get_mut(key)
                && let Some(rs) = t.resync.as_mut()
            {
                rs.uuid = Some(uuid.clone());
            }
            let resumed = r.uuid.is_some();
            // Durable before the exchange: a crash after it must not
            // exchange back.
            self.write_progress()?;
            walshadow_failpoints::crash(walshadow_failpoints::RESYNC_BEFORE_EXCHANGE);
            tracing::info!(table = %key, "resync: EXCHANGE TABLES {own} AND {staged}");
            // Exactly once (a second exchange undoes the first): never
            // through the retry loop, which would send it again.
            let (db, own2, staged2) = (self.database().to_owned(), own.clone(), staged.clone());
            self.retry_clickhouse("swapping in a resynced table", move |ch| {
                let (db, own, staged, uuid) =
                    (db.clone(), own2.clone(), staged2.clone(), uuid.clone());
                async move {
                    walshadow_backfill::staging::exchange_once(
                        &ch,
                        &db,
                        &own,
                        &staged,
                        &uuid,
                        &[],
                        resumed,
                    )
                    .await
                }
            })
            .await?;
            walshadow_failpoints::crash(walshadow_failpoints::RESYNC_AFTER_EXCHANGE);
        }
        // The old rows, now under the resync table's name.
        self.drop_table("dropping the replaced table", &staged)
            .await?;
        if let Some(t) = self.progress.tables.get_mut(key) {
            t.destination = own.clone();
            t.resync = None;
        }
        if let Some(t) = self.tables.get_mut(key)
            && let Some(dest) = &t.dest
        {
            let encoder = RowBinaryEncoder::new(dest);
            t.batch = Some(TableBatch::new(
                own.clone(),
                encoder,
                self.settings.batch.clone(),
            ));
        }
        self.write_progress()?;
        // Its columns are the catalog's now.
        self.refresh_distributed(key, &own).await?;
        tracing::info!(table = %key, destination = %own, s = %r.s, "resync done: the table was loaded again and swapped in");
        Ok(())
    }

    /// An opt-out during a resync: the table keeps its own destination
    /// (with the rows it had) and the half-loaded resync table goes.
    pub(super) async fn abandon_resync(&mut self, key: &str) -> Result<(), StreamError> {
        let Some(r) = self
            .progress
            .tables
            .get_mut(key)
            .and_then(|t| t.resync.take())
        else {
            return Ok(());
        };
        let staged = self.dest_of(key);
        if let Some(t) = self.progress.tables.get_mut(key) {
            t.destination = r.destination.clone();
        }
        tracing::info!(table = %key, "opted out during its resync: {staged} is dropped, {} stays as it was", r.destination);
        if r.uuid.is_none() {
            self.drop_table("dropping an abandoned resync table", &staged)
                .await?;
        }
        self.progress_dirty = true;
        Ok(())
    }

    /// `DROP TABLE IF EXISTS … SYNC` of `name` in the destination database.
    async fn drop_table(&mut self, what: &str, name: &str) -> Result<(), StreamError> {
        let sql = format!(
            "DROP TABLE IF EXISTS {}.{}{} SYNC",
            walshadow_emitter::quote_ident(self.database()),
            walshadow_emitter::quote_ident(name),
            self.destinations.topology.on_cluster()
        );
        self.retry_clickhouse(what, move |ch| {
            let sql = sql.clone();
            async move { ch.execute(&sql).await }
        })
        .await
    }
}
