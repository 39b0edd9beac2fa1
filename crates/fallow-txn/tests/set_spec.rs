//! The set's commutativity specification (Claret Table 2) is right and exact: over random states and
//! operations on a small element domain (so equal elements are common), every pair declared commuting gives
//! the same results and final state in both orders, every pair declared not commuting differs in some way,
//! the declaration is symmetric, and operations sharing a lock mode always commute (`check_spec`).
use fallow_txn::types::set::{Set, SetOp, SetOutput};
use fallow_txn::{check_spec, rw_mode, Access, Adt};
use proptest::prelude::*;
use std::collections::BTreeSet;

type S = Set<u8>;

fn element() -> impl Strategy<Value = u8> {
    0u8..6
}

fn op() -> impl Strategy<Value = SetOp<u8>> {
    prop_oneof![
        element().prop_map(SetOp::Add),
        element().prop_map(SetOp::Remove),
        Just(SetOp::Size),
        element().prop_map(SetOp::Contains),
    ]
}

fn state() -> impl Strategy<Value = BTreeSet<u8>> {
    proptest::collection::btree_set(element(), 0..6)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn the_specification_holds_and_is_exact(state in state(), a in op(), b in op()) {
        check_spec::<S>(&state, &a, &b, true).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn table_2_rows() {
    let with_1: BTreeSet<u8> = [1].into();
    let empty = BTreeSet::new();
    use SetOp::*;
    // size() with add(x): commutes only when x is already there
    assert!(S::commutes(&Size, &Add(1), &with_1));
    assert!(!S::commutes(&Size, &Add(1), &empty));
    // size() with remove(x): only when x is absent
    assert!(S::commutes(&Size, &Remove(1), &empty));
    assert!(!S::commutes(&Size, &Remove(1), &with_1));
    // remove(x) with add(y): x != y
    assert!(S::commutes(&Remove(1), &Add(2), &empty));
    assert!(!S::commutes(&Remove(1), &Add(1), &empty));
    // contains(x) with add(y) / remove(y)
    assert!(S::commutes(&Contains(1), &Add(1), &with_1));
    assert!(!S::commutes(&Contains(1), &Add(1), &empty));
    assert!(S::commutes(&Contains(1), &Remove(1), &empty));
    assert!(!S::commutes(&Contains(1), &Remove(1), &with_1));
    assert!(S::commutes(&Contains(1), &Remove(2), &with_1));
}

#[test]
fn sequential_semantics_and_declarations() {
    let mut state = BTreeSet::new();
    assert_eq!(S::apply(&mut state, &SetOp::Add(3)), SetOutput::Done);
    assert_eq!(S::apply(&mut state, &SetOp::Add(3)), SetOutput::Done);
    assert_eq!(S::apply(&mut state, &SetOp::Size), SetOutput::Size(1));
    assert_eq!(
        S::apply(&mut state, &SetOp::Contains(3)),
        SetOutput::Contains(true)
    );
    assert_eq!(S::apply(&mut state, &SetOp::Remove(3)), SetOutput::Done);
    assert_eq!(S::apply(&mut state, &SetOp::Size), SetOutput::Size(0));
    // boosting: adds share a lock; the reader/writer baseline gives them an exclusive one
    assert!(S::mode(&SetOp::Add(1)).compatible(S::mode(&SetOp::Add(2))));
    assert!(!S::mode(&SetOp::Add(1)).compatible(S::mode(&SetOp::Size)));
    assert_eq!(S::access(&SetOp::Add(1)), Access::Mutate);
    let write = rw_mode(S::access(&SetOp::Add(1)));
    assert!(!write.compatible(write));
    let read = rw_mode(S::access(&SetOp::Size));
    assert!(read.compatible(read));
}
