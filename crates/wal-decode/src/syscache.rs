//! What a catcache invalidation names: the syscache its `id` is, and the
//! hash of the key it was computed from.
//!
//! A catcache message (see [`crate::sinval`]) carries a cache id and a
//! hash, never the key. The ids are positions in `SysCacheIdentifier`
//! (`utils/syscache.h` up to 16, generated `catalog/syscache_ids.h` from
//! 17), which differ between majors: 18 sorts `EXTENSIONNAME` and
//! `EXTENSIONOID` in, while 15 to 17 appended `EXTENSIONOID` at the end in
//! a minor release (15.20, 17.10; 16.2 predates it). The list below was
//! read from 15.20's and 16.2's `syscache.h` and 18's `syscache_ids.h`,
//! and checked against the `cacheinfo` array (catalog and index OIDs per
//! id) compiled into the 15.20, 16.2, 17.10 and 18.6 servers.
//!
//! The hash is `CatalogCacheComputeHashValue` (catcache.c): per key an
//! OID's `murmurhash32` (`int4hashfast`), a name's `hash_bytes`
//! (`namehashfast`), the second key rotated left by 8, the third by 16,
//! the fourth by 24, all XORed. Knowing an object's OID (or name) is
//! enough to recognise a message about it.

use walshadow_types::{Oid, PgMajor};

/// The syscaches every supported major has, in id order (alphabetical:
/// `SysCacheIdentifier` of 16.2).
#[rustfmt::skip]
const SYSCACHES: &[&str] = &[
    "AGGFNOID", "AMNAME", "AMOID", "AMOPOPID", "AMOPSTRATEGY", "AMPROCNUM", "ATTNAME", "ATTNUM",
    "AUTHMEMMEMROLE", "AUTHMEMROLEMEM", "AUTHNAME", "AUTHOID", "CASTSOURCETARGET",
    "CLAAMNAMENSP", "CLAOID", "COLLNAMEENCNSP", "COLLOID", "CONDEFAULT", "CONNAMENSP",
    "CONSTROID", "CONVOID", "DATABASEOID", "DEFACLROLENSPOBJ", "ENUMOID", "ENUMTYPOIDNAME",
    "EVENTTRIGGERNAME", "EVENTTRIGGEROID", "FOREIGNDATAWRAPPERNAME", "FOREIGNDATAWRAPPEROID",
    "FOREIGNSERVERNAME", "FOREIGNSERVEROID", "FOREIGNTABLEREL", "INDEXRELID", "LANGNAME",
    "LANGOID", "NAMESPACENAME", "NAMESPACEOID", "OPERNAMENSP", "OPEROID", "OPFAMILYAMNAMENSP",
    "OPFAMILYOID", "PARAMETERACLNAME", "PARAMETERACLOID", "PARTRELID", "PROCNAMEARGSNSP",
    "PROCOID", "PUBLICATIONNAME", "PUBLICATIONNAMESPACE", "PUBLICATIONNAMESPACEMAP",
    "PUBLICATIONOID", "PUBLICATIONREL", "PUBLICATIONRELMAP", "RANGEMULTIRANGE", "RANGETYPE",
    "RELNAMENSP", "RELOID", "REPLORIGIDENT", "REPLORIGNAME", "RULERELNAME", "SEQRELID",
    "STATEXTDATASTXOID", "STATEXTNAMENSP", "STATEXTOID", "STATRELATTINH", "SUBSCRIPTIONNAME",
    "SUBSCRIPTIONOID", "SUBSCRIPTIONRELMAP", "TABLESPACEOID", "TRFOID", "TRFTYPELANG",
    "TSCONFIGMAP", "TSCONFIGNAMENSP", "TSCONFIGOID", "TSDICTNAMENSP", "TSDICTOID",
    "TSPARSERNAMENSP", "TSPARSEROID", "TSTEMPLATENAMENSP", "TSTEMPLATEOID", "TYPENAMENSP",
    "TYPEOID", "USERMAPPINGOID", "USERMAPPINGUSERSERVER",
];

/// Where 18 sorts in its two caches of `pg_extension`: after
/// `EVENTTRIGGEROID`.
const EXTENSION_AT_18: usize = 27;

/// The name of syscache `id` in `major` (`"RELOID"`, …), or `None` for
/// an id the major does not define.
pub fn syscache_name(major: PgMajor, id: i8) -> Option<&'static str> {
    let id = usize::try_from(id).ok()?;
    match major {
        // 15 to 17 appended EXTENSIONOID in a minor release.
        PgMajor::V15 | PgMajor::V16 | PgMajor::V17 if id == SYSCACHES.len() => Some("EXTENSIONOID"),
        PgMajor::V15 | PgMajor::V16 | PgMajor::V17 => SYSCACHES.get(id).copied(),
        PgMajor::V18 => match id.checked_sub(EXTENSION_AT_18) {
            None => SYSCACHES.get(id).copied(),
            Some(0) => Some("EXTENSIONNAME"),
            Some(1) => Some("EXTENSIONOID"),
            Some(_) => SYSCACHES.get(id - 2).copied(),
        },
    }
}

/// The hash of an OID key (`int4hashfast`: `murmurhash32`).
pub fn oid_key_hash(oid: Oid) -> u32 {
    let mut h = oid;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// The hash of a `name` key (`namehashfast`: `hash_bytes` over the
/// name's bytes).
pub fn name_key_hash(name: &str) -> u32 {
    hash_bytes(name.as_bytes())
}

/// The hash of a cache entry whose keys hash to `keys` (first key first).
pub fn entry_hash(keys: &[u32]) -> u32 {
    keys.iter()
        .take(4)
        .zip([0u32, 8, 16, 24])
        .fold(0, |h, (k, r)| h ^ k.rotate_left(r))
}

/// Bob Jenkins' lookup3 hash as PostgreSQL has it (`hash_bytes`,
/// common/hashfn.c), little-endian. Written out because the hash must be
/// PostgreSQL's bit for bit; no crate promises that.
fn hash_bytes(k: &[u8]) -> u32 {
    fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
        *a = a.wrapping_sub(*c);
        *a ^= c.rotate_left(4);
        *c = c.wrapping_add(*b);
        *b = b.wrapping_sub(*a);
        *b ^= a.rotate_left(6);
        *a = a.wrapping_add(*c);
        *c = c.wrapping_sub(*b);
        *c ^= b.rotate_left(8);
        *b = b.wrapping_add(*a);
        *a = a.wrapping_sub(*c);
        *a ^= c.rotate_left(16);
        *c = c.wrapping_add(*b);
        *b = b.wrapping_sub(*a);
        *b ^= a.rotate_left(19);
        *a = a.wrapping_add(*c);
        *c = c.wrapping_sub(*b);
        *c ^= b.rotate_left(4);
        *b = b.wrapping_add(*a);
    }
    fn word(bytes: &[u8]) -> u32 {
        bytes
            .iter()
            .take(4)
            .enumerate()
            .fold(0, |w, (i, &b)| w | u32::from(b) << (8 * i))
    }
    let len = u32::try_from(k.len()).unwrap_or(u32::MAX);
    let init = 0x9e37_79b9u32.wrapping_add(len).wrapping_add(3_923_095);
    let (mut a, mut b, mut c) = (init, init, init);
    let mut chunks = k.chunks_exact(12);
    for chunk in &mut chunks {
        let (x, rest) = chunk.split_at(4);
        let (y, z) = rest.split_at(4);
        a = a.wrapping_add(word(x));
        b = b.wrapping_add(word(y));
        c = c.wrapping_add(word(z));
        mix(&mut a, &mut b, &mut c);
    }
    // The last 0 to 11 bytes; the lowest byte of `c` is left for the
    // length, so its bytes go in one position up.
    let tail = chunks.remainder();
    a = a.wrapping_add(word(tail));
    b = b.wrapping_add(word(tail.get(4..).unwrap_or(&[])));
    c = c.wrapping_add(word(tail.get(8..).unwrap_or(&[])) << 8);
    // final()
    c ^= b;
    c = c.wrapping_sub(b.rotate_left(14));
    a ^= c;
    a = a.wrapping_sub(c.rotate_left(11));
    b ^= a;
    b = b.wrapping_sub(a.rotate_left(25));
    c ^= b;
    c = c.wrapping_sub(b.rotate_left(16));
    a ^= c;
    a = a.wrapping_sub(c.rotate_left(4));
    b ^= a;
    b = b.wrapping_sub(a.rotate_left(14));
    c ^= b;
    c = c.wrapping_sub(b.rotate_left(24));
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_by_major() {
        assert_eq!(syscache_name(PgMajor::V15, 55), Some("RELOID"));
        assert_eq!(syscache_name(PgMajor::V17, 80), Some("TYPEOID"));
        assert_eq!(syscache_name(PgMajor::V18, 57), Some("RELOID"));
        assert_eq!(syscache_name(PgMajor::V18, 82), Some("TYPEOID"));
        assert_eq!(syscache_name(PgMajor::V15, 83), Some("EXTENSIONOID"));
        assert_eq!(
            syscache_name(PgMajor::V18, 84),
            Some("USERMAPPINGUSERSERVER")
        );
        assert_eq!(syscache_name(PgMajor::V18, 85), None);
        assert_eq!(syscache_name(PgMajor::V16, -1), None);
        assert_eq!(syscache_name(PgMajor::V18, 26), Some("EVENTTRIGGEROID"));
        assert_eq!(syscache_name(PgMajor::V18, 27), Some("EXTENSIONNAME"));
        assert_eq!(syscache_name(PgMajor::V18, 28), Some("EXTENSIONOID"));
        assert_eq!(
            syscache_name(PgMajor::V18, 29),
            Some("FOREIGNDATAWRAPPERNAME")
        );
        assert_eq!(
            syscache_name(PgMajor::V15, 27),
            Some("FOREIGNDATAWRAPPERNAME")
        );
        assert_eq!(syscache_name(PgMajor::V15, 84), None);
    }

    /// `select hashtext(x)` on PostgreSQL 15 and 18 (`hash_bytes` over the
    /// text's bytes, deterministic collation), as PostgreSQL prints them (signed).
    #[test]
    fn hash_bytes_matches_postgres() {
        for (text, want) in HASHTEXT {
            assert_eq!(name_key_hash(text) as i32, *want, "{text:?}");
        }
    }

    const HASHTEXT: &[(&str, i32)] = &[
        ("", -1477818771),
        ("a", 1075015857),
        ("ab", 1718550461),
        ("abc", -785388649),
        ("abcd", -393934804),
        ("pinned", 1260125866),
        ("pg_temp_3", 1146080206),
        ("public", 699991767),
        ("abcdefgh", -1960928205),
        ("abcdefghijk", -1483803693),
        ("abcdefghijkl", -1586087212),
        ("abcdefghijklm", 405849808),
        ("walshadow_config_table_x", 171407106),
        ("ünïcode_näme", -509858322),
        (
            "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            1580591788,
        ),
    ];
}
