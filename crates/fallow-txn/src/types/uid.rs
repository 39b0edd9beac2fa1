//! UIdGenerator (Claret Table 1): `next()` returns an id no earlier `next()` of the generator returned; the
//! ids need not be sequential. So two `next()`s commute: either order hands out the same two ids, only to
//! the other caller, and the specification promises nothing more (unlike a counter, whose values must come
//! in sequence). Lock mode: `next` (shared); the server may hand each shard a range of ids.
use crate::adt::{Access, Adt, Mode};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UIdOp {
    Next,
}

pub struct UIdGenerator;

pub const NEXT: Mode = Mode::shared("uid.next");

impl Adt for UIdGenerator {
    /// The next id to hand out.
    type State = u64;
    type Op = UIdOp;
    type Output = u64;

    const NAME: &'static str = "uid-generator";

    fn apply(next: &mut u64, _op: &UIdOp) -> u64 {
        let id = *next;
        *next += 1;
        id
    }

    fn access(_op: &UIdOp) -> Access {
        Access::ReadMutate
    }

    fn mode(_op: &UIdOp) -> Mode {
        NEXT
    }

    fn commutes(_a: &UIdOp, _b: &UIdOp, _next: &u64) -> bool {
        true
    }

    /// Concurrent `next()`s in one client can share one request for a block of ids.
    fn combinable(_op: &UIdOp) -> bool {
        true
    }

    /// The same ids handed out, to either caller.
    fn same_outcome(first: [&u64; 2], second: [&u64; 2]) -> bool {
        let mut first = [*first[0], *first[1]];
        let mut second = [*second[0], *second[1]];
        first.sort_unstable();
        second.sort_unstable();
        first == second
    }
}
