//! Client-side caching commands (CLIENT TRACKING, CACHING, TRACKINGINFO, GETREDIR, with Redis 7.0's
//! replies and errors) and the dispatcher's hooks into `crate::tracking`: keys read are remembered
//! after each command, keys changed are invalidated, and messages for the running connection are written
//! after its reply.
use super::reply::subcommand_arity_error;
use super::{is, Ctx, SYNTAX};
use crate::connection::ConnState;
use crate::server::Server;
use crate::tracking::{Current, Options, Outlet};
use fallow_proto::ReplyWriter;

/// CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p ...] [BCAST] [OPTIN] [OPTOUT] [NOLOOP].
pub fn client_tracking(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len() < 3 {
        return subcommand_arity_error(ctx, "client", args[1]);
    }
    let options = match parse_options(ctx, &args[3..]) {
        Ok(options) => options,
        Err(error) => return ctx.out.error(&error),
    };
    let id = ctx.conn.id();
    if is(args[2], "on") {
        if let Err(error) = check_enable(ctx.server, id, &options) {
            return ctx.out.error(&error);
        }
        let namespace = fallow_store::pool::Address::of(ctx.conn.address()).namespace;
        ctx.server.tracking.enable(id, namespace, &options);
        let conn = &mut ctx.conn.tracking;
        conn.on = true;
        conn.bcast = options.bcast;
        conn.optin = options.optin;
        conn.optout = options.optout;
        conn.redirect = options.redirect;
    } else if is(args[2], "off") {
        disable(ctx.server, ctx.conn);
    } else {
        return ctx.out.error(SYNTAX);
    }
    ctx.out.ok();
}

/// Turns the connection's tracking off (CLIENT TRACKING OFF, RESET).
pub fn disable(server: &Server, conn: &mut ConnState) {
    server.tracking.disable(conn.id());
    let deferred = std::mem::take(&mut conn.tracking.deferred);
    conn.tracking = Default::default();
    conn.tracking.deferred = deferred;
}

fn parse_options(ctx: &Ctx, args: &[&[u8]]) -> Result<Options, String> {
    let mut options = Options::default();
    let mut at = 0;
    while at < args.len() {
        let option = args[at];
        let has_value = at + 1 < args.len();
        if is(option, "redirect") && has_value {
            at += 1;
            if options.redirect != 0 {
                return Err("ERR A client can only redirect to a single other client".into());
            }
            let redirect = super::parse_int(args[at]).ok_or(super::NOT_INTEGER)?;
            // Checked now, though the client may go later: that is reported as a broken redirection.
            if redirect <= 0 || !ctx.server.clients.lock().contains_key(&(redirect as u64)) {
                return Err("ERR The client ID you want redirect to does not exist".into());
            }
            options.redirect = redirect as u64;
        } else if is(option, "bcast") {
            options.bcast = true;
        } else if is(option, "optin") {
            options.optin = true;
        } else if is(option, "optout") {
            options.optout = true;
        } else if is(option, "noloop") {
            options.noloop = true;
        } else if is(option, "prefix") && has_value {
            at += 1;
            options.prefixes.push(args[at].to_vec());
        } else {
            return Err(SYNTAX.into());
        }
        at += 1;
    }
    Ok(options)
}

/// Redis's checks before enabling, in its order.
fn check_enable(server: &Server, id: u64, options: &Options) -> Result<(), String> {
    if !options.bcast && !options.prefixes.is_empty() {
        return Err("ERR PREFIX option requires BCAST mode to be enabled".into());
    }
    let current = server.tracking.mode(id);
    if current
        .as_ref()
        .is_some_and(|mode| mode.bcast != options.bcast)
    {
        return Err("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.".into());
    }
    if options.bcast && (options.optin || options.optout) {
        return Err("ERR OPTIN and OPTOUT are not compatible with BCAST".into());
    }
    if options.optin && options.optout {
        return Err("ERR You can't specify both OPTIN mode and OPTOUT mode".into());
    }
    if current
        .as_ref()
        .is_some_and(|mode| (options.optin && mode.optout) || (options.optout && mode.optin))
    {
        return Err("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.".into());
    }
    if options.bcast {
        let existing = current.map(|mode| mode.prefixes).unwrap_or_default();
        check_prefix_overlaps(&existing, &options.prefixes)?;
    }
    Ok(())
}

/// Prefixes of one client must not overlap (one a prefix of another): a key would be sent twice.
fn check_prefix_overlaps(
    existing: &std::collections::BTreeSet<Vec<u8>>,
    prefixes: &[Vec<u8>],
) -> Result<(), String> {
    let overlap = |a: &[u8], b: &[u8]| a.starts_with(b) || b.starts_with(a);
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    for (index, prefix) in prefixes.iter().enumerate() {
        if let Some(old) = existing.iter().find(|old| overlap(old, prefix)) {
            return Err(format!(
                "ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                text(prefix),
                text(old)
            ));
        }
        if let Some(other) = prefixes[index + 1..]
            .iter()
            .find(|other| overlap(other, prefix))
        {
            return Err(format!(
                "ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                text(prefix),
                text(other)
            ));
        }
    }
    Ok(())
}

/// CLIENT CACHING YES|NO: the next command's reads are (OPTIN) or are not (OPTOUT) remembered.
pub fn client_caching(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len() != 3 {
        return subcommand_arity_error(ctx, "client", args[1]);
    }
    let tracking = &mut ctx.conn.tracking;
    if !tracking.on {
        return ctx.out.error("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled");
    }
    if is(args[2], "yes") {
        if !tracking.optin {
            return ctx.out.error(
                "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
            );
        }
    } else if is(args[2], "no") {
        if !tracking.optout {
            return ctx.out.error(
                "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
            );
        }
    } else {
        return ctx.out.error(SYNTAX);
    }
    tracking.caching = true;
    ctx.out.ok();
}

/// CLIENT TRACKINGINFO: flags, redirection and prefixes.
pub fn client_trackinginfo(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len() != 2 {
        return subcommand_arity_error(ctx, "client", args[1]);
    }
    let mode = ctx.server.tracking.mode(ctx.conn.id());
    let caching = ctx.conn.tracking.caching;
    let mut flags: Vec<&[u8]> = Vec::new();
    match &mode {
        None => flags.push(b"off"),
        Some(mode) => {
            flags.push(b"on");
            let named = [
                (mode.bcast, &b"bcast"[..]),
                (mode.optin, b"optin"),
                (mode.optin && caching, b"caching-yes"),
                (mode.optout, b"optout"),
                (mode.optout && caching, b"caching-no"),
                (mode.noloop, b"noloop"),
                (mode.broken_redirect, b"broken_redirect"),
            ];
            flags.extend(named.iter().filter(|(set, _)| *set).map(|(_, name)| *name));
        }
    }
    let out = &mut ctx.out;
    out.map_len(3);
    out.bulk(b"flags");
    out.set_len(flags.len());
    flags.iter().for_each(|flag| out.bulk(flag));
    out.bulk(b"redirect");
    out.int(mode.as_ref().map_or(-1, |mode| mode.redirect as i64));
    out.bulk(b"prefixes");
    let prefixes = mode.map(|mode| mode.prefixes).unwrap_or_default();
    out.bulks(prefixes.iter().map(|prefix| prefix.as_slice()));
}

/// CLIENT GETREDIR: the redirection's client id, 0 when tracking without one, -1 when not tracking.
pub fn client_getredir(ctx: &mut Ctx) {
    let mode = ctx.server.tracking.mode(ctx.conn.id());
    ctx.out.int(mode.map_or(-1, |mode| mode.redirect as i64));
}

fn outlet(server: &Server) -> Outlet<'_> {
    Outlet {
        pubsub: &server.pubsub,
        clients_memory: &server.clients_memory,
    }
}

fn current(conn: &mut ConnState) -> Current<'_> {
    Current {
        id: conn.handle.id,
        resp3: conn.resp3,
        subscribed: conn.subscription_count() > 0,
        deferred: &mut conn.tracking.deferred,
    }
}

/// After a command ran on its shards (also each command of EXEC or a script): what it changed is
/// invalidated, then the keys it read are remembered (in this order, as Redis: a read that expired a key
/// tracks the key afresh).
pub fn after_store_access(
    server: &Server,
    conn: &mut ConnState,
    spec: &super::CommandSpec,
    args: &[&[u8]],
) {
    if !server.tracking.any_on() {
        return;
    }
    invalidate_changes(server, conn);
    if conn.tracking.remembers_reads() && reads_keys(spec) {
        let namespace = fallow_store::pool::Address::of(conn.address()).namespace;
        let keys = super::key_positions(spec, args)
            .into_iter()
            .map(|at| args[at]);
        server.tracking.remember(conn.id(), namespace, keys);
    }
}

/// Whether a command's keys are remembered: read-only commands, but not read-only scripts (the commands
/// they run are) nor shard channels.
fn reads_keys(spec: &super::CommandSpec) -> bool {
    use super::flags::{PUBSUB, READONLY};
    spec.flags & READONLY != 0
        && spec.flags & PUBSUB == 0
        && !matches!(spec.name, "eval_ro" | "evalsha_ro" | "fcall_ro")
}

/// After a top-level command (after EXEC as a whole): the table is brought within its bounds, the
/// messages for this connection follow its reply, and CLIENT CACHING's one-command effect ends.
pub fn after_command(server: &Server, conn: &mut ConnState, out: &mut ReplyWriter, name: &[u8]) {
    if !conn.tracking.caching && conn.tracking.deferred.is_empty() && !server.tracking.any_on() {
        return;
    }
    // CACHING holds for the next command, all of MULTI's commands, and across other CLIENT calls.
    if !conn.in_multi() && !is(name, "client") {
        conn.tracking.caching = false;
    }
    if server.tracking.any_on() {
        // Changes made outside a handler's run (checks before it) are not left for another command.
        invalidate_changes(server, conn);
        server
            .tracking
            .limit_table(&outlet(server), Some(current(conn)));
    }
    write_deferred(conn, out);
}

/// After a batch of pipelined commands (Redis: once per event-loop iteration): the keys changed under
/// BCAST prefixes are broadcast.
pub fn after_batch(server: &Server, conn: &mut ConnState, out: &mut ReplyWriter) {
    if !server.tracking.any_on() {
        return;
    }
    server
        .tracking
        .broadcast(&outlet(server), Some(current(conn)));
    write_deferred(conn, out);
}

/// Invalidates what this thread's store calls changed, as `conn`'s doing.
fn invalidate_changes(server: &Server, conn: &mut ConnState) {
    let changes = fallow_store::changes::take_thread_changes();
    if !changes.is_empty() {
        server
            .tracking
            .changed(&outlet(server), &changes, Some(current(conn)));
    }
}

fn write_deferred(conn: &mut ConnState, out: &mut ReplyWriter) {
    for message in conn.tracking.deferred.drain(..) {
        crate::tracking::encode(out, &message);
    }
}

/// FLUSHDB, FLUSHALL: every tracking client is told to drop everything.
pub fn flushed(ctx: &mut Ctx) {
    if ctx.server.tracking.any_on() {
        ctx.server
            .tracking
            .flush(&outlet(ctx.server), Some(current(ctx.conn)));
    }
}

/// After store work that is no RESP client's command (housekeeping's expiry and eviction, memcached
/// commands) on this thread: its invalidations and broadcasts, nobody spared by NOLOOP.
pub fn invalidate_unattributed(server: &Server) {
    server.tracking.unattributed_changes(&outlet(server));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_must_not_overlap() {
        let none = Default::default();
        let prefixes = |list: &[&str]| {
            list.iter()
                .map(|p| p.as_bytes().to_vec())
                .collect::<Vec<_>>()
        };
        assert!(check_prefix_overlaps(&none, &prefixes(&["a", "b"])).is_ok());
        let error = check_prefix_overlaps(&none, &prefixes(&["b", "a", "bc"])).unwrap_err();
        assert!(
            error.contains("Prefix 'b' overlaps with another provided prefix 'bc'"),
            "{error}"
        );
        let existing = [b"ab".to_vec()].into_iter().collect();
        let error = check_prefix_overlaps(&existing, &prefixes(&["a"])).unwrap_err();
        assert!(
            error.contains("Prefix 'a' overlaps with an existing prefix 'ab'"),
            "{error}"
        );
        let error = check_prefix_overlaps(&none, &prefixes(&["", "x"])).unwrap_err();
        assert!(
            error.contains("Prefix '' overlaps"),
            "the empty prefix covers every key: {error}"
        );
    }
}
