//! Metadata of the bitmap commands (see `super`): rows of the command table, without handlers. A bitmap
//! is a string; BITOP writes its first key from the others.
use super::flags::*;
use super::{info, CommandInfo, Group, Keys, ONE_KEY};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("setbit", 4, WRITE | DENYOOM, ONE_KEY, Group::BITMAP, "Set or clear one bit, growing the string as needed"),
    info("getbit", 3, READONLY | FAST, ONE_KEY, Group::BITMAP, "The bit at an offset"),
    info("bitcount", -2, READONLY, ONE_KEY, Group::BITMAP, "Count set bits, in a range of bytes or bits"),
    info("bitpos", -3, READONLY, ONE_KEY, Group::BITMAP, "The first set or clear bit, in a range of bytes or bits"),
    info("bitop", -4, WRITE | DENYOOM, DESTINATION_AND_SOURCES, Group::BITMAP, "AND, OR, XOR or NOT of strings into a key"),
    info("bitfield", -2, WRITE | DENYOOM, ONE_KEY, Group::BITMAP, "Get, set and increment integers of any width at any bit offset"),
    info("bitfield_ro", -2, READONLY | FAST, ONE_KEY, Group::BITMAP, "BITFIELD with GET only"),
];

/// BITOP op destkey key...: every argument from the destination on.
const DESTINATION_AND_SOURCES: Keys = Keys::Range {
    first: 2,
    last: -1,
    step: 1,
};
