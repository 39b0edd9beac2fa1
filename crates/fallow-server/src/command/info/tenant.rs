//! Metadata of the tenant commands (see `super`): rows of the command table, without handlers.
use super::flags::*;
use super::{info, CommandInfo, Group, Keys};

// One row per command, as a table: name, arity, flags, key positions, group, summary.
#[rustfmt::skip]
pub const COMMANDS: &[CommandInfo] = &[
    info("tenant", -2, ADMIN | NOSCRIPT | LOADING | STALE, Keys::None, Group::SERVER, "Define and inspect tenants (SET, GET, LIST): weight, kind, keyspace, tier 2, usage and fairness"),
];
