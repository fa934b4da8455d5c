//! The one checked byte reader: every read either yields bytes that are
//! there or [`Truncated`], never a panic (the `Buffer` idea of
//! rust-postgres). Little-endian reads for what PostgreSQL stores on disk
//! and in WAL (and walshadow's own files); `_be` reads for the wire
//! protocol and binary `COPY`, which are big-endian. Callers add their own
//! context to the error (which field, which record).

/// Reads integers off a byte slice, failing on truncation.
#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// The input ended before a field did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the input ended before a field did")]
pub struct Truncated;

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Truncated> {
        let end = self.pos.checked_add(n).ok_or(Truncated)?;
        let out = self.buf.get(self.pos..end).ok_or(Truncated)?;
        self.pos = end;
        Ok(out)
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Truncated> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub fn u8(&mut self) -> Result<u8, Truncated> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u16(&mut self) -> Result<u16, Truncated> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub fn u32(&mut self) -> Result<u32, Truncated> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64, Truncated> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn i32(&mut self) -> Result<i32, Truncated> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    pub fn i64(&mut self) -> Result<i64, Truncated> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    pub fn u16_be(&mut self) -> Result<u16, Truncated> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub fn i16_be(&mut self) -> Result<i16, Truncated> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    pub fn u32_be(&mut self) -> Result<u32, Truncated> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub fn i32_be(&mut self) -> Result<i32, Truncated> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    pub fn u64_be(&mut self) -> Result<u64, Truncated> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    pub fn i64_be(&mut self) -> Result<i64, Truncated> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    /// The bytes up to the next NUL, which is consumed too.
    pub fn cstr(&mut self) -> Result<&'a [u8], Truncated> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        let nul = rest.iter().position(|&b| b == 0).ok_or(Truncated)?;
        let s = self.take(nul)?;
        self.take(1)?;
        Ok(s)
    }

    /// `n` little-endian `u16`s; the length is checked before anything is
    /// allocated, so a hostile count costs nothing.
    pub fn u16s(&mut self, n: usize) -> Result<Vec<u16>, Truncated> {
        let raw = self.take(n.checked_mul(2).ok_or(Truncated)?)?;
        let mut words = Cursor::new(raw);
        (0..n).map(|_| words.u16()).collect()
    }

    /// `n` little-endian `u32`s; the length is checked before anything is
    /// allocated, so a hostile count costs nothing.
    pub fn u32s(&mut self, n: usize) -> Result<Vec<u32>, Truncated> {
        let raw = self.take(n.checked_mul(4).ok_or(Truncated)?)?;
        let mut words = Cursor::new(raw);
        (0..n).map(|_| words.u32()).collect()
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        let out = self.buf.get(self.pos..).unwrap_or_default();
        self.pos = self.buf.len();
        out
    }

    /// Everything not read yet, without consuming it.
    pub fn peek_rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    /// Skips padding up to the next multiple of `align` (a power of two),
    /// counted from the start of the buffer (`SHORTALIGN`, `MAXALIGN`).
    pub fn align(&mut self, align: usize) -> Result<(), Truncated> {
        let pad = self.pos.wrapping_neg() & align.wrapping_sub(1);
        self.take(pad).map(drop)
    }
}

/// The little-endian `u16` at `at`, if the bytes are there.
pub fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

/// The little-endian `u32` at `at`, if the bytes are there.
pub fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_orders_and_fails_on_truncation_without_moving() {
        let bytes = [1u8, 0, 0, 2, b'h', b'i', 0, 9];
        let mut c = Cursor::new(&bytes);
        assert_eq!(c.u16(), Ok(1));
        assert_eq!(c.u16_be(), Ok(2));
        assert_eq!(c.cstr(), Ok(&b"hi"[..]));
        assert_eq!(c.position(), 7);
        assert_eq!(c.u32(), Err(Truncated));
        assert_eq!(c.position(), 7);
        assert_eq!(c.u32s(usize::MAX), Err(Truncated));
        assert_eq!(c.peek_rest(), &[9]);
        assert_eq!(c.u8(), Ok(9));
        assert_eq!(c.cstr(), Err(Truncated));
        assert_eq!(
            u32_at(&bytes, 4),
            Some(u32::from_le_bytes([b'h', b'i', 0, 9]))
        );
        assert_eq!(u32_at(&bytes, 5), None);
        assert_eq!(u16_at(&bytes, usize::MAX), None);
    }
}
