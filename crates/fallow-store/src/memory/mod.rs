//! Memory: segments mapped from the OS, and the store-wide accounting of used bytes.
pub mod segment;

use std::sync::atomic::AtomicUsize;

/// Store-wide memory counters, updated by every shard as it maps, fills and frees memory.
#[derive(Debug, Default)]
pub struct MemoryCounters {
    /// Bytes held by all shards: mapped segments, collection values and indexes.
    pub used_bytes: AtomicUsize,
}
