//! The ClickHouse engine's log (`log` in scripts/clickhouse_engine.py): a
//! line per request, written once its reply is ready,
//!
//! ```text
//! 2026-11-29 14:07:06.123 clickhouse-engine: POST 200 12.3ms INSERT INTO `app`.`items` … (50000 rows written)
//! ```
//!
//! in local time; the duration counts from the request's start, so reading
//! its body and waiting for the engine's one-query-at-a-time lock are in it.

/// One request the engine answered 200 to a POST.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// When the line was written: µs since the epoch, as if the log's
    /// local time were UTC.
    pub logged_us: i64,
    pub ms: f64,
    /// The query, white space folded, cut at 200 characters, then
    /// ` (N rows written)` when it wrote rows.
    pub what: &'a str,
}

impl Request<'_> {
    /// The rows the request wrote (0 when the line says none).
    pub fn rows_written(&self) -> u64 {
        self.what
            .rsplit_once(" (")
            .and_then(|(_, r)| r.strip_suffix(" rows written)"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

/// The POST requests answered 200, in log order.
pub fn posts_ok(text: &str) -> impl Iterator<Item = Request<'_>> {
    text.lines().filter_map(|line| {
        let logged_us = log_stamp_us(line)?;
        let (_, rest) = line.split_once(" POST 200 ")?;
        let (ms, what) = rest.split_once("ms ")?;
        Some(Request {
            logged_us,
            ms: ms.parse().unwrap_or(0.0),
            what,
        })
    })
}

/// `YYYY-MM-DD HH:MM:SS.mmm` at the start of a log line, as µs since the
/// epoch if it were UTC.
pub fn log_stamp_us(line: &str) -> Option<i64> {
    let num = |a: usize, b: usize| line.get(a..b)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, mi, sec, ms) = (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?);
    // Days from civil (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (mo + if mo > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((((days * 24 + h) * 60 + mi) * 60 + sec) * 1_000_000 + ms * 1000)
}

/// Seconds in which at least one of the requests was in progress.
pub fn busy_secs<'a>(requests: impl IntoIterator<Item = &'a Request<'a>>) -> f64 {
    let mut spans: Vec<(i64, i64)> = requests
        .into_iter()
        .map(|r| (r.logged_us - (r.ms * 1e3) as i64, r.logged_us))
        .collect();
    spans.sort_unstable();
    let mut busy = 0;
    let mut open: Option<(i64, i64)> = None;
    for (a, b) in spans {
        open = match open {
            Some((s, e)) if a <= e => Some((s, e.max(b))),
            Some((s, e)) => {
                busy += e - s;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    if let Some((s, e)) = open {
        busy += e - s;
    }
    busy as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "2026-11-29 14:07:06.100 clickhouse-engine: ready on http://127.0.0.1:1 (ClickHouse 26.9)
2026-11-29 14:07:06.200 clickhouse-engine: POST 200 100.0ms INSERT INTO `app`.`items` FORMAT RowBinary (50000 rows written)
2026-11-29 14:07:06.250 clickhouse-engine: POST 200 100.0ms INSERT INTO `app`.`items` FORMAT RowBinary (40000 rows written)
2026-11-29 14:07:07.000 clickhouse-engine: GET 200 1.0ms SELECT 1
2026-11-29 14:07:08.000 clickhouse-engine: POST 200 500.0ms SELECT count() FROM app.items FINAL
";

    #[test]
    fn reads_posts_rows_and_busy_time() {
        let posts: Vec<Request> = posts_ok(LOG).collect();
        assert_eq!(posts.len(), 3);
        assert_eq!(posts[0].rows_written(), 50_000);
        assert_eq!(posts[2].rows_written(), 0);
        assert_eq!(posts[1].logged_us - posts[0].logged_us, 50_000);
        // 06.100–06.250 overlapping, then 07.500–08.000.
        assert!(
            (busy_secs(&posts) - 0.65).abs() < 1e-9,
            "{}",
            busy_secs(&posts)
        );
    }

    #[test]
    fn stamps_are_civil_time() {
        assert_eq!(log_stamp_us("1970-01-01 00:00:01.500 x"), Some(1_500_000));
        assert_eq!(
            log_stamp_us("2000-03-01 00:00:00.000"),
            Some(951_868_800_000_000)
        );
        assert_eq!(log_stamp_us("not a stamp"), None);
    }
}
