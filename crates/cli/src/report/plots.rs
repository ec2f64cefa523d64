//! The report's SVG plots, equivalents of 004 Fig. 6, 7, 8 and 10.
//!
//! Each plot names the trace and the window it shows under its title. Its legend sits
//! in a column of its own to the right of the data, never over it. Curves of the four
//! configurations are drawn widest first (baseline) to narrowest (rack), so that
//! configurations whose curves coincide (machine and rack on a set where they behave
//! alike) show as nested bands instead of one hiding the other.

use std::path::Path;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::coord::combinators::IntoLogRange;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use somnus_sim::engine::ConfigKind;
use somnus_sim::experiment::{ConfigReport, OffloadResult};

use crate::provenance::OffloadProvenance;

const WIDTH: u32 = 760;
const HEIGHT: u32 = 500;
/// The column on the right that holds the legend.
const LEGEND_WIDTH: u32 = 130;
/// Room for the title and the subtitle above the plot.
const HEADER_HEIGHT: u32 = 52;
/// Input files named in a subtitle before "+N more".
const FILES_NAMED_MAX: usize = 3;

pub(super) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// What a plot shows, for its subtitle: the input and the measured window.
pub(super) fn subtitle(provenance: &OffloadProvenance) -> String {
    let input = match &provenance.input.synthetic {
        Some(synthetic) => format!(
            "synthetic trace ({} generator, seed {}, {} h)",
            synthetic.generator, synthetic.seed, synthetic.hours
        ),
        None => {
            let files = &provenance.input.trace_files;
            let mut names: Vec<String> = files
                .iter()
                .take(FILES_NAMED_MAX)
                .map(|file| {
                    Path::new(&file.path).file_name().map_or_else(
                        || file.path.clone(),
                        |name| name.to_string_lossy().into_owned(),
                    )
                })
                .collect();
            if files.len() > FILES_NAMED_MAX {
                names.push(format!("+{} more", files.len() - FILES_NAMED_MAX));
            }
            names.join(", ")
        }
    };
    let window = &provenance.window;
    format!("{input}; {} .. {} ({:.2} h)", window.start, window.end, window.span_s / 3600.0)
}

/// Writes every plot of the report into `dir`.
pub(super) fn write_all(dir: &Path, result: &OffloadResult, subtitle: &str) -> Result<()> {
    plot_energy_cdf(&dir.join("fig6_energy_per_volume.svg"), result, subtitle)?;
    plot_bars(
        &dir.join("fig7_power.svg"),
        ("Power as % of baseline (004 Fig. 7)", subtitle),
        "% of baseline",
        result,
        &[
            ("mean", |c: &ConfigReport| c.mean_power_pct),
            ("peak", |c: &ConfigReport| c.peak_power_pct),
        ],
    )?;
    for kind in ["read", "write"] {
        plot_ccdf(&dir.join(format!("fig8_{kind}_response_time.svg")), result, kind, subtitle)?;
    }
    plot_bars(
        &dir.join("fig10_spinup_delays.svg"),
        ("Requests delayed by a spin-up (004 Fig. 10)", subtitle),
        "% of requests",
        result,
        &[
            ("reads", |c: &ConfigReport| c.spinup_delayed_reads_pct),
            ("writes", |c: &ConfigReport| c.spinup_delayed_writes_pct),
        ],
    )
}

fn color(kind: ConfigKind) -> RGBColor {
    match kind {
        ConfigKind::Baseline => RGBColor(0, 0, 0),
        ConfigKind::Vanilla => RGBColor(200, 60, 40),
        ConfigKind::Machine => RGBColor(70, 140, 240),
        ConfigKind::Rack => RGBColor(250, 190, 20),
    }
}

/// The stroke of a configuration's curve: widest for the first drawn, so a later
/// curve on the same points leaves the earlier one visible around it.
fn stroke(kind: ConfigKind) -> ShapeStyle {
    let width = match kind {
        ConfigKind::Baseline => 11,
        ConfigKind::Vanilla => 8,
        ConfigKind::Machine => 5,
        ConfigKind::Rack => 2,
    };
    color(kind).stroke_width(width)
}

pub(super) fn plot_error(path: &Path, error: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("plotting {}: {error}", path.display())
}

/// A white canvas with the title and subtitle drawn; returns the plot area and the
/// legend column.
pub(super) fn canvas<'a>(
    path: &'a Path,
    title: &str,
    subtitle: &str,
) -> Result<(Area<'a>, Area<'a>)> {
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_error(path, e))?;
    let (header, body) = root.split_vertically(HEADER_HEIGHT);
    let centre = |size: u32, shade: RGBColor| {
        ("sans-serif", size).into_font().color(&shade).pos(Pos::new(HPos::Center, VPos::Top))
    };
    let middle = (WIDTH / 2) as i32;
    header
        .draw(&Text::new(title.to_string(), (middle, 8), centre(18, BLACK)))
        .map_err(|e| plot_error(path, e))?;
    header
        .draw(&Text::new(subtitle.to_string(), (middle, 32), centre(12, RGBColor(80, 80, 80))))
        .map_err(|e| plot_error(path, e))?;
    Ok(body.split_horizontally(WIDTH - LEGEND_WIDTH))
}

/// How a legend entry is drawn.
pub(super) enum Mark {
    Line(ShapeStyle),
    Box(RGBColor),
}

/// Draws the legend in its own column, top to bottom.
pub(super) fn legend(path: &Path, area: &Area<'_>, entries: &[(String, Mark)]) -> Result<()> {
    let label =
        ("sans-serif", 13).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
    for (index, (name, mark)) in entries.iter().enumerate() {
        let y = 30 + 24 * index as i32;
        match mark {
            Mark::Line(style) => area.draw(&PathElement::new(vec![(8, y), (38, y)], *style)),
            Mark::Box(shade) => {
                area.draw(&Rectangle::new([(8, y - 6), (38, y + 6)], shade.filled()))
            }
        }
        .map_err(|e| plot_error(path, e))?;
        area.draw(&Text::new(name.clone(), (46, y), label.clone()))
            .map_err(|e| plot_error(path, e))?;
    }
    Ok(())
}

/// 004 Fig. 6: CDF across volumes of energy as a percentage of baseline.
fn plot_energy_cdf(path: &Path, result: &OffloadResult, subtitle: &str) -> Result<()> {
    let (plot, key) = canvas(path, "Energy per volume, % of baseline (004 Fig. 6)", subtitle)?;
    let mut chart = ChartBuilder::on(&plot)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..110f64, 0f64..1f64)
        .map_err(|e| plot_error(path, e))?;
    chart
        .configure_mesh()
        .x_desc("energy, % of baseline")
        .y_desc("fraction of volumes")
        .draw()
        .map_err(|e| plot_error(path, e))?;
    let mut entries = Vec::new();
    for config in result.configs.iter().filter(|c| c.config != ConfigKind::Baseline) {
        let mut values: Vec<f64> = config.volumes.iter().map(|v| v.energy_pct).collect();
        values.sort_by(f64::total_cmp);
        let count = values.len() as f64;
        let mut points = vec![(0.0, 0.0)];
        for (rank, value) in values.iter().enumerate() {
            points.push((*value, rank as f64 / count));
            points.push((*value, (rank + 1) as f64 / count));
        }
        chart
            .draw_series(LineSeries::new(points, stroke(config.config)))
            .map_err(|e| plot_error(path, e))?;
        entries.push((config.config.name().to_string(), Mark::Line(stroke(config.config))));
    }
    legend(path, &key, &entries)?;
    plot.present().map_err(|e| plot_error(path, e))
}

type Metric = fn(&ConfigReport) -> f64;

/// Grouped bars: one group per configuration, one bar per metric.
fn plot_bars(
    path: &Path,
    (title, subtitle): (&str, &str),
    y_label: &str,
    result: &OffloadResult,
    metrics: &[(&str, Metric)],
) -> Result<()> {
    let (plot, key) = canvas(path, title, subtitle)?;
    let top = result
        .configs
        .iter()
        .flat_map(|c| metrics.iter().map(move |(_, metric)| metric(c)))
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.1;
    let groups = result.configs.len();
    let mut chart = ChartBuilder::on(&plot)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..groups as f64, 0f64..top)
        .map_err(|e| plot_error(path, e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(y_label)
        .draw()
        .map_err(|e| plot_error(path, e))?;
    // Group names centred under their bars, in pixels: the axis would put its own
    // labels at round numbers, not at the groups.
    let label_style =
        ("sans-serif", 13).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Top));
    // backend_coord is in the whole canvas's pixels; the plot area starts lower.
    let (left, top_px) = plot.get_base_pixel();
    for (group, config) in result.configs.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(group as f64 + 0.5, 0.0));
        let at = (x - left, y - top_px + 8);
        plot.draw(&Text::new(config.config.name(), at, label_style.clone()))
            .map_err(|e| plot_error(path, e))?;
    }
    let shades = [RGBColor(70, 110, 180), RGBColor(220, 140, 50)];
    let width = 0.8 / metrics.len() as f64;
    let mut entries = Vec::new();
    for (m, (label, metric)) in metrics.iter().enumerate() {
        let shade = shades[m % shades.len()];
        let bars = result.configs.iter().enumerate().map(move |(g, config)| {
            let left = g as f64 + 0.1 + m as f64 * width;
            Rectangle::new([(left, 0.0), (left + width * 0.9, metric(config))], shade.filled())
        });
        chart.draw_series(bars).map_err(|e| plot_error(path, e))?;
        entries.push((label.to_string(), Mark::Box(shade)));
    }
    legend(path, &key, &entries)?;
    plot.present().map_err(|e| plot_error(path, e))
}

/// 004 Fig. 8: fraction of requests slower than x, both axes logarithmic.
fn plot_ccdf(path: &Path, result: &OffloadResult, kind: &str, subtitle: &str) -> Result<()> {
    let title = format!("{kind} response time (004 Fig. 8)");
    let (plot, key) = canvas(path, &title, subtitle)?;
    let curves: Vec<_> =
        result.curves.iter().filter(|c| c.kind == kind && !c.points.is_empty()).collect();
    let max_ms = curves.iter().flat_map(|c| c.points.iter().map(|p| p.0)).fold(1.0f64, f64::max);
    let min_fraction = 1e-6;
    let mut chart = ChartBuilder::on(&plot)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0.1f64..max_ms * 1.5).log_scale(), (min_fraction..1.0f64).log_scale())
        .map_err(|e| plot_error(path, e))?;
    chart
        .configure_mesh()
        .x_desc("response time, ms")
        .y_desc("fraction of requests slower")
        .draw()
        .map_err(|e| plot_error(path, e))?;
    let mut entries = Vec::new();
    for curve in curves {
        let points: Vec<(f64, f64)> = curve
            .points
            .iter()
            .filter(|(_, f)| *f > 0.0)
            .map(|&(ms, f)| (ms, f.max(min_fraction)))
            .collect();
        chart
            .draw_series(LineSeries::new(points, stroke(curve.config)))
            .map_err(|e| plot_error(path, e))?;
        entries.push((curve.config.name().to_string(), Mark::Line(stroke(curve.config))));
    }
    legend(path, &key, &entries)?;
    plot.present().map_err(|e| plot_error(path, e))
}
