//! List of byte strings: a ring buffer, O(1) at both ends. Also the list semantics of Redis's t_list that
//! the commands apply (pushes and pops at either end, indexes and ranges from both ends, LINSERT, LPOS,
//! LREM, LTRIM): plain functions of the value, checked against `fallow_txn::types::list` by the property
//! test below.
use super::codec::{put_bytes, put_len, Reader};
use super::{clamp_range, element_bytes, DecodeError, Kind};
use std::collections::VecDeque;

/// An end of a list (LEFT is the head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Left,
    Right,
}

/// LPOS options: RANK (which match to start from, negative = from the tail, never 0), COUNT (None =
/// one position, 0 = all), MAXLEN (elements to compare at most, 0 = all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PosQuery {
    pub rank: i64,
    pub count: Option<usize>,
    pub maxlen: usize,
}

impl Default for PosQuery {
    fn default() -> Self {
        PosQuery {
            rank: 1,
            count: None,
            maxlen: 0,
        }
    }
}

/// Resolves a possibly negative index (from the tail) over `len`; None when out of range.
pub fn resolve_index(index: i64, len: usize) -> Option<usize> {
    let resolved = if index < 0 { len as i64 + index } else { index };
    (0..len as i64)
        .contains(&resolved)
        .then_some(resolved as usize)
}

#[derive(Clone, Debug, Default)]
pub struct ListValue {
    items: VecDeque<Box<[u8]>>,
    bytes: usize,
}

impl ListValue {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn memory_bytes(&self) -> usize {
        self.bytes + self.items.capacity() * 16
    }

    pub fn push_front(&mut self, item: &[u8]) {
        self.bytes += element_bytes(item.len());
        self.items.push_front(item.into());
    }

    pub fn push_back(&mut self, item: &[u8]) {
        self.bytes += element_bytes(item.len());
        self.items.push_back(item.into());
    }

    pub fn pop_front(&mut self) -> Option<Box<[u8]>> {
        let item = self.items.pop_front()?;
        self.bytes -= element_bytes(item.len());
        Some(item)
    }

    pub fn pop_back(&mut self) -> Option<Box<[u8]>> {
        let item = self.items.pop_back()?;
        self.bytes -= element_bytes(item.len());
        Some(item)
    }

    pub fn get(&self, index: usize) -> Option<&[u8]> {
        self.items.get(index).map(|item| &**item)
    }

    pub fn set(&mut self, index: usize, item: &[u8]) -> bool {
        let Some(slot) = self.items.get_mut(index) else {
            return false;
        };
        self.bytes = self.bytes - element_bytes(slot.len()) + element_bytes(item.len());
        *slot = item.into();
        true
    }

    pub fn insert(&mut self, index: usize, item: &[u8]) {
        self.bytes += element_bytes(item.len());
        self.items.insert(index, item.into());
    }

    pub fn remove(&mut self, index: usize) -> Option<Box<[u8]>> {
        let item = self.items.remove(index)?;
        self.bytes -= element_bytes(item.len());
        Some(item)
    }

    /// Keeps only `start..end` (already clamped by the caller).
    pub fn retain_range(&mut self, start: usize, end: usize) {
        assert!(start <= end && end <= self.items.len());
        self.items.truncate(end);
        self.items.drain(..start);
        self.bytes = self
            .items
            .iter()
            .map(|item| element_bytes(item.len()))
            .sum();
    }

    /// Removes up to `count` items equal to `item` (LREM): from the head when `count > 0`, from the
    /// tail when `count < 0`, all of them when 0. Returns how many were removed.
    pub fn remove_matching(&mut self, item: &[u8], count: i64) -> usize {
        let limit = if count == 0 {
            usize::MAX
        } else {
            count.unsigned_abs().min(usize::MAX as u64) as usize
        };
        let matching = |(_, candidate): &(usize, &[u8])| *candidate == item;
        let doomed: std::collections::HashSet<usize> = if count >= 0 {
            self.iter()
                .enumerate()
                .filter(matching)
                .take(limit)
                .map(|(index, _)| index)
                .collect()
        } else {
            self.iter()
                .enumerate()
                .rev()
                .filter(matching)
                .take(limit)
                .map(|(index, _)| index)
                .collect()
        };
        if doomed.is_empty() {
            return 0;
        }
        let mut index = 0;
        self.items.retain(|_| {
            index += 1;
            !doomed.contains(&(index - 1))
        });
        self.bytes -= doomed.len() * element_bytes(item.len());
        doomed.len()
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &[u8]> + ExactSizeIterator {
        self.items.iter().map(|item| &**item)
    }

    /// Pushes `items` one by one at `end` (LPUSH reverses them, as Redis does); returns the new length.
    pub fn push<'a>(&mut self, end: End, items: impl IntoIterator<Item = &'a [u8]>) -> usize {
        for item in items {
            match end {
                End::Left => self.push_front(item),
                End::Right => self.push_back(item),
            }
        }
        self.len()
    }

    /// Removes and returns up to `count` items from `end`, the outermost first.
    pub fn pop(&mut self, end: End, count: usize) -> Vec<Box<[u8]>> {
        let mut popped = Vec::with_capacity(count.min(self.len()));
        while popped.len() < count {
            let item = match end {
                End::Left => self.pop_front(),
                End::Right => self.pop_back(),
            };
            match item {
                Some(item) => popped.push(item),
                None => break,
            }
        }
        popped
    }

    /// The item at a possibly negative index (LINDEX).
    pub fn get_at(&self, index: i64) -> Option<&[u8]> {
        self.get(resolve_index(index, self.len())?)
    }

    /// Replaces the item at a possibly negative index (LSET); false when out of range.
    pub fn set_at(&mut self, index: i64, item: &[u8]) -> bool {
        resolve_index(index, self.len()).is_some_and(|index| self.set(index, item))
    }

    /// The items in Redis's inclusive, possibly negative range [start, end] (LRANGE).
    pub fn range(&self, start: i64, end: i64) -> impl ExactSizeIterator<Item = &[u8]> {
        let (from, count) = match clamp_range(start, end, self.len()) {
            Some((from, to)) => (from, to - from + 1),
            None => (0, 0),
        };
        self.iter().skip(from).take(count)
    }

    /// Keeps only Redis's inclusive, possibly negative range [start, end] (LTRIM).
    pub fn trim(&mut self, start: i64, end: i64) {
        match clamp_range(start, end, self.len()) {
            Some((from, to)) => self.retain_range(from, to + 1),
            None => self.retain_range(0, 0),
        }
    }

    /// Inserts `item` before or after the first item equal to `pivot` (LINSERT); the new length, or None
    /// (nothing inserted) when no item equals `pivot`.
    pub fn insert_at_pivot(&mut self, pivot: &[u8], item: &[u8], after: bool) -> Option<usize> {
        let found = self.iter().position(|candidate| candidate == pivot)?;
        self.insert(found + after as usize, item);
        Some(self.len())
    }

    /// Positions of `item` under the LPOS options, in the order they are found.
    pub fn positions(&self, item: &[u8], query: &PosQuery) -> Vec<usize> {
        let wanted = match query.count {
            Some(0) => usize::MAX,
            Some(count) => count,
            None => 1,
        };
        let scanned = if query.maxlen == 0 {
            self.len()
        } else {
            query.maxlen.min(self.len())
        };
        let skip = (query.rank.unsigned_abs() - 1) as usize;
        let indexed = self.iter().enumerate();
        let matching = |(_, candidate): &(usize, &[u8])| *candidate == item;
        // a negative RANK scans from the tail
        let ordered: Box<dyn Iterator<Item = (usize, &[u8])>> = if query.rank > 0 {
            Box::new(indexed)
        } else {
            Box::new(indexed.rev())
        };
        ordered
            .take(scanned)
            .filter(matching)
            .skip(skip)
            .take(wanted)
            .map(|(index, _)| index)
            .collect()
    }
}

// ----- codec ------------------------------------------------------------------------------------------
//
// Layout (version 1; varints are LEB128, see codec.rs):
//   u8 version = 1
//   varint count
//   count x { varint item_len, item bytes }
// Items head (LEFT) to tail (RIGHT); equal items are kept, as in the list.

const CODEC_VERSION: u8 = 1;

impl ListValue {
    /// Appends the list's encoding (layout above).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(CODEC_VERSION);
        put_len(out, self.len());
        for item in self.iter() {
            put_bytes(out, item);
        }
    }

    /// Decodes what `encode` wrote; all of `bytes` must be that one list.
    pub fn decode(bytes: &[u8]) -> Result<ListValue, DecodeError> {
        let mut reader = Reader::new(bytes);
        reader.version(Kind::List, CODEC_VERSION)?;
        // an item takes at least its length byte
        let count = reader.count("list items", 1)?;
        let mut list = ListValue {
            items: VecDeque::with_capacity(count),
            bytes: 0,
        };
        for _ in 0..count {
            list.push_back(reader.bytes()?);
        }
        reader.finish()?;
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fallow_txn::types::list::{List, ListOp, ListOutput};
    use fallow_txn::Adt;
    use proptest::prelude::*;

    fn list(items: &[&str]) -> ListValue {
        let mut list = ListValue::default();
        for item in items {
            list.push_back(item.as_bytes());
        }
        list
    }

    fn contents(list: &ListValue) -> Vec<&[u8]> {
        list.iter().collect()
    }

    #[test]
    fn remove_matching_by_direction() {
        let mut from_head = list(&["a", "b", "a", "c", "a"]);
        assert_eq!(from_head.remove_matching(b"a", 2), 2);
        assert_eq!(contents(&from_head), vec![&b"b"[..], b"c", b"a"]);
        let mut from_tail = list(&["a", "b", "a", "c", "a"]);
        assert_eq!(from_tail.remove_matching(b"a", -2), 2);
        assert_eq!(contents(&from_tail), vec![&b"a"[..], b"b", b"c"]);
        let mut all = list(&["a", "b", "a"]);
        assert_eq!(all.remove_matching(b"a", 0), 2);
        assert_eq!(all.remove_matching(b"zz", 0), 0);
        assert_eq!(contents(&all), vec![&b"b"[..]]);
    }

    #[test]
    fn bytes_track_contents() {
        let mut items = list(&["a", "bb", "a"]);
        items.remove_matching(b"a", 0);
        let fresh = list(&["bb"]);
        assert_eq!(items.bytes, fresh.bytes);
        items.retain_range(0, 0);
        assert_eq!(items.bytes, 0);
    }

    #[test]
    fn indexes_resolve_from_both_ends() {
        assert_eq!(resolve_index(0, 3), Some(0));
        assert_eq!(resolve_index(-1, 3), Some(2));
        assert_eq!(resolve_index(-4, 3), None);
        assert_eq!(resolve_index(3, 3), None);
        let mut items = list(&["a", "b", "c"]);
        assert_eq!(items.get_at(-1), Some(&b"c"[..]));
        assert!(items.set_at(-3, b"z"));
        assert!(!items.set_at(3, b"z"));
        assert_eq!(contents(&items), vec![&b"z"[..], b"b", b"c"]);
    }

    #[test]
    fn lpos_ranks_counts_and_maxlen() {
        let items = list(&["a", "b", "a", "c", "a"]);
        let query = |rank, count, maxlen| PosQuery {
            rank,
            count,
            maxlen,
        };
        assert_eq!(items.positions(b"a", &PosQuery::default()), vec![0]);
        assert_eq!(items.positions(b"a", &query(2, None, 0)), vec![2]);
        assert_eq!(items.positions(b"a", &query(1, Some(0), 0)), vec![0, 2, 4]);
        assert_eq!(items.positions(b"a", &query(-1, Some(2), 0)), vec![4, 2]);
        assert_eq!(items.positions(b"a", &query(1, Some(0), 2)), vec![0]);
    }

    #[test]
    fn pivots_ranges_and_trims() {
        let mut items = list(&["a", "b", "c"]);
        assert_eq!(items.insert_at_pivot(b"b", b"x", true), Some(4));
        assert_eq!(items.insert_at_pivot(b"a", b"y", false), Some(5));
        assert_eq!(items.insert_at_pivot(b"zz", b"y", false), None);
        assert_eq!(contents(&items), vec![&b"y"[..], b"a", b"b", b"x", b"c"]);
        assert_eq!(
            items.range(1, -2).collect::<Vec<_>>(),
            vec![&b"a"[..], b"b", b"x"]
        );
        assert_eq!(items.range(3, 1).len(), 0);
        items.trim(-2, 100);
        assert_eq!(contents(&items), vec![&b"x"[..], b"c"]);
        items.trim(5, 6);
        assert!(items.is_empty());
        assert_eq!(items.bytes, 0);
    }

    // ----- agreement with fallow_txn::types::list ----------------------------------------------------

    type Op = ListOp<Vec<u8>>;

    fn item() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(b'a'..=b'c', 0..3)
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        let op = prop_oneof![
            3 => item().prop_map(ListOp::PushLeft),
            3 => item().prop_map(ListOp::PushRight),
            2 => Just(ListOp::PopLeft),
            2 => Just(ListOp::PopRight),
            1 => Just(ListOp::Len),
            2 => (0usize..10, 0usize..10).prop_map(|(start, stop)| ListOp::Range(start, stop)),
        ];
        prop::collection::vec(op, 0..40)
    }

    /// The spec's operation through the store's methods (LPUSH/RPUSH of one item, LPOP/RPOP, LLEN,
    /// LRANGE), its output in the spec's terms.
    fn apply(list: &mut ListValue, op: &Op) -> ListOutput<Vec<u8>> {
        let popped = |mut items: Vec<Box<[u8]>>| ListOutput::Popped(items.pop().map(Vec::from));
        match op {
            ListOp::PushLeft(item) => {
                list.push(End::Left, [&item[..]]);
                ListOutput::Done
            }
            ListOp::PushRight(item) => {
                list.push(End::Right, [&item[..]]);
                ListOutput::Done
            }
            ListOp::PopLeft => popped(list.pop(End::Left, 1)),
            ListOp::PopRight => popped(list.pop(End::Right, 1)),
            ListOp::Len => ListOutput::Len(list.len()),
            ListOp::Range(start, stop) => ListOutput::Range(
                list.range(*start as i64, *stop as i64)
                    .map(<[u8]>::to_vec)
                    .collect(),
            ),
        }
    }

    fn state(list: &ListValue) -> VecDeque<Vec<u8>> {
        list.iter().map(<[u8]>::to_vec).collect()
    }

    fn bytes_of(items: &VecDeque<Vec<u8>>) -> usize {
        items.iter().map(|item| element_bytes(item.len())).sum()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn agrees_with_the_specification(ops in ops()) {
            let mut list = ListValue::default();
            let mut spec = VecDeque::new();
            for op in &ops {
                let output = apply(&mut list, op);
                prop_assert_eq!(output, List::apply(&mut spec, op), "{:?}", op);
            }
            prop_assert_eq!(state(&list), spec.clone());
            prop_assert_eq!(list.bytes, bytes_of(&spec));
        }

        /// LINSERT, LREM and LTRIM on a list built by the spec's ops, against the spec state edited the
        /// plain way.
        #[test]
        fn edits_agree_with_the_specification_state(
            ops in ops(),
            (pivot, item, after) in (item(), item(), any::<bool>()),
            count in -3i64..4,
            (start, end) in (-6i64..6, -6i64..6),
        ) {
            let mut list = ListValue::default();
            let mut spec = VecDeque::new();
            for op in &ops {
                apply(&mut list, op);
                List::apply(&mut spec, op);
            }
            let inserted = list.insert_at_pivot(&pivot, &item, after);
            match spec.iter().position(|candidate| *candidate == pivot) {
                Some(found) => {
                    spec.insert(found + after as usize, item.clone());
                    prop_assert_eq!(inserted, Some(spec.len()));
                }
                None => prop_assert_eq!(inserted, None),
            }
            prop_assert_eq!(state(&list), spec.clone());

            let removed = list.remove_matching(&item, count);
            let limit = if count == 0 { usize::MAX } else { count.unsigned_abs() as usize };
            let mut doomed: Vec<usize> = spec
                .iter()
                .enumerate()
                .filter(|(_, candidate)| **candidate == item)
                .map(|(index, _)| index)
                .collect();
            if count < 0 {
                doomed.reverse();
            }
            doomed.truncate(limit);
            doomed.sort_unstable();
            for index in doomed.iter().rev() {
                spec.remove(*index);
            }
            prop_assert_eq!(removed, doomed.len());
            prop_assert_eq!(state(&list), spec.clone());

            list.trim(start, end);
            let len = spec.len() as i64;
            let from = if start < 0 { (len + start).max(0) } else { start };
            let to = if end < 0 { len + end } else { end.min(len - 1) };
            let kept: VecDeque<Vec<u8>> = if from <= to && from < len && to >= 0 {
                spec.range(from as usize..=to as usize).cloned().collect()
            } else {
                VecDeque::new()
            };
            prop_assert_eq!(state(&list), kept.clone());
            prop_assert_eq!(list.bytes, bytes_of(&kept));
        }
    }

    // ----- codec ------------------------------------------------------------------------------------

    use crate::types::codec::testing::{
        canonical_or_rejected, mutated, rejects_every_prefix, versioned,
    };

    fn encoded(list: &ListValue) -> Vec<u8> {
        let mut out = Vec::new();
        list.encode(&mut out);
        out
    }

    /// A list built by pushes and pops at both ends (so the ring buffer wraps), some items past 127
    /// bytes.
    fn built() -> impl Strategy<Value = ListValue> {
        let long = prop::collection::vec(any::<u8>(), 120..300);
        let item = prop_oneof![8 => item(), 1 => long];
        prop::collection::vec((0u8..4, item), 0..50).prop_map(|edits| {
            let mut list = ListValue::default();
            for (edit, item) in edits {
                match edit {
                    0 => list.push_front(&item),
                    1 => list.push_back(&item),
                    2 => drop(list.pop_front()),
                    _ => drop(list.pop_back()),
                }
            }
            list
        })
    }

    #[test]
    fn the_layout_is_pinned() {
        assert_eq!(encoded(&list(&["a", "", "a"])), [1, 3, 1, b'a', 0, 1, b'a']);
        assert_eq!(encoded(&ListValue::default()), [1, 0]);
    }

    #[test]
    fn corrupt_lists_are_rejected() {
        let decode = |bytes: &[u8]| ListValue::decode(bytes).map(|_| ());
        assert_eq!(decode(&[1, 1, 2, b'a']), Err(DecodeError::Truncated));
        assert_eq!(decode(&[1, 0, 0]), Err(DecodeError::TrailingBytes(1)));
        assert!(matches!(
            decode(&[1, 3, 0, 0]),
            Err(DecodeError::BadLength { len: 3, .. })
        ));
        assert_eq!(decode(&[1, 1, 0x81, 0x00]), Err(DecodeError::BadVarint));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// decode(encode(l)) holds the same items in the same order, accounts the same bytes, and
        /// behaves the same under further pushes, pops and edits.
        #[test]
        fn encoding_round_trips(list in built(), later in ops(), (start, end) in (-6i64..6, -6i64..6)) {
            let bytes = encoded(&list);
            let mut decoded = ListValue::decode(&bytes).expect("an encoding decodes");
            let mut list = list;
            prop_assert_eq!(state(&decoded), state(&list));
            prop_assert_eq!(decoded.bytes, list.bytes);
            prop_assert_eq!(decoded.bytes, bytes_of(&state(&list)));
            prop_assert_eq!(decoded.memory_bytes(), decoded.bytes + decoded.items.capacity() * 16);
            prop_assert!(decoded.items.capacity() <= list.items.capacity().max(decoded.len()));
            prop_assert_eq!(encoded(&decoded), bytes.clone());
            for op in &later {
                prop_assert_eq!(apply(&mut decoded, op), apply(&mut list, op));
            }
            decoded.trim(start, end);
            list.trim(start, end);
            prop_assert_eq!(state(&decoded), state(&list));
            prop_assert_eq!(decoded.bytes, list.bytes);
            rejects_every_prefix(&bytes, ListValue::decode)?;
        }

        #[test]
        fn garbage_never_panics(
            list in built(),
            (position, byte) in (any::<usize>(), any::<u8>()),
            tail in prop::collection::vec(any::<u8>(), 0..40),
        ) {
            let (decode, encode) = (ListValue::decode, ListValue::encode);
            canonical_or_rejected(&mutated(&encoded(&list), position, byte), decode, encode)?;
            canonical_or_rejected(&versioned(CODEC_VERSION, &tail), decode, encode)?;
            canonical_or_rejected(&tail, decode, encode)?;
        }
    }
}
