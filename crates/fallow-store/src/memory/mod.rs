//! Memory: segments mapped from the OS, the store-wide accounting of used and resident bytes, and the
//! pool (tenants and reclaim counters).
pub mod segment;

use crate::pool::Pool;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Store-wide memory counters, updated by every shard as it maps, fills and frees memory.
#[derive(Default)]
pub struct MemoryCounters {
    /// Bytes of data: live items, collection values and indexes (Redis's used_memory; maxmemory's base).
    pub used_bytes: AtomicUsize,
    /// Bytes kept resident: mapped segments (with their dead and free space), collections and indexes.
    pub resident_bytes: AtomicUsize,
    /// Highest `used_bytes` seen when sampled (every housekeeping tick and every INFO/MEMORY STATS).
    pub peak_bytes: AtomicUsize,
    /// The elastic pool's limit on `resident_bytes`; 0 = none (fixed mode uses maxmemory instead).
    pub pool_limit_bytes: AtomicUsize,
    /// Fixed mode's maxmemory (a copy of the store's, for shards: a tier-2 promotion makes room first).
    pub maxmemory_bytes: AtomicUsize,
    /// maxmemory-policy is noeviction (a copy of the store's): with tier 2 nothing ephemeral is dropped.
    pub noeviction: std::sync::atomic::AtomicBool,
    /// Items whose value is on tier 2 only: while there are none, nothing needs reading ahead.
    pub stubs: AtomicUsize,
    pub pool: Pool,
}

impl MemoryCounters {
    /// Samples usage into the peak; returns (used, peak).
    pub fn sample_peak(&self) -> (usize, usize) {
        let used = self.used_bytes.load(Ordering::Relaxed);
        let peak = self.peak_bytes.fetch_max(used, Ordering::Relaxed).max(used);
        (used, peak)
    }

    /// True when an elastic pool limit is set and resident bytes exceed it.
    pub fn over_pool_limit(&self) -> bool {
        let limit = self.pool_limit_bytes.load(Ordering::Relaxed);
        limit != 0 && self.resident_bytes.load(Ordering::Relaxed) > limit
    }
}
