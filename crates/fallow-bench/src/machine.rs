//! What machine a result was measured on, read from /proc so records from different hosts can be told
//! apart.
use serde::Serialize;

/// The machine part of every JSON record.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct MachineInfo {
    pub hostname: String,
    /// Kernel name and release, e.g. "Linux 6.8.0-45-generic".
    pub kernel: String,
    /// Online CPUs.
    pub cpus: usize,
    pub cpu_model: String,
    pub mem_total_bytes: u64,
    /// When the record was made, ISO 8601 in UTC.
    pub date_utc: String,
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl MachineInfo {
    pub fn collect() -> MachineInfo {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        MachineInfo {
            hostname: read_trimmed("/proc/sys/kernel/hostname"),
            kernel: format!(
                "{} {}",
                read_trimmed("/proc/sys/kernel/ostype"),
                read_trimmed("/proc/sys/kernel/osrelease")
            )
            .trim()
            .to_string(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: cpu_model(&cpuinfo),
            mem_total_bytes: mem_total_bytes(&meminfo),
            date_utc: iso8601_utc(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
            ),
        }
    }
}

/// The first "model name" in /proc/cpuinfo (falls back to "unknown", e.g. on some ARM kernels).
fn cpu_model(cpuinfo: &str) -> String {
    cpuinfo
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == "model name").then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// MemTotal from /proc/meminfo, in bytes.
fn mem_total_bytes(meminfo: &str) -> u64 {
    meminfo
        .lines()
        .find_map(|line| {
            let rest = line.strip_prefix("MemTotal:")?;
            let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(0)
}

/// Formats seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn iso8601_utc(epoch_s: u64) -> String {
    let days = (epoch_s / 86_400) as i64;
    let secs = epoch_s % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Howard Hinnant's days-to-civil conversion (proleptic Gregorian calendar).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_format_in_utc() {
        assert_eq!(iso8601_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(iso8601_utc(1_700_000_000), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn proc_files_parse() {
        let cpuinfo = "processor\t: 0\nmodel name\t: Example CPU @ 2.00GHz\n";
        assert_eq!(cpu_model(cpuinfo), "Example CPU @ 2.00GHz");
        assert_eq!(cpu_model(""), "unknown");
        assert_eq!(
            mem_total_bytes("MemTotal:       16384 kB\nMemFree: 1 kB\n"),
            16384 * 1024
        );
    }

    #[test]
    fn this_machine_has_cpus_and_memory() {
        let info = MachineInfo::collect();
        assert!(info.cpus >= 1);
        assert!(info.mem_total_bytes > 0);
        assert!(info.kernel.starts_with("Linux"));
    }
}
