//! One Lua 5.1 state per worker thread, set up as Redis 7.0 sets up its own: the base, table, string and
//! math libraries, `bit`, `cjson`, `cmsgpack` and `struct`, the `redis` table, no `os`, `io`, `print`,
//! `dofile`, `loadfile`, `getfenv`, `setfenv` or `debug`; globals read-only (`bootstrap.lua`), text
//! chunks only, memory bounded, and an instruction-count hook that marks a long script busy and stops a
//! killed one.
use crate::scripting::{RunningScript, Scripts};
use mlua::chunk::ChunkMode;
use mlua::{Function, HookTriggers, Lua, LuaOptions, LuaString, MultiValue, StdLib, Table, Value};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Bytes one worker's Lua state may allocate; past it a script fails with "not enough memory".
pub const LUA_MEMORY_BYTES_MAX: usize = 256 << 20;

/// Compiled functions one state keeps (recompiling is cheap; the sources stay in `Scripts`).
const COMPILED_FUNCTIONS_MAX: usize = 1_000;

/// Instructions between two calls of the hook, as Redis counts them.
const HOOK_INSTRUCTIONS: u32 = 100_000;

const BOOTSTRAP: &str = include_str!("bootstrap.lua");

/// Globals Redis 7.0 removes or never loads.
const REMOVED_GLOBALS: &[&str] = &[
    "print", "dofile", "loadfile", "getfenv", "setfenv", "newproxy", "module", "require", "debug",
];

/// Library tables scripts see read-only.
const PROTECTED_LIBRARIES: &[&str] = &[
    "string",
    "table",
    "math",
    "coroutine",
    "redis",
    "bit",
    "cjson",
    "cmsgpack",
    "struct",
];

/// The error a killed script stops with.
#[derive(Debug)]
pub struct Killed;

impl std::fmt::Display for Killed {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        out.write_str("Script killed by user with SCRIPT KILL...")
    }
}

impl std::error::Error for Killed {}

/// What the hook watches during a run.
struct HookWatch {
    running: Arc<RunningScript>,
    busy_after: Duration,
    /// Tries left to hand the worker thread's other tasks to a new worker (see `leave_the_worker`).
    worker_handoff_tries: u8,
}

thread_local! {
    static VM: RefCell<Option<Vm>> = const { RefCell::new(None) };
    static WATCH: RefCell<Option<HookWatch>> = const { RefCell::new(None) };
}

pub struct Vm {
    pub lua: Lua,
    /// `run(f)`: xpcall with Redis's error handler.
    run: Function,
    /// The read-only environment scripts run in.
    env: Table,
    functions: HashMap<String, Function>,
    generation: u64,
}

/// Runs `body` with this thread's state, made on first use. Err only if the state cannot be built.
pub fn with_vm<R>(body: impl FnOnce(&mut Vm) -> R) -> Result<R, String> {
    VM.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(Vm::new().map_err(|error| format!("ERR cannot start Lua: {error}"))?);
        }
        Ok(body(slot.as_mut().expect("made above")))
    })
}

impl Vm {
    fn new() -> mlua::Result<Vm> {
        // SAFETY: the debug library is needed by the bootstrap's error handler only; the global is removed
        // before any script runs, and chunks are loaded as text only, so no bytecode reaches the VM.
        let lua = unsafe {
            Lua::unsafe_new_with(
                StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::DEBUG,
                LuaOptions::default(),
            )
        };
        lua.set_memory_limit(LUA_MEMORY_BYTES_MAX)?;
        super::libs::register_all(&lua)?;
        let helpers = rust_helpers(&lua)?;
        let (run, env, proxy, raising): (Function, Table, Function, Table) = lua
            .load(BOOTSTRAP)
            .set_name("=bootstrap")
            .set_mode(ChunkMode::Text)
            .call(helpers)?;
        let globals = lua.globals();
        let redis: Table = globals.raw_get("redis")?;
        for pair in raising.pairs::<String, Function>() {
            let (name, answering) = pair?;
            redis.raw_set(name, raising_function(&lua, answering)?)?;
        }
        for name in REMOVED_GLOBALS {
            globals.raw_set(*name, Value::Nil)?;
        }
        for name in PROTECTED_LIBRARIES {
            if let Value::Table(library) = globals.raw_get::<Value>(*name)? {
                globals.raw_set(*name, proxy.call::<Value>(library)?)?;
            }
        }
        globals.raw_set("_G", env.clone())?;
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_INSTRUCTIONS),
            |_, _| watch_run(),
        )?;
        Ok(Vm {
            lua,
            run,
            env,
            functions: HashMap::new(),
            generation: 0,
        })
    }

    /// The script's compiled function (compiled here on first use); Err is Redis's compile error reply.
    pub fn function(
        &mut self,
        sha: &str,
        source: &[u8],
        generation: u64,
    ) -> Result<Function, String> {
        if generation != self.generation {
            self.functions.clear();
            self.generation = generation;
        }
        if let Some(function) = self.functions.get(sha) {
            return Ok(function.clone());
        }
        let function = compile(&self.lua, &self.env, source)?;
        if self.functions.len() >= COMPILED_FUNCTIONS_MAX {
            self.functions.clear();
        }
        self.functions.insert(sha.to_string(), function.clone());
        Ok(function)
    }

    /// Runs `function` with `KEYS` and `ARGV` set, `call`/`acl_check` behind `redis.call`/`pcall` and
    /// `redis.acl_check_cmd`: Ok(result) or Err(error table or message).
    pub fn run(
        &self,
        function: &Function,
        keys: &[&[u8]],
        argv: &[&[u8]],
        call: Function,
        acl_check: Function,
    ) -> mlua::Result<RunOutcome> {
        let globals = self.lua.globals();
        globals.raw_set(
            "KEYS",
            self.lua.create_sequence_from(strings(&self.lua, keys)?)?,
        )?;
        globals.raw_set(
            "ARGV",
            self.lua.create_sequence_from(strings(&self.lua, argv)?)?,
        )?;
        self.lua.set_named_registry_value(RAW_CALL_KEY, call)?;
        self.lua
            .set_named_registry_value(RAW_ACL_CHECK_KEY, acl_check)?;
        let outcome = self.run.call::<MultiValue>(function.clone());
        self.lua
            .set_named_registry_value(RAW_CALL_KEY, Value::Nil)?;
        self.lua
            .set_named_registry_value(RAW_ACL_CHECK_KEY, Value::Nil)?;
        // Lua 5.1 has no emergency collection: garbage a script left near the limit (one that ran out of
        // memory, say) would fail the next script. Past a quarter of the limit, collect now.
        if self.lua.used_memory() > LUA_MEMORY_BYTES_MAX / 4 {
            self.lua.gc_collect()?;
        }
        let mut values = outcome?.into_iter();
        let ok = matches!(values.next(), Some(Value::Boolean(true)));
        let value = values.next().unwrap_or(Value::Nil);
        let resp3 = matches!(values.next(), Some(Value::Integer(3)));
        Ok(RunOutcome {
            result: if ok { Ok(value) } else { Err(value) },
            resp3,
        })
    }
}

/// How a run ended: its result (Err: what it raised, after the error handler) and whether it had
/// switched to RESP3 (`redis.setresp(3)`), which decides how its booleans are written.
pub struct RunOutcome {
    pub result: Result<Value, Value>,
    pub resp3: bool,
}

/// Registry keys of the current run's Rust functions and of the RESP version the script chose.
const RAW_CALL_KEY: &str = "fallow.raw_call";
const RAW_ACL_CHECK_KEY: &str = "fallow.raw_acl_check";
pub const RESP_KEY: &str = "fallow.resp";

/// A C function (as Redis's are) around `answering`, a function returning (result, failed): it returns
/// the result, or raises it when failed. Being C, it leaves the script's frame on the stack when it
/// raises; a Lua function called in tail position (`return redis.call(...)`) would replace that frame
/// and the error would lose the script's line.
fn raising_function(lua: &Lua, answering: Function) -> mlua::Result<Function> {
    // SAFETY: the closure only pushes a C closure over the one argument mlua pushed for it.
    unsafe {
        lua.exec_raw::<Function>(answering, |state| {
            mlua::ffi::lua_pushcclosure(state, raise_when_failed, 1);
        })
    }
}

/// The C function of `raising_function`; its upvalue is the answering function. No Rust value lives in
/// this frame, so raising (a longjmp) skips no destructor.
unsafe extern "C-unwind" fn raise_when_failed(state: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    use mlua::ffi;
    let nargs = ffi::lua_gettop(state);
    ffi::luaL_checkstack(state, 3, std::ptr::null());
    ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
    ffi::lua_insert(state, 1);
    ffi::lua_call(state, nargs, 2);
    if ffi::lua_toboolean(state, -1) != 0 {
        ffi::lua_pop(state, 1);
        ffi::lua_error(state);
    }
    ffi::lua_pop(state, 1);
    1
}

fn strings(lua: &Lua, items: &[&[u8]]) -> mlua::Result<Vec<LuaString>> {
    items.iter().map(|item| lua.create_string(item)).collect()
}

/// Compiles a script's body as Redis does (a function named after its chunk `@user_script`).
pub fn compile(lua: &Lua, env: &Table, source: &[u8]) -> Result<Function, String> {
    if source.first() == Some(&0x1b) {
        return Err(
            "ERR Error compiling script (new function): binary chunks are not allowed".into(),
        );
    }
    lua.load(source)
        .set_name("@user_script")
        .set_mode(ChunkMode::Text)
        .set_environment(env.clone())
        .into_function()
        .map_err(|error| {
            let message = match error {
                mlua::Error::SyntaxError { message, .. } => message,
                other => other.to_string(),
            };
            format!("ERR Error compiling script (new function): {message}")
        })
}

/// Watches `running` (busy threshold, SCRIPT KILL) while `body` runs on this thread.
pub fn watching<R>(
    running: &Arc<RunningScript>,
    busy_after: Duration,
    body: impl FnOnce() -> R,
) -> R {
    WATCH.with(|watch| {
        *watch.borrow_mut() = Some(HookWatch {
            running: running.clone(),
            busy_after,
            worker_handoff_tries: WORKER_HANDOFF_TRIES,
        })
    });
    let result = body();
    WATCH.with(|watch| *watch.borrow_mut() = None);
    result
}

/// The hook: marks the run busy past the threshold; stops it once killed (again at every later hook, so
/// a script's own pcall cannot swallow the kill).
fn watch_run() -> mlua::Result<mlua::VmState> {
    WATCH.with(|watch| {
        let mut watch = watch.borrow_mut();
        let Some(watch) = watch.as_mut() else {
            return Ok(mlua::VmState::Continue);
        };
        if watch.worker_handoff_tries > 0 {
            watch.worker_handoff_tries -= 1;
            leave_the_worker();
        }
        let running = &watch.running;
        if running.kill.load(Ordering::Relaxed) {
            return Err(mlua::Error::external(Killed));
        }
        if !running.busy.load(Ordering::Relaxed) && running.started.elapsed() >= watch.busy_after {
            running.busy.store(true, Ordering::Relaxed);
            tracing::warn!(
                script = %running.sha,
                elapsed_ms = running.started.elapsed().as_millis() as u64,
                "slow script detected: still in execution after busy-reply-threshold; commands on its shards now get BUSY"
            );
        }
        Ok(mlua::VmState::Continue)
    })
}

/// Hook calls that try to hand the worker off; once it is handed off, a try costs only its pause.
const WORKER_HANDOFF_TRIES: u8 = 4;

/// A script still running at the hook's first calls (every 100,000 instructions) hands this worker
/// thread's queued tasks to a new worker, so no connection waits behind it: `block_in_place` sends the
/// worker's core to another thread, which takes it while this one pauses briefly; this thread then
/// finishes the script outside the runtime's workers. (Were the pause empty, this thread would take the
/// core back before the other could.) Short scripts never get here and pay nothing.
fn leave_the_worker() {
    use tokio::runtime::{Handle, RuntimeFlavor};
    const PAUSE: Duration = Duration::from_micros(500);
    if let Ok(handle) = Handle::try_current() {
        if handle.runtime_flavor() == RuntimeFlavor::MultiThread {
            tokio::task::block_in_place(|| std::thread::sleep(PAUSE));
        }
    }
}

/// Functions the bootstrap builds `redis` and `math` on: SHA1, logging and Redis's random numbers.
fn rust_helpers(lua: &Lua) -> mlua::Result<Table> {
    let helpers = lua.create_table()?;
    helpers.raw_set(
        "sha1hex",
        lua.create_function(|_, text: LuaString| Ok(Scripts::sha1_hex(&text.as_bytes())))?,
    )?;
    helpers.raw_set(
        "log",
        lua.create_function(|_, (level, text): (u8, LuaString)| {
            let text = String::from_utf8_lossy(&text.as_bytes()).into_owned();
            match level {
                0 => tracing::debug!(target: "fallow::lua", "{text}"),
                1 | 2 => tracing::info!(target: "fallow::lua", "{text}"),
                _ => tracing::warn!(target: "fallow::lua", "{text}"),
            }
            Ok(())
        })?,
    )?;
    helpers.raw_set("version", crate::command::reply::REDIS_COMPATIBLE_VERSION)?;
    helpers.raw_set(
        "version_num",
        redis_version_num(crate::command::reply::REDIS_COMPATIBLE_VERSION),
    )?;
    helpers.raw_set(
        "rand_next",
        lua.create_function(|_, ()| Ok(crate::scripting::next_random()))?,
    )?;
    helpers.raw_set(
        "rand_seed",
        lua.create_function(|_, seed: i32| {
            crate::scripting::seed_random(seed);
            Ok(())
        })?,
    )?;
    Ok(helpers)
}

/// `REDIS_VERSION_NUM`: major, minor and patch in one number (0x00MMmmpp).
fn redis_version_num(version: &str) -> i64 {
    version.split('.').take(3).fold(0, |number, part| {
        (number << 8) | part.parse::<i64>().unwrap_or(0)
    })
}
