//! SORT and SORT_RO (Redis 7.0's sort.c), of the keys family: the ACL condition on patterns, reading the
//! value and the keys BY and GET patterns name, the reply and STORE. What is sorted and how (options, the
//! LIMIT window, numeric and ALPHA weights, Redis's sorts) is the store's (`fallow_store::types::sort`).
//!
//! Locking: a pattern names keys from the values sorted, so they cannot be known before the command reads.
//! A call with a BY pattern that sorts, or a GET pattern with `*`, locks every shard (`Keys::CustomOrAll`:
//! it runs alone, like KEYS); any other call locks the sorted key and STORE's destination only.
use super::{Ctx, Handler, WRONGTYPE};
use fallow_store::types::sort::{self as semantics, SortOptions, Sorting, Source};
use fallow_store::types::{HashValue, ListValue, SetValue, ZSetValue};
use fallow_store::{Collection, Guards, Kind, WrongType};
use std::borrow::Cow;
use std::sync::atomic::Ordering;

pub const HANDLERS: &[(&str, Handler)] = &[("sort", sort), ("sort_ro", sort_ro)];

/// Bytes of a nil in a reply.
const NIL_REPLY_BYTES: u64 = 5;

fn sort(ctx: &mut Ctx, args: &[&[u8]]) {
    sort_generic(ctx, args, false);
}

fn sort_ro(ctx: &mut Ctx, args: &[&[u8]]) {
    sort_generic(ctx, args, true);
}

fn sort_generic(ctx: &mut Ctx, args: &[&[u8]], read_only: bool) {
    let options = match semantics::parse(&args[2..], read_only, may_read_every_key(ctx)) {
        Ok(options) => options,
        Err(error) => return ctx.out.error(error.message()),
    };
    // A set with nothing to sort by is sorted in scripts, as Redis does for CLIENT_SCRIPT.
    let in_script = ctx.in_exec && ctx.server.scripts.runs_for(ctx.conn.id());
    let mut sorting = match load(ctx, args[1], &options, in_script) {
        Ok(sorting) => sorting,
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let (db, now_ms) = (ctx.keyspace(), ctx.now_ms);
    let guards = &mut ctx.guards;
    let weighed = sorting.weigh(|key, field| pattern_value(guards, db, key, field, now_ms));
    if let Err(unparsed) = weighed {
        return ctx.out.error(unparsed.message());
    }
    sorting.sort();
    let values = output_values(ctx, &sorting, &options.gets);
    match options.store {
        Some((destination, _)) => store(ctx, destination, values),
        None => reply(ctx, &values),
    }
}

/// Redis's condition for BY and GET patterns: the user may read every key. The default user without
/// restrictions is checked without the ACL lock.
fn may_read_every_key(ctx: &Ctx) -> bool {
    let server = ctx.server;
    let unrestricted =
        ctx.conn.user == "default" && server.acl_default_unrestricted.load(Ordering::Relaxed);
    unrestricted || server.acl.read().has_all_keys(&ctx.conn.user)
}

/// Reads the value to sort (a missing key sorts as an empty list).
fn load<'a>(
    ctx: &mut Ctx,
    key: &[u8],
    options: &SortOptions<'a>,
    in_script: bool,
) -> Result<Sorting<'a>, WrongType> {
    let (db, now_ms) = (ctx.keyspace(), ctx.now_ms);
    let shard = ctx.guards.shard(key);
    let source = match shard.peek(db, key, now_ms).map(|info| info.kind) {
        None => {
            shard.access(db, key, now_ms);
            None
        }
        Some(Kind::List) => shard.read::<ListValue>(db, key, now_ms)?.map(Source::List),
        Some(Kind::Set) => shard.read::<SetValue>(db, key, now_ms)?.map(Source::Set),
        Some(Kind::ZSet) => shard.read::<ZSetValue>(db, key, now_ms)?.map(Source::ZSet),
        Some(_) => return Err(WrongType),
    };
    Ok(options.load(source, in_script))
}

/// What a pattern names: the string at `key`, or the field of the hash at `key`; None when missing or of
/// another type (a read, counted as Redis's lookupKeyRead counts it).
fn pattern_value(
    guards: &mut Guards,
    db: usize,
    key: &[u8],
    field: Option<&[u8]>,
    now_ms: u64,
) -> Option<Vec<u8>> {
    let shard = guards.shard(key);
    match field {
        None => shard
            .get_string(db, key, now_ms)
            .ok()
            .flatten()
            .map(|(value, _)| value.to_vec()),
        Some(field) => shard
            .read::<HashValue>(db, key, now_ms)
            .ok()
            .flatten()
            .and_then(|hash| hash.get(field))
            .map(<[u8]>::to_vec),
    }
}

/// The values returned (or stored) for the window: each element, or with GET each pattern's value per
/// element (None: missing).
fn output_values<'s>(
    ctx: &mut Ctx,
    sorting: &'s Sorting,
    gets: &[&[u8]],
) -> Vec<Option<Cow<'s, [u8]>>> {
    if gets.is_empty() {
        return sorting
            .window()
            .map(|element| Some(Cow::Borrowed(element)))
            .collect();
    }
    let (db, now_ms) = (ctx.keyspace(), ctx.now_ms);
    let guards = &mut ctx.guards;
    let mut read = |key: &[u8], field: Option<&[u8]>| pattern_value(guards, db, key, field, now_ms);
    let mut values = Vec::with_capacity(gets.len() * sorting.window().len());
    for element in sorting.window() {
        for pattern in gets {
            values.push(semantics::resolve(pattern, element, &mut read));
        }
    }
    values
}

fn reply(ctx: &mut Ctx, values: &[Option<Cow<[u8]>>]) {
    // Sized before it is written: refused if it would pass the client's output hard limit.
    let bytes: u64 = values
        .iter()
        .map(|value| {
            value.as_ref().map_or(NIL_REPLY_BYTES, |value| {
                super::bulk_reply_bytes(value.len())
            })
        })
        .sum();
    if bytes > ctx.reply_budget() {
        return ctx.refuse_reply(bytes);
    }
    ctx.out.array_len(values.len());
    for value in values {
        match value {
            Some(value) => ctx.out.bulk(value),
            None => ctx.out.nil(),
        }
    }
}

/// STORE: the values as a list (a missing GET value stored as an empty string); nothing deletes the
/// destination. Replies the list's length.
fn store(ctx: &mut Ctx, destination: &[u8], values: Vec<Option<Cow<[u8]>>>) {
    let mut list = ListValue::default();
    for value in &values {
        list.push_back(value.as_deref().unwrap_or_default());
    }
    let stored = list.len();
    if stored > 0 && !ctx.reserve_memory(list.memory_bytes()) {
        return;
    }
    let (db, now_ms) = (ctx.keyspace(), ctx.now_ms);
    let shard = ctx.guards.shard(destination);
    if stored == 0 {
        if shard.remove(db, destination, now_ms) {
            ctx.notify(super::Class::GENERIC, "del", destination);
        }
    } else {
        shard.put_collection(db, destination, Collection::List(list), 0, now_ms);
        shard.wake_waiters(db, destination);
        ctx.notify(super::Class::LIST, "sortstore", destination);
    }
    ctx.out.int(stored as i64);
}
