//! INFO and its sections.
use super::{
    config_file, rss_bytes, shard_totals, start_unix_s, unix_time_us, used_memory, ShardTotals,
};
use crate::command::info::table;
use crate::command::reply::REDIS_COMPATIBLE_VERSION;
use crate::command::shards::tenant_snapshots;
use crate::command::Ctx;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

/// Last sample of the command counter, for instantaneous_ops_per_sec: (when, commands, rate).
static OPS_SAMPLE: parking_lot::Mutex<Option<(std::time::Instant, u64, u64)>> =
    parking_lot::Mutex::new(None);

/// Sections INFO prints without arguments, in order.
const DEFAULT_SECTIONS: [&str; 18] = [
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "errorstats",
    "cluster",
    "keyspace",
    "fallow",
    "elastic",
    "tenants",
    "txn",
    "tier2",
    "scripting",
    "shm",
    "fscache",
];

/// Which sections an INFO call asked for, in the canonical order.
fn requested_sections(args: &[&[u8]]) -> Vec<&'static str> {
    let mut wanted: Vec<String> = args
        .iter()
        .map(|arg| String::from_utf8_lossy(arg).to_ascii_lowercase())
        .collect();
    if wanted.is_empty() {
        wanted.push("default".into());
    }
    let mut sections = Vec::new();
    for name in DEFAULT_SECTIONS
        .iter()
        .copied()
        .chain(["commandstats", "latencystats"])
    {
        let asked = wanted.iter().any(|wanted| {
            wanted == name
                || wanted == "all"
                || wanted == "everything"
                || (wanted == "default" && !matches!(name, "commandstats" | "latencystats"))
        });
        if asked {
            sections.push(name);
        }
    }
    sections
}

fn field(text: &mut String, name: &str, value: impl std::fmt::Display) {
    let _ = write!(text, "{name}:{value}\r\n");
}

pub(super) fn info(ctx: &mut Ctx, args: &[&[u8]]) {
    let text = info_text(ctx, &requested_sections(&args[1..]));
    ctx.out.verbatim("txt", text.as_bytes());
}

fn info_text(ctx: &mut Ctx, sections: &[&str]) -> String {
    let needs_shards = sections
        .iter()
        .any(|name| matches!(*name, "memory" | "stats" | "keyspace" | "fallow" | "tier2"));
    let totals = if needs_shards {
        shard_totals(ctx, sections.contains(&"keyspace"))
    } else {
        ShardTotals::default()
    };
    let mut text = String::new();
    for (position, name) in sections.iter().enumerate() {
        if position > 0 {
            text.push_str("\r\n");
        }
        match *name {
            "server" => server_section(ctx, &mut text),
            "clients" => clients_section(ctx, &mut text),
            "memory" => memory_section(ctx, &totals, &mut text),
            "persistence" => persistence_section(ctx, &mut text),
            "stats" => stats_section(ctx, &totals, &mut text),
            "replication" => replication_section(ctx, &mut text),
            "cpu" => cpu_section(&mut text),
            "cluster" => text.push_str("# Cluster\r\ncluster_enabled:0\r\n"),
            "keyspace" => keyspace_section(&totals, &mut text),
            "fallow" => fallow_section(ctx, &totals, &mut text),
            "elastic" => crate::elastic::report::info_section(ctx.server, &mut text),
            "tenants" => crate::tenants::info_section(&tenant_snapshots(ctx), &mut text),
            "txn" => {
                let config = ctx.server.config.read();
                let (locks, phasing) = (config.txn_locks.clone(), config.txn_phasing);
                drop(config);
                crate::txn::info_section(&ctx.server.txns, &locks, phasing, &mut text)
            }
            "tier2" => tier2_section(ctx, &totals, &mut text),
            "scripting" => crate::scripting::info_section(&ctx.server.scripts, &mut text),
            "shm" => ctx.server.shm.info_section(&mut text),
            "fscache" => ctx.server.fscache.info_section(&mut text),
            "commandstats" => commandstats_section(ctx, &mut text),
            "errorstats" => errorstats_section(ctx, &mut text),
            "latencystats" => super::latency::info_section(ctx, &mut text),
            _ => {}
        }
    }
    text
}

fn server_section(ctx: &Ctx, text: &mut String) {
    let uptime_s = ctx.server.started.elapsed().as_secs();
    let config = ctx.server.config.read();
    let os_release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    text.push_str("# Server\r\n");
    field(text, "redis_version", REDIS_COMPATIBLE_VERSION);
    field(text, "fallow_version", env!("CARGO_PKG_VERSION"));
    field(text, "redis_git_sha1", "00000000");
    field(text, "redis_git_dirty", 0);
    field(text, "redis_mode", "standalone");
    let os_name = match std::env::consts::OS {
        "linux" => "Linux",
        other => other,
    };
    field(
        text,
        "os",
        format!("{os_name} {} {}", os_release.trim(), std::env::consts::ARCH),
    );
    field(text, "arch_bits", usize::BITS);
    field(text, "multiplexing_api", "epoll");
    field(text, "process_id", std::process::id());
    field(text, "process_supervised", "no");
    field(text, "run_id", &ctx.server.run_id);
    field(text, "tcp_port", config.port);
    field(text, "server_time_usec", unix_time_us());
    field(text, "uptime_in_seconds", uptime_s);
    field(text, "uptime_in_days", uptime_s / 86400);
    field(text, "hz", config.hz);
    field(text, "configured_hz", config.hz);
    field(text, "io_threads_active", 0);
    let executable = std::env::current_exe()
        .map(|path| path.display().to_string())
        .unwrap_or_default();
    field(text, "executable", executable);
    field(text, "config_file", config_file(ctx));
}

fn clients_section(ctx: &Ctx, text: &mut String) {
    let (connected, blocked) = {
        let clients = ctx.server.clients.lock();
        let blocked = clients
            .values()
            .filter(|client| client.snapshot.lock().blocked)
            .count();
        (clients.len(), blocked)
    };
    text.push_str("# Clients\r\n");
    field(text, "connected_clients", connected);
    field(text, "cluster_connections", 0);
    field(text, "maxclients", ctx.server.config.read().maxclients);
    field(text, "blocked_clients", blocked);
    let buffers = client_buffers(ctx);
    field(text, "client_recent_max_input_buffer", buffers.max_input);
    field(text, "client_recent_max_output_buffer", buffers.max_output);
    field(text, "tracking_clients", ctx.server.tracking.clients_on());
    field(text, "clients_in_timeout_table", 0);
}

/// What clients' buffers hold now (their reported output, queued pub/sub and query bytes).
#[derive(Default)]
struct ClientBuffers {
    max_input: u64,
    max_output: u64,
    normal: u64,
    pubsub: u64,
}

fn client_buffers(ctx: &Ctx) -> ClientBuffers {
    let mut buffers = ClientBuffers::default();
    for client in ctx.server.clients.lock().values() {
        let memory = &client.memory;
        buffers.max_input = buffers
            .max_input
            .max(memory.query_bytes.load(Ordering::Relaxed));
        buffers.max_output = buffers.max_output.max(memory.output_total());
        let subscribed = {
            let snapshot = client.snapshot.lock();
            snapshot.subscriptions + snapshot.pattern_subscriptions > 0
        };
        if subscribed {
            buffers.pubsub += memory.total();
        } else {
            buffers.normal += memory.total();
        }
    }
    buffers
}

fn memory_section(ctx: &Ctx, totals: &ShardTotals, text: &mut String) {
    let (used, peak) = used_memory(ctx);
    let dataset = ctx.server.store.used_bytes();
    let rss = rss_bytes();
    let maxmemory = ctx.server.store.maxmemory_bytes();
    text.push_str("# Memory\r\n");
    field(text, "used_memory", used);
    field(text, "used_memory_human", crate::units::human_bytes(used));
    field(text, "used_memory_rss", rss);
    field(
        text,
        "used_memory_rss_human",
        crate::units::human_bytes(rss),
    );
    field(text, "used_memory_peak", peak);
    field(
        text,
        "used_memory_peak_human",
        crate::units::human_bytes(peak),
    );
    field(text, "used_memory_startup", used - dataset);
    field(text, "used_memory_dataset", dataset);
    field(text, "maxmemory", maxmemory);
    field(
        text,
        "maxmemory_human",
        crate::units::human_bytes(maxmemory),
    );
    field(text, "maxmemory_policy", ctx.server.store.policy().name());
    let ratio = if used > 0 {
        rss as f64 / used as f64
    } else {
        0.0
    };
    field(text, "mem_fragmentation_ratio", format!("{ratio:.2}"));
    field(text, "mem_allocator", "libc");
    let buffers = client_buffers(ctx);
    field(text, "mem_clients_slaves", 0);
    field(text, "mem_clients_normal", buffers.normal);
    field(text, "mem_clients_pubsub", buffers.pubsub);
    let clients_memory = &ctx.server.clients_memory;
    field(
        text,
        "maxmemory_clients",
        clients_memory.limit_bytes.load(Ordering::Relaxed),
    );
    scripts_memory_fields(ctx, text);
    field(text, "fallow_segments_mapped_bytes", totals.mapped_bytes);
    field(text, "fallow_segments_dead_bytes", totals.dead_bytes);
}

/// Redis 7.0's script memory fields. Every worker has one Lua state, which runs scripts and functions
/// alike: it is all `used_memory_vm_eval`.
fn scripts_memory_fields(ctx: &Ctx, text: &mut String) {
    let scripts = &ctx.server.scripts;
    let lua = scripts.lua_memory_bytes();
    let (cached_scripts, cache_bytes) = scripts.cache_figures();
    let (_, functions) = scripts.functions.counts();
    let library_bytes = scripts.functions.code_bytes();
    let human = crate::units::human_bytes;
    field(text, "used_memory_lua", lua);
    field(text, "used_memory_vm_eval", lua);
    field(text, "used_memory_lua_human", human(lua));
    field(text, "used_memory_scripts_eval", cache_bytes);
    field(text, "number_of_cached_scripts", cached_scripts);
    field(text, "number_of_functions", functions);
    field(text, "used_memory_vm_functions", 0);
    field(text, "used_memory_vm_total", lua);
    field(text, "used_memory_vm_total_human", human(lua));
    field(text, "used_memory_functions", library_bytes);
    field(text, "used_memory_scripts", cache_bytes + library_bytes);
    field(
        text,
        "used_memory_scripts_human",
        human(cache_bytes + library_bytes),
    );
}

fn tier2_section(ctx: &Ctx, totals: &ShardTotals, text: &mut String) {
    text.push_str("# Tier2\r\n");
    let Some(durability) = ctx.server.durability.get() else {
        field(text, "tier2_enabled", 0);
        return;
    };
    let uptime_s = ctx.server.started.elapsed().as_secs();
    for (name, value) in durability.info_fields(totals.stats.keyspace_hits, uptime_s) {
        field(text, name, value);
    }
}

fn persistence_section(ctx: &Ctx, text: &mut String) {
    text.push_str("# Persistence\r\n");
    field(text, "loading", 0);
    field(text, "async_loading", 0);
    field(text, "rdb_changes_since_last_save", 0);
    field(text, "rdb_bgsave_in_progress", 0);
    field(text, "rdb_last_save_time", start_unix_s(ctx));
    field(text, "rdb_last_bgsave_status", "ok");
    field(text, "aof_enabled", 0);
    field(text, "aof_rewrite_in_progress", 0);
}

/// instantaneous_ops_per_sec: commands per second between INFO calls at least a second apart.
fn ops_per_sec(commands: u64) -> u64 {
    let now = std::time::Instant::now();
    let mut sample = OPS_SAMPLE.lock();
    match *sample {
        Some((at, before, rate)) => {
            let elapsed = now.duration_since(at).as_secs_f64();
            if elapsed < 1.0 {
                return rate;
            }
            let rate = (commands.saturating_sub(before) as f64 / elapsed) as u64;
            *sample = Some((now, commands, rate));
            rate
        }
        None => {
            *sample = Some((now, commands, 0));
            0
        }
    }
}

fn stats_section(ctx: &Ctx, totals: &ShardTotals, text: &mut String) {
    let stats = &ctx.server.stats;
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    let commands = load(&stats.commands_processed);
    text.push_str("# Stats\r\n");
    field(
        text,
        "total_connections_received",
        load(&stats.connections_received),
    );
    field(text, "total_commands_processed", commands);
    field(text, "instantaneous_ops_per_sec", ops_per_sec(commands));
    field(text, "total_net_input_bytes", load(&stats.net_input_bytes));
    field(
        text,
        "total_net_output_bytes",
        load(&stats.net_output_bytes),
    );
    field(
        text,
        "rejected_connections",
        load(&stats.connections_rejected),
    );
    field(text, "expired_keys", totals.stats.expired_keys);
    field(text, "evicted_keys", totals.stats.evicted_keys);
    field(text, "keyspace_hits", totals.stats.keyspace_hits);
    field(text, "keyspace_misses", totals.stats.keyspace_misses);
    field(
        text,
        "pubsub_channels",
        ctx.server
            .pubsub
            .channels(crate::pubsub::Space::Channels, None)
            .len(),
    );
    field(text, "pubsub_patterns", ctx.server.pubsub.pattern_count());
    let (keys, items, prefixes) = ctx.server.tracking.table_sizes();
    field(text, "tracking_total_keys", keys);
    field(text, "tracking_total_items", items);
    field(text, "tracking_total_prefixes", prefixes);
    field(text, "total_error_replies", load(&stats.error_replies));
    field(
        text,
        "total_unknown_commands",
        load(&stats.unknown_commands),
    );
    field(text, "total_protocol_errors", load(&stats.protocol_errors));
    field(text, "total_oom_rejections", load(&stats.oom_rejections));
    let clients_memory = &ctx.server.clients_memory;
    field(
        text,
        "client_output_buffer_limit_disconnections",
        load(&clients_memory.output_limit_disconnections),
    );
    field(
        text,
        "client_output_buffer_limit_refusals",
        load(&clients_memory.output_limit_refusals),
    );
    field(
        text,
        "evicted_clients",
        load(&clients_memory.evicted_clients),
    );
    field(
        text,
        "protected_mode_rejections",
        load(&stats.protected_mode_rejections),
    );
    let denials = &ctx.server.acl_log.denials;
    field(text, "acl_access_denied_auth", load(&denials.auth));
    field(text, "acl_access_denied_cmd", load(&denials.command));
    field(text, "acl_access_denied_key", load(&denials.key));
    field(text, "acl_access_denied_channel", load(&denials.channel));
}

fn replication_section(ctx: &Ctx, text: &mut String) {
    text.push_str("# Replication\r\n");
    field(text, "role", "master");
    field(text, "connected_slaves", 0);
    field(text, "master_replid", &ctx.server.run_id);
    field(text, "master_repl_offset", 0);
}

/// CPU seconds of this process (getrusage).
fn cpu_section(text: &mut String) {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    text.push_str("# CPU\r\n");
    field(
        text,
        "used_cpu_sys",
        format!("{:.6}", seconds(usage.ru_stime)),
    );
    field(
        text,
        "used_cpu_user",
        format!("{:.6}", seconds(usage.ru_utime)),
    );
}

fn keyspace_section(totals: &ShardTotals, text: &mut String) {
    text.push_str("# Keyspace\r\n");
    for (db, &(keys, volatile, ttl_sum_ms)) in totals.keyspace.iter().enumerate() {
        if keys > 0 {
            let avg_ttl_ms = if volatile > 0 {
                ttl_sum_ms / volatile as u64
            } else {
                0
            };
            field(
                text,
                &format!("db{db}"),
                format!("keys={keys},expires={volatile},avg_ttl={avg_ttl_ms}"),
            );
        }
    }
}

/// Client-side caching's events (INFO fallow): what the tracking table and invalidations did.
fn tracking_fields(ctx: &Ctx, text: &mut String) {
    let tracking = &ctx.server.tracking;
    let stats = &tracking.stats;
    field(text, "tracking_table_bytes", tracking.memory_bytes());
    use fallow_store::changes::{CHANGES_DROPPED, CHANGES_RECORDED};
    for (name, counter) in [
        ("tracking_keys_remembered", &stats.keys_remembered),
        ("tracking_invalidations_sent", &stats.invalidations_sent),
        ("tracking_flush_invalidations", &stats.flush_invalidations),
        ("tracking_table_evictions", &stats.table_evictions),
        ("tracking_broadcasts_sent", &stats.broadcasts_sent),
        ("tracking_redirects_broken", &stats.redirects_broken),
        ("tracking_messages_dropped", &stats.messages_dropped),
        ("key_changes_recorded", &CHANGES_RECORDED),
        ("key_changes_dropped", &CHANGES_DROPPED),
    ] {
        field(text, name, counter.load(Ordering::Relaxed));
    }
}

/// MONITOR's and the latency monitor's counters (INFO fallow).
fn introspection_fields(ctx: &Ctx, text: &mut String) {
    let monitors = &ctx.server.monitors;
    let latency = &ctx.server.latency;
    for (name, value) in [
        ("monitors", monitors.count() as u64),
        (
            "monitor_lines_sent",
            monitors.lines_sent.load(Ordering::Relaxed),
        ),
        (
            "monitors_dropped_slow",
            monitors.dropped_slow.load(Ordering::Relaxed),
        ),
        (
            "latency_samples_recorded",
            latency.samples_recorded.load(Ordering::Relaxed),
        ),
        (
            "latency_samples_dropped",
            latency.samples_dropped.load(Ordering::Relaxed),
        ),
    ] {
        field(text, name, value);
    }
}

fn fallow_section(ctx: &Ctx, totals: &ShardTotals, text: &mut String) {
    let config = ctx.server.config.read();
    text.push_str("# Fallow\r\n");
    field(text, "shards", ctx.server.store.shard_count());
    field(text, "threads", config.threads);
    field(text, "segment_size", config.segment_size_bytes);
    field(text, "segments", totals.segments);
    field(text, "segments_mapped_bytes", totals.mapped_bytes);
    field(text, "segments_dead_bytes", totals.dead_bytes);
    field(text, "segments_mapped_total", totals.stats.segments_mapped);
    field(
        text,
        "segments_unmapped_total",
        totals.stats.segments_unmapped,
    );
    field(text, "segments_reused_total", totals.stats.segments_reused);
    field(text, "segments_spare_bytes", totals.spare_bytes);
    field(text, "compacted_segments", totals.stats.compacted_segments);
    field(text, "compacted_bytes", totals.stats.compacted_bytes);
    let pubsub = &ctx.server.pubsub;
    field(
        text,
        "pubsub_messages_published",
        pubsub.messages_published.load(Ordering::Relaxed),
    );
    field(
        text,
        "pubsub_slow_subscribers_dropped",
        pubsub.subscribers_dropped_slow.load(Ordering::Relaxed),
    );
    tracking_fields(ctx, text);
    field(
        text,
        "keyspace_notifications_published",
        ctx.server.notify.messages_published.load(Ordering::Relaxed),
    );
    introspection_fields(ctx, text);
    field(text, "memcache_port", config.memcache_port);
    drop(config);
    for (name, value) in ctx
        .server
        .memcache_gate
        .info_fields(ctx.server.config.read().memcache_auth, &ctx.server.memcache)
    {
        field(text, name, value);
    }
}

/// Error replies by prefix, as Redis 7 reports them (`errorstat_ERR:count=2`).
fn errorstats_section(ctx: &Ctx, text: &mut String) {
    text.push_str("# Errorstats\r\n");
    for (prefix, count) in ctx.server.stats.errors.counts() {
        field(
            text,
            &format!("errorstat_{prefix}"),
            format!("count={count}"),
        );
    }
}

fn commandstats_section(ctx: &Ctx, text: &mut String) {
    text.push_str("# Commandstats\r\n");
    for (spec, (calls, micros)) in table().iter().zip(&ctx.server.command_stats) {
        let calls = calls.load(Ordering::Relaxed);
        if calls == 0 {
            continue;
        }
        let micros = micros.load(Ordering::Relaxed);
        field(
            text,
            &format!("cmdstat_{}", spec.name),
            format!(
                "calls={calls},usec={micros},usec_per_call={:.2},rejected_calls=0,failed_calls=0",
                micros as f64 / calls as f64
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_sections_resolve() {
        assert_eq!(requested_sections(&[b"memory"]), vec!["memory"]);
        assert_eq!(
            requested_sections(&[b"KEYSPACE", b"server"]),
            vec!["server", "keyspace"]
        );
        let default = requested_sections(&[]);
        assert!(default.contains(&"keyspace") && !default.contains(&"commandstats"));
        assert!(requested_sections(&[b"all"]).contains(&"commandstats"));
        assert!(requested_sections(&[b"nosuchsection"]).is_empty());
    }
}
