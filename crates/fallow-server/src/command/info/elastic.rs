//! Metadata of the elastic commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, CommandInfo, Group, Keys};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    // NO_MULTI: a reclaim takes shard locks itself, so it must never run under EXEC's locks.
    info("elastic", -2, ADMIN | NOSCRIPT | LOADING | STALE | NO_MULTI, Keys::None, Group::SERVER, "Elastic memory pool: STATUS, RECLAIM <bytes> [CAREFUL|FAST|AUTO], HELP"),
];
