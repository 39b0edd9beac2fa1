//! Reading a command's tier-2 values ahead, so a worker never blocks on the device: before a command
//! runs, the keys it names are checked for stubs (values on tier 2 only); if there are any, the connection
//! stops its batch there, the records are read (through io_uring: submitted from this thread, completed
//! by the task `start_async_reads` spawns on whichever worker the event loop wakes; or on a bounded pool
//! of blocking threads under `tier2-reads threads` or where the kernel refuses io_uring) and handed to
//! the store (kept for the command, which serves a GET from it or promotes the key:
//! `Shard::serves_without_promotion`), and the command then runs. Keys a command cannot name in advance
//! (inside EXEC, scans) and a request's records beyond `STUB_FETCH_BYTES_MAX` are read on the worker
//! instead, counted as `tier2_sync_reads`.
use super::{key_positions, lookup};
use crate::connection::{ConnState, Tier2Fault as Fault};
use crate::server::Server;
use fallow_store::tier2::{Tier2, Tier2Error, READS_IN_FLIGHT_MAX};
use std::sync::atomic::Ordering;
use std::sync::Arc;

static READ_PERMITS: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(READS_IN_FLIGHT_MAX);

/// The stubs among the keys `args` names (none while the store has no stubs, the common case, at the
/// cost of one atomic load).
pub fn faults(server: &Server, conn: &ConnState, args: &[&[u8]]) -> Vec<Fault> {
    // While a script runs, the keys' shards may be its: the command is checked against it first (and
    // reads its values on the worker if it then runs).
    if !any_stubs(server)
        || !conn.authenticated
        || conn.multi.is_some()
        || server.scripts.any_running()
    {
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

/// Reads the faults' records (at most `READS_IN_FLIGHT_MAX` at once, server-wide) and hands each to its
/// shard, which keeps it for the command if the key is still the same stub.
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
    let results = read_faults(&tier2, faults).await;
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

type Fetched = (Fault, Result<Vec<u8>, Tier2Error>);

/// Submits every fault's read through io_uring, reading those it does not take on the blocking pool,
/// then waits for all.
async fn read_faults(tier2: &Arc<Tier2>, faults: Vec<Fault>) -> Vec<Fetched> {
    let mut submitted = Vec::with_capacity(faults.len());
    let mut on_threads = Vec::new();
    for fault in faults {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let done = Box::new(move |record| {
            let _ = sender.send(record);
        });
        match tier2.read_async(fault.slot, done) {
            Ok(()) => submitted.push((fault, receiver)),
            Err(_) => on_threads.push(fault),
        }
    }
    let mut results = Vec::with_capacity(submitted.len() + on_threads.len());
    if !on_threads.is_empty() {
        let tier2 = tier2.clone();
        if let Ok(read) = tokio::task::spawn_blocking(move || read_all(&tier2, on_threads)).await {
            results.extend(read);
        }
    }
    for (fault, receiver) in submitted {
        let record = receiver
            .await
            .unwrap_or_else(|_| Err(Tier2Error::Io("tier 2 closed".into())));
        results.push((fault, record));
    }
    results
}

/// Sets up tier 2's io_uring reads and the task that runs their callbacks whenever the ring signals its
/// eventfd (read-ahead uses the blocking pool until then, and for good where this fails: the failure is
/// logged and shown in INFO `tier2_read_path`). Call once, within the runtime.
pub fn start_async_reads(tier2: &Arc<Tier2>) -> Option<tokio::task::JoinHandle<()>> {
    let entries = READS_IN_FLIGHT_MAX as u32;
    if let Err(error) = tier2.enable_async_reads(entries) {
        tracing::warn!(%error, "io_uring refused: tier-2 reads go through a thread pool");
        return None;
    }
    let interest = tokio::io::Interest::READABLE;
    let completions = Completions(tier2.clone());
    // SAFETY: the eventfd is owned by tier 2's ring, which lives as long as tier 2, held by `Completions`.
    let events =
        match unsafe { tokio::io::unix::AsyncFd::register_with_interest(completions, interest) } {
            Ok(events) => events,
            Err(error) => {
                let error = error.to_string();
                tracing::error!(
                    %error,
                    "cannot poll io_uring completions: tier-2 reads go through a thread pool"
                );
                tier2.stop_async_reads(&error);
                return None;
            }
        };
    let tier2 = tier2.clone();
    Some(tokio::spawn(async move {
        while let Ok(mut ready) = events.readable().await {
            // Cleared before draining: a completion from now on signals again.
            ready.clear_ready();
            tier2.reap_reads();
        }
        // Nothing polls the ring any more: later reads go to the thread pool.
        tier2.stop_async_reads("its completions are no longer polled");
    }))
}

/// Tier 2's completion eventfd, owned by tier 2 (set once, never closed while tier 2 lives).
struct Completions(Arc<Tier2>);

impl std::os::fd::AsRawFd for Completions {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.async_reads_fd().expect("async reads are set up")
    }
}

fn read_all(tier2: &Arc<Tier2>, faults: Vec<Fault>) -> Vec<Fetched> {
    faults
        .into_iter()
        .map(|fault| {
            let encoded = tier2.read(fault.slot);
            (fault, encoded)
        })
        .collect()
}
