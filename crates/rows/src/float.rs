//! `float4`/`float8` text output as PostgreSQL 12+ writes it with the
//! default `extra_float_digits = 1`: Ryu's shortest decimal (common/d2s.c,
//! common/f2s.c), laid out by their `to_chars`: plain decimal when the
//! decimal exponent is in -4..15 (-4..6 for float4), otherwise `d.ddde+XX`.
//!
//! PostgreSQL builds Ryu without `STRICTLY_SHORTEST`: an interval bound is
//! never accepted, so where the shortest decimal sits exactly on the
//! rounding boundary it prints one digit more than Rust's (or any strictly
//! shortest) formatter would. Hence `d2d`/`f2d` are mirrored step for step
//! here — same starting scale, same trailing-zero bookkeeping — with the
//! table-driven `mulShift` replaced by exact big-integer arithmetic (it
//! computes the same floors).

use std::fmt::Write as _;

/// `floor(n * 2^e2 / 10^s)`, exactly; and whether the division was exact.
fn scaled(n: u64, e2: i32, s: i32) -> (u64, bool) {
    let a = e2 - s;
    let mut big = Big::from(n);
    if a > 0 {
        big.shl(a.unsigned_abs());
    }
    if s < 0 {
        big.mul_pow5(s.unsigned_abs());
    }
    let mut exact = true;
    if s > 0 {
        exact &= big.div_pow5(s.unsigned_abs());
    }
    if a < 0 {
        exact &= big.shr(a.unsigned_abs());
    }
    (big.to_u64(), exact)
}

/// A non-negative integer in base 2^32, least significant limb first; only
/// what `scaled` needs.
struct Big(Vec<u32>);

impl Big {
    fn from(n: u64) -> Big {
        Big(vec![n as u32, (n >> 32) as u32])
    }

    fn mul_small(&mut self, m: u32) {
        let mut carry = 0u64;
        for limb in &mut self.0 {
            let v = u64::from(*limb) * u64::from(m) + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
    }

    /// Divides in place; returns the remainder.
    fn div_small(&mut self, d: u32) -> u32 {
        let mut rem = 0u64;
        for limb in self.0.iter_mut().rev() {
            let v = (rem << 32) | u64::from(*limb);
            *limb = (v / u64::from(d)) as u32;
            rem = v % u64::from(d);
        }
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
        rem as u32
    }

    fn mul_pow5(&mut self, mut k: u32) {
        while k > 0 {
            let step = k.min(13);
            self.mul_small(5u32.pow(step));
            k -= step;
        }
    }

    /// Divides by 5^k; true when nothing was lost.
    fn div_pow5(&mut self, mut k: u32) -> bool {
        let mut exact = true;
        while k > 0 {
            let step = k.min(13);
            exact &= self.div_small(5u32.pow(step)) == 0;
            k -= step;
        }
        exact
    }

    fn shl(&mut self, bits: u32) {
        let (limbs, bits) = ((bits / 32) as usize, bits % 32);
        if bits > 0 {
            let mut carry = 0u32;
            for limb in &mut self.0 {
                let v = (*limb << bits) | carry;
                carry = *limb >> (32 - bits);
                *limb = v;
            }
            if carry != 0 {
                self.0.push(carry);
            }
        }
        self.0.splice(0..0, std::iter::repeat_n(0, limbs));
    }

    /// Shifts right; true when only zero bits fell off.
    fn shr(&mut self, bits: u32) -> bool {
        let limbs = (bits / 32) as usize;
        let bits = bits % 32;
        let dropped = self.0.len().min(limbs);
        let mut exact = self.0.drain(..dropped).all(|l| l == 0);
        if bits > 0 {
            let mut carry = 0u32;
            for limb in self.0.iter_mut().rev() {
                let v = (*limb >> bits) | carry;
                carry = *limb << (32 - bits);
                *limb = v;
            }
            exact &= carry == 0;
        }
        exact
    }

    /// The value, saturated to u64 (Ryu's quantities always fit).
    fn to_u64(&self) -> u64 {
        let mut it = self.0.iter();
        let lo = u64::from(it.next().copied().unwrap_or(0));
        let hi = u64::from(it.next().copied().unwrap_or(0));
        if it.any(|l| *l != 0) {
            return u64::MAX;
        }
        lo | (hi << 32)
    }
}

/// `log10Pow2`, `log10Pow5` (d2s_intrinsics.h / f2s.c).
fn log10_pow2(e: i32) -> i32 {
    ((i64::from(e) * 78913) >> 18) as i32
}

fn log10_pow5(e: i32) -> i32 {
    ((i64::from(e) * 732_923) >> 20) as i32
}

fn pow5_factor(mut v: u64) -> u32 {
    let mut n = 0;
    while v != 0 && v.is_multiple_of(5) {
        v /= 5;
        n += 1;
    }
    n
}

fn multiple_of_pow5(v: u64, p: i32) -> bool {
    i64::from(pow5_factor(v)) >= i64::from(p)
}

fn multiple_of_pow2(v: u64, p: i32) -> bool {
    p <= 0 || (p < 64 && v & ((1u64 << p) - 1) == 0)
}

/// Ryu's digit removal (Step 4 of `d2d`/`f2d`), `acceptBounds` false.
fn remove_digits(
    mut vr: u64,
    mut vp: u64,
    mut vm: u64,
    mut vr_trailing_zeros: bool,
    mut last: u64,
) -> (u64, i32) {
    let mut removed = 0;
    while vp / 10 > vm / 10 {
        vr_trailing_zeros &= last == 0;
        last = vr % 10;
        vr /= 10;
        vp /= 10;
        vm /= 10;
        removed += 1;
    }
    if vr_trailing_zeros && last == 5 && vr.is_multiple_of(2) {
        // Round even if the exact number is .....50..0.
        last = 4;
    }
    (vr + u64::from(vr == vm || last >= 5), removed)
}

/// The value as Ryu's `mv * 2^e2`, with the bounds of the values that
/// round to it (`mp`, `mm`, same scale).
struct Interval {
    e2: i32,
    mv: u64,
    mp: u64,
    mm: u64,
}

/// The steps `d2d` and `f2d` share: an integer below 2 to the power of
/// the mantissa's bits plus one prints exactly (`Err` with it, as
/// `d2d_small_int`), anything else gives the interval of Step 2.
fn interval(
    ieee_mantissa: u64,
    ieee_exponent: i32,
    mantissa_bits: i32,
    bias: i32,
) -> Result<Interval, u64> {
    let e2 = ieee_exponent - bias - mantissa_bits;
    if ieee_exponent != 0 && (-mantissa_bits..=0).contains(&e2) {
        let m2 = (1u64 << mantissa_bits) | ieee_mantissa;
        if ieee_mantissa & ((1u64 << -e2) - 1) == 0 {
            return Err(m2 >> -e2);
        }
    }
    let (e2, m2) = if ieee_exponent == 0 {
        (1 - bias - mantissa_bits - 2, ieee_mantissa)
    } else {
        (e2 - 2, (1u64 << mantissa_bits) | ieee_mantissa)
    };
    let mv = 4 * m2;
    let mm_shift = u64::from(ieee_mantissa != 0 || ieee_exponent <= 1);
    Ok(Interval {
        e2,
        mv,
        mp: mv + 2,
        mm: mv - 1 - mm_shift,
    })
}

/// `d2d` (and `d2d_small_int`): the decimal `output * 10^exp` PostgreSQL
/// prints for a positive finite double.
fn d2d(bits: u64) -> (u64, i32, bool) {
    const MANTISSA_BITS: i32 = 52;
    const BIAS: i32 = 1023;
    let ieee_mantissa = bits & ((1u64 << MANTISSA_BITS) - 1);
    let ieee_exponent = ((bits >> MANTISSA_BITS) & 0x7ff) as i32;
    let Interval { e2, mv, mp, mm } =
        match interval(ieee_mantissa, ieee_exponent, MANTISSA_BITS, BIAS) {
            Ok(i) => i,
            Err(small_int) => return (small_int, 0, true),
        };
    let mut vr_tz = false;
    let (e10, mut vp_exclusive);
    if e2 >= 0 {
        let q = log10_pow2(e2) - i32::from(e2 > 3);
        e10 = q;
        vp_exclusive = false;
        if q <= 21 {
            if mv.is_multiple_of(5) {
                vr_tz = multiple_of_pow5(mv, q);
            } else {
                vp_exclusive = multiple_of_pow5(mp, q);
            }
        }
    } else {
        let q = log10_pow5(-e2) - i32::from(-e2 > 1);
        e10 = q + e2;
        vp_exclusive = false;
        if q <= 1 {
            vr_tz = true;
            vp_exclusive = true;
        } else if q < 63 {
            vr_tz = multiple_of_pow2(mv, q - 1);
        }
    }
    let vr = scaled(mv, e2, e10).0;
    let vp = scaled(mp, e2, e10)
        .0
        .saturating_sub(u64::from(vp_exclusive));
    let vm = scaled(mm, e2, e10).0;
    let (output, removed) = remove_digits(vr, vp, vm, vr_tz, 0);
    (output, e10 + removed, false)
}

/// `f2d` (and `f2d_small_int`) for a positive finite float.
fn f2d(bits: u32) -> (u64, i32, bool) {
    const MANTISSA_BITS: i32 = 23;
    const BIAS: i32 = 127;
    let ieee_mantissa = u64::from(bits & ((1u32 << MANTISSA_BITS) - 1));
    let ieee_exponent = ((bits >> MANTISSA_BITS) & 0xff) as i32;
    let Interval { e2, mv, mp, mm } =
        match interval(ieee_mantissa, ieee_exponent, MANTISSA_BITS, BIAS) {
            Ok(i) => i,
            Err(small_int) => return (small_int, 0, true),
        };
    let q = if e2 >= 0 {
        log10_pow2(e2)
    } else {
        log10_pow5(-e2)
    };
    let e10 = if e2 >= 0 { q } else { q + e2 };
    let vr = scaled(mv, e2, e10).0;
    let mut vp = scaled(mp, e2, e10).0;
    let vm = scaled(mm, e2, e10).0;
    let mut last = 0;
    // One removed digit is needed even when the loop below will not run.
    if q != 0 && vp.wrapping_sub(1) / 10 <= vm / 10 {
        last = scaled(mv, e2, e10 - 1).0 % 10;
    }
    let mut vr_tz = false;
    if e2 >= 0 {
        if q <= 9 {
            if mv.is_multiple_of(5) {
                vr_tz = multiple_of_pow5(mv, q);
            } else {
                vp = vp.saturating_sub(u64::from(multiple_of_pow5(mp, q)));
            }
        }
    } else if q <= 1 {
        vr_tz = true;
        vp = vp.saturating_sub(1);
    } else if q < 31 {
        vr_tz = multiple_of_pow2(mv, q - 1);
    }
    let (output, removed) = remove_digits(vr, vp, vm, vr_tz, last);
    (output, e10 + removed, false)
}

/// `to_chars`: `output * 10^exp` as fixed or scientific notation.
fn layout(
    out: &mut String,
    mut output: u64,
    exp: i32,
    small_int: bool,
    negative: bool,
    fixed_below: i32,
) {
    let mut digits = output.to_string();
    let display_exp = exp + digits.len() as i32 - 1;
    if negative {
        out.push('-');
    }
    if (-4..fixed_below).contains(&display_exp) {
        if exp >= 0 {
            out.push_str(&digits);
            for _ in 0..exp {
                out.push('0');
            }
        } else {
            let int_len = digits.len() as i32 + exp;
            if int_len > 0 {
                let (int, frac) = digits.split_at(int_len as usize);
                out.push_str(int);
                out.push('.');
                out.push_str(frac);
            } else {
                out.push_str("0.");
                for _ in 0..-int_len {
                    out.push('0');
                }
                out.push_str(&digits);
            }
        }
        return;
    }
    // Only the small-integer path leaves trailing zeros in the mantissa.
    if small_int {
        while output.is_multiple_of(10) && output != 0 {
            output /= 10;
        }
        digits = output.to_string();
    }
    let (first, rest) = digits.split_at(1);
    out.push_str(first);
    if !rest.is_empty() {
        out.push('.');
        out.push_str(rest);
    }
    out.push('e');
    out.push(if display_exp < 0 { '-' } else { '+' });
    let _ = write!(out, "{:02}", display_exp.unsigned_abs());
}

fn special(out: &mut String, nan: bool, inf: bool, zero: bool, negative: bool) -> bool {
    if nan {
        out.push_str("NaN");
    } else if inf {
        out.push_str(if negative { "-Infinity" } else { "Infinity" });
    } else if zero {
        out.push_str(if negative { "-0" } else { "0" });
    } else {
        return false;
    }
    true
}

/// `float8out`.
pub(crate) fn write_f64(out: &mut String, v: f64) {
    if !special(
        out,
        v.is_nan(),
        v.is_infinite(),
        v == 0.0,
        v.is_sign_negative(),
    ) {
        let (output, exp, small_int) = d2d(v.abs().to_bits());
        layout(out, output, exp, small_int, v < 0.0, 15);
    }
}

/// `float4out`.
pub(crate) fn write_f32(out: &mut String, v: f32) {
    if !special(
        out,
        v.is_nan(),
        v.is_infinite(),
        v == 0.0,
        v.is_sign_negative(),
    ) {
        let (output, exp, small_int) = f2d(v.abs().to_bits());
        layout(out, output, exp, small_int, v < 0.0, 6);
    }
}

/// Parses `float8out`'s forms (what `str::parse` reads, plus PostgreSQL's
/// spellings of the specials).
pub(crate) fn parse_f64(s: &str) -> Result<f64, String> {
    match s {
        "NaN" => Ok(f64::NAN),
        "Infinity" => Ok(f64::INFINITY),
        "-Infinity" => Ok(f64::NEG_INFINITY),
        _ => s.parse().map_err(|_| format!("{s:?} is not a float")),
    }
}

pub(crate) fn parse_f32(s: &str) -> Result<f32, String> {
    match s {
        "NaN" => Ok(f32::NAN),
        "Infinity" => Ok(f32::INFINITY),
        "-Infinity" => Ok(f32::NEG_INFINITY),
        _ => s.parse().map_err(|_| format!("{s:?} is not a float")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f8(v: f64) -> String {
        let mut s = String::new();
        write_f64(&mut s, v);
        s
    }

    fn f4(v: f32) -> String {
        let mut s = String::new();
        write_f32(&mut s, v);
        s
    }

    #[test]
    fn float8_like_postgres() {
        // Outputs as PostgreSQL prints them (the last few on interval
        // bounds, where it gives one digit more than strictly needed).
        for (v, s) in [
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (0.1, "0.1"),
            (-1.5, "-1.5"),
            (100.0, "100"),
            (1e14, "100000000000000"),
            (1e15, "1e+15"),
            (123456789012345.0, "123456789012345"),
            (1234567890123456.0, "1.234567890123456e+15"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.0 / 3.0, "0.3333333333333333"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (5e-324, "5e-324"),
            (1e300, "1e+300"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
            (18536223482051368.0, "1.8536223482051368e+16"),
            (54335315069762096.0, "5.4335315069762096e+16"),
            (71404819886059456.0, "7.1404819886059456e+16"),
        ] {
            assert_eq!(f8(v), s);
            if !v.is_nan() {
                assert_eq!(parse_f64(s).unwrap().to_bits(), v.to_bits());
            }
        }
    }

    #[test]
    fn float4_like_postgres() {
        for (v, s) in [
            (1.0f32, "1"),
            (0.1, "0.1"),
            (123456.0, "123456"),
            (1234567.0, "1.234567e+06"),
            (3.4028235e38, "3.4028235e+38"),
            (1e-5, "1e-05"),
            (1e-45, "1e-45"),
            (f32::INFINITY, "Infinity"),
            (78033536.0, "7.8033536e+07"),
            (164314.12, "164314.12"),
            (-1622325.2, "-1.6223252e+06"),
        ] {
            assert_eq!(f4(v), s);
        }
    }

    /// Off the bounds, PostgreSQL's output is the strictly shortest one
    /// (Rust's); on a bound it is one digit longer. Either way it reads
    /// back to the same value.
    #[test]
    fn agrees_with_shortest_except_on_bounds() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut longer = 0;
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = f64::from_bits(x);
            if !v.is_finite() || v == 0.0 {
                continue;
            }
            let ours = f8(v);
            assert_eq!(
                ours.parse::<f64>().unwrap().to_bits(),
                v.to_bits(),
                "{ours}"
            );
            let digits = |s: &str| {
                s.split('e')
                    .next()
                    .unwrap_or("")
                    .chars()
                    .filter(char::is_ascii_digit)
                    .count()
            };
            let shortest = format!("{:e}", v);
            if ours.contains('e') && digits(&ours) != digits(shortest.trim_start_matches('-')) {
                longer += 1;
            }
            let v4 = f32::from_bits(x as u32);
            if v4.is_finite() && v4 != 0.0 {
                let ours = f4(v4);
                assert_eq!(
                    ours.parse::<f32>().unwrap().to_bits(),
                    v4.to_bits(),
                    "{ours}"
                );
            }
        }
        assert!(longer < 500, "{longer} outputs longer than the shortest");
    }
}
