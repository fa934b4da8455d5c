//! The files of a WAL archive: segment names (`XLogFileName`,
//! `XLogFromFileName` in `access/xlog_internal.h`), timeline history names
//! (`TLHistoryFileName`) and the history file's contents
//! (`readTimeLineHistory` in `access/transam/timeline.c`).

use walshadow_types::{Lsn, TimeLineId};

/// Segments per "xlogid" (the high 32 bits of an LSN) at `seg_size`; a zero
/// size counts as one byte, so no name is ever a division by zero.
fn segments_per_id(seg_size: u32) -> u64 {
    0x1_0000_0000u64 / u64::from(seg_size.max(1))
}

/// The first byte of the segment holding `lsn` (`XLByteToSeg` then
/// `XLogSegNoOffsetToRecPtr` at offset 0); a zero size counts as one byte.
pub fn segment_start(lsn: Lsn, seg_size: u32) -> Lsn {
    Lsn(lsn.0 - lsn.0 % u64::from(seg_size.max(1)))
}

/// The file name PostgreSQL gives segment `segno` of timeline `tli`:
/// `%08X%08X%08X` of the timeline, `segno / per-id` and `segno % per-id`.
pub fn segment_file_name(tli: TimeLineId, segno: u64, seg_size: u32) -> String {
    let per_id = segments_per_id(seg_size);
    format!("{tli:08X}{:08X}{:08X}", segno / per_id, segno % per_id)
}

/// Parses a segment file name (`000000010000000000000003`, optionally with
/// `.partial`) given the segment size: `(timeline, segno, partial)`.
pub fn parse_segment_name(name: &str, seg_size: u32) -> Option<(TimeLineId, u64, bool)> {
    let (stem, partial) = match name.strip_suffix(".partial") {
        Some(s) => (s, true),
        None => (name, false),
    };
    if stem.len() != 24 || !stem.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let tli = u32::from_str_radix(stem.get(0..8)?, 16).ok()?;
    let id = u64::from_str_radix(stem.get(8..16)?, 16).ok()?;
    let seg = u64::from_str_radix(stem.get(16..24)?, 16).ok()?;
    let per_id = segments_per_id(seg_size);
    if seg >= per_id {
        return None;
    }
    Some((tli, id.checked_mul(per_id)?.checked_add(seg)?, partial))
}

/// `TLHistoryFileName`: `0000000A.history` for timeline 10.
pub fn history_file_name(tli: TimeLineId) -> String {
    format!("{tli:08X}.history")
}

/// One line of a timeline history: WAL of `parent` is valid up to
/// `switch_lsn`, where the next line's timeline (or the file's own) goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    pub parent: TimeLineId,
    pub switch_lsn: Lsn,
    pub reason: String,
}

/// Why a timeline history file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("timeline history of timeline {tli}: {reason}")]
pub struct HistoryError {
    pub tli: TimeLineId,
    pub reason: String,
}

/// Parses `<tli>.history`, the history of timeline `tli`, as
/// `readTimeLineHistory` reads it: lines `parentTLI<TAB>X/X<TAB>reason`,
/// blank and `#` lines skipped. Parents must increase and stay below `tli`
/// (timeline.c's two checks), and switch points must not go back.
pub fn parse_history(tli: TimeLineId, content: &[u8]) -> Result<Vec<HistoryEntry>, HistoryError> {
    let bad = |reason: String| HistoryError { tli, reason };
    let text = std::str::from_utf8(content).map_err(|_| bad("not UTF-8".into()))?;
    let mut entries: Vec<HistoryEntry> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |why: &str| bad(format!("line {}: {why}: {line:?}", n + 1));
        // timeline.c reads `%u\t%X/%X` with sscanf, whose whitespace
        // matches any run of it; the reason after is free text.
        let (parent, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let (switch_lsn, reason) = rest
            .trim_start()
            .split_once(char::is_whitespace)
            .unwrap_or((rest.trim_start(), ""));
        let parent: TimeLineId = parent.parse().map_err(|_| at("bad timeline id"))?;
        let switch_lsn: Lsn = switch_lsn.parse().map_err(|_| at("bad switch point"))?;
        let reason = reason.trim().to_owned();
        if entries.last().is_some_and(|prev| parent <= prev.parent) {
            return Err(at("timeline IDs must be in increasing sequence"));
        }
        if parent >= tli {
            return Err(at("timeline IDs must be less than the child timeline's ID"));
        }
        if entries
            .last()
            .is_some_and(|prev| switch_lsn < prev.switch_lsn)
        {
            return Err(at("switch points must not decrease"));
        }
        entries.push(HistoryEntry {
            parent,
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
    fn segment_names_match_postgres() {
        assert_eq!(
            segment_file_name(1, 1, 16 << 20),
            "000000010000000000000001"
        );
        assert_eq!(
            segment_file_name(2, 0x100, 16 << 20),
            "000000020000000100000000"
        );
        assert_eq!(
            segment_file_name(1, 4096, 1 << 20),
            "000000010000000100000000"
        );
        let seg = 16 << 20;
        let name = segment_file_name(1, 0x103, seg);
        assert_eq!(parse_segment_name(&name, seg), Some((1, 0x103, false)));
        assert_eq!(
            parse_segment_name("000000020000000000000001.partial", seg),
            Some((2, 1, true))
        );
        assert_eq!(parse_segment_name("00000001000000000000000G", seg), None);
        assert_eq!(parse_segment_name("000000010000000000000100", seg), None);
        assert_eq!(
            parse_segment_name("000000010000000000000001", 0),
            Some((1, 1, false))
        );
        assert_eq!(history_file_name(10), "0000000A.history");
    }

    #[test]
    fn parses_history() {
        let e = parse_history(
            3,
            b"1\t0/3000158\tno recovery target specified\n\n# c\n2\t0/5000000\tat restore point \"x\"\n",
        )
        .unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].parent, 1);
        assert_eq!(e[0].switch_lsn, Lsn(0x3000158));
        assert_eq!(e[0].reason, "no recovery target specified");
        assert_eq!(e[1].switch_lsn, Lsn(0x5000000));
        assert_eq!(parse_history(1, b""), Ok(vec![]));
        // Runs of spaces and tabs, as sscanf's whitespace takes them; a
        // line without a reason.
        let e = parse_history(3, b"  1 \t  0/3000158   why  \n2\t0/5000000\n").unwrap();
        assert_eq!(
            e.iter()
                .map(|h| (h.parent, h.switch_lsn, h.reason.as_str()))
                .collect::<Vec<_>>(),
            [(1, Lsn(0x3000158), "why"), (2, Lsn(0x5000000), "")]
        );
    }

    #[test]
    fn refuses_what_timeline_c_refuses() {
        for (tli, bad) in [
            (3, &b"x\t0/1\tr"[..]),
            (3, b"1\tzz\tr"),
            (3, b"2\t0/5\tr\n1\t0/6\tr"),
            (3, b"1\t0/6\tr\n2\t0/5\tr"),
            (2, b"2\t0/5\tr"),
            (3, &[0xff]),
        ] {
            assert!(parse_history(tli, bad).is_err(), "{bad:?}");
        }
    }
}
