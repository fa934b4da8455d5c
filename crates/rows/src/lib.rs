//! Row decoding: heap tuples (from WAL records or from pages) into typed values
//! for every built-in type, with inline compression and TOAST reassembly.

mod value;

pub use value::{ArrayValue, InetValue, Numeric, Value};
