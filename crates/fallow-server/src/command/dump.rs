//! DUMP and RESTORE: a key's value as Redis 7.0's serialized payload and back (`fallow_store::dump`,
//! `fallow_store::rdb`). Payloads are byte-identical to Redis's wherever Redis's own are deterministic, and
//! Redis's payloads restore here; streams and fallow's own types have no payload.
use super::{is, parse_int, Ctx, Handler, NOT_INTEGER, SYNTAX};
use fallow_store::dump::{dump_payload, restore_data};
use fallow_store::OwnedValue;

pub const HANDLERS: &[(&str, Handler)] =
    &[("dump", dump), ("restore", restore), ("migrate", migrate)];

fn dump(ctx: &mut Ctx, args: &[&[u8]]) {
    let key = args[1];
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let Some(value) = ctx.guards.shard(key).clone_value(db, key, now) else {
        return ctx.out.nil();
    };
    let limits = ctx.server.config.read().encoding_limits();
    match dump_payload(&value.data, &limits) {
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
    let replaced = options.replace && shard.remove(db, key, now);
    if expire_at_ms != 0 && expire_at_ms <= now {
        // Already expired: Redis answers OK and keeps nothing.
        if replaced {
            ctx.notify(super::Class::GENERIC, "del", key);
        }
        return ctx.out.ok();
    }
    if !ctx.reserve_memory(args[3].len()) {
        return;
    }
    let shard = ctx.guards.shard(key);
    shard.put_value(db, key, OwnedValue { data, expire_at_ms }, now);
    shard.wake_waiters(db, key);
    shard.set_access(db, key, now, options.idle_s, options.frequency);
    ctx.notify(super::Class::GENERIC, "restore", key);
    ctx.out.ok();
}

/// MIGRATE's options.
struct MigrateOptions<'a> {
    copy: bool,
    replace: bool,
    /// AUTH password, or AUTH2 username password.
    auth: Vec<&'a [u8]>,
    keys: Vec<&'a [u8]>,
}

/// Parses MIGRATE's options and keys; Err is the reply.
fn migrate_options<'a>(args: &[&'a [u8]]) -> Result<MigrateOptions<'a>, &'static str> {
    let mut options = MigrateOptions {
        copy: false,
        replace: false,
        auth: Vec::new(),
        keys: vec![args[3]],
    };
    let mut at = 6;
    while at < args.len() {
        let option = args[at];
        if is(option, "copy") {
            options.copy = true;
        } else if is(option, "replace") {
            options.replace = true;
        } else if is(option, "auth") && at + 1 < args.len() {
            options.auth = vec![args[at + 1]];
            at += 1;
        } else if is(option, "auth2") && at + 2 < args.len() {
            options.auth = vec![args[at + 1], args[at + 2]];
            at += 2;
        } else if is(option, "keys") {
            if !args[3].is_empty() {
                return Err("ERR When using MIGRATE KEYS option, the key argument must be set to the empty string");
            }
            options.keys = args[at + 1..].to_vec();
            break;
        } else {
            return Err(SYNTAX);
        }
        at += 1;
    }
    Ok(options)
}

/// MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE] [AUTH pw | AUTH2 user pw] [KEYS key...]:
/// the keys' DUMP payloads restored on another server over a connection of its own (the command waits for
/// it, as Redis's does, with the worker handed off), then deleted here unless COPY.
fn migrate(ctx: &mut Ctx, args: &[&[u8]]) {
    let options = match migrate_options(args) {
        Ok(options) => options,
        Err(reply) => return ctx.out.error(reply),
    };
    let (Some(db), Some(timeout_ms)) = (parse_int(args[4]), parse_int(args[5])) else {
        return ctx.out.error(NOT_INTEGER);
    };
    let timeout = std::time::Duration::from_millis(if timeout_ms <= 0 {
        1000
    } else {
        timeout_ms as u64
    });
    let restores = match payloads(ctx, &options) {
        Ok(restores) => restores,
        Err(reply) => return ctx.out.error(&reply),
    };
    if restores.is_empty() {
        return ctx.out.simple("NOKEY");
    }
    let target = format!(
        "{}:{}",
        String::from_utf8_lossy(args[1]),
        String::from_utf8_lossy(args[2])
    );
    let request = migrate_request(&options, db, &restores);
    let replies = super::elastic::off_the_runtime(|| {
        exchange(
            &target,
            &request,
            restores.len() + 1 + !options.auth.is_empty() as usize,
            timeout,
        )
    });
    match replies {
        Err(reply) => ctx.out.error(reply),
        Ok(replies) => finish_migrate(ctx, &options, &restores, &replies),
    }
}

/// (key, ttl ms, payload) of each key that exists.
type Restore = (Vec<u8>, u64, Vec<u8>);

fn payloads(ctx: &mut Ctx, options: &MigrateOptions) -> Result<Vec<Restore>, String> {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let mut restores = Vec::new();
    let limits = ctx.server.config.read().encoding_limits();
    for &key in &options.keys {
        let Some(value) = ctx.guards.shard(key).clone_value(db, key, now) else {
            continue;
        };
        let ttl_ms = match value.expire_at_ms {
            0 => 0,
            at => at.saturating_sub(now).max(1),
        };
        let payload = dump_payload(&value.data, &limits).map_err(|missing| {
            format!(
                "ERR MIGRATE of a {} value is not supported by fallow",
                missing.type_name
            )
        })?;
        restores.push((key.to_vec(), ttl_ms, payload));
    }
    Ok(restores)
}

/// The commands sent to the target: AUTH (if asked), SELECT, then one RESTORE per key.
fn migrate_request(options: &MigrateOptions, db: i64, restores: &[Restore]) -> Vec<u8> {
    let mut request = Vec::new();
    let mut push = |words: &[&[u8]]| {
        request.extend_from_slice(format!("*{}\r\n", words.len()).as_bytes());
        for word in words {
            request.extend_from_slice(format!("${}\r\n", word.len()).as_bytes());
            request.extend_from_slice(word);
            request.extend_from_slice(b"\r\n");
        }
    };
    if !options.auth.is_empty() {
        let mut words: Vec<&[u8]> = vec![b"AUTH"];
        words.extend(&options.auth);
        push(&words);
    }
    let db = db.to_string();
    push(&[b"SELECT", db.as_bytes()]);
    for (key, ttl_ms, payload) in restores {
        let ttl = ttl_ms.to_string();
        let mut words: Vec<&[u8]> = vec![b"RESTORE", key, ttl.as_bytes(), payload];
        if options.replace {
            words.push(b"REPLACE");
        }
        push(&words);
    }
    request
}

/// Sends `request` and reads `replies` one-line replies; Err is Redis's IOERR reply.
fn exchange(
    target: &str,
    request: &[u8],
    replies: usize,
    timeout: std::time::Duration,
) -> Result<Vec<Vec<u8>>, &'static str> {
    use std::io::{BufRead, Write};
    const CONNECT: &str = "IOERR error or timeout connecting to the client";
    const WRITE: &str = "IOERR error or timeout writing to target instance";
    const READ: &str = "IOERR error or timeout reading to target instance";
    let address = std::net::ToSocketAddrs::to_socket_addrs(target)
        .ok()
        .and_then(|mut addresses| addresses.next())
        .ok_or(CONNECT)?;
    // Redis 7.0 waits for the socket to turn writable, which a refused connection also does: only a
    // timeout reads "connecting"; a refusal shows up as the write that follows failing.
    let mut stream = std::net::TcpStream::connect_timeout(&address, timeout).map_err(|error| {
        if error.kind() == std::io::ErrorKind::TimedOut {
            CONNECT
        } else {
            WRITE
        }
    })?;
    stream.set_read_timeout(Some(timeout)).map_err(|_| READ)?;
    stream.set_write_timeout(Some(timeout)).map_err(|_| WRITE)?;
    stream.write_all(request).map_err(|_| WRITE)?;
    let mut reader = std::io::BufReader::new(stream);
    (0..replies)
        .map(|_| {
            let mut line = Vec::new();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => Err(READ),
                Ok(_) => Ok(line.strip_suffix(b"\r\n").unwrap_or(&line).to_vec()),
            }
        })
        .collect()
}

/// The first error the target gave, or OK; keys it restored are deleted here unless COPY.
fn finish_migrate(
    ctx: &mut Ctx,
    options: &MigrateOptions,
    restores: &[Restore],
    replies: &[Vec<u8>],
) {
    let key_replies = &replies[replies.len() - restores.len()..];
    let mut first_error = replies
        .iter()
        .find(|reply| reply.starts_with(b"-"))
        .map(|reply| String::from_utf8_lossy(&reply[1..]).into_owned());
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    for ((key, _, _), reply) in restores.iter().zip(key_replies) {
        if !options.copy && reply.starts_with(b"+") && ctx.guards.shard(key).remove(db, key, now) {
            ctx.notify(super::Class::GENERIC, "del", key);
        }
    }
    match first_error.take() {
        Some(error) => ctx
            .out
            .error(&format!("ERR Target instance replied with error: {error}")),
        None => ctx.out.ok(),
    }
}
