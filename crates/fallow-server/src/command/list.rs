//! List commands (Redis t_list), including the blocking pops: argument parsing, locking and replies. A
//! list is a ring buffer, O(1) at both ends; the list semantics (ends, indexes and ranges from both
//! ends, LINSERT, LPOS, LREM, LTRIM) are the store's (`fallow_store::types::list`). A blocking command
//! that finds nothing asks to block (`blocking::block_on`) and writes no reply. Every command that
//! pushes calls `wake_waiters` for the key it pushed to.
use super::blocking::{block_on, parse_mpop_with, parse_timeout, pop_first_of};
use super::{is, parse_int, Class, Ctx, Handler, NOT_INTEGER, NO_SUCH_KEY, SYNTAX, WRONGTYPE};
use crate::connection::TimeoutReply;
use fallow_store::types::list::{End, PosQuery};
use fallow_store::types::ListValue;
use fallow_store::{Kind, WrongType};

pub const HANDLERS: &[(&str, Handler)] = &[
    ("lpush", lpush),
    ("rpush", rpush),
    ("lpushx", lpushx),
    ("rpushx", rpushx),
    ("lpop", lpop),
    ("rpop", rpop),
    ("llen", llen),
    ("lrange", lrange),
    ("lindex", lindex),
    ("lset", lset),
    ("linsert", linsert),
    ("lrem", lrem),
    ("ltrim", ltrim),
    ("lpos", lpos),
    ("lmove", lmove),
    ("rpoplpush", rpoplpush),
    ("lmpop", lmpop),
    ("blpop", blpop),
    ("brpop", brpop),
    ("blmove", blmove),
    ("brpoplpush", brpoplpush),
    ("blmpop", blmpop),
];

const NOT_POSITIVE: &str = "ERR value is out of range, must be positive";

// ----- helpers ---------------------------------------------------------------------------------------

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
    let db = ctx.keyspace();
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
        list.push(end, items.iter().copied())
    })?;
    if pushed.is_some() {
        wake(ctx, key);
        ctx.notify(Class::LIST, end_event(end, "push"), key);
    }
    Ok(pushed)
}

/// `lpush`, `rpop`...: the event of an operation at one end.
fn end_event(end: End, operation: &str) -> &'static str {
    match (end, operation) {
        (End::Left, "push") => "lpush",
        (End::Right, "push") => "rpush",
        (End::Left, _) => "lpop",
        (End::Right, _) => "rpop",
    }
}

/// Pops up to `count` items from one end. Ok(None) when the key is absent.
fn pop(
    ctx: &mut Ctx,
    key: &[u8],
    end: End,
    count: usize,
) -> Result<Option<Vec<Box<[u8]>>>, WrongType> {
    let popped = pop_quietly(ctx, key, end, count)?;
    if popped.as_ref().is_some_and(|popped| !popped.is_empty()) {
        ctx.notify_and_del_if_gone(Class::LIST, end_event(end, "pop"), key);
    }
    Ok(popped)
}

/// `pop` without its notification (LMOVE publishes the push first).
fn pop_quietly(
    ctx: &mut Ctx,
    key: &[u8],
    end: End,
    count: usize,
) -> Result<Option<Vec<Box<[u8]>>>, WrongType> {
    update(ctx, key, false, |list| list.pop(end, count))
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
    with_list(ctx, args[1], |out, list| match list {
        Some(list) => {
            let count = list.range(start, end).len();
            refused = super::bulks_within(out, budget, count, || list.range(start, end));
        }
        None => out.array_len(0),
    });
    if let Err(bytes) = refused {
        ctx.refuse_reply(bytes);
    }
}

fn lindex(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(index) = parse_int(args[2]) else {
        return ctx.out.error(NOT_INTEGER);
    };
    with_list(ctx, args[1], |out, list| {
        let item = list.and_then(|list| list.get_at(index));
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
        let found = list.map_or_else(Vec::new, |list| list.positions(args[2], &query));
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

/// Parses LPOS's RANK, COUNT and MAXLEN (see `PosQuery`).
fn parse_lpos_options(options: &[&[u8]]) -> Result<PosQuery, &'static str> {
    let mut query = PosQuery::default();
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

// ----- in-place updates ------------------------------------------------------------------------------

fn lset(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(index) = parse_int(args[2]) else {
        return ctx.out.error(NOT_INTEGER);
    };
    let set = update(ctx, args[1], false, |list| list.set_at(index, args[3]));
    if let Ok(Some(true)) = set {
        ctx.notify(Class::LIST, "lset", args[1]);
    }
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
        list.insert_at_pivot(pivot, item, after)
    });
    if let Ok(Some(Some(_))) = inserted {
        ctx.notify(Class::LIST, "linsert", args[1]);
    }
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
        Ok(removed) => {
            let removed = removed.unwrap_or(0);
            if removed > 0 {
                ctx.notify_and_del_if_gone(Class::LIST, "lrem", args[1]);
            }
            ctx.out.int(removed as i64)
        }
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn ltrim(ctx: &mut Ctx, args: &[&[u8]]) {
    let (Some(start), Some(end)) = (parse_int(args[2]), parse_int(args[3])) else {
        return ctx.out.error(NOT_INTEGER);
    };
    let trimmed = update(ctx, args[1], false, |list| list.trim(start, end));
    if let Ok(Some(_)) = trimmed {
        ctx.notify_and_del_if_gone(Class::LIST, "ltrim", args[1]);
    }
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
    let db = ctx.keyspace();
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
    let popped = pop_quietly(ctx, source, from, 1)?;
    let Some(item) = popped.and_then(|mut popped| popped.pop()) else {
        return Ok(None);
    };
    // Redis publishes the push, then the pop (and the source's deletion if it emptied).
    push(ctx, destination, &[&item], to, false)?;
    ctx.notify_and_del_if_gone(Class::LIST, end_event(from, "pop"), source);
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

/// Pops from the first non-empty key; true when it replied.
fn mpop_first(ctx: &mut Ctx, keys: &[&[u8]], end: End, count: usize) -> bool {
    pop_first_of(
        ctx,
        keys,
        |ctx, key| pop(ctx, key, end, count),
        |out, popped| out.bulks(popped.iter().map(|item| &**item)),
    )
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

    fn positions(list: &ListValue, item: &[u8], query: &PosQuery) -> Vec<usize> {
        list.positions(item, query)
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
