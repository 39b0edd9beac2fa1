//! A shard: the single owner of a slice of the keyspace. It holds one hash index per database, the
//! segments its items live in, the table of its collection values, and the bookkeeping for expiry,
//! eviction and compaction. Every method runs under the shard's lock, so commands on one shard are
//! linearizable.
use crate::memory::segment::{item_bytes, ItemHeader, Segment};
use crate::pool::{Address, TenantId, TenantKind};
use crate::types::{Collection, CollectionType, Kind};
use crate::{hash_key, MemoryCounters, WrongType};
use hashbrown::HashTable;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

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

/// Wake-ups of the connections blocked on one key.
type Waiters = Vec<Arc<tokio::sync::Notify>>;

/// How a shard is built.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    pub databases: usize,
    /// Size of a regular segment; items larger than half of it get a segment of their own.
    pub segment_bytes: usize,
    /// Seconds-resolution clock origin for LRU/LFU (Unix ms of store start).
    pub epoch_ms: u64,
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
struct ReleasePlan {
    slot: u32,
    sequence: u64,
    /// (offset, evict) in victim order; survivors are re-appended.
    items: Vec<(u32, bool)>,
    next: usize,
}

/// A value taken out of (or copied from) the keyspace, to be put under another key.
#[derive(Clone, Debug)]
pub struct OwnedValue {
    pub data: OwnedData,
    pub expire_at_ms: u64,
}

#[derive(Clone, Debug)]
pub enum OwnedData {
    String { bytes: Vec<u8>, client_flags: u32 },
    Collection(Collection),
}

impl OwnedValue {
    pub fn kind(&self) -> Kind {
        match &self.data {
            OwnedData::String { .. } => Kind::String,
            OwnedData::Collection(collection) => collection.kind(),
        }
    }
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

#[derive(Default)]
struct Db {
    index: HashTable<Location>,
    /// Keys with an expiry: active expiry skips a shard that has none.
    volatile_keys: usize,
}

/// Items a release handles per lock hold (bounds how long a client waits behind it: ~1024 index removals
/// or item moves, well under a millisecond).
const RELEASE_ITEMS_PER_HOLD: usize = 1024;

/// Keys sampled per eviction, as Redis's maxmemory-samples.
const EVICTION_SAMPLES: usize = 5;
/// A sealed segment is compacted when less than this fraction of it is live.
const COMPACT_LIVE_RATIO_MAX: f64 = 0.6;
/// Emptied standard-size segments a shard keeps mapped for reuse instead of unmapping them. Overwrite
/// and large-value loads otherwise unmap and map a segment per few items, and the page faults and page
/// clears of the fresh mapping cost more than the copy of the data (measured: 64 KiB SETs spent ~30% of
/// the server's CPU there). Bounded so a shard never holds more than this many idle segments.
const SPARE_SEGMENTS_MAX: usize = 2;

pub struct Shard {
    pub id: usize,
    config: ShardConfig,
    /// Keyspaces by namespace (0 = common, else a tenant's own), each `config.databases` databases;
    /// namespaces are added on their first write.
    spaces: Vec<Vec<Db>>,
    segments: Vec<Option<Segment>>,
    free_slots: Vec<u32>,
    /// Emptied segments kept mapped for reuse (at most `SPARE_SEGMENTS_MAX`, standard size only).
    spare_segments: Vec<Segment>,
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
    /// Connections blocked (BLPOP and friends) on a key of this shard, woken when it may be ready.
    waiters: hashbrown::HashMap<(u32, Box<[u8]>), Waiters>,
}

/// The space (namespace and database) of an address, as the waiters map and headers know it.
fn space_id(address: usize) -> u32 {
    let address = Address::of(address);
    ((address.namespace as u32) << 16) | address.db as u32
}

/// The address (tenant 0) of the space an item header records.
fn space_of(header: &ItemHeader) -> usize {
    crate::pool::keyspace(0, header.namespace, header.db as usize)
}

impl Shard {
    pub fn new(id: usize, config: ShardConfig, memory: Arc<MemoryCounters>) -> Shard {
        assert!(config.databases >= 1 && config.databases <= 256);
        assert!(config.segment_bytes >= 4096 && config.segment_bytes <= 16 << 20);
        Shard {
            id,
            spaces: vec![(0..config.databases).map(|_| Db::default()).collect()],
            config,
            segments: Vec::new(),
            free_slots: Vec::new(),
            spare_segments: Vec::new(),
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
            waiters: hashbrown::HashMap::new(),
        }
    }

    pub fn databases(&self) -> usize {
        self.config.databases
    }

    /// The database at `address`, if its namespace exists here.
    fn db_at(&self, address: usize) -> Option<&Db> {
        let address = Address::of(address);
        self.spaces
            .get(address.namespace as usize)
            .map(|space| &space[address.db])
    }

    /// The database at `address`, creating its namespace.
    fn db_at_mut(&mut self, address: usize) -> &mut Db {
        let address = Address::of(address);
        let namespace = address.namespace as usize;
        while self.spaces.len() <= namespace {
            let databases = self.config.databases;
            self.spaces
                .push((0..databases).map(|_| Db::default()).collect());
        }
        &mut self.spaces[namespace][address.db]
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
            counter.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    fn active_slot(&self, tenant: TenantId) -> Option<u32> {
        self.active_slots.get(tenant as usize).copied().flatten()
    }

    fn set_active_slot(&mut self, tenant: TenantId, slot: Option<u32>) {
        let index = tenant as usize;
        if self.active_slots.len() <= index {
            self.active_slots.resize(index + 1, None);
        }
        self.active_slots[index] = slot;
    }

    fn is_active(&self, slot: u32) -> bool {
        self.active_slots.contains(&Some(slot))
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
        self.spaces
            .iter()
            .flatten()
            .map(|db| db.index.capacity() * (std::mem::size_of::<Location>() + 1))
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
        fn push(counter: &std::sync::atomic::AtomicUsize, before: usize, now: usize) {
            if now > before {
                counter.fetch_add(now - before, Ordering::Relaxed);
            } else if now < before {
                counter.fetch_sub(before - now, Ordering::Relaxed);
            }
        }
        let used = self.used_bytes();
        push(&self.memory.used_bytes, self.accounted_bytes, used);
        self.accounted_bytes = used;
        let resident = self.resident_bytes();
        push(
            &self.memory.resident_bytes,
            self.accounted_resident_bytes,
            resident,
        );
        self.accounted_resident_bytes = resident;
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

    pub fn key_count(&self, db: usize) -> usize {
        self.db_at(db).map_or(0, |db| db.index.len())
    }

    /// Keys of `db` with an expiry, and the sum of their TTLs estimated from the average TTL seen by
    /// active expiry (as Redis's avg_ttl). O(1): INFO must not walk the keyspace.
    pub fn volatile_stats(&self, db: usize) -> (usize, u64) {
        let count = self.db_at(db).map_or(0, |db| db.volatile_keys);
        (count, count as u64 * self.average_ttl_ms)
    }

    // ----- segments ------------------------------------------------------------------------------

    fn segment(&self, slot: u32) -> &Segment {
        self.segments[slot as usize]
            .as_ref()
            .expect("a location points at a mapped segment")
    }

    fn segment_mut(&mut self, slot: u32) -> &mut Segment {
        self.segments[slot as usize]
            .as_mut()
            .expect("a location points at a mapped segment")
    }

    fn map_segment(&mut self, capacity_bytes: usize, tenant: TenantId) -> u32 {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        let mut segment = match self.spare_segments.pop() {
            Some(mut spare) if spare.capacity_bytes() == capacity_bytes => {
                spare.recycle(sequence);
                self.stats.segments_reused += 1;
                spare
            }
            other => {
                if let Some(spare) = other {
                    self.spare_segments.push(spare);
                }
                let segment = Segment::map(capacity_bytes, sequence)
                    .unwrap_or_else(|| panic!("mmap of {capacity_bytes} bytes failed"));
                self.mapped_bytes += segment.capacity_bytes();
                self.stats.segments_mapped += 1;
                segment
            }
        };
        segment.tenant = tenant;
        self.charge(tenant, segment.capacity_bytes(), true);
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.segments[slot as usize] = Some(segment);
                slot
            }
            None => {
                self.segments.push(Some(segment));
                (self.segments.len() - 1) as u32
            }
        };
        self.by_sequence.insert(sequence, slot);
        slot
    }

    /// Takes an empty segment out of the shard's books and returns it (still mapped).
    fn detach_segment(&mut self, slot: u32) -> Segment {
        let segment = self.segments[slot as usize]
            .take()
            .expect("detaching a mapped segment");
        assert_eq!(segment.live_bytes(), 0, "only empty segments are detached");
        self.dead_bytes -= segment.used_bytes();
        self.by_sequence.remove(&segment.sequence);
        self.free_slots.push(slot);
        if self.active_slot(segment.tenant) == Some(slot) {
            self.set_active_slot(segment.tenant, None);
        }
        self.charge(segment.tenant, segment.capacity_bytes(), false);
        segment
    }

    /// Gives an emptied segment back: kept as a spare (standard size, room left, no reclaim asked for
    /// memory) or unmapped.
    fn unmap_segment(&mut self, slot: u32) {
        let segment = self.detach_segment(slot);
        let standard = segment.capacity_bytes() == self.config.segment_bytes;
        let over_pool = self.memory.over_pool_limit();
        if standard && !over_pool && self.spare_segments.len() < SPARE_SEGMENTS_MAX {
            self.spare_segments.push(segment);
        } else {
            self.forget_segment(&segment);
        }
    }

    /// Counts a detached segment as unmapped; the caller drops it (munmap), ideally outside the lock.
    fn forget_segment(&mut self, segment: &Segment) {
        self.mapped_bytes -= segment.capacity_bytes();
        self.stats.segments_unmapped += 1;
    }

    /// Unmaps the spare segments (MEMORY PURGE; the elastic controller when the host needs memory back).
    /// Returns the bytes given back to the OS.
    pub fn release_spare_segments(&mut self) -> usize {
        let spares = self.take_spare_segments();
        spares.iter().map(Segment::capacity_bytes).sum()
    }

    /// Takes the spare segments out of the books; the caller drops them (their pages go back to the OS),
    /// ideally after releasing the shard lock.
    pub fn take_spare_segments(&mut self) -> Vec<Segment> {
        let spares = std::mem::take(&mut self.spare_segments);
        for segment in &spares {
            self.forget_segment(segment);
        }
        self.sync_accounting();
        spares
    }

    /// Bytes of emptied segments kept mapped for reuse (part of `mapped_bytes`).
    pub fn spare_bytes(&self) -> usize {
        self.spare_segments
            .iter()
            .map(Segment::capacity_bytes)
            .sum()
    }

    /// Appends an item to `tenant`'s segments, mapping a new segment when needed.
    fn append(
        &mut self,
        tenant: TenantId,
        header: &ItemHeader,
        key: &[u8],
        value: &[u8],
    ) -> Location {
        let size = item_bytes(key.len(), value.len());
        self.live_item_bytes += size;
        if header.expire_at_ms != 0 {
            self.db_at_mut(space_of(header)).volatile_keys += 1;
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
    fn is_draining(&self, slot: u32) -> bool {
        self.draining_slot == Some(slot)
    }

    /// Marks an item dead and unmaps its segment when nothing in it lives any more.
    fn kill_item(&mut self, location: Location) {
        let slot = slot_of(location);
        let header = *self.header(location);
        if header.expire_at_ms != 0 {
            self.db_at_mut(space_of(&header)).volatile_keys -= 1;
        }
        let freed = self.segment_mut(slot).kill(offset_of(location));
        self.dead_bytes += freed;
        self.live_item_bytes -= freed;
        if self.segment(slot).live_bytes() == 0 && !self.is_active(slot) && !self.is_draining(slot)
        {
            self.unmap_segment(slot);
        }
    }

    fn header(&self, location: Location) -> &ItemHeader {
        self.segment(slot_of(location)).header(offset_of(location))
    }

    fn header_mut(&mut self, location: Location) -> &mut ItemHeader {
        self.segment_mut(slot_of(location))
            .header_mut(offset_of(location))
    }

    fn item_key(&self, location: Location) -> &[u8] {
        self.segment(slot_of(location)).key(offset_of(location))
    }

    fn item_value(&self, location: Location) -> &[u8] {
        self.segment(slot_of(location)).value(offset_of(location))
    }

    // ----- index ---------------------------------------------------------------------------------

    fn find(&self, db: usize, hash: u64, key: &[u8]) -> Option<Location> {
        let segments = &self.segments;
        self.db_at(db)?
            .index
            .find(hash, |&candidate| {
                let segment = segments[slot_of(candidate) as usize]
                    .as_ref()
                    .expect("indexed items live in mapped segments");
                segment.key(offset_of(candidate)) == key
            })
            .copied()
    }

    fn replace_location(&mut self, db: usize, hash: u64, old: Location, new: Location) {
        let entry = self
            .db_at_mut(db)
            .index
            .find_mut(hash, |&candidate| candidate == old)
            .expect("a live item is indexed");
        *entry = new;
    }

    fn insert_location(&mut self, db: usize, hash: u64, new: Location) {
        self.db_at_mut(db);
        let address = Address::of(db);
        let segments = &self.segments;
        let db = &mut self.spaces[address.namespace as usize][address.db];
        db.index.insert_unique(hash, new, |&existing| {
            let segment = segments[slot_of(existing) as usize]
                .as_ref()
                .expect("indexed items live in mapped segments");
            hash_key(segment.key(offset_of(existing)))
        });
    }

    fn remove_location(&mut self, db: usize, hash: u64, old: Location) {
        let Ok(entry) = self
            .db_at_mut(db)
            .index
            .find_entry(hash, |&candidate| candidate == old)
        else {
            panic!("removing an indexed item");
        };
        entry.remove();
    }

    /// Frees a collection handle stored as a collection item's value.
    fn free_collection_of(&mut self, location: Location) {
        let header = *self.header(location);
        if Kind::from_u8(header.kind) == Kind::String {
            return;
        }
        let handle = collection_handle(self.item_value(location));
        let collection = self.collections[handle as usize]
            .take()
            .expect("a collection item owns its handle");
        self.collection_bytes -= collection.memory_bytes();
        self.charge(
            self.segment(slot_of(location)).tenant,
            collection.memory_bytes(),
            false,
        );
        self.free_collections.push(handle);
    }

    /// Removes the key at `location` entirely.
    fn remove_item(&mut self, db: usize, hash: u64, location: Location) {
        self.free_collection_of(location);
        self.remove_location(db, hash, location);
        self.kill_item(location);
    }

    /// Finds a live, unexpired key. Expired keys are deleted on the way (lazy expiry).
    fn lookup(&mut self, db: usize, key: &[u8], now_ms: u64) -> Option<(u64, Location)> {
        let hash = hash_key(key);
        let location = self.find(db, hash, key)?;
        let expire_at_ms = self.header(location).expire_at_ms;
        if expire_at_ms != 0 && expire_at_ms <= now_ms {
            self.remove_item(db, hash, location);
            self.stats.expired_keys += 1;
            self.sync_accounting();
            return None;
        }
        Some((hash, location))
    }

    /// Records an access for LRU/LFU (Redis's logarithmic counter with decay by idle minutes).
    fn touch(&mut self, location: Location, now_ms: u64) {
        let clock = self.access_clock_s(now_ms);
        let random: f64 = self.rng.gen();
        let header = self.header_mut(location);
        let idle_minutes = clock.saturating_sub(header.access_s) / 60;
        let mut counter = header
            .lfu_counter
            .saturating_sub(idle_minutes.min(255) as u8);
        if counter < 255 {
            let base = counter.saturating_sub(5) as f64;
            if random < 1.0 / (base * 10.0 + 1.0) {
                counter += 1;
            }
        }
        header.lfu_counter = counter;
        header.access_s = clock;
    }

    fn info_of(&self, location: Location) -> ItemInfo {
        let header = self.header(location);
        ItemInfo {
            kind: Kind::from_u8(header.kind),
            expire_at_ms: header.expire_at_ms,
            cas: header.cas,
            client_flags: header.client_flags,
            access_s: header.access_s,
            lfu_counter: header.lfu_counter,
        }
    }

    // ----- generic key operations ----------------------------------------------------------------

    /// Looks a key up without counting a hit or miss or touching its access time.
    pub fn peek(&mut self, db: usize, key: &[u8], now_ms: u64) -> Option<ItemInfo> {
        let (_, location) = self.lookup(db, key, now_ms)?;
        Some(self.info_of(location))
    }

    /// Looks a key up as a read: counts a hit or miss and records the access.
    pub fn access(&mut self, db: usize, key: &[u8], now_ms: u64) -> Option<ItemInfo> {
        self.access_location(db, key, now_ms)
            .map(|location| self.info_of(location))
    }

    /// `access`, returning where the item is so the caller need not look it up again.
    fn access_location(&mut self, db: usize, key: &[u8], now_ms: u64) -> Option<Location> {
        match self.lookup(db, key, now_ms) {
            Some((_, location)) => {
                self.stats.keyspace_hits += 1;
                self.tenant_stats_mut(Address::of(db).tenant).hits += 1;
                self.touch(location, now_ms);
                Some(location)
            }
            None => {
                self.stats.keyspace_misses += 1;
                self.tenant_stats_mut(Address::of(db).tenant).misses += 1;
                None
            }
        }
    }

    pub fn exists(&mut self, db: usize, key: &[u8], now_ms: u64) -> bool {
        self.lookup(db, key, now_ms).is_some()
    }

    /// Deletes a key; true when it existed.
    pub fn remove(&mut self, db: usize, key: &[u8], now_ms: u64) -> bool {
        let Some((hash, location)) = self.lookup(db, key, now_ms) else {
            return false;
        };
        self.remove_item(db, hash, location);
        self.sync_accounting();
        true
    }

    /// Sets or clears (`None`) a key's expiry; false when the key does not exist. An expiry in the past
    /// deletes the key, as Redis does.
    pub fn set_expire_at(
        &mut self,
        db: usize,
        key: &[u8],
        now_ms: u64,
        at_ms: Option<u64>,
    ) -> bool {
        let Some((hash, location)) = self.lookup(db, key, now_ms) else {
            return false;
        };
        match at_ms {
            Some(at_ms) if at_ms <= now_ms => {
                self.remove_item(db, hash, location);
                self.sync_accounting();
            }
            _ => {
                let cas = self.next_cas();
                let header = self.header_mut(location);
                let was_volatile = header.expire_at_ms != 0;
                header.expire_at_ms = at_ms.unwrap_or(0);
                header.cas = cas;
                let volatile_keys = &mut self.db_at_mut(db).volatile_keys;
                match (was_volatile, at_ms.is_some()) {
                    (false, true) => *volatile_keys += 1,
                    (true, false) => *volatile_keys -= 1,
                    _ => {}
                }
            }
        }
        true
    }

    // ----- strings -------------------------------------------------------------------------------

    /// Reads a string value (counting the hit/miss). Err when the key holds another type.
    pub fn get_string(
        &mut self,
        db: usize,
        key: &[u8],
        now_ms: u64,
    ) -> Result<Option<(&[u8], ItemInfo)>, WrongType> {
        let Some(location) = self.access_location(db, key, now_ms) else {
            return Ok(None);
        };
        let info = self.info_of(location);
        if info.kind != Kind::String {
            return Err(WrongType);
        }
        Ok(Some((self.item_value(location), info)))
    }

    /// The length of a string value, without counting a hit or recording an access (a reply is sized
    /// before it is built). None when missing or not a string.
    pub fn peek_string_len(&mut self, db: usize, key: &[u8], now_ms: u64) -> Option<usize> {
        let (_, location) = self.lookup(db, key, now_ms)?;
        (self.info_of(location).kind == Kind::String).then(|| self.item_value(location).len())
    }

    /// Stores a string under `key`, replacing any value of any type. Returns the new CAS.
    pub fn set_string(
        &mut self,
        db: usize,
        key: &[u8],
        value: &[u8],
        expire_at_ms: u64,
        client_flags: u32,
        now_ms: u64,
    ) -> u64 {
        let mut header = new_header(Kind::String, db, key.len(), value.len());
        header.expire_at_ms = expire_at_ms;
        header.client_flags = client_flags;
        self.put_item(db, key, header, value, now_ms)
    }

    /// Writes an item for `key`, replacing the old one (and freeing an old collection).
    fn put_item(
        &mut self,
        db: usize,
        key: &[u8],
        mut header: ItemHeader,
        value: &[u8],
        now_ms: u64,
    ) -> u64 {
        let hash = hash_key(key);
        let cas = self.next_cas();
        header.cas = cas;
        header.access_s = self.access_clock_s(now_ms);
        header.lfu_counter = 5; // Redis's LFU_INIT_VAL: new keys are not evicted first.
        let old = self.find(db, hash, key);
        if let Some(old) = old {
            self.free_collection_of(old);
        }
        let new = self.append(Address::of(db).tenant, &header, key, value);
        match old {
            Some(old) => {
                self.replace_location(db, hash, old, new);
                self.kill_item(old);
            }
            None => self.insert_location(db, hash, new),
        }
        self.sync_accounting();
        cas
    }

    // ----- collections ---------------------------------------------------------------------------

    fn collection_location<T: CollectionType>(
        &mut self,
        db: usize,
        key: &[u8],
        now_ms: u64,
    ) -> Result<Option<(u64, Location)>, WrongType> {
        let Some((hash, location)) = self.lookup(db, key, now_ms) else {
            return Ok(None);
        };
        if Kind::from_u8(self.header(location).kind) != T::KIND {
            return Err(WrongType);
        }
        Ok(Some((hash, location)))
    }

    /// Reads a collection of type `T` (counting the hit/miss).
    pub fn read<T: CollectionType>(
        &mut self,
        db: usize,
        key: &[u8],
        now_ms: u64,
    ) -> Result<Option<&T>, WrongType> {
        let Some(location) = self.access_location(db, key, now_ms) else {
            return Ok(None);
        };
        if Kind::from_u8(self.header(location).kind) != T::KIND {
            return Err(WrongType);
        }
        let handle = collection_handle(self.item_value(location));
        let collection = self.collections[handle as usize]
            .as_ref()
            .expect("a collection item owns its handle");
        Ok(Some(T::from_ref(collection).expect("kind matches")))
    }

    /// Reads a collection of type `T` without counting a hit or miss or touching its access time (the
    /// checks write commands make before deciding whether they change anything, as Redis's
    /// lookupKeyWrite does not count either).
    pub fn peek_collection<T: CollectionType>(
        &mut self,
        db: usize,
        key: &[u8],
        now_ms: u64,
    ) -> Result<Option<&T>, WrongType> {
        let Some((_, location)) = self.collection_location::<T>(db, key, now_ms)? else {
            return Ok(None);
        };
        let handle = collection_handle(self.item_value(location));
        let collection = self.collections[handle as usize]
            .as_ref()
            .expect("a collection item owns its handle");
        Ok(Some(T::from_ref(collection).expect("kind matches")))
    }

    /// Runs `update` on the collection at `key`, creating an empty one first when `create` is set and
    /// the key is absent. Deletes the key if the collection ends up empty. Ok(None): absent, not created.
    pub fn update<T: CollectionType, R>(
        &mut self,
        db: usize,
        key: &[u8],
        now_ms: u64,
        create: bool,
        update: impl FnOnce(&mut T) -> R,
    ) -> Result<Option<R>, WrongType> {
        let (hash, location) = match self.collection_location::<T>(db, key, now_ms)? {
            Some(found) => found,
            None if create => {
                self.put_collection(db, key, T::default().wrap(), 0, now_ms);
                self.lookup(db, key, now_ms).expect("just created")
            }
            None => return Ok(None),
        };
        let handle = collection_handle(self.item_value(location));
        let collection = self.collections[handle as usize]
            .as_mut()
            .expect("a collection item owns its handle");
        let bytes_before = collection.memory_bytes();
        let result = update(T::from_mut(collection).expect("kind matches"));
        let bytes_after = collection.memory_bytes();
        let now_empty = collection.is_empty();
        self.collection_bytes = self.collection_bytes + bytes_after - bytes_before;
        let tenant = self.segment(slot_of(location)).tenant;
        self.charge(
            tenant,
            bytes_after.abs_diff(bytes_before),
            bytes_after > bytes_before,
        );
        if now_empty {
            self.remove_item(db, hash, location);
        } else {
            let cas = self.next_cas();
            self.header_mut(location).cas = cas;
            self.touch(location, now_ms);
        }
        self.sync_accounting();
        Ok(Some(result))
    }

    /// Stores a collection under `key`, replacing any old value.
    pub fn put_collection(
        &mut self,
        db: usize,
        key: &[u8],
        collection: Collection,
        expire_at_ms: u64,
        now_ms: u64,
    ) {
        assert!(!collection.is_empty() || collection.memory_bytes() < 4096);
        let kind = collection.kind();
        self.collection_bytes += collection.memory_bytes();
        self.charge(Address::of(db).tenant, collection.memory_bytes(), true);
        let handle = match self.free_collections.pop() {
            Some(handle) => {
                self.collections[handle as usize] = Some(collection);
                handle
            }
            None => {
                self.collections.push(Some(collection));
                (self.collections.len() - 1) as u32
            }
        };
        let value = handle.to_le_bytes();
        let mut header = new_header(kind, db, key.len(), value.len());
        header.expire_at_ms = expire_at_ms;
        self.put_item(db, key, header, &value, now_ms);
    }

    // ----- whole values --------------------------------------------------------------------------

    /// A copy of the value at `key` with its expiry (COPY, and RENAME/MOVE across shards).
    pub fn clone_value(&mut self, db: usize, key: &[u8], now_ms: u64) -> Option<OwnedValue> {
        let (_, location) = self.lookup(db, key, now_ms)?;
        let header = *self.header(location);
        let data = match Kind::from_u8(header.kind) {
            Kind::String => OwnedData::String {
                bytes: self.item_value(location).to_vec(),
                client_flags: header.client_flags,
            },
            _ => {
                let handle = collection_handle(self.item_value(location));
                OwnedData::Collection(
                    self.collections[handle as usize]
                        .clone()
                        .expect("a collection item owns its handle"),
                )
            }
        };
        Some(OwnedValue {
            data,
            expire_at_ms: header.expire_at_ms,
        })
    }

    /// Removes `key` and returns its value.
    pub fn take_value(&mut self, db: usize, key: &[u8], now_ms: u64) -> Option<OwnedValue> {
        let value = self.clone_value(db, key, now_ms)?;
        self.remove(db, key, now_ms);
        Some(value)
    }

    /// Stores a whole value under `key`, replacing any old one.
    pub fn put_value(&mut self, db: usize, key: &[u8], value: OwnedValue, now_ms: u64) {
        match value.data {
            OwnedData::String {
                bytes,
                client_flags,
            } => {
                self.set_string(db, key, &bytes, value.expire_at_ms, client_flags, now_ms);
            }
            OwnedData::Collection(collection) => {
                self.put_collection(db, key, collection, value.expire_at_ms, now_ms)
            }
        }
    }

    /// The collection's encoding name for OBJECT ENCODING.
    pub fn encoding(&mut self, db: usize, key: &[u8], now_ms: u64) -> Option<&'static str> {
        let (_, location) = self.lookup(db, key, now_ms)?;
        let header = *self.header(location);
        Some(match Kind::from_u8(header.kind) {
            Kind::String => {
                let value = self.item_value(location);
                if value.len() <= 20 && crate::parse_i64_strict(value).is_some() {
                    "int"
                } else if value.len() <= 44 {
                    "embstr"
                } else {
                    "raw"
                }
            }
            _ => {
                let handle = collection_handle(self.item_value(location));
                self.collections[handle as usize]
                    .as_ref()
                    .expect("a collection item owns its handle")
                    .encoding()
            }
        })
    }

    /// Bytes the key and its value take (MEMORY USAGE).
    pub fn memory_usage(&mut self, db: usize, key: &[u8], now_ms: u64) -> Option<usize> {
        let (_, location) = self.lookup(db, key, now_ms)?;
        let header = *self.header(location);
        let mut bytes = header.item_bytes() + std::mem::size_of::<Location>() + 1;
        if Kind::from_u8(header.kind) != Kind::String {
            let handle = collection_handle(self.item_value(location));
            bytes += self.collections[handle as usize]
                .as_ref()
                .expect("a collection item owns its handle")
                .memory_bytes();
        }
        Some(bytes)
    }

    // ----- whole databases -----------------------------------------------------------------------

    /// Deletes every key of one database.
    pub fn flush_db(&mut self, db: usize) {
        if self.db_at(db).is_none() {
            return;
        }
        let target = self.db_at_mut(db);
        let locations: Vec<Location> = target.index.iter().copied().collect();
        target.index = HashTable::new();
        for location in locations {
            self.free_collection_of(location);
            self.kill_item(location);
        }
        self.sync_accounting();
    }

    /// Exchanges the contents of two databases (SWAPDB). Items record their database (scans and expiry
    /// read it), so every moved item's header is rewritten. Blocked clients of either database retry.
    pub fn swap_dbs(&mut self, first: usize, second: usize) {
        if first == second {
            return;
        }
        let namespace = Address::of(first).namespace;
        assert_eq!(namespace, Address::of(second).namespace);
        self.db_at_mut(first);
        let space = &mut self.spaces[namespace as usize];
        space.swap(Address::of(first).db, Address::of(second).db);
        for db in [first, second] {
            let locations: Vec<Location> = self.db_at_mut(db).index.iter().copied().collect();
            for location in locations {
                self.header_mut(location).db = Address::of(db).db as u8;
            }
        }
        let spaces = [space_id(first), space_id(second)];
        for ((space, _), waiters) in &self.waiters {
            if spaces.contains(space) {
                waiters.iter().for_each(|waiter| waiter.notify_one());
            }
        }
    }

    /// Calls `visit` with each live key of `db` from the cursor on, at most `count` keys; returns the
    /// next cursor (0 when done). Cursor = (segment sequence << 22) | (offset / 8).
    pub fn scan(
        &mut self,
        db: usize,
        cursor: u64,
        count: usize,
        now_ms: u64,
        mut visit: impl FnMut(&[u8], Kind),
    ) -> u64 {
        self.scan_items(db, cursor, count, now_ms, |key, kind, _| visit(key, kind))
    }

    /// `scan` that also lends each item's value bytes (a string's bytes; a collection's handle).
    pub fn scan_items(
        &mut self,
        db: usize,
        cursor: u64,
        count: usize,
        now_ms: u64,
        mut visit: impl FnMut(&[u8], Kind, &[u8]),
    ) -> u64 {
        let mut sequence = cursor >> 22;
        let mut offset = ((cursor & ((1 << 22) - 1)) * 8) as u32;
        let mut visited = 0;
        let space = space_id(db);
        loop {
            let Some((&found_sequence, &slot)) = self.by_sequence.range(sequence..).next() else {
                return 0;
            };
            if found_sequence != sequence {
                sequence = found_sequence;
                offset = 0;
            }
            let segment = self.segment(slot);
            let start = segment.item_boundary_at_or_after(offset);
            offset = start.unwrap_or(0);
            let mut next = start.is_some();
            while next {
                let header = segment.header(offset);
                let expired = header.expire_at_ms != 0 && header.expire_at_ms <= now_ms;
                if header.alive == 1 && space_id(space_of(header)) == space && !expired {
                    visit(
                        segment.key(offset),
                        Kind::from_u8(header.kind),
                        segment.value(offset),
                    );
                    visited += 1;
                }
                match segment.next_offset(offset) {
                    Some(following) => offset = following,
                    None => next = false,
                }
                if visited >= count && next {
                    return (sequence << 22) | (offset as u64 / 8);
                }
            }
            sequence += 1;
            offset = 0;
            if visited >= count {
                return match self.by_sequence.range(sequence..).next() {
                    Some((&following, _)) => following << 22,
                    None => 0,
                };
            }
        }
    }

    /// A random live key of `db`, if any.
    pub fn random_key(&mut self, db: usize, now_ms: u64) -> Option<Vec<u8>> {
        for _ in 0..16 {
            if self.key_count(db) == 0 {
                return None;
            }
            let Some(location) = self.sample_locations(1, false).first().copied() else {
                continue;
            };
            let header = *self.header(location);
            if space_id(space_of(&header)) != space_id(db) {
                continue;
            }
            let key = self.item_key(location).to_vec();
            if self.lookup(db, &key, now_ms).is_some() {
                return Some(key);
            }
        }
        // Sampling missed (other databases dominate): walk instead.
        let mut found = None;
        self.scan(db, 0, 1, now_ms, |key, _| found = Some(key.to_vec()));
        found
    }

    /// Up to `count` live items from a random segment (only items with an expiry when `volatile_only`).
    fn sample_locations(&mut self, count: usize, volatile_only: bool) -> Vec<Location> {
        let mut sampled = Vec::with_capacity(count);
        if self.by_sequence.is_empty() {
            return sampled;
        }
        let pick = self.rng.gen_range(0..self.by_sequence.len());
        let (_, &slot) = self.by_sequence.iter().nth(pick).expect("pick < len");
        let segment = self.segment(slot);
        let mut candidates = Vec::new();
        let mut offset = segment.first_offset();
        while let Some(at) = offset {
            let header = segment.header(at);
            if header.alive == 1 && (!volatile_only || header.expire_at_ms != 0) {
                candidates.push(location(slot, at));
            }
            offset = segment.next_offset(at);
        }
        for _ in 0..count.min(candidates.len()) {
            let index = self.rng.gen_range(0..candidates.len());
            sampled.push(candidates.swap_remove(index));
        }
        sampled
    }

    // ----- housekeeping: expiry, eviction, compaction --------------------------------------------

    /// Checks up to `items_max` items for expiry, resuming where the last cycle stopped; returns how many
    /// keys it deleted.
    pub fn expire_cycle(&mut self, now_ms: u64, items_max: usize) -> usize {
        if self.spaces.iter().flatten().all(|db| db.volatile_keys == 0) {
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
        for (db, location) in expired {
            let hash = hash_key(self.item_key(location));
            self.remove_item(db, hash, location);
        }
        self.stats.expired_keys += count as u64;
        self.sync_accounting();
        count
    }

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
        let db = space_of(self.header(victim));
        let hash = hash_key(self.item_key(victim));
        let tenant = self.segment(slot_of(victim)).tenant;
        self.remove_item(db, hash, victim);
        self.stats.evicted_keys += 1;
        self.sync_accounting();
        let freed = before.saturating_sub(self.used_bytes());
        let stats = self.tenant_stats_mut(tenant);
        stats.evicted_keys += 1;
        stats.evicted_bytes += freed as u64;
        Some(freed)
    }

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
    fn move_item(&mut self, old: Location, header: ItemHeader) {
        let mut scratch = std::mem::take(&mut self.compaction_scratch);
        scratch.clear();
        scratch.extend_from_slice(self.item_key(old));
        scratch.extend_from_slice(self.item_value(old));
        let (key, value) = scratch.split_at(header.key_len as usize);
        let tenant = self.segment(slot_of(old)).tenant;
        let new = self.append(tenant, &header, key, value);
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

    // ----- releasing memory: the fast and careful paths ---------------------------------------------

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

    /// Takes the emptied draining segment out of the books and hands it to the caller to unmap.
    fn finish_draining(&mut self, slot: u32) -> Segment {
        self.draining_slot = None;
        let segment = self.detach_segment(slot);
        self.forget_segment(&segment);
        segment
    }

    /// FCRA: one bounded slice of evicting every item of one segment of `tenant`, in slot order with no
    /// regard for recency; the emptied segment is detached for the caller to unmap outside the lock.
    pub fn fast_release_step(&mut self, tenant: TenantId) -> ReclaimStep {
        self.release_step(tenant, None)
    }

    /// SCRA: one bounded slice of emptying a cold segment of `tenant`: expired items and items the LRU or
    /// LFU order would evict first go, items hot by both survive and are re-appended (see
    /// `plan_careful_release`).
    pub fn careful_release_step(&mut self, tenant: TenantId, now_ms: u64) -> ReclaimStep {
        self.release_step(tenant, Some(now_ms))
    }

    /// One slice of a release: plans one (careful when `careful_now_ms` is given) unless a slice before
    /// left one unfinished, whichever path planned it, then works through at most
    /// `RELEASE_ITEMS_PER_HOLD` of its items.
    fn release_step(&mut self, tenant: TenantId, careful_now_ms: Option<u64>) -> ReclaimStep {
        let before = self.releasable_bytes();
        if self.release_plan.is_none() {
            let plan = match careful_now_ms {
                Some(now_ms) => self.plan_careful_release(tenant, now_ms),
                None => self.plan_fast_release(tenant),
            };
            let Some(plan) = plan else {
                return ReclaimStep::nothing();
            };
            self.draining_slot = Some(plan.slot);
            self.release_plan = Some(plan);
        }
        let mut plan = self.release_plan.take().expect("planned above");
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
                self.evict_at(at);
                objects += 1;
            } else {
                let header = *self.header(at);
                self.move_item(at, header);
            }
        }
        plan.next = end;
        let detached = if plan.next == plan.items.len() {
            debug_assert_eq!(self.segment(plan.slot).sequence, plan.sequence);
            Some(self.finish_draining(plan.slot))
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
        self.stop_appending_to(slot);
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
        self.live_offsets(slot)
            .into_iter()
            .map(|offset| {
                let header = segment.header(offset);
                let expired = header.expire_at_ms != 0 && header.expire_at_ms <= now_ms;
                let evict = expired || !hotness.is_hot(header.access_s, header.lfu_counter);
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

    // ----- blocking operations -------------------------------------------------------------------

    /// Registers a blocked client's wake-up for `key`.
    pub fn add_waiter(&mut self, db: usize, key: &[u8], notify: Arc<tokio::sync::Notify>) {
        self.waiters
            .entry((space_id(db), key.into()))
            .or_default()
            .push(notify);
    }

    /// Drops a blocked client's registration (it timed out or was served). When it was first in line,
    /// the next client is woken: the key may still hold something for it (one wake-up per push only
    /// reaches the head of the line, which keeps serving first-come first-served).
    pub fn remove_waiter(&mut self, db: usize, key: &[u8], notify: &Arc<tokio::sync::Notify>) {
        let map_key = (space_id(db), Box::<[u8]>::from(key));
        if let Some(list) = self.waiters.get_mut(&map_key) {
            let was_head = list.first().is_some_and(|head| Arc::ptr_eq(head, notify));
            list.retain(|waiter| !Arc::ptr_eq(waiter, notify));
            match list.first() {
                None => {
                    self.waiters.remove(&map_key);
                }
                Some(next) if was_head => next.notify_one(),
                Some(_) => {}
            }
        }
    }

    /// Wakes the longest-waiting client blocked on `key` (a push made it ready). Clients wait in line:
    /// the next one is woken when the head leaves (`remove_waiter`), so they are served in arrival order.
    pub fn wake_waiters(&mut self, db: usize, key: &[u8]) {
        if self.waiters.is_empty() {
            return;
        }
        if let Some(head) = self
            .waiters
            .get(&(space_id(db), Box::<[u8]>::from(key)))
            .and_then(|list| list.first())
        {
            head.notify_one();
        }
    }
}

/// A header for an item of `kind` in the space of `address`.
fn new_header(kind: Kind, address: usize, key_len: usize, value_len: usize) -> ItemHeader {
    let address = Address::of(address);
    let mut header = ItemHeader::new(kind as u8, address.db as u8, key_len, value_len);
    header.namespace = address.namespace;
    header
}

fn collection_handle(value: &[u8]) -> u32 {
    u32::from_le_bytes(
        value
            .try_into()
            .expect("a collection item holds a 4-byte handle"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{HashValue, ListValue};

    fn shard() -> Shard {
        Shard::new(
            0,
            ShardConfig {
                databases: 16,
                segment_bytes: 64 << 10,
                epoch_ms: 0,
            },
            Arc::new(MemoryCounters::default()),
        )
    }

    #[test]
    fn volatile_stats_count_keys_with_expiry() {
        let mut shard = shard();
        shard.set_string(0, b"plain", b"v", 0, 0, 1000);
        shard.set_string(0, b"a", b"v", 5000, 0, 1000);
        shard.set_string(0, b"b", b"v", 3000, 0, 1000);
        shard.set_string(1, b"other", b"v", 9000, 0, 1000);
        assert_eq!(shard.volatile_stats(0).0, 2);
        assert_eq!(shard.volatile_stats(1).0, 1);
        assert_eq!(shard.volatile_stats(2), (0, 0));
        shard.set_expire_at(0, b"plain", 1000, Some(7000));
        shard.set_expire_at(0, b"a", 1000, None);
        shard.set_string(0, b"b", b"w", 0, 0, 1000);
        assert_eq!(
            shard.volatile_stats(0).0,
            1,
            "plain gained a TTL, a and b lost theirs"
        );
        shard.expire_cycle(1000, 100);
        assert_eq!(shard.volatile_stats(0), (1, (6000 + 8000) / 2));
        shard.flush_db(1);
        assert_eq!(shard.volatile_stats(1).0, 0);
    }

    #[test]
    fn strings_overwrite_and_delete() {
        let mut shard = shard();
        shard.set_string(0, b"k", b"v1", 0, 7, 1000);
        shard.set_string(0, b"k", b"v2", 0, 7, 1000);
        let (value, info) = shard.get_string(0, b"k", 1000).unwrap().unwrap();
        assert_eq!(value, b"v2");
        assert_eq!(info.client_flags, 7);
        assert_eq!(shard.key_count(0), 1);
        assert!(shard.get_string(1, b"k", 1000).unwrap().is_none());
        assert!(shard.remove(0, b"k", 1000));
        assert!(!shard.remove(0, b"k", 1000));
        assert_eq!(
            shard.mapped_bytes(),
            64 << 10,
            "only the active segment stays"
        );
    }

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
    }

    #[test]
    fn collections_update_and_wrongtype() {
        let mut shard = shard();
        let added = shard
            .update::<HashValue, _>(0, b"h", 0, true, |hash| hash.insert(b"f", b"v"))
            .unwrap();
        assert_eq!(added, Some(true));
        assert!(shard.get_string(0, b"h", 0).is_err());
        assert!(shard
            .update::<ListValue, _>(0, b"h", 0, true, |_| ())
            .is_err());
        let removed = shard
            .update::<HashValue, _>(0, b"h", 0, false, |hash| hash.remove(b"f"))
            .unwrap();
        assert_eq!(removed, Some(true));
        assert!(
            !shard.exists(0, b"h", 0),
            "an emptied collection is deleted"
        );
        assert_eq!(shard.collection_bytes, 0);
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
    }

    #[test]
    fn scan_visits_every_key_once() {
        let mut shard = shard();
        for index in 0..500u32 {
            shard.set_string(0, format!("k{index}").as_bytes(), &[0; 300], 0, 0, 0);
        }
        shard.set_string(1, b"other-db", b"x", 0, 0, 0);
        let mut seen = Vec::new();
        let mut cursor = 0;
        loop {
            cursor = shard.scan(0, cursor, 7, 0, |key, _| seen.push(key.to_vec()));
            if cursor == 0 {
                break;
            }
        }
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 500);
    }

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
        assert!(shard.spare_bytes() <= SPARE_SEGMENTS_MAX * (64 << 10));
        let mapped_before = shard.mapped_bytes();
        let spare = shard.spare_bytes();
        assert_eq!(shard.release_spare_segments(), spare);
        assert_eq!(shard.spare_bytes(), 0);
        assert_eq!(shard.mapped_bytes(), mapped_before - spare);
        for index in 0..12u32 {
            let (found, info) = shard
                .get_string(0, format!("k{index}").as_bytes(), 0)
                .unwrap()
                .unwrap();
            assert_eq!((found.len(), info.client_flags), (value.len(), 7));
        }
    }

    #[test]
    fn scan_with_forged_cursors_returns_only_real_keys() {
        let mut shard = shard();
        let mut keys = Vec::new();
        for index in 0..300u32 {
            // values of 0x01 bytes read as live headers of db 1 claiming huge keys, should a forged offset
            // land inside them
            let key = format!("key{index}").into_bytes();
            shard.set_string(1, &key, &[0x01; 200], 0, 0, 0);
            keys.push(key);
        }
        for cursor in (0..4096u64)
            .map(|low| (1 << 22) | low)
            .chain([u64::MAX >> 6, 3 << 22])
        {
            shard.scan(1, cursor, 5, 0, |key, _| {
                assert!(keys.iter().any(|real| real.as_slice() == key), "{key:?}");
            });
        }
    }

    #[test]
    fn swap_dbs_moves_keys_and_headers() {
        let mut shard = shard();
        shard.set_string(0, b"a", b"1", 0, 0, 0);
        shard.set_string(2, b"b", b"2", 0, 0, 0);
        shard.swap_dbs(0, 2);
        assert!(shard.exists(2, b"a", 0) && !shard.exists(0, b"a", 0));
        assert!(shard.exists(0, b"b", 0));
        let mut seen = Vec::new();
        shard.scan(2, 0, 10, 0, |key, _| seen.push(key.to_vec()));
        assert_eq!(
            seen,
            vec![b"a".to_vec()],
            "scan filters by the rewritten header"
        );
    }

    #[test]
    fn waiters_are_woken_in_line() {
        fn was_notified(notify: &Arc<tokio::sync::Notify>) -> bool {
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable()
        }
        let mut shard = shard();
        let (first, second) = (
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(tokio::sync::Notify::new()),
        );
        shard.add_waiter(0, b"q", first.clone());
        shard.add_waiter(0, b"q", second.clone());
        shard.wake_waiters(0, b"q");
        assert!(was_notified(&first));
        assert!(!was_notified(&second));
        shard.remove_waiter(0, b"q", &first);
        assert!(was_notified(&second));
        shard.remove_waiter(0, b"q", &second);
        shard.wake_waiters(0, b"q");
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
    }
}
