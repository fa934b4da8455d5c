//! The change records the pipeline buffers per transaction: what a heap
//! record says about one row, owned and serialized, so the transaction
//! assembler can hold it in memory or spill it without knowing its shape.
//!
//! Payload layout (little-endian; version byte first so a spill file from
//! another build is refused rather than misread):
//!
//! ```text
//!  u8 version=2 | u8 kind | u32 spc | u32 db | u32 rel
//!  kind Insert/SpecInsert/Update/Delete:
//!     u8 has_tid [u32 block | u16 offset]
//!     u8 has_new [tuple] | u8 old_kind (0 none, 1 key, 2 full) [tuple]
//!  kind Truncate: u32 n | n × u32 relid
//!  tuple: u16 infomask2 | u16 infomask | u8 hoff | u32 len | len bytes
//! ```
//!
//! The TID is the inserted tuple's (insert) or the deleted one's (delete):
//! TOAST chunk deletes carry nothing else, so the chunk mirror finds the
//! chunk by where it was inserted.

#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)
)]

use walshadow_types::{Oid, RelFileLocator};
use walshadow_wal_decode::{OldTuple, Tid, TupleBytes};

const VERSION: u8 = 2;

/// What happened to a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Insert,
    /// `INSERT … ON CONFLICT`: held until confirmed or super-deleted.
    SpecInsert,
    SpecConfirm,
    /// A speculative insertion abandoned (a conflict was found).
    SpecAbort,
    Update,
    Delete,
    Truncate,
}

impl ChangeKind {
    fn code(self) -> u8 {
        match self {
            ChangeKind::Insert => 1,
            ChangeKind::SpecInsert => 2,
            ChangeKind::SpecConfirm => 3,
            ChangeKind::SpecAbort => 4,
            ChangeKind::Update => 5,
            ChangeKind::Delete => 6,
            ChangeKind::Truncate => 7,
        }
    }

    fn from_code(c: u8) -> Option<ChangeKind> {
        Some(match c {
            1 => ChangeKind::Insert,
            2 => ChangeKind::SpecInsert,
            3 => ChangeKind::SpecConfirm,
            4 => ChangeKind::SpecAbort,
            5 => ChangeKind::Update,
            6 => ChangeKind::Delete,
            7 => ChangeKind::Truncate,
            _ => return None,
        })
    }
}

/// A heap tuple as WAL carries it (`xl_heap_header` and the bytes from
/// `t_bits` on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedTuple {
    pub infomask2: u16,
    pub infomask: u16,
    pub hoff: u8,
    pub data: Vec<u8>,
}

impl OwnedTuple {
    /// The tuple for the row decoder.
    pub fn tuple_ref(&self) -> walshadow_rows::TupleRef<'_> {
        walshadow_rows::TupleRef::from_wal(self.infomask2, self.infomask, self.hoff, &self.data)
    }
}

/// The old row an UPDATE or DELETE logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldRow {
    /// Only the replica-identity key columns (others NULL).
    Key(OwnedTuple),
    /// Every column (`REPLICA IDENTITY FULL`).
    Full(OwnedTuple),
}

impl OwnedTuple {
    fn view(&self) -> TupleBytes<'_> {
        TupleBytes {
            infomask2: self.infomask2,
            infomask: self.infomask,
            hoff: self.hoff,
            data: &self.data,
        }
    }
}

impl OldRow {
    pub fn tuple(&self) -> &OwnedTuple {
        match self {
            OldRow::Key(t) | OldRow::Full(t) => t,
        }
    }
}

/// One buffered change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub kind: ChangeKind,
    pub rel: RelFileLocator,
    /// Where the inserted (or deleted) tuple is in `rel`.
    pub tid: Option<Tid>,
    pub new: Option<OwnedTuple>,
    pub old: Option<OldRow>,
    /// `Truncate`: the relation OIDs truncated.
    pub truncated: Vec<Oid>,
}

/// A payload that is not a change of this format.
#[derive(Debug, thiserror::Error)]
#[error("buffered change payload is damaged or from another walshadow version ({0})")]
pub struct BadPayload(&'static str);

impl Change {
    /// Serializes this change (tests; the pipeline encodes straight from
    /// the WAL record with [`encode_change`]).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let old = self.old.as_ref().map(|o| match o {
            OldRow::Key(t) => OldTuple::Key(t.view()),
            OldRow::Full(t) => OldTuple::Full(t.view()),
        });
        encode_change(
            self.kind,
            self.rel,
            self.tid,
            self.new.as_ref().map(OwnedTuple::view).as_ref(),
            old.as_ref(),
            &self.truncated,
            out,
        );
    }

    /// The relation file a payload changes, read without decoding the rest
    /// (`None` for a truncate, which names relation OIDs instead).
    pub fn peek_rel(bytes: &[u8]) -> Option<RelFileLocator> {
        let mut r = Reader(walshadow_pg_format::cursor::Cursor::new(bytes));
        if r.u8().ok()? != VERSION || r.u8().ok()? == ChangeKind::Truncate.code() {
            return None;
        }
        Some(RelFileLocator {
            spc_oid: r.u32().ok()?,
            db_oid: r.u32().ok()?,
            rel_number: r.u32().ok()?,
        })
    }

    pub fn decode(bytes: &[u8]) -> Result<Change, BadPayload> {
        let mut r = Reader(walshadow_pg_format::cursor::Cursor::new(bytes));
        if r.u8()? != VERSION {
            return Err(BadPayload("version"));
        }
        let kind = ChangeKind::from_code(r.u8()?).ok_or(BadPayload("kind"))?;
        let rel = RelFileLocator {
            spc_oid: r.u32()?,
            db_oid: r.u32()?,
            rel_number: r.u32()?,
        };
        let mut change = Change {
            kind,
            rel,
            tid: None,
            new: None,
            old: None,
            truncated: Vec::new(),
        };
        if kind == ChangeKind::Truncate {
            let n = r.u32()? as usize;
            for _ in 0..n {
                change.truncated.push(r.u32()?);
            }
        } else {
            if r.u8()? == 1 {
                change.tid = Some(Tid {
                    block: r.u32()?,
                    offset: r.u16()?,
                });
            }
            if r.u8()? == 1 {
                change.new = Some(r.tuple()?);
            }
            change.old = match r.u8()? {
                0 => None,
                1 => Some(OldRow::Key(r.tuple()?)),
                2 => Some(OldRow::Full(r.tuple()?)),
                _ => return Err(BadPayload("old row kind")),
            };
        }
        if r.0.remaining() != 0 {
            return Err(BadPayload("trailing bytes"));
        }
        Ok(change)
    }
}

/// Serializes a change straight from the tuples a WAL record carries (one
/// copy of the tuple bytes, into `out`).
pub fn encode_change(
    kind: ChangeKind,
    rel: RelFileLocator,
    tid: Option<Tid>,
    new: Option<&TupleBytes<'_>>,
    old: Option<&OldTuple<'_>>,
    truncated: &[Oid],
    out: &mut Vec<u8>,
) {
    // Sized once: growing it a push at a time was a realloc per change.
    let tuple = |t: &TupleBytes<'_>| TUPLE_HEADER + t.data.len();
    out.reserve(
        HEADER
            + 1 + 6 + 1 + 1 // has_tid, tid, has_new, old_kind
            + new.map_or(0, tuple)
            + old.map_or(0, |o| match o {
                OldTuple::Key(t) | OldTuple::Full(t) => tuple(t),
            })
            + 4 * truncated.len(),
    );
    out.push(VERSION);
    out.push(kind.code());
    for v in [rel.spc_oid, rel.db_oid, rel.rel_number] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    if kind == ChangeKind::Truncate {
        out.extend_from_slice(&(truncated.len() as u32).to_le_bytes());
        for r in truncated {
            out.extend_from_slice(&r.to_le_bytes());
        }
        return;
    }
    match tid {
        Some(t) => {
            out.push(1);
            out.extend_from_slice(&t.block.to_le_bytes());
            out.extend_from_slice(&t.offset.to_le_bytes());
        }
        None => out.push(0),
    }
    match new {
        Some(t) => {
            out.push(1);
            encode_tuple(t, out);
        }
        None => out.push(0),
    }
    match old {
        None => out.push(0),
        Some(OldTuple::Key(t)) => {
            out.push(1);
            encode_tuple(t, out);
        }
        Some(OldTuple::Full(t)) => {
            out.push(2);
            encode_tuple(t, out);
        }
    }
}

/// Version, kind and the locator.
const HEADER: usize = 2 + 12;
/// infomask2, infomask, hoff, length.
const TUPLE_HEADER: usize = 2 + 2 + 1 + 4;

fn encode_tuple(t: &TupleBytes<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(&t.infomask2.to_le_bytes());
    out.extend_from_slice(&t.infomask.to_le_bytes());
    out.push(t.hoff);
    out.extend_from_slice(&(t.data.len() as u32).to_le_bytes());
    out.extend_from_slice(t.data);
}

/// The one checked little-endian reader, with this payload's errors.
struct Reader<'a>(walshadow_pg_format::cursor::Cursor<'a>);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], BadPayload> {
        self.0.take(n).map_err(|_| BadPayload("truncated"))
    }
    fn u8(&mut self) -> Result<u8, BadPayload> {
        self.0.u8().map_err(|_| BadPayload("truncated"))
    }
    fn u16(&mut self) -> Result<u16, BadPayload> {
        self.0.u16().map_err(|_| BadPayload("truncated"))
    }
    fn u32(&mut self) -> Result<u32, BadPayload> {
        self.0.u32().map_err(|_| BadPayload("truncated"))
    }
    fn tuple(&mut self) -> Result<OwnedTuple, BadPayload> {
        let infomask2 = self.u16()?;
        let infomask = self.u16()?;
        let hoff = self.u8()?;
        let len = self.u32()? as usize;
        Ok(OwnedTuple {
            infomask2,
            infomask,
            hoff,
            data: self.take(len)?.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let rel = RelFileLocator {
            spc_oid: 1663,
            db_oid: 5,
            rel_number: 16384,
        };
        let t = OwnedTuple {
            infomask2: 3,
            infomask: 0x0802,
            hoff: 24,
            data: vec![1, 2, 3, 0, 255],
        };
        for c in [
            Change {
                kind: ChangeKind::Update,
                rel,
                tid: None,
                new: Some(t.clone()),
                old: Some(OldRow::Key(t.clone())),
                truncated: vec![],
            },
            Change {
                kind: ChangeKind::Delete,
                rel,
                tid: Some(Tid {
                    block: 7,
                    offset: 3,
                }),
                new: None,
                old: Some(OldRow::Full(t.clone())),
                truncated: vec![],
            },
            Change {
                kind: ChangeKind::Truncate,
                rel,
                tid: None,
                new: None,
                old: None,
                truncated: vec![16384, 16390],
            },
        ] {
            let mut buf = Vec::new();
            c.encode(&mut buf);
            assert_eq!(Change::decode(&buf).unwrap(), c);
            for n in 0..buf.len() {
                assert!(Change::decode(&buf[..n]).is_err());
            }
        }
    }
}
