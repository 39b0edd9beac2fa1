//! Values of a shard: strings live in their items; a collection lives in the shard's table of
//! collections and its item holds the 4-byte handle. Reads, updates and puts of both, whole values
//! (`OwnedValue`) for COPY, RENAME and MOVE, OBJECT ENCODING and MEMORY USAGE.
use super::{slot_of, ItemInfo, Location, Shard};
use crate::changes::Cause;
use crate::hash_key;
use crate::memory::segment::ItemHeader;
use crate::pool::{Address, TenantId};
use crate::types::{Collection, CollectionType, Kind};
use crate::WrongType;

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

impl Shard {
    // ----- strings -------------------------------------------------------------------------------

    /// Reads a string value (counting the hit/miss). Err when the key holds another type.
    pub fn get_string(
        &mut self,
        keyspace: usize,
        key: &[u8],
        now_ms: u64,
    ) -> Result<Option<(&[u8], ItemInfo)>, WrongType> {
        let Some((location, previous_access_s)) = self.access_location_since(keyspace, key, now_ms)
        else {
            return Ok(None);
        };
        let info = self.info_of(location);
        if info.kind != Kind::String {
            return Err(WrongType);
        }
        if self.serves_without_promotion(location, previous_access_s, now_ms) {
            return Ok(self
                .first_stub_read(keyspace, key, location)
                .map(|value| (value, info)));
        }
        let Some(location) = self.materialize(keyspace, key, location) else {
            return Ok(None);
        };
        Ok(Some((self.item_value(location), info)))
    }

    /// The length of a string value, without counting a hit or recording an access (a reply is sized
    /// before it is built). None when missing or not a string.
    pub fn peek_string_len(&mut self, keyspace: usize, key: &[u8], now_ms: u64) -> Option<usize> {
        let (_, location) = self.lookup(keyspace, key, now_ms)?;
        let header = self.header(location);
        (Kind::from_u8(header.kind) == Kind::String).then_some(header.value_len as usize)
    }

    /// Stores a string under `key`, replacing any value of any type. Returns the new CAS.
    pub fn set_string(
        &mut self,
        keyspace: usize,
        key: &[u8],
        value: &[u8],
        expire_at_ms: u64,
        client_flags: u32,
        now_ms: u64,
    ) -> u64 {
        let mut header = new_header(Kind::String, keyspace, key.len(), value.len());
        header.expire_at_ms = expire_at_ms;
        header.client_flags = client_flags;
        self.put_item(keyspace, key, header, value, now_ms)
    }

    /// Writes an item for `key`, replacing the old one (and freeing an old collection).
    fn put_item(
        &mut self,
        keyspace: usize,
        key: &[u8],
        mut header: ItemHeader,
        value: &[u8],
        now_ms: u64,
    ) -> u64 {
        let hash = hash_key(key);
        let cas = self.next_cas();
        header.cas = cas;
        header.access_s = self.access_clock_s(now_ms);
        crate::changes::record(keyspace, key, Cause::Written);
        let old = self.find(keyspace, hash, key);
        // New keys are not evicted first; an overwritten key keeps its frequency, as Redis's
        // dbOverwrite does: how often a key is read is the key's, not the value's (a hot key SET
        // often would otherwise look new, and cold, after every SET).
        header.lfu_counter = old.map_or(super::LFU_INITIAL, |old| {
            self.decayed_lfu_counter(old, header.access_s)
                .max(super::LFU_INITIAL)
        });
        let writer = Address::of(keyspace).tenant;
        let log = self.must_log(writer, old);
        if let Some(old) = old {
            self.wake_stream_readers(keyspace, old);
            self.free_collection_of(old);
        }
        let new = self.append(writer, &header, key, value);
        match old {
            Some(old) => {
                self.replace_location(keyspace, hash, old, new);
                self.kill_item(old);
            }
            None => {
                self.insert_location(keyspace, hash, new);
                self.note_key(keyspace, key, super::KeyEventCause::Created);
            }
        }
        if log {
            self.log_write(keyspace, key, new);
        }
        self.sync_accounting();
        cas
    }

    // ----- collections ---------------------------------------------------------------------------

    fn collection_location<T: CollectionType>(
        &mut self,
        keyspace: usize,
        key: &[u8],
        now_ms: u64,
    ) -> Result<Option<(u64, Location)>, WrongType> {
        let Some((hash, location)) = self.lookup(keyspace, key, now_ms) else {
            return Ok(None);
        };
        if Kind::from_u8(self.header(location).kind) != T::KIND {
            return Err(WrongType);
        }
        Ok(self
            .resident(keyspace, hash, location)
            .map(|location| (hash, location)))
    }

    /// Reads a collection of type `T` (counting the hit/miss).
    pub fn read<T: CollectionType>(
        &mut self,
        keyspace: usize,
        key: &[u8],
        now_ms: u64,
    ) -> Result<Option<&T>, WrongType> {
        let Some(location) = self.access_location(keyspace, key, now_ms) else {
            return Ok(None);
        };
        if Kind::from_u8(self.header(location).kind) != T::KIND {
            return Err(WrongType);
        }
        let Some(location) = self.materialize(keyspace, key, location) else {
            return Ok(None);
        };
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
        keyspace: usize,
        key: &[u8],
        now_ms: u64,
    ) -> Result<Option<&T>, WrongType> {
        let Some((_, location)) = self.collection_location::<T>(keyspace, key, now_ms)? else {
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
        keyspace: usize,
        key: &[u8],
        now_ms: u64,
        create: bool,
        update: impl FnOnce(&mut T) -> R,
    ) -> Result<Option<R>, WrongType> {
        let (hash, location) = match self.collection_location::<T>(keyspace, key, now_ms)? {
            Some(found) => found,
            None if create => {
                self.put_collection(keyspace, key, T::default().wrap(), 0, now_ms);
                self.lookup(keyspace, key, now_ms).expect("just created")
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
        debug_assert!(
            self.collection_bytes >= bytes_before,
            "a collection's {bytes_before} bytes are counted in the shard's {}",
            self.collection_bytes
        );
        self.collection_bytes = self.collection_bytes + bytes_after - bytes_before;
        let tenant = self.segment(slot_of(location)).tenant;
        self.charge(
            tenant,
            bytes_after.abs_diff(bytes_before),
            bytes_after > bytes_before,
        );
        let log = self.must_log(Address::of(keyspace).tenant, Some(location));
        if now_empty {
            crate::changes::record(keyspace, key, Cause::Removed);
            self.remove_item(keyspace, hash, location);
            if log {
                self.log_tombstone(keyspace, key);
            }
        } else {
            crate::changes::record(keyspace, key, Cause::Written);
            let cas = self.next_cas();
            let header = self.header_mut(location);
            header.cas = cas;
            // The tier-2 copy, if any, holds the value before this update.
            header.tier2_slot = 0;
            self.touch(location, now_ms);
            if log {
                self.log_write(keyspace, key, location);
            }
        }
        self.sync_accounting();
        Ok(Some(result))
    }

    /// Stores a collection under `key`, replacing any old value.
    pub fn put_collection(
        &mut self,
        keyspace: usize,
        key: &[u8],
        collection: Collection,
        expire_at_ms: u64,
        now_ms: u64,
    ) {
        assert!(!collection.is_empty() || collection.memory_bytes() < 4096);
        let kind = collection.kind();
        let handle = self.adopt_collection(Address::of(keyspace).tenant, collection);
        let value = handle.to_le_bytes();
        let mut header = new_header(kind, keyspace, key.len(), value.len());
        header.expire_at_ms = expire_at_ms;
        self.put_item(keyspace, key, header, &value, now_ms);
    }

    /// Takes a collection into the shard's table, charged to `tenant`; returns its handle.
    pub(super) fn adopt_collection(&mut self, tenant: TenantId, collection: Collection) -> u32 {
        self.collection_bytes += collection.memory_bytes();
        self.charge(tenant, collection.memory_bytes(), true);
        match self.free_collections.pop() {
            Some(handle) => {
                debug_assert!(
                    self.collections[handle as usize].is_none(),
                    "free collection handle {handle} holds no collection"
                );
                self.collections[handle as usize] = Some(collection);
                handle
            }
            None => {
                self.collections.push(Some(collection));
                (self.collections.len() - 1) as u32
            }
        }
    }

    /// Frees a collection handle stored as a collection item's value.
    pub(super) fn free_collection_of(&mut self, location: Location) {
        let header = *self.header(location);
        if Kind::from_u8(header.kind) == Kind::String || header.is_stub() {
            return;
        }
        let handle = collection_handle(self.item_value(location));
        let collection = self.collections[handle as usize]
            .take()
            .expect("a collection item owns its handle");
        debug_assert!(
            self.collection_bytes >= collection.memory_bytes(),
            "a freed collection's {} bytes are counted in the shard's {}",
            collection.memory_bytes(),
            self.collection_bytes
        );
        self.collection_bytes -= collection.memory_bytes();
        self.charge(
            self.segment(slot_of(location)).tenant,
            collection.memory_bytes(),
            false,
        );
        self.free_collections.push(handle);
    }

    // ----- whole values --------------------------------------------------------------------------

    /// A copy of the value at `key` with its expiry (COPY, and RENAME/MOVE across shards).
    pub fn clone_value(&mut self, keyspace: usize, key: &[u8], now_ms: u64) -> Option<OwnedValue> {
        let (hash, location) = self.lookup(keyspace, key, now_ms)?;
        let location = self.resident(keyspace, hash, location)?;
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
    pub fn take_value(&mut self, keyspace: usize, key: &[u8], now_ms: u64) -> Option<OwnedValue> {
        let value = self.clone_value(keyspace, key, now_ms)?;
        self.remove(keyspace, key, now_ms);
        Some(value)
    }

    /// Stores a whole value under `key`, replacing any old one.
    pub fn put_value(&mut self, keyspace: usize, key: &[u8], value: OwnedValue, now_ms: u64) {
        match value.data {
            OwnedData::String {
                bytes,
                client_flags,
            } => {
                self.set_string(
                    keyspace,
                    key,
                    &bytes,
                    value.expire_at_ms,
                    client_flags,
                    now_ms,
                );
            }
            OwnedData::Collection(collection) => {
                self.put_collection(keyspace, key, collection, value.expire_at_ms, now_ms)
            }
        }
    }

    /// The collection's encoding name for OBJECT ENCODING.
    pub fn encoding(
        &mut self,
        keyspace: usize,
        key: &[u8],
        now_ms: u64,
        limits: &crate::rdb::EncodingLimits,
    ) -> Option<&'static str> {
        let (hash, location) = self.lookup(keyspace, key, now_ms)?;
        let location = self.resident(keyspace, hash, location)?;
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
                    .encoding(limits)
            }
        })
    }

    /// Bytes the key and its value take (MEMORY USAGE).
    pub fn memory_usage(&mut self, keyspace: usize, key: &[u8], now_ms: u64) -> Option<usize> {
        let (_, location) = self.lookup(keyspace, key, now_ms)?;
        let header = *self.header(location);
        let mut bytes = header.item_bytes() + std::mem::size_of::<Location>() + 1;
        if Kind::from_u8(header.kind) != Kind::String && !header.is_stub() {
            let handle = collection_handle(self.item_value(location));
            bytes += self.collections[handle as usize]
                .as_ref()
                .expect("a collection item owns its handle")
                .memory_bytes();
        }
        Some(bytes)
    }
}

/// A header for an item of `kind` in the space of the keyspace address `keyspace`.
fn new_header(kind: Kind, keyspace: usize, key_len: usize, value_len: usize) -> ItemHeader {
    let address = Address::of(keyspace);
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
    use crate::shard::tests::shard;
    use crate::types::{HashValue, ListValue};

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
        shard.assert_consistent();
    }

    #[test]
    fn an_overwritten_key_keeps_its_frequency() {
        let mut shard = shard();
        shard.set_string(0, b"hot", b"v1", 0, 0, 1000);
        let initial = shard.peek(0, b"hot", 1000).unwrap().lfu_counter;
        assert_eq!(initial, crate::shard::LFU_INITIAL);
        for _ in 0..200 {
            shard.get_string(0, b"hot", 1000).unwrap().unwrap();
        }
        let read = shard.peek(0, b"hot", 1000).unwrap().lfu_counter;
        assert!(read > initial, "200 reads count");
        shard.set_string(0, b"hot", b"v2", 0, 0, 1000);
        assert_eq!(shard.peek(0, b"hot", 1000).unwrap().lfu_counter, read);
        // Ten idle minutes decay it by ten, never below a new key's.
        shard.set_string(0, b"hot", b"v3", 0, 0, 1000 + 600_000);
        assert_eq!(
            shard.peek(0, b"hot", 1000 + 600_000).unwrap().lfu_counter,
            read.saturating_sub(10).max(initial)
        );
        shard.set_string(0, b"new", b"v", 0, 0, 1000);
        assert_eq!(shard.peek(0, b"new", 1000).unwrap().lfu_counter, initial);
        shard.assert_consistent();
    }

    #[test]
    fn collections_update_and_wrongtype() {
        let mut shard = shard();
        let added = shard
            .update::<HashValue, _>(0, b"h", 0, true, |hash| hash.insert(b"f", b"v"))
            .unwrap();
        assert_eq!(added, Some(true));
        shard.assert_consistent();
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
        shard.assert_consistent();
    }

    #[test]
    fn whole_values_move_between_keys() {
        let mut shard = shard();
        shard.set_string(0, b"s", b"text", 9000, 3, 0);
        shard
            .update::<HashValue, _>(0, b"h", 0, true, |hash| hash.insert(b"f", b"v"))
            .unwrap();
        let string = shard.take_value(0, b"s", 0).expect("s exists");
        assert_eq!((string.kind(), string.expire_at_ms), (Kind::String, 9000));
        let hash = shard.clone_value(0, b"h", 0).expect("h exists");
        shard.put_value(1, b"s", string, 0);
        shard.put_value(1, b"h", hash, 0);
        assert!(!shard.exists(0, b"s", 0) && shard.exists(0, b"h", 0));
        assert_eq!(shard.get_string(1, b"s", 0).unwrap().unwrap().0, b"text");
        let limits = crate::rdb::EncodingLimits::default();
        assert_eq!(shard.encoding(1, b"h", 0, &limits), Some("listpack"));
        assert_eq!(shard.volatile_stats(1).0, 1);
        shard.assert_consistent();
    }
}
