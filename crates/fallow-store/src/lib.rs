//! fallow's storage engine. A `Store` is a fixed set of shards, each the single owner of the keys that
//! hash to it. A command locks the shards of its keys (in ascending order, so multi-key commands are atomic
//! and never deadlock) and works on them directly.
//!
//! Why locks instead of shard threads and messages (DESIGN.md "Shards and threads"): on this machine a
//! cross-thread wake-up costs tens of microseconds while an uncontended lock costs tens of nanoseconds, and
//! every connection thread can reach every key. A shard is still one owner at a time, and the shard API is
//! message-shaped (key + operation), so shards can later live on other nodes.
pub mod admission;
pub mod changes;
pub mod dump;
pub mod glob;
pub mod memory;
pub mod pool;
pub mod rdb;
pub mod shard;
pub mod tier2;
mod tiering;
pub mod types;

pub use tiering::RecoveryReport;

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
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
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
/// Longest a reclaim worker runs (8 GiB careful takes well under a second on 2 vCPUs): the elastic
/// controller must come back to follow the host.
const RECLAIM_TIME_MAX: std::time::Duration = std::time::Duration::from_secs(2);
/// Release steps in a row that free nothing before a write's room-making gives up (-OOM); the release
/// plan they worked on carries over to the next write.
const FRUITLESS_STEPS_MAX: usize = 64;
/// How long one write's room-making may take before it gives up (-OOM): a pool target below what stubs
/// and open segments need must not hold a writer, its shard locks and its worker thread for long.
const ROOM_MAKING_TIME_MAX: std::time::Duration = std::time::Duration::from_millis(10);

/// What one release step did, ordered from least to most useful.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum StepOutcome {
    /// The shard holds no segment of the victim.
    Nothing,
    /// Items moved (survivors, stubs), or a finished segment gave back no more than its survivors took.
    Moved,
    /// Bytes came free net, or items left a segment still being emptied (its bytes come free when done).
    Released,
}

impl StepOutcome {
    fn of(step: &shard::ReclaimStep) -> StepOutcome {
        let freed =
            step.released_bytes > step.grown_bytes || (step.detached.is_none() && step.objects > 0);
        match (step.progressed, freed) {
            (false, _) => StepOutcome::Nothing,
            (true, false) => StepOutcome::Moved,
            (true, true) => StepOutcome::Released,
        }
    }
}

/// The hash of a key, used both to pick its shard and inside the shard's index.
pub fn hash_key(key: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(HASH_SEED).hash_one(key)
}

/// The shard of `shard_count` that owns a key of hash `hash`: hash bits the index does not use for its
/// buckets.
pub fn shard_of_hash(hash: u64, shard_count: usize) -> usize {
    ((hash >> 40) as usize & 0xffff) % shard_count
}

/// Parses a decimal i64 written canonically, as Redis's `string2ll` reads it (no spaces, no '+', no
/// leading zeros, not `-0`, at most 20 bytes): listpacks, RDB integer encodings and SORT's options
/// recognise integers this way. Allocates nothing.
pub fn parse_i64_strict(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    match digits {
        [b'0'] if !negative => return Some(0),
        [b'1'..=b'9', ..] => {}
        _ => return None,
    }
    let mut value: i64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(digit - b'0');
        value = value.checked_mul(10)?;
        value = if negative {
            value.checked_sub(digit)?
        } else {
            value.checked_add(digit)?
        };
    }
    Some(value)
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
    /// `maxmemory` was lowered below the bytes in use and `enforce_maxmemory` has not brought them under
    /// it yet: that excess is reclaimed without tier-2 writes.
    limit_cut: AtomicBool,
    /// Tier 2, once attached (after recovery).
    tier2: std::sync::OnceLock<Arc<tier2::Tier2>>,
    /// Tier 2 with the admission state the shards share.
    tier_link: std::sync::OnceLock<shard::TierLink>,
}

impl Store {
    pub fn new(config: &StoreConfig) -> Store {
        assert!(config.shards >= 1 && config.shards <= 64);
        let memory = Arc::new(MemoryCounters::default());
        memory
            .maxmemory_bytes
            .store(config.maxmemory_bytes, Ordering::Relaxed);
        let epoch_ms = now_ms();
        let shard_config = ShardConfig {
            databases: config.databases,
            segment_bytes: config.segment_bytes,
            epoch_ms,
            shards: config.shards,
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
            limit_cut: AtomicBool::new(false),
            tier2: std::sync::OnceLock::new(),
            tier_link: std::sync::OnceLock::new(),
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
        shard_of_hash(hash_key(key), self.shards.len())
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
        let before = self.maxmemory_bytes.load(Ordering::Relaxed);
        if bytes != 0 && (before == 0 || bytes < before) && self.used_bytes() > bytes {
            self.limit_cut.store(true, Ordering::Relaxed);
        }
        self.maxmemory_bytes.store(bytes, Ordering::Relaxed);
        self.memory.maxmemory_bytes.store(bytes, Ordering::Relaxed);
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
        self.memory
            .noeviction
            .store(policy == EvictionPolicy::NoEviction, Ordering::Relaxed);
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
            let spares = self.memory.take_spares(usize::MAX);
            spares.iter().map(Segment::capacity_bytes).sum()
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
        // Steps that only moved items (survivors, stubs) release nothing net; a run of them means what
        // is left cannot go (all hot, or stubs of persistent data): stop rather than churn.
        let mut fruitless_steps = 0;
        let started = Instant::now();
        while progress.net_released_bytes() < progress.wanted_bytes
            && self.resident_bytes() > progress.resident_floor_bytes
        {
            // Writes and promotions may refill what it releases: the controller re-plans on its next
            // tick rather than chase them here.
            if started.elapsed() > RECLAIM_TIME_MAX {
                return;
            }
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
                        ReclaimPath::Careful => shard.careful_reclaim_step(victim, now_ms()),
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
                    fruitless_steps = match step.released_bytes > step.grown_bytes {
                        true => 0,
                        false => fruitless_steps + 1,
                    };
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
            if !progressed || fruitless_steps > FRUITLESS_STEPS_MAX {
                return;
            }
        }
    }

    /// Active expiry on one shard: checks `items_max` items, and goes on (up to 16 rounds) while more than
    /// a quarter of what it checks has expired, like Redis's adaptive cycle. One lock hold per round.
    /// Chooses which key events every shard records (see `shard::KeyEvent`) for keyspace
    /// notifications.
    pub fn record_key_events(&self, causes: &[shard::KeyEventCause]) {
        for shard in self.shards.iter() {
            shard.lock().record_key_events(causes);
        }
    }

    /// The key events shard `index` recorded since they were last taken, oldest first.
    pub fn take_key_events(&self, index: usize) -> Vec<shard::KeyEvent> {
        let mut shard = self.shards[index].lock();
        if !shard.has_key_events() {
            return Vec::new();
        }
        shard.take_key_events()
    }

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
    /// Returns true while the shard has more compaction worth doing. In fixed mode, while resident bytes
    /// are over their target (`resident_target_bytes`), segments up to 90% live are worth it too, so
    /// dead space from overwrites, deletes and `volatile-*` evictions does not stay resident.
    pub fn compact_shard_slice(&self, index: usize, items_max: usize) -> bool {
        let mut shard = self.shards[index].lock();
        let target = self.resident_target_with(shard.segment_bytes());
        let over_target = target != 0 && self.resident_bytes() > target;
        let tight = over_target && shard.needs_compaction_over_target();
        if !shard.is_compacting() && !shard.needs_compaction() && !tight {
            return false;
        }
        let freed = shard.compact_step_over_target(items_max, tight);
        // Not compacting and nothing freed: no segment is dead enough to be worth moving.
        shard.is_compacting() || (freed > 0 && (shard.needs_compaction() || tight))
    }

    /// Fixed mode: resident bytes (mapped segments, collections, indexes) the store aims to stay under
    /// while maxmemory is set: 5% over maxmemory, or two segments per shard (the active segment and the
    /// one eviction is emptying) when that is more. 0 when there is no maxmemory or in elastic mode.
    pub fn resident_target_bytes(&self) -> usize {
        let segment_bytes = self.shards[0].lock().segment_bytes();
        self.resident_target_with(segment_bytes)
    }

    fn resident_target_with(&self, segment_bytes: usize) -> usize {
        let maxmemory = self.maxmemory_bytes();
        if maxmemory == 0 || self.pool_limit_bytes() != 0 {
            return 0;
        }
        maxmemory + (maxmemory / 20).max(2 * self.shards.len() * segment_bytes)
    }

    /// Fixed mode: used bytes to free before `additional_bytes` more fit under maxmemory (0 without one).
    fn excess_bytes(&self, additional_bytes: usize) -> usize {
        match self.maxmemory_bytes() {
            0 => 0,
            limit => (self.used_bytes().saturating_add(additional_bytes)).saturating_sub(limit),
        }
    }

    /// Items one eviction slice handles per shard lock hold (evicted or carried forward): a few hundred
    /// index removals, well under a millisecond.
    const EVICT_ITEMS_PER_HOLD: usize = 256;

    /// One round of bringing memory under maxmemory after it was lowered (fixed mode): each shard in turn,
    /// one bounded lock hold each, evicts its share of the excess (`EVICT_ITEMS_PER_HOLD` items at most) or,
    /// with tier 2, demotes one slice of its oldest segment; once used bytes are under the limit, spare
    /// segments go back to the OS while resident bytes are over their target (compaction,
    /// `compact_shard_slice`, takes care of dead space). Returns true while there is more to do: the caller
    /// yields between rounds, so no client waits behind the whole excess.
    pub fn enforce_maxmemory(&self) -> bool {
        let maxmemory = self.maxmemory_bytes();
        if maxmemory == 0 || self.pool_limit_bytes() != 0 {
            return false;
        }
        let excess = self.excess_bytes(0);
        if excess == 0 {
            self.limit_cut.store(false, Ordering::Relaxed);
        }
        if excess > 0 {
            let policy = self.policy();
            let now = now_ms();
            let tier2 = self.tier2.get().is_some();
            let share = excess.div_ceil(self.shards.len());
            let first = self.reclaim_cursor.fetch_add(1, Ordering::Relaxed);
            let mut progressed = false;
            for turn in 0..self.shards.len() {
                let excess = self.excess_bytes(0);
                if excess == 0 {
                    break;
                }
                let index = (first + turn) % self.shards.len();
                if tier2 {
                    // Tier 2 demotes the oldest segments: what has a copy becomes a stub. Lowering the
                    // limit is a reclaim and waits on no write, unless nothing may be dropped; any other
                    // excess (promotions, mostly, and writes that overshot the limit) is demoted with
                    // writes whatever the admission rule says, so steady traffic loses nothing to it.
                    let may_write = self.memory.noeviction.load(Ordering::Relaxed)
                        || !self.limit_cut.load(Ordering::Relaxed);
                    let step = match may_write {
                        true => self.shards[index].lock().demote_excess_step(now),
                        false => self.shards[index].lock().demote_step(now, false),
                    };
                    // A slice that only re-appended hot items releases nothing: not progress.
                    progressed |= step.progressed
                        && (step.objects > 0 || step.released_bytes > step.grown_bytes);
                    // Unmapped here, after the shard lock was released.
                    drop(step.detached);
                } else {
                    progressed |= self.shards[index]
                        .lock()
                        .evict(policy, now, share.min(excess), Store::EVICT_ITEMS_PER_HOLD)
                        .is_some();
                }
            }
            // Nothing the policy may evict (noeviction, no volatile key): writes get -OOM meanwhile.
            return progressed;
        }
        // One spare at a time: those within the target stay for the next segments writes need.
        let target = self.resident_target_bytes();
        while self.resident_bytes() > target {
            if self.memory.take_spares(1).is_empty() {
                break;
            }
        }
        false
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

    /// Whether shard `index` is locked here.
    pub fn holds(&self, index: usize) -> bool {
        self.guards
            .binary_search_by_key(&index, |(held, _)| *held)
            .is_ok()
    }

    /// The locked shards' indices, ascending.
    pub fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.guards.iter().map(|(index, _)| *index)
    }

    /// Locks shard `index` too if it is free right now; false if another holder has it. It never waits,
    /// so taking a shard out of ascending order cannot deadlock (a script touching a key it did not
    /// declare).
    pub fn try_add(&mut self, index: usize) -> bool {
        let Err(position) = self.guards.binary_search_by_key(&index, |(held, _)| *held) else {
            return true;
        };
        match self.store.shards[index].try_lock() {
            Some(guard) => {
                self.guards.insert(position, (index, guard));
                true
            }
            None => false,
        }
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
        if self.store.tier2.get().is_some() {
            return self.make_tier2_room(additional_bytes);
        }
        let policy = self.store.policy();
        let now = now_ms();
        let store = self.store;
        let excess = || store.excess_bytes(additional_bytes);
        // Each round asks every shard for its share of what is over at the round's start: a write under a
        // much lowered limit spreads the eviction over the shards instead of emptying its own first. A
        // write that needs a little (the usual case) gets it from its own shard.
        'rounds: while excess() > 0 {
            let share = excess().div_ceil(store.shards.len());
            let mut freed_any = false;
            for (_, shard) in self.guards.iter_mut() {
                let wanted = share.min(excess());
                freed_any |= shard
                    .evict(policy, now, wanted, Store::EVICT_ITEMS_PER_HOLD)
                    .is_some();
                if excess() == 0 {
                    break 'rounds;
                }
            }
            freed_any |= self.evict_from_unlocked(policy, now, additional_bytes, share);
            if !freed_any {
                return Err(OutOfMemory);
            }
        }
        self.compact_over_resident_target();
        Ok(())
    }

    /// Items a write at the limit moves (one compaction slice on each shard it holds) while resident bytes
    /// are over their target: overwrites and deletes leave dead space faster than the background
    /// compaction may take it back, and writers paying for it bounds resident bytes at any write rate.
    const WRITE_COMPACT_ITEMS: usize = 8;

    /// Fixed mode, at the limit: one compaction slice on each held shard with dead space worth moving,
    /// when the store's resident bytes are over their target.
    fn compact_over_resident_target(&mut self) {
        let store = self.store;
        for (_, shard) in self.guards.iter_mut() {
            let target = store.resident_target_with(shard.segment_bytes());
            if target == 0 || store.resident_bytes() <= target {
                return;
            }
            if shard.is_compacting() || shard.needs_compaction_over_target() {
                shard.compact_step_over_target(Self::WRITE_COMPACT_ITEMS, true);
            }
        }
    }

    /// Elastic mode: releases (carefully) segments of the ephemeral tenant with the largest fairness until
    /// resident bytes are under the pool limit: from a held shard that holds at least its share of the
    /// victim's bytes, else from the shard free right now that holds the most, else from any held shard.
    /// A release takes a shard's oldest segments, so shards kept level keep items for about as long on
    /// each; a write's own shard emptying itself regardless would shrink it until it evicted its newest
    /// items (its active segment) while other shards kept older ones. Err when only persistent data is
    /// left (the persistent floor is reached) or nothing reachable can go.
    fn make_pool_room(&mut self, additional_bytes: usize) -> Result<(), OutOfMemory> {
        let now = now_ms();
        drop(self.store.memory.take_spares(usize::MAX));
        // A step that only moves items (survivors, stubs: a segment holding nothing but stubs is
        // re-appended whole) releases nothing net; other shards are tried then, and a run of such steps
        // means nothing reachable can go.
        let mut fruitless_steps = 0;
        let started = Instant::now();
        while self.store.would_exceed_maxmemory(additional_bytes) {
            if started.elapsed() > ROOM_MAKING_TIME_MAX {
                return Err(OutOfMemory);
            }
            let victim = self.store.memory.pool.victim().ok_or(OutOfMemory)?;
            let share_bytes = self
                .store
                .memory
                .pool
                .counters(victim)
                .resident_bytes
                .load(Ordering::Relaxed)
                / self.store.shards.len();
            let mut outcome = self.release_from_held(victim, now, share_bytes);
            // Shards busy with other commands are skipped (try_lock); give them a few chances before
            // falling back on the held shards, so contention alone does not fail a write.
            for attempt in 0..4 {
                if outcome == StepOutcome::Released {
                    break;
                }
                if attempt > 0 {
                    std::thread::yield_now();
                }
                outcome = outcome.max(self.release_from_unlocked(victim, now));
            }
            if outcome != StepOutcome::Released {
                outcome = outcome.max(self.release_from_held(victim, now, 0));
            }
            fruitless_steps = match outcome {
                StepOutcome::Nothing => return Err(OutOfMemory),
                StepOutcome::Moved => fruitless_steps + 1,
                StepOutcome::Released => 0,
            };
            if fruitless_steps > FRUITLESS_STEPS_MAX {
                return Err(OutOfMemory);
            }
        }
        Ok(())
    }

    /// One careful release slice for `victim` on each held shard holding at least `share_bytes` of its
    /// segments, until one releases bytes.
    fn release_from_held(&mut self, victim: TenantId, now: u64, share_bytes: usize) -> StepOutcome {
        let mut outcome = StepOutcome::Nothing;
        for (_, shard) in self.guards.iter_mut() {
            if share_bytes > 0 && shard.tenant_segment_bytes(victim) < share_bytes {
                continue;
            }
            outcome = outcome.max(StepOutcome::of(&shard.careful_release_step(victim, now)));
            if outcome == StepOutcome::Released {
                break;
            }
        }
        outcome
    }

    /// One careful release slice for `victim` on the shards this command does not hold and can lock now
    /// (try_lock), the ones holding most of its segments first, until one releases bytes.
    fn release_from_unlocked(&self, victim: TenantId, now: u64) -> StepOutcome {
        let mut fullest: Vec<(usize, usize)> = (0..self.store.shards.len())
            .filter(|index| !self.guards.iter().any(|(held, _)| held == index))
            .filter_map(|index| {
                let bytes = self.store.shards[index]
                    .try_lock()?
                    .tenant_segment_bytes(victim);
                (bytes > 0).then_some((bytes, index))
            })
            .collect();
        fullest.sort_unstable_by(|a, b| b.cmp(a));
        let mut outcome = StepOutcome::Nothing;
        for (_, index) in fullest {
            let Some(mut shard) = self.store.shards[index].try_lock() else {
                continue;
            };
            let step = shard.careful_release_step(victim, now);
            drop(shard);
            outcome = outcome.max(StepOutcome::of(&step));
            drop(step.detached);
            if outcome == StepOutcome::Released {
                break;
            }
        }
        outcome
    }

    /// One eviction round over the shards this command does not hold (each gives up to `share` bytes, one
    /// bounded lock hold); false when none freed anything.
    fn evict_from_unlocked(
        &self,
        policy: EvictionPolicy,
        now: u64,
        additional_bytes: usize,
        share: usize,
    ) -> bool {
        let mut freed_any = false;
        for (index, shard) in self.store.shards.iter().enumerate() {
            if self.guards.iter().any(|(held, _)| *held == index) {
                continue;
            }
            let excess = self.store.excess_bytes(additional_bytes);
            if excess == 0 {
                return true;
            }
            if let Some(mut shard) = shard.try_lock() {
                freed_any |= shard
                    .evict(policy, now, share.min(excess), Store::EVICT_ITEMS_PER_HOLD)
                    .is_some();
            }
        }
        freed_any
    }
}
