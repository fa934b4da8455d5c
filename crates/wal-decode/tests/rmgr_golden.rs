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

use walshadow_testkit::{PgMajor, parse_waldump_output};
use walshadow_types::Lsn;
use walshadow_wal_decode::{WalRecord, WalStreamDecoder};

use common::{Tables, check_record, check_workload, is_decoded_rmgr, read_records, unzstd};

fn data(dir: &str) -> String {
    format!("{}/tests/data/{dir}", env!("CARGO_MANIFEST_DIR"))
}

fn workload(major: PgMajor) {
    let dir = data(&format!("rmgr-pg{major}"));
    let recs = read_records(&unzstd(&format!("{dir}/records.bin.zst")));
    let dump_text = String::from_utf8(unzstd(&format!("{dir}/waldump.txt.zst"))).unwrap();
    let dump = parse_waldump_output(&dump_text).unwrap();
    let tables = Tables::parse(&std::fs::read_to_string(format!("{dir}/tables")).unwrap());
    check_workload(major, &recs, &dump, &tables);
}

#[test]
fn pg15_captured_workload() {
    workload(PgMajor::V15);
}

#[test]
fn pg18_captured_workload() {
    workload(PgMajor::V18);
}

/// Every decoded-rmgr record of the golden WAL capture of `major`.
fn golden_records(major: PgMajor) -> (Vec<WalRecord>, String) {
    let dir = data(&format!("pg{major}"));
    let range = std::fs::read_to_string(format!("{dir}/range")).unwrap();
    let (start, end) = range.trim().split_once(' ').unwrap();
    let (start, end): (Lsn, Lsn) = (start.parse().unwrap(), end.parse().unwrap());
    let tar_bytes = unzstd(&format!("{dir}/wal.tar.zst"));
    let mut archive = tar::Archive::new(tar_bytes.as_slice());
    let mut wal = Vec::new();
    let mut first = None;
    for entry in archive.entries().unwrap() {
        use std::io::Read;
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
    // Pruning and vacuuming, under the opcode names of each major.
    let prune = if major >= PgMajor::V17 {
        "Heap2/PRUNE_ON_ACCESS"
    } else {
        "Heap2/PRUNE"
    };
    assert!(kinds.contains(prune), "{kinds:?}");
}

#[test]
fn pg15_golden_wal_records_agree_with_pg_waldump() {
    golden(PgMajor::V15);
}

#[test]
fn pg18_golden_wal_records_agree_with_pg_waldump() {
    golden(PgMajor::V18);
}
