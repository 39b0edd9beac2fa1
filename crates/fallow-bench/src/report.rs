//! The results of a run: the figures, the text summary and the JSON record.
use std::io::Write;

use anyhow::Context;
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::options::RunOptions;
use fallow_model::calibrate::MachineInfo;

/// Latency figures in microseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LatencySummary {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl LatencySummary {
    /// Summarises a histogram of nanoseconds.
    pub fn from_histogram(histogram: &Histogram<u64>) -> LatencySummary {
        if histogram.is_empty() {
            return LatencySummary::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        LatencySummary {
            mean: histogram.mean() / 1000.0,
            p50: us(histogram.value_at_quantile(0.5)),
            p90: us(histogram.value_at_quantile(0.9)),
            p99: us(histogram.value_at_quantile(0.99)),
            p999: us(histogram.value_at_quantile(0.999)),
            max: us(histogram.max()),
        }
    }
}

/// Throughput over one interval of the measured phase; `t_s` is the interval's end.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct TimelinePoint {
    pub t_s: f64,
    pub ops_per_sec: f64,
}

/// What a run measured (the warm-up excluded).
#[derive(Clone, Debug, Serialize)]
pub struct RunResults {
    /// Requests answered in the measured phase.
    pub requests: u64,
    pub duration_s: f64,
    pub ops_per_sec: f64,
    pub gets: u64,
    pub sets: u64,
    pub hits: u64,
    pub misses: u64,
    /// hits / (hits + misses); 0 when no GET was answered with a hit or a miss.
    pub hit_ratio: f64,
    /// Error replies, plus one per dropped connection.
    pub errors: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Connections lost to an I/O error, a protocol error or an oversized reply.
    pub connections_dropped: u64,
    /// Why the first connection was dropped, if one was.
    pub drop_reason: Option<String>,
    pub latency_us: LatencySummary,
    pub timeline: Vec<TimelinePoint>,
    /// Every measured latency in nanoseconds (for plots and merging; not in the JSON).
    #[serde(skip)]
    pub histogram: Histogram<u64>,
}

/// The options as the JSON record shows them: the command-line text of each.
#[derive(Serialize)]
struct OptionsRecord<'a> {
    server: String,
    protocol: &'static str,
    threads: usize,
    connections: usize,
    connections_total: usize,
    pipeline: usize,
    rate: f64,
    ratio: String,
    keys: u64,
    key_prefix: &'a str,
    key_bytes: usize,
    distribution: String,
    value_size: String,
    duration_s: Option<f64>,
    requests: Option<u64>,
    warmup_s: f64,
    prefill: bool,
    seed: u64,
    distinct_client_seed: bool,
    json: Option<&'a str>,
    plot: Option<String>,
    quiet: bool,
    label: Option<&'a str>,
}

impl<'a> OptionsRecord<'a> {
    fn new(o: &'a RunOptions) -> OptionsRecord<'a> {
        OptionsRecord {
            server: o.server.to_string(),
            protocol: o.protocol.name(),
            threads: o.connections_per_thread().len(),
            connections: o.connections,
            connections_total: o.connections_per_thread().iter().sum(),
            pipeline: o.pipeline,
            rate: o.rate,
            ratio: o.ratio.to_string(),
            keys: o.keys,
            key_prefix: &o.key_prefix,
            key_bytes: o.key_bytes,
            distribution: o.distribution.to_string(),
            value_size: o.value_size.to_string(),
            duration_s: o.duration_limit().map(|d| d.as_secs_f64()),
            requests: o.requests,
            warmup_s: o.warmup.0.as_secs_f64(),
            prefill: o.prefill,
            seed: o.seed,
            distinct_client_seed: o.distinct_client_seed,
            json: o.json.as_deref(),
            plot: o.plot.as_ref().map(|p| p.display().to_string()),
            quiet: o.quiet,
            label: o.label.as_deref(),
        }
    }
}

/// The whole JSON record of a run.
pub fn json_record(options: &RunOptions, results: &RunResults) -> serde_json::Value {
    serde_json::json!({
        "tool": "fallow-bench run",
        "version": env!("CARGO_PKG_VERSION"),
        "label": options.label,
        "options": OptionsRecord::new(options),
        "machine": MachineInfo::collect(),
        "results": results,
    })
}

/// Writes the JSON record to `target` (`-` = stdout).
pub fn write_json(target: &str, options: &RunOptions, results: &RunResults) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(&json_record(options, results))?;
    text.push('\n');
    if target == "-" {
        std::io::stdout().write_all(text.as_bytes())?;
        return Ok(());
    }
    std::fs::write(target, text).with_context(|| format!("writing {target}"))
}

/// The human summary printed after a run.
pub fn summary(options: &RunOptions, results: &RunResults) -> String {
    let l = &results.latency_us;
    let mut text = format!(
        "{} {} {} threads x {} conns, pipeline {}, {}\n",
        options.server,
        options.protocol.name(),
        options.connections_per_thread().len(),
        options.connections,
        options.pipeline,
        if options.rate > 0.0 {
            format!("open loop at {} req/s", options.rate)
        } else {
            "closed loop".to_string()
        },
    );
    text += &format!(
        "requests   {} in {:.2} s: {:.0} ops/s ({} GET, {} SET)\n",
        results.requests, results.duration_s, results.ops_per_sec, results.gets, results.sets
    );
    text += &format!(
        "hit ratio  {:.4} ({} hits, {} misses), errors {}\n",
        results.hit_ratio, results.hits, results.misses, results.errors
    );
    text += &format!(
        "latency us p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  mean {:.1}\n",
        l.p50, l.p90, l.p99, l.p999, l.max, l.mean
    );
    text += &format!(
        "bytes      sent {}  received {}\n",
        results.bytes_sent, results.bytes_received
    );
    if results.connections_dropped > 0 {
        text += &format!(
            "dropped    {} connections (first: {})\n",
            results.connections_dropped,
            results.drop_reason.as_deref().unwrap_or("unknown")
        );
    }
    text
}
