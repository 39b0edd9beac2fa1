//! The transports benchmark's results: JSON (everything), Markdown (the tables printed), and the goals of
//! issue 20 checked against the medians.
use std::path::Path;

use hdrhistogram::Histogram;

use super::inproc::InprocCost;
use super::measure::{histogram, LargeCell, Op, SpinCost, ThroughputCell};
use super::redisbench::RbResult;
use super::wire::Transport;
use super::{Item, Placement, Settings};

/// Issue 20's goals for the shared-memory GET.
pub const GOAL_SHM_GET_P50_NS: f64 = 1000.0;
pub const GOAL_UNIX_OVER_SHM: f64 = 40.0;
pub const GOAL_INPROC_MULTIPLE: f64 = 1.5;

/// One transport and operation's round trips over all rounds.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LatencyResult {
    pub transport: Transport,
    pub op: Op,
    pub placement: Placement,
    /// Each round's median round trip, in nanoseconds.
    pub round_p50_ns: Vec<f64>,
    /// The median of the rounds' medians (the figure compared).
    pub p50_ns: f64,
    /// Percentiles of all rounds pooled.
    pub pooled_p50_ns: f64,
    pub pooled_p99_ns: f64,
    pub pooled_p999_ns: f64,
    pub pooled_max_ns: f64,
    pub round_trips: u64,
    /// The pooled CDF: (microseconds, percentile), for the plot.
    pub cdf: Vec<(f64, f64)>,
    #[serde(skip)]
    pub pooled: Histogram<u64>,
}

impl LatencyResult {
    pub fn new(transport: Transport, op: Op, placement: Placement) -> LatencyResult {
        LatencyResult {
            transport,
            op,
            placement,
            round_p50_ns: Vec::new(),
            p50_ns: f64::NAN,
            pooled_p50_ns: f64::NAN,
            pooled_p99_ns: f64::NAN,
            pooled_p999_ns: f64::NAN,
            pooled_max_ns: f64::NAN,
            round_trips: 0,
            cdf: Vec::new(),
            pooled: histogram(),
        }
    }

    pub fn add_round(&mut self, round: &Histogram<u64>) {
        self.round_p50_ns.push(round.value_at_quantile(0.5) as f64);
        self.pooled.add(round).expect("histograms of one range");
        self.p50_ns = median(&self.round_p50_ns);
        let q = |q: f64| self.pooled.value_at_quantile(q) as f64;
        (self.pooled_p50_ns, self.pooled_p99_ns, self.pooled_p999_ns) = (q(0.5), q(0.99), q(0.999));
        self.pooled_max_ns = self.pooled.max() as f64;
        self.round_trips = self.pooled.len();
        self.cdf = crate::plot::cdf_points(&self.pooled);
    }
}

pub fn median(values: &[f64]) -> f64 {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

/// The goals, each with the figures it was judged on.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Goals {
    pub placement: Placement,
    pub shm_get_p50_ns: f64,
    pub shm_get_p50_at_most_1us: bool,
    pub unix_get_p50_ns: f64,
    pub unix_over_shm: f64,
    pub unix_over_shm_at_least_40: bool,
    pub ring_get_p50_ns: f64,
    pub inproc_get_ns: f64,
    /// ring p50 + 1.5 × in-process GET.
    pub shm_bound_ns: f64,
    pub shm_within_bound: bool,
}

#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub date_utc: String,
    pub machine: fallow_model::calibrate::MachineInfo,
    pub settings: Settings,
    pub fallow_bin: String,
    pub calibration: String,
    /// memcpy bytes/s of the calibration: (the model's figure, best of all threads; one thread).
    pub memcpy_bytes_per_s: Option<(f64, f64)>,
    pub inproc: Option<InprocCost>,
    pub latency: Vec<LatencyResult>,
    /// One per placement of the round trips.
    pub goals: Vec<Goals>,
    pub throughput: Vec<ThroughputCell>,
    /// Where the large-value and spin items ran.
    pub large_placement: Option<Placement>,
    pub spin_placement: Option<Placement>,
    pub large: Vec<LargeCell>,
    pub spin: Vec<SpinCost>,
    pub redis_benchmark: Vec<RbResult>,
    /// Wall-clock seconds each item that ran took.
    pub item_seconds: Vec<(Item, f64)>,
    pub notes: Vec<String>,
}

impl Report {
    pub fn new(
        settings: Settings,
        bin: &Path,
        calibration: &Path,
        memcpy_bytes_per_s: Option<(f64, f64)>,
    ) -> Report {
        Report {
            date_utc: fallow_model::calibrate::machine::utc_now(),
            machine: fallow_model::calibrate::MachineInfo::collect(),
            settings,
            fallow_bin: bin.display().to_string(),
            calibration: calibration.display().to_string(),
            memcpy_bytes_per_s,
            inproc: None,
            latency: Vec::new(),
            goals: Vec::new(),
            throughput: Vec::new(),
            large_placement: None,
            spin_placement: None,
            large: Vec::new(),
            spin: Vec::new(),
            redis_benchmark: Vec::new(),
            item_seconds: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Records how long `item` took since `started`, when it ran.
    pub fn timed(&mut self, item: Item, started: std::time::Instant) {
        if self.settings.items.contains(&item) {
            self.item_seconds
                .push((item, started.elapsed().as_secs_f64()));
        }
    }

    /// The single-thread memcpy figure (one connection copies on one core each side).
    pub fn memcpy_bytes_per_s(&self) -> Option<f64> {
        self.memcpy_bytes_per_s.map(|(_, single)| single)
    }

    fn latency_of(
        &self,
        transport: Transport,
        op: Op,
        placement: Placement,
    ) -> Option<&LatencyResult> {
        self.latency
            .iter()
            .find(|r| r.transport == transport && r.op == op && r.placement == placement)
    }

    fn goals(&self) -> Vec<Goals> {
        [Placement::Pinned, Placement::Free]
            .into_iter()
            .filter_map(|placement| self.goals_of(placement))
            .collect()
    }

    fn goals_of(&self, placement: Placement) -> Option<Goals> {
        let shm = self.latency_of(Transport::Shm, Op::Get, placement)?.p50_ns;
        let unix = self.latency_of(Transport::Unix, Op::Get, placement)?.p50_ns;
        let ring = self.latency_of(Transport::Ring, Op::Get, placement)?.p50_ns;
        let inproc = self.inproc.as_ref()?.get_ns;
        let bound = ring + GOAL_INPROC_MULTIPLE * inproc;
        Some(Goals {
            placement,
            shm_get_p50_ns: shm,
            shm_get_p50_at_most_1us: shm <= GOAL_SHM_GET_P50_NS,
            unix_get_p50_ns: unix,
            unix_over_shm: unix / shm,
            unix_over_shm_at_least_40: unix / shm >= GOAL_UNIX_OVER_SHM,
            ring_get_p50_ns: ring,
            inproc_get_ns: inproc,
            shm_bound_ns: bound,
            shm_within_bound: shm <= bound,
        })
    }

    pub fn write(&mut self, out: &Path) -> anyhow::Result<()> {
        self.goals = self.goals();
        std::fs::write(
            out.join("transports.json"),
            serde_json::to_string_pretty(self)?,
        )?;
        std::fs::write(out.join("transports.md"), self.markdown())?;
        Ok(())
    }

    pub fn markdown(&self) -> String {
        let mut out = format!(
            "## fallow transports ({}, {} CPUs, {})\n\n",
            self.date_utc, self.machine.cpus, self.machine.cpu_model
        );
        out += &self.latency_table();
        out += &self.throughput_table();
        out += &self.large_table();
        out += &self.spin_table();
        out += &self.redis_benchmark_table();
        if !self.item_seconds.is_empty() {
            let times: Vec<String> = self
                .item_seconds
                .iter()
                .map(|(item, seconds)| format!("{item:?} {seconds:.0} s"))
                .collect();
            out += &format!("Item times: {}\n", times.join(", "));
        }
        for note in &self.notes {
            out += &format!("Note: {note}\n");
        }
        out
    }

    fn latency_table(&self) -> String {
        if self.latency.is_empty() {
            return String::new();
        }
        let mut out = format!(
            "### Round trips, one connection, {} B values (median of {} rounds' p50; p99 pooled)\n\n\
             | placement | transport | op | p50 µs | p99 µs | p99.9 µs | round p50s µs |\n|---|---|---|---|---|---|---|\n",
            self.settings.value_bytes, self.settings.rounds
        );
        for r in &self.latency {
            let rounds: Vec<String> = r
                .round_p50_ns
                .iter()
                .map(|ns| format!("{:.2}", ns / 1e3))
                .collect();
            out += &format!(
                "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {} |\n",
                r.placement.name(),
                r.transport.name(),
                r.op.name(),
                r.p50_ns / 1e3,
                r.pooled_p99_ns / 1e3,
                r.pooled_p999_ns / 1e3,
                rounds.join(" ")
            );
        }
        if let Some(inproc) = &self.inproc {
            out += &format!(
                "\nIn-process GET (parse + dispatch + reply, no I/O): {:.0} ns (dispatch alone {:.0} ns)\n",
                inproc.get_ns, inproc.get_dispatch_only_ns
            );
        }
        for g in self.goals() {
            let mark = |ok: bool| if ok { "met" } else { "NOT met" };
            out += &format!(
                "\nGoals ({}): shm GET p50 {:.2} µs ≤ 1 µs: {}; unix/shm {:.1}× ≥ 40×: {}; \
                 shm ≤ ring {:.2} µs + 1.5 × in-process {:.2} µs = {:.2} µs: {}\n",
                g.placement.name(),
                g.shm_get_p50_ns / 1e3,
                mark(g.shm_get_p50_at_most_1us),
                g.unix_over_shm,
                mark(g.unix_over_shm_at_least_40),
                g.ring_get_p50_ns / 1e3,
                g.inproc_get_ns / 1e3,
                g.shm_bound_ns / 1e3,
                mark(g.shm_within_bound)
            );
        }
        out + "\n"
    }

    fn throughput_table(&self) -> String {
        if self.throughput.is_empty() {
            return String::new();
        }
        let mut out = format!(
            "### Throughput, GET {} B, {} s per cell\n\n\
             | placement | client threads | conns | pipeline | transport | ops/s | server CPU µs/op | client CPU µs/op |\n\
             |---|---|---|---|---|---|---|---|\n",
            self.settings.value_bytes, self.settings.cell_s
        );
        let mut cells: Vec<&ThroughputCell> = self.throughput.iter().collect();
        cells.sort_by_key(|c| (c.placement, c.connections, c.pipeline, c.transport));
        for c in cells {
            out += &format!(
                "| {} | {} | {} | {} | {} | {:.0} | {} | {:.2} |\n",
                c.placement.name(),
                c.client_threads,
                c.connections,
                c.pipeline,
                c.transport.name(),
                c.ops_per_s,
                c.server_cpu_us_per_op
                    .map_or("-".into(), |v| format!("{v:.2}")),
                c.client_cpu_us_per_op
            );
        }
        out + "\n"
    }

    fn large_table(&self) -> String {
        if self.large.is_empty() {
            return String::new();
        }
        let memcpy = self
            .memcpy_bytes_per_s()
            .map_or("no calibration".into(), |m| format!("{:.2} GB/s", m / 1e9));
        let mut out = format!(
            "### Large values, one connection, {} (memcpy, one thread, from the calibration: {memcpy})\n\n\
             | bytes | op | transport | GB/s | of memcpy |\n|---|---|---|---|---|\n",
            self.large_placement.map_or("", |p| p.name())
        );
        let mut cells: Vec<&LargeCell> = self.large.iter().collect();
        cells.sort_by_key(|c| (c.value_bytes, c.op == Op::Get, c.transport));
        for c in cells {
            out += &format!(
                "| {} | {} | {} | {:.3} | {} |\n",
                c.value_bytes,
                c.op.name(),
                c.transport.name(),
                c.bytes_per_s / 1e9,
                c.memcpy_efficiency
                    .map_or("-".into(), |e| format!("{:.1}%", e * 100.0))
            );
        }
        out + "\n"
    }

    fn spin_table(&self) -> String {
        if self.spin.is_empty() {
            return String::new();
        }
        let cores = |v: Option<f64>| v.map_or("-".into(), |c| format!("{:.1}%", c * 100.0));
        let mut out = format!(
            "### Spin policy ({}): fallow's CPU (% of a core) with no client and with one idle channel; \
             CPU per GET at one GET per interval\n\n\
             | shm-spin-us | no client | idle channel | interval µs | server CPU µs/GET | client CPU µs/GET |\n\
             |---|---|---|---|---|---|\n",
            self.spin_placement.map_or("", |p| p.name())
        );
        for c in &self.spin {
            out += &format!(
                "| {} | {} | {} | {} | {} | {:.1} |\n",
                c.spin_us,
                cores(c.no_client_server_cores),
                cores(c.idle_server_cores),
                c.sparse_interval_us,
                c.sparse_server_cpu_us_per_op
                    .map_or("-".into(), |v| format!("{v:.1}")),
                c.sparse_client_cpu_us_per_op
            );
        }
        out + "\n"
    }

    fn redis_benchmark_table(&self) -> String {
        if self.redis_benchmark.is_empty() {
            return String::new();
        }
        let mut out = format!(
            "### redis-benchmark -t get,set -P 1 -d {} -n {} (median of {} rounds)\n\n\
             | placement | target | clients | test | requests/s | p50 ms | p99 ms |\n|---|---|---|---|---|---|---|\n",
            self.settings.value_bytes, self.settings.rb_requests, self.settings.rb_rounds
        );
        let mut keys: Vec<(Placement, usize, String, String)> = self
            .redis_benchmark
            .iter()
            .map(|r| (r.placement, r.clients, r.test.clone(), r.target.clone()))
            .collect();
        keys.sort();
        keys.dedup();
        for (placement, clients, test, target) in keys {
            let runs: Vec<&RbResult> = self
                .redis_benchmark
                .iter()
                .filter(|r| {
                    r.placement == placement
                        && r.target == target
                        && r.clients == clients
                        && r.test == test
                })
                .collect();
            let med =
                |f: fn(&RbResult) -> f64| median(&runs.iter().map(|r| f(r)).collect::<Vec<_>>());
            out += &format!(
                "| {} | {target} | {clients} | {test} | {:.0} | {:.3} | {:.3} |\n",
                placement.name(),
                med(|r| r.requests_per_s),
                med(|r| r.p50_ms),
                med(|r| r.p99_ms)
            );
        }
        out + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn rounds_pool_into_one_result() {
        let mut result = LatencyResult::new(Transport::Shm, Op::Get, Placement::Pinned);
        for base in [1000u64, 3000, 2000] {
            let mut h = histogram();
            for i in 0..100 {
                h.record(base + i).unwrap();
            }
            result.add_round(&h);
        }
        assert_eq!(result.round_p50_ns.len(), 3);
        assert!((result.p50_ns - 2050.0).abs() < 10.0, "{}", result.p50_ns);
        assert_eq!(result.round_trips, 300);
        assert!(result.pooled_p99_ns >= result.pooled_p50_ns);
    }
}
