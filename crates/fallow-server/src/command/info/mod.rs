//! Command metadata apart from execution: each command's name, arity, flags, key positions, group and
//! summary, as data (Redis's command table without its `proc`). A leaf: it names nothing else of the
//! server, so the ACL rules, transaction lock modes and queued writes depend on it and not on handlers.
//! Each family's rows live in a child file (`info/<family>.rs`) beside its handlers in `command/<family>.rs`;
//! `command::dispatch` pairs every row with its handler by name at start-up.
pub mod acl;
pub mod bag;
pub mod bitmap;
pub mod bulk;
pub mod connection;
pub mod elastic;
pub mod fscache;
pub mod geo;
pub mod hash;
pub mod hyperloglog;
pub mod keys;
pub mod keyspec;
pub mod list;
pub mod pubsub;
pub mod redis;
pub mod redis_keys;
pub mod scripting;
pub mod server;
pub mod set;
pub mod stream;
pub mod string;
pub mod tenant;
pub mod topn;
pub mod transaction;
pub mod txn;
pub mod uid;
pub mod zset;

use std::collections::HashMap;
use std::sync::LazyLock;

/// Every family's rows, in the table's fixed order (which indexes `command_stats`). Adding a family adds
/// one line here.
const FAMILIES: &[&[CommandInfo]] = &[
    string::COMMANDS,
    bitmap::COMMANDS,
    hyperloglog::COMMANDS,
    keys::COMMANDS,
    hash::COMMANDS,
    set::COMMANDS,
    zset::COMMANDS,
    geo::COMMANDS,
    list::COMMANDS,
    stream::COMMANDS,
    pubsub::COMMANDS,
    scripting::COMMANDS,
    transaction::COMMANDS,
    txn::COMMANDS,
    connection::COMMANDS,
    server::COMMANDS,
    acl::COMMANDS,
    bulk::COMMANDS,
    elastic::COMMANDS,
    tenant::COMMANDS,
    topn::COMMANDS,
    bag::COMMANDS,
    uid::COMMANDS,
    fscache::COMMANDS,
];

/// Command flags (Redis's command flags, as COMMAND INFO lists them).
pub mod flags {
    pub const WRITE: u32 = 1 << 0;
    pub const READONLY: u32 = 1 << 1;
    pub const DENYOOM: u32 = 1 << 2;
    pub const ADMIN: u32 = 1 << 3;
    pub const PUBSUB: u32 = 1 << 4;
    pub const NOSCRIPT: u32 = 1 << 5;
    pub const BLOCKING: u32 = 1 << 6;
    pub const LOADING: u32 = 1 << 7;
    pub const STALE: u32 = 1 << 8;
    pub const FAST: u32 = 1 << 9;
    pub const NO_AUTH: u32 = 1 << 10;
    /// Not queued inside MULTI: runs at once (EXEC, DISCARD, MULTI, WATCH, ...).
    pub const NO_MULTI: u32 = 1 << 11;
    /// Allowed while a RESP2 connection is subscribed.
    pub const SUBSCRIBE_CONTEXT: u32 = 1 << 12;
    pub const NAMES: [(u32, &str); 12] = [
        (WRITE, "write"),
        (READONLY, "readonly"),
        (DENYOOM, "denyoom"),
        (ADMIN, "admin"),
        (PUBSUB, "pubsub"),
        (NOSCRIPT, "noscript"),
        (BLOCKING, "blocking"),
        (LOADING, "loading"),
        (STALE, "stale"),
        (FAST, "fast"),
        (NO_AUTH, "no_auth"),
        (NO_MULTI, "no_multi"),
    ];
}

/// Where a command's keys are in its arguments; decides which shards it locks.
#[derive(Clone, Copy)]
pub enum Keys {
    /// No keys (connection and server commands).
    None,
    /// Every shard (KEYS, SCAN, FLUSHALL, DBSIZE, ...).
    All,
    /// Keys at first..=last stepping by step; a negative last counts from the end (-1 = last argument).
    Range { first: i32, last: i32, step: i32 },
    /// Positions computed from the arguments (commands with a numkeys argument).
    Custom(fn(&[&[u8]]) -> Vec<usize>),
    /// Positions computed from the arguments, for a command some of whose calls also read keys no argument
    /// names (SORT's BY and GET patterns name them from the values sorted): `reaches_all` tells such a call,
    /// which locks every shard (its keys cannot be known before it reads). The named keys are still its keys
    /// for ACL key patterns, transactions' record locks and tier-2 read-ahead.
    CustomOrAll {
        named: fn(&[&[u8]]) -> Vec<usize>,
        reaches_all: fn(&[&[u8]]) -> bool,
    },
}

/// Key spec for a command with one key at position 1.
pub const ONE_KEY: Keys = Keys::Range {
    first: 1,
    last: 1,
    step: 1,
};

/// Every argument after the name is a key (DEL, EXISTS, MGET, SUNION, ...).
pub const ALL_KEYS: Keys = Keys::Range {
    first: 1,
    last: -1,
    step: 1,
};

/// The first two arguments are keys (RENAME, SMOVE, LMOVE, ZRANGESTORE, ...).
pub const TWO_KEYS: Keys = Keys::Range {
    first: 1,
    last: 2,
    step: 1,
};

/// Every argument but the last (a blocking command's timeout) is a key.
pub const KEYS_BEFORE_TIMEOUT: Keys = Keys::Range {
    first: 1,
    last: -2,
    step: 1,
};

/// A command family: its ACL category and the group COMMAND DOCS reports. A data type of fallow's own
/// declares its group in its family file (`topn::TOPN`, `bag::BAG`); ACL categories follow from the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    pub category: &'static str,
    pub docs_group: &'static str,
    /// Its section's title in docs/commands.md.
    pub title: &'static str,
}

impl Group {
    pub const STRING: Group = Group::new("string", "string", "Strings and counters");
    pub const BITMAP: Group = Group::new("bitmap", "bitmap", "Bitmaps and bitfields");
    pub const HYPERLOGLOG: Group = Group::new("hyperloglog", "hyperloglog", "HyperLogLog");
    pub const KEYSPACE: Group = Group::new("keyspace", "generic", "Keys");
    pub const HASH: Group = Group::new("hash", "hash", "Hashes");
    pub const SET: Group = Group::new("set", "set", "Sets");
    pub const SORTED_SET: Group = Group::new("sortedset", "sorted-set", "Sorted sets");
    /// Positions in sorted sets (GEOADD, GEOSEARCH, ...).
    pub const GEO: Group = Group::new("geo", "geo", "Geo");
    pub const LIST: Group = Group::new("list", "list", "Lists");
    pub const STREAM: Group = Group::new("stream", "stream", "Streams");
    pub const PUB_SUB: Group = Group::new("pubsub", "pubsub", "Pub/sub");
    pub const TRANSACTION: Group = Group::new("transaction", "transactions", "Transactions");
    pub const CONNECTION: Group = Group::new("connection", "connection", "Connection");
    pub const SERVER: Group = Group::new("server", "server", "Server");

    pub const fn new(
        category: &'static str,
        docs_group: &'static str,
        title: &'static str,
    ) -> Group {
        Group {
            category,
            docs_group,
            title,
        }
    }
}

pub struct CommandInfo {
    /// Lower-case name.
    pub name: &'static str,
    /// Argument count including the name; negative = at least -arity.
    pub arity: i32,
    pub flags: u32,
    pub keys: Keys,
    pub group: Group,
    pub summary: &'static str,
}

/// Shorthand for table rows: `info("get", 2, READONLY | FAST, ONE_KEY, Group::STRING, "...")`.
pub const fn info(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: Keys,
    group: Group,
    summary: &'static str,
) -> CommandInfo {
    CommandInfo {
        name,
        arity,
        flags,
        keys,
        group,
        summary,
    }
}

/// Command names are at most this long; longer lookups fail without hashing.
const NAME_BYTES_MAX: usize = 32;

static TABLE: LazyLock<Vec<&'static CommandInfo>> = LazyLock::new(|| {
    let table: Vec<&'static CommandInfo> =
        FAMILIES.iter().flat_map(|family| family.iter()).collect();
    for info in &table {
        assert_eq!(
            info.name,
            info.name.to_ascii_lowercase(),
            "names are lower-case"
        );
        assert!(
            info.name.len() <= NAME_BYTES_MAX,
            "{} is too long",
            info.name
        );
        assert!(info.arity != 0, "{} has an arity", info.name);
        assert!(
            info.flags & flags::WRITE == 0 || info.flags & flags::READONLY == 0,
            "{} is not both a write and read-only",
            info.name
        );
    }
    table
});

type NameIndex = HashMap<&'static str, usize, foldhash::fast::RandomState>;

static BY_NAME: LazyLock<NameIndex> = LazyLock::new(|| {
    let mut by_name = NameIndex::default();
    for (index, info) in TABLE.iter().enumerate() {
        let previous = by_name.insert(info.name, index);
        assert!(previous.is_none(), "command {} defined twice", info.name);
    }
    by_name
});

/// Every group, in the order its first command comes in the table (docs/commands.md's sections).
pub fn groups() -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for info in table() {
        if !groups.contains(&info.group) {
            groups.push(info.group);
        }
    }
    groups
}

/// Every command, in a fixed order (indexes `Server::command_stats`).
pub fn table() -> &'static [&'static CommandInfo] {
    &TABLE
}

/// Finds a command by name, in any case, with its index in `table()`.
pub fn lookup(name: &[u8]) -> Option<(usize, &'static CommandInfo)> {
    if name.len() > NAME_BYTES_MAX {
        return None;
    }
    let mut lower = [0u8; NAME_BYTES_MAX];
    let lower = &mut lower[..name.len()];
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    let name = std::str::from_utf8(lower).ok()?;
    BY_NAME.get(name).map(|&index| (index, TABLE[index]))
}

/// The ACL categories, in the order ACL CAT lists them: Redis's, then those of fallow's own groups in
/// table order (`server`, `topn`, `bag`, ...).
pub fn categories() -> &'static [&'static str] {
    static CATEGORIES: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
        let mut categories = REDIS_CATEGORIES.to_vec();
        for info in table() {
            if !categories.contains(&info.group.category) {
                categories.push(info.group.category);
            }
        }
        categories
    });
    &CATEGORIES
}

/// Redis 7.0's ACL categories in its order.
pub const REDIS_CATEGORIES: [&str; 21] = [
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

impl CommandInfo {
    /// Whether `argc` arguments (the name included) fit the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        if self.arity > 0 {
            argc == self.arity as usize
        } else {
            argc >= (-self.arity) as usize
        }
    }

    /// ACL categories of the command, for COMMAND INFO and ACL rules: Redis 7.0's for its commands, else
    /// derived from the group and flags.
    pub fn categories(&self) -> Vec<&'static str> {
        if let Some(redis) = redis_keys::redis_command(self.name) {
            return redis_category_names(redis_keys::category_bits(redis));
        }
        let mut categories = vec![self.group.category];
        let pairs = [
            (flags::WRITE, "write"),
            (flags::READONLY, "read"),
            (flags::ADMIN, "admin"),
            (flags::ADMIN, "dangerous"),
            (flags::FAST, "fast"),
            (flags::BLOCKING, "blocking"),
        ];
        for (flag, category) in pairs {
            if self.flags & flag != 0 {
                categories.push(category);
            }
        }
        if self.flags & flags::FAST == 0 {
            categories.push("slow");
        }
        let reaches_any_key = matches!(self.keys, Keys::CustomOrAll { .. });
        if reaches_any_key || (matches!(self.keys, Keys::All) && self.flags & flags::WRITE != 0) {
            categories.push("dangerous");
        }
        categories.dedup();
        categories
    }
}

/// The names of Redis category bits (`REDIS_CATEGORIES` order).
pub fn redis_category_names(bits: u32) -> Vec<&'static str> {
    REDIS_CATEGORIES
        .iter()
        .enumerate()
        .filter(|(index, _)| bits & (1 << index) != 0)
        .map(|(_, name)| *name)
        .collect()
}

/// The argument positions of a command's keys.
pub fn key_positions(info: &CommandInfo, args: &[&[u8]]) -> Vec<usize> {
    match info.keys {
        Keys::None | Keys::All => Vec::new(),
        Keys::Range { first, last, step } => {
            let last = if last < 0 {
                args.len() as i32 + last
            } else {
                last.min(args.len() as i32 - 1)
            };
            (first..=last)
                .step_by(step as usize)
                .map(|position| position as usize)
                .filter(|&position| position < args.len())
                .collect()
        }
        Keys::Custom(positions)
        | Keys::CustomOrAll {
            named: positions, ..
        } => positions(args)
            .into_iter()
            .filter(|&position| position < args.len())
            .collect(),
    }
}

/// Whether this call of the command may read or write any key, so it must hold every shard: the commands
/// over the whole keyspace, and a `CustomOrAll` call that reaches keys its arguments do not name.
pub fn reaches_every_key(info: &CommandInfo, args: &[&[u8]]) -> bool {
    match info.keys {
        Keys::All => true,
        Keys::CustomOrAll { reaches_all, .. } => reaches_all(args),
        _ => false,
    }
}

/// `numkeys` keys following the argument at `at`, bounded by the argument count.
fn keys_after_numkeys(args: &[&[u8]], at: usize) -> Vec<usize> {
    let count = args
        .get(at)
        .and_then(|arg| fallow_proto::resp::parse_i64(arg))
        .filter(|&count| count > 0)
        .map_or(0, |count| (count as usize).min(args.len()));
    (at + 1..at + 1 + count).collect()
}

/// Case-insensitive comparison of an argument with a subcommand name.
fn is(arg: &[u8], option: &str) -> bool {
    arg.eq_ignore_ascii_case(option.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        assert!(table().len() > 150, "{} commands", table().len());
        assert_eq!(lookup(b"GeT").map(|(_, info)| info.name), Some("get"));
        assert!(lookup(b"nosuchcommand").is_none());
        assert!(lookup(&[b'a'; NAME_BYTES_MAX + 1]).is_none());
    }

    #[test]
    fn key_positions_follow_specs() {
        let (_, mset) = lookup(b"mset").unwrap();
        let args: Vec<&[u8]> = vec![b"mset", b"a", b"1", b"b", b"2"];
        assert_eq!(key_positions(mset, &args), vec![1, 3]);
        let (_, get) = lookup(b"get").unwrap();
        assert_eq!(key_positions(get, &[b"get", b"k"]), vec![1]);
    }

    #[test]
    fn sort_names_its_keys_and_reaches_every_key_through_patterns() {
        let (_, sort) = lookup(b"sort").unwrap();
        let args = |text: &'static str| -> Vec<&'static [u8]> {
            text.split(' ').map(str::as_bytes).collect()
        };
        let stored = args("sort l limit 0 1 store d get #");
        assert_eq!(key_positions(sort, &stored), vec![1, 6]);
        assert!(!reaches_every_key(sort, &stored));
        assert!(reaches_every_key(sort, &args("sort l by w_*")));
        assert!(reaches_every_key(sort, &args("sort l get h_*->f")));
        assert!(!reaches_every_key(sort, &args("sort l by nosort by w_*")));
        assert!(!reaches_every_key(sort, &args("sort l by w_* nonsense")));
        let (_, sort_ro) = lookup(b"sort_ro").unwrap();
        assert_eq!(key_positions(sort_ro, &args("sort_ro l store d")), vec![1]);
        assert!(reaches_every_key(sort_ro, &args("sort_ro l get w_*")));
        assert!(sort_ro.categories().contains(&"dangerous"));
        let (_, keys) = lookup(b"keys").unwrap();
        assert!(reaches_every_key(keys, &args("keys *")));
    }

    #[test]
    fn categories_are_redis_then_fallow_groups() {
        let categories = categories();
        assert_eq!(&categories[..REDIS_CATEGORIES.len()], &REDIS_CATEGORIES);
        for own in ["server", "topn", "bag"] {
            assert!(categories.contains(&own), "{own}");
        }
        for info in table() {
            for category in info.categories() {
                assert!(categories.contains(&category), "{}: {category}", info.name);
            }
        }
    }
}
