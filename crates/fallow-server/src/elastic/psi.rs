//! The memory-pressure trigger: a PSI trigger ("some 100000 1000000": 100 ms of stall within 1 s) written to
//! a PSI file (/proc/pressure/memory or a cgroup's memory.pressure) and a thread that poll()s it for POLLPRI
//! and wakes the controller at once. Without CAP_SYS_RESOURCE the kernel (6.5+) takes only windows that
//! are multiples of 2 s, so "some 200000 2000000" (the same 10%) is tried next. Where no trigger can be
//! armed (no PSI, not permitted, not a PSI file) the controller keeps to its plain polling and the reason
//! is recorded.
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Stall time within the window that fires the trigger.
pub const STALL_US: u64 = 100_000;
/// The trigger's window (the kernel accepts 500 ms to 10 s).
pub const WINDOW_US: u64 = 1_000_000;
/// The triggers tried in turn, (stall µs, window µs): the second is what an unprivileged process may set.
pub const TRIGGERS: [(u64, u64); 2] = [(STALL_US, WINDOW_US), (2 * STALL_US, 2 * WINDOW_US)];
/// How long one poll() waits before the watcher looks at its stop flag.
const POLL_TIMEOUT_MS: i32 = 250;

/// procfs and cgroup2 superblock magics: PSI files live on one of them.
const PROC_SUPER_MAGIC: i64 = 0x9fa0;
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// An armed PSI trigger; closing the file removes it.
pub struct PsiTrigger {
    file: File,
}

impl PsiTrigger {
    /// Arms the first of `TRIGGERS` the kernel accepts; returns it with the (stall, window) used.
    pub fn arm_first(path: &Path) -> Result<(PsiTrigger, (u64, u64)), String> {
        let mut last_error = String::new();
        for (stall_us, window_us) in TRIGGERS {
            match PsiTrigger::arm(path, stall_us, window_us) {
                Ok(trigger) => return Ok((trigger, (stall_us, window_us))),
                Err(error) => last_error = error,
            }
        }
        Err(last_error)
    }

    /// Arms `some <stall_us> <window_us>` on `path`.
    pub fn arm(path: &Path, stall_us: u64, window_us: u64) -> Result<PsiTrigger, String> {
        let describe = |error: std::io::Error| format!("{}: {error}", path.display());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(describe)?;
        if !on_psi_filesystem(&file) {
            return Err(format!(
                "{}: not a PSI file (neither procfs nor cgroup2)",
                path.display()
            ));
        }
        // The kernel wants the trigger with its terminating NUL, in one write.
        let trigger = format!("some {stall_us} {window_us}\0");
        std::io::Write::write_all(&mut &file, trigger.as_bytes()).map_err(describe)?;
        Ok(PsiTrigger { file })
    }

    /// Waits up to `timeout_ms` for the trigger. Ok(true) when it fired, Ok(false) on timeout.
    pub fn wait(&self, timeout_ms: i32) -> Result<bool, String> {
        let mut poll = libc::pollfd {
            fd: self.file.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&mut poll, 1, timeout_ms) };
        if ready < 0 {
            let error = std::io::Error::last_os_error();
            return match error.kind() {
                std::io::ErrorKind::Interrupted => Ok(false),
                _ => Err(format!("poll: {error}")),
            };
        }
        if poll.revents & libc::POLLERR != 0 {
            return Err("the PSI trigger went away (POLLERR)".into());
        }
        Ok(poll.revents & libc::POLLPRI != 0)
    }
}

fn on_psi_filesystem(file: &File) -> bool {
    // SAFETY: fstatfs writes into the zeroed struct we pass, for a valid descriptor.
    let magic = unsafe {
        let mut stat: libc::statfs = std::mem::zeroed();
        if libc::fstatfs(file.as_raw_fd(), &mut stat) != 0 {
            return false;
        }
        stat.f_type as i64
    };
    magic == PROC_SUPER_MAGIC || magic == CGROUP2_SUPER_MAGIC
}

/// Arms a trigger on `path` and starts a thread that calls `on_pressure` each time it fires, until `stop`.
/// Ok(the trigger armed, e.g. "some 100000 1000000"); Err(reason) when none could be; the caller then
/// polls only.
pub fn spawn_watcher(
    path: &Path,
    stop: Arc<AtomicBool>,
    on_pressure: impl Fn() + Send + 'static,
) -> Result<String, String> {
    let (trigger, (stall_us, window_us)) = PsiTrigger::arm_first(path)?;
    let _thread: JoinHandle<()> = std::thread::Builder::new()
        .name("fallow-psi".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match trigger.wait(POLL_TIMEOUT_MS) {
                    Ok(true) => on_pressure(),
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(%error, "PSI trigger stopped; the controller polls only");
                        return;
                    }
                }
            }
        })
        .map_err(|error| format!("cannot start the PSI thread: {error}"))?;
    Ok(format!("some {stall_us} {window_us}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elastic::source::tests::TempDir;

    #[test]
    fn missing_psi_file_is_a_reason() {
        let error = PsiTrigger::arm(
            Path::new("/nonexistent/pressure/memory"),
            STALL_US,
            WINDOW_US,
        )
        .err()
        .unwrap();
        assert!(error.contains("/nonexistent/pressure/memory"), "{error}");
    }

    #[test]
    fn an_ordinary_file_is_not_a_trigger() {
        let dir = TempDir::new("psi");
        dir.write("memory", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
        let stop = Arc::new(AtomicBool::new(false));
        let error = spawn_watcher(&dir.0.join("memory"), stop, || {})
            .err()
            .unwrap();
        assert!(error.contains("not a PSI file"), "{error}");
    }

    #[test]
    fn real_trigger_arms_or_says_why() {
        let path = Path::new("/proc/pressure/memory");
        match PsiTrigger::arm_first(path) {
            // Armed: an idle wait times out or reports a real event, but does not fail.
            Ok((trigger, used)) => {
                assert!(TRIGGERS.contains(&used));
                assert!(trigger.wait(1).is_ok());
            }
            Err(reason) => assert!(reason.starts_with("/proc/pressure/memory"), "{reason}"),
        }
    }
}
