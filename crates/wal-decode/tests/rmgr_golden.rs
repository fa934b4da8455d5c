//! The rmgr decoders (heap, xact, standby) on bytes captured from real
//! PostgreSQL 15 and 18 servers, without a server:
//!
//! - `tests/data/rmgr-pgNN/`: the CDC workload of `heap_live.rs`, captured
//!   by it (`WALSHADOW_CAPTURE_RMGR`); every record agrees with pg_waldump,
//!   and the row changes, transaction records and fates are the expected
//!   ones, exactly as on a live server.
//! - `tests/data/pgNN/`: the decoder's golden WAL (`capture.sh`); every
//!   Heap/Heap2/Transaction/Standby record in it agrees with pg_waldump.

mod common;

use walshadow_testkit::per_major;
use walshadow_testkit::{PgMajor, parse_waldump_output};

use common::{
    Tables, check_record, check_workload, data_dir, golden_records, is_prune_kind, read_records,
    unzstd,
};

fn workload(major: PgMajor) {
    let dir = data_dir(&format!("rmgr-pg{major}"));
    let recs = read_records(&unzstd(&format!("{dir}/records.bin.zst")));
    let dump_text = String::from_utf8(unzstd(&format!("{dir}/waldump.txt.zst"))).unwrap();
    let dump = parse_waldump_output(&dump_text).unwrap();
    let tables = Tables::parse(&std::fs::read_to_string(format!("{dir}/tables")).unwrap());
    check_workload(major, &recs, &dump, &tables);
}

per_major!(workload => captured_workload: pg15, pg16, pg17, pg18);

fn golden(major: PgMajor) {
    let (recs, dump_text) = golden_records(major);
    let dump = parse_waldump_output(&dump_text).unwrap();
    let by_lsn: std::collections::BTreeMap<_, _> = dump.iter().map(|d| (d.lsn, d)).collect();
    let mut errors = Vec::new();
    let mut kinds = std::collections::BTreeSet::new();
    for r in &recs {
        let v = r.view();
        let d = by_lsn[&v.lsn];
        match check_record(major, &v, d) {
            Ok(k) => {
                kinds.insert(format!("{}/{k}", d.rmgr));
            }
            Err(e) => errors.push(format!("{} {} {}: {e}", v.lsn, d.rmgr, d.desc)),
        }
    }
    assert!(
        errors.is_empty(),
        "PostgreSQL {major}:\n{}",
        errors.join("\n")
    );
    assert!(recs.len() > 3000, "{} records", recs.len());
    for k in [
        "Heap/INSERT",
        "Heap/UPDATE",
        "Heap/HOT_UPDATE",
        "Heap/DELETE",
        "Heap/TRUNCATE",
        "Heap2/MULTI_INSERT",
        "Heap2/VISIBLE",
        "Transaction/COMMIT",
        "Transaction/ABORT",
        "Standby/RUNNING_XACTS",
    ] {
        assert!(kinds.contains(k), "PostgreSQL {major}: no {k} in {kinds:?}");
    }
    // Pruning and vacuuming, under the opcode names of each major; each
    // such record was read by decode_prune as pg_waldump read it.
    let prunes: &[&str] = if major >= PgMajor::V17 {
        &[
            "PRUNE_ON_ACCESS",
            "PRUNE_VACUUM_SCAN",
            "PRUNE_VACUUM_CLEANUP",
        ]
    } else {
        &["PRUNE", "VACUUM"]
    };
    for k in prunes {
        assert!(kinds.contains(&format!("Heap2/{k}")), "{kinds:?}");
    }
    let n = dump
        .iter()
        .filter(|d| d.rmgr == "Heap2" && is_prune_kind(major, d.kind()))
        .count();
    assert!(n > 50, "PostgreSQL {major}: {n} pruning records");
}

per_major!(golden => golden_wal_records_agree_with_pg_waldump: pg15, pg16, pg17, pg18);
