//! Where the stream is, and the rule that holds the shadow's replay.
//!
//! ```text
//!  received ≥ decoded ≥ boundary.applied ──flush──▶ progress.applied ──write──▶ durable
//!                                                       │                          │
//!                            slot (restart) ◀── hold ───┘     replay ceiling ◀─────┘
//! ```
//!
//! The boundary is the last transaction boundary: everything before it is
//! decided, and a flush moves progress only there (never into a
//! transaction's changes). Progress, once written, holds the source's slot
//! at its restart position and lets the shadow replay up to
//! [`replay_ceiling`].

use std::collections::HashMap;

use tokio::sync::watch;
use walshadow_shadow::feeder::Feeder;
use walshadow_types::Lsn;

use crate::progress::Progress;

/// The shadow never replays past the larger of the last catalog-changing
/// commit the stream has processed and what is durable in ClickHouse:
/// rows re-decoded after a crash (from durable progress) then find the
/// catalog they were written under, and rows decoded now find the catalog
/// at their commit. Raising is all a caller can do; the ceiling never
/// falls.
/// `share`: this stream's holder of the ceiling, when several databases'
/// streams share the shadow ([`Feeder::share_ceiling`]).
pub(crate) fn raise_replay_ceiling(feeder: &Feeder, share: usize, catalog_lsn: Lsn, applied: Lsn) {
    feeder.raise_ceiling_for(share, catalog_lsn.max(applied));
}

/// The last transaction boundary.
#[derive(Debug, Clone, Copy)]
pub(super) struct Boundary {
    applied: Lsn,
    restart: Lsn,
    /// Commit time of the last transaction applied there (0: none yet).
    commit_time: i64,
}

/// See the module doc.
#[derive(Debug)]
pub(super) struct Positions {
    /// The end of the WAL received.
    pub received: Lsn,
    /// The end of the last record decoded.
    pub decoded: Lsn,
    boundary: Boundary,
    /// `applied` as last written to progress.json.
    pub durable_applied: Lsn,
    /// Commit time of the last transaction whose rows are applied.
    pub applied_commit_time: i64,
    /// The WAL position of the last change decoded for each table in scope
    /// and the config table (rows, TOAST chunks, truncates, pruning): a
    /// catalog change reaching only tables unchanged since
    /// `durable_applied` needs nothing made durable first.
    changed_at: HashMap<String, Lsn>,
    /// The slot's restart position, to the feed.
    hold: watch::Sender<Lsn>,
    /// This stream's holder of the shadow's replay ceiling.
    ceiling_share: usize,
}

impl Positions {
    /// Positions resumed from `progress`; the slot is held at its restart.
    pub fn new(progress: &Progress, hold: watch::Sender<Lsn>, ceiling_share: usize) -> Positions {
        let _ = hold.send(progress.restart);
        Positions {
            received: Lsn::INVALID,
            decoded: Lsn::INVALID,
            boundary: Boundary {
                applied: progress.applied,
                restart: progress.restart,
                commit_time: 0,
            },
            durable_applied: progress.applied,
            applied_commit_time: 0,
            changed_at: HashMap::new(),
            hold,
            ceiling_share,
        }
    }

    /// A record ending at `end` was decoded; `idle`: no transaction holds
    /// changes, so everything up to it is decided.
    pub fn decoded_to(&mut self, end: Lsn, idle: bool) {
        self.decoded = end;
        if idle {
            self.boundary.applied = self.boundary.applied.max(end);
            self.boundary.restart = self.boundary.restart.max(end);
        }
    }

    /// A commit ending at `end` was applied; decoding would restart at
    /// `restart`.
    pub fn committed(&mut self, end: Lsn, restart: Lsn, commit_time: i64) {
        self.boundary = Boundary {
            applied: end,
            restart,
            commit_time,
        };
    }

    /// A commit ending at `end` was already in ClickHouse: only the restart
    /// position moves.
    pub fn skipped(&mut self, end: Lsn, restart: Lsn) {
        self.boundary.applied = self.boundary.applied.max(end);
        self.boundary.restart = restart;
    }

    /// The last transaction boundary now: what a flush sealed now covers.
    pub fn boundary(&self) -> Boundary {
        self.boundary
    }

    /// Whether the last transaction boundary is past `progress`.
    pub fn boundary_past(&self, progress: &Progress) -> bool {
        self.boundary.applied > progress.applied || self.boundary.restart > progress.restart
    }

    /// Every batch sealed at `b` is in ClickHouse: progress moves to that
    /// boundary (never back). Whether it moved.
    pub fn flushed_to(&mut self, b: Boundary, progress: &mut Progress) -> bool {
        if b.applied <= progress.applied && b.restart <= progress.restart {
            return false;
        }
        progress.applied = progress.applied.max(b.applied);
        progress.restart = progress.restart.max(b.restart);
        if b.commit_time != 0 {
            self.applied_commit_time = b.commit_time;
        }
        true
    }

    /// `progress` is on disk: the slot follows its restart position and
    /// the shadow what ClickHouse holds.
    pub fn made_durable(&mut self, progress: &Progress, feeder: &Feeder, catalog_lsn: Lsn) {
        self.durable_applied = progress.applied;
        let _ = self.hold.send(progress.restart);
        raise_replay_ceiling(feeder, self.ceiling_share, catalog_lsn, progress.applied);
    }

    /// This stream's holder of the shadow's replay ceiling.
    pub fn ceiling_share(&self) -> usize {
        self.ceiling_share
    }

    /// A change of `key` was decoded at `lsn`.
    pub fn changed(&mut self, key: &str, lsn: Lsn) {
        match self.changed_at.get_mut(key) {
            Some(at) => *at = (*at).max(lsn),
            None => {
                self.changed_at.insert(key.to_owned(), lsn);
            }
        }
    }

    /// Whether one of `keys` has a change past durable progress.
    pub fn changed_since_durable<'a>(&self, mut keys: impl Iterator<Item = &'a String>) -> bool {
        keys.any(|k| {
            self.changed_at
                .get(k)
                .is_some_and(|at| *at > self.durable_applied)
        })
    }

    /// Whether any table has a change past durable progress.
    pub fn any_changed_since_durable(&self) -> bool {
        self.changed_at
            .values()
            .any(|at| *at > self.durable_applied)
    }
}
