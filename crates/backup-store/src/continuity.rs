//! Whether an archive holds every WAL segment from a backup's start to
//! where the source is, along the source's branch of timelines. Pure: the
//! caller lists the archive and asks the source.

use std::collections::BTreeSet;

use walshadow_pg_format::wal_files::{HistoryEntry, parse_segment_name, segment_file_name};
use walshadow_types::{Lsn, TimeLineId};

/// The source's branch: its timeline now and the history that led there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Branch {
    pub timeline: TimeLineId,
    /// The current timeline's history file, oldest first (empty on 1).
    pub history: Vec<HistoryEntry>,
}

impl Branch {
    /// Timelines of the branch with where each begins and ends.
    fn spans(&self) -> Vec<(TimeLineId, Lsn, Option<Lsn>)> {
        let mut spans = Vec::new();
        let mut begin = Lsn(0);
        for e in &self.history {
            spans.push((e.parent, begin, Some(e.switch_lsn)));
            begin = e.switch_lsn;
        }
        spans.push((self.timeline, begin, None));
        spans
    }

    /// The timeline whose copy of segment `segno` recovery reads: the
    /// newest that begins before the segment's end (the segment holding a
    /// switch point is the new timeline's).
    pub fn timeline_of_segment(&self, segno: u64, seg_size: u32) -> TimeLineId {
        let end = segno.saturating_add(1).saturating_mul(u64::from(seg_size));
        self.spans()
            .iter()
            .rev()
            .find(|(_, begin, _)| begin.0 < end)
            .map_or(self.timeline, |(t, _, _)| *t)
    }

    /// Where the branch leaves `tli` and for which timeline: `None` when
    /// `tli` is the branch's last, or not on it.
    pub fn next_switch(&self, tli: TimeLineId) -> Option<(TimeLineId, Lsn)> {
        let spans = self.spans();
        let i = spans.iter().position(|(t, _, _)| *t == tli)?;
        spans.get(i + 1).map(|(t, begin, _)| (*t, *begin))
    }

    /// Why WAL of `tli` from `start` to `stop` is not on this branch, if it
    /// is not: the timeline is not an ancestor, or it had ended by then.
    pub fn off_branch(&self, tli: TimeLineId, start: Lsn, stop: Lsn) -> Option<String> {
        let spans = self.spans();
        let Some((_, begin, end)) = spans.iter().find(|(t, _, _)| *t == tli) else {
            return Some(format!(
                "timeline {tli} is not on the source's branch (timeline {} and its history: {})",
                self.timeline,
                spans
                    .iter()
                    .map(|(t, _, _)| t.to_string())
                    .collect::<Vec<_>>()
                    .join(" → ")
            ));
        };
        if start < *begin {
            return Some(format!("timeline {tli} begins at {begin}, after {start}"));
        }
        match end {
            Some(end) if stop > *end => Some(format!(
                "the source's branch left timeline {tli} at {end}, before {stop}"
            )),
            _ => None,
        }
    }
}

/// What the archive holds from a backup's first segment to the source.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Continuity {
    /// The segment holding the backup's start.
    pub first: String,
    /// The newest segment of the branch in the archive.
    pub last_archived: Option<String>,
    /// Segments of the branch missing before `last_archived` (the first
    /// hundred; `holes_count` counts them all).
    pub holes: Vec<String>,
    pub holes_count: u64,
    /// Complete segments of the source after `last_archived` (or from
    /// `first`) not archived yet: archiving lag, not a hole.
    pub not_yet_archived: u64,
}

impl Continuity {
    /// The archive holds every segment from the backup on.
    pub fn is_continuous(&self) -> bool {
        self.holes_count == 0 && self.last_archived.is_some()
    }
}

/// Checks the archived segment `names` from `start` (the backup's start)
/// to `source_at` (the source's current write position, whose segment is
/// not complete yet) along `branch`.
pub fn check(
    names: &BTreeSet<String>,
    start: Lsn,
    source_at: Lsn,
    branch: &Branch,
    seg_size: u32,
) -> Continuity {
    let size = u64::from(seg_size.max(1));
    let first_seg = start.0 / size;
    // Every segment before the one being written is complete.
    let last_complete = (source_at.0 / size).checked_sub(1);
    let name = |segno: u64| {
        segment_file_name(branch.timeline_of_segment(segno, seg_size), segno, seg_size)
    };
    // The newest archived segment on the branch, at or after the first and
    // not past the one being written (a stray name far ahead is not WAL of
    // this branch, and would make the walk below endless).
    let current = source_at.0 / size;
    let newest = names
        .iter()
        .filter_map(|n| parse_segment_name(n, seg_size))
        .filter(|&(tli, segno, partial)| {
            !partial
                && segno >= first_seg
                && segno <= current
                && branch.timeline_of_segment(segno, seg_size) == tli
        })
        .map(|(_, segno, _)| segno)
        .max();
    let mut holes = Vec::new();
    let mut holes_count = 0;
    if let Some(newest) = newest {
        for segno in first_seg..newest {
            let n = name(segno);
            if !names.contains(&n) {
                holes_count += 1;
                if holes.len() < 100 {
                    holes.push(n);
                }
            }
        }
    }
    let archived_upto = newest.map_or(first_seg, |n| n + 1);
    let not_yet_archived = last_complete.map_or(0, |last| (last + 1).saturating_sub(archived_upto));
    Continuity {
        first: name(first_seg),
        last_archived: newest.map(name),
        holes,
        holes_count,
        not_yet_archived,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEG: u32 = 16 << 20;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// Timeline 2, which began at `switch_lsn`.
    fn onto_two_at(switch_lsn: Lsn) -> Branch {
        Branch {
            timeline: 2,
            history: vec![HistoryEntry {
                parent: 1,
                switch_lsn,
                reason: String::new(),
            }],
        }
    }

    fn on_one() -> Branch {
        Branch {
            timeline: 1,
            history: vec![],
        }
    }

    #[test]
    fn the_next_switch_is_where_the_branch_leaves_a_timeline() {
        let branch = Branch {
            timeline: 3,
            history: vec![
                HistoryEntry {
                    parent: 1,
                    switch_lsn: Lsn(0x0300_0100),
                    reason: String::new(),
                },
                HistoryEntry {
                    parent: 2,
                    switch_lsn: Lsn(0x0500_0200),
                    reason: String::new(),
                },
            ],
        };
        assert_eq!(branch.next_switch(1), Some((2, Lsn(0x0300_0100))));
        assert_eq!(branch.next_switch(2), Some((3, Lsn(0x0500_0200))));
        assert_eq!(branch.next_switch(3), None);
        assert_eq!(branch.next_switch(4), None);
        assert_eq!(on_one().next_switch(1), None);
    }

    #[test]
    fn a_full_archive_is_continuous_and_lag_is_not_a_hole() {
        let archived = names(&[
            "000000010000000000000002",
            "000000010000000000000003",
            "000000010000000000000004",
        ]);
        let c = check(
            &archived,
            Lsn(0x0200_0028),
            Lsn(0x0700_0100),
            &on_one(),
            SEG,
        );
        assert!(c.is_continuous(), "{c:?}");
        assert_eq!(c.last_archived.as_deref(), Some("000000010000000000000004"));
        // 5 and 6 complete, not archived yet; 7 is being written.
        assert_eq!(c.not_yet_archived, 2);
    }

    #[test]
    fn a_missing_segment_is_a_hole() {
        let archived = names(&["000000010000000000000002", "000000010000000000000004"]);
        let c = check(
            &archived,
            Lsn(0x0200_0028),
            Lsn(0x0500_0000),
            &on_one(),
            SEG,
        );
        assert!(!c.is_continuous());
        assert_eq!(c.holes, ["000000010000000000000003"]);
    }

    #[test]
    fn a_name_past_the_source_is_not_on_the_branch() {
        let archived = names(&["000000010000000000000002", "00000001FFFFFFFF000000FF"]);
        let c = check(
            &archived,
            Lsn(0x0200_0028),
            Lsn(0x0500_0000),
            &on_one(),
            SEG,
        );
        assert!(c.is_continuous(), "{c:?}");
        assert_eq!(c.last_archived.as_deref(), Some("000000010000000000000002"));
        assert_eq!(c.not_yet_archived, 2);
    }

    #[test]
    fn a_switch_on_a_segment_boundary_leaves_the_old_segment_to_the_old_timeline() {
        let branch = onto_two_at(Lsn(0x0300_0000));
        assert_eq!(branch.timeline_of_segment(2, SEG), 1);
        assert_eq!(branch.timeline_of_segment(3, SEG), 2);
    }

    #[test]
    fn nothing_archived_is_not_continuous() {
        let c = check(
            &names(&[]),
            Lsn(0x0200_0028),
            Lsn(0x0500_0000),
            &on_one(),
            SEG,
        );
        assert!(!c.is_continuous());
        assert_eq!(c.not_yet_archived, 3);
    }

    #[test]
    fn segments_follow_the_branch_across_a_switch() {
        // Timeline 2 began in segment 3.
        let branch = onto_two_at(Lsn(0x0300_1000));
        assert_eq!(branch.timeline_of_segment(2, SEG), 1);
        assert_eq!(branch.timeline_of_segment(3, SEG), 2);
        let archived = names(&[
            "000000010000000000000002",
            "000000010000000000000003", // the old timeline's own: not on the branch
            "000000020000000000000003",
            "000000020000000000000004",
        ]);
        let c = check(&archived, Lsn(0x0200_0028), Lsn(0x0500_0000), &branch, SEG);
        assert!(c.is_continuous(), "{c:?}");
        let without = names(&[
            "000000010000000000000002",
            "000000010000000000000003",
            "000000020000000000000004",
        ]);
        let c = check(&without, Lsn(0x0200_0028), Lsn(0x0500_0000), &branch, SEG);
        assert_eq!(c.holes, ["000000020000000000000003"]);
        assert_eq!(
            branch.off_branch(1, Lsn(0x0200_0028), Lsn(0x0200_0100)),
            None
        );
        assert!(
            branch
                .off_branch(1, Lsn(0x0400_0028), Lsn(0x0400_0100))
                .is_some()
        );
        assert!(
            branch
                .off_branch(3, Lsn(0x0400_0028), Lsn(0x0400_0100))
                .is_some()
        );
    }
}
