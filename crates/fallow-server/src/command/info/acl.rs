//! Metadata of the acl commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, CommandInfo, Group, Keys};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("acl", -2, ADMIN | NOSCRIPT | LOADING | STALE, Keys::None, Group::SERVER, "Users and permissions: SETUSER DELUSER LIST USERS WHOAMI GETUSER CAT GENPASS DRYRUN, LOG (denied auths, commands, keys, channels), LOAD and SAVE (aclfile)"),
];
