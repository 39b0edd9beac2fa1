//! DUMP and RESTORE: a key's value as Redis 7.0's serialized payload and back (`fallow_store::dump`,
//! `fallow_store::rdb`). Payloads are byte-identical to Redis's wherever Redis's own are deterministic, and
//! Redis's payloads restore here; streams and fallow's own types have no payload.
use super::{is, parse_int, Ctx, Handler, NOT_INTEGER, SYNTAX};
use fallow_store::dump::{dump_payload, restore_data};
use fallow_store::rdb::EncodingLimits;
use fallow_store::OwnedValue;

pub const HANDLERS: &[(&str, Handler)] = &[("dump", dump), ("restore", restore)];

fn dump(ctx: &mut Ctx, args: &[&[u8]]) {
    let key = args[1];
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let Some(value) = ctx.guards.shard(key).clone_value(db, key, now) else {
        return ctx.out.nil();
    };
    match dump_payload(&value.data, &EncodingLimits::default()) {
        Ok(payload) => ctx.out.bulk(&payload),
        Err(missing) => ctx.out.error(&format!(
            "ERR DUMP of a {} value is not supported by fallow",
            missing.type_name
        )),
    }
}

/// RESTORE's options after the payload.
#[derive(Default)]
struct RestoreOptions {
    replace: bool,
    absolute_ttl: bool,
    idle_s: Option<u64>,
    frequency: Option<u8>,
}

/// Parses RESTORE's options; Err is the reply, in Redis's order of checks.
fn restore_options(args: &[&[u8]]) -> Result<RestoreOptions, &'static str> {
    let mut options = RestoreOptions::default();
    let mut rest = args.iter();
    while let Some(&option) = rest.next() {
        if is(option, "replace") {
            options.replace = true;
        } else if is(option, "absttl") {
            options.absolute_ttl = true;
        } else if is(option, "idletime") && options.frequency.is_none() {
            let idle = rest.next().ok_or(SYNTAX)?;
            let idle = parse_int(idle).ok_or(NOT_INTEGER)?;
            let idle =
                u64::try_from(idle).map_err(|_| "ERR Invalid IDLETIME value, must be >= 0")?;
            options.idle_s = Some(idle);
        } else if is(option, "freq") && options.idle_s.is_none() {
            let frequency = rest.next().ok_or(SYNTAX)?;
            let frequency = parse_int(frequency).ok_or(NOT_INTEGER)?;
            let frequency = u8::try_from(frequency)
                .map_err(|_| "ERR Invalid FREQ value, must be >= 0 and <= 255")?;
            options.frequency = Some(frequency);
        } else {
            return Err(SYNTAX);
        }
    }
    Ok(options)
}

/// RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency].
fn restore(ctx: &mut Ctx, args: &[&[u8]]) {
    let key = args[1];
    let options = match restore_options(&args[4..]) {
        Ok(options) => options,
        Err(reply) => return ctx.out.error(reply),
    };
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    if !options.replace && ctx.guards.shard(key).exists(db, key, now) {
        return ctx.out.error("BUSYKEY Target key name already exists.");
    }
    let Some(ttl_ms) = parse_int(args[2]) else {
        return ctx.out.error(NOT_INTEGER);
    };
    if ttl_ms < 0 {
        return ctx.out.error("ERR Invalid TTL value, must be >= 0");
    }
    let data = match restore_data(args[3]) {
        Ok(data) => data,
        Err(error) => return ctx.out.error(error.redis_message()),
    };
    let expire_at_ms = match (ttl_ms as u64, options.absolute_ttl) {
        (0, _) => 0,
        (ttl, true) => ttl,
        (ttl, false) => now.saturating_add(ttl),
    };
    let shard = ctx.guards.shard(key);
    if options.replace {
        shard.remove(db, key, now);
    }
    if expire_at_ms != 0 && expire_at_ms <= now {
        // Already expired: Redis answers OK and keeps nothing.
        return ctx.out.ok();
    }
    if !ctx.reserve_memory(args[3].len()) {
        return;
    }
    let shard = ctx.guards.shard(key);
    shard.put_value(db, key, OwnedValue { data, expire_at_ms }, now);
    shard.wake_waiters(db, key);
    shard.set_access(db, key, now, options.idle_s, options.frequency);
    ctx.out.ok();
}
