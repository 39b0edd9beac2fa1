//! TopK's specification holds and is exact over random k (0-3), states reached by adds, and operations on
//! four members with close scores (so ties, equal members and full sets come up often); two `next()`s of a
//! UIdGenerator hand out the same ids in either order, and its ids are unique.
use fallow_txn::types::topk::{TopK, TopKOp, TopKState};
use fallow_txn::types::uid::{UIdGenerator, UIdOp};
use fallow_txn::{check_spec, Adt};
use proptest::prelude::*;

type T = TopK<u8>;

fn op() -> impl Strategy<Value = TopKOp<u8>> {
    prop_oneof![
        3 => (0u8..4, 0i64..4).prop_map(|(m, s)| TopKOp::Add(m, s)),
        1 => Just(TopKOp::Top),
        1 => Just(TopKOp::Max),
        1 => Just(TopKOp::Count),
    ]
}

/// A TopK built by adds, so its state is one a TopK can have.
fn state() -> impl Strategy<Value = TopKState<u8>> {
    (
        0usize..4,
        proptest::collection::vec((0u8..4, 0i64..4), 0..6),
    )
        .prop_map(|(k, adds)| {
            let mut state = TopKState {
                k,
                ..TopKState::default()
            };
            for (m, s) in adds {
                T::apply(&mut state, &TopKOp::Add(m, s));
            }
            state
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8192))]

    #[test]
    fn topk_specification_holds_and_is_exact(state in state(), a in op(), b in op()) {
        check_spec::<T>(&state, &a, &b, true).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn topk_keeps_the_k_best_of_each_members_highest_score(k in 0usize..4,
            adds in proptest::collection::vec((0u8..6, 0i64..5), 0..12)) {
        let mut state = TopKState { k, ..TopKState::default() };
        let mut highest = std::collections::BTreeMap::new();
        for &(m, s) in &adds {
            T::apply(&mut state, &TopKOp::Add(m, s));
            let best = highest.entry(m).or_insert(s);
            *best = (*best).max(s);
        }
        let all = TopKState { k: usize::MAX, scores: highest };
        let want: Vec<(u8, i64)> = all.ranked().into_iter().take(k).collect();
        prop_assert_eq!(state.ranked(), want);
    }

    #[test]
    fn two_nexts_commute_and_ids_are_unique(next in 0u64..1000, count in 1usize..50) {
        check_spec::<UIdGenerator>(&next, &UIdOp::Next, &UIdOp::Next, false).map_err(TestCaseError::fail)?;
        let mut state = next;
        let ids: std::collections::BTreeSet<u64> =
            (0..count).map(|_| UIdGenerator::apply(&mut state, &UIdOp::Next)).collect();
        prop_assert_eq!(ids.len(), count);
    }
}
