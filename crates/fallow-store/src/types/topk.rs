//! TopN: a scored set that keeps, for each member, the highest score it was given, and only its k best
//! members (score descending, ties to the smaller member). The semantics of `fallow_txn::types::topk`:
//! what is kept does not depend on the order of the adds. Scores are integers, so ranks are exact.
use super::codec::{put_bytes, put_len, Reader};
use super::{element_bytes, DecodeError, Kind};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

/// The k a TopN gets when TOPN.ADD creates it.
pub const DEFAULT_CAPACITY: usize = 10;
/// The largest k TOPN.RESERVE accepts (its members are all kept in memory).
pub const MAX_CAPACITY: usize = 1_000_000;

/// A member's place in the ranking: a greater rank is better (higher score, then the smaller member).
type Rank = (i64, Reverse<Box<[u8]>>);

#[derive(Clone, Debug)]
pub struct TopKValue {
    capacity: usize,
    /// A B-tree rather than a hash map: O(log n) like the ranking anyway, and 16 bytes smaller in the
    /// collection slot that every collection pays for.
    scores: BTreeMap<Box<[u8]>, i64>,
    /// Ascending: the first is the worst kept, the last the best.
    ranked: BTreeSet<Rank>,
    bytes: usize,
}

/// A member owns two copies of its bytes (the score index and the ranking) plus their nodes.
const ENTRY_OVERHEAD_BYTES: usize = 64;

fn member_bytes(member: &[u8]) -> usize {
    2 * element_bytes(member.len()) + ENTRY_OVERHEAD_BYTES
}

fn rank(member: &[u8], score: i64) -> Rank {
    (score, Reverse(member.into()))
}

impl Default for TopKValue {
    fn default() -> Self {
        TopKValue::new(DEFAULT_CAPACITY)
    }
}

impl TopKValue {
    /// An empty TopN keeping the `capacity` best; the caller checks 1..=MAX_CAPACITY.
    pub fn new(capacity: usize) -> Self {
        assert!(
            (1..=MAX_CAPACITY).contains(&capacity),
            "a TopN keeps 1..={MAX_CAPACITY} members"
        );
        TopKValue {
            capacity,
            scores: BTreeMap::new(),
            ranked: BTreeSet::new(),
            bytes: 0,
        }
    }

    /// How many members it keeps at most (k).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many members it keeps now.
    pub fn len(&self) -> usize {
        self.scores.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    pub fn memory_bytes(&self) -> usize {
        self.bytes
    }

    pub fn score(&self, member: &[u8]) -> Option<i64> {
        self.scores.get(member).copied()
    }

    /// Gives `member` the higher of its kept score and `score`, then keeps the k best. True when the
    /// member is kept afterwards.
    pub fn add(&mut self, member: &[u8], score: i64) -> bool {
        if let Some(kept) = self.scores.get_mut(member) {
            if score > *kept {
                let old = std::mem::replace(kept, score);
                let removed = self.ranked.remove(&rank(member, old));
                debug_assert!(removed, "score index and ranking agree");
                self.ranked.insert(rank(member, score));
            }
            return true;
        }
        let candidate = rank(member, score);
        if self.scores.len() >= self.capacity {
            match self.ranked.first() {
                Some(worst) if candidate > *worst => self.evict_worst(),
                _ => return false,
            }
        }
        self.scores.insert(member.into(), score);
        self.ranked.insert(candidate);
        self.bytes += member_bytes(member);
        true
    }

    fn evict_worst(&mut self) {
        let (_, Reverse(worst)) = self.ranked.pop_first().expect("a full TopN has members");
        let removed = self.scores.remove(&worst);
        assert!(removed.is_some(), "score index and ranking agree");
        self.bytes -= member_bytes(&worst);
    }

    /// The kept members, best first.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], i64)> {
        self.ranked
            .iter()
            .rev()
            .map(|(score, Reverse(member))| (&**member, *score))
    }

    /// The best member and its score.
    pub fn best(&self) -> Option<(&[u8], i64)> {
        self.iter().next()
    }
}

// ----- codec ------------------------------------------------------------------------------------------
//
// Layout (version 1; varints are LEB128, see codec.rs):
//   u8 version = 1
//   varint k (the capacity, 1..=MAX_CAPACITY)
//   varint count (at most k)
//   count x { varint member_len, member bytes, i64 score little-endian }
// Members best first, as `iter` lists them; a decoder checks that order (strictly descending rank) and
// that every member is distinct. Any such state is what adding its members to an empty TopN of that k
// keeps, so the decoded TopN ranks, evicts and accounts bytes exactly as the encoded one.

const CODEC_VERSION: u8 = 1;

impl TopKValue {
    /// Appends the TopN's encoding (layout above).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(CODEC_VERSION);
        put_len(out, self.capacity);
        put_len(out, self.len());
        for (member, score) in self.iter() {
            put_bytes(out, member);
            out.extend_from_slice(&score.to_le_bytes());
        }
    }

    /// Decodes what `encode` wrote; all of `bytes` must be that one TopN.
    pub fn decode(bytes: &[u8]) -> Result<TopKValue, DecodeError> {
        let mut reader = Reader::new(bytes);
        reader.version(Kind::TopN, CODEC_VERSION)?;
        let capacity = reader.varint()?;
        let capacity = match usize::try_from(capacity) {
            Ok(capacity) if (1..=MAX_CAPACITY).contains(&capacity) => capacity,
            _ => return Err(DecodeError::Invalid("TopN capacity")),
        };
        // a member takes at least its length byte and its 8-byte score
        let count = reader.count("TopN members", 9)?;
        if count > capacity {
            return Err(DecodeError::Invalid(
                "TopN holding more members than its capacity",
            ));
        }
        let mut topn = TopKValue::new(capacity);
        let mut previous: Option<(i64, Reverse<&[u8]>)> = None;
        for _ in 0..count {
            let member = reader.bytes()?;
            let score = reader.i64()?;
            let rank = (score, Reverse(member));
            if previous.is_some_and(|previous| previous <= rank) {
                return Err(DecodeError::BadOrder("TopN members"));
            }
            previous = Some(rank);
            if topn.scores.contains_key(member) {
                return Err(DecodeError::Duplicate("TopN member"));
            }
            let kept = topn.add(member, score);
            debug_assert!(kept, "a TopN below its capacity keeps every new member");
        }
        reader.finish()?;
        Ok(topn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fallow_txn::types::topk::{TopK, TopKOp, TopKState};
    use fallow_txn::Adt;
    use proptest::prelude::*;

    fn listed(topn: &TopKValue) -> Vec<(Vec<u8>, i64)> {
        topn.iter()
            .map(|(member, score)| (member.to_vec(), score))
            .collect()
    }

    #[test]
    fn keeps_the_best_with_ties_to_the_smaller_member() {
        let mut topn = TopKValue::new(2);
        assert!(topn.add(b"b", 5));
        assert!(topn.add(b"c", 5));
        assert!(topn.add(b"a", 5), "a ranks above c at the same score");
        assert!(!topn.add(b"d", 5), "d ranks below b");
        assert!(
            !topn.add(b"c", 1),
            "c was evicted and 1 does not bring it back"
        );
        assert_eq!(listed(&topn), vec![(b"a".to_vec(), 5), (b"b".to_vec(), 5)]);
        assert_eq!(topn.best(), Some((&b"a"[..], 5)));
    }

    #[test]
    fn a_kept_member_keeps_its_highest_score() {
        let mut topn = TopKValue::default();
        assert_eq!(topn.capacity(), DEFAULT_CAPACITY);
        topn.add(b"m", 7);
        assert!(topn.add(b"m", 3), "still kept");
        assert_eq!(topn.score(b"m"), Some(7));
        topn.add(b"m", 9);
        assert_eq!(topn.score(b"m"), Some(9));
        assert_eq!(topn.len(), 1);
    }

    #[test]
    fn bytes_follow_the_kept_members() {
        let mut topn = TopKValue::new(1);
        topn.add(b"short", 1);
        assert_eq!(topn.memory_bytes(), member_bytes(b"short"));
        let long = [b'x'; 100];
        topn.add(&long, 2);
        assert_eq!(topn.memory_bytes(), member_bytes(&long));
        topn.add(b"short", 3);
        assert_eq!(topn.memory_bytes(), member_bytes(b"short"));
    }

    fn adds() -> impl Strategy<Value = Vec<(Vec<u8>, i64)>> {
        let member = prop::collection::vec(b'a'..=b'e', 0..3);
        prop::collection::vec((member, -4i64..4), 0..40)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn agrees_with_the_specification(capacity in 1usize..6, adds in adds()) {
            let mut topn = TopKValue::new(capacity);
            let mut spec = TopKState { k: capacity, ..Default::default() };
            for (member, score) in &adds {
                let kept = topn.add(member, *score);
                TopK::apply(&mut spec, &TopKOp::Add(member.clone(), *score));
                prop_assert_eq!(kept, spec.scores.contains_key(member));
                prop_assert_eq!(listed(&topn), spec.ranked());
                let bytes: usize = spec.scores.keys().map(|member| member_bytes(member)).sum();
                prop_assert_eq!(topn.memory_bytes(), bytes);
            }
        }
    }

    // ----- codec ------------------------------------------------------------------------------------

    use crate::types::codec::testing::{
        canonical_or_rejected, mutated, rejects_every_prefix, versioned,
    };

    fn encoded(topn: &TopKValue) -> Vec<u8> {
        let mut out = Vec::new();
        topn.encode(&mut out);
        out
    }

    /// A TopN of a small k (so evictions happen) or a large one, built by adds, some members past 127
    /// bytes and some extreme scores.
    fn built() -> impl Strategy<Value = TopKValue> {
        let long = prop::collection::vec(any::<u8>(), 120..300);
        let member = prop_oneof![8 => prop::collection::vec(b'a'..=b'e', 0..3), 1 => long];
        let score = prop_oneof![8 => -4i64..4, 1 => any::<i64>()];
        let capacity = prop_oneof![4 => 1usize..6, 1 => Just(MAX_CAPACITY), 1 => 1usize..300];
        (capacity, prop::collection::vec((member, score), 0..40)).prop_map(|(capacity, adds)| {
            let mut topn = TopKValue::new(capacity);
            for (member, score) in adds {
                topn.add(&member, score);
            }
            topn
        })
    }

    #[test]
    fn the_layout_is_pinned() {
        let mut topn = TopKValue::new(300);
        topn.add(b"a", -1);
        topn.add(b"b", 2);
        let mut expected = vec![1, 0xac, 0x02, 2, 1, b'b'];
        expected.extend(2i64.to_le_bytes());
        expected.extend([1, b'a']);
        expected.extend((-1i64).to_le_bytes());
        assert_eq!(encoded(&topn), expected);
        assert_eq!(encoded(&TopKValue::default()), [1, 10, 0]);
    }

    #[test]
    fn corrupt_topns_are_rejected() {
        let decode = |bytes: &[u8]| TopKValue::decode(bytes).map(|_| ());
        let topn = |capacity: u8, entries: &[(u8, i64)]| {
            let mut bytes = vec![1, capacity, entries.len() as u8];
            for (member, score) in entries {
                bytes.extend([1, *member]);
                bytes.extend(score.to_le_bytes());
            }
            bytes
        };
        assert_eq!(
            decode(&topn(0, &[])),
            Err(DecodeError::Invalid("TopN capacity"))
        );
        let mut past_max = vec![1];
        crate::types::codec::put_len(&mut past_max, MAX_CAPACITY + 1);
        past_max.push(0);
        assert_eq!(
            decode(&past_max),
            Err(DecodeError::Invalid("TopN capacity"))
        );
        assert!(matches!(
            decode(&topn(1, &[(b'a', 2), (b'b', 1)])),
            Err(DecodeError::Invalid(_))
        ));
        assert_eq!(
            decode(&topn(3, &[(b'a', 1), (b'b', 2)])),
            Err(DecodeError::BadOrder("TopN members"))
        );
        assert_eq!(
            decode(&topn(3, &[(b'b', 1), (b'a', 1)])),
            Err(DecodeError::BadOrder("TopN members")),
            "ties rank the smaller member first"
        );
        assert_eq!(
            decode(&topn(3, &[(b'a', 3), (b'b', 2), (b'a', 1)])),
            Err(DecodeError::Duplicate("TopN member"))
        );
        assert!(decode(&topn(3, &[(b'a', 1), (b'b', 1)])).is_ok());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// decode(encode(t)) keeps the same k, members, scores and ranking, accounts the same bytes,
        /// and behaves the same under further adds (which may evict).
        #[test]
        fn encoding_round_trips(topn in built(), later in adds()) {
            let bytes = encoded(&topn);
            let mut decoded = TopKValue::decode(&bytes).expect("an encoding decodes");
            let mut topn = topn;
            prop_assert_eq!(decoded.capacity(), topn.capacity());
            prop_assert_eq!(listed(&decoded), listed(&topn));
            prop_assert_eq!(decoded.memory_bytes(), topn.memory_bytes());
            let expected: usize = topn.iter().map(|(member, _)| member_bytes(member)).sum();
            prop_assert_eq!(decoded.memory_bytes(), expected);
            prop_assert_eq!(encoded(&decoded), bytes.clone());
            for (member, score) in &later {
                prop_assert_eq!(decoded.add(member, *score), topn.add(member, *score));
            }
            prop_assert_eq!(listed(&decoded), listed(&topn));
            prop_assert_eq!(decoded.memory_bytes(), topn.memory_bytes());
            rejects_every_prefix(&bytes, TopKValue::decode)?;
        }

        #[test]
        fn garbage_never_panics(
            topn in built(),
            (position, byte) in (any::<usize>(), any::<u8>()),
            tail in prop::collection::vec(any::<u8>(), 0..40),
        ) {
            let (decode, encode) = (TopKValue::decode, TopKValue::encode);
            canonical_or_rejected(&mutated(&encoded(&topn), position, byte), decode, encode)?;
            canonical_or_rejected(&versioned(CODEC_VERSION, &tail), decode, encode)?;
            canonical_or_rejected(&tail, decode, encode)?;
        }
    }
}
