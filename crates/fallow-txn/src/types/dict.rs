//! Dict (Redis hash: HSET/HDEL/HINCRBY/HGET/HEXISTS/HLEN/HGETALL inside transactions; Claret Table 1).
//! Writes return nothing inside a transaction. Writes to different fields commute; a write and a read
//! commute when they touch different fields or the write leaves what the read sees unchanged.
//!
//! | method | and | commute when |
//! |---|---|---|
//! | set(f, v) | set(g, w) | f ≠ g ∨ v = w |
//! | set(f, v) | del(g) | f ≠ g |
//! | set(f, v) | incr(g, n) | f ≠ g ∨ n = 0 |
//! | del(f) | del(g) | always |
//! | del(f) | incr(g, n) | f ≠ g |
//! | incr(f, a) | incr(g, b) | always |
//! | set(f, v) | get(g), exists(g) | f ≠ g ∨ value(f) = v (get) / f present (exists) |
//! | del(f) | get(g), exists(g) | f ≠ g ∨ f absent |
//! | incr(f, n) | get(g) | f ≠ g ∨ (n = 0 ∧ f present) |
//! | incr(f, n) | exists(g) | f ≠ g ∨ f present |
//! | set(f, v) | len() | f present |
//! | del(f) | len(), getall() | f absent |
//! | incr(f, n) | len() | f present |
//! | set(f, v) | getall() | value(f) = v |
//! | incr(f, n) | getall() | n = 0 ∧ f present |
//! | reads | reads | always |
//!
//! Lock modes: a write takes `field-write` for its field (a per-part mode: writes to different fields hold
//! the lock together, writes to one field queue); reads take `read`. Values are integers here (HINCRBY needs
//! them; any value type behaves the same for the other rows).
use crate::adt::{Access, Adt, Mode};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::hash::Hash;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DictOp<F> {
    Set(F, i64),
    Del(F),
    Incr(F, i64),
    Get(F),
    Exists(F),
    Len,
    GetAll,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DictOutput<F> {
    Done,
    Value(Option<i128>),
    Exists(bool),
    Len(usize),
    All(BTreeMap<F, i128>),
}

pub struct Dict<F>(std::marker::PhantomData<F>);

pub const READ: Mode = Mode::shared("read");

/// The per-field write mode: the part is the field's hash.
pub fn field_write<F: Hash>(field: &F) -> Mode {
    Mode::part_of("hash.field-write", field)
}

impl<F: Ord + Clone + Debug + Hash> Adt for Dict<F> {
    type State = BTreeMap<F, i128>;
    type Op = DictOp<F>;
    type Output = DictOutput<F>;

    const NAME: &'static str = "dict";

    fn apply(state: &mut Self::State, op: &Self::Op) -> Self::Output {
        match op {
            DictOp::Set(f, v) => {
                state.insert(f.clone(), i128::from(*v));
                DictOutput::Done
            }
            DictOp::Del(f) => {
                state.remove(f);
                DictOutput::Done
            }
            DictOp::Incr(f, n) => {
                *state.entry(f.clone()).or_insert(0) += i128::from(*n);
                DictOutput::Done
            }
            DictOp::Get(f) => DictOutput::Value(state.get(f).copied()),
            DictOp::Exists(f) => DictOutput::Exists(state.contains_key(f)),
            DictOp::Len => DictOutput::Len(state.len()),
            DictOp::GetAll => DictOutput::All(state.clone()),
        }
    }

    fn access(op: &Self::Op) -> Access {
        match op {
            DictOp::Set(..) | DictOp::Del(_) | DictOp::Incr(..) => Access::Mutate,
            _ => Access::Read,
        }
    }

    fn mode(op: &Self::Op) -> Mode {
        match op {
            DictOp::Set(f, _) | DictOp::Del(f) | DictOp::Incr(f, _) => field_write(f),
            _ => READ,
        }
    }

    fn commutes(a: &Self::Op, b: &Self::Op, state: &Self::State) -> bool {
        if Self::access(a) == Access::Read && Self::access(b) == Access::Read {
            return true;
        }
        match (a, b) {
            (write, read) | (read, write) if Self::access(read) == Access::Read => {
                write_commutes_with_read(write, read, state)
            }
            (DictOp::Set(f, v), DictOp::Set(g, w)) => f != g || v == w,
            (DictOp::Del(_), DictOp::Del(_)) | (DictOp::Incr(..), DictOp::Incr(..)) => true,
            (DictOp::Set(f, _), DictOp::Del(g)) | (DictOp::Del(g), DictOp::Set(f, _)) => f != g,
            (DictOp::Set(f, _), DictOp::Incr(g, n)) | (DictOp::Incr(g, n), DictOp::Set(f, _)) => {
                f != g || *n == 0
            }
            (DictOp::Del(f), DictOp::Incr(g, _)) | (DictOp::Incr(g, _), DictOp::Del(f)) => f != g,
            _ => unreachable!("every pair of writes is listed"),
        }
    }

    /// Concurrent writes commit together; concurrent reads share one answer.
    fn combinable(_op: &Self::Op) -> bool {
        true
    }
}

/// The write/read rows of the table.
fn write_commutes_with_read<F: Ord>(
    write: &DictOp<F>,
    read: &DictOp<F>,
    state: &BTreeMap<F, i128>,
) -> bool {
    let value = |f: &F| state.get(f).copied();
    match (write, read) {
        (DictOp::Set(f, v), DictOp::Get(g)) => f != g || value(f) == Some(i128::from(*v)),
        (DictOp::Set(f, _), DictOp::Exists(g)) => f != g || value(f).is_some(),
        (DictOp::Set(f, _), DictOp::Len) => value(f).is_some(),
        (DictOp::Set(f, v), DictOp::GetAll) => value(f) == Some(i128::from(*v)),
        (DictOp::Del(f), DictOp::Get(g) | DictOp::Exists(g)) => f != g || value(f).is_none(),
        (DictOp::Del(f), DictOp::Len | DictOp::GetAll) => value(f).is_none(),
        (DictOp::Incr(f, n), DictOp::Get(g)) => f != g || (*n == 0 && value(f).is_some()),
        (DictOp::Incr(f, _), DictOp::Exists(g)) => f != g || value(f).is_some(),
        (DictOp::Incr(f, _), DictOp::Len) => value(f).is_some(),
        (DictOp::Incr(f, n), DictOp::GetAll) => *n == 0 && value(f).is_some(),
        _ => unreachable!("a write and a read"),
    }
}
