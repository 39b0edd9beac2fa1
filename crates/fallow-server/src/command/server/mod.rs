//! Server commands: INFO CONFIG COMMAND TIME LASTSAVE SAVE BGSAVE MEMORY LATENCY DEBUG SLOWLOG SHUTDOWN
//! ROLE MONITOR. fallow keeps no snapshots and no slow log; those commands answer well-formed but empty.
//! One file per concern: `info` (INFO and its sections), `config` (CONFIG), `command` (COMMAND),
//! `memory` (MEMORY), `debug` (DEBUG, LATENCY, SLOWLOG); this file has the table of handlers, the figures
//! INFO and MEMORY STATS share, and the small commands.
mod cluster;
mod command;
mod config;
mod debug;
mod info;
mod latency;
mod lolwut;
mod memory;
mod module;

use super::shards::for_each_shard;
use super::{is, Ctx, Handler, SYNTAX};
use fallow_store::shard::ShardStats;
use fallow_store::Shard;
use std::sync::atomic::Ordering;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("info", info::info),
    ("config", config::config),
    ("command", command::command),
    ("time", time),
    ("lastsave", lastsave),
    ("save", no_snapshots),
    ("bgsave", no_snapshots),
    ("bgrewriteaof", no_snapshots),
    ("memory", memory::memory),
    ("latency", latency::latency),
    ("debug", debug::debug),
    ("slowlog", debug::slowlog),
    ("shutdown", shutdown),
    ("role", role),
    ("wait", wait),
    ("replicaof", replicaof),
    ("slaveof", replicaof),
    ("lolwut", lolwut::lolwut),
    ("monitor", monitor),
    ("module", module::module),
    ("cluster", cluster::cluster),
    ("readonly", cluster::cluster_state),
    ("readwrite", cluster::cluster_state),
    ("asking", cluster::cluster_state),
];

// ----- figures INFO and MEMORY STATS share --------------------------------------------------------

/// Figures summed over shards.
#[derive(Default)]
struct ShardTotals {
    stats: ShardStats,
    mapped_bytes: usize,
    spare_bytes: usize,
    dead_bytes: usize,
    segments: usize,
    /// Per database: (keys, keys with an expiry, sum of remaining TTLs in ms).
    keyspace: Vec<(usize, usize, u64)>,
}

fn shard_totals(ctx: &mut Ctx, with_keyspace: bool) -> ShardTotals {
    let databases = ctx.server.store.databases();
    // INFO keyspace lists the databases of the caller's namespace.
    let addresses: Vec<usize> = (0..databases).map(|db| ctx.keyspace_at(db)).collect();
    let mut totals = ShardTotals {
        keyspace: vec![(0, 0, 0); databases],
        ..ShardTotals::default()
    };
    for_each_shard(ctx, |shard| {
        let stats = &mut totals.stats;
        stats.keyspace_hits += shard.stats.keyspace_hits;
        stats.keyspace_misses += shard.stats.keyspace_misses;
        stats.expired_keys += shard.stats.expired_keys;
        stats.evicted_keys += shard.stats.evicted_keys;
        stats.compacted_segments += shard.stats.compacted_segments;
        stats.compacted_bytes += shard.stats.compacted_bytes;
        stats.segments_mapped += shard.stats.segments_mapped;
        stats.segments_unmapped += shard.stats.segments_unmapped;
        stats.segments_reused += shard.stats.segments_reused;
        totals.mapped_bytes += shard.mapped_bytes();
        totals.dead_bytes += shard.dead_bytes();
        totals.segments += shard.segment_count();
        if with_keyspace {
            for (&db, entry) in addresses.iter().zip(totals.keyspace.iter_mut()) {
                let keys = shard.key_count(db);
                if keys > 0 {
                    let (volatile, ttl_sum_ms) = shard.volatile_stats(db);
                    entry.0 += keys;
                    entry.1 += volatile;
                    entry.2 = entry.2.saturating_add(ttl_sum_ms);
                }
            }
        }
    });
    // The store's spare segments are mapped too, in no shard's books.
    totals.spare_bytes = ctx.server.store.memory.spare_bytes();
    totals.mapped_bytes += totals.spare_bytes;
    totals
}

/// Memory fallow itself needs besides data: shard tables, command statistics and a read buffer per
/// client. Counted into used_memory so it is never zero and not only data (Redis's used_memory_startup).
fn overhead_bytes(ctx: &Ctx) -> usize {
    const CLIENT_BUFFER_BYTES: usize = 16 << 10;
    let store = &ctx.server.store;
    store.shard_count() * (std::mem::size_of::<Shard>() + store.databases() * 64)
        + ctx.server.command_stats.len() * 16
        + ctx.server.clients.lock().len()
            * (std::mem::size_of::<crate::connection::ConnState>() + CLIENT_BUFFER_BYTES)
}

/// Resident set size from /proc/self/status (0 where unavailable).
fn rss_bytes() -> usize {
    crate::elastic::source::process_rss_bytes(std::path::Path::new("/proc")) as usize
}

/// The --config file (or FALLOW_CONFIG) the server was started with; empty when none.
fn config_file(ctx: &Ctx) -> String {
    ctx.server
        .config
        .read()
        .config_file
        .clone()
        .unwrap_or_default()
}

fn unix_time_us() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_micros())
}

/// used_memory as INFO and MEMORY STATS report it; also moves the peak.
fn used_memory(ctx: &Ctx) -> (usize, usize) {
    let overhead = overhead_bytes(ctx);
    let (used, peak) = ctx.server.store.memory.sample_peak();
    (used + overhead, peak + overhead)
}

// ----- small commands -----------------------------------------------------------------------------

fn time(ctx: &mut Ctx, _args: &[&[u8]]) {
    let micros = unix_time_us();
    ctx.out.array_len(2);
    ctx.out.bulk_int((micros / 1_000_000) as i64);
    ctx.out.bulk_int((micros % 1_000_000) as i64);
}

fn start_unix_s(ctx: &Ctx) -> u64 {
    let now_s = (unix_time_us() / 1_000_000) as u64;
    now_s.saturating_sub(ctx.server.started.elapsed().as_secs())
}

/// fallow has never saved: LASTSAVE reports the start time, as Redis does before its first save.
fn lastsave(ctx: &mut Ctx, _args: &[&[u8]]) {
    let started = start_unix_s(ctx);
    ctx.out.int(started as i64);
}

fn no_snapshots(ctx: &mut Ctx, _args: &[&[u8]]) {
    ctx.out
        .error("ERR fallow keeps no snapshots: data lives in memory only");
}

fn role(ctx: &mut Ctx, _args: &[&[u8]]) {
    ctx.out.array_len(3);
    ctx.out.bulk(b"master");
    ctx.out.int(0);
    ctx.out.array_len(0);
}

/// WAIT numreplicas timeout: fallow has no replicas, so the answer is 0 — at once when none was asked for
/// (or inside MULTI), else after the timeout, as Redis answers with no replica connected (a timeout of 0
/// waits for good, as Redis's does).
fn wait(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(wanted) = super::parse_int(args[1]) else {
        return ctx.out.error(super::NOT_INTEGER);
    };
    let timeout_ms = match super::blocking::parse_timeout_ms(args[2]) {
        Ok(timeout) => timeout.ms,
        Err(reply) => return ctx.out.error(reply),
    };
    if wanted > 0 && !ctx.in_exec {
        const FOREVER: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 86_400);
        let wait = match timeout_ms {
            0 => FOREVER,
            ms => std::time::Duration::from_millis(ms),
        };
        ctx.conn.reply_not_before = Some(tokio::time::Instant::now() + wait);
    }
    ctx.out.int(0);
}

/// REPLICAOF NO ONE (already a primary: OK); fallow has no replication, so following a primary is refused.
fn replicaof(ctx: &mut Ctx, args: &[&[u8]]) {
    if is(args[1], "no") && is(args[2], "one") {
        return ctx.out.ok();
    }
    ctx.out
        .error("ERR fallow has no replication: only REPLICAOF NO ONE is accepted");
}

/// MONITOR: from now on the connection is sent every command run (see `crate::monitor`); a second
/// MONITOR is ignored without a reply, as Redis ignores it.
fn monitor(ctx: &mut Ctx, _args: &[&[u8]]) {
    if ctx.in_exec {
        return ctx
            .out
            .error("ERR MONITOR isn't allowed for DENY BLOCKING client");
    }
    let monitors = &ctx.server.monitors;
    if monitors.is_monitoring(ctx.conn.id()) {
        return;
    }
    monitors.add(&ctx.conn.handle, &ctx.conn.pubsub_sender);
    ctx.out.ok();
}

fn shutdown(ctx: &mut Ctx, args: &[&[u8]]) {
    for &arg in &args[1..] {
        if is(arg, "abort") {
            return ctx.out.error("ERR No shutdown in progress.");
        }
        let known = ["nosave", "save", "now", "force"]
            .iter()
            .any(|option| is(arg, option));
        if !known {
            return ctx.out.error(SYNTAX);
        }
    }
    tracing::info!(client = ctx.conn.id(), "SHUTDOWN requested");
    ctx.server.shutting_down.store(true, Ordering::Relaxed);
    // The main thread shuts down gracefully on SIGTERM (closes listeners, removes the unix socket).
    // SAFETY: raise only sends a signal to this process.
    unsafe {
        libc::raise(libc::SIGTERM);
    }
    // Like Redis, no reply: the connection closes.
    ctx.conn.close_after_reply = true;
}
