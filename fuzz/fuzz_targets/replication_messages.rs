//! The replication client's pure parsers: a CopyData payload of the
//! walsender stream (XLogData, keepalive) and a timeline history file.
//! The first byte picks the parser.
#![no_main]

use libfuzzer_sys::fuzz_target;
use walshadow_wal_reader::replication::{fuzz_parse_server_copy, parse_timeline_history};

/// The timeline the fuzzed history file belongs to (its parents must stay below it).
const TLI: u32 = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    if which & 1 == 0 {
        let _ = fuzz_parse_server_copy(bytes::Bytes::copy_from_slice(rest));
    } else if let Ok(entries) = parse_timeline_history(TLI, rest) {
        assert!(entries.iter().all(|e| e.parent < TLI));
        for w in entries.windows(2) {
            assert!(w[0].parent < w[1].parent);
            assert!(w[0].switch_lsn <= w[1].switch_lsn);
        }
    }
});
