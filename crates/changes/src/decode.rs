//! WAL records to pipeline events: heap changes of the source database
//! become serialized [`crate::change::Change`]s for the transaction
//! assembler (encoded straight from the record's bytes); transaction
//! records become commit/abort/prepare events.
//!
//! Follows decode.c's choices (what logical decoding reads from each
//! record); everything else is skipped on purpose by the record parsers.

use walshadow_types::{Lsn, Oid, PgMajor, RelFileLocator, Xid};
use walshadow_wal_decode::{
    HeapChange, Inval, OldTuple, RecordView, RmgrId, Tid, TupleBytes, XactRecord, decode_heap,
    decode_prune, decode_running_xacts, decode_xact,
};

use crate::change::{ChangeKind, encode_change};

/// What the pipeline does with a record.
#[derive(Debug)]
pub enum Event {
    /// A row change by `xid` (a subtransaction's xid when in one). `seq`
    /// is the record's LSN plus the tuple's index in a multi-insert: unique
    /// per row, inside the record's own bytes. `payload` is the change
    /// serialized for the assembler ([`crate::change`]), encoded straight
    /// from the record.
    Change {
        xid: Xid,
        seq: Lsn,
        payload: Vec<u8>,
    },
    /// `top` is the top-level transaction of `subxacts`.
    Assign {
        top: Xid,
        subxacts: Vec<Xid>,
    },
    Commit(CommitEvent),
    /// `xid` (a top-level transaction or one subtransaction) and
    /// `subxacts` rolled back; `prepared`: `ROLLBACK PREPARED`.
    Abort {
        xid: Xid,
        subxacts: Vec<Xid>,
        prepared: bool,
    },
    /// `PREPARE TRANSACTION`: held until `COMMIT/ROLLBACK PREPARED`.
    Prepare {
        xid: Xid,
        subxacts: Vec<Xid>,
    },
    /// Transactions older than `oldest_running` that never ended (the
    /// source crashed) can be forgotten.
    RunningXacts {
        oldest_running: Xid,
    },
    /// Pruning or vacuuming (record at `lsn`, ending at `end`) left line
    /// pointers `offsets` of `rel`'s block `block` without a tuple: TOAST
    /// chunks there are gone.
    Pruned {
        rel: RelFileLocator,
        block: u32,
        offsets: Vec<u16>,
        lsn: Lsn,
        end: Lsn,
    },
    /// `xid` made relation file `rel` (its main fork): it holds nothing
    /// from before that transaction.
    FileCreated {
        xid: Xid,
        rel: RelFileLocator,
    },
}

/// A commit.
#[derive(Debug)]
pub struct CommitEvent {
    pub xid: Xid,
    pub subxacts: Vec<Xid>,
    /// `COMMIT PREPARED`.
    pub prepared: bool,
    pub lsn: Lsn,
    /// The aligned end of the commit record ([`aligned_end`]).
    pub end: Lsn,
    /// µs since 2000-01-01 UTC.
    pub commit_time: i64,
    /// Its invalidation messages concern this database's catalog.
    pub catalog_changed: bool,
    /// Those messages, when `catalog_changed` (see [`crate::catalog_reach`]).
    pub invals: Vec<Inval>,
}

/// A record that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error(transparent)]
    Heap(#[from] walshadow_wal_decode::HeapDecodeError),
    #[error(transparent)]
    Xact(#[from] walshadow_wal_decode::XactDecodeError),
    #[error(transparent)]
    Standby(#[from] walshadow_wal_decode::StandbyDecodeError),
}

/// Where the next record may start after one ending at `end`: PostgreSQL's
/// `EndRecPtr` (xlogreader.c, `RecPtr + MAXALIGN(total_len)`), the position
/// a standby reports as replayed and `pg_current_wal_lsn()` shows after a
/// commit.
pub fn aligned_end(end: Lsn) -> Lsn {
    Lsn(end.0.saturating_add(7) & !7)
}

/// Turns one record into events (pushed onto `out`), keeping only heap
/// changes of database `db_oid`.
///
/// Without `db_oid` (the shadow not reachable yet) every database's
/// changes are kept; the relation lookup sorts them out later.
pub fn record_events(
    rec: &RecordView<'_>,
    db_oid: Option<Oid>,
    major: PgMajor,
    out: &mut Vec<Event>,
) -> Result<(), DecodeError> {
    let xid = rec.xid();
    match rec.rmgr() {
        RmgrId::HEAP | RmgrId::HEAP2 => {
            if let Some(top) = rec.toplevel_xid
                && top != xid
            {
                out.push(Event::Assign {
                    top,
                    subxacts: vec![xid],
                });
            }
            let Some(change) = decode_heap(rec)? else {
                if let Some(p) = decode_prune(rec, major)?
                    && db_oid.is_none_or(|o| o == p.rel.db_oid)
                {
                    // A record whose page image replaced its lists says
                    // nothing here; the VACUUM pass that follows lists the
                    // same line pointers as unused.
                    let offsets: Vec<u16> = p.vacated().collect();
                    if !offsets.is_empty() {
                        out.push(Event::Pruned {
                            rel: p.rel,
                            block: p.block,
                            offsets,
                            lsn: rec.lsn,
                            end: aligned_end(rec.end),
                        });
                    }
                }
                return Ok(());
            };
            heap_events(xid, rec.lsn, change, db_oid, out);
        }
        RmgrId::XACT => match decode_xact(rec, major)? {
            None => {}
            Some(XactRecord::Commit(c)) => {
                let ours = |db: Oid| db_oid.is_none_or(|o| o == db) || db == 0;
                let catalog_changed = c.invals.iter().any(|i| match i {
                    Inval::Catcache { db, .. }
                    | Inval::Catalog { db, .. }
                    | Inval::Relcache { db, .. }
                    | Inval::Relmap { db }
                    | Inval::Snapshot { db, .. }
                    | Inval::RelSync { db, .. } => ours(*db),
                    Inval::Smgr { locator, .. } => ours(locator.db_oid),
                    Inval::Other(_) => true,
                });
                // Commits of a transaction that touched the catalog without
                // invalidation messages do not exist: every catalog change
                // registers one (inval.c CacheInvalidateHeapTuple).
                out.push(Event::Commit(CommitEvent {
                    xid: c.twophase_xid.unwrap_or(c.xid),
                    subxacts: c.subxacts,
                    prepared: c.twophase_xid.is_some(),
                    lsn: rec.lsn,
                    end: aligned_end(rec.end),
                    commit_time: c.commit_time,
                    catalog_changed,
                    invals: if catalog_changed {
                        c.invals
                    } else {
                        Vec::new()
                    },
                }));
            }
            Some(XactRecord::Abort(a)) => out.push(Event::Abort {
                xid: a.twophase_xid.unwrap_or(a.xid),
                subxacts: a.subxacts,
                prepared: a.twophase_xid.is_some(),
            }),
            Some(XactRecord::Prepare(p)) => out.push(Event::Prepare {
                xid: p.xid,
                subxacts: p.subxacts,
            }),
            Some(XactRecord::Assignment { top, subxacts }) => {
                out.push(Event::Assign { top, subxacts })
            }
            Some(XactRecord::Invalidations(_)) => {}
        },
        RmgrId::SMGR => {
            if let Some(rel) = walshadow_wal_decode::decode_smgr_create(rec)
                && db_oid.is_none_or(|o| o == rel.db_oid)
            {
                out.push(Event::FileCreated { xid, rel });
            }
        }
        RmgrId::STANDBY => {
            if let Some(r) = decode_running_xacts(rec)? {
                out.push(Event::RunningXacts {
                    oldest_running: r.oldest_running_xid,
                });
            }
        }
        _ => {}
    }
    Ok(())
}

fn heap_events(
    xid: Xid,
    lsn: Lsn,
    change: HeapChange<'_>,
    db_oid: Option<Oid>,
    out: &mut Vec<Event>,
) {
    let ours = |db: Oid| db_oid.is_none_or(|o| o == db);
    let mut index = 0u64;
    let mut push = |kind,
                    rel: RelFileLocator,
                    tid: Option<Tid>,
                    new: Option<&TupleBytes<'_>>,
                    old: Option<&OldTuple<'_>>,
                    truncated: &[Oid]| {
        if ours(rel.db_oid) {
            let mut payload = Vec::new();
            encode_change(kind, rel, tid, new, old, truncated, &mut payload);
            out.push(Event::Change {
                xid,
                seq: Lsn(lsn.0 + index),
                payload,
            });
        }
        index += 1;
    };
    match change {
        HeapChange::Insert {
            rel,
            tid,
            tuple,
            speculative,
            ..
        } => {
            // decode.c skips an insert without tuple data: nothing to emit.
            if let Some(t) = tuple {
                let kind = if speculative {
                    ChangeKind::SpecInsert
                } else {
                    ChangeKind::Insert
                };
                push(kind, rel, Some(tid), Some(&t), None, &[]);
            }
        }
        HeapChange::MultiInsert {
            rel,
            block,
            offsets,
            tuples,
            ..
        } => {
            for (t, &offset) in tuples.iter().zip(&offsets) {
                let tid = Tid { block, offset };
                push(ChangeKind::Insert, rel, Some(tid), Some(t), None, &[]);
            }
        }
        HeapChange::Update {
            rel,
            old,
            new,
            prefix_len,
            suffix_len,
            ..
        } => {
            // Prefix/suffix compression is never used for logically logged
            // relations (heapam.c log_heap_update): such an update is a
            // catalog's, and catalogs are not streamed.
            if let Some(t) = new
                && prefix_len == 0
                && suffix_len == 0
            {
                push(ChangeKind::Update, rel, None, Some(&t), old.as_ref(), &[]);
            }
        }
        HeapChange::Delete {
            rel,
            tid,
            old,
            super_delete,
            ..
        } => {
            let kind = if super_delete {
                ChangeKind::SpecAbort
            } else {
                ChangeKind::Delete
            };
            push(kind, rel, Some(tid), None, old.as_ref(), &[]);
        }
        HeapChange::Confirm { rel, .. } => {
            push(ChangeKind::SpecConfirm, rel, None, None, None, &[])
        }
        HeapChange::Truncate { db, relids, .. } => {
            let rel = RelFileLocator {
                spc_oid: 0,
                db_oid: db,
                rel_number: 0,
            };
            push(ChangeKind::Truncate, rel, None, None, None, &relids);
        }
    }
}
