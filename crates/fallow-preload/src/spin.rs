//! The client's spin before it sleeps, shared by blocking reads and writes, poll and epoll.
//!
//! A reply to a small command comes back in a few microseconds when the server's poller runs on another
//! core, so the first `PURE_SPIN` is a tight loop. After that the waiter yields its core on every round:
//! on a machine with fewer free cores than spinning threads, the server's poller may be waiting for
//! exactly this core, and a waiter that keeps it for its whole budget delays the reply it waits for.
use crate::channel::spin_policy;
use std::time::{Duration, Instant};

/// The tight part of the spin.
const PURE_SPIN: Duration = Duration::from_micros(1);

pub struct Spin {
    started: Instant,
    budget: Duration,
    rounds: u32,
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
        } else {
            // SAFETY: no arguments.
            unsafe { libc::syscall(libc::SYS_sched_yield) };
        }
        true
    }
}
