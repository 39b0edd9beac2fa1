//! Stream (Redis 7.0 streams): entries of field-value pairs under ever-growing ids `ms-seq`, with
//! consumer groups. Also the stream semantics of Redis's t_stream that the commands apply: id parsing
//! and generation, trimming, the consumer groups' reads, acknowledgements and claims, and the
//! `entries-read`/`lag` bookkeeping (plain functions of the value; the server parses arguments and
//! writes replies).
//!
//! Layout:
//! - `entries`: the live entries in id order (a B-tree; a range query is a seek).
//! - `nodes`: Redis's listpack nodes, which decide what approximate trimming removes and what XINFO
//!   reports, modelled by their first id, entry counts and byte size only (`listpack`); an entry belongs
//!   to the node with the largest first id not above its own.
//! - the stream's counters: last id, entries ever added, largest deleted id.
//! - `groups`: consumer groups by name, each with its pending entries list and consumers (`groups`).
//!
//! `bytes` is the exact running estimate of the heap bytes of all of it (see `memory_bytes`).
mod encoding;
pub mod groups;
mod listpack;

use super::codec::{put_bytes, put_len, Reader};
use super::{element_bytes, DecodeError, Kind};
use std::collections::BTreeMap;
use std::fmt;

pub use groups::{
    AutoClaim, AutoClaimScan, Claim, Consumer, Group, GroupRead, GroupReply, Pending,
};
pub use listpack::{NodeLimits, NODE_MAX_BYTES, NODE_MAX_ENTRIES};

/// An entry id: milliseconds and a sequence number, ordered by both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    pub const fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    pub fn is_zero(self) -> bool {
        self == StreamId::MIN
    }

    /// The next id, or None after the largest.
    pub fn next(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (u64::MAX, u64::MAX) => None,
            (ms, u64::MAX) => Some(StreamId::new(ms + 1, 0)),
            (ms, seq) => Some(StreamId::new(ms, seq + 1)),
        }
    }

    /// The previous id, or None before 0-0.
    pub fn prev(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (0, 0) => None,
            (ms, 0) => Some(StreamId::new(ms - 1, u64::MAX)),
            (ms, seq) => Some(StreamId::new(ms, seq - 1)),
        }
    }

    /// The id as Redis keys its radix trees: 16 big-endian bytes, so byte order is id order.
    pub fn key_bytes(self) -> [u8; 16] {
        let mut key = [0; 16];
        key[..8].copy_from_slice(&self.ms.to_be_bytes());
        key[8..].copy_from_slice(&self.seq.to_be_bytes());
        key
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// An id as a command argument gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParsedId {
    pub id: StreamId,
    /// False for XADD's `ms-*`, whose sequence the stream picks.
    pub seq_given: bool,
}

/// An id argument as Redis's streamGenericParseIDOrReply reads it: `ms-seq`, or `ms` alone (the
/// sequence is `missing_seq`), `-` and `+` for the smallest and largest ids unless `strict`, and `ms-*`
/// when `partial` (XADD). Numbers are read by Redis's string2ull, which falls back to strtoull: leading
/// spaces, a `+` and leading zeros pass, and a `-` wraps. The argument is a C string there: more than
/// 127 bytes are refused, and a NUL byte ends it.
pub fn parse_id(arg: &[u8], missing_seq: u64, strict: bool, partial: bool) -> Option<ParsedId> {
    if arg.len() > 127 {
        return None;
    }
    let text = arg.split(|&byte| byte == 0).next().unwrap_or_default();
    let exact = |id| {
        Some(ParsedId {
            id,
            seq_given: true,
        })
    };
    match text {
        b"-" | b"+" if strict => return None,
        b"-" => return exact(StreamId::MIN),
        b"+" => return exact(StreamId::MAX),
        _ => {}
    }
    let (ms_text, seq_text) = match text.iter().position(|&byte| byte == b'-') {
        Some(dash) => (&text[..dash], Some(&text[dash + 1..])),
        None => (text, None),
    };
    let ms = string_to_u64(ms_text)?;
    match seq_text {
        None => exact(StreamId::new(ms, missing_seq)),
        Some(b"*") if partial => Some(ParsedId {
            id: StreamId::new(ms, 0),
            seq_given: false,
        }),
        Some(seq_text) => exact(StreamId::new(ms, string_to_u64(seq_text)?)),
    }
}

/// Redis's string2ull: a canonical integer (negatives refused), else what strtoull accepts.
fn string_to_u64(text: &[u8]) -> Option<u64> {
    if let Some(value) = crate::parse_i64_strict(text) {
        return u64::try_from(value).ok();
    }
    let start = text
        .iter()
        .position(|byte| !matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))?;
    let (negative, digits) = match text[start] {
        b'-' => (true, &text[start + 1..]),
        b'+' => (false, &text[start + 1..]),
        _ => (false, &text[start..]),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = digits.iter().try_fold(0u64, |value, &digit| {
        value.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
    })?;
    Some(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

/// The id XADD asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdRequest {
    /// `*`: the clock's milliseconds, or the next sequence when the clock is not ahead of the last id.
    Auto,
    /// `ms-*`: these milliseconds with the next free sequence.
    Ms(u64),
    /// `ms-seq`.
    Exact(StreamId),
}

/// Why XADD added nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddError {
    /// The last id is the largest possible one.
    Exhausted,
    /// The id is not above the last id.
    NotGreater,
    /// The fields and values add up to more than a listpack holds.
    TooLarge,
}

/// Fields and values larger than this in total are refused (Redis's STREAM_LISTPACK_MAX_SIZE).
const ENTRY_DATA_MAX_BYTES: usize = 1 << 30;

/// How XTRIM (or XADD's MAXLEN/MINID) trims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrimTo {
    /// Keep at most this many entries.
    MaxLen(u64),
    /// Keep no entry below this id.
    MinId(StreamId),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trim {
    pub to: TrimTo,
    /// `~`: remove whole nodes only.
    pub approx: bool,
    /// Remove at most about this many entries (whole nodes at a time); 0 = no limit.
    pub limit: u64,
}

/// XSETID's refusals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetIdError {
    /// The id is below the newest entry.
    BelowTop,
    /// ENTRIESADDED is below the stream's length.
    EntriesAddedTooSmall,
}

/// One entry: its fields and values, alternating, packed in one allocation as the codec writes an entry
/// (a pair count, then each item's length and bytes: `types::codec` conventions), so an entry costs one
/// heap block, not one per item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    packed: Box<[u8]>,
}

impl Entry {
    fn new(pairs: &[&[u8]]) -> Entry {
        let data_bytes: usize = pairs.iter().map(|item| item.len() + 1).sum();
        let mut packed = Vec::with_capacity(data_bytes + 1);
        put_len(&mut packed, pairs.len() / 2);
        for item in pairs {
            put_bytes(&mut packed, item);
        }
        Entry {
            packed: packed.into_boxed_slice(),
        }
    }

    /// An entry from its packed form (`packed`), which the caller has checked.
    fn from_packed(packed: &[u8]) -> Entry {
        Entry {
            packed: packed.into(),
        }
    }

    /// The packed form: the codec's encoding of the entry.
    fn packed(&self) -> &[u8] {
        &self.packed
    }

    /// Fields and values, alternating.
    pub fn items(&self) -> EntryItems<'_> {
        let mut reader = Reader::new(&self.packed);
        let pairs = reader
            .varint()
            .expect("a packed entry starts with its count") as usize;
        EntryItems {
            rest: reader.rest(),
            left: 2 * pairs,
        }
    }

    pub fn field_count(&self) -> usize {
        self.items().len() / 2
    }

    fn bytes(&self) -> usize {
        ENTRY_OVERHEAD_BYTES + element_bytes(self.packed.len())
    }
}

/// The items of an entry, in order.
pub struct EntryItems<'a> {
    rest: &'a [u8],
    left: usize,
}

impl<'a> Iterator for EntryItems<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        let mut reader = Reader::new(self.rest);
        let item = reader.bytes().expect("a packed entry holds its items");
        self.rest = reader.rest();
        self.left -= 1;
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for EntryItems<'_> {}

/// A B-tree slot (key, value, share of the node) for an entry or a node.
const ENTRY_OVERHEAD_BYTES: usize = 48;
/// A boxed slice's pointer and length.
const SLICE_BYTES: usize = 16;
/// A node's slot and counters.
const NODE_OVERHEAD_BYTES: usize = 80;
/// The stream itself (it is boxed in its collection slot).
const STREAM_BYTES: usize = 128;

/// One of Redis's listpack nodes, by its sizes (see `listpack`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Node {
    /// The fields of the node's first entry: an entry with the same fields stores only its values.
    master_fields: Box<[Box<[u8]>]>,
    live: u32,
    deleted: u32,
    /// The newest entry put in the node, live or deleted (MINID removes a node below it).
    last_id: StreamId,
    listpack_bytes: u64,
}

impl Node {
    fn bytes(&self) -> usize {
        NODE_OVERHEAD_BYTES
            + self.master_fields.len() * SLICE_BYTES
            + self
                .master_fields
                .iter()
                .map(|field| element_bytes(field.len()))
                .sum::<usize>()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamValue {
    entries: BTreeMap<StreamId, Entry>,
    /// Nodes by their first id.
    nodes: BTreeMap<StreamId, Node>,
    last_id: StreamId,
    entries_added: u64,
    max_deleted_id: StreamId,
    groups: BTreeMap<Box<[u8]>, Group>,
    bytes: usize,
}

impl Default for StreamValue {
    fn default() -> Self {
        StreamValue {
            entries: BTreeMap::new(),
            nodes: BTreeMap::new(),
            last_id: StreamId::MIN,
            entries_added: 0,
            max_deleted_id: StreamId::MIN,
            groups: BTreeMap::new(),
            bytes: STREAM_BYTES,
        }
    }
}

impl StreamValue {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn memory_bytes(&self) -> usize {
        self.bytes
    }

    pub fn last_id(&self) -> StreamId {
        self.last_id
    }

    pub fn entries_added(&self) -> u64 {
        self.entries_added
    }

    pub fn max_deleted_id(&self) -> StreamId {
        self.max_deleted_id
    }

    /// The first live entry's id, 0-0 when empty (XINFO's recorded-first-entry-id).
    pub fn first_id(&self) -> StreamId {
        self.entries
            .first_key_value()
            .map_or(StreamId::MIN, |(&id, _)| id)
    }

    /// The newest live entry's id, None when empty (the last id may have been deleted).
    pub fn last_entry_id(&self) -> Option<StreamId> {
        self.entries.last_key_value().map(|(&id, _)| id)
    }

    pub fn get(&self, id: StreamId) -> Option<&Entry> {
        self.entries.get(&id)
    }

    /// Live entries with ids in [start, end], in id order (reverse it for XREVRANGE).
    pub fn range(
        &self,
        start: StreamId,
        end: StreamId,
    ) -> impl DoubleEndedIterator<Item = (StreamId, &Entry)> {
        // an inverted range is empty (a B-tree range would panic)
        let entries = (start <= end).then(|| self.entries.range(start..=end));
        entries
            .into_iter()
            .flatten()
            .map(|(&id, entry)| (id, entry))
    }

    /// Nodes in Redis's radix tree of listpacks (XINFO's radix-tree-keys).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Nodes of that radix tree itself (XINFO's radix-tree-nodes).
    pub fn radix_tree_nodes(&self) -> u64 {
        let keys: Vec<[u8; 16]> = self.nodes.keys().map(|id| id.key_bytes()).collect();
        listpack::radix_tree_nodes(&keys)
    }

    // ----- adding --------------------------------------------------------------------------------

    /// The id XADD would give an entry now, or why it cannot add one.
    fn next_id(&self, request: IdRequest, now_ms: u64) -> Result<StreamId, AddError> {
        if self.last_id == StreamId::MAX {
            return Err(AddError::Exhausted);
        }
        let id = match request {
            IdRequest::Auto if now_ms > self.last_id.ms => StreamId::new(now_ms, 0),
            IdRequest::Auto => self.last_id.next().ok_or(AddError::NotGreater)?,
            // the next sequence of these milliseconds; none after the largest
            IdRequest::Ms(ms) if ms == self.last_id.ms => match self.last_id.seq.checked_add(1) {
                Some(seq) => StreamId::new(ms, seq),
                None => return Err(AddError::NotGreater),
            },
            IdRequest::Ms(ms) => StreamId::new(ms, 0),
            IdRequest::Exact(id) => id,
        };
        if id <= self.last_id {
            return Err(AddError::NotGreater);
        }
        Ok(id)
    }

    /// Checks what XADD would do without adding (so a refused XADD creates no key).
    pub fn check_add(
        &self,
        request: IdRequest,
        pairs: &[&[u8]],
        now_ms: u64,
    ) -> Result<(), AddError> {
        self.next_id(request, now_ms)?;
        let data_bytes: usize = pairs.iter().map(|item| item.len()).sum();
        if data_bytes > ENTRY_DATA_MAX_BYTES {
            return Err(AddError::TooLarge);
        }
        Ok(())
    }

    /// Adds an entry (XADD) with Redis's default node limits; see `add_with_node_limits`.
    pub fn add(
        &mut self,
        request: IdRequest,
        pairs: &[&[u8]],
        now_ms: u64,
    ) -> Result<StreamId, AddError> {
        self.add_with_node_limits(request, pairs, now_ms, NodeLimits::default())
    }

    /// Adds an entry (XADD); `pairs` alternates fields and values and holds at least one pair. It goes
    /// to a new node when the last one is full by `limits` (stream-node-max-bytes/-entries).
    pub fn add_with_node_limits(
        &mut self,
        request: IdRequest,
        pairs: &[&[u8]],
        now_ms: u64,
        limits: NodeLimits,
    ) -> Result<StreamId, AddError> {
        assert!(
            pairs.len() >= 2 && pairs.len().is_multiple_of(2),
            "field-value pairs"
        );
        self.check_add(request, pairs, now_ms)?;
        let id = self.next_id(request, now_ms)?;
        self.put_in_node(id, pairs, limits);
        let entry = Entry::new(pairs);
        self.bytes += entry.bytes();
        self.entries.insert(id, entry);
        self.last_id = id;
        self.entries_added += 1;
        Ok(id)
    }

    /// Accounts a new entry in the last node, or in a new node when that one is full.
    fn put_in_node(&mut self, id: StreamId, pairs: &[&[u8]], limits: NodeLimits) {
        let data_bytes: u64 = pairs.iter().map(|item| item.len() as u64).sum();
        if let Some(mut last) = self.nodes.last_entry() {
            let master = *last.key();
            let node = last.get_mut();
            let entries = node.live + node.deleted;
            if !listpack::node_is_full(node.listpack_bytes, entries, data_bytes, limits) {
                let fields = pairs.iter().step_by(2);
                let same_fields = fields.len() == node.master_fields.len()
                    && fields
                        .zip(node.master_fields.iter())
                        .all(|(field, master)| **field == **master);
                node.listpack_bytes += listpack::live_count_growth(node.live);
                node.listpack_bytes += listpack::entry_bytes(master, id, pairs, same_fields);
                node.live += 1;
                node.last_id = id;
                return;
            }
        }
        let fields: Vec<&[u8]> = pairs.iter().step_by(2).copied().collect();
        let node = Node {
            master_fields: fields.iter().map(|&field| field.into()).collect(),
            live: 1,
            deleted: 0,
            last_id: id,
            listpack_bytes: listpack::master_entry_bytes(fields.iter().copied())
                + listpack::entry_bytes(id, id, pairs, true),
        };
        self.bytes += node.bytes();
        self.nodes.insert(id, node);
    }

    // ----- deleting and trimming -----------------------------------------------------------------

    /// Deletes one entry (XDEL); false when it is not there.
    pub fn delete(&mut self, id: StreamId) -> bool {
        let Some(entry) = self.entries.remove(&id) else {
            return false;
        };
        self.bytes -= entry.bytes();
        let (&master, node) = self
            .nodes
            .range_mut(..=id)
            .next_back()
            .expect("every entry is in a node");
        if node.live == 1 {
            // the node's last live entry: the node goes, its deleted entries with it
            let node = self.nodes.remove(&master).expect("just found");
            self.bytes -= node.bytes();
        } else {
            node.live -= 1;
            node.deleted += 1;
        }
        self.max_deleted_id = self.max_deleted_id.max(id);
        true
    }

    /// Trims from the oldest entries (XTRIM, XADD's MAXLEN/MINID); returns how many entries went. Whole
    /// nodes go first; an exact trim then deletes entries inside the next node, an approximate one stops.
    pub fn trim(&mut self, trim: &Trim) -> u64 {
        let mut deleted = 0u64;
        while let Some((&master, node)) = self.nodes.first_key_value() {
            let len = self.len() as u64;
            if matches!(trim.to, TrimTo::MaxLen(max) if len <= max) {
                break;
            }
            let live = u64::from(node.live);
            if trim.limit != 0 && deleted + live > trim.limit {
                break;
            }
            let whole_node = match trim.to {
                TrimTo::MaxLen(max) => len - live >= max,
                TrimTo::MinId(min) => node.last_id < min,
            };
            if whole_node {
                self.remove_first_node(master);
                deleted += live;
                continue;
            }
            if !trim.approx {
                deleted += self.trim_inside_first_node(master, trim.to);
            }
            break;
        }
        deleted
    }

    /// Removes the oldest node with its entries.
    fn remove_first_node(&mut self, master: StreamId) {
        let node = self.nodes.remove(&master).expect("the first node");
        self.bytes -= node.bytes();
        let kept = match self.nodes.first_key_value() {
            Some((&next_master, _)) => self.entries.split_off(&next_master),
            None => BTreeMap::new(),
        };
        let removed = std::mem::replace(&mut self.entries, kept);
        self.bytes -= removed.values().map(Entry::bytes).sum::<usize>();
    }

    /// Deletes the oldest entries of the first node until the trim is met; returns how many.
    fn trim_inside_first_node(&mut self, master: StreamId, to: TrimTo) -> u64 {
        let mut deleted = 0;
        loop {
            let done = match to {
                TrimTo::MaxLen(max) => self.len() as u64 <= max,
                TrimTo::MinId(min) => self.first_id() >= min,
            };
            let node = self.nodes.get_mut(&master).expect("the first node");
            if done || node.live == 0 {
                return deleted;
            }
            let (_, entry) = self.entries.pop_first().expect("a live entry of the node");
            node.live -= 1;
            node.deleted += 1;
            self.bytes -= entry.bytes();
            deleted += 1;
        }
    }

    /// Whether XSETID may set these counters: the last id stays at or above the newest entry, and the
    /// entries added at or above the length.
    pub fn check_set_id(&self, id: StreamId, entries_added: Option<u64>) -> Result<(), SetIdError> {
        if let Some(top) = self.last_entry_id() {
            if id < top {
                return Err(SetIdError::BelowTop);
            }
            if entries_added.is_some_and(|added| (self.len() as u64) > added) {
                return Err(SetIdError::EntriesAddedTooSmall);
            }
        }
        Ok(())
    }

    /// Sets the stream's counters (XSETID); `entries_added` and `max_deleted` when given (a 0-0
    /// `max_deleted` leaves it).
    pub fn set_id(
        &mut self,
        id: StreamId,
        entries_added: Option<u64>,
        max_deleted: Option<StreamId>,
    ) -> Result<(), SetIdError> {
        self.check_set_id(id, entries_added)?;
        self.last_id = id;
        if let Some(added) = entries_added {
            self.entries_added = added;
        }
        if let Some(max_deleted) = max_deleted.filter(|id| !id.is_zero()) {
            self.max_deleted_id = max_deleted;
        }
        Ok(())
    }

    // ----- entries-read and lag ------------------------------------------------------------------

    /// Whether a deleted entry may lie in [start, ∞): the largest deleted id is there and not before
    /// the first entry (Redis's streamRangeHasTombstones with no end).
    fn has_tombstones_from(&self, start: StreamId) -> bool {
        if self.is_empty() || self.max_deleted_id.is_zero() {
            return false;
        }
        if self.first_id() > self.max_deleted_id {
            return false;
        }
        start <= self.max_deleted_id
    }

    /// The read counter of `id`, its position among all entries ever added, when it can be known
    /// (Redis's streamEstimateDistanceFromFirstEverEntry).
    fn entries_read_at(&self, id: StreamId) -> Option<i64> {
        let added = self.entries_added as i64;
        if self.entries_added == 0 {
            return Some(0);
        }
        if self.is_empty() && id <= self.last_id {
            return Some(added);
        }
        match id.cmp(&self.last_id) {
            std::cmp::Ordering::Equal => return Some(added),
            std::cmp::Ordering::Greater => return None,
            std::cmp::Ordering::Less => {}
        }
        let first = self.first_id();
        if self.max_deleted_id.is_zero() || self.max_deleted_id < first {
            let len = self.len() as i64;
            match id.cmp(&first) {
                std::cmp::Ordering::Less => return Some(added.wrapping_sub(len)),
                std::cmp::Ordering::Equal => return Some(added.wrapping_sub(len).wrapping_add(1)),
                std::cmp::Ordering::Greater => {}
            }
        }
        None
    }

    // ----- access for the codec and tests --------------------------------------------------------

    /// Computes `bytes` from scratch (decoding; tests compare it with the running count).
    fn recount_bytes(&self) -> usize {
        STREAM_BYTES
            + self.entries.values().map(Entry::bytes).sum::<usize>()
            + self.nodes.values().map(Node::bytes).sum::<usize>()
            + self
                .groups
                .iter()
                .map(|(name, group)| group.bytes(name))
                .sum::<usize>()
    }

    /// Appends the whole value's binary encoding (layout in `encoding`).
    pub fn encode(&self, out: &mut Vec<u8>) {
        encoding::encode(self, out);
    }

    /// Decodes what `encode` wrote; all of `bytes` must be that one stream.
    pub fn decode(bytes: &[u8]) -> Result<StreamValue, DecodeError> {
        encoding::decode(bytes)
    }
}

#[cfg(test)]
mod tests;
