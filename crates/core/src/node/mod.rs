//! A storage node: one server's volume managers, the loggers on its volumes and the
//! power units (the disks of each volume) they share, as one state machine. A shell
//! drives one `Node` per server and never multiplexes managers itself.
//!
//! The node routes: a manager's home I/O goes to its unit, its requests to loggers go
//! to the logger on this node or into a message for another node, replies and reports
//! go back to managers. It arbitrates power: a unit wakes for I/O that needs it (an
//! explicit `SpinUp` action; the shell never sees I/O for disks that do not spin) and
//! spins down only once its I/O drains. It answers for its loggers: what "awake"
//! means, what a write costs in log space, reservations, and the reports its watchers
//! get when a logger's availability changes. Background work never wakes a unit.
//!
//! Call protocol: after [`Node::new`] and after each [`Node::handle`], drain
//! [`Node::poll_action`] until `None`, then arm a timer for [`Node::poll_timeout`] and
//! call `handle(now, NodeEvent::TimerFired)` when it expires. Times never decrease.

mod log_service;
mod plan;
mod unit;

use std::collections::{BTreeMap, VecDeque};

use somnus_types::{
    ByteRange, IoId, IoKind, LoggerId, RequestId, ServerId, VirtualDuration, VirtualInstant,
    VolumeId,
};

pub use plan::{ClusterMap, VolumePlacement, plan_cluster};
pub use unit::UnitPower;

use crate::Version;
use crate::logger::{LogGeometry, Logger};
use crate::offload::{
    HomeIoError, LoggerAvailability, LoggerReply, LoggerStatus, ManagerAction, ManagerConfig,
    ManagerCounters, ManagerEvent, ReplyOutcome, SteadyPower, VolumeManager,
};
use crate::slab::{Key, Slab};
use log_service::LogService;
use unit::{PowerUnit, UnitCommand};

/// Bytes of a message's header on the wire (the simulator's network charges it).
pub const MESSAGE_HEADER_BYTES: u64 = 64;

/// What a manager asks of a logger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogOp {
    Write {
        range: ByteRange,
        version: Version,
    },
    Read {
        range: ByteRange,
        version: Version,
    },
    /// Hide `version` and every older version of `range`.
    Invalidate {
        range: ByteRange,
        version: Version,
    },
    /// Set `bytes` of room aside for the asking manager for a while.
    Reserve {
        bytes: u64,
    },
    /// How are you?
    Probe,
}

/// What nodes send each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeMessage {
    /// A manager's request to a logger; `io` names it in the reply.
    LogRequest { owner: VolumeId, logger: LoggerId, io: IoId, op: LogOp },
    /// A logger's answer; `payload_bytes` of data come with it (a read).
    LogReply { owner: VolumeId, io: IoId, reply: LoggerReply, payload_bytes: u64 },
    /// A logger's status, pushed to a manager whose view holds it.
    LoggerReport { watcher: VolumeId, logger: LoggerId, status: LoggerStatus },
}

impl NodeMessage {
    /// The bytes the message puts on the wire: a header, and the data it carries.
    pub fn wire_bytes(&self) -> u64 {
        let payload = match *self {
            NodeMessage::LogRequest { op: LogOp::Write { range, .. }, .. } => range.size_bytes(),
            NodeMessage::LogReply { payload_bytes, .. } => payload_bytes,
            NodeMessage::LogRequest { .. } | NodeMessage::LoggerReport { .. } => 0,
        };
        MESSAGE_HEADER_BYTES + payload
    }
}

/// A disk operation for the shell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeDiskOp {
    Read,
    Write,
}

/// Inputs, as facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeEvent {
    RequestArrived {
        volume: VolumeId,
        request: RequestId,
        kind: IoKind,
        range: ByteRange,
    },
    /// A disk I/O the node issued finished; a completion of nothing outstanding is
    /// dropped and counted.
    DiskIoCompleted {
        io: IoId,
        result: Result<(), HomeIoError>,
    },
    /// A unit came to rest after a transition the node asked for.
    PowerChanged {
        volume: VolumeId,
        power: SteadyPower,
    },
    /// A message from another node; one for nobody here is dropped and counted.
    MessageReceived {
        message: NodeMessage,
    },
    DrainRequested {
        volume: VolumeId,
    },
    TimerFired,
}

/// Outputs, as commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeAction {
    /// An I/O on a unit's disks, which spin (`placement` in the volume's byte space).
    DiskIo {
        io: IoId,
        volume: VolumeId,
        op: NodeDiskOp,
        placement: ByteRange,
    },
    SpinUp {
        volume: VolumeId,
    },
    SpinDown {
        volume: VolumeId,
    },
    Send {
        to: ServerId,
        message: NodeMessage,
    },
    Reply {
        volume: VolumeId,
        request: RequestId,
        kind: IoKind,
        outcome: ReplyOutcome,
        waited_for_spin_up: bool,
    },
}

/// One volume of a node: its manager's configuration and its log partition.
#[derive(Clone, Debug)]
pub struct NodeVolume {
    /// The manager of the volume (`manager.volume` names the volume).
    pub manager: ManagerConfig,
    pub log: LogGeometry,
    /// Where the log partition starts in the volume's byte space.
    pub log_offset_bytes: u64,
    /// The managers whose view holds this volume's logger, other than its own.
    pub watchers: Vec<VolumeId>,
}

/// A node's configuration.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub server: ServerId,
    pub volumes: Vec<NodeVolume>,
    /// The server of every volume this node talks to.
    pub servers: BTreeMap<VolumeId, ServerId>,
    /// How long a logger keeps room set aside for a manager that is going to sleep.
    pub reservation_lease: VirtualDuration,
    /// A logger collects garbage (when its disks spin) once its log is this full, in
    /// percent of its capacity.
    pub log_collect_at_percent: u8,
    /// Disk I/Os outstanding at once, parked ones included.
    pub disk_ios_max: usize,
}

/// What a node dropped or refused, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeCounters {
    /// Disk completions for no outstanding I/O.
    pub disk_completions_dropped: u64,
    /// Messages for no volume of this node.
    pub messages_dropped: u64,
    /// Garbage collections of a log, and the bytes they copied.
    pub log_collections: u64,
    pub log_bytes_copied: u64,
}

/// Why the node issued a disk I/O.
#[derive(Clone, Copy, Debug)]
enum DiskPurpose {
    /// A manager's home I/O, `io` in the manager's numbering.
    Home { io: IoId },
    /// A logger's I/O for a manager's request.
    Log { owner: VolumeId, io: IoId, payload_bytes: u64 },
    /// Copies of a garbage collection.
    Collection,
}

#[derive(Clone, Copy, Debug)]
struct DiskIo {
    slot: usize,
    op: NodeDiskOp,
    placement: ByteRange,
    purpose: DiskPurpose,
    /// It waited for its disks to spin up.
    waited_for_spin_up: bool,
}

/// A volume of the node: its manager, its disks and the logger on them.
#[derive(Debug)]
struct Slot {
    volume: VolumeId,
    manager: VolumeManager,
    unit: PowerUnit,
    log: LogService,
    /// Disk I/Os waiting for the disks to spin up, in arrival order.
    parked: VecDeque<Key>,
    /// The managers on this node whose view holds this logger (its own included).
    local_watchers: Vec<usize>,
    /// The logger's availability as last reported to its watchers.
    reported: LoggerAvailability,
}

/// One server's managers, loggers and power units.
#[derive(Debug)]
pub struct Node {
    server: ServerId,
    now: VirtualInstant,
    slots: Vec<Slot>,
    slot_of: BTreeMap<VolumeId, usize>,
    servers: BTreeMap<VolumeId, ServerId>,
    disk_ios: Slab<DiskIo>,
    /// Events for this node's managers, delivered in order once the current step ends.
    deferred: VecDeque<(usize, ManagerEvent)>,
    actions: VecDeque<NodeAction>,
    collect_at_percent: u8,
    counters: NodeCounters,
}

impl Node {
    /// A node whose units all rest in `power`; its loggers announce themselves to
    /// their watchers (drain `poll_action` after construction).
    pub fn new(config: NodeConfig, now: VirtualInstant, power: SteadyPower) -> Node {
        assert!(config.disk_ios_max > 0, "a node issues disk I/O");
        assert!(config.log_collect_at_percent <= 100, "a share is a percentage");
        let unit_power = match power {
            SteadyPower::Active => UnitPower::Active,
            SteadyPower::Standby => UnitPower::Standby,
        };
        let slot_of: BTreeMap<VolumeId, usize> =
            config.volumes.iter().enumerate().map(|(i, v)| (v.manager.volume, i)).collect();
        assert_eq!(slot_of.len(), config.volumes.len(), "a volume listed twice on a node");
        let mut slots = Vec::with_capacity(config.volumes.len());
        for volume in &config.volumes {
            let id = volume.manager.volume;
            let logger = Logger::new(LoggerId(id.0), volume.log);
            let log = LogService::new(
                logger,
                volume.log_offset_bytes,
                volume.watchers.clone(),
                config.reservation_lease,
            );
            slots.push(Slot {
                volume: id,
                manager: VolumeManager::new(volume.manager.clone(), now, power),
                unit: PowerUnit::new(unit_power),
                log,
                parked: VecDeque::new(),
                local_watchers: Vec::new(),
                reported: LoggerAvailability::Asleep,
            });
        }
        for (index, slot) in slots.iter_mut().enumerate() {
            let watchers = config.volumes[index].watchers.iter().filter_map(|v| slot_of.get(v));
            slot.local_watchers = std::iter::once(index).chain(watchers.copied()).collect();
        }
        let mut node = Node {
            server: config.server,
            now,
            slots,
            slot_of,
            servers: config.servers,
            disk_ios: Slab::new(config.disk_ios_max),
            deferred: VecDeque::new(),
            actions: VecDeque::new(),
            collect_at_percent: config.log_collect_at_percent,
            counters: NodeCounters::default(),
        };
        for slot in 0..node.slots.len() {
            node.report_to_watchers(slot);
            // The manager of the volume learns its own logger's room too (its
            // availability it knows: the logger is awake while its own disks spin).
            let logger = LoggerId(node.slots[slot].volume.0);
            let status = node.status(slot);
            node.deferred.push_back((slot, ManagerEvent::LoggerReported { logger, status }));
        }
        node.drain_deferred();
        node
    }

    pub fn server(&self) -> ServerId {
        self.server
    }

    /// The node's volumes, in its order.
    pub fn volumes(&self) -> impl Iterator<Item = VolumeId> + '_ {
        self.slots.iter().map(|slot| slot.volume)
    }

    pub fn manager(&self, volume: VolumeId) -> Option<&VolumeManager> {
        self.slot_of.get(&volume).map(|&slot| &self.slots[slot].manager)
    }

    /// A volume manager's counters, a blocked sleep counted up to `at`.
    pub fn manager_counters(
        &self,
        volume: VolumeId,
        at: VirtualInstant,
    ) -> Option<ManagerCounters> {
        self.manager(volume).map(|manager| manager.counters_at(at))
    }

    pub fn logger(&self, volume: VolumeId) -> Option<&Logger> {
        self.slot_of.get(&volume).map(|&slot| self.slots[slot].log.model())
    }

    pub fn unit_power(&self, volume: VolumeId) -> Option<UnitPower> {
        self.slot_of.get(&volume).map(|&slot| self.slots[slot].unit.power())
    }

    pub fn counters(&self) -> NodeCounters {
        self.counters
    }

    /// Feeds one event; see the module's call protocol.
    pub fn handle(&mut self, now: VirtualInstant, event: NodeEvent) {
        assert!(now >= self.now, "node time went backwards: {now:?} < {:?}", self.now);
        self.now = now;
        match event {
            NodeEvent::RequestArrived { volume, request, kind, range } => {
                match self.slot_of.get(&volume) {
                    Some(&slot) => self
                        .deferred
                        .push_back((slot, ManagerEvent::RequestArrived { request, kind, range })),
                    // A request for a volume this node does not have: a shell's routing bug.
                    None => panic!(
                        "node {}: a request for {volume}, which it does not hold",
                        self.server
                    ),
                }
            }
            NodeEvent::DiskIoCompleted { io, result } => self.disk_io_completed(io, result),
            NodeEvent::PowerChanged { volume, power } => self.power_changed(volume, power),
            NodeEvent::MessageReceived { message } => self.message_received(message),
            NodeEvent::DrainRequested { volume } => {
                if let Some(&slot) = self.slot_of.get(&volume) {
                    self.deferred.push_back((slot, ManagerEvent::DrainRequested));
                }
            }
            NodeEvent::TimerFired => {
                for slot in 0..self.slots.len() {
                    if self.slots[slot].manager.poll_timeout().is_some_and(|at| at <= now) {
                        self.deferred.push_back((slot, ManagerEvent::TimerFired));
                    }
                }
            }
        }
        self.drain_deferred();
    }

    pub fn poll_action(&mut self) -> Option<NodeAction> {
        self.actions.pop_front()
    }

    /// The next time a manager of the node wants a timer.
    pub fn poll_timeout(&self) -> Option<VirtualInstant> {
        self.slots.iter().filter_map(|slot| slot.manager.poll_timeout()).min()
    }

    /// Feeds the managers their queued events one by one, routing each one's actions.
    fn drain_deferred(&mut self) {
        while let Some((slot, event)) = self.deferred.pop_front() {
            self.slots[slot].manager.handle(self.now, event);
            while let Some(action) = self.slots[slot].manager.poll_action() {
                self.route(slot, action);
            }
        }
    }

    /// Carries out one manager action.
    fn route(&mut self, slot: usize, action: ManagerAction) {
        let owner = self.slots[slot].volume;
        match action {
            ManagerAction::ReadHome { io, range, .. } => {
                self.issue_disk(slot, NodeDiskOp::Read, range, DiskPurpose::Home { io })
            }
            ManagerAction::WriteHome { io, range, .. } => {
                self.issue_disk(slot, NodeDiskOp::Write, range, DiskPurpose::Home { io })
            }
            ManagerAction::WriteLog { io, logger, range, version, .. } => {
                self.send_log(owner, logger, io, LogOp::Write { range, version })
            }
            ManagerAction::ReadLog { io, logger, range, version, .. } => {
                self.send_log(owner, logger, io, LogOp::Read { range, version })
            }
            ManagerAction::Invalidate { io, logger, range, version } => {
                self.send_log(owner, logger, io, LogOp::Invalidate { range, version })
            }
            ManagerAction::Reserve { io, logger, bytes } => {
                self.send_log(owner, logger, io, LogOp::Reserve { bytes })
            }
            ManagerAction::ProbeLogger { io, logger } => {
                self.send_log(owner, logger, io, LogOp::Probe)
            }
            ManagerAction::SpinDown => {
                let command = self.slots[slot].unit.spin_down_requested();
                self.unit_command(slot, command);
                self.report_if_changed(slot);
            }
            ManagerAction::SpinUp => {
                let command = self.slots[slot].unit.wake();
                self.unit_command(slot, command);
            }
            ManagerAction::Reply { request, kind, outcome, waited_for_spin_up } => {
                self.actions.push_back(NodeAction::Reply {
                    volume: owner,
                    request,
                    kind,
                    outcome,
                    waited_for_spin_up,
                });
            }
        }
    }

    fn unit_command(&mut self, slot: usize, command: UnitCommand) {
        let volume = self.slots[slot].volume;
        match command {
            UnitCommand::None => {}
            UnitCommand::SpinDown => self.actions.push_back(NodeAction::SpinDown { volume }),
            UnitCommand::SpinUp => self.actions.push_back(NodeAction::SpinUp { volume }),
        }
    }

    /// Sends a manager's request to a logger: straight to it if it is on this node,
    /// else in a message to its node.
    fn send_log(&mut self, owner: VolumeId, logger: LoggerId, io: IoId, op: LogOp) {
        let target = VolumeId(logger.0);
        if let Some(&slot) = self.slot_of.get(&target) {
            self.log_request(owner, slot, io, op);
            return;
        }
        let Some(&to) = self.servers.get(&target) else {
            // A view naming a logger the cluster map lacks: a configuration bug.
            panic!("node {}: no server known for {logger}", self.server);
        };
        self.actions.push_back(NodeAction::Send {
            to,
            message: NodeMessage::LogRequest { owner, logger, io, op },
        });
    }

    /// Issues a disk I/O on a slot's unit, or parks it until the unit spins, waking it.
    fn issue_disk(
        &mut self,
        slot: usize,
        op: NodeDiskOp,
        placement: ByteRange,
        purpose: DiskPurpose,
    ) {
        let serves = self.slots[slot].unit.serves_io();
        let record = DiskIo { slot, op, placement, purpose, waited_for_spin_up: !serves };
        let Some(key) = self.disk_ios.insert(record) else {
            panic!("node {}: more disk I/O in flight than its bound", self.server);
        };
        if serves {
            self.start_disk(key);
        } else {
            self.slots[slot].parked.push_back(key);
            let command = self.slots[slot].unit.wake();
            self.unit_command(slot, command);
        }
        self.observe_load(slot);
    }

    fn start_disk(&mut self, key: Key) {
        let Some(&mut DiskIo { slot, op, placement, .. }) = self.disk_ios.get_mut(key) else {
            unreachable!("starting a disk I/O the node does not hold")
        };
        self.slots[slot].unit.io_started();
        let volume = self.slots[slot].volume;
        self.actions.push_back(NodeAction::DiskIo { io: IoId(key.0), volume, op, placement });
    }

    fn disk_io_completed(&mut self, io: IoId, result: Result<(), HomeIoError>) {
        let Some(record) = self.disk_ios.remove(Key(io.0)) else {
            self.counters.disk_completions_dropped += 1;
            return;
        };
        let slot = record.slot;
        let command = self.slots[slot].unit.io_finished();
        self.unit_command(slot, command);
        match record.purpose {
            DiskPurpose::Home { io } => {
                self.deferred.push_back((slot, ManagerEvent::HomeIoCompleted { io, result }));
            }
            DiskPurpose::Log { owner, io, payload_bytes } => {
                self.deferred.push_back((slot, ManagerEvent::LoggerIoServed));
                self.log_io_done(
                    slot,
                    owner,
                    io,
                    payload_bytes,
                    result.is_ok(),
                    record.waited_for_spin_up,
                );
            }
            DiskPurpose::Collection => {}
        }
        self.observe_load(slot);
        self.report_if_changed(slot);
    }

    fn power_changed(&mut self, volume: VolumeId, power: SteadyPower) {
        let Some(&slot) = self.slot_of.get(&volume) else {
            panic!("node {}: a power change of {volume}, which it does not hold", self.server);
        };
        let active = power == SteadyPower::Active;
        let waiting = !self.slots[slot].parked.is_empty();
        let command = self.slots[slot].unit.rested(active, waiting);
        self.deferred.push_back((slot, ManagerEvent::HomePowerChanged { power }));
        self.unit_command(slot, command);
        if active {
            let parked = std::mem::take(&mut self.slots[slot].parked);
            for key in parked {
                self.start_disk(key);
            }
        }
        self.report_if_changed(slot);
    }

    fn message_received(&mut self, message: NodeMessage) {
        match message {
            NodeMessage::LogRequest { owner, logger, io, op } => {
                match self.slot_of.get(&VolumeId(logger.0)) {
                    Some(&slot) => self.log_request(owner, slot, io, op),
                    None => self.counters.messages_dropped += 1,
                }
            }
            NodeMessage::LogReply { owner, io, reply, .. } => match self.slot_of.get(&owner) {
                Some(&slot) => {
                    self.deferred.push_back((slot, ManagerEvent::LoggerReplied { io, reply }))
                }
                None => self.counters.messages_dropped += 1,
            },
            NodeMessage::LoggerReport { watcher, logger, status } => {
                match self.slot_of.get(&watcher) {
                    Some(&slot) => self
                        .deferred
                        .push_back((slot, ManagerEvent::LoggerReported { logger, status })),
                    None => self.counters.messages_dropped += 1,
                }
            }
        }
    }

    /// Answers a manager: on this node, as an event; elsewhere, in a message.
    fn reply_to(&mut self, owner: VolumeId, io: IoId, reply: LoggerReply, payload_bytes: u64) {
        if let Some(&slot) = self.slot_of.get(&owner) {
            self.deferred.push_back((slot, ManagerEvent::LoggerReplied { io, reply }));
            return;
        }
        let Some(&to) = self.servers.get(&owner) else {
            panic!("node {}: no server known for {owner}", self.server);
        };
        self.actions.push_back(NodeAction::Send {
            to,
            message: NodeMessage::LogReply { owner, io, reply, payload_bytes },
        });
    }
}
