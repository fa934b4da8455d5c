//! Events into transactions: the assembler's part of each
//! [`Event`](crate::decode::Event), the step the stream and `decode-bench`
//! share.
//!
//! ```text
//!  Event ─▶ assemble ─▶ Assembler (changes per xid; abort, prepare, forget)
//!                │
//!                └─▶ Assembled::Commit (the transaction's changes, in order)
//!                    Assembled::Upkeep (what else the event asks of the caller)
//! ```

use walshadow_txn::{Assembler, CommittedTxn, TxnError};

use crate::decode::{CommitEvent, Event};

/// What an event leaves to the caller once the assembler has had it.
#[derive(Debug)]
pub enum Assembled {
    /// The assembler's alone.
    Done,
    /// A commit, with its changes in commit order; `None` for a
    /// `COMMIT PREPARED` of a transaction prepared before walshadow's start
    /// (its changes were never seen).
    Commit(CommitEvent, Option<CommittedTxn>),
    /// The assembler has had its part (an abort discarded its changes);
    /// the rest is the caller's: an abort, pruning, a relation file made.
    Upkeep(Event),
}

/// Hands `event` to the assembler.
pub fn assemble(asm: &mut Assembler, event: Event) -> Result<Assembled, TxnError> {
    match event {
        Event::Change { xid, seq, payload } => asm.add(xid, seq, &payload)?,
        Event::Assign { top, subxacts } => {
            for s in subxacts {
                asm.assign(top, s);
            }
        }
        Event::Prepare { xid, subxacts } => asm.prepare(xid, &subxacts),
        Event::RunningXacts { oldest_running } => asm.forget_older_than(oldest_running),
        Event::Commit(c) => {
            let txn = if c.prepared {
                match asm.commit_prepared(c.xid) {
                    Ok(t) => Some(t),
                    Err(TxnError::NotPrepared { .. }) => {
                        tracing::warn!(xid = c.xid, lsn = %c.lsn, "COMMIT PREPARED of a transaction prepared before walshadow's start: its changes are not streamed");
                        None
                    }
                    Err(e) => return Err(e),
                }
            } else {
                Some(asm.commit(c.xid, &c.subxacts)?)
            };
            return Ok(Assembled::Commit(c, txn));
        }
        Event::Abort {
            xid,
            ref subxacts,
            prepared,
        } => {
            if prepared {
                asm.abort_prepared(xid);
            } else {
                asm.abort(xid, subxacts);
            }
            return Ok(Assembled::Upkeep(event));
        }
        Event::Pruned { .. } | Event::FileCreated { .. } => return Ok(Assembled::Upkeep(event)),
    }
    Ok(Assembled::Done)
}
