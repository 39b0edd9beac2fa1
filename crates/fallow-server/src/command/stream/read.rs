//! XREAD and XREADGROUP. Both check every stream and id first (so an error leaves no consumer created and
//! nothing delivered), then serve the streams that have something, in argument order. With BLOCK and
//! nothing to serve the client waits (`blocking::block_then_retry`) and the command is re-run when a
//! stream it waits on changes; XREAD's `$` is replaced by the id it stood for, so a re-run waits for
//! entries after that id, not after the newest one. A re-run XREADGROUP whose stream or group went away
//! answers as Redis answers a blocked client.
use super::{c_str, error_of, strict_id_arg, write_entries, write_entries_within, write_id};
use crate::command::blocking::{block_then_retry, Timeout};
use crate::command::info::stream::xread_keys;
use crate::command::{is, parse_int, Ctx, NOT_INTEGER, SYNTAX, WRONGTYPE};
use crate::connection::TimeoutReply;
use fallow_proto::ReplyWriter;
use fallow_store::types::stream::{Entry, GroupRead, GroupReply, StreamId};
use fallow_store::types::StreamValue;
use fallow_store::WrongType;

const UNBALANCED: &str =
    "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.";

/// XREAD's and XREADGROUP's arguments.
struct ReadArgs<'a> {
    block: Option<Timeout>,
    /// At most this many entries per stream; 0 = all.
    count: usize,
    keys: &'a [&'a [u8]],
    ids: &'a [&'a [u8]],
    /// XREADGROUP's group and consumer.
    group: Option<(&'a [u8], &'a [u8])>,
    no_ack: bool,
}

fn parse_block(arg: &[u8], now_ms: u64) -> Result<Timeout, &'static str> {
    let timeout = crate::command::blocking::parse_timeout_ms(arg)?;
    if timeout.ms > (i64::MAX - now_ms as i64) as u64 {
        return Err("ERR timeout is out of range");
    }
    Ok(timeout)
}

fn parse_read<'a>(
    args: &'a [&'a [u8]],
    xreadgroup: bool,
    now_ms: u64,
) -> Result<ReadArgs<'a>, &'static str> {
    let mut parsed = ReadArgs {
        block: None,
        count: 0,
        keys: &[],
        ids: &[],
        group: None,
        no_ack: false,
    };
    let mut streams_at = None;
    let mut at = 1;
    while at < args.len() {
        let more = args.len() - at - 1;
        let option = args[at];
        if is(option, "block") && more > 0 {
            at += 1;
            parsed.block = Some(parse_block(args[at], now_ms)?);
        } else if is(option, "count") && more > 0 {
            at += 1;
            parsed.count = parse_int(args[at]).ok_or(NOT_INTEGER)?.max(0) as usize;
        } else if is(option, "streams") && more > 0 {
            if !more.is_multiple_of(2) {
                return Err(UNBALANCED);
            }
            streams_at = Some(at + 1);
            break;
        } else if is(option, "group") && more >= 2 {
            if !xreadgroup {
                return Err(
                    "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                );
            }
            parsed.group = Some((args[at + 1], args[at + 2]));
            at += 2;
        } else if is(option, "noack") {
            if !xreadgroup {
                return Err(
                    "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                );
            }
            parsed.no_ack = true;
        } else {
            return Err(SYNTAX);
        }
        at += 1;
    }
    let streams_at = streams_at.ok_or(SYNTAX)?;
    if xreadgroup && parsed.group.is_none() {
        return Err("ERR Missing GROUP option for XREADGROUP");
    }
    let half = (args.len() - streams_at) / 2;
    parsed.keys = &args[streams_at..streams_at + half];
    parsed.ids = &args[streams_at + half..];
    Ok(parsed)
}

pub fn xread(ctx: &mut Ctx, args: &[&[u8]]) {
    read_command(ctx, args, false);
}

pub fn xreadgroup(ctx: &mut Ctx, args: &[&[u8]]) {
    read_command(ctx, args, true);
}

/// The id after which each stream is read (`>` is the largest id, as in Redis), or the error reply
/// written.
fn ids_after(ctx: &mut Ctx, parsed: &ReadArgs) -> Option<Vec<StreamId>> {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let retry = ctx.conn.block_retry;
    let xreadgroup = parsed.group.is_some();
    let mut after = Vec::with_capacity(parsed.keys.len());
    for (&key, &id_arg) in parsed.keys.iter().zip(parsed.ids) {
        let shard = ctx.guards.shard(key);
        let stream = match shard.peek_collection::<StreamValue>(db, key, now) {
            Ok(stream) => stream,
            // a blocked XREAD waits on, whatever a key became meanwhile
            Err(WrongType) if retry && !xreadgroup => None,
            Err(WrongType) if retry => {
                ctx.out.error("UNBLOCKED the stream key no longer exists");
                return None;
            }
            Err(WrongType) => {
                ctx.out.error(WRONGTYPE);
                return None;
            }
        };
        let last_id = stream.map(StreamValue::last_id);
        if let Some((group, _)) = parsed.group {
            match stream {
                None if retry => {
                    ctx.out.error("UNBLOCKED the stream key no longer exists");
                    return None;
                }
                Some(stream) if stream.group(group).is_none() && retry => {
                    ctx.out.error(
                        "NOGROUP the consumer group this client was blocked on no longer exists",
                    );
                    return None;
                }
                Some(stream) if stream.group(group).is_some() => {}
                _ => {
                    error_of(
                        ctx.out,
                        &[
                            b"NOGROUP No such key '",
                            c_str(key),
                            b"' or consumer group '",
                            c_str(group),
                            b"' in XREADGROUP with GROUP option",
                        ],
                    );
                    return None;
                }
            }
        }
        let id = match id_arg {
            b"$" if xreadgroup => Err("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set."),
            b"$" => Ok(last_id.unwrap_or(StreamId::MIN)),
            b">" if !xreadgroup => Err("ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option."),
            b">" => Ok(StreamId::MAX),
            _ => strict_id_arg(id_arg),
        };
        match id {
            Ok(id) => after.push(id),
            Err(error) => {
                ctx.out.error(error);
                return None;
            }
        }
    }
    Some(after)
}

fn read_command(ctx: &mut Ctx, args: &[&[u8]], xreadgroup: bool) {
    let parsed = match parse_read(args, xreadgroup, ctx.now_ms) {
        Ok(parsed) => parsed,
        Err(error) => return ctx.out.error(error),
    };
    // The shards locked are those of the table's key positions; the parse finds the same keys, but a
    // key of an unlocked shard must never be touched.
    if xread_keys(args).len() != parsed.keys.len() {
        return ctx.out.error(SYNTAX);
    }
    let Some(after) = ids_after(ctx, &parsed) else {
        return;
    };
    let mut body = ReplyWriter::new(ctx.out.resp3);
    let served = match parsed.group {
        Some((group, consumer)) => serve_group(ctx, &parsed, &after, group, consumer, &mut body),
        None => match serve(ctx, &parsed, &after, &mut body) {
            Ok(served) => served,
            Err(bytes) => return ctx.refuse_reply(bytes),
        },
    };
    if served > 0 {
        // RESP3 maps each stream to its entries; RESP2 has [stream, entries] pairs
        if ctx.out.resp3 {
            ctx.out.map_len(served);
        } else {
            ctx.out.array_len(served);
        }
        ctx.out.buf.extend_from_slice(&body.buf);
        return;
    }
    let Some(timeout) = parsed.block else {
        return ctx.out.nil_array();
    };
    let retry_args = (!xreadgroup && parsed.ids.iter().any(|&id| id == b"$")).then(|| {
        let streams_at = args.len() - 2 * parsed.keys.len();
        let mut rewritten: Vec<Vec<u8>> = args[..streams_at + parsed.keys.len()]
            .iter()
            .map(|arg| arg.to_vec())
            .collect();
        rewritten.extend(after.iter().map(|id| id.to_string().into_bytes()));
        rewritten
    });
    block_then_retry(
        ctx,
        parsed.keys,
        timeout,
        TimeoutReply::NullArray,
        retry_args,
    );
}

/// Writes one stream's part of the reply: its name (and, in RESP2, the pair around it).
fn stream_header(body: &mut ReplyWriter, key: &[u8]) {
    if !body.resp3 {
        body.array_len(2);
    }
    body.bulk(key);
}

/// XREAD: each stream with entries after its id; returns how many streams were written, or the reply
/// bytes when they pass the client's output limit.
fn serve(
    ctx: &mut Ctx,
    parsed: &ReadArgs,
    after: &[StreamId],
    body: &mut ReplyWriter,
) -> Result<usize, u64> {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let budget = ctx.reply_budget();
    let limit = if parsed.count == 0 {
        usize::MAX
    } else {
        parsed.count
    };
    let mut served = 0;
    for (&key, &from) in parsed.keys.iter().zip(after) {
        let Ok(Some(stream)) = ctx.guards.shard(key).read::<StreamValue>(db, key, now) else {
            continue;
        };
        if stream.last_entry_id().is_none_or(|top| top <= from) {
            continue;
        }
        let start = from.next().expect("below the newest entry");
        stream_header(body, key);
        let entries = || stream.range(start, StreamId::MAX).take(limit);
        let left = budget.saturating_sub(body.buf.len() as u64);
        write_entries_within(body, left, entries).map_err(|bytes| bytes + body.buf.len() as u64)?;
        served += 1;
    }
    Ok(served)
}

/// XREADGROUP: for each stream, new entries or the consumer's history (the consumer is created, and
/// seen, when it is served); returns how many streams were written.
fn serve_group(
    ctx: &mut Ctx,
    parsed: &ReadArgs,
    after: &[StreamId],
    group: &[u8],
    consumer: &[u8],
    body: &mut ReplyWriter,
) -> usize {
    let now = ctx.now_ms as i64;
    let mut served = 0;
    for (&key, &from) in parsed.keys.iter().zip(after) {
        let read = if from == StreamId::MAX {
            GroupRead::New
        } else {
            GroupRead::History(from)
        };
        let existed = super::consumer_exists(ctx, key, group, consumer);
        let wrote = super::update(ctx, key, false, |stream, _| {
            let reply = stream.read_group(group, consumer, read, parsed.count, parsed.no_ack, now);
            match reply {
                None | Some(GroupReply::Nothing) => false,
                Some(GroupReply::New(ids)) => {
                    stream_header(body, key);
                    let entries: Vec<(StreamId, &Entry)> = ids
                        .iter()
                        .map(|&id| (id, stream.get(id).expect("just delivered")))
                        .collect();
                    write_entries(body, &entries);
                    true
                }
                Some(GroupReply::History(pending)) => {
                    stream_header(body, key);
                    body.array_len(pending.len());
                    for (id, exists) in pending {
                        match stream.get(id).filter(|_| exists) {
                            Some(entry) => super::write_entry(body, id, entry),
                            // acknowledged nowhere, deleted from the stream: the id with no fields
                            None => {
                                body.array_len(2);
                                write_id(body, id);
                                body.nil_array();
                            }
                        }
                    }
                    true
                }
            }
        });
        super::notify_consumer_created(ctx, key, group, consumer, existed);
        if matches!(wrote, Ok(Some(true))) {
            served += 1;
        }
    }
    served
}
