//! Model-based property test: random sequences of add / assign / commit /
//! abort / prepare / commit_prepared / abort_prepared / forget_older_than
//! run against the assembler (with budgets small enough to spill nearly
//! every change, and merge fan-ins small enough to force merge passes) and
//! against a plain in-memory model; every committed transaction, restart
//! LSN, status listing and error must agree, memory must stay within the
//! stated bound, and the spill directory must hold exactly the bytes the
//! assembler reports.
//!
//! proptest reports a failing case (shrunk) and records its seed under
//! `proptest-regressions/`, which is committed and replayed first.
//! `PROPTEST_CASES=N` runs more cases.

use std::collections::HashMap;

use proptest::prelude::*;
use walshadow_types::{Lsn, Xid};

use super::TestDir;
use crate::{
    Assembler, AssemblerConfig, COMMITTED_READ_OVERHEAD, CommittedTxn, TxnError, xid_is_normal,
};

/// Top-level xids: both sides of the 2^32 wrap.
const TOPS: [Xid; 4] = [u32::MAX - 1, u32::MAX, 3, 10];
/// Subxact xids.
const SUBS: [Xid; 4] = [5, 11, 12, u32::MAX - 2];
/// oldest_running_xid values for forget_older_than (0 = invalid: ignored).
const OLDEST: [Xid; 7] = [0, 4, 11, u32::MAX, 1 << 31, 3 + (1 << 31), 7];

#[derive(Debug, Clone)]
enum Op {
    /// `who` < 4: a top, < 8: a subxact, else an invalid xid (0..=2).
    Add {
        who: usize,
        same_lsn: bool,
        len: usize,
    },
    Assign {
        top: usize,
        sub: usize,
    },
    Commit {
        top: usize,
        subs: u8,
        hold: bool,
    },
    /// `who` as in Add (a subxact's own abort included).
    Abort {
        who: usize,
        subs: u8,
    },
    Prepare {
        top: usize,
        subs: u8,
    },
    CommitPrepared {
        top: usize,
        hold: bool,
    },
    AbortPrepared {
        top: usize,
    },
    Forget {
        oldest: usize,
    },
}

fn who_xid(who: usize) -> Xid {
    match who {
        0..=3 => TOPS[who],
        4..=7 => SUBS[who - 4],
        _ => (who - 8) as Xid,
    }
}

fn subs_of(mask: u8) -> Vec<Xid> {
    (0..4)
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| SUBS[i])
        .collect()
}

fn payload(lsn: Lsn, n: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (lsn.0 as usize * 31 + n * 7 + i) as u8)
        .collect()
}

fn op() -> impl Strategy<Value = Op> {
    let len = prop_oneof![8 => 0usize..48, 1 => 100usize..400];
    prop_oneof![
        12 => (0usize..8, any::<bool>(), len).prop_map(|(who, same_lsn, len)| Op::Add { who, same_lsn, len }),
        1 => (0usize..11, any::<bool>()).prop_map(|(who, same_lsn)| Op::Add { who, same_lsn, len: 3 }),
        3 => (0usize..4, 0usize..4).prop_map(|(top, sub)| Op::Assign { top, sub }),
        3 => (0usize..4, any::<u8>(), any::<bool>()).prop_map(|(top, subs, hold)| Op::Commit { top, subs: subs & 15, hold }),
        2 => (0usize..8, any::<u8>()).prop_map(|(who, subs)| Op::Abort { who, subs: subs & 15 }),
        1 => (0usize..4, any::<u8>()).prop_map(|(top, subs)| Op::Prepare { top, subs: subs & 15 }),
        1 => (0usize..4, any::<bool>()).prop_map(|(top, hold)| Op::CommitPrepared { top, hold }),
        1 => (0usize..4).prop_map(|top| Op::AbortPrepared { top }),
        1 => (0usize..OLDEST.len()).prop_map(|oldest| Op::Forget { oldest }),
    ]
}

type Changes = Vec<(Lsn, Vec<u8>)>;

#[derive(Default)]
struct MBuf {
    changes: Changes,
    top: Option<Xid>,
}

/// What the assembler should do, written as plainly as possible.
#[derive(Default)]
struct Model {
    bufs: HashMap<Xid, MBuf>,
    /// Prepared xid → (its merged changes, xids of its buffers).
    prepared: HashMap<Xid, (Changes, Vec<Xid>)>,
}

/// `TransactionIdPrecedes`, independently: normal xids compare on the
/// circle by their distance mod 2^32.
fn model_precedes(a: Xid, b: Xid) -> bool {
    if a < 3 || b < 3 {
        return a < b;
    }
    let d = (u64::from(a) + (1u64 << 32) - u64::from(b)) % (1u64 << 32);
    d >= 1u64 << 31
}

impl Model {
    fn is_prepared(&self, xid: Xid) -> bool {
        self.prepared.contains_key(&xid) || self.prepared.values().any(|(_, p)| p.contains(&xid))
    }

    /// Returns Err(()) where the assembler must return an error.
    fn add(&mut self, xid: Xid, lsn: Lsn, p: Vec<u8>) -> Result<(), ()> {
        if xid < 3 || self.is_prepared(xid) {
            return Err(());
        }
        self.bufs.entry(xid).or_default().changes.push((lsn, p));
        Ok(())
    }

    fn assign(&mut self, top: Xid, sub: Xid) {
        if top == sub || top < 3 || sub < 3 {
            return;
        }
        let top = self.bufs.get(&top).and_then(|b| b.top).unwrap_or(top);
        if top == sub || self.is_prepared(top) || self.is_prepared(sub) {
            return;
        }
        self.bufs.entry(sub).or_default().top = Some(top);
        self.bufs.entry(top).or_default();
    }

    /// Takes xid's and the listed subxacts' buffers; drops subxacts whose
    /// top is xid; returns (xids taken, merged changes).
    fn take(&mut self, xid: Xid, subs: &[Xid]) -> (Vec<Xid>, Changes) {
        let mut taken = Vec::new();
        let mut all: Vec<(Lsn, usize, Vec<u8>)> = Vec::new();
        let mut seq = 0;
        let mut grab = |x: Xid, bufs: &mut HashMap<Xid, MBuf>, taken: &mut Vec<Xid>| {
            if let Some(b) = bufs.remove(&x) {
                taken.push(x);
                for (l, p) in b.changes {
                    all.push((l, seq, p));
                    seq += 1;
                }
            }
        };
        if !self.is_prepared(xid) {
            grab(xid, &mut self.bufs, &mut taken);
        }
        for &s in subs {
            if !self.is_prepared(s) {
                grab(s, &mut self.bufs, &mut taken);
            }
        }
        self.bufs.retain(|_, b| b.top != Some(xid));
        // LSN order; equal LSNs only ever come from one buffer, in order.
        all.sort_by_key(|(l, s, _)| (*l, *s));
        (taken, all.into_iter().map(|(l, _, p)| (l, p)).collect())
    }

    fn commit(&mut self, xid: Xid, subs: &[Xid]) -> Result<Changes, ()> {
        if self.prepared.contains_key(&xid) {
            return Err(());
        }
        Ok(self.take(xid, subs).1)
    }

    fn abort(&mut self, xid: Xid, subs: &[Xid]) {
        if self.prepared.contains_key(&xid) {
            self.prepared.remove(&xid);
            return;
        }
        if self.is_prepared(xid) {
            return;
        }
        self.take(xid, subs);
    }

    fn prepare(&mut self, xid: Xid, subs: &[Xid]) {
        if xid < 3 || self.is_prepared(xid) {
            return;
        }
        let (taken, changes) = self.take(xid, subs);
        self.prepared.insert(xid, (changes, taken));
    }

    fn commit_prepared(&mut self, xid: Xid) -> Result<Changes, ()> {
        self.prepared.remove(&xid).map(|(c, _)| c).ok_or(())
    }

    fn abort_prepared(&mut self, xid: Xid) {
        self.prepared.remove(&xid);
    }

    fn forget(&mut self, oldest: Xid) {
        if oldest < 3 {
            return;
        }
        self.bufs
            .retain(|&x, b| !model_precedes(b.top.unwrap_or(x), oldest));
    }

    fn restart_lsn(&self) -> Option<Lsn> {
        let open = self
            .bufs
            .values()
            .filter_map(|b| b.changes.first().map(|c| c.0));
        let prepared = self
            .prepared
            .values()
            .filter_map(|(c, _)| c.first().map(|c| c.0));
        open.chain(prepared).min()
    }

    /// (top xid, prepared, change count) per top-level transaction.
    fn status(&self) -> Vec<(Xid, bool, u64)> {
        let mut by_top: HashMap<Xid, u64> = HashMap::new();
        for (&x, b) in &self.bufs {
            *by_top.entry(b.top.unwrap_or(x)).or_default() += b.changes.len() as u64;
        }
        let mut out: Vec<_> = by_top.into_iter().map(|(x, n)| (x, false, n)).collect();
        out.extend(
            self.prepared
                .iter()
                .map(|(&x, (c, _))| (x, true, c.len() as u64)),
        );
        out.sort();
        out
    }
}

fn drain(txn: CommittedTxn) -> Result<Changes, TxnError> {
    txn.collect()
}

fn run(budget: usize, fan_in: usize, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = TestDir::new("model");
    let mut asm = Assembler::open(AssemblerConfig {
        memory_budget_bytes: budget,
        spill_dir: dir.path().to_path_buf(),
    })
    .unwrap();
    asm.set_merge_fan_in(fan_in);
    let mut model = Model::default();
    let mut lsn = Lsn(0x100_0000);
    let mut last_add: Option<Xid> = None;
    let mut n = 0usize;
    // A committed transaction left unread across the next operation.
    let mut held: Option<(CommittedTxn, Changes)> = None;

    for (step, op) in ops.into_iter().enumerate() {
        let mut newly_held = None;
        match op {
            Op::Add { who, same_lsn, len } => {
                let xid = who_xid(who);
                // Only one xid's record yields several changes at one LSN.
                if !(same_lsn && last_add == Some(xid)) {
                    lsn = Lsn(lsn.0 + 24);
                }
                n += 1;
                let p = payload(lsn, n, len);
                let got = asm.add(xid, lsn, &p);
                let want = model.add(xid, lsn, p);
                prop_assert_eq!(
                    got.is_ok(),
                    want.is_ok(),
                    "step {}: add {} -> {:?}",
                    step,
                    xid,
                    got
                );
                if got.is_ok() {
                    last_add = Some(xid);
                } else if !xid_is_normal(xid) {
                    prop_assert!(
                        matches!(got, Err(TxnError::InvalidXid { .. })),
                        "step {}",
                        step
                    );
                } else {
                    prop_assert!(
                        matches!(got, Err(TxnError::Prepared { .. })),
                        "step {}",
                        step
                    );
                }
            }
            Op::Assign { top, sub } => {
                asm.assign(TOPS[top], SUBS[sub]);
                model.assign(TOPS[top], SUBS[sub]);
            }
            Op::Commit { top, subs, hold } => {
                let (xid, subs) = (TOPS[top], subs_of(subs));
                let got = asm.commit(xid, &subs);
                let want = model.commit(xid, &subs);
                prop_assert_eq!(got.is_ok(), want.is_ok(), "step {}: commit {}", step, xid);
                if let (Ok(txn), Ok(want)) = (got, want) {
                    prop_assert_eq!(txn.change_count(), want.len() as u64);
                    if hold {
                        newly_held = Some((txn, want));
                    } else {
                        prop_assert_eq!(drain(txn).unwrap(), want, "step {}: commit {}", step, xid);
                    }
                }
            }
            Op::Abort { who, subs } => {
                let (xid, subs) = (who_xid(who), subs_of(subs));
                asm.abort(xid, &subs);
                model.abort(xid, &subs);
            }
            Op::Prepare { top, subs } => {
                let (xid, subs) = (TOPS[top], subs_of(subs));
                asm.prepare(xid, &subs);
                model.prepare(xid, &subs);
            }
            Op::CommitPrepared { top, hold } => {
                let xid = TOPS[top];
                let got = asm.commit_prepared(xid);
                let want = model.commit_prepared(xid);
                prop_assert_eq!(
                    got.is_ok(),
                    want.is_ok(),
                    "step {}: commit prepared {}",
                    step,
                    xid
                );
                if let (Ok(txn), Ok(want)) = (got, want) {
                    if hold {
                        newly_held = Some((txn, want));
                    } else {
                        prop_assert_eq!(drain(txn).unwrap(), want);
                    }
                }
            }
            Op::AbortPrepared { top } => {
                asm.abort_prepared(TOPS[top]);
                model.abort_prepared(TOPS[top]);
            }
            Op::Forget { oldest } => {
                asm.forget_older_than(OLDEST[oldest]);
                model.forget(OLDEST[oldest]);
            }
        }

        let live = usize::from(held.is_some()) + usize::from(newly_held.is_some());
        prop_assert!(
            asm.memory_used() <= budget + live * COMMITTED_READ_OVERHEAD,
            "step {}: memory_used {} over budget {} with {} live committed",
            step,
            asm.memory_used(),
            budget,
            live
        );
        // The previously held transaction is read only now, after an
        // operation ran beside it.
        if let Some((txn, want)) = held.take() {
            prop_assert_eq!(drain(txn).unwrap(), want, "step {}: held transaction", step);
        }
        held = newly_held;

        prop_assert_eq!(asm.restart_lsn(), model.restart_lsn(), "step {}", step);
        let mut status: Vec<_> = asm
            .open_transactions()
            .into_iter()
            .map(|t| (t.xid, t.prepared, t.changes))
            .collect();
        status.sort();
        prop_assert_eq!(status, model.status(), "step {}", step);
        let (_, on_disk) = dir.spill_files();
        prop_assert_eq!(asm.spilled_bytes(), on_disk, "step {}", step);
    }

    if let Some((txn, want)) = held.take() {
        prop_assert_eq!(drain(txn).unwrap(), want);
    }
    // Everything still open is aborted: nothing may be left behind.
    for &t in &TOPS {
        asm.abort(t, &SUBS);
    }
    for &s in &SUBS {
        asm.abort(s, &[]);
    }
    prop_assert_eq!(asm.restart_lsn(), None);
    prop_assert_eq!(asm.memory_used(), 0);
    prop_assert_eq!(asm.spilled_bytes(), 0);
    prop_assert_eq!(dir.spill_files(), (0, 0));
    prop_assert!(asm.memory_peak() <= budget + 2 * COMMITTED_READ_OVERHEAD);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]

    #[test]
    fn assembler_matches_model(
        budget in prop_oneof![Just(0usize), Just(100), Just(300), Just(1000), Just(4096), Just(1 << 20)],
        fan_in in prop_oneof![Just(2usize), Just(3), Just(16)],
        ops in proptest::collection::vec(op(), 1..150),
    ) {
        run(budget, fan_in, ops)?;
    }
}

#[test]
fn model_precedes_agrees_with_xid_precedes() {
    let probe = [
        0,
        1,
        2,
        3,
        4,
        10,
        1 << 31,
        (1 << 31) + 2,
        (1 << 31) + 3,
        u32::MAX - 1,
        u32::MAX,
    ];
    for &a in &probe {
        for &b in &probe {
            assert_eq!(model_precedes(a, b), crate::xid_precedes(a, b), "{a} {b}");
        }
    }
}
