//! The file-cache benchmark's PNGs: horizontal bars per case (slowcat, video, OLTP, efficiency) and the
//! elastic run's throughput per second with the cut and the restore marked.
use std::path::Path;

use plotters::prelude::*;

use super::report::{ElasticResult, MatrixRun, Report};
use crate::plot::{short_number, write_side_by_side, Area, DrawResult, FONT};

/// One bar chart: a label and a value per bar, drawn top to bottom.
struct Bars<'a> {
    caption: &'a str,
    x_desc: &'a str,
    bars: Vec<(String, f64)>,
}

fn draw_bars(area: &Area<'_>, chart: Bars<'_>) -> DrawResult {
    let n = chart.bars.len().max(1) as f64;
    let max = chart
        .bars
        .iter()
        .map(|b| b.1)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.3;
    let mut plot = ChartBuilder::on(area)
        .caption(chart.caption, (FONT, 18))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(10)
        .build_cartesian_2d(0f64..max, 0f64..n)?;
    plot.configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .light_line_style(WHITE)
        .x_label_formatter(&|v| short_number(*v))
        .x_desc(chart.x_desc)
        .label_style((FONT, 13))
        .draw()?;
    let colour = RGBColor(31, 119, 180).mix(0.45);
    for (i, (label, value)) in chart.bars.iter().enumerate() {
        // The first bar at the top.
        let y = n - 1.0 - i as f64;
        let value = if value.is_finite() { *value } else { 0.0 };
        plot.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y + 0.15), (value, y + 0.85)],
            colour.filled(),
        )))?;
        plot.draw_series(std::iter::once(Text::new(
            format!("{label}: {}", short_number(value)),
            (max * 0.01, y + 0.62),
            (FONT, 13),
        )))?;
    }
    Ok(())
}

fn write_bars(path: &Path, title: &str, left: Bars<'_>, right: Bars<'_>) -> anyhow::Result<()> {
    write_side_by_side(path, title, |a| draw_bars(a, left), |a| draw_bars(a, right))
}

pub fn write_all(report: &Report, dir: &Path) -> anyhow::Result<()> {
    if !report.slowcat.is_empty() {
        let cases = &report.slowcat;
        write_bars(
            &dir.join("fs-slowcat.png"),
            "slowcat: 1 MiB reads of a file (Mortar Fig. 13a)",
            Bars {
                caption: "mean time per read",
                x_desc: "ms",
                bars: cases
                    .iter()
                    .map(|c| (c.name.clone(), c.read_mean_ms))
                    .collect(),
            },
            Bars {
                caption: "bandwidth",
                x_desc: "MB/s",
                bars: cases
                    .iter()
                    .map(|c| (c.name.clone(), c.bytes_per_s / 1e6))
                    .collect(),
            },
        )?;
    }
    if !report.video.is_empty() {
        write_matrix(
            &dir.join("fs-video.png"),
            "video server: 3 readers, 1 writer",
            &report.video,
            false,
        )?;
    }
    if !report.oltp.is_empty() {
        write_matrix(
            &dir.join("fs-oltp.png"),
            "OLTP: skewed random reads",
            &report.oltp,
            true,
        )?;
    }
    if !report.pgbench.is_empty() {
        let runs = &report.pgbench;
        write_bars(
            &dir.join("fs-pgbench.png"),
            "PostgreSQL pgbench -S, data directory on the mount",
            Bars {
                caption: "mean transaction latency",
                x_desc: "ms",
                bars: runs
                    .iter()
                    .map(|r| (r.name.clone(), r.latency_mean_ms))
                    .collect(),
            },
            Bars {
                caption: "transactions a second",
                x_desc: "tps",
                bars: runs.iter().map(|r| (r.name.clone(), r.tps)).collect(),
            },
        )?;
    }
    if let Some(e) = &report.efficiency {
        let mut bars: Vec<(String, f64)> = Vec::new();
        for (hit, null) in e.hit.iter().zip(&e.null) {
            bars.push((
                format!("fallow hits, {} reads", hit.block),
                hit.bytes_per_s / 1e6,
            ));
            bars.push((
                format!("null fs, {} reads", null.block),
                null.bytes_per_s / 1e6,
            ));
        }
        bars.push(("memcpy, one thread".into(), e.memcpy_bytes_per_s / 1e6));
        let ratios = e
            .ratios()
            .into_iter()
            .map(|(block, to_null, _)| (format!("{block} reads"), to_null))
            .collect();
        write_bars(
            &dir.join("fs-efficiency.png"),
            "cache-hit bandwidth through the mount (--direct-io)",
            Bars {
                caption: "bandwidth",
                x_desc: "MB/s",
                bars,
            },
            Bars {
                caption: "fallow hits / null fs",
                x_desc: "ratio",
                bars: ratios,
            },
        )?;
    }
    if let Some(e) = &report.elastic {
        write_elastic(&dir.join("fs-elastic.png"), e)?;
    }
    Ok(())
}

fn write_matrix(
    path: &Path,
    title: &str,
    runs: &[MatrixRun],
    by_latency: bool,
) -> anyhow::Result<()> {
    let left = if by_latency {
        Bars {
            caption: "mean read latency",
            x_desc: "ms",
            bars: runs
                .iter()
                .map(|r| (r.name.clone(), r.read_latency.lat_mean_us / 1000.0))
                .collect(),
        }
    } else {
        Bars {
            caption: "read bandwidth",
            x_desc: "MB/s",
            bars: runs
                .iter()
                .map(|r| (r.name.clone(), r.read_bytes_per_s / 1e6))
                .collect(),
        }
    };
    let wasted = |r: &MatrixRun| {
        r.fs_stats.as_ref().map_or(0.0, |s| {
            super::mount::counter(s, "prefetch_wasted_bytes") / 1048576.0
        })
    };
    let right = Bars {
        caption: "prefetched and never read",
        x_desc: "MiB",
        bars: runs
            .iter()
            .filter(|r| r.pool_bytes.is_some())
            .map(|r| (r.name.clone(), wasted(r)))
            .collect(),
    };
    write_bars(path, title, left, right)
}

fn write_elastic(path: &Path, e: &ElasticResult) -> anyhow::Result<()> {
    let throughput: Vec<(f64, f64)> = e
        .read_bytes_per_s
        .iter()
        .enumerate()
        .map(|(s, v)| (s as f64 + 1.0, v / 1e6))
        .collect();
    let pool: Vec<(f64, f64)> = e
        .samples
        .iter()
        .map(|s| (s.t_s, s.pool_target_bytes / 1048576.0))
        .collect();
    let marks = [(e.cut_s, "pool halved"), (e.restore_s, "pool restored")];
    write_side_by_side(
        path,
        &format!(
            "video server while the pool ({} MiB) is halved and restored",
            e.pool_bytes >> 20
        ),
        |a| {
            draw_series(
                a,
                "readers' throughput per second",
                "MB/s",
                &throughput,
                &marks,
            )
        },
        |a| draw_series(a, "pool target (INFO)", "MiB", &pool, &marks),
    )
}

fn draw_series(
    area: &Area<'_>,
    caption: &str,
    y_desc: &str,
    points: &[(f64, f64)],
    marks: &[(f64, &str)],
) -> DrawResult {
    let t_max = points.iter().map(|p| p.0).fold(1.0, f64::max);
    let y_max = points.iter().map(|p| p.1).fold(1e-9, f64::max) * 1.2;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 18))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..t_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .y_label_formatter(&|v| short_number(*v))
        .x_desc("time (s)")
        .y_desc(y_desc)
        .label_style((FONT, 13))
        .draw()?;
    for (t, name) in marks {
        chart.draw_series(LineSeries::new(
            [(*t, 0.0), (*t, y_max)],
            BLACK.mix(0.5).stroke_width(1),
        ))?;
        chart.draw_series(std::iter::once(Text::new(
            name.to_string(),
            (*t, y_max * 0.97),
            (FONT, 12),
        )))?;
    }
    chart.draw_series(LineSeries::new(points.iter().copied(), RED.stroke_width(2)))?;
    chart.draw_series(points.iter().map(|p| Circle::new(*p, 3, RED.filled())))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_and_series_plots_are_pngs() {
        let dir = std::env::temp_dir().join(format!("fallow-fsbench-plots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bars = || Bars {
            caption: "c",
            x_desc: "x",
            bars: vec![("a".into(), 1.0), ("b".into(), f64::NAN), ("c".into(), 3.0)],
        };
        write_bars(&dir.join("bars.png"), "t", bars(), bars()).unwrap();
        let elastic = ElasticResult::new(
            1 << 30,
            vec![5.0, 4.0, 1.0, 4.5],
            Vec::new(),
            1.5,
            2.5,
            10,
            2,
        );
        write_elastic(&dir.join("elastic.png"), &elastic).unwrap();
        for name in ["bars.png", "elastic.png"] {
            let bytes = std::fs::read(dir.join(name)).unwrap();
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{name}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
