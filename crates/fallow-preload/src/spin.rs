//! The client's spin before it sleeps, shared by blocking reads and writes, poll and epoll.
//!
//! A reply to a small command comes back in a few microseconds when the server's poller runs on another
//! core, so the first `PURE_SPIN` is a tight loop (a yield is a system call: one in progress when the
//! reply lands delays it). After that the waiter yields its core on every round:
//! on a machine with fewer free cores than spinning threads, the server's poller may be waiting for
//! exactly this core, and a waiter that keeps it for its whole budget delays the reply it waits for.
//!
//! When the poller and this thread share one core they can only take turns (each reply then waits for
//! a context switch, ~15 µs a round trip instead of ~5). The sign: replies keep arriving during a yield
//! that gave the core away. After `COLOCATED_REPLIES` such replies in a row the thread moves itself to
//! another of the cores it may use (it narrows its affinity to exclude the current core, which migrates
//! it at once, and restores the program's affinity straight after), at most once per `MOVE_INTERVAL`.
use crate::channel::spin_policy;
use std::cell::Cell;
use std::time::{Duration, Instant};

/// The tight part of the spin.
const PURE_SPIN: Duration = Duration::from_micros(5);
/// A yield that took this long gave the core to another thread.
const YIELD_SWITCHED: Duration = Duration::from_micros(2);
/// Replies in a row that arrived while a yield had given the core away, before the thread moves.
const COLOCATED_REPLIES: u32 = 64;
/// The least time between two moves.
const MOVE_INTERVAL: Duration = Duration::from_millis(50);

thread_local! {
    static COLOCATED_STREAK: Cell<u32> = const { Cell::new(0) };
    static LAST_MOVE: Cell<Option<Instant>> = const { Cell::new(None) };
}

pub struct Spin {
    started: Instant,
    budget: Duration,
    rounds: u32,
    /// The last round yielded and another thread ran meanwhile.
    switched: bool,
}

impl Spin {
    /// A spin of the client's budget (`FALLOW_SHM_SPIN_US`), or none when `wanted` is false.
    pub fn new(wanted: bool) -> Spin {
        let budget = if wanted {
            Duration::from_nanos(spin_policy().spin_ns)
        } else {
            Duration::ZERO
        };
        Spin {
            started: Instant::now(),
            budget,
            rounds: 0,
            switched: false,
        }
    }

    /// Rounds so far (callers do costlier checks every few rounds).
    pub fn rounds(&self) -> u32 {
        self.rounds
    }

    /// True while the budget lasts; pauses (or yields the core) before returning.
    pub fn again(&mut self) -> bool {
        if self.budget.is_zero() {
            return false;
        }
        self.rounds = self.rounds.wrapping_add(1);
        let spent = self.started.elapsed();
        if spent >= self.budget {
            return false;
        }
        if spent < PURE_SPIN {
            std::hint::spin_loop();
            self.switched = false;
        } else {
            let before = Instant::now();
            // SAFETY: no arguments.
            unsafe { libc::syscall(libc::SYS_sched_yield) };
            self.switched = before.elapsed() >= YIELD_SWITCHED;
        }
        true
    }

    /// The wait ended with the channel ready: notes whether it came while another thread had the core.
    pub fn ready(&self) {
        if self.rounds == 0 {
            return;
        }
        let streak = if self.switched {
            COLOCATED_STREAK.get() + 1
        } else {
            0
        };
        COLOCATED_STREAK.set(streak);
        if streak >= COLOCATED_REPLIES {
            COLOCATED_STREAK.set(0);
            move_to_another_core();
        }
    }
}

/// Moves this thread off its current core, leaving its affinity as it was.
fn move_to_another_core() {
    let now = Instant::now();
    if LAST_MOVE
        .get()
        .is_some_and(|last| now.duration_since(last) < MOVE_INTERVAL)
    {
        return;
    }
    LAST_MOVE.set(Some(now));
    // SAFETY: cpu_set_t is plain data; the calls read and write it for this thread (pid 0).
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::syscall(libc::SYS_sched_getaffinity, 0, size, &mut allowed as *mut _) < 0 {
            return;
        }
        let current = libc::sched_getcpu();
        if current < 0
            || libc::CPU_COUNT(&allowed) < 2
            || !libc::CPU_ISSET(current as usize, &allowed)
        {
            return;
        }
        let mut elsewhere = allowed;
        libc::CPU_CLR(current as usize, &mut elsewhere);
        libc::syscall(libc::SYS_sched_setaffinity, 0, size, &elsewhere as *const _);
        libc::syscall(libc::SYS_sched_setaffinity, 0, size, &allowed as *const _);
    }
}
