//! A shard's side of tier 2: logging persistent tenants' writes (the swap region), turning items whose
//! value has a tier-2 copy into stubs (demotion: no write when the copy exists), reading stubs back
//! (promotion), the admission rule for ephemeral data, recovery's replay and cleaning's liveness checks.
//!
//! How Ex-Tmem's regions map here: RAM segments in creation order are the FIFO put buffer; an item that a
//! release keeps because it is hot by recency and frequency is re-appended (the hot region); leaving RAM
//! sends an ephemeral item to the clean region only when the admission rule says so (`admission.rs`),
//! else it is dropped; a persistent item's record is already in the swap region, so it leaves RAM at
//! once. The first read of a stub (GET) is served from its record without promoting it and marks the
//! stub (`ITEM_FLAG_TIER2_READ`); a read of a marked stub promotes it; cleaning keeps marked records.
//! A stub costs `ITEM_HEADER_BYTES` + key + the index's 9 bytes in RAM.
use super::{slot_of, space_of, Location, Shard};
use crate::admission::{Admission, Admitted, Opponent};
use crate::changes::Cause;
use crate::hash_key;
use crate::memory::segment::{
    ItemHeader, ITEM_FLAG_STUB, ITEM_FLAG_TIER2_DOORKEEPER, ITEM_FLAG_TIER2_READ,
};
use crate::pool::{Address, TenantId};
use crate::tier2::record::{self, RecordClass, RecordHeader, RecordKind};
use crate::tier2::{Slot, Tier2, Tier2Error, FILE_HEADER_BYTES};
use crate::types::{Collection, Kind};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

thread_local! {
    /// The newest lsn this thread appended for a persistent write: the dispatcher waits for it to be
    /// durable before replying under `tier2-fsync always`.
    static THREAD_LSN: Cell<u64> = const { Cell::new(0) };
    /// The first tier-2 error a persistent write on this thread met, for its reply.
    static THREAD_ERROR: Cell<Option<Tier2Error>> = const { Cell::new(None) };
}

/// Takes (and resets) the newest lsn this thread's persistent writes appended, and the first error they
/// met.
pub fn take_thread_log() -> (u64, Option<Tier2Error>) {
    (take_thread_lsn(), take_thread_error())
}

/// Takes (and resets) the newest lsn this thread's persistent writes appended.
pub fn take_thread_lsn() -> u64 {
    THREAD_LSN.with(|lsn| lsn.replace(0))
}

/// Takes the first error this thread's persistent writes met since the last call.
pub fn take_thread_error() -> Option<Tier2Error> {
    THREAD_ERROR.with(|error| error.take())
}

fn note_lsn(lsn: u64) {
    THREAD_LSN.with(|cell| cell.set(cell.get().max(lsn)));
}

fn note_error(error: Tier2Error) {
    THREAD_ERROR.with(|cell| {
        let first = cell.take().unwrap_or(error);
        cell.set(Some(first));
    });
}

/// How a shard uses tier 2.
#[derive(Clone)]
pub struct TierLink {
    pub tier2: Arc<Tier2>,
    /// Which ephemeral items leaving RAM are written to the clean region.
    pub admission: Arc<Admission>,
}

impl TierLink {
    /// The tier-2 region a slot lies in.
    pub fn region_of(&self, slot: Slot) -> usize {
        ((slot.position() - FILE_HEADER_BYTES) / self.tier2.config.region_bytes as u64) as usize
    }

    /// What a candidate for the clean region competes with: None while tier 2 has free regions beyond
    /// what cleaning keeps, or while at least half of what cleaning met lately was dead (overwritten,
    /// deleted: cleaning frees that room without evicting anything), so everything is admitted; else the
    /// oldest region, which cleaning empties next.
    pub fn opponent(&self) -> Option<Opponent> {
        use std::sync::atomic::Ordering::Relaxed;
        let (free, total) = self.tier2.regions_free_total();
        if crate::admission::regions_to_spare(free, total)
            || self.tier2.stats.cleaned_dead_permille.load(Relaxed) >= DEAD_PERMILLE_ROOM
        {
            return None;
        }
        let (region, _) = self.tier2.oldest_region()?;
        Some(Opponent {
            region: region as usize,
        })
    }

    /// True when cleaning has fallen behind: half the free regions it keeps are used up. Writes then
    /// soon find the log full, and what they would have written is dropped.
    pub fn cleaning_behind(&self) -> bool {
        let (free, total) = self.tier2.regions_free_total();
        free <= crate::admission::regions_kept_free(total) / 2
    }
}

/// Records read from tier 2 for stubs whose first read is served without promotion (or read ahead for
/// a command), checked against their stub and kept with their decoded header until used, at most
/// `STUB_FETCH_BYTES_MAX` (plus the newest record). A record is trusted only while no region was
/// cleaned since it was read: a cleaned region may be rewritten, and its slots then name other records.
#[derive(Default)]
pub(super) struct StubFetches {
    records: hashbrown::HashMap<u64, (RecordHeader, Vec<u8>)>,
    order: std::collections::VecDeque<u64>,
    bytes: usize,
    regions_cleaned: u64,
}

/// Bytes of records a shard keeps for first reads (the dispatcher reads at most this much ahead for
/// one request).
pub const STUB_FETCH_BYTES_MAX: usize = 1 << 20;

/// Reads from RAM a promotion must expect (at the gap between its last two reads, over the time RAM
/// keeps an unread item) to be worth its copy and the demotion it causes (`serves_without_promotion`).
pub const PROMOTE_READS_PER_RESIDENCY: u64 = 4;
/// A log whose cleaned regions lately held at least this share (1/1000) of dead records has room:
/// cleaning frees it without evicting (benchmark 2's 50 KB sequence overwrites values in a 2 GiB tier 2
/// that holds 786 MB of them).
const DEAD_PERMILLE_ROOM: u64 = 500;

impl StubFetches {
    fn forget_if_stale(&mut self, regions_cleaned: u64) {
        if regions_cleaned != self.regions_cleaned {
            self.records.clear();
            self.order.clear();
            self.bytes = 0;
            self.regions_cleaned = regions_cleaned;
        }
    }

    fn put(&mut self, slot: Slot, header: RecordHeader, encoded: Vec<u8>) {
        self.bytes += encoded.len();
        if let Some((_, old)) = self.records.insert(slot.0, (header, encoded)) {
            self.bytes -= old.len();
        } else {
            self.order.push_back(slot.0);
        }
        while self.bytes > STUB_FETCH_BYTES_MAX && self.order.len() > 1 {
            let oldest = self.order.pop_front().expect("more than one record");
            if let Some((_, record)) = self.records.remove(&oldest) {
                self.bytes -= record.len();
            }
        }
    }

    fn take(&mut self, slot: Slot) -> Option<Vec<u8>> {
        let (_, record) = self.records.remove(&slot.0)?;
        self.bytes -= record.len();
        self.order.retain(|&held| held != slot.0);
        Some(record)
    }

    /// The value of the record kept for `slot`.
    fn value(&self, slot: Slot) -> Option<&[u8]> {
        let (header, encoded) = self.records.get(&slot.0)?;
        Some(record::value_of(header, encoded))
    }
}

/// What became of an item leaving RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Departure {
    /// It is a stub now (or was one and moved).
    Demoted,
    /// It could not go to tier 2 and may not be dropped (persistent data, or noeviction): it stays.
    Kept,
    /// It may be dropped: the caller evicts it.
    Evict,
}

pub use crate::tier2::TierStats;

/// What cleaning found for a record.
pub enum Liveness {
    /// Nothing in RAM refers to the record.
    Dead,
    /// A stub or a clean RAM item of a persistent tenant refers to it: it must be copied forward.
    Swap,
    /// A stub of an ephemeral tenant refers to it; `read_on_tier2`: it was read since the record was
    /// written (or last copied forward); `doorkeeper`: the doorkeeper admitted it (not copied since).
    CleanStub {
        read_on_tier2: bool,
        doorkeeper: bool,
    },
    /// A RAM item of an ephemeral tenant holds the same value (promoted since): the copy can simply be
    /// forgotten.
    CleanResident { doorkeeper: bool },
}

impl Shard {
    pub fn attach_tier2(&mut self, link: TierLink) {
        self.tier = Some(link);
    }

    pub fn has_tier2(&self) -> bool {
        self.tier.is_some()
    }

    /// Adds to a tier-2 counter (shared atomics: INFO reads them without shard locks).
    fn count(&self, counter: impl Fn(&TierStats) -> &AtomicU64, amount: u64) {
        if let Some(tier) = &self.tier {
            counter(&tier.tier2.stats.shards).fetch_add(amount, Ordering::Relaxed);
        }
    }

    /// Counts a read (hit or miss) of a key for the admission rule's frequency sketch.
    pub(super) fn note_read(&self, hash: impl FnOnce() -> u64) {
        if let Some(tier) = &self.tier {
            tier.admission.note_read(hash);
        }
    }

    fn is_persistent(&self, tenant: TenantId) -> bool {
        self.memory.pool.is_persistent(tenant)
    }

    /// False for an ephemeral tenant with tier 2 off: its items leave RAM by eviction only.
    fn tier2_allowed(&self, tenant: TenantId) -> bool {
        self.memory.pool.tier2_allowed(tenant)
    }

    /// True when a write by `writer` over the item at `old` must be logged.
    pub(super) fn must_log(&self, writer: TenantId, old: Option<Location>) -> bool {
        self.tier.is_some()
            && (self.is_persistent(writer)
                || old.is_some_and(|old| self.is_persistent(self.segment(slot_of(old)).tenant)))
    }

    fn append_record(&mut self, header: &RecordHeader, key: &[u8], value: &[u8]) -> Option<Slot> {
        let tier = self.tier.as_ref()?;
        match tier.tier2.append(header, key, value) {
            Ok((slot, lsn)) => {
                note_lsn(lsn);
                self.count(|stats| &stats.persistent_records, 1);
                Some(slot)
            }
            Err(error) => {
                self.count(|stats| &stats.log_errors, 1);
                note_error(error);
                None
            }
        }
    }

    /// Logs a write of `key` now held at `location`: its value when its owner is persistent, else a
    /// tombstone (an ephemeral writer replaced persistent data).
    pub(super) fn log_write(&mut self, keyspace: usize, key: &[u8], location: Location) {
        if self.is_persistent(self.segment(slot_of(location)).tenant) {
            self.log_item(location);
        } else {
            self.log_tombstone(keyspace, key);
        }
    }

    /// The location of a resident copy of `key`'s item at `location`, promoting a stub (None: its record
    /// was lost).
    pub(super) fn materialize(
        &mut self,
        keyspace: usize,
        key: &[u8],
        location: Location,
    ) -> Option<Location> {
        if self.header(location).is_stub() {
            self.promote(keyspace, hash_key(key), location)
        } else {
            Some(location)
        }
    }

    /// Logs the current value of the item at `location` (a persistent write) and records its slot.
    pub(super) fn log_item(&mut self, location: Location) {
        let header = *self.header(location);
        if header.is_stub() {
            // Only metadata changed under a stub (see `set_expire_at`): the value is read back first.
            return;
        }
        let value = self.record_value(location);
        let key = self.item_key(location).to_vec();
        let record = crate::tier2::value_header(
            Kind::from_u8(header.kind),
            RecordClass::Swap,
            space_of_item(&header, self.segment(slot_of(location)).tenant),
            header.expire_at_ms,
            header.client_flags,
            key.len(),
            value.len(),
        );
        let slot = self.append_record(&record, &key, &value);
        self.header_mut(location).tier2_slot = slot.map_or(0, |slot| slot.0);
    }

    /// Logs that `key` no longer exists in `keyspace`.
    pub(super) fn log_tombstone(&mut self, keyspace: usize, key: &[u8]) {
        let record = RecordHeader {
            kind: RecordKind::Tombstone,
            class: RecordClass::Swap,
            keyspace: keyspace as u64,
            lsn: 0,
            expire_at_ms: 0,
            client_flags: 0,
            key_bytes: key.len() as u32,
            value_bytes: 0,
            region_sequence: 0,
        };
        self.append_record(&record, key, &[]);
    }

    /// Logs a keyspace-wide event (FLUSHDB on this shard, SWAPDB) when tier 2 may hold its keys.
    pub(super) fn log_keyspace_event(&mut self, kind: RecordKind, keyspace: usize, value: &[u8]) {
        if self.tier.is_none() {
            return;
        }
        let record = RecordHeader {
            kind,
            class: RecordClass::Swap,
            keyspace: keyspace as u64,
            lsn: 0,
            expire_at_ms: 0,
            client_flags: 0,
            key_bytes: 0,
            value_bytes: value.len() as u32,
            region_sequence: 0,
        };
        self.append_record(&record, &[], value);
    }

    /// SWAPDB moved the item at `location` into `keyspace`: its tier-2 record names the old database, so
    /// a persistent item is logged again where it now is, and an ephemeral one forgets its copy (a stub
    /// is dropped).
    pub(super) fn relocate_tier2_copy(&mut self, keyspace: usize, location: Location) {
        let header = *self.header(location);
        // Recovery replays SWAPDB before tier 2 is attached; the records logged after it follow.
        if header.tier2_slot == 0 || self.tier.is_none() {
            return;
        }
        let hash = hash_key(self.item_key(location));
        if self.is_persistent(self.segment(slot_of(location)).tenant) {
            if let Some(resident) = self.resident(keyspace, hash, location) {
                self.log_item(resident);
            }
        } else if header.is_stub() {
            self.remove_item(keyspace, hash, location);
            self.sync_accounting();
        } else {
            self.header_mut(location).tier2_slot = 0;
        }
    }

    /// The bytes a record of the resident item at `location` holds: a string's value, or its collection
    /// encoded (`Collection::encode`).
    fn record_value(&self, location: Location) -> Vec<u8> {
        match Kind::from_u8(self.header(location).kind) {
            Kind::String => self.item_value(location).to_vec(),
            _ => {
                let mut bytes = Vec::new();
                self.collection_at(location).encode(&mut bytes);
                bytes
            }
        }
    }

    /// The collection a resident collection item holds.
    pub(super) fn collection_at(&self, location: Location) -> &Collection {
        let handle = u32::from_le_bytes(
            self.item_value(location)
                .try_into()
                .expect("a collection item holds a 4-byte handle"),
        );
        self.collections[handle as usize]
            .as_ref()
            .expect("a collection item owns its handle")
    }

    // ----- stubs ---------------------------------------------------------------------------------

    /// Replaces the item at `location`, whose value has a tier-2 copy, by a stub; returns the stub's
    /// location.
    fn stub_out(&mut self, keyspace: usize, hash: u64, location: Location) -> Location {
        let mut header = *self.header(location);
        assert!(
            header.tier2_slot != 0 && !header.is_stub(),
            "only a clean item is stubbed"
        );
        let tenant = self.segment(slot_of(location)).tenant;
        let key = self.item_key(location).to_vec();
        self.free_collection_of(location);
        header.flags |= ITEM_FLAG_STUB;
        let stub = self.append(tenant, &header, &key, &[]);
        self.replace_location(keyspace, hash, location, stub);
        self.kill_item(location);
        stub
    }

    /// Demotes the live item at `location` instead of evicting it (releases and fixed-mode room-making
    /// with tier 2): a stub stays as it is (moved, as survivors are; on the fast path an ephemeral stub
    /// is evicted); a clean item becomes a stub; a dirty
    /// ephemeral item is written to the clean region when admitted, else evicted. Returns false when the
    /// item was evicted.
    /// `may_write` false (the fast release path and elastic reclaims, which must not wait on anything)
    /// demotes only what already has a copy.
    pub(super) fn demote_at(&mut self, location: Location, may_write: bool) -> Departure {
        let header = *self.header(location);
        let keyspace = space_of(&header);
        let hash = hash_key(self.item_key(location));
        let tenant = self.segment(slot_of(location)).tenant;
        if !self.tier2_allowed(tenant) {
            // Tier 2 off for this tenant: it leaves as without tier 2 (a stub or copy from before the
            // switch goes too, its record dead).
            return match self.noeviction() && !header.is_stub() {
                true => {
                    self.move_item(location, header);
                    Departure::Kept
                }
                false => Departure::Evict,
            };
        }
        if header.is_stub() {
            // The fast path gives RAM back at once: an ephemeral stub goes (a cache eviction; its record
            // is dead). A careful release plans stubs as survivors and only meets expired ones here.
            if !may_write && !self.is_persistent(self.segment(slot_of(location)).tenant) {
                return Departure::Evict;
            }
            self.move_item(location, header);
            return Departure::Kept;
        }
        if header.tier2_slot == 0 && !(may_write && self.write_clean_copy(location)) {
            let persistent = self.is_persistent(self.segment(slot_of(location)).tenant);
            if persistent || self.noeviction() {
                // Never dropped: without a tier-2 copy it stays in RAM.
                self.move_item(location, header);
                return Departure::Kept;
            }
            return Departure::Evict;
        }
        let bytes = header.item_bytes() as u64;
        self.stub_out(keyspace, hash, location);
        self.count(|stats| &stats.demoted_keys, 1);
        self.count(|stats| &stats.demoted_bytes, bytes);
        Departure::Demoted
    }

    /// Fixed mode under maxmemory-policy noeviction: nothing ephemeral is dropped either (the elastic
    /// pool gives memory back to the host whatever the policy).
    fn noeviction(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.memory.noeviction.load(Relaxed) && self.memory.pool_limit_bytes.load(Relaxed) == 0
    }

    /// The admission rule's verdict on an ephemeral item leaving RAM without a copy.
    fn admits(&self, header: &ItemHeader, key: &[u8]) -> Option<Admitted> {
        let tier = self.tier.as_ref()?;
        let hits = header.lfu_counter.saturating_sub(super::LFU_INITIAL);
        tier.admission
            .admits(hash_key(key), hits, || tier.opponent())
    }

    /// Writes a dirty item to tier 2 (the clean region for ephemeral data, the swap region for persistent
    /// data not yet logged); false when the admission rule refuses or tier 2 cannot take it.
    fn write_clean_copy(&mut self, location: Location) -> bool {
        let Some(tier) = &self.tier else {
            return false;
        };
        let header = *self.header(location);
        let tenant = self.segment(slot_of(location)).tenant;
        if !self.tier2_allowed(tenant) {
            return false;
        }
        if self.is_persistent(tenant) {
            self.log_item(location);
            return self.header(location).tier2_slot != 0;
        }
        tier.admission.doorkeeper.note_departure(
            header.item_bytes() as u64,
            tier.tier2.stats.regions_cleaned.load(Ordering::Relaxed),
            tier.tier2.config.regions() as u64,
        );
        let admitted = if self.noeviction() || self.admit_all_departures {
            Admitted::Room
        } else {
            match self.admits(&header, self.item_key(location)) {
                Some(admitted) => admitted,
                None => {
                    self.count(|stats| &stats.admissions_refused, 1);
                    return false;
                }
            }
        };
        let tier = tier.clone();
        let tier2 = &tier.tier2;
        let value = self.record_value(location);
        let record = crate::tier2::value_header(
            Kind::from_u8(header.kind),
            RecordClass::Clean,
            space_of_item(&header, tenant),
            header.expire_at_ms,
            header.client_flags,
            header.key_len as usize,
            value.len(),
        );
        let key = self.item_key(location);
        match tier2.append(&record, key, &value) {
            Ok((slot, _)) => {
                tier.admission
                    .samples
                    .record(tier.region_of(slot), hash_key(key));
                let header = self.header_mut(location);
                header.tier2_slot = slot.0;
                header.flags &= !(ITEM_FLAG_TIER2_READ | ITEM_FLAG_TIER2_DOORKEEPER);
                if admitted == Admitted::Doorkeeper {
                    header.flags |= ITEM_FLAG_TIER2_DOORKEEPER;
                }
                self.count(|stats| &stats.demotion_writes, 1);
                true
            }
            Err(_) => {
                self.count(|stats| &stats.admissions_refused, 1);
                false
            }
        }
    }

    /// Reads a stub's value back into RAM (promotion) and returns the resident item's location; None when
    /// the record could not be read or was corrupt (the key is then dropped, counted: never served wrong).
    /// This read happens on the worker, under the shard lock: the dispatcher reads the stubs of a
    /// command's keys ahead (`stub_slot`, `install_fetched`) on the I/O pool, so this is the fallback for
    /// keys it cannot see (inside EXEC, memcached, scans), counted as `tier2_sync_reads`.
    pub(super) fn promote(
        &mut self,
        keyspace: usize,
        hash: u64,
        stub: Location,
    ) -> Option<Location> {
        let slot = Slot(self.header(stub).tier2_slot);
        let encoded = match self.fetched(slot) {
            Some(encoded) => Ok(encoded),
            None => self.read_stub_record(slot),
        };
        self.promote_from(keyspace, hash, stub, encoded)
    }

    /// Reads a stub's record on the calling thread (the worker), counted as a sync read.
    fn read_stub_record(&self, slot: Slot) -> Result<Vec<u8>, Tier2Error> {
        self.count(|stats| &stats.sync_reads, 1);
        match &self.tier {
            Some(tier) => tier.tier2.read(slot),
            None => Err(Tier2Error::Corrupt),
        }
    }

    /// A record read ahead (or for a first read) for `slot`, taken out of the stash.
    fn fetched(&mut self, slot: Slot) -> Option<Vec<u8>> {
        self.stub_fetches()?.take(slot)
    }

    /// The stash of fetched records, emptied first when a region was cleaned since they were read;
    /// None without tier 2.
    fn stub_fetches(&mut self) -> Option<&mut StubFetches> {
        let cleaned = self
            .tier
            .as_ref()?
            .tier2
            .stats
            .regions_cleaned
            .load(Ordering::Relaxed);
        self.stub_fetches.forget_if_stale(cleaned);
        Some(&mut self.stub_fetches)
    }

    /// True when a GET of the stub at `location`, whose previous access was at `previous_access_s`
    /// (the shard's access clock), is served from its record without promoting it (`first_stub_read`):
    /// - its first read on tier 2 since its record was written (Ex-Tmem: two references promote);
    /// - any read while the elastic pool has no room for the value (a promotion would only feed the
    ///   next reclaim);
    /// - while RAM is at `maxmemory`, a read that did not come soon enough after the previous one for
    ///   the value to be read `PROMOTE_READS_PER_RESIDENCY` times while RAM keeps an unread item
    ///   (`ram_residency_ms`). A promotion copies the value in and pushes another out (a flash write
    ///   when that one has no copy); it pays only when the value is then read from RAM several times
    ///   (benchmark 2, promoting on every second read: 1.2-1.5x extstore's writes and 0.64-0.84x its
    ///   throughput). The clock counts whole seconds, so a gap counts as the second it may
    ///   have lasted: with RAM turning over in under 4 s nothing is promoted. RAM that has released
    ///   nothing for longer than the estimate keeps items at least that long (a read-only phase: the
    ///   promotions then turn it over, and the next releases measure how fast);
    /// - while RAM is at `maxmemory`, any read while tier-2 cleaning is behind (`cleaning_behind`): what
    ///   the promotion pushed out could not be written and would be lost (a burst of promotions at the
    ///   start of benchmark 2's GET-only phase filled the log and dropped 650-830 keys).
    pub(super) fn serves_without_promotion(
        &self,
        location: Location,
        previous_access_s: u32,
        now_ms: u64,
    ) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let header = self.header(location);
        if self.tier.is_none() || !header.is_stub() {
            return false;
        }
        let value_bytes = header.value_len as usize;
        let pool_limit = self.memory.pool_limit_bytes.load(Relaxed);
        let no_room =
            pool_limit != 0 && self.memory.resident_bytes.load(Relaxed) + value_bytes > pool_limit;
        // Room is made a segment at a time, so RAM at its limit has up to a segment free.
        let maxmemory = self.memory.maxmemory_bytes.load(Relaxed);
        let ram_full = maxmemory != 0
            && self.memory.used_bytes.load(Relaxed) + value_bytes + self.config.segment_bytes
                > maxmemory;
        let gap_s = self
            .access_clock_s(now_ms)
            .saturating_sub(previous_access_s);
        let gap_ms_max = (u64::from(gap_s) + 1) * 1000;
        let since_release_ms = now_ms.saturating_sub(self.residency_sample.0);
        let residency_ms = self.ram_residency_ms.max(since_release_ms);
        let read_too_rarely =
            ram_full && gap_ms_max.saturating_mul(PROMOTE_READS_PER_RESIDENCY) > residency_ms;
        header.flags & ITEM_FLAG_TIER2_READ == 0
            || no_room
            || read_too_rarely
            || (ram_full && self.tier.as_ref().is_some_and(TierLink::cleaning_behind))
    }

    /// Sets how long RAM keeps an unread item, and when a release last estimated it.
    #[cfg(test)]
    pub(crate) fn set_ram_residency(&mut self, residency_ms: u64, estimated_at_ms: u64) {
        self.ram_residency_ms = residency_ms;
        self.residency_sample.0 = estimated_at_ms;
    }

    /// At a careful release: estimates `ram_residency_ms` from the bytes appended since the last
    /// estimate, at most every `RESIDENCY_WINDOW_MS` (weight 1/4 to the newest).
    pub(super) fn note_residency(&mut self, now_ms: u64) {
        const RESIDENCY_WINDOW_MS: u64 = 100;
        let (sampled_ms, sampled_bytes) = self.residency_sample;
        let elapsed_ms = now_ms.saturating_sub(sampled_ms);
        if elapsed_ms < RESIDENCY_WINDOW_MS {
            return;
        }
        self.residency_sample = (now_ms, self.appended_bytes);
        let appended = self.appended_bytes - sampled_bytes;
        if sampled_ms == 0 || appended == 0 {
            return;
        }
        let residency_ms = (self.live_item_bytes as u64).saturating_mul(elapsed_ms) / appended;
        self.ram_residency_ms = if self.ram_residency_ms == 0 {
            residency_ms
        } else {
            (self.ram_residency_ms * 3 + residency_ms) / 4
        };
    }

    /// Serves a read of the string stub at `location` from its record (read ahead, or read now) and marks
    /// the stub read; the value stays on tier 2 only. None when the record could not be read
    /// or was corrupt (the key is dropped, counted).
    pub(super) fn first_stub_read(
        &mut self,
        keyspace: usize,
        key: &[u8],
        location: Location,
    ) -> Option<&[u8]> {
        let header = *self.header(location);
        debug_assert!(header.is_stub() && Kind::from_u8(header.kind) == Kind::String);
        let slot = Slot(header.tier2_slot);
        if self.stub_fetches()?.value(slot).is_none() {
            let encoded = self.read_stub_record(slot);
            if !self.keep_fetched(key, Kind::String, slot, encoded) {
                self.drop_unreadable(keyspace, hash_key(key), location);
                return None;
            }
        }
        if header.flags & ITEM_FLAG_TIER2_READ != 0 {
            self.count(|stats| &stats.promotions_declined, 1);
        }
        self.header_mut(location).flags |= ITEM_FLAG_TIER2_READ;
        self.count(|stats| &stats.tier2_hits, 1);
        self.count(|stats| &stats.served_from_tier2, 1);
        self.stub_fetches.value(slot)
    }

    /// Keeps a record read for `key`'s stub at `slot` when it checks out against the key and kind;
    /// false when it was unreadable or corrupt (nothing is kept).
    fn keep_fetched(
        &mut self,
        key: &[u8],
        kind: Kind,
        slot: Slot,
        encoded: Result<Vec<u8>, Tier2Error>,
    ) -> bool {
        let Ok((header, encoded)) = encoded
            .and_then(|encoded| check_record(&encoded, key, kind).map(|header| (header, encoded)))
        else {
            return false;
        };
        if let Some(fetches) = self.stub_fetches() {
            fetches.put(slot, header, encoded);
        }
        true
    }

    /// A stub whose record is unreadable or corrupt goes (never served wrong), counted.
    fn drop_unreadable(&mut self, keyspace: usize, hash: u64, stub: Location) {
        self.count(|stats| &stats.tier2_read_errors, 1);
        self.count(|stats| &stats.lost_keys, 1);
        self.remove_item(keyspace, hash, stub);
        self.sync_accounting();
    }

    /// The tier-2 slot of `key`'s value when the key is a stub (the dispatcher reads it ahead, off the
    /// worker).
    pub fn stub_slot(&mut self, keyspace: usize, key: &[u8], now_ms: u64) -> Option<Slot> {
        let (_, location) = self.lookup(keyspace, key, now_ms)?;
        let header = self.header(location);
        header.is_stub().then_some(Slot(header.tier2_slot))
    }

    /// Keeps a record read ahead from `slot` for `key`'s command, if the key is still a stub of that
    /// record; false when it changed meanwhile or the record failed its checks (the command then reads
    /// the key as it finds it).
    pub fn install_fetched(
        &mut self,
        keyspace: usize,
        key: &[u8],
        slot: Slot,
        encoded: Result<Vec<u8>, Tier2Error>,
    ) -> bool {
        let Some(stub) = self.find(keyspace, hash_key(key), key) else {
            return false;
        };
        let header = self.header(stub);
        if !header.is_stub() || header.tier2_slot != slot.0 {
            return false;
        }
        // Kept for the command, which serves a GET from it or promotes the key (the rule
        // `serves_without_promotion` states, on the access the command makes). A record that fails its
        // checks is not kept: the command reads it again and drops the key.
        let kind = Kind::from_u8(header.kind);
        self.keep_fetched(key, kind, slot, encoded)
    }

    /// Brings the value of `stub` (read from tier 2 as `encoded`) back into RAM; on a read error or a
    /// corrupt record the key is dropped and counted.
    fn promote_from(
        &mut self,
        keyspace: usize,
        hash: u64,
        stub: Location,
        encoded: Result<Vec<u8>, Tier2Error>,
    ) -> Option<Location> {
        let key = self.item_key(stub).to_vec();
        let stub_bytes = self.header(stub).value_len as usize;
        // Room first, so the promoted item is not what gets demoted; the stub may move meanwhile.
        self.room_for_promotion(stub_bytes);
        let stub = self.find(keyspace, hash, &key)?;
        let header = *self.header(stub);
        debug_assert!(header.is_stub());
        let value =
            encoded.and_then(|encoded| decode_value(&encoded, &key, Kind::from_u8(header.kind)));
        let Ok(value) = value else {
            self.drop_unreadable(keyspace, hash, stub);
            return None;
        };
        self.count(|stats| &stats.tier2_hits, 1);
        self.count(|stats| &stats.promoted_keys, 1);
        let tenant = self.segment(slot_of(stub)).tenant;
        let mut resident = header;
        resident.flags &= !ITEM_FLAG_STUB;
        let location = match value {
            StubValue::String(bytes) => {
                debug_assert_eq!(bytes.len(), header.value_len as usize);
                self.append(tenant, &resident, &key, &bytes)
            }
            StubValue::Collection(collection) => {
                let handle = self.adopt_collection(tenant, collection);
                self.append(tenant, &resident, &key, &handle.to_le_bytes())
            }
        };
        self.replace_location(keyspace, hash, stub, location);
        self.kill_item(stub);
        self.sync_accounting();
        Some(location)
    }

    /// Demotes from this shard's oldest segments until `bytes` more fit under maxmemory (fixed mode), or a
    /// few slices did not get there (the next write's room-making goes on). What it pushes out is written
    /// whatever the admission rule says: the promoted value was served from tier 2 anyway, so a promotion
    /// that dropped a key would trade a miss for a faster hit (a GET-only phase lost 1-5% of its hits so).
    fn room_for_promotion(&mut self, bytes: usize) {
        self.admitting_all_departures(|shard| shard.demote_for_promotion(bytes));
    }

    /// Runs `demote` with what leaves RAM written whatever the admission rule says.
    fn admitting_all_departures<T>(&mut self, demote: impl FnOnce(&mut Self) -> T) -> T {
        self.admit_all_departures = true;
        let outcome = demote(self);
        self.admit_all_departures = false;
        outcome
    }

    fn demote_for_promotion(&mut self, bytes: usize) {
        const SLICES_MAX: usize = 8;
        let limit = self
            .memory
            .maxmemory_bytes
            .load(std::sync::atomic::Ordering::Relaxed);
        let used = |shard: &Shard| {
            shard
                .memory
                .used_bytes
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        if limit == 0
            || self
                .memory
                .pool_limit_bytes
                .load(std::sync::atomic::Ordering::Relaxed)
                != 0
        {
            return;
        }
        for _ in 0..SLICES_MAX {
            if used(self) + bytes <= limit {
                return;
            }
            let step = self.demote_step(crate::now_ms(), true);
            if !step.progressed {
                return;
            }
        }
    }

    /// The location of a resident copy of the item at `location`, promoting a stub.
    pub(super) fn resident(
        &mut self,
        keyspace: usize,
        hash: u64,
        location: Location,
    ) -> Option<Location> {
        if self.header(location).is_stub() {
            self.promote(keyspace, hash, location)
        } else {
            Some(location)
        }
    }

    /// Fixed mode with tier 2: one careful release slice over the shard's oldest segment, whoever owns it
    /// (the FIFO put buffer's tail): hot items are kept (re-appended), the rest demoted to stubs or, when
    /// they have no tier-2 copy and `may_write` is false or the admission rule refuses them, evicted.
    pub fn demote_step(&mut self, now_ms: u64, may_write: bool) -> super::ReclaimStep {
        let tenant = match self.draining_slot {
            Some(slot) => self.segment(slot).tenant,
            None => {
                let oldest = self
                    .by_sequence
                    .values()
                    .copied()
                    .find(|&slot| !self.is_active(slot))
                    .or_else(|| self.by_sequence.values().copied().next());
                match oldest {
                    Some(slot) => self.segment(slot).tenant,
                    None => return super::release::ReclaimStep::default(),
                }
            }
        };
        match may_write {
            true => self.careful_release_step(tenant, now_ms),
            false => self.careful_reclaim_step(tenant, now_ms),
        }
    }

    /// Fixed mode with tier 2: one slice of demoting what overshot maxmemory between two housekeeping
    /// ticks (promotions, mostly: writes make room before they land). As for a promotion's own room,
    /// what leaves RAM is written whatever the admission rule says, so no promotion costs a key.
    pub fn demote_excess_step(&mut self, now_ms: u64) -> super::ReclaimStep {
        self.admitting_all_departures(|shard| shard.demote_step(now_ms, true))
    }

    /// Clean-ahead: writes tier-2 copies of admitted ephemeral items in the oldest half of this shard's
    /// segments (the FIFO tail, what a reclaim takes first), up to `budget_bytes`, so a later elastic
    /// shrink turns them into stubs at once instead of dropping them. Resumes after the last segment it
    /// finished (items never change in place, so a finished segment stays clean). Returns bytes written.
    pub fn clean_ahead_step(&mut self, budget_bytes: usize) -> usize {
        if self.tier.is_none() {
            return 0;
        }
        let sealed: Vec<(u64, u32)> = self
            .by_sequence
            .range(self.clean_ahead_after + 1..)
            .map(|(&sequence, &slot)| (sequence, slot))
            .filter(|&(_, slot)| !self.is_active(slot) && !self.is_draining(slot))
            .collect();
        let oldest_half = self.by_sequence.len() / 2;
        let mut written = 0;
        for (sequence, slot) in sealed.into_iter().take(oldest_half) {
            let mut offset = self.segment(slot).first_offset();
            while let Some(at) = offset {
                if written >= budget_bytes {
                    return written;
                }
                let header = *self.segment(slot).header(at);
                offset = self.segment(slot).next_offset(at);
                let location = super::location(slot, at);
                let owner = self.segment(slot).tenant;
                let wanted = header.alive == 1
                    && !header.is_stub()
                    && header.tier2_slot == 0
                    && !self.is_persistent(owner)
                    && self.tier2_allowed(owner);
                if wanted && self.write_clean_copy(location) {
                    written += header.item_bytes();
                    self.count(|stats| &stats.clean_ahead_bytes, header.item_bytes() as u64);
                }
            }
            self.clean_ahead_after = sequence;
        }
        written
    }

    // ----- recovery and cleaning -----------------------------------------------------------------

    /// Recovery: puts a stub for a value record at `slot`, replacing whatever the key held.
    pub fn recover_value(&mut self, slot: Slot, record: &RecordHeader, key: &[u8], now_ms: u64) {
        let RecordKind::Value(kind) = record.kind else {
            panic!("only value records become stubs");
        };
        let keyspace = record.keyspace as usize;
        let hash = hash_key(key);
        let old = self.find(keyspace, hash, key);
        if record.expire_at_ms != 0 && record.expire_at_ms <= now_ms {
            if let Some(old) = old {
                self.remove_item(keyspace, hash, old);
            }
            return;
        }
        let address = Address::of(keyspace);
        let mut header = ItemHeader::new(kind as u8, address.db as u8, key.len(), 0);
        header.value_len = record.value_bytes;
        if kind != Kind::String {
            header.value_len = 4;
        }
        header.namespace = address.namespace;
        header.expire_at_ms = record.expire_at_ms;
        header.client_flags = record.client_flags;
        header.tier2_slot = slot.0;
        header.flags = ITEM_FLAG_STUB;
        header.lfu_counter = super::LFU_INITIAL;
        header.access_s = self.access_clock_s(now_ms);
        header.cas = self.next_cas();
        if let Some(old) = old {
            self.free_collection_of(old);
        }
        let stub = self.append(address.tenant, &header, key, &[]);
        match old {
            Some(old) => {
                self.replace_location(keyspace, hash, old, stub);
                self.kill_item(old);
            }
            None => self.insert_location(keyspace, hash, stub),
        }
        self.sync_accounting();
    }

    /// Recovery: a tombstone.
    pub fn recover_tombstone(&mut self, keyspace: usize, key: &[u8]) {
        let hash = hash_key(key);
        if let Some(old) = self.find(keyspace, hash, key) {
            self.remove_item(keyspace, hash, old);
            self.sync_accounting();
        }
    }

    /// Recovery: FLUSHDB as one shard of `shard_count` did it: removes the keys of `keyspace` that hashed
    /// to that shard then (this store may have another shard count).
    pub fn recover_flush(&mut self, keyspace: usize, shard: u32, shard_count: u32) {
        let Some(space) = self.keyspace_at(keyspace) else {
            return;
        };
        let doomed: Vec<Location> = space.index.iter().copied().collect();
        for location in doomed {
            let key_hash = hash_key(self.item_key(location));
            if crate::shard_of_hash(key_hash, shard_count as usize) == shard as usize {
                self.remove_item(keyspace, key_hash, location);
            }
        }
        self.sync_accounting();
    }

    /// Appends the tier-2 slots of this shard's ephemeral items that have a clean copy.
    pub fn collect_clean_slots(&self, slots: &mut Vec<u64>) {
        for keyspace in self.namespaces.iter().flatten() {
            for &location in keyspace.index.iter() {
                let slot = self.header(location).tier2_slot;
                if slot != 0 && !self.is_persistent(self.segment(slot_of(location)).tenant) {
                    slots.push(slot);
                }
            }
        }
    }

    /// Cleaning: does anything in RAM still refer to the record at `slot` for `key`?
    pub fn liveness(&self, keyspace: usize, key: &[u8], slot: Slot) -> Liveness {
        let Some(location) = self.find(keyspace, hash_key(key), key) else {
            return Liveness::Dead;
        };
        let header = self.header(location);
        if header.tier2_slot != slot.0 {
            return Liveness::Dead;
        }
        let persistent = self.is_persistent(self.segment(slot_of(location)).tenant);
        let doorkeeper = header.flags & ITEM_FLAG_TIER2_DOORKEEPER != 0;
        match (persistent, header.is_stub()) {
            (true, _) => Liveness::Swap,
            (false, true) => Liveness::CleanStub {
                read_on_tier2: header.flags & ITEM_FLAG_TIER2_READ != 0,
                doorkeeper,
            },
            (false, false) => Liveness::CleanResident { doorkeeper },
        }
    }

    /// Cleaning: the record moved from `old` to `new`.
    pub fn repoint(&mut self, keyspace: usize, key: &[u8], old: Slot, new: Slot) {
        if let Some(location) = self.find(keyspace, hash_key(key), key) {
            if self.header(location).tier2_slot == old.0 {
                let header = self.header_mut(location);
                header.tier2_slot = new.0;
                // A new lap: it stays past the next cleaning only if read again meanwhile (and it is
                // cleaning's copy now, not the doorkeeper's record).
                header.flags &= !(ITEM_FLAG_TIER2_READ | ITEM_FLAG_TIER2_DOORKEEPER);
            }
        }
    }

    /// Cleaning: the clean record at `slot` is discarded: a stub pointing at it goes (an eviction), a
    /// resident item forgets its copy.
    pub fn discard_clean(&mut self, keyspace: usize, key: &[u8], slot: Slot) {
        let hash = hash_key(key);
        let Some(location) = self.find(keyspace, hash, key) else {
            return;
        };
        let header = *self.header(location);
        if header.tier2_slot != slot.0 {
            return;
        }
        if header.is_stub() {
            crate::changes::record(keyspace, key, Cause::Evicted);
            self.note_key_event(keyspace, location, super::KeyEventCause::Evicted);
            self.remove_item(keyspace, hash, location);
            self.stats.evicted_keys += 1;
            self.sync_accounting();
        } else {
            self.header_mut(location).tier2_slot = 0;
        }
    }
}

/// A stub's value as a scan lends it: a string read from tier 2 (on the calling thread, counted as a
/// sync read), nothing for a collection; None when the record cannot be read (the scan skips the key).
pub(super) fn stub_string(
    tier: Option<&TierLink>,
    header: &ItemHeader,
    key: &[u8],
) -> Option<Vec<u8>> {
    let tier = tier?;
    let kind = Kind::from_u8(header.kind);
    if kind != Kind::String {
        return Some(Vec::new());
    }
    tier.tier2
        .stats
        .shards
        .sync_reads
        .fetch_add(1, Ordering::Relaxed);
    let encoded = tier.tier2.read(Slot(header.tier2_slot)).ok()?;
    match decode_value(&encoded, key, kind).ok()? {
        StubValue::String(bytes) => Some(bytes),
        StubValue::Collection(_) => None,
    }
}

/// The keyspace address of an item written by `tenant` (items record namespace and database).
fn space_of_item(header: &ItemHeader, tenant: TenantId) -> usize {
    crate::pool::keyspace(tenant, header.namespace, header.db as usize)
}

enum StubValue {
    String(Vec<u8>),
    Collection(Collection),
}

/// The header of an encoded record, checked against the key and kind the stub expects.
fn check_record(encoded: &[u8], key: &[u8], kind: Kind) -> Result<RecordHeader, Tier2Error> {
    // Every record reaches a shard through a tier-2 read, which verified its checksum.
    let header = record::decode_verified(encoded).map_err(|_| Tier2Error::Corrupt)?;
    if record::key_of(&header, encoded) != key || header.kind != RecordKind::Value(kind) {
        return Err(Tier2Error::Corrupt);
    }
    Ok(header)
}

/// The value of an encoded record, checked against the key and kind the stub expects.
fn decode_value(encoded: &[u8], key: &[u8], kind: Kind) -> Result<StubValue, Tier2Error> {
    let header = check_record(encoded, key, kind)?;
    let value = record::value_of(&header, encoded);
    match kind {
        Kind::String => Ok(StubValue::String(value.to_vec())),
        _ => Collection::decode(kind, value)
            .map(StubValue::Collection)
            .map_err(|_| Tier2Error::Corrupt),
    }
}

#[cfg(test)]
mod residency_tests {
    use crate::shard::tests::shard;

    #[test]
    fn residency_is_live_bytes_over_the_rate_items_are_appended() {
        let mut shard = shard();
        let live_bytes = shard.live_item_bytes;
        shard.note_residency(1_000);
        assert_eq!(
            shard.ram_residency_ms, 0,
            "a first sample estimates nothing"
        );
        shard.live_item_bytes = live_bytes + (1 << 20);
        shard.appended_bytes += 1 << 19;
        shard.note_residency(1_050);
        assert_eq!(shard.ram_residency_ms, 0, "within the window: no estimate");
        shard.note_residency(2_000);
        assert_eq!(
            shard.ram_residency_ms, 2_000,
            "1 MiB live, 512 KiB a second"
        );
        shard.appended_bytes += 1 << 20;
        shard.note_residency(3_000);
        assert_eq!(shard.ram_residency_ms, (2_000 * 3 + 1_000) / 4, "smoothed");
        shard.note_residency(4_000);
        assert_eq!(
            shard.ram_residency_ms,
            (2_000 * 3 + 1_000) / 4,
            "nothing appended: the estimate stands"
        );
        shard.live_item_bytes = live_bytes;
    }
}
