//! The hash's (Dict's) specification holds and is exact (`check_spec`) over random states and operations on
//! three fields and small values, so equal fields, equal values and increments of 0 come up often; writes to
//! different fields share the lock, writes to one field do not.
use fallow_txn::types::dict::{field_write, Dict, DictOp};
use fallow_txn::{check_spec, Adt};
use proptest::prelude::*;
use std::collections::BTreeMap;

type D = Dict<u8>;

fn field() -> impl Strategy<Value = u8> {
    0u8..3
}

fn op() -> impl Strategy<Value = DictOp<u8>> {
    prop_oneof![
        (field(), -1i64..2).prop_map(|(f, v)| DictOp::Set(f, v)),
        field().prop_map(DictOp::Del),
        (field(), -1i64..2).prop_map(|(f, n)| DictOp::Incr(f, n)),
        field().prop_map(DictOp::Get),
        field().prop_map(DictOp::Exists),
        Just(DictOp::Len),
        Just(DictOp::GetAll),
    ]
}

fn state() -> impl Strategy<Value = BTreeMap<u8, i128>> {
    proptest::collection::btree_map(field(), -1i128..2, 0..3)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8192))]

    #[test]
    fn the_specification_holds_and_is_exact(state in state(), a in op(), b in op()) {
        check_spec::<D>(&state, &a, &b, true).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn writes_to_different_fields_share_the_lock() {
    let (a, b) = (DictOp::Set(1u8, 5), DictOp::Incr(2u8, 1));
    assert!(D::mode(&a).compatible(D::mode(&b)));
    assert!(D::commutes(&a, &b, &BTreeMap::new()));
    let same_field = DictOp::Del(1u8);
    assert!(!D::mode(&a).compatible(D::mode(&same_field)));
    assert_eq!(D::mode(&a), field_write(&1u8));
    assert!(!D::mode(&a).compatible(D::mode(&DictOp::Len)));
}
