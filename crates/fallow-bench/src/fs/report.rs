//! The file-cache benchmark's record: every figure in fs.json, the tables in fs.md.
use std::path::Path;

use anyhow::Context;
use serde::Serialize;

use super::bound::OltpBound;
use super::device::IoBytes;
use super::fio::{Direction, FioRun};
use super::items::size_name;
use super::mount::counter;
use super::Settings;
use fallow_model::calibrate::MachineInfo;

/// The device as fio measured it through the throttle (direct I/O).
#[derive(Clone, Debug, Default, Serialize)]
pub struct DeviceMeasured {
    pub rand_4k_iops: f64,
    pub rand_4k_p50_us: f64,
    pub rand_4k_p99_us: f64,
    pub rand_4k_mean_us: f64,
    pub seq_1m_bytes_per_s: f64,
    pub seq_1m_mean_us: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct DeviceRecord {
    pub loop_device: String,
    pub how: &'static str,
    pub measured: Option<DeviceMeasured>,
}

impl DeviceRecord {
    pub fn summary(&self) -> String {
        match &self.measured {
            Some(m) => format!(
                "device {}: 4 KiB random reads {:.0} IOPS, p50 {:.2} ms, p99 {:.1} ms; 1 MiB sequential {:.1} MB/s",
                self.loop_device,
                m.rand_4k_iops,
                m.rand_4k_p50_us / 1000.0,
                m.rand_4k_p99_us / 1000.0,
                m.seq_1m_bytes_per_s / 1e6
            ),
            None => "device not measured".into(),
        }
    }
}

/// One pass of item 1.
#[derive(Clone, Debug, Serialize)]
pub struct SlowcatCase {
    pub name: String,
    /// The level that served the reads.
    pub served_by: String,
    pub read_bytes: u64,
    pub file_bytes: u64,
    pub reads: u64,
    /// Mean time of one 1 MiB read() (ms).
    pub read_mean_ms: f64,
    pub read_p99_ms: f64,
    pub bytes_per_s: f64,
    /// Bytes the pass read from the throttled device.
    pub device_read_bytes: u64,
    /// `fallow fs --stats` growth over the pass.
    pub fs_stats: Option<serde_json::Value>,
    pub note: Option<String>,
}

impl SlowcatCase {
    pub fn summary(&self) -> String {
        format!(
            "slowcat {:<18} {:>8.3} ms per 1 MiB read, {:>7.1} MB/s, {} MiB from the device",
            self.name,
            self.read_mean_ms,
            self.bytes_per_s / 1e6,
            self.device_read_bytes >> 20
        )
    }
}

/// Which level served a run's reads: the workload's bytes, what reached fallow fs (the page cache's misses),
/// what fallow served, and what came from the backing file and the device.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Levels {
    pub workload_read_bytes: u64,
    pub fs_read_bytes: Option<f64>,
    pub fallow_hit_bytes: Option<f64>,
    pub backing_read_bytes: Option<f64>,
    pub device_read_bytes: u64,
}

impl Levels {
    pub fn new(workload: u64, stats: Option<&serde_json::Value>, device: IoBytes) -> Levels {
        Levels {
            workload_read_bytes: workload,
            fs_read_bytes: stats.map(|s| counter(s, "read_bytes")),
            fallow_hit_bytes: stats.map(|s| counter(s, "cache_hit_bytes")),
            backing_read_bytes: stats.map(|s| counter(s, "backing_read_bytes")),
            device_read_bytes: device.read,
        }
    }
}

/// One configuration of item 2.
#[derive(Clone, Debug, Serialize)]
pub struct MatrixRun {
    pub name: String,
    pub policy: String,
    pub pool_bytes: Option<u64>,
    pub fuse: bool,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_bytes_per_s: f64,
    pub wall_s: f64,
    /// Per read() call.
    pub read_latency: Direction,
    pub levels: Levels,
    pub device: IoBytes,
    pub fs_stats: Option<serde_json::Value>,
    /// OLTP: the unmeasured run before (the figures above are the measured run's alone).
    pub warm_up: Option<WarmUp>,
    /// Video: read bandwidth over the no-FUSE run's; OLTP: the no-FUSE run's mean read latency over this.
    pub speedup_vs_no_fuse: Option<f64>,
    /// The same against `--no-cache`.
    pub speedup_vs_no_cache: Option<f64>,
}

impl MatrixRun {
    fn stat(&self, name: &str) -> Option<f64> {
        self.fs_stats.as_ref().map(|s| counter(s, name))
    }

    pub fn summary(&self, workload: &str) -> String {
        let wasted = self
            .stat("prefetch_wasted_bytes")
            .map_or(String::new(), |w| {
                format!(", prefetch wasted {:.0} MiB", w / 1048576.0)
            });
        let warm_up = self.warm_up.as_ref().map_or(String::new(), |w| {
            let full = w
                .pool_full_after_s
                .map_or(String::new(), |f| format!(", pool full after {f:.0} s"));
            format!(" (after {:.0} s of warm-up{full})", w.seconds)
        });
        format!(
            "{workload} {:<16} read {:>7.1} MB/s, latency mean {:.2} ms p50 {:.2} p99 {:.1}, {} MiB from the device{wasted}{warm_up}",
            self.name,
            self.read_bytes_per_s / 1e6,
            self.read_latency.lat_mean_us / 1000.0,
            self.read_latency.lat_p50_us / 1000.0,
            self.read_latency.lat_p99_us / 1000.0,
            self.device.read >> 20
        )
    }
}

/// How long a run warmed up, and when its pool was full (absent: never within the warm-up).
#[derive(Clone, Debug, Default, Serialize)]
pub struct WarmUp {
    pub seconds: f64,
    pub pool_full_after_s: Option<f64>,
    /// Reads that reached `fallow fs` during the warm-up (a small file may be all page-cache hits after).
    pub fs_reads: Option<f64>,
}

/// Sets each run's speedups: its `figure` (higher is better) over that of the runs named "no FUSE" and
/// "no cache" (none where a baseline is missing or 0).
fn fill_speedups<R>(
    runs: &mut [R],
    name: impl Fn(&R) -> &str,
    figure: impl Fn(&R) -> f64,
    set: impl Fn(&mut R, Option<f64>, Option<f64>),
) {
    let base = |wanted: &str| {
        runs.iter()
            .find(|r| name(r) == wanted)
            .map(&figure)
            .filter(|b| *b > 0.0)
    };
    let (no_fuse, no_cache) = (base("no FUSE"), base("no cache"));
    for run in runs.iter_mut() {
        let value = figure(run);
        set(run, no_fuse.map(|b| value / b), no_cache.map(|b| value / b));
    }
}

/// Fills the speedups: by latency (OLTP, lower is better) or by bandwidth (video).
pub fn add_speedups(runs: &mut [MatrixRun], by_latency: bool) {
    fill_speedups(
        runs,
        |run| run.name.as_str(),
        |run| {
            if by_latency {
                1.0 / run.read_latency.lat_mean_us.max(1e-9)
            } else {
                run.read_bytes_per_s
            }
        },
        |run, vs_no_fuse, vs_no_cache| {
            run.speedup_vs_no_fuse = vs_no_fuse;
            run.speedup_vs_no_cache = vs_no_cache;
        },
    );
}

/// One configuration of item 2c (PostgreSQL `pgbench -S`), over its measured seconds.
#[derive(Clone, Debug, Serialize)]
pub struct PgbenchRun {
    pub name: String,
    pub policy: String,
    pub pool_bytes: Option<u64>,
    pub fuse: bool,
    /// Transactions (one primary-key SELECT each) a second.
    pub tps: f64,
    /// Mean transaction latency (pgbench's, weighted over the measured seconds).
    pub latency_mean_ms: f64,
    /// Measured seconds (pgbench progress lines).
    pub seconds: usize,
    pub device: IoBytes,
    /// `fallow fs --stats` growth over the measured seconds.
    pub fs_stats: Option<serde_json::Value>,
    pub warm_up: WarmUp,
    /// Mean latency of the no-FUSE run over this run's.
    pub speedup_vs_no_fuse: Option<f64>,
    /// The same against `--no-cache`.
    pub speedup_vs_no_cache: Option<f64>,
}

impl PgbenchRun {
    pub fn summary(&self) -> String {
        let full = self
            .warm_up
            .pool_full_after_s
            .map_or(String::new(), |f| format!(", pool full after {f:.0} s"));
        format!(
            "pgbench {:<22} {:>8.0} tps, latency mean {:.3} ms, {} MiB from the device (after {:.0} s of warm-up{full})",
            self.name,
            self.tps,
            self.latency_mean_ms,
            self.device.read >> 20,
            self.warm_up.seconds
        )
    }
}

/// Fills the pgbench runs' speedups (by mean latency) against the no-FUSE and no-cache runs.
pub fn add_pgbench_speedups(runs: &mut [PgbenchRun]) {
    fill_speedups(
        runs,
        |run| run.name.as_str(),
        |run| 1.0 / run.latency_mean_ms.max(1e-9),
        |run, vs_no_fuse, vs_no_cache| {
            run.speedup_vs_no_fuse = vs_no_fuse;
            run.speedup_vs_no_cache = vs_no_cache;
        },
    );
}

/// A bandwidth of item 3.
#[derive(Clone, Debug, Serialize)]
pub struct Bandwidth {
    pub block: String,
    pub bytes_per_s: f64,
    pub read_bytes: u64,
    pub read_mean_us: f64,
    pub fs_stats: Option<serde_json::Value>,
    /// cache_hits / (cache_hits + cache_misses) over the measurement, when fallow served it.
    pub hit_ratio: Option<f64>,
}

impl Bandwidth {
    pub fn new(block: &str, run: &FioRun, stats: Option<serde_json::Value>) -> Bandwidth {
        let hit_ratio = stats.as_ref().map(|s| {
            let hits = counter(s, "cache_hits");
            hits / (hits + counter(s, "cache_misses")).max(1.0)
        });
        Bandwidth {
            block: block.to_string(),
            bytes_per_s: run.read_bytes_per_s(),
            read_bytes: run.read_bytes(),
            read_mean_us: run.read_latency().lat_mean_us,
            fs_stats: stats,
            hit_ratio,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct EfficiencyResult {
    pub hit: Vec<Bandwidth>,
    pub null: Vec<Bandwidth>,
    /// One thread's memcpy, measured in the same run.
    pub memcpy_bytes_per_s: f64,
}

impl EfficiencyResult {
    /// (block, hit bandwidth / null fs bandwidth, hit bandwidth / memcpy) per block size.
    pub fn ratios(&self) -> Vec<(String, f64, f64)> {
        self.hit
            .iter()
            .filter_map(|hit| {
                let null = self.null.iter().find(|n| n.block == hit.block)?;
                Some((
                    hit.block.clone(),
                    hit.bytes_per_s / null.bytes_per_s.max(1.0),
                    hit.bytes_per_s / self.memcpy_bytes_per_s.max(1.0),
                ))
            })
            .collect()
    }

    pub fn summary(&self) -> String {
        let mut text = format!(
            "efficiency: memcpy {:.0} MB/s",
            self.memcpy_bytes_per_s / 1e6
        );
        for (hit, null) in self.hit.iter().zip(&self.null) {
            text += &format!(
                "; {} reads: hits {:.0} MB/s, null fs {:.0} MB/s",
                hit.block,
                hit.bytes_per_s / 1e6,
                null.bytes_per_s / 1e6
            );
        }
        text
    }
}

/// One second of item 4, sampled from `fallow fs --stats` and INFO.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ElasticSample {
    pub t_s: f64,
    pub pool_target_bytes: f64,
    pub cache_hit_bytes: f64,
    pub backing_read_bytes: f64,
    pub prefetch_depth_mean: f64,
    pub prefetch_wasted_bytes: f64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ElasticResult {
    pub pool_bytes: u64,
    /// Readers' bytes/s in each second of the run (fio's per-second logs).
    pub read_bytes_per_s: Vec<f64>,
    pub samples: Vec<ElasticSample>,
    pub cut_s: f64,
    pub restore_s: f64,
    /// Means over the second half of the time before the cut (the first pass fills the pool), the time
    /// between cut and restore, and the time after the restore.
    pub before_bytes_per_s: f64,
    pub during_bytes_per_s: f64,
    pub after_bytes_per_s: f64,
    /// Seconds from the restore until a whole second reaches 90% of the mean before the cut; None when the
    /// run ended first.
    pub recovery_s: Option<f64>,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

/// Mean of the seconds [s, s+1) from the one `from` falls in (an event a few µs into a second, as the cut
/// timed by a sleeping thread, counts for that second) to the last that ends by `to`.
fn mean_between(per_second: &[f64], from: f64, to: f64) -> f64 {
    let values: Vec<f64> = per_second
        .iter()
        .enumerate()
        .filter(|(s, _)| *s as f64 >= from.floor() && (*s + 1) as f64 <= to)
        .map(|(_, v)| *v)
        .collect();
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// Seconds from `restore_s` to the end of the first whole second after it at 90% of `before`.
pub fn recovery_s(per_second: &[f64], restore_s: f64, before: f64) -> Option<f64> {
    per_second
        .iter()
        .enumerate()
        .find(|(s, v)| *s as f64 >= restore_s && **v >= 0.9 * before)
        .map(|(s, _)| (s + 1) as f64 - restore_s)
}

impl ElasticResult {
    pub fn new(
        pool_bytes: u64,
        per_second: Vec<f64>,
        samples: Vec<ElasticSample>,
        cut_s: f64,
        restore_s: f64,
        read_bytes: u64,
        write_bytes: u64,
    ) -> ElasticResult {
        let end = per_second.len() as f64;
        let before = mean_between(&per_second, cut_s / 2.0, cut_s);
        ElasticResult {
            pool_bytes,
            before_bytes_per_s: before,
            during_bytes_per_s: mean_between(&per_second, cut_s, restore_s),
            after_bytes_per_s: mean_between(&per_second, restore_s, end),
            recovery_s: recovery_s(&per_second, restore_s, before),
            read_bytes_per_s: per_second,
            samples,
            cut_s,
            restore_s,
            read_bytes,
            write_bytes,
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "elastic: {:.0} MB/s before the cut, {:.0} during, {:.0} after; recovered {}",
            self.before_bytes_per_s / 1e6,
            self.during_bytes_per_s / 1e6,
            self.after_bytes_per_s / 1e6,
            self.recovery_s
                .map_or("not within the run".into(), |s| format!(
                    "{s:.0} s after the restore"
                ))
        )
    }
}

/// The whole record.
#[derive(Serialize)]
pub struct Report {
    pub tool: &'static str,
    pub version: &'static str,
    pub commit: Option<String>,
    pub fallow_bin: String,
    pub machine: MachineInfo,
    pub settings: Settings,
    pub device: DeviceRecord,
    pub slowcat: Vec<SlowcatCase>,
    pub video: Vec<MatrixRun>,
    pub oltp: Vec<MatrixRun>,
    /// Per pool: the best mean latency any cache of that size could give OLTP.
    pub oltp_bounds: Vec<OltpBound>,
    pub pgbench: Vec<PgbenchRun>,
    pub efficiency: Option<EfficiencyResult>,
    pub elastic: Option<ElasticResult>,
    /// Why the run stopped early, if it did.
    pub error: Option<String>,
}

/// The source tree's commit (None outside a git checkout).
fn commit() -> Option<String> {
    let output = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

const HOW: &str = "loop device (losetup --direct-io=on) over a sparse image, ext4, cgroup v1 blkio throttle \
(read_bps_device, read_iops_device, write_bps_device) on the loop device for fio and fallow fs; memory cgroup \
as the VM's page cache in items 2 and 4; page cache dropped per file (posix_fadvise DONTNEED, checked with mincore)";

impl Report {
    pub fn new(settings: Settings, bin: &Path) -> Report {
        Report {
            tool: "fallow-bench fs",
            version: env!("CARGO_PKG_VERSION"),
            commit: commit(),
            fallow_bin: bin.display().to_string(),
            machine: MachineInfo::collect(),
            settings,
            device: DeviceRecord {
                how: HOW,
                ..DeviceRecord::default()
            },
            slowcat: Vec::new(),
            video: Vec::new(),
            oltp: Vec::new(),
            oltp_bounds: Vec::new(),
            pgbench: Vec::new(),
            efficiency: None,
            elastic: None,
            error: None,
        }
    }

    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        let mut json = serde_json::to_string_pretty(self)?;
        json.push('\n');
        let path = dir.join("fs.json");
        std::fs::write(&path, json).with_context(|| format!("writing {}", path.display()))?;
        let path = dir.join("fs.md");
        std::fs::write(&path, self.markdown())
            .with_context(|| format!("writing {}", path.display()))
    }

    pub fn markdown(&self) -> String {
        let s = &self.settings;
        let d = &s.device;
        let mut md = format!(
            "# fallow-bench fs ({}, commit {}, {} CPUs)\n\nDevice: {} MiB/s read, {} read IOPS, {} MiB/s write \
             throttle; VM memory {} MiB. {}\n\n",
            self.machine.date_utc,
            self.commit.as_deref().unwrap_or("?"),
            self.machine.cpus,
            d.read_bytes_per_s >> 20,
            d.read_iops,
            d.write_bytes_per_s >> 20,
            s.vm_memory_bytes >> 20,
            self.device.summary()
        );
        md += &self.slowcat_table();
        md += &matrix_table("Video server", &self.video, false);
        md += &matrix_table("OLTP", &self.oltp, true);
        md += &bounds_line(&self.oltp_bounds);
        md += &self.pgbench_table();
        md += &self.efficiency_table();
        if let Some(e) = &self.elastic {
            md += &format!("## Elastic\n\n{}\n\n", e.summary());
        }
        if let Some(error) = &self.error {
            md += &format!("**Stopped early**: {error}\n");
        }
        md
    }

    fn slowcat_table(&self) -> String {
        if self.slowcat.is_empty() {
            return String::new();
        }
        let mut md = "## Slowcat (1 MiB reads)\n\n| case | served by | ms per read | MB/s | MiB from device |\n\
                      |---|---|---|---|---|\n"
            .to_string();
        for c in &self.slowcat {
            md += &format!(
                "| {} | {} | {:.3} | {:.1} | {} |\n",
                c.name,
                c.served_by,
                c.read_mean_ms,
                c.bytes_per_s / 1e6,
                c.device_read_bytes >> 20
            );
        }
        md + "\n"
    }

    fn pgbench_table(&self) -> String {
        if self.pgbench.is_empty() {
            return String::new();
        }
        let s = &self.settings;
        let mut md = format!(
            "## PostgreSQL pgbench -S (scale {}, {} clients)\n\n| config | tps | mean latency ms | speedup vs no FUSE \
             | vs no cache | MiB from device | fallow hit MiB | warm-up s |\n|---|---|---|---|---|---|---|---|\n",
            s.pgbench_scale, s.pgbench_clients
        );
        let ratio = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.2}x"));
        for r in &self.pgbench {
            let hits = r.fs_stats.as_ref().map_or("-".into(), |st| {
                format!("{:.0}", counter(st, "cache_hit_bytes") / 1048576.0)
            });
            md += &format!(
                "| {} | {:.0} | {:.3} | {} | {} | {} | {hits} | {:.0} |\n",
                r.name,
                r.tps,
                r.latency_mean_ms,
                ratio(r.speedup_vs_no_fuse),
                ratio(r.speedup_vs_no_cache),
                r.device.read >> 20,
                r.warm_up.seconds
            );
        }
        md + "\nSpeedups compare mean transaction latency.\n\n"
    }

    fn efficiency_table(&self) -> String {
        let Some(e) = &self.efficiency else {
            return String::new();
        };
        let mut md = format!(
            "## Efficiency (--direct-io, warm cache)\n\nmemcpy (one thread): {:.0} MB/s\n\n\
             | reads | cache hits MB/s | null fs MB/s | hits / null | hits / memcpy |\n|---|---|---|---|---|\n",
            e.memcpy_bytes_per_s / 1e6
        );
        for ((block, to_null, to_memcpy), (hit, null)) in
            e.ratios().into_iter().zip(e.hit.iter().zip(&e.null))
        {
            md += &format!(
                "| {block} | {:.0} | {:.0} | {to_null:.2} | {to_memcpy:.3} |\n",
                hit.bytes_per_s / 1e6,
                null.bytes_per_s / 1e6
            );
        }
        md + "\n"
    }
}

fn matrix_table(title: &str, runs: &[MatrixRun], by_latency: bool) -> String {
    if runs.is_empty() {
        return String::new();
    }
    let mut md = format!(
        "## {title}\n\n| config | read MB/s | mean ms | p50 ms | p99 ms | speedup vs no FUSE | vs no cache | \
         MiB from device | fallow hit blocks MiB | prefetch wasted MiB | accuracy |\n|---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    let mib = |v: Option<f64>| v.map_or("-".into(), |b| format!("{:.0}", b / 1048576.0));
    for r in runs {
        let ratio = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.2}x"));
        md += &format!(
            "| {} | {:.1} | {:.2} | {:.2} | {:.1} | {} | {} | {} | {} | {} | {} |\n",
            r.name,
            r.read_bytes_per_s / 1e6,
            r.read_latency.lat_mean_us / 1000.0,
            r.read_latency.lat_p50_us / 1000.0,
            r.read_latency.lat_p99_us / 1000.0,
            ratio(r.speedup_vs_no_fuse),
            ratio(r.speedup_vs_no_cache),
            r.device.read >> 20,
            mib(r.levels.fallow_hit_bytes),
            mib(r.stat("prefetch_wasted_bytes")),
            r.stat("prefetch_accuracy")
                .map_or("-".into(), |a| format!("{a:.2}")),
        );
    }
    let basis = if by_latency {
        "mean read latency"
    } else {
        "read bandwidth"
    };
    md + &format!("\nSpeedups compare {basis}. Pools: {}.\n\n", pools(runs))
}

/// The OLTP bounds under the table: what no cache of each size could beat.
fn bounds_line(bounds: &[OltpBound]) -> String {
    if bounds.is_empty() {
        return String::new();
    }
    let each: Vec<String> = bounds
        .iter()
        .map(|b| match b.speedup_bound_vs_no_cache {
            Some(speedup) => format!(
                "{}: at least {:.1}% of reads miss, mean latency at least {:.2} ms, speedup vs no cache at most {speedup:.2}x",
                size_name(b.pool_bytes),
                b.miss_ratio_floor * 100.0,
                b.latency_floor_us / 1000.0,
            ),
            None => format!(
                "{}: every page fits, no read need reach the device",
                size_name(b.pool_bytes)
            ),
        })
        .collect();
    format!(
        "Bound for any cache (zipf mass beyond the VM's memory + the pool, each miss one read at the throttle's \
         IOPS; `fallow-bench/src/fs/bound.rs`): {}.\n\n",
        each.join("; ")
    )
}

fn pools(runs: &[MatrixRun]) -> String {
    let mut names: Vec<String> = runs
        .iter()
        .filter_map(|r| r.pool_bytes)
        .map(size_name)
        .collect();
    names.dedup();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_is_the_first_good_second_after_the_restore() {
        let per_second = [100.0, 100.0, 100.0, 40.0, 40.0, 40.0, 50.0, 95.0, 100.0];
        let before = mean_between(&per_second, 1.0, 3.0);
        assert_eq!(before, 100.0);
        assert_eq!(mean_between(&per_second, 3.0, 6.0), 40.0);
        assert_eq!(mean_between(&per_second, 3.00004, 6.0), 40.0);
        // Restored at 5.5 s: second 6 is at 50, second 7 at 95 (>= 90): recovered at 8 s.
        assert_eq!(recovery_s(&per_second, 5.5, before), Some(2.5));
        assert_eq!(recovery_s(&per_second[..7], 5.5, before), None);
    }

    fn run(name: &str, bytes_per_s: f64, mean_us: f64) -> MatrixRun {
        MatrixRun {
            name: name.into(),
            policy: String::new(),
            pool_bytes: None,
            fuse: true,
            read_bytes: 0,
            write_bytes: 0,
            read_bytes_per_s: bytes_per_s,
            wall_s: 1.0,
            read_latency: Direction {
                lat_mean_us: mean_us,
                ..Direction::default()
            },
            levels: Levels::default(),
            device: IoBytes::default(),
            fs_stats: None,
            warm_up: None,
            speedup_vs_no_fuse: None,
            speedup_vs_no_cache: None,
        }
    }

    #[test]
    fn speedups_are_against_the_baselines() {
        let mut runs = vec![
            run("no FUSE", 100.0, 1000.0),
            run("no cache", 80.0, 2000.0),
            run("x", 160.0, 500.0),
        ];
        add_speedups(&mut runs, false);
        assert_eq!(runs[2].speedup_vs_no_fuse, Some(1.6));
        assert_eq!(runs[2].speedup_vs_no_cache, Some(2.0));
        add_speedups(&mut runs, true);
        assert_eq!(runs[2].speedup_vs_no_fuse, Some(2.0));
        assert_eq!(runs[2].speedup_vs_no_cache, Some(4.0));
    }

    #[test]
    fn pgbench_speedups_are_by_mean_latency() {
        let run = |name: &str, latency_mean_ms: f64| PgbenchRun {
            name: name.into(),
            policy: String::new(),
            pool_bytes: None,
            fuse: true,
            tps: 1.0,
            latency_mean_ms,
            seconds: 1,
            device: IoBytes::default(),
            fs_stats: None,
            warm_up: WarmUp::default(),
            speedup_vs_no_fuse: None,
            speedup_vs_no_cache: None,
        };
        let mut runs = vec![run("no cache", 8.0), run("x", 2.0)];
        add_pgbench_speedups(&mut runs);
        assert_eq!(runs[1].speedup_vs_no_cache, Some(4.0));
        assert_eq!(runs[0].speedup_vs_no_cache, Some(1.0));
        // No no-FUSE run: no speedup against it.
        assert_eq!(runs[1].speedup_vs_no_fuse, None);
    }
}
