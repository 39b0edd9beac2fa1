//! TopN commands: a scored set that keeps, for each member, its highest score and only its k best
//! members (`fallow_txn::types::topk`). Named TOPN, not TOPK: RedisBloom's TOPK.* is a heavy-hitters
//! sketch with other semantics. Scores are integers and come back as integers.
use super::{
    is, parse_int, parse_ints, update_collection, with_collection, Ctx, Handler, NOT_INTEGER,
    SYNTAX, WRONGTYPE,
};
use fallow_proto::ReplyWriter;
use fallow_store::types::topk::MAX_CAPACITY;
use fallow_store::types::TopKValue;
use fallow_store::{Collection, WrongType};

pub const HANDLERS: &[(&str, Handler)] = &[
    ("topn.reserve", topn_reserve),
    ("topn.add", topn_add),
    ("topn.list", topn_list),
    ("topn.max", topn_max),
    ("topn.count", topn_count),
    ("topn.k", topn_k),
];

const KEY_EXISTS: &str = "ERR key already exists";

/// k as TOPN.RESERVE takes it: an integer in 1..=MAX_CAPACITY.
fn parse_capacity(arg: &[u8]) -> Result<usize, String> {
    let capacity = parse_int(arg).ok_or(NOT_INTEGER)?;
    usize::try_from(capacity)
        .ok()
        .filter(|capacity| (1..=MAX_CAPACITY).contains(capacity))
        .ok_or_else(|| format!("ERR k must be between 1 and {MAX_CAPACITY}"))
}

fn topn_reserve(ctx: &mut Ctx, args: &[&[u8]]) {
    let key = args[1];
    let capacity = match parse_capacity(args[2]) {
        Ok(capacity) => capacity,
        Err(error) => return ctx.out.error(&error),
    };
    let db = ctx.keyspace();
    let now = ctx.now_ms;
    let shard = ctx.guards.shard(key);
    if shard.exists(db, key, now) {
        return ctx.out.error(KEY_EXISTS);
    }
    let topn = Collection::TopN(TopKValue::new(capacity));
    shard.put_collection(db, key, topn, 0, now);
    ctx.out.ok();
}

/// Replies how many of the given members (each counted once) are kept after all the adds.
fn topn_add(ctx: &mut Ctx, args: &[&[u8]]) {
    let (key, pairs) = (args[1], &args[2..]);
    if pairs.len() % 2 != 0 {
        return ctx.out.error(SYNTAX);
    }
    let scores: Vec<&[u8]> = pairs.iter().step_by(2).copied().collect();
    let Some(scores) = parse_ints(&scores) else {
        return ctx.out.error(NOT_INTEGER);
    };
    let mut members: Vec<&[u8]> = pairs.iter().skip(1).step_by(2).copied().collect();
    let kept = update_collection::<TopKValue, _>(ctx, key, true, |topn| {
        for (member, score) in members.iter().zip(&scores) {
            topn.add(member, *score);
        }
        members.sort_unstable();
        members.dedup();
        members
            .iter()
            .filter(|member| topn.score(member).is_some())
            .count()
    });
    match kept {
        Ok(kept) => ctx.out.int(kept.unwrap_or(0) as i64),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn topn_list(ctx: &mut Ctx, args: &[&[u8]]) {
    let withscores = match args.get(2) {
        None => false,
        Some(option) if args.len() == 3 && is(option, "withscores") => true,
        Some(_) => return ctx.out.error(SYNTAX),
    };
    with_collection::<TopKValue>(ctx, args[1], |out, topn| match topn {
        Some(topn) => reply_members(out, topn, withscores),
        None => out.array_len(0),
    });
}

/// Members best first, optionally with their scores: flat pairs in RESP2, nested [member, score] pairs
/// in RESP3 (as ZRANGE WITHSCORES).
fn reply_members(out: &mut ReplyWriter, topn: &TopKValue, withscores: bool) {
    let nested = withscores && out.resp3;
    let len = topn.len();
    out.array_len(if withscores && !nested { 2 * len } else { len });
    for (member, score) in topn.iter() {
        if nested {
            out.array_len(2);
        }
        out.bulk(member);
        if withscores {
            out.int(score);
        }
    }
}

fn topn_max(ctx: &mut Ctx, args: &[&[u8]]) {
    with_collection::<TopKValue>(ctx, args[1], |out, topn| {
        match topn.and_then(TopKValue::best) {
            Some((member, score)) => {
                out.array_len(2);
                out.bulk(member);
                out.int(score);
            }
            None => out.nil_array(),
        }
    });
}

fn topn_count(ctx: &mut Ctx, args: &[&[u8]]) {
    with_collection::<TopKValue>(ctx, args[1], |out, topn| {
        out.int(topn.map_or(0, TopKValue::len) as i64)
    });
}

fn topn_k(ctx: &mut Ctx, args: &[&[u8]]) {
    with_collection::<TopKValue>(ctx, args[1], |out, topn| {
        out.int(topn.map_or(0, TopKValue::capacity) as i64)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_bounded() {
        assert_eq!(parse_capacity(b"1"), Ok(1));
        assert_eq!(parse_capacity(b"1000000"), Ok(MAX_CAPACITY));
        assert!(parse_capacity(b"0").unwrap_err().contains("between 1 and"));
        assert!(parse_capacity(b"-3").unwrap_err().contains("between 1 and"));
        assert!(parse_capacity(b"1000001").is_err());
        assert_eq!(parse_capacity(b"ten"), Err(NOT_INTEGER.to_string()));
    }
}
