//! Model-based property test: random operation sequences run against the
//! mirror and against an in-memory model of the crate doc's rules; fetches,
//! stats, relations and value ids must agree after every step. A crash step
//! drops the mirror (aborting its open transaction) and reopens the file,
//! and the model falls back to its state at the last commit.
//!
//! `PROPTEST_CASES` overrides the number of cases; failures are saved under
//! `proptest-regressions/` and printed shrunk.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use walshadow_types::Lsn;

use super::TestDir;
use crate::mirror::{ChunkKey, TidKey, TidRow};
use crate::op::PendingOp;
use crate::{ChunkMirror, MirrorStats, Tid};

const RELS: [u32; 2] = [1, 2];
const FILES: [u32; 2] = [10, 11];
const VALUES: std::ops::RangeInclusive<u32> = 1..=3;

/// `(chunk_seq, tid, data)` of a value read from the source.
type SourceChunk = (i32, Option<(u32, u16)>, Vec<u8>);

#[derive(Debug, Clone)]
enum Step {
    Insert {
        rel: u32,
        file: u32,
        tid: (u32, u16),
        value: u32,
        seq: i32,
        lsn: u64,
        data: Vec<u8>,
    },
    Delete {
        rel: u32,
        file: u32,
        tid: (u32, u16),
        at: u64,
        due: u64,
    },
    Sweep {
        rel: u32,
        before: u64,
        keep_file: Option<u32>,
        due: u64,
    },
    Source {
        rel: u32,
        value: u32,
        file: Option<u32>,
        chunks: Vec<SourceChunk>,
    },
    Commit {
        advance: u64,
    },
    Crash,
    DropRelation {
        rel: u32,
    },
    SetState {
        data: Vec<u8>,
    },
}

fn rel() -> impl Strategy<Value = u32> {
    prop::sample::select(RELS.to_vec())
}

fn file() -> impl Strategy<Value = u32> {
    prop::sample::select(FILES.to_vec())
}

/// Four tids per file, so inserts collide with and reuse each other's slots.
fn tid() -> impl Strategy<Value = (u32, u16)> {
    (0u32..2, 1u16..=2)
}

fn data() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..6)
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (rel(), file(), tid(), VALUES, 0i32..=2, 1u64..40, data()).prop_map(
            |(rel, file, tid, value, seq, lsn, data)| Step::Insert {
                rel, file, tid, value, seq, lsn, data
            }
        ),
        3 => (rel(), file(), tid(), 1u64..45, 1u64..60)
            .prop_map(|(rel, file, tid, at, due)| Step::Delete { rel, file, tid, at, due }),
        1 => (rel(), 1u64..45, prop::option::of(file()), 1u64..60).prop_map(
            |(rel, before, keep_file, due)| Step::Sweep { rel, before, keep_file, due }
        ),
        1 => (
            rel(),
            VALUES,
            prop::option::of(file()),
            prop::collection::vec((0i32..=2, prop::option::of(tid()), data()), 0..4),
        )
            .prop_map(|(rel, value, file, chunks)| Step::Source { rel, value, file, chunks }),
        2 => (0u64..20).prop_map(|advance| Step::Commit { advance }),
        1 => Just(Step::Crash),
        1 => rel().prop_map(|rel| Step::DropRelation { rel }),
        1 => data().prop_map(|data| Step::SetState { data }),
    ]
}

/// The rules of the crate doc, on plain maps.
#[derive(Debug, Clone, Default)]
struct Model {
    chunks: BTreeMap<ChunkKey, (u64, Vec<u8>)>,
    tids: BTreeMap<TidKey, TidRow>,
    pending: BTreeMap<(u64, u64), PendingOp>,
    next_pending: u64,
    source_values: u64,
    state: Option<Vec<u8>>,
}

impl Model {
    fn upsert_chunk(&mut self, key: ChunkKey, lsn: u64, data: &[u8]) {
        if self.chunks.get(&key).is_none_or(|(old, _)| *old <= lsn) {
            self.chunks.insert(key, (lsn, data.to_vec()));
        }
    }

    fn upsert_tid(&mut self, key: TidKey, row: TidRow) {
        if self.tids.get(&key).is_none_or(|old| old.2 <= row.2) {
            self.tids.insert(key, row);
        }
    }

    fn schedule(&mut self, due: u64, op: PendingOp) {
        self.pending.insert((due, self.next_pending), op);
        self.next_pending += 1;
    }

    fn delete(&mut self, key: TidKey, at: u64, due: u64) -> bool {
        match self.tids.get(&key) {
            Some(&(value_id, chunk_seq, lsn)) if lsn < at => {
                self.tids.remove(&key);
                self.schedule(
                    due,
                    PendingOp::Prune {
                        toast_relid: key.0,
                        value_id,
                        chunk_seq,
                        before: Lsn(at),
                    },
                );
                true
            }
            _ => false,
        }
    }

    fn commit(&mut self, applied: u64) {
        let due: Vec<(u64, u64)> = self
            .pending
            .range(..=(applied, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        for key in due {
            let Some(op) = self.pending.remove(&key) else {
                continue;
            };
            match op {
                PendingOp::Prune {
                    toast_relid,
                    value_id,
                    chunk_seq,
                    before,
                } => {
                    let key = (toast_relid, value_id, chunk_seq);
                    if self
                        .chunks
                        .get(&key)
                        .is_some_and(|(lsn, _)| *lsn < before.0)
                    {
                        self.chunks.remove(&key);
                    }
                }
                PendingOp::Sweep {
                    toast_relid,
                    before,
                    keep_file,
                } => {
                    self.chunks
                        .retain(|k, (lsn, _)| k.0 != toast_relid || *lsn >= before.0);
                    self.tids.retain(|k, row| {
                        k.0 != toast_relid || (keep_file == Some(k.1) && row.2 >= before.0)
                    });
                }
            }
        }
    }

    fn fetch(&self, rel: u32, value: u32) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let mut n = 0;
        for ((_, _, seq), (_, data)) in self
            .chunks
            .range((rel, value, i32::MIN)..=(rel, value, i32::MAX))
        {
            if *seq != n {
                return None;
            }
            out.extend_from_slice(data);
            n += 1;
        }
        (n > 0).then_some(out)
    }

    fn stats(&self) -> MirrorStats {
        let values: BTreeSet<(u32, u32)> = self.chunks.keys().map(|k| (k.0, k.1)).collect();
        MirrorStats {
            values: values.len() as u64,
            chunks: self.chunks.len() as u64,
            data_bytes: self.chunks.values().map(|(_, d)| d.len() as u64).sum(),
            pending: self.pending.len() as u64,
            source_values: self.source_values,
            ..MirrorStats::default()
        }
    }

    fn relations(&self) -> Vec<u32> {
        let rels: BTreeSet<u32> = self
            .chunks
            .keys()
            .map(|k| k.0)
            .chain(self.tids.keys().map(|k| k.0))
            .collect();
        rels.into_iter().collect()
    }

    fn value_ids(&self, rel: u32) -> BTreeSet<u32> {
        self.chunks
            .keys()
            .filter(|k| k.0 == rel)
            .map(|k| k.1)
            .collect()
    }
}

fn comparable(s: MirrorStats) -> MirrorStats {
    MirrorStats {
        file_bytes: 0,
        hits: 0,
        misses: 0,
        ..s
    }
}

fn check(m: &ChunkMirror, model: &Model) -> Result<(), TestCaseError> {
    for rel in RELS {
        for value in VALUES {
            prop_assert_eq!(
                m.fetch(rel, value).unwrap(),
                model.fetch(rel, value),
                "fetch ({}, {})",
                rel,
                value
            );
        }
        prop_assert_eq!(m.value_ids(rel).unwrap(), model.value_ids(rel));
    }
    prop_assert_eq!(comparable(m.stats()), model.stats());
    prop_assert_eq!(m.relations().unwrap(), model.relations());
    prop_assert_eq!(m.state("s").unwrap(), model.state.clone());
    Ok(())
}

fn run(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let dir = TestDir::new("model");
    let mut m = ChunkMirror::open(&dir.file(), 1).unwrap();
    let mut model = Model::default();
    let mut committed = Model::default();
    let mut applied = 0u64;
    for step in steps {
        match step {
            Step::Insert {
                rel,
                file,
                tid,
                value,
                seq,
                lsn,
                data,
            } => {
                let t = Tid {
                    block: tid.0,
                    offset: tid.1,
                };
                m.insert_chunk(rel, file, t, value, seq, Lsn(lsn), &data)
                    .unwrap();
                model.upsert_chunk((rel, value, seq), lsn, &data);
                model.upsert_tid((rel, file, tid.0, tid.1), (value, seq, lsn));
            }
            Step::Delete {
                rel,
                file,
                tid,
                at,
                due,
            } => {
                let t = Tid {
                    block: tid.0,
                    offset: tid.1,
                };
                let got = m.delete_tid(rel, file, t, Lsn(at), Lsn(due)).unwrap();
                let want = model.delete((rel, file, tid.0, tid.1), at, due);
                prop_assert_eq!(got, want, "delete_tid result");
            }
            Step::Sweep {
                rel,
                before,
                keep_file,
                due,
            } => {
                m.sweep(rel, Lsn(before), keep_file, Lsn(due)).unwrap();
                model.schedule(
                    due,
                    PendingOp::Sweep {
                        toast_relid: rel,
                        before: Lsn(before),
                        keep_file,
                    },
                );
            }
            Step::Source {
                rel,
                value,
                file,
                chunks,
            } => {
                let with_tids: Vec<(i32, Option<Tid>, Vec<u8>)> = chunks
                    .iter()
                    .map(|(seq, tid, data)| {
                        (
                            *seq,
                            tid.map(|(block, offset)| Tid { block, offset }),
                            data.clone(),
                        )
                    })
                    .collect();
                m.put_source_value(rel, value, file, &with_tids).unwrap();
                for (seq, tid, data) in &chunks {
                    model.upsert_chunk((rel, value, *seq), 0, data);
                    if let (Some(file), Some((block, offset))) = (file, tid) {
                        model.upsert_tid((rel, file, *block, *offset), (value, *seq, 0));
                    }
                }
                model.source_values += 1;
            }
            Step::Commit { advance } => {
                applied += advance;
                m.commit(Lsn(applied)).unwrap();
                model.commit(applied);
                committed = model.clone();
            }
            Step::Crash => {
                drop(m);
                let offline = ChunkMirror::stats_of(&dir.file()).unwrap();
                prop_assert_eq!(
                    comparable(offline),
                    committed.stats(),
                    "stats_of after crash"
                );
                m = ChunkMirror::open(&dir.file(), 1).unwrap();
                model = committed.clone();
            }
            Step::DropRelation { rel } => {
                m.drop_relation_now(rel).unwrap();
                model.pending.retain(|_, op| op.toast_relid() != rel);
                model.chunks.retain(|k, _| k.0 != rel);
                model.tids.retain(|k, _| k.0 != rel);
            }
            Step::SetState { data } => {
                m.set_state("s", &data).unwrap();
                model.state = Some(data);
            }
        }
        check(&m, &model)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]

    #[test]
    fn mirror_matches_model(steps in prop::collection::vec(step(), 1..60)) {
        run(steps)?;
    }
}
