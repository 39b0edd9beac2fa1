//! Redis 7.0.15's command table as data: every command's COMMAND INFO fields and COMMAND DOCS, as a real
//! redis-server answers them (written by scripts/gen-redis-commands.py into redis_commands.json and loaded
//! once). COMMAND reports these for each command fallow implements with Redis's semantics, and fallow's
//! own rows (`super::table()`) for its own commands, in the same shape (`Entry`).
use super::keyspec::{key_flags, BeginSearch, FindKeys, GetKeysProc, KeyModel, KeySpec};
use super::{flags, CommandInfo, Keys};
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::LazyLock;

const DATA: &str = include_str!("redis_commands.json");

/// The Redis version the data was taken from.
pub const REDIS_VERSION: &str = "7.0.15";

/// Redis commands fallow answers otherwise (it refuses them): COMMAND lists fallow's own row for them, so
/// they are not presented as Redis's.
const OWN_SEMANTICS: [&str; 3] = ["save", "bgsave", "bgrewriteaof"];

/// Subcommands of Redis containers fallow implements that fallow does not (it answers `unknown
/// subcommand`): COMMAND leaves them out. tests/e2e/test_command.py checks this list against the server.
pub const MISSING_SUBCOMMANDS: [&str; 0] = [];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RedisTable {
    redis_version: String,
    commands: Vec<RedisCommand>,
}

/// One command (or subcommand) of Redis's table: COMMAND INFO's fields and its docs.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisCommand {
    /// Full name: `get`, `config|get`.
    pub name: String,
    pub arity: i64,
    pub flags: Vec<String>,
    pub first_key: i64,
    pub last_key: i64,
    pub key_step: i64,
    /// With their `@`.
    pub acl_categories: Vec<String>,
    pub tips: Vec<String>,
    pub key_specs: Vec<KeySpec>,
    /// None for a command that is no container (Redis writes an empty set then, an array otherwise).
    pub subcommands: Option<Vec<RedisCommand>>,
    pub docs: Docs,
}

/// COMMAND DOCS's fields, each present exactly when Redis writes it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Docs {
    pub summary: Option<String>,
    pub since: Option<String>,
    pub group: String,
    pub complexity: Option<String>,
    pub doc_flags: Option<Vec<String>>,
    pub deprecated_since: Option<String>,
    pub replaced_by: Option<String>,
    /// (since, changes) pairs.
    pub history: Option<Vec<(String, String)>>,
    pub arguments: Option<Vec<Arg>>,
}

/// One node of a command's arguments tree.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arg {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub key_spec_index: Option<i64>,
    pub token: Option<String>,
    pub summary: Option<String>,
    pub since: Option<String>,
    pub deprecated_since: Option<String>,
    pub flags: Option<Vec<String>>,
    pub arguments: Option<Vec<Arg>>,
}

static TABLE: LazyLock<RedisTable> = LazyLock::new(|| {
    let table: RedisTable = serde_json::from_str(DATA).expect("redis_commands.json parses");
    assert_eq!(table.redis_version, REDIS_VERSION);
    for command in &table.commands {
        assert!(!command.name.contains('|'), "{}", command.name);
        for sub in command.subcommands.iter().flatten() {
            let (parent, _) = sub.name.split_once('|').expect("a subcommand's full name");
            assert_eq!(parent, command.name);
            assert!(sub.subcommands.is_none(), "one level of subcommands");
        }
    }
    table
});

/// Redis's top-level commands by name (COMMAND looks one up for each of fallow's ~250 rows).
static BY_NAME: LazyLock<HashMap<&'static str, &'static RedisCommand>> = LazyLock::new(|| {
    let table: &'static RedisTable = &TABLE;
    table
        .commands
        .iter()
        .map(|command| (command.name.as_str(), command))
        .collect()
});

/// Redis's top-level command of this (lower-case) name.
pub fn redis_command(name: &str) -> Option<&'static RedisCommand> {
    BY_NAME.get(name).copied()
}

/// Every top-level command of Redis's table.
pub fn redis_commands() -> &'static [RedisCommand] {
    &TABLE.commands
}

impl RedisCommand {
    /// Whether `argc` arguments (the name included) fit Redis's arity for this (sub)command.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i64;
        if self.arity > 0 {
            argc == self.arity
        } else {
            argc >= -self.arity
        }
    }

    /// What COMMAND GETKEYS needs of the command: its specs, and Redis's getkeys proc for it.
    pub fn key_model(&'static self) -> KeyModel<'static> {
        KeyModel {
            arity: self.arity,
            specs: Cow::Borrowed(&self.key_specs),
            proc: GetKeysProc::for_redis_command(&self.name),
            no_mandatory_keys: self.flags.iter().any(|flag| flag == "no_mandatory_keys"),
        }
    }
}

/// A command as COMMAND reports it: Redis's entry, or fallow's own row.
#[derive(Clone, Copy)]
pub enum Entry {
    Redis(&'static RedisCommand),
    Own(&'static CommandInfo),
}

impl Entry {
    /// How COMMAND reports one of fallow's commands.
    pub fn of(info: &'static CommandInfo) -> Entry {
        match redis_command(info.name) {
            Some(redis) if !OWN_SEMANTICS.contains(&info.name) => Entry::Redis(redis),
            _ => Entry::Own(info),
        }
    }

    pub fn full_name(&self) -> &'static str {
        match self {
            Entry::Redis(redis) => &redis.name,
            Entry::Own(info) => info.name,
        }
    }

    /// The subcommands fallow implements; None for a command that is no container.
    pub fn subcommands(&self) -> Option<Vec<Entry>> {
        let Entry::Redis(redis) = self else {
            return None;
        };
        let subs = redis.subcommands.as_ref()?;
        Some(
            subs.iter()
                .filter(|sub| !MISSING_SUBCOMMANDS.contains(&sub.name.as_str()))
                .map(Entry::Redis)
                .collect(),
        )
    }

    /// The command's ACL categories, without their `@`.
    pub fn acl_categories(&self) -> Vec<&'static str> {
        match self {
            Entry::Redis(redis) => redis
                .acl_categories
                .iter()
                .map(|category| category.trim_start_matches('@'))
                .collect(),
            Entry::Own(info) => info.categories(),
        }
    }

    /// What COMMAND GETKEYS needs of the command.
    pub fn key_model(&self) -> KeyModel<'static> {
        match self {
            Entry::Redis(redis) => redis.key_model(),
            Entry::Own(info) => KeyModel {
                arity: info.arity as i64,
                specs: Cow::Owned(own_key_specs(info)),
                proc: own_proc(info),
                no_mandatory_keys: false,
            },
        }
    }
}

/// Finds a command by its full name (`get`, `CONFIG|GET`), as Redis's `lookupCommandBySds`: only commands
/// and subcommands fallow implements.
pub fn lookup(full_name: &[u8]) -> Option<Entry> {
    let mut parts = full_name.split(|&byte| byte == b'|');
    let name = parts.next()?;
    let sub = parts.next();
    if parts.next().is_some() {
        return None; // one level of subcommands
    }
    let entry = Entry::of(super::lookup(name)?.1);
    match sub {
        None => Some(entry),
        Some(sub) => find_subcommand(entry, sub),
    }
}

/// The command a call runs, as Redis's `lookupCommand`: a container's subcommand by its first argument.
pub fn lookup_call(argv: &[&[u8]]) -> Option<Entry> {
    let entry = Entry::of(super::lookup(argv.first()?)?.1);
    match (argv.get(1), entry.subcommands()) {
        (Some(sub), Some(_)) => find_subcommand(entry, sub),
        _ => Some(entry),
    }
}

fn find_subcommand(entry: Entry, sub: &[u8]) -> Option<Entry> {
    entry.subcommands()?.into_iter().find(|candidate| {
        let (_, name) = candidate.full_name().split_once('|').unwrap_or_default();
        name.as_bytes().eq_ignore_ascii_case(sub)
    })
}

/// How a fallow command touches its keys, in key-spec flags.
fn own_access(info: &CommandInfo) -> u32 {
    if info.flags & flags::WRITE != 0 {
        key_flags::RW | key_flags::UPDATE
    } else {
        key_flags::RO | key_flags::ACCESS
    }
}

/// A fallow command's key specs, from its row's key positions: a range is an index spec with a range;
/// positions computed from the arguments are an unknown spec (GETKEYS asks `own_proc`).
pub fn own_key_specs(info: &CommandInfo) -> Vec<KeySpec> {
    let flags = own_access(info);
    match info.keys {
        Keys::None | Keys::All => Vec::new(),
        Keys::Range { first, last, step } => vec![KeySpec {
            notes: None,
            flags,
            begin_search: BeginSearch::Index(first as i64),
            find_keys: FindKeys::Range {
                lastkey: if last < 0 { last } else { last - first } as i64,
                keystep: step as i64,
                limit: 0,
            },
        }],
        Keys::Custom(_) | Keys::CustomOrAll { .. } => vec![KeySpec {
            notes: Some("Positions computed from the arguments".into()),
            flags,
            begin_search: BeginSearch::Unknown,
            find_keys: FindKeys::Unknown,
        }],
    }
}

fn own_proc(info: &CommandInfo) -> Option<GetKeysProc> {
    match info.keys {
        Keys::Custom(named) | Keys::CustomOrAll { named, .. } => {
            Some(GetKeysProc::Fallow(named, own_access(info)))
        }
        Keys::None | Keys::All | Keys::Range { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::info::keyspec::key_flags;

    /// Redis's command for a call (`lookupCommand` over all of Redis's table, not only fallow's).
    fn redis_call(argv: &[&[u8]]) -> Option<&'static RedisCommand> {
        let name = std::str::from_utf8(argv[0]).ok()?.to_ascii_lowercase();
        let command = redis_command(&name)?;
        match (argv.get(1), &command.subcommands) {
            (Some(sub), Some(subs)) => {
                let full = format!(
                    "{name}|{}",
                    String::from_utf8_lossy(sub).to_ascii_lowercase()
                );
                subs.iter().find(|candidate| candidate.name == full)
            }
            _ => Some(command),
        }
    }

    /// GETKEYSANDFLAGS as text: `key:FLAG,flag key:...`, or the error.
    fn keys_and_flags(argv: &[&str]) -> String {
        let argv: Vec<&[u8]> = argv.iter().map(|arg| arg.as_bytes()).collect();
        let Some(command) = redis_call(&argv) else {
            return "ERR Invalid command specified".into();
        };
        match command.key_model().get_keys(&argv) {
            Ok(keys) => keys
                .iter()
                .map(|&(at, flags)| {
                    let names: Vec<&str> = key_flags::names(flags).collect();
                    format!("{}:{}", String::from_utf8_lossy(argv[at]), names.join(","))
                })
                .collect::<Vec<_>>()
                .join(" "),
            Err(error) => error.message().into(),
        }
    }

    /// COMMAND GETKEYSANDFLAGS of Redis 7.0.15 for each call (taken from a running redis-server).
    #[rustfmt::skip]
    const REDIS_ANSWERS: &[(&[&str], &str)] = &[
        (&["get", "k"], "k:RO,access"),
        (&["set", "k", "v"], "k:OW,update"),
        (&["set", "k", "v", "get"], "k:RW,access,update"),
        (&["set", "k", "v", "GET", "ex", "1"], "k:RW,access,update"),
        (&["mset", "a", "1", "b", "2"], "a:OW,update b:OW,update"),
        (&["del", "a", "b", "c"], "a:RM,delete b:RM,delete c:RM,delete"),
        (&["zunionstore", "d", "2", "a", "b", "weights", "1", "2"], "d:OW,update a:RO,access b:RO,access"),
        (&["zunionstore", "d", "abc", "a"], "ERR Invalid arguments specified for command"),
        (&["zunionstore", "d", "0", "a"], "ERR Invalid arguments specified for command"),
        (&["zunionstore", "d", "3", "a", "b"], "ERR Invalid arguments specified for command"),
        (&["zinter", "2", "a", "b"], "a:RO,access b:RO,access"),
        (&["zdiff", "1", "a", "withscores"], "a:RO,access"),
        (&["eval", "s", "2", "k1", "k2", "a1"], "k1:RW,access,update k2:RW,access,update"),
        (&["eval", "s", "0"], ""),
        (&["eval", "s", "5", "k1"], ""),
        (&["evalsha_ro", "s", "1", "k"], "k:RO,access"),
        (&["fcall", "f", "1", "k"], "k:RW,access,update"),
        (&["sort", "l", "limit", "0", "1", "store", "d", "get", "#"], "l:RO,access d:OW,update"),
        (&["sort", "l", "store"], "l:RO,access"),
        (&["sort", "l", "store", "a", "store", "b"], "l:RO,access b:OW,update"),
        (&["sort_ro", "l", "by", "x"], "l:RO,access"),
        (&["migrate", "h", "6379", "k", "0", "1000"], "k:RW,access,delete"),
        (&["migrate", "h", "6379", "", "0", "1000", "keys", "a", "b"], "a:RW,access,delete b:RW,access,delete"),
        (&["migrate", "h", "6379", "k", "0", "1000", "keys", "a", "b"], "ERR Invalid arguments specified for command"),
        (&["migrate", "h", "6379", "", "0", "1000", "copy", "auth", "pw", "keys", "a"], "a:RW,access,delete"),
        (&["xread", "count", "1", "streams", "s1", "s2", "0", "0"], "s1:RO,access s2:RO,access"),
        (&["xreadgroup", "group", "g", "c", "streams", "s", "0"], "s:RO,access"),
        (&["xread", "streams", "s1"], "ERR Invalid number of arguments specified for command"),
        (&["xread", "block", "0", "streams", "s", "0"], "s:RO,access"),
        (&["georadius", "k", "0", "0", "1", "km", "store", "d"], "k:RO,access d:OW,update"),
        (&["georadiusbymember", "k", "m", "1", "km", "storedist", "d"], "k:RO,access d:OW,update"),
        (&["georadius_ro", "k", "0", "0", "1", "km"], "k:RO,access"),
        (&["bitfield", "k", "get", "u8", "0"], "k:RO,access"),
        (&["bitfield", "k", "set", "u8", "0", "1"], "k:RW,access,update"),
        (&["bitfield", "k", "overflow", "wrap", "get", "u8", "0"], "k:RO,access"),
        (&["bitfield_ro", "k", "get", "u8", "0"], "k:RO,access"),
        (&["lmove", "a", "b", "left", "right"], "a:RW,access,delete b:RW,insert"),
        (&["blmpop", "0", "2", "a", "b", "left"], "a:RW,access,delete b:RW,access,delete"),
        (&["lmpop", "2", "a", "b", "left"], "a:RW,access,delete b:RW,access,delete"),
        (&["zmpop", "1", "z", "min"], "z:RW,access,delete"),
        (&["bzmpop", "0", "1", "z", "min"], "z:RW,access,delete"),
        (&["sintercard", "2", "a", "b", "limit", "1"], "a:RO,access b:RO,access"),
        (&["zintercard", "1", "a"], "a:RO,access"),
        (&["xadd", "s", "*", "f", "v"], "s:RW,update"),
        (&["rename", "a", "b"], "a:RW,access,delete b:OW,update"),
        (&["object", "encoding", "k"], "k:RO"),
        (&["memory", "usage", "k"], "k:RO"),
        (&["lcs", "a", "b"], "a:RO,access b:RO,access"),
        (&["ping", "x"], "ERR The command has no key arguments"),
        (&["nosuch", "a"], "ERR Invalid command specified"),
        (&["get", "a", "b"], "ERR Invalid number of arguments specified for command"),
        (&["config", "get", "x"], "ERR The command has no key arguments"),
        (&["object", "nosuch", "k"], "ERR Invalid command specified"),
        (&["xinfo", "stream", "s"], "s:RO,access"),
        (&["xgroup", "create", "s", "g", "$"], "s:RW,insert"),
        (&["pfcount", "a", "b"], "a:RW,access b:RW,access"),
        (&["getex", "k", "persist"], "k:RW,access,update"),
        (&["zrangestore", "d", "s", "0", "-1"], "d:OW,update s:RO,access"),
        (&["bitop", "and", "d", "a", "b"], "d:OW,update a:RO,access b:RO,access"),
        (&["smove", "a", "b", "m"], "a:RW,access,delete b:RW,insert"),
        (&["touch", "a", "b"], "a:RO b:RO"),
        (&["exists", "a"], "a:RO"),
        (&["client", "kill", "x"], "ERR The command has no key arguments"),
        (&["blpop", "a", "b", "0"], "a:RW,access,delete b:RW,access,delete"),
        (&["copy", "a", "b"], "a:RO,access b:OW,update"),
        (&["restore", "k", "0", "v"], "k:OW,update"),
        (&["getdel", "k"], "k:RW,access,delete"),
        (&["expire", "k", "1"], "k:RW,update"),
        (&["incr", "k"], "k:RW,access,update"),
        (&["hset", "h", "f", "v"], "h:RW,update"),
        (&["sadd", "s", "m"], "s:RW,insert"),
        (&["sunionstore", "d", "a", "b"], "d:OW,update a:RO,access b:RO,access"),
        (&["zadd", "z", "1", "m"], "z:RW,update"),
        (&["xclaim", "s", "g", "c", "0", "0-1"], "s:RW,update"),
        (&["xautoclaim", "s", "g", "c", "0", "0"], "s:RW,delete"),
        (&["pfmerge", "d", "a", "b"], "d:RW,access,insert a:RO,access b:RO,access"),
        (&["geoadd", "g", "0", "0", "m"], "g:RW,update"),
        (&["geosearchstore", "d", "s", "frommember", "m", "byradius", "1", "km"], "d:OW,update s:RO,access"),
        (&["publish", "c", "m"], "ERR The command has no key arguments"),
        (&["subscribe", "c"], "ERR The command has no key arguments"),
        (&["watch", "a", "b"], "a:RO b:RO"),
        (&["type", "k"], "k:RO"),
    ];

    #[test]
    fn key_specs_find_what_redis_finds() {
        for (argv, expected) in REDIS_ANSWERS {
            assert_eq!(&keys_and_flags(argv), expected, "{argv:?}");
        }
    }

    #[test]
    fn data_is_redis_7_0_table() {
        assert_eq!(redis_commands().len(), 240);
        let get = redis_command("get").unwrap();
        assert_eq!(
            (get.arity, get.first_key, get.last_key, get.key_step),
            (2, 1, 1, 1)
        );
        assert_eq!(get.docs.summary.as_deref(), Some("Get the value of a key"));
        let config = redis_command("config").unwrap();
        let subs = config.subcommands.as_ref().unwrap();
        assert!(subs.iter().any(|sub| sub.name == "config|get"));
        for name in MISSING_SUBCOMMANDS {
            let (parent, _) = name.split_once('|').unwrap();
            let parent = redis_command(parent).unwrap();
            assert!(
                parent
                    .subcommands
                    .iter()
                    .flatten()
                    .any(|sub| sub.name == name),
                "{name}"
            );
        }
        for name in OWN_SEMANTICS {
            assert!(redis_command(name).is_some(), "{name}");
        }
    }

    #[test]
    fn lookup_follows_full_names_and_implemented_subcommands() {
        assert_eq!(lookup(b"GET").map(|entry| entry.full_name()), Some("get"));
        assert_eq!(
            lookup(b"Config|GET").map(|entry| entry.full_name()),
            Some("config|get")
        );
        assert!(lookup(b"get|x").is_none());
        assert!(lookup(b"config|get|x").is_none());
        assert!(lookup(b"client|tracking").is_some());
        assert!(lookup(b"replconf").is_none(), "fallow lacks it");
        assert!(
            matches!(lookup(b"save"), Some(Entry::Own(_))),
            "fallow refuses SAVE"
        );
        let call: [&[u8]; 3] = [b"object", b"encoding", b"k"];
        assert_eq!(
            lookup_call(&call).map(|entry| entry.full_name()),
            Some("object|encoding")
        );
        assert!(lookup_call(&[b"object", b"nosuch"]).is_none());
        assert_eq!(
            lookup_call(&[b"config"]).map(|entry| entry.full_name()),
            Some("config")
        );
    }

    #[test]
    fn own_commands_have_specs_in_redis_form() {
        for info in super::super::table() {
            let Entry::Own(info) = Entry::of(info) else {
                continue;
            };
            let specs = own_key_specs(info);
            match info.keys {
                Keys::None | Keys::All => assert!(specs.is_empty(), "{}", info.name),
                _ => assert_eq!(specs.len(), 1, "{}", info.name),
            }
        }
        let (_, lock) = super::super::lookup(b"txn.lock").unwrap();
        let argv: [&[u8]; 3] = [b"txn.lock", b"a", b"b"];
        let keys = Entry::of(lock).key_model().get_keys(&argv).unwrap();
        assert_eq!(
            keys.iter().map(|&(at, _)| at).collect::<Vec<_>>(),
            vec![1, 2]
        );
    }

    /// fallow locks (and checks ACL key patterns on) its rows' key positions; they must be the keys Redis's
    /// specs find for every valid call, so the data and the locking cannot drift apart.
    #[test]
    fn lock_positions_are_the_keys_redis_finds() {
        let mut compared = 0;
        for (argv, _) in REDIS_ANSWERS {
            let argv: Vec<&[u8]> = argv.iter().map(|arg| arg.as_bytes()).collect();
            let (Some((_, info)), Some(entry)) =
                (super::super::lookup(argv[0]), lookup_call(&argv))
            else {
                continue; // not a fallow command
            };
            let keys = entry.key_model().get_keys(&argv).unwrap_or_default();
            if keys.is_empty() {
                continue; // an invalid call (EVAL with too few keys) fails before it touches a key
            }
            let mut redis: Vec<usize> = keys.iter().map(|&(at, _)| at).collect();
            let mut fallow = super::super::key_positions(info, &argv);
            redis.sort_unstable();
            fallow.sort_unstable();
            assert_eq!(fallow, redis, "{argv:?}");
            compared += 1;
        }
        assert!(compared > 60, "{compared}");
    }

    /// fallow's rows check arity before a handler runs: they must be Redis's, and a fixed key range
    /// must be Redis's legacy (first, last, step) unless the command is a container or computes its keys.
    #[test]
    fn rows_agree_with_redis_on_arity_and_key_range() {
        for info in super::super::table() {
            let Entry::Redis(redis) = Entry::of(info) else {
                continue;
            };
            assert_eq!(info.arity as i64, redis.arity, "{}", info.name);
            if let (Keys::Range { first, last, step }, None) = (info.keys, &redis.subcommands) {
                let range = (first as i64, last as i64, step as i64);
                assert_eq!(
                    range,
                    (redis.first_key, redis.last_key, redis.key_step),
                    "{}",
                    info.name
                );
            }
        }
    }
}
