//! Pub/sub commands: SUBSCRIBE PSUBSCRIBE UNSUBSCRIBE PUNSUBSCRIBE PUBLISH PUBSUB, and Redis 7's sharded
//! pub/sub: SSUBSCRIBE SUNSUBSCRIBE SPUBLISH (one server holds every shard: shard channels are a namespace
//! of their own). Confirmations are pushes (arrays in RESP2), one per channel, each carrying the
//! connection's running count (channels and patterns; shard channels counted apart, as Redis does).
use super::reply::help_reply;
use super::{subcommand_error, Ctx, Handler};
use crate::pubsub::Space;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("subscribe", subscribe),
    ("psubscribe", psubscribe),
    ("unsubscribe", unsubscribe),
    ("punsubscribe", punsubscribe),
    ("publish", publish),
    ("pubsub", pubsub),
    ("ssubscribe", ssubscribe),
    ("sunsubscribe", sunsubscribe),
    ("spublish", spublish),
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
    // A pattern subscription needs a literal grant of that pattern (or of every channel).
    names.iter().copied().find(|name| {
        !user
            .all_selectors()
            .any(|selector| selector.channel_allowed(name, patterns))
    })
}

/// The connection's subscriptions in `space`.
fn subscribed(
    conn: &mut crate::connection::ConnState,
    space: Space,
) -> &mut std::collections::HashSet<Vec<u8>> {
    match space {
        Space::Channels => &mut conn.subscriptions,
        Space::Patterns => &mut conn.patterns,
        Space::Shard => &mut conn.shard_channels,
    }
}

fn confirm(ctx: &mut Ctx, kind: &str, space: Space, name: Option<&[u8]>) {
    ctx.out.push_len(3);
    ctx.out.bulk(kind.as_bytes());
    match name {
        Some(name) => ctx.out.bulk(name),
        None => ctx.out.nil(),
    }
    let count = match space {
        Space::Shard => ctx.conn.shard_channels.len(),
        _ => ctx.conn.channel_subscription_count(),
    };
    ctx.out.int(count as i64);
}

fn subscribe(ctx: &mut Ctx, args: &[&[u8]]) {
    subscribe_to(ctx, &args[1..], Space::Channels);
}

fn psubscribe(ctx: &mut Ctx, args: &[&[u8]]) {
    subscribe_to(ctx, &args[1..], Space::Patterns);
}

fn ssubscribe(ctx: &mut Ctx, args: &[&[u8]]) {
    subscribe_to(ctx, &args[1..], Space::Shard);
}

fn subscribe_to(ctx: &mut Ctx, names: &[&[u8]], space: Space) {
    let pattern = space == Space::Patterns;
    if !channels_allowed(ctx, names, pattern) {
        return ctx.out.error(NOPERM_CHANNEL);
    }
    if ctx.conn.subscription_count() + names.len() > SUBSCRIPTIONS_MAX {
        return ctx
            .out
            .error("ERR too many subscriptions for one connection");
    }
    let kind = match space {
        Space::Channels => "subscribe",
        Space::Patterns => "psubscribe",
        Space::Shard => "ssubscribe",
    };
    for &name in names {
        if subscribed(ctx.conn, space).insert(name.to_vec()) {
            ctx.server
                .pubsub
                .subscribe(name, space, &ctx.conn.handle, &ctx.conn.pubsub_sender);
        }
        confirm(ctx, kind, space, Some(name));
    }
}

fn unsubscribe(ctx: &mut Ctx, args: &[&[u8]]) {
    unsubscribe_from(ctx, &args[1..], Space::Channels);
}

fn punsubscribe(ctx: &mut Ctx, args: &[&[u8]]) {
    unsubscribe_from(ctx, &args[1..], Space::Patterns);
}

fn sunsubscribe(ctx: &mut Ctx, args: &[&[u8]]) {
    unsubscribe_from(ctx, &args[1..], Space::Shard);
}

/// Drops the given subscriptions, or all of one kind when `names` is empty.
fn unsubscribe_from(ctx: &mut Ctx, names: &[&[u8]], space: Space) {
    let kind = match space {
        Space::Channels => "unsubscribe",
        Space::Patterns => "punsubscribe",
        Space::Shard => "sunsubscribe",
    };
    let names: Vec<Vec<u8>> = if names.is_empty() {
        subscribed(ctx.conn, space).iter().cloned().collect()
    } else {
        names.iter().map(|name| name.to_vec()).collect()
    };
    if names.is_empty() {
        return confirm(ctx, kind, space, None);
    }
    for name in names {
        if subscribed(ctx.conn, space).remove(&name) {
            ctx.server.pubsub.unsubscribe(&name, space, ctx.conn.id());
        }
        confirm(ctx, kind, space, Some(&name));
    }
}

fn publish(ctx: &mut Ctx, args: &[&[u8]]) {
    publish_in(ctx, args, Space::Channels)
}

fn spublish(ctx: &mut Ctx, args: &[&[u8]]) {
    publish_in(ctx, args, Space::Shard)
}

fn publish_in(ctx: &mut Ctx, args: &[&[u8]], space: Space) {
    if !channels_allowed(ctx, &args[1..2], false) {
        return ctx.out.error(NOPERM_CHANNEL);
    }
    let server = ctx.server;
    let memory = &server.clients_memory;
    let (receivers, over_clients_limit) = match space {
        Space::Shard => server.pubsub.publish_shard(args[1], args[2], memory),
        _ => server.pubsub.publish(args[1], args[2], memory),
    };
    if over_clients_limit {
        crate::clients::memory::enforce_maxmemory_clients(&server.clients, &server.clients_memory);
    }
    ctx.out.int(receivers as i64);
}

fn pubsub(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"channels", 2 | 3) => list_channels(ctx, Space::Channels, args.get(2).copied()),
        (b"numsub", _) => count_subscribers(ctx, Space::Channels, &args[2..]),
        (b"numpat", 2) => ctx.out.int(ctx.server.pubsub.pattern_count() as i64),
        (b"shardchannels", 2 | 3) => list_channels(ctx, Space::Shard, args.get(2).copied()),
        (b"shardnumsub", _) => count_subscribers(ctx, Space::Shard, &args[2..]),
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

/// PUBSUB CHANNELS / SHARDCHANNELS [pattern].
fn list_channels(ctx: &mut Ctx, space: Space, pattern: Option<&[u8]>) {
    let channels = ctx.server.pubsub.channels(space, pattern);
    ctx.out
        .bulks(channels.iter().map(|channel| channel.as_slice()));
}

/// PUBSUB NUMSUB / SHARDNUMSUB channel...: each channel with its subscriber count.
fn count_subscribers(ctx: &mut Ctx, space: Space, channels: &[&[u8]]) {
    ctx.out.array_len(channels.len() * 2);
    for &channel in channels {
        ctx.out.bulk(channel);
        let count = ctx.server.pubsub.subscriber_count(space, channel);
        ctx.out.int(count as i64);
    }
}
