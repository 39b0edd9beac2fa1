//! The store's side of tier 2: attaching it to every shard, replaying it at start (recovery), cleaning
//! its oldest region when free regions run low, and its counters summed over the shards.
use crate::shard::{Liveness, TierLink};
use crate::tier2::record::{self, RecordClass, RecordKind};
use crate::tier2::{walk_region, Slot, Tier2, Tier2Error};
use crate::{hash_key, now_ms, Store};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl crate::Guards<'_> {
    /// Fixed mode with tier 2: makes room by demoting the oldest segments (held shards first, then shards
    /// free right now) until `additional_bytes` fit under maxmemory. Err when nothing more can leave RAM.
    pub(crate) fn make_tier2_room(
        &mut self,
        additional_bytes: usize,
    ) -> Result<(), crate::OutOfMemory> {
        // One write does a bounded share of a large excess (after CONFIG SET cut maxmemory): the
        // housekeeping task demotes the rest within a tick, so no write stalls behind gigabytes.
        const STEPS_PER_WRITE_MAX: usize = 32;
        let now = now_ms();
        let over = |store: &Store| store.would_exceed_maxmemory(additional_bytes);
        // Slices that only move what stays (stubs, hot items) still progress: they empty the oldest
        // segments (recovered stubs sit there) on the way to ones with values to demote.
        let (mut steps, mut demoted_any) = (0, false);
        while over(self.store) {
            if steps >= STEPS_PER_WRITE_MAX {
                return if demoted_any {
                    Ok(())
                } else {
                    Err(crate::OutOfMemory)
                };
            }
            steps += 1;
            let mut progressed = false;
            for (_, shard) in self.guards.iter_mut() {
                let step = shard.demote_step(now, true);
                progressed |= step.progressed;
                demoted_any |= step.objects > 0;
                if !over(self.store) {
                    return Ok(());
                }
            }
            if !progressed {
                progressed = self.demote_unlocked(now, &mut demoted_any);
            }
            if !progressed {
                return Err(crate::OutOfMemory);
            }
        }
        Ok(())
    }

    /// One demotion slice on a shard this command does not hold (try_lock); false when none progressed.
    fn demote_unlocked(&self, now: u64, demoted_any: &mut bool) -> bool {
        for (index, shard) in self.store.shards.iter().enumerate() {
            if self.guards.iter().any(|(held, _)| *held == index) {
                continue;
            }
            let Some(mut shard) = shard.try_lock() else {
                continue;
            };
            let step = shard.demote_step(now, true);
            drop(shard);
            *demoted_any |= step.objects > 0;
            if step.progressed {
                return true;
            }
        }
        false
    }
}

/// What recovery found.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecoveryReport {
    pub regions: usize,
    pub records: u64,
    /// Keys present after the replay (as stubs: values stay on tier 2 until read).
    pub keys: u64,
    pub corrupt_records: u64,
    /// Clean (ephemeral) records skipped: they are kept only over a clean shutdown.
    pub clean_skipped: u64,
    pub next_lsn: u64,
    pub duration: Duration,
    pub bytes_read: u64,
}

impl Store {
    /// Connects every shard to tier 2.
    pub fn attach_tier2(&self, link: TierLink) {
        for shard in self.shards.iter() {
            shard.lock().attach_tier2(link.clone());
        }
        let _ = self.tier2.set(link.tier2.clone());
        let _ = self.tier_link.set(link.clone());
        self.memory.pool.set_tier2_attached();
    }

    pub fn tier2(&self) -> Option<&Arc<Tier2>> {
        self.tier2.get()
    }

    /// Tier 2 and its admission state, once attached.
    pub fn tier_link(&self) -> Option<&TierLink> {
        self.tier_link.get()
    }

    /// Replays tier 2's regions (oldest first) into the keyspaces: value records become stubs, tombstones
    /// and FLUSHDB/SWAPDB records apply in order. A clean record is replayed only when `clean_slots` (the
    /// manifest a clean shutdown wrote: the clean records live then) lists it: after a crash, RAM may
    /// have held newer ephemeral values than any clean copy. Corrupt records are counted and skipped.
    /// `progress` is called after each region with (done, total).
    pub fn recover_tier2(
        &self,
        tier2: &Tier2,
        regions: &[(u32, u64)],
        clean_slots: Option<&std::collections::HashSet<u64>>,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<RecoveryReport, Tier2Error> {
        let started = Instant::now();
        let now = now_ms();
        let mut report = RecoveryReport {
            regions: regions.len(),
            ..RecoveryReport::default()
        };
        let mut newest_lsn = 0;
        // The next region is read while this one is parsed, into buffers reused throughout.
        let mut reader = tier2.read_regions(regions);
        let mut done = 0;
        while let Some(read) = reader.next_region() {
            let (index, region) = read?;
            report.bytes_read += region.len() as u64;
            report.corrupt_records +=
                walk_region(&tier2.config, index, region, |slot, header, encoded| {
                    report.records += 1;
                    newest_lsn = newest_lsn.max(header.lsn);
                    let listed = || clean_slots.is_some_and(|slots| slots.contains(&slot.0));
                    if header.class == RecordClass::Clean && !listed() {
                        report.clean_skipped += 1;
                        return;
                    }
                    self.replay(slot, header, encoded, now);
                });
            done += 1;
            progress(done, regions.len());
        }
        tier2
            .stats
            .corrupt_records
            .fetch_add(report.corrupt_records, Ordering::Relaxed);
        report.keys = (0..self.shards.len())
            .map(|index| self.lock(index).key_total() as u64)
            .sum();
        report.next_lsn = newest_lsn + 1;
        report.duration = started.elapsed();
        Ok(report)
    }

    fn replay(&self, slot: Slot, header: &record::RecordHeader, encoded: &[u8], now: u64) {
        let key = record::key_of(header, encoded);
        let keyspace = header.keyspace as usize;
        if !crate::pool::is_keyspace_address(keyspace) {
            return;
        }
        match header.kind {
            RecordKind::Value(_) => self
                .lock(self.shard_index(key))
                .recover_value(slot, header, key, now),
            RecordKind::Tombstone => self
                .lock(self.shard_index(key))
                .recover_tombstone(keyspace, key),
            RecordKind::FlushDb => {
                let value = record::value_of(header, encoded);
                if value.len() == 8 {
                    let shard = u32::from_le_bytes(value[..4].try_into().unwrap());
                    let count = u32::from_le_bytes(value[4..].try_into().unwrap()).max(1);
                    for index in 0..self.shards.len() {
                        self.lock(index).recover_flush(keyspace, shard, count);
                    }
                }
            }
            RecordKind::SwapDb => {
                let value = record::value_of(header, encoded);
                let Ok(other) = <[u8; 8]>::try_from(value) else {
                    return;
                };
                let other = u64::from_le_bytes(other) as usize;
                let (a, b) = (
                    crate::pool::Address::of(keyspace),
                    crate::pool::Address::of(other),
                );
                if crate::pool::is_keyspace_address(other)
                    && a.namespace == b.namespace
                    && a.db < self.databases
                    && b.db < self.databases
                {
                    for index in 0..self.shards.len() {
                        self.lock(index).swap_dbs(keyspace, other);
                    }
                }
            }
        }
    }

    /// The slots of the clean (ephemeral) records something in RAM still refers to: the manifest a clean
    /// shutdown writes so the next start keeps them (a warm restart).
    pub fn live_clean_slots(&self) -> Vec<u64> {
        let mut slots = Vec::new();
        for shard in self.shards.iter() {
            shard.lock().collect_clean_slots(&mut slots);
        }
        slots
    }

    /// Clean-ahead over every shard, at most `budget_bytes` in all, while resident bytes are at least 3/4
    /// of the RAM limit (the elastic pool's, or maxmemory): below that no shrink is near. Returns bytes
    /// written.
    pub fn tier2_clean_ahead(&self, budget_bytes: usize) -> usize {
        let limit = match self.pool_limit_bytes() {
            0 => self.maxmemory_bytes(),
            limit => limit,
        };
        if self.tier2.get().is_none() || limit == 0 || self.resident_bytes() < limit / 4 * 3 {
            return 0;
        }
        let per_shard = budget_bytes.div_ceil(self.shards.len());
        let mut written = 0;
        for shard in self.shards.iter() {
            if written >= budget_bytes {
                break;
            }
            written += shard.lock().clean_ahead_step(per_shard);
        }
        written
    }

    /// Cleans tier 2 while its free regions are below `free_regions_min`, at most `regions_max` regions
    /// per call; returns the regions cleaned.
    pub fn tier2_maintain(
        &self,
        free_regions_min: usize,
        regions_max: usize,
    ) -> Result<usize, Tier2Error> {
        let Some(tier2) = self.tier2.get() else {
            return Ok(0);
        };
        let mut cleaned = 0;
        while cleaned < regions_max && tier2.regions_free_total().0 < free_regions_min {
            if !self.tier2_clean_oldest()? {
                break;
            }
            cleaned += 1;
        }
        Ok(cleaned)
    }

    /// A log at the admission rule's limit (free regions ≤ what cleaning keeps + 1) that refuses values
    /// is never cleaned (cleaning starts below that), so one full of records nothing refers to any more
    /// (overwritten, deleted) would refuse everything for good. At most once per `DEAD_PROBE_INTERVAL_MS`
    /// and only after refusals, this reads the oldest region and counts its dead bytes (no write, no
    /// eviction); when at least half of it is dead it is cleaned: its room costs almost nothing. True
    /// when a region was cleaned.
    pub fn tier2_probe_dead(&self, now_ms: u64) -> Result<bool, Tier2Error> {
        const DEAD_PROBE_INTERVAL_MS: u64 = 1000;
        let Some(tier2) = self.tier2.get() else {
            return Ok(false);
        };
        let stats = &tier2.stats;
        let refusals = stats.shards.admissions_refused.load(Ordering::Relaxed);
        let (free, total) = tier2.regions_free_total();
        if crate::admission::regions_to_spare(free, total)
            || refusals == stats.refusals_at_last_probe.load(Ordering::Relaxed)
            || now_ms < stats.last_probe_ms.load(Ordering::Relaxed) + DEAD_PROBE_INTERVAL_MS
        {
            return Ok(false);
        }
        stats
            .refusals_at_last_probe
            .store(refusals, Ordering::Relaxed);
        stats.last_probe_ms.store(now_ms, Ordering::Relaxed);
        let Some((index, _)) = tier2.oldest_region() else {
            return Ok(false);
        };
        let region = tier2.read_region(index)?;
        let (mut record_bytes, mut dead_bytes) = (0, 0);
        walk_region(&tier2.config, index, &region, |slot, header, encoded| {
            record_bytes += slot.padded_bytes() as u64;
            if self.record_is_dead(slot, header, encoded) {
                dead_bytes += slot.padded_bytes() as u64;
            }
        });
        stats.dead_probes.fetch_add(1, Ordering::Relaxed);
        // The bytes just read serve the cleaning too, while the region is still the oldest.
        if dead_bytes * 2 < record_bytes
            || tier2.oldest_region().map(|(oldest, _)| oldest) != Some(index)
        {
            return Ok(false);
        }
        self.clean_region(tier2, index, &region)?;
        Ok(true)
    }

    /// Whether nothing refers to the record at `slot` any more (cleaning would drop it for nothing).
    fn record_is_dead(&self, slot: Slot, header: &record::RecordHeader, encoded: &[u8]) -> bool {
        let Some((keyspace, key)) = value_key(header, encoded) else {
            return true;
        };
        let shard = self.lock(crate::shard_of_hash(hash_key(key), self.shards.len()));
        matches!(shard.liveness(keyspace, key, slot), Liveness::Dead)
    }

    /// Cleans the oldest region: live persistent records are copied to the log's head, clean records
    /// read often enough while on tier 2 are copied too, the rest are discarded (their stubs go: cache
    /// evictions), tombstones and keyspace events are dropped (everything older than them is gone with
    /// this region, the oldest). False when there is no region to clean.
    pub fn tier2_clean_oldest(&self) -> Result<bool, Tier2Error> {
        let Some(tier2) = self.tier2.get() else {
            return Ok(false);
        };
        if tier2.oldest_region().is_none() {
            // Sealed regions join the list once written: write them now rather than wait for the writer.
            tier2.flush_and_sync()?;
        }
        let Some((index, _)) = tier2.oldest_region() else {
            return Ok(false);
        };
        let region = tier2.read_region(index)?;
        self.clean_region(tier2, index, &region)?;
        Ok(true)
    }

    /// Cleans region `index`, the oldest, whose bytes are `region`.
    fn clean_region(&self, tier2: &Tier2, index: u32, region: &[u8]) -> Result<(), Tier2Error> {
        let mut failure = None;
        let (mut record_bytes, mut dead_bytes) = (0, 0);
        let corrupt = walk_region(&tier2.config, index, region, |slot, header, encoded| {
            if failure.is_some() {
                return;
            }
            record_bytes += slot.padded_bytes() as u64;
            match self.clean_record(tier2, slot, header, encoded) {
                Ok(Fate::Dead) => dead_bytes += slot.padded_bytes() as u64,
                Ok(Fate::Referred) => {}
                Err(error) => failure = Some(error),
            }
        });
        tier2
            .stats
            .corrupt_records
            .fetch_add(corrupt, Ordering::Relaxed);
        if let Some(error) = failure {
            return Err(error);
        }
        tier2.stats.note_cleaned_region(dead_bytes, record_bytes);
        tier2.free_oldest_region(index)?;
        if let Some(link) = self.tier_link() {
            link.admission.samples.reset(index as usize);
        }
        Ok(())
    }

    /// Cleans one record; `Fate::Dead` when nothing referred to it (an overwritten, deleted or expired
    /// value, a tombstone), so emptying its region freed its bytes for nothing.
    fn clean_record(
        &self,
        tier2: &Tier2,
        slot: Slot,
        header: &record::RecordHeader,
        encoded: &[u8],
    ) -> Result<Fate, Tier2Error> {
        let Some((keyspace, key)) = value_key(header, encoded) else {
            return Ok(Fate::Dead);
        };
        let mut shard = self.lock(crate::shard_of_hash(hash_key(key), self.shards.len()));
        let (keep, doorkeeper_verdict) = match shard.liveness(keyspace, key, slot) {
            Liveness::Dead => return Ok(Fate::Dead),
            Liveness::Swap => (true, None),
            Liveness::CleanStub {
                read_on_tier2,
                doorkeeper,
            } => (read_on_tier2, doorkeeper.then_some(read_on_tier2)),
            Liveness::CleanResident { doorkeeper } => (false, doorkeeper.then_some(true)),
        };
        if let (Some(used), Some(link)) = (doorkeeper_verdict, self.tier_link()) {
            link.admission.doorkeeper.note_cleaned(
                used,
                slot.padded_bytes() as u64,
                tier2.stats.regions_cleaned.load(Ordering::Relaxed),
            );
        }
        if !keep {
            shard.discard_clean(keyspace, key, slot);
            tier2.stats.clean_discarded.fetch_add(1, Ordering::Relaxed);
            return Ok(Fate::Referred);
        }
        // A clean record is a cache's copy: when even cleaning finds no room for it (every record
        // ahead of it was kept too), it is discarded rather than fail the cleaning, which would leave
        // the log full for good. Clean copies leave the last free region to persistent records.
        let clean = header.class == record::RecordClass::Clean;
        let moved = match tier2.append_encoded(encoded, usize::from(clean)) {
            Ok(moved) => moved,
            Err(Tier2Error::Full) if clean => {
                shard.discard_clean(keyspace, key, slot);
                tier2.stats.clean_discarded.fetch_add(1, Ordering::Relaxed);
                return Ok(Fate::Referred);
            }
            Err(error) => return Err(error),
        };
        tier2.stats.cleaned_records.fetch_add(1, Ordering::Relaxed);
        tier2
            .stats
            .cleaned_bytes
            .fetch_add(slot.padded_bytes() as u64, Ordering::Relaxed);
        shard.repoint(keyspace, key, slot, moved);
        if header.class == record::RecordClass::Clean {
            if let Some(link) = self.tier_link() {
                link.admission
                    .samples
                    .record(link.region_of(moved), hash_key(key));
            }
        }
        Ok(Fate::Referred)
    }
}

/// The keyspace and key of a value record in a keyspace; None for tombstones, keyspace events and
/// records of other spaces.
fn value_key<'a>(header: &record::RecordHeader, encoded: &'a [u8]) -> Option<(usize, &'a [u8])> {
    let keyspace = header.keyspace as usize;
    (matches!(header.kind, RecordKind::Value(_)) && crate::pool::is_keyspace_address(keyspace))
        .then(|| (keyspace, record::key_of(header, encoded)))
}

/// What cleaning found a record to be.
enum Fate {
    Dead,
    Referred,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::{Admission, AdmissionRule};
    use crate::pool::{keyspace, TenantKind, TenantSpec};
    use crate::tier2::tests::{config, TempDir};
    use crate::tier2::FsyncPolicy;
    use crate::types::HashValue;
    use crate::{EvictionPolicy, StoreConfig};

    const SHARDS: usize = 4;

    fn tier_stats(store: &Store) -> &crate::tier2::TierStats {
        &store.tier2().unwrap().stats.shards
    }

    fn store(maxmemory_bytes: usize) -> Store {
        let store = Store::new(&StoreConfig {
            shards: SHARDS,
            databases: 4,
            segment_bytes: 64 << 10,
            maxmemory_bytes,
            policy: EvictionPolicy::NoEviction,
        });
        let spec = |name: &str, kind| TenantSpec {
            name: name.into(),
            weight: 100,
            kind,
            shared: false,
            tier2: true,
        };
        assert_eq!(
            store.define_tenant(spec("keep", TenantKind::Persistent)),
            Ok(1)
        );
        assert_eq!(
            store.define_tenant(spec("cache", TenantKind::Ephemeral)),
            Ok(2)
        );
        store
    }

    /// Opens tier 2 in `dir`, replays it into `store` and attaches it (admission: read once in RAM).
    fn attach(store: &Store, dir: &TempDir, regions: usize) -> (Arc<Tier2>, RecoveryReport) {
        attach_with(store, dir, regions, AdmissionRule::Hits)
    }

    fn attach_with(
        store: &Store,
        dir: &TempDir,
        regions: usize,
        rule: AdmissionRule,
    ) -> (Arc<Tier2>, RecoveryReport) {
        let opened = Tier2::open(config(dir, regions, FsyncPolicy::Always)).unwrap();
        let report = store
            .recover_tier2(&opened.tier2, &opened.regions, None, |_, _| {})
            .unwrap();
        opened.tier2.start(report.next_lsn);
        store.attach_tier2(TierLink {
            tier2: opened.tier2.clone(),
            admission: Arc::new(Admission::new(
                rule,
                1,
                1 << 12,
                opened.tier2.config.regions(),
                opened.tier2.config.size_bytes,
            )),
        });
        (opened.tier2, report)
    }

    fn set(store: &Store, space: usize, key: &[u8], value: &[u8]) {
        let mut guards = store.lock_key(key);
        guards.make_room_for(value.len() + 128).unwrap();
        guards
            .shard(key)
            .set_string(space, key, value, 0, 0, now_ms());
    }

    /// A write that makes no room first: the store goes over `maxmemory` (as promotions and writes
    /// between two housekeeping ticks may).
    fn set_over_limit(store: &Store, space: usize, key: &[u8], value: &[u8]) {
        store
            .lock_key(key)
            .shard(key)
            .set_string(space, key, value, 0, 0, now_ms());
    }

    fn load(counter: &std::sync::atomic::AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    fn get(store: &Store, space: usize, key: &[u8]) -> Option<Vec<u8>> {
        let mut guards = store.lock_key(key);
        let shard = guards.shard(key);
        let value = shard.get_string(space, key, now_ms()).unwrap();
        value.map(|(bytes, _)| bytes.to_vec())
    }

    fn value(i: usize) -> Vec<u8> {
        format!("{i:08}").repeat(64).into_bytes()
    }

    #[test]
    fn persistent_writes_deletes_and_flushes_survive_a_restart() {
        let dir = TempDir::new("tiering-restart");
        let keep = keyspace(1, 1, 0);
        let keep_db1 = keyspace(1, 1, 1);
        let cache = keyspace(2, 2, 0);
        {
            let store = store(0);
            let (tier2, _) = attach(&store, &dir, 64);
            for i in 0..300 {
                set(&store, keep, format!("k{i}").as_bytes(), &value(i));
                set(&store, cache, format!("c{i}").as_bytes(), &value(i));
            }
            set(&store, keep, b"k7", b"overwritten");
            set(&store, keep_db1, b"gone", b"flushed");
            {
                let mut guards = store.lock_key(b"k9");
                assert!(guards.shard(b"k9").remove(keep, b"k9", now_ms()));
            }
            {
                let mut guards = store.lock_key(b"h");
                guards
                    .shard(b"h")
                    .update::<HashValue, _>(keep, b"h", now_ms(), true, |hash| {
                        hash.insert(b"field", b"value");
                    })
                    .unwrap();
            }
            store
                .lock_all()
                .iter_mut()
                .for_each(|shard| shard.flush_db(keep_db1));
            set(&store, keyspace(1, 1, 2), b"moved", b"to db 3");
            store
                .lock_all()
                .iter_mut()
                .for_each(|shard| shard.swap_dbs(keyspace(1, 1, 2), keyspace(1, 1, 3)));
            let (lsn, error) = crate::shard::take_thread_log();
            assert!(error.is_none() && lsn > 300);
            tier2.wait_durable(lsn, Duration::from_secs(5)).unwrap();
            // A crash: no shutdown, no flush beyond what `always` made durable.
        }
        let store = store(0);
        let (_, report) = attach(&store, &dir, 64);
        assert_eq!(report.corrupt_records, 0);
        assert_eq!(
            report.keys, 301,
            "299 strings + the hash; ephemeral data and flushed keys are gone"
        );
        assert_eq!(
            get(&store, keep, b"k7").as_deref(),
            Some(&b"overwritten"[..])
        );
        assert_eq!(get(&store, keep, b"k9"), None);
        assert_eq!(get(&store, keep_db1, b"gone"), None);
        assert_eq!(get(&store, keyspace(1, 1, 2), b"moved"), None);
        assert_eq!(
            get(&store, keyspace(1, 1, 3), b"moved").as_deref(),
            Some(&b"to db 3"[..])
        );
        assert_eq!(get(&store, cache, b"c1"), None);
        let all_read_back = || {
            (0..300)
                .filter(|&i| i != 7 && i != 9)
                .all(|i| get(&store, keep, format!("k{i}").as_bytes()) == Some(value(i)))
        };
        assert!(all_read_back());
        // A first read is served from tier 2; the second promotes (Ex-Tmem Algorithm 2).
        let stats = tier_stats(&store);
        assert!(stats.served_from_tier2.load(Ordering::Relaxed) >= 298);
        assert_eq!(stats.promoted_keys.load(Ordering::Relaxed), 0);
        assert!(all_read_back());
        assert!(stats.promoted_keys.load(Ordering::Relaxed) >= 298);
        let mut guards = store.lock_key(b"h");
        let hash = guards
            .shard(b"h")
            .read::<HashValue>(keep, b"h", now_ms())
            .unwrap()
            .unwrap();
        assert_eq!(hash.get(b"field"), Some(&b"value"[..]));
    }

    #[test]
    fn persistent_data_beyond_maxmemory_lives_on_tier2_and_reads_back() {
        let dir = TempDir::new("tiering-overflow");
        let keep = keyspace(1, 1, 0);
        let maxmemory = 256 << 10;
        let store = store(maxmemory);
        let (tier2, _) = attach(&store, &dir, 64);
        for i in 0..2000 {
            set(&store, keep, format!("k{i}").as_bytes(), &value(i));
            assert!(
                store.used_bytes() <= maxmemory + 4096,
                "{} used",
                store.used_bytes()
            );
        }
        let stats = tier_stats(&store);
        assert!(
            stats.demoted_keys.load(Ordering::Relaxed) > 1000,
            "{stats:?}"
        );
        let writes = stats.demotion_writes.load(Ordering::Relaxed);
        assert_eq!(writes, 0, "persistent data is on tier 2 already");
        assert!((0..2000).all(|i| get(&store, keep, format!("k{i}").as_bytes()) == Some(value(i))));
        assert!(store.used_bytes() <= maxmemory + 4096);
        assert!(tier2.stats.reads.load(Ordering::Relaxed) > 1000);
    }

    #[test]
    fn writes_after_a_restart_demote_past_the_recovered_stubs() {
        let dir = TempDir::new("tiering-restart-overflow");
        let keep = keyspace(1, 1, 0);
        let maxmemory = 256 << 10;
        {
            let store = store(maxmemory);
            let (tier2, _) = attach(&store, &dir, 64);
            for i in 0..1500 {
                set(&store, keep, format!("a{i}").as_bytes(), &value(i));
            }
            let (lsn, _) = crate::shard::take_thread_log();
            tier2.wait_durable(lsn, Duration::from_secs(5)).unwrap();
        }
        let store = store(maxmemory);
        attach(&store, &dir, 64);
        // The oldest segments now hold only stubs: room comes from moving them on to real values.
        for i in 0..1500 {
            set(&store, keep, format!("b{i}").as_bytes(), &value(i));
            assert!(
                store.used_bytes() <= maxmemory + 4096,
                "{} used",
                store.used_bytes()
            );
        }
        assert!((0..1500).all(|i| get(&store, keep, format!("a{i}").as_bytes()) == Some(value(i))));
        assert!((0..1500).all(|i| get(&store, keep, format!("b{i}").as_bytes()) == Some(value(i))));
    }

    #[test]
    fn ephemeral_data_is_demoted_when_admitted_and_dropped_when_not() {
        let dir = TempDir::new("tiering-ephemeral");
        let cache = keyspace(2, 2, 0);
        let maxmemory = 256 << 10;
        let store = store(maxmemory);
        store.set_policy(EvictionPolicy::AllKeysLru);
        attach(&store, &dir, 64);
        for i in 0..2000 {
            set(&store, cache, format!("c{i}").as_bytes(), &value(i));
            // Every even key is read once: the admission rule lets it onto tier 2.
            if i % 2 == 0 {
                get(&store, cache, format!("c{i}").as_bytes());
            }
        }
        let stats = tier_stats(&store);
        let writes = stats.demotion_writes.load(Ordering::Relaxed);
        assert!(
            writes > 0 && stats.admissions_refused.load(Ordering::Relaxed) > 0,
            "{stats:?}"
        );
        let present = |parity: usize| {
            (0..1500)
                .filter(|i| i % 2 == parity)
                .filter(|&i| get(&store, cache, format!("c{i}").as_bytes()) == Some(value(i)))
                .count()
        };
        let (read_once, never_read) = (present(0), present(1));
        assert!(read_once > 600, "{read_once} of 750 read-once keys kept");
        assert!(never_read < 100, "{never_read} of 750 never-read keys kept");
    }

    #[test]
    fn cleaning_copies_live_persistent_records_and_frees_regions() {
        let dir = TempDir::new("tiering-clean");
        let keep = keyspace(1, 1, 0);
        let store = store(0);
        let (tier2, _) = attach(&store, &dir, 12);
        // Rewrite 40 keys many times: most records die; cleaning keeps the live ones.
        for round in 0..30 {
            for i in 0..40 {
                set(
                    &store,
                    keep,
                    format!("k{i}").as_bytes(),
                    &value(round * 100 + i),
                );
            }
            store.tier2_maintain(6, 4).unwrap();
        }
        assert!(tier2.stats.regions_cleaned.load(Ordering::Relaxed) > 0);
        assert!(tier2.regions_free_total().0 >= 2);
        let (lsn, _) = crate::shard::take_thread_log();
        tier2.wait_durable(lsn, Duration::from_secs(5)).unwrap();
        drop(store);
        let restarted = self::store(0);
        attach(&restarted, &dir, 12);
        let store = restarted;
        assert!(
            (0..40).all(|i| get(&store, keep, format!("k{i}").as_bytes()) == Some(value(2900 + i)))
        );
    }

    /// Fills the ephemeral tenant past RAM (256 KiB) and tier 2 (`regions` x 64 KiB) with 512-byte
    /// values, cleaning as the server's maintenance does.
    fn fill_cache(
        store: &Store,
        tier2: &Tier2,
        keys: std::ops::Range<usize>,
        mut each: impl FnMut(usize),
    ) {
        let cache = keyspace(2, 2, 0);
        for i in keys {
            set(store, cache, format!("c{i}").as_bytes(), &value(i));
            each(i);
            let (_, total) = tier2.regions_free_total();
            store
                .tier2_maintain(crate::admission::regions_kept_free(total), 8)
                .unwrap();
        }
    }

    #[test]
    fn an_overshoot_of_maxmemory_is_demoted_with_writes_but_a_cut_writes_nothing() {
        let dir = TempDir::new("tiering-overshoot");
        let cache = keyspace(2, 2, 0);
        let store = store(0);
        store.set_policy(EvictionPolicy::AllKeysLru);
        // Admission by reads in RAM, which none of these keys had: the excess is written anyway.
        let (_tier2, _) = attach_with(&store, &dir, 256, AdmissionRule::Hits);
        for i in 0..2000 {
            set(&store, cache, format!("c{i}").as_bytes(), &value(i));
        }
        let stats = tier_stats(&store);
        // A limit set above what is used, then overshot (as promotions and writes do between two
        // housekeeping ticks): the excess is demoted with writes, nothing is lost.
        let used = store.used_bytes();
        store.set_maxmemory_bytes(used + (64 << 10));
        for i in 2000..2400 {
            set_over_limit(&store, cache, format!("c{i}").as_bytes(), &value(i));
        }
        assert!(store.used_bytes() > store.maxmemory_bytes(), "overshot");
        while store.enforce_maxmemory() {}
        assert!(store.used_bytes() <= store.maxmemory_bytes());
        assert!(load(&stats.demotion_writes) > 0);
        assert_eq!(load(&stats.admissions_refused), 0, "nothing dropped");
        for i in 0..2400 {
            assert_eq!(
                get(&store, cache, format!("c{i}").as_bytes()),
                Some(value(i)),
                "c{i}"
            );
        }
        // Lowering the limit below what is used is a reclaim: no write, what has no copy goes.
        let writes = load(&stats.demotion_writes);
        store.set_maxmemory_bytes(store.used_bytes() / 2);
        while store.enforce_maxmemory() {}
        assert!(store.used_bytes() <= store.maxmemory_bytes());
        assert_eq!(load(&stats.demotion_writes), writes, "a cut writes nothing");
        let existing = (0..2400).filter(|&i| exists(&store, cache, i)).count();
        assert!(existing < 2400, "values without a copy were dropped");
        // Once under the new limit, overshoots are demoted with writes again.
        for i in 2400..2800 {
            set(&store, cache, format!("c{i}").as_bytes(), &value(i));
        }
        set_over_limit(&store, cache, b"c9999", &value(9999));
        let refused = load(&stats.admissions_refused);
        while store.enforce_maxmemory() {}
        assert_eq!(load(&stats.admissions_refused), refused);
    }

    /// A store with 256 KiB of RAM under allkeys-lru and a 16-region tier 2 admitting by `rule`, in a
    /// directory named `name`.
    fn cache_store(name: &str, rule: AdmissionRule) -> (TempDir, Store, Arc<Tier2>) {
        let dir = TempDir::new(name);
        let store = store(256 << 10);
        store.set_policy(EvictionPolicy::AllKeysLru);
        let (tier2, _) = attach_with(&store, &dir, 16, rule);
        (dir, store, tier2)
    }

    /// A cache tenant filled 1,500 keys deep into 256 KiB of RAM (`tier2-admission all`), and the first
    /// `count` keys that went to tier 2 as stubs.
    fn cache_beyond_ram(name: &str, count: usize) -> (TempDir, Store, Arc<Tier2>, Vec<usize>) {
        let cache = keyspace(2, 2, 0);
        let (dir, store, tier2) = cache_store(name, AdmissionRule::All);
        fill_cache(&store, &tier2, 0..1500, |_| {});
        let stubs: Vec<usize> = (0..1500)
            .filter(|&i| is_stub(&store, cache, i))
            .take(count)
            .collect();
        assert_eq!(stubs.len(), count, "the first keys went to tier 2");
        (dir, store, tier2, stubs)
    }

    #[test]
    fn a_second_read_promotes_only_what_ram_would_serve_again() {
        let cache = keyspace(2, 2, 0);
        let (_dir, store, _tier2, stubs) = cache_beyond_ram("tiering-promotion-gate", 40);
        let read_all = || {
            for &i in &stubs {
                let key = format!("c{i}");
                assert_eq!(get(&store, cache, key.as_bytes()), Some(value(i)));
            }
        };
        let stats = tier_stats(&store);
        let promoted_before = load(&stats.promoted_keys);
        // RAM at its limit turns over within milliseconds here (as a release just measured): two reads
        // of a key a second apart at most are too rare for a promotion to pay, so both are served from
        // tier 2.
        for shard in store.shards.iter() {
            shard.lock().set_ram_residency(10, now_ms());
        }
        read_all();
        read_all();
        assert!(stubs.iter().all(|&i| is_stub(&store, cache, i)));
        assert_eq!(load(&stats.promoted_keys), promoted_before);
        assert_eq!(load(&stats.promotions_declined), 40);
        // RAM that last released an item an hour ago keeps items at least that long, whatever its
        // last estimate said: the same reads come often enough, and promote.
        let hour_ago_ms = now_ms() - 3_600_000;
        for shard in store.shards.iter() {
            shard.lock().set_ram_residency(10, hour_ago_ms);
        }
        read_all();
        assert_eq!(load(&stats.promoted_keys), promoted_before + 40);
        assert_eq!(load(&stats.promotions_declined), 40);
        read_all();
    }

    #[test]
    fn no_promotion_while_cleaning_is_behind() {
        let cache = keyspace(2, 2, 0);
        let (_dir, store, tier2, stubs) = cache_beyond_ram("tiering-promotion-behind", 40);
        let stats = tier_stats(&store);
        for shard in store.shards.iter() {
            shard.lock().set_ram_residency(10, now_ms() - 3_600_000);
        }
        // Records nobody points at fill the log until half the free regions cleaning keeps are gone.
        let filler = vec![0u8; 4000];
        let record = crate::tier2::value_header(
            crate::types::Kind::String,
            RecordClass::Clean,
            cache,
            0,
            0,
            6,
            filler.len(),
        );
        let (_, total) = tier2.regions_free_total();
        while tier2.regions_free_total().0 > crate::admission::regions_kept_free(total) / 2 {
            tier2.append(&record, b"filler", &filler).unwrap();
        }
        let read_all = || {
            for &i in &stubs {
                assert_eq!(
                    get(&store, cache, format!("c{i}").as_bytes()),
                    Some(value(i))
                );
            }
        };
        let (promoted, declined) = (load(&stats.promoted_keys), load(&stats.promotions_declined));
        read_all();
        read_all();
        assert_eq!(load(&stats.promoted_keys), promoted, "nothing promoted");
        assert_eq!(load(&stats.promotions_declined), declined + 40);
        assert!(stubs.iter().all(|&i| is_stub(&store, cache, i)));
        // Once cleaning has caught up, the same reads promote (each release they cause measures RAM's
        // residency anew, so not necessarily all of them).
        store
            .tier2_maintain(crate::admission::regions_kept_free(total), 64)
            .unwrap();
        assert!(tier2.regions_free_total().0 > crate::admission::regions_kept_free(total) / 2);
        read_all();
        assert!(load(&stats.promoted_keys) > promoted);
    }

    #[test]
    fn a_promotion_writes_what_it_pushes_out_of_ram_whatever_the_admission_rule() {
        let cache = keyspace(2, 2, 0);
        // Admission by reads in RAM: keys 0..1000 are read once after their SET (admitted when they
        // leave RAM), keys from 1000 never (refused: evicted when a write makes room).
        let (_dir, store, tier2) = cache_store("tiering-promotion-keeps", AdmissionRule::Hits);
        fill_cache(&store, &tier2, 0..1000, |i| {
            assert_eq!(
                get(&store, cache, format!("c{i}").as_bytes()),
                Some(value(i))
            );
        });
        fill_cache(&store, &tier2, 1000..1300, |_| {});
        let stubs: Vec<usize> = (0..1000)
            .filter(|&i| is_stub(&store, cache, i))
            .take(200)
            .collect();
        assert_eq!(stubs.len(), 200);
        let in_ram: Vec<usize> = (1000..1300).filter(|&i| exists(&store, cache, i)).collect();
        assert!(!in_ram.is_empty());
        let evicted = || -> u64 {
            store
                .shards
                .iter()
                .map(|s| s.lock().stats.evicted_keys)
                .sum()
        };
        let stats = tier_stats(&store);
        let (evicted_before, promoted_before) = (evicted(), load(&stats.promoted_keys));
        let (refused_before, written_before) = (
            load(&stats.admissions_refused),
            load(&stats.demotion_writes),
        );
        // RAM keeps items an hour: second reads promote, each pushing unread keys out of RAM.
        for shard in store.shards.iter() {
            shard.lock().set_ram_residency(10, now_ms() - 3_600_000);
        }
        for _ in 0..2 {
            for &i in &stubs {
                assert_eq!(
                    get(&store, cache, format!("c{i}").as_bytes()),
                    Some(value(i))
                );
            }
        }
        assert_eq!(load(&stats.promoted_keys), promoted_before + 200);
        assert!(
            load(&stats.demotion_writes) > written_before,
            "pushed-out keys were written"
        );
        assert_eq!(load(&stats.admissions_refused), refused_before);
        assert_eq!(evicted(), evicted_before, "no promotion cost a key");
        assert!(in_ram.iter().all(|&i| exists(&store, cache, i)));
    }

    #[test]
    fn cleaning_keeps_records_read_on_tier2_and_discards_the_rest() {
        let cache = keyspace(2, 2, 0);
        // The oldest keys that are stubs now: read half of them once, on tier 2 (no promotion).
        let (_dir, store, tier2, stubs) = cache_beyond_ram("tiering-second-chance", 200);
        let served_before = tier_stats(&store).served_from_tier2.load(Ordering::Relaxed);
        for &i in stubs.iter().step_by(2) {
            assert_eq!(
                get(&store, cache, format!("c{i}").as_bytes()),
                Some(value(i))
            );
            assert!(is_stub(&store, cache, i), "a first read does not promote");
        }
        let served = tier_stats(&store).served_from_tier2.load(Ordering::Relaxed) - served_before;
        assert_eq!(served, 100);
        let kept = |parity: usize| {
            stubs
                .iter()
                .skip(parity)
                .step_by(2)
                .filter(|&&i| exists(&store, cache, i))
                .count()
        };
        // New keys until cleaning has passed the regions of every unread one (one lap, not two: a
        // record copied forward must be read again to survive the next).
        let mut next = 1500;
        while kept(1) > 0 && next < 4000 {
            fill_cache(&store, &tier2, next..next + 50, |_| {});
            next += 50;
        }
        let (read, unread) = (kept(0), kept(1));
        assert!(
            read >= 90,
            "{read} of 100 keys read on tier 2 survived cleaning"
        );
        assert_eq!(unread, 0, "keys never read on tier 2 were discarded");
        assert!(tier2.stats.cleaned_records.load(Ordering::Relaxed) >= 90);
    }

    #[test]
    fn cleaning_never_sticks_when_every_record_was_read_on_tier2() {
        let cache = keyspace(2, 2, 0);
        let (_dir, store, tier2) = cache_store("tiering-all-read", AdmissionRule::All);
        let stats = tier_stats(&store);
        // Three laps of the 1 MiB log; after every batch each new stub is read once on tier 2 (which
        // marks it without promoting it), so every record cleaning meets asks to be copied forward.
        // Cleaning must still free regions (a clean record that finds no room is discarded), and
        // demotions must go on being written.
        let mut writes_last_lap = 0;
        let mut read_once = std::collections::HashSet::new();
        for batch in (0..6000).step_by(50) {
            let before = load(&stats.demotion_writes);
            fill_cache(&store, &tier2, batch..batch + 50, |_| {});
            for i in batch.saturating_sub(1000)..batch + 50 {
                if !read_once.contains(&i) && is_stub(&store, cache, i) {
                    read_once.insert(i);
                    get(&store, cache, format!("c{i}").as_bytes());
                }
            }
            if batch >= 4000 {
                writes_last_lap += load(&stats.demotion_writes) - before;
            }
        }
        assert!(tier2.stats.regions_cleaned.load(Ordering::Relaxed) > 32);
        assert!(
            writes_last_lap >= 1000,
            "demotions written in the last 2000 keys: {writes_last_lap}"
        );
    }

    fn exists(store: &Store, space: usize, i: usize) -> bool {
        let key = format!("c{i}");
        let mut guards = store.lock_key(key.as_bytes());
        guards
            .shard(key.as_bytes())
            .exists(space, key.as_bytes(), now_ms())
    }

    fn is_stub(store: &Store, space: usize, i: usize) -> bool {
        let key = format!("c{i}");
        let mut guards = store.lock_key(key.as_bytes());
        guards
            .shard(key.as_bytes())
            .stub_slot(space, key.as_bytes(), now_ms())
            .is_some()
    }

    #[test]
    fn frequency_admission_keeps_frequently_read_keys_once_tier2_is_full() {
        let cache = keyspace(2, 2, 0);
        let (_dir, store, tier2) = cache_store("tiering-frequency", AdmissionRule::Frequency);
        // Every 4th key is read 4 times while in RAM (counted by the sketch); the rest never.
        fill_cache(&store, &tier2, 0..4000, |i| {
            if i % 4 == 0 {
                for _ in 0..4 {
                    get(&store, cache, format!("c{i}").as_bytes());
                }
            }
        });
        let stats = tier_stats(&store);
        assert!(
            stats.admissions_refused.load(Ordering::Relaxed) > 0,
            "{stats:?}"
        );
        let present = |hot: bool| {
            (0..3000)
                .filter(|i| (i % 4 == 0) == hot)
                .filter(|&i| is_stub(&store, cache, i))
                .count()
        };
        let (hot, cold) = (present(true), present(false));
        // 750 keys read often, 2250 never: a far larger share of the first are kept.
        assert!(
            hot as f64 / 750.0 > 2.0 * cold as f64 / 2250.0,
            "{hot} of 750 frequently read keys on tier 2 against {cold} of 2250 never read"
        );
    }

    #[test]
    fn the_doorkeeper_goes_off_in_a_loop_larger_than_both_tiers() {
        // 3,000 keys of 512 bytes read in a loop, read-through: RAM holds ~400, tier 2 ~1,700. Every
        // key is read 3 times within the sketch's window, so the doorkeeper admits everything leaving
        // RAM and cleaning discards it all unread; switched off, the duel keeps what tier 2 holds
        // (ties refuse) and the loop hits it.
        let cache = keyspace(2, 2, 0);
        let (_dir, store, tier2) = cache_store("tiering-doorkeeper-loop", AdmissionRule::Frequency);
        let admission = store.tier_link().unwrap().admission.clone();
        let lap = |store: &Store| {
            let mut hits = 0;
            for i in 0..3000 {
                match get(store, cache, format!("c{i}").as_bytes()) {
                    Some(found) => {
                        assert_eq!(found, value(i));
                        hits += 1;
                    }
                    None => set(store, cache, format!("c{i}").as_bytes(), &value(i)),
                }
                let (_, total) = tier2.regions_free_total();
                store
                    .tier2_maintain(crate::admission::regions_kept_free(total), 8)
                    .unwrap();
            }
            hits
        };
        let mut hits = Vec::new();
        for _ in 0..16 {
            hits.push(lap(&store));
        }
        let switched_off = admission.doorkeeper.switched_off.load(Ordering::Relaxed);
        assert!(
            switched_off >= 2,
            "off, tried again, off again: {switched_off}; hits per lap {hits:?}"
        );
        // A doorkeeper that never goes off churns tier 2: no hit at all from the fourth lap on (checked
        // by disabling its verdicts).
        let last_laps: usize = hits[8..].iter().sum();
        assert!(
            last_laps > 6000,
            "the duel keeps a stable part of the loop: hits per lap {hits:?}"
        );
    }

    #[test]
    fn a_log_of_overwritten_values_has_room_for_every_value() {
        // 1,500 keys never read, 512-byte values, written 4 times over: RAM holds ~400 of them, tier 2
        // (1 MiB) ~1,700 records, and each pass leaves the records of the one before dead. The frequency
        // rule refuses them once the free regions are down to what cleaning keeps + 1 (a never-read key
        // ties with the oldest region's), where cleaning does not start; a probe finds the oldest region
        // mostly dead and cleans it, cleaning then finds the log mostly dead, so it has room again.
        let (_dir, store, tier2) = cache_store("tiering-dead-room", AdmissionRule::Frequency);
        let stats = &tier2.stats;
        // The probes come a second apart (a clock of their own), one per key written.
        let mut clock_ms = now_ms();
        let shard_stats = tier_stats(&store);
        let mut last_pass = (0, 0);
        for _ in 0..4 {
            let refused = shard_stats.admissions_refused.load(Ordering::Relaxed);
            let written = shard_stats.demotion_writes.load(Ordering::Relaxed);
            fill_cache(&store, &tier2, 0..1500, |_| {
                clock_ms += 1000;
                store.tier2_probe_dead(clock_ms).unwrap();
            });
            last_pass = (
                shard_stats.admissions_refused.load(Ordering::Relaxed) - refused,
                shard_stats.demotion_writes.load(Ordering::Relaxed) - written,
            );
        }
        assert!(stats.dead_probes.load(Ordering::Relaxed) >= 1, "{stats:?}");
        assert!(
            stats.regions_cleaned.load(Ordering::Relaxed) > 16,
            "{stats:?}"
        );
        assert!(
            stats.cleaned_dead_permille.load(Ordering::Relaxed) >= 500,
            "{stats:?}"
        );
        // Checked: without the probe no region is ever cleaned, and the passes after the first refuse
        // every value that leaves RAM (4,517 refusals and 1,131 writes in all).
        let (refused, written) = last_pass;
        assert_eq!(refused, 0, "{stats:?}");
        assert!(written >= 1000, "{written} written in the last pass");
    }

    #[test]
    fn elastic_room_making_never_spins_on_stubs() {
        let dir = TempDir::new("tiering-elastic-stubs");
        let cache = keyspace(2, 2, 0);
        let store = Arc::new(store(0));
        let (tier2, _) = attach_with(&store, &dir, 64, AdmissionRule::All);
        store.set_pool_limit_bytes(1 << 20);
        fill_cache(&store, &tier2, 0..3000, |i| {
            get(&store, cache, format!("c{i}").as_bytes());
        });
        assert!(tier_stats(&store).demoted_keys.load(Ordering::Relaxed) > 1000);
        // A limit below what the stubs and the shards' open segments take: room-making must give up
        // (-OOM) or succeed, not move stubs between segments forever.
        store.set_pool_limit_bytes(64 << 10);
        let (done, finished) = std::sync::mpsc::channel();
        let writer = store.clone();
        std::thread::spawn(move || {
            for i in 0..20 {
                let key = format!("new{i}");
                let mut guards = writer.lock_key(key.as_bytes());
                let _ = guards.make_room_for(600);
            }
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(Duration::from_secs(30))
            .expect("room-making returned");
    }

    /// Interleaves `count` writes of the cache tenant (2) and of `blocks` (3, ephemeral, tier 2 off)
    /// through 256 KiB of RAM with tier 2 attached, cleaning and cleaning ahead as the server does.
    fn fill_two_tenants(store: &Store, tier2: &Tier2, count: usize) {
        let (cache, blocks) = (keyspace(2, 2, 0), keyspace(3, 3, 0));
        for i in 0..count {
            set(store, cache, format!("c{i}").as_bytes(), &value(i));
            set(store, blocks, format!("c{i}").as_bytes(), &value(i));
            let (_, total) = tier2.regions_free_total();
            store
                .tier2_maintain(crate::admission::regions_kept_free(total), 8)
                .unwrap();
            store.tier2_clean_ahead(16 << 10);
        }
    }

    /// An ephemeral tenant "blocks" that keeps nothing on tier 2 (fallow fs's kind).
    fn blocks_tenant_tier2_off() -> TenantSpec {
        TenantSpec {
            name: "blocks".into(),
            weight: 100,
            kind: TenantKind::Ephemeral,
            shared: false,
            tier2: false,
        }
    }

    #[test]
    fn an_ephemeral_tenant_with_tier2_off_is_evicted_not_demoted() {
        let (cache, blocks) = (keyspace(2, 2, 0), keyspace(3, 3, 0));
        let (_dir, store, tier2) = cache_store("tiering-tier2-off", AdmissionRule::All);
        assert_eq!(store.define_tenant(blocks_tenant_tier2_off()), Ok(3));
        fill_two_tenants(&store, &tier2, 1500);
        let stubs = |space| (0..1500).filter(|&i| is_stub(&store, space, i)).count();
        let present = |space| (0..1500).filter(|&i| exists(&store, space, i)).count();
        let (cache_stubs, block_stubs) = (stubs(cache), stubs(blocks));
        assert!(
            cache_stubs > 100,
            "the other tenant is demoted: {cache_stubs} stubs"
        );
        assert_eq!(
            block_stubs, 0,
            "nothing of the tier2-off tenant is on tier 2"
        );
        let blocks_present = present(blocks);
        assert!(
            blocks_present < 1500,
            "the tier2-off tenant's keys were evicted"
        );
        let snapshot = store.tenant_snapshots()[3].clone();
        assert!(!snapshot.tier2);
        assert_eq!(
            snapshot.evicted_keys,
            (1500 - blocks_present) as u64,
            "every departure is counted as an eviction"
        );
        // What stayed reads back whole.
        for i in (0..1500).filter(|&i| exists(&store, blocks, i)) {
            assert_eq!(
                get(&store, blocks, format!("c{i}").as_bytes()),
                Some(value(i))
            );
        }
    }

    #[test]
    fn an_elastic_shrink_drops_a_tier2_off_tenant_and_stubs_the_other() {
        use crate::pool::ReclaimPath;
        let (cache, blocks) = (keyspace(2, 2, 0), keyspace(3, 3, 0));
        let dir = TempDir::new("tiering-tier2-off-elastic");
        let store = store(0);
        let (tier2, _) = attach_with(&store, &dir, 64, AdmissionRule::All);
        assert_eq!(store.define_tenant(blocks_tenant_tier2_off()), Ok(3));
        store.set_pool_limit_bytes(1 << 20);
        fill_two_tenants(&store, &tier2, 1000);
        let stubs = |space| (0..1000).filter(|&i| is_stub(&store, space, i)).count();
        let before = (stubs(cache), stubs(blocks));
        for path in [ReclaimPath::Careful, ReclaimPath::Fast] {
            store.reclaim(store.resident_bytes() / 4, path);
        }
        let after = (stubs(cache), stubs(blocks));
        assert!(
            after.0 > before.0,
            "the cache tenant's copies became stubs: {before:?} -> {after:?}"
        );
        assert_eq!(
            after.1, 0,
            "a shrink writes nothing and keeps no stub of the tier2-off tenant"
        );
        let blocks_present = (0..1000).filter(|&i| exists(&store, blocks, i)).count();
        assert_eq!(
            store.tenant_snapshots()[3].evicted_keys,
            (1000 - blocks_present) as u64
        );
    }

    #[test]
    fn turning_tier2_off_evicts_the_stubs_a_tenant_had() {
        let cache = keyspace(2, 2, 0);
        let (_dir, store, tier2) = cache_store("tiering-tier2-switch", AdmissionRule::All);
        fill_cache(&store, &tier2, 0..1500, |_| {});
        let stubs = |store: &Store| (0..3000).filter(|&i| is_stub(store, cache, i)).count();
        let stubs_before = stubs(&store);
        assert!(stubs_before > 100);
        let mut spec = store.tenant_spec(2).unwrap();
        spec.tier2 = false;
        store.define_tenant(spec).unwrap();
        let demoted = load(&tier_stats(&store).demoted_keys);
        fill_cache(&store, &tier2, 1500..6000, |_| {});
        assert_eq!(
            load(&tier_stats(&store).demoted_keys),
            demoted,
            "no demotion after the switch"
        );
        assert!(
            (1500..6000).all(|i| !is_stub(&store, cache, i)),
            "no new stub after the switch"
        );
        let stubs_after = stubs(&store);
        assert!(
            stubs_after < stubs_before / 2,
            "the stubs from before the switch are evicted under pressure: {stubs_before} -> {stubs_after}"
        );
    }

    #[test]
    fn a_persistent_tenant_keeps_tier2() {
        let store = store(0);
        let mut spec = store.tenant_spec(1).unwrap();
        spec.tier2 = false;
        let error = store.define_tenant(spec).unwrap_err();
        assert!(error.contains("persistent"), "{error}");
        assert!(store.tenant_spec(1).unwrap().tier2, "unchanged");
    }
}
