//! Walking every shard from a command (INFO, CONFIG RESETSTAT, MEMORY, TENANT GET): through the locks
//! the command holds when it holds them all (inside EXEC), otherwise one shard lock at a time. A leaf
//! beside the families: any of them may use it without depending on another family.
use super::Ctx;
use crate::tenants;
use fallow_store::{Shard, TenantSnapshot};

/// Visits every shard: through the locks the command holds when it holds them all (inside EXEC),
/// otherwise locking one shard at a time, so INFO never stalls the whole store.
pub fn for_each_shard(ctx: &mut Ctx, mut visit: impl FnMut(&mut Shard)) {
    if ctx.guards.holds_all() {
        ctx.guards.iter_mut().for_each(visit);
    } else {
        let store = &ctx.server.store;
        for index in 0..store.shard_count() {
            visit(&mut store.lock(index));
        }
    }
}

/// Every tenant with counters summed over the shards, through the command's locks inside EXEC (TENANT
/// GET, INFO tenants).
pub fn tenant_snapshots(ctx: &mut Ctx) -> Vec<TenantSnapshot> {
    let server = ctx.server;
    tenants::snapshots(&server.store, |visit| for_each_shard(ctx, visit))
}
