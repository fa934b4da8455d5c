//! Heap pages of a base backup (`HeapPage::parse` with and without
//! checksum verification) and their tuples: `TupleHeader::parse`,
//! `ToastChunk::from_tuple`, and `RowDecoder::decode` with the all-types
//! table's descriptor, on `[flags][block u32 LE][page]`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    walshadow_fuzz::run_heap_page(data);
});
