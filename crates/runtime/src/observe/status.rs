//! What each process reports of itself (`GET /status` as JSON, and the Prometheus
//! metrics): the MDS its view of the cluster, a server its own state and energy.

use serde::{Deserialize, Serialize};
use somnus_core::cluster::ServerPower;
use somnus_core::cluster::mds::MdsCounters;
use somnus_core::cluster::server::ServerCounters;

use crate::power::PowerReading;

/// The MDS's report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MdsReport {
    /// The gear: how many gear groups serve (1..=replicas).
    pub gear: u32,
    pub replicas: u32,
    pub objects: usize,
    /// New replicas whose copy is not yet done (after `server remove`).
    pub rebuilds_under_way: usize,
    pub servers: Vec<MdsServerView>,
    /// Every chunk group: its replicas and primary.
    #[serde(default)]
    pub groups: Vec<GroupReport>,
    pub counters: MdsCounters,
    /// Space over the whole cluster (docs/space.md): what its names hold, and per
    /// server below.
    #[serde(default)]
    pub space: ClusterSpace,
    /// RAPL package energy of the MDS's host since it started, where exposed.
    pub rapl_joules: Option<f64>,
    pub wire: WireReport,
}

/// One server as the MDS sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MdsServerView {
    pub id: u32,
    pub rack: u32,
    pub gear_group: u32,
    pub power: ServerPower,
    /// Chunk groups it leads.
    pub primaries: usize,
    /// Chunk groups it holds a replica of (after rebuilds).
    pub chunk_groups: usize,
    /// Its last heartbeat said its disk is full: writes to its groups are refused.
    #[serde(default)]
    pub full: bool,
    /// Its disk, as its last heartbeat told (a sleeping server's from before it
    /// slept), and the bytes waiting to be freed there.
    #[serde(default)]
    pub space: ServerSpace,
}

/// A server's space, as the MDS knows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerSpace {
    /// Bytes of data its replicas hold, each block once.
    pub stored_bytes: u64,
    /// Bytes its files take on its disk, last measured.
    pub disk_bytes: Option<u64>,
    /// Free bytes on its disk, last measured.
    pub free_bytes: Option<u64>,
    /// Bytes of deleted data it is to free (at most: a chunk may be written in part).
    pub to_free_bytes: u64,
}

/// The cluster's space, summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSpace {
    /// Bytes the names hold, as their writers stored them (each once, before
    /// replication; whole blocks).
    pub logical_bytes: u64,
    /// Over every server: data held (each replica), files on disk, free, to free.
    pub stored_bytes: u64,
    pub disk_bytes: u64,
    pub free_bytes: u64,
    pub to_free_bytes: u64,
    /// Entries of the free log not yet applied by every server they wait for.
    pub frees_queued: usize,
}

/// One chunk group as the MDS sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupReport {
    pub id: u32,
    pub replicas: Vec<u32>,
    /// The server that leads it (granted), if any.
    pub primary: Option<u32>,
}

/// A server's report of itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerReport {
    pub id: u32,
    /// The core's power state (`None` before its task starts).
    pub power: Option<ServerPower>,
    pub leads: usize,
    /// Free bytes on its disk, last measured (none before the first measure).
    #[serde(default)]
    pub free_bytes: Option<u64>,
    /// It counts its disk full: below the reserve, or a write found no room.
    #[serde(default)]
    pub full: bool,
    /// Bytes of other servers' DVLs its logger holds (live), and uses on disk.
    pub dvl_live_bytes: u64,
    pub dvl_used_bytes: u64,
    /// Bytes of data its replicas hold (each block once), and bytes its files take.
    #[serde(default)]
    pub stored_bytes: u64,
    #[serde(default)]
    pub disk_bytes: Option<u64>,
    /// Its packs' slots in use and reserved, and its journals' bytes no checkpoint
    /// covers yet.
    #[serde(default)]
    pub slots_used: u64,
    #[serde(default)]
    pub slots_reserved: u64,
    #[serde(default)]
    pub journal_bytes: u64,
    pub counters: ServerCounters,
    pub energy: PowerReading,
    pub wire: WireReport,
}

/// What a process's transport saw.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WireReport {
    pub connections_authenticated: u64,
    /// Connections refused, by kind (garbage, a wrong secret, an oversized frame...).
    pub refused: Vec<(String, u64)>,
    pub frames_in: u64,
    pub frames_out: u64,
    /// Messages dropped because their peer could not be reached.
    pub dropped: u64,
    /// Messages dropped because their peer's queue was full (a slow or stuck peer).
    #[serde(default)]
    pub queue_full: u64,
}

impl WireReport {
    pub fn of(counters: &crate::net::transport::WireCounters) -> WireReport {
        use std::sync::atomic::Ordering;
        WireReport {
            connections_authenticated: counters.authenticated(),
            refused: counters.refusals().map(|(kind, n)| (kind.to_owned(), n)).collect(),
            frames_in: counters.frames_in().0,
            frames_out: counters.frames_out.load(Ordering::Relaxed),
            dropped: counters.dropped(),
            queue_full: counters.queue_full(),
        }
    }

    pub fn refused_total(&self) -> u64 {
        self.refused.iter().map(|(_, n)| n).sum()
    }
}
