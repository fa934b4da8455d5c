//! Crash drill: a child process (this test binary, re-run on one test) writes,
//! commits, writes more than the cache holds and aborts; the parent reopens.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

use walshadow_types::Lsn;

use super::TestDir;
use crate::{ChunkMirror, Tid};

const CHILD_ENV: &str = "WALSHADOW_TOAST_MIRROR_CRASH_CHILD";
const REL: u32 = 16_400;
const FILE: u32 = 16_401;
/// Values of 4 chunks of 2000 bytes; the uncommitted part (12 MB) is well
/// past the 4 MiB write buffer of an 8 MiB cache, so redb has written some
/// of it into the file before the abort.
const COMMITTED: u32 = 500;
const UNCOMMITTED: u32 = 1500;

fn chunk(value: u32, seq: i32) -> Vec<u8> {
    let fill = u8::try_from((value + u32::try_from(seq).unwrap()) % 251).unwrap();
    vec![fill; 2000]
}

fn insert_value(m: &mut ChunkMirror, value: u32, lsn: u64) {
    for seq in 0..4i32 {
        let tid = Tid {
            block: value,
            offset: u16::try_from(seq + 1).unwrap(),
        };
        m.insert_chunk(REL, FILE, tid, value, seq, Lsn(lsn), &chunk(value, seq))
            .unwrap();
    }
}

/// The child's half of `a_killed_process_keeps_only_committed_state`; does
/// nothing unless that test started it.
#[test]
fn crash_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let mut m = ChunkMirror::open(Path::new(&path), 8).unwrap();
    for value in 0..COMMITTED {
        insert_value(&mut m, value, 10);
    }
    // Value 0 dies and is pruned in this commit; value 1's prune is not due.
    for offset in 1..=4 {
        let tid = Tid { block: 0, offset };
        assert!(m.delete_tid(REL, FILE, tid, Lsn(20), Lsn(20)).unwrap());
        let tid = Tid { block: 1, offset };
        assert!(m.delete_tid(REL, FILE, tid, Lsn(20), Lsn(500)).unwrap());
    }
    m.set_state("progress", b"committed").unwrap();
    m.commit(Lsn(20)).unwrap();

    for value in COMMITTED..COMMITTED + UNCOMMITTED {
        insert_value(&mut m, value, 30);
    }
    for offset in 1..=4 {
        let tid = Tid { block: 2, offset };
        assert!(m.delete_tid(REL, FILE, tid, Lsn(40), Lsn(40)).unwrap());
    }
    m.sweep(REL, Lsn(40), None, Lsn(40)).unwrap();
    m.set_state("progress", b"uncommitted").unwrap();
    std::process::abort();
}

#[test]
fn a_killed_process_keeps_only_committed_state() {
    let dir = TestDir::new("crash");
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "tests::crash::crash_child", "--test-threads=1"])
        .env(CHILD_ENV, dir.file())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.signal(), Some(6), "the child must abort: {status:?}");

    let mut m = ChunkMirror::open(&dir.file(), 8).unwrap();
    assert_eq!(
        m.state("progress").unwrap().as_deref(),
        Some(&b"committed"[..])
    );
    let s = m.stats();
    assert_eq!(
        (s.values, s.chunks, s.data_bytes, s.pending),
        (
            u64::from(COMMITTED - 1),
            u64::from(COMMITTED - 1) * 4,
            u64::from(COMMITTED - 1) * 8000,
            4
        )
    );
    assert_eq!(m.fetch(REL, 0).unwrap(), None);
    for value in 1..COMMITTED {
        let want: Vec<u8> = (0..4).flat_map(|seq| chunk(value, seq)).collect();
        assert_eq!(m.fetch(REL, value).unwrap(), Some(want), "value {value}");
    }
    for value in [COMMITTED, COMMITTED + UNCOMMITTED - 1] {
        assert_eq!(m.fetch(REL, value).unwrap(), None);
    }
    // The lost delete replays; the pending prune of value 1 still runs.
    let tid = Tid {
        block: 2,
        offset: 1,
    };
    assert!(m.delete_tid(REL, FILE, tid, Lsn(40), Lsn(40)).unwrap());
    m.commit(Lsn(500)).unwrap();
    assert_eq!(m.fetch(REL, 1).unwrap(), None);
    assert_eq!(m.fetch(REL, 2).unwrap(), None, "chunk 0 pruned");
    assert_eq!(m.stats().pending, 0);
}
