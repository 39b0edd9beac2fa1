//! Set (Redis SADD/SREM/SCARD/SISMEMBER inside transactions), with Claret's commutativity specification
//! (Table 2) exactly. `add` and `remove` return nothing, as in Claret: a reply saying whether the element was
//! new would make two adds of the same element observe their order.
//!
//! | method | and | commute when |
//! |---|---|---|
//! | add(x) | add(y) | always |
//! | remove(x) | remove(y) | always |
//! | remove(x) | add(y) | x ≠ y |
//! | size() | add(x) | x ∈ set |
//! | size() | remove(x) | x ∉ set |
//! | contains(x) | add(y) | x ≠ y ∨ y ∈ set |
//! | contains(x) | remove(y) | x ≠ y ∨ y ∉ set |
//! | contains(x), size() | contains(y), size() | always (reads) |
//!
//! Lock modes: `add` (all adds share), `remove` (all removes share), `read` (size, contains). The
//! state-dependent rows (size with an add of a present element, ...) are finer than the modes: the lock
//! table may consult `commutes` to admit such an operation into another mode's phase.
use crate::adt::{Access, Adt, Mode};
use std::collections::BTreeSet;
use std::fmt::Debug;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetOp<T> {
    Add(T),
    Remove(T),
    Size,
    Contains(T),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetOutput {
    Done,
    Size(usize),
    Contains(bool),
}

/// The set ADT over elements of type `T`.
pub struct Set<T>(std::marker::PhantomData<T>);

pub const ADD: Mode = Mode::shared("set.add");
pub const REMOVE: Mode = Mode::shared("set.remove");
pub const READ: Mode = Mode::shared("read");

impl<T: Ord + Clone + Debug> Adt for Set<T> {
    type State = BTreeSet<T>;
    type Op = SetOp<T>;
    type Output = SetOutput;

    const NAME: &'static str = "set";

    fn apply(state: &mut Self::State, op: &Self::Op) -> Self::Output {
        match op {
            SetOp::Add(x) => {
                state.insert(x.clone());
                SetOutput::Done
            }
            SetOp::Remove(x) => {
                state.remove(x);
                SetOutput::Done
            }
            SetOp::Size => SetOutput::Size(state.len()),
            SetOp::Contains(x) => SetOutput::Contains(state.contains(x)),
        }
    }

    fn access(op: &Self::Op) -> Access {
        match op {
            SetOp::Add(_) | SetOp::Remove(_) => Access::Mutate,
            SetOp::Size | SetOp::Contains(_) => Access::Read,
        }
    }

    fn mode(op: &Self::Op) -> Mode {
        match op {
            SetOp::Add(_) => ADD,
            SetOp::Remove(_) => REMOVE,
            SetOp::Size | SetOp::Contains(_) => READ,
        }
    }

    fn commutes(a: &Self::Op, b: &Self::Op, state: &Self::State) -> bool {
        use SetOp::*;
        match (a, b) {
            (Add(_), Add(_)) | (Remove(_), Remove(_)) => true,
            (Remove(x), Add(y)) | (Add(y), Remove(x)) => x != y,
            (Size, Add(x)) | (Add(x), Size) => state.contains(x),
            (Size, Remove(x)) | (Remove(x), Size) => !state.contains(x),
            (Contains(x), Add(y)) | (Add(y), Contains(x)) => x != y || state.contains(y),
            (Contains(x), Remove(y)) | (Remove(y), Contains(x)) => x != y || !state.contains(y),
            (Size | Contains(_), Size | Contains(_)) => true,
        }
    }

    /// Adds and removes commit together without a reply to share; concurrent `size`s share one reading,
    /// `contains` of the same element too.
    fn combinable(_op: &Self::Op) -> bool {
        true
    }
}
