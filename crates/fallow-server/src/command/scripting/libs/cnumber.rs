//! C library number conversions that lua-cjson relies on, reproduced in Rust with
//! glibc's output in the "C" locale: `printf("%.<p>g")` for encoding and `strtod`
//! for decoding (decimal, hexadecimal floats, inf/infinity, nan and nan(payload)).
//! Both are correctly rounded (round-half-even on exact ties) like glibc.
use std::fmt::{self, Write};

/// A small inline text buffer for formatting without allocation.
struct Inline {
    len: usize,
    bytes: [u8; 128],
}

impl Inline {
    fn new() -> Self {
        Inline {
            len: 0,
            bytes: [0; 128],
        }
    }

    fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or(&[])
    }
}

impl Write for Inline {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let end = self.len + text.len();
        let slot = self.bytes.get_mut(self.len..end).ok_or(fmt::Error)?;
        slot.copy_from_slice(text.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Appends `x` as C's `printf("%.<precision>g", x)` does.
pub(crate) fn format_g(out: &mut Vec<u8>, x: f64, precision: usize) {
    if x.is_nan() {
        out.extend_from_slice(if x.is_sign_negative() {
            b"-nan"
        } else {
            b"nan"
        });
        return;
    }
    if x.is_infinite() {
        out.extend_from_slice(if x < 0.0 { b"-inf" } else { b"inf" });
        return;
    }
    let precision = precision.max(1);
    let mut scientific = Inline::new();
    let _ = write!(scientific, "{:.*e}", precision - 1, x);
    let text = scientific.as_bytes();
    let e_at = text.iter().rposition(|&b| b == b'e').unwrap_or(text.len());
    let exponent = parse_small_int(text.get(e_at + 1..).unwrap_or(&[]));
    if exponent < -4 || exponent >= precision as i64 {
        out.extend_from_slice(strip_fraction_zeros(text.get(..e_at).unwrap_or(&[])));
        push_exponent(out, exponent);
    } else {
        let mut fixed = Inline::new();
        let decimals = (precision as i64 - 1 - exponent) as usize;
        let _ = write!(fixed, "{:.*}", decimals, x);
        out.extend_from_slice(strip_fraction_zeros(fixed.as_bytes()));
    }
}

fn parse_small_int(text: &[u8]) -> i64 {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let value = digits
        .iter()
        .fold(0i64, |acc, d| acc * 10 + i64::from(d.wrapping_sub(b'0')));
    if negative {
        -value
    } else {
        value
    }
}

/// Removes trailing zeros of a fraction, and the point if nothing is left after it.
fn strip_fraction_zeros(text: &[u8]) -> &[u8] {
    if !text.contains(&b'.') {
        return text;
    }
    let mut end = text.len();
    while end > 0 && text.get(end - 1) == Some(&b'0') {
        end -= 1;
    }
    if end > 0 && text.get(end - 1) == Some(&b'.') {
        end -= 1;
    }
    text.get(..end).unwrap_or(text)
}

/// C exponent style: sign and at least two digits ("e+05", "e-324").
fn push_exponent(out: &mut Vec<u8>, exponent: i64) {
    out.push(b'e');
    out.push(if exponent < 0 { b'-' } else { b'+' });
    let magnitude = exponent.unsigned_abs();
    if magnitude < 10 {
        out.push(b'0');
    }
    let mut digits = Inline::new();
    let _ = write!(digits, "{magnitude}");
    out.extend_from_slice(digits.as_bytes());
}

/// The byte at `i`, or NUL past the end (C strings end with NUL).
fn byte_at(s: &[u8], i: usize) -> u8 {
    s.get(i).copied().unwrap_or(0)
}

/// C's `strtod` on `s` (NUL or the end of `s` terminates): the value and how many
/// bytes were consumed (0 when no conversion was possible).
pub(crate) fn strtod(s: &[u8]) -> (f64, usize) {
    let mut i = 0;
    while matches!(byte_at(s, i), b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        i += 1;
    }
    let negative = byte_at(s, i) == b'-';
    if matches!(byte_at(s, i), b'-' | b'+') {
        i += 1;
    }
    let rest = s.get(i..).unwrap_or(&[]);
    let parsed = parse_special(rest)
        .or_else(|| parse_hex(rest))
        .or_else(|| parse_decimal(rest));
    match parsed {
        Some((value, used)) => (if negative { -value } else { value }, i + used),
        None => (0.0, 0),
    }
}

fn starts_with_ignore_case(s: &[u8], word: &[u8]) -> bool {
    s.len() >= word.len()
        && s.iter()
            .zip(word)
            .all(|(a, b)| a.to_ascii_lowercase() == *b)
}

/// "inf", "infinity", "nan" and "nan(n-char-sequence)", any case.
fn parse_special(s: &[u8]) -> Option<(f64, usize)> {
    if starts_with_ignore_case(s, b"infinity") {
        return Some((f64::INFINITY, 8));
    }
    if starts_with_ignore_case(s, b"inf") {
        return Some((f64::INFINITY, 3));
    }
    if !starts_with_ignore_case(s, b"nan") {
        return None;
    }
    let mut payload = 0u64;
    let mut used = 3;
    if byte_at(s, 3) == b'(' {
        let chars = s
            .get(4..)
            .unwrap_or(&[])
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
            .count();
        if byte_at(s, 4 + chars) == b')' {
            payload = nan_payload(s.get(4..4 + chars).unwrap_or(&[]));
            used = 5 + chars;
        }
    }
    let bits = 0x7ff8_0000_0000_0000 | (payload & 0x0007_ffff_ffff_ffff);
    Some((f64::from_bits(bits), used))
}

/// glibc reads the n-char-sequence with `strtoull(seq, &end, 0)` and uses it only
/// when the whole sequence was consumed (overflow saturates).
fn nan_payload(seq: &[u8]) -> u64 {
    let (radix, digits) = match seq {
        [b'0', x, rest @ ..] if (x | 0x20) == b'x' && !rest.is_empty() => (16, rest),
        [b'0', rest @ ..] if !rest.is_empty() => (8, rest),
        _ => (10, seq),
    };
    let mut value: u64 = 0;
    for &d in digits {
        let Some(digit) = (d as char).to_digit(radix) else {
            return 0;
        };
        value = value
            .checked_mul(u64::from(radix))
            .and_then(|v| v.checked_add(u64::from(digit)))
            .unwrap_or(u64::MAX);
    }
    value
}

fn hex_value(b: u8) -> Option<u64> {
    (b as char).to_digit(16).map(u64::from)
}

/// Hexadecimal floating point: "0x" hex digits, optional fraction, optional
/// binary exponent "p[+-]digits". Without any hex digit it is not a hex number.
fn parse_hex(s: &[u8]) -> Option<(f64, usize)> {
    if byte_at(s, 0) != b'0' || (byte_at(s, 1) | 0x20) != b'x' {
        return None;
    }
    let mut mantissa: u64 = 0;
    let mut exponent: i64 = 0;
    let mut sticky = false;
    let mut any_digit = false;
    let mut i = 2;
    let mut in_fraction = false;
    loop {
        let b = byte_at(s, i);
        if b == b'.' && !in_fraction {
            in_fraction = true;
        } else if let Some(digit) = hex_value(b) {
            any_digit = true;
            if mantissa >> 60 == 0 {
                mantissa = mantissa * 16 + digit;
                if in_fraction {
                    exponent -= 4;
                }
            } else {
                sticky |= digit != 0;
                if !in_fraction {
                    exponent += 4;
                }
            }
        } else {
            break;
        }
        i += 1;
    }
    if !any_digit {
        return None;
    }
    let (binary_exponent, used) = parse_exponent(s, i, b'p');
    let value = compose_binary(mantissa, exponent + binary_exponent, sticky);
    Some((value, i + used))
}

/// An optional exponent `marker[+-]digits` at `i`: its value (saturated) and length.
fn parse_exponent(s: &[u8], i: usize, marker: u8) -> (i64, usize) {
    if (byte_at(s, i) | 0x20) != marker {
        return (0, 0);
    }
    let mut j = i + 1;
    let negative = byte_at(s, j) == b'-';
    if matches!(byte_at(s, j), b'-' | b'+') {
        j += 1;
    }
    let start = j;
    let mut value: i64 = 0;
    while byte_at(s, j).is_ascii_digit() {
        value = (value * 10 + i64::from(byte_at(s, j) - b'0')).min(1_000_000_000);
        j += 1;
    }
    if j == start {
        return (0, 0);
    }
    (if negative { -value } else { value }, j - i)
}

/// The double nearest to `mantissa * 2^exponent` (+ a nonzero tail if `sticky`),
/// ties to even, with gradual underflow and overflow to infinity.
fn compose_binary(mantissa: u64, exponent: i64, sticky: bool) -> f64 {
    if mantissa == 0 {
        return 0.0;
    }
    let bits = i64::from(64 - mantissa.leading_zeros());
    let top = exponent + bits - 1;
    if top > 1023 {
        return f64::INFINITY;
    }
    let mut lsb = (top - 52).max(-1074);
    let shift = lsb - exponent;
    let mut kept: u64 = if shift <= 0 {
        mantissa << (-shift)
    } else if shift > 65 {
        0
    } else {
        let wide = u128::from(mantissa);
        let kept = wide >> shift;
        let rest = wide & ((1u128 << shift) - 1);
        let half = 1u128 << (shift - 1);
        let round_up = rest > half || (rest == half && (sticky || kept & 1 == 1));
        (kept + u128::from(round_up)) as u64
    };
    if kept == 1u64 << 53 {
        kept >>= 1;
        lsb += 1;
    }
    build_double(kept, lsb)
}

/// Assembles `kept * 2^lsb` where `kept` has 53 significant bits, or fewer for a
/// subnormal (`lsb == -1074`).
fn build_double(kept: u64, lsb: i64) -> f64 {
    if kept < (1u64 << 52) {
        return f64::from_bits(kept);
    }
    let biased = lsb + 52 + 1023;
    if biased >= 2047 {
        return f64::INFINITY;
    }
    f64::from_bits(((biased as u64) << 52) | (kept & ((1u64 << 52) - 1)))
}

/// Decimal: digits with an optional fraction (at least one digit in all) and an
/// optional exponent "e[+-]digits".
fn parse_decimal(s: &[u8]) -> Option<(f64, usize)> {
    let int_digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    let mut end = int_digits;
    let mut frac_digits = 0;
    if byte_at(s, end) == b'.' {
        frac_digits = s
            .get(end + 1..)
            .unwrap_or(&[])
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if int_digits + frac_digits > 0 {
            end += 1 + frac_digits;
        }
    }
    if int_digits + frac_digits == 0 {
        return None;
    }
    let (_, exponent_len) = parse_exponent(s, end, b'e');
    end += exponent_len;
    let text = std::str::from_utf8(s.get(..end)?).ok()?;
    let value = text.parse::<f64>().ok()?;
    Some((value, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(x: f64, p: usize) -> String {
        let mut out = Vec::new();
        format_g(&mut out, x, p);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn formats_like_printf_g() {
        assert_eq!(g(0.1, 14), "0.1");
        assert_eq!(g(1e15, 14), "1e+15");
        assert_eq!(g(1e-5, 14), "1e-05");
        assert_eq!(g(-0.0, 14), "-0");
        assert_eq!(g(123456789012345.0, 14), "1.2345678901234e+14");
        assert_eq!(g(0.125, 2), "0.12");
        assert_eq!(g(9.5, 1), "1e+01");
        assert_eq!(g(5e-324, 14), "4.9406564584125e-324");
    }

    #[test]
    fn parses_like_strtod() {
        assert_eq!(strtod(b"0x1p4"), (16.0, 5));
        assert_eq!(strtod(b"0x"), (0.0, 1));
        assert_eq!(strtod(b"1e"), (1.0, 1));
        assert_eq!(strtod(b"-.5x"), (-0.5, 3));
        assert_eq!(strtod(b"nan(1").1, 3);
        assert_eq!(strtod(b"1.e5"), (100000.0, 4));
        assert_eq!(strtod(b"infinit").1, 3);
        assert_eq!(strtod(b"+-1"), (0.0, 0));
        assert_eq!(strtod(b"0x1p-1075").0, 0.0);
        assert_eq!(strtod(b"0x1.8p-1075").0, 5e-324);
        assert_eq!(strtod(b"nan(123)").0.to_bits(), 0x7ff8_0000_0000_007b);
    }
}
