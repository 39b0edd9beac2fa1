//! Sorted set: member → score in a hash map, and (score, member) in an ordered tree for ranges. Also the
//! sorted-set semantics of Redis's t_zset that the commands apply: ZADD's flags, ranges by rank, score or
//! lex with LIMIT and reversal, pops, random members and union/intersection/difference with weights and
//! aggregates. Plain functions of the value: the commands parse arguments, lock and write replies. The
//! semantics of `fallow_txn::types::scored_set` (checked by the property test below).
use super::codec::{put_bytes, put_len, Reader};
use super::{clamp_range, element_bytes, pick_count, pick_indexes, DecodeError, Kind};
use rand::Rng;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::Bound;

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

// ----- ranges -----------------------------------------------------------------------------------------

/// One end of a lexicographical range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LexBound<'a> {
    /// `-`: below every member.
    Lowest,
    /// `+`: above every member.
    Highest,
    Inclusive(&'a [u8]),
    Exclusive(&'a [u8]),
}

/// Iteration bounds of a lex range.
pub type LexLimits<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// Converts lex bounds to iteration bounds; None when the range is empty by construction.
pub fn lex_bounds<'a>(min: LexBound<'a>, max: LexBound<'a>) -> Option<LexLimits<'a>> {
    let low = match min {
        LexBound::Lowest => Bound::Unbounded,
        LexBound::Highest => return None,
        LexBound::Inclusive(value) => Bound::Included(value),
        LexBound::Exclusive(value) => Bound::Excluded(value),
    };
    let high = match max {
        LexBound::Highest => Bound::Unbounded,
        LexBound::Lowest => return None,
        LexBound::Inclusive(value) => Bound::Included(value),
        LexBound::Exclusive(value) => Bound::Excluded(value),
    };
    Some((low, high))
}

/// A ZRANGE-family range: by rank (inclusive, negative from the end), by score or by lex.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Range<'a> {
    Rank(i64, i64),
    Score(Bound<f64>, Bound<f64>),
    Lex(LexBound<'a>, LexBound<'a>),
}

/// Applies direction, offset and count to an ascending run of members.
fn pick<'z>(
    ascending: impl Iterator<Item = (&'z [u8], f64)>,
    rev: bool,
    offset: usize,
    take: usize,
) -> Vec<(&'z [u8], f64)> {
    if rev {
        let mut all: Vec<_> = ascending.collect();
        all.reverse();
        all.into_iter().skip(offset).take(take).collect()
    } else {
        ascending.skip(offset).take(take).collect()
    }
}

// ----- ZADD -------------------------------------------------------------------------------------------

/// ZADD's flags (ZINCRBY is ZADD INCR).
#[derive(Clone, Copy, Debug, Default)]
pub struct AddFlags {
    pub nx: bool,
    pub xx: bool,
    pub gt: bool,
    pub lt: bool,
    pub ch: bool,
    pub incr: bool,
}

/// What one ZADD element did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AddOutcome {
    Added(f64),
    Updated(f64),
    /// Already had that score: not a change for CH, but INCR still replies it.
    Same(f64),
    /// The flags forbade the change.
    Skipped,
    NotANumber,
}

impl AddOutcome {
    /// The member's score afterwards, when the element was applied (what ZADD INCR replies).
    pub fn score(self) -> Option<f64> {
        match self {
            AddOutcome::Added(score) | AddOutcome::Updated(score) | AddOutcome::Same(score) => {
                Some(score)
            }
            AddOutcome::Skipped | AddOutcome::NotANumber => None,
        }
    }

    /// Whether ZADD counts the element in its reply: an added member, or with CH a changed score.
    pub fn counted(self, ch: bool) -> bool {
        match self {
            AddOutcome::Added(_) => true,
            AddOutcome::Updated(_) => ch,
            _ => false,
        }
    }
}

// ----- pops and set operations ------------------------------------------------------------------------

/// Which end ZPOPMIN/ZPOPMAX (and ZMPOP's MIN/MAX) take from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Min,
    Max,
}

/// Members and scores copied out of a sorted set (or a set, with score 1).
pub type Scored = Vec<(Box<[u8]>, f64)>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aggregate {
    Sum,
    Min,
    Max,
}

impl Aggregate {
    pub fn apply(self, current: f64, value: f64) -> f64 {
        match self {
            // inf + -inf is NaN; Redis turns it into 0.
            Aggregate::Sum => {
                let sum = current + value;
                if sum.is_nan() {
                    0.0
                } else {
                    sum
                }
            }
            Aggregate::Min => current.min(value),
            Aggregate::Max => current.max(value),
        }
    }
}

/// A source of an intersection, indexed by member, with its weight.
type Indexed = (HashMap<Box<[u8]>, f64>, f64);

/// Weighted score; 0 * inf is NaN, which Redis turns into 0.
fn weighted(score: f64, weight: f64) -> f64 {
    let value = score * weight;
    if value.is_nan() {
        0.0
    } else {
        value
    }
}

impl ZSetValue {
    /// Redis's zsetAdd: applies one (score, member) under the ZADD flags.
    pub fn add(&mut self, member: &[u8], score: f64, flags: AddFlags) -> AddOutcome {
        match self.score(member) {
            Some(current) => {
                if flags.nx {
                    return AddOutcome::Skipped;
                }
                let new = if flags.incr { current + score } else { score };
                if new.is_nan() {
                    return AddOutcome::NotANumber;
                }
                if (flags.lt && new >= current) || (flags.gt && new <= current) {
                    return AddOutcome::Skipped;
                }
                if new == current {
                    return AddOutcome::Same(new);
                }
                self.insert(member, new);
                AddOutcome::Updated(new)
            }
            None if flags.xx => AddOutcome::Skipped,
            None => {
                self.insert(member, score);
                AddOutcome::Added(score)
            }
        }
    }

    /// ZINCRBY: adds `delta` to the member's score (an absent member starts at 0).
    pub fn incr(&mut self, member: &[u8], delta: f64) -> AddOutcome {
        let flags = AddFlags {
            incr: true,
            ..AddFlags::default()
        };
        self.add(member, delta, flags)
    }

    /// 0-based rank of a member, in descending order when `rev` (ZRANK, ZREVRANK).
    pub fn rank_in(&self, member: &[u8], rev: bool) -> Option<usize> {
        let rank = self.rank(member)?;
        Some(if rev { self.len() - 1 - rank } else { rank })
    }

    /// Members in `range`, in reply order (descending when `rev`), after `LIMIT offset count` (a negative
    /// offset selects nothing, a negative count means all, as in Redis).
    pub fn select<'z>(
        &'z self,
        range: &Range<'z>,
        rev: bool,
        limit: Option<(i64, i64)>,
    ) -> Vec<(&'z [u8], f64)> {
        let (offset, count) = limit.unwrap_or((0, -1));
        if offset < 0 {
            return Vec::new();
        }
        let take = usize::try_from(count).unwrap_or(usize::MAX);
        let offset = offset as usize;
        match *range {
            Range::Rank(start, end) => {
                let Some((from, to)) = clamp_range(start, end, self.len()) else {
                    return Vec::new();
                };
                let span = to - from + 1;
                if rev {
                    self.iter().rev().skip(from).take(span).collect()
                } else {
                    self.iter().skip(from).take(span).collect()
                }
            }
            Range::Score(min, max) => pick(self.range_by_score(min, max), rev, offset, take),
            Range::Lex(min, max) => match lex_bounds(min, max) {
                Some((low, high)) => pick(self.range_by_lex(low, high), rev, offset, take),
                None => Vec::new(),
            },
        }
    }

    /// How many members `range` holds (ZCOUNT, ZLEXCOUNT).
    pub fn count_in(&self, range: &Range<'_>) -> usize {
        self.select(range, false, None).len()
    }

    /// A new sorted set of the members `select` returns (ZRANGESTORE).
    pub fn copy_range(&self, range: &Range<'_>, rev: bool, limit: Option<(i64, i64)>) -> ZSetValue {
        let mut copy = ZSetValue::default();
        for (member, score) in self.select(range, rev, limit) {
            copy.insert(member, score);
        }
        copy
    }

    /// Removes the members in `range` (ZREMRANGEBYRANK/SCORE/LEX); returns how many.
    pub fn remove_range(&mut self, range: &Range<'_>) -> usize {
        let doomed: Vec<Box<[u8]>> = self
            .select(range, false, None)
            .into_iter()
            .map(|(member, _)| member.into())
            .collect();
        for member in &doomed {
            self.remove(member);
        }
        doomed.len()
    }

    /// Removes and returns up to `count` members from one end, the most extreme first.
    pub fn pop(&mut self, end: End, count: usize) -> Scored {
        let mut popped = Vec::with_capacity(count.min(self.len()));
        while popped.len() < count {
            let next = match end {
                End::Min => self.pop_min(),
                End::Max => self.pop_max(),
            };
            match next {
                Some(pair) => popped.push(pair),
                None => break,
            }
        }
        popped
    }

    /// A uniformly random member (ZRANDMEMBER without a count).
    pub fn random_member(&self, rng: &mut impl Rng) -> Option<(&[u8], f64)> {
        if self.is_empty() {
            return None;
        }
        let index = rng.gen_range(0..self.len());
        self.iter().nth(index)
    }

    /// How many members ZRANDMEMBER's `count` picks (see `pick_count`).
    pub fn random_count(&self, count: i64) -> usize {
        pick_count(self.len(), count)
    }

    /// Calls `visit` with each of ZRANDMEMBER's picks for `count` (see `pick_indexes`): distinct members
    /// for a positive count, |count| members with repeats for a negative one.
    pub fn random_members(
        &self,
        count: i64,
        rng: &mut impl Rng,
        mut visit: impl FnMut(&[u8], f64),
    ) {
        if self.random_count(count) == 0 {
            return;
        }
        let all: Vec<(&[u8], f64)> = self.iter().collect();
        pick_indexes(all.len(), count, rng, |index| {
            let (member, score) = all[index];
            visit(member, score);
        });
    }

    /// The members and scores, copied out (a source of a set operation).
    pub fn scored(&self) -> Scored {
        self.iter()
            .map(|(member, score)| (member.into(), score))
            .collect()
    }

    /// ZUNION/ZINTER/ZDIFF (and their STORE forms): combines weighted sources, None for an absent key.
    /// An absent source empties an intersection (and a difference when it is the first), and is nothing
    /// to a union.
    pub fn combine(
        sources: Vec<(Option<Scored>, f64)>,
        op: SetOp,
        aggregate: Aggregate,
    ) -> ZSetValue {
        let mut present = Vec::with_capacity(sources.len());
        for (members, weight) in sources {
            match members {
                Some(members) => present.push((members, weight)),
                None if op == SetOp::Inter => present.push((Vec::new(), weight)),
                None if op == SetOp::Diff && present.is_empty() => {
                    present.push((Vec::new(), weight))
                }
                None => {}
            }
        }
        Self::combine_present(present, op, aggregate)
    }

    fn combine_present(
        mut sources: Vec<(Scored, f64)>,
        op: SetOp,
        aggregate: Aggregate,
    ) -> ZSetValue {
        let mut result = ZSetValue::default();
        match op {
            SetOp::Union => {
                let mut scores: HashMap<Box<[u8]>, f64> = HashMap::new();
                for (members, weight) in sources {
                    for (member, score) in members {
                        let value = weighted(score, weight);
                        scores
                            .entry(member)
                            .and_modify(|current| *current = aggregate.apply(*current, value))
                            .or_insert(value);
                    }
                }
                for (member, score) in scores {
                    result.insert(&member, score);
                }
            }
            SetOp::Inter => {
                // Walk the smallest source, as Redis does.
                sources.sort_by_key(|(members, _)| members.len());
                let mut sources = sources.into_iter();
                let Some((first, first_weight)) = sources.next() else {
                    return result;
                };
                let others: Vec<Indexed> = sources
                    .map(|(members, weight)| (members.into_iter().collect(), weight))
                    .collect();
                'members: for (member, score) in first {
                    let mut value = weighted(score, first_weight);
                    for (other, weight) in &others {
                        match other.get(&member) {
                            Some(&score) => {
                                value = aggregate.apply(value, weighted(score, *weight))
                            }
                            None => continue 'members,
                        }
                    }
                    result.insert(&member, value);
                }
            }
            SetOp::Diff => {
                let mut sources = sources.into_iter();
                let Some((first, _)) = sources.next() else {
                    return result;
                };
                let others: Vec<HashSet<Box<[u8]>>> = sources
                    .map(|(members, _)| members.into_iter().map(|(member, _)| member).collect())
                    .collect();
                for (member, score) in first {
                    if !others.iter().any(|other| other.contains(&member)) {
                        result.insert(&member, score);
                    }
                }
            }
        }
        result
    }
}

// ----- codec ------------------------------------------------------------------------------------------
//
// Layout (version 1; varints are LEB128, see codec.rs):
//   u8 version = 1
//   varint count
//   count x { varint member_len, member bytes, f64 score as its IEEE bits, little-endian }
// Members ascending by (score in total order, member bytes), as the ranking holds them; a decoder
// checks that order (which also rules out two equal entries) and that every member is distinct.
// Scores keep infinities as they are; NaN and -0.0, which no sorted set holds, are rejected.

const CODEC_VERSION: u8 = 1;

impl ZSetValue {
    /// Appends the sorted set's encoding (layout above).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(CODEC_VERSION);
        put_len(out, self.len());
        for (member, score) in self.iter() {
            put_bytes(out, member);
            out.extend_from_slice(&score.to_bits().to_le_bytes());
        }
    }

    /// Decodes what `encode` wrote; all of `bytes` must be that one sorted set.
    pub fn decode(bytes: &[u8]) -> Result<ZSetValue, DecodeError> {
        let mut reader = Reader::new(bytes);
        reader.version(Kind::ZSet, CODEC_VERSION)?;
        // a member takes at least its length byte and its 8-byte score
        let count = reader.count("sorted set members", 9)?;
        let mut zset = ZSetValue::default();
        zset.scores.reserve(count);
        let mut previous: Option<(Score, &[u8])> = None;
        for _ in 0..count {
            let member = reader.bytes()?;
            let score = reader.f64()?;
            if score.is_nan() || (score == 0.0 && score.is_sign_negative()) {
                return Err(DecodeError::InvalidFloat(score.to_bits()));
            }
            let entry = (Score(score), member);
            if previous.is_some_and(|previous| previous >= entry) {
                return Err(DecodeError::BadOrder("sorted set members"));
            }
            previous = Some(entry);
            if !zset.insert(member, score) {
                return Err(DecodeError::Duplicate("sorted set member"));
            }
        }
        reader.finish()?;
        Ok(zset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fallow_txn::types::scored_set::{ScoredSet, ZOp, ZOutput};
    use fallow_txn::Adt;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

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

    fn names(members: Vec<(&[u8], f64)>) -> Vec<String> {
        members
            .into_iter()
            .map(|(member, _)| String::from_utf8_lossy(member).into_owned())
            .collect()
    }

    fn abcd() -> ZSetValue {
        let mut zset = ZSetValue::default();
        for (member, score) in [("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0)] {
            zset.insert(member.as_bytes(), score);
        }
        zset
    }

    #[test]
    fn lex_bounds_that_cannot_hold_anything_are_empty() {
        assert_eq!(lex_bounds(LexBound::Highest, LexBound::Highest), None);
        assert_eq!(lex_bounds(LexBound::Lowest, LexBound::Lowest), None);
    }

    #[test]
    fn selects_by_rank_score_and_lex() {
        let zset = abcd();
        assert_eq!(
            names(zset.select(&Range::Rank(1, -2), false, None)),
            ["b", "c"]
        );
        assert_eq!(names(zset.select(&Range::Rank(0, 0), true, None)), ["d"]);
        assert!(zset.select(&Range::Rank(3, 1), false, None).is_empty());
        let above_one = Range::Score(Bound::Excluded(1.0), Bound::Included(f64::INFINITY));
        assert_eq!(names(zset.select(&above_one, false, None)), ["b", "c", "d"]);
        assert_eq!(names(zset.select(&above_one, true, Some((1, 1)))), ["c"]);
        assert!(zset.select(&above_one, false, Some((-1, 5))).is_empty());
        assert_eq!(
            names(zset.select(&above_one, false, Some((1, -1)))),
            ["c", "d"]
        );
        let lex = Range::Lex(LexBound::Exclusive(b"a"), LexBound::Inclusive(b"c"));
        assert_eq!(names(zset.select(&lex, false, None)), ["b", "c"]);
        assert_eq!(zset.count_in(&above_one), 3);
        assert_eq!(zset.rank_in(b"a", true), Some(3));
    }

    #[test]
    fn zadd_flags_follow_redis() {
        let mut zset = abcd();
        let gt = AddFlags {
            gt: true,
            ..AddFlags::default()
        };
        assert_eq!(zset.add(b"a", 0.5, gt), AddOutcome::Skipped);
        assert_eq!(zset.add(b"a", 5.0, gt), AddOutcome::Updated(5.0));
        zset.insert(b"inf", f64::INFINITY);
        assert_eq!(zset.incr(b"inf", f64::NEG_INFINITY), AddOutcome::NotANumber);
    }

    #[test]
    fn removals_and_pops_by_range() {
        let mut zset = abcd();
        assert_eq!(zset.remove_range(&Range::Rank(0, 1)), 2);
        assert_eq!(
            names(zset.select(&Range::Rank(0, -1), false, None)),
            ["c", "d"]
        );
        let popped = zset.pop(End::Max, 5);
        assert_eq!(popped.len(), 2);
        assert_eq!(&*popped[0].0, b"d");
        assert!(zset.is_empty() && zset.memory_bytes() == 0);
    }

    #[test]
    fn set_ops_aggregate() {
        let left = vec![(Box::from(&b"x"[..]), 1.0), (Box::from(&b"y"[..]), 2.0)];
        let right = vec![(Box::from(&b"y"[..]), 3.0), (Box::from(&b"z"[..]), 4.0)];
        let union = ZSetValue::combine(
            vec![(Some(left.clone()), 1.0), (Some(right.clone()), 1.0)],
            SetOp::Union,
            Aggregate::Sum,
        );
        assert_eq!(union.score(b"y"), Some(5.0));
        assert_eq!(union.len(), 3);
        let inter = ZSetValue::combine(
            vec![(Some(left.clone()), 2.0), (Some(right.clone()), 1.0)],
            SetOp::Inter,
            Aggregate::Max,
        );
        assert_eq!(inter.score(b"y"), Some(4.0));
        assert_eq!(inter.len(), 1);
        let diff = ZSetValue::combine(
            vec![(Some(left.clone()), 1.0), (Some(right), 1.0)],
            SetOp::Diff,
            Aggregate::Sum,
        );
        assert_eq!(diff.len(), 1);
        assert_eq!(diff.score(b"x"), Some(1.0));
        // Absent sources: nothing to a union, empty to an intersection or a difference they start.
        let with_absent = |op| {
            ZSetValue::combine(
                vec![(None, 1.0), (Some(left.clone()), 1.0)],
                op,
                Aggregate::Sum,
            )
            .len()
        };
        assert_eq!(with_absent(SetOp::Union), 2);
        assert_eq!(with_absent(SetOp::Inter), 0);
        assert_eq!(with_absent(SetOp::Diff), 0);
    }

    #[test]
    fn random_members_follow_the_count() {
        use rand::SeedableRng;
        let zset = abcd();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let mut seen = Vec::new();
        zset.random_members(10, &mut rng, |member, _| seen.push(member.to_vec()));
        assert_eq!(seen, [b"a", b"b", b"c", b"d"].map(|m| m.to_vec()));
        seen.clear();
        zset.random_members(-7, &mut rng, |member, _| seen.push(member.to_vec()));
        assert_eq!(seen.len(), 7);
        assert!(zset.random_member(&mut rng).is_some());
        assert!(ZSetValue::default().random_member(&mut rng).is_none());
    }

    // ----- agreement with fallow_txn::types::scored_set ----------------------------------------------

    type Op = ZOp<Vec<u8>>;

    fn member() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(b'a'..=b'd', 0..3)
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        let op = prop_oneof![
            3 => (member(), -3i64..4).prop_map(|(m, s)| ZOp::Add(m, s)),
            2 => (member(), -3i64..4).prop_map(|(m, d)| ZOp::Incr(m, d)),
            2 => member().prop_map(ZOp::Rem),
            1 => member().prop_map(ZOp::Score),
            1 => member().prop_map(ZOp::Rank),
            1 => (0usize..8, 0usize..8).prop_map(|(start, stop)| ZOp::Range(start, stop)),
            1 => Just(ZOp::Card),
        ];
        prop::collection::vec(op, 0..40)
    }

    /// The spec's operation through the store's methods, its output in the spec's terms.
    fn apply(zset: &mut ZSetValue, op: &Op) -> ZOutput<Vec<u8>> {
        match op {
            ZOp::Add(member, score) => {
                zset.add(member, *score as f64, AddFlags::default());
                ZOutput::Done
            }
            ZOp::Incr(member, delta) => {
                zset.incr(member, *delta as f64);
                ZOutput::Done
            }
            ZOp::Rem(member) => {
                zset.remove(member);
                ZOutput::Done
            }
            ZOp::Score(member) => ZOutput::Score(zset.score(member).map(|score| score as i128)),
            ZOp::Rank(member) => ZOutput::Rank(zset.rank_in(member, false)),
            ZOp::Range(start, stop) => ZOutput::Range(
                zset.select(&Range::Rank(*start as i64, *stop as i64), false, None)
                    .into_iter()
                    .map(|(member, _)| member.to_vec())
                    .collect(),
            ),
            ZOp::Card => ZOutput::Card(zset.len()),
        }
    }

    fn state(zset: &ZSetValue) -> BTreeMap<Vec<u8>, i128> {
        zset.iter()
            .map(|(member, score)| (member.to_vec(), score as i128))
            .collect()
    }

    /// The spec's members ascending by (score, member), with their scores.
    fn ranked(spec: &BTreeMap<Vec<u8>, i128>) -> Vec<(Vec<u8>, i128)> {
        let mut members: Vec<(Vec<u8>, i128)> = spec
            .iter()
            .map(|(member, score)| (member.clone(), *score))
            .collect();
        members.sort_by(|(m1, s1), (m2, s2)| s1.cmp(s2).then_with(|| m1.cmp(m2)));
        members
    }

    fn bound(value: i64, open: bool) -> Bound<f64> {
        if open {
            Bound::Excluded(value as f64)
        } else {
            Bound::Included(value as f64)
        }
    }

    fn within(score: i128, min: Bound<f64>, max: Bound<f64>) -> bool {
        let score = score as f64;
        let above = match min {
            Bound::Included(limit) => score >= limit,
            Bound::Excluded(limit) => score > limit,
            Bound::Unbounded => true,
        };
        let below = match max {
            Bound::Included(limit) => score <= limit,
            Bound::Excluded(limit) => score < limit,
            Bound::Unbounded => true,
        };
        above && below
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn agrees_with_the_specification(ops in ops()) {
            let mut zset = ZSetValue::default();
            let mut spec = BTreeMap::new();
            for op in &ops {
                let output = apply(&mut zset, op);
                prop_assert_eq!(output, ScoredSet::apply(&mut spec, op), "{:?}", op);
                prop_assert_eq!(state(&zset), spec.clone());
            }
            let bytes: usize = spec.keys().map(|member| member_bytes(member)).sum();
            prop_assert_eq!(zset.memory_bytes(), bytes);
            // Reversed ranks and ranges mirror the spec's ranking.
            let mut descending: Vec<Vec<u8>> =
                ranked(&spec).into_iter().map(|(member, _)| member).collect();
            descending.reverse();
            let reversed: Vec<Vec<u8>> = zset
                .select(&Range::Rank(0, -1), true, None)
                .into_iter()
                .map(|(member, _)| member.to_vec())
                .collect();
            prop_assert_eq!(&reversed, &descending);
            for (rank, member) in descending.iter().enumerate() {
                prop_assert_eq!(zset.rank_in(member, true), Some(rank));
            }
        }

        #[test]
        fn score_ranges_filter_the_ranking(
            ops in ops(),
            (min, min_open, max, max_open) in (-4i64..5, any::<bool>(), -4i64..5, any::<bool>()),
            rev in any::<bool>(),
            (offset, count) in (-1i64..4, -1i64..4),
        ) {
            let mut zset = ZSetValue::default();
            let mut spec = BTreeMap::new();
            for op in &ops {
                apply(&mut zset, op);
                ScoredSet::apply(&mut spec, op);
            }
            let (low, high) = (bound(min, min_open), bound(max, max_open));
            let mut expected: Vec<(Vec<u8>, i128)> = ranked(&spec)
                .into_iter()
                .filter(|(_, score)| within(*score, low, high))
                .collect();
            if rev {
                expected.reverse();
            }
            let expected: Vec<(Vec<u8>, i128)> = if offset < 0 {
                Vec::new()
            } else {
                expected
                    .into_iter()
                    .skip(offset as usize)
                    .take(usize::try_from(count).unwrap_or(usize::MAX))
                    .collect()
            };
            let selected: Vec<(Vec<u8>, i128)> = zset
                .select(&Range::Score(low, high), rev, Some((offset, count)))
                .into_iter()
                .map(|(member, score)| (member.to_vec(), score as i128))
                .collect();
            prop_assert_eq!(selected, expected);
            // Popping from either end follows the ranking too.
            let ranking = ranked(&spec);
            let end = if rev { End::Max } else { End::Min };
            let popped: Vec<(Vec<u8>, i128)> = zset
                .pop(end, 2)
                .into_iter()
                .map(|(member, score)| (member.to_vec(), score as i128))
                .collect();
            let expected_pops: Vec<(Vec<u8>, i128)> = if rev {
                ranking.into_iter().rev().take(2).collect()
            } else {
                ranking.into_iter().take(2).collect()
            };
            prop_assert_eq!(popped, expected_pops);
        }
    }

    // ----- codec ------------------------------------------------------------------------------------

    use crate::types::codec::testing::{
        canonical_or_rejected, mutated, rejects_every_prefix, versioned,
    };

    fn encoded(zset: &ZSetValue) -> Vec<u8> {
        let mut out = Vec::new();
        zset.encode(&mut out);
        out
    }

    fn entries(zset: &ZSetValue) -> Vec<(Vec<u8>, u64)> {
        zset.iter()
            .map(|(member, score)| (member.to_vec(), score.to_bits()))
            .collect()
    }

    /// Any score a sorted set can hold: infinities, zero (-0.0 is stored as 0.0), extremes and
    /// fractions.
    fn score() -> impl Strategy<Value = f64> {
        prop_oneof![
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(0.0),
            Just(-0.0),
            Just(f64::MAX),
            Just(f64::MIN_POSITIVE),
            (-3i64..4).prop_map(|score| score as f64),
            any::<f64>().prop_filter("a score is never NaN", |score| !score.is_nan()),
        ]
    }

    /// A sorted set built by ZADD and ZREM, some members past 127 bytes.
    fn built() -> impl Strategy<Value = ZSetValue> {
        let long = prop::collection::vec(any::<u8>(), 120..300);
        let member = prop_oneof![8 => member(), 1 => long];
        prop::collection::vec((any::<bool>(), member, score()), 0..40).prop_map(|edits| {
            let mut zset = ZSetValue::default();
            for (add, member, score) in edits {
                if add {
                    zset.insert(&member, score);
                } else {
                    zset.remove(&member);
                }
            }
            zset
        })
    }

    #[test]
    fn the_layout_is_pinned() {
        let mut zset = ZSetValue::default();
        zset.insert(b"b", f64::NEG_INFINITY);
        zset.insert(b"a", 1.5);
        let mut expected = vec![1, 2, 1, b'b'];
        expected.extend(f64::NEG_INFINITY.to_bits().to_le_bytes());
        expected.extend([1, b'a']);
        expected.extend(1.5f64.to_bits().to_le_bytes());
        assert_eq!(encoded(&zset), expected);
        assert_eq!(encoded(&ZSetValue::default()), [1, 0]);
    }

    #[test]
    fn corrupt_sorted_sets_are_rejected() {
        let decode = |bytes: &[u8]| ZSetValue::decode(bytes).map(|_| ());
        let entry = |member: u8, score: f64| {
            let mut bytes = vec![1, member];
            bytes.extend(score.to_bits().to_le_bytes());
            bytes
        };
        let set_of = |entries: &[Vec<u8>]| {
            let mut bytes = vec![1, entries.len() as u8];
            entries.iter().for_each(|entry| bytes.extend(entry));
            bytes
        };
        assert_eq!(
            decode(&set_of(&[entry(b'a', f64::NAN)])),
            Err(DecodeError::InvalidFloat(f64::NAN.to_bits()))
        );
        assert!(matches!(
            decode(&set_of(&[entry(b'a', -0.0)])),
            Err(DecodeError::InvalidFloat(_))
        ));
        assert_eq!(
            decode(&set_of(&[entry(b'b', 1.0), entry(b'a', 1.0)])),
            Err(DecodeError::BadOrder("sorted set members"))
        );
        assert_eq!(
            decode(&set_of(&[entry(b'a', 1.0), entry(b'a', 2.0)])),
            Err(DecodeError::Duplicate("sorted set member"))
        );
        assert!(decode(&set_of(&[entry(b'a', 1.0), entry(b'b', 1.0)])).is_ok());
        assert!(matches!(
            decode(&[1, 2, 1, b'a', 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(DecodeError::BadLength { len: 2, .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// decode(encode(z)) holds the same members with bit-identical scores (infinities included),
        /// accounts the same bytes, and behaves the same: ranks, ranges, random picks, pops and
        /// further edits.
        #[test]
        fn encoding_round_trips(
            zset in built(),
            later in ops(),
            seed in any::<u64>(),
            (min, max) in (score(), score()),
        ) {
            use rand::SeedableRng;
            let bytes = encoded(&zset);
            let mut decoded = ZSetValue::decode(&bytes).expect("an encoding decodes");
            let mut zset = zset;
            prop_assert_eq!(entries(&decoded), entries(&zset));
            prop_assert_eq!(decoded.memory_bytes(), zset.memory_bytes());
            let expected: usize = zset.iter().map(|(member, _)| member_bytes(member)).sum();
            prop_assert_eq!(decoded.memory_bytes(), expected);
            prop_assert_eq!(encoded(&decoded), bytes.clone());
            for (member, score) in zset.iter() {
                prop_assert_eq!(decoded.score(member).map(f64::to_bits), Some(score.to_bits()));
                prop_assert_eq!(decoded.rank(member), zset.rank(member));
            }
            let range = Range::Score(Bound::Included(min), Bound::Excluded(max));
            prop_assert_eq!(decoded.select(&range, true, None), zset.select(&range, true, None));
            let picks = |zset: &ZSetValue| {
                let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
                let mut seen = Vec::new();
                zset.random_members(-5, &mut rng, |member, _| seen.push(member.to_vec()));
                seen
            };
            prop_assert_eq!(picks(&decoded), picks(&zset));
            for op in &later {
                prop_assert_eq!(apply(&mut decoded, op), apply(&mut zset, op));
            }
            prop_assert_eq!(decoded.pop(End::Max, 2), zset.pop(End::Max, 2));
            prop_assert_eq!(entries(&decoded), entries(&zset));
            rejects_every_prefix(&bytes, ZSetValue::decode)?;
        }

        #[test]
        fn garbage_never_panics(
            zset in built(),
            (position, byte) in (any::<usize>(), any::<u8>()),
            tail in prop::collection::vec(any::<u8>(), 0..40),
        ) {
            let (decode, encode) = (ZSetValue::decode, ZSetValue::encode);
            canonical_or_rejected(&mutated(&encoded(&zset), position, byte), decode, encode)?;
            canonical_or_rejected(&versioned(CODEC_VERSION, &tail), decode, encode)?;
            canonical_or_rejected(&tail, decode, encode)?;
        }
    }
}
