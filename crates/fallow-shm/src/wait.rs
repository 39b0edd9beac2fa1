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
