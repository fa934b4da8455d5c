//! Shared by the rmgr-decoder tests: compares what `decode_heap`,
//! `decode_xact` and `decode_running_xacts` read from a record with what
//! pg_waldump of the same major printed for it (offsets, flags, counts,
//! relations, subxacts, GIDs, invalidations), and reads the rmgr captures
//! in `tests/data/rmgr-pgNN/`.
#![allow(dead_code)]

use std::io::Read;

use walshadow_testkit::{Lsn, PgMajor, WaldumpRecord};
use walshadow_types::{RelFileLocator, Xid};
use walshadow_wal_decode::sinval::Inval;
use walshadow_wal_decode::{
    DroppedStats, HeapChange, OldTuple, PruneRecord, RecordView, RmgrId, WalRecord,
    WalStreamDecoder, XactRecord, decode_heap, decode_prune, decode_record, decode_running_xacts,
    decode_xact, heap_record_name,
};

pub fn unzstd(path: &str) -> Vec<u8> {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    ruzstd::decoding::StreamingDecoder::new(f)
        .unwrap()
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// The rmgrs these tests decode.
pub fn is_decoded_rmgr(r: RmgrId) -> bool {
    matches!(
        r,
        RmgrId::HEAP | RmgrId::HEAP2 | RmgrId::XACT | RmgrId::STANDBY
    )
}

/// Records as stored by `write_records`: `[lsn u64][end u64][len u32][raw]`.
pub fn read_records(bytes: &[u8]) -> Vec<WalRecord> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let lsn = Lsn(u64::from_le_bytes(rest[..8].try_into().unwrap()));
        let end = Lsn(u64::from_le_bytes(rest[8..16].try_into().unwrap()));
        let len = u32::from_le_bytes(rest[16..20].try_into().unwrap()) as usize;
        let raw = &rest[20..20 + len];
        let mut blocks = Vec::new();
        let v = decode_record(lsn, end, raw, &mut blocks).unwrap();
        out.push(v.to_owned());
        rest = &rest[20 + len..];
    }
    out
}

pub fn write_records(recs: &[WalRecord]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in recs {
        out.extend_from_slice(&r.lsn.0.to_le_bytes());
        out.extend_from_slice(&r.end.0.to_le_bytes());
        out.extend_from_slice(&(r.raw().len() as u32).to_le_bytes());
        out.extend_from_slice(r.raw());
    }
    out
}

/// pg_waldump's desc with punctuation turned into spaces, so 15's
/// `off 1 flags 0x08` and 16+'s `off: 1, flags: 0x08` read alike.
fn tokens(desc: &str) -> Vec<&str> {
    desc.split(|c: char| c.is_whitespace() || ",:;[]".contains(c))
        .filter(|t| !t.is_empty())
        .collect()
}

/// The token after the `nth` occurrence of `key`.
fn after<'a>(toks: &[&'a str], key: &str, nth: usize) -> Option<&'a str> {
    toks.iter()
        .enumerate()
        .filter(|(_, t)| **t == key)
        .nth(nth)
        .and_then(|(i, _)| toks.get(i + 1).copied())
}

fn num<T: std::str::FromStr>(toks: &[&str], key: &str, nth: usize) -> Result<T, String> {
    let t = after(toks, key, nth).ok_or_else(|| format!("no `{key}` #{nth} in desc"))?;
    t.parse()
        .map_err(|_| format!("`{key}` is followed by {t:?}, not a number"))
}

fn hex8(toks: &[&str], key: &str) -> Result<u8, String> {
    let t = after(toks, key, 0).ok_or_else(|| format!("no `{key}` in desc"))?;
    u8::from_str_radix(t.trim_start_matches("0x"), 16).map_err(|_| format!("bad hex {t:?}"))
}

/// Numbers following `key` up to the next non-number.
fn list_after(toks: &[&str], key: &str) -> Vec<u32> {
    let Some(i) = toks.iter().position(|t| *t == key) else {
        return vec![];
    };
    toks[i + 1..].iter().map_while(|t| t.parse().ok()).collect()
}

fn eq<T: PartialEq + std::fmt::Debug>(what: &str, ours: T, theirs: T) -> Result<(), String> {
    if ours == theirs {
        Ok(())
    } else {
        Err(format!("{what}: ours {ours:?}, pg_waldump {theirs:?}"))
    }
}

fn block_eq(dump: &WaldumpRecord, id: u8, loc: RelFileLocator, blk: u32) -> Result<(), String> {
    let b = dump
        .blocks
        .iter()
        .find(|b| b.id == id)
        .ok_or_else(|| format!("pg_waldump shows no block #{id}"))?;
    eq(
        &format!("block #{id}"),
        (loc.spc_oid, loc.db_oid, loc.rel_number, blk),
        (b.spc, b.db, b.rel, b.blk),
    )
}

/// Desc segments split at `; ` (xact and standby descs).
fn segments(desc: &str) -> Vec<&str> {
    desc.split(';').map(str::trim).collect()
}

fn segment<'a>(desc: &'a str, prefix: &str) -> Option<&'a str> {
    segments(desc)
        .into_iter()
        .find_map(|s| s.strip_prefix(prefix))
        .map(str::trim)
}

fn join<T: std::fmt::Display>(v: &[T]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `relpathperm(locator, MAIN_FORKNUM)` for the default and global
/// tablespaces.
fn relpath(l: &RelFileLocator) -> String {
    match l.spc_oid {
        1663 => format!("base/{}/{}", l.db_oid, l.rel_number),
        1664 => format!("global/{}", l.rel_number),
        spc => format!("pg_tblspc/{spc}/.../{}/{}", l.db_oid, l.rel_number),
    }
}

fn relpaths(rels: &[RelFileLocator]) -> String {
    rels.iter().map(relpath).collect::<Vec<_>>().join(" ")
}

/// `standby_desc_invalidations`' words for one message.
fn inval_desc(m: &Inval) -> String {
    match m {
        Inval::Catcache { cache_id, .. } => format!("catcache {cache_id}"),
        Inval::Catalog { cat_relid, .. } => format!("catalog {cat_relid}"),
        Inval::Relcache { rel, .. } => format!("relcache {rel}"),
        Inval::Smgr { .. } => "smgr".into(),
        Inval::Relmap { .. } => "relmap".into(),
        Inval::Snapshot { rel, .. } => format!("snapshot {rel}"),
        Inval::RelSync { rel, .. } => format!("relsync {rel}"),
        Inval::Other(id) => format!("unknown id {id}"),
    }
}

fn invals_eq(desc: &str, ours: &[Inval]) -> Result<(), String> {
    let theirs = segment(desc, "inval msgs:").unwrap_or("");
    let ours = ours.iter().map(inval_desc).collect::<Vec<_>>().join(" ");
    eq("inval msgs", ours.as_str(), theirs)
}

/// `TimestampTz` (µs since 2000-01-01 UTC) as `timestamptz_to_str` prints
/// it in UTC: `2026-11-29 10:18:53.431293`.
pub fn timestamptz_utc(ts: i64) -> String {
    let secs = ts.div_euclid(1_000_000) + 946_684_800;
    let micros = ts.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{micros:06}",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

/// The time at the start of an xact desc matches ours: the whole UTC
/// string when pg_waldump printed UTC, else the microseconds.
fn time_eq(desc_time: &str, ts: i64) -> Result<(), String> {
    let ours = timestamptz_utc(ts);
    if desc_time.ends_with(" UTC") {
        eq("time", ours.as_str(), desc_time.trim_end_matches(" UTC"))
    } else {
        let frac = &ours[ours.len() - 7..];
        if desc_time.contains(frac) {
            Ok(())
        } else {
            Err(format!("time: ours {ours}, pg_waldump {desc_time}"))
        }
    }
}

/// Checks our reading of `rec` against pg_waldump's line for it. Returns
/// the record kind (pg_waldump's first desc word) on success.
pub fn check_record(
    major: PgMajor,
    rec: &RecordView<'_>,
    dump: &WaldumpRecord,
) -> Result<String, String> {
    eq("lsn", rec.lsn, dump.lsn)?;
    eq("rmgr", rec.rmgr().name(), dump.rmgr.as_str())?;
    let kind = dump.kind().to_owned();
    let info = rec.header.rmgr_info();
    let body = dump.desc.strip_prefix(&kind).unwrap_or("").trim();
    match rec.rmgr() {
        RmgrId::HEAP | RmgrId::HEAP2 => {
            eq(
                "record name",
                heap_record_name(rec.rmgr(), info, major),
                Some(kind.as_str()),
            )?;
            let change = decode_heap(rec).map_err(|e| e.to_string())?;
            check_heap(change.as_ref(), body, dump)?;
            check_prune(major, rec, body, dump)?;
        }
        RmgrId::XACT => {
            let x = decode_xact(rec, major)
                .map_err(|e| e.to_string())?
                .ok_or("decode_xact returned None")?;
            check_xact(rec, &x, &kind, body)?;
        }
        RmgrId::STANDBY => {
            let r = decode_running_xacts(rec).map_err(|e| e.to_string())?;
            match (kind.as_str(), r) {
                ("RUNNING_XACTS", Some(r)) => {
                    let toks = tokens(body);
                    eq("nextXid", r.next_xid, num(&toks, "nextXid", 0)?)?;
                    eq(
                        "latestCompletedXid",
                        r.latest_completed_xid,
                        num(&toks, "latestCompletedXid", 0)?,
                    )?;
                    eq(
                        "oldestRunningXid",
                        r.oldest_running_xid,
                        num(&toks, "oldestRunningXid", 0)?,
                    )?;
                    eq(
                        "xacts",
                        join(&r.xids),
                        segment(body, &format!("{} xacts:", r.xids.len()))
                            .unwrap_or("")
                            .to_owned(),
                    )?;
                    // 15's standby_desc leaves subxacts out.
                    if major >= PgMajor::V16 {
                        eq(
                            "subxacts",
                            join(&r.subxids),
                            segment(body, &format!("{} subxacts:", r.subxids.len()))
                                .unwrap_or("")
                                .to_owned(),
                        )?;
                    }
                    eq(
                        "subxid overflowed",
                        r.subxid_overflow,
                        body.contains("subxid overflowed"),
                    )?;
                }
                ("LOCK" | "INVALIDATIONS", None) => {}
                (k, r) => return Err(format!("standby {k}: decoded {r:?}")),
            }
        }
        other => return Err(format!("not a decoded rmgr: {other}")),
    }
    Ok(kind)
}

fn old_flags(old: &Option<OldTuple<'_>>) -> (bool, bool) {
    match old {
        Some(OldTuple::Full(_)) => (true, false),
        Some(OldTuple::Key(_)) => (false, true),
        None => (false, false),
    }
}

fn check_heap(
    change: Option<&HeapChange<'_>>,
    body: &str,
    dump: &WaldumpRecord,
) -> Result<(), String> {
    use walshadow_wal_decode::heap::*;
    let toks = tokens(body);
    let fpi0 = dump.blocks.iter().any(|b| b.id == 0 && b.fpi);
    let Some(change) = change else {
        return match dump.kind() {
            "LOCK"
            | "INPLACE"
            | "REWRITE"
            | "PRUNE"
            | "VACUUM"
            | "FREEZE_PAGE"
            | "PRUNE_ON_ACCESS"
            | "PRUNE_VACUUM_SCAN"
            | "PRUNE_VACUUM_CLEANUP"
            | "VISIBLE"
            | "LOCK_UPDATED"
            | "NEW_CID" => Ok(()),
            k => Err(format!("{k} decoded to no change")),
        };
    };
    match change {
        HeapChange::Insert {
            rel,
            tid,
            tuple,
            flags,
            ..
        } => {
            eq("off", tid.offset, num(&toks, "off", 0)?)?;
            eq("flags", *flags, hex8(&toks, "flags")?)?;
            block_eq(dump, 0, *rel, tid.block)?;
            // Logical level keeps the tuple with an image; without the
            // flag an image drops it.
            if flags & XLH_INSERT_CONTAINS_NEW_TUPLE != 0 || !fpi0 {
                eq("tuple present", tuple.is_some(), true)?;
            } else {
                eq("tuple present", tuple.is_some(), false)?;
            }
        }
        HeapChange::MultiInsert {
            rel,
            block,
            offsets,
            tuples,
            flags,
        } => {
            let n: usize = if toks.contains(&"ntuples") {
                num(&toks, "ntuples", 0)?
            } else {
                // 15: `MULTI_INSERT 3 tuples flags 0x0A`
                toks.first()
                    .and_then(|t| t.parse().ok())
                    .ok_or("no tuple count")?
            };
            eq("ntuples", offsets.len(), n)?;
            eq("flags", *flags, hex8(&toks, "flags")?)?;
            if toks.contains(&"offsets") {
                eq(
                    "offsets",
                    offsets.iter().map(|&o| u32::from(o)).collect::<Vec<_>>(),
                    list_after(&toks, "offsets"),
                )?;
            }
            block_eq(dump, 0, *rel, *block)?;
            if flags & XLH_INSERT_CONTAINS_NEW_TUPLE != 0 || !fpi0 {
                eq("tuples", tuples.len(), n)?;
            } else {
                eq("tuples", tuples.len(), 0)?;
            }
        }
        HeapChange::Update {
            rel,
            hot,
            old_tid,
            new_tid,
            old,
            new,
            prefix_len,
            suffix_len,
            flags,
        } => {
            eq("hot", *hot, dump.kind().starts_with("HOT_UPDATE"))?;
            let (old_off, new_off) = if toks.contains(&"old_off") {
                (num(&toks, "old_off", 0)?, num(&toks, "new_off", 0)?)
            } else {
                (num(&toks, "off", 0)?, num(&toks, "off", 1)?)
            };
            eq("old off", old_tid.offset, old_off)?;
            eq("new off", new_tid.offset, new_off)?;
            eq("flags", *flags, hex8(&toks, "flags")?)?;
            block_eq(dump, 0, *rel, new_tid.block)?;
            if dump.blocks.iter().any(|b| b.id == 1) {
                let b1 = dump.blocks.iter().find(|b| b.id == 1).map(|b| b.blk);
                eq("old block", Some(old_tid.block), b1)?;
            } else {
                eq("old block", old_tid.block, new_tid.block)?;
            }
            eq(
                "old tuple kind",
                old_flags(old),
                (
                    flags & XLH_UPDATE_CONTAINS_OLD_TUPLE != 0,
                    flags & XLH_UPDATE_CONTAINS_OLD_KEY != 0
                        && flags & XLH_UPDATE_CONTAINS_OLD_TUPLE == 0,
                ),
            )?;
            if flags & XLH_UPDATE_CONTAINS_NEW_TUPLE != 0 || !fpi0 {
                eq("new tuple present", new.is_some(), true)?;
            } else {
                eq("new tuple present", new.is_some(), false)?;
            }
            eq(
                "prefix",
                *prefix_len > 0,
                flags & XLH_UPDATE_PREFIX_FROM_OLD != 0 && new.is_some(),
            )?;
            eq(
                "suffix",
                *suffix_len > 0,
                flags & XLH_UPDATE_SUFFIX_FROM_OLD != 0 && new.is_some(),
            )?;
        }
        HeapChange::Delete {
            rel,
            tid,
            old,
            flags,
            ..
        } => {
            eq("off", tid.offset, num(&toks, "off", 0)?)?;
            eq("flags", *flags, hex8(&toks, "flags")?)?;
            eq(
                "old tuple kind",
                old_flags(old),
                (
                    flags & XLH_DELETE_CONTAINS_OLD_TUPLE != 0,
                    flags & XLH_DELETE_CONTAINS_OLD_KEY != 0
                        && flags & XLH_DELETE_CONTAINS_OLD_TUPLE == 0,
                ),
            )?;
            block_eq(dump, 0, *rel, tid.block)?;
        }
        HeapChange::Truncate {
            db: _,
            relids,
            cascade,
            restart_seqs,
        } => {
            let lower = body.to_ascii_lowercase();
            eq("cascade", *cascade, lower.contains("cascade"))?;
            eq(
                "restart_seqs",
                *restart_seqs,
                lower.contains("restart_seqs"),
            )?;
            eq("nrelids", relids.len(), num(&toks, "nrelids", 0)?)?;
            eq("relids", relids.clone(), list_after(&toks, "relids"))?;
        }
        HeapChange::Confirm { rel, tid } => {
            eq("off", tid.offset, num(&toks, "off", 0)?)?;
            block_eq(dump, 0, *rel, tid.block)?;
        }
    }
    Ok(())
}

/// Whether pg_waldump of `major` names a pruning or vacuum record `kind`
/// (what `decode_prune` reads).
pub fn is_prune_kind(major: PgMajor, kind: &str) -> bool {
    if major >= PgMajor::V17 {
        matches!(
            kind,
            "PRUNE_ON_ACCESS" | "PRUNE_VACUUM_SCAN" | "PRUNE_VACUUM_CLEANUP"
        )
    } else {
        matches!(kind, "PRUNE" | "VACUUM")
    }
}

/// `from->to` pairs following `key` (heapdesc.c's `redirect_elem_desc`).
fn redirects_after(toks: &[&str], key: &str) -> Vec<(u16, u16)> {
    let Some(i) = toks.iter().position(|t| *t == key) else {
        return vec![];
    };
    toks[i + 1..]
        .iter()
        .map_while(|t| {
            let (a, b) = t.split_once("->")?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect()
}

/// `decode_prune` agrees with pg_waldump: it reads exactly the pruning and
/// vacuum records, on the same block, with the counts pg_waldump prints
/// (15: nredirected and ndead of PRUNE, nunused of VACUUM; 16+ all three)
/// and, where it prints them (16+), the same offsets. A record whose block 0
/// has an image and no data is `image_only`; 17+ print no counts for it,
/// 15's counts come from the main data and are not compared.
fn check_prune(
    major: PgMajor,
    rec: &RecordView<'_>,
    body: &str,
    dump: &WaldumpRecord,
) -> Result<Option<PruneRecord>, String> {
    let kind = dump.kind();
    let p = decode_prune(rec, major).map_err(|e| format!("decode_prune: {e}"))?;
    let Some(p) = p else {
        return if is_prune_kind(major, kind) {
            Err(format!("decode_prune returned None for {kind}"))
        } else {
            Ok(None)
        };
    };
    if !is_prune_kind(major, kind) {
        return Err(format!("decode_prune read a {kind}: {p:?}"));
    }
    block_eq(dump, 0, p.rel, p.block)?;
    let fpi0 = dump.blocks.iter().any(|b| b.id == 0 && b.fpi);
    let toks = tokens(body);
    if p.image_only {
        eq("image_only needs an image", fpi0, true)?;
        if major >= PgMajor::V16 {
            eq(
                "counts printed without block data",
                toks.contains(&"nunused"),
                false,
            )?;
        }
        return Ok(Some(p));
    }
    let counts = [
        ("nredirected", p.redirected.len()),
        ("ndead", p.dead.len()),
        ("nunused", p.unused.len()),
    ];
    let mut compared = 0;
    for (key, ours) in counts {
        if toks.contains(&key) {
            eq(key, ours, num(&toks, key, 0)?)?;
            compared += 1;
        }
    }
    if compared == 0 {
        return Err("pg_waldump printed no count to compare".into());
    }
    if toks.contains(&"redirected") {
        eq(
            "redirected",
            p.redirected.clone(),
            redirects_after(&toks, "redirected"),
        )?;
    }
    for (key, ours) in [("dead", &p.dead), ("unused", &p.unused)] {
        if toks.contains(&key) {
            let ours: Vec<u32> = ours.iter().map(|&o| u32::from(o)).collect();
            eq(key, ours, list_after(&toks, key))?;
        }
    }
    Ok(Some(p))
}

/// What commit and abort records share, as `xact_desc_commit` and
/// `xact_desc_abort` print it.
struct End<'a> {
    /// `COMMIT` or `ABORT`; `_PREPARED` is appended for two-phase ones.
    name: &'static str,
    xid: Xid,
    twophase_xid: Option<Xid>,
    time: i64,
    subxacts: &'a [Xid],
    rels: &'a [RelFileLocator],
    stats: &'a [DroppedStats],
}

fn check_end(rec: &RecordView<'_>, end: &End<'_>, kind: &str, body: &str) -> Result<(), String> {
    let time = match end.twophase_xid {
        Some(x) => {
            eq("kind", kind.to_owned(), format!("{}_PREPARED", end.name))?;
            body.strip_prefix(&format!("{x}: "))
                .ok_or_else(|| format!("{kind} desc does not start with {x}"))?
        }
        None => {
            eq("kind", kind, end.name)?;
            eq("xid", end.xid, rec.xid())?;
            body
        }
    };
    time_eq(segments(time)[0], end.time)?;
    eq(
        "subxacts",
        join(end.subxacts),
        segment(body, "subxacts:").unwrap_or("").to_owned(),
    )?;
    eq(
        "rels",
        relpaths(end.rels),
        segment(body, "rels:").unwrap_or("").to_owned(),
    )?;
    let stats = end
        .stats
        .iter()
        .map(|s| format!("{}/{}/{}", s.kind, s.db, s.objid))
        .collect::<Vec<_>>()
        .join(" ");
    eq(
        "dropped stats",
        stats,
        segment(body, "dropped stats:").unwrap_or("").to_owned(),
    )
}

fn check_xact(
    rec: &RecordView<'_>,
    x: &XactRecord<'_>,
    kind: &str,
    body: &str,
) -> Result<(), String> {
    match x {
        XactRecord::Commit(c) => {
            let end = End {
                name: "COMMIT",
                xid: c.xid,
                twophase_xid: c.twophase_xid,
                time: c.commit_time,
                subxacts: &c.subxacts,
                rels: &c.dropped_rels,
                stats: &c.dropped_stats,
            };
            check_end(rec, &end, kind, body)?;
            invals_eq(body, &c.invals)?;
        }
        XactRecord::Abort(a) => {
            let end = End {
                name: "ABORT",
                xid: a.xid,
                twophase_xid: a.twophase_xid,
                time: a.abort_time,
                subxacts: &a.subxacts,
                rels: &a.dropped_rels,
                stats: &a.dropped_stats,
            };
            check_end(rec, &end, kind, body)?;
        }
        XactRecord::Prepare(p) => {
            eq("kind", kind, "PREPARE")?;
            eq("xid", p.xid, rec.xid())?;
            let gid = String::from_utf8_lossy(p.gid);
            let time = body
                .strip_prefix(&format!("gid {gid}: "))
                .ok_or_else(|| format!("PREPARE desc does not name gid {gid}"))?;
            time_eq(segments(time)[0], p.prepared_at)?;
            eq(
                "subxacts",
                join(&p.subxacts),
                segment(body, "subxacts:").unwrap_or("").to_owned(),
            )?;
            eq(
                "commit rels",
                relpaths(&p.commit_rels),
                segment(body, "rels(commit):").unwrap_or("").to_owned(),
            )?;
            eq(
                "abort rels",
                relpaths(&p.abort_rels),
                segment(body, "rels(abort):").unwrap_or("").to_owned(),
            )?;
            invals_eq(body, &p.invals)?;
        }
        XactRecord::Assignment { top, subxacts } => {
            eq("kind", kind, "ASSIGNMENT")?;
            eq(
                "assignment",
                format!("xtop {top}: subxacts: {}", join(subxacts)),
                body.to_owned(),
            )?;
        }
        XactRecord::Invalidations(msgs) => {
            eq("kind", kind, "INVALIDATION")?;
            invals_eq(body, msgs)?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------
// The CDC workload (run live by heap_live.rs, replayed from the capture
// in tests/data/rmgr-pgNN/ by rmgr_golden.rs) and what it must decode to.

/// Run before the workload's start LSN.
pub const SETUP: &str = r#"
create table t (id int primary key, v text, w text);
create index t_v on t (v);
create table f (id int, v text);
alter table f replica identity full;
insert into f values (1, 'full-one'), (2, 'full-two');
create table u (id int primary key, v text);
create table tr (id serial primary key, v text);
insert into tr (v) values ('trunc-a'), ('trunc-b');
create table dropme (id int primary key);
create table sx (i int);
-- Set hint bits now, so that PostgreSQL 18 (checksums on) logs no
-- FPI_FOR_HINT in the workload before the heap records' own images.
select count(*) from t, f, u, tr;
"#;

/// Each statement its own transaction unless in a block.
pub const WORKLOAD: &str = r#"
insert into t values (1, 'single-insert-0123456789');
insert into t values (2, 'multi-row-a'), (3, 'multi-row-b');
copy t (id, v) from stdin;
10	copied-10
11	copied-11
12	copied-12
\.
update t set v = 'non-key-update' where id = 1;
update t set id = 100 where id = 2;
update t set w = 'hot-update' where id = 3;
delete from t where id = 10;
update f set v = 'full-updated' where id = 1;
delete from f where id = 2;
truncate tr restart identity cascade;
insert into u values (1, 'upsert-new') on conflict (id) do update set v = excluded.v;
insert into u values (1, 'upsert-again') on conflict (id) do update set v = excluded.v;
insert into u values (1, 'nothing-conflict') on conflict do nothing;
insert into u values (2, 'nothing-new') on conflict do nothing;
begin;
insert into t values (20, 'top-level');
savepoint s1;
insert into t values (21, 'rolled-back-sub');
rollback to s1;
savepoint s2;
insert into t values (23, 'released-sub');
release s2;
insert into t values (22, 'after-rollback');
commit;
begin;
insert into t values (30, 'prepared-then-committed');
prepare transaction 'gid-commit';
commit prepared 'gid-commit';
begin;
insert into t values (31, 'prepared-then-rolled-back');
prepare transaction 'gid-rollback';
rollback prepared 'gid-rollback';
begin;
insert into t values (40, 'aborted-insert');
rollback;
begin;
create table n (id int primary key, v text);
insert into n values (1, 'new-table-row');
commit;
drop table dropme;
do $$ begin for i in 1..70 loop begin insert into sx values (i); exception when others then null; end; end loop; end $$;
begin;
insert into t values (50, 'open-prepared-top');
savepoint a;
insert into t values (51, 'open-prepared-sub');
release a;
prepare transaction 'gid-open';
checkpoint;
commit prepared 'gid-open';
insert into t values (60, 'after-checkpoint-fpw');
"#;

/// After the workload: `name relfilenode oid` of its tables.
pub const TABLES_SQL: &str = "select string_agg(relname || ' ' || pg_relation_filenode(oid) || ' ' || oid, E'\\n' order by relname) \
     from pg_class where relname in ('t', 'f', 'u', 'tr', 'n', 'sx')";

#[derive(Debug, Clone, Copy)]
pub enum Col {
    Int,
    Text,
}

/// The workload's user tables by relfilenode and by OID.
#[derive(Debug, Clone)]
pub struct Tables {
    by_rel: std::collections::BTreeMap<u32, &'static str>,
    by_oid: std::collections::BTreeMap<u32, &'static str>,
}

impl Tables {
    pub fn parse(text: &str) -> Tables {
        let mut by_rel = std::collections::BTreeMap::new();
        let mut by_oid = std::collections::BTreeMap::new();
        for line in text.lines() {
            let mut w = line.split_whitespace();
            let (name, rel, oid) = (w.next().unwrap(), w.next().unwrap(), w.next().unwrap());
            let name: &'static str = ["t", "f", "u", "tr", "n", "sx"]
                .into_iter()
                .find(|n| *n == name)
                .unwrap_or_else(|| panic!("unexpected table {name}"));
            by_rel.insert(rel.parse().unwrap(), name);
            by_oid.insert(oid.parse().unwrap(), name);
        }
        assert_eq!(by_rel.len(), 6, "{text}");
        Tables { by_rel, by_oid }
    }

    fn name(&self, rel: &RelFileLocator) -> Option<&'static str> {
        self.by_rel.get(&rel.rel_number).copied()
    }
}

fn columns(table: &str) -> &'static [Col] {
    match table {
        "t" => &[Col::Int, Col::Text, Col::Text],
        "sx" => &[Col::Int],
        _ => &[Col::Int, Col::Text],
    }
}

/// Renders a tuple of int4 and short-varlena text columns, checking that
/// its bytes are exactly those columns (no byte short, none left over).
pub fn render(t: &walshadow_wal_decode::TupleBytes<'_>, cols: &[Col]) -> String {
    let natts = usize::from(t.natts());
    assert!(
        natts <= cols.len(),
        "{natts} attributes for {} columns",
        cols.len()
    );
    let bits = t.null_bitmap();
    let user = t.user_data();
    let mut pos: usize = 0;
    let mut out = Vec::new();
    for (i, col) in cols.iter().enumerate() {
        let null = i >= natts || bits.is_some_and(|b| b[i / 8] & (1 << (i % 8)) == 0);
        if null {
            out.push("NULL".to_owned());
            continue;
        }
        match col {
            Col::Int => {
                pos = pos.next_multiple_of(4);
                let v = i32::from_le_bytes(user[pos..pos + 4].try_into().unwrap());
                out.push(v.to_string());
                pos += 4;
            }
            Col::Text => {
                let b = user[pos];
                assert_eq!(b & 1, 1, "expected a short varlena at {pos}");
                let len = usize::from(b >> 1);
                out.push(String::from_utf8(user[pos + 1..pos + len].to_vec()).unwrap());
                pos += len;
            }
        }
    }
    assert_eq!(pos, user.len(), "tuple bytes past the last column: {out:?}");
    format!("({})", out.join(", "))
}

/// The workload's row changes on its user tables, in WAL order.
pub fn logical_changes(recs: &[WalRecord], tables: &Tables) -> Vec<String> {
    let mut out = Vec::new();
    for r in recs {
        let v = r.view();
        if !matches!(v.rmgr(), RmgrId::HEAP | RmgrId::HEAP2) {
            continue;
        }
        let Some(change) = decode_heap(&v).unwrap() else {
            continue;
        };
        let old = |old: &Option<OldTuple<'_>>, cols| match old {
            None => "-".to_owned(),
            Some(OldTuple::Key(t)) => format!("key{}", render(t, cols)),
            Some(OldTuple::Full(t)) => format!("full{}", render(t, cols)),
        };
        let line = match &change {
            HeapChange::Insert {
                rel,
                tuple,
                speculative,
                ..
            } => {
                let Some(name) = tables.name(rel) else {
                    continue;
                };
                let spec = if *speculative { "spec_" } else { "" };
                format!(
                    "{spec}insert {name} {}",
                    render(tuple.as_ref().unwrap(), columns(name))
                )
            }
            HeapChange::MultiInsert { rel, tuples, .. } => {
                let Some(name) = tables.name(rel) else {
                    continue;
                };
                let rows: Vec<_> = tuples.iter().map(|t| render(t, columns(name))).collect();
                format!("multi_insert {name} [{}]", rows.join(", "))
            }
            HeapChange::Update {
                rel,
                hot,
                old: o,
                new,
                ..
            } => {
                let Some(name) = tables.name(rel) else {
                    continue;
                };
                let hot = if *hot { "hot_" } else { "" };
                format!(
                    "{hot}update {name} old={} new={}",
                    old(o, columns(name)),
                    render(new.as_ref().unwrap(), columns(name))
                )
            }
            HeapChange::Delete {
                rel,
                old: o,
                super_delete,
                ..
            } => {
                let Some(name) = tables.name(rel) else {
                    continue;
                };
                let sup = if *super_delete { "super_" } else { "" };
                format!("{sup}delete {name} old={}", old(o, columns(name)))
            }
            HeapChange::Truncate {
                relids,
                cascade,
                restart_seqs,
                ..
            } => {
                let names: Vec<_> = relids
                    .iter()
                    .map(|o| tables.by_oid.get(o).copied().unwrap_or("?"))
                    .collect();
                format!(
                    "truncate [{}] cascade={cascade} restart_seqs={restart_seqs}",
                    names.join(", ")
                )
            }
            HeapChange::Confirm { rel, .. } => {
                let Some(name) = tables.name(rel) else {
                    continue;
                };
                format!("confirm {name}")
            }
        };
        out.push(line);
    }
    out
}

pub fn expected_changes() -> Vec<String> {
    let mut v: Vec<String> = [
        "insert t (1, single-insert-0123456789, NULL)",
        "insert t (2, multi-row-a, NULL)",
        "insert t (3, multi-row-b, NULL)",
        "multi_insert t [(10, copied-10, NULL), (11, copied-11, NULL), (12, copied-12, NULL)]",
        "update t old=- new=(1, non-key-update, NULL)",
        "update t old=key(2, NULL, NULL) new=(100, multi-row-a, NULL)",
        "hot_update t old=- new=(3, multi-row-b, hot-update)",
        "delete t old=key(10, NULL, NULL)",
        "hot_update f old=full(1, full-one) new=(1, full-updated)",
        "delete f old=full(2, full-two)",
        "truncate [tr] cascade=true restart_seqs=true",
        "spec_insert u (1, upsert-new)",
        "confirm u",
        "hot_update u old=- new=(1, upsert-again)",
        "spec_insert u (2, nothing-new)",
        "confirm u",
        "insert t (20, top-level, NULL)",
        "insert t (21, rolled-back-sub, NULL)",
        "insert t (23, released-sub, NULL)",
        "insert t (22, after-rollback, NULL)",
        "insert t (30, prepared-then-committed, NULL)",
        "insert t (31, prepared-then-rolled-back, NULL)",
        "insert t (40, aborted-insert, NULL)",
        "insert n (1, new-table-row)",
    ]
    .map(String::from)
    .to_vec();
    v.extend((1..=70).map(|i| format!("insert sx ({i})")));
    v.extend(
        [
            "insert t (50, open-prepared-top, NULL)",
            "insert t (51, open-prepared-sub, NULL)",
            "insert t (60, after-checkpoint-fpw, NULL)",
        ]
        .map(String::from),
    );
    v
}

/// The workload's transaction records (invalidations left out), rendered.
pub fn xact_sequence(major: PgMajor, recs: &[WalRecord]) -> Vec<String> {
    let mut out = Vec::new();
    for r in recs {
        let v = r.view();
        if v.rmgr() != RmgrId::XACT {
            continue;
        }
        let gid = |g: Option<&[u8]>| {
            g.map(|g| format!(" {}", String::from_utf8_lossy(g)))
                .unwrap_or_default()
        };
        let counts = |subs: &[u32], rels: usize, stats: usize| {
            let mut s = String::new();
            if !subs.is_empty() {
                s += &format!(" subxacts={}", subs.len());
            }
            if rels > 0 {
                s += &format!(" rels={rels}");
            }
            if stats > 0 {
                s += &format!(" stats={stats}");
            }
            s
        };
        let line = match decode_xact(&v, major).unwrap().unwrap() {
            XactRecord::Commit(c) => format!(
                "commit{}{}{}",
                if c.twophase_xid.is_some() {
                    " prepared"
                } else {
                    ""
                },
                gid(c.gid),
                counts(&c.subxacts, c.dropped_rels.len(), c.dropped_stats.len())
            ),
            XactRecord::Abort(a) => format!(
                "abort{}{}{}",
                if a.twophase_xid.is_some() {
                    " prepared"
                } else {
                    ""
                },
                gid(a.gid),
                counts(&a.subxacts, a.dropped_rels.len(), a.dropped_stats.len())
            ),
            XactRecord::Prepare(p) => format!(
                "prepare{}{}",
                gid(Some(p.gid)),
                counts(&p.subxacts, p.commit_rels.len() + p.abort_rels.len(), 0)
            ),
            XactRecord::Assignment { subxacts, .. } => format!("assignment {}", subxacts.len()),
            XactRecord::Invalidations(_) => continue,
        };
        out.push(line);
    }
    out
}

pub fn expected_xacts() -> Vec<String> {
    [
        "commit",            // insert 1
        "commit",            // multi-row insert
        "commit",            // copy
        "commit",            // non-key update
        "commit",            // key update
        "commit",            // hot update
        "commit",            // delete
        "commit",            // full update
        "commit",            // full delete
        "commit rels=5",     // truncate: heap, toast, toast index, pkey, sequence
        "commit",            // upsert new
        "commit",            // upsert again
        "commit",            // do nothing, new row
        "abort",             // rollback to s1 (the subxact)
        "commit subxacts=2", // s1 again and s2 inside it
        "prepare gid-commit",
        "commit prepared gid-commit",
        "prepare gid-rollback",
        "abort prepared gid-rollback",
        "abort",                 // rollback
        "commit",                // create table n
        "commit rels=2 stats=2", // drop table dropme: heap and pkey
        "assignment 1",          // the first subxact with an unlogged top
        "assignment 64",         // PGPROC_MAX_CACHED_SUBXIDS
        "commit subxacts=70",
        "prepare gid-open subxacts=1",
        "commit prepared gid-open subxacts=1",
        "commit", // after the checkpoint
    ]
    .map(String::from)
    .to_vec()
}

/// Follows each insert into `t` to the end of its transaction, as the
/// assembler will: subxacts map to their top (commit/prepare subxact lists,
/// assignments, the records' toplevel xid), an aborted subxact stays
/// aborted. Returns (committed ids, aborted ids).
pub fn insert_fates(major: PgMajor, recs: &[WalRecord], tables: &Tables) -> (Vec<i32>, Vec<i32>) {
    use std::collections::{BTreeMap, BTreeSet};
    let mut top: BTreeMap<u32, u32> = BTreeMap::new();
    let mut committed = BTreeSet::new();
    let mut aborted = BTreeSet::new();
    let mut inserts = Vec::new();
    for r in recs {
        let v = r.view();
        if let Some(t) = v.toplevel_xid {
            top.insert(v.xid(), t);
        }
        match v.rmgr() {
            RmgrId::XACT => match decode_xact(&v, major).unwrap().unwrap() {
                XactRecord::Commit(c) => {
                    committed.insert(c.xid);
                    committed.extend(c.subxacts.iter().copied());
                }
                XactRecord::Abort(a) => {
                    aborted.insert(a.xid);
                    aborted.extend(a.subxacts.iter().copied());
                }
                XactRecord::Prepare(p) => {
                    for s in p.subxacts {
                        top.insert(s, p.xid);
                    }
                }
                XactRecord::Assignment { top: t, subxacts } => {
                    for s in subxacts {
                        top.insert(s, t);
                    }
                }
                XactRecord::Invalidations(_) => {}
            },
            RmgrId::HEAP => {
                if let Some(HeapChange::Insert {
                    rel,
                    tuple: Some(t),
                    ..
                }) = decode_heap(&v).unwrap()
                    && tables.name(&rel) == Some("t")
                {
                    let id = i32::from_le_bytes(t.user_data()[..4].try_into().unwrap());
                    inserts.push((v.xid(), id));
                }
            }
            _ => {}
        }
    }
    let (mut ok, mut gone) = (Vec::new(), Vec::new());
    for (xid, id) in inserts {
        let root = top.get(&xid).copied().unwrap_or(xid);
        if aborted.contains(&xid) || aborted.contains(&root) {
            gone.push(id);
        } else if committed.contains(&xid) || committed.contains(&root) {
            ok.push(id);
        } else {
            panic!("insert of id {id} by xid {xid} (top {root}) never ended");
        }
    }
    (ok, gone)
}

/// Every assertion on a run of the workload: each decoded record agrees
/// with pg_waldump, the row changes and transaction records are the
/// expected ones, inserts end as they did, images kept their tuples, and
/// the checkpoint's running-xacts record names the open prepared xact.
pub fn check_workload(major: PgMajor, recs: &[WalRecord], dump: &[WaldumpRecord], tables: &Tables) {
    let by_lsn: std::collections::BTreeMap<Lsn, &WaldumpRecord> =
        dump.iter().map(|d| (d.lsn, d)).collect();
    let mut errors = Vec::new();
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for r in recs {
        let v = r.view();
        let Some(d) = by_lsn.get(&v.lsn) else {
            errors.push(format!("{}: not in pg_waldump's output", v.lsn));
            continue;
        };
        match check_record(major, &v, d) {
            Ok(kind) => *kinds.entry(format!("{}/{kind}", d.rmgr)).or_default() += 1,
            Err(e) => errors.push(format!("{} {} {}: {e}", v.lsn, d.rmgr, d.desc)),
        }
    }
    assert!(
        errors.is_empty(),
        "PostgreSQL {major}:\n{}",
        errors.join("\n")
    );
    let dumped = dump
        .iter()
        .filter(|d| ["Heap", "Heap2", "Transaction", "Standby"].contains(&d.rmgr.as_str()))
        .count();
    assert_eq!(recs.len(), dumped, "records decoded vs pg_waldump's");
    eprintln!("PostgreSQL {major}: checked {kinds:?}");
    for k in [
        "Heap/INSERT",
        "Heap/INSERT+INIT",
        "Heap/UPDATE",
        "Heap/HOT_UPDATE",
        "Heap/DELETE",
        "Heap/TRUNCATE",
        "Heap/HEAP_CONFIRM",
        "Heap/LOCK",
        "Heap/INPLACE",
        "Heap2/MULTI_INSERT",
        "Heap2/NEW_CID",
        "Transaction/COMMIT",
        "Transaction/ABORT",
        "Transaction/PREPARE",
        "Transaction/COMMIT_PREPARED",
        "Transaction/ABORT_PREPARED",
        "Transaction/ASSIGNMENT",
        "Transaction/INVALIDATION",
        "Standby/RUNNING_XACTS",
        "Standby/LOCK",
    ] {
        assert!(
            kinds.contains_key(k),
            "PostgreSQL {major}: no {k} record checked"
        );
    }

    assert_eq!(
        logical_changes(recs, tables),
        expected_changes(),
        "PostgreSQL {major}"
    );
    assert_eq!(
        xact_sequence(major, recs),
        expected_xacts(),
        "PostgreSQL {major}"
    );
    let (ok, gone) = insert_fates(major, recs, tables);
    assert_eq!(
        gone,
        vec![21, 31, 40],
        "PostgreSQL {major}: aborted inserts"
    );
    assert_eq!(
        ok,
        vec![1, 2, 3, 20, 23, 22, 30, 50, 51, 60],
        "PostgreSQL {major}: committed inserts"
    );

    // A user-table insert with a full-page image kept its tuple
    // (REGBUF_KEEP_DATA at wal_level=logical).
    let kept = recs.iter().any(|r| {
        let v = r.view();
        v.rmgr() == RmgrId::HEAP
            && v.block(0)
                .is_some_and(|b| b.has_image() && tables.name(&b.locator).is_some())
            && matches!(
                decode_heap(&v),
                Ok(Some(HeapChange::Insert { tuple: Some(_), .. }))
            )
    });
    assert!(
        kept,
        "PostgreSQL {major}: no user insert with an image and its tuple"
    );

    // The checkpoint ran while 'gid-open' was prepared, with one subxact.
    let open = recs
        .iter()
        .find_map(|r| match decode_xact(&r.view(), major) {
            Ok(Some(XactRecord::Prepare(p))) if p.gid == b"gid-open" => Some(p),
            _ => None,
        })
        .expect("the gid-open prepare");
    let seen = recs.iter().any(|r| {
        let v = r.view();
        v.rmgr() == RmgrId::STANDBY
            && matches!(decode_running_xacts(&v), Ok(Some(rx))
                if rx.xids == [open.xid] && rx.subxids == open.subxacts && !rx.subxid_overflow)
    });
    assert!(
        seen,
        "PostgreSQL {major}: no RUNNING_XACTS with the prepared xact {}",
        open.xid
    );
}

/// `tests/data/NAME` of this crate.
pub fn data_dir(name: &str) -> String {
    format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Every decoded-rmgr record of the golden WAL capture of `major`
/// (`tests/data/pgNN/`) and pg_waldump's text for it.
pub fn golden_records(major: PgMajor) -> (Vec<WalRecord>, String) {
    let dir = data_dir(&format!("pg{major}"));
    let range = std::fs::read_to_string(format!("{dir}/range")).unwrap();
    let (start, end) = range.trim().split_once(' ').unwrap();
    let (start, end): (Lsn, Lsn) = (start.parse().unwrap(), end.parse().unwrap());
    let tar_bytes = unzstd(&format!("{dir}/wal.tar.zst"));
    let mut archive = tar::Archive::new(tar_bytes.as_slice());
    let mut wal = Vec::new();
    let mut first = None;
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let segno = u64::from_str_radix(&name[16..24], 16).unwrap()
            + (u64::from_str_radix(&name[8..16], 16).unwrap() << 12);
        first.get_or_insert(Lsn(segno << 20));
        entry.read_to_end(&mut wal).unwrap();
    }
    let mut d = WalStreamDecoder::new(first.unwrap(), start, 1 << 20).unwrap();
    d.feed(&wal);
    let mut recs = Vec::new();
    while let Some(rec) = d.poll_ref().unwrap() {
        if rec.lsn >= end {
            break;
        }
        if is_decoded_rmgr(rec.rmgr()) {
            recs.push(rec.to_owned());
        }
    }
    let dump = String::from_utf8(unzstd(&format!("{dir}/waldump.txt.zst"))).unwrap();
    (recs, dump)
}
