//! The instruction-count hook every worker's Lua state runs (every 100,000 instructions, as Redis
//! counts): during a run it marks a long script busy, stops a killed one, and hands the worker's other
//! tasks to another thread; during FUNCTION LOAD it enforces the load's time limit.
use crate::scripting::RunningScript;
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Instructions between two calls of the hook.
pub const HOOK_INSTRUCTIONS: u32 = 100_000;

/// How long FUNCTION LOAD lets a library's code run (Redis 7.0's limit).
pub const LOAD_TIMEOUT: Duration = Duration::from_millis(500);

/// Hook calls that try to hand the worker off; once it is handed off, a try costs only its pause.
const WORKER_HANDOFF_TRIES: u8 = 4;

/// The error a killed script stops with.
#[derive(Debug)]
pub struct Killed;

impl std::fmt::Display for Killed {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        out.write_str("Script killed by user with SCRIPT KILL...")
    }
}

impl std::error::Error for Killed {}

/// A library's code ran past `LOAD_TIMEOUT`.
#[derive(Debug)]
pub struct LoadTimeout;

impl std::fmt::Display for LoadTimeout {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        out.write_str("FUNCTION LOAD timeout")
    }
}

impl std::error::Error for LoadTimeout {}

/// What the hook watches on this thread.
enum Watch {
    Run(RunWatch),
    Load { deadline: Instant },
}

struct RunWatch {
    running: Arc<RunningScript>,
    busy_after: Duration,
    /// Tries left to hand the worker thread's other tasks to a new worker (see `leave_the_worker`).
    worker_handoff_tries: u8,
}

thread_local! {
    static WATCH: RefCell<Option<Watch>> = const { RefCell::new(None) };
}

/// Watches `running` (busy threshold, SCRIPT KILL) while `body` runs on this thread.
pub fn watching_run<R>(
    running: &Arc<RunningScript>,
    busy_after: Duration,
    body: impl FnOnce() -> R,
) -> R {
    let watch = Watch::Run(RunWatch {
        running: running.clone(),
        busy_after,
        worker_handoff_tries: WORKER_HANDOFF_TRIES,
    });
    watched(watch, body)
}

/// Stops `body` (a library's code) once it runs past `LOAD_TIMEOUT`.
pub fn watching_load<R>(body: impl FnOnce() -> R) -> R {
    let deadline = Instant::now() + LOAD_TIMEOUT;
    watched(Watch::Load { deadline }, body)
}

fn watched<R>(watch: Watch, body: impl FnOnce() -> R) -> R {
    WATCH.with(|slot| *slot.borrow_mut() = Some(watch));
    let result = body();
    WATCH.with(|slot| *slot.borrow_mut() = None);
    result
}

/// The hook. A killed run stops (again at every later call, so a script's own pcall cannot swallow
/// the kill); a run past the threshold is marked busy; a load past its deadline stops.
pub fn on_hook() -> mlua::Result<mlua::VmState> {
    WATCH.with(|watch| {
        let mut watch = watch.borrow_mut();
        match watch.as_mut() {
            None => Ok(mlua::VmState::Continue),
            Some(Watch::Load { deadline }) if Instant::now() >= *deadline => {
                Err(mlua::Error::external(LoadTimeout))
            }
            Some(Watch::Load { .. }) => Ok(mlua::VmState::Continue),
            Some(Watch::Run(run)) => watch_run(run),
        }
    })
}

fn watch_run(watch: &mut RunWatch) -> mlua::Result<mlua::VmState> {
    if watch.worker_handoff_tries > 0 {
        watch.worker_handoff_tries -= 1;
        leave_the_worker();
    }
    let running = &watch.running;
    if running.kill.load(Ordering::Relaxed) {
        return Err(mlua::Error::external(Killed));
    }
    if !running.busy.load(Ordering::Relaxed) && running.started.elapsed() >= watch.busy_after {
        running.busy.store(true, Ordering::Relaxed);
        tracing::warn!(
            script = %running.name,
            elapsed_ms = running.started.elapsed().as_millis() as u64,
            "slow script detected: still in execution after busy-reply-threshold; commands on its shards now get BUSY"
        );
    }
    Ok(mlua::VmState::Continue)
}

/// A script still running at the hook's first calls hands this worker thread's queued tasks to a new
/// worker, so no connection waits behind it: `block_in_place` sends the worker's core to another thread,
/// which takes it while this one pauses briefly; this thread then finishes the script outside the
/// runtime's workers. (Were the pause empty, this thread would take the core back before the other
/// could.) Short scripts never get here and pay nothing.
fn leave_the_worker() {
    use tokio::runtime::{Handle, RuntimeFlavor};
    const PAUSE: Duration = Duration::from_micros(500);
    if let Ok(handle) = Handle::try_current() {
        if handle.runtime_flavor() == RuntimeFlavor::MultiThread {
            tokio::task::block_in_place(|| std::thread::sleep(PAUSE));
        }
    }
}
