//! Heap tuples: the header fields a decoder needs and the walk over the
//! attribute bytes (`heap_deform_tuple` in heaptuple.c).
//!
//! WAL carries a tuple as `xl_heap_header` (`t_infomask2`, `t_infomask`,
//! `t_hoff`) followed by the tuple from `offsetof(HeapTupleHeaderData,
//! t_bits)` = 23 on: the null bitmap, padding, then the attributes at
//! `t_hoff - 23`. A tuple on a page is the whole `HeapTupleHeaderData`
//! followed by the same bytes. Both become a [`TupleRef`].
//!
//! The walk: attribute `i` is NULL when `HEAP_HASNULL` is set and bit `i`
//! of `t_bits` is clear (it then takes no bytes). Otherwise its offset is
//! aligned to `attalign` (`att_align_nominal`), except that a varlena whose
//! first byte is not zero is a 1-byte-header (short or TOAST pointer)
//! value that is stored unaligned (`att_align_pointer`); its length comes
//! from its header (`att_addlength_pointer`). Offsets are aligned relative
//! to `t_hoff`, which is itself MAXALIGNed on the page. Dropped columns
//! keep `attlen`/`attalign` in `pg_attribute`, so their bytes are walked
//! like any other's.

use crate::bytes::{slice, u8_at, u16_at};
use crate::error::{DatumError, RowError};
use crate::kind::Storage;
use crate::varlena::varsize_any;

/// `SizeofHeapTupleHeader`: `offsetof(HeapTupleHeaderData, t_bits)`.
pub const SIZEOF_HEAP_TUPLE_HEADER: usize = 23;
/// `HEAP_HASNULL` in `t_infomask`.
pub const HEAP_HASNULL: u16 = 0x0001;
/// `HEAP_NATTS_MASK` in `t_infomask2`.
pub const HEAP_NATTS_MASK: u16 = 0x07FF;

/// A heap tuple as the row decoder reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TupleRef<'a> {
    pub infomask2: u16,
    pub infomask: u16,
    /// `t_hoff`: where the attributes start, from the start of the header.
    pub hoff: u8,
    /// The tuple from byte 23 (`t_bits`) on.
    pub data: &'a [u8],
}

impl<'a> TupleRef<'a> {
    /// A tuple as WAL carries it: the `xl_heap_header` fields and the bytes
    /// after it.
    pub fn from_wal(infomask2: u16, infomask: u16, hoff: u8, data: &'a [u8]) -> Self {
        TupleRef {
            infomask2,
            infomask,
            hoff,
            data,
        }
    }

    /// A tuple as it sits on a heap page (the item a line pointer points
    /// at), `HeapTupleHeaderData` included.
    pub fn from_heap_tuple(tuple: &'a [u8]) -> Result<Self, RowError> {
        let short = |_| {
            RowError::BadTuple(format!(
                "{} bytes is shorter than a tuple header",
                tuple.len()
            ))
        };
        let infomask2 = u16_at(tuple, 18).map_err(short)?;
        let infomask = u16_at(tuple, 20).map_err(short)?;
        let hoff = u8_at(tuple, 22).map_err(short)?;
        Ok(TupleRef {
            infomask2,
            infomask,
            hoff,
            data: tuple.get(SIZEOF_HEAP_TUPLE_HEADER..).unwrap_or_default(),
        })
    }

    /// `HeapTupleHeaderGetNatts`: attributes physically present.
    pub fn natts(&self) -> usize {
        usize::from(self.infomask2 & HEAP_NATTS_MASK)
    }

    pub fn has_nulls(&self) -> bool {
        self.infomask & HEAP_HASNULL != 0
    }
}

/// Why a walk stopped.
#[derive(Debug)]
pub(crate) enum DeformError {
    Tuple(String),
    /// At attribute index `.0`.
    Datum(usize, DatumError),
}

/// The raw bytes of each attribute present in the tuple (`None` for NULL),
/// at most `storage.len()` of them: a fixed-length value's bytes, a
/// varlena whole with its header, a C string with its terminator.
pub(crate) fn deform<'a>(
    tuple: &TupleRef<'a>,
    storage: &[Storage],
) -> Result<Vec<Option<&'a [u8]>>, DeformError> {
    let natts = tuple.natts();
    if natts > storage.len() {
        return Err(DeformError::Tuple(format!(
            "the tuple has {natts} attributes, the relation {}",
            storage.len()
        )));
    }
    let hoff = usize::from(tuple.hoff);
    let Some(data_start) = hoff.checked_sub(SIZEOF_HEAP_TUPLE_HEADER) else {
        return Err(DeformError::Tuple(format!(
            "t_hoff {hoff} is inside the tuple header"
        )));
    };
    let bitmap: &[u8] = if tuple.has_nulls() {
        let len = natts.div_ceil(8);
        if len > data_start {
            return Err(DeformError::Tuple(format!(
                "t_hoff {hoff} leaves no room for the null bitmap of {natts} attributes"
            )));
        }
        tuple.data.get(..len).unwrap_or_default()
    } else {
        &[]
    };
    let Some(attrs) = tuple.data.get(data_start..) else {
        return Err(DeformError::Tuple(format!(
            "t_hoff {hoff} is past the end of the tuple ({} bytes)",
            tuple.data.len() + SIZEOF_HEAP_TUPLE_HEADER
        )));
    };
    let mut out = Vec::with_capacity(natts);
    let mut off = 0usize;
    for (i, st) in storage.iter().take(natts).enumerate() {
        let fail = |e: DatumError| {
            DeformError::Datum(
                i,
                match e {
                    DatumError::Truncated(o) => DatumError::Truncated(o + hoff),
                    e => e,
                },
            )
        };
        if tuple.has_nulls() {
            let byte = bitmap.get(i / 8).copied().unwrap_or(0);
            if byte & (1 << (i % 8)) == 0 {
                out.push(None);
                continue;
            }
        }
        let unaligned = st.len == -1 && attrs.get(off).is_some_and(|b| *b != 0);
        if !unaligned {
            off = st
                .align
                .align(off)
                .ok_or(DeformError::Datum(i, DatumError::Truncated(off)))?;
        }
        let size = match st.len {
            -1 => varsize_any(attrs, off).map_err(fail)?,
            -2 => {
                let rest = attrs
                    .get(off..)
                    .ok_or_else(|| fail(DatumError::Truncated(off)))?;
                let nul = rest
                    .iter()
                    .position(|b| *b == 0)
                    .ok_or_else(|| fail(DatumError::Truncated(off)))?;
                nul + 1
            }
            n if n > 0 => n as usize,
            n => return Err(fail(DatumError::varlena(format!("attribute length {n}")))),
        };
        out.push(Some(slice(attrs, off, size).map_err(fail)?));
        off += size;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::Align;

    const INT4: Storage = Storage {
        len: 4,
        align: Align::Int,
    };
    const INT8: Storage = Storage {
        len: 8,
        align: Align::Double,
    };
    const TEXT: Storage = Storage {
        len: -1,
        align: Align::Int,
    };
    const CHAR: Storage = Storage {
        len: 1,
        align: Align::Char,
    };

    #[test]
    fn walk_with_nulls_alignment_and_short_varlena() {
        // 5 attributes: int4 42, NULL, "char" 'x', text "ab" (short, unaligned), int8 7.
        // t_bits = 0b11101, t_hoff = 24.
        let mut data = vec![0b0001_1101];
        data.extend_from_slice(&42i32.to_le_bytes()); // off 0
        data.push(b'x'); // off 4
        data.extend_from_slice(&[(3 << 1) | 1, b'a', b'b']); // off 5, unaligned
        data.extend_from_slice(&[0]); // pad to 8
        data.truncate(1 + 8);
        data.extend_from_slice(&7i64.to_le_bytes());
        let t = TupleRef::from_wal(5, HEAP_HASNULL, 24, &data);
        let st = [INT4, INT4, CHAR, TEXT, INT8];
        let out = deform(&t, &st).unwrap();
        assert_eq!(out[0], Some(&42i32.to_le_bytes()[..]));
        assert_eq!(out[1], None);
        assert_eq!(out[2], Some(&b"x"[..]));
        assert_eq!(out[3], Some(&[7u8, b'a', b'b'][..]));
        assert_eq!(out[4], Some(&7i64.to_le_bytes()[..]));
        // Fewer attributes in the tuple than in the relation: only those.
        let t2 = TupleRef::from_wal(1, 0, 24, &data[..5]);
        assert_eq!(deform(&t2, &st).unwrap().len(), 1);
    }

    #[test]
    fn hostile_headers_error() {
        let data = [0u8; 16];
        let st = [INT4, INT8];
        // natts beyond the relation.
        assert!(matches!(
            deform(&TupleRef::from_wal(3, 0, 24, &data), &st),
            Err(DeformError::Tuple(_))
        ));
        // t_hoff inside the header, past the end, or no room for the bitmap.
        assert!(matches!(
            deform(&TupleRef::from_wal(2, 0, 10, &data), &st),
            Err(DeformError::Tuple(_))
        ));
        assert!(matches!(
            deform(&TupleRef::from_wal(2, 0, 200, &data), &st),
            Err(DeformError::Tuple(_))
        ));
        assert!(matches!(
            deform(&TupleRef::from_wal(2, HEAP_HASNULL, 23, &data), &st),
            Err(DeformError::Tuple(_))
        ));
        // Every truncation of a valid tuple errors or yields fewer bytes, never panics.
        let mut full = vec![0u8];
        full.extend_from_slice(&1i32.to_le_bytes());
        full.extend_from_slice(&[0; 4]);
        full.extend_from_slice(&2i64.to_le_bytes());
        for n in 0..full.len() {
            let r = deform(&TupleRef::from_wal(2, 0, 24, &full[..n]), &st);
            assert!(r.is_err(), "{n} bytes");
        }
        assert!(TupleRef::from_heap_tuple(&[0u8; 22]).is_err());
    }
}
