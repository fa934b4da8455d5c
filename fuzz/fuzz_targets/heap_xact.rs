//! The rmgr decoders (`decode_heap`, `decode_xact`,
//! `decode_running_xacts`, `decode_prune`) on `[major][record bytes]`, the
//! record fixed up (`xl_tot_len`, CRC) so the fuzzer gets past
//! `decode_record`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    walshadow_fuzz::run_heap_xact(data);
});
