//! The ADT interface (Claret §5, Listings 1-2, in Rust): an ADT is a sequential specification (`apply`) plus
//! what the concurrency control needs to know about each operation.
use std::fmt::Debug;

/// What an operation does to its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Only observes the record (`size`, `contains`).
    Read,
    /// Only changes it and returns nothing (`add`): executes as a no-op, applies at commit.
    Mutate,
    /// Observes and changes it (returns a value that depends on the state and changes the state).
    ReadMutate,
}

/// An abstract-lock mode. Operations whose modes are compatible hold a record's lock together (boosting);
/// the phaser groups waiting operations by mode name. Two modes are compatible when they have the same name
/// and the mode is shared (every `add` of a set), or when they are the same per-part mode for different parts
/// (writes to different fields of a hash: `part` is the field's hash; equal hashes of different fields only
/// make the lock stricter than needed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mode {
    pub name: &'static str,
    pub shared: bool,
    pub part: Option<u64>,
}

/// Whether `name` may name a mode: non-empty, printable ASCII without spaces or `:` (it names INFO fields,
/// `conflict_<requested>_<held>:<count>`, and the phaser groups requests by it).
const fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let mut index = 0;
    while index < bytes.len() {
        if !bytes[index].is_ascii_graphic() || bytes[index] == b':' {
            return false;
        }
        index += 1;
    }
    !bytes.is_empty()
}

impl Mode {
    /// A mode whose holders all share the lock. Its name is checked when the mode is made: where the mode
    /// is a constant, as every built-in one is, a bad name does not compile.
    ///
    /// ```
    /// const ADD: fallow_txn::Mode = fallow_txn::Mode::shared("set.add");
    /// ```
    /// ```compile_fail
    /// const EMPTY: fallow_txn::Mode = fallow_txn::Mode::shared("");
    /// ```
    pub const fn shared(name: &'static str) -> Mode {
        assert!(
            valid_name(name),
            "a mode's name is non-empty printable ASCII without spaces or ':'"
        );
        Mode {
            name,
            shared: true,
            part: None,
        }
    }

    pub const fn exclusive(name: &'static str) -> Mode {
        assert!(
            valid_name(name),
            "a mode's name is non-empty printable ASCII without spaces or ':'"
        );
        Mode {
            name,
            shared: false,
            part: None,
        }
    }

    /// An exclusive mode for one part of a record (one field of a hash, one member of a sorted set).
    pub const fn part(name: &'static str, part: u64) -> Mode {
        assert!(
            valid_name(name),
            "a mode's name is non-empty printable ASCII without spaces or ':'"
        );
        Mode {
            name,
            shared: false,
            part: Some(part),
        }
    }

    /// The per-part mode for a part named by a value (a field, a member): the part is its hash.
    pub fn part_of(name: &'static str, part: &impl std::hash::Hash) -> Mode {
        use std::hash::BuildHasher;
        // fixed, so a part hashes alike in every connection and test; a collision only makes the lock stricter
        Mode::part(name, foldhash::fast::FixedState::default().hash_one(part))
    }

    /// Whether an operation in `self` may hold the lock beside one in `other`.
    pub fn compatible(self, other: Mode) -> bool {
        debug_assert!(
            [self, other]
                .iter()
                .all(|mode| !mode.shared || mode.part.is_none()),
            "a shared mode names no part: {self:?}, {other:?}"
        );
        debug_assert!(
            self.name != other.name
                || (self.shared == other.shared && self.part.is_some() == other.part.is_some()),
            "one mode name is shared, exclusive or per-part, never two of these: {self:?}, {other:?}"
        );
        if self.name != other.name || self.shared != other.shared {
            return false;
        }
        self.shared
            || matches!((self.part, other.part), (Some(mine), Some(theirs)) if mine != theirs)
    }
}

/// The reader/writer baseline's mode of an operation: reads share, everything else is exclusive.
pub fn rw_mode(access: Access) -> Mode {
    match access {
        Access::Read => Mode::shared("read"),
        Access::Mutate | Access::ReadMutate => Mode::exclusive("write"),
    }
}

/// An abstract data type: its state, operations and sequential semantics, and the declarations the
/// transaction layer uses.
pub trait Adt {
    /// The abstract state of one record.
    type State: Clone + Debug + Default + PartialEq;
    type Op: Clone + Debug;
    /// What an operation returns (`()`-like for pure mutations).
    type Output: Clone + Debug + PartialEq;

    const NAME: &'static str;

    /// Executes `op` on `state` and returns its result: the sequential specification everything else must
    /// agree with.
    fn apply(state: &mut Self::State, op: &Self::Op) -> Self::Output;

    fn access(op: &Self::Op) -> Access;

    /// The abstract-lock mode `op` takes (boosting). Must be sound: two operations in the same shared mode
    /// commute in every state.
    fn mode(op: &Self::Op) -> Mode;

    /// The commutativity specification: whether `a` and `b` commute when both run on `state` (Claret
    /// Table 2 for sets). May be finer than the modes; state-dependent rules live here.
    fn commutes(a: &Self::Op, b: &Self::Op, state: &Self::State) -> bool;

    /// Whether concurrent transactions may merge `op` with another operation of the same mode on the same
    /// record in the client (combining, Claret §4.3).
    fn combinable(op: &Self::Op) -> bool;

    /// Whether two executions of the pair `(a, b)` have the same outcome: `first` holds the results of `a`
    /// and `b` run in that order, `second` in the other. Equal results by default; an ADT whose operations
    /// may return any of several valid results (unique but not sequential ids) compares what its
    /// specification promises.
    fn same_outcome(first: [&Self::Output; 2], second: [&Self::Output; 2]) -> bool {
        first == second
    }
}

/// Runs `a` then `b` and `b` then `a` from `state` when the ADT says they commute there; Err describes the
/// first difference (results of either operation, or the final state). Ok when they are not declared
/// commuting (nothing is claimed).
pub fn check_pair<A: Adt>(state: &A::State, a: &A::Op, b: &A::Op) -> Result<(), String> {
    if !A::commutes(a, b, state) {
        return Ok(());
    }
    both_orders::<A>(state, a, b)
}

/// Whether `a` and `b` give the same results and final state in either order from `state`, whatever the ADT
/// declares (an exact specification declares commuting exactly these pairs).
pub fn orders_agree<A: Adt>(state: &A::State, a: &A::Op, b: &A::Op) -> bool {
    both_orders::<A>(state, a, b).is_ok()
}

fn both_orders<A: Adt>(state: &A::State, a: &A::Op, b: &A::Op) -> Result<(), String> {
    let (mut first, mut second) = (state.clone(), state.clone());
    let (a_first, b_second) = (A::apply(&mut first, a), A::apply(&mut first, b));
    let (b_first, a_second) = (A::apply(&mut second, b), A::apply(&mut second, a));
    if !A::same_outcome([&a_first, &b_second], [&a_second, &b_first]) {
        return Err(format!(
            "{}: {a:?} then {b:?} return {a_first:?}, {b_second:?}; the other order {a_second:?}, {b_first:?} \
             (from {state:?})",
            A::NAME
        ));
    }
    if first != second {
        return Err(format!(
            "{}: {a:?}, {b:?} ends in {first:?}; the other order in {second:?}, from {state:?}",
            A::NAME
        ));
    }
    Ok(())
}

/// Soundness of the lock modes: two operations whose modes let them share the lock must be declared
/// commuting in `state` (and `check_pair` then proves they do).
pub fn check_shared_mode<A: Adt>(state: &A::State, a: &A::Op, b: &A::Op) -> Result<(), String> {
    if A::mode(a).compatible(A::mode(b)) && !A::commutes(a, b, state) {
        return Err(format!(
            "{}: {a:?} and {b:?} share mode {:?} but do not commute in {state:?}",
            A::NAME,
            A::mode(a)
        ));
    }
    Ok(())
}

/// Every property of a specification on one (state, a, b): declared-commuting pairs commute
/// (`check_pair`), the declaration is symmetric, shared modes are sound (`check_shared_mode`), and, when
/// `exact`, a pair is declared commuting exactly when both orders agree.
pub fn check_spec<A: Adt>(
    state: &A::State,
    a: &A::Op,
    b: &A::Op,
    exact: bool,
) -> Result<(), String> {
    check_pair::<A>(state, a, b)?;
    check_shared_mode::<A>(state, a, b)?;
    let declared = A::commutes(a, b, state);
    if declared != A::commutes(b, a, state) {
        return Err(format!(
            "{}: commutes({a:?}, {b:?}) is not symmetric in {state:?}",
            A::NAME
        ));
    }
    // A declared-commuting pair was run both ways by check_pair already; exactness adds the other half.
    if exact && !declared && orders_agree::<A>(state, a, b) {
        return Err(format!(
            "{}: {a:?} / {b:?} in {state:?}: declared false, but the orders agree",
            A::NAME
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_of_one_name_share_by_their_kind() {
        assert!(Mode::shared("set.add").compatible(Mode::shared("set.add")));
        assert!(!Mode::exclusive("write").compatible(Mode::exclusive("write")));
        assert!(Mode::part("hash.field-write", 1).compatible(Mode::part("hash.field-write", 2)));
        assert!(!Mode::part("hash.field-write", 1).compatible(Mode::part("hash.field-write", 1)));
        assert!(!Mode::shared("read").compatible(Mode::exclusive("write")));
    }

    #[test]
    #[should_panic(expected = "a mode's name is non-empty")]
    fn an_empty_mode_name_panics() {
        Mode::shared(std::hint::black_box(""));
    }

    #[test]
    #[should_panic(expected = "without spaces or ':'")]
    fn a_mode_name_that_would_break_info_panics() {
        Mode::part(std::hint::black_box("field:write"), 7);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a shared mode names no part")]
    fn a_shared_mode_with_a_part_panics() {
        let odd = Mode {
            part: Some(1),
            ..Mode::shared("set.add")
        };
        odd.compatible(Mode::shared("set.add"));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "one mode name is shared, exclusive or per-part, never two of these")]
    fn one_name_shared_and_exclusive_panics() {
        Mode::shared("x").compatible(Mode::exclusive("x"));
    }
}
