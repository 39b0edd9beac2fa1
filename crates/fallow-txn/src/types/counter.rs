//! Counter (Redis INCRBY/DECRBY/GET/SET on an integer string inside transactions). Increments return nothing
//! inside a transaction, so any two commute; a reply carrying the new value would expose their order.
//!
//! | method | and | commute when |
//! |---|---|---|
//! | incr(a) | incr(b) | always |
//! | incr(a) | get() | a = 0 |
//! | incr(a) | set(v) | a = 0 |
//! | set(v) | set(w) | v = w |
//! | set(v) | get() | v = value |
//! | get() | get() | always |
//!
//! The specification is over mathematical integers (`i128` here); keeping the value within Redis's signed
//! 64 bits is a check the server makes when it applies the increments at commit.
//! Lock modes: `incr` (shared), `read` (shared), `write` (exclusive).
use crate::adt::{Access, Adt, Mode};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterOp {
    Incr(i64),
    Get,
    Set(i64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CounterOutput {
    Done,
    Value(i128),
}

pub struct Counter;

pub const INCR: Mode = Mode::shared("counter.incr");
pub const READ: Mode = Mode::shared("read");
pub const WRITE: Mode = Mode::exclusive("write");

impl Adt for Counter {
    type State = i128;
    type Op = CounterOp;
    type Output = CounterOutput;

    const NAME: &'static str = "counter";

    fn apply(state: &mut i128, op: &CounterOp) -> CounterOutput {
        match *op {
            CounterOp::Incr(delta) => {
                *state += i128::from(delta);
                CounterOutput::Done
            }
            CounterOp::Get => CounterOutput::Value(*state),
            CounterOp::Set(value) => {
                *state = i128::from(value);
                CounterOutput::Done
            }
        }
    }

    fn access(op: &CounterOp) -> Access {
        match op {
            CounterOp::Get => Access::Read,
            CounterOp::Incr(_) | CounterOp::Set(_) => Access::Mutate,
        }
    }

    fn mode(op: &CounterOp) -> Mode {
        match op {
            CounterOp::Incr(_) => INCR,
            CounterOp::Get => READ,
            CounterOp::Set(_) => WRITE,
        }
    }

    fn commutes(a: &CounterOp, b: &CounterOp, state: &i128) -> bool {
        use CounterOp::*;
        match (*a, *b) {
            (Incr(_), Incr(_)) | (Get, Get) => true,
            (Incr(delta), Get) | (Get, Incr(delta)) => delta == 0,
            (Incr(delta), Set(_)) | (Set(_), Incr(delta)) => delta == 0,
            (Set(v), Set(w)) => v == w,
            (Set(value), Get) | (Get, Set(value)) => i128::from(value) == *state,
        }
    }

    /// Concurrent increments merge into one (their sum); concurrent reads share one value.
    fn combinable(op: &CounterOp) -> bool {
        !matches!(op, CounterOp::Set(_))
    }
}
