//! Metadata of the string commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, CommandInfo, Group, Keys, ALL_KEYS, ONE_KEY, TWO_KEYS};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("get", 2, READONLY | FAST, ONE_KEY, Group::STRING, "Get the value of a key"),
    info("set", -3, WRITE | DENYOOM, ONE_KEY, Group::STRING, "Set the string value of a key"),
    info("setnx", 3, WRITE | DENYOOM | FAST, ONE_KEY, Group::STRING, "Set a key only if it does not exist"),
    info("setex", 4, WRITE | DENYOOM, ONE_KEY, Group::STRING, "Set a key with an expiry in seconds"),
    info("psetex", 4, WRITE | DENYOOM, ONE_KEY, Group::STRING, "Set a key with an expiry in milliseconds"),
    info("getset", 3, WRITE | DENYOOM | FAST, ONE_KEY, Group::STRING, "Set a key and return its old value"),
    info("getdel", 2, WRITE | FAST, ONE_KEY, Group::STRING, "Get a key and delete it"),
    info("getex", -2, WRITE | FAST, ONE_KEY, Group::STRING, "Get a key and set or clear its expiry"),
    info("mget", -2, READONLY | FAST, ALL_KEYS, Group::STRING, "Get the values of several keys"),
    info("mset", -3, WRITE | DENYOOM, PAIRS, Group::STRING, "Set several keys atomically"),
    info("msetnx", -3, WRITE | DENYOOM, PAIRS, Group::STRING, "Set several keys only if none exists"),
    info("append", 3, WRITE | DENYOOM | FAST, ONE_KEY, Group::STRING, "Append to a string"),
    info("strlen", 2, READONLY | FAST, ONE_KEY, Group::STRING, "Length of a string"),
    info("getrange", 4, READONLY, ONE_KEY, Group::STRING, "Substring of a string"),
    info("substr", 4, READONLY, ONE_KEY, Group::STRING, "Substring of a string (old name)"),
    info("setrange", 4, WRITE | DENYOOM, ONE_KEY, Group::STRING, "Overwrite part of a string"),
    info("incr", 2, WRITE | DENYOOM | FAST, ONE_KEY, Group::STRING, "Increment by one"),
    info("decr", 2, WRITE | DENYOOM | FAST, ONE_KEY, Group::STRING, "Decrement by one"),
    info("incrby", 3, WRITE | DENYOOM | FAST, ONE_KEY, Group::STRING, "Increment by an integer"),
    info("decrby", 3, WRITE | DENYOOM | FAST, ONE_KEY, Group::STRING, "Decrement by an integer"),
    info("incrbyfloat", 3, WRITE | DENYOOM | FAST, ONE_KEY, Group::STRING, "Increment by a float"),
    info("lcs", -3, READONLY, TWO_KEYS, Group::STRING, "Longest common subsequence of two strings, its length or its matching ranges"),
];

pub const PAIRS: Keys = Keys::Range {
    first: 1,
    last: -1,
    step: 2,
};
