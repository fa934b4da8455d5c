//! Transaction assembly: decoded changes buffered per transaction (with
//! subtransactions and two-phase commit) within a memory budget, spilled to
//! disk past it, and handed on in commit-LSN order.
//!
//! Empty until the streaming issue; the folder marks its place in the design.
