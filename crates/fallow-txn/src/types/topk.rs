//! TopK (Claret Table 1): a scored set that keeps only its k best members, e.g. the highest bids on an
//! auction. `add(m, s)` keeps the higher of m's scores and then the k best (score descending, ties by the
//! smaller member); it returns nothing, so any two adds commute: what ends up kept is the k best of the
//! highest score each member was ever given, whatever the order. A read commutes with an add that leaves
//! what it reads unchanged.
//!
//! | method | and | commute when |
//! |---|---|---|
//! | add(m, s) | add(n, t) | always |
//! | add(m, s) | top() | the add changes nothing: m kept with a score ≥ s, or m not kept, the set full and (s, m) below the last kept |
//! | add(m, s) | max() | the set is not empty and the add does not make a new best (m is the best and s ≤ its score, or m is not the best and (s, m) ranks below it) |
//! | add(m, s) | count() | m kept, or the set full |
//! | reads | reads | always |
//!
//! Every row also commutes when k = 0 (nothing is ever kept). Lock modes: `add` (shared), `read` (shared).
//! Not RedisBloom's TOPK (a heavy-hitters sketch): fallow's commands get names of their own.
use crate::adt::{Access, Adt, Mode};
use std::collections::BTreeMap;
use std::fmt::Debug;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopKState<M: Ord> {
    pub k: usize,
    pub scores: BTreeMap<M, i64>,
}

/// An empty TopK that keeps nothing until its k is set (the command that creates one gives k).
impl<M: Ord> Default for TopKState<M> {
    fn default() -> Self {
        TopKState {
            k: 0,
            scores: BTreeMap::new(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopKOp<M> {
    Add(M, i64),
    Top,
    Max,
    Count,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopKOutput<M> {
    Done,
    Ranked(Vec<(M, i64)>),
    Best(Option<(M, i64)>),
    Count(usize),
}

pub struct TopK<M>(std::marker::PhantomData<M>);

pub const ADD: Mode = Mode::shared("topn.add");
pub const READ: Mode = Mode::shared("read");

/// Whether (score, member) ranks above (other score, other member).
fn above<M: Ord>(score: i64, member: &M, other_score: i64, other: &M) -> bool {
    score > other_score || (score == other_score && member < other)
}

impl<M: Ord + Clone> TopKState<M> {
    /// The kept members, best first.
    pub fn ranked(&self) -> Vec<(M, i64)> {
        let mut ranked: Vec<(M, i64)> = self.scores.iter().map(|(m, &s)| (m.clone(), s)).collect();
        ranked.sort_by(|(m1, s1), (m2, s2)| s2.cmp(s1).then_with(|| m1.cmp(m2)));
        ranked
    }

    /// Whether `add(member, score)` leaves the state as it is.
    fn add_is_noop(&self, member: &M, score: i64) -> bool {
        if self.k == 0 {
            return true;
        }
        if let Some(&kept) = self.scores.get(member) {
            return score <= kept;
        }
        let full = self.scores.len() >= self.k;
        full && self
            .ranked()
            .last()
            .is_some_and(|(last, last_score)| !above(score, member, *last_score, last))
    }

    /// Whether `add(member, score)` leaves the best member and its score as they are.
    fn add_keeps_best(&self, member: &M, score: i64) -> bool {
        if self.k == 0 {
            return true;
        }
        let ranked = self.ranked();
        let Some((best, best_score)) = ranked.first() else {
            return false;
        };
        if member == best {
            score <= *best_score
        } else {
            !above(score, member, *best_score, best)
        }
    }
}

impl<M: Ord + Clone + Debug> Adt for TopK<M> {
    type State = TopKState<M>;
    type Op = TopKOp<M>;
    type Output = TopKOutput<M>;

    const NAME: &'static str = "topk";

    fn apply(state: &mut Self::State, op: &Self::Op) -> Self::Output {
        match op {
            TopKOp::Add(member, score) => {
                if state.k > 0 {
                    let kept = state.scores.entry(member.clone()).or_insert(*score);
                    *kept = (*kept).max(*score);
                    if state.scores.len() > state.k {
                        let (last, _) = state.ranked().pop().expect("more than k kept");
                        state.scores.remove(&last);
                    }
                }
                TopKOutput::Done
            }
            TopKOp::Top => TopKOutput::Ranked(state.ranked()),
            TopKOp::Max => TopKOutput::Best(state.ranked().into_iter().next()),
            TopKOp::Count => TopKOutput::Count(state.scores.len()),
        }
    }

    fn access(op: &Self::Op) -> Access {
        match op {
            TopKOp::Add(..) => Access::Mutate,
            _ => Access::Read,
        }
    }

    fn mode(op: &Self::Op) -> Mode {
        match op {
            TopKOp::Add(..) => ADD,
            _ => READ,
        }
    }

    fn commutes(a: &Self::Op, b: &Self::Op, state: &Self::State) -> bool {
        use TopKOp::*;
        match (a, b) {
            (Add(..), Add(..)) => true,
            (Add(m, s), Top) | (Top, Add(m, s)) => state.add_is_noop(m, *s),
            (Add(m, s), Max) | (Max, Add(m, s)) => state.add_keeps_best(m, *s),
            (Add(m, _), Count) | (Count, Add(m, _)) => {
                state.k == 0 || state.scores.contains_key(m) || state.scores.len() >= state.k
            }
            (_, _) => true,
        }
    }

    /// Concurrent adds merge into one batch; concurrent reads share one answer.
    fn combinable(_op: &Self::Op) -> bool {
        true
    }
}
