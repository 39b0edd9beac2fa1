//! The elastic controller: on every wake-up (poll interval, PSI pressure, CONFIG SET) it samples the host,
//! computes the pool target (target.rs), hands it to the pool and, when the pool holds more than the target,
//! reclaims the excess: the fast path (whole segments) above `reclaim-fast-threshold`, else the careful one.
//! It runs on a dedicated OS thread, not a runtime task, so it reacts while the workers are saturated.
//! In fixed mode it only samples the host (for INFO) and leaves the pool unlimited.
use super::settings::{ElasticSettings, MemoryMode};
use super::source::{HostMemory, HostSource};
use super::target::{bounds, desired_target, next_target, TargetInputs, DEAD_BAND_BYTES};
use super::Elastic;
use std::time::{Duration, Instant};

/// What the controller needs of the pool (the store; a fake in tests).
pub trait PoolControl {
    /// Bytes the pool holds resident (segments, collection heap, index).
    fn resident_bytes(&self) -> usize;
    /// Bytes of persistent tenants: a floor the target never goes below.
    fn persistent_bytes(&self) -> usize;
    fn set_pool_limit_bytes(&self, bytes: usize);
    /// Releases up to `bytes`, on the fast path (whole segments) or the careful one (victims chosen).
    fn reclaim(&self, bytes: usize, fast: bool) -> Reclaimed;
}

/// The outcome of one reclaim.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reclaimed {
    pub bytes: u64,
    pub objects: u64,
    pub micros: u64,
    pub fast: bool,
}

impl Reclaimed {
    pub fn path_name(&self) -> &'static str {
        if self.fast {
            "fast"
        } else {
            "careful"
        }
    }
}

/// Which way the target moved on a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Shrink,
    Grow,
    Same,
}

/// What one step decided and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepReport {
    pub target_bytes: u64,
    pub change: Change,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub reserve_bytes: u64,
    pub reclaimed: Option<Reclaimed>,
}

/// The controller's memory between steps.
#[derive(Default)]
pub struct Controller {
    target_bytes: Option<u64>,
    last_step: Option<Instant>,
}

impl Controller {
    pub fn target_bytes(&self) -> Option<u64> {
        self.target_bytes
    }

    /// One elastic step at `now`: new target, handed to the pool, excess reclaimed.
    pub fn step(
        &mut self,
        pool: &impl PoolControl,
        settings: &ElasticSettings,
        host: &HostMemory,
        now: Instant,
    ) -> StepReport {
        let inputs = TargetInputs {
            pool_resident_bytes: pool.resident_bytes() as u64,
            host_available_bytes: host.available_bytes,
            host_total_bytes: host.total_bytes,
            reserve_bytes: settings.reserve.bytes_of(host.total_bytes),
            min_bytes: settings.min_bytes,
            max_bytes: settings.max_bytes,
            floor_bytes: pool.persistent_bytes() as u64,
        };
        let elapsed = self
            .last_step
            .map_or(Duration::ZERO, |last| now.saturating_duration_since(last));
        let target = next_target(
            self.target_bytes,
            desired_target(&inputs),
            settings.grow_bytes_per_sec,
            elapsed,
        );
        let change = match self.target_bytes {
            Some(previous) if target < previous => Change::Shrink,
            Some(previous) if target > previous => Change::Grow,
            _ => Change::Same,
        };
        self.target_bytes = Some(target);
        self.last_step = Some(now);
        pool.set_pool_limit_bytes(pool_limit(target));
        let (min_bytes, max_bytes) = bounds(&inputs);
        StepReport {
            target_bytes: target,
            change,
            min_bytes,
            max_bytes,
            reserve_bytes: inputs.reserve_bytes,
            reclaimed: reclaim_excess(pool, target, settings.reclaim_fast_threshold_bytes),
        }
    }

    /// Leaves elastic mode: the pool is unlimited again (fixed mode's maxmemory rules).
    pub fn deactivate(&mut self, pool: &impl PoolControl) {
        if self.target_bytes.take().is_some() {
            pool.set_pool_limit_bytes(0);
        }
        self.last_step = None;
    }
}

/// The store's limit for a target: the store reads 0 as "no limit", so a target of 0 (nothing left for the
/// pool) becomes 1 byte.
fn pool_limit(target_bytes: u64) -> usize {
    usize::try_from(target_bytes).unwrap_or(usize::MAX).max(1)
}

/// Whether a reclaim of `excess_bytes` takes the fast path.
pub fn fast_path(excess_bytes: u64, fast_threshold_bytes: u64) -> bool {
    excess_bytes > fast_threshold_bytes
}

/// Reclaims what the pool holds above `target`, when that is more than the dead band (a smaller excess is
/// left to the writes, which make room under the limit themselves).
fn reclaim_excess(pool: &impl PoolControl, target: u64, fast_threshold: u64) -> Option<Reclaimed> {
    let resident = pool.resident_bytes() as u64;
    let excess = resident
        .checked_sub(target)
        .filter(|&excess| excess > DEAD_BAND_BYTES)?;
    let bytes = usize::try_from(excess).unwrap_or(usize::MAX);
    Some(pool.reclaim(bytes, fast_path(excess, fast_threshold)))
}

/// The controller thread's body: steps until `elastic.wake` says stop. `settings` reads the live config.
pub fn run(
    elastic: &Elastic,
    pool: &impl PoolControl,
    source: &mut dyn HostSource,
    settings: impl Fn() -> ElasticSettings,
) {
    let mut controller = Controller::default();
    let mut current = settings();
    loop {
        tick(elastic, &mut controller, pool, source, &current);
        let woken = elastic
            .wake
            .wait(Duration::from_millis(current.poll_interval_ms.max(1)));
        if woken.stop {
            return;
        }
        if woken.pressure {
            elastic.count_pressure_wakeup();
        }
        current = settings();
    }
}

fn tick(
    elastic: &Elastic,
    controller: &mut Controller,
    pool: &impl PoolControl,
    source: &mut dyn HostSource,
    settings: &ElasticSettings,
) {
    let host = match source.sample(pool.resident_bytes() as u64) {
        Ok(host) => host,
        Err(error) => {
            // Repeats every poll while it lasts (e.g. out of descriptors): logged once per interval.
            static LOG: crate::log_limit::RateLimited =
                crate::log_limit::RateLimited::new(std::time::Duration::from_secs(10));
            if let Some(suppressed) = LOG.check() {
                tracing::warn!(
                    %error,
                    "cannot sample host memory; pool target unchanged{}",
                    crate::log_limit::repeated(suppressed)
                );
            }
            return;
        }
    };
    let kind = if host.cgroup.is_some() {
        "cgroup2"
    } else {
        source.kind()
    };
    match settings.mode {
        MemoryMode::Fixed => {
            controller.deactivate(pool);
            elastic.record_sample(kind, host, None);
        }
        MemoryMode::Elastic => {
            let report = controller.step(pool, settings, &host, Instant::now());
            elastic.record_sample(kind, host, Some(report));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::elastic::settings::Reserve;
    use parking_lot::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A pool that records what the controller asked of it.
    #[derive(Default)]
    pub struct FakePool {
        pub resident: AtomicUsize,
        pub persistent: AtomicUsize,
        pub limit: AtomicUsize,
        pub reclaims: Mutex<Vec<(usize, bool)>>,
    }

    impl PoolControl for FakePool {
        fn resident_bytes(&self) -> usize {
            self.resident.load(Ordering::Relaxed)
        }
        fn persistent_bytes(&self) -> usize {
            self.persistent.load(Ordering::Relaxed)
        }
        fn set_pool_limit_bytes(&self, bytes: usize) {
            self.limit.store(bytes, Ordering::Relaxed);
        }
        fn reclaim(&self, bytes: usize, fast: bool) -> Reclaimed {
            self.reclaims.lock().push((bytes, fast));
            self.resident.fetch_sub(bytes, Ordering::Relaxed);
            Reclaimed {
                bytes: bytes as u64,
                objects: 1,
                micros: 1,
                fast,
            }
        }
    }

    const GB: u64 = 1 << 30;

    pub fn settings() -> ElasticSettings {
        ElasticSettings {
            mode: MemoryMode::Elastic,
            reserve: Reserve::Bytes(GB),
            min_bytes: 0,
            max_bytes: 0,
            grow_bytes_per_sec: GB,
            poll_interval_ms: 100,
            reclaim_fast_threshold_bytes: GB,
        }
    }

    fn host(available: u64) -> HostMemory {
        HostMemory {
            total_bytes: 16 * GB,
            available_bytes: available,
            ..HostMemory::default()
        }
    }

    #[test]
    fn shrink_sets_the_limit_and_reclaims_carefully() {
        let pool = FakePool::default();
        pool.resident.store(4 * GB as usize, Ordering::Relaxed);
        let mut controller = Controller::default();
        let start = Instant::now();
        let first = controller.step(&pool, &settings(), &host(4 * GB), start);
        assert_eq!(first.target_bytes, 7 * GB);
        assert_eq!((first.change, first.reclaimed), (Change::Same, None));
        // A hog takes 3.5 GB: the target drops by that at once and the excess goes carefully.
        let later = start + Duration::from_millis(100);
        let report = controller.step(&pool, &settings(), &host(GB / 2), later);
        assert_eq!(report.target_bytes, 3 * GB + GB / 2);
        assert_eq!(report.change, Change::Shrink);
        assert_eq!(pool.limit.load(Ordering::Relaxed) as u64, 3 * GB + GB / 2);
        assert_eq!(*pool.reclaims.lock(), vec![((GB / 2) as usize, false)]);
        assert_eq!(
            pool.resident.load(Ordering::Relaxed) as u64,
            3 * GB + GB / 2
        );
    }

    #[test]
    fn a_zero_target_still_limits_the_pool() {
        let pool = FakePool::default();
        pool.resident.store((GB / 2) as usize, Ordering::Relaxed);
        let mut controller = Controller::default();
        let report = controller.step(&pool, &settings(), &host(0), Instant::now());
        assert_eq!(report.target_bytes, 0, "the reserve takes everything");
        assert_eq!(
            pool.limit.load(Ordering::Relaxed),
            1,
            "0 would mean unlimited"
        );
        assert_eq!(*pool.reclaims.lock(), vec![((GB / 2) as usize, false)]);
    }

    #[test]
    fn large_excess_takes_the_fast_path() {
        let pool = FakePool::default();
        pool.resident.store(6 * GB as usize, Ordering::Relaxed);
        let mut controller = Controller::default();
        let capped = ElasticSettings {
            max_bytes: 2 * GB,
            ..settings()
        };
        let report = controller.step(&pool, &capped, &host(8 * GB), Instant::now());
        assert_eq!(report.target_bytes, 2 * GB);
        assert_eq!(*pool.reclaims.lock(), vec![(4 * GB as usize, true)]);
        assert!(fast_path(GB + 1, GB) && !fast_path(GB, GB));
    }

    #[test]
    fn small_excess_is_left_to_the_writes() {
        let pool = FakePool::default();
        let capped = ElasticSettings {
            max_bytes: GB,
            ..settings()
        };
        pool.resident
            .store((GB + DEAD_BAND_BYTES) as usize, Ordering::Relaxed);
        Controller::default().step(&pool, &capped, &host(8 * GB), Instant::now());
        assert!(pool.reclaims.lock().is_empty());
        pool.resident
            .store((GB + DEAD_BAND_BYTES + 1) as usize, Ordering::Relaxed);
        Controller::default().step(&pool, &capped, &host(8 * GB), Instant::now());
        assert_eq!(
            *pool.reclaims.lock(),
            vec![((DEAD_BAND_BYTES + 1) as usize, false)]
        );
    }

    #[test]
    fn growth_follows_the_rate() {
        let pool = FakePool::default();
        let mut controller = Controller::default();
        let start = Instant::now();
        controller.step(&pool, &settings(), &host(2 * GB), start);
        assert_eq!(controller.target_bytes(), Some(GB));
        let report = controller.step(
            &pool,
            &settings(),
            &host(10 * GB),
            start + Duration::from_millis(500),
        );
        assert_eq!(report.change, Change::Grow);
        assert_eq!(report.target_bytes, GB + GB / 2);
    }

    #[test]
    fn floor_holds_and_fixed_mode_unlimits() {
        let pool = FakePool::default();
        pool.persistent.store(3 * GB as usize, Ordering::Relaxed);
        pool.resident.store(3 * GB as usize, Ordering::Relaxed);
        let mut controller = Controller::default();
        let report = controller.step(&pool, &settings(), &host(0), Instant::now());
        assert_eq!(report.target_bytes, 3 * GB, "persistent bytes are a floor");
        assert!(pool.reclaims.lock().is_empty());
        controller.deactivate(&pool);
        assert_eq!(pool.limit.load(Ordering::Relaxed), 0);
        assert_eq!(controller.target_bytes(), None);
    }

    /// A host whose availability the test sets.
    struct FakeHost(Arc<std::sync::atomic::AtomicU64>);

    impl HostSource for FakeHost {
        fn sample(&mut self, _pool_resident_bytes: u64) -> std::io::Result<HostMemory> {
            Ok(host(self.0.load(Ordering::Relaxed)))
        }
        fn kind(&self) -> &'static str {
            "fake"
        }
        fn pressure_file(&self) -> Option<std::path::PathBuf> {
            None
        }
    }

    #[test]
    fn thread_reacts_to_config_pressure_and_stop() {
        let elastic = Arc::new(Elastic::default());
        let pool = Arc::new(FakePool::default());
        let available = Arc::new(std::sync::atomic::AtomicU64::new(8 * GB));
        let max_bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let thread = {
            let (elastic, pool, max_bytes) = (elastic.clone(), pool.clone(), max_bytes.clone());
            let mut source = FakeHost(available.clone());
            std::thread::spawn(move || {
                let slow_poll = move || ElasticSettings {
                    max_bytes: max_bytes.load(Ordering::Relaxed),
                    ..settings()
                };
                run(&elastic, &*pool, &mut source, slow_poll);
            })
        };
        let limit = || pool.limit.load(Ordering::Relaxed) as u64;
        wait_until(|| limit() == 7 * GB);
        // A smaller max takes effect on the wake-up, not at the next poll.
        max_bytes.store(GB, Ordering::Relaxed);
        elastic.wake.config_changed();
        wait_until(|| limit() == GB);
        elastic.wake.pressure();
        wait_until(|| elastic.status().wakeups_pressure == 1);
        assert!(elastic.status().shrinks >= 1);
        elastic.wake.stop();
        thread.join().unwrap();
    }

    fn wait_until(condition: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !condition() {
            assert!(Instant::now() < deadline, "condition not met in time");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
