//! Hash (field → value). An insertion-ordered index map, so HRANDFIELD and HSCAN can address fields by
//! position in O(1). Also the hash semantics of Redis's t_hash that the commands apply (HSETNX, the
//! HINCRBY/HINCRBYFLOAT rules, random fields): plain functions of the value, checked against
//! `fallow_txn::types::dict` by the property test below.
use super::codec::{put_bytes, put_len, Reader};
use super::{element_bytes, pick_count, pick_indexes, DecodeError, Kind};
use indexmap::IndexMap;
use rand::Rng;

type Map = IndexMap<Box<[u8]>, Box<[u8]>, foldhash::fast::RandomState>;

#[derive(Clone, Debug, Default)]
pub struct HashValue {
    map: Map,
    bytes: usize,
}

const ENTRY_OVERHEAD_BYTES: usize = 24;

fn pair_bytes(field: &[u8], value: &[u8]) -> usize {
    element_bytes(field.len()) + element_bytes(value.len()) + ENTRY_OVERHEAD_BYTES
}

impl HashValue {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn memory_bytes(&self) -> usize {
        self.bytes + self.map.capacity() * 8
    }

    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        self.map.get(field).map(|value| &**value)
    }

    /// Sets a field; true when the field is new.
    pub fn insert(&mut self, field: &[u8], value: &[u8]) -> bool {
        self.bytes += pair_bytes(field, value);
        match self.map.insert(field.into(), value.into()) {
            Some(old) => {
                self.bytes -= pair_bytes(field, &old);
                false
            }
            None => true,
        }
    }

    pub fn remove(&mut self, field: &[u8]) -> bool {
        match self.map.swap_remove(field) {
            Some(old) => {
                self.bytes -= pair_bytes(field, &old);
                true
            }
            None => false,
        }
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8])> {
        self.map.iter().map(|(field, value)| (&**field, &**value))
    }

    /// The field and value at `index` (0..len), for random picks and cursors.
    pub fn get_index(&self, index: usize) -> Option<(&[u8], &[u8])> {
        self.map
            .get_index(index)
            .map(|(field, value)| (&**field, &**value))
    }

    /// Sets the field only when it is absent (HSETNX); true when it was set.
    pub fn insert_new(&mut self, field: &[u8], value: &[u8]) -> bool {
        if self.map.contains_key(field) {
            return false;
        }
        self.insert(field, value)
    }

    /// Sets field/value pairs in order (HSET, HMSET); returns how many fields are new.
    pub fn insert_pairs<'a>(
        &mut self,
        pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> usize {
        pairs
            .into_iter()
            .filter(|(field, value)| self.insert(field, value))
            .count()
    }

    /// Removes the fields (HDEL); returns how many were there.
    pub fn remove_all<'a>(&mut self, fields: impl IntoIterator<Item = &'a [u8]>) -> usize {
        fields
            .into_iter()
            .filter(|field| self.remove(field))
            .count()
    }

    /// HINCRBY: adds `delta` to the field's integer value (an absent field counts as 0) and returns the
    /// new value. A value that is not an integer, or a sum past the i64 range, changes nothing.
    pub fn incr_by(&mut self, field: &[u8], delta: i64) -> Result<i64, IncrError> {
        let current = match self.get(field) {
            Some(text) => crate::parse_i64_strict(text).ok_or(IncrError::NotANumber)?,
            None => 0,
        };
        let updated = current.checked_add(delta).ok_or(IncrError::Overflow)?;
        self.insert(field, updated.to_string().as_bytes());
        Ok(updated)
    }

    /// HINCRBYFLOAT: adds `delta` to the field's value read by `parse` (an absent field counts as 0),
    /// stores the sum as `format` writes it and returns that text. A value `parse` refuses, or a sum that
    /// is not finite (NaN or an infinity), changes nothing.
    pub fn incr_by_float(
        &mut self,
        field: &[u8],
        delta: f64,
        parse: impl FnOnce(&[u8]) -> Option<f64>,
        format: impl FnOnce(f64) -> String,
    ) -> Result<String, IncrError> {
        let current = match self.get(field) {
            Some(text) => parse(text).ok_or(IncrError::NotANumber)?,
            None => 0.0,
        };
        let updated = current + delta;
        if !updated.is_finite() {
            return Err(IncrError::Overflow);
        }
        let text = format(updated);
        self.insert(field, text.as_bytes());
        Ok(text)
    }

    /// A uniformly random field and its value (HRANDFIELD without a count).
    pub fn random_field(&self, rng: &mut impl Rng) -> Option<(&[u8], &[u8])> {
        if self.is_empty() {
            return None;
        }
        self.get_index(rng.gen_range(0..self.len()))
    }

    /// How many fields HRANDFIELD's `count` picks (see `pick_count`).
    pub fn random_count(&self, count: i64) -> usize {
        pick_count(self.len(), count)
    }

    /// Calls `visit` with each of HRANDFIELD's picks for `count` (see `pick_indexes`): distinct fields for
    /// a positive count, |count| fields with repeats for a negative one.
    pub fn random_fields(
        &self,
        count: i64,
        rng: &mut impl Rng,
        mut visit: impl FnMut(&[u8], &[u8]),
    ) {
        pick_indexes(self.len(), count, rng, |index| {
            let (field, value) = self.get_index(index).expect("picks are in range");
            visit(field, value);
        });
    }
}

/// Why HINCRBY/HINCRBYFLOAT changed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncrError {
    /// The field holds something that is not a number of the kind asked for.
    NotANumber,
    /// The result is out of range: past i64 for HINCRBY, NaN or infinite for HINCRBYFLOAT.
    Overflow,
}

// ----- codec ------------------------------------------------------------------------------------------
//
// Layout (version 1; varints are LEB128, see codec.rs):
//   u8 version = 1
//   varint count
//   count x { varint field_len, field bytes, varint value_len, value bytes }
// Pairs in index order (the order HRANDFIELD and HSCAN address), so a decoded hash has the same
// positions. A field that appears twice is an error.

const CODEC_VERSION: u8 = 1;

impl HashValue {
    /// Appends the hash's encoding (layout above).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(CODEC_VERSION);
        put_len(out, self.len());
        for (field, value) in self.iter() {
            put_bytes(out, field);
            put_bytes(out, value);
        }
    }

    /// Decodes what `encode` wrote; all of `bytes` must be that one hash.
    pub fn decode(bytes: &[u8]) -> Result<HashValue, DecodeError> {
        let mut reader = Reader::new(bytes);
        reader.version(Kind::Hash, CODEC_VERSION)?;
        // a pair takes at least its two length bytes
        let count = reader.count("hash fields", 2)?;
        let mut hash = HashValue {
            map: Map::with_capacity_and_hasher(count, Default::default()),
            bytes: 0,
        };
        for _ in 0..count {
            let field = reader.bytes()?;
            let value = reader.bytes()?;
            if !hash.insert(field, value) {
                return Err(DecodeError::Duplicate("hash field"));
            }
        }
        reader.finish()?;
        Ok(hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fallow_txn::types::dict::{Dict, DictOp, DictOutput};
    use fallow_txn::Adt;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn increments_follow_redis() {
        let mut hash = HashValue::default();
        assert_eq!(hash.incr_by(b"n", 5), Ok(5));
        assert_eq!(hash.get(b"n"), Some(&b"5"[..]));
        assert_eq!(hash.incr_by(b"n", i64::MAX), Err(IncrError::Overflow));
        assert_eq!(
            hash.get(b"n"),
            Some(&b"5"[..]),
            "an overflow changes nothing"
        );
        hash.insert(b"text", b"abc");
        assert_eq!(hash.incr_by(b"text", 1), Err(IncrError::NotANumber));
        hash.insert(b"padded", b"01");
        assert_eq!(hash.incr_by(b"padded", 1), Err(IncrError::NotANumber));
        let parse = |text: &[u8]| std::str::from_utf8(text).ok()?.parse::<f64>().ok();
        let format = |value: f64| value.to_string();
        assert_eq!(
            hash.incr_by_float(b"f", 1.5, parse, format),
            Ok("1.5".into())
        );
        assert_eq!(
            hash.incr_by_float(b"f", f64::MAX, parse, format),
            Ok(f64::MAX.to_string())
        );
        assert_eq!(
            hash.incr_by_float(b"f", f64::MAX, parse, format),
            Err(IncrError::Overflow)
        );
        assert_eq!(
            hash.incr_by_float(b"text", 1.0, parse, format),
            Err(IncrError::NotANumber)
        );
    }

    #[test]
    fn insert_new_keeps_an_existing_value() {
        let mut hash = HashValue::default();
        assert!(hash.insert_new(b"f", b"1"));
        assert!(!hash.insert_new(b"f", b"2"));
        assert_eq!(hash.get(b"f"), Some(&b"1"[..]));
        let pairs: [(&[u8], &[u8]); 2] = [(b"f", b"3"), (b"g", b"4")];
        assert_eq!(hash.insert_pairs(pairs), 1);
        assert_eq!(hash.remove_all([&b"f"[..], b"x"]), 1);
        assert_eq!(hash.len(), 1);
    }

    #[test]
    fn random_fields_follow_the_count() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
        let mut hash = HashValue::default();
        assert!(hash.random_field(&mut rng).is_none());
        for field in [b"a", b"b", b"c"] {
            hash.insert(field, b"v");
        }
        let mut seen = Vec::new();
        hash.random_fields(5, &mut rng, |field, _| seen.push(field.to_vec()));
        assert_eq!(seen, [b"a", b"b", b"c"].map(|f| f.to_vec()));
        assert_eq!(hash.random_count(-9), 9);
        assert!(hash.random_field(&mut rng).is_some());
    }

    // ----- agreement with fallow_txn::types::dict ----------------------------------------------------

    type Op = DictOp<Vec<u8>>;

    fn field() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(b'a'..=b'd', 0..3)
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        let op = prop_oneof![
            3 => (field(), -50i64..50).prop_map(|(f, v)| DictOp::Set(f, v)),
            2 => field().prop_map(DictOp::Del),
            3 => (field(), -50i64..50).prop_map(|(f, n)| DictOp::Incr(f, n)),
            1 => field().prop_map(DictOp::Get),
            1 => field().prop_map(DictOp::Exists),
            1 => Just(DictOp::Len),
            1 => Just(DictOp::GetAll),
        ];
        prop::collection::vec(op, 0..40)
    }

    fn number(text: &[u8]) -> i128 {
        i128::from(crate::parse_i64_strict(text).expect("the dict holds integers"))
    }

    fn state(hash: &HashValue) -> BTreeMap<Vec<u8>, i128> {
        hash.iter()
            .map(|(field, value)| (field.to_vec(), number(value)))
            .collect()
    }

    /// The spec's operation through the store's methods (values as their decimal text, as HSET and
    /// HINCRBY store them), its output in the spec's terms.
    fn apply(hash: &mut HashValue, op: &Op) -> DictOutput<Vec<u8>> {
        match op {
            DictOp::Set(field, value) => {
                hash.insert(field, value.to_string().as_bytes());
                DictOutput::Done
            }
            DictOp::Del(field) => {
                hash.remove_all([&field[..]]);
                DictOutput::Done
            }
            DictOp::Incr(field, delta) => {
                hash.incr_by(field, *delta)
                    .expect("small values never overflow");
                DictOutput::Done
            }
            DictOp::Get(field) => DictOutput::Value(hash.get(field).map(number)),
            DictOp::Exists(field) => DictOutput::Exists(hash.get(field).is_some()),
            DictOp::Len => DictOutput::Len(hash.len()),
            DictOp::GetAll => DictOutput::All(state(hash)),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn agrees_with_the_specification(ops in ops()) {
            let mut hash = HashValue::default();
            let mut spec = BTreeMap::new();
            for op in &ops {
                let output = apply(&mut hash, op);
                prop_assert_eq!(output, Dict::apply(&mut spec, op), "{:?}", op);
            }
            prop_assert_eq!(state(&hash), spec.clone());
            let bytes: usize = hash.iter().map(|(field, value)| pair_bytes(field, value)).sum();
            prop_assert_eq!(hash.bytes, bytes);
        }
    }

    // ----- codec ------------------------------------------------------------------------------------

    use crate::types::codec::testing::{
        canonical_or_rejected, mutated, rejects_every_prefix, versioned,
    };

    fn encoded(hash: &HashValue) -> Vec<u8> {
        let mut out = Vec::new();
        hash.encode(&mut out);
        out
    }

    fn pairs(hash: &HashValue) -> Vec<(Vec<u8>, Vec<u8>)> {
        hash.iter()
            .map(|(field, value)| (field.to_vec(), value.to_vec()))
            .collect()
    }

    /// Short values mostly, some past 127 bytes (a two-byte length).
    fn bytes_value() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            4 => prop::collection::vec(any::<u8>(), 0..6),
            1 => prop::collection::vec(any::<u8>(), 120..300),
        ]
    }

    /// A hash built by HSET and HDEL (deletes reorder the positions).
    fn built() -> impl Strategy<Value = HashValue> {
        let edit = (any::<bool>(), field(), bytes_value());
        prop::collection::vec(edit, 0..40).prop_map(|edits| {
            let mut hash = HashValue::default();
            for (set, field, value) in edits {
                if set {
                    hash.insert(&field, &value);
                } else {
                    hash.remove(&field);
                }
            }
            hash
        })
    }

    #[test]
    fn the_layout_is_pinned() {
        let mut hash = HashValue::default();
        hash.insert(b"f", b"vv");
        hash.insert(b"", b"");
        assert_eq!(encoded(&hash), [1, 2, 1, b'f', 2, b'v', b'v', 0, 0]);
        assert_eq!(encoded(&HashValue::default()), [1, 0]);
    }

    #[test]
    fn corrupt_hashes_are_rejected() {
        let decode = |bytes: &[u8]| HashValue::decode(bytes).map(|_| ());
        assert_eq!(
            decode(&[1, 2, 1, b'f', 0, 1, b'f', 0]),
            Err(DecodeError::Duplicate("hash field"))
        );
        assert_eq!(decode(&[1, 0, 0]), Err(DecodeError::TrailingBytes(1)));
        assert_eq!(
            decode(&[2, 0]),
            Err(DecodeError::BadVersion {
                kind: Kind::Hash,
                version: 2
            })
        );
        // a count no input of this size can hold is refused before anything is allocated
        assert!(matches!(
            decode(&[1, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0]),
            Err(DecodeError::BadLength { .. })
        ));
        assert_eq!(decode(&[1, 1, 5, b'a']), Err(DecodeError::Truncated));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// decode(encode(h)) holds the same pairs at the same positions, accounts the same bytes, and
        /// behaves the same: the same random picks and the same results of further edits.
        #[test]
        fn encoding_round_trips(hash in built(), later in built(), seed in any::<u64>()) {
            use rand::SeedableRng;
            let bytes = encoded(&hash);
            let mut decoded = HashValue::decode(&bytes).expect("an encoding decodes");
            let mut hash = hash;
            prop_assert_eq!(pairs(&decoded), pairs(&hash));
            prop_assert_eq!(decoded.bytes, hash.bytes);
            let expected: usize = hash.iter().map(|(field, value)| pair_bytes(field, value)).sum();
            prop_assert_eq!(decoded.bytes, expected);
            prop_assert!(decoded.memory_bytes() >= decoded.bytes + decoded.len() * 8);
            prop_assert_eq!(encoded(&decoded), bytes.clone());
            let picks = |hash: &HashValue| {
                let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
                let mut seen = Vec::new();
                hash.random_fields(-5, &mut rng, |field, _| seen.push(field.to_vec()));
                seen.extend(hash.random_field(&mut rng).map(|(field, _)| field.to_vec()));
                seen
            };
            prop_assert_eq!(picks(&decoded), picks(&hash));
            for (field, value) in later.iter() {
                prop_assert_eq!(decoded.insert(field, value), hash.insert(field, value));
                prop_assert_eq!(decoded.remove(value), hash.remove(value));
            }
            prop_assert_eq!(pairs(&decoded), pairs(&hash));
            rejects_every_prefix(&bytes, HashValue::decode)?;
        }

        #[test]
        fn garbage_never_panics(
            hash in built(),
            (position, byte) in (any::<usize>(), any::<u8>()),
            tail in prop::collection::vec(any::<u8>(), 0..40),
        ) {
            let (decode, encode) = (HashValue::decode, HashValue::encode);
            canonical_or_rejected(&mutated(&encoded(&hash), position, byte), decode, encode)?;
            canonical_or_rejected(&versioned(CODEC_VERSION, &tail), decode, encode)?;
            canonical_or_rejected(&tail, decode, encode)?;
        }
    }
}
