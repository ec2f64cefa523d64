//! `somnus sim sierra --report DIR`: CSV files and SVG plots of the gear schedule
//! against the load, power over time, latency CCDFs (Sierra Fig. 11) and the
//! timescale sweep (Fig. 9b). Each is a function of the result alone.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use plotters::prelude::*;
use somnus_sim::sierra::{SierraResult, SierraRun};

use super::plots::{Mark, canvas, legend, plot_error};

const ALL_ON: RGBColor = RGBColor(60, 60, 60);
const GEARED: RGBColor = RGBColor(220, 140, 50);
const NEEDED: RGBColor = RGBColor(70, 110, 180);

pub(crate) fn write_all(dir: &Path, r: &SierraResult) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write("runs.csv", runs_csv(r))?;
    write("timeline.csv", timeline_csv(r))?;
    write("latency-ccdf.csv", ccdf_csv(r))?;
    let subtitle = format!(
        "{} requests, N = {}, r = {}; bound {:.1} %",
        r.requests,
        r.servers,
        r.replicas,
        100.0 * r.bound_share
    );
    let hours = |s: f64| s / 3600.0;
    let timescale = r.geared.timescale_s.unwrap_or(3600) as f64;
    let needed: Vec<(f64, f64)> = r
        .needed_per_interval
        .iter()
        .enumerate()
        .flat_map(|(k, &n)| {
            let (a, b) = (k as f64 * timescale, (k + 1) as f64 * timescale);
            [(hours(a), f64::from(n)), (hours(b), f64::from(n))]
        })
        .collect();
    let on = |run: &SierraRun| -> Vec<(f64, f64)> {
        run.samples.iter().map(|s| (hours(s.at_s), f64::from(s.servers_on))).collect()
    };
    let lines = [
        ("servers the load needs".to_string(), NEEDED, needed),
        ("servers on, all on".to_string(), ALL_ON, on(&r.all_on)),
        (format!("servers on, {}", r.geared.name), GEARED, on(&r.geared)),
    ];
    let top = f64::from(r.servers) * 1.1;
    line_plot(
        &dir.join("gears.svg"),
        "Gears against the load",
        &subtitle,
        "hours",
        "servers",
        top,
        &lines,
    )?;
    let watts = |run: &SierraRun| -> Vec<(f64, f64)> {
        run.samples.iter().map(|s| (hours(s.at_s), s.watts)).collect()
    };
    let power = [
        ("all on".to_string(), ALL_ON, watts(&r.all_on)),
        (r.geared.name.clone(), GEARED, watts(&r.geared)),
    ];
    let top = power.iter().flat_map(|l| l.2.iter().map(|p| p.1)).fold(1.0, f64::max) * 1.1;
    line_plot(&dir.join("power.svg"), "Cluster power", &subtitle, "hours", "watts", top, &power)?;
    let ccdf = |ms: &[f64]| -> Vec<(f64, f64)> {
        ccdf_points(ms)
            .into_iter()
            .map(|(x, p)| (x.max(1e-3).log10(), p.max(1e-6).log10()))
            .collect()
    };
    let latency = [
        ("reads, all on".to_string(), ALL_ON, ccdf(&r.all_on.read_ms)),
        ("writes, all on".to_string(), RGBColor(150, 150, 150), ccdf(&r.all_on.write_ms)),
        (format!("reads, {}", r.geared.name), GEARED, ccdf(&r.geared.read_ms)),
        (format!("writes, {}", r.geared.name), RGBColor(240, 200, 120), ccdf(&r.geared.write_ms)),
    ];
    line_plot(
        &dir.join("latency-ccdf.svg"),
        "Latency CCDF (Sierra Fig. 11)",
        &subtitle,
        "log10 latency, ms",
        "log10 P(latency > x)",
        0.0,
        &latency,
    )?;
    let sweep: Vec<(f64, f64)> = r
        .sweep
        .iter()
        .filter_map(|run| Some((run.timescale_s? as f64 / 60.0, 100.0 * run.energy_share)))
        .collect();
    let mut sweep_sorted = sweep.clone();
    sweep_sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let bound = sweep_sorted.iter().map(|p| (p.0, 100.0 * r.bound_share)).collect();
    let lines = [
        (format!("energy, {}", r.geared.name), GEARED, sweep_sorted),
        ("bound at the main timescale".to_string(), RED, bound),
    ];
    line_plot(
        &dir.join("fig9b-timescale.svg"),
        "Energy against the gearing timescale (Sierra Fig. 9b)",
        &subtitle,
        "timescale, minutes",
        "energy, % of all on",
        110.0,
        &lines,
    )
}

fn runs_csv(r: &SierraResult) -> String {
    let mut out = String::from(
        "run,timescale_s,energy_share,servers_on_share,bound_share,read_mean_ms,read_p99_ms,\
         write_mean_ms,write_p99_ms,errors,unfinished,writes_logged,bytes_logged,\
         writes_reclaimed,reclaim_needed_mib_s,reclaim_achieved_mib_s,shifts,reactive_shifts,\
         migrations,migrations_per_shift,client_retries,wakes,servers_failed,violations\n",
    );
    for run in std::iter::once(&r.all_on).chain(&r.sweep) {
        let _ = writeln!(
            out,
            "{},{},{:.6},{:.6},{:.6},{:.4},{:.4},{:.4},{:.4},{},{},{},{},{},{:.6},{:.6},{},{},{},{:.3},{},{},{},{}",
            run.name,
            run.timescale_s.map_or(String::new(), |t| t.to_string()),
            run.energy_share,
            run.servers_on_share,
            r.bound_share,
            run.read.mean_ms,
            run.read.p99_ms,
            run.write.mean_ms,
            run.write.p99_ms,
            run.errors,
            run.unfinished,
            run.writes_logged,
            run.bytes_logged,
            run.writes_reclaimed,
            run.reclaim_needed_mib_s,
            run.reclaim_achieved_mib_s,
            run.shifts,
            run.reactive_shifts,
            run.migrations,
            run.migrations_per_shift,
            run.client_retries,
            run.wakes,
            run.servers_failed,
            run.violations.len()
        );
    }
    out
}

fn timeline_csv(r: &SierraResult) -> String {
    let mut out = String::from(
        "at_s,needed_servers,all_on_servers_on,all_on_watts,geared_servers_on,geared_planned_on,geared_watts\n",
    );
    let timescale = r.geared.timescale_s.unwrap_or(3600) as f64;
    for (a, g) in r.all_on.samples.iter().zip(&r.geared.samples) {
        let k = ((g.at_s - 1e-9).max(0.0) / timescale) as usize;
        let needed = r.needed_per_interval.get(k).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "{:.0},{needed},{},{:.1},{},{},{:.1}",
            g.at_s, a.servers_on, a.watts, g.servers_on, g.planned_on, g.watts
        );
    }
    out
}

fn ccdf_csv(r: &SierraResult) -> String {
    let mut out = String::from("run,kind,latency_ms,share_above\n");
    let runs = [(&r.all_on, "all-on"), (&r.geared, "geared")];
    for (run, name) in runs {
        for (kind, ms) in [("read", &run.read_ms), ("write", &run.write_ms)] {
            for (x, p) in ccdf_points(ms) {
                let _ = writeln!(out, "{name},{kind},{x:.4},{p:.6}");
            }
        }
    }
    out
}

/// The CCDF at about 200 points, log-spaced in rank.
fn ccdf_points(ms: &[f64]) -> Vec<(f64, f64)> {
    let mut sorted = ms.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let mut points = Vec::new();
    let mut last = usize::MAX;
    for k in 0..=200 {
        // Ranks from the median to the last, ever closer to the tail.
        let above = (n as f64 * 0.5 * (1e-6f64 / 0.5).powf(k as f64 / 200.0)).floor() as usize;
        let rank = n.saturating_sub(above.max(1));
        if rank == last || n == 0 {
            continue;
        }
        last = rank;
        points.push((sorted[rank], (n - rank - 1) as f64 / n as f64));
    }
    points
}

type Line = (String, RGBColor, Vec<(f64, f64)>);

/// Lines over a shared x range; `top` is the y axis's top (0: fit the data, which may
/// be negative, as a log scale's is).
fn line_plot(
    path: &Path,
    title: &str,
    subtitle: &str,
    x_desc: &str,
    y_desc: &str,
    top: f64,
    lines: &[Line],
) -> Result<()> {
    let (plot, key) = canvas(path, title, subtitle)?;
    let points = || lines.iter().flat_map(|l| l.2.iter());
    let x_min = points().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_max = points().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let (x_min, x_max) =
        if x_min.is_finite() { (x_min, x_max.max(x_min + 1e-3)) } else { (0.0, 1.0) };
    let (y_min, y_max) = if top > 0.0 {
        (0.0, top)
    } else {
        let lo = points().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let hi = points().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
        if lo.is_finite() { (lo - 0.1, hi + 0.1) } else { (0.0, 1.0) }
    };
    let mut chart = ChartBuilder::on(&plot)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_min..x_max, y_min..y_max)
        .map_err(|e| plot_error(path, e))?;
    chart.configure_mesh().x_desc(x_desc).y_desc(y_desc).draw().map_err(|e| plot_error(path, e))?;
    let mut entries = Vec::new();
    for (name, shade, points) in lines {
        let style = shade.stroke_width(2);
        chart
            .draw_series(LineSeries::new(points.iter().copied(), style))
            .map_err(|e| plot_error(path, e))?;
        entries.push((name.clone(), Mark::Line(style)));
    }
    legend(path, &key, &entries)?;
    plot.present().map_err(|e| plot_error(path, e))
}
