//! Output of the off-loading experiment: the summary tables printed on stdout, and the
//! report directory: CSV files and SVG plots equivalent to 004 Fig. 6 (energy per
//! volume), Fig. 7 (mean and peak power), Fig. 8 (response-time distributions) and
//! Fig. 10 (requests delayed by a spin-up). Everything written is a function of the
//! result alone, so the same run gives byte-identical files.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use plotters::coord::combinators::IntoLogRange;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use somnus_sim::engine::ConfigKind;
use somnus_sim::experiment::{ConfigReport, LatencySummary, OffloadResult};

const WIDTH: u32 = 720;
const HEIGHT: u32 = 480;

fn color(kind: ConfigKind) -> RGBColor {
    match kind {
        ConfigKind::Baseline => RGBColor(0, 0, 0),
        ConfigKind::Vanilla => RGBColor(200, 60, 40),
        ConfigKind::Machine => RGBColor(40, 110, 200),
        ConfigKind::Rack => RGBColor(30, 150, 70),
    }
}

fn latency(summary: &LatencySummary) -> String {
    if summary.count == 0 {
        return format!("{:>44}", "no requests");
    }
    format!(
        "{:>7.2} {:>8.2} {:>7.2} {:>8.2} {:>9.1}",
        summary.p50, summary.mean, summary.p95, summary.p99, summary.max
    )
}

/// The summary tables: one row per configuration, then energy per volume.
pub(crate) fn tables(result: &OffloadResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<9} {:>8} {:>8} {:>8}   {:<44} {:<44}",
        "config",
        "energy",
        "mean P",
        "peak P",
        "read ms: p50 mean p95 p99 max",
        "write ms: p50 mean p95 p99 max"
    );
    let _ = writeln!(out, "{:<9} {:>8} {:>8} {:>8}", "", "% base", "% base", "% base");
    for config in &result.configs {
        let _ = writeln!(
            out,
            "{:<9} {:>8.1} {:>8.1} {:>8.1}   {} {}",
            config.config.name(),
            config.energy_pct,
            config.mean_power_pct,
            config.peak_power_pct,
            latency(&config.read_ms),
            latency(&config.write_ms)
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<9} {:>13} {:>13} {:>11} {:>11} {:>14} {:>12}",
        "config", "spin-up delay", "spin-up delay", "writes", "remote", "network", "net peak"
    );
    let _ = writeln!(
        out,
        "{:<9} {:>13} {:>13} {:>11} {:>11} {:>14} {:>12}",
        "", "reads %", "writes %", "offloaded %", "reads %", "bytes", "Mbit/s"
    );
    for config in &result.configs {
        let _ = writeln!(
            out,
            "{:<9} {:>13.3} {:>13.3} {:>11.2} {:>11.3} {:>14} {:>12.2}",
            config.config.name(),
            config.spinup_delayed_reads_pct,
            config.spinup_delayed_writes_pct,
            config.writes_offloaded_pct,
            config.remote_reads_pct,
            somnus_trace::stats::thousands(config.network_bytes),
            config.network_peak_mbps,
        );
    }
    let _ = writeln!(out);
    let _ = write!(
        out,
        "{:<24} {:>6} {:>11} {:>9} {:>9}",
        "energy per volume", "rack", "array", "reads", "writes"
    );
    for config in &result.configs {
        let _ = write!(out, " {:>9}", format!("{} %", config.config.name()));
    }
    let _ = writeln!(out);
    if let Some(first) = result.configs.first() {
        for (index, volume) in first.volumes.iter().enumerate() {
            let array = format!("{} x{}", volume.raid.name(), volume.disks);
            let _ = write!(
                out,
                "{:<24} {:>6} {:>11} {:>9} {:>9}",
                volume.name, volume.rack, array, volume.reads, volume.writes
            );
            for config in &result.configs {
                let _ = write!(out, " {:>9.1}", config.volumes[index].energy_pct);
            }
            let _ = writeln!(out);
        }
    }
    let unfinished: u64 = result.configs.iter().map(|c| c.requests_unfinished).sum();
    if unfinished > 0 {
        let _ = writeln!(
            out,
            "\nwarning: {unfinished} requests were still in flight an hour after the window ended"
        );
    }
    out
}

/// Makes sure the report directory exists and takes files, before any long run: a
/// report that cannot be written fails at once, not after the replay.
pub(crate) fn prepare_dir(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir)
        .with_context(|| format!("creating report directory {}", dir.display()))?;
    let probe = dir.join(".somnus-write-test");
    fs::write(&probe, b"")
        .with_context(|| format!("report directory {} is not writable", dir.display()))?;
    fs::remove_file(&probe).with_context(|| format!("removing {}", probe.display()))
}

/// Writes the report directory.
pub(crate) fn write_dir(dir: &Path, result: &OffloadResult, heading: &str) -> Result<()> {
    prepare_dir(dir)?;
    let write = |name: &str, text: String| -> Result<()> {
        let path = dir.join(name);
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write("summary.txt", format!("{heading}{}", tables(result)))?;
    write("summary.json", serde_json::to_string_pretty(&result.configs)? + "\n")?;
    write("fig6_energy_per_volume.csv", energy_csv(result))?;
    write("fig7_power.csv", power_csv(result))?;
    write("fig8_response_time_ccdf.csv", ccdf_csv(result))?;
    write("fig10_spinup_delays.csv", spinup_csv(result))?;
    write("volumes.csv", volumes_csv(result))?;
    plot_energy_cdf(&dir.join("fig6_energy_per_volume.svg"), result)?;
    plot_bars(
        &dir.join("fig7_power.svg"),
        "Power as % of baseline (004 Fig. 7)",
        "% of baseline",
        result,
        &[
            ("mean", |c: &ConfigReport| c.mean_power_pct),
            ("peak", |c: &ConfigReport| c.peak_power_pct),
        ],
    )?;
    for kind in ["read", "write"] {
        plot_ccdf(&dir.join(format!("fig8_{kind}_response_time.svg")), result, kind)?;
    }
    plot_bars(
        &dir.join("fig10_spinup_delays.svg"),
        "Requests delayed by a spin-up (004 Fig. 10)",
        "% of requests",
        result,
        &[
            ("reads", |c: &ConfigReport| c.spinup_delayed_reads_pct),
            ("writes", |c: &ConfigReport| c.spinup_delayed_writes_pct),
        ],
    )?;
    Ok(())
}

fn energy_csv(result: &OffloadResult) -> String {
    let mut out = String::from("config,volume,energy_j,energy_pct_of_baseline,cdf\n");
    for config in &result.configs {
        let mut values: Vec<(f64, &str, f64)> =
            config.volumes.iter().map(|v| (v.energy_pct, v.name.as_str(), v.energy_j)).collect();
        values.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(b.1)));
        for (rank, (pct, name, joules)) in values.iter().enumerate() {
            let cdf = (rank + 1) as f64 / values.len() as f64;
            let _ = writeln!(
                out,
                "{},{},{:.3},{:.4},{:.4}",
                config.config.name(),
                name,
                joules,
                pct,
                cdf
            );
        }
    }
    out
}

fn power_csv(result: &OffloadResult) -> String {
    let mut out = String::from(
        "config,energy_j,energy_pct,mean_power_w,mean_power_pct,peak_power_w,peak_power_pct\n",
    );
    for c in &result.configs {
        let _ = writeln!(
            out,
            "{},{:.3},{:.4},{:.4},{:.4},{:.4},{:.4}",
            c.config.name(),
            c.energy_j,
            c.energy_pct,
            c.mean_power_w,
            c.mean_power_pct,
            c.peak_power_w,
            c.peak_power_pct
        );
    }
    out
}

fn ccdf_csv(result: &OffloadResult) -> String {
    let mut out = String::from("config,kind,latency_ms,fraction_slower\n");
    for curve in &result.curves {
        for (ms, fraction) in &curve.points {
            let _ =
                writeln!(out, "{},{},{:.4},{:.8}", curve.config.name(), curve.kind, ms, fraction);
        }
    }
    out
}

fn spinup_csv(result: &OffloadResult) -> String {
    let mut out = String::from("config,reads_delayed_pct,writes_delayed_pct\n");
    for c in &result.configs {
        let _ = writeln!(
            out,
            "{},{:.5},{:.5}",
            c.config.name(),
            c.spinup_delayed_reads_pct,
            c.spinup_delayed_writes_pct
        );
    }
    out
}

fn volumes_csv(result: &OffloadResult) -> String {
    let mut out = String::from(
        "config,volume,server,rack,raid,disks,reads,writes,energy_j,energy_pct,standby_pct,spin_ups,writes_offloaded,reads_from_loggers,bytes_reclaimed\n",
    );
    for c in &result.configs {
        for v in &c.volumes {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{:.3},{:.4},{:.4},{},{},{},{}",
                c.config.name(),
                v.name,
                v.server,
                v.rack,
                v.raid.name(),
                v.disks,
                v.reads,
                v.writes,
                v.energy_j,
                v.energy_pct,
                v.standby_pct,
                v.spin_ups,
                v.writes_offloaded,
                v.reads_from_loggers,
                v.bytes_reclaimed
            );
        }
    }
    out
}

fn plot_error(path: &Path, error: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("plotting {}: {error}", path.display())
}

/// 004 Fig. 6: CDF across volumes of energy as a percentage of baseline.
fn plot_energy_cdf(path: &Path, result: &OffloadResult) -> Result<()> {
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_error(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Energy per volume, % of baseline (004 Fig. 6)", ("sans-serif", 18))
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
    for config in result.configs.iter().filter(|c| c.config != ConfigKind::Baseline) {
        let mut values: Vec<f64> = config.volumes.iter().map(|v| v.energy_pct).collect();
        values.sort_by(f64::total_cmp);
        let count = values.len() as f64;
        let mut points = vec![(0.0, 0.0)];
        for (rank, value) in values.iter().enumerate() {
            points.push((*value, rank as f64 / count));
            points.push((*value, (rank + 1) as f64 / count));
        }
        let style = color(config.config);
        chart
            .draw_series(LineSeries::new(points, style.stroke_width(2)))
            .map_err(|e| plot_error(path, e))?
            .label(config.config.name())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], style.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()
        .map_err(|e| plot_error(path, e))?;
    root.present().map_err(|e| plot_error(path, e))
}

type Metric = fn(&ConfigReport) -> f64;

/// Grouped bars: one group per configuration, one bar per metric.
fn plot_bars(
    path: &Path,
    title: &str,
    y_label: &str,
    result: &OffloadResult,
    metrics: &[(&str, Metric)],
) -> Result<()> {
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_error(path, e))?;
    let top = result
        .configs
        .iter()
        .flat_map(|c| metrics.iter().map(move |(_, metric)| metric(c)))
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.3;
    let groups = result.configs.len();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
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
    for (group, config) in result.configs.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(group as f64 + 0.5, 0.0));
        root.draw(&Text::new(config.config.name(), (x, y + 8), label_style.clone()))
            .map_err(|e| plot_error(path, e))?;
    }
    let shades = [RGBColor(70, 110, 180), RGBColor(220, 140, 50)];
    let width = 0.8 / metrics.len() as f64;
    for (m, (label, metric)) in metrics.iter().enumerate() {
        let shade = shades[m % shades.len()];
        let bars = result.configs.iter().enumerate().map(move |(g, config)| {
            let left = g as f64 + 0.1 + m as f64 * width;
            Rectangle::new([(left, 0.0), (left + width * 0.9, metric(config))], shade.filled())
        });
        chart
            .draw_series(bars)
            .map_err(|e| plot_error(path, e))?
            .label(*label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], shade.filled()));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()
        .map_err(|e| plot_error(path, e))?;
    root.present().map_err(|e| plot_error(path, e))
}

/// 004 Fig. 8: fraction of requests slower than x, both axes logarithmic.
fn plot_ccdf(path: &Path, result: &OffloadResult, kind: &str) -> Result<()> {
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_error(path, e))?;
    let curves: Vec<_> =
        result.curves.iter().filter(|c| c.kind == kind && !c.points.is_empty()).collect();
    let max_ms = curves.iter().flat_map(|c| c.points.iter().map(|p| p.0)).fold(1.0f64, f64::max);
    let min_fraction = 1e-6;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{kind} response time (004 Fig. 8)"), ("sans-serif", 18))
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
    for curve in curves {
        let style = color(curve.config);
        let points: Vec<(f64, f64)> = curve
            .points
            .iter()
            .filter(|(_, f)| *f > 0.0)
            .map(|&(ms, f)| (ms, f.max(min_fraction)))
            .collect();
        chart
            .draw_series(LineSeries::new(points, style.stroke_width(2)))
            .map_err(|e| plot_error(path, e))?
            .label(curve.config.name())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], style.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()
        .map_err(|e| plot_error(path, e))?;
    root.present().map_err(|e| plot_error(path, e))
}
