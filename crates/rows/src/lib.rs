//! Row decoding: heap tuples (from WAL records or from pages) and binary
//! `COPY` rows into typed values, with inline compression and TOAST reassembly. Pure: bytes in,
//! values out, no I/O.
//!
//! ```text
//!  RelationDesc ──▶ RowDecoder::new ── refuses unsupported types (UnsupportedType)
//!                        │
//!  TupleRef ────────────▶ decode ──▶ Vec<Value>   one per live column, attnum order
//!  (xl_heap_header +     │   │
//!   data, or a page       │   └── TOAST pointers ──▶ dyn ToastSource (ToastChunks)
//!   item)                 │
//!                   heap_deform_tuple walk → varlena (short/4-byte, pglz/lz4)
//!                   → per-type decode (numeric, jsonb, arrays, inet, …)
//! ```
//!
//! - [`tuple`](TupleRef): the walk over attribute bytes, as heaptuple.c
//!   does it (null bitmap, alignment, short varlenas, dropped columns,
//!   attributes missing from old tuples).
//! - varlena: headers, inline compression, TOAST pointers (varatt.h).
//! - [`ToastChunks`]/[`ToastSource`]: out-of-line values.
//! - [`copy_binary`]: rows of a binary `COPY` into the same values, for
//!   `copy` loads.
//! - One module per type family for the stored form, the text output
//!   ([`Value::to_pg_text`]) and the parse of that text (for
//!   `attmissingval`).
//!
//! Values stay in PostgreSQL's units (see [`Value`]); [`Value::to_pg_text`]
//! reproduces the server's text output with default settings, which is
//! what columns without a native ClickHouse type carry.
//!
//! Nothing here panics on input bytes: every read is checked and hostile
//! sizes are bounded before allocation. Text columns must be valid UTF-8
//! (a database in another encoding is refused value by value).

#![forbid(unsafe_code)]
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

mod array;
mod bytes;
mod composite;
pub mod copy_binary;
mod datetime;
mod datum;
mod decoder;
mod error;
mod extension;
mod float;
mod geometric;
pub mod geometry;
mod hstore;
mod jsonb;
mod kind;
mod literal;
mod network;
mod numeric;
mod range;
mod render;
mod snapshot;
mod toast;
mod tsquery;
mod tsvector;
mod tuple;
mod value;
mod varlena;

pub use decoder::RowDecoder;
pub use error::{RowError, UnsupportedType};
pub use geometric::Geometric;
pub use kind::{ArrayKind, EnumLabels, Kind, RangeKind};
pub use toast::{NoToast, ToastChunk, ToastChunks, ToastSource};
pub use tuple::{HEAP_HASNULL, HEAP_NATTS_MASK, SIZEOF_HEAP_TUPLE_HEADER, TupleRef};
pub use value::{ArrayValue, InetValue, Numeric, Value};
pub use varlena::ToastPointer;
