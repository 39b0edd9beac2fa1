//! Hash commands (Redis t_hash): argument parsing, locking and replies. A hash is an insertion-ordered
//! index map, so HRANDFIELD picks fields by position and an HSCAN cursor is simply a position; the hash
//! semantics (HSETNX, the HINCRBY/HINCRBYFLOAT rules, random fields) are the store's
//! (`fallow_store::types::hash`).
use super::random::{check_paired_count, parse_random_count};
use super::scan::{scan_window, write_scan_reply, NegativeCursor, ScanRules};
use super::{
    is, parse_float, parse_int, Class, Ctx, Handler, NOT_FLOAT, NOT_INTEGER, SYNTAX, WRONGTYPE,
};
use fallow_proto::reply::format_double_human;
use fallow_store::types::hash::IncrError;
use fallow_store::types::HashValue;
use fallow_store::WrongType;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("hset", hset),
    ("hmset", hmset),
    ("hsetnx", hsetnx),
    ("hget", hget),
    ("hmget", hmget),
    ("hdel", hdel),
    ("hlen", hlen),
    ("hstrlen", hstrlen),
    ("hexists", hexists),
    ("hgetall", hgetall),
    ("hkeys", hkeys),
    ("hvals", hvals),
    ("hincrby", hincrby),
    ("hincrbyfloat", hincrbyfloat),
    ("hrandfield", hrandfield),
    ("hscan", hscan),
];

/// HSCAN: MATCH and COUNT (any size: a step visits positions, not the whole hash); a negative cursor
/// wraps as in strtoul.
const HSCAN: ScanRules = ScanRules {
    type_option: false,
    count_max: usize::MAX,
    negative_cursor: NegativeCursor::Wrap,
};

// ----- commands -------------------------------------------------------------------------------------

/// Sets field/value pairs from args[2..]; Ok(count of new fields), or an error reply.
fn set_pairs(ctx: &mut Ctx, args: &[&[u8]]) -> Result<i64, String> {
    if !args.len().is_multiple_of(2) {
        let name = String::from_utf8_lossy(args[0]).to_ascii_lowercase();
        return Err(super::arity_error(&name));
    }
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let added = ctx
        .guards
        .shard(args[1])
        .update::<HashValue, _>(db, args[1], now, true, |hash| {
            hash.insert_pairs(args[2..].chunks(2).map(|pair| (pair[0], pair[1])))
        })
        .map_err(|WrongType| WRONGTYPE.to_string())?;
    ctx.notify(Class::HASH, "hset", args[1]);
    Ok(added.unwrap_or(0) as i64)
}

fn hset(ctx: &mut Ctx, args: &[&[u8]]) {
    match set_pairs(ctx, args) {
        Ok(added) => ctx.out.int(added),
        Err(reply) => ctx.out.error(&reply),
    }
}

fn hmset(ctx: &mut Ctx, args: &[&[u8]]) {
    match set_pairs(ctx, args) {
        Ok(_) => ctx.out.ok(),
        Err(reply) => ctx.out.error(&reply),
    }
}

fn hsetnx(ctx: &mut Ctx, args: &[&[u8]]) {
    let (key, field, value) = (args[1], args[2], args[3]);
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    // Checked first so a refused HSETNX does not count as a modification (WATCH).
    match shard.peek_collection::<HashValue>(db, key, now) {
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
        Ok(Some(hash)) if hash.get(field).is_some() => return ctx.out.int(0),
        Ok(_) => {}
    }
    let _ = shard.update::<HashValue, _>(db, key, now, true, |hash| hash.insert_new(field, value));
    ctx.notify(Class::HASH, "hset", key);
    ctx.out.int(1);
}

fn hget(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    match ctx
        .guards
        .shard(args[1])
        .read::<HashValue>(db, args[1], now)
    {
        Ok(Some(hash)) => match hash.get(args[2]) {
            Some(value) => ctx.out.bulk(value),
            None => ctx.out.nil(),
        },
        Ok(None) => ctx.out.nil(),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn hmget(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let hash = match ctx
        .guards
        .shard(args[1])
        .read::<HashValue>(db, args[1], now)
    {
        Ok(hash) => hash,
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let fields = &args[2..];
    ctx.out.array_len(fields.len());
    for field in fields {
        match hash.and_then(|hash| hash.get(field)) {
            Some(value) => ctx.out.bulk(value),
            None => ctx.out.nil(),
        }
    }
}

fn hdel(ctx: &mut Ctx, args: &[&[u8]]) {
    let (key, fields) = (args[1], &args[2..]);
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    match shard.peek_collection::<HashValue>(db, key, now) {
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
        Ok(Some(hash)) if fields.iter().any(|field| hash.get(field).is_some()) => {}
        Ok(_) => return ctx.out.int(0),
    }
    let removed = shard.update::<HashValue, _>(db, key, now, false, |hash| {
        hash.remove_all(fields.iter().copied())
    });
    let removed = removed.ok().flatten().unwrap_or(0);
    if removed > 0 {
        ctx.notify_and_del_if_gone(Class::HASH, "hdel", key);
    }
    ctx.out.int(removed as i64);
}

/// Replies with `reply(hash)`, or `missing` for an absent key.
fn read_int(ctx: &mut Ctx, key: &[u8], missing: i64, reply: impl FnOnce(&HashValue) -> i64) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    match ctx.guards.shard(key).read::<HashValue>(db, key, now) {
        Ok(Some(hash)) => ctx.out.int(reply(hash)),
        Ok(None) => ctx.out.int(missing),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn hlen(ctx: &mut Ctx, args: &[&[u8]]) {
    read_int(ctx, args[1], 0, |hash| hash.len() as i64);
}

fn hstrlen(ctx: &mut Ctx, args: &[&[u8]]) {
    read_int(ctx, args[1], 0, |hash| {
        hash.get(args[2]).map_or(0, |value| value.len() as i64)
    });
}

fn hexists(ctx: &mut Ctx, args: &[&[u8]]) {
    read_int(ctx, args[1], 0, |hash| hash.get(args[2]).is_some() as i64);
}

/// Which parts of each entry HGETALL/HKEYS/HVALS return.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Parts {
    Both,
    Fields,
    Values,
}

fn write_all(ctx: &mut Ctx, key: &[u8], parts: Parts) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let budget = ctx.reply_budget();
    let hash = match ctx.guards.shard(key).read::<HashValue>(db, key, now) {
        Ok(hash) => hash,
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let len = hash.map_or(0, HashValue::len);
    // Sized before it is built (a walk copying nothing): refused if it would pass the client's output
    // hard limit.
    let bytes: u64 = hash
        .into_iter()
        .flat_map(HashValue::iter)
        .map(|(field, value)| match parts {
            Parts::Both => {
                super::bulk_reply_bytes(field.len()) + super::bulk_reply_bytes(value.len())
            }
            Parts::Fields => super::bulk_reply_bytes(field.len()),
            Parts::Values => super::bulk_reply_bytes(value.len()),
        })
        .sum();
    if bytes > budget {
        return ctx.refuse_reply(bytes);
    }
    match parts {
        Parts::Both => ctx.out.map_len(len),
        Parts::Fields | Parts::Values => ctx.out.array_len(len),
    }
    for (field, value) in hash.into_iter().flat_map(HashValue::iter) {
        if parts != Parts::Values {
            ctx.out.bulk(field);
        }
        if parts != Parts::Fields {
            ctx.out.bulk(value);
        }
    }
}

fn hgetall(ctx: &mut Ctx, args: &[&[u8]]) {
    write_all(ctx, args[1], Parts::Both);
}

fn hkeys(ctx: &mut Ctx, args: &[&[u8]]) {
    write_all(ctx, args[1], Parts::Fields);
}

fn hvals(ctx: &mut Ctx, args: &[&[u8]]) {
    write_all(ctx, args[1], Parts::Values);
}

/// Runs an increment on the hash at `key` (created when absent), keeping the key's TTL. Ok(what it
/// returns) or an error reply; nothing changes on error.
fn update_field<T>(
    ctx: &mut Ctx,
    key: &[u8],
    increment: impl FnOnce(&mut HashValue) -> Result<T, IncrError>,
    errors: [&'static str; 2],
) -> Result<T, &'static str> {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let [not_a_number, overflow] = errors;
    match ctx
        .guards
        .shard(key)
        .update::<HashValue, _>(db, key, now, true, increment)
    {
        Ok(Some(Ok(result))) => Ok(result),
        Ok(Some(Err(IncrError::NotANumber))) => Err(not_a_number),
        Ok(Some(Err(IncrError::Overflow))) => Err(overflow),
        Ok(None) => unreachable!("update with create always runs"),
        Err(WrongType) => Err(WRONGTYPE),
    }
}

fn hincrby(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(delta) = parse_int(args[3]) else {
        return ctx.out.error(NOT_INTEGER);
    };
    let errors = [
        "ERR hash value is not an integer",
        "ERR increment or decrement would overflow",
    ];
    match update_field(ctx, args[1], |hash| hash.incr_by(args[2], delta), errors) {
        Ok(updated) => {
            ctx.notify(Class::HASH, "hincrby", args[1]);
            ctx.out.int(updated)
        }
        Err(reply) => ctx.out.error(reply),
    }
}

fn hincrbyfloat(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(delta) = parse_float(args[3]) else {
        return ctx.out.error(NOT_FLOAT);
    };
    if !delta.is_finite() {
        return ctx.out.error("ERR value is NaN or Infinity");
    }
    let errors = [
        "ERR hash value is not a float",
        "ERR increment would produce NaN or Infinity",
    ];
    let increment =
        |hash: &mut HashValue| hash.incr_by_float(args[2], delta, parse_float, format_double_human);
    match update_field(ctx, args[1], increment, errors) {
        Ok(text) => {
            ctx.notify(Class::HASH, "hincrbyfloat", args[1]);
            ctx.out.bulk(text.as_bytes())
        }
        Err(reply) => ctx.out.error(reply),
    }
}

fn hrandfield(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len() == 2 {
        return hrandfield_one(ctx, args[1]);
    }
    let count = match parse_random_count(args[2]) {
        Ok(count) => count,
        Err(reply) => return ctx.out.error(reply),
    };
    let with_values = match args.get(3) {
        None => false,
        Some(option) if args.len() == 4 && is(option, "withvalues") => true,
        Some(_) => return ctx.out.error(SYNTAX),
    };
    // Redis refuses counts whose doubled reply length (field and value) would overflow.
    if with_values {
        if let Err(reply) = check_paired_count(count) {
            return ctx.out.error(reply);
        }
    }
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let hash = match ctx
        .guards
        .shard(args[1])
        .read::<HashValue>(db, args[1], now)
    {
        Ok(Some(hash)) => hash,
        Ok(None) => return ctx.out.array_len(0),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let picks = hash.random_count(count);
    // RESP2 flattens field/value pairs; RESP3 nests each pair in its own array.
    let flat_pairs = with_values && !ctx.out.resp3;
    ctx.out
        .array_len(if flat_pairs { 2 * picks } else { picks });
    let out = &mut *ctx.out;
    hash.random_fields(count, &mut rand::thread_rng(), |field, value| {
        if with_values && out.resp3 {
            out.array_len(2);
        }
        out.bulk(field);
        if with_values {
            out.bulk(value);
        }
    });
}

fn hrandfield_one(ctx: &mut Ctx, key: &[u8]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    match ctx.guards.shard(key).read::<HashValue>(db, key, now) {
        Ok(Some(hash)) => match hash.random_field(&mut rand::thread_rng()) {
            Some((field, _)) => ctx.out.bulk(field),
            None => ctx.out.nil(),
        },
        Ok(None) => ctx.out.nil(),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn hscan(ctx: &mut Ctx, args: &[&[u8]]) {
    let cursor = match HSCAN.parse_cursor(args[2]) {
        Ok(cursor) => cursor,
        Err(reply) => return ctx.out.error(reply),
    };
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let hash = match ctx
        .guards
        .shard(args[1])
        .read::<HashValue>(db, args[1], now)
    {
        Ok(Some(hash)) => hash,
        Ok(None) => return write_scan_reply(ctx.out, 0, std::iter::empty()),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    // Options are parsed after the key lookup, so an absent key never reports an option error (Redis).
    let options = match HSCAN.parse_options(&args[3..]) {
        Ok(options) => options,
        Err(reply) => return ctx.out.error(reply),
    };
    let (next_cursor, window) = scan_window(cursor, options.count, hash.len());
    let mut elements: Vec<&[u8]> = Vec::new();
    for index in window {
        let (field, value) = hash.get_index(index).expect("window is in range");
        if options.matches(field) {
            elements.extend([field, value]);
        }
    }
    write_scan_reply(ctx.out, next_cursor, elements.into_iter());
}
