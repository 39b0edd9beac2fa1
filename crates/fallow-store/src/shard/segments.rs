//! Segments of a shard: mapping them (or reusing a spare), appending items to each tenant's active
//! segment, killing items, and detaching and unmapping segments once nothing in them lives.
use super::{location, offset_of, slot_of, space_of, Location, Shard};
use crate::memory::segment::{item_bytes, ItemHeader, Segment};
use crate::pool::TenantId;
use std::sync::atomic::Ordering;

impl Shard {
    pub(super) fn active_slot(&self, tenant: TenantId) -> Option<u32> {
        self.active_slots.get(tenant as usize).copied().flatten()
    }

    pub(super) fn set_active_slot(&mut self, tenant: TenantId, slot: Option<u32>) {
        let index = tenant as usize;
        if self.active_slots.len() <= index {
            self.active_slots.resize(index + 1, None);
        }
        self.active_slots[index] = slot;
    }

    pub(super) fn is_active(&self, slot: u32) -> bool {
        self.active_slots.contains(&Some(slot))
    }

    pub fn mapped_bytes(&self) -> usize {
        self.mapped_bytes
    }

    pub fn dead_bytes(&self) -> usize {
        self.dead_bytes
    }

    pub fn segment_count(&self) -> usize {
        self.by_sequence.len()
    }

    pub(super) fn segment(&self, slot: u32) -> &Segment {
        self.segments[slot as usize]
            .as_ref()
            .expect("a location points at a mapped segment")
    }

    pub(super) fn segment_mut(&mut self, slot: u32) -> &mut Segment {
        self.segments[slot as usize]
            .as_mut()
            .expect("a location points at a mapped segment")
    }

    fn map_segment(&mut self, capacity_bytes: usize, tenant: TenantId) -> u32 {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        let mut segment = match self.memory.take_spare(capacity_bytes) {
            Some(mut spare) => {
                spare.recycle(sequence);
                self.stats.segments_reused += 1;
                spare
            }
            None => {
                self.stats.segments_mapped += 1;
                Segment::map(capacity_bytes, sequence)
                    .unwrap_or_else(|| panic!("mmap of {capacity_bytes} bytes failed"))
            }
        };
        self.mapped_bytes += segment.capacity_bytes();
        segment.tenant = tenant;
        self.charge(tenant, segment.capacity_bytes(), true);
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                assert!(
                    self.segments[slot as usize].is_none(),
                    "free slot {slot} holds no segment"
                );
                self.segments[slot as usize] = Some(segment);
                slot
            }
            None => {
                self.segments.push(Some(segment));
                (self.segments.len() - 1) as u32
            }
        };
        let listed = self.by_sequence.insert(sequence, slot);
        assert!(listed.is_none(), "segment sequence {sequence} is new");
        slot
    }

    /// Takes an empty segment out of the shard's books and returns it (still mapped).
    pub(super) fn detach_segment(&mut self, slot: u32) -> Segment {
        let segment = self.segments[slot as usize]
            .take()
            .expect("detaching a mapped segment");
        assert_eq!(segment.live_bytes(), 0, "only empty segments are detached");
        assert!(
            self.dead_bytes >= segment.used_bytes(),
            "a detached segment's {} dead bytes are counted in the shard's {}",
            segment.used_bytes(),
            self.dead_bytes
        );
        self.dead_bytes -= segment.used_bytes();
        self.by_sequence.remove(&segment.sequence);
        self.free_slots.push(slot);
        if self.active_slot(segment.tenant) == Some(slot) {
            self.set_active_slot(segment.tenant, None);
        }
        self.charge(segment.tenant, segment.capacity_bytes(), false);
        segment
    }

    /// Gives an emptied segment back: kept as a spare when the spare rules allow (`may_keep_spare`),
    /// else unmapped here.
    pub(super) fn unmap_segment(&mut self, slot: u32) {
        let segment = self.detach_segment(slot);
        drop(self.give_back_segment(segment, true));
    }

    /// Takes a detached segment out of the shard's books and into the store's spares when
    /// `spare_wanted` and the spare rules allow; else (or when the spares are full) returns it, counted
    /// as unmapped, for the caller to drop (munmap), ideally outside the lock.
    pub(super) fn give_back_segment(
        &mut self,
        segment: Segment,
        spare_wanted: bool,
    ) -> Option<Segment> {
        assert!(
            self.mapped_bytes >= segment.capacity_bytes(),
            "a detached segment of {} bytes was counted in the shard's {} mapped",
            segment.capacity_bytes(),
            self.mapped_bytes
        );
        self.mapped_bytes -= segment.capacity_bytes();
        let unmapped = match spare_wanted && self.may_keep_spare(&segment) {
            true => self.memory.keep_spare(segment),
            false => Some(segment),
        };
        self.stats.segments_unmapped += u64::from(unmapped.is_some());
        unmapped
    }

    /// Whether a detached, empty segment may stay mapped as a spare: standard size and no reclaim
    /// asking for memory (the store bounds how many, `SPARE_SEGMENTS_MAX`).
    pub(super) fn may_keep_spare(&self, segment: &Segment) -> bool {
        segment.capacity_bytes() == self.config.segment_bytes && !self.memory.over_pool_limit()
    }

    /// Appends an item to `tenant`'s segments, mapping a new segment when needed.
    pub(super) fn append(
        &mut self,
        tenant: TenantId,
        header: &ItemHeader,
        key: &[u8],
        value: &[u8],
    ) -> Location {
        let size = item_bytes(key.len(), value.len());
        self.live_item_bytes += size;
        self.appended_bytes += size as u64;
        if header.is_stub() {
            self.memory.stubs.fetch_add(1, Ordering::Relaxed);
        }
        if header.expire_at_ms != 0 {
            self.keyspace_at_mut(space_of(header)).volatile_keys += 1;
        }
        if size > self.config.segment_bytes / 2 {
            let slot = self.map_segment(size, tenant);
            let offset = self.segment_mut(slot).append(header, key, value);
            return location(slot, offset.expect("a dedicated segment fits its item"));
        }
        if let Some(slot) = self.active_slot(tenant) {
            if let Some(offset) = self.segment_mut(slot).append(header, key, value) {
                return location(slot, offset);
            }
            self.seal(slot);
        }
        let slot = self.map_segment(self.config.segment_bytes, tenant);
        self.set_active_slot(tenant, Some(slot));
        let offset = self.segment_mut(slot).append(header, key, value);
        location(slot, offset.expect("an empty segment fits a small item"))
    }

    /// Stops appending to a full segment, unmapping it if nothing in it lives.
    fn seal(&mut self, slot: u32) {
        let tenant = self.segment(slot).tenant;
        self.set_active_slot(tenant, None);
        if self.segment(slot).live_bytes() == 0 && !self.is_draining(slot) {
            self.unmap_segment(slot);
        }
    }

    /// True for the segment a careful release is emptying: it is detached by the release, not unmapped
    /// as a spare when its last item goes.
    pub(super) fn is_draining(&self, slot: u32) -> bool {
        self.draining_slot == Some(slot)
    }

    /// Marks an item dead and unmaps its segment when nothing in it lives any more.
    pub(super) fn kill_item(&mut self, location: Location) {
        let slot = slot_of(location);
        let header = *self.header(location);
        if header.is_stub() {
            self.memory.stubs.fetch_sub(1, Ordering::Relaxed);
        }
        if header.expire_at_ms != 0 {
            let keyspace = self.keyspace_at_mut(space_of(&header));
            debug_assert!(
                keyspace.volatile_keys > 0,
                "a dying item with an expiry is counted as volatile"
            );
            keyspace.volatile_keys -= 1;
        }
        let freed = self.segment_mut(slot).kill(offset_of(location));
        debug_assert!(
            self.live_item_bytes >= freed,
            "a dying item's {freed} bytes are counted in the shard's {} live",
            self.live_item_bytes
        );
        self.dead_bytes += freed;
        self.live_item_bytes -= freed;
        if self.segment(slot).live_bytes() == 0 && !self.is_active(slot) && !self.is_draining(slot)
        {
            self.unmap_segment(slot);
        }
    }

    pub(super) fn header(&self, location: Location) -> &ItemHeader {
        self.segment(slot_of(location)).header(offset_of(location))
    }

    pub(super) fn header_mut(&mut self, location: Location) -> &mut ItemHeader {
        self.segment_mut(slot_of(location))
            .header_mut(offset_of(location))
    }

    pub(super) fn item_key(&self, location: Location) -> &[u8] {
        self.segment(slot_of(location)).key(offset_of(location))
    }

    pub(super) fn item_value(&self, location: Location) -> &[u8] {
        self.segment(slot_of(location)).value(offset_of(location))
    }

    /// The value bytes the item keeps in its segment: its value, or nothing for a stub.
    pub(super) fn item_stored_value(&self, location: Location) -> &[u8] {
        if self.header(location).is_stub() {
            &[]
        } else {
            self.item_value(location)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryCounters, SPARE_SEGMENTS_MAX};
    use crate::shard::tests::{shard, shard_on};
    use std::sync::Arc;

    #[test]
    fn emptied_segments_are_kept_as_spares_reused_and_purged() {
        let mut shard = shard();
        let value = [7u8; 20 << 10];
        for round in 0..8 {
            // overwriting every key empties the sealed segments of the previous round
            for index in 0..12u32 {
                shard.set_string(0, format!("k{index}").as_bytes(), &value, 0, round, 0);
            }
            while shard.compact_step(64) > 0 || shard.is_compacting() {}
        }
        assert!(shard.stats.segments_reused > 0, "spares were reused");
        let spare = shard.memory.spare_bytes();
        assert!(spare > 0 && spare <= SPARE_SEGMENTS_MAX * (64 << 10));
        let resident_before = shard.memory.resident_bytes.load(Ordering::Relaxed);
        let purged = shard.memory.take_spares(usize::MAX);
        assert_eq!(
            purged.iter().map(Segment::capacity_bytes).sum::<usize>(),
            spare
        );
        assert_eq!(shard.memory.spare_bytes(), 0);
        assert_eq!(
            shard.memory.resident_bytes.load(Ordering::Relaxed),
            resident_before - spare
        );
        for index in 0..12u32 {
            let (found, info) = shard
                .get_string(0, format!("k{index}").as_bytes(), 0)
                .unwrap()
                .unwrap();
            assert_eq!((found.len(), info.client_flags), (value.len(), 7));
        }
        shard.assert_consistent();
    }

    #[test]
    fn a_segment_one_shard_empties_is_the_next_one_another_shard_maps() {
        let memory = Arc::new(MemoryCounters::default());
        let (mut emptier, mut writer) = (shard_on(0, memory.clone()), shard_on(1, memory.clone()));
        let value = [3u8; 20 << 10];
        for index in 0..6u32 {
            emptier.set_string(0, format!("k{index}").as_bytes(), &value, 0, 0, 0);
        }
        // Deleting every key of the sealed segments empties them: they become the store's spares.
        for index in 0..6u32 {
            assert!(emptier.remove(0, format!("k{index}").as_bytes(), 0));
        }
        let spare = memory.spare_bytes();
        assert!(spare >= 64 << 10, "emptied segments are kept");
        assert_eq!(emptier.stats.segments_unmapped, 0);
        writer.set_string(0, b"other", &value, 0, 0, 0);
        assert_eq!(writer.stats.segments_mapped, 0, "nothing new is mapped");
        assert_eq!(writer.stats.segments_reused, 1);
        assert_eq!(memory.spare_bytes(), spare - (64 << 10));
        // The counters hold both shards and the spares; each shard's books hold only its own segments.
        assert_eq!(
            memory.resident_bytes.load(Ordering::Relaxed),
            emptier.resident_bytes() + writer.resident_bytes() + memory.spare_bytes()
        );
    }

    #[test]
    fn the_store_keeps_at_most_spare_segments_max_spares() {
        let memory = Arc::new(MemoryCounters::default());
        let mut shards: Vec<Shard> = (0..SPARE_SEGMENTS_MAX + 2)
            .map(|id| shard_on(id, memory.clone()))
            .collect();
        // Three items fill a segment, the fourth seals it; deleting them empties the sealed one (after
        // every shard wrote, so no shard reuses another's spare here).
        for shard in &mut shards {
            for index in 0..4u32 {
                shard.set_string(0, format!("k{index}").as_bytes(), &[1u8; 20 << 10], 0, 0, 0);
            }
        }
        for shard in &mut shards {
            for index in 0..4u32 {
                assert!(shard.remove(0, format!("k{index}").as_bytes(), 0));
            }
        }
        assert_eq!(memory.spare_bytes(), SPARE_SEGMENTS_MAX * (64 << 10));
        let unmapped: u64 = shards
            .iter()
            .map(|shard| shard.stats.segments_unmapped)
            .sum();
        assert_eq!(unmapped, 2, "past the bound, emptied segments are unmapped");
        for shard in &shards {
            shard.assert_consistent();
        }
    }

    #[test]
    fn large_items_get_a_segment_of_their_own_which_goes_with_them() {
        let mut shard = shard();
        shard.set_string(0, b"small", b"v", 0, 0, 0);
        shard.set_string(0, b"large", &[1; 40 << 10], 0, 0, 0);
        assert_eq!(shard.segment_count(), 2);
        shard.assert_consistent();
        assert!(shard.remove(0, b"large", 0));
        assert_eq!(
            shard.segment_count(),
            1,
            "the emptied dedicated segment is detached"
        );
        assert_eq!(
            shard.memory.spare_bytes(),
            0,
            "only standard segments are kept as spares"
        );
        shard.assert_consistent();
    }

    #[test]
    #[should_panic(expected = "only empty segments are detached")]
    fn a_segment_with_live_items_is_never_detached() {
        let mut shard = shard();
        shard.set_string(0, b"k", b"v", 0, 0, 0);
        let slot = shard
            .active_slot(0)
            .expect("the default tenant appends somewhere");
        shard.detach_segment(slot);
    }
}
