//! Metadata of the server commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, is, CommandInfo, Group, Keys};

const ADMIN_FLAGS: u32 = ADMIN | NOSCRIPT | LOADING | STALE;

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("info", -1, LOADING | STALE, Keys::None, Group::SERVER, "Get information and statistics about the server"),
    info("config", -2, ADMIN_FLAGS, Keys::None, Group::SERVER, "A container for server configuration commands"),
    info("command", -1, LOADING | STALE, Keys::None, Group::SERVER, "Get array of command details"),
    info("time", 1, LOADING | STALE | FAST, Keys::None, Group::SERVER, "Return the current server time"),
    info("lastsave", 1, LOADING | STALE | FAST, Keys::None, Group::SERVER, "The Unix time the server started (fallow never saves to disk)"),
    info("save", 1, ADMIN | NOSCRIPT, Keys::None, Group::SERVER, "Refused (-ERR fallow keeps no snapshots): data lives in memory only"),
    info("bgsave", -1, ADMIN | NOSCRIPT, Keys::None, Group::SERVER, "Refused (-ERR fallow keeps no snapshots): data lives in memory only"),
    info("bgrewriteaof", 1, ADMIN | NOSCRIPT, Keys::None, Group::SERVER, "Refused (-ERR fallow keeps no snapshots): there is no append-only file"),
    info("memory", -2, READONLY, Keys::Custom(memory_keys), Group::SERVER, "A container for memory diagnostics commands"),
    info("latency", -2, ADMIN_FLAGS, Keys::None, Group::SERVER, "A container for latency diagnostics commands"),
    info("debug", -2, ADMIN_FLAGS, Keys::Custom(debug_keys), Group::SERVER, "A container for debugging commands"),
    info("slowlog", -2, ADMIN | LOADING | STALE, Keys::None, Group::SERVER, "A container for slow log commands"),
    info("shutdown", -1, ADMIN_FLAGS | NO_MULTI, Keys::None, Group::SERVER, "Shut down the server; nothing is saved (SAVE/NOSAVE are accepted and ignored)"),
    info("role", 1, NOSCRIPT | LOADING | STALE | FAST, Keys::None, Group::SERVER, "Return the role of the instance in the context of replication"),
    info("wait", 3, NOSCRIPT, Keys::None, Group::KEYSPACE, "Wait for replicas to acknowledge writes (fallow has none: 0)"),
    info("replicaof", 3, ADMIN | NOSCRIPT | STALE, Keys::None, Group::SERVER, "REPLICAOF NO ONE (fallow has no replication)"),
    info("slaveof", 3, ADMIN | NOSCRIPT | STALE, Keys::None, Group::SERVER, "Old name of REPLICAOF"),
    info("lolwut", -1, READONLY | FAST, Keys::None, Group::SERVER, "Computer art (version 5: Schotter, 6: a skyline) and the version line"),
    info("monitor", 1, ADMIN_FLAGS, Keys::None, Group::SERVER, "Stream every command run, in Redis's line format"),
    info("module", -2, ADMIN_FLAGS, Keys::None, Group::SERVER, "Redis modules: none can be loaded (fallow has no module API); LIST is empty"),
    info("cluster", -2, NOSCRIPT | LOADING | STALE, Keys::None, Group::SERVER, "Refused: fallow runs no cluster (Redis's reply with cluster support disabled)"),
    info("readonly", 1, FAST | LOADING | STALE, Keys::None, Group::SERVER, "Refused: fallow runs no cluster (Redis's reply with cluster support disabled)"),
    info("readwrite", 1, FAST | LOADING | STALE, Keys::None, Group::SERVER, "Refused: fallow runs no cluster (Redis's reply with cluster support disabled)"),
    info("asking", 1, FAST, Keys::None, Group::SERVER, "Refused: fallow runs no cluster (Redis's reply with cluster support disabled)"),
];

pub fn debug_keys(args: &[&[u8]]) -> Vec<usize> {
    if args.len() == 3 && (is(args[1], "object") || is(args[1], "listpack")) {
        vec![2]
    } else {
        Vec::new()
    }
}

pub fn memory_keys(args: &[&[u8]]) -> Vec<usize> {
    if args.len() >= 3 && is(args[1], "usage") {
        vec![2]
    } else {
        Vec::new()
    }
}
