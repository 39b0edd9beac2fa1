//! Releasing memory for the elastic pool: the fast path (FCRA: every item of a segment goes) and the
//! careful path (SCRA: cold items go, items hot by both recency and frequency are re-appended), each
//! emptying one segment of the victim tenant in bounded slices and detaching it for the caller to unmap
//! outside the shard lock.
use super::tier::Departure;
use super::{location, slot_of, space_of, Location, Shard};
use crate::changes::Cause;
use crate::hash_key;
use crate::memory::segment::Segment;
use crate::pool::TenantId;
use rand::Rng;

/// Items a release handles per lock hold (bounds how long a client waits behind it: ~1024 index removals
/// or item moves, well under a millisecond).
const RELEASE_ITEMS_PER_HOLD: usize = 1024;

/// What one reclaim step on a shard did. The detached segment is unmapped by the caller once the shard
/// lock is released, so the lock is not held across munmap.
pub struct ReclaimStep {
    pub released_bytes: usize,
    /// Bytes the step added (survivors re-appended into a freshly mapped segment).
    pub grown_bytes: usize,
    pub objects: u64,
    pub detached: Option<Segment>,
    /// False when the shard holds no segment of the tenant to work on.
    pub progressed: bool,
}

impl Default for ReclaimStep {
    fn default() -> ReclaimStep {
        ReclaimStep::nothing()
    }
}

impl ReclaimStep {
    fn nothing() -> ReclaimStep {
        ReclaimStep {
            released_bytes: 0,
            grown_bytes: 0,
            objects: 0,
            detached: None,
            progressed: false,
        }
    }
}

/// A sample of a shard's recency and frequency figures, sorted, to place one item against.
#[derive(Default)]
struct Hotness {
    access_s: Vec<u32>,
    lfu: Vec<u8>,
}

impl Hotness {
    /// True when the item is in the upper half of the sample both by last access and by frequency.
    fn is_hot(&self, access_s: u32, lfu: u8) -> bool {
        let below = |count: usize, total: usize| total > 0 && count * 2 >= total;
        below(
            self.access_s.partition_point(|&seen| seen < access_s),
            self.access_s.len(),
        ) && below(self.lfu.partition_point(|&seen| seen < lfu), self.lfu.len())
    }
}

/// A release in progress on one segment: which items go and which stay (careful path) or that all go
/// (fast path), worked through a bounded number of items per lock hold.
pub(super) struct ReleasePlan {
    slot: u32,
    sequence: u64,
    /// (offset, evict) in victim order; survivors are re-appended.
    items: Vec<(u32, bool)>,
    next: usize,
}

impl Shard {
    /// Resident bytes that a release changes: segments and collection values.
    fn releasable_bytes(&self) -> usize {
        self.mapped_bytes + self.collection_bytes
    }

    /// The segments of `tenant` in creation order, sealed ones first, at most `count`.
    fn tenant_segments(&self, tenant: TenantId, count: usize) -> Vec<u32> {
        let (sealed, active): (Vec<u32>, Vec<u32>) = self
            .by_sequence
            .values()
            .copied()
            .filter(|&slot| self.segment(slot).tenant == tenant && !self.is_draining(slot))
            .partition(|&slot| !self.is_active(slot));
        sealed.into_iter().chain(active).take(count).collect()
    }

    /// The oldest sealed segment of `tenant`, else its active one: found without walking every segment.
    fn first_tenant_segment(&self, tenant: TenantId) -> Option<u32> {
        self.by_sequence
            .values()
            .copied()
            .find(|&slot| {
                self.segment(slot).tenant == tenant
                    && !self.is_active(slot)
                    && !self.is_draining(slot)
            })
            .or_else(|| self.active_slot(tenant))
    }

    /// Removes the live item at `location` as an eviction of its tenant.
    fn evict_at(&mut self, location: Location) {
        let header = *self.header(location);
        let tenant = self.segment(slot_of(location)).tenant;
        let hash = hash_key(self.item_key(location));
        let bytes = header.item_bytes();
        crate::changes::record(space_of(&header), self.item_key(location), Cause::Evicted);
        self.note_key_event(space_of(&header), location, super::KeyEventCause::Evicted);
        self.remove_item(space_of(&header), hash, location);
        self.stats.evicted_keys += 1;
        let stats = self.tenant_stats_mut(tenant);
        stats.evicted_keys += 1;
        stats.evicted_bytes += bytes as u64;
    }

    /// The live items of a segment.
    fn live_offsets(&self, slot: u32) -> Vec<u32> {
        let segment = self.segment(slot);
        let mut offsets = Vec::new();
        let mut offset = segment.first_offset();
        while let Some(at) = offset {
            if segment.header(at).alive == 1 {
                offsets.push(at);
            }
            offset = segment.next_offset(at);
        }
        offsets
    }

    /// Takes the emptied draining segment out of the books and hands it to the caller to unmap, or keeps
    /// it as a spare when `spare_wanted` and the spare rules allow (`may_keep_spare`).
    fn finish_draining(&mut self, slot: u32, spare_wanted: bool) -> Option<Segment> {
        self.draining_slot = None;
        let segment = self.detach_segment(slot);
        self.give_back_segment(segment, spare_wanted)
    }

    /// FCRA: one bounded slice of evicting every item of one segment of `tenant`, in slot order with no
    /// regard for recency; the emptied segment is detached for the caller to unmap outside the lock.
    pub fn fast_release_step(&mut self, tenant: TenantId) -> ReclaimStep {
        self.release_step(tenant, None, false)
    }

    /// SCRA: one bounded slice of emptying a cold segment of `tenant`: expired items and items the LRU or
    /// LFU order would evict first go, items hot by both survive and are re-appended (see
    /// `plan_careful_release`).
    pub fn careful_release_step(&mut self, tenant: TenantId, now_ms: u64) -> ReclaimStep {
        self.release_step(tenant, Some(now_ms), true)
    }

    /// SCRA for an elastic reclaim: the careful choice of what stays, but nothing is written to tier 2
    /// (a reclaim never waits on I/O: what has a tier-2 copy becomes a stub, clean-ahead made the copies
    /// of cold items beforehand, the rest goes).
    pub fn careful_reclaim_step(&mut self, tenant: TenantId, now_ms: u64) -> ReclaimStep {
        self.release_step(tenant, Some(now_ms), false)
    }

    /// One slice of a release: plans one (careful when `careful_now_ms` is given) unless a slice before
    /// left one unfinished, whichever path planned it, then works through at most
    /// `RELEASE_ITEMS_PER_HOLD` of its items; `may_write`: items the admission rule takes are written to
    /// tier 2 (room-making for a write), else only items with a copy are kept as stubs.
    fn release_step(
        &mut self,
        tenant: TenantId,
        careful_now_ms: Option<u64>,
        may_write: bool,
    ) -> ReclaimStep {
        let before = self.releasable_bytes();
        if self.release_plan.is_none() {
            assert!(
                self.draining_slot.is_none(),
                "a segment drains only under a release plan"
            );
            let plan = match careful_now_ms {
                Some(now_ms) => self.plan_careful_release(tenant, now_ms),
                None => self.plan_fast_release(tenant),
            };
            let Some(plan) = plan else {
                return ReclaimStep::nothing();
            };
            // Compaction half-way through this segment would unmap it under the release: the release
            // takes it over (what compaction moved already is simply elsewhere).
            if self
                .compacting
                .is_some_and(|(slot, _, _)| slot == plan.slot)
            {
                self.compacting = None;
            }
            self.draining_slot = Some(plan.slot);
            self.release_plan = Some(plan);
        }
        let mut plan = self.release_plan.take().expect("planned above");
        assert_eq!(
            self.draining_slot,
            Some(plan.slot),
            "the planned segment is the draining one"
        );
        let mut objects = 0;
        let end = (plan.next + RELEASE_ITEMS_PER_HOLD).min(plan.items.len());
        for index in plan.next..end {
            let (offset, evict) = plan.items[index];
            let at = location(plan.slot, offset);
            // Items may have been overwritten or deleted between slices.
            if self.header(at).alive != 1 {
                continue;
            }
            if evict {
                // With tier 2, what has (or, when writes are allowed, earns) a tier-2 copy stays as a stub.
                let departure = match self.has_tier2() {
                    true => self.demote_at(at, may_write),
                    false => Departure::Evict,
                };
                match departure {
                    Departure::Evict => self.evict_at(at),
                    Departure::Demoted => {}
                    Departure::Kept => continue,
                }
                objects += 1;
            } else {
                let header = *self.header(at);
                self.move_item(at, header);
            }
        }
        plan.next = end;
        let detached = if plan.next == plan.items.len() {
            debug_assert_eq!(self.segment(plan.slot).sequence, plan.sequence);
            assert_eq!(
                self.segment(plan.slot).live_bytes(),
                0,
                "a finished release leaves its segment empty"
            );
            // Fixed mode making room for new data (no elastic pool to give memory back to): the
            // emptied segment stays mapped as a spare, so the append it makes room for reuses its pages
            // instead of faulting in fresh zeroed ones (3% of CPU on 50 KB SETs, docs/benchmarks.md).
            let spare_wanted = may_write
                && careful_now_ms.is_some()
                && self
                    .memory
                    .pool_limit_bytes
                    .load(std::sync::atomic::Ordering::Relaxed)
                    == 0;
            self.finish_draining(plan.slot, spare_wanted)
        } else {
            self.release_plan = Some(plan);
            None
        };
        self.sync_accounting();
        let after = self.releasable_bytes();
        ReclaimStep {
            released_bytes: before.saturating_sub(after),
            grown_bytes: after.saturating_sub(before),
            objects,
            detached,
            progressed: true,
        }
    }

    /// Takes `slot` out of its tenant's appends so a release can empty it.
    fn stop_appending_to(&mut self, slot: u32) {
        if self.is_active(slot) {
            let owner = self.segment(slot).tenant;
            self.set_active_slot(owner, None);
        }
    }

    /// The fast path's plan: every live item of the tenant's oldest segment goes.
    fn plan_fast_release(&mut self, tenant: TenantId) -> Option<ReleasePlan> {
        let slot = self.first_tenant_segment(tenant)?;
        self.stop_appending_to(slot);
        Some(ReleasePlan {
            slot,
            sequence: self.segment(slot).sequence,
            items: self
                .live_offsets(slot)
                .into_iter()
                .map(|offset| (offset, true))
                .collect(),
            next: 0,
        })
    }

    /// Picks the segment to empty and decides which of its items survive. An item survives when it is in
    /// the hotter half of the shard both by recency (LRU) and by frequency (LFU), judged against a sample
    /// of the shard's items, so a victim is any item that either list would evict first: the alternating
    /// LRU/LFU victims of SCRA, with thresholds that hold for the whole shard rather than per segment (a
    /// segment full of hot keys keeps them all). Expired items are always victims. Among the tenant's 4
    /// oldest segments it empties the one that keeps the fewest bytes.
    fn plan_careful_release(&mut self, tenant: TenantId, now_ms: u64) -> Option<ReleasePlan> {
        const CANDIDATES: usize = 4;
        let candidates = self.tenant_segments(tenant, CANDIDATES);
        // Sealed segments only while there are any: the active one holds fresh writes and the survivors
        // of earlier releases.
        let sealed: Vec<u32> = candidates
            .iter()
            .copied()
            .filter(|&slot| !self.is_active(slot))
            .collect();
        let pool = if sealed.is_empty() {
            candidates
        } else {
            sealed
        };
        let hotness = self.hotness_sample(tenant);
        let (slot, items) = pool
            .into_iter()
            .map(|slot| (slot, self.rank_items(slot, &hotness, now_ms)))
            .min_by_key(|(_, items)| {
                items
                    .iter()
                    .filter(|item| !item.1)
                    .map(|item| item.2)
                    .sum::<usize>()
            })?;
        debug_assert_eq!(
            self.segment(slot).tenant,
            tenant,
            "a release empties a segment of its victim"
        );
        self.stop_appending_to(slot);
        self.note_residency(now_ms);
        // Victims first, survivors after: a slice that stops half-way has evicted before it copied.
        let mut order: Vec<(u32, bool)> = items
            .iter()
            .filter(|item| item.1)
            .map(|item| (item.0, true))
            .collect();
        order.extend(
            items
                .iter()
                .filter(|item| !item.1)
                .map(|item| (item.0, false)),
        );
        Some(ReleasePlan {
            slot,
            sequence: self.segment(slot).sequence,
            items: order,
            next: 0,
        })
    }

    /// (offset, evict, bytes) of each live item of `slot`, by the rule of `plan_careful_release`.
    fn rank_items(&self, slot: u32, hotness: &Hotness, now_ms: u64) -> Vec<(u32, bool, usize)> {
        let segment = self.segment(slot);
        // A tenant with tier 2 off keeps no stubs: one left from before the switch is a victim.
        let stubs_stay = self.memory.pool.tier2_allowed(segment.tenant);
        self.live_offsets(slot)
            .into_iter()
            .map(|offset| {
                let header = segment.header(offset);
                let expired = header.expire_at_ms != 0 && header.expire_at_ms <= now_ms;
                // A stub stays (it is moved, its value is on tier 2): planned as a survivor, so a
                // segment of stubs is the last a release picks, not the first.
                let evict = match header.is_stub() {
                    true => expired || !stubs_stay,
                    false => expired || !hotness.is_hot(header.access_s, header.lfu_counter),
                };
                (offset, evict, header.item_bytes())
            })
            .collect()
    }

    /// Recency and frequency of up to 128 of the tenant's items in this shard: the first live items of
    /// 16 randomly chosen segments (walking a whole segment of small items per sample would cost more).
    fn hotness_sample(&mut self, tenant: TenantId) -> Hotness {
        const SEGMENTS: usize = 16;
        const ITEMS_PER_SEGMENT: usize = 8;
        let slots: Vec<u32> = self
            .by_sequence
            .values()
            .copied()
            .filter(|&slot| self.segment(slot).tenant == tenant)
            .collect();
        let mut sample = Hotness::default();
        for _ in 0..SEGMENTS.min(slots.len()) {
            let slot = slots[self.rng.gen_range(0..slots.len())];
            let segment = self.segment(slot);
            let mut offset = segment.first_offset();
            let mut taken = 0;
            while let (Some(at), true) = (offset, taken < ITEMS_PER_SEGMENT) {
                let header = segment.header(at);
                if header.alive == 1 {
                    sample.access_s.push(header.access_s);
                    sample.lfu.push(header.lfu_counter);
                    taken += 1;
                }
                offset = segment.next_offset(at);
            }
        }
        sample.access_s.sort_unstable();
        sample.lfu.sort_unstable();
        sample
    }
}

#[cfg(test)]
mod tests {
    use crate::shard::tests::shard;
    use crate::shard::Shard;

    /// Sets keys `k<index>` for `indexes`, 500-byte values (many to a segment).
    fn set_small_items(shard: &mut Shard, indexes: std::ops::Range<u32>) {
        for index in indexes {
            shard.set_string(0, format!("k{index}").as_bytes(), &[0; 500], 0, 0, 0);
        }
    }

    #[test]
    fn fast_release_detaches_one_emptied_segment_per_plan() {
        let mut shard = shard();
        set_small_items(&mut shard, 0..300);
        let segments = shard.segment_count();
        let mapped = shard.mapped_bytes();
        let step = shard.fast_release_step(0);
        assert!(step.progressed && step.objects > 0);
        let detached = step
            .detached
            .expect("a segment of small items empties in one slice");
        assert_eq!(detached.live_bytes(), 0, "a released segment is empty");
        assert_eq!(step.released_bytes, detached.capacity_bytes());
        assert_eq!(shard.segment_count(), segments - 1);
        assert_eq!(shard.mapped_bytes(), mapped - detached.capacity_bytes());
        assert_eq!(shard.key_count(0) as u64, 300 - step.objects);
        shard.assert_consistent();
    }

    #[test]
    fn careful_release_keeps_what_is_hot_and_empties_its_segment() {
        let mut shard = shard();
        // An elastic pool (far from its limit): the emptied segment goes back to the caller to unmap.
        shard
            .memory
            .pool_limit_bytes
            .store(1 << 40, std::sync::atomic::Ordering::Relaxed);
        set_small_items(&mut shard, 0..300);
        let step = shard.careful_release_step(0, 0);
        assert!(step.progressed);
        let detached = step
            .detached
            .expect("one slice empties a segment of small items");
        assert_eq!(detached.live_bytes(), 0, "a released segment is empty");
        assert_eq!(shard.key_count(0) as u64, 300 - step.objects);
        shard.assert_consistent();
        assert!(
            !shard.fast_release_step(1).progressed,
            "tenant 1 holds nothing here"
        );
    }

    #[test]
    fn fixed_mode_room_making_keeps_the_emptied_segment_as_a_spare() {
        let mut shard = shard();
        set_small_items(&mut shard, 0..300);
        let mapped = shard.mapped_bytes();
        let step = shard.careful_release_step(0, 0);
        assert!(step.progressed && step.detached.is_none());
        assert_eq!(shard.memory.spare_bytes(), 64 << 10);
        shard.assert_consistent();
        // The next segment the shard needs is that one: nothing new is mapped.
        let reused = shard.stats.segments_reused;
        set_small_items(&mut shard, 300..600);
        assert!(shard.stats.segments_reused > reused);
        assert!(shard.mapped_bytes() <= mapped + 2 * (64 << 10));
        // A reclaim (no writes) still hands its segment back.
        let mut drained = None;
        for _ in 0..8 {
            let step = shard.careful_reclaim_step(0, 0);
            if let Some(segment) = step.detached {
                drained = Some(segment);
                break;
            }
        }
        assert!(
            drained.is_some(),
            "a reclaim gives its emptied segment back"
        );
        shard.assert_consistent();
    }
}
