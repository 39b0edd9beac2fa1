//! List (Redis LPUSH/RPUSH/LPOP/RPOP/LLEN/LRANGE inside transactions). Pushes return nothing. Pushes on
//! different ends always commute; pushes on one end commute only when they push equal elements (otherwise
//! their order is visible in the list). Pops return what they take, so they commute only where neither can
//! see the other.
//!
//! | method | and | commute when |
//! |---|---|---|
//! | lpush(x) | lpush(y) | x = y (rpush alike) |
//! | lpush(x) | rpush(y) | always |
//! | lpush(x) | rpop() | list not empty (rpush / lpop alike) |
//! | lpush(x) | lpop() | first element = x (rpush / rpop: last = x) |
//! | lpop() | lpop() | empty, or the first two elements are equal (rpop alike) |
//! | lpop() | rpop() | length ≠ 1 |
//! | push, pop | len() | never / list empty |
//! | rpush(x) | range(i, j) | j < length ∨ i > length (the new element is outside the range) |
//! | rpop() | range(i, j) | list empty ∨ j < length − 1 ∨ i ≥ length |
//! | lpush, lpop | range(i, j) | lpop on an empty list only (an lpush shifts every index: sound, coarse) |
//! | reads | reads | always |
//!
//! Lock modes: lpush and rpush take the per-part mode `push` for their end (different ends share, one end
//! queues), pops take `pop` (exclusive), reads take `read`.
use crate::adt::{Access, Adt, Mode};
use std::collections::VecDeque;
use std::fmt::Debug;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListOp<T> {
    PushLeft(T),
    PushRight(T),
    PopLeft,
    PopRight,
    Len,
    /// Elements start..=stop.
    Range(usize, usize),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListOutput<T> {
    Done,
    Popped(Option<T>),
    Len(usize),
    Range(Vec<T>),
}

pub struct List<T>(std::marker::PhantomData<T>);

pub const PUSH_LEFT: Mode = Mode::part("list.push", 0);
pub const PUSH_RIGHT: Mode = Mode::part("list.push", 1);
pub const POP: Mode = Mode::exclusive("list.pop");
pub const READ: Mode = Mode::shared("read");

impl<T: Clone + Debug + PartialEq> List<T> {
    fn push_commutes(a: &ListOp<T>, b: &ListOp<T>, list: &VecDeque<T>) -> Option<bool> {
        use ListOp::*;
        Some(match (a, b) {
            (PushLeft(x), PushLeft(y)) | (PushRight(x), PushRight(y)) => x == y,
            (PushLeft(_), PushRight(_)) | (PushRight(_), PushLeft(_)) => true,
            (PushLeft(_), PopRight) | (PopRight, PushLeft(_)) => !list.is_empty(),
            (PushRight(_), PopLeft) | (PopLeft, PushRight(_)) => !list.is_empty(),
            (PushLeft(x), PopLeft) | (PopLeft, PushLeft(x)) => list.front() == Some(x),
            (PushRight(x), PopRight) | (PopRight, PushRight(x)) => list.back() == Some(x),
            (PushLeft(_) | PushRight(_), Len) | (Len, PushLeft(_) | PushRight(_)) => false,
            (PushRight(_), Range(start, stop)) | (Range(start, stop), PushRight(_)) => {
                *stop < list.len() || *start > list.len()
            }
            (PushLeft(_), Range(..)) | (Range(..), PushLeft(_)) => false,
            _ => return None,
        })
    }

    fn pop_commutes(a: &ListOp<T>, b: &ListOp<T>, list: &VecDeque<T>) -> bool {
        use ListOp::*;
        let len = list.len();
        match (a, b) {
            (PopLeft, PopLeft) => len == 0 || (len >= 2 && list[0] == list[1]),
            (PopRight, PopRight) => len == 0 || (len >= 2 && list[len - 1] == list[len - 2]),
            (PopLeft, PopRight) | (PopRight, PopLeft) => len != 1,
            (PopLeft | PopRight, Len) | (Len, PopLeft | PopRight) => len == 0,
            (PopRight, Range(start, stop)) | (Range(start, stop), PopRight) => {
                len == 0 || *stop + 1 < len || *start >= len
            }
            (PopLeft, Range(..)) | (Range(..), PopLeft) => len == 0,
            _ => true, // two reads
        }
    }
}

impl<T: Clone + Debug + PartialEq> Adt for List<T> {
    type State = VecDeque<T>;
    type Op = ListOp<T>;
    type Output = ListOutput<T>;

    const NAME: &'static str = "list";

    fn apply(list: &mut Self::State, op: &Self::Op) -> Self::Output {
        match op {
            ListOp::PushLeft(x) => {
                list.push_front(x.clone());
                ListOutput::Done
            }
            ListOp::PushRight(x) => {
                list.push_back(x.clone());
                ListOutput::Done
            }
            ListOp::PopLeft => ListOutput::Popped(list.pop_front()),
            ListOp::PopRight => ListOutput::Popped(list.pop_back()),
            ListOp::Len => ListOutput::Len(list.len()),
            ListOp::Range(start, stop) => ListOutput::Range(
                list.iter()
                    .skip(*start)
                    .take((stop + 1).saturating_sub(*start))
                    .cloned()
                    .collect(),
            ),
        }
    }

    fn access(op: &Self::Op) -> Access {
        match op {
            ListOp::PushLeft(_) | ListOp::PushRight(_) => Access::Mutate,
            ListOp::PopLeft | ListOp::PopRight => Access::ReadMutate,
            ListOp::Len | ListOp::Range(..) => Access::Read,
        }
    }

    fn mode(op: &Self::Op) -> Mode {
        match op {
            ListOp::PushLeft(_) => PUSH_LEFT,
            ListOp::PushRight(_) => PUSH_RIGHT,
            ListOp::PopLeft | ListOp::PopRight => POP,
            ListOp::Len | ListOp::Range(..) => READ,
        }
    }

    fn commutes(a: &Self::Op, b: &Self::Op, list: &Self::State) -> bool {
        Self::push_commutes(a, b, list).unwrap_or_else(|| Self::pop_commutes(a, b, list))
    }

    /// Pushes on one end by concurrent transactions of one client can travel in one request; pops cannot
    /// share what they take.
    fn combinable(op: &Self::Op) -> bool {
        !matches!(op, ListOp::PopLeft | ListOp::PopRight)
    }
}
