//! The cluster file (`cluster.toml`, docs/runtime.md "The cluster file"): what every
//! process of one cluster agrees on — the layout's parameters, the protocol's sizes,
//! and the address book (where the MDS and each storage server listen, and where each
//! keeps its data). `somnus up` writes one; a deployment on many machines writes it
//! by hand and gives every process the same file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use somnus_core::cluster::{ClusterConfig, Peer, ServerPlaces};
use somnus_core::gear::{Capability, Gearing, LeadTimes, Policy, SchedulerConfig};
use somnus_core::layout::{Layout, LayoutSpec, RackAssignment, Scheme};
use somnus_core::power::{PowerProfile, PowerState, UnitKind, builtin_profile};
use somnus_types::{ServerId, VirtualDuration, VirtualInstant};

use crate::power::PowerSection;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    pub cluster: ClusterSection,
    pub mds: MdsSection,
    /// The MDS's gear scheduler; without this section the gear is the operator's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gear: Option<GearSection>,
    #[serde(rename = "server")]
    pub servers: Vec<ServerSection>,
}

/// `[gear]`: how the MDS's gear scheduler decides (docs/gear-scheduler.md). Times are
/// on the cluster's clock (a `time_scale` of 60 runs a day in 24 minutes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GearSection {
    /// `hybrid` (the forecast corrected by what is measured) or `predictor` (Sierra's
    /// hour-of-day forecast alone).
    #[serde(default = "GearSection::default_policy")]
    pub policy: Policy,
    /// `fractional` (servers of a gear group too) or `full` (whole gear groups).
    #[serde(default = "GearSection::default_gearing")]
    pub gearing: Gearing,
    /// The gearing interval, seconds; it must divide `day_s`.
    #[serde(default = "GearSection::default_interval")]
    pub interval_s: u64,
    /// The predictor's day, seconds.
    #[serde(default = "GearSection::default_day")]
    pub day_s: u64,
    /// The hybrid's reactive shift provisions this share above the measured load.
    #[serde(default = "GearSection::default_headroom")]
    pub headroom: f64,
    /// Intervals in a row below forecast before the hybrid forecasts lower (>= 2).
    #[serde(default = "GearSection::default_quiet")]
    pub quiet_intervals: u32,
    /// How long a reactive shift holds at least, seconds (default: one interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dwell_s: Option<u64>,
    /// What one server serves (Sierra 3.5), measured or from its data sheet; default
    /// Sierra Table 4's: 137 read and 179 write IOPS, 82 MiB/s either way.
    #[serde(default = "GearSection::default_capability")]
    pub capability: Capability,
}

impl Default for GearSection {
    fn default() -> GearSection {
        GearSection {
            policy: GearSection::default_policy(),
            gearing: GearSection::default_gearing(),
            interval_s: GearSection::default_interval(),
            day_s: GearSection::default_day(),
            headroom: GearSection::default_headroom(),
            quiet_intervals: GearSection::default_quiet(),
            dwell_s: None,
            capability: GearSection::default_capability(),
        }
    }
}

impl GearSection {
    fn default_policy() -> Policy {
        Policy::Hybrid
    }
    fn default_gearing() -> Gearing {
        Gearing::Fractional
    }
    fn default_interval() -> u64 {
        3600
    }
    fn default_day() -> u64 {
        86_400
    }
    fn default_headroom() -> f64 {
        0.2
    }
    fn default_quiet() -> u32 {
        2
    }
    fn default_capability() -> Capability {
        Capability::SIERRA_TABLE_4
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    /// Replicas of every chunk group (r), also the number of gear groups.
    pub replicas: u32,
    /// Racks the servers are spread over (each replica of a group in its own rack).
    pub racks: u32,
    /// Chunk groups per server (the layout has servers x this).
    pub groups_per_server: u32,
    /// Bytes of each chunk.
    pub chunk_size_bytes: u64,
    /// Room of each server's logger for other servers' DVLs.
    pub logger_capacity_bytes: u64,
    /// Seed of the layout and of the MDS's choices.
    pub seed: u64,
    /// How much faster than real time the cluster's clock runs (1 = real time).
    #[serde(default = "one")]
    pub time_scale: f64,
    /// The built-in power profile of a storage server: its modelled watts per state
    /// and the time of its sleep and wake (`somnus show profiles`).
    #[serde(default = "default_server_profile")]
    pub server_profile: String,
    /// Free bytes each server keeps on its disk: below them it counts itself full and
    /// writes to its chunk groups are refused with a "no space" error, so that the
    /// writes under way, its journal's checkpoint and its logger have room.
    #[serde(default = "default_disk_reserve")]
    pub disk_reserve_bytes: u64,
    /// Seconds a deleted or replaced object's data stays on the servers before they
    /// free it (on the cluster's clock), so that a read begun on it reads it whole
    /// (docs/space.md).
    #[serde(default = "default_free_grace", skip_serializing_if = "is_default_free_grace")]
    pub free_grace_s: f64,
    /// Seconds an allocated data object may stay unbound before it is freed (a writer
    /// that died between its data and its bind).
    #[serde(default = "default_pending_grace", skip_serializing_if = "is_default_pending_grace")]
    pub pending_grace_s: f64,
    /// Seconds a client works at one operation (a GET, a PUT's part, a lookup)
    /// before it gives up with a timeout (on the cluster's clock).
    #[serde(default = "default_op_deadline", skip_serializing_if = "is_default_op_deadline")]
    pub op_deadline_s: f64,
    /// How the cluster's processes speak to each other: `tls` (the default) or `plain`.
    #[serde(default, skip_serializing_if = "Wire::is_tls")]
    pub wire: Wire,
}

/// The cluster wire's protection (`[cluster] wire`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Wire {
    /// TLS 1.3, each process with a certificate of the cluster's CA naming its role
    /// and id: nobody without the secret can read, alter, replay or relay a frame.
    #[default]
    Tls,
    /// Frames in the clear, authenticated only at the connection's start: for a
    /// network only the cluster's machines can reach (and to measure TLS's cost).
    Plain,
}

impl Wire {
    fn is_tls(&self) -> bool {
        *self == Wire::Tls
    }
}

/// Seconds (checked to be finite and within a year) as a duration.
fn seconds(value: f64) -> VirtualDuration {
    VirtualDuration::from_nanos((value.max(0.0) * 1e9) as u64)
}

fn one() -> f64 {
    1.0
}

fn default_free_grace() -> f64 {
    ClusterConfig::sierra().free_grace.as_secs_f64()
}

fn is_default_free_grace(value: &f64) -> bool {
    *value == default_free_grace()
}

fn default_pending_grace() -> f64 {
    ClusterConfig::sierra().pending_grace.as_secs_f64()
}

fn is_default_pending_grace(value: &f64) -> bool {
    *value == default_pending_grace()
}

fn default_op_deadline() -> f64 {
    ClusterConfig::sierra().op_deadline.as_secs_f64()
}

fn is_default_op_deadline(value: &f64) -> bool {
    *value == default_op_deadline()
}

fn default_server_profile() -> String {
    "ecs2-storage-node".into()
}

fn default_disk_reserve() -> u64 {
    256 << 20
}

impl Default for ClusterSection {
    /// What `somnus up` writes: r = 3 in 3 racks, 8 chunk groups per server, 1 MiB
    /// chunks, 256 MiB loggers, seed 1, real time, the ECS2 storage node, a reserve
    /// of 256 MiB free on each server's disk.
    fn default() -> ClusterSection {
        ClusterSection {
            replicas: 3,
            racks: 3,
            groups_per_server: 8,
            chunk_size_bytes: 1 << 20,
            logger_capacity_bytes: 256 << 20,
            seed: 1,
            time_scale: one(),
            server_profile: default_server_profile(),
            disk_reserve_bytes: default_disk_reserve(),
            free_grace_s: default_free_grace(),
            pending_grace_s: default_pending_grace(),
            op_deadline_s: default_op_deadline(),
            wire: Wire::Tls,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MdsSection {
    pub address: SocketAddr,
    /// Where the MDS serves HTTP: metrics, status and the operator's commands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<SocketAddr>,
    /// Where the MDS keeps its command log (relative to the cluster file's directory).
    pub data_dir: PathBuf,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    pub id: u32,
    /// Where the server listens for its peers (TCP) and for its wake packet (UDP).
    pub address: SocketAddr,
    /// Where the server serves HTTP: metrics and status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<SocketAddr>,
    /// Where the server keeps its chunks and its logger (relative to the file's
    /// directory).
    pub data_dir: PathBuf,
    /// How the server's units sleep (default: emulated).
    #[serde(default, skip_serializing_if = "is_default")]
    pub power: PowerSection,
}

fn is_default(power: &PowerSection) -> bool {
    *power == PowerSection::default()
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterFileError {
    #[error("cannot read the cluster file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the cluster file {path} is not valid: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

impl ClusterFile {
    /// Reads and checks the file at `path`; relative data directories are taken from
    /// the file's own directory.
    pub fn load(path: &Path) -> Result<ClusterFile, ClusterFileError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ClusterFileError::Read { path: path.to_owned(), source })?;
        let invalid = |reason: String| ClusterFileError::Invalid { path: path.to_owned(), reason };
        let mut file: ClusterFile = toml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        file.check().map_err(invalid)?;
        let base = path.parent().unwrap_or(Path::new("."));
        file.mds.data_dir = base.join(&file.mds.data_dir);
        for server in &mut file.servers {
            server.data_dir = base.join(&server.data_dir);
        }
        Ok(file)
    }

    fn check(&self) -> Result<(), String> {
        for (index, server) in self.servers.iter().enumerate() {
            if server.id as usize != index {
                return Err(format!(
                    "server entries must be listed by id from 0: entry {index} has id {}",
                    server.id
                ));
            }
        }
        if !(self.cluster.time_scale.is_finite() && self.cluster.time_scale > 0.0) {
            return Err(format!("time_scale must be above 0, not {}", self.cluster.time_scale));
        }
        let graces = [
            ("free_grace_s", self.cluster.free_grace_s),
            ("pending_grace_s", self.cluster.pending_grace_s),
            ("op_deadline_s", self.cluster.op_deadline_s),
        ];
        for (key, value) in graces {
            // A day of nanoseconds fits easily; a year is the bound of any sane grace.
            if !(value.is_finite() && (0.0..=365.0 * 86_400.0).contains(&value)) {
                return Err(format!("{key} must be 0 to a year of seconds, not {value}"));
            }
        }
        for server in &self.servers {
            server.power.check().map_err(|e| format!("server {}: power: {e}", server.id))?;
        }
        self.server_profile().map_err(|e| e.to_string())?;
        self.scheduler_config()?;
        self.config().validate()?;
        self.layout().map(|_| ()).map_err(|e| e.to_string())
    }

    /// A cluster whose MDS listens at `mds` and server `i` at `servers[i]`, with the
    /// data directories `mds` and `server-<i>` beside the file (what `somnus up` and
    /// the tests write).
    pub fn on(
        cluster: ClusterSection,
        mds: SocketAddr,
        servers: impl IntoIterator<Item = SocketAddr>,
    ) -> ClusterFile {
        let servers = servers.into_iter().enumerate().map(|(id, address)| ServerSection {
            id: id as u32,
            address,
            http: None,
            data_dir: format!("server-{id}").into(),
            power: PowerSection::default(),
        });
        ClusterFile {
            cluster,
            mds: MdsSection { address: mds, http: None, data_dir: "mds".into() },
            gear: None,
            servers: servers.collect(),
        }
    }

    /// The same cluster serving HTTP: the MDS at `mds`, server `i` at `servers[i]`.
    pub fn with_http(
        mut self,
        mds: SocketAddr,
        servers: impl IntoIterator<Item = SocketAddr>,
    ) -> ClusterFile {
        self.mds.http = Some(mds);
        for (server, http) in self.servers.iter_mut().zip(servers) {
            server.http = Some(http);
        }
        self
    }

    /// The servers' power profile; one without a sleep and a wake is refused.
    pub fn server_profile(&self) -> Result<PowerProfile, String> {
        let name = &self.cluster.server_profile;
        let profile = builtin_profile(name).map_err(|e| format!("server_profile: {e}"))?;
        let both =
            [(PowerState::Idle, PowerState::Standby), (PowerState::Standby, PowerState::Idle)]
                .iter()
                .all(|(from, to)| profile.transition(*from, *to).is_some());
        if profile.kind != UnitKind::Server || !both {
            return Err(format!(
                "server_profile {name:?} is not a server's profile with a sleep and a wake"
            ));
        }
        Ok(profile)
    }

    /// The file's text, as `somnus up` writes it.
    pub fn to_toml(&self) -> String {
        let text = toml::to_string_pretty(self).unwrap_or_default();
        format!(
            "# A somnus cluster: its layout, its protocol's sizes and where each process \
             listens.\n# Every process of the cluster reads this same file \
             (docs/runtime.md, \"The cluster file\").\n\n{text}"
        )
    }

    /// The layout every process builds alike from the file.
    pub fn layout(&self) -> Result<Layout, somnus_core::layout::LayoutError> {
        let c = &self.cluster;
        Layout::build(&LayoutSpec {
            servers: self.servers.len() as u32,
            replicas: c.replicas,
            racks: c.racks,
            chunk_groups: self.servers.len() as u32 * c.groups_per_server,
            scheme: Scheme::PowerAware(RackAssignment::Rotated),
            seed: c.seed,
        })
    }

    pub fn topology(&self) -> Result<ServerPlaces, somnus_core::layout::LayoutError> {
        Ok(ServerPlaces::of(&self.layout()?))
    }

    /// The protocol's timing and sizes: Sierra's, with the file's sizes.
    pub fn config(&self) -> ClusterConfig {
        ClusterConfig {
            replicas: self.cluster.replicas,
            chunk_size_bytes: self.cluster.chunk_size_bytes,
            logger_capacity_bytes: self.cluster.logger_capacity_bytes,
            seed: self.cluster.seed,
            disk_reserve_bytes: self.cluster.disk_reserve_bytes,
            free_grace: seconds(self.cluster.free_grace_s),
            pending_grace: seconds(self.cluster.pending_grace_s),
            op_deadline: seconds(self.cluster.op_deadline_s),
            ..ClusterConfig::sierra()
        }
    }

    /// The MDS's gear scheduler, if the file has a `[gear]` section; an error names
    /// the key out of range. Rises are made the servers' wake time ahead, with two
    /// heartbeats' margin (`LeadTimes`).
    pub fn scheduler_config(&self) -> Result<Option<SchedulerConfig>, String> {
        let Some(gear) = &self.gear else { return Ok(None) };
        let wake = self.server_profile()?.wake_duration();
        let interval = VirtualDuration::from_secs(gear.interval_s);
        let leads = LeadTimes::of(wake, self.config().heartbeat_interval, interval);
        let config = SchedulerConfig {
            replicas: self.cluster.replicas,
            // The MDS fills in its gear groups' sizes.
            group_sizes: vec![1; self.cluster.replicas as usize],
            capability: gear.capability,
            gearing: gear.gearing,
            gear_min: self.config().gear_min,
            policy: gear.policy,
            interval,
            day: VirtualDuration::from_secs(gear.day_s),
            origin: VirtualInstant::ZERO,
            wake_lead: leads.wake_lead,
            report_delay: leads.report_delay,
            headroom: gear.headroom,
            dwell: gear.dwell_s.map_or(interval, VirtualDuration::from_secs),
            quiet_intervals: gear.quiet_intervals,
            forecast_margin: 0.0,
        };
        config.validate().map_err(|error| format!("[gear]: {error}"))?;
        Ok(Some(config))
    }

    /// Where `peer` listens (clients do not).
    pub fn address(&self, peer: Peer) -> Option<SocketAddr> {
        match peer {
            Peer::Mds => Some(self.mds.address),
            Peer::Server(ServerId(id)) => self.servers.get(id as usize).map(|s| s.address),
            Peer::Client(_) => None,
        }
    }

    /// The cluster's secret, beside the file.
    pub fn secret_path(path: &Path) -> PathBuf {
        path.with_file_name("cluster.secret")
    }
}

/// A nine-server cluster on loopback ports 7000..7010, for the crate's unit tests.
#[cfg(test)]
pub(crate) fn test_file() -> ClusterFile {
    let cluster = ClusterSection {
        groups_per_server: 4,
        logger_capacity_bytes: 64 << 20,
        ..ClusterSection::default()
    };
    let address = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    ClusterFile::on(cluster, address(7000), (7001..7010).map(address))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> ClusterFile {
        test_file()
    }

    #[test]
    fn a_written_file_loads_back_with_its_directories_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        std::fs::write(&path, file().to_toml()).unwrap();
        let loaded = ClusterFile::load(&path).unwrap();
        assert_eq!(loaded.servers.len(), 9);
        assert_eq!(loaded.mds.data_dir, dir.path().join("mds"));
        assert_eq!(loaded.address(Peer::Server(ServerId(2))), Some(file().servers[2].address));
    }

    #[test]
    fn a_bad_file_is_refused_naming_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        let mut bad = file();
        bad.servers[3].id = 7;
        std::fs::write(&path, bad.to_toml()).unwrap();
        let error = ClusterFile::load(&path).unwrap_err().to_string();
        assert!(error.contains("entry 3 has id 7"), "{error}");
        std::fs::write(&path, "[cluster]\nreplicas = 3\nbogus = 1\n").unwrap();
        let error = ClusterFile::load(&path).unwrap_err().to_string();
        assert!(error.contains("bogus"), "{error}");
        let mut bad = file();
        bad.cluster.racks = 20;
        std::fs::write(&path, bad.to_toml()).unwrap();
        let error = ClusterFile::load(&path).unwrap_err().to_string();
        assert!(error.contains("racks"), "{error}");
        let mut bad = file();
        bad.cluster.server_profile = "seagate-cheetah-15k4-36gb".into();
        std::fs::write(&path, bad.to_toml()).unwrap();
        let error = ClusterFile::load(&path).unwrap_err().to_string();
        assert!(error.contains("not a server's profile"), "{error}");
        let mut bad = file();
        bad.servers[1].power.mac = Some("12:34".into());
        std::fs::write(&path, bad.to_toml()).unwrap();
        let error = ClusterFile::load(&path).unwrap_err().to_string();
        assert!(error.contains("server 1: power: mac"), "{error}");
        let mut bad = file();
        bad.cluster.op_deadline_s = 0.5;
        std::fs::write(&path, bad.to_toml()).unwrap();
        let error = ClusterFile::load(&path).unwrap_err().to_string();
        assert!(error.contains("op_deadline"), "{error}");
    }
}
