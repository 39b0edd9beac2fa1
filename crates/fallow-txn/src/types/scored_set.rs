//! ScoredSet (Redis sorted set: ZADD/ZINCRBY/ZREM/ZSCORE/ZRANK/ZRANGE/ZCARD inside transactions; Claret
//! Table 1). Writes return nothing. Increments commute with each other always; writes to different members
//! commute; a write commutes with a read that it leaves unchanged. Ranks and ranges depend on every score,
//! so against them only a write that changes nothing is declared commuting (sound, deliberately coarse).
//!
//! | method | and | commute when |
//! |---|---|---|
//! | add(m, s) | add(n, t) | m ≠ n ∨ s = t |
//! | add(m, s) | incr(n, d) | m ≠ n ∨ d = 0 |
//! | add(m, s), incr(m, d) | rem(n) | m ≠ n |
//! | incr(m, a) | incr(n, b) | always |
//! | rem(m) | rem(n) | always |
//! | write on m | score(g) | m ≠ g ∨ the write changes nothing |
//! | write on m | card() | m present (add, incr) / m absent (rem) |
//! | write | rank(g), range(i, j) | the write changes nothing |
//! | reads | reads | always |
//!
//! "Changes nothing": add(m, s) with m already at s, incr(m, 0) with m present, rem(m) with m absent.
//! Lock modes: add and rem take `member-write` for their member (per part), incr takes `incr` (shared),
//! reads take `read`. Scores are integers here; Redis's doubles behave the same for these rules.
use crate::adt::{Access, Adt, Mode};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::hash::Hash;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZOp<M> {
    Add(M, i64),
    Incr(M, i64),
    Rem(M),
    Score(M),
    Rank(M),
    /// Members ranked start..=stop (ascending score, ties by member).
    Range(usize, usize),
    Card,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZOutput<M> {
    Done,
    Score(Option<i128>),
    Rank(Option<usize>),
    Range(Vec<M>),
    Card(usize),
}

pub struct ScoredSet<M>(std::marker::PhantomData<M>);

pub const INCR: Mode = Mode::shared("zset.incr");
pub const READ: Mode = Mode::shared("read");

pub fn member_write<F: Hash>(member: &F) -> Mode {
    Mode::part_of("zset.member-write", member)
}

fn ranked<M: Ord + Clone>(state: &BTreeMap<M, i128>) -> Vec<M> {
    let mut members: Vec<(&M, &i128)> = state.iter().collect();
    members.sort_by(|(m1, s1), (m2, s2)| s1.cmp(s2).then_with(|| m1.cmp(m2)));
    members.into_iter().map(|(m, _)| m.clone()).collect()
}

impl<M: Ord + Clone + Debug + Hash> ScoredSet<M> {
    /// The member a write touches, if `op` is a write.
    fn written(op: &ZOp<M>) -> Option<&M> {
        match op {
            ZOp::Add(m, _) | ZOp::Incr(m, _) | ZOp::Rem(m) => Some(m),
            _ => None,
        }
    }

    fn changes_nothing(op: &ZOp<M>, state: &BTreeMap<M, i128>) -> bool {
        match op {
            ZOp::Add(m, s) => state.get(m) == Some(&i128::from(*s)),
            ZOp::Incr(m, d) => *d == 0 && state.contains_key(m),
            ZOp::Rem(m) => !state.contains_key(m),
            _ => true,
        }
    }

    fn write_commutes_with_read(write: &ZOp<M>, read: &ZOp<M>, state: &BTreeMap<M, i128>) -> bool {
        let member = Self::written(write).expect("a write");
        match read {
            ZOp::Score(g) => member != g || Self::changes_nothing(write, state),
            ZOp::Card => match write {
                ZOp::Rem(m) => !state.contains_key(m),
                _ => state.contains_key(member),
            },
            _ => Self::changes_nothing(write, state),
        }
    }
}

impl<M: Ord + Clone + Debug + Hash> Adt for ScoredSet<M> {
    type State = BTreeMap<M, i128>;
    type Op = ZOp<M>;
    type Output = ZOutput<M>;

    const NAME: &'static str = "scored-set";

    fn apply(state: &mut Self::State, op: &Self::Op) -> Self::Output {
        match op {
            ZOp::Add(m, s) => {
                state.insert(m.clone(), i128::from(*s));
                ZOutput::Done
            }
            ZOp::Incr(m, d) => {
                *state.entry(m.clone()).or_insert(0) += i128::from(*d);
                ZOutput::Done
            }
            ZOp::Rem(m) => {
                state.remove(m);
                ZOutput::Done
            }
            ZOp::Score(m) => ZOutput::Score(state.get(m).copied()),
            ZOp::Rank(m) => ZOutput::Rank(ranked(state).iter().position(|x| x == m)),
            ZOp::Range(start, stop) => ZOutput::Range(
                ranked(state)
                    .into_iter()
                    .skip(*start)
                    .take((stop + 1).saturating_sub(*start))
                    .collect(),
            ),
            ZOp::Card => ZOutput::Card(state.len()),
        }
    }

    fn access(op: &Self::Op) -> Access {
        match Self::written(op) {
            Some(_) => Access::Mutate,
            None => Access::Read,
        }
    }

    fn mode(op: &Self::Op) -> Mode {
        match op {
            ZOp::Add(m, _) | ZOp::Rem(m) => member_write(m),
            ZOp::Incr(..) => INCR,
            _ => READ,
        }
    }

    fn commutes(a: &Self::Op, b: &Self::Op, state: &Self::State) -> bool {
        use ZOp::*;
        match (Self::written(a), Self::written(b)) {
            (None, None) => true,
            (Some(_), None) => Self::write_commutes_with_read(a, b, state),
            (None, Some(_)) => Self::write_commutes_with_read(b, a, state),
            (Some(m), Some(n)) => match (a, b) {
                (Incr(..), Incr(..)) | (Rem(_), Rem(_)) => true,
                (Add(_, s), Add(_, t)) => m != n || s == t,
                (Add(..), Incr(_, d)) | (Incr(_, d), Add(..)) => m != n || *d == 0,
                _ => m != n,
            },
        }
    }

    /// Concurrent writes commit together; concurrent reads share one answer (a range within another's
    /// range could be cut from it, Claret Fig. 4).
    fn combinable(_op: &Self::Op) -> bool {
        true
    }
}
