//! Sorted-set commands (Redis t_zset). A sorted set keeps member → score in a hash map and
//! (score, member) in an ordered tree; rank lookups walk the tree, which is O(n) but cache-friendly.
//! Scores are replied as doubles (`%.17g` bulk strings in RESP2, `,` doubles in RESP3).
use super::flags::*;
use super::list::{parse_timeout, Timeout};
use super::string::clamp_range;
use super::{
    is, parse_float, parse_int, spec, CommandSpec, Ctx, Group, Keys, NOT_FLOAT, NOT_INTEGER,
    ONE_KEY, SYNTAX, WRONGTYPE,
};
use crate::connection::TimeoutReply;
use fallow_proto::ReplyWriter;
use fallow_store::types::{SetValue, ZSetValue};
use fallow_store::{Collection, Kind, WrongType};
use rand::Rng;
use std::collections::HashMap;
use std::ops::Bound;

const FIRST_TWO_KEYS: Keys = Keys::Range {
    first: 1,
    last: 2,
    step: 1,
};
/// Every argument but the last (the timeout) is a key.
const KEYS_BEFORE_TIMEOUT: Keys = Keys::Range {
    first: 1,
    last: -2,
    step: 1,
};

pub const COMMANDS: &[CommandSpec] = &[
    spec(
        "zadd",
        -4,
        WRITE | DENYOOM | FAST,
        ONE_KEY,
        Group::SortedSet,
        "Add members to a sorted set, or update their scores",
        zadd,
    ),
    spec(
        "zincrby",
        4,
        WRITE | DENYOOM | FAST,
        ONE_KEY,
        Group::SortedSet,
        "Increment the score of a member",
        zincrby,
    ),
    spec(
        "zscore",
        3,
        READONLY | FAST,
        ONE_KEY,
        Group::SortedSet,
        "Score of a member",
        zscore,
    ),
    spec(
        "zmscore",
        -3,
        READONLY | FAST,
        ONE_KEY,
        Group::SortedSet,
        "Scores of several members",
        zmscore,
    ),
    spec(
        "zcard",
        2,
        READONLY | FAST,
        ONE_KEY,
        Group::SortedSet,
        "Number of members",
        zcard,
    ),
    spec(
        "zcount",
        4,
        READONLY | FAST,
        ONE_KEY,
        Group::SortedSet,
        "Count members in a score range",
        zcount,
    ),
    spec(
        "zlexcount",
        4,
        READONLY | FAST,
        ONE_KEY,
        Group::SortedSet,
        "Count members in a lexicographical range",
        zlexcount,
    ),
    spec(
        "zrank",
        3,
        READONLY | FAST,
        ONE_KEY,
        Group::SortedSet,
        "Rank of a member, lowest score first",
        zrank,
    ),
    spec(
        "zrevrank",
        3,
        READONLY | FAST,
        ONE_KEY,
        Group::SortedSet,
        "Rank of a member, highest score first",
        zrevrank,
    ),
    spec(
        "zrange",
        -4,
        READONLY,
        ONE_KEY,
        Group::SortedSet,
        "Members in a range of ranks, scores or names",
        zrange,
    ),
    spec(
        "zrangestore",
        -5,
        WRITE | DENYOOM,
        FIRST_TWO_KEYS,
        Group::SortedSet,
        "Store a range of members in another key",
        zrangestore,
    ),
    spec(
        "zrevrange",
        -4,
        READONLY,
        ONE_KEY,
        Group::SortedSet,
        "Members in a range of ranks, highest score first",
        zrevrange,
    ),
    spec(
        "zrangebyscore",
        -4,
        READONLY,
        ONE_KEY,
        Group::SortedSet,
        "Members in a score range",
        zrangebyscore,
    ),
    spec(
        "zrevrangebyscore",
        -4,
        READONLY,
        ONE_KEY,
        Group::SortedSet,
        "Members in a score range, highest score first",
        zrevrangebyscore,
    ),
    spec(
        "zrangebylex",
        -4,
        READONLY,
        ONE_KEY,
        Group::SortedSet,
        "Members in a lexicographical range",
        zrangebylex,
    ),
    spec(
        "zrevrangebylex",
        -4,
        READONLY,
        ONE_KEY,
        Group::SortedSet,
        "Members in a lexicographical range, reversed",
        zrevrangebylex,
    ),
    spec(
        "zrem",
        -3,
        WRITE | FAST,
        ONE_KEY,
        Group::SortedSet,
        "Remove members",
        zrem,
    ),
    spec(
        "zremrangebyrank",
        4,
        WRITE,
        ONE_KEY,
        Group::SortedSet,
        "Remove members in a range of ranks",
        zremrangebyrank,
    ),
    spec(
        "zremrangebyscore",
        4,
        WRITE,
        ONE_KEY,
        Group::SortedSet,
        "Remove members in a score range",
        zremrangebyscore,
    ),
    spec(
        "zremrangebylex",
        4,
        WRITE,
        ONE_KEY,
        Group::SortedSet,
        "Remove members in a lexicographical range",
        zremrangebylex,
    ),
    spec(
        "zpopmin",
        -2,
        WRITE | FAST,
        ONE_KEY,
        Group::SortedSet,
        "Remove and return the lowest-scored members",
        zpopmin,
    ),
    spec(
        "zpopmax",
        -2,
        WRITE | FAST,
        ONE_KEY,
        Group::SortedSet,
        "Remove and return the highest-scored members",
        zpopmax,
    ),
    spec(
        "bzpopmin",
        -3,
        WRITE | FAST | BLOCKING,
        KEYS_BEFORE_TIMEOUT,
        Group::SortedSet,
        "Pop the lowest-scored member, blocking until one is there",
        bzpopmin,
    ),
    spec(
        "bzpopmax",
        -3,
        WRITE | FAST | BLOCKING,
        KEYS_BEFORE_TIMEOUT,
        Group::SortedSet,
        "Pop the highest-scored member, blocking until one is there",
        bzpopmax,
    ),
    spec(
        "zmpop",
        -4,
        WRITE,
        Keys::Custom(zmpop_keys),
        Group::SortedSet,
        "Pop members from the first non-empty sorted set",
        zmpop,
    ),
    spec(
        "bzmpop",
        -5,
        WRITE | BLOCKING,
        Keys::Custom(bzmpop_keys),
        Group::SortedSet,
        "Pop members from the first non-empty sorted set, blocking",
        bzmpop,
    ),
    spec(
        "zrandmember",
        -2,
        READONLY,
        ONE_KEY,
        Group::SortedSet,
        "Random members",
        zrandmember,
    ),
    spec(
        "zunionstore",
        -4,
        WRITE | DENYOOM,
        Keys::Custom(store_keys),
        Group::SortedSet,
        "Store the union of sorted sets",
        zunionstore,
    ),
    spec(
        "zinterstore",
        -4,
        WRITE | DENYOOM,
        Keys::Custom(store_keys),
        Group::SortedSet,
        "Store the intersection of sorted sets",
        zinterstore,
    ),
    spec(
        "zdiffstore",
        -4,
        WRITE | DENYOOM,
        Keys::Custom(store_keys),
        Group::SortedSet,
        "Store the difference of sorted sets",
        zdiffstore,
    ),
    spec(
        "zunion",
        -3,
        READONLY,
        Keys::Custom(numkeys_keys),
        Group::SortedSet,
        "Union of sorted sets",
        zunion,
    ),
    spec(
        "zinter",
        -3,
        READONLY,
        Keys::Custom(numkeys_keys),
        Group::SortedSet,
        "Intersection of sorted sets",
        zinter,
    ),
    spec(
        "zdiff",
        -3,
        READONLY,
        Keys::Custom(numkeys_keys),
        Group::SortedSet,
        "Difference of sorted sets",
        zdiff,
    ),
    spec(
        "zintercard",
        -3,
        READONLY,
        Keys::Custom(numkeys_keys),
        Group::SortedSet,
        "Size of the intersection of sorted sets",
        zintercard,
    ),
    spec(
        "zscan",
        -3,
        READONLY,
        ONE_KEY,
        Group::SortedSet,
        "Iterate members and scores",
        zscan,
    ),
];

/// Members and scores copied out of a sorted set (or a set, with score 1).
type Scored = Vec<(Box<[u8]>, f64)>;
/// A source of an intersection, indexed by member, with its weight.
type Indexed = (HashMap<Box<[u8]>, f64>, f64);
/// Iteration bounds of a lex range.
type LexLimits<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

const NOT_FLOAT_RANGE: &str = "ERR min or max is not a float";
const NOT_LEX_RANGE: &str = "ERR min or max not valid string range item";
const NAN_SCORE: &str = "ERR resulting score is not a number (NaN)";
const NOT_POSITIVE: &str = "ERR value is out of range, must be positive";
/// Sets up to this size are returned by ZSCAN in one call, as Redis does for listpack-encoded sets.
const SCAN_SINGLE_CALL_LEN_MAX: usize = 128;
/// Largest COUNT one ZSCAN call honours, so a reply stays bounded.
const SCAN_COUNT_MAX: usize = 1 << 20;

// ----- key specs for numkeys commands ---------------------------------------------------------------

/// `numkeys` keys following the argument at `at`, bounded by the argument count.
fn keys_after_numkeys(args: &[&[u8]], at: usize) -> Vec<usize> {
    let count = args
        .get(at)
        .and_then(|arg| parse_int(arg))
        .filter(|&count| count > 0)
        .map_or(0, |count| (count as usize).min(args.len()));
    (at + 1..at + 1 + count).collect()
}

/// ZUNIONSTORE dest numkeys key...: the destination and the sources.
fn store_keys(args: &[&[u8]]) -> Vec<usize> {
    let mut keys = vec![1];
    keys.extend(keys_after_numkeys(args, 2));
    keys
}

/// ZUNION numkeys key...
fn numkeys_keys(args: &[&[u8]]) -> Vec<usize> {
    keys_after_numkeys(args, 1)
}

fn zmpop_keys(args: &[&[u8]]) -> Vec<usize> {
    keys_after_numkeys(args, 1)
}

fn bzmpop_keys(args: &[&[u8]]) -> Vec<usize> {
    keys_after_numkeys(args, 2)
}

// ----- range parsing --------------------------------------------------------------------------------

/// Parses a score bound: `1.5`, `(1.5` (exclusive), `-inf`, `+inf`.
pub fn parse_score_bound(arg: &[u8]) -> Option<Bound<f64>> {
    match arg.strip_prefix(b"(") {
        Some(rest) => parse_float(rest).map(Bound::Excluded),
        None => parse_float(arg).map(Bound::Included),
    }
}

/// One end of a lexicographical range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LexBound<'a> {
    /// `-`: below every member.
    Lowest,
    /// `+`: above every member.
    Highest,
    Inclusive(&'a [u8]),
    Exclusive(&'a [u8]),
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

/// Converts lex bounds to iteration bounds; None when the range is empty by construction.
pub fn lex_bounds<'a>(min: LexBound<'a>, max: LexBound<'a>) -> Option<LexLimits<'a>> {
    let low = match min {
        LexBound::Lowest => Bound::Unbounded,
        LexBound::Highest => return None,
        LexBound::Inclusive(value) => Bound::Included(value),
        LexBound::Exclusive(value) => Bound::Excluded(value),
    };
    let high = match max {
        LexBound::Highest => Bound::Unbounded,
        LexBound::Lowest => return None,
        LexBound::Inclusive(value) => Bound::Included(value),
        LexBound::Exclusive(value) => Bound::Excluded(value),
    };
    Some((low, high))
}

/// A parsed ZRANGE-family range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Range<'a> {
    Rank(i64, i64),
    Score(Bound<f64>, Bound<f64>),
    Lex(LexBound<'a>, LexBound<'a>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum By {
    Rank,
    Score,
    Lex,
}

impl Range<'_> {
    fn parse<'a>(by: By, min: &'a [u8], max: &'a [u8]) -> Result<Range<'a>, &'static str> {
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
}

/// Members of `zset` in `range`, in reply order (descending when `rev`), after `LIMIT offset count`
/// (a negative offset selects nothing, a negative count means all, as in Redis).
pub fn select<'z>(
    zset: &'z ZSetValue,
    range: &Range<'z>,
    rev: bool,
    limit: Option<(i64, i64)>,
) -> Vec<(&'z [u8], f64)> {
    let (offset, count) = limit.unwrap_or((0, -1));
    if offset < 0 {
        return Vec::new();
    }
    let take = usize::try_from(count).unwrap_or(usize::MAX);
    let offset = offset as usize;
    match *range {
        Range::Rank(start, end) => {
            let Some((from, to)) = clamp_range(start, end, zset.len()) else {
                return Vec::new();
            };
            let span = to - from + 1;
            if rev {
                zset.iter().rev().skip(from).take(span).collect()
            } else {
                zset.iter().skip(from).take(span).collect()
            }
        }
        Range::Score(min, max) => {
            let found = zset.range_by_score(min, max);
            pick(found, rev, offset, take)
        }
        Range::Lex(min, max) => match lex_bounds(min, max) {
            Some((low, high)) => pick(zset.range_by_lex(low, high), rev, offset, take),
            None => Vec::new(),
        },
    }
}

/// Applies direction, offset and count to an ascending run of members.
fn pick<'z>(
    ascending: impl Iterator<Item = (&'z [u8], f64)>,
    rev: bool,
    offset: usize,
    take: usize,
) -> Vec<(&'z [u8], f64)> {
    if rev {
        let mut all: Vec<_> = ascending.collect();
        all.reverse();
        all.into_iter().skip(offset).take(take).collect()
    } else {
        ascending.skip(offset).take(take).collect()
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

/// Stores `zset` under `key` (deleting the key when it is empty) and wakes BZPOP waiters.
fn store(ctx: &mut Ctx, key: &[u8], zset: ZSetValue) {
    let db = ctx.db();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    if zset.is_empty() {
        shard.remove(db, key, now);
    } else {
        shard.put_collection(db, key, Collection::ZSet(zset), 0, now);
        shard.wake_waiters(db, key);
    }
}

// ----- ZADD / ZINCRBY --------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, Default)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

/// What one ZADD element did.
#[derive(Clone, Copy, Debug, PartialEq)]
enum AddOutcome {
    Added(f64),
    Updated(f64),
    /// Already had that score: not a change for CH, but INCR still replies it.
    Same(f64),
    /// The flags forbade the change.
    Skipped,
    NotANumber,
}

/// Redis's zsetAdd: applies one (score, member) under the ZADD flags.
fn add_one(zset: &mut ZSetValue, member: &[u8], score: f64, flags: AddFlags) -> AddOutcome {
    match zset.score(member) {
        Some(current) => {
            if flags.nx {
                return AddOutcome::Skipped;
            }
            let new = if flags.incr { current + score } else { score };
            if new.is_nan() {
                return AddOutcome::NotANumber;
            }
            if (flags.lt && new >= current) || (flags.gt && new <= current) {
                return AddOutcome::Skipped;
            }
            if new == current {
                return AddOutcome::Same(new);
            }
            zset.insert(member, new);
            AddOutcome::Updated(new)
        }
        None if flags.xx => AddOutcome::Skipped,
        None => {
            zset.insert(member, score);
            AddOutcome::Added(score)
        }
    }
}

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
            .map(|&(score, member)| add_one(zset, member, score, flags))
            .collect::<Vec<_>>()
    });
    let outcomes = match outcomes {
        Ok(Some(outcomes)) => outcomes,
        Ok(None) if flags.incr => return ctx.out.nil(),
        Ok(None) => return ctx.out.int(0),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let db = ctx.db();
    ctx.guards.shard(args[1]).wake_waiters(db, args[1]);
    reply_add(ctx.out, &outcomes, flags);
}

fn reply_add(out: &mut ReplyWriter, outcomes: &[AddOutcome], flags: AddFlags) {
    if outcomes.contains(&AddOutcome::NotANumber) {
        return out.error(NAN_SCORE);
    }
    if flags.incr {
        return match outcomes.first() {
            Some(
                AddOutcome::Added(score) | AddOutcome::Updated(score) | AddOutcome::Same(score),
            ) => out.double(*score),
            _ => out.nil(),
        };
    }
    let counted = outcomes
        .iter()
        .filter(|outcome| match outcome {
            AddOutcome::Added(_) => true,
            AddOutcome::Updated(_) => flags.ch,
            _ => false,
        })
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
    match update(ctx, args[1], true, |zset| {
        add_one(zset, args[3], delta, flags)
    }) {
        Ok(Some(outcome)) => {
            let db = ctx.db();
            ctx.guards.shard(args[1]).wake_waiters(db, args[1]);
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
    let range = match Range::parse(by, args[2], args[3]) {
        Ok(range) => range,
        Err(error) => return ctx.out.error(error),
    };
    with_zset(ctx, args[1], |out, zset| {
        let count = zset.map_or(0, |zset| select(zset, &range, false, None).len());
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
        let rank = zset.and_then(|zset| {
            let rank = zset.rank(args[2])?;
            Some(if rev { zset.len() - 1 - rank } else { rank })
        });
        match rank {
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
        range: Range::parse(by, min, max)?,
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
                select(zset, &request.range, request.rev, request.limit)
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
    let db = ctx.db();
    let now = ctx.now_ms;
    let result = match ctx
        .guards
        .shard(call.key)
        .read::<ZSetValue>(db, call.key, now)
    {
        Ok(zset) => {
            let mut result = ZSetValue::default();
            if let Some(zset) = zset {
                for (member, score) in select(zset, &request.range, request.rev, request.limit) {
                    result.insert(member, score);
                }
            }
            result
        }
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let len = result.len();
    store(ctx, destination, result);
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
        Ok(removed) => ctx.out.int(removed.unwrap_or(0) as i64),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn remove_range(ctx: &mut Ctx, args: &[&[u8]], by: By) {
    let range = match Range::parse(by, args[2], args[3]) {
        Ok(range) => range,
        Err(error) => return ctx.out.error(error),
    };
    let removed = update(ctx, args[1], false, |zset| {
        let doomed: Vec<Box<[u8]>> = select(zset, &range, false, None)
            .into_iter()
            .map(|(member, _)| member.into())
            .collect();
        for member in &doomed {
            zset.remove(member);
        }
        doomed.len()
    });
    match removed {
        Ok(removed) => ctx.out.int(removed.unwrap_or(0) as i64),
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Min,
    Max,
}

/// Pops up to `count` members from one end. Ok(None) when the key is absent.
fn pop(ctx: &mut Ctx, key: &[u8], end: End, count: usize) -> Result<Option<Scored>, WrongType> {
    update(ctx, key, false, |zset| {
        let mut popped = Vec::with_capacity(count.min(zset.len()));
        while popped.len() < count {
            let next = match end {
                End::Min => zset.pop_min(),
                End::Max => zset.pop_max(),
            };
            match next {
                Some(pair) => popped.push(pair),
                None => break,
            }
        }
        popped
    })
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
fn block_on(ctx: &mut Ctx, keys: &[&[u8]], timeout: Timeout) {
    super::list::block_on(ctx, keys, timeout, TimeoutReply::NullArray);
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
    block_on(ctx, keys, timeout);
}

fn bzpopmin(ctx: &mut Ctx, args: &[&[u8]]) {
    bzpop(ctx, args, End::Min);
}

fn bzpopmax(ctx: &mut Ctx, args: &[&[u8]]) {
    bzpop(ctx, args, End::Max);
}

/// ZMPOP/BZMPOP arguments from `numkeys` on: the keys, the end and the count.
fn parse_mpop<'a>(args: &'a [&'a [u8]]) -> Result<(&'a [&'a [u8]], End, usize), &'static str> {
    super::list::parse_mpop_with(args, |end| {
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
    super::list::pop_first_of(ctx, keys, |ctx, key| pop(ctx, key, end, count), reply_pairs)
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
        block_on(ctx, keys, timeout);
    }
}

// ----- ZRANDMEMBER -----------------------------------------------------------------------------------

fn zrandmember(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len() > 4 || (args.len() == 4 && !is(args[3], "withscores")) {
        return ctx.out.error(SYNTAX);
    }
    let withscores = args.len() == 4;
    let count = match args.get(2).map(|arg| parse_int(arg)) {
        None => None,
        Some(None) => return ctx.out.error(NOT_INTEGER),
        Some(Some(count)) if count == i64::MIN => {
            return ctx.out.error("ERR value is out of range")
        }
        Some(Some(count)) if withscores && count.unsigned_abs() > i64::MAX as u64 / 2 => {
            return ctx.out.error("ERR value is out of range")
        }
        Some(Some(count)) => Some(count),
    };
    with_zset(ctx, args[1], |out, zset| match (count, zset) {
        (None, None) => out.nil(),
        (None, Some(zset)) => {
            let index = rand::thread_rng().gen_range(0..zset.len());
            let (member, _) = zset.iter().nth(index).expect("index < len");
            out.bulk(member);
        }
        (Some(_), None) | (Some(0), _) => out.array_len(0),
        (Some(count), Some(zset)) => random_members(out, zset, count, withscores),
    });
}

/// `count > 0`: up to count distinct members; `count < 0`: |count| members, repeats allowed.
fn random_members(out: &mut ReplyWriter, zset: &ZSetValue, count: i64, withscores: bool) {
    let all: Vec<(&[u8], f64)> = zset.iter().collect();
    let mut rng = rand::thread_rng();
    if count < 0 {
        let picks = count.unsigned_abs() as usize;
        let members = (0..picks).map(|_| all[rng.gen_range(0..all.len())]);
        return reply_members(out, ExactLen::new(members, picks), withscores);
    }
    let wanted = (count as usize).min(all.len());
    let chosen = rand::seq::index::sample(&mut rng, all.len(), wanted);
    reply_members(out, chosen.into_iter().map(|index| all[index]), withscores);
}

/// An iterator of known length (random picks are produced lazily, never collected).
struct ExactLen<I> {
    inner: I,
    left: usize,
}

impl<I> ExactLen<I> {
    fn new(inner: I, len: usize) -> Self {
        ExactLen { inner, left: len }
    }
}

impl<I: Iterator> Iterator for ExactLen<I> {
    type Item = I::Item;
    fn next(&mut self) -> Option<I::Item> {
        let item = self.inner.next()?;
        self.left -= 1;
        Some(item)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<I: Iterator> ExactSizeIterator for ExactLen<I> {}

// ----- set operations --------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

impl Aggregate {
    fn apply(self, current: f64, value: f64) -> f64 {
        match self {
            // inf + -inf is NaN; Redis turns it into 0.
            Aggregate::Sum => {
                let sum = current + value;
                if sum.is_nan() {
                    0.0
                } else {
                    sum
                }
            }
            Aggregate::Min => current.min(value),
            Aggregate::Max => current.max(value),
        }
    }
}

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
    let db = ctx.db();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    match shard.peek(db, key, now).map(|info| info.kind) {
        None => {
            shard.access(db, key, now);
            Ok(None)
        }
        Some(Kind::ZSet) => Ok(shard.read::<ZSetValue>(db, key, now)?.map(|zset| {
            zset.iter()
                .map(|(member, score)| (member.into(), score))
                .collect()
        })),
        Some(Kind::Set) => Ok(shard
            .read::<SetValue>(db, key, now)?
            .map(|set| set.iter().map(|member| (member.into(), 1.0)).collect())),
        Some(_) => Err(WrongType),
    }
}

/// Weighted score; 0 * inf is NaN, which Redis turns into 0.
fn weighted(score: f64, weight: f64) -> f64 {
    let value = score * weight;
    if value.is_nan() {
        0.0
    } else {
        value
    }
}

/// Computes a union, intersection or difference of the sources.
fn combine(mut sources: Vec<(Scored, f64)>, op: SetOp, aggregate: Aggregate) -> ZSetValue {
    let mut result = ZSetValue::default();
    match op {
        SetOp::Union => {
            let mut scores: HashMap<Box<[u8]>, f64> = HashMap::new();
            for (members, weight) in sources {
                for (member, score) in members {
                    let value = weighted(score, weight);
                    scores
                        .entry(member)
                        .and_modify(|current| *current = aggregate.apply(*current, value))
                        .or_insert(value);
                }
            }
            for (member, score) in scores {
                result.insert(&member, score);
            }
        }
        SetOp::Inter => {
            // Walk the smallest source, as Redis does.
            sources.sort_by_key(|(members, _)| members.len());
            let mut sources = sources.into_iter();
            let Some((first, first_weight)) = sources.next() else {
                return result;
            };
            let others: Vec<Indexed> = sources
                .map(|(members, weight)| (members.into_iter().collect(), weight))
                .collect();
            'members: for (member, score) in first {
                let mut value = weighted(score, first_weight);
                for (other, weight) in &others {
                    match other.get(&member) {
                        Some(&score) => value = aggregate.apply(value, weighted(score, *weight)),
                        None => continue 'members,
                    }
                }
                result.insert(&member, value);
            }
        }
        SetOp::Diff => {
            let mut sources = sources.into_iter();
            let Some((first, _)) = sources.next() else {
                return result;
            };
            let others: Vec<std::collections::HashSet<Box<[u8]>>> = sources
                .map(|(members, _)| members.into_iter().map(|(member, _)| member).collect())
                .collect();
            for (member, score) in first {
                if !others.iter().any(|other| other.contains(&member)) {
                    result.insert(&member, score);
                }
            }
        }
    }
    result
}

/// Reads the sources and combines them. Err(reply) on a wrong type.
fn compute_set_op(ctx: &mut Ctx, request: &SetOpRequest, op: SetOp) -> Result<ZSetValue, ()> {
    let mut sources = Vec::with_capacity(request.keys.len());
    for (key, weight) in request.keys.iter().zip(&request.weights) {
        match read_scored(ctx, key) {
            Ok(Some(members)) => sources.push((members, *weight)),
            // An absent source empties an intersection, and is nothing to a union or difference.
            Ok(None) if op == SetOp::Inter => sources.push((Vec::new(), *weight)),
            Ok(None) if op == SetOp::Diff && sources.is_empty() => {
                sources.push((Vec::new(), *weight))
            }
            Ok(None) => {}
            Err(WrongType) => {
                ctx.out.error(WRONGTYPE);
                return Err(());
            }
        }
    }
    Ok(combine(sources, op, request.aggregate))
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
    store(ctx, args[1], result);
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
    let Some(cursor) = std::str::from_utf8(args[2])
        .ok()
        .and_then(|text| text.parse::<u64>().ok())
    else {
        return ctx.out.error("ERR invalid cursor");
    };
    let mut pattern: Option<&[u8]> = None;
    let mut count = 10usize;
    let mut index = 3;
    while index < args.len() {
        let Some(value) = args.get(index + 1) else {
            return ctx.out.error(SYNTAX);
        };
        if is(args[index], "match") {
            pattern = Some(value);
        } else if is(args[index], "count") {
            match parse_int(value) {
                Some(wanted) if wanted >= 1 => count = (wanted as usize).min(SCAN_COUNT_MAX),
                Some(_) => return ctx.out.error(SYNTAX),
                None => return ctx.out.error(NOT_INTEGER),
            }
        } else {
            return ctx.out.error(SYNTAX);
        }
        index += 2;
    }
    with_zset(ctx, args[1], |out, zset| {
        let Some(zset) = zset else {
            out.array_len(2);
            out.bulk(b"0");
            return out.array_len(0);
        };
        // The cursor is a rank: small sets come back whole, as from Redis's listpack encoding.
        let start = if zset.len() <= SCAN_SINGLE_CALL_LEN_MAX {
            0
        } else {
            usize::try_from(cursor).unwrap_or(usize::MAX)
        };
        let end = if zset.len() <= SCAN_SINGLE_CALL_LEN_MAX {
            zset.len()
        } else {
            start.saturating_add(count).min(zset.len())
        };
        let next = if end >= zset.len() { 0 } else { end };
        let found: Vec<(&[u8], f64)> = zset
            .iter()
            .skip(start)
            .take(end.saturating_sub(start))
            .filter(|(member, _)| {
                pattern.is_none_or(|pattern| fallow_store::glob::matches(pattern, member))
            })
            .collect();
        out.array_len(2);
        out.bulk(next.to_string().as_bytes());
        out.array_len(2 * found.len());
        for (member, score) in found {
            out.bulk(member);
            out.bulk(fallow_proto::reply::format_double(score).as_bytes());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ZSetValue {
        let mut zset = ZSetValue::default();
        for (member, score) in [("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0)] {
            zset.insert(member.as_bytes(), score);
        }
        zset
    }

    fn names(members: Vec<(&[u8], f64)>) -> Vec<String> {
        members
            .into_iter()
            .map(|(member, _)| String::from_utf8_lossy(member).into_owned())
            .collect()
    }

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
        assert_eq!(lex_bounds(LexBound::Highest, LexBound::Highest), None);
        assert_eq!(lex_bounds(LexBound::Lowest, LexBound::Lowest), None);
    }

    #[test]
    fn selects_by_rank_score_and_lex() {
        let zset = sample();
        assert_eq!(
            names(select(&zset, &Range::Rank(1, -2), false, None)),
            ["b", "c"]
        );
        assert_eq!(names(select(&zset, &Range::Rank(0, 0), true, None)), ["d"]);
        assert!(select(&zset, &Range::Rank(3, 1), false, None).is_empty());
        let above_one = Range::Score(Bound::Excluded(1.0), Bound::Included(f64::INFINITY));
        assert_eq!(
            names(select(&zset, &above_one, false, None)),
            ["b", "c", "d"]
        );
        assert_eq!(names(select(&zset, &above_one, true, Some((1, 1)))), ["c"]);
        assert!(select(&zset, &above_one, false, Some((-1, 5))).is_empty());
        assert_eq!(
            names(select(&zset, &above_one, false, Some((1, -1)))),
            ["c", "d"]
        );
        let lex = Range::Lex(LexBound::Exclusive(b"a"), LexBound::Inclusive(b"c"));
        assert_eq!(names(select(&zset, &lex, false, None)), ["b", "c"]);
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

    #[test]
    fn zadd_flags_follow_redis() {
        let mut zset = sample();
        let gt = AddFlags {
            gt: true,
            ..AddFlags::default()
        };
        assert_eq!(add_one(&mut zset, b"a", 0.5, gt), AddOutcome::Skipped);
        assert_eq!(add_one(&mut zset, b"a", 5.0, gt), AddOutcome::Updated(5.0));
        let incr = AddFlags {
            incr: true,
            ..AddFlags::default()
        };
        zset.insert(b"inf", f64::INFINITY);
        assert_eq!(
            add_one(&mut zset, b"inf", f64::NEG_INFINITY, incr),
            AddOutcome::NotANumber
        );
    }

    #[test]
    fn set_ops_aggregate() {
        let left = vec![(Box::from(&b"x"[..]), 1.0), (Box::from(&b"y"[..]), 2.0)];
        let right = vec![(Box::from(&b"y"[..]), 3.0), (Box::from(&b"z"[..]), 4.0)];
        let union = combine(
            vec![(left.clone(), 1.0), (right.clone(), 1.0)],
            SetOp::Union,
            Aggregate::Sum,
        );
        assert_eq!(union.score(b"y"), Some(5.0));
        assert_eq!(union.len(), 3);
        let inter = combine(
            vec![(left.clone(), 2.0), (right.clone(), 1.0)],
            SetOp::Inter,
            Aggregate::Max,
        );
        assert_eq!(inter.score(b"y"), Some(4.0));
        assert_eq!(inter.len(), 1);
        let diff = combine(vec![(left, 1.0), (right, 1.0)], SetOp::Diff, Aggregate::Sum);
        assert_eq!(diff.len(), 1);
        assert_eq!(diff.score(b"x"), Some(1.0));
    }
}
