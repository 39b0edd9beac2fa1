//! `fallow fs`'s life: clean a dead mount left by a crash, connect to fallow, mount, run the watcher
//! (reconnects, pool readings, revalidation of open files, counters), and unmount on SIGINT/SIGTERM.
use crate::cache::admission::Doorkeeper;
use crate::cache::io_queue::IoQueue;
use crate::cache::remote::{client_address, parse_pool, Remote, RemoteConfig};
use crate::cache::{BlockCache, CacheSettings};
use crate::inodes::Inodes;
use crate::null::NullFs;
use crate::options::{FsArgs, Prefetch};
use crate::passthrough::{Handle, Passthrough};
use crate::stats::{self, Counters, Snapshot, StatsFile};
use anyhow::Context;
use fuser::{Config, INodeNo, MountOption, Notifier, SessionACL};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often the watcher wakes; its duties run at their own periods.
const WATCH_TICK: Duration = Duration::from_millis(100);
const RECONNECT_PERIOD: Duration = Duration::from_secs(1);
const POOL_PERIOD: Duration = Duration::from_millis(500);
const REPORT_PERIOD: Duration = Duration::from_secs(1);

pub fn run(args: &FsArgs) -> anyhow::Result<()> {
    if args.stats {
        return stats::print_stats(&args.mountpoint);
    }
    let prefetch = args.validate().map_err(anyhow::Error::msg)?;
    init_logging();
    clean_dead_mount(&args.mountpoint)?;
    let signals = block_termination_signals();
    let config = mount_config(args);
    if let Some(bytes) = args.null_bytes {
        let session = fuser::Session::new(
            NullFs::new(bytes, args.direct_io),
            &args.mountpoint,
            &config,
        )
        .with_context(|| format!("mounting {}", args.mountpoint.display()))?;
        tracing::info!(mountpoint = %args.mountpoint.display(), bytes, "null filesystem mounted");
        return serve(session.spawn()?, &signals, || {});
    }
    serve_backing(args, prefetch, &config, &signals)
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FALLOW_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn mount_config(args: &FsArgs) -> Config {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("fallow".into()),
        MountOption::Subtype("fallow".into()),
        MountOption::DefaultPermissions,
    ];
    if args.allow_other {
        config.acl = SessionACL::All;
    }
    config.n_threads = Some(args.threads as usize);
    config.clone_fd = true;
    config
}

/// A mountpoint whose FUSE server died answers ENOTCONN: detach it so this process can mount there.
fn clean_dead_mount(mountpoint: &Path) -> anyhow::Result<()> {
    match std::fs::metadata(mountpoint) {
        Err(error) if error.raw_os_error() == Some(libc::ENOTCONN) => {
            let path = crate::sys::cstring(mountpoint.as_os_str())
                .map_err(|_| anyhow::anyhow!("bad mountpoint"))?;
            // SAFETY: a valid C string.
            let detached = unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } == 0;
            if !detached {
                let status = std::process::Command::new("fusermount3")
                    .arg("-uz")
                    .arg(mountpoint)
                    .status();
                anyhow::ensure!(
                    status.is_ok_and(|status| status.success()),
                    "{}: a dead mount is there and cannot be unmounted",
                    mountpoint.display()
                );
            }
            tracing::warn!(mountpoint = %mountpoint.display(), "cleaned up a dead mount left by a crashed fallow fs");
            Ok(())
        }
        Err(error) => Err(anyhow::anyhow!("{}: {error}", mountpoint.display())),
        Ok(meta) if !meta.is_dir() => {
            Err(anyhow::anyhow!("{}: not a directory", mountpoint.display()))
        }
        Ok(_) => Ok(()),
    }
}

/// Blocks SIGINT and SIGTERM in this thread (and so in every thread started after), to take them with
/// sigtimedwait: a clean unmount instead of a death mid-request.
fn block_termination_signals() -> libc::sigset_t {
    // SAFETY: a zeroed sigset is initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn signal_within(signals: &libc::sigset_t, wait: Duration) -> bool {
    let timeout = libc::timespec {
        tv_sec: wait.as_secs() as i64,
        tv_nsec: i64::from(wait.subsec_nanos()),
    };
    // SAFETY: a valid set and timeout.
    unsafe { libc::sigtimedwait(signals, std::ptr::null_mut(), &timeout) > 0 }
}

/// Waits for SIGINT/SIGTERM (or an unmount from outside), running `tick` meanwhile, then unmounts.
fn serve(
    session: fuser::BackgroundSession,
    signals: &libc::sigset_t,
    mut tick: impl FnMut(),
) -> anyhow::Result<()> {
    loop {
        if signal_within(signals, WATCH_TICK) {
            tracing::info!("signal received: unmounting");
            session.umount_and_join().context("unmounting")?;
            return Ok(());
        }
        if session.guard.is_finished() {
            tracing::info!("unmounted from outside: exiting");
            return session.join().context("the FUSE session");
        }
        tick();
    }
}

fn read_password(args: &FsArgs) -> anyhow::Result<Option<String>> {
    let Some(path) = &args.password_file else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--password-file {}", path.display()))?;
    Ok(Some(text.lines().next().unwrap_or("").to_string()))
}

fn serve_backing(
    args: &FsArgs,
    prefetch: Prefetch,
    config: &Config,
    signals: &libc::sigset_t,
) -> anyhow::Result<()> {
    let backing = args.backing.clone().expect("validated");
    let root = std::fs::File::open(&backing)
        .with_context(|| format!("--backing {}", backing.display()))?;
    let root = crate::sys::open_path(std::os::fd::AsRawFd::as_raw_fd(&root), c".")
        .map_err(|code| anyhow::anyhow!("--backing: errno {code}"))?;
    let inodes =
        Arc::new(Inodes::new(root).map_err(|code| anyhow::anyhow!("--backing: errno {code}"))?);
    let counters = Arc::new(Counters::default());
    let cache = if args.no_cache {
        None
    } else {
        Some(start_cache(args, prefetch, &counters)?)
    };
    let ttl = Duration::from_millis(args.revalidate_ms);
    let fs = Passthrough::new(
        inodes.clone(),
        cache.clone(),
        prefetch,
        ttl,
        args.direct_io,
        counters.clone(),
    );
    let handles = fs.handles.clone();
    let notifier_slot = fs.notifier.clone();
    let session = fuser::Session::new(fs, &args.mountpoint, config)
        .with_context(|| format!("mounting {}", args.mountpoint.display()))?;
    let notifier = session.notifier();
    let _ = notifier_slot.set(notifier.clone());
    let session = session.spawn()?;
    tracing::info!(mountpoint = %args.mountpoint.display(), backing = %backing.display(), cache = cache.is_some(), "fallow fs mounted");
    let mut watcher = Watcher {
        args: args.clone(),
        prefetch,
        cache: cache.clone(),
        inodes,
        handles,
        counters,
        notifier,
        last: HashMap::new(),
        report_refused_logged: AtomicBool::new(false),
    };
    let result = serve(session, signals, || watcher.tick());
    if let Some(cache) = &cache {
        cache.queue.stop();
        cache.remote.remove_tenant_password();
    }
    let _ = std::fs::remove_file(stats::stats_file(&args.mountpoint));
    result
}

fn start_cache(
    args: &FsArgs,
    prefetch: Prefetch,
    counters: &Arc<Counters>,
) -> anyhow::Result<Arc<BlockCache>> {
    let remote_config = RemoteConfig {
        address: client_address(&args.server).map_err(anyhow::Error::msg)?,
        user: args.user.clone(),
        password: read_password(args)?,
        tenant: args.tenant.clone(),
        weight: args.weight,
        tier2: args.tier2,
    };
    let remote = Arc::new(Remote::new(remote_config, counters.clone()));
    match remote.setup() {
        Ok(Some(warning)) => tracing::warn!("{warning}"),
        Ok(None) => {}
        Err(why) => tracing::warn!(
            "fallow is unavailable ({why}): reading the backing directory until it is back"
        ),
    }
    let block_bytes = u64::from(args.block_bytes);
    let admission = (!args.no_admission).then(|| Arc::new(Doorkeeper::new()));
    let queue = IoQueue::new(
        args.io_queue_bytes,
        block_bytes,
        Some(remote.clone()),
        admission.clone(),
        counters.clone(),
    );
    queue.start(args.io_threads);
    let settings = CacheSettings {
        block_bytes,
        prefetch,
        revalidate: Duration::from_millis(args.revalidate_ms),
    };
    Ok(BlockCache::new(
        settings,
        remote,
        queue,
        admission,
        counters.clone(),
    ))
}

/// The background duties, run between signal checks.
struct Watcher {
    args: FsArgs,
    prefetch: Prefetch,
    cache: Option<Arc<BlockCache>>,
    inodes: Arc<Inodes>,
    handles: Arc<Mutex<HashMap<u64, Arc<Handle>>>>,
    counters: Arc<Counters>,
    notifier: Notifier,
    last: HashMap<&'static str, Instant>,
    report_refused_logged: AtomicBool,
}

impl Watcher {
    fn due(&mut self, duty: &'static str, period: Duration) -> bool {
        let now = Instant::now();
        match self.last.get(duty) {
            Some(last) if now.duration_since(*last) < period => false,
            _ => {
                self.last.insert(duty, now);
                true
            }
        }
    }

    fn tick(&mut self) {
        if let Some(cache) = self.cache.clone() {
            if !cache.remote.is_available() && self.due("reconnect", RECONNECT_PERIOD) {
                cache.remote.try_reconnect();
            }
            if self.due("pool", POOL_PERIOD) {
                self.read_pool(&cache);
            }
            if self.due("revalidate", Duration::from_millis(self.args.revalidate_ms)) {
                self.revalidate(&cache);
            }
        }
        if self.due("report", REPORT_PERIOD) {
            self.report();
        }
    }

    /// The pool's target and resident bytes, for feedback read-ahead's depth cap and the doorkeeper.
    fn read_pool(&self, cache: &BlockCache) {
        let feedback_depth_max = match self.prefetch {
            Prefetch::Feedback { depth_max } => Some(depth_max),
            _ => None,
        };
        if feedback_depth_max.is_none() && cache.admission.is_none() {
            return;
        }
        let Ok(fallow_client::Reply::Bulk(info)) =
            cache.remote.call(&[b"INFO", b"elastic", b"stats"])
        else {
            return;
        };
        let Some(pool) = parse_pool(&info) else {
            return;
        };
        let block_bytes = cache.settings.block_bytes;
        if let Some(doorkeeper) = &cache.admission {
            doorkeeper.observe_pool(&pool, block_bytes);
        }
        if let Some(depth_max) = feedback_depth_max {
            let streams = self.streams().0.max(1);
            cache.cap.update(
                pool.target_bytes,
                pool.resident_bytes,
                streams,
                block_bytes,
                depth_max,
            );
        }
    }

    /// Open files changed behind the mount within the period: a new epoch, and the kernel's pages dropped.
    fn revalidate(&self, cache: &BlockCache) {
        for inode in self.inodes.open_files() {
            if let Ok(true) = cache.validate(&inode.state) {
                tracing::debug!(ino = inode.ino, "changed behind the mount");
                let _ = self.notifier.inval_inode(INodeNo(inode.fuse_ino), 0, 0);
            }
            cache.write_record(&inode.state);
        }
    }

    /// (sequential streams, their mean depth).
    fn streams(&self) -> (u64, f64) {
        let handles: Vec<Arc<Handle>> = self.handles.lock().values().cloned().collect();
        let depths: Vec<u32> = handles
            .iter()
            .filter_map(|handle| {
                let stream = handle.open.stream.lock();
                stream.is_sequential().then(|| stream.depth_blocks())
            })
            .collect();
        let mean = if depths.is_empty() {
            0.0
        } else {
            depths.iter().map(|&d| f64::from(d)).sum::<f64>() / depths.len() as f64
        };
        (depths.len() as u64, mean)
    }

    fn snapshot(&self) -> Snapshot {
        let mut snapshot = self.counters.snapshot();
        let judged = snapshot.prefetch_used + snapshot.prefetch_wasted;
        snapshot.prefetch_accuracy = if judged == 0 {
            1.0
        } else {
            snapshot.prefetch_used as f64 / judged as f64
        };
        let (streams, depth_mean) = self.streams();
        snapshot.streams_active = streams;
        snapshot.prefetch_depth_mean = depth_mean;
        if let Some(cache) = &self.cache {
            snapshot.fallow_connected = u64::from(cache.remote.is_available());
            snapshot.io_queue_bytes = cache.queue.queued_bytes();
            snapshot.admission_pool_full = cache
                .admission
                .as_ref()
                .map_or(0, |doorkeeper| u64::from(doorkeeper.pool_full()));
        }
        snapshot
    }

    fn report(&self) {
        let snapshot = self.snapshot();
        let file = StatsFile {
            mountpoint: self.args.mountpoint.clone(),
            backing: self.args.backing.clone().unwrap_or_default(),
            pid: std::process::id(),
            unix_time_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis() as u64,
            block_bytes: self.args.block_bytes,
            prefetch: self.args.prefetch.clone(),
            counters: snapshot.clone(),
        };
        if let Err(error) =
            stats::write_stats_file(&stats::stats_file(&self.args.mountpoint), &file)
        {
            tracing::debug!(%error, "cannot write the stats file");
        }
        let Some(cache) = &self.cache else {
            return;
        };
        let mount = self.args.mountpoint.to_string_lossy().into_owned();
        let fields = snapshot.fields();
        let mut args: Vec<&[u8]> = vec![b"FSCACHE", b"REPORT", mount.as_bytes()];
        for (name, value) in &fields {
            args.push(name.as_bytes());
            args.push(value.as_bytes());
        }
        if let Ok(fallow_client::Reply::Error(text)) = cache.remote.call(&args) {
            if !self.report_refused_logged.swap(true, Relaxed) {
                tracing::warn!(
                    "fallow refused the counters report ({text}): INFO will not show this mount"
                );
            }
        }
    }
}
