//! The servers under test: started by the benchmark (`--spawn`) or given (`--server`), how each mode is
//! switched on, bulk loading, and the server-side figures (CPU time from /proc, INFO txn counters).
use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};

use super::commands::Dialect;
use super::driver::Probe;
use super::Mode;
use crate::bulk::client::{Conn, Reply};
use crate::options::ServerAddr;

const REPLY_BYTES_MAX: usize = 64 << 20;
/// Commands sent per round trip while loading.
const LOAD_PIPELINE: usize = 256;
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A server under test.
pub struct Target {
    /// `fallow` or `redis`.
    pub name: &'static str,
    pub addr: ServerAddr,
    /// For CPU time; None when the server is not on this machine.
    pub pid: Option<u32>,
    pub dialect: Dialect,
    child: Option<Child>,
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// target/release/fallow beside this binary.
pub fn default_fallow_bin() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("fallow")))
        .unwrap_or_else(|| PathBuf::from("target/release/fallow"))
}

pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

fn spawn(name: &'static str, program: &Path, args: &[String], port: u16) -> anyhow::Result<Target> {
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", program.display()))?;
    let target = Target {
        name,
        addr: ServerAddr::Tcp(format!("127.0.0.1:{port}")),
        pid: Some(child.id()),
        dialect: if name == "fallow" {
            Dialect::fallow()
        } else {
            Dialect::redis()
        },
        child: Some(child),
    };
    let deadline = Instant::now() + START_TIMEOUT;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            bail!("{} did not listen on port {port}", program.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(target)
}

/// `--bind 127.0.0.1 --port PORT` then `extra`: the flags fallow and redis-server share.
fn loopback_args(port: u16, extra: &[&str]) -> Vec<String> {
    let port = port.to_string();
    ["--bind", "127.0.0.1", "--port", &port]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
}

/// Starts fallow on a free loopback port (RESP only).
pub fn spawn_fallow(bin: &Path) -> anyhow::Result<Target> {
    let port = free_port()?;
    // A data directory of its own (one server per --dir), left behind empty of data: benchmark
    // tenants are ephemeral, so nothing is logged there.
    let dir = std::env::temp_dir().join(format!("fallow-bench-{}-{port}", std::process::id()));
    let dir = dir.to_string_lossy().into_owned();
    let extra = [
        "--memcache-port",
        "0",
        "--unixsocket",
        "",
        "--log-level",
        "warn",
        "--dir",
        &dir,
    ];
    spawn("fallow", bin, &loopback_args(port, &extra), port)
}

/// Starts Debian's redis-server on a free loopback port without persistence, if it is installed.
pub fn spawn_redis() -> anyhow::Result<Option<Target>> {
    if !on_path("redis-server") {
        return Ok(None);
    }
    let port = free_port()?;
    let args = loopback_args(port, &["--save", "", "--appendonly", "no"]);
    spawn("redis", Path::new("redis-server"), &args, port).map(Some)
}

/// A server that is already running; its pid is `pid`, or the one INFO reports when it is on this host.
pub fn existing(addr: ServerAddr, pid: Option<u32>) -> anyhow::Result<Target> {
    let mut target = Target {
        name: "fallow",
        addr,
        pid,
        dialect: Dialect::fallow(),
        child: None,
    };
    let info = target.info("server")?;
    if info.contains_key("redis_version") && !info.contains_key("fallow_version") {
        eprintln!(
            "note: {} looks like Redis; the transactional modes will fail",
            target.addr
        );
    }
    if target.pid.is_none() && target.is_local() {
        target.pid = info.get("process_id").and_then(|p| p.parse().ok());
    }
    Ok(target)
}

impl Target {
    fn is_local(&self) -> bool {
        match &self.addr {
            ServerAddr::Tcp(host_port) => ["127.", "localhost:", "[::1]:"]
                .iter()
                .any(|prefix| host_port.starts_with(prefix)),
            ServerAddr::Unix(_) => true,
        }
    }

    pub fn admin(&self) -> anyhow::Result<Conn> {
        Conn::connect(&self.addr, REPLY_BYTES_MAX)
    }

    /// The `field:value` lines of one INFO section.
    pub fn info(&self, section: &str) -> anyhow::Result<BTreeMap<String, String>> {
        let reply = self.admin()?.call(&[b"INFO", section.as_bytes()])?;
        let Reply::Bulk(text) = reply else {
            bail!("INFO {section}: {reply:?}");
        };
        Ok(String::from_utf8_lossy(&text)
            .lines()
            .filter_map(|line| line.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect())
    }

    /// INFO txn's numeric fields (empty on Redis).
    pub fn txn_counters(&self) -> anyhow::Result<BTreeMap<String, f64>> {
        if self.name != "fallow" {
            return Ok(BTreeMap::new());
        }
        Ok(self
            .info("txn")?
            .into_iter()
            .filter_map(|(k, v)| v.parse().ok().map(|n| (k, n)))
            .collect())
    }

    /// The server process's user + system CPU seconds, when it runs on this host.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid?)).ok()?;
        // Fields after the command name, which is in parentheses and may hold spaces: state is the
        // first, utime the 12th and stime the 13th.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: f64 =
            fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        // SAFETY: sysconf only reads a configuration value.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        Some(ticks / per_second)
    }

    /// Switches the server to `mode` (fallow only; Redis runs nontxn alone).
    pub fn set_mode(&self, mode: Mode) -> anyhow::Result<()> {
        if self.name != "fallow" {
            return Ok(());
        }
        let (locks, phasing) = mode.server_settings();
        let mut conn = self.admin()?;
        for (name, value) in [("txn-locks", locks), ("txn-phasing", phasing)] {
            let reply = conn.call(&[b"CONFIG", b"SET", name.as_bytes(), value.as_bytes()])?;
            // nontxn runs on a server without transactions too (the settings hardly matter without them).
            if let (Reply::Error(e), false) = (reply, mode == Mode::Nontxn) {
                bail!("CONFIG SET {name} {value}: {e}");
            }
        }
        Ok(())
    }

    /// Sends `commands` pipelined, with a progress bar; any error reply stops the load.
    pub fn load(
        &self,
        what: &str,
        commands: impl Iterator<Item = Vec<Vec<u8>>>,
        count: u64,
        quiet: bool,
    ) -> anyhow::Result<()> {
        let bar = progress_bar(count, quiet, &format!("{} load {what}", self.name));
        let started = Instant::now();
        let mut conn = self.admin()?;
        let mut batch = 0;
        for args in commands {
            let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            conn.push_command(&refs);
            batch += 1;
            if batch == LOAD_PIPELINE {
                flush_batch(&mut conn, batch)?;
                bar.inc(batch as u64);
                batch = 0;
            }
        }
        flush_batch(&mut conn, batch)?;
        bar.finish_and_clear();
        if !quiet {
            eprintln!(
                "{}: loaded {what} ({count} commands) in {:.1} s",
                self.name,
                started.elapsed().as_secs_f64()
            );
        }
        Ok(())
    }
}

fn flush_batch(conn: &mut Conn, batch: usize) -> anyhow::Result<()> {
    conn.send()?;
    for _ in 0..batch {
        if let Reply::Error(e) = conn.read_reply()? {
            bail!("loading: {e}");
        }
    }
    Ok(())
}

/// A bar on stderr (hidden when quiet or when stderr is not a terminal).
pub fn progress_bar(length: u64, quiet: bool, message: &str) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(length);
    bar.set_style(
        ProgressStyle::with_template("{msg:30} [{bar:40}] {pos}/{len} {elapsed}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_message(message.to_string());
    bar
}

/// Server CPU and INFO txn around the measured period.
pub struct ServerProbe<'a> {
    pub target: &'a Target,
    cpu_start: Option<f64>,
    counters_start: BTreeMap<String, f64>,
    /// CPU seconds in the measured period.
    pub cpu_s: Option<f64>,
    /// INFO txn counters' growth in the measured period.
    pub counters: BTreeMap<String, f64>,
}

impl<'a> ServerProbe<'a> {
    pub fn new(target: &'a Target) -> ServerProbe<'a> {
        ServerProbe {
            target,
            cpu_start: None,
            counters_start: BTreeMap::new(),
            cpu_s: None,
            counters: BTreeMap::new(),
        }
    }
}

impl Probe for ServerProbe<'_> {
    fn start(&mut self) -> anyhow::Result<()> {
        self.counters_start = self.target.txn_counters()?;
        self.cpu_start = self.target.cpu_seconds();
        Ok(())
    }

    fn stop(&mut self) -> anyhow::Result<()> {
        let cpu_end = self.target.cpu_seconds();
        self.cpu_s = self.cpu_start.zip(cpu_end).map(|(a, b)| b - a);
        let end = self.target.txn_counters()?;
        self.counters = end
            .into_iter()
            .map(|(k, v)| {
                let delta = v - self.counters_start.get(&k).copied().unwrap_or(0.0);
                (k, delta)
            })
            .collect();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_time() {
        let target = Target {
            name: "self",
            addr: ServerAddr::Tcp("127.0.0.1:1".into()),
            pid: Some(std::process::id()),
            dialect: Dialect::redis(),
            child: None,
        };
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_millis(30) {}
        assert!(target.cpu_seconds().unwrap() > 0.0);
    }
}
