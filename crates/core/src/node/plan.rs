//! From a cluster's map to each node's configuration: which loggers each manager may
//! off-load to under a configuration of 004 section 4.1 (none for the baseline and
//! vanilla, the loggers of the same server for machine-level off-load, those of the
//! same rack for rack-level), and who watches each logger.

use std::collections::BTreeMap;

use somnus_types::{LoggerId, Power, RackId, ServerId, VirtualDuration, VolumeId};

use super::{NodeConfig, NodeVolume};
use crate::logger::LogGeometry;
use crate::offload::{ConfigKind, ManagerConfig, PolicyParams, ViewEntry};

/// The largest log segment (the engine's default); a smaller partition uses one
/// segment of its own size.
const SEGMENT_BYTES_MAX: u64 = LogGeometry::SEGMENT_BYTES_DEFAULT;

/// Where one volume lives and what it costs to keep spinning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolumePlacement {
    pub volume: VolumeId,
    pub server: ServerId,
    pub rack: RackId,
    /// What its disks draw spinning idle: the cost of keeping it up as a logger host.
    pub idle_power: Power,
    /// The log partition at the end of the volume: where it starts, how big it is.
    pub log_offset_bytes: u64,
    pub log_bytes: u64,
}

/// Every volume of a cluster, indexed by `VolumeId`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterMap {
    pub volumes: Vec<VolumePlacement>,
}

/// The configuration of every node of `map` under `kind`, in server order.
pub fn plan_cluster(map: &ClusterMap, kind: ConfigKind, params: &PolicyParams) -> Vec<NodeConfig> {
    for (index, volume) in map.volumes.iter().enumerate() {
        assert_eq!(volume.volume.index(), index, "the map is indexed by volume id");
    }
    let servers: BTreeMap<VolumeId, ServerId> =
        map.volumes.iter().map(|volume| (volume.volume, volume.server)).collect();
    let views: Vec<Vec<ViewEntry>> =
        map.volumes.iter().map(|volume| view(map, volume, kind)).collect();
    let mut watchers: Vec<Vec<VolumeId>> = vec![Vec::new(); map.volumes.len()];
    for (manager, entries) in views.iter().enumerate() {
        for entry in entries.iter().filter(|entry| entry.logger.index() != manager) {
            watchers[entry.logger.index()].push(VolumeId(manager as u32));
        }
    }
    let mut nodes: BTreeMap<ServerId, NodeConfig> = BTreeMap::new();
    for (index, volume) in map.volumes.iter().enumerate() {
        let mut manager =
            ManagerConfig::new(volume.volume, kind.power_policy(params), views[index].clone());
        manager.reclaim_after_idle = params.reclaim_after_idle;
        manager.logger_host = params.logger_host;
        manager.home_idle_power = volume.idle_power;
        let node = nodes.entry(volume.server).or_insert_with(|| NodeConfig {
            server: volume.server,
            volumes: Vec::new(),
            servers: servers.clone(),
            reservation_lease: VirtualDuration::from_secs(10),
            log_collect_at_percent: 75,
            disk_ios_max: 1 << 24,
        });
        let segment_bytes = SEGMENT_BYTES_MAX.min(volume.log_bytes);
        node.volumes.push(NodeVolume {
            manager,
            log: LogGeometry { segment_bytes, ..LogGeometry::with_capacity(volume.log_bytes) },
            log_offset_bytes: volume.log_offset_bytes,
            watchers: std::mem::take(&mut watchers[index]),
        });
    }
    nodes.into_values().collect()
}

/// The loggers a volume's manager may off-load to under `kind`, in volume order.
fn view(map: &ClusterMap, volume: &VolumePlacement, kind: ConfigKind) -> Vec<ViewEntry> {
    let in_view = |other: &VolumePlacement| match kind {
        ConfigKind::Baseline | ConfigKind::Vanilla => false,
        ConfigKind::Machine => other.server == volume.server,
        ConfigKind::Rack => other.rack == volume.rack,
    };
    map.volumes
        .iter()
        .filter(|other| in_view(other))
        .map(|other| ViewEntry {
            logger: LoggerId(other.volume.0),
            remote: other.server != volume.server,
            shares_home_disks: other.volume == volume.volume,
            host_idle_power: other.idle_power,
        })
        .collect()
}
