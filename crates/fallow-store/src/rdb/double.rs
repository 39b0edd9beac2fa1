//! Mirrors the double <-> text helpers Redis 7.0.15 uses for sorted-set
//! scores: `double2ll` and `d2string` from `src/util.c` (how zzlInsertAt turns
//! a score into a listpack entry), strtod as used by zzlStrtod when reading
//! one back, and rdbLoadDoubleValue's length-prefixed text doubles of the old
//! RDB_TYPE_ZSET (3).
//!
//! d2string: "nan", "inf", "-inf", "0" / "-0" for zeros, the integer digits
//! when double2ll succeeds, otherwise printf("%.17g"). zzlInsertAt itself
//! stores a score that double2ll accepts as a listpack integer
//! (lpAppendInteger), so only the "%.17g", "inf" and "-inf" forms reach a
//! listpack as text.
//!
//! Differences: text parsing uses Rust's f64 parser, which accepts the forms
//! Redis writes ("1.5", "1e+300", "inf", "-inf", "0.1") with the same correctly
//! rounded result as glibc strtod, but not strtod's hexadecimal floats or
//! leading whitespace; NaN is rejected (Redis refuses NaN scores).

/// `double2ll`: the value as an i64 when it is integral and |v| <= 2^62.
pub fn exact_i64(value: f64) -> Option<i64> {
    const LIMIT: f64 = (i64::MAX / 2) as f64;
    if !(-LIMIT..=LIMIT).contains(&value) {
        return None;
    }
    let truncated = value as i64;
    (truncated as f64 == value).then_some(truncated)
}

/// `printf("%.17g", value)` for a finite value.
pub fn format_g17(value: f64) -> String {
    const PRECISION: i32 = 17;
    let scientific = format!("{:.*e}", (PRECISION - 1) as usize, value);
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("{:e} output has an exponent");
    let exponent: i32 = exponent.parse().expect("{:e} exponent is an integer");
    if !(-4..PRECISION).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        let mantissa = strip_fraction_zeros(mantissa);
        format!("{mantissa}e{sign}{:02}", exponent.unsigned_abs())
    } else {
        let decimals = (PRECISION - 1 - exponent) as usize;
        strip_fraction_zeros(&format!("{value:.decimals$}")).to_string()
    }
}

fn strip_fraction_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

/// `d2string` for values that are not integral (the text zzlInsertAt
/// stores for a score `exact_i64` rejects).
pub fn score_text(value: f64) -> String {
    if value.is_nan() {
        "nan".to_string()
    } else if value.is_infinite() {
        if value < 0.0 { "-inf" } else { "inf" }.to_string()
    } else {
        format_g17(value)
    }
}

/// Parses a score stored as text; `None` for anything that is not a number
/// (NaN included).
pub fn parse_score(text: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(text).ok()?;
    let value: f64 = text.parse().ok()?;
    (!value.is_nan()).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g17_matches_printf() {
        let cases: [(f64, &str); 12] = [
            (1.5, "1.5"),
            (0.1, "0.10000000000000001"),
            (1e300, "1.0000000000000001e+300"),
            (1e-300, "1e-300"),
            (-2.5e-5, "-2.5000000000000001e-05"),
            (123456.789, "123456.789"),
            (1e16 + 0.5, "10000000000000000"),
            (1e17, "1e+17"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (4.611686018427388e18 * 2.0, "9.2233720368547758e+18"),
            (f64::MAX, "1.7976931348623157e+308"),
        ];
        for (value, expected) in cases {
            assert_eq!(format_g17(value), expected, "{value:e}");
        }
    }

    #[test]
    fn double2ll_range() {
        assert_eq!(exact_i64(-0.0), Some(0));
        assert_eq!(exact_i64(4_611_686_018_427_387_904.0), Some(1 << 62));
        assert_eq!(exact_i64(9_223_372_036_854_775_807.0), None);
        assert_eq!(exact_i64(1.5), None);
        assert_eq!(exact_i64(f64::INFINITY), None);
        assert_eq!(exact_i64(f64::NAN), None);
    }

    #[test]
    fn parses_redis_score_text() {
        assert_eq!(parse_score(b"inf"), Some(f64::INFINITY));
        assert_eq!(parse_score(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_score(b"1.0000000000000001e+300"), Some(1e300));
        assert_eq!(parse_score(b"nan"), None);
        assert_eq!(parse_score(b"abc"), None);
    }
}
