//! Varlena headers, inline compression and TOAST pointers (varatt.h, and
//! postgres.h before 16; little-endian layouts only).
//!
//! ```text
//!  first byte   form                        payload
//!  xxxxxx00     4-byte header, plain        len = header >> 2 (includes the header)
//!  xxxxxx10     4-byte header, compressed   va_tcinfo (raw size | method << 30), data
//!  00000001     1-byte header, external     va_tag, then (VARTAG_ONDISK) varatt_external
//!  xxxxxxx1     1-byte header, short        len = header >> 1 (includes the header)
//! ```
//!
//! Detoasting follows detoast.c: an external value's chunks are fetched
//! whole (`toast_fetch_datum`), and if `va_extinfo` says they are smaller
//! than `va_rawsize` they hold a compressed varlena body (its `va_tcinfo`
//! then data) that is decompressed like an inline one
//! (`toast_decompress_datum`, pglz or lz4).

use std::borrow::Cow;

use walshadow_types::Oid;

use crate::bytes::{u8_at, u32_at};
use crate::error::DatumError;
use crate::toast::ToastSource;

/// `VARTAG_ONDISK`.
const VARTAG_ONDISK: u8 = 18;
/// `VARTAG_INDIRECT`, `VARTAG_EXPANDED_RO`, `VARTAG_EXPANDED_RW`: in-memory
/// pointers, never on disk or in WAL.
const VARTAG_INDIRECT: u8 = 1;
const VARTAG_EXPANDED_RO: u8 = 2;
const VARTAG_EXPANDED_RW: u8 = 3;
/// `sizeof(varatt_external)`.
const VARATT_EXTERNAL_SIZE: usize = 16;
/// `VARLENA_EXTSIZE_BITS`.
const EXTSIZE_BITS: u32 = 30;
const EXTSIZE_MASK: u32 = (1 << EXTSIZE_BITS) - 1;
/// `VARHDRSZ`.
const VARHDRSZ: usize = 4;
/// `TOAST_PGLZ_COMPRESSION_ID`, `TOAST_LZ4_COMPRESSION_ID`.
const PGLZ: u32 = 0;
const LZ4: u32 = 1;
/// Decompressed sizes are refused beyond what one tag of either format can
/// expand to, so a hostile size cannot make us allocate a gigabyte.
const MAX_EXPANSION: usize = 273;

/// `varatt_external`: where a value's TOAST chunks are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToastPointer {
    /// `va_rawsize`: the original size, header included.
    pub rawsize: i32,
    /// `va_extinfo`: the stored size (low 30 bits) and compression method.
    pub extinfo: u32,
    pub value_id: Oid,
    pub toast_relid: Oid,
}

impl ToastPointer {
    /// `VARATT_EXTERNAL_GET_EXTSIZE`: bytes stored in the chunks.
    pub fn extsize(&self) -> usize {
        (self.extinfo & EXTSIZE_MASK) as usize
    }

    /// `VARATT_EXTERNAL_IS_COMPRESSED`.
    pub fn is_compressed(&self) -> bool {
        (self.extsize() as i64) < i64::from(self.rawsize) - VARHDRSZ as i64
    }
}

/// One varlena datum as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Varlena<'a> {
    /// The value's bytes, header stripped.
    Plain(&'a [u8]),
    /// Inline compressed: `va_tcinfo` and the compressed bytes.
    Compressed {
        tcinfo: u32,
        data: &'a [u8],
    },
    External(ToastPointer),
}

/// The total size of the varlena starting at `data[off]`, header included
/// (`VARSIZE_ANY`), checked against the bytes there.
pub(crate) fn varsize_any(data: &[u8], off: usize) -> Result<usize, DatumError> {
    let first = u8_at(data, off)?;
    let size = if first == 0x01 {
        let tag = u8_at(data, off + 1)?;
        2 + vartag_size(tag)?
    } else if first & 0x01 == 0x01 {
        usize::from(first >> 1)
    } else {
        let header = u32_at(data, off)?;
        let size = ((header >> 2) & 0x3FFF_FFFF) as usize;
        if size < VARHDRSZ {
            return Err(DatumError::varlena(format!(
                "4-byte header gives length {size}"
            )));
        }
        size
    };
    if size == 0 {
        return Err(DatumError::varlena("1-byte header gives length 0"));
    }
    if off.checked_add(size).is_none_or(|end| end > data.len()) {
        return Err(DatumError::Truncated(off));
    }
    Ok(size)
}

fn vartag_size(tag: u8) -> Result<usize, DatumError> {
    match tag {
        VARTAG_ONDISK => Ok(VARATT_EXTERNAL_SIZE),
        VARTAG_INDIRECT | VARTAG_EXPANDED_RO | VARTAG_EXPANDED_RW => Err(DatumError::varlena(
            format!("in-memory TOAST pointer (tag {tag}) in stored data"),
        )),
        _ => Err(DatumError::varlena(format!(
            "unknown TOAST pointer tag {tag}"
        ))),
    }
}

/// Splits one whole varlena (exactly `VARSIZE_ANY` bytes) into its form.
pub(crate) fn parse(raw: &[u8]) -> Result<Varlena<'_>, DatumError> {
    let size = varsize_any(raw, 0)?;
    if size != raw.len() {
        return Err(DatumError::varlena(format!(
            "header gives {size} bytes, the datum has {}",
            raw.len()
        )));
    }
    let first = u8_at(raw, 0)?;
    if first == 0x01 {
        let p = raw.get(2..).unwrap_or_default();
        return Ok(Varlena::External(ToastPointer {
            rawsize: crate::bytes::i32_at(p, 0)?,
            extinfo: u32_at(p, 4)?,
            value_id: u32_at(p, 8)?,
            toast_relid: u32_at(p, 12)?,
        }));
    }
    if first & 0x01 == 0x01 {
        return Ok(Varlena::Plain(raw.get(1..).unwrap_or_default()));
    }
    if first & 0x03 == 0x02 {
        let tcinfo = u32_at(raw, 4)
            .map_err(|_| DatumError::varlena("compressed varlena without va_tcinfo"))?;
        return Ok(Varlena::Compressed {
            tcinfo,
            data: raw.get(8..).unwrap_or_default(),
        });
    }
    Ok(Varlena::Plain(raw.get(VARHDRSZ..).unwrap_or_default()))
}

/// The value's bytes, decompressed and fetched from TOAST as needed
/// (`detoast_attr`).
pub(crate) fn detoast<'a>(
    raw: &'a [u8],
    toast: &dyn ToastSource,
) -> Result<Cow<'a, [u8]>, DatumError> {
    match parse(raw)? {
        Varlena::Plain(p) => Ok(Cow::Borrowed(p)),
        Varlena::Compressed { tcinfo, data } => decompress(tcinfo, data).map(Cow::Owned),
        Varlena::External(ptr) => fetch_external(&ptr, toast).map(Cow::Owned),
    }
}

/// A varlena inside a container (array element): plain only, as
/// PostgreSQL detoasts elements before building arrays.
pub(crate) fn plain_payload(raw: &[u8]) -> Result<&[u8], DatumError> {
    match parse(raw)? {
        Varlena::Plain(p) => Ok(p),
        Varlena::Compressed { .. } => Err(DatumError::varlena("compressed value inside an array")),
        Varlena::External(_) => Err(DatumError::varlena("TOAST pointer inside an array")),
    }
}

fn fetch_external(ptr: &ToastPointer, toast: &dyn ToastSource) -> Result<Vec<u8>, DatumError> {
    let unresolved = DatumError::UnresolvedToast {
        toast_relid: ptr.toast_relid,
        value_id: ptr.value_id,
    };
    let rawsize = usize::try_from(ptr.rawsize)
        .ok()
        .and_then(|r| r.checked_sub(VARHDRSZ))
        .ok_or_else(|| {
            DatumError::varlena(format!("TOAST pointer with va_rawsize {}", ptr.rawsize))
        })?;
    let extsize = ptr.extsize();
    let data = toast
        .fetch(ptr.toast_relid, ptr.value_id)
        .ok_or(unresolved.clone())?;
    if data.len() != extsize
        && let Some(value) = stored_anew(&data, rawsize)
    {
        return Ok(value);
    }
    // Fewer bytes than the pointer names means chunks are missing; more
    // means the chunks are not this value's.
    if data.len() < extsize {
        return Err(unresolved);
    }
    if data.len() > extsize {
        return Err(DatumError::varlena(format!(
            "TOAST value {} has {} bytes in its chunks, the pointer names {extsize}",
            ptr.value_id,
            data.len()
        )));
    }
    if !ptr.is_compressed() {
        if data.len() != rawsize {
            return Err(DatumError::varlena(format!(
                "uncompressed TOAST value of {} bytes, the pointer names {rawsize}",
                data.len()
            )));
        }
        return Ok(data);
    }
    let tcinfo = u32_at(&data, 0)
        .map_err(|_| DatumError::varlena("compressed TOAST value without va_tcinfo"))?;
    let out = decompress(tcinfo, data.get(4..).unwrap_or_default())?;
    if out.len() != rawsize {
        return Err(DatumError::varlena(format!(
            "TOAST value decompressed to {} bytes, the pointer names {rawsize}",
            out.len()
        )));
    }
    Ok(out)
}

/// A value a table rewrite stored anew under the same value id. VACUUM
/// FULL and CLUSTER keep value ids (`toast_save_datum` with
/// `rd_toastoid`), but the rewrite detoasts each value into the new heap,
/// and one stored uncompressed is compressed again with the column's
/// method now (`ALTER … SET COMPRESSION` first, say): the chunks then no
/// longer have the size the older pointer names. Such chunks describe
/// themselves (plain, or `va_tcinfo` and the compressed bytes), and they
/// are the value only if they hold exactly the pointer's raw size.
fn stored_anew(data: &[u8], rawsize: usize) -> Option<Vec<u8>> {
    if data.len() == rawsize {
        return Some(data.to_vec());
    }
    let tcinfo = u32_at(data, 0).ok()?;
    if (tcinfo & EXTSIZE_MASK) as usize != rawsize || data.len() >= rawsize {
        return None;
    }
    let out = decompress(tcinfo, data.get(4..)?).ok()?;
    (out.len() == rawsize).then_some(out)
}

/// Decompresses per `va_tcinfo` (`toast_decompress_datum`).
pub(crate) fn decompress(tcinfo: u32, data: &[u8]) -> Result<Vec<u8>, DatumError> {
    let rawsize = (tcinfo & EXTSIZE_MASK) as usize;
    let method = tcinfo >> EXTSIZE_BITS;
    let name = match method {
        PGLZ => "pglz",
        LZ4 => "lz4",
        _ => {
            return Err(DatumError::Decompression {
                method: "unknown",
                detail: format!("compression method id {method}"),
            });
        }
    };
    let err = |detail: String| DatumError::Decompression {
        method: name,
        detail,
    };
    if rawsize > data.len().saturating_mul(MAX_EXPANSION).saturating_add(16) {
        return Err(err(format!(
            "{} compressed bytes cannot hold {rawsize} bytes",
            data.len()
        )));
    }
    match method {
        PGLZ => walshadow_wal_decode::pglz_decompress(data, rawsize, true)
            .map_err(|e| err(e.to_string())),
        _ => {
            let mut out = vec![0u8; rawsize];
            let n =
                lz4_flex::block::decompress_into(data, &mut out).map_err(|e| err(e.to_string()))?;
            if n != rawsize {
                return Err(err(format!(
                    "decompressed to {n} bytes, expected {rawsize}"
                )));
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toast::{NoToast, ToastChunks};

    fn short(payload: &[u8]) -> Vec<u8> {
        let mut v = vec![((payload.len() + 1) << 1 | 1) as u8];
        v.extend_from_slice(payload);
        v
    }

    fn long(payload: &[u8]) -> Vec<u8> {
        let mut v = (((payload.len() + 4) as u32) << 2).to_le_bytes().to_vec();
        v.extend_from_slice(payload);
        v
    }

    fn external(rawsize: i32, extinfo: u32, value_id: u32, relid: u32) -> Vec<u8> {
        let mut v = vec![0x01, VARTAG_ONDISK];
        for x in [rawsize as u32, extinfo, value_id, relid] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v
    }

    #[test]
    fn plain_forms() {
        assert_eq!(detoast(&short(b"abc"), &NoToast).unwrap().as_ref(), b"abc");
        assert_eq!(detoast(&long(b"abc"), &NoToast).unwrap().as_ref(), b"abc");
        assert_eq!(detoast(&short(b""), &NoToast).unwrap().as_ref(), b"");
    }

    #[test]
    fn lz4_inline() {
        let raw = b"hello hello hello hello hello hello".repeat(20);
        let comp = lz4_flex::block::compress(&raw);
        let mut v = (((comp.len() + 8) as u32) << 2 | 0x02)
            .to_le_bytes()
            .to_vec();
        v.extend_from_slice(&(raw.len() as u32 | (LZ4 << 30)).to_le_bytes());
        v.extend_from_slice(&comp);
        assert_eq!(detoast(&v, &NoToast).unwrap().as_ref(), raw.as_slice());
        // A lying raw size fails, it does not allocate or panic.
        let mut bad = v.clone();
        bad[4..8].copy_from_slice(&(EXTSIZE_MASK | (LZ4 << 30)).to_le_bytes());
        assert!(matches!(
            detoast(&bad, &NoToast),
            Err(DatumError::Decompression { .. })
        ));
        let mut bad = v;
        bad[4..8].copy_from_slice(&(raw.len() as u32 | (3 << 30)).to_le_bytes());
        assert!(matches!(
            detoast(&bad, &NoToast),
            Err(DatumError::Decompression { .. })
        ));
    }

    #[test]
    fn external_values() {
        let mut chunks = ToastChunks::new();
        let ptr = external(4 + 5, 5, 77, 900);
        assert_eq!(
            detoast(&ptr, &chunks),
            Err(DatumError::UnresolvedToast {
                toast_relid: 900,
                value_id: 77
            })
        );
        chunks.add_chunk(900, 77, 0, b"hel".to_vec());
        // Only part of the value: still unresolved.
        assert!(matches!(
            detoast(&ptr, &chunks),
            Err(DatumError::UnresolvedToast { .. })
        ));
        chunks.add_chunk(900, 77, 1, b"lo".to_vec());
        assert_eq!(detoast(&ptr, &chunks).unwrap().as_ref(), b"hello");
        // Compressed external: the chunks hold va_tcinfo + lz4 data.
        let raw = b"abcabcabcabcabcabcabcabcabcabcabcabc".to_vec();
        let comp = lz4_flex::block::compress(&raw);
        let mut stored = (raw.len() as u32 | (LZ4 << 30)).to_le_bytes().to_vec();
        stored.extend_from_slice(&comp);
        chunks.add_chunk(900, 78, 0, stored.clone());
        let ptr = external(
            raw.len() as i32 + 4,
            stored.len() as u32 | (LZ4 << 30),
            78,
            900,
        );
        assert_eq!(detoast(&ptr, &chunks).unwrap().as_ref(), raw.as_slice());

        // Stored anew by a rewrite under the same value id: an older
        // pointer naming it uncompressed finds it compressed now, and one
        // naming it compressed finds it plain.
        let mut rewritten = ToastChunks::new();
        rewritten.add_chunk(900, 79, 0, stored.clone());
        let plain_ptr = external(raw.len() as i32 + 4, raw.len() as u32, 79, 900);
        assert_eq!(
            detoast(&plain_ptr, &rewritten).unwrap().as_ref(),
            raw.as_slice()
        );
        rewritten.add_chunk(900, 80, 0, raw.clone());
        let packed_ptr = external(
            raw.len() as i32 + 4,
            stored.len() as u32 | (LZ4 << 30),
            80,
            900,
        );
        assert_eq!(
            detoast(&packed_ptr, &rewritten).unwrap().as_ref(),
            raw.as_slice()
        );
        // Chunks of another size that are not the value stay refused.
        let longer_ptr = external(raw.len() as i32 + 5, raw.len() as u32 + 1, 79, 900);
        assert!(detoast(&longer_ptr, &rewritten).is_err());
    }

    #[test]
    fn hostile_headers() {
        for bad in [
            vec![],
            vec![0x01],
            vec![0x01, 1, 0, 0],
            vec![0x01, 18, 0, 0],
            vec![0x01, 99],
            vec![0x00, 0x00, 0x00],
            vec![0x00, 0x00, 0x00, 0x00],
            vec![0x40, 0x00, 0x00, 0x00],
            vec![0x0b, b'a'],
            vec![0x02, 0, 0, 0],
            vec![0x12, 0, 0, 0],
        ] {
            assert!(detoast(&bad, &NoToast).is_err(), "{bad:?}");
        }
        let ptr = external(-5, 5, 1, 2);
        assert!(matches!(
            detoast(&ptr, &NoToast),
            Err(DatumError::BadVarlena(_))
        ));
    }
}
