//! Metadata of the keys commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, CommandInfo, Group, Keys, ALL_KEYS, ONE_KEY, TWO_KEYS};
use fallow_store::types::sort::SortOptions;

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
    info("migrate", -6, WRITE, Keys::Custom(migrate_keys), Group::KEYSPACE, "Move keys to another server (DUMP, RESTORE over a connection)"),
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
    info("sort", -2, WRITE | DENYOOM, SORT_KEYS, Group::KEYSPACE, "Sort a list, set or sorted set, or STORE the result as a list"),
    info("sort_ro", -2, READONLY, SORT_RO_KEYS, Group::KEYSPACE, "Sort a list, set or sorted set"),
];

/// SORT key [options]: the key and STORE's destination; with a BY or GET pattern reading other keys, every
/// key (see `Keys::CustomOrAll`).
const SORT_KEYS: Keys = Keys::CustomOrAll {
    named: sort_keys,
    reaches_all: sort_reaches_all,
};

const SORT_RO_KEYS: Keys = Keys::CustomOrAll {
    named: |_| vec![1],
    reaches_all: sort_ro_reaches_all,
};

/// SORT's options parsed as the command parses them (patterns allowed: a user without access to every key
/// is refused by the command itself). None when they do not parse: the command fails before reading.
fn sort_options<'a>(args: &[&'a [u8]], read_only: bool) -> Option<SortOptions<'a>> {
    fallow_store::types::sort::parse(args.get(2..).unwrap_or_default(), read_only, true).ok()
}

fn sort_keys(args: &[&[u8]]) -> Vec<usize> {
    let mut keys = vec![1];
    let store = sort_options(args, false).and_then(|options| options.store);
    keys.extend(store.map(|(_, at)| at + 2));
    keys
}

fn sort_reaches_all(args: &[&[u8]]) -> bool {
    sort_options(args, false).is_some_and(|options| options.reads_other_keys())
}

fn sort_ro_reaches_all(args: &[&[u8]]) -> bool {
    sort_options(args, true).is_some_and(|options| options.reads_other_keys())
}

/// OBJECT <subcommand> <key>.
const OBJECT_KEY: Keys = Keys::Range {
    first: 2,
    last: 2,
    step: 1,
};

/// MIGRATE's keys: the key argument, or those after KEYS when it is empty.
fn migrate_keys(args: &[&[u8]]) -> Vec<usize> {
    match args
        .iter()
        .position(|arg| arg.eq_ignore_ascii_case(b"keys"))
    {
        Some(at) if at > 5 && args.get(3).is_some_and(|key| key.is_empty()) => {
            (at + 1..args.len()).collect()
        }
        _ => vec![3],
    }
}
