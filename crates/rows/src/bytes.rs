//! Checked little-endian reads at an offset: every read yields bytes that
//! are there or [`DatumError::Truncated`], never a panic.

use crate::error::DatumError;

pub(crate) fn slice(b: &[u8], off: usize, len: usize) -> Result<&[u8], DatumError> {
    let end = off.checked_add(len).ok_or(DatumError::Truncated(off))?;
    b.get(off..end).ok_or(DatumError::Truncated(off))
}

pub(crate) fn array<const N: usize>(b: &[u8], off: usize) -> Result<[u8; N], DatumError> {
    let s = slice(b, off, N)?;
    let mut a = [0u8; N];
    a.copy_from_slice(s);
    Ok(a)
}

pub(crate) fn u8_at(b: &[u8], off: usize) -> Result<u8, DatumError> {
    b.get(off).copied().ok_or(DatumError::Truncated(off))
}

pub(crate) fn u16_at(b: &[u8], off: usize) -> Result<u16, DatumError> {
    Ok(u16::from_le_bytes(array(b, off)?))
}

pub(crate) fn i16_at(b: &[u8], off: usize) -> Result<i16, DatumError> {
    Ok(i16::from_le_bytes(array(b, off)?))
}

pub(crate) fn u32_at(b: &[u8], off: usize) -> Result<u32, DatumError> {
    Ok(u32::from_le_bytes(array(b, off)?))
}

pub(crate) fn i32_at(b: &[u8], off: usize) -> Result<i32, DatumError> {
    Ok(i32::from_le_bytes(array(b, off)?))
}

pub(crate) fn i64_at(b: &[u8], off: usize) -> Result<i64, DatumError> {
    Ok(i64::from_le_bytes(array(b, off)?))
}

/// Exactly `N` bytes: a fixed-length datum whose stored length is wrong is
/// a catalog/tuple mismatch, not something to read past.
pub(crate) fn exact<const N: usize>(
    b: &[u8],
    type_name: &'static str,
) -> Result<[u8; N], DatumError> {
    if b.len() != N {
        return Err(DatumError::bad(
            type_name,
            format!("{} bytes where {N} are expected", b.len()),
        ));
    }
    array(b, 0)
}
