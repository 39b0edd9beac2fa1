//! The monotonic clock in nanoseconds, and a timerfd that wakes an event loop at an exact time on that
//! clock. Open-loop sends need sub-millisecond wake-ups, which epoll's millisecond timeout cannot give.
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Nanoseconds on CLOCK_MONOTONIC (the clock `std::time::Instant` also reads).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec we pass; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A one-shot timer on CLOCK_MONOTONIC whose descriptor becomes readable when it expires.
#[derive(Debug)]
pub struct Timer {
    fd: OwnedFd,
    /// The expiry now armed (0 = none), so re-arming for the same time costs no system call.
    armed_ns: u64,
}

impl Timer {
    pub fn new() -> io::Result<Timer> {
        // SAFETY: timerfd_create takes no pointers; a non-negative result is a descriptor we now own.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Timer { fd, armed_ns: 0 })
    }

    /// Makes the timer fire at `deadline_ns` (an absolute [`now_ns`] time).
    pub fn arm(&mut self, deadline_ns: u64) -> io::Result<()> {
        if deadline_ns == self.armed_ns {
            return Ok(());
        }
        // A zero it_value would disarm the timer; 1 ns is in the past and fires at once.
        let deadline_ns = deadline_ns.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: spec is a valid itimerspec; a null old-value pointer is allowed.
        let rc = unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        self.armed_ns = deadline_ns;
        Ok(())
    }

    /// Consumes an expiry so the descriptor can signal the next one.
    pub fn clear(&mut self) {
        let mut expirations = [0u8; 8];
        // SAFETY: reads at most 8 bytes into an 8-byte buffer; EAGAIN (not expired) is fine to ignore.
        unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                expirations.as_mut_ptr().cast(),
                expirations.len(),
            )
        };
        self.armed_ns = 0;
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_moves_forward() {
        let a = now_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = now_ns();
        assert!(b >= a + 2_000_000, "{a} -> {b}");
    }

    #[test]
    fn timer_fires_after_its_deadline() {
        let mut poll = mio::Poll::new().unwrap();
        let mut timer = Timer::new().unwrap();
        let fd = timer.raw_fd();
        poll.registry()
            .register(
                &mut mio::unix::SourceFd(&fd),
                mio::Token(0),
                mio::Interest::READABLE,
            )
            .unwrap();
        let start = now_ns();
        timer.arm(start + 3_000_000).unwrap();
        let mut events = mio::Events::with_capacity(4);
        poll.poll(&mut events, Some(std::time::Duration::from_secs(2)))
            .unwrap();
        assert!(!events.is_empty(), "timer did not fire");
        assert!(now_ns() >= start + 3_000_000);
        timer.clear();
    }
}
