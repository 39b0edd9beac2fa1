//! The built-in abstract data types, one file each.
pub mod counter;
pub mod dict;
pub mod list;
pub mod scored_set;
pub mod set;
pub mod summary_bag;
pub mod topk;
pub mod uid;
