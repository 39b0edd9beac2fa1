//! Memory: segments mapped from the OS, and the store-wide accounting of used bytes.
pub mod segment;

use std::sync::atomic::AtomicUsize;

/// Store-wide memory counters, updated by every shard as it maps, fills and frees memory.
#[derive(Debug, Default)]
pub struct MemoryCounters {
    /// Bytes held by all shards: mapped segments, collection values and indexes.
    pub used_bytes: AtomicUsize,
    /// Highest `used_bytes` seen when sampled (every housekeeping tick and every INFO/MEMORY STATS).
    pub peak_bytes: AtomicUsize,
}

impl MemoryCounters {
    /// Samples usage into the peak; returns (used, peak).
    pub fn sample_peak(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering;
        let used = self.used_bytes.load(Ordering::Relaxed);
        let peak = self.peak_bytes.fetch_max(used, Ordering::Relaxed).max(used);
        (used, peak)
    }
}
