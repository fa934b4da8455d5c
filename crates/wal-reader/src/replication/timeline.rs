//! Timeline history files (`<TLI>.history`, see timeline.c
//! `readTimeLineHistory`): one line per ancestor, `parentTLI<TAB>X/X<TAB>reason`,
//! where `X/X` is the LSN at which the parent was left; `#` comments and
//! blank lines are allowed.

use bytes::Bytes;
use walshadow_types::{Lsn, TimeLineId};

use super::error::{ReplicationError, Result};

/// One ancestor: WAL of `timeline` is valid up to `switch_lsn`, after which
/// the next entry's timeline (or the file's own) continues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineHistoryEntry {
    pub timeline: TimeLineId,
    pub switch_lsn: Lsn,
    pub reason: String,
}

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
            .find(|e| e.timeline == tli)
            .map(|e| e.switch_lsn)
    }
}

pub fn parse_timeline_history(content: &[u8]) -> Result<Vec<TimelineHistoryEntry>> {
    let text = std::str::from_utf8(content)
        .map_err(|_| ReplicationError::protocol("timeline history file is not UTF-8"))?;
    let mut entries: Vec<TimelineHistoryEntry> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| {
            ReplicationError::protocol(format!("timeline history line {}: {why}: {line:?}", n + 1))
        };
        let mut fields = line.splitn(3, ['\t', ' ']);
        let timeline: TimeLineId = fields
            .next()
            .and_then(|f| f.trim().parse().ok())
            .ok_or_else(|| bad("bad timeline id"))?;
        let switch_lsn: Lsn = fields
            .next()
            .and_then(|f| f.trim().parse().ok())
            .ok_or_else(|| bad("bad switch LSN"))?;
        let reason = fields.next().unwrap_or("").trim().to_owned();
        if entries
            .last()
            .is_some_and(|prev| timeline <= prev.timeline || switch_lsn < prev.switch_lsn)
        {
            return Err(bad("timeline ids and switch points must increase"));
        }
        entries.push(TimelineHistoryEntry {
            timeline,
            switch_lsn,
            reason,
        });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_history() {
        let e = parse_timeline_history(b"1\t0/3000158\tno recovery target specified\n\n# c\n2\t0/5000000\tat restore point \"x\"\n")
            .unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].timeline, 1);
        assert_eq!(e[0].switch_lsn, Lsn(0x3000158));
        assert_eq!(e[0].reason, "no recovery target specified");
        assert_eq!(e[1].switch_lsn, Lsn(0x5000000));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            &b"x\t0/1\tr"[..],
            b"1\tzz\tr",
            b"2\t0/5\tr\n1\t0/6\tr",
            &[0xff],
        ] {
            assert!(parse_timeline_history(bad).is_err());
        }
    }
}
