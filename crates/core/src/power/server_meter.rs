//! The modelled energy meter of one server, as both shells charge it: on (idle) until
//! told to sleep, the profile's transition down, standby, the transition up when
//! woken. The simulator and the runtime feed it the same events (the core's `Sleep`,
//! the MDS's wake), so their energy agrees (docs/runtime.md, "Agreement").

use somnus_types::{VirtualDuration, VirtualInstant};

use super::{EnergyMeter, PowerProfile, PowerState};

/// What the meter reads at an instant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServerReading {
    /// `on`, `going to sleep`, `asleep` or `waking`.
    pub state: &'static str,
    /// Modelled watts now.
    pub watts: f64,
    /// Modelled energy since the meter started.
    pub joules: f64,
    /// Modelled energy had the server stayed on (idle) all along: the saving is the
    /// difference.
    pub joules_if_always_on: f64,
    pub sleeps: u64,
    pub wakes: u64,
}

/// The modelled meter of one server.
#[derive(Clone, Debug)]
pub struct ServerMeter {
    profile: PowerProfile,
    model: EnergyMeter,
    started: VirtualInstant,
    /// The latest time the model has been taken to (a wake queued behind a sleep
    /// takes it past `now`).
    latest: VirtualInstant,
    /// Where the transition under way (or the last one) goes.
    target: PowerState,
}

impl ServerMeter {
    /// A meter of a server on (idle) at `now`. The profile must have both transitions
    /// between idle and standby (the cluster file's check refuses one without).
    pub fn new(profile: PowerProfile, now: VirtualInstant) -> ServerMeter {
        let model = EnergyMeter::new(&profile, 1, PowerState::Idle, now);
        ServerMeter { profile, model, started: now, latest: now, target: PowerState::Idle }
    }

    /// Starts the sleep (after a transition under way ends); returns when it ends.
    pub fn sleep(&mut self, now: VirtualInstant) -> VirtualInstant {
        self.transition(now, PowerState::Standby)
    }

    /// Starts the wake (after a transition under way ends); returns when the server
    /// is on.
    pub fn wake(&mut self, now: VirtualInstant) -> VirtualInstant {
        self.transition(now, PowerState::Idle)
    }

    /// Whether the last order was to sleep (the server is going to sleep or asleep).
    pub fn sleeping(&self) -> bool {
        self.target == PowerState::Standby
    }

    fn transition(&mut self, now: VirtualInstant, to: PowerState) -> VirtualInstant {
        let start = self.model.transition_end().map_or(now, |end| end.max(now)).max(self.latest);
        self.latest = start;
        // Err: already in `to` (a repeated order), nothing to do.
        let duration = self.model.begin_transition(start, to).unwrap_or(VirtualDuration::ZERO);
        self.target = to;
        start + duration
    }

    pub fn reading(&mut self, now: VirtualInstant) -> ServerReading {
        let now = now.max(self.latest);
        self.latest = now;
        let reading = self.model.reading(now);
        let watts = |state| self.profile.watts(state).as_watts();
        let (state, watts) = match (self.model.state(), self.target) {
            (Some(PowerState::Standby), _) => ("asleep", watts(PowerState::Standby)),
            (Some(_), _) => ("on", watts(PowerState::Idle)),
            (None, to) => {
                let from =
                    if to == PowerState::Idle { PowerState::Standby } else { PowerState::Idle };
                let name = if to == PowerState::Idle { "waking" } else { "going to sleep" };
                let mean = self
                    .profile
                    .transition(from, to)
                    .map_or(0.0, |t| t.energy.as_joules() / t.duration.as_secs_f64().max(1e-9));
                (name, mean)
            }
        };
        let elapsed = now.duration_since(self.started);
        ServerReading {
            state,
            watts,
            joules: reading.energy.as_joules(),
            joules_if_always_on: self.profile.watts(PowerState::Idle).over(elapsed).as_joules(),
            sleeps: reading.spin_downs,
            wakes: reading.spin_ups,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::power::builtin_profile;

    fn at(seconds: f64) -> VirtualInstant {
        VirtualInstant::ZERO + VirtualDuration::from_millis((seconds * 1000.0) as u64)
    }

    #[test]
    fn each_state_and_transition_is_charged_at_the_profiles_watts() {
        let profile = builtin_profile("ecs2-storage-node").unwrap();
        let mut meter = ServerMeter::new(profile, at(0.0));
        assert_eq!(meter.reading(at(10.0)).state, "on");
        let asleep_at = meter.sleep(at(10.0));
        assert_eq!(asleep_at, at(17.0), "the profile's sleep takes 7 s");
        assert!(meter.sleeping());
        assert_eq!(meter.reading(at(12.0)).state, "going to sleep");
        let on_at = meter.wake(at(100.0));
        assert_eq!(on_at, at(113.0), "the profile's wake takes 13 s");
        assert!(!meter.sleeping());
        let r = meter.reading(at(120.0));
        assert_eq!((r.state, r.sleeps, r.wakes), ("on", 1, 1));
        // 10 s on, 569 J down, 83 s asleep, 1270 J up, 7 s on (61.8 W on, 5.4 W asleep).
        let expected = 17.0 * 61.8 + 569.0 + 83.0 * 5.4 + 1270.0;
        assert!((r.joules - expected).abs() < 0.01, "{} vs {expected}", r.joules);
        assert!((r.joules_if_always_on - 120.0 * 61.8).abs() < 0.01);
    }

    #[test]
    fn a_wake_during_the_sleep_waits_for_it_to_end_and_a_repeated_one_changes_nothing() {
        let profile = builtin_profile("ecs2-storage-node").unwrap();
        let mut meter = ServerMeter::new(profile, at(0.0));
        meter.sleep(at(1.0));
        assert_eq!(meter.wake(at(3.0)), at(8.0 + 13.0));
        assert_eq!(meter.wake(at(4.0)), at(21.0), "already waking: on at the same time");
        assert_eq!(meter.reading(at(30.0)).wakes, 1);
    }
}
