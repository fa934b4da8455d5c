//! date, time, timetz, timestamp, timestamptz, interval: range checks on
//! stored values, text output as PostgreSQL writes it with `DateStyle =
//! ISO`, `IntervalStyle = postgres` and `TimeZone = UTC` (datetime.c
//! `EncodeDateOnly`, `EncodeTimeOnly`, `EncodeDateTime`, `EncodeInterval`;
//! `j2date`/`date2j`), and the parse of that output back (for
//! `attmissingval`).
//!
//! Stored forms (timestamp.h, date.h): date = int32 days since 2000-01-01,
//! time = int64 µs since midnight, timetz = time + int32 zone (seconds
//! west of UTC), timestamp[tz] = int64 µs since 2000-01-01 00:00 (UTC),
//! interval = int64 µs, int32 days, int32 months. The extremes of date and
//! timestamp are ±infinity, and from 17 on of interval too.

use crate::error::DatumError;

pub(crate) const USECS_PER_SEC: i64 = 1_000_000;
pub(crate) const USECS_PER_MINUTE: i64 = 60 * USECS_PER_SEC;
pub(crate) const USECS_PER_HOUR: i64 = 60 * USECS_PER_MINUTE;
pub(crate) const USECS_PER_DAY: i64 = 24 * USECS_PER_HOUR;
/// `POSTGRES_EPOCH_JDATE`: the Julian day of 2000-01-01.
use walshadow_pg_format::epoch::JULIAN_DAY as POSTGRES_EPOCH_JDATE;
/// `DATE_END_JULIAN`: 5874898-01-01.
const DATE_END_JULIAN: i64 = 2_147_483_494;
/// `MIN_TIMESTAMP` (4714-11-24 BC) and `END_TIMESTAMP` (294277-01-01).
const MIN_TIMESTAMP: i64 = -211_813_488_000_000_000;
const END_TIMESTAMP: i64 = 9_223_371_331_200_000_000;
/// `TZDISP_LIMIT`: zone offsets are within ±16 hours.
const TZDISP_LIMIT: i32 = 16 * 3600;

pub(crate) fn check_date(days: i32) -> Result<(), DatumError> {
    let jd = i64::from(days) + POSTGRES_EPOCH_JDATE;
    if days == i32::MIN || days == i32::MAX || (0..DATE_END_JULIAN).contains(&jd) {
        Ok(())
    } else {
        Err(DatumError::range(
            "date",
            format!("{days} days from 2000-01-01"),
        ))
    }
}

pub(crate) fn check_timestamp(ts: i64, type_name: &'static str) -> Result<(), DatumError> {
    if ts == i64::MIN || ts == i64::MAX || (MIN_TIMESTAMP..END_TIMESTAMP).contains(&ts) {
        Ok(())
    } else {
        Err(DatumError::range(
            type_name,
            format!("{ts} µs from 2000-01-01"),
        ))
    }
}

pub(crate) fn check_time(micros: i64, type_name: &'static str) -> Result<(), DatumError> {
    if (0..=USECS_PER_DAY).contains(&micros) {
        Ok(())
    } else {
        Err(DatumError::range(
            type_name,
            format!("{micros} µs after midnight"),
        ))
    }
}

pub(crate) fn check_zone(zone: i32) -> Result<(), DatumError> {
    if (-TZDISP_LIMIT..=TZDISP_LIMIT).contains(&zone) {
        Ok(())
    } else {
        Err(DatumError::range("timetz", format!("zone offset {zone} s")))
    }
}

/// `j2date`, in i64 so no input overflows (results for days outside the
/// valid range are meaningless but harmless).
fn j2date(jd: i64) -> (i64, i64, i64) {
    let mut julian = jd + 32044;
    let mut quad = julian.div_euclid(146_097);
    let extra = (julian - quad * 146_097) * 4 + 3;
    julian += 60 + quad * 3 + extra.div_euclid(146_097);
    quad = julian.div_euclid(1461);
    julian -= quad * 1461;
    let mut y = julian * 4 / 1461;
    julian = if y != 0 {
        (julian + 305) % 365
    } else {
        (julian + 306) % 366
    } + 123;
    y += quad * 4;
    let year = y - 4800;
    let quad = julian * 2141 / 65536;
    let day = julian - 7834 * quad / 256;
    let month = (quad + 10) % 12 + 1;
    (year, month, day)
}

/// `date2j`.
fn date2j(mut year: i64, mut month: i64, day: i64) -> i64 {
    if month > 2 {
        month += 1;
        year += 4800;
    } else {
        month += 13;
        year += 4799;
    }
    let century = year.div_euclid(100);
    let mut julian = year * 365 - 32167;
    julian += year.div_euclid(4) - century + century.div_euclid(4);
    julian += 7834 * month / 256 + day;
    julian
}

fn pad(out: &mut String, v: i64, width: usize) {
    use std::fmt::Write;
    let _ = write!(out, "{:0width$}", v.unsigned_abs());
}

fn write_ymd(out: &mut String, y: i64, m: i64, d: i64) {
    pad(out, if y > 0 { y } else { 1 - y }, 4);
    out.push('-');
    pad(out, m, 2);
    out.push('-');
    pad(out, d, 2);
}

/// `AppendSeconds` with precision 6 and zero fill: two-digit seconds, then
/// the fraction without trailing zeros.
fn append_seconds(out: &mut String, sec: i64, fsec: i64) {
    pad(out, sec, 2);
    if fsec != 0 {
        let mut frac = format!("{:06}", fsec.unsigned_abs());
        while frac.ends_with('0') {
            frac.pop();
        }
        out.push('.');
        out.push_str(&frac);
    }
}

fn write_hms(out: &mut String, micros: i64) {
    let hour = micros / USECS_PER_HOUR;
    let rest = micros - hour * USECS_PER_HOUR;
    let min = rest / USECS_PER_MINUTE;
    let rest = rest - min * USECS_PER_MINUTE;
    let sec = rest / USECS_PER_SEC;
    pad(out, hour, 2);
    out.push(':');
    pad(out, min, 2);
    out.push(':');
    append_seconds(out, sec, rest - sec * USECS_PER_SEC);
}

/// `EncodeTimezone`: `+HH`, `+HH:MM` or `+HH:MM:SS`, the sign flipped from
/// the stored seconds-west.
fn write_zone(out: &mut String, zone_secs_west: i32) {
    let abs = i64::from(zone_secs_west).abs();
    let (hour, min, sec) = (abs / 3600, abs / 60 % 60, abs % 60);
    out.push(if zone_secs_west <= 0 { '+' } else { '-' });
    pad(out, hour, 2);
    if sec != 0 {
        out.push(':');
        pad(out, min, 2);
        out.push(':');
        pad(out, sec, 2);
    } else if min != 0 {
        out.push(':');
        pad(out, min, 2);
    }
}

pub(crate) fn write_date(out: &mut String, days: i32) {
    match days {
        i32::MIN => out.push_str("-infinity"),
        i32::MAX => out.push_str("infinity"),
        _ => {
            let (y, m, d) = j2date(i64::from(days) + POSTGRES_EPOCH_JDATE);
            write_ymd(out, y, m, d);
            if y <= 0 {
                out.push_str(" BC");
            }
        }
    }
}

pub(crate) fn write_time(out: &mut String, micros: i64) {
    write_hms(out, micros);
}

pub(crate) fn write_timetz(out: &mut String, micros: i64, zone_secs_west: i32) {
    write_hms(out, micros);
    write_zone(out, zone_secs_west);
}

/// A timestamp; with `utc_zone`, as timestamptz shown in UTC.
pub(crate) fn write_timestamp(out: &mut String, ts: i64, utc_zone: bool) {
    match ts {
        i64::MIN => out.push_str("-infinity"),
        i64::MAX => out.push_str("infinity"),
        _ => {
            let date = ts.div_euclid(USECS_PER_DAY);
            let time = ts.rem_euclid(USECS_PER_DAY);
            let (y, m, d) = j2date(date + POSTGRES_EPOCH_JDATE);
            write_ymd(out, y, m, d);
            out.push(' ');
            write_hms(out, time);
            if utc_zone {
                write_zone(out, 0);
            }
            if y <= 0 {
                out.push_str(" BC");
            }
        }
    }
}

/// `AddPostgresIntPart`.
fn int_part(out: &mut String, value: i64, unit: &str, is_zero: &mut bool, is_before: &mut bool) {
    use std::fmt::Write;
    if value == 0 {
        return;
    }
    let _ = write!(
        out,
        "{}{}{value} {unit}{}",
        if *is_zero { "" } else { " " },
        if *is_before && value > 0 { "+" } else { "" },
        if value != 1 { "s" } else { "" }
    );
    *is_before = value < 0;
    *is_zero = false;
}

/// `EncodeInterval` with `INTSTYLE_POSTGRES`.
pub(crate) fn write_interval(out: &mut String, months: i32, days: i32, micros: i64) {
    if months == i32::MIN && days == i32::MIN && micros == i64::MIN {
        out.push_str("-infinity");
        return;
    }
    if months == i32::MAX && days == i32::MAX && micros == i64::MAX {
        out.push_str("infinity");
        return;
    }
    let (year, mon) = (i64::from(months) / 12, i64::from(months) % 12);
    let hour = micros / USECS_PER_HOUR;
    let rest = micros - hour * USECS_PER_HOUR;
    let min = rest / USECS_PER_MINUTE;
    let rest = rest - min * USECS_PER_MINUTE;
    let sec = rest / USECS_PER_SEC;
    let fsec = rest - sec * USECS_PER_SEC;
    let (mut is_zero, mut is_before) = (true, false);
    int_part(out, year, "year", &mut is_zero, &mut is_before);
    int_part(out, mon, "mon", &mut is_zero, &mut is_before);
    int_part(out, i64::from(days), "day", &mut is_zero, &mut is_before);
    if is_zero || hour != 0 || min != 0 || sec != 0 || fsec != 0 {
        let minus = hour < 0 || min < 0 || sec < 0 || fsec < 0;
        if !is_zero {
            out.push(' ');
        }
        if minus {
            out.push('-');
        } else if is_before {
            out.push('+');
        }
        pad(out, hour, 2);
        out.push(':');
        pad(out, min, 2);
        out.push(':');
        append_seconds(out, sec, fsec);
    }
}

// ---- parsing the output forms back (attmissingval) ----

fn num(s: &str) -> Result<i64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{s:?} is not a number"));
    }
    s.parse().map_err(|_| format!("{s:?} is out of range"))
}

/// `HH:MM:SS[.ffffff]` → µs.
fn parse_hms(s: &str) -> Result<i64, String> {
    let mut parts = s.splitn(3, ':');
    let (Some(h), Some(m), Some(sec)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("{s:?} is not HH:MM:SS"));
    };
    let (sec, frac) = sec.split_once('.').unwrap_or((sec, ""));
    if frac.len() > 6 || (!frac.is_empty() && num(frac).is_err()) {
        return Err(format!("bad fraction in {s:?}"));
    }
    let frac_us = if frac.is_empty() {
        0
    } else {
        num(&format!("{frac:0<6}"))?
    };
    let (h, m, sec) = (num(h)?, num(m)?, num(sec)?);
    h.checked_mul(USECS_PER_HOUR)
        .and_then(|x| x.checked_add(m * USECS_PER_MINUTE + sec * USECS_PER_SEC + frac_us))
        .ok_or_else(|| format!("{s:?} is out of range"))
}

/// `+HH[:MM[:SS]]` → seconds west of UTC.
fn parse_zone(s: &str) -> Result<i32, String> {
    let (sign, rest) = if let Some(r) = s.strip_prefix('+') {
        (-1, r)
    } else if let Some(r) = s.strip_prefix('-') {
        (1, r)
    } else {
        return Err(format!("{s:?} is not a zone offset"));
    };
    let mut secs = 0i64;
    let mut mult = 3600;
    for part in rest.split(':') {
        if mult == 0 {
            return Err(format!("{s:?} is not a zone offset"));
        }
        secs += num(part)? * mult;
        mult /= 60;
    }
    i32::try_from(sign * secs).map_err(|_| format!("{s:?} is out of range"))
}

/// `YYYY-MM-DD` (year of any width) → Julian day, BC handled by the caller.
fn parse_ymd(s: &str, bc: bool) -> Result<i64, String> {
    let mut parts = s.splitn(3, '-');
    let (Some(y), Some(m), Some(d)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("{s:?} is not YYYY-MM-DD"));
    };
    let (y, m, d) = (num(y)?, num(m)?, num(d)?);
    if y > 10_000_000 || !(1..=12).contains(&m) || !(1..=31).contains(&d) || (bc && y == 0) {
        return Err(format!("{s:?} is not a valid date"));
    }
    Ok(date2j(if bc { 1 - y } else { y }, m, d))
}

fn strip_bc(s: &str) -> (&str, bool) {
    match s.strip_suffix(" BC") {
        Some(rest) => (rest, true),
        None => (s, false),
    }
}

pub(crate) fn parse_date(s: &str) -> Result<i32, String> {
    match s {
        "infinity" => return Ok(i32::MAX),
        "-infinity" => return Ok(i32::MIN),
        _ => {}
    }
    let (s, bc) = strip_bc(s);
    let days = i32::try_from(parse_ymd(s, bc)? - POSTGRES_EPOCH_JDATE)
        .map_err(|_| format!("{s:?} is out of range"))?;
    check_date(days).map_err(|_| format!("{s:?} is out of range"))?;
    Ok(days)
}

pub(crate) fn parse_time(s: &str) -> Result<i64, String> {
    let t = parse_hms(s)?;
    check_time(t, "time").map_err(|_| format!("{s:?} is out of range"))?;
    Ok(t)
}

pub(crate) fn parse_timetz(s: &str) -> Result<(i64, i32), String> {
    let at = s
        .rfind(['+', '-'])
        .ok_or_else(|| format!("{s:?} has no zone offset"))?;
    let (time, zone) = s.split_at(at);
    let t = parse_time(time)?;
    let zone = parse_zone(zone)?;
    check_zone(zone).map_err(|_| format!("{s:?} is out of range"))?;
    Ok((t, zone))
}

/// A timestamp's output form; with `with_zone` the zone offset is applied
/// to give UTC.
pub(crate) fn parse_timestamp(s: &str, with_zone: bool) -> Result<i64, String> {
    match s {
        "infinity" => return Ok(i64::MAX),
        "-infinity" => return Ok(i64::MIN),
        _ => {}
    }
    let (s, bc) = strip_bc(s);
    let (date, time) = s
        .split_once(' ')
        .ok_or_else(|| format!("{s:?} is not a timestamp"))?;
    let (time, zone) = if with_zone {
        let at = time
            .rfind(['+', '-'])
            .ok_or_else(|| format!("{s:?} has no zone offset"))?;
        let (time, zone) = time.split_at(at);
        (time, parse_zone(zone)?)
    } else {
        (time, 0)
    };
    let jd = parse_ymd(date, bc)?;
    let ts = (jd - POSTGRES_EPOCH_JDATE)
        .checked_mul(USECS_PER_DAY)
        .and_then(|d| d.checked_add(parse_hms(time).ok()?))
        .and_then(|t| t.checked_add(i64::from(zone) * USECS_PER_SEC))
        .ok_or_else(|| format!("{s:?} is out of range"))?;
    check_timestamp(ts, "timestamp").map_err(|_| format!("{s:?} is out of range"))?;
    Ok(ts)
}

/// The `postgres` interval style: `[N year[s]] [N mon[s]] [N day[s]]
/// [[+-]HH:MM:SS[.f]]`.
pub(crate) fn parse_interval(s: &str) -> Result<(i32, i32, i64), String> {
    match s {
        "infinity" => return Ok((i32::MAX, i32::MAX, i64::MAX)),
        "-infinity" => return Ok((i32::MIN, i32::MIN, i64::MIN)),
        _ => {}
    }
    let bad = || format!("{s:?} is not an interval");
    let (mut months, mut days, mut micros) = (0i64, 0i64, 0i64);
    let mut tokens = s.split(' ');
    while let Some(tok) = tokens.next() {
        if tok.contains(':') {
            let (neg, hms) = match (tok.strip_prefix('-'), tok.strip_prefix('+')) {
                (Some(rest), _) => (true, rest),
                (None, Some(rest)) => (false, rest),
                (None, None) => (false, tok),
            };
            let t = parse_hms(hms)?;
            micros = if neg { -t } else { t };
            continue;
        }
        let n: i64 = tok.parse().map_err(|_| bad())?;
        match tokens.next().ok_or_else(bad)? {
            "year" | "years" => months += n.checked_mul(12).ok_or_else(bad)?,
            "mon" | "mons" => months += n,
            "day" | "days" => days += n,
            _ => return Err(bad()),
        }
    }
    Ok((
        i32::try_from(months).map_err(|_| bad())?,
        i32::try_from(days).map_err(|_| bad())?,
        micros,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(d: i32) -> String {
        let mut s = String::new();
        write_date(&mut s, d);
        s
    }

    fn ts(t: i64, tz: bool) -> String {
        let mut s = String::new();
        write_timestamp(&mut s, t, tz);
        s
    }

    fn iv(m: i32, d: i32, us: i64) -> String {
        let mut s = String::new();
        write_interval(&mut s, m, d, us);
        s
    }

    #[test]
    fn dates() {
        assert_eq!(date(0), "2000-01-01");
        assert_eq!(date(-1), "1999-12-31");
        assert_eq!(date(i32::MAX), "infinity");
        // 0001-01-01 BC is Julian day 1721060 (astronomical year 0).
        assert_eq!(
            date((1_721_060 - POSTGRES_EPOCH_JDATE) as i32),
            "0001-01-01 BC"
        );
        assert_eq!(date((-POSTGRES_EPOCH_JDATE) as i32), "4714-11-24 BC");
        assert_eq!(
            date((DATE_END_JULIAN - 1 - POSTGRES_EPOCH_JDATE) as i32),
            "5874897-12-31"
        );
        for s in [
            "2000-01-01",
            "0044-03-15 BC",
            "5874897-12-31",
            "1582-10-15",
            "infinity",
        ] {
            assert_eq!(date(parse_date(s).unwrap()), s);
        }
    }

    #[test]
    fn timestamps() {
        assert_eq!(ts(0, false), "2000-01-01 00:00:00");
        assert_eq!(ts(-1, true), "1999-12-31 23:59:59.999999+00");
        assert_eq!(ts(1_500_000, false), "2000-01-01 00:00:01.5");
        assert_eq!(ts(MIN_TIMESTAMP, true), "4714-11-24 00:00:00+00 BC");
        assert_eq!(ts(i64::MIN, true), "-infinity");
        assert_eq!(parse_timestamp("2000-01-01 01:00:00+01", true), Ok(0));
        assert_eq!(
            parse_timestamp("2000-01-01 00:00:00-05:30", true),
            Ok(5 * USECS_PER_HOUR + 30 * USECS_PER_MINUTE)
        );
        for s in [
            "1999-12-31 23:59:59.999999",
            "0100-02-03 04:05:06.7 BC",
            "294276-12-31 23:59:59.999999",
        ] {
            assert_eq!(ts(parse_timestamp(s, false).unwrap(), false), s);
        }
    }

    #[test]
    fn times_and_zones() {
        let mut s = String::new();
        write_timetz(&mut s, USECS_PER_DAY, -(5 * 3600 + 30 * 60));
        assert_eq!(s, "24:00:00+05:30");
        let mut s = String::new();
        write_timetz(&mut s, 1, 3 * 3600 + 7);
        assert_eq!(s, "00:00:00.000001-03:00:07");
        assert_eq!(
            parse_timetz("24:00:00+05:30"),
            Ok((USECS_PER_DAY, -(5 * 3600 + 30 * 60)))
        );
        assert_eq!(
            parse_timetz("00:00:00.000001-03:00:07"),
            Ok((1, 3 * 3600 + 7))
        );
    }

    #[test]
    fn intervals() {
        assert_eq!(iv(0, 0, 0), "00:00:00");
        assert_eq!(
            iv(14, 3, 4 * USECS_PER_HOUR + 5 * USECS_PER_MINUTE + 6_500_000),
            "1 year 2 mons 3 days 04:05:06.5"
        );
        assert_eq!(iv(-1, 0, 0), "-1 mons");
        assert_eq!(iv(-13, 1, -1), "-1 years -1 mons +1 day -00:00:00.000001");
        assert_eq!(iv(0, -1, USECS_PER_HOUR), "-1 days +01:00:00");
        assert_eq!(iv(12, 0, 0), "1 year");
        assert_eq!(iv(0, 0, 100 * USECS_PER_HOUR), "100:00:00");
        assert_eq!(iv(i32::MAX, i32::MAX, i64::MAX), "infinity");
        for s in [
            "1 year 2 mons 3 days 04:05:06.5",
            "-1 years -1 mons +1 day -00:00:00.000001",
            "-1 days +01:00:00",
            "00:00:00",
            "-infinity",
        ] {
            let (m, d, us) = parse_interval(s).unwrap();
            assert_eq!(iv(m, d, us), s);
        }
    }
}
