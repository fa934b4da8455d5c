//! A relation's tuples read straight from its main-fork file in the cluster's data
//! directory: the bytes a heap decoder is tested on, without going through WAL.
//!
//! The page layout follows `PageHeaderData` and `ItemIdData` (src/include/storage/
//! bufpage.h, itemid.h): `pd_lower` at byte 12 ends the line pointer array, `pd_upper`
//! at 14 is zero on a page never initialized; a line pointer is `lp_off:15`,
//! `lp_flags:2`, `lp_len:15`, little-endian. Run a `CHECKPOINT` first so the file holds
//! what was written.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};

use crate::Cluster;

/// `BLCKSZ` of the builds the test kit runs.
const BLCKSZ: usize = 8192;
/// `SizeOfPageHeaderData`.
const PAGE_HEADER: usize = 24;
/// `LP_NORMAL`.
const LP_NORMAL: u32 = 1;

/// The main-fork file of relation `regclass` (an SQL expression: `'t'::regclass`, or
/// an OID).
pub fn relation_file(cluster: &Cluster, regclass: &str) -> Result<PathBuf> {
    let rel = cluster.query_one(&format!("select pg_relation_filepath({regclass})"))?;
    Ok(cluster.data_dir().join(rel.trim()))
}

/// Every normal tuple of a heap file, in ctid order (block, then line pointer): the
/// bytes a line pointer points at.
pub fn heap_tuples(path: &Path) -> Result<Vec<Vec<u8>>> {
    let file = std::fs::read(path).with_context(|| path.display().to_string())?;
    ensure!(
        file.len() % BLCKSZ == 0,
        "{}: not whole pages",
        path.display()
    );
    let mut out = Vec::new();
    for page in file.chunks(BLCKSZ) {
        let pd_lower = usize::from(u16::from_le_bytes([page[12], page[13]]));
        let pd_upper = usize::from(u16::from_le_bytes([page[14], page[15]]));
        if pd_upper == 0 {
            continue; // a new, never initialized page
        }
        ensure!(
            (PAGE_HEADER..=BLCKSZ).contains(&pd_lower),
            "bad pd_lower {pd_lower}"
        );
        for lp in page[PAGE_HEADER..pd_lower].chunks_exact(4) {
            let v = u32::from_le_bytes([lp[0], lp[1], lp[2], lp[3]]);
            let (off, flags, len) = ((v & 0x7fff) as usize, (v >> 15) & 3, (v >> 17) as usize);
            if flags != LP_NORMAL {
                continue;
            }
            let tuple = page
                .get(off..off + len)
                .context("line pointer past the page")?;
            out.push(tuple.to_vec());
        }
    }
    Ok(out)
}
