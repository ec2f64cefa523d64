//! The gear scheduler (Sierra 3.5 and the hybrid it names): a sans-IO state machine fed
//! the primaries' per-second loads and the time, deciding how many servers stay on.
//!
//! - Each second's reports are summed across primaries once the second is final
//!   (`report_delay` after it ends); an interval's load is the peak of its seconds,
//!   metric by metric.
//! - The predictor forecasts each interval from the same interval of past days. A rise
//!   is acted on `wake_lead` before the interval starts, so the servers are up in
//!   time; a fall at the interval's start.
//! - The hybrid adds a reactive part: a second whose load exceeds what the servers on
//!   serve shifts up at once, with `headroom` above that load, and holds for `dwell`.
//!   A down-shift below the forecast needs `quiet_intervals` intervals in a row
//!   measured below their forecast: one quiet interval never shifts down.
//! - An operator may hold the current plan or set a gear; `auto` gives control back.

use std::collections::{BTreeMap, VecDeque};

use somnus_types::{VirtualDuration, VirtualInstant};

use super::load::{Capability, Load, servers_needed};
use super::plan::{Gearing, PowerPlan, group_order, plan_for};
use super::predictor::HourOfDay;

/// Which scheduler decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Sierra's: the hour-of-day forecast alone.
    Predictor,
    /// The forecast, corrected by what is measured (flash crowds, holidays).
    Hybrid,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Predictor => "predictor",
            Policy::Hybrid => "hybrid",
        }
    }
}

/// The operator's override (`somnus gear set N|auto|hold`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GearMode {
    /// The scheduler decides.
    Auto,
    /// Nothing changes until the operator says otherwise.
    Hold,
    /// Gear N (N whole gear groups on), fixed.
    Set(u32),
}

#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// r: gear groups, and how many times a write is counted.
    pub replicas: u32,
    /// Servers per gear group, by gear group id.
    pub group_sizes: Vec<u32>,
    pub capability: Capability,
    pub gearing: Gearing,
    pub gear_min: u32,
    pub policy: Policy,
    /// The gearing timescale (Sierra: 1 hour).
    pub interval: VirtualDuration,
    /// A day: the predictor's period. A whole number of intervals.
    pub day: VirtualDuration,
    /// The instant a day (and interval 0) starts: on a whole second of the clock,
    /// as the loads' seconds are.
    pub origin: VirtualInstant,
    /// How long a server takes to wake: a rise is acted on this much ahead.
    pub wake_lead: VirtualDuration,
    /// How late a primary's report of a second may arrive and still count.
    pub report_delay: VirtualDuration,
    /// A reactive up-shift provisions this share above the measured load.
    pub headroom: f64,
    /// How long a reactive up-shift holds at least, and a surprise keeps it.
    pub dwell: VirtualDuration,
    /// Intervals in a row measured below forecast before the hybrid forecasts lower.
    pub quiet_intervals: u32,
    /// Every forecast times 1 + this: a margin for what the forecast misses (Sierra:
    /// 0). A predictor with a margin is how the predictor alone buys latency.
    pub forecast_margin: f64,
}

/// The scheduler's lead times on a cluster whose servers take `wake` to wake and
/// heartbeat every `heartbeat`, gearing every `interval`: the one rule every shell
/// uses (the runtime's MDS, the simulations, the gear study).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeadTimes {
    /// A rise is made early enough for the wake and two heartbeats after it (the
    /// first may leave just before the server is counted on), within the interval.
    pub wake_lead: VirtualDuration,
    /// A second's load reaches the MDS with the heartbeats after it: the second
    /// heartbeat at the latest.
    pub report_delay: VirtualDuration,
}

impl LeadTimes {
    pub fn of(
        wake: VirtualDuration,
        heartbeat: VirtualDuration,
        interval: VirtualDuration,
    ) -> LeadTimes {
        let two_heartbeats = heartbeat + heartbeat;
        // Both shorter than the interval, as `SchedulerConfig::validate` asks.
        let below_interval = interval.saturating_sub(VirtualDuration::from_secs(1));
        LeadTimes {
            wake_lead: (wake + two_heartbeats).min(below_interval),
            report_delay: two_heartbeats.min(below_interval),
        }
    }
}

impl SchedulerConfig {
    /// An error naming the first field out of range.
    pub fn validate(&self) -> Result<(), String> {
        self.capability.validate().map_err(|e| format!("capability.{e}"))?;
        if self.replicas == 0 || self.group_sizes.len() != self.replicas as usize {
            return Err(format!(
                "group_sizes: {} gear groups for {} replicas",
                self.group_sizes.len(),
                self.replicas
            ));
        }
        if self.interval < VirtualDuration::from_secs(1) {
            return Err("interval: at least 1 s".into());
        }
        // Loads come by whole seconds of the clock: a second across an interval's
        // start would count toward the interval before it.
        if !self.interval.as_nanos().is_multiple_of(NANOS_PER_SECOND) {
            return Err(format!(
                "interval: {} s is not whole seconds",
                self.interval.as_secs_f64()
            ));
        }
        if !self.origin.as_nanos().is_multiple_of(NANOS_PER_SECOND) {
            return Err(format!(
                "origin: {} s is not on a whole second of the clock",
                self.origin.as_nanos() as f64 / NANOS_PER_SECOND as f64
            ));
        }
        if !self.day.as_nanos().is_multiple_of(self.interval.as_nanos()) || self.day < self.interval
        {
            return Err(format!(
                "interval: {} s does not divide a day of {} s",
                self.interval.as_secs_f64(),
                self.day.as_secs_f64()
            ));
        }
        if !(self.forecast_margin.is_finite() && self.forecast_margin >= 0.0) {
            return Err(format!("forecast_margin {} must be >= 0", self.forecast_margin));
        }
        if !(self.headroom.is_finite() && (0.0..=1.0).contains(&self.headroom)) {
            return Err(format!("headroom {} must be within 0..=1", self.headroom));
        }
        if self.wake_lead >= self.interval {
            return Err("wake_lead: must be shorter than interval".into());
        }
        if self.report_delay >= self.interval {
            return Err("report_delay: must be shorter than interval".into());
        }
        if self.quiet_intervals < 2 {
            return Err(format!(
                "quiet_intervals {}: at least 2 (one quiet interval never shifts down)",
                self.quiet_intervals
            ));
        }
        if self.gear_min == 0 || self.gear_min > self.replicas {
            return Err(format!("gear_min {} must be within 1..={}", self.gear_min, self.replicas));
        }
        Ok(())
    }
}

/// Why a plan changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// The forecast of the next interval.
    Forecast,
    /// A measured second above what the servers on serve.
    Reactive,
    /// The operator.
    Override,
    /// A new day's order of gear groups, taken while every group is on; or, on a day
    /// that had none by its midpoint, the next leader woken and then the order turned.
    Rotation,
}

/// A plan to apply: the gear groups in the order they stay on, and how many.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub at: VirtualInstant,
    pub plan: PowerPlan,
    /// Gear group ids, first on first.
    pub order: Vec<u32>,
    pub reason: Reason,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SchedulerCounters {
    pub shifts_up: u64,
    pub shifts_down: u64,
    pub reactive_shifts: u64,
    pub rotations: u64,
    /// Reports of a second already final, or malformed: dropped.
    pub late_reports: u64,
}

#[derive(Clone, Debug)]
pub struct GearScheduler {
    config: SchedulerConfig,
    predictor: HourOfDay,
    mode: GearMode,
    plan: PowerPlan,
    /// How many times the order rotated, and the day it last did.
    rotation: u64,
    rotated_day: u64,
    /// A day's overdue rotation has the next leader on; the order turns at the next
    /// fall.
    next_leader_woken: bool,
    /// Seconds reported and not final: second to summed load.
    seconds: BTreeMap<u64, Load>,
    /// Seconds before this one are final.
    final_before: u64,
    /// Per interval not yet observed, the peak of its final seconds.
    peaks: BTreeMap<u64, Load>,
    /// Intervals before this one are observed by the predictor.
    closed_before: u64,
    /// The interval whose rise was decided (at its lead time); its fall waits in
    /// `pending` for its start.
    decided: u64,
    pending: Option<PowerPlan>,
    /// The interval now under way.
    current: u64,
    /// The forecast (servers) each interval was planned on, for the hybrid's check.
    forecasts: BTreeMap<u64, f64>,
    /// The last intervals' measured / forecast, newest last.
    ratios: VecDeque<f64>,
    /// The last `quiet_intervals` closed intervals' measured demand, newest last: the
    /// hybrid's forecast where the predictor has no history yet.
    recent: VecDeque<f64>,
    /// The demand of the last final second.
    last_demand: f64,
    /// A reactive shift or a surprise holds the plan up until then.
    hold_until: VirtualInstant,
    decisions: VecDeque<Decision>,
    counters: SchedulerCounters,
}

impl GearScheduler {
    /// A scheduler starting at `now` with every server on (no history yet).
    pub fn new(config: SchedulerConfig, now: VirtualInstant) -> GearScheduler {
        let slots = (config.day.as_nanos() / config.interval.as_nanos().max(1)) as u32;
        let mut scheduler = GearScheduler {
            predictor: HourOfDay::new(slots),
            mode: GearMode::Auto,
            plan: PowerPlan::all(&config.group_sizes),
            rotation: 0,
            rotated_day: 0,
            next_leader_woken: false,
            seconds: BTreeMap::new(),
            final_before: 0,
            peaks: BTreeMap::new(),
            closed_before: 0,
            decided: 0,
            pending: None,
            current: 0,
            forecasts: BTreeMap::new(),
            ratios: VecDeque::new(),
            recent: VecDeque::new(),
            last_demand: 0.0,
            hold_until: VirtualInstant::ZERO,
            decisions: VecDeque::new(),
            counters: SchedulerCounters::default(),
            config,
        };
        let current = scheduler.interval_of(now);
        scheduler.current = current;
        scheduler.decided = current;
        scheduler.closed_before = current;
        scheduler.final_before = now.as_nanos() / NANOS_PER_SECOND;
        scheduler.rotated_day = current / scheduler.predictor.slots();
        scheduler
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    pub fn plan(&self) -> PowerPlan {
        self.plan
    }

    pub fn mode(&self) -> GearMode {
        self.mode
    }

    /// Gear group ids in today's order, first on first.
    pub fn order(&self) -> Vec<u32> {
        group_order(self.rotation, self.config.replicas)
    }

    pub fn counters(&self) -> SchedulerCounters {
        self.counters
    }

    /// The predictor's forecast of interval `index`, in servers.
    pub fn forecast(&self, index: u64) -> Option<f64> {
        self.predictor.predict(index)
    }

    /// A primary's load in `second` (whole seconds of the cluster's clock).
    /// A report of a second already final, of a second not yet begun at `now` (a
    /// primary's clock ahead by more than the report delay), or with a rate that is
    /// not a finite number >= 0 is counted and dropped.
    pub fn report(&mut self, now: VirtualInstant, second: u64, load: Load) {
        let latest = (now.as_nanos() + self.config.report_delay.as_nanos()) / NANOS_PER_SECOND;
        if second < self.final_before || second > latest || !load.is_valid() {
            self.counters.late_reports += 1;
            return;
        }
        let sum = self.seconds.entry(second).or_insert(Load::ZERO);
        *sum = sum.plus(load);
    }

    /// A scheduler just made, put back where a restarted MDS's durable state says the
    /// operator left it: `mode`, with the gear groups in the order that leads with
    /// `first`; under `Hold`, the plan `held` (the one restored). Decisions it makes
    /// are polled as any other.
    pub fn resume(&mut self, now: VirtualInstant, mode: GearMode, held: PowerPlan, first: u32) {
        self.rotation = u64::from(first % self.config.replicas.max(1));
        match mode {
            GearMode::Auto => {}
            GearMode::Hold => {
                self.mode = GearMode::Hold;
                self.apply(now, held, Reason::Override);
            }
            GearMode::Set(_) => self.set_mode(now, mode),
        }
    }

    /// The operator's override, applied at once.
    pub fn set_mode(&mut self, now: VirtualInstant, mode: GearMode) {
        self.handle_timeout(now);
        self.mode = mode;
        self.pending = None;
        self.next_leader_woken = false;
        match mode {
            GearMode::Hold => {}
            GearMode::Set(gear) => {
                let gear = gear.clamp(self.config.gear_min, self.config.replicas);
                self.apply(now, PowerPlan { full_groups: gear, partial: 0 }, Reason::Override);
            }
            GearMode::Auto => {
                // Between a rise's lead time and its interval, the rise stands.
                let mut target = self.target_for(self.current);
                if self.decided > self.current {
                    target = target.max(self.target_for(self.decided));
                }
                self.apply(now, target, Reason::Override);
            }
        }
    }

    /// The next instant `handle_timeout` has work.
    pub fn poll_timeout(&self) -> VirtualInstant {
        self.next_due().0
    }

    /// Does everything due by `now`, in time order.
    pub fn handle_timeout(&mut self, now: VirtualInstant) {
        loop {
            let (at, due) = self.next_due();
            // An instant at the end of time never comes: nothing is due there.
            if at > now || at == VirtualInstant::MAX {
                break;
            }
            match due {
                Due::Close => self.close_interval(),
                Due::Final(second) => self.finalize_through(second, at),
                Due::Enter => self.enter_interval(at),
                Due::Fall => self.fall(at),
                Due::Lead => self.decide_next(at),
            }
        }
        // Every second whose reports were due by `now` is final, reported or not.
        let due = now.as_nanos().saturating_sub(self.config.report_delay.as_nanos());
        self.final_before = self.final_before.max(due / NANOS_PER_SECOND);
    }

    /// The next decision made, oldest first.
    pub fn poll_decision(&mut self) -> Option<Decision> {
        self.decisions.pop_front()
    }

    /// The earliest event and when it is due. Events due at the same instant come
    /// in this order: an interval closes (its seconds are all final), reported
    /// seconds become final, the next interval starts, a fall, a rise's lead time.
    fn next_due(&self) -> (VirtualInstant, Due) {
        let mut next = (self.close_at(self.closed_before), Due::Close);
        let mut consider = |at: VirtualInstant, due: Due| {
            if at < next.0 {
                next = (at, due);
            }
        };
        if let Some((&second, _)) = self.seconds.first_key_value() {
            let second = second.max(self.final_before);
            consider(self.final_at(second), Due::Final(second));
        }
        consider(self.start_of(self.current + 1), Due::Enter);
        if self.pending.is_some() {
            consider(self.fall_at(), Due::Fall);
        }
        consider(self.lead_at(self.decided + 1), Due::Lead);
        next
    }

    /// Interval `closed_before` has ended and all its seconds are final: the predictor
    /// learns its peak, and the hybrid how it compared with the forecast.
    fn close_interval(&mut self) {
        let index = self.closed_before;
        self.closed_before += 1;
        let peak = self.peaks.remove(&index).unwrap_or(Load::ZERO);
        let demand = self.config.capability.demand(&peak, self.config.replicas);
        self.predictor.observe(index, demand);
        self.recent.push_back(demand);
        while self.recent.len() > self.config.quiet_intervals.max(1) as usize {
            self.recent.pop_front();
        }
        if let Some(forecast) = self.forecasts.remove(&index) {
            let ratio = if forecast > 0.0 { demand / forecast } else { 1.0 };
            self.ratios.push_back(ratio);
            while self.ratios.len() > self.config.quiet_intervals.max(1) as usize {
                self.ratios.pop_front();
            }
        } else {
            self.ratios.clear();
        }
    }

    /// Seconds up to `second` are final: they join their interval's peak, and the
    /// hybrid reacts to a load the servers on cannot serve.
    fn finalize_through(&mut self, second: u64, at: VirtualInstant) {
        self.final_before = self.final_before.max(second + 1);
        while let Some((&s, _)) = self.seconds.first_key_value() {
            if s > second {
                break;
            }
            let load = self.seconds.remove(&s).unwrap_or(Load::ZERO);
            let interval = self.interval_of_second(s);
            if interval < self.closed_before {
                self.counters.late_reports += 1;
                continue;
            }
            let peak = self.peaks.entry(interval).or_insert(Load::ZERO);
            *peak = peak.peak(load);
            self.last_demand = self.config.capability.demand(&load, self.config.replicas);
            self.react(at, interval);
        }
    }

    /// The hybrid's reactive part, on a final second of interval `interval`. A second
    /// of an interval already over was served by that interval's plan: not judged
    /// against the next one's.
    fn react(&mut self, at: VirtualInstant, interval: u64) {
        if self.config.policy != Policy::Hybrid
            || self.mode != GearMode::Auto
            || interval != self.current
        {
            return;
        }
        let order = self.ordered_sizes();
        let forecast = self.forecasts.get(&interval).copied();
        let planned_on = forecast
            .map(|f| self.plan_of(servers_needed(f)).servers_on(&order))
            .unwrap_or(u32::MAX);
        if self.last_demand > f64::from(planned_on) {
            // A surprise: more than the forecast's servers serve. Hold up meanwhile.
            self.hold_until = at.saturating_add(self.config.dwell);
        }
        if self.last_demand > f64::from(self.plan.servers_on(&order)) {
            let target = self.with_headroom(self.last_demand);
            if target > self.plan {
                self.counters.reactive_shifts += 1;
                self.hold_until = at.saturating_add(self.config.dwell);
                self.apply(at, target, Reason::Reactive);
            }
        }
    }

    /// `wake_lead` before interval `decided + 1`: a rise is made now, so the servers
    /// are up at its start; a fall waits for the start.
    fn decide_next(&mut self, at: VirtualInstant) {
        self.decided += 1;
        let index = self.decided;
        self.pending = None;
        if self.mode != GearMode::Auto {
            return;
        }
        let target = self.target_for(index);
        if target > self.plan {
            self.apply(at, target, Reason::Forecast);
        } else if target < self.plan {
            self.pending = Some(target);
        }
    }

    /// The next interval starts: a new day rotates the order if every group is on;
    /// at its midpoint, a day that has not rotated yet wakes the group to lead next.
    fn enter_interval(&mut self, at: VirtualInstant) {
        self.current += 1;
        if self.rotate_if_all_on() {
            self.push(at, self.plan, Reason::Rotation);
        } else {
            self.wake_next_leader(at);
        }
    }

    /// A fall waits for its interval's start, and for the end of a hold (a reactive
    /// shift's dwell, or a surprise still measured).
    fn fall_at(&self) -> VirtualInstant {
        self.start_of(self.decided).max(self.hold_until)
    }

    fn fall(&mut self, at: VirtualInstant) {
        let Some(target) = self.pending.take() else { return };
        if self.mode != GearMode::Auto || target >= self.plan {
            return;
        }
        if self.next_leader_woken {
            // The group woken to lead had an interval to take back its logged writes:
            // the order turns, and the old first group sleeps with the fall.
            let day = self.current / self.predictor.slots();
            self.rotate(day);
            self.apply(at, target, Reason::Rotation);
            return;
        }
        self.apply(at, target, Reason::Forecast);
    }

    /// The plan for interval `index` by the policy. Where the predictor has no
    /// history for it (the first day), the predictor keeps every server on; the
    /// hybrid plans on the largest demand of the last `quiet_intervals` intervals and
    /// of the one under way so far (so one quiet interval never shifts it down), once
    /// it has measured that many.
    fn target_for(&mut self, index: u64) -> PowerPlan {
        let Some(forecast) = self.predictor.predict(index) else {
            let k = self.config.quiet_intervals.max(1) as usize;
            if self.config.policy == Policy::Hybrid && self.recent.len() >= k {
                let now = self.peaks.get(&self.current).copied().unwrap_or(Load::ZERO);
                let now = self.config.capability.demand(&now, self.config.replicas);
                let recent = self.recent.iter().copied().fold(now, f64::max);
                self.remember_forecast(index, recent);
                return self.plan_of(servers_needed(recent * (1.0 + self.config.forecast_margin)));
            }
            self.forecasts.remove(&index);
            return PowerPlan::all(&self.config.group_sizes);
        };
        self.remember_forecast(index, forecast);
        let trust = match self.config.policy {
            Policy::Predictor => 1.0,
            Policy::Hybrid => self.trust(),
        };
        self.plan_of(servers_needed(forecast * trust * (1.0 + self.config.forecast_margin)))
    }

    /// The forecast interval `index` is planned on, for the hybrid's checks; the last
    /// few are kept.
    fn remember_forecast(&mut self, index: u64, forecast: f64) {
        self.forecasts.insert(index, forecast);
        while self.forecasts.len() > 4 {
            self.forecasts.pop_first();
        }
    }

    /// How far the hybrid trusts the forecast: the largest of the last
    /// `quiet_intervals` ratios of measured to forecast (the interval under way
    /// counting with its peak so far), if all were below 1.
    fn trust(&self) -> f64 {
        let k = self.config.quiet_intervals.max(1) as usize;
        let mut recent: Vec<f64> = self.ratios.iter().copied().collect();
        if let Some(&forecast) = self.forecasts.get(&self.current) {
            let peak = self.peaks.get(&self.current).copied().unwrap_or(Load::ZERO);
            let demand = self.config.capability.demand(&peak, self.config.replicas);
            recent.push(if forecast > 0.0 { demand / forecast } else { 1.0 });
        }
        if recent.len() < k {
            return 1.0;
        }
        let largest = recent[recent.len() - k..].iter().copied().fold(0.0_f64, f64::max);
        largest.min(1.0)
    }

    fn with_headroom(&self, demand: f64) -> PowerPlan {
        self.plan_of(servers_needed(demand * (1.0 + self.config.headroom)))
    }

    fn plan_of(&self, needed: u32) -> PowerPlan {
        plan_for(needed, &self.ordered_sizes(), self.config.gearing, self.config.gear_min)
    }

    /// Group sizes in today's order.
    fn ordered_sizes(&self) -> Vec<u32> {
        self.order().iter().map(|&g| self.config.group_sizes[g as usize]).collect()
    }

    fn apply(&mut self, at: VirtualInstant, plan: PowerPlan, reason: Reason) {
        if plan == self.plan {
            return;
        }
        if plan > self.plan {
            self.counters.shifts_up += 1;
        } else {
            self.counters.shifts_down += 1;
        }
        self.plan = plan;
        self.rotate_if_all_on();
        self.push(at, plan, reason);
    }

    /// A new day's order of gear groups, taken only while every group is on, so it
    /// wakes nobody. A day that never reaches the top gear keeps the last order.
    fn rotate_if_all_on(&mut self) -> bool {
        let day = self.current / self.predictor.slots();
        if day <= self.rotated_day || self.plan != PowerPlan::all(&self.config.group_sizes) {
            return false;
        }
        self.rotate(day);
        true
    }

    /// A day half over without its rotation (it never had every group on), and not
    /// forecast to have every group on in the rest of it, rotates in two steps: now
    /// the group to lead next wakes (gear 2, if below), and at the next fall the order
    /// turns, so the old first group drains to a group that
    /// had an interval to take back the writes logged while it slept, rather than to
    /// one that would serve its reads from the loggers. Without the rotation, a load
    /// that never reaches the top gear keeps the same groups asleep for the whole run:
    /// their idle time never evens out, and the writes logged for them are reclaimed
    /// only when the loggers fill (two days of msr-fast08 on 30 servers). An
    /// operator's hold or set gear is left alone.
    fn wake_next_leader(&mut self, at: VirtualInstant) {
        let slots = self.predictor.slots();
        let (day, slot) = (self.current / slots, self.current % slots);
        let overdue = day > self.rotated_day && slot >= slots / 2;
        if self.mode != GearMode::Auto
            || !overdue
            || self.next_leader_woken
            || self.config.replicas < 2
        {
            return;
        }
        // A rest of the day forecast to reach the top gear rotates then, for free (a
        // slot without a forecast might too).
        let all = PowerPlan::all(&self.config.group_sizes);
        let margin = 1.0 + self.config.forecast_margin;
        let top_ahead = (slot..slots).any(|s| {
            let forecast = self.predictor.predict(day * slots + s);
            forecast.is_none_or(|f| self.plan_of(servers_needed(f * margin)) == all)
        });
        if top_ahead {
            return;
        }
        self.next_leader_woken = true;
        if self.plan.full_groups < 2 {
            self.apply(at, PowerPlan { full_groups: 2, partial: 0 }, Reason::Rotation);
        }
    }

    fn rotate(&mut self, day: u64) {
        self.next_leader_woken = false;
        self.rotated_day = day;
        self.rotation += 1;
        self.counters.rotations += 1;
    }

    fn push(&mut self, at: VirtualInstant, plan: PowerPlan, reason: Reason) {
        self.decisions.push_back(Decision { at, plan, order: self.order(), reason });
    }

    fn interval_of(&self, at: VirtualInstant) -> u64 {
        at.saturating_duration_since(self.config.origin).as_nanos()
            / self.config.interval.as_nanos()
    }

    fn interval_of_second(&self, second: u64) -> u64 {
        let nanos = second.saturating_mul(NANOS_PER_SECOND);
        self.interval_of(VirtualInstant::ZERO.saturating_add(VirtualDuration::from_nanos(nanos)))
    }

    fn start_of(&self, index: u64) -> VirtualInstant {
        let nanos = self.config.interval.as_nanos().saturating_mul(index);
        self.config.origin.saturating_add(VirtualDuration::from_nanos(nanos))
    }

    fn lead_at(&self, index: u64) -> VirtualInstant {
        let start = self.start_of(index).as_nanos();
        let lead = start.saturating_sub(self.config.wake_lead.as_nanos());
        VirtualInstant::ZERO.saturating_add(VirtualDuration::from_nanos(lead))
    }

    /// Interval `index` is observed once its last second is final.
    fn close_at(&self, index: u64) -> VirtualInstant {
        self.start_of(index + 1)
            .saturating_add(self.config.report_delay)
            .saturating_add(VirtualDuration::from_secs(1))
    }

    fn final_at(&self, second: u64) -> VirtualInstant {
        let end = second.saturating_add(1).saturating_mul(NANOS_PER_SECOND);
        VirtualInstant::ZERO
            .saturating_add(VirtualDuration::from_nanos(end))
            .saturating_add(self.config.report_delay)
    }
}

const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// What `handle_timeout` does next.
#[derive(Clone, Copy, Debug)]
enum Due {
    Close,
    /// Reported seconds up to this one become final.
    Final(u64),
    Enter,
    Fall,
    Lead,
}
