//! `walshadow run`'s log as the benches keep it (`WALSHADOW_LOG=info`,
//! stderr to a file, so no colours):
//!
//! ```text
//! 2026-11-29T15:51:00.123456Z  INFO walshadow_pipeline::backfills: initial load (copy) done table=public.items duration_ms=41012 rows=9483891
//! ```

use std::collections::BTreeMap;

/// The integer fields (`key=123`) of the last line holding `message`.
pub fn last_fields(text: &str, message: &str) -> Option<BTreeMap<String, u64>> {
    let line = text.lines().rev().find(|l| l.contains(message))?;
    Some(int_fields(line))
}

/// `key=digits` pairs of a line; a value that is not all digits (an LSN,
/// a quoted text) is left out.
pub fn int_fields(line: &str) -> BTreeMap<String, u64> {
    line.split_whitespace()
        .filter_map(|w| {
            let (k, v) = w.split_once('=')?;
            let ok = !k.is_empty()
                && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !v.is_empty()
                && v.bytes().all(|b| b.is_ascii_digit());
            Some((k.to_owned(), v.parse().ok()?)).filter(|_| ok)
        })
        .collect()
}

/// The `WARN` and `ERROR` lines.
pub fn warnings(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|level| level == "WARN" || level == "ERROR")
        })
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "2026-11-29T15:51:00.000001Z  INFO walshadow::run: streaming
2026-11-29T15:51:01.000001Z  WARN walshadow_backfill::backup: initial load (base_backup) attempt failed: x=1
2026-11-29T15:51:09.000001Z  INFO walshadow_backfill::backup: initial load (base_backup) done tables=public.items: 10 rows published (0 copied back) attempts=1 duration_ms=8123 backup_start=0/5000028 bytes_streamed=2400000000
";

    #[test]
    fn reads_integer_fields_and_warnings() {
        let f = last_fields(LOG, "initial load (base_backup) done").unwrap();
        assert_eq!(f.get("duration_ms"), Some(&8123));
        assert_eq!(f.get("bytes_streamed"), Some(&2_400_000_000));
        assert_eq!(f.get("attempts"), Some(&1));
        assert!(!f.contains_key("backup_start"));
        assert!(last_fields(LOG, "initial load (copy) done").is_none());
        let w = warnings(LOG);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("attempt failed"));
    }
}
