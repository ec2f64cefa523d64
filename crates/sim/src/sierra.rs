//! Sierra 4.3 on the cluster simulation (`somnus sim sierra`): a block trace replayed
//! through the whole protocol, the gears chosen by the MDS's own scheduler from the
//! load its primaries report, against the same trace with every server on.
//!
//! - The cluster is provisioned for the trace's peak second (Sierra 3.5): N is the
//!   servers its demand needs at the simulated disk's measured capability, rounded up
//!   to whole gear groups (at least 3 servers per group), unless given.
//! - The bound is Sierra's: each interval's N_load over N, the interval's load being
//!   the peak of its seconds.
//! - Every run checks the history as it goes (issue 6's checker: C1, C3, C4 on every
//!   op; D5 and liveness at the end), unless told not to.

use std::sync::Arc;

use somnus_core::cluster::ClusterConfig;
use somnus_core::gear::IoServerConfig;
use somnus_core::gear::servers_needed;
use somnus_core::gear::{
    Capability, Gearing as PlanGearing, LeadTimes, Load, Policy, SchedulerConfig,
};
use somnus_core::power::{PowerProfile, PowerState};
use somnus_types::{VirtualDuration, VirtualInstant};

use crate::cluster::{
    ClusterSpec, ComputeLoad, FaultSet, Gearing, LoggerBackend, ReplayKind, ReplayProgress, Sample,
    TraceReplayReport, TraceWorkload, replay_trace_with,
};
use crate::disk::{DiskModel, DiskRequest};

const MIB: f64 = (1 << 20) as f64;
const DAY_S: u64 = 86_400;

/// What `sim sierra` runs.
#[derive(Clone, Debug)]
pub struct SierraConfig {
    /// N, or provisioned for the trace's peak.
    pub servers: Option<u32>,
    pub replicas: u32,
    /// The gearing interval (Sierra's timescale), seconds; divides a day.
    pub timescale_s: u64,
    pub gearing: PlanGearing,
    pub gear_min: u32,
    pub policy: Policy,
    pub headroom: f64,
    /// How long a reactive shift holds; one interval if none.
    pub dwell_s: Option<u64>,
    pub quiet_intervals: u32,
    pub profile: PowerProfile,
    pub seed: u64,
    pub check_history: bool,
    /// Further timescales to replay the trace at (Fig. 9b), seconds.
    pub sweep_s: Vec<u64>,
    /// How often the runs sample the cluster's power and plan, seconds.
    pub sample_s: u64,
    /// Room of each server's logger for the others' DVLs: writes logged for a sleeping
    /// replica stay until it wakes.
    pub logger_capacity_bytes: u64,
    /// The cluster's compute for the io-server controller (001), if any: the all-on run
    /// keeps every server on in max-perf; the geared runs put the servers on that the
    /// compute does not need in the io-server state. Its `io_server` flag is set by
    /// the run.
    pub compute: Option<ComputeLoad>,
}

impl SierraConfig {
    /// An error naming what is out of range: the scheduler's own checks, at every
    /// timescale.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(servers) = self.servers
            && servers < self.replicas
        {
            return Err(format!("--servers {servers} is below --replicas {}", self.replicas));
        }
        for &timescale in std::iter::once(&self.timescale_s).chain(&self.sweep_s) {
            if timescale == 0 || !DAY_S.is_multiple_of(timescale) {
                return Err(format!("timescale {timescale} s: must divide a day (86400 s)"));
            }
            let scheduler = scheduler_config(self, Capability::SIERRA_TABLE_4, timescale);
            let group_sizes = vec![1; self.replicas as usize];
            SchedulerConfig { group_sizes, ..scheduler }.validate()?;
        }
        if let Some(compute) = &self.compute {
            compute.config.validate()?;
            if !self.profile.has_state(PowerState::IoServer) {
                return Err(format!(
                    "a compute load needs a server profile with an io_server state \
                     (obelix, asterix-i, asterix-ii); {} has none",
                    self.profile.name
                ));
            }
            let steps = &compute.steps;
            if let Some((second, servers)) =
                steps.iter().find(|(_, servers)| !(servers.is_finite() && *servers >= 0.0))
            {
                return Err(format!(
                    "compute at second {second}: {servers} is not a number of servers >= 0"
                ));
            }
            if let Some(pair) = steps.windows(2).find(|pair| pair[0].0 >= pair[1].0) {
                return Err(format!(
                    "compute: second {} comes after second {}; seconds must rise",
                    pair[1].0, pair[0].0
                ));
            }
        }
        Ok(())
    }

    /// The compute load of a run: with the io-server state (geared) or without it.
    fn compute_for(&self, io_server: bool) -> Option<ComputeLoad> {
        self.compute.clone().map(|compute| ComputeLoad {
            config: IoServerConfig { io_server, ..compute.config },
            ..compute
        })
    }
}

impl SierraResult {
    /// The checker's violations in every run.
    pub fn violations(&self) -> impl Iterator<Item = &String> {
        std::iter::once(&self.all_on).chain(&self.sweep).flat_map(|run| &run.violations)
    }
}

/// Latency of one kind of request.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Latency {
    pub count: u64,
    pub mean_ms: f64,
    pub p99_ms: f64,
}

impl Latency {
    pub fn of(ms: &[f64]) -> Latency {
        if ms.is_empty() {
            return Latency::default();
        }
        let mut sorted = ms.to_vec();
        sorted.sort_by(f64::total_cmp);
        let rank = ((sorted.len() as f64 * 0.99).ceil() as usize).clamp(1, sorted.len());
        Latency {
            count: ms.len() as u64,
            mean_ms: ms.iter().sum::<f64>() / ms.len() as f64,
            p99_ms: sorted[rank - 1],
        }
    }
}

/// One replay of the trace, as measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SierraRun {
    /// "all-on", or the policy and its timescale.
    pub name: String,
    pub timescale_s: Option<u64>,
    pub energy_joules: f64,
    /// Energy over the all-on run's.
    pub energy_share: f64,
    /// Mean servers on (waking and draining count) over N, from the samples.
    pub servers_on_share: f64,
    pub read: Latency,
    pub write: Latency,
    pub errors: u64,
    pub unfinished: u64,
    /// Writes logged in DVLs (a replica asleep) and their bytes; writes reclaimed.
    pub writes_logged: u64,
    pub bytes_logged: u64,
    pub writes_reclaimed: u64,
    /// Sierra Table 2: the rate reclaim needs to empty the DVLs within the time every
    /// server is on, and the rate achieved (bytes logged and reclaimed over that
    /// time), MiB/s; zero when every server was never on together.
    pub reclaim_needed_mib_s: f64,
    pub reclaim_achieved_mib_s: f64,
    /// Sierra Table 3.
    pub shifts: u64,
    pub reactive_shifts: u64,
    pub migrations: u64,
    pub migrations_per_shift: f64,
    pub client_retries: u64,
    pub servers_failed: u64,
    pub wakes: u64,
    /// With a compute load (001): server-hours in max-perf and in the io-server state,
    /// and the median of the cluster's watts over the samples.
    pub max_perf_hours: f64,
    pub io_server_hours: f64,
    pub median_watts: f64,
    pub violations: Vec<String>,
    #[serde(skip)]
    pub samples: Vec<Sample>,
    #[serde(skip)]
    pub read_ms: Vec<f64>,
    #[serde(skip)]
    pub write_ms: Vec<f64>,
}

/// The whole experiment.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SierraResult {
    pub servers: u32,
    pub replicas: u32,
    pub requests: u64,
    pub devices: usize,
    pub span_s: f64,
    /// The simulated server's measured capability.
    pub capability: Capability,
    /// The trace's peak second, in servers' worth.
    pub peak_demand: f64,
    /// Mean of each interval's N_load / N at the main timescale.
    pub bound_share: f64,
    pub all_on: SierraRun,
    pub geared: SierraRun,
    /// Fig. 9b: the geared run at each timescale, the main one included.
    pub sweep: Vec<SierraRun>,
    /// Each interval's N_load at the main timescale.
    #[serde(skip)]
    pub needed_per_interval: Vec<u32>,
}

/// The capability of one simulated server, measured on its disk model: random 4 KiB
/// reads and writes per second over the whole disk, and 1 MiB sequential transfers.
pub fn measured_capability(model: &DiskModel) -> Capability {
    const OPS: u64 = 10_000;
    let capacity = model.capacity_bytes();
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut random = |bound: u64| {
        // SplitMix64: a fixed sequence, so the capability is the same every run.
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % bound
    };
    let mut rate = |write: bool, sequential: bool| {
        let (size, mut head, mut elapsed) = (if sequential { 1 << 20 } else { 4096 }, 0, 0.0);
        for k in 0..OPS {
            let position =
                if sequential { k * (1 << 20) % capacity } else { random(capacity / 4096) * 4096 };
            let op = DiskRequest { disk: 0, position, size_bytes: size, write, rewrite: false };
            elapsed += model.service_time(head, &op).as_secs_f64();
            head = model.head_after(&op);
        }
        OPS as f64 / elapsed * if sequential { size as f64 / MIB } else { 1.0 }
    };
    Capability {
        read_iops: rate(false, false),
        write_iops: rate(true, false),
        read_mib_s: rate(false, true),
        write_mib_s: rate(true, true),
    }
}

/// The trace's load, second by second of trace time.
pub fn load_per_second(workload: &TraceWorkload) -> Vec<Load> {
    let seconds = workload.span().as_nanos() / 1_000_000_000 + 1;
    let mut loads = vec![Load::ZERO; seconds as usize];
    for op in &workload.ops {
        let load = &mut loads[(op.at.as_nanos() / 1_000_000_000) as usize];
        let mib = op.range.size_bytes() as f64 / MIB;
        match op.kind {
            ReplayKind::Read => {
                load.read_iops += 1.0;
                load.read_mib_s += mib;
            }
            ReplayKind::Write => {
                load.write_iops += 1.0;
                load.write_mib_s += mib;
            }
            // No data moves: the metadata service's work, not the servers'.
            ReplayKind::Replace => {}
        }
    }
    loads
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// N for a peak demand: whole gear groups, at least 3 servers each.
pub fn provision(peak_demand: f64, replicas: u32) -> u32 {
    let needed = servers_needed(peak_demand).max(3 * replicas);
    needed.div_ceil(replicas) * replicas
}

/// Each interval's N_load (the peak of its seconds' demand), capped at N.
pub fn needed_per_interval(
    loads: &[Load],
    capability: &Capability,
    replicas: u32,
    servers: u32,
    interval_s: u64,
) -> Vec<u32> {
    loads
        .chunks(interval_s as usize)
        .map(|seconds| {
            let peak = seconds.iter().map(|l| capability.demand(l, replicas)).fold(0.0, f64::max);
            servers_needed(peak).min(servers)
        })
        .collect()
}

/// Replays `workload` all-on and geared (and at each timescale of the sweep);
/// `progress` is told each run's name as it starts (no request done) and how far it
/// is as it goes.
pub fn run_sierra(
    workload: Arc<TraceWorkload>,
    config: &SierraConfig,
    mut progress: impl FnMut(&str, ReplayProgress),
) -> Result<SierraResult, String> {
    config.validate()?;
    if workload.ops.is_empty() {
        return Err("the trace has no request".into());
    }
    let capability = measured_capability(&DiskModel::new(&crate::cluster::disk_mechanics()));
    let mut loads = load_per_second(&workload);
    if let Some(compute) = &config.compute {
        for (second, load) in loads.iter_mut().enumerate() {
            load.compute_servers = compute.servers_at(second as u64);
        }
    }
    let peak_demand =
        loads.iter().map(|l| capability.demand(l, config.replicas)).fold(0.0, f64::max);
    let servers = config.servers.unwrap_or_else(|| provision(peak_demand, config.replicas));
    let spec = cluster_spec(config, servers);
    let sample = VirtualDuration::from_secs(config.sample_s.max(1));
    let total = workload.ops.len() as u64;
    let mut run = |name: &str, gearing: &Gearing| {
        progress(name, ReplayProgress { done: 0, total });
        let mut told = |done: ReplayProgress| progress(name, done);
        let geared = !matches!(gearing, Gearing::AllOn);
        let compute = config.compute_for(geared);
        let workload = workload.clone();
        replay_trace_with(
            &spec,
            config.seed,
            workload,
            gearing,
            compute.as_ref(),
            sample,
            &mut told,
        )
    };
    let all_on = run("all on", &Gearing::AllOn);
    let baseline = all_on.energy_joules;
    let sample_s = sample.as_secs_f64();
    let all_on = summarize("all-on".into(), None, all_on, baseline, servers, sample_s);
    let mut timescales = vec![config.timescale_s];
    timescales.extend(config.sweep_s.iter().copied().filter(|t| *t != config.timescale_s));
    let mut sweep = Vec::new();
    for timescale in timescales {
        let name = format!("{} {}", config.policy.name(), config.gearing.name());
        let scheduler = scheduler_config(config, capability, timescale);
        let gearing = Gearing::Scheduler(scheduler);
        let report = run(&format!("{name}, timescale {timescale} s"), &gearing);
        sweep.push(summarize(name, Some(timescale), report, baseline, servers, sample_s));
    }
    let needed =
        needed_per_interval(&loads, &capability, config.replicas, servers, config.timescale_s);
    let bound_share = needed.iter().map(|&n| f64::from(n)).sum::<f64>()
        / (needed.len().max(1) as f64 * f64::from(servers));
    Ok(SierraResult {
        servers,
        replicas: config.replicas,
        requests: workload.ops.len() as u64,
        devices: workload.devices.len(),
        span_s: workload.span().as_secs_f64(),
        capability,
        peak_demand,
        bound_share,
        all_on,
        geared: sweep[0].clone(),
        sweep,
        needed_per_interval: needed,
    })
}

/// The cluster a trace is replayed on: `servers` in r racks, 1 MiB chunks.
fn cluster_spec(config: &SierraConfig, servers: u32) -> ClusterSpec {
    ClusterSpec {
        servers,
        replicas: config.replicas,
        racks: config.replicas,
        groups_per_server: 4,
        chunk_bytes: 1 << 20,
        gear_min: config.gear_min,
        check_history: config.check_history,
        logger: LoggerBackend::Model,
        logger_capacity_bytes: config.logger_capacity_bytes,
        server_profile: config.profile.clone(),
        faults: FaultSet::none(),
        ..ClusterSpec::small()
    }
}

/// Only the geared replay of [`run_sierra`], on `servers` (`somnus bench cluster
/// --trace` times it): its report, or why the config is refused.
pub fn replay_geared(
    workload: Arc<TraceWorkload>,
    config: &SierraConfig,
    servers: u32,
    progress: &mut dyn FnMut(ReplayProgress),
) -> Result<TraceReplayReport, String> {
    config.validate()?;
    let capability = measured_capability(&DiskModel::new(&crate::cluster::disk_mechanics()));
    let spec = cluster_spec(config, servers);
    spec.validate(config.seed).map_err(|error| format!("{servers} servers: {error}"))?;
    let scheduler = scheduler_config(config, capability, config.timescale_s);
    let sample = VirtualDuration::from_secs(config.sample_s.max(1));
    let gearing = Gearing::Scheduler(scheduler);
    let compute = config.compute_for(true);
    Ok(replay_trace_with(
        &spec,
        config.seed,
        workload,
        &gearing,
        compute.as_ref(),
        sample,
        progress,
    ))
}

fn scheduler_config(
    config: &SierraConfig,
    capability: Capability,
    timescale: u64,
) -> SchedulerConfig {
    let interval = VirtualDuration::from_secs(timescale);
    let heartbeat = ClusterConfig::sierra().heartbeat_interval;
    let leads = LeadTimes::of(config.profile.wake_duration(), heartbeat, interval);
    SchedulerConfig {
        replicas: config.replicas,
        group_sizes: Vec::new(),
        capability,
        gearing: config.gearing,
        gear_min: config.gear_min,
        policy: config.policy,
        interval,
        day: VirtualDuration::from_secs(DAY_S),
        origin: VirtualInstant::ZERO,
        wake_lead: leads.wake_lead,
        report_delay: leads.report_delay,
        headroom: config.headroom,
        dwell: config.dwell_s.map_or(interval, VirtualDuration::from_secs),
        quiet_intervals: config.quiet_intervals,
        forecast_margin: 0.0,
    }
}

fn summarize(
    name: String,
    timescale_s: Option<u64>,
    report: TraceReplayReport,
    baseline_joules: f64,
    servers: u32,
    sample_s: f64,
) -> SierraRun {
    let counters = report.scheduler.unwrap_or_default();
    let shifts = counters.shifts_up + counters.shifts_down;
    let samples = &report.samples;
    let servers_on_share = if samples.is_empty() {
        1.0
    } else {
        samples.iter().map(|s| f64::from(s.servers_on)).sum::<f64>()
            / (samples.len() as f64 * f64::from(servers))
    };
    let all_on_s = samples.iter().filter(|s| s.servers_on == servers).count() as f64 * sample_s;
    let rate = |bytes: f64| if all_on_s > 0.0 { bytes / MIB / all_on_s } else { 0.0 };
    let logged = report.bytes_logged as f64;
    let reclaimed_share = if report.writes_logged > 0 {
        report.end.writes_reclaimed as f64 / report.writes_logged as f64
    } else {
        0.0
    };
    SierraRun {
        name,
        timescale_s,
        energy_joules: report.energy_joules,
        energy_share: if baseline_joules > 0.0 {
            report.energy_joules / baseline_joules
        } else {
            1.0
        },
        servers_on_share,
        read: Latency::of(&report.read_ms),
        write: Latency::of(&report.write_ms),
        errors: report.errors,
        unfinished: report.unfinished,
        writes_logged: report.writes_logged,
        bytes_logged: report.bytes_logged,
        writes_reclaimed: report.end.writes_reclaimed,
        reclaim_needed_mib_s: rate(logged),
        reclaim_achieved_mib_s: rate(logged * reclaimed_share),
        shifts,
        reactive_shifts: counters.reactive_shifts,
        migrations: report.mds.migrations,
        migrations_per_shift: if shifts > 0 {
            report.mds.migrations as f64 / shifts as f64
        } else {
            0.0
        },
        client_retries: report.end.client_retries,
        servers_failed: report.mds.servers_failed,
        wakes: report.mds.wakes,
        max_perf_hours: report.role_seconds[0] / 3600.0,
        io_server_hours: report.role_seconds[1] / 3600.0,
        median_watts: median(report.samples.iter().map(|s| s.watts).collect()),
        violations: report.end.violations.clone(),
        samples: report.samples,
        read_ms: report.read_ms,
        write_ms: report.write_ms,
    }
}
