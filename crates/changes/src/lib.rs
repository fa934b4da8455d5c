//! Row changes from WAL records, pure (no I/O): the decode path the
//! stream and the `object_store` load's gap replay share.
//!
//! ```text
//!  RecordView ─▶ decode::record_events ─▶ Event::Change (change::Change, serialized)
//!                                         Event::Commit / Abort / Assign / …
//!      Event ─▶ assemble ─▶ Assembler ─▶ committed transaction, changes in order
//!     Change ─▶ rows::change_rows ─▶ the rows it writes (a key-changing update: two)
//! ```

pub mod assemble;
pub mod change;
pub mod decode;
pub mod rows;
