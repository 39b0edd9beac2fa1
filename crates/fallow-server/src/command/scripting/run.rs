//! Running a script (EVAL, EVALSHA) or a function (FCALL): the shards it locks (see
//! `crate::scripting`), the checks before it starts (read-only commands, OOM), its registration as the
//! running script, the Lua call, and its reply.
use super::call::{Locking, ScriptRun};
use super::{convert, hook, vm};
use crate::command::Ctx;
use crate::scripting::functions::{FunctionMeta, Library};
use crate::scripting::{HeldShards, KeyHabit, Script, ScriptFlags};
use mlua::MultiValue;
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// What a run runs.
pub enum Runnable {
    Script(Arc<Script>),
    Function {
        library: Arc<Library>,
        function: Arc<FunctionMeta>,
    },
}

impl Runnable {
    fn habit(&self) -> &KeyHabit {
        match self {
            Runnable::Script(script) => &script.habit,
            Runnable::Function { function, .. } => &function.habit,
        }
    }

    /// What its error replies name: the script's SHA1 or the function's name.
    fn label(&self) -> &str {
        match self {
            Runnable::Script(script) => &script.sha,
            Runnable::Function { function, .. } => &function.name,
        }
    }

    /// Its declared flags: a function's always, a script's when it has a shebang.
    fn flags(&self) -> Option<ScriptFlags> {
        match self {
            Runnable::Script(script) => script.flags,
            Runnable::Function { function, .. } => Some(function.flags),
        }
    }
}

/// Runs `runnable` with `keys` and `argv` and writes its reply. `ro_command`: EVAL_RO, EVALSHA_RO or
/// FCALL_RO, which refuse what may write.
pub fn run(ctx: &mut Ctx, runnable: &Runnable, keys: &[&[u8]], argv: &[&[u8]], ro_command: bool) {
    let flags = runnable.flags();
    let declared_read_only = flags.is_some_and(|flags| flags.no_writes);
    if ro_command && flags.is_some() && !declared_read_only {
        return ctx
            .out
            .error("ERR Can not execute a script with write flag using *_ro command.");
    }
    let read_only = ro_command || declared_read_only;
    let allow_oom = flags.is_some_and(|flags| flags.allow_oom);
    // Redis 7 scripts (shebang) and functions that may write are refused up front when memory is over
    // its limit; legacy scripts find out at their first write.
    if flags.is_some() && !read_only && !allow_oom && ctx.server.store.over_maxmemory() {
        return ctx.out.error(crate::command::OOM);
    }
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
            runnable,
            keys,
            argv,
            locking,
            read_only,
            HeldShards::All,
        );
        return;
    }
    let mut locking = if strict {
        Locking::Strict
    } else if runnable.habit().locks_declared_only() {
        Locking::Declared
    } else {
        Locking::All
    };
    loop {
        let needed = match locking {
            Locking::All => HeldShards::All,
            _ => declared_shards(ctx, keys),
        };
        // The dispatcher's locks (the declared keys' shards) are let go before the run takes its own.
        ctx.guards = server.store.lock_keys(std::iter::empty::<&[u8]>());
        if !crate::command::dispatch::scripts_let_run(server, ctx.conn, ctx.out, &needed) {
            return;
        }
        ctx.guards = match &needed {
            HeldShards::All => server.store.lock_all(),
            HeldShards::Some(_) => server.store.lock_keys(keys.iter().copied()),
        };
        let stats = &server.scripts.stats;
        if locking != Locking::All {
            stats.declared_only_runs.fetch_add(1, Ordering::Relaxed);
        }
        match run_once(ctx, runnable, keys, argv, locking, read_only, needed) {
            Ended::Replied => return,
            Ended::StartOver => {
                stats.restarts.fetch_add(1, Ordering::Relaxed);
                locking = Locking::All;
            }
        }
    }
}

/// How a run ended for the loop in `run`.
enum Ended {
    Replied,
    /// It needed a shard another client held before its first write: run again with every shard.
    StartOver,
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
    runnable: &Runnable,
    keys: &[&[u8]],
    argv: &[&[u8]],
    locking: Locking,
    read_only: bool,
    held: HeldShards,
) -> Ended {
    let server = ctx.server;
    let scripts = &server.scripts;
    let function_call = match runnable {
        Runnable::Script(_) => Vec::new(),
        Runnable::Function { function, .. } => fcall_args(&function.name, keys, argv),
    };
    let running = scripts.begin(ctx.conn.id(), runnable.label(), function_call, held);
    let busy_after = Duration::from_millis(server.config.read().busy_reply_threshold_ms);
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
    let outcome = vm::with_vm(|vm| call_in_lua(vm, &mut run, runnable, keys, argv, busy_after));
    scripts.end(&running);
    let (restart, touched_undeclared) = (run.restart, run.touched_undeclared);
    let ctx = run.ctx;
    // SELECT inside a script changes the script's database only (Redis 7.0).
    ctx.conn.db = db_before;
    if restart {
        ctx.out.buf.truncate(reply_start);
        return Ended::StartOver;
    }
    runnable.habit().note_run(touched_undeclared);
    if running.kill.load(Ordering::Relaxed) {
        scripts.stats.killed.fetch_add(1, Ordering::Relaxed);
    }
    write_reply(ctx, runnable.label(), outcome.and_then(|outcome| outcome));
    Ended::Replied
}

/// The Lua side of a run: the compiled script or the library's function, `redis.call` and
/// `redis.acl_check_cmd` bound to this run, under the hook's watch.
fn call_in_lua(
    vm: &mut vm::Vm,
    run: &mut ScriptRun,
    runnable: &Runnable,
    keys: &[&[u8]],
    argv: &[&[u8]],
    busy_after: Duration,
) -> Result<vm::RunOutcome, String> {
    let scripts = &run.ctx.server.scripts;
    let (function, callee) = match runnable {
        Runnable::Script(script) => {
            let generation = scripts.generation.load(Ordering::Relaxed);
            let function = vm.function(&script.sha, &script.source, generation)?;
            (function, vm::Callee::Script)
        }
        Runnable::Function { library, function } => {
            let registered = |name: &str, version| scripts.functions.is_current(name, version);
            let function = vm.library_function(library, &function.name, registered)?;
            (function, vm::Callee::Function)
        }
    };
    let running = run.running.clone();
    let run = RefCell::new(run);
    let outcome = vm
        .lua
        .scope(|scope| {
            let call = scope.create_function(|lua, args: MultiValue| {
                let resp: i64 = lua.named_registry_value(vm::RESP_KEY)?;
                run.borrow_mut().call(lua, resp, args)
            })?;
            let acl_check = scope
                .create_function(|lua, args: MultiValue| run.borrow_mut().acl_check(lua, args))?;
            hook::watching_run(&running, busy_after, || {
                vm.run(&function, callee, keys, argv, call, acl_check)
            })
        })
        .map_err(|error| format!("ERR Error running script {}: {error}", runnable.label()));
    vm.report_memory(scripts);
    outcome
}

fn write_reply(ctx: &mut Ctx, label: &str, outcome: Result<vm::RunOutcome, String>) {
    let stats = &ctx.server.scripts.stats;
    match outcome {
        Ok(vm::RunOutcome {
            result: Ok(value),
            resp3,
        }) => convert::write_lua_reply(ctx.out, &value, resp3, 0),
        Ok(vm::RunOutcome {
            result: Err(error), ..
        }) => {
            stats.errors.fetch_add(1, Ordering::Relaxed);
            ctx.out.error(&script_error(label, &error));
        }
        Err(message) => {
            stats.errors.fetch_add(1, Ordering::Relaxed);
            ctx.out.error(&message);
        }
    }
}

/// FCALL's arguments as FUNCTION STATS shows the running function's command.
fn fcall_args(name: &str, keys: &[&[u8]], argv: &[&[u8]]) -> Vec<Vec<u8>> {
    let mut args = vec![
        b"fcall".to_vec(),
        name.as_bytes().to_vec(),
        keys.len().to_string().into_bytes(),
    ];
    args.extend(keys.iter().chain(argv).map(|arg| arg.to_vec()));
    args
}

/// The reply for an error a script raised: its `err` text, then where (`script: <label>, on
/// <source>:<line>.`), as Redis 7.0 words it.
fn script_error(label: &str, error: &mlua::Value) -> String {
    let mlua::Value::Table(error) = error else {
        let text = match error {
            mlua::Value::String(text) => text.to_string_lossy(),
            _ => "execution failure".to_string(),
        };
        let text: String = text.chars().take(100).collect();
        return format!("ERR Error running script {label}, {text}");
    };
    let message = match error.raw_get::<mlua::Value>("err") {
        Ok(mlua::Value::String(text)) => text.to_string_lossy(),
        _ => "ERR unknown error".to_string(),
    };
    let message = message.strip_prefix('-').unwrap_or(&message).to_string();
    let source: Option<String> = error.raw_get("source").ok();
    let line: Option<i64> = error.raw_get("line").ok();
    match (source, line) {
        (Some(source), Some(line)) => format!("{message} script: {label}, on {source}:{line}."),
        _ => message,
    }
}
