//! One Lua 5.1 state per worker thread, set up as Redis 7.0 sets up its own: the base, table, string and
//! math libraries, `bit`, `cjson`, `cmsgpack` and `struct`, the `redis` table, no `os`, `io`, `print`,
//! `dofile`, `loadfile`, `getfenv`, `setfenv` or `debug`; globals read-only (`bootstrap.lua`), text
//! chunks only, memory bounded, and an instruction-count hook that marks a long script busy and stops a
//! killed one.
use super::hook;
use crate::scripting::functions::{Library, Registered};
use crate::scripting::{ScriptFlags, Scripts};
use mlua::chunk::ChunkMode;
use mlua::{Function, HookTriggers, Lua, LuaOptions, LuaString, MultiValue, StdLib, Table, Value};
use std::cell::RefCell;
use std::collections::HashMap;

/// Bytes one worker's Lua state may allocate; past it a script fails with "not enough memory".
pub const LUA_MEMORY_BYTES_MAX: usize = 256 << 20;

/// Compiled functions one state keeps (recompiling is cheap; the sources stay in `Scripts`).
const COMPILED_FUNCTIONS_MAX: usize = 1_000;

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

thread_local! {
    static VM: RefCell<Option<Vm>> = const { RefCell::new(None) };
}

pub struct Vm {
    pub lua: Lua,
    /// `run(f, ...)`: xpcall with Redis's error handler.
    run: Function,
    /// The read-only environment scripts run in.
    env: Table,
    /// `load_library(f, library_redis)`: runs a library's code with the library API.
    load_library: Function,
    /// The `redis` table of the library API.
    library_redis: Table,
    /// Compiled scripts by SHA1.
    functions: HashMap<String, Function>,
    generation: u64,
    /// Libraries loaded in this state: their version and callbacks by function name.
    libraries: HashMap<String, (u64, HashMap<String, Function>)>,
    /// This state's memory as last reported to `Scripts` (INFO's `used_memory_lua`).
    reported_memory_bytes: usize,
}

/// What FUNCTION LOAD found in a library's code.
pub struct LoadedLibrary {
    pub functions: Vec<Registered>,
    callbacks: HashMap<String, Function>,
}

/// What a run calls: a script (`KEYS`, `ARGV` as globals) or a function (keys and args as arguments).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Callee {
    Script,
    Function,
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
        let (run, env, proxy, raising, load_library, make_library_redis): Bootstrapped = lua
            .load(BOOTSTRAP)
            .set_name("=bootstrap")
            .set_mode(ChunkMode::Text)
            .call(helpers)?;
        let globals = lua.globals();
        let redis: Table = globals.raw_get("redis")?;
        let mut register_function = None;
        for pair in raising.pairs::<String, Function>() {
            let (name, answering) = pair?;
            let raising = raising_function(&lua, answering)?;
            match name.as_str() {
                "register_function" => register_function = Some(raising),
                _ => redis.raw_set(name, raising)?,
            }
        }
        let library_redis: Table = make_library_redis.call(register_function)?;
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
            HookTriggers::new().every_nth_instruction(hook::HOOK_INSTRUCTIONS),
            |_, _| hook::on_hook(),
        )?;
        Ok(Vm {
            lua,
            run,
            env,
            load_library,
            library_redis,
            functions: HashMap::new(),
            generation: 0,
            libraries: HashMap::new(),
            reported_memory_bytes: 0,
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
        let function = compile(&self.lua, &self.env, source, SCRIPT_CHUNK)
            .map_err(|message| format!("ERR Error compiling script (new function): {message}"))?;
        if self.functions.len() >= COMPILED_FUNCTIONS_MAX {
            self.functions.clear();
        }
        self.functions.insert(sha.to_string(), function.clone());
        Ok(function)
    }

    /// Reports this state's memory to `scripts` (the change since the last report).
    pub fn report_memory(&mut self, scripts: &Scripts) {
        let now = self.lua.used_memory();
        scripts.note_lua_memory(self.reported_memory_bytes, now);
        self.reported_memory_bytes = now;
    }

    /// Loads a library's code (FUNCTION LOAD, or a worker's first FCALL of it): the functions it
    /// registered. Err is Redis's error reply.
    pub fn load_library(&mut self, code: &[u8]) -> Result<LoadedLibrary, String> {
        let chunk = compile(&self.lua, &self.env, code, FUNCTION_CHUNK)
            .map_err(|message| format!("ERR Error compiling function: {message}"))?;
        let loaded: (bool, Value, Table) =
            hook::watching_load(|| self.load_library.call((chunk, self.library_redis.clone())))
                .map_err(|error| format!("ERR Error registering functions: {error}"))?;
        let (ok, error, found) = loaded;
        if !ok {
            let message = error_message(&error);
            return Err(format!("ERR Error registering functions: {message}"));
        }
        let mut loaded = LoadedLibrary {
            functions: Vec::new(),
            callbacks: HashMap::new(),
        };
        for entry in found.sequence_values::<Table>() {
            let (registered, callback) = entry
                .and_then(|entry| registered_function(&entry))
                .map_err(|error| format!("ERR {error}"))?;
            loaded.callbacks.insert(registered.name.clone(), callback);
            loaded.functions.push(registered);
        }
        if loaded.functions.is_empty() {
            return Err("ERR No functions registered".into());
        }
        Ok(loaded)
    }

    /// Keeps a loaded library's callbacks in this state under `version`.
    pub fn keep_library(&mut self, name: &str, version: u64, loaded: LoadedLibrary) {
        self.libraries
            .insert(name.to_string(), (version, loaded.callbacks));
    }

    /// Function `name` of `library`, loading the library in this state first if it has not got this
    /// version of it (libraries no longer registered are forgotten then too).
    pub fn library_function(
        &mut self,
        library: &Library,
        name: &str,
        registered: impl Fn(&str, u64) -> bool,
    ) -> Result<Function, String> {
        let current = matches!(self.libraries.get(&library.name),
            Some((version, _)) if *version == library.version);
        if !current {
            self.libraries
                .retain(|name, (version, _)| registered(name, *version));
            let loaded = self.load_library(&library.code)?;
            self.keep_library(&library.name, library.version, loaded);
        }
        let (_, callbacks) = &self.libraries[&library.name];
        callbacks
            .get(name)
            .cloned()
            .ok_or_else(|| "ERR Function not found".to_string())
    }

    /// Runs `function` (see `Callee`) with `call`/`acl_check` behind `redis.call`/`pcall` and
    /// `redis.acl_check_cmd`: Ok(result) or Err(error table or message).
    pub fn run(
        &self,
        function: &Function,
        callee: Callee,
        keys: &[&[u8]],
        argv: &[&[u8]],
        call: Function,
        acl_check: Function,
    ) -> mlua::Result<RunOutcome> {
        let globals = self.lua.globals();
        let keys = self.lua.create_sequence_from(strings(&self.lua, keys)?)?;
        let argv = self.lua.create_sequence_from(strings(&self.lua, argv)?)?;
        self.lua.set_named_registry_value(RAW_CALL_KEY, call)?;
        self.lua
            .set_named_registry_value(RAW_ACL_CHECK_KEY, acl_check)?;
        let outcome = match callee {
            Callee::Function => self.run.call::<MultiValue>((function.clone(), keys, argv)),
            Callee::Script => {
                globals.raw_set("KEYS", keys)?;
                globals.raw_set("ARGV", argv)?;
                let outcome = self.run.call::<MultiValue>(function.clone());
                // Functions see no KEYS or ARGV globals: none is left for them to find.
                globals.raw_set("KEYS", Value::Nil)?;
                globals.raw_set("ARGV", Value::Nil)?;
                outcome
            }
        };
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

/// Chunk names: Lua's messages and the error replies name them.
const SCRIPT_CHUNK: &str = "@user_script";
const FUNCTION_CHUNK: &str = "@user_function";

/// The bootstrap's results: run, env, proxy, raising, load_library, library_redis.
type Bootstrapped = (Function, Table, Function, Table, Function, Function);

/// Compiles a script's body or a library's code as Redis does (named after its chunk, a shebang line
/// read as a comment); Err is Lua's message.
fn compile(lua: &Lua, env: &Table, source: &[u8], chunk_name: &str) -> Result<Function, String> {
    if source.first() == Some(&0x1b) {
        return Err("binary chunks are not allowed".into());
    }
    lua.load(&*crate::scripting::shebang::lua_source(source))
        .set_name(chunk_name)
        .set_mode(ChunkMode::Text)
        .set_environment(env.clone())
        .into_function()
        .map_err(|error| match error {
            mlua::Error::SyntaxError { message, .. } => message,
            other => other.to_string(),
        })
}

/// The text of an error the error handler built (`{err=...}`), or of any other error value.
fn error_message(error: &Value) -> String {
    match error {
        Value::Table(table) => table
            .raw_get::<String>("err")
            .unwrap_or_else(|_| "ERR unknown error".into()),
        Value::String(text) => text.to_string_lossy(),
        other => format!("{other:?}"),
    }
}

/// One entry of the bootstrap's registration list.
fn registered_function(entry: &Table) -> mlua::Result<(Registered, Function)> {
    let mut flags = ScriptFlags::default();
    for flag in entry.raw_get::<Table>("flags")?.sequence_values::<String>() {
        flags.set(&flag?);
    }
    let registered = Registered {
        name: entry.raw_get("name")?,
        description: entry.raw_get("description")?,
        flags,
    };
    Ok((registered, entry.raw_get("callback")?))
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
