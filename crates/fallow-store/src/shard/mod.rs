//! A shard: the single owner of a slice of the keyspace. It holds one hash index per keyspace, the
//! segments its items live in, the table of its collection values, and the bookkeeping for expiry,
//! eviction and compaction. Every method runs under the shard's lock, so commands on one shard are
//! linearizable.
//!
//! A `keyspace: usize` argument is a keyspace address (`crate::pool::keyspace`: the tenant writing, the
//! namespace its keys live in and the database), not a client's SELECT index; the default tenant's
//! keyspace of database d is d itself.
//!
//! This file keeps the `Shard` struct, its constructor, its config and stats types, item locations and
//! the memory accounting. Each child owns one concern, as `impl Shard` blocks:
//! - `index`: the per-keyspace hash index (`Keyspace`), lookups with lazy expiry, the generic key
//!   operations (exists, delete, expiry), whole keyspaces (FLUSHDB, SWAPDB), SCAN and random keys.
//! - `segments`: mapping, detaching and unmapping segments, spare segments, appending, killing and
//!   reading items.
//! - `values`: strings and collections: read, update and put them, clone, take and put whole values
//!   (`OwnedValue`), OBJECT ENCODING and MEMORY USAGE.
//! - `housekeeping`: active expiry, eviction (`EvictionPolicy`) and compaction.
//! - `release`: the elastic pool's release steps (fast and careful), `ReclaimStep`, `ReleasePlan` and
//!   the hotness sample the careful path judges items by.
//! - `waiters`: clients blocked on a key (BLPOP and friends), behind the `Waiter` trait.
mod housekeeping;
mod index;
mod key_events;
mod release;
mod segments;
mod tier;
mod values;
mod waiters;

pub use housekeeping::EvictionPolicy;
pub use index::set_thread_no_touch;
pub use key_events::{KeyEvent, KeyEventCause, KEY_EVENTS_BYTES_MAX};
pub use release::ReclaimStep;
pub use tier::{
    take_thread_error, take_thread_log, take_thread_lsn, Liveness, TierLink, TierStats,
    STUB_FETCH_BYTES_MAX,
};
pub use values::{OwnedData, OwnedValue};
pub use waiters::Waiter;

use crate::memory::segment::{ItemHeader, Segment};
use crate::pool::{Address, TenantId};
use crate::types::{Collection, Kind};
use crate::MemoryCounters;
use index::Keyspace;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use release::ReleasePlan;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use waiters::Waiters;

/// Where an item lives: segment slot in the high 32 bits, byte offset in the low 32.
type Location = u64;

fn location(slot: u32, offset: u32) -> Location {
    ((slot as u64) << 32) | offset as u64
}

fn slot_of(location: Location) -> u32 {
    (location >> 32) as u32
}

fn offset_of(location: Location) -> u32 {
    location as u32
}

/// The LFU counter every new item starts at (Redis's LFU_INIT_VAL, set by `put_item`); the first read
/// raises it, so an item above it was read since it was written.
pub(super) const LFU_INITIAL: u8 = 5;

/// How a shard is built.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    pub databases: usize,
    /// Size of a regular segment; items larger than half of it get a segment of their own.
    pub segment_bytes: usize,
    /// Seconds-resolution clock origin for LRU/LFU (Unix ms of store start).
    pub epoch_ms: u64,
    /// Shards of the store (tier 2's FLUSHDB records name the shard among them).
    pub shards: usize,
}

/// Counters of events in one shard; INFO sums them over shards.
#[derive(Clone, Debug, Default)]
pub struct ShardStats {
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    pub expired_keys: u64,
    pub evicted_keys: u64,
    pub compacted_segments: u64,
    pub compacted_bytes: u64,
    pub segments_mapped: u64,
    pub segments_unmapped: u64,
    /// Segments taken from the spare pool instead of being mapped afresh.
    pub segments_reused: u64,
}

/// Per-tenant event counters of one shard (hits and misses stay shard-local: no shared cache line on the
/// read path); `Store::tenant_snapshots` sums them.
#[derive(Clone, Copy, Debug, Default)]
pub struct TenantShardStats {
    pub hits: u64,
    pub misses: u64,
    pub evicted_keys: u64,
    pub evicted_bytes: u64,
}

/// What a read of one item sees, besides its value.
#[derive(Clone, Copy, Debug)]
pub struct ItemInfo {
    pub kind: Kind,
    pub expire_at_ms: u64,
    pub cas: u64,
    pub client_flags: u32,
    pub access_s: u32,
    pub lfu_counter: u8,
}

pub struct Shard {
    pub id: usize,
    config: ShardConfig,
    /// Keyspaces by namespace (0 = common, else a tenant's own), each `config.databases` keyspaces (one
    /// per database); namespaces are added on their first write.
    namespaces: Vec<Vec<Keyspace>>,
    segments: Vec<Option<Segment>>,
    free_slots: Vec<u32>,
    /// Slot of each segment by creation sequence, for ordered walks (SCAN, expiry).
    by_sequence: BTreeMap<u64, u32>,
    /// The segment each tenant appends to in this shard (indexed by tenant id).
    active_slots: Vec<Option<u32>>,
    next_sequence: u64,
    collections: Vec<Option<Collection>>,
    free_collections: Vec<u32>,
    cas_counter: u64,
    /// Bytes this shard has reported into `memory.used_bytes`.
    accounted_bytes: usize,
    /// Bytes this shard has reported into `memory.resident_bytes`.
    accounted_resident_bytes: usize,
    collection_bytes: usize,
    /// Bytes of live items in segments (what `used_bytes` counts; dead space is compaction's business).
    live_item_bytes: usize,
    mapped_bytes: usize,
    dead_bytes: usize,
    memory: Arc<MemoryCounters>,
    /// Active-expiry position: (segment sequence, offset) of the next item to check.
    expire_cursor: (u64, u32),
    rng: SmallRng,
    /// Segment being compacted: (slot, its sequence, offset to resume at).
    compacting: Option<(u32, u64, u32)>,
    /// Reused buffer for moving items during compaction.
    compaction_scratch: Vec<u8>,
    /// Smoothed TTL of keys with an expiry, from active-expiry samples (INFO keyspace avg_ttl).
    average_ttl_ms: u64,
    pub stats: ShardStats,
    /// Indexed by tenant id, grown on demand.
    pub tenant_stats: Vec<TenantShardStats>,
    /// A release half-way through a segment.
    release_plan: Option<ReleasePlan>,
    /// The segment a release is emptying; it is detached by the release, not kept as a spare.
    draining_slot: Option<u32>,
    /// Keys expired, evicted or created, for keyspace notifications (off unless asked for).
    key_events: key_events::KeyEvents,
    /// Connections blocked (BLPOP and friends) on a key of this shard, woken when it may be ready.
    waiters: hashbrown::HashMap<(u32, Box<[u8]>), Waiters>,
    /// Tier 2, when the store has one.
    tier: Option<TierLink>,
    /// Clean-ahead has copied every admitted item of the segments up to this sequence.
    clean_ahead_after: u64,
    /// Tier-2 records read for stubs, kept until a command uses them (bounded in bytes).
    stub_fetches: tier::StubFetches,
    /// Bytes of items ever appended to this shard's segments (writes, promotions, survivors of releases).
    appended_bytes: u64,
    /// (now_ms, appended_bytes) when `ram_residency_ms` was last estimated.
    residency_sample: (u64, u64),
    /// How long RAM keeps an item nobody reads, by Little's law: live item bytes over the rate items are
    /// appended, smoothed over careful releases (`Shard::note_residency`; 0 before the first). Decides
    /// which second reads on tier 2 promote (`serves_without_promotion`).
    ram_residency_ms: u64,
    /// Set while room is made for a promotion, or the excess promotions left is demoted: what leaves
    /// RAM then is written whatever the admission rule says (`Shard::room_for_promotion`).
    admit_all_departures: bool,
}

/// The space (namespace and database) of a keyspace address, as the waiters map and headers know it.
fn space_id(keyspace: usize) -> u32 {
    let address = Address::of(keyspace);
    ((address.namespace as u32) << 16) | address.db as u32
}

/// The keyspace address (tenant 0) of the space an item header records.
fn space_of(header: &ItemHeader) -> usize {
    crate::pool::keyspace(0, header.namespace, header.db as usize)
}

impl Shard {
    pub fn new(id: usize, config: ShardConfig, memory: Arc<MemoryCounters>) -> Shard {
        assert!(config.databases >= 1 && config.databases <= 256);
        assert!(config.segment_bytes >= 4096 && config.segment_bytes <= 16 << 20);
        Shard {
            id,
            namespaces: vec![(0..config.databases).map(|_| Keyspace::default()).collect()],
            config,
            segments: Vec::new(),
            free_slots: Vec::new(),
            by_sequence: BTreeMap::new(),
            active_slots: Vec::new(),
            next_sequence: 1,
            collections: Vec::new(),
            free_collections: Vec::new(),
            cas_counter: 0,
            accounted_bytes: 0,
            accounted_resident_bytes: 0,
            collection_bytes: 0,
            live_item_bytes: 0,
            mapped_bytes: 0,
            dead_bytes: 0,
            memory,
            expire_cursor: (0, 0),
            rng: SmallRng::seed_from_u64(id as u64 + 1),
            average_ttl_ms: 0,
            compacting: None,
            compaction_scratch: Vec::new(),
            stats: ShardStats::default(),
            tenant_stats: Vec::new(),
            release_plan: None,
            draining_slot: None,
            key_events: Default::default(),
            waiters: hashbrown::HashMap::new(),
            tier: None,
            clean_ahead_after: 0,
            stub_fetches: Default::default(),
            appended_bytes: 0,
            residency_sample: (0, 0),
            ram_residency_ms: 0,
            admit_all_departures: false,
        }
    }

    pub fn databases(&self) -> usize {
        self.config.databases
    }

    fn tenant_stats_mut(&mut self, tenant: TenantId) -> &mut TenantShardStats {
        let index = tenant as usize;
        if self.tenant_stats.len() <= index {
            self.tenant_stats
                .resize(index + 1, TenantShardStats::default());
        }
        &mut self.tenant_stats[index]
    }

    /// Adds to (or takes from) a tenant's resident bytes, which the pool reads without shard locks.
    fn charge(&self, tenant: TenantId, bytes: usize, add: bool) {
        let counter = &self.memory.pool.counters(tenant).resident_bytes;
        if add {
            counter.fetch_add(bytes, Ordering::Relaxed);
        } else {
            let before = counter.fetch_sub(bytes, Ordering::Relaxed);
            debug_assert!(
                before >= bytes,
                "tenant {tenant} gives back {bytes} resident bytes but holds only {before}"
            );
        }
    }

    // ----- clocks and accounting -------------------------------------------------------------------

    fn access_clock_s(&self, now_ms: u64) -> u32 {
        (now_ms.saturating_sub(self.config.epoch_ms) / 1000) as u32
    }

    /// Seconds since the item was last accessed.
    pub fn idle_s(&self, info: &ItemInfo, now_ms: u64) -> u64 {
        self.access_clock_s(now_ms).saturating_sub(info.access_s) as u64
    }

    fn next_cas(&mut self) -> u64 {
        self.cas_counter += 1;
        (self.cas_counter << 8) | (self.id as u64 & 0xff)
    }

    fn index_bytes(&self) -> usize {
        self.namespaces
            .iter()
            .flatten()
            .map(|keyspace| keyspace.index.capacity() * (std::mem::size_of::<Location>() + 1))
            .sum()
    }

    /// Bytes this shard keeps resident: mapped segments (live, dead and free space alike), collection
    /// values and the indexes. The elastic pool is a budget on this figure.
    pub fn resident_bytes(&self) -> usize {
        self.mapped_bytes + self.collection_bytes + self.index_bytes()
    }

    /// Bytes this shard holds for data: live items, collection values and the indexes. Like Redis's
    /// used_memory it excludes free and dead space; `mapped_bytes` is what the OS sees.
    pub fn used_bytes(&self) -> usize {
        self.live_item_bytes + self.collection_bytes + self.index_bytes()
    }

    /// Pushes the change in `used_bytes` and `resident_bytes` since the last call into the store-wide
    /// counters.
    fn sync_accounting(&mut self) {
        fn push(counter: &AtomicUsize, before: usize, now: usize) {
            if now > before {
                counter.fetch_add(now - before, Ordering::Relaxed);
            } else if now < before {
                let total = counter.fetch_sub(before - now, Ordering::Relaxed);
                debug_assert!(
                    total >= before - now,
                    "a shard gives back {} bytes of a store-wide {total}",
                    before - now
                );
            }
        }
        // Live and dead items fill part of the mapped segments, so data never outgrows what is resident.
        debug_assert!(
            self.live_item_bytes + self.dead_bytes <= self.mapped_bytes,
            "live {} + dead {} item bytes exceed the {} mapped",
            self.live_item_bytes,
            self.dead_bytes,
            self.mapped_bytes
        );
        let used = self.used_bytes();
        push(&self.memory.used_bytes, self.accounted_bytes, used);
        self.accounted_bytes = used;
        let resident = self.resident_bytes();
        debug_assert!(
            used <= resident,
            "used bytes {used} exceed resident bytes {resident}"
        );
        push(
            &self.memory.resident_bytes,
            self.accounted_resident_bytes,
            resident,
        );
        self.accounted_resident_bytes = resident;
    }

    /// Walks the whole shard and checks that its books agree with its segments and indexes (tests only:
    /// it costs a pass over every item).
    #[cfg(test)]
    fn assert_consistent(&self) {
        let (mut live, mut dead, mut mapped) = (0, 0, 0);
        // Keyspace address → (alive items, alive items with an expiry).
        let mut alive: hashbrown::HashMap<usize, (usize, usize)> = hashbrown::HashMap::new();
        for (slot, segment) in self.segments.iter().enumerate() {
            let Some(segment) = segment else {
                assert!(
                    self.free_slots.contains(&(slot as u32)),
                    "an empty slot is free"
                );
                continue;
            };
            assert_eq!(
                self.by_sequence.get(&segment.sequence),
                Some(&(slot as u32)),
                "a mapped segment is listed by its sequence"
            );
            let mut alive_bytes = 0;
            let mut offset = segment.first_offset();
            while let Some(at) = offset {
                let header = segment.header(at);
                if header.alive == 1 {
                    alive_bytes += header.item_bytes();
                    let counts = alive.entry(space_of(header)).or_default();
                    counts.0 += 1;
                    counts.1 += (header.expire_at_ms != 0) as usize;
                }
                offset = segment.next_offset(at);
            }
            assert_eq!(
                alive_bytes,
                segment.live_bytes(),
                "a segment's live bytes are its alive items"
            );
            live += segment.live_bytes();
            dead += segment.used_bytes() - segment.live_bytes();
            mapped += segment.capacity_bytes();
        }
        assert_eq!(
            self.by_sequence.len(),
            self.segments.iter().flatten().count()
        );
        assert_eq!(live, self.live_item_bytes, "live item bytes");
        assert_eq!(dead, self.dead_bytes, "dead bytes");
        assert_eq!(mapped, self.mapped_bytes, "mapped bytes");
        for (namespace, keyspaces) in self.namespaces.iter().enumerate() {
            for (db, keyspace) in keyspaces.iter().enumerate() {
                let address = crate::pool::keyspace(0, namespace as u16, db);
                let (items, volatile) = alive.get(&address).copied().unwrap_or_default();
                assert_eq!(keyspace.index.len(), items, "every alive item is indexed");
                assert_eq!(keyspace.volatile_keys, volatile, "volatile key count");
                for &location in keyspace.index.iter() {
                    let header = self.header(location);
                    assert_eq!(header.alive, 1, "the index points at live items");
                    assert_eq!(space_of(header), address, "an item is in its keyspace");
                }
            }
        }
        let collection_bytes: usize = self
            .collections
            .iter()
            .flatten()
            .map(Collection::memory_bytes)
            .sum();
        assert_eq!(collection_bytes, self.collection_bytes, "collection bytes");
        assert_eq!(self.accounted_bytes, self.used_bytes(), "used bytes pushed");
        assert_eq!(
            self.accounted_resident_bytes,
            self.resident_bytes(),
            "resident bytes pushed"
        );
        // The pool's side of the boundary (when this shard is alone on its counters): tenants are charged
        // for exactly the segments they own (not the spares) and their collections.
        if Arc::strong_count(&self.memory) == 1 {
            let charged: usize = (0..crate::pool::TENANTS_MAX as TenantId)
                .map(|tenant| {
                    let counters = self.memory.pool.counters(tenant);
                    counters.resident_bytes.load(Ordering::Relaxed)
                })
                .sum();
            assert_eq!(
                charged,
                self.mapped_bytes + self.collection_bytes,
                "tenants are charged for their segments and collections"
            );
            assert_eq!(
                self.memory.resident_bytes.load(Ordering::Relaxed),
                self.accounted_resident_bytes + self.memory.spare_bytes(),
                "resident bytes are the shard's and the store's spare segments"
            );
            assert_eq!(
                self.memory.used_bytes.load(Ordering::Relaxed),
                self.accounted_bytes
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shard of 16 databases and 64 KiB segments, as the children's tests use.
    pub(super) fn shard() -> Shard {
        shard_on(0, Arc::new(MemoryCounters::default()))
    }

    /// Shard `id` as `shard()` builds it, on store-wide counters shared with other shards.
    pub(super) fn shard_on(id: usize, memory: Arc<MemoryCounters>) -> Shard {
        Shard::new(
            id,
            ShardConfig {
                databases: 16,
                segment_bytes: 64 << 10,
                epoch_ms: 0,
                shards: 1,
            },
            memory,
        )
    }

    #[test]
    fn an_empty_shard_is_consistent() {
        let shard = shard();
        shard.assert_consistent();
        assert_eq!((shard.used_bytes(), shard.resident_bytes()), (0, 0));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "gives back 1 resident bytes but holds only 0")]
    fn a_tenant_cannot_give_back_bytes_it_does_not_hold() {
        shard().charge(0, 1, false);
    }
}
