//! The cluster a trace is replayed on: which server and rack each volume belongs to,
//! its array (RAID level, disks, power profile), the network and the policy
//! thresholds. Read from TOML; [`Topology::msr_cambridge`] is the built-in default
//! (004 Table 4).

use std::collections::BTreeMap;

use somnus_core::offload::PolicyParams;
use somnus_core::power::{PowerProfile, builtin_profile, builtin_profile_names};
use somnus_types::{RackId, ServerId, VirtualDuration};

/// The built-in topology, the MSR Cambridge data center of 004.
const MSR_CAMBRIDGE: &str = include_str!("../topologies/msr-cambridge.toml");
/// The topology of `somnus sim demo`: six synthetic servers in three racks.
const DEMO: &str = include_str!("../topologies/demo.toml");

/// Bounds on a topology, so that a typo cannot ask for a billion disks.
const DISKS_PER_ARRAY_MAX: u32 = 64;
const VOLUMES_MAX: usize = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("topology {origin}: {source}")]
    Toml { origin: String, source: toml::de::Error },
    #[error("topology {origin}: {key}: {message}")]
    Invalid { origin: String, key: String, message: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Raid {
    /// Mirrors: a read goes to one disk, a write to all.
    Raid1,
    /// Rotating parity, left-symmetric: a small write reads old data and parity, then
    /// writes both (the small-write penalty).
    Raid5,
}

impl Raid {
    /// The name topology files and reports use.
    pub fn name(self) -> &'static str {
        match self {
            Raid::Raid1 => "raid1",
            Raid::Raid5 => "raid5",
        }
    }
}

#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ArrayFile {
    raid: Raid,
    disks: u32,
    profile: String,
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DefaultsFile {
    boot_array: ArrayFile,
    data_array: ArrayFile,
    stripe_unit_kib: u32,
    log_partition_gib: f64,
    /// Give a volume more disks (and RAID-5 instead of RAID-1) when its default array
    /// could not sustain the trace's peak load (004 4.1: "enough disks to sustain the
    /// offered load"); a volume whose `disks` the file sets keeps them.
    #[serde(default)]
    size_for_load: bool,
    /// The busiest minute may keep each disk busy at most this share of the time.
    #[serde(default = "default_utilization_max")]
    utilization_max: f64,
    /// The battery-backed write cache of each array's controller, in MiB (0: none).
    #[serde(default)]
    write_cache_mib: u32,
    /// The read cache of each array's controller, in MiB (0: none).
    #[serde(default)]
    read_cache_mib: u32,
}

fn default_utilization_max() -> f64 {
    0.5
}

/// The load a volume must sustain, measured on its trace, for sizing its array.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct VolumeLoad {
    /// Requests per second in the busiest 60 s window.
    pub peak_reads_per_s: f64,
    pub peak_writes_per_s: f64,
    pub mean_request_bytes: f64,
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RackFile {
    name: String,
    servers: Vec<String>,
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct VolumeFile {
    name: String,
    server: Option<String>,
    raid: Option<Raid>,
    disks: Option<u32>,
    profile: Option<String>,
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NetworkFile {
    rtt_ms: f64,
    link_gbps: f64,
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    vanilla_idle_s: f64,
    read_idle_s: f64,
    write_idle_s: f64,
    offload_limit_gib: f64,
    reclaim_after_idle_ms: f64,
    power_window_s: f64,
    /// "any" (004 3.1: whichever volume goes idle last stays up for the others'
    /// writes) or "cheapest" (the volume drawing least stays up).
    #[serde(default)]
    logger_host: LoggerHostFile,
}

#[derive(Clone, Copy, Debug, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum LoggerHostFile {
    #[default]
    Any,
    Cheapest,
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TopologyFile {
    defaults: DefaultsFile,
    #[serde(default)]
    rack: Vec<RackFile>,
    #[serde(default)]
    volume: Vec<VolumeFile>,
    network: NetworkFile,
    policy: PolicyFile,
}

/// Network parameters for remote off-loads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NetworkParams {
    pub round_trip: VirtualDuration,
    /// Each server's link, each way.
    pub link_bytes_per_second: f64,
}

/// One volume as laid out on the cluster.
#[derive(Clone, Debug)]
pub struct VolumeLayout {
    pub name: String,
    pub server: ServerId,
    pub rack: RackId,
    pub raid: Raid,
    pub disks: u32,
    /// Index into [`TraceLayout::profiles`].
    pub profile: usize,
    pub stripe_unit_bytes: u64,
    pub log_partition_bytes: u64,
    /// The controller's battery-backed write cache (0: writes wait for the disks).
    pub write_cache_bytes: u64,
    /// The controller's read cache (0: every read goes to the disks).
    pub read_cache_bytes: u64,
}

/// A topology applied to the volumes of one trace set.
#[derive(Clone, Debug)]
pub struct TraceLayout {
    pub volumes: Vec<VolumeLayout>,
    /// Server names, indexed by [`ServerId`].
    pub servers: Vec<String>,
    /// The rack of each server.
    pub server_racks: Vec<RackId>,
    /// Rack names, indexed by [`RackId`].
    pub racks: Vec<String>,
    pub profiles: Vec<PowerProfile>,
    pub network: NetworkParams,
    /// The thresholds of every manager (the core's type: the policy is the core's).
    pub policy: PolicyParams,
    /// The window of the peak power figure (a measurement, not a policy).
    pub power_window: VirtualDuration,
}

/// The servers, racks and profiles a layout has numbered so far, by name.
#[derive(Default)]
struct Interned {
    servers: BTreeMap<String, ServerId>,
    racks: BTreeMap<String, RackId>,
    profiles: BTreeMap<String, usize>,
}

/// A validated topology file.
#[derive(Clone, Debug)]
pub struct Topology {
    file: TopologyFile,
    origin: String,
    /// Profiles by name: the built-in ones plus any the caller registered.
    profiles: BTreeMap<String, PowerProfile>,
}

impl Topology {
    /// The built-in MSR Cambridge topology (004 Table 4).
    pub fn msr_cambridge() -> Topology {
        // The built-in file is tested; failing to parse it is a build defect.
        match Topology::from_toml(MSR_CAMBRIDGE, "built-in msr-cambridge") {
            Ok(topology) => topology,
            Err(error) => panic!("{error}"),
        }
    }

    /// The text of the built-in topology, for `somnus` to print as a starting point.
    pub fn msr_cambridge_text() -> &'static str {
        MSR_CAMBRIDGE
    }

    /// The topology of `somnus sim demo`.
    pub fn demo() -> Topology {
        // The built-in file is tested; failing to parse it is a build defect.
        match Topology::from_toml(DEMO, "built-in demo") {
            Ok(topology) => topology,
            Err(error) => panic!("{error}"),
        }
    }

    pub fn from_toml(text: &str, origin: &str) -> Result<Topology, TopologyError> {
        let file: TopologyFile = toml::from_str(text)
            .map_err(|source| TopologyError::Toml { origin: origin.to_string(), source })?;
        let mut profiles = BTreeMap::new();
        for name in builtin_profile_names() {
            if let Ok(profile) = builtin_profile(name) {
                profiles.insert(name.to_string(), profile);
            }
        }
        let topology = Topology { file, origin: origin.to_string(), profiles };
        topology.validate()?;
        Ok(topology)
    }

    /// Where the topology came from: a file's path, or `built-in NAME`.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Overrides the topology's `policy.logger_host`.
    pub fn set_logger_host(&mut self, host: somnus_core::offload::LoggerHost) {
        self.file.policy.logger_host = match host {
            somnus_core::offload::LoggerHost::Any => LoggerHostFile::Any,
            somnus_core::offload::LoggerHost::Cheapest => LoggerHostFile::Cheapest,
        };
    }

    /// Makes `profile` available to the topology's `profile` keys under its name.
    pub fn register_profile(&mut self, profile: PowerProfile) {
        self.profiles.insert(profile.name.clone(), profile);
    }

    fn invalid(&self, key: impl Into<String>, message: impl Into<String>) -> TopologyError {
        TopologyError::Invalid {
            origin: self.origin.clone(),
            key: key.into(),
            message: message.into(),
        }
    }

    fn validate(&self) -> Result<(), TopologyError> {
        let defaults = &self.file.defaults;
        for (key, array) in [
            ("defaults.boot_array", &defaults.boot_array),
            ("defaults.data_array", &defaults.data_array),
        ] {
            self.validate_array(key, array.raid, array.disks)?;
        }
        if defaults.stripe_unit_kib == 0 || !defaults.stripe_unit_kib.is_power_of_two() {
            return Err(self.invalid("defaults.stripe_unit_kib", "must be a power of two > 0"));
        }
        if !(defaults.log_partition_gib.is_finite() && defaults.log_partition_gib > 0.0) {
            return Err(self.invalid("defaults.log_partition_gib", "must be a number > 0"));
        }
        if !(defaults.utilization_max > 0.0 && defaults.utilization_max <= 1.0) {
            return Err(self.invalid("defaults.utilization_max", "must be in (0, 1]"));
        }
        let mut seen = BTreeMap::new();
        for (index, rack) in self.file.rack.iter().enumerate() {
            for server in &rack.servers {
                if let Some(other) = seen.insert(server.clone(), index) {
                    let message = format!("server {server:?} is already in rack[{other}]");
                    return Err(self.invalid(format!("rack[{index}]"), message));
                }
            }
        }
        for (index, volume) in self.file.volume.iter().enumerate() {
            let base = if is_boot_volume(&volume.name) {
                &defaults.boot_array
            } else {
                &defaults.data_array
            };
            let key = format!("volume[{index}] ({})", volume.name);
            self.validate_array(
                &key,
                volume.raid.unwrap_or(base.raid),
                volume.disks.unwrap_or(base.disks),
            )?;
        }
        self.network_params()?;
        self.policy_params()?;
        self.power_window()?;
        Ok(())
    }

    fn validate_array(&self, key: &str, raid: Raid, disks: u32) -> Result<(), TopologyError> {
        let least = match raid {
            Raid::Raid1 => 2,
            Raid::Raid5 => 3,
        };
        if disks < least || disks > DISKS_PER_ARRAY_MAX {
            let message = format!(
                "{} needs {least} to {DISKS_PER_ARRAY_MAX} disks, not {disks}",
                raid.name()
            );
            return Err(self.invalid(key, message));
        }
        Ok(())
    }

    /// A duration given in seconds under `key`.
    fn seconds(&self, key: &str, value: f64) -> Result<VirtualDuration, TopologyError> {
        self.duration(key, value, 1.0)
    }

    /// A duration given under `key` in units of `unit_s` seconds (1e-3 for `_ms` keys);
    /// the error quotes the value as the file wrote it.
    fn duration(
        &self,
        key: &str,
        value: f64,
        unit_s: f64,
    ) -> Result<VirtualDuration, TopologyError> {
        VirtualDuration::try_from_secs_f64(value * unit_s)
            .filter(|_| value.is_finite() && value >= 0.0)
            .ok_or_else(|| self.invalid(key, format!("must be a finite number >= 0, not {value}")))
    }

    fn network_params(&self) -> Result<NetworkParams, TopologyError> {
        let network = &self.file.network;
        let round_trip = self.duration("network.rtt_ms", network.rtt_ms, 1e-3)?;
        if !(network.link_gbps.is_finite() && network.link_gbps > 0.0) {
            let message = format!("must be a finite number > 0, not {}", network.link_gbps);
            return Err(self.invalid("network.link_gbps", message));
        }
        Ok(NetworkParams { round_trip, link_bytes_per_second: network.link_gbps * 1e9 / 8.0 })
    }

    fn power_window(&self) -> Result<VirtualDuration, TopologyError> {
        let power_window =
            self.seconds("policy.power_window_s", self.file.policy.power_window_s)?;
        if power_window < VirtualDuration::from_secs(1) {
            return Err(self.invalid("policy.power_window_s", "must be at least 1 s"));
        }
        Ok(power_window)
    }

    fn policy_params(&self) -> Result<PolicyParams, TopologyError> {
        let policy = &self.file.policy;
        let limit = policy.offload_limit_gib * (1u64 << 30) as f64;
        if !(limit.is_finite() && limit >= 1.0 && limit < u64::MAX as f64) {
            let message = format!("must be a finite number > 0, not {}", policy.offload_limit_gib);
            return Err(self.invalid("policy.offload_limit_gib", message));
        }
        Ok(PolicyParams {
            vanilla_idle: self.seconds("policy.vanilla_idle_s", policy.vanilla_idle_s)?,
            read_idle: self.seconds("policy.read_idle_s", policy.read_idle_s)?,
            write_idle: self.seconds("policy.write_idle_s", policy.write_idle_s)?,
            offload_limit_bytes: limit as u64,
            reclaim_after_idle: self.duration(
                "policy.reclaim_after_idle_ms",
                policy.reclaim_after_idle_ms,
                1e-3,
            )?,
            logger_host: match policy.logger_host {
                LoggerHostFile::Any => somnus_core::offload::LoggerHost::Any,
                LoggerHostFile::Cheapest => somnus_core::offload::LoggerHost::Cheapest,
            },
        })
    }

    /// Lays out the named volumes (in trace order) without sizing arrays for load.
    pub fn layout(&self, volume_names: &[String]) -> Result<TraceLayout, TopologyError> {
        self.layout_for_load(volume_names, &[])
    }

    /// Lays out the named volumes (in trace order). Servers come from the names;
    /// servers no rack lists each form a rack of their own, named after the server.
    /// With `size_for_load` set, `loads` (one per volume, or empty) size the arrays.
    pub fn layout_for_load(
        &self,
        volume_names: &[String],
        loads: &[VolumeLoad],
    ) -> Result<TraceLayout, TopologyError> {
        if !loads.is_empty() && loads.len() != volume_names.len() {
            let message = format!("{} loads for {} volumes", loads.len(), volume_names.len());
            return Err(self.invalid("volumes", message));
        }
        if volume_names.len() > VOLUMES_MAX {
            return Err(self.invalid(
                "volumes",
                format!("{} volumes exceed {VOLUMES_MAX}", volume_names.len()),
            ));
        }
        let mut layout = TraceLayout {
            volumes: Vec::with_capacity(volume_names.len()),
            servers: Vec::new(),
            server_racks: Vec::new(),
            racks: Vec::new(),
            profiles: Vec::new(),
            network: self.network_params()?,
            policy: self.policy_params()?,
            power_window: self.power_window()?,
        };
        let mut names = Interned::default();
        for (index, name) in volume_names.iter().enumerate() {
            let volume = self.volume_layout(name, loads.get(index), &mut layout, &mut names)?;
            layout.volumes.push(volume);
        }
        Ok(layout)
    }

    /// One volume's place and array, interning its server, rack and profile in `layout`.
    fn volume_layout(
        &self,
        name: &str,
        load: Option<&VolumeLoad>,
        layout: &mut TraceLayout,
        names: &mut Interned,
    ) -> Result<VolumeLayout, TopologyError> {
        let overrides = self.file.volume.iter().find(|v| v.name == name);
        let server_name =
            overrides.and_then(|v| v.server.clone()).unwrap_or_else(|| server_of(name).to_string());
        let server = self.server_id(server_name, layout, names);
        let base = if is_boot_volume(name) {
            &self.file.defaults.boot_array
        } else {
            &self.file.defaults.data_array
        };
        let profile_name =
            overrides.and_then(|v| v.profile.clone()).unwrap_or_else(|| base.profile.clone());
        let profile = self.profile_index(name, profile_name, layout, names)?;
        let mut raid = overrides.and_then(|v| v.raid).unwrap_or(base.raid);
        let mut disks = overrides.and_then(|v| v.disks).unwrap_or(base.disks);
        let fixed = overrides.is_some_and(|v| v.disks.is_some());
        let defaults = &self.file.defaults;
        if let (true, false, Some(load), Some(mechanics)) =
            (defaults.size_for_load, fixed, load, layout.profiles[profile].mechanics)
        {
            (raid, disks) = size_for_load(raid, disks, &mechanics, load, defaults.utilization_max);
        }
        Ok(VolumeLayout {
            name: name.to_string(),
            server,
            rack: layout.server_racks[server.index()],
            raid,
            disks,
            profile,
            stripe_unit_bytes: u64::from(defaults.stripe_unit_kib) * 1024,
            log_partition_bytes: (defaults.log_partition_gib * (1u64 << 30) as f64) as u64,
            write_cache_bytes: u64::from(defaults.write_cache_mib) << 20,
            read_cache_bytes: u64::from(defaults.read_cache_mib) << 20,
        })
    }

    /// The id of a server, added to `layout` (with its rack) the first time.
    fn server_id(
        &self,
        server_name: String,
        layout: &mut TraceLayout,
        names: &mut Interned,
    ) -> ServerId {
        if let Some(&id) = names.servers.get(&server_name) {
            return id;
        }
        let rack_name = self.rack_of(&server_name);
        let next_rack = RackId(names.racks.len() as u32);
        let rack = *names.racks.entry(rack_name.clone()).or_insert_with(|| {
            layout.racks.push(rack_name);
            next_rack
        });
        let id = ServerId(layout.servers.len() as u32);
        layout.servers.push(server_name.clone());
        layout.server_racks.push(rack);
        names.servers.insert(server_name, id);
        id
    }

    /// The index of a power profile in `layout`, added the first time; a profile that
    /// is unknown or not a disk is an error naming the volume.
    fn profile_index(
        &self,
        volume: &str,
        profile_name: String,
        layout: &mut TraceLayout,
        names: &mut Interned,
    ) -> Result<usize, TopologyError> {
        if let Some(&index) = names.profiles.get(&profile_name) {
            return Ok(index);
        }
        let Some(found) = self.profiles.get(&profile_name) else {
            let known = self.profiles.keys().cloned().collect::<Vec<_>>().join(", ");
            let message = format!("unknown power profile {profile_name:?}; known: {known}");
            return Err(self.invalid(format!("volume {volume}"), message));
        };
        if found.mechanics.is_none() {
            let message = format!("profile {profile_name:?} has no [mechanics]: it is not a disk");
            return Err(self.invalid(format!("volume {volume}"), message));
        }
        layout.profiles.push(found.clone());
        names.profiles.insert(profile_name, layout.profiles.len() - 1);
        Ok(layout.profiles.len() - 1)
    }

    /// The servers the racks name that no volume of `layout` lives on: in a topology
    /// written for these volumes, a misspelt server name (the built-in topologies name
    /// every server of their data center, so there it is normal).
    pub fn rack_servers_unused(&self, layout: &TraceLayout) -> Vec<(String, String)> {
        self.file
            .rack
            .iter()
            .flat_map(|rack| rack.servers.iter().map(move |server| (rack, server)))
            .filter(|(_, server)| !layout.servers.contains(server))
            .map(|(rack, server)| (rack.name.clone(), server.clone()))
            .collect()
    }

    /// The `[[volume]]` overrides naming no volume of the layout: a misspelt name, or
    /// a volume the trace set does not have.
    pub fn volume_overrides_unused(&self, layout: &TraceLayout) -> Vec<String> {
        self.file
            .volume
            .iter()
            .filter(|file| !layout.volumes.iter().any(|volume| volume.name == file.name))
            .map(|file| file.name.clone())
            .collect()
    }

    fn rack_of(&self, server: &str) -> String {
        self.file
            .rack
            .iter()
            .find(|rack| rack.servers.iter().any(|s| s == server))
            .map_or_else(|| server.to_string(), |rack| rack.name.clone())
    }
}

/// The smallest array at least as large as `(raid, disks)` whose disks stay below
/// `utilization_max` at the peak load, estimating each random operation at an average
/// seek (`track + (full - track) * 8/15` for the sqrt curve), half a rotation, the
/// transfer of a mean request and the overhead. A RAID-1 write occupies every mirror,
/// so once writes alone would overload a mirror the volume becomes RAID-5, where a
/// small write costs four operations; arrays stop at the topology's disk limit.
pub fn size_for_load(
    raid: Raid,
    disks: u32,
    mechanics: &somnus_core::power::DiskMechanics,
    load: &VolumeLoad,
    utilization_max: f64,
) -> (Raid, u32) {
    let seek_ms =
        mechanics.seek_track_ms + (mechanics.seek_full_ms - mechanics.seek_track_ms) * 8.0 / 15.0;
    let rotation_ms = 30_000.0 / f64::from(mechanics.rpm);
    let transfer_ms = load.mean_request_bytes / (mechanics.transfer_mb_s * 1e3);
    let service_s = (seek_ms + rotation_ms + transfer_ms + mechanics.overhead_ms) / 1e3;
    let ops_per_disk = utilization_max / service_s;
    let (reads, writes) = (load.peak_reads_per_s.max(0.0), load.peak_writes_per_s.max(0.0));
    let needed = |raid: Raid, disks: u32| -> f64 {
        let n = f64::from(disks);
        match raid {
            Raid::Raid1 => reads / n + writes,
            Raid::Raid5 => (reads + 4.0 * writes) / n,
        }
    };
    if needed(raid, disks) <= ops_per_disk {
        return (raid, disks);
    }
    let raid5 = ((reads + 4.0 * writes) / ops_per_disk)
        .ceil()
        .clamp(3.0, f64::from(DISKS_PER_ARRAY_MAX)) as u32;
    (Raid::Raid5, raid5.max(if raid == Raid::Raid5 { disks } else { 3 }))
}

/// The server of a volume named `server_disk`: everything before the last underscore.
pub fn server_of(volume: &str) -> &str {
    volume.rsplit_once('_').map_or(volume, |(server, _)| server)
}

/// Volume 0 of a server is its boot volume (004 section 2: a RAID-1 pair).
fn is_boot_volume(volume: &str) -> bool {
    volume.rsplit_once('_').is_some_and(|(_, disk)| disk == "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msr_volumes_land_on_the_racks_of_table_4() {
        // Goal: the built-in topology puts hm and rsrch volumes in racks 1 and 3 as
        // 004 Table 4 does, boot volumes on RAID-1 pairs, and an unknown server in a
        // rack of its own.
        let topology = Topology::msr_cambridge();
        let names: Vec<String> =
            ["hm_0", "rsrch_1", "hm_1", "wsrch_3"].iter().map(|s| s.to_string()).collect();
        let layout = topology.layout(&names).unwrap();
        let rack_of = |i: usize| layout.racks[layout.volumes[i].rack.index()].as_str();
        assert_eq!(rack_of(0), "rack1");
        assert_eq!(rack_of(1), "rack3");
        assert_eq!(rack_of(3), "wsrch");
        assert_eq!(layout.volumes[0].server, layout.volumes[2].server);
        assert_eq!(layout.volumes[0].raid, Raid::Raid1);
        assert_eq!(layout.volumes[2].raid, Raid::Raid5);
        assert_eq!(layout.volumes[2].disks, 4);
        assert_eq!(layout.policy.write_idle, VirtualDuration::from_secs(10));
        assert_eq!(layout.policy.offload_limit_bytes, 1 << 30);
        assert_eq!(
            layout.profiles[layout.volumes[2].profile].wake_duration(),
            VirtualDuration::from_secs(15)
        );
    }

    #[test]
    fn the_demo_topology_has_three_racks_of_two_servers() {
        let names: Vec<String> =
            (0..6).flat_map(|s| (0..2).map(move |v| format!("s{s:02}_{v}"))).collect();
        let layout = Topology::demo().layout(&names).unwrap();
        assert_eq!(layout.racks, vec!["rack1", "rack2", "rack3"]);
        assert_eq!(layout.servers.len(), 6);
        assert_eq!(layout.volumes.iter().filter(|v| v.raid == Raid::Raid1).count(), 6);
    }

    #[test]
    fn arrays_grow_to_sustain_the_peak_load() {
        // Goal: a quiet volume keeps its default array; a busy one gets enough RAID-5
        // disks that its peak minute stays under the utilization bound. With the
        // Cheetah 15K.4 a 4 KiB random operation takes 0.2 + 7.2 * 8/15 + 2 + 0.05 +
        // 0.1 = 6.19 ms, so a disk at 50 % serves about 80.8 operations per second.
        let topology = Topology::msr_cambridge();
        let mechanics = topology.profiles["seagate-cheetah-15k4-146gb"].mechanics.unwrap();
        let quiet = VolumeLoad {
            peak_reads_per_s: 20.0,
            peak_writes_per_s: 10.0,
            mean_request_bytes: 4096.0,
        };
        assert_eq!(size_for_load(Raid::Raid1, 2, &mechanics, &quiet, 0.5), (Raid::Raid1, 2));
        let busy = VolumeLoad {
            peak_reads_per_s: 800.0,
            peak_writes_per_s: 100.0,
            mean_request_bytes: 4096.0,
        };
        // (800 + 4 * 100) / 80.8 = 14.9, so 15 disks.
        assert_eq!(size_for_load(Raid::Raid1, 2, &mechanics, &busy, 0.5), (Raid::Raid5, 15));
        assert_eq!(size_for_load(Raid::Raid5, 20, &mechanics, &busy, 0.5), (Raid::Raid5, 20));
        let huge = VolumeLoad { peak_reads_per_s: 1e6, ..busy };
        assert_eq!(size_for_load(Raid::Raid5, 4, &mechanics, &huge, 0.5).1, DISKS_PER_ARRAY_MAX);
        let names = vec!["hm_0".to_string(), "hm_1".to_string()];
        let layout = topology.layout_for_load(&names, &[busy, quiet]).unwrap();
        assert_eq!((layout.volumes[0].raid, layout.volumes[0].disks), (Raid::Raid5, 15));
        assert_eq!((layout.volumes[1].raid, layout.volumes[1].disks), (Raid::Raid5, 4));
    }

    #[test]
    fn bad_topologies_name_the_key() {
        // Goal: every invalid value names its key and the file.
        let base = Topology::msr_cambridge_text();
        let cases = [
            (base.replace("disks = 4", "disks = 2"), "defaults.data_array"),
            (base.replace("link_gbps = 1.0", "link_gbps = 0.0"), "network.link_gbps"),
            (base.replace("link_gbps = 1.0", "link_gbps = inf"), "finite number > 0, not inf"),
            (
                base.replace("rtt_ms = 0.2", "rtt_ms = -0.2"),
                "network.rtt_ms: must be a finite number >= 0, not -0.2",
            ),
            (base.replace("disks = 4", "disks = 2"), "raid5 needs 3 to 64 disks"),
            (base.replace("write_idle_s = 10.0", "write_idle_s = -1.0"), "policy.write_idle_s"),
            (
                base.replace("stripe_unit_kib = 64", "stripe_unit_kib = 48"),
                "defaults.stripe_unit_kib",
            ),
            (base.replace("\"prn\", \"hm\"", "\"prn\", \"hm\", \"ts\""), "rack[2]"),
            (
                format!("{base}\n[[volume]]\nname = \"x_1\"\nraid = \"raid5\"\ndisks = 2\n"),
                "volume[0] (x_1)",
            ),
        ];
        for (text, key) in cases {
            let message = Topology::from_toml(&text, "t.toml").unwrap_err().to_string();
            assert!(
                message.contains(key) && message.contains("t.toml"),
                "{message:?} should name {key}"
            );
        }
        let text = base.replace("seagate-cheetah-15k4-146gb", "no-such-disk");
        let message = Topology::from_toml(&text, "t.toml")
            .unwrap()
            .layout(&["a_1".into()])
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("no-such-disk") && message.contains("ibm-ultrastar-36z15"),
            "{message}"
        );
        let text = base.replace("seagate-cheetah-15k4-146gb", "ecs2-storage-node");
        let message = Topology::from_toml(&text, "t.toml")
            .unwrap()
            .layout(&["a_1".into()])
            .unwrap_err()
            .to_string();
        assert!(message.contains("not a disk"), "{message}");
    }
}
