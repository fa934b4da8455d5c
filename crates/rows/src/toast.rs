//! TOAST chunks: where out-of-line values come from.
//!
//! A TOAST table (`pg_toast.pg_toast_<relid>`) holds each value as rows
//! `(chunk_id oid, chunk_seq int4, chunk_data bytea)`, `chunk_seq` counting
//! from 0 (see toast_save_datum in toast_internals.c). The decoder asks a
//! [`ToastSource`] for a value's chunks concatenated in `chunk_seq` order
//! and checks their total length against the pointer itself.
//! [`ToastChunks`] is the in-memory source: chunks are added as they are
//! read (from WAL inserts into the TOAST table, or from its pages) and
//! removed once their value is no longer needed.

use std::collections::{BTreeMap, HashMap};

use walshadow_types::Oid;

use crate::error::RowError;
use crate::kind::{Align, Storage};
use crate::tuple::{DeformError, TupleRef, deform};
use crate::varlena;

/// Resolves TOAST pointers.
pub trait ToastSource {
    /// The data of value `value_id` in TOAST relation `toast_relid`: every
    /// chunk's `chunk_data` in `chunk_seq` order, still compressed if the
    /// value was. `None` when not (wholly) known.
    fn fetch(&self, toast_relid: Oid, value_id: Oid) -> Option<Vec<u8>>;
}

/// A source that knows no value: every TOAST pointer is unresolved.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoToast;

impl ToastSource for NoToast {
    fn fetch(&self, _toast_relid: Oid, _value_id: Oid) -> Option<Vec<u8>> {
        None
    }
}

/// One row of a TOAST table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToastChunk {
    pub chunk_id: Oid,
    pub chunk_seq: i32,
    pub data: Vec<u8>,
}

const TOAST_COLUMNS: [(&str, Storage); 3] = [
    (
        "chunk_id",
        Storage {
            len: 4,
            align: Align::Int,
        },
    ),
    (
        "chunk_seq",
        Storage {
            len: 4,
            align: Align::Int,
        },
    ),
    (
        "chunk_data",
        Storage {
            len: -1,
            align: Align::Int,
        },
    ),
];

impl ToastChunk {
    /// Decodes a TOAST table tuple.
    pub fn from_tuple(tuple: TupleRef<'_>) -> Result<ToastChunk, RowError> {
        let storage = TOAST_COLUMNS.map(|(_, s)| s);
        let fields = deform(&tuple, &storage).map_err(|e| match e {
            DeformError::Tuple(s) => RowError::BadTuple(format!("TOAST chunk: {s}")),
            DeformError::Datum(i, e) => e.at(TOAST_COLUMNS.get(i).map_or("?", |c| c.0)),
        })?;
        let [Some(id), Some(seq), Some(data)] = fields.as_slice() else {
            return Err(RowError::BadTuple(
                "TOAST chunk with a NULL or missing column".into(),
            ));
        };
        let int = |b: &[u8], col: &str| -> Result<[u8; 4], RowError> {
            crate::bytes::exact::<4>(b, "integer").map_err(|e| e.at(col))
        };
        let data = varlena::plain_payload(data).map_err(|e| e.at("chunk_data"))?;
        Ok(ToastChunk {
            chunk_id: u32::from_le_bytes(int(id, "chunk_id")?),
            chunk_seq: i32::from_le_bytes(int(seq, "chunk_seq")?),
            data: data.to_vec(),
        })
    }
}

/// TOAST chunks held in memory, by TOAST relation and value.
#[derive(Debug, Default, Clone)]
pub struct ToastChunks {
    values: HashMap<(Oid, Oid), BTreeMap<i32, Vec<u8>>>,
    bytes: usize,
    chunks: usize,
}

impl ToastChunks {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) one chunk.
    pub fn add_chunk(&mut self, toast_relid: Oid, chunk_id: Oid, chunk_seq: i32, data: Vec<u8>) {
        let len = data.len();
        let value = self.values.entry((toast_relid, chunk_id)).or_default();
        match value.insert(chunk_seq, data) {
            Some(old) => self.bytes = self.bytes - old.len() + len,
            None => {
                self.bytes += len;
                self.chunks += 1;
            }
        }
    }

    /// Decodes a TOAST table tuple and adds its chunk.
    pub fn add_chunk_tuple(
        &mut self,
        toast_relid: Oid,
        tuple: TupleRef<'_>,
    ) -> Result<(), RowError> {
        let c = ToastChunk::from_tuple(tuple)?;
        self.add_chunk(toast_relid, c.chunk_id, c.chunk_seq, c.data);
        Ok(())
    }

    /// Forgets a value; returns the bytes freed.
    pub fn remove_value(&mut self, toast_relid: Oid, value_id: Oid) -> usize {
        match self.values.remove(&(toast_relid, value_id)) {
            Some(chunks) => {
                let freed: usize = chunks.values().map(Vec::len).sum();
                self.bytes -= freed;
                self.chunks -= chunks.len();
                freed
            }
            None => 0,
        }
    }

    /// Forgets every value of one TOAST relation; returns the bytes freed.
    pub fn remove_relation(&mut self, toast_relid: Oid) -> usize {
        let ids: Vec<Oid> = self
            .values
            .keys()
            .filter(|(rel, _)| *rel == toast_relid)
            .map(|(_, id)| *id)
            .collect();
        ids.into_iter()
            .map(|id| self.remove_value(toast_relid, id))
            .sum()
    }

    pub fn contains_value(&self, toast_relid: Oid, value_id: Oid) -> bool {
        self.values.contains_key(&(toast_relid, value_id))
    }

    /// Chunk data bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Values held (complete or not).
    pub fn value_count(&self) -> usize {
        self.values.len()
    }

    /// Chunks held.
    pub fn chunk_count(&self) -> usize {
        self.chunks
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl ToastSource for ToastChunks {
    fn fetch(&self, toast_relid: Oid, value_id: Oid) -> Option<Vec<u8>> {
        let chunks = self.values.get(&(toast_relid, value_id))?;
        // A gap in chunk_seq is a missing chunk: not resolvable.
        let contiguous = chunks
            .keys()
            .copied()
            .eq(0..i32::try_from(chunks.len()).ok()?);
        if !contiguous {
            return None;
        }
        let mut out = Vec::with_capacity(chunks.values().map(Vec::len).sum());
        for c in chunks.values() {
            out.extend_from_slice(c);
        }
        Some(out)
    }
}

impl<T: ToastSource + ?Sized> ToastSource for &T {
    fn fetch(&self, toast_relid: Oid, value_id: Oid) -> Option<Vec<u8>> {
        (**self).fetch(toast_relid, value_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounting_and_gaps() {
        let mut t = ToastChunks::new();
        t.add_chunk(1, 10, 0, vec![1, 2, 3]);
        t.add_chunk(1, 10, 2, vec![7]);
        assert_eq!(t.fetch(1, 10), None, "chunk 1 is missing");
        t.add_chunk(1, 10, 1, vec![4, 5]);
        assert_eq!(t.fetch(1, 10), Some(vec![1, 2, 3, 4, 5, 7]));
        assert_eq!((t.bytes(), t.chunk_count(), t.value_count()), (6, 3, 1));
        t.add_chunk(1, 10, 1, vec![4]);
        assert_eq!((t.bytes(), t.chunk_count()), (5, 3));
        t.add_chunk(2, 10, 0, vec![9; 4]);
        assert_eq!(t.fetch(2, 11), None);
        assert_eq!(t.remove_value(1, 10), 5);
        assert_eq!(t.remove_value(1, 10), 0);
        assert_eq!(t.remove_relation(2), 4);
        assert!(t.is_empty());
        assert_eq!((t.bytes(), t.chunk_count()), (0, 0));
    }

    #[test]
    fn chunk_tuple() {
        // chunk_id 5, chunk_seq 1, chunk_data 4-byte header "xyz"; no nulls.
        let mut data = vec![0u8; 1]; // t_bits area up to t_hoff 24
        data.extend_from_slice(&5u32.to_le_bytes());
        data.extend_from_slice(&1i32.to_le_bytes());
        data.extend_from_slice(&(7u32 << 2).to_le_bytes());
        data.extend_from_slice(b"xyz");
        let tuple = TupleRef::from_wal(3, 0, 24, &data);
        let c = ToastChunk::from_tuple(tuple).unwrap();
        assert_eq!(
            (c.chunk_id, c.chunk_seq, c.data.as_slice()),
            (5, 1, &b"xyz"[..])
        );
        let mut t = ToastChunks::new();
        t.add_chunk_tuple(700, tuple).unwrap();
        assert!(t.contains_value(700, 5));
        // Cut short: an error, not a panic.
        for n in 0..data.len() {
            assert!(ToastChunk::from_tuple(TupleRef::from_wal(3, 0, 24, &data[..n])).is_err());
        }
    }
}
