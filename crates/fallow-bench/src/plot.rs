//! `--plot FILE.png`: the latency CDF (log latency axis) beside throughput over time. The font is built
//! into the binary, so plots draw the same on machines without any fonts installed.
use std::path::Path;
use std::sync::OnceLock;

use anyhow::{anyhow, Context};
use hdrhistogram::Histogram;
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::report::TimelinePoint;

/// DejaVu Sans (Bitstream Vera licence, see assets/DejaVuSans-LICENSE.txt).
static FONT_TTF: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
pub(crate) const FONT: &str = "sans-serif";
const WIDTH_PX: u32 = 1400;
const HEIGHT_PX: u32 = 560;

fn register_font() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| plotters::style::register_font(FONT, FontStyle::Normal, FONT_TTF).is_ok());
    ok.then_some(())
        .ok_or_else(|| anyhow!("the embedded font does not load"))
}

/// The CDF as (latency in microseconds, percentile) points, denser towards the tail.
pub fn cdf_points(histogram: &Histogram<u64>) -> Vec<(f64, f64)> {
    if histogram.is_empty() {
        return Vec::new();
    }
    let mut quantiles: Vec<f64> = (0..90).map(|i| f64::from(i) / 100.0).collect();
    // 0.9, 0.99, ... with 20 steps per decade of tail.
    quantiles.extend((0..=100).map(|i| 1.0 - 10f64.powf(-1.0 - f64::from(i) / 20.0)));
    quantiles.push(1.0);
    quantiles
        .into_iter()
        .map(|q| (histogram.value_at_quantile(q) as f64 / 1000.0, q * 100.0))
        .collect()
}

/// Writes the PNG.
pub fn write_plot(
    path: &Path,
    title: &str,
    histogram: &Histogram<u64>,
    timeline: &[TimelinePoint],
) -> anyhow::Result<()> {
    write_side_by_side(
        path,
        title,
        |left| draw_cdf(left, histogram),
        |right| draw_timeline(right, timeline),
    )
}

/// One half of a plot.
pub(crate) type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;
pub(crate) type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// A PNG of two charts side by side under one title.
pub(crate) fn write_side_by_side(
    path: &Path,
    title: &str,
    left: impl FnOnce(&Area<'_>) -> DrawResult,
    right: impl FnOnce(&Area<'_>) -> DrawResult,
) -> anyhow::Result<()> {
    register_font()?;
    let root = BitMapBackend::new(path, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
    let draw = || -> DrawResult {
        root.fill(&WHITE)?;
        let root = root.titled(title, (FONT, 22))?;
        let (left_area, right_area) = root.split_horizontally(WIDTH_PX / 2);
        left(&left_area)?;
        right(&right_area)?;
        root.present()?;
        Ok(())
    };
    draw()
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("drawing {}", path.display()))
}

fn draw_cdf<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    histogram: &Histogram<u64>,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    // Plotted against log10 of the latency so the axis labels can be plain microsecond values.
    let points: Vec<(f64, f64)> = cdf_points(histogram)
        .into_iter()
        .map(|(us, pct)| (us.max(0.001).log10(), pct))
        .collect();
    let lo = points.first().map_or(0.0, |p| p.0) - 0.1;
    let hi = points.last().map_or(1.0, |p| p.0).max(lo + 1.0) + 0.1;
    let mut chart = ChartBuilder::on(area)
        .caption("latency CDF", (FONT, 18))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(lo..hi, 0f64..100f64)?;
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .x_labels(8)
        .x_label_formatter(&|log_us| short_number(10f64.powf(*log_us)))
        .y_label_formatter(&|pct| format!("{pct:.0}"))
        .x_desc("latency (us, log scale)")
        .y_desc("percentile")
        .label_style((FONT, 13))
        .draw()?;
    chart.draw_series(LineSeries::new(points, BLUE.stroke_width(2)))?;
    Ok(())
}

/// A number in at most four significant characters: 3.2, 45, 870, 1.2k, 35M.
pub fn short_number(value: f64) -> String {
    let (scaled, suffix) = match value.abs() {
        v if v >= 1e6 => (value / 1e6, "M"),
        v if v >= 1e3 => (value / 1e3, "k"),
        _ => (value, ""),
    };
    if scaled.abs() >= 10.0 || scaled.fract().abs() < 1e-9 {
        format!("{scaled:.0}{suffix}")
    } else {
        format!("{scaled:.1}{suffix}")
    }
}

fn draw_timeline<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    timeline: &[TimelinePoint],
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let t_max = timeline.last().map_or(1.0, |p| p.t_s).max(1.0);
    let ops_max = timeline.iter().map(|p| p.ops_per_sec).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption("throughput", (FONT, 18))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..t_max, 0f64..ops_max)?;
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .y_label_formatter(&|ops| short_number(*ops))
        .x_desc("time (s)")
        .y_desc("ops/s")
        .label_style((FONT, 13))
        .draw()?;
    let points: Vec<(f64, f64)> = timeline.iter().map(|p| (p.t_s, p.ops_per_sec)).collect();
    chart.draw_series(LineSeries::new(points.clone(), RED.stroke_width(2)))?;
    chart.draw_series(points.into_iter().map(|p| Circle::new(p, 3, RED.filled())))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_points_rise_to_the_maximum() {
        let mut histogram = Histogram::<u64>::new_with_bounds(1, 1_000_000_000, 3).unwrap();
        for ns in 1..=10_000u64 {
            histogram.record(ns * 100).unwrap();
        }
        let points = cdf_points(&histogram);
        assert!(points
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        let last = points.last().unwrap();
        assert_eq!(last.1, 100.0);
        assert!((last.0 - 1000.0).abs() < 1.0, "max {} us", last.0);
    }

    #[test]
    fn short_numbers_keep_few_digits() {
        assert_eq!(short_number(3.24), "3.2");
        assert_eq!(short_number(45.0), "45");
        assert_eq!(short_number(1_234.0), "1.2k");
        assert_eq!(short_number(35_000_000.0), "35M");
    }

    #[test]
    fn a_plot_is_written_as_png() {
        let mut histogram = Histogram::<u64>::new_with_bounds(1, 1_000_000_000, 3).unwrap();
        for ns in [20_000u64, 30_000, 45_000, 900_000] {
            histogram.record(ns).unwrap();
        }
        let timeline = [
            TimelinePoint {
                t_s: 1.0,
                ops_per_sec: 1000.0,
            },
            TimelinePoint {
                t_s: 2.0,
                ops_per_sec: 1200.0,
            },
        ];
        let path = std::env::temp_dir().join(format!("fallow-plot-{}.png", std::process::id()));
        write_plot(&path, "test", &histogram, &timeline).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert!(bytes.len() > 10_000, "{} bytes", bytes.len());
    }
}
