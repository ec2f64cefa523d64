//! The storage server (docs/protocol.md): chunk replicas in a [`ChunkStore`], and for
//! every chunk group it leads, the primary that orders requests, writes each to every
//! replica and acknowledges it when all r copies are durable (C3).
//!
//! Roles of one server, all in this state machine:
//! - **replica** of every group it is placed in: applies `ReplicaWrite`s of the epoch it
//!   is fenced at, durably, then acknowledges; refuses older epochs (C1); on a
//!   `SyncRequest` fences the new epoch durably and answers with its unstable writes.
//! - **primary** of the groups the MDS granted it ([`primary`]).
//! - **heartbeats** to the MDS, which renew the leases of the groups it leads (C2).
//!
//! Call protocol: after [`Server::new`] and after each [`Server::handle`], drain
//! [`Server::poll_action`] (each `Disk` action is answered later by
//! `ServerEvent::DiskDone`, `DiskRead` or `DiskFailed` with its io id), then arm a timer
//! for [`Server::poll_timeout`]. A crash is the shell dropping the server: what
//! survives is [`Server::into_durable`], whose changes were made only at `DiskDone`.
//!
//! The disk is a message ([`disk`]): a change carries its bytes and the blocks it puts
//! in place, a read's completion carries the bytes; the shell decides nothing.

mod answered;
mod disk;
mod dvl;
mod led_groups;
mod logging;
mod pending;
mod primary;
mod rebuild;
mod resync;
mod space;

use std::collections::{BTreeMap, BTreeSet, VecDeque, btree_map};
use std::sync::Arc;

use somnus_types::{ByteRange, ChunkGroupId, IoId, ServerId, Version, VirtualInstant};

use super::logvolume::{LogPiece, LogVolume, ReadPlan, Staged};
use super::store::{BlocksRead, ChunkStore};
use super::{
    ClusterConfig, Epoch, HeldObject, LeaseGrant, LeaseRenewal, LogRecord, Message, Peer,
    ServerPlaces, ServerPower, ServerTime, SpaceReport, UnstableWrite,
};
use crate::gear::LoadMeter;
use crate::slab::Slab;

use led_groups::LedGroups;
use primary::Led;

pub use disk::{DiskError, DiskOp};

/// Inputs, as facts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerEvent {
    MessageReceived {
        from: Peer,
        message: Message,
    },
    /// The disk did `io`: a change is durable and its runs are in place, a logger's
    /// I/O is done, a read is done (from a shell that keeps no bytes: the simulator).
    DiskDone {
        io: IoId,
    },
    /// The read `io` found these blocks.
    DiskRead {
        io: IoId,
        read: BlocksRead,
    },
    /// The read `io` of the logger's log found these pieces, a list per range it
    /// asked, in order.
    LogRead {
        io: IoId,
        pieces: Vec<Vec<LogPiece>>,
    },
    /// The disk could not do `io`. A change that found no room took no effect (the
    /// writer hears nothing and sends it again, as after a lost message); a read's
    /// blocks that fail their checksum are corrupt (repaired from another replica); an
    /// I/O error of a change leaves the durable state unknown, and the server halts.
    DiskFailed {
        io: IoId,
        error: DiskError,
    },
    /// The free bytes on the server's disk, and the bytes its files take there, as
    /// the shell measured them (a shell that measures none never sends this: the
    /// server then never counts itself full).
    DiskSpace {
        free_bytes: u64,
        used_bytes: Option<u64>,
    },
    TimerFired,
    /// The server came out of standby (the MDS woke it).
    Woken,
}

/// Outputs, as commands to the shell, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerAction {
    Send {
        to: Peer,
        message: Message,
    },
    /// Do `op` on the server's disk, `bytes` long at `position` (where the simulator's
    /// disk model places it); answer with `DiskDone`, `DiskRead` or `DiskFailed`.
    Disk {
        io: IoId,
        op: DiskOp,
        position: u64,
        bytes: u64,
        /// Maintenance nothing waits for (the logger's collection): a shell serves
        /// foreground I/O before it where it can (Sierra: garbage collection has
        /// background I/O priority).
        background: bool,
    },
    /// The server announced standby: power it down until the MDS wakes it.
    Sleep,
    /// The disk failed so that what is durable is unknown (an I/O error of a change):
    /// stop the server. Its restart recovers from what its disk holds.
    Halt {
        reason: String,
    },
}

/// Deliberately wrong protocols, for showing that the simulation's checker catches
/// each (issue 11, point 10). Never set outside those tests and `somnus sim cluster
/// --broken`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Broken {
    /// The primary acknowledges a write once its own copy is durable (breaks C3).
    AckAfterOneReplica,
    /// No epoch is checked: a primary serves after its lease ran out, the MDS revoked
    /// it or a newer primary fenced its replicas, and replicas take writes of any
    /// epoch (C1, C2).
    SkipEpochCheck,
    /// A new primary recovers its DVL from one logger fewer than L - r_L + 1 (D4).
    TooFewLoggers,
    /// Loggers answer a recovery at once, without fencing the old epoch or waiting for
    /// the appends they accepted from it (D4): the new primary reclaims from a log the
    /// old primary still writes to.
    ReclaimBeforeFencing,
    /// A rebuild reports the new replica complete without copying a chunk (R2).
    RebuildWithoutCopy,
    /// Clients send reads to a secondary, which answers from its own copy (breaks
    /// C4: a secondary back from sleep or a crash lacks what was logged for it).
    ReadFromSecondary,
    /// A primary serves a read from its own copy although the own replica lacks
    /// logged writes over it (no demand read from the loggers; breaks C4).
    ReadWithoutLoggers,
    /// The MDS sends a deleted object's frees at once, without the grace a read
    /// begun on it needs (breaks F1, docs/space.md).
    FreeBeforeGrace,
    /// The MDS frees the data a bind keeps instead of what it replaces: a named
    /// object's chunks are freed (breaks F2).
    FreeNamed,
    /// A logged write counts as superseded by a newer one that only overlaps it: the
    /// bytes it alone holds never reach the replicas that lack them (breaks C4).
    SupersedeOverlapped,
    /// A primary whose client read awaits logged writes every holder of which sleeps
    /// never asks the MDS to wake them (P7): the read is refused until a gear shift
    /// happens to wake them, which may be never (breaks liveness).
    NeverWakeHolders,
    /// A logger takes a log commit its disk failed with an I/O error as done, and
    /// acknowledges its appends (breaks D7 and C3: the log lacks what the index and
    /// the primary count on). Only the `disk-error` fault fails such a commit.
    FailedLogCommitTaken,
    /// The MDS keeps the groups' logger views in memory only, never in its command
    /// log (breaks D3/D4: a primary granted after an MDS restart recovers its DVL from
    /// no loggers, and the logged writes are lost). A crash of the MDS alone is
    /// survived while every primary keeps its DVL; the `power-cut` fault, which stops
    /// every primary with it, finds it at once.
    LoggerViewInMemory,
    /// A primary whose DVL recovery could not hear a logger declared lost serves
    /// without making the replicas equal first (R4): a write whose every log copy was
    /// on that logger stays on the replicas that applied it alone, and the others
    /// never get it (breaks C3 and convergence). Only the `lost` fault (with r = 2, or
    /// r = 3 and two loggers lost) finds it.
    SkipResync,
}

/// What a storage server keeps across a crash: its replicas, its logger's log, and
/// its incarnation (the shell gives each run of the server a greater one, persisted
/// before it sends anything).
#[derive(Debug)]
pub struct Durable {
    pub store: ChunkStore,
    pub log: LogVolume,
    pub incarnation: u64,
}

impl Durable {
    /// An empty disk.
    pub fn new(config: &ClusterConfig) -> Durable {
        Durable {
            store: ChunkStore::new(config.chunk_size_bytes),
            log: LogVolume::new(config.chunk_size_bytes, config.logger_capacity_bytes),
            incarnation: 0,
        }
    }
}

/// What a server did, for tests and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServerCounters {
    pub writes_acknowledged: u64,
    pub reads_served: u64,
    pub requests_refused: u64,
    pub corrupt_reads: u64,
    pub blocks_repaired: u64,
    pub retransmits: u64,
    /// Unstable writes a new primary wrote again everywhere.
    pub writes_adopted: u64,
    /// Repeats of writes already answered, answered again with their version instead
    /// of written again (S1).
    #[serde(default)]
    pub repeats_answered: u64,
    /// Writes a primary refused because a replica's disk was full.
    #[serde(default)]
    pub writes_refused_no_space: u64,
    /// Writes this server's disk had no room for (sent again by their writer).
    #[serde(default)]
    pub disk_writes_failed: u64,
    /// Writes a primary logged because a replica was down.
    pub writes_logged: u64,
    /// Bytes of those writes (each once, however many loggers hold it).
    #[serde(default)]
    pub bytes_logged: u64,
    /// Logged writes that reclaim brought to every replica of their group (each once,
    /// however many copies and read-backs it took).
    pub writes_reclaimed: u64,
    /// Reads served with logged writes read back from the loggers (the own replica
    /// lacked them).
    pub reads_from_loggers: u64,
    /// Reads whose blocks a write landed on while they were under way: read again.
    #[serde(default)]
    pub reads_again: u64,
    /// Bytes a primary copied to replicas being rebuilt.
    pub rebuilt_bytes: u64,
    /// Resyncs of a group completed (R4: a DVL recovered without a lost logger).
    #[serde(default)]
    pub resyncs: u64,
    pub messages_dropped: u64,
    /// Deleted objects freed here (each once per free the MDS sent).
    #[serde(default)]
    pub objects_freed: u64,
    /// Logged writes of freed objects dropped from a DVL instead of reclaimed.
    #[serde(default)]
    pub logged_writes_dropped: u64,
    /// Logged writes a newer one covered whole before every replica had them: left
    /// to their deletion markers instead of reclaimed (the newer one is).
    #[serde(default)]
    pub logged_writes_superseded: u64,
    /// Times a primary asked the MDS to wake the sleeping holders of logged writes a
    /// client read awaited (P7).
    #[serde(default)]
    pub holder_wakes_asked: u64,
}

/// A disk I/O in flight and what to do when it is done.
#[derive(Clone, Debug)]
enum Io {
    /// A replica's copy of a write of `primary`'s.
    ReplicaWrite {
        group: ChunkGroupId,
        epoch: Epoch,
        primary: ServerId,
        write: UnstableWrite,
        stable: Version,
    },
    /// The durable record that `group` is fenced at `epoch`.
    Fence { group: ChunkGroupId, epoch: Epoch, primary: ServerId },
    /// A primary's read for a client: the pieces its own replica held when it was
    /// issued (the bytes read must be theirs), and the writes read back from loggers
    /// to lay over them (a demand read).
    ClientRead {
        group: ChunkGroupId,
        read: primary::ReadRequest,
        pieces: Vec<super::Piece>,
        found: Vec<UnstableWrite>,
    },
    /// A replica's read for a primary repairing corrupt blocks (no pieces: its own
    /// copy is corrupt too).
    RepairRead {
        to: ServerId,
        group: ChunkGroupId,
        epoch: Epoch,
        chunk: super::ChunkId,
        range: ByteRange,
        pieces: Option<Vec<super::Piece>>,
    },
    /// A primary's write of repaired blocks, then it serves the read again.
    Repair {
        group: ChunkGroupId,
        chunk: super::ChunkId,
        range: ByteRange,
        pieces: Vec<super::Piece>,
    },
    /// A primary's read of a chunk it copies to a replica being rebuilt.
    RebuildRead {
        to: ServerId,
        group: ChunkGroupId,
        epoch: Epoch,
        chunk: super::ChunkId,
        pieces: Vec<super::Piece>,
    },
    /// A new replica's write of a chunk its primary copied to it.
    RebuildWrite {
        group: ChunkGroupId,
        epoch: Epoch,
        primary: ServerId,
        chunk: super::ChunkId,
        pieces: Vec<super::Piece>,
    },
    /// The logger's commit of a batch of a primary's writes.
    LogAppend { group: ChunkGroupId, epoch: Epoch, primary: ServerId, staged: Staged },
    /// The logger's commit of `group`'s fence at `epoch`.
    LogFence { group: ChunkGroupId, epoch: Epoch, primary: ServerId, staged: Staged },
    /// The logger's read of records a primary asked for.
    LogRead { to: ServerId, group: ChunkGroupId, epoch: Epoch, plan: ReadPlan },
    /// The logger's commit of deletion markers.
    LogInvalidate {
        batches: Vec<((ChunkGroupId, Epoch, ServerId), Vec<LogRecord>)>,
        staged: Staged,
    },
    /// The logger's commit of a collection.
    LogCollect { staged: Staged },
    /// Copies a collection wrote: nothing waits for them.
    LogCopies,
    /// The durable record that `objects` are freed, the free log applied up to
    /// `through` with them.
    Free { objects: Vec<somnus_types::ObjectId>, through: u64 },
}

/// Disk I/Os in flight at once: far above what any run reaches.
const IOS_MAX: usize = 1 << 24;

/// What a replica of one group has under way (volatile: a restart forgets it), kept
/// together because a replica write touches all of it.
#[derive(Debug, Default)]
struct ReplicaWork {
    /// The replica writes whose disk write is under way, by (epoch, version): a
    /// primary's retransmission of one is answered by that write's acknowledgement,
    /// not written again (a returning replica with a long queue would otherwise drown
    /// in repeats).
    queued: Vec<(Epoch, Version)>,
    /// Sync requests (primary, epoch) waiting for `queued` to drain: a `SyncReply`
    /// must list every write accepted before the fence.
    fences_waiting: Vec<(ServerId, Epoch)>,
    /// The epoch a fence in flight will set: older writes are refused already.
    fencing: Option<Epoch>,
}

impl ReplicaWork {
    fn is_idle(&self) -> bool {
        self.queued.is_empty() && self.fences_waiting.is_empty() && self.fencing.is_none()
    }
}

pub struct Server {
    id: ServerId,
    /// This run's incarnation: its clock (`now`) counts from its start.
    incarnation: u64,
    config: ClusterConfig,
    topology: Arc<ServerPlaces>,
    broken: Option<Broken>,
    now: VirtualInstant,
    power: ServerPower,
    store: ChunkStore,
    log: LogVolume,
    /// What the logger has under way: its commits, appends, fences.
    logger: logging::LoggerWork,
    /// The servers the MDS last reported down.
    down: BTreeSet<ServerId>,
    /// `down` in order, and `lost` likewise: the DVL's kept sets are keyed by these
    /// lists, asked at every acknowledgement.
    down_list: Vec<ServerId>,
    lost_list: Vec<ServerId>,
    /// The servers draining to sleep, from the MDS: never chosen as loggers.
    draining: BTreeSet<ServerId>,
    /// The servers declared lost for good (from the MDS's heartbeat replies).
    lost: BTreeSet<ServerId>,
    led: LedGroups,
    /// Disk I/Os issued, and changes waiting for an overlapping one to complete.
    ios: Slab<disk::InFlight>,
    disk: disk::Changing,
    /// What this server's replica of each group has under way; a group with nothing
    /// under way has no entry.
    replica_work: BTreeMap<ChunkGroupId, ReplicaWork>,
    next_heartbeat: VirtualInstant,
    next_scrub: VirtualInstant,
    /// A `Standby` sent and not answered: sent again each retry interval.
    standby_sent_at: Option<VirtualInstant>,
    /// Scrubs so far: each asks the next replica for a copy of what is still corrupt.
    scrubs: u64,
    /// The replicas of each group this server has heard of (from a grant or the MDS):
    /// where a scrub asks for intact copies.
    replicas_of: BTreeMap<ChunkGroupId, Vec<ServerId>>,
    actions: VecDeque<ServerAction>,
    counters: ServerCounters,
    space: Space,
    /// The requests served as a primary, per second, for the heartbeats.
    load: LoadMeter,
    /// The free log's sequence up to which every free sent here is durable.
    freed_through: u64,
    /// A free under way (one at a time: the MDS sends the rest again).
    freeing: bool,
    /// The orphan scan: the object it reported last, and when it reports next.
    orphan_cursor: somnus_types::ObjectId,
    next_orphan_scan: VirtualInstant,
}

/// What the server knows of disk space, its own and its peers'.
#[derive(Debug, Default)]
struct Space {
    /// The free bytes last measured on this server's disk.
    free_bytes: Option<u64>,
    /// The bytes its files take, last measured.
    used_bytes: Option<u64>,
    /// When a write last failed for lack of room: full until a measure shows more
    /// free bytes than the reserve (the one before the failure was too hopeful).
    failed_at: Option<VirtualInstant>,
    /// The servers the MDS last reported full.
    full_peers: BTreeSet<ServerId>,
}

impl Server {
    /// A server starting (or restarting after a crash) on `store`. It leads nothing
    /// until the MDS grants it a lease.
    pub fn new(
        id: ServerId,
        config: ClusterConfig,
        topology: Arc<ServerPlaces>,
        durable: Durable,
        now: VirtualInstant,
        broken: Option<Broken>,
    ) -> Server {
        let mut server = Server {
            id,
            incarnation: durable.incarnation,
            config,
            topology,
            broken,
            now,
            power: ServerPower::On,
            store: durable.store,
            log: durable.log,
            logger: logging::LoggerWork::new(LOG_REGION_START),
            down: BTreeSet::new(),
            down_list: Vec::new(),
            lost_list: Vec::new(),
            draining: BTreeSet::new(),
            lost: BTreeSet::new(),
            led: LedGroups::default(),
            ios: Slab::new(IOS_MAX),
            disk: disk::Changing::default(),
            replica_work: BTreeMap::new(),
            next_heartbeat: now,
            next_scrub: now.saturating_add(config.scrub_interval),
            standby_sent_at: None,
            scrubs: 0,
            replicas_of: BTreeMap::new(),
            actions: VecDeque::new(),
            counters: ServerCounters::default(),
            space: Space::default(),
            load: LoadMeter::default(),
            freed_through: 0,
            freeing: false,
            orphan_cursor: somnus_types::ObjectId(0),
            next_orphan_scan: now.saturating_add(config.orphan_scan_interval),
        };
        server.heartbeat();
        server
    }

    pub fn id(&self) -> ServerId {
        self.id
    }

    pub fn store(&self) -> &ChunkStore {
        &self.store
    }

    pub fn store_mut(&mut self) -> &mut ChunkStore {
        &mut self.store
    }

    /// What survives a crash.
    pub fn into_durable(self) -> Durable {
        Durable { store: self.store, log: self.log, incarnation: self.incarnation }
    }

    /// Whether every DVL this server leads is empty (the simulation's end check).
    pub fn dvls_empty(&self) -> bool {
        self.led.values().all(|led| led.dvl().is_empty())
    }

    /// The first DVL with work left, described (the simulation's D5 report).
    pub fn dvl_left(&self) -> Option<String> {
        let (group, led) = self.led.iter().find(|(_, led)| !led.dvl().is_empty())?;
        Some(format!("{group} epoch {}: {}", led.epoch, led.dvl().describe()))
    }

    pub fn counters(&self) -> ServerCounters {
        self.counters
    }

    pub fn power(&self) -> ServerPower {
        self.power
    }

    /// The groups this server leads now, with their epochs.
    pub fn leads(&self) -> Vec<(ChunkGroupId, Epoch)> {
        self.led.iter().map(|(g, led)| (*g, led.epoch)).collect()
    }

    /// Whether this server leads `group` at `epoch`.
    pub fn leads_at(&self, group: ChunkGroupId, epoch: Epoch) -> bool {
        self.led.get(&group).is_some_and(|led| led.epoch == epoch)
    }

    /// Whether any request or replica work is under way (the simulation's quiesce).
    pub fn is_idle(&self) -> bool {
        self.ios.is_empty() && self.led.values().all(Led::is_idle)
    }

    pub fn handle(&mut self, now: VirtualInstant, event: ServerEvent) {
        assert!(now >= self.now, "time went back: {now:?} < {:?}", self.now);
        self.now = now;
        match event {
            ServerEvent::MessageReceived { from, message } => self.message(from, message),
            ServerEvent::DiskDone { io } => self.disk_done(io, None),
            ServerEvent::DiskRead { io, read } => self.disk_done(io, Some(read)),
            ServerEvent::LogRead { io, pieces } => {
                let io = self.take_io(io).io;
                self.log_read(io, pieces);
            }
            ServerEvent::DiskFailed { io, error } => self.disk_failed(io, error),
            ServerEvent::DiskSpace { free_bytes, used_bytes } => {
                self.space.used_bytes = used_bytes.or(self.space.used_bytes);
                self.disk_space(free_bytes);
            }
            ServerEvent::TimerFired => self.timer(),
            ServerEvent::Woken => {
                self.power = ServerPower::On;
                self.heartbeat();
            }
        }
        // P1: a migrating group is handed over as soon as its last work ends, whatever
        // ended it (an acknowledgement, a read, a DVL recovery or reclaim finishing).
        self.led.refresh();
        let migrating: Vec<ChunkGroupId> = self.led.migrating().collect();
        for group in migrating {
            self.cancel_if_drained(group);
        }
        self.led.refresh();
        debug_assert!(self.led.index_agrees(), "the index of led groups is stale");
    }

    pub fn poll_action(&mut self) -> Option<ServerAction> {
        self.actions.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<VirtualInstant> {
        if self.power == ServerPower::Asleep {
            return None;
        }
        let (now, retry) = (self.now, self.config.retry_interval);
        let primaries = self.led.next_deadline(now, retry);
        debug_assert_eq!(
            primaries,
            self.led.values().filter_map(|led| led.summary().deadline(now, retry)).min(),
            "the index of led groups gives another deadline than its groups"
        );
        let standby = self.standby_sent_at.map(|at| at.saturating_add(self.config.retry_interval));
        let timers = [self.next_heartbeat, self.next_scrub, self.next_orphan_scan];
        primaries.into_iter().chain(timers).chain(standby).min()
    }

    fn send(&mut self, to: Peer, message: Message) {
        self.actions.push_back(ServerAction::Send { to, message });
    }

    fn timer(&mut self) {
        if self.power == ServerPower::Asleep {
            return;
        }
        // A server waiting for its `Standby` answer is heard through the `Standby` it
        // repeats: a heartbeat sent now, delivered after the MDS let it sleep, would
        // read as the server coming back, and the MDS would count a sleeper as on.
        if self.now >= self.next_heartbeat {
            if self.standby_sent_at.is_none() {
                self.heartbeat();
            } else {
                self.next_heartbeat = self.now.saturating_add(self.config.heartbeat_interval);
            }
        }
        if self.now >= self.next_scrub {
            self.scrub();
        }
        if self.now >= self.next_orphan_scan {
            self.scan_orphans();
        }
        if self
            .standby_sent_at
            .is_some_and(|at| at.saturating_add(self.config.retry_interval) <= self.now)
        {
            self.standby_sent_at = Some(self.now);
            self.send(Peer::Mds, Message::Standby { sent_at: self.time() });
        }
        self.primaries_timer();
    }

    /// Now, as the MDS is told it: this run's clock, in this run's incarnation.
    fn time(&self) -> ServerTime {
        ServerTime { incarnation: self.incarnation, at: self.now }
    }

    /// `time` on this run's clock, if it is of this run (a message answering an earlier
    /// run of this server is not).
    fn own_time(&self, time: ServerTime) -> Option<VirtualInstant> {
        (time.incarnation == self.incarnation).then_some(time.at)
    }

    fn heartbeat(&mut self) {
        let (power, leads, full) = (self.power, self.leads(), self.is_full());
        let load = self.load.take(self.now);
        let space = Box::new(self.space());
        let sent_at = self.time();
        let message = Message::Heartbeat { sent_at, power, leads, full, load, space };
        self.send(Peer::Mds, message);
        self.next_heartbeat = self.now.saturating_add(self.config.heartbeat_interval);
    }

    /// Verifies every block held and asks another replica for a copy of each corrupt
    /// range, the next replica at each scrub (a copy too old or corrupt too is not
    /// used): a primary asks its synced replicas, which hold every committed write.
    fn scrub(&mut self) {
        self.next_scrub = self.now.saturating_add(self.config.scrub_interval);
        self.scrubs += 1;
        for (group, chunk, range) in self.store.corrupt_ranges() {
            let sources: Vec<ServerId> = match self.led.get(&group) {
                Some(led) => led.synced_others(self.id),
                None => self.replicas_of.get(&group).map_or_else(Vec::new, |replicas| {
                    replicas.iter().copied().filter(|r| *r != self.id).collect()
                }),
            };
            if sources.is_empty() {
                if !self.led.contains_key(&group) {
                    // Not heard of the group's replicas since a restart: ask the MDS.
                    self.send(Peer::Mds, Message::LookupGroup { request: 0, group });
                }
                continue;
            }
            let source = sources[(self.scrubs % sources.len() as u64) as usize];
            let epoch = self.store.epoch(group);
            self.send(Peer::Server(source), Message::RepairRead { group, epoch, chunk, range });
        }
    }

    /// Whether a scrub would find corrupt blocks (the simulation's quiesce).
    pub fn holds_corrupt(&self) -> bool {
        !self.store.corrupt_ranges().is_empty()
    }

    fn message(&mut self, from: Peer, message: Message) {
        if self.power == ServerPower::Asleep {
            self.counters.messages_dropped += 1;
            return;
        }
        match (from, message) {
            (Peer::Mds, message) => self.mds_message(message),
            (Peer::Server(primary), Message::ReplicaWrite { group, epoch, write, stable }) => {
                self.replica_write(primary, group, epoch, write, stable);
            }
            (Peer::Server(primary), Message::SyncRequest { group, epoch }) => {
                self.sync_request(primary, group, epoch);
            }
            (Peer::Server(primary), Message::RepairRead { group, epoch, chunk, range }) => {
                self.repair_read(primary, group, epoch, chunk, range);
            }
            (Peer::Server(primary), Message::RebuildData { group, epoch, chunk, pieces }) => {
                self.rebuild_data(primary, group, epoch, chunk, pieces);
            }
            (Peer::Server(primary), Message::ResyncPull { group, epoch, chunks }) => {
                self.resync_pull(primary, group, epoch, chunks);
            }
            (Peer::Server(_), Message::StableMark { group, epoch, stable }) => {
                self.stable_mark(group, epoch, stable);
            }
            (
                Peer::Server(primary),
                message @ (Message::LogAppend { .. }
                | Message::LogRecover { .. }
                | Message::LogRead { .. }
                | Message::LogInvalidate { .. }),
            ) => self.logger_message(primary, message),
            (Peer::Server(replica), message) => self.replica_message(replica, message),
            (Peer::Client(_), message) => self.client_message(from, message),
        }
    }

    fn mds_message(&mut self, message: Message) {
        match message {
            Message::HeartbeatReply(reply) => {
                let LeaseRenewal {
                    sent_at,
                    renewed,
                    revoked,
                    down,
                    lost,
                    full,
                    draining,
                    frees,
                    frees_through,
                } = *reply;
                // The answer to an earlier run's heartbeat: its leases and lists are
                // that run's (this one has its own heartbeats answered).
                let Some(sent_at) = self.own_time(sent_at) else {
                    self.counters.messages_dropped += 1;
                    return;
                };
                self.leases_renewed(sent_at, &renewed, &revoked);
                self.frees_received(frees, frees_through);
                let lost: BTreeSet<ServerId> = lost.into_iter().collect();
                if lost != self.lost {
                    self.lost = lost;
                    self.lost_list = self.lost.iter().copied().collect();
                    self.unpark_reads();
                }
                self.space.full_peers = full.into_iter().collect();
                self.draining = draining.into_iter().collect();
                self.set_down(down);
            }
            Message::GrantLease(grant) => {
                let LeaseGrant {
                    view,
                    lease_from,
                    logger_view,
                    handoff,
                    rebuilding,
                    down,
                    draining,
                } = *grant;
                // A late grant, dropped, must not roll back newer lists.
                if self.grant_is_new(&view, lease_from) {
                    self.draining = draining.into_iter().collect();
                    self.set_down(down);
                }
                self.granted(view, lease_from, logger_view, handoff, rebuilding);
            }
            Message::RebuildRecorded { group, epoch, server } => {
                self.rebuild_recorded(group, epoch, server);
            }
            Message::LoggerViewSet { group, epoch, seq } => {
                self.logger_view_set(group, epoch, seq);
            }
            Message::MigratePrimary { group, epoch, .. } => self.migrate(group, epoch),
            Message::GroupFound { view, .. } => {
                self.replicas_of.insert(view.group, view.replicas);
            }
            Message::EnterStandby => {
                if self.led.is_empty() {
                    self.standby_sent_at = Some(self.now);
                    self.send(Peer::Mds, Message::Standby { sent_at: self.time() });
                }
            }
            Message::StandbyAnswer { sleep } => {
                let waiting = self.standby_sent_at.take().is_some();
                if sleep && waiting && self.led.is_empty() {
                    self.power = ServerPower::Asleep;
                    self.actions.push_back(ServerAction::Sleep);
                }
            }
            _ => self.counters.messages_dropped += 1,
        }
    }

    /// C1: a replica applies writes of the epoch it is fenced at only.
    fn replica_write(
        &mut self,
        primary: ServerId,
        group: ChunkGroupId,
        epoch: Epoch,
        write: UnstableWrite,
        stable: Version,
    ) {
        let known = self.known_epoch(group);
        if epoch != known && self.broken != Some(Broken::SkipEpochCheck) {
            if primary == self.id {
                // A newer primary fenced this server's own replica: it is deposed.
                self.led.remove(&group);
                return;
            }
            self.send(Peer::Server(primary), Message::ReplicaRefused { group, epoch, known });
            return;
        }
        let queued = &mut self.replica_work.entry(group).or_default().queued;
        match queued.binary_search(&(epoch, write.version)) {
            Ok(_) => return,
            Err(at) => queued.insert(at, (epoch, write.version)),
        }
        let (position, bytes) = (disk_position(write.chunk, write.range), write.range.size_bytes());
        self.disk(Io::ReplicaWrite { group, epoch, primary, write, stable }, position, bytes);
    }

    /// The epoch the replica of `group` answers to: the fenced one, or the one a
    /// fence in flight will set.
    fn known_epoch(&self, group: ChunkGroupId) -> Epoch {
        let fencing = self.replica_work.get(&group).and_then(|w| w.fencing);
        self.store.epoch(group).max(fencing.unwrap_or_default())
    }

    /// Whether this replica is fenced at `epoch` of `group` (C1); if not, `primary` is
    /// told the epoch it knows.
    fn fenced_at(&mut self, primary: ServerId, group: ChunkGroupId, epoch: Epoch) -> bool {
        let known = self.known_epoch(group);
        if epoch != known {
            self.answer_primary(primary, Message::ReplicaRefused { group, epoch, known });
        }
        epoch == known
    }

    fn sync_request(&mut self, primary: ServerId, group: ChunkGroupId, epoch: Epoch) {
        let known = self.known_epoch(group);
        if epoch < known {
            // To this server's own primary too: a newer primary fenced it, it steps down.
            self.answer_primary(primary, Message::ReplicaRefused { group, epoch, known });
        } else if epoch == self.store.epoch(group) {
            // A repeated request (the reply was lost): fenced already.
            self.reply_sync_when_settled(primary, group, epoch);
        } else if epoch > known {
            self.replica_work.entry(group).or_default().fencing = Some(epoch);
            self.disk(Io::Fence { group, epoch, primary }, 0, super::store::BLOCK_BYTES);
        }
        // epoch == known but not yet durable: the fence in flight answers.
    }

    /// Sends the sync reply once no write accepted before the fence is in flight.
    fn reply_sync_when_settled(&mut self, primary: ServerId, group: ChunkGroupId, epoch: Epoch) {
        if let Some(work) = self.replica_work.get_mut(&group)
            && !work.queued.is_empty()
        {
            work.fences_waiting.push((primary, epoch));
            return;
        }
        let unstable = self.store.unstable(group);
        let reply = Message::SyncReply { group, epoch, unstable };
        self.answer_primary(primary, reply);
    }

    /// Changes the replica work of `group`, if it has any, and forgets it once idle:
    /// one lookup, on every replica write's completion.
    fn update_work<R>(
        &mut self,
        group: ChunkGroupId,
        change: impl FnOnce(&mut ReplicaWork) -> R,
    ) -> Option<R> {
        let btree_map::Entry::Occupied(mut work) = self.replica_work.entry(group) else {
            return None;
        };
        let result = change(work.get_mut());
        if work.get().is_idle() {
            work.remove();
        }
        Some(result)
    }

    /// Delivers a replica's answer: over the network, or to this server's own primary.
    fn answer_primary(&mut self, primary: ServerId, message: Message) {
        if primary == self.id {
            self.replica_message(self.id, message);
        } else {
            self.send(Peer::Server(primary), message);
        }
    }

    fn repair_read(
        &mut self,
        primary: ServerId,
        group: ChunkGroupId,
        epoch: Epoch,
        chunk: super::ChunkId,
        range: ByteRange,
    ) {
        let pieces = self.store.read(chunk, range).ok();
        let position = disk_position(chunk, range);
        let io = Io::RepairRead { to: primary, group, epoch, chunk, range, pieces };
        self.disk(io, position, range.size_bytes());
    }

    /// What to do when `io` is done (its change, if any, is in the store already; a
    /// read's pieces have their bytes).
    fn io_done(&mut self, io: Io) {
        match io {
            Io::ReplicaWrite { group, epoch, primary, write, .. } => {
                let version = write.version;
                let settled = self.update_work(group, |work| {
                    if let Ok(at) = work.queued.binary_search(&(epoch, version)) {
                        work.queued.remove(at);
                    }
                    if work.queued.is_empty() {
                        std::mem::take(&mut work.fences_waiting)
                    } else {
                        Vec::new()
                    }
                });
                for (primary, epoch) in settled.unwrap_or_default() {
                    self.reply_sync_when_settled(primary, group, epoch);
                }
                let ack = Message::ReplicaAck { group, epoch, version };
                self.answer_primary(primary, ack);
            }
            Io::Fence { group, epoch, primary } => {
                self.update_work(group, |work| {
                    if work.fencing.is_some_and(|e| e <= epoch) {
                        work.fencing = None;
                    }
                });
                self.reply_sync_when_settled(primary, group, epoch);
            }
            Io::ClientRead { group, read, pieces, found } => {
                self.read_done(group, read.client, read.request, pieces, found);
            }
            Io::RepairRead { to, group, epoch, chunk, range, pieces } => {
                let message = Message::RepairData { group, epoch, chunk, range, pieces };
                self.answer_primary(to, message);
            }
            io @ (Io::LogRead { .. }
            | Io::LogAppend { .. }
            | Io::LogFence { .. }
            | Io::LogInvalidate { .. }
            | Io::LogCollect { .. }
            | Io::LogCopies) => self.log_io_done(io),
            Io::Free { objects, through } => self.freed(&objects, through),
            Io::RebuildRead { to, group, epoch, chunk, pieces } => {
                let pieces: Vec<super::Piece> =
                    pieces.into_iter().filter(|p| p.version.0 > 0).collect();
                self.counters.rebuilt_bytes +=
                    pieces.iter().map(|p| p.range.size_bytes()).sum::<u64>();
                self.send(Peer::Server(to), Message::RebuildData { group, epoch, chunk, pieces });
            }
            Io::RebuildWrite { group, epoch, primary, chunk, .. } => {
                // A copy this primary pulled for a resync (R4) is its own to count.
                self.resync_applied(primary, group, epoch, chunk);
                self.answer_primary(primary, Message::RebuildAck { group, epoch, chunk });
            }
            Io::Repair { group, range, .. } => {
                self.counters.blocks_repaired += range.size_bytes() / super::store::BLOCK_BYTES;
                self.admit(group);
            }
        }
    }
}

impl Server {
    /// The MDS's list of servers that do not serve: a replica among them is no longer
    /// synced (it is fenced again when it is back) and its primaries log for it.
    /// Every led group's parked log reads due again: a logger may be there to ask.
    fn unpark_reads(&mut self) {
        let groups: Vec<ChunkGroupId> = self.led.keys().copied().collect();
        for group in groups {
            if let Some(led) = self.led.get_mut(&group) {
                led.dvl.unpark_reads();
            }
        }
    }

    fn set_down(&mut self, down: Vec<ServerId>) {
        let down: BTreeSet<ServerId> = down.into_iter().filter(|s| *s != self.id).collect();
        if down == self.down {
            return;
        }
        self.down = down;
        self.down_list = self.down.iter().copied().collect();
        self.unpark_reads();
        let groups: Vec<ChunkGroupId> = self.led.keys().copied().collect();
        for group in groups {
            let Some(led) = self.led.get_mut(&group) else { continue };
            led.forget_down(&self.down);
            self.log_pending(group);
        }
    }
}

/// Where the log lies on the disk: past every chunk.
const LOG_REGION_START: u64 = 1 << 46;

/// Where a chunk's range lies on the server's disk: chunks spread by a hash of their
/// id, so the disk model sees seeks between chunks and sequential runs within one.
fn disk_position(chunk: super::ChunkId, range: ByteRange) -> u64 {
    let slot = super::mds::mix(chunk.object.0 << 32 | u64::from(chunk.chunk.0));
    (slot % (1 << 20)) * (1 << 26) + range.start
}
