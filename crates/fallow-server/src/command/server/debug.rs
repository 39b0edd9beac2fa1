//! DEBUG and SLOWLOG.
//! SLOWLOG reads the slow log (`crate::slowlog`).
use crate::command::reply::{help_reply, subcommand_arity_error};
use crate::command::{parse_float, parse_int, subcommand_error, Ctx, NO_SUCH_KEY};
use std::sync::atomic::Ordering;

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
/// DEBUG QUICKLIST-PACKED-THRESHOLD's range (Redis: bigger than 1, smaller than 4gb).
const PACKED_THRESHOLD_MAX_BYTES: u64 = 4 << 30;

pub(super) fn debug(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"sleep", 3) => debug_sleep(ctx, args[2]),
        (b"object", 3) => debug_object(ctx, args[2]),
        (b"set-active-expire", 3) => {
            // Redis reads the flag with atoi: anything but a non-zero number turns expiry off.
            let on = parse_int(args[2]).is_some_and(|flag| flag != 0);
            ctx.server.active_expire.store(on, Ordering::Relaxed);
            ctx.out.ok()
        }
        (b"quicklist-packed-threshold", 3) => debug_packed_threshold(ctx, args[2]),
        (b"listpack", 3) => debug_listpack(ctx, args[2]),
        // fallow has no replication id to change; Redis answers OK.
        (b"change-repl-id", 2) => ctx.out.ok(),
        (b"reload", _) => ctx
            .out
            .error("ERR DEBUG RELOAD is not supported: fallow keeps no snapshots to reload from"),
        (b"tier2-fault", 3) => debug_tier2_fault(ctx, args[2]),
        (b"tier2-clean", 2) => debug_tier2_clean(ctx),
        (b"help", 2) => help_reply(ctx, "DEBUG", HELP),
        _ => ctx.out.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try DEBUG HELP.",
            String::from_utf8_lossy(args[1])
        )),
    }
}

const HELP: &[&str] = &[
    "CHANGE-REPL-ID",
    "    Change the replication IDs of the instance (fallow has none: does nothing).",
    "LISTPACK <key>",
    "    Show low level info about the listpack encoding of <key>.",
    "OBJECT <key>",
    "    Show low level info about the <key> and associated value.",
    "QUICKLIST-PACKED-THRESHOLD <size>",
    "    Sets the threshold for elements to be inserted as plain vs packed nodes",
    "    Default value is 1GB, allows values up to 4GB. Setting to 0 restores to default.",
    "RELOAD",
    "    Refused: fallow keeps no snapshots.",
    "SET-ACTIVE-EXPIRE <0|1>",
    "    Setting it to 0 disables expiring keys in background when they are not accessed.",
    "SLEEP <seconds>",
    "    Stop the server for <seconds>. Decimals allowed.",
    "TIER2-FAULT none|write-error|read-error|vanished",
    "    Make tier 2's device fail from now on, as a test of fault handling.",
    "TIER2-CLEAN",
    "    Clean tier 2's oldest region now (copy what is live, free the region).",
];

/// DEBUG SLEEP seconds: Redis reads them with strtod, so what is not a number sleeps 0 s.
fn debug_sleep(ctx: &mut Ctx, seconds: &[u8]) {
    let seconds = parse_float(seconds).unwrap_or(0.0);
    let seconds = if seconds.is_finite() { seconds } else { 0.0 };
    let seconds = seconds.clamp(0.0, DEBUG_SLEEP_MAX_S);
    std::thread::sleep(std::time::Duration::from_secs_f64(seconds));
    ctx.out.ok();
}

/// DEBUG QUICKLIST-PACKED-THRESHOLD size: checked as Redis checks it; fallow's lists have no packed
/// and plain nodes, so it changes nothing.
fn debug_packed_threshold(ctx: &mut Ctx, size: &[u8]) {
    let parsed = crate::units::parse_bytes(&String::from_utf8_lossy(size));
    match parsed {
        Ok(bytes) if bytes < PACKED_THRESHOLD_MAX_BYTES => ctx.out.ok(),
        _ => ctx
            .out
            .error("ERR argument must be a memory value bigger than 1 and smaller than 4gb"),
    }
}

/// DEBUG LISTPACK key: Redis prints the listpack to its stdout; fallow has nothing to print and
/// answers as Redis does.
fn debug_listpack(ctx: &mut Ctx, key: &[u8]) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let limits = ctx.server.config.read().encoding_limits();
    let shard = ctx.guards.shard(key);
    let Some(encoding) = shard.encoding(db, key, now, &limits) else {
        return ctx.out.error(NO_SUCH_KEY);
    };
    if encoding == "listpack" {
        ctx.out.simple("Listpack structure printed on stdout");
    } else {
        ctx.out.error("ERR Not a listpack encoded object.");
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
    let limits = ctx.server.config.read().encoding_limits();
    let shard = ctx.guards.shard(key);
    let Some(info) = shard.peek(db, key, now) else {
        return ctx.out.error(NO_SUCH_KEY);
    };
    let encoding = shard.encoding(db, key, now, &limits).unwrap_or("raw");
    let idle_s = shard.idle_s(&info, now);
    let payload = dump_payload(shard, db, key, now);
    let serialized = match &payload {
        Some(payload) => payload.len().saturating_sub(PAYLOAD_FRAMING_BYTES),
        None => shard.memory_usage(db, key, now).unwrap_or(0),
    };
    let list_len = match shard.clone_value(db, key, now).map(|value| value.data) {
        Some(fallow_store::OwnedData::Collection(fallow_store::Collection::List(list))) => {
            Some(list.len())
        }
        _ => None,
    };
    let extra = match (encoding, &payload, list_len) {
        ("quicklist", Some(payload), Some(len)) => {
            quicklist_fields(payload, len).unwrap_or_default()
        }
        _ => String::new(),
    };
    // Redis shares the integers 0..10000 as one object of refcount INT_MAX.
    let shared = encoding == "int"
        && matches!(
            shard.clone_value(db, key, now).map(|value| value.data),
            Some(fallow_store::OwnedData::String { bytes, .. })
                if fallow_store::parse_i64_strict(&bytes).is_some_and(|number| (0..10_000).contains(&number))
        );
    let refcount = if shared { i32::MAX } else { 1 };
    // Redis's LRU clock: unix seconds in 24 bits.
    let lru = (now / 1000).saturating_sub(idle_s) & 0xFF_FFFF;
    ctx.out.simple(&format!(
        "Value at:0x0 refcount:{refcount} encoding:{encoding} serializedlength:{serialized} lru:{lru} lru_seconds_idle:{idle_s}{extra}"
    ));
}

/// Type byte, 2-byte RDB version, 8-byte CRC around a DUMP payload's object.
const PAYLOAD_FRAMING_BYTES: usize = 11;
/// RDB_TYPE_LIST_QUICKLIST_2.
const RDB_TYPE_QUICKLIST_2: u8 = 18;
/// An LZF-compressed RDB string (RDB_ENCVAL | RDB_ENC_LZF).
const RDB_LZF_STRING: u8 = 0xC3;

/// The value's DUMP payload (Redis's `rdbSavedObjectLen` is its length less `PAYLOAD_FRAMING_BYTES`);
/// None for fallow's own types, which have none.
fn dump_payload(
    shard: &mut fallow_store::Shard,
    db: usize,
    key: &[u8],
    now: u64,
) -> Option<Vec<u8>> {
    let limits = fallow_store::rdb::EncodingLimits::default();
    let value = shard.clone_value(db, key, now)?;
    fallow_store::dump::dump_payload(&value.data, &limits).ok()
}

/// DEBUG OBJECT's quicklist fields (Redis's defaults: `list-max-listpack-size -2`, no compression),
/// read from the payload's nodes: ` ql_nodes:1 ql_avg_node:2.00 ql_listpack_max:-2 ql_compressed:0
/// ql_uncompressed_size:13`. None when the payload is not a quicklist.
fn quicklist_fields(payload: &[u8], elements: usize) -> Option<String> {
    let mut reader = RdbReader {
        bytes: payload,
        at: 0,
    };
    if reader.byte()? != RDB_TYPE_QUICKLIST_2 {
        return None;
    }
    let nodes = reader.length()?;
    let mut listpack_bytes = 0;
    for _ in 0..nodes {
        let _container = reader.length()?;
        if reader.bytes.get(reader.at) == Some(&RDB_LZF_STRING) {
            reader.at += 1;
            let compressed = reader.length()?;
            listpack_bytes += reader.length()?;
            reader.at += compressed;
        } else {
            let len = reader.length()?;
            listpack_bytes += len;
            reader.at += len;
        }
    }
    Some(format!(
        " ql_nodes:{nodes} ql_avg_node:{:.2} ql_listpack_max:-2 ql_compressed:0 ql_uncompressed_size:{listpack_bytes}",
        elements as f64 / nodes.max(1) as f64
    ))
}

/// Reads RDB lengths (6-, 14-, 32- and 64-bit forms) off a payload.
struct RdbReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl RdbReader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let byte = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(byte)
    }

    fn big_endian(&mut self, width: usize) -> Option<usize> {
        let bytes = self.bytes.get(self.at..self.at + width)?;
        self.at += width;
        Some(
            bytes
                .iter()
                .fold(0usize, |value, &byte| (value << 8) | byte as usize),
        )
    }

    fn length(&mut self) -> Option<usize> {
        let first = self.byte()?;
        match first >> 6 {
            0 => Some((first & 0x3F) as usize),
            1 => Some((((first & 0x3F) as usize) << 8) | self.byte()? as usize),
            2 if first == 0x80 => self.big_endian(4),
            2 if first == 0x81 => self.big_endian(8),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn quicklist_fields_read_the_payload() {
        // Redis 7.0.15's DUMP of RPUSH l a b: one node, a 13-byte listpack.
        let payload = [
            18u8, 1, 2, 13, 13, 0, 0, 0, 2, 0, 0x81, b'a', 2, 0x81, b'b', 2, 0xFF, 10, 0,
        ];
        assert_eq!(
            super::quicklist_fields(&payload, 2).as_deref(),
            Some(" ql_nodes:1 ql_avg_node:2.00 ql_listpack_max:-2 ql_compressed:0 ql_uncompressed_size:13")
        );
        assert!(super::quicklist_fields(&[0, 1, b'v'], 1).is_none());
    }
}
