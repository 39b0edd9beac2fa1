//! Byte sizes and rates as people write them, and as the paper means them.
//!
//! The paper's figures only come out with *decimal* units: 1 MB = 10^6 bytes, 1 TB = 10^12, 1 PB = 10^15,
//! and disk/network speeds in MB/s = 10^6 bytes/s (e.g. Hadoop TeraSort: 10^12 / 1460 bytes per node at
//! 110 MB/s gives 8.86 s; with binary units it would not). Binary units (KiB, MiB, GiB, TiB, PiB) are
//! accepted too and mean powers of 1024.
use anyhow::{bail, Context, Result};

/// One megabyte as the paper uses it (decimal).
pub const MB: f64 = 1e6;

/// Decimal and binary multipliers, matched case-insensitively against the suffix.
const UNITS: &[(&str, f64)] = &[
    ("b", 1.0),
    ("kb", 1e3),
    ("mb", 1e6),
    ("gb", 1e9),
    ("tb", 1e12),
    ("pb", 1e15),
    ("kib", 1024.0),
    ("mib", 1048576.0),
    ("gib", 1073741824.0),
    ("tib", 1099511627776.0),
    ("pib", 1125899906842624.0),
];

/// Parses a byte size: `1TB`, `250GB`, `4GiB`, `1.5 MB`, `1048576` (raw bytes). Decimal units are powers of
/// 1000, `..iB` units powers of 1024. Fractions of a byte are rounded to the nearest byte.
pub fn parse_size(text: &str) -> Result<u64> {
    let trimmed = text.trim();
    let split_at = trimmed
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(trimmed.len());
    let (number_text, unit_text) = trimmed.split_at(split_at);
    let number: f64 = number_text
        .trim()
        .parse()
        .with_context(|| format!("bad size {text:?}: expected a number with an optional unit (e.g. 1TB, 250GB, 4GiB, 1048576)"))?;
    let unit = unit_text.trim().to_ascii_lowercase();
    let multiplier = if unit.is_empty() {
        1.0
    } else {
        match UNITS.iter().find(|(name, _)| *name == unit) {
            Some((_, multiplier)) => *multiplier,
            None => bail!("bad size {text:?}: unknown unit {unit_text:?} (use B, KB, MB, GB, TB, PB or KiB, MiB, GiB, TiB, PiB)"),
        }
    };
    let bytes = number * multiplier;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        bail!(
            "bad size {text:?}: must be between 0 and {} bytes",
            u64::MAX
        );
    }
    Ok(bytes.round() as u64)
}

/// clap value parser for sizes.
pub fn size_arg(text: &str) -> std::result::Result<u64, String> {
    parse_size(text).map_err(|error| error.to_string())
}

/// clap value parser for a strictly positive, finite number (a rate, a time, a ratio's divisor).
pub fn positive_arg(text: &str) -> std::result::Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(value) if value.is_finite() && value > 0.0 => Ok(value),
        _ => Err(format!("{text:?} is not a positive number")),
    }
}

/// clap value parser for a finite number that is zero or more (e.g. the map output ratio e_M).
pub fn non_negative_arg(text: &str) -> std::result::Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(value) if value.is_finite() && value >= 0.0 => Ok(value),
        _ => Err(format!("{text:?} is not a number >= 0")),
    }
}

/// A byte count in decimal units with 3-4 significant digits: `684.9 MB`, `1 TB`.
pub fn format_bytes(bytes: f64) -> String {
    const STEPS: &[(f64, &str)] = &[
        (1e15, "PB"),
        (1e12, "TB"),
        (1e9, "GB"),
        (1e6, "MB"),
        (1e3, "KB"),
    ];
    assert!(bytes >= 0.0, "a byte count is non-negative: {bytes}");
    for (size, name) in STEPS {
        if bytes >= *size {
            return format!("{} {name}", trim_number(bytes / size, 1));
        }
    }
    format!("{} B", trim_number(bytes, 0))
}

/// A rate in decimal MB/s (the paper's unit): `260 MB/s`, `5320.4 MB/s`.
pub fn format_mb_per_sec(bytes_per_sec: f64) -> String {
    assert!(
        bytes_per_sec >= 0.0,
        "a rate is non-negative: {bytes_per_sec} B/s"
    );
    format!("{} MB/s", trim_number(bytes_per_sec / MB, 1))
}

/// Seconds the way the paper prints them: 3 significant digits below 1000 s (8.86, 10.4, 6.94), whole
/// seconds above (6818).
pub fn format_seconds(seconds: f64) -> String {
    if seconds == 0.0 || !seconds.is_finite() {
        return format!("{seconds}");
    }
    if seconds >= 100.0 {
        return format!("{seconds:.0}");
    }
    let digits_before_point = seconds.abs().log10().floor() as i32 + 1;
    let decimals = (3 - digits_before_point).clamp(0, 12) as usize;
    format!("{seconds:.decimals$}")
}

/// Rounds to `decimals` and drops a trailing `.0`.
fn trim_number(value: f64, decimals: usize) -> String {
    let text = format!("{value:.decimals$}");
    match text.strip_suffix(".0") {
        Some(whole) => whole.to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_decimal_unless_binary_is_asked_for() {
        assert_eq!(parse_size("1TB").unwrap(), 1_000_000_000_000);
        assert_eq!(parse_size("250GB").unwrap(), 250_000_000_000);
        assert_eq!(parse_size("1PB").unwrap(), 1_000_000_000_000_000);
        assert_eq!(parse_size("4GiB").unwrap(), 4 * 1024 * 1024 * 1024);
        assert_eq!(parse_size("1048576").unwrap(), 1_048_576);
        assert_eq!(parse_size("1.5 mb").unwrap(), 1_500_000);
        assert_eq!(parse_size("8MiB").unwrap(), 8 << 20);
        assert_eq!(parse_size("100B").unwrap(), 100);
    }

    #[test]
    fn bad_sizes_are_clear_errors() {
        for bad in ["", "TB", "1XB", "-1GB", "1e30PB", "1 T", "NaN"] {
            let error = parse_size(bad).unwrap_err().to_string();
            assert!(error.contains("bad size"), "{bad:?}: {error}");
        }
    }

    #[test]
    fn seconds_print_like_the_paper() {
        assert_eq!(format_seconds(8.857), "8.86");
        assert_eq!(format_seconds(10.364), "10.4");
        assert_eq!(format_seconds(6.944), "6.94");
        assert_eq!(format_seconds(6817.6), "6818");
        assert_eq!(format_seconds(0.01234), "0.0123");
    }

    #[test]
    fn bytes_and_rates_print_in_decimal_units() {
        assert_eq!(format_bytes(684_931_506.8), "684.9 MB");
        assert_eq!(format_bytes(1e12), "1 TB");
        assert_eq!(format_bytes(512.0), "512 B");
        assert_eq!(format_mb_per_sec(260e6), "260 MB/s");
    }

    #[test]
    #[should_panic(expected = "a byte count is non-negative")]
    fn a_negative_byte_count_panics() {
        format_bytes(-1.0);
    }

    #[test]
    #[should_panic(expected = "a rate is non-negative")]
    fn a_rate_that_is_not_a_number_panics() {
        format_mb_per_sec(f64::NAN);
    }
}
