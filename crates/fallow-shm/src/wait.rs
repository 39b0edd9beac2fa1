//! Spin-then-sleep waiting, and the eventfd doorbell a sleeping side is woken through.
//!
//! A kernel wake-up costs what a Unix-socket round trip costs, so a side that expects an answer soon spins
//! first (`SpinPolicy::spin_ns`), then marks itself sleeping in the header, checks once more, and waits on
//! its doorbell. The peer rings the doorbell only when it sees that mark (`Mapping::peer_needs_wake`).
use crate::layout::{Mapping, Side};
use crate::sys;
use std::time::{Duration, Instant};

/// Environment variable clients read for their spin budget in microseconds (`FALLOW_SHM_SPIN_US`).
pub const SPIN_ENV: &str = "FALLOW_SHM_SPIN_US";
/// Spin budget when nothing says otherwise: long enough to cover a server's reply to a small command
/// (about a microsecond) many times over, short enough that an idle client burns little.
pub const SPIN_NS_DEFAULT: u64 = 50_000;
/// The longest a spin budget may be set to (one second of a core).
pub const SPIN_NS_MAX: u64 = 1_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpinPolicy {
    /// How long a waiting side spins before it sleeps; 0 sleeps at once.
    pub spin_ns: u64,
}

impl Default for SpinPolicy {
    fn default() -> SpinPolicy {
        SpinPolicy {
            spin_ns: SPIN_NS_DEFAULT,
        }
    }
}

impl SpinPolicy {
    /// `$FALLOW_SHM_SPIN_US` when set to a number, else the default.
    pub fn from_env() -> SpinPolicy {
        std::env::var(SPIN_ENV)
            .ok()
            .and_then(|value| value.trim().parse::<u64>().ok())
            .map(|us| SpinPolicy {
                spin_ns: us.saturating_mul(1000).min(SPIN_NS_MAX),
            })
            .unwrap_or_default()
    }
}

/// An eventfd owned by this process's end of a channel.
#[derive(Debug)]
pub struct Doorbell {
    fd: i32,
}

impl Doorbell {
    pub fn new() -> std::io::Result<Doorbell> {
        Ok(Doorbell {
            fd: sys::eventfd()?,
        })
    }

    /// Takes ownership of a received eventfd.
    pub fn from_fd(fd: i32) -> Doorbell {
        Doorbell { fd }
    }

    pub fn fd(&self) -> i32 {
        self.fd
    }

    pub fn ring(&self) {
        sys::eventfd_ring(self.fd);
    }

    /// Clears the counter; true when it had been rung.
    pub fn drain(&self) -> bool {
        sys::eventfd_drain(self.fd)
    }

    /// Waits until rung or `timeout` passes.
    pub fn wait(&self, timeout: Option<Duration>) -> std::io::Result<bool> {
        sys::wait_readable(
            self.fd,
            timeout.map(|t| t.as_nanos().min(u64::MAX as u128) as u64),
        )
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        sys::close(self.fd);
    }
}

/// Waits until `ready()` holds: spins for the policy's budget, then sleeps on `bell` with `side` marked
/// sleeping in `mapping`. `ready` is checked again after the mark, so a peer that moved an index just
/// before the mark is seen. Returns false when `deadline` passed first.
pub fn wait_until(
    mapping: &Mapping,
    side: Side,
    bell: &Doorbell,
    policy: SpinPolicy,
    deadline: Option<Instant>,
    mut ready: impl FnMut() -> bool,
) -> std::io::Result<bool> {
    if ready() {
        return Ok(true);
    }
    let started = Instant::now();
    let spin = Duration::from_nanos(policy.spin_ns);
    let mut polls: u32 = 0;
    loop {
        if ready() {
            return Ok(true);
        }
        polls = polls.wrapping_add(1);
        // The clock is read every 64 polls: a poll is a few nanoseconds, a clock read tens.
        if !polls.is_multiple_of(64) {
            std::hint::spin_loop();
            continue;
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Ok(false);
        }
        if now.duration_since(started) < spin {
            continue;
        }
        mapping.mark_sleeping(side);
        if ready() {
            mapping.clear_sleeping(side);
            return Ok(true);
        }
        let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let rung = bell.wait(timeout);
        bell.drain();
        mapping.clear_sleeping(side);
        rung?;
    }
}

/// A spin whose budget follows what spinning earns, for clients that spin before the channel's own
/// spin-then-sleep wait. When client and server share one core, each spinner holds the core the other
/// needs and a round trip costs the whole budget and more (docs/shm.md), so: a spin that sees the reply
/// restores the full budget; one that runs out halves it; and every `PROBE_INTERVAL`th wait spins the
/// full budget again, to notice when spinning starts paying off. fallow-client and fallow-bench use it.
#[derive(Clone, Debug)]
pub struct AdaptiveSpin {
    max_ns: u64,
    budget_ns: u64,
    waits: u32,
}

impl AdaptiveSpin {
    /// Waits between two full-budget spins while the budget is reduced.
    pub const PROBE_INTERVAL: u32 = 64;
    /// Budgets below this are not worth a clock read: spin none.
    pub const BUDGET_NS_MIN: u64 = 1_000;

    pub fn new(max_ns: u64) -> AdaptiveSpin {
        AdaptiveSpin {
            max_ns,
            budget_ns: max_ns,
            waits: 0,
        }
    }

    /// The budget of the next wait (unless it is a probe).
    pub fn budget_ns(&self) -> u64 {
        self.budget_ns
    }

    /// Spins until `ready()` or the budget runs out; adapts the budget to which came first.
    pub fn wait(&mut self, mut ready: impl FnMut() -> bool) {
        self.waits = self.waits.wrapping_add(1);
        let budget_ns = if self.waits.is_multiple_of(Self::PROBE_INTERVAL) {
            self.max_ns
        } else {
            self.budget_ns
        };
        if budget_ns == 0 {
            return;
        }
        let budget = Duration::from_nanos(budget_ns);
        let started = Instant::now();
        let mut polls: u32 = 0;
        loop {
            if ready() {
                self.budget_ns = self.max_ns;
                return;
            }
            polls = polls.wrapping_add(1);
            // A poll is a few nanoseconds, a clock read tens: read it every 64 polls.
            if polls.is_multiple_of(64) && started.elapsed() >= budget {
                break;
            }
            std::hint::spin_loop();
        }
        self.budget_ns /= 2;
        if self.budget_ns < Self::BUDGET_NS_MIN {
            self.budget_ns = 0;
        }
        debug_assert!(self.budget_ns <= self.max_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_adaptive_spin_halves_on_misses_and_comes_back_on_a_hit() {
        let mut spin = AdaptiveSpin::new(8_000);
        spin.wait(|| false);
        assert_eq!(spin.budget_ns(), 4_000, "a miss halves it");
        spin.wait(|| false);
        spin.wait(|| false);
        assert_eq!(spin.budget_ns(), 1_000);
        spin.wait(|| false);
        assert_eq!(spin.budget_ns(), 0, "below a microsecond: no spin");
        spin.wait(|| panic!("a zero budget does not poll"));
        // The probe every PROBE_INTERVAL waits spins the full budget, and a hit there restores it.
        while !(spin.waits + 1).is_multiple_of(AdaptiveSpin::PROBE_INTERVAL) {
            spin.wait(|| panic!("still no spin"));
        }
        spin.wait(|| true);
        assert_eq!(spin.budget_ns(), 8_000);
        let mut off = AdaptiveSpin::new(0);
        off.wait(|| false);
        assert_eq!(off.budget_ns(), 0, "FALLOW_SHM_SPIN_US=0 never spins");
    }
}
