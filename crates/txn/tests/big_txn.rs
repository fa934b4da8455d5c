//! A transaction 64 times the memory budget (64 MiB of payload through a
//! 1 MiB budget) spills and streams back complete and in order, while the
//! assembler's charged memory stays within budget + the stated read
//! overhead and the process's resident high-water mark grows by far less
//! than the transaction. Alone in its test binary so that the process
//! figure is its own. Prints the numbers (`-- --nocapture`).

use std::time::Instant;

use walshadow_txn::{Assembler, AssemblerConfig, COMMITTED_READ_OVERHEAD};
use walshadow_types::{Lsn, Xid};

const BUDGET: usize = 1 << 20;
const TOTAL: usize = 64 << 20;

/// Deterministic payloads: sizes 64..8192, bytes from an xorshift stream
/// seeded by the change number, so the reader can regenerate and compare.
fn fill(n: u64, out: &mut Vec<u8>) {
    let mut x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let len = 64 + (next() % 8128) as usize;
    out.clear();
    while out.len() < len {
        out.extend_from_slice(&next().to_le_bytes());
    }
    out.truncate(len);
}

/// Peak resident set of this process (VmHWM), in bytes.
fn vm_hwm() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[test]
fn a_transaction_64_times_the_budget_spills_and_streams_back() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("txn-big");
    let _ = std::fs::remove_dir_all(&dir);
    let mut asm = Assembler::open(AssemblerConfig {
        memory_budget_bytes: BUDGET,
        spill_dir: dir.clone(),
    })
    .unwrap();
    let hwm_before = vm_hwm();

    // The top-level transaction and three subxacts in runs of changes, as
    // savepoints produce them; subxact 13 rolls back (not listed).
    let (top, subs): (Xid, [Xid; 3]) = (10, [11, 12, 13]);
    for s in subs {
        asm.assign(top, s);
    }
    let who = |n: u64| -> Xid {
        match (n / 100) % 5 {
            0 | 4 => top,
            k => subs[(k - 1) as usize],
        }
    };
    let start = Instant::now();
    let mut buf = Vec::new();
    let (mut n, mut bytes, mut max_spilled) = (0u64, 0usize, 0u64);
    while bytes < TOTAL {
        fill(n, &mut buf);
        asm.add(who(n), Lsn(0x1_0000_0000 + n * 16), &buf).unwrap();
        bytes += buf.len();
        n += 1;
        max_spilled = max_spilled.max(asm.spilled_bytes());
    }
    let add_secs = start.elapsed().as_secs_f64();
    assert!(
        max_spilled > (TOTAL as u64) / 2,
        "spilled only {max_spilled}"
    );
    assert_eq!(asm.restart_lsn(), Some(Lsn(0x1_0000_0000)));

    let start = Instant::now();
    let txn = asm.commit(top, &subs[..2]).unwrap();
    let mut want = Vec::new();
    let mut expect = (0..n).filter(|&i| who(i) != 13);
    let (mut got_changes, mut got_bytes) = (0u64, 0usize);
    for item in txn {
        let (lsn, payload) = item.unwrap();
        let i = expect.next().expect("more changes than were added");
        assert_eq!(lsn, Lsn(0x1_0000_0000 + i * 16), "change {i} out of order");
        fill(i, &mut want);
        assert!(payload == want, "change {i}: payload differs");
        got_changes += 1;
        got_bytes += payload.len();
    }
    assert_eq!(expect.next(), None, "changes missing");
    let read_secs = start.elapsed().as_secs_f64();

    let peak = asm.memory_peak();
    let hwm_after = vm_hwm();
    println!(
        "big transaction: {n} changes, {:.1} MiB added ({got_changes} changes / {:.1} MiB committed), \
         budget {} KiB, peak memory_used {} KiB (bound {} KiB), max spilled {:.1} MiB, \
         add {:.2} s, commit+stream {:.2} s",
        bytes as f64 / (1 << 20) as f64,
        got_bytes as f64 / (1 << 20) as f64,
        BUDGET >> 10,
        peak >> 10,
        (BUDGET + COMMITTED_READ_OVERHEAD) >> 10,
        max_spilled as f64 / (1 << 20) as f64,
        add_secs,
        read_secs,
    );
    assert!(peak <= BUDGET + COMMITTED_READ_OVERHEAD, "peak {peak}");
    assert!(peak > BUDGET / 2, "the budget was never used: peak {peak}");
    if let (Some(before), Some(after)) = (hwm_before, hwm_after) {
        let grew = after.saturating_sub(before);
        println!(
            "process VmHWM {} KiB -> {} KiB (+{} KiB)",
            before >> 10,
            after >> 10,
            grew >> 10
        );
        assert!(grew < 16 << 20, "resident memory grew by {grew} bytes");
    }
    assert_eq!(asm.memory_used(), 0);
    assert_eq!(asm.spilled_bytes(), 0);
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "spill files left"
    );
}
