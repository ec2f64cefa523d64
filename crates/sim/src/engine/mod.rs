//! The discrete-event engine: replays a block trace against one core `Node` per
//! server, in virtual time.
//!
//! The engine is the core's shell. It owns the physical world — disk queues, caches
//! and power states (`volume`), the links between servers (`network`) — and the clock;
//! it turns each node action into timed events and each event back into a node input.
//! It makes no decision of its own: which volume sleeps or wakes, where a write goes,
//! when a logger is awake and who hears of it, in what order overlapping requests are
//! served — all of it is the nodes'. Requests arrive open-loop at their trace
//! timestamps. Everything is deterministic: ties in time are broken by the order in
//! which events were scheduled.

mod measure;
pub(crate) mod network;
pub mod queue;
mod volume;

use somnus_core::node::{
    ClusterMap, Node, NodeAction, NodeDiskOp, NodeEvent, NodeMessage, VolumePlacement, plan_cluster,
};
use somnus_core::power::{PowerState, PowerTimeline};
use somnus_core::slab::{Key, Slab};
use somnus_types::{
    ByteRange, IoId, IoKind, RequestId, ServerId, VirtualDuration, VirtualInstant, VolumeId,
};

pub use measure::{RunMeasurements, VolumeMeasurements};
pub use somnus_core::offload::ConfigKind;

use measure::Snapshot;
use network::Network;
use queue::EventQueue;
use volume::Volume;

use crate::topology::TraceLayout;

/// Virtual time the engine keeps running after the window ends to finish requests
/// still in flight; past it they are counted as unfinished.
const DRAIN_AFTER_END: VirtualDuration = VirtualDuration::from_secs(3600);
/// Client requests in flight at once across the cluster: beyond it the trace is
/// replayed faster than any configuration could serve and the run stops with an error.
const CLIENT_REQUESTS_MAX: usize = 1 << 22;
/// Disk I/Os and messages in flight at once: no bound the simulation can reach (the
/// client requests behind them are bounded).
const IN_FLIGHT_MAX: usize = u32::MAX as usize;

/// The stretch of virtual time a run covers: from 0 a warm-up that is replayed but not
/// measured (so a day starts with its disks in the state the previous hour left
/// them), then the measured span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunWindow {
    pub warmup: VirtualDuration,
    pub span: VirtualDuration,
}

impl RunWindow {
    /// A window with no warm-up.
    pub fn measured(span: VirtualDuration) -> RunWindow {
        RunWindow { warmup: VirtualDuration::ZERO, span }
    }
}

/// One block request of the replayed trace, in the engine's virtual time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimRequest {
    pub arrival: VirtualInstant,
    pub volume: VolumeId,
    pub range: ByteRange,
    pub kind: IoKind,
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("request for volume {volume} but the layout has {count} volumes")]
    UnknownVolume { volume: VolumeId, count: usize },
    #[error("request at {at:?} after the window ends at {end:?}")]
    AfterWindow { at: VirtualInstant, end: VirtualInstant },
    #[error("requests out of time order: {later:?} after {earlier:?}")]
    OutOfOrder { earlier: VirtualInstant, later: VirtualInstant },
    #[error(
        "more than {CLIENT_REQUESTS_MAX} requests in flight at {at:?}: the trace outruns the cluster"
    )]
    Overloaded { at: VirtualInstant },
}

/// Progress of a long run, for the shell to show.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    pub kind: ConfigKind,
    pub requests_done: u64,
    pub virtual_now: VirtualInstant,
    pub span: VirtualDuration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum EventKind {
    /// A disk I/O finished (its key in `disk_ios`).
    DiskDone(Key),
    /// A message reached its node (its key in `messages`).
    MessageArrived(Key),
    /// A volume told to spin down has finished its queued disk work.
    SpinDownStart(u32),
    /// A volume's power transition ended.
    PowerDone(u32),
    /// A node's timer (index into `nodes`).
    Timer(u32),
}

/// The engine for one configuration.
pub struct Engine {
    kind: ConfigKind,
    /// The end of the warm-up: nothing before it is measured.
    measure_from: VirtualInstant,
    end: VirtualInstant,
    events: EventQueue<EventKind>,
    nodes: Vec<Node>,
    /// The node and server of each volume.
    node_of: Vec<u32>,
    /// The node index of each server.
    node_of_server: Vec<Option<u32>>,
    timers: Vec<Option<VirtualInstant>>,
    volumes: Vec<Volume>,
    network: Network,
    /// Disk I/Os in flight: the node that issued them and its id.
    disk_ios: Slab<(u32, IoId)>,
    /// Messages in flight: the node they go to.
    messages: Slab<(u32, NodeMessage)>,
    /// Client requests in flight, by request id (a slab key): when each arrived.
    requests: Slab<VirtualInstant>,
    requests_done: u64,
    measured: RunMeasurements,
    start_snapshot: Option<Snapshot>,
    end_snapshot: Option<(Snapshot, Vec<PowerTimeline>)>,
}

impl Engine {
    pub fn new(layout: &TraceLayout, kind: ConfigKind, run_window: RunWindow) -> Engine {
        let start = VirtualInstant::ZERO;
        let measure_from = start + run_window.warmup;
        let span = run_window.span;
        let window = layout.power_window;
        let volumes: Vec<Volume> = layout
            .volumes
            .iter()
            .map(|volume| {
                Volume::new(layout, volume, start, PowerTimeline::new(measure_from, span, window))
            })
            .collect();
        let map = cluster_map(layout, &volumes);
        let mut nodes = Vec::new();
        let mut node_of = vec![0; layout.volumes.len()];
        let mut node_of_server = vec![None; layout.servers.len()];
        for config in plan_cluster(&map, kind, &layout.policy) {
            let index = nodes.len() as u32;
            node_of_server[config.server.index()] = Some(index);
            for volume in &config.volumes {
                node_of[volume.manager.volume.index()] = index;
            }
            nodes.push(Node::new(config, start, somnus_core::offload::SteadyPower::Active));
        }
        let measured =
            RunMeasurements::new(kind, span, PowerTimeline::new(measure_from, span, window));
        Engine {
            kind,
            measure_from,
            end: measure_from + span,
            events: EventQueue::new(),
            timers: vec![None; nodes.len()],
            nodes,
            node_of,
            node_of_server,
            volumes,
            network: Network::new(layout.network, layout.servers.len()),
            disk_ios: Slab::new(IN_FLIGHT_MAX),
            messages: Slab::new(IN_FLIGHT_MAX),
            requests: Slab::new(CLIENT_REQUESTS_MAX),
            requests_done: 0,
            measured,
            start_snapshot: None,
            end_snapshot: None,
        }
    }

    /// Replays `requests` (in non-decreasing arrival order) and returns what was
    /// measured. `progress` is called now and then.
    pub fn run(
        mut self,
        requests: impl Iterator<Item = SimRequest>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<RunMeasurements, EngineError> {
        // Every volume spins at the start of the replay, its idle time counting from
        // there (as on the paper's testbed); a warm-up settles the states before a day.
        for node in 0..self.nodes.len() {
            self.drain_node(node as u32);
        }
        let mut last_arrival = VirtualInstant::ZERO;
        for request in requests {
            if request.arrival < last_arrival {
                return Err(EngineError::OutOfOrder {
                    earlier: last_arrival,
                    later: request.arrival,
                });
            }
            last_arrival = request.arrival;
            if request.arrival >= self.end {
                return Err(EngineError::AfterWindow { at: request.arrival, end: self.end });
            }
            if request.volume.index() >= self.volumes.len() {
                return Err(EngineError::UnknownVolume {
                    volume: request.volume,
                    count: self.volumes.len(),
                });
            }
            if request.arrival >= self.measure_from && self.start_snapshot.is_none() {
                self.run_events_until(self.measure_from, false);
                self.start_snapshot = Some(self.snapshot(self.measure_from));
            }
            self.run_events_until(request.arrival, false);
            self.arrive(request)?;
            if self.requests_done & 0xffff == 0 {
                progress(self.progress());
            }
        }
        if self.start_snapshot.is_none() {
            self.run_events_until(self.measure_from, false);
            self.start_snapshot = Some(self.snapshot(self.measure_from));
        }
        self.run_events_until(self.end, false);
        self.take_end_snapshot();
        // Finish requests still in flight, without letting timers run forever.
        self.run_events_until(self.end + DRAIN_AFTER_END, true);
        progress(self.progress());
        Ok(self.finish())
    }

    fn progress(&self) -> Progress {
        Progress {
            kind: self.kind,
            requests_done: self.requests_done,
            virtual_now: self.events.now(),
            span: self.end.duration_since(VirtualInstant::ZERO),
        }
    }

    /// Processes events up to and including `until`; with `only_requests`, stops as
    /// soon as no client request is in flight.
    fn run_events_until(&mut self, until: VirtualInstant, only_requests: bool) {
        while let Some(time) = self.events.peek_time() {
            if time > until || (only_requests && self.requests.is_empty()) {
                break;
            }
            if time > self.end && self.end_snapshot.is_none() {
                self.take_end_snapshot();
            }
            let Some((_, event)) = self.events.pop_until(until) else { break };
            self.handle_event(event);
        }
        if !only_requests {
            self.events.advance_to(until);
        }
    }

    fn handle_event(&mut self, event: EventKind) {
        match event {
            EventKind::DiskDone(index) => {
                let Some((node, io)) = self.disk_ios.remove(index) else {
                    unreachable!("a disk I/O completed twice");
                };
                self.feed(node, NodeEvent::DiskIoCompleted { io, result: Ok(()) });
            }
            EventKind::MessageArrived(index) => {
                let Some((node, message)) = self.messages.remove(index) else {
                    unreachable!("a message arrived twice");
                };
                self.feed(node, NodeEvent::MessageReceived { message });
            }
            EventKind::SpinDownStart(volume) => {
                let done = self.volumes[volume as usize].start_spin_down(self.events.now());
                self.schedule(done, EventKind::PowerDone(volume));
            }
            EventKind::PowerDone(volume) => {
                let active = self.volumes[volume as usize].transition_done(self.events.now());
                let power = if active {
                    somnus_core::offload::SteadyPower::Active
                } else {
                    somnus_core::offload::SteadyPower::Standby
                };
                let node = self.node_of[volume as usize];
                self.feed(node, NodeEvent::PowerChanged { volume: VolumeId(volume), power });
            }
            EventKind::Timer(node) => {
                if self.timers[node as usize] == Some(self.events.now()) {
                    self.timers[node as usize] = None;
                    self.feed(node, NodeEvent::TimerFired);
                }
            }
        }
    }

    fn schedule(&mut self, at: VirtualInstant, event: EventKind) {
        self.events.schedule(at, event);
    }

    /// Hands an event to a node and carries out what it asks.
    fn feed(&mut self, node: u32, event: NodeEvent) {
        self.nodes[node as usize].handle(self.events.now(), event);
        self.drain_node(node);
    }

    fn drain_node(&mut self, node: u32) {
        while let Some(action) = self.nodes[node as usize].poll_action() {
            self.execute(node, action);
        }
        let Some(deadline) = self.nodes[node as usize].poll_timeout() else { return };
        let armed = &mut self.timers[node as usize];
        if armed.is_none_or(|at| deadline < at) {
            *armed = Some(deadline);
            self.schedule(deadline, EventKind::Timer(node));
        }
    }

    fn execute(&mut self, node: u32, action: NodeAction) {
        match action {
            NodeAction::DiskIo { io, volume, op, placement } => {
                let done = self.volumes[volume.index()].serve(
                    self.events.now(),
                    op == NodeDiskOp::Write,
                    placement,
                );
                let Some(key) = self.disk_ios.insert((node, io)) else {
                    unreachable!("more than {IN_FLIGHT_MAX} disk I/Os in flight");
                };
                self.schedule(done, EventKind::DiskDone(key));
            }
            NodeAction::SpinDown { volume } => {
                let idle_at = self.volumes[volume.index()].begin_spin_down(self.events.now());
                self.schedule(idle_at, EventKind::SpinDownStart(volume.0));
            }
            NodeAction::SpinUp { volume } => {
                let done = self.volumes[volume.index()].begin_spin_up(self.events.now());
                self.schedule(done, EventKind::PowerDone(volume.0));
            }
            NodeAction::Send { to, message } => self.send(node, to, message),
            NodeAction::Reply { volume, request, kind, outcome, waited_for_spin_up } => {
                self.reply(volume, request, kind, outcome, waited_for_spin_up)
            }
        }
    }

    /// Puts a message on the network to the node of server `to`.
    fn send(&mut self, from: u32, to: ServerId, message: NodeMessage) {
        let Some(target) = self.node_of_server.get(to.index()).copied().flatten() else {
            panic!("a message to server {to}, which has no node");
        };
        let source = self.nodes[from as usize].server();
        let bytes = message.wire_bytes();
        let arrival = self.network.send(self.events.now(), source.0, to.0, bytes);
        if self.events.now() >= self.measure_from && self.events.now() < self.end {
            self.measured.network(self.events.now(), bytes);
        }
        let Some(key) = self.messages.insert((target, message)) else {
            unreachable!("more than {IN_FLIGHT_MAX} messages in flight");
        };
        self.schedule(arrival, EventKind::MessageArrived(key));
    }

    fn arrive(&mut self, request: SimRequest) -> Result<(), EngineError> {
        let Some(key) = self.requests.insert(request.arrival) else {
            return Err(EngineError::Overloaded { at: request.arrival });
        };
        let id = RequestId(key.0);
        if request.arrival >= self.measure_from {
            let volume = &mut self.volumes[request.volume.index()];
            match request.kind {
                IoKind::Read => volume.reads += 1,
                IoKind::Write => volume.writes += 1,
            }
        }
        let node = self.node_of[request.volume.index()];
        let (kind, range) = (request.kind, request.range);
        self.feed(
            node,
            NodeEvent::RequestArrived { volume: request.volume, request: id, kind, range },
        );
        Ok(())
    }

    fn reply(
        &mut self,
        _volume: VolumeId,
        request: RequestId,
        kind: IoKind,
        outcome: somnus_core::offload::ReplyOutcome,
        waited_for_spin_up: bool,
    ) {
        let Some(arrival) = self.requests.remove(Key(request.0)) else {
            panic!("a reply to a request not in flight: {request}");
        };
        let latency = self.events.now().duration_since(arrival).as_nanos();
        if arrival >= self.measure_from {
            self.measured.reply(kind, outcome, latency, waited_for_spin_up);
        }
        self.requests_done += 1;
    }

    /// Every volume's meter reading and manager counters at `at`.
    fn snapshot(&mut self, at: VirtualInstant) -> Snapshot {
        let mut snapshot = Vec::with_capacity(self.volumes.len());
        for (index, volume) in self.volumes.iter_mut().enumerate() {
            let node = &self.nodes[self.node_of[index] as usize];
            let Some(counters) = node.manager_counters(VolumeId(index as u32), at) else {
                unreachable!("every volume has a manager on its node")
            };
            snapshot.push((volume.meter.reading(at), counters));
        }
        snapshot
    }

    fn take_end_snapshot(&mut self) {
        if self.end_snapshot.is_some() {
            return;
        }
        let snapshot = self.snapshot(self.end);
        let timelines = self.volumes.iter().filter_map(|v| v.meter.timeline().cloned()).collect();
        self.end_snapshot = Some((snapshot, timelines));
    }

    fn finish(mut self) -> RunMeasurements {
        let start = self.start_snapshot.take().unwrap_or_default();
        let (end, timelines) = self.end_snapshot.take().unwrap_or_default();
        for timeline in &timelines {
            self.measured.timeline.accumulate(timeline);
        }
        let requests: Vec<(u64, u64)> = self.volumes.iter().map(|v| (v.reads, v.writes)).collect();
        self.measured.volumes = measure::between(&start, &end, &requests);
        self.measured.requests_unfinished = self.requests.len() as u64;
        let missing: u64 = self
            .nodes
            .iter()
            .flat_map(|node| {
                node.volumes().filter_map(|v| node.manager_counters(v, self.events.now()))
            })
            .map(|counters| counters.log_reads_missing)
            .sum();
        // The simulator is a checker too: a logger that lost a version a manager still
        // maps broke O2 somewhere in the core.
        assert_eq!(missing, 0, "O2: loggers lost {missing} versions their managers read");
        self.measured
    }
}

/// Where each volume lives and what it costs, for planning the nodes.
fn cluster_map(layout: &TraceLayout, volumes: &[Volume]) -> ClusterMap {
    let placements = layout
        .volumes
        .iter()
        .zip(volumes)
        .enumerate()
        .map(|(index, (volume, physical))| {
            let per_disk = layout.profiles[volume.profile].watts(PowerState::Idle);
            let log_bytes = volume.log_partition_bytes.min(physical.capacity_bytes / 2);
            VolumePlacement {
                volume: VolumeId(index as u32),
                server: volume.server,
                rack: volume.rack,
                idle_power: somnus_types::Power(per_disk.0 * u64::from(volume.disks)),
                log_offset_bytes: physical.capacity_bytes - log_bytes,
                log_bytes,
            }
        })
        .collect();
    ClusterMap { volumes: placements }
}
