//! String and counter commands (Redis t_string). Values are stored inline in segment items; an update
//! writes a new item, so a counter or an APPEND never leaves the old bytes resident.
use super::{is, parse_float, parse_int, Class, Ctx, Handler, NOT_INTEGER, SYNTAX, WRONGTYPE};
use fallow_store::types::clamp_range;
use fallow_store::{Kind, OwnedData, OwnedValue, WrongType};

pub const HANDLERS: &[(&str, Handler)] = &[
    ("get", get),
    ("set", set),
    ("setnx", setnx),
    ("setex", setex),
    ("psetex", psetex),
    ("getset", getset),
    ("getdel", getdel),
    ("getex", getex),
    ("mget", mget),
    ("mset", mset),
    ("msetnx", msetnx),
    ("append", append),
    ("strlen", strlen),
    ("getrange", getrange),
    ("substr", getrange),
    ("setrange", setrange),
    ("incr", incr),
    ("decr", decr),
    ("incrby", incrby),
    ("decrby", decrby),
    ("incrbyfloat", incrbyfloat),
];

/// Largest string SETRANGE/APPEND may build (Redis's proto-max-bulk-len default).
const STRING_BYTES_MAX: usize = 512 << 20;

fn get(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.keyspace();
    match ctx
        .guards
        .shard(args[1])
        .get_string(db, args[1], ctx.now_ms)
    {
        Ok(Some((value, _))) => ctx.out.bulk(value),
        Ok(None) => ctx.out.nil(),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

/// Reads a string value as an owned copy with its expiry.
fn read_owned(ctx: &mut Ctx, key: &[u8]) -> Result<Option<(Vec<u8>, u64)>, WrongType> {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    Ok(ctx
        .guards
        .shard(key)
        .get_string(db, key, now)?
        .map(|(value, info)| (value.to_vec(), info.expire_at_ms)))
}

/// `read_owned` for a command that only writes (APPEND, SETRANGE, INCR...): no hit or miss is counted
/// and the access time is not touched, as Redis's lookupKeyWrite; the per-tenant hit rates stay those
/// of reads.
pub(super) fn read_owned_for_write(
    ctx: &mut Ctx,
    key: &[u8],
) -> Result<Option<(Vec<u8>, u64)>, WrongType> {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    match shard.peek(db, key, now) {
        None => return Ok(None),
        Some(info) if info.kind != Kind::String => return Err(WrongType),
        Some(_) => {}
    }
    match shard.clone_value(db, key, now) {
        Some(OwnedValue {
            data: OwnedData::String { bytes, .. },
            expire_at_ms,
        }) => Ok(Some((bytes, expire_at_ms))),
        Some(_) => Err(WrongType),
        None => Ok(None),
    }
}

/// Expiry options shared by SET and GETEX.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ExpiryOption {
    None,
    At(u64),
    KeepTtl,
    Persist,
}

/// Parses `EX s | PX ms | EXAT s | PXAT ms` at `args[index]`; Ok(Some(at_ms)), Ok(None) when not an
/// expiry option, Err(reply) on a bad value.
fn parse_expiry(
    args: &[&[u8]],
    index: usize,
    now_ms: u64,
    command: &str,
) -> Result<Option<u64>, String> {
    let option = args[index];
    let unit_ms: i64 = if is(option, "ex") || is(option, "exat") {
        1000
    } else if is(option, "px") || is(option, "pxat") {
        1
    } else {
        return Ok(None);
    };
    let absolute = is(option, "exat") || is(option, "pxat");
    let Some(value) = args.get(index + 1) else {
        return Err(SYNTAX.into());
    };
    let Some(value) = parse_int(value) else {
        return Err(NOT_INTEGER.into());
    };
    let invalid = || format!("ERR invalid expire time in '{command}' command");
    if value <= 0 {
        return Err(invalid());
    }
    let millis = value.checked_mul(unit_ms).ok_or_else(invalid)?;
    let at = if absolute {
        millis
    } else {
        millis.checked_add(now_ms as i64).ok_or_else(invalid)?
    };
    Ok(Some(at as u64))
}

/// If `args[index]` is an expiry option, records it in `expiry` (a second one is a syntax error) and
/// returns how many arguments it took; 0 when it is some other option.
fn take_expiry(
    args: &[&[u8]],
    index: usize,
    now_ms: u64,
    command: &str,
    expiry: &mut ExpiryOption,
) -> Result<usize, String> {
    match parse_expiry(args, index, now_ms, command)? {
        Some(at) if *expiry == ExpiryOption::None => {
            *expiry = ExpiryOption::At(at);
            Ok(2)
        }
        Some(_) => Err(SYNTAX.into()),
        None => Ok(0),
    }
}

fn set(ctx: &mut Ctx, args: &[&[u8]]) {
    let (key, value) = (args[1], args[2]);
    let mut expiry = ExpiryOption::None;
    let (mut only_new, mut only_existing, mut return_old) = (false, false, false);
    let mut index = 3;
    while index < args.len() {
        let option = args[index];
        match take_expiry(args, index, ctx.now_ms, "set", &mut expiry) {
            Err(reply) => return ctx.out.error(&reply),
            Ok(0) => {}
            Ok(taken) => {
                index += taken;
                continue;
            }
        }
        if is(option, "nx") && !only_existing {
            only_new = true;
        } else if is(option, "xx") && !only_new {
            only_existing = true;
        } else if is(option, "keepttl") && expiry == ExpiryOption::None {
            expiry = ExpiryOption::KeepTtl;
        } else if is(option, "get") {
            return_old = true;
        } else {
            return ctx.out.error(SYNTAX);
        }
        index += 1;
    }
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    let old = if return_old {
        match shard.get_string(db, key, now) {
            Ok(found) => found.map(|(value, info)| (Some(value.to_vec()), info.expire_at_ms)),
            Err(WrongType) => return ctx.out.error(WRONGTYPE),
        }
    } else {
        // A plain SET reads nothing: no hit or miss is counted (Redis's lookupKeyWrite).
        shard
            .peek(db, key, now)
            .map(|info| (None, info.expire_at_ms))
    };
    let exists = old.is_some();
    let allowed = if exists { !only_new } else { !only_existing };
    if allowed {
        let expire_at = match expiry {
            ExpiryOption::At(at) => at,
            ExpiryOption::KeepTtl => old.as_ref().map_or(0, |(_, expire)| *expire),
            ExpiryOption::None | ExpiryOption::Persist => 0,
        };
        shard.set_string(db, key, value, expire_at, 0, now);
        ctx.notify(Class::STRING, "set", key);
        if let ExpiryOption::At(_) = expiry {
            ctx.notify(Class::GENERIC, "expire", key);
        }
    }
    match (return_old, old) {
        (true, Some((Some(previous), _))) => ctx.out.bulk(&previous),
        (true, _) => ctx.out.nil(),
        (false, _) if allowed => ctx.out.ok(),
        (false, _) => ctx.out.nil(),
    }
}

fn setnx(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(args[1]);
    if shard.exists(db, args[1], now) {
        return ctx.out.int(0);
    }
    shard.set_string(db, args[1], args[2], 0, 0, now);
    ctx.notify(Class::STRING, "set", args[1]);
    ctx.out.int(1);
}

fn set_with_expiry(ctx: &mut Ctx, args: &[&[u8]], unit_ms: i64, command: &str) {
    let Some(ttl) = parse_int(args[2]) else {
        return ctx.out.error(NOT_INTEGER);
    };
    let at = ttl
        .checked_mul(unit_ms)
        .and_then(|millis| millis.checked_add(ctx.now_ms as i64))
        .filter(|_| ttl > 0);
    let Some(at) = at else {
        return ctx
            .out
            .error(&format!("ERR invalid expire time in '{command}' command"));
    };
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    ctx.guards
        .shard(args[1])
        .set_string(db, args[1], args[3], at as u64, 0, now);
    ctx.notify(Class::STRING, "set", args[1]);
    ctx.notify(Class::GENERIC, "expire", args[1]);
    ctx.out.ok();
}

fn setex(ctx: &mut Ctx, args: &[&[u8]]) {
    set_with_expiry(ctx, args, 1000, "setex");
}

fn psetex(ctx: &mut Ctx, args: &[&[u8]]) {
    set_with_expiry(ctx, args, 1, "psetex");
}

fn getset(ctx: &mut Ctx, args: &[&[u8]]) {
    let old = match read_owned(ctx, args[1]) {
        Ok(old) => old,
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    ctx.guards
        .shard(args[1])
        .set_string(db, args[1], args[2], 0, 0, now);
    ctx.notify(Class::STRING, "set", args[1]);
    match old {
        Some((value, _)) => ctx.out.bulk(&value),
        None => ctx.out.nil(),
    }
}

fn getdel(ctx: &mut Ctx, args: &[&[u8]]) {
    let old = match read_owned(ctx, args[1]) {
        Ok(old) => old,
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    match old {
        Some((value, _)) => {
            ctx.guards.shard(args[1]).remove(db, args[1], now);
            ctx.notify(Class::GENERIC, "del", args[1]);
            ctx.out.bulk(&value);
        }
        None => ctx.out.nil(),
    }
}

fn getex(ctx: &mut Ctx, args: &[&[u8]]) {
    let mut expiry = ExpiryOption::None;
    let mut index = 2;
    while index < args.len() {
        match take_expiry(args, index, ctx.now_ms, "getex", &mut expiry) {
            Err(reply) => return ctx.out.error(&reply),
            Ok(0) => {}
            Ok(taken) => {
                index += taken;
                continue;
            }
        }
        if is(args[index], "persist") && expiry == ExpiryOption::None {
            expiry = ExpiryOption::Persist;
        } else {
            return ctx.out.error(SYNTAX);
        }
        index += 1;
    }
    let value = match read_owned(ctx, args[1]) {
        Ok(Some((value, _))) => value,
        Ok(None) => return ctx.out.nil(),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(args[1]);
    match expiry {
        ExpiryOption::At(at) => {
            // A time already past deletes the key, as Redis does.
            shard.set_expire_at(db, args[1], now, Some(at));
            let event = if at <= now { "del" } else { "expire" };
            ctx.notify(Class::GENERIC, event, args[1]);
        }
        ExpiryOption::Persist => {
            let had_ttl = shard
                .peek(db, args[1], now)
                .is_some_and(|info| info.expire_at_ms != 0);
            shard.set_expire_at(db, args[1], now, None);
            if had_ttl {
                ctx.notify(Class::GENERIC, "persist", args[1]);
            }
        }
        ExpiryOption::None | ExpiryOption::KeepTtl => {}
    }
    ctx.out.bulk(&value);
}

fn mget(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let reply_start = ctx.out.buf.len();
    ctx.out.array_len(args.len() - 1);
    let mut sized = false;
    for (index, key) in args[1..].iter().enumerate() {
        // A large reply is sized from the values' lengths before the rest is copied, and refused if it
        // would pass the client's output hard limit.
        if !sized && ctx.out.buf.len() - reply_start > super::REPLY_SIZE_CHECK_BYTES {
            sized = true;
            let rest = mget_reply_bytes(ctx, &args[1 + index..]);
            if !ctx.reply_fits(reply_start, rest) {
                return;
            }
        }
        match ctx.guards.shard(key).get_string(db, key, now) {
            Ok(Some((value, _))) => ctx.out.bulk(value),
            _ => ctx.out.nil(),
        }
    }
}

/// The bytes MGET's reply needs for `keys`, from the values' lengths.
fn mget_reply_bytes(ctx: &mut Ctx, keys: &[&[u8]]) -> u64 {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    keys.iter()
        .map(|key| {
            ctx.guards
                .shard(key)
                .peek_string_len(db, key, now)
                .map_or(5, super::bulk_reply_bytes)
        })
        .sum()
}

fn mset(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len().is_multiple_of(2) {
        return ctx.out.error(&super::arity_error("mset"));
    }
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    for pair in args[1..].chunks(2) {
        ctx.guards
            .shard(pair[0])
            .set_string(db, pair[0], pair[1], 0, 0, now);
        ctx.notify(Class::STRING, "set", pair[0]);
    }
    ctx.out.ok();
}

fn msetnx(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len().is_multiple_of(2) {
        return ctx.out.error(&super::arity_error("msetnx"));
    }
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let any_exists = args[1..]
        .chunks(2)
        .any(|pair| ctx.guards.shard(pair[0]).exists(db, pair[0], now));
    if any_exists {
        return ctx.out.int(0);
    }
    for pair in args[1..].chunks(2) {
        ctx.guards
            .shard(pair[0])
            .set_string(db, pair[0], pair[1], 0, 0, now);
        ctx.notify(Class::STRING, "set", pair[0]);
    }
    ctx.out.int(1);
}

fn append(ctx: &mut Ctx, args: &[&[u8]]) {
    let (mut value, expire_at) = match read_owned_for_write(ctx, args[1]) {
        Ok(Some(found)) => found,
        Ok(None) => (Vec::new(), 0),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    if value.len() + args[2].len() > STRING_BYTES_MAX {
        return ctx
            .out
            .error("ERR string exceeds maximum allowed size (proto-max-bulk-len)");
    }
    if !ctx.reserve_memory(args[2].len()) {
        return;
    }
    value.extend_from_slice(args[2]);
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    ctx.guards
        .shard(args[1])
        .set_string(db, args[1], &value, expire_at, 0, now);
    ctx.notify(Class::STRING, "append", args[1]);
    ctx.out.int(value.len() as i64);
}

fn strlen(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.keyspace();
    match ctx
        .guards
        .shard(args[1])
        .get_string(db, args[1], ctx.now_ms)
    {
        Ok(Some((value, _))) => ctx.out.int(value.len() as i64),
        Ok(None) => ctx.out.int(0),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn getrange(ctx: &mut Ctx, args: &[&[u8]]) {
    let (Some(start), Some(end)) = (parse_int(args[2]), parse_int(args[3])) else {
        return ctx.out.error(NOT_INTEGER);
    };
    let db = ctx.keyspace();
    match ctx
        .guards
        .shard(args[1])
        .get_string(db, args[1], ctx.now_ms)
    {
        Ok(Some((value, _))) => match clamp_range(start, end, value.len()) {
            // Redis treats start<0 && end<0 && start>end as empty too; clamp_range covers it.
            Some((from, to)) => ctx.out.bulk(&value[from..=to]),
            None => ctx.out.bulk(b""),
        },
        Ok(None) => ctx.out.bulk(b""),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn setrange(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(offset) = parse_int(args[2]) else {
        return ctx.out.error(NOT_INTEGER);
    };
    if offset < 0 {
        return ctx.out.error("ERR offset is out of range");
    }
    let offset = offset as usize;
    let (mut value, expire_at) = match read_owned_for_write(ctx, args[1]) {
        Ok(Some(found)) => found,
        Ok(None) => (Vec::new(), 0),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let patch = args[3];
    if patch.is_empty() {
        return ctx.out.int(value.len() as i64);
    }
    if offset + patch.len() > STRING_BYTES_MAX {
        return ctx
            .out
            .error("ERR string exceeds maximum allowed size (proto-max-bulk-len)");
    }
    let growth_bytes = (offset + patch.len()).saturating_sub(value.len());
    if growth_bytes > 0 && !ctx.reserve_memory(growth_bytes) {
        return;
    }
    if value.len() < offset + patch.len() {
        value.resize(offset + patch.len(), 0);
    }
    value[offset..offset + patch.len()].copy_from_slice(patch);
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    ctx.guards
        .shard(args[1])
        .set_string(db, args[1], &value, expire_at, 0, now);
    ctx.notify(Class::STRING, "setrange", args[1]);
    ctx.out.int(value.len() as i64);
}

/// Adds `delta` to the integer at `key`, keeping its TTL; writes the reply.
pub(super) fn increment(ctx: &mut Ctx, key: &[u8], delta: i64) {
    let (current, expire_at) = match read_owned_for_write(ctx, key) {
        Ok(Some((value, expire_at))) => match parse_int(&value) {
            Some(current) => (current, expire_at),
            None => return ctx.out.error(NOT_INTEGER),
        },
        Ok(None) => (0, 0),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let Some(updated) = current.checked_add(delta) else {
        return ctx.out.error("ERR increment or decrement would overflow");
    };
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let text = itoa::Buffer::new().format(updated).as_bytes().to_vec();
    ctx.guards
        .shard(key)
        .set_string(db, key, &text, expire_at, 0, now);
    ctx.notify(Class::STRING, "incrby", key);
    ctx.out.int(updated);
}

fn incr(ctx: &mut Ctx, args: &[&[u8]]) {
    increment(ctx, args[1], 1);
}

fn decr(ctx: &mut Ctx, args: &[&[u8]]) {
    increment(ctx, args[1], -1);
}

fn incrby(ctx: &mut Ctx, args: &[&[u8]]) {
    match parse_int(args[2]) {
        Some(delta) => increment(ctx, args[1], delta),
        None => ctx.out.error(NOT_INTEGER),
    }
}

fn decrby(ctx: &mut Ctx, args: &[&[u8]]) {
    match parse_int(args[2]).and_then(i64::checked_neg) {
        Some(delta) => increment(ctx, args[1], delta),
        None if parse_int(args[2]).is_some() => ctx.out.error("ERR decrement would overflow"),
        None => ctx.out.error(NOT_INTEGER),
    }
}

fn incrbyfloat(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(delta) = parse_float(args[2]) else {
        return ctx.out.error(super::NOT_FLOAT);
    };
    let (current, expire_at) = match read_owned_for_write(ctx, args[1]) {
        Ok(Some((value, expire_at))) => match parse_float(&value) {
            Some(current) => (current, expire_at),
            None => return ctx.out.error(super::NOT_FLOAT),
        },
        Ok(None) => (0.0, 0),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let updated = current + delta;
    if !updated.is_finite() {
        return ctx.out.error("ERR increment would produce NaN or Infinity");
    }
    let text = fallow_proto::reply::format_double_human(updated);
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    ctx.guards
        .shard(args[1])
        .set_string(db, args[1], text.as_bytes(), expire_at, 0, now);
    ctx.notify(Class::STRING, "incrbyfloat", args[1]);
    ctx.out.bulk(text.as_bytes());
}
