//! PostgreSQL's text output for the values that map to a ClickHouse
//! `String` but are not text already (numeric without typmod, interval,
//! timetz, inet/cidr, macaddr/macaddr8, bit/varbit).
//!
//! This is the one swap point: the row decoder crate is gaining
//! `walshadow_rows::to_pg_text`, which replaces these renderers once it
//! lands. Until then they follow the `*_out` functions cited below for the
//! server's default settings (`IntervalStyle = postgres`).

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use walshadow_rows::{InetValue, Numeric, Value};

/// PostgreSQL's text for `value`, or `None` for values that are written as
/// they are (text, bytes, JSON) or are not strings at all.
pub(crate) fn pg_text(value: &Value) -> Option<String> {
    Some(match value {
        Value::Numeric(n) => numeric_text(n),
        Value::Interval {
            months,
            days,
            micros,
        } => interval_text(*months, *days, *micros),
        Value::TimeTz {
            micros,
            zone_secs_west,
        } => timetz_text(*micros, *zone_secs_west),
        Value::Inet(inet) => inet_text(inet),
        Value::MacAddr(b) => hex_colon(b),
        Value::MacAddr8(b) => hex_colon(b),
        Value::Bits { len, bytes } => bits_text(*len, bytes),
        _ => return None,
    })
}

/// `numeric_out` (numeric.c, `get_str_from_var`).
pub(crate) fn numeric_text(n: &Numeric) -> String {
    match n {
        Numeric::NaN => "NaN".into(),
        Numeric::PosInfinity => "Infinity".into(),
        Numeric::NegInfinity => "-Infinity".into(),
        Numeric::Finite {
            negative,
            weight,
            dscale,
            digits,
        } => {
            let digit = |i: i32| -> i32 {
                usize::try_from(i)
                    .ok()
                    .and_then(|i| digits.get(i))
                    .map_or(0, |&d| i32::from(d))
            };
            let mut s = String::new();
            let weight = i32::from(*weight);
            if *negative && digits.iter().any(|&d| d != 0) {
                s.push('-');
            }
            if weight < 0 {
                s.push('0');
            } else {
                for i in 0..=weight {
                    if i == 0 {
                        let _ = write!(s, "{}", digit(0));
                    } else {
                        let _ = write!(s, "{:04}", digit(i));
                    }
                }
            }
            if *dscale > 0 {
                s.push('.');
                let mut frac = String::new();
                let mut i = weight + 1;
                while frac.len() < usize::from(*dscale) {
                    let _ = write!(frac, "{:04}", digit(i));
                    i += 1;
                }
                frac.truncate(usize::from(*dscale));
                s.push_str(&frac);
            }
            s
        }
    }
}

/// `interval_out` with `IntervalStyle = postgres` (datetime.c,
/// `EncodeInterval`, `AddPostgresIntPart`).
pub(crate) fn interval_text(months: i32, days: i32, micros: i64) -> String {
    let mut s = String::new();
    let mut is_zero = true;
    let mut is_before = false;
    let mut part = |s: &mut String, value: i64, unit: &str| {
        if value == 0 {
            return;
        }
        let _ = write!(
            s,
            "{}{}{} {}{}",
            if is_zero { "" } else { " " },
            if is_before && value > 0 { "+" } else { "" },
            value,
            unit,
            if value != 1 { "s" } else { "" }
        );
        is_before = value < 0;
        is_zero = false;
    };
    part(&mut s, i64::from(months / 12), "year");
    part(&mut s, i64::from(months % 12), "mon");
    part(&mut s, i64::from(days), "day");
    let hours = micros / 3_600_000_000;
    let rest = micros % 3_600_000_000;
    let mins = rest / 60_000_000;
    let rest = rest % 60_000_000;
    let secs = rest / 1_000_000;
    let fsec = rest % 1_000_000;
    if is_zero || micros != 0 {
        let minus = micros < 0;
        let _ = write!(
            s,
            "{}{}{:02}:{:02}:",
            if is_zero { "" } else { " " },
            if minus {
                "-"
            } else if is_before {
                "+"
            } else {
                ""
            },
            hours.unsigned_abs(),
            mins.unsigned_abs()
        );
        append_seconds(&mut s, secs.unsigned_abs(), fsec.unsigned_abs());
    }
    s
}

/// `AppendSeconds` with full precision: two-digit seconds, fraction with
/// trailing zeros trimmed.
fn append_seconds(s: &mut String, secs: u64, fsec: u64) {
    let _ = write!(s, "{secs:02}");
    if fsec != 0 {
        let frac = format!("{fsec:06}");
        s.push('.');
        s.push_str(frac.trim_end_matches('0'));
    }
}

/// `timetz_out` (date.c → `EncodeTimeOnly`, `EncodeTimezone`).
pub(crate) fn timetz_text(micros: i64, zone_secs_west: i32) -> String {
    let mut s = String::new();
    let secs = micros / 1_000_000;
    let _ = write!(s, "{:02}:{:02}:", secs / 3600, secs / 60 % 60);
    append_seconds(
        &mut s,
        (secs % 60).unsigned_abs(),
        (micros % 1_000_000).unsigned_abs(),
    );
    // Seconds west of UTC: a positive offset is printed with '-'.
    let sign = if zone_secs_west > 0 { '-' } else { '+' };
    let tz = zone_secs_west.unsigned_abs();
    let (h, m, sec) = (tz / 3600, tz / 60 % 60, tz % 60);
    if sec != 0 {
        let _ = write!(s, "{sign}{h:02}:{m:02}:{sec:02}");
    } else if m != 0 {
        let _ = write!(s, "{sign}{h:02}:{m:02}");
    } else {
        let _ = write!(s, "{sign}{h:02}");
    }
    s
}

/// `inet_out`/`cidr_out` (network.c): the prefix length is shown for cidr
/// always and for inet only when it is not the full width.
pub(crate) fn inet_text(v: &InetValue) -> String {
    let (addr, full) = match v.addr.as_slice() {
        &[a, b, c, d] => (Ipv4Addr::new(a, b, c, d).to_string(), 32),
        bytes => match <[u8; 16]>::try_from(bytes) {
            Ok(b) => (Ipv6Addr::from(b).to_string(), 128),
            Err(_) => return format!("<inet of {} bytes>", bytes.len()),
        },
    };
    if v.is_cidr || v.bits != full {
        format!("{addr}/{}", v.bits)
    } else {
        addr
    }
}

fn hex_colon(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 3);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            s.push(':');
        }
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// `bit_out`: one character per bit.
pub(crate) fn bits_text(len: u32, bytes: &[u8]) -> String {
    (0..len)
        .map(|i| {
            let byte = bytes.get((i / 8) as usize).copied().unwrap_or(0);
            if byte & (0x80 >> (i % 8)) != 0 {
                '1'
            } else {
                '0'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(negative: bool, weight: i16, dscale: u16, digits: &[i16]) -> String {
        numeric_text(&Numeric::Finite {
            negative,
            weight,
            dscale,
            digits: digits.to_vec(),
        })
    }

    #[test]
    fn numerics() {
        assert_eq!(num(false, 1, 3, &[1, 2345, 6780]), "12345.678");
        assert_eq!(num(true, 0, 0, &[7]), "-7");
        assert_eq!(num(false, -1, 4, &[1]), "0.0001");
        assert_eq!(num(false, -2, 10, &[1]), "0.0000000100");
        assert_eq!(num(false, 2, 0, &[1]), "100000000");
        assert_eq!(num(false, 0, 2, &[]), "0.00");
        assert_eq!(numeric_text(&Numeric::NaN), "NaN");
        assert_eq!(numeric_text(&Numeric::NegInfinity), "-Infinity");
    }

    #[test]
    fn intervals() {
        // Expected strings are what PostgreSQL 15 prints for the same values.
        assert_eq!(interval_text(0, 0, 0), "00:00:00");
        assert_eq!(
            interval_text(14, 3, 14_706_789_000),
            "1 year 2 mons 3 days 04:05:06.789"
        );
        assert_eq!(
            interval_text(-14, 3, -14_706_000_000),
            "-1 years -2 mons +3 days -04:05:06"
        );
        assert_eq!(interval_text(1, 0, 0), "1 mon");
        assert_eq!(interval_text(0, -1, 0), "-1 days");
        assert_eq!(interval_text(0, 0, 360_000_000_000), "100:00:00");
        assert_eq!(interval_text(0, 1, 1), "1 day 00:00:00.000001");
    }

    #[test]
    fn timetz_inet_mac_bits() {
        assert_eq!(timetz_text(45_296_500_000, -19_800), "12:34:56.5+05:30");
        assert_eq!(timetz_text(0, 3600), "00:00:00-01");
        let v4 = InetValue {
            addr: vec![10, 0, 0, 1],
            bits: 32,
            is_cidr: false,
        };
        assert_eq!(inet_text(&v4), "10.0.0.1");
        let c = InetValue {
            addr: vec![10, 0, 0, 0],
            bits: 8,
            is_cidr: true,
        };
        assert_eq!(inet_text(&c), "10.0.0.0/8");
        let mut v6 = vec![0u8; 16];
        v6[0] = 0x20;
        v6[1] = 0x01;
        v6[2] = 0x0d;
        v6[3] = 0xb8;
        v6[15] = 1;
        let i6 = InetValue {
            addr: v6,
            bits: 64,
            is_cidr: false,
        };
        assert_eq!(inet_text(&i6), "2001:db8::1/64");
        assert_eq!(hex_colon(&[8, 0, 0x2b, 1, 2, 3]), "08:00:2b:01:02:03");
        assert_eq!(bits_text(10, &[0b1010_0000, 0b0100_0000]), "1010000001");
    }
}
