//! Power profiles: named tables of watts per state and cost per transition.

use std::collections::BTreeMap;

use somnus_types::{Energy, Power, VirtualDuration};

/// The power states a policy reasons about. A profile gives the watts of each.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum PowerState {
    /// Spinning (or powered) and serving I/O.
    Active,
    /// Spinning (or powered) with nothing to do: the state the papers want to avoid.
    Idle,
    /// Spun down (or suspended): I/O must wait for a transition back to idle.
    Standby,
    /// A server whose compute is off and whose disks keep serving I/O (001's
    /// io-server state). Servers only, optional.
    IoServer,
    /// Powered off (ACPI S5): a boot to come back. Servers only, optional.
    Off,
}

impl PowerState {
    /// The states every profile gives.
    pub const ALL: [PowerState; 3] = [PowerState::Active, PowerState::Idle, PowerState::Standby];
    /// Every state, the optional ones of servers last.
    pub const EVERY: [PowerState; 5] = [
        PowerState::Active,
        PowerState::Idle,
        PowerState::Standby,
        PowerState::IoServer,
        PowerState::Off,
    ];

    pub fn index(self) -> usize {
        match self {
            PowerState::Active => 0,
            PowerState::Idle => 1,
            PowerState::Standby => 2,
            PowerState::IoServer => 3,
            PowerState::Off => 4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PowerState::Active => "active",
            PowerState::Idle => "idle",
            PowerState::Standby => "standby",
            PowerState::IoServer => "io_server",
            PowerState::Off => "off",
        }
    }
}

/// What kind of unit a profile describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnitKind {
    Disk,
    Server,
}

impl UnitKind {
    /// The name profile files use.
    pub fn name(self) -> &'static str {
        match self {
            UnitKind::Disk => "disk",
            UnitKind::Server => "server",
        }
    }
}

/// A transition between two steady states: how long it takes and the total energy the
/// unit draws while it happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    pub from: PowerState,
    pub to: PowerState,
    pub duration: VirtualDuration,
    /// Total energy over the whole transition (not the excess over some state).
    pub energy: Energy,
}

/// The mechanical parameters of a disk, for the simulator's service-time model.
#[derive(Clone, Copy, Debug, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskMechanics {
    pub capacity_gb: f64,
    pub rpm: u32,
    pub seek_track_ms: f64,
    pub seek_full_ms: f64,
    pub transfer_mb_s: f64,
    pub overhead_ms: f64,
}

/// A validated power profile.
#[derive(Clone, Debug, PartialEq)]
pub struct PowerProfile {
    pub name: String,
    pub kind: UnitKind,
    pub source: String,
    /// Watts per state, indexed by [`PowerState::index`]; the optional states of a
    /// server may be absent.
    watts: [Option<Power>; 5],
    transitions: Vec<Transition>,
    pub mechanics: Option<DiskMechanics>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("power profile {origin}: {source}")]
    Toml { origin: String, source: toml::de::Error },
    #[error("power profile {origin}: {key}: {message}")]
    Invalid { origin: String, key: String, message: String },
    #[error("no built-in power profile named {name:?}; the built-in profiles are: {known}")]
    Unknown { name: String, known: String },
}

/// The profiles shipped with somnus, from the papers' tables.
const BUILTIN_PROFILES: [(&str, &str); 8] = [
    ("seagate-cheetah-15k4-36gb", include_str!("../../profiles/seagate-cheetah-15k4-36gb.toml")),
    ("seagate-cheetah-15k4-146gb", include_str!("../../profiles/seagate-cheetah-15k4-146gb.toml")),
    ("ibm-ultrastar-36z15", include_str!("../../profiles/ibm-ultrastar-36z15.toml")),
    ("ecs2-storage-node", include_str!("../../profiles/ecs2-storage-node.toml")),
    ("obelix", include_str!("../../profiles/obelix.toml")),
    ("asterix-i", include_str!("../../profiles/asterix-i.toml")),
    ("asterix-ii", include_str!("../../profiles/asterix-ii.toml")),
    ("xeon-e5320-server", include_str!("../../profiles/xeon-e5320-server.toml")),
];

pub fn builtin_profile_names() -> impl Iterator<Item = &'static str> {
    BUILTIN_PROFILES.iter().map(|(name, _)| *name)
}

/// One of the built-in profiles by name.
pub fn builtin_profile(name: &str) -> Result<PowerProfile, ProfileError> {
    let Some((_, text)) = BUILTIN_PROFILES.iter().find(|(known, _)| *known == name) else {
        return Err(ProfileError::Unknown {
            name: name.to_string(),
            known: builtin_profile_names().collect::<Vec<_>>().join(", "),
        });
    };
    PowerProfile::from_toml(text, &format!("built-in {name}"))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    name: String,
    kind: UnitKind,
    #[serde(default)]
    source: String,
    states: BTreeMap<PowerState, StateFile>,
    #[serde(default)]
    transitions: Vec<TransitionFile>,
    mechanics: Option<DiskMechanics>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StateFile {
    watts: f64,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TransitionFile {
    from: PowerState,
    to: PowerState,
    seconds: f64,
    /// Total energy of the transition.
    energy_j: Option<f64>,
    /// Energy above what the unit would draw in the `to` state for the same time
    /// (how the Write Off-Loading paper states the cost of a spin-up).
    extra_energy_j: Option<f64>,
}

impl PowerProfile {
    /// Parses and validates a profile; `origin` names the file in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<PowerProfile, ProfileError> {
        let file: ProfileFile = toml::from_str(text)
            .map_err(|source| ProfileError::Toml { origin: origin.to_string(), source })?;
        let invalid = |key: String, message: String| ProfileError::Invalid {
            origin: origin.to_string(),
            key,
            message,
        };
        let mut watts = [None; 5];
        for state in PowerState::EVERY {
            let key = format!("states.{}", state.name());
            let Some(entry) = file.states.get(&state) else {
                if PowerState::ALL.contains(&state) {
                    return Err(invalid(
                        key,
                        "missing: every profile gives active, idle and standby".into(),
                    ));
                }
                continue;
            };
            if !PowerState::ALL.contains(&state) && file.kind != UnitKind::Server {
                return Err(invalid(key, "only a server profile has this state".into()));
            }
            watts[state.index()] = Some(Power::try_from_watts(entry.watts).ok_or_else(|| {
                invalid(key, format!("watts {} is not a finite number >= 0", entry.watts))
            })?);
        }
        if watts[PowerState::Active.index()] < watts[PowerState::Idle.index()] {
            return Err(invalid("states.active".into(), "active draws less than idle".into()));
        }
        let mut transitions = Vec::with_capacity(file.transitions.len());
        for (index, entry) in file.transitions.iter().enumerate() {
            let key = format!("transitions[{index}]");
            transitions.push(
                Self::parse_transition(entry, &watts).map_err(|message| invalid(key, message))?,
            );
        }
        let mut needed =
            vec![(PowerState::Idle, PowerState::Standby), (PowerState::Standby, PowerState::Idle)];
        for state in [PowerState::IoServer, PowerState::Off] {
            if watts[state.index()].is_some() {
                needed.extend([(PowerState::Idle, state), (state, PowerState::Idle)]);
            }
        }
        for (from, to) in needed {
            if !transitions.iter().any(|t| t.from == from && t.to == to) {
                let message = format!("no transition from {} to {}", from.name(), to.name());
                return Err(invalid("transitions".into(), message));
            }
        }
        if let Some(mechanics) = &file.mechanics {
            Self::validate_mechanics(mechanics)
                .map_err(|message| invalid("mechanics".into(), message))?;
        }
        Ok(PowerProfile {
            name: file.name,
            kind: file.kind,
            source: file.source,
            watts,
            transitions,
            mechanics: file.mechanics,
        })
    }

    fn parse_transition(
        entry: &TransitionFile,
        watts: &[Option<Power>; 5],
    ) -> Result<Transition, String> {
        if entry.from == entry.to {
            return Err(format!("from and to are both {}", entry.from.name()));
        }
        if entry.from == PowerState::Active || entry.to == PowerState::Active {
            return Err("transitions go between steady states; active is idle plus I/O".into());
        }
        for state in [entry.from, entry.to] {
            if watts[state.index()].is_none() {
                return Err(format!("the profile has no state {}", state.name()));
            }
        }
        let duration = VirtualDuration::try_from_secs_f64(entry.seconds)
            .ok_or_else(|| format!("seconds {} is not a finite number >= 0", entry.seconds))?;
        let energy = match (entry.energy_j, entry.extra_energy_j) {
            (Some(total), None) => Energy::try_from_joules(total)
                .ok_or_else(|| format!("energy_j {total} is not a finite number >= 0"))?,
            (None, Some(extra)) => {
                let extra = Energy::try_from_joules(extra)
                    .ok_or_else(|| format!("extra_energy_j {extra} is not a finite number >= 0"))?;
                extra + watts[entry.to.index()].unwrap_or(Power::ZERO).over(duration)
            }
            _ => return Err("give exactly one of energy_j (total) and extra_energy_j".into()),
        };
        Ok(Transition { from: entry.from, to: entry.to, duration, energy })
    }

    fn validate_mechanics(mechanics: &DiskMechanics) -> Result<(), String> {
        let positive = [
            ("capacity_gb", mechanics.capacity_gb),
            ("transfer_mb_s", mechanics.transfer_mb_s),
            ("seek_full_ms", mechanics.seek_full_ms),
        ];
        for (key, value) in positive {
            if !(value.is_finite() && value > 0.0) {
                return Err(format!("{key} {value} must be a finite number > 0"));
            }
        }
        for (key, value) in
            [("seek_track_ms", mechanics.seek_track_ms), ("overhead_ms", mechanics.overhead_ms)]
        {
            if !(value.is_finite() && value >= 0.0) {
                return Err(format!("{key} {value} must be a finite number >= 0"));
            }
        }
        if mechanics.seek_track_ms > mechanics.seek_full_ms {
            return Err("seek_track_ms exceeds seek_full_ms".into());
        }
        if mechanics.rpm == 0 {
            return Err("rpm must be > 0".into());
        }
        Ok(())
    }

    /// The watts of `state`; zero for an optional state the profile lacks (see
    /// [`PowerProfile::has_state`]).
    pub fn watts(&self, state: PowerState) -> Power {
        self.watts[state.index()].unwrap_or(Power::ZERO)
    }

    /// Whether the profile gives `state` (the three steady states always).
    pub fn has_state(&self, state: PowerState) -> bool {
        self.watts[state.index()].is_some()
    }

    pub fn transition(&self, from: PowerState, to: PowerState) -> Option<Transition> {
        self.transitions.iter().copied().find(|t| t.from == from && t.to == to)
    }

    /// The time to spin up (standby to idle): how long I/O waits on a sleeping unit.
    pub fn wake_duration(&self) -> VirtualDuration {
        self.transition(PowerState::Standby, PowerState::Idle)
            .map_or(VirtualDuration::ZERO, |t| t.duration)
    }
}

/// 001 Table 2's model: `nodes` nodes of `profile`, `max_perf` of them in max-perf
/// (active) and the rest in the io-server state (idle where the profile has none).
pub fn io_server_cluster_watts(profile: &PowerProfile, nodes: u32, max_perf: u32) -> Power {
    let max_perf = max_perf.min(nodes);
    let rest = if profile.has_state(PowerState::IoServer) {
        PowerState::IoServer
    } else {
        PowerState::Idle
    };
    Power(
        profile.watts(PowerState::Active).0 * u64::from(max_perf)
            + profile.watts(rest).0 * u64::from(nodes - max_perf),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profiles_parse_with_the_papers_numbers() {
        // Goal: the shipped TOML reproduces the tables: Cheetah spin-up 20 J above idle
        // over 10 s (140 J in total), IBM 36Z15 135 J over 10.9 s, ECS2 node 5.4 W standby.
        for name in builtin_profile_names() {
            let profile = builtin_profile(name).unwrap();
            assert_eq!(profile.name, name);
        }
        let cheetah = builtin_profile("seagate-cheetah-15k4-36gb").unwrap();
        let up = cheetah.transition(PowerState::Standby, PowerState::Idle).unwrap();
        assert_eq!(up.duration, VirtualDuration::from_secs(10));
        assert_eq!(up.energy, Energy::try_from_joules(140.0).unwrap());
        assert_eq!(cheetah.watts(PowerState::Standby), Power(2_600_000));
        let big = builtin_profile("seagate-cheetah-15k4-146gb").unwrap();
        assert_eq!(big.wake_duration(), VirtualDuration::from_secs(15));
        assert_eq!(
            big.transition(PowerState::Standby, PowerState::Idle).unwrap().energy.as_joules(),
            200.0
        );
        let ibm = builtin_profile("ibm-ultrastar-36z15").unwrap();
        assert_eq!(
            ibm.transition(PowerState::Idle, PowerState::Standby).unwrap().energy.as_joules(),
            13.0
        );
        let node = builtin_profile("ecs2-storage-node").unwrap();
        assert_eq!(node.kind, UnitKind::Server);
        assert_eq!(node.watts(PowerState::Standby).as_watts(), 5.4);
        // The commodity server: Gandhi et al.'s 240 W busy, 150 W idle, 0 W off, and a
        // 200 s setup at 240 W.
        let xeon = builtin_profile("xeon-e5320-server").unwrap();
        assert_eq!(xeon.kind, UnitKind::Server);
        assert_eq!(xeon.watts(PowerState::Active).as_watts(), 240.0);
        assert_eq!(xeon.watts(PowerState::Idle).as_watts(), 150.0);
        assert!(xeon.has_state(PowerState::Off) && !xeon.has_state(PowerState::IoServer));
        let boot = xeon.transition(PowerState::Off, PowerState::Idle).unwrap();
        assert_eq!(boot.duration, VirtualDuration::from_secs(200));
        assert_eq!(boot.energy.as_joules(), 240.0 * 200.0);
    }

    #[test]
    fn io_server_profiles_reproduce_001_table_2_exactly() {
        // Goal: 001 Table 2: a 4-node cluster with k nodes in max-perf (252 W) and the
        // rest in the io-server state draws 585/726/867/1008 W (Obelix, 111 W),
        // 483/658/833/1008 W (Asterix-I, 77 W) and 369/582/795/1008 W (Asterix-II,
        // 39 W).
        let table = [
            ("obelix", [585.0, 726.0, 867.0, 1008.0]),
            ("asterix-i", [483.0, 658.0, 833.0, 1008.0]),
            ("asterix-ii", [369.0, 582.0, 795.0, 1008.0]),
        ];
        for (name, paper) in table {
            let profile = builtin_profile(name).unwrap();
            assert!(profile.has_state(PowerState::IoServer));
            assert!(!profile.has_state(PowerState::Off));
            for (k, watts) in paper.iter().enumerate() {
                assert_eq!(
                    io_server_cluster_watts(&profile, 4, k as u32 + 1).as_watts(),
                    *watts,
                    "{name}"
                );
            }
        }
        assert!(!builtin_profile("ecs2-storage-node").unwrap().has_state(PowerState::IoServer));
    }

    #[test]
    fn optional_states_are_for_servers_with_their_transitions() {
        // Goal: a disk with an io-server state, or a server state without its way in
        // and out, is refused with the key named.
        let disk = include_str!("../../profiles/ibm-ultrastar-36z15.toml")
            .replace("[states]", "[states]\nio_server = { watts = 1.0 }");
        let error = PowerProfile::from_toml(&disk, "d.toml").unwrap_err().to_string();
        assert!(error.contains("states.io_server") && error.contains("only a server"), "{error}");
        let server = include_str!("../../profiles/ecs2-storage-node.toml")
            .replace("[states]", "[states]\noff = { watts = 2.0 }");
        let error = PowerProfile::from_toml(&server, "s.toml").unwrap_err().to_string();
        assert!(error.contains("no transition from idle to off"), "{error}");
        let stray = format!(
            "{}\n[[transitions]]\nfrom = \"off\"\nto = \"idle\"\nseconds = 1.0\nenergy_j = 1.0\n",
            include_str!("../../profiles/ecs2-storage-node.toml")
        );
        let error = PowerProfile::from_toml(&stray, "t.toml").unwrap_err().to_string();
        assert!(error.contains("has no state off"), "{error}");
    }

    #[test]
    fn bad_profiles_name_the_key() {
        // Goal: a profile error names the key at fault, so an operator can fix the file.
        let base = include_str!("../../profiles/ibm-ultrastar-36z15.toml");
        let cases = [
            (base.replace("watts = 2.5", "watts = -2.5"), "states.standby"),
            (base.replace("seconds = 10.9", "seconds = -1"), "transitions[1]"),
            (
                base.replace("energy_j = 13.0", "energy_j = 13.0\nextra_energy_j = 1.0"),
                "transitions[0]",
            ),
            (base.replace("idle = { watts = 10.2 }", ""), "states.idle"),
            (base.replace("rpm = 15000", "rpm = 0"), "mechanics"),
        ];
        for (text, key) in cases {
            let error = PowerProfile::from_toml(&text, "test.toml").unwrap_err();
            let message = error.to_string();
            assert!(message.contains(key), "{message:?} should name {key}");
            assert!(message.contains("test.toml"), "{message:?} should name the file");
        }
        let unknown = PowerProfile::from_toml(&format!("{base}\nbogus = 1\n"), "x").unwrap_err();
        assert!(unknown.to_string().contains("bogus"), "{unknown}");
        assert!(
            builtin_profile("nope").unwrap_err().to_string().contains("seagate-cheetah-15k4-36gb")
        );
    }
}
