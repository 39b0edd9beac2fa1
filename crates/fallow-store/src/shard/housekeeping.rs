//! Housekeeping of a shard, in bounded slices under its lock: active expiry, eviction by
//! `maxmemory-policy` (fixed mode), and compaction of mostly dead segments.
//!
//! Eviction under the `allkeys-*` policies empties whole segments, oldest first: an item of the oldest
//! segment is evicted unless it is hot by the policy (read since it was written, and more recently or
//! more often than half of a sample of the shard: see `Hotness`), in which case it is carried forward
//! into the active segment, as compaction moves items. So evictions do not leave dead space scattered over every segment (it would stay resident:
//! a segment goes back to the OS only when nothing in it lives), and the mapped bytes follow the used
//! bytes down when maxmemory is lowered and stay near them while writes go on at the limit.
use super::LFU_INITIAL;
use super::{location, slot_of, space_of, KeyEventCause, Location, Shard};
use crate::changes::Cause;
use crate::hash_key;
use crate::memory::segment::{ItemHeader, ITEM_ALIGN_BYTES};
use crate::pool::{TenantId, TenantKind};
use rand::Rng;

/// Keys sampled per eviction, as Redis's maxmemory-samples.
const EVICTION_SAMPLES: usize = 5;
/// A sealed segment is compacted when less than this fraction of it is live.
const COMPACT_LIVE_RATIO_MAX: f64 = 0.6;
/// While fixed mode keeps resident bytes over their target (`Store::resident_target_bytes`), compaction
/// also takes segments up to this live ratio (at most 9 bytes copied per dead byte given back).
const COMPACT_LIVE_RATIO_MAX_OVER_TARGET: f64 = 0.9;
/// Items of the shard whose recency or frequency an eviction judges hotness against.
const HOTNESS_SAMPLE_SEGMENTS: usize = 16;
const HOTNESS_SAMPLE_ITEMS_PER_SEGMENT: usize = 4;
/// Bytes of hot items one eviction call may carry forward per byte it is asked to free (and at most a
/// segment's worth): a write that needs one item's room copies at most a few items.
const MOVED_BYTES_PER_WANTED_BYTE: usize = 4;

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

    /// True for the policies that may evict any key: they evict whole segments, oldest first.
    fn evicts_by_segment(self) -> bool {
        matches!(
            self,
            EvictionPolicy::AllKeysLru | EvictionPolicy::AllKeysLfu | EvictionPolicy::AllKeysRandom
        )
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
            crate::changes::record(keyspace, self.item_key(location), Cause::Expired);
            self.note_key_event(keyspace, location, KeyEventCause::Expired);
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
        crate::changes::record(keyspace, self.item_key(victim), Cause::Evicted);
        self.note_key_event(keyspace, victim, KeyEventCause::Evicted);
        self.remove_item(keyspace, hash, victim);
        self.stats.evicted_keys += 1;
        self.sync_accounting();
        let freed = before.saturating_sub(self.used_bytes());
        let stats = self.tenant_stats_mut(tenant);
        stats.evicted_keys += 1;
        stats.evicted_bytes += freed as u64;
        Some(freed)
    }

    /// Evicts by `policy` until `bytes_wanted` of used memory are freed or `items_max` items were handled
    /// (evicted or moved: the bound on one lock hold). Returns the used bytes freed, or None when the shard
    /// holds nothing the policy may evict.
    ///
    /// The `allkeys-*` policies empty whole segments, oldest first (see the module's comment); the
    /// `volatile-*` ones only see keys with an expiry, so they keep sampling (`evict_one`) and leave their
    /// holes to compaction.
    pub fn evict(
        &mut self,
        policy: EvictionPolicy,
        now_ms: u64,
        bytes_wanted: usize,
        items_max: usize,
    ) -> Option<usize> {
        assert!(items_max > 0);
        if policy.evicts_by_segment() {
            return self.evict_by_segment(policy, now_ms, bytes_wanted, items_max);
        }
        let mut freed = self.evict_one(policy, now_ms)?;
        let mut evicted = 1;
        while freed < bytes_wanted && evicted < items_max {
            match self.evict_one(policy, now_ms) {
                Some(bytes) => freed += bytes,
                None => break,
            }
            evicted += 1;
        }
        Some(freed)
    }

    /// `evict` for the `allkeys-*` policies: walks the oldest evictable segment, evicting its cold items
    /// (and expired ones) and carrying its hot ones forward, then the next oldest. At most
    /// `MOVED_BYTES_PER_WANTED_BYTE` times the bytes wanted (and a segment's worth) of hot items are carried
    /// per call; past that, items go whatever their hotness, so a call's work is bounded and it always
    /// evicts something when anything is evictable.
    fn evict_by_segment(
        &mut self,
        policy: EvictionPolicy,
        now_ms: u64,
        bytes_wanted: usize,
        items_max: usize,
    ) -> Option<usize> {
        let hotness = self.hotness_line(policy);
        let move_budget = bytes_wanted
            .saturating_mul(MOVED_BYTES_PER_WANTED_BYTE)
            .min(self.config.segment_bytes);
        let used_before = self.used_bytes();
        let freed = |shard: &Shard| used_before.saturating_sub(shard.used_bytes());
        let (mut handled, mut removed, mut moved_bytes) = (0, 0, 0);
        'segments: while let Some(slot) = self.eviction_segment() {
            let sequence = self.segment(slot).sequence;
            // The active segment is the last one left: its items have nowhere newer to go.
            let may_move = !self.is_active(slot);
            let mut offset = self.segment(slot).first_offset();
            while let Some(at) = offset {
                let header = *self.segment(slot).header(at);
                // Read before the item goes: the segment is unmapped when its last item does.
                offset = self.segment(slot).next_offset(at);
                if header.alive != 1 {
                    continue;
                }
                let item = location(slot, at);
                let expired = header.expire_at_ms != 0 && header.expire_at_ms <= now_ms;
                if expired {
                    let hash = hash_key(self.item_key(item));
                    crate::changes::record(space_of(&header), self.item_key(item), Cause::Expired);
                    self.note_key_event(space_of(&header), item, KeyEventCause::Expired);
                    self.remove_item(space_of(&header), hash, item);
                    self.stats.expired_keys += 1;
                    removed += 1;
                } else if may_move && moved_bytes < move_budget && hotness.is_hot(&header) {
                    moved_bytes += header.item_bytes();
                    self.move_item(item, header);
                } else {
                    self.evict_item(item);
                    removed += 1;
                }
                handled += 1;
                if (removed > 0 && freed(self) >= bytes_wanted) || handled >= items_max {
                    break 'segments;
                }
                let still_there = self.segments[slot as usize]
                    .as_ref()
                    .is_some_and(|segment| segment.sequence == sequence);
                if !still_there {
                    continue 'segments;
                }
            }
        }
        self.sync_accounting();
        (handled > 0).then(|| freed(self))
    }

    /// The oldest segment with live items that eviction may empty: sealed ones before the active ones,
    /// never one a release is draining or one of a persistent tenant.
    fn eviction_segment(&self) -> Option<u32> {
        let mut kinds: Vec<(TenantId, TenantKind)> = Vec::new();
        let mut evictable = |slot: u32| {
            let segment = self.segment(slot);
            if segment.live_bytes() == 0 || self.is_draining(slot) {
                return false;
            }
            let kind = match kinds.iter().find(|(tenant, _)| *tenant == segment.tenant) {
                Some(&(_, kind)) => kind,
                None => {
                    let kind = self.memory.pool.kind(segment.tenant);
                    kinds.push((segment.tenant, kind));
                    kind
                }
            };
            kind != TenantKind::Persistent
        };
        let mut active = None;
        for &slot in self.by_sequence.values() {
            if self.is_active(slot) {
                active = active.or(Some(slot).filter(|&slot| evictable(slot)));
            } else if evictable(slot) {
                return Some(slot);
            }
        }
        active
    }

    /// Removes the live item at `location` as an eviction of its tenant.
    fn evict_item(&mut self, location: Location) {
        let header = *self.header(location);
        let tenant = self.segment(slot_of(location)).tenant;
        let hash = hash_key(self.item_key(location));
        crate::changes::record(space_of(&header), self.item_key(location), Cause::Evicted);
        self.note_key_event(space_of(&header), location, KeyEventCause::Evicted);
        self.remove_item(space_of(&header), hash, location);
        self.stats.evicted_keys += 1;
        let stats = self.tenant_stats_mut(tenant);
        stats.evicted_keys += 1;
        stats.evicted_bytes += header.item_bytes() as u64;
    }

    /// What an eviction by `policy` calls hot, from a sample of the shard's live items.
    fn hotness_line(&mut self, policy: EvictionPolicy) -> Hotness {
        let mut sample = Vec::new();
        if matches!(
            policy,
            EvictionPolicy::AllKeysLru | EvictionPolicy::AllKeysLfu
        ) && !self.segments.is_empty()
        {
            for _ in 0..HOTNESS_SAMPLE_SEGMENTS {
                let slot = self.rng.gen_range(0..self.segments.len());
                let Some(segment) = self.segments[slot].as_ref() else {
                    continue;
                };
                let mut offset = segment.first_offset();
                let mut taken = 0;
                while let (Some(at), true) = (offset, taken < HOTNESS_SAMPLE_ITEMS_PER_SEGMENT) {
                    let header = segment.header(at);
                    if header.alive == 1 {
                        sample.push(Hotness::figure(policy, header));
                        taken += 1;
                    }
                    offset = segment.next_offset(at);
                }
            }
        }
        sample.sort_unstable();
        Hotness { policy, sample }
    }

    // ----- compaction ----------------------------------------------------------------------------

    /// One bounded slice of compaction: moves up to `items_max` live items out of the sealed segment with
    /// the lowest live ratio (below `COMPACT_LIVE_RATIO_MAX`) and unmaps it once it is empty. Work resumes
    /// where the last slice stopped, so the shard lock is never held for a whole segment. Returns the bytes
    /// given back to the OS by this slice (0 while a segment is still being emptied or nothing qualifies).
    pub fn compact_step(&mut self, items_max: usize) -> usize {
        self.compact_step_over_target(items_max, false)
    }

    /// `compact_step`, taking segments up to `COMPACT_LIVE_RATIO_MAX_OVER_TARGET` live when `over_target`
    /// (the store's resident bytes are over their target in fixed mode).
    pub fn compact_step_over_target(&mut self, items_max: usize, over_target: bool) -> usize {
        let live_ratio_max = if over_target {
            COMPACT_LIVE_RATIO_MAX_OVER_TARGET
        } else {
            COMPACT_LIVE_RATIO_MAX
        };
        self.compact_step_below(items_max, live_ratio_max)
    }

    /// `compact_step`, starting a new segment only if its live ratio is below `live_ratio_max`.
    fn compact_step_below(&mut self, items_max: usize, live_ratio_max: f64) -> usize {
        assert!(items_max > 0);
        let (slot, sequence, mut offset) = match self.compacting.take() {
            Some(resume) => resume,
            None => match self.compaction_candidate(live_ratio_max) {
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
    fn compaction_candidate(&self, live_ratio_max: f64) -> Option<u32> {
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
            .filter(|&(ratio, _)| ratio < live_ratio_max)
            .min_by(|left, right| left.0.total_cmp(&right.0))
            .map(|(_, slot)| slot)
    }

    /// Re-appends a live item (to the active segment) and repoints its index entry.
    pub(super) fn move_item(&mut self, old: Location, header: ItemHeader) {
        debug_assert_eq!(header.alive, 1, "only a live item is moved");
        let mut scratch = std::mem::take(&mut self.compaction_scratch);
        scratch.clear();
        scratch.extend_from_slice(self.item_key(old));
        scratch.extend_from_slice(self.item_stored_value(old));
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

    /// Dead bytes worth compacting (with `COMPACT_LIVE_RATIO_MAX_OVER_TARGET`) while the store's resident
    /// bytes are over their target: at least two segments' worth, so a whole one can go back.
    pub fn needs_compaction_over_target(&self) -> bool {
        self.dead_bytes >= 2 * self.config.segment_bytes
    }

    /// Bytes of one standard segment.
    pub fn segment_bytes(&self) -> usize {
        self.config.segment_bytes
    }
}

/// A sorted sample of the shard's recency (LRU) or frequency (LFU) figures. An item is hot when it was
/// read since it was written (its LFU counter is past the initial value) and its figure is above at least
/// half of the sample: never-read items are evicted oldest first whatever the seconds-resolution clock
/// says, and a read item survives only if it is more recent (or more frequent) than most of the shard.
/// `allkeys-random` has no sample: nothing is hot.
struct Hotness {
    policy: EvictionPolicy,
    sample: Vec<u32>,
}

impl Hotness {
    fn figure(policy: EvictionPolicy, header: &ItemHeader) -> u32 {
        match policy {
            EvictionPolicy::AllKeysLfu => header.lfu_counter as u32,
            _ => header.access_s,
        }
    }

    fn is_hot(&self, header: &ItemHeader) -> bool {
        if self.sample.is_empty() || header.lfu_counter <= LFU_INITIAL {
            return false;
        }
        let figure = Self::figure(self.policy, header);
        let below = self.sample.partition_point(|&seen| seen < figure);
        below * 2 >= self.sample.len()
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
    fn changes_are_recorded_with_their_causes() {
        use crate::changes::{listen, take_thread_changes, Cause};
        let _ = take_thread_changes();
        listen(true);
        let mut shard = shard();
        shard.set_string(0, b"a", b"1", 2000, 0, 1000);
        shard.set_string(0, b"b", b"1", 2000, 0, 1000);
        shard.set_string(0, b"c", b"1", 0, 0, 1000);
        shard.remove(0, b"missing", 1000);
        assert!(!shard.exists(0, b"a", 2000));
        shard.expire_cycle(2500, 100);
        shard.remove(0, b"c", 2500);
        shard.set_string(0, b"d", b"1", 0, 0, 2500);
        shard.evict_one(EvictionPolicy::AllKeysRandom, 2500);
        let taken = take_thread_changes();
        listen(false);
        let seen: Vec<(&[u8], Cause)> = taken
            .changes
            .iter()
            .map(|change| (change.key.as_ref(), change.cause))
            .collect();
        let expected: Vec<(&[u8], Cause)> = vec![
            (b"a", Cause::Written),
            (b"b", Cause::Written),
            (b"c", Cause::Written),
            (b"a", Cause::Expired),
            (b"b", Cause::Expired),
            (b"c", Cause::Removed),
            (b"d", Cause::Written),
            (b"d", Cause::Evicted),
        ];
        assert_eq!(seen, expected, "a missing key's DEL changes nothing");
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

    /// Fills a shard with `count` keys of `size` bytes written one second apart per `per_second` keys.
    fn fill(shard: &mut Shard, count: u32, size: usize, per_second: u32) {
        for index in 0..count {
            let now = (index / per_second) as u64 * 1000;
            shard.set_string(0, format!("k{index}").as_bytes(), &vec![1; size], 0, 0, now);
        }
    }

    #[test]
    fn allkeys_eviction_empties_whole_segments_oldest_first() {
        let mut shard = shard();
        fill(&mut shard, 600, 2000, 100); // ~1.2 MB in 64 KiB segments, 6 seconds of writes
        let now = 10_000;
        // Read a few of the oldest keys: recent access makes them hot.
        for index in 0..5u32 {
            assert!(shard
                .access(0, format!("k{index}").as_bytes(), now)
                .is_some());
        }
        let used = shard.used_bytes();
        let freed = shard
            .evict(EvictionPolicy::AllKeysLru, now, used / 2, usize::MAX)
            .unwrap();
        assert!(freed >= used / 2, "freed {freed} of {} wanted", used / 2);
        shard.assert_consistent();
        // Whole segments went back: what stays mapped is the data, the active segment, the one eviction
        // stopped in and the spares.
        let slack = 4 * (64 << 10);
        assert!(
            shard.mapped_bytes() <= shard.used_bytes() + slack,
            "mapped {} for {} used",
            shard.mapped_bytes(),
            shard.used_bytes()
        );
        for index in 0..5u32 {
            assert!(
                shard.exists(0, format!("k{index}").as_bytes(), now),
                "a recently read key survives"
            );
        }
        // Never-read keys go in write order (none is carried forward for being in a later second than
        // most of the shard): the oldest half went, the newest half stays.
        for index in 5..280u32 {
            assert!(
                !shard.exists(0, format!("k{index}").as_bytes(), now),
                "k{index} went"
            );
        }
        for index in 320..600u32 {
            assert!(
                shard.exists(0, format!("k{index}").as_bytes(), now),
                "k{index} stays"
            );
        }
        assert!(shard.stats.evicted_keys >= 290);
    }

    #[test]
    fn eviction_stops_at_the_items_bound_and_resumes() {
        let mut shard = shard();
        fill(&mut shard, 300, 500, 300);
        let freed = shard
            .evict(EvictionPolicy::AllKeysRandom, 0, usize::MAX, 10)
            .unwrap();
        assert_eq!(
            shard.stats.evicted_keys, 10,
            "one call handles at most its bound"
        );
        assert!(freed >= 10 * 500);
        while shard
            .evict(EvictionPolicy::AllKeysLfu, 0, usize::MAX, 64)
            .is_some()
        {}
        assert_eq!(shard.key_count(0), 0, "everything may go");
        assert_eq!(shard.evict(EvictionPolicy::AllKeysLru, 0, 1, 1), None);
        shard.assert_consistent();
    }

    #[test]
    fn volatile_eviction_only_takes_keys_with_an_expiry() {
        let mut shard = shard();
        for index in 0..100u32 {
            let expire = if index % 2 == 0 { 1_000_000 } else { 0 };
            shard.set_string(0, format!("k{index}").as_bytes(), &[0; 300], expire, 0, 0);
        }
        while shard
            .evict(EvictionPolicy::VolatileLru, 0, usize::MAX, 16)
            .is_some()
        {}
        assert_eq!(shard.key_count(0), 50);
        assert_eq!(shard.volatile_stats(0).0, 0);
        assert_eq!(shard.evict(EvictionPolicy::NoEviction, 0, 1, 1), None);
        shard.assert_consistent();
    }

    #[test]
    fn persistent_tenants_are_not_evicted_by_segment() {
        let mut shard = shard();
        let tenant = shard
            .memory
            .pool
            .define(crate::pool::TenantSpec {
                name: "keep".into(),
                weight: 100,
                kind: TenantKind::Persistent,
                shared: false,
                tier2: true,
            })
            .unwrap();
        let kept = crate::pool::keyspace(tenant, tenant, 0);
        for index in 0..100u32 {
            shard.set_string(kept, format!("p{index}").as_bytes(), &[0; 1000], 0, 0, 0);
        }
        fill(&mut shard, 100, 1000, 100);
        while shard
            .evict(EvictionPolicy::AllKeysLru, 0, usize::MAX, 32)
            .is_some()
        {}
        assert_eq!((shard.key_count(kept), shard.key_count(0)), (100, 0));
        shard.assert_consistent();
    }

    /// A store of 4 shards and 64 KiB segments under `maxmemory`.
    fn store(maxmemory_bytes: usize, policy: EvictionPolicy) -> crate::Store {
        crate::Store::new(&crate::StoreConfig {
            shards: 4,
            databases: 1,
            segment_bytes: 64 << 10,
            maxmemory_bytes,
            policy,
        })
    }

    /// A write as commands do it: make room for the value's bytes first.
    fn write(store: &crate::Store, key: &[u8], value: &[u8], now: u64) {
        let mut guards = store.lock_key(key);
        if store.would_exceed_maxmemory(value.len()) {
            guards.make_room_for(value.len()).expect("room can be made");
        }
        guards.shard(key).set_string(0, key, value, 0, 0, now);
    }

    /// What the server's housekeeping tick does for memory.
    fn housekeeping(store: &crate::Store) {
        for index in 0..store.shard_count() {
            while store.compact_shard_slice(index, 32) {}
        }
        while store.enforce_maxmemory() {}
    }

    fn assert_resident_within(store: &crate::Store, limit: usize, when: &str) {
        assert!(
            store.used_bytes() <= limit,
            "{when}: used {} over maxmemory {limit}",
            store.used_bytes()
        );
        assert!(
            store.resident_bytes() * 10 <= limit * 11,
            "{when}: resident {} over 1.1 x maxmemory {limit}",
            store.resident_bytes()
        );
    }

    #[test]
    fn lowering_maxmemory_bounds_resident_bytes_and_writes_keep_them_bounded() {
        const MIB: usize = 1 << 20;
        for policy in [
            EvictionPolicy::AllKeysLru,
            EvictionPolicy::AllKeysLfu,
            EvictionPolicy::AllKeysRandom,
        ] {
            let store = store(0, policy);
            // 16 items fill a 64 KiB segment but for 1%: the test is about dead space, not the tail a
            // segment cannot use.
            let value = vec![7u8; 4000];
            let now = crate::now_ms();
            for index in 0..9000u32 {
                write(&store, format!("k{index}").as_bytes(), &value, now); // ~35 MiB
            }
            assert!(store.resident_bytes() > 32 * MIB);
            let limit = 16 * MIB;
            store.set_maxmemory_bytes(limit);
            housekeeping(&store);
            assert_resident_within(&store, limit, policy.name());
            // Writes go on at the limit, each evicting: new keys, overwrites (dead space) and reads.
            for round in 0..8u32 {
                for index in 0..800u32 {
                    let key = match index % 4 {
                        0 => format!("k{}", 9000 - 1 - (index % 400)), // overwrites of recent keys
                        _ => format!("n{round}:{index}"),
                    };
                    write(&store, key.as_bytes(), &value, now + round as u64 * 1000);
                }
                housekeeping(&store);
                assert_resident_within(&store, limit, &format!("{} round {round}", policy.name()));
            }
            for index in 0..store.shard_count() {
                store.lock(index).assert_consistent();
            }
        }
    }

    #[test]
    fn a_write_under_a_much_lowered_limit_evicts_from_every_shard() {
        let store = store(0, EvictionPolicy::AllKeysLru);
        let value = vec![7u8; 4000];
        for index in 0..4000u32 {
            write(&store, format!("k{index}").as_bytes(), &value, 0);
        }
        let before: Vec<usize> = (0..4).map(|index| store.lock(index).used_bytes()).collect();
        store.set_maxmemory_bytes(store.used_bytes() / 2);
        write(&store, b"trigger", b"1", 0);
        assert!(store.used_bytes() <= store.maxmemory_bytes());
        for (index, before) in before.into_iter().enumerate() {
            let after = store.lock(index).used_bytes();
            assert!(
                after * 10 >= before * 3 && after * 10 <= before * 7,
                "shard {index} kept {after} of {before} bytes: each gives its share"
            );
        }
        // Whole segments went: what is mapped is what is used, give or take a few segments per shard.
        assert!(store.resident_bytes() <= store.used_bytes() + 4 * 4 * (64 << 10));
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
