//! Metadata of the hash commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, CommandInfo, Group, ONE_KEY};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("hset", -4, WRITE | DENYOOM | FAST, ONE_KEY, Group::HASH, "Set fields of a hash"),
    info("hmset", -4, WRITE | DENYOOM | FAST, ONE_KEY, Group::HASH, "Set fields of a hash (old form, replies OK)"),
    info("hsetnx", 4, WRITE | DENYOOM | FAST, ONE_KEY, Group::HASH, "Set a field only if it does not exist"),
    info("hget", 3, READONLY | FAST, ONE_KEY, Group::HASH, "Get the value of a field"),
    info("hmget", -3, READONLY | FAST, ONE_KEY, Group::HASH, "Get the values of several fields"),
    info("hdel", -3, WRITE | FAST, ONE_KEY, Group::HASH, "Delete fields"),
    info("hlen", 2, READONLY | FAST, ONE_KEY, Group::HASH, "Number of fields"),
    info("hstrlen", 3, READONLY | FAST, ONE_KEY, Group::HASH, "Length of a field's value"),
    info("hexists", 3, READONLY | FAST, ONE_KEY, Group::HASH, "Whether a field exists"),
    info("hgetall", 2, READONLY, ONE_KEY, Group::HASH, "All fields and values"),
    info("hkeys", 2, READONLY, ONE_KEY, Group::HASH, "All fields"),
    info("hvals", 2, READONLY, ONE_KEY, Group::HASH, "All values"),
    info("hincrby", 4, WRITE | DENYOOM | FAST, ONE_KEY, Group::HASH, "Increment a field by an integer"),
    info("hincrbyfloat", 4, WRITE | DENYOOM | FAST, ONE_KEY, Group::HASH, "Increment a field by a float"),
    info("hrandfield", -2, READONLY, ONE_KEY, Group::HASH, "Random fields"),
    info("hscan", -3, READONLY, ONE_KEY, Group::HASH, "Iterate fields and values"),
];
