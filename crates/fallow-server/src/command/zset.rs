//! Sorted-set commands (Redis t_zset): argument parsing, locking and replies. The sorted-set semantics
//! (ZADD's flags, ranges, pops, random members, set operations) are the store's
//! (`fallow_store::types::zset`). Scores are replied as doubles (`%.17g` bulk strings in RESP2, `,`
//! doubles in RESP3).
use super::blocking::{block_on, parse_mpop_with, parse_timeout, pop_first_of, Timeout};
use super::random::{check_paired_count, parse_zrandmember_count};
use super::scan::{rank_window, write_scan_reply, NegativeCursor, ScanRules};
use super::{
    is, parse_float, parse_int, Class, Ctx, Handler, NOT_FLOAT, NOT_INTEGER, SYNTAX, WRONGTYPE,
};
use crate::connection::TimeoutReply;
use fallow_proto::ReplyWriter;
use fallow_store::types::zset::{
    AddFlags, AddOutcome, Aggregate, End, LexBound, Range, Scored, SetOp,
};
use fallow_store::types::{SetValue, ZSetValue};
use fallow_store::{Collection, Kind, WrongType};
use std::ops::Bound;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("zadd", zadd),
    ("zincrby", zincrby),
    ("zscore", zscore),
    ("zmscore", zmscore),
    ("zcard", zcard),
    ("zcount", zcount),
    ("zlexcount", zlexcount),
    ("zrank", zrank),
    ("zrevrank", zrevrank),
    ("zrange", zrange),
    ("zrangestore", zrangestore),
    ("zrevrange", zrevrange),
    ("zrangebyscore", zrangebyscore),
    ("zrevrangebyscore", zrevrangebyscore),
    ("zrangebylex", zrangebylex),
    ("zrevrangebylex", zrevrangebylex),
    ("zrem", zrem),
    ("zremrangebyrank", zremrangebyrank),
    ("zremrangebyscore", zremrangebyscore),
    ("zremrangebylex", zremrangebylex),
    ("zpopmin", zpopmin),
    ("zpopmax", zpopmax),
    ("bzpopmin", bzpopmin),
    ("bzpopmax", bzpopmax),
    ("zmpop", zmpop),
    ("bzmpop", bzmpop),
    ("zrandmember", zrandmember),
    ("zunionstore", zunionstore),
    ("zinterstore", zinterstore),
    ("zdiffstore", zdiffstore),
    ("zunion", zunion),
    ("zinter", zinter),
    ("zdiff", zdiff),
    ("zintercard", zintercard),
    ("zscan", zscan),
];

const NOT_FLOAT_RANGE: &str = "ERR min or max is not a float";
const NOT_LEX_RANGE: &str = "ERR min or max not valid string range item";
const NAN_SCORE: &str = "ERR resulting score is not a number (NaN)";
const NOT_POSITIVE: &str = "ERR value is out of range, must be positive";

/// ZSCAN: MATCH and COUNT (at most 1M, so a reply stays bounded); a negative cursor is invalid.
const ZSCAN: ScanRules = ScanRules {
    type_option: false,
    count_max: 1 << 20,
    negative_cursor: NegativeCursor::Refuse,
};

// ----- range parsing --------------------------------------------------------------------------------

/// Parses a score bound: `1.5`, `(1.5` (exclusive), `-inf`, `+inf`.
pub fn parse_score_bound(arg: &[u8]) -> Option<Bound<f64>> {
    match arg.strip_prefix(b"(") {
        Some(rest) => parse_float(rest).map(Bound::Excluded),
        None => parse_float(arg).map(Bound::Included),
    }
}

/// Parses a lex bound: `[a`, `(a`, `-`, `+`.
pub fn parse_lex_bound(arg: &[u8]) -> Option<LexBound<'_>> {
    match arg.first()? {
        b'-' if arg.len() == 1 => Some(LexBound::Lowest),
        b'+' if arg.len() == 1 => Some(LexBound::Highest),
        b'[' => Some(LexBound::Inclusive(&arg[1..])),
        b'(' => Some(LexBound::Exclusive(&arg[1..])),
        _ => None,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum By {
    Rank,
    Score,
    Lex,
}

/// Parses the two ends of a range of kind `by`.
fn parse_range<'a>(by: By, min: &'a [u8], max: &'a [u8]) -> Result<Range<'a>, &'static str> {
    match by {
        By::Rank => match (parse_int(min), parse_int(max)) {
            (Some(start), Some(end)) => Ok(Range::Rank(start, end)),
            _ => Err(NOT_INTEGER),
        },
        By::Score => match (parse_score_bound(min), parse_score_bound(max)) {
            (Some(low), Some(high)) => Ok(Range::Score(low, high)),
            _ => Err(NOT_FLOAT_RANGE),
        },
        By::Lex => match (parse_lex_bound(min), parse_lex_bound(max)) {
            (Some(low), Some(high)) => Ok(Range::Lex(low, high)),
            _ => Err(NOT_LEX_RANGE),
        },
    }
}

// ----- replies ---------------------------------------------------------------------------------------

/// Members, optionally with scores: flat pairs in RESP2, nested [member, score] pairs in RESP3.
fn reply_members<'a>(
    out: &mut ReplyWriter,
    members: impl ExactSizeIterator<Item = (&'a [u8], f64)>,
    withscores: bool,
) {
    let nested = withscores && out.resp3;
    let len = members.len();
    out.array_len(if withscores && !nested { 2 * len } else { len });
    for (member, score) in members {
        if nested {
            out.array_len(2);
        }
        out.bulk(member);
        if withscores {
            out.double(score);
        }
    }
}

/// Nested [member, score] pairs in both protocols (ZMPOP).
fn reply_pairs(out: &mut ReplyWriter, popped: &[(Box<[u8]>, f64)]) {
    out.array_len(popped.len());
    for (member, score) in popped {
        out.array_len(2);
        out.bulk(member);
        out.double(*score);
    }
}

// ----- helpers ---------------------------------------------------------------------------------------

/// Runs `update` on the sorted set at `key` (see `Shard::update`).
fn update<R>(
    ctx: &mut Ctx,
    key: &[u8],
    create: bool,
    update: impl FnOnce(&mut ZSetValue) -> R,
) -> Result<Option<R>, WrongType> {
    super::update_collection(ctx, key, create, update)
}

/// Stores `zset` under `key` (deleting the key when it is empty) and wakes BZPOP waiters; publishes
/// `event` (the command's, e.g. `zunionstore`), or `del` when an empty result deleted the key.
pub(super) fn store(ctx: &mut Ctx, key: &[u8], zset: ZSetValue, event: &str) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    if zset.is_empty() {
        if shard.remove(db, key, now) {
            ctx.notify(Class::GENERIC, "del", key);
        }
    } else {
        shard.put_collection(db, key, Collection::ZSet(zset), 0, now);
        shard.wake_waiters(db, key);
        ctx.notify(Class::ZSET, event, key);
    }
}

/// Whether ZADD changed anything (a member added or a score changed): then Redis publishes an event.
fn changed_any(outcomes: &[AddOutcome]) -> bool {
    outcomes
        .iter()
        .any(|outcome| matches!(outcome, AddOutcome::Added(_) | AddOutcome::Updated(_)))
}

// ----- ZADD / ZINCRBY --------------------------------------------------------------------------------

fn parse_add_flags(args: &[&[u8]]) -> (AddFlags, usize) {
    let mut flags = AddFlags::default();
    let mut index = 2;
    while index < args.len() {
        let arg = args[index];
        if is(arg, "nx") {
            flags.nx = true;
        } else if is(arg, "xx") {
            flags.xx = true;
        } else if is(arg, "gt") {
            flags.gt = true;
        } else if is(arg, "lt") {
            flags.lt = true;
        } else if is(arg, "ch") {
            flags.ch = true;
        } else if is(arg, "incr") {
            flags.incr = true;
        } else {
            break;
        }
        index += 1;
    }
    (flags, index)
}

fn zadd(ctx: &mut Ctx, args: &[&[u8]]) {
    let (flags, first_score) = parse_add_flags(args);
    let elements = args.len() - first_score;
    if elements == 0 || !elements.is_multiple_of(2) {
        return ctx.out.error(SYNTAX);
    }
    if flags.nx && flags.xx {
        return ctx
            .out
            .error("ERR XX and NX options at the same time are not compatible");
    }
    if (flags.nx && (flags.gt || flags.lt)) || (flags.gt && flags.lt) {
        return ctx
            .out
            .error("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if flags.incr && elements > 2 {
        return ctx
            .out
            .error("ERR INCR option supports a single increment-element pair");
    }
    let mut pairs = Vec::with_capacity(elements / 2);
    for pair in args[first_score..].chunks(2) {
        match parse_float(pair[0]) {
            Some(score) => pairs.push((score, pair[1])),
            None => return ctx.out.error(NOT_FLOAT),
        }
    }
    let outcomes = update(ctx, args[1], !flags.xx, |zset| {
        pairs
            .iter()
            .map(|&(score, member)| zset.add(member, score, flags))
            .collect::<Vec<_>>()
    });
    let outcomes = match outcomes {
        Ok(Some(outcomes)) => outcomes,
        Ok(None) if flags.incr => return ctx.out.nil(),
        Ok(None) => return ctx.out.int(0),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let db = ctx.keyspace();
    ctx.guards.shard(args[1]).wake_waiters(db, args[1]);
    if changed_any(&outcomes) {
        let event = if flags.incr { "zincr" } else { "zadd" };
        ctx.notify(Class::ZSET, event, args[1]);
    }
    reply_add(ctx.out, &outcomes, flags);
}

fn reply_add(out: &mut ReplyWriter, outcomes: &[AddOutcome], flags: AddFlags) {
    if outcomes.contains(&AddOutcome::NotANumber) {
        return out.error(NAN_SCORE);
    }
    if flags.incr {
        return match outcomes.first().and_then(|outcome| outcome.score()) {
            Some(score) => out.double(score),
            None => out.nil(),
        };
    }
    let counted = outcomes
        .iter()
        .filter(|outcome| outcome.counted(flags.ch))
        .count();
    out.int(counted as i64);
}

fn zincrby(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(delta) = parse_float(args[2]) else {
        return ctx.out.error(NOT_FLOAT);
    };
    let flags = AddFlags {
        incr: true,
        ..AddFlags::default()
    };
    match update(ctx, args[1], true, |zset| zset.incr(args[3], delta)) {
        Ok(Some(outcome)) => {
            let db = ctx.keyspace();
            ctx.guards.shard(args[1]).wake_waiters(db, args[1]);
            if changed_any(&[outcome]) {
                ctx.notify(Class::ZSET, "zincr", args[1]);
            }
            reply_add(ctx.out, &[outcome], flags);
        }
        Ok(None) => ctx.out.nil(),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

// ----- reads -----------------------------------------------------------------------------------------

/// Reads the sorted set at `key` and hands it (or None) to `reply` together with the reply writer.
fn with_zset(ctx: &mut Ctx, key: &[u8], reply: impl FnOnce(&mut ReplyWriter, Option<&ZSetValue>)) {
    super::with_collection(ctx, key, reply);
}

fn zscore(ctx: &mut Ctx, args: &[&[u8]]) {
    with_zset(ctx, args[1], |out, zset| {
        match zset.and_then(|zset| zset.score(args[2])) {
            Some(score) => out.double(score),
            None => out.nil(),
        }
    });
}

fn zmscore(ctx: &mut Ctx, args: &[&[u8]]) {
    with_zset(ctx, args[1], |out, zset| {
        out.array_len(args.len() - 2);
        for member in &args[2..] {
            match zset.and_then(|zset| zset.score(member)) {
                Some(score) => out.double(score),
                None => out.nil(),
            }
        }
    });
}

fn zcard(ctx: &mut Ctx, args: &[&[u8]]) {
    with_zset(ctx, args[1], |out, zset| {
        out.int(zset.map_or(0, ZSetValue::len) as i64)
    });
}

fn zcount(ctx: &mut Ctx, args: &[&[u8]]) {
    count_range(ctx, args, By::Score);
}

fn zlexcount(ctx: &mut Ctx, args: &[&[u8]]) {
    count_range(ctx, args, By::Lex);
}

fn count_range(ctx: &mut Ctx, args: &[&[u8]], by: By) {
    let range = match parse_range(by, args[2], args[3]) {
        Ok(range) => range,
        Err(error) => return ctx.out.error(error),
    };
    with_zset(ctx, args[1], |out, zset| {
        let count = zset.map_or(0, |zset| zset.count_in(&range));
        out.int(count as i64);
    });
}

fn zrank(ctx: &mut Ctx, args: &[&[u8]]) {
    reply_rank(ctx, args, false);
}

fn zrevrank(ctx: &mut Ctx, args: &[&[u8]]) {
    reply_rank(ctx, args, true);
}

fn reply_rank(ctx: &mut Ctx, args: &[&[u8]], rev: bool) {
    with_zset(ctx, args[1], |out, zset| {
        match zset.and_then(|zset| zset.rank_in(args[2], rev)) {
            Some(rank) => out.int(rank as i64),
            None => out.nil(),
        }
    });
}

// ----- ZRANGE and friends ----------------------------------------------------------------------------

/// How a ZRANGE-family command was called: what it fixes and where its arguments are.
struct RangeCall<'a> {
    key: &'a [u8],
    min: &'a [u8],
    max: &'a [u8],
    options: &'a [&'a [u8]],
    by: Option<By>,
    rev: Option<bool>,
    /// ZRANGESTORE's destination.
    destination: Option<&'a [u8]>,
}

/// A ZRANGE request after option parsing.
#[derive(Debug)]
struct RangeRequest<'a> {
    range: Range<'a>,
    rev: bool,
    limit: Option<(i64, i64)>,
    withscores: bool,
}

/// Redis's zrangeGenericCommand option parsing and validation.
fn parse_range_call<'a>(call: &RangeCall<'a>) -> Result<RangeRequest<'a>, &'static str> {
    let (mut by, mut rev) = (call.by, call.rev);
    let mut limit = None;
    let mut withscores = false;
    let mut index = 0;
    while index < call.options.len() {
        let option = call.options[index];
        let left = call.options.len() - index - 1;
        if call.destination.is_none() && is(option, "withscores") {
            withscores = true;
        } else if is(option, "limit") && left >= 2 {
            let offset = parse_int(call.options[index + 1]);
            let count = parse_int(call.options[index + 2]);
            let (Some(offset), Some(count)) = (offset, count) else {
                return Err(NOT_INTEGER);
            };
            limit = Some((offset, count));
            index += 2;
        } else if rev.is_none() && is(option, "rev") {
            rev = Some(true);
        } else if by.is_none() && is(option, "bylex") {
            by = Some(By::Lex);
        } else if by.is_none() && is(option, "byscore") {
            by = Some(By::Score);
        } else {
            return Err(SYNTAX);
        }
        index += 1;
    }
    let by = by.unwrap_or(By::Rank);
    let rev = rev.unwrap_or(false);
    if limit.is_some() && by == By::Rank {
        return Err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        );
    }
    if withscores && by == By::Lex {
        return Err("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
    }
    // Reversed score and lex ranges are written max first.
    let (min, max) = if rev && by != By::Rank {
        (call.max, call.min)
    } else {
        (call.min, call.max)
    };
    Ok(RangeRequest {
        range: parse_range(by, min, max)?,
        rev,
        limit,
        withscores,
    })
}

fn range_generic(ctx: &mut Ctx, call: RangeCall) {
    let request = match parse_range_call(&call) {
        Ok(request) => request,
        Err(error) => return ctx.out.error(error),
    };
    let Some(destination) = call.destination else {
        let budget = ctx.reply_budget();
        let mut refused = None;
        with_zset(ctx, call.key, |out, zset| {
            let members = zset.map_or_else(Vec::new, |zset| {
                zset.select(&request.range, request.rev, request.limit)
            });
            // Sized before it is built: refused if it would pass the client's output hard limit.
            let score_bytes = if request.withscores { 32 } else { 0 };
            let bytes: u64 = members
                .iter()
                .map(|(member, _)| super::bulk_reply_bytes(member.len()) + score_bytes)
                .sum();
            if bytes > budget {
                refused = Some(bytes);
                return;
            }
            reply_members(out, members.into_iter(), request.withscores);
        });
        if let Some(bytes) = refused {
            ctx.refuse_reply(bytes);
        }
        return;
    };
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let result = match ctx
        .guards
        .shard(call.key)
        .read::<ZSetValue>(db, call.key, now)
    {
        Ok(zset) => zset.map_or_else(ZSetValue::default, |zset| {
            zset.copy_range(&request.range, request.rev, request.limit)
        }),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let len = result.len();
    store(ctx, destination, result, "zrangestore");
    ctx.out.int(len as i64);
}

fn zrange(ctx: &mut Ctx, args: &[&[u8]]) {
    range_generic(
        ctx,
        RangeCall {
            key: args[1],
            min: args[2],
            max: args[3],
            options: &args[4..],
            by: None,
            rev: None,
            destination: None,
        },
    );
}

fn zrangestore(ctx: &mut Ctx, args: &[&[u8]]) {
    range_generic(
        ctx,
        RangeCall {
            key: args[2],
            min: args[3],
            max: args[4],
            options: &args[5..],
            by: None,
            rev: None,
            destination: Some(args[1]),
        },
    );
}

fn fixed_range(ctx: &mut Ctx, args: &[&[u8]], by: By, rev: bool) {
    range_generic(
        ctx,
        RangeCall {
            key: args[1],
            min: args[2],
            max: args[3],
            options: &args[4..],
            by: Some(by),
            rev: Some(rev),
            destination: None,
        },
    );
}

fn zrevrange(ctx: &mut Ctx, args: &[&[u8]]) {
    fixed_range(ctx, args, By::Rank, true);
}

fn zrangebyscore(ctx: &mut Ctx, args: &[&[u8]]) {
    fixed_range(ctx, args, By::Score, false);
}

fn zrevrangebyscore(ctx: &mut Ctx, args: &[&[u8]]) {
    fixed_range(ctx, args, By::Score, true);
}

fn zrangebylex(ctx: &mut Ctx, args: &[&[u8]]) {
    fixed_range(ctx, args, By::Lex, false);
}

fn zrevrangebylex(ctx: &mut Ctx, args: &[&[u8]]) {
    fixed_range(ctx, args, By::Lex, true);
}

// ----- removal ---------------------------------------------------------------------------------------

fn zrem(ctx: &mut Ctx, args: &[&[u8]]) {
    let removed = update(ctx, args[1], false, |zset| {
        args[2..]
            .iter()
            .filter(|member| zset.remove(member))
            .count()
    });
    match removed {
        Ok(removed) => {
            let removed = removed.unwrap_or(0);
            if removed > 0 {
                ctx.notify_and_del_if_gone(Class::ZSET, "zrem", args[1]);
            }
            ctx.out.int(removed as i64)
        }
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn remove_range(ctx: &mut Ctx, args: &[&[u8]], by: By) {
    let range = match parse_range(by, args[2], args[3]) {
        Ok(range) => range,
        Err(error) => return ctx.out.error(error),
    };
    let removed = update(ctx, args[1], false, |zset| zset.remove_range(&range));
    match removed {
        Ok(removed) => {
            let removed = removed.unwrap_or(0);
            if removed > 0 {
                let event = match by {
                    By::Rank => "zremrangebyrank",
                    By::Score => "zremrangebyscore",
                    By::Lex => "zremrangebylex",
                };
                ctx.notify_and_del_if_gone(Class::ZSET, event, args[1]);
            }
            ctx.out.int(removed as i64)
        }
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn zremrangebyrank(ctx: &mut Ctx, args: &[&[u8]]) {
    remove_range(ctx, args, By::Rank);
}

fn zremrangebyscore(ctx: &mut Ctx, args: &[&[u8]]) {
    remove_range(ctx, args, By::Score);
}

fn zremrangebylex(ctx: &mut Ctx, args: &[&[u8]]) {
    remove_range(ctx, args, By::Lex);
}

// ----- pops ------------------------------------------------------------------------------------------

/// Pops up to `count` members from one end. Ok(None) when the key is absent.
fn pop(ctx: &mut Ctx, key: &[u8], end: End, count: usize) -> Result<Option<Scored>, WrongType> {
    let popped = update(ctx, key, false, |zset| zset.pop(end, count))?;
    if popped.as_ref().is_some_and(|popped| !popped.is_empty()) {
        let event = match end {
            End::Min => "zpopmin",
            End::Max => "zpopmax",
        };
        ctx.notify_and_del_if_gone(Class::ZSET, event, key);
    }
    Ok(popped)
}

fn zpop(ctx: &mut Ctx, args: &[&[u8]], end: End) {
    if args.len() > 3 {
        return ctx.out.error(SYNTAX);
    }
    let count = match args.get(2).map(|arg| parse_int(arg)) {
        None => None,
        Some(Some(count)) if count >= 0 => Some(count as usize),
        Some(_) => return ctx.out.error(NOT_POSITIVE),
    };
    let popped = match pop(ctx, args[1], end, count.unwrap_or(1)) {
        Ok(popped) => popped.unwrap_or_default(),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    // With COUNT, RESP3 nests the pairs; a single pop is always one flat pair.
    let members = popped.iter().map(|(member, score)| (&**member, *score));
    if count.is_some() {
        reply_members(ctx.out, members, true);
    } else {
        ctx.out.array_len(2 * popped.len());
        for (member, score) in members {
            ctx.out.bulk(member);
            ctx.out.double(score);
        }
    }
}

fn zpopmin(ctx: &mut Ctx, args: &[&[u8]]) {
    zpop(ctx, args, End::Min);
}

fn zpopmax(ctx: &mut Ctx, args: &[&[u8]]) {
    zpop(ctx, args, End::Max);
}

/// Asks the connection loop to wait for `keys`, or replies the timeout at once inside EXEC.
fn block(ctx: &mut Ctx, keys: &[&[u8]], timeout: Timeout) {
    block_on(ctx, keys, timeout, TimeoutReply::NullArray);
}

fn bzpop(ctx: &mut Ctx, args: &[&[u8]], end: End) {
    let timeout = match parse_timeout(args[args.len() - 1]) {
        Ok(timeout) => timeout,
        Err(error) => return ctx.out.error(error),
    };
    let keys = &args[1..args.len() - 1];
    for key in keys {
        match pop(ctx, key, end, 1) {
            Ok(Some(popped)) if !popped.is_empty() => {
                let (member, score) = &popped[0];
                ctx.out.array_len(3);
                ctx.out.bulk(key);
                ctx.out.bulk(member);
                return ctx.out.double(*score);
            }
            Ok(_) => {}
            Err(WrongType) => return ctx.out.error(WRONGTYPE),
        }
    }
    block(ctx, keys, timeout);
}

fn bzpopmin(ctx: &mut Ctx, args: &[&[u8]]) {
    bzpop(ctx, args, End::Min);
}

fn bzpopmax(ctx: &mut Ctx, args: &[&[u8]]) {
    bzpop(ctx, args, End::Max);
}

/// ZMPOP/BZMPOP arguments from `numkeys` on: the keys, the end and the count.
fn parse_mpop<'a>(args: &'a [&'a [u8]]) -> Result<(&'a [&'a [u8]], End, usize), &'static str> {
    parse_mpop_with(args, |end| {
        if is(end, "min") {
            Some(End::Min)
        } else if is(end, "max") {
            Some(End::Max)
        } else {
            None
        }
    })
}

/// Pops from the first non-empty key; true when it replied.
fn mpop_first(ctx: &mut Ctx, keys: &[&[u8]], end: End, count: usize) -> bool {
    pop_first_of(ctx, keys, |ctx, key| pop(ctx, key, end, count), reply_pairs)
}

fn zmpop(ctx: &mut Ctx, args: &[&[u8]]) {
    let (keys, end, count) = match parse_mpop(&args[1..]) {
        Ok(parsed) => parsed,
        Err(error) => return ctx.out.error(error),
    };
    if !mpop_first(ctx, keys, end, count) {
        ctx.out.nil_array();
    }
}

fn bzmpop(ctx: &mut Ctx, args: &[&[u8]]) {
    let timeout = match parse_timeout(args[1]) {
        Ok(timeout) => timeout,
        Err(error) => return ctx.out.error(error),
    };
    let (keys, end, count) = match parse_mpop(&args[2..]) {
        Ok(parsed) => parsed,
        Err(error) => return ctx.out.error(error),
    };
    if !mpop_first(ctx, keys, end, count) {
        block(ctx, keys, timeout);
    }
}

// ----- ZRANDMEMBER -----------------------------------------------------------------------------------

fn zrandmember(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len() > 4 || (args.len() == 4 && !is(args[3], "withscores")) {
        return ctx.out.error(SYNTAX);
    }
    let withscores = args.len() == 4;
    let count = match args.get(2).map(|arg| parse_zrandmember_count(arg)) {
        None => None,
        Some(Ok(count)) if withscores => match check_paired_count(count) {
            Ok(count) => Some(count),
            Err(error) => return ctx.out.error(error),
        },
        Some(Ok(count)) => Some(count),
        Some(Err(error)) => return ctx.out.error(error),
    };
    with_zset(ctx, args[1], |out, zset| match (count, zset) {
        (None, None) => out.nil(),
        (None, Some(zset)) => {
            let (member, _) = zset
                .random_member(&mut rand::thread_rng())
                .expect("a stored sorted set has members");
            out.bulk(member);
        }
        (Some(_), None) | (Some(0), _) => out.array_len(0),
        (Some(count), Some(zset)) => {
            // Members, optionally with scores: flat pairs in RESP2, nested pairs in RESP3 (as
            // `reply_members` writes them), written as they are picked.
            let picks = zset.random_count(count);
            let nested = withscores && out.resp3;
            out.array_len(if withscores && !nested {
                2 * picks
            } else {
                picks
            });
            zset.random_members(count, &mut rand::thread_rng(), |member, score| {
                if nested {
                    out.array_len(2);
                }
                out.bulk(member);
                if withscores {
                    out.double(score);
                }
            });
        }
    });
}

// ----- set operations --------------------------------------------------------------------------------

/// A set-operation request after parsing.
struct SetOpRequest<'a> {
    keys: &'a [&'a [u8]],
    weights: Vec<f64>,
    aggregate: Aggregate,
    withscores: bool,
}

/// Parses `numkeys key... [WEIGHTS w...] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]` (args from numkeys on).
fn parse_set_op<'a>(
    args: &'a [&'a [u8]],
    op: SetOp,
    command: &str,
    store: bool,
) -> Result<SetOpRequest<'a>, String> {
    let numkeys = parse_int(args[0]).ok_or(NOT_INTEGER)?;
    if numkeys < 1 {
        return Err(format!(
            "ERR at least 1 input key is needed for '{command}' command"
        ));
    }
    let numkeys = numkeys as usize;
    if numkeys > args.len() - 1 {
        return Err(SYNTAX.into());
    }
    let mut request = SetOpRequest {
        keys: &args[1..1 + numkeys],
        weights: vec![1.0; numkeys],
        aggregate: Aggregate::Sum,
        withscores: false,
    };
    let mut index = 1 + numkeys;
    while index < args.len() {
        let option = args[index];
        let left = args.len() - index - 1;
        if op != SetOp::Diff && left >= numkeys && is(option, "weights") {
            for (slot, weight) in args[index + 1..=index + numkeys].iter().enumerate() {
                request.weights[slot] =
                    parse_float(weight).ok_or("ERR weight value is not a float")?;
            }
            index += numkeys;
        } else if op != SetOp::Diff && left >= 1 && is(option, "aggregate") {
            let name = args[index + 1];
            request.aggregate = if is(name, "sum") {
                Aggregate::Sum
            } else if is(name, "min") {
                Aggregate::Min
            } else if is(name, "max") {
                Aggregate::Max
            } else {
                return Err(SYNTAX.into());
            };
            index += 1;
        } else if !store && is(option, "withscores") {
            request.withscores = true;
        } else {
            return Err(SYNTAX.into());
        }
        index += 1;
    }
    Ok(request)
}

/// The members and scores of a sorted set or (score 1) a set. Ok(None): absent.
fn read_scored(ctx: &mut Ctx, key: &[u8]) -> Result<Option<Scored>, WrongType> {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    match shard.peek(db, key, now).map(|info| info.kind) {
        None => {
            shard.access(db, key, now);
            Ok(None)
        }
        Some(Kind::ZSet) => Ok(shard
            .read::<ZSetValue>(db, key, now)?
            .map(ZSetValue::scored)),
        Some(Kind::Set) => Ok(shard
            .read::<SetValue>(db, key, now)?
            .map(|set| set.iter().map(|member| (member.into(), 1.0)).collect())),
        Some(_) => Err(WrongType),
    }
}

/// Reads the sources and combines them. Err(reply) on a wrong type.
fn compute_set_op(ctx: &mut Ctx, request: &SetOpRequest, op: SetOp) -> Result<ZSetValue, ()> {
    let mut sources = Vec::with_capacity(request.keys.len());
    for (key, weight) in request.keys.iter().zip(&request.weights) {
        match read_scored(ctx, key) {
            Ok(members) => sources.push((members, *weight)),
            Err(WrongType) => {
                ctx.out.error(WRONGTYPE);
                return Err(());
            }
        }
    }
    Ok(ZSetValue::combine(sources, op, request.aggregate))
}

fn set_op_store(ctx: &mut Ctx, args: &[&[u8]], op: SetOp) {
    let command = String::from_utf8_lossy(args[0]).to_ascii_lowercase();
    let request = match parse_set_op(&args[2..], op, &command, true) {
        Ok(request) => request,
        Err(error) => return ctx.out.error(&error),
    };
    let Ok(result) = compute_set_op(ctx, &request, op) else {
        return;
    };
    let len = result.len();
    let event = match op {
        SetOp::Union => "zunionstore",
        SetOp::Inter => "zinterstore",
        SetOp::Diff => "zdiffstore",
    };
    store(ctx, args[1], result, event);
    ctx.out.int(len as i64);
}

fn set_op_reply(ctx: &mut Ctx, args: &[&[u8]], op: SetOp) {
    let command = String::from_utf8_lossy(args[0]).to_ascii_lowercase();
    let request = match parse_set_op(&args[1..], op, &command, false) {
        Ok(request) => request,
        Err(error) => return ctx.out.error(&error),
    };
    let Ok(result) = compute_set_op(ctx, &request, op) else {
        return;
    };
    let members: Vec<(&[u8], f64)> = result.iter().collect();
    reply_members(ctx.out, members.into_iter(), request.withscores);
}

fn zunionstore(ctx: &mut Ctx, args: &[&[u8]]) {
    set_op_store(ctx, args, SetOp::Union);
}

fn zinterstore(ctx: &mut Ctx, args: &[&[u8]]) {
    set_op_store(ctx, args, SetOp::Inter);
}

fn zdiffstore(ctx: &mut Ctx, args: &[&[u8]]) {
    set_op_store(ctx, args, SetOp::Diff);
}

fn zunion(ctx: &mut Ctx, args: &[&[u8]]) {
    set_op_reply(ctx, args, SetOp::Union);
}

fn zinter(ctx: &mut Ctx, args: &[&[u8]]) {
    set_op_reply(ctx, args, SetOp::Inter);
}

fn zdiff(ctx: &mut Ctx, args: &[&[u8]]) {
    set_op_reply(ctx, args, SetOp::Diff);
}

fn zintercard(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(numkeys) = parse_int(args[1]) else {
        return ctx.out.error(NOT_INTEGER);
    };
    if numkeys <= 0 {
        return ctx
            .out
            .error("ERR at least 1 input key is needed for 'zintercard' command");
    }
    let numkeys = numkeys as usize;
    if numkeys > args.len() - 2 {
        return ctx.out.error(SYNTAX);
    }
    let limit = match &args[2 + numkeys..] {
        [] => 0,
        [option, limit] if is(option, "limit") => match parse_int(limit) {
            Some(limit) if limit >= 0 => limit as usize,
            Some(_) => return ctx.out.error("ERR LIMIT can't be negative"),
            None => return ctx.out.error(NOT_INTEGER),
        },
        _ => return ctx.out.error(SYNTAX),
    };
    let request = SetOpRequest {
        keys: &args[2..2 + numkeys],
        weights: vec![1.0; numkeys],
        aggregate: Aggregate::Sum,
        withscores: false,
    };
    let Ok(result) = compute_set_op(ctx, &request, SetOp::Inter) else {
        return;
    };
    let len = if limit == 0 {
        result.len()
    } else {
        result.len().min(limit)
    };
    ctx.out.int(len as i64);
}

// ----- ZSCAN -----------------------------------------------------------------------------------------

fn zscan(ctx: &mut Ctx, args: &[&[u8]]) {
    // Cursor and options are checked before the key is looked up.
    let cursor = match ZSCAN.parse_cursor(args[2]) {
        Ok(cursor) => cursor,
        Err(error) => return ctx.out.error(error),
    };
    let options = match ZSCAN.parse_options(&args[3..]) {
        Ok(options) => options,
        Err(error) => return ctx.out.error(error),
    };
    with_zset(ctx, args[1], |out, zset| {
        let Some(zset) = zset else {
            return write_scan_reply(out, 0, std::iter::empty());
        };
        let (next, window) = rank_window(cursor, options.count, zset.len());
        let found: Vec<(&[u8], String)> = zset
            .iter()
            .skip(window.start)
            .take(window.len())
            .filter(|(member, _)| options.matches(member))
            .map(|(member, score)| (member, fallow_proto::reply::format_double(score)))
            .collect();
        let elements: Vec<&[u8]> = found
            .iter()
            .flat_map(|(member, score)| [*member, score.as_bytes()])
            .collect();
        write_scan_reply(out, next, elements.into_iter());
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_bounds_parse_like_redis() {
        assert_eq!(parse_score_bound(b"1.5"), Some(Bound::Included(1.5)));
        assert_eq!(parse_score_bound(b"(2"), Some(Bound::Excluded(2.0)));
        assert_eq!(
            parse_score_bound(b"-inf"),
            Some(Bound::Included(f64::NEG_INFINITY))
        );
        assert_eq!(
            parse_score_bound(b"(+inf"),
            Some(Bound::Excluded(f64::INFINITY))
        );
        assert_eq!(parse_score_bound(b"(("), None);
        assert_eq!(parse_score_bound(b"x"), None);
        assert_eq!(parse_score_bound(b"nan"), None);
    }

    #[test]
    fn lex_bounds_parse_like_redis() {
        assert_eq!(parse_lex_bound(b"-"), Some(LexBound::Lowest));
        assert_eq!(parse_lex_bound(b"+"), Some(LexBound::Highest));
        assert_eq!(parse_lex_bound(b"[a"), Some(LexBound::Inclusive(b"a")));
        assert_eq!(parse_lex_bound(b"(ab"), Some(LexBound::Exclusive(b"ab")));
        assert_eq!(parse_lex_bound(b"a"), None);
        assert_eq!(parse_lex_bound(b""), None);
        assert_eq!(parse_lex_bound(b"-a"), None);
    }

    #[test]
    fn range_options_validate_like_redis() {
        let call = |options: &'static [&'static [u8]], by, rev| RangeCall {
            key: b"z",
            min: b"0",
            max: b"1",
            options,
            by,
            rev,
            destination: None,
        };
        let limit_on_rank = parse_range_call(&call(&[b"LIMIT", b"0", b"1"], None, None));
        assert!(limit_on_rank
            .unwrap_err()
            .contains("LIMIT is only supported"));
        let lex_scores = parse_range_call(&call(&[b"BYLEX", b"WITHSCORES"], None, None));
        assert!(lex_scores.is_err());
        let rev_twice = parse_range_call(&call(&[b"REV"], Some(By::Score), Some(true)));
        assert_eq!(rev_twice.err(), Some(SYNTAX));
        let swapped = parse_range_call(&call(&[b"BYSCORE", b"REV"], None, None)).unwrap();
        assert_eq!(
            swapped.range,
            Range::Score(Bound::Included(1.0), Bound::Included(0.0))
        );
    }
}
