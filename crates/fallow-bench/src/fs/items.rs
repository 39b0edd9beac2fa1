//! The four items. Every run starts from known cache levels: the backing files are evicted from the page
//! cache (per file, see [`device::evict`]), every FUSE mount is fresh (its page cache goes with it) and
//! every fallow pool is a fresh server, except where a case measures a warm level on purpose.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use super::bound::OltpBound;
use super::device::{self, Device};
use super::fio::{self, Job};
use super::mount::{self, Mount, Server};
use super::report::{
    DeviceMeasured, EfficiencyResult, ElasticResult, ElasticSample, Levels, MatrixRun, SlowcatCase,
    WarmUp,
};
use super::{Progress, Settings, MIB};

/// What every item needs.
pub struct Context<'a> {
    pub settings: &'a Settings,
    pub bin: &'a Path,
    pub device: &'a Device,
    pub progress: &'a Progress,
}

impl Context<'_> {
    pub(super) fn backing(&self) -> &Path {
        &self.device.mnt
    }

    /// A mount point in the scratch directory.
    fn mount_point(&self, name: &str) -> PathBuf {
        self.device.dir.join(format!("mnt-{name}"))
    }

    pub(super) fn mount(
        &self,
        name: &str,
        server: Option<&Server>,
        flags: &[String],
    ) -> anyhow::Result<Mount> {
        let mut all = vec![
            "--backing".to_string(),
            self.backing().display().to_string(),
        ];
        if let Some(server) = server {
            all.extend(["--server".to_string(), server.addr()]);
        }
        all.extend(flags.iter().cloned());
        let log = self.device.dir.join(format!("fs-{name}.log"));
        Mount::start(self.bin, self.device, &self.mount_point(name), all, &log)
    }

    /// Evicts every backing file and checks that none stayed in the page cache.
    pub(super) fn cold(&self) -> anyhow::Result<()> {
        let left = device::evict_tree(self.backing())?;
        if !left.is_empty() {
            bail!("still in the page cache after eviction: {left:?}");
        }
        Ok(())
    }
}

/// A file of `bytes` of incompressible data, written outside the throttled group (setup is not measured).
fn create_file(path: &Path, bytes: u64) -> anyhow::Result<()> {
    if path.metadata().is_ok_and(|m| m.len() == bytes) {
        return Ok(());
    }
    let mut file = std::io::BufWriter::with_capacity(
        4 * MIB as usize,
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ bytes;
    let mut chunk = vec![0u8; MIB as usize];
    let mut left = bytes;
    while left > 0 {
        for word in chunk.chunks_exact_mut(8) {
            // xorshift64: cheap bytes that no layer can compress or deduplicate.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            word.copy_from_slice(&state.to_le_bytes());
        }
        let n = left.min(MIB) as usize;
        file.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    file.into_inner()?.sync_all()?;
    Ok(())
}

/// The device's 4 KiB random-read latency and 1 MiB sequential bandwidth, direct I/O through the throttle.
pub fn measure_device(s: &Settings, device: &Device) -> anyhow::Result<DeviceMeasured> {
    let probe = device.mnt.join("probe.dat");
    create_file(&probe, if s.quick { 32 * MIB } else { 512 * MIB })?;
    let runtime = if s.quick { "1" } else { "5" };
    let file = format!("filename={}", probe.display());
    let common = [file.as_str(), "direct=1", "time_based", "runtime=X"];
    let job = |name: &str, extra: &[&str]| {
        let mut options: Vec<&str> = common[..3].to_vec();
        options.extend_from_slice(extra);
        Job::new(name, &options).with(format!("runtime={runtime}"))
    };
    let random = fio::run(
        device,
        &[],
        &[job("rand4k", &["rw=randread", "bs=4k"])],
        None,
    )?;
    let sequential = fio::run(device, &[], &[job("seq1m", &["rw=read", "bs=1m"])], None)?;
    std::fs::remove_file(&probe)?;
    let r = &random.jobs[0].read;
    let q = &sequential.jobs[0].read;
    Ok(DeviceMeasured {
        rand_4k_iops: r.ios as f64 / r.runtime_s.max(1e-9),
        rand_4k_p50_us: r.lat_p50_us,
        rand_4k_p99_us: r.lat_p99_us,
        rand_4k_mean_us: r.lat_mean_us,
        seq_1m_bytes_per_s: q.bytes_per_s,
        seq_1m_mean_us: q.lat_mean_us,
    })
}

/// A pool that holds a file of `bytes` whole: twice its size, and at least 256 MiB (a very small pool
/// refuses stores before its fixed overhead is paid).
fn roomy_pool(bytes: u64) -> u64 {
    (bytes * 2).max(256 * MIB)
}

/// fio's 1 MiB sequential read of `path`, once through.
fn read_once(ctx: &Context<'_>, path: &Path, bytes: u64) -> anyhow::Result<fio::FioRun> {
    let job = Job::new("slowcat", &["rw=read", "bs=1m"])
        .with(format!("filename={}", path.display()))
        .with(format!("size={bytes}"));
    fio::run(ctx.device, &[], &[job], None)
}

/// Item 1 (Mortar Fig. 13a): no prefetching in the fallow cases, as Mortar measured its overheads; one more
/// case with the feedback policy shows what read-ahead adds to a miss.
/// Cases go into `cases` as they finish, so a run that fails later keeps them.
pub fn slowcat(ctx: &Context<'_>, cases: &mut Vec<SlowcatCase>) -> anyhow::Result<()> {
    let s = ctx.settings;
    let bytes = s.slowcat_bytes;
    let file = ctx.backing().join("slowcat.dat");
    create_file(&file, bytes)?;
    ctx.device.set_memory_limit(None)?;
    let mut record = |case: SlowcatCase| {
        ctx.progress.line(case.summary());
        cases.push(case);
    };
    ctx.progress.step("slowcat: cold device".into())?;
    ctx.cold()?;
    record(case(ctx, "cold device", "device", &file, bytes, None)?);
    ctx.progress.step("slowcat: page cache".into())?;
    let resident = device::resident_bytes(&file).unwrap_or(0);
    let mut warm = case(ctx, "page cache", "page cache", &file, bytes, None)?;
    warm.note = Some(format!(
        "{} MiB of the file in the page cache before the pass",
        resident / MIB
    ));
    record(warm);
    for (name, prefetch) in [("fallow", "off"), ("fallow feedback", "feedback")] {
        ctx.progress.step(format!("slowcat: {name} miss and hit"))?;
        let server = Server::start(ctx.bin, roomy_pool(bytes))?;
        let flags = vec!["--prefetch".to_string(), prefetch.to_string()];
        let mnt = ctx.mount("slowcat", Some(&server), &flags)?;
        let through = mnt.path.join("slowcat.dat");
        ctx.cold()?;
        record(case(
            ctx,
            &format!("{name} miss"),
            "device via fallow fs",
            &through,
            bytes,
            Some(&mnt),
        )?);
        if prefetch == "off" {
            // Second pass: the mount's page cache and the backing file's are dropped, fallow keeps the blocks.
            device::evict(&through)?;
            ctx.cold()?;
            record(case(
                ctx,
                "fallow hit",
                "fallow",
                &through,
                bytes,
                Some(&mnt),
            )?);
        }
    }
    ctx.progress.step("slowcat: FUSE passthrough".into())?;
    let mnt = ctx.mount("slowcat", None, &["--no-cache".to_string()])?;
    ctx.cold()?;
    let through = mnt.path.join("slowcat.dat");
    record(case(
        ctx,
        "FUSE passthrough",
        "device via FUSE",
        &through,
        bytes,
        Some(&mnt),
    )?);
    Ok(())
}

fn case(
    ctx: &Context<'_>,
    name: &str,
    served_by: &str,
    path: &Path,
    bytes: u64,
    mnt: Option<&Mount>,
) -> anyhow::Result<SlowcatCase> {
    let stats_before = mnt.and_then(|m| m.fresh_stats().ok());
    let io_before = ctx.device.io_bytes()?;
    let run = read_once(ctx, path, bytes)?;
    let device_bytes = ctx.device.io_bytes()?.since(io_before);
    let stats = match (mnt, stats_before) {
        (Some(m), Some(before)) => m
            .fresh_stats()
            .ok()
            .map(|after| mount::delta(&before, &after)),
        _ => None,
    };
    let read = &run.jobs[0].read;
    Ok(SlowcatCase {
        name: name.to_string(),
        served_by: served_by.to_string(),
        read_bytes: read.bytes,
        file_bytes: bytes,
        reads: read.ios,
        read_mean_ms: read.lat_mean_us / 1000.0,
        read_p99_ms: read.lat_p99_us / 1000.0,
        bytes_per_s: read.bytes_per_s,
        device_read_bytes: device_bytes.read,
        fs_stats: stats,
        note: None,
    })
}

/// The two workloads of item 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Video,
    Oltp,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Video => "video",
            Workload::Oltp => "oltp",
        }
    }
}

/// One configuration of item 2: no FUSE, FUSE without fallow, or fallow with a pool and a policy.
#[derive(Clone, Debug)]
pub(super) struct Config {
    pub name: String,
    /// None: the workload reads the backing directory itself.
    pub flags: Option<Vec<String>>,
    pub pool_bytes: Option<u64>,
    pub policy: String,
}

pub(super) fn configs(s: &Settings, workload: Workload) -> Vec<Config> {
    let depths = match workload {
        Workload::Video => &s.depths,
        Workload::Oltp => &s.oltp_depths,
    };
    let mut configs = vec![
        Config {
            name: "no FUSE".into(),
            flags: None,
            pool_bytes: None,
            policy: "kernel only".into(),
        },
        Config {
            name: "no cache".into(),
            flags: Some(vec!["--no-cache".into()]),
            pool_bytes: None,
            policy: "none".into(),
        },
    ];
    for &pool in &s.caches {
        let mut policies = vec!["off".to_string()];
        policies.extend(depths.iter().map(|d| format!("fixed:{d}")));
        policies.push("feedback".into());
        for policy in policies {
            configs.push(Config {
                name: format!("{policy} {}", size_name(pool)),
                flags: Some(vec!["--prefetch".into(), policy.clone()]),
                pool_bytes: Some(pool),
                policy,
            });
        }
        // The doorkeeper's worth, paired in the same run: feedback storing every block read for a reader
        // (not with --quick, whose runs are the tests' and too short to fill a pool).
        if s.quick {
            continue;
        }
        let policy = "feedback, admit all".to_string();
        configs.push(Config {
            name: format!("{policy} {}", size_name(pool)),
            flags: Some(vec![
                "--prefetch".into(),
                "feedback".into(),
                "--no-admission".into(),
            ]),
            pool_bytes: Some(pool),
            policy,
        });
    }
    configs
}

/// 100M, 1G, 16M.
pub fn size_name(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{}G", bytes >> 30)
    } else {
        format!("{}M", bytes / MIB)
    }
}

/// The video server's fio jobs over `dir`: three readers streaming their own files `PREFIX0.dat` ..
/// `PREFIX2.dat` (256 KiB reads, as Filebench's videoserver), looping over them for `runtime_s`, and one
/// writer rewriting `PREFIX-new.dat`. fio's flow control (weights 6, 6, 6 and 3, same block size) keeps the
/// writer at half of one reader's I/Os: 1:6 of the bytes read. `flow_sleep=10` (µs) keeps the regulation
/// from capping cached reads.
fn video_jobs(dir: &Path, prefix: &str, file_bytes: u64, runtime_s: u64) -> Vec<Job> {
    let timed = |job: Job| {
        job.with("time_based".into())
            .with(format!("runtime={runtime_s}"))
            .with("flow_sleep=10".into())
    };
    let mut jobs: Vec<Job> = (0..3)
        .map(|i| {
            timed(Job::new(
                &format!("reader{i}"),
                &["rw=read", "bs=256k", "flow=6"],
            ))
            .with(format!(
                "filename={}",
                dir.join(format!("{prefix}{i}.dat")).display()
            ))
            .with(format!("size={file_bytes}"))
        })
        .collect();
    jobs.push(
        timed(Job::new("writer", &["rw=write", "bs=256k", "flow=3"]))
            .with(format!(
                "filename={}",
                dir.join(format!("{prefix}-new.dat")).display()
            ))
            .with(format!("size={}", file_bytes / 2)),
    );
    jobs
}

/// OLTP's readers for `runtime_s` seconds (a warm-up runs them before, see [`oltp_warm_up`]).
fn oltp_jobs(s: &Settings, path: &Path, runtime_s: u64) -> Vec<Job> {
    vec![
        Job::new("oltp", &["rw=randread", "norandommap", "group_reporting"])
            .with(format!("filename={}", path.display()))
            .with(format!("size={}", s.oltp_bytes))
            .with(format!("bs={}", s.oltp_block_bytes))
            .with(format!("random_distribution=zipf:{}", s.oltp_zipf))
            .with(format!("numjobs={}", s.oltp_jobs))
            .with("time_based".into())
            .with(format!("runtime={runtime_s}")),
    ]
}

/// OLTP's warm-up: its readers run unmeasured (see [`settle`]) in a fio of their own.
fn oltp_warm_up(ctx: &Context<'_>, dir: &Path, server: Option<&Server>) -> anyhow::Result<WarmUp> {
    let s = ctx.settings;
    let jobs = oltp_jobs(s, &dir.join("oltp.db"), s.oltp_warmup_max_s);
    let mut fio = fio::Background::start(ctx.device, &jobs)?;
    let warm_up = settle(ctx, server, || fio.check_running());
    fio.stop()?;
    warm_up
}

/// Waits while a random-read workload runs unmeasured: at least `oltp_warmup_s` (the VM's page cache
/// fills) and, with a pool, until the pool has been full for `oltp_settle_s` (its hit ratio is the steady
/// one, not a filling cache's); never past `oltp_warmup_max_s`. `check_running` fails when the workload
/// has stopped on its own.
pub fn settle(
    ctx: &Context<'_>,
    server: Option<&Server>,
    mut check_running: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<WarmUp> {
    const POLL: Duration = Duration::from_secs(1);
    let s = ctx.settings;
    let started = Instant::now();
    let mut pool_full_after_s = None;
    loop {
        std::thread::sleep(POLL);
        if super::interrupted() {
            bail!("interrupted during a warm-up: cleaned up");
        }
        check_running()?;
        let elapsed_s = started.elapsed().as_secs_f64();
        if pool_full_after_s.is_none() && server.is_some_and(pool_is_full) {
            pool_full_after_s = Some(elapsed_s);
        }
        let settled = match (server, pool_full_after_s) {
            (None, _) => true,
            (Some(_), Some(full_s)) => elapsed_s - full_s >= s.oltp_settle_s as f64,
            (Some(_), None) => false,
        };
        if (elapsed_s >= s.oltp_warmup_s as f64 && settled)
            || elapsed_s >= s.oltp_warmup_max_s as f64
        {
            return Ok(WarmUp {
                seconds: started.elapsed().as_secs_f64(),
                pool_full_after_s,
                fs_reads: None,
            });
        }
    }
}

/// The pool has evicted, or holds within 5% of its limit.
fn pool_is_full(server: &Server) -> bool {
    server.info_number("evicted_keys") > 0.0
        || server.info_number("pool_used_bytes") >= server.pool_bytes as f64 * 0.95
}

/// Item 2: every configuration of one workload, in the "VM" of `vm_memory` bytes; runs go into `runs` as
/// they finish.
pub fn matrix(
    ctx: &Context<'_>,
    workload: Workload,
    runs: &mut Vec<MatrixRun>,
) -> anyhow::Result<()> {
    let s = ctx.settings;
    for i in 0..3 {
        if workload == Workload::Video {
            create_file(
                &ctx.backing().join(format!("video{i}.dat")),
                s.video_file_bytes,
            )?;
        }
    }
    if workload == Workload::Oltp {
        create_file(&ctx.backing().join("oltp.db"), s.oltp_bytes)?;
    }
    ctx.device.set_memory_limit(Some(s.vm_memory_bytes))?;
    for config in configs(s, workload) {
        ctx.progress
            .step(format!("{}: {}", workload.name(), config.name))?;
        let run = matrix_run(ctx, workload, &config)?;
        ctx.progress.line(run.summary(workload.name()));
        runs.push(run);
        super::report::add_speedups(runs, workload == Workload::Oltp);
    }
    ctx.device.set_memory_limit(None)
}

/// What no cache of each pool's size could beat on the OLTP runs (see [`super::bound`]); empty without a
/// no-cache run.
pub fn oltp_bounds(s: &Settings, runs: &[MatrixRun]) -> Vec<OltpBound> {
    let Some(no_cache) = runs.iter().find(|r| r.name == "no cache") else {
        return Vec::new();
    };
    let workload = super::bound::Workload {
        file_bytes: s.oltp_bytes,
        read_bytes: s.oltp_block_bytes,
        theta: s.oltp_zipf,
        jobs: s.oltp_jobs,
        read_iops: s.device.read_iops,
        vm_memory_bytes: s.vm_memory_bytes,
    };
    s.caches
        .iter()
        .map(|&pool| workload.bound(pool, no_cache.read_latency.lat_mean_us))
        .collect()
}

/// A configuration's processes: the mount (with FUSE) and its fallow server (with a pool); the mount goes
/// first when dropped.
pub(super) struct Started {
    pub mnt: Option<Mount>,
    pub server: Option<Server>,
    /// Where the workload finds its files: the mount, else the backing directory.
    pub dir: PathBuf,
}

/// Starts `config`'s server and mount (named `name`, with `extra_flags`); a database's mounts cache
/// `--oltp-fs-block-bytes` blocks.
pub(super) fn start(
    ctx: &Context<'_>,
    config: &Config,
    name: &str,
    extra_flags: &[&str],
    database: bool,
) -> anyhow::Result<Started> {
    let s = ctx.settings;
    let server = config
        .pool_bytes
        .map(|pool| Server::start(ctx.bin, pool))
        .transpose()?;
    let mnt = match &config.flags {
        Some(flags) => {
            let mut flags = flags.clone();
            flags.extend(extra_flags.iter().map(|f| f.to_string()));
            if database && server.is_some() && s.oltp_fs_block_bytes != 0 {
                flags.extend([
                    "--block-bytes".to_string(),
                    s.oltp_fs_block_bytes.to_string(),
                ]);
            }
            Some(ctx.mount(name, server.as_ref(), &flags)?)
        }
        None => None,
    };
    let dir = mnt
        .as_ref()
        .map_or(ctx.backing().to_path_buf(), |m| m.path.clone());
    Ok(Started { mnt, server, dir })
}

fn matrix_run(ctx: &Context<'_>, workload: Workload, config: &Config) -> anyhow::Result<MatrixRun> {
    let s = ctx.settings;
    let oltp = workload == Workload::Oltp;
    // In this order, so the mount is dropped (unmounted) before its server.
    let Started { server, mnt, dir } = start(ctx, config, workload.name(), &[], oltp)?;
    // A `--no-cache` mount drops a file's pages at every open (it cannot tell the file is unchanged), so a
    // warm-up in a fio of its own would hand the measured one a cold page cache: that run warms up inside
    // the measured fio instead (`ramp_time`), its counters sampled when the ramp ends.
    let warm_in_process = oltp && mnt.is_some() && server.is_none();
    let mut jobs = match workload {
        Workload::Video => video_jobs(&dir, "video", s.video_file_bytes, s.video_s),
        Workload::Oltp => oltp_jobs(s, &dir.join("oltp.db"), s.oltp_s),
    };
    if warm_in_process {
        jobs = jobs
            .into_iter()
            .map(|job| job.with(format!("ramp_time={}", s.oltp_warmup_s)))
            .collect();
    }
    ctx.cold()?;
    let stats_at_start = match workload {
        Workload::Oltp => mnt.as_ref().and_then(|m| m.fresh_stats().ok()),
        Workload::Video => None,
    };
    let mut warm_up = match (workload, warm_in_process) {
        (Workload::Oltp, false) => Some(oltp_warm_up(ctx, &dir, server.as_ref())?),
        (Workload::Oltp, true) => Some(WarmUp {
            seconds: s.oltp_warmup_s as f64,
            pool_full_after_s: None,
            fs_reads: None,
        }),
        (Workload::Video, _) => None,
    };
    let (run, stats_before, io_before) = match warm_in_process {
        false => {
            let stats_before = mnt.as_ref().and_then(|m| m.fresh_stats().ok());
            let io_before = ctx.device.io_bytes()?;
            (
                fio::run(ctx.device, &[], &jobs, None)?,
                stats_before,
                io_before,
            )
        }
        true => std::thread::scope(|scope| {
            let fio = scope.spawn(|| fio::run(ctx.device, &[], &jobs, None));
            std::thread::sleep(Duration::from_secs(s.oltp_warmup_s));
            let io_before = ctx.device.io_bytes();
            let stats_before = mnt.as_ref().and_then(|m| m.fresh_stats().ok());
            let run = fio.join().expect("the fio thread does not panic");
            anyhow::Ok((run?, stats_before, io_before?))
        })?,
    };
    let device_bytes = ctx.device.io_bytes()?.since(io_before);
    if let (Some(warm_up), Some(start), Some(before)) =
        (&mut warm_up, &stats_at_start, &stats_before)
    {
        warm_up.fs_reads = Some(mount::counter(&mount::delta(start, before), "reads"));
    }
    let stats = match (&mnt, stats_before) {
        (Some(m), Some(before)) => m
            .fresh_stats()
            .ok()
            .map(|after| mount::delta(&before, &after)),
        _ => None,
    };
    if workload == Workload::Video {
        check_write_share(&run)?;
    }
    Ok(MatrixRun {
        name: config.name.clone(),
        policy: config.policy.clone(),
        pool_bytes: config.pool_bytes,
        fuse: config.flags.is_some(),
        read_bytes: run.read_bytes(),
        write_bytes: run.write_bytes(),
        read_bytes_per_s: run.read_bytes_per_s(),
        wall_s: run.wall_s,
        read_latency: run.read_latency(),
        levels: Levels::new(run.read_bytes(), stats.as_ref(), device_bytes),
        device: device_bytes,
        fs_stats: stats,
        warm_up,
        speedup_vs_no_fuse: None,
        speedup_vs_no_cache: None,
    })
}

/// The writer wrote about a sixth of what the readers read (fio's flow control held).
fn check_write_share(run: &fio::FioRun) -> anyhow::Result<()> {
    let share = run.write_bytes() as f64 / run.read_bytes().max(1) as f64;
    if !(0.1..=0.25).contains(&share) {
        bail!(
            "video: wrote {} bytes for {} read: not about 1:6",
            run.write_bytes(),
            run.read_bytes()
        );
    }
    Ok(())
}

/// A memcpy loop over two buffers larger than the caches: bytes copied per second, one thread.
pub fn memcpy_bytes_per_s(duration: Duration) -> f64 {
    let source = vec![1u8; 64 * MIB as usize];
    let mut target = vec![0u8; 64 * MIB as usize];
    let started = Instant::now();
    let mut copied = 0u64;
    while started.elapsed() < duration {
        target.copy_from_slice(&source);
        std::hint::black_box(&mut target);
        copied += source.len() as u64;
    }
    copied as f64 / started.elapsed().as_secs_f64()
}

/// Item 3: 1 MiB and 128 KiB reads of a file fallow holds, through a `--direct-io` mount (every read reaches
/// fallow fs, none the page cache), beside the same reads of a null file system and a memcpy loop.
pub fn efficiency(ctx: &Context<'_>) -> anyhow::Result<EfficiencyResult> {
    let s = ctx.settings;
    let bytes = s.efficiency_bytes;
    create_file(&ctx.backing().join("eff.dat"), bytes)?;
    ctx.device.set_memory_limit(None)?;
    ctx.progress.step("efficiency: warming fallow".into())?;
    let server = Server::start(ctx.bin, roomy_pool(bytes))?;
    let flags = ["--direct-io", "--prefetch", "feedback"].map(String::from);
    let mnt = ctx.mount("eff", Some(&server), &flags)?;
    let through = mnt.path.join("eff.dat");
    ctx.cold()?;
    read_once(ctx, &through, bytes)?;
    let mut result = EfficiencyResult::default();
    for block in ["1m", "128k"] {
        ctx.progress
            .step(format!("efficiency: cache hits, {block} reads"))?;
        let before = mnt.fresh_stats()?;
        let run = timed_read(ctx, &through, block)?;
        let stats = mount::delta(&before, &mnt.fresh_stats()?);
        result
            .hit
            .push(super::report::Bandwidth::new(block, &run, Some(stats)));
    }
    drop(mnt);
    drop(server);
    let null = ctx.mount(
        "null",
        None,
        &[
            "--null-bytes".into(),
            bytes.to_string(),
            "--direct-io".into(),
        ],
    )?;
    for block in ["1m", "128k"] {
        ctx.progress
            .step(format!("efficiency: null fs, {block} reads"))?;
        let run = timed_read(ctx, &null.path.join("null"), block)?;
        result
            .null
            .push(super::report::Bandwidth::new(block, &run, None));
    }
    drop(null);
    result.memcpy_bytes_per_s = memcpy_bytes_per_s(Duration::from_secs(1));
    ctx.progress.line(result.summary());
    Ok(result)
}

fn timed_read(ctx: &Context<'_>, path: &Path, block: &str) -> anyhow::Result<fio::FioRun> {
    let job = Job::new("hit", &["rw=read", "time_based"])
        .with(format!("filename={}", path.display()))
        .with(format!("bs={block}"))
        .with(format!("runtime={}", ctx.settings.efficiency_s));
    fio::run(ctx.device, &[], &[job], None)
}

/// Item 4: item 2's video run over files that fill three quarters of the pool, with the pool halved at a
/// third of the run and restored at two thirds.
pub fn elastic(ctx: &Context<'_>) -> anyhow::Result<ElasticResult> {
    let s = ctx.settings;
    let dir_files = s.elastic_file_bytes;
    for i in 0..3 {
        create_file(&ctx.backing().join(format!("el{i}.dat")), dir_files)?;
    }
    ctx.device.set_memory_limit(Some(s.vm_memory_bytes))?;
    ctx.progress.step("elastic: video run".into())?;
    let pool = s.elastic_pool_bytes;
    let server = Server::start(ctx.bin, pool)?;
    let flags = ["--prefetch".to_string(), "feedback".to_string()];
    let mnt = ctx.mount("elastic", Some(&server), &flags)?;
    let jobs = video_jobs(&mnt.path, "el", dir_files, s.elastic_s);
    ctx.cold()?;
    let log_prefix = ctx.device.dir.join("elastic");
    let started = Instant::now();
    let third = Duration::from_secs_f64(s.elastic_s as f64 / 3.0);
    let (run, samples, cut_s, restore_s) = std::thread::scope(|scope| {
        let fio_thread = scope.spawn(|| fio::run(ctx.device, &[], &jobs, Some(&log_prefix)));
        let mut samples = Vec::new();
        let mut cut_s = None;
        let mut restore_s = None;
        let mut next = Duration::from_secs(1);
        while !fio_thread.is_finished() {
            std::thread::sleep(
                next.saturating_sub(started.elapsed())
                    .min(Duration::from_millis(50)),
            );
            let now = started.elapsed();
            if cut_s.is_none() && now >= third {
                server.set_pool_bytes(pool / 2)?;
                cut_s = Some(now.as_secs_f64());
            }
            if restore_s.is_none() && now >= third * 2 {
                server.set_pool_bytes(pool)?;
                restore_s = Some(now.as_secs_f64());
            }
            if now >= next {
                samples.push(sample(&mnt, &server, now.as_secs_f64()));
                next += Duration::from_secs(1);
            }
        }
        let run = fio_thread.join().expect("the fio thread does not panic")?;
        anyhow::Ok((run, samples, cut_s, restore_s))
    })?;
    ctx.device.set_memory_limit(None)?;
    let per_second = fio::per_second(&log_prefix, &[1, 2, 3])?;
    let result = ElasticResult::new(
        pool,
        per_second,
        samples,
        cut_s.context("the run ended before the cut")?,
        restore_s.context("the run ended before the restore")?,
        run.read_bytes(),
        run.write_bytes(),
    );
    ctx.progress.line(result.summary());
    Ok(result)
}

fn sample(mnt: &Mount, server: &Server, t_s: f64) -> ElasticSample {
    let stats = mnt.stats().unwrap_or_default();
    ElasticSample {
        t_s,
        pool_target_bytes: server.info_number("pool_target_bytes"),
        cache_hit_bytes: mount::counter(&stats, "cache_hit_bytes"),
        backing_read_bytes: mount::counter(&stats, "backing_read_bytes"),
        prefetch_depth_mean: mount::counter(&stats, "prefetch_depth_mean"),
        prefetch_wasted_bytes: mount::counter(&stats, "prefetch_wasted_bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matrix_has_baselines_then_every_policy_per_pool() {
        let mut s = super::super::tests_settings();
        s.quick = false;
        s.caches = vec![100 * MIB, 1 << 30];
        s.depths = vec![4, 16];
        s.oltp_depths = vec![64];
        let names: Vec<String> = configs(&s, Workload::Video)
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(
            names,
            [
                "no FUSE",
                "no cache",
                "off 100M",
                "fixed:4 100M",
                "fixed:16 100M",
                "feedback 100M",
                "feedback, admit all 100M",
                "off 1G",
                "fixed:4 1G",
                "fixed:16 1G",
                "feedback 1G",
                "feedback, admit all 1G"
            ]
        );
        let oltp: Vec<String> = configs(&s, Workload::Oltp)
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(
            oltp[2..6],
            [
                "off 100M",
                "fixed:64 100M",
                "feedback 100M",
                "feedback, admit all 100M"
            ]
        );
    }

    #[test]
    fn video_writes_a_sixth_of_what_it_reads() {
        let jobs = video_jobs(Path::new("/d"), "video", 600, 30);
        let weight = |job: &Job| -> u64 {
            job.options
                .iter()
                .find_map(|o| o.strip_prefix("flow="))
                .unwrap()
                .parse()
                .unwrap()
        };
        // Same block size everywhere, so the flow weights are the byte shares.
        assert!(jobs
            .iter()
            .all(|j| j.options.contains(&"bs=256k".to_string())));
        let read: u64 = jobs[..3].iter().map(weight).sum();
        assert_eq!(read, 6 * weight(&jobs[3]));
        assert!(jobs[3].options.contains(&"rw=write".to_string()));
        assert!(jobs[0]
            .options
            .contains(&"filename=/d/video0.dat".to_string()));
    }

    #[test]
    fn created_files_have_their_size_and_no_runs_of_zeros() {
        let path = std::env::temp_dir().join(format!("fallow-fsbench-file-{}", std::process::id()));
        create_file(&path, 3 * MIB + 5).unwrap();
        let data = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(data.len() as u64, 3 * MIB + 5);
        assert!(data.chunks(4096).all(|page| page.iter().any(|&b| b != 0)));
    }

    #[test]
    fn memcpy_is_measured() {
        let bytes_per_s = memcpy_bytes_per_s(Duration::from_millis(50));
        assert!(bytes_per_s > 1e8, "{bytes_per_s} bytes/s");
    }
}
