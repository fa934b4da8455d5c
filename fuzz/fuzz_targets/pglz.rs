//! `pglz_decompress` on arbitrary input: `[rawsize u32 LE][flags][src...]`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| walshadow_fuzz::run_pglz(data));
