//! Pub/sub commands: SUBSCRIBE PSUBSCRIBE UNSUBSCRIBE PUNSUBSCRIBE PUBLISH PUBSUB. Confirmations are
//! pushes (arrays in RESP2), one per channel, each carrying the connection's running subscription count.
use super::reply::help_reply;
use super::{subcommand_error, Ctx, Handler};

pub const HANDLERS: &[(&str, Handler)] = &[
    ("subscribe", subscribe),
    ("psubscribe", psubscribe),
    ("unsubscribe", unsubscribe),
    ("punsubscribe", punsubscribe),
    ("publish", publish),
    ("pubsub", pubsub),
];

const NOPERM_CHANNEL: &str =
    "NOPERM this user has no permissions to access one of the channels used as arguments";

/// Channels plus patterns one connection may hold (each costs a registry entry).
const SUBSCRIPTIONS_MAX: usize = 100_000;

/// May the connection's user use these channels (or, with `patterns`, subscribe to these patterns)?
/// A denial is counted and logged to ACL LOG.
fn channels_allowed(ctx: &Ctx, names: &[&[u8]], patterns: bool) -> bool {
    let denied = first_denied_channel(ctx, names, patterns);
    if let Some(channel) = denied {
        ctx.server.note_acl_denial(
            &ctx.conn.handle,
            crate::acl::log::Reason::Channel,
            crate::acl::log::Context::of_multi(ctx.in_exec),
            channel,
            &ctx.conn.user,
        );
    }
    denied.is_none()
}

fn first_denied_channel<'a>(ctx: &Ctx, names: &[&'a [u8]], patterns: bool) -> Option<&'a [u8]> {
    let acl = ctx.server.acl.read();
    let Some(user) = acl.users.get(&ctx.conn.user) else {
        return names.first().copied();
    };
    names.iter().copied().find(|name| {
        !user.channel_patterns.iter().any(|allowed| {
            if patterns {
                // A pattern subscription needs a literal grant of that pattern (or of everything).
                allowed.as_slice() == b"*" || allowed.as_slice() == *name
            } else {
                fallow_store::glob::matches(allowed, name)
            }
        })
    })
}

fn confirm(ctx: &mut Ctx, kind: &str, name: Option<&[u8]>) {
    ctx.out.push_len(3);
    ctx.out.bulk(kind.as_bytes());
    match name {
        Some(name) => ctx.out.bulk(name),
        None => ctx.out.nil(),
    }
    ctx.out.int(ctx.conn.subscription_count() as i64);
}

fn subscribe(ctx: &mut Ctx, args: &[&[u8]]) {
    subscribe_to(ctx, &args[1..], false);
}

fn psubscribe(ctx: &mut Ctx, args: &[&[u8]]) {
    subscribe_to(ctx, &args[1..], true);
}

fn subscribe_to(ctx: &mut Ctx, names: &[&[u8]], pattern: bool) {
    if !channels_allowed(ctx, names, pattern) {
        return ctx.out.error(NOPERM_CHANNEL);
    }
    if ctx.conn.subscription_count() + names.len() > SUBSCRIPTIONS_MAX {
        return ctx
            .out
            .error("ERR too many subscriptions for one connection");
    }
    for &name in names {
        let set = if pattern {
            &mut ctx.conn.patterns
        } else {
            &mut ctx.conn.subscriptions
        };
        if set.insert(name.to_vec()) {
            ctx.server
                .pubsub
                .subscribe(name, pattern, &ctx.conn.handle, &ctx.conn.pubsub_sender);
        }
        confirm(
            ctx,
            if pattern { "psubscribe" } else { "subscribe" },
            Some(name),
        );
    }
}

fn unsubscribe(ctx: &mut Ctx, args: &[&[u8]]) {
    unsubscribe_from(ctx, &args[1..], false);
}

fn punsubscribe(ctx: &mut Ctx, args: &[&[u8]]) {
    unsubscribe_from(ctx, &args[1..], true);
}

/// Drops the given subscriptions, or all of one kind when `names` is empty.
fn unsubscribe_from(ctx: &mut Ctx, names: &[&[u8]], pattern: bool) {
    let kind = if pattern {
        "punsubscribe"
    } else {
        "unsubscribe"
    };
    let names: Vec<Vec<u8>> = if names.is_empty() {
        let set = if pattern {
            &ctx.conn.patterns
        } else {
            &ctx.conn.subscriptions
        };
        set.iter().cloned().collect()
    } else {
        names.iter().map(|name| name.to_vec()).collect()
    };
    if names.is_empty() {
        return confirm(ctx, kind, None);
    }
    for name in names {
        let set = if pattern {
            &mut ctx.conn.patterns
        } else {
            &mut ctx.conn.subscriptions
        };
        if set.remove(&name) {
            ctx.server.pubsub.unsubscribe(&name, pattern, ctx.conn.id());
        }
        confirm(ctx, kind, Some(&name));
    }
}

fn publish(ctx: &mut Ctx, args: &[&[u8]]) {
    if !channels_allowed(ctx, &args[1..2], false) {
        return ctx.out.error(NOPERM_CHANNEL);
    }
    let server = ctx.server;
    let (receivers, over_clients_limit) =
        server
            .pubsub
            .publish(args[1], args[2], &server.clients_memory);
    if over_clients_limit {
        crate::clients::memory::enforce_maxmemory_clients(&server.clients, &server.clients_memory);
    }
    ctx.out.int(receivers as i64);
}

fn pubsub(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"channels", 2 | 3) => {
            let channels = ctx.server.pubsub.channels(args.get(2).copied());
            ctx.out
                .bulks(channels.iter().map(|channel| channel.as_slice()));
        }
        (b"numsub", _) => {
            ctx.out.array_len((args.len() - 2) * 2);
            for &channel in &args[2..] {
                ctx.out.bulk(channel);
                ctx.out
                    .int(ctx.server.pubsub.subscriber_count(channel) as i64);
            }
        }
        (b"numpat", 2) => ctx.out.int(ctx.server.pubsub.pattern_count() as i64),
        // fallow has no cluster, so no shard channels.
        (b"shardchannels", 2 | 3) => ctx.out.array_len(0),
        (b"shardnumsub", _) => {
            ctx.out.array_len((args.len() - 2) * 2);
            for &channel in &args[2..] {
                ctx.out.bulk(channel);
                ctx.out.int(0);
            }
        }
        (b"help", 2) => help_reply(
            ctx,
            "PUBSUB",
            &[
                "CHANNELS [<pattern>]",
                "    Return the currently active channels matching a <pattern> (default: '*').",
                "NUMPAT",
                "    Return number of subscriptions to patterns.",
                "NUMSUB [<channel> ...]",
                "    Return the number of subscribers for the specified channels, excluding",
                "    pattern subscriptions(default: no channels).",
            ],
        ),
        (b"channels" | b"numpat" | b"shardchannels" | b"help", _) => ctx.out.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
            String::from_utf8_lossy(args[1])
        )),
        _ => subcommand_error(ctx, args),
    }
}
