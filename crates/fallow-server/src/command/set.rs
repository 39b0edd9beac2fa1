//! Set commands (Redis t_set). A set is an index set, so SPOP/SRANDMEMBER pick members by position and
//! an SSCAN cursor is a position. Set algebra copies the sources it needs, because a command can borrow
//! only one shard at a time.
use super::flags::*;
use super::hash::{
    parse_cursor, parse_random_count, parse_scan_options, pick_count, pick_indexes, scan_window,
    write_scan_reply,
};
use super::{is, parse_int, spec, CommandSpec, Ctx, Group, Keys, ONE_KEY, SYNTAX, WRONGTYPE};
use fallow_store::types::SetValue;
use fallow_store::{Collection, WrongType};
use rand::Rng;

const ALL_KEYS: Keys = Keys::Range {
    first: 1,
    last: -1,
    step: 1,
};
const TWO_KEYS: Keys = Keys::Range {
    first: 1,
    last: 2,
    step: 1,
};

pub const COMMANDS: &[CommandSpec] = &[
    spec(
        "sadd",
        -3,
        WRITE | DENYOOM | FAST,
        ONE_KEY,
        Group::Set,
        "Add members to a set",
        sadd,
    ),
    spec(
        "srem",
        -3,
        WRITE | FAST,
        ONE_KEY,
        Group::Set,
        "Remove members from a set",
        srem,
    ),
    spec(
        "scard",
        2,
        READONLY | FAST,
        ONE_KEY,
        Group::Set,
        "Number of members",
        scard,
    ),
    spec(
        "sismember",
        3,
        READONLY | FAST,
        ONE_KEY,
        Group::Set,
        "Whether a value is a member",
        sismember,
    ),
    spec(
        "smismember",
        -3,
        READONLY | FAST,
        ONE_KEY,
        Group::Set,
        "Whether each value is a member",
        smismember,
    ),
    spec(
        "smembers",
        2,
        READONLY,
        ONE_KEY,
        Group::Set,
        "All members",
        smembers,
    ),
    spec(
        "spop",
        -2,
        WRITE | FAST,
        ONE_KEY,
        Group::Set,
        "Remove and return random members",
        spop,
    ),
    spec(
        "srandmember",
        -2,
        READONLY,
        ONE_KEY,
        Group::Set,
        "Random members",
        srandmember,
    ),
    spec(
        "smove",
        4,
        WRITE | FAST,
        TWO_KEYS,
        Group::Set,
        "Move a member to another set",
        smove,
    ),
    spec(
        "sinter",
        -2,
        READONLY,
        ALL_KEYS,
        Group::Set,
        "Intersection of sets",
        sinter,
    ),
    spec(
        "sunion",
        -2,
        READONLY,
        ALL_KEYS,
        Group::Set,
        "Union of sets",
        sunion,
    ),
    spec(
        "sdiff",
        -2,
        READONLY,
        ALL_KEYS,
        Group::Set,
        "Difference of sets",
        sdiff,
    ),
    spec(
        "sinterstore",
        -3,
        WRITE | DENYOOM,
        ALL_KEYS,
        Group::Set,
        "Store the intersection of sets",
        sinterstore,
    ),
    spec(
        "sunionstore",
        -3,
        WRITE | DENYOOM,
        ALL_KEYS,
        Group::Set,
        "Store the union of sets",
        sunionstore,
    ),
    spec(
        "sdiffstore",
        -3,
        WRITE | DENYOOM,
        ALL_KEYS,
        Group::Set,
        "Store the difference of sets",
        sdiffstore,
    ),
    spec(
        "sintercard",
        -3,
        READONLY,
        Keys::Custom(sintercard_keys),
        Group::Set,
        "Cardinality of the intersection of sets",
        sintercard,
    ),
    spec(
        "sscan",
        -3,
        READONLY,
        ONE_KEY,
        Group::Set,
        "Iterate members",
        sscan,
    ),
];

fn sadd(ctx: &mut Ctx, args: &[&[u8]]) {
    let (key, members) = (args[1], &args[2..]);
    let db = ctx.db();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    // Checked first so adding only existing members is not a modification (WATCH).
    match shard.peek_collection::<SetValue>(db, key, now) {
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
        Ok(Some(set)) if members.iter().all(|member| set.contains(member)) => {
            return ctx.out.int(0)
        }
        Ok(_) => {}
    }
    let added = shard.update::<SetValue, _>(db, key, now, true, |set| {
        members.iter().filter(|member| set.insert(member)).count()
    });
    ctx.out.int(added.ok().flatten().unwrap_or(0) as i64);
}

fn srem(ctx: &mut Ctx, args: &[&[u8]]) {
    let (key, members) = (args[1], &args[2..]);
    let db = ctx.db();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    match shard.peek_collection::<SetValue>(db, key, now) {
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
        Ok(Some(set)) if members.iter().any(|member| set.contains(member)) => {}
        Ok(_) => return ctx.out.int(0),
    }
    let removed = shard.update::<SetValue, _>(db, key, now, false, |set| {
        members.iter().filter(|member| set.remove(member)).count()
    });
    ctx.out.int(removed.ok().flatten().unwrap_or(0) as i64);
}

fn scard(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.db();
    let now = ctx.now_ms;
    match ctx.guards.shard(args[1]).read::<SetValue>(db, args[1], now) {
        Ok(set) => ctx.out.int(set.map_or(0, SetValue::len) as i64),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn sismember(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.db();
    let now = ctx.now_ms;
    match ctx.guards.shard(args[1]).read::<SetValue>(db, args[1], now) {
        Ok(set) => ctx
            .out
            .int(set.is_some_and(|set| set.contains(args[2])) as i64),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn smismember(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.db();
    let now = ctx.now_ms;
    let set = match ctx.guards.shard(args[1]).read::<SetValue>(db, args[1], now) {
        Ok(set) => set,
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    ctx.out.array_len(args.len() - 2);
    for member in &args[2..] {
        ctx.out
            .int(set.is_some_and(|set| set.contains(member)) as i64);
    }
}

fn smembers(ctx: &mut Ctx, args: &[&[u8]]) {
    let db = ctx.db();
    let now = ctx.now_ms;
    let budget = ctx.reply_budget();
    match ctx.guards.shard(args[1]).read::<SetValue>(db, args[1], now) {
        Ok(set) => {
            let len = set.map_or(0, SetValue::len);
            // Sized before it is built (a walk copying nothing): refused if it would pass the client's
            // output hard limit.
            let bytes: u64 = set
                .into_iter()
                .flat_map(SetValue::iter)
                .map(|member| super::bulk_reply_bytes(member.len()))
                .sum();
            if bytes > budget {
                return ctx.refuse_reply(bytes);
            }
            ctx.out.set_len(len);
            for member in set.into_iter().flat_map(SetValue::iter) {
                ctx.out.bulk(member);
            }
        }
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn spop(ctx: &mut Ctx, args: &[&[u8]]) {
    match args.len() {
        2 => spop_one(ctx, args[1]),
        3 => spop_count(ctx, args),
        _ => ctx.out.error(SYNTAX),
    }
}

fn spop_one(ctx: &mut Ctx, key: &[u8]) {
    let db = ctx.db();
    let now = ctx.now_ms;
    let popped = ctx
        .guards
        .shard(key)
        .update::<SetValue, _>(db, key, now, false, |set| {
            let index = rand::thread_rng().gen_range(0..set.len().max(1));
            set.remove_index(index)
        });
    match popped {
        Ok(Some(Some(member))) => ctx.out.bulk(&member),
        Ok(_) => ctx.out.nil(),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

/// Removes `count` random members (all of them when count covers the set).
fn pop_members(set: &mut SetValue, count: usize, rng: &mut impl Rng) -> Vec<Box<[u8]>> {
    let count = count.min(set.len());
    let mut popped = Vec::with_capacity(count);
    while popped.len() < count {
        let index = rng.gen_range(0..set.len());
        popped.extend(set.remove_index(index));
    }
    popped
}

fn spop_count(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(count) = parse_int(args[2]).filter(|&count| count >= 0) else {
        return ctx.out.error("ERR value is out of range, must be positive");
    };
    let db = ctx.db();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(args[1]);
    if count == 0 {
        return match shard.peek_collection::<SetValue>(db, args[1], now) {
            Ok(_) => ctx.out.set_len(0),
            Err(WrongType) => ctx.out.error(WRONGTYPE),
        };
    }
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    let popped = shard.update::<SetValue, _>(db, args[1], now, false, |set| {
        pop_members(set, count, &mut rand::thread_rng())
    });
    match popped {
        Ok(popped) => {
            let popped = popped.unwrap_or_default();
            ctx.out.set_len(popped.len());
            for member in &popped {
                ctx.out.bulk(member);
            }
        }
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn srandmember(ctx: &mut Ctx, args: &[&[u8]]) {
    let count = match args.len() {
        2 => None,
        3 => match parse_random_count(args[2]) {
            Ok(count) => Some(count),
            Err(reply) => return ctx.out.error(reply),
        },
        _ => return ctx.out.error(SYNTAX),
    };
    let db = ctx.db();
    let now = ctx.now_ms;
    let set = match ctx.guards.shard(args[1]).read::<SetValue>(db, args[1], now) {
        Ok(set) => set,
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let mut rng = rand::thread_rng();
    let Some(count) = count else {
        return match set {
            Some(set) if !set.is_empty() => {
                let index = rng.gen_range(0..set.len());
                ctx.out
                    .bulk(set.get_index(index).expect("index is in range"));
            }
            _ => ctx.out.nil(),
        };
    };
    let Some(set) = set else {
        return ctx.out.array_len(0);
    };
    ctx.out.array_len(pick_count(set.len(), count));
    let out = &mut *ctx.out;
    pick_indexes(set.len(), count, &mut rng, |index| {
        out.bulk(set.get_index(index).expect("picks are in range"));
    });
}

fn smove(ctx: &mut Ctx, args: &[&[u8]]) {
    let (source, destination, member) = (args[1], args[2], args[3]);
    let db = ctx.db();
    let now = ctx.now_ms;
    // Redis: an absent source replies 0 before the destination's type is looked at.
    let in_source = match ctx
        .guards
        .shard(source)
        .peek_collection::<SetValue>(db, source, now)
    {
        Ok(None) => return ctx.out.int(0),
        Ok(Some(set)) => set.contains(member),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let destination_shard = ctx.guards.shard(destination);
    if destination_shard
        .peek_collection::<SetValue>(db, destination, now)
        .is_err()
    {
        return ctx.out.error(WRONGTYPE);
    }
    if source == destination || !in_source {
        return ctx.out.int(in_source as i64);
    }
    let _ = ctx
        .guards
        .shard(source)
        .update::<SetValue, _>(db, source, now, false, |set| set.remove(member));
    let _ =
        ctx.guards
            .shard(destination)
            .update::<SetValue, _>(db, destination, now, true, |set| set.insert(member));
    ctx.out.int(1);
}

// ----- set algebra ----------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Algebra {
    Inter,
    Union,
    Diff,
}

/// Where set algebra reads its sources: the locked shards, or a plain map in tests.
trait SetSource {
    /// Runs `visit` on the set at `key` (None when absent), borrowing it only for the call.
    fn with_set<R>(&mut self, key: &[u8], visit: impl FnOnce(Option<&SetValue>) -> R) -> R;
}

/// The locked shards of a command, read without counting hits (the keys were already looked up once).
struct ShardSource<'c, 'a, 's> {
    ctx: &'c mut Ctx<'a, 's>,
    db: usize,
    now_ms: u64,
}

impl SetSource for ShardSource<'_, '_, '_> {
    fn with_set<R>(&mut self, key: &[u8], visit: impl FnOnce(Option<&SetValue>) -> R) -> R {
        let set = self
            .ctx
            .guards
            .shard(key)
            .peek_collection::<SetValue>(self.db, key, self.now_ms);
        visit(set.ok().flatten())
    }
}

/// Computes `algebra` over the sets at `keys` (an absent key is an empty set). Every key is looked up
/// (and type-checked) once, as Redis does, before any member is copied.
fn compute(ctx: &mut Ctx, algebra: Algebra, keys: &[&[u8]]) -> Result<SetValue, WrongType> {
    let db = ctx.db();
    let now_ms = ctx.now_ms;
    let mut lens = Vec::with_capacity(keys.len());
    for key in keys {
        let set = ctx.guards.shard(key).read::<SetValue>(db, key, now_ms)?;
        lens.push(set.map(SetValue::len));
    }
    let mut source = ShardSource { ctx, db, now_ms };
    let mut result = match algebra {
        Algebra::Inter => intersect(&mut source, keys, &lens),
        Algebra::Union => unite(&mut source, keys),
        Algebra::Diff => differ(&mut source, keys),
    };
    result.shrink_to_fit();
    Ok(result)
}

/// Intersects the sets at `keys` (whose sizes are `lens`), starting from a copy of the smallest and
/// filtering it by the others.
fn intersect(source: &mut impl SetSource, keys: &[&[u8]], lens: &[Option<usize>]) -> SetValue {
    if lens.iter().any(Option::is_none) {
        return SetValue::default();
    }
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&position| lens[position]);
    let mut result = source.with_set(keys[order[0]], |set| set.cloned().unwrap_or_default());
    for &position in &order[1..] {
        if result.is_empty() {
            break;
        }
        source.with_set(keys[position], |other| {
            subtract(&mut result, |member| {
                !other.is_some_and(|other| other.contains(member))
            })
        });
    }
    result
}

fn unite(source: &mut impl SetSource, keys: &[&[u8]]) -> SetValue {
    let mut union = SetValue::default();
    for key in keys {
        source.with_set(key, |set| {
            for member in set.into_iter().flat_map(SetValue::iter) {
                union.insert(member);
            }
        });
    }
    union
}

/// The first set less the others.
fn differ(source: &mut impl SetSource, keys: &[&[u8]]) -> SetValue {
    let mut result = source.with_set(keys[0], |set| set.cloned().unwrap_or_default());
    for key in &keys[1..] {
        if result.is_empty() {
            break;
        }
        source.with_set(key, |other| {
            if let Some(other) = other {
                subtract(&mut result, |member| other.contains(member));
            }
        });
    }
    result
}

/// Removes the members for which `doomed` holds.
fn subtract(set: &mut SetValue, doomed: impl Fn(&[u8]) -> bool) {
    let members: Vec<Box<[u8]>> = set
        .iter()
        .filter(|member| doomed(member))
        .map(Box::from)
        .collect();
    for member in members {
        set.remove(&member);
    }
}

fn reply_algebra(ctx: &mut Ctx, algebra: Algebra, keys: &[&[u8]]) {
    match compute(ctx, algebra, keys) {
        Ok(result) => {
            ctx.out.set_len(result.len());
            for member in result.iter() {
                ctx.out.bulk(member);
            }
        }
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

/// Overwrites `args[1]` with the result (deleting it when the result is empty); replies its size.
fn store_algebra(ctx: &mut Ctx, algebra: Algebra, args: &[&[u8]]) {
    let destination = args[1];
    let result = match compute(ctx, algebra, &args[2..]) {
        Ok(result) => result,
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    let len = result.len();
    let db = ctx.db();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(destination);
    if len == 0 {
        shard.remove(db, destination, now);
    } else {
        shard.put_collection(db, destination, Collection::Set(result), 0, now);
    }
    ctx.out.int(len as i64);
}

fn sinter(ctx: &mut Ctx, args: &[&[u8]]) {
    reply_algebra(ctx, Algebra::Inter, &args[1..]);
}

fn sunion(ctx: &mut Ctx, args: &[&[u8]]) {
    reply_algebra(ctx, Algebra::Union, &args[1..]);
}

fn sdiff(ctx: &mut Ctx, args: &[&[u8]]) {
    reply_algebra(ctx, Algebra::Diff, &args[1..]);
}

fn sinterstore(ctx: &mut Ctx, args: &[&[u8]]) {
    store_algebra(ctx, Algebra::Inter, args);
}

fn sunionstore(ctx: &mut Ctx, args: &[&[u8]]) {
    store_algebra(ctx, Algebra::Union, args);
}

fn sdiffstore(ctx: &mut Ctx, args: &[&[u8]]) {
    store_algebra(ctx, Algebra::Diff, args);
}

/// Key positions of `SINTERCARD numkeys key... [LIMIT n]`; none when numkeys is not valid (the handler
/// then replies the error without touching a key).
fn sintercard_keys(args: &[&[u8]]) -> Vec<usize> {
    let Some(numkeys) = args.get(1).and_then(|arg| parse_int(arg)) else {
        return Vec::new();
    };
    match usize::try_from(numkeys) {
        Ok(numkeys) if numkeys >= 1 && numkeys <= args.len() - 2 => (2..2 + numkeys).collect(),
        _ => Vec::new(),
    }
}

/// Parses `numkeys key... [LIMIT n]`: the keys and the limit (0 = none), or an error reply.
fn parse_sintercard<'a>(args: &[&'a [u8]]) -> Result<(Vec<&'a [u8]>, usize), &'static str> {
    let numkeys = parse_int(args[1])
        .filter(|&numkeys| numkeys >= 1)
        .ok_or("ERR numkeys should be greater than 0")?;
    let numkeys = usize::try_from(numkeys).unwrap_or(usize::MAX);
    if numkeys > args.len() - 2 {
        return Err("ERR Number of keys can't be greater than number of args");
    }
    let keys = args[2..2 + numkeys].to_vec();
    let mut limit = 0;
    let mut index = 2 + numkeys;
    while index < args.len() {
        match args.get(index + 1) {
            Some(value) if is(args[index], "limit") => {
                let value = parse_int(value)
                    .filter(|&value| value >= 0)
                    .ok_or("ERR LIMIT can't be negative")?;
                limit = usize::try_from(value).unwrap_or(usize::MAX);
            }
            _ => return Err(SYNTAX),
        }
        index += 2;
    }
    Ok((keys, limit))
}

fn sintercard(ctx: &mut Ctx, args: &[&[u8]]) {
    let (keys, limit) = match parse_sintercard(args) {
        Ok(parsed) => parsed,
        Err(reply) => return ctx.out.error(reply),
    };
    match compute(ctx, Algebra::Inter, &keys) {
        Ok(result) if limit > 0 => ctx.out.int(result.len().min(limit) as i64),
        Ok(result) => ctx.out.int(result.len() as i64),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn sscan(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(cursor) = parse_cursor(args[2]) else {
        return ctx.out.error("ERR invalid cursor");
    };
    let db = ctx.db();
    let now = ctx.now_ms;
    let set = match ctx.guards.shard(args[1]).read::<SetValue>(db, args[1], now) {
        Ok(Some(set)) => set,
        Ok(None) => return write_scan_reply(ctx.out, 0, std::iter::empty()),
        Err(WrongType) => return ctx.out.error(WRONGTYPE),
    };
    // Options are parsed after the key lookup, so an absent key never reports an option error (Redis).
    let options = match parse_scan_options(&args[3..]) {
        Ok(options) => options,
        Err(reply) => return ctx.out.error(reply),
    };
    let (next_cursor, window) = scan_window(cursor, options.count, set.len());
    let members: Vec<&[u8]> = window
        .map(|index| set.get_index(index).expect("window is in range"))
        .filter(|member| options.matches(member))
        .collect();
    write_scan_reply(ctx.out, next_cursor, members.into_iter());
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn set_of(members: &[&str]) -> SetValue {
        let mut set = SetValue::default();
        for member in members {
            set.insert(member.as_bytes());
        }
        set
    }

    fn sorted(set: &SetValue) -> Vec<String> {
        let mut members: Vec<String> = set
            .iter()
            .map(|member| String::from_utf8_lossy(member).into_owned())
            .collect();
        members.sort();
        members
    }

    #[test]
    fn pops_are_distinct_and_bounded() {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut set = set_of(&["a", "b", "c", "d", "e"]);
        let bytes_full = set.memory_bytes();
        let mut popped = pop_members(&mut set, 3, &mut rng);
        assert_eq!(set.len(), 2);
        popped.sort();
        popped.dedup();
        assert_eq!(popped.len(), 3);
        assert!(popped.iter().all(|member| !set.contains(member)));
        assert!(set.memory_bytes() < bytes_full);
        assert_eq!(pop_members(&mut set, 10, &mut rng).len(), 2);
        assert!(set.is_empty());
    }

    /// Sets by key, recording which keys were read.
    struct MapSource {
        sets: Vec<(&'static [u8], SetValue)>,
        reads: Vec<&'static [u8]>,
    }

    impl SetSource for MapSource {
        fn with_set<R>(&mut self, key: &[u8], visit: impl FnOnce(Option<&SetValue>) -> R) -> R {
            let found = self.sets.iter().find(|(name, _)| *name == key);
            if let Some((name, _)) = found {
                self.reads.push(name);
            }
            visit(found.map(|(_, set)| set))
        }
    }

    fn source() -> MapSource {
        MapSource {
            sets: vec![
                (b"a", set_of(&["1", "2", "3", "4"])),
                (b"b", set_of(&["3", "4", "5"])),
                (b"c", set_of(&["4", "6"])),
            ],
            reads: Vec::new(),
        }
    }

    #[test]
    fn intersection_starts_from_the_smallest() {
        let mut sets = source();
        let keys: [&[u8]; 3] = [b"a", b"b", b"c"];
        let lens = [Some(4), Some(3), Some(2)];
        assert_eq!(sorted(&intersect(&mut sets, &keys, &lens)), ["4"]);
        assert_eq!(sets.reads[0], b"c");
        let mut sets = source();
        let with_absent = [Some(4), None, Some(2)];
        assert!(intersect(&mut sets, &keys, &with_absent).is_empty());
        assert!(sets.reads.is_empty(), "nothing copied when a set is absent");
    }

    #[test]
    fn union_and_difference() {
        let mut sets = source();
        let keys: [&[u8]; 4] = [b"a", b"b", b"c", b"missing"];
        assert_eq!(
            sorted(&unite(&mut sets, &keys)),
            ["1", "2", "3", "4", "5", "6"]
        );
        assert_eq!(sorted(&differ(&mut sets, &keys)), ["1", "2"]);
        assert!(differ(&mut sets, &[b"missing", b"a"]).is_empty());
        assert!(differ(&mut sets, &[b"a", b"a"]).is_empty());
    }

    #[test]
    fn subtract_removes_only_doomed_members() {
        let mut set = set_of(&["1", "2", "3"]);
        subtract(&mut set, |member| member == b"2");
        assert_eq!(sorted(&set), ["1", "3"]);
        let empty_bytes = SetValue::default().memory_bytes();
        subtract(&mut set, |_| true);
        set.shrink_to_fit();
        assert_eq!(set.memory_bytes(), empty_bytes);
    }

    #[test]
    fn sintercard_arguments_parse_like_redis() {
        let args: [&[u8]; 6] = [b"sintercard", b"2", b"a", b"b", b"LIMIT", b"3"];
        let (keys, limit) = parse_sintercard(&args).unwrap();
        assert_eq!(keys, [b"a", b"b"]);
        assert_eq!(limit, 3);
        assert_eq!(sintercard_keys(&args), vec![2, 3]);
        let zero: [&[u8]; 3] = [b"sintercard", b"0", b"a"];
        assert_eq!(
            parse_sintercard(&zero).err(),
            Some("ERR numkeys should be greater than 0")
        );
        assert!(sintercard_keys(&zero).is_empty());
        let too_many: [&[u8]; 3] = [b"sintercard", b"5", b"a"];
        assert_eq!(
            parse_sintercard(&too_many).err(),
            Some("ERR Number of keys can't be greater than number of args")
        );
        assert!(sintercard_keys(&too_many).is_empty());
        let negative: [&[u8]; 5] = [b"sintercard", b"1", b"a", b"limit", b"-1"];
        assert_eq!(
            parse_sintercard(&negative).err(),
            Some("ERR LIMIT can't be negative")
        );
        let dangling: [&[u8]; 4] = [b"sintercard", b"1", b"a", b"limit"];
        assert_eq!(parse_sintercard(&dangling).err(), Some(SYNTAX));
    }
}
