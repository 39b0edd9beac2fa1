//! How the controller thread is woken before its poll interval ends: a CONFIG SET of an elastic setting, a
//! PSI pressure event, or shutdown. A mutex-guarded set of pending reasons plus a condition variable.
use parking_lot::{Condvar, Mutex};
use std::time::Duration;

/// Why the controller woke (several reasons may have piled up).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Woken {
    pub config: bool,
    pub pressure: bool,
    pub stop: bool,
}

#[derive(Default)]
pub struct Wake {
    pending: Mutex<Woken>,
    signal: Condvar,
}

impl Wake {
    pub fn config_changed(&self) {
        self.raise(|woken| woken.config = true);
    }

    pub fn pressure(&self) {
        self.raise(|woken| woken.pressure = true);
    }

    pub fn stop(&self) {
        self.raise(|woken| woken.stop = true);
    }

    fn raise(&self, mark: impl FnOnce(&mut Woken)) {
        mark(&mut self.pending.lock());
        self.signal.notify_all();
    }

    /// Waits until a reason is raised or `timeout` passes; returns (and clears) what was raised.
    pub fn wait(&self, timeout: Duration) -> Woken {
        let mut pending = self.pending.lock();
        if *pending == Woken::default() {
            self.signal.wait_for(&mut pending, timeout);
        }
        std::mem::take(&mut *pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn times_out_without_reason() {
        let wake = Wake::default();
        let started = Instant::now();
        assert_eq!(wake.wait(Duration::from_millis(20)), Woken::default());
        assert!(started.elapsed() >= Duration::from_millis(15));
    }

    #[test]
    fn a_raised_reason_ends_the_wait_early() {
        let wake = Arc::new(Wake::default());
        let raiser = wake.clone();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            raiser.config_changed();
        });
        let started = Instant::now();
        let woken = wake.wait(Duration::from_secs(10));
        thread.join().unwrap();
        assert!(woken.config && !woken.pressure && !woken.stop);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn reasons_raised_before_the_wait_are_kept() {
        let wake = Wake::default();
        wake.pressure();
        wake.stop();
        let woken = wake.wait(Duration::from_secs(10));
        assert!(woken.pressure && woken.stop);
        assert_eq!(wake.wait(Duration::ZERO), Woken::default(), "cleared");
    }
}
