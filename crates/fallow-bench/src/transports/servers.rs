//! The servers the transports benchmark starts: fallow with its TCP port, its Unix socket and shared-memory
//! channels, and redis-server on its Unix socket for `redis-benchmark`. Each lives in a scratch directory
//! removed on drop; CPU time comes from /proc.
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A server process started by the benchmark; killed on drop.
pub struct Spawned {
    pub name: &'static str,
    pub port: u16,
    pub socket: PathBuf,
    pub pid: u32,
    child: Child,
    dir: PathBuf,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A fresh scratch directory for one server.
fn scratch_dir(name: &str, port: u16) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "fallow-bench-transports-{}-{name}-{port}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

fn wait_listening(child: &mut Child, port: u16, socket: &Path, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    while TcpStream::connect(("127.0.0.1", port)).is_err() || !socket.exists() {
        if let Some(status) = child.try_wait()? {
            bail!("{what} exited at start ({status})");
        }
        if Instant::now() > deadline {
            bail!(
                "{what} did not listen on port {port} and {}",
                socket.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Starts fallow on a free loopback port with its Unix socket in a scratch directory and shared-memory
/// channels on; `extra` adds flags (e.g. `--shm-spin-us 0`).
pub fn spawn_fallow(bin: &Path, extra: &[String]) -> anyhow::Result<Spawned> {
    let port = free_port()?;
    let dir = scratch_dir("fallow", port)?;
    let socket = dir.join("fallow.sock");
    let mut command = Command::new(bin);
    command
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--memcache-port", "0", "--log-level", "warn"])
        .args(["--shm-channels", "yes"])
        .arg("--unixsocket")
        .arg(&socket)
        .arg("--dir")
        .arg(&dir)
        .args(extra);
    spawn(command, "fallow", port, socket, dir, bin)
}

/// Starts redis-server without persistence on a free port and a Unix socket, when it is installed.
pub fn spawn_redis() -> anyhow::Result<Option<Spawned>> {
    if !crate::txn::server::on_path("redis-server") {
        return Ok(None);
    }
    let port = free_port()?;
    let dir = scratch_dir("redis", port)?;
    let socket = dir.join("redis.sock");
    let mut command = Command::new("redis-server");
    command
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args([
            "--save",
            "",
            "--appendonly",
            "no",
            "--unixsocketperm",
            "700",
        ])
        .arg("--unixsocket")
        .arg(&socket)
        .arg("--dir")
        .arg(&dir);
    spawn(
        command,
        "redis",
        port,
        socket,
        dir,
        Path::new("redis-server"),
    )
    .map(Some)
}

fn spawn(
    mut command: Command,
    name: &'static str,
    port: u16,
    socket: PathBuf,
    dir: PathBuf,
    bin: &Path,
) -> anyhow::Result<Spawned> {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let mut spawned = Spawned {
        name,
        port,
        socket,
        pid: child.id(),
        child,
        dir,
    };
    let what = format!("{name} ({})", bin.display());
    wait_listening(&mut spawned.child, port, &spawned.socket, &what)?;
    Ok(spawned)
}

impl Spawned {
    pub fn tcp_addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The process's user + system CPU seconds so far.
    pub fn cpu_seconds(&self) -> Option<f64> {
        process_cpu_seconds(self.pid)
    }
}

/// utime + stime of `pid` from /proc/PID/stat, in seconds (clock-tick resolution).
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (in parentheses, may hold spaces): utime is the 12th, stime the 13th.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / per_second)
}

/// This process's user + system CPU seconds (all threads), from getrusage.
pub fn self_cpu_seconds() -> f64 {
    // SAFETY: rusage is plain data that getrusage fills.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}
