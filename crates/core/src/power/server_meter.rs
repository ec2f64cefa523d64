//! The modelled energy meter of one server, as both shells charge it: on (idle) until
//! told to sleep, the profile's transition down, standby, the transition up when
//! woken. The simulator and the runtime feed it the same events (the core's `Sleep`,
//! the MDS's wake), so their energy agrees (docs/runtime.md, "Agreement").
//!
//! With the io-server controller (001), a server on also has a compute role: max-perf
//! (the profile's active watts) or the io-server state (its `io_server` watts), the
//! change between them charged as the profile's idle/io-server transition.

use somnus_types::{VirtualDuration, VirtualInstant};

use super::{EnergyMeter, PowerProfile, PowerState};

/// What a server on does with its compute (001 3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ComputeRole {
    /// Compute on: the profile's active watts.
    MaxPerf,
    /// Compute off, disks serving: the profile's io-server watts.
    IoServer,
}

/// What the meter reads at an instant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServerReading {
    /// `on`, `max-perf`, `io-server`, `going to sleep`, `asleep` or `waking`.
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
    role: RoleMeter,
}

/// The compute role's energy on top of the idle watts the model charges while on.
#[derive(Clone, Debug)]
struct RoleMeter {
    role: Option<ComputeRole>,
    /// Charged up to here.
    since: VirtualInstant,
    /// A change of role under way until then, at `transition_watts`.
    transition_until: VirtualInstant,
    transition_watts: f64,
    /// Joules above (or below) idle so far.
    extra_joules: f64,
    /// Seconds spent in each role, max-perf and io-server.
    seconds: [f64; 2],
}

impl ServerMeter {
    /// A meter of a server on (idle) at `now`. The profile must have both transitions
    /// between idle and standby (the cluster file's check refuses one without).
    pub fn new(profile: PowerProfile, now: VirtualInstant) -> ServerMeter {
        let model = EnergyMeter::new(&profile, 1, PowerState::Idle, now);
        let role = RoleMeter {
            role: None,
            since: now,
            transition_until: now,
            transition_watts: 0.0,
            extra_joules: 0.0,
            seconds: [0.0; 2],
        };
        ServerMeter { profile, model, started: now, latest: now, target: PowerState::Idle, role }
    }

    /// The io-server controller's role for the server on, from `now` (`None`: the
    /// idle watts, as without the controller). A change into or out of the io-server
    /// state takes the profile's idle/io-server transition.
    pub fn set_role(&mut self, now: VirtualInstant, role: Option<ComputeRole>) {
        let now = now.max(self.latest);
        self.settle_role(now);
        let old = self.role.role;
        if old == role {
            return;
        }
        let io = |r: Option<ComputeRole>| r == Some(ComputeRole::IoServer);
        let transition = match (io(old), io(role)) {
            (false, true) => self.profile.transition(PowerState::Idle, PowerState::IoServer),
            (true, false) => self.profile.transition(PowerState::IoServer, PowerState::Idle),
            _ => None,
        };
        if let Some(t) = transition.filter(|t| t.duration > VirtualDuration::ZERO) {
            self.role.transition_until = now + t.duration;
            self.role.transition_watts = t.energy.as_joules() / t.duration.as_secs_f64();
        }
        self.role.role = role;
    }

    /// The role's watts now, transitions aside.
    fn role_watts(&self, role: Option<ComputeRole>) -> f64 {
        let state = match role {
            None => PowerState::Idle,
            Some(ComputeRole::MaxPerf) => PowerState::Active,
            Some(ComputeRole::IoServer) => PowerState::IoServer,
        };
        self.profile.watts(state).as_watts()
    }

    /// Charges the role's watts above idle up to `now`.
    fn settle_role(&mut self, now: VirtualInstant) {
        let idle = self.profile.watts(PowerState::Idle).as_watts();
        let r = &mut self.role;
        if now <= r.since {
            return;
        }
        let in_transition = now.min(r.transition_until.max(r.since)).duration_since(r.since);
        let steady = now.duration_since(r.since).saturating_sub(in_transition);
        let watts = self.role_watts(self.role.role);
        let r = &mut self.role;
        r.extra_joules += (r.transition_watts - idle) * in_transition.as_secs_f64()
            + (watts - idle) * steady.as_secs_f64();
        match r.role {
            Some(ComputeRole::MaxPerf) => r.seconds[0] += steady.as_secs_f64(),
            Some(ComputeRole::IoServer) => r.seconds[1] += steady.as_secs_f64(),
            None => {}
        }
        r.since = now;
    }

    /// Seconds spent in max-perf and in the io-server state so far.
    pub fn role_seconds(&mut self, now: VirtualInstant) -> [f64; 2] {
        self.settle_role(now.max(self.latest));
        self.role.seconds
    }

    /// Starts the sleep (after a transition under way ends); returns when it ends.
    /// The compute role ends with it.
    pub fn sleep(&mut self, now: VirtualInstant) -> VirtualInstant {
        self.set_role(now, None);
        self.role.transition_until = self.role.since;
        self.transition(now, PowerState::Standby)
    }

    /// Starts the wake (after a transition under way ends); returns when the server
    /// is on.
    pub fn wake(&mut self, now: VirtualInstant) -> VirtualInstant {
        self.transition(now, PowerState::Idle)
    }

    /// A wake packet reached the server (both shells' power tasks ask this): one going
    /// to sleep or asleep wakes, after a transition under way ends; returns when it is
    /// on. A packet for a server on or already waking is let pass (`None`): the MDS
    /// sends it again while it waits (a NIC may miss one while its host suspends).
    pub fn wake_packet(&mut self, now: VirtualInstant) -> Option<VirtualInstant> {
        self.sleeping().then(|| self.wake(now))
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
        self.settle_role(now);
        let reading = self.model.reading(now);
        let watts = |state| self.profile.watts(state).as_watts();
        let (state, watts) = match (self.model.state(), self.target) {
            (Some(PowerState::Standby), _) => ("asleep", watts(PowerState::Standby)),
            (Some(_), _) => match self.role.role {
                None => ("on", watts(PowerState::Idle)),
                Some(ComputeRole::MaxPerf) => ("max-perf", self.role_watts(self.role.role)),
                Some(ComputeRole::IoServer) => ("io-server", self.role_watts(self.role.role)),
            },
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
            joules: reading.energy.as_joules() + self.role.extra_joules,
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
    fn a_wake_packet_wakes_a_sleeping_server_once_and_is_let_pass_otherwise() {
        let profile = builtin_profile("ecs2-storage-node").unwrap();
        let mut meter = ServerMeter::new(profile, at(0.0));
        assert_eq!(meter.wake_packet(at(1.0)), None, "on: nothing to wake");
        meter.sleep(at(10.0));
        // Sent while it is still going to sleep: it wakes once the sleep ends.
        assert_eq!(meter.wake_packet(at(12.0)), Some(at(30.0)), "7 s down, then 13 s up");
        assert_eq!(meter.wake_packet(at(13.0)), None, "waking already: a resend does nothing");
        assert_eq!(meter.reading(at(40.0)).wakes, 1);
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
    fn compute_roles_are_charged_at_max_perf_and_io_server_watts() {
        // Goal: 001's Asterix-I node: 252 W in max-perf, 77 W as an io-server, the
        // change taking the profile's 5 s at 1260 J; a sleep ends the role at once.
        let profile = builtin_profile("asterix-i").unwrap();
        let mut meter = ServerMeter::new(profile, at(0.0));
        meter.set_role(at(0.0), Some(ComputeRole::MaxPerf));
        assert_eq!(meter.reading(at(5.0)).state, "max-perf");
        meter.set_role(at(10.0), Some(ComputeRole::IoServer));
        let r = meter.reading(at(115.0));
        assert_eq!((r.state, r.watts), ("io-server", 77.0));
        // 10 s at 252 W, 1260 J, 100 s at 77 W.
        let expected = 10.0 * 252.0 + 1260.0 + 100.0 * 77.0;
        assert!((r.joules - expected).abs() < 0.01, "{} vs {expected}", r.joules);
        assert_eq!(meter.role_seconds(at(115.0)), [10.0, 100.0]);
        meter.sleep(at(115.0));
        let r = meter.reading(at(200.0));
        // The profile's sleep (7 s, 569 J), then standby at 5.4 W.
        let expected = expected + 569.0 + 78.0 * 5.4;
        assert!((r.joules - expected).abs() < 0.01, "{} vs {expected}", r.joules);
        assert_eq!(meter.role_seconds(at(200.0)), [10.0, 100.0]);
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
