//! What machine a figure was taken on: read from /proc, no external commands.
use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};

/// The machine block of every JSON record (calibration and fallow-bench runs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineInfo {
    pub hostname: String,
    pub kernel: String,
    pub cpus: usize,
    pub cpu_model: String,
    pub mem_total_bytes: u64,
    /// ISO 8601, e.g. `2026-05-01T12:34:56Z`.
    pub date_utc: String,
}

impl MachineInfo {
    /// Collects the figures; anything unreadable becomes "unknown" (or 0) rather than an error, since a
    /// missing /proc entry should not stop a measurement.
    pub fn collect() -> MachineInfo {
        MachineInfo {
            hostname: read_trimmed("/proc/sys/kernel/hostname"),
            kernel: read_trimmed("/proc/sys/kernel/osrelease"),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: cpu_model(),
            mem_total_bytes: mem_total_bytes(),
            date_utc: utc_now(),
        }
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map_or_else(|_| "unknown".to_string(), |text| text.trim().to_string())
}

fn cpu_model() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    cpuinfo
        .lines()
        .find(|line| line.starts_with("model name"))
        .and_then(|line| line.split_once(':'))
        .map_or_else(
            || "unknown".to_string(),
            |(_, model)| model.trim().to_string(),
        )
}

fn mem_total_bytes() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    kib_field_bytes(&meminfo, "MemTotal").unwrap_or(0)
}

/// The bytes of a `Key:   N kB` line of a /proc file such as meminfo or status.
pub fn kib_field_bytes(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib * 1024)
    })
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(seconds)
}

/// Seconds since the epoch as ISO 8601 UTC (Howard Hinnant's days-to-civil algorithm).
pub fn format_utc(epoch_seconds: u64) -> String {
    let days = (epoch_seconds / 86_400) as i64;
    let second_of_day = epoch_seconds % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    assert!(
        (1..=12).contains(&month) && (1..=31).contains(&day),
        "a civil date has a month in 1..=12 and a day in 1..=31: {year}-{month}-{day}"
    );
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_700_000_000), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn this_machine_is_described() {
        let info = MachineInfo::collect();
        assert!(info.cpus >= 1);
        assert!(info.mem_total_bytes > 0, "{info:?}");
        assert!(info.date_utc.ends_with('Z'));
    }
}
