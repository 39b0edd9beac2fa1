//! The elastic settings as the controller reads them: memory mode, reserve (bytes or a percent of host RAM),
//! pool bounds, grow rate, poll interval and the reclaim-path threshold. `Config` stores the typed values;
//! `Config::elastic_settings` takes the snapshot the controller works with on one step.
use crate::units::parse_bytes;
use serde::Deserialize;

/// Whether the pool follows the host (elastic) or is capped by `maxmemory` (fixed, Redis-style).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryMode {
    #[default]
    Elastic,
    Fixed,
}

impl MemoryMode {
    pub fn from_name(name: &str) -> Option<MemoryMode> {
        match name.to_ascii_lowercase().as_str() {
            "elastic" => Some(MemoryMode::Elastic),
            "fixed" => Some(MemoryMode::Fixed),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MemoryMode::Elastic => "elastic",
            MemoryMode::Fixed => "fixed",
        }
    }
}

/// Memory left to the host: a byte figure or a percent of the host's total memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reserve {
    Bytes(u64),
    Percent(f64),
}

impl Default for Reserve {
    fn default() -> Self {
        Reserve::Percent(10.0)
    }
}

impl Reserve {
    /// `10%`, `2.5%`, `2gb`, `1073741824`. Percents are 0 to below 100.
    pub fn parse(text: &str) -> Result<Reserve, String> {
        let text = text.trim();
        let Some(number) = text.strip_suffix('%') else {
            return parse_bytes(text).map(Reserve::Bytes);
        };
        let percent: f64 = number
            .trim()
            .parse()
            .map_err(|_| format!("invalid percent '{text}'"))?;
        if !(0.0..100.0).contains(&percent) {
            return Err(format!("reserve percent '{text}' must be 0 to below 100"));
        }
        Ok(Reserve::Percent(percent))
    }

    /// The reserve in bytes on a host with `total_bytes` of memory.
    pub fn bytes_of(self, total_bytes: u64) -> u64 {
        match self {
            Reserve::Bytes(bytes) => bytes,
            Reserve::Percent(percent) => (total_bytes as f64 * percent / 100.0) as u64,
        }
    }
}

impl std::fmt::Display for Reserve {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reserve::Bytes(bytes) => write!(formatter, "{bytes}"),
            Reserve::Percent(percent) => write!(formatter, "{percent}%"),
        }
    }
}

impl<'de> Deserialize<'de> for Reserve {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        crate::units::deserialize_number_or_text(
            deserializer,
            |bytes| Ok(Reserve::Bytes(bytes)),
            Reserve::parse,
        )
    }
}

/// Largest poll interval: the controller looks at the host at least ten times a second.
pub const POLL_INTERVAL_MS_MAX: u64 = 100;

/// What one controller step works with (a copy of the live configuration).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ElasticSettings {
    pub mode: MemoryMode,
    pub reserve: Reserve,
    pub min_bytes: u64,
    /// 0 = the host's total memory.
    pub max_bytes: u64,
    pub grow_bytes_per_sec: u64,
    pub poll_interval_ms: u64,
    pub reclaim_fast_threshold_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_parses_bytes_and_percent() {
        assert_eq!(Reserve::parse("2gb"), Ok(Reserve::Bytes(2 << 30)));
        assert_eq!(Reserve::parse("10%"), Ok(Reserve::Percent(10.0)));
        assert_eq!(Reserve::parse(" 2.5% "), Ok(Reserve::Percent(2.5)));
        assert!(Reserve::parse("100%").is_err());
        assert!(Reserve::parse("-1%").is_err());
        assert!(Reserve::parse("lots").is_err());
    }

    #[test]
    fn reserve_resolves_against_total() {
        assert_eq!(Reserve::Percent(10.0).bytes_of(10 << 30), 1 << 30);
        assert_eq!(Reserve::Bytes(5).bytes_of(10 << 30), 5);
        assert_eq!(Reserve::Percent(12.5).to_string(), "12.5%");
        assert_eq!(Reserve::Bytes(1024).to_string(), "1024");
    }

    #[test]
    fn modes_by_name() {
        assert_eq!(MemoryMode::from_name("FIXED"), Some(MemoryMode::Fixed));
        assert_eq!(MemoryMode::from_name("elastic"), Some(MemoryMode::Elastic));
        assert_eq!(MemoryMode::from_name("auto"), None);
    }
}
