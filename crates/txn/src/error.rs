//! Errors of the transaction assembler.

use std::io;
use std::path::PathBuf;

use walshadow_types::{Lsn, Xid};

/// What went wrong while buffering, spilling or reading back a transaction.
///
/// Spill files are scratch: nothing in them outlives the process, and after a
/// restart decoding starts again from [`crate::Assembler::restart_lsn`]. So
/// an error reading one back loses no data for good; the pipeline restarts
/// from its last persisted restart LSN. [`TxnError::is_transient`] tells the
/// I/O failures worth a retry (disk full, I/O error) from the ones that are
/// not (damaged spill file, caller broke an ordering rule).
#[derive(Debug, thiserror::Error)]
pub enum TxnError {
    #[error("spill directory {}: {source}; check that it exists and is writable", path.display())]
    SpillDir { path: PathBuf, source: io::Error },

    #[error("writing spill file {}: {source}", path.display())]
    SpillWrite { path: PathBuf, source: io::Error },

    #[error("reading spill file {} at offset {offset}: {source}", path.display())]
    SpillRead {
        path: PathBuf,
        offset: u64,
        source: io::Error,
    },

    /// A spill file does not read back as written: a frame's CRC-32C does
    /// not match, a length runs past the end, the file was truncated, or an
    /// earlier failed write could not be cut off.
    #[error(
        "corrupt spill file {} at offset {offset}: {reason}; \
         the transaction cannot be produced, restart decoding from the restart LSN",
        path.display()
    )]
    CorruptSpill {
        path: PathBuf,
        offset: u64,
        reason: String,
    },

    #[error("xid {xid} is not a normal transaction id (it must be 3 or more)")]
    InvalidXid { xid: Xid },

    #[error(
        "change at {lsn} for xid {xid} comes before that transaction's previous change at {last}: \
         changes must be added in WAL order"
    )]
    LsnOutOfOrder { xid: Xid, lsn: Lsn, last: Lsn },

    #[error("change at {lsn} for xid {xid} is {len} bytes, more than a spill frame holds (4 GiB)")]
    PayloadTooLarge { xid: Xid, lsn: Lsn, len: usize },

    #[error("xid {xid} belongs to a prepared transaction: {what} is not allowed after PREPARE")]
    Prepared { xid: Xid, what: &'static str },

    #[error(
        "COMMIT PREPARED of xid {xid}: no such prepared transaction is buffered \
         (decoding must start at or before its PREPARE; see restart_lsn)"
    )]
    NotPrepared { xid: Xid },
}

impl TxnError {
    /// True for failures that may pass on retry (an I/O error, a full disk);
    /// false for damaged spill files and broken calling rules.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            TxnError::SpillDir { .. } | TxnError::SpillWrite { .. } | TxnError::SpillRead { .. }
        )
    }
}
