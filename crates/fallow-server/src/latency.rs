//! The latency monitor and per-command latency histograms, as Redis 7.0 keeps them.
//!
//! Monitor: with `latency-monitor-threshold` N ms (0 = off), every event that took N ms or more is kept
//! as a sample (unix second, ms) in its event's ring of `SAMPLES_PER_EVENT`; samples of the same second
//! merge (the larger stays), as Redis's `latencyAddSample` does. Events are named as Redis names them:
//! `command`, `fast-command`, `expire-cycle`, `eviction-cycle`. Memory is bounded: a fixed ring per event,
//! at most `EVENTS_MAX` events (the names are fixed strings, so the bound is never reached in practice).
//!
//! Histograms (`latency-tracking`): per command, the count of calls per bucket of Redis's HDR histogram
//! (1 ns..1 s, 2 significant figures), so LATENCY HISTOGRAM and INFO latencystats report the same
//! buckets and percentiles Redis does. Connections add their calls up per batch (`PendingLatency`)
//! before touching the shared counters.
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// Samples kept per event (Redis's LATENCY_TS_LEN).
pub const SAMPLES_PER_EVENT: usize = 160;
/// Events kept at most; a further event name is not recorded (and counted).
pub const EVENTS_MAX: usize = 64;
/// Columns of LATENCY GRAPH (Redis's LATENCY_GRAPH_COLS).
const GRAPH_COLUMNS: usize = 80;
/// Rows of LATENCY GRAPH's sparkline.
const GRAPH_ROWS: usize = 4;

// ----- the monitor ----------------------------------------------------------------------------------

#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Sample {
    /// 0: an empty slot of the ring.
    pub unix_s: u64,
    pub latency_ms: u64,
}

/// One event's ring of samples and its all-time high.
struct Series {
    samples: [Sample; SAMPLES_PER_EVENT],
    /// The slot the next new second goes to.
    next: usize,
    max_ms: u64,
}

impl Series {
    fn new() -> Series {
        Series {
            samples: [Sample::default(); SAMPLES_PER_EVENT],
            next: 0,
            max_ms: 0,
        }
    }

    fn add(&mut self, unix_s: u64, latency_ms: u64) {
        self.max_ms = self.max_ms.max(latency_ms);
        let previous = (self.next + SAMPLES_PER_EVENT - 1) % SAMPLES_PER_EVENT;
        if self.samples[previous].unix_s == unix_s {
            // One sample per second: the worst of that second.
            let kept = &mut self.samples[previous].latency_ms;
            *kept = (*kept).max(latency_ms);
            return;
        }
        self.samples[self.next] = Sample { unix_s, latency_ms };
        self.next = (self.next + 1) % SAMPLES_PER_EVENT;
        debug_assert!(self.next < SAMPLES_PER_EVENT);
    }

    /// Filled slots, oldest first.
    fn in_order(&self) -> Vec<Sample> {
        (0..SAMPLES_PER_EVENT)
            .map(|offset| self.samples[(self.next + offset) % SAMPLES_PER_EVENT])
            .filter(|sample| sample.unix_s != 0)
            .collect()
    }

    fn latest(&self) -> Sample {
        self.samples[(self.next + SAMPLES_PER_EVENT - 1) % SAMPLES_PER_EVENT]
    }
}

/// One LATENCY LATEST row.
pub struct Latest {
    pub event: &'static str,
    pub unix_s: u64,
    pub latency_ms: u64,
    pub max_ms: u64,
}

/// The latency monitor and the command histograms (`Server::latency`).
pub struct Latency {
    threshold_ms: AtomicU64,
    /// Events in the order they were first seen.
    events: Mutex<Vec<(&'static str, Box<Series>)>>,
    /// Samples recorded (after the threshold), for INFO.
    pub samples_recorded: AtomicU64,
    /// Samples dropped because `EVENTS_MAX` events exist already.
    pub samples_dropped: AtomicU64,
    pub histograms: Histograms,
}

impl Latency {
    /// A monitor (off) and histograms for a command table of `commands` rows.
    pub fn new(commands: usize) -> Latency {
        Latency {
            threshold_ms: AtomicU64::new(0),
            events: Mutex::new(Vec::new()),
            samples_recorded: AtomicU64::new(0),
            samples_dropped: AtomicU64::new(0),
            histograms: Histograms::new(commands),
        }
    }

    /// Takes `latency-monitor-threshold`, `latency-tracking` and `latency-tracking-info-percentiles`.
    pub fn configure(&self, threshold_ms: u64, tracking: bool, percentiles: Vec<f64>) {
        self.threshold_ms.store(threshold_ms, Ordering::Relaxed);
        self.histograms.enabled.store(tracking, Ordering::Relaxed);
        *self.histograms.percentiles.write() = percentiles;
    }

    pub fn threshold_ms(&self) -> u64 {
        self.threshold_ms.load(Ordering::Relaxed)
    }

    /// Records `event` if it took the threshold or more (one atomic load when the monitor is off).
    pub fn record_if_needed(&self, event: &'static str, latency: std::time::Duration) {
        let threshold_ms = self.threshold_ms();
        let latency_ms = latency.as_millis() as u64;
        if threshold_ms != 0 && latency_ms >= threshold_ms {
            self.add_sample(event, latency_ms, unix_now_s());
        }
    }

    /// Adds a sample at `unix_s` whatever the threshold (tests; `record_if_needed` checks it).
    pub fn add_sample(&self, event: &'static str, latency_ms: u64, unix_s: u64) {
        let mut events = self.events.lock();
        let position = events.iter().position(|(name, _)| *name == event);
        let series = match position {
            Some(position) => &mut events[position].1,
            None if events.len() >= EVENTS_MAX => {
                self.samples_dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            None => {
                events.push((event, Box::new(Series::new())));
                &mut events.last_mut().expect("just pushed").1
            }
        };
        series.add(unix_s, latency_ms);
        self.samples_recorded.fetch_add(1, Ordering::Relaxed);
    }

    pub fn latest(&self) -> Vec<Latest> {
        self.events
            .lock()
            .iter()
            .map(|(event, series)| {
                let latest = series.latest();
                Latest {
                    event,
                    unix_s: latest.unix_s,
                    latency_ms: latest.latency_ms,
                    max_ms: series.max_ms,
                }
            })
            .collect()
    }

    /// An event's samples, oldest first; None when it has none.
    pub fn history(&self, event: &[u8]) -> Option<Vec<Sample>> {
        let events = self.events.lock();
        let (_, series) = events.iter().find(|(name, _)| name.as_bytes() == event)?;
        Some(series.in_order())
    }

    fn max_ms(&self, event: &[u8]) -> u64 {
        let events = self.events.lock();
        events
            .iter()
            .find(|(name, _)| name.as_bytes() == event)
            .map_or(0, |(_, series)| series.max_ms)
    }

    /// Forgets the named events (all when `events` is empty); returns how many were forgotten.
    pub fn reset(&self, events: &[&[u8]]) -> usize {
        let mut kept = self.events.lock();
        let before = kept.len();
        if events.is_empty() {
            kept.clear();
        } else {
            kept.retain(|(name, _)| !events.contains(&name.as_bytes()));
        }
        before - kept.len()
    }

    /// LATENCY GRAPH's text for an event at `now_s`; None when the event has no samples.
    pub fn graph(&self, event: &[u8], now_s: u64) -> Option<String> {
        let samples = self.history(event)?;
        let max_ms = self.max_ms(event);
        let high = samples.iter().map(|sample| sample.latency_ms).max()?;
        let low = samples.iter().map(|sample| sample.latency_ms).min()?;
        let mut text = format!(
            "{} - high {high} ms, low {low} ms (all time high {max_ms} ms)\n",
            String::from_utf8_lossy(event)
        );
        text.push_str(&"-".repeat(GRAPH_COLUMNS));
        text.push('\n');
        let points: Vec<(f64, String)> = samples
            .iter()
            .map(|sample| {
                let label = age_label(now_s.saturating_sub(sample.unix_s));
                (sample.latency_ms as f64, label)
            })
            .collect();
        text.push_str(&sparkline(&points, GRAPH_COLUMNS, GRAPH_ROWS));
        Some(text)
    }

    /// LATENCY DOCTOR's report (Redis's `createLatencyReport` for the events fallow records).
    pub fn doctor(
        &self,
        slowlog_slower_than_us: i64,
        slowlog_max_len: usize,
        now_s: u64,
    ) -> String {
        let threshold_ms = self.threshold_ms();
        let events = self.events.lock();
        if events.is_empty() && threshold_ms == 0 {
            return DOCTOR_DISABLED.to_string();
        }
        let mut report = String::new();
        let mut advice = Advice::default();
        for (number, (event, series)) in events.iter().enumerate() {
            if number == 0 {
                report.push_str("Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n");
            }
            let stats = analyze(&series.in_order(), now_s);
            report.push_str(&format!(
                "{}. {event}: {} latency spikes (average {}ms, mean deviation {}ms, period {:.2} sec). Worst all time event {}ms.\n",
                number + 1,
                stats.samples,
                stats.average_ms,
                stats.mean_deviation_ms,
                stats.period_s as f64 / stats.samples.max(1) as f64,
                series.max_ms,
            ));
            advice.note(event, threshold_ms, slowlog_slower_than_us, slowlog_max_len);
        }
        let lines = advice.lines(threshold_ms);
        match (events.is_empty(), lines.is_empty()) {
            (true, true) => report.push_str(DOCTOR_QUIET),
            (false, true) => report.push_str("\nWhile there are latency events logged, I'm not able to suggest any easy fix. Please use the Redis community to get some help, providing this report in your request.\n"),
            _ => {
                report.push_str("\nI have a few advices for you:\n\n");
                for line in lines {
                    report.push_str(&line);
                }
            }
        }
        report
    }
}

const DOCTOR_DISABLED: &str = "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n";
const DOCTOR_QUIET: &str = "Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and think things over.\n";

/// What LATENCY DOCTOR advises, from the events seen (Redis's `advise_*` flags, in its order).
#[derive(Default)]
struct Advice {
    slowlog_enabled: bool,
    slowlog_tuning: bool,
    slowlog_inspect: bool,
    scheduler: bool,
    hz: bool,
    large_objects: bool,
    mass_eviction: bool,
}

impl Advice {
    fn note(&mut self, event: &str, threshold_ms: u64, slowlog_us: i64, slowlog_len: usize) {
        match event {
            "command" => {
                if slowlog_us < 0 || slowlog_len == 0 {
                    self.slowlog_enabled = true;
                } else if (slowlog_us / 1000) as u64 > threshold_ms {
                    self.slowlog_tuning = true;
                }
                self.slowlog_inspect = true;
                self.large_objects = true;
            }
            "fast-command" => self.scheduler = true,
            "expire-cycle" => {
                self.hz = true;
                self.large_objects = true;
            }
            "eviction-cycle" => self.mass_eviction = true,
            _ => {}
        }
    }

    fn lines(&self, threshold_ms: u64) -> Vec<String> {
        let slowlog_us = threshold_ms * 1000;
        let mut lines = Vec::new();
        if self.slowlog_enabled {
            lines.push(format!("- There are latency issues with potentially slow commands you are using. Try to enable the Slow Log Redis feature using the command 'CONFIG SET slowlog-log-slower-than {slowlog_us}'. If the Slow log is disabled Redis is not able to log slow commands execution for you.\n"));
        }
        if self.slowlog_tuning {
            lines.push(format!("- Your current Slow Log configuration only logs events that are slower than your configured latency monitor threshold. Please use 'CONFIG SET slowlog-log-slower-than {slowlog_us}'.\n"));
        }
        if self.slowlog_inspect {
            lines.push("- Check your Slow Log to understand what are the commands you are running which are too slow to execute. Please check https://redis.io/commands/slowlog for more information.\n".into());
        }
        if self.scheduler {
            lines.push("- The system is slow to execute Redis code paths not containing system calls. This usually means the system does not provide Redis CPU time to run for long periods. You should try to:\n  1) Lower the system load.\n  2) Use a computer / VM just for Redis if you are running in a virtualized environment.\n  3) Check if you have a \"noisy neighbour\" problem.\n  4) Check with 'redis-cli --intrinsic-latency 100' what is the intrinsic latency in your system.\n  5) Check if the problem is allocator-related by recompiling Redis with MALLOC=libc, if you are using Jemalloc. However this may create fragmentation problems.\n".into());
        }
        if self.hz {
            lines.push("- In order to make the Redis keys expiring process more incremental, try to set the 'hz' configuration parameter to 100 using 'CONFIG SET hz 100'.\n".into());
        }
        if self.large_objects {
            lines.push("- Deleting, expiring or evicting (because of maxmemory policy) large objects is a blocking operation. If you have very large objects that are often deleted, expired, or evicted, try to fragment those objects into multiple smaller objects.\n".into());
        }
        if self.mass_eviction {
            lines.push("- Sudden changes to the 'maxmemory' setting via 'CONFIG SET', or allocation of large objects via sets or sorted sets intersections, STORE option of SORT, Redis Cluster large keys migrations (RESTORE command), may create sudden memory pressure forcing the server to block trying to evict keys. \n".into());
        }
        lines
    }
}

/// Redis's `analyzeLatencyForEvent`: integer average and mean deviation, seconds since the oldest.
struct EventStats {
    samples: u64,
    average_ms: u64,
    mean_deviation_ms: u64,
    period_s: u64,
}

fn analyze(samples: &[Sample], now_s: u64) -> EventStats {
    let count = samples.len() as u64;
    if count == 0 {
        return EventStats {
            samples: 0,
            average_ms: 0,
            mean_deviation_ms: 0,
            period_s: 0,
        };
    }
    let average_ms = samples.iter().map(|sample| sample.latency_ms).sum::<u64>() / count;
    let oldest_s = samples
        .iter()
        .map(|sample| sample.unix_s)
        .min()
        .unwrap_or(now_s);
    let deviation: u64 = samples
        .iter()
        .map(|sample| sample.latency_ms.abs_diff(average_ms))
        .sum();
    EventStats {
        samples: count,
        average_ms,
        mean_deviation_ms: deviation / count,
        period_s: now_s.saturating_sub(oldest_s).max(1),
    }
}

/// How long ago, as LATENCY GRAPH labels it: `12s`, `3m`, `5h`, `2d`.
fn age_label(elapsed_s: u64) -> String {
    match elapsed_s {
        0..60 => format!("{elapsed_s}s"),
        60..3600 => format!("{}m", elapsed_s / 60),
        3600..86_400 => format!("{}h", elapsed_s / 3600),
        _ => format!("{}d", elapsed_s / 86_400),
    }
}

/// Redis's `sparklineRender` with SPARKLINE_FILL: `rows` rows of `_o#|` then each label written
/// downwards, after one blank row; wider sequences continue in blocks of `columns`.
fn sparkline(points: &[(f64, String)], columns: usize, rows: usize) -> String {
    let min = points
        .iter()
        .map(|point| point.0)
        .fold(f64::INFINITY, f64::min);
    let max = points
        .iter()
        .map(|point| point.0)
        .fold(f64::NEG_INFINITY, f64::max);
    let mut text = String::new();
    for (block, chunk) in points.chunks(columns.max(1)).enumerate() {
        if block > 0 {
            text.push('\n');
        }
        sparkline_block(&mut text, chunk, min, max, rows);
    }
    text
}

fn sparkline_block(text: &mut String, points: &[(f64, String)], min: f64, max: f64, rows: usize) {
    const FILL: [u8; 3] = *b"_o#";
    let steps = (FILL.len() * rows) as i64;
    let range = if max - min == 0.0 { 1.0 } else { max - min };
    let labels = points.iter().any(|point| !point.1.is_empty());
    let mut row = 0;
    loop {
        let mut line = vec![b' '; points.len()];
        let mut more = false;
        for (column, (value, label)) in points.iter().enumerate() {
            let step = ((((value - min) * steps as f64) as i64) as f64 / range) as i64;
            let step = step.clamp(0, steps - 1);
            if row < rows {
                more = true;
                let index = step - ((rows - row - 1) * FILL.len()) as i64;
                if (0..FILL.len() as i64).contains(&index) {
                    line[column] = FILL[index as usize];
                } else if index >= FILL.len() as i64 {
                    line[column] = b'|';
                }
            } else if labels && row - rows < 1 {
                // One blank row between the graph and the labels.
                more = true;
                break;
            } else if let Some(&byte) = label.as_bytes().get(row - rows - 1) {
                more = true;
                line[column] = byte;
            }
        }
        if !more {
            return;
        }
        row += 1;
        text.push_str(&String::from_utf8_lossy(&line));
        text.push('\n');
    }
}

fn unix_now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

// ----- histograms -----------------------------------------------------------------------------------

/// Sub-buckets per power of two of Redis's HDR histogram (2 significant figures: 256, half of it
/// per bucket after the first).
const SUB_BUCKETS: u64 = 256;
const SUB_BUCKET_HALF: u64 = SUB_BUCKETS / 2;
/// Highest value tracked, ns (Redis's LATENCY_HISTOGRAM_MAX_VALUE: 1 s); above it counts as it.
const HISTOGRAM_MAX_NS: u64 = 1_000_000_000;
/// Buckets covering 1..=HISTOGRAM_MAX_NS.
const BUCKETS: usize = (bucket_shift(HISTOGRAM_MAX_NS) as usize + 1) * SUB_BUCKET_HALF as usize
    + SUB_BUCKET_HALF as usize;

/// log2 of a value's bucket width: values below 256 ns are exact, then 128 sub-buckets per power of two.
const fn bucket_shift(value_ns: u64) -> u32 {
    let bits = 64 - (value_ns | (SUB_BUCKETS - 1)).leading_zeros();
    bits - 8
}

/// The counter a value (ns, 1..=HISTOGRAM_MAX_NS) goes to.
fn bucket_of(value_ns: u64) -> usize {
    let shift = bucket_shift(value_ns);
    let index = shift as u64 * SUB_BUCKET_HALF + (value_ns >> shift);
    debug_assert!((index as usize) < BUCKETS);
    index as usize
}

/// The lowest value of a counter's range.
fn bucket_low(index: usize) -> u64 {
    let index = index as u64;
    if index < SUB_BUCKETS {
        return index;
    }
    let shift = (index - SUB_BUCKET_HALF) / SUB_BUCKET_HALF;
    let sub = index - shift * SUB_BUCKET_HALF;
    sub << shift
}

/// The highest value equivalent to a counter's (what HDR reports for it).
fn bucket_high(index: usize) -> u64 {
    let low = bucket_low(index);
    low + (1u64 << bucket_shift(low)) - 1
}

/// One command's counters; allocated on its first call.
struct Histogram {
    counts: Box<[AtomicU64]>,
    calls: AtomicU64,
}

/// Every command's histogram, indexed like the command table.
pub struct Histograms {
    per_command: Vec<OnceLock<Histogram>>,
    enabled: AtomicBool,
    percentiles: RwLock<Vec<f64>>,
}

/// A command's histogram as read: calls, and (ns value, count) for each non-empty bucket in order.
pub struct Snapshot {
    pub calls: u64,
    buckets: Vec<(u64, u64)>,
}

impl Histograms {
    fn new(commands: usize) -> Histograms {
        Histograms {
            per_command: (0..commands).map(|_| OnceLock::new()).collect(),
            enabled: AtomicBool::new(true),
            percentiles: RwLock::new(vec![50.0, 99.0, 99.9]),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub fn percentiles(&self) -> Vec<f64> {
        self.percentiles.read().clone()
    }

    /// Adds `count` calls of `command` that took `micros` each.
    fn add(&self, command: usize, micros: u64, count: u64) {
        let Some(slot) = self.per_command.get(command) else {
            return;
        };
        let histogram = slot.get_or_init(|| Histogram {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            calls: AtomicU64::new(0),
        });
        // Redis records its microsecond duration in nanoseconds, clamped to 1 ns..1 s.
        let value_ns = micros.saturating_mul(1000).clamp(1, HISTOGRAM_MAX_NS);
        histogram.counts[bucket_of(value_ns)].fetch_add(count, Ordering::Relaxed);
        histogram.calls.fetch_add(count, Ordering::Relaxed);
    }

    /// A command's counts; None when it was never called.
    pub fn snapshot(&self, command: usize) -> Option<Snapshot> {
        let histogram = self.per_command.get(command)?.get()?;
        let buckets = histogram
            .counts
            .iter()
            .enumerate()
            .filter_map(|(index, count)| {
                let count = count.load(Ordering::Relaxed);
                (count > 0).then(|| (bucket_low(index), count))
            })
            .collect();
        let calls = histogram.calls.load(Ordering::Relaxed);
        (calls > 0).then_some(Snapshot { calls, buckets })
    }

    /// Forgets every count (CONFIG RESETSTAT).
    pub fn reset(&self) {
        for slot in &self.per_command {
            if let Some(histogram) = slot.get() {
                histogram.calls.store(0, Ordering::Relaxed);
                for count in histogram.counts.iter() {
                    count.store(0, Ordering::Relaxed);
                }
            }
        }
    }
}

impl Snapshot {
    /// LATENCY HISTOGRAM's `histogram_usec`: (µs, cumulative count) at each power of two from 1024 ns
    /// where the count grew (Redis iterates its HDR histogram logarithmically, base 2 from 1024 ns).
    pub fn cumulative_usec(&self) -> Vec<(u64, u64)> {
        let total: u64 = self.buckets.iter().map(|bucket| bucket.1).sum();
        let mut rows = Vec::new();
        let mut level_ns: u64 = 1024;
        let mut previous = 0;
        let mut next_bucket = 0;
        let mut cumulative = 0;
        while previous < total {
            let level_high = bucket_high(bucket_of(level_ns.min(u64::MAX / 2)));
            while next_bucket < self.buckets.len() && self.buckets[next_bucket].0 <= level_high {
                cumulative += self.buckets[next_bucket].1;
                next_bucket += 1;
            }
            if cumulative > previous {
                rows.push((level_high / 1000, cumulative));
            }
            previous = cumulative;
            level_ns = level_ns.saturating_mul(2);
        }
        rows
    }

    /// The value (µs, as HDR's highest equivalent value) at a percentile.
    pub fn percentile_usec(&self, percentile: f64) -> f64 {
        let total: u64 = self.buckets.iter().map(|bucket| bucket.1).sum();
        let wanted = (((percentile.clamp(0.0, 100.0) / 100.0) * total as f64) + 0.5) as u64;
        let wanted = wanted.max(1);
        let mut seen = 0;
        for &(low_ns, count) in &self.buckets {
            seen += count;
            if seen >= wanted {
                return bucket_high(bucket_of(low_ns)) as f64 / 1000.0;
            }
        }
        0.0
    }
}

/// A connection's calls not yet added to `Histograms`: a few (command, µs, count) runs, flushed when
/// full and after each batch, so pipelined calls of one command touch the shared counters once.
#[derive(Default)]
pub struct PendingLatency {
    runs: Vec<(usize, u64, u64)>,
}

/// Runs a connection keeps before flushing.
const PENDING_RUNS_MAX: usize = 16;

impl PendingLatency {
    pub fn add(&mut self, histograms: &Histograms, command: usize, micros: u64) {
        if !histograms.enabled() {
            return;
        }
        if let Some(run) = self
            .runs
            .iter_mut()
            .find(|run| run.0 == command && run.1 == micros)
        {
            run.2 += 1;
            return;
        }
        if self.runs.len() >= PENDING_RUNS_MAX {
            self.flush(histograms);
        }
        self.runs.push((command, micros, 1));
    }

    pub fn flush(&mut self, histograms: &Histograms) {
        for (command, micros, count) in self.runs.drain(..) {
            histograms.add(command, micros, count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_match_redis_hdr_equivalents() {
        // Redis reports 5 µs as 5.023 and 1024 ns as 1 µs (its INFO latencystats and HISTOGRAM).
        assert_eq!(bucket_high(bucket_of(5000)), 5023);
        assert_eq!(bucket_high(bucket_of(1024)) / 1000, 1);
        assert_eq!(bucket_high(bucket_of(16_384)) / 1000, 16);
        assert_eq!(bucket_high(bucket_of(200)), 200);
        assert!(bucket_of(HISTOGRAM_MAX_NS) < BUCKETS);
        for value in [1u64, 255, 256, 257, 1000, 123_456, 999_999_999] {
            let index = bucket_of(value);
            assert!(
                bucket_low(index) <= value && value <= bucket_high(index),
                "{value}"
            );
        }
    }

    #[test]
    fn histogram_cumulates_at_powers_of_two() {
        let histograms = Histograms::new(2);
        let mut pending = PendingLatency::default();
        for micros in [5, 5, 5, 10, 12] {
            pending.add(&histograms, 1, micros);
        }
        pending.flush(&histograms);
        let snapshot = histograms.snapshot(1).expect("called");
        assert_eq!(snapshot.calls, 5);
        assert_eq!(snapshot.cumulative_usec(), vec![(8, 3), (16, 5)]);
        assert_eq!(format!("{:.3}", snapshot.percentile_usec(50.0)), "5.023");
        assert!(histograms.snapshot(0).is_none());
    }

    #[test]
    fn samples_of_one_second_merge_and_the_ring_is_bounded() {
        let latency = Latency::new(1);
        latency.add_sample("command", 100, 1000);
        latency.add_sample("command", 60, 1000);
        assert_eq!(
            latency.history(b"command").expect("sampled"),
            vec![Sample {
                unix_s: 1000,
                latency_ms: 100
            }]
        );
        for second in 0..500 {
            latency.add_sample("command", second, 2000 + second);
        }
        let history = latency.history(b"command").expect("sampled");
        assert_eq!(history.len(), SAMPLES_PER_EVENT);
        assert_eq!(history.last().map(|sample| sample.latency_ms), Some(499));
        assert_eq!(latency.latest()[0].max_ms, 499);
        assert_eq!(latency.reset(&[b"nope"]), 0);
        assert_eq!(latency.reset(&[]), 1);
        assert!(latency.history(b"command").is_none());
    }

    #[test]
    fn threshold_gates_recording() {
        let latency = Latency::new(1);
        latency.record_if_needed("command", std::time::Duration::from_millis(500));
        assert!(latency.latest().is_empty(), "threshold 0 is off");
        latency.configure(10, true, vec![50.0]);
        latency.record_if_needed("command", std::time::Duration::from_millis(9));
        assert!(latency.latest().is_empty());
        latency.record_if_needed("command", std::time::Duration::from_millis(10));
        assert_eq!(latency.latest().len(), 1);
    }

    #[test]
    fn graph_and_doctor_texts_follow_redis() {
        let latency = Latency::new(1);
        latency.configure(50, true, vec![]);
        latency.add_sample("command", 100, 1000);
        // Redis 7.0.15's LATENCY GRAPH for one 100 ms sample taken this second.
        let graph = latency.graph(b"command", 1000).expect("sampled");
        let dashes = "-".repeat(80);
        assert_eq!(
            graph,
            format!("command - high 100 ms, low 100 ms (all time high 100 ms)\n{dashes}\n \n \n \n_\n \n0\ns\n")
        );
        let doctor = latency.doctor(10_000, 128, 1000);
        assert!(doctor.starts_with("Dave, I have observed latency spikes"));
        assert!(doctor.contains("1. command: 1 latency spikes (average 100ms, mean deviation 0ms, period 1.00 sec). Worst all time event 100ms.\n\nI have a few advices for you:\n\n- Check your Slow Log"));
        assert_eq!(Latency::new(1).doctor(10_000, 128, 0), DOCTOR_DISABLED);
    }
}
