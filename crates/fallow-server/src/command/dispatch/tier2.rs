//! Reading a command's tier-2 values ahead, so a worker never blocks on the device: before a command
//! runs, the keys it names are checked for stubs (values on tier 2 only); if there are any, the connection
//! stops its batch there, the records are read on a bounded pool of blocking threads and handed to the
//! store (a stub's first read is kept for the command, which serves a GET from it without promoting; a
//! second read promotes), and the command then runs. Keys a command cannot name in advance (inside EXEC,
//! scans, memcached writes) and a request's records beyond `STUB_FETCH_BYTES_MAX` are read on the worker
//! instead, counted as `tier2_sync_reads`.
use super::{key_positions, lookup};
use crate::connection::{ConnState, Tier2Fault as Fault};
use crate::server::Server;
use fallow_store::tier2::Tier2;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Tier-2 reads in flight at once over all connections (the I/O pool's bound).
const READS_IN_FLIGHT_MAX: usize = 64;

static READ_PERMITS: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(READS_IN_FLIGHT_MAX);

/// The stubs among the keys `args` names (none while the store has no stubs, the common case, at the
/// cost of one atomic load).
pub fn faults(server: &Server, conn: &ConnState, args: &[&[u8]]) -> Vec<Fault> {
    if !any_stubs(server) || !conn.authenticated || conn.multi.is_some() {
        return Vec::new();
    }
    let Some((_, spec)) = lookup(args[0]) else {
        return Vec::new();
    };
    if !spec.info.arity_ok(args.len()) {
        return Vec::new();
    }
    let keyspace = conn.tenant.address(conn.db);
    let keys = key_positions(spec.info, args)
        .into_iter()
        .map(|position| args[position]);
    stub_faults(server, keyspace, keys, conn.now_ms)
}

/// Whether the store holds any stub (one atomic load): when not, there is nothing to read ahead.
pub fn any_stubs(server: &Server) -> bool {
    server.store.memory.stubs.load(Ordering::Relaxed) != 0
}

/// The stubs among `keys` in `keyspace`, each key's shard locked briefly (shared with the memcached
/// connections, which name their requests' keys themselves).
pub fn stub_faults<'k>(
    server: &Server,
    keyspace: usize,
    keys: impl IntoIterator<Item = &'k [u8]>,
    now_ms: u64,
) -> Vec<Fault> {
    let store = &server.store;
    let mut faults = Vec::new();
    // What one request reads ahead must fit where the store keeps first reads until the command runs.
    let mut budget_bytes = fallow_store::shard::STUB_FETCH_BYTES_MAX;
    for key in keys {
        let mut guards = store.lock_key(key);
        if let Some(slot) = guards.shard(key).stub_slot(keyspace, key, now_ms) {
            let Some(left) = budget_bytes.checked_sub(slot.padded_bytes()) else {
                break;
            };
            budget_bytes = left;
            faults.push(Fault {
                keyspace,
                key: key.to_vec(),
                slot,
            });
        }
    }
    faults
}

/// Reads the faults' records on the blocking pool (at most `READS_IN_FLIGHT_MAX` at once, server-wide)
/// and promotes each key that is still the same stub.
pub async fn read_ahead(server: &Server, faults: Vec<Fault>) {
    let Some(tier2) = server
        .durability
        .get()
        .and_then(|durability| durability.tier2.clone())
    else {
        return;
    };
    let Ok(_permit) = READ_PERMITS
        .acquire_many(faults.len().min(READS_IN_FLIGHT_MAX) as u32)
        .await
    else {
        return;
    };
    let read = tokio::task::spawn_blocking(move || read_all(&tier2, faults)).await;
    let Ok(results) = read else {
        return;
    };
    let stats = &server
        .store
        .tier2()
        .expect("tier 2 is attached")
        .stats
        .shards;
    for (fault, encoded) in results {
        stats.async_reads.fetch_add(1, Ordering::Relaxed);
        let mut guards = server.store.lock_key(&fault.key);
        guards
            .shard(&fault.key)
            .install_fetched(fault.keyspace, &fault.key, fault.slot, encoded);
    }
}

type Fetched = (Fault, Result<Vec<u8>, fallow_store::tier2::Tier2Error>);

fn read_all(tier2: &Arc<Tier2>, faults: Vec<Fault>) -> Vec<Fetched> {
    faults
        .into_iter()
        .map(|fault| {
            let encoded = tier2.read(fault.slot);
            (fault, encoded)
        })
        .collect()
}
