//! fio as the workload: jobs given on the command line (`--name=` starts a job; options before the first
//! apply to all), run inside the device's cgroups, JSON output parsed into per-job read/write figures.
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

use super::device::Device;

/// One fio job: its name and `key=value` options.
#[derive(Clone, Debug, Serialize)]
pub struct Job {
    pub name: String,
    pub options: Vec<String>,
}

impl Job {
    pub fn new(name: &str, options: &[&str]) -> Job {
        Job {
            name: name.to_string(),
            options: options.iter().map(|o| o.to_string()).collect(),
        }
    }

    pub fn with(mut self, option: String) -> Job {
        self.options.push(option);
        self
    }
}

/// Read or write figures of one job (latencies per read/write call, microseconds).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Direction {
    pub bytes: u64,
    pub ios: u64,
    pub runtime_s: f64,
    pub bytes_per_s: f64,
    pub lat_mean_us: f64,
    pub lat_p50_us: f64,
    pub lat_p99_us: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct JobResult {
    pub name: String,
    pub read: Direction,
    pub write: Direction,
}

/// A whole fio run: the jobs' figures and the wall time of the run.
#[derive(Clone, Debug, Serialize)]
pub struct FioRun {
    pub jobs: Vec<JobResult>,
    pub wall_s: f64,
}

impl FioRun {
    pub fn read_bytes(&self) -> u64 {
        self.jobs.iter().map(|j| j.read.bytes).sum()
    }

    pub fn write_bytes(&self) -> u64 {
        self.jobs.iter().map(|j| j.write.bytes).sum()
    }

    /// Read bytes over the longest read runtime: the jobs ran side by side.
    pub fn read_bytes_per_s(&self) -> f64 {
        let runtime = self
            .jobs
            .iter()
            .map(|j| j.read.runtime_s)
            .fold(0.0, f64::max);
        if runtime > 0.0 {
            self.read_bytes() as f64 / runtime
        } else {
            0.0
        }
    }

    /// The read latency of all jobs: mean weighted by reads, the p50/p99 of the job with most reads (fio
    /// reports percentiles per job; the OLTP jobs are alike, so one stands for all).
    pub fn read_latency(&self) -> Direction {
        let ios: u64 = self.jobs.iter().map(|j| j.read.ios).sum();
        let mut merged = self
            .jobs
            .iter()
            .max_by_key(|j| j.read.ios)
            .map(|j| j.read.clone())
            .unwrap_or_default();
        if ios > 0 {
            merged.lat_mean_us = self
                .jobs
                .iter()
                .map(|j| j.read.lat_mean_us * j.read.ios as f64)
                .sum::<f64>()
                / ios as f64;
        }
        merged.bytes = self.read_bytes();
        merged.ios = ios;
        merged.bytes_per_s = self.read_bytes_per_s();
        merged
    }
}

/// Runs fio with `global` options and `jobs` inside the device's groups; `log_prefix` asks for per-second
/// bandwidth logs (`PREFIX_bw.N.log`, N = job index from 1).
pub fn run(
    device: &Device,
    global: &[String],
    jobs: &[Job],
    log_prefix: Option<&Path>,
) -> anyhow::Result<FioRun> {
    let args = command_line(global, jobs, log_prefix);
    let started = std::time::Instant::now();
    let output = device
        .command(Path::new("fio"), &args)
        .stdin(Stdio::null())
        .output()
        .context("running fio (is it installed?)")?;
    let wall_s = started.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "fio {} failed ({}): {}{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim(),
            stdout.trim()
        );
    }
    let jobs = parse(&stdout).context("parsing fio's JSON")?;
    Ok(FioRun { jobs, wall_s })
}

/// fio's arguments for `global` options and `jobs` (see [`run`]).
fn command_line(global: &[String], jobs: &[Job], log_prefix: Option<&Path>) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--output-format=json".into(),
        "--ioengine=psync".into(),
        "--invalidate=0".into(),
    ];
    if let Some(prefix) = log_prefix {
        args.push(format!("--write_bw_log={}", prefix.display()));
        args.push("--log_avg_msec=1000".into());
    }
    args.extend(global.iter().cloned());
    for job in jobs {
        args.push(format!("--name={}", job.name));
        args.extend(job.options.iter().map(|o| format!("--{o}")));
    }
    args
}

/// fio running `jobs` in the background, inside the device's groups, for a load nobody measures (a
/// warm-up); [`Background::stop`] ends it.
pub struct Background {
    child: Child,
}

impl Background {
    pub fn start(device: &Device, jobs: &[Job]) -> anyhow::Result<Background> {
        let child = device
            .command(Path::new("fio"), &command_line(&[], jobs, None))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting fio (is it installed?)")?;
        Ok(Background { child })
    }

    /// Err when fio has exited on its own before being stopped (a bad job, a read error).
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            let mut stderr = String::new();
            if let Some(mut pipe) = self.child.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr);
            }
            bail!("background fio exited early ({status}): {}", stderr.trim());
        }
        Ok(())
    }

    /// SIGINT (fio stops its jobs and exits), then SIGKILL if it has not exited within `STOP_WAIT`.
    pub fn stop(mut self) -> anyhow::Result<()> {
        const STOP_WAIT: Duration = Duration::from_secs(30);
        // SAFETY: kill(2) on our own child's pid, which is not reaped yet (try_wait has not seen it exit).
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let started = Instant::now();
        while self.child.try_wait()?.is_none() {
            if started.elapsed() > STOP_WAIT {
                self.child.kill()?;
                self.child.wait()?;
                bail!("background fio ignored SIGINT for {STOP_WAIT:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The jobs of fio's JSON output (text before the first `{`, such as warnings, is skipped).
pub fn parse(text: &str) -> anyhow::Result<Vec<JobResult>> {
    let start = text.find('{').context("no JSON in fio's output")?;
    let value: serde_json::Value = serde_json::from_str(&text[start..])?;
    let jobs = value["jobs"].as_array().context("no jobs array")?;
    jobs.iter()
        .map(|job| {
            Ok(JobResult {
                name: job["jobname"].as_str().unwrap_or("?").to_string(),
                read: direction(&job["read"]),
                write: direction(&job["write"]),
            })
        })
        .collect()
}

fn direction(value: &serde_json::Value) -> Direction {
    let number = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    let clat = &value["clat_ns"];
    let percentile = |key: &str| number(&clat["percentile"][key]) / 1000.0;
    let runtime_s = number(&value["runtime"]) / 1000.0;
    let bytes = value["io_bytes"].as_u64().unwrap_or(0);
    Direction {
        bytes,
        ios: value["total_ios"].as_u64().unwrap_or(0),
        runtime_s,
        bytes_per_s: if runtime_s > 0.0 {
            bytes as f64 / runtime_s
        } else {
            0.0
        },
        lat_mean_us: number(&clat["mean"]) / 1000.0,
        lat_p50_us: percentile("50.000000"),
        lat_p99_us: percentile("99.000000"),
    }
}

/// Per-second bytes/s summed over the given jobs' bandwidth logs (`PREFIX_bw.N.log`, KiB/s per line).
pub fn per_second(prefix: &Path, job_indexes: &[usize]) -> anyhow::Result<Vec<f64>> {
    let mut seconds: Vec<f64> = Vec::new();
    for index in job_indexes {
        let path = PathBuf::from(format!("{}_bw.{index}.log", prefix.display()));
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        for (second, kib_per_s) in parse_bw_log(&text) {
            if seconds.len() <= second {
                seconds.resize(second + 1, 0.0);
            }
            seconds[second] += kib_per_s * 1024.0;
        }
    }
    Ok(seconds)
}

/// (second index, KiB/s) of each line `msec, value, direction, ...` of a read (direction 0) log: the line at
/// about 1000 ms covers second 0.
pub fn parse_bw_log(text: &str) -> Vec<(usize, f64)> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            let msec: u64 = fields.first()?.parse().ok()?;
            let value: f64 = fields.get(1)?.parse().ok()?;
            let direction: u32 = fields.get(2)?.parse().ok()?;
            // Rounded: entries come at about n x 1000 ms, a few ms either side.
            let second = ((msec + 500) / 1000).saturating_sub(1) as usize;
            (direction == 0).then_some((second, value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"note: both iodepth >= 1 and synchronous I/O engine are selected
{ "jobs": [ { "jobname": "r0",
  "read": { "io_bytes": 1048576, "total_ios": 256, "runtime": 500,
            "clat_ns": { "mean": 2000000.0, "percentile": { "50.000000": 1500000, "99.000000": 9000000 } } },
  "write": { "io_bytes": 0, "total_ios": 0, "runtime": 0, "clat_ns": { "mean": 0.0 } } },
  { "jobname": "r1",
  "read": { "io_bytes": 3145728, "total_ios": 768, "runtime": 1000,
            "clat_ns": { "mean": 1000000.0, "percentile": { "50.000000": 800000, "99.000000": 5000000 } } },
  "write": { "io_bytes": 0, "total_ios": 0, "runtime": 0 } } ] }"#;

    #[test]
    fn fio_json_is_parsed_per_job() {
        let jobs = parse(SAMPLE).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].read.bytes, 1 << 20);
        assert!((jobs[0].read.bytes_per_s - 2.0 * (1 << 20) as f64).abs() < 1.0);
        assert!((jobs[0].read.lat_p99_us - 9000.0).abs() < 1e-9);
        let run = FioRun { jobs, wall_s: 1.0 };
        assert_eq!(run.read_bytes(), 4 << 20);
        let latency = run.read_latency();
        // (256 x 2000 + 768 x 1000) / 1024 us
        assert!((latency.lat_mean_us - 1250.0).abs() < 1e-9);
        assert!((latency.lat_p50_us - 800.0).abs() < 1e-9);
        assert!((run.read_bytes_per_s() - (4 << 20) as f64).abs() < 1.0);
    }

    #[test]
    fn bandwidth_logs_are_bucketed_by_second() {
        let text =
            "1000, 2048, 0, 0, 0\n1998, 1024, 0, 0, 0\n2000, 512, 1, 0, 0\n3004, 8, 0, 0, 0\nbad\n";
        assert_eq!(parse_bw_log(text), vec![(0, 2048.0), (1, 1024.0), (2, 8.0)]);
    }

    #[test]
    fn output_without_json_is_an_error() {
        assert!(parse("fio: no such file").is_err());
    }
}
