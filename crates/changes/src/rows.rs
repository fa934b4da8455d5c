//! A committed change into the rows it writes, laid out as its
//! destination's columns: one rule for the stream and for the
//! `object_store` load's gap replay.
//!
//! - an insert writes its new row;
//! - an update writes its new row at `seq + 1`, and first the old row's
//!   delete marker at `seq` when the key moved (the old key is in the
//!   record: `wal_level = logical` logs it whenever a key column changed);
//! - a delete writes the delete marker of its old key.
//!
//! Speculative inserts (`INSERT … ON CONFLICT`) are the caller's to hold
//! until confirmed; truncates are not rows.

use walshadow_rows::{RowDecoder, RowError, ToastSource, Value};
use walshadow_types::Lsn;

use crate::change::{Change, ChangeKind, OwnedTuple};

/// How a relation's decoded values land in its destination's columns.
#[derive(Debug, Clone, Copy)]
pub struct Layout<'a> {
    pub decoder: &'a RowDecoder,
    /// The destination position of each decoded value (`None`: not there).
    pub positions: &'a [Option<usize>],
    /// Per destination column: whether it is part of the key.
    pub key: &'a [bool],
}

/// One row a change writes.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangedRow {
    /// In destination column order.
    pub values: Vec<Value>,
    /// A delete marker (`_is_deleted = 1`).
    pub deleted: bool,
    /// Its `_seq`: the record's position (`+ 1` for an update's new row).
    pub seq: Lsn,
}

/// Why a change gives no rows.
#[derive(Debug, thiserror::Error)]
pub enum ChangeRowsError {
    #[error(transparent)]
    Row(#[from] RowError),
    #[error("DELETE at {0} carries no old key")]
    NoOldKey(Lsn),
}

impl Layout<'_> {
    /// `t` decoded and laid out.
    pub fn row(&self, t: &OwnedTuple, toast: &dyn ToastSource) -> Result<Vec<Value>, RowError> {
        let values = self.decoder.decode(t.tuple_ref(), toast)?;
        let mut row = vec![Value::Null; self.key.len()];
        for (v, pos) in values.into_iter().zip(self.positions) {
            if let Some(slot) = pos.and_then(|p| row.get_mut(p)) {
                *slot = v;
            }
        }
        Ok(row)
    }

    fn same_key(&self, a: &[Value], b: &[Value]) -> bool {
        self.key
            .iter()
            .zip(a.iter().zip(b))
            .all(|(key, (x, y))| !key || x == y)
    }
}

/// The rows `change` (at `seq`) writes.
pub fn change_rows(
    layout: &Layout<'_>,
    change: &Change,
    seq: Lsn,
    toast: &dyn ToastSource,
) -> Result<Vec<ChangedRow>, ChangeRowsError> {
    let row = |values, deleted, seq| ChangedRow {
        values,
        deleted,
        seq,
    };
    let mut rows = Vec::new();
    match change.kind {
        ChangeKind::Insert => {
            if let Some(t) = &change.new {
                rows.push(row(layout.row(t, toast)?, false, seq));
            }
        }
        ChangeKind::Update => {
            let Some(t) = &change.new else {
                return Ok(rows);
            };
            let new_row = layout.row(t, toast)?;
            if let Some(old) = &change.old {
                let old_row = layout.row(old.tuple(), toast)?;
                if !layout.same_key(&old_row, &new_row) {
                    rows.push(row(old_row, true, seq));
                }
            }
            rows.push(row(new_row, false, Lsn(seq.0 + 1)));
        }
        ChangeKind::Delete => {
            let Some(old) = &change.old else {
                return Err(ChangeRowsError::NoOldKey(seq));
            };
            rows.push(row(layout.row(old.tuple(), toast)?, true, seq));
        }
        ChangeKind::SpecInsert
        | ChangeKind::SpecConfirm
        | ChangeKind::SpecAbort
        | ChangeKind::Truncate => {}
    }
    Ok(rows)
}
