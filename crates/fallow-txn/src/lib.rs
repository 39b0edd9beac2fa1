//! The transaction layer (Claret, issue 5). Every abstract data type declares, per operation, what it reads
//! and writes, the abstract-lock mode it takes, which operations it commutes with (its commutativity
//! specification, which may depend on the record's state), and whether it can be combined. The lock table,
//! phasers and the commit protocol use only these declarations; they know nothing about sets or bids.
//!
//! This crate holds the specifications and the checker that proves them: for every pair of operations an ADT
//! declares commuting in a state, both execution orders must give the same results and the same final state
//! (`adt::check_pair`, exercised by proptest in `tests/`).
pub mod adt;
pub mod lock;
pub mod types;

pub use adt::{
    check_pair, check_shared_mode, check_spec, orders_agree, rw_mode, Access, Adt, Mode,
};
