//! HyperLogLog commands (Redis hyperloglog.c): PFADD, PFCOUNT, PFMERGE, PFDEBUG and PFSELFTEST. An HLL is
//! a string value in Redis's exact representation (`fallow_store::types::hyperloglog`); this file reads
//! and writes those strings and answers as Redis does, error texts included. A write that grows the value
//! (sparse opcodes, or the 12 KB dense form) reserves the growth first.
use super::string::read_owned_for_write;
use super::{is, Ctx, Handler, WRONGTYPE};
use fallow_store::types::hyperloglog::{self as hll, Corrupt, Encoding, Registers};
use fallow_store::WrongType;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("pfadd", pfadd),
    ("pfcount", pfcount),
    ("pfmerge", pfmerge),
    ("pfdebug", pfdebug),
    ("pfselftest", pfselftest),
];

const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";
/// Distinct elements PFSELFTEST adds (Redis adds 10 million; a million checks the same powers of ten
/// but one, in a tenth of the time).
const SELF_TEST_ELEMENTS: u64 = 1_000_000;

/// Bytes past which a sparse HLL turns dense (`hll-sparse-max-bytes`).
fn sparse_bytes_max(ctx: &Ctx) -> usize {
    ctx.server.config.read().hll_sparse_max_bytes as usize
}

/// Reads the HLL at `key` for a write: Ok(None) when missing; Err(reply) when it is another type or a
/// string that is not an HLL.
fn read_for_write(ctx: &mut Ctx, key: &[u8]) -> Result<Option<(Vec<u8>, u64)>, &'static str> {
    match read_owned_for_write(ctx, key) {
        Ok(Some((value, expire_at))) if hll::encoding_of(&value).is_ok() => {
            Ok(Some((value, expire_at)))
        }
        Ok(Some(_)) => Err(NOT_HLL),
        Ok(None) => Ok(None),
        Err(WrongType) => Err(WRONGTYPE),
    }
}

/// Stores an HLL that was `old_len` bytes long, reserving its growth first; false after an OOM reply.
fn store(ctx: &mut Ctx, key: &[u8], value: &[u8], expire_at_ms: u64, old_len: usize) -> bool {
    let growth_bytes = value.len().saturating_sub(old_len);
    if growth_bytes > 0 && !ctx.reserve_memory(growth_bytes) {
        return false;
    }
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    ctx.guards
        .shard(key)
        .set_string(db, key, value, expire_at_ms, 0, now);
    true
}

fn pfadd(ctx: &mut Ctx, args: &[&[u8]]) {
    let key = args[1];
    let (mut value, expire_at, old_len) = match read_for_write(ctx, key) {
        Ok(Some((value, expire_at))) => {
            let len = value.len();
            (value, expire_at, len)
        }
        Ok(None) => (hll::new_sparse(), 0, 0),
        Err(reply) => return ctx.out.error(reply),
    };
    // Creating the key counts as an update even with no elements (a stored HLL is never empty).
    let mut updated = old_len == 0;
    let sparse_bytes_max = sparse_bytes_max(ctx);
    for element in &args[2..] {
        match hll::add(&mut value, element, sparse_bytes_max) {
            Ok(changed) => updated |= changed,
            Err(Corrupt) => return ctx.out.error(CORRUPT),
        }
    }
    if updated {
        hll::invalidate_cache(&mut value);
        if !store(ctx, key, &value, expire_at, old_len) {
            return;
        }
        ctx.notify(super::Class::STRING, "pfadd", key);
    }
    ctx.out.int(updated as i64);
}

fn pfcount(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len() > 2 {
        return pfcount_union(ctx, &args[1..]);
    }
    let key = args[1];
    let (db, now) = (ctx.keyspace(), ctx.now_ms);
    let shard = ctx.guards.shard(key);
    let (value, info) = match shard.get_string(db, key, now) {
        Ok(Some(found)) => found,
        Ok(None) => return ctx.out.int(0),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    if hll::encoding_of(value).is_err() {
        return ctx.out.error(NOT_HLL);
    }
    if let Some(cached) = hll::cached_cardinality(value) {
        return ctx.out.int(cached as i64);
    }
    let Ok(cardinality) = hll::cardinality(value) else {
        return ctx.out.error(CORRUPT);
    };
    // The fresh count is cached in the value, as Redis does (same length: nothing to reserve).
    let mut updated = value.to_vec();
    hll::store_cardinality(&mut updated, cardinality);
    shard.set_string(db, key, &updated, info.expire_at_ms, info.client_flags, now);
    ctx.out.int(cardinality as i64);
}

/// The union of the HLLs at `keys` (missing ones are empty), or None after an error reply.
fn union_of(ctx: &mut Ctx, keys: &[&[u8]]) -> Option<(Registers, bool)> {
    let (db, now) = (ctx.keyspace(), ctx.now_ms);
    let mut registers = Registers::new();
    let mut any_dense = false;
    for key in keys {
        let value = match ctx.guards.shard(key).get_string(db, key, now) {
            Ok(Some((value, _))) => value,
            Ok(None) => continue,
            Err(WrongType) => {
                ctx.out.error(WRONGTYPE);
                return None;
            }
        };
        let Ok(encoding) = hll::encoding_of(value) else {
            ctx.out.error(NOT_HLL);
            return None;
        };
        any_dense |= encoding == Encoding::Dense;
        if registers.merge(value).is_err() {
            ctx.out.error(CORRUPT);
            return None;
        }
    }
    Some((registers, any_dense))
}

/// PFCOUNT of several keys: the union's count, written nowhere.
fn pfcount_union(ctx: &mut Ctx, keys: &[&[u8]]) {
    if let Some((registers, _)) = union_of(ctx, keys) {
        ctx.out.int(registers.cardinality() as i64);
    }
}

fn pfmerge(ctx: &mut Ctx, args: &[&[u8]]) {
    // The destination is a source too.
    let Some((registers, any_dense)) = union_of(ctx, &args[1..]) else {
        return;
    };
    let destination = args[1];
    let (mut value, expire_at, old_len) = match read_for_write(ctx, destination) {
        Ok(Some((value, expire_at))) => {
            let len = value.len();
            (value, expire_at, len)
        }
        Ok(None) => (hll::new_sparse(), 0, 0),
        Err(reply) => return ctx.out.error(reply),
    };
    // Redis writes a dense result when any source is dense, and a sparse one (while it fits) otherwise.
    if any_dense && hll::to_dense(&mut value).is_err() {
        return ctx.out.error(CORRUPT);
    }
    let sparse_bytes_max = sparse_bytes_max(ctx);
    for (index, &count) in registers.values().iter().enumerate() {
        // The destination was merged above, so its opcodes are valid.
        let _ = hll::raise_register(&mut value, index, count, sparse_bytes_max);
    }
    hll::invalidate_cache(&mut value);
    if store(ctx, destination, &value, expire_at, old_len) {
        ctx.notify(super::Class::STRING, "pfadd", destination);
        ctx.out.ok();
    }
}

fn pfdebug(ctx: &mut Ctx, args: &[&[u8]]) {
    let (subcommand, key) = (args[1], args[2]);
    let (mut value, expire_at) = match read_for_write(ctx, key) {
        Ok(Some(found)) => found,
        Ok(None) => return ctx.out.error("ERR The specified key does not exist"),
        Err(reply) => return ctx.out.error(reply),
    };
    let old_len = value.len();
    let sparse = hll::encoding_of(&value) == Ok(Encoding::Sparse);
    if is(subcommand, "getreg") || is(subcommand, "todense") {
        // Both leave the value dense, as Redis does.
        if sparse {
            if hll::to_dense(&mut value).is_err() {
                return ctx.out.error(CORRUPT);
            }
            if !store(ctx, key, &value, expire_at, old_len) {
                return;
            }
        }
        if is(subcommand, "todense") {
            return ctx.out.int(sparse as i64);
        }
        let registers = hll::dense_registers(&value);
        ctx.out.array_len(registers.len());
        registers
            .iter()
            .for_each(|&register| ctx.out.int(register as i64));
    } else if is(subcommand, "decode") {
        if !sparse {
            return ctx.out.error("ERR HLL encoding is not sparse");
        }
        ctx.out.bulk(hll::decode_sparse(&value).as_bytes());
    } else if is(subcommand, "encoding") {
        let encoding = if sparse {
            Encoding::Sparse
        } else {
            Encoding::Dense
        };
        ctx.out.simple(encoding.name());
    } else {
        // Redis prints the name with %s: up to a NUL byte.
        let name = subcommand
            .split(|&byte| byte == 0)
            .next()
            .unwrap_or_default();
        ctx.out.error(&format!(
            "ERR Unknown PFDEBUG subcommand '{}'",
            String::from_utf8_lossy(name)
        ));
    }
}

fn pfselftest(ctx: &mut Ctx, _args: &[&[u8]]) {
    match hll::self_test(SELF_TEST_ELEMENTS, rand::random()) {
        Ok(()) => ctx.out.ok(),
        Err(failure) => ctx.out.error(&failure),
    }
}
