//! The counter's and the summary bag's specifications hold and are exact (`check_spec`) over random states
//! and operations drawn from small domains, so that the state-dependent rows (an increment of 0, an add equal
//! to the mean or the extremes) come up often.
use fallow_txn::check_spec;
use fallow_txn::types::counter::{Counter, CounterOp};
use fallow_txn::types::summary_bag::{BagOp, Summary, SummaryBag};
use fallow_txn::Adt;
use proptest::prelude::*;

fn counter_op() -> impl Strategy<Value = CounterOp> {
    prop_oneof![
        (-2i64..3).prop_map(CounterOp::Incr),
        Just(CounterOp::Get),
        (-2i64..3).prop_map(CounterOp::Set),
    ]
}

fn bag_op() -> impl Strategy<Value = BagOp> {
    prop_oneof![
        3 => (-3i64..4).prop_map(BagOp::Add),
        1 => Just(BagOp::Count),
        1 => Just(BagOp::Min),
        1 => Just(BagOp::Max),
        1 => Just(BagOp::Mean),
    ]
}

/// A bag built by adding 0-5 items, so its summary is one a bag can have.
fn bag() -> impl Strategy<Value = Summary> {
    proptest::collection::vec(-3i64..4, 0..6).prop_map(|items| {
        let mut bag = Summary::default();
        for x in items {
            SummaryBag::apply(&mut bag, &BagOp::Add(x));
        }
        bag
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn counter_specification_holds_and_is_exact(value in -2i128..3, a in counter_op(), b in counter_op()) {
        check_spec::<Counter>(&value, &a, &b, true).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn summary_bag_specification_holds_and_is_exact(bag in bag(), a in bag_op(), b in bag_op()) {
        check_spec::<SummaryBag>(&bag, &a, &b, true).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn state_dependent_rows() {
    let bag = {
        let mut bag = Summary::default();
        for x in [1, 3] {
            SummaryBag::apply(&mut bag, &BagOp::Add(x));
        }
        bag
    };
    assert!(SummaryBag::commutes(&BagOp::Add(2), &BagOp::Mean, &bag));
    assert!(!SummaryBag::commutes(&BagOp::Add(3), &BagOp::Mean, &bag));
    assert!(SummaryBag::commutes(&BagOp::Add(3), &BagOp::Max, &bag));
    assert!(!SummaryBag::commutes(&BagOp::Add(4), &BagOp::Max, &bag));
    assert!(!SummaryBag::commutes(
        &BagOp::Add(1),
        &BagOp::Min,
        &Summary::default()
    ));
    assert!(Counter::commutes(
        &CounterOp::Incr(5),
        &CounterOp::Incr(-7),
        &0
    ));
    assert!(!Counter::commutes(&CounterOp::Incr(1), &CounterOp::Get, &0));
    assert!(Counter::commutes(&CounterOp::Set(4), &CounterOp::Get, &4));
}
