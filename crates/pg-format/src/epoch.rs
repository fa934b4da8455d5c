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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_agree() {
        assert_eq!(UNIX_DAYS * 86_400, UNIX_SECS);
        // 1970-01-01 is Julian day 2440588.
        assert_eq!(JULIAN_DAY - UNIX_DAYS, 2_440_588);
    }
}
