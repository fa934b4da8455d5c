//! Arbitrary bytes as a WAL stream, fed whole and in arbitrary chunks:
//! never panics, and both feeds give the same records, images and errors.
#![no_main]

use libfuzzer_sys::fuzz_target;
use walshadow_fuzz::{StreamInput, run_wal_stream};

fuzz_target!(|data: &[u8]| {
    if let Some(input) = StreamInput::parse(data) {
        run_wal_stream(&input);
    }
});
