//! Transaction assembly: decoded changes buffered per transaction (with
//! subtransactions and two-phase commit) within a memory budget, spilled to
//! disk past it, and handed on in commit order, each transaction's changes
//! in LSN order.
//!
//! The assembler knows nothing of what a change is: the pipeline serializes
//! each decoded change into an opaque payload, so this crate depends on no
//! decoder. It plays the part of PostgreSQL's reorderbuffer.c, outside the
//! server.
//!
//! ```text
//!  add(xid, lsn, payload) ──▶ per-xid buffer ─── over budget: largest ──▶ spill file (per xid)
//!  assign(top, sub)             │ (in memory)       buffers spilled          │ (older part)
//!                               ▼                                            ▼
//!  commit(xid, subxacts) ──▶ CommittedTxn: k-way merge by LSN of every listed buffer's
//!  commit_prepared(xid)      spilled part (read frame by frame) and in-memory part
//!                               │
//!                               ▼ (lsn, payload) in LSN order; spill files deleted
//! ```
//!
//! # Transactions
//!
//! Every xid that gets a change has a buffer, subtransactions included (a
//! subxact's changes carry the subxact's xid in WAL). `assign` ties a
//! subxact to its top-level transaction, from the top-level xid a record
//! carries or from XLOG_XACT_ASSIGNMENT. Then:
//!
//! - `commit(xid, subxacts)`: the transaction is `xid`'s buffer plus each
//!   listed subxact's (the commit record's list, `xl_xact_subxacts`).
//!   Subxacts assigned to `xid` but not listed did not commit (their own
//!   abort record was not seen) and are discarded.
//! - `abort(xid, subxacts)`: drops them; an abort record whose xid is a
//!   subxact is that subxact's rollback.
//! - `prepare`, `commit_prepared`, `abort_prepared`: two-phase commit. A
//!   prepared transaction keeps its buffers (still spillable) under its
//!   xid, may wait indefinitely, and holds the restart LSN back.
//! - `forget_older_than(oldest_running_xid)` (XLOG_RUNNING_XACTS): drops
//!   unprepared transactions whose top-level xid precedes it with
//!   PostgreSQL's modulo-2^31 `TransactionIdPrecedes`; they ended in a
//!   source crash, since a commit or abort record is written before the
//!   transaction leaves the proc array the running-xacts snapshot reads
//!   (reorderbuffer.c `ReorderBufferAbortOld` does the same).
//! - `restart_lsn()`: the LSN of the first change of the oldest buffer
//!   still open or prepared, where decoding must start again after a crash
//!   (a caller whose transactions can start with records that yield no
//!   change adds nothing for them, so it must take its own earlier LSN
//!   into account). A committed transaction stops holding it back at
//!   `commit`: what the destination has durably taken is the caller's
//!   record to keep.
//!
//! A buffer's changes must be added in WAL order (equal LSNs allowed: one
//! record may yield several changes). Across buffers a committed
//! transaction is merged by LSN; at equal LSNs a buffer's spilled changes
//! come before its in-memory ones, so a record's changes split by a spill
//! keep their order.
//!
//! # Memory bound
//!
//! `memory_used()` charges each buffered change its payload length plus
//! [`CHANGE_OVERHEAD`]. When an `add` would take it past the budget, the
//! largest in-memory buffers are spilled (their in-memory part appended to
//! their file and freed) until it is under 7/8 of the budget; a change that
//! still does not fit (bigger than the budget) goes straight to its
//! buffer's file. So buffered changes never take `memory_used()` past the
//! budget.
//!
//! A live [`CommittedTxn`] keeps the in-memory changes it took over charged
//! until it yields them (only a transaction that never spilled has any: a
//! spilled one's in-memory tail goes to its file at commit, so applying it
//! holds read buffers, not the budget), plus a [`READ_BUFFER_BYTES`] read buffer per open
//! spill file, at most [`MERGE_FAN_IN`] of them (more files are first merged
//! into fewer, in passes of [`MERGE_FAN_IN`], inside `commit`): so
//! `memory_used() <= budget + COMMITTED_READ_OVERHEAD` (256 KiB) per live
//! committed transaction. While that is above the budget, every `add`
//! spills.
//!
//! Not charged, and bounded independently of transaction size: a few
//! hundred bytes of bookkeeping per open xid; the 64 KiB write buffer of a spill or
//! merge pass, and a merge pass's read buffers, both freed before the call
//! returns; the merge heap (16 bytes per buffer of the transaction); and the
//! payload a `CommittedTxn` has just handed to the caller.
//!
//! # Spill file format
//!
//! One file per buffer, `walshadow-txn-<xid>-<seq>.spill` in the spill
//! directory, `seq` unique within a run; a merge pass writes files of the
//! same form under the top-level xid. Spill files are scratch: they are
//! never read after a restart (decoding restarts from `restart_lsn`), so
//! they are not fsynced, and `Assembler::open` deletes any it finds.
//!
//! ```text
//! file header (16 bytes)
//!   0  [u8; 8]  magic "WSTXNSP1" (format version 1)
//!   8  u32 LE   xid
//!  12  u32 LE   CRC-32C of bytes 0..12
//! frames, LSN non-decreasing, until the end of the file
//!   0  u32 LE   payload length L
//!   4  u64 LE   LSN
//!  12  [u8; L]  payload
//! 12+L u32 LE   CRC-32C of bytes 0..12+L (length, LSN and payload)
//! ```
//!
//! Files are appended to, never rewritten; a failed append is cut back to
//! the previous length. Reading back checks the file's length against what
//! was written, the header, each frame's length against the bytes left,
//! LSN order and CRC; any mismatch is [`TxnError::CorruptSpill`] naming the
//! file and the frame's offset.

mod assembler;
mod committed;
mod error;
mod memory;
mod spill;
mod xid;

#[cfg(test)]
mod tests;

pub use assembler::{Assembler, AssemblerConfig, CHANGE_OVERHEAD, OpenTxn};
pub use committed::{COMMITTED_READ_OVERHEAD, CommittedTxn, MERGE_FAN_IN, READ_BUFFER_BYTES};
pub use error::TxnError;
pub use xid::{FIRST_NORMAL_XID, INVALID_XID, xid_is_normal, xid_precedes};
