//! A process's energy meter: modelled watts by power state (the profile's table, as
//! the simulator charges them) beside RAPL's package energy where the host exposes it
//! (DEPENDENCIES.md §7.4). RAPL counts CPU and DRAM in real time; the model counts the
//! whole server in the cluster's clock (scaled by `time_scale`): they are shown side
//! by side, never mixed.

use std::path::{Path, PathBuf};

use somnus_core::power::{EnergyMeter, PowerProfile, PowerState};
use somnus_types::{VirtualDuration, VirtualInstant};

/// What the meter reads.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PowerReading {
    /// `on`, `going to sleep`, `asleep` or `waking`.
    pub state: String,
    /// Modelled watts now.
    pub watts: f64,
    /// Modelled energy since the process started.
    pub joules: f64,
    /// Modelled energy had the server stayed on (idle) all along: the saving is the
    /// difference.
    pub joules_if_always_on: f64,
    pub sleeps: u64,
    pub wakes: u64,
    /// RAPL package energy since the process started, in real time; `None` where the
    /// host does not expose it (or only to root).
    pub rapl_joules: Option<f64>,
}

/// The modelled meter of one server, and RAPL.
pub struct NodeMeter {
    profile: PowerProfile,
    model: EnergyMeter,
    started: VirtualInstant,
    /// The latest time the model has been taken to (a wake queued behind a sleep
    /// takes it past `now`).
    latest: VirtualInstant,
    /// Where the transition under way goes.
    target: PowerState,
    rapl: Option<Rapl>,
}

impl NodeMeter {
    /// A meter of a server on (idle) at `now`. The cluster file's check refuses a
    /// profile without both spin transitions before this is made.
    pub fn new(profile: PowerProfile, now: VirtualInstant) -> NodeMeter {
        let model = EnergyMeter::new(&profile, 1, PowerState::Idle, now);
        let rapl = Rapl::open(Path::new(RAPL_ROOT));
        NodeMeter { profile, model, started: now, latest: now, target: PowerState::Idle, rapl }
    }

    /// Starts the sleep (after a transition under way ends); returns when it ends.
    pub fn sleep(&mut self, now: VirtualInstant) -> VirtualInstant {
        self.transition(now, PowerState::Standby)
    }

    /// Starts the wake (after a transition under way ends); returns when it ends.
    pub fn wake(&mut self, now: VirtualInstant) -> VirtualInstant {
        self.transition(now, PowerState::Idle)
    }

    fn transition(&mut self, now: VirtualInstant, to: PowerState) -> VirtualInstant {
        let start = self.model.transition_end().map_or(now, |end| end.max(now)).max(self.latest);
        self.latest = start;
        // Err: already in `to` (a repeated order), nothing to do.
        let duration = self.model.begin_transition(start, to).unwrap_or(VirtualDuration::ZERO);
        self.target = to;
        start + duration
    }

    pub fn reading(&mut self, now: VirtualInstant) -> PowerReading {
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
        PowerReading {
            state: state.into(),
            watts,
            joules: reading.energy.as_joules(),
            joules_if_always_on: self.profile.watts(PowerState::Idle).over(elapsed).as_joules(),
            sleeps: reading.spin_downs,
            wakes: reading.spin_ups,
            rapl_joules: self.rapl.as_mut().map(Rapl::joules),
        }
    }
}

/// Where the kernel exposes RAPL.
pub const RAPL_ROOT: &str = "/sys/class/powercap";

/// RAPL's package zones (`intel-rapl:N` named `package-N`), each counter's wraps
/// taken into account.
pub struct Rapl {
    zones: Vec<Zone>,
}

struct Zone {
    energy: PathBuf,
    max_uj: u64,
    last_uj: u64,
    total_uj: u128,
}

impl Rapl {
    /// The package zones under `root` whose counter this process may read; `None`
    /// when there is none (no RAPL, or `energy_uj` readable by root only).
    pub fn open(root: &Path) -> Option<Rapl> {
        let mut zones = Vec::new();
        for entry in std::fs::read_dir(root).ok()?.flatten() {
            let dir = entry.path();
            let name = std::fs::read_to_string(dir.join("name")).unwrap_or_default();
            if !name.trim().starts_with("package") {
                continue;
            }
            let read = |file: &str| -> Option<u64> {
                std::fs::read_to_string(dir.join(file)).ok()?.trim().parse().ok()
            };
            if let (Some(last_uj), Some(max_uj)) = (read("energy_uj"), read("max_energy_range_uj"))
            {
                zones.push(Zone { energy: dir.join("energy_uj"), max_uj, last_uj, total_uj: 0 });
            }
        }
        (!zones.is_empty()).then_some(Rapl { zones })
    }

    /// Joules of every package since `open`.
    pub fn joules(&mut self) -> f64 {
        let mut total = 0u128;
        for zone in &mut self.zones {
            let now = std::fs::read_to_string(&zone.energy)
                .ok()
                .and_then(|text| text.trim().parse::<u64>().ok());
            if let Some(now) = now {
                // The counter wraps at max_energy_range_uj.
                let delta = if now >= zone.last_uj {
                    now - zone.last_uj
                } else {
                    zone.max_uj.saturating_sub(zone.last_uj) + now
                };
                zone.total_uj += u128::from(delta);
                zone.last_uj = now;
            }
            total += zone.total_uj;
        }
        total as f64 / 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use somnus_core::power::builtin_profile;

    fn at(seconds: f64) -> VirtualInstant {
        VirtualInstant::ZERO + VirtualDuration::from_millis((seconds * 1000.0) as u64)
    }

    #[test]
    fn the_model_charges_each_state_and_transition_at_the_profiles_watts() {
        let profile = builtin_profile("ecs2-storage-node").unwrap();
        let mut meter = NodeMeter::new(profile, at(0.0));
        assert_eq!(meter.reading(at(10.0)).state, "on");
        let asleep_at = meter.sleep(at(10.0));
        assert_eq!(asleep_at, at(17.0), "the profile's sleep takes 7 s");
        assert_eq!(meter.reading(at(12.0)).state, "going to sleep");
        let on_at = meter.wake(at(100.0));
        assert_eq!(on_at, at(113.0), "the profile's wake takes 13 s");
        let r = meter.reading(at(120.0));
        assert_eq!((r.state.as_str(), r.sleeps, r.wakes), ("on", 1, 1));
        // 10 s on, 569 J down, 83 s asleep, 1270 J up, 7 s on (61.8 W on, 5.4 W asleep).
        let expected = 17.0 * 61.8 + 569.0 + 83.0 * 5.4 + 1270.0;
        assert!((r.joules - expected).abs() < 0.01, "{} vs {expected}", r.joules);
        assert!((r.joules_if_always_on - 120.0 * 61.8).abs() < 0.01);
    }

    #[test]
    fn a_wake_during_the_sleep_waits_for_it_to_end() {
        let profile = builtin_profile("ecs2-storage-node").unwrap();
        let mut meter = NodeMeter::new(profile, at(0.0));
        meter.sleep(at(1.0));
        assert_eq!(meter.wake(at(3.0)), at(8.0 + 13.0));
    }

    #[test]
    fn rapl_counts_across_a_wrap_and_is_absent_without_a_readable_package() {
        let root = tempfile::tempdir().unwrap();
        let zone = root.path().join("intel-rapl:0");
        std::fs::create_dir(&zone).unwrap();
        std::fs::write(zone.join("name"), "package-0\n").unwrap();
        std::fs::write(zone.join("max_energy_range_uj"), "1000000\n").unwrap();
        std::fs::write(zone.join("energy_uj"), "900000\n").unwrap();
        let core = root.path().join("intel-rapl:0:0");
        std::fs::create_dir(&core).unwrap();
        std::fs::write(core.join("name"), "core\n").unwrap();
        let mut rapl = Rapl::open(root.path()).unwrap();
        std::fs::write(zone.join("energy_uj"), "950000\n").unwrap();
        assert!((rapl.joules() - 0.05).abs() < 1e-9);
        std::fs::write(zone.join("energy_uj"), "50000\n").unwrap();
        assert!((rapl.joules() - 0.15).abs() < 1e-9, "wrapped at 1 J");
        std::fs::remove_file(zone.join("energy_uj")).unwrap();
        assert!(Rapl::open(root.path()).is_none());
        assert!(Rapl::open(&root.path().join("missing")).is_none());
    }
}
