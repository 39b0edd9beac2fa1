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
        // A name without its value: Redis checks the arity (4 or more) first, then the pairs.
        (b"set", len) if len >= 4 => ctx.out.error(crate::command::SYNTAX),
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

/// CONFIG GET with any number of patterns (Redis 7): each parameter once, under the first pattern that
/// names it. A pattern without glob characters is a name: it also finds hidden parameters, and the
/// reply uses it as given.
fn config_get(ctx: &mut Ctx, patterns: &[&[u8]]) {
    let entries = ctx.server.config.read().get_entries();
    let mut matched: Vec<(Vec<u8>, &str, &String)> = Vec::new();
    for &pattern in patterns {
        let lower = pattern.to_ascii_lowercase();
        let is_name = !pattern.iter().any(|byte| b"[*?".contains(byte));
        for (name, value, hidden) in &entries {
            let hit = if is_name {
                name.as_bytes() == lower.as_slice()
            } else {
                !hidden && config_matches(pattern, name)
            };
            if hit && !matched.iter().any(|(_, known, _)| known == name) {
                let shown = if is_name {
                    pattern.to_vec()
                } else {
                    name.as_bytes().to_vec()
                };
                matched.push((shown, name, value));
            }
        }
    }
    ctx.out.map_len(matched.len());
    for (shown, _, value) in matched {
        ctx.out.bulk(&shown);
        ctx.out.bulk(value.as_bytes());
    }
}

fn set_error(name: &str, message: &str) -> String {
    format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {message}")
}

/// Redis's first pass over CONFIG SET's names: unknown, immutable, protected, duplicate (the name as
/// given is the one the error quotes).
fn check_names(ctx: &Ctx, pairs: &[&[u8]]) -> Result<(), String> {
    let config = ctx.server.config.read();
    let mut seen: Vec<String> = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks(2) {
        let given = String::from_utf8_lossy(pair[0]);
        let name = given.to_ascii_lowercase();
        let settable = config.check_settable(&name);
        if let Err(message) = &settable {
            if message.starts_with("Unknown option") {
                return Err(format!("ERR {message} - '{given}'"));
            }
        }
        // Before fallow's own refusals: `dir` is protected in Redis (the reply Redis gives), fixed in
        // fallow (the reply once protected configs are enabled).
        if protected(&name)
            && !config.allows("enable-protected-configs", ctx.conn.handle.is_local())
        {
            return Err(set_error(&given, "can't set protected config"));
        }
        settable.map_err(|message| set_error(&given, &message))?;
        if seen.contains(&name) {
            return Err(set_error(&given, "duplicate parameter"));
        }
        seen.push(name);
    }
    Ok(())
}

/// Redis's PROTECTED_CONFIG (dir, dbfilename): CONFIG SET needs `enable-protected-configs`.
fn protected(name: &str) -> bool {
    crate::config::redis_params::find(name)
        .is_some_and(|row| row.is(crate::config::redis_params::PROTECTED))
}

/// Applies every pair or none (Redis 7 CONFIG SET is atomic).
fn config_set(ctx: &mut Ctx, pairs: &[&[u8]]) {
    if let Err(reply) = check_names(ctx, pairs) {
        return ctx.out.error(&reply);
    }
    let mut updated = ctx.server.config.read().clone();
    for pair in pairs.chunks(2) {
        let given = String::from_utf8_lossy(pair[0]);
        let name = given.to_ascii_lowercase();
        let value = String::from_utf8_lossy(pair[1]);
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
            return ctx.out.error(&set_error(&given, &message));
        }
    }
    if let Err(message) = updated.validate() {
        return ctx.out.error(&format!("ERR CONFIG SET failed - {message}"));
    }
    if updated.maxclients > ctx.server.config.read().maxclients {
        // Raises the open-file limit if it can; refuses what the limit cannot hold.
        if let Err(message) = crate::fdlimit::check_runtime(updated.maxclients) {
            return ctx.out.error(&set_error("maxclients", &message));
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
        &ctx.server.notify.messages_published,
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
