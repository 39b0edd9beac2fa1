//! Connection commands: PING ECHO SELECT QUIT RESET HELLO AUTH CLIENT. They change only the calling
//! connection (or, for CLIENT KILL, ask another connection to close).
use super::reply::REDIS_COMPATIBLE_VERSION;
use super::{is, parse_int, subcommand_error, Ctx, Handler, NOT_INTEGER, SYNTAX};
use crate::clients::{describe_client, ClientHandle};
use crate::connection::ReplyMode;
use std::sync::Arc;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("ping", ping),
    ("echo", echo),
    ("select", select),
    ("quit", quit),
    ("reset", reset),
    ("auth", auth),
    ("hello", hello),
    ("client", client),
    ("shm.open", shm_open),
];

fn ping(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len() > 2 {
        return ctx.out.error(&super::arity_error("ping"));
    }
    if ctx.conn.in_subscribe_context() {
        ctx.out.array_len(2);
        ctx.out.bulk(b"pong");
        return ctx.out.bulk(args.get(1).copied().unwrap_or_default());
    }
    match args.get(1) {
        None => ctx.out.simple("PONG"),
        Some(message) => ctx.out.bulk(message),
    }
}

fn echo(ctx: &mut Ctx, args: &[&[u8]]) {
    ctx.out.bulk(args[1]);
}

fn select(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(index) = parse_int(args[1]) else {
        return ctx.out.error(NOT_INTEGER);
    };
    if index < 0 || index as usize >= ctx.server.store.databases() {
        return ctx.out.error("ERR DB index is out of range");
    }
    ctx.conn.db = index as usize;
    ctx.out.ok();
}

fn quit(ctx: &mut Ctx, _args: &[&[u8]]) {
    ctx.conn.close_after_reply = true;
    ctx.out.ok();
}

fn reset(ctx: &mut Ctx, _args: &[&[u8]]) {
    ctx.conn.forget_multi();
    crate::command::dispatch::txn::disconnect(ctx.server, ctx.conn);
    super::session::unsubscribe_all_quietly(ctx);
    super::tracking::disable(ctx.server, ctx.conn);
    ctx.server.monitors.remove(ctx.conn.id());
    let conn = &mut *ctx.conn;
    conn.db = 0;
    conn.resp3 = false;
    ctx.out.resp3 = false;
    conn.reply_mode = ReplyMode::On;
    conn.no_touch = false;
    conn.name.clear();
    conn.user = "default".into();
    conn.rebind_tenant(ctx.server);
    conn.authenticated = !ctx.server.acl.read().default_user_requires_auth();
    ctx.out.simple("RESET");
}

/// Authenticates the connection as `user`; Err is the reply to send. A failure is counted, logged to
/// ACL LOG (object: the command as the client spelled it, as Redis logs it) and, past
/// `auth-failures-before-delay` on this connection, answered late.
fn authenticate(ctx: &mut Ctx, command: &str, user: &[u8], password: &[u8]) -> Result<(), String> {
    let user = String::from_utf8_lossy(user).into_owned();
    let checked = ctx.server.acl.read().authenticate(&user, password);
    if let Err(reply) = checked {
        let delay = ctx.server.note_auth_failure(
            &ctx.conn.handle,
            command,
            &user,
            crate::acl::log::Context::of_multi(ctx.in_exec),
            &mut ctx.conn.auth_failures,
        );
        ctx.conn.reply_not_before = delay.map(|delay| tokio::time::Instant::now() + delay);
        return Err(reply);
    }
    ctx.conn.user = user;
    ctx.conn.authenticated = true;
    // The connection's tenant is the one named like its user.
    ctx.conn.rebind_tenant(ctx.server);
    Ok(())
}

fn auth(ctx: &mut Ctx, args: &[&[u8]]) {
    let (user, password): (&[u8], &[u8]) = match args.len() {
        2 => {
            if !ctx.server.acl.read().default_user_requires_auth() {
                return ctx.out.error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
            }
            (b"default", args[1])
        }
        3 => (args[1], args[2]),
        _ => return ctx.out.error(SYNTAX),
    };
    match authenticate(ctx, &String::from_utf8_lossy(args[0]), user, password) {
        Ok(()) => ctx.out.ok(),
        Err(reply) => ctx.out.error(&reply),
    }
}

/// Client names may not contain spaces, newlines or other special characters (Redis rule).
fn valid_client_name(name: &[u8]) -> bool {
    name.iter().all(|&byte| (b'!'..=b'~').contains(&byte))
}

fn hello(ctx: &mut Ctx, args: &[&[u8]]) {
    let mut version = if ctx.conn.resp3 { 3 } else { 2 };
    let mut index = 1;
    if let Some(requested) = args.get(1) {
        match parse_int(requested) {
            Some(requested @ 2..=3) => version = requested,
            Some(_) => return ctx.out.error("NOPROTO unsupported protocol version"),
            None => {
                return ctx
                    .out
                    .error("ERR Protocol version is not an integer or out of range")
            }
        }
        index = 2;
    }
    let mut credentials = None;
    let mut name = None;
    while index < args.len() {
        let remaining = args.len() - index - 1;
        if is(args[index], "auth") && remaining >= 2 {
            credentials = Some((args[index + 1], args[index + 2]));
            index += 3;
        } else if is(args[index], "setname") && remaining >= 1 {
            name = Some(args[index + 1]);
            index += 2;
        } else {
            return ctx.out.error(&format!(
                "ERR Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(args[index])
            ));
        }
    }
    if let Some((user, password)) = credentials {
        if let Err(reply) = authenticate(ctx, &String::from_utf8_lossy(args[0]), user, password) {
            return ctx.out.error(&reply);
        }
    }
    if !ctx.conn.authenticated {
        return ctx.out.error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
    }
    if let Some(name) = name {
        if !valid_client_name(name) {
            return ctx
                .out
                .error("ERR Client names cannot contain spaces, newlines or special characters.");
        }
        ctx.conn.name = String::from_utf8_lossy(name).into_owned();
    }
    ctx.conn.resp3 = version == 3;
    ctx.out.resp3 = version == 3;
    let out = &mut *ctx.out;
    out.map_len(7);
    out.bulk(b"server");
    out.bulk(b"redis");
    out.bulk(b"version");
    out.bulk(REDIS_COMPATIBLE_VERSION.as_bytes());
    out.bulk(b"proto");
    out.int(version);
    out.bulk(b"id");
    out.int(ctx.conn.handle.id as i64);
    out.bulk(b"mode");
    out.bulk(b"standalone");
    out.bulk(b"role");
    out.bulk(b"master");
    out.bulk(b"modules");
    out.array_len(0);
}

// ----- CLIENT ---------------------------------------------------------------------------------------

fn client(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1];
    let argc = args.len();
    if is(sub, "id") && argc == 2 {
        ctx.out.int(ctx.conn.handle.id as i64);
    } else if is(sub, "setname") && argc == 3 {
        if !valid_client_name(args[2]) {
            return ctx
                .out
                .error("ERR Client names cannot contain spaces, newlines or special characters.");
        }
        ctx.conn.name = String::from_utf8_lossy(args[2]).into_owned();
        ctx.conn.update_snapshot();
        ctx.out.ok();
    } else if is(sub, "getname") && argc == 2 {
        if ctx.conn.name.is_empty() {
            ctx.out.nil();
        } else {
            ctx.out.bulk(ctx.conn.name.as_bytes());
        }
    } else if is(sub, "list") {
        client_list(ctx, args);
    } else if is(sub, "info") && argc == 2 {
        ctx.conn.update_snapshot();
        let line = describe_client(&ctx.conn.handle);
        ctx.out.verbatim("txt", format!("{line}\n").as_bytes());
    } else if is(sub, "kill") && argc >= 3 {
        client_kill(ctx, args);
    } else if is(sub, "reply") && argc == 3 {
        client_reply(ctx, args[2]);
    } else if is(sub, "unblock") && (argc == 3 || argc == 4) {
        client_unblock(ctx, args);
    } else if is(sub, "unblock") {
        super::reply::subcommand_arity_error(ctx, "client", b"unblock");
    } else if is(sub, "pause") && (argc == 3 || argc == 4) {
        client_pause(ctx, args);
    } else if is(sub, "unpause") && argc == 2 {
        *ctx.server.pause.lock() = None;
        ctx.server
            .paused
            .store(false, std::sync::atomic::Ordering::Relaxed);
        ctx.out.ok();
    } else if is(sub, "pause") || is(sub, "unpause") {
        let sub = sub.to_ascii_lowercase();
        super::reply::subcommand_arity_error(ctx, "client", &sub);
    } else if is(sub, "getredir") && argc == 2 {
        super::tracking::client_getredir(ctx);
    } else if is(sub, "tracking") {
        super::tracking::client_tracking(ctx, args);
    } else if is(sub, "caching") {
        super::tracking::client_caching(ctx, args);
    } else if is(sub, "trackinginfo") {
        super::tracking::client_trackinginfo(ctx, args);
    } else if is(sub, "no-evict") && argc == 3 {
        // fallow never evicts connections for memory, so there is nothing to exempt.
        if on_off(ctx, args[2]).is_some() {
            ctx.out.ok();
        }
    } else if is(sub, "no-touch") && argc == 3 {
        client_no_touch(ctx, args[2]);
    } else if is(sub, "help") && argc == 2 {
        super::reply::help_reply(ctx, "CLIENT", CLIENT_HELP);
    } else if is_fixed_arity_subcommand(sub) {
        let sub = sub.to_ascii_lowercase();
        super::reply::subcommand_arity_error(ctx, "client", &sub);
    } else {
        subcommand_error(ctx, args);
    }
}

/// CLIENT subcommands answered with an arity error when given the wrong number of arguments (the
/// others' wrong counts are answered by their own parsers).
fn is_fixed_arity_subcommand(sub: &[u8]) -> bool {
    const NAMES: [&str; 10] = [
        "id", "getname", "setname", "info", "kill", "reply", "no-evict", "no-touch", "getredir",
        "help",
    ];
    NAMES.iter().any(|name| is(sub, name))
}

/// ON or OFF as a flag; anything else is answered with a syntax error (None).
fn on_off(ctx: &mut Ctx, value: &[u8]) -> Option<bool> {
    if is(value, "on") {
        Some(true)
    } else if is(value, "off") {
        Some(false)
    } else {
        ctx.out.error(SYNTAX);
        None
    }
}

/// CLIENT NO-TOUCH ON|OFF (Redis 7.2): while on, the client's commands leave the keys' LRU/LFU records
/// alone, except TOUCH, which still touches.
fn client_no_touch(ctx: &mut Ctx, value: &[u8]) {
    if let Some(on) = on_off(ctx, value) {
        ctx.conn.no_touch = on;
        ctx.out.ok();
    }
}

/// CLIENT HELP: Redis 7.0.15's text, and NO-TOUCH as Redis 7.2 describes it.
const CLIENT_HELP: &[&str] = &[
    "CACHING (YES|NO)",
    "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
    "GETREDIR",
    "    Return the client ID we are redirecting to when tracking is enabled.",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are:",
    "    * ADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made from the specified address",
    "    * LADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made to specified local address",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Kill connections by type.",
    "    * USER <username>",
    "      Kill connections authenticated by <username>.",
    "    * SKIPME (YES|NO)",
    "      Skip killing current connection (default: yes).",
    "LIST [options ...]",
    "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Return clients of specified type.",
    "UNPAUSE",
    "    Stop the current client pause, resuming traffic.",
    "PAUSE <timeout> [WRITE|ALL]",
    "    Suspend all, or just write, clients for <timeout> milliseconds.",
    "REPLY (ON|OFF|SKIP)",
    "    Control the replies sent to the current connection.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "UNBLOCK <clientid> [TIMEOUT|ERROR]",
    "    Unblock the specified blocked client.",
    "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
    "         [OPTIN] [OPTOUT] [NOLOOP]",
    "    Control server assisted client side caching.",
    "TRACKINGINFO",
    "    Report tracking status for the current connection.",
    "NO-EVICT (ON|OFF)",
    "    Protect current client connection from eviction.",
    "NO-TOUCH (ON|OFF)",
    "    Will not touch LRU/LFU stats when this mode is on.",
];

/// CLIENT PAUSE timeout-ms [WRITE|ALL]: commands (or writes) wait until the timeout; a longer pause of
/// the same or a wider kind is kept, as Redis keeps it.
fn client_pause(ctx: &mut Ctx, args: &[&[u8]]) {
    let timeout_ms = match super::blocking::parse_timeout_ms(args[2]) {
        Ok(timeout) => timeout.ms,
        Err(reply) => return ctx.out.error(reply),
    };
    let writes_only = match args.get(3) {
        None => false,
        Some(mode) if is(mode, "all") => false,
        Some(mode) if is(mode, "write") => true,
        Some(_) => return ctx.out.error("ERR CLIENT PAUSE mode must be WRITE or ALL"),
    };
    let until = std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms);
    let mut pause = ctx.server.pause.lock();
    let merged = match *pause {
        Some(current) => crate::server::ClientPause {
            until: current.until.max(until),
            writes_only: current.writes_only && writes_only,
        },
        None => crate::server::ClientPause { until, writes_only },
    };
    *pause = Some(merged);
    ctx.server
        .paused
        .store(true, std::sync::atomic::Ordering::Relaxed);
    ctx.out.ok();
}

/// CLIENT UNBLOCK id [TIMEOUT|ERROR]: 1 when the client was waiting in a blocking command.
fn client_unblock(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(id) = super::parse_int(args[2]) else {
        return ctx.out.error(super::NOT_INTEGER);
    };
    let with_error = match args.get(3) {
        None => false,
        Some(reason) if is(reason, "timeout") => false,
        Some(reason) if is(reason, "error") => true,
        Some(_) => {
            return ctx
                .out
                .error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
        }
    };
    let target = ctx.server.clients.lock().get(&(id as u64)).cloned();
    let unblocked = target.is_some_and(|client| client.unblock(with_error));
    ctx.out.int(unblocked as i64);
}

fn client_reply(ctx: &mut Ctx, mode: &[u8]) {
    if is(mode, "on") {
        ctx.conn.reply_mode = ReplyMode::On;
        ctx.out.ok();
    } else if is(mode, "off") {
        ctx.conn.reply_mode = ReplyMode::Off;
    } else if is(mode, "skip") {
        ctx.conn.reply_mode = ReplyMode::SkipNext;
    } else {
        ctx.out.error(SYNTAX);
    }
}

fn all_clients(ctx: &Ctx) -> Vec<Arc<ClientHandle>> {
    let mut clients: Vec<_> = ctx.server.clients.lock().values().cloned().collect();
    clients.sort_by_key(|client| client.id);
    clients
}

fn client_type_matches(handle: &ClientHandle, wanted: &[u8]) -> Option<bool> {
    let subscribed = {
        let snapshot = handle.snapshot.lock();
        snapshot.subscriptions + snapshot.pattern_subscriptions > 0
    };
    if is(wanted, "normal") {
        Some(!subscribed)
    } else if is(wanted, "pubsub") {
        Some(subscribed)
    } else if is(wanted, "master") || is(wanted, "replica") || is(wanted, "slave") {
        Some(false)
    } else {
        None
    }
}

/// CLIENT LIST [TYPE type | ID id ...]: Redis takes one of the two filters, not both; any integer is
/// an id (one no client has matches nothing).
fn client_list(ctx: &mut Ctx, args: &[&[u8]]) {
    ctx.conn.update_snapshot();
    let mut clients = all_clients(ctx);
    if args.len() == 4 && is(args[2], "type") {
        let wanted = args[3];
        if client_type_matches(&ctx.conn.handle, wanted).is_none() {
            return ctx.out.error(&format!(
                "ERR Unknown client type '{}'",
                String::from_utf8_lossy(wanted)
            ));
        }
        clients.retain(|client| client_type_matches(client, wanted) == Some(true));
    } else if args.len() > 3 && is(args[2], "id") {
        let mut ids = Vec::with_capacity(args.len() - 3);
        for arg in &args[3..] {
            match parse_int(arg) {
                Some(id) => ids.push(id),
                None => return ctx.out.error("ERR Invalid client ID"),
            }
        }
        clients.retain(|client| ids.contains(&(client.id as i64)));
    } else if args.len() != 2 {
        return ctx.out.error(SYNTAX);
    }
    let text: String = clients
        .iter()
        .map(|client| describe_client(client) + "\n")
        .collect();
    ctx.out.verbatim("txt", text.as_bytes());
}

/// A CLIENT KILL filter.
struct KillFilter {
    id: Option<u64>,
    addr: Option<String>,
    laddr: Option<String>,
    user: Option<String>,
    client_type: Option<Vec<u8>>,
    skip_me: bool,
}

fn client_kill(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len() == 3 {
        // Old form: CLIENT KILL addr:port, replies OK or an error.
        let addr = String::from_utf8_lossy(args[2]);
        let target = all_clients(ctx)
            .into_iter()
            .find(|client| client.peer_addr == addr);
        return match target {
            Some(client) => {
                client.kill();
                ctx.out.ok();
            }
            None => ctx.out.error("ERR No such client"),
        };
    }
    let mut filter = KillFilter {
        id: None,
        addr: None,
        laddr: None,
        user: None,
        client_type: None,
        skip_me: true,
    };
    let pairs = &args[2..];
    if !pairs.len().is_multiple_of(2) {
        return ctx.out.error(SYNTAX);
    }
    for pair in pairs.chunks(2) {
        let (name, value) = (pair[0], pair[1]);
        let text = String::from_utf8_lossy(value).into_owned();
        if is(name, "id") {
            match parse_int(value) {
                Some(id) if id > 0 => filter.id = Some(id as u64),
                _ => return ctx.out.error("ERR client-id should be greater than 0"),
            }
        } else if is(name, "addr") {
            filter.addr = Some(text);
        } else if is(name, "laddr") {
            filter.laddr = Some(text);
        } else if is(name, "user") {
            if !ctx.server.acl.read().users.contains_key(&text) {
                return ctx.out.error(&format!("ERR No such user '{text}'"));
            }
            filter.user = Some(text);
        } else if is(name, "type") {
            if client_type_matches(&ctx.conn.handle, value).is_none() {
                return ctx.out.error(&format!("ERR Unknown client type '{text}'"));
            }
            filter.client_type = Some(value.to_vec());
        } else if is(name, "skipme") {
            if is(value, "yes") {
                filter.skip_me = true;
            } else if is(value, "no") {
                filter.skip_me = false;
            } else {
                return ctx.out.error(SYNTAX);
            }
        } else {
            return ctx.out.error(SYNTAX);
        }
    }
    let my_id = ctx.conn.handle.id;
    let mut killed = 0;
    for client in all_clients(ctx) {
        let user = client.snapshot.lock().user.clone();
        let matches = filter.id.is_none_or(|id| id == client.id)
            && filter
                .addr
                .as_ref()
                .is_none_or(|addr| *addr == client.peer_addr)
            && filter
                .laddr
                .as_ref()
                .is_none_or(|addr| *addr == client.local_addr)
            && filter.user.as_ref().is_none_or(|wanted| *wanted == user)
            && filter
                .client_type
                .as_ref()
                .is_none_or(|wanted| client_type_matches(&client, wanted) == Some(true))
            && !(filter.skip_me && client.id == my_id);
        if matches {
            if client.id == my_id {
                ctx.conn.close_after_reply = true;
            } else {
                client.kill();
            }
            killed += 1;
        }
    }
    ctx.out.int(killed);
}

/// SHM.OPEN [PROTOCOL resp|memcache] [PORT p] [RING-BYTES n]: checks the request; the connection loop writes the
/// replies before it, then opens the channel and answers with its descriptors (`net::shm`).
fn shm_open(ctx: &mut Ctx, args: &[&[u8]]) {
    use crate::connection::{ShmOpenRequest, Transport};
    use fallow_shm::layout::Protocol;
    let (on, ring_bytes_default, ring_bytes_max) = {
        let config = ctx.server.config.read();
        (
            config.shm_channels,
            config.shm_ring_bytes,
            config.shm_ring_bytes_max,
        )
    };
    let mut request = ShmOpenRequest {
        protocol: match ctx.conn.transport {
            Transport::Unix => Protocol::Resp,
            Transport::UnixForMemcache => Protocol::Memcache,
            _ => return ctx.out.error(
                "ERR SHM.OPEN needs fallow's Unix socket (a channel is for a client on this host)",
            ),
        },
        ring_bytes: ring_bytes_default as usize,
    };
    if !on {
        return ctx
            .out
            .error("ERR shared-memory channels are off (shm-channels no)");
    }
    let mut options = args[1..].chunks(2);
    for pair in &mut options {
        let [name, value] = pair else {
            return ctx.out.error(SYNTAX);
        };
        if is(name, "protocol") {
            request.protocol = if is(value, "resp") {
                Protocol::Resp
            } else if is(value, "memcache") {
                Protocol::Memcache
            } else {
                return ctx.out.error("ERR PROTOCOL is resp or memcache");
            };
        } else if is(name, "port") {
            // The TCP port the client meant (the preload library redirects a connection to a port):
            // the protocol follows the listener on that port.
            let port = parse_int(value).unwrap_or(-1);
            let config = ctx.server.config.read();
            request.protocol = if port == config.port as i64 {
                Protocol::Resp
            } else if port == config.memcache_port as i64 {
                Protocol::Memcache
            } else {
                return ctx
                    .out
                    .error(&format!("ERR no fallow listener on port {port}"));
            };
        } else if is(name, "ring-bytes") {
            let bytes = parse_int(value).unwrap_or(-1);
            let (min, max) = (
                fallow_shm::layout::RING_BYTES_MIN as i64,
                ring_bytes_max as i64,
            );
            if bytes < min || bytes > max || !(bytes as u64).is_power_of_two() {
                return ctx.out.error(&format!(
                    "ERR RING-BYTES must be a power of two from {min} to {max} (shm-ring-bytes-max)"
                ));
            }
            request.ring_bytes = bytes as usize;
        } else {
            return ctx.out.error(SYNTAX);
        }
    }
    ctx.conn.shm_open = Some(request);
}
