//! Backfills: the `initial_load` modes (`none`, `copy`, `base_backup`,
//! `object_store`), the ledger of passes, staging tables and the swap.
//!
//! Empty until the initial-load issues; the folder marks its place in the design.
