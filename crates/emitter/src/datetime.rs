//! PostgreSQL's date/time units (days and microseconds since 2000-01-01)
//! against ClickHouse's (since 1970-01-01), and the ranges ClickHouse
//! documents for `Date32` and `DateTime64`: 1900-01-01 to 2299-12-31.
//! Some ClickHouse builds accept more, but a value outside the documented
//! range is not guaranteed to read back, so it is refused.

use walshadow_pg_format::epoch::civil_from_days;
/// `POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE` (datatype/timestamp.h).
pub(crate) use walshadow_pg_format::epoch::{
    UNIX_DAYS as PG_EPOCH_UNIX_DAYS, UNIX_MICROS as PG_EPOCH_UNIX_MICROS,
};
const MICROS_PER_DAY: i64 = 86_400_000_000;

/// 1900-01-01 and 2299-12-31 in days since 1970-01-01.
pub(crate) const DATE32_MIN: i64 = -25_567;
pub(crate) const DATE32_MAX: i64 = 120_529;
/// 1900-01-01 00:00:00 and 2299-12-31 23:59:59.999999 in µs since 1970.
pub(crate) const DATETIME64_MIN: i64 = DATE32_MIN * MICROS_PER_DAY;
pub(crate) const DATETIME64_MAX: i64 = (DATE32_MAX + 1) * MICROS_PER_DAY - 1;

/// A PostgreSQL `date` (days since 2000-01-01) as a `Date32`, or `None`
/// outside the range (infinities included).
pub(crate) fn date32(pg_days: i32) -> Option<i32> {
    let days = i64::from(pg_days) + PG_EPOCH_UNIX_DAYS;
    if (DATE32_MIN..=DATE32_MAX).contains(&days) {
        i32::try_from(days).ok()
    } else {
        None
    }
}

/// A PostgreSQL timestamp (µs since 2000-01-01) as `DateTime64(6)`, or
/// `None` outside the range (infinities included).
pub(crate) fn datetime64(pg_micros: i64) -> Option<i64> {
    let micros = pg_micros.checked_add(PG_EPOCH_UNIX_MICROS)?;
    (DATETIME64_MIN..=DATETIME64_MAX)
        .contains(&micros)
        .then_some(micros)
}

/// [`date32`], or the nearest end of the range (`out_of_range =
/// "clamp"`): PostgreSQL's epoch lies inside it, so the sign says which.
pub(crate) fn date32_clamped(pg_days: i32) -> i32 {
    date32(pg_days).unwrap_or(if pg_days < 0 {
        DATE32_MIN as i32
    } else {
        DATE32_MAX as i32
    })
}

/// [`datetime64`], or the nearest end of the range.
pub(crate) fn datetime64_clamped(pg_micros: i64) -> i64 {
    datetime64(pg_micros).unwrap_or(if pg_micros < 0 {
        DATETIME64_MIN
    } else {
        DATETIME64_MAX
    })
}

/// A PostgreSQL date in ISO form for messages (`infinity` as PostgreSQL
/// writes it; years before 1 as negative years, not `BC`).
pub(crate) fn pg_date_text(pg_days: i32) -> String {
    match pg_days {
        i32::MIN => "-infinity".into(),
        i32::MAX => "infinity".into(),
        d => {
            let (y, m, d) = civil_from_days(i64::from(d) + PG_EPOCH_UNIX_DAYS);
            format!("{y:04}-{m:02}-{d:02}")
        }
    }
}

/// A PostgreSQL timestamp in ISO form for messages.
pub(crate) fn pg_timestamp_text(pg_micros: i64) -> String {
    match pg_micros {
        i64::MIN => "-infinity".into(),
        i64::MAX => "infinity".into(),
        t => {
            let unix = i128::from(t) + i128::from(PG_EPOCH_UNIX_MICROS);
            let day_micros = i128::from(MICROS_PER_DAY);
            let days = unix.div_euclid(day_micros) as i64;
            let rest = unix.rem_euclid(day_micros) as i64;
            let (y, m, d) = civil_from_days(days);
            let secs = rest / 1_000_000;
            format!(
                "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:06}",
                secs / 3600,
                secs / 60 % 60,
                secs % 60,
                rest % 1_000_000
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_and_ranges() {
        assert_eq!(date32(0), Some(10_957));
        assert_eq!(date32(-36_524), Some(-25_567)); // 1900-01-01
        assert_eq!(date32(-36_525), None);
        assert_eq!(date32(109_572), Some(120_529)); // 2299-12-31
        assert_eq!(date32(109_573), None);
        assert_eq!(date32(i32::MAX), None);
        assert_eq!(date32(i32::MIN), None);
        assert_eq!(datetime64(0), Some(946_684_800_000_000));
        assert_eq!(datetime64(i64::MAX), None);
        assert_eq!(datetime64(i64::MIN), None);
        // Values read back from ClickHouse's toUnixTimestamp64Micro.
        assert_eq!(DATETIME64_MIN, -2_208_988_800_000_000);
        assert_eq!(DATETIME64_MAX, 10_413_791_999_999_999);
    }

    #[test]
    fn text_for_messages() {
        assert_eq!(pg_date_text(0), "2000-01-01");
        assert_eq!(pg_date_text(-36_525), "1899-12-31");
        assert_eq!(pg_date_text(i32::MAX), "infinity");
        assert_eq!(pg_timestamp_text(-1), "1999-12-31 23:59:59.999999");
        assert_eq!(
            pg_timestamp_text(86_400_000_000 + 3_723_000_001),
            "2000-01-02 01:02:03.000001"
        );
        assert_eq!(pg_timestamp_text(i64::MIN), "-infinity");
    }
}
