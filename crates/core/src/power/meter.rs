//! The energy meter: integrates a unit's watts over the states it held, adds the
//! energy of its transitions, and can spread the result over fixed time windows so
//! that peak power is measured the same way for every configuration.
//!
//! Accounting is exact: power is in microwatts, time in nanoseconds, energy in
//! femtojoules, all integers. A transition's energy is spread evenly over its duration
//! (so a reading in the middle of a spin-up is pro-rated), and the remainder of the
//! integer division is credited when the transition completes, so the total over a
//! whole transition is exactly the profile's figure.

use somnus_types::{Energy, Power, VirtualDuration, VirtualInstant};

use super::profile::{PowerProfile, PowerState, Transition};

/// The upper bound on the number of windows a timeline may hold (a year of one-second
/// windows), so a mistaken window size fails loudly instead of exhausting memory.
const TIMELINE_WINDOWS_MAX: u64 = 366 * 24 * 3600;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Steady(PowerState),
    Transition { transition: Transition, started: VirtualInstant, energy_accounted: Energy },
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum MeterError {
    #[error("no transition from {from:?} to {to:?} in profile {profile}")]
    NoTransition { profile: String, from: PowerState, to: PowerState },
    #[error("a transition is already under way")]
    InTransition,
}

/// A snapshot of what a meter has accounted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MeterReading {
    pub energy: Energy,
    /// Time spent in each steady state, indexed by [`PowerState::index`]; time in
    /// [`PowerState::Active`] is the busy time added with [`EnergyMeter::add_busy`].
    pub state_time: [VirtualDuration; 5],
    pub transition_time: VirtualDuration,
    /// Completed standby-to-idle transitions.
    pub spin_ups: u64,
    /// Completed idle-to-standby transitions.
    pub spin_downs: u64,
}

impl MeterReading {
    /// What was accounted between `earlier` (a reading of the same meter) and this one.
    pub fn since(&self, earlier: &MeterReading) -> MeterReading {
        let mut state_time = self.state_time;
        for (time, before) in state_time.iter_mut().zip(earlier.state_time) {
            *time = time.saturating_sub(before);
        }
        MeterReading {
            energy: self.energy - earlier.energy,
            state_time,
            transition_time: self.transition_time.saturating_sub(earlier.transition_time),
            spin_ups: self.spin_ups - earlier.spin_ups,
            spin_downs: self.spin_downs - earlier.spin_downs,
        }
    }
}

/// Energy per window of time, for mean and peak power.
///
/// The span is cut into windows of `window`, from its start; the last window also takes
/// the rest of the span, so every window lasts at least `window` (a span shorter than
/// one window is a single window of the span's length). Peak power is the highest mean
/// power over a window's own length, so it is never below the span's mean power and a
/// partial minute is never divided by a whole one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PowerTimeline {
    origin: VirtualInstant,
    span: VirtualDuration,
    window: VirtualDuration,
    windows: Vec<Energy>,
}

impl PowerTimeline {
    /// A timeline covering `[origin, origin + span)` in windows of `window`.
    pub fn new(
        origin: VirtualInstant,
        span: VirtualDuration,
        window: VirtualDuration,
    ) -> PowerTimeline {
        assert!(window.as_nanos() > 0, "window must be positive");
        assert!(span.as_nanos() > 0, "a timeline must cover some time");
        let count = (span.as_nanos() / window.as_nanos()).max(1);
        assert!(count <= TIMELINE_WINDOWS_MAX, "timeline of {count} windows exceeds the bound");
        PowerTimeline { origin, span, window, windows: vec![Energy::ZERO; count as usize] }
    }

    pub fn window(&self) -> VirtualDuration {
        self.window
    }

    pub fn windows(&self) -> &[Energy] {
        &self.windows
    }

    /// The window holding `at`, or `None` outside the span.
    pub fn window_index(&self, at: VirtualInstant) -> Option<usize> {
        let since = at.as_nanos().checked_sub(self.origin.as_nanos())?;
        if since >= self.span.as_nanos() {
            return None;
        }
        let index = (since / self.window.as_nanos()) as usize;
        Some(index.min(self.windows.len() - 1))
    }

    /// The length of window `index` (the last one takes the rest of the span).
    pub fn window_length(&self, index: usize) -> VirtualDuration {
        assert!(index < self.windows.len(), "window {index} of {}", self.windows.len());
        let (start, end) = self.window_bounds(index);
        VirtualDuration::from_nanos(end - start)
    }

    /// Window `index` as nanoseconds since the origin: `[start, end)`.
    fn window_bounds(&self, index: usize) -> (u64, u64) {
        let start = index as u64 * self.window.as_nanos();
        let last = index + 1 == self.windows.len();
        let end = if last { self.span.as_nanos() } else { start + self.window.as_nanos() };
        (start, end)
    }

    /// Adds `energy` spread evenly over `[start, end)`. The parts of the interval
    /// outside the timeline's span are dropped (a warm-up before it, a drain after),
    /// so the timeline holds exactly the energy of its span.
    pub fn add(&mut self, start: VirtualInstant, end: VirtualInstant, energy: Energy) {
        assert!(start <= end, "interval ends before it starts");
        if energy == Energy::ZERO {
            return;
        }
        if start == end {
            if let Some(index) = self.window_index(start) {
                self.windows[index] += energy;
            }
            return;
        }
        let origin = self.origin.as_nanos();
        let span_end = origin + self.span.as_nanos();
        let (start, end) = (start.as_nanos(), end.as_nanos());
        let (inside_start, inside_end) = (start.max(origin), end.min(span_end));
        if inside_start >= inside_end {
            return;
        }
        let total_nanos = u128::from(end - start);
        // energy * nanoseconds grows as power x time^2 and overflows u128 for an
        // interval of weeks: split the energy into a quotient and a remainder first.
        let (per_nano, remainder) = (energy.0 / total_nanos, energy.0 % total_nanos);
        let share_of = |nanos: u64| {
            Energy(per_nano * u128::from(nanos) + remainder * u128::from(nanos) / total_nanos)
        };
        let inside = share_of(inside_end - inside_start);
        let index_of = |at: u64| {
            let index = ((at - origin) / self.window.as_nanos()) as usize;
            index.min(self.windows.len() - 1)
        };
        let (first, last) = (index_of(inside_start), index_of(inside_end - 1));
        let mut credited = Energy::ZERO;
        for index in first..last {
            let (window_start, window_end) = self.window_bounds(index);
            let overlap = origin + window_end - inside_start.max(origin + window_start);
            let share = share_of(overlap);
            self.windows[index] += share;
            credited += share;
        }
        // The last window takes the rounding remainder, so a wholly inside interval
        // adds exactly its energy.
        let remainder = if start >= origin && end <= span_end { energy } else { inside };
        self.windows[last] += remainder - credited;
    }

    /// Adds another timeline of the same shape window by window.
    pub fn accumulate(&mut self, other: &PowerTimeline) {
        assert_eq!(self.window, other.window, "timelines differ in window");
        assert_eq!(self.span, other.span, "timelines differ in span");
        assert_eq!(self.windows.len(), other.windows.len(), "timelines differ in windows");
        for (mine, theirs) in self.windows.iter_mut().zip(&other.windows) {
            *mine += *theirs;
        }
    }

    /// The highest mean power of a window, each over its own length, in watts.
    pub fn peak_watts(&self) -> f64 {
        (0..self.windows.len())
            .map(|index| self.windows[index].mean_power_watts(self.window_length(index)))
            .fold(0.0, f64::max)
    }

    pub fn total(&self) -> Energy {
        self.windows.iter().fold(Energy::ZERO, |sum, e| sum + *e)
    }
}

/// Integrates the power of `units` identical devices that always change state together
/// (the disks of one array, as in the Write Off-Loading paper).
///
/// Call protocol: the owner calls [`EnergyMeter::advance`] (or any method taking `now`)
/// with non-decreasing times. Busy time is reported by [`EnergyMeter::add_busy`], and
/// charged at active minus idle watts on top of the steady state.
#[derive(Clone, Debug)]
pub struct EnergyMeter {
    watts: [Power; 5],
    up: Transition,
    down: Transition,
    profile_name: String,
    units: u32,
    phase: Phase,
    since: VirtualInstant,
    reading: MeterReading,
    timeline: Option<PowerTimeline>,
}

impl EnergyMeter {
    pub fn new(
        profile: &PowerProfile,
        units: u32,
        state: PowerState,
        now: VirtualInstant,
    ) -> EnergyMeter {
        assert!(units > 0, "a meter measures at least one unit");
        assert!(state != PowerState::Active, "a unit starts idle or in standby");
        let find = |from, to| profile.transition(from, to);
        // Validated profiles always have both transitions; an invalid one is a bug.
        let (Some(up), Some(down)) = (
            find(PowerState::Standby, PowerState::Idle),
            find(PowerState::Idle, PowerState::Standby),
        ) else {
            panic!("profile {} lacks a spin transition", profile.name);
        };
        EnergyMeter {
            watts: PowerState::EVERY.map(|s| profile.watts(s)),
            up,
            down,
            profile_name: profile.name.clone(),
            units,
            phase: Phase::Steady(state),
            since: now,
            reading: MeterReading::default(),
            timeline: None,
        }
    }

    /// Also record energy per window into `timeline`.
    pub fn with_timeline(mut self, timeline: PowerTimeline) -> EnergyMeter {
        self.timeline = Some(timeline);
        self
    }

    pub fn timeline(&self) -> Option<&PowerTimeline> {
        self.timeline.as_ref()
    }

    /// The steady state, or `None` during a transition.
    pub fn state(&self) -> Option<PowerState> {
        match self.phase {
            Phase::Steady(state) => Some(state),
            Phase::Transition { .. } => None,
        }
    }

    /// When the transition under way ends, if any.
    pub fn transition_end(&self) -> Option<VirtualInstant> {
        match self.phase {
            Phase::Steady(_) => None,
            Phase::Transition { transition, started, .. } => Some(started + transition.duration),
        }
    }

    /// Accounts everything up to `now`, completing a transition that has ended.
    pub fn advance(&mut self, now: VirtualInstant) {
        assert!(now >= self.since, "meter time went backwards: {now:?} < {:?}", self.since);
        if let Phase::Transition { transition, started, energy_accounted } = self.phase {
            let end = started + transition.duration;
            if now < end {
                let elapsed = now.duration_since(started).as_nanos();
                let due = self.transition_energy(transition, elapsed);
                self.charge(self.since, now, due - energy_accounted);
                self.reading.transition_time += now.duration_since(self.since);
                self.phase = Phase::Transition { transition, started, energy_accounted: due };
                self.since = now;
                return;
            }
            let rest = self.scale(transition.energy) - energy_accounted;
            self.charge(self.since, end, rest);
            self.reading.transition_time += end.duration_since(self.since);
            if transition.to == PowerState::Idle {
                self.reading.spin_ups += 1;
            } else {
                self.reading.spin_downs += 1;
            }
            self.phase = Phase::Steady(transition.to);
            self.since = end;
        }
        let Phase::Steady(state) = self.phase else { unreachable!("transition completed above") };
        let span = now.duration_since(self.since);
        let energy = self.scale(self.watts[state.index()].over(span));
        self.charge(self.since, now, energy);
        self.reading.state_time[state.index()] += span;
        self.since = now;
    }

    /// Starts the transition to `to` (idle or standby); returns how long it takes.
    pub fn begin_transition(
        &mut self,
        now: VirtualInstant,
        to: PowerState,
    ) -> Result<VirtualDuration, MeterError> {
        self.advance(now);
        let Phase::Steady(from) = self.phase else {
            return Err(MeterError::InTransition);
        };
        let transition = match (from, to) {
            (PowerState::Idle, PowerState::Standby) => self.down,
            (PowerState::Standby, PowerState::Idle) => self.up,
            _ => {
                return Err(MeterError::NoTransition {
                    profile: self.profile_name.clone(),
                    from,
                    to,
                });
            }
        };
        self.phase = Phase::Transition { transition, started: now, energy_accounted: Energy::ZERO };
        if transition.duration == VirtualDuration::ZERO {
            self.advance(now);
        }
        Ok(transition.duration)
    }

    /// Charges `busy` of I/O starting at `start` at active minus idle watts. Busy time may
    /// lie in the future of the last `advance` (a disk schedules service ahead).
    pub fn add_busy(&mut self, start: VirtualInstant, busy: VirtualDuration) {
        if self.watts[PowerState::Active.index()] == self.watts[PowerState::Idle.index()] {
            // Profiles that do not charge I/O (004 Table 3) skip the bookkeeping.
            self.reading.state_time[PowerState::Active.index()] += busy;
            return;
        }
        let extra =
            self.watts[PowerState::Active.index()].0 - self.watts[PowerState::Idle.index()].0;
        let energy = Power(extra).over(busy);
        self.reading.state_time[PowerState::Active.index()] += busy;
        self.charge(start, start + busy, energy);
    }

    /// The meter's totals up to `now`.
    pub fn reading(&mut self, now: VirtualInstant) -> MeterReading {
        self.advance(now);
        self.reading
    }

    fn transition_energy(&self, transition: Transition, elapsed_nanos: u64) -> Energy {
        let total = self.scale(transition.energy);
        let duration = u128::from(transition.duration.as_nanos());
        if duration == 0 {
            return total;
        }
        Energy(total.0 * u128::from(elapsed_nanos) / duration)
    }

    fn scale(&self, energy: Energy) -> Energy {
        Energy(energy.0 * u128::from(self.units))
    }

    fn charge(&mut self, start: VirtualInstant, end: VirtualInstant, energy: Energy) {
        self.reading.energy += energy;
        if let Some(timeline) = &mut self.timeline {
            timeline.add(start, end, energy);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::power::builtin_profile;

    fn at(secs: u64) -> VirtualInstant {
        VirtualInstant::ZERO + VirtualDuration::from_secs(secs)
    }

    fn joules(j: u64) -> Energy {
        Energy(u128::from(j) * 1_000_000_000_000_000)
    }

    #[test]
    fn cheetah_day_by_hand() {
        // Goal: the meter gives exactly the hand-computed energy of a Cheetah 15K.4
        // (004 Table 3) going idle 100 s, standby 1000 s, spin-up 10 s, idle 50 s.
        // By hand: 100*12 + 0 (free spin-down) + 1000*2.6 + (20 + 10*12) + 50*12 = 4540 J.
        let profile = builtin_profile("seagate-cheetah-15k4-36gb").unwrap();
        let mut meter = EnergyMeter::new(&profile, 1, PowerState::Idle, at(0));
        assert_eq!(meter.begin_transition(at(100), PowerState::Standby), Ok(VirtualDuration::ZERO));
        assert_eq!(meter.state(), Some(PowerState::Standby));
        assert_eq!(
            meter.begin_transition(at(1100), PowerState::Idle),
            Ok(VirtualDuration::from_secs(10))
        );
        assert_eq!(meter.state(), None);
        let reading = meter.reading(at(1160));
        assert_eq!(reading.energy, joules(4540));
        assert_eq!(reading.spin_ups, 1);
        assert_eq!(reading.spin_downs, 1);
        assert_eq!(
            reading.state_time[PowerState::Standby.index()],
            VirtualDuration::from_secs(1000)
        );
        assert_eq!(reading.transition_time, VirtualDuration::from_secs(10));
    }

    #[test]
    fn ibm_transitions_and_busy_time_by_hand() {
        // Goal: with the IBM 36Z15 (002 Table 3) and five disks in one array, a
        // spin-down (1.5 s, 13 J), 8.5 s standby, a spin-up (10.9 s, 135 J) and 20 s idle
        // cost 5 * (13 + 8.5*2.5 + 135 + 20*10.2) J = 1866.25 J, and 4 s of I/O on one
        // disk 4 * (13.5 - 10.2) = 13.2 J more: 1879.45 J. A reading mid-spin-up is
        // pro-rated.
        let profile = builtin_profile("ibm-ultrastar-36z15").unwrap();
        let mut meter = EnergyMeter::new(&profile, 5, PowerState::Idle, VirtualInstant::ZERO);
        let down = meter.begin_transition(VirtualInstant::ZERO, PowerState::Standby).unwrap();
        assert_eq!(down, VirtualDuration::from_millis(1500));
        assert_eq!(meter.begin_transition(at(1), PowerState::Idle), Err(MeterError::InTransition));
        let up = meter.begin_transition(at(10), PowerState::Idle).unwrap();
        assert_eq!(up, VirtualDuration::from_millis(10_900));
        let half = at(10) + VirtualDuration::from_millis(5_450);
        let mid = meter.reading(half).energy;
        let before_up = Energy::try_from_joules(5.0 * (13.0 + 8.5 * 2.5)).unwrap();
        assert_eq!(mid, before_up + Energy::try_from_joules(5.0 * 67.5).unwrap());
        meter.add_busy(at(25), VirtualDuration::from_secs(4));
        let end = at(10) + VirtualDuration::from_millis(10_900) + VirtualDuration::from_secs(20);
        let reading = meter.reading(end);
        assert_eq!(reading.energy, Energy::try_from_joules(1879.45).unwrap());
        assert_eq!(reading.state_time[PowerState::Active.index()], VirtualDuration::from_secs(4));
    }

    #[test]
    fn timeline_drops_what_lies_outside_its_span() {
        // Goal: a warm-up before the span and a drain after it add nothing; an
        // interval straddling the start adds only its inside share.
        let mut timeline = PowerTimeline::new(
            at(100),
            VirtualDuration::from_secs(120),
            VirtualDuration::from_secs(60),
        );
        timeline.add(at(0), at(50), joules(50));
        timeline.add(at(230), at(300), joules(70));
        timeline.add(at(50), at(150), joules(100));
        assert_eq!(timeline.windows(), &[joules(50), Energy::ZERO]);
        timeline.add(at(219), at(221), joules(2));
        assert_eq!(timeline.windows()[1], joules(1));
        timeline.add(at(130), at(130), joules(5));
        timeline.add(at(220), at(220), joules(5));
        assert_eq!(timeline.total(), joules(56));
    }

    #[test]
    fn a_long_steady_interval_does_not_overflow() {
        // Goal: a month at 1 kW in one interval (power x time^2 far past u128) spreads
        // exactly over the windows.
        let month = VirtualDuration::from_secs(30 * 24 * 3600);
        let mut timeline = PowerTimeline::new(at(0), month, VirtualDuration::from_secs(3600));
        let energy = Power::try_from_watts(1000.0).unwrap().over(month);
        timeline.add(at(0), at(0) + month, energy);
        assert_eq!(timeline.total(), energy);
        assert_eq!(timeline.windows()[17], joules(3_600_000));
    }

    #[test]
    fn a_span_shorter_than_a_window_peaks_at_its_own_mean() {
        // Goal: a 30 s span at a steady 48 W reports a peak of 48 W, not 24 W (its energy
        // divided by a whole minute); a trailing part-minute joins the last window, so
        // every window lasts at least a minute and the peak is never below the mean.
        let watts = Power::try_from_watts(48.0).unwrap();
        let half_minute = VirtualDuration::from_secs(30);
        let mut short = PowerTimeline::new(at(0), half_minute, VirtualDuration::from_secs(60));
        short.add(at(0), at(30), watts.over(half_minute));
        assert_eq!(short.windows().len(), 1);
        assert!((short.peak_watts() - 48.0).abs() < 1e-9, "{}", short.peak_watts());
        // 150 s: windows of 60 s and 90 s; 10 W then 40 W from 120 s on.
        let span = VirtualDuration::from_secs(150);
        let mut long = PowerTimeline::new(at(0), span, VirtualDuration::from_secs(60));
        long.add(at(0), at(120), Power::try_from_watts(10.0).unwrap().over(at(120) - at(0)));
        long.add(at(120), at(150), Power::try_from_watts(40.0).unwrap().over(half_minute));
        long.add(at(150), at(200), joules(1000));
        assert_eq!(long.windows().len(), 2);
        assert_eq!(long.window_length(1), VirtualDuration::from_secs(90));
        assert_eq!(long.total(), joules(1200 + 1200));
        let mean = 2400.0 / 150.0;
        assert!((long.peak_watts() - 1800.0 / 90.0).abs() < 1e-9, "{}", long.peak_watts());
        assert!(long.peak_watts() >= mean);
        assert_eq!(long.window_index(at(149)), Some(1));
        assert_eq!(long.window_index(at(150)), None);
    }

    #[test]
    fn timeline_windows_sum_to_the_meter_total() {
        // Goal: energy spread over windows (including a spin-up across a boundary) adds
        // up exactly to the meter's total, and the peak window is the spinning one.
        let profile = builtin_profile("seagate-cheetah-15k4-146gb").unwrap();
        let timeline = PowerTimeline::new(
            at(0),
            VirtualDuration::from_secs(300),
            VirtualDuration::from_secs(60),
        );
        let mut meter =
            EnergyMeter::new(&profile, 2, PowerState::Standby, at(0)).with_timeline(timeline);
        meter.begin_transition(at(55), PowerState::Idle).unwrap();
        let total = meter.reading(at(300)).energy;
        let timeline = meter.timeline().unwrap();
        assert_eq!(timeline.total(), total);
        assert_eq!(timeline.windows().len(), 5);
        // Window 0: 55 s standby + 5 s of a 15 s, 200 J spin-up, for two disks. Window 1
        // holds the other 10 s of the spin-up, so it is the peak: (400/3 + 50*12) * 2 J.
        let expected = Energy::try_from_joules(2.0 * (55.0 * 2.6 + 200.0 / 3.0)).unwrap();
        assert!(
            timeline.windows()[0].0.abs_diff(expected.0) <= 1_000,
            "{:?}",
            timeline.windows()[0]
        );
        assert_eq!(timeline.windows()[2], Energy::try_from_joules(2.0 * 60.0 * 12.0).unwrap());
        let peak = 2.0 * (400.0 / 3.0 + 600.0) / 60.0;
        assert!((timeline.peak_watts() - peak).abs() < 1e-9, "{}", timeline.peak_watts());
    }
}
