//! The tracking table of client-side caching (Redis's `TrackingTable`): which clients read which key,
//! so a change of the key is sent to exactly them. An entry goes when its key changes (everyone who read
//! it is told once) or when the table is over its bounds (oldest entries first: their readers are told
//! as if the key changed, so no client keeps a value nobody will invalidate).
//!
//! Keys are per namespace (a tenant never learns another tenant's key names) but not per database, as
//! in Redis: a write to `k` in database 1 invalidates readers of `k` in database 0.
use std::collections::{BTreeMap, HashMap};

/// A tracked key: its namespace and its name.
pub type TableKey = (u16, Box<[u8]>);

/// What one entry costs beyond its key's bytes (held twice: the map and the age order), counted
/// against `tracking-table-max-bytes`.
const ENTRY_OVERHEAD_BYTES: usize = 96;
/// What one client id in an entry costs.
const ITEM_BYTES: usize = std::mem::size_of::<u64>();

struct Entry {
    /// Insertion sequence: the key of this entry in `Table::by_age`.
    sequence: u64,
    /// Ids of the clients that read the key since it last changed, each once.
    clients: Vec<u64>,
}

#[derive(Default)]
pub struct Table {
    entries: HashMap<TableKey, Entry>,
    /// Entries oldest first, for eviction over the bounds.
    by_age: BTreeMap<u64, TableKey>,
    next_sequence: u64,
    /// Client ids over all entries (INFO `tracking_total_items`).
    items: usize,
    /// Bytes the table holds (keys, ids and overhead).
    bytes: usize,
}

fn entry_bytes(key: &[u8]) -> usize {
    2 * key.len() + ENTRY_OVERHEAD_BYTES
}

impl Table {
    /// Records that `client` read `key`; true when that is a new (key, client) item.
    pub fn remember(&mut self, namespace: u16, key: &[u8], client: u64) -> bool {
        let table_key: TableKey = (namespace, key.into());
        let entry = match self.entries.get_mut(&table_key) {
            Some(entry) => entry,
            None => {
                let sequence = self.next_sequence;
                self.next_sequence += 1;
                self.by_age.insert(sequence, table_key.clone());
                self.bytes += entry_bytes(key);
                self.entries.entry(table_key).or_insert(Entry {
                    sequence,
                    clients: Vec::new(),
                })
            }
        };
        if entry.clients.contains(&client) {
            return false;
        }
        entry.clients.push(client);
        self.items += 1;
        self.bytes += ITEM_BYTES;
        true
    }

    /// Removes `key`'s entry and returns the clients that read it.
    pub fn take(&mut self, namespace: u16, key: &[u8]) -> Option<Vec<u64>> {
        let table_key: TableKey = (namespace, key.into());
        let entry = self.entries.remove(&table_key)?;
        self.by_age.remove(&entry.sequence);
        Some(self.forget(&table_key, entry))
    }

    /// Removes the oldest entry: its key and the clients that read it.
    pub fn pop_oldest(&mut self) -> Option<(TableKey, Vec<u64>)> {
        let (_, table_key) = self.by_age.pop_first()?;
        let entry = self
            .entries
            .remove(&table_key)
            .expect("every aged key has an entry");
        let clients = self.forget(&table_key, entry);
        Some((table_key, clients))
    }

    fn forget(&mut self, table_key: &TableKey, entry: Entry) -> Vec<u64> {
        self.items -= entry.clients.len();
        self.bytes -= entry_bytes(&table_key.1) + entry.clients.len() * ITEM_BYTES;
        debug_assert_eq!(self.entries.len(), self.by_age.len());
        entry.clients
    }

    /// Forgets everything (FLUSHDB, FLUSHALL: every client was sent a null invalidation).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.by_age.clear();
        self.items = 0;
        self.bytes = 0;
    }

    /// Whether the table holds more than `keys_max` keys (0: no key bound) or `bytes_max` bytes.
    pub fn over(&self, keys_max: usize, bytes_max: usize) -> bool {
        (keys_max != 0 && self.entries.len() > keys_max) || self.bytes > bytes_max
    }

    pub fn keys(&self) -> usize {
        self.entries.len()
    }

    pub fn items(&self) -> usize {
        self.items
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_each_reader_once_and_takes_them_all() {
        let mut table = Table::default();
        assert!(table.remember(0, b"k", 7));
        assert!(!table.remember(0, b"k", 7), "a second read adds nothing");
        assert!(table.remember(0, b"k", 8));
        assert_eq!((table.keys(), table.items()), (1, 2));
        assert_eq!(table.take(0, b"k"), Some(vec![7, 8]));
        assert_eq!(table.take(0, b"k"), None, "one invalidation per read");
        assert_eq!((table.keys(), table.items(), table.bytes()), (0, 0, 0));
    }

    #[test]
    fn namespaces_are_apart() {
        let mut table = Table::default();
        table.remember(1, b"k", 7);
        assert_eq!(table.take(2, b"k"), None);
        assert_eq!(table.take(1, b"k"), Some(vec![7]));
    }

    #[test]
    fn the_oldest_entry_goes_first() {
        let mut table = Table::default();
        table.remember(0, b"a", 1);
        table.remember(0, b"b", 1);
        table.remember(0, b"c", 2);
        assert!(table.over(2, usize::MAX));
        assert!(!table.over(3, usize::MAX));
        assert!(!table.over(0, usize::MAX), "0 keys: no key bound");
        let (key, clients) = table.pop_oldest().unwrap();
        assert_eq!((key.1.as_ref(), clients), (&b"a"[..], vec![1]));
        table.take(0, b"b");
        let (key, _) = table.pop_oldest().unwrap();
        assert_eq!(key.1.as_ref(), b"c");
        assert!(table.pop_oldest().is_none());
        assert_eq!(table.bytes(), 0);
    }

    #[test]
    fn bytes_bound_counts_keys_and_items() {
        let mut table = Table::default();
        table.remember(0, &[b'x'; 100], 1);
        let one = table.bytes();
        assert_eq!(one, entry_bytes(&[b'x'; 100]) + ITEM_BYTES);
        assert!(table.over(0, one - 1));
        assert!(!table.over(0, one));
        table.clear();
        assert_eq!((table.keys(), table.items(), table.bytes()), (0, 0, 0));
    }
}
