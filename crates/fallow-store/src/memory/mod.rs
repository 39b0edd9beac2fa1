//! Memory: segments mapped from the OS, the store-wide accounting of used and resident bytes, and the
//! pool (tenants and reclaim counters).
pub mod segment;

use crate::pool::Pool;
use segment::Segment;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Emptied standard-size segments the store keeps mapped for reuse, whichever shard emptied them: one
/// shard's release often makes the room another shard's next segment needs, and a fresh segment faults
/// in and clears its pages under the shard lock (a 2 MiB huge page took ~5 ms on the development VM;
/// 64 KiB SETs spent ~30% of the server's CPU on fresh segments before spares existed). Bounded so the
/// store never holds more than this many idle segments.
pub const SPARE_SEGMENTS_MAX: usize = 8;

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
    /// Spare segments (`SPARE_SEGMENTS_MAX`): counted in `resident_bytes`, in no shard's books.
    spares: parking_lot::Mutex<Vec<Segment>>,
    spare_bytes: AtomicUsize,
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

    /// Keeps an emptied segment (already out of its shard's books) for reuse; hands it back to be
    /// unmapped when `SPARE_SEGMENTS_MAX` are kept already.
    pub fn keep_spare(&self, segment: Segment) -> Option<Segment> {
        let mut spares = self.spares.lock();
        if spares.len() >= SPARE_SEGMENTS_MAX {
            return Some(segment);
        }
        let bytes = segment.capacity_bytes();
        spares.push(segment);
        self.spare_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.resident_bytes.fetch_add(bytes, Ordering::Relaxed);
        None
    }

    /// A spare of exactly `capacity_bytes`, out of the pool's books (the taker counts it).
    pub fn take_spare(&self, capacity_bytes: usize) -> Option<Segment> {
        let mut spares = self.spares.lock();
        let index = spares
            .iter()
            .position(|segment| segment.capacity_bytes() == capacity_bytes)?;
        let segment = spares.swap_remove(index);
        self.forget_spare_bytes(capacity_bytes);
        Some(segment)
    }

    /// Takes at most `count` spares out of the books, for the caller to drop (their pages go back to the
    /// OS), ideally with no lock held.
    pub fn take_spares(&self, count: usize) -> Vec<Segment> {
        let mut spares = self.spares.lock();
        let keep = spares.len().saturating_sub(count);
        let taken = spares.split_off(keep);
        drop(spares);
        let bytes = taken.iter().map(Segment::capacity_bytes).sum();
        self.forget_spare_bytes(bytes);
        taken
    }

    /// Bytes of spare segments (part of `resident_bytes`).
    pub fn spare_bytes(&self) -> usize {
        self.spare_bytes.load(Ordering::Relaxed)
    }

    fn forget_spare_bytes(&self, bytes: usize) {
        let spare = self.spare_bytes.fetch_sub(bytes, Ordering::Relaxed);
        assert!(spare >= bytes, "{bytes} spare bytes taken of {spare}");
        let resident = self.resident_bytes.fetch_sub(bytes, Ordering::Relaxed);
        debug_assert!(
            resident >= bytes,
            "{bytes} spare bytes leave {resident} resident"
        );
    }
}
