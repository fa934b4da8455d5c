//! What the cli drills share beyond the test kit's stream harness
//! ([`walshadow_testkit::stream_harness`]): the `walshadow` binary this
//! crate builds (with the drills' failpoints compiled in), which every
//! harness is given, and the initial-load helpers in [`loads`].

// Each test file uses a subset.
#![allow(dead_code, unused_imports)]

pub use walshadow_testkit::daemon::tail;
pub use walshadow_testkit::oracle::{OracleColumn, col, same};
pub use walshadow_testkit::stream_harness::{StreamHarness, source_options};

pub mod loads;

pub const BIN: &str = env!("CARGO_BIN_EXE_walshadow");
