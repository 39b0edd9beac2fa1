//! List commands (Redis t_list), including the blocking pops. A list is a ring buffer, O(1) at both
//! ends. A blocking command that finds nothing sets `ctx.conn.block` and writes no reply; the connection
//! loop re-runs it when a push wakes its keys, or writes the timeout reply. Every command that pushes
//! calls `wake_waiters` for the key it pushed to.
use super::flags::*;
use super::string::clamp_range;
use super::{
    is, parse_float, parse_int, spec, CommandSpec, Ctx, Group, Keys, NOT_INTEGER, NO_SUCH_KEY,
    ONE_KEY, SYNTAX, WRONGTYPE,
};
use crate::connection::{BlockRequest, TimeoutReply};
use fallow_proto::ReplyWriter;
use fallow_store::types::ListValue;
use fallow_store::{Kind, WrongType};

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
        "lpush",
        -3,
        WRITE | DENYOOM | FAST,
        ONE_KEY,
        Group::List,
        "Prepend elements to a list",
        lpush,
    ),
    spec(
        "rpush",
        -3,
        WRITE | DENYOOM | FAST,
        ONE_KEY,
        Group::List,
        "Append elements to a list",
        rpush,
    ),
    spec(
        "lpushx",
        -3,
        WRITE | DENYOOM | FAST,
        ONE_KEY,
        Group::List,
        "Prepend elements to an existing list",
        lpushx,
    ),
    spec(
        "rpushx",
        -3,
        WRITE | DENYOOM | FAST,
        ONE_KEY,
        Group::List,
        "Append elements to an existing list",
        rpushx,
    ),
    spec(
        "lpop",
        -2,
        WRITE | FAST,
        ONE_KEY,
        Group::List,
        "Remove and return the first elements",
        lpop,
    ),
    spec(
        "rpop",
        -2,
        WRITE | FAST,
        ONE_KEY,
        Group::List,
        "Remove and return the last elements",
        rpop,
    ),
    spec(
        "llen",
        2,
        READONLY | FAST,
        ONE_KEY,
        Group::List,
        "Length of a list",
        llen,
    ),
    spec(
        "lrange",
        4,
        READONLY,
        ONE_KEY,
        Group::List,
        "A range of elements",
        lrange,
    ),
    spec(
        "lindex",
        3,
        READONLY,
        ONE_KEY,
        Group::List,
        "The element at an index",
        lindex,
    ),
    spec(
        "lset",
        4,
        WRITE | DENYOOM,
        ONE_KEY,
        Group::List,
        "Set the element at an index",
        lset,
    ),
    spec(
        "linsert",
        5,
        WRITE | DENYOOM,
        ONE_KEY,
        Group::List,
        "Insert an element before or after another",
        linsert,
    ),
    spec(
        "lrem",
        4,
        WRITE,
        ONE_KEY,
        Group::List,
        "Remove elements equal to a value",
        lrem,
    ),
    spec(
        "ltrim",
        4,
        WRITE,
        ONE_KEY,
        Group::List,
        "Keep only a range of elements",
        ltrim,
    ),
    spec(
        "lpos",
        -3,
        READONLY,
        ONE_KEY,
        Group::List,
        "Positions of elements equal to a value",
        lpos,
    ),
    spec(
        "lmove",
        5,
        WRITE | DENYOOM,
        FIRST_TWO_KEYS,
        Group::List,
        "Pop an element from one list and push it to another",
        lmove,
    ),
    spec(
        "rpoplpush",
        3,
        WRITE | DENYOOM,
        FIRST_TWO_KEYS,
        Group::List,
        "Pop the last element and push it to the head of another list",
        rpoplpush,
    ),
    spec(
        "lmpop",
        -4,
        WRITE,
        Keys::Custom(lmpop_keys),
        Group::List,
        "Pop elements from the first non-empty list",
        lmpop,
    ),
    spec(
        "blpop",
        -3,
        WRITE | BLOCKING,
        KEYS_BEFORE_TIMEOUT,
        Group::List,
        "Pop the first element, blocking until there is one",
        blpop,
    ),
    spec(
        "brpop",
        -3,
        WRITE | BLOCKING,
        KEYS_BEFORE_TIMEOUT,
        Group::List,
        "Pop the last element, blocking until there is one",
        brpop,
    ),
    spec(
        "blmove",
        6,
        WRITE | DENYOOM | BLOCKING,
        FIRST_TWO_KEYS,
        Group::List,
        "LMOVE, blocking until the source has an element",
        blmove,
    ),
    spec(
        "brpoplpush",
        4,
        WRITE | DENYOOM | BLOCKING,
        FIRST_TWO_KEYS,
        Group::List,
        "RPOPLPUSH, blocking until the source has an element",
        brpoplpush,
    ),
    spec(
        "blmpop",
        -5,
        WRITE | BLOCKING,
        Keys::Custom(blmpop_keys),
        Group::List,
        "LMPOP, blocking until a list has elements",
        blmpop,
    ),
];

const NOT_POSITIVE: &str = "ERR value is out of range, must be positive";

/// `numkeys` keys following the argument at `at`, bounded by the argument count.
fn keys_after_numkeys(args: &[&[u8]], at: usize) -> Vec<usize> {
    let count = args
        .get(at)
        .and_then(|arg| parse_int(arg))
        .filter(|&count| count > 0)
        .map_or(0, |count| (count as usize).min(args.len()));
    (at + 1..at + 1 + count).collect()
}

fn lmpop_keys(args: &[&[u8]]) -> Vec<usize> {
    keys_after_numkeys(args, 1)
}

fn blmpop_keys(args: &[&[u8]]) -> Vec<usize> {
    keys_after_numkeys(args, 2)
}

// ----- blocking timeouts -----------------------------------------------------------------------------

/// A blocking command's timeout; 0 = wait forever.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeout {
    pub ms: u64,
}

/// Parses a timeout in (fractional) seconds as Redis's getTimeoutFromObjectOrReply does: rounded up
/// to whole milliseconds; a value past the i64 range wraps negative in Redis, so it is "negative" here.
pub fn parse_timeout(arg: &[u8]) -> Result<Timeout, &'static str> {
    let seconds = parse_float(arg).ok_or("ERR timeout is not a float or out of range")?;
    let ms = (seconds * 1000.0).ceil();
    if !(0.0..i64::MAX as f64).contains(&ms) {
        return Err("ERR timeout is negative");
    }
    Ok(Timeout { ms: ms as u64 })
}

/// Asks the connection loop to wait for `keys`; inside EXEC, replies `exec_reply` at once. (Redis 7.0
/// answers a timed-out BLMOVE with a null array but a BLMOVE inside EXEC with a null bulk.)
/// Asks the connection to wait for `keys` (or, inside EXEC, replies what a timeout would).
pub(super) fn block_on(ctx: &mut Ctx, keys: &[&[u8]], timeout: Timeout, exec_reply: TimeoutReply) {
    if ctx.in_exec {
        return match exec_reply {
            TimeoutReply::NullArray => ctx.out.nil_array(),
            TimeoutReply::NullBulk => ctx.out.nil(),
        };
    }
    ctx.conn.block = Some(BlockRequest {
        keys: keys.iter().map(|key| key.to_vec()).collect(),
        timeout_ms: timeout.ms,
        timeout_reply: TimeoutReply::NullArray,
    });
}

// ----- helpers ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Left,
    Right,
}

fn parse_end(arg: &[u8]) -> Option<End> {
    if is(arg, "left") {
        Some(End::Left)
    } else if is(arg, "right") {
        Some(End::Right)
    } else {
        None
    }
}

fn update<R>(
    ctx: &mut Ctx,
    key: &[u8],
    create: bool,
    update: impl FnOnce(&mut ListValue) -> R,
) -> Result<Option<R>, WrongType> {
    super::update_collection(ctx, key, create, update)
}

/// Reads the list at `key` and hands it (or None) to `reply` with the reply writer.
fn with_list(
    ctx: &mut Ctx,
    key: &[u8],
    reply: impl FnOnce(&mut fallow_proto::ReplyWriter, Option<&ListValue>),
) {
    super::with_collection(ctx, key, reply);
}

fn wake(ctx: &mut Ctx, key: &[u8]) {
    let db = ctx.db();
    ctx.guards.shard(key).wake_waiters(db, key);
}

/// Pushes `items` at one end; the new length, or None when `only_existing` and the key is absent.
fn push(
    ctx: &mut Ctx,
    key: &[u8],
    items: &[&[u8]],
    end: End,
    only_existing: bool,
) -> Result<Option<usize>, WrongType> {
    let pushed = update(ctx, key, !only_existing, |list| {
        for item in items {
            match end {
                End::Left => list.push_front(item),
                End::Right => list.push_back(item),
            }
        }
        list.len()
    })?;
    if pushed.is_some() {
        wake(ctx, key);
    }
    Ok(pushed)
}

/// Pops up to `count` items from one end. Ok(None) when the key is absent.
fn pop(
    ctx: &mut Ctx,
    key: &[u8],
    end: End,
    count: usize,
) -> Result<Option<Vec<Box<[u8]>>>, WrongType> {
    update(ctx, key, false, |list| {
        let mut popped = Vec::with_capacity(count.min(list.len()));
        while popped.len() < count {
            let item = match end {
                End::Left => list.pop_front(),
                End::Right => list.pop_back(),
            };
            match item {
                Some(item) => popped.push(item),
                None => break,
            }
        }
        popped
    })
}

// ----- pushes and pops -------------------------------------------------------------------------------

fn push_command(ctx: &mut Ctx, args: &[&[u8]], end: End, only_existing: bool) {
    match push(ctx, args[1], &args[2..], end, only_existing) {
        Ok(len) => ctx.out.int(len.unwrap_or(0) as i64),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn lpush(ctx: &mut Ctx, args: &[&[u8]]) {
    push_command(ctx, args, End::Left, false);
}

fn rpush(ctx: &mut Ctx, args: &[&[u8]]) {
    push_command(ctx, args, End::Right, false);
}

fn lpushx(ctx: &mut Ctx, args: &[&[u8]]) {
    push_command(ctx, args, End::Left, true);
}

fn rpushx(ctx: &mut Ctx, args: &[&[u8]]) {
    push_command(ctx, args, End::Right, true);
}

fn pop_command(ctx: &mut Ctx, args: &[&[u8]], end: End) {
    if args.len() > 3 {
        return ctx.out.error(&super::arity_error(if end == End::Left {
            "lpop"
        } else {
            "rpop"
        }));
    }
    let count = match args.get(2).map(|arg| parse_int(arg)) {
        None => None,
        Some(Some(count)) if count >= 0 => Some(count as usize),
        Some(_) => return ctx.out.error(NOT_POSITIVE),
    };
    match (pop(ctx, args[1], end, count.unwrap_or(1)), count) {
        (Err(WrongType), _) => ctx.out.error(WRONGTYPE),
        (Ok(None), Some(_)) => ctx.out.nil_array(),
        (Ok(None), None) => ctx.out.nil(),
        (Ok(Some(popped)), Some(_)) => ctx.out.bulks(popped.iter().map(|item| &**item)),
        (Ok(Some(popped)), None) => match popped.first() {
            Some(item) => ctx.out.bulk(item),
            None => ctx.out.nil(),
        },
    }
}

fn lpop(ctx: &mut Ctx, args: &[&[u8]]) {
    pop_command(ctx, args, End::Left);
}

fn rpop(ctx: &mut Ctx, args: &[&[u8]]) {
    pop_command(ctx, args, End::Right);
}

// ----- reads -----------------------------------------------------------------------------------------

fn llen(ctx: &mut Ctx, args: &[&[u8]]) {
    with_list(ctx, args[1], |out, list| {
        out.int(list.map_or(0, ListValue::len) as i64)
    });
}

fn lrange(ctx: &mut Ctx, args: &[&[u8]]) {
    let (Some(start), Some(end)) = (parse_int(args[2]), parse_int(args[3])) else {
        return ctx.out.error(NOT_INTEGER);
    };
    let budget = ctx.reply_budget();
    let mut refused = Ok(());
    with_list(ctx, args[1], |out, list| {
        match list.and_then(|list| Some((list, clamp_range(start, end, list.len())?))) {
            Some((list, (from, to))) => {
                let count = to - from + 1;
                refused =
                    super::bulks_within(out, budget, count, || list.iter().skip(from).take(count));
            }
            None => out.array_len(0),
        }
    });
    if let Err(bytes) = refused {
        ctx.refuse_reply(bytes);
    }
}

/// Resolves a possibly negative index; None when out of range.
fn resolve_index(index: i64, len: usize) -> Option<usize> {
    let resolved = if index < 0 { len as i64 + index } else { index };
    (0..len as i64)
        .contains(&resolved)
        .then_some(resolved as usize)
}

fn lindex(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(index) = parse_int(args[2]) else {
        return ctx.out.error(NOT_INTEGER);
    };
    with_list(ctx, args[1], |out, list| {
        let item = list.and_then(|list| list.get(resolve_index(index, list.len())?));
        match item {
            Some(item) => out.bulk(item),
            None => out.nil(),
        }
    });
}

fn lpos(ctx: &mut Ctx, args: &[&[u8]]) {
    let query = match parse_lpos_options(&args[3..]) {
        Ok(query) => query,
        Err(error) => return ctx.out.error(error),
    };
    with_list(ctx, args[1], |out, list| {
        let found = list.map_or_else(Vec::new, |list| positions(list, args[2], &query));
        match query.count {
            Some(_) => {
                out.array_len(found.len());
                for position in found {
                    out.int(position as i64);
                }
            }
            None => match found.first() {
                Some(&position) => out.int(position as i64),
                None => out.nil(),
            },
        }
    });
}

/// LPOS options: RANK (which match to start from, negative = from the tail), COUNT (0 = all),
/// MAXLEN (elements to compare at most, 0 = all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LposQuery {
    rank: i64,
    count: Option<usize>,
    maxlen: usize,
}

fn parse_lpos_options(options: &[&[u8]]) -> Result<LposQuery, &'static str> {
    let mut query = LposQuery {
        rank: 1,
        count: None,
        maxlen: 0,
    };
    for pair in options.chunks(2) {
        let [name, value] = pair else {
            return Err(SYNTAX);
        };
        if !["rank", "count", "maxlen"]
            .iter()
            .any(|option| is(name, option))
        {
            return Err(SYNTAX);
        }
        let value = parse_int(value).ok_or(NOT_INTEGER)?;
        if is(name, "rank") {
            if value == 0 {
                return Err("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list");
            }
            if value == i64::MIN {
                return Err("ERR value is out of range");
            }
            query.rank = value;
        } else if is(name, "count") {
            if value < 0 {
                return Err("ERR COUNT can't be negative");
            }
            query.count = Some(value as usize);
        } else {
            if value < 0 {
                return Err("ERR MAXLEN can't be negative");
            }
            query.maxlen = value as usize;
        }
    }
    Ok(query)
}

/// Positions of `item` in `list` under the LPOS options.
fn positions(list: &ListValue, item: &[u8], query: &LposQuery) -> Vec<usize> {
    let wanted = match query.count {
        Some(0) => usize::MAX,
        Some(count) => count,
        None => 1,
    };
    let scanned = if query.maxlen == 0 {
        list.len()
    } else {
        query.maxlen.min(list.len())
    };
    let skip = (query.rank.unsigned_abs() - 1) as usize;
    let indexed = list.iter().enumerate();
    let matching = |(_, candidate): &(usize, &[u8])| *candidate == item;
    if query.rank > 0 {
        indexed
            .take(scanned)
            .filter(matching)
            .skip(skip)
            .take(wanted)
            .map(|(index, _)| index)
            .collect()
    } else {
        indexed
            .rev()
            .take(scanned)
            .filter(matching)
            .skip(skip)
            .take(wanted)
            .map(|(index, _)| index)
            .collect()
    }
}

// ----- in-place updates ------------------------------------------------------------------------------

fn lset(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(index) = parse_int(args[2]) else {
        return ctx.out.error(NOT_INTEGER);
    };
    let set = update(ctx, args[1], false, |list| {
        resolve_index(index, list.len()).is_some_and(|index| list.set(index, args[3]))
    });
    match set {
        Ok(Some(true)) => ctx.out.ok(),
        Ok(Some(false)) => ctx.out.error("ERR index out of range"),
        Ok(None) => ctx.out.error(NO_SUCH_KEY),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn linsert(ctx: &mut Ctx, args: &[&[u8]]) {
    let after = if is(args[2], "after") {
        true
    } else if is(args[2], "before") {
        false
    } else {
        return ctx.out.error(SYNTAX);
    };
    let (pivot, item) = (args[3], args[4]);
    let inserted = update(ctx, args[1], false, |list| {
        let found = list.iter().position(|candidate| candidate == pivot)?;
        list.insert(found + after as usize, item);
        Some(list.len())
    });
    match inserted {
        Ok(Some(Some(len))) => ctx.out.int(len as i64),
        Ok(Some(None)) => ctx.out.int(-1),
        Ok(None) => ctx.out.int(0),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn lrem(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(count) = parse_int(args[2]) else {
        return ctx.out.error(NOT_INTEGER);
    };
    match update(ctx, args[1], false, |list| {
        list.remove_matching(args[3], count)
    }) {
        Ok(removed) => ctx.out.int(removed.unwrap_or(0) as i64),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn ltrim(ctx: &mut Ctx, args: &[&[u8]]) {
    let (Some(start), Some(end)) = (parse_int(args[2]), parse_int(args[3])) else {
        return ctx.out.error(NOT_INTEGER);
    };
    let trimmed = update(ctx, args[1], false, |list| {
        match clamp_range(start, end, list.len()) {
            Some((from, to)) => list.retain_range(from, to + 1),
            None => list.retain_range(0, 0),
        }
    });
    match trimmed {
        Ok(_) => ctx.out.ok(),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

// ----- moves -----------------------------------------------------------------------------------------

/// Moves one element from `source` to `destination`. Ok(None) when the source is absent.
fn move_one(
    ctx: &mut Ctx,
    source: &[u8],
    destination: &[u8],
    from: End,
    to: End,
) -> Result<Option<Box<[u8]>>, WrongType> {
    let db = ctx.db();
    let now = ctx.now_ms;
    let source_kind = ctx
        .guards
        .shard(source)
        .peek(db, source, now)
        .map(|info| info.kind);
    match source_kind {
        None => {
            ctx.guards.shard(source).access(db, source, now);
            return Ok(None);
        }
        Some(Kind::List) => {}
        Some(_) => return Err(WrongType),
    }
    let destination_kind = ctx
        .guards
        .shard(destination)
        .peek(db, destination, now)
        .map(|info| info.kind);
    if destination_kind.is_some_and(|kind| kind != Kind::List) {
        return Err(WrongType);
    }
    let Some(item) = pop(ctx, source, from, 1)?.and_then(|mut popped| popped.pop()) else {
        return Ok(None);
    };
    push(ctx, destination, &[&item], to, false)?;
    Ok(Some(item))
}

fn reply_moved(ctx: &mut Ctx, moved: Result<Option<Box<[u8]>>, WrongType>) {
    match moved {
        Ok(Some(item)) => ctx.out.bulk(&item),
        Ok(None) => ctx.out.nil(),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn lmove(ctx: &mut Ctx, args: &[&[u8]]) {
    let (Some(from), Some(to)) = (parse_end(args[3]), parse_end(args[4])) else {
        return ctx.out.error(SYNTAX);
    };
    let moved = move_one(ctx, args[1], args[2], from, to);
    reply_moved(ctx, moved);
}

fn rpoplpush(ctx: &mut Ctx, args: &[&[u8]]) {
    let moved = move_one(ctx, args[1], args[2], End::Right, End::Left);
    reply_moved(ctx, moved);
}

fn blocking_move(ctx: &mut Ctx, args: &[&[u8]], from: End, to: End, timeout: &[u8]) {
    let timeout = match parse_timeout(timeout) {
        Ok(timeout) => timeout,
        Err(error) => return ctx.out.error(error),
    };
    match move_one(ctx, args[1], args[2], from, to) {
        Ok(None) => block_on(ctx, &args[1..2], timeout, TimeoutReply::NullBulk),
        moved => reply_moved(ctx, moved),
    }
}

fn blmove(ctx: &mut Ctx, args: &[&[u8]]) {
    let (Some(from), Some(to)) = (parse_end(args[3]), parse_end(args[4])) else {
        return ctx.out.error(SYNTAX);
    };
    blocking_move(ctx, args, from, to, args[5]);
}

fn brpoplpush(ctx: &mut Ctx, args: &[&[u8]]) {
    blocking_move(ctx, args, End::Right, End::Left, args[3]);
}

// ----- multi-key pops --------------------------------------------------------------------------------

fn blocking_pop(ctx: &mut Ctx, args: &[&[u8]], end: End) {
    let timeout = match parse_timeout(args[args.len() - 1]) {
        Ok(timeout) => timeout,
        Err(error) => return ctx.out.error(error),
    };
    let keys = &args[1..args.len() - 1];
    for key in keys {
        match pop(ctx, key, end, 1) {
            Ok(Some(popped)) if !popped.is_empty() => {
                ctx.out.array_len(2);
                ctx.out.bulk(key);
                return ctx.out.bulk(&popped[0]);
            }
            Ok(_) => {}
            Err(WrongType) => return ctx.out.error(WRONGTYPE),
        }
    }
    block_on(ctx, keys, timeout, TimeoutReply::NullArray);
}

fn blpop(ctx: &mut Ctx, args: &[&[u8]]) {
    blocking_pop(ctx, args, End::Left);
}

fn brpop(ctx: &mut Ctx, args: &[&[u8]]) {
    blocking_pop(ctx, args, End::Right);
}

/// LMPOP/BLMPOP arguments from `numkeys` on: the keys, the end and the count.
fn parse_mpop<'a>(args: &'a [&'a [u8]]) -> Result<(&'a [&'a [u8]], End, usize), &'static str> {
    parse_mpop_with(args, parse_end)
}

/// *MPOP arguments from `numkeys` on: the keys, the end (`parse_end` reads LEFT/RIGHT or MIN/MAX) and the
/// count. Shared by LMPOP/BLMPOP and ZMPOP/BZMPOP.
pub(super) fn parse_mpop_with<'a, E>(
    args: &'a [&'a [u8]],
    parse_end: impl Fn(&[u8]) -> Option<E>,
) -> Result<(&'a [&'a [u8]], E, usize), &'static str> {
    let numkeys = parse_int(args[0]).ok_or(NOT_INTEGER)?;
    if numkeys <= 0 {
        return Err("ERR numkeys should be greater than 0");
    }
    let numkeys = numkeys as usize;
    if numkeys >= args.len() {
        return Err(SYNTAX);
    }
    let keys = &args[1..1 + numkeys];
    let rest = &args[1 + numkeys..];
    let end = parse_end(rest[0]).ok_or(SYNTAX)?;
    let count = match rest {
        [_] => 1,
        [_, option, count] if is(option, "count") => match parse_int(count) {
            Some(count) if count > 0 => count as usize,
            _ => return Err("ERR count should be greater than 0"),
        },
        _ => return Err(SYNTAX),
    };
    Ok((keys, end, count))
}

/// Pops from the first non-empty key; true when it replied.
fn mpop_first(ctx: &mut Ctx, keys: &[&[u8]], end: End, count: usize) -> bool {
    pop_first_of(
        ctx,
        keys,
        |ctx, key| pop(ctx, key, end, count),
        |out, popped| out.bulks(popped.iter().map(|item| &**item)),
    )
}

/// *MPOP's core, shared by lists and sorted sets: pops from the first key that yields something and
/// replies `[key, popped]` (or WRONGTYPE). True when it replied.
pub(super) fn pop_first_of<T>(
    ctx: &mut Ctx,
    keys: &[&[u8]],
    mut pop: impl FnMut(&mut Ctx, &[u8]) -> Result<Option<Vec<T>>, WrongType>,
    reply: impl Fn(&mut ReplyWriter, &[T]),
) -> bool {
    for key in keys {
        match pop(ctx, key) {
            Ok(Some(popped)) if !popped.is_empty() => {
                ctx.out.array_len(2);
                ctx.out.bulk(key);
                reply(ctx.out, &popped);
                return true;
            }
            Ok(_) => {}
            Err(WrongType) => {
                ctx.out.error(WRONGTYPE);
                return true;
            }
        }
    }
    false
}

fn lmpop(ctx: &mut Ctx, args: &[&[u8]]) {
    let (keys, end, count) = match parse_mpop(&args[1..]) {
        Ok(parsed) => parsed,
        Err(error) => return ctx.out.error(error),
    };
    if !mpop_first(ctx, keys, end, count) {
        ctx.out.nil_array();
    }
}

fn blmpop(ctx: &mut Ctx, args: &[&[u8]]) {
    let timeout = match parse_timeout(args[1]) {
        Ok(timeout) => timeout,
        Err(error) => return ctx.out.error(error),
    };
    let (keys, end, count) = match parse_mpop(&args[2..]) {
        Ok(parsed) => parsed,
        Err(error) => return ctx.out.error(error),
    };
    if !mpop_first(ctx, keys, end, count) {
        block_on(ctx, keys, timeout, TimeoutReply::NullArray);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[&str]) -> ListValue {
        let mut list = ListValue::default();
        for item in items {
            list.push_back(item.as_bytes());
        }
        list
    }

    #[test]
    fn timeouts_parse_like_redis() {
        assert_eq!(parse_timeout(b"0"), Ok(Timeout { ms: 0 }));
        assert_eq!(parse_timeout(b"0.3"), Ok(Timeout { ms: 300 }));
        assert_eq!(parse_timeout(b"0.0001"), Ok(Timeout { ms: 1 }));
        assert_eq!(parse_timeout(b"-1"), Err("ERR timeout is negative"));
        assert_eq!(parse_timeout(b"1e16"), Err("ERR timeout is negative"));
        assert_eq!(
            parse_timeout(b"abc"),
            Err("ERR timeout is not a float or out of range")
        );
    }

    #[test]
    fn indexes_resolve_from_both_ends() {
        assert_eq!(resolve_index(0, 3), Some(0));
        assert_eq!(resolve_index(-1, 3), Some(2));
        assert_eq!(resolve_index(-4, 3), None);
        assert_eq!(resolve_index(3, 3), None);
    }

    #[test]
    fn lpos_ranks_counts_and_maxlen() {
        let items = list(&["a", "b", "a", "c", "a"]);
        let query = |options: &[&[u8]]| parse_lpos_options(options).unwrap();
        assert_eq!(positions(&items, b"a", &query(&[])), vec![0]);
        assert_eq!(positions(&items, b"a", &query(&[b"RANK", b"2"])), vec![2]);
        assert_eq!(
            positions(&items, b"a", &query(&[b"COUNT", b"0"])),
            vec![0, 2, 4]
        );
        assert_eq!(
            positions(&items, b"a", &query(&[b"RANK", b"-1", b"COUNT", b"2"])),
            vec![4, 2]
        );
        assert_eq!(
            positions(&items, b"a", &query(&[b"COUNT", b"0", b"MAXLEN", b"2"])),
            vec![0]
        );
        assert!(parse_lpos_options(&[b"RANK", b"0"])
            .unwrap_err()
            .contains("can't be zero"));
        assert_eq!(
            parse_lpos_options(&[b"COUNT", b"-1"]),
            Err("ERR COUNT can't be negative")
        );
        assert_eq!(parse_lpos_options(&[b"RANK"]), Err(SYNTAX));
    }

    #[test]
    fn mpop_arguments() {
        let args: [&[u8]; 5] = [b"2", b"a", b"b", b"LEFT", b"COUNT"];
        assert_eq!(parse_mpop(&args).err(), Some(SYNTAX));
        let args: [&[u8]; 3] = [b"0", b"a", b"LEFT"];
        assert!(parse_mpop(&args).is_err());
        let args: [&[u8]; 5] = [b"1", b"a", b"RIGHT", b"COUNT", b"3"];
        let (keys, end, count) = parse_mpop(&args).unwrap();
        assert_eq!((keys.len(), end, count), (1, End::Right, 3));
    }
}
