//! Housekeeping of a shard, in bounded slices under its lock: active expiry, eviction by
//! `maxmemory-policy` (fixed mode), and compaction of mostly dead segments.
use super::{location, slot_of, space_of, Location, Shard};
use crate::hash_key;
use crate::memory::segment::{ItemHeader, ITEM_ALIGN_BYTES};
use crate::pool::TenantKind;

/// Keys sampled per eviction, as Redis's maxmemory-samples.
const EVICTION_SAMPLES: usize = 5;
/// A sealed segment is compacted when less than this fraction of it is live.
const COMPACT_LIVE_RATIO_MAX: f64 = 0.6;

/// Eviction policies of `maxmemory-policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionPolicy {
    NoEviction,
    AllKeysLru,
    AllKeysLfu,
    AllKeysRandom,
    VolatileLru,
    VolatileLfu,
    VolatileRandom,
    VolatileTtl,
}

impl EvictionPolicy {
    pub const ALL: [EvictionPolicy; 8] = [
        EvictionPolicy::NoEviction,
        EvictionPolicy::AllKeysLru,
        EvictionPolicy::AllKeysLfu,
        EvictionPolicy::AllKeysRandom,
        EvictionPolicy::VolatileLru,
        EvictionPolicy::VolatileLfu,
        EvictionPolicy::VolatileRandom,
        EvictionPolicy::VolatileTtl,
    ];

    pub fn name(self) -> &'static str {
        match self {
            EvictionPolicy::NoEviction => "noeviction",
            EvictionPolicy::AllKeysLru => "allkeys-lru",
            EvictionPolicy::AllKeysLfu => "allkeys-lfu",
            EvictionPolicy::AllKeysRandom => "allkeys-random",
            EvictionPolicy::VolatileLru => "volatile-lru",
            EvictionPolicy::VolatileLfu => "volatile-lfu",
            EvictionPolicy::VolatileRandom => "volatile-random",
            EvictionPolicy::VolatileTtl => "volatile-ttl",
        }
    }

    pub fn from_name(name: &str) -> Option<EvictionPolicy> {
        let name = name.to_ascii_lowercase();
        Self::ALL.into_iter().find(|policy| policy.name() == name)
    }

    fn volatile_only(self) -> bool {
        matches!(
            self,
            EvictionPolicy::VolatileLru
                | EvictionPolicy::VolatileLfu
                | EvictionPolicy::VolatileRandom
                | EvictionPolicy::VolatileTtl
        )
    }
}

impl Shard {
    // ----- expiry --------------------------------------------------------------------------------

    /// Checks up to `items_max` items for expiry, resuming where the last cycle stopped; returns how many
    /// keys it deleted.
    pub fn expire_cycle(&mut self, now_ms: u64, items_max: usize) -> usize {
        if self
            .namespaces
            .iter()
            .flatten()
            .all(|keyspace| keyspace.volatile_keys == 0)
        {
            return 0;
        }
        let (mut ttl_samples, mut ttl_sum_ms) = (0u64, 0u64);
        let mut checked = 0;
        let mut expired = Vec::new();
        let (mut sequence, mut offset) = self.expire_cursor;
        while checked < items_max {
            let Some((&found, &slot)) = self.by_sequence.range(sequence..).next() else {
                sequence = 0;
                offset = 0;
                break;
            };
            if found != sequence {
                sequence = found;
                offset = 0;
            }
            let segment = self.segment(slot);
            let mut current = ((offset as usize) < segment.used_bytes()).then_some(offset);
            while let Some(at) = current {
                let header = segment.header(at);
                if header.alive == 1 && header.expire_at_ms != 0 {
                    if header.expire_at_ms <= now_ms {
                        expired.push((space_of(header), location(slot, at)));
                    } else {
                        ttl_samples += 1;
                        ttl_sum_ms = ttl_sum_ms.saturating_add(header.expire_at_ms - now_ms);
                    }
                }
                checked += 1;
                current = segment.next_offset(at);
                if checked >= items_max {
                    break;
                }
            }
            match current {
                Some(at) => offset = at,
                None => {
                    sequence += 1;
                    offset = 0;
                }
            }
        }
        self.expire_cursor = (sequence, offset);
        // Smoothed like Redis's avg_ttl, so one odd slice does not swing INFO.
        if let Some(current) = ttl_sum_ms.checked_div(ttl_samples) {
            self.average_ttl_ms = match self.average_ttl_ms {
                0 => current,
                average => (average * 49 + current) / 50,
            };
        }
        let count = expired.len();
        for (keyspace, location) in expired {
            debug_assert!(
                self.header(location).alive == 1 && self.header(location).expire_at_ms != 0,
                "an expired entry points at a live item with an expiry"
            );
            let hash = hash_key(self.item_key(location));
            self.remove_item(keyspace, hash, location);
        }
        self.stats.expired_keys += count as u64;
        self.sync_accounting();
        count
    }

    // ----- eviction ------------------------------------------------------------------------------

    /// Evicts one key chosen by `policy` from a sample; returns the bytes the shard freed, or None
    /// when it has nothing the policy may evict.
    pub fn evict_one(&mut self, policy: EvictionPolicy, now_ms: u64) -> Option<usize> {
        if policy == EvictionPolicy::NoEviction {
            return None;
        }
        let mut best: Option<(u64, Location)> = None;
        for _ in 0..4 {
            let sampled = self.sample_locations(EVICTION_SAMPLES, policy.volatile_only());
            for candidate in sampled {
                // Persistent tenants' data is never evicted, in fixed mode either.
                let tenant = self.segment(slot_of(candidate)).tenant;
                if self.memory.pool.kind(tenant) == TenantKind::Persistent {
                    continue;
                }
                let header = self.header(candidate);
                let clock = self.access_clock_s(now_ms);
                // Higher score = better victim.
                let score = match policy {
                    EvictionPolicy::AllKeysLru | EvictionPolicy::VolatileLru => {
                        clock.saturating_sub(header.access_s) as u64
                    }
                    EvictionPolicy::AllKeysLfu | EvictionPolicy::VolatileLfu => {
                        255 - header.lfu_counter as u64
                    }
                    EvictionPolicy::VolatileTtl => u64::MAX - header.expire_at_ms,
                    _ => 0,
                };
                if best.is_none_or(|(best_score, _)| score > best_score) {
                    best = Some((score, candidate));
                }
            }
            if best.is_some() {
                break;
            }
        }
        let (_, victim) = best?;
        let before = self.used_bytes();
        let keyspace = space_of(self.header(victim));
        let hash = hash_key(self.item_key(victim));
        let tenant = self.segment(slot_of(victim)).tenant;
        self.remove_item(keyspace, hash, victim);
        self.stats.evicted_keys += 1;
        self.sync_accounting();
        let freed = before.saturating_sub(self.used_bytes());
        let stats = self.tenant_stats_mut(tenant);
        stats.evicted_keys += 1;
        stats.evicted_bytes += freed as u64;
        Some(freed)
    }

    // ----- compaction ----------------------------------------------------------------------------

    /// One bounded slice of compaction: moves up to `items_max` live items out of the sealed segment with
    /// the lowest live ratio (below `COMPACT_LIVE_RATIO_MAX`) and unmaps it once it is empty. Work resumes
    /// where the last slice stopped, so the shard lock is never held for a whole segment. Returns the bytes
    /// given back to the OS by this slice (0 while a segment is still being emptied or nothing qualifies).
    pub fn compact_step(&mut self, items_max: usize) -> usize {
        assert!(items_max > 0);
        let (slot, sequence, mut offset) = match self.compacting.take() {
            Some(resume) => resume,
            None => match self.compaction_candidate() {
                Some(slot) => (slot, self.segment(slot).sequence, 0),
                None => return 0,
            },
        };
        let mut moved = 0;
        loop {
            let still_there = self.segments[slot as usize]
                .as_ref()
                .is_some_and(|segment| segment.sequence == sequence);
            if !still_there {
                // Its last live item died or moved and it was unmapped on the spot.
                return self.finish_compaction(None);
            }
            if offset as usize >= self.segment(slot).used_bytes() {
                return self.finish_compaction(Some(slot));
            }
            if moved == items_max {
                self.compacting = Some((slot, sequence, offset));
                return 0;
            }
            debug_assert!(
                (offset as usize).is_multiple_of(ITEM_ALIGN_BYTES),
                "compaction resumes at an item boundary, not {offset}"
            );
            let old = location(slot, offset);
            let header = *self.header(old);
            let next = offset as usize + header.item_bytes();
            if header.alive == 1 {
                self.move_item(old, header);
                moved += 1;
            }
            offset = next as u32;
        }
    }

    /// The sealed segment that is cheapest to empty, if one is dead enough to be worth it.
    fn compaction_candidate(&self) -> Option<u32> {
        self.by_sequence
            .values()
            .copied()
            .filter(|&slot| !self.is_active(slot) && !self.is_draining(slot))
            .map(|slot| {
                let segment = self.segment(slot);
                (
                    segment.live_bytes() as f64 / segment.capacity_bytes() as f64,
                    slot,
                )
            })
            .filter(|&(ratio, _)| ratio < COMPACT_LIVE_RATIO_MAX)
            .min_by(|left, right| left.0.total_cmp(&right.0))
            .map(|(_, slot)| slot)
    }

    /// Re-appends a live item (to the active segment) and repoints its index entry.
    pub(super) fn move_item(&mut self, old: Location, header: ItemHeader) {
        debug_assert_eq!(header.alive, 1, "only a live item is moved");
        let mut scratch = std::mem::take(&mut self.compaction_scratch);
        scratch.clear();
        scratch.extend_from_slice(self.item_key(old));
        scratch.extend_from_slice(self.item_value(old));
        let (key, value) = scratch.split_at(header.key_len as usize);
        let tenant = self.segment(slot_of(old)).tenant;
        let new = self.append(tenant, &header, key, value);
        debug_assert_ne!(
            slot_of(new),
            slot_of(old),
            "an item moves out of its segment"
        );
        self.replace_location(space_of(&header), hash_key(key), old, new);
        self.kill_item(old);
        self.compaction_scratch = scratch;
    }

    /// Unmaps the emptied segment (if it is still mapped) and counts the compaction.
    fn finish_compaction(&mut self, slot: Option<u32>) -> usize {
        let mut freed = self.config.segment_bytes;
        if let Some(slot) = slot {
            freed = self.segment(slot).capacity_bytes();
            self.unmap_segment(slot);
        }
        self.stats.compacted_segments += 1;
        self.stats.compacted_bytes += freed as u64;
        self.sync_accounting();
        freed
    }

    /// True while a segment is half-way through compaction.
    pub fn is_compacting(&self) -> bool {
        self.compacting.is_some()
    }

    /// Dead bytes in sealed segments beyond which compaction is worth running.
    pub fn needs_compaction(&self) -> bool {
        self.dead_bytes > 2 * self.config.segment_bytes && self.dead_bytes * 4 > self.mapped_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::tests::shard;

    #[test]
    fn expiry_lazy_and_active() {
        let mut shard = shard();
        shard.set_string(0, b"a", b"1", 2000, 0, 1000);
        shard.set_string(0, b"b", b"1", 2000, 0, 1000);
        shard.set_string(0, b"c", b"1", 0, 0, 1000);
        assert!(shard.exists(0, b"a", 1500));
        assert!(!shard.exists(0, b"a", 2000));
        assert_eq!(shard.expire_cycle(2500, 100), 1);
        assert_eq!(shard.key_count(0), 1);
        assert_eq!(shard.stats.expired_keys, 2);
        shard.assert_consistent();
    }

    #[test]
    fn compaction_moves_live_items_and_unmaps() {
        let mut shard = shard();
        let value = vec![1u8; 1000];
        for index in 0..200u32 {
            let key = format!("key{index}");
            shard.set_string(0, key.as_bytes(), &value, 0, 2, 0);
        }
        for index in 0..200u32 {
            if index % 10 != 0 {
                shard.remove(0, format!("key{index}").as_bytes(), 0);
            }
        }
        let mapped_before = shard.mapped_bytes();
        assert_eq!(
            shard.compact_step(1),
            0,
            "a slice moves one item, not the whole segment"
        );
        assert!(shard.is_compacting());
        shard.assert_consistent();
        while shard.compact_step(3) > 0 || shard.is_compacting() {}
        assert!(shard.mapped_bytes() < mapped_before);
        for index in (0..200u32).step_by(10) {
            let (found, info) = shard
                .get_string(0, format!("key{index}").as_bytes(), 0)
                .unwrap()
                .unwrap();
            assert_eq!(found, &value[..]);
            assert_eq!(info.client_flags, 2);
        }
        assert_eq!(shard.key_count(0), 20);
        shard.assert_consistent();
    }

    #[test]
    fn eviction_frees_memory() {
        let mut shard = shard();
        for index in 0..300u32 {
            shard.set_string(0, format!("k{index}").as_bytes(), &[0; 500], 0, 0, 0);
        }
        let mut evicted = 0;
        while shard.key_count(0) > 100 {
            shard.evict_one(EvictionPolicy::AllKeysLru, 0).unwrap();
            evicted += 1;
        }
        assert_eq!(evicted, 200);
        assert_eq!(shard.evict_one(EvictionPolicy::VolatileLru, 0), None);
        shard.assert_consistent();
    }
}
