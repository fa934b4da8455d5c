//! Timeline history files (`<TLI>.history`, see timeline.c
//! `readTimeLineHistory`): one line per ancestor, `parentTLI<TAB>X/X<TAB>reason`,
//! where `X/X` is the LSN at which the parent was left; `#` comments and
//! blank lines are allowed.

use bytes::Bytes;
use walshadow_pg_format::wal_files::{HistoryEntry, parse_history};
use walshadow_types::{Lsn, TimeLineId};

use super::error::{ReplicationError, Result};

/// One ancestor: WAL of `parent` is valid up to `switch_lsn`, after which
/// the next entry's timeline (or the file's own) continues.
pub type TimelineHistoryEntry = HistoryEntry;

/// `TIMELINE_HISTORY` result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineHistory {
    /// The timeline whose history this is.
    pub timeline: TimeLineId,
    pub filename: String,
    /// The file's bytes as the server sent them.
    pub content: Bytes,
    pub entries: Vec<TimelineHistoryEntry>,
}

impl TimelineHistory {
    /// Where `tli` ended in this history, if it is an ancestor.
    pub fn switch_point(&self, tli: TimeLineId) -> Option<Lsn> {
        self.entries
            .iter()
            .find(|e| e.parent == tli)
            .map(|e| e.switch_lsn)
    }
}

/// The history of timeline `tli` as the server sent it.
pub fn parse_timeline_history(
    tli: TimeLineId,
    content: &[u8],
) -> Result<Vec<TimelineHistoryEntry>> {
    parse_history(tli, content).map_err(|e| ReplicationError::protocol(e.to_string()))
}
