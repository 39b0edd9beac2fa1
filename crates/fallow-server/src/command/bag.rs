//! Summary bag commands (`fallow_txn::types::summary_bag`): integers go in, only their count, min, max
//! and mean come out. An empty summary (a missing key) has count 0 and nil for the rest.
use super::{parse_ints, update_collection, with_collection, Ctx, Handler, NOT_INTEGER, WRONGTYPE};
use fallow_proto::ReplyWriter;
use fallow_store::types::BagValue;
use fallow_store::WrongType;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("bag.add", bag_add),
    ("bag.count", bag_count),
    ("bag.min", bag_min),
    ("bag.max", bag_max),
    ("bag.mean", bag_mean),
    ("bag.summary", bag_summary),
];

fn bag_add(ctx: &mut Ctx, args: &[&[u8]]) {
    let Some(items) = parse_ints(&args[2..]) else {
        return ctx.out.error(NOT_INTEGER);
    };
    let count = update_collection::<BagValue, _>(ctx, args[1], true, |bag| {
        items.iter().map(|&item| bag.add(item)).last()
    });
    match count {
        // Counts beyond i64::MAX would take centuries of adds; saturate rather than wrap.
        Ok(count) => ctx.out.int(count.flatten().map_or(0, saturating_i64)),
        Err(WrongType) => ctx.out.error(WRONGTYPE),
    }
}

fn saturating_i64(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Reads the bag at `key` and replies with `reply` applied to it (an empty summary when missing).
fn with_bag(ctx: &mut Ctx, key: &[u8], reply: impl FnOnce(&mut ReplyWriter, &BagValue)) {
    with_collection::<BagValue>(ctx, key, |out, bag| {
        reply(out, bag.unwrap_or(&BagValue::default()))
    });
}

fn int_or_nil(out: &mut ReplyWriter, value: Option<i64>) {
    match value {
        Some(value) => out.int(value),
        None => out.nil(),
    }
}

fn double_or_nil(out: &mut ReplyWriter, value: Option<f64>) {
    match value {
        Some(value) => out.double(value),
        None => out.nil(),
    }
}

fn bag_count(ctx: &mut Ctx, args: &[&[u8]]) {
    with_bag(ctx, args[1], |out, bag| {
        out.int(saturating_i64(bag.count()))
    });
}

fn bag_min(ctx: &mut Ctx, args: &[&[u8]]) {
    with_bag(ctx, args[1], |out, bag| int_or_nil(out, bag.min()));
}

fn bag_max(ctx: &mut Ctx, args: &[&[u8]]) {
    with_bag(ctx, args[1], |out, bag| int_or_nil(out, bag.max()));
}

fn bag_mean(ctx: &mut Ctx, args: &[&[u8]]) {
    with_bag(ctx, args[1], |out, bag| double_or_nil(out, bag.mean()));
}

/// [count, min, max, mean], with nil for the undefined ones of an empty bag.
fn bag_summary(ctx: &mut Ctx, args: &[&[u8]]) {
    with_bag(ctx, args[1], |out, bag| {
        out.array_len(4);
        out.int(saturating_i64(bag.count()));
        int_or_nil(out, bag.min());
        int_or_nil(out, bag.max());
        double_or_nil(out, bag.mean());
    });
}
