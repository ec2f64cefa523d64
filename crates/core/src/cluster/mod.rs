//! The cluster protocol (docs/protocol.md): the metadata service ([`mds`]), the
//! storage server ([`server`], with the distributed virtual log of its primaries and
//! the logger it runs for others, [`logvolume`]), the replicas' durable state
//! ([`store`]) and the client ([`client`]), each a deterministic sans-IO state
//! machine; [`replay`] admits a trace's requests to a cluster. Messages between them
//! are one enum, [`Message`].

pub mod client;
pub mod logvolume;
pub mod mds;
mod message;
mod payload;
pub mod replay;
pub mod server;
pub mod store;

pub use message::{
    BindCondition, BindRequest, ChunkId, ChunkIndex, ClientId, DvlHandoff, Epoch, GroupView,
    HeldObject, LeaseGrant, LeaseRenewal, ListedObject, LogRecord, LoggedExtent, Message,
    MetadataError, ObjectInfo, ObjectRef, Peer, Piece, ReplyBody, RequestError, ServerTime,
    SpaceReport, Stamp, Stamps, UnstableWrite,
};
pub use payload::Payload;

use somnus_types::{GearGroupId, RackId, ServerId, VirtualDuration};

use crate::layout::Layout;

/// Where every server is: its rack and gear group (the DVL's logger choice, 3.3.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerPlaces {
    racks: Vec<RackId>,
    gear_groups: Vec<GearGroupId>,
}

impl ServerPlaces {
    pub fn of(layout: &Layout) -> ServerPlaces {
        let servers = layout.servers();
        ServerPlaces {
            racks: servers.iter().map(|s| s.rack).collect(),
            // A layout without gear groups (naive random) puts each server in its own.
            gear_groups: (0..servers.len())
                .map(|i| servers[i].gear_group.unwrap_or(GearGroupId(u32::MAX - i as u32)))
                .collect(),
        }
    }

    pub fn rack(&self, server: ServerId) -> RackId {
        self.racks[server.index()]
    }

    pub fn gear_group(&self, server: ServerId) -> GearGroupId {
        self.gear_groups[server.index()]
    }

    pub fn servers(&self) -> impl Iterator<Item = ServerId> + '_ {
        (0..self.racks.len()).map(|i| ServerId(i as u32))
    }
}

/// A server's power state as the MDS records it (docs/protocol.md, P1-P3).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ServerPower {
    /// Serving.
    On,
    /// Handing its primaries over before it sleeps.
    Draining,
    /// In standby: its peers log for it.
    Asleep,
    /// Told to wake; not yet heard from.
    Waking,
    /// Missed heartbeats: its replicas are logged for, sleeping peers woken.
    Failed,
    /// Lost for good and rebuilt elsewhere.
    Removed,
}

impl ServerPower {
    /// Whether the server takes requests now.
    pub fn serves(self) -> bool {
        self == ServerPower::On
    }

    /// Whether it applies writes as a replica (a draining server still does).
    pub fn serves_replicas(self) -> bool {
        matches!(self, ServerPower::On | ServerPower::Draining)
    }
}

/// The protocol's timing and sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Replicas of every chunk group (r), also the number of gear groups.
    pub replicas: u32,
    /// Bytes of each chunk (Sierra: 64 MiB; 1 MiB for trace replay).
    pub chunk_size_bytes: u64,
    /// How often a server sends a heartbeat.
    pub heartbeat_interval: VirtualDuration,
    /// How long a renewed lease lets a primary serve, from the heartbeat's send time.
    pub lease: VirtualDuration,
    /// Extra wait at the MDS past a lease before a view change (clock drift).
    pub lease_margin: VirtualDuration,
    /// Silence after which the MDS declares a server failed. Just past the lease and
    /// its margin: the view change that deposes a silent primary is soon followed by
    /// the down list that lets its peers log for it instead of waiting on it.
    pub failure_timeout: VirtualDuration,
    /// Time a woken server has to send its first heartbeat before it is failed.
    pub wake_timeout: VirtualDuration,
    /// The lowest gear the MDS shifts to (Sierra 3.4: 1 saves more, 2 keeps reads
    /// available through a failure in low gear).
    pub gear_min: u32,
    /// How long a primary waits for a replica's answer, and a client after a refusal,
    /// before trying again.
    pub retry_interval: VirtualDuration,
    /// How long a client waits for an answer before it asks for the view again.
    pub request_timeout: VirtualDuration,
    /// How long a client works at an op before it ends it `DeadlinePassed` and
    /// forgets it (an op submitted without a deadline of its own).
    pub op_deadline: VirtualDuration,
    /// How long a client trusts a chunk group's view before asking the MDS again.
    pub view_ttl: VirtualDuration,
    /// How often a server verifies the checksums of everything it holds.
    pub scrub_interval: VirtualDuration,
    /// Room of each server's logger (D6: a write that finds every logger full waits).
    pub logger_capacity_bytes: u64,
    /// Logged writes a primary reclaims at once: reclaim is background work (D5).
    pub reclaim_reads_max: u32,
    /// Chunks a primary copies to rebuilt replicas at once, over all the groups it
    /// leads: rebuild is background work (R1).
    pub rebuild_chunks_max: u32,
    /// Seed of the MDS's random choices (chunk groups of new chunks, initial primaries).
    pub seed: u64,
    /// Free bytes each server keeps on its disk: below them it counts itself full,
    /// and the primaries of its groups refuse new writes (`RequestError::NoSpace`),
    /// so that the writes under way, its journal's checkpoint and its logger have
    /// room. A shell that measures no free space never makes a server full.
    pub disk_reserve_bytes: u64,
    /// How long a deleted object's chunks stay after its deletion before servers free
    /// them: a read begun on it before (a GET that was streaming it) reads it whole.
    pub free_grace: VirtualDuration,
    /// How long an allocated data object may stay unbound before it is freed (a
    /// writer that died between its data and its bind).
    pub pending_grace: VirtualDuration,
    /// How often an awake server sends the MDS a batch of the objects it holds, so
    /// that chunks no name holds any more are found and freed (the orphan scan).
    pub orphan_scan_interval: VirtualDuration,
}

/// How often the MDS sends a server's wake again while it has it waking and has not
/// heard from it (a real NIC may miss the first packet while the host suspends).
pub const WAKE_RESEND: VirtualDuration = VirtualDuration::from_secs(2);

impl ClusterConfig {
    /// Sierra's defaults: 3 replicas, 64 MiB chunks, 1 s heartbeats, 5 s leases.
    pub fn sierra() -> ClusterConfig {
        ClusterConfig {
            replicas: 3,
            chunk_size_bytes: 64 << 20,
            heartbeat_interval: VirtualDuration::from_secs(1),
            lease: VirtualDuration::from_secs(5),
            lease_margin: VirtualDuration::from_millis(500),
            failure_timeout: VirtualDuration::from_secs(6),
            wake_timeout: VirtualDuration::from_secs(60),
            gear_min: 1,
            retry_interval: VirtualDuration::from_millis(200),
            request_timeout: VirtualDuration::from_secs(1),
            op_deadline: VirtualDuration::from_secs(60),
            scrub_interval: VirtualDuration::from_secs(5),
            view_ttl: VirtualDuration::from_secs(2),
            logger_capacity_bytes: 1 << 30,
            reclaim_reads_max: 8,
            rebuild_chunks_max: 4,
            seed: 1,
            disk_reserve_bytes: 256 << 20,
            free_grace: VirtualDuration::from_secs(15 * 60),
            pending_grace: VirtualDuration::from_secs(60 * 60),
            orphan_scan_interval: VirtualDuration::from_secs(10),
        }
    }

    /// Whether the protocol can run on this config: the one check both shells make
    /// (a cluster file's keys, a simulation's spec), naming the setting wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.replicas == 0 {
            return Err("replicas must be 1 or more".to_string());
        }
        let block = store::BLOCK_BYTES;
        if self.chunk_size_bytes == 0 || !self.chunk_size_bytes.is_multiple_of(block) {
            return Err(format!(
                "chunk_size_bytes must be a positive multiple of {block}, not {}",
                self.chunk_size_bytes
            ));
        }
        if !(1..=self.replicas).contains(&self.gear_min) {
            return Err(format!(
                "gear_min must be 1 to the {} replicas, not {}",
                self.replicas, self.gear_min
            ));
        }
        let positive = [
            ("heartbeat_interval", self.heartbeat_interval),
            ("retry_interval", self.retry_interval),
            ("request_timeout", self.request_timeout),
            ("scrub_interval", self.scrub_interval),
            ("orphan_scan_interval", self.orphan_scan_interval),
        ];
        if let Some((key, _)) = positive.iter().find(|(_, d)| d.as_nanos() == 0) {
            return Err(format!("{key} must be above 0"));
        }
        // A lease renewed every heartbeat must outlive the heartbeat's trip; the MDS
        // must not fail a server whose lease may still run (S2, P1).
        if self.lease <= self.heartbeat_interval {
            return Err(format!(
                "the lease ({:?}) must be longer than the heartbeat interval ({:?})",
                self.lease, self.heartbeat_interval
            ));
        }
        if self.failure_timeout < self.lease + self.lease_margin {
            return Err(format!(
                "failure_timeout ({:?}) must be at least the lease and its margin ({:?} + {:?})",
                self.failure_timeout, self.lease, self.lease_margin
            ));
        }
        // An op gets at least one request timeout to be answered in.
        if self.op_deadline <= self.request_timeout {
            return Err(format!(
                "op_deadline ({:?}) must be longer than request_timeout ({:?})",
                self.op_deadline, self.request_timeout
            ));
        }
        if self.reclaim_reads_max == 0 || self.rebuild_chunks_max == 0 {
            return Err("reclaim_reads_max and rebuild_chunks_max must be 1 or more".to_string());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_stamps_name_it_and_count_from_one() {
        let mut stamps = Stamps::of(ClientId::drawn([1, 0, 0, 0]));
        let (first, second) = (stamps.mint(), stamps.mint());
        assert_eq!(first.parts(), (1 | 1 << 31, 1));
        assert_eq!(second.parts(), (1 | 1 << 31, 2));
        assert_eq!(Stamps::of(ClientId::counted(0)).mint(), Stamp(1), "never 0");
    }

    #[test]
    fn a_config_the_protocol_cannot_run_on_is_refused_naming_the_setting() {
        assert_eq!(ClusterConfig::sierra().validate(), Ok(()));
        let bad = |config: ClusterConfig, says: &str| {
            let error = config.validate().expect_err(says);
            assert!(error.contains(says), "{error:?} does not say {says:?}");
        };
        let sierra = ClusterConfig::sierra();
        bad(ClusterConfig { replicas: 0, ..sierra }, "replicas");
        bad(ClusterConfig { chunk_size_bytes: 5000, ..sierra }, "chunk_size_bytes");
        bad(ClusterConfig { gear_min: 4, ..sierra }, "gear_min must be 1 to the 3");
        bad(ClusterConfig { request_timeout: VirtualDuration::ZERO, ..sierra }, "request_timeout");
        bad(ClusterConfig { lease: VirtualDuration::from_millis(900), ..sierra }, "lease");
        bad(ClusterConfig { failure_timeout: VirtualDuration::from_secs(5), ..sierra }, "failure");
        bad(ClusterConfig { rebuild_chunks_max: 0, ..sierra }, "rebuild_chunks_max");
        bad(ClusterConfig { op_deadline: VirtualDuration::from_secs(1), ..sierra }, "op_deadline");
    }
}
