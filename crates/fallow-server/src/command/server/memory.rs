//! MEMORY USAGE, STATS, DOCTOR, MALLOC-STATS, PURGE.
use super::{rss_bytes, shard_totals, used_memory};
use crate::command::reply::{help_reply, subcommand_arity_error};
use crate::command::shards::for_each_shard;
use crate::command::{is, parse_int, subcommand_error, Ctx, NOT_INTEGER, SYNTAX};
use fallow_store::keyspace;
use std::sync::atomic::Ordering;

pub(super) fn memory(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"usage", 3..) => memory_usage(ctx, args),
        (b"stats", 2) => memory_stats(ctx),
        (b"doctor", 2) => {
            let (used, peak) = used_memory(ctx);
            ctx.out
                .verbatim("txt", doctor_report(used, peak).as_bytes());
        }
        (b"malloc-stats", 2) => ctx
            .out
            .verbatim("txt", b"Stats not supported for the current allocator"),
        (b"purge", 2) => {
            // gives the emptied segments kept for reuse back to the OS
            drop(ctx.server.store.memory.take_spares(usize::MAX));
            fallow_store::memory::segment::retained::unmap_retained(0);
            ctx.out.ok()
        }
        (b"help", 2) => help_reply(
            ctx,
            "MEMORY",
            &[
                "DOCTOR",
                "    Return memory problems reports.",
                "MALLOC-STATS",
                "    Return internal statistics report from the memory allocator.",
                "PURGE",
                "    Attempt to purge dirty pages for reclamation by the allocator.",
                "STATS",
                "    Return information about the memory usage of the server.",
                "USAGE <key> [SAMPLES <count>]",
                "    Return memory in bytes used by <key> and its value. Nested values are",
                "    sampled up to <count> times (default: 5, 0 means sample all).",
            ],
        ),
        (b"usage" | b"stats" | b"doctor" | b"malloc-stats" | b"purge", _) => {
            subcommand_arity_error(ctx, "memory", &sub)
        }
        _ => subcommand_error(ctx, args),
    }
}

/// Below this much used memory MEMORY DOCTOR declines to judge (Redis's 5 MB).
const DOCTOR_EMPTY_BELOW_BYTES: usize = 5 << 20;

/// MEMORY DOCTOR, Redis's report for the figures fallow has: too little data to judge, a past peak
/// over 150% of what is used now, or nothing to report.
fn doctor_report(used: usize, peak: usize) -> String {
    if used < DOCTOR_EMPTY_BELOW_BYTES {
        return "Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I will be back to our programming as soon as I finished rebooting.\n".into();
    }
    if (peak as f64) / (used as f64) <= 1.5 {
        return "Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.\n".into();
    }
    "Sam, I detected a few issues in this Redis instance memory implants:\n\n * Peak memory: In the past this instance used more than 150% the memory that is currently using. The allocator is normally not able to release memory after a peak, so you can expect to see a big fragmentation ratio, however this is actually harmless and is only due to the memory peak, and if the Redis instance Resident Set Size (RSS) is currently bigger than expected, the memory will be used as soon as you fill the Redis instance with more data. If the memory peak was only occasional and you want to try to reclaim memory, please try the MEMORY PURGE command, otherwise the only other option is to shutdown and restart the instance.\n\nI'm here to keep you safe, Sam. I want to help you.\n".into()
}

/// MEMORY USAGE key [SAMPLES count]: fallow's figure is exact, so SAMPLES is checked (as Redis checks
/// it) but changes nothing.
fn memory_usage(ctx: &mut Ctx, args: &[&[u8]]) {
    if let Err(reply) = check_samples_options(&args[3..]) {
        return ctx.out.error(reply);
    }
    let key = args[2];
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    match ctx.guards.shard(key).memory_usage(db, key, now) {
        Some(bytes) => ctx.out.int(bytes as i64),
        None => ctx.out.nil(),
    }
}

/// Redis's option loop of MEMORY USAGE: any number of `SAMPLES n` pairs, the last one counting; a
/// negative count or a missing one is a syntax error.
fn check_samples_options(options: &[&[u8]]) -> Result<(), &'static str> {
    let mut index = 0;
    while index < options.len() {
        if !is(options[index], "samples") || index + 1 >= options.len() {
            return Err(SYNTAX);
        }
        match parse_int(options[index + 1]) {
            None => return Err(NOT_INTEGER),
            Some(samples) if samples < 0 => return Err(SYNTAX),
            Some(_) => {}
        }
        index += 2;
    }
    Ok(())
}

/// Figures of MEMORY STATS, from fallow's accounting.
struct MemoryFigures {
    peak: usize,
    used: usize,
    startup: usize,
    clients: usize,
    lua: usize,
    dataset: usize,
    keys: usize,
    /// Per database of the caller's namespace with keys: (index, keys).
    databases: Vec<(usize, usize)>,
    /// Segments mapped (what the allocator holds active).
    mapped: usize,
    rss: usize,
}

fn memory_figures(ctx: &mut Ctx) -> MemoryFigures {
    let totals = shard_totals(ctx, true);
    let (used, peak) = used_memory(ctx);
    let dataset = ctx.server.store.used_bytes().min(used);
    let clients = (ctx
        .server
        .clients_memory
        .total_bytes
        .load(Ordering::Relaxed) as usize)
        .min(used - dataset);
    let databases = totals
        .keyspace
        .iter()
        .enumerate()
        .filter(|(_, entry)| entry.0 > 0)
        .map(|(index, entry)| (index, entry.0))
        .collect();
    MemoryFigures {
        peak,
        used,
        startup: used - dataset - clients,
        clients,
        lua: 0,
        dataset,
        keys: all_namespaces_keys(ctx),
        databases,
        mapped: totals.mapped_bytes,
        rss: rss_bytes(),
    }
}

/// Keys of every namespace: the dataset figures are the whole store's.
fn all_namespaces_keys(ctx: &mut Ctx) -> usize {
    let databases = ctx.server.store.databases();
    let addresses: Vec<usize> = crate::tenants::namespaces(&ctx.server.store)
        .into_iter()
        .flat_map(|namespace| (0..databases).map(move |db| keyspace(0, namespace, db)))
        .collect();
    let mut keys = 0;
    for_each_shard(ctx, |shard| {
        keys += addresses
            .iter()
            .map(|&db| shard.key_count(db))
            .sum::<usize>();
    });
    keys
}

/// A ratio as Redis computes it (a C float), written as a double.
fn ratio(part: usize, whole: usize) -> f64 {
    (part as f32 / whole.max(1) as f32) as f64
}

/// MEMORY STATS: Redis 7.0's fields in its order. fallow keeps no replication backlog, AOF, cluster
/// links or functions (0); its index lives in the shards' segments, counted in the dataset, so the
/// per-database hash-table overheads are 0.
fn memory_stats(ctx: &mut Ctx) {
    let figures = memory_figures(ctx);
    let overhead = figures.used - figures.dataset;
    let net = figures.used.saturating_sub(figures.startup);
    let out = &mut *ctx.out;
    out.map_len(27 + figures.databases.len());
    let int = |out: &mut fallow_proto::ReplyWriter, name: &str, value: usize| {
        out.bulk(name.as_bytes());
        out.int(value as i64);
    };
    int(out, "peak.allocated", figures.peak);
    int(out, "total.allocated", figures.used);
    int(out, "startup.allocated", figures.startup);
    int(out, "replication.backlog", 0);
    int(out, "clients.slaves", 0);
    int(out, "clients.normal", figures.clients);
    int(out, "cluster.links", 0);
    int(out, "aof.buffer", 0);
    int(out, "lua.caches", figures.lua);
    int(out, "functions.caches", 0);
    for &(db, _) in &figures.databases {
        out.bulk(format!("db.{db}").as_bytes());
        out.map_len(3);
        int(out, "overhead.hashtable.main", 0);
        int(out, "overhead.hashtable.expires", 0);
        int(out, "overhead.hashtable.slot-to-keys", 0);
    }
    int(out, "overhead.total", overhead);
    int(out, "keys.count", figures.keys);
    int(
        out,
        "keys.bytes-per-key",
        net.checked_div(figures.keys).unwrap_or(0),
    );
    int(out, "dataset.bytes", figures.dataset);
    let double = |out: &mut fallow_proto::ReplyWriter, name: &str, value: f64| {
        out.bulk(name.as_bytes());
        out.double(value);
    };
    double(out, "dataset.percentage", ratio(figures.dataset * 100, net));
    double(
        out,
        "peak.percentage",
        ratio(figures.used * 100, figures.peak),
    );
    // The "allocator" is fallow's segment memory: allocated is what is in use, active what is mapped.
    let active = figures.mapped.max(figures.used);
    let resident = figures.rss.max(active);
    int(out, "allocator.allocated", figures.used);
    int(out, "allocator.active", active);
    int(out, "allocator.resident", resident);
    double(
        out,
        "allocator-fragmentation.ratio",
        ratio(active, figures.used),
    );
    int(out, "allocator-fragmentation.bytes", active - figures.used);
    double(out, "allocator-rss.ratio", ratio(resident, active));
    int(out, "allocator-rss.bytes", resident - active);
    double(out, "rss-overhead.ratio", ratio(figures.rss, resident));
    int(
        out,
        "rss-overhead.bytes",
        figures.rss.saturating_sub(resident),
    );
    double(out, "fragmentation", ratio(figures.rss, figures.used));
    int(
        out,
        "fragmentation.bytes",
        figures.rss.saturating_sub(figures.used),
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn memory_usage_key_positions() {
        use crate::command::info::server::{debug_keys, memory_keys};
        assert_eq!(memory_keys(&[b"memory", b"usage", b"k"]), vec![2]);
        assert!(memory_keys(&[b"memory", b"stats"]).is_empty());
        assert_eq!(debug_keys(&[b"debug", b"OBJECT", b"k"]), vec![2]);
        assert_eq!(debug_keys(&[b"debug", b"listpack", b"k"]), vec![2]);
        assert!(debug_keys(&[b"debug", b"sleep", b"0"]).is_empty());
    }
}
