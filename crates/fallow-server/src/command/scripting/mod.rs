//! Scripting commands: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT, as Redis 7.0 has them. The
//! shared cache and run registry are `crate::scripting`; the Lua state is `vm`, `redis.call` is `call`,
//! value conversion `convert`, the bundled libraries `libs`.
pub mod call;
pub mod convert;
pub mod function;
pub mod hook;
pub mod libs;
pub mod run;
pub mod vm;

use super::reply::subcommand_arity_error;
use super::{is, parse_int, subcommand_error, Ctx, Handler, NOT_INTEGER};
use crate::scripting::Script;
use run::Runnable;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("eval", eval),
    ("evalsha", evalsha),
    ("eval_ro", eval_ro),
    ("evalsha_ro", evalsha_ro),
    ("script", script),
    ("function", function::function),
    ("fcall", function::fcall),
    ("fcall_ro", function::fcall_ro),
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
        Ok(script) => run::run(ctx, &Runnable::Script(script), &keys, &argv, read_only),
        Err(error) => ctx.out.error(&error),
    }
}

fn eval_cached(ctx: &mut Ctx, args: &[&[u8]], read_only: bool) {
    let Some((keys, argv)) = split_keys(ctx, args) else {
        return;
    };
    let sha = String::from_utf8_lossy(args[1]).to_ascii_lowercase();
    match ctx.server.scripts.get(&sha) {
        Some(script) if sha.len() == 40 => {
            run::run(ctx, &Runnable::Script(script), &keys, &argv, read_only)
        }
        _ => ctx.out.error(NOSCRIPT),
    }
}

/// A script's KEYS and ARGV.
type KeysAndArgv<'x> = (Vec<&'x [u8]>, Vec<&'x [u8]>);

/// KEYS and ARGV of an EVAL- or FCALL-like call, or None with the error written.
pub fn split_keys<'x>(ctx: &mut Ctx, args: &[&'x [u8]]) -> Option<KeysAndArgv<'x>> {
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
    let flags = crate::scripting::shebang::script_flags(source)?;
    let generation = scripts.generation.load(Ordering::Relaxed);
    vm::with_vm(|vm| vm.function(&sha, source, generation).map(|_| ()))??;
    scripts.insert(source, flags, evictable).map_err(|full| {
        format!(
            "ERR the script cache is full ({} bytes of scripts loaded with SCRIPT LOAD); SCRIPT FLUSH frees it",
            full.bytes_max
        )
    })
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

/// SCRIPT KILL: stops the running scripts (not functions: FUNCTION KILL) that have not written.
fn script_kill(ctx: &mut Ctx) {
    let runs: Vec<_> = ctx
        .server
        .scripts
        .running_runs()
        .into_iter()
        .filter(|run| run.function_call.is_empty())
        .collect();
    kill_runs(ctx, &runs);
}

/// Stops `runs` where they have not written; NOTBUSY when there are none, UNKILLABLE when every one has.
fn kill_runs(ctx: &mut Ctx, runs: &[Arc<crate::scripting::RunningScript>]) {
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
