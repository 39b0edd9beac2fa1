//! The sorted set's and the list's specifications are sound (`check_spec`) over random states and
//! operations on small domains, and exact on every pair the tables do not mark as coarse (ranks and ranges
//! of the sorted set; lpush and lpop against a range of the list).
use fallow_txn::types::list::{List, ListOp};
use fallow_txn::types::scored_set::{ScoredSet, ZOp};
use fallow_txn::{check_spec, Adt};
use proptest::prelude::*;
use std::collections::{BTreeMap, VecDeque};

type Z = ScoredSet<u8>;
type L = List<u8>;

fn zop() -> impl Strategy<Value = ZOp<u8>> {
    let member = 0u8..3;
    prop_oneof![
        (member.clone(), -1i64..2).prop_map(|(m, s)| ZOp::Add(m, s)),
        (member.clone(), -1i64..2).prop_map(|(m, d)| ZOp::Incr(m, d)),
        member.clone().prop_map(ZOp::Rem),
        member.clone().prop_map(ZOp::Score),
        member.prop_map(ZOp::Rank),
        (0usize..3, 0usize..3).prop_map(|(a, b)| ZOp::Range(a.min(b), a.max(b))),
        Just(ZOp::Card),
    ]
}

fn zstate() -> impl Strategy<Value = BTreeMap<u8, i128>> {
    proptest::collection::btree_map(0u8..3, -1i128..2, 0..3)
}

fn coarse_z(op: &ZOp<u8>) -> bool {
    matches!(op, ZOp::Rank(_) | ZOp::Range(..))
}

fn lop() -> impl Strategy<Value = ListOp<u8>> {
    prop_oneof![
        (0u8..2).prop_map(ListOp::PushLeft),
        (0u8..2).prop_map(ListOp::PushRight),
        Just(ListOp::PopLeft),
        Just(ListOp::PopRight),
        Just(ListOp::Len),
        (0usize..4, 0usize..4).prop_map(|(a, b)| ListOp::Range(a.min(b), a.max(b))),
    ]
}

fn lstate() -> impl Strategy<Value = VecDeque<u8>> {
    proptest::collection::vec_deque(0u8..2, 0..4)
}

fn coarse_l(a: &ListOp<u8>, b: &ListOp<u8>) -> bool {
    let left = |op: &ListOp<u8>| matches!(op, ListOp::PushLeft(_) | ListOp::PopLeft);
    let range = |op: &ListOp<u8>| matches!(op, ListOp::Range(..));
    (left(a) && range(b)) || (left(b) && range(a))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8192))]

    #[test]
    fn scored_set_specification_holds(state in zstate(), a in zop(), b in zop()) {
        let exact = !coarse_z(&a) && !coarse_z(&b);
        check_spec::<Z>(&state, &a, &b, exact).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn list_specification_holds(state in lstate(), a in lop(), b in lop()) {
        check_spec::<L>(&state, &a, &b, !coarse_l(&a, &b)).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn increments_share_a_lock_and_pushes_on_different_ends_too() {
    assert!(Z::mode(&ZOp::Incr(1, 2)).compatible(Z::mode(&ZOp::Incr(1, 5))));
    assert!(Z::mode(&ZOp::Add(1, 2)).compatible(Z::mode(&ZOp::Add(2, 5))));
    assert!(!Z::mode(&ZOp::Add(1, 2)).compatible(Z::mode(&ZOp::Add(1, 5))));
    assert!(L::mode(&ListOp::PushLeft(1)).compatible(L::mode(&ListOp::PushRight(2))));
    assert!(!L::mode(&ListOp::PushLeft(1)).compatible(L::mode(&ListOp::PushLeft(1))));
    assert!(!L::mode(&ListOp::PopLeft).compatible(L::mode(&ListOp::PopRight)));
}
