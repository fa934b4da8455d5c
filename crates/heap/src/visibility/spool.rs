//! Deferred tuples held until the walk ends: in memory up to a budget,
//! then in a spill file.
//!
//! The spool is one buffer of the transaction assembler
//! ([`walshadow_txn::Assembler`]), whose spill format (CRC-32C framed,
//! cut back on a failed append, deleted on drop) is exactly what a spool
//! needs: every deferred tuple is a change of one pseudo-transaction, its
//! LSN a running sequence number so frames read back in push order. Each
//! frame's payload is the header ([`TupleHeader`], 16 bytes) followed by
//! the caller's bytes (the tuple and whatever routes it).
//!
//! A failed walk resolves nothing: drop the spool (its files go with it).

use std::path::PathBuf;

use walshadow_txn::{Assembler, AssemblerConfig, FIRST_NORMAL_XID, TxnError};
use walshadow_types::Lsn;

use super::error::GateError;
use super::gate::{DropReason, Resolved, WalkedGate};
use super::tuple::{ENCODED_LEN, TupleHeader};

/// Where and how much to hold.
#[derive(Debug, Clone)]
pub struct SpoolConfig {
    /// Bytes of deferred tuples kept in memory (each charged its length
    /// plus [`walshadow_txn::CHANGE_OVERHEAD`]) before they spill.
    pub memory_budget_bytes: usize,
    /// A directory of the spool's own: opening removes the spill files an
    /// earlier run left there.
    pub spill_dir: PathBuf,
}

/// A deferred tuple handed back by [`DeferredSpool::resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeferredTuple {
    pub header: TupleHeader,
    /// The bytes given to [`DeferredSpool::push`].
    pub payload: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("deferred tuple spool: {0}")]
    Txn(#[from] TxnError),
    #[error("deferred tuple spool: frame {seq} is {len} bytes, shorter than a tuple header")]
    ShortFrame { seq: u64, len: usize },
}

impl SpoolError {
    pub fn is_transient(&self) -> bool {
        match self {
            SpoolError::Txn(e) => e.is_transient(),
            SpoolError::ShortFrame { .. } => false,
        }
    }
}

/// Why [`DeferredSpool::resolve`] stopped; `E` is the emit callback's.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError<E> {
    #[error(transparent)]
    Spool(#[from] SpoolError),
    #[error(transparent)]
    Gate(#[from] GateError),
    #[error("emitting a deferred tuple: {0}")]
    Emit(E),
}

/// What a resolve did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResolveSummary {
    pub emitted: u64,
    pub dropped: u64,
    /// Of the dropped, those whose inserter had not committed at copy time.
    pub not_committed: u64,
}

/// The pseudo-transaction every deferred tuple belongs to.
const SPOOL_XID: u32 = FIRST_NORMAL_XID;

/// Tuples [`super::Gate::decide`] deferred, held until the walk ends.
#[derive(Debug)]
pub struct DeferredSpool {
    asm: Assembler,
    len: u64,
}

impl DeferredSpool {
    pub fn open(config: SpoolConfig) -> Result<DeferredSpool, SpoolError> {
        let asm = Assembler::open(AssemblerConfig {
            memory_budget_bytes: config.memory_budget_bytes,
            spill_dir: config.spill_dir,
        })?;
        Ok(DeferredSpool { asm, len: 0 })
    }

    /// Holds a deferred tuple: its header and the caller's bytes.
    pub fn push(&mut self, header: &TupleHeader, payload: &[u8]) -> Result<(), SpoolError> {
        let mut frame = Vec::with_capacity(ENCODED_LEN + payload.len());
        frame.extend_from_slice(&header.encode());
        frame.extend_from_slice(payload);
        self.asm.add(SPOOL_XID, Lsn(self.len), &frame)?;
        self.len += 1;
        Ok(())
    }

    /// Tuples held.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held in memory now.
    pub fn memory_used(&self) -> usize {
        self.asm.memory_used()
    }

    /// Bytes written to spill files so far.
    pub fn spilled_bytes(&self) -> u64 {
        self.asm.spilled_bytes()
    }

    /// Resolves every held tuple against the completed copy, in push
    /// order, handing the emitted ones to `emit`. Dropped ones are counted
    /// (here and in the gate's counters). Stops at the first error.
    pub fn resolve<E>(
        mut self,
        gate: &mut WalkedGate,
        mut emit: impl FnMut(DeferredTuple) -> Result<(), E>,
    ) -> Result<ResolveSummary, ResolveError<E>> {
        let mut summary = ResolveSummary::default();
        let txn = self.asm.commit(SPOOL_XID, &[]).map_err(SpoolError::from)?;
        for (seq, item) in (0u64..).zip(txn) {
            let (_, mut frame) = item.map_err(SpoolError::from)?;
            let header = TupleHeader::decode(&frame).ok_or(SpoolError::ShortFrame {
                seq,
                len: frame.len(),
            })?;
            match gate.resolve(&header)? {
                Resolved::Emit => {
                    summary.emitted += 1;
                    let payload = frame.split_off(ENCODED_LEN);
                    emit(DeferredTuple { header, payload }).map_err(ResolveError::Emit)?;
                }
                Resolved::Drop(reason) => {
                    summary.dropped += 1;
                    if reason == DropReason::InserterNotCommitted {
                        summary.not_committed += 1;
                    }
                }
            }
        }
        Ok(summary)
    }
}
