//! The transports benchmark's PNGs: round-trip CDFs (GET | SET), throughput against connections
//! (pipeline 1 | 16), large-value bandwidth against size with the memcpy line (SET | GET). Every x axis is
//! log10 of the value, labelled with plain numbers.
use std::path::Path;

use plotters::prelude::*;

use super::measure::Op;
use super::report::Report;
use super::wire::Transport;
use super::Placement;
use crate::plot::{short_number, write_side_by_side, Area, DrawResult, FONT};

/// One line of a panel: its name, colour and (x, y) points with x not yet in log10.
struct Series {
    name: String,
    colour: RGBColor,
    points: Vec<(f64, f64)>,
}

/// A panel's text and horizontal reference lines.
struct Panel<'a> {
    caption: String,
    x_desc: &'a str,
    y_desc: &'a str,
    series: Vec<Series>,
    /// (name, y) drawn dashed across the panel.
    references: Vec<(String, f64)>,
}

fn colour(transport: Transport) -> RGBColor {
    match transport {
        Transport::Tcp => RGBColor(214, 39, 40),
        Transport::Unix => RGBColor(31, 119, 180),
        Transport::Shm => RGBColor(44, 160, 44),
        Transport::Ring => RGBColor(120, 120, 120),
    }
}

fn draw(area: &Area<'_>, panel: Panel<'_>) -> DrawResult {
    let all: Vec<(f64, f64)> = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|(x, y)| *x > 0.0 && y.is_finite())
        .collect();
    let x_lo = all.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_hi = all.iter().map(|p| p.0).fold(0.0, f64::max);
    let (x_lo, x_hi) = if all.is_empty() {
        (1.0, 10.0)
    } else {
        (x_lo, x_hi)
    };
    let (lo, hi) = (
        x_lo.log10() - 0.1,
        x_hi.log10().max(x_lo.log10() + 0.5) + 0.1,
    );
    let y_hi = all
        .iter()
        .map(|p| p.1)
        .chain(panel.references.iter().map(|r| r.1))
        .fold(1e-9, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.caption, (FONT, 18))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(lo..hi, 0f64..y_hi)?;
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .x_labels(8)
        .x_label_formatter(&|x| short_number(10f64.powf(*x)))
        .y_label_formatter(&|y| short_number(*y))
        .x_desc(panel.x_desc)
        .y_desc(panel.y_desc)
        .label_style((FONT, 13))
        .draw()?;
    for s in panel.series {
        let points: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|(x, _)| *x > 0.0)
            .map(|(x, y)| (x.log10(), *y))
            .collect();
        let style = s.colour.stroke_width(2);
        chart
            .draw_series(LineSeries::new(points.clone(), style))?
            .label(s.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        if points.len() < 20 {
            chart.draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, s.colour.filled())),
            )?;
        }
    }
    for (name, y) in panel.references {
        let style = BLACK.stroke_width(1);
        chart
            .draw_series(DashedLineSeries::new(vec![(lo, y), (hi, y)], 6, 4, style))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font((FONT, 13))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    Ok(())
}

fn latency_panel(report: &Report, op: Op, placement: Placement) -> Panel<'static> {
    Panel {
        caption: format!(
            "{} round trip CDF, {} B, {}",
            op.name(),
            report.settings.value_bytes,
            placement.name()
        ),
        x_desc: "latency (µs, log scale)",
        y_desc: "percentile",
        series: report
            .latency
            .iter()
            .filter(|r| r.op == op && r.placement == placement)
            .map(|r| Series {
                name: r.transport.name().into(),
                colour: colour(r.transport),
                points: r.cdf.clone(),
            })
            .collect(),
        references: Vec::new(),
    }
}

fn throughput_panel(report: &Report, pipeline: usize, placement: Placement) -> Panel<'static> {
    let series = [Transport::Tcp, Transport::Unix, Transport::Shm]
        .into_iter()
        .map(|t| Series {
            name: t.name().into(),
            colour: colour(t),
            points: report
                .throughput
                .iter()
                .filter(|c| c.transport == t && c.pipeline == pipeline && c.placement == placement)
                .map(|c| (c.connections as f64, c.ops_per_s))
                .collect(),
        })
        .collect();
    Panel {
        caption: format!("GET throughput, pipeline {pipeline}, {}", placement.name()),
        x_desc: "connections (log scale)",
        y_desc: "ops/s",
        series,
        references: Vec::new(),
    }
}

fn large_panel(report: &Report, op: Op) -> Panel<'static> {
    let series = [Transport::Tcp, Transport::Unix, Transport::Shm]
        .into_iter()
        .map(|t| Series {
            name: t.name().into(),
            colour: colour(t),
            points: report
                .large
                .iter()
                .filter(|c| c.transport == t && c.op == op)
                .map(|c| (c.value_bytes as f64, c.bytes_per_s / 1e9))
                .collect(),
        })
        .collect();
    Panel {
        caption: format!("{} of large values, one connection", op.name()),
        x_desc: "value bytes (log scale)",
        y_desc: "GB/s",
        series,
        references: report
            .memcpy_bytes_per_s()
            .map(|m| ("memcpy, one thread (calibration)".to_string(), m / 1e9))
            .into_iter()
            .collect(),
    }
}

/// Writes the PNGs of the items that ran.
pub fn write_all(report: &Report, out: &Path) -> anyhow::Result<()> {
    if let Some(first) = report.latency.first() {
        // Both placements' GETs side by side when both ran; else GET beside SET.
        let free = report
            .latency
            .iter()
            .any(|r| r.placement != first.placement);
        let (left, right) = if free {
            ((Op::Get, Placement::Pinned), (Op::Get, Placement::Free))
        } else {
            ((Op::Get, first.placement), (Op::Set, first.placement))
        };
        write_side_by_side(
            &out.join("transports-latency.png"),
            "fallow round trips by transport",
            |area| draw(area, latency_panel(report, left.0, left.1)),
            |area| draw(area, latency_panel(report, right.0, right.1)),
        )?;
    }
    let mut placements: Vec<Placement> = report.throughput.iter().map(|c| c.placement).collect();
    placements.sort();
    placements.dedup();
    for placement in placements {
        let pipelines = &report.settings.pipelines;
        let first = pipelines[0];
        let second = *pipelines.get(1).unwrap_or(&first);
        write_side_by_side(
            &out.join(format!("transports-throughput-{}.png", placement.name())),
            "fallow throughput by transport",
            |left| draw(left, throughput_panel(report, first, placement)),
            |right| draw(right, throughput_panel(report, second, placement)),
        )?;
    }
    if !report.large.is_empty() {
        write_side_by_side(
            &out.join("transports-large.png"),
            "fallow large values by transport",
            |left| draw(left, large_panel(report, Op::Set)),
            |right| draw(right, large_panel(report, Op::Get)),
        )?;
    }
    Ok(())
}
