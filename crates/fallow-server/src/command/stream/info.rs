//! XINFO (a container: STREAM [FULL [COUNT n]], GROUPS, CONSUMERS, HELP). Replies are maps (flat arrays
//! in RESP2) in Redis 7.0.15's field order; radix-tree-keys and radix-tree-nodes come from the stream's
//! model of Redis's node layout.
use super::groups::{checked_subcommand, no_such_group, subcommand_syntax_error};
use super::{write_entries, write_entry, write_id};
use crate::command::{is, parse_int, Ctx, NOT_INTEGER, NO_SUCH_KEY, WRONGTYPE};
use fallow_proto::ReplyWriter;
use fallow_store::types::stream::{Entry, Group, StreamId};
use fallow_store::types::StreamValue;
use fallow_store::WrongType;

const XINFO_HELP: &[&str] = &[
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
];

/// XINFO STREAM FULL lists this many entries, pending entries and consumers' pending entries unless
/// COUNT says otherwise (0 = all).
const FULL_COUNT_DEFAULT: usize = 10;

/// The subcommands and their arities (the name included), as Redis's command table has them.
const XINFO_ARITIES: &[(&str, i64)] =
    &[("help", 2), ("consumers", 4), ("groups", 3), ("stream", -3)];

pub fn xinfo(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(name) = checked_subcommand(ctx, args, "xinfo", XINFO_ARITIES, XINFO_HELP) else {
        return;
    };
    let sub = args[1];
    let key = args[2];
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let stream = match ctx.guards.shard(key).read::<StreamValue>(db, key, now) {
        Ok(Some(stream)) => stream,
        Ok(None) => return ctx.out.error(NO_SUCH_KEY),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let out = &mut *ctx.out;
    match name {
        "consumers" => match stream.group(args[3]) {
            Some(group) => write_consumers(out, group, now as i64),
            None => no_such_group(out, key, args[3]),
        },
        "groups" => write_groups(out, stream),
        _ => match parse_stream_options(&args[3..]) {
            Ok(None) => write_stream(out, stream),
            Ok(Some(count)) => write_stream_full(out, stream, count),
            Err(StreamOptionsError::NotInteger) => out.error(NOT_INTEGER),
            Err(StreamOptionsError::Syntax) => subcommand_syntax_error(out, "XINFO", sub),
        },
    }
}

enum StreamOptionsError {
    Syntax,
    NotInteger,
}

/// XINFO STREAM's options: none (Ok(None)), FULL, or FULL COUNT n (a negative n means the default).
fn parse_stream_options(options: &[&[u8]]) -> Result<Option<usize>, StreamOptionsError> {
    match options {
        [] => Ok(None),
        [full] if is(full, "full") => Ok(Some(FULL_COUNT_DEFAULT)),
        [full, count, value] if is(full, "full") && is(count, "count") => match parse_int(value) {
            Some(count) if count < 0 => Ok(Some(FULL_COUNT_DEFAULT)),
            Some(count) => Ok(Some(count as usize)),
            None => Err(StreamOptionsError::NotInteger),
        },
        _ => Err(StreamOptionsError::Syntax),
    }
}

/// `n` = at most n, 0 = all.
fn limit(count: usize) -> usize {
    if count == 0 {
        usize::MAX
    } else {
        count
    }
}

/// The fields XINFO STREAM and XINFO STREAM FULL share (7 of them).
fn write_stream_head(out: &mut ReplyWriter, stream: &StreamValue) {
    out.bulk(b"length");
    out.int(stream.len() as i64);
    out.bulk(b"radix-tree-keys");
    out.int(stream.node_count() as i64);
    out.bulk(b"radix-tree-nodes");
    out.int(stream.radix_tree_nodes() as i64);
    out.bulk(b"last-generated-id");
    write_id(out, stream.last_id());
    out.bulk(b"max-deleted-entry-id");
    write_id(out, stream.max_deleted_id());
    out.bulk(b"entries-added");
    out.int(stream.entries_added() as i64);
    out.bulk(b"recorded-first-entry-id");
    write_id(out, stream.first_id());
}

fn write_stream(out: &mut ReplyWriter, stream: &StreamValue) {
    out.map_len(10);
    write_stream_head(out, stream);
    out.bulk(b"groups");
    out.int(stream.groups().len() as i64);
    let mut all = stream.range(StreamId::MIN, StreamId::MAX);
    out.bulk(b"first-entry");
    write_entry_or_nil(out, all.next());
    out.bulk(b"last-entry");
    let last = stream.range(StreamId::MIN, StreamId::MAX).next_back();
    write_entry_or_nil(out, last);
}

fn write_entry_or_nil(out: &mut ReplyWriter, entry: Option<(StreamId, &Entry)>) {
    match entry {
        Some((id, entry)) => write_entry(out, id, entry),
        None => out.nil(),
    }
}

fn write_stream_full(out: &mut ReplyWriter, stream: &StreamValue, count: usize) {
    out.map_len(9);
    write_stream_head(out, stream);
    out.bulk(b"entries");
    let entries: Vec<(StreamId, &Entry)> = stream
        .range(StreamId::MIN, StreamId::MAX)
        .take(limit(count))
        .collect();
    write_entries(out, &entries);
    out.bulk(b"groups");
    out.array_len(stream.groups().len());
    for (name, group) in stream.groups() {
        out.map_len(7);
        out.bulk(b"name");
        out.bulk(name);
        out.bulk(b"last-delivered-id");
        write_id(out, group.last_id());
        out.bulk(b"entries-read");
        write_optional_int(out, group.entries_read());
        out.bulk(b"lag");
        write_optional_int(out, stream.lag(group));
        out.bulk(b"pel-count");
        out.int(group.pel().len() as i64);
        out.bulk(b"pending");
        let pending: Vec<_> = group.pel().iter().take(limit(count)).collect();
        out.array_len(pending.len());
        for (&id, entry) in pending {
            out.array_len(4);
            write_id(out, id);
            out.bulk(&entry.consumer);
            out.int(entry.delivery_ms);
            out.int(entry.delivery_count as i64);
        }
        out.bulk(b"consumers");
        out.array_len(group.consumers().len());
        for (name, consumer) in group.consumers() {
            out.map_len(4);
            out.bulk(b"name");
            out.bulk(name);
            out.bulk(b"seen-time");
            out.int(consumer.seen_ms);
            out.bulk(b"pel-count");
            out.int(consumer.pending().len() as i64);
            out.bulk(b"pending");
            let owned: Vec<_> = consumer.pending().iter().take(limit(count)).collect();
            out.array_len(owned.len());
            for &id in owned {
                let entry = &group.pel()[&id];
                out.array_len(3);
                write_id(out, id);
                out.int(entry.delivery_ms);
                out.int(entry.delivery_count as i64);
            }
        }
    }
}

fn write_optional_int(out: &mut ReplyWriter, value: Option<i64>) {
    match value {
        Some(value) => out.int(value),
        None => out.nil(),
    }
}

fn write_groups(out: &mut ReplyWriter, stream: &StreamValue) {
    out.array_len(stream.groups().len());
    for (name, group) in stream.groups() {
        out.map_len(6);
        out.bulk(b"name");
        out.bulk(name);
        out.bulk(b"consumers");
        out.int(group.consumers().len() as i64);
        out.bulk(b"pending");
        out.int(group.pel().len() as i64);
        out.bulk(b"last-delivered-id");
        write_id(out, group.last_id());
        out.bulk(b"entries-read");
        write_optional_int(out, group.entries_read());
        out.bulk(b"lag");
        write_optional_int(out, stream.lag(group));
    }
}

fn write_consumers(out: &mut ReplyWriter, group: &Group, now_ms: i64) {
    out.array_len(group.consumers().len());
    for (name, consumer) in group.consumers() {
        out.map_len(3);
        out.bulk(b"name");
        out.bulk(name);
        out.bulk(b"pending");
        out.int(consumer.pending().len() as i64);
        out.bulk(b"idle");
        out.int(now_ms.wrapping_sub(consumer.seen_ms).max(0));
    }
}
