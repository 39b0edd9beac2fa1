//! LATENCY: the latency monitor's samples (`crate::latency`) and the per-command histograms, in Redis
//! 7.0's reply shapes. fallow keeps histograms per command, not per subcommand: `config|get` is counted
//! as `config`.
use crate::command::info::table;
use crate::command::reply::{help_reply, subcommand_arity_error};
use crate::command::{subcommand_error, Ctx};
use crate::latency::Snapshot;

pub(super) fn latency(ctx: &mut Ctx, args: &[&[u8]]) {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"latest", 2) => latest(ctx),
        (b"history", 3) => history(ctx, args[2]),
        (b"reset", _) => {
            let reset = ctx.server.latency.reset(&args[2..]);
            ctx.out.int(reset as i64)
        }
        (b"histogram", _) => histogram(ctx, &args[2..]),
        (b"graph", 3) => match ctx.server.latency.graph(args[2], unix_now_s()) {
            Some(graph) => ctx.out.verbatim("txt", graph.as_bytes()),
            None => ctx.out.error(&format!(
                "ERR No samples available for event '{}'",
                String::from_utf8_lossy(args[2])
            )),
        },
        (b"doctor", 2) => {
            let (slower_than_us, max_len) = {
                let config = ctx.server.config.read();
                (config.slowlog_log_slower_than_us, config.slowlog_max_len)
            };
            let report = ctx
                .server
                .latency
                .doctor(slower_than_us, max_len, unix_now_s());
            ctx.out.verbatim("txt", report.as_bytes())
        }
        (b"help", 2) => help_reply(ctx, "LATENCY", HELP),
        (b"latest" | b"history" | b"graph" | b"doctor", _) => {
            subcommand_arity_error(ctx, "latency", &sub)
        }
        _ => subcommand_error(ctx, args),
    }
}

const HELP: &[&str] = &[
    "DOCTOR",
    "    Return a human readable latency analysis report.",
    "GRAPH <event>",
    "    Return an ASCII latency graph for the <event> class.",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
    "    If no commands are specified then all histograms are replied.",
];

fn unix_now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// LATENCY LATEST: [event, unix time, latest ms, all-time max ms] per event.
fn latest(ctx: &mut Ctx) {
    let rows = ctx.server.latency.latest();
    ctx.out.array_len(rows.len());
    for row in rows {
        ctx.out.array_len(4);
        ctx.out.bulk(row.event.as_bytes());
        ctx.out.int(row.unix_s as i64);
        ctx.out.int(row.latency_ms as i64);
        ctx.out.int(row.max_ms as i64);
    }
}

/// LATENCY HISTORY event: [unix time, ms] per sample, oldest first; empty for an unknown event.
fn history(ctx: &mut Ctx, event: &[u8]) {
    let samples = ctx.server.latency.history(event).unwrap_or_default();
    ctx.out.array_len(samples.len());
    for sample in samples {
        ctx.out.array_len(2);
        ctx.out.int(sample.unix_s as i64);
        ctx.out.int(sample.latency_ms as i64);
    }
}

/// LATENCY HISTOGRAM [command ...]: a map of command name to {calls, histogram_usec}; commands never
/// called, and unknown names, are left out.
fn histogram(ctx: &mut Ctx, names: &[&[u8]]) {
    let histograms = &ctx.server.latency.histograms;
    let indices: Vec<usize> = if names.is_empty() {
        (0..table().len()).collect()
    } else {
        names
            .iter()
            .filter_map(|name| crate::command::lookup(name).map(|(index, _)| index))
            .collect()
    };
    let rows: Vec<(&str, Snapshot)> = indices
        .into_iter()
        .filter_map(|index| Some((table()[index].name, histograms.snapshot(index)?)))
        .collect();
    ctx.out.map_len(rows.len());
    for (name, snapshot) in rows {
        ctx.out.bulk(name.as_bytes());
        write_histogram(ctx, &snapshot);
    }
}

/// One command's {calls, histogram_usec: {µs: cumulative calls}} (Redis's `fillCommandCDF`).
fn write_histogram(ctx: &mut Ctx, snapshot: &Snapshot) {
    let out = &mut *ctx.out;
    out.map_len(2);
    out.bulk(b"calls");
    out.int(snapshot.calls as i64);
    out.bulk(b"histogram_usec");
    let rows = snapshot.cumulative_usec();
    out.map_len(rows.len());
    for (micros, cumulative) in rows {
        out.int(micros as i64);
        out.int(cumulative as i64);
    }
}

/// INFO latencystats: `latency_percentiles_usec_<command>:p50=1.003,p99=...` per command called.
pub(super) fn info_section(ctx: &Ctx, text: &mut String) {
    use std::fmt::Write;
    text.push_str("# Latencystats\r\n");
    let histograms = &ctx.server.latency.histograms;
    let percentiles = histograms.percentiles();
    for (index, info) in table().iter().enumerate() {
        let Some(snapshot) = histograms.snapshot(index) else {
            continue;
        };
        let values: Vec<String> = percentiles
            .iter()
            .map(|&percentile| {
                format!(
                    "p{}={:.3}",
                    percentile_name(percentile),
                    snapshot.percentile_usec(percentile)
                )
            })
            .collect();
        let _ = write!(
            text,
            "latency_percentiles_usec_{}:{}\r\n",
            info.name,
            values.join(",")
        );
    }
}

/// A percentile as Redis names it (`%f` with the zeros trimmed): 50, 99.9.
fn percentile_name(percentile: f64) -> String {
    let text = format!("{percentile:.6}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn percentiles_are_named_like_redis() {
        assert_eq!(super::percentile_name(50.0), "50");
        assert_eq!(super::percentile_name(99.9), "99.9");
        assert_eq!(super::percentile_name(99.99), "99.99");
    }
}
