//! The PostgreSQL major versions walshadow reads.

use std::fmt;

/// A supported PostgreSQL major version. WAL layouts differ between majors;
/// every version-specific constant is looked up through this type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PgMajor {
    V15,
    V16,
    V17,
    V18,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("PostgreSQL major version {0} is not supported: walshadow reads 15, 16, 17 and 18")]
pub struct UnsupportedMajor(pub u32);

impl PgMajor {
    pub const ALL: [PgMajor; 4] = [PgMajor::V15, PgMajor::V16, PgMajor::V17, PgMajor::V18];

    pub fn number(self) -> u32 {
        match self {
            PgMajor::V15 => 15,
            PgMajor::V16 => 16,
            PgMajor::V17 => 17,
            PgMajor::V18 => 18,
        }
    }

    pub fn from_number(n: u32) -> Result<Self, UnsupportedMajor> {
        match n {
            15 => Ok(PgMajor::V15),
            16 => Ok(PgMajor::V16),
            17 => Ok(PgMajor::V17),
            18 => Ok(PgMajor::V18),
            other => Err(UnsupportedMajor(other)),
        }
    }

    /// From `server_version_num` (e.g. 150004 or 180001).
    pub fn from_version_num(num: u32) -> Result<Self, UnsupportedMajor> {
        Self::from_number(num / 10000)
    }

    /// `XLOG_PAGE_MAGIC` of this major (xlog_internal.h).
    pub fn xlog_page_magic(self) -> u16 {
        match self {
            PgMajor::V15 => 0xD110,
            PgMajor::V16 => 0xD113,
            PgMajor::V17 => 0xD116,
            PgMajor::V18 => 0xD118,
        }
    }

    /// The major whose WAL pages carry `magic`, if supported.
    pub fn from_xlog_page_magic(magic: u16) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.xlog_page_magic() == magic)
    }
}

impl fmt::Display for PgMajor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number())
    }
}
