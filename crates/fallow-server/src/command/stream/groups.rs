//! Consumer group commands: XGROUP (a container: CREATE, SETID, DESTROY, CREATECONSUMER, DELCONSUMER,
//! HELP), XACK, XPENDING, XCLAIM and XAUTOCLAIM. Arguments are checked in Redis's order: an error a
//! command reports first in Redis it reports first here.
use super::{
    c_str, consumer_exists, error_of, id_arg, notify_consumer_created, peek, range_end,
    range_start, strict_id_arg, update, wake_readers, write_entry, write_id,
};
use crate::command::reply::{help_reply, subcommand_arity_error};
use crate::command::{is, parse_int, subcommand_error, Class, Ctx, NOT_INTEGER, SYNTAX, WRONGTYPE};
use fallow_proto::ReplyWriter;
use fallow_store::types::stream::{AutoClaimScan, Claim, StreamId};
use fallow_store::types::StreamValue;
use fallow_store::WrongType;

const XGROUP_HELP: &[&str] = &[
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
];

/// The error for a subcommand given options it does not take, naming it as the client wrote it.
pub(super) fn subcommand_syntax_error(out: &mut ReplyWriter, command: &str, sub: &[u8]) {
    error_of(
        out,
        &[
            b"ERR unknown subcommand or wrong number of arguments for '",
            c_str(sub),
            b"'. Try ",
            command.as_bytes(),
            b" HELP.",
        ],
    );
}

/// `NOGROUP No such key '<key>' or consumer group '<group>'` (XPENDING, XCLAIM, XAUTOCLAIM).
fn no_such_key_or_group(out: &mut ReplyWriter, key: &[u8], group: &[u8]) {
    error_of(
        out,
        &[
            b"NOGROUP No such key '",
            c_str(key),
            b"' or consumer group '",
            c_str(group),
            b"'",
        ],
    );
}

/// `NOGROUP No such consumer group '<group>' for key name '<key>'` (XGROUP, XINFO CONSUMERS).
pub(super) fn no_such_group(out: &mut ReplyWriter, key: &[u8], group: &[u8]) {
    error_of(
        out,
        &[
            b"NOGROUP No such consumer group '",
            c_str(group),
            b"' for key name '",
            c_str(key),
            b"'",
        ],
    );
}

/// Whether the stream at `key` has the group `group`: Ok(None) without the stream.
fn has_group(ctx: &mut Ctx, key: &[u8], group: &[u8]) -> Result<Option<bool>, WrongType> {
    peek(ctx, key, |stream| {
        stream.map(|stream| stream.group(group).is_some())
    })
}

// ----- XGROUP ----------------------------------------------------------------------------------------

/// The subcommands and their arities (the name included), as Redis's command table has them.
const XGROUP_ARITIES: &[(&str, i64)] = &[
    ("help", 2),
    ("create", -5),
    ("setid", -5),
    ("destroy", 4),
    ("createconsumer", 5),
    ("delconsumer", 5),
];

/// The subcommand `args[1]` names in `arities` (name, Redis arity), its arity checked: None when the
/// reply is written already (unknown subcommand, wrong arity, or HELP with `help`).
pub(super) fn checked_subcommand(
    ctx: &mut Ctx,
    args: &[&[u8]],
    command: &str,
    arities: &[(&'static str, i64)],
    help: &[&str],
) -> Option<&'static str> {
    let sub = args[1];
    let Some(&(name, arity)) = arities.iter().find(|(name, _)| is(sub, name)) else {
        subcommand_error(ctx, args);
        return None;
    };
    let arity_ok = if arity > 0 {
        args.len() as i64 == arity
    } else {
        args.len() as i64 >= -arity
    };
    if !arity_ok {
        subcommand_arity_error(ctx, command, sub);
        return None;
    }
    if name == "help" {
        help_reply(ctx, &command.to_ascii_uppercase(), help);
        return None;
    }
    Some(name)
}

pub fn xgroup(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(name) = checked_subcommand(ctx, args, "xgroup", XGROUP_ARITIES, XGROUP_HELP) else {
        return;
    };
    let sub = args[1];
    // CREATE and SETID options: MKSTREAM (CREATE only), ENTRIESREAD n
    let mut mkstream = false;
    let mut entries_read: Option<i64> = None;
    let mut at = 5;
    while at < args.len() {
        if name == "create" && is(args[at], "mkstream") {
            mkstream = true;
            at += 1;
        } else if matches!(name, "create" | "setid")
            && is(args[at], "entriesread")
            && at + 1 < args.len()
        {
            match parse_int(args[at + 1]) {
                None => return ctx.out.error(NOT_INTEGER),
                Some(read) if read < -1 => {
                    return ctx
                        .out
                        .error("ERR value for ENTRIESREAD must be positive or -1")
                }
                Some(read) => entries_read = (read >= 0).then_some(read),
            }
            at += 2;
        } else {
            return subcommand_syntax_error(ctx.out, "XGROUP", sub);
        }
    }
    let (key, group) = (args[2], args[3]);
    let found = match has_group(ctx, key, group) {
        Ok(found) => found,
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    if !mkstream {
        match found {
            None => return ctx.out.error("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically."),
            Some(false) if matches!(name, "setid" | "createconsumer" | "delconsumer") => {
                return no_such_group(ctx.out, key, group)
            }
            _ => {}
        }
    }
    match name {
        "create" if args.len() <= 8 => create_group(ctx, args, entries_read, found.is_none()),
        "setid" if matches!(args.len(), 5 | 7) => set_group_id(ctx, args, entries_read),
        "destroy" => {
            let destroyed = update(ctx, key, false, |stream, _| stream.destroy_group(group));
            let destroyed = destroyed.ok().flatten().unwrap_or(false);
            ctx.out.int(destroyed as i64);
            if destroyed {
                // blocked XREADGROUP readers of the group learn it is gone
                wake_readers(ctx, key);
                ctx.notify(Class::STREAM, "xgroup-destroy", key);
            }
        }
        "createconsumer" => {
            if !ctx.reserve_memory(args[4].len()) {
                return;
            }
            let now = ctx.now_ms as i64;
            let created = update(ctx, key, false, |stream, _| {
                stream.create_consumer(group, args[4], now)
            });
            let created = created.ok().flatten().flatten().unwrap_or(false);
            if created {
                ctx.notify(Class::STREAM, "xgroup-createconsumer", key);
            }
            ctx.out.int(created as i64);
        }
        "delconsumer" => {
            let existed = consumer_exists(ctx, key, group, args[4]);
            let pending = update(ctx, key, false, |stream, _| {
                stream.delete_consumer(group, args[4])
            });
            if existed == Some(true) {
                ctx.notify(Class::STREAM, "xgroup-delconsumer", key);
            }
            ctx.out
                .int(pending.ok().flatten().flatten().unwrap_or(0) as i64);
        }
        _ => subcommand_syntax_error(ctx.out, "XGROUP", sub),
    }
}

/// XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n]; `absent`: the stream is to be made.
fn create_group(ctx: &mut Ctx, args: &[&[u8]], entries_read: Option<i64>, absent: bool) {
    let (key, group) = (args[2], args[3]);
    let last_id = match args[4] {
        b"$" => match peek(ctx, key, |stream| {
            stream.map_or(StreamId::MIN, StreamValue::last_id)
        }) {
            Ok(id) => id,
            Err(WrongType) => return ctx.out.error(WRONGTYPE),
        },
        arg => match strict_id_arg(arg) {
            Ok(id) => id,
            Err(error) => return ctx.out.error(error),
        },
    };
    let request_bytes = group.len() + if absent { key.len() } else { 0 };
    if !ctx.reserve_memory(request_bytes) {
        return;
    }
    let created = update(ctx, key, true, |stream, _| {
        stream.create_group(group, last_id, entries_read)
    });
    match created {
        Ok(Some(true)) => {
            ctx.notify(Class::STREAM, "xgroup-create", key);
            ctx.out.ok()
        }
        Ok(_) => ctx
            .out
            .error("BUSYGROUP Consumer Group name already exists"),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

/// XGROUP SETID key group id|$ [ENTRIESREAD n].
fn set_group_id(ctx: &mut Ctx, args: &[&[u8]], entries_read: Option<i64>) {
    let (key, group) = (args[2], args[3]);
    let id = match args[4] {
        b"$" => None,
        arg => match id_arg(arg, 0) {
            Ok(id) => Some(id),
            Err(error) => return ctx.out.error(error),
        },
    };
    let set = update(ctx, key, false, |stream, _| {
        let id = id.unwrap_or(stream.last_id());
        stream.set_group_id(group, id, entries_read)
    });
    debug_assert!(matches!(set, Ok(Some(true))));
    ctx.notify(Class::STREAM, "xgroup-setid", key);
    ctx.out.ok();
}

// ----- XACK ------------------------------------------------------------------------------------------

pub fn xack(ctx: &mut Ctx, args: &[&[u8]]) {
    let (key, group) = (args[1], args[2]);
    match has_group(ctx, key, group) {
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
        Ok(None | Some(false)) => return ctx.out.int(0),
        Ok(Some(true)) => {}
    }
    // every id is checked before any is acknowledged: all or nothing
    let ids: Result<Vec<StreamId>, _> = args[3..].iter().map(|arg| strict_id_arg(arg)).collect();
    let ids = match ids {
        Ok(ids) => ids,
        Err(error) => return ctx.out.error(error),
    };
    let acked = update(ctx, key, false, |stream, _| {
        ids.iter().filter(|&&id| stream.ack(group, id)).count()
    });
    ctx.out.int(acked.ok().flatten().unwrap_or(0) as i64);
}

// ----- XPENDING --------------------------------------------------------------------------------------

/// XPENDING's extended form: [IDLE min] start end count [consumer].
struct PendingRange<'a> {
    min_idle_ms: i64,
    start: StreamId,
    end: StreamId,
    count: usize,
    consumer: Option<&'a [u8]>,
}

fn parse_pending_range<'a>(args: &'a [&'a [u8]]) -> Result<PendingRange<'a>, &'static str> {
    let mut first = 3;
    let mut min_idle_ms = 0;
    if is(args[3], "idle") {
        min_idle_ms = parse_int(args[4]).ok_or(NOT_INTEGER)?;
        if args.len() < 8 {
            return Err(SYNTAX);
        }
        first += 2;
    }
    let count = parse_int(args[first + 2]).ok_or(NOT_INTEGER)?.max(0) as usize;
    let start = range_start(args[first])?;
    let end = range_end(args[first + 1])?;
    Ok(PendingRange {
        min_idle_ms,
        start,
        end,
        count,
        consumer: args.get(first + 3).copied(),
    })
}

pub fn xpending(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len() != 3 && !(6..=9).contains(&args.len()) {
        return ctx.out.error(SYNTAX);
    }
    let range = if args.len() >= 6 {
        match parse_pending_range(args) {
            Ok(range) => Some(range),
            Err(error) => return ctx.out.error(error),
        }
    } else {
        None
    };
    let (key, group) = (args[1], args[2]);
    let now = ctx.now_ms as i64;
    let db = ctx.keyspace();
    let shard = ctx.guards.shard(key);
    let stream = match shard.read::<StreamValue>(db, key, now as u64) {
        Ok(stream) => stream,
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let Some(group) = stream.and_then(|stream| stream.group(group)) else {
        return no_such_key_or_group(ctx.out, key, group);
    };
    let out = &mut *ctx.out;
    let Some(range) = range else {
        // the summary: how many, the smallest and largest ids, and each consumer's count
        out.array_len(4);
        out.int(group.pel().len() as i64);
        let (Some((first, _)), Some((last, _))) =
            (group.pel().first_key_value(), group.pel().last_key_value())
        else {
            out.nil();
            out.nil();
            return out.nil_array();
        };
        write_id(out, *first);
        write_id(out, *last);
        let owners: Vec<(&[u8], usize)> = group
            .consumers()
            .map(|(name, consumer)| (name, consumer.pending().len()))
            .filter(|&(_, owned)| owned > 0)
            .collect();
        out.array_len(owners.len());
        for (name, owned) in owners {
            out.array_len(2);
            out.bulk(name);
            out.bulk_int(owned as i64);
        }
        return;
    };
    let ids: Box<dyn Iterator<Item = StreamId>> = match range.consumer {
        Some(name) => match group.consumer(name) {
            Some(consumer) if range.start <= range.end => {
                Box::new(consumer.pending().range(range.start..=range.end).copied())
            }
            Some(_) => Box::new(std::iter::empty()),
            None => return out.array_len(0),
        },
        None if range.start <= range.end => Box::new(
            group
                .pel()
                .range(range.start..=range.end)
                .map(|(&id, _)| id),
        ),
        None => Box::new(std::iter::empty()),
    };
    let listed: Vec<StreamId> = ids
        .filter(|id| {
            range.min_idle_ms == 0
                || now.wrapping_sub(group.pel()[id].delivery_ms) >= range.min_idle_ms
        })
        .take(range.count)
        .collect();
    out.array_len(listed.len());
    for id in listed {
        let pending = &group.pel()[&id];
        out.array_len(4);
        write_id(out, id);
        out.bulk(&pending.consumer);
        out.int(now.wrapping_sub(pending.delivery_ms).max(0));
        out.int(pending.delivery_count as i64);
    }
}

// ----- XCLAIM and XAUTOCLAIM ---------------------------------------------------------------------------

/// XCLAIM key group consumer min-idle-time id ... [IDLE ms] [TIME ms] [RETRYCOUNT n] [FORCE] [JUSTID]
/// [LASTID id].
pub fn xclaim(ctx: &mut Ctx, args: &[&[u8]]) {
    let (key, group, consumer) = (args[1], args[2], args[3]);
    match has_group(ctx, key, group) {
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
        Ok(None | Some(false)) => return no_such_key_or_group(ctx.out, key, group),
        Ok(Some(true)) => {}
    }
    let Some(min_idle_ms) = parse_int(args[4]) else {
        return ctx
            .out
            .error("ERR Invalid min-idle-time argument for XCLAIM");
    };
    // ids run up to the first argument that is not one; options follow
    let ids: Vec<StreamId> = args[5..]
        .iter()
        .map_while(|arg| strict_id_arg(arg).ok())
        .collect();
    let now = ctx.now_ms as i64;
    let mut claim = Claim {
        min_idle_ms,
        ..Claim::default()
    };
    let mut at = 5 + ids.len();
    while at < args.len() {
        let more = args.len() - 1 - at;
        let option = args[at];
        let number = |at: usize, message: &'static str| parse_int(args[at]).ok_or(message);
        let parsed = if is(option, "force") {
            claim.force = true;
            Ok(())
        } else if is(option, "justid") {
            claim.just_id = true;
            Ok(())
        } else if is(option, "idle") && more > 0 {
            at += 1;
            number(at, "ERR Invalid IDLE option argument for XCLAIM")
                .map(|idle| claim.delivery_ms = Some(now.wrapping_sub(idle)))
        } else if is(option, "time") && more > 0 {
            at += 1;
            number(at, "ERR Invalid TIME option argument for XCLAIM")
                .map(|time| claim.delivery_ms = Some(time))
        } else if is(option, "retrycount") && more > 0 {
            at += 1;
            number(at, "ERR Invalid RETRYCOUNT option argument for XCLAIM")
                .map(|count| claim.retry_count = Some(count))
        } else if is(option, "lastid") && more > 0 {
            at += 1;
            strict_id_arg(args[at]).map(|id| claim.last_id = Some(id))
        } else {
            return error_of(
                ctx.out,
                &[b"ERR Unrecognized XCLAIM option '", c_str(option), b"'"],
            );
        };
        if let Err(error) = parsed {
            return ctx.out.error(error);
        }
        at += 1;
    }
    // TIME -1 is Redis's "not given"; any delivery time out of [0, now] means now anyway
    let existed = consumer_exists(ctx, key, group, consumer);
    let claimed = update(ctx, key, false, |stream, out| {
        let claimed = stream
            .claim(group, consumer, &ids, &claim, now)
            .unwrap_or_default();
        write_claimed(out, stream, &claimed, claim.just_id);
    });
    debug_assert!(matches!(claimed, Ok(Some(()))));
    notify_consumer_created(ctx, key, group, consumer, existed);
}

/// The claimed entries (or their ids alone).
fn write_claimed(out: &mut ReplyWriter, stream: &StreamValue, ids: &[StreamId], just_id: bool) {
    out.array_len(ids.len());
    for &id in ids {
        if just_id {
            write_id(out, id);
        } else {
            write_entry(out, id, stream.get(id).expect("claimed entries exist"));
        }
    }
}

/// XAUTOCLAIM allocates `count` ids up front in Redis; past what the address space holds it refuses.
/// (Redis's limit depends on its allocator and platform; this is where 64-bit Linux refuses.)
const AUTOCLAIM_COUNT_MAX_ALLOCATABLE: i64 = 1 << 42;

/// XAUTOCLAIM key group consumer min-idle-time start [COUNT n] [JUSTID].
pub fn xautoclaim(ctx: &mut Ctx, args: &[&[u8]]) {
    let (key, group, consumer) = (args[1], args[2], args[3]);
    let Some(min_idle_ms) = parse_int(args[4]) else {
        return ctx
            .out
            .error("ERR Invalid min-idle-time argument for XAUTOCLAIM");
    };
    let start = match range_start(args[5]) {
        Ok(start) => start,
        Err(error) => return ctx.out.error(error),
    };
    let mut count = 100;
    let mut just_id = false;
    let mut at = 6;
    while at < args.len() {
        let more = args.len() - 1 - at;
        if is(args[at], "count") && more > 0 {
            // the count must fit Redis's id buffer: 1 ..= LONG_MAX / 16
            match parse_int(args[at + 1]) {
                Some(value) if (1..=i64::MAX / 16).contains(&value) => count = value,
                _ => return ctx.out.error("ERR COUNT must be > 0"),
            }
            at += 1;
        } else if is(args[at], "justid") {
            just_id = true;
        } else {
            return ctx.out.error(SYNTAX);
        }
        at += 1;
    }
    match has_group(ctx, key, group) {
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
        Ok(None | Some(false)) => return no_such_key_or_group(ctx.out, key, group),
        Ok(Some(true)) => {}
    }
    if count >= AUTOCLAIM_COUNT_MAX_ALLOCATABLE {
        return ctx
            .out
            .error("ERR Insufficient memory, failed allocating transient memory, COUNT too high.");
    }
    let scan = AutoClaimScan {
        min_idle_ms,
        start,
        count: count as u64,
        just_id,
    };
    let now = ctx.now_ms as i64;
    let existed = consumer_exists(ctx, key, group, consumer);
    let done = update(ctx, key, false, |stream, out| {
        let result = stream
            .autoclaim(group, consumer, &scan, now)
            .unwrap_or_default();
        out.array_len(3);
        write_id(out, result.next);
        write_claimed(out, stream, &result.claimed, just_id);
        out.array_len(result.deleted.len());
        for id in result.deleted {
            write_id(out, id);
        }
    });
    debug_assert!(matches!(done, Ok(Some(()))));
    notify_consumer_created(ctx, key, group, consumer, existed);
}
