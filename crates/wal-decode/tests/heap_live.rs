//! The rmgr decoders on WAL written by real PostgreSQL 15 and 18 servers:
//! a CDC workload (`common::WORKLOAD`: inserts, COPY, updates of every
//! kind, deletes, REPLICA IDENTITY FULL, TRUNCATE, upserts, savepoints,
//! two-phase commit, an abort, DDL with inserts, 70 subtransactions, a
//! checkpoint during a prepared transaction) is run, its WAL read back
//! from `pg_wal` and every Heap/Heap2/Transaction/Standby record checked
//! against pg_waldump's description of the same LSN; then the whole
//! sequence of row changes (with every tuple's bytes decoded exactly) and
//! of transaction records is asserted.
//!
//! With `WALSHADOW_CAPTURE_RMGR=DIR` the run also writes what
//! `rmgr_golden.rs` replays (`DIR/pgNN/{records.bin,waldump.txt,tables,version}`,
//! compressed into `tests/data/rmgr-pgNN/` by hand, see tests/data/README.md)
//! and fuzz seeds (`DIR/seeds/`).

mod common;

use std::path::PathBuf;
use walshadow_testkit::per_major;

use walshadow_testkit::{Cluster, ClusterOptions, PgMajor, WaldumpRecord};
use walshadow_wal_decode::{HeapChange, WalRecord, XactRecord, decode_heap, decode_xact};
use walshadow_wal_reader::segments::SegmentSet;

use common::{SETUP, TABLES_SQL, Tables, WORKLOAD, check_workload, is_decoded_rmgr};

fn run(major: PgMajor) {
    let pg = Cluster::start(
        major,
        ClusterOptions::default()
            .conf("max_prepared_transactions", "5")
            // Nothing but the workload writes row changes.
            .conf("autovacuum", "off"),
    )
    .unwrap_or_else(|e| panic!("starting PostgreSQL {major}: {e:#}"));
    pg.psql(SETUP).unwrap();
    pg.checkpoint().unwrap();
    let start = pg.insert_lsn().unwrap();
    pg.psql(WORKLOAD).unwrap();
    let end = pg.flush_lsn().unwrap();
    let tables_text = pg.query_one(TABLES_SQL).unwrap();
    let tables = Tables::parse(&tables_text);

    let dump = pg.waldump(start, Some(end)).unwrap();
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
    assert!(recs.len() > 200, "{} records", recs.len());

    if let Some(dir) = std::env::var_os("WALSHADOW_CAPTURE_RMGR") {
        capture(&PathBuf::from(dir), major, &pg, &recs, &dump, &tables_text);
    }
    check_workload(major, &recs, &dump, &tables);
}

per_major!(run => workload_decodes_as_pg_waldump_reads_it: pg15, pg16, pg17, pg18);

/// pg_waldump's line for `d`, as it printed it (`XLogDumpDisplayRecord`).
fn waldump_line(d: &WaldumpRecord) -> String {
    let mut s = format!(
        "rmgr: {:<11} len (rec/tot): {:>6}/{:>6}, tx: {:>10}, lsn: {}, prev {}, desc: {}",
        d.rmgr, d.rec_len, d.tot_len, d.xid, d.lsn, d.prev, d.desc
    );
    for b in &d.blocks {
        s += &format!(", blkref #{}: rel {}/{}/{} ", b.id, b.spc, b.db, b.rel);
        if b.fork != "main" {
            s += &format!("fork {} ", b.fork);
        }
        s += &format!("blk {}", b.blk);
        if b.fpi {
            s += if b.fpi_apply {
                " FPW"
            } else {
                " FPW for WAL verification"
            };
        }
    }
    s
}

fn capture(
    dir: &std::path::Path,
    major: PgMajor,
    pg: &Cluster,
    recs: &[WalRecord],
    dump: &[WaldumpRecord],
    tables: &str,
) {
    let out = dir.join(format!("pg{major}"));
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("records.bin"), common::write_records(recs)).unwrap();
    let lines: Vec<String> = dump.iter().map(waldump_line).collect();
    std::fs::write(out.join("waldump.txt"), lines.join("\n") + "\n").unwrap();
    std::fs::write(out.join("tables"), format!("{tables}\n")).unwrap();
    std::fs::write(out.join("version"), format!("{}\n", pg.install().version())).unwrap();

    // Fuzz seeds: the first record of each (rmgr, kind, has image, flags or
    // xinfo) in the workload, prefixed by the major's number (the
    // `heap_xact` target's input, fuzz/src/lib.rs).
    let seeds = dir.join("seeds");
    std::fs::create_dir_all(&seeds).unwrap();
    let by_lsn: std::collections::BTreeMap<_, _> = dump.iter().map(|d| (d.lsn, d)).collect();
    let mut seen = std::collections::BTreeSet::new();
    for r in recs {
        let d = by_lsn[&r.lsn];
        let fpw = if r.blocks.iter().any(|b| b.has_image()) {
            "-fpw"
        } else {
            ""
        };
        let v = r.view();
        let flags = match (decode_heap(&v), decode_xact(&v, major)) {
            (Ok(Some(c)), _) => format!("-f{:02X}", heap_flags(&c)),
            (_, Ok(Some(XactRecord::Commit(c)))) => format!("-x{:03X}", c.xinfo),
            (_, Ok(Some(XactRecord::Abort(a)))) => format!("-x{:03X}", a.xinfo),
            _ => String::new(),
        };
        let key = format!("{}-{}{fpw}{flags}", d.rmgr, d.kind());
        if seen.insert(key.clone()) {
            let mut seed = vec![major.number() as u8];
            seed.extend_from_slice(r.raw());
            let name = format!("pg{major}-{key}-{:X}", r.lsn.0);
            std::fs::write(seeds.join(name), seed).unwrap();
        }
    }
}

fn heap_flags(c: &HeapChange<'_>) -> u8 {
    match c {
        HeapChange::Insert { flags, .. }
        | HeapChange::MultiInsert { flags, .. }
        | HeapChange::Update { flags, .. }
        | HeapChange::Delete { flags, .. } => *flags,
        HeapChange::Truncate { .. } | HeapChange::Confirm { .. } => 0,
    }
}
