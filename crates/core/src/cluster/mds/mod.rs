//! The metadata service (docs/protocol.md): server registry, namespace, chunk-group
//! primaries with epochs and leases, DVL logger views and the gear. It is never on the
//! data path.
//!
//! Every change of its durable state is a [`Command`], applied by [`Mds::apply`] and
//! announced first as `MdsAction::Persist`, so that a shell can keep a command log and
//! replaying it gives the same state (and, later, replicas of the MDS can apply the
//! same commands). Heartbeat times and lease expiries are soft state: an MDS that
//! restarts waits out a whole lease before any view change.
//!
//! Call protocol: after [`Mds::new`] and after each [`Mds::handle`], drain
//! [`Mds::poll_action`] until `None` (carrying out each `Persist` before the actions
//! that follow it), then arm a timer for [`Mds::poll_timeout`] and call
//! `handle(now, MdsEvent::TimerFired)` when it expires. Times never decrease.

mod compute;
mod deadlines;
mod frees;
mod gearing;
mod namespace;
mod power;
mod rebuild;
mod snapshot;
mod space;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use somnus_types::{ChunkGroupId, GearGroupId, ObjectId, RackId, ServerId, VirtualInstant};

use super::{
    ClientId, ClusterConfig, DvlHandoff, Epoch, GroupView, LeaseGrant, LeaseRenewal, Message, Peer,
    ServerPower, ServerTime, SpaceReport, WAKE_RESEND,
};
use crate::gear::{GearMode, GearScheduler, IoServerController, PowerPlan};
use crate::layout::Layout;
use crate::power::ComputeRole;
use deadlines::{Deadlines, Due};

pub use frees::FreeSpec;
pub use namespace::{
    ATTRS_BYTES_MAX, BIND_OBJECTS_MAX, NAME_BYTES_MAX, OBJECT_CHUNKS_MAX, OBJECTS_MAX,
};
pub use space::HELD_OBJECTS_MAX;

/// Inputs, as facts.
#[derive(Clone, Debug, PartialEq)]
pub enum MdsEvent {
    MessageReceived {
        from: Peer,
        message: Message,
    },
    TimerFired,
    /// The operator set gear N (as `GearMode { mode: Set(N) }`).
    GearSet {
        gear: u32,
    },
    /// A plan with its order of gear groups, as the scheduler's daily rotation turns
    /// it (a simulation's script; an order that is not a permutation keeps the
    /// current one).
    PlanSet {
        plan: PowerPlan,
        order: Vec<u32>,
    },
    /// The operator's override of the gear scheduler (`somnus gear set N|auto|hold`);
    /// without a scheduler only `Set` does anything.
    GearMode {
        mode: GearMode,
    },
    /// The operator declared `server` lost for good: its replicas are rebuilt on the
    /// other servers of its gear group (3.2).
    DeclareLost {
        server: ServerId,
    },
    /// The cluster's compute in `second`, in max-perf servers (001), for the io-server
    /// controller; ignored without one.
    Compute {
        second: u64,
        servers: f64,
    },
}

/// Outputs, as commands to the shell, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MdsAction {
    /// Make `Command` durable before carrying out the actions after it.
    Persist(Command),
    Send {
        to: Peer,
        message: Message,
    },
    /// Wake a sleeping server (Wake-on-LAN, a timed wake, the emulator).
    WakeServer(ServerId),
    /// The io-server controller's role for a server on, from now (001).
    ComputeRole {
        server: ServerId,
        role: ComputeRole,
    },
}

/// A change of the MDS's durable state.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Command {
    CreateObject {
        name: String,
        object: ObjectId,
        size_bytes: u64,
        chunk_groups: Vec<ChunkGroupId>,
        /// The client request that created it: the same request again (a retry, a
        /// duplicate) is answered with the object, not refused.
        creator: (ClientId, u64),
    },
    DeleteObject {
        name: String,
    },
    /// `server` leads `group` from `epoch` on (or nobody, while none can).
    SetPrimary {
        group: ChunkGroupId,
        epoch: Epoch,
        server: Option<ServerId>,
    },
    SetPower {
        server: ServerId,
        power: ServerPower,
    },
    /// Gear groups 0..gear on (in id order): written by builds before gear plans,
    /// still read from their logs.
    SetGear {
        gear: u32,
    },
    /// The gear plan: the first `full_groups` gear groups of `order` on, and the first
    /// `partial` servers (by id) of the next one.
    SetPlan {
        full_groups: u32,
        partial: u32,
        order: Vec<u32>,
    },
    /// `with` replaces the lost `lost` among `group`'s replicas, its copy to be built.
    ReplaceReplica {
        group: ChunkGroupId,
        lost: ServerId,
        with: ServerId,
    },
    /// `server`'s copy of `group` is complete.
    RebuildDone {
        group: ChunkGroupId,
        server: ServerId,
    },
    /// The group's primary could not log a write: its replicas stay on until the next
    /// gear shift (P4).
    KeepReplicasOn {
        group: ChunkGroupId,
    },
    /// The primary of `epoch` set the group's logger view, its change `seq`.
    SetLoggerView {
        group: ChunkGroupId,
        epoch: Epoch,
        seq: u64,
        loggers: Vec<ServerId>,
    },
    /// Object ids below `next` are taken (a snapshot keeps a deleted object's id from
    /// being given again: its chunks may still be on the servers).
    ReserveObjectIds {
        next: ObjectId,
    },
    /// A data object allocated for `creator`'s writes, bound to no name yet.
    AllocateObject {
        object: ObjectId,
        size_bytes: u64,
        chunk_groups: Vec<ChunkGroupId>,
        creator: (ClientId, u64),
    },
    /// `name` holds `data` (allocated objects, or ones it or the names of `taking`
    /// held) with `attrs`, at `generation`; what it and `taking` held besides is freed,
    /// and the names of `taking` go.
    Bind {
        name: String,
        data: Vec<ObjectId>,
        attrs: Vec<u8>,
        taking: Vec<String>,
        generation: u64,
        creator: (ClientId, u64),
    },
    /// The names go; their data is freed.
    DeleteObjects {
        names: Vec<String>,
    },
    /// Allocations left unbound past the pending grace: freed.
    ExpirePending {
        objects: Vec<ObjectId>,
    },
    /// Data objects to free (orphans a server found, or a snapshot's free log), and
    /// the sequence the next entry gets at least.
    QueueFrees {
        frees: Vec<FreeSpec>,
        next_seq: u64,
    },
    /// Entries of the free log every server they waited for applied.
    TrimFrees {
        seqs: Vec<u64>,
    },
    /// The operator's override of the gear scheduler (`somnus gear set N|hold|auto`),
    /// which a restarted MDS gives its new scheduler.
    SetGearMode {
        mode: GearMode,
    },
    /// Creates and deletes answered (whatever the answer): a duplicate of one, however
    /// late, is answered again and changes nothing, also after a restart.
    AnsweredRequests {
        requests: Vec<(ClientId, u64)>,
    },
    /// `server` went to sleep on its `Standby` sent at `sent_at`: a heartbeat it sent
    /// before is stale, also when the network delivers it after a restart of the MDS
    /// (it once read as the sleeper back on, which the MDS then waited for in vain).
    SleptAt {
        server: ServerId,
        sent_at: ServerTime,
    },
    /// A failed server came back: the groups P4 kept on (their primaries could not
    /// log) are kept on no longer; a primary that still cannot log asks again. (The
    /// holders P7 keeps on stay: a server back from a failure does not hold their
    /// writes.)
    ReleaseKeptOn,
    /// The group's primary awaits logged writes every holder of which sleeps: these
    /// servers stay on until the next gear shift (P7).
    KeepHoldersOn {
        group: ChunkGroupId,
        servers: Vec<ServerId>,
    },
}

/// What the MDS dropped or did, for tests and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MdsCounters {
    /// Messages for nothing the MDS knows (late, repeated, from an old epoch).
    pub messages_dropped: u64,
    pub view_changes: u64,
    pub migrations: u64,
    pub servers_failed: u64,
    pub wakes: u64,
    /// Data objects a server's orphan scan found no name holding, queued to free.
    #[serde(default)]
    pub orphans_found: u64,
}

#[derive(Clone, Debug)]
struct ServerEntry {
    rack: RackId,
    gear_group: GearGroupId,
    power: ServerPower,
    /// The send time of its last heartbeat (its clock, in its incarnation: a restarted
    /// server's are newer whatever its clock reads), and when the MDS received it
    /// (soft state).
    heartbeat_sent: Option<ServerTime>,
    heartbeat_received: VirtualInstant,
    /// When the MDS last sent its wake, while it has it waking (soft state): sent
    /// again every `WAKE_RESEND`, as a real NIC may miss a packet while its host
    /// suspends.
    wake_sent: Option<VirtualInstant>,
}

#[derive(Clone, Debug)]
struct GroupEntry {
    replicas: Vec<ServerId>,
    epoch: Epoch,
    primary: Option<ServerId>,
    /// The primary has been sent its grant for `epoch`.
    granted: bool,
    /// When the grant was last sent (soft state), and the lease start it carried, on
    /// the server's clock (none for grants from before an MDS restart): a heartbeat
    /// that does not list the group shows the grant lost (`regrant_lost`).
    granted_at: VirtualInstant,
    granted_from: Option<ServerTime>,
    /// Until when the primary may lead, as the MDS counts it (soft state).
    lease_expires: Option<VirtualInstant>,
    /// The DVL state to hand to the next primary (a migration), or none (recover).
    handoff: Option<DvlHandoff>,
    /// The server a migration under way hands the group to.
    migrating_to: Option<ServerId>,
    logger_view: Vec<ServerId>,
    /// The (epoch, seq) of the change that set `logger_view`: older ones are ignored.
    logger_view_set: (Epoch, u64),
    /// Replicas whose copy is being rebuilt: never made primary until done (R1).
    rebuilding: Vec<ServerId>,
    /// Its replicas stay on whatever the gear, until the next shift (P4).
    kept_on: bool,
    /// Servers holding logged writes its primary must read back, on whatever the
    /// gear until the next shift (P7).
    kept_holders: Vec<ServerId>,
}

/// A name: the data objects it holds, in order, and what its binder said of it.
#[derive(Clone, Debug)]
struct NameEntry {
    /// The request that made it (a retry of it is answered with the name).
    creator: (ClientId, u64),
    generation: u64,
    data: Vec<ObjectId>,
    attrs: Vec<u8>,
}

/// A data object: held by one name, or allocated and not bound yet.
#[derive(Clone, Debug)]
struct DataEntry {
    size_bytes: u64,
    /// Shared with every lookup's answer, not copied into it.
    chunk_groups: std::sync::Arc<[ChunkGroupId]>,
    /// Its chunk groups, each once, in order: a lookup sends their views (an object of
    /// a large volume has hundreds of thousands of chunks in a few hundred groups).
    groups: Vec<ChunkGroupId>,
    /// Allocated for this request, bound to no name yet, until the expiry (soft).
    pending: Option<((ClientId, u64), VirtualInstant)>,
}

/// The metadata service's state machine.
#[derive(Clone, Debug)]
pub struct Mds {
    config: ClusterConfig,
    servers: Vec<ServerEntry>,
    groups: Vec<GroupEntry>,
    /// The groups each server leads, by index (follows `SetPrimary`): a heartbeat's
    /// handling looks at its sender's groups alone, not at every group (a scan of
    /// every group per heartbeat grows with the square of the cluster's size).
    led: Vec<BTreeSet<u32>>,
    /// The groups with no primary, by index (follows `SetPrimary` as `led` does).
    leaderless: BTreeSet<u32>,
    /// The servers that do not serve now, and those lost for good (follow
    /// `SetPower`; every heartbeat reply carries them).
    down: Vec<ServerId>,
    /// The servers draining to sleep (follow `SetPower`): no primary logs to them.
    draining: Vec<ServerId>,
    lost: Vec<ServerId>,
    /// The servers whose last heartbeat said their disk is full (soft state: a
    /// restarted MDS hears it again within a heartbeat).
    full: Vec<ServerId>,
    names: BTreeMap<String, NameEntry>,
    data: BTreeMap<ObjectId, DataEntry>,
    /// Bytes of the data objects names hold (each once): `data`'s bound entries,
    /// summed as they change (status asks for it after every command).
    named_bytes: u64,
    /// Allocations not bound yet, by their request and by expiry.
    pending_by_creator: BTreeMap<(ClientId, u64), ObjectId>,
    pending_expiry: BTreeSet<(VirtualInstant, ObjectId)>,
    /// Data objects to free (docs/space.md).
    frees: frees::FreeLog,
    /// Each server's disk, as its last heartbeat told (soft state).
    space: Vec<SpaceReport>,
    /// Creates and deletes answered lately, by request (durable: a command each): a
    /// retry or a duplicate of one is answered again and changes nothing, so that it
    /// cannot delete the name made again since, nor make again one deleted since.
    answered: namespace::Answered,
    next_object: u64,
    /// Which servers the gear keeps on: the plan and the gear groups in its order.
    plan: PowerPlan,
    order: Vec<u32>,
    /// The operator's override, given to a scheduler the shell enables (durable, so a
    /// restarted MDS keeps the gear the operator set).
    gear_override: GearMode,
    /// Each server's place among its gear group's servers, by id (a partial group
    /// keeps its first servers on).
    rank: Vec<u32>,
    /// Decides the plan from the primaries' load reports, when the shell enabled it.
    scheduler: Option<Box<GearScheduler>>,
    /// Sizes the max-perf set to the compute load, when the shell enabled it; each
    /// server's role (none while off).
    io_server: Option<Box<IoServerController>>,
    roles: Vec<Option<ComputeRole>>,
    actions: VecDeque<MdsAction>,
    counters: MdsCounters,
    now: VirtualInstant,
    /// The leases', silences' and wake resends' deadlines in order (`poll_timeout`).
    deadlines: Deadlines,
    /// A deliberately wrong protocol, for showing the simulation's checker catches
    /// it (the MDS's side of `Broken::FreeBeforeGrace` and `Broken::FreeNamed`).
    broken: Option<crate::cluster::server::Broken>,
}

impl Mds {
    /// A new cluster on `layout` (power-aware: replica `i` in gear group `i`), every
    /// server on, every group's first primary chosen so that primaries are balanced.
    pub fn new(config: ClusterConfig, layout: &Layout, now: VirtualInstant) -> Mds {
        assert_eq!(
            layout.replica_count() as u32,
            config.replicas,
            "layout and config disagree on r"
        );
        assert!(config.gear_min >= 1 && config.gear_min <= config.replicas, "g_min out of 1..=r");
        let servers = layout
            .servers()
            .iter()
            .map(|slot| ServerEntry {
                rack: slot.rack,
                gear_group: slot.gear_group.unwrap_or(GearGroupId(0)),
                power: if slot.removed { ServerPower::Removed } else { ServerPower::On },
                heartbeat_sent: None,
                heartbeat_received: now,
                wake_sent: None,
            })
            .collect();
        let mut mds = Mds {
            config,
            servers,
            groups: Vec::with_capacity(layout.chunk_group_count()),
            led: vec![BTreeSet::new(); layout.servers().len()],
            leaderless: BTreeSet::new(),
            down: Vec::new(),
            draining: Vec::new(),
            lost: Vec::new(),
            full: Vec::new(),
            names: BTreeMap::new(),
            data: BTreeMap::new(),
            named_bytes: 0,
            pending_by_creator: BTreeMap::new(),
            pending_expiry: BTreeSet::new(),
            frees: frees::FreeLog::new(layout.servers().len()),
            space: vec![SpaceReport::default(); layout.servers().len()],
            answered: namespace::Answered::default(),
            next_object: 1,
            plan: PowerPlan { full_groups: config.replicas, partial: 0 },
            order: (0..config.replicas).collect(),
            gear_override: GearMode::Auto,
            rank: Vec::new(),
            scheduler: None,
            io_server: None,
            roles: Vec::new(),
            actions: VecDeque::new(),
            counters: MdsCounters::default(),
            now,
            deadlines: Deadlines::default(),
            broken: None,
        };
        mds.rank = gear_group_ranks(&mds.servers);
        mds.list_power();
        for server in 0..mds.servers.len() {
            mds.index_server(ServerId(server as u32));
        }
        for replicas in layout.groups() {
            // The least loaded replica leads; ties go by a hash of the seed and group.
            let index = mds.groups.len() as u64;
            let primary = replicas.iter().copied().min_by_key(|s| {
                (mds.led[s.index()].len(), mix(config.seed ^ index ^ u64::from(s.0) << 32))
            });
            match primary {
                Some(primary) => mds.led[primary.index()].insert(index as u32),
                None => mds.leaderless.insert(index as u32),
            };
            mds.groups.push(GroupEntry {
                replicas: replicas.to_vec(),
                epoch: Epoch(1),
                primary,
                granted: false,
                granted_at: now,
                granted_from: None,
                lease_expires: None,
                // A new group has an empty DVL: nothing to recover.
                handoff: Some(DvlHandoff::default()),
                migrating_to: None,
                logger_view: Vec::new(),
                logger_view_set: (Epoch(0), 0),
                rebuilding: Vec::new(),
                kept_on: false,
                kept_holders: Vec::new(),
            });
        }
        mds
    }

    /// The MDS restarted at `now` from its persisted commands, in order (a snapshot's,
    /// then the log's). What was not a command is not known: a group's DVL handoff
    /// (the state a migrating primary gave back) is lost, so every next primary
    /// recovers its DVL from the group's loggers (D4); a lease granted before the
    /// restart may still run, so every group with a primary is taken as granted with a
    /// full lease from now, renewed by its primary's heartbeats and deposed only once
    /// it runs out (C2). A primary that restarted too is granted a new epoch at its
    /// first heartbeat, as after any lost grant.
    pub fn restore(
        config: ClusterConfig,
        layout: &Layout,
        now: VirtualInstant,
        commands: impl IntoIterator<Item = Command>,
    ) -> Mds {
        let mut mds = Mds::new(config, layout, now);
        for command in commands {
            mds.apply(&command);
        }
        let lease_end = now.saturating_add(config.lease);
        for index in 0..mds.groups.len() {
            let entry = &mut mds.groups[index];
            entry.handoff = None;
            entry.migrating_to = None;
            entry.granted = entry.primary.is_some();
            entry.granted_at = now;
            entry.granted_from = None;
            entry.lease_expires = entry.primary.map(|_| lease_end);
            mds.index_lease(ChunkGroupId(index as u32));
        }
        // A free queued before its server was declared lost waits for it again (the
        // free log's waits are derived, not commands): no free waits for a lost one.
        for index in 0..mds.servers.len() {
            if mds.servers[index].power == ServerPower::Removed {
                mds.forget_frees_of(ServerId(index as u32));
            }
        }
        // A server it had waking is sent its wake again (the wake timeout counts from
        // now): the packets of the MDS before the restart may all have been missed.
        for index in 0..mds.servers.len() {
            if mds.servers[index].power == ServerPower::Waking {
                mds.servers[index].heartbeat_received = now;
                mds.send_wake(ServerId(index as u32));
            }
        }
        mds
    }

    /// Makes this MDS run a deliberately wrong protocol (never outside the tests that
    /// show the checker catches it, and `somnus sim cluster --broken`).
    pub fn set_broken(&mut self, broken: Option<crate::cluster::server::Broken>) {
        self.broken = broken;
    }

    pub fn handle(&mut self, now: VirtualInstant, event: MdsEvent) {
        assert!(now >= self.now, "time went back: {now:?} < {:?}", self.now);
        self.now = now;
        match event {
            MdsEvent::MessageReceived { from, message } => self.handle_message(from, message),
            MdsEvent::TimerFired => self.handle_timer(),
            MdsEvent::GearSet { gear } => self.gear_mode(GearMode::Set(gear)),
            MdsEvent::PlanSet { plan, order } => self.set_plan(plan, order),
            MdsEvent::GearMode { mode } => self.gear_mode(mode),
            MdsEvent::DeclareLost { server } => self.declare_lost(server),
            MdsEvent::Compute { second, servers } => self.report_compute(second, servers),
        }
        self.assign_roles();
    }

    pub fn poll_action(&mut self) -> Option<MdsAction> {
        self.actions.pop_front()
    }

    /// The next time something is due: a lease past its margin, a server silent for
    /// too long, a wake to send again.
    pub fn poll_timeout(&self) -> Option<VirtualInstant> {
        debug_assert!(
            self.deadlines.agree(
                self.groups.iter().map(|g| self.lease_deadline(g)),
                self.servers.iter().map(|s| (self.silence_deadline(s), wake_resend_deadline(s))),
            ),
            "the deadline index is stale"
        );
        let scheduler = self.scheduler.as_ref().map(|s| s.poll_timeout());
        let scheduler = scheduler.filter(|at| *at != VirtualInstant::MAX);
        let expiry = self.pending_expiry.first().map(|(at, _)| *at);
        [self.deadlines.first(), scheduler, expiry].into_iter().flatten().min()
    }

    /// When a group's lease has run out, the margin included.
    fn lease_deadline(&self, group: &GroupEntry) -> Option<VirtualInstant> {
        group.lease_expires.map(|at| at.saturating_add(self.config.lease_margin))
    }

    /// Indexes the lease deadline of `group` after a change of its lease.
    fn index_lease(&mut self, group: ChunkGroupId) {
        let at = self.lease_deadline(&self.groups[group.index()]);
        self.deadlines.set(Due::Lease(group.0), at);
    }

    /// Indexes the silence deadline of `server` and its wake's resend after a change
    /// of its power, of when it was last heard or of when its wake was sent.
    fn index_server(&mut self, server: ServerId) {
        let entry = &self.servers[server.index()];
        let (silence, wake_resend) = (self.silence_deadline(entry), wake_resend_deadline(entry));
        self.deadlines.set(Due::Silence(server.0), silence);
        self.deadlines.set(Due::WakeResend(server.0), wake_resend);
    }

    /// When a server not heard from counts as failed: serving ones after the failure
    /// timeout, woken ones after the wake timeout; asleep ones never (P2).
    fn silence_deadline(&self, server: &ServerEntry) -> Option<VirtualInstant> {
        let timeout = match server.power {
            ServerPower::On | ServerPower::Draining => self.config.failure_timeout,
            ServerPower::Waking => self.config.wake_timeout,
            ServerPower::Asleep | ServerPower::Failed | ServerPower::Removed => return None,
        };
        Some(server.heartbeat_received.saturating_add(timeout))
    }

    pub fn server_rack(&self, server: ServerId) -> RackId {
        self.servers[server.index()].rack
    }

    pub fn counters(&self) -> MdsCounters {
        self.counters
    }

    /// Whole gear groups on.
    pub fn gear(&self) -> u32 {
        self.plan.full_groups
    }

    /// The gear plan and the gear groups in its order, first on first.
    pub fn plan(&self) -> (PowerPlan, &[u32]) {
        (self.plan, &self.order)
    }

    /// The gear scheduler, when the shell enabled one.
    pub fn scheduler(&self) -> Option<&GearScheduler> {
        self.scheduler.as_deref()
    }

    pub fn server_count(&self) -> usize {
        self.servers.len()
    }

    /// How many groups `server` leads now.
    pub fn groups_led(&self, server: ServerId) -> usize {
        self.led[server.index()].len()
    }

    /// How many chunk groups each server holds a replica of now (after rebuilds).
    pub fn groups_held(&self) -> Vec<usize> {
        let mut held = vec![0; self.servers.len()];
        for group in &self.groups {
            for server in &group.replicas {
                held[server.index()] += 1;
            }
        }
        held
    }

    pub fn server_power(&self, server: ServerId) -> ServerPower {
        self.servers[server.index()].power
    }

    /// When the MDS last heard a heartbeat of `server`.
    pub fn heard_from(&self, server: ServerId) -> VirtualInstant {
        self.servers[server.index()].heartbeat_received
    }

    /// The servers whose last heartbeat said their disk is full.
    pub fn full_servers(&self) -> &[ServerId] {
        &self.full
    }

    /// The current view of `group`.
    pub fn view(&self, group: ChunkGroupId) -> GroupView {
        let entry = &self.groups[group.index()];
        GroupView {
            group,
            epoch: entry.epoch,
            primary: entry.primary.filter(|_| entry.granted),
            replicas: entry.replicas.clone(),
        }
    }

    /// The replicas of `group` ([`Mds::view`] without a copy of them).
    pub fn replicas(&self, group: ChunkGroupId) -> &[ServerId] {
        &self.groups[group.index()].replicas
    }

    pub fn logger_view(&self, group: ChunkGroupId) -> &[ServerId] {
        &self.groups[group.index()].logger_view
    }

    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// Applies one command to the durable state (also used to replay a command log).
    pub fn apply(&mut self, command: &Command) {
        match command {
            Command::CreateObject { name, object, size_bytes, chunk_groups, creator } => {
                assert!(!self.names.contains_key(name), "C5: object {name:?} created twice");
                self.add_data(*object, *size_bytes, chunk_groups.clone(), None);
                let entry = NameEntry {
                    creator: *creator,
                    generation: object.0,
                    data: vec![*object],
                    attrs: Vec::new(),
                };
                self.names.insert(name.clone(), entry);
            }
            Command::DeleteObject { name } => self.unname(name, &[]),
            Command::AllocateObject { object, size_bytes, chunk_groups, creator } => {
                let expires = self.now.saturating_add(self.config.pending_grace);
                self.add_data(
                    *object,
                    *size_bytes,
                    chunk_groups.clone(),
                    Some((*creator, expires)),
                );
            }
            Command::Bind { name, data, attrs, taking, generation, creator } => {
                self.apply_bind(name, data, attrs, taking, *generation, *creator);
            }
            Command::DeleteObjects { names } => {
                for name in names {
                    self.unname(name, &[]);
                }
            }
            Command::ExpirePending { objects } => {
                for object in objects {
                    if self.data.get(object).is_some_and(|d| d.pending.is_some()) {
                        self.free_data(*object);
                    }
                }
            }
            Command::QueueFrees { frees, next_seq } => {
                for spec in frees {
                    self.queue_free(spec.clone());
                }
                self.frees.reserve(*next_seq);
            }
            Command::TrimFrees { seqs } => self.frees.trim(seqs),
            Command::SetGearMode { mode } => self.gear_override = *mode,
            Command::SleptAt { server, sent_at } => {
                let entry = &mut self.servers[server.index()];
                entry.heartbeat_sent = entry.heartbeat_sent.max(Some(*sent_at));
            }
            Command::AnsweredRequests { requests } => {
                for (client, request) in requests {
                    self.answered.add(*client, *request);
                }
            }
            Command::SetPrimary { group, epoch, server } => {
                let entry = &mut self.groups[group.index()];
                assert!(*epoch >= entry.epoch, "C1: {group} epoch {epoch} below {}", entry.epoch);
                if let Some(server) = server {
                    assert!(
                        entry.replicas.contains(server),
                        "C1: {server} leads {group} it has no replica of"
                    );
                }
                match entry.primary {
                    Some(old) => self.led[old.index()].remove(&group.0),
                    None => self.leaderless.remove(&group.0),
                };
                match server {
                    Some(new) => self.led[new.index()].insert(group.0),
                    None => self.leaderless.insert(group.0),
                };
                entry.epoch = *epoch;
                entry.primary = *server;
                entry.granted = false;
                entry.lease_expires = None;
                entry.migrating_to = None;
                self.index_lease(*group);
            }
            Command::SetPower { server, power } => {
                self.servers[server.index()].power = *power;
                self.index_server(*server);
                self.list_power();
            }
            Command::SetGear { gear } => {
                self.plan = PowerPlan { full_groups: *gear, partial: 0 };
                self.order = (0..self.config.replicas).collect();
                for group in &mut self.groups {
                    group.kept_on = false;
                    group.kept_holders.clear();
                }
            }
            Command::SetPlan { full_groups, partial, order } => {
                self.plan = PowerPlan { full_groups: *full_groups, partial: *partial };
                self.order = order.clone();
                for group in &mut self.groups {
                    group.kept_on = false;
                    group.kept_holders.clear();
                }
            }
            Command::KeepReplicasOn { group } => self.groups[group.index()].kept_on = true,
            Command::KeepHoldersOn { group, servers } => {
                let kept = &mut self.groups[group.index()].kept_holders;
                for server in servers {
                    if !kept.contains(server) {
                        kept.push(*server);
                    }
                }
            }
            Command::ReleaseKeptOn => {
                for group in &mut self.groups {
                    group.kept_on = false;
                }
            }
            Command::ReplaceReplica { group, lost, with } => {
                let entry = &mut self.groups[group.index()];
                if let Some(slot) = entry.replicas.iter_mut().find(|r| **r == *lost) {
                    *slot = *with;
                    entry.rebuilding.retain(|r| r != lost);
                    entry.rebuilding.push(*with);
                }
            }
            Command::RebuildDone { group, server } => {
                self.groups[group.index()].rebuilding.retain(|r| r != server);
            }
            Command::SetLoggerView { group, epoch, seq, loggers } => {
                let entry = &mut self.groups[group.index()];
                if (*epoch, *seq) > entry.logger_view_set {
                    entry.logger_view = loggers.clone();
                    entry.logger_view_set = (*epoch, *seq);
                }
            }
            Command::ReserveObjectIds { next } => {
                self.next_object = self.next_object.max(next.0);
            }
        }
    }

    fn commit(&mut self, command: Command) {
        self.apply(&command);
        if self.forgets(&command) {
            return;
        }
        self.actions.push_back(MdsAction::Persist(command));
    }

    /// Whether the broken variant that keeps logger views in memory leaves `command`
    /// out of what it persists.
    fn forgets(&self, command: &Command) -> bool {
        self.broken == Some(crate::cluster::server::Broken::LoggerViewInMemory)
            && matches!(command, Command::SetLoggerView { .. })
    }

    fn send(&mut self, to: Peer, message: Message) {
        self.actions.push_back(MdsAction::Send { to, message });
    }

    fn handle_message(&mut self, from: Peer, message: Message) {
        match (from, message) {
            (Peer::Server(server), message) if server.index() < self.servers.len() => {
                self.handle_server_message(server, message);
            }
            (Peer::Client(client), message) => self.handle_client_message(client, message),
            _ => self.counters.messages_dropped += 1,
        }
    }

    fn handle_server_message(&mut self, server: ServerId, message: Message) {
        if self.servers[server.index()].power == ServerPower::Removed {
            self.counters.messages_dropped += 1;
            return;
        }
        match message {
            Message::Heartbeat { sent_at, leads, full, load, space, .. } => {
                // Load once per heartbeat: a duplicate (same send time) is not new.
                let new = self.servers[server.index()].heartbeat_sent.is_none_or(|l| sent_at > l);
                if new {
                    self.report_load(sent_at.at, &load);
                    self.space_reported(server, *space);
                }
                self.heartbeat(server, sent_at, &leads, full)
            }
            Message::CheckObjects { objects } => self.objects_held(objects),
            // Only a group's primary in its epoch gives the lease back, sets the DVL's
            // view, reports a rebuild or asks for its replicas; a late or deposed one's
            // message is dropped.
            Message::CancelLease { group, epoch, handoff }
                if self.leads_now(server, group, epoch) =>
            {
                self.lease_cancelled(server, group, handoff);
            }
            Message::Standby { sent_at } => self.standby(server, sent_at),
            Message::LookupGroup { request, group } if group.index() < self.groups.len() => {
                // A replica's scrub looks for an intact copy.
                let view = self.view(group);
                self.send(Peer::Server(server), Message::GroupFound { request, view });
            }
            Message::SetLoggerView { group, epoch, seq, loggers }
                if self.leads_now(server, group, epoch) =>
            {
                self.set_logger_view(server, group, epoch, seq, loggers);
            }
            Message::RebuildDone { group, epoch, server: rebuilt }
                if self.leads_now(server, group, epoch) =>
            {
                self.rebuild_done(server, group, epoch, rebuilt);
            }
            Message::WakeReplicas { group, epoch } if self.leads_now(server, group, epoch) => {
                self.keep_replicas_on(group);
            }
            Message::WakeHolders { group, epoch, servers: holders }
                if self.leads_now(server, group, epoch) =>
            {
                self.keep_holders_on(group, holders);
            }
            _ => self.counters.messages_dropped += 1,
        }
    }

    fn heartbeat(
        &mut self,
        server: ServerId,
        sent_at: ServerTime,
        leads: &[(ChunkGroupId, Epoch)],
        full: bool,
    ) {
        let entry = &mut self.servers[server.index()];
        if entry.heartbeat_sent.is_some_and(|last| sent_at < last) {
            // An old heartbeat overtaken by a newer one: it renews nothing.
            self.counters.messages_dropped += 1;
            return;
        }
        match (self.full.binary_search(&server), full) {
            (Err(at), true) => self.full.insert(at, server),
            (Ok(at), false) => {
                self.full.remove(at);
            }
            _ => {}
        }
        entry.heartbeat_sent = Some(sent_at);
        entry.heartbeat_received = self.now;
        self.index_server(server);
        let entry = &self.servers[server.index()];
        let came_back = !matches!(entry.power, ServerPower::On | ServerPower::Draining);
        let was_failed = entry.power == ServerPower::Failed;
        let stays_on = self.keeps_on(server);
        if came_back {
            // Back from sleep or a failure; in a gear that has it off, it drains again.
            let power = if stays_on { ServerPower::On } else { ServerPower::Draining };
            self.commit(Command::SetPower { server, power });
        }
        let lease_end = self.now.saturating_add(self.config.lease);
        let mut renewed = Vec::new();
        let mut revoked = Vec::new();
        for &(group, epoch) in leads {
            match self.groups.get_mut(group.index()) {
                Some(g) if g.primary == Some(server) && g.epoch == epoch && g.granted => {
                    g.lease_expires = Some(lease_end);
                    self.index_lease(group);
                    renewed.push((group, epoch));
                }
                _ => revoked.push((group, epoch)),
            }
        }
        let (down, lost, full) = (self.down.clone(), self.lost.clone(), self.full.clone());
        let draining = self.draining.clone();
        let (frees, frees_through) = self.frees_for(server);
        let reply = Message::HeartbeatReply(Box::new(LeaseRenewal {
            sent_at,
            renewed,
            revoked,
            down,
            lost,
            full,
            draining,
            frees,
            frees_through,
        }));
        self.send(Peer::Server(server), reply);
        self.regrant_lost(server, sent_at, leads);
        self.send_pending_grants(server);
        if self.servers[server.index()].power == ServerPower::Draining {
            self.drain(server);
            return;
        }
        self.assign_leaderless(server);
        if came_back {
            self.rebalance_after_wakes();
            // Servers that covered for this one while it was away may sleep again;
            // back from a failure, those P4 woke too (the loggers it brings back may
            // be what they lacked; a sleeper woken for them is what they asked for).
            if was_failed && self.groups.iter().any(|g| g.kept_on) {
                self.commit(Command::ReleaseKeptOn);
            }
            self.settle_power();
        }
    }

    /// A server whose heartbeat (sent at `sent_at`, its clock) does not list a group
    /// it was granted lost the grant, or restarted and lost the lease with its memory:
    /// it leads the group again in a new epoch (never the same epoch twice: a restarted
    /// primary would hand out its versions again, C1), recovering its state. Only a
    /// heartbeat sent once the grant's lease had run out shows it: a grant arriving
    /// after that is refused as stale (`grant_is_new`). One sent earlier may have
    /// crossed a grant still on its way (a rebalance's DVL handoffs held the MDS's
    /// link for a second: re-granting then threw 32 groups' handoffs away and left
    /// their logged writes unreclaimed, two days of msr-fast08). A grant from before an
    /// MDS restart counts a heartbeat interval after the restart.
    fn regrant_lost(
        &mut self,
        server: ServerId,
        sent_at: ServerTime,
        leads: &[(ChunkGroupId, Epoch)],
    ) {
        let (now, interval, lease) = (self.now, self.config.heartbeat_interval, self.config.lease);
        let lost: Vec<usize> = (self.led[server.index()].iter())
            .map(|index| *index as usize)
            .filter(|index| {
                let entry = &self.groups[*index];
                let ran_out = match entry.granted_from {
                    Some(from) => from.lease_ran_out(lease, sent_at),
                    None => entry.granted_at.saturating_add(interval) <= now,
                };
                entry.primary == Some(server)
                    && entry.granted
                    && entry.migrating_to.is_none()
                    && ran_out
                    && !leads.iter().any(|(g, e)| g.index() == *index && *e == entry.epoch)
            })
            .collect();
        for index in lost {
            let group = ChunkGroupId(index as u32);
            let epoch = self.groups[index].epoch.next();
            self.groups[index].handoff = None;
            self.counters.view_changes += 1;
            self.commit(Command::SetPrimary { group, epoch, server: Some(server) });
        }
    }

    /// Sends `server` the grants it has been given but not sent (it was not heard from).
    fn send_pending_grants(&mut self, server: ServerId) {
        let lease_end = self.now.saturating_add(self.config.lease);
        // The server counts its lease from its own send time, earlier than `now` (C2).
        let Some(lease_from) = self.servers[server.index()].heartbeat_sent else { return };
        let ungranted: Vec<usize> = (self.led[server.index()].iter())
            .map(|index| *index as usize)
            .filter(|index| !self.groups[*index].granted)
            .collect();
        for index in ungranted {
            debug_assert_eq!(self.groups[index].primary, Some(server), "led follows SetPrimary");
            let group = ChunkGroupId(index as u32);
            // Kept until the next view change: a lost grant is sent again whole.
            let handoff = self.groups[index].handoff.clone();
            let entry = &mut self.groups[index];
            entry.granted = true;
            entry.granted_at = self.now;
            entry.granted_from = Some(lease_from);
            entry.lease_expires = Some(lease_end);
            self.index_lease(group);
            let entry = &self.groups[index];
            let logger_view = entry.logger_view.clone();
            let rebuilding = entry.rebuilding.clone();
            let view = self.view(group);
            let (down, draining) = (self.down.clone(), self.draining.clone());
            let grant =
                LeaseGrant { view, lease_from, logger_view, handoff, rebuilding, down, draining };
            let grant = Message::GrantLease(Box::new(grant));
            self.send(Peer::Server(server), grant);
        }
    }

    fn handle_timer(&mut self) {
        self.expire_pending();
        self.run_scheduler();
        self.resend_wakes();
        self.detect_failures();
        self.expire_leases();
    }

    /// C2: a group whose lease ran out (plus the margin) gets a new primary.
    fn expire_leases(&mut self) {
        for index in 0..self.groups.len() {
            let expired = self.groups[index]
                .lease_expires
                .is_some_and(|at| at.saturating_add(self.config.lease_margin) <= self.now);
            if expired {
                let group = ChunkGroupId(index as u32);
                // The old primary may have died with requests half done: recover.
                self.groups[index].handoff = None;
                self.change_view(group, None);
            }
        }
    }

    /// Gives `group` a new epoch and primary: `preferred` if it serves, else the
    /// serving replica that leads fewest groups; nobody if no replica serves (the
    /// sleeping ones are woken, P3).
    fn change_view(&mut self, group: ChunkGroupId, preferred: Option<ServerId>) {
        let entry = &self.groups[group.index()];
        let old = entry.primary;
        let candidates: Vec<ServerId> = entry
            .replicas
            .iter()
            .copied()
            .filter(|s| self.servers[s.index()].power.serves() && Some(*s) != old)
            .filter(|s| !entry.rebuilding.contains(s))
            .collect();
        let next = preferred
            .filter(|p| candidates.contains(p))
            .or_else(|| candidates.iter().copied().min_by_key(|s| (self.primaries_of(*s), s.0)));
        let epoch = entry.epoch.next();
        self.counters.view_changes += 1;
        self.commit(Command::SetPrimary { group, epoch, server: next });
        match next {
            Some(server) if self.servers[server.index()].heartbeat_sent.is_some() => {
                self.send_pending_grants(server);
            }
            Some(_) => {}
            None => self.wake_replicas(group),
        }
    }

    /// A server heard from that replicates a group with no primary takes it.
    fn assign_leaderless(&mut self, server: ServerId) {
        let leaderless: Vec<u32> = self.leaderless.iter().copied().collect();
        for index in leaderless {
            let entry = &self.groups[index as usize];
            if entry.primary.is_none() && entry.replicas.contains(&server) {
                self.change_view(ChunkGroupId(index), Some(server));
            }
        }
    }

    fn primaries_of(&self, server: ServerId) -> usize {
        let led = self.led[server.index()].len();
        debug_assert_eq!(led, self.groups.iter().filter(|g| g.primary == Some(server)).count());
        led
    }

    /// D3: the group's primary sets its logger view; a change older than the one
    /// applied (a late or repeated message) is answered but changes nothing.
    fn set_logger_view(
        &mut self,
        server: ServerId,
        group: ChunkGroupId,
        epoch: Epoch,
        seq: u64,
        loggers: Vec<ServerId>,
    ) {
        if !loggers.iter().all(|l| l.index() < self.servers.len()) {
            self.counters.messages_dropped += 1;
            return;
        }
        self.commit(Command::SetLoggerView { group, epoch, seq, loggers });
        self.send(Peer::Server(server), Message::LoggerViewSet { group, epoch, seq });
    }

    /// Whether `server` is `group`'s primary in `epoch`: only it may change the
    /// group's DVL view, give the lease back, report a rebuild or ask for its replicas.
    fn leads_now(&self, server: ServerId, group: ChunkGroupId, epoch: Epoch) -> bool {
        self.groups
            .get(group.index())
            .is_some_and(|g| g.primary == Some(server) && g.epoch == epoch)
    }

    /// Lists the servers that do not serve now (primaries log for them), those
    /// draining (no logger among them) and those lost for good, after a power change.
    fn list_power(&mut self) {
        let ids = |keep: &dyn Fn(ServerPower) -> bool| {
            let servers = self.servers.iter().enumerate().filter(|(_, s)| keep(s.power));
            servers.map(|(index, _)| ServerId(index as u32)).collect()
        };
        self.down = ids(&|power| !power.serves_replicas());
        self.draining = ids(&|power| power == ServerPower::Draining);
        self.lost = ids(&|power| power == ServerPower::Removed);
    }
}

/// When a waking server's wake is due to be sent again ([`ServerEntry::wake_sent`]).
fn wake_resend_deadline(server: &ServerEntry) -> Option<VirtualInstant> {
    let sent = server.wake_sent.filter(|_| server.power == ServerPower::Waking)?;
    Some(sent.saturating_add(WAKE_RESEND))
}

/// A 64-bit mix (SplitMix64's finaliser): the MDS's stateless random draws, so that
/// replaying commands needs no generator state.
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests;

/// Each server's place among the servers of its gear group, in id order.
fn gear_group_ranks(servers: &[ServerEntry]) -> Vec<u32> {
    let mut next: BTreeMap<GearGroupId, u32> = BTreeMap::new();
    servers
        .iter()
        .map(|s| {
            let rank = next.entry(s.gear_group).or_insert(0);
            *rank += 1;
            *rank - 1
        })
        .collect()
}
