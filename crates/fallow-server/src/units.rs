//! Units and their spellings, shared by the configuration, CONFIG SET, INFO and the settings of each
//! part: byte sizes as Redis writes them (`10kb`, `2gb`), numbers-or-text in the TOML file, yes/no. A leaf.
use serde::Deserialize;

/// Parses a memory size the way Redis's memtoll does: `1024`, `10k` (1000), `10kb` (1024), `mb`, `gb`.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let split = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(split);
    let multiplier: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return Err(format!("invalid memory size '{text}'")),
    };
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("invalid memory size '{text}'"))?;
    value
        .checked_mul(multiplier)
        .ok_or_else(|| format!("memory size '{text}' is too large"))
}

/// A setting the TOML file may give as a number or as text (`"2gb"`, `"10%"`, `"770"`): each form goes
/// through its own conversion, and a bad value is the file's error.
pub fn deserialize_number_or_text<'de, D, T>(
    deserializer: D,
    from_number: impl FnOnce(u64) -> Result<T, String>,
    from_text: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(u64),
        Text(String),
    }
    match Raw::deserialize(deserializer)? {
        Raw::Number(number) => from_number(number),
        Raw::Text(text) => from_text(&text),
    }
    .map_err(serde::de::Error::custom)
}

/// A flag as Redis's CONFIG GET and INFO spell it.
pub fn yes_no(value: bool) -> &'static str {
    if value {
        "yes"
    } else {
        "no"
    }
}

/// Bytes as Redis's bytesToHuman writes them: `512B`, `1.50K`, `2.00M`, `1.00G`.
pub fn human_bytes(bytes: usize) -> String {
    const UNITS: [(f64, &str); 5] = [
        (1024.0, "K"),
        (1048576.0, "M"),
        (1073741824.0, "G"),
        (1099511627776.0, "T"),
        (1125899906842624.0, "P"),
    ];
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    let value = bytes as f64;
    let (divisor, unit) = UNITS
        .iter()
        .rev()
        .find(|(divisor, _)| value >= *divisor)
        .copied()
        .unwrap_or(UNITS[0]);
    format!("{:.2}{unit}", value / divisor)
}

/// Comma-separated numeric user ids ("" is none), as `shm-allowed-uids` takes them.
pub fn parse_uid_list(text: &str) -> Result<Vec<u32>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| {
            part.parse::<u32>()
                .map_err(|_| format!("'{part}' is not a numeric user id"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_like_redis() {
        assert_eq!(human_bytes(0), "0B");
        assert_eq!(human_bytes(1023), "1023B");
        assert_eq!(human_bytes(1536), "1.50K");
        assert_eq!(human_bytes(100 << 20), "100.00M");
        assert_eq!(human_bytes(3 << 30), "3.00G");
    }
}
