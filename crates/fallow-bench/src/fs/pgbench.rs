//! Item 2c: OLTP as PostgreSQL (Debian's) running `pgbench -S` (select-only: one primary-key lookup of a
//! uniformly random account per transaction) with its data directory on the mount. The server runs as the
//! `postgres` user, so the mount needs `--allow-other`, as an operator's would. The database is built once
//! on the backing directory (`pgbench -i`, not measured); each configuration then starts the server over
//! the backing directory itself (no FUSE) or over a fresh mount of it, inside the "VM" (its memory cgroup,
//! the device's throttle), runs one `pgbench -S -P 1` through warm-up and measurement, and stops.
//! Latency and throughput come from pgbench's per-second progress lines of the measured seconds.
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use super::device::{self, IoBytes};
use super::items::{self, Context, Workload};
use super::mount::{self, Server};
use super::report::{PgbenchRun, WarmUp};
use super::Settings;

/// The PostgreSQL user that owns the cluster (initdb refuses root).
const PG_USER: &str = "postgres";
/// The cluster's buffer pool: small, so that the page cache and fallow are the levels measured, as the
/// OLTP item's fio reads have none.
const SHARED_BUFFERS: &str = "32MB";
/// pgbench's connections per client thread.
const CLIENTS_PER_THREAD: usize = 2;
/// The data directory, relative to the backing directory (or the mount).
const DATA_DIR: &str = "pg/data";

/// Where Debian's PostgreSQL binaries are: the newest `/usr/lib/postgresql/N/bin`, else `pg_ctl`'s directory
/// on PATH.
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("pg_ctl").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    if let Some((_, bin)) = found.pop() {
        return Ok(bin);
    }
    let output = Command::new("sh")
        .args(["-c", "command -v pg_ctl"])
        .output()?;
    let path = String::from_utf8_lossy(&output.stdout).trim().to_string();
    match Path::new(&path).parent() {
        Some(dir) if output.status.success() && !path.is_empty() => Ok(dir.to_path_buf()),
        _ => bail!(
            "PostgreSQL is not installed (scripts/install-test-deps.sh installs it) and item pgbench needs it"
        ),
    }
}

/// Checked before the first item, so that a long run does not stop at this one: the binaries and the user.
pub fn check_prerequisites() -> anyhow::Result<()> {
    let bin = bin_dir()?;
    for program in ["initdb", "pg_ctl", "pgbench"] {
        if !bin.join(program).is_file() {
            bail!(
                "{program} is not in {} (scripts/install-test-deps.sh installs PostgreSQL)",
                bin.display()
            );
        }
    }
    let known = Command::new("id")
        .args(["-u", PG_USER])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !known {
        bail!("no user {PG_USER}: item pgbench runs the server as {PG_USER} (Debian's postgresql creates it)");
    }
    Ok(())
}

/// The cluster: its binaries, socket directory and port.
pub struct Cluster {
    bin: PathBuf,
    socket_dir: PathBuf,
    log: PathBuf,
    port: u16,
}

/// A started server; stopped (fast shutdown) when dropped.
struct Running<'a> {
    cluster: &'a Cluster,
    data: PathBuf,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut stop = self.cluster.as_user("pg_ctl");
        stop.arg("-D")
            .arg(&self.data)
            .args(["-m", "fast", "-w", "stop"]);
        if let Err(error) = run_quietly(stop) {
            eprintln!("fallow-bench fs: stopping PostgreSQL: {error:#}");
        }
    }
}

fn run_quietly(mut command: Command) -> anyhow::Result<()> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// `program` run as `PG_USER`.
fn as_pg_user(program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new("runuser");
    command.args(["-u", PG_USER, "--"]).arg(program);
    command
}

/// `command`, as built, to run inside the device's groups (its reads throttled, its page cache the VM's).
fn in_groups(ctx: &Context<'_>, command: &Command) -> Command {
    let args: Vec<String> = command
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    ctx.device.command(Path::new(command.get_program()), &args)
}

/// The server, run as `PG_USER`, must reach its data directory and socket under the scratch directory.
fn check_reachable(dir: &Path) -> anyhow::Result<()> {
    let status = as_pg_user("test")
        .arg("-x")
        .arg(dir)
        .status()
        .context("running runuser (util-linux)")?;
    if !status.success() {
        bail!(
            "the {PG_USER} user cannot reach {}: give --work-dir a directory every user can traverse (such as \
             /var/tmp), or check that the user exists",
            dir.display()
        );
    }
    Ok(())
}

fn chown_to_pg_user(path: &Path) -> anyhow::Result<()> {
    device::run_checked("chown", &[PG_USER, &path.display().to_string()]).map(|_| ())
}

impl Cluster {
    /// Builds the database of `--pgbench-scale` on the backing directory (the device is fresh each run),
    /// outside the throttle: setup is not measured.
    pub fn create(ctx: &Context<'_>) -> anyhow::Result<Cluster> {
        let s = ctx.settings;
        check_reachable(&ctx.device.dir)?;
        let socket_dir = ctx.device.dir.join("pg-socket");
        std::fs::create_dir_all(&socket_dir)?;
        chown_to_pg_user(&socket_dir)?;
        let pg_dir = ctx.backing().join("pg");
        std::fs::create_dir_all(&pg_dir)?;
        chown_to_pg_user(&pg_dir)?;
        let cluster = Cluster {
            bin: bin_dir()?,
            log: socket_dir.join("postgresql.log"),
            socket_dir,
            port: 5400 + (std::process::id() % 500) as u16,
        };
        let data = ctx.backing().join(DATA_DIR);
        let mut initdb = cluster.as_user("initdb");
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", PG_USER, "--auth=trust", "-E", "UTF8"]);
        run_quietly(initdb)?;
        let server = cluster.start(None, &data)?;
        // Server-side generation (G) is the quickest; WAL-light settings are the server's (see start).
        let mut init = cluster.pgbench();
        init.args(["-i", "-I", "dtGvp", "-q", "-s"])
            .arg(s.pgbench_scale.to_string())
            .arg("postgres");
        run_quietly(init).context("pgbench -i")?;
        drop(server);
        Ok(cluster)
    }

    fn as_user(&self, program: &str) -> Command {
        as_pg_user(self.bin.join(program))
    }

    fn pgbench(&self) -> Command {
        let mut command = Command::new(self.bin.join("pgbench"));
        command
            .arg("-h")
            .arg(&self.socket_dir)
            .args(["-p", &self.port.to_string(), "-U", PG_USER]);
        command
    }

    /// Starts the server over `data`: in the device's groups when `ctx` is given (its reads are throttled,
    /// its page cache is the VM's), else outside them.
    fn start<'a>(&'a self, ctx: Option<&Context<'_>>, data: &Path) -> anyhow::Result<Running<'a>> {
        let options = format!(
            "-p {} -k {} -c listen_addresses='' -c shared_buffers={SHARED_BUFFERS} \
             -c wal_level=minimal -c max_wal_senders=0 -c max_wal_size=256MB",
            self.port,
            self.socket_dir.display()
        );
        let mut pg_ctl = self.as_user("pg_ctl");
        pg_ctl
            .arg("-D")
            .arg(data)
            .args(["-o", &options, "-l"])
            .arg(&self.log)
            .args(["-w", "start"]);
        let command = match ctx {
            Some(ctx) => in_groups(ctx, &pg_ctl),
            None => pg_ctl,
        };
        let running = Running {
            cluster: self,
            data: data.to_path_buf(),
        };
        run_quietly(command).with_context(|| {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            format!("starting PostgreSQL over {}: {tail:?}", data.display())
        })?;
        Ok(running)
    }
}

/// One progress line of `pgbench -P 1`: "progress: 5.0 s, 2301.2 tps, lat 1.735 ms stddev 0.512, 0 failed".
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Progress {
    pub t_s: f64,
    pub tps: f64,
    pub latency_ms: f64,
}

pub fn parse_progress(line: &str) -> Option<Progress> {
    let rest = line.strip_prefix("progress: ")?;
    let mut fields = rest.split(", ");
    let t_s = fields.next()?.strip_suffix(" s")?.parse().ok()?;
    let tps = fields.next()?.strip_suffix(" tps")?.parse().ok()?;
    let latency_ms = fields
        .next()?
        .strip_prefix("lat ")?
        .split(' ')
        .next()?
        .parse()
        .ok()?;
    Some(Progress {
        t_s,
        tps,
        latency_ms,
    })
}

/// Transactions a second and their mean latency over `lines` (each line one second, weighted by its
/// transactions); None without a transaction.
pub fn mean_over(lines: &[Progress]) -> Option<(f64, f64)> {
    let transactions: f64 = lines.iter().map(|p| p.tps).sum();
    if lines.is_empty() || transactions <= 0.0 {
        return None;
    }
    let latency_ms = lines.iter().map(|p| p.tps * p.latency_ms).sum::<f64>() / transactions;
    Some((transactions / lines.len() as f64, latency_ms))
}

/// A running `pgbench -S -P 1`, its progress lines collected by a thread.
struct Client {
    child: Child,
    lines: Arc<Mutex<Vec<Progress>>>,
    stderr_tail: Arc<Mutex<Vec<String>>>,
}

impl Client {
    fn start(ctx: &Context<'_>, cluster: &Cluster, seconds: u64) -> anyhow::Result<Client> {
        let clients = ctx.settings.pgbench_clients;
        let threads = clients.div_ceil(CLIENTS_PER_THREAD);
        let mut pgbench = cluster.pgbench();
        pgbench.args([
            "-S",
            "-n",
            "-P",
            "1",
            "-c",
            &clients.to_string(),
            "-j",
            &threads.to_string(),
            "-T",
            &seconds.to_string(),
            "postgres",
        ]);
        let mut child = in_groups(ctx, &pgbench)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting pgbench")?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stderr_tail = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("stderr is piped");
        let (into_lines, into_tail) = (lines.clone(), stderr_tail.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                match parse_progress(&line) {
                    Some(p) => into_lines.lock().expect("not poisoned").push(p),
                    None => {
                        let mut tail = into_tail.lock().expect("not poisoned");
                        tail.push(line);
                        let excess = tail.len().saturating_sub(5);
                        tail.drain(..excess);
                    }
                }
            }
        });
        Ok(Client {
            child,
            lines,
            stderr_tail,
        })
    }

    fn progress_count(&self) -> usize {
        self.lines.lock().expect("not poisoned").len()
    }

    fn check_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "pgbench exited early ({status}): {:?}",
                self.stderr_tail.lock().expect("not poisoned")
            );
        }
        Ok(())
    }

    /// SIGINT; waits for the exit.
    fn stop(mut self) -> anyhow::Result<Vec<Progress>> {
        // SAFETY: kill(2) on our own child, not reaped yet.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                self.child.kill()?;
                self.child.wait()?;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let lines = self.lines.lock().expect("not poisoned").clone();
        Ok(lines)
    }
}

/// Item 2c: every configuration (no FUSE, no cache, and per pool feedback and feedback admitting all;
/// read-ahead depths are left out: `-S` reads single random pages, and the OLTP item shows them equal).
pub fn matrix(ctx: &Context<'_>, runs: &mut Vec<PgbenchRun>) -> anyhow::Result<()> {
    let s = ctx.settings;
    ctx.progress.step("pgbench: building the database".into())?;
    let cluster = Cluster::create(ctx)?;
    ctx.device.set_memory_limit(Some(s.vm_memory_bytes))?;
    for config in configs(s) {
        ctx.progress.step(format!("pgbench: {}", config.name))?;
        let run = run(ctx, &cluster, &config)?;
        ctx.progress.line(run.summary());
        runs.push(run);
        super::report::add_pgbench_speedups(runs);
    }
    ctx.device.set_memory_limit(None)
}

/// OLTP's configurations less the read-ahead depths and `off`.
fn configs(s: &Settings) -> Vec<items::Config> {
    items::configs(s, Workload::Oltp)
        .into_iter()
        .filter(|c| c.pool_bytes.is_none() || c.policy.starts_with("feedback"))
        .collect()
}

fn run(ctx: &Context<'_>, cluster: &Cluster, config: &items::Config) -> anyhow::Result<PgbenchRun> {
    let s = ctx.settings;
    let started = items::start(ctx, config, "pgbench", &["--allow-other"], true)?;
    let (server, mnt) = (&started.server, &started.mnt);
    let root = &started.dir;
    ctx.cold()?;
    let stats_at_start = mnt.as_ref().map(|m| m.fresh_stats()).transpose()?;
    let postgres = cluster.start(Some(ctx), &root.join(DATA_DIR))?;
    let mut client = Client::start(ctx, cluster, s.oltp_warmup_max_s + s.oltp_s + 60)?;
    let measured = measure(ctx, &mut client, server.as_ref(), mnt.as_ref());
    let lines = client.stop()?;
    drop(postgres);
    let Measured {
        mut warm_up,
        first_line,
        stats_before,
        stats,
        device,
    } = measured?;
    if let (Some(start), Some(before)) = (&stats_at_start, &stats_before) {
        warm_up.fs_reads = Some(mount::counter(&mount::delta(start, before), "reads"));
    }
    let first = first_line.min(lines.len());
    let window = &lines[first..(first + s.oltp_s as usize).min(lines.len())];
    let Some((tps, latency_ms)) = mean_over(window) else {
        bail!(
            "pgbench {}: no transaction in the measured seconds",
            config.name
        );
    };
    Ok(PgbenchRun {
        name: config.name.clone(),
        policy: config.policy.clone(),
        pool_bytes: config.pool_bytes,
        fuse: config.flags.is_some(),
        tps,
        latency_mean_ms: latency_ms,
        seconds: window.len(),
        device,
        fs_stats: stats,
        warm_up,
        speedup_vs_no_fuse: None,
        speedup_vs_no_cache: None,
    })
}

/// What [`measure`] saw.
struct Measured {
    warm_up: WarmUp,
    /// pgbench's first progress line of the measured seconds.
    first_line: usize,
    /// `fallow fs --stats` when the measured seconds began, and its growth over them.
    stats_before: Option<serde_json::Value>,
    stats: Option<serde_json::Value>,
    /// The device's bytes over the measured seconds.
    device: IoBytes,
}

/// The warm-up, then `oltp_s` measured seconds.
fn measure(
    ctx: &Context<'_>,
    client: &mut Client,
    server: Option<&Server>,
    mnt: Option<&mount::Mount>,
) -> anyhow::Result<Measured> {
    let warm_up = items::settle(ctx, server, || client.check_running())?;
    let stats_before = mnt.map(|m| m.fresh_stats()).transpose()?;
    let io_before = ctx.device.io_bytes()?;
    let first_line = client.progress_count();
    let until = Instant::now() + Duration::from_secs(ctx.settings.oltp_s);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
        super::check_interrupted()?;
        client.check_running()?;
    }
    let device = ctx.device.io_bytes()?.since(io_before);
    let stats = match (mnt, &stats_before) {
        (Some(m), Some(before)) => Some(mount::delta(before, &m.fresh_stats()?)),
        _ => None,
    };
    Ok(Measured {
        warm_up,
        first_line,
        stats_before,
        stats,
        device,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_baselines_then_feedback_with_and_without_admission_per_pool() {
        let mut s = super::super::tests_settings();
        s.quick = false;
        s.caches = vec![100 << 20, 1 << 30];
        let names: Vec<String> = configs(&s).into_iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "no FUSE",
                "no cache",
                "feedback 100M",
                "feedback, admit all 100M",
                "feedback 1G",
                "feedback, admit all 1G"
            ]
        );
    }

    #[test]
    fn progress_lines_parse_and_average_by_transactions() {
        let a = parse_progress("progress: 5.0 s, 2000.0 tps, lat 2.000 ms stddev 0.512, 0 failed");
        assert_eq!(
            a,
            Some(Progress {
                t_s: 5.0,
                tps: 2000.0,
                latency_ms: 2.0
            })
        );
        // PostgreSQL 14 has no "failed" field.
        let b = parse_progress("progress: 6.0 s, 6000.0 tps, lat 1.000 ms stddev 0.1").unwrap();
        assert_eq!(b.latency_ms, 1.0);
        assert_eq!(parse_progress("starting vacuum...end."), None);
        assert_eq!(parse_progress("progress: x s, 1 tps, lat 1 ms"), None);
        let (tps, latency_ms) = mean_over(&[a.unwrap(), b]).unwrap();
        assert_eq!(tps, 4000.0);
        // 2000 transactions at 2 ms and 6000 at 1 ms.
        assert_eq!(latency_ms, 1.25);
        assert_eq!(mean_over(&[]), None);
    }
}
