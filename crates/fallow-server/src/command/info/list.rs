//! Metadata of the list commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{
    info, keys_after_numkeys, CommandInfo, Group, Keys, KEYS_BEFORE_TIMEOUT, ONE_KEY, TWO_KEYS,
};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("lpush", -3, WRITE | DENYOOM | FAST, ONE_KEY, Group::LIST, "Prepend elements to a list"),
    info("rpush", -3, WRITE | DENYOOM | FAST, ONE_KEY, Group::LIST, "Append elements to a list"),
    info("lpushx", -3, WRITE | DENYOOM | FAST, ONE_KEY, Group::LIST, "Prepend elements to an existing list"),
    info("rpushx", -3, WRITE | DENYOOM | FAST, ONE_KEY, Group::LIST, "Append elements to an existing list"),
    info("lpop", -2, WRITE | FAST, ONE_KEY, Group::LIST, "Remove and return the first elements"),
    info("rpop", -2, WRITE | FAST, ONE_KEY, Group::LIST, "Remove and return the last elements"),
    info("llen", 2, READONLY | FAST, ONE_KEY, Group::LIST, "Length of a list"),
    info("lrange", 4, READONLY, ONE_KEY, Group::LIST, "A range of elements"),
    info("lindex", 3, READONLY, ONE_KEY, Group::LIST, "The element at an index"),
    info("lset", 4, WRITE | DENYOOM, ONE_KEY, Group::LIST, "Set the element at an index"),
    info("linsert", 5, WRITE | DENYOOM, ONE_KEY, Group::LIST, "Insert an element before or after another"),
    info("lrem", 4, WRITE, ONE_KEY, Group::LIST, "Remove elements equal to a value"),
    info("ltrim", 4, WRITE, ONE_KEY, Group::LIST, "Keep only a range of elements"),
    info("lpos", -3, READONLY, ONE_KEY, Group::LIST, "Positions of elements equal to a value"),
    info("lmove", 5, WRITE | DENYOOM, TWO_KEYS, Group::LIST, "Pop an element from one list and push it to another"),
    info("rpoplpush", 3, WRITE | DENYOOM, TWO_KEYS, Group::LIST, "Pop the last element and push it to the head of another list"),
    info("lmpop", -4, WRITE, Keys::Custom(lmpop_keys), Group::LIST, "Pop elements from the first non-empty list"),
    info("blpop", -3, WRITE | BLOCKING | NOSCRIPT, KEYS_BEFORE_TIMEOUT, Group::LIST, "Pop the first element, blocking until there is one"),
    info("brpop", -3, WRITE | BLOCKING | NOSCRIPT, KEYS_BEFORE_TIMEOUT, Group::LIST, "Pop the last element, blocking until there is one"),
    info("blmove", 6, WRITE | DENYOOM | BLOCKING | NOSCRIPT, TWO_KEYS, Group::LIST, "LMOVE, blocking until the source has an element"),
    info("brpoplpush", 4, WRITE | DENYOOM | BLOCKING | NOSCRIPT, TWO_KEYS, Group::LIST, "RPOPLPUSH, blocking until the source has an element"),
    info("blmpop", -5, WRITE | BLOCKING, Keys::Custom(blmpop_keys), Group::LIST, "LMPOP, blocking until a list has elements"),
];

pub fn blmpop_keys(args: &[&[u8]]) -> Vec<usize> {
    keys_after_numkeys(args, 2)
}

pub fn lmpop_keys(args: &[&[u8]]) -> Vec<usize> {
    keys_after_numkeys(args, 1)
}
