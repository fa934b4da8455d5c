//! The `base_backup` visibility gate: `pg_xact` and `pg_multixact`
//! segment bytes, the next-xid/next-multixact bounds, and tuple headers
//! decided during the walk and resolved after it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    walshadow_fuzz::run_visibility_gate(data);
});
