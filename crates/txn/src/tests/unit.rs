//! Hand-written cases for the paths the model test reaches only by chance.

use walshadow_types::{Lsn, Xid};

use super::TestDir;
use crate::{
    Assembler, AssemblerConfig, CHANGE_OVERHEAD, COMMITTED_READ_OVERHEAD, CommittedTxn, TxnError,
};

fn open(dir: &TestDir, budget: usize) -> Assembler {
    Assembler::open(AssemblerConfig {
        memory_budget_bytes: budget,
        spill_dir: dir.path().to_path_buf(),
    })
    .unwrap()
}

fn items(txn: CommittedTxn) -> Vec<(Lsn, Vec<u8>)> {
    txn.collect::<Result<_, _>>().unwrap()
}

fn p(xid: Xid, i: u64) -> Vec<u8> {
    format!("{xid}:{i}").into_bytes()
}

#[test]
fn subxacts_merge_by_lsn_and_unlisted_ones_are_discarded() {
    let dir = TestDir::new("subxacts");
    // Room for about three changes: most spill.
    let mut asm = open(&dir, 3 * (CHANGE_OVERHEAD + 8));
    let (top, s1, s2, s3) = (100, 101, 102, 103);
    asm.assign(top, s1);
    asm.assign(top, s2);
    asm.assign(top, s3);
    let mut want = Vec::new();
    for i in 0..60u64 {
        let xid = [top, s1, s2, s3][(i % 4) as usize];
        let lsn = Lsn(1000 + i * 8);
        asm.add(xid, lsn, &p(xid, i)).unwrap();
        // s2 rolls back with its own abort record, s3 without one.
        if xid == top || xid == s1 {
            want.push((lsn, p(xid, i)));
        }
    }
    assert!(asm.spilled_bytes() > 0);
    asm.abort(s2, &[]);
    assert_eq!(asm.restart_lsn(), Some(Lsn(1000)));
    let txn = asm.commit(top, &[s1]).unwrap();
    assert_eq!(txn.change_count(), 30);
    assert_eq!(items(txn), want);
    assert_eq!(asm.restart_lsn(), None);
    assert!(asm.open_transactions().is_empty());
    assert_eq!(asm.memory_used(), 0);
    assert_eq!(asm.spilled_bytes(), 0);
    assert_eq!(dir.spill_files(), (0, 0));
}

#[test]
fn a_record_split_by_a_spill_keeps_its_order() {
    let dir = TestDir::new("split");
    let mut asm = open(&dir, 2 * (CHANGE_OVERHEAD + 1) + 10);
    // Five changes of one record (one LSN): the third add spills the first
    // two, so the record lies partly on disk, partly in memory.
    for i in 0..5u8 {
        asm.add(7, Lsn(500), &[i]).unwrap();
    }
    asm.add(7, Lsn(508), &[9]).unwrap();
    assert!(asm.spilled_bytes() > 0);
    let got: Vec<_> = items(asm.commit(7, &[]).unwrap());
    let want: Vec<_> = [0u8, 1, 2, 3, 4]
        .iter()
        .map(|&i| (Lsn(500), vec![i]))
        .chain([(Lsn(508), vec![9])])
        .collect();
    assert_eq!(got, want);
}

#[test]
fn a_change_bigger_than_the_budget_goes_straight_to_disk() {
    let dir = TestDir::new("huge");
    let mut asm = open(&dir, 1000);
    asm.add(5, Lsn(10), b"small").unwrap();
    asm.add(6, Lsn(20), &vec![7u8; 5000]).unwrap();
    assert!(asm.memory_used() <= 1000);
    assert!(asm.memory_peak() <= 1000);
    asm.add(6, Lsn(30), b"after").unwrap();
    let got = items(asm.commit(6, &[]).unwrap());
    assert_eq!(
        got,
        vec![(Lsn(20), vec![7u8; 5000]), (Lsn(30), b"after".to_vec())]
    );
    assert_eq!(
        items(asm.commit(5, &[]).unwrap()),
        vec![(Lsn(10), b"small".to_vec())]
    );
}

#[test]
fn many_spilled_subxacts_merge_in_passes() {
    let dir = TestDir::new("passes");
    let mut asm = open(&dir, 0);
    let top = 1000;
    let subs: Vec<Xid> = (1001..1041).collect();
    let mut want = Vec::new();
    for i in 0..400u64 {
        let xid = subs[(i * 7 % 40) as usize];
        asm.assign(top, xid);
        asm.add(xid, Lsn(100 + i), &p(xid, i)).unwrap();
        want.push((Lsn(100 + i), p(xid, i)));
    }
    assert_eq!(dir.spill_files().0, 40);
    let mut txn = asm.commit(top, &subs).unwrap();
    // 40 files merged to at most 16 before streaming; their read buffers
    // are all that is charged (nothing was in memory).
    assert!(dir.spill_files().0 <= crate::MERGE_FAN_IN);
    assert!(asm.memory_used() <= COMMITTED_READ_OVERHEAD);
    let first = txn.next().unwrap().unwrap();
    assert_eq!(first, want[0]);
    let rest: Vec<_> = txn.by_ref().collect::<Result<_, _>>().unwrap();
    assert_eq!(rest, want[1..]);
    drop(txn);
    assert_eq!(dir.spill_files(), (0, 0));
    assert_eq!(asm.memory_used(), 0);
    assert_eq!(asm.spilled_bytes(), 0);
}

#[test]
fn a_small_fan_in_merges_in_several_passes() {
    let dir = TestDir::new("fanin");
    let mut asm = open(&dir, 0);
    asm.set_merge_fan_in(2);
    let subs: Vec<Xid> = (11..20).collect();
    let mut want = Vec::new();
    for i in 0..90u64 {
        let xid = subs[(i * 5 % 9) as usize];
        asm.add(xid, Lsn(100 + i), &p(xid, i)).unwrap();
        want.push((Lsn(100 + i), p(xid, i)));
    }
    assert_eq!(items(asm.commit(10, &subs).unwrap()), want);
    assert_eq!(dir.spill_files(), (0, 0));
    assert_eq!(asm.spilled_bytes(), 0);
}

#[test]
fn dropping_a_committed_txn_midway_cleans_up() {
    let dir = TestDir::new("drop");
    let mut asm = open(&dir, 500);
    for i in 0..100u64 {
        asm.add(42, Lsn(1 + i), &[1u8; 40]).unwrap();
    }
    let mut txn = asm.commit(42, &[]).unwrap();
    assert!(asm.memory_used() > 0);
    txn.next().unwrap().unwrap();
    assert_eq!(txn.remaining(), 99);
    drop(txn);
    assert_eq!(asm.memory_used(), 0);
    assert_eq!(asm.spilled_bytes(), 0);
    assert_eq!(dir.spill_files(), (0, 0));
}

#[test]
fn changes_must_come_in_wal_order() {
    let dir = TestDir::new("order");
    let mut asm = open(&dir, 1 << 20);
    asm.add(9, Lsn(100), b"a").unwrap();
    asm.add(9, Lsn(100), b"b").unwrap();
    let err = asm.add(9, Lsn(99), b"c").unwrap_err();
    assert!(
        matches!(err, TxnError::LsnOutOfOrder { xid: 9, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("0/63"), "{err}");
    assert!(matches!(
        asm.add(2, Lsn(200), b"x"),
        Err(TxnError::InvalidXid { xid: 2 })
    ));
    assert_eq!(items(asm.commit(9, &[]).unwrap()).len(), 2);
}

#[test]
fn prepared_transactions_wait_and_hold_the_restart_lsn() {
    let dir = TestDir::new("2pc");
    let mut asm = open(&dir, 200);
    asm.add(50, Lsn(10), b"p1").unwrap();
    asm.assign(50, 51);
    asm.add(51, Lsn(20), b"p2").unwrap();
    asm.prepare(50, &[51]);
    assert!(matches!(
        asm.add(50, Lsn(25), b"no"),
        Err(TxnError::Prepared { .. })
    ));
    assert!(matches!(
        asm.commit(50, &[]),
        Err(TxnError::Prepared { .. })
    ));
    asm.add(60, Lsn(30), b"o").unwrap();
    asm.commit(60, &[]).unwrap();
    // Many later transactions, spilling the prepared one meanwhile.
    for i in 0..50u64 {
        asm.add(70 + i as Xid, Lsn(40 + i), &[0u8; 30]).unwrap();
    }
    // The source restarted: everything before xid 200 is gone, except the
    // prepared transaction.
    asm.forget_older_than(200);
    assert_eq!(asm.restart_lsn(), Some(Lsn(10)));
    let open = asm.open_transactions();
    assert_eq!(open.len(), 1);
    assert!(open[0].prepared && open[0].xid == 50 && open[0].subxacts == 1);
    let got = items(asm.commit_prepared(50).unwrap());
    assert_eq!(
        got,
        vec![(Lsn(10), b"p1".to_vec()), (Lsn(20), b"p2".to_vec())]
    );
    assert!(matches!(
        asm.commit_prepared(50),
        Err(TxnError::NotPrepared { xid: 50 })
    ));
    assert_eq!(asm.restart_lsn(), None);

    asm.add(80, Lsn(100), b"x").unwrap();
    asm.prepare(80, &[]);
    asm.abort_prepared(80);
    assert_eq!(asm.restart_lsn(), None);
    assert_eq!(dir.spill_files(), (0, 0));
}

#[test]
fn forget_older_than_wraps_around() {
    let dir = TestDir::new("wrap");
    let mut asm = open(&dir, 1 << 20);
    let old = u32::MAX - 10;
    asm.add(old, Lsn(1), b"a").unwrap();
    asm.assign(old, 4); // a subxact past the wrap belongs to `old`
    asm.add(4, Lsn(2), b"b").unwrap();
    asm.add(u32::MAX, Lsn(3), b"c").unwrap();
    asm.add(20, Lsn(4), b"d").unwrap();
    // The oldest running xid is u32::MAX - 5: `old` (and its subxact 4)
    // ended in a crash; u32::MAX and 20 come after it on the circle.
    asm.forget_older_than(u32::MAX - 5);
    let mut left: Vec<_> = asm.open_transactions().iter().map(|t| t.xid).collect();
    left.sort();
    assert_eq!(left, vec![20, u32::MAX]);
    assert_eq!(asm.restart_lsn(), Some(Lsn(3)));
    // An invalid oldest xid is ignored; 10 after the wrap drops u32::MAX.
    asm.forget_older_than(0);
    assert_eq!(asm.open_transactions().len(), 2);
    asm.forget_older_than(10);
    assert_eq!(asm.open_transactions()[0].xid, 20);
}

#[test]
fn restart_lsn_follows_the_oldest_open_transaction() {
    let dir = TestDir::new("restart");
    let mut asm = open(&dir, 1 << 20);
    asm.add(5, Lsn(100), b"").unwrap();
    asm.add(6, Lsn(200), b"").unwrap();
    asm.add(7, Lsn(300), b"").unwrap();
    asm.assign(6, 8);
    asm.add(8, Lsn(150), b"").unwrap();
    assert_eq!(asm.restart_lsn(), Some(Lsn(100)));
    asm.commit(5, &[]).unwrap();
    assert_eq!(asm.restart_lsn(), Some(Lsn(150)));
    asm.abort(6, &[]);
    assert_eq!(asm.restart_lsn(), Some(Lsn(300)));
}

#[test]
fn committed_transactions_can_move_to_another_thread() {
    fn send<T: Send>() {}
    send::<CommittedTxn>();
    send::<Assembler>();
}

#[test]
fn open_fails_clearly_when_the_spill_dir_is_a_file() {
    let dir = TestDir::new("notdir");
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"x").unwrap();
    let err = Assembler::open(AssemblerConfig {
        memory_budget_bytes: 1,
        spill_dir: file.clone(),
    })
    .unwrap_err();
    assert!(matches!(err, TxnError::SpillDir { .. }), "{err}");
    assert!(
        err.to_string().contains(&file.display().to_string()),
        "{err}"
    );
}

#[test]
fn status_folds_subxacts_into_their_transaction() {
    let dir = TestDir::new("status");
    let mut asm = open(&dir, 2 * CHANGE_OVERHEAD + 10);
    asm.assign(30, 31);
    asm.add(31, Lsn(5), b"abc").unwrap();
    asm.add(30, Lsn(6), b"defg").unwrap();
    asm.add(30, Lsn(7), b"hi").unwrap();
    asm.add(40, Lsn(8), b"j").unwrap();
    let open = asm.open_transactions();
    assert_eq!(open.len(), 2);
    let t = &open[0];
    assert_eq!(
        (t.xid, t.subxacts, t.changes, t.first_lsn),
        (30, 1, 3, Some(Lsn(5)))
    );
    assert!(t.spilled_bytes > 0, "{t:?}");
    assert_eq!(open[1].xid, 40);
    let mem: usize = open.iter().map(|t| t.memory_bytes).sum();
    assert_eq!(mem, asm.memory_used());
    let spilled: u64 = open.iter().map(|t| t.spilled_bytes).sum();
    assert_eq!(spilled, asm.spilled_bytes());
}
