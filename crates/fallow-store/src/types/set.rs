//! Set of byte strings. An index set, so SPOP and SRANDMEMBER pick a random member in O(1). Also the set
//! semantics of Redis's t_set that the commands apply (random pops and picks, intersection, union and
//! difference): plain functions of the value, checked against `fallow_txn::types::set` by the property
//! test below.
use super::codec::{put_bytes, put_len, Reader};
use super::{element_bytes, pick_count, pick_indexes, DecodeError, Kind};
use indexmap::IndexSet;
use rand::Rng;

type Members = IndexSet<Box<[u8]>, foldhash::fast::RandomState>;

#[derive(Clone, Debug, Default)]
pub struct SetValue {
    members: Members,
    bytes: usize,
}

const ENTRY_OVERHEAD_BYTES: usize = 16;

fn member_bytes(member: &[u8]) -> usize {
    element_bytes(member.len()) + ENTRY_OVERHEAD_BYTES
}

impl SetValue {
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn memory_bytes(&self) -> usize {
        self.bytes + self.members.capacity() * 8
    }

    pub fn contains(&self, member: &[u8]) -> bool {
        self.members.contains(member)
    }

    /// Adds a member; true when it was not there.
    pub fn insert(&mut self, member: &[u8]) -> bool {
        let added = self.members.insert(member.into());
        if added {
            self.bytes += member_bytes(member);
        }
        added
    }

    pub fn remove(&mut self, member: &[u8]) -> bool {
        let removed = self.members.swap_remove(member);
        if removed {
            self.bytes -= member_bytes(member);
        }
        removed
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        self.members.iter().map(|member| &**member)
    }

    pub fn get_index(&self, index: usize) -> Option<&[u8]> {
        self.members.get_index(index).map(|member| &**member)
    }

    /// Gives back spare capacity (a set built by filtering a copy of a bigger one).
    pub fn shrink_to_fit(&mut self) {
        self.members.shrink_to_fit();
    }

    /// Removes and returns the member at `index`.
    pub fn remove_index(&mut self, index: usize) -> Option<Box<[u8]>> {
        let member = self.members.swap_remove_index(index)?;
        self.bytes -= member_bytes(&member);
        Some(member)
    }

    /// Adds the members; returns how many were not there (SADD).
    pub fn insert_all<'a>(&mut self, members: impl IntoIterator<Item = &'a [u8]>) -> usize {
        members
            .into_iter()
            .filter(|member| self.insert(member))
            .count()
    }

    /// Removes the members; returns how many were there (SREM).
    pub fn remove_all<'a>(&mut self, members: impl IntoIterator<Item = &'a [u8]>) -> usize {
        members
            .into_iter()
            .filter(|member| self.remove(member))
            .count()
    }

    /// Removes the members for which `doomed` holds.
    pub fn remove_where(&mut self, doomed: impl Fn(&[u8]) -> bool) {
        let members: Vec<Box<[u8]>> = self
            .iter()
            .filter(|member| doomed(member))
            .map(Box::from)
            .collect();
        for member in members {
            self.remove(&member);
        }
    }

    /// Removes and returns a uniformly random member (SPOP without a count).
    pub fn pop_random(&mut self, rng: &mut impl Rng) -> Option<Box<[u8]>> {
        let index = rng.gen_range(0..self.len().max(1));
        self.remove_index(index)
    }

    /// Removes and returns `count` random members, all of them when count covers the set (SPOP count).
    pub fn pop_randoms(&mut self, count: usize, rng: &mut impl Rng) -> Vec<Box<[u8]>> {
        let count = count.min(self.len());
        let mut popped = Vec::with_capacity(count);
        while popped.len() < count {
            let index = rng.gen_range(0..self.len());
            popped.extend(self.remove_index(index));
        }
        popped
    }

    /// A uniformly random member (SRANDMEMBER without a count).
    pub fn random_member(&self, rng: &mut impl Rng) -> Option<&[u8]> {
        if self.is_empty() {
            return None;
        }
        self.get_index(rng.gen_range(0..self.len()))
    }

    /// How many members SRANDMEMBER's `count` picks (see `pick_count`).
    pub fn random_count(&self, count: i64) -> usize {
        pick_count(self.len(), count)
    }

    /// Calls `visit` with each of SRANDMEMBER's picks for `count` (see `pick_indexes`): distinct members
    /// for a positive count, |count| members with repeats for a negative one.
    pub fn random_members(&self, count: i64, rng: &mut impl Rng, mut visit: impl FnMut(&[u8])) {
        pick_indexes(self.len(), count, rng, |index| {
            visit(self.get_index(index).expect("picks are in range"));
        });
    }

    /// SINTER: intersects the sets at `keys` (whose sizes are `lens`, None for an absent key), starting
    /// from a copy of the smallest and filtering it by the others. Nothing is copied when a set is absent.
    pub fn intersection(
        source: &mut impl SetSource,
        keys: &[&[u8]],
        lens: &[Option<usize>],
    ) -> SetValue {
        if lens.iter().any(Option::is_none) {
            return SetValue::default();
        }
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_by_key(|&position| lens[position]);
        let mut result = source.with_set(keys[order[0]], |set| set.cloned().unwrap_or_default());
        for &position in &order[1..] {
            if result.is_empty() {
                break;
            }
            source.with_set(keys[position], |other| {
                result.remove_where(|member| !other.is_some_and(|other| other.contains(member)))
            });
        }
        result
    }

    /// SUNION: every member of the sets at `keys` (an absent key is an empty set).
    pub fn union(source: &mut impl SetSource, keys: &[&[u8]]) -> SetValue {
        let mut union = SetValue::default();
        for key in keys {
            source.with_set(key, |set| {
                for member in set.into_iter().flat_map(SetValue::iter) {
                    union.insert(member);
                }
            });
        }
        union
    }

    /// SDIFF: the first set less the others (an absent key is an empty set).
    pub fn difference(source: &mut impl SetSource, keys: &[&[u8]]) -> SetValue {
        let mut result = source.with_set(keys[0], |set| set.cloned().unwrap_or_default());
        for key in &keys[1..] {
            if result.is_empty() {
                break;
            }
            source.with_set(key, |other| {
                if let Some(other) = other {
                    result.remove_where(|member| other.contains(member));
                }
            });
        }
        result
    }
}

// ----- codec ------------------------------------------------------------------------------------------
//
// Layout (version 1; varints are LEB128, see codec.rs):
//   u8 version = 1
//   varint count
//   count x { varint member_len, member bytes }
// Members in index order (the order SPOP, SRANDMEMBER and SSCAN address), so a decoded set has the
// same positions. A member that appears twice is an error.

const CODEC_VERSION: u8 = 1;

impl SetValue {
    /// Appends the set's encoding (layout above).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(CODEC_VERSION);
        put_len(out, self.len());
        for member in self.iter() {
            put_bytes(out, member);
        }
    }

    /// Decodes what `encode` wrote; all of `bytes` must be that one set.
    pub fn decode(bytes: &[u8]) -> Result<SetValue, DecodeError> {
        let mut reader = Reader::new(bytes);
        reader.version(Kind::Set, CODEC_VERSION)?;
        // a member takes at least its length byte
        let count = reader.count("set members", 1)?;
        let mut set = SetValue {
            members: Members::with_capacity_and_hasher(count, Default::default()),
            bytes: 0,
        };
        for _ in 0..count {
            if !set.insert(reader.bytes()?) {
                return Err(DecodeError::Duplicate("set member"));
            }
        }
        reader.finish()?;
        Ok(set)
    }
}

/// Where set algebra reads its sources: the command's locked shards, or a plain map in tests. A source
/// lends one set at a time, since a command can borrow only one shard at a time.
pub trait SetSource {
    /// Runs `visit` on the set at `key` (None when absent), borrowing it only for the call.
    fn with_set<R>(&mut self, key: &[u8], visit: impl FnOnce(Option<&SetValue>) -> R) -> R;
}

#[cfg(test)]
mod tests {
    use super::*;
    use fallow_txn::types::set::{Set, SetOp, SetOutput};
    use fallow_txn::Adt;
    use proptest::prelude::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;
    use std::collections::BTreeSet;

    fn set_of(members: &[&str]) -> SetValue {
        let mut set = SetValue::default();
        for member in members {
            set.insert(member.as_bytes());
        }
        set
    }

    fn sorted(set: &SetValue) -> Vec<String> {
        let mut members: Vec<String> = set
            .iter()
            .map(|member| String::from_utf8_lossy(member).into_owned())
            .collect();
        members.sort();
        members
    }

    #[test]
    fn pops_are_distinct_and_bounded() {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut set = set_of(&["a", "b", "c", "d", "e"]);
        let bytes_full = set.memory_bytes();
        let mut popped = set.pop_randoms(3, &mut rng);
        assert_eq!(set.len(), 2);
        popped.sort();
        popped.dedup();
        assert_eq!(popped.len(), 3);
        assert!(popped.iter().all(|member| !set.contains(member)));
        assert!(set.memory_bytes() < bytes_full);
        assert_eq!(set.pop_randoms(10, &mut rng).len(), 2);
        assert!(set.is_empty());
        assert_eq!(set.pop_random(&mut rng), None);
    }

    /// Sets by key, recording which keys were read.
    struct MapSource {
        sets: Vec<(&'static [u8], SetValue)>,
        reads: Vec<&'static [u8]>,
    }

    impl SetSource for MapSource {
        fn with_set<R>(&mut self, key: &[u8], visit: impl FnOnce(Option<&SetValue>) -> R) -> R {
            let found = self.sets.iter().find(|(name, _)| *name == key);
            if let Some((name, _)) = found {
                self.reads.push(name);
            }
            visit(found.map(|(_, set)| set))
        }
    }

    fn source() -> MapSource {
        MapSource {
            sets: vec![
                (b"a", set_of(&["1", "2", "3", "4"])),
                (b"b", set_of(&["3", "4", "5"])),
                (b"c", set_of(&["4", "6"])),
            ],
            reads: Vec::new(),
        }
    }

    #[test]
    fn intersection_starts_from_the_smallest() {
        let mut sets = source();
        let keys: [&[u8]; 3] = [b"a", b"b", b"c"];
        let lens = [Some(4), Some(3), Some(2)];
        assert_eq!(
            sorted(&SetValue::intersection(&mut sets, &keys, &lens)),
            ["4"]
        );
        assert_eq!(sets.reads[0], b"c");
        let mut sets = source();
        let with_absent = [Some(4), None, Some(2)];
        assert!(SetValue::intersection(&mut sets, &keys, &with_absent).is_empty());
        assert!(sets.reads.is_empty(), "nothing copied when a set is absent");
    }

    #[test]
    fn union_and_difference() {
        let mut sets = source();
        let keys: [&[u8]; 4] = [b"a", b"b", b"c", b"missing"];
        assert_eq!(
            sorted(&SetValue::union(&mut sets, &keys)),
            ["1", "2", "3", "4", "5", "6"]
        );
        assert_eq!(sorted(&SetValue::difference(&mut sets, &keys)), ["1", "2"]);
        assert!(SetValue::difference(&mut sets, &[b"missing", b"a"]).is_empty());
        assert!(SetValue::difference(&mut sets, &[b"a", b"a"]).is_empty());
    }

    #[test]
    fn subtract_removes_only_doomed_members() {
        let mut set = set_of(&["1", "2", "3"]);
        set.remove_where(|member| member == b"2");
        assert_eq!(sorted(&set), ["1", "3"]);
        let empty_bytes = SetValue::default().memory_bytes();
        set.remove_where(|_| true);
        set.shrink_to_fit();
        assert_eq!(set.memory_bytes(), empty_bytes);
    }

    #[test]
    fn random_members_follow_the_count() {
        let mut rng = SmallRng::seed_from_u64(9);
        let set = set_of(&["x", "y"]);
        let mut seen = Vec::new();
        set.random_members(3, &mut rng, |member| seen.push(member.to_vec()));
        assert_eq!(seen, [b"x".to_vec(), b"y".to_vec()]);
        assert_eq!(set.random_count(-4), 4);
        assert!(set.random_member(&mut rng).is_some());
        assert!(SetValue::default().random_member(&mut rng).is_none());
    }

    // ----- agreement with fallow_txn::types::set -----------------------------------------------------

    type Op = SetOp<Vec<u8>>;

    fn member() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(b'a'..=b'd', 0..3)
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        let op = prop_oneof![
            3 => member().prop_map(SetOp::Add),
            2 => member().prop_map(SetOp::Remove),
            1 => Just(SetOp::Size),
            1 => member().prop_map(SetOp::Contains),
        ];
        prop::collection::vec(op, 0..40)
    }

    /// The spec's operation through the store's methods (SADD and SREM of one member), its output in
    /// the spec's terms.
    fn apply(set: &mut SetValue, op: &Op) -> SetOutput {
        match op {
            SetOp::Add(member) => {
                set.insert_all([&member[..]]);
                SetOutput::Done
            }
            SetOp::Remove(member) => {
                set.remove_all([&member[..]]);
                SetOutput::Done
            }
            SetOp::Size => SetOutput::Size(set.len()),
            SetOp::Contains(member) => SetOutput::Contains(set.contains(member)),
        }
    }

    fn state(set: &SetValue) -> BTreeSet<Vec<u8>> {
        set.iter().map(<[u8]>::to_vec).collect()
    }

    /// Sets named 0, 1, 2, ... for the algebra.
    struct Numbered(Vec<Option<SetValue>>);

    impl SetSource for Numbered {
        fn with_set<R>(&mut self, key: &[u8], visit: impl FnOnce(Option<&SetValue>) -> R) -> R {
            visit(self.0[usize::from(key[0])].as_ref())
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn agrees_with_the_specification(ops in ops()) {
            let mut set = SetValue::default();
            let mut spec = BTreeSet::new();
            for op in &ops {
                let output = apply(&mut set, op);
                prop_assert_eq!(output, Set::apply(&mut spec, op), "{:?}", op);
            }
            prop_assert_eq!(state(&set), spec.clone());
            let bytes: usize = spec.iter().map(|member| member_bytes(member)).sum();
            prop_assert_eq!(set.bytes, bytes);
        }

        /// SINTER/SUNION/SDIFF over sets built by the spec's ops agree with the spec states' algebra.
        #[test]
        fn algebra_agrees_with_the_specification_states(
            histories in prop::collection::vec(prop::option::weighted(0.8, ops()), 1..4),
            seed in any::<u64>(),
        ) {
            let mut sets = Vec::new();
            let mut specs = Vec::new();
            for history in &histories {
                let (mut set, mut spec) = (SetValue::default(), BTreeSet::new());
                for op in history.iter().flatten() {
                    apply(&mut set, op);
                    Set::apply(&mut spec, op);
                }
                sets.push(history.as_ref().map(|_| set));
                specs.push(history.as_ref().map(|_| spec));
            }
            let names: Vec<[u8; 1]> = (0..sets.len() as u8).map(|index| [index]).collect();
            let keys: Vec<&[u8]> = names.iter().map(|name| &name[..]).collect();
            let lens: Vec<Option<usize>> = sets.iter().map(|set| set.as_ref().map(SetValue::len)).collect();
            let mut source = Numbered(sets);
            let empty = BTreeSet::new();
            let spec_at = |index: usize| specs[index].as_ref().unwrap_or(&empty);
            let inter = (1..specs.len()).fold(spec_at(0).clone(), |acc, index| {
                acc.intersection(spec_at(index)).cloned().collect()
            });
            let union = (0..specs.len()).fold(BTreeSet::new(), |acc, index| {
                acc.union(spec_at(index)).cloned().collect()
            });
            let diff = (1..specs.len()).fold(spec_at(0).clone(), |acc, index| {
                acc.difference(spec_at(index)).cloned().collect()
            });
            prop_assert_eq!(state(&SetValue::intersection(&mut source, &keys, &lens)), inter);
            prop_assert_eq!(state(&SetValue::union(&mut source, &keys)), union.clone());
            prop_assert_eq!(state(&SetValue::difference(&mut source, &keys)), diff);
            // Random pops take distinct members of the set and leave the rest.
            let mut all = SetValue::union(&mut source, &keys);
            let mut rng = SmallRng::seed_from_u64(seed);
            let popped: BTreeSet<Vec<u8>> =
                all.pop_randoms(2, &mut rng).iter().map(|member| member.to_vec()).collect();
            prop_assert_eq!(popped.len(), union.len().min(2));
            prop_assert!(popped.is_subset(&union));
            prop_assert_eq!(state(&all), union.difference(&popped).cloned().collect::<BTreeSet<_>>());
        }
    }

    // ----- codec ------------------------------------------------------------------------------------

    use crate::types::codec::testing::{
        canonical_or_rejected, mutated, rejects_every_prefix, versioned,
    };

    fn encoded(set: &SetValue) -> Vec<u8> {
        let mut out = Vec::new();
        set.encode(&mut out);
        out
    }

    fn members(set: &SetValue) -> Vec<Vec<u8>> {
        set.iter().map(<[u8]>::to_vec).collect()
    }

    /// A set built by SADD and SREM (removals reorder the positions), some members past 127 bytes.
    fn built() -> impl Strategy<Value = SetValue> {
        let long = prop::collection::vec(any::<u8>(), 120..300);
        let member = prop_oneof![8 => member(), 1 => long];
        prop::collection::vec((any::<bool>(), member), 0..40).prop_map(|edits| {
            let mut set = SetValue::default();
            for (add, member) in edits {
                if add {
                    set.insert(&member);
                } else {
                    set.remove(&member);
                }
            }
            set
        })
    }

    #[test]
    fn the_layout_is_pinned() {
        let set = set_of(&["ab", ""]);
        assert_eq!(encoded(&set), [1, 2, 2, b'a', b'b', 0]);
        assert_eq!(encoded(&SetValue::default()), [1, 0]);
    }

    #[test]
    fn corrupt_sets_are_rejected() {
        let decode = |bytes: &[u8]| SetValue::decode(bytes).map(|_| ());
        assert_eq!(
            decode(&[1, 2, 1, b'x', 1, b'x']),
            Err(DecodeError::Duplicate("set member"))
        );
        assert_eq!(decode(&[1, 1, 0, 7]), Err(DecodeError::TrailingBytes(1)));
        assert!(matches!(
            decode(&[1, 0x80, 0x80, 0x04]),
            Err(DecodeError::BadLength { len: 65536, .. })
        ));
        assert!(matches!(decode(&[0]), Err(DecodeError::BadVersion { .. })));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// decode(encode(s)) holds the same members at the same positions, accounts the same bytes,
        /// and behaves the same: the same random picks and pops, and the same results of further edits.
        #[test]
        fn encoding_round_trips(set in built(), later in built(), seed in any::<u64>()) {
            let bytes = encoded(&set);
            let mut decoded = SetValue::decode(&bytes).expect("an encoding decodes");
            let mut set = set;
            prop_assert_eq!(members(&decoded), members(&set));
            prop_assert_eq!(decoded.bytes, set.bytes);
            let expected: usize = set.iter().map(member_bytes).sum();
            prop_assert_eq!(decoded.bytes, expected);
            prop_assert!(decoded.memory_bytes() >= decoded.bytes + decoded.len() * 8);
            prop_assert_eq!(encoded(&decoded), bytes.clone());
            let picks = |set: &mut SetValue| {
                let mut rng = SmallRng::seed_from_u64(seed);
                let mut seen = Vec::new();
                set.random_members(-5, &mut rng, |member| seen.push(member.to_vec()));
                seen.extend(set.pop_randoms(2, &mut rng).into_iter().map(Vec::from));
                seen
            };
            prop_assert_eq!(picks(&mut decoded), picks(&mut set));
            for member in later.iter() {
                prop_assert_eq!(decoded.insert(member), set.insert(member));
                let shorter = member.get(1..).unwrap_or_default();
                prop_assert_eq!(decoded.remove(shorter), set.remove(shorter));
            }
            prop_assert_eq!(members(&decoded), members(&set));
            rejects_every_prefix(&bytes, SetValue::decode)?;
        }

        #[test]
        fn garbage_never_panics(
            set in built(),
            (position, byte) in (any::<usize>(), any::<u8>()),
            tail in prop::collection::vec(any::<u8>(), 0..40),
        ) {
            let (decode, encode) = (SetValue::decode, SetValue::encode);
            canonical_or_rejected(&mutated(&encoded(&set), position, byte), decode, encode)?;
            canonical_or_rejected(&versioned(CODEC_VERSION, &tail), decode, encode)?;
            canonical_or_rejected(&tail, decode, encode)?;
        }
    }
}
