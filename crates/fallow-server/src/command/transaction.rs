//! Transactions: MULTI EXEC DISCARD WATCH UNWATCH. Dispatch queues every command that is not NO_MULTI
//! while a MULTI is open; EXEC locks every shard once, checks the watched keys' CAS values, and runs the
//! queue on those locks, so no other client sees a state between two queued commands.
use super::dispatch::{permitted_now, run_with_guards};
use super::{lookup, Ctx, Handler};
use crate::connection::Watch;
use std::sync::atomic::Ordering;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("multi", multi),
    ("exec", exec),
    ("discard", discard),
    ("watch", watch),
    ("unwatch", unwatch),
];

/// Keys one connection may watch at once (each costs a copy of the key).
const WATCHED_KEYS_MAX: usize = 100_000;

fn multi(ctx: &mut Ctx, _args: &[&[u8]]) {
    if ctx.conn.in_multi() {
        return ctx.out.error("ERR MULTI calls can not be nested");
    }
    ctx.conn.multi = Some(Vec::new());
    ctx.conn.multi_error = false;
    ctx.out.ok();
}

fn discard(ctx: &mut Ctx, _args: &[&[u8]]) {
    if !ctx.conn.in_multi() {
        return ctx.out.error("ERR DISCARD without MULTI");
    }
    ctx.conn.forget_multi();
    ctx.out.ok();
}

fn watch(ctx: &mut Ctx, args: &[&[u8]]) {
    if ctx.conn.in_multi() {
        return ctx.out.error("ERR WATCH inside MULTI is not allowed");
    }
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    for &key in &args[1..] {
        let known = ctx
            .conn
            .watched
            .iter()
            .any(|watch| watch.db == db && watch.key == key);
        if known {
            continue;
        }
        if ctx.conn.watched.len() >= WATCHED_KEYS_MAX {
            return ctx.out.error("ERR too many watched keys");
        }
        let cas = ctx
            .guards
            .shard(key)
            .peek(db, key, now)
            .map(|info| info.cas);
        ctx.conn.watched.push(Watch {
            db,
            key: key.to_vec(),
            cas,
        });
    }
    ctx.out.ok();
}

fn unwatch(ctx: &mut Ctx, _args: &[&[u8]]) {
    ctx.conn.watched.clear();
    ctx.out.ok();
}

fn exec(ctx: &mut Ctx, _args: &[&[u8]]) {
    if !ctx.conn.in_multi() {
        return ctx.out.error("ERR EXEC without MULTI");
    }
    let server = ctx.server;
    let every_shard = crate::scripting::HeldShards::All;
    if server.scripts.any_running()
        && !super::dispatch::scripts_let_run(server, ctx.conn, ctx.out, &every_shard)
    {
        return;
    }
    let mut guards = server.store.lock_all();
    if !ctx.conn.multi_error && !txn_locks_admit(ctx) {
        // waiting for a transaction's lock (EXEC re-runs when granted) or refused (the error is written)
        return;
    }
    let queued = ctx.conn.multi.take().expect("checked above");
    let aborted = ctx.conn.multi_error;
    let watched = std::mem::take(&mut ctx.conn.watched);
    ctx.conn.forget_multi();
    if aborted {
        return ctx
            .out
            .error("EXECABORT Transaction discarded because of previous errors.");
    }
    let now = fallow_store::now_ms();
    let touched = watched.iter().any(|watch| {
        let cas = guards
            .shard(&watch.key)
            .peek(watch.db, &watch.key, now)
            .map(|info| info.cas);
        cas != watch.cas
    });
    if touched {
        return ctx.out.nil_array();
    }
    ctx.out.array_len(queued.len());
    for command in &queued {
        let args: Vec<&[u8]> = command.iter().map(|arg| arg.as_slice()).collect();
        // Queueing only accepted known commands with a valid arity.
        let Some((index, spec)) = lookup(args[0]) else {
            ctx.out.error("ERR unknown command");
            server.stats.count_error(b"ERR unknown command");
            continue;
        };
        if let Err(denied) = permitted_now(server, ctx.conn, spec, &args) {
            ctx.out.error(&denied);
            server.stats.count_error(denied.as_bytes());
            continue;
        }
        let started = std::time::Instant::now();
        guards = run_with_guards(server, ctx.conn, ctx.out, spec, &args, guards, true);
        super::dispatch::feed_monitors(server, ctx.conn, spec, &args, false);
        let (calls, micros) = &server.command_stats[index];
        calls.fetch_add(1, Ordering::Relaxed);
        micros.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
}

/// Whether transactions' locks let the queued commands run now (checked with every shard locked). The
/// commands take, for as long as EXEC runs, the modes they would take one by one.
fn txn_locks_admit(ctx: &mut Ctx) -> bool {
    let server = ctx.server;
    if !server.txns.any_locked() && ctx.conn.plain_locks.is_none() {
        return true;
    }
    let db = ctx.keyspace();
    let abstract_locks = server.txns.abstract_locks();
    let mut requests = crate::txn::modes::Requests::new();
    for command in ctx.conn.multi.iter().flatten() {
        let args: Vec<&[u8]> = command.iter().map(|arg| arg.as_slice()).collect();
        if let Some((_, spec)) = lookup(args[0]) {
            crate::txn::modes::add_requests(
                &mut requests,
                crate::txn::modes::requests(spec, &args, db, abstract_locks),
            );
        }
    }
    matches!(
        super::dispatch::txn::plain_access(server, ctx.conn, ctx.out, requests),
        crate::txn::session::Claim::Run
    )
}
