//! Classic text commands: get/gets/gat/gats, the storage commands, incr/decr, touch, delete,
//! flush_all, stats, version, verbosity, quit.
use super::items::{self, ArithOutcome, DeleteOutcome, StoreArgs, StoreOutcome};
use super::stats::{self, bump};
use super::{Exec, OOM_REPLY, VERSION};
use bytes::Bytes;
use fallow_proto::memcache::text::{
    encode_end, encode_number, encode_stat, encode_value, encode_version,
};
use fallow_proto::memcache::{McError, McRequest, StoreMode, TextReply};
use fallow_store::now_ms;
use fallow_txn::Access;
use std::sync::atomic::Ordering;

const NON_NUMERIC: &[u8] = b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";

pub(super) fn execute(exec: &mut Exec, request: McRequest) {
    match request {
        McRequest::Get {
            keys,
            return_cas,
            touch_exptime,
        } => get(exec, &keys, return_cas, touch_exptime),
        McRequest::Store {
            mode,
            key,
            flags,
            exptime,
            value,
            cas_unique,
            noreply,
        } => {
            let args = StoreArgs {
                mode,
                key: &key,
                value: &value,
                client_flags: flags,
                exptime_s: exptime,
                compare_cas: (mode == StoreMode::Cas).then_some(cas_unique),
            };
            store(exec, &args, noreply)
        }
        McRequest::Delete { key, noreply } => delete(exec, &key, noreply),
        McRequest::Arith {
            key,
            delta,
            incr,
            noreply,
        } => arith(exec, &key, incr, delta, noreply),
        McRequest::Touch {
            key,
            exptime,
            noreply,
        } => touch(exec, &key, exptime, noreply),
        McRequest::FlushAll { delay_s, noreply } => {
            items::flush_all(exec.server, exec.db, delay_s);
            reply(exec, noreply, TextReply::Ok);
        }
        McRequest::Stats { group, args } => stats_command(exec, group.as_deref(), &args),
        McRequest::Version => encode_version(exec.out, VERSION),
        McRequest::Verbosity { level, noreply } => {
            exec.server
                .memcache
                .verbosity
                .store(u64::from(level), Ordering::Relaxed);
            reply(exec, noreply, TextReply::Ok);
        }
        McRequest::Quit => exec.close = true,
        // Meta and binary requests are routed elsewhere; answer like an unknown command.
        _ => McError::Error.encode(exec.out),
    }
}

fn reply(exec: &mut Exec, noreply: bool, reply: TextReply) {
    if !noreply {
        reply.encode(exec.out);
    }
}

/// get/gets, and gat/gats (which set the new expiry first, so gats shows the CAS a later cas needs).
fn get(exec: &mut Exec, keys: &[Bytes], return_cas: bool, touch_exptime: Option<i64>) {
    let mc = &exec.server.memcache;
    let reply_start = exec.out.len();
    let mut sized = false;
    for (index, key) in keys.iter().enumerate() {
        // A large multi-get is sized from the values' lengths before the rest is copied, and refused if
        // it would pass the normal class's output hard limit (`client-output-buffer-limit`).
        if !sized && exec.out.len() - reply_start > crate::command::REPLY_SIZE_CHECK_BYTES {
            sized = true;
            if !get_reply_fits(exec, reply_start, &keys[index..]) {
                return;
            }
        }
        let now = now_ms();
        let Some(mut guards) = exec.lock_item(key, items::access(touch_exptime.is_some())) else {
            return;
        };
        bump(&mc.cmd_get);
        let shard = guards.shard(key);
        if let Some(exptime) = touch_exptime {
            bump(&mc.cmd_touch);
            let touched = items::touch(shard, exec.db, key, exptime, now);
            bump(if touched {
                &mc.touch_hits
            } else {
                &mc.touch_misses
            });
        }
        match items::read(shard, exec.db, key, now) {
            Some((value, info)) => {
                bump(&mc.get_hits);
                let cas = return_cas.then_some(info.cas);
                encode_value(exec.out, key, info.client_flags, value, cas);
            }
            None => bump(&mc.get_misses),
        }
    }
    encode_end(exec.out);
}

/// What memcached answers when it cannot build a get response.
const GET_REPLY_TOO_LARGE: &[u8] = b"SERVER_ERROR out of memory writing get response\r\n";

/// Whether the rest of a multi-get (`keys`) fits under the output hard limit; if not, the reply begun at
/// `reply_start` is dropped for memcached's error and the refusal counted.
fn get_reply_fits(exec: &mut Exec, reply_start: usize, keys: &[Bytes]) -> bool {
    let server = exec.server;
    let hard = server.clients_memory.limits().normal.hard_bytes;
    if hard == 0 {
        return true;
    }
    let now = now_ms();
    let rest: u64 = keys
        .iter()
        .map(|key| {
            let mut guards = server.store.lock_keys([key.as_ref()]);
            let len = guards.shard(key).peek_string_len(exec.db, key, now);
            // "VALUE <key> <flags> <bytes> <cas>\r\n<data>\r\n"
            len.map_or(0, |len| (len + key.len() + 48) as u64)
        })
        .sum();
    if exec.out.len() as u64 + rest <= hard {
        return true;
    }
    exec.out.truncate(reply_start);
    exec.out.extend_from_slice(GET_REPLY_TOO_LARGE);
    server
        .clients_memory
        .output_limit_refusals
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    false
}

fn store(exec: &mut Exec, args: &StoreArgs, noreply: bool) {
    let now = now_ms();
    let value_len_max = exec.value_len_max;
    let outcome = exec.with_item_room(args.key, |shard, db| {
        items::store(shard, db, args, value_len_max, now)
    });
    let Some(outcome) = outcome else {
        return;
    };
    bump(&exec.server.memcache.cmd_set);
    let Ok(outcome) = outcome else {
        exec.out.extend_from_slice(OOM_REPLY);
        return;
    };
    count_store(exec.server, args.mode, outcome);
    let text = match outcome {
        StoreOutcome::Stored { .. } => TextReply::Stored,
        StoreOutcome::NotStored => TextReply::NotStored,
        StoreOutcome::Exists => TextReply::Exists,
        StoreOutcome::NotFound => TextReply::NotFound,
    };
    reply(exec, noreply, text);
}

/// total_items and the cas_* counters for one storage request.
pub(super) fn count_store(server: &crate::server::Server, mode: StoreMode, outcome: StoreOutcome) {
    let mc = &server.memcache;
    if matches!(outcome, StoreOutcome::Stored { .. }) {
        bump(&mc.total_items);
    }
    if mode == StoreMode::Cas {
        bump(match outcome {
            StoreOutcome::Stored { .. } => &mc.cas_hits,
            StoreOutcome::Exists => &mc.cas_badval,
            _ => &mc.cas_misses,
        });
    }
}

fn delete(exec: &mut Exec, key: &[u8], noreply: bool) {
    let now = now_ms();
    let outcome = exec.with_item(key, Access::ReadMutate, |shard, db| {
        items::delete(shard, db, key, None, now)
    });
    let Some(outcome) = outcome else {
        return;
    };
    let deleted = outcome == DeleteOutcome::Deleted;
    count_delete(exec.server, deleted);
    let text = if deleted {
        TextReply::Deleted
    } else {
        TextReply::NotFound
    };
    reply(exec, noreply, text);
}

pub(super) fn count_delete(server: &crate::server::Server, deleted: bool) {
    let mc = &server.memcache;
    bump(if deleted {
        &mc.delete_hits
    } else {
        &mc.delete_misses
    });
}

fn arith(exec: &mut Exec, key: &[u8], incr: bool, delta: u64, noreply: bool) {
    let now = now_ms();
    let outcome = exec.with_item_room(key, |shard, db| {
        items::arith(shard, db, key, incr, delta, None, now)
    });
    let Some(outcome) = outcome else {
        return;
    };
    let Ok(outcome) = outcome else {
        exec.out.extend_from_slice(OOM_REPLY);
        return;
    };
    count_arith(exec.server, incr, &outcome);
    if noreply {
        return;
    }
    match outcome {
        ArithOutcome::Done { value, .. } => encode_number(exec.out, value),
        ArithOutcome::NotFound => TextReply::NotFound.encode(exec.out),
        ArithOutcome::Exists => TextReply::Exists.encode(exec.out),
        ArithOutcome::NonNumeric => exec.out.extend_from_slice(NON_NUMERIC),
    }
}

pub(super) fn count_arith(server: &crate::server::Server, incr: bool, outcome: &ArithOutcome) {
    let mc = &server.memcache;
    let hit = matches!(outcome, ArithOutcome::Done { .. });
    bump(match (incr, hit) {
        (true, true) => &mc.incr_hits,
        (true, false) => &mc.incr_misses,
        (false, true) => &mc.decr_hits,
        (false, false) => &mc.decr_misses,
    });
}

fn touch(exec: &mut Exec, key: &[u8], exptime: i64, noreply: bool) {
    let now = now_ms();
    let touched = exec.with_item(key, Access::ReadMutate, |shard, db| {
        items::touch(shard, db, key, exptime, now)
    });
    let Some(touched) = touched else {
        return;
    };
    count_touch(exec.server, touched);
    let text = if touched {
        TextReply::Touched
    } else {
        TextReply::NotFound
    };
    reply(exec, noreply, text);
}

pub(super) fn count_touch(server: &crate::server::Server, touched: bool) {
    let mc = &server.memcache;
    bump(&mc.cmd_touch);
    bump(if touched {
        &mc.touch_hits
    } else {
        &mc.touch_misses
    });
}

fn stats_command(exec: &mut Exec, group: Option<&str>, args: &[String]) {
    match (group, args.first().map(String::as_str)) {
        (Some("reset"), _) => {
            exec.server.memcache.reset();
            return exec.out.extend_from_slice(b"RESET\r\n");
        }
        // fallow keeps no per-prefix detail: accept the switch, dump nothing
        (Some("detail"), Some("on" | "off")) => return TextReply::Ok.encode(exec.out),
        (Some("detail"), Some("dump")) => return encode_end(exec.out),
        _ => {}
    }
    match stats::report(exec.server, exec.db, group) {
        Some(lines) => {
            for (name, value) in lines {
                encode_stat(exec.out, &name, value.as_bytes());
            }
            encode_end(exec.out);
        }
        None => McError::Error.encode(exec.out),
    }
}
