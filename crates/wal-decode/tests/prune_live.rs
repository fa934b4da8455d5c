//! `decode_prune` on WAL written by real PostgreSQL 15 and 18 servers.
//!
//! A table `tt` whose `text` values (10 kB, `STORAGE EXTERNAL`) live in its
//! TOAST table, and a small `hot` table (fillfactor 50) for HOT chains:
//!
//! 1. on-access pruning: delete and update `tt` rows (their TOAST chunks
//!    die), read the TOAST table (the scan prunes its full pages), update
//!    `hot` rows over and over (its page is pruned by the next statement
//!    that reads it: redirections and unused items);
//! 2. VACUUM of both (`INDEX_CLEANUP ON`, so dead line pointers are set
//!    unused in a second pass);
//! 3. more deletes, a checkpoint, VACUUM again: the first change to each
//!    TOAST page after the checkpoint is the pruning record itself, which
//!    then carries a full-page image instead of its offsets.
//!
//! Every Heap/Heap2/Transaction/Standby record of the range must agree
//! with pg_waldump (`common::check_record`, which runs `decode_prune` on
//! each record: same kinds, block, counts and offset lists), each phase
//! must have written the expected kinds, and the line pointers the TOAST
//! relation's records free must be exactly the TIDs of the chunks that
//! went away (known from `select ctid` before and after); for image-only
//! records the restored page must show those line pointers no longer
//! `LP_NORMAL`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use walshadow_testkit::per_major;

use walshadow_testkit::{Cluster, ClusterOptions, Lsn, PgMajor, WaldumpRecord};
use walshadow_types::RelFileLocator;
use walshadow_wal_decode::{PruneRecord, WalRecord, decode_prune};
use walshadow_wal_reader::segments::SegmentSet;

use common::{check_record, is_decoded_rmgr, is_prune_kind};

const SETUP: &str = "
create function big(seed int) returns text language sql immutable as
  $$ select string_agg(md5(seed::text || '-' || i::text), '') from generate_series(1, 320) i $$;
create table tt (id int primary key, v text) with (autovacuum_enabled = off);
alter table tt alter column v set storage external;
insert into tt select g, big(g) from generate_series(1, 40) g;
create table hot (id int primary key, n int, pad text)
  with (fillfactor = 50, autovacuum_enabled = off);
insert into hot select g, 0, repeat('x', 200) from generate_series(1, 20) g;
";

/// Phase 1, TOAST: chunks of rows 1..=20 die (deleted, or replaced by new
/// values).
const TOAST_CHURN: &str = "
delete from tt where id <= 10;
update tt set v = big(id + 1000) where id between 11 and 20;
";

/// Phase 1, HOT: each update reads the page the previous one filled.
const HOT_CHURN: &str = "
update hot set n = n + 1;
update hot set n = n + 1;
update hot set n = n + 1;
update hot set n = n + 1;
update hot set n = n + 1;
update hot set n = n + 1;
select count(*) from hot where n > 0;
";

const VACUUM: &str = "
vacuum (index_cleanup on) tt;
vacuum (index_cleanup on) hot;
";

/// `(chunk_id, chunk_seq)` → TID of every chunk of `toast`.
fn chunks(pg: &Cluster, toast: &str) -> BTreeMap<(u32, u32), (u32, u16)> {
    let out = pg
        .psql(&format!(
            "select chunk_id, chunk_seq, ctid from {toast} order by 1, 2"
        ))
        .unwrap();
    out.lines()
        .map(|l| {
            let mut f = l.split('|');
            let id = f.next().unwrap().parse().unwrap();
            let seq = f.next().unwrap().parse().unwrap();
            let (blk, off) = f
                .next()
                .unwrap()
                .trim_matches(|c| c == '(' || c == ')')
                .split_once(',')
                .unwrap();
            ((id, seq), (blk.parse().unwrap(), off.parse().unwrap()))
        })
        .collect()
}

fn locator(pg: &Cluster, relid_sql: &str) -> RelFileLocator {
    let row = pg
        .query_one(&format!(
            "select d.dattablespace, d.oid, pg_relation_filenode(({relid_sql})::regclass)
               from pg_database d where d.datname = current_database()"
        ))
        .unwrap();
    let f: Vec<u32> = row.split('|').map(|x| x.parse().unwrap()).collect();
    RelFileLocator {
        spc_oid: f[0],
        db_oid: f[1],
        rel_number: f[2],
    }
}

/// `lp_flags` of line pointer `off` of a heap page (`ItemIdData`: lp_off
/// 15 bits, lp_flags 2, lp_len 15).
fn lp_flags(page: &[u8], off: u16) -> u32 {
    let at = 24 + (usize::from(off) - 1) * 4;
    let w = u32::from_le_bytes(page[at..at + 4].try_into().unwrap());
    (w >> 15) & 3
}
const LP_NORMAL: u32 = 1;

fn run(major: PgMajor) {
    let pg = Cluster::start(
        major,
        ClusterOptions::default()
            // Hint bits are not WAL-logged, so a pruning record is the
            // first WAL of a page after a checkpoint and takes the image.
            .data_checksums(false)
            .conf("autovacuum", "off")
            // The only checkpoints are the test's own.
            .conf("checkpoint_timeout", "1d"),
    )
    .unwrap_or_else(|e| panic!("starting PostgreSQL {major}: {e:#}"));
    pg.psql(SETUP).unwrap();
    let toast = pg
        .query_one("select reltoastrelid::regclass from pg_class where relname = 'tt'")
        .unwrap();
    let toast_rel = locator(&pg, &format!("'{toast}'"));
    let hot_rel = locator(&pg, "'hot'");
    let before = chunks(&pg, &toast);
    assert_eq!(
        before.len(),
        40 * 6,
        "10 kB values should make 6 chunks each"
    );

    pg.checkpoint().unwrap();
    let start = pg.insert_lsn().unwrap();
    pg.psql(TOAST_CHURN).unwrap();
    // A scan of the TOAST table itself visits the pages of the dead chunks
    // (fetching live values only reaches pages they share with live ones).
    pg.psql(&format!("select count(*) from {toast}")).unwrap();
    pg.psql(HOT_CHURN).unwrap();
    let vacuum_at = pg.insert_lsn().unwrap();
    pg.psql(VACUUM).unwrap();
    pg.checkpoint().unwrap();
    pg.psql("delete from tt where id between 21 and 25")
        .unwrap();
    pg.checkpoint().unwrap();
    let images_at = pg.insert_lsn().unwrap();
    pg.psql("vacuum (index_cleanup on) tt").unwrap();
    // VACUUM flushes no WAL; a transaction that wrote some does at commit.
    pg.psql("select pg_logical_emit_message(true, 'walshadow', 'flush')")
        .unwrap();
    let end = pg.flush_lsn().unwrap();
    let after = chunks(&pg, &toast);

    let gone: BTreeSet<(u32, u16)> = before
        .iter()
        .filter(|(k, _)| !after.contains_key(k))
        .map(|(_, &tid)| tid)
        .collect();
    assert_eq!(gone.len(), 25 * 6, "chunks of rows 1..=25 are gone");

    // Every record agrees with pg_waldump.
    let dump = pg.waldump(start, Some(end)).unwrap();
    let by_lsn: BTreeMap<Lsn, &WaldumpRecord> = dump.iter().map(|d| (d.lsn, d)).collect();
    let set = SegmentSet::scan(&[pg.wal_dir()]).unwrap();
    let mut it = set
        .records(pg.timeline().unwrap(), Some(start), Some(end))
        .unwrap();
    let mut recs: Vec<WalRecord> = Vec::new();
    while let Some(v) = it.next_ref().unwrap() {
        if is_decoded_rmgr(v.rmgr()) {
            recs.push(v.to_owned());
        }
    }
    let mut errors = Vec::new();
    for r in &recs {
        let v = r.view();
        let d = by_lsn[&v.lsn];
        if let Err(e) = check_record(major, &v, d) {
            errors.push(format!("{} {} {}: {e}", v.lsn, d.rmgr, d.desc));
        }
    }
    assert!(
        errors.is_empty(),
        "PostgreSQL {major}:\n{}",
        errors.join("\n")
    );

    // The pruning records, with pg_waldump's kind and the phase they are in.
    let prunes: Vec<(Lsn, String, PruneRecord, &WalRecord)> = recs
        .iter()
        .filter_map(|r| {
            let p = decode_prune(&r.view(), major).unwrap()?;
            Some((r.lsn, by_lsn[&r.lsn].kind().to_owned(), p, r))
        })
        .collect();
    let dumped = dump
        .iter()
        .filter(|d| d.rmgr == "Heap2" && is_prune_kind(major, d.kind()))
        .count();
    assert_eq!(
        prunes.len(),
        dumped,
        "pruning records decoded vs pg_waldump's"
    );
    let kinds = |from: Lsn, to: Lsn, rel: RelFileLocator| -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for (lsn, kind, p, _) in &prunes {
            if (from..to).contains(lsn) && p.rel == rel {
                *m.entry(kind.clone()).or_default() += 1;
            }
        }
        m
    };
    let (on_access, scan, cleanup) = if major >= PgMajor::V17 {
        (
            "PRUNE_ON_ACCESS",
            "PRUNE_VACUUM_SCAN",
            "PRUNE_VACUUM_CLEANUP",
        )
    } else {
        ("PRUNE", "PRUNE", "VACUUM")
    };
    let toast_access = kinds(start, vacuum_at, toast_rel);
    let hot_access = kinds(start, vacuum_at, hot_rel);
    eprintln!(
        "PostgreSQL {major}: on access: toast {toast_access:?}, hot {hot_access:?}; \
         vacuum: toast {:?}, hot {:?}; after the checkpoint: toast {:?}",
        kinds(vacuum_at, images_at, toast_rel),
        kinds(vacuum_at, images_at, hot_rel),
        kinds(images_at, end, toast_rel),
    );
    assert!(toast_access.contains_key(on_access), "{toast_access:?}");
    assert!(hot_access.contains_key(on_access), "{hot_access:?}");
    assert!(
        kinds(vacuum_at, images_at, toast_rel).contains_key(cleanup),
        "no {cleanup} of the TOAST table"
    );
    assert!(
        kinds(vacuum_at, end, hot_rel).contains_key(scan)
            || kinds(vacuum_at, end, hot_rel).contains_key(cleanup),
        "VACUUM of hot wrote no record"
    );
    // Pruning a HOT chain redirects its root and frees the heap-only tuples.
    assert!(
        prunes.iter().any(|(_, _, p, _)| p.rel == hot_rel
            && !p.redirected.is_empty()
            && !p.unused.is_empty()),
        "no HOT chain pruned"
    );

    // The TOAST table's records free exactly the gone chunks' TIDs.
    let mut freed = BTreeSet::new();
    let mut seen_in_images = 0;
    for (lsn, kind, p, r) in prunes.iter().filter(|(_, _, p, _)| p.rel == toast_rel) {
        freed.extend(p.vacated().map(|off| (p.block, off)));
        if p.image_only {
            assert!(
                *lsn >= images_at,
                "{lsn} {kind}: image-only before the checkpoint"
            );
            let v = r.view();
            let page = v.restore_page(v.block(0).unwrap()).unwrap();
            for &(_, off) in gone.range((p.block, 0)..=(p.block, u16::MAX)) {
                assert_ne!(
                    lp_flags(&page, off),
                    LP_NORMAL,
                    "{lsn} {kind}: ({}, {off}) still a tuple in the image",
                    p.block
                );
                seen_in_images += 1;
            }
        }
    }
    assert!(
        seen_in_images > 0,
        "PostgreSQL {major}: no image-only pruning record of the TOAST table"
    );
    let spurious: Vec<_> = freed.difference(&gone).collect();
    let missed: Vec<_> = gone.difference(&freed).collect();
    assert!(
        spurious.is_empty() && missed.is_empty(),
        "PostgreSQL {major}: freed TIDs of no gone chunk {spurious:?}; gone chunks never freed {missed:?}"
    );
}

per_major!(run => pruning_records_free_the_deleted_toast_tids: pg15, pg16, pg17, pg18);
