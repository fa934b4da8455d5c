//! Shared invalidation messages (`SharedInvalidationMessage`,
//! storage/sinval.h) as commit, prepare and `XLOG_XACT_INVALIDATIONS`
//! records carry them: 16 bytes each, a union told apart by its first
//! byte, the signed `id`.
//!
//! ```text
//!  id >= 0  catcache  | id | pad(3) | dbId | hashValue | pad(4)
//!  -1       catalog   | id | pad(3) | dbId | catId     | pad(4)
//!  -2       relcache  | id | pad(3) | dbId | relId     | pad(4)
//!  -3       smgr      | id | backend_hi | backend_lo(2) | spc | db | relNumber
//!  -4       relmap    | id | pad(3) | dbId | pad(8)
//!  -5       snapshot  | id | pad(3) | dbId | relId     | pad(4)
//!  -6       relsync   | id | pad(3) | dbId | relid     | pad(4)   (18 on)
//! ```
//!
//! 15 to 17 define ids -1 to -5; 18 adds `SHAREDINVALRELSYNC_ID` (-6) for
//! the pgoutput relation cache. An id a major does not define is kept as
//! [`Inval::Other`] rather than refused: a message does not change how the
//! rest of its record parses.

use walshadow_types::{Oid, PgMajor, RelFileLocator};

/// `sizeof(SharedInvalidationMessage)`.
pub const SIZE_OF_INVAL: usize = 16;

/// One shared invalidation message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Inval {
    /// `SharedInvalCatcacheMsg`: one syscache entry (by key hash).
    Catcache { cache_id: i8, db: Oid, hash: u32 },
    /// `SharedInvalCatalogMsg` (-1): a whole catalog's caches.
    Catalog { db: Oid, cat_relid: Oid },
    /// `SharedInvalRelcacheMsg` (-2): one relation's descriptor (`rel` 0:
    /// all of them).
    Relcache { db: Oid, rel: Oid },
    /// `SharedInvalSmgrMsg` (-3): a relation's storage; `backend` is the
    /// owning backend of a temporary relation, -1 otherwise.
    Smgr {
        backend: i32,
        locator: RelFileLocator,
    },
    /// `SharedInvalRelmapMsg` (-4): the relation map file.
    Relmap { db: Oid },
    /// `SharedInvalSnapshotMsg` (-5): catalog snapshots.
    Snapshot { db: Oid, rel: Oid },
    /// `SharedInvalRelSyncMsg` (-6, 18 on): pgoutput's RelationSyncCache.
    RelSync { db: Oid, rel: Oid },
    /// An id the major does not define.
    Other(i8),
}

const SHAREDINVALCATALOG_ID: i8 = -1;
const SHAREDINVALRELCACHE_ID: i8 = -2;
const SHAREDINVALSMGR_ID: i8 = -3;
const SHAREDINVALRELMAP_ID: i8 = -4;
const SHAREDINVALSNAPSHOT_ID: i8 = -5;
const SHAREDINVALRELSYNC_ID: i8 = -6;

impl Inval {
    /// Parses one 16-byte message.
    pub fn parse(msg: &[u8; SIZE_OF_INVAL], major: PgMajor) -> Inval {
        let [
            id,
            b1,
            b2,
            b3,
            d0,
            d1,
            d2,
            d3,
            e0,
            e1,
            e2,
            e3,
            f0,
            f1,
            f2,
            f3,
        ] = *msg;
        let id = id as i8;
        let w1 = u32::from_le_bytes([d0, d1, d2, d3]);
        let w2 = u32::from_le_bytes([e0, e1, e2, e3]);
        let w3 = u32::from_le_bytes([f0, f1, f2, f3]);
        match id {
            0.. => Inval::Catcache {
                cache_id: id,
                db: w1,
                hash: w2,
            },
            SHAREDINVALCATALOG_ID => Inval::Catalog {
                db: w1,
                cat_relid: w2,
            },
            SHAREDINVALRELCACHE_ID => Inval::Relcache { db: w1, rel: w2 },
            SHAREDINVALSMGR_ID => Inval::Smgr {
                // backend_hi is int8: sign-extend, then append backend_lo.
                backend: (i32::from(b1 as i8) << 16) | i32::from(u16::from_le_bytes([b2, b3])),
                locator: RelFileLocator {
                    spc_oid: w1,
                    db_oid: w2,
                    rel_number: w3,
                },
            },
            SHAREDINVALRELMAP_ID => Inval::Relmap { db: w1 },
            SHAREDINVALSNAPSHOT_ID => Inval::Snapshot { db: w1, rel: w2 },
            SHAREDINVALRELSYNC_ID if major >= PgMajor::V18 => Inval::RelSync { db: w1, rel: w2 },
            other => Inval::Other(other),
        }
    }

    /// Parses `raw`, a whole number of messages.
    pub(crate) fn parse_all(raw: &[u8], major: PgMajor) -> Vec<Inval> {
        raw.chunks_exact(SIZE_OF_INVAL)
            .filter_map(|m| m.try_into().ok())
            .map(|m| Inval::parse(m, major))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: i8, rest: [u32; 3]) -> [u8; 16] {
        let mut m = [0u8; 16];
        m[0] = id as u8;
        m[4..8].copy_from_slice(&rest[0].to_le_bytes());
        m[8..12].copy_from_slice(&rest[1].to_le_bytes());
        m[12..16].copy_from_slice(&rest[2].to_le_bytes());
        m
    }

    #[test]
    fn kinds() {
        let v15 = PgMajor::V15;
        assert_eq!(
            Inval::parse(&msg(7, [5, 0xdead_beef, 0]), v15),
            Inval::Catcache {
                cache_id: 7,
                db: 5,
                hash: 0xdead_beef
            }
        );
        assert_eq!(
            Inval::parse(&msg(-1, [5, 1259, 0]), v15),
            Inval::Catalog {
                db: 5,
                cat_relid: 1259
            }
        );
        assert_eq!(
            Inval::parse(&msg(-2, [5, 16384, 0]), v15),
            Inval::Relcache { db: 5, rel: 16384 }
        );
        let mut smgr = msg(-3, [1663, 5, 16390]);
        smgr[1] = 0xFF; // backend -1 (InvalidBackendId / INVALID_PROC_NUMBER)
        smgr[2] = 0xFF;
        smgr[3] = 0xFF;
        assert_eq!(
            Inval::parse(&smgr, v15),
            Inval::Smgr {
                backend: -1,
                locator: RelFileLocator {
                    spc_oid: 1663,
                    db_oid: 5,
                    rel_number: 16390
                }
            }
        );
        let mut smgr = msg(-3, [1663, 5, 1]);
        smgr[1] = 1;
        smgr[2] = 2;
        assert!(matches!(
            Inval::parse(&smgr, v15),
            Inval::Smgr {
                backend: 0x1_0002,
                ..
            }
        ));
        assert_eq!(
            Inval::parse(&msg(-4, [5, 0, 0]), v15),
            Inval::Relmap { db: 5 }
        );
        assert_eq!(
            Inval::parse(&msg(-5, [5, 2608, 0]), v15),
            Inval::Snapshot { db: 5, rel: 2608 }
        );
        assert_eq!(Inval::parse(&msg(-6, [5, 1, 0]), v15), Inval::Other(-6));
        assert_eq!(
            Inval::parse(&msg(-6, [5, 1, 0]), PgMajor::V18),
            Inval::RelSync { db: 5, rel: 1 }
        );
        assert_eq!(
            Inval::parse(&msg(-7, [0; 3]), PgMajor::V18),
            Inval::Other(-7)
        );
        // Only whole messages.
        assert_eq!(Inval::parse_all(&[0u8; 40], v15).len(), 2);
    }
}
