//! Metadata of the bulk commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, CommandInfo, Group, Keys};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("shards", 1, READONLY | FAST, Keys::None, Group::KEYSPACE, "Number of shards (for SHARDSCAN)"),
    // ADMIN: it returns the values of every key, whatever key patterns a user's ACL allows.
    info("shardscan", -3, READONLY | ADMIN, Keys::None, Group::KEYSPACE, "Iterate one shard's string keys with their values: [cursor, [key, value, ...], skipped]"),
];
