//! Relation, transaction and timeline identifiers.

use std::fmt;

/// `Oid`.
pub type Oid = u32;

/// `FirstNormalObjectId`: OIDs, and relation file numbers, below it are
/// assigned by initdb. A later relation's file number comes from the OID
/// counter, so a file numbered below it is always a system catalog's.
pub const FIRST_NORMAL_OBJECT_ID: Oid = 16384;
/// `TransactionId` (32-bit, wraps; comparisons need an epoch-aware context).
pub type Xid = u32;
/// `BlockNumber`.
pub type BlockNumber = u32;
/// `TimeLineID`.
pub type TimeLineId = u32;

/// A tuple's place in its relation's main fork (`ItemPointerData`,
/// itemptr.h): block number and 1-based line pointer offset. Also how a
/// `ctid` reads: `(block,offset)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tid {
    pub block: BlockNumber,
    pub offset: u16,
}

impl fmt::Display for Tid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({},{})", self.block, self.offset)
    }
}

/// `RelFileLocator` (`RelFileNode` before 16; same 12 bytes): tablespace,
/// database and relfilenumber of one relation's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct RelFileLocator {
    #[serde(rename = "spc")]
    pub spc_oid: Oid,
    #[serde(rename = "db")]
    pub db_oid: Oid,
    #[serde(rename = "rel")]
    pub rel_number: Oid,
}

impl fmt::Display for RelFileLocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.spc_oid, self.db_oid, self.rel_number)
    }
}

/// `ForkNumber` (relpath.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ForkNumber {
    Main,
    Fsm,
    VisibilityMap,
    Init,
}

impl ForkNumber {
    pub fn from_u8(n: u8) -> Option<Self> {
        match n {
            0 => Some(ForkNumber::Main),
            1 => Some(ForkNumber::Fsm),
            2 => Some(ForkNumber::VisibilityMap),
            3 => Some(ForkNumber::Init),
            _ => None,
        }
    }

    /// The name PostgreSQL uses in file names (`forkNames` in relpath.c).
    pub fn name(self) -> &'static str {
        match self {
            ForkNumber::Main => "main",
            ForkNumber::Fsm => "fsm",
            ForkNumber::VisibilityMap => "vm",
            ForkNumber::Init => "init",
        }
    }
}

impl fmt::Display for ForkNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
