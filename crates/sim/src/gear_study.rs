//! Sierra 4.1 and 4.2 on a load series: how well the hour-of-day predictor forecasts
//! (Fig. 8a), how often it picks the wrong gear (Fig. 8b), and the power of full and
//! fractional gearing for the oracle, the predictor and the hybrid beside the bound
//! (Fig. 9a). The predictor and the hybrid are the core's `GearScheduler`, run in
//! virtual time on the series; the oracle plans each interval from its own load.
//!
//! A series gives each window's mean rate, not its peak second: that mean is the
//! interval's load, and the scheduler sees it as one measured second at the start of
//! the window. The cluster is provisioned for the workload's peak: the capability's
//! ratios are kept and scaled so that the peak interval needs exactly `servers`.

use somnus_core::cluster::ClusterConfig;
use somnus_core::gear::{
    Capability, GearScheduler, Gearing, HourOfDay, LeadTimes, Load, Policy, SchedulerConfig,
    even_sizes, plan_for, servers_needed,
};
use somnus_trace::synthetic::LoadWindow;
use somnus_types::{VirtualDuration, VirtualInstant};

const DAY_S: u64 = 86_400;
const MIB: f64 = (1 << 20) as f64;

/// The study's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct StudyConfig {
    /// N: the cluster's servers.
    pub servers: u32,
    pub replicas: u32,
    /// The per-server capability whose ratios the provisioning keeps.
    pub capability: Capability,
    /// The series' window, in seconds.
    pub window_s: u32,
    /// Windows per gearing interval (their peak is the interval's load).
    pub windows_per_interval: u32,
    /// The servers' wake latency: how far ahead a rise is made, and how long a
    /// reactive shift takes to serve.
    pub wake: VirtualDuration,
    pub headroom: f64,
    pub dwell: VirtualDuration,
    pub quiet_intervals: u32,
}

impl StudyConfig {
    pub fn interval_s(&self) -> u64 {
        u64::from(self.window_s) * u64::from(self.windows_per_interval.max(1))
    }

    /// An error naming what is out of range.
    pub fn validate(&self) -> Result<(), String> {
        self.capability.validate()?;
        if self.replicas == 0 || self.servers < self.replicas {
            return Err(format!(
                "servers {} must be at least replicas {}",
                self.servers, self.replicas
            ));
        }
        if self.quiet_intervals < 2 {
            return Err(format!(
                "quiet intervals {}: at least 2 (one quiet interval never shifts down)",
                self.quiet_intervals
            ));
        }
        if !(self.headroom.is_finite() && (0.0..=1.0).contains(&self.headroom)) {
            return Err(format!("headroom {}: must be within 0..=1", self.headroom));
        }
        let interval = self.interval_s();
        if interval == 0 || !DAY_S.is_multiple_of(interval) {
            return Err(format!("the gearing interval ({interval} s) must divide a day"));
        }
        Ok(())
    }
}

/// The gear chosen against the right one, under full gearing with g_min 1.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct GearErrors {
    /// counts[e + r - 1]: intervals where the chosen gear minus the right one is e.
    pub counts: Vec<u64>,
    pub correct_share: Option<f64>,
}

/// One strategy's power under one gearing.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PowerRow {
    pub strategy: &'static str,
    pub gearing: &'static str,
    pub gear_min: u32,
    /// Mean servers on (waking ones count) over N.
    pub power_share: f64,
    /// The share of the time the servers serving were fewer than the load needed.
    pub overloaded_time_share: f64,
    /// The share of the load above what the servers serving could take.
    pub unserved_share: f64,
    pub shifts: u64,
}

/// The forecast margins tried for a predictor that serves as well as the hybrid.
pub const PREDICTOR_MARGINS: [f64; 9] = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0];

/// The predictor matched to the hybrid's latency.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Matched {
    pub gearing: &'static str,
    pub gear_min: u32,
    /// Infinite (null in JSON) when no margin tried serves as well.
    #[serde(serialize_with = "finite_or_null")]
    pub margin: f64,
    #[serde(serialize_with = "finite_or_null")]
    pub power_share: f64,
}

fn finite_or_null<S: serde::Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    if value.is_finite() { serializer.serialize_f64(*value) } else { serializer.serialize_none() }
}

/// The study of one workload.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct WorkloadStudy {
    pub workload: String,
    pub intervals: usize,
    /// Whole days of the series.
    pub days: usize,
    /// RMS error / mean load of the test days, after 1, 2, ... days of training.
    pub rms_by_training_days: Vec<f64>,
    pub gear_errors: GearErrors,
    /// Mean N_load / N over the measured intervals: power proportional to the load.
    pub bound: f64,
    pub power: Vec<PowerRow>,
    /// Per gearing and g_min: the predictor with the least forecast margin of
    /// `PREDICTOR_MARGINS` that serves the load as well as the hybrid (no more
    /// unserved load, no more time overloaded), and its power; none when no margin does.
    pub predictor_at_hybrid_latency: Vec<Matched>,
    /// Per interval: the load in servers, and the servers on for fractional gearing
    /// with g_min 1 (oracle, predictor, hybrid) at the interval's end.
    pub timeline: Vec<TimelinePoint>,
}

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct TimelinePoint {
    pub interval: usize,
    pub demand: f64,
    pub oracle: u32,
    pub predictor: u32,
    pub hybrid: u32,
}

/// Why a workload was not studied.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum StudyError {
    #[error("it has no load")]
    NoLoad,
    #[error("it covers {0} whole days; the predictor needs at least 2")]
    TooShort(usize),
}

/// The load of each gearing interval: the peak, metric by metric, of its windows.
pub fn interval_loads(windows: &[LoadWindow], config: &StudyConfig) -> Vec<Load> {
    let seconds = f64::from(config.window_s);
    let rate = |w: &LoadWindow| Load {
        read_iops: w.read_request_count as f64 / seconds,
        write_iops: w.write_request_count as f64 / seconds,
        read_mib_s: w.read_bytes.unwrap_or(0) as f64 / seconds / MIB,
        write_mib_s: w.write_bytes.unwrap_or(0) as f64 / seconds / MIB,
        compute_servers: 0.0,
    };
    windows
        .chunks(config.windows_per_interval.max(1) as usize)
        .map(|chunk| chunk.iter().map(rate).fold(Load::ZERO, Load::peak))
        .collect()
}

/// Studies one workload's windows.
pub fn study(
    workload: &str,
    windows: &[LoadWindow],
    config: &StudyConfig,
) -> Result<WorkloadStudy, StudyError> {
    let loads = interval_loads(windows, config);
    let raw: Vec<f64> =
        loads.iter().map(|l| config.capability.demand(l, config.replicas)).collect();
    let peak = raw.iter().copied().fold(0.0_f64, f64::max);
    if peak <= 0.0 {
        return Err(StudyError::NoLoad);
    }
    let per_day = (DAY_S / config.interval_s()) as usize;
    let days = loads.len() / per_day;
    if loads.len() < 2 * per_day {
        return Err(StudyError::TooShort(days));
    }
    let capability = config.capability.scaled(peak / f64::from(config.servers));
    let demand: Vec<f64> = loads.iter().map(|l| capability.demand(l, config.replicas)).collect();
    let sizes = even_sizes(config.servers, config.replicas);
    let measured = per_day..demand.len();
    let bound = measured.clone().map(|k| f64::from(servers_needed(demand[k]))).sum::<f64>()
        / (measured.len() as f64 * f64::from(config.servers));

    let mut power = Vec::new();
    let mut at_hybrid_latency = Vec::new();
    let mut timeline: Vec<TimelinePoint> = (0..demand.len())
        .map(|k| TimelinePoint {
            interval: k,
            demand: demand[k],
            oracle: 0,
            predictor: 0,
            hybrid: 0,
        })
        .collect();
    for gearing in [Gearing::Full, Gearing::Fractional] {
        for gear_min in [1, 2] {
            let oracle = oracle_run(&demand, config, gearing, gear_min);
            let run = |policy, margin| {
                scheduler_run(&loads, capability, config, gearing, gear_min, policy, margin)
            };
            let predictor = run(Policy::Predictor, 0.0);
            let hybrid = run(Policy::Hybrid, 0.0);
            let row = |name, run: &Run| {
                run.row(name, gearing, gear_min, &demand, measured.clone(), config)
            };
            let predictor_row = row("predictor", &predictor);
            let hybrid_row = row("hybrid", &hybrid);
            // The predictor alone, with the least margin that serves as well as the hybrid
            // (margin 0 is the run above).
            let matched = PREDICTOR_MARGINS.iter().find_map(|&margin| {
                let r = if margin == 0.0 {
                    predictor_row.clone()
                } else {
                    row("predictor", &run(Policy::Predictor, margin))
                };
                let serves = r.unserved_share <= hybrid_row.unserved_share
                    && r.overloaded_time_share <= hybrid_row.overloaded_time_share;
                serves.then_some((margin, r))
            });
            at_hybrid_latency.push(Matched {
                gearing: gearing.name(),
                gear_min,
                margin: matched.as_ref().map_or(f64::INFINITY, |m| m.0),
                power_share: matched.as_ref().map_or(f64::INFINITY, |m| m.1.power_share),
            });
            power.push(row("oracle", &oracle));
            power.push(predictor_row);
            power.push(hybrid_row);
            if (gearing, gear_min) == (Gearing::Fractional, 1) {
                for point in &mut timeline {
                    let end = (point.interval as u64 + 1) * config.interval_s();
                    point.oracle = oracle.on_before(end);
                    point.predictor = predictor.on_before(end);
                    point.hybrid = hybrid.on_before(end);
                }
            }
        }
    }
    Ok(WorkloadStudy {
        workload: workload.to_owned(),
        intervals: demand.len(),
        days,
        rms_by_training_days: rms_by_training_days(&demand, per_day),
        gear_errors: gear_errors(&demand, per_day, &sizes, config.replicas),
        bound,
        power,
        predictor_at_hybrid_latency: at_hybrid_latency,
        timeline,
    })
}

/// Fig. 8a: trained on days 0..d with equal weights, tested on every later interval.
fn rms_by_training_days(demand: &[f64], per_day: usize) -> Vec<f64> {
    let days = demand.len().div_ceil(per_day);
    (1..days)
        .map(|trained| {
            let mut predictor = HourOfDay::new(per_day as u32);
            for (k, &d) in demand.iter().enumerate().take(trained * per_day) {
                predictor.observe(k as u64, d);
            }
            let test = &demand[trained * per_day..];
            let squares: f64 = test
                .iter()
                .enumerate()
                .map(|(i, &actual)| {
                    let k = (trained * per_day + i) as u64;
                    (predictor.predict(k).unwrap_or(0.0) - actual).powi(2)
                })
                .sum();
            let mean = test.iter().sum::<f64>() / test.len() as f64;
            let rms = (squares / test.len() as f64).sqrt();
            if mean > 0.0 { rms / mean } else { 0.0 }
        })
        .collect()
}

/// Fig. 8b: the online predictor's gear against the right gear, full gearing, g_min 1.
fn gear_errors(demand: &[f64], per_day: usize, sizes: &[u32], replicas: u32) -> GearErrors {
    let gear = |d: f64| i64::from(plan_for(servers_needed(d), sizes, Gearing::Full, 1).full_groups);
    let spread = i64::from(replicas) - 1;
    let mut counts = vec![0_u64; (2 * spread + 1) as usize];
    let mut predictor = HourOfDay::new(per_day as u32);
    for (k, &actual) in demand.iter().enumerate() {
        if let Some(forecast) = predictor.predict(k as u64) {
            let error = (gear(forecast) - gear(actual)).clamp(-spread, spread);
            counts[(error + spread) as usize] += 1;
        }
        predictor.observe(k as u64, actual);
    }
    let total: u64 = counts.iter().sum();
    let correct_share = (total > 0).then(|| counts[spread as usize] as f64 / total as f64);
    GearErrors { counts, correct_share }
}

/// Servers on over time: (from second, drawing power, serving), in time order.
struct Run {
    steps: Vec<(f64, u32, u32)>,
    shifts: u64,
}

impl Run {
    /// Servers drawing power just before second `end`.
    fn on_before(&self, end: u64) -> u32 {
        let end = end as f64;
        self.steps.iter().take_while(|(at, ..)| *at < end).last().map_or(0, |s| s.1)
    }

    fn row(
        &self,
        strategy: &'static str,
        gearing: Gearing,
        gear_min: u32,
        demand: &[f64],
        measured: std::ops::Range<usize>,
        config: &StudyConfig,
    ) -> PowerRow {
        let interval = config.interval_s() as f64;
        let (from, to) = (measured.start as f64 * interval, measured.end as f64 * interval);
        let (mut energy, mut overloaded, mut unserved) = (0.0, 0.0, 0.0);
        for (i, step) in self.steps.iter().enumerate() {
            let next = self.steps.get(i + 1).map_or(to, |s| s.0);
            let (start, end) = (step.0.max(from), next.min(to));
            if end <= start {
                continue;
            }
            // Split the step at interval boundaries: the demand is constant within one.
            let mut t = start;
            while t < end {
                let k = (t / interval) as usize;
                let until = ((k + 1) as f64 * interval).min(end);
                let short = demand[k] - f64::from(step.2);
                if short > 1e-9 {
                    overloaded += until - t;
                    unserved += short * (until - t);
                }
                energy += f64::from(step.1) * (until - t);
                t = until;
            }
        }
        let total_demand: f64 = demand[measured.clone()].iter().sum::<f64>() * interval;
        let span = to - from;
        let servers = f64::from(config.servers);
        PowerRow {
            strategy,
            gearing: gearing.name(),
            gear_min,
            power_share: energy / (servers * span),
            overloaded_time_share: overloaded / span,
            unserved_share: if total_demand > 0.0 { unserved / total_demand } else { 0.0 },
            shifts: self.shifts,
        }
    }
}

/// The oracle: each interval's own N_load, on (and awake) from its first second.
fn oracle_run(demand: &[f64], config: &StudyConfig, gearing: Gearing, gear_min: u32) -> Run {
    let sizes = even_sizes(config.servers, config.replicas);
    let mut steps: Vec<(f64, u32, u32)> = Vec::new();
    let mut shifts = 0;
    for (k, &d) in demand.iter().enumerate() {
        let on = plan_for(servers_needed(d), &sizes, gearing, gear_min).servers_on(&sizes);
        if steps.last().is_none_or(|s| s.1 != on) {
            shifts += u64::from(!steps.is_empty());
            steps.push(((k as u64 * config.interval_s()) as f64, on, on));
        }
    }
    Run { steps, shifts }
}

/// The core's scheduler on the series: one measured second at each interval's start.
fn scheduler_run(
    loads: &[Load],
    capability: Capability,
    config: &StudyConfig,
    gearing: Gearing,
    gear_min: u32,
    policy: Policy,
    margin: f64,
) -> Run {
    let interval = config.interval_s();
    let sizes = even_sizes(config.servers, config.replicas);
    let heartbeat = ClusterConfig::sierra().heartbeat_interval;
    let leads = LeadTimes::of(config.wake, heartbeat, VirtualDuration::from_secs(interval));
    let scheduler_config = SchedulerConfig {
        replicas: config.replicas,
        group_sizes: sizes.clone(),
        capability,
        gearing,
        gear_min,
        policy,
        interval: VirtualDuration::from_secs(interval),
        day: VirtualDuration::from_secs(DAY_S),
        origin: VirtualInstant::ZERO,
        wake_lead: leads.wake_lead,
        report_delay: leads.report_delay,
        headroom: config.headroom,
        dwell: config.dwell,
        quiet_intervals: config.quiet_intervals,
        forecast_margin: margin,
    };
    let mut scheduler = GearScheduler::new(scheduler_config, VirtualInstant::ZERO);
    let all = sizes.iter().sum::<u32>();
    let mut steps = vec![(0.0, all, all)];
    let wake = config.wake.as_secs_f64();
    let at = |s: f64| {
        VirtualInstant::ZERO
            .saturating_add(VirtualDuration::try_from_secs_f64(s).unwrap_or(VirtualDuration::MAX))
    };
    let record = |scheduler: &mut GearScheduler, steps: &mut Vec<(f64, u32, u32)>| {
        while let Some(decision) = scheduler.poll_decision() {
            let t = decision.at.as_secs_f64();
            let on = decision.plan.servers_on(&sizes);
            // A wake not over yet when the plan changes again ends with this change.
            while steps.last().is_some_and(|s| s.0 > t) {
                steps.pop();
            }
            let serving = steps.last().map_or(on, |s| s.2);
            if on > serving {
                // Woken servers draw power at once and serve after their wake.
                steps.push((t, on, serving));
                steps.push((t + wake, on, on));
            } else {
                steps.push((t, on, on));
            }
        }
    };
    for (k, load) in loads.iter().enumerate() {
        let start = (k as u64 * interval) as f64;
        scheduler.handle_timeout(at(start + 0.5));
        record(&mut scheduler, &mut steps);
        scheduler.report(at(start + 0.5), k as u64 * interval, *load);
        let end = at(((k as u64 + 1) * interval) as f64 - 0.001);
        loop {
            let next = scheduler.poll_timeout();
            if next > end {
                break;
            }
            scheduler.handle_timeout(next);
            record(&mut scheduler, &mut steps);
        }
    }
    let counters = scheduler.counters();
    Run { steps, shifts: counters.shifts_up + counters.shifts_down }
}

/// The mean over the workloads studied, as Sierra's figures are read.
#[derive(Debug, serde::Serialize)]
pub struct Mean {
    pub workloads: usize,
    pub rms_after_one_day: f64,
    pub gear_correct_share: f64,
    pub bound: f64,
    pub power: Vec<PowerRow>,
    pub hybrid_against_predictor: Vec<AgainstPredictor>,
}

/// The hybrid beside the predictor that serves as well, for one gearing and g_min,
/// over the workloads where some margin did (the others: the predictor cannot).
#[derive(Debug, serde::Serialize)]
pub struct AgainstPredictor {
    pub gearing: &'static str,
    pub gear_min: u32,
    pub workloads_matched: usize,
    /// None (null) when no workload matched.
    pub hybrid_power_share: Option<f64>,
    pub predictor_power_share: Option<f64>,
}

impl Mean {
    pub fn of(studies: &[WorkloadStudy]) -> Mean {
        let n = studies.len() as f64;
        let avg = |f: &dyn Fn(&WorkloadStudy) -> f64| studies.iter().map(f).sum::<f64>() / n;
        let power = (0..studies[0].power.len())
            .map(|i| {
                let first = &studies[0].power[i];
                PowerRow {
                    strategy: first.strategy,
                    gearing: first.gearing,
                    gear_min: first.gear_min,
                    power_share: avg(&|s| s.power[i].power_share),
                    overloaded_time_share: avg(&|s| s.power[i].overloaded_time_share),
                    unserved_share: avg(&|s| s.power[i].unserved_share),
                    shifts: studies.iter().map(|s| s.power[i].shifts).sum(),
                }
            })
            .collect();
        let hybrid_against_predictor = (0..studies[0].predictor_at_hybrid_latency.len())
            .map(|i| {
                let first = &studies[0].predictor_at_hybrid_latency[i];
                let matched: Vec<&WorkloadStudy> = studies
                    .iter()
                    .filter(|s| s.predictor_at_hybrid_latency[i].power_share.is_finite())
                    .collect();
                let m = matched.len().max(1) as f64;
                let hybrid = |s: &&WorkloadStudy| {
                    s.power
                        .iter()
                        .find(|r| {
                            r.strategy == "hybrid"
                                && r.gearing == first.gearing
                                && r.gear_min == first.gear_min
                        })
                        .map_or(0.0, |r| r.power_share)
                };
                AgainstPredictor {
                    gearing: first.gearing,
                    gear_min: first.gear_min,
                    workloads_matched: matched.len(),
                    hybrid_power_share: (!matched.is_empty())
                        .then(|| matched.iter().map(hybrid).sum::<f64>() / m),
                    predictor_power_share: (!matched.is_empty()).then(|| {
                        matched
                            .iter()
                            .map(|s| s.predictor_at_hybrid_latency[i].power_share)
                            .sum::<f64>()
                            / m
                    }),
                }
            })
            .collect();
        Mean {
            hybrid_against_predictor,
            workloads: studies.len(),
            rms_after_one_day: avg(&|s| s.rms_by_training_days.first().copied().unwrap_or(0.0)),
            gear_correct_share: avg(&|s| s.gear_errors.correct_share.unwrap_or(0.0)),
            bound: avg(&|s| s.bound),
            power,
        }
    }
}
