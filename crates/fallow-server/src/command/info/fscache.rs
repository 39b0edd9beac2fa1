//! Metadata of the file-cache command (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, CommandInfo, Group, Keys};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
// Not ADMIN: the fs reports as a plain user (`+@read +@write +@connection +fscache`); the command
// touches no key, only the reports of mounts. FAST: a report is at most 64 short fields.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("fscache", -2, NOSCRIPT | LOADING | STALE | FAST, Keys::None, Group::SERVER, "File caches' counters (fallow fs): REPORT <mount> <field> <value>..., LIST, GET <mount>, HELP"),
];
