//! The processes under test: a fallow server whose elastic pool is capped (`elastic-max`), and `fallow fs`
//! mounts over the device's backing directory, started inside the device's cgroups so their reads of the
//! backing files are throttled. Each is stopped on drop: the mount by SIGTERM (a clean unmount), then
//! `fusermount3 -u`, then a lazy unmount.
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::device::Device;
use crate::bulk::client::{Conn, Reply};
use crate::options::ServerAddr;
use crate::transports::servers::{spawn_fallow, Spawned};

const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const REPLY_BYTES_MAX: usize = 1 << 20;
/// How often fallow fs writes its counters for `--stats`.
const STATS_PERIOD: Duration = Duration::from_secs(1);

/// A fallow server with its pool capped at `pool_bytes`.
pub struct Server {
    pub spawned: Spawned,
    pub pool_bytes: u64,
}

impl Server {
    pub fn start(bin: &Path, pool_bytes: u64) -> anyhow::Result<Server> {
        let spawned = spawn_fallow(bin, &["--elastic-max".into(), pool_bytes.to_string()])?;
        Ok(Server {
            spawned,
            pool_bytes,
        })
    }

    pub fn addr(&self) -> String {
        format!("unix:{}", self.spawned.socket.display())
    }

    fn call(&self, args: &[&[u8]]) -> anyhow::Result<Reply> {
        let addr = ServerAddr::Unix(self.spawned.socket.clone());
        let reply = Conn::connect(&addr, REPLY_BYTES_MAX)?.call(args)?;
        if let Reply::Error(text) = &reply {
            bail!("{}: {}", String::from_utf8_lossy(args[0]), text);
        }
        Ok(reply)
    }

    /// `CONFIG SET elastic-max BYTES`: the controller shrinks the pool within milliseconds.
    pub fn set_pool_bytes(&self, bytes: u64) -> anyhow::Result<()> {
        self.call(&[
            b"CONFIG",
            b"SET",
            b"elastic-max",
            bytes.to_string().as_bytes(),
        ])?;
        Ok(())
    }

    /// One numeric field of INFO (0 when absent).
    pub fn info_number(&self, field: &str) -> f64 {
        let Ok(Reply::Bulk(text)) = self.call(&[b"INFO", b"all"]) else {
            return 0.0;
        };
        String::from_utf8_lossy(&text)
            .lines()
            .filter_map(|line| line.split_once(':'))
            .find(|(key, _)| *key == field)
            .and_then(|(_, value)| value.trim().parse().ok())
            .unwrap_or(0.0)
    }
}

/// A running `fallow fs`.
pub struct Mount {
    pub path: PathBuf,
    pub flags: Vec<String>,
    bin: PathBuf,
    child: Option<Child>,
    log: PathBuf,
}

/// Whether `path` is a mount point now (per /proc/self/mountinfo).
pub fn is_mounted(path: &Path) -> bool {
    let target = path.to_string_lossy();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(&target))
}

impl Mount {
    /// Starts `fallow fs PATH FLAGS` in the device's groups and waits for the mount.
    /// Its stderr goes to `log` (the scratch directory), so the progress lines stay readable.
    pub fn start(
        bin: &Path,
        device: &Device,
        path: &Path,
        flags: Vec<String>,
        log: &Path,
    ) -> anyhow::Result<Mount> {
        std::fs::create_dir_all(path)?;
        if is_mounted(path) {
            bail!("{} is already a mount point", path.display());
        }
        let mut args = vec!["fs".to_string(), path.display().to_string()];
        args.extend(flags.iter().cloned());
        let child = device
            .command(bin, &args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log)?)
            .spawn()
            .with_context(|| format!("starting {} fs", bin.display()))?;
        let mut mount = Mount {
            path: path.to_path_buf(),
            flags,
            bin: bin.to_path_buf(),
            child: Some(child),
            log: log.to_path_buf(),
        };
        mount.wait_mounted()?;
        Ok(mount)
    }

    fn wait_mounted(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + MOUNT_TIMEOUT;
        while !is_mounted(&self.path) {
            let child = self.child.as_mut().expect("a started mount has its child");
            if let Some(status) = child.try_wait()? {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                bail!(
                    "fallow fs {} {} exited at start ({status}): {}",
                    self.path.display(),
                    self.flags.join(" "),
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                );
            }
            if Instant::now() > deadline || super::interrupted() {
                bail!("fallow fs did not mount {}", self.path.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// `fallow fs --stats PATH` once the counters written after `now` are out: fallow fs writes them once a
    /// second, so a figure read at once could miss the last second of a run.
    pub fn fresh_stats(&self) -> anyhow::Result<serde_json::Value> {
        std::thread::sleep(STATS_PERIOD + Duration::from_millis(200));
        self.stats()
    }

    /// `fallow fs --stats PATH`: its `counters` object (up to a second old).
    pub fn stats(&self) -> anyhow::Result<serde_json::Value> {
        let output = std::process::Command::new(&self.bin)
            .args(["fs", "--stats"])
            .arg(&self.path)
            .output()
            .context("running fallow fs --stats")?;
        if !output.status.success() {
            bail!(
                "fallow fs --stats {}: {}",
                self.path.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let mut value: serde_json::Value =
            serde_json::from_slice(&output.stdout).context("parsing fallow fs --stats")?;
        match value.get_mut("counters") {
            Some(counters) if counters.is_object() => Ok(counters.take()),
            _ => bail!(
                "fallow fs --stats {}: no counters object",
                self.path.display()
            ),
        }
    }

    /// Unmounts: SIGTERM (fallow fs unmounts itself), then fusermount3, then a lazy unmount.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        // SAFETY: kill only sends a signal to our own child.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_TIMEOUT;
        while child.try_wait()?.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if child.try_wait()?.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if is_mounted(&self.path) {
            let path = self.path.to_string_lossy().to_string();
            if super::device::run_checked("fusermount3", &["-u", &path]).is_err() {
                super::device::run_checked("umount", &["-l", &path])?;
            }
        }
        let _ = std::fs::remove_dir(&self.path);
        Ok(())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Err(error) = self.stop() {
            eprintln!(
                "fallow-bench fs: unmounting {}: {error:#}",
                self.path.display()
            );
        }
    }
}

/// A counter of `fallow fs --stats` (0 when absent).
pub fn counter(stats: &serde_json::Value, name: &str) -> f64 {
    stats[name].as_f64().unwrap_or(0.0)
}

/// The growth of every numeric counter between two `--stats` (gauges such as prefetch_accuracy,
/// prefetch_depth_mean and streams_active are taken from `after`).
pub fn delta(before: &serde_json::Value, after: &serde_json::Value) -> serde_json::Value {
    const GAUGES: [&str; 5] = [
        "prefetch_accuracy",
        "prefetch_depth_mean",
        "streams_active",
        "fallow_connected",
        "io_queue_bytes",
    ];
    let Some(fields) = after.as_object() else {
        return after.clone();
    };
    let mut out = serde_json::Map::new();
    for (name, value) in fields {
        let grown = match (value.as_f64(), before[name].as_f64()) {
            (Some(now), Some(then)) if !GAUGES.contains(&name.as_str()) => {
                serde_json::json!(now - then)
            }
            _ => value.clone(),
        };
        out.insert(name.clone(), grown);
    }
    // The run's own accuracy, from the counters' growth (the gauge is the mount's whole life).
    let used = counter(&serde_json::Value::Object(out.clone()), "prefetch_used");
    let wasted = counter(&serde_json::Value::Object(out.clone()), "prefetch_wasted");
    if out.contains_key("prefetch_used") {
        let accuracy = if used + wasted > 0.0 {
            used / (used + wasted)
        } else {
            1.0
        };
        out.insert("prefetch_accuracy".into(), serde_json::json!(accuracy));
    }
    serde_json::Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_grow_and_gauges_are_kept() {
        let before = serde_json::json!({"reads": 10, "streams_active": 2, "name": "x",
            "prefetch_used": 10, "prefetch_wasted": 10, "prefetch_accuracy": 0.5});
        let after = serde_json::json!({"reads": 25, "streams_active": 1, "name": "x",
            "prefetch_used": 40, "prefetch_wasted": 20, "prefetch_accuracy": 0.66});
        let d = delta(&before, &after);
        assert_eq!(counter(&d, "reads"), 15.0);
        assert_eq!(counter(&d, "streams_active"), 1.0);
        // 30 used, 10 wasted during the run.
        assert_eq!(counter(&d, "prefetch_accuracy"), 0.75);
        assert_eq!(d["name"], "x");
        assert_eq!(counter(&d, "absent"), 0.0);
    }

    #[test]
    fn the_root_is_a_mount_point_and_a_fresh_directory_is_not() {
        assert!(is_mounted(Path::new("/")));
        let dir =
            std::env::temp_dir().join(format!("fallow-fsbench-nomount-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(!is_mounted(&dir));
        std::fs::remove_dir(&dir).unwrap();
    }
}
