//! The command table and dispatch. Each command family lives in its own file and contributes a slice of
//! `CommandSpec`s: name, arity, flags and key positions as data (as in Redis's command table), plus the
//! handler. Dispatch checks authentication, arity, MULTI queueing, pub/sub context, ACL permissions and
//! maxmemory, hands the commands of an open transaction to `txn::session`, locks the shards of the command's
//! keys, waits for transactions' locks on them (`txn`), and runs the handler, which writes its reply.
pub mod acl;
pub mod bag;
pub mod bulk;
pub mod connection;
pub mod elastic;
pub mod hash;
pub mod keys;
pub mod list;
pub mod pubsub;
pub mod server;
pub mod set;
pub mod string;
pub mod tenant;
pub mod topn;
pub mod transaction;
pub mod txn;
pub mod uid;
pub mod zset;

use crate::connection::ConnState;
use crate::server::Server;
use fallow_proto::ReplyWriter;
use fallow_store::types::CollectionType;
use fallow_store::{Guards, WrongType};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::LazyLock;

/// A command handler: parses its arguments (args[0] is the command name) and writes exactly one reply.
pub type Handler = fn(&mut Ctx, &[&[u8]]);

/// Command flags (Redis's command flags, as COMMAND INFO lists them).
pub mod flags {
    pub const WRITE: u32 = 1 << 0;
    pub const READONLY: u32 = 1 << 1;
    pub const DENYOOM: u32 = 1 << 2;
    pub const ADMIN: u32 = 1 << 3;
    pub const PUBSUB: u32 = 1 << 4;
    pub const NOSCRIPT: u32 = 1 << 5;
    pub const BLOCKING: u32 = 1 << 6;
    pub const LOADING: u32 = 1 << 7;
    pub const STALE: u32 = 1 << 8;
    pub const FAST: u32 = 1 << 9;
    pub const NO_AUTH: u32 = 1 << 10;
    /// Not queued inside MULTI: runs at once (EXEC, DISCARD, MULTI, WATCH, ...).
    pub const NO_MULTI: u32 = 1 << 11;
    /// Allowed while a RESP2 connection is subscribed.
    pub const SUBSCRIBE_CONTEXT: u32 = 1 << 12;
    pub const NAMES: [(u32, &str); 12] = [
        (WRITE, "write"),
        (READONLY, "readonly"),
        (DENYOOM, "denyoom"),
        (ADMIN, "admin"),
        (PUBSUB, "pubsub"),
        (NOSCRIPT, "noscript"),
        (BLOCKING, "blocking"),
        (LOADING, "loading"),
        (STALE, "stale"),
        (FAST, "fast"),
        (NO_AUTH, "no_auth"),
        (NO_MULTI, "no_multi"),
    ];
}

/// Where a command's keys are in its arguments; decides which shards it locks.
#[derive(Clone, Copy)]
pub enum Keys {
    /// No keys (connection and server commands).
    None,
    /// Every shard (KEYS, SCAN, FLUSHALL, DBSIZE, ...).
    All,
    /// Keys at first..=last stepping by step; a negative last counts from the end (-1 = last argument).
    Range { first: i32, last: i32, step: i32 },
    /// Positions computed from the arguments (commands with a numkeys argument).
    Custom(fn(&[&[u8]]) -> Vec<usize>),
}

/// Command families, which give the ACL categories.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    String,
    Keyspace,
    Hash,
    Set,
    SortedSet,
    List,
    /// TOPN.*: a scored set keeping its k best members.
    TopN,
    /// BAG.*: a summary bag (count, min, max, mean).
    Bag,
    PubSub,
    Transaction,
    Connection,
    Server,
}

impl Group {
    pub fn category(self) -> &'static str {
        match self {
            Group::String => "string",
            Group::Keyspace => "keyspace",
            Group::Hash => "hash",
            Group::Set => "set",
            Group::SortedSet => "sortedset",
            Group::List => "list",
            Group::TopN => "topn",
            Group::Bag => "bag",
            Group::PubSub => "pubsub",
            Group::Transaction => "transaction",
            Group::Connection => "connection",
            Group::Server => "server",
        }
    }

    /// Group name COMMAND DOCS reports.
    pub fn docs_group(self) -> &'static str {
        match self {
            Group::String => "string",
            Group::Keyspace => "generic",
            Group::Hash => "hash",
            Group::Set => "set",
            Group::SortedSet => "sorted-set",
            Group::List => "list",
            Group::TopN => "topn",
            Group::Bag => "bag",
            Group::PubSub => "pubsub",
            Group::Transaction => "transactions",
            Group::Connection => "connection",
            Group::Server => "server",
        }
    }
}

pub struct CommandSpec {
    /// Lower-case name.
    pub name: &'static str,
    /// Argument count including the name; negative = at least -arity.
    pub arity: i32,
    pub flags: u32,
    pub keys: Keys,
    pub group: Group,
    pub summary: &'static str,
    pub handler: Handler,
}

/// Shorthand for table rows: `spec("get", 2, READONLY | FAST, Keys::Range{..}, Group::String, "...", get)`.
pub const fn spec(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: Keys,
    group: Group,
    summary: &'static str,
    handler: Handler,
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        keys,
        group,
        summary,
        handler,
    }
}

/// Key spec for a command with one key at position 1.
pub const ONE_KEY: Keys = Keys::Range {
    first: 1,
    last: 1,
    step: 1,
};

static TABLE: LazyLock<Vec<&'static CommandSpec>> = LazyLock::new(|| {
    let families: [&'static [CommandSpec]; 18] = [
        string::COMMANDS,
        keys::COMMANDS,
        hash::COMMANDS,
        set::COMMANDS,
        zset::COMMANDS,
        list::COMMANDS,
        pubsub::COMMANDS,
        transaction::COMMANDS,
        txn::COMMANDS,
        connection::COMMANDS,
        server::COMMANDS,
        acl::COMMANDS,
        bulk::COMMANDS,
        elastic::COMMANDS,
        tenant::COMMANDS,
        topn::COMMANDS,
        bag::COMMANDS,
        uid::COMMANDS,
    ];
    let table: Vec<&'static CommandSpec> =
        families.iter().flat_map(|family| family.iter()).collect();
    for spec in &table {
        assert_eq!(
            spec.name,
            spec.name.to_ascii_lowercase(),
            "names are lower-case"
        );
        assert!(spec.arity != 0, "{} has an arity", spec.name);
    }
    table
});

type NameIndex = HashMap<&'static str, usize, foldhash::fast::RandomState>;

static BY_NAME: LazyLock<NameIndex> = LazyLock::new(|| {
    let mut by_name = NameIndex::default();
    for (index, spec) in TABLE.iter().enumerate() {
        let previous = by_name.insert(spec.name, index);
        assert!(previous.is_none(), "command {} defined twice", spec.name);
    }
    by_name
});

/// Every command, in a fixed order (indexes `Server::command_stats`).
pub fn table() -> &'static [&'static CommandSpec] {
    &TABLE
}

/// Finds a command by name, in any case.
pub fn lookup(name: &[u8]) -> Option<(usize, &'static CommandSpec)> {
    if name.len() > 32 {
        return None;
    }
    let mut lower = [0u8; 32];
    let lower = &mut lower[..name.len()];
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    let name = std::str::from_utf8(lower).ok()?;
    BY_NAME.get(name).map(|&index| (index, TABLE[index]))
}

/// Everything a handler may use while it runs. The guards have their own lifetime (that of the server)
/// so EXEC can run many commands on one set of locks, lending `conn` and `out` to each in turn.
pub struct Ctx<'a, 's> {
    pub server: &'s Server,
    pub conn: &'a mut ConnState,
    pub out: &'a mut ReplyWriter,
    /// The shards of the command's keys, locked for the whole command.
    pub guards: Guards<'s>,
    pub now_ms: u64,
    /// Inside EXEC: blocking commands must not block.
    pub in_exec: bool,
}

impl Ctx<'_, '_> {
    /// The keyspace address of the connection's selected database (its tenant and namespace).
    pub fn db(&self) -> usize {
        self.conn.address()
    }

    /// Makes room for a write about to add `additional_bytes` of data, before it allocates them: evicts
    /// as the policy allows; when they still would not fit, counts the refusal, writes the OOM reply and
    /// returns false.
    pub fn reserve_memory(&mut self, additional_bytes: usize) -> bool {
        let store = &self.server.store;
        if !store.would_exceed_maxmemory(additional_bytes)
            || self.guards.make_room_for(additional_bytes).is_ok()
        {
            return true;
        }
        self.server
            .stats
            .oom_rejections
            .fetch_add(1, Ordering::Relaxed);
        self.out
            .error(&oom_error(self.server, self.conn.tenant.tenant));
        false
    }

    /// The keyspace address of database `index` in the connection's namespace (MOVE, COPY DB,
    /// SWAPDB, FLUSHALL, INFO keyspace).
    pub fn db_at(&self, index: usize) -> usize {
        self.conn.tenant.address(index)
    }

    /// Room left in the client's output under its hard limit (`client-output-buffer-limit`), counting
    /// the replies of this batch not yet written; u64::MAX when unbounded.
    pub fn reply_budget(&self) -> u64 {
        match self.conn.output_limit().hard_bytes {
            0 => u64::MAX,
            hard => hard.saturating_sub(self.out.buf.len() as u64),
        }
    }

    /// Whether `more_bytes` of reply still fit under the client's output hard limit. If not, the reply
    /// begun at `reply_start` is dropped, the client gets an error instead, and the refusal is counted.
    /// Commands whose multi-value reply size is known from the store call this before building it.
    pub fn reply_fits(&mut self, reply_start: usize, more_bytes: u64) -> bool {
        let budget = self.reply_budget();
        let started = (self.out.buf.len() - reply_start) as u64;
        if more_bytes <= budget {
            return true;
        }
        self.out.buf.truncate(reply_start);
        self.refuse_reply(started + more_bytes);
        false
    }

    /// Answers with the error for a reply of `bytes` over the output hard limit, and counts it.
    pub fn refuse_reply(&mut self, bytes: u64) {
        let memory = &self.server.clients_memory;
        memory.output_limit_refusals.fetch_add(1, Ordering::Relaxed);
        self.out.error(&format!(
            "ERR reply of {bytes} bytes would exceed the client output buffer hard limit ({} bytes)",
            self.conn.output_limit().hard_bytes
        ));
    }
}

/// Bytes of one bulk string in a reply: the value, `$<len>\r\n` and `\r\n`.
pub fn bulk_reply_bytes(len: usize) -> u64 {
    len as u64 + 16
}

/// A reply that passes this many bytes while being built is sized in full before the rest is written.
pub const REPLY_SIZE_CHECK_BYTES: usize = 1 << 20;

/// Writes an array of the bulk strings `items()` yields (`count` of them), unless the whole would need
/// more than `budget` bytes (see `Ctx::reply_budget`): then nothing is written and Err holds the bytes
/// needed. Small replies are written in one pass; one that passes `REPLY_SIZE_CHECK_BYTES` is sized (a
/// second walk over its remaining items, copying nothing) before the rest is copied.
pub fn bulks_within<'i, I: Iterator<Item = &'i [u8]>>(
    out: &mut ReplyWriter,
    budget: u64,
    count: usize,
    items: impl Fn() -> I,
) -> Result<(), u64> {
    let start = out.buf.len();
    out.array_len(count);
    let mut sized = false;
    for (index, item) in items().enumerate() {
        if !sized && out.buf.len() - start > REPLY_SIZE_CHECK_BYTES {
            sized = true;
            let rest: u64 = items()
                .skip(index)
                .map(|item| bulk_reply_bytes(item.len()))
                .sum();
            let total = (out.buf.len() - start) as u64 + rest;
            if total > budget {
                out.buf.truncate(start);
                return Err(total);
            }
        }
        out.bulk(item);
    }
    Ok(())
}

// ----- collection access shared by the families ---------------------------------------------------

/// Reads the collection of type `T` at `key` (counting the hit or miss) and hands it, or None when the
/// key is missing, to `reply` with the reply writer; another type gets WRONGTYPE.
pub fn with_collection<T: CollectionType>(
    ctx: &mut Ctx,
    key: &[u8],
    reply: impl FnOnce(&mut ReplyWriter, Option<&T>),
) {
    let db = ctx.db();
    let now = ctx.now_ms;
    match ctx.guards.shard(key).read::<T>(db, key, now) {
        Ok(found) => reply(ctx.out, found),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

/// Runs `update` on the collection of type `T` at `key` (see `Shard::update`).
pub fn update_collection<T: CollectionType, R>(
    ctx: &mut Ctx,
    key: &[u8],
    create: bool,
    update: impl FnOnce(&mut T) -> R,
) -> Result<Option<R>, WrongType> {
    let db = ctx.db();
    let now = ctx.now_ms;
    ctx.guards
        .shard(key)
        .update::<T, R>(db, key, now, create, update)
}

/// Parses every argument as an i64, or None at the first that is not one.
pub fn parse_ints(args: &[&[u8]]) -> Option<Vec<i64>> {
    args.iter().map(|arg| parse_int(arg)).collect()
}

// ----- shared error texts and argument parsing ------------------------------------------------------

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub const NOT_FLOAT: &str = "ERR value is not a valid float";
pub const SYNTAX: &str = "ERR syntax error";
pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";
pub const NO_SUCH_KEY: &str = "ERR no such key";

pub fn parse_int(arg: &[u8]) -> Option<i64> {
    fallow_proto::resp::parse_i64(arg)
}

/// Parses a float the way Redis's strtold-based parsing does (`inf`, `-inf`, `+inf` allowed, NaN not).
pub fn parse_float(arg: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(arg).ok()?;
    if text.is_empty()
        || text.starts_with(char::is_whitespace)
        || text.ends_with(char::is_whitespace)
    {
        return None;
    }
    let value: f64 = match text.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ => text.parse().ok()?,
    };
    (!value.is_nan()).then_some(value)
}

/// Case-insensitive comparison of an argument with an option name.
pub fn is(arg: &[u8], option: &str) -> bool {
    arg.eq_ignore_ascii_case(option.as_bytes())
}

/// Error for a wrong argument count, as Redis words it.
pub fn arity_error(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
}

/// Error for an unknown subcommand.
pub fn subcommand_error(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = String::from_utf8_lossy(args.get(1).copied().unwrap_or_default());
    let command = String::from_utf8_lossy(args[0]).to_ascii_uppercase();
    ctx.out.error(&format!(
        "ERR unknown subcommand '{sub}'. Try {command} HELP."
    ));
}

fn unknown_command_error(args: &[&[u8]]) -> String {
    let mut text = format!(
        "ERR unknown command '{}', with args beginning with: ",
        String::from_utf8_lossy(&args[0][..args[0].len().min(128)])
    );
    for arg in args.iter().skip(1).take(16) {
        text.push_str(&format!(
            "'{}' ",
            String::from_utf8_lossy(&arg[..arg.len().min(128)])
        ));
    }
    text
}

/// The argument positions of a command's keys.
pub fn key_positions(spec: &CommandSpec, args: &[&[u8]]) -> Vec<usize> {
    match spec.keys {
        Keys::None | Keys::All => Vec::new(),
        Keys::Range { first, last, step } => {
            let last = if last < 0 {
                args.len() as i32 + last
            } else {
                last.min(args.len() as i32 - 1)
            };
            (first..=last)
                .step_by(step as usize)
                .map(|position| position as usize)
                .filter(|&position| position < args.len())
                .collect()
        }
        Keys::Custom(positions) => positions(args)
            .into_iter()
            .filter(|&position| position < args.len())
            .collect(),
    }
}

fn arity_ok(spec: &CommandSpec, argc: usize) -> bool {
    if spec.arity > 0 {
        argc == spec.arity as usize
    } else {
        argc >= (-spec.arity) as usize
    }
}

/// Runs one request. The reply (if any) is appended to `out`.
pub fn execute(server: &Server, conn: &mut ConnState, out: &mut ReplyWriter, args: &[&[u8]]) {
    debug_assert!(!args.is_empty());
    conn.commands_unreported += 1;
    let reply_start = out.buf.len();
    let Some((index, spec)) = lookup(args[0]) else {
        server
            .stats
            .unknown_commands
            .fetch_add(1, Ordering::Relaxed);
        conn.flag_multi_error();
        out.error(&unknown_command_error(args));
        return conn.apply_reply_mode(out, reply_start);
    };
    if !conn.authenticated && spec.flags & flags::NO_AUTH == 0 {
        conn.flag_multi_error();
        out.error("NOAUTH Authentication required.");
        return conn.apply_reply_mode(out, reply_start);
    }
    if !arity_ok(spec, args.len()) {
        conn.flag_multi_error();
        out.error(&arity_error(spec.name));
        return conn.apply_reply_mode(out, reply_start);
    }
    let unrestricted =
        conn.user == "default" && server.acl_default_unrestricted.load(Ordering::Relaxed);
    let context = crate::acl::log::Context::of_multi(conn.in_multi());
    if let Err(denied) = check_acl(server, conn, spec, args, unrestricted, context) {
        conn.flag_multi_error();
        out.error(&denied);
        return conn.apply_reply_mode(out, reply_start);
    }
    if conn.in_multi() && spec.flags & flags::NO_MULTI == 0 {
        return transaction::queue(conn, out, spec, args);
    }
    if conn.in_subscribe_context() && spec.flags & flags::SUBSCRIBE_CONTEXT == 0 {
        out.error(&format!(
            "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
            spec.name
        ));
        return;
    }
    let started = std::time::Instant::now();
    // TXN.*, RESET and QUIT end or act on the transaction itself
    let in_txn = conn.txn.is_some()
        && !spec.name.starts_with("txn.")
        && !matches!(spec.name, "reset" | "quit");
    if in_txn {
        crate::txn::session::run_in_txn(server, conn, out, spec, args);
    } else {
        run(server, conn, out, index, spec, args, false);
    }
    let micros = started.elapsed().as_micros() as u64;
    conn.record_command(server, index, micros);
    conn.last_command = spec.name;
    conn.apply_reply_mode(out, reply_start);
}

/// Whether the connection's user may still run a queued command (EXEC, TXN.COMMIT): permissions may have
/// changed since it was queued.
pub fn permitted_now(
    server: &Server,
    conn: &ConnState,
    spec: &CommandSpec,
    args: &[&[u8]],
) -> Result<(), String> {
    let unrestricted =
        conn.user == "default" && server.acl_default_unrestricted.load(Ordering::Relaxed);
    let context = crate::acl::log::Context::Multi;
    check_acl(server, conn, spec, args, unrestricted, context)
}

/// Err is the NOPERM reply; the denial is counted and logged to ACL LOG.
fn check_acl(
    server: &Server,
    conn: &ConnState,
    spec: &CommandSpec,
    args: &[&[u8]],
    unrestricted: bool,
    context: crate::acl::log::Context,
) -> Result<(), String> {
    if unrestricted {
        return Ok(());
    }
    let checked = server.acl.read().check(&conn.user, spec, args);
    checked.map_err(|denied| {
        crate::acl::log::note_denial(
            server,
            &conn.handle,
            denied.reason,
            context,
            &denied.object,
            &conn.user,
        );
        denied.reply
    })
}

/// Locks the command's shards, waits for transactions' locks on its records in a conflicting mode,
/// enforces maxmemory for commands that may grow memory, and runs it.
pub fn run(
    server: &Server,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    _index: usize,
    spec: &CommandSpec,
    args: &[&[u8]],
    in_exec: bool,
) {
    let guards = lock_shards(server, spec, args);
    // Checked with the shards locked: a transaction that locks a record later reads it after this command.
    // TXN.* act on the connection's own transaction (TXN.LOCK takes its locks), never as a plain command.
    let checks_txn_locks = !matches!(spec.keys, Keys::None | Keys::All)
        && !spec.name.starts_with("txn.")
        && (server.txns.any_locked() || conn.plain_locks.is_some());
    if checks_txn_locks {
        let requests =
            crate::txn::modes::requests(spec, args, conn.address(), server.txns.abstract_locks());
        match crate::txn::session::plain_access(server, conn, out, requests) {
            crate::txn::session::Claim::Run => {}
            _ => return,
        }
    }
    run_with_guards(server, conn, out, spec, args, guards, in_exec);
    if conn.plain_locks.is_some() && conn.lock_wait.is_none() {
        crate::txn::session::release_plain(server, conn);
    }
}

/// Runs a command without looking at transactions' locks: a transaction's own reads (it holds the locks).
pub fn run_unlocked_by_txns(
    server: &Server,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    spec: &CommandSpec,
    args: &[&[u8]],
    in_exec: bool,
) {
    let guards = lock_shards(server, spec, args);
    run_with_guards(server, conn, out, spec, args, guards, in_exec);
}

fn lock_shards<'s>(server: &'s Server, spec: &CommandSpec, args: &[&[u8]]) -> Guards<'s> {
    match spec.keys {
        Keys::All => server.store.lock_all(),
        // The common single-key case locks its shard without collecting key positions.
        Keys::Range {
            first: 1,
            last: 1,
            step: 1,
        } => server.store.lock_key(args[1]),
        _ => server.store.lock_keys(
            key_positions(spec, args)
                .into_iter()
                .map(|position| args[position]),
        ),
    }
}

/// Runs a command on shards already locked (EXEC holds every shard for all its commands).
pub fn run_with_guards<'s>(
    server: &'s Server,
    conn: &mut ConnState,
    out: &mut ReplyWriter,
    spec: &CommandSpec,
    args: &[&[u8]],
    mut guards: Guards<'s>,
    in_exec: bool,
) -> Guards<'s> {
    if spec.flags & flags::DENYOOM != 0 && !room_for_request(server, &mut guards, args) {
        server.stats.oom_rejections.fetch_add(1, Ordering::Relaxed);
        out.error(&oom_error(server, conn.tenant.tenant));
        return guards;
    }
    let errors_before = out.buf.len();
    let now_ms = conn.now_ms;
    let mut ctx = Ctx {
        server,
        conn,
        out,
        guards,
        now_ms,
        in_exec,
    };
    (spec.handler)(&mut ctx, args);
    if ctx.out.buf.get(errors_before) == Some(&b'-') {
        server.stats.error_replies.fetch_add(1, Ordering::Relaxed);
    }
    ctx.guards
}

/// Whether a command that may grow memory fits: the store with the request's own bytes (a cheap estimate
/// of what it adds: the values of a large SET, the members of an LPUSH/SADD/HSET/ZADD) stays under the
/// limit, after evicting as the policy allows.
fn room_for_request(server: &Server, guards: &mut Guards<'_>, args: &[&[u8]]) -> bool {
    let store = &server.store;
    if store.maxmemory_bytes() == 0 && store.pool_limit_bytes() == 0 {
        return true;
    }
    let request_bytes: usize = args[1..].iter().map(|arg| arg.len()).sum();
    !store.would_exceed_maxmemory(request_bytes) || guards.make_room_for(request_bytes).is_ok()
}

/// The reply to a write that found no room. In elastic mode (a pool limit is set) a persistent tenant
/// is told that the pool is full of persistent data: nothing evictable is left to make room with.
pub fn oom_error(server: &Server, tenant: fallow_store::TenantId) -> String {
    if server.store.pool_limit_bytes() != 0 {
        if let Some(spec) = server.store.tenant_spec(tenant) {
            if spec.kind == fallow_store::TenantKind::Persistent {
                return format!(
                    "OOM command not allowed: no room for persistent data of tenant '{}' (the pool is full of persistent data)",
                    spec.name
                );
            }
        }
    }
    OOM.to_string()
}

impl CommandSpec {
    /// ACL categories of the command, for COMMAND INFO and ACL rules.
    pub fn categories(&self) -> Vec<&'static str> {
        let mut categories = vec![self.group.category()];
        let pairs = [
            (flags::WRITE, "write"),
            (flags::READONLY, "read"),
            (flags::ADMIN, "admin"),
            (flags::ADMIN, "dangerous"),
            (flags::FAST, "fast"),
            (flags::BLOCKING, "blocking"),
        ];
        for (flag, category) in pairs {
            if self.flags & flag != 0 {
                categories.push(category);
            }
        }
        if self.flags & flags::FAST == 0 {
            categories.push("slow");
        }
        if matches!(self.keys, Keys::All) && self.flags & flags::WRITE != 0 {
            categories.push("dangerous");
        }
        categories.dedup();
        categories
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        assert!(table().len() > 150, "{} commands", table().len());
        assert_eq!(lookup(b"GeT").map(|(_, spec)| spec.name), Some("get"));
        assert!(lookup(b"nosuchcommand").is_none());
    }

    #[test]
    fn key_positions_follow_specs() {
        let (_, mset) = lookup(b"mset").unwrap();
        let args: Vec<&[u8]> = vec![b"mset", b"a", b"1", b"b", b"2"];
        assert_eq!(key_positions(mset, &args), vec![1, 3]);
        let (_, get) = lookup(b"get").unwrap();
        assert_eq!(key_positions(get, &[b"get", b"k"]), vec![1]);
    }

    #[test]
    fn floats_parse_like_redis() {
        assert_eq!(parse_float(b"1.5"), Some(1.5));
        assert_eq!(parse_float(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_float(b"nan"), None);
        assert_eq!(parse_float(b" 1"), None);
        assert_eq!(parse_float(b""), None);
    }
}
