//! The per-keyspace index of a shard: a hash table of item locations per keyspace, lookups (with lazy
//! expiry and LRU/LFU access records), the generic key operations, whole keyspaces (FLUSHDB, SWAPDB),
//! SCAN and random keys.
use super::{location, offset_of, slot_of, space_id, space_of, ItemInfo, Location, Shard};
use crate::changes::Cause;
use crate::hash_key;
use crate::pool::Address;
use crate::tier2::record::RecordKind;
use crate::types::Kind;
use hashbrown::HashTable;
use rand::Rng;
use std::cell::Cell;

thread_local! {
    /// Set while a CLIENT NO-TOUCH client's command runs on this thread: its reads leave LRU/LFU alone.
    static NO_TOUCH: Cell<bool> = const { Cell::new(false) };
}

/// Makes this thread's accesses leave LRU/LFU records alone (true) or update them (false) until changed
/// again; returns the previous setting (so a nested run can put it back).
pub fn set_thread_no_touch(no_touch: bool) -> bool {
    NO_TOUCH.with(|cell| cell.replace(no_touch))
}

/// One keyspace (a database of a namespace) of a shard.
#[derive(Default)]
pub(super) struct Keyspace {
    pub(super) index: HashTable<Location>,
    /// Keys with an expiry: active expiry skips a shard that has none.
    pub(super) volatile_keys: usize,
}

impl Shard {
    /// The keyspace at `keyspace`, if its namespace exists here.
    pub(super) fn keyspace_at(&self, keyspace: usize) -> Option<&Keyspace> {
        let address = Address::of(keyspace);
        self.namespaces
            .get(address.namespace as usize)
            .map(|namespace| &namespace[address.db])
    }

    /// The keyspace at `keyspace`, creating its namespace.
    pub(super) fn keyspace_at_mut(&mut self, keyspace: usize) -> &mut Keyspace {
        let address = Address::of(keyspace);
        let namespace = address.namespace as usize;
        while self.namespaces.len() <= namespace {
            let databases = self.config.databases;
            self.namespaces
                .push((0..databases).map(|_| Keyspace::default()).collect());
        }
        &mut self.namespaces[namespace][address.db]
    }

    /// Keys in every keyspace of the shard.
    pub fn key_total(&self) -> usize {
        self.namespaces
            .iter()
            .flatten()
            .map(|keyspace| keyspace.index.len())
            .sum()
    }

    pub fn key_count(&self, keyspace: usize) -> usize {
        self.keyspace_at(keyspace)
            .map_or(0, |keyspace| keyspace.index.len())
    }

    /// Keys of `keyspace` with an expiry, and the sum of their TTLs estimated from the average TTL seen
    /// by active expiry (as Redis's avg_ttl). O(1): INFO must not walk the keyspace.
    pub fn volatile_stats(&self, keyspace: usize) -> (usize, u64) {
        let count = self.keyspace_at(keyspace).map_or(0, |keyspace| {
            debug_assert!(
                keyspace.volatile_keys <= keyspace.index.len(),
                "{} volatile keys of {} keys",
                keyspace.volatile_keys,
                keyspace.index.len()
            );
            keyspace.volatile_keys
        });
        (count, count as u64 * self.average_ttl_ms)
    }

    pub(super) fn find(&self, keyspace: usize, hash: u64, key: &[u8]) -> Option<Location> {
        let segments = &self.segments;
        self.keyspace_at(keyspace)?
            .index
            .find(hash, |&candidate| {
                let segment = segments[slot_of(candidate) as usize]
                    .as_ref()
                    .expect("indexed items live in mapped segments");
                segment.key(offset_of(candidate)) == key
            })
            .copied()
    }

    /// Repoints the index entry of a live item at its new copy.
    pub(super) fn replace_location(
        &mut self,
        keyspace: usize,
        hash: u64,
        old: Location,
        new: Location,
    ) {
        debug_assert_eq!(self.header(new).alive, 1, "the index points at live items");
        let entry = self
            .keyspace_at_mut(keyspace)
            .index
            .find_mut(hash, |&candidate| candidate == old)
            .expect("a live item is indexed");
        *entry = new;
    }

    pub(super) fn insert_location(&mut self, keyspace: usize, hash: u64, new: Location) {
        debug_assert_eq!(self.header(new).alive, 1, "the index points at live items");
        self.keyspace_at_mut(keyspace);
        let address = Address::of(keyspace);
        let segments = &self.segments;
        let keyspace = &mut self.namespaces[address.namespace as usize][address.db];
        keyspace.index.insert_unique(hash, new, |&existing| {
            let segment = segments[slot_of(existing) as usize]
                .as_ref()
                .expect("indexed items live in mapped segments");
            hash_key(segment.key(offset_of(existing)))
        });
    }

    fn remove_location(&mut self, keyspace: usize, hash: u64, old: Location) {
        let Ok(entry) = self
            .keyspace_at_mut(keyspace)
            .index
            .find_entry(hash, |&candidate| candidate == old)
        else {
            panic!("removing an indexed item");
        };
        entry.remove();
    }

    /// Removes the key at `location` entirely.
    pub(super) fn remove_item(&mut self, keyspace: usize, hash: u64, location: Location) {
        debug_assert_eq!(
            self.header(location).alive,
            1,
            "only a live item is removed"
        );
        self.wake_stream_readers(keyspace, location);
        self.free_collection_of(location);
        self.remove_location(keyspace, hash, location);
        self.kill_item(location);
    }

    /// Finds a live, unexpired key. Expired keys are deleted on the way (lazy expiry).
    pub(super) fn lookup(
        &mut self,
        keyspace: usize,
        key: &[u8],
        now_ms: u64,
    ) -> Option<(u64, Location)> {
        let hash = hash_key(key);
        let location = self.find(keyspace, hash, key)?;
        let expire_at_ms = self.header(location).expire_at_ms;
        if expire_at_ms != 0 && expire_at_ms <= now_ms {
            crate::changes::record(keyspace, key, Cause::Expired);
            self.note_key_event(keyspace, location, super::KeyEventCause::Expired);
            self.remove_item(keyspace, hash, location);
            self.stats.expired_keys += 1;
            self.sync_accounting();
            return None;
        }
        Some((hash, location))
    }

    /// Records an access for LRU/LFU (Redis's logarithmic counter with decay by idle minutes).
    pub(super) fn touch(&mut self, location: Location, now_ms: u64) {
        if NO_TOUCH.with(Cell::get) {
            return;
        }
        let clock = self.access_clock_s(now_ms);
        let random: f64 = self.rng.gen();
        let mut counter = self.decayed_lfu_counter(location, clock);
        let header = self.header_mut(location);
        if counter < 255 {
            let base = counter.saturating_sub(super::LFU_INITIAL) as f64;
            if random < 1.0 / (base * 10.0 + 1.0) {
                counter += 1;
            }
        }
        header.lfu_counter = counter;
        header.access_s = clock;
        header.note_read();
    }

    /// Sets a key's access record as RESTORE's IDLETIME or FREQ asks: last accessed `idle_s` seconds ago,
    /// or an LFU counter of `frequency`. False when the key is missing.
    pub fn set_access(
        &mut self,
        keyspace: usize,
        key: &[u8],
        now_ms: u64,
        idle_s: Option<u64>,
        frequency: Option<u8>,
    ) -> bool {
        let Some((_, location)) = self.lookup(keyspace, key, now_ms) else {
            return false;
        };
        let clock = self.access_clock_s(now_ms);
        let header = self.header_mut(location);
        if let Some(idle_s) = idle_s {
            header.access_s = clock.saturating_sub(idle_s.min(u32::MAX as u64) as u32);
        }
        if let Some(frequency) = frequency {
            header.lfu_counter = frequency;
            header.access_s = clock;
        }
        true
    }

    /// The LFU counter of the item at `location` at access-clock second `clock`: less one per idle
    /// minute (Redis's lfu-decay-time 1).
    pub(super) fn decayed_lfu_counter(&self, location: Location, clock: u32) -> u8 {
        let header = self.header(location);
        let idle_minutes = clock.saturating_sub(header.access_s) / 60;
        header
            .lfu_counter
            .saturating_sub(idle_minutes.min(255) as u8)
    }

    pub(super) fn info_of(&self, location: Location) -> ItemInfo {
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
    pub fn peek(&mut self, keyspace: usize, key: &[u8], now_ms: u64) -> Option<ItemInfo> {
        let (_, location) = self.lookup(keyspace, key, now_ms)?;
        Some(self.info_of(location))
    }

    /// Looks a key up as a read: counts a hit or miss and records the access.
    pub fn access(&mut self, keyspace: usize, key: &[u8], now_ms: u64) -> Option<ItemInfo> {
        self.access_location(keyspace, key, now_ms)
            .map(|location| self.info_of(location))
    }

    /// `access`, returning where the item is so the caller need not look it up again.
    pub(super) fn access_location(
        &mut self,
        keyspace: usize,
        key: &[u8],
        now_ms: u64,
    ) -> Option<Location> {
        self.access_location_since(keyspace, key, now_ms)
            .map(|(location, _)| location)
    }

    /// `access_location`, with the item's previous access time (the access clock, in seconds).
    pub(super) fn access_location_since(
        &mut self,
        keyspace: usize,
        key: &[u8],
        now_ms: u64,
    ) -> Option<(Location, u32)> {
        match self.lookup(keyspace, key, now_ms) {
            Some((hash, location)) => {
                self.stats.keyspace_hits += 1;
                self.tenant_stats_mut(Address::of(keyspace).tenant).hits += 1;
                let previous_access_s = self.header(location).access_s;
                self.touch(location, now_ms);
                self.note_read(|| hash);
                Some((location, previous_access_s))
            }
            None => {
                self.stats.keyspace_misses += 1;
                self.tenant_stats_mut(Address::of(keyspace).tenant).misses += 1;
                self.note_key(keyspace, key, super::KeyEventCause::Missed);
                self.note_read(|| crate::hash_key(key));
                None
            }
        }
    }

    pub fn exists(&mut self, keyspace: usize, key: &[u8], now_ms: u64) -> bool {
        self.lookup(keyspace, key, now_ms).is_some()
    }

    /// Deletes a key; true when it existed.
    pub fn remove(&mut self, keyspace: usize, key: &[u8], now_ms: u64) -> bool {
        let Some((hash, location)) = self.lookup(keyspace, key, now_ms) else {
            return false;
        };
        let log = self.must_log(Address::of(keyspace).tenant, Some(location));
        crate::changes::record(keyspace, key, Cause::Removed);
        self.remove_item(keyspace, hash, location);
        if log {
            self.log_tombstone(keyspace, key);
        }
        self.sync_accounting();
        true
    }

    /// Sets or clears (`None`) a key's expiry; false when the key does not exist. An expiry in the past
    /// deletes the key, as Redis does.
    pub fn set_expire_at(
        &mut self,
        keyspace: usize,
        key: &[u8],
        now_ms: u64,
        at_ms: Option<u64>,
    ) -> bool {
        let Some((hash, location)) = self.lookup(keyspace, key, now_ms) else {
            return false;
        };
        let log = self.must_log(Address::of(keyspace).tenant, Some(location));
        match at_ms {
            Some(at_ms) if at_ms <= now_ms => {
                crate::changes::record(keyspace, key, Cause::Removed);
                self.remove_item(keyspace, hash, location);
                if log {
                    self.log_tombstone(keyspace, key);
                }
                self.sync_accounting();
            }
            _ => {
                // A persistent item's record carries its expiry: log it again (with its value).
                let Some(location) = (if log {
                    self.resident(keyspace, hash, location)
                } else {
                    Some(location)
                }) else {
                    return false;
                };
                crate::changes::record(keyspace, key, Cause::Written);
                let cas = self.next_cas();
                let header = self.header_mut(location);
                let was_volatile = header.expire_at_ms != 0;
                header.expire_at_ms = at_ms.unwrap_or(0);
                header.cas = cas;
                let keyspace = self.keyspace_at_mut(keyspace);
                match (was_volatile, at_ms.is_some()) {
                    (false, true) => keyspace.volatile_keys += 1,
                    (true, false) => {
                        debug_assert!(keyspace.volatile_keys > 0, "a key with a TTL is volatile");
                        keyspace.volatile_keys -= 1;
                    }
                    _ => {}
                }
                debug_assert!(
                    keyspace.volatile_keys <= keyspace.index.len(),
                    "volatile keys are keys"
                );
                if log {
                    self.log_item(location);
                }
            }
        }
        true
    }

    // ----- whole keyspaces -----------------------------------------------------------------------

    /// Deletes every key of one keyspace.
    pub fn flush_db(&mut self, keyspace: usize) {
        if self.keyspace_at(keyspace).is_none() {
            return;
        }
        let mut event = (self.id as u32).to_le_bytes().to_vec();
        event.extend_from_slice(&(self.config.shards as u32).to_le_bytes());
        self.log_keyspace_event(RecordKind::FlushDb, keyspace, &event);
        let target = self.keyspace_at_mut(keyspace);
        let locations: Vec<Location> = target.index.iter().copied().collect();
        target.index = HashTable::new();
        // blocked stream readers learn that their streams are gone
        if !self.waiters.is_empty() {
            let space = space_id(keyspace);
            self.wake_all_waiters_of([space, space]);
        }
        for location in locations {
            self.free_collection_of(location);
            self.kill_item(location);
        }
        assert_eq!(
            self.keyspace_at_mut(keyspace).volatile_keys,
            0,
            "a flushed keyspace has no key with an expiry left"
        );
        self.sync_accounting();
    }

    /// Exchanges the contents of two keyspaces of one namespace (SWAPDB). Items record their database
    /// (scans and expiry read it), so every moved item's header is rewritten. Blocked clients of either
    /// keyspace retry.
    pub fn swap_dbs(&mut self, first: usize, second: usize) {
        if first == second {
            return;
        }
        let namespace = Address::of(first).namespace;
        assert_eq!(
            namespace,
            Address::of(second).namespace,
            "SWAPDB swaps the keyspaces of one namespace"
        );
        // SWAPDB runs on every shard under all their locks: one record (replayed on every shard) says it.
        if self.id == 0 {
            self.log_keyspace_event(RecordKind::SwapDb, first, &(second as u64).to_le_bytes());
        }
        self.keyspace_at_mut(first);
        let keyspaces = &mut self.namespaces[namespace as usize];
        keyspaces.swap(Address::of(first).db, Address::of(second).db);
        for keyspace in [first, second] {
            let locations: Vec<Location> = self
                .keyspace_at_mut(keyspace)
                .index
                .iter()
                .copied()
                .collect();
            for location in locations {
                self.header_mut(location).db = Address::of(keyspace).db as u8;
                self.relocate_tier2_copy(keyspace, location);
            }
        }
        self.wake_all_waiters_of([space_id(first), space_id(second)]);
    }

    /// Calls `visit` with each live key of `keyspace` from the cursor on, at most `count` keys; returns
    /// the next cursor (0 when done). Cursor = (segment sequence << 22) | (offset / 8).
    pub fn scan(
        &mut self,
        keyspace: usize,
        cursor: u64,
        count: usize,
        now_ms: u64,
        mut visit: impl FnMut(&[u8], Kind),
    ) -> u64 {
        self.walk_items(keyspace, cursor, count, now_ms, false, |key, kind, _| {
            visit(key, kind)
        })
    }

    /// `scan` that also lends each item's value bytes (a string's bytes; a collection's handle).
    pub fn scan_items(
        &mut self,
        keyspace: usize,
        cursor: u64,
        count: usize,
        now_ms: u64,
        visit: impl FnMut(&[u8], Kind, &[u8]),
    ) -> u64 {
        self.walk_items(keyspace, cursor, count, now_ms, true, visit)
    }

    /// The walk of `scan` and `scan_items`; values (read from tier 2 for stubs) only `with_values`.
    fn walk_items(
        &mut self,
        keyspace: usize,
        cursor: u64,
        count: usize,
        now_ms: u64,
        with_values: bool,
        mut visit: impl FnMut(&[u8], Kind, &[u8]),
    ) -> u64 {
        let mut sequence = cursor >> 22;
        let mut offset = ((cursor & ((1 << 22) - 1)) * 8) as u32;
        let mut visited = 0;
        let space = space_id(keyspace);
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
                    let kind = Kind::from_u8(header.kind);
                    if !header.is_stub() {
                        visit(segment.key(offset), kind, segment.value(offset));
                    } else if !with_values {
                        visit(segment.key(offset), kind, &[]);
                    } else if let Some(value) =
                        super::tier::stub_string(self.tier.as_ref(), header, segment.key(offset))
                    {
                        // Read on this worker without promoting (a promotion would move the item
                        // ahead of the scan, to be seen twice); a collection's handle means nothing
                        // to callers, so a collection stub lends no bytes.
                        visit(segment.key(offset), kind, &value);
                    }
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

    /// A random live key of `keyspace`, if any.
    pub fn random_key(&mut self, keyspace: usize, now_ms: u64) -> Option<Vec<u8>> {
        for _ in 0..16 {
            if self.key_count(keyspace) == 0 {
                return None;
            }
            let Some(location) = self.sample_locations(1, false).first().copied() else {
                continue;
            };
            let header = *self.header(location);
            if space_id(space_of(&header)) != space_id(keyspace) {
                continue;
            }
            let key = self.item_key(location).to_vec();
            if self.lookup(keyspace, &key, now_ms).is_some() {
                return Some(key);
            }
        }
        // Sampling missed (other keyspaces dominate): walk instead.
        let mut found = None;
        self.scan(keyspace, 0, 1, now_ms, |key, _| found = Some(key.to_vec()));
        found
    }

    /// Up to `count` live items from a random segment (only items with an expiry when `volatile_only`).
    pub(super) fn sample_locations(&mut self, count: usize, volatile_only: bool) -> Vec<Location> {
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
}

#[cfg(test)]
mod tests {
    use crate::shard::tests::shard;

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
        shard.assert_consistent();
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
        shard.assert_consistent();
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
        shard.assert_consistent();
    }

    #[test]
    #[should_panic(expected = "SWAPDB swaps the keyspaces of one namespace")]
    fn swap_dbs_never_crosses_namespaces() {
        let mut shard = shard();
        shard.swap_dbs(0, crate::pool::keyspace(0, 1, 0));
    }
}
