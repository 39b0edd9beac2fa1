//! The best any cache could do on the OLTP item, to read its speedups against.
//!
//! fio's `random_distribution=zipf:θ` draws every read independently, rank k with probability ∝ k^-θ over
//! `ranks` = file / read size pages, scattered over the file (the independent reference model). Under it, a
//! cache holding any `cached_pages` pages (whatever it evicted, admitted or read ahead) hits a read with
//! probability at most the mass of the `cached_pages` most popular pages; so at least the rest, the zipf tail
//! beyond them, miss. Each miss costs at least one device read and the throttle grants at most `read_iops`
//! a second, so the readers do at most `read_iops / tail` reads a second and, `jobs` of them in a closed loop
//! (Little's law: mean latency = jobs / reads per second), wait at least `jobs × tail / read_iops` on average.
//!
//! The capacity counted is generous: the whole "VM" memory (fio and fallow fs live there too) plus the pool,
//! as if the page cache and fallow never held the same page. A measured speedup above the bound would mean
//! the device or the model is wrong; far below it means the cache is what falls short.
use serde::Serialize;

/// Zipf ranks past which the tail is summed in closed form (the sum's error there is below 1e-9).
const RANKS_SUMMED_MAX: u64 = 1 << 24;

/// The bound for one pool.
#[derive(Clone, Debug, Serialize)]
pub struct OltpBound {
    pub pool_bytes: u64,
    /// VM memory + pool, in read-sized pages.
    pub cached_pages: u64,
    /// The least fraction of reads that must miss.
    pub miss_ratio_floor: f64,
    /// The least mean read latency (µs).
    pub latency_floor_us: f64,
    /// The no-cache run's mean latency over `latency_floor_us`: no cache of this size can do better.
    /// None when every page fits in the VM and the pool (no read need reach the device).
    pub speedup_bound_vs_no_cache: Option<f64>,
}

/// The probability mass of zipf(θ) over `ranks` ranks that lies beyond the `cached` most popular.
pub fn zipf_tail_mass(ranks: u64, theta: f64, cached: u64) -> f64 {
    assert!(ranks > 0 && theta > 0.0, "zipf over no ranks or θ ≤ 0");
    assert!(
        ranks <= RANKS_SUMMED_MAX,
        "{ranks} ranks: too many to sum here"
    );
    if cached >= ranks {
        return 0.0;
    }
    let weight = |k: u64| (k as f64).powf(-theta);
    // Summed smallest first, so the small terms are not lost against the large ones.
    let tail: f64 = (cached.min(ranks) + 1..=ranks).rev().map(weight).sum();
    let head: f64 = (1..=cached.min(ranks)).rev().map(weight).sum();
    tail / (head + tail)
}

/// The bound for a pool of `pool_bytes` beside `vm_memory_bytes` of page cache, given the no-cache run's
/// mean latency.
pub struct Workload {
    pub file_bytes: u64,
    pub read_bytes: u64,
    pub theta: f64,
    pub jobs: usize,
    pub read_iops: u64,
    pub vm_memory_bytes: u64,
}

impl Workload {
    pub fn bound(&self, pool_bytes: u64, no_cache_latency_us: f64) -> OltpBound {
        assert!(self.read_bytes > 0 && self.read_iops > 0 && self.jobs > 0);
        let ranks = self.file_bytes / self.read_bytes;
        let cached_pages = (self.vm_memory_bytes + pool_bytes) / self.read_bytes;
        let miss_ratio_floor = zipf_tail_mass(ranks, self.theta, cached_pages);
        let latency_floor_us = self.jobs as f64 * miss_ratio_floor / self.read_iops as f64 * 1e6;
        OltpBound {
            pool_bytes,
            cached_pages,
            miss_ratio_floor,
            latency_floor_us,
            speedup_bound_vs_no_cache: (latency_floor_us > 0.0)
                .then(|| no_cache_latency_us / latency_floor_us),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_shrinks_as_the_cache_grows_and_is_whole_or_empty_at_the_ends() {
        assert_eq!(zipf_tail_mass(1000, 0.9, 0), 1.0);
        assert_eq!(zipf_tail_mass(1000, 0.9, 1000), 0.0);
        assert_eq!(zipf_tail_mass(1000, 0.9, 5000), 0.0);
        let tails: Vec<f64> = [1, 10, 100, 500]
            .iter()
            .map(|&c| zipf_tail_mass(1000, 0.9, c))
            .collect();
        assert!(tails.windows(2).all(|w| w[0] > w[1]), "{tails:?}");
        // Skew puts more of the mass in the head: a stronger θ leaves less in the tail.
        assert!(zipf_tail_mass(1000, 1.2, 100) < zipf_tail_mass(1000, 0.9, 100));
    }

    #[test]
    fn two_ranks_split_by_their_weights() {
        // Ranks 1 and 2 with θ = 1: weights 1 and 1/2, so the tail beyond rank 1 is 1/3.
        assert!((zipf_tail_mass(2, 1.0, 1) - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn the_benchmarks_defaults_bound_a_100_mib_pool_below_mortars_speedup() {
        // 2 GiB of 8 KiB pages, zipf 0.9, 4 readers, 1000 IOPS, a 256 MiB VM; no cache measured 2.11 ms.
        let workload = Workload {
            file_bytes: 2 << 30,
            read_bytes: 8 << 10,
            theta: 0.9,
            jobs: 4,
            read_iops: 1000,
            vm_memory_bytes: 256 << 20,
        };
        let small = workload.bound(100 << 20, 2106.0);
        let large = workload.bound(1 << 30, 2106.0);
        assert_eq!(small.cached_pages, 356 * 128);
        assert!((small.miss_ratio_floor - 0.220).abs() < 0.005, "{small:?}");
        assert!(
            small
                .speedup_bound_vs_no_cache
                .is_some_and(|b| (2.3..2.5).contains(&b)),
            "{small:?}"
        );
        assert!(
            large
                .speedup_bound_vs_no_cache
                .is_some_and(|b| (8.0..8.7).contains(&b)),
            "{large:?}"
        );
        let whole = workload.bound(2 << 30, 2106.0);
        assert_eq!(
            whole.miss_ratio_floor, 0.0,
            "the file fits in the VM and the pool"
        );
        assert_eq!(whole.speedup_bound_vs_no_cache, None);
        assert!((small.latency_floor_us - 4.0 * small.miss_ratio_floor * 1000.0).abs() < 1e-6);
    }
}
