//! Which blocks read for a reader are worth storing once the pool is full: TinyLFU's doorkeeper
//! (Einziger et al., "TinyLFU: A Highly Efficient Cache Admission Policy").
//!
//! | the pool | a block read from the backing file for a random reader | read-ahead, or for a sequential stream |
//! |----------|---------------------------------------------------------|----------------------------------------|
//! | has room | stored                                                  | stored                                 |
//! | is full  | stored only if it missed before within the window      | stored                                 |
//!
//! The pool is full while it evicts (its eviction count grew since the watcher's last reading, or within the
//! last `FULL_HOLD_READINGS` readings) or holds 95% of its target resident; it has room otherwise, and
//! always without a limit (target 0). A small pool may stay well under its target when full (segments
//! are released whole), so evictions are the signal that counts.
//!
//! The window is the last `pool capacity in blocks` misses, kept as two generations of a Bloom filter
//! (the current one and the one before: a block is remembered for one to two windows). A block stored when
//! full evicts another; one read only once (a random read's tail page, a scan's block) would evict a block
//! more likely to be read again. Streams are left to read-ahead and its feedback, which watches its own waste:
//! read-ahead blocks are always stored, and so are a sequential stream's own misses (with the doorkeeper on
//! them too, a small pool kept the blocks streams had read once and evicted the read-ahead blocks before they
//! were read: feedback's waste in `fallow-bench fs`'s 100 MiB video run went from 21 to 136 MiB).
//! Measured (docs/benchmarks.md "Admission"): OLTP with a 1 GiB pool 2.82× → 3.66× over no cache.
//!
//! Memory: two bit sets of `window × 8` bits each (2 probes: about 5% false positives at a full window),
//! between `BITS_MIN` and `BITS_MAX` bits; a window larger than `BITS_MAX / 8` blocks admits a little more
//! than it should (more false positives), never less.
use super::remote::PoolReading;
use parking_lot::Mutex;
use std::hash::{Hash, Hasher};

/// Bits per generation: at least 8 KiB, at most 8 MiB (16 MiB for both generations).
const BITS_MIN: u64 = 1 << 16;
const BITS_MAX: u64 = 1 << 26;
/// Bits per block of window.
const BITS_PER_BLOCK: u64 = 8;
/// The pool counts as full from this share of its target resident (parts per thousand): a full pool
/// stays a little under its target (segments are released whole).
const FULL_PER_MILLE: u64 = 950;
/// The smallest window, in blocks (a tiny pool still remembers a few misses).
const WINDOW_BLOCKS_MIN: u64 = 1024;
/// A pool that evicted stays full for this many readings without evictions (5 s at the watcher's 0.5 s):
/// the doorkeeper's own refusals slow evictions down, which must not open the door at once.
const FULL_HOLD_READINGS: u32 = 10;

/// The two generations of the filter, sized for one window.
struct Filters {
    current: Vec<u64>,
    previous: Vec<u64>,
    /// Misses recorded in `current`.
    recorded: u64,
    window_blocks: u64,
}

impl Filters {
    fn new(window_blocks: u64) -> Filters {
        let words = (bits_for(window_blocks) / 64) as usize;
        Filters {
            current: vec![0; words],
            previous: vec![0; words],
            recorded: 0,
            window_blocks,
        }
    }
}

struct State {
    filters: Filters,
    pool_full: bool,
    /// The pool's eviction count at the last reading (None before the first).
    evictions_seen: Option<u64>,
    /// Readings since the count last grew.
    quiet_readings: u32,
}

pub struct Doorkeeper {
    state: Mutex<State>,
}

/// What the doorkeeper decided about one block read for a reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// The pool has room.
    Room,
    /// The pool is full and the block missed before within the window.
    SeenBefore,
    /// The pool is full and this is the block's first miss within the window: not stored.
    No,
}

impl Admit {
    pub fn stores(self) -> bool {
        self != Admit::No
    }
}

fn bits_for(window_blocks: u64) -> u64 {
    (window_blocks * BITS_PER_BLOCK)
        .next_power_of_two()
        .clamp(BITS_MIN, BITS_MAX)
}

/// Two bit positions from one 64-bit hash, within `bits` (a power of two): its low bits, and the high bits
/// of its halves swapped and multiplied (Fibonacci hashing).
fn probes(hash: u64, bits: u64) -> [u64; 2] {
    debug_assert!(bits.is_power_of_two() && bits >= 2);
    let second =
        hash.rotate_left(32).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits.trailing_zeros());
    [hash & (bits - 1), second]
}

fn contains(set: &[u64], hash: u64) -> bool {
    let bits = set.len() as u64 * 64;
    probes(hash, bits)
        .iter()
        .all(|&bit| set[(bit / 64) as usize] & (1 << (bit % 64)) != 0)
}

fn insert(set: &mut [u64], hash: u64) {
    let bits = set.len() as u64 * 64;
    for bit in probes(hash, bits) {
        set[(bit / 64) as usize] |= 1 << (bit % 64);
    }
}

/// A stable 64-bit hash of a block key (SipHash with fixed keys: the same across runs, for tests).
pub fn key_hash(key: &[u8]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    hasher.finish()
}

impl Doorkeeper {
    pub fn new() -> Doorkeeper {
        Doorkeeper {
            state: Mutex::new(State {
                filters: Filters::new(WINDOW_BLOCKS_MIN),
                pool_full: false,
                evictions_seen: None,
                quiet_readings: 0,
            }),
        }
    }

    /// A new reading of the pool: whether it is full, and the window (the pool's capacity in blocks). A
    /// window that changed more than twofold resizes the filters (forgetting).
    pub fn observe_pool(&self, pool: &PoolReading, block_bytes: u64) {
        assert!(block_bytes > 0, "blocks have a size");
        let mut state = self.state.lock();
        let evicted = state
            .evictions_seen
            .is_some_and(|seen| pool.evictions > seen);
        state.evictions_seen = Some(pool.evictions);
        state.quiet_readings = if evicted {
            0
        } else {
            state.quiet_readings.saturating_add(1)
        };
        let near_target = pool.resident_bytes >= pool.target_bytes / 1000 * FULL_PER_MILLE;
        let still_full = state.pool_full && state.quiet_readings < FULL_HOLD_READINGS;
        // target 0: no limit (fixed mode without maxmemory): never full.
        state.pool_full = pool.target_bytes > 0 && (evicted || near_target || still_full);
        let window = (pool.target_bytes / block_bytes).max(WINDOW_BLOCKS_MIN);
        let sized_for = state.filters.window_blocks;
        if window > sized_for * 2 || window * 2 < sized_for {
            state.filters = Filters::new(window);
        }
    }

    /// Records a miss of the block whose key hashes to `hash` and says whether to store the block.
    pub fn admit(&self, hash: u64) -> Admit {
        let mut state = self.state.lock();
        let filters = &mut state.filters;
        let seen = contains(&filters.current, hash) || contains(&filters.previous, hash);
        insert(&mut filters.current, hash);
        filters.recorded += 1;
        if filters.recorded >= filters.window_blocks {
            std::mem::swap(&mut filters.current, &mut filters.previous);
            filters.current.iter_mut().for_each(|word| *word = 0);
            filters.recorded = 0;
        }
        match (state.pool_full, seen) {
            (false, _) => Admit::Room,
            (true, true) => Admit::SeenBefore,
            (true, false) => Admit::No,
        }
    }

    /// Whether the last reading of the pool found it full.
    pub fn pool_full(&self) -> bool {
        self.state.lock().pool_full
    }

    /// Bytes the two filters take.
    pub fn bytes(&self) -> u64 {
        let filters = &self.state.lock().filters;
        (filters.current.len() + filters.previous.len()) as u64 * 8
    }
}

impl Default for Doorkeeper {
    fn default() -> Self {
        Doorkeeper::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: u64 = 8192;

    fn reading(target_bytes: u64, resident_bytes: u64, evictions: u64) -> PoolReading {
        PoolReading {
            target_bytes,
            resident_bytes,
            evictions,
        }
    }

    fn full(window_blocks: u64) -> Doorkeeper {
        let keeper = Doorkeeper::new();
        keeper.observe_pool(
            &reading(window_blocks * BLOCK, window_blocks * BLOCK, 0),
            BLOCK,
        );
        keeper
    }

    fn hash(block: u64) -> u64 {
        key_hash(&block.to_be_bytes())
    }

    #[test]
    fn every_block_is_stored_while_the_pool_has_room() {
        let keeper = Doorkeeper::new();
        keeper.observe_pool(&reading(10_000 * BLOCK, 9_000 * BLOCK, 5), BLOCK);
        keeper.observe_pool(&reading(10_000 * BLOCK, 9_000 * BLOCK, 5), BLOCK);
        assert!((0..5000).all(|block| keeper.admit(hash(block)) == Admit::Room));
        // No limit at all (target 0) is never full.
        keeper.observe_pool(&reading(0, 1 << 40, 9), BLOCK);
        assert_eq!(keeper.admit(hash(99_999)), Admit::Room);
    }

    #[test]
    fn a_pool_that_evicts_is_full_until_it_has_been_quiet_for_a_while() {
        let keeper = Doorkeeper::new();
        let target = 10_000 * BLOCK;
        // Under its target (segments released whole) but evicting: full.
        keeper.observe_pool(&reading(target, target * 8 / 10, 100), BLOCK);
        assert!(
            !keeper.pool_full(),
            "the first reading has nothing to compare with"
        );
        keeper.observe_pool(&reading(target, target * 8 / 10, 150), BLOCK);
        assert!(keeper.pool_full());
        for quiet in 1..FULL_HOLD_READINGS {
            keeper.observe_pool(&reading(target, target * 8 / 10, 150), BLOCK);
            assert!(keeper.pool_full(), "after {quiet} quiet readings");
        }
        keeper.observe_pool(&reading(target, target * 8 / 10, 150), BLOCK);
        assert!(!keeper.pool_full());
        // Near its target without evicting: full.
        keeper.observe_pool(&reading(target, target * 96 / 100, 150), BLOCK);
        assert!(keeper.pool_full());
    }

    #[test]
    fn a_full_pool_stores_a_block_at_its_second_miss_within_the_window() {
        let keeper = full(4096);
        assert_eq!(keeper.admit(hash(1)), Admit::No);
        for block in 100..1000 {
            assert_eq!(keeper.admit(hash(block)), Admit::No, "block {block}");
        }
        assert_eq!(keeper.admit(hash(1)), Admit::SeenBefore);
        assert!(keeper.admit(hash(1)).stores());
    }

    #[test]
    fn a_block_is_forgotten_after_two_windows() {
        let window = 4096;
        let keeper = full(window);
        assert_eq!(keeper.admit(hash(7)), Admit::No);
        // One window later it is still remembered (the previous generation)...
        for block in 10_000..10_000 + window - 1 {
            keeper.admit(hash(block));
        }
        assert_eq!(keeper.admit(hash(7)), Admit::SeenBefore);
        // ...two full windows of other misses after its last miss, it is not.
        for block in 20_000..20_000 + 2 * window {
            keeper.admit(hash(block));
        }
        assert_eq!(keeper.admit(hash(7)), Admit::No);
    }

    #[test]
    fn false_positives_stay_rare_at_a_full_window() {
        let window = 100_000;
        let keeper = full(window);
        for block in 0..window - 1 {
            keeper.admit(hash(block));
        }
        // The current generation holds a window minus one; new blocks mostly go unrecognised.
        let wrongly_admitted = (1_000_000..1_010_000)
            .filter(|&block| {
                let keeper_state = keeper.state.lock();
                contains(&keeper_state.filters.current, hash(block))
            })
            .count();
        assert!(
            wrongly_admitted < 10_000 * 6 / 100,
            "{wrongly_admitted} of 10,000"
        );
    }

    #[test]
    fn the_filters_are_bounded_in_bytes() {
        let keeper = Doorkeeper::new();
        assert_eq!(keeper.bytes(), 2 * BITS_MIN / 8);
        keeper.observe_pool(&reading(1 << 50, 0, 0), BLOCK);
        assert_eq!(keeper.bytes(), 2 * BITS_MAX / 8, "16 MiB at most");
        keeper.observe_pool(&reading(1 << 30, 0, 0), BLOCK);
        assert_eq!(keeper.bytes(), 2 * (131_072 * BITS_PER_BLOCK) / 8);
    }

    #[test]
    fn a_scan_does_not_get_in_once_the_pool_is_full() {
        // A pool of 2,048 blocks, full of a hot set read over and over; then a scan of 100,000 blocks read
        // once each: none of the scan is stored, and the hot blocks (missed before) still are.
        let keeper = full(2048);
        for round in 0..3 {
            for block in 0..500 {
                let admitted = keeper.admit(hash(block));
                assert_eq!(
                    admitted.stores(),
                    round > 0,
                    "hot block {block} in round {round}"
                );
            }
        }
        let scan_stored = (1_000_000..1_100_000)
            .filter(|&block| keeper.admit(hash(block)).stores())
            .count();
        assert!(
            scan_stored < 100_000 / 100,
            "{scan_stored} scan blocks stored"
        );
    }
}
