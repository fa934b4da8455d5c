//! Committed changes into rows: TOAST chunks to the mirror, config-table
//! rows to scope changes, table rows decoded (TOAST values read from the
//! source when the mirror lacks them) into their table's batch.

use std::sync::Arc;
use std::time::Instant;

use walshadow_changes::change::{Change, ChangeKind, OwnedTuple};
use walshadow_changes::decode::CommitEvent;
use walshadow_changes::rows::{ChangeRowsError, Layout, change_rows};
use walshadow_emitter::RowMeta;
use walshadow_rows::{RowDecoder, RowError, ToastChunk, Value};
use walshadow_types::catalog::RelationDesc;
use walshadow_types::{Lsn, Oid};

use super::{DESTINATION_BACKOFF, RelationDecoder, RowsFault, StreamError, Streamer, row_error};
use crate::relations::Resolved;
use crate::toast::{SourceReadError, SourceValue, Wait};

impl Streamer {
    pub(super) async fn apply_change(
        &mut self,
        c: &CommitEvent,
        seq: Lsn,
        change: Change,
    ) -> Result<(), StreamError> {
        match change.kind {
            ChangeKind::Truncate => return self.apply_truncate(c, &change.truncated).await,
            ChangeKind::SpecInsert => {
                self.spec = Some((seq, change));
                return Ok(());
            }
            ChangeKind::SpecConfirm => {
                if let Some((spec_seq, spec)) = self.spec.take() {
                    let insert = Change {
                        kind: ChangeKind::Insert,
                        ..spec
                    };
                    return Box::pin(self.apply_change(c, spec_seq, insert)).await;
                }
                return Ok(());
            }
            ChangeKind::SpecAbort => {
                self.spec = None;
                return Ok(());
            }
            _ => {}
        }
        let feeder = &self.shadow.feeder;
        let resolved = match self.catalog.relations.as_mut() {
            Some(r) => r.resolve(feeder, change.rel).await?,
            None => return Ok(()),
        };
        match resolved {
            Resolved::Other => Ok(()),
            Resolved::Toast {
                owner_key,
                toast_relid,
            } => {
                self.changed(&owner_key, c.end);
                let file = change.rel.rel_number;
                match (change.kind, change.tid, &change.new) {
                    (ChangeKind::Insert, Some(tid), Some(t)) => {
                        match ToastChunk::from_tuple(t.tuple_ref()) {
                            Ok(chunk) => {
                                self.toast
                                    .insert_chunk(toast_relid, file, tid, chunk, seq)?
                            }
                            // Its value will not resolve; the row that
                            // points at it stops the table then.
                            Err(e) => {
                                tracing::warn!(table = %owner_key, lsn = %seq, "unreadable TOAST chunk: {e}")
                            }
                        }
                    }
                    (ChangeKind::Delete, Some(tid), _) => {
                        self.toast
                            .delete_chunk(toast_relid, file, tid, seq, c.end)?
                    }
                    _ => {}
                }
                Ok(())
            }
            Resolved::Pinned { key, desc } => {
                // Its ClickHouse table follows the catalog before its rows
                // (the check first: this runs for every row).
                if !self.catalog.pending_refresh.is_empty() {
                    self.refresh_pending(Some(&key)).await?;
                }
                self.changed(&key, c.end);
                if self.covered_by_load(&key, c.end) {
                    return Ok(());
                }
                self.apply_row_change(c, seq, &key, &desc, &change).await
            }
            Resolved::Config { desc } => {
                let key = self.settings.config_key().to_owned();
                self.changed(&key, c.end);
                self.config_change(seq, &desc, &change);
                Ok(())
            }
        }
    }

    /// Emits the rows of a change of pinned table `key`, reading TOAST
    /// values the mirror lacks from the source.
    pub(super) async fn apply_row_change(
        &mut self,
        c: &CommitEvent,
        seq: Lsn,
        key: &str,
        desc: &Arc<RelationDesc>,
        change: &Change,
    ) -> Result<(), StreamError> {
        // Each round resolves one more value (a row has a bounded number
        // of columns, each at most one pointer).
        for _ in 0..=desc.attributes.len() {
            // A table waiting for a key gets its rows from the load that
            // follows.
            if self.is_stopped(key) || self.waits_for_key(key) {
                return Ok(());
            }
            let fault = match self.rows_of(c, seq, key, desc, change) {
                Ok(rows) => return self.emit_rows(c, key, rows).await,
                Err(f) => f,
            };
            match fault {
                RowsFault::Mirror(e) => return Err(e.into()),
                RowsFault::Table((kind, reason)) => {
                    self.stop_table(key, c.lsn, kind, reason);
                    return Ok(());
                }
                RowsFault::Unresolved {
                    column,
                    toast_relid,
                    value_id,
                } => match self.read_toast_value(key, toast_relid, value_id).await? {
                    Ok(SourceValue::Stored) => continue,
                    Ok(SourceValue::Gone { source_lsn }) => {
                        self.skip_gone_version(c, seq, key, desc, change).await?;
                        if self.is_stopped(key) {
                            return Ok(());
                        }
                        let Some(new) = change
                            .new
                            .as_ref()
                            .or(change.old.as_ref().map(|o| o.tuple()))
                        else {
                            return Ok(());
                        };
                        let Some((row_key, any)) = self.tuple_key(key, desc, new) else {
                            let reason = format!(
                                "table {key}, column {column}, WAL at {seq}: TOAST value {value_id} (TOAST relation {toast_relid}) is neither in the chunk mirror nor on the source, and the row's key cannot be read to wait for its newer version"
                            );
                            self.stop_table(key, seq, crate::stop::StopKind::ToastGone, reason);
                            return Ok(());
                        };
                        self.toast.wait(
                            key,
                            Wait {
                                key: row_key,
                                any,
                                commit: c.end,
                                lsn: seq,
                                column,
                                toast_relid,
                                value_id,
                                source_lsn,
                            },
                        );
                        walshadow_failpoints::hold(
                            walshadow_failpoints::STREAM_AFTER_TOAST_GONE,
                            &format!("{key}.gone"),
                        )
                        .await;
                        return Ok(());
                    }
                    Err(e) => {
                        let reason = format!(
                            "table {key}, column {column}, WAL at {seq}: TOAST value {value_id} is not in the chunk mirror (written before walshadow read this table's WAL) and reading it from the source failed: {e}"
                        );
                        self.stop_table(key, seq, crate::stop::StopKind::ToastUnreadable, reason);
                        return Ok(());
                    }
                },
            }
        }
        let reason = format!(
            "table {key}, WAL at {seq}: TOAST values still unresolved after reading them from the source"
        );
        self.stop_table(key, seq, crate::stop::StopKind::UndecodableRow, reason);
        Ok(())
    }

    /// Reads a TOAST value of table `key` from the source into the mirror.
    /// A source that cannot answer now (restarting, out of connection
    /// slots, unreachable) is waited out here, as any loss of the source
    /// is: the stream holds its place, `status` shows the wait, and only a
    /// definite refusal comes back as an error for the table.
    async fn read_toast_value(
        &mut self,
        key: &str,
        toast_relid: Oid,
        value_id: Oid,
    ) -> Result<Result<SourceValue, SourceReadError>, StreamError> {
        let mut backoff = DESTINATION_BACKOFF;
        let mut failures = 0u32;
        let since = Instant::now();
        loop {
            match self.toast.read_from_source(toast_relid, value_id).await {
                Err(SourceReadError::Mirror(e)) => return Err(e.into()),
                Err(e) if e.may_pass() => {
                    failures += 1;
                    let delay = backoff.next_delay();
                    let why = format!(
                        "a row waits for TOAST value {value_id} of TOAST relation {toast_relid}, which the source cannot serve now ({failures} failed reads in {:.0?}): {e}; retrying in {delay:?}",
                        since.elapsed()
                    );
                    tracing::warn!(table = %key, "{why}");
                    self.source_waits.insert(key.to_owned(), why);
                    self.write_status();
                    self.pause(delay).await?;
                }
                r => {
                    if self.source_waits.remove(key).is_some() {
                        tracing::info!(table = %key, failures, "the source serves TOAST reads again after {:.1?}", since.elapsed());
                    }
                    return Ok(r);
                }
            }
        }
    }

    /// The key columns of a laid-out destination row, as PostgreSQL text.
    pub(super) fn key_text(&self, key: &str, row: &[Value]) -> Vec<Option<String>> {
        let Some(dest) = self.tables.get(key).and_then(|t| t.dest.as_ref()) else {
            return Vec::new();
        };
        dest.columns
            .iter()
            .zip(row)
            .filter(|(col, _)| col.key)
            .map(|(_, v)| v.to_pg_text())
            .collect()
    }

    /// Adds a change's rows to the table's batch; each supersedes the
    /// waits of earlier versions of its row.
    async fn emit_rows(
        &mut self,
        c: &CommitEvent,
        key: &str,
        rows: Vec<(Vec<Value>, RowMeta)>,
    ) -> Result<(), StreamError> {
        for (row, meta) in rows {
            if self.toast.has_waits(key) {
                let k = self.key_text(key, &row);
                self.toast.superseded(key, &k, c.end, meta.deleted);
            }
            self.push_row(key, c.lsn, &row, &meta).await?;
        }
        Ok(())
    }

    /// A change whose new version is not emitted (a TOAST value it points
    /// at is gone) still ends the version it replaces when the key moves,
    /// or when the new key cannot be read (a `REPLICA IDENTITY FULL` key
    /// holding the value): the old version's delete marker goes out, as
    /// the change would have written it.
    async fn skip_gone_version(
        &mut self,
        c: &CommitEvent,
        seq: Lsn,
        key: &str,
        desc: &Arc<RelationDesc>,
        change: &Change,
    ) -> Result<(), StreamError> {
        let (ChangeKind::Update, Some(new), Some(old)) = (change.kind, &change.new, &change.old)
        else {
            return Ok(());
        };
        let new_key = self.tuple_key(key, desc, new);
        let old_key = self.tuple_key(key, desc, old.tuple());
        let moves = match (&new_key, &old_key) {
            (Some((n, n_any)), Some((o, o_any))) => {
                !n_any.is_empty() || !o_any.is_empty() || n != o
            }
            _ => true,
        };
        if !moves {
            return Ok(());
        }
        let delete = Change {
            kind: ChangeKind::Delete,
            new: None,
            ..change.clone()
        };
        match self.rows_of(c, seq, key, desc, &delete) {
            Ok(rows) => self.emit_rows(c, key, rows).await?,
            Err(RowsFault::Mirror(e)) => return Err(e.into()),
            Err(RowsFault::Table((kind, reason))) => self.stop_table(key, c.lsn, kind, reason),
            // Its old key holds a value gone too: the wait covers it.
            Err(RowsFault::Unresolved { .. }) => {}
        }
        Ok(())
    }

    /// The key columns of a tuple of table `key`, as PostgreSQL text, each
    /// read on its own: `any` lists the key columns that cannot be read
    /// (a TOAST value gone), which a wait matches with any value. `None`
    /// when the tuple cannot be read at all.
    pub(super) fn tuple_key(
        &self,
        key: &str,
        desc: &Arc<RelationDesc>,
        tuple: &OwnedTuple,
    ) -> Option<(Vec<Option<String>>, Vec<usize>)> {
        let table = self.tables.get(key)?;
        let dest = table.dest.as_ref()?;
        let rd = table.decoders.get(&desc.oid)?;
        let source = self.toast.source();
        let key_positions: Vec<(usize, usize)> = rd
            .positions
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let p = (*p)?;
                dest.columns.get(p).is_some_and(|c| c.key).then_some((i, p))
            })
            .collect();
        let mut row = vec![Value::Null; dest.columns.len()];
        let mut unread = Vec::new();
        for &(i, p) in &key_positions {
            let mut wanted = vec![false; rd.positions.len()];
            *wanted.get_mut(i)? = true;
            match rd.decoder.decode_only(tuple.tuple_ref(), &source, &wanted) {
                Ok(values) => {
                    if let (Some(slot), Some(v)) = (row.get_mut(p), values.into_iter().nth(i)) {
                        *slot = v;
                    }
                }
                // Only a value neither the mirror nor the source has makes
                // a column match anything; any other fault leaves the key
                // unreadable.
                Err(RowError::UnresolvedToast { .. }) if source.take_error().is_none() => {
                    unread.push(p)
                }
                Err(_) => return None,
            }
        }
        if source.take_error().is_some()
            || !key_positions.is_empty() && unread.len() == key_positions.len()
        {
            return None;
        }
        // `any` indexes the key as key_text lays it out.
        let key_cols: Vec<usize> = dest
            .columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.key)
            .map(|(p, _)| p)
            .collect();
        let any = key_cols
            .iter()
            .enumerate()
            .filter(|(_, p)| unread.contains(p))
            .map(|(k, _)| k)
            .collect();
        Some((self.key_text(key, &row), any))
    }

    /// Decodes the change into the rows it writes (a key-changing update
    /// writes two). Errors are definite for the table: `(reason, remedy)`.
    pub(super) fn rows_of(
        &mut self,
        c: &CommitEvent,
        seq: Lsn,
        key: &str,
        desc: &Arc<RelationDesc>,
        change: &Change,
    ) -> Result<Vec<(Vec<Value>, RowMeta)>, RowsFault> {
        let Some(table) = self.tables.get_mut(key) else {
            return Ok(Vec::new());
        };
        let Some(dest) = table.dest.as_ref() else {
            return Err(RowsFault::Table((
                crate::stop::StopKind::UndecodableRow,
                format!("rows arrived for {key} before its ClickHouse table was created"),
            )));
        };
        if !table
            .decoders
            .get(&desc.oid)
            .is_some_and(|d| Arc::ptr_eq(&d.desc, desc))
        {
            let decoder = RowDecoder::new(desc).map_err(|e| {
                RowsFault::Table((crate::stop::StopKind::UnsupportedType, e.to_string()))
            })?;
            let positions = decoder
                .column_names()
                .map(|n| dest.columns.iter().position(|col| col.source == n))
                .collect();
            table.decoders.insert(
                desc.oid,
                RelationDecoder {
                    desc: Arc::clone(desc),
                    decoder,
                    positions,
                    key: dest.columns.iter().map(|col| col.key).collect(),
                },
            );
        }
        let Some(rd) = table.decoders.get(&desc.oid) else {
            return Ok(Vec::new());
        };
        let layout = Layout {
            decoder: &rd.decoder,
            positions: &rd.positions,
            key: &rd.key,
        };
        let toast = self.toast.source();
        let rows = change_rows(&layout, change, seq, &toast);
        if let Some(e) = toast.take_error() {
            return Err(RowsFault::Mirror(e));
        }
        let rows = rows.map_err(|e| match e {
            ChangeRowsError::Row(e) => row_error(key, seq, e),
            e @ ChangeRowsError::NoOldKey(_) => {
                RowsFault::Table((crate::stop::StopKind::NoKey, format!("{e} on {key}")))
            }
        })?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let meta = RowMeta {
                    lsn: c.end,
                    seq: r.seq,
                    xid: c.xid,
                    commit_time: c.commit_time,
                    deleted: r.deleted,
                };
                (r.values, meta)
            })
            .collect())
    }
}
