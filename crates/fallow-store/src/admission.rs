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
//! | `frequency` (default) | tier 2 has room, or sketch(item) >= 3 (while the doorkeeper is on), or sketch(item) > sketch(a victim of the oldest region) |
//! | `hits` | it was read at least `tier2-admit-hits` times while in RAM |
//! | `all` | always (also what fixed-mode `noeviction` does, whatever the rule) |
//!
//! The doorkeeper adapts (`Doorkeeper`): a loop larger than both tiers reads every key 3 times, so the
//! doorkeeper admits all of it and cleaning discards it unread (lirs-loop: miss ratio 0.998 against
//! W-TinyLFU's 0.50). Cleaning judges the doorkeeper's records: when under 1/8 of those it reaches were
//! read on tier 2 since written, the duel alone decides for a while, then the doorkeeper is tried again.
//!
//! On tier 2 (`shard/tier.rs`): the first read of a stub is served from the record without promoting it
//! and marks the stub read; a read of a marked stub promotes it (Ex-Tmem Algorithm 2: two references
//! promote) unless RAM is full and the reads come too rarely for RAM to serve it again
//! (`Shard::serves_without_promotion`). Cleaning copies a marked stub's record forward and clears the
//! mark (a second chance per lap, as CLOCK), and discards unmarked ones.
//!
//! Memory: the sketch holds 4 four-bit counters per expected key (2 bytes per key, `SKETCH_BYTES_MAX` at
//! most); the victim samples 8 key hashes per region (64 bytes per 4 MiB region).
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};

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

/// Why an item leaving RAM is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admitted {
    /// Tier 2 has room, or the rule admits everything (`all`, `hits`).
    Room,
    /// Read at least `FREQUENT_READS_MIN` times lately (the frequency rule's doorkeeper).
    Doorkeeper,
    /// Ranked above a record of the region cleaned next (the frequency rule's duel).
    Duel,
}

/// Records of the doorkeeper's that cleaning must judge for a verdict: an eighth of tier 2's bytes, and
/// at least this many.
const VERDICT_RECORDS_MIN: u64 = 64;
/// A verdict keeps the doorkeeper on when at least 1 in this many of its records was read on tier 2
/// (lirs-loop at 10% RAM: miss ratio 0.539 with 8, 0.564 with 16; no other trace switches it off with
/// either, tier_sim.py).
const USEFUL_ONE_IN: u64 = 8;
/// The longest the doorkeeper stays off, in tier-2 capacities of departures from RAM.
const OFF_LAPS_MAX: u64 = 64;

/// The frequency rule's doorkeeper, switched off while its records go unread (tier_sim.py's `fallow`
/// runs the same rule). Verdicts: once cleaning has turned tier 2 over since the doorkeeper came on
/// (so every record it judges was written under it), every doorkeeper record cleaning reaches counts,
/// read on tier 2 (or promoted) since written or not; after an eighth of tier 2's bytes of them, a
/// verdict. A failed one switches the doorkeeper off for `off_laps` tier-2 capacities of items leaving
/// RAM without a copy (the duel alone decides meanwhile), 1 at first, doubling after each failed trial
/// up to `OFF_LAPS_MAX`, back to 1 after a passed verdict.
pub struct Doorkeeper {
    on: AtomicBool,
    capacity_bytes: u64,
    verdict_bytes: AtomicU64,
    verdict_records: AtomicU64,
    verdict_used: AtomicU64,
    /// Verdicts count once tier 2 has cleaned this many regions (its `regions_cleaned`).
    settled_at_regions: AtomicU64,
    /// Bytes of items that left RAM without a copy while the doorkeeper was off, and the figure at
    /// which it is tried again.
    departed_off_bytes: AtomicU64,
    trial_at_bytes: AtomicU64,
    off_laps: AtomicU64,
    pub switched_off: AtomicU64,
    /// Items the doorkeeper would have admitted while off (the duel judged them).
    pub passed_while_off: AtomicU64,
}

impl Doorkeeper {
    fn new(capacity_bytes: u64) -> Doorkeeper {
        Doorkeeper {
            on: AtomicBool::new(true),
            capacity_bytes: capacity_bytes.max(1),
            verdict_bytes: AtomicU64::new(0),
            verdict_records: AtomicU64::new(0),
            verdict_used: AtomicU64::new(0),
            settled_at_regions: AtomicU64::new(0),
            departed_off_bytes: AtomicU64::new(0),
            trial_at_bytes: AtomicU64::new(0),
            off_laps: AtomicU64::new(1),
            switched_off: AtomicU64::new(0),
            passed_while_off: AtomicU64::new(0),
        }
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Relaxed)
    }

    /// An item of `bytes` leaves RAM without a copy; tier 2 has cleaned `regions_cleaned` regions of
    /// its `regions`. While off, this is the clock of the next trial.
    pub fn note_departure(&self, bytes: u64, regions_cleaned: u64, regions: u64) {
        if self.is_on() {
            return;
        }
        let departed = self.departed_off_bytes.fetch_add(bytes, Relaxed) + bytes;
        if departed >= self.trial_at_bytes.load(Relaxed) && !self.on.swap(true, Relaxed) {
            self.reset_verdict();
            self.settled_at_regions
                .store(regions_cleaned + regions, Relaxed);
        }
    }

    /// Cleaning reached a live record of `bytes` the doorkeeper admitted; `used`: read on tier 2 (or
    /// promoted) since written; tier 2 has cleaned `regions_cleaned` regions.
    pub fn note_cleaned(&self, used: bool, bytes: u64, regions_cleaned: u64) {
        if !self.is_on() || regions_cleaned < self.settled_at_regions.load(Relaxed) {
            return;
        }
        let judged_bytes = self.verdict_bytes.fetch_add(bytes, Relaxed) + bytes;
        let judged = self.verdict_records.fetch_add(1, Relaxed) + 1;
        let used_count = self.verdict_used.fetch_add(u64::from(used), Relaxed) + u64::from(used);
        if judged < VERDICT_RECORDS_MIN || judged_bytes < self.capacity_bytes / 8 {
            return;
        }
        self.reset_verdict();
        if used_count * USEFUL_ONE_IN >= judged {
            self.off_laps.store(1, Relaxed);
            return;
        }
        if self.on.swap(false, Relaxed) {
            let laps = self.off_laps.load(Relaxed);
            self.off_laps.store((laps * 2).min(OFF_LAPS_MAX), Relaxed);
            let departed = self.departed_off_bytes.load(Relaxed);
            self.trial_at_bytes
                .store(departed + laps * self.capacity_bytes, Relaxed);
            self.switched_off.fetch_add(1, Relaxed);
        }
    }

    fn reset_verdict(&self) {
        self.verdict_bytes.store(0, Relaxed);
        self.verdict_records.store(0, Relaxed);
        self.verdict_used.store(0, Relaxed);
    }
}

/// The admission state tier 2 shares between shards.
pub struct Admission {
    pub rule: AdmissionRule,
    /// For `AdmissionRule::Hits`: reads while in RAM an item needs.
    pub admit_hits_min: u8,
    pub sketch: FrequencySketch,
    pub samples: VictimSamples,
    pub doorkeeper: Doorkeeper,
    draws: AtomicU64,
}

/// What the admission rule compares a candidate with when tier 2 is full.
pub struct Opponent {
    /// The region cleaning empties next.
    pub region: usize,
}

impl Admission {
    /// `capacity_bytes`: tier 2's size (the doorkeeper's verdicts and off periods are counted in it).
    pub fn new(
        rule: AdmissionRule,
        admit_hits_min: u8,
        expected_keys: u64,
        regions: usize,
        capacity_bytes: u64,
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
            doorkeeper: Doorkeeper::new(capacity_bytes),
            draws: AtomicU64::new(0),
        }
    }

    /// Counts a read of the key with `hash` (only the frequency rule uses the sketch, so only it hashes).
    pub fn note_read(&self, hash: impl FnOnce() -> u64) {
        if self.rule == AdmissionRule::Frequency {
            self.sketch.increment(hash());
        }
    }

    /// Whether (and why) an item with `hash`, read `hits` times while in RAM, is written to tier 2.
    /// `opponent` gives None while tier 2 has room to spare (asked only by the frequency rule: it
    /// locks tier 2).
    pub fn admits(
        &self,
        hash: u64,
        hits: u8,
        opponent: impl FnOnce() -> Option<Opponent>,
    ) -> Option<Admitted> {
        match self.rule {
            AdmissionRule::All => Some(Admitted::Room),
            AdmissionRule::Hits => (hits >= self.admit_hits_min).then_some(Admitted::Room),
            AdmissionRule::Frequency => {
                let Some(opponent) = opponent() else {
                    return Some(Admitted::Room);
                };
                let reads = self.sketch.estimate(hash);
                if reads >= FREQUENT_READS_MIN {
                    if self.doorkeeper.is_on() {
                        return Some(Admitted::Doorkeeper);
                    }
                    self.doorkeeper.passed_while_off.fetch_add(1, Relaxed);
                }
                let draw = self.draws.fetch_add(1, Relaxed);
                let wins = match self.samples.victim(opponent.region, draw) {
                    Some(victim) => reads > self.sketch.estimate(victim),
                    None => true,
                };
                wins.then_some(Admitted::Duel)
            }
        }
    }
}

/// True while tier 2 has more free regions than cleaning keeps (+ 1): the frequency rule admits every
/// value then, and becomes selective below (where cleaning has not started yet).
pub fn regions_to_spare(regions_free: usize, regions_total: usize) -> bool {
    regions_free > regions_kept_free(regions_total) + 1
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
        let admission = Admission::new(AdmissionRule::Frequency, 1, 1 << 12, 4, 1 << 20);
        let (hot, cold, victim) = (crate::hash_key(b"a"), crate::hash_key(b"b"), 7u64);
        assert_eq!(
            admission.admits(cold, 0, || None),
            Some(Admitted::Room),
            "room: everything is admitted"
        );
        assert!(
            admission
                .admits(cold, 0, || Some(Opponent { region: 1 }))
                .is_some(),
            "an empty region has no victim"
        );
        let full = || Some(Opponent { region: 1 });
        admission.samples.record(1, victim);
        admission.note_read(|| victim);
        admission.note_read(|| victim);
        admission.note_read(|| hot);
        assert!(
            admission.admits(cold, 0, full).is_none(),
            "never read: loses the duel"
        );
        assert!(
            admission.admits(hot, 0, full).is_none(),
            "read once: loses to twice"
        );
        admission.note_read(|| hot);
        assert!(admission.admits(hot, 0, full).is_none(), "a tie refuses");
        admission.note_read(|| hot);
        assert_eq!(
            admission.admits(hot, 0, full),
            Some(Admitted::Doorkeeper),
            "read 3 times: admitted whatever the victim"
        );
        for _ in 0..5 {
            admission.note_read(|| victim);
        }
        assert!(
            admission.admits(hot, 0, full).is_some(),
            "the doorkeeper needs no duel"
        );
        let warm = crate::hash_key(b"warm");
        admission.samples.reset(1);
        admission.samples.record(1, cold);
        admission.note_read(|| warm);
        assert_eq!(
            admission.admits(warm, 0, full),
            Some(Admitted::Duel),
            "read more than the victim: wins the duel"
        );
        admission.samples.reset(1);
        assert!(admission
            .admits(cold, 0, || Some(Opponent { region: 1 }))
            .is_some());
    }

    /// Judges `records` doorkeeper records of 1 KiB, `used` of them read on tier 2.
    fn judge(doorkeeper: &Doorkeeper, records: u64, used: u64, regions_cleaned: u64) {
        for index in 0..records {
            doorkeeper.note_cleaned(index < used, 1024, regions_cleaned);
        }
    }

    #[test]
    fn the_doorkeeper_goes_off_while_its_records_go_unread_and_is_tried_again() {
        // 1 MiB of tier 2: a verdict every 128 records of 1 KiB.
        let admission = Admission::new(AdmissionRule::Frequency, 1, 1 << 12, 4, 1 << 20);
        let doorkeeper = &admission.doorkeeper;
        let hot = crate::hash_key(b"hot");
        for _ in 0..3 {
            admission.note_read(|| hot);
        }
        let full = || Some(Opponent { region: 1 });
        admission.samples.record(1, hot);
        assert_eq!(admission.admits(hot, 0, full), Some(Admitted::Doorkeeper));
        // 16 of 128 read (1 in 8): it pays, it stays.
        judge(doorkeeper, 128, 16, 0);
        assert!(doorkeeper.is_on());
        // 15 of 128: off; the same item now meets the duel (a tie with itself: refused).
        judge(doorkeeper, 128, 15, 0);
        assert!(!doorkeeper.is_on());
        assert_eq!(doorkeeper.switched_off.load(Relaxed), 1);
        assert_eq!(admission.admits(hot, 0, full), None);
        assert_eq!(doorkeeper.passed_while_off.load(Relaxed), 1);
        judge(doorkeeper, 1000, 0, 0);
        assert_eq!(doorkeeper.switched_off.load(Relaxed), 1, "off: no verdicts");
        // One capacity of departures later, a trial; its verdicts count once cleaning has turned tier 2
        // (4 regions) over.
        doorkeeper.note_departure((1 << 20) - 1, 10, 4);
        assert!(!doorkeeper.is_on());
        doorkeeper.note_departure(1, 10, 4);
        assert!(doorkeeper.is_on());
        judge(doorkeeper, 1000, 0, 13);
        assert!(
            doorkeeper.is_on(),
            "records written before the trial are not judged"
        );
        judge(doorkeeper, 128, 0, 14);
        assert!(!doorkeeper.is_on(), "the trial failed");
        // The next off period is twice as long.
        doorkeeper.note_departure((2 << 20) - 1, 20, 4);
        assert!(!doorkeeper.is_on());
        doorkeeper.note_departure(1, 20, 4);
        assert!(doorkeeper.is_on());
        // A passed verdict brings the off period back to one capacity.
        judge(doorkeeper, 128, 64, 24);
        assert!(doorkeeper.is_on());
        judge(doorkeeper, 128, 0, 24);
        let departed = doorkeeper.departed_off_bytes.load(Relaxed);
        assert_eq!(
            doorkeeper.trial_at_bytes.load(Relaxed),
            departed + (1 << 20)
        );
    }

    #[test]
    fn other_rules() {
        let hits = Admission::new(AdmissionRule::Hits, 2, 16, 1, 1 << 20);
        assert!(hits.admits(1, 1, || None).is_none());
        assert!(hits.admits(1, 2, || Some(Opponent { region: 0 })).is_some());
        let all = Admission::new(AdmissionRule::All, 9, 16, 1, 1 << 20);
        assert!(all.admits(1, 0, || Some(Opponent { region: 0 })).is_some());
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
