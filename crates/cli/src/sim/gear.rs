//! `somnus sim gear`: Sierra 4.1 and 4.2 on a load series (Fig. 8a, 8b, 9a): the
//! predictor's error, its gear choices, and the power of the oracle, the predictor and
//! the hybrid under full and fractional gearing, beside the bound.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use somnus_core::gear::Capability;
use somnus_core::power::builtin_profile;
use somnus_sim::gear_study::{Mean, StudyConfig, WorkloadStudy, study};
use somnus_trace::synthetic::LoadSeries;
use somnus_types::VirtualDuration;

use crate::output::note;

/// The hybrid scheduler's knobs (`sim gear`, `sim sierra`).
#[derive(Args, Debug)]
pub(crate) struct HybridArgs {
    /// The hybrid's reactive shift provisions this share above the measured load.
    #[arg(long, default_value_t = 0.2)]
    pub(crate) headroom: f64,
    /// How long a reactive shift holds at least, in seconds. Default: one interval.
    #[arg(long)]
    pub(crate) dwell_s: Option<u64>,
    /// Intervals in a row below forecast before the hybrid forecasts lower.
    #[arg(long, default_value_t = 2)]
    pub(crate) quiet_intervals: u32,
}

#[derive(Args, Debug)]
pub(crate) struct GearArgs {
    /// A load series in the format of load-timeseries/cloudphysics_30min_load.csv
    /// (`somnus trace generate-load` writes one).
    #[arg(long, value_name = "FILE.csv")]
    load: PathBuf,
    /// One workload of the file, or all of them (the mean is printed last).
    #[arg(long, default_value = "all")]
    workload: String,
    /// N: the servers of the cluster, provisioned so that each workload's peak
    /// interval needs all of them (Sierra 4.3's provisioning).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(3..=1_000_000))]
    servers: u32,
    /// r: replicas, and gear groups.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=8))]
    replicas: u32,
    /// The series' window, in seconds.
    #[arg(long, default_value_t = 1800)]
    window_s: u32,
    /// The gearing interval, in seconds: a multiple of the window that divides a day
    /// (an interval's load is the peak of its windows). Default: the window.
    #[arg(long)]
    interval_s: Option<u32>,
    /// The built-in server profile whose wake time the scheduler plans with.
    #[arg(long, default_value = "ecs2-storage-node")]
    server_profile: String,
    #[command(flatten)]
    hybrid: HybridArgs,
    /// Print one JSON document (schema `somnus-gear`) instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write CSV files and SVG plots (Fig. 8a, 8b, 9a, and each workload's load
    /// and servers on) into this directory (created if missing).
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
}

pub(crate) fn run(args: &GearArgs) -> Result<()> {
    let series = LoadSeries::open(&args.load)?;
    let window_s = args.window_s;
    let interval_s = args.interval_s.unwrap_or(window_s);
    if window_s == 0 || !interval_s.is_multiple_of(window_s) {
        bail!("--interval-s {interval_s}: not a multiple of the window ({window_s} s)");
    }
    check_window(&series, window_s, &args.load)?;
    let profile = builtin_profile(&args.server_profile)?;
    let config = StudyConfig {
        servers: args.servers,
        replicas: args.replicas,
        capability: Capability::SIERRA_TABLE_4,
        window_s,
        windows_per_interval: interval_s / window_s,
        wake: profile.wake_duration(),
        headroom: args.hybrid.headroom,
        dwell: VirtualDuration::from_secs(args.hybrid.dwell_s.unwrap_or(u64::from(interval_s))),
        quiet_intervals: args.hybrid.quiet_intervals,
    };
    config.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    let names: Vec<String> = if args.workload == "all" {
        series.workloads().map(str::to_owned).collect()
    } else {
        series.rate_curve(&args.workload)?;
        vec![args.workload.clone()]
    };
    let mut studies = Vec::new();
    let mut skipped = Vec::new();
    for name in &names {
        let windows = series.windows(name).unwrap_or_default();
        match study(name, windows, &config) {
            Ok(s) => studies.push(s),
            Err(why) => skipped.push((name.clone(), why.to_string())),
        }
    }
    for (name, why) in &skipped {
        note(format_args!("{name}: skipped: {why}"));
    }
    if studies.is_empty() {
        bail!("no workload of {} could be studied", args.load.display());
    }
    let mean = Mean::of(&studies);
    if let Some(dir) = &args.report {
        crate::report::gear::write_all(dir, &studies, &mean)
            .with_context(|| format!("writing the report into {}", dir.display()))?;
    }
    if args.json {
        let document = serde_json::json!({
            "schema": "somnus-gear",
            "load": args.load.display().to_string(),
            "servers": config.servers,
            "replicas": config.replicas,
            "interval_s": config.interval_s(),
            "wake_s": config.wake.as_secs_f64(),
            "capability": config.capability,
            "workloads": studies,
            "skipped": skipped.iter().map(|(n, w)| serde_json::json!({"workload": n, "why": w})).collect::<Vec<_>>(),
            "mean": mean,
        });
        outln!("{}", serde_json::to_string_pretty(&document)?)?;
        return Ok(());
    }
    print_tables(args, &config, &studies, &mean)
}

/// Refuses a `--window-s` the file's windows are not spaced by: the median gap
/// between window ends of the first workload with three windows or more, within 20 %.
fn check_window(series: &LoadSeries, window_s: u32, path: &std::path::Path) -> Result<()> {
    let Some((name, windows)) = series
        .workloads()
        .filter_map(|name| Some((name, series.windows(name)?)))
        .find(|(_, windows)| windows.len() >= 3)
    else {
        return Ok(());
    };
    let mut gaps: Vec<u64> = windows
        .windows(2)
        .map(|pair| pair[1].window_end_us.saturating_sub(pair[0].window_end_us))
        .collect();
    gaps.sort_unstable();
    let median_s = gaps[gaps.len() / 2] as f64 / 1e6;
    if (median_s - f64::from(window_s)).abs() > 0.2 * f64::from(window_s) {
        bail!(
            "--window-s {window_s}: the windows of {} are {median_s:.0} s apart (the median \
             gap between window ends of {name}); give --window-s {:.0}",
            path.display(),
            median_s.round()
        );
    }
    Ok(())
}

fn pct(x: f64) -> String {
    format!("{:.1}", 100.0 * x)
}

fn print_tables(
    args: &GearArgs,
    config: &StudyConfig,
    studies: &[WorkloadStudy],
    mean: &Mean,
) -> Result<()> {
    outln!(
        "{}: {} workloads studied; N = {} servers, r = {}, {} s intervals, wake {:.0} s; \
         each workload's peak needs all N",
        args.load.display(),
        studies.len(),
        config.servers,
        config.replicas,
        config.interval_s(),
        config.wake.as_secs_f64()
    )?;
    outln!(
        "power as % of always on (F: full gearing, f: fractional, g_min 1), and the load \
         left unserved, fractional (uns); RMS error as % of the mean load"
    )?;
    outln!(
        "{:<10} {:>4} {:>8} {:>7} {:>6} | {:>6} {:>6} {:>6} | {:>6} {:>6} {:>6} | {:>8} {:>8}",
        "workload",
        "days",
        "rms 1d",
        "gear ok",
        "bound",
        "F orac",
        "F pred",
        "F hyb",
        "f orac",
        "f pred",
        "f hyb",
        "pred uns",
        "hyb uns"
    )?;
    for s in studies {
        let find = |strategy: &str, gearing: &str| {
            s.power
                .iter()
                .find(|r| r.strategy == strategy && r.gearing == gearing && r.gear_min == 1)
        };
        let share =
            |strategy, gearing| find(strategy, gearing).map_or("-".into(), |r| pct(r.power_share));
        let unserved = |strategy| {
            find(strategy, "fractional")
                .map_or("-".into(), |r| format!("{:.2}", 100.0 * r.unserved_share))
        };
        outln!(
            "{:<10} {:>4} {:>8} {:>7} {:>6} | {:>6} {:>6} {:>6} | {:>6} {:>6} {:>6} | {:>8} {:>8}",
            s.workload,
            s.days,
            s.rms_by_training_days.first().map_or("-".into(), |x| pct(*x)),
            s.gear_errors.correct_share.map_or("-".into(), pct),
            pct(s.bound),
            share("oracle", "full"),
            share("predictor", "full"),
            share("hybrid", "full"),
            share("oracle", "fractional"),
            share("predictor", "fractional"),
            share("hybrid", "fractional"),
            unserved("predictor"),
            unserved("hybrid"),
        )?;
    }
    outln!()?;
    outln!(
        "mean of {} workloads: RMS error after 1 day of training {} % (Sierra Fig. 8a: about 10 %); \
         gear right {} % of intervals (Fig. 8b: Hotmail 100 %, Messenger 90 %); bound {} %",
        mean.workloads,
        pct(mean.rms_after_one_day),
        pct(mean.gear_correct_share),
        pct(mean.bound)
    )?;
    outln!(
        "{:<10} {:<10} {:>5} {:>8} {:>12} {:>10} {:>8}",
        "strategy",
        "gearing",
        "g_min",
        "power %",
        "overloaded %",
        "unserved %",
        "shifts"
    )?;
    for r in &mean.power {
        outln!(
            "{:<10} {:<10} {:>5} {:>8} {:>12} {:>10} {:>8}",
            r.strategy,
            r.gearing,
            r.gear_min,
            pct(r.power_share),
            pct(r.overloaded_time_share),
            format!("{:.3}", 100.0 * r.unserved_share),
            r.shifts
        )?;
    }
    outln!(
        "hybrid against the predictor with the least forecast margin that serves as well \
         (no more unserved load, no more time overloaded):"
    )?;
    for a in &mean.hybrid_against_predictor {
        let (gearing, min) = (a.gearing, a.gear_min);
        let (Some(hybrid), Some(predictor)) = (a.hybrid_power_share, a.predictor_power_share)
        else {
            outln!("  {gearing:<10} g_min {min}: no margin up to 200 % serves as well anywhere")?;
            continue;
        };
        let others = if a.workloads_matched < mean.workloads {
            "; on the others no margin up to 200 % serves as well"
        } else {
            ""
        };
        outln!(
            "  {gearing:<10} g_min {min}: hybrid {} %, predictor {} % ({} of {} workloads \
             matched{others})",
            pct(hybrid),
            pct(predictor),
            a.workloads_matched,
            mean.workloads
        )?;
    }
    outln!(
        "Sierra Fig. 9a/9b for reference: Hotmail, full gearing, g_min 1, 1-hour intervals: 69 % \
         of baseline from its load traces, 72 % from its I/O traces"
    )?;
    Ok(())
}
