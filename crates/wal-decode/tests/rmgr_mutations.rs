//! The rmgr decoders never panic on damaged records. Records captured from
//! PostgreSQL 15 and 18 (`tests/data/rmgr-pgNN/`, one of each kind, flag
//! set and image presence) are rebuilt into valid WAL records (fresh CRC,
//! so they get past `decode_record`) with their main data and block data
//! cut at every length and with every byte overwritten by 0x00, 0x7F, 0x80
//! and 0xFF, and under every info value of each decoded rmgr; each variant
//! goes through `decode_heap`, `decode_xact` (as 15 and as 18),
//! `decode_running_xacts` and `decode_prune` (as 15, 16, 17 and 18). The
//! rmgr captures hold no pruning record, so the pruning and vacuum records
//! of the golden WAL (`tests/data/pgNN/`, one per kind, image presence and
//! list shape) and a crafted one with every list (and 17+'s freeze plans)
//! are damaged the same way. A panic fails the test; an error
//! is fine.

mod common;

use std::collections::BTreeSet;
use walshadow_testkit::per_major;

use walshadow_testkit::PgMajor;
use walshadow_types::Lsn;
use walshadow_wal_decode::{
    HeapChange, OldTuple, RecordView, RmgrId, TupleBytes, WalRecord, XactRecord, decode_heap,
    decode_prune, decode_record, decode_running_xacts, decode_xact,
};

use common::{golden_records, read_records, unzstd};

/// One block reference to rebuild: no image, data only.
struct Block {
    id: u8,
    fork_flags: u8,
    locator: [u8; 12],
    blkno: u32,
    data: Vec<u8>,
}

struct Parts {
    xid: u32,
    info: u8,
    rmid: u8,
    toplevel_xid: Option<u32>,
    blocks: Vec<Block>,
    main: Vec<u8>,
}

impl Parts {
    fn of(r: &WalRecord) -> Parts {
        let v = r.view();
        Parts {
            xid: v.xid(),
            info: v.header.xl_info,
            rmid: v.rmgr().0,
            toplevel_xid: v.toplevel_xid,
            blocks: v
                .blocks
                .iter()
                .map(|b| {
                    let mut locator = [0u8; 12];
                    locator[..4].copy_from_slice(&b.locator.spc_oid.to_le_bytes());
                    locator[4..8].copy_from_slice(&b.locator.db_oid.to_le_bytes());
                    locator[8..].copy_from_slice(&b.locator.rel_number.to_le_bytes());
                    Block {
                        id: b.id,
                        // Fork only: flags are recomputed from the data.
                        fork_flags: b.fork_flags & 0x0F,
                        locator,
                        blkno: b.blkno,
                        data: v.block_data(b).to_vec(),
                    }
                })
                .collect(),
            main: v.main_data().to_vec(),
        }
    }

    /// The record bytes (`XLogRecordAssemble`'s layout), CRC included.
    fn assemble(&self) -> Vec<u8> {
        let mut r = vec![0u8; 24];
        for b in &self.blocks {
            r.push(b.id);
            let has_data = if b.data.is_empty() { 0 } else { 0x20 };
            r.push(b.fork_flags | has_data);
            r.extend_from_slice(&(b.data.len() as u16).to_le_bytes());
            r.extend_from_slice(&b.locator);
            r.extend_from_slice(&b.blkno.to_le_bytes());
        }
        if let Some(x) = self.toplevel_xid {
            r.push(252);
            r.extend_from_slice(&x.to_le_bytes());
        }
        if !self.main.is_empty() {
            if self.main.len() < 256 {
                r.push(255);
                r.push(self.main.len() as u8);
            } else {
                r.push(254);
                r.extend_from_slice(&(self.main.len() as u32).to_le_bytes());
            }
        }
        for b in &self.blocks {
            r.extend_from_slice(&b.data);
        }
        r.extend_from_slice(&self.main);
        let len = r.len() as u32;
        r[0..4].copy_from_slice(&len.to_le_bytes());
        r[4..8].copy_from_slice(&self.xid.to_le_bytes());
        r[8..16].copy_from_slice(&0x0100_0028u64.to_le_bytes());
        r[16] = self.info;
        r[17] = self.rmid;
        let crc = crc32c::crc32c_append(crc32c::crc32c(&r[24..]), &r[..20]);
        r[20..24].copy_from_slice(&crc.to_le_bytes());
        r
    }
}

/// Within `raw`: a decoder may only hand out bytes of the record.
fn inside(raw: &[u8], s: &[u8]) -> bool {
    let (a, b) = (raw.as_ptr() as usize, s.as_ptr() as usize);
    s.is_empty() || (b >= a && b + s.len() <= a + raw.len())
}

fn check_tuple(raw: &[u8], t: &TupleBytes<'_>) {
    assert!(inside(raw, t.data), "tuple bytes outside the record");
    assert!(inside(raw, t.user_data()));
    if let Some(bits) = t.null_bitmap() {
        assert!(inside(raw, bits));
    }
}

/// Runs every decoder on `raw` (when it is a valid record); returns how
/// many of them read it without error (the wrong rmgr's decoders refuse it).
fn exercise(raw: &[u8]) -> usize {
    let mut blocks = Vec::new();
    let Ok(v) = decode_record(
        Lsn(0x0100_0028),
        Lsn(0x0100_0028 + raw.len() as u64),
        raw,
        &mut blocks,
    ) else {
        return 0;
    };
    let mut ok = 0;
    let heap = decode_heap(&v);
    assert_eq!(heap, decode_heap(&v), "not deterministic");
    ok += usize::from(heap.is_ok());
    if let Ok(Some(c)) = &heap {
        let old = |o: &Option<OldTuple<'_>>| {
            if let Some(o) = o {
                check_tuple(raw, o.tuple());
            }
        };
        match c {
            HeapChange::Insert { tuple, .. } => tuple.iter().for_each(|t| check_tuple(raw, t)),
            HeapChange::MultiInsert {
                tuples, offsets, ..
            } => {
                tuples.iter().for_each(|t| check_tuple(raw, t));
                assert!(tuples.is_empty() || tuples.len() == offsets.len());
            }
            HeapChange::Update { old: o, new, .. } => {
                old(o);
                new.iter().for_each(|t| check_tuple(raw, t));
            }
            HeapChange::Delete { old: o, .. } => old(o),
            HeapChange::Truncate { .. } | HeapChange::Confirm { .. } => {}
        }
    }
    for major in [PgMajor::V15, PgMajor::V18] {
        let xact = decode_xact(&v, major);
        ok += usize::from(xact.is_ok());
        if let Ok(Some(x)) = xact {
            let gid = match &x {
                XactRecord::Commit(c) => c.gid,
                XactRecord::Abort(a) => a.gid,
                XactRecord::Prepare(p) => Some(p.gid),
                _ => None,
            };
            if let Some(g) = gid {
                assert!(inside(raw, g));
            }
        }
    }
    ok += usize::from(decode_running_xacts(&v).is_ok());
    // Not counted in `ok`: decode_prune answers None, not an error, for
    // records of other rmgrs.
    for major in PgMajor::ALL {
        let prune = decode_prune(&v, major);
        assert_eq!(prune, decode_prune(&v, major), "not deterministic");
        if let Ok(Some(p)) = prune {
            // Every offset came out of the record's bytes.
            let offsets = 2 * p.redirected.len() + p.dead.len() + p.unused.len();
            let data = v.block(0).map_or(0, |b| v.block_data(b).len());
            assert!(offsets * 2 <= data, "{offsets} offsets from {data} bytes");
            assert!(!p.image_only || offsets == 0);
        }
    }
    ok
}

fn mutate_all(p: &mut Parts, which: Option<usize>) -> usize {
    let mut runs = 0;
    let original = bytes_of(p, which);
    let len = original.len();
    // Every prefix.
    for n in 0..len {
        set(p, which, original[..n].to_vec());
        exercise(&p.assemble());
        runs += 1;
    }
    // Every byte, four ways.
    for i in 0..len {
        for b in [0x00, 0x7F, 0x80, 0xFF] {
            let mut m = original.clone();
            m[i] = b;
            set(p, which, m);
            exercise(&p.assemble());
            runs += 1;
        }
    }
    set(p, which, original);
    runs
}

fn bytes_of(p: &Parts, which: Option<usize>) -> Vec<u8> {
    match which {
        None => p.main.clone(),
        Some(i) => p.blocks[i].data.clone(),
    }
}

fn set(p: &mut Parts, which: Option<usize>, bytes: Vec<u8>) {
    match which {
        None => p.main = bytes,
        Some(i) => p.blocks[i].data = bytes,
    }
}

fn captured(major: PgMajor) -> Vec<WalRecord> {
    let path = format!(
        "{}/tests/data/rmgr-pg{major}/records.bin.zst",
        env!("CARGO_MANIFEST_DIR")
    );
    read_records(&unzstd(&path))
}

/// One record per (rmgr, xl_info, first byte of main data, image
/// presence, block count): every kind and most flag combinations.
fn representatives(recs: &[WalRecord]) -> Vec<&WalRecord> {
    let mut seen = BTreeSet::new();
    recs.iter()
        .filter(|r| {
            let v: RecordView<'_> = r.view();
            seen.insert((
                v.rmgr().0,
                v.header.xl_info,
                v.main_data().first().copied(),
                v.blocks.iter().any(|b| b.has_image()),
                v.blocks.len(),
            ))
        })
        .collect()
}

/// The golden WAL's pruning and vacuum records, one per (xl_info, image
/// presence, which of the redirected/dead/unused lists are empty).
fn golden_prunes(major: PgMajor) -> Vec<WalRecord> {
    let (recs, _) = golden_records(major);
    let mut seen = BTreeSet::new();
    recs.into_iter()
        .filter(|r| {
            let v = r.view();
            let Ok(Some(p)) = decode_prune(&v, major) else {
                return false;
            };
            seen.insert((
                v.header.xl_info,
                p.image_only,
                p.redirected.is_empty(),
                p.dead.is_empty(),
                p.unused.is_empty(),
            ))
        })
        .collect()
}

/// A pruning record with every list (and on 17+ freeze plans and a
/// conflict horizon), a shape the golden WAL lacks: 15's PRUNE, 17+'s
/// PRUNE_VACUUM_SCAN.
fn crafted_prune(major: PgMajor) -> WalRecord {
    let u16s = |v: &[u16]| v.iter().flat_map(|o| o.to_le_bytes()).collect::<Vec<u8>>();
    let (main, data) = if major >= PgMajor::V17 {
        // XLHP_CLEANUP_LOCK, _HAS_CONFLICT_HORIZON, _HAS_FREEZE_PLANS,
        // _HAS_REDIRECTIONS, _HAS_DEAD_ITEMS, _HAS_NOW_UNUSED_ITEMS
        let mut main = vec![0, 0xFC];
        main.extend(900u32.to_le_bytes());
        let mut data = u16s(&[1, 0]); // nplans, padding
        data.extend(901u32.to_le_bytes()); // xmax
        data.extend(u16s(&[0, 0x0900])); // infomask2, infomask
        data.extend([0, 0]); // frzflags, padding
        data.extend(u16s(&[2])); // ntuples
        data.extend(u16s(&[1, 3, 5, 2, 6, 7, 1, 8, 9, 10]));
        (main, data)
    } else {
        let mut main = 900u32.to_le_bytes().to_vec();
        main.extend(u16s(&[1, 2]));
        if major >= PgMajor::V16 {
            main.push(0);
        }
        (main, u16s(&[3, 5, 6, 7, 8]))
    };
    let mut locator = [0u8; 12];
    locator[..4].copy_from_slice(&1663u32.to_le_bytes());
    locator[4..8].copy_from_slice(&5u32.to_le_bytes());
    locator[8..].copy_from_slice(&16384u32.to_le_bytes());
    let p = Parts {
        xid: 0,
        info: if major >= PgMajor::V17 { 0x20 } else { 0x10 },
        rmid: RmgrId::HEAP2.0,
        toplevel_xid: None,
        blocks: vec![Block {
            id: 0,
            fork_flags: 0,
            locator,
            blkno: 1,
            data,
        }],
        main,
    };
    let raw = p.assemble();
    let mut blocks = Vec::new();
    let lsn = Lsn(0x0100_0028);
    let r = decode_record(lsn, Lsn(lsn.0 + raw.len() as u64), &raw, &mut blocks)
        .unwrap()
        .to_owned();
    let d = decode_prune(&r.view(), major).unwrap().unwrap();
    assert_eq!(
        (d.redirected, d.dead, d.unused),
        (vec![(3, 5)], vec![6, 7], vec![8])
    );
    r
}

fn mutations(major: PgMajor) {
    let recs = captured(major);
    let mut prunes = golden_prunes(major);
    prunes.push(crafted_prune(major));
    assert!(
        prunes.len() >= 3,
        "{} pruning representatives",
        prunes.len()
    );
    let mut reps = representatives(&recs);
    assert!(reps.len() > 40, "{} representatives", reps.len());
    reps.extend(&prunes);
    let (mut runs, mut decoded) = (0, 0);
    for r in reps {
        let mut p = Parts::of(r);
        // Rebuilt unchanged, it decodes as before.
        assert!(
            exercise(&p.assemble()) > 0,
            "{} does not decode rebuilt",
            r.lsn
        );
        runs += mutate_all(&mut p, None);
        for i in 0..p.blocks.len() {
            runs += mutate_all(&mut p, Some(i));
        }
        // Every info value of every decoded rmgr, and no blocks at all.
        for rmid in [RmgrId::HEAP, RmgrId::HEAP2, RmgrId::XACT, RmgrId::STANDBY] {
            for info in (0..16).map(|i| i << 4) {
                let mut q = Parts::of(r);
                q.rmid = rmid.0;
                q.info = info;
                decoded += exercise(&q.assemble());
                q.blocks.clear();
                decoded += exercise(&q.assemble());
                runs += 2;
            }
        }
    }
    eprintln!(
        "PostgreSQL {major}: {runs} variants ({} pruning records); {decoded} decodes of info/rmgr swaps succeeded",
        prunes.len()
    );
    assert!(runs > 50_000, "{runs}");
}

per_major!(mutations => damaged_records_never_panic: pg15, pg16, pg17, pg18);
