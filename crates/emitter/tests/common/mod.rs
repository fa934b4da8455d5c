//! Helpers shared by the emitter's ClickHouse tests: relation descriptors
//! built by hand (`walshadow_types::catalog::fixtures`; the shadow is not
//! needed to describe a table), values in PostgreSQL's units, and a client
//! for an engine.

// Each test file uses a subset.
#![allow(dead_code, unused_imports)]

use walshadow_emitter::{ClickHouseClient, ClientConfig};
use walshadow_rows::{Numeric, Value};
use walshadow_testkit::ClickHouseEngine;
use walshadow_types::Oid;
use walshadow_types::catalog::AttributeDesc;
use walshadow_types::catalog::fixtures::attribute;
pub use walshadow_types::catalog::fixtures::{relation, type_desc};

pub fn client(engine: &ClickHouseEngine, database: &str) -> ClickHouseClient {
    let mut config = ClientConfig::new(engine.url(), database);
    if let Some((user, password)) = engine.credentials() {
        config.user = user.into();
        config.password = password.into();
    }
    ClickHouseClient::new(config).expect("client")
}

pub fn attr(attnum: i16, name: &str, type_oid: Oid, typmod: i32, not_null: bool) -> AttributeDesc {
    AttributeDesc {
        typmod,
        not_null,
        ..attribute(attnum, name, type_oid)
    }
}

/// `numeric(p,s)` typmod (numeric.c, `make_numeric_typmod`).
pub fn numeric_typmod(precision: i32, scale: i32) -> i32 {
    ((precision << 16) | (scale & 0x7ff)) + 4
}

/// A numeric from its decimal text, in PostgreSQL's base-10000 digits.
pub fn numeric(text: &str) -> Value {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let int = int.trim_start_matches('0');
    let pad_left = (4 - int.len() % 4) % 4;
    let pad_right = (4 - frac.len() % 4) % 4;
    let digits_text = format!(
        "{}{int}{frac}{}",
        "0".repeat(pad_left),
        "0".repeat(pad_right)
    );
    let mut digits: Vec<i16> = digits_text
        .as_bytes()
        .chunks(4)
        .map(|c| std::str::from_utf8(c).unwrap().parse().unwrap())
        .collect();
    let mut weight = ((pad_left + int.len()) / 4) as i16 - 1;
    while digits.first() == Some(&0) {
        digits.remove(0);
        weight -= 1;
    }
    while digits.last() == Some(&0) {
        digits.pop();
    }
    if digits.is_empty() {
        weight = 0;
    }
    Value::Numeric(Numeric::Finite {
        negative: negative && !digits.is_empty(),
        weight,
        dscale: frac.len() as u16,
        digits,
    })
}

/// A UUID from its text.
pub fn uuid(text: &str) -> Value {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    let mut b = [0u8; 16];
    for (i, byte) in b.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    Value::Uuid(b)
}

/// Days since 2000-01-01 of a proleptic Gregorian date.
pub fn pg_date(y: i64, m: i64, d: i64) -> i32 {
    // H. Hinnant's days_from_civil, shifted to PostgreSQL's epoch.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe - 719_468 - 10_957) as i32
}

/// Microseconds since 2000-01-01 00:00.
pub fn pg_ts(y: i64, m: i64, d: i64, hh: i64, mm: i64, ss: i64, us: i64) -> i64 {
    i64::from(pg_date(y, m, d)) * 86_400_000_000 + ((hh * 60 + mm) * 60 + ss) * 1_000_000 + us
}
