//! Which ephemeral items are worth a flash write, and what a tier-2 read means for them (issue 18,
//! benchmark 1: `scripts/bench/tier_sim.py` simulates exactly these rules on real traces).
//!
//! Ex-Tmem admits to tier 2's clean region only what repays the write. The default rule counts reads in a
//! count-min sketch (TinyLFU's, Einziger, Friedman, Manes, TOS 2017): while tier 2 has free regions
//! beyond what cleaning keeps, every ephemeral item leaving RAM is written; once it is full, an item is
//! written when it was read at least `FREQUENT_READS_MIN` times lately (a key read again after its time
//! in RAM: a doorkeeper), or when the sketch ranks it strictly above a record sampled from the oldest
//! region, the one cleaning empties next (TinyLFU's duel; ties refuse). Measured on real traces
//! (`scripts/bench/tier_sim.py`, docs/benchmarks.md): the duel alone starves traces whose reuse is
//! long-range (arc-P6: miss ratio 0.38 against 0.20), the doorkeeper alone writes more for the same hits.
//!
//! | rule (`tier2-admission`) | an ephemeral item leaving RAM without a copy is written when |
//! |---|---|
//! | `frequency` (default) | tier 2 has room, or sketch(item) >= 3, or sketch(item) > sketch(a victim of the oldest region) |
//! | `hits` | it was read at least `tier2-admit-hits` times while in RAM |
//! | `all` | always (also what fixed-mode `noeviction` does, whatever the rule) |
//!
//! On tier 2 (`shard/tier.rs`): the first read of a stub is served from the record without promoting it
//! and marks the stub read; a read of a marked stub promotes it (Ex-Tmem Algorithm 2: two references
//! promote) unless RAM is full and the reads come too rarely for RAM to serve it again
//! (`Shard::serves_without_promotion`). Cleaning copies a marked stub's record forward and clears the
//! mark (a second chance per lap, as CLOCK), and discards unmarked ones.
//!
//! Memory: the sketch holds 4 four-bit counters per expected key (2 bytes per key, `SKETCH_BYTES_MAX` at
//! most); the victim samples 8 key hashes per region (64 bytes per 4 MiB region).
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// The admission rule (`tier2-admission`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionRule {
    Frequency,
    Hits,
    All,
}

impl AdmissionRule {
    pub fn name(self) -> &'static str {
        match self {
            AdmissionRule::Frequency => "frequency",
            AdmissionRule::Hits => "hits",
            AdmissionRule::All => "all",
        }
    }

    pub fn from_name(name: &str) -> Option<AdmissionRule> {
        [
            AdmissionRule::Frequency,
            AdmissionRule::Hits,
            AdmissionRule::All,
        ]
        .into_iter()
        .find(|rule| rule.name().eq_ignore_ascii_case(name))
    }
}

/// Counters per 64-byte block of the sketch (8 words of 16 four-bit counters).
const BLOCK_WORDS: usize = 8;
const COUNTERS_PER_WORD: usize = 16;
const COUNTER_MAX: u64 = 15;
/// Rows of the count-min sketch: each key has one counter in each of 4 words of its block.
const ROWS: usize = 4;
const SKETCH_BYTES_MIN: usize = 4 << 10;
pub const SKETCH_BYTES_MAX: usize = 16 << 20;
/// Counters are halved after this many reads per expected key (TinyLFU's sample size: 10 x capacity).
const AGING_READS_PER_KEY: u64 = 10;
/// Reads (in the sketch's window) that admit an item to a full tier 2 without a duel. 2 admits more for
/// little gain, 4 loses hits on long-range reuse (tier_sim.py's sweep).
pub const FREQUENT_READS_MIN: u8 = 3;

/// A count-min sketch of 4-bit counters with periodic halving (Caffeine's `FrequencySketch` layout:
/// a key's 4 counters lie in one 64-byte block). Shared by all shards: increments are relaxed
/// load-and-store, so two racing increments may count once, which a frequency estimate tolerates.
pub struct FrequencySketch {
    words: Box<[AtomicU64]>,
    block_mask: usize,
    reads_since_aging: AtomicU64,
    aging_period_reads: u64,
    pub agings: AtomicU64,
}

impl FrequencySketch {
    /// A sketch for about `expected_keys` keys.
    pub fn new(expected_keys: u64) -> FrequencySketch {
        let wanted_bytes = (expected_keys as usize).saturating_mul(ROWS) / 2;
        let bytes = wanted_bytes
            .clamp(SKETCH_BYTES_MIN, SKETCH_BYTES_MAX)
            .next_power_of_two()
            .min(SKETCH_BYTES_MAX);
        let words = bytes / 8;
        debug_assert!(words.is_multiple_of(BLOCK_WORDS));
        FrequencySketch {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            block_mask: words / BLOCK_WORDS - 1,
            reads_since_aging: AtomicU64::new(0),
            aging_period_reads: AGING_READS_PER_KEY * (words * COUNTERS_PER_WORD / ROWS) as u64,
            agings: AtomicU64::new(0),
        }
    }

    pub fn bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// (word index, bit shift) of `hash`'s counter in each row.
    fn counters(&self, hash: u64) -> [(usize, u32); ROWS] {
        let spread = hash.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let block = (spread >> 32) as usize & self.block_mask;
        std::array::from_fn(|row| {
            let word = block * BLOCK_WORDS + row * 2 + ((spread >> row) & 1) as usize;
            let nibble = (spread >> (8 + row * 4)) & 15;
            (word, (nibble * 4) as u32)
        })
    }

    /// Counts one read of the key with `hash`.
    pub fn increment(&self, hash: u64) {
        for (word, shift) in self.counters(hash) {
            let value = self.words[word].load(Relaxed);
            if (value >> shift) & COUNTER_MAX < COUNTER_MAX {
                self.words[word].store(value + (1 << shift), Relaxed);
            }
        }
        if self.reads_since_aging.fetch_add(1, Relaxed) + 1 >= self.aging_period_reads {
            self.age();
        }
    }

    /// The key's estimated reads (0..=15) in the current aging period and the halved ones before it.
    pub fn estimate(&self, hash: u64) -> u8 {
        self.counters(hash)
            .into_iter()
            .map(|(word, shift)| ((self.words[word].load(Relaxed) >> shift) & COUNTER_MAX) as u8)
            .min()
            .expect("the sketch has rows")
    }

    /// Halves every counter, so the sketch follows what is read now (one thread does it per period).
    fn age(&self) {
        let reads = self.reads_since_aging.load(Relaxed);
        if reads < self.aging_period_reads
            || self
                .reads_since_aging
                .compare_exchange(reads, 0, Relaxed, Relaxed)
                .is_err()
        {
            return;
        }
        for word in self.words.iter() {
            let value = word.load(Relaxed);
            word.store((value >> 1) & 0x7777_7777_7777_7777, Relaxed);
        }
        self.agings.fetch_add(1, Relaxed);
    }
}

/// Samples per region of the key hashes of clean records written there (the candidates' opponents).
const SAMPLES_PER_REGION: usize = 8;

/// A reservoir of key hashes of the clean records in each tier-2 region.
pub struct VictimSamples {
    regions: Box<[RegionSamples]>,
}

struct RegionSamples {
    records: AtomicU32,
    hashes: [AtomicU64; SAMPLES_PER_REGION],
}

impl VictimSamples {
    pub fn new(regions: usize) -> VictimSamples {
        VictimSamples {
            regions: (0..regions)
                .map(|_| RegionSamples {
                    records: AtomicU32::new(0),
                    hashes: std::array::from_fn(|_| AtomicU64::new(0)),
                })
                .collect(),
        }
    }

    /// A clean record of the key with `hash` was written into `region`.
    pub fn record(&self, region: usize, hash: u64) {
        let Some(samples) = self.regions.get(region) else {
            return;
        };
        let seen = samples.records.fetch_add(1, Relaxed) as usize;
        // Reservoir sampling, the key hash as the random draw.
        let pick = if seen < SAMPLES_PER_REGION {
            seen
        } else {
            (hash.rotate_left(17) % (seen as u64 + 1)) as usize
        };
        if pick < SAMPLES_PER_REGION {
            samples.hashes[pick].store(hash, Relaxed);
        }
    }

    /// The region was emptied by cleaning.
    pub fn reset(&self, region: usize) {
        if let Some(samples) = self.regions.get(region) {
            samples.records.store(0, Relaxed);
        }
    }

    /// One sampled key hash of `region` (`draw` picks which), None when it holds no clean record.
    pub fn victim(&self, region: usize, draw: u64) -> Option<u64> {
        let samples = self.regions.get(region)?;
        let held = (samples.records.load(Relaxed) as usize).min(SAMPLES_PER_REGION);
        (held > 0).then(|| samples.hashes[(draw % held as u64) as usize].load(Relaxed))
    }
}

/// The admission state tier 2 shares between shards.
pub struct Admission {
    pub rule: AdmissionRule,
    /// For `AdmissionRule::Hits`: reads while in RAM an item needs.
    pub admit_hits_min: u8,
    pub sketch: FrequencySketch,
    pub samples: VictimSamples,
    draws: AtomicU64,
}

/// What the admission rule compares a candidate with when tier 2 is full.
pub struct Opponent {
    /// The region cleaning empties next.
    pub region: usize,
}

impl Admission {
    pub fn new(
        rule: AdmissionRule,
        admit_hits_min: u8,
        expected_keys: u64,
        regions: usize,
    ) -> Admission {
        Admission {
            rule,
            admit_hits_min,
            // Only the frequency rule reads the sketch: the others keep the smallest one.
            sketch: FrequencySketch::new(match rule {
                AdmissionRule::Frequency => expected_keys,
                _ => 0,
            }),
            samples: VictimSamples::new(regions),
            draws: AtomicU64::new(0),
        }
    }

    /// Counts a read of the key with `hash` (only the frequency rule uses the sketch, so only it hashes).
    pub fn note_read(&self, hash: impl FnOnce() -> u64) {
        if self.rule == AdmissionRule::Frequency {
            self.sketch.increment(hash());
        }
    }

    /// Whether an item with `hash`, read `hits` times while in RAM, is written to tier 2. `opponent`
    /// gives None while tier 2 has room to spare (asked only by the frequency rule: it locks tier 2).
    pub fn admits(&self, hash: u64, hits: u8, opponent: impl FnOnce() -> Option<Opponent>) -> bool {
        match self.rule {
            AdmissionRule::All => true,
            AdmissionRule::Hits => hits >= self.admit_hits_min,
            AdmissionRule::Frequency => {
                let Some(opponent) = opponent() else {
                    return true;
                };
                let reads = self.sketch.estimate(hash);
                if reads >= FREQUENT_READS_MIN {
                    return true;
                }
                let draw = self.draws.fetch_add(1, Relaxed);
                match self.samples.victim(opponent.region, draw) {
                    Some(victim) => reads > self.sketch.estimate(victim),
                    None => true,
                }
            }
        }
    }
}

/// Free regions tier-2 cleaning keeps ahead of writers: 4, or 1/64 of the regions when more (a burst of
/// writes between two maintenance rounds must find room), at most half.
pub fn regions_kept_free(regions_total: usize) -> usize {
    const REGIONS_KEPT_FREE_MIN: usize = 4;
    REGIONS_KEPT_FREE_MIN
        .max(regions_total / 64)
        .min(regions_total / 2)
        .max(2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sketch_counts_and_saturates() {
        let sketch = FrequencySketch::new(1 << 12);
        let hash = crate::hash_key(b"hot");
        assert_eq!(sketch.estimate(hash), 0);
        for expected in 1..=15 {
            sketch.increment(hash);
            assert!(sketch.estimate(hash) >= expected.min(15));
        }
        for _ in 0..10 {
            sketch.increment(hash);
        }
        assert_eq!(sketch.estimate(hash), 15, "counters stop at 15");
    }

    #[test]
    fn sketch_ages_by_halving() {
        let sketch = FrequencySketch::new(1 << 10);
        let hot = crate::hash_key(b"hot");
        for _ in 0..12 {
            sketch.increment(hot);
        }
        let before = sketch.estimate(hot);
        let period = sketch.aging_period_reads;
        for i in 0..period {
            sketch.increment(crate::hash_key(&i.to_le_bytes()));
        }
        assert!(sketch.agings.load(Relaxed) >= 1);
        assert!(
            sketch.estimate(hot) < before,
            "an aging halves the counters"
        );
    }

    #[test]
    fn sketch_size_is_bounded() {
        assert_eq!(FrequencySketch::new(0).bytes(), SKETCH_BYTES_MIN);
        assert_eq!(FrequencySketch::new(u64::MAX).bytes(), SKETCH_BYTES_MAX);
        assert_eq!(FrequencySketch::new(1 << 20).bytes(), 2 << 20);
    }

    #[test]
    fn frequency_rule_admits_with_room_and_compares_when_full() {
        let admission = Admission::new(AdmissionRule::Frequency, 1, 1 << 12, 4);
        let (hot, cold, victim) = (crate::hash_key(b"a"), crate::hash_key(b"b"), 7u64);
        assert!(
            admission.admits(cold, 0, || None),
            "room: everything is admitted"
        );
        assert!(
            admission.admits(cold, 0, || Some(Opponent { region: 1 })),
            "an empty region has no victim"
        );
        let full = || Some(Opponent { region: 1 });
        admission.samples.record(1, victim);
        admission.note_read(|| victim);
        admission.note_read(|| victim);
        admission.note_read(|| hot);
        assert!(
            !admission.admits(cold, 0, full),
            "never read: loses the duel"
        );
        assert!(!admission.admits(hot, 0, full), "read once: loses to twice");
        admission.note_read(|| hot);
        assert!(!admission.admits(hot, 0, full), "a tie refuses");
        admission.note_read(|| hot);
        assert!(
            admission.admits(hot, 0, full),
            "read 3 times: admitted whatever the victim"
        );
        for _ in 0..5 {
            admission.note_read(|| victim);
        }
        assert!(
            admission.admits(hot, 0, full),
            "the doorkeeper needs no duel"
        );
        let warm = crate::hash_key(b"warm");
        admission.samples.reset(1);
        admission.samples.record(1, cold);
        admission.note_read(|| warm);
        assert!(
            admission.admits(warm, 0, full),
            "read more than the victim: wins the duel"
        );
        admission.samples.reset(1);
        assert!(admission.admits(cold, 0, || Some(Opponent { region: 1 })));
    }

    #[test]
    fn other_rules() {
        let hits = Admission::new(AdmissionRule::Hits, 2, 16, 1);
        assert!(!hits.admits(1, 1, || None));
        assert!(hits.admits(1, 2, || Some(Opponent { region: 0 })));
        let all = Admission::new(AdmissionRule::All, 9, 16, 1);
        assert!(all.admits(1, 0, || Some(Opponent { region: 0 })));
        assert_eq!(AdmissionRule::from_name("HITS"), Some(AdmissionRule::Hits));
        assert_eq!(AdmissionRule::from_name("lfu"), None);
    }

    #[test]
    fn regions_kept_free_bounds() {
        assert_eq!(regions_kept_free(2), 2);
        assert_eq!(regions_kept_free(16), 4);
        assert_eq!(regions_kept_free(64), 4);
        assert_eq!(regions_kept_free(4096), 64);
    }

    proptest! {
        /// A count-min sketch never underestimates (below saturation and without aging).
        #[test]
        fn sketch_never_underestimates(keys in proptest::collection::vec(0u64..64, 1..200)) {
            let sketch = FrequencySketch::new(1 << 14);
            let mut exact = std::collections::HashMap::new();
            for key in &keys {
                sketch.increment(*key);
                *exact.entry(*key).or_insert(0u8) += 1;
            }
            for (key, count) in exact {
                prop_assert!(sketch.estimate(key) >= count.min(15));
            }
        }

        /// A region's victims are always hashes recorded in it since its last reset.
        #[test]
        fn victims_come_from_the_region(hashes in proptest::collection::vec(any::<u64>(), 1..100),
                                        draw in any::<u64>()) {
            let samples = VictimSamples::new(2);
            for hash in &hashes {
                samples.record(0, *hash);
            }
            prop_assert!(hashes.contains(&samples.victim(0, draw).unwrap()));
            prop_assert_eq!(samples.victim(1, draw), None);
        }
    }
}
