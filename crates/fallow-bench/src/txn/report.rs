//! The results of a `fallow-bench txn` run: per cell (target, mode, clients) and per point of the sweep;
//! written as JSON, a Markdown table and PNG plots.
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;
use serde::Serialize;

use super::driver::CellMeasurement;
use super::server::ServerProbe;
use super::{CommonArgs, ConflictRetry, Mode};
use crate::plot::{short_number, write_side_by_side, FONT};
use crate::report::LatencySummary;
use fallow_client::ClientStats;
use fallow_model::calibrate::MachineInfo;

/// What one cell measured.
#[derive(Clone, Debug, Serialize)]
pub struct CellResult {
    pub target: &'static str,
    pub mode: Mode,
    pub clients: usize,
    pub duration_s: f64,
    pub committed: u64,
    pub txn_per_s: f64,
    /// Lowest mean over consecutive 5-second windows (the whole run's mean when shorter).
    pub min_txn_per_s_5s: f64,
    /// Transactions given up after the most retries.
    pub failed: u64,
    pub retries: u64,
    /// The abort rate: retries per committed transaction.
    pub retries_per_commit: f64,
    pub aborts_by_cause: BTreeMap<String, u64>,
    /// Whole transactions, retries and backoff included.
    pub latency_us: LatencySummary,
    pub server_cpu_us_per_txn: Option<f64>,
    /// INFO txn `conflict_<requested>_<held>` growth over the measured period, by `<requested>_<held>`.
    pub conflicts: BTreeMap<String, f64>,
    /// Every INFO txn counter's growth over the measured period.
    pub server_txn_counters: BTreeMap<String, f64>,
    pub committed_by_kind: BTreeMap<&'static str, u64>,
    /// fallow-client's counters over the cell, warm-up included.
    pub client: ClientRecord,
    pub timeline_txn_per_s: Vec<f64>,
}

impl CellResult {
    pub fn new(
        target: &'static str,
        mode: Mode,
        clients: usize,
        measured: &CellMeasurement,
        probe: &ServerProbe,
        min_window: f64,
        client: &ClientStats,
    ) -> CellResult {
        let stats = &measured.stats;
        let committed = stats.committed;
        let conflicts = probe
            .counters
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix("conflict_")
                    .map(|pair| (pair.to_string(), *v))
            })
            .filter(|(_, v)| *v > 0.0)
            .collect();
        CellResult {
            target,
            mode,
            clients,
            duration_s: measured.duration_s,
            committed,
            txn_per_s: committed as f64 / measured.duration_s.max(1e-9),
            min_txn_per_s_5s: min_window,
            failed: stats.failed,
            retries: stats.retries,
            retries_per_commit: stats.retries as f64 / committed.max(1) as f64,
            aborts_by_cause: stats.aborts.clone(),
            latency_us: LatencySummary::from_histogram(&stats.latency_ns),
            server_cpu_us_per_txn: probe.cpu_s.map(|s| s * 1e6 / committed.max(1) as f64),
            conflicts,
            server_txn_counters: probe.counters.clone(),
            committed_by_kind: stats.committed_by_kind.clone(),
            client: ClientRecord::from(client),
            timeline_txn_per_s: measured.timeline_txn_per_s.clone(),
        }
    }

    /// The progress line printed after a cell.
    pub fn line(&self, point: &str) -> String {
        format!(
            "{} {point} {} x{}: {:.0} txn/s, {:.2} retries/commit, p50 {:.2} ms p99 {:.2} ms, cpu {} us/txn{}",
            self.target,
            self.mode.name(),
            self.clients,
            self.txn_per_s,
            self.retries_per_commit,
            self.latency_us.p50 / 1e3,
            self.latency_us.p99 / 1e3,
            self.server_cpu_us_per_txn.map_or("-".into(), |c| format!("{c:.1}")),
            if self.failed > 0 { format!(", {} failed", self.failed) } else { String::new() },
        )
    }

    /// Where the cell's series goes in tables and plots: fallow's modes in `Mode::ALL`'s order, then
    /// the other targets (cells run in an order that turns from round to round).
    pub fn series_rank(&self) -> (bool, usize) {
        let mode = Mode::ALL.iter().position(|&m| m == self.mode);
        (self.target != "fallow", mode.unwrap_or(usize::MAX))
    }

    /// `redis nontxn` or the mode's name for fallow.
    pub fn series(&self) -> String {
        match self.target {
            "fallow" => self.mode.name().to_string(),
            other => format!("{other} {}", self.mode.name()),
        }
    }
}

/// fallow-client's counters (`ClientStats`) as the JSON shows them.
#[derive(Clone, Debug, Serialize)]
pub struct ClientRecord {
    pub commits: u64,
    pub retries: u64,
    pub aborts: u64,
    /// Operations that rode on another transaction's lock instead of going to the server.
    pub combined_ops: u64,
    /// Transactions that committed without a server transaction of their own.
    pub commits_avoided: u64,
    pub round_trips: u64,
}

impl From<&ClientStats> for ClientRecord {
    fn from(stats: &ClientStats) -> ClientRecord {
        ClientRecord {
            commits: stats.commits,
            retries: stats.retries,
            aborts: stats.aborts.total(),
            combined_ops: stats.combined_ops,
            commits_avoided: stats.commits_avoided,
            round_trips: stats.round_trips,
        }
    }
}

/// One point of the sweep (a raw mix and skew, a RUBiS or Retwis mix) with all its cells.
#[derive(Debug, Serialize)]
pub struct PointReport {
    pub label: String,
    pub params: serde_json::Value,
    pub cells: Vec<CellResult>,
}

impl PointReport {
    pub fn new(label: String, params: serde_json::Value) -> PointReport {
        PointReport {
            label,
            params,
            cells: Vec::new(),
        }
    }

    /// The cells by series (`CellResult::series_rank`), then by client count.
    pub fn cells_in_order(&self) -> Vec<&CellResult> {
        let mut cells: Vec<&CellResult> = self.cells.iter().collect();
        cells.sort_by_key(|cell| (cell.series_rank(), cell.clients));
        cells
    }

    /// Each series' best cell (the peak throughput over client counts), by series.
    pub fn peaks(&self) -> Vec<(String, &CellResult)> {
        let mut peaks: Vec<(String, &CellResult)> = Vec::new();
        for cell in self.cells_in_order() {
            let series = cell.series();
            match peaks.iter_mut().find(|(s, _)| *s == series) {
                Some((_, best)) if cell.txn_per_s > best.txn_per_s => *best = cell,
                Some(_) => {}
                None => peaks.push((series, cell)),
            }
        }
        peaks
    }
}

#[derive(Debug, Serialize)]
pub struct RunReport {
    pub tool: &'static str,
    pub workload: &'static str,
    pub clients: Vec<usize>,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub quick: bool,
    pub seed: u64,
    /// What retries after a conflict in rw and boosting.
    pub conflict_retry: ConflictRetry,
    /// Writes behind the next command and the commit behind the last (false: `--no-pipelining`).
    pub pipelining: bool,
    /// `--link-delay-us`: the network fallow-client emulated (0: plain loopback).
    pub link_delay_us: u64,
    /// Median PING round trip to each target, measured with that delay before the run.
    pub ping_round_trip_us: Vec<(&'static str, f64)>,
    /// `--rotate-modes`: the modes ran starting at this index of `--modes`.
    pub rotate_modes: usize,
    pub machine: MachineInfo,
    pub points: Vec<PointReport>,
}

impl RunReport {
    pub fn new(
        workload: &'static str,
        common: &CommonArgs,
        ping_round_trip_us: Vec<(&'static str, f64)>,
        points: Vec<PointReport>,
    ) -> RunReport {
        RunReport {
            tool: "fallow-bench txn",
            workload,
            clients: common.clients(),
            duration_s: common.duration_s(),
            warmup_s: common.warmup_s(),
            quick: common.quick,
            seed: common.seed,
            conflict_retry: common.conflict_retry,
            pipelining: !common.no_pipelining,
            link_delay_us: common.link_delay_us,
            ping_round_trip_us,
            rotate_modes: common.rotate_modes,
            machine: MachineInfo::collect(),
            points,
        }
    }
}

/// `<out>/<workload>.json`, `.md` and one PNG per point (plus the raw sweeps' PNGs).
pub fn write_all(report: &RunReport, out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let name = report.workload;
    let json = serde_json::to_string_pretty(report)? + "\n";
    std::fs::write(out.join(format!("{name}.json")), json)?;
    std::fs::write(out.join(format!("{name}.md")), markdown(report))?;
    for point in &report.points {
        let file = out.join(format!("{name}-{}.png", slug(&point.label)));
        plot_point(&file, &format!("{name}: {}", point.label), point)?;
    }
    if name == "raw" {
        plot_raw_sweeps(report, out)?;
    }
    Ok(())
}

fn slug(label: &str) -> String {
    let text: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    text.split('-')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

/// The Markdown: each point's peaks (best client count per mode) and then every cell.
pub fn markdown(report: &RunReport) -> String {
    let mut text = format!(
        "# fallow-bench txn {} ({} s per cell, clients {:?}{})\n\nrw and boosting retry the {} after a \
         conflict; pipelining {}.\n",
        report.workload,
        report.duration_s,
        report.clients,
        if report.quick { ", quick" } else { "" },
        match report.conflict_retry {
            ConflictRetry::Operation => "refused command (Claret's baseline)",
            ConflictRetry::Transaction => "whole transaction",
        },
        if report.pipelining { "on" } else { "off" },
    );
    text += &format!(
        "Emulated link delay {} µs per round trip; median PING round trip{}.\n",
        report.link_delay_us,
        report
            .ping_round_trip_us
            .iter()
            .map(|(target, us)| format!(" {target} {us:.0} µs"))
            .collect::<Vec<_>>()
            .join(",")
    );
    for point in &report.points {
        text += &format!("\n## {}\n\n", point.label);
        text += &peak_table(point);
        text += "\n<details><summary>every cell</summary>\n\n";
        text += &cell_table(point);
        text += "\n</details>\n";
    }
    text
}

fn peak_table(point: &PointReport) -> String {
    let peaks = point.peaks();
    let of = |series: &str| {
        peaks
            .iter()
            .find(|(s, _)| s == series)
            .map(|(_, c)| c.txn_per_s)
    };
    let (rw, nontxn) = (of("rw"), of("nontxn"));
    let mut text = String::from(
        "| mode | peak txn/s | clients | vs rw | vs nontxn | retries/commit | p50 ms | p99 ms | server CPU us/txn | min 5-s txn/s | top conflicts |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (series, c) in &peaks {
        let ratio = |base: Option<f64>| {
            base.filter(|b| *b > 0.0)
                .map_or("-".into(), |b| format!("{:.2}x", c.txn_per_s / b))
        };
        text += &format!(
            "| {series} | {:.0} | {} | {} | {} | {:.3} | {:.2} | {:.2} | {} | {:.0} | {} |\n",
            c.txn_per_s,
            c.clients,
            ratio(rw),
            ratio(nontxn),
            c.retries_per_commit,
            c.latency_us.p50 / 1e3,
            c.latency_us.p99 / 1e3,
            c.server_cpu_us_per_txn
                .map_or("-".into(), |v| format!("{v:.1}")),
            c.min_txn_per_s_5s,
            top_conflicts(c, 3),
        );
    }
    text
}

fn cell_table(point: &PointReport) -> String {
    let mut text = String::from(
        "| mode | clients | txn/s | retries/commit | failed | p50 ms | p99 ms | server CPU us/txn | aborts by cause |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for c in point.cells_in_order() {
        let aborts: Vec<String> = c
            .aborts_by_cause
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        text += &format!(
            "| {} | {} | {:.0} | {:.3} | {} | {:.2} | {:.2} | {} | {} |\n",
            c.series(),
            c.clients,
            c.txn_per_s,
            c.retries_per_commit,
            c.failed,
            c.latency_us.p50 / 1e3,
            c.latency_us.p99 / 1e3,
            c.server_cpu_us_per_txn
                .map_or("-".into(), |v| format!("{v:.1}")),
            aborts.join(", "),
        );
    }
    text
}

/// The `n` most frequent conflict pairs, `requested/held count`.
fn top_conflicts(cell: &CellResult, n: usize) -> String {
    let mut pairs: Vec<(&String, &f64)> = cell.conflicts.iter().collect();
    pairs.sort_by(|a, b| b.1.total_cmp(a.1));
    let shown: Vec<String> = pairs
        .iter()
        .take(n)
        .map(|(k, v)| format!("{k} {v:.0}"))
        .collect();
    if shown.is_empty() {
        "-".into()
    } else {
        shown.join(", ")
    }
}

type Series = Vec<(String, Vec<(f64, f64)>)>;

/// Throughput and p99 latency against client count, one line per mode (Claret Figures 8 and 10).
fn plot_point(path: &Path, title: &str, point: &PointReport) -> anyhow::Result<()> {
    let mut throughput: Series = Vec::new();
    let mut p99: Series = Vec::new();
    for cell in point.cells_in_order() {
        let x = (cell.clients as f64).log2();
        push_point(&mut throughput, cell.series(), (x, cell.txn_per_s));
        push_point(&mut p99, cell.series(), (x, cell.latency_us.p99 / 1e3));
    }
    let panels = [
        Panel {
            caption: "throughput",
            x_desc: "concurrent transactions (log2)",
            y_desc: "committed txn/s",
            series: &throughput,
            x_pow2: true,
        },
        Panel {
            caption: "p99 latency",
            x_desc: "concurrent transactions (log2)",
            y_desc: "ms",
            series: &p99,
            x_pow2: true,
        },
    ];
    draw_panels(path, title, &panels)
}

/// Claret Figures 6 and 7: peak throughput against the add fraction and against zipf.
fn plot_raw_sweeps(report: &RunReport, out: &Path) -> anyhow::Result<()> {
    let param = |p: &PointReport, k: &str| p.params[k].as_f64().unwrap_or(f64::NAN);
    let (mut by_add, mut by_zipf): (Series, Series) = (Vec::new(), Vec::new());
    for point in &report.points {
        let (add, zipf) = (param(point, "add_fraction"), param(point, "zipf"));
        for (series, cell) in point.peaks() {
            if point.params["in_add_sweep"] == true {
                push_point(&mut by_add, series.clone(), (add * 100.0, cell.txn_per_s));
            }
            if point.params["in_zipf_sweep"] == true {
                push_point(&mut by_zipf, series, (zipf, cell.txn_per_s));
            }
        }
    }
    let panels = [
        Panel {
            caption: "peak throughput vs add fraction",
            x_desc: "adds (%)",
            y_desc: "committed txn/s",
            series: &by_add,
            x_pow2: false,
        },
        Panel {
            caption: "peak throughput vs zipf",
            x_desc: "zipf parameter",
            y_desc: "committed txn/s",
            series: &by_zipf,
            x_pow2: false,
        },
    ];
    draw_panels(&out.join("raw-sweeps.png"), "raw operation mix", &panels)
}

fn push_point(series: &mut Series, name: String, point: (f64, f64)) {
    match series.iter_mut().find(|(n, _)| *n == name) {
        Some((_, points)) => points.push(point),
        None => series.push((name, vec![point])),
    }
}

struct Panel<'a> {
    caption: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
    series: &'a Series,
    /// Label x as 2^x.
    x_pow2: bool,
}

const COLORS: [RGBColor; 6] = [BLACK, RED, BLUE, GREEN, MAGENTA, RGBColor(255, 140, 0)];

fn draw_panels(path: &Path, title: &str, panels: &[Panel<'_>; 2]) -> anyhow::Result<()> {
    write_side_by_side(
        path,
        title,
        |left| draw_panel(left, &panels[0]),
        |right| draw_panel(right, &panels[1]),
    )
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &Panel<'_>,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let all = || panel.series.iter().flat_map(|(_, p)| p.iter());
    let x_lo = all().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_hi = all().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let (x_lo, x_hi) = if x_lo.is_finite() {
        (x_lo, x_hi.max(x_lo + 1e-3))
    } else {
        (0.0, 1.0)
    };
    let margin = (x_hi - x_lo) * 0.05;
    let y_hi = all().map(|p| p.1).fold(1e-3, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(panel.caption, (FONT, 18))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(x_lo - margin..x_hi + margin, 0f64..y_hi)?;
    let pow2 = panel.x_pow2;
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .x_labels(if pow2 { 40 } else { 10 })
        .x_label_formatter(&|x| {
            if pow2 {
                // Label only the powers of two (the client counts swept).
                match (*x - x.round()).abs() < 1e-6 {
                    true => short_number(2f64.powf(x.round())),
                    false => String::new(),
                }
            } else {
                short_number(*x)
            }
        })
        .y_label_formatter(&|y| short_number(*y))
        .x_desc(panel.x_desc)
        .y_desc(panel.y_desc)
        .label_style((FONT, 13))
        .draw()?;
    for (i, (name, points)) in panel.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font((FONT, 13))
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_keep_numbers_and_drop_spaces() {
        assert_eq!(slug("zipf 0.6 add 50%"), "zipf-0.6-add-50");
        assert_eq!(slug("bid-heavy"), "bid-heavy");
    }
}
