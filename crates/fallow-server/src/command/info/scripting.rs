//! Metadata of the scripting commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, keys_after_numkeys, CommandInfo, Group, Keys};

pub const SCRIPTING: Group = Group::new("scripting", "scripting", "Scripting");

/// EVAL's keys: `numkeys` of them after the script (or its SHA1).
fn eval_keys(args: &[&[u8]]) -> Vec<usize> {
    keys_after_numkeys(args, 2)
}

const EVAL_KEYS: Keys = Keys::Custom(eval_keys);

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("eval", -3, NOSCRIPT | STALE, EVAL_KEYS, SCRIPTING, "Run a Lua script"),
    info("evalsha", -3, NOSCRIPT | STALE, EVAL_KEYS, SCRIPTING, "Run a cached Lua script by its SHA1"),
    info("eval_ro", -3, READONLY | NOSCRIPT | STALE, EVAL_KEYS, SCRIPTING, "Run a read-only Lua script"),
    info("evalsha_ro", -3, READONLY | NOSCRIPT | STALE, EVAL_KEYS, SCRIPTING, "Run a cached read-only Lua script by its SHA1"),
    info("script", -2, NOSCRIPT, Keys::None, SCRIPTING, "Manage the script cache (LOAD, EXISTS, FLUSH, KILL)"),
    info("fcall", -3, NOSCRIPT | STALE, EVAL_KEYS, SCRIPTING, "Call a function"),
    info("fcall_ro", -3, READONLY | NOSCRIPT | STALE, EVAL_KEYS, SCRIPTING, "Call a read-only function"),
    info("function", -2, NOSCRIPT, Keys::None, SCRIPTING, "Manage function libraries (LOAD, LIST, STATS, DELETE, FLUSH, KILL)"),
];
