//! The gate's rules on crafted `pg_xact`/`pg_multixact` bytes; the real
//! servers' cases are in tests/visibility.rs.

use proptest::prelude::*;

use super::multixact::build::Builder;
use super::slru::{BLCKSZ, SLRU_PAGES_PER_SEGMENT};
use super::xact::CLOG_XACTS_PER_PAGE;
use super::*;

const COMMITTED: u8 = 1;
const ABORTED: u8 = 2;
const SUB_COMMITTED: u8 = 3;

/// A pg_xact segment with the given statuses (others in progress).
fn clog_segment(segno: u32, pages: usize, statuses: &[(u32, u8)]) -> Vec<u8> {
    let mut seg = vec![0u8; pages * BLCKSZ];
    let base = segno * SLRU_PAGES_PER_SEGMENT * CLOG_XACTS_PER_PAGE;
    for &(xid, bits) in statuses {
        let index = xid - base;
        seg[(index / 4) as usize] |= bits << ((index % 4) * 2);
    }
    seg
}

fn header(xmin: u32, xmax: u32, infomask: u16) -> TupleHeader {
    TupleHeader {
        xmin,
        xmax,
        xvac: 0,
        infomask,
        infomask2: 2,
    }
}

/// Xids 1000.. in segment 0, one page.
fn xact(statuses: &[(u32, u8)]) -> XactLog {
    XactLog::from_files([("0000", clog_segment(0, 1, statuses))]).unwrap()
}

fn emit_all(gate: &mut Gate, h: &TupleHeader) -> Verdict {
    gate.decide(h).unwrap()
}

#[test]
fn hint_bits_decide_without_pg_xact() {
    // No pg_xact at all: only hint bits can answer.
    let mut g = Gate::new(XactLog::new(), MultiXacts::new());
    let xmax_none = HEAP_XMAX_INVALID;
    assert_eq!(
        emit_all(&mut g, &header(500, 0, HEAP_XMIN_COMMITTED | xmax_none)),
        Verdict::Emit
    );
    assert_eq!(
        emit_all(&mut g, &header(500, 0, HEAP_XMIN_FROZEN | xmax_none)),
        Verdict::Emit
    );
    assert_eq!(
        emit_all(&mut g, &header(500, 0, HEAP_XMIN_INVALID | xmax_none)),
        Verdict::Drop(DropReason::InserterAborted)
    );
    assert_eq!(
        emit_all(
            &mut g,
            &header(500, 501, HEAP_XMIN_COMMITTED | HEAP_XMAX_COMMITTED)
        ),
        Verdict::Drop(DropReason::DeleterCommitted)
    );
    // A locker, hinted or not, never kills.
    assert_eq!(
        emit_all(
            &mut g,
            &header(
                500,
                501,
                HEAP_XMIN_COMMITTED | HEAP_XMAX_LOCK_ONLY | HEAP_XMAX_EXCL_LOCK
            )
        ),
        Verdict::Emit
    );
    assert_eq!(
        emit_all(
            &mut g,
            &header(
                500,
                77,
                HEAP_XMIN_COMMITTED | HEAP_XMAX_IS_MULTI | HEAP_XMAX_LOCK_ONLY | HEAP_XMAX_SHR_LOCK
            )
        ),
        Verdict::Emit
    );
    // Frozen and bootstrap xids need no pg_xact either.
    assert_eq!(
        emit_all(&mut g, &header(2, 0, HEAP_XMAX_INVALID)),
        Verdict::Emit
    );
    assert_eq!(emit_all(&mut g, &header(1, 0, 0)), Verdict::Emit);
    // Invalid xmin: aborted (a killed speculative insertion).
    assert_eq!(
        emit_all(&mut g, &header(0, 0, HEAP_XMAX_INVALID)),
        Verdict::Drop(DropReason::InserterAborted)
    );
    // Unhinted: deferred.
    assert_eq!(emit_all(&mut g, &header(500, 0, 0)), Verdict::Defer);
    let c = g.counters();
    assert_eq!(c.walked, 10);
    assert_eq!((c.emitted, c.gated, c.deferred), (6, 3, 1));
    // Hinted ones could be decided with an empty pg_xact; the unhinted
    // one cannot, even after the walk.
    let mut w = g.finish_walk();
    assert!(matches!(
        w.resolve(&header(500, 0, 0)),
        Err(GateError::NothingCopied { .. })
    ));
}

#[test]
fn pg_xact_decides_unhinted_tuples() {
    let x = xact(&[(1000, COMMITTED), (1001, ABORTED), (1003, SUB_COMMITTED)]);
    let mut g = Gate::new(x, MultiXacts::new());
    assert_eq!(g.decide(&header(1000, 0, 0)).unwrap(), Verdict::Emit);
    assert_eq!(
        g.decide(&header(1001, 0, 0)).unwrap(),
        Verdict::Drop(DropReason::InserterAborted)
    );
    // Deleted: committed, aborted, running.
    assert_eq!(
        g.decide(&header(1000, 1000, 0)).unwrap(),
        Verdict::Drop(DropReason::DeleterCommitted)
    );
    assert_eq!(g.decide(&header(1000, 1001, 0)).unwrap(), Verdict::Emit);
    assert_eq!(g.decide(&header(1000, 1002, 0)).unwrap(), Verdict::Defer);
    // Inserter running or sub-committed: deferred.
    assert_eq!(g.decide(&header(1002, 0, 0)).unwrap(), Verdict::Defer);
    assert_eq!(g.decide(&header(1003, 0, 0)).unwrap(), Verdict::Defer);
    // Inserter running but deleter committed: dead either way.
    assert_eq!(
        g.decide(&header(1002, 1000, 0)).unwrap(),
        Verdict::Drop(DropReason::DeleterCommitted)
    );
    // Page of xid 40000 not copied yet: deferred.
    assert_eq!(g.decide(&header(40_000, 0, 0)).unwrap(), Verdict::Defer);

    let mut w = g.finish_walk();
    assert_eq!(
        w.resolve(&header(1000, 1002, 0)).unwrap(),
        Resolved::Emit,
        "a deleter running at copy time: live as of the copy"
    );
    assert_eq!(
        w.resolve(&header(1002, 0, 0)).unwrap(),
        Resolved::Drop(DropReason::InserterNotCommitted)
    );
    assert_eq!(
        w.resolve(&header(1003, 0, 0)).unwrap(),
        Resolved::Drop(DropReason::InserterNotCommitted)
    );
    // Xid 40000 is past the copied page: newer than the copy.
    assert_eq!(
        w.resolve(&header(40_000, 0, 0)).unwrap(),
        Resolved::Drop(DropReason::InserterNotCommitted)
    );
    let c = w.counters();
    assert_eq!(c.walked, 9);
    assert_eq!(c.deferred, 4);
    assert_eq!(c.deferred_emitted, 1);
    assert_eq!(c.deferred_dropped, 3);
    assert_eq!(c.not_committed_dropped, 3);
    assert_eq!(c.emitted, 3);
    assert_eq!(c.gated, 6);
    assert_eq!(
        c.walked,
        c.emitted + c.gated + c.deferred - c.deferred_emitted - c.deferred_dropped
    );
}

#[test]
fn pg_xact_truncated_or_holed_is_an_error() {
    // Segments 2 and 4: segment 3 is a hole, segment 1 truncated.
    let per_seg = SLRU_PAGES_PER_SEGMENT * CLOG_XACTS_PER_PAGE;
    let mut x = XactLog::new();
    x.add_segment(2, clog_segment(2, 32, &[])).unwrap();
    x.add_segment(4, clog_segment(4, 1, &[])).unwrap();
    let mut w = Gate::new(x, MultiXacts::new()).finish_walk();
    let truncated = w.resolve(&header(per_seg + 5, 0, 0)).unwrap_err();
    assert!(
        matches!(truncated, GateError::Truncated { .. }),
        "{truncated}"
    );
    assert!(!truncated.is_transient());
    assert!(truncated.to_string().contains("initial_load = 'copy'"));
    let hole = w.resolve(&header(3 * per_seg + 5, 0, 0)).unwrap_err();
    assert!(matches!(hole, GateError::Hole { .. }), "{hole}");
    assert!(hole.is_transient());
    // The deleter's xid is looked up the same way.
    assert!(matches!(
        w.resolve(&header(2 * per_seg, per_seg, HEAP_XMIN_COMMITTED)),
        Err(GateError::Truncated { .. })
    ));
    // Past segment 4's one page: newer, not committed.
    assert_eq!(
        w.resolve(&header(4 * per_seg + CLOG_XACTS_PER_PAGE, 0, 0))
            .unwrap(),
        Resolved::Drop(DropReason::InserterNotCommitted)
    );
}

#[test]
fn moved_tuples_follow_xvac() {
    let x = xact(&[(1000, COMMITTED), (1001, ABORTED)]);
    let mut g = Gate::new(x, MultiXacts::new());
    let moved = |xvac, im| TupleHeader {
        xvac,
        ..header(999, 0, im | HEAP_XMAX_INVALID)
    };
    assert_eq!(
        g.decide(&moved(1000, HEAP_MOVED_OFF)).unwrap(),
        Verdict::Drop(DropReason::MovedOff)
    );
    assert_eq!(
        g.decide(&moved(1001, HEAP_MOVED_OFF)).unwrap(),
        Verdict::Emit
    );
    assert_eq!(
        g.decide(&moved(1000, HEAP_MOVED_IN)).unwrap(),
        Verdict::Emit
    );
    assert_eq!(
        g.decide(&moved(1001, HEAP_MOVED_IN)).unwrap(),
        Verdict::Drop(DropReason::InserterAborted)
    );
    // The hint wins over the move.
    assert_eq!(
        g.decide(&moved(1000, HEAP_MOVED_OFF | HEAP_XMIN_COMMITTED))
            .unwrap(),
        Verdict::Emit
    );
}

const MULTI: u16 = HEAP_XMAX_IS_MULTI;

#[test]
fn multixact_updater_decides() {
    let mut b = Builder::default();
    let o = b.record(1, 1, &[(1000, 1), (1001, 5)]); // updater committed
    let o = b.record(2, o, &[(1000, 1), (1002, 4)]); // updater aborted
    let o = b.record(3, o, &[(1003, 5), (1000, 1)]); // updater running
    let o = b.record(4, o, &[(1000, 1), (1001, 1)]); // lockers only
    b.record(5, o, &[(1004, 1), (1005, 5)]); // newest, unbounded
    let x = xact(&[
        (1000, COMMITTED),
        (1001, COMMITTED),
        (1002, ABORTED),
        (1005, COMMITTED),
    ]);
    let mut g = Gate::new(x, b.into_multixacts());
    let hc = HEAP_XMIN_COMMITTED;
    assert_eq!(
        g.decide(&header(900, 1, hc | MULTI)).unwrap(),
        Verdict::Drop(DropReason::UpdaterCommitted)
    );
    assert_eq!(
        g.decide(&header(900, 2, hc | MULTI)).unwrap(),
        Verdict::Emit
    );
    assert_eq!(
        g.decide(&header(900, 3, hc | MULTI)).unwrap(),
        Verdict::Defer
    );
    assert_eq!(
        g.decide(&header(900, 5, hc | MULTI)).unwrap(),
        Verdict::Drop(DropReason::UpdaterCommitted)
    );
    // The same lockers-only multixact with the lock-only bit: no lookup.
    assert_eq!(
        g.decide(&header(900, 4, hc | MULTI | HEAP_XMAX_LOCK_ONLY))
            .unwrap(),
        Verdict::Emit
    );
    // Without it, the tuple contradicts its multixact.
    let e = g.decide(&header(900, 4, hc | MULTI)).unwrap_err();
    assert!(
        matches!(e, GateError::MultiXactGarbage { multi: 4, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("VACUUM (FREEZE)"));
    // A multixact never recorded in the copied page: postdates the copy.
    assert_eq!(
        g.decide(&header(900, 6, hc | MULTI)).unwrap(),
        Verdict::Emit
    );
    // XMAX_INVALID wins over the multixact.
    assert_eq!(
        g.decide(&header(900, 1, hc | MULTI | HEAP_XMAX_INVALID))
            .unwrap(),
        Verdict::Emit
    );
    assert_eq!(g.counters().multixact_emitted, 1);
    let mut w = g.finish_walk();
    assert_eq!(
        w.resolve(&header(900, 3, hc | MULTI)).unwrap(),
        Resolved::Emit
    );
    assert_eq!(w.counters().multixact_emitted, 1);
}

#[test]
fn multixact_pages_the_copy_lacks() {
    let per = super::multixact::MULTIXACT_OFFSETS_PER_PAGE;
    let mut b = Builder::default();
    // Offsets segment 1 only (multixacts 65536 ..); members page 0.
    let first = SLRU_PAGES_PER_SEGMENT * per;
    let o = b.record(first + 1, 1, &[(1000, 1), (1001, 5)]);
    // Multixact first+2 starts on members page 1, not copied.
    b.set_offset(first + 2, super::multixact::MULTIXACT_MEMBERS_PER_PAGE + 2);
    let _ = o;
    let x = xact(&[(1000, COMMITTED), (1001, COMMITTED)]);
    let hc = HEAP_XMIN_COMMITTED;
    let mut g = Gate::new(x, b.into_multixacts());
    // During the walk an absent page may still come.
    let newer_offsets = header(900, first + per + 7, hc | MULTI);
    let older_offsets = header(900, 7, hc | MULTI);
    let newer_members = header(900, first + 2, hc | MULTI);
    for h in [&newer_offsets, &older_offsets, &newer_members] {
        assert_eq!(g.decide(h).unwrap(), Verdict::Defer);
    }
    let mut w = g.finish_walk();
    assert_eq!(w.resolve(&newer_offsets).unwrap(), Resolved::Emit);
    assert_eq!(w.resolve(&newer_members).unwrap(), Resolved::Emit);
    assert_eq!(w.counters().multixact_emitted, 2);
    let e = w.resolve(&older_offsets).unwrap_err();
    assert!(matches!(e, GateError::Truncated { .. }), "{e}");
    assert!(e.to_string().contains("pg_multixact/offsets"));
}

#[test]
fn multixact_members_truncated_is_an_error() {
    let mut b = Builder::default();
    // Members segment 1 only; multixact 3 points into segment 0.
    let mps = SLRU_PAGES_PER_SEGMENT * super::multixact::MULTIXACT_MEMBERS_PER_PAGE;
    b.record(2, mps + 10, &[(1000, 5)]);
    b.set_offset(3, 20);
    b.set_offset(4, 21);
    let mut g = Gate::new(xact(&[]), b.into_multixacts());
    let h = header(900, 3, HEAP_XMIN_COMMITTED | MULTI);
    assert_eq!(g.decide(&h).unwrap(), Verdict::Defer);
    let e = g.finish_walk().resolve(&h).unwrap_err();
    assert!(matches!(e, GateError::Truncated { .. }), "{e}");
    assert!(e.to_string().contains("pg_multixact/members"));
}

#[test]
fn add_backup_file_routes_by_path() {
    let mut g = Gate::new(XactLog::new(), MultiXacts::new());
    let page = vec![0u8; BLCKSZ];
    assert!(g.add_backup_file("pg_xact/0000", page.clone()).unwrap());
    assert!(
        g.add_backup_file("./pg_multixact/offsets/0000", page.clone())
            .unwrap()
    );
    assert!(
        g.add_backup_file("pg_multixact/members/0000", page.clone())
            .unwrap()
    );
    assert!(!g.add_backup_file("base/5/16384", page.clone()).unwrap());
    assert!(!g.add_backup_file("pg_xact/README", page.clone()).unwrap());
    assert!(matches!(
        g.add_backup_file("pg_xact/0000", page),
        Err(GateError::DuplicateSegment { .. })
    ));
    assert_eq!(g.xact().segment_count(), 1);
    assert_eq!(g.multi().segment_counts(), (1, 1));
}

fn spool_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("walshadow-visibility-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn spill_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

#[test]
fn spool_spills_and_resolves_in_order() {
    let dir = spool_dir("spool");
    let mut spool = DeferredSpool::open(SpoolConfig {
        memory_budget_bytes: 4096,
        spill_dir: dir.clone(),
    })
    .unwrap();
    // Pg_xact arrives after the heap pages: everything unhinted defers.
    let mut g = Gate::new(XactLog::new(), MultiXacts::new());
    let mut expected = Vec::new();
    for i in 0..500u32 {
        let xmin = 1000 + i % 4;
        let h = header(xmin, 0, 0);
        assert_eq!(g.decide(&h).unwrap(), Verdict::Defer);
        let payload = format!("tuple {i}").into_bytes();
        spool.push(&h, &payload).unwrap();
        if i % 4 == 0 {
            expected.push(payload);
        }
    }
    assert_eq!(spool.len(), 500);
    assert!(spool.spilled_bytes() > 0, "a 4 KiB budget must spill");
    assert!(spill_files(&dir) > 0);
    assert!(spool.memory_used() <= 4096);
    g.xact_mut()
        .add_file(
            "0000",
            clog_segment(
                0,
                1,
                &[(1000, COMMITTED), (1001, ABORTED), (1003, SUB_COMMITTED)],
            ),
        )
        .unwrap();
    let mut w = g.finish_walk();
    let mut got = Vec::new();
    let summary = spool
        .resolve(&mut w, |t| {
            assert_eq!(t.header.xmin, 1000);
            got.push(t.payload);
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap();
    assert_eq!(got, expected);
    assert_eq!(summary.emitted, 125);
    assert_eq!(summary.dropped, 375);
    assert_eq!(summary.not_committed, 250);
    let c = w.counters();
    assert_eq!((c.deferred_emitted, c.deferred_dropped), (125, 375));
    assert_eq!(c.not_committed_dropped, 250);
    assert_eq!(spill_files(&dir), 0, "resolving removes the spill files");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn failed_walk_resolves_nothing() {
    let dir = spool_dir("failed");
    let mut spool = DeferredSpool::open(SpoolConfig {
        memory_budget_bytes: 1024,
        spill_dir: dir.clone(),
    })
    .unwrap();
    for i in 0..100u32 {
        spool.push(&header(1000, 0, 0), &i.to_le_bytes()).unwrap();
    }
    assert!(spill_files(&dir) > 0);
    // The walk failed: the spool is dropped, never resolved.
    drop(spool);
    assert_eq!(spill_files(&dir), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn emit_errors_stop_the_resolve() {
    let dir = spool_dir("emit-error");
    let mut spool = DeferredSpool::open(SpoolConfig {
        memory_budget_bytes: 1 << 20,
        spill_dir: dir.clone(),
    })
    .unwrap();
    for _ in 0..3 {
        spool.push(&header(1000, 0, 0), b"x").unwrap();
    }
    let mut w = Gate::new(xact(&[(1000, COMMITTED)]), MultiXacts::new()).finish_walk();
    let mut calls = 0;
    let err = spool
        .resolve(&mut w, |_| {
            calls += 1;
            Err("destination full")
        })
        .unwrap_err();
    assert!(matches!(err, ResolveError::Emit("destination full")));
    assert_eq!(calls, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Hostile SLRU bytes and tuple headers: errors, never panics.
    #[test]
    fn hostile_bytes_never_panic(
        clog in proptest::collection::vec(any::<u8>(), 0..3 * BLCKSZ),
        offsets in proptest::collection::vec(any::<u8>(), 0..2 * BLCKSZ),
        members in proptest::collection::vec(any::<u8>(), 0..2 * BLCKSZ),
        segs in (0u64..5000, 0u64..70_000, 0u64..90_000),
        headers in proptest::collection::vec(
            (any::<u32>(), any::<u32>(), any::<u32>(), any::<u16>()), 1..40),
        small_ids in any::<bool>(),
    ) {
        let mut x = XactLog::new();
        let mut m = MultiXacts::new();
        let _ = x.add_segment(segs.0, clog.clone());
        let _ = x.add_segment(0, clog);
        let _ = m.add_offsets_segment(segs.1, offsets.clone());
        let _ = m.add_offsets_segment(0, offsets);
        let _ = m.add_members_segment(segs.2, members.clone());
        let _ = m.add_members_segment(0, members);
        let mut g = Gate::new(x, m);
        let hs: Vec<TupleHeader> = headers
            .into_iter()
            .map(|(xmin, xmax, xvac, infomask)| {
                let fit = |v: u32| if small_ids { v % 3000 } else { v };
                TupleHeader { xmin: fit(xmin), xmax: fit(xmax), xvac: fit(xvac), infomask, infomask2: 0 }
            })
            .collect();
        for h in &hs {
            let _ = g.decide(h);
        }
        let mut w = g.finish_walk();
        for h in &hs {
            let _ = w.resolve(h);
        }
    }
}
