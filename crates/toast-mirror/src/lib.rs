//! The durable TOAST chunk mirror.
//!
//! An UPDATE that leaves a TOASTed column unchanged writes a heap tuple that
//! only points (`varatt_external`: TOAST relid, value id, sizes; see
//! varatt.h) at chunks written long ago, possibly before walshadow started.
//! The WAL of that UPDATE does not carry them. walshadow therefore keeps a
//! local copy of every TOAST chunk of the tables it replicates, fed from the
//! WAL (chunk inserts of committed transactions) and from the source (whole
//! values read at load time), and pruned when values die, so that such
//! pointers always resolve.
//!
//! ```text
//!  committed txns ──insert_chunk / delete_tid / sweep──▶ ChunkMirror ──fetch──▶ row decoder
//!  source reads ───put_source_value──────────────────▶   (redb file)
//!  pipeline ───────commit(durable_applied)────────────▶  runs due deletions, commits
//! ```
//!
//! # Why redb
//! redb is pure Rust (no C toolchain in a 2-core build), an embedded store of
//! copy-on-write B-trees with ACID transactions: a commit writes new pages and
//! then flips a checksummed root in the header, so a crash leaves either the
//! previous or the new commit, never a mix. Commits here use
//! `Durability::Immediate` and quick-repair (the allocator state is saved
//! with each commit, so reopening after a crash does not walk the file).
//! Freed pages are reused, and `Database::compact` gives space back to the
//! file system ([`ChunkMirror::compact`]). Dirty pages of a large open
//! transaction are bounded by half the cache size given to
//! [`ChunkMirror::open`] (redb writes the excess to the file before the
//! commit), so a transaction of any size needs no RAM proportional to its
//! data, only redb's per-page bookkeeping.
//!
//! # One open transaction
//! The mirror keeps one redb write transaction open between commits. Every
//! mutation goes into it and every read goes through it, so what the pipeline
//! staged is visible at once and only [`ChunkMirror::commit`] makes it
//! durable. A crash loses everything since the last commit, which is intended:
//! the pipeline replays from its own durable progress, which must never be
//! ahead of the mirror's last commit (the pipeline commits the mirror before
//! it records progress, or chunks inserted in between would be lost for good).
//! A failed mutation poisons the mirror ([`MirrorError::Poisoned`]): the open
//! transaction may hold half an operation, so it is never committed and the
//! mirror must be reopened.
//!
//! # Tables
//! ```text
//! chunks  (toast_relid u32, value_id u32, chunk_seq i32) → insert_lsn u64 LE ‖ chunk data
//! tids    (toast_relid u32, file u32, block u32, offset u16) → (value_id u32, chunk_seq i32, insert_lsn u64)
//! pending (due u64, counter u64) → encoded op (see `op.rs`): Prune | Sweep
//! state   name &str → opaque bytes of the pipeline, committed atomically with the chunks
//! meta    name &str → u64: format version and the exact counters of [`MirrorStats`]
//! ```
//! `file` is the relfilenumber of the TOAST relation's current file: a tid
//! means nothing across a rewrite. Chunk keys sort by `chunk_seq` inside a
//! value, so a fetch is one range scan of that value alone.
//!
//! # Rules
//! - **insert_lsn is monotonic.** A chunk row or tid row is replaced only by
//!   an insert at an equal or larger LSN. After a crash the pipeline replays
//!   from its durable progress over a mirror that may be ahead (it committed
//!   past that point); a replayed older insert must not overwrite a newer
//!   mapping of the same tid (the slot was freed and reused) or a newer chunk
//!   (a reused value id). Values read from the source are stored at LSN 0, so
//!   any WAL insert or delete wins over them. During such a replay a value id
//!   reused after the replay start resolves to its newer content; the row
//!   version that read it is superseded later in the same replay (the old
//!   value died with a later change of its row).
//! - **Deletes remove the tid row now and the chunk later.** A delete at `at`
//!   applies only to a tid row inserted before `at` (anything else is a replay
//!   of something already handled). The chunk removal is queued in `pending`
//!   with a `due` LSN and runs in the first commit whose `durable_applied` is
//!   at least `due`; it spares a chunk re-inserted at or after `at`.
//! - **Why deletions wait for durable progress.** The mirror commits before the
//!   pipeline records its progress. If the process dies between the two, the
//!   pipeline replays transactions the mirror already saw; a replayed UPDATE
//!   may still point at a value that a later transaction deleted. Had the
//!   chunks gone at the delete, the replay could not decode that row. So a
//!   deletion runs only once progress past it is durable: no replay can start
//!   before it any more.
//! - **Sweeps** (TRUNCATE, rewrite to a new relfilenumber, drop) remove every
//!   chunk of the relation inserted before `before` and every tid row outside
//!   `keep_file` or older than `before`, under the same due rule.
//! - **No partial values.** [`ChunkMirror::fetch`] returns a value only when
//!   chunks `0..n` are all present; a gap or a missing first chunk is a miss
//!   (`None`), never a value with a hole. The mirror does not know `n`;
//!   [`ChunkMirror::fetch_exact`] also checks the total size against the
//!   pointer's.
//! - **Counters are data.** `values`, `chunks`, `data_bytes`,
//!   `source_values` live in `meta`, written in the transaction whose changes
//!   they count, so they are exact after a restart or a crash without a scan.
//!
//! # Other processes
//! redb's default (exclusive-writer) mode locks the file, so
//! [`ChunkMirror::stats_of`] reads a mirror only while no walshadow holds it
//! (it answers [`MirrorError::InUse`] otherwise); the running daemon reports
//! [`ChunkMirror::stats`] itself. redb 4.5 added a single-writer mode in which
//! read-only opens follow a live writer; it is a week older than the redb
//! release in use and shipped with a list of fixes in 4.6, so the store that
//! replays depend on does not use it yet.

mod error;
mod mirror;
mod op;

pub use error::MirrorError;
pub use mirror::{ChunkMirror, MirrorStats, StoredChunk, Tid};

#[cfg(test)]
mod tests;
