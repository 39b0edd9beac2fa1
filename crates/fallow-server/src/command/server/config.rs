//! CONFIG GET, SET, RESETSTAT, REWRITE.
use super::config_file;
use crate::command::reply::{help_reply, subcommand_arity_error};
use crate::command::shards::for_each_shard;
use crate::command::{subcommand_error, Ctx};
use std::sync::atomic::Ordering;

pub(super) fn config(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"get", 3..) => config_get(ctx, &args[2..]),
        (b"set", len) if len >= 4 && len.is_multiple_of(2) => config_set(ctx, &args[2..]),
        (b"resetstat", 2) => {
            reset_stats(ctx);
            ctx.out.ok();
        }
        (b"rewrite", 2) => config_rewrite(ctx),
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
                ctx.server.note_acl_denial(
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
    ctx.server.stats.errors.reset();
    for (calls, micros) in &ctx.server.command_stats {
        calls.store(0, Ordering::Relaxed);
        micros.store(0, Ordering::Relaxed);
    }
    ctx.server.latency.histograms.reset();
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

/// CONFIG REWRITE: the running settings into the TOML file the server started from.
fn config_rewrite(ctx: &mut Ctx) {
    let path = config_file(ctx);
    if path.is_empty() {
        return ctx
            .out
            .error("ERR The server is running without a config file");
    }
    let config = ctx.server.config.read().clone();
    match crate::config::rewrite::rewrite(std::path::Path::new(&path), &config) {
        Ok(()) => ctx.out.ok(),
        Err(reason) => ctx
            .out
            .error(&format!("ERR Rewriting config file: {reason}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_glob_is_case_insensitive() {
        assert!(config_matches(b"maxmemory*", "maxmemory-policy"));
        assert!(config_matches(b"MAXMEMORY", "maxmemory"));
        assert!(!config_matches(b"maxmemory", "maxmemory-policy"));
        assert!(config_matches(b"*", "port"));
    }
}
