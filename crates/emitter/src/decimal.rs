//! `numeric` digits → the unscaled integer a ClickHouse `Decimal(p,s)`
//! stores (`Decimal32/64/128/256`: a little-endian two's-complement integer
//! of 4, 8, 16 or 32 bytes; value = integer / 10^s).
//!
//! `Decimal256` needs 256-bit integers. The only operations needed are
//! "×10 + digit" and negation over four u64 limbs, a few lines by hand, so
//! no bignum crate is pulled in for them.

use std::fmt;

/// Why a numeric does not fit a `Decimal(p,s)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DecimalError {
    /// More than `p` significant digits at scale `s`.
    TooManyDigits,
    /// Non-zero digits past the `s`-th fractional digit.
    TooManyFractionDigits,
    /// A base-10000 digit outside 0..=9999 (a corrupt value).
    BadDigit(i16),
}

impl fmt::Display for DecimalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecimalError::TooManyDigits => {
                f.write_str("more significant digits than the precision")
            }
            DecimalError::TooManyFractionDigits => {
                f.write_str("more fractional digits than the scale")
            }
            DecimalError::BadDigit(d) => write!(f, "corrupt numeric digit {d}"),
        }
    }
}

/// The bytes of a `Decimal` of `precision` digits: 4, 8, 16 or 32.
pub(crate) fn decimal_width(precision: u8) -> usize {
    match precision {
        0..=9 => 4,
        10..=18 => 8,
        19..=38 => 16,
        _ => 32,
    }
}

/// Four u64 limbs, least significant first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct U256([u64; 4]);

impl U256 {
    fn mul10_add(&mut self, digit: u64) {
        let mut carry = u128::from(digit);
        for limb in &mut self.0 {
            let v = u128::from(*limb) * 10 + carry;
            *limb = v as u64;
            carry = v >> 64;
        }
    }

    fn negate(&mut self) {
        let mut carry = 1u128;
        for limb in &mut self.0 {
            let v = u128::from(!*limb) + carry;
            *limb = v as u64;
            carry = v >> 64;
        }
    }

    fn to_le_bytes(self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (chunk, limb) in out.chunks_exact_mut(8).zip(self.0) {
            chunk.copy_from_slice(&limb.to_le_bytes());
        }
        out
    }
}

/// The unscaled integer of the largest (or, `negative`, the smallest)
/// value a `Decimal(precision, s)` holds: ±(10^precision − 1), as
/// [`unscaled`] lays it out. What `out_of_range = "clamp"` writes.
pub(crate) fn extreme(precision: u8, negative: bool) -> [u8; 32] {
    let mut acc = U256::default();
    for _ in 0..precision {
        acc.mul10_add(9);
    }
    if negative {
        acc.negate();
    }
    acc.to_le_bytes()
}

/// The unscaled integer of a finite numeric at `scale`, as 32 little-endian
/// two's-complement bytes; the first [`decimal_width`] of them are the
/// ClickHouse value (the precision check guarantees it fits).
///
/// `digits` are base-10000, most significant first, the first one weighing
/// `10000^weight` (numeric.c, `NumericVar`).
pub(crate) fn unscaled(
    negative: bool,
    weight: i16,
    digits: &[i16],
    precision: u8,
    scale: u8,
) -> Result<[u8; 32], DecimalError> {
    for &d in digits {
        if !(0..=9999).contains(&d) {
            return Err(DecimalError::BadDigit(d));
        }
    }
    // The decimal digit at exponent `e` (value × 10^e).
    let digit_at = |e: i64| -> u64 {
        let group = i64::from(weight) - e.div_euclid(4);
        let Ok(index) = usize::try_from(group) else {
            return 0;
        };
        let Some(&d) = digits.get(index) else {
            return 0;
        };
        let d = d as u64; // checked 0..=9999 above
        d / 10u64.pow(e.rem_euclid(4) as u32) % 10
    };
    let scale = i64::from(scale);
    let lowest = -scale;
    let highest = 4 * i64::from(weight) + 3;
    let mut acc = U256::default();
    let mut significant = 0u32;
    let mut e = highest;
    while e >= lowest {
        let d = digit_at(e);
        if significant > 0 || d != 0 {
            significant += 1;
            if significant > u32::from(precision) {
                return Err(DecimalError::TooManyDigits);
            }
        }
        acc.mul10_add(d);
        e -= 1;
    }
    // Digits below the scale must all be zero.
    let last = i64::try_from(digits.len()).unwrap_or(i64::MAX);
    let lowest_present = 4 * (i64::from(weight) - last + 1);
    let mut e = (lowest - 1).min(highest);
    while e >= lowest_present {
        if digit_at(e) != 0 {
            return Err(DecimalError::TooManyFractionDigits);
        }
        e -= 1;
    }
    if negative && acc != U256::default() {
        acc.negate();
    }
    Ok(acc.to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn as_i128(bytes: [u8; 32]) -> i128 {
        let mut b = [0u8; 16];
        b.copy_from_slice(&bytes[..16]);
        i128::from_le_bytes(b)
    }

    #[test]
    fn small_values() {
        // 12345.678 = weight 1, digits [1, 2345, 6780]
        let v = unscaled(false, 1, &[1, 2345, 6780], 10, 3).unwrap();
        assert_eq!(as_i128(v), 12_345_678);
        let v = unscaled(true, 1, &[1, 2345, 6780], 10, 4).unwrap();
        assert_eq!(as_i128(v), -123_456_780);
        // 0.0001 = weight -1, digits [1]
        assert_eq!(as_i128(unscaled(false, -1, &[1], 5, 4).unwrap()), 1);
        // 0.00000001 = weight -2, digits [1]
        assert_eq!(as_i128(unscaled(false, -2, &[1], 10, 8).unwrap()), 1);
        // zero
        assert_eq!(as_i128(unscaled(true, 0, &[], 5, 2).unwrap()), 0);
        // 1e8 = weight 2, digits [1]
        assert_eq!(
            as_i128(unscaled(false, 2, &[1], 9, 0).unwrap()),
            100_000_000
        );
    }

    #[test]
    fn limits() {
        assert_eq!(
            unscaled(false, 2, &[1], 8, 0),
            Err(DecimalError::TooManyDigits)
        );
        assert_eq!(
            unscaled(false, -1, &[1], 5, 3),
            Err(DecimalError::TooManyFractionDigits)
        );
        assert_eq!(
            unscaled(false, 0, &[10000], 5, 0),
            Err(DecimalError::BadDigit(10000))
        );
        // A huge weight fails fast on the precision.
        assert_eq!(
            unscaled(false, i16::MAX, &[1], 76, 0),
            Err(DecimalError::TooManyDigits)
        );
    }

    #[test]
    fn decimal256_full_width() {
        // 76 nines: 10^76 - 1; two's complement of its negation round-trips.
        let digits = vec![9999i16; 19];
        let pos = unscaled(false, 18, &digits, 76, 0).unwrap();
        let neg = unscaled(true, 18, &digits, 76, 0).unwrap();
        // pos + neg == 0 (mod 2^256)
        let mut carry = 0u16;
        for i in 0..32 {
            let s = u16::from(pos[i]) + u16::from(neg[i]) + carry;
            assert_eq!(s & 0xff, 0);
            carry = s >> 8;
        }
        assert!(neg[31] >= 0x80, "negative sign bit");
        assert!(pos[31] < 0x80, "10^76 - 1 fits in 255 bits");
    }
}
