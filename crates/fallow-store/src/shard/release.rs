//! Releasing memory for the elastic pool: the fast path (FCRA: every item of a segment goes) and the
//! careful path (SCRA: items read since they were last appended are re-appended, spending one of their
//! reads, the rest go), each emptying one segment of the victim tenant in bounded slices and detaching it
//! for the caller to unmap outside the shard lock.
//!
//! The careful rule is S3-FIFO's main queue over the segment log: a second chance per read (at most
//! `READS_SINCE_APPEND_MAX`), so an item keeps its place while it is read about as often as the log
//! turns over, and a one-time read (a scan, the cold tail of a skewed load) leaves after one pass. On a
//! zipf read-through load it kept more hot items than the sampled-median rule it replaced (recency and
//! frequency both above a sample's median), which also lost to exact LRU (docs/benchmarks.md, "File
//! cache").
use super::tier::Departure;
use super::{location, slot_of, space_of, Location, Shard};
use crate::changes::Cause;
use crate::hash_key;
use crate::memory::segment::Segment;
use crate::pool::TenantId;

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

/// The most of a segment's live bytes a careful release keeps: every release frees at least the rest,
/// so a tenant whose every item is read still gives memory back at once (the pool shrinks within
/// milliseconds) instead of re-appending everything until the reads are spent.
const KEPT_SHARE_MAX: f64 = 0.5;

/// One live item of a segment being planned: where, whether it goes, its size and its claim to stay.
struct Planned {
    offset: u32,
    evict: bool,
    bytes: usize,
    stub: bool,
    reads: u8,
    access_s: u32,
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

    /// Bytes of the segments of `tenant` in this shard (mapped, live or not).
    pub fn tenant_segment_bytes(&self, tenant: TenantId) -> usize {
        self.by_sequence
            .values()
            .map(|&slot| self.segment(slot))
            .filter(|segment| segment.tenant == tenant)
            .map(|segment| segment.capacity_bytes())
            .sum()
    }

    /// The segments of `tenant` in creation order, sealed ones first.
    fn tenant_segments(&self, tenant: TenantId) -> Vec<u32> {
        let (sealed, active): (Vec<u32>, Vec<u32>) = self
            .by_sequence
            .values()
            .copied()
            .filter(|&slot| self.segment(slot).tenant == tenant && !self.is_draining(slot))
            .partition(|&slot| !self.is_active(slot));
        sealed.into_iter().chain(active).collect()
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
                let mut header = *self.header(at);
                // A stub is kept for its tier-2 copy, not for a read; reads only grow between the plan
                // and here, so a kept item has one to spend.
                debug_assert!(header.is_stub() || header.reads_since_append() > 0);
                if !header.is_stub() && header.reads_since_append() > 0 {
                    header.spend_read();
                }
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

    /// Picks the segment to empty and decides which of its items survive (see the module's opening):
    /// of the tenant's oldest sealed segments (at most 4, and at most a quarter of them: a young segment
    /// holds items that have not had the time to be read), the one that keeps the fewest bytes; the
    /// active segment only when no other is left. Expired items always go.
    fn plan_careful_release(&mut self, tenant: TenantId, now_ms: u64) -> Option<ReleasePlan> {
        const CANDIDATES_MAX: usize = 4;
        let segments = self.tenant_segments(tenant);
        let sealed = segments
            .iter()
            .take_while(|&&slot| !self.is_active(slot))
            .count();
        let candidates = match sealed {
            0 => &segments[..segments.len().min(1)],
            _ => &segments[..(sealed / 4).clamp(1, CANDIDATES_MAX)],
        };
        let (slot, items) = candidates
            .iter()
            .copied()
            .map(|slot| (slot, self.rank_items(slot, now_ms)))
            .min_by_key(|(_, items)| kept_bytes(items))?;
        debug_assert_eq!(
            self.segment(slot).tenant,
            tenant,
            "a release empties a segment of its victim"
        );
        self.stop_appending_to(slot);
        self.note_residency(now_ms);
        // Victims first, survivors after: a slice that stops half-way has evicted before it copied.
        let (victims, survivors): (Vec<&Planned>, Vec<&Planned>) =
            items.iter().partition(|item| item.evict);
        let order = victims
            .iter()
            .chain(&survivors)
            .map(|item| (item.offset, item.evict))
            .collect();
        Some(ReleasePlan {
            slot,
            sequence: self.segment(slot).sequence,
            items: order,
            next: 0,
        })
    }

    /// Each live item of `slot` with the rule's verdict: an item read since it was appended stays, the
    /// most read and most recently read first, up to `KEPT_SHARE_MAX` of the live bytes (stubs, which
    /// stay for their tier-2 copy, count against it first).
    fn rank_items(&self, slot: u32, now_ms: u64) -> Vec<Planned> {
        let segment = self.segment(slot);
        // A tenant with tier 2 off keeps no stubs: one left from before the switch is a victim.
        let stubs_stay = self.memory.pool.tier2_allowed(segment.tenant);
        let mut items: Vec<Planned> = self
            .live_offsets(slot)
            .into_iter()
            .map(|offset| {
                let header = segment.header(offset);
                let expired = header.expire_at_ms != 0 && header.expire_at_ms <= now_ms;
                // A stub stays (it is moved, its value is on tier 2): planned as a survivor, so a
                // segment of stubs is the last a release picks, not the first.
                let evict = match header.is_stub() {
                    true => expired || !stubs_stay,
                    false => expired || header.reads_since_append() == 0,
                };
                Planned {
                    offset,
                    evict,
                    bytes: header.item_bytes(),
                    stub: header.is_stub(),
                    reads: header.reads_since_append(),
                    access_s: header.access_s,
                }
            })
            .collect();
        let live_bytes: usize = items.iter().map(|item| item.bytes).sum();
        let kept_bytes_max = (live_bytes as f64 * KEPT_SHARE_MAX) as usize;
        if kept_bytes(&items) > kept_bytes_max {
            let mut kept: usize = items
                .iter()
                .filter(|item| item.stub && !item.evict)
                .map(|item| item.bytes)
                .sum();
            let mut order: Vec<usize> = (0..items.len())
                .filter(|&i| !items[i].evict && !items[i].stub)
                .collect();
            order.sort_unstable_by_key(|&i| std::cmp::Reverse((items[i].reads, items[i].access_s)));
            for i in order {
                kept += items[i].bytes;
                items[i].evict = kept > kept_bytes_max;
            }
        }
        items
    }
}

/// Bytes a plan re-appends.
fn kept_bytes(items: &[Planned]) -> usize {
    items
        .iter()
        .filter(|item| !item.evict)
        .map(|item| item.bytes)
        .sum()
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

    /// A shard of an elastic pool far from its limit: an emptied segment goes back to the caller.
    fn elastic_shard() -> Shard {
        let shard = shard();
        shard
            .memory
            .pool_limit_bytes
            .store(1 << 40, std::sync::atomic::Ordering::Relaxed);
        shard
    }

    fn read(shard: &mut Shard, index: u32, times: usize) {
        for _ in 0..times {
            let key = format!("k{index}");
            assert!(shard.get_string(0, key.as_bytes(), 0).unwrap().is_some());
        }
    }

    /// Reads left to the key's item; None when the key is gone.
    fn reads_left(shard: &mut Shard, index: u32) -> Option<u8> {
        let (_, location) = shard.lookup(0, format!("k{index}").as_bytes(), 0)?;
        Some(shard.header(location).reads_since_append())
    }

    #[test]
    fn careful_release_keeps_items_read_since_appended_spending_one_read_each() {
        let mut shard = elastic_shard();
        // About 115 of these to a 64 KiB segment: one sealed segment (k0..k39 in it), the release's
        // only candidate, and the active one.
        set_small_items(&mut shard, 0..150);
        for index in 0..20 {
            read(&mut shard, index, 1);
        }
        for index in 20..30 {
            read(&mut shard, index, 5);
        }
        let step = shard.careful_release_step(0, 0);
        assert!(step.detached.is_some(), "one slice empties the segment");
        for index in 0..20 {
            assert_eq!(
                reads_left(&mut shard, index),
                Some(0),
                "k{index} spent its read"
            );
        }
        for index in 20..30 {
            assert_eq!(
                reads_left(&mut shard, index),
                Some(2),
                "3 reads counted, 1 spent"
            );
        }
        for index in 30..40 {
            assert_eq!(
                reads_left(&mut shard, index),
                None,
                "k{index} was never read"
            );
        }
        assert_eq!(shard.key_count(0) as u64, 150 - step.objects);
        shard.assert_consistent();
    }

    #[test]
    fn careful_release_keeps_at_most_half_a_segment_the_most_read_first() {
        let mut shard = elastic_shard();
        // One sealed segment of about 115 items, every one read, k0..k9 most.
        set_small_items(&mut shard, 0..150);
        for index in 0..150 {
            read(&mut shard, index, 1);
        }
        for index in 0..10 {
            read(&mut shard, index, 2);
        }
        let step = shard.careful_release_step(0, 0);
        assert!(step.detached.is_some());
        assert_eq!(shard.key_count(0) as u64, 150 - step.objects);
        assert!(
            (56..=60).contains(&step.objects),
            "half of the segment's ~115 items go: {} evicted",
            step.objects
        );
        for index in 0..10 {
            assert_eq!(reads_left(&mut shard, index), Some(2), "the most read stay");
        }
        shard.assert_consistent();
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
