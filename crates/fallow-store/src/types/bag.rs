//! Summary bag: integers go in, only their count, sum, min, max and mean come out (the semantics of
//! `fallow_txn::types::summary_bag`). The items themselves are not kept, so a bag has a fixed size.
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
}
