//! Why the gate cannot decide: the copied `pg_xact`/`pg_multixact` bytes
//! are damaged or do not reach back far enough.

/// What an operator can do when a multixact cannot be bounded (seed 000,
/// "Visibility gate"): emitting the tuple could resurrect a dead row,
/// dropping it could lose a live one.
pub(crate) const MULTIXACT_REMEDY: &str = "retry the pass (a fresh backup copies pg_multixact \
     again), VACUUM (FREEZE) the table so no tuple keeps an old multixact, or opt in with \
     initial_load = 'copy'";

/// What an operator can do when pg_xact does not answer for an xid.
pub(crate) const XACT_REMEDY: &str = "retry the pass (a fresh backup copies pg_xact again), \
     VACUUM (FREEZE) the table, or opt in with initial_load = 'copy'";

/// A tuple the gate could not decide, or SLRU bytes it cannot use. Every
/// variant aborts the pass: the gate never guesses.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("a tuple of {len} bytes is shorter than a heap tuple header (23 bytes)")]
    ShortTuple { len: usize },

    #[error("{dir}/{segno:04X}: segment number beyond the {segments} segments {dir} can have")]
    SegmentOutOfRange {
        dir: &'static str,
        segno: u64,
        segments: u32,
    },

    #[error("{dir}/{segno:04X} came twice in one backup")]
    DuplicateSegment { dir: &'static str, segno: u32 },

    #[error("{dir}/{segno:04X} is {len} bytes, more than the 32 pages of a segment")]
    SegmentTooLong {
        dir: &'static str,
        segno: u32,
        len: usize,
    },

    #[error(
        "the backup carried no {dir} file, so {what} cannot be looked up; the backup is not \
         of a PostgreSQL data directory, or the walk dropped it"
    )]
    NothingCopied { dir: &'static str, what: String },

    /// The SLRU was truncated past what a tuple still names: the tuple
    /// should have been frozen first, so the page or the copy is damaged.
    #[error(
        "{what} precedes the oldest {dir} page the backup carried (which starts at {oldest}): \
         it was truncated away, yet an unfrozen tuple names it; {remedy}"
    )]
    Truncated {
        dir: &'static str,
        what: String,
        oldest: u32,
        remedy: &'static str,
    },

    /// A page inside the copied range is missing: a damaged copy.
    #[error(
        "{what} lies in {dir} page {page}, which the backup did not carry although it carried \
         pages on both sides of it; {remedy}"
    )]
    Hole {
        dir: &'static str,
        what: String,
        page: u32,
        remedy: &'static str,
    },

    /// A page before what the backup is known to cover is missing: the
    /// walk lost a file, or the bound given was wrong.
    #[error(
        "{what} lies in {dir} page {page}, which the backup did not carry, although {dir} \
         reached {bound} before the backup started; a segment file was lost on the way; {remedy}"
    )]
    Lost {
        dir: &'static str,
        what: String,
        page: u32,
        bound: u32,
        remedy: &'static str,
    },

    /// Multixact bytes that contradict the tuple or PostgreSQL's layout.
    #[error("multixact {multi}: {reason}; {remedy}", remedy = MULTIXACT_REMEDY)]
    MultiXactGarbage { multi: u32, reason: String },
}

impl GateError {
    /// True when a fresh backup may not hit it again (a torn or damaged
    /// copy); false when the cluster itself must change first.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            GateError::Hole { .. } | GateError::Lost { .. } | GateError::MultiXactGarbage { .. }
        )
    }
}
