//! The byte sizes of Redis's stream nodes. Redis keeps a stream's entries in listpacks of at most
//! `NODE_MAX_ENTRIES` entries (deleted ones included) and about `NODE_MAX_BYTES` bytes, indexed by a radix
//! tree; a new listpack starts when the last one is full. Which entries share a node shows in replies:
//! approximate trimming (`MAXLEN ~`, `MINID ~`) removes whole nodes only, and XINFO STREAM reports the
//! tree's keys and nodes. So a stream models its nodes exactly (which entries, how many bytes) without
//! storing listpacks: this file computes the sizes Redis 7.0's listpack encoding gives.
//!
//! A node is a master entry (live count, deleted count, field count, the fields of the node's first
//! entry, a 0 terminator) followed by entries: flags, ms and seq deltas from the node's first id, the
//! field count and fields unless they are the master's, the values, and the entry's element count.
use super::StreamId;

/// Redis's `stream-node-max-bytes` default: a node whose bytes plus the new entry's fields and values
/// reach it is full.
pub const NODE_MAX_BYTES: u64 = 4096;

/// Redis's `stream-node-max-entries` default: a node holding this many entries, deleted ones included,
/// is full.
pub const NODE_MAX_ENTRIES: u32 = 100;

/// Redis caps a node at 1 GiB whatever `stream-node-max-bytes` says (0 included).
const NODE_BYTES_CAP: u64 = 1 << 30;

/// When a node takes no more entries: Redis's `stream-node-max-bytes` (0: the 1 GiB cap) and
/// `stream-node-max-entries` (0: no count limit), as in force when an entry is added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeLimits {
    pub max_bytes: u64,
    pub max_entries: u64,
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits {
            max_bytes: NODE_MAX_BYTES,
            max_entries: u64::from(NODE_MAX_ENTRIES),
        }
    }
}

/// An empty listpack: its 6-byte header (total bytes, element count) and its end byte.
const EMPTY_LISTPACK_BYTES: u64 = 7;

/// Entry flag: the entry's fields are the master entry's, so only values are stored.
const FLAG_SAME_FIELDS: i64 = 2;

/// Bytes of the back-length field that lets a listpack be walked backwards, for an element whose
/// encoding and data take `len` bytes.
fn back_len_bytes(len: u64) -> u64 {
    match len {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2097150 => 3,
        2097151..=268435454 => 4,
        _ => 5,
    }
}

/// Bytes of an integer element.
fn int_element_bytes(value: i64) -> u64 {
    let encoded = match value {
        0..=127 => 1,
        -4096..=4095 => 2,
        -32768..=32767 => 3,
        -8388608..=8388607 => 4,
        -2147483648..=2147483647 => 5,
        _ => 9,
    };
    encoded + back_len_bytes(encoded)
}

/// Bytes of a string element; a string that reads as a 64-bit integer is stored as one.
fn string_element_bytes(bytes: &[u8]) -> u64 {
    if let Some(value) = crate::parse_i64_strict(bytes) {
        return int_element_bytes(value);
    }
    let len = bytes.len() as u64;
    let encoded = match len {
        0..=63 => 1 + len,
        64..=4095 => 2 + len,
        _ => 5 + len,
    };
    encoded + back_len_bytes(encoded)
}

/// Bytes of a new node's listpack holding only its master entry, for a first entry with `fields`.
pub fn master_entry_bytes<'a>(fields: impl ExactSizeIterator<Item = &'a [u8]>) -> u64 {
    let field_count = fields.len() as i64;
    EMPTY_LISTPACK_BYTES
        + int_element_bytes(1)
        + int_element_bytes(0)
        + int_element_bytes(field_count)
        + fields.map(string_element_bytes).sum::<u64>()
        + int_element_bytes(0)
}

/// Bytes an entry adds to a node whose first id is `master`. `same_fields`: its fields are the master
/// entry's. `pairs` alternates fields and values.
pub fn entry_bytes(master: StreamId, id: StreamId, pairs: &[&[u8]], same_fields: bool) -> u64 {
    let field_count = (pairs.len() / 2) as i64;
    // The deltas are unsigned differences stored as signed 64-bit integers: a seq delta wraps
    // "negative" when the entry's ms is larger and its seq smaller than the master's.
    let ms_delta = id.ms.wrapping_sub(master.ms) as i64;
    let seq_delta = id.seq.wrapping_sub(master.seq) as i64;
    let flags = if same_fields { FLAG_SAME_FIELDS } else { 0 };
    let mut bytes = int_element_bytes(flags) + int_element_bytes(ms_delta);
    bytes += int_element_bytes(seq_delta);
    let mut element_count = field_count + 3;
    if !same_fields {
        bytes += int_element_bytes(field_count);
        bytes += pairs
            .iter()
            .step_by(2)
            .map(|field| string_element_bytes(field))
            .sum::<u64>();
        element_count += field_count + 1;
    }
    bytes += pairs
        .iter()
        .skip(1)
        .step_by(2)
        .map(|value| string_element_bytes(value))
        .sum::<u64>();
    bytes + int_element_bytes(element_count)
}

/// How many bytes the master entry's live count grows by when it goes from `live` to `live + 1`.
pub fn live_count_growth(live: u32) -> u64 {
    int_element_bytes(i64::from(live) + 1) - int_element_bytes(i64::from(live))
}

/// Whether a node of `bytes` holding `entries` entries (deleted ones included) takes no entry whose
/// fields and values add up to `data_bytes` (Redis's streamAppendItem).
pub fn node_is_full(bytes: u64, entries: u32, data_bytes: u64, limits: NodeLimits) -> bool {
    let max_bytes = match limits.max_bytes {
        0 => NODE_BYTES_CAP,
        bytes => bytes.min(NODE_BYTES_CAP),
    };
    bytes.saturating_add(data_bytes) >= max_bytes
        || (limits.max_entries != 0 && u64::from(entries) >= limits.max_entries)
}

/// Nodes in Redis's radix tree of stream nodes, which is keyed by each node's first id as 16 big-endian
/// bytes: one node per branching point, per run of single-child bytes and per key (an empty tree is its
/// root alone). `keys` must be sorted and distinct.
pub fn radix_tree_nodes(keys: &[[u8; 16]]) -> u64 {
    if keys.is_empty() {
        return 1;
    }
    nodes_below(keys, 0)
}

/// Nodes of the subtree holding `keys` (sorted, distinct, sharing their first `depth` bytes).
fn nodes_below(keys: &[[u8; 16]], depth: usize) -> u64 {
    if let [_] = keys {
        // a compressed node for the rest of the key, then the key's node; none left at the end
        return if depth == 16 { 1 } else { 2 };
    }
    let (first, last) = (&keys[0], &keys[keys.len() - 1]);
    let shared = (depth..16).take_while(|&at| first[at] == last[at]).count();
    if shared > 0 {
        return 1 + nodes_below(keys, depth + shared);
    }
    // a branching node, then one subtree per distinct byte at `depth`
    let children: u64 = keys
        .chunk_by(|left, right| left[depth] == right[depth])
        .map(|group| nodes_below(group, depth + 1))
        .sum();
    1 + children
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_take_their_smallest_encoding() {
        assert_eq!(int_element_bytes(0), 2);
        assert_eq!(int_element_bytes(127), 2);
        assert_eq!(int_element_bytes(128), 3);
        assert_eq!(int_element_bytes(-1), 3);
        assert_eq!(int_element_bytes(40000), 5);
        assert_eq!(int_element_bytes(i64::MIN), 10);
    }

    #[test]
    fn strings_that_read_as_integers_are_integers() {
        assert_eq!(string_element_bytes(b"123"), 2);
        assert_eq!(string_element_bytes(b"a"), 3);
        assert_eq!(string_element_bytes(b"007"), 5);
        assert_eq!(string_element_bytes(b"-0"), 4);
        assert_eq!(string_element_bytes(b""), 2);
        assert_eq!(string_element_bytes(&[b'x'; 63]), 65);
        assert_eq!(string_element_bytes(&[b'x'; 64]), 67);
        assert_eq!(string_element_bytes(&[b'x'; 200]), 204);
        assert_eq!(
            crate::parse_i64_strict(b"-9223372036854775808"),
            Some(i64::MIN)
        );
        assert_eq!(crate::parse_i64_strict(b"9223372036854775808"), None);
        assert_eq!(crate::parse_i64_strict(b"+1"), None);
        assert_eq!(crate::parse_i64_strict(b"0"), Some(0));
    }

    #[test]
    fn one_entry_node_matches_redis() {
        // XADD s 1-1 a 1: the master entry [1, 0, 1, "a", 0] then [2, 0, 0, "1", 4]
        let fields: [&[u8]; 1] = [b"a"];
        let master = master_entry_bytes(fields.into_iter());
        let id = StreamId::new(1, 1);
        assert_eq!(master, 7 + 2 + 2 + 2 + 3 + 2);
        assert_eq!(entry_bytes(id, id, &[b"a", b"1"], true), 10);
        assert_eq!(entry_bytes(id, id, &[b"b", b"1"], false), 15);
    }

    #[test]
    fn radix_nodes_count_branches_runs_and_keys() {
        let key = |ms: u64, seq: u64| StreamId::new(ms, seq).key_bytes();
        assert_eq!(radix_tree_nodes(&[]), 1);
        assert_eq!(radix_tree_nodes(&[key(1, 1)]), 2);
        // diverging at the last byte: a run, a branch and two keys
        assert_eq!(radix_tree_nodes(&[key(1, 1), key(1, 2)]), 4);
        // diverging at the first byte: the root branches
        assert_eq!(radix_tree_nodes(&[key(1, 1), key(1 << 56, 1)]), 5);
        // diverging in the middle: a run, a branch, then a run and a key on each side
        assert_eq!(radix_tree_nodes(&[key(1, 1), key(2, 1)]), 6);
    }
}
