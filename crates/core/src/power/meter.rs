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
    pub state_time: [VirtualDuration; 3],
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

/// Energy per fixed-length window of time, for mean and peak power.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PowerTimeline {
    origin: VirtualInstant,
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
        let count = span.as_nanos().div_ceil(window.as_nanos()).max(1);
        assert!(count <= TIMELINE_WINDOWS_MAX, "timeline of {count} windows exceeds the bound");
        PowerTimeline { origin, window, windows: vec![Energy::ZERO; count as usize] }
    }

    pub fn window(&self) -> VirtualDuration {
        self.window
    }

    pub fn windows(&self) -> &[Energy] {
        &self.windows
    }

    /// Adds `energy` spread evenly over `[start, end)`. The parts of the interval
    /// outside the timeline's span are dropped (a warm-up before it, a drain after),
    /// so the timeline holds exactly the energy of its span.
    pub fn add(&mut self, start: VirtualInstant, end: VirtualInstant, energy: Energy) {
        assert!(start <= end, "interval ends before it starts");
        let window = self.window.as_nanos();
        let span_start = self.origin.as_nanos();
        let span_end = span_start + window * self.windows.len() as u64;
        let (start, end) = (start.as_nanos(), end.as_nanos());
        if energy == Energy::ZERO {
            return;
        }
        if start == end {
            if (span_start..span_end).contains(&start) {
                self.windows[((start - span_start) / window) as usize] += energy;
            }
            return;
        }
        let (inside_start, inside_end) = (start.max(span_start), end.min(span_end));
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
        let first = ((inside_start - span_start) / window) as usize;
        let last = ((inside_end - 1 - span_start) / window) as usize;
        let mut credited = Energy::ZERO;
        for index in first..last {
            let window_end = span_start + (index as u64 + 1) * window;
            let overlap = window_end - inside_start.max(span_start + index as u64 * window);
            let share = share_of(overlap);
            self.windows[index] += share;
            credited += share;
        }
        // The last window takes the rounding remainder, so a wholly inside interval
        // adds exactly its energy.
        let remainder = if start >= span_start && end <= span_end { energy } else { inside };
        self.windows[last] += remainder - credited;
    }

    /// Adds another timeline of the same shape window by window.
    pub fn accumulate(&mut self, other: &PowerTimeline) {
        assert_eq!(self.window, other.window, "timelines differ in window");
        assert_eq!(self.windows.len(), other.windows.len(), "timelines differ in span");
        for (mine, theirs) in self.windows.iter_mut().zip(&other.windows) {
            *mine += *theirs;
        }
    }

    /// The mean power of the busiest window, in watts.
    pub fn peak_watts(&self) -> f64 {
        let peak = self.windows.iter().copied().max().unwrap_or(Energy::ZERO);
        peak.mean_power_watts(self.window)
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
    watts: [Power; 3],
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
            watts: PowerState::ALL.map(|s| profile.watts(s)),
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
