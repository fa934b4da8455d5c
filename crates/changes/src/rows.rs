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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::OldRow;
    use walshadow_pg_format::type_oid::INT4;
    use walshadow_rows::NoToast;
    use walshadow_types::RelFileLocator;
    use walshadow_types::catalog::fixtures;

    /// `(id int4 key, v int4)` as WAL carries it: no nulls, `t_hoff` 24.
    fn tuple(id: i32, v: i32) -> OwnedTuple {
        let mut data = vec![0u8];
        data.extend_from_slice(&id.to_le_bytes());
        data.extend_from_slice(&v.to_le_bytes());
        OwnedTuple {
            infomask2: 2,
            infomask: 0,
            hoff: 24,
            data,
        }
    }

    fn change(kind: ChangeKind, new: Option<(i32, i32)>, old: Option<(i32, i32)>) -> Change {
        Change {
            kind,
            rel: RelFileLocator {
                spc_oid: 1663,
                db_oid: 5,
                rel_number: 16384,
            },
            tid: None,
            new: new.map(|(a, b)| tuple(a, b)),
            old: old.map(|(a, b)| OldRow::Full(tuple(a, b))),
            truncated: Vec::new(),
        }
    }

    fn rows(c: &Change) -> Result<Vec<(i32, i32, bool, u64)>, ChangeRowsError> {
        let int4 = |attnum, name| walshadow_types::catalog::AttributeDesc {
            len: 4,
            by_value: true,
            storage: "p".into(),
            ..fixtures::attribute(attnum, name, INT4)
        };
        let desc = fixtures::relation("t", vec![int4(1, "id"), int4(2, "v")], &["id"], vec![]);
        let decoder = RowDecoder::new(&desc).unwrap();
        let layout = Layout {
            decoder: &decoder,
            positions: &[Some(0), Some(1)],
            key: &[true, false],
        };
        let int = |v: &Value| match v {
            Value::Int32(n) => *n,
            other => panic!("{other:?}"),
        };
        Ok(change_rows(&layout, c, Lsn(100), &NoToast)?
            .into_iter()
            .map(|r| (int(&r.values[0]), int(&r.values[1]), r.deleted, r.seq.0))
            .collect())
    }

    #[test]
    fn each_kind_writes_its_rows() {
        let insert = change(ChangeKind::Insert, Some((1, 10)), None);
        assert_eq!(rows(&insert).unwrap(), [(1, 10, false, 100)]);
        // The same key: the new row only, after the record's position.
        let update = change(ChangeKind::Update, Some((1, 11)), Some((1, 10)));
        assert_eq!(rows(&update).unwrap(), [(1, 11, false, 101)]);
        // The key moved: the old key's delete marker first.
        let moved = change(ChangeKind::Update, Some((2, 11)), Some((1, 10)));
        assert_eq!(
            rows(&moved).unwrap(),
            [(1, 10, true, 100), (2, 11, false, 101)]
        );
        let delete = change(ChangeKind::Delete, None, Some((2, 11)));
        assert_eq!(rows(&delete).unwrap(), [(2, 11, true, 100)]);
        let keyless = change(ChangeKind::Delete, None, None);
        assert!(matches!(rows(&keyless), Err(ChangeRowsError::NoOldKey(_))));
        // The gap replay's filter reads the file without decoding the rest.
        let mut payload = Vec::new();
        moved.encode(&mut payload);
        assert_eq!(Change::peek_rel(&payload), Some(moved.rel));
        assert_eq!(Change::peek_rel(&payload[..5]), None);
        let mut truncate = Vec::new();
        change(ChangeKind::Truncate, None, None).encode(&mut truncate);
        assert_eq!(Change::peek_rel(&truncate), None);
        for kind in [
            ChangeKind::SpecInsert,
            ChangeKind::SpecConfirm,
            ChangeKind::Truncate,
        ] {
            assert!(rows(&change(kind, Some((3, 3)), None)).unwrap().is_empty());
        }
    }
}
