//! Scripting commands: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT, as Redis 7.0 has them. The
//! shared cache and run registry are `crate::scripting`; the Lua state is `vm`, `redis.call` is `call`,
//! value conversion `convert`, the bundled libraries `libs`.
pub mod call;
pub mod convert;
pub mod libs;
pub mod vm;

use super::reply::subcommand_arity_error;
use super::{is, parse_int, subcommand_error, Ctx, Handler, NOT_INTEGER};
use crate::scripting::{HeldShards, Script};
use call::{Locking, ScriptRun};
use mlua::MultiValue;
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("eval", eval),
    ("evalsha", evalsha),
    ("eval_ro", eval_ro),
    ("evalsha_ro", evalsha_ro),
    ("script", script),
];

const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";

fn eval(ctx: &mut Ctx, args: &[&[u8]]) {
    eval_source(ctx, args, false)
}

fn eval_ro(ctx: &mut Ctx, args: &[&[u8]]) {
    eval_source(ctx, args, true)
}

fn evalsha(ctx: &mut Ctx, args: &[&[u8]]) {
    eval_cached(ctx, args, false)
}

fn evalsha_ro(ctx: &mut Ctx, args: &[&[u8]]) {
    eval_cached(ctx, args, true)
}

fn eval_source(ctx: &mut Ctx, args: &[&[u8]], read_only: bool) {
    let Some((keys, argv)) = split_keys(ctx, args) else {
        return;
    };
    match cache_script(ctx, args[1], true) {
        Ok(script) => run_script(ctx, &script, keys, argv, read_only),
        Err(error) => ctx.out.error(&error),
    }
}

fn eval_cached(ctx: &mut Ctx, args: &[&[u8]], read_only: bool) {
    let Some((keys, argv)) = split_keys(ctx, args) else {
        return;
    };
    let sha = String::from_utf8_lossy(args[1]).to_ascii_lowercase();
    match ctx.server.scripts.get(&sha) {
        Some(script) if sha.len() == 40 => run_script(ctx, &script, keys, argv, read_only),
        _ => ctx.out.error(NOSCRIPT),
    }
}

/// A script's KEYS and ARGV.
type KeysAndArgv<'x> = (Vec<&'x [u8]>, Vec<&'x [u8]>);

/// KEYS and ARGV of an EVAL-like call, or None with the error written.
fn split_keys<'x>(ctx: &mut Ctx, args: &[&'x [u8]]) -> Option<KeysAndArgv<'x>> {
    let Some(count) = parse_int(args[2]) else {
        ctx.out.error(NOT_INTEGER);
        return None;
    };
    if count < 0 {
        ctx.out.error("ERR Number of keys can't be negative");
        return None;
    }
    if count as u64 > (args.len() - 3) as u64 {
        ctx.out
            .error("ERR Number of keys can't be greater than number of args");
        return None;
    }
    let split = 3 + count as usize;
    Some((args[3..split].to_vec(), args[split..].to_vec()))
}

/// The cached script of `source`, compiled first if new (a script that does not compile is not cached).
fn cache_script(ctx: &mut Ctx, source: &[u8], evictable: bool) -> Result<Arc<Script>, String> {
    let scripts = &ctx.server.scripts;
    let sha = crate::scripting::Scripts::sha1_hex(source);
    if let Some(script) = scripts.get(&sha) {
        return Ok(script);
    }
    let generation = scripts.generation.load(Ordering::Relaxed);
    vm::with_vm(|vm| vm.function(&sha, source, generation).map(|_| ()))??;
    scripts.insert(source, evictable).map_err(|full| {
        format!(
            "ERR the script cache is full ({} bytes of scripts loaded with SCRIPT LOAD); SCRIPT FLUSH frees it",
            full.bytes_max
        )
    })
}

/// How a run ended for the loop in `run_script`.
enum Ended {
    Replied,
    /// It needed a shard another client held before its first write: run again with every shard.
    StartOver,
}

fn run_script(
    ctx: &mut Ctx,
    script: &Arc<Script>,
    keys: Vec<&[u8]>,
    argv: Vec<&[u8]>,
    read_only: bool,
) {
    let server = ctx.server;
    let strict = server.config.read().lua_strict_keys;
    if ctx.in_exec || ctx.guards.holds_all() {
        // Inside EXEC every shard is held already, and stays held for the commands after the script.
        let locking = if strict {
            Locking::Strict
        } else {
            Locking::All
        };
        run_once(
            ctx,
            script,
            &keys,
            &argv,
            locking,
            read_only,
            HeldShards::All,
        );
        return;
    }
    let mut locking = if strict {
        Locking::Strict
    } else if script.locks_declared_only() {
        Locking::Declared
    } else {
        Locking::All
    };
    loop {
        let needed = match locking {
            Locking::All => HeldShards::All,
            _ => declared_shards(ctx, &keys),
        };
        // The dispatcher's locks (the declared keys' shards) are let go before the run takes its own.
        ctx.guards = server.store.lock_keys(std::iter::empty::<&[u8]>());
        if !super::dispatch::scripts_let_run(server, ctx.conn, ctx.out, &needed) {
            return;
        }
        ctx.guards = match &needed {
            HeldShards::All => server.store.lock_all(),
            HeldShards::Some(_) => server.store.lock_keys(keys.iter().copied()),
        };
        if locking != Locking::All {
            server
                .scripts
                .stats
                .declared_only_runs
                .fetch_add(1, Ordering::Relaxed);
        }
        match run_once(ctx, script, &keys, &argv, locking, read_only, needed) {
            Ended::Replied => return,
            Ended::StartOver => {
                server
                    .scripts
                    .stats
                    .restarts
                    .fetch_add(1, Ordering::Relaxed);
                locking = Locking::All;
            }
        }
    }
}

fn declared_shards(ctx: &Ctx, keys: &[&[u8]]) -> HeldShards {
    let store = &ctx.server.store;
    let mut indices: Vec<usize> = keys.iter().map(|key| store.shard_index(key)).collect();
    indices.sort_unstable();
    indices.dedup();
    HeldShards::Some(indices)
}

fn run_once(
    ctx: &mut Ctx,
    script: &Arc<Script>,
    keys: &[&[u8]],
    argv: &[&[u8]],
    locking: Locking,
    read_only: bool,
    held: HeldShards,
) -> Ended {
    let server = ctx.server;
    let scripts = &server.scripts;
    let running = scripts.begin(ctx.conn.id(), &script.sha, held);
    let busy_after = Duration::from_millis(server.config.read().busy_reply_threshold_ms);
    let generation = scripts.generation.load(Ordering::Relaxed);
    let db_before = ctx.conn.db;
    let reply_start = ctx.out.buf.len();
    let mut run = ScriptRun {
        ctx,
        running: running.clone(),
        declared_keys: keys.iter().map(|key| key.to_vec()).collect(),
        locking,
        read_only,
        touched_undeclared: false,
        wrote: false,
        restart: false,
    };
    let outcome = vm::with_vm(|vm| -> Result<vm::RunOutcome, String> {
        let function = vm.function(&script.sha, &script.source, generation)?;
        let run = RefCell::new(&mut run);
        vm.lua
            .scope(|scope| {
                let call = scope.create_function(|lua, args: MultiValue| {
                    let resp: i64 = lua.named_registry_value(vm::RESP_KEY)?;
                    run.borrow_mut().call(lua, resp, args)
                })?;
                let acl_check = scope.create_function(|lua, args: MultiValue| {
                    run.borrow_mut().acl_check(lua, args)
                })?;
                vm::watching(&running, busy_after, || {
                    vm.run(&function, keys, argv, call, acl_check)
                })
            })
            .map_err(|error| format!("ERR Error running script {}: {error}", script.sha))
    });
    scripts.end(&running);
    let (restart, touched_undeclared) = (run.restart, run.touched_undeclared);
    let ctx = run.ctx;
    // SELECT inside a script changes the script's database only (Redis 7.0).
    ctx.conn.db = db_before;
    if restart {
        ctx.out.buf.truncate(reply_start);
        return Ended::StartOver;
    }
    script.note_run(touched_undeclared);
    if running.kill.load(Ordering::Relaxed) {
        scripts.stats.killed.fetch_add(1, Ordering::Relaxed);
    }
    match outcome.and_then(|outcome| outcome) {
        Ok(vm::RunOutcome {
            result: Ok(value),
            resp3,
        }) => convert::write_lua_reply(ctx.out, &value, resp3, 0),
        Ok(vm::RunOutcome {
            result: Err(error), ..
        }) => {
            scripts.stats.errors.fetch_add(1, Ordering::Relaxed);
            ctx.out.error(&script_error(&script.sha, &error));
        }
        Err(message) => {
            scripts.stats.errors.fetch_add(1, Ordering::Relaxed);
            ctx.out.error(&message);
        }
    }
    Ended::Replied
}

/// The reply for an error a script raised: its `err` text, then where (`script: <sha>, on
/// @user_script:<line>.`), as Redis 7.0 words it.
fn script_error(sha: &str, error: &mlua::Value) -> String {
    let mlua::Value::Table(error) = error else {
        let text = match error {
            mlua::Value::String(text) => text.to_string_lossy(),
            _ => "execution failure".to_string(),
        };
        return format!(
            "ERR Error running script {sha}, {}",
            &text[..text.len().min(100)]
        );
    };
    let message = match error.raw_get::<mlua::Value>("err") {
        Ok(mlua::Value::String(text)) => text.to_string_lossy(),
        _ => "ERR unknown error".to_string(),
    };
    let message = message.strip_prefix('-').unwrap_or(&message).to_string();
    let source: Option<String> = error.raw_get("source").ok();
    let line: Option<i64> = error.raw_get("line").ok();
    match (source, line) {
        (Some(source), Some(line)) => format!("{message} script: {sha}, on {source}:{line}."),
        _ => message,
    }
}

// ----- SCRIPT ---------------------------------------------------------------------------------------

const SCRIPT_HELP: &[&str] = &[
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DEBUG (YES|SYNC|NO)",
    "    Set the debug mode for subsequent scripts executed.",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
];

fn script(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    let arity_ok = match sub.as_slice() {
        b"help" | b"kill" => args.len() == 2,
        b"flush" => args.len() <= 3,
        b"load" | b"debug" => args.len() == 3,
        b"exists" => args.len() >= 3,
        _ => return subcommand_error(ctx, args),
    };
    if !arity_ok {
        return subcommand_arity_error(ctx, "script", &sub);
    }
    match sub.as_slice() {
        b"help" => {
            ctx.out.array_len(SCRIPT_HELP.len());
            SCRIPT_HELP.iter().for_each(|line| ctx.out.simple(line));
        }
        b"load" => match cache_script(ctx, args[2], false) {
            Ok(script) => ctx.out.bulk(script.sha.as_bytes()),
            Err(error) => ctx.out.error(&error),
        },
        b"exists" => {
            ctx.out.array_len(args.len() - 2);
            for sha in &args[2..] {
                let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                ctx.out.int(ctx.server.scripts.get(&sha).is_some() as i64);
            }
        }
        b"flush" => script_flush(ctx, args),
        b"kill" => script_kill(ctx),
        _ => script_debug(ctx, args[2]),
    }
}

fn script_flush(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len() == 3 && !is(args[2], "sync") && !is(args[2], "async") {
        return ctx
            .out
            .error("ERR SCRIPT FLUSH only support SYNC|ASYNC option");
    }
    ctx.server.scripts.flush();
    ctx.out.ok();
}

/// Stops the running scripts that have not written; UNKILLABLE when every one has.
fn script_kill(ctx: &mut Ctx) {
    let runs = ctx.server.scripts.running_runs();
    if runs.is_empty() {
        return ctx.out.error("NOTBUSY No scripts in execution right now.");
    }
    let killable: Vec<_> = runs
        .iter()
        .filter(|run| !run.wrote.load(Ordering::Relaxed))
        .collect();
    if killable.is_empty() {
        return ctx.out.error("UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.");
    }
    killable
        .iter()
        .for_each(|run| run.kill.store(true, Ordering::Relaxed));
    ctx.out.ok();
}

/// The Lua debugger is not offered: `SCRIPT DEBUG NO` is accepted (it is the state scripts run in).
fn script_debug(ctx: &mut Ctx, mode: &[u8]) {
    if is(mode, "no") {
        return ctx.out.ok();
    }
    if is(mode, "yes") || is(mode, "sync") {
        return ctx
            .out
            .error("ERR the Lua debugger (SCRIPT DEBUG YES|SYNC) is not available in fallow");
    }
    ctx.out.error("ERR Use SCRIPT DEBUG YES/SYNC/NO")
}
