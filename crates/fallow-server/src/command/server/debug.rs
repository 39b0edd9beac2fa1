//! DEBUG, LATENCY and SLOWLOG. fallow runs no latency monitor: LATENCY answers well-formed but empty.
//! SLOWLOG reads the slow log (`crate::slowlog`).
use crate::command::reply::{help_reply, subcommand_arity_error};
use crate::command::{parse_float, parse_int, subcommand_error, Ctx, NOT_INTEGER, NO_SUCH_KEY};

pub(super) fn latency(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"latest", 2) => ctx.out.array_len(0),
        (b"history", 3) => ctx.out.array_len(0),
        (b"reset", _) => ctx.out.int(0),
        (b"histogram", _) => ctx.out.map_len(0),
        (b"graph", 3) => ctx.out.error(&format!(
            "ERR No samples available for event '{}'",
            String::from_utf8_lossy(args[2])
        )),
        (b"doctor", 2) => ctx.out.verbatim(
            "txt",
            b"Dave, fallow does not run the latency monitor, so there is nothing to report.\n",
        ),
        (b"help", 2) => help_reply(
            ctx,
            "LATENCY",
            &[
                "DOCTOR",
                "    Return a human readable latency analysis report.",
                "GRAPH <event>",
                "    Return an ASCII latency graph for the <event> class.",
                "HISTORY <event>",
                "    Return time-latency samples for the <event> class.",
                "LATEST",
                "    Return the latest latency samples for all events.",
                "RESET [<event> ...]",
                "    Reset latency data of one or more <event> classes.",
                "HISTOGRAM [COMMAND ...]",
                "    Return a cumulative distribution of latencies in the format of a histogram.",
            ],
        ),
        (b"latest" | b"history" | b"graph" | b"doctor", _) => {
            subcommand_arity_error(ctx, "latency", &sub)
        }
        _ => subcommand_error(ctx, args),
    }
}

pub(super) fn slowlog(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"get", 2) => slowlog_get(ctx, Some(10)),
        (b"get", 3) => match parse_int(args[2]) {
            Some(-1) => slowlog_get(ctx, None),
            Some(count) if count >= 0 => slowlog_get(ctx, Some(count as usize)),
            _ => ctx
                .out
                .error("ERR count should be greater than or equal to -1"),
        },
        (b"len", 2) => ctx.out.int(ctx.server.slowlog.len() as i64),
        (b"reset", 2) => {
            ctx.server.slowlog.reset();
            ctx.out.ok()
        }
        (b"help", 2) => help_reply(
            ctx,
            "SLOWLOG",
            &[
                "GET [<count>]",
                "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
                "LEN",
                "    Return the length of the slowlog.",
                "RESET",
                "    Reset the slowlog.",
            ],
        ),
        (b"get" | b"len" | b"reset", _) => subcommand_arity_error(ctx, "slowlog", &sub),
        _ => subcommand_error(ctx, args),
    }
}

/// SLOWLOG GET: the newest entries, each [id, time, microseconds, arguments, client address, name].
fn slowlog_get(ctx: &mut Ctx, count: Option<usize>) {
    let entries = ctx.server.slowlog.newest(count);
    let out = &mut *ctx.out;
    out.array_len(entries.len());
    for entry in &entries {
        out.array_len(6);
        out.int(entry.id as i64);
        out.int(entry.unix_time_s as i64);
        out.int(entry.duration_us as i64);
        out.bulks(entry.args.iter().map(Vec::as_slice));
        out.bulk(entry.client_addr.as_bytes());
        out.bulk(entry.client_name.as_bytes());
    }
}

/// Longest DEBUG SLEEP; it holds a worker thread.
const DEBUG_SLEEP_MAX_S: f64 = 600.0;

pub(super) fn debug(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"sleep", 3) => {
            let Some(seconds) = parse_float(args[2]) else {
                return ctx.out.error(NOT_INTEGER);
            };
            let seconds = seconds.clamp(0.0, DEBUG_SLEEP_MAX_S);
            std::thread::sleep(std::time::Duration::from_secs_f64(seconds));
            ctx.out.ok();
        }
        (b"object", 3) => debug_object(ctx, args[2]),
        (b"tier2-fault", 3) => debug_tier2_fault(ctx, args[2]),
        (b"tier2-clean", 2) => debug_tier2_clean(ctx),
        (b"help", 2) => help_reply(
            ctx,
            "DEBUG",
            &[
                "OBJECT <key>",
                "    Show low level info about the <key> and associated value.",
                "SLEEP <seconds>",
                "    Stop the server for <seconds>. Decimals allowed.",
                "TIER2-FAULT none|write-error|read-error|vanished",
                "    Make tier 2's device fail from now on, as a test of fault handling.",
                "TIER2-CLEAN",
                "    Clean tier 2's oldest region now (copy what is live, free the region).",
            ],
        ),
        _ => subcommand_error(ctx, args),
    }
}

/// Injects a device fault into tier 2 (the EIO and vanished-device tests: root ignores file modes and
/// there is no device-mapper here).
fn debug_tier2_fault(ctx: &mut Ctx, name: &[u8]) {
    let Some(tier2) = ctx
        .server
        .durability
        .get()
        .and_then(|durability| durability.tier2.as_ref())
    else {
        return ctx.out.error("ERR tier 2 is off");
    };
    let Some(fault) = fallow_store::tier2::device::Fault::from_name(&String::from_utf8_lossy(name))
    else {
        return ctx
            .out
            .error("ERR fault must be none, write-error, read-error or vanished");
    };
    tier2.set_fault(fault);
    ctx.out.ok();
}

fn debug_tier2_clean(ctx: &mut Ctx) {
    // Cleaning locks shards record by record; DEBUG holds none (its keys are custom).
    match ctx.server.store.tier2_clean_oldest() {
        Ok(true) => ctx.out.ok(),
        Ok(false) => ctx.out.error("ERR tier 2 has no region to clean"),
        Err(error) => ctx.out.error(&format!("ERR {error}")),
    }
}

fn debug_object(ctx: &mut Ctx, key: &[u8]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    let Some(info) = shard.peek(db, key, now) else {
        return ctx.out.error(NO_SUCH_KEY);
    };
    let encoding = shard.encoding(db, key, now).unwrap_or("raw");
    let bytes = shard.memory_usage(db, key, now).unwrap_or(0);
    let idle_s = shard.idle_s(&info, now);
    ctx.out.simple(&format!(
        "Value at:0x0 refcount:1 encoding:{encoding} serializedlength:{bytes} lru:{} lru_seconds_idle:{idle_s}",
        info.access_s
    ));
}
