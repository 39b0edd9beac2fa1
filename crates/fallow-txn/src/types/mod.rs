//! The built-in abstract data types, one file each.
pub mod counter;
pub mod set;
pub mod summary_bag;
