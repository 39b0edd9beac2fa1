//! Calibration of this machine: the bandwidths available to applications (Krevat §5), written to JSON.
//!
//! Memory (STREAM-like copy and triad), disk (sequential write with fsync, sequential read after dropping
//! the file's cached pages), loopback stream bandwidth (TCP and Unix), and the request rate of a null
//! server, measured through an injected probe so this crate does not depend on the load generator.
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

mod disk;
mod loopback;
pub mod machine;
mod memory;

pub use machine::MachineInfo;

/// Which socket a null-server probe uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    Unix,
}

/// One null-server measurement to make: the load generator drives a null server with these settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NullProbeSpec {
    pub transport: Transport,
    /// "resp" or "memcache".
    pub protocol: String,
    pub connections: usize,
    pub pipeline: usize,
    /// Threads the null server runs (its ceiling is the best over the thread counts tried).
    pub server_threads: usize,
    pub duration_ms: u64,
}

/// Measures a null server's request rate (requests per second) for a spec; provided by fallow-bench so
/// this crate stays free of the load generator.
pub type NullProbe = dyn Fn(&NullProbeSpec) -> anyhow::Result<f64>;

/// The calibration file's format version.
pub const CALIBRATION_VERSION: u32 = 1;

/// Everything `fallow model calibrate` measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Calibration {
    pub version: u32,
    pub machine: MachineInfo,
    pub memory: MemoryCalibration,
    pub disk: DiskCalibration,
    pub loopback: LoopbackCalibration,
    pub null_server: Vec<NullServerPoint>,
}

/// STREAM-style figures: bytes read + written per second. `copy_bytes_per_sec` and `triad_bytes_per_sec`
/// are the better of single-thread and all-thread runs (the model uses these).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryCalibration {
    pub copy_bytes_per_sec: f64,
    pub triad_bytes_per_sec: f64,
    /// Bytes in each of the three arrays.
    pub array_bytes: u64,
    pub llc_bytes: u64,
    pub trials: u32,
    pub threads: usize,
    pub copy_single_thread_bytes_per_sec: f64,
    pub triad_single_thread_bytes_per_sec: f64,
    pub copy_all_threads_bytes_per_sec: f64,
    pub triad_all_threads_bytes_per_sec: f64,
    pub note: String,
}

/// How the disk test file's cached pages were dropped before the read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheDrop {
    DropCaches,
    FadviseDontneed,
    None,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiskCalibration {
    pub dir: String,
    pub file_bytes: u64,
    pub block_bytes: u64,
    pub seq_read_bytes_per_sec: f64,
    pub seq_write_bytes_per_sec: f64,
    pub cache_drop: CacheDrop,
    /// Fraction of the file in the page cache when the read began (from mincore), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resident_fraction_before_read: Option<f64>,
    pub note: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoopbackCalibration {
    pub tcp_stream_bytes_per_sec: f64,
    pub unix_stream_bytes_per_sec: f64,
    pub write_bytes: u64,
    pub duration_ms: u64,
    pub trials: u32,
}

/// One null-server measurement; `requests_per_sec` is missing (null) when the probe failed, with `error`
/// saying why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NullServerPoint {
    pub transport: Transport,
    pub protocol: String,
    pub connections: usize,
    pub pipeline: usize,
    pub server_threads: usize,
    pub requests_per_sec: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl MemoryCalibration {
    /// Bytes a `memcpy` copies per second: half the STREAM copy figure, which counts reads and writes.
    pub fn memcpy_bytes_per_sec(&self) -> f64 {
        self.copy_bytes_per_sec / 2.0
    }
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Unix => "unix",
        }
    }
}

impl LoopbackCalibration {
    pub fn stream_bytes_per_sec(&self, transport: Transport) -> f64 {
        match transport {
            Transport::Tcp => self.tcp_stream_bytes_per_sec,
            Transport::Unix => self.unix_stream_bytes_per_sec,
        }
    }
}

impl Calibration {
    /// Reads a calibration written by `fallow model calibrate`.
    pub fn load(path: &Path) -> Result<Calibration> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "reading the calibration {} (write one with `fallow model calibrate`)",
                path.display()
            )
        })?;
        let calibration: Calibration = serde_json::from_str(&text)
            .with_context(|| format!("parsing the calibration {}", path.display()))?;
        anyhow::ensure!(
            calibration.version == CALIBRATION_VERSION,
            "calibration {} has version {}, this fallow reads version {CALIBRATION_VERSION}",
            path.display(),
            calibration.version
        );
        Ok(calibration)
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("writing the calibration {}", path.display()))
    }
}

/// What to measure and how long.
#[derive(Clone, Debug)]
pub struct CalibrateOptions {
    /// Where the disk test file goes.
    pub dir: PathBuf,
    pub disk_bytes: u64,
    pub disk_block_bytes: usize,
    /// Small sizes and short runs, for tests; the figures are then rough.
    pub quick: bool,
}

impl CalibrateOptions {
    pub fn new(dir: PathBuf, disk_bytes: u64, quick: bool) -> Self {
        CalibrateOptions {
            dir,
            disk_bytes,
            disk_block_bytes: 8 << 20,
            quick,
        }
    }
}

/// The null-server settings the calibration measures: RESP over TCP and Unix and memcached text over TCP,
/// 50 connections (the KV benchmarks' count), pipeline 1 and 16, server threads 1 and 2.
pub fn null_probe_specs(duration_ms: u64) -> Vec<NullProbeSpec> {
    let mut specs = Vec::new();
    for (transport, protocol) in [
        (Transport::Tcp, "resp"),
        (Transport::Unix, "resp"),
        (Transport::Tcp, "memcache"),
    ] {
        for pipeline in [1, 16] {
            for server_threads in [1, 2] {
                specs.push(NullProbeSpec {
                    transport,
                    protocol: protocol.to_string(),
                    connections: 50,
                    pipeline,
                    server_threads,
                    duration_ms,
                });
            }
        }
    }
    specs
}

/// Measures everything, reporting progress lines through `progress`.
pub fn calibrate(
    options: &CalibrateOptions,
    null_probe: &NullProbe,
    progress: &mut dyn FnMut(&str),
) -> Result<Calibration> {
    let machine = MachineInfo::collect();
    let memory = measure_memory(options, machine.cpus, progress);
    let disk = measure_disk(options, progress)?;
    let loopback = measure_loopback(options, progress)?;
    let null_server = measure_null_server(options, null_probe, progress);
    Ok(Calibration {
        version: CALIBRATION_VERSION,
        machine,
        memory,
        disk,
        loopback,
        null_server,
    })
}

fn measure_memory(
    options: &CalibrateOptions,
    cpus: usize,
    progress: &mut dyn FnMut(&str),
) -> MemoryCalibration {
    let detected = memory::last_level_cache_bytes();
    let llc_bytes = detected.unwrap_or(memory::FALLBACK_LLC_BYTES);
    let (array_bytes, trials) = if options.quick {
        (4 << 20, 3)
    } else {
        (memory::array_bytes_for(llc_bytes), 10)
    };
    let mut note = match detected {
        Some(_) => "last-level cache from /sys/devices/system/cpu/cpu0/cache".to_string(),
        None => "last-level cache unknown: assumed 32 MiB".to_string(),
    };
    if options.quick {
        note.push_str("; --quick: arrays smaller than 4 x LLC, figures include cache effects");
    }
    progress(&format!(
        "memory: copy and triad over 3 arrays of {} MiB, best of {trials}, 1 thread",
        array_bytes >> 20
    ));
    let single = memory::measure(array_bytes, 1, trials);
    progress(&format!("memory: the same on {cpus} threads"));
    let all = memory::measure(array_bytes, cpus, trials);
    MemoryCalibration {
        copy_bytes_per_sec: single.copy_bytes_per_sec.max(all.copy_bytes_per_sec),
        triad_bytes_per_sec: single.triad_bytes_per_sec.max(all.triad_bytes_per_sec),
        array_bytes,
        llc_bytes,
        trials,
        threads: cpus,
        copy_single_thread_bytes_per_sec: single.copy_bytes_per_sec,
        triad_single_thread_bytes_per_sec: single.triad_bytes_per_sec,
        copy_all_threads_bytes_per_sec: all.copy_bytes_per_sec,
        triad_all_threads_bytes_per_sec: all.triad_bytes_per_sec,
        note,
    }
}

fn measure_disk(
    options: &CalibrateOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<DiskCalibration> {
    let dir = std::fs::canonicalize(&options.dir)
        .with_context(|| format!("the disk test directory {}", options.dir.display()))?;
    progress(&format!(
        "disk: sequential write of {} MiB in {} MiB blocks with fsync, then read back, in {}",
        options.disk_bytes >> 20,
        options.disk_block_bytes >> 20,
        dir.display()
    ));
    let result = disk::measure(&dir, options.disk_bytes, options.disk_block_bytes)?;
    Ok(DiskCalibration {
        dir: dir.display().to_string(),
        file_bytes: options.disk_bytes,
        block_bytes: options.disk_block_bytes as u64,
        seq_read_bytes_per_sec: result.seq_read_bytes_per_sec,
        seq_write_bytes_per_sec: result.seq_write_bytes_per_sec,
        cache_drop: result.cache_drop,
        resident_fraction_before_read: result.resident_fraction_before_read,
        note: result.note,
    })
}

fn measure_loopback(
    options: &CalibrateOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<LoopbackCalibration> {
    let (duration, trials) = if options.quick {
        (Duration::from_millis(200), 1)
    } else {
        (Duration::from_secs(2), 3)
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    progress(&format!(
        "loopback: TCP and Unix streams, 1 MiB writes, {} ms, 1 and {cpus} streams, best of {trials}",
        duration.as_millis()
    ));
    let mut tcp: f64 = 0.0;
    let mut unix: f64 = 0.0;
    for streams in [1, cpus] {
        tcp = tcp.max(loopback::tcp_bytes_per_sec(duration, trials, streams)?);
        unix = unix.max(loopback::unix_bytes_per_sec(duration, trials, streams)?);
    }
    Ok(LoopbackCalibration {
        tcp_stream_bytes_per_sec: tcp,
        unix_stream_bytes_per_sec: unix,
        write_bytes: loopback::WRITE_BYTES as u64,
        duration_ms: duration.as_millis() as u64,
        trials,
    })
}

/// Runs every probe; a failed probe is recorded as missing with its error rather than ending the run.
fn measure_null_server(
    options: &CalibrateOptions,
    null_probe: &NullProbe,
    progress: &mut dyn FnMut(&str),
) -> Vec<NullServerPoint> {
    let duration_ms = if options.quick { 300 } else { 3000 };
    null_probe_specs(duration_ms)
        .iter()
        .map(|spec| {
            let outcome = null_probe(spec);
            let point = NullServerPoint {
                transport: spec.transport,
                protocol: spec.protocol.clone(),
                connections: spec.connections,
                pipeline: spec.pipeline,
                server_threads: spec.server_threads,
                requests_per_sec: outcome.as_ref().ok().copied(),
                error: outcome.as_ref().err().map(|error| format!("{error:#}")),
            };
            progress(&format!("null server: {}", describe_point(&point)));
            point
        })
        .collect()
}

fn describe_point(point: &NullServerPoint) -> String {
    let settings = format!(
        "{} {} C{} P{} server threads {}",
        point.transport.name(),
        point.protocol,
        point.connections,
        point.pipeline,
        point.server_threads
    );
    match (point.requests_per_sec, &point.error) {
        (Some(rate), _) => format!("{settings}: {rate:.0} requests/s"),
        (None, Some(error)) => format!("{settings}: missing ({error})"),
        (None, None) => format!("{settings}: missing"),
    }
}

/// A human summary of a calibration.
pub fn summary(calibration: &Calibration) -> String {
    use crate::units::{format_bytes, format_mb_per_sec};
    let machine = &calibration.machine;
    let memory = &calibration.memory;
    let disk = &calibration.disk;
    let loopback = &calibration.loopback;
    let mut lines = vec![
        format!(
            "machine: {} ({}, {} CPUs, {}, kernel {}), {}",
            machine.hostname,
            machine.cpu_model,
            machine.cpus,
            format_bytes(machine.mem_total_bytes as f64),
            machine.kernel,
            machine.date_utc
        ),
        format!(
            "memory (STREAM counting, read + write; arrays {} MiB, LLC {} KiB, best of {}):",
            memory.array_bytes >> 20,
            memory.llc_bytes >> 10,
            memory.trials
        ),
        format!(
            "  copy  {} (1 thread {}, {} threads {})",
            format_mb_per_sec(memory.copy_bytes_per_sec),
            format_mb_per_sec(memory.copy_single_thread_bytes_per_sec),
            memory.threads,
            format_mb_per_sec(memory.copy_all_threads_bytes_per_sec)
        ),
        format!(
            "  triad {} (1 thread {}, {} threads {})",
            format_mb_per_sec(memory.triad_bytes_per_sec),
            format_mb_per_sec(memory.triad_single_thread_bytes_per_sec),
            memory.threads,
            format_mb_per_sec(memory.triad_all_threads_bytes_per_sec)
        ),
        format!(
            "disk ({}, {} MiB file, {} MiB blocks): write {} with fsync, read {}",
            disk.dir,
            disk.file_bytes >> 20,
            disk.block_bytes >> 20,
            format_mb_per_sec(disk.seq_write_bytes_per_sec),
            format_mb_per_sec(disk.seq_read_bytes_per_sec)
        ),
        format!("  {}", disk.note),
        format!(
            "loopback: TCP {}, Unix {}",
            format_mb_per_sec(loopback.tcp_stream_bytes_per_sec),
            format_mb_per_sec(loopback.unix_stream_bytes_per_sec)
        ),
        "null server (requests/s):".to_string(),
    ];
    lines.extend(
        calibration
            .null_server
            .iter()
            .map(|point| format!("  {}", describe_point(point))),
    );
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fallow-model-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn fake_probe(spec: &NullProbeSpec) -> Result<f64> {
        match spec.transport {
            Transport::Unix => anyhow::bail!("no unix null server in this test"),
            Transport::Tcp => Ok(1000.0 * spec.pipeline as f64 * spec.server_threads as f64),
        }
    }

    #[test]
    fn quick_calibration_measures_plausible_figures() {
        let dir = temp_dir("calibrate");
        let options = CalibrateOptions::new(dir.clone(), 8 << 20, true);
        let mut lines = Vec::new();
        let calibration = calibrate(&options, &fake_probe, &mut |line| {
            lines.push(line.to_string())
        })
        .unwrap();
        // Plausible for any machine that can run the tests: memory faster than 100 MB/s, disk and loopback
        // faster than 1 MB/s, and below 10 TB/s.
        let memory = &calibration.memory;
        for rate in [memory.copy_bytes_per_sec, memory.triad_bytes_per_sec] {
            assert!(rate > 1e8 && rate < 1e13, "memory {rate}");
        }
        assert!(memory.copy_bytes_per_sec >= memory.copy_single_thread_bytes_per_sec);
        for rate in [
            calibration.disk.seq_read_bytes_per_sec,
            calibration.disk.seq_write_bytes_per_sec,
            calibration.loopback.tcp_stream_bytes_per_sec,
            calibration.loopback.unix_stream_bytes_per_sec,
        ] {
            assert!(rate > 1e6 && rate < 1e13, "rate {rate}");
        }
        assert_eq!(calibration.null_server.len(), 12);
        let failed = calibration
            .null_server
            .iter()
            .filter(|point| point.transport == Transport::Unix);
        for point in failed {
            assert_eq!(point.requests_per_sec, None);
            assert!(point
                .error
                .as_deref()
                .unwrap()
                .contains("no unix null server"));
        }
        assert!(
            lines.iter().any(|line| line.starts_with("disk:")),
            "{lines:?}"
        );
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "the disk test file is deleted"
        );
        std::fs::remove_dir(&dir).unwrap();
        assert!(summary(&calibration).contains("missing (no unix null server"));
    }

    #[test]
    fn calibration_json_round_trips() {
        let calibration = crate::test_support::synthetic_calibration();
        let dir = temp_dir("roundtrip");
        let path = dir.join("calibration.json");
        calibration.save(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        // The contract's names, as other tools read them.
        for name in [
            "\"copy_bytes_per_sec\"",
            "\"seq_read_bytes_per_sec\"",
            "\"cache_drop\": \"fadvise_dontneed\"",
            "\"tcp_stream_bytes_per_sec\"",
            "\"transport\": \"tcp\"",
            "\"requests_per_sec\": null",
        ] {
            assert!(text.contains(name), "{name} missing from {text}");
        }
        let loaded = Calibration::load(&path).unwrap();
        assert_eq!(
            serde_json::to_value(&loaded).unwrap(),
            serde_json::to_value(&calibration).unwrap()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_wrong_version_or_missing_file_is_a_clear_error() {
        let dir = temp_dir("version");
        let path = dir.join("calibration.json");
        let mut calibration = crate::test_support::synthetic_calibration();
        calibration.version = 99;
        calibration.save(&path).unwrap();
        assert!(format!("{:#}", Calibration::load(&path).unwrap_err()).contains("version 99"));
        let missing = Calibration::load(&dir.join("none.json")).unwrap_err();
        assert!(format!("{missing:#}").contains("fallow model calibrate"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
