//! Metadata of the transaction commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, CommandInfo, Group, Keys};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("multi", 1, NO_MULTI | NOSCRIPT | LOADING | STALE | FAST, Keys::None, Group::TRANSACTION, "Start a transaction"),
    info("exec", 1, NO_MULTI | NOSCRIPT | LOADING | STALE, Keys::None, Group::TRANSACTION, "Execute all commands issued after MULTI"),
    info("discard", 1, NO_MULTI | NOSCRIPT | LOADING | STALE | FAST, Keys::None, Group::TRANSACTION, "Discard all commands issued after MULTI"),
    info("watch", -2, NO_MULTI | NOSCRIPT | LOADING | STALE | FAST, Keys::Range {
            first: 1,
            last: -1,
            step: 1,
        }, Group::TRANSACTION, "Watch keys to determine execution of a transaction"),
    info("unwatch", 1, NO_MULTI | NOSCRIPT | LOADING | STALE | FAST, Keys::None, Group::TRANSACTION, "Forget about all watched keys"),
];
