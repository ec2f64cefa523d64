//! `somnus bench cluster --trace`: the speed of a geared trace replay (issue 13). A
//! block trace is replayed through the cluster simulation, every message and disk I/O
//! modelled, the metadata service's hybrid scheduler choosing the gears (fractional,
//! 1-hour timescale, as `somnus sim sierra` runs by default), timed on one core. The
//! target: a week of the msr-fast08 preset (about 20.4 M requests) on 30 servers in
//! under 2 minutes (issue 13; issue 48 asks under 4 minutes and under 4 GB resident,
//! so each run's peak resident memory is measured too).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use somnus_core::gear::{Gearing, Policy};
use somnus_core::power::builtin_profile;
use somnus_sim::cluster::TraceWorkload;
use somnus_sim::sierra::{SierraConfig, replay_geared};
use somnus_trace::{ReadOptions, TraceSet};

use super::stats::{peak_resident_bytes, reset_peak_resident, thread_cpu_time};
use crate::output::note;
use crate::progress::now;

/// Requests of a week of the msr-fast08 preset.
const WEEK_REQUESTS: f64 = 20.4e6;
/// The time a week of them may take.
const WEEK_TARGET_S: f64 = 120.0;
/// The resident memory a week's replay may take at its peak (issue 48).
const PEAK_TARGET_BYTES: f64 = 4e9;

/// What one replay measured.
struct Timed {
    checked: bool,
    requests: u64,
    span_s: f64,
    wall: Duration,
    cpu: Option<Duration>,
    shifts: u64,
    writes_logged: u64,
    violations: usize,
    /// The process's peak resident memory over the run (the trace held in memory
    /// included); none where /proc does not say.
    peak_bytes: Option<u64>,
}

impl Timed {
    fn seconds(&self) -> f64 {
        self.cpu.unwrap_or(self.wall).as_secs_f64().max(1e-9)
    }

    fn rate(&self) -> f64 {
        self.requests as f64 / self.seconds()
    }
}

/// Replays `paths` (their first `secs` seconds, if given) on `servers` servers, once per
/// checker setting in `checks`, and prints the figures.
pub(crate) fn run(
    paths: &[PathBuf],
    secs: Option<f64>,
    servers: u32,
    checks: &[bool],
    json: bool,
) -> Result<()> {
    if let Some(secs) = secs
        && !(secs.is_finite() && secs > 0.0)
    {
        bail!("--trace-secs {secs}: must be a positive number of seconds");
    }
    // The requests are read once, into the workload: the set keeps none of its own
    // (a week's would be 640 MB more at the peak, and parsed into memory for nothing).
    let options = ReadOptions { memory_records_max: 0, ..ReadOptions::default() };
    let set = TraceSet::open(paths, &options)?;
    let workload = Arc::new(TraceWorkload::read(&set, secs)?);
    drop(set);
    if workload.ops.is_empty() {
        bail!("the traces hold no request to replay");
    }
    let mut timed = Vec::new();
    for &checked in checks {
        note(format!(
            "replaying {} requests on {servers} servers, history {}",
            workload.ops.len(),
            if checked { "checked" } else { "not checked" }
        ));
        timed.push(replay(&workload, servers, checked)?);
    }
    print(&timed, servers, json)
}

fn replay(workload: &Arc<TraceWorkload>, servers: u32, checked: bool) -> Result<Timed> {
    let config = SierraConfig {
        servers: Some(servers),
        replicas: 3,
        timescale_s: 3600,
        gearing: Gearing::Fractional,
        gear_min: 1,
        policy: Policy::Hybrid,
        headroom: 0.2,
        dwell_s: None,
        quiet_intervals: 2,
        profile: builtin_profile("ecs2-storage-node")?,
        seed: 1,
        check_history: checked,
        sweep_s: Vec::new(),
        sample_s: 60,
        logger_capacity_bytes: 16 << 30,
        compute: None,
    };
    // A second run's peak is its own, not the first's.
    if !reset_peak_resident() {
        note("the peak resident memory could not be reset: it is the process's so far");
    }
    let (start, cpu_start) = (now(), thread_cpu_time());
    let mut line = crate::progress::ProgressLine::new(false);
    let mut progress = |done| line.replay("geared", done);
    let report = replay_geared(workload.clone(), &config, servers, &mut progress)
        .map_err(anyhow::Error::msg)?;
    let wall = start.elapsed();
    let cpu = cpu_start.zip(thread_cpu_time()).map(|(a, b)| b.saturating_sub(a));
    let counters = report.scheduler.unwrap_or_default();
    Ok(Timed {
        checked,
        requests: workload.ops.len() as u64,
        span_s: workload.span().as_secs_f64(),
        wall,
        cpu,
        shifts: counters.shifts_up + counters.shifts_down,
        writes_logged: report.writes_logged,
        violations: report.end.violations.len(),
        peak_bytes: peak_resident_bytes(),
    })
}

fn print(timed: &[Timed], servers: u32, json: bool) -> Result<()> {
    let target_rate = WEEK_REQUESTS / WEEK_TARGET_S;
    if json {
        let runs: Vec<_> = timed
            .iter()
            .map(|t| {
                serde_json::json!({
                    "history_checked": t.checked,
                    "requests": t.requests,
                    "trace_secs": t.span_s,
                    "wall_secs": t.wall.as_secs_f64(),
                    "cpu_secs": t.cpu.map(|d| d.as_secs_f64()),
                    "requests_per_s": t.rate(),
                    "week_secs_at_this_rate": WEEK_REQUESTS / t.rate(),
                    "ratio_to_target": t.rate() / target_rate,
                    "shifts": t.shifts,
                    "writes_logged": t.writes_logged,
                    "violations": t.violations,
                    "peak_resident_bytes": t.peak_bytes,
                })
            })
            .collect();
        let figures = serde_json::json!({
            "servers": servers,
            "policy": "hybrid fractional, timescale 3600 s",
            "target_requests_per_s": target_rate,
            "target_peak_resident_bytes": PEAK_TARGET_BYTES,
            "runs": runs,
        });
        let document = crate::provenance::Document::new("somnus-bench-cluster-trace", figures);
        return outln!("{}", document.to_json()?);
    }
    let per = if timed.iter().all(|t| t.cpu.is_some()) { "CPU" } else { "wall" };
    outln!(
        "geared trace replay on one core: {servers} servers, the MDS's hybrid scheduler \
         (fractional, timescale 3600 s), every message and disk I/O modelled"
    )?;
    outln!(
        "{:>7} {:>10} {:>8} {:>8} {:>11} {:>10} {:>7} {:>12} {:>10} {:>7} {:>10}",
        "checked",
        "requests",
        "trace h",
        format!("{per} s"),
        format!("req/{per} s"),
        "week s",
        "shifts",
        "writes logged",
        "violations",
        "peak GB",
        "of target"
    )?;
    for t in timed {
        outln!(
            "{:>7} {:>10} {:>8.1} {:>8.1} {:>11.0} {:>10.0} {:>7} {:>12} {:>10} {:>7} {:>9.2}x",
            if t.checked { "yes" } else { "no" },
            t.requests,
            t.span_s / 3600.0,
            t.seconds(),
            t.rate(),
            WEEK_REQUESTS / t.rate(),
            t.shifts,
            t.writes_logged,
            t.violations,
            t.peak_bytes.map_or("-".to_string(), |b| format!("{:.2}", b as f64 / 1e9)),
            t.rate() / target_rate
        )?;
    }
    outln!(
        "target: a week of msr-fast08 ({:.1} M requests) in {WEEK_TARGET_S:.0} s, {target_rate:.0} \
         requests per second of one core, within {:.0} GB resident; `week s` is a week at the \
         rate measured, `peak GB` the process's peak resident memory over the run",
        WEEK_REQUESTS / 1e6,
        PEAK_TARGET_BYTES / 1e9
    )
}
