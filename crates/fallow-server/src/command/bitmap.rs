//! Bitmap commands (Redis bitops.c): SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD and BITFIELD_RO on
//! string values. This file parses arguments in Redis's order (so the same bad request gets the same
//! error) and sizes strings; the bit arithmetic is `fallow_store::types::bitmap`. A write that grows a
//! string reserves the growth first (`Ctx::reserve_memory`, as SETRANGE does), and offsets are bounded by
//! `proto-max-bulk-len` (512 MB: bit offsets up to 2^32-1).
use super::string::read_owned_for_write;
use super::{is, parse_int, Ctx, Handler, NOT_INTEGER, SYNTAX, WRONGTYPE};
use fallow_store::types::bitmap::{
    self, BitOp, BitOpFold, FieldType, FieldWrite, Overflow, RangeUnit,
};
use fallow_store::WrongType;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("setbit", setbit),
    ("getbit", getbit),
    ("bitcount", bitcount),
    ("bitpos", bitpos),
    ("bitop", bitop),
    ("bitfield", bitfield),
    ("bitfield_ro", bitfield_ro),
];

const OFFSET_ERROR: &str = "ERR bit offset is not an integer or out of range";
const BIT_ERROR: &str = "ERR bit is not an integer or out of range";
const FIELD_TYPE_ERROR: &str =
    "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";
/// The smallest `proto-max-bulk-len` CONFIG SET accepts: offsets below it need no look at the setting.
const BULK_LEN_FLOOR_BYTES: u64 = 1 << 20;

/// Parses a bit offset as Redis's getBitOffsetFromArgument: a non-negative integer whose byte lies below
/// `proto-max-bulk-len`; for BITFIELD (`field_bits` given) `#N` means the N-th field of that width. The
/// multiplication wraps as Redis's does, so a huge `#N` is refused as negative or too large.
fn parse_offset(ctx: &Ctx, arg: &[u8], field_bits: Option<u32>) -> Option<u64> {
    let (digits, unit) = match (arg.first(), field_bits) {
        (Some(b'#'), Some(bits)) => (&arg[1..], bits as i64),
        _ => (arg, 1),
    };
    let offset = parse_int(digits)?.wrapping_mul(unit);
    if offset < 0 {
        return None;
    }
    let byte = offset as u64 >> 3;
    if byte >= BULK_LEN_FLOOR_BYTES && byte >= ctx.server.config.read().proto_max_bulk_len_bytes {
        return None;
    }
    Some(offset as u64)
}

/// BITCOUNT/BITPOS's BYTE|BIT.
fn parse_unit(arg: &[u8]) -> Option<RangeUnit> {
    if is(arg, "byte") {
        Some(RangeUnit::Byte)
    } else if is(arg, "bit") {
        Some(RangeUnit::Bit)
    } else {
        None
    }
}

/// Reads the string at `key` for a write and pads it with zero bytes to at least `len_bytes`, reserving
/// the growth first. Returns the value, its expiry and whether it is new or grew (it must be stored even
/// if no bit changes, as Redis stores it); None after an error reply (WRONGTYPE, OOM).
fn string_grown_to(ctx: &mut Ctx, key: &[u8], len_bytes: u64) -> Option<(Vec<u8>, u64, bool)> {
    let (mut value, expire_at, existed) = match read_owned_for_write(ctx, key) {
        Ok(Some((value, expire_at))) => (value, expire_at, true),
        Ok(None) => (Vec::new(), 0, false),
        Err(WrongType) => {
            ctx.out.error(WRONGTYPE);
            return None;
        }
    };
    let growth_bytes = (len_bytes as usize).saturating_sub(value.len());
    if growth_bytes > 0 && !ctx.reserve_memory(growth_bytes) {
        return None;
    }
    value.resize(value.len() + growth_bytes, 0);
    Some((value, expire_at, growth_bytes > 0 || !existed))
}

fn store_string(ctx: &mut Ctx, key: &[u8], value: &[u8], expire_at_ms: u64) {
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    ctx.guards
        .shard(key)
        .set_string(db, key, value, expire_at_ms, 0, now);
}

fn setbit(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(offset) = parse_offset(ctx, args[2], None) else {
        return ctx.out.error(OFFSET_ERROR);
    };
    let on = match parse_int(args[3]) {
        Some(0) => false,
        Some(1) => true,
        _ => return ctx.out.error(BIT_ERROR),
    };
    let Some((mut value, expire_at, grown)) =
        string_grown_to(ctx, args[1], bitmap::len_for_bit(offset))
    else {
        return;
    };
    let was_on = bitmap::set_bit(&mut value, offset, on);
    if grown || was_on != on {
        store_string(ctx, args[1], &value, expire_at);
        ctx.notify(super::Class::STRING, "setbit", args[1]);
    }
    ctx.out.int(was_on as i64);
}

fn getbit(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(offset) = parse_offset(ctx, args[2], None) else {
        return ctx.out.error(OFFSET_ERROR);
    };
    let db = ctx.keyspace();
    match ctx
        .guards
        .shard(args[1])
        .get_string(db, args[1], ctx.now_ms)
    {
        Ok(Some((value, _))) => ctx.out.int(bitmap::get_bit(value, offset) as i64),
        Ok(None) => ctx.out.int(0),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn bitcount(ctx: &mut Ctx, args: &[&[u8]]) {
    let (db, now) = (ctx.keyspace(), ctx.now_ms);
    // Redis 7.0 looks the key up before it reads the range: a missing key counts 0 whatever follows.
    let value = match ctx.guards.shard(args[1]).get_string(db, args[1], now) {
        Ok(Some((value, _))) => value,
        Ok(None) => return ctx.out.int(0),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let range = match args.len() {
        2 => None,
        4 | 5 => {
            let (Some(start), Some(end)) = (parse_int(args[2]), parse_int(args[3])) else {
                return ctx.out.error(NOT_INTEGER);
            };
            // Redis answers a reversed negative range before it reads BYTE|BIT.
            if start < 0 && end < 0 && start > end {
                return ctx.out.int(0);
            }
            match args.get(4).map(|arg| parse_unit(arg)) {
                None => Some((start, end, RangeUnit::Byte)),
                Some(Some(unit)) => Some((start, end, unit)),
                Some(None) => return ctx.out.error(SYNTAX),
            }
        }
        _ => return ctx.out.error(SYNTAX),
    };
    ctx.out.int(bitmap::bitcount(value, range) as i64);
}

fn bitpos(ctx: &mut Ctx, args: &[&[u8]]) {
    let bit = match parse_int(args[2]) {
        Some(0) => false,
        Some(1) => true,
        Some(_) => return ctx.out.error("ERR The bit argument must be 1 or 0."),
        None => return ctx.out.error(NOT_INTEGER),
    };
    let (db, now) = (ctx.keyspace(), ctx.now_ms);
    // A missing key is an endless run of zeros; its range is not read.
    let value = match ctx.guards.shard(args[1]).get_string(db, args[1], now) {
        Ok(Some((value, _))) => value,
        Ok(None) => return ctx.out.int(if bit { -1 } else { 0 }),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    if args.len() > 6 {
        return ctx.out.error(SYNTAX);
    }
    // Redis's order: start, then BYTE|BIT, then end.
    let start = match args.get(3).map(|arg| parse_int(arg)) {
        None => None,
        Some(Some(start)) => Some(start),
        Some(None) => return ctx.out.error(NOT_INTEGER),
    };
    let unit = match args.get(5).map(|arg| parse_unit(arg)) {
        None => RangeUnit::Byte,
        Some(Some(unit)) => unit,
        Some(None) => return ctx.out.error(SYNTAX),
    };
    let end = match args.get(4).map(|arg| parse_int(arg)) {
        None => None,
        Some(Some(end)) => Some(end),
        Some(None) => return ctx.out.error(NOT_INTEGER),
    };
    ctx.out.int(bitmap::bitpos(value, bit, start, end, unit));
}

fn bitop(ctx: &mut Ctx, args: &[&[u8]]) {
    let op = match args[1].to_ascii_lowercase().as_slice() {
        b"and" => BitOp::And,
        b"or" => BitOp::Or,
        b"xor" => BitOp::Xor,
        b"not" => BitOp::Not,
        _ => return ctx.out.error(SYNTAX),
    };
    if op == BitOp::Not && args.len() != 4 {
        return ctx
            .out
            .error("ERR BITOP NOT must be called with a single source key.");
    }
    let (db, now) = (ctx.keyspace(), ctx.now_ms);
    // Sources are folded one at a time: each may sit in another shard, and a missing one is empty.
    let mut fold = BitOpFold::new(op);
    for key in &args[3..] {
        match ctx.guards.shard(key).get_string(db, key, now) {
            Ok(Some((value, _))) => fold.push(value),
            Ok(None) => fold.push(b""),
            Err(WrongType) => return ctx.out.error(WRONGTYPE),
        }
    }
    let result = fold.finish();
    let destination = args[2];
    if result.is_empty() {
        // Every source is empty or missing: Redis deletes the destination.
        if ctx.guards.shard(destination).remove(db, destination, now) {
            ctx.notify(super::Class::GENERIC, "del", destination);
        }
    } else {
        if !ctx.reserve_memory(result.len()) {
            return;
        }
        store_string(ctx, destination, &result, 0);
        ctx.notify(super::Class::STRING, "set", destination);
    }
    ctx.out.int(result.len() as i64);
}

// ----- BITFIELD -------------------------------------------------------------------------------------

/// One BITFIELD operation, parsed.
struct FieldOp {
    field: FieldType,
    offset: u64,
    /// None for GET.
    write: Option<FieldWrite>,
    overflow: Overflow,
}

/// Parses a field type: `i` or `u` (lower case) then the width, read up to a NUL byte as Redis reads it.
fn parse_field_type(arg: &[u8]) -> Option<FieldType> {
    let (&sign, width) = arg.split_first()?;
    let width = width.split(|&byte| byte == 0).next().unwrap_or_default();
    let signed = match sign {
        b'i' => true,
        b'u' => false,
        _ => return None,
    };
    FieldType::new(signed, parse_int(width)?)
}

/// Parses every operation, in order, before anything runs (Redis's order of errors); None after an
/// error reply.
fn parse_field_ops(ctx: &mut Ctx, args: &[&[u8]]) -> Option<Vec<FieldOp>> {
    let mut ops = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut index = 2;
    while index < args.len() {
        let (name, following) = (args[index], args.len() - index - 1);
        let takes_value = if is(name, "get") && following >= 2 {
            false
        } else if (is(name, "set") || is(name, "incrby")) && following >= 3 {
            true
        } else if is(name, "overflow") && following >= 1 {
            let policy = args[index + 1];
            overflow = if is(policy, "wrap") {
                Overflow::Wrap
            } else if is(policy, "sat") {
                Overflow::Sat
            } else if is(policy, "fail") {
                Overflow::Fail
            } else {
                ctx.out.error("ERR Invalid OVERFLOW type specified");
                return None;
            };
            index += 2;
            continue;
        } else {
            ctx.out.error(SYNTAX);
            return None;
        };
        let Some(field) = parse_field_type(args[index + 1]) else {
            ctx.out.error(FIELD_TYPE_ERROR);
            return None;
        };
        let Some(offset) = parse_offset(ctx, args[index + 2], Some(field.bits)) else {
            ctx.out.error(OFFSET_ERROR);
            return None;
        };
        let write = if takes_value {
            let Some(value) = parse_int(args[index + 3]) else {
                ctx.out.error(NOT_INTEGER);
                return None;
            };
            Some(if is(name, "set") {
                FieldWrite::Set(value)
            } else {
                FieldWrite::IncrBy(value)
            })
        } else {
            None
        };
        ops.push(FieldOp {
            field,
            offset,
            write,
            overflow,
        });
        index += if takes_value { 4 } else { 3 };
    }
    Some(ops)
}

fn bitfield(ctx: &mut Ctx, args: &[&[u8]]) {
    run_bitfield(ctx, args, false);
}

fn bitfield_ro(ctx: &mut Ctx, args: &[&[u8]]) {
    run_bitfield(ctx, args, true);
}

fn run_bitfield(ctx: &mut Ctx, args: &[&[u8]], read_only: bool) {
    let Some(ops) = parse_field_ops(ctx, args) else {
        return;
    };
    let key = args[1];
    let last_written_bit = ops
        .iter()
        .filter(|op| op.write.is_some())
        .map(|op| op.field.last_bit(op.offset))
        .max();
    let Some(last_written_bit) = last_written_bit else {
        return read_fields(ctx, key, &ops);
    };
    if read_only {
        return ctx
            .out
            .error("ERR BITFIELD_RO only supports the GET subcommand");
    }
    let Some((mut value, expire_at, grown)) =
        string_grown_to(ctx, key, bitmap::len_for_bit(last_written_bit))
    else {
        return;
    };
    let mut changed = false;
    ctx.out.array_len(ops.len());
    for op in &ops {
        let Some(write) = op.write else {
            ctx.out.int(bitmap::read_field(&value, op.offset, op.field));
            continue;
        };
        let outcome = bitmap::write_field(&mut value, op.offset, op.field, write, op.overflow);
        changed |= outcome.changed;
        match outcome.reply {
            Some(reply) => ctx.out.int(reply),
            None => ctx.out.nil(),
        }
    }
    // Redis keeps a string it created or grew even when every write failed.
    if grown || changed {
        store_string(ctx, key, &value, expire_at);
        ctx.notify(super::Class::STRING, "setbit", key);
    }
}

/// BITFIELD with GETs only: a read; a missing key reads as zeros.
fn read_fields(ctx: &mut Ctx, key: &[u8], ops: &[FieldOp]) {
    let (db, now) = (ctx.keyspace(), ctx.now_ms);
    let value = match ctx.guards.shard(key).get_string(db, key, now) {
        Ok(found) => found.map_or(&b""[..], |(value, _)| value),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    ctx.out.array_len(ops.len());
    for op in ops {
        ctx.out.int(bitmap::read_field(value, op.offset, op.field));
    }
}
