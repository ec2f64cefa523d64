//! `somnus sim gear --report DIR`: CSV files and SVG plots of Sierra Fig. 8a (error
//! against days of training), Fig. 8b (gear-selection error), Fig. 9a (power of each
//! strategy and gearing beside the bound) and each workload's load and servers on.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use plotters::prelude::*;
use somnus_sim::gear_study::Mean;
use somnus_sim::gear_study::WorkloadStudy;

use super::plots::{Mark, canvas, legend, plot_error};

const ORACLE: RGBColor = RGBColor(60, 60, 60);
const PREDICTOR: RGBColor = RGBColor(70, 110, 180);
const HYBRID: RGBColor = RGBColor(220, 140, 50);

pub(crate) fn write_all(dir: &Path, studies: &[WorkloadStudy], mean: &Mean) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    let mut fig8a = String::from("workload,training_days,rms_over_mean\n");
    let mut fig8b = String::from("workload,gear_error,intervals\n");
    let mut fig9a = String::from(
        "workload,strategy,gearing,gear_min,power_share,overloaded_time_share,unserved_share,shifts,bound\n",
    );
    for s in studies {
        for (i, e) in s.rms_by_training_days.iter().enumerate() {
            let _ = writeln!(fig8a, "{},{},{e:.6}", s.workload, i + 1);
        }
        let spread = (s.gear_errors.counts.len() / 2) as i64;
        for (i, c) in s.gear_errors.counts.iter().enumerate() {
            let _ = writeln!(fig8b, "{},{},{c}", s.workload, i as i64 - spread);
        }
        for r in &s.power {
            let _ = writeln!(
                fig9a,
                "{},{},{},{},{:.6},{:.6},{:.6},{},{:.6}",
                s.workload,
                r.strategy,
                r.gearing,
                r.gear_min,
                r.power_share,
                r.overloaded_time_share,
                r.unserved_share,
                r.shifts,
                s.bound
            );
        }
        let mut timeline =
            String::from("interval,demand_servers,oracle_on,predictor_on,hybrid_on\n");
        for p in &s.timeline {
            let _ = writeln!(
                timeline,
                "{},{:.4},{},{},{}",
                p.interval, p.demand, p.oracle, p.predictor, p.hybrid
            );
        }
        write(&format!("timeline-{}.csv", s.workload), timeline)?;
        plot_timeline(&dir.join(format!("timeline-{}.svg", s.workload)), s)?;
    }
    write("fig8a-prediction-error.csv", fig8a)?;
    write("fig8b-gear-error.csv", fig8b)?;
    write("fig9a-power.csv", fig9a)?;
    plot_fig8a(&dir.join("fig8a-prediction-error.svg"), studies)?;
    plot_fig8b(&dir.join("fig8b-gear-error.svg"), studies)?;
    plot_fig9a(&dir.join("fig9a-power.svg"), mean)
}

fn subtitle(studies: &[WorkloadStudy]) -> String {
    format!("{} workloads", studies.len())
}

/// Fig. 8a: RMS error over mean load against days of training, one line per workload.
fn plot_fig8a(path: &Path, studies: &[WorkloadStudy]) -> Result<()> {
    let (plot, key) = canvas(path, "Prediction error (Sierra Fig. 8a)", &subtitle(studies))?;
    let days = studies.iter().map(|s| s.rms_by_training_days.len()).max().unwrap_or(1).max(1);
    let top = studies
        .iter()
        .flat_map(|s| s.rms_by_training_days.iter().copied())
        .fold(0.1f64, f64::max)
        .min(5.0)
        * 110.0;
    let mut chart = ChartBuilder::on(&plot)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.5f64..days as f64 + 0.5, 0f64..top)
        .map_err(|e| plot_error(path, e))?;
    chart
        .configure_mesh()
        .x_desc("days of training")
        .y_desc("RMS error, % of mean load")
        .draw()
        .map_err(|e| plot_error(path, e))?;
    let thin = RGBColor(170, 170, 170).stroke_width(1);
    for s in studies {
        let points =
            s.rms_by_training_days.iter().enumerate().map(|(i, e)| ((i + 1) as f64, 100.0 * e));
        chart.draw_series(LineSeries::new(points, thin)).map_err(|e| plot_error(path, e))?;
    }
    let mean: Vec<(f64, f64)> = (0..days)
        .filter_map(|d| {
            let values: Vec<f64> =
                studies.iter().filter_map(|s| s.rms_by_training_days.get(d).copied()).collect();
            (!values.is_empty())
                .then(|| ((d + 1) as f64, 100.0 * values.iter().sum::<f64>() / values.len() as f64))
        })
        .collect();
    let bold = BLACK.stroke_width(3);
    chart.draw_series(LineSeries::new(mean, bold)).map_err(|e| plot_error(path, e))?;
    let entries =
        vec![("a workload".to_string(), Mark::Line(thin)), ("mean".to_string(), Mark::Line(bold))];
    legend(path, &key, &entries)?;
    plot.present().map_err(|e| plot_error(path, e))
}

/// Fig. 8b: the share of intervals at each gear error, over every workload.
fn plot_fig8b(path: &Path, studies: &[WorkloadStudy]) -> Result<()> {
    let (plot, key) =
        canvas(path, "Gear selection error, full gearing (Sierra Fig. 8b)", &subtitle(studies))?;
    let width = studies.iter().map(|s| s.gear_errors.counts.len()).max().unwrap_or(1);
    let mut totals = vec![0u64; width];
    for s in studies {
        for (i, c) in s.gear_errors.counts.iter().enumerate() {
            totals[i] += c;
        }
    }
    let all = totals.iter().sum::<u64>().max(1) as f64;
    let spread = (width / 2) as f64;
    let mut chart = ChartBuilder::on(&plot)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(-spread - 0.5..spread + 0.5, 0f64..100f64)
        .map_err(|e| plot_error(path, e))?;
    chart
        .configure_mesh()
        .x_desc("chosen gear minus right gear")
        .y_desc("% of intervals")
        .draw()
        .map_err(|e| plot_error(path, e))?;
    let bars = totals.iter().enumerate().map(|(i, &c)| {
        let x = i as f64 - spread;
        Rectangle::new([(x - 0.35, 0.0), (x + 0.35, 100.0 * c as f64 / all)], PREDICTOR.filled())
    });
    chart.draw_series(bars).map_err(|e| plot_error(path, e))?;
    legend(path, &key, &[("predictor".to_string(), Mark::Box(PREDICTOR))])?;
    plot.present().map_err(|e| plot_error(path, e))
}

/// Fig. 9a: mean power of each strategy per gearing and g_min, the bound as a line.
fn plot_fig9a(path: &Path, mean: &Mean) -> Result<()> {
    let sub = format!("mean of {} workloads; bound {:.1} %", mean.workloads, 100.0 * mean.bound);
    let (plot, key) = canvas(path, "Power, % of always on (Sierra Fig. 9a)", &sub)?;
    let groups: Vec<(&str, u32)> =
        mean.power.iter().map(|r| (r.gearing, r.gear_min)).fold(Vec::new(), |mut v, g| {
            if !v.contains(&g) {
                v.push(g);
            }
            v
        });
    let mut chart = ChartBuilder::on(&plot)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..groups.len() as f64, 0f64..110f64)
        .map_err(|e| plot_error(path, e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len())
        .x_label_formatter(&|x| {
            let g = x.floor() as usize;
            groups.get(g).map_or(String::new(), |(gearing, min)| format!("{gearing}, g_min {min}"))
        })
        .y_desc("power, % of always on")
        .draw()
        .map_err(|e| plot_error(path, e))?;
    let strategies = [("oracle", ORACLE), ("predictor", PREDICTOR), ("hybrid", HYBRID)];
    for (m, (name, shade)) in strategies.iter().enumerate() {
        let bars = groups.iter().enumerate().filter_map(|(g, (gearing, min))| {
            let row = mean
                .power
                .iter()
                .find(|r| r.strategy == *name && r.gearing == *gearing && r.gear_min == *min)?;
            let left = g as f64 + 0.1 + m as f64 * 0.27;
            Some(Rectangle::new(
                [(left, 0.0), (left + 0.25, 100.0 * row.power_share)],
                shade.filled(),
            ))
        });
        chart.draw_series(bars).map_err(|e| plot_error(path, e))?;
    }
    let bound = 100.0 * mean.bound;
    let line = RED.stroke_width(2);
    chart
        .draw_series(LineSeries::new(vec![(0.0, bound), (groups.len() as f64, bound)], line))
        .map_err(|e| plot_error(path, e))?;
    let mut entries: Vec<(String, Mark)> =
        strategies.iter().map(|(n, s)| (n.to_string(), Mark::Box(*s))).collect();
    entries.push(("bound".to_string(), Mark::Line(line)));
    legend(path, &key, &entries)?;
    plot.present().map_err(|e| plot_error(path, e))
}

/// Which strategy's servers on a timeline point gives.
type OnOf = fn(&somnus_sim::gear_study::TimelinePoint) -> u32;

/// One workload's load (in servers) and servers on, fractional gearing, g_min 1.
fn plot_timeline(path: &Path, s: &WorkloadStudy) -> Result<()> {
    let sub = format!("{}: fractional gearing, g_min 1; load in servers", s.workload);
    let (plot, key) = canvas(path, "Load and servers on", &sub)?;
    let top = s
        .timeline
        .iter()
        .map(|p| p.demand.max(f64::from(p.predictor.max(p.hybrid))))
        .fold(1.0, f64::max)
        * 1.05;
    let mut chart = ChartBuilder::on(&plot)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..s.timeline.len() as f64, 0f64..top)
        .map_err(|e| plot_error(path, e))?;
    chart
        .configure_mesh()
        .x_desc("interval")
        .y_desc("servers")
        .draw()
        .map_err(|e| plot_error(path, e))?;
    let load = RGBColor(150, 150, 150).filled();
    chart
        .draw_series(s.timeline.iter().map(|p| {
            let x = p.interval as f64;
            Rectangle::new([(x, 0.0), (x + 1.0, p.demand)], load)
        }))
        .map_err(|e| plot_error(path, e))?;
    let series: [(&str, RGBColor, OnOf); 3] = [
        ("oracle", ORACLE, |p| p.oracle),
        ("predictor", PREDICTOR, |p| p.predictor),
        ("hybrid", HYBRID, |p| p.hybrid),
    ];
    let mut entries = vec![("load".to_string(), Mark::Box(RGBColor(150, 150, 150)))];
    for (name, shade, on) in series {
        let points = s.timeline.iter().flat_map(|p| {
            let x = p.interval as f64;
            [(x, f64::from(on(p))), (x + 1.0, f64::from(on(p)))]
        });
        let style = shade.stroke_width(2);
        chart.draw_series(LineSeries::new(points, style)).map_err(|e| plot_error(path, e))?;
        entries.push((name.to_string(), Mark::Line(style)));
    }
    legend(path, &key, &entries)?;
    plot.present().map_err(|e| plot_error(path, e))
}
