//! Redis 7 functions: FUNCTION (LOAD, LIST, STATS, DELETE, FLUSH, KILL, DUMP, RESTORE, HELP) and FCALL,
//! FCALL_RO. The libraries are `crate::scripting::functions`; a library's code runs in this worker's Lua
//! state at FUNCTION LOAD (to find its functions) and in any other worker's at its first FCALL there.
//! Every change is saved to `--dir` as a FUNCTION DUMP payload, which `restore_saved` loads at start.
use super::run::{self, Runnable};
use super::{split_keys, vm};
use crate::command::reply::subcommand_arity_error;
use crate::command::{is, subcommand_error, Ctx};
use crate::scripting::functions::Registered;
use crate::server::Server;

pub fn fcall(ctx: &mut Ctx, args: &[&[u8]]) {
    call_function(ctx, args, false)
}

pub fn fcall_ro(ctx: &mut Ctx, args: &[&[u8]]) {
    call_function(ctx, args, true)
}

fn call_function(ctx: &mut Ctx, args: &[&[u8]], ro_command: bool) {
    let Some((keys, argv)) = split_keys(ctx, args) else {
        return;
    };
    let name = String::from_utf8_lossy(args[1]);
    let Some((library, function)) = ctx.server.scripts.functions.function(&name) else {
        return ctx.out.error("ERR Function not found");
    };
    let runnable = Runnable::Function { library, function };
    run::run(ctx, &runnable, &keys, &argv, ro_command);
}

const FUNCTION_HELP: &[&str] = &[
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
    "HELP",
    "    Prints this help.",
];

pub fn function(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    let arity_ok = match sub.as_slice() {
        b"help" | b"kill" | b"stats" | b"dump" => args.len() == 2,
        b"flush" => args.len() <= 3,
        b"delete" => args.len() == 3,
        b"restore" if args.len() > 4 => return ctx.out.error(
            "ERR unknown subcommand or wrong number of arguments for 'RESTORE'. Try FUNCTION HELP.",
        ),
        b"restore" => args.len() >= 3,
        b"load" => args.len() == 3 || args.len() == 4,
        b"list" => true,
        _ => return subcommand_error(ctx, args),
    };
    if !arity_ok {
        return subcommand_arity_error(ctx, "function", &sub);
    }
    match sub.as_slice() {
        b"help" => {
            ctx.out.array_len(FUNCTION_HELP.len());
            FUNCTION_HELP.iter().for_each(|line| ctx.out.simple(line));
        }
        b"load" => load(ctx, args),
        b"list" => list(ctx, &args[2..]),
        b"stats" => stats(ctx),
        b"delete" => delete(ctx, args[2]),
        b"flush" => flush(ctx, args),
        b"kill" => kill(ctx),
        b"dump" => {
            let payload = libraries_payload(ctx.server);
            ctx.out.bulk(&payload)
        }
        _ => restore(ctx, args[2], args.get(3).copied()),
    }
}

/// Every library's code as a FUNCTION DUMP payload.
fn libraries_payload(server: &Server) -> Vec<u8> {
    let libraries = server.scripts.functions.list();
    let codes: Vec<&[u8]> = libraries.iter().map(|library| &*library.code).collect();
    fallow_store::rdb::encode_function_dump(&codes)
}

/// Saves the libraries to `--dir` after a change (servers without one keep them in memory only).
fn functions_changed(server: &Server) {
    if let Some(durability) = server.durability.get() {
        durability.save_functions(&libraries_payload(server));
    }
}

/// Loads the libraries saved in `--dir` (at start, before listeners open). A file that does not load
/// (damaged, or a library that no longer loads) is renamed aside and reported; the server starts without
/// its libraries rather than not at all.
pub fn restore_saved(server: &Server) {
    let Some(durability) = server.durability.get() else {
        return;
    };
    let Some(payload) = durability.saved_functions() else {
        return;
    };
    let restored = fallow_store::rdb::decode_function_dump(&payload)
        .map_err(|error| error.redis_message().to_string())
        .and_then(|codes| load_all(&codes).and_then(|loaded| add_all(server, loaded, false)));
    match restored {
        Ok(()) => {
            let (libraries, functions) = server.scripts.functions.counts();
            tracing::info!(libraries, functions, "function libraries restored");
        }
        Err(error) => {
            server.scripts.functions.flush();
            let aside = durability.set_functions_aside();
            tracing::error!(%error, aside = %aside.display(), "the saved function libraries do not load: set aside, starting without them");
        }
    }
}

/// FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE]: every library or none.
fn restore(ctx: &mut Ctx, payload: &[u8], policy: Option<&[u8]>) {
    let policy = policy.unwrap_or(b"append");
    let flush = is(policy, "flush");
    if !flush && !is(policy, "append") && !is(policy, "replace") {
        return ctx.out.error(
            "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
        );
    }
    let codes = match fallow_store::rdb::decode_function_dump(payload) {
        Ok(codes) => codes,
        Err(error) => return ctx.out.error(error.redis_message()),
    };
    let result = load_all(&codes).and_then(|loaded| {
        let server = ctx.server;
        if flush {
            server.scripts.functions.flush();
        }
        add_all(server, loaded, is(policy, "replace"))
    });
    match result {
        Ok(()) => {
            functions_changed(ctx.server);
            ctx.out.ok()
        }
        Err(error) => ctx.out.error(&error),
    }
}

/// A library's name, code and functions, found by running its code.
type LoadedCode<'c> = (String, &'c [u8], Vec<Registered>);

/// Runs every library's code (in this worker's Lua state) to find its functions.
fn load_all(codes: &[Vec<u8>]) -> Result<Vec<LoadedCode<'_>>, String> {
    codes
        .iter()
        .map(|code| {
            let name = crate::scripting::shebang::library_name(code)?;
            let functions =
                vm::with_vm(|vm| vm.load_library(code).map(|loaded| loaded.functions))??;
            Ok((name, code.as_slice(), functions))
        })
        .collect()
}

/// Registers loaded libraries, all or none: every collision is checked before any is added.
fn add_all(server: &Server, loaded: Vec<LoadedCode<'_>>, replace: bool) -> Result<(), String> {
    let libraries = &server.scripts.functions;
    let batch: Vec<(&str, &[Registered])> = loaded
        .iter()
        .map(|(name, _, functions)| (name.as_str(), functions.as_slice()))
        .collect();
    libraries.check_batch(&batch, replace)?;
    for (name, code, functions) in loaded {
        libraries.add(&name, code, functions, replace)?;
    }
    Ok(())
}

/// FUNCTION LOAD [REPLACE] code: runs the code to find its functions, then registers the library.
fn load(ctx: &mut Ctx, args: &[&[u8]]) {
    let replace = args.len() == 4;
    if replace && !is(args[2], "replace") {
        let option = String::from_utf8_lossy(args[2]);
        return ctx
            .out
            .error(&format!("ERR Unknown option given: {option}"));
    }
    let code = args[args.len() - 1];
    match load_library(ctx, code, replace) {
        Ok(name) => ctx.out.bulk(name.as_bytes()),
        Err(error) => ctx.out.error(&error),
    }
}

fn load_library(ctx: &mut Ctx, code: &[u8], replace: bool) -> Result<String, String> {
    let name = crate::scripting::shebang::library_name(code)?;
    let libraries = &ctx.server.scripts.functions;
    if !replace && libraries.list().iter().any(|library| library.name == name) {
        return Err(format!("ERR Library '{name}' already exists"));
    }
    vm::with_vm(|vm| -> Result<(), String> {
        let mut loaded = vm.load_library(code)?;
        let functions = std::mem::take(&mut loaded.functions);
        let library = libraries.add(&name, code, functions, replace)?;
        vm.keep_library(&name, library.version, loaded);
        vm.report_memory(&ctx.server.scripts);
        Ok(())
    })??;
    functions_changed(ctx.server);
    Ok(name)
}

/// FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE].
fn list(ctx: &mut Ctx, options: &[&[u8]]) {
    let mut pattern: Option<&[u8]> = None;
    let mut with_code = false;
    let mut rest = options.iter();
    while let Some(option) = rest.next() {
        if is(option, "withcode") && !with_code {
            with_code = true;
        } else if is(option, "libraryname") && pattern.is_none() {
            let Some(value) = rest.next() else {
                return ctx.out.error("ERR library name argument was not given");
            };
            pattern = Some(value);
        } else {
            let option = String::from_utf8_lossy(option);
            return ctx.out.error(&format!("ERR Unknown argument {option}"));
        }
    }
    let libraries: Vec<_> = ctx
        .server
        .scripts
        .functions
        .list()
        .into_iter()
        .filter(|library| {
            pattern
                .is_none_or(|pattern| fallow_store::glob::matches(pattern, library.name.as_bytes()))
        })
        .collect();
    let out = &mut *ctx.out;
    out.array_len(libraries.len());
    for library in &libraries {
        out.map_len(3 + with_code as usize);
        out.bulk(b"library_name");
        out.bulk(library.name.as_bytes());
        out.bulk(b"engine");
        out.bulk(b"LUA");
        out.bulk(b"functions");
        out.array_len(library.functions.len());
        for function in &library.functions {
            out.map_len(3);
            out.bulk(b"name");
            out.bulk(function.name.as_bytes());
            out.bulk(b"description");
            match &function.description {
                Some(description) => out.bulk(description.as_bytes()),
                None => out.nil(),
            }
            out.bulk(b"flags");
            let names = function.flags.names();
            out.set_len(names.len());
            names.iter().for_each(|name| out.simple(name));
        }
        if with_code {
            out.bulk(b"library_code");
            out.bulk(&library.code);
        }
    }
}

/// FUNCTION STATS: the running function, and the engine's counts.
fn stats(ctx: &mut Ctx) {
    let scripts = &ctx.server.scripts;
    let running = scripts
        .running_runs()
        .into_iter()
        .find(|run| !run.function_call.is_empty());
    let (libraries, functions) = scripts.functions.counts();
    let out = &mut *ctx.out;
    out.map_len(2);
    out.bulk(b"running_script");
    match running {
        Some(run) => {
            out.map_len(3);
            out.bulk(b"name");
            out.bulk(run.name.as_bytes());
            out.bulk(b"command");
            out.bulks(run.function_call.iter().map(Vec::as_slice));
            out.bulk(b"duration_ms");
            out.int(run.started.elapsed().as_millis() as i64);
        }
        None => out.nil(),
    }
    out.bulk(b"engines");
    out.map_len(1);
    out.bulk(b"LUA");
    out.map_len(2);
    out.bulk(b"libraries_count");
    out.int(libraries as i64);
    out.bulk(b"functions_count");
    out.int(functions as i64);
}

fn delete(ctx: &mut Ctx, name: &[u8]) {
    let name = String::from_utf8_lossy(name);
    if ctx.server.scripts.functions.delete(&name) {
        functions_changed(ctx.server);
        ctx.out.ok();
    } else {
        ctx.out.error("ERR Library not found");
    }
}

fn flush(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len() == 3 && !is(args[2], "sync") && !is(args[2], "async") {
        return ctx
            .out
            .error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option");
    }
    ctx.server.scripts.functions.flush();
    functions_changed(ctx.server);
    ctx.out.ok();
}

/// FUNCTION KILL: stops the running functions that have not written (SCRIPT KILL stops scripts).
fn kill(ctx: &mut Ctx) {
    let runs: Vec<_> = ctx
        .server
        .scripts
        .running_runs()
        .into_iter()
        .filter(|run| !run.function_call.is_empty())
        .collect();
    super::kill_runs(ctx, &runs);
}
