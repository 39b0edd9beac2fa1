//! Metadata of the connection commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, CommandInfo, Group, Keys};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("ping", -1, FAST | STALE | SUBSCRIBE_CONTEXT, Keys::None, Group::CONNECTION, "Ping the server"),
    info("echo", 2, FAST, Keys::None, Group::CONNECTION, "Echo the argument"),
    info("select", 2, FAST | LOADING | STALE, Keys::None, Group::CONNECTION, "Select the logical database"),
    info("quit", -1, NO_AUTH | FAST | LOADING | STALE | NO_MULTI | SUBSCRIBE_CONTEXT | NOSCRIPT, Keys::None, Group::CONNECTION, "Close the connection"),
    info("reset", 1, NO_AUTH | FAST | LOADING | STALE | NO_MULTI | SUBSCRIBE_CONTEXT | NOSCRIPT, Keys::None, Group::CONNECTION, "Reset the connection"),
    info("auth", -2, NO_AUTH | FAST | LOADING | STALE | NOSCRIPT, Keys::None, Group::CONNECTION, "Authenticate"),
    info("hello", -1, NO_AUTH | FAST | LOADING | STALE | NOSCRIPT, Keys::None, Group::CONNECTION, "Handshake: protocol version, authentication, name"),
    info("shm.open", -1, NO_AUTH | NO_MULTI | NOSCRIPT | LOADING | STALE, Keys::None, Group::CONNECTION, "Move this Unix-socket connection onto a shared-memory channel: [PROTOCOL resp|memcache] [PORT p] [RING-BYTES n]; the reply names the layout and carries the memfd and doorbells (SCM_RIGHTS)"),
    info("client", -2, ADMIN | LOADING | STALE | NOSCRIPT, Keys::None, Group::CONNECTION, "Inspect and control client connections"),
];
