//! Binary protocol commands. Quiet opcodes follow `binary_should_send`: quiet gets hide misses, other
//! quiet commands hide successes; errors are always sent.
use super::items::{self, ArithOutcome, DeleteOutcome, StoreArgs, StoreOutcome};
use super::stats::{self, bump};
use super::text::{count_arith, count_delete, count_store, count_touch};
use super::{Exec, VERSION};
use fallow_proto::memcache::binary::{
    encode_binary_arith, encode_binary_get_hit, encode_binary_stat, encode_binary_status,
};
use fallow_proto::memcache::{
    binary_should_send, encode_binary_response, BinaryOpcode, BinaryRequest, BinaryStatus,
    StoreMode,
};
use fallow_store::now_ms;
use fallow_txn::Access;

/// incr/decr exptime meaning "fail on a miss instead of creating the counter".
const NO_AUTO_CREATE: u32 = u32::MAX;

pub(super) fn execute(exec: &mut Exec, request: &BinaryRequest) {
    use BinaryOpcode::*;
    match request.op().base() {
        Get | GetK => get(exec, request, None),
        Gat | GatK => get(exec, request, Some(request.u32_extra())),
        Touch => touch(exec, request),
        Set => store(exec, request, StoreMode::Set),
        Add => store(exec, request, StoreMode::Add),
        Replace => store(exec, request, StoreMode::Replace),
        Append => store(exec, request, StoreMode::Append),
        Prepend => store(exec, request, StoreMode::Prepend),
        Delete => delete(exec, request),
        Increment => arith(exec, request, true),
        Decrement => arith(exec, request, false),
        Quit => {
            status(exec, request, BinaryStatus::NoError, 0);
            exec.close = true;
        }
        Flush => {
            items::flush_all(exec.server, exec.db, i64::from(request.u32_extra()));
            status(exec, request, BinaryStatus::NoError, 0);
        }
        Noop | Verbosity => status(exec, request, BinaryStatus::NoError, 0),
        Version => encode_binary_response(
            exec.out,
            request.opcode,
            0,
            request.opaque,
            0,
            &[],
            &[],
            VERSION.as_bytes(),
        ),
        Stat => stat(exec, request),
        // Quiet opcodes were mapped to their base above.
        _ => status(exec, request, BinaryStatus::UnknownCommand, 0),
    }
}

/// A header-only (or error message) response, unless the quiet rule hides it.
fn status(exec: &mut Exec, request: &BinaryRequest, status: BinaryStatus, cas: u64) {
    if binary_should_send(request.opcode, status) {
        encode_binary_status(exec.out, request, status, cas);
    }
}

/// Compare-and-swap value of a request; 0 means "no check".
fn compare_cas(request: &BinaryRequest) -> Option<u64> {
    (request.cas != 0).then_some(request.cas)
}

fn get(exec: &mut Exec, request: &BinaryRequest, touch_exptime: Option<u32>) {
    let mc = &exec.server.memcache;
    let key = &request.key[..];
    let now = now_ms();
    let Some(mut guards) = exec.lock_item(key, items::access(touch_exptime.is_some())) else {
        return;
    };
    bump(&mc.cmd_get);
    let shard = guards.shard(key);
    if let Some(exptime) = touch_exptime {
        count_touch(
            exec.server,
            items::touch(shard, exec.db, key, i64::from(exptime), now),
        );
    }
    match items::read(shard, exec.db, key, now) {
        Some((value, info)) => {
            bump(&mc.get_hits);
            encode_binary_get_hit(exec.out, request, info.client_flags, info.cas, value);
        }
        None => {
            bump(&mc.get_misses);
            miss(exec, request);
        }
    }
}

/// memcached answers a GetK/GatK miss with the key and no message.
fn miss(exec: &mut Exec, request: &BinaryRequest) {
    let status = BinaryStatus::KeyNotFound;
    if !binary_should_send(request.opcode, status) {
        return;
    }
    if matches!(request.op().base(), BinaryOpcode::GetK | BinaryOpcode::GatK) {
        encode_binary_response(
            exec.out,
            request.opcode,
            status as u16,
            request.opaque,
            0,
            &[],
            &request.key,
            &[],
        );
    } else {
        encode_binary_status(exec.out, request, status, 0);
    }
}

/// touch: a hit answers with the item's flags as extras and no value.
fn touch(exec: &mut Exec, request: &BinaryRequest) {
    let key = &request.key[..];
    let now = now_ms();
    let exptime = i64::from(request.u32_extra());
    let touched = exec.with_item(key, Access::ReadMutate, |shard, db| {
        items::touch(shard, db, key, exptime, now)
            .then(|| items::peek(shard, db, key, now))
            .flatten()
    });
    let Some(touched) = touched else {
        return;
    };
    count_touch(exec.server, touched.is_some());
    match touched {
        Some(info) => encode_binary_response(
            exec.out,
            request.opcode,
            0,
            request.opaque,
            info.cas,
            &info.client_flags.to_be_bytes(),
            &[],
            &[],
        ),
        None => status(exec, request, BinaryStatus::KeyNotFound, 0),
    }
}

/// set/add/replace (extras: flags, exptime) and append/prepend. A CAS in the header turns
/// set/add/replace into cas and is a check for append/prepend, as in memcached.
fn store(exec: &mut Exec, request: &BinaryRequest, base_mode: StoreMode) {
    let (client_flags, exptime) = request.store_extras().unwrap_or((0, 0));
    let cas = compare_cas(request);
    let mode = match base_mode {
        StoreMode::Set | StoreMode::Add | StoreMode::Replace if cas.is_some() => StoreMode::Cas,
        mode => mode,
    };
    let args = StoreArgs {
        mode,
        key: &request.key,
        value: &request.value,
        client_flags,
        exptime_s: i64::from(exptime),
        compare_cas: cas,
    };
    let now = now_ms();
    let value_len_max = exec.value_len_max;
    let outcome = exec.with_item_room(&request.key, |shard, db| {
        items::store(shard, db, &args, value_len_max, now)
    });
    let Some(outcome) = outcome else {
        return;
    };
    bump(&exec.server.memcache.cmd_set);
    let Ok(outcome) = outcome else {
        return status(exec, request, BinaryStatus::OutOfMemory, 0);
    };
    count_store(exec.server, mode, outcome);
    match outcome {
        StoreOutcome::Stored { cas } => status(exec, request, BinaryStatus::NoError, cas),
        StoreOutcome::Exists => status(exec, request, BinaryStatus::KeyExists, 0),
        StoreOutcome::NotFound => status(exec, request, BinaryStatus::KeyNotFound, 0),
        StoreOutcome::NotStored => {
            let code = match mode {
                StoreMode::Add => BinaryStatus::KeyExists,
                StoreMode::Replace => BinaryStatus::KeyNotFound,
                _ => BinaryStatus::ItemNotStored,
            };
            status(exec, request, code, 0)
        }
    }
}

fn delete(exec: &mut Exec, request: &BinaryRequest) {
    let key = &request.key[..];
    let now = now_ms();
    let outcome = exec.with_item(key, Access::ReadMutate, |shard, db| {
        items::delete(shard, db, key, compare_cas(request), now)
    });
    let Some(outcome) = outcome else {
        return;
    };
    count_delete(exec.server, outcome == DeleteOutcome::Deleted);
    let code = match outcome {
        DeleteOutcome::Deleted => BinaryStatus::NoError,
        DeleteOutcome::NotFound => BinaryStatus::KeyNotFound,
        DeleteOutcome::Exists => BinaryStatus::KeyExists,
    };
    status(exec, request, code, 0);
}

/// incr/decr (extras: delta, initial, exptime); a miss creates the counter at `initial` unless the
/// exptime is 0xffffffff.
fn arith(exec: &mut Exec, request: &BinaryRequest, incr: bool) {
    let Some((delta, initial, exptime)) = request.arith_extras() else {
        return status(exec, request, BinaryStatus::InvalidArguments, 0);
    };
    let key = &request.key[..];
    let now = now_ms();
    let outcome = exec.with_item_room(key, |shard, db| {
        match items::arith(shard, db, key, incr, delta, compare_cas(request), now) {
            ArithOutcome::NotFound if exptime != NO_AUTO_CREATE => {
                let cas = items::create_counter(shard, db, key, initial, i64::from(exptime), now);
                ArithOutcome::Done {
                    value: initial,
                    cas,
                }
            }
            outcome => outcome,
        }
    });
    let Some(outcome) = outcome else {
        return;
    };
    let Ok(outcome) = outcome else {
        return status(exec, request, BinaryStatus::OutOfMemory, 0);
    };
    count_arith(exec.server, incr, &outcome);
    match outcome {
        ArithOutcome::Done { value, cas } => {
            if binary_should_send(request.opcode, BinaryStatus::NoError) {
                encode_binary_arith(exec.out, request, cas, value);
            }
        }
        ArithOutcome::NotFound => status(exec, request, BinaryStatus::KeyNotFound, 0),
        ArithOutcome::NonNumeric => status(exec, request, BinaryStatus::NonNumeric, 0),
        ArithOutcome::Exists => status(exec, request, BinaryStatus::KeyExists, 0),
    }
}

/// stat [group]: one packet per statistic, then an empty one; an unknown group is "not found".
fn stat(exec: &mut Exec, request: &BinaryRequest) {
    let group = String::from_utf8_lossy(&request.key).into_owned();
    let group = (!group.is_empty()).then_some(group.as_str());
    if group == Some("reset") {
        exec.server.memcache.reset();
        return encode_binary_stat(exec.out, request, b"", b"");
    }
    let Some(lines) = stats::report(exec.server, exec.db, group) else {
        return status(exec, request, BinaryStatus::KeyNotFound, 0);
    };
    for (name, value) in lines {
        encode_binary_stat(exec.out, request, name.as_bytes(), value.as_bytes());
    }
    encode_binary_stat(exec.out, request, b"", b"");
}
