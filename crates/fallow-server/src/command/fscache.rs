//! FSCACHE: the counters of mounted file caches (`fallow fs`), reported by each fs every second and
//! shown by INFO `fscache` and Prometheus. The state and its limits live in `crate::fscache`.
use super::reply::help_reply;
use super::{is, subcommand_error, Ctx, Handler};
use crate::fscache::{self, Value};
use std::time::Instant;

pub const HANDLERS: &[(&str, Handler)] = &[("fscache", fscache)];

const HELP: &[&str] = &[
    "REPORT <mount> <field> <value> [<field> <value> ...]",
    "    Replaces the mount's last report (what `fallow fs` sends every second). Fields are",
    "    [a-z0-9_]{1,48}, values integers or decimals; at most 64 fields and 64 mounts. A mount is",
    "    dropped when the connection that last reported it closes, or after 30 s without a report.",
    "LIST",
    "    Paths of the mounts that report.",
    "GET <mount>",
    "    A mount's last report, field and value pairs, and age_ms (milliseconds since it came).",
];

fn fscache(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1];
    match args.len() {
        2 if is(sub, "help") => help_reply(ctx, "FSCACHE", HELP),
        2 if is(sub, "list") => list(ctx),
        3 if is(sub, "get") => get(ctx, args[2]),
        len if len >= 5 && is(sub, "report") => report(ctx, args[2], &args[3..]),
        _ if ["help", "list", "get", "report"]
            .iter()
            .any(|name| is(sub, name)) =>
        {
            if is(sub, "report") {
                ctx.server.fscache.note_refused();
            }
            let sub = String::from_utf8_lossy(sub).to_ascii_lowercase();
            ctx.out
                .error(&super::arity_error(&format!("fscache|{sub}")))
        }
        _ => subcommand_error(ctx, args),
    }
}

fn report(ctx: &mut Ctx, mount: &[u8], pairs: &[&[u8]]) {
    let caches = &ctx.server.fscache;
    let checked = fscache::check_mount(mount).and_then(|()| fscache::parse_fields(pairs));
    let fields = match checked {
        Ok(fields) => fields,
        Err(error) => {
            caches.note_refused();
            return ctx.out.error(&format!("ERR {error}"));
        }
    };
    match caches.report(mount, fields, ctx.conn.id(), Instant::now()) {
        Ok(()) => ctx.out.ok(),
        Err(error) => ctx.out.error(&format!("ERR {error}")),
    }
}

fn list(ctx: &mut Ctx) {
    let mounts = ctx.server.fscache.snapshot(Instant::now());
    ctx.out
        .bulks(mounts.iter().map(|(mount, _)| mount.as_slice()));
}

fn get(ctx: &mut Ctx, mount: &[u8]) {
    let now = Instant::now();
    let Some(report) = ctx.server.fscache.get(mount, now) else {
        return ctx.out.error(&format!(
            "ERR FSCACHE: no report from mount '{}'",
            fscache::printable(mount)
        ));
    };
    ctx.out.map_len(report.fields.len() + 1);
    for (field, value) in &report.fields {
        ctx.out.bulk(field.as_bytes());
        match value {
            Value::Integer(value) => ctx.out.int(*value),
            Value::Decimal(text) => ctx.out.bulk(text.as_bytes()),
        }
    }
    ctx.out.bulk(b"age_ms");
    ctx.out
        .int(i64::try_from(fscache::age_ms(&report, now)).unwrap_or(i64::MAX));
}
