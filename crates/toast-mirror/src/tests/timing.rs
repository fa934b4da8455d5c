//! A timing run, not a benchmark: prints, never asserts a duration.
//! `cargo test --release -p walshadow-toast-mirror -- --ignored --nocapture`

use std::time::Instant;

use walshadow_types::Lsn;

use super::TestDir;
use crate::{ChunkMirror, Tid};

/// 100k chunks in one transaction, one commit, then every value fetched.
/// 1996 bytes is `TOAST_MAX_CHUNK_SIZE` of 8 KiB blocks (two chunk rows fit
/// a 4 KiB redb leaf page); 2048 bytes shows what one byte too many costs.
#[test]
#[ignore = "timing run; see the module doc"]
fn insert_100k_chunks_then_commit() {
    const CHUNKS: u32 = 100_000;
    const PER_VALUE: u32 = 4;
    for size in [1996u32, 2048] {
        let dir = TestDir::new("timing");
        let mut m = ChunkMirror::open(&dir.file(), 64).unwrap();
        let data: Vec<u8> = (0..size).map(|i| u8::try_from(i % 253).unwrap()).collect();

        let start = Instant::now();
        for i in 0..CHUNKS {
            let tid = Tid {
                block: i / 4,
                offset: u16::try_from(i % 4 + 1).unwrap(),
            };
            let seq = i32::try_from(i % PER_VALUE).unwrap();
            m.insert_chunk(1, 2, tid, i / PER_VALUE, seq, Lsn(u64::from(i) + 1), &data)
                .unwrap();
        }
        let inserted = start.elapsed();
        m.commit(Lsn(0)).unwrap();
        let committed = start.elapsed();

        let start = Instant::now();
        let mut bytes = 0;
        for value in 0..CHUNKS / PER_VALUE {
            bytes += m.fetch(1, value).unwrap().unwrap().len();
        }
        let fetched = start.elapsed();
        let s = m.stats();
        println!(
            "{CHUNKS} chunks of {size} bytes: inserts {inserted:?}, with the commit {committed:?}; \
             fetch of {} values ({} MB) {fetched:?}; data {} MB, file {} MB; \
             cache 64 MiB, peak RSS {}",
            CHUNKS / PER_VALUE,
            bytes / 1_000_000,
            s.data_bytes / 1_000_000,
            s.file_bytes / 1_000_000,
            peak_rss()
        );
    }
}

/// The process's peak resident set (`VmHWM`), to see that a transaction far
/// larger than the cache does not live in memory.
fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:").map(|v| v.trim().to_string()))
        })
        .unwrap_or_else(|| "unknown".to_string())
}
