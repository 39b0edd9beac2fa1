//! MODULE: fallow has no Redis module API, so no module is ever loaded. LIST answers the empty list and
//! LOAD/LOADEX answer Redis's own failure reply (what Redis says when a library does not load), with the
//! reason in fallow's log; UNLOAD finds no module. The `enable-module-command` switch gates the command
//! in dispatch, as in Redis 7.0.
use super::super::reply::{help_reply, subcommand_arity_error};
use super::super::{subcommand_error, Ctx};

pub(super) fn module(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"list", 2) => ctx.out.array_len(0),
        (b"load" | b"loadex", 3..) => {
            tracing::warn!(
                path = %String::from_utf8_lossy(args[2]),
                "MODULE {}: fallow cannot load Redis modules (it has no module API)",
                String::from_utf8_lossy(&sub).to_uppercase()
            );
            ctx.out
                .error("ERR Error loading the extension. Please check the server logs.")
        }
        (b"unload", 3) => ctx
            .out
            .error("ERR Error unloading module: no such module with that name"),
        (b"help", 2) => help_reply(ctx, "MODULE", HELP),
        (b"list" | b"load" | b"loadex" | b"unload" | b"help", _) => {
            subcommand_arity_error(ctx, "module", &sub)
        }
        _ => subcommand_error(ctx, args),
    }
}

const HELP: &[&str] = &[
    "LIST",
    "    Return a list of loaded modules.",
    "LOAD <path> [<arg> ...]",
    "    Load a module library from <path>, passing to it any optional arguments.",
    "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
    "    Load a module library from <path>, while passing it module configurations and optional arguments.",
    "UNLOAD <name>",
    "    Unload a module.",
];
