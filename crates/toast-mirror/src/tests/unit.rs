//! One test per rule of the crate doc.

use walshadow_types::Lsn;

use super::TestDir;
use crate::{ChunkMirror, MirrorError, MirrorStats, Tid};

const REL: u32 = 16_400;
const OTHER_REL: u32 = 16_500;
const FILE: u32 = 16_401;
const NEW_FILE: u32 = 16_999;

fn tid(block: u32, offset: u16) -> Tid {
    Tid { block, offset }
}

fn open(dir: &TestDir) -> ChunkMirror {
    ChunkMirror::open(&dir.file(), 8).unwrap()
}

/// Stats without the per-process and file-size fields.
fn counts(m: &ChunkMirror) -> (u64, u64, u64, u64, u64) {
    let s = m.stats();
    (s.values, s.chunks, s.data_bytes, s.pending, s.source_values)
}

#[test]
fn fetch_joins_chunks_in_order_and_misses_on_gaps() {
    let dir = TestDir::new("fetch");
    let mut m = open(&dir);
    // Inserted out of order: fetch orders by chunk_seq.
    m.insert_chunk(REL, FILE, tid(0, 3), 7, 2, Lsn(30), b"cc")
        .unwrap();
    m.insert_chunk(REL, FILE, tid(0, 1), 7, 0, Lsn(10), b"aaa")
        .unwrap();
    m.insert_chunk(REL, FILE, tid(0, 2), 7, 1, Lsn(20), b"bb")
        .unwrap();
    assert_eq!(m.fetch(REL, 7).unwrap().as_deref(), Some(&b"aaabbcc"[..]));
    assert_eq!(
        m.fetch_exact(REL, 7, 7).unwrap().as_deref(),
        Some(&b"aaabbcc"[..])
    );
    // A missing last chunk shows only against the pointer's size.
    assert_eq!(m.fetch_exact(REL, 7, 9).unwrap(), None);
    assert_eq!(m.fetch_exact(REL, 7, 5).unwrap(), None);

    // Gap in the middle, and no chunk 0.
    m.insert_chunk(REL, FILE, tid(1, 1), 8, 0, Lsn(40), b"x")
        .unwrap();
    m.insert_chunk(REL, FILE, tid(1, 2), 8, 2, Lsn(40), b"z")
        .unwrap();
    m.insert_chunk(REL, FILE, tid(1, 3), 9, 1, Lsn(40), b"y")
        .unwrap();
    assert_eq!(m.fetch(REL, 8).unwrap(), None);
    assert_eq!(m.fetch(REL, 9).unwrap(), None);
    // Unknown value, and the same value id in another relation.
    assert_eq!(m.fetch(REL, 10).unwrap(), None);
    assert_eq!(m.fetch(OTHER_REL, 7).unwrap(), None);
    // Filling the gap makes the value whole.
    m.insert_chunk(REL, FILE, tid(1, 4), 8, 1, Lsn(41), b"y")
        .unwrap();
    assert_eq!(m.fetch(REL, 8).unwrap().as_deref(), Some(&b"xyz"[..]));

    let s = m.stats();
    assert_eq!((s.hits, s.misses), (3, 6));
    assert_eq!((s.values, s.chunks, s.data_bytes), (3, 7, 7 + 3 + 1));
}

#[test]
fn delete_tid_schedules_and_runs_only_when_due() {
    let dir = TestDir::new("delete");
    let mut m = open(&dir);
    m.insert_chunk(REL, FILE, tid(0, 1), 7, 0, Lsn(10), b"aa")
        .unwrap();
    m.insert_chunk(REL, FILE, tid(0, 2), 7, 1, Lsn(10), b"bb")
        .unwrap();
    assert!(
        m.delete_tid(REL, FILE, tid(0, 1), Lsn(20), Lsn(30))
            .unwrap()
    );
    assert!(
        m.delete_tid(REL, FILE, tid(0, 2), Lsn(20), Lsn(30))
            .unwrap()
    );
    // The tid row is gone at once: a second delete is a replay.
    assert!(
        !m.delete_tid(REL, FILE, tid(0, 1), Lsn(25), Lsn(35))
            .unwrap()
    );
    assert_eq!(counts(&m), (1, 2, 4, 2, 0));
    // The chunks stay for replays until progress past `due` is durable.
    assert_eq!(m.fetch(REL, 7).unwrap().as_deref(), Some(&b"aabb"[..]));
    m.commit(Lsn(29)).unwrap();
    assert_eq!(m.fetch(REL, 7).unwrap().as_deref(), Some(&b"aabb"[..]));
    assert_eq!(counts(&m), (1, 2, 4, 2, 0));
    m.commit(Lsn(30)).unwrap();
    assert_eq!(m.fetch(REL, 7).unwrap(), None);
    assert_eq!(counts(&m), (0, 0, 0, 0, 0));
    // And so after a reopen.
    drop(m);
    let m = open(&dir);
    assert_eq!(m.fetch(REL, 7).unwrap(), None);
    assert_eq!(counts(&m), (0, 0, 0, 0, 0));
}

#[test]
fn prune_runs_in_due_order_across_commits() {
    let dir = TestDir::new("due-order");
    let mut m = open(&dir);
    for (value, due) in [(1, 50), (2, 40), (3, 60)] {
        let t = tid(value, 1);
        m.insert_chunk(REL, FILE, t, value, 0, Lsn(10), b"v")
            .unwrap();
        assert!(m.delete_tid(REL, FILE, t, Lsn(20), Lsn(due)).unwrap());
    }
    m.commit(Lsn(45)).unwrap();
    let left: Vec<u32> = m.value_ids(REL).unwrap().into_iter().collect();
    assert_eq!(left, vec![1, 3]);
    assert_eq!(m.stats().pending, 2);
    m.commit(Lsn(1000)).unwrap();
    assert!(m.value_ids(REL).unwrap().is_empty());
    assert_eq!(m.stats().pending, 0);
}

#[test]
fn replayed_older_insert_does_not_overwrite_newer_tid_or_chunk() {
    let dir = TestDir::new("replay");
    let mut m = open(&dir);
    let t = tid(3, 4);
    // The mirror is ahead: value 2 was put at this tid at LSN 50.
    m.insert_chunk(REL, FILE, t, 2, 0, Lsn(50), b"new").unwrap();
    // Replay of an older insert at the same tid, of value 1.
    m.insert_chunk(REL, FILE, t, 1, 0, Lsn(30), b"old").unwrap();
    // The tid still maps to value 2 at 50: a delete at 40 is older than it.
    assert!(!m.delete_tid(REL, FILE, t, Lsn(40), Lsn(40)).unwrap());
    assert_eq!(m.stats().pending, 0);
    // A later delete prunes value 2, not value 1.
    assert!(m.delete_tid(REL, FILE, t, Lsn(60), Lsn(60)).unwrap());
    m.commit(Lsn(60)).unwrap();
    assert_eq!(m.fetch(REL, 2).unwrap(), None);
    assert_eq!(m.fetch(REL, 1).unwrap().as_deref(), Some(&b"old"[..]));

    // A replayed older insert of the same chunk keeps the newer data.
    m.insert_chunk(REL, FILE, tid(9, 1), 5, 0, Lsn(80), b"eighty")
        .unwrap();
    m.insert_chunk(REL, FILE, tid(9, 1), 5, 0, Lsn(70), b"seventy")
        .unwrap();
    assert_eq!(m.fetch(REL, 5).unwrap().as_deref(), Some(&b"eighty"[..]));
    // The same record replayed at its own LSN is idempotent.
    m.insert_chunk(REL, FILE, tid(9, 1), 5, 0, Lsn(80), b"eighty")
        .unwrap();
    assert_eq!(counts(&m), (2, 2, 3 + 6, 0, 0));
}

#[test]
fn delete_at_or_before_the_insert_is_ignored() {
    let dir = TestDir::new("delete-old");
    let mut m = open(&dir);
    let t = tid(0, 1);
    m.insert_chunk(REL, FILE, t, 7, 0, Lsn(50), b"a").unwrap();
    assert!(!m.delete_tid(REL, FILE, t, Lsn(50), Lsn(50)).unwrap());
    assert!(!m.delete_tid(REL, FILE, t, Lsn(10), Lsn(10)).unwrap());
    // Nothing at that tid in another file, or at another tid.
    assert!(!m.delete_tid(REL, NEW_FILE, t, Lsn(90), Lsn(90)).unwrap());
    assert!(
        !m.delete_tid(REL, FILE, tid(0, 2), Lsn(90), Lsn(90))
            .unwrap()
    );
    m.commit(Lsn(u64::MAX)).unwrap();
    assert_eq!(m.fetch(REL, 7).unwrap().as_deref(), Some(&b"a"[..]));
    assert_eq!(counts(&m), (1, 1, 1, 0, 0));
}

#[test]
fn prune_spares_a_chunk_reinserted_after_the_delete() {
    let dir = TestDir::new("reuse");
    let mut m = open(&dir);
    m.insert_chunk(REL, FILE, tid(0, 1), 7, 0, Lsn(10), b"first")
        .unwrap();
    assert!(
        m.delete_tid(REL, FILE, tid(0, 1), Lsn(20), Lsn(100))
            .unwrap()
    );
    // Value id 7 reused before the prune is due.
    m.insert_chunk(REL, FILE, tid(5, 1), 7, 0, Lsn(30), b"second")
        .unwrap();
    m.commit(Lsn(100)).unwrap();
    assert_eq!(m.fetch(REL, 7).unwrap().as_deref(), Some(&b"second"[..]));
    assert_eq!(counts(&m), (1, 1, 6, 0, 0));
}

#[test]
fn sweep_keeps_the_new_file_and_later_chunks() {
    let dir = TestDir::new("sweep");
    let mut m = open(&dir);
    // Before the rewrite at 100: values 1 and 2 in the old file.
    m.insert_chunk(REL, FILE, tid(0, 1), 1, 0, Lsn(10), b"one")
        .unwrap();
    m.insert_chunk(REL, FILE, tid(0, 2), 2, 0, Lsn(20), b"two")
        .unwrap();
    m.insert_chunk(OTHER_REL, FILE, tid(0, 1), 1, 0, Lsn(10), b"other")
        .unwrap();
    m.sweep(REL, Lsn(100), Some(NEW_FILE), Lsn(200)).unwrap();
    // After it: value 2 re-inserted into the new file, value 3 new there, and
    // a stray later tid row in the old file.
    m.insert_chunk(REL, NEW_FILE, tid(0, 1), 2, 0, Lsn(120), b"TWO")
        .unwrap();
    m.insert_chunk(REL, NEW_FILE, tid(0, 2), 3, 0, Lsn(130), b"three")
        .unwrap();
    m.insert_chunk(REL, FILE, tid(7, 7), 4, 0, Lsn(140), b"four")
        .unwrap();
    assert_eq!(m.stats().pending, 1);
    m.commit(Lsn(199)).unwrap();
    assert_eq!(m.fetch(REL, 1).unwrap().as_deref(), Some(&b"one"[..]));
    m.commit(Lsn(200)).unwrap();
    assert_eq!(m.fetch(REL, 1).unwrap(), None);
    assert_eq!(m.fetch(REL, 2).unwrap().as_deref(), Some(&b"TWO"[..]));
    assert_eq!(m.fetch(REL, 3).unwrap().as_deref(), Some(&b"three"[..]));
    // Chunk kept (inserted after `before`), its old-file tid row gone.
    assert_eq!(m.fetch(REL, 4).unwrap().as_deref(), Some(&b"four"[..]));
    assert!(
        !m.delete_tid(REL, FILE, tid(0, 1), Lsn(300), Lsn(300))
            .unwrap()
    );
    assert!(
        !m.delete_tid(REL, FILE, tid(7, 7), Lsn(300), Lsn(300))
            .unwrap()
    );
    assert!(
        m.delete_tid(REL, NEW_FILE, tid(0, 2), Lsn(300), Lsn(300))
            .unwrap()
    );
    // The other relation is untouched.
    assert_eq!(
        m.fetch(OTHER_REL, 1).unwrap().as_deref(),
        Some(&b"other"[..])
    );
    assert!(
        m.delete_tid(OTHER_REL, FILE, tid(0, 1), Lsn(300), Lsn(300))
            .unwrap()
    );
    assert_eq!(counts(&m), (4, 4, 3 + 5 + 4 + 5, 2, 0));
}

#[test]
fn sweep_without_keep_file_removes_every_tid_row() {
    let dir = TestDir::new("sweep-all");
    let mut m = open(&dir);
    m.insert_chunk(REL, FILE, tid(0, 1), 1, 0, Lsn(10), b"one")
        .unwrap();
    m.insert_chunk(REL, FILE, tid(0, 2), 2, 0, Lsn(150), b"late")
        .unwrap();
    m.sweep(REL, Lsn(100), None, Lsn(100)).unwrap();
    m.commit(Lsn(100)).unwrap();
    assert_eq!(m.fetch(REL, 1).unwrap(), None);
    assert_eq!(m.fetch(REL, 2).unwrap().as_deref(), Some(&b"late"[..]));
    assert!(
        !m.delete_tid(REL, FILE, tid(0, 2), Lsn(300), Lsn(300))
            .unwrap()
    );
    assert_eq!(counts(&m), (1, 1, 4, 0, 0));
    assert_eq!(m.relations().unwrap(), vec![REL]);
}

#[test]
fn source_values_are_older_than_any_wal_change() {
    let dir = TestDir::new("source");
    let mut m = open(&dir);
    let chunks = vec![
        (1, Some(tid(0, 2)), b"bb".to_vec()),
        (0, Some(tid(0, 1)), b"aa".to_vec()),
    ];
    m.put_source_value(REL, 7, Some(FILE), &chunks).unwrap();
    m.put_source_value(REL, 8, None, &[(0, None, b"no tid".to_vec())])
        .unwrap();
    assert_eq!(m.fetch(REL, 7).unwrap().as_deref(), Some(&b"aabb"[..]));
    assert_eq!(m.fetch(REL, 8).unwrap().as_deref(), Some(&b"no tid"[..]));
    assert_eq!(counts(&m), (2, 3, 10, 0, 2));
    // Any WAL delete of its tids wins (insert_lsn 0 < at).
    assert!(m.delete_tid(REL, FILE, tid(0, 1), Lsn(1), Lsn(5)).unwrap());
    // A WAL insert of a chunk overrides the source's copy ...
    m.insert_chunk(REL, FILE, tid(0, 9), 8, 0, Lsn(40), b"wal")
        .unwrap();
    // ... and a later source read does not override the WAL's.
    m.put_source_value(REL, 8, Some(FILE), &[(0, Some(tid(0, 9)), b"src".to_vec())])
        .unwrap();
    assert_eq!(m.fetch(REL, 8).unwrap().as_deref(), Some(&b"wal"[..]));
    // Its tid row was not taken over either: the delete at 41 still applies.
    assert!(
        m.delete_tid(REL, FILE, tid(0, 9), Lsn(41), Lsn(41))
            .unwrap()
    );
    m.commit(Lsn(41)).unwrap();
    assert_eq!(m.fetch(REL, 8).unwrap(), None);
    assert_eq!(m.fetch(REL, 7).unwrap(), None, "chunk 0 pruned: a gap");
    assert_eq!(counts(&m), (1, 1, 2, 0, 3));
}

#[test]
fn state_blobs_commit_with_the_mirror() {
    let dir = TestDir::new("state");
    let mut m = open(&dir);
    assert_eq!(m.state("progress").unwrap(), None);
    m.set_state("progress", b"one").unwrap();
    m.set_state("ledger", b"").unwrap();
    assert_eq!(m.state("progress").unwrap().as_deref(), Some(&b"one"[..]));
    m.commit(Lsn(0)).unwrap();
    m.set_state("progress", b"two").unwrap();
    assert_eq!(m.state("progress").unwrap().as_deref(), Some(&b"two"[..]));
    drop(m);
    let m = open(&dir);
    assert_eq!(m.state("progress").unwrap().as_deref(), Some(&b"one"[..]));
    assert_eq!(m.state("ledger").unwrap().as_deref(), Some(&b""[..]));
}

#[test]
fn uncommitted_changes_vanish_on_reopen_and_committed_stay() {
    let dir = TestDir::new("abort");
    let mut m = open(&dir);
    m.insert_chunk(REL, FILE, tid(0, 1), 1, 0, Lsn(10), b"kept")
        .unwrap();
    m.insert_chunk(REL, FILE, tid(0, 2), 2, 0, Lsn(10), b"doomed")
        .unwrap();
    m.commit(Lsn(0)).unwrap();
    let committed = counts(&m);
    m.insert_chunk(REL, FILE, tid(0, 3), 3, 0, Lsn(20), b"lost")
        .unwrap();
    assert!(
        m.delete_tid(REL, FILE, tid(0, 1), Lsn(30), Lsn(30))
            .unwrap()
    );
    m.sweep(OTHER_REL, Lsn(30), None, Lsn(30)).unwrap();
    m.set_state("s", b"lost").unwrap();
    assert_eq!(m.fetch(REL, 3).unwrap().as_deref(), Some(&b"lost"[..]));
    drop(m);

    let mut m = open(&dir);
    assert_eq!(counts(&m), committed);
    assert_eq!(m.fetch(REL, 3).unwrap(), None);
    assert_eq!(m.state("s").unwrap(), None);
    // The delete of tid (0,1) never happened: replaying it works again.
    assert!(
        m.delete_tid(REL, FILE, tid(0, 1), Lsn(30), Lsn(30))
            .unwrap()
    );
    m.commit(Lsn(30)).unwrap();
    assert_eq!(m.fetch(REL, 1).unwrap(), None);
    assert_eq!(m.fetch(REL, 2).unwrap().as_deref(), Some(&b"doomed"[..]));
}

#[test]
fn stats_are_exact_after_reopen_and_readable_offline() {
    let dir = TestDir::new("stats");
    let mut m = open(&dir);
    for value in 0..50u32 {
        for seq in 0..3 {
            let t = tid(value, u16::try_from(seq + 1).unwrap());
            let data = vec![u8::try_from(value).unwrap(); 10 + usize::try_from(seq).unwrap()];
            m.insert_chunk(REL, FILE, t, value, seq, Lsn(10), &data)
                .unwrap();
        }
    }
    // Value 0 loses one chunk (stays as a value), value 1 loses all three.
    assert!(
        m.delete_tid(REL, FILE, tid(0, 1), Lsn(20), Lsn(20))
            .unwrap()
    );
    for seq in 1..=3 {
        assert!(
            m.delete_tid(REL, FILE, tid(1, seq), Lsn(20), Lsn(20))
                .unwrap()
        );
    }
    assert!(
        m.delete_tid(REL, FILE, tid(2, 1), Lsn(20), Lsn(999))
            .unwrap()
    );
    m.put_source_value(OTHER_REL, 1, None, &[(0, None, vec![1; 5])])
        .unwrap();
    m.commit(Lsn(20)).unwrap();
    let expect = MirrorStats {
        values: 49 + 1,
        chunks: 150 - 4 + 1,
        data_bytes: 50 * 33 - 10 - 33 + 5,
        pending: 1,
        source_values: 1,
        ..MirrorStats::default()
    };
    let got = m.stats();
    assert_eq!(
        MirrorStats {
            file_bytes: 0,
            hits: 0,
            misses: 0,
            ..got
        },
        expect
    );
    assert!(got.file_bytes > 0);

    // The writer holds the file.
    let busy = ChunkMirror::stats_of(&dir.file());
    assert!(matches!(busy, Err(MirrorError::InUse { .. })), "{busy:?}");
    drop(m);

    let offline = ChunkMirror::stats_of(&dir.file()).unwrap();
    assert_eq!(
        MirrorStats {
            file_bytes: 0,
            ..offline
        },
        expect
    );
    assert!(offline.file_bytes > 0);
    let m = open(&dir);
    let reopened = m.stats();
    assert_eq!(
        MirrorStats {
            file_bytes: 0,
            ..reopened
        },
        expect
    );
}

#[test]
fn stats_of_a_missing_file_names_it() {
    let dir = TestDir::new("missing");
    let err = ChunkMirror::stats_of(&dir.path().join("nope.redb")).unwrap_err();
    assert!(err.to_string().contains("nope.redb"), "{err}");
}

#[test]
fn drop_relation_now_removes_its_rows_and_pending_ops() {
    let dir = TestDir::new("drop-rel");
    let mut m = open(&dir);
    for rel in [REL, OTHER_REL] {
        m.insert_chunk(rel, FILE, tid(0, 1), 1, 0, Lsn(10), b"a")
            .unwrap();
        m.insert_chunk(rel, FILE, tid(0, 2), 1, 1, Lsn(10), b"b")
            .unwrap();
        m.insert_chunk(rel, FILE, tid(0, 3), 2, 0, Lsn(10), b"c")
            .unwrap();
        assert!(
            m.delete_tid(rel, FILE, tid(0, 3), Lsn(20), Lsn(500))
                .unwrap()
        );
        m.sweep(rel, Lsn(5), None, Lsn(600)).unwrap();
    }
    assert_eq!(counts(&m), (4, 6, 6, 4, 0));
    assert_eq!(m.relations().unwrap(), vec![REL, OTHER_REL]);
    m.drop_relation_now(REL).unwrap();
    assert_eq!(counts(&m), (2, 3, 3, 2, 0));
    assert_eq!(m.relations().unwrap(), vec![OTHER_REL]);
    assert_eq!(m.fetch(REL, 1).unwrap(), None);
    assert_eq!(m.fetch(OTHER_REL, 1).unwrap().as_deref(), Some(&b"ab"[..]));
    m.commit(Lsn(1000)).unwrap();
    assert_eq!(counts(&m), (1, 2, 2, 0, 0));
}

#[test]
fn relations_include_tid_only_relations_and_value_ids_are_exact() {
    let dir = TestDir::new("relations");
    let mut m = open(&dir);
    assert!(m.relations().unwrap().is_empty());
    m.insert_chunk(5, FILE, tid(0, 1), 10, 0, Lsn(10), b"a")
        .unwrap();
    m.insert_chunk(5, FILE, tid(0, 2), u32::MAX, 3, Lsn(10), b"a")
        .unwrap();
    m.insert_chunk(u32::MAX, FILE, tid(0, 1), 0, 0, Lsn(10), b"a")
        .unwrap();
    // Relation 6 keeps only a tid row: the chunk moved to tid (0,2) at 20,
    // then the delete of its first tid at 30 prunes it (inserted before 30).
    m.insert_chunk(6, FILE, tid(0, 1), 1, 0, Lsn(10), b"a")
        .unwrap();
    m.insert_chunk(6, FILE, tid(0, 2), 1, 0, Lsn(20), b"a")
        .unwrap();
    assert!(m.delete_tid(6, FILE, tid(0, 1), Lsn(30), Lsn(30)).unwrap());
    m.commit(Lsn(30)).unwrap();
    assert_eq!(m.fetch(6, 1).unwrap(), None);
    assert!(m.value_ids(6).unwrap().is_empty());
    assert_eq!(m.relations().unwrap(), vec![5, 6, u32::MAX]);
    m.sweep(6, Lsn(100), None, Lsn(100)).unwrap();
    m.commit(Lsn(100)).unwrap();
    assert_eq!(m.relations().unwrap(), vec![5, u32::MAX]);
    let ids: Vec<u32> = m.value_ids(5).unwrap().into_iter().collect();
    assert_eq!(ids, vec![10, u32::MAX]);
    assert!(m.value_ids(7).unwrap().is_empty());
}

#[test]
fn compaction_gives_back_the_space_of_deleted_chunks() {
    let dir = TestDir::new("compact");
    let mut m = open(&dir);
    let data = vec![0x5a; 2000];
    for value in 0..4000u32 {
        m.insert_chunk(REL, FILE, tid(value, 1), value, 0, Lsn(10), &data)
            .unwrap();
    }
    m.insert_chunk(OTHER_REL, FILE, tid(0, 1), 1, 0, Lsn(10), b"survivor")
        .unwrap();
    m.commit(Lsn(0)).unwrap();
    let full = m.stats().file_bytes;
    assert!(full > 8_000_000, "{full}");
    m.sweep(REL, Lsn(20), None, Lsn(20)).unwrap();
    let (before, after) = m.compact(Lsn(20)).unwrap();
    assert!(before >= full / 2, "{before} {full}");
    assert!(after < before / 4, "before {before} after {after}");
    assert_eq!(m.stats().file_bytes, after);
    assert_eq!(counts(&m), (1, 1, 8, 0, 0));
    assert_eq!(
        m.fetch(OTHER_REL, 1).unwrap().as_deref(),
        Some(&b"survivor"[..])
    );
    // Still writable and durable after compaction.
    m.insert_chunk(REL, FILE, tid(0, 1), 1, 0, Lsn(30), b"again")
        .unwrap();
    m.commit(Lsn(30)).unwrap();
    drop(m);
    let m = open(&dir);
    assert_eq!(m.fetch(REL, 1).unwrap().as_deref(), Some(&b"again"[..]));
}

#[test]
fn the_mirror_can_move_between_threads() {
    fn is_send<T: Send>() {}
    is_send::<ChunkMirror>();
    is_send::<MirrorError>();
}

#[test]
fn tid_chunks_pages_through_one_relation_in_tid_order() {
    let dir = TestDir::new("tid-chunks");
    let mut m = open(&dir);
    m.insert_chunk(REL, FILE, tid(2, 1), 7, 1, Lsn(0), b"bb")
        .unwrap();
    m.insert_chunk(REL, FILE, tid(0, 5), 7, 0, Lsn(0), b"a")
        .unwrap();
    m.insert_chunk(REL, NEW_FILE, tid(0, 1), 9, 0, Lsn(5), b"n")
        .unwrap();
    m.insert_chunk(OTHER_REL, FILE, tid(0, 1), 7, 0, Lsn(0), b"other")
        .unwrap();
    let first = m.tid_chunks(REL, None, 2).unwrap();
    let got: Vec<_> = first
        .iter()
        .map(|c| (c.file, c.tid, c.value_id, c.chunk_seq, c.data.clone()))
        .collect();
    assert_eq!(
        got,
        [
            (FILE, tid(0, 5), 7, 0, b"a".to_vec()),
            (FILE, tid(2, 1), 7, 1, b"bb".to_vec())
        ]
    );
    let last = first.last().map(|c| (c.file, c.tid));
    let rest = m.tid_chunks(REL, last, 2).unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!((rest[0].file, rest[0].insert_lsn), (NEW_FILE, Lsn(5)));
    let after = m.tid_chunks(REL, Some((NEW_FILE, tid(0, 1))), 2).unwrap();
    assert!(after.is_empty());
    // Copied into another mirror, the values read the same.
    let dir2 = TestDir::new("tid-chunks-copy");
    let mut m2 = open(&dir2);
    for c in first.iter().chain(&rest) {
        m2.insert_chunk(
            REL,
            c.file,
            c.tid,
            c.value_id,
            c.chunk_seq,
            c.insert_lsn,
            &c.data,
        )
        .unwrap();
    }
    assert_eq!(m2.fetch(REL, 7).unwrap().as_deref(), Some(&b"abb"[..]));
    assert_eq!(m2.fetch(OTHER_REL, 7).unwrap(), None);
}
