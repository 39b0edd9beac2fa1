//! Metadata of the uid commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, CommandInfo, Group, ONE_KEY};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("uid.next", 2, WRITE | DENYOOM | FAST, ONE_KEY, Group::STRING, "A unique id (a counter incremented by one)"),
];
