//! Generic keyspace commands (Redis db.c / expire.c / object.c): DEL UNLINK EXISTS TYPE, the EXPIRE and
//! TTL families, PERSIST, RENAME(NX), COPY, MOVE, SWAPDB, KEYS, SCAN, RANDOMKEY, DBSIZE, FLUSHDB,
//! FLUSHALL, TOUCH and OBJECT. Multi-key commands declare every key so they run atomically; whole-keyspace
//! commands lock every shard.
use super::scan::{write_scan_reply, NegativeCursor, ScanOptions, ScanRules};
use super::{
    arity_error, is, parse_int, subcommand_error, Class, Ctx, Handler, NOT_INTEGER, NO_SUCH_KEY,
    SYNTAX,
};
use fallow_store::{glob, EvictionPolicy, OwnedData, Shard};
use rand::Rng;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("del", del),
    ("unlink", del),
    ("exists", exists),
    ("type", type_of),
    ("expire", expire),
    ("pexpire", pexpire),
    ("expireat", expireat),
    ("pexpireat", pexpireat),
    ("ttl", ttl),
    ("pttl", pttl),
    ("expiretime", expiretime),
    ("pexpiretime", pexpiretime),
    ("persist", persist),
    ("rename", rename),
    ("renamenx", renamenx),
    ("copy", copy),
    ("move", move_key),
    ("swapdb", swapdb),
    ("keys", keys),
    ("scan", scan),
    ("randomkey", randomkey),
    ("dbsize", dbsize),
    ("flushdb", flushdb),
    ("flushall", flushall),
    ("touch", touch),
    ("object", object),
];

// ----- existence and deletion ---------------------------------------------------------------------

fn del(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let mut removed = 0;
    for key in &args[1..] {
        if ctx.guards.shard(key).remove(db, key, now) {
            removed += 1;
            ctx.notify(Class::GENERIC, "del", key);
        }
    }
    ctx.out.int(removed);
}

/// Counts every argument that exists, duplicates included (as Redis does).
fn exists(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let found = args[1..]
        .iter()
        .filter(|key| ctx.guards.shard(key).exists(db, key, now))
        .count();
    ctx.out.int(found as i64);
}

fn touch(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let touched = args[1..]
        .iter()
        .filter(|key| ctx.guards.shard(key).access(db, key, now).is_some())
        .count();
    ctx.out.int(touched as i64);
}

fn type_of(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    match ctx.guards.shard(args[1]).peek(db, args[1], now) {
        Some(info) => ctx.out.simple(info.kind.name()),
        None => ctx.out.simple("none"),
    }
}

// ----- expiry -------------------------------------------------------------------------------------

/// The NX / XX / GT / LT options of the EXPIRE family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ExpireCondition {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

impl ExpireCondition {
    /// Parses the options after the time, with Redis's error texts.
    fn parse(options: &[&[u8]]) -> Result<ExpireCondition, String> {
        let mut condition = ExpireCondition::default();
        for option in options {
            if is(option, "nx") {
                condition.nx = true;
            } else if is(option, "xx") {
                condition.xx = true;
            } else if is(option, "gt") {
                condition.gt = true;
            } else if is(option, "lt") {
                condition.lt = true;
            } else {
                return Err(format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(option)
                ));
            }
        }
        if condition.nx && (condition.xx || condition.gt || condition.lt) {
            return Err(
                "ERR NX and XX, GT or LT options at the same time are not compatible".into(),
            );
        }
        if condition.gt && condition.lt {
            return Err("ERR GT and LT options at the same time are not compatible".into());
        }
        Ok(condition)
    }

    /// Whether an expiry at `at_ms` may replace `current_ms` (None = no expiry, which counts as
    /// infinite: GT never passes and LT always does).
    fn allows(self, current_ms: Option<u64>, at_ms: i64) -> bool {
        let current = current_ms.map(|ms| ms.min(i64::MAX as u64) as i64);
        if self.nx && current.is_some() || self.xx && current.is_none() {
            return false;
        }
        if self.gt && current.is_none_or(|current| at_ms <= current) {
            return false;
        }
        !(self.lt && current.is_some_and(|current| at_ms >= current))
    }
}

/// Absolute expiry in ms of `value` units after `base_ms`; None on overflow (Redis rejects it).
fn absolute_expiry_ms(value: i64, unit_ms: i64, base_ms: i64) -> Option<i64> {
    value.checked_mul(unit_ms)?.checked_add(base_ms)
}

/// EXPIRE / PEXPIRE / EXPIREAT / PEXPIREAT. A time at or before now deletes the key.
fn expire_generic(ctx: &mut Ctx, args: &[&[u8]], unit_ms: i64, relative: bool, name: &str) {
    let condition = match ExpireCondition::parse(&args[3..]) {
        Ok(condition) => condition,
        Err(reply) => return ctx.out.error(&reply),
    };
    let Some(value) = parse_int(args[2]) else {
        return ctx.out.error(NOT_INTEGER);
    };
    let base_ms = if relative { ctx.now_ms as i64 } else { 0 };
    let Some(at_ms) = absolute_expiry_ms(value, unit_ms, base_ms) else {
        return ctx
            .out
            .error(&format!("ERR invalid expire time in '{name}' command"));
    };
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(args[1]);
    let Some(info) = shard.peek(db, args[1], now) else {
        return ctx.out.int(0);
    };
    let current = (info.expire_at_ms != 0).then_some(info.expire_at_ms);
    if !condition.allows(current, at_ms) {
        return ctx.out.int(0);
    }
    // set_expire_at deletes the key when the time is not in the future.
    shard.set_expire_at(db, args[1], now, Some(at_ms.max(0) as u64));
    let event = if at_ms <= now as i64 { "del" } else { "expire" };
    ctx.notify(Class::GENERIC, event, args[1]);
    ctx.out.int(1);
}

fn expire(ctx: &mut Ctx, args: &[&[u8]]) {
    expire_generic(ctx, args, 1000, true, "expire");
}

fn pexpire(ctx: &mut Ctx, args: &[&[u8]]) {
    expire_generic(ctx, args, 1, true, "pexpire");
}

fn expireat(ctx: &mut Ctx, args: &[&[u8]]) {
    expire_generic(ctx, args, 1000, false, "expireat");
}

fn pexpireat(ctx: &mut Ctx, args: &[&[u8]]) {
    expire_generic(ctx, args, 1, false, "pexpireat");
}

/// TTL / PTTL / EXPIRETIME / PEXPIRETIME: -2 when missing, -1 without expiry. Seconds round to the
/// nearest, as Redis's `(ttl + 500) / 1000`.
fn ttl_generic(ctx: &mut Ctx, args: &[&[u8]], in_ms: bool, absolute: bool) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let Some(info) = ctx.guards.shard(args[1]).peek(db, args[1], now) else {
        return ctx.out.int(-2);
    };
    if info.expire_at_ms == 0 {
        return ctx.out.int(-1);
    }
    let millis = if absolute {
        info.expire_at_ms
    } else {
        info.expire_at_ms.saturating_sub(now)
    };
    let millis = millis.min(i64::MAX as u64 - 500) as i64;
    ctx.out
        .int(if in_ms { millis } else { (millis + 500) / 1000 });
}

fn ttl(ctx: &mut Ctx, args: &[&[u8]]) {
    ttl_generic(ctx, args, false, false);
}

fn pttl(ctx: &mut Ctx, args: &[&[u8]]) {
    ttl_generic(ctx, args, true, false);
}

fn expiretime(ctx: &mut Ctx, args: &[&[u8]]) {
    ttl_generic(ctx, args, false, true);
}

fn pexpiretime(ctx: &mut Ctx, args: &[&[u8]]) {
    ttl_generic(ctx, args, true, true);
}

fn persist(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(args[1]);
    match shard.peek(db, args[1], now) {
        Some(info) if info.expire_at_ms != 0 => {
            shard.set_expire_at(db, args[1], now, None);
            ctx.notify(Class::GENERIC, "persist", args[1]);
            ctx.out.int(1);
        }
        _ => ctx.out.int(0),
    }
}

// ----- renaming, copying, moving ------------------------------------------------------------------

fn rename(ctx: &mut Ctx, args: &[&[u8]]) {
    rename_generic(ctx, args, false);
}

fn renamenx(ctx: &mut Ctx, args: &[&[u8]]) {
    rename_generic(ctx, args, true);
}

/// RENAME / RENAMENX: the value keeps its expiry; renaming a key to itself only checks it exists.
fn rename_generic(ctx: &mut Ctx, args: &[&[u8]], only_new: bool) {
    let (source, destination) = (args[1], args[2]);
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    if !ctx.guards.shard(source).exists(db, source, now) {
        return ctx.out.error(NO_SUCH_KEY);
    }
    let reply_done = |ctx: &mut Ctx| {
        if only_new {
            ctx.out.int(1)
        } else {
            ctx.out.ok()
        }
    };
    if source == destination {
        return if only_new {
            ctx.out.int(0)
        } else {
            ctx.out.ok()
        };
    }
    if only_new && ctx.guards.shard(destination).exists(db, destination, now) {
        return ctx.out.int(0);
    }
    let value = ctx
        .guards
        .shard(source)
        .take_value(db, source, now)
        .expect("checked above under the same lock");
    put_and_wake(ctx.guards.shard(destination), db, destination, value, now);
    ctx.notify(Class::GENERIC, "rename_from", source);
    ctx.notify(Class::GENERIC, "rename_to", destination);
    reply_done(ctx);
}

/// Stores a value and wakes clients blocked on the key (a list or sorted set may have appeared).
fn put_and_wake(
    shard: &mut Shard,
    db: usize,
    key: &[u8],
    value: fallow_store::OwnedValue,
    now_ms: u64,
) {
    let is_collection = matches!(value.data, OwnedData::Collection(_));
    shard.put_value(db, key, value, now_ms);
    if is_collection {
        shard.wake_waiters(db, key);
    }
}

/// Parses a database index argument: Ok(its keyspace address in the connection's namespace), Err(reply).
fn parse_db(ctx: &Ctx, arg: &[u8]) -> Result<usize, &'static str> {
    let index = parse_int(arg).ok_or(NOT_INTEGER)?;
    if i32::try_from(index).is_err() {
        return Err("ERR value is out of range, value must between -2147483648 and 2147483647");
    }
    usize::try_from(index)
        .ok()
        .filter(|&index| index < ctx.server.store.databases())
        .map(|index| ctx.keyspace_at(index))
        .ok_or("ERR DB index is out of range")
}

const SAME_OBJECT: &str = "ERR source and destination objects are the same";

/// COPY source destination [DB index] [REPLACE]: a deep copy, expiry included.
fn copy(ctx: &mut Ctx, args: &[&[u8]]) {
    let (source, destination) = (args[1], args[2]);
    let source_db = ctx.keyspace();
    let mut destination_db = source_db;
    let mut replace = false;
    let mut index = 3;
    while index < args.len() {
        if is(args[index], "replace") {
            replace = true;
        } else if is(args[index], "db") && index + 1 < args.len() {
            match parse_db(ctx, args[index + 1]) {
                Ok(db) => destination_db = db,
                Err(reply) => return ctx.out.error(reply),
            }
            index += 1;
        } else {
            return ctx.out.error(SYNTAX);
        }
        index += 1;
    }
    if source_db == destination_db && source == destination {
        return ctx.out.error(SAME_OBJECT);
    }
    let now = ctx.now_ms;
    let Some(source_bytes) = ctx
        .guards
        .shard(source)
        .memory_usage(source_db, source, now)
    else {
        return ctx.out.int(0);
    };
    if !replace
        && ctx
            .guards
            .shard(destination)
            .exists(destination_db, destination, now)
    {
        return ctx.out.int(0);
    }
    // The copy's size is known before it is made: one COPY of a big value cannot pass maxmemory.
    if !ctx.reserve_memory(source_bytes) {
        return;
    }
    let Some(value) = ctx.guards.shard(source).clone_value(source_db, source, now) else {
        return ctx.out.int(0);
    };
    let shard = ctx.guards.shard(destination);
    put_and_wake(shard, destination_db, destination, value, now);
    let index = fallow_store::pool::Address::of(destination_db).db;
    ctx.notify_in(Class::GENERIC, "copy_to", destination, index);
    ctx.out.int(1);
}

/// MOVE key db: 0 when the key is missing or already exists in the target database.
fn move_key(ctx: &mut Ctx, args: &[&[u8]]) {
    let key = args[1];
    let target_db = match parse_db(ctx, args[2]) {
        Ok(db) => db,
        Err(reply) => return ctx.out.error(reply),
    };
    let db = ctx.keyspace();
    if target_db == db {
        return ctx.out.error(SAME_OBJECT);
    }
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    if !shard.exists(db, key, now) || shard.exists(target_db, key, now) {
        return ctx.out.int(0);
    }
    let value = shard
        .take_value(db, key, now)
        .expect("checked above under the same lock");
    put_and_wake(shard, target_db, key, value, now);
    ctx.notify(Class::GENERIC, "move_from", key);
    let index = fallow_store::pool::Address::of(target_db).db;
    ctx.notify_in(Class::GENERIC, "move_to", key, index);
    ctx.out.int(1);
}

fn swapdb(ctx: &mut Ctx, args: &[&[u8]]) {
    let parse = |arg: &[u8]| parse_int(arg).filter(|index| i32::try_from(*index).is_ok());
    let Some(first) = parse(args[1]) else {
        return ctx.out.error("ERR invalid first DB index");
    };
    let Some(second) = parse(args[2]) else {
        return ctx.out.error("ERR invalid second DB index");
    };
    let databases = ctx.server.store.databases() as i64;
    if !(0..databases).contains(&first) || !(0..databases).contains(&second) {
        return ctx.out.error("ERR DB index is out of range");
    }
    // Both databases of the connection's namespace: a tenant swaps only its own.
    let (first, second) = (
        ctx.keyspace_at(first as usize),
        ctx.keyspace_at(second as usize),
    );
    ctx.server.txns.note_keyspace_write();
    for shard in ctx.guards.iter_mut() {
        shard.swap_dbs(first, second);
    }
    ctx.out.ok();
}

// ----- whole keyspace -----------------------------------------------------------------------------

fn keys(ctx: &mut Ctx, args: &[&[u8]]) {
    let pattern = args[1];
    let match_all = pattern == b"*";
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let mut found: Vec<Vec<u8>> = Vec::new();
    // Keys are copied only while the reply fits under the client's output hard limit.
    let budget = ctx.reply_budget();
    let mut reply_bytes: u64 = 16;
    for shard in ctx.guards.iter_mut() {
        // One walk over the whole shard: a count no shard can reach.
        shard.scan(db, 0, usize::MAX, now, |key, _| {
            if match_all || glob::matches(pattern, key) {
                reply_bytes += super::bulk_reply_bytes(key.len());
                if reply_bytes <= budget {
                    found.push(key.to_vec());
                }
            }
        });
    }
    if reply_bytes > budget {
        return ctx.refuse_reply(reply_bytes);
    }
    ctx.out.bulks(found.iter().map(Vec::as_slice));
}

/// Bits of a SCAN cursor that hold the shard's own cursor; the shard index sits above them.
const SHARD_CURSOR_BITS: u32 = 58;
const SHARD_CURSOR_MASK: u64 = (1 << SHARD_CURSOR_BITS) - 1;

fn encode_cursor(shard_index: usize, shard_cursor: u64) -> u64 {
    debug_assert!(shard_index < 64 && shard_cursor <= SHARD_CURSOR_MASK);
    ((shard_index as u64) << SHARD_CURSOR_BITS) | (shard_cursor & SHARD_CURSOR_MASK)
}

fn decode_cursor(cursor: u64) -> (usize, u64) {
    (
        (cursor >> SHARD_CURSOR_BITS) as usize,
        cursor & SHARD_CURSOR_MASK,
    )
}

/// SCAN: MATCH, COUNT (at most 1M: it bounds the time shards stay locked) and TYPE; a negative cursor
/// wraps within the i64 range.
const SCAN: ScanRules = ScanRules {
    type_option: true,
    count_max: 1 << 20,
    negative_cursor: NegativeCursor::WrapI64,
};

/// SCAN walks the shards in order; the cursor carries the shard index above the shard's own cursor.
fn scan(ctx: &mut Ctx, args: &[&[u8]]) {
    let cursor = match SCAN.parse_cursor(args[1]) {
        Ok(cursor) => cursor,
        Err(reply) => return ctx.out.error(reply),
    };
    let options = match SCAN.parse_options(&args[2..]) {
        Ok(options) => options,
        Err(reply) => return ctx.out.error(reply),
    };
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let shard_count = ctx.server.store.shard_count();
    let (next, found) = scan_shards(
        ctx.guards.iter_mut(),
        shard_count,
        db,
        cursor,
        &options,
        now,
    );
    write_scan_reply(ctx.out, next, found.iter().map(Vec::as_slice));
}

/// One SCAN step over `shards` (all of them, in index order): visits up to `options.count` keys from
/// `cursor` on and returns the next cursor (0 when done) with the keys that pass the filters.
fn scan_shards<'s>(
    shards: impl Iterator<Item = &'s mut Shard>,
    shard_count: usize,
    db: usize,
    cursor: u64,
    options: &ScanOptions,
    now_ms: u64,
) -> (u64, Vec<Vec<u8>>) {
    let (mut shard_index, mut shard_cursor) = decode_cursor(cursor);
    let mut visited = 0;
    let mut found = Vec::new();
    for shard in shards.skip(shard_index) {
        let budget = options.count - visited;
        shard_cursor = shard.scan(db, shard_cursor, budget, now_ms, |key, kind| {
            visited += 1;
            if options.wants(key, kind) {
                found.push(key.to_vec());
            }
        });
        if shard_cursor != 0 {
            break;
        }
        shard_index += 1;
        if visited >= options.count {
            break;
        }
    }
    let next = if shard_index >= shard_count {
        0
    } else {
        encode_cursor(shard_index, shard_cursor)
    };
    (next, found)
}

/// A random key, picking the shard in proportion to its number of keys in the database.
fn randomkey(ctx: &mut Ctx, _args: &[&[u8]]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let counts: Vec<usize> = ctx.guards.iter_mut().map(|s| s.key_count(db)).collect();
    let total: usize = counts.iter().sum();
    if total == 0 {
        return ctx.out.nil();
    }
    let mut pick = rand::thread_rng().gen_range(0..total);
    let start = counts
        .iter()
        .position(|&count| {
            let here = pick < count;
            pick = pick.saturating_sub(count);
            here
        })
        .unwrap_or(0);
    // A shard's keys may all turn out expired; then the following shards are tried.
    let shard_count = counts.len();
    for offset in 0..shard_count {
        let index = (start + offset) % shard_count;
        let shard = ctx.guards.iter_mut().nth(index).expect("index < shards");
        if let Some(key) = shard.random_key(db, now) {
            return ctx.out.bulk(&key);
        }
    }
    ctx.out.nil();
}

fn dbsize(ctx: &mut Ctx, _args: &[&[u8]]) {
    let db = ctx.keyspace();
    let keys: usize = ctx.guards.iter_mut().map(|shard| shard.key_count(db)).sum();
    ctx.out.int(keys as i64);
}

/// FLUSHDB / FLUSHALL take an optional ASYNC or SYNC; both flush at once here.
fn flush_mode_ok(args: &[&[u8]]) -> bool {
    match args.len() {
        1 => true,
        2 => is(args[1], "async") || is(args[1], "sync"),
        _ => false,
    }
}

fn flushdb(ctx: &mut Ctx, args: &[&[u8]]) {
    if !flush_mode_ok(args) {
        return ctx.out.error(SYNTAX);
    }
    let db = ctx.keyspace();
    ctx.server.txns.note_keyspace_write();
    ctx.guards.iter_mut().for_each(|shard| shard.flush_db(db));
    super::tracking::flushed(ctx);
    ctx.out.ok();
}

fn flushall(ctx: &mut Ctx, args: &[&[u8]]) {
    if !flush_mode_ok(args) {
        return ctx.out.error(SYNTAX);
    }
    // Every database of the caller's namespace only: a non-shared tenant flushes its own keys, the
    // default and shared tenants the common keyspace.
    let addresses: Vec<usize> = (0..ctx.server.store.databases())
        .map(|db| ctx.keyspace_at(db))
        .collect();
    ctx.server.txns.note_keyspace_write();
    for shard in ctx.guards.iter_mut() {
        addresses.iter().for_each(|&db| shard.flush_db(db));
    }
    super::tracking::flushed(ctx);
    ctx.out.ok();
}

// ----- OBJECT -------------------------------------------------------------------------------------

const OBJECT_HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Prints this help.",
];

const LFU_NOT_SELECTED: &str = "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.";
const LFU_SELECTED: &str = "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.";

/// Redis's refcount of shared small integers (OBJ_SHARED_REFCOUNT).
const SHARED_REFCOUNT: i64 = i32::MAX as i64;
/// Integers below this are shared objects in Redis (OBJ_SHARED_INTEGERS).
const SHARED_INTEGERS: i64 = 10_000;

fn is_lfu(policy: EvictionPolicy) -> bool {
    matches!(
        policy,
        EvictionPolicy::AllKeysLfu | EvictionPolicy::VolatileLfu
    )
}

fn is_lru_or_lfu(policy: EvictionPolicy) -> bool {
    is_lfu(policy)
        || matches!(
            policy,
            EvictionPolicy::AllKeysLru | EvictionPolicy::VolatileLru
        )
}

fn object(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1];
    if is(sub, "help") {
        if args.len() != 2 {
            return ctx.out.error(&arity_error("object|help"));
        }
        ctx.out.array_len(OBJECT_HELP.len());
        return OBJECT_HELP.iter().for_each(|line| ctx.out.simple(line));
    }
    let Some(name) = ["encoding", "freq", "idletime", "refcount"]
        .into_iter()
        .find(|name| is(sub, name))
    else {
        return subcommand_error(ctx, args);
    };
    if args.len() != 3 {
        return ctx.out.error(&arity_error(&format!("object|{name}")));
    }
    let key = args[2];
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let store = &ctx.server.store;
    let policy = store.policy();
    let limits = ctx.server.config.read().encoding_limits();
    let shard = ctx.guards.shard(key);
    let Some(info) = shard.peek(db, key, now) else {
        return ctx.out.nil();
    };
    match name {
        "encoding" => {
            let encoding = shard.encoding(db, key, now, &limits).unwrap_or("raw");
            ctx.out.bulk(encoding.as_bytes());
        }
        "freq" if !is_lfu(policy) => ctx.out.error(LFU_NOT_SELECTED),
        "freq" => {
            // The counter decays by one per idle minute (lfu-decay-time 1), read without updating it.
            let idle_minutes = shard.idle_s(&info, now) / 60;
            let counter = (info.lfu_counter as u64).saturating_sub(idle_minutes);
            ctx.out.int(counter as i64);
        }
        "idletime" if is_lfu(policy) => ctx.out.error(LFU_SELECTED),
        "idletime" => ctx.out.int(shard.idle_s(&info, now) as i64),
        _ => {
            let shares_integers = store.maxmemory_bytes() == 0 || !is_lru_or_lfu(policy);
            let shared = shares_integers
                && matches!(
                    shard.clone_value(db, key, now).map(|value| value.data),
                    Some(OwnedData::String { bytes, .. })
                        if fallow_store::parse_i64_strict(&bytes)
                            .is_some_and(|number| (0..SHARED_INTEGERS).contains(&number))
                );
            ctx.out.int(if shared { SHARED_REFCOUNT } else { 1 });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fallow_store::Kind;

    fn condition(options: &[&str]) -> Result<ExpireCondition, String> {
        let options: Vec<&[u8]> = options.iter().map(|option| option.as_bytes()).collect();
        ExpireCondition::parse(&options)
    }

    #[test]
    fn expire_options_parse_with_redis_errors() {
        assert_eq!(condition(&[]), Ok(ExpireCondition::default()));
        let gt = condition(&["gt"]).unwrap();
        assert!(gt.gt && !gt.lt && !gt.nx && !gt.xx);
        assert!(condition(&["XX", "GT"]).is_ok());
        let incompatible = "ERR NX and XX, GT or LT options at the same time are not compatible";
        assert_eq!(condition(&["nx", "xx"]).unwrap_err(), incompatible);
        assert_eq!(condition(&["nx", "lt"]).unwrap_err(), incompatible);
        assert_eq!(
            condition(&["gt", "lt"]).unwrap_err(),
            "ERR GT and LT options at the same time are not compatible"
        );
        assert_eq!(
            condition(&["foo"]).unwrap_err(),
            "ERR Unsupported option foo"
        );
    }

    #[test]
    fn expire_conditions_treat_no_ttl_as_infinite() {
        let parse = |options: &[&str]| condition(options).unwrap();
        assert!(parse(&["nx"]).allows(None, 5));
        assert!(!parse(&["nx"]).allows(Some(10), 5));
        assert!(!parse(&["xx"]).allows(None, 5));
        assert!(parse(&["xx"]).allows(Some(10), 5));
        assert!(!parse(&["gt"]).allows(None, 5));
        assert!(!parse(&["gt"]).allows(Some(10), 10));
        assert!(parse(&["gt"]).allows(Some(10), 11));
        assert!(parse(&["lt"]).allows(None, 5));
        assert!(!parse(&["lt"]).allows(Some(10), 10));
        assert!(parse(&["lt"]).allows(Some(10), -1));
        assert!(!parse(&["xx", "gt"]).allows(None, 5));
    }

    #[test]
    fn expiry_overflow_is_detected() {
        assert_eq!(absolute_expiry_ms(100, 1000, 5), Some(100_005));
        assert_eq!(absolute_expiry_ms(-1, 1000, 0), Some(-1000));
        assert_eq!(absolute_expiry_ms(i64::MAX, 1000, 0), None);
        assert_eq!(absolute_expiry_ms(i64::MIN / 999, 1000, 0), None);
        assert_eq!(absolute_expiry_ms(i64::MAX, 1, 0), Some(i64::MAX));
        assert_eq!(absolute_expiry_ms(i64::MAX, 1, 1), None);
    }

    #[test]
    fn scan_cursor_round_trips() {
        for (shard_index, shard_cursor) in [(0, 0), (1, 0), (5, 12345), (63, SHARD_CURSOR_MASK)] {
            let cursor = encode_cursor(shard_index, shard_cursor);
            assert_eq!(decode_cursor(cursor), (shard_index, shard_cursor));
        }
        assert_eq!(encode_cursor(0, 0), 0, "the first cursor is 0");
        let parse_cursor = |arg: &[u8]| SCAN.parse_cursor(arg).ok();
        assert_eq!(parse_cursor(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_cursor(b"-1"), Some(u64::MAX));
        assert_eq!(parse_cursor(b"18446744073709551616"), None);
        assert_eq!(parse_cursor(b"abc"), None);
    }

    #[test]
    fn scan_options_parse() {
        let parse = |options: &[&'static str]| {
            let options: Vec<&[u8]> = options.iter().map(|option| option.as_bytes()).collect();
            SCAN.parse_options(&options)
        };
        let parsed = parse(&["MATCH", "k*", "COUNT", "100", "TYPE", "set"]).unwrap();
        assert_eq!(parsed.count, 100);
        assert_eq!(parsed.pattern, Some(&b"k*"[..]));
        assert_eq!(parsed.kind, Some(Some(Kind::Set)));
        assert!(parsed.wants(b"key", Kind::Set));
        assert!(!parsed.wants(b"key", Kind::String));
        assert!(!parsed.wants(b"other", Kind::Set));
        assert_eq!(parse(&["match", "*"]).unwrap().pattern, None);
        assert!(!parse(&["type", "bogus"]).unwrap().wants(b"k", Kind::String));
        assert_eq!(parse(&["count", "0"]), Err(SYNTAX));
        assert_eq!(parse(&["count", "x"]), Err(NOT_INTEGER));
        assert_eq!(parse(&["count"]), Err(SYNTAX));
        assert_eq!(parse(&["bogus", "x"]), Err(SYNTAX));
        assert_eq!(
            parse(&["count", "99999999999"]).unwrap().count,
            SCAN.count_max
        );
        assert_eq!(SCAN.count_max, 1 << 20);
    }

    #[test]
    fn scan_walks_every_shard_once() {
        let store = fallow_store::Store::new(&fallow_store::StoreConfig {
            shards: 4,
            segment_bytes: 4096,
            ..Default::default()
        });
        let keys: Vec<String> = (0..300).map(|index| format!("key:{index}")).collect();
        let mut guards = store.lock_all();
        for key in &keys {
            guards
                .shard(key.as_bytes())
                .set_string(0, key.as_bytes(), &[7; 40], 0, 0, 0);
        }
        guards
            .shard(b"other-db")
            .set_string(1, b"other-db", b"x", 0, 0, 0);
        let options = SCAN.parse_options(&[b"COUNT", b"7"]).unwrap();
        let (mut cursor, mut seen, mut calls) = (0, Vec::new(), 0);
        loop {
            let (next, found) = scan_shards(guards.iter_mut(), 4, 0, cursor, &options, 0);
            assert!(found.len() <= 7, "COUNT bounds the keys visited per call");
            seen.extend(found);
            calls += 1;
            cursor = next;
            if cursor == 0 {
                break;
            }
            assert!(calls < 1000);
        }
        seen.sort();
        let mut expected: Vec<Vec<u8>> = keys.iter().map(|key| key.clone().into_bytes()).collect();
        expected.sort();
        assert_eq!(
            seen, expected,
            "every key once, nothing from other databases"
        );
        let (next, found) = scan_shards(guards.iter_mut(), 4, 0, encode_cursor(9, 0), &options, 0);
        assert_eq!(
            (next, found.len()),
            (0, 0),
            "a cursor past the last shard ends the scan"
        );
    }

    #[test]
    fn flush_modes() {
        assert!(flush_mode_ok(&[b"flushall"]));
        assert!(flush_mode_ok(&[b"flushall", b"ASYNC"]));
        assert!(flush_mode_ok(&[b"flushdb", b"sync"]));
        assert!(!flush_mode_ok(&[b"flushall", b"bogus"]));
        assert!(!flush_mode_ok(&[b"flushall", b"sync", b"async"]));
    }
}
