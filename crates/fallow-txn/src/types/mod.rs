//! The built-in abstract data types, one file each.
pub mod set;
