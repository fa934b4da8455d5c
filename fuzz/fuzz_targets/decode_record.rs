//! Arbitrary record bytes with `xl_tot_len` and `xl_crc` fixed up, so the
//! fuzzer gets past the CRC into fragment parsing and image restoration.
#![no_main]

use libfuzzer_sys::fuzz_target;
use walshadow_fuzz::{fix_up_record, run_decode_record};

fuzz_target!(|data: &[u8]| {
    let mut raw = data.to_vec();
    fix_up_record(&mut raw);
    run_decode_record(&raw);
});
