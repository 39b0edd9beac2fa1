//! fallow's storage engine. A `Store` is a fixed set of shards, each the single owner of the keys that
//! hash to it. A command locks the shards of its keys (in ascending order, so multi-key commands are atomic
//! and never deadlock) and works on them directly.
//!
//! Why locks instead of shard threads and messages (DESIGN.md "Shards and threads"): on this machine a
//! cross-thread wake-up costs tens of microseconds while an uncontended lock costs tens of nanoseconds, and
//! every connection thread can reach every key. A shard is still one owner at a time, and the shard API is
//! message-shaped (key + operation), so shards can later live on other nodes.
pub mod glob;
pub mod memory;
pub mod pool;
pub mod shard;
pub mod types;

pub use memory::MemoryCounters;
pub use pool::{
    keyspace, Address, PathStats, ReclaimPath, ReclaimReport, ReclaimStats, TenantId, TenantKind,
    TenantSnapshot, TenantSpec,
};
pub use shard::{EvictionPolicy, ItemInfo, OwnedData, OwnedValue, Shard, ShardConfig, Waiter};
pub use types::{Collection, Kind};

use memory::segment::Segment;
use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The key holds a value of another type than the command works on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrongType;

/// The write cannot be done within `maxmemory`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfMemory;

const HASH_SEED: u64 = 0x6661_6c6c_6f77_2121;
/// Released segments whose address range a reclaim keeps for reuse (their pages are already gone).
const RETAINED_RANGES_AFTER_RECLAIM: usize = 64;
/// A reclaim worker yields its core this often, between lock holds, so that a server thread waiting for a
/// CPU runs. Measured on 2 vCPUs, 8 GiB fast release with a GET probe (medians of 3): no yield 76 ms, GET
/// p99 3.2 ms (4.6 ms at 4 GiB); every 1 ms 102 ms, p99 1.2 ms (≤ 1.9 ms); every 0.2 ms 130 ms, p99 0.56 ms.
const RECLAIM_YIELD_INTERVAL: std::time::Duration = std::time::Duration::from_millis(1);

/// The hash of a key, used both to pick its shard and inside the shard's index.
pub fn hash_key(key: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(HASH_SEED).hash_one(key)
}

/// Parses a decimal i64 with Redis's strictness (no spaces, no '+', no leading zeros).
pub fn parse_i64_strict(bytes: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let value: i64 = text.parse().ok()?;
    (value.to_string() == text).then_some(value)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}

#[derive(Clone, Debug)]
pub struct StoreConfig {
    pub shards: usize,
    pub databases: usize,
    pub segment_bytes: usize,
    /// 0 = unlimited.
    pub maxmemory_bytes: usize,
    pub policy: EvictionPolicy,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            shards: 16,
            databases: 16,
            segment_bytes: 2 << 20,
            maxmemory_bytes: 0,
            policy: EvictionPolicy::NoEviction,
        }
    }
}

pub struct Store {
    shards: Box<[Mutex<Shard>]>,
    pub memory: Arc<MemoryCounters>,
    maxmemory_bytes: AtomicUsize,
    policy: AtomicU8,
    databases: usize,
    pub epoch_ms: u64,
    /// Shard where the next reclaim starts, so successive reclaims spread over the shards.
    reclaim_cursor: AtomicUsize,
}

impl Store {
    pub fn new(config: &StoreConfig) -> Store {
        assert!(config.shards >= 1 && config.shards <= 64);
        let memory = Arc::new(MemoryCounters::default());
        let epoch_ms = now_ms();
        let shard_config = ShardConfig {
            databases: config.databases,
            segment_bytes: config.segment_bytes,
            epoch_ms,
        };
        let shards = (0..config.shards)
            .map(|id| Mutex::new(Shard::new(id, shard_config.clone(), memory.clone())))
            .collect();
        let store = Store {
            shards,
            memory,
            maxmemory_bytes: AtomicUsize::new(config.maxmemory_bytes),
            policy: AtomicU8::new(0),
            databases: config.databases,
            epoch_ms,
            reclaim_cursor: AtomicUsize::new(0),
        };
        store.set_policy(config.policy);
        store
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    pub fn databases(&self) -> usize {
        self.databases
    }

    /// The shard that owns `key`. Uses hash bits the index does not use for bucket choice.
    pub fn shard_index(&self, key: &[u8]) -> usize {
        ((hash_key(key) >> 40) as usize & 0xffff) % self.shards.len()
    }

    pub fn lock(&self, index: usize) -> MutexGuard<'_, Shard> {
        self.shards[index].lock()
    }

    /// Locks the shards of `keys` in ascending order.
    pub fn lock_keys<'a, K: AsRef<[u8]>>(
        &'a self,
        keys: impl IntoIterator<Item = K>,
    ) -> Guards<'a> {
        let mut indices: SmallVec<[usize; 8]> = keys
            .into_iter()
            .map(|key| self.shard_index(key.as_ref()))
            .collect();
        indices.sort_unstable();
        indices.dedup();
        self.lock_indices(&indices)
    }

    /// Locks the shard of one key.
    pub fn lock_key(&self, key: &[u8]) -> Guards<'_> {
        let index = self.shard_index(key);
        let mut guards = SmallVec::new();
        guards.push((index, self.shards[index].lock()));
        Guards {
            store: self,
            guards,
        }
    }

    pub fn lock_all(&self) -> Guards<'_> {
        let indices: Vec<usize> = (0..self.shards.len()).collect();
        self.lock_indices(&indices)
    }

    fn lock_indices(&self, sorted_indices: &[usize]) -> Guards<'_> {
        debug_assert!(sorted_indices.windows(2).all(|pair| pair[0] < pair[1]));
        Guards {
            store: self,
            guards: sorted_indices
                .iter()
                .map(|&index| (index, self.shards[index].lock()))
                .collect(),
        }
    }

    pub fn used_bytes(&self) -> usize {
        self.memory.used_bytes.load(Ordering::Relaxed)
    }

    pub fn maxmemory_bytes(&self) -> usize {
        self.maxmemory_bytes.load(Ordering::Relaxed)
    }

    pub fn set_maxmemory_bytes(&self, bytes: usize) {
        self.maxmemory_bytes.store(bytes, Ordering::Relaxed);
    }

    pub fn policy(&self) -> EvictionPolicy {
        EvictionPolicy::ALL[self.policy.load(Ordering::Relaxed) as usize]
    }

    pub fn set_policy(&self, policy: EvictionPolicy) {
        let index = EvictionPolicy::ALL
            .iter()
            .position(|candidate| *candidate == policy)
            .expect("policy listed in ALL");
        self.policy.store(index as u8, Ordering::Relaxed);
    }

    /// True when a write must first make room: over the elastic pool limit (resident bytes) or, in fixed
    /// mode, over maxmemory (used bytes, as Redis counts).
    pub fn over_maxmemory(&self) -> bool {
        self.would_exceed_maxmemory(0)
    }

    /// True when `additional_bytes` more would go over the limit: the elastic pool limit (on resident
    /// bytes) or, in fixed mode, maxmemory (on used bytes). A write that knows its growth asks this before
    /// allocating, so one command cannot carry memory far past the cap.
    pub fn would_exceed_maxmemory(&self, additional_bytes: usize) -> bool {
        let (limit, usage) = self.memory_limit_and_usage();
        limit != 0 && usage.saturating_add(additional_bytes) > limit
    }

    /// True when `additional_bytes` would not fit even in an empty store: evicting cannot help.
    pub fn exceeds_memory_limit_alone(&self, additional_bytes: usize) -> bool {
        let (limit, _) = self.memory_limit_and_usage();
        limit != 0 && additional_bytes > limit
    }

    /// (limit, usage) the cap compares: (pool limit, resident) in elastic mode, (maxmemory, used) in
    /// fixed mode; limit 0 = none.
    fn memory_limit_and_usage(&self) -> (usize, usize) {
        match self.pool_limit_bytes() {
            0 => (self.maxmemory_bytes(), self.used_bytes()),
            limit => (limit, self.resident_bytes()),
        }
    }

    // ----- the elastic pool ------------------------------------------------------------------------

    /// Bytes the store keeps resident: segments, collections and indexes.
    pub fn resident_bytes(&self) -> usize {
        self.memory.resident_bytes.load(Ordering::Relaxed)
    }

    /// The elastic pool limit on resident bytes; 0 = none.
    pub fn pool_limit_bytes(&self) -> usize {
        self.memory.pool_limit_bytes.load(Ordering::Relaxed)
    }

    /// Sets the elastic pool limit. It does not reclaim by itself: writes make room as they go and the
    /// controller calls `reclaim` for the excess.
    pub fn set_pool_limit_bytes(&self, bytes: usize) {
        self.memory.pool_limit_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Bytes of persistent tenants: a floor no shrink goes under.
    pub fn persistent_bytes(&self) -> usize {
        self.memory.pool.persistent_bytes()
    }

    pub fn define_tenant(&self, spec: TenantSpec) -> Result<TenantId, String> {
        self.memory.pool.define(spec)
    }

    pub fn tenant_id(&self, name: &str) -> Option<TenantId> {
        self.memory.pool.id(name)
    }

    pub fn tenant_spec(&self, id: TenantId) -> Option<TenantSpec> {
        self.memory.pool.spec(id)
    }

    /// Every tenant with its usage, share, fairness (against the pool limit, or the resident bytes when
    /// there is none) and counters summed over the shards.
    pub fn tenant_snapshots(&self) -> Vec<TenantSnapshot> {
        self.tenant_snapshots_with(|visit| {
            for shard in self.shards.iter() {
                visit(&mut shard.lock());
            }
        })
    }

    /// `tenant_snapshots` with the shards reached by `visit_shards`, for callers that already hold shard
    /// locks (INFO inside EXEC).
    pub fn tenant_snapshots_with(
        &self,
        visit_shards: impl FnOnce(&mut dyn FnMut(&mut Shard)),
    ) -> Vec<TenantSnapshot> {
        let pool_bytes = match self.pool_limit_bytes() {
            0 => self.resident_bytes(),
            limit => limit,
        };
        let mut snapshots = self.memory.pool.snapshots(pool_bytes);
        visit_shards(&mut |shard: &mut Shard| {
            for (id, stats) in shard.tenant_stats.iter().enumerate() {
                if let Some(snapshot) = snapshots.get_mut(id) {
                    snapshot.hits += stats.hits;
                    snapshot.misses += stats.misses;
                    snapshot.evicted_keys += stats.evicted_keys;
                    snapshot.evicted_bytes += stats.evicted_bytes;
                }
            }
        });
        snapshots
    }

    pub fn reclaim_stats(&self) -> ReclaimStats {
        self.memory.pool.reclaim_stats()
    }

    /// Gives `bytes` of resident memory back to the OS: spare segments first, then segments of the
    /// ephemeral tenant with the largest fairness, one segment (careful: one bounded slice) per shard lock
    /// hold, round robin over the shards, unmapping outside the lock. One worker per core (careful: one
    /// core is left to clients), each on its own shards: index removals and unmaps are per-core work
    /// (8 GiB fast: ~180 ms on one core here, ~110 ms on two). Stops early when nothing ephemeral is
    /// left. Persistent data is never touched.
    pub fn reclaim(&self, bytes: usize, path: ReclaimPath) -> ReclaimReport {
        let started = Instant::now();
        // The careful path re-appends survivors: it keeps the spare segments (already faulted in, so no
        // page is cleared under a shard lock) until it is done.
        let release_spares = || -> usize {
            self.shards
                .iter()
                .map(|shard| {
                    let spares = shard.lock().take_spare_segments();
                    spares.iter().map(Segment::capacity_bytes).sum::<usize>()
                })
                .sum()
        };
        let spare_bytes = match path {
            ReclaimPath::Fast => release_spares(),
            ReclaimPath::Careful => 0,
        };
        let progress = ReclaimProgress {
            wanted_bytes: bytes,
            resident_floor_bytes: self.resident_bytes().saturating_sub(bytes),
            released_bytes: AtomicUsize::new(spare_bytes),
            grown_bytes: AtomicUsize::new(0),
            objects: AtomicUsize::new(0),
            longest_hold_ns: AtomicUsize::new(0),
        };
        // The careful path is the one clients should not notice: it leaves a core to them.
        let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
        let workers = match path {
            ReclaimPath::Fast => cores,
            ReclaimPath::Careful => cores.saturating_sub(1).max(1),
        }
        .min(self.shards.len());
        let first = self.reclaim_cursor.fetch_add(1, Ordering::Relaxed);
        if workers == 1 || bytes <= spare_bytes {
            self.reclaim_worker(path, first, 1, &progress);
        } else {
            std::thread::scope(|scope| {
                for worker in 0..workers {
                    let progress = &progress;
                    scope.spawn(move || {
                        self.reclaim_worker(path, first + worker, workers, progress)
                    });
                }
            });
        }
        if path == ReclaimPath::Careful {
            progress
                .released_bytes
                .fetch_add(release_spares(), Ordering::Relaxed);
        }
        let report = ReclaimReport {
            path,
            requested_bytes: bytes,
            released_bytes: progress.net_released_bytes(),
            objects: progress.objects.load(Ordering::Relaxed) as u64,
            duration: started.elapsed(),
            longest_hold: std::time::Duration::from_nanos(
                progress.longest_hold_ns.load(Ordering::Relaxed) as u64,
            ),
        };
        self.memory.pool.record_reclaim(report);
        // The pages are back with the OS already; now the address space of the released segments too.
        memory::segment::retained::unmap_retained(RETAINED_RANGES_AFTER_RECLAIM);
        report
    }

    /// One reclaim worker: visits the shards `first`, `first + stride`, ... round robin, one step per lock
    /// hold, until the reclaim has released what was wanted or its shards hold nothing of the victim.
    fn reclaim_worker(
        &self,
        path: ReclaimPath,
        first: usize,
        stride: usize,
        progress: &ReclaimProgress,
    ) {
        let shard_count = self.shards.len();
        let mine: Vec<usize> = (0..shard_count)
            .filter(|index| index % stride == first % stride)
            .collect();
        let mut cursor = first / stride;
        let mut ran_since = Instant::now();
        while progress.net_released_bytes() < progress.wanted_bytes
            && self.resident_bytes() > progress.resident_floor_bytes
        {
            let Some(victim) = self.memory.pool.victim() else {
                return;
            };
            let mut progressed = false;
            for _ in 0..mine.len() {
                let index = mine[cursor % mine.len()];
                cursor += 1;
                let step = {
                    let mut shard = self.shards[index].lock();
                    let held_since = Instant::now();
                    let step = match path {
                        ReclaimPath::Fast => shard.fast_release_step(victim),
                        ReclaimPath::Careful => shard.careful_release_step(victim, now_ms()),
                    };
                    progress
                        .longest_hold_ns
                        .fetch_max(held_since.elapsed().as_nanos() as usize, Ordering::Relaxed);
                    step
                };
                // The detached segment gives its pages back here, after the shard lock was released.
                drop(step.detached);
                if ran_since.elapsed() >= RECLAIM_YIELD_INTERVAL {
                    std::thread::yield_now();
                    ran_since = Instant::now();
                }
                if step.progressed {
                    progress
                        .released_bytes
                        .fetch_add(step.released_bytes, Ordering::Relaxed);
                    progress
                        .grown_bytes
                        .fetch_add(step.grown_bytes, Ordering::Relaxed);
                    progress
                        .objects
                        .fetch_add(step.objects as usize, Ordering::Relaxed);
                    progressed = true;
                    break;
                }
            }
            if !progressed {
                return;
            }
        }
    }

    /// Active expiry on one shard: checks `items_max` items, and goes on (up to 16 rounds) while more than
    /// a quarter of what it checks has expired, like Redis's adaptive cycle. One lock hold per round.
    pub fn expire_shard(&self, index: usize, items_max: usize) {
        const ROUNDS_MAX: usize = 16;
        for _ in 0..ROUNDS_MAX {
            let expired = self.shards[index].lock().expire_cycle(now_ms(), items_max);
            if expired * 4 <= items_max {
                break;
            }
        }
    }

    /// One bounded compaction slice on one shard (one lock hold of at most `items_max` moved items).
    /// Returns true while the shard has more compaction worth doing.
    pub fn compact_shard_slice(&self, index: usize, items_max: usize) -> bool {
        let mut shard = self.shards[index].lock();
        if !shard.is_compacting() && !shard.needs_compaction() {
            return false;
        }
        let freed = shard.compact_step(items_max);
        // Not compacting and nothing freed: no segment is dead enough to be worth moving.
        shard.is_compacting() || (freed > 0 && shard.needs_compaction())
    }

    /// Evicts until usage is under maxmemory (after CONFIG SET maxmemory lowered it).
    pub fn enforce_maxmemory(&self) {
        if self.over_maxmemory() {
            let _ = self.lock_all().make_room();
        }
    }

    /// Sums a per-shard figure.
    pub fn sum_shards(&self, figure: impl Fn(&Shard) -> u64) -> u64 {
        self.shards.iter().map(|shard| figure(&shard.lock())).sum()
    }
}

/// What the workers of one reclaim share.
struct ReclaimProgress {
    wanted_bytes: usize,
    /// Resident bytes at the start less the request: writes that make room under a lowered limit release
    /// bytes alongside the reclaim, and counting only its own releases would take those bytes twice.
    resident_floor_bytes: usize,
    released_bytes: AtomicUsize,
    grown_bytes: AtomicUsize,
    objects: AtomicUsize,
    longest_hold_ns: AtomicUsize,
}

impl ReclaimProgress {
    fn net_released_bytes(&self) -> usize {
        self.released_bytes
            .load(Ordering::Relaxed)
            .saturating_sub(self.grown_bytes.load(Ordering::Relaxed))
    }
}

/// The shards one command holds, locked in ascending order.
pub struct Guards<'a> {
    store: &'a Store,
    /// Inline for the common one- and two-shard commands: no allocation per command.
    guards: SmallVec<[(usize, MutexGuard<'a, Shard>); 2]>,
}

impl<'a> Guards<'a> {
    /// The shard owning `key`; panics if the command did not lock it (a key-spec bug).
    pub fn shard(&mut self, key: &[u8]) -> &mut Shard {
        let index = self.store.shard_index(key);
        let position = self
            .guards
            .binary_search_by_key(&index, |(held, _)| *held)
            .unwrap_or_else(|_| panic!("shard {index} of a key was not locked"));
        &mut self.guards[position].1
    }

    /// Every locked shard.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Shard> + use<'_, 'a> {
        self.guards.iter_mut().map(|(_, guard)| &mut **guard)
    }

    pub fn holds_all(&self) -> bool {
        self.guards.len() == self.store.shard_count()
    }

    /// Evicts until the store is within maxmemory: from the locked shards first, then from other shards
    /// that are free right now (`try_lock`, so lock order cannot deadlock). Err when the policy allows no
    /// eviction or nothing evictable can be reached.
    pub fn make_room(&mut self) -> Result<(), OutOfMemory> {
        self.make_room_for(0)
    }

    /// `make_room` for a write that will add `additional_bytes`: evicts (as the policy allows) until they
    /// fit under the limit. Err at once, evicting nothing, when they would not fit even in an empty store.
    pub fn make_room_for(&mut self, additional_bytes: usize) -> Result<(), OutOfMemory> {
        if self.store.exceeds_memory_limit_alone(additional_bytes) {
            return Err(OutOfMemory);
        }
        if self.store.pool_limit_bytes() != 0 {
            return self.make_pool_room(additional_bytes);
        }
        let policy = self.store.policy();
        let now = now_ms();
        let over = |store: &Store| store.would_exceed_maxmemory(additional_bytes);
        while over(self.store) {
            let mut freed_any = false;
            for (_, shard) in self.guards.iter_mut() {
                freed_any |= shard.evict_one(policy, now).is_some();
                if !over(self.store) {
                    return Ok(());
                }
            }
            if !freed_any && !self.evict_from_unlocked(policy, now, additional_bytes) {
                return Err(OutOfMemory);
            }
        }
        Ok(())
    }

    /// Elastic mode: releases (carefully) segments of the ephemeral tenant with the largest fairness until
    /// resident bytes are under the pool limit; held shards first, then shards free right now. Err when
    /// only persistent data is left (the persistent floor is reached) or nothing reachable can go.
    fn make_pool_room(&mut self, additional_bytes: usize) -> Result<(), OutOfMemory> {
        let now = now_ms();
        for (_, shard) in self.guards.iter_mut() {
            shard.release_spare_segments();
        }
        while self.store.would_exceed_maxmemory(additional_bytes) {
            let victim = self.store.memory.pool.victim().ok_or(OutOfMemory)?;
            let mut progressed = false;
            for (_, shard) in self.guards.iter_mut() {
                progressed = shard.careful_release_step(victim, now).progressed;
                if progressed {
                    break;
                }
            }
            // Shards busy with other commands are skipped (try_lock); give them a few chances before
            // calling the pool full, so contention alone does not fail a write.
            for attempt in 0..4 {
                if progressed {
                    break;
                }
                if attempt > 0 {
                    std::thread::yield_now();
                }
                progressed = self.release_from_unlocked(victim, now);
            }
            if !progressed {
                return Err(OutOfMemory);
            }
        }
        Ok(())
    }

    /// One careful release slice for `victim` on a shard this command does not hold (try_lock).
    fn release_from_unlocked(&self, victim: TenantId, now: u64) -> bool {
        for (index, shard) in self.store.shards.iter().enumerate() {
            if self.guards.iter().any(|(held, _)| *held == index) {
                continue;
            }
            let Some(mut shard) = shard.try_lock() else {
                continue;
            };
            let step = shard.careful_release_step(victim, now);
            drop(shard);
            drop(step.detached);
            if step.progressed {
                return true;
            }
        }
        false
    }

    /// One eviction round over the shards this command does not hold; false when none freed anything.
    fn evict_from_unlocked(
        &self,
        policy: EvictionPolicy,
        now: u64,
        additional_bytes: usize,
    ) -> bool {
        let mut freed_any = false;
        for (index, shard) in self.store.shards.iter().enumerate() {
            if self.guards.iter().any(|(held, _)| *held == index) {
                continue;
            }
            if let Some(mut shard) = shard.try_lock() {
                freed_any |= shard.evict_one(policy, now).is_some();
            }
            if !self.store.would_exceed_maxmemory(additional_bytes) {
                return true;
            }
        }
        freed_any
    }
}
