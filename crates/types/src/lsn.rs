//! `XLogRecPtr`: a byte position in the WAL stream.

use std::fmt;
use std::str::FromStr;

/// A WAL position (`XLogRecPtr`), displayed and parsed as PostgreSQL's `X/X`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Lsn(pub u64);

impl Lsn {
    /// `InvalidXLogRecPtr`.
    pub const INVALID: Lsn = Lsn(0);
    /// Greater than every position: "no limit".
    pub const MAX: Lsn = Lsn(u64::MAX);

    pub fn is_valid(self) -> bool {
        self.0 != 0
    }

    /// Offset of this position inside a WAL segment of `seg_size` bytes.
    pub fn segment_offset(self, seg_size: u32) -> u64 {
        self.0 % u64::from(seg_size)
    }

    /// Segment number (`XLByteToSeg`).
    pub fn segment_number(self, seg_size: u32) -> u64 {
        self.0 / u64::from(seg_size)
    }

    /// Offset inside an 8 KiB WAL page.
    pub fn block_offset(self, page_size: u32) -> u64 {
        self.0 % u64::from(page_size)
    }

    /// Round up to the next 8-byte boundary (`MAXALIGN`).
    pub fn align8(self) -> Lsn {
        Lsn(self.0.saturating_add(7) & !7)
    }

    pub fn checked_add(self, n: u64) -> Option<Lsn> {
        self.0.checked_add(n).map(Lsn)
    }

    /// Distance in bytes from `earlier`, or zero if `earlier` is later.
    pub fn distance_from(self, earlier: Lsn) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

impl fmt::Debug for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid LSN {0:?}: expected PostgreSQL's X/X form, e.g. 0/16B3740")]
pub struct ParseLsnError(pub String);

impl FromStr for Lsn {
    type Err = ParseLsnError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseLsnError(s.to_owned());
        let (hi, lo) = s.trim().split_once('/').ok_or_else(err)?;
        if hi.is_empty() || lo.is_empty() || hi.len() > 8 || lo.len() > 8 {
            return Err(err());
        }
        let hi = u32::from_str_radix(hi, 16).map_err(|_| err())?;
        let lo = u32::from_str_radix(lo, 16).map_err(|_| err())?;
        Ok(Lsn((u64::from(hi) << 32) | u64::from(lo)))
    }
}

impl serde::Serialize for Lsn {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Lsn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_round_trip() {
        for v in [0u64, 0x16B3740, 0x1_0000_0000, u64::MAX] {
            let l = Lsn(v);
            assert_eq!(l.to_string().parse::<Lsn>().unwrap(), l);
        }
        assert_eq!(Lsn(0x16B3740).to_string(), "0/16B3740");
        assert_eq!("1/A".parse::<Lsn>().unwrap(), Lsn(0x1_0000_000A));
    }

    #[test]
    fn parse_rejects_garbage() {
        for s in ["", "/", "0/", "/1", "x/1", "1/2/3", "123456789/0"] {
            assert!(s.parse::<Lsn>().is_err(), "{s}");
        }
    }

    #[test]
    fn align() {
        assert_eq!(Lsn(9).align8(), Lsn(16));
        assert_eq!(Lsn(16).align8(), Lsn(16));
    }
}
