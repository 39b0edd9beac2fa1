//! Metadata of the bag commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, CommandInfo, Group, ONE_KEY};

/// BAG.*: a summary bag (count, min, max, mean).
pub const BAG: Group = Group::new("bag", "bag", "Summary bags");

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("bag.add", -3, WRITE | DENYOOM | FAST, ONE_KEY, BAG, "Add integers to a summary bag"),
    info("bag.count", 2, READONLY | FAST, ONE_KEY, BAG, "Number of items added"),
    info("bag.min", 2, READONLY | FAST, ONE_KEY, BAG, "Smallest item"),
    info("bag.max", 2, READONLY | FAST, ONE_KEY, BAG, "Largest item"),
    info("bag.mean", 2, READONLY | FAST, ONE_KEY, BAG, "Mean of the items"),
    info("bag.summary", 2, READONLY | FAST, ONE_KEY, BAG, "Count, min, max and mean at once"),
];
