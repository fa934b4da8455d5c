//! The verdict on one tuple header: emit, drop, or defer until the walk
//! has copied everything. The rules follow `HeapTupleSatisfiesMVCC`
//! (src/backend/access/heap/heapam_visibility.c) with the copy standing in
//! for the snapshot; see the module docs of [`crate::visibility`].

use walshadow_types::Xid;

use super::error::{GateError, MULTIXACT_REMEDY, XACT_REMEDY};
use super::multixact::{Absent, MultiLookup, MultiXacts};
use super::slru::{Missing, Runs, Slru};
use super::tuple::{
    HEAP_MOVED_IN, HEAP_MOVED_OFF, HEAP_XMAX_COMMITTED, HEAP_XMAX_INVALID, HEAP_XMAX_IS_MULTI,
    HEAP_XMIN_COMMITTED, HEAP_XMIN_INVALID, TupleHeader, heap_xmax_is_locked_only,
};
use super::xact::{XactLog, XactStatus};

/// Why a tuple is not emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The inserting transaction aborted (or `t_xmin` is invalid).
    InserterAborted,
    /// The inserting transaction had not committed when the copy was made
    /// (running, crashed, or newer than the copy): if it commits after the
    /// opt-in, the live WAL stream delivers its rows.
    InserterNotCommitted,
    /// The deleting or updating transaction committed.
    DeleterCommitted,
    /// The updating member of the multixact in `t_xmax` committed.
    UpdaterCommitted,
    /// A pre-9.0 `VACUUM FULL` moved the tuple away (its copy lives on).
    MovedOff,
}

/// The gate's answer during the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    Emit,
    Drop(DropReason),
    /// The bytes copied so far cannot tell: keep the tuple in the
    /// [`super::DeferredSpool`] until the walk ends.
    Defer,
}

/// The gate's answer once the walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resolved {
    Emit,
    Drop(DropReason),
}

/// What the gate did, for the pass summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateCounters {
    /// Tuples decided during the walk ([`Gate::decide`] calls).
    pub walked: u64,
    /// Tuples emitted, during the walk or after it.
    pub emitted: u64,
    /// Tuples dropped as dead or never committed, during the walk or after.
    pub gated: u64,
    /// Tuples deferred during the walk.
    pub deferred: u64,
    /// Deferred tuples resolved to emit.
    pub deferred_emitted: u64,
    /// Deferred tuples resolved to drop.
    pub deferred_dropped: u64,
    /// Of the dropped, those whose inserter had not committed at copy time
    /// (the live stream delivers them if they commit).
    pub not_committed_dropped: u64,
    /// Tuples emitted because the multixact in `t_xmax` was recorded after
    /// the copy (its update, if any, comes with the live stream).
    pub multixact_emitted: u64,
}

/// Whether the copy is complete: during the walk a missing page may still
/// come; after it, missing pages are classified.
#[derive(Clone, Copy)]
enum Phase<'a> {
    Walk,
    Final(&'a FinalRuns),
}

/// The copied range of each SLRU, fixed when the walk ends.
#[derive(Debug, Clone, Copy)]
struct FinalRuns {
    xact: Runs,
    offsets: Runs,
    members: Runs,
}

/// A transaction's outcome as the copy tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Committed,
    Aborted,
    /// Not committed when copied: running, crashed, sub-committed under a
    /// running parent, or newer than the copy (final phase only).
    NotCommitted,
    /// The walk has not copied enough yet (walk phase only).
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Emit { multixact_postdates: bool },
    Drop(DropReason),
    Undecided,
}

/// Tuple header in error messages.
fn which(h: &TupleHeader) -> String {
    format!(
        "tuple (xmin {}, xmax {}, infomask {:#06x})",
        h.xmin, h.xmax, h.infomask
    )
}

fn missing_error(
    slru: Slru,
    item: u32,
    page_missing: Missing,
    h: &TupleHeader,
    what: &str,
) -> Option<GateError> {
    let dir = slru.dir();
    let what = format!("{} {item} ({what} of {})", slru.item_name(), which(h));
    let remedy = if slru == Slru::Xact {
        XACT_REMEDY
    } else {
        MULTIXACT_REMEDY
    };
    match page_missing {
        Missing::Newer => None,
        Missing::Older { oldest_item } => Some(GateError::Truncated {
            dir,
            what,
            oldest: oldest_item,
            remedy,
        }),
        Missing::Hole => Some(GateError::Hole {
            dir,
            what,
            page: item / slru.items_per_page(),
            remedy,
        }),
        Missing::Lost { bound } => Some(GateError::Lost {
            dir,
            what,
            page: item / slru.items_per_page(),
            bound,
            remedy,
        }),
        Missing::NothingCopied => Some(GateError::NothingCopied { dir, what }),
    }
}

struct Lookup<'a> {
    xact: &'a XactLog,
    multi: &'a MultiXacts,
    phase: Phase<'a>,
}

impl Lookup<'_> {
    fn fate(&self, xid: Xid, h: &TupleHeader, role: &str) -> Result<Fate, GateError> {
        match (self.xact.status(xid), self.phase) {
            (Some(XactStatus::Committed), _) => Ok(Fate::Committed),
            (Some(XactStatus::Aborted), _) => Ok(Fate::Aborted),
            (Some(XactStatus::InProgress | XactStatus::SubCommitted), Phase::Walk)
            | (None, Phase::Walk) => Ok(Fate::Unknown),
            (Some(XactStatus::InProgress | XactStatus::SubCommitted), Phase::Final(_)) => {
                Ok(Fate::NotCommitted)
            }
            (None, Phase::Final(runs)) => {
                match missing_error(Slru::Xact, xid, runs.xact.classify(xid), h, role) {
                    // Newer than the copy: started after it was made.
                    None => Ok(Fate::NotCommitted),
                    Some(e) => Err(e),
                }
            }
        }
    }

    /// The inserter's side: `None` when it committed.
    fn inserter(&self, h: &TupleHeader) -> Result<Option<Outcome>, GateError> {
        let im = h.infomask;
        // HEAP_XMIN_FROZEN is both bits: committed.
        if im & HEAP_XMIN_COMMITTED != 0 {
            return Ok(None);
        }
        if im & HEAP_XMIN_INVALID != 0 {
            return Ok(Some(Outcome::Drop(DropReason::InserterAborted)));
        }
        // Pre-9.0 VACUUM FULL moves: t_xvac decides, as in
        // HeapTupleSatisfiesMVCC. No such VACUUM runs on 15+, so a not
        // committed one is an aborted one.
        if im & HEAP_MOVED_OFF != 0 {
            return Ok(match self.fate(h.xvac, h, "xvac")? {
                Fate::Committed => Some(Outcome::Drop(DropReason::MovedOff)),
                Fate::Aborted | Fate::NotCommitted => None,
                Fate::Unknown => Some(Outcome::Undecided),
            });
        }
        if im & HEAP_MOVED_IN != 0 {
            return Ok(match self.fate(h.xvac, h, "xvac")? {
                Fate::Committed => None,
                Fate::Aborted | Fate::NotCommitted => {
                    Some(Outcome::Drop(DropReason::InserterAborted))
                }
                Fate::Unknown => Some(Outcome::Undecided),
            });
        }
        Ok(match self.fate(h.xmin, h, "inserter")? {
            Fate::Committed => None,
            Fate::Aborted => Some(Outcome::Drop(DropReason::InserterAborted)),
            Fate::NotCommitted => Some(Outcome::Drop(DropReason::InserterNotCommitted)),
            Fate::Unknown => Some(Outcome::Undecided),
        })
    }

    /// The deleter's side, for a tuple whose inserter committed.
    fn deleter(&self, h: &TupleHeader) -> Result<Outcome, GateError> {
        let im = h.infomask;
        let live = Outcome::Emit {
            multixact_postdates: false,
        };
        if im & HEAP_XMAX_INVALID != 0 || heap_xmax_is_locked_only(im) {
            return Ok(live);
        }
        if im & HEAP_XMAX_IS_MULTI != 0 {
            // HEAP_XMAX_COMMITTED is never set for a multixact.
            let updater = match self.multi.updater(h.xmax)? {
                MultiLookup::Updater(m) => m.xid,
                MultiLookup::LockersOnly => {
                    return Err(GateError::MultiXactGarbage {
                        multi: h.xmax,
                        reason: format!(
                            "{} says it was updated, but every member only locks",
                            which(h)
                        ),
                    });
                }
                MultiLookup::NotRecorded => return Ok(self.multixact_postdates()),
                MultiLookup::Absent(a) => return self.multi_absent(a, h),
            };
            return Ok(match self.fate(updater, h, "updater")? {
                Fate::Committed => Outcome::Drop(DropReason::UpdaterCommitted),
                Fate::Aborted | Fate::NotCommitted => live,
                Fate::Unknown => Outcome::Undecided,
            });
        }
        if im & HEAP_XMAX_COMMITTED != 0 {
            return Ok(Outcome::Drop(DropReason::DeleterCommitted));
        }
        // An invalid xmax (0) reads as aborted.
        Ok(match self.fate(h.xmax, h, "deleter")? {
            Fate::Committed => Outcome::Drop(DropReason::DeleterCommitted),
            Fate::Aborted | Fate::NotCommitted => live,
            Fate::Unknown => Outcome::Undecided,
        })
    }

    /// Seed 000: bytes the backup never copied prove the multixact
    /// postdates the copy, so its update (if it commits) comes with the
    /// live stream and the old version is emitted.
    fn multixact_postdates(&self) -> Outcome {
        Outcome::Emit {
            multixact_postdates: true,
        }
    }

    fn multi_absent(&self, a: Absent, h: &TupleHeader) -> Result<Outcome, GateError> {
        let Phase::Final(runs) = self.phase else {
            return Ok(Outcome::Undecided);
        };
        let r = match a.slru {
            Slru::MultiXactMembers => runs.members,
            _ => runs.offsets,
        };
        let role = if a.slru == Slru::MultiXactMembers {
            format!("a member of multixact {}", h.xmax)
        } else {
            "xmax".to_owned()
        };
        match missing_error(a.slru, a.item, r.classify(a.item), h, &role) {
            None => Ok(self.multixact_postdates()),
            Some(e) => Err(e),
        }
    }

    fn evaluate(&self, h: &TupleHeader) -> Result<Outcome, GateError> {
        match self.inserter(h)? {
            None => self.deleter(h),
            Some(Outcome::Undecided) => {
                // A committed deleter kills the tuple whatever the inserter
                // did; anything else (errors included: an aborted inserter
                // makes the deleter moot) waits for the inserter.
                Ok(match self.deleter(h) {
                    Ok(Outcome::Drop(r)) => Outcome::Drop(r),
                    _ => Outcome::Undecided,
                })
            }
            Some(decided) => Ok(decided),
        }
    }
}

/// The gate during the walk: `pg_xact` and `pg_multixact` segments are
/// added as the backup reaches them, tuples are decided as their pages
/// arrive. [`Gate::finish_walk`] once the walk ended successfully.
#[derive(Debug, Clone)]
pub struct Gate {
    xact: XactLog,
    multi: MultiXacts,
    counters: GateCounters,
}

impl Gate {
    pub fn new(xact: XactLog, multi: MultiXacts) -> Gate {
        Gate {
            xact,
            multi,
            counters: GateCounters::default(),
        }
    }

    pub fn xact_mut(&mut self) -> &mut XactLog {
        &mut self.xact
    }

    pub fn multi_mut(&mut self) -> &mut MultiXacts {
        &mut self.multi
    }

    pub fn xact(&self) -> &XactLog {
        &self.xact
    }

    pub fn multi(&self) -> &MultiXacts {
        &self.multi
    }

    /// Adds a backup member if it is an SLRU segment the gate reads
    /// (`pg_xact/*`, `pg_multixact/offsets/*`, `pg_multixact/members/*`);
    /// `Ok(false)` for any other path.
    pub fn add_backup_file(
        &mut self,
        path: &str,
        bytes: impl Into<bytes::Bytes>,
    ) -> Result<bool, GateError> {
        match Slru::of_backup_path(path) {
            Some((Slru::Xact, name)) => self.xact.add_file(name, bytes),
            Some((Slru::MultiXactOffsets, name)) => self.multi.add_offsets_file(name, bytes),
            Some((Slru::MultiXactMembers, name)) => self.multi.add_members_file(name, bytes),
            None => Ok(false),
        }
    }

    /// Decides a walked tuple with what has been copied so far.
    pub fn decide(&mut self, h: &TupleHeader) -> Result<Verdict, GateError> {
        let lookup = Lookup {
            xact: &self.xact,
            multi: &self.multi,
            phase: Phase::Walk,
        };
        let outcome = lookup.evaluate(h)?;
        let c = &mut self.counters;
        c.walked += 1;
        Ok(match outcome {
            Outcome::Emit {
                multixact_postdates,
            } => {
                c.emitted += 1;
                c.multixact_emitted += u64::from(multixact_postdates);
                Verdict::Emit
            }
            Outcome::Drop(r) => {
                c.gated += 1;
                Verdict::Drop(r)
            }
            Outcome::Undecided => {
                c.deferred += 1;
                Verdict::Defer
            }
        })
    }

    pub fn counters(&self) -> GateCounters {
        self.counters
    }

    /// The walk ended successfully: the copy is complete, so pages still
    /// missing were never copied (or were truncated). Only now may deferred
    /// tuples resolve; a failed walk drops the gate and its spool instead.
    pub fn finish_walk(self) -> WalkedGate {
        let runs = FinalRuns {
            xact: self.xact.runs(),
            offsets: self.multi.offsets_runs(),
            members: self.multi.members_runs(),
        };
        WalkedGate {
            xact: self.xact,
            multi: self.multi,
            runs,
            counters: self.counters,
        }
    }
}

/// The gate after a successful walk: resolves deferred tuples.
#[derive(Debug, Clone)]
pub struct WalkedGate {
    xact: XactLog,
    multi: MultiXacts,
    runs: FinalRuns,
    counters: GateCounters,
}

impl WalkedGate {
    /// Resolves a tuple [`Gate::decide`] deferred. In progress at copy time
    /// is final now: an inserter that commits later is the live stream's,
    /// a deleter that commits later too.
    pub fn resolve(&mut self, h: &TupleHeader) -> Result<Resolved, GateError> {
        let lookup = Lookup {
            xact: &self.xact,
            multi: &self.multi,
            phase: Phase::Final(&self.runs),
        };
        let outcome = lookup.evaluate(h)?;
        let c = &mut self.counters;
        Ok(match outcome {
            Outcome::Emit {
                multixact_postdates,
            } => {
                c.emitted += 1;
                c.deferred_emitted += 1;
                c.multixact_emitted += u64::from(multixact_postdates);
                Resolved::Emit
            }
            Outcome::Drop(r) => {
                c.gated += 1;
                c.deferred_dropped += 1;
                if r == DropReason::InserterNotCommitted {
                    c.not_committed_dropped += 1;
                }
                Resolved::Drop(r)
            }
            // Final lookups always decide; keep the tuple out rather than
            // guess if that ever changes.
            Outcome::Undecided => {
                return Err(GateError::NothingCopied {
                    dir: Slru::Xact.dir(),
                    what: which(h),
                });
            }
        })
    }

    pub fn counters(&self) -> GateCounters {
        self.counters
    }

    pub fn xact(&self) -> &XactLog {
        &self.xact
    }

    pub fn multi(&self) -> &MultiXacts {
        &self.multi
    }
}
