//! Resource manager ids (rmgrlist.h; identical in 15 to 18).

use std::fmt;

/// A resource manager id (`RmgrId`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RmgrId(pub u8);

/// Built-in rmgr names in id order, spelled as pg_waldump prints them.
const BUILTIN_NAMES: [&str; 22] = [
    "XLOG",
    "Transaction",
    "Storage",
    "CLOG",
    "Database",
    "Tablespace",
    "MultiXact",
    "RelMap",
    "Standby",
    "Heap2",
    "Heap",
    "Btree",
    "Hash",
    "Gin",
    "Gist",
    "Sequence",
    "SPGist",
    "BRIN",
    "CommitTs",
    "ReplicationOrigin",
    "Generic",
    "LogicalMessage",
];

/// Names of custom rmgrs (128..=255) as pg_waldump prints them when the
/// extension is not loaded: `custom###`. Built by const evaluation, where an
/// out-of-bounds index is a compile error, not a runtime panic.
#[allow(clippy::indexing_slicing)]
static CUSTOM_NAMES: [&str; 128] = {
    // Built at compile time so `name()` can hand out `&'static str`.
    const fn digit(d: u8) -> u8 {
        b'0' + d
    }
    const fn make(i: usize) -> [u8; 9] {
        let n = (128 + i) as u8;
        [
            b'c',
            b'u',
            b's',
            b't',
            b'o',
            b'm',
            digit(n / 100),
            digit((n / 10) % 10),
            digit(n % 10),
        ]
    }
    static BYTES: [[u8; 9]; 128] = {
        let mut out = [[0u8; 9]; 128];
        let mut i = 0;
        while i < 128 {
            out[i] = make(i);
            i += 1;
        }
        out
    };
    let mut names = [""; 128];
    let mut i = 0;
    while i < 128 {
        names[i] = match std::str::from_utf8(&BYTES[i]) {
            Ok(s) => s,
            Err(_) => "custom",
        };
        i += 1;
    }
    names
};

impl RmgrId {
    pub const XLOG: RmgrId = RmgrId(0);
    pub const XACT: RmgrId = RmgrId(1);
    pub const SMGR: RmgrId = RmgrId(2);
    pub const CLOG: RmgrId = RmgrId(3);
    pub const DBASE: RmgrId = RmgrId(4);
    pub const TBLSPC: RmgrId = RmgrId(5);
    pub const MULTIXACT: RmgrId = RmgrId(6);
    pub const RELMAP: RmgrId = RmgrId(7);
    pub const STANDBY: RmgrId = RmgrId(8);
    pub const HEAP2: RmgrId = RmgrId(9);
    pub const HEAP: RmgrId = RmgrId(10);
    pub const SEQ: RmgrId = RmgrId(15);
    pub const LOGICALMSG: RmgrId = RmgrId(21);

    /// `RM_MAX_BUILTIN_ID` of 15..18.
    pub const MAX_BUILTIN: u8 = 21;
    /// `RM_MIN_CUSTOM_ID`.
    pub const MIN_CUSTOM: u8 = 128;

    /// `RmgrIdIsValid`: built-in or custom.
    pub fn is_valid(self) -> bool {
        self.0 <= Self::MAX_BUILTIN || self.0 >= Self::MIN_CUSTOM
    }

    /// The name pg_waldump prints for this rmgr.
    pub fn name(self) -> &'static str {
        let i = usize::from(self.0);
        if let Some(n) = BUILTIN_NAMES.get(i) {
            n
        } else if let Some(n) = i.checked_sub(128).and_then(|j| CUSTOM_NAMES.get(j)) {
            n
        } else {
            "invalid"
        }
    }
}

impl fmt::Display for RmgrId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Debug for RmgrId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(RmgrId(10).name(), "Heap");
        assert_eq!(RmgrId(21).name(), "LogicalMessage");
        assert_eq!(RmgrId(128).name(), "custom128");
        assert_eq!(RmgrId(255).name(), "custom255");
        assert!(!RmgrId(22).is_valid());
        assert_eq!(RmgrId(22).name(), "invalid");
    }
}
