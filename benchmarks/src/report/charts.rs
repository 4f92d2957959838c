//! The report's charts, drawn as SVG with `plotters` into `charts/` beside the report: the
//! soak's throughput and pickup p99 over time, its table and index sizes and dead tuples
//! over time, and the scaling curve. Each file is rewritten whenever the report is; a chart
//! whose figures the run does not have is not drawn (and the report does not link it).

use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::format::int;
use crate::results::{Measurement, Run};
use crate::scenarios::{scaling, soak};

pub const SOAK_THROUGHPUT: &str = "soak-throughput.svg";
pub const SOAK_SIZES: &str = "soak-sizes.svg";
pub const SCALING: &str = "scaling.svg";

const FONT: &str = "sans-serif";
const MIB: f64 = 1024.0 * 1024.0;

/// A colour per queue, the same in every chart.
fn colour(comparator: &str) -> RGBColor {
    match comparator {
        "pg_jobs" => RGBColor(31, 119, 180),
        "hand-rolled" => RGBColor(214, 39, 40),
        "pgmq" => RGBColor(44, 160, 44),
        _ => RGBColor(148, 103, 189),
    }
}

/// Colours of the size lines of one queue's table and indexes: enough that jobs.job's table
/// and its seven indexes each get their own (with six, two pairs of lines shared a colour).
const SERIES: [RGBColor; 10] = [
    RGBColor(0, 0, 0),
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// One line of a panel.
struct Line {
    label: String,
    colour: RGBColor,
    points: Vec<(f64, f64)>,
}

/// Draws one panel: lines over a shared x range, y from 0 to a little above the highest point.
fn panel(
    area: &DrawingArea<SVGBackend, Shift>,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    x: Range<f64>,
    lines: &[Line],
    x_labels: Option<&dyn Fn(&f64) -> String>,
) -> Result<()> {
    let top = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    // Headroom above the highest point keeps the legend (upper right) off the lines.
    let top = if top > 0.0 { top * 1.3 } else { 1.0 };
    let y_label = |v: &f64| {
        if top >= 20.0 {
            int(*v)
        } else {
            format!("{v:.1}")
        }
    };
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 17))
        .margin(12)
        .x_label_area_size(38)
        .y_label_area_size(70)
        .build_cartesian_2d(x, 0.0..top)?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(x_desc)
        .y_desc(y_desc)
        .label_style((FONT, 12))
        .y_label_formatter(&y_label);
    if let Some(f) = x_labels {
        mesh.x_labels(lines.iter().map(|l| l.points.len()).max().unwrap_or(6));
        mesh.x_label_formatter(f);
    }
    mesh.draw()?;
    for line in lines {
        let style = line.colour.stroke_width(2);
        chart
            .draw_series(LineSeries::new(line.points.iter().copied(), style))?
            .label(line.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        if line.points.len() <= 12 {
            chart.draw_series(
                line.points
                    .iter()
                    .map(|&p| Circle::new(p, 3, line.colour.filled())),
            )?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT, 12))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .draw()?;
    Ok(())
}

fn soaks(run: &Run) -> Vec<&Measurement> {
    run.measurements
        .iter()
        .filter(|m| m.scenario == "s" && m.variant == soak::SOAK && !m.samples.is_empty())
        .collect()
}

fn x_range(ms: &[&Measurement]) -> Range<f64> {
    let end = ms
        .iter()
        .flat_map(|m| m.samples.iter().map(|s| s.t))
        .fold(1.0f64, f64::max);
    0.0..end
}

fn soak_throughput(path: &Path, ms: &[&Measurement]) -> Result<()> {
    let root = SVGBackend::new(path, (960, 720)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((2, 1));
    let x = x_range(ms);
    let mut rates: Vec<Line> = ms
        .iter()
        .map(|m| Line {
            label: format!("{} completed", m.comparator),
            colour: colour(&m.comparator),
            points: m.samples.iter().map(|s| (s.t, s.rate)).collect(),
        })
        .collect();
    if let Some(offered) = ms.iter().find_map(|m| m.offered_rate) {
        rates.push(Line {
            label: "offered".into(),
            colour: RGBColor(127, 127, 127),
            points: vec![(x.start, offered), (x.end, offered)],
        });
    }
    panel(
        &areas[0],
        "Soak: jobs completed per second (per interval)",
        "seconds",
        "jobs/s",
        x.clone(),
        &rates,
        None,
    )?;
    let p99: Vec<Line> = ms
        .iter()
        .map(|m| Line {
            label: format!("{} p99", m.comparator),
            colour: colour(&m.comparator),
            points: m
                .samples
                .iter()
                .filter_map(|s| s.p99_ms.map(|v| (s.t, v)))
                .collect(),
        })
        .collect();
    panel(
        &areas[1],
        "Soak: pickup latency p99 (per interval)",
        "seconds",
        "ms",
        x,
        &p99,
        None,
    )?;
    root.present()?;
    Ok(())
}

fn soak_sizes(path: &Path, ms: &[&Measurement]) -> Result<()> {
    let root = SVGBackend::new(path, (960, 360 * (ms.len() + 1) as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((ms.len() + 1, 1));
    let x = x_range(ms);
    for (m, area) in ms.iter().zip(&areas) {
        let mut lines = vec![Line {
            label: "table".into(),
            colour: SERIES[0],
            points: m
                .samples
                .iter()
                .map(|s| (s.t, s.table_bytes as f64 / MIB))
                .collect(),
        }];
        let names: Vec<String> = m
            .samples
            .first()
            .map(|s| s.index_bytes.iter().map(|(n, _)| n.clone()).collect())
            .unwrap_or_default();
        for (i, name) in names.iter().enumerate() {
            lines.push(Line {
                label: name.clone(),
                // The first colour is the table's.
                colour: SERIES[1 + i % (SERIES.len() - 1)],
                points: m
                    .samples
                    .iter()
                    .filter_map(|s| {
                        s.index_bytes
                            .iter()
                            .find(|(n, _)| n == name)
                            .map(|(_, b)| (s.t, *b as f64 / MIB))
                    })
                    .collect(),
            });
        }
        panel(
            area,
            &format!("Soak, {}: table and index sizes", m.comparator),
            "seconds",
            "MiB",
            x.clone(),
            &lines,
            None,
        )?;
    }
    let dead: Vec<Line> = ms
        .iter()
        .map(|m| Line {
            label: format!("{} dead tuples", m.comparator),
            colour: colour(&m.comparator),
            points: m
                .samples
                .iter()
                .map(|s| (s.t, s.dead_tuples as f64))
                .collect(),
        })
        .collect();
    panel(
        &areas[ms.len()],
        "Soak: dead tuples of the queue's table (pg_stat_user_tables)",
        "seconds",
        "dead tuples",
        x,
        &dead,
        None,
    )?;
    root.present()?;
    Ok(())
}

fn scaling_chart(path: &Path, run: &Run) -> Result<bool> {
    let points: Vec<&Measurement> = run
        .measurements
        .iter()
        .filter(|m| m.scenario == "w" && m.missing.is_none() && m.rate.is_some())
        .collect();
    if points.is_empty() {
        return Ok(false);
    }
    let root = SVGBackend::new(path, (1100, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((1, 2));
    let last = scaling::WORKER_COUNTS.len() as f64 - 1.0;
    let label = |x: &f64| format!("{}", 2f64.powf(*x).round());
    for ((variant, _), area) in scaling::VARIANTS.iter().zip(&areas) {
        let mut lines = Vec::new();
        for comparator in scaling::RUNS_FOR {
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|m| m.variant == *variant && m.comparator == comparator)
                .filter_map(|m| Some(((m.workers? as f64).log2(), m.rate?)))
                .collect();
            if !pts.is_empty() {
                lines.push(Line {
                    label: comparator.into(),
                    colour: colour(comparator),
                    points: pts,
                });
            }
        }
        panel(
            area,
            &format!("Burn-down, {variant}"),
            "workers",
            "jobs/s",
            -0.2..last + 0.2,
            &lines,
            Some(&label),
        )?;
    }
    root.present()?;
    Ok(true)
}

/// Draws every chart the run has figures for into `dir`; returns the files written.
pub fn write(dir: &Path, run: &Run) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let ms = soaks(run);
    let scaled = run.measurements.iter().any(|m| m.scenario == "w");
    if ms.is_empty() && !scaled {
        return Ok(written);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    if !ms.is_empty() {
        let path = dir.join(SOAK_THROUGHPUT);
        soak_throughput(&path, &ms).with_context(|| format!("drawing {}", path.display()))?;
        written.push(path);
        let path = dir.join(SOAK_SIZES);
        soak_sizes(&path, &ms).with_context(|| format!("drawing {}", path.display()))?;
        written.push(path);
    }
    let path = dir.join(SCALING);
    if scaling_chart(&path, run).with_context(|| format!("drawing {}", path.display()))? {
        written.push(path);
    }
    Ok(written)
}
