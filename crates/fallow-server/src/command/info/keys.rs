//! Metadata of the keys commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, CommandInfo, Group, Keys, ALL_KEYS, ONE_KEY, TWO_KEYS};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("del", -2, WRITE, ALL_KEYS, Group::KEYSPACE, "Delete keys"),
    info("unlink", -2, WRITE | FAST, ALL_KEYS, Group::KEYSPACE, "Delete keys (in the background in Redis)"),
    info("exists", -2, READONLY | FAST, ALL_KEYS, Group::KEYSPACE, "Count the given keys that exist"),
    info("type", 2, READONLY | FAST, ONE_KEY, Group::KEYSPACE, "Type of the value at a key"),
    info("expire", -3, WRITE | FAST, ONE_KEY, Group::KEYSPACE, "Set a key's time to live in seconds"),
    info("pexpire", -3, WRITE | FAST, ONE_KEY, Group::KEYSPACE, "Set a key's time to live in milliseconds"),
    info("expireat", -3, WRITE | FAST, ONE_KEY, Group::KEYSPACE, "Set a key's expiry as a Unix time in seconds"),
    info("pexpireat", -3, WRITE | FAST, ONE_KEY, Group::KEYSPACE, "Set a key's expiry as a Unix time in milliseconds"),
    info("ttl", 2, READONLY | FAST, ONE_KEY, Group::KEYSPACE, "Time to live of a key in seconds"),
    info("pttl", 2, READONLY | FAST, ONE_KEY, Group::KEYSPACE, "Time to live of a key in milliseconds"),
    info("expiretime", 2, READONLY | FAST, ONE_KEY, Group::KEYSPACE, "Expiry of a key as a Unix time in seconds"),
    info("pexpiretime", 2, READONLY | FAST, ONE_KEY, Group::KEYSPACE, "Expiry of a key as a Unix time in milliseconds"),
    info("persist", 2, WRITE | FAST, ONE_KEY, Group::KEYSPACE, "Remove a key's expiry"),
    info("rename", 3, WRITE, TWO_KEYS, Group::KEYSPACE, "Rename a key"),
    info("renamenx", 3, WRITE | FAST, TWO_KEYS, Group::KEYSPACE, "Rename a key only if the new name does not exist"),
    info("copy", -3, WRITE | DENYOOM, TWO_KEYS, Group::KEYSPACE, "Copy a key"),
    info("dump", 2, READONLY, ONE_KEY, Group::KEYSPACE, "A key's value as Redis's serialized payload"),
    info("restore", -4, WRITE | DENYOOM, ONE_KEY, Group::KEYSPACE, "Create a key from a DUMP payload"),
    // A key's shard does not depend on its database, so one lock covers both databases.
    info("move", 3, WRITE | FAST, ONE_KEY, Group::KEYSPACE, "Move a key to another database"),
    info("swapdb", 3, WRITE | FAST, Keys::All, Group::KEYSPACE, "Swap two databases"),
    info("keys", 2, READONLY, Keys::All, Group::KEYSPACE, "Keys matching a pattern"),
    info("scan", -2, READONLY, Keys::All, Group::KEYSPACE, "Iterate the keyspace"),
    info("randomkey", 1, READONLY, Keys::All, Group::KEYSPACE, "A random key"),
    info("dbsize", 1, READONLY | FAST, Keys::All, Group::KEYSPACE, "Number of keys in the selected database"),
    info("flushdb", -1, WRITE, Keys::All, Group::KEYSPACE, "Delete every key of the selected database"),
    info("flushall", -1, WRITE, Keys::All, Group::KEYSPACE, "Delete every key of every database"),
    info("touch", -2, READONLY | FAST, ALL_KEYS, Group::KEYSPACE, "Record an access to keys"),
    info("object", -2, READONLY, OBJECT_KEY, Group::KEYSPACE, "Inspect the internals of a value"),
];

/// OBJECT <subcommand> <key>.
const OBJECT_KEY: Keys = Keys::Range {
    first: 2,
    last: 2,
    step: 1,
};
