//! MEMORY USAGE, STATS, DOCTOR, MALLOC-STATS, PURGE.
use super::{rss_bytes, shard_totals, used_memory};
use crate::command::reply::{help_reply, subcommand_arity_error};
use crate::command::shards::for_each_shard;
use crate::command::{is, parse_int, subcommand_error, Ctx, NOT_INTEGER, SYNTAX};
use fallow_store::keyspace;

pub(super) fn memory(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"usage", 3 | 5) => memory_usage(ctx, args),
        (b"stats", 2) => memory_stats(ctx),
        (b"doctor", 2) => {
            let text = "Hi Sam, fallow keeps data in mmap'd segments that are compacted in the background; \
see INFO fallow for segment and dead-byte figures.\n";
            ctx.out.verbatim("txt", text.as_bytes());
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
                "    Return memory in bytes used by <key> and its value.",
            ],
        ),
        (b"usage" | b"stats" | b"doctor" | b"malloc-stats" | b"purge", _) => {
            subcommand_arity_error(ctx, "memory", &sub)
        }
        _ => subcommand_error(ctx, args),
    }
}

fn memory_usage(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len() == 5 {
        if !is(args[3], "samples") {
            return ctx.out.error(SYNTAX);
        }
        if parse_int(args[4]).is_none_or(|samples| samples < 0) {
            return ctx.out.error(NOT_INTEGER);
        }
    }
    let key = args[2];
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    match ctx.guards.shard(key).memory_usage(db, key, now) {
        Some(bytes) => ctx.out.int(bytes as i64),
        None => ctx.out.nil(),
    }
}

fn memory_stats(ctx: &mut Ctx) {
    let totals = shard_totals(ctx, false);
    let (used, peak) = used_memory(ctx);
    let dataset = ctx.server.store.used_bytes();
    let keys: usize = {
        // Keys of every namespace: the dataset figures are the whole store's.
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
    };
    let rss = rss_bytes();
    let ratio = |part: usize, whole: usize| {
        if whole == 0 {
            0.0
        } else {
            part as f64 * 100.0 / whole as f64
        }
    };
    let out = &mut *ctx.out;
    out.map_len(13);
    for (name, value) in [
        ("peak.allocated", peak),
        ("total.allocated", used),
        ("startup.allocated", used - dataset),
        ("overhead.total", used - dataset),
        ("keys.count", keys),
        ("keys.bytes-per-key", dataset.checked_div(keys).unwrap_or(0)),
        ("dataset.bytes", dataset),
        ("fallow.segments.mapped", totals.mapped_bytes),
        ("fallow.segments.dead", totals.dead_bytes),
        ("rss-bytes", rss),
    ] {
        out.bulk(name.as_bytes());
        out.int(value as i64);
    }
    out.bulk(b"dataset.percentage");
    out.double(ratio(dataset, used));
    out.bulk(b"peak.percentage");
    out.double(ratio(used, peak));
    out.bulk(b"fragmentation");
    out.double(if used == 0 {
        0.0
    } else {
        rss as f64 / used as f64
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn memory_usage_key_positions() {
        use crate::command::info::server::{debug_keys, memory_keys};
        assert_eq!(memory_keys(&[b"memory", b"usage", b"k"]), vec![2]);
        assert!(memory_keys(&[b"memory", b"stats"]).is_empty());
        assert_eq!(debug_keys(&[b"debug", b"OBJECT", b"k"]), vec![2]);
    }
}
