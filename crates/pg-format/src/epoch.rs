//! PostgreSQL's epoch, 2000-01-01 00:00:00 UTC (`POSTGRES_EPOCH_JDATE` in
//! `datatype/timestamp.h`), in the units the formats count from it.

/// Seconds from the Unix epoch to PostgreSQL's.
pub const UNIX_SECS: i64 = 946_684_800;

/// Days from the Unix epoch to PostgreSQL's (`date` values count days from it).
pub const UNIX_DAYS: i64 = 10_957;

/// Microseconds from the Unix epoch to PostgreSQL's (`timestamp` values and
/// the replication protocol's clocks count microseconds from it).
pub const UNIX_MICROS: i64 = UNIX_SECS * 1_000_000;

/// `POSTGRES_EPOCH_JDATE`: the Julian day number of 2000-01-01.
pub const JULIAN_DAY: i64 = 2_451_545;

/// Days since 1970-01-01 → proleptic Gregorian (year, month, day)
/// (H. Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(UNIX_DAYS), (2000, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    #[test]
    fn units_agree() {
        assert_eq!(UNIX_DAYS * 86_400, UNIX_SECS);
        // 1970-01-01 is Julian day 2440588.
        assert_eq!(JULIAN_DAY - UNIX_DAYS, 2_440_588);
    }
}
