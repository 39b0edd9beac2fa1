//! Server commands: INFO CONFIG COMMAND TIME LASTSAVE SAVE BGSAVE MEMORY LATENCY DEBUG SLOWLOG SHUTDOWN
//! ROLE MONITOR. fallow keeps no snapshots and no slow log; those commands answer well-formed but empty.
use super::flags::*;
use super::{
    is, key_positions, lookup, parse_float, parse_int, spec, subcommand_error, table, CommandSpec,
    Ctx, Group, Keys, NOT_INTEGER, NO_SUCH_KEY, SYNTAX,
};
use fallow_store::shard::ShardStats;
use fallow_store::{keyspace, Shard};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

const ADMIN_FLAGS: u32 = ADMIN | NOSCRIPT | LOADING | STALE;

pub const COMMANDS: &[CommandSpec] = &[
    spec(
        "info",
        -1,
        LOADING | STALE,
        Keys::None,
        Group::Server,
        "Get information and statistics about the server",
        info,
    ),
    spec(
        "config",
        -2,
        ADMIN_FLAGS,
        Keys::None,
        Group::Server,
        "A container for server configuration commands",
        config,
    ),
    spec(
        "command",
        -1,
        LOADING | STALE,
        Keys::None,
        Group::Server,
        "Get array of command details",
        command,
    ),
    spec(
        "time",
        1,
        LOADING | STALE | FAST,
        Keys::None,
        Group::Server,
        "Return the current server time",
        time,
    ),
    spec(
        "lastsave",
        1,
        LOADING | STALE | FAST,
        Keys::None,
        Group::Server,
        "The Unix time the server started (fallow never saves to disk)",
        lastsave,
    ),
    spec(
        "save",
        1,
        ADMIN | NOSCRIPT,
        Keys::None,
        Group::Server,
        "Refused (-ERR fallow keeps no snapshots): data lives in memory only",
        no_snapshots,
    ),
    spec(
        "bgsave",
        -1,
        ADMIN | NOSCRIPT,
        Keys::None,
        Group::Server,
        "Refused (-ERR fallow keeps no snapshots): data lives in memory only",
        no_snapshots,
    ),
    spec(
        "bgrewriteaof",
        1,
        ADMIN | NOSCRIPT,
        Keys::None,
        Group::Server,
        "Refused (-ERR fallow keeps no snapshots): there is no append-only file",
        no_snapshots,
    ),
    spec(
        "memory",
        -2,
        READONLY,
        Keys::Custom(memory_keys),
        Group::Server,
        "A container for memory diagnostics commands",
        memory,
    ),
    spec(
        "latency",
        -2,
        ADMIN_FLAGS,
        Keys::None,
        Group::Server,
        "A container for latency diagnostics commands",
        latency,
    ),
    spec(
        "debug",
        -2,
        ADMIN_FLAGS,
        Keys::Custom(debug_keys),
        Group::Server,
        "A container for debugging commands",
        debug,
    ),
    spec(
        "slowlog",
        -2,
        ADMIN | LOADING | STALE,
        Keys::None,
        Group::Server,
        "A container for slow log commands",
        slowlog,
    ),
    spec(
        "shutdown",
        -1,
        ADMIN_FLAGS | NO_MULTI,
        Keys::None,
        Group::Server,
        "Shut down the server; nothing is saved (SAVE/NOSAVE are accepted and ignored)",
        shutdown,
    ),
    spec(
        "role",
        1,
        NOSCRIPT | LOADING | STALE | FAST,
        Keys::None,
        Group::Server,
        "Return the role of the instance in the context of replication",
        role,
    ),
    spec(
        "monitor",
        1,
        ADMIN_FLAGS,
        Keys::None,
        Group::Server,
        "Refused (-ERR MONITOR is not supported by fallow)",
        monitor,
    ),
];

/// Last sample of the command counter, for instantaneous_ops_per_sec: (when, commands, rate).
static OPS_SAMPLE: parking_lot::Mutex<Option<(std::time::Instant, u64, u64)>> =
    parking_lot::Mutex::new(None);

// ----- shared helpers -----------------------------------------------------------------------------

/// A HELP reply as Redis writes it: a header, the lines, and the HELP entry, as status replies.
pub fn help_reply(ctx: &mut Ctx, command: &str, lines: &[&str]) {
    ctx.out.array_len(lines.len() + 3);
    ctx.out.simple(&format!(
        "{command} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    ));
    for line in lines {
        ctx.out.simple(line);
    }
    ctx.out.simple("HELP");
    ctx.out.simple("    Print this help.");
}

/// Error for a known subcommand given the wrong number of arguments.
fn subcommand_arity_error(ctx: &mut Ctx, command: &str, sub: &[u8]) {
    let sub = String::from_utf8_lossy(sub).to_ascii_lowercase();
    ctx.out
        .error(&super::arity_error(&format!("{command}|{sub}")));
}

/// Visits every shard: through the locks the command holds when it holds them all (inside EXEC),
/// otherwise locking one shard at a time, so INFO never stalls the whole store.
pub(super) fn for_each_shard(ctx: &mut Ctx, mut visit: impl FnMut(&mut Shard)) {
    if ctx.guards.holds_all() {
        ctx.guards.iter_mut().for_each(visit);
    } else {
        let store = &ctx.server.store;
        for index in 0..store.shard_count() {
            visit(&mut store.lock(index));
        }
    }
}

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
    let addresses: Vec<usize> = (0..databases).map(|db| ctx.db_at(db)).collect();
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
        totals.spare_bytes += shard.spare_bytes();
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

/// Bytes as Redis's bytesToHuman writes them: `512B`, `1.50K`, `2.00M`, `1.00G`.
pub fn human_bytes(bytes: usize) -> String {
    const UNITS: [(f64, &str); 5] = [
        (1024.0, "K"),
        (1048576.0, "M"),
        (1073741824.0, "G"),
        (1099511627776.0, "T"),
        (1125899906842624.0, "P"),
    ];
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    let value = bytes as f64;
    let (divisor, unit) = UNITS
        .iter()
        .rev()
        .find(|(divisor, _)| value >= *divisor)
        .copied()
        .unwrap_or(UNITS[0]);
    format!("{:.2}{unit}", value / divisor)
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

// ----- INFO ------------------------------------------------------------------------------------------

/// Sections INFO prints without arguments, in order.
const DEFAULT_SECTIONS: [&str; 13] = [
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "cluster",
    "keyspace",
    "fallow",
    "elastic",
    "tenants",
    "txn",
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
        .chain(std::iter::once("commandstats"))
    {
        let asked = wanted.iter().any(|wanted| {
            wanted == name
                || wanted == "all"
                || wanted == "everything"
                || (wanted == "default" && name != "commandstats")
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

fn info(ctx: &mut Ctx, args: &[&[u8]]) {
    let text = info_text(ctx, &requested_sections(&args[1..]));
    ctx.out.verbatim("txt", text.as_bytes());
}

fn info_text(ctx: &mut Ctx, sections: &[&str]) -> String {
    let needs_shards = sections
        .iter()
        .any(|name| matches!(*name, "memory" | "stats" | "keyspace" | "fallow"));
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
            "tenants" => super::tenant::info_section(ctx, &mut text),
            "txn" => crate::txn::info_section(ctx.server, &mut text),
            "commandstats" => commandstats_section(ctx, &mut text),
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
    field(
        text,
        "redis_version",
        super::connection::REDIS_COMPATIBLE_VERSION,
    );
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
    field(text, "tracking_clients", 0);
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

/// used_memory as INFO and MEMORY STATS report it; also moves the peak.
fn used_memory(ctx: &Ctx) -> (usize, usize) {
    let overhead = overhead_bytes(ctx);
    let (used, peak) = ctx.server.store.memory.sample_peak();
    (used + overhead, peak + overhead)
}

fn memory_section(ctx: &Ctx, totals: &ShardTotals, text: &mut String) {
    let (used, peak) = used_memory(ctx);
    let dataset = ctx.server.store.used_bytes();
    let rss = rss_bytes();
    let maxmemory = ctx.server.store.maxmemory_bytes();
    text.push_str("# Memory\r\n");
    field(text, "used_memory", used);
    field(text, "used_memory_human", human_bytes(used));
    field(text, "used_memory_rss", rss);
    field(text, "used_memory_rss_human", human_bytes(rss));
    field(text, "used_memory_peak", peak);
    field(text, "used_memory_peak_human", human_bytes(peak));
    field(text, "used_memory_startup", used - dataset);
    field(text, "used_memory_dataset", dataset);
    field(text, "maxmemory", maxmemory);
    field(text, "maxmemory_human", human_bytes(maxmemory));
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
    field(text, "fallow_segments_mapped_bytes", totals.mapped_bytes);
    field(text, "fallow_segments_dead_bytes", totals.dead_bytes);
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
        ctx.server.pubsub.channels(None).len(),
    );
    field(text, "pubsub_patterns", ctx.server.pubsub.pattern_count());
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

fn fallow_section(ctx: &Ctx, totals: &ShardTotals, text: &mut String) {
    let config = ctx.server.config.read();
    text.push_str("# Fallow\r\n");
    field(text, "shards", ctx.server.store.shard_count());
    field(text, "threads", config.threads);
    field(text, "segment_size", config.segment_size);
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
    field(text, "memcache_port", config.memcache_port);
    drop(config);
    for (name, value) in ctx.server.memcache_gate.info_fields(ctx.server) {
        field(text, name, value);
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

// ----- CONFIG ----------------------------------------------------------------------------------------

fn config(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"get", 3..) => config_get(ctx, &args[2..]),
        (b"set", len) if len >= 4 && len.is_multiple_of(2) => config_set(ctx, &args[2..]),
        (b"resetstat", 2) => {
            reset_stats(ctx);
            ctx.out.ok();
        }
        (b"rewrite", 2) => {
            if config_file(ctx).is_empty() {
                ctx.out
                    .error("ERR The server is running without a config file");
            } else {
                ctx.out
                    .error("ERR fallow does not rewrite its TOML config file; edit it and restart");
            }
        }
        (b"help", 2) => help_reply(
            ctx,
            "CONFIG",
            &[
                "GET <pattern>",
                "    Return parameters matching the glob-like <pattern> and their values.",
                "SET <directive> <value>",
                "    Set the configuration <directive> to <value>.",
                "RESETSTAT",
                "    Reset statistics reported by the INFO command.",
                "REWRITE",
                "    Rewrite the configuration file.",
            ],
        ),
        (b"get" | b"set" | b"resetstat" | b"rewrite" | b"help", _) => {
            subcommand_arity_error(ctx, "config", &sub)
        }
        _ => subcommand_error(ctx, args),
    }
}

/// Does a CONFIG GET pattern match a setting name? Case-insensitive, like Redis.
fn config_matches(pattern: &[u8], name: &str) -> bool {
    fallow_store::glob::matches(&pattern.to_ascii_lowercase(), name.as_bytes())
}

fn config_get(ctx: &mut Ctx, patterns: &[&[u8]]) {
    let entries = ctx.server.config.read().entries();
    let matched: Vec<&(&str, String)> = entries
        .iter()
        .filter(|(name, _)| patterns.iter().any(|pattern| config_matches(pattern, name)))
        .collect();
    ctx.out.map_len(matched.len());
    for (name, value) in matched {
        ctx.out.bulk(name.as_bytes());
        ctx.out.bulk(value.as_bytes());
    }
}

/// Applies every pair or none (Redis 7 CONFIG SET is atomic).
fn config_set(ctx: &mut Ctx, pairs: &[&[u8]]) {
    let mut updated = ctx.server.config.read().clone();
    let mut seen: Vec<String> = Vec::new();
    for pair in pairs.chunks(2) {
        let name = String::from_utf8_lossy(pair[0]).to_ascii_lowercase();
        let value = String::from_utf8_lossy(pair[1]);
        if seen.contains(&name) {
            return ctx.out.error(&format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - duplicate parameter"
            ));
        }
        if name == "memcache-tenant" {
            let allowed = crate::net::memcache::auth::check_memcache_tenant_change(
                ctx.server,
                &ctx.conn.user,
            );
            if let Err(denied) = allowed {
                crate::acl::log::note_denial(
                    ctx.server,
                    &ctx.conn.handle,
                    crate::acl::log::Reason::Command,
                    crate::acl::log::Context::of_multi(ctx.in_exec),
                    b"config|set",
                    &ctx.conn.user,
                );
                return ctx.out.error(&denied);
            }
        }
        if let Err(message) = updated.set(&name, &value) {
            let text = if message.starts_with("Unknown option") {
                format!("ERR {message} - '{name}'")
            } else {
                format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {message}")
            };
            return ctx.out.error(&text);
        }
        seen.push(name);
    }
    if let Err(message) = updated.validate() {
        return ctx.out.error(&format!("ERR CONFIG SET failed - {message}"));
    }
    if updated.maxclients > ctx.server.config.read().maxclients {
        // Raises the open-file limit if it can; refuses what the limit cannot hold.
        if let Err(message) = crate::fdlimit::check_runtime(updated.maxclients) {
            return ctx.out.error(&format!(
                "ERR CONFIG SET failed (possibly related to argument 'maxclients') - {message}"
            ));
        }
    }
    let old_tenant = std::mem::replace(&mut *ctx.server.config.write(), updated).memcache_tenant;
    let new_tenant = ctx.server.config.read().memcache_tenant.clone();
    if old_tenant != new_tenant {
        let user = &ctx.conn.user;
        tracing::warn!(%user, old = %old_tenant, new = %new_tenant, "memcache-tenant changed");
    }
    ctx.server.config_changed();
    ctx.out.ok();
}

fn reset_stats(ctx: &mut Ctx) {
    let stats = &ctx.server.stats;
    for counter in [
        &stats.connections_received,
        &stats.connections_rejected,
        &stats.commands_processed,
        &stats.net_input_bytes,
        &stats.net_output_bytes,
        &stats.protocol_errors,
        &stats.unknown_commands,
        &stats.error_replies,
        &stats.oom_rejections,
        &stats.protected_mode_rejections,
        &ctx.server.pubsub.messages_published,
        &ctx.server.pubsub.subscribers_dropped_slow,
        &ctx.server.clients_memory.output_limit_disconnections,
        &ctx.server.clients_memory.output_limit_refusals,
        &ctx.server.clients_memory.evicted_clients,
    ] {
        counter.store(0, Ordering::Relaxed);
    }
    ctx.server.acl_log.denials.reset();
    for (calls, micros) in &ctx.server.command_stats {
        calls.store(0, Ordering::Relaxed);
        micros.store(0, Ordering::Relaxed);
    }
    ctx.server
        .store
        .memory
        .peak_bytes
        .store(0, Ordering::Relaxed);
    for_each_shard(ctx, |shard| {
        shard.stats.keyspace_hits = 0;
        shard.stats.keyspace_misses = 0;
        shard.stats.expired_keys = 0;
        shard.stats.evicted_keys = 0;
    });
}

// ----- COMMAND ---------------------------------------------------------------------------------------

fn command(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len() == 1 {
        return command_infos(ctx, &[]);
    }
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"count", 2) => ctx.out.int(table().len() as i64),
        (b"info", _) => command_infos(ctx, &args[2..]),
        (b"docs", _) => command_docs(ctx, &args[2..]),
        (b"list", 2 | 5) => command_list(ctx, args),
        (b"getkeys", 3..) => command_getkeys(ctx, &args[2..]),
        (b"help", 2) => help_reply(
            ctx,
            "COMMAND",
            &[
                "(no subcommand)",
                "    Return details about all commands.",
                "COUNT",
                "    Return the total number of commands in this server.",
                "LIST [FILTERBY (MODULE <module-name>|ACLCAT <category>|PATTERN <pattern>)]",
                "    Return a list of all commands in this server.",
                "INFO [<command-name> ...]",
                "    Return details about multiple commands.",
                "DOCS [<command-name> ...]",
                "    Return documentation details about multiple commands.",
                "GETKEYS <full-command>",
                "    Return the keys from a full command.",
            ],
        ),
        (b"count" | b"list" | b"getkeys" | b"help", _) => {
            subcommand_arity_error(ctx, "command", &sub)
        }
        _ => subcommand_error(ctx, args),
    }
}

/// (first, last, step) of a command's keys as COMMAND INFO reports them.
fn key_range(spec: &CommandSpec) -> (i64, i64, i64) {
    match spec.keys {
        Keys::Range { first, last, step } => (first as i64, last as i64, step as i64),
        Keys::None | Keys::All | Keys::Custom(_) => (0, 0, 0),
    }
}

fn write_command_info(ctx: &mut Ctx, spec: &CommandSpec) {
    let out = &mut *ctx.out;
    out.array_len(10);
    out.bulk(spec.name.as_bytes());
    out.int(spec.arity as i64);
    let mut flag_names: Vec<&str> = NAMES
        .iter()
        .filter(|(flag, _)| spec.flags & flag != 0)
        .map(|(_, name)| *name)
        .collect();
    if matches!(spec.keys, Keys::Custom(_)) {
        flag_names.push("movablekeys");
    }
    out.set_len(flag_names.len());
    for name in flag_names {
        out.simple(name);
    }
    let (first, last, step) = key_range(spec);
    out.int(first);
    out.int(last);
    out.int(step);
    let categories = spec.categories();
    out.set_len(categories.len());
    for category in categories {
        out.simple(&format!("@{category}"));
    }
    out.set_len(0); // tips
    out.array_len(0); // key specs
    out.array_len(0); // subcommands
}

fn command_infos(ctx: &mut Ctx, names: &[&[u8]]) {
    if names.is_empty() {
        ctx.out.array_len(table().len());
        for spec in table() {
            write_command_info(ctx, spec);
        }
        return;
    }
    ctx.out.array_len(names.len());
    for name in names {
        match lookup(name) {
            Some((_, spec)) => write_command_info(ctx, spec),
            None => ctx.out.nil_array(),
        }
    }
}

fn command_docs(ctx: &mut Ctx, names: &[&[u8]]) {
    let specs: Vec<&CommandSpec> = if names.is_empty() {
        table().to_vec()
    } else {
        names
            .iter()
            .filter_map(|name| lookup(name).map(|(_, spec)| spec))
            .collect()
    };
    ctx.out.map_len(specs.len());
    for spec in specs {
        ctx.out.bulk(spec.name.as_bytes());
        ctx.out.map_len(3);
        ctx.out.bulk(b"summary");
        ctx.out.bulk(spec.summary.as_bytes());
        // fallow does not track the Redis version that introduced each command; it answers with the
        // fallow version that has it.
        ctx.out.bulk(b"since");
        ctx.out.bulk(env!("CARGO_PKG_VERSION").as_bytes());
        ctx.out.bulk(b"group");
        ctx.out.bulk(spec.group.docs_group().as_bytes());
    }
}

fn command_list(ctx: &mut Ctx, args: &[&[u8]]) {
    let filter: Box<dyn Fn(&CommandSpec) -> bool> = if args.len() == 2 {
        Box::new(|_| true)
    } else if !is(args[2], "filterby") {
        return ctx.out.error(SYNTAX);
    } else if is(args[3], "module") {
        Box::new(|_| false)
    } else if is(args[3], "aclcat") {
        let category = String::from_utf8_lossy(args[4]).to_ascii_lowercase();
        Box::new(move |spec| spec.categories().contains(&category.as_str()))
    } else if is(args[3], "pattern") {
        let pattern = args[4].to_ascii_lowercase();
        Box::new(move |spec| fallow_store::glob::matches(&pattern, spec.name.as_bytes()))
    } else {
        return ctx.out.error(SYNTAX);
    };
    let names: Vec<&str> = table()
        .iter()
        .filter(|spec| filter(spec))
        .map(|spec| spec.name)
        .collect();
    ctx.out.bulks(names.iter().map(|name| name.as_bytes()));
}

fn command_getkeys(ctx: &mut Ctx, command: &[&[u8]]) {
    let Some((_, spec)) = lookup(command[0]) else {
        return ctx.out.error("ERR Invalid command specified");
    };
    let arity_ok = if spec.arity > 0 {
        command.len() == spec.arity as usize
    } else {
        command.len() >= spec.arity.unsigned_abs() as usize
    };
    if !arity_ok {
        return ctx
            .out
            .error("ERR Invalid number of arguments specified for command");
    }
    let positions = key_positions(spec, command);
    if positions.is_empty() {
        return ctx.out.error("ERR The command has no key arguments");
    }
    ctx.out
        .bulks(positions.iter().map(|&position| command[position]));
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

fn monitor(ctx: &mut Ctx, _args: &[&[u8]]) {
    ctx.out.error("ERR MONITOR is not supported by fallow");
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

// ----- MEMORY ----------------------------------------------------------------------------------------

fn memory_keys(args: &[&[u8]]) -> Vec<usize> {
    if args.len() >= 3 && is(args[1], "usage") {
        vec![2]
    } else {
        Vec::new()
    }
}

fn memory(ctx: &mut Ctx, args: &[&[u8]]) {
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
            // gives the emptied segments each shard keeps for reuse back to the OS
            for_each_shard(ctx, |shard| {
                shard.release_spare_segments();
            });
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
    let db = ctx.db();
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
        let addresses: Vec<usize> = crate::tenants::namespaces(ctx.server)
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

// ----- LATENCY, SLOWLOG, DEBUG -------------------------------------------------------------------------

fn latency(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"latest", 2) => ctx.out.array_len(0),
        (b"history", 3) => ctx.out.array_len(0),
        (b"reset", _) => ctx.out.int(0),
        (b"histogram", _) => ctx.out.map_len(0),
        (b"graph", 3) => ctx.out.error(&format!(
            "ERR No samples available for event '{}'",
            String::from_utf8_lossy(args[2])
        )),
        (b"doctor", 2) => ctx.out.verbatim(
            "txt",
            b"Dave, fallow does not run the latency monitor, so there is nothing to report.\n",
        ),
        (b"help", 2) => help_reply(
            ctx,
            "LATENCY",
            &[
                "DOCTOR",
                "    Return a human readable latency analysis report.",
                "GRAPH <event>",
                "    Return an ASCII latency graph for the <event> class.",
                "HISTORY <event>",
                "    Return time-latency samples for the <event> class.",
                "LATEST",
                "    Return the latest latency samples for all events.",
                "RESET [<event> ...]",
                "    Reset latency data of one or more <event> classes.",
                "HISTOGRAM [COMMAND ...]",
                "    Return a cumulative distribution of latencies in the format of a histogram.",
            ],
        ),
        (b"latest" | b"history" | b"graph" | b"doctor", _) => {
            subcommand_arity_error(ctx, "latency", &sub)
        }
        _ => subcommand_error(ctx, args),
    }
}

fn slowlog(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"get", 2) => ctx.out.array_len(0),
        (b"get", 3) => match parse_int(args[2]) {
            Some(count) if count >= -1 => ctx.out.array_len(0),
            _ => ctx
                .out
                .error("ERR count should be greater than or equal to -1"),
        },
        (b"len", 2) => ctx.out.int(0),
        (b"reset", 2) => ctx.out.ok(),
        (b"help", 2) => help_reply(
            ctx,
            "SLOWLOG",
            &[
                "GET [<count>]",
                "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
                "LEN",
                "    Return the length of the slowlog (fallow keeps no slow log: 0).",
                "RESET",
                "    Reset the slowlog.",
            ],
        ),
        (b"get" | b"len" | b"reset", _) => subcommand_arity_error(ctx, "slowlog", &sub),
        _ => subcommand_error(ctx, args),
    }
}

fn debug_keys(args: &[&[u8]]) -> Vec<usize> {
    if args.len() == 3 && is(args[1], "object") {
        vec![2]
    } else {
        Vec::new()
    }
}

/// Longest DEBUG SLEEP; it holds a worker thread.
const DEBUG_SLEEP_MAX_S: f64 = 600.0;

fn debug(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"sleep", 3) => {
            let Some(seconds) = parse_float(args[2]) else {
                return ctx.out.error(NOT_INTEGER);
            };
            let seconds = seconds.clamp(0.0, DEBUG_SLEEP_MAX_S);
            std::thread::sleep(std::time::Duration::from_secs_f64(seconds));
            ctx.out.ok();
        }
        (b"object", 3) => debug_object(ctx, args[2]),
        (b"help", 2) => help_reply(
            ctx,
            "DEBUG",
            &[
                "OBJECT <key>",
                "    Show low level info about the <key> and associated value.",
                "SLEEP <seconds>",
                "    Stop the server for <seconds>. Decimals allowed.",
            ],
        ),
        _ => subcommand_error(ctx, args),
    }
}

fn debug_object(ctx: &mut Ctx, key: &[u8]) {
    let db = ctx.db();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    let Some(info) = shard.peek(db, key, now) else {
        return ctx.out.error(NO_SUCH_KEY);
    };
    let encoding = shard.encoding(db, key, now).unwrap_or("raw");
    let bytes = shard.memory_usage(db, key, now).unwrap_or(0);
    let idle_s = shard.idle_s(&info, now);
    ctx.out.simple(&format!(
        "Value at:0x0 refcount:1 encoding:{encoding} serializedlength:{bytes} lru:{} lru_seconds_idle:{idle_s}",
        info.access_s
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_like_redis() {
        assert_eq!(human_bytes(0), "0B");
        assert_eq!(human_bytes(1023), "1023B");
        assert_eq!(human_bytes(1536), "1.50K");
        assert_eq!(human_bytes(100 << 20), "100.00M");
        assert_eq!(human_bytes(3 << 30), "3.00G");
    }

    #[test]
    fn config_glob_is_case_insensitive() {
        assert!(config_matches(b"maxmemory*", "maxmemory-policy"));
        assert!(config_matches(b"MAXMEMORY", "maxmemory"));
        assert!(!config_matches(b"maxmemory", "maxmemory-policy"));
        assert!(config_matches(b"*", "port"));
    }

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

    #[test]
    fn memory_usage_key_positions() {
        assert_eq!(memory_keys(&[b"memory", b"usage", b"k"]), vec![2]);
        assert!(memory_keys(&[b"memory", b"stats"]).is_empty());
        assert_eq!(debug_keys(&[b"debug", b"OBJECT", b"k"]), vec![2]);
    }
}
