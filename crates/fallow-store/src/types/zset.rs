//! Sorted set: member → score in a hash map, and (score, member) in an ordered tree for ranges.
use super::element_bytes;
use std::collections::BTreeSet;

/// A score ordered by IEEE total order (scores are never NaN).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Score(pub f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

type Scores = hashbrown::HashMap<Box<[u8]>, f64, foldhash::fast::RandomState>;

#[derive(Clone, Debug, Default)]
pub struct ZSetValue {
    scores: Scores,
    ordered: BTreeSet<(Score, Box<[u8]>)>,
    bytes: usize,
}

const ENTRY_OVERHEAD_BYTES: usize = 64;

fn member_bytes(member: &[u8]) -> usize {
    2 * element_bytes(member.len()) + ENTRY_OVERHEAD_BYTES
}

impl ZSetValue {
    pub fn len(&self) -> usize {
        self.scores.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    pub fn memory_bytes(&self) -> usize {
        self.bytes
    }

    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.get(member).copied()
    }

    /// Sets a member's score; true when the member is new.
    pub fn insert(&mut self, member: &[u8], score: f64) -> bool {
        assert!(!score.is_nan(), "a score is never NaN");
        // -0.0 and 0.0 are the same score to Redis.
        let score = if score == 0.0 { 0.0 } else { score };
        match self.scores.get_mut(member) {
            Some(old) => {
                if *old != score {
                    let entry = self.ordered.take(&(Score(*old), Box::from(member)));
                    debug_assert!(entry.is_some());
                    self.ordered.insert((Score(score), member.into()));
                    *old = score;
                }
                false
            }
            None => {
                self.scores.insert(member.into(), score);
                self.ordered.insert((Score(score), member.into()));
                self.bytes += member_bytes(member);
                true
            }
        }
    }

    pub fn remove(&mut self, member: &[u8]) -> bool {
        let Some(score) = self.scores.remove(member) else {
            return false;
        };
        let removed = self.ordered.remove(&(Score(score), Box::from(member)));
        assert!(removed, "score index and tree agree");
        self.bytes -= member_bytes(member);
        true
    }

    /// Members in ascending (score, member) order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&[u8], f64)> {
        self.ordered
            .iter()
            .map(|(score, member)| (&**member, score.0))
    }

    /// Members with score in the given bounds, ascending.
    pub fn range_by_score(
        &self,
        min: std::ops::Bound<f64>,
        max: std::ops::Bound<f64>,
    ) -> impl Iterator<Item = (&[u8], f64)> {
        use std::ops::Bound;
        let start = match min {
            Bound::Included(score) | Bound::Excluded(score) => score,
            Bound::Unbounded => f64::NEG_INFINITY,
        };
        let first = (Score(start), Box::<[u8]>::from(&[][..]));
        self.ordered
            .range(first..)
            .skip_while(move |(score, _)| matches!(min, Bound::Excluded(limit) if score.0 <= limit))
            .take_while(move |(score, _)| match max {
                Bound::Included(limit) => score.0 <= limit,
                Bound::Excluded(limit) => score.0 < limit,
                Bound::Unbounded => true,
            })
            .map(|(score, member)| (&**member, score.0))
    }

    /// Members whose bytes fall in the given bounds, ascending. Like Redis, this assumes all scores are
    /// equal: the walk starts at the first member (in score order) that is >= min and stops at the
    /// first one past max.
    pub fn range_by_lex<'a>(
        &'a self,
        min: std::ops::Bound<&'a [u8]>,
        max: std::ops::Bound<&'a [u8]>,
    ) -> impl Iterator<Item = (&'a [u8], f64)> + 'a {
        use std::ops::Bound;
        self.iter()
            .skip_while(move |(member, _)| match min {
                Bound::Included(limit) => *member < limit,
                Bound::Excluded(limit) => *member <= limit,
                Bound::Unbounded => false,
            })
            .take_while(move |(member, _)| match max {
                Bound::Included(limit) => *member <= limit,
                Bound::Excluded(limit) => *member < limit,
                Bound::Unbounded => true,
            })
    }

    /// Removes and returns the member with the lowest (score, member).
    pub fn pop_min(&mut self) -> Option<(Box<[u8]>, f64)> {
        let (score, member) = self.ordered.pop_first()?;
        self.forget(&member);
        Some((member, score.0))
    }

    /// Removes and returns the member with the highest (score, member).
    pub fn pop_max(&mut self) -> Option<(Box<[u8]>, f64)> {
        let (score, member) = self.ordered.pop_last()?;
        self.forget(&member);
        Some((member, score.0))
    }

    /// Drops a member already taken out of the tree from the score index and the byte count.
    fn forget(&mut self, member: &[u8]) {
        let removed = self.scores.remove(member);
        assert!(removed.is_some(), "score index and tree agree");
        self.bytes -= member_bytes(member);
    }

    /// 0-based rank of a member in ascending order.
    pub fn rank(&self, member: &[u8]) -> Option<usize> {
        let score = self.score(member)?;
        Some(
            self.ordered
                .range(..(Score(score), Box::from(member)))
                .count(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ops::Bound;

    fn sample() -> ZSetValue {
        let mut zset = ZSetValue::default();
        for (member, score) in [("a", 1.0), ("b", 2.0), ("c", 2.0), ("d", 3.0)] {
            zset.insert(member.as_bytes(), score);
        }
        zset
    }

    #[test]
    fn ranks_follow_score_then_member() {
        let zset = sample();
        assert_eq!(zset.rank(b"a"), Some(0));
        assert_eq!(zset.rank(b"c"), Some(2));
        assert_eq!(zset.rank(b"d"), Some(3));
        assert_eq!(zset.rank(b"x"), None);
    }

    #[test]
    fn score_ranges_respect_exclusive_bounds() {
        let zset = sample();
        let members = |min, max| -> Vec<Vec<u8>> {
            zset.range_by_score(min, max)
                .map(|(member, _)| member.to_vec())
                .collect()
        };
        assert_eq!(
            members(Bound::Excluded(1.0), Bound::Included(2.0)),
            vec![b"b".to_vec(), b"c".to_vec()]
        );
        assert_eq!(
            members(Bound::Unbounded, Bound::Excluded(2.0)),
            vec![b"a".to_vec()]
        );
    }

    #[test]
    fn lex_ranges_and_pops_keep_bytes_exact() {
        let mut zset = ZSetValue::default();
        for member in ["a", "b", "c", "d"] {
            zset.insert(member.as_bytes(), 0.0);
        }
        let lex: Vec<&[u8]> = zset
            .range_by_lex(Bound::Excluded(b"a"), Bound::Included(b"c"))
            .map(|(member, _)| member)
            .collect();
        assert_eq!(lex, vec![&b"b"[..], &b"c"[..]]);
        let full = zset.memory_bytes();
        assert_eq!(
            zset.pop_min().map(|(member, _)| member),
            Some(b"a"[..].into())
        );
        assert_eq!(
            zset.pop_max().map(|(member, _)| member),
            Some(b"d"[..].into())
        );
        assert_eq!(zset.memory_bytes(), full - 2 * member_bytes(b"a"));
        zset.remove(b"b");
        zset.remove(b"c");
        assert_eq!(zset.memory_bytes(), 0);
    }
}
