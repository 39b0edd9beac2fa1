//! `fallow-bench fs`: the file-cache benchmarks of issue 21 (MortarLoad, Mortar §6.7) against `fallow fs`
//! over an emulated slow device (see [`device`]). Items: slowcat (1), the video server and OLTP over
//! prefetch policies and cache sizes (2), cache-hit bandwidth against a null FUSE file system and memcpy
//! (3), and the pool halved and restored during a video run (4). Writes fs.json, fs.md and PNG plots; see
//! docs/fs.md "Benchmarks".
pub mod bound;
pub mod device;
pub mod fio;
pub mod items;
pub mod mount;
pub mod pgbench;
pub mod plots;
pub mod report;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use indicatif::ProgressBar;

use crate::bulk::parse_size;
use device::{Device, DeviceSpec};
use report::Report;

/// The benchmark's items, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Item {
    /// 1: a file read in 1 MiB reads: cold device, page cache, fallow miss, fallow hit, FUSE passthrough.
    Slowcat,
    /// 2a: 3 sequential readers and 1 writer (1:6 of the bytes) over prefetch policies and cache sizes.
    Video,
    /// 2b: skewed random reads of a database-sized file over prefetch policies and cache sizes.
    Oltp,
    /// 2c: PostgreSQL's `pgbench -S` with its data directory on the mount (the server as user postgres).
    Pgbench,
    /// 3: cache-hit bandwidth through the mount against a null FUSE file system and memcpy.
    Efficiency,
    /// 4: the pool halved, then restored, during a video run; throughput per second.
    Elastic,
}

fn size(text: &str) -> Result<u64, String> {
    parse_size(text).map(|bytes| bytes as u64)
}

#[derive(Args, Debug)]
pub struct FsArgs {
    /// The fallow binary (default: `fallow` beside this binary).
    #[arg(long)]
    pub fallow_bin: Option<PathBuf>,
    /// A smoke run (each item well under a minute): small files, two policies, one cache size, short runs.
    #[arg(long)]
    pub quick: bool,
    /// Items to run [default: all].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub items: Option<Vec<Item>>,
    /// Directory for fs.json, fs.md and the PNG plots.
    #[arg(long, default_value = "target/fs-bench")]
    pub out: PathBuf,
    /// Where the scratch directory (device image, mount points) goes [default: the temp directory].
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Device read bandwidth (bytes/s; k/m/g suffixes are powers of 1024). The default with --read-iops
    /// is a modest disk (a small cloud volume or SATA disk), see docs/fs.md "Benchmarks".
    #[arg(long, default_value = "150m", value_parser = size)]
    pub read_bps: u64,
    /// Device read operations per second. The throttle counts sequential reads like seeks, so an HDD's
    /// 200 would hold fallow fs's 128 KiB O_DIRECT block reads to 25 MiB/s; 1000 keeps them near the
    /// bandwidth.
    #[arg(long, default_value_t = 1000)]
    pub read_iops: u64,
    /// Device write bandwidth (bytes/s; only writes issued by the group's processes are throttled).
    #[arg(long, default_value = "150m", value_parser = size)]
    pub write_bps: u64,
    /// Memory (so page cache) of the "VM" that runs the workload and `fallow fs` in items 2 and 4.
    #[arg(long, default_value = "256m", value_parser = size)]
    pub vm_memory: u64,
    /// Slowcat's file [default: 1g; --quick: 16m].
    #[arg(long, value_parser = size)]
    pub slowcat_bytes: Option<u64>,
    /// Size of each of the video server's three files [default: 256m (together more than the VM's memory
    /// and the small pool, less than the large); --quick: 8m].
    #[arg(long, value_parser = size)]
    pub video_file_bytes: Option<u64>,
    /// Seconds of each video run (the readers loop over their files) [default: 30; --quick: 2].
    #[arg(long)]
    pub video_s: Option<u64>,
    /// OLTP's database file [default: 2g; --quick: 32m].
    #[arg(long, value_parser = size)]
    pub oltp_bytes: Option<u64>,
    /// OLTP's read size.
    #[arg(long, default_value = "8k", value_parser = size)]
    pub oltp_block_bytes: u64,
    /// `fallow fs --block-bytes` for the OLTP mounts (0: fallow fs's default, 128 KiB). The database's
    /// page, as ZFS's recordsize advice for databases: a 128 KiB block caches 15 cold pages with each hot
    /// one, so a pool holds 16 times fewer hot pages; but 8 KiB blocks warm 16 times slower on a device
    /// that counts requests, hence the long warm-up (docs/benchmarks.md).
    #[arg(long, default_value = "8k", value_parser = size)]
    pub oltp_fs_block_bytes: u64,
    /// OLTP's key skew (fio `random_distribution=zipf:THETA`).
    #[arg(long, default_value_t = 0.9)]
    pub oltp_zipf: f64,
    /// OLTP's reader threads.
    #[arg(long, default_value_t = 4)]
    pub oltp_jobs: usize,
    /// Measured seconds of each OLTP run, after its warm-up [default: 30; --quick: 1].
    #[arg(long)]
    pub oltp_s: Option<u64>,
    /// The least warm-up of each OLTP run, in seconds (the workload runs unmeasured first), with or
    /// without a pool [default: 150: the VM's page cache has long filled, and the baselines warm as long
    /// as a small pool's runs; --quick: 1].
    #[arg(long)]
    pub oltp_warmup_s: Option<u64>,
    /// With a pool, the warm-up goes on until the pool has been full (evicting) for this many seconds, so
    /// what is measured is the cache's steady state, not its filling [default: 120; --quick: 1].
    #[arg(long)]
    pub oltp_settle_s: Option<u64>,
    /// The most warm-up seconds; a pool not full by then is measured as it is, and the run's record says
    /// so (`pool_full_after_s` absent) [default: 900: a 1 GiB pool of 8 KiB blocks fills in about 4
    /// minutes at 1000 IOPS; --quick: 5].
    #[arg(long)]
    pub oltp_warmup_max_s: Option<u64>,
    /// pgbench's scale factor (100,000 accounts each, about 15 MiB of table and index) [default: 100, so
    /// 1.5 GiB: more than the VM, the small pool and the large; --quick: 1].
    #[arg(long)]
    pub pgbench_scale: Option<u32>,
    /// pgbench's clients (connections). Warm-up and measured seconds are OLTP's (`--oltp-*-s`).
    #[arg(long, default_value_t = 4)]
    pub pgbench_clients: usize,
    /// fallow pool sizes of item 2 [default: 100m,1g; --quick: 64m].
    #[arg(long, value_delimiter = ',', value_parser = size)]
    pub caches: Option<Vec<u64>>,
    /// Fixed read-ahead depths of the video server, in blocks [default: 4,16,64; --quick: 4].
    #[arg(long, value_delimiter = ',')]
    pub depths: Option<Vec<u32>>,
    /// Fixed read-ahead depths of OLTP [default: 16; --quick: 4]: random reads start no stream, so every
    /// depth runs like `off`; one shows it without minutes per depth.
    #[arg(long, value_delimiter = ',')]
    pub oltp_depths: Option<Vec<u32>>,
    /// Item 3's file [default: 512m; --quick: 16m].
    #[arg(long, value_parser = size)]
    pub efficiency_bytes: Option<u64>,
    /// Measured seconds of each bandwidth of item 3 [default: 5; --quick: 1].
    #[arg(long)]
    pub efficiency_s: Option<u64>,
    /// Item 4's pool before and after the cut [default: 1g; --quick: 64m].
    #[arg(long, value_parser = size)]
    pub elastic_pool_bytes: Option<u64>,
    /// Item 4's run time; the pool is halved at a third and restored at two thirds [default: 60; --quick: 9].
    #[arg(long)]
    pub elastic_s: Option<u64>,
    /// No progress bar (the per-run lines are still printed).
    #[arg(long)]
    pub quiet: bool,
}

/// The settings after --quick and the defaults.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Settings {
    pub items: Vec<Item>,
    pub device: DeviceSpec,
    pub vm_memory_bytes: u64,
    pub slowcat_bytes: u64,
    pub video_file_bytes: u64,
    pub video_s: u64,
    pub oltp_bytes: u64,
    pub oltp_block_bytes: u64,
    pub oltp_fs_block_bytes: u64,
    pub oltp_zipf: f64,
    pub oltp_jobs: usize,
    pub oltp_s: u64,
    pub oltp_warmup_s: u64,
    pub oltp_settle_s: u64,
    pub oltp_warmup_max_s: u64,
    pub pgbench_scale: u32,
    pub pgbench_clients: usize,
    pub caches: Vec<u64>,
    pub depths: Vec<u32>,
    pub oltp_depths: Vec<u32>,
    pub efficiency_bytes: u64,
    pub efficiency_s: u64,
    pub elastic_pool_bytes: u64,
    /// Each of item 4's three files: together 3/4 of the pool, so they fit before the cut and not during.
    pub elastic_file_bytes: u64,
    pub elastic_s: u64,
    pub quick: bool,
}

const MIB: u64 = 1 << 20;
/// Bounds that keep one run within minutes and the image within this machine's free disk.
const FILE_BYTES_MAX: u64 = 8 << 30;
const RUN_S_MAX: u64 = 600;
const WARMUP_S_MAX: u64 = 3600;
const DEPTH_MAX: u32 = 4096;
/// About 6 GiB of database: within FILE_BYTES_MAX with its WAL.
const PGBENCH_SCALE_MAX: u32 = 400;
/// A pgbench scale's bytes on disk (tables, indexes), rounded up.
const PGBENCH_BYTES_PER_SCALE: u64 = 16 * MIB;

impl FsArgs {
    pub fn settings(&self) -> anyhow::Result<Settings> {
        let q = self.quick;
        let pick = |given: Option<u64>, full: u64, quick: u64| {
            given.unwrap_or(if q { quick } else { full })
        };
        let elastic_pool_bytes = pick(self.elastic_pool_bytes, 1 << 30, 64 * MIB);
        let mut settings = Settings {
            items: self
                .items
                .clone()
                .unwrap_or_else(|| Item::value_variants().to_vec()),
            device: DeviceSpec {
                read_bytes_per_s: self.read_bps,
                read_iops: self.read_iops,
                write_bytes_per_s: self.write_bps,
                image_bytes: 0,
            },
            vm_memory_bytes: self.vm_memory,
            slowcat_bytes: pick(self.slowcat_bytes, 1 << 30, 16 * MIB),
            video_file_bytes: pick(self.video_file_bytes, 256 * MIB, 8 * MIB),
            video_s: pick(self.video_s, 30, 2),
            oltp_bytes: pick(self.oltp_bytes, 2 << 30, 32 * MIB),
            oltp_block_bytes: self.oltp_block_bytes,
            oltp_fs_block_bytes: self.oltp_fs_block_bytes,
            oltp_zipf: self.oltp_zipf,
            oltp_jobs: self.oltp_jobs,
            oltp_s: pick(self.oltp_s, 30, 1),
            oltp_warmup_s: pick(self.oltp_warmup_s, 150, 1),
            oltp_settle_s: pick(self.oltp_settle_s, 120, 1),
            oltp_warmup_max_s: pick(self.oltp_warmup_max_s, 900, 5),
            pgbench_scale: self.pgbench_scale.unwrap_or(if q { 1 } else { 100 }),
            pgbench_clients: self.pgbench_clients,
            caches: self.caches.clone().unwrap_or(if q {
                vec![64 * MIB]
            } else {
                vec![100 * MIB, 1 << 30]
            }),
            depths: self
                .depths
                .clone()
                .unwrap_or(if q { vec![4] } else { vec![4, 16, 64] }),
            oltp_depths: self
                .oltp_depths
                .clone()
                .unwrap_or(if q { vec![4] } else { vec![16] }),
            efficiency_bytes: pick(self.efficiency_bytes, 512 * MIB, 16 * MIB),
            efficiency_s: pick(self.efficiency_s, 5, 1),
            elastic_pool_bytes,
            elastic_file_bytes: (elastic_pool_bytes / 4).next_multiple_of(MIB),
            elastic_s: pick(self.elastic_s, 60, 9),
            quick: q,
        };
        settings.device.image_bytes = settings.image_bytes();
        settings.check()?;
        Ok(settings)
    }
}

impl Settings {
    fn check(&self) -> anyhow::Result<()> {
        let d = &self.device;
        if d.read_bytes_per_s < MIB || d.write_bytes_per_s < MIB || d.read_iops < 10 {
            bail!("--read-bps and --write-bps: at least 1m; --read-iops: at least 10");
        }
        if self.vm_memory_bytes < 32 * MIB {
            bail!("--vm-memory: at least 32m (fallow fs and fio must fit)");
        }
        let files = [
            ("--slowcat-bytes", self.slowcat_bytes),
            ("--video-file-bytes", self.video_file_bytes),
            ("--oltp-bytes", self.oltp_bytes),
            ("--efficiency-bytes", self.efficiency_bytes),
            ("--elastic-pool-bytes", self.elastic_pool_bytes),
        ];
        for (name, bytes) in files {
            if !(MIB..=FILE_BYTES_MAX).contains(&bytes) {
                bail!("{name}: from 1m to {}g", FILE_BYTES_MAX >> 30);
            }
        }
        if self.oltp_block_bytes < 512 || self.oltp_block_bytes > self.oltp_bytes {
            bail!("--oltp-block-bytes: from 512 to the database's size");
        }
        if !(self.oltp_zipf.is_finite() && self.oltp_zipf > 0.0) {
            bail!("--oltp-zipf: a number above 0");
        }
        if self.oltp_jobs == 0 || self.oltp_jobs > 64 {
            bail!("--oltp-jobs: from 1 to 64");
        }
        if !(1..=PGBENCH_SCALE_MAX).contains(&self.pgbench_scale) {
            bail!("--pgbench-scale: from 1 to {PGBENCH_SCALE_MAX}");
        }
        if self.pgbench_clients == 0 || self.pgbench_clients > 64 {
            bail!("--pgbench-clients: from 1 to 64");
        }
        for (name, s) in [
            ("--oltp-s", self.oltp_s),
            ("--video-s", self.video_s),
            ("--efficiency-s", self.efficiency_s),
        ] {
            if s == 0 || s > RUN_S_MAX {
                bail!("{name}: from 1 to {RUN_S_MAX}");
            }
        }
        if !(3..=RUN_S_MAX).contains(&self.elastic_s) {
            bail!("--elastic-s: from 3 to {RUN_S_MAX}");
        }
        if self.oltp_warmup_s > self.oltp_warmup_max_s
            || self.oltp_settle_s > self.oltp_warmup_max_s
            || self.oltp_warmup_max_s > WARMUP_S_MAX
        {
            bail!("--oltp-warmup-s and --oltp-settle-s: at most --oltp-warmup-max-s, which is at most {WARMUP_S_MAX}");
        }
        if self.caches.is_empty() || self.caches.iter().any(|&c| c < MIB) {
            bail!("--caches: one or more sizes of at least 1m");
        }
        let mut depths = self.depths.iter().chain(&self.oltp_depths);
        if depths.any(|&d| d == 0 || d > DEPTH_MAX) {
            bail!("--depths, --oltp-depths: each from 1 to {DEPTH_MAX}");
        }
        Ok(())
    }

    fn runs(&self, item: Item) -> bool {
        self.items.contains(&item)
    }

    /// The image holds every file of the items chosen, with a quarter spare for ext4 and the written file.
    fn image_bytes(&self) -> u64 {
        let mut bytes = 256 * MIB;
        let files = [
            (Item::Slowcat, self.slowcat_bytes),
            (Item::Video, self.video_file_bytes * 4),
            (Item::Oltp, self.oltp_bytes),
            // The cluster (about 40 MiB), its WAL (at most 256 MiB plus the segments kept) and the tables.
            (
                Item::Pgbench,
                512 * MIB + self.pgbench_scale as u64 * PGBENCH_BYTES_PER_SCALE,
            ),
            (Item::Efficiency, self.efficiency_bytes),
            (Item::Elastic, self.elastic_file_bytes * 4),
        ];
        for (item, file_bytes) in files {
            if self.runs(item) {
                bytes += file_bytes + file_bytes / 4;
            }
        }
        bytes
    }

    /// Steps of the progress bar: one per run (and one for the device).
    fn run_count(&self) -> u64 {
        // no FUSE, no cache; per pool: off, the fixed depths, feedback, feedback admitting all (not --quick).
        let per_pool = |depths: &[u32]| depths.len() + 2 + usize::from(!self.quick);
        let matrix = |depths: &[u32]| 2 + self.caches.len() * per_pool(depths);
        let mut runs = 1;
        for (item, count) in [
            (Item::Slowcat, 6),
            (Item::Video, matrix(&self.depths)),
            (Item::Oltp, matrix(&self.oltp_depths)),
            // Building the database; no FUSE, no cache; per pool: feedback, feedback admitting all.
            (
                Item::Pgbench,
                3 + self.caches.len() * (1 + usize::from(!self.quick)),
            ),
            (Item::Efficiency, 3),
            (Item::Elastic, 1),
        ] {
            if self.runs(item) {
                runs += count;
            }
        }
        runs as u64
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether SIGINT or SIGTERM came: the run stops at its next step and cleans up.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// SIGINT and SIGTERM only set a flag: the default action would exit without unmounting, detaching the
/// loop device or removing the cgroups.
fn catch_signals() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(signal, on_signal as *const () as libc::sighandler_t) };
    }
}

/// Fails when a signal asked the run to stop.
pub fn check_interrupted() -> anyhow::Result<()> {
    if interrupted() {
        bail!("interrupted: cleaned up");
    }
    Ok(())
}

/// What the FUSE cases need besides the device.
fn check_fuse_prerequisites() -> anyhow::Result<()> {
    if !Path::new("/dev/fuse").exists() {
        bail!("no /dev/fuse");
    }
    for program in ["fio", "fusermount3"] {
        if !crate::txn::server::on_path(program) {
            bail!("{program} is not installed (scripts/install-test-deps.sh installs it)");
        }
    }
    Ok(())
}

/// The progress bar, and a line per finished run (printed above the bar, or on stderr when quiet).
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    pub fn step(&self, message: String) -> anyhow::Result<()> {
        check_interrupted()?;
        self.bar.set_message(message);
        self.bar.inc(1);
        Ok(())
    }

    pub fn line(&self, text: String) {
        if self.bar.is_hidden() {
            eprintln!("{text}");
        } else {
            self.bar.println(text);
        }
    }
}

pub fn run_fs(args: &FsArgs) -> anyhow::Result<()> {
    let settings = args.settings()?;
    let bin = args
        .fallow_bin
        .clone()
        .unwrap_or_else(crate::txn::server::default_fallow_bin);
    if !bin.is_file() {
        bail!("no fallow binary at {} (give --fallow-bin)", bin.display());
    }
    check_fuse_prerequisites()?;
    device::check_prerequisites()?;
    if settings.runs(Item::Pgbench) {
        pgbench::check_prerequisites()?;
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    catch_signals();
    let work_dir = args.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    let bar = crate::txn::server::progress_bar(settings.run_count(), args.quiet, "fs");
    let progress = Progress { bar };
    let mut report = Report::new(settings.clone(), &bin);
    let result = run_items(&settings, &bin, &work_dir, &mut report, &progress);
    progress.bar.finish_and_clear();
    // A partial report is still written: long runs that fail late keep what they measured.
    report.error = result.as_ref().err().map(|e| format!("{e:#}"));
    print!("{}", report.markdown());
    report.write(&args.out)?;
    plots::write_all(&report, &args.out)?;
    eprintln!("wrote {}/fs.{{json,md}} and PNG plots", args.out.display());
    result
}

fn run_items(
    s: &Settings,
    bin: &Path,
    work_dir: &Path,
    report: &mut Report,
    progress: &Progress,
) -> anyhow::Result<()> {
    progress.step("building the device".into())?;
    let device = Device::create(work_dir, s.device.clone())?;
    report.device.loop_device = device.loop_device().to_string();
    report.device.measured = Some(items::measure_device(s, &device)?);
    progress.line(report.device.summary());
    let ctx = items::Context {
        settings: s,
        bin,
        device: &device,
        progress,
    };
    if s.runs(Item::Slowcat) {
        items::slowcat(&ctx, &mut report.slowcat)?;
    }
    if s.runs(Item::Video) {
        items::matrix(&ctx, items::Workload::Video, &mut report.video)?;
    }
    if s.runs(Item::Oltp) {
        let finished = items::matrix(&ctx, items::Workload::Oltp, &mut report.oltp);
        report.oltp_bounds = items::oltp_bounds(s, &report.oltp);
        finished?;
    }
    if s.runs(Item::Pgbench) {
        pgbench::matrix(&ctx, &mut report.pgbench)?;
    }
    if s.runs(Item::Efficiency) {
        report.efficiency = Some(items::efficiency(&ctx)?);
    }
    if s.runs(Item::Elastic) {
        report.elastic = Some(items::elastic(&ctx)?);
    }
    Ok(())
}

/// The --quick settings, for the other modules' tests.
#[cfg(test)]
pub(crate) fn tests_settings() -> Settings {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: FsArgs,
    }
    Cli::parse_from(["fs", "--quick"]).args.settings().unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: FsArgs,
    }

    fn settings(flags: &[&str]) -> anyhow::Result<Settings> {
        let mut argv = vec!["fs"];
        argv.extend_from_slice(flags);
        Cli::try_parse_from(argv)?.args.settings()
    }

    #[test]
    fn quick_settings_are_small() {
        let quick = settings(&["--quick"]).unwrap();
        let full = settings(&[]).unwrap();
        assert!(quick.slowcat_bytes < full.slowcat_bytes);
        assert!(quick.device.image_bytes < full.device.image_bytes);
        assert_eq!(full.caches, vec![100 * MIB, 1 << 30]);
        assert_eq!(full.device.read_bytes_per_s, 150 * MIB);
        // Item 4's files fill three quarters of the pool.
        assert_eq!(full.elastic_file_bytes * 4, full.elastic_pool_bytes);
    }

    #[test]
    fn the_image_holds_the_chosen_items_only() {
        let one = settings(&["--items", "slowcat"]).unwrap();
        assert!(one.device.image_bytes >= one.slowcat_bytes);
        assert!(one.device.image_bytes < one.slowcat_bytes * 2);
        let pg = settings(&["--items", "pgbench"]).unwrap();
        assert_eq!(pg.pgbench_scale, 100);
        assert!(pg.device.image_bytes >= 100 * PGBENCH_BYTES_PER_SCALE);
    }

    #[test]
    fn bad_values_are_refused() {
        for flags in [
            &["--read-bps", "10"][..],
            &["--read-iops", "0"],
            &["--oltp-zipf", "0"],
            &["--depths", "0"],
            &["--oltp-depths", "5000"],
            &["--caches", "10"],
            &["--slowcat-bytes", "100g"],
            &["--elastic-s", "1"],
            &["--vm-memory", "1m"],
            &["--pgbench-scale", "0"],
            &["--pgbench-clients", "0"],
        ] {
            assert!(settings(flags).is_err(), "{flags:?} accepted");
        }
    }
}
