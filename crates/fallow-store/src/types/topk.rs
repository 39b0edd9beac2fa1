//! TopN: a scored set that keeps, for each member, the highest score it was given, and only its k best
//! members (score descending, ties to the smaller member). The semantics of `fallow_txn::types::topk`:
//! what is kept does not depend on the order of the adds. Scores are integers, so ranks are exact.
use super::element_bytes;
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
}
