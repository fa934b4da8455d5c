//! Spill files on disk: leftovers of a crashed run are removed (and logged)
//! at open; damaged files give an error naming the file and the offset.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use walshadow_txn::{Assembler, AssemblerConfig, TxnError};
use walshadow_types::Lsn;

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn open(dir: &Path, budget: usize) -> Assembler {
    Assembler::open(AssemblerConfig {
        memory_budget_bytes: budget,
        spill_dir: dir.to_path_buf(),
    })
    .unwrap()
}

fn spill_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "spill"))
        .collect();
    v.sort();
    v
}

/// Log lines written while `f` runs.
fn captured_log<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let log = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    (out, log)
}

#[test]
fn leftovers_of_a_crashed_run_are_removed_at_open() {
    let dir = scratch("txn-leftovers");
    let mut asm = open(&dir, 0);
    for (i, xid) in [100u32, 101, 102].into_iter().enumerate() {
        asm.add(xid, Lsn(10 + i as u64), b"change").unwrap();
    }
    let left = spill_files(&dir);
    assert_eq!(left.len(), 3);
    // A crash: nothing runs the assembler's cleanup.
    std::mem::forget(asm);
    std::fs::write(dir.join("operator-notes.txt"), b"keep me").unwrap();
    std::fs::write(dir.join("walshadow-txn-x.spill"), b"not ours").unwrap();

    let (asm, log) = captured_log(|| open(&dir, 1 << 20));
    for f in &left {
        assert!(!f.exists(), "{} survived", f.display());
        assert!(
            log.contains(&f.display().to_string()),
            "{} not logged:\n{log}",
            f.display()
        );
    }
    assert!(log.contains("files=3"), "{log}");
    assert!(dir.join("operator-notes.txt").exists());
    assert!(dir.join("walshadow-txn-x.spill").exists());
    assert_eq!(asm.spilled_bytes(), 0);
    assert_eq!(asm.restart_lsn(), None);
}

#[test]
fn a_clean_shutdown_leaves_no_spill_files() {
    let dir = scratch("txn-clean");
    let mut asm = open(&dir, 0);
    asm.add(7, Lsn(1), b"x").unwrap();
    assert_eq!(spill_files(&dir).len(), 1);
    drop(asm);
    assert!(spill_files(&dir).is_empty());
}

/// Spills three frames of xid 9 (payloads "first", "second", "third") and
/// returns the assembler and the file.
fn spilled_three(dir: &Path) -> (Assembler, PathBuf) {
    let mut asm = open(dir, 0);
    asm.add(9, Lsn(0x100), b"first").unwrap();
    asm.add(9, Lsn(0x200), b"second").unwrap();
    asm.add(9, Lsn(0x300), b"third").unwrap();
    let files = spill_files(dir);
    assert_eq!(files.len(), 1);
    (asm, files[0].clone())
}

// Layout (see the crate docs): 16-byte file header, then frames of
// 12 header bytes + payload + 4 CRC bytes.
const FIRST_FRAME: u64 = 16;
const SECOND_FRAME: u64 = FIRST_FRAME + 12 + 5 + 4;

fn corrupt_at(path: &Path, offset: u64, f: impl FnOnce(&mut u8)) {
    let mut bytes = std::fs::read(path).unwrap();
    f(&mut bytes[offset as usize]);
    std::fs::write(path, bytes).unwrap();
}

fn assert_names(err: &TxnError, path: &Path, offset: u64, what: &str) {
    let TxnError::CorruptSpill {
        path: p, offset: o, ..
    } = err
    else {
        panic!("expected CorruptSpill, got {err}");
    };
    assert_eq!(p, path);
    assert_eq!(*o, offset, "{err}");
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains(&format!("offset {offset}")), "{msg}");
    assert!(msg.contains(what), "{msg}");
    assert!(!err.is_transient());
}

#[test]
fn a_flipped_payload_byte_is_a_crc_error_at_its_frame() {
    let dir = scratch("txn-crc");
    let (mut asm, path) = spilled_three(&dir);
    corrupt_at(&path, SECOND_FRAME + 12 + 2, |b| *b ^= 0x40);
    let mut txn = asm.commit(9, &[]).unwrap();
    assert_eq!(
        txn.next().unwrap().unwrap(),
        (Lsn(0x100), b"first".to_vec())
    );
    let err = txn.next().unwrap().unwrap_err();
    assert_names(&err, &path, SECOND_FRAME, "CRC-32C mismatch");
    assert!(txn.next().is_none(), "no items after an error");
    drop(txn);
    assert!(!path.exists());
    assert_eq!(asm.memory_used(), 0);
    assert_eq!(asm.spilled_bytes(), 0);
}

#[test]
fn a_damaged_length_is_caught_before_reading_past_the_file() {
    let dir = scratch("txn-len");
    let (mut asm, path) = spilled_three(&dir);
    // High byte of the second frame's length: 5 GiB-ish claims.
    corrupt_at(&path, SECOND_FRAME + 3, |b| *b = 0x7f);
    let mut txn = asm.commit(9, &[]).unwrap();
    txn.next().unwrap().unwrap();
    let err = txn.next().unwrap().unwrap_err();
    assert_names(&err, &path, SECOND_FRAME, "runs past the end");
}

#[test]
fn a_damaged_lsn_fails_the_crc() {
    let dir = scratch("txn-lsn");
    let (mut asm, path) = spilled_three(&dir);
    corrupt_at(&path, FIRST_FRAME + 4, |b| *b ^= 0x01);
    let err = asm
        .commit(9, &[])
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap_err();
    assert_names(&err, &path, FIRST_FRAME, "CRC-32C mismatch");
}

#[test]
fn a_truncated_file_fails_at_commit() {
    let dir = scratch("txn-trunc");
    let (mut asm, path) = spilled_three(&dir);
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let err = asm.commit(9, &[]).unwrap_err();
    assert_names(&err, &path, len - 3, "were written");
    assert!(
        !path.exists(),
        "a failed commit removes the transaction's files"
    );
    assert_eq!(asm.spilled_bytes(), 0);
}

#[test]
fn a_damaged_file_header_fails_at_commit() {
    let dir = scratch("txn-header");
    let (mut asm, path) = spilled_three(&dir);
    corrupt_at(&path, 9, |b| *b ^= 0xff);
    let err = asm.commit(9, &[]).unwrap_err();
    assert_names(&err, &path, 0, "bad file header");
}

/// Opens a budget of 300 bytes and has xid 5 spill once (one frame on
/// disk, one change in memory); returns the file.
fn spilled_once(dir: &Path) -> (Assembler, PathBuf) {
    let mut asm = open(dir, 300);
    asm.add(5, Lsn(1), &[1; 100]).unwrap();
    asm.add(5, Lsn(2), &[2; 100]).unwrap();
    let files = spill_files(dir);
    assert_eq!(files.len(), 1);
    assert!(asm.memory_used() > 0);
    (asm, files[0].clone())
}

#[test]
fn a_committed_transaction_that_spilled_streams_from_disk_alone() {
    let dir = scratch("txn-tail");
    let (mut asm, _) = spilled_once(&dir);
    let txn = asm.commit(5, &[]).unwrap();
    assert_eq!(
        asm.memory_used(),
        walshadow_txn::READ_BUFFER_BYTES,
        "the in-memory tail went to the file; one read buffer is charged"
    );
    let changes: Vec<_> = txn.map(Result::unwrap).collect();
    assert_eq!(
        changes,
        vec![(Lsn(1), vec![1; 100]), (Lsn(2), vec![2; 100])],
        "both changes, in order"
    );
    assert_eq!(asm.memory_used(), 0);
    assert!(spill_files(&dir).is_empty());
}

#[test]
fn a_failed_spill_write_keeps_the_change_out_and_memory_as_it_was() {
    let dir = scratch("txn-enoent");
    let (mut asm, path) = spilled_once(&dir);
    std::fs::remove_file(&path).unwrap();
    let used = asm.memory_used();
    let err = asm.add(5, Lsn(3), &[3; 100]).unwrap_err();
    assert!(matches!(err, TxnError::SpillWrite { .. }), "{err}");
    assert!(err.is_transient());
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert_eq!(asm.memory_used(), used, "the in-memory part stays");
    assert_eq!(
        asm.open_transactions()[0].changes,
        2,
        "the failed change was not added"
    );
    // Its spilled part is gone: the commit says so, naming the file.
    let err = asm.commit(5, &[]).unwrap_err();
    assert!(matches!(err, TxnError::SpillRead { .. }), "{err}");
    assert_eq!(asm.memory_used(), 0);
}

#[test]
fn a_disk_full_spill_that_cannot_be_cut_back_marks_the_file_damaged() {
    if !Path::new("/dev/full").exists() {
        eprintln!("no /dev/full here; skipped");
        return;
    }
    let dir = scratch("txn-full");
    let (mut asm, path) = spilled_once(&dir);
    // Every write to the file now fails with ENOSPC, and it cannot be
    // truncated either.
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink("/dev/full", &path).unwrap();
    let err = asm.add(5, Lsn(3), &[3; 100]).unwrap_err();
    assert!(matches!(err, TxnError::SpillWrite { .. }), "{err}");
    let err = asm.commit(5, &[]).unwrap_err();
    assert!(matches!(err, TxnError::CorruptSpill { .. }), "{err}");
    assert!(err.to_string().contains("could not be cut off"), "{err}");
    assert!(!path.exists(), "the link is removed with the transaction");
}
