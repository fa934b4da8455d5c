//! The parity oracle for the WAL reader: records as `walshadow wal dump`
//! prints them (JSON lines) against pg_waldump's, field by field.

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use walshadow_types::Lsn;

use crate::WaldumpRecord;

/// A block reference of a `walshadow wal dump` line.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DumpBlock {
    pub id: u8,
    pub spc: u32,
    pub db: u32,
    pub rel: u32,
    pub fork: String,
    pub blk: u32,
    pub fpi: bool,
}

/// The fields of a `walshadow wal dump` line that tools rely on.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DumpRecord {
    pub lsn: Lsn,
    pub prev: Lsn,
    pub rmgr: String,
    /// pg_waldump's kind name (`desc:`'s first word).
    #[serde(default)]
    pub kind: Option<String>,
    pub info: u8,
    pub xid: u32,
    pub tot_len: u32,
    pub blocks: Vec<DumpBlock>,
}

/// Parses `walshadow wal dump` output.
pub fn parse_dump_output(text: &str) -> Result<Vec<DumpRecord>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).with_context(|| format!("dump line {}: {l}", i + 1)))
        .collect()
}

/// Checks that `ours` and `theirs` hold the same records with the same lsn,
/// prev, rmgr, kind (pg_waldump's name of it), xid, tot_len and block references (id, locator, fork, block,
/// FPI flag). Errors name the first difference and count the rest.
pub fn assert_parity(ours: &[DumpRecord], theirs: &[WaldumpRecord]) -> Result<()> {
    let mut diffs = Vec::new();
    for (i, (o, t)) in ours.iter().zip(theirs).enumerate() {
        let mut d = Vec::new();
        if o.lsn != t.lsn {
            d.push(format!("lsn {} vs {}", o.lsn, t.lsn));
        }
        if o.prev != t.prev {
            d.push(format!("prev {} vs {}", o.prev, t.prev));
        }
        if o.rmgr != t.rmgr {
            d.push(format!("rmgr {} vs {}", o.rmgr, t.rmgr));
        }
        let kind = o.kind.as_deref().and_then(|k| k.split(' ').next());
        if kind != Some(t.kind()) {
            d.push(format!("kind {kind:?} vs {}", t.kind()));
        }
        if o.xid != t.xid {
            d.push(format!("xid {} vs {}", o.xid, t.xid));
        }
        if o.tot_len != t.tot_len {
            d.push(format!("tot_len {} vs {}", o.tot_len, t.tot_len));
        }
        let ob: Vec<_> = o
            .blocks
            .iter()
            .map(|b| (b.id, b.spc, b.db, b.rel, b.fork.as_str(), b.blk, b.fpi))
            .collect();
        let tb: Vec<_> = t
            .blocks
            .iter()
            .map(|b| (b.id, b.spc, b.db, b.rel, b.fork.as_str(), b.blk, b.fpi))
            .collect();
        if ob != tb {
            d.push(format!("blocks {ob:?} vs {tb:?}"));
        }
        if !d.is_empty() {
            diffs.push(format!("record #{i} at {}: {}", t.lsn, d.join("; ")));
        }
    }
    if ours.len() != theirs.len() {
        let first_extra = ours
            .get(theirs.len())
            .map(|r| format!("walshadow has more, from {}", r.lsn))
            .or_else(|| {
                theirs
                    .get(ours.len())
                    .map(|r| format!("pg_waldump has more, from {}", r.lsn))
            })
            .unwrap_or_default();
        diffs.push(format!(
            "record counts differ: walshadow {} vs pg_waldump {} ({first_extra})",
            ours.len(),
            theirs.len()
        ));
    }
    if let Some(first) = diffs.first() {
        bail!(
            "{} difference(s) with pg_waldump; first: {first}",
            diffs.len()
        );
    }
    Ok(())
}
