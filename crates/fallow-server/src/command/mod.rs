//! The command table and the handlers. Each command family's metadata (name, arity, flags, key
//! positions, group, summary: `info`) is data in `info/<family>.rs`; its handlers live in
//! `<family>.rs`, which lists them by name in `HANDLERS`. `dispatch` checks authentication, arity,
//! MULTI queueing, pub/sub context, ACL permissions and maxmemory, drives transactions (`txn`), locks the
//! shards of the command's keys and runs the handler, which writes its reply.
pub mod acl;
pub mod bag;
pub mod bitmap;
pub mod blocking;
pub mod bulk;
pub mod connection;
pub mod dispatch;
pub mod dump;
pub mod elastic;
pub mod fscache;
pub mod geo;
pub mod hash;
pub mod hyperloglog;
pub mod info;
pub mod keys;
mod keyspace_events;
pub mod lcs;
pub mod list;
pub mod pubsub;
pub mod random;
pub mod reply;
pub mod scan;
pub mod scripting;
pub mod server;
pub mod session;
pub mod set;
pub mod shards;
pub mod sort;
pub mod stream;
pub mod string;
pub mod tenant;
pub mod topn;
pub mod tracking;
pub mod transaction;
pub mod txn;
pub mod uid;
pub mod zset;

pub use info::{flags, key_positions, CommandInfo, Group, Keys, ONE_KEY};

use crate::connection::ConnState;
pub use crate::notify::Class;
use crate::server::Server;
use fallow_proto::ReplyWriter;
use fallow_store::types::CollectionType;
use fallow_store::{Guards, WrongType};
use std::sync::atomic::Ordering;
use std::sync::LazyLock;

/// A command handler: parses its arguments (args[0] is the command name) and writes exactly one reply.
pub type Handler = fn(&mut Ctx, &[&[u8]]);

/// A row of the command table with its handler: what dispatch runs. Derefs to the metadata.
pub struct CommandSpec {
    pub info: &'static CommandInfo,
    pub handler: Handler,
}

impl std::ops::Deref for CommandSpec {
    type Target = CommandInfo;

    fn deref(&self) -> &CommandInfo {
        self.info
    }
}

/// Every family's handlers by command name. Adding a family adds one line here and one in `info`.
const HANDLERS: &[&[(&str, Handler)]] = &[
    string::HANDLERS,
    bitmap::HANDLERS,
    hyperloglog::HANDLERS,
    lcs::HANDLERS,
    keys::HANDLERS,
    dump::HANDLERS,
    sort::HANDLERS,
    hash::HANDLERS,
    set::HANDLERS,
    zset::HANDLERS,
    geo::HANDLERS,
    list::HANDLERS,
    stream::HANDLERS,
    pubsub::HANDLERS,
    scripting::HANDLERS,
    transaction::HANDLERS,
    txn::HANDLERS,
    connection::HANDLERS,
    server::HANDLERS,
    acl::HANDLERS,
    bulk::HANDLERS,
    elastic::HANDLERS,
    tenant::HANDLERS,
    topn::HANDLERS,
    bag::HANDLERS,
    uid::HANDLERS,
    fscache::HANDLERS,
];

/// The command table with handlers, indexed like `info::table()`: every row has exactly one handler and
/// every handler a row.
static SPECS: LazyLock<Vec<CommandSpec>> = LazyLock::new(|| {
    let mut handlers: std::collections::HashMap<&str, Handler> = std::collections::HashMap::new();
    for &(name, handler) in HANDLERS.iter().flat_map(|family| family.iter()) {
        let previous = handlers.insert(name, handler);
        assert!(previous.is_none(), "{name} has two handlers");
    }
    let specs: Vec<CommandSpec> = info::table()
        .iter()
        .map(|&info| CommandSpec {
            info,
            handler: handlers
                .remove(info.name)
                .unwrap_or_else(|| panic!("{} has no handler", info.name)),
        })
        .collect();
    assert!(
        handlers.is_empty(),
        "handlers without a row: {:?}",
        handlers.keys()
    );
    specs
});

/// Every command with its handler, in the table's order.
pub fn table() -> &'static [CommandSpec] {
    &SPECS
}

/// Finds a command by name, in any case, with its index in the table.
pub fn lookup(name: &[u8]) -> Option<(usize, &'static CommandSpec)> {
    info::lookup(name).map(|(index, _)| (index, &SPECS[index]))
}

/// The command (with its handler) a metadata row describes.
pub fn spec_of(info: &CommandInfo) -> &'static CommandSpec {
    lookup(info.name.as_bytes())
        .expect("every row is in the table")
        .1
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
    pub fn keyspace(&self) -> usize {
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
    pub fn keyspace_at(&self, index: usize) -> usize {
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
    let db = ctx.keyspace();
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
    let db = ctx.keyspace();
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

/// Error for an unknown subcommand. Redis formats the name with `%.128s`: at most 128 bytes, up to a
/// NUL byte.
pub fn subcommand_error(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args.get(1).copied().unwrap_or_default();
    let sub = sub.split(|&byte| byte == 0).next().unwrap_or_default();
    let sub = String::from_utf8_lossy(&sub[..sub.len().min(128)]);
    let command = String::from_utf8_lossy(args[0]).to_ascii_uppercase();
    ctx.out.error(&format!(
        "ERR unknown subcommand '{sub}'. Try {command} HELP."
    ));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_has_its_handler() {
        assert_eq!(table().len(), info::table().len());
        for (spec, &info) in table().iter().zip(info::table()) {
            assert!(
                std::ptr::eq(spec.info, info),
                "{} is paired in table order",
                info.name
            );
            assert!(std::ptr::eq(spec_of(info), spec));
        }
        assert_eq!(lookup(b"GeT").map(|(_, spec)| spec.name), Some("get"));
        assert!(lookup(b"nosuchcommand").is_none());
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
