//! Set commands (Redis t_set): argument parsing, locking and replies. A set is an index set, so
//! SPOP/SRANDMEMBER pick members by position and an SSCAN cursor is a position. The set semantics
//! (random pops and picks, intersection, union, difference) are the store's (`fallow_store::types::set`);
//! set algebra reads its sources here one shard at a time (`ShardSource`), because a command can borrow
//! only one shard at a time.
use super::random::parse_random_count;
use super::scan::{scan_window, write_scan_reply, NegativeCursor, ScanRules};
use super::{is, parse_int, Class, Ctx, Handler, SYNTAX, WRONGTYPE};
use fallow_store::types::set::SetSource;
use fallow_store::types::SetValue;
use fallow_store::{Collection, WrongType};

pub const HANDLERS: &[(&str, Handler)] = &[
    ("sadd", sadd),
    ("srem", srem),
    ("scard", scard),
    ("sismember", sismember),
    ("smismember", smismember),
    ("smembers", smembers),
    ("spop", spop),
    ("srandmember", srandmember),
    ("smove", smove),
    ("sinter", sinter),
    ("sunion", sunion),
    ("sdiff", sdiff),
    ("sinterstore", sinterstore),
    ("sunionstore", sunionstore),
    ("sdiffstore", sdiffstore),
    ("sintercard", sintercard),
    ("sscan", sscan),
];

/// SSCAN: MATCH and COUNT (any size: a step visits positions, not the whole set); a negative cursor
/// wraps as in strtoul.
const SSCAN: ScanRules = ScanRules {
    type_option: false,
    count_max: usize::MAX,
    negative_cursor: NegativeCursor::Wrap,
};

fn sadd(ctx: &mut Ctx, args: &[&[u8]]) {
    let (key, members) = (args[1], &args[2..]);
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    // Checked first so adding only existing members is not a modification (WATCH).
    match shard.peek_collection::<SetValue>(db, key, now) {
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
        Ok(Some(set)) if members.iter().all(|member| set.contains(member)) => {
            return ctx.out.int(0)
        }
        Ok(_) => {}
    }
    let added = shard.update::<SetValue, _>(db, key, now, true, |set| {
        set.insert_all(members.iter().copied())
    });
    let added = added.ok().flatten().unwrap_or(0);
    if added > 0 {
        ctx.notify(Class::SET, "sadd", key);
    }
    ctx.out.int(added as i64);
}

fn srem(ctx: &mut Ctx, args: &[&[u8]]) {
    let (key, members) = (args[1], &args[2..]);
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    match shard.peek_collection::<SetValue>(db, key, now) {
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
        Ok(Some(set)) if members.iter().any(|member| set.contains(member)) => {}
        Ok(_) => return ctx.out.int(0),
    }
    let removed = shard.update::<SetValue, _>(db, key, now, false, |set| {
        set.remove_all(members.iter().copied())
    });
    let removed = removed.ok().flatten().unwrap_or(0);
    if removed > 0 {
        ctx.notify_and_del_if_gone(Class::SET, "srem", key);
    }
    ctx.out.int(removed as i64);
}

fn scard(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    match ctx.guards.shard(args[1]).read::<SetValue>(db, args[1], now) {
        Ok(set) => ctx.out.int(set.map_or(0, SetValue::len) as i64),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn sismember(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    match ctx.guards.shard(args[1]).read::<SetValue>(db, args[1], now) {
        Ok(set) => ctx
            .out
            .int(set.is_some_and(|set| set.contains(args[2])) as i64),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn smismember(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let set = match ctx.guards.shard(args[1]).read::<SetValue>(db, args[1], now) {
        Ok(set) => set,
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    ctx.out.array_len(args.len() - 2);
    for member in &args[2..] {
        ctx.out
            .int(set.is_some_and(|set| set.contains(member)) as i64);
    }
}

fn smembers(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let budget = ctx.reply_budget();
    match ctx.guards.shard(args[1]).read::<SetValue>(db, args[1], now) {
        Ok(set) => {
            let len = set.map_or(0, SetValue::len);
            // Sized before it is built (a walk copying nothing): refused if it would pass the client's
            // output hard limit.
            let bytes: u64 = set
                .into_iter()
                .flat_map(SetValue::iter)
                .map(|member| super::bulk_reply_bytes(member.len()))
                .sum();
            if bytes > budget {
                return ctx.refuse_reply(bytes);
            }
            ctx.out.set_len(len);
            for member in set.into_iter().flat_map(SetValue::iter) {
                ctx.out.bulk(member);
            }
        }
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn spop(ctx: &mut Ctx, args: &[&[u8]]) {
    match args.len() {
        2 => spop_one(ctx, args[1]),
        3 => spop_count(ctx, args),
        _ => ctx.out.error(SYNTAX),
    }
}

fn spop_one(ctx: &mut Ctx, key: &[u8]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let popped = ctx
        .guards
        .shard(key)
        .update::<SetValue, _>(db, key, now, false, |set| {
            set.pop_random(&mut rand::thread_rng())
        });
    match popped {
        Ok(Some(Some(member))) => {
            ctx.notify_and_del_if_gone(Class::SET, "spop", key);
            ctx.out.bulk(&member)
        }
        Ok(_) => ctx.out.nil(),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn spop_count(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(count) = parse_int(args[2]).filter(|&count| count >= 0) else {
        return ctx.out.error("ERR value is out of range, must be positive");
    };
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(args[1]);
    if count == 0 {
        return match shard.peek_collection::<SetValue>(db, args[1], now) {
            Ok(_) => ctx.out.set_len(0),
            Err(WrongType) => ctx.out.error(WRONGTYPE),
        };
    }
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    let popped = shard.update::<SetValue, _>(db, args[1], now, false, |set| {
        set.pop_randoms(count, &mut rand::thread_rng())
    });
    match popped {
        Ok(popped) => {
            let popped = popped.unwrap_or_default();
            if !popped.is_empty() {
                ctx.notify_and_del_if_gone(Class::SET, "spop", args[1]);
            }
            ctx.out.set_len(popped.len());
            for member in &popped {
                ctx.out.bulk(member);
            }
        }
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn srandmember(ctx: &mut Ctx, args: &[&[u8]]) {
    let count = match args.len() {
        2 => None,
        3 => match parse_random_count(args[2]) {
            Ok(count) => Some(count),
            Err(reply) => return ctx.out.error(reply),
        },
        _ => return ctx.out.error(SYNTAX),
    };
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let set = match ctx.guards.shard(args[1]).read::<SetValue>(db, args[1], now) {
        Ok(set) => set,
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let mut rng = rand::thread_rng();
    let Some(count) = count else {
        return match set.and_then(|set| set.random_member(&mut rng)) {
            Some(member) => ctx.out.bulk(member),
            None => ctx.out.nil(),
        };
    };
    let Some(set) = set else {
        return ctx.out.array_len(0);
    };
    ctx.out.array_len(set.random_count(count));
    let out = &mut *ctx.out;
    set.random_members(count, &mut rng, |member| out.bulk(member));
}

fn smove(ctx: &mut Ctx, args: &[&[u8]]) {
    let (source, destination, member) = (args[1], args[2], args[3]);
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    // Redis: an absent source replies 0 before the destination's type is looked at.
    let in_source = match ctx
        .guards
        .shard(source)
        .peek_collection::<SetValue>(db, source, now)
    {
        Ok(None) => return ctx.out.int(0),
        Ok(Some(set)) => set.contains(member),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let destination_shard = ctx.guards.shard(destination);
    if destination_shard
        .peek_collection::<SetValue>(db, destination, now)
        .is_err()
    {
        return ctx.out.error(WRONGTYPE);
    }
    if source == destination || !in_source {
        return ctx.out.int(in_source as i64);
    }
    let _ = ctx
        .guards
        .shard(source)
        .update::<SetValue, _>(db, source, now, false, |set| set.remove(member));
    ctx.notify_and_del_if_gone(Class::SET, "srem", source);
    let added =
        ctx.guards
            .shard(destination)
            .update::<SetValue, _>(db, destination, now, true, |set| set.insert(member));
    if let Ok(Some(true)) = added {
        ctx.notify(Class::SET, "sadd", destination);
    }
    ctx.out.int(1);
}

// ----- set algebra ----------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Algebra {
    Inter,
    Union,
    Diff,
}

/// The locked shards of a command, read without counting hits (the keys were already looked up once).
struct ShardSource<'c, 'a, 's> {
    ctx: &'c mut Ctx<'a, 's>,
    db: usize,
    now_ms: u64,
}

impl SetSource for ShardSource<'_, '_, '_> {
    fn with_set<R>(&mut self, key: &[u8], visit: impl FnOnce(Option<&SetValue>) -> R) -> R {
        let set = self
            .ctx
            .guards
            .shard(key)
            .peek_collection::<SetValue>(self.db, key, self.now_ms);
        visit(set.ok().flatten())
    }
}

/// Computes `algebra` over the sets at `keys` (an absent key is an empty set). Every key is looked up
/// (and type-checked) once, as Redis does, before any member is copied.
fn compute(ctx: &mut Ctx, algebra: Algebra, keys: &[&[u8]]) -> Result<SetValue, WrongType> {
    let db = ctx.keyspace();
    let now_ms = ctx.now_ms;
    let mut lens = Vec::with_capacity(keys.len());
    for key in keys {
        let set = ctx.guards.shard(key).read::<SetValue>(db, key, now_ms)?;
        lens.push(set.map(SetValue::len));
    }
    let mut source = ShardSource { ctx, db, now_ms };
    let mut result = match algebra {
        Algebra::Inter => SetValue::intersection(&mut source, keys, &lens),
        Algebra::Union => SetValue::union(&mut source, keys),
        Algebra::Diff => SetValue::difference(&mut source, keys),
    };
    result.shrink_to_fit();
    Ok(result)
}

fn reply_algebra(ctx: &mut Ctx, algebra: Algebra, keys: &[&[u8]]) {
    match compute(ctx, algebra, keys) {
        Ok(result) => {
            ctx.out.set_len(result.len());
            for member in result.iter() {
                ctx.out.bulk(member);
            }
        }
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

/// Overwrites `args[1]` with the result (deleting it when the result is empty); replies its size.
fn store_algebra(ctx: &mut Ctx, algebra: Algebra, args: &[&[u8]]) {
    let destination = args[1];
    let result = match compute(ctx, algebra, &args[2..]) {
        Ok(result) => result,
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let len = result.len();
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(destination);
    if len == 0 {
        if shard.remove(db, destination, now) {
            ctx.notify(Class::GENERIC, "del", destination);
        }
    } else {
        shard.put_collection(db, destination, Collection::Set(result), 0, now);
        let event = match algebra {
            Algebra::Inter => "sinterstore",
            Algebra::Union => "sunionstore",
            Algebra::Diff => "sdiffstore",
        };
        ctx.notify(Class::SET, event, destination);
    }
    ctx.out.int(len as i64);
}

fn sinter(ctx: &mut Ctx, args: &[&[u8]]) {
    reply_algebra(ctx, Algebra::Inter, &args[1..]);
}

fn sunion(ctx: &mut Ctx, args: &[&[u8]]) {
    reply_algebra(ctx, Algebra::Union, &args[1..]);
}

fn sdiff(ctx: &mut Ctx, args: &[&[u8]]) {
    reply_algebra(ctx, Algebra::Diff, &args[1..]);
}

fn sinterstore(ctx: &mut Ctx, args: &[&[u8]]) {
    store_algebra(ctx, Algebra::Inter, args);
}

fn sunionstore(ctx: &mut Ctx, args: &[&[u8]]) {
    store_algebra(ctx, Algebra::Union, args);
}

fn sdiffstore(ctx: &mut Ctx, args: &[&[u8]]) {
    store_algebra(ctx, Algebra::Diff, args);
}

/// Parses `numkeys key... [LIMIT n]`: the keys and the limit (0 = none), or an error reply.
fn parse_sintercard<'a>(args: &[&'a [u8]]) -> Result<(Vec<&'a [u8]>, usize), &'static str> {
    let numkeys = parse_int(args[1])
        .filter(|&numkeys| numkeys >= 1)
        .ok_or("ERR numkeys should be greater than 0")?;
    let numkeys = usize::try_from(numkeys).unwrap_or(usize::MAX);
    if numkeys > args.len() - 2 {
        return Err("ERR Number of keys can't be greater than number of args");
    }
    let keys = args[2..2 + numkeys].to_vec();
    let mut limit = 0;
    let mut index = 2 + numkeys;
    while index < args.len() {
        match args.get(index + 1) {
            Some(value) if is(args[index], "limit") => {
                let value = parse_int(value)
                    .filter(|&value| value >= 0)
                    .ok_or("ERR LIMIT can't be negative")?;
                limit = usize::try_from(value).unwrap_or(usize::MAX);
            }
            _ => return Err(SYNTAX),
        }
        index += 2;
    }
    Ok((keys, limit))
}

fn sintercard(ctx: &mut Ctx, args: &[&[u8]]) {
    let (keys, limit) = match parse_sintercard(args) {
        Ok(parsed) => parsed,
        Err(reply) => return ctx.out.error(reply),
    };
    match compute(ctx, Algebra::Inter, &keys) {
        Ok(result) if limit > 0 => ctx.out.int(result.len().min(limit) as i64),
        Ok(result) => ctx.out.int(result.len() as i64),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn sscan(ctx: &mut Ctx, args: &[&[u8]]) {
    let cursor = match SSCAN.parse_cursor(args[2]) {
        Ok(cursor) => cursor,
        Err(reply) => return ctx.out.error(reply),
    };
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let set = match ctx.guards.shard(args[1]).read::<SetValue>(db, args[1], now) {
        Ok(Some(set)) => set,
        Ok(None) => return write_scan_reply(ctx.out, 0, std::iter::empty()),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    // Options are parsed after the key lookup, so an absent key never reports an option error (Redis).
    let options = match SSCAN.parse_options(&args[3..]) {
        Ok(options) => options,
        Err(reply) => return ctx.out.error(reply),
    };
    let (next_cursor, window) = scan_window(cursor, options.count, set.len());
    let members: Vec<&[u8]> = window
        .map(|index| set.get_index(index).expect("window is in range"))
        .filter(|member| options.matches(member))
        .collect();
    write_scan_reply(ctx.out, next_cursor, members.into_iter());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sintercard_arguments_parse_like_redis() {
        use crate::command::info::set::sintercard_keys;
        let args: [&[u8]; 6] = [b"sintercard", b"2", b"a", b"b", b"LIMIT", b"3"];
        let (keys, limit) = parse_sintercard(&args).unwrap();
        assert_eq!(keys, [b"a", b"b"]);
        assert_eq!(limit, 3);
        assert_eq!(sintercard_keys(&args), vec![2, 3]);
        let zero: [&[u8]; 3] = [b"sintercard", b"0", b"a"];
        assert_eq!(
            parse_sintercard(&zero).err(),
            Some("ERR numkeys should be greater than 0")
        );
        assert!(sintercard_keys(&zero).is_empty());
        let too_many: [&[u8]; 3] = [b"sintercard", b"5", b"a"];
        assert_eq!(
            parse_sintercard(&too_many).err(),
            Some("ERR Number of keys can't be greater than number of args")
        );
        assert!(sintercard_keys(&too_many).is_empty());
        let negative: [&[u8]; 5] = [b"sintercard", b"1", b"a", b"limit", b"-1"];
        assert_eq!(
            parse_sintercard(&negative).err(),
            Some("ERR LIMIT can't be negative")
        );
        let dangling: [&[u8]; 4] = [b"sintercard", b"1", b"a", b"limit"];
        assert_eq!(parse_sintercard(&dangling).err(), Some(SYNTAX));
    }
}
