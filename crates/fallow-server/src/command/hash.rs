//! Hash commands (Redis t_hash). A hash is an insertion-ordered index map, so HRANDFIELD picks fields by
//! position and an HSCAN cursor is simply a position. Also holds the helpers the set commands share:
//! random picks with a count (HRANDFIELD/SRANDMEMBER) and SCAN-family cursors and options.
use super::flags::*;
use super::{
    is, parse_float, parse_int, spec, CommandSpec, Ctx, Group, NOT_FLOAT, NOT_INTEGER, ONE_KEY,
    SYNTAX, WRONGTYPE,
};
use fallow_proto::reply::format_double_human;
use fallow_proto::ReplyWriter;
use fallow_store::types::HashValue;
use fallow_store::WrongType;
use rand::Rng;
use std::ops::Range;

pub const COMMANDS: &[CommandSpec] = &[
    spec(
        "hset",
        -4,
        WRITE | DENYOOM | FAST,
        ONE_KEY,
        Group::Hash,
        "Set fields of a hash",
        hset,
    ),
    spec(
        "hmset",
        -4,
        WRITE | DENYOOM | FAST,
        ONE_KEY,
        Group::Hash,
        "Set fields of a hash (old form, replies OK)",
        hmset,
    ),
    spec(
        "hsetnx",
        4,
        WRITE | DENYOOM | FAST,
        ONE_KEY,
        Group::Hash,
        "Set a field only if it does not exist",
        hsetnx,
    ),
    spec(
        "hget",
        3,
        READONLY | FAST,
        ONE_KEY,
        Group::Hash,
        "Get the value of a field",
        hget,
    ),
    spec(
        "hmget",
        -3,
        READONLY | FAST,
        ONE_KEY,
        Group::Hash,
        "Get the values of several fields",
        hmget,
    ),
    spec(
        "hdel",
        -3,
        WRITE | FAST,
        ONE_KEY,
        Group::Hash,
        "Delete fields",
        hdel,
    ),
    spec(
        "hlen",
        2,
        READONLY | FAST,
        ONE_KEY,
        Group::Hash,
        "Number of fields",
        hlen,
    ),
    spec(
        "hstrlen",
        3,
        READONLY | FAST,
        ONE_KEY,
        Group::Hash,
        "Length of a field's value",
        hstrlen,
    ),
    spec(
        "hexists",
        3,
        READONLY | FAST,
        ONE_KEY,
        Group::Hash,
        "Whether a field exists",
        hexists,
    ),
    spec(
        "hgetall",
        2,
        READONLY,
        ONE_KEY,
        Group::Hash,
        "All fields and values",
        hgetall,
    ),
    spec(
        "hkeys",
        2,
        READONLY,
        ONE_KEY,
        Group::Hash,
        "All fields",
        hkeys,
    ),
    spec(
        "hvals",
        2,
        READONLY,
        ONE_KEY,
        Group::Hash,
        "All values",
        hvals,
    ),
    spec(
        "hincrby",
        4,
        WRITE | DENYOOM | FAST,
        ONE_KEY,
        Group::Hash,
        "Increment a field by an integer",
        hincrby,
    ),
    spec(
        "hincrbyfloat",
        4,
        WRITE | DENYOOM | FAST,
        ONE_KEY,
        Group::Hash,
        "Increment a field by a float",
        hincrbyfloat,
    ),
    spec(
        "hrandfield",
        -2,
        READONLY,
        ONE_KEY,
        Group::Hash,
        "Random fields",
        hrandfield,
    ),
    spec(
        "hscan",
        -3,
        READONLY,
        ONE_KEY,
        Group::Hash,
        "Iterate fields and values",
        hscan,
    ),
];

// ----- shared with the set commands -----------------------------------------------------------------

/// Most picks a negative count may ask for: each pick is a reply element, and Redis would try to build
/// any size of reply. 16M elements is already hundreds of MB of output.
pub(super) const RANDOM_PICKS_MAX: u64 = 1 << 24;

/// Parses the count of HRANDFIELD/SRANDMEMBER: an integer in [-i64::MAX, i64::MAX] whose magnitude is
/// at most RANDOM_PICKS_MAX when negative.
pub(super) fn parse_random_count(arg: &[u8]) -> Result<i64, &'static str> {
    let count = parse_int(arg).ok_or(NOT_INTEGER)?;
    if count == i64::MIN {
        return Err("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807");
    }
    if count < 0 && count.unsigned_abs() > RANDOM_PICKS_MAX {
        return Err("ERR value is out of range");
    }
    Ok(count)
}

/// How many picks a count yields from a collection of `len`: a negative count picks |count| times with
/// repetition, a positive one picks distinct elements, at most all of them.
pub(super) fn pick_count(len: usize, count: i64) -> usize {
    if len == 0 {
        return 0;
    }
    if count < 0 {
        count.unsigned_abs() as usize
    } else {
        (count as u64).min(len as u64) as usize
    }
}

/// Calls `visit` with the index of each pick (see `pick_count`). A positive count covering the whole
/// collection visits every index in order, as Redis returns the whole collection then.
pub(super) fn pick_indexes(
    len: usize,
    count: i64,
    rng: &mut impl Rng,
    mut visit: impl FnMut(usize),
) {
    let picks = pick_count(len, count);
    if picks == 0 {
        return;
    }
    if count < 0 {
        (0..picks).for_each(|_| visit(rng.gen_range(0..len)));
    } else if picks == len {
        (0..len).for_each(visit);
    } else {
        rand::seq::index::sample(rng, len, picks)
            .into_iter()
            .for_each(visit);
    }
}

/// MATCH and COUNT of a SCAN-family command.
pub(super) struct ScanOptions<'a> {
    pub pattern: Option<&'a [u8]>,
    pub count: usize,
}

impl ScanOptions<'_> {
    pub fn matches(&self, text: &[u8]) -> bool {
        self.pattern
            .is_none_or(|pattern| fallow_store::glob::matches(pattern, text))
    }
}

/// Parses a cursor as Redis's strtoul-based parsing does: an optional sign (a negative cursor wraps, as
/// in C), then decimal digits, nothing else.
pub(super) fn parse_cursor(arg: &[u8]) -> Option<u64> {
    let (negative, digits) = match arg.first() {
        Some(b'-') => (true, &arg[1..]),
        Some(b'+') => (false, &arg[1..]),
        _ => (false, arg),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

/// Parses `[MATCH pattern] [COUNT count]` from `args` (the arguments after the cursor).
pub(super) fn parse_scan_options<'a>(args: &[&'a [u8]]) -> Result<ScanOptions<'a>, &'static str> {
    let mut options = ScanOptions {
        pattern: None,
        count: 10,
    };
    let mut index = 0;
    while index < args.len() {
        let Some(&value) = args.get(index + 1) else {
            return Err(SYNTAX);
        };
        if is(args[index], "count") {
            let count = parse_int(value).ok_or(NOT_INTEGER)?;
            if count < 1 {
                return Err(SYNTAX);
            }
            options.count = usize::try_from(count).unwrap_or(usize::MAX);
        } else if is(args[index], "match") {
            // "*" matches everything; skipping it saves the per-element match, as Redis does.
            options.pattern = (value != b"*").then_some(value);
        } else {
            return Err(SYNTAX);
        }
        index += 2;
    }
    Ok(options)
}

/// The positions one scan step visits in a collection of `len`, and the cursor that follows (0 when
/// the collection is done). A scan walks down from the end: cursor c (0 = start) means positions
/// 0..c are still to visit. Removal swaps the last element into the hole and insertion appends, so
/// the unvisited positions only ever lose their own removed elements: every element present for the
/// whole scan is returned, as Redis guarantees (a moved, already visited one may come twice).
pub(super) fn scan_window(cursor: u64, count: usize, len: usize) -> (u64, Range<usize>) {
    let end = match cursor {
        0 => len,
        cursor => usize::try_from(cursor).unwrap_or(usize::MAX).min(len),
    };
    let start = end.saturating_sub(count);
    (start as u64, start..end)
}

/// Writes the reply of a SCAN-family command: the next cursor, then the elements.
pub(super) fn write_scan_reply<'a>(
    out: &mut ReplyWriter,
    next_cursor: u64,
    elements: impl ExactSizeIterator<Item = &'a [u8]>,
) {
    out.array_len(2);
    out.bulk(itoa::Buffer::new().format(next_cursor).as_bytes());
    out.bulks(elements);
}

// ----- commands -------------------------------------------------------------------------------------

/// Sets field/value pairs from args[2..]; Ok(count of new fields), or an error reply.
fn set_pairs(ctx: &mut Ctx, args: &[&[u8]]) -> Result<i64, String> {
    if !args.len().is_multiple_of(2) {
        let name = String::from_utf8_lossy(args[0]).to_ascii_lowercase();
        return Err(super::arity_error(&name));
    }
    let db = ctx.db();
    let now = ctx.now_ms;
    let added = ctx
        .guards
        .shard(args[1])
        .update::<HashValue, _>(db, args[1], now, true, |hash| {
            args[2..]
                .chunks(2)
                .filter(|pair| hash.insert(pair[0], pair[1]))
                .count()
        })
        .map_err(|WrongType| WRONGTYPE.to_string())?;
    Ok(added.unwrap_or(0) as i64)
}

fn hset(ctx: &mut Ctx, args: &[&[u8]]) {
    match set_pairs(ctx, args) {
        Ok(added) => ctx.out.int(added),
        Err(reply) => ctx.out.error(&reply),
    }
}

fn hmset(ctx: &mut Ctx, args: &[&[u8]]) {
    match set_pairs(ctx, args) {
        Ok(_) => ctx.out.ok(),
        Err(reply) => ctx.out.error(&reply),
    }
}

fn hsetnx(ctx: &mut Ctx, args: &[&[u8]]) {
    let (key, field, value) = (args[1], args[2], args[3]);
    let db = ctx.db();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    // Checked first so a refused HSETNX does not count as a modification (WATCH).
    match shard.peek_collection::<HashValue>(db, key, now) {
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
        Ok(Some(hash)) if hash.get(field).is_some() => return ctx.out.int(0),
        Ok(_) => {}
    }
    let _ = shard.update::<HashValue, _>(db, key, now, true, |hash| hash.insert(field, value));
    ctx.out.int(1);
}

fn hget(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.db();
    let now = ctx.now_ms;
    match ctx
        .guards
        .shard(args[1])
        .read::<HashValue>(db, args[1], now)
    {
        Ok(Some(hash)) => match hash.get(args[2]) {
            Some(value) => ctx.out.bulk(value),
            None => ctx.out.nil(),
        },
        Ok(None) => ctx.out.nil(),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn hmget(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.db();
    let now = ctx.now_ms;
    let hash = match ctx
        .guards
        .shard(args[1])
        .read::<HashValue>(db, args[1], now)
    {
        Ok(hash) => hash,
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let fields = &args[2..];
    ctx.out.array_len(fields.len());
    for field in fields {
        match hash.and_then(|hash| hash.get(field)) {
            Some(value) => ctx.out.bulk(value),
            None => ctx.out.nil(),
        }
    }
}

fn hdel(ctx: &mut Ctx, args: &[&[u8]]) {
    let (key, fields) = (args[1], &args[2..]);
    let db = ctx.db();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    match shard.peek_collection::<HashValue>(db, key, now) {
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
        Ok(Some(hash)) if fields.iter().any(|field| hash.get(field).is_some()) => {}
        Ok(_) => return ctx.out.int(0),
    }
    let removed = shard.update::<HashValue, _>(db, key, now, false, |hash| {
        fields.iter().filter(|field| hash.remove(field)).count()
    });
    ctx.out.int(removed.ok().flatten().unwrap_or(0) as i64);
}

/// Replies with `reply(hash)`, or `missing` for an absent key.
fn read_int(ctx: &mut Ctx, key: &[u8], missing: i64, reply: impl FnOnce(&HashValue) -> i64) {
    let db = ctx.db();
    let now = ctx.now_ms;
    match ctx.guards.shard(key).read::<HashValue>(db, key, now) {
        Ok(Some(hash)) => ctx.out.int(reply(hash)),
        Ok(None) => ctx.out.int(missing),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn hlen(ctx: &mut Ctx, args: &[&[u8]]) {
    read_int(ctx, args[1], 0, |hash| hash.len() as i64);
}

fn hstrlen(ctx: &mut Ctx, args: &[&[u8]]) {
    read_int(ctx, args[1], 0, |hash| {
        hash.get(args[2]).map_or(0, |value| value.len() as i64)
    });
}

fn hexists(ctx: &mut Ctx, args: &[&[u8]]) {
    read_int(ctx, args[1], 0, |hash| hash.get(args[2]).is_some() as i64);
}

/// Which parts of each entry HGETALL/HKEYS/HVALS return.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Parts {
    Both,
    Fields,
    Values,
}

fn write_all(ctx: &mut Ctx, key: &[u8], parts: Parts) {
    let db = ctx.db();
    let now = ctx.now_ms;
    let budget = ctx.reply_budget();
    let hash = match ctx.guards.shard(key).read::<HashValue>(db, key, now) {
        Ok(hash) => hash,
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let len = hash.map_or(0, HashValue::len);
    // Sized before it is built (a walk copying nothing): refused if it would pass the client's output
    // hard limit.
    let bytes: u64 = hash
        .into_iter()
        .flat_map(HashValue::iter)
        .map(|(field, value)| match parts {
            Parts::Both => {
                super::bulk_reply_bytes(field.len()) + super::bulk_reply_bytes(value.len())
            }
            Parts::Fields => super::bulk_reply_bytes(field.len()),
            Parts::Values => super::bulk_reply_bytes(value.len()),
        })
        .sum();
    if bytes > budget {
        return ctx.refuse_reply(bytes);
    }
    match parts {
        Parts::Both => ctx.out.map_len(len),
        Parts::Fields | Parts::Values => ctx.out.array_len(len),
    }
    for (field, value) in hash.into_iter().flat_map(HashValue::iter) {
        if parts != Parts::Values {
            ctx.out.bulk(field);
        }
        if parts != Parts::Fields {
            ctx.out.bulk(value);
        }
    }
}

fn hgetall(ctx: &mut Ctx, args: &[&[u8]]) {
    write_all(ctx, args[1], Parts::Both);
}

fn hkeys(ctx: &mut Ctx, args: &[&[u8]]) {
    write_all(ctx, args[1], Parts::Fields);
}

fn hvals(ctx: &mut Ctx, args: &[&[u8]]) {
    write_all(ctx, args[1], Parts::Values);
}

/// Replaces a field's value with the text of `step(current)` (current is None when the field is
/// absent), keeping the key's TTL. Ok(new value) or an error reply; nothing changes on error.
fn update_field<T: std::fmt::Display>(
    ctx: &mut Ctx,
    key: &[u8],
    field: &[u8],
    step: impl FnOnce(Option<&[u8]>) -> Result<T, &'static str>,
) -> Result<T, &'static str> {
    let db = ctx.db();
    let now = ctx.now_ms;
    let updated = ctx
        .guards
        .shard(key)
        .update::<HashValue, _>(db, key, now, true, |hash| {
            let updated = step(hash.get(field))?;
            hash.insert(field, updated.to_string().as_bytes());
            Ok(updated)
        });
    match updated {
        Ok(Some(result)) => result,
        Ok(None) => unreachable!("update with create always runs"),
        Err(WrongType) => Err(WRONGTYPE),
    }
}

fn hincrby(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(delta) = parse_int(args[3]) else {
        return ctx.out.error(NOT_INTEGER);
    };
    let result = update_field(ctx, args[1], args[2], |current| {
        let current = match current {
            Some(text) => parse_int(text).ok_or("ERR hash value is not an integer")?,
            None => 0,
        };
        current
            .checked_add(delta)
            .ok_or("ERR increment or decrement would overflow")
    });
    match result {
        Ok(updated) => ctx.out.int(updated),
        Err(reply) => ctx.out.error(reply),
    }
}

fn hincrbyfloat(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(delta) = parse_float(args[3]) else {
        return ctx.out.error(NOT_FLOAT);
    };
    if !delta.is_finite() {
        return ctx.out.error("ERR value is NaN or Infinity");
    }
    let result = update_field(ctx, args[1], args[2], |current| {
        let current = match current {
            Some(text) => parse_float(text).ok_or("ERR hash value is not a float")?,
            None => 0.0,
        };
        let updated = current + delta;
        if !updated.is_finite() {
            return Err("ERR increment would produce NaN or Infinity");
        }
        Ok(format_double_human(updated))
    });
    match result {
        Ok(text) => ctx.out.bulk(text.as_bytes()),
        Err(reply) => ctx.out.error(reply),
    }
}

fn hrandfield(ctx: &mut Ctx, args: &[&[u8]]) {
    if args.len() == 2 {
        return hrandfield_one(ctx, args[1]);
    }
    let count = match parse_random_count(args[2]) {
        Ok(count) => count,
        Err(reply) => return ctx.out.error(reply),
    };
    let with_values = match args.get(3) {
        None => false,
        Some(option) if args.len() == 4 && is(option, "withvalues") => true,
        Some(_) => return ctx.out.error(SYNTAX),
    };
    // Redis refuses counts whose doubled reply length (field and value) would overflow.
    if with_values && count.unsigned_abs() > (i64::MAX / 2) as u64 {
        return ctx.out.error("ERR value is out of range");
    }
    let db = ctx.db();
    let now = ctx.now_ms;
    let hash = match ctx
        .guards
        .shard(args[1])
        .read::<HashValue>(db, args[1], now)
    {
        Ok(Some(hash)) => hash,
        Ok(None) => return ctx.out.array_len(0),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let picks = pick_count(hash.len(), count);
    // RESP2 flattens field/value pairs; RESP3 nests each pair in its own array.
    let flat_pairs = with_values && !ctx.out.resp3;
    ctx.out
        .array_len(if flat_pairs { 2 * picks } else { picks });
    let out = &mut *ctx.out;
    pick_indexes(hash.len(), count, &mut rand::thread_rng(), |index| {
        let (field, value) = hash.get_index(index).expect("picks are in range");
        if with_values && out.resp3 {
            out.array_len(2);
        }
        out.bulk(field);
        if with_values {
            out.bulk(value);
        }
    });
}

fn hrandfield_one(ctx: &mut Ctx, key: &[u8]) {
    let db = ctx.db();
    let now = ctx.now_ms;
    match ctx.guards.shard(key).read::<HashValue>(db, key, now) {
        Ok(Some(hash)) if !hash.is_empty() => {
            let index = rand::thread_rng().gen_range(0..hash.len());
            let (field, _) = hash.get_index(index).expect("index is in range");
            ctx.out.bulk(field);
        }
        Ok(_) => ctx.out.nil(),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn hscan(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(cursor) = parse_cursor(args[2]) else {
        return ctx.out.error("ERR invalid cursor");
    };
    let db = ctx.db();
    let now = ctx.now_ms;
    let hash = match ctx
        .guards
        .shard(args[1])
        .read::<HashValue>(db, args[1], now)
    {
        Ok(Some(hash)) => hash,
        Ok(None) => return write_scan_reply(ctx.out, 0, std::iter::empty()),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    // Options are parsed after the key lookup, so an absent key never reports an option error (Redis).
    let options = match parse_scan_options(&args[3..]) {
        Ok(options) => options,
        Err(reply) => return ctx.out.error(reply),
    };
    let (next_cursor, window) = scan_window(cursor, options.count, hash.len());
    let mut elements: Vec<&[u8]> = Vec::new();
    for index in window {
        let (field, value) = hash.get_index(index).expect("window is in range");
        if options.matches(field) {
            elements.extend([field, value]);
        }
    }
    write_scan_reply(ctx.out, next_cursor, elements.into_iter());
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn picks(len: usize, count: i64) -> Vec<usize> {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut seen = Vec::new();
        pick_indexes(len, count, &mut rng, |index| seen.push(index));
        seen
    }

    #[test]
    fn negative_counts_repeat_picks() {
        let seen = picks(3, -50);
        assert_eq!(seen.len(), 50);
        assert!(seen.iter().all(|&index| index < 3));
        // 50 draws from 3 leave no index unpicked with overwhelming probability (fixed seed).
        assert!((0..3).all(|index| seen.contains(&index)));
        assert_eq!(pick_count(3, -50), 50);
    }

    #[test]
    fn positive_counts_pick_distinct() {
        let mut seen = picks(100, 10);
        assert_eq!(seen.len(), 10);
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 10);
        assert!(seen.iter().all(|&index| index < 100));
        assert_eq!(picks(4, 10), vec![0, 1, 2, 3]);
        assert_eq!(picks(4, 4), vec![0, 1, 2, 3]);
    }

    #[test]
    fn empty_and_zero_counts_pick_nothing() {
        assert!(picks(0, -5).is_empty());
        assert!(picks(0, 5).is_empty());
        assert!(picks(5, 0).is_empty());
        assert_eq!(pick_count(0, -5), 0);
    }

    #[test]
    fn random_counts_are_bounded() {
        assert_eq!(parse_random_count(b"-3"), Ok(-3));
        assert_eq!(parse_random_count(b"9223372036854775807"), Ok(i64::MAX));
        assert!(parse_random_count(b"-9223372036854775808")
            .unwrap_err()
            .contains("must between"));
        assert_eq!(
            parse_random_count(b"-99999999"),
            Err("ERR value is out of range")
        );
        assert_eq!(parse_random_count(b"x"), Err(NOT_INTEGER));
    }

    #[test]
    fn cursors_parse_like_strtoul() {
        assert_eq!(parse_cursor(b"0"), Some(0));
        assert_eq!(parse_cursor(b"+12"), Some(12));
        assert_eq!(parse_cursor(b"-1"), Some(u64::MAX));
        assert_eq!(parse_cursor(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_cursor(b"18446744073709551616"), None);
        assert_eq!(parse_cursor(b" 1"), None);
        assert_eq!(parse_cursor(b"1x"), None);
        assert_eq!(parse_cursor(b""), None);
    }

    #[test]
    fn scan_windows_walk_down_the_positions() {
        assert_eq!(scan_window(0, 10, 25), (15, 15..25));
        assert_eq!(scan_window(15, 10, 25), (5, 5..15));
        assert_eq!(scan_window(5, 10, 25), (0, 0..5));
        assert_eq!(scan_window(0, usize::MAX, 25), (0, 0..25));
        assert_eq!(scan_window(u64::MAX, 10, 25), (15, 15..25));
        // The collection shrank below the cursor: the rest is still visited.
        assert_eq!(scan_window(20, 10, 12), (2, 2..12));
    }

    #[test]
    fn scans_survive_removals_and_insertions() {
        let mut hash = HashValue::default();
        for index in 0..100 {
            hash.insert(format!("f{index}").as_bytes(), b"v");
        }
        let (mut cursor, mut seen, mut step) = (0, Vec::new(), 0);
        loop {
            let (next, window) = scan_window(cursor, 7, hash.len());
            seen.extend(window.map(|index| hash.get_index(index).unwrap().0.to_vec()));
            // Between steps, remove visited and unvisited fields and add new ones.
            hash.remove(format!("f{}", step * 3).as_bytes());
            hash.remove(format!("f{}", 99 - step).as_bytes());
            hash.insert(format!("new{step}").as_bytes(), b"v");
            step += 1;
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        for (field, _) in hash.iter().filter(|(field, _)| field.starts_with(b"f")) {
            assert!(
                seen.iter().any(|seen| seen == field),
                "missed a field present throughout"
            );
        }
    }

    #[test]
    fn scan_options_parse_like_redis() {
        let options = parse_scan_options(&[b"MATCH", b"f*", b"count", b"5"]).unwrap();
        assert_eq!(options.count, 5);
        assert!(options.matches(b"foo") && !options.matches(b"bar"));
        assert!(parse_scan_options(&[b"match", b"*"])
            .unwrap()
            .pattern
            .is_none());
        assert_eq!(parse_scan_options(&[b"count", b"0"]).err(), Some(SYNTAX));
        assert_eq!(
            parse_scan_options(&[b"count", b"x"]).err(),
            Some(NOT_INTEGER)
        );
        assert_eq!(parse_scan_options(&[b"match"]).err(), Some(SYNTAX));
        assert_eq!(
            parse_scan_options(&[b"type", b"string"]).err(),
            Some(SYNTAX)
        );
    }
}
