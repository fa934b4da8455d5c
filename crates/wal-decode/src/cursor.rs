//! A checked little-endian reader: every read either yields bytes that are
//! there or an error, never a panic (the `Buffer` idea of rust-postgres).

/// Reads little-endian integers off a byte slice, failing on truncation.
#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// The input ended before a field did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Truncated;

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], Truncated> {
        let end = self.pos.checked_add(n).ok_or(Truncated)?;
        let out = self.buf.get(self.pos..end).ok_or(Truncated)?;
        self.pos = end;
        Ok(out)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], Truncated> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Truncated> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, Truncated> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, Truncated> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, Truncated> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, Truncated> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, Truncated> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    /// `n` little-endian `u16`s; the length is checked before anything is
    /// allocated, so a hostile count costs nothing.
    pub(crate) fn u16s(&mut self, n: usize) -> Result<Vec<u16>, Truncated> {
        let raw = self.take(n.checked_mul(2).ok_or(Truncated)?)?;
        let mut words = Cursor::new(raw);
        (0..n).map(|_| words.u16()).collect()
    }

    /// `n` little-endian `u32`s; the length is checked before anything is
    /// allocated, so a hostile count costs nothing.
    pub(crate) fn u32s(&mut self, n: usize) -> Result<Vec<u32>, Truncated> {
        let raw = self.take(n.checked_mul(4).ok_or(Truncated)?)?;
        let mut words = Cursor::new(raw);
        (0..n).map(|_| words.u32()).collect()
    }

    /// Everything not read yet.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let out = self.buf.get(self.pos..).unwrap_or_default();
        self.pos = self.buf.len();
        out
    }

    /// Skips padding up to the next multiple of `align` (a power of two),
    /// counted from the start of the buffer (`SHORTALIGN`, `MAXALIGN`).
    pub(crate) fn align(&mut self, align: usize) -> Result<(), Truncated> {
        let pad = self.pos.wrapping_neg() & (align - 1);
        self.take(pad).map(drop)
    }
}
