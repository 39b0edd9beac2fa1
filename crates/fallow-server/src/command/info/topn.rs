//! Metadata of the topn commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, CommandInfo, Group, ONE_KEY};

/// TOPN.*: a scored set keeping its k best members.
pub const TOPN: Group = Group::new("topn", "topn", "TopN (the k best members)");

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("topn.reserve", 3, WRITE | DENYOOM | FAST, ONE_KEY, TOPN, "Create an empty TopN that keeps the k best members"),
    info("topn.add", -4, WRITE | DENYOOM | FAST, ONE_KEY, TOPN, "Give members scores; each keeps its highest, only the k best stay"),
    info("topn.list", -2, READONLY, ONE_KEY, TOPN, "Kept members, best first"),
    info("topn.max", 2, READONLY | FAST, ONE_KEY, TOPN, "The best member and its score"),
    info("topn.count", 2, READONLY | FAST, ONE_KEY, TOPN, "Number of members kept"),
    info("topn.k", 2, READONLY | FAST, ONE_KEY, TOPN, "How many members it keeps at most"),
];
