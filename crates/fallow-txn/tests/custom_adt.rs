//! The worked example of docs/transactions.md ("Adding a data type"): a max register, written the way a
//! user adds an ADT, with the property test that proves its specification. The documentation quotes this
//! file, so the example always compiles and passes.
use fallow_txn::lock::{Acquire, LockConfig, LockTable};
use fallow_txn::{check_spec, Access, Adt, Mode};
use proptest::prelude::*;

/// Operations of a max register: `offer(x)` keeps the larger of x and the value; `get()` reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxOp {
    Offer(i64),
    Get,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxOutput {
    Done,
    Value(Option<i64>),
}

pub struct MaxRegister;

/// Every offer shares the lock with every other offer: max is commutative.
pub const OFFER: Mode = Mode::shared("max.offer");
/// All reads of every type share one mode name.
pub const READ: Mode = Mode::shared("read");

impl Adt for MaxRegister {
    type State = Option<i64>;
    type Op = MaxOp;
    type Output = MaxOutput;

    const NAME: &'static str = "max-register";

    fn apply(state: &mut Option<i64>, op: &MaxOp) -> MaxOutput {
        match *op {
            MaxOp::Offer(x) => {
                *state = Some(state.map_or(x, |value| value.max(x)));
                MaxOutput::Done
            }
            MaxOp::Get => MaxOutput::Value(*state),
        }
    }

    fn access(op: &MaxOp) -> Access {
        match op {
            MaxOp::Offer(_) => Access::Mutate,
            MaxOp::Get => Access::Read,
        }
    }

    fn mode(op: &MaxOp) -> Mode {
        match op {
            MaxOp::Offer(_) => OFFER,
            MaxOp::Get => READ,
        }
    }

    /// offer/offer always; get/get always; offer(x)/get when the offer changes nothing (x ≤ value).
    fn commutes(a: &MaxOp, b: &MaxOp, state: &Option<i64>) -> bool {
        match (*a, *b) {
            (MaxOp::Offer(x), MaxOp::Get) | (MaxOp::Get, MaxOp::Offer(x)) => {
                state.is_some_and(|value| x <= value)
            }
            _ => true,
        }
    }

    /// Concurrent offers merge into one offer of their maximum.
    fn combinable(op: &MaxOp) -> bool {
        matches!(op, MaxOp::Offer(_))
    }
}

fn max_op() -> impl Strategy<Value = MaxOp> {
    prop_oneof![(-3i64..4).prop_map(MaxOp::Offer), Just(MaxOp::Get)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Declared-commuting pairs commute, the declaration is symmetric, the modes are sound, and the
    /// specification is exact (it declares every pair whose orders agree).
    #[test]
    fn max_register_specification_holds_and_is_exact(
        state in proptest::option::of(-3i64..4),
        a in max_op(),
        b in max_op(),
    ) {
        check_spec::<MaxRegister>(&state, &a, &b, true).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn offers_share_the_lock_and_a_read_waits_for_them() {
    let now = std::time::Instant::now();
    let mut locks = LockTable::new(LockConfig::default());
    let best_bid = "auction:7:best";
    assert_eq!(locks.acquire(&best_bid, 1, OFFER, now), Acquire::Granted);
    assert_eq!(locks.acquire(&best_bid, 2, OFFER, now), Acquire::Granted);
    assert_eq!(locks.acquire(&best_bid, 3, READ, now), Acquire::Waiting);
    locks.release(&[best_bid], 1, now);
    assert_eq!(locks.release(&[best_bid], 2, now), vec![(best_bid, 3)]);
}
