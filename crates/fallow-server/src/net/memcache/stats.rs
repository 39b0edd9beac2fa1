//! memcached counters and the `stats` reports (general, settings, items, slabs). fallow has no slab
//! classes: `items` and `slabs` report each shard and its segments in their place.
use super::VERSION;
use crate::clients::ClientKind;
use crate::server::Server;
pub use crate::stats::{bump, McStats};
use std::sync::atomic::Ordering;

/// One `STAT name value` line.
pub type Stat = (String, String);

fn stat(name: &str, value: impl ToString) -> Stat {
    (name.to_string(), value.to_string())
}

/// The report for `stats [group]`; None for a group fallow does not know (memcached: ERROR).
/// A `stats` report; `db` is the keyspace address of the listener's tenant (item counts are its).
pub fn report(server: &Server, db: usize, group: Option<&str>) -> Option<Vec<Stat>> {
    match group {
        None | Some("") => Some(general(server, db)),
        Some("settings") => Some(settings(server)),
        Some("items") => Some(items(server, db)),
        Some("slabs") => Some(slabs(server)),
        Some("sizes") => Some(vec![stat("sizes_status", "disabled")]),
        _ => None,
    }
}

fn rusage_s() -> (String, String) {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |tv: libc::timeval| format!("{}.{:06}", tv.tv_sec, tv.tv_usec);
    (seconds(usage.ru_utime), seconds(usage.ru_stime))
}

fn general(server: &Server, db: usize) -> Vec<Stat> {
    let config = server.config.read().clone();
    let mc = &server.memcache;
    let curr_connections = server
        .clients
        .lock()
        .values()
        .filter(|client| client.kind == ClientKind::Memcache)
        .count();
    let now_s = fallow_store::now_ms() / 1000;
    let (user, system) = rusage_s();
    let mut stats = vec![
        stat("pid", std::process::id()),
        stat("uptime", server.started.elapsed().as_secs()),
        stat("time", now_s),
        stat("version", VERSION),
        stat("libevent", "none"),
        stat("pointer_size", usize::BITS),
        stat("rusage_user", user),
        stat("rusage_system", system),
        stat("max_connections", config.maxclients),
        stat("curr_connections", curr_connections),
        stat(
            "rejected_connections",
            server.stats.connections_rejected.load(Ordering::Relaxed),
        ),
        stat("connection_structures", curr_connections),
    ];
    stats.extend(
        mc.counters()
            .iter()
            .filter(|(name, _)| *name != "total_items")
            .map(|(name, counter)| stat(name, counter.load(Ordering::Relaxed))),
    );
    let curr_items = server.store.sum_shards(|shard| shard.key_count(db) as u64);
    let evictions = server.store.sum_shards(|shard| shard.stats.evicted_keys);
    let expired = server.store.sum_shards(|shard| shard.stats.expired_keys);
    stats.extend([
        stat("limit_maxbytes", config.maxmemory_bytes),
        stat("threads", config.threads),
        stat("bytes", server.store.used_bytes()),
        stat("curr_items", curr_items),
        stat("total_items", mc.total_items.load(Ordering::Relaxed)),
        stat("expired_unfetched", 0),
        stat("evicted_unfetched", 0),
        stat("evictions", evictions),
        stat("reclaimed", expired),
    ]);
    // Tier 2 (as extstore's counters are part of memcached's): every numeric INFO tier2 field.
    if let Some(durability) = server.durability.get() {
        let hits = server.store.sum_shards(|shard| shard.stats.keyspace_hits);
        let uptime_s = server.started.elapsed().as_secs();
        for (name, value) in durability.info_fields(hits, uptime_s) {
            if value.parse::<f64>().is_ok() {
                stats.push(stat(name, value));
            }
        }
    }
    stats
}

fn settings(server: &Server) -> Vec<Stat> {
    let config = server.config.read().clone();
    vec![
        stat("maxbytes", config.maxmemory_bytes),
        stat("maxconns", config.maxclients),
        stat("tcpport", config.memcache_port),
        stat("udpport", 0),
        stat("inter", &config.bind),
        stat(
            "verbosity",
            server.memcache.verbosity.load(Ordering::Relaxed),
        ),
        stat("oldest", 0),
        stat(
            "evictions",
            if config.maxmemory_policy == "noeviction" {
                "off"
            } else {
                "on"
            },
        ),
        stat("eviction_policy", &config.maxmemory_policy),
        stat("num_threads", config.threads),
        stat("cas_enabled", "yes"),
        stat("item_size_max", config.memcache_item_size_max_bytes),
        stat("segment_size", config.segment_size_bytes),
        stat("shards", server.store.shard_count()),
        stat("binding_protocol", "auto-negotiate"),
        stat("meta_response_old", "no"),
    ]
}

/// Per shard ("class" in memcached terms): its items and the segments holding them.
fn items(server: &Server, db: usize) -> Vec<Stat> {
    let mut stats = Vec::new();
    for index in 0..server.store.shard_count() {
        let shard = server.store.lock(index);
        let prefix = format!("items:{index}:");
        stats.extend([
            stat(&format!("{prefix}number"), shard.key_count(db)),
            stat(&format!("{prefix}segments"), shard.segment_count()),
            stat(&format!("{prefix}evicted"), shard.stats.evicted_keys),
            stat(&format!("{prefix}expired"), shard.stats.expired_keys),
        ]);
    }
    stats
}

fn slabs(server: &Server) -> Vec<Stat> {
    let segment_bytes = server.config.read().segment_size_bytes;
    let mut stats = Vec::new();
    let mut mapped_total = 0;
    for index in 0..server.store.shard_count() {
        let shard = server.store.lock(index);
        mapped_total += shard.mapped_bytes();
        stats.extend([
            stat(&format!("{index}:segment_size"), segment_bytes),
            stat(&format!("{index}:total_segments"), shard.segment_count()),
            stat(&format!("{index}:mapped_bytes"), shard.mapped_bytes()),
            stat(&format!("{index}:used_bytes"), shard.used_bytes()),
            stat(&format!("{index}:dead_bytes"), shard.dead_bytes()),
        ]);
    }
    stats.push(stat("active_slabs", server.store.shard_count()));
    stats.push(stat("total_malloced", mapped_total));
    stats
}
