//! Summary bag: integers go in, only their count, sum, min, max and mean come out (the semantics of
//! `fallow_txn::types::summary_bag`). The items themselves are not kept, so a bag has a fixed size.
use super::codec::{put_varint, Reader};
use super::{DecodeError, Kind};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BagValue {
    count: u64,
    /// The exact sum as i128 bytes: at most 2^64 items of magnitude at most 2^63 stay below 2^127. Bytes,
    /// not an i128, so the bag keeps 8-byte alignment and does not grow every collection slot to 16.
    sum_bytes: [u8; 16],
    /// Meaningful only when count > 0.
    min: i64,
    max: i64,
}

impl BagValue {
    /// Adds one item; returns the count after.
    pub fn add(&mut self, item: i64) -> u64 {
        let first = self.count == 0;
        self.count += 1;
        self.sum_bytes = (self.sum() + i128::from(item)).to_ne_bytes();
        self.min = if first { item } else { self.min.min(item) };
        self.max = if first { item } else { self.max.max(item) };
        self.count
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn sum(&self) -> i128 {
        i128::from_ne_bytes(self.sum_bytes)
    }

    pub fn min(&self) -> Option<i64> {
        (self.count > 0).then_some(self.min)
    }

    pub fn max(&self) -> Option<i64> {
        (self.count > 0).then_some(self.max)
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum() as f64 / self.count as f64)
    }

    /// No heap: the summary lives in the collection slot itself.
    pub fn memory_bytes(&self) -> usize {
        0
    }
}

// ----- codec ------------------------------------------------------------------------------------------
//
// Layout (version 1; varints are LEB128, see codec.rs):
//   u8 version = 1
//   varint count
//   when count > 0: i128 sum, i64 min, i64 max, each little-endian
// An empty bag is just its version and a zero count. A decoder checks that the summary is one some items
// give: a single item is its own sum, min and max; with more, min <= max and the sum lies between
// min + max + (count - 2) * min and min + max + (count - 2) * max.

const CODEC_VERSION: u8 = 1;

impl BagValue {
    /// Appends the bag's encoding (layout above).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(CODEC_VERSION);
        put_varint(out, self.count);
        if self.count > 0 {
            out.extend_from_slice(&self.sum().to_le_bytes());
            out.extend_from_slice(&self.min.to_le_bytes());
            out.extend_from_slice(&self.max.to_le_bytes());
        }
    }

    /// Decodes what `encode` wrote; all of `bytes` must be that one bag.
    pub fn decode(bytes: &[u8]) -> Result<BagValue, DecodeError> {
        let mut reader = Reader::new(bytes);
        reader.version(Kind::Bag, CODEC_VERSION)?;
        let count = reader.varint()?;
        let bag = if count == 0 {
            BagValue::default()
        } else {
            let (sum, min, max) = (reader.i128()?, reader.i64()?, reader.i64()?);
            if !summary_is_possible(count, sum, min, max) {
                return Err(DecodeError::Invalid("bag summary"));
            }
            BagValue {
                count,
                sum_bytes: sum.to_ne_bytes(),
                min,
                max,
            }
        };
        reader.finish()?;
        Ok(bag)
    }
}

/// Whether `count` (> 0) items can have this sum, min and max.
fn summary_is_possible(count: u64, sum: i128, min: i64, max: i64) -> bool {
    if count == 1 {
        return min == max && sum == i128::from(min);
    }
    let (min, max) = (i128::from(min), i128::from(max));
    // Below 2^64 * 2^63 + 2^64 in magnitude: no overflow, but checked all the same.
    let others = i128::from(count - 2);
    let lowest = others
        .checked_mul(min)
        .and_then(|low| low.checked_add(min + max));
    let highest = others
        .checked_mul(max)
        .and_then(|high| high.checked_add(min + max));
    match (lowest, highest) {
        (Some(lowest), Some(highest)) => min <= max && (lowest..=highest).contains(&sum),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fallow_txn::types::summary_bag::{BagOp, BagOutput, Summary, SummaryBag};
    use fallow_txn::Adt;
    use proptest::prelude::*;

    #[test]
    fn extremes_do_not_overflow_the_sum() {
        let mut bag = BagValue::default();
        assert_eq!(bag.mean(), None);
        bag.add(i64::MAX);
        bag.add(i64::MAX);
        bag.add(i64::MIN);
        assert_eq!(bag.sum(), i128::from(i64::MAX) * 2 + i128::from(i64::MIN));
        assert_eq!((bag.min(), bag.max()), (Some(i64::MIN), Some(i64::MAX)));
        assert_eq!(bag.count(), 3);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn agrees_with_the_specification(items in prop::collection::vec(any::<i64>(), 0..40)) {
            let mut bag = BagValue::default();
            let mut spec = Summary::default();
            for &item in &items {
                let count = bag.add(item);
                SummaryBag::apply(&mut spec, &BagOp::Add(item));
                prop_assert_eq!(count, spec.count);
            }
            prop_assert_eq!(bag.sum(), spec.sum);
            prop_assert_eq!(bag.count(), spec.count);
            prop_assert_eq!(bag.min(), spec.min);
            prop_assert_eq!(bag.max(), spec.max);
            prop_assert_eq!(SummaryBag::apply(&mut spec, &BagOp::Mean), BagOutput::Mean(bag.mean()));
        }
    }

    // ----- codec ------------------------------------------------------------------------------------

    use crate::types::codec::testing::{
        canonical_or_rejected, mutated, rejects_every_prefix, versioned,
    };

    fn encoded(bag: &BagValue) -> Vec<u8> {
        let mut out = Vec::new();
        bag.encode(&mut out);
        out
    }

    fn summary(bag: &BagValue) -> (u64, i128, Option<i64>, Option<i64>, Option<u64>) {
        let mean = bag.mean().map(f64::to_bits);
        (bag.count(), bag.sum(), bag.min(), bag.max(), mean)
    }

    fn items() -> impl Strategy<Value = Vec<i64>> {
        let item = prop_oneof![4 => -5i64..5, 1 => any::<i64>()];
        prop::collection::vec(item, 0..40)
    }

    fn built(items: &[i64]) -> BagValue {
        let mut bag = BagValue::default();
        for &item in items {
            bag.add(item);
        }
        bag
    }

    #[test]
    fn the_layout_is_pinned() {
        assert_eq!(encoded(&BagValue::default()), [1, 0]);
        let mut expected = vec![1, 2];
        expected.extend(4i128.to_le_bytes());
        expected.extend(1i64.to_le_bytes());
        expected.extend(3i64.to_le_bytes());
        assert_eq!(encoded(&built(&[3, 1])), expected);
    }

    #[test]
    fn impossible_summaries_are_rejected() {
        let bag = |count: u8, sum: i128, min: i64, max: i64| {
            let mut bytes = vec![1, count];
            bytes.extend(sum.to_le_bytes());
            bytes.extend(min.to_le_bytes());
            bytes.extend(max.to_le_bytes());
            BagValue::decode(&bytes)
        };
        let invalid = Err(DecodeError::Invalid("bag summary"));
        assert_eq!(bag(1, 5, 5, 5), Ok(built(&[5])));
        assert_eq!(bag(1, 4, 5, 5), invalid);
        assert_eq!(bag(2, 5, 3, 2), invalid, "min above max");
        assert_eq!(bag(3, 7, 1, 3), Ok(built(&[1, 3, 3])));
        assert_eq!(bag(3, 8, 1, 3), invalid, "above 1 + 3 + 3");
        assert_eq!(bag(3, 4, 1, 3), invalid, "below 1 + 1 + 3");
        let mut zero_with_fields = vec![1, 0];
        zero_with_fields.extend([0; 32]);
        assert_eq!(
            BagValue::decode(&zero_with_fields),
            Err(DecodeError::TrailingBytes(32))
        );
        let extremes = built(&[i64::MIN, i64::MAX, i64::MAX]);
        assert_eq!(BagValue::decode(&encoded(&extremes)), Ok(extremes));
        let mut huge = vec![1];
        crate::types::codec::put_varint(&mut huge, u64::MAX);
        huge.extend(i128::MIN.to_le_bytes());
        huge.extend(i64::MIN.to_le_bytes());
        huge.extend(i64::MAX.to_le_bytes());
        assert_eq!(BagValue::decode(&huge), invalid);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// decode(encode(b)) is the same bag, with the same summary, and stays the same under more
        /// items.
        #[test]
        fn encoding_round_trips(items in items(), later in items()) {
            let bag = built(&items);
            let bytes = encoded(&bag);
            let mut decoded = BagValue::decode(&bytes).expect("an encoding decodes");
            let mut bag = bag;
            prop_assert_eq!(&decoded, &bag);
            prop_assert_eq!(summary(&decoded), summary(&bag));
            prop_assert_eq!(decoded.memory_bytes(), 0);
            prop_assert_eq!(encoded(&decoded), bytes.clone());
            for &item in &later {
                prop_assert_eq!(decoded.add(item), bag.add(item));
            }
            prop_assert_eq!(summary(&decoded), summary(&bag));
            rejects_every_prefix(&bytes, BagValue::decode)?;
        }

        #[test]
        fn garbage_never_panics(
            items in items(),
            (position, byte) in (any::<usize>(), any::<u8>()),
            tail in prop::collection::vec(any::<u8>(), 0..40),
        ) {
            let (decode, encode) = (BagValue::decode, BagValue::encode);
            canonical_or_rejected(&mutated(&encoded(&built(&items)), position, byte), decode, encode)?;
            canonical_or_rejected(&versioned(CODEC_VERSION, &tail), decode, encode)?;
            canonical_or_rejected(&tail, decode, encode)?;
        }
    }
}
