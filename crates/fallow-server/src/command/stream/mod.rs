//! Stream commands (Redis 7.0 t_stream): argument parsing, locking and replies. The stream itself, its
//! node layout and its consumer groups are the store's (`fallow_store::types::stream`); this family
//! parses ids and options in Redis's order (so the same bad command gets the same error), and writes
//! replies, RESP3 maps where Redis writes them.
//!
//! - here: ids, replies of entries, XADD, XLEN, XRANGE/XREVRANGE, XDEL, XTRIM, XSETID;
//! - `read`: XREAD and XREADGROUP, blocking included: every command that adds an entry wakes every
//!   client blocked on the stream;
//! - `groups`: XGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM;
//! - `info`: XINFO.
mod groups;
mod info;
mod read;

use super::{
    arity_error, is, parse_int, Class, Ctx, Handler, NOT_INTEGER, NO_SUCH_KEY, SYNTAX, WRONGTYPE,
};
use fallow_proto::ReplyWriter;
use fallow_store::types::stream::{
    parse_id, AddError, Entry, IdRequest, SetIdError, StreamId, Trim, TrimTo,
};
use fallow_store::types::StreamValue;
use fallow_store::WrongType;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("xadd", xadd),
    ("xlen", xlen),
    ("xrange", xrange),
    ("xrevrange", xrevrange),
    ("xdel", xdel),
    ("xtrim", xtrim),
    ("xsetid", xsetid),
    ("xread", read::xread),
    ("xreadgroup", read::xreadgroup),
    ("xgroup", groups::xgroup),
    ("xack", groups::xack),
    ("xpending", groups::xpending),
    ("xclaim", groups::xclaim),
    ("xautoclaim", groups::xautoclaim),
    ("xinfo", info::xinfo),
];

const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";
const INVALID_START: &str = "ERR invalid start ID for the interval";
const INVALID_END: &str = "ERR invalid end ID for the interval";

/// What trimming removes at most when `~` is given without LIMIT: 100 nodes' worth (Redis's
/// 100 × stream-node-max-entries).
const APPROX_TRIM_LIMIT: u64 = 100 * fallow_store::types::stream::NODE_MAX_ENTRIES as u64;

// ----- ids -------------------------------------------------------------------------------------------

/// An id where `-` and `+` are allowed; `ms` alone gets `missing_seq`.
fn id_arg(arg: &[u8], missing_seq: u64) -> Result<StreamId, &'static str> {
    parse_id(arg, missing_seq, false, false)
        .map(|parsed| parsed.id)
        .ok_or(INVALID_ID)
}

/// An id where `-` and `+` are refused.
fn strict_id_arg(arg: &[u8]) -> Result<StreamId, &'static str> {
    parse_id(arg, 0, true, false)
        .map(|parsed| parsed.id)
        .ok_or(INVALID_ID)
}

/// A range end: an id, or `(id` to exclude it (then `-` and `+` are refused). Returns the id and
/// whether it is excluded.
fn interval_arg(arg: &[u8], missing_seq: u64) -> Result<(StreamId, bool), &'static str> {
    match arg {
        [b'(', rest @ ..] if !rest.is_empty() => Ok((
            parse_id(rest, missing_seq, true, false)
                .ok_or(INVALID_ID)?
                .id,
            true,
        )),
        _ => Ok((id_arg(arg, missing_seq)?, false)),
    }
}

/// The first id a range starting at `arg` includes.
fn range_start(arg: &[u8]) -> Result<StreamId, &'static str> {
    match interval_arg(arg, 0)? {
        (id, true) => id.next().ok_or(INVALID_START),
        (id, false) => Ok(id),
    }
}

/// The last id a range ending at `arg` includes.
fn range_end(arg: &[u8]) -> Result<StreamId, &'static str> {
    match interval_arg(arg, u64::MAX)? {
        (id, true) => id.prev().ok_or(INVALID_END),
        (id, false) => Ok(id),
    }
}

// ----- replies ---------------------------------------------------------------------------------------

fn write_id(out: &mut ReplyWriter, id: StreamId) {
    out.bulk(id.to_string().as_bytes());
}

/// `[id, [field, value, ...]]`.
fn write_entry(out: &mut ReplyWriter, id: StreamId, entry: &Entry) {
    out.array_len(2);
    write_id(out, id);
    out.array_len(entry.items().len());
    for item in entry.items() {
        out.bulk(item);
    }
}

/// An array of entries.
fn write_entries(out: &mut ReplyWriter, entries: &[(StreamId, &Entry)]) {
    out.array_len(entries.len());
    for &(id, entry) in entries {
        write_entry(out, id, entry);
    }
}

/// Reply bytes of one entry as `write_entry` writes it, about (for the client's output limit).
fn entry_reply_bytes(entry: &Entry) -> u64 {
    let headers_bytes = 3 * 16;
    let id_bytes = super::bulk_reply_bytes(41);
    let items: u64 = entry
        .items()
        .map(|item| super::bulk_reply_bytes(item.len()))
        .sum();
    headers_bytes + id_bytes + items
}

/// Writes an array of the entries `entries()` yields, unless they need more than `budget` bytes of
/// reply: then nothing is written and Err holds the bytes needed. Two walks over the entries (they are
/// sized before any is copied), no list of them.
fn write_entries_within<'e, I: Iterator<Item = (StreamId, &'e Entry)>>(
    out: &mut ReplyWriter,
    budget: u64,
    entries: impl Fn() -> I,
) -> Result<(), u64> {
    let mut count = 0;
    let mut bytes = 16;
    for (_, entry) in entries() {
        count += 1;
        bytes += entry_reply_bytes(entry);
        if bytes > budget {
            return Err(bytes);
        }
    }
    out.array_len(count);
    for (id, entry) in entries() {
        write_entry(out, id, entry);
    }
    Ok(())
}

/// The bytes of `arg` as a C string would hold them (up to a NUL): Redis formats names into errors
/// with `%s`.
fn c_str(arg: &[u8]) -> &[u8] {
    arg.split(|&byte| byte == 0).next().unwrap_or_default()
}

/// An error reply assembled from pieces, client-given names included as raw bytes (line breaks become
/// spaces, as Redis makes them).
fn error_of(out: &mut ReplyWriter, pieces: &[&[u8]]) {
    out.buf.push(b'-');
    for piece in pieces {
        out.buf.extend(piece.iter().map(|&byte| match byte {
            b'\r' | b'\n' => b' ',
            byte => byte,
        }));
    }
    out.buf.extend_from_slice(b"\r\n");
}

/// Wakes every client blocked on `key` (an entry was added, or a group went away).
fn wake_readers(ctx: &mut Ctx, key: &[u8]) {
    let db = ctx.keyspace();
    ctx.guards.shard(key).wake_all_waiters(db, key);
}

/// Looks at the stream at `key` without counting a hit (writes check before they change anything).
fn peek<R>(
    ctx: &mut Ctx,
    key: &[u8],
    look: impl FnOnce(Option<&StreamValue>) -> R,
) -> Result<R, WrongType> {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let found = ctx
        .guards
        .shard(key)
        .peek_collection::<StreamValue>(db, key, now)?;
    Ok(look(found))
}

/// Whether the stream at `key` has `consumer` in `group`; None when notifications of streams are off
/// (nothing to look up for).
fn consumer_exists(ctx: &mut Ctx, key: &[u8], group: &[u8], consumer: &[u8]) -> Option<bool> {
    if !ctx.server.notify.wants(Class::STREAM) {
        return None;
    }
    let found = peek(ctx, key, |stream| {
        stream
            .and_then(|stream| stream.group(group))
            .is_some_and(|group| group.consumer(consumer).is_some())
    });
    Some(found.unwrap_or(false))
}

/// Publishes `xgroup-createconsumer` when a command created the consumer implicitly (XREADGROUP,
/// XCLAIM, XAUTOCLAIM), as Redis does; `existed` is `consumer_exists` from before the command.
fn notify_consumer_created(
    ctx: &mut Ctx,
    key: &[u8],
    group: &[u8],
    consumer: &[u8],
    existed: Option<bool>,
) {
    if existed == Some(false) && consumer_exists(ctx, key, group, consumer) == Some(true) {
        ctx.notify(Class::STREAM, "xgroup-createconsumer", key);
    }
}

/// Runs `change` on the stream at `key` (created when absent and `create`), with the reply writer.
fn update<R>(
    ctx: &mut Ctx,
    key: &[u8],
    create: bool,
    change: impl FnOnce(&mut StreamValue, &mut ReplyWriter) -> R,
) -> Result<Option<R>, WrongType> {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let out = &mut *ctx.out;
    ctx.guards
        .shard(key)
        .update::<StreamValue, R>(db, key, now, create, |stream| change(stream, out))
}

// ----- XADD and XTRIM ----------------------------------------------------------------------------------

/// XADD's and XTRIM's options, as Redis's streamParseAddOrTrimArgsOrReply reads them.
struct AddTrimArgs {
    /// XADD's id; None for `*`.
    id: Option<IdRequest>,
    /// Where the id is (XADD's fields follow it).
    id_at: usize,
    no_mkstream: bool,
    trim: Option<Trim>,
}

fn parse_add_or_trim(args: &[&[u8]], xadd: bool) -> Result<AddTrimArgs, &'static str> {
    let mut parsed = AddTrimArgs {
        id: None,
        id_at: args.len(),
        no_mkstream: false,
        trim: None,
    };
    let mut to: Option<TrimTo> = None;
    let mut approx = false;
    let mut limit: Option<u64> = None;
    let mut at = 2;
    while at < args.len() {
        let more = args.len() - 1 - at;
        let option = args[at];
        if xadd && option == b"*" {
            break;
        } else if (is(option, "maxlen") || is(option, "minid")) && more > 0 {
            if to.is_some() {
                return Err(
                    "ERR syntax error, MAXLEN and MINID options at the same time are not compatible",
                );
            }
            approx = false;
            if more >= 2 && (args[at + 1] == b"~" || args[at + 1] == b"=") {
                approx = args[at + 1] == b"~";
                at += 1;
            }
            let value = args[at + 1];
            to = Some(if is(option, "maxlen") {
                match parse_int(value) {
                    Some(max) if max >= 0 => TrimTo::MaxLen(max as u64),
                    Some(_) => return Err("ERR The MAXLEN argument must be >= 0."),
                    None => return Err(NOT_INTEGER),
                }
            } else {
                TrimTo::MinId(strict_id_arg(value)?)
            });
            at += 1;
        } else if is(option, "limit") && more > 0 {
            match parse_int(args[at + 1]) {
                Some(value) if value >= 0 => limit = Some(value as u64),
                Some(_) => return Err("ERR The LIMIT argument must be >= 0."),
                None => return Err(NOT_INTEGER),
            }
            at += 1;
        } else if xadd && is(option, "nomkstream") {
            parsed.no_mkstream = true;
        } else if xadd {
            let id = parse_id(option, 0, true, true).ok_or(INVALID_ID)?;
            parsed.id = Some(match id.seq_given {
                true => IdRequest::Exact(id.id),
                false => IdRequest::Ms(id.id.ms),
            });
            break;
        } else {
            return Err(SYNTAX);
        }
        at += 1;
    }
    parsed.id_at = at;
    if limit.is_some_and(|limit| limit != 0) && to.is_none() {
        return Err(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        );
    }
    let Some(to) = to else {
        if !xadd {
            return Err("ERR syntax error, XTRIM must be called with a trimming strategy");
        }
        return Ok(parsed);
    };
    let limit = match limit {
        Some(_) if !approx => {
            return Err("ERR syntax error, LIMIT cannot be used without the special ~ option")
        }
        Some(limit) => limit,
        None if approx => APPROX_TRIM_LIMIT,
        None => 0,
    };
    parsed.trim = Some(Trim { to, approx, limit });
    Ok(parsed)
}

fn add_error(error: AddError) -> &'static str {
    match error {
        AddError::Exhausted => {
            "ERR The stream has exhausted the last possible ID, unable to add more items"
        }
        AddError::NotGreater => {
            "ERR The ID specified in XADD is equal or smaller than the target stream top item"
        }
        AddError::TooLarge => "ERR Elements are too large to be stored",
    }
}

fn xadd(ctx: &mut Ctx, args: &[&[u8]]) {
    let parsed = match parse_add_or_trim(args, true) {
        Ok(parsed) => parsed,
        Err(error) => return ctx.out.error(error),
    };
    let pairs = args.get(parsed.id_at + 1..).unwrap_or_default();
    if pairs.len() < 2 || pairs.len() % 2 == 1 {
        return ctx.out.error(&arity_error("xadd"));
    }
    let request = parsed.id.unwrap_or(IdRequest::Auto);
    if request == IdRequest::Exact(StreamId::MIN) {
        return ctx
            .out
            .error("ERR The ID specified in XADD must be greater than 0-0");
    }
    let key = args[1];
    let now = ctx.now_ms;
    // checked first, so a refused XADD leaves no key behind
    let check = peek(ctx, key, |stream| match stream {
        Some(stream) => Some(stream.check_add(request, pairs, now)),
        None if parsed.no_mkstream => None,
        None => Some(StreamValue::default().check_add(request, pairs, now)),
    });
    match check {
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
        Ok(None) => return ctx.out.nil(),
        Ok(Some(Err(error))) => return ctx.out.error(add_error(error)),
        Ok(Some(Ok(()))) => {}
    }
    let limits = ctx.server.config.read().stream_node_limits();
    let added = update(ctx, key, true, |stream, out| {
        let id = stream
            .add_with_node_limits(request, pairs, now, limits)
            .expect("checked");
        write_id(out, id);
        parsed.trim.as_ref().map_or(0, |trim| stream.trim(trim))
    });
    debug_assert!(matches!(added, Ok(Some(_))));
    wake_readers(ctx, key);
    ctx.notify(Class::STREAM, "xadd", key);
    if let Ok(Some(trimmed)) = added {
        if trimmed > 0 {
            ctx.notify(Class::STREAM, "xtrim", key);
        }
    }
}

fn xtrim(ctx: &mut Ctx, args: &[&[u8]]) {
    let trim = match parse_add_or_trim(args, false) {
        Ok(parsed) => parsed.trim.expect("XTRIM requires a strategy"),
        Err(error) => return ctx.out.error(error),
    };
    match update(ctx, args[1], false, |stream, _| stream.trim(&trim)) {
        Ok(deleted) => {
            let deleted = deleted.unwrap_or(0);
            if deleted > 0 {
                ctx.notify(Class::STREAM, "xtrim", args[1]);
            }
            ctx.out.int(deleted as i64)
        }
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

// ----- reads and deletes -----------------------------------------------------------------------------

fn xlen(ctx: &mut Ctx, args: &[&[u8]]) {
    super::with_collection(ctx, args[1], |out, stream: Option<&StreamValue>| {
        out.int(stream.map_or(0, StreamValue::len) as i64)
    });
}

fn xrange(ctx: &mut Ctx, args: &[&[u8]]) {
    range_command(ctx, args, false);
}

fn xrevrange(ctx: &mut Ctx, args: &[&[u8]]) {
    range_command(ctx, args, true);
}

/// XRANGE key start end [COUNT n] / XREVRANGE key end start [COUNT n].
fn range_command(ctx: &mut Ctx, args: &[&[u8]], reverse: bool) {
    let (start_arg, end_arg) = if reverse {
        (args[3], args[2])
    } else {
        (args[2], args[3])
    };
    let range = range_start(start_arg).and_then(|start| Ok((start, range_end(end_arg)?)));
    let (start, end) = match range {
        Ok(range) => range,
        Err(error) => return ctx.out.error(error),
    };
    let mut count: Option<usize> = None;
    let mut at = 4;
    while at < args.len() {
        if !is(args[at], "count") || at + 1 == args.len() {
            return ctx.out.error(SYNTAX);
        }
        match parse_int(args[at + 1]) {
            Some(value) => count = Some(value.max(0) as usize),
            None => return ctx.out.error(NOT_INTEGER),
        }
        at += 2;
    }
    let budget = ctx.reply_budget();
    let mut refused = Ok(());
    super::with_collection(ctx, args[1], |out, stream: Option<&StreamValue>| {
        let Some(stream) = stream else {
            return out.array_len(0);
        };
        let limit = match count {
            Some(0) => return out.nil_array(),
            Some(count) => count,
            None => usize::MAX,
        };
        refused = if reverse {
            write_entries_within(out, budget, || stream.range(start, end).rev().take(limit))
        } else {
            write_entries_within(out, budget, || stream.range(start, end).take(limit))
        };
    });
    if let Err(bytes) = refused {
        ctx.refuse_reply(bytes);
    }
}

fn xdel(ctx: &mut Ctx, args: &[&[u8]]) {
    let key = args[1];
    match peek(ctx, key, |stream| stream.is_some()) {
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
        Ok(false) => return ctx.out.int(0),
        Ok(true) => {}
    }
    let ids: Result<Vec<StreamId>, _> = args[2..].iter().map(|arg| strict_id_arg(arg)).collect();
    let ids = match ids {
        Ok(ids) => ids,
        Err(error) => return ctx.out.error(error),
    };
    let deleted = update(ctx, key, false, |stream, _| {
        ids.iter().filter(|&&id| stream.delete(id)).count()
    });
    let deleted = deleted.ok().flatten().unwrap_or(0);
    if deleted > 0 {
        ctx.notify(Class::STREAM, "xdel", key);
    }
    ctx.out.int(deleted as i64);
}

// ----- XSETID ----------------------------------------------------------------------------------------

fn xsetid(ctx: &mut Ctx, args: &[&[u8]]) {
    let id = match strict_id_arg(args[2]) {
        Ok(id) => id,
        Err(error) => return ctx.out.error(error),
    };
    let mut entries_added = None;
    let mut max_deleted = None;
    let mut at = 3;
    while at < args.len() {
        let more = args.len() - 1 - at;
        if is(args[at], "entriesadded") && more > 0 {
            match parse_int(args[at + 1]) {
                Some(added) if added >= 0 => entries_added = Some(added as u64),
                Some(_) => return ctx.out.error("ERR entries_added must be positive"),
                None => return ctx.out.error(NOT_INTEGER),
            }
        } else if is(args[at], "maxdeletedid") && more > 0 {
            let deleted = match strict_id_arg(args[at + 1]) {
                Ok(deleted) => deleted,
                Err(error) => return ctx.out.error(error),
            };
            if id < deleted {
                return ctx.out.error(
                    "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                );
            }
            max_deleted = Some(deleted);
        } else {
            return ctx.out.error(SYNTAX);
        }
        at += 2;
    }
    let key = args[1];
    // checked first, so a refused XSETID changes nothing
    let check = peek(ctx, key, |stream| {
        stream.map(|stream| stream.check_set_id(id, entries_added))
    });
    let refusal = match check {
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
        Ok(None) => return ctx.out.error(NO_SUCH_KEY),
        Ok(Some(result)) => result.err(),
    };
    match refusal {
        Some(SetIdError::BelowTop) => ctx
            .out
            .error("ERR The ID specified in XSETID is smaller than the target stream top item"),
        Some(SetIdError::EntriesAddedTooSmall) => ctx.out.error(
            "ERR The entries_added specified in XSETID is smaller than the target stream length",
        ),
        None => {
            let set = update(ctx, key, false, |stream, _| {
                stream.set_id(id, entries_added, max_deleted)
            });
            debug_assert!(matches!(set, Ok(Some(Ok(())))));
            ctx.notify(Class::STREAM, "xsetid", key);
            ctx.out.ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trim_of(args: &[&[u8]]) -> Result<Option<Trim>, &'static str> {
        parse_add_or_trim(args, true).map(|parsed| parsed.trim)
    }

    #[test]
    fn add_options_parse_like_redis() {
        let parsed =
            parse_add_or_trim(&[b"xadd", b"s", b"NOMKSTREAM", b"5-*", b"f", b"v"], true).unwrap();
        assert_eq!(
            (parsed.id, parsed.id_at, parsed.no_mkstream),
            (Some(IdRequest::Ms(5)), 3, true)
        );
        let approx = trim_of(&[b"xadd", b"s", b"MAXLEN", b"~", b"10", b"*", b"f", b"v"]).unwrap();
        assert_eq!(
            approx,
            Some(Trim {
                to: TrimTo::MaxLen(10),
                approx: true,
                limit: APPROX_TRIM_LIMIT
            })
        );
        let exact = trim_of(&[b"xadd", b"s", b"MINID", b"=", b"7", b"*", b"f", b"v"]).unwrap();
        assert_eq!(
            exact.map(|trim| (trim.to, trim.limit)),
            Some((TrimTo::MinId(StreamId::new(7, 0)), 0))
        );
        // `=`/`~` followed by nothing is the count itself
        assert_eq!(
            parse_add_or_trim(&[b"xtrim", b"s", b"MAXLEN", b"~"], false).err(),
            Some(NOT_INTEGER)
        );
        let limited = trim_of(&[
            b"xadd", b"s", b"MAXLEN", b"~", b"1", b"LIMIT", b"0", b"*", b"f", b"v",
        ]);
        assert_eq!(limited.unwrap().map(|trim| trim.limit), Some(0));
        assert!(
            trim_of(&[b"xadd", b"s", b"MAXLEN", b"1", b"LIMIT", b"5", b"*", b"f", b"v"]).is_err()
        );
        assert_eq!(
            parse_add_or_trim(&[b"xtrim", b"s", b"FOO", b"1"], false).err(),
            Some(SYNTAX)
        );
        // an XADD without an id ends at the arguments' end (the arity check refuses it)
        assert_eq!(
            parse_add_or_trim(&[b"xadd", b"s", b"NOMKSTREAM"], true)
                .unwrap()
                .id_at,
            3
        );
    }

    #[test]
    fn range_ends_exclude_with_a_parenthesis() {
        assert_eq!(range_start(b"(1-1"), Ok(StreamId::new(1, 2)));
        assert_eq!(range_end(b"(2"), Ok(StreamId::new(2, u64::MAX - 1)));
        assert_eq!(range_end(b"2"), Ok(StreamId::new(2, u64::MAX)));
        assert_eq!(range_start(b"("), Err(INVALID_ID));
        assert_eq!(range_start(b"(+"), Err(INVALID_ID));
        assert_eq!(range_end(b"(0-0"), Err(INVALID_END));
        assert_eq!(
            range_start(b"(18446744073709551615-18446744073709551615"),
            Err(INVALID_START)
        );
    }

    #[test]
    fn names_in_errors_are_c_strings_on_one_line() {
        let mut out = ReplyWriter::new(false);
        error_of(&mut out, &[b"NOGROUP '", c_str(b"a\r\nb\0hidden"), b"'"]);
        assert_eq!(out.buf, b"-NOGROUP 'a  b'\r\n");
    }
}
