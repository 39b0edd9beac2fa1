//! Dispatch: one request from its arguments to its reply. Checks authentication, arity, ACL permissions,
//! MULTI queueing, the pub/sub context and maxmemory; drives the connection's transaction (`txn`): locks
//! the records of a command inside TXN.BEGIN, queues its writes and applies them at TXN.COMMIT; waits for
//! transactions' locks before a plain command; locks the command's shards and runs its handler.
use super::info::{reaches_every_key, CommandInfo};
use super::{arity_error, flags, key_positions, lookup, oom_error, CommandSpec, Ctx, Keys};
use crate::connection::ConnState;
use crate::scripting::{Conflict, HeldShards, BUSY_ERROR};
use crate::server::Server;
use fallow_proto::ReplyWriter;
use fallow_store::Guards;
use std::sync::atomic::Ordering;

pub mod tier2;
pub mod txn;

fn unknown_command_error(args: &[&[u8]]) -> String {
    let mut text = format!(
        "ERR unknown command '{}', with args beginning with: ",
        String::from_utf8_lossy(&args[0][..args[0].len().min(128)])
    );
    for arg in args.iter().skip(1).take(16) {
        text.push_str(&format!(
            "'{}' ",
            String::from_utf8_lossy(&arg[..arg.len().min(128)])
        ));
    }
    text
}

/// MODULE's subcommands Redis 7.0 marks protected (CMD_PROTECTED; COMMAND INFO does not show the flag).
const PROTECTED_MODULE_SUBCOMMANDS: [&str; 3] = ["module|load", "module|loadex", "module|unload"];

/// DEBUG and MODULE LOAD/LOADEX/UNLOAD run only where `enable-debug-command` (`enable-module-command`)
/// allows, checked where Redis 7.0 checks it: after the (sub)command's arity, before ACL and MULTI
/// queueing.
fn protected_command_refusal(
    server: &Server,
    conn: &ConnState,
    name: &str,
    args: &[&[u8]],
) -> Option<String> {
    let switch = match name {
        "debug" => "enable-debug-command",
        "module" if is_protected_module_call(args) => "enable-module-command",
        _ => return None,
    };
    if server.config.read().allows(switch, conn.handle.is_local()) {
        return None;
    }
    Some(format!(
        "ERR {} command not allowed. If the {switch} option is set to \"local\", you can run it from a \
local connection, otherwise you need to set this option in the configuration file, and then restart the \
server.",
        name.to_ascii_uppercase()
    ))
}

/// A MODULE call of a protected subcommand with its right number of arguments (a wrong count gets the
/// arity error first, as in Redis).
fn is_protected_module_call(args: &[&[u8]]) -> bool {
    match super::info::redis::lookup_call(args) {
        Some(super::info::redis::Entry::Redis(sub)) => {
            PROTECTED_MODULE_SUBCOMMANDS.contains(&sub.name.as_str()) && sub.arity_ok(args.len())
        }
        _ => false,
    }
}

/// Runs one request. The reply (if any) is appended to `out`; an error reply is counted (INFO
/// `total_error_replies`, `errorstats`).
pub fn execute(server: &Server, conn: &mut ConnState, out: &mut ReplyWriter, args: &[&[u8]]) {
    debug_assert!(!args.is_empty());
    conn.commands_unreported += 1;
    let reply_start = out.buf.len();
    let reply_mode_applies = check_and_run(server, conn, out, args);
    server.stats.count_error_reply(&out.buf[reply_start..]);
    if reply_mode_applies {
        conn.apply_reply_mode(out, reply_start);
    }
    super::tracking::after_command(server, conn, out, args[0]);
}

/// The checks of `execute`, then the command; false where the reply stays whatever CLIENT REPLY says
/// (a command queued in MULTI, one refused in the subscribe context).
fn check_and_run(
    server: &Server,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    args: &[&[u8]],
) -> bool {
    let Some((index, spec)) = lookup(args[0]) else {
        server
            .stats
            .unknown_commands
            .fetch_add(1, Ordering::Relaxed);
        conn.flag_multi_error();
        out.error(&unknown_command_error(args));
        return true;
    };
    if !conn.authenticated && spec.flags & flags::NO_AUTH == 0 {
        conn.flag_multi_error();
        out.error("NOAUTH Authentication required.");
        return true;
    }
    if !spec.arity_ok(args.len()) {
        conn.flag_multi_error();
        out.error(&arity_error(spec.name));
        return true;
    }
    if let Some(refusal) = protected_command_refusal(server, conn, spec.name, args) {
        conn.flag_multi_error();
        out.error(&refusal);
        return true;
    }
    let unrestricted =
        conn.user == "default" && server.acl_default_unrestricted.load(Ordering::Relaxed);
    let context = crate::acl::log::Context::of_multi(conn.in_multi());
    if let Err(denied) = check_acl(server, conn, spec, args, unrestricted, context) {
        conn.flag_multi_error();
        out.error(&denied);
        return true;
    }
    if conn.in_multi() && spec.flags & flags::NO_MULTI == 0 {
        queue_in_multi(conn, out, args);
        return false;
    }
    if conn.in_subscribe_context() && spec.flags & flags::SUBSCRIBE_CONTEXT == 0 {
        out.error(&format!(
            "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
            spec.name
        ));
        return false;
    }
    if server.paused.load(Ordering::Relaxed) && server.paused_for(may_write(spec)) {
        // CLIENT PAUSE: the command waits, off the worker, and runs when the pause ends.
        conn.wait_and_retry = true;
        return false;
    }
    // Scripts show before the commands they run, as Redis feeds EVAL's line itself.
    let script_first = matches!(spec.name, "eval" | "evalsha" | "eval_ro" | "evalsha_ro");
    if script_first {
        feed_monitors(server, conn, spec, args, false);
    }
    let started = std::time::Instant::now();
    // TXN.*, RESET and QUIT end or act on the transaction itself
    let in_txn = conn.txn.is_some()
        && !spec.name.starts_with("txn.")
        && !matches!(spec.name, "reset" | "quit");
    if in_txn {
        txn::run_in_txn(server, conn, out, spec, args);
    } else {
        run(server, conn, out, index, spec, args, false);
    }
    let elapsed = started.elapsed();
    let micros = elapsed.as_micros() as u64;
    conn.record_command(server, index, micros);
    let event = if spec.flags & flags::FAST != 0 {
        "fast-command"
    } else {
        "command"
    };
    server.latency.record_if_needed(event, elapsed);
    if !script_first && !conn.wait_and_retry {
        feed_monitors(server, conn, spec, args, false);
    }
    // Redis leaves AUTH and HELLO (passwords) and EXEC out of the slow log (fallow does not log the
    // commands EXEC runs one by one, as Redis does).
    let skips_slowlog = matches!(spec.name, "auth" | "hello" | "exec");
    if server.slowlog.wants(micros) && !skips_slowlog {
        let handle = &conn.handle;
        server
            .slowlog
            .push(args, micros, &handle.peer_addr, &conn.name);
    }
    conn.last_command = spec.name;
    true
}

/// Shows a command to MONITOR's clients (not administrative ones, as Redis hides them), with the
/// database it left the connection in; `from_script`: run by a script's `redis.call`.
pub fn feed_monitors(
    server: &Server,
    conn: &ConnState,
    spec: &CommandSpec,
    args: &[&[u8]],
    from_script: bool,
) {
    if !server.monitors.active() || spec.flags & flags::ADMIN != 0 {
        return;
    }
    let peer = &conn.handle.peer_addr;
    let unix_address;
    let origin = if from_script {
        crate::monitor::Origin::Lua
    } else if peer.starts_with('/') {
        // A unix-socket client: Redis shows the socket's path.
        let path = server.config.read().unixsocket.clone().unwrap_or_default();
        unix_address = format!("unix:{path}");
        crate::monitor::Origin::Client(&unix_address)
    } else {
        crate::monitor::Origin::Client(peer)
    };
    let clients = &server.clients_memory;
    server
        .monitors
        .feed(&server.pubsub, clients, conn.db, origin, args);
}

/// Whether a command may write or be replicated (what CLIENT PAUSE WRITE holds back): writes, scripts and
/// functions that may write, and publishing.
fn may_write(spec: &CommandSpec) -> bool {
    spec.flags & flags::WRITE != 0
        || matches!(
            spec.name,
            "eval" | "evalsha" | "fcall" | "publish" | "spublish" | "exec"
        )
}

/// Whether the connection's user may still run a queued command (EXEC, TXN.COMMIT): permissions may have
/// changed since it was queued.
pub fn permitted_now(
    server: &Server,
    conn: &ConnState,
    info: &CommandInfo,
    args: &[&[u8]],
) -> Result<(), String> {
    permitted_in(server, conn, info, args, crate::acl::log::Context::Multi)
}

/// `permitted_now` for a command run in `context` (a script's commands log as `lua`).
pub fn permitted_in(
    server: &Server,
    conn: &ConnState,
    info: &CommandInfo,
    args: &[&[u8]],
    context: crate::acl::log::Context,
) -> Result<(), String> {
    let unrestricted =
        conn.user == "default" && server.acl_default_unrestricted.load(Ordering::Relaxed);
    check_acl(server, conn, info, args, unrestricted, context)
}

/// Err is the NOPERM reply; the denial is counted and logged to ACL LOG.
fn check_acl(
    server: &Server,
    conn: &ConnState,
    info: &CommandInfo,
    args: &[&[u8]],
    unrestricted: bool,
    context: crate::acl::log::Context,
) -> Result<(), String> {
    if unrestricted {
        return Ok(());
    }
    let checked = server.acl.read().check(&conn.user, info, args);
    checked.map_err(|denied| {
        server.note_acl_denial(
            &conn.handle,
            denied.reason,
            context,
            &denied.object,
            &conn.user,
        );
        denied.reply
    })
}

/// Locks the command's shards, waits for transactions' locks on its records in a conflicting mode,
/// enforces maxmemory for commands that may grow memory, and runs it.
pub fn run(
    server: &Server,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    _index: usize,
    spec: &CommandSpec,
    args: &[&[u8]],
    in_exec: bool,
) {
    if server.scripts.any_running()
        && !scripts_let_run(server, conn, out, &needed_shards(server, spec, args))
    {
        return;
    }
    let guards = lock_shards(server, spec, args);
    // Checked with the shards locked: a transaction that locks a record later reads it after this command.
    // TXN.* act on the connection's own transaction (TXN.LOCK takes its locks), never as a plain command.
    let checks_txn_locks = !matches!(spec.keys, Keys::None | Keys::All)
        && !spec.name.starts_with("txn.")
        && (server.txns.any_locked() || conn.plain_locks.is_some());
    if checks_txn_locks {
        let requests =
            crate::txn::modes::requests(spec, args, conn.address(), server.txns.abstract_locks());
        match txn::plain_access(server, conn, out, requests) {
            crate::txn::session::Claim::Run => {}
            _ => return,
        }
    }
    run_with_guards(server, conn, out, spec, args, guards, in_exec);
    if conn.plain_locks.is_some() && conn.lock_wait.is_none() {
        txn::release_plain(server, conn);
    }
}

/// Runs a command without looking at transactions' locks: a transaction's own reads (it holds the locks).
pub fn run_unlocked_by_txns(
    server: &Server,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    spec: &CommandSpec,
    args: &[&[u8]],
    in_exec: bool,
) {
    let guards = lock_shards(server, spec, args);
    run_with_guards(server, conn, out, spec, args, guards, in_exec);
}

/// The shards a command locks, for the check against running scripts. A keyless command outside the
/// families that never touch the store (connection, pub/sub, transactions, scripting) may reach every
/// shard (INFO, MEMORY, CONFIG, TENANT...): it counts as needing all of them, as Redis answers such
/// commands BUSY during a long script.
fn needed_shards(server: &Server, info: &CommandInfo, args: &[&[u8]]) -> HeldShards {
    const STORELESS_FAMILIES: [&str; 4] = ["connection", "pubsub", "transaction", "scripting"];
    if reaches_every_key(info, args) {
        return HeldShards::All;
    }
    match info.keys {
        Keys::None if STORELESS_FAMILIES.contains(&info.group.category) => {
            HeldShards::Some(Vec::new())
        }
        Keys::None => HeldShards::All,
        _ => {
            let mut indices: Vec<usize> = key_positions(info, args)
                .into_iter()
                .map(|position| server.store.shard_index(args[position]))
                .collect();
            indices.sort_unstable();
            indices.dedup();
            HeldShards::Some(indices)
        }
    }
}

/// Whether a command needing `needed` may lock its shards now: no running script holds one. A script
/// past `busy-reply-threshold` gets the command answered BUSY; a younger one makes it wait off the
/// worker thread (`conn.wait_and_retry`: the connection runs it again when a script ends). False in both.
pub fn scripts_let_run(
    server: &Server,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    needed: &HeldShards,
) -> bool {
    let stats = &server.scripts.stats;
    match server.scripts.conflict(conn.id(), needed) {
        Conflict::None => true,
        Conflict::Busy => {
            stats.busy_replies.fetch_add(1, Ordering::Relaxed);
            out.error(BUSY_ERROR);
            false
        }
        Conflict::Wait => {
            stats.waits.fetch_add(1, Ordering::Relaxed);
            conn.wait_and_retry = true;
            false
        }
    }
}

fn lock_shards<'s>(server: &'s Server, info: &CommandInfo, args: &[&[u8]]) -> Guards<'s> {
    if reaches_every_key(info, args) {
        return server.store.lock_all();
    }
    match info.keys {
        // The common single-key case locks its shard without collecting key positions.
        Keys::Range {
            first: 1,
            last: 1,
            step: 1,
        } => server.store.lock_key(args[1]),
        _ => server.store.lock_keys(
            key_positions(info, args)
                .into_iter()
                .map(|position| args[position]),
        ),
    }
}

/// Runs a command on shards already locked (EXEC holds every shard for all its commands).
pub fn run_with_guards<'s>(
    server: &'s Server,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    spec: &CommandSpec,
    args: &[&[u8]],
    mut guards: Guards<'s>,
    in_exec: bool,
) -> Guards<'s> {
    let reply_start = out.buf.len();
    if let Some(error) = persistent_write_refusal(server, conn, spec, args) {
        // Refused before it runs: a write answered with an error changes nothing.
        out.error(&tier2_write_error(server, &error));
        if in_exec {
            server.stats.count_error_reply(&out.buf[reply_start..]);
        }
        return guards;
    }
    if spec.flags & flags::DENYOOM != 0 && !room_for_request(server, &mut guards, args) {
        server.stats.oom_rejections.fetch_add(1, Ordering::Relaxed);
        out.error(&oom_error(server, conn.tenant.tenant));
        if in_exec {
            server.stats.count_error_reply(&out.buf[reply_start..]);
        }
        return guards;
    }
    let now_ms = conn.now_ms;
    let mut ctx = Ctx {
        server,
        conn,
        out,
        guards,
        now_ms,
        in_exec,
    };
    // CLIENT NO-TOUCH: reads leave LRU/LFU alone (TOUCH is meant to touch).
    let no_touch = ctx.conn.no_touch && spec.name != "touch";
    let touched_before = no_touch.then(|| fallow_store::shard::set_thread_no_touch(true));
    (spec.handler)(&mut ctx, args);
    super::tracking::after_store_access(server, ctx.conn, spec, args);
    if server.notify.flags() != 0 {
        // Expiries and evictions the command caused without publishing anything itself.
        ctx.publish_store_events();
    }
    if let Some(before) = touched_before {
        fallow_store::shard::set_thread_no_touch(before);
    }
    if let Some(error) = fallow_store::shard::take_thread_error() {
        // A persistent write the log refused: the client must not take it as done.
        ctx.out.buf.truncate(reply_start);
        ctx.out.error(&tier2_write_error(server, &error));
    }
    if in_exec {
        // a command of EXEC or TXN.COMMIT: its reply is an element of theirs
        server.stats.count_error_reply(&ctx.out.buf[reply_start..]);
    }
    ctx.guards
}

/// Why a write of a persistent tenant cannot be logged, known before it runs: tier 2 has failed, or the
/// request alone is larger than a tier-2 record may be.
fn persistent_write_refusal(
    server: &Server,
    conn: &ConnState,
    spec: &CommandSpec,
    args: &[&[u8]],
) -> Option<fallow_store::tier2::Tier2Error> {
    use fallow_store::tier2::Tier2Error;
    if spec.flags & flags::WRITE == 0 || !server.store.memory.pool.is_persistent(conn.tenant.tenant)
    {
        return None;
    }
    let tier2 = server.store.tier2()?;
    if let Some(error) = tier2.failure() {
        return Some(Tier2Error::Io(error));
    }
    let request_bytes: usize = args[1..].iter().map(|arg| arg.len()).sum();
    let max_bytes = tier2.config.record_bytes_max();
    (request_bytes > max_bytes).then_some(Tier2Error::TooLarge {
        record_bytes: request_bytes,
        max_bytes,
    })
}

/// The reply to a persistent write that tier 2 could not log.
fn tier2_write_error(server: &Server, error: &fallow_store::tier2::Tier2Error) -> String {
    use fallow_store::tier2::Tier2Error;
    match error {
        Tier2Error::Full => {
            let store = &server.store;
            let tier2 = store.tier2().map_or(String::new(), |tier2| {
                let (free, total) = tier2.regions_free_total();
                format!(
                    " ({} of {} bytes in use, {free} of {total} regions free)",
                    tier2.used_bytes(),
                    tier2.config.size_bytes
                )
            });
            format!(
                "OOM command not allowed: tier 2 is full{tier2} and RAM holds {} of maxmemory {} bytes; persistent data is never dropped",
                store.used_bytes(),
                store.maxmemory_bytes()
            )
        }
        Tier2Error::TooLarge { .. } => {
            format!("ERR {error} (persistent values must fit a tier-2 region)")
        }
        _ => format!("IOERR persistent write not logged: {error}"),
    }
}

/// Whether a command that may grow memory fits: the store with the request's own bytes (a cheap estimate
/// of what it adds: the values of a large SET, the members of an LPUSH/SADD/HSET/ZADD) stays under the
/// limit, after evicting as the policy allows.
fn room_for_request(server: &Server, guards: &mut Guards<'_>, args: &[&[u8]]) -> bool {
    let store = &server.store;
    if store.maxmemory_bytes() == 0 && store.pool_limit_bytes() == 0 {
        return true;
    }
    let request_bytes: usize = args[1..].iter().map(|arg| arg.len()).sum();
    !store.would_exceed_maxmemory(request_bytes) || guards.make_room_for(request_bytes).is_ok()
}

/// Queues a command inside MULTI (its arguments copied; EXEC looks it up again).
fn queue_in_multi(conn: &mut ConnState, out: &mut ReplyWriter, args: &[&[u8]]) {
    if let Some(queued) = conn.multi.as_mut() {
        queued.push(args.iter().map(|arg| arg.to_vec()).collect());
    }
    out.simple("QUEUED");
}
