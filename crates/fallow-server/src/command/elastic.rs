//! ELASTIC: the elastic pool's admin command. `ELASTIC STATUS` (the INFO elastic fields as a flat array of
//! name/value pairs), `ELASTIC RECLAIM <bytes> [CAREFUL|FAST|AUTO]` (a synchronous one-shot release that
//! leaves the target alone; replies [released_bytes, objects, duration_us, path]) and `ELASTIC HELP`.
use super::reply::help_reply;
use super::{arity_error, is, subcommand_error, Ctx, Handler, SYNTAX};
use crate::elastic::controller::{fast_path, PoolControl, Reclaimed};
use crate::elastic::report;

pub const HANDLERS: &[(&str, Handler)] = &[("elastic", elastic)];

fn elastic(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"status", 2) => status(ctx),
        (b"reclaim", 3 | 4) => reclaim(ctx, &args[2..]),
        (b"help", 2) => help_reply(
            ctx,
            "ELASTIC",
            &[
                "STATUS",
                "    The elastic pool as INFO elastic shows it, as field/value pairs.",
                "RECLAIM <bytes> [CAREFUL|FAST|AUTO]",
                "    Release <bytes> (e.g. 512mb) of the pool now; AUTO (default) picks FAST above",
                "    reclaim-fast-threshold. Replies [released_bytes, objects, duration_us, path].",
                "    The pool target is unchanged, so the pool may fill again.",
            ],
        ),
        (b"status" | b"reclaim" | b"help", _) => {
            let name = format!("elastic|{}", String::from_utf8_lossy(&sub));
            ctx.out.error(&arity_error(&name));
        }
        _ => subcommand_error(ctx, args),
    }
}

fn status(ctx: &mut Ctx) {
    let fields = report::fields(&report::figures(ctx.server));
    ctx.out.array_len(fields.len() * 2);
    for (name, value) in fields {
        ctx.out.bulk(name.as_bytes());
        ctx.out.bulk(value.as_bytes());
    }
}

fn reclaim(ctx: &mut Ctx, args: &[&[u8]]) {
    let Ok(bytes) = crate::units::parse_bytes(&String::from_utf8_lossy(args[0])) else {
        return ctx
            .out
            .error("ERR invalid byte count (use a number or a size like 512mb)");
    };
    let threshold = ctx.server.config.read().reclaim_fast_threshold_bytes;
    let fast = match args.get(1) {
        None => fast_path(bytes, threshold),
        Some(path) if is(path, "auto") => fast_path(bytes, threshold),
        Some(path) if is(path, "fast") => true,
        Some(path) if is(path, "careful") => false,
        Some(_) => return ctx.out.error(SYNTAX),
    };
    let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
    let store = &ctx.server.store;
    let reclaimed = off_the_runtime(|| PoolControl::reclaim(store, bytes, fast));
    write_reclaimed(ctx, &reclaimed);
}

fn write_reclaimed(ctx: &mut Ctx, reclaimed: &Reclaimed) {
    ctx.out.array_len(4);
    ctx.out.int(reclaimed.bytes as i64);
    ctx.out.int(reclaimed.objects as i64);
    ctx.out.int(reclaimed.micros as i64);
    ctx.out.bulk(reclaimed.path_name().as_bytes());
}

/// Runs blocking work from a handler: on a multi-threaded runtime the worker hands its other connections
/// to another thread first (`block_in_place`), so a long reclaim stalls only this client.
pub(super) fn off_the_runtime<T>(work: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}
