//! memcached counters and the `stats` reports (general, settings, items, slabs). fallow has no slab
//! classes: `items` and `slabs` report each shard and its segments in their place.
use super::VERSION;
use crate::server::{ClientKind, Server};
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters behind `stats` (what memcached keeps per thread, kept here server-wide).
#[derive(Default)]
pub struct McStats {
    pub total_connections: AtomicU64,
    pub cmd_get: AtomicU64,
    pub cmd_set: AtomicU64,
    pub cmd_flush: AtomicU64,
    pub cmd_touch: AtomicU64,
    pub cmd_meta: AtomicU64,
    pub get_hits: AtomicU64,
    pub get_misses: AtomicU64,
    pub delete_hits: AtomicU64,
    pub delete_misses: AtomicU64,
    pub incr_hits: AtomicU64,
    pub incr_misses: AtomicU64,
    pub decr_hits: AtomicU64,
    pub decr_misses: AtomicU64,
    pub cas_hits: AtomicU64,
    pub cas_misses: AtomicU64,
    pub cas_badval: AtomicU64,
    pub touch_hits: AtomicU64,
    pub touch_misses: AtomicU64,
    pub total_items: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    /// Authentication attempts (SASL auth/step, text `set` credentials), as memcached counts them.
    pub auth_cmds: AtomicU64,
    /// Failed authentication attempts.
    pub auth_errors: AtomicU64,
    /// Requests refused because the connection had not authenticated.
    pub unauthenticated_cmds: AtomicU64,
    /// Requests refused by the user's ACL (command or key permissions).
    pub permission_denied_cmds: AtomicU64,
    /// Bumped by every flush_all; a delayed flush runs only if no newer one came.
    pub flush_generation: AtomicU64,
    pub verbosity: AtomicU64,
}

/// Adds one to a counter.
pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl McStats {
    /// The resettable counters, in `stats` order.
    fn counters(&self) -> [(&'static str, &AtomicU64); 26] {
        [
            ("total_connections", &self.total_connections),
            ("cmd_get", &self.cmd_get),
            ("cmd_set", &self.cmd_set),
            ("cmd_flush", &self.cmd_flush),
            ("cmd_touch", &self.cmd_touch),
            ("cmd_meta", &self.cmd_meta),
            ("get_hits", &self.get_hits),
            ("get_misses", &self.get_misses),
            ("delete_misses", &self.delete_misses),
            ("delete_hits", &self.delete_hits),
            ("incr_misses", &self.incr_misses),
            ("incr_hits", &self.incr_hits),
            ("decr_misses", &self.decr_misses),
            ("decr_hits", &self.decr_hits),
            ("cas_misses", &self.cas_misses),
            ("cas_hits", &self.cas_hits),
            ("cas_badval", &self.cas_badval),
            ("touch_hits", &self.touch_hits),
            ("touch_misses", &self.touch_misses),
            ("bytes_read", &self.bytes_read),
            ("bytes_written", &self.bytes_written),
            ("auth_cmds", &self.auth_cmds),
            ("auth_errors", &self.auth_errors),
            ("unauthenticated_cmds", &self.unauthenticated_cmds),
            ("permission_denied_cmds", &self.permission_denied_cmds),
            ("total_items", &self.total_items),
        ]
    }

    /// `stats reset`.
    pub fn reset(&self) {
        for (_, counter) in self.counters() {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

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
        stat("limit_maxbytes", config.maxmemory),
        stat("threads", config.threads),
        stat("bytes", server.store.used_bytes()),
        stat("curr_items", curr_items),
        stat("total_items", mc.total_items.load(Ordering::Relaxed)),
        stat("expired_unfetched", 0),
        stat("evicted_unfetched", 0),
        stat("evictions", evictions),
        stat("reclaimed", expired),
    ]);
    stats
}

fn settings(server: &Server) -> Vec<Stat> {
    let config = server.config.read().clone();
    vec![
        stat("maxbytes", config.maxmemory),
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
        stat("item_size_max", config.memcache_item_size_max),
        stat("segment_size", config.segment_size),
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
    let segment_bytes = server.config.read().segment_size;
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
