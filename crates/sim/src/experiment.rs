//! The write off-loading experiment of 004 section 4: run the baseline, vanilla,
//! machine-level and rack-level configurations on one trace and compare each with the
//! baseline.

use hdrhistogram::Histogram;
use somnus_core::power::PowerState;
use somnus_types::VirtualDuration;

use crate::engine::{
    ConfigKind, Engine, EngineError, Progress, RunMeasurements, RunWindow, SimRequest,
};
use crate::topology::TraceLayout;

/// Latency figures of one request kind, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub p50: f64,
    pub mean: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

/// Five-number summary of a distribution across volumes.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Distribution {
    pub min: f64,
    pub p25: f64,
    pub median: f64,
    pub p75: f64,
    pub max: f64,
}

/// One volume in one configuration.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct VolumeReport {
    pub name: String,
    pub server: String,
    pub rack: String,
    pub raid: crate::topology::Raid,
    pub disks: u32,
    pub reads: u64,
    pub writes: u64,
    pub energy_j: f64,
    /// Energy as a percentage of the same volume in the baseline.
    pub energy_pct: f64,
    /// Share of the window spent in standby (spun down).
    pub standby_pct: f64,
    /// Share of the window the volume was idle enough to sleep but kept spinning,
    /// because no logger on other disks was awake to take its writes (004 3.1; under
    /// `cheapest`, none that draws no more than it does).
    pub sleep_blocked_pct: f64,
    pub spin_ups: u64,
    pub writes_offloaded: u64,
    pub reads_from_loggers: u64,
    pub bytes_reclaimed: u64,
}

/// One configuration, compared with the baseline. The first keys are those of
/// `somnus sim offload --json`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ConfigReport {
    pub config: ConfigKind,
    pub energy_pct: f64,
    pub mean_power_pct: f64,
    pub peak_power_pct: f64,
    pub read_ms: LatencySummary,
    pub write_ms: LatencySummary,
    pub spinup_delayed_reads_pct: f64,
    pub spinup_delayed_writes_pct: f64,
    pub writes_offloaded_pct: f64,
    pub remote_reads_pct: f64,
    pub network_bytes: u64,
    pub energy_j: f64,
    pub mean_power_w: f64,
    pub peak_power_w: f64,
    /// The busiest power window's network traffic, in megabits per second.
    pub network_peak_mbps: f64,
    pub requests_unfinished: u64,
    /// Energy per volume as a percentage of its baseline (004 Fig. 6).
    pub volume_energy_pct: Distribution,
    pub volumes: Vec<VolumeReport>,
}

/// The points of a complementary CDF of response time (004 Fig. 8): the fraction of
/// requests slower than each latency.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LatencyCurve {
    pub config: ConfigKind,
    pub kind: &'static str,
    /// (latency in ms, fraction of requests slower)
    pub points: Vec<(f64, f64)>,
}

/// Every configuration's report and the curves for plots.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct OffloadResult {
    pub span_s: f64,
    pub power_window_s: f64,
    pub configs: Vec<ConfigReport>,
    pub curves: Vec<LatencyCurve>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExperimentError<E: std::error::Error + 'static> {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Source(E),
}

/// Runs the baseline and each configuration in `kinds` over the requests that
/// `source` produces afresh for each run (in non-decreasing arrival order, virtual
/// time 0 being the start of the warm-up).
pub fn run_offload<E, I>(
    layout: &TraceLayout,
    window: RunWindow,
    kinds: &[ConfigKind],
    mut source: impl FnMut() -> Result<I, E>,
    progress: &mut dyn FnMut(Progress),
) -> Result<OffloadResult, ExperimentError<E>>
where
    E: std::error::Error + 'static,
    I: Iterator<Item = Result<super::engine::SimRequest, E>>,
{
    let mut runs: Vec<RunMeasurements> = Vec::new();
    let mut wanted: Vec<ConfigKind> = vec![ConfigKind::Baseline];
    wanted.extend(kinds.iter().copied().filter(|k| *k != ConfigKind::Baseline));
    for kind in wanted {
        let requests = source().map_err(ExperimentError::Source)?;
        let mut failure = None;
        let stream = requests.map_while(|request| match request {
            Ok(request) => Some(request),
            Err(error) => {
                failure = Some(error);
                None
            }
        });
        let measured = Engine::new(layout, kind, window).run(stream, progress)?;
        if let Some(error) = failure {
            return Err(ExperimentError::Source(error));
        }
        runs.push(measured);
    }
    Ok(compare(layout, window.span, &runs, kinds))
}

/// Runs one configuration on requests already in memory (tests and benchmarks).
pub fn run_one(
    layout: &TraceLayout,
    span: VirtualDuration,
    kind: ConfigKind,
    requests: &[SimRequest],
) -> Result<RunMeasurements, EngineError> {
    Engine::new(layout, kind, RunWindow::measured(span)).run(requests.iter().copied(), &mut |_| {})
}

fn compare(
    layout: &TraceLayout,
    span: VirtualDuration,
    runs: &[RunMeasurements],
    kinds: &[ConfigKind],
) -> OffloadResult {
    let baseline = &runs[0];
    assert_eq!(baseline.kind, ConfigKind::Baseline, "the baseline runs first");
    let mut configs = Vec::new();
    let mut curves = Vec::new();
    for run in runs.iter().filter(|run| kinds.contains(&run.kind)) {
        configs.push(config_report(layout, span, baseline, run));
        curves.push(LatencyCurve {
            config: run.kind,
            kind: "read",
            points: ccdf(&run.read_latency_ns),
        });
        curves.push(LatencyCurve {
            config: run.kind,
            kind: "write",
            points: ccdf(&run.write_latency_ns),
        });
    }
    OffloadResult {
        span_s: span.as_secs_f64(),
        power_window_s: layout.power_window.as_secs_f64(),
        configs,
        curves,
    }
}

fn percent(part: f64, whole: f64) -> f64 {
    if whole == 0.0 { 0.0 } else { 100.0 * part / whole }
}

fn config_report(
    layout: &TraceLayout,
    span: VirtualDuration,
    baseline: &RunMeasurements,
    run: &RunMeasurements,
) -> ConfigReport {
    let energy =
        |r: &RunMeasurements| r.volumes.iter().map(|v| v.reading.energy.as_joules()).sum::<f64>();
    let (energy_j, baseline_j) = (energy(run), energy(baseline));
    let mean_power_w = energy_j / span.as_secs_f64().max(f64::MIN_POSITIVE);
    let baseline_mean_w = baseline_j / span.as_secs_f64().max(f64::MIN_POSITIVE);
    let peak_power_w = run.timeline.peak_watts();
    let reads = run.read_latency_ns.len();
    let writes = run.write_latency_ns.len();
    let volumes = volume_reports(layout, span, baseline, run);
    let network_peak_mbps = run
        .network_bytes_per_window
        .iter()
        .enumerate()
        .map(|(index, bytes)| {
            *bytes as f64 * 8.0 / run.timeline.window_length(index).as_secs_f64() / 1e6
        })
        .fold(0.0, f64::max);
    ConfigReport {
        config: run.kind,
        energy_pct: percent(energy_j, baseline_j),
        mean_power_pct: percent(mean_power_w, baseline_mean_w),
        peak_power_pct: percent(peak_power_w, baseline.timeline.peak_watts()),
        read_ms: summary(&run.read_latency_ns, run.read_latency_sum_ns),
        write_ms: summary(&run.write_latency_ns, run.write_latency_sum_ns),
        spinup_delayed_reads_pct: percent(run.reads_spin_delayed as f64, reads as f64),
        spinup_delayed_writes_pct: percent(run.writes_spin_delayed as f64, writes as f64),
        writes_offloaded_pct: percent(run.writes_logged as f64, writes as f64),
        remote_reads_pct: percent(run.reads_remote as f64, reads as f64),
        network_bytes: run.network_bytes,
        energy_j,
        mean_power_w,
        peak_power_w,
        network_peak_mbps,
        requests_unfinished: run.requests_unfinished,
        volume_energy_pct: distribution(volumes.iter().map(|v| v.energy_pct).collect()),
        volumes,
    }
}

/// Each volume of `run`, next to the same volume in the baseline.
fn volume_reports(
    layout: &TraceLayout,
    span: VirtualDuration,
    baseline: &RunMeasurements,
    run: &RunMeasurements,
) -> Vec<VolumeReport> {
    let share = |duration: VirtualDuration| percent(duration.as_secs_f64(), span.as_secs_f64());
    layout
        .volumes
        .iter()
        .enumerate()
        .map(|(index, volume)| {
            let measured = &run.volumes[index];
            let reference = &baseline.volumes[index];
            let standby = measured.reading.state_time[PowerState::Standby.index()];
            let blocked = VirtualDuration::from_nanos(measured.counters.sleep_blocked_ns);
            VolumeReport {
                name: volume.name.clone(),
                server: layout.servers[volume.server.index()].clone(),
                rack: layout.racks[volume.rack.index()].clone(),
                raid: volume.raid,
                disks: volume.disks,
                reads: measured.reads,
                writes: measured.writes,
                energy_j: measured.reading.energy.as_joules(),
                energy_pct: percent(
                    measured.reading.energy.as_joules(),
                    reference.reading.energy.as_joules(),
                ),
                standby_pct: share(standby),
                sleep_blocked_pct: share(blocked),
                spin_ups: measured.reading.spin_ups,
                writes_offloaded: measured.counters.writes_logged,
                reads_from_loggers: measured.counters.reads_logged,
                bytes_reclaimed: measured.counters.bytes_reclaimed,
            }
        })
        .collect()
}

fn summary(histogram: &Histogram<u64>, sum_ns: u128) -> LatencySummary {
    let count = histogram.len();
    if count == 0 {
        return LatencySummary::default();
    }
    let ms = |ns: u64| ns as f64 / 1e6;
    LatencySummary {
        count,
        p50: ms(histogram.value_at_quantile(0.50)),
        mean: sum_ns as f64 / count as f64 / 1e6,
        p95: ms(histogram.value_at_quantile(0.95)),
        p99: ms(histogram.value_at_quantile(0.99)),
        max: ms(histogram.max()),
    }
}

fn distribution(mut values: Vec<f64>) -> Distribution {
    if values.is_empty() {
        return Distribution::default();
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let index = ((values.len() - 1) as f64 * q).round() as usize;
        values[index]
    };
    Distribution { min: at(0.0), p25: at(0.25), median: at(0.5), p75: at(0.75), max: at(1.0) }
}

/// The fraction of requests slower than each of a log-spaced set of latencies, from
/// 0.1 ms up to the slowest request.
fn ccdf(histogram: &Histogram<u64>) -> Vec<(f64, f64)> {
    let count = histogram.len();
    if count == 0 {
        return Vec::new();
    }
    let max = histogram.max();
    let mut points = Vec::new();
    let mut latency_ns = 100_000.0_f64;
    // 10 points per decade from 0.1 ms to 1000 s at most.
    for _ in 0..=70 {
        let threshold = latency_ns as u64;
        let slower = histogram.count_between(threshold.saturating_add(1), histogram.high());
        points.push((latency_ns / 1e6, slower as f64 / count as f64));
        if threshold > max {
            break;
        }
        latency_ns *= 10f64.powf(0.1);
    }
    points
}
