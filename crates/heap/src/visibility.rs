//! The visibility gate of `initial_load = 'base_backup'` (seed 000,
//! "Visibility gate", "base_backup mode"): a page walk sees raw heap
//! pages, dead tuples included, so each walked tuple is emitted only if
//! its inserter committed and its deleter is absent, aborted, or only a
//! locker, as the backup's own `pg_xact` and `pg_multixact` tell.
//!
//! ```text
//!  walk sink ── pg_xact/*, pg_multixact/{offsets,members}/* ──▶ Gate::add_backup_file
//!           ── tuple header ──▶ Gate::decide ──┬─ Emit ──────────────▶ row decoder
//!                                               ├─ Drop(reason)        (counted)
//!                                               └─ Defer ─▶ DeferredSpool::push
//!  walk ends OK ─▶ Gate::finish_walk ─▶ WalkedGate
//!                  DeferredSpool::resolve(&mut WalkedGate) ─▶ emit / drop each
//!  walk fails  ─▶ drop Gate and spool: nothing resolves
//! ```
//!
//! # Rules (`HeapTupleSatisfiesMVCC`, heapam_visibility.c, the copy as the snapshot)
//!
//! Inserter: `HEAP_XMIN_COMMITTED` (or frozen) → committed;
//! `HEAP_XMIN_INVALID` → dropped; pre-9.0 `HEAP_MOVED_*` → `t_xvac`
//! decides; else `pg_xact` for `t_xmin` (bootstrap and frozen xids are
//! committed, 0 aborted). Deleter, once the inserter committed:
//! `HEAP_XMAX_INVALID` or `HEAP_XMAX_IS_LOCKED_ONLY()` → emitted; a
//! multixact → its updating member ([`MultiXacts::updater`]) through
//! `pg_xact`; `HEAP_XMAX_COMMITTED` → dropped; else `pg_xact` for
//! `t_xmax`. A committed deleter drops a tuple whatever its inserter did.
//!
//! # Defer, then resolve
//!
//! `pg_xact` status comes from the copied bytes only. During the walk an
//! xid whose page has not been copied yet, or that was in progress (or
//! sub-committed: its parent was still running; a backup has no
//! pg_subtrans to tell the parent) when its page was copied, defers the
//! tuple. Deferred tuples resolve only after the walk succeeded, because
//! only then is `pg_xact` complete: a partial one would read committed
//! deleters as running and emit dead tuples no rerun removes. At
//! resolution, in progress is final: an inserter that commits after the
//! opt-in `S` is redelivered by the live WAL stream (so the tuple drops,
//! counted as `not_committed_dropped`), and a deleter that commits later
//! is too (so the tuple emits, tagged `S`, and the delete outranks it).
//! Commits before `S` are durable in `pg_xact` before `BASE_BACKUP`
//! starts, so the gate never misses one.
//!
//! # Bytes the copy lacks
//!
//! After the walk a missing page is classified against the copied range
//! of its SLRU (one circular run of pages): past the newest copied page,
//! the id was assigned after the copy (xid: not committed; multixact:
//! emit the old version, counted as `multixact_emitted`, since the live
//! stream re-delivers its update: seed 000). Zeros where a multixact's
//! offset or members should be in a copied page mean the same. Before the
//! oldest copied page (truncated), inside the range (a hole), or bytes
//! that contradict the layout (bad member status, two updaters, a
//! non-lock-only multixact with no updater) abort the pass with a
//! [`GateError`] naming the remedies: emitting could resurrect a dead row,
//! skipping could lose a live one.
//!
//! "Past the newest copied page" cannot tell a page written after the
//! copy from a last segment the walk lost. Given the `nextXid`,
//! `nextMulti` and `nextMultiOffset` read from the source before
//! `BASE_BACKUP` ([`XactLog::set_next_xid`], [`MultiXacts::set_next`]),
//! a missing page below them is an error ([`GateError::Lost`]) instead:
//! their pages were created before the backup's checkpoint flushed them.
//!
//! # Layouts
//!
//! `pg_xact` and `pg_multixact` keep their 15 layout through 18: short
//! segment names (`%04X`; long `%015llX` names, which 17 introduced for
//! other SLRUs, are accepted too), 32-bit multixact offsets, 8 KiB pages,
//! little-endian. See [`slru`], [`xact`] and [`multixact`].

#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

mod error;
mod gate;
pub mod multixact;
pub mod slru;
mod spool;
mod tuple;
pub mod xact;

pub use error::GateError;
pub use gate::{DropReason, Gate, GateCounters, Resolved, Verdict, WalkedGate};
pub use multixact::{MultiLookup, MultiXactMember, MultiXactStatus, MultiXacts};
pub use slru::Slru;
pub use spool::{
    DeferredSpool, DeferredTuple, ResolveError, ResolveSummary, SpoolConfig, SpoolError,
};
pub use tuple::*;
pub use xact::{XactLog, XactPatch, XactStatus};

#[cfg(test)]
mod tests;
