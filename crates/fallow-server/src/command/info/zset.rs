//! Metadata of the zset commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{
    info, keys_after_numkeys, CommandInfo, Group, Keys, KEYS_BEFORE_TIMEOUT, ONE_KEY, TWO_KEYS,
};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("zadd", -4, WRITE | DENYOOM | FAST, ONE_KEY, Group::SORTED_SET, "Add members to a sorted set, or update their scores"),
    info("zincrby", 4, WRITE | DENYOOM | FAST, ONE_KEY, Group::SORTED_SET, "Increment the score of a member"),
    info("zscore", 3, READONLY | FAST, ONE_KEY, Group::SORTED_SET, "Score of a member"),
    info("zmscore", -3, READONLY | FAST, ONE_KEY, Group::SORTED_SET, "Scores of several members"),
    info("zcard", 2, READONLY | FAST, ONE_KEY, Group::SORTED_SET, "Number of members"),
    info("zcount", 4, READONLY | FAST, ONE_KEY, Group::SORTED_SET, "Count members in a score range"),
    info("zlexcount", 4, READONLY | FAST, ONE_KEY, Group::SORTED_SET, "Count members in a lexicographical range"),
    info("zrank", 3, READONLY | FAST, ONE_KEY, Group::SORTED_SET, "Rank of a member, lowest score first"),
    info("zrevrank", 3, READONLY | FAST, ONE_KEY, Group::SORTED_SET, "Rank of a member, highest score first"),
    info("zrange", -4, READONLY, ONE_KEY, Group::SORTED_SET, "Members in a range of ranks, scores or names"),
    info("zrangestore", -5, WRITE | DENYOOM, TWO_KEYS, Group::SORTED_SET, "Store a range of members in another key"),
    info("zrevrange", -4, READONLY, ONE_KEY, Group::SORTED_SET, "Members in a range of ranks, highest score first"),
    info("zrangebyscore", -4, READONLY, ONE_KEY, Group::SORTED_SET, "Members in a score range"),
    info("zrevrangebyscore", -4, READONLY, ONE_KEY, Group::SORTED_SET, "Members in a score range, highest score first"),
    info("zrangebylex", -4, READONLY, ONE_KEY, Group::SORTED_SET, "Members in a lexicographical range"),
    info("zrevrangebylex", -4, READONLY, ONE_KEY, Group::SORTED_SET, "Members in a lexicographical range, reversed"),
    info("zrem", -3, WRITE | FAST, ONE_KEY, Group::SORTED_SET, "Remove members"),
    info("zremrangebyrank", 4, WRITE, ONE_KEY, Group::SORTED_SET, "Remove members in a range of ranks"),
    info("zremrangebyscore", 4, WRITE, ONE_KEY, Group::SORTED_SET, "Remove members in a score range"),
    info("zremrangebylex", 4, WRITE, ONE_KEY, Group::SORTED_SET, "Remove members in a lexicographical range"),
    info("zpopmin", -2, WRITE | FAST, ONE_KEY, Group::SORTED_SET, "Remove and return the lowest-scored members"),
    info("zpopmax", -2, WRITE | FAST, ONE_KEY, Group::SORTED_SET, "Remove and return the highest-scored members"),
    info("bzpopmin", -3, WRITE | FAST | BLOCKING | NOSCRIPT, KEYS_BEFORE_TIMEOUT, Group::SORTED_SET, "Pop the lowest-scored member, blocking until one is there"),
    info("bzpopmax", -3, WRITE | FAST | BLOCKING | NOSCRIPT, KEYS_BEFORE_TIMEOUT, Group::SORTED_SET, "Pop the highest-scored member, blocking until one is there"),
    info("zmpop", -4, WRITE, Keys::Custom(zmpop_keys), Group::SORTED_SET, "Pop members from the first non-empty sorted set"),
    info("bzmpop", -5, WRITE | BLOCKING, Keys::Custom(bzmpop_keys), Group::SORTED_SET, "Pop members from the first non-empty sorted set, blocking"),
    info("zrandmember", -2, READONLY, ONE_KEY, Group::SORTED_SET, "Random members"),
    info("zunionstore", -4, WRITE | DENYOOM, Keys::Custom(store_keys), Group::SORTED_SET, "Store the union of sorted sets"),
    info("zinterstore", -4, WRITE | DENYOOM, Keys::Custom(store_keys), Group::SORTED_SET, "Store the intersection of sorted sets"),
    info("zdiffstore", -4, WRITE | DENYOOM, Keys::Custom(store_keys), Group::SORTED_SET, "Store the difference of sorted sets"),
    info("zunion", -3, READONLY, Keys::Custom(numkeys_keys), Group::SORTED_SET, "Union of sorted sets"),
    info("zinter", -3, READONLY, Keys::Custom(numkeys_keys), Group::SORTED_SET, "Intersection of sorted sets"),
    info("zdiff", -3, READONLY, Keys::Custom(numkeys_keys), Group::SORTED_SET, "Difference of sorted sets"),
    info("zintercard", -3, READONLY, Keys::Custom(numkeys_keys), Group::SORTED_SET, "Size of the intersection of sorted sets"),
    info("zscan", -3, READONLY, ONE_KEY, Group::SORTED_SET, "Iterate members and scores"),
];

pub fn bzmpop_keys(args: &[&[u8]]) -> Vec<usize> {
    keys_after_numkeys(args, 2)
}

/// ZUNION numkeys key...
pub fn numkeys_keys(args: &[&[u8]]) -> Vec<usize> {
    keys_after_numkeys(args, 1)
}

/// ZUNIONSTORE dest numkeys key...: the destination and the sources.
pub fn store_keys(args: &[&[u8]]) -> Vec<usize> {
    let mut keys = vec![1];
    keys.extend(keys_after_numkeys(args, 2));
    keys
}

pub fn zmpop_keys(args: &[&[u8]]) -> Vec<usize> {
    keys_after_numkeys(args, 1)
}
