//! CLUSTER, READONLY, READWRITE and ASKING on a standalone server: fallow runs no cluster, so each answers
//! what a Redis 7.0 started without `cluster-enabled` answers (clients probe with them to learn the mode).
//! A CLUSTER subcommand's arity is checked first, from Redis's command table, as Redis checks it.
use super::super::info::redis::{lookup_call, Entry};
use super::super::reply::subcommand_arity_error;
use super::super::{subcommand_error, Ctx};

const CLUSTER_DISABLED: &str = "ERR This instance has cluster support disabled";

pub(super) fn cluster(ctx: &mut Ctx, args: &[&[u8]]) {
    match lookup_call(args) {
        Some(Entry::Redis(sub)) if sub.name.contains('|') => {
            if sub.arity_ok(args.len()) {
                ctx.out.error(CLUSTER_DISABLED)
            } else {
                subcommand_arity_error(ctx, "cluster", args[1])
            }
        }
        _ => subcommand_error(ctx, args),
    }
}

/// READONLY, READWRITE and ASKING: cluster-mode connection states.
pub(super) fn cluster_state(ctx: &mut Ctx, _args: &[&[u8]]) {
    ctx.out.error(CLUSTER_DISABLED)
}
