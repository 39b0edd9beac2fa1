//! Metadata of the set commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, CommandInfo, Group, Keys, ALL_KEYS, ONE_KEY, TWO_KEYS};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("sadd", -3, WRITE | DENYOOM | FAST, ONE_KEY, Group::SET, "Add members to a set"),
    info("srem", -3, WRITE | FAST, ONE_KEY, Group::SET, "Remove members from a set"),
    info("scard", 2, READONLY | FAST, ONE_KEY, Group::SET, "Number of members"),
    info("sismember", 3, READONLY | FAST, ONE_KEY, Group::SET, "Whether a value is a member"),
    info("smismember", -3, READONLY | FAST, ONE_KEY, Group::SET, "Whether each value is a member"),
    info("smembers", 2, READONLY, ONE_KEY, Group::SET, "All members"),
    info("spop", -2, WRITE | FAST, ONE_KEY, Group::SET, "Remove and return random members"),
    info("srandmember", -2, READONLY, ONE_KEY, Group::SET, "Random members"),
    info("smove", 4, WRITE | FAST, TWO_KEYS, Group::SET, "Move a member to another set"),
    info("sinter", -2, READONLY, ALL_KEYS, Group::SET, "Intersection of sets"),
    info("sunion", -2, READONLY, ALL_KEYS, Group::SET, "Union of sets"),
    info("sdiff", -2, READONLY, ALL_KEYS, Group::SET, "Difference of sets"),
    info("sinterstore", -3, WRITE | DENYOOM, ALL_KEYS, Group::SET, "Store the intersection of sets"),
    info("sunionstore", -3, WRITE | DENYOOM, ALL_KEYS, Group::SET, "Store the union of sets"),
    info("sdiffstore", -3, WRITE | DENYOOM, ALL_KEYS, Group::SET, "Store the difference of sets"),
    info("sintercard", -3, READONLY, Keys::Custom(sintercard_keys), Group::SET, "Cardinality of the intersection of sets"),
    info("sscan", -3, READONLY, ONE_KEY, Group::SET, "Iterate members"),
];

/// Key positions of `SINTERCARD numkeys key... [LIMIT n]`; none when numkeys is not valid (the handler
/// then replies the error without touching a key).
pub fn sintercard_keys(args: &[&[u8]]) -> Vec<usize> {
    let Some(numkeys) = args
        .get(1)
        .and_then(|arg| fallow_proto::resp::parse_i64(arg))
    else {
        return Vec::new();
    };
    match usize::try_from(numkeys) {
        Ok(numkeys) if numkeys >= 1 && numkeys <= args.len() - 2 => (2..2 + numkeys).collect(),
        _ => Vec::new(),
    }
}
