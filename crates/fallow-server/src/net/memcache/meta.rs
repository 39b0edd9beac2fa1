//! Meta commands: mg, ms, md, ma, mn, me. Return flags are echoed by the codec's response encoder;
//! this file decides the status and fills in what is known about the item.
use super::items::{self, ArithOutcome, DeleteOutcome, StoreArgs, StoreOutcome};
use super::stats::bump;
use super::text::{count_arith, count_delete, count_store, count_touch};
use super::{Exec, OOM_REPLY};
use fallow_proto::memcache::meta::{encode_meta_debug, meta_quiet_suppresses};
use fallow_proto::memcache::{
    encode_meta_response, McError, McRequest, MetaArithMode, MetaFlags, MetaItemInfo, MetaStatus,
    StoreMode,
};
use fallow_store::{now_ms, ItemInfo, Shard};
use fallow_txn::Access;

const NON_NUMERIC: &[u8] = b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
/// Redis's LFU_INIT_VAL: a stored item's counter; the first access always raises it.
const LFU_INITIAL: u8 = 5;

pub(super) fn execute(exec: &mut Exec, request: McRequest) {
    match request {
        McRequest::MetaGet { key, flags } => meta_get(exec, &key, &flags),
        McRequest::MetaSet { key, value, flags } => meta_set(exec, &key, &value, &flags),
        McRequest::MetaDelete { key, flags } => meta_delete(exec, &key, &flags),
        McRequest::MetaArith { key, flags } => meta_arith(exec, &key, &flags),
        McRequest::MetaNoop => exec.out.extend_from_slice(b"MN\r\n"),
        McRequest::MetaDebug { key, base64 } => meta_debug(exec, &key, base64),
        _ => McError::Error.encode(exec.out),
    }
}

/// Which meta command answers (the `q` rule differs per command).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Command {
    Get,
    Set,
    Delete,
    Arith,
}

/// memcached 1.6's `q`: mg hides only misses (EN), ma hides every success (HD and VA), ms and md hide
/// HD. Everything else (NF, NS, EX, errors) is always sent.
fn quiet_suppresses(command: Command, flags: &MetaFlags, status: MetaStatus) -> bool {
    match command {
        Command::Get => flags.quiet && status == MetaStatus::En,
        Command::Arith => flags.quiet && matches!(status, MetaStatus::Hd | MetaStatus::Va),
        Command::Set | Command::Delete => meta_quiet_suppresses(flags, status),
    }
}

/// A reply to one meta request.
struct Reply<'a> {
    command: Command,
    key: &'a [u8],
    flags: &'a MetaFlags,
}

impl Reply<'_> {
    /// Writes the response unless `q` suppresses it.
    fn send(
        &self,
        out: &mut Vec<u8>,
        status: MetaStatus,
        info: &MetaItemInfo,
        value: Option<&[u8]>,
    ) {
        if !quiet_suppresses(self.command, self.flags, status) {
            encode_meta_response(out, status, self.key, self.flags, info, value);
        }
    }
}

/// Everything the return flags may ask about an item. `before` is the item as it was before this
/// request accessed it (for `h` and `l`).
fn item_info(
    shard: &Shard,
    info: &ItemInfo,
    before: &ItemInfo,
    size: usize,
    now: u64,
) -> MetaItemInfo {
    MetaItemInfo {
        cas: Some(info.cas),
        client_flags: Some(info.client_flags),
        ttl: Some(items::ttl_s(info, now)),
        size: Some(size),
        hit: Some(before.lfu_counter > LFU_INITIAL),
        last_access: Some(shard.idle_s(before, now)),
    }
}

fn meta_get(exec: &mut Exec, key: &[u8], flags: &MetaFlags) {
    let reply = Reply {
        command: Command::Get,
        key,
        flags,
    };
    let mc = &exec.server.memcache;
    let now = now_ms();
    let Some(mut guards) = exec.lock_item(key, items::access(flags.ttl.is_some())) else {
        return;
    };
    bump(&mc.cmd_get);
    let shard = guards.shard(key);
    let before = items::peek(shard, exec.db, key, now);
    if let (Some(_), Some(ttl)) = (before, flags.ttl) {
        count_touch(exec.server, items::touch(shard, exec.db, key, ttl, now));
    }
    let Some(before) = before else {
        bump(&mc.get_misses);
        let none = MetaItemInfo::default();
        return reply.send(exec.out, MetaStatus::En, &none, None);
    };
    let idle_s = shard.idle_s(&before, now);
    let Some((value, info)) = items::read(shard, exec.db, key, now) else {
        bump(&mc.get_misses);
        let none = MetaItemInfo::default();
        return reply.send(exec.out, MetaStatus::En, &none, None);
    };
    bump(&mc.get_hits);
    let meta = MetaItemInfo {
        cas: Some(info.cas),
        client_flags: Some(info.client_flags),
        ttl: Some(items::ttl_s(&info, now)),
        size: Some(value.len()),
        hit: Some(before.lfu_counter > LFU_INITIAL),
        last_access: Some(idle_s),
    };
    if flags.return_value {
        reply.send(exec.out, MetaStatus::Va, &meta, Some(value));
    } else {
        reply.send(exec.out, MetaStatus::Hd, &meta, None);
    }
}

/// ms: the mode (M) picks the store command; a CAS (C) upgrades set and replace to cas, as in
/// memcached, and is a plain check for append/prepend.
fn meta_set(exec: &mut Exec, key: &[u8], value: &[u8], flags: &MetaFlags) {
    let reply = Reply {
        command: Command::Set,
        key,
        flags,
    };
    let mode = match flags.set_mode.unwrap_or(StoreMode::Set) {
        StoreMode::Set | StoreMode::Replace if flags.compare_cas.is_some() => StoreMode::Cas,
        mode => mode,
    };
    let args = StoreArgs {
        mode,
        key,
        value,
        client_flags: flags.client_flags.unwrap_or(0),
        exptime_s: flags.ttl.unwrap_or(0),
        compare_cas: flags.compare_cas,
    };
    let now = now_ms();
    let value_len_max = exec.value_len_max;
    let outcome = exec.with_item_room(key, |shard, db| {
        items::store(shard, db, &args, value_len_max, now)
    });
    let Some(outcome) = outcome else {
        return;
    };
    bump(&exec.server.memcache.cmd_set);
    let Ok(outcome) = outcome else {
        exec.out.extend_from_slice(OOM_REPLY);
        return;
    };
    count_store(exec.server, mode, outcome);
    let (status, cas) = match outcome {
        StoreOutcome::Stored { cas } => (MetaStatus::Hd, Some(cas)),
        StoreOutcome::NotStored => (MetaStatus::Ns, None),
        StoreOutcome::Exists => (MetaStatus::Ex, None),
        StoreOutcome::NotFound => (MetaStatus::Nf, None),
    };
    let info = MetaItemInfo {
        cas,
        ..MetaItemInfo::default()
    };
    reply.send(exec.out, status, &info, None);
}

fn meta_delete(exec: &mut Exec, key: &[u8], flags: &MetaFlags) {
    let reply = Reply {
        command: Command::Delete,
        key,
        flags,
    };
    let now = now_ms();
    let outcome = exec.with_item(key, Access::ReadMutate, |shard, db| {
        items::delete(shard, db, key, flags.compare_cas, now)
    });
    let Some(outcome) = outcome else {
        return;
    };
    count_delete(exec.server, outcome == DeleteOutcome::Deleted);
    let status = match outcome {
        DeleteOutcome::Deleted => MetaStatus::Hd,
        DeleteOutcome::NotFound => MetaStatus::Nf,
        DeleteOutcome::Exists => MetaStatus::Ex,
    };
    reply.send(exec.out, status, &MetaItemInfo::default(), None);
}

/// ma: incr/decr by D (default 1); on a miss with N, creates the counter at J (default 0).
fn meta_arith(exec: &mut Exec, key: &[u8], flags: &MetaFlags) {
    let reply = Reply {
        command: Command::Arith,
        key,
        flags,
    };
    let incr = flags.arith_mode != Some(MetaArithMode::Decr);
    let delta = flags.delta.unwrap_or(1);
    let now = now_ms();
    let result = exec.with_item_room(key, |shard, db| {
        let mut outcome = items::arith(shard, db, key, incr, delta, flags.compare_cas, now);
        if let (ArithOutcome::NotFound, Some(ttl)) = (outcome, flags.vivify_ttl) {
            let value = flags.initial.unwrap_or(0);
            let cas = items::create_counter(shard, db, key, value, ttl, now);
            outcome = ArithOutcome::Done { value, cas };
        } else if let (ArithOutcome::Done { .. }, Some(ttl)) = (outcome, flags.ttl) {
            items::touch(shard, db, key, ttl, now);
        }
        let info = items::peek(shard, db, key, now)
            .map(|info| item_info(shard, &info, &info, 0, now))
            .unwrap_or_default();
        (outcome, info)
    });
    let Some(result) = result else {
        return;
    };
    let Ok((outcome, mut info)) = result else {
        exec.out.extend_from_slice(OOM_REPLY);
        return;
    };
    count_arith(exec.server, incr, &outcome);
    let value = match outcome {
        ArithOutcome::Done { value, .. } => value,
        ArithOutcome::NonNumeric => return exec.out.extend_from_slice(NON_NUMERIC),
        ArithOutcome::NotFound => return reply.send(exec.out, MetaStatus::Nf, &info, None),
        ArithOutcome::Exists => return reply.send(exec.out, MetaStatus::Ex, &info, None),
    };
    let text = itoa::Buffer::new().format(value).as_bytes().to_vec();
    info.size = Some(text.len());
    if flags.return_value {
        reply.send(exec.out, MetaStatus::Va, &info, Some(&text));
    } else {
        reply.send(exec.out, MetaStatus::Hd, &info, None);
    }
}

/// me: memcached's debug line (exp, la, cas, fetch, cls, size); EN on a miss.
fn meta_debug(exec: &mut Exec, key: &[u8], base64: bool) {
    let now = now_ms();
    let found = exec.with_item(key, Access::Read, |shard, db| {
        let info = items::peek(shard, db, key, now)?;
        let size = shard.memory_usage(db, key, now).unwrap_or(0);
        Some((info, shard.idle_s(&info, now), size, shard.id))
    });
    let Some(found) = found else {
        return;
    };
    let Some((info, idle_s, size, shard_id)) = found else {
        exec.out.extend_from_slice(b"EN\r\n");
        return;
    };
    let number = |n: i64| n.to_string().into_bytes();
    let exp = number(items::ttl_s(&info, now));
    let la = number(idle_s as i64);
    let cas = info.cas.to_string().into_bytes();
    let fetched: &[u8] = if info.lfu_counter > LFU_INITIAL {
        b"yes"
    } else {
        b"no"
    };
    let class = number(shard_id as i64);
    let size = number(size as i64);
    let fields: [(&str, &[u8]); 6] = [
        ("exp", &exp),
        ("la", &la),
        ("cas", &cas),
        ("fetch", fetched),
        ("cls", &class),
        ("size", &size),
    ];
    encode_meta_debug(exec.out, key, base64, &fields);
}
