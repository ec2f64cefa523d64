//! A process's energy meter: modelled watts by power state (the profile's table, as
//! the simulator charges them) beside RAPL's package energy where the host exposes it
//! (DEPENDENCIES.md §7.4). RAPL counts CPU and DRAM in real time; the model counts the
//! whole server in the cluster's clock (scaled by `time_scale`): they are shown side
//! by side, never mixed.

use std::path::{Path, PathBuf};

use somnus_core::power::{PowerProfile, ServerMeter};
use somnus_types::VirtualInstant;

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

/// The modelled meter of one server (the core's, which the simulator charges alike),
/// and RAPL.
pub struct NodeMeter {
    model: ServerMeter,
    rapl: Option<Rapl>,
}

impl NodeMeter {
    /// A meter of a server on (idle) at `now`. The cluster file's check refuses a
    /// profile without both spin transitions before this is made.
    pub fn new(profile: PowerProfile, now: VirtualInstant) -> NodeMeter {
        NodeMeter { model: ServerMeter::new(profile, now), rapl: Rapl::open(Path::new(RAPL_ROOT)) }
    }

    /// Starts the sleep (after a transition under way ends); returns when it ends.
    pub fn sleep(&mut self, now: VirtualInstant) -> VirtualInstant {
        self.model.sleep(now)
    }

    /// A wake packet arrived: when the server is on, if it wakes
    /// (`ServerMeter::wake_packet`).
    pub fn wake_packet(&mut self, now: VirtualInstant) -> Option<VirtualInstant> {
        self.model.wake_packet(now)
    }

    pub fn reading(&mut self, now: VirtualInstant) -> PowerReading {
        let model = self.model.reading(now);
        PowerReading {
            state: model.state.into(),
            watts: model.watts,
            joules: model.joules,
            joules_if_always_on: model.joules_if_always_on,
            sleeps: model.sleeps,
            wakes: model.wakes,
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
