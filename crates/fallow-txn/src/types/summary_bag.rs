//! SummaryBag (Claret Table 1): a container whose items cannot be listed, only summarised: add(x), count,
//! min, max, mean. Adds return nothing and commute with each other; a summary read commutes with an add
//! exactly when the add leaves that summary unchanged.
//!
//! | method | and | commute when |
//! |---|---|---|
//! | add(x) | add(y) | always |
//! | add(x) | count() | never |
//! | add(x) | min() | bag not empty and x ≥ min |
//! | add(x) | max() | bag not empty and x ≤ max |
//! | add(x) | mean() | bag not empty and x = mean |
//! | reads | reads | always |
//!
//! Lock modes: `add` (shared), `read` (shared).
use crate::adt::{Access, Adt, Mode};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub count: u64,
    pub sum: i128,
    pub min: Option<i64>,
    pub max: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BagOp {
    Add(i64),
    Count,
    Min,
    Max,
    Mean,
}

#[derive(Clone, Debug, PartialEq)]
pub enum BagOutput {
    Done,
    Count(u64),
    Extreme(Option<i64>),
    Mean(Option<f64>),
}

pub struct SummaryBag;

pub const ADD: Mode = Mode::shared("bag.add");
pub const READ: Mode = Mode::shared("read");

impl Summary {
    fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// Whether `x` equals the mean exactly (sum = x · count, in integers).
    fn mean_is(&self, x: i64) -> bool {
        self.count > 0 && self.sum == i128::from(x) * i128::from(self.count)
    }
}

impl Adt for SummaryBag {
    type State = Summary;
    type Op = BagOp;
    type Output = BagOutput;

    const NAME: &'static str = "summary-bag";

    fn apply(bag: &mut Summary, op: &BagOp) -> BagOutput {
        match *op {
            BagOp::Add(x) => {
                bag.count += 1;
                bag.sum += i128::from(x);
                bag.min = Some(bag.min.map_or(x, |min| min.min(x)));
                bag.max = Some(bag.max.map_or(x, |max| max.max(x)));
                BagOutput::Done
            }
            BagOp::Count => BagOutput::Count(bag.count),
            BagOp::Min => BagOutput::Extreme(bag.min),
            BagOp::Max => BagOutput::Extreme(bag.max),
            BagOp::Mean => BagOutput::Mean(bag.mean()),
        }
    }

    fn access(op: &BagOp) -> Access {
        match op {
            BagOp::Add(_) => Access::Mutate,
            _ => Access::Read,
        }
    }

    fn mode(op: &BagOp) -> Mode {
        match op {
            BagOp::Add(_) => ADD,
            _ => READ,
        }
    }

    fn commutes(a: &BagOp, b: &BagOp, bag: &Summary) -> bool {
        use BagOp::*;
        match (*a, *b) {
            (Add(_), Add(_)) => true,
            (Add(_), Count) | (Count, Add(_)) => false,
            (Add(x), Min) | (Min, Add(x)) => bag.min.is_some_and(|min| x >= min),
            (Add(x), Max) | (Max, Add(x)) => bag.max.is_some_and(|max| x <= max),
            (Add(x), Mean) | (Mean, Add(x)) => bag.mean_is(x),
            (_, _) => true,
        }
    }

    /// Concurrent adds merge into one summary; concurrent reads share one answer.
    fn combinable(_op: &BagOp) -> bool {
        true
    }
}
