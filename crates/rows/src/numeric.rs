//! `numeric`: the stored form (numeric.c, `NumericShort`/`NumericLong` and
//! the special values), its text output (`get_str_from_var`), the parse of
//! that text, and the scaled integers the emitter needs for decimals.
//!
//! ```text
//!  n_header (uint16)
//!  10 s dddddd w wwwwww   short: sign, dscale (6 bits), weight (7 bits, signed), digits follow
//!  0s dddddddddddddd      long:  sign, dscale (14 bits); int16 weight, digits follow
//!  1100 / 1101 / 1111     special: NaN / +Infinity / -Infinity
//! ```
//!
//! Digits are int16 in base 10000, most significant first; the value is
//! `sum(digit[i] * 10000^(weight - i))`.

use crate::bytes::{i16_at, u16_at};
use crate::error::DatumError;
use crate::value::Numeric;

const NUMERIC_SIGN_MASK: u16 = 0xC000;
const NUMERIC_NEG: u16 = 0x4000;
const NUMERIC_SHORT: u16 = 0x8000;
const NUMERIC_SPECIAL: u16 = 0xC000;
const NUMERIC_EXT_SIGN_MASK: u16 = 0xF000;
const NUMERIC_NAN: u16 = 0xC000;
const NUMERIC_PINF: u16 = 0xD000;
const NUMERIC_NINF: u16 = 0xF000;
const NUMERIC_SHORT_SIGN_MASK: u16 = 0x2000;
const NUMERIC_SHORT_DSCALE_MASK: u16 = 0x1F80;
const NUMERIC_SHORT_DSCALE_SHIFT: u16 = 7;
const NUMERIC_SHORT_WEIGHT_SIGN_MASK: u16 = 0x0040;
const NUMERIC_SHORT_WEIGHT_MASK: u16 = 0x003F;
const NUMERIC_DSCALE_MASK: u16 = 0x3FFF;
const NBASE: i16 = 10000;
const DEC_DIGITS: usize = 4;

/// Decodes a numeric varlena body.
pub(crate) fn decode(p: &[u8]) -> Result<Numeric, DatumError> {
    let header = u16_at(p, 0).map_err(|_| DatumError::bad("numeric", "no header"))?;
    let (negative, dscale, weight, digits_at) = match header & NUMERIC_SIGN_MASK {
        NUMERIC_SPECIAL => {
            return match header & NUMERIC_EXT_SIGN_MASK {
                NUMERIC_NAN => Ok(Numeric::NaN),
                NUMERIC_PINF => Ok(Numeric::PosInfinity),
                NUMERIC_NINF => Ok(Numeric::NegInfinity),
                _ => Err(DatumError::bad(
                    "numeric",
                    format!("special header {header:#06x}"),
                )),
            };
        }
        NUMERIC_SHORT => {
            let w = header & NUMERIC_SHORT_WEIGHT_MASK;
            let weight = if header & NUMERIC_SHORT_WEIGHT_SIGN_MASK != 0 {
                (w | !NUMERIC_SHORT_WEIGHT_MASK) as i16
            } else {
                w as i16
            };
            (
                header & NUMERIC_SHORT_SIGN_MASK != 0,
                (header & NUMERIC_SHORT_DSCALE_MASK) >> NUMERIC_SHORT_DSCALE_SHIFT,
                weight,
                2,
            )
        }
        sign => {
            let weight = i16_at(p, 2).map_err(|_| DatumError::bad("numeric", "no weight"))?;
            (sign == NUMERIC_NEG, header & NUMERIC_DSCALE_MASK, weight, 4)
        }
    };
    let body = p.get(digits_at..).unwrap_or_default();
    if body.len() % 2 != 0 {
        return Err(DatumError::bad("numeric", "odd number of digit bytes"));
    }
    let mut digits = Vec::with_capacity(body.len() / 2);
    for pair in body.chunks_exact(2) {
        let d = i16::from_le_bytes([
            pair.first().copied().unwrap_or(0),
            pair.get(1).copied().unwrap_or(0),
        ]);
        if !(0..NBASE).contains(&d) {
            return Err(DatumError::bad(
                "numeric",
                format!("digit {d} outside 0..9999"),
            ));
        }
        digits.push(d);
    }
    Ok(normalize(negative, weight, dscale, digits))
}

/// Strips leading and trailing zero digits (as `make_result` does); zero
/// is positive with weight 0.
fn normalize(negative: bool, mut weight: i16, dscale: u16, mut digits: Vec<i16>) -> Numeric {
    let lead = digits.iter().take_while(|d| **d == 0).count();
    digits.drain(..lead);
    weight = weight.saturating_sub(i16::try_from(lead).unwrap_or(i16::MAX));
    while digits.last() == Some(&0) {
        digits.pop();
    }
    if digits.is_empty() {
        return Numeric::Finite {
            negative: false,
            weight: 0,
            dscale,
            digits,
        };
    }
    Numeric::Finite {
        negative,
        weight,
        dscale,
        digits,
    }
}

impl Numeric {
    /// PostgreSQL's text form (`numeric_out`): `NaN`, `Infinity`,
    /// `-Infinity`, or the digits with exactly `dscale` fractional digits.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        self.write_text(&mut out);
        out
    }

    pub(crate) fn write_text(&self, out: &mut String) {
        let (negative, weight, dscale, digits) = match self {
            Numeric::NaN => return out.push_str("NaN"),
            Numeric::PosInfinity => return out.push_str("Infinity"),
            Numeric::NegInfinity => return out.push_str("-Infinity"),
            Numeric::Finite {
                negative,
                weight,
                dscale,
                digits,
            } => (*negative, i64::from(*weight), usize::from(*dscale), digits),
        };
        let digit = |i: i64| -> i16 {
            usize::try_from(i)
                .ok()
                .and_then(|i| digits.get(i))
                .copied()
                .unwrap_or(0)
        };
        if negative {
            out.push('-');
        }
        // Written straight into `out`: this runs per value for columns
        // replicated as text.
        if weight < 0 {
            out.push('0');
        } else {
            // The first digit without its leading zeros (a stored digit is
            // 0..=9999; anything else is written as its four low digits).
            let first = four_digits(digit(0));
            let skip = first.iter().take(3).take_while(|&&d| d == b'0').count();
            push_ascii(out, first.get(skip..).unwrap_or_default());
            for i in 1..=weight {
                push_ascii(out, &four_digits(digit(i)));
            }
        }
        if dscale > 0 {
            out.push('.');
            let frac_start = out.len();
            out.reserve(dscale + DEC_DIGITS);
            let mut i = weight + 1;
            while out.len() - frac_start < dscale {
                push_ascii(out, &four_digits(digit(i)));
                i += 1;
            }
            // ASCII digits only, so any length is a char boundary.
            out.truncate(frac_start + dscale);
        }
    }

    /// The value times 10^`scale` as an integer in decimal digits (a `-`
    /// before negative ones), rounded half away from zero at the last digit
    /// kept, as PostgreSQL rounds numerics. `None` for NaN and infinities.
    ///
    /// A `numeric(p, s)` column stores values already rounded to `s`, so at
    /// `scale = s` nothing is rounded; a smaller `scale` rounds, a larger one
    /// appends zeros. Scales beyond numeric's own limit (16383) give `None`.
    pub fn to_scaled_digits(&self, scale: u32) -> Option<String> {
        if scale > u32::from(NUMERIC_DSCALE_MASK) {
            return None;
        }
        let Numeric::Finite {
            negative,
            weight,
            digits,
            ..
        } = self
        else {
            return None;
        };
        // Decimal digits of the base-10000 digits; the decimal point sits
        // after the first (weight + 1) * 4 of them (which may be negative:
        // then it is before, with zeros between).
        let mut dec: Vec<u8> = Vec::with_capacity(digits.len() * DEC_DIGITS);
        for d in digits {
            dec.extend(format!("{d:04}").bytes());
        }
        let point = (i64::from(*weight) + 1) * DEC_DIGITS as i64;
        let keep = point + i64::from(scale);
        let mut int: Vec<u8> = Vec::new();
        let mut round_up = false;
        if keep > 0 {
            for i in 0..keep {
                let b = usize::try_from(i)
                    .ok()
                    .and_then(|i| dec.get(i))
                    .copied()
                    .unwrap_or(b'0');
                int.push(b);
            }
        }
        let next = usize::try_from(keep).ok().and_then(|k| dec.get(k)).copied();
        if keep >= 0 {
            round_up = next.is_some_and(|b| b >= b'5');
        }
        if round_up {
            let mut carry = true;
            for b in int.iter_mut().rev() {
                if *b == b'9' {
                    *b = b'0';
                } else {
                    *b += 1;
                    carry = false;
                    break;
                }
            }
            if carry {
                int.insert(0, b'1');
            }
        }
        let first = int.iter().position(|b| *b != b'0');
        let mut s = String::new();
        match first {
            None => s.push('0'),
            Some(at) => {
                if *negative {
                    s.push('-');
                }
                s.extend(
                    int.get(at..)
                        .unwrap_or_default()
                        .iter()
                        .map(|b| char::from(*b)),
                );
            }
        }
        Some(s)
    }

    /// [`Numeric::to_scaled_digits`] as an `i128`; `None` for NaN,
    /// infinities and values whose scaled integer does not fit.
    pub fn to_scaled_i128(&self, scale: u32) -> Option<i128> {
        self.to_scaled_digits(scale)?.parse().ok()
    }
}

/// Parses `numeric_out`'s forms (and plain decimal input: sign, digits,
/// point, exponent-free).
pub(crate) fn parse(s: &str) -> Result<Numeric, String> {
    match s {
        "NaN" => return Ok(Numeric::NaN),
        "Infinity" => return Ok(Numeric::PosInfinity),
        "-Infinity" => return Ok(Numeric::NegInfinity),
        _ => {}
    }
    let bad = || format!("{s:?} is not a numeric");
    let (negative, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let dscale = u16::try_from(frac.len()).map_err(|_| bad())?;
    // Left-pad the integer part and right-pad the fraction to whole groups
    // of four decimal digits.
    let int_pad = (DEC_DIGITS - int.len() % DEC_DIGITS) % DEC_DIGITS;
    let frac_pad = (DEC_DIGITS - frac.len() % DEC_DIGITS) % DEC_DIGITS;
    let all: Vec<u8> = std::iter::repeat_n(b'0', int_pad)
        .chain(int.bytes())
        .chain(frac.bytes())
        .chain(std::iter::repeat_n(b'0', frac_pad))
        .collect();
    let int_groups = (int.len() + int_pad) / DEC_DIGITS;
    let weight = i16::try_from(int_groups).map_err(|_| bad())? - 1;
    let digits = all
        .chunks(DEC_DIGITS)
        .map(|c| c.iter().fold(0i16, |acc, b| acc * 10 + i16::from(b - b'0')))
        .collect();
    Ok(normalize(negative, weight, dscale, digits))
}

/// A base-10000 digit as four ASCII decimal digits (zero-padded; the
/// magnitude modulo 10000 for a digit out of range, as a bad payload may
/// hold).
fn four_digits(d: i16) -> [u8; 4] {
    let d = d.unsigned_abs() % 10000;
    let ascii = |n: u16| b'0' + (n % 10) as u8;
    [ascii(d / 1000), ascii(d / 100), ascii(d / 10), ascii(d)]
}

fn push_ascii(out: &mut String, digits: &[u8]) {
    // Formatting per digit through `fmt` was most of a numeric's text.
    for &b in digits {
        out.push(char::from(b));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn short(neg: bool, dscale: u16, weight: i16, digits: &[i16]) -> Vec<u8> {
        let mut h = NUMERIC_SHORT | (dscale << NUMERIC_SHORT_DSCALE_SHIFT);
        if neg {
            h |= NUMERIC_SHORT_SIGN_MASK;
        }
        h |= (weight as u16) & (NUMERIC_SHORT_WEIGHT_MASK | NUMERIC_SHORT_WEIGHT_SIGN_MASK);
        let mut v = h.to_le_bytes().to_vec();
        for d in digits {
            v.extend_from_slice(&d.to_le_bytes());
        }
        v
    }

    #[test]
    fn stored_forms() {
        // 12345.678 = [1, 2345, 6780], weight 1, dscale 3.
        let n = decode(&short(false, 3, 1, &[1, 2345, 6780])).unwrap();
        assert_eq!(n.to_text(), "12345.678");
        // -0.00012, weight -1: [1, 2000]/10000^...: 0.0001 2 → digits [1, 2000], weight -1.
        let n = decode(&short(true, 5, -1, &[1, 2000])).unwrap();
        assert_eq!(n.to_text(), "-0.00012");
        // Long form: weight 3, dscale 0, 1 0000 0000 0000 = 10^12.
        let mut v = 0u16.to_le_bytes().to_vec();
        v.extend_from_slice(&3i16.to_le_bytes());
        v.extend_from_slice(&1i16.to_le_bytes());
        assert_eq!(decode(&v).unwrap().to_text(), "1000000000000");
        assert_eq!(decode(&0xC000u16.to_le_bytes()).unwrap(), Numeric::NaN);
        assert_eq!(
            decode(&0xD000u16.to_le_bytes()).unwrap().to_text(),
            "Infinity"
        );
        assert_eq!(
            decode(&0xF000u16.to_le_bytes()).unwrap().to_text(),
            "-Infinity"
        );
        // Zero with a scale.
        assert_eq!(decode(&short(false, 2, 0, &[])).unwrap().to_text(), "0.00");
    }

    #[test]
    fn hostile() {
        assert!(decode(&[]).is_err());
        assert!(decode(&[0]).is_err());
        assert!(decode(&0xE000u16.to_le_bytes()).is_err());
        assert!(decode(&[0, 0, 0]).is_err());
        assert!(decode(&short(false, 0, 0, &[10000])).is_err());
        assert!(decode(&short(false, 0, 0, &[-1])).is_err());
        let mut odd = short(false, 0, 0, &[1]);
        odd.push(0);
        assert!(decode(&odd).is_err());
    }

    #[test]
    fn text_round_trip() {
        for s in [
            "0",
            "1",
            "-1",
            "0.5",
            "123456789.000000001",
            "-0.0001",
            "10000",
            "99999999999999999999999999999999999999.99",
            "0.00",
            "NaN",
            "Infinity",
            "-Infinity",
            "1e",
        ] {
            match parse(s) {
                Ok(n) => assert_eq!(n.to_text(), s),
                Err(_) => assert_eq!(s, "1e"),
            }
        }
    }

    #[test]
    fn scaled() {
        let n = parse("12345.678").unwrap();
        assert_eq!(n.to_scaled_digits(3).as_deref(), Some("12345678"));
        assert_eq!(n.to_scaled_digits(5).as_deref(), Some("1234567800"));
        assert_eq!(n.to_scaled_digits(2).as_deref(), Some("1234568"));
        assert_eq!(n.to_scaled_digits(0).as_deref(), Some("12346"));
        assert_eq!(n.to_scaled_i128(1), Some(123457));
        let n = parse("-0.005").unwrap();
        assert_eq!(n.to_scaled_digits(2).as_deref(), Some("-1"));
        assert_eq!(n.to_scaled_digits(1).as_deref(), Some("0"));
        assert_eq!(
            parse("-0.004").unwrap().to_scaled_digits(2).as_deref(),
            Some("0")
        );
        assert_eq!(parse("9999.5").unwrap().to_scaled_i128(0), Some(10000));
        assert_eq!(parse("0").unwrap().to_scaled_i128(4), Some(0));
        assert_eq!(parse("1e").ok(), None);
        assert_eq!(Numeric::NaN.to_scaled_i128(2), None);
        let big = parse(&"9".repeat(60)).unwrap();
        assert_eq!(big.to_scaled_i128(0), None);
        assert_eq!(big.to_scaled_digits(0).unwrap().len(), 60);
    }
}
