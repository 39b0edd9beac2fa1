//! Rate-limited log lines. A warning that a client or the OS can trigger in a loop (accept failing with
//! EMFILE, clients over a buffer limit) is logged the first time and then at most once per interval, with
//! the count of the occurrences that were not logged, so a flood cannot fill the log or cost CPU.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// One log site's limiter; a `static` per site.
pub struct RateLimited {
    interval_ms: u64,
    /// Milliseconds since `epoch()` when the site last logged, plus one (0 = never).
    last_logged_ms: AtomicU64,
    /// Occurrences since then that were not logged.
    suppressed: AtomicU64,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl RateLimited {
    pub const fn new(interval: Duration) -> RateLimited {
        RateLimited {
            interval_ms: interval.as_millis() as u64,
            last_logged_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Call at each occurrence: Some(suppressed occurrences since the last logged one) when this one
    /// should be logged, None when it is to be dropped.
    pub fn check(&self) -> Option<u64> {
        self.check_at(epoch().elapsed().as_millis() as u64 + 1)
    }

    fn check_at(&self, now_ms: u64) -> Option<u64> {
        let last = self.last_logged_ms.load(Ordering::Relaxed);
        let due = last == 0 || now_ms.saturating_sub(last) >= self.interval_ms;
        // One thread wins the slot; the others count themselves as suppressed.
        if due
            && self
                .last_logged_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// The text appended to a logged line, "" or " (repeated K times)":
/// `if let Some(n) = LIMIT.check() { tracing::warn!("accept failed{}", repeated(n)) }`.
pub fn repeated(suppressed: u64) -> String {
    if suppressed == 0 {
        String::new()
    } else {
        format!(" (repeated {suppressed} times)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_then_once_per_interval_with_the_count() {
        let limiter = RateLimited::new(Duration::from_secs(10));
        assert_eq!(limiter.check_at(1), Some(0), "the first occurrence logs");
        for now in 2..1000 {
            assert_eq!(limiter.check_at(now), None);
        }
        assert_eq!(
            limiter.check_at(10_001),
            Some(998),
            "the next logged line counts the dropped ones"
        );
        assert_eq!(limiter.check_at(10_002), None);
        assert_eq!(limiter.check_at(20_001), Some(1));
        assert_eq!(limiter.check_at(40_000), Some(0));
    }

    #[test]
    fn repeated_text() {
        assert_eq!(repeated(0), "");
        assert_eq!(repeated(7), " (repeated 7 times)");
    }
}
