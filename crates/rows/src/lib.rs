//! Row decoding: heap tuples (from WAL records or from pages) into typed values
//! for every built-in type, with inline compression and TOAST reassembly.
//!
//! Empty until the streaming issue; the folder marks its place in the design.
