//! The discrete-event engine: replays a block trace against volume managers, disks,
//! loggers and a network, in virtual time.
//!
//! The engine is the core's shell. It owns the physical state (disk queues, power
//! states, log partitions, links) and turns each manager action into timed events.
//! Requests arrive open-loop at their trace timestamps; requests to overlapping ranges
//! of one volume are served one after the other, as the Write Off-Loading testbed did
//! (004 section 4.1). Everything is deterministic: ties in time are broken by the order
//! in which events were scheduled.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use hdrhistogram::Histogram;
use somnus_core::logger::{Logger, RECORD_HEADER_BYTES};
use somnus_core::offload::{
    HomePower, IoFailure, LoggerAvailability, LoggerStatus, LoggerStatuses, ManagerAction,
    ManagerConfig, ManagerCounters, ManagerEvent, PowerPolicy, ReplyOutcome, ViewEntry,
    VolumeManager,
};
use somnus_core::power::{EnergyMeter, MeterReading, PowerState, PowerTimeline};
use somnus_types::{
    ByteRange, IoId, IoKind, LoggerId, RequestId, VirtualDuration, VirtualInstant, VolumeId,
};

use crate::cache::BlockCache;
use crate::disk::{Access, ArrayLayout, Disk, DiskModel, DiskOp};
use crate::pending::PendingRanges;
use crate::topology::Layout;

/// What a volume's disks draw while spinning idle.
fn idle_power(layout: &Layout, volume: &crate::topology::VolumeLayout) -> somnus_types::Power {
    let per_disk = layout.profiles[volume.profile].watts(PowerState::Idle);
    somnus_types::Power(per_disk.0 * u64::from(volume.disks))
}

/// Bytes of an RPC header between a manager and a remote logger.
const RPC_HEADER_BYTES: u64 = 64;
/// Virtual time the engine keeps running after the window ends to finish requests
/// still in flight; past it they are counted as unfinished.
const DRAIN_AFTER_END: VirtualDuration = VirtualDuration::from_secs(3600);
/// A write that fits in the controller's cache, or a read found in it, completes after
/// this overhead plus its transfer over an Ultra320 SCSI bus.
const CACHE_HIT_OVERHEAD: VirtualDuration = VirtualDuration::from_micros(100);
/// 320 MB/s is 3.125 ns a byte: 25 ns per 8 bytes, in integers.
fn bus_transfer(size_bytes: u64) -> VirtualDuration {
    VirtualDuration::from_nanos(size_bytes * 25 / 8)
}
/// Client requests in flight at once across the cluster: beyond it the trace is
/// replayed faster than any configuration could serve and the run stops with an error.
const CLIENT_REQUESTS_MAX: usize = 1 << 22;

/// The four configurations of 004 section 4.1.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ConfigKind {
    /// Volumes never spin down.
    Baseline,
    /// Spin down after 60 s idle; every request waits for a spin-up.
    Vanilla,
    /// Off-load writes to loggers on the same server only.
    Machine,
    /// Off-load writes to any logger in the rack.
    Rack,
}

impl ConfigKind {
    pub const ALL: [ConfigKind; 4] =
        [ConfigKind::Baseline, ConfigKind::Vanilla, ConfigKind::Machine, ConfigKind::Rack];

    pub fn name(self) -> &'static str {
        match self {
            ConfigKind::Baseline => "baseline",
            ConfigKind::Vanilla => "vanilla",
            ConfigKind::Machine => "machine",
            ConfigKind::Rack => "rack",
        }
    }
}

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

/// What one run measured, before it is compared with the baseline.
#[derive(Clone, Debug)]
pub struct RunMeasurements {
    pub kind: ConfigKind,
    pub span: VirtualDuration,
    pub volumes: Vec<VolumeMeasurements>,
    /// Energy per power window, summed over the cluster.
    pub timeline: PowerTimeline,
    pub read_latency_ns: Histogram<u64>,
    pub write_latency_ns: Histogram<u64>,
    pub read_latency_sum_ns: u128,
    pub write_latency_sum_ns: u128,
    pub reads_spin_delayed: u64,
    pub writes_spin_delayed: u64,
    pub writes_logged: u64,
    pub reads_logged: u64,
    pub reads_remote: u64,
    pub network_bytes: u64,
    /// Network traffic per power window (the windows of `timeline`), in bytes.
    pub network_bytes_per_window: Vec<u64>,
    /// Requests still in flight when the engine gave up, an hour after the window.
    pub requests_unfinished: u64,
    pub requests_refused: u64,
}

#[derive(Clone, Debug)]
pub struct VolumeMeasurements {
    pub reading: MeterReading,
    pub counters: ManagerCounters,
    pub reads: u64,
    pub writes: u64,
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
    VioDone(u32),
    /// A request to a remote logger reached the logger's server.
    NetArrive(u32),
    /// A remote logger's reply reached the manager's server.
    NetReply(u32),
    /// A volume told to spin down has finished its queued disk work.
    SpinDownStart(u32),
    PowerDone(u32),
    Timer(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum VolumePower {
    Active,
    SpinningDown,
    Standby,
    SpinningUp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum VioKind {
    HomeRead,
    HomeWrite,
    LogWrite { version: u64 },
    LogRead { version: u64 },
    Invalidate { version: u64 },
}

/// One I/O a manager asked for, on the volume that executes it.
#[derive(Clone, Copy, Debug)]
struct VolumeIo {
    /// The volume whose disks serve it.
    target: u32,
    /// The manager that asked for it.
    manager: u32,
    io: IoId,
    kind: VioKind,
    /// The manager's range (volume offsets of its home data).
    range: ByteRange,
    /// Where on the target's disks: equal to `range` at home, in the log partition on a logger.
    placement: ByteRange,
    request: Option<RequestId>,
    remote: bool,
    result: Result<(), IoFailure>,
}

#[derive(Clone, Debug)]
struct ClientRequest {
    arrival: VirtualInstant,
    volume: u32,
    range: ByteRange,
    kind: IoKind,
    spin_delayed: bool,
    generation: u32,
    /// Earlier overlapping requests of the same volume still pending.
    waiting_on: u32,
    /// Later overlapping requests waiting for this one (the vector keeps its
    /// allocation when the slot is reused).
    dependents: Vec<u32>,
}

struct VolumeState {
    power: VolumePower,
    /// The manager asked to spin down; the disks finish their queue first.
    spin_down_wanted: bool,
    /// Something needs the disks while they spin down.
    spin_up_wanted: bool,
    disks: Vec<Disk>,
    model: DiskModel,
    array: ArrayLayout,
    /// The write cache: capacity, bytes not yet on disk, and when each write's
    /// destage completes.
    cache_bytes: u64,
    cache_used: u64,
    /// Cached writes in arrival order with their destage completions. Destages finish
    /// nearly in order (FCFS disks), and one finishing before an earlier arrival is
    /// released with it: the occupancy errs on the full side, never the empty one.
    destages: VecDeque<(VirtualInstant, u64)>,
    /// Where the last write to the array ended: a write starting there continues a
    /// sequential run, which the write cache gathers into whole stripes.
    last_write_end: u64,
    read_cache: Option<BlockCache>,
    meter: EnergyMeter,
    ios_in_flight: u32,
    /// I/Os waiting for a spin-up, in arrival order.
    parked: Vec<u32>,
    timer_at: Option<VirtualInstant>,
    /// Pending client requests, to serialize overlapping ones (004 section 4.1).
    pending: PendingRanges,
    log_start: u64,
    log_bytes: u64,
    log_head: u64,
    server: u32,
    reads: u64,
    writes: u64,
}

/// The probe the managers see.
struct Statuses<'a> {
    volumes: &'a [VolumeState],
    loggers: &'a [Logger],
}

impl LoggerStatuses for Statuses<'_> {
    fn status(&self, logger: LoggerId) -> LoggerStatus {
        let volume = &self.volumes[logger.index()];
        let awake = volume.power == VolumePower::Active && !volume.spin_down_wanted;
        LoggerStatus {
            availability: if awake {
                LoggerAvailability::Awake
            } else {
                LoggerAvailability::Asleep
            },
            queue_length: volume.ios_in_flight,
            free_bytes: self.loggers[logger.index()].free_bytes(),
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Link {
    transmit_free: VirtualInstant,
    receive_free: VirtualInstant,
}

/// The engine for one configuration.
pub struct Engine<'a> {
    layout: &'a Layout,
    kind: ConfigKind,
    now: VirtualInstant,
    /// The end of the warm-up: nothing before it is measured.
    measure_from: VirtualInstant,
    end: VirtualInstant,
    sequence: u64,
    events: BinaryHeap<Reverse<(VirtualInstant, u64, EventKind)>>,
    deferred: VecDeque<(u32, ManagerEvent)>,
    managers: Vec<VolumeManager>,
    volumes: Vec<VolumeState>,
    loggers: Vec<Logger>,
    /// For each logger, the managers whose view holds it.
    watchers: Vec<Vec<u32>>,
    links: Vec<Link>,
    vios: Vec<VolumeIo>,
    vios_free: Vec<u32>,
    requests: Vec<ClientRequest>,
    requests_free: Vec<u32>,
    requests_in_flight: usize,
    /// Scratch: the requests a new arrival must wait for.
    blockers: Vec<u64>,
    first_ops: Vec<DiskOp>,
    second_ops: Vec<DiskOp>,
    measured: RunMeasurements,
    /// Meter readings and manager counters at the end of the warm-up.
    start_snapshot: Option<Vec<(MeterReading, ManagerCounters)>>,
    /// Meter readings, power timelines and counters at the end of the window.
    snapshot: Option<Vec<(MeterReading, Option<PowerTimeline>, ManagerCounters)>>,
    requests_done: u64,
}

impl<'a> Engine<'a> {
    pub fn new(layout: &'a Layout, kind: ConfigKind, run_window: RunWindow) -> Engine<'a> {
        let start = VirtualInstant::ZERO;
        let measure_from = start + run_window.warmup;
        let span = run_window.span;
        let window = layout.policy.power_window;
        let mut volumes = Vec::with_capacity(layout.volumes.len());
        let mut loggers = Vec::with_capacity(layout.volumes.len());
        for (index, volume) in layout.volumes.iter().enumerate() {
            let profile = &layout.profiles[volume.profile];
            // Topology validation guarantees every array profile has mechanics.
            let Some(mechanics) = &profile.mechanics else {
                panic!("profile {} is not a disk", profile.name)
            };
            let model = DiskModel::new(mechanics);
            let array = ArrayLayout {
                raid: volume.raid,
                disks: volume.disks,
                stripe_unit_bytes: volume.stripe_unit_bytes,
            };
            let capacity = array.capacity_bytes(model.capacity_bytes());
            let log_bytes = volume.log_partition_bytes.min(capacity / 2);
            let meter = EnergyMeter::new(profile, volume.disks, PowerState::Idle, start)
                .with_timeline(PowerTimeline::new(measure_from, span, window));
            volumes.push(VolumeState {
                power: VolumePower::Active,
                spin_down_wanted: false,
                spin_up_wanted: false,
                disks: vec![Disk::default(); volume.disks as usize],
                model,
                array,
                cache_bytes: volume.write_cache_bytes,
                cache_used: 0,
                destages: VecDeque::new(),
                last_write_end: u64::MAX,
                read_cache: BlockCache::new(volume.read_cache_bytes),
                meter,
                ios_in_flight: 0,
                parked: Vec::new(),
                timer_at: None,
                pending: PendingRanges::default(),
                log_start: capacity - log_bytes,
                log_bytes,
                log_head: 0,
                server: volume.server.0,
                reads: 0,
                writes: 0,
            });
            loggers.push(Logger::new(LoggerId(index as u32), log_bytes));
        }
        let (managers, watchers) = Self::managers(layout, kind, start);
        let histogram = || {
            // 1 us to 1000 s at three significant digits; bounds are constants.
            match Histogram::new_with_bounds(1_000, 1_000_000_000_000, 3) {
                Ok(histogram) => histogram,
                Err(error) => panic!("histogram bounds: {error}"),
            }
        };
        let measured = RunMeasurements {
            kind,
            span,
            volumes: Vec::new(),
            timeline: PowerTimeline::new(measure_from, span, window),
            read_latency_ns: histogram(),
            write_latency_ns: histogram(),
            read_latency_sum_ns: 0,
            write_latency_sum_ns: 0,
            reads_spin_delayed: 0,
            writes_spin_delayed: 0,
            writes_logged: 0,
            reads_logged: 0,
            reads_remote: 0,
            network_bytes: 0,
            network_bytes_per_window: Vec::new(),
            requests_unfinished: 0,
            requests_refused: 0,
        };
        Engine {
            layout,
            kind,
            now: start,
            measure_from,
            end: measure_from + span,
            sequence: 0,
            events: BinaryHeap::new(),
            deferred: VecDeque::new(),
            managers,
            volumes,
            loggers,
            watchers,
            links: vec![Link::default(); layout.servers.len()],
            vios: Vec::new(),
            vios_free: Vec::new(),
            requests: Vec::new(),
            requests_free: Vec::new(),
            requests_in_flight: 0,
            blockers: Vec::new(),
            first_ops: Vec::new(),
            second_ops: Vec::new(),
            measured,
            start_snapshot: None,
            snapshot: None,
            requests_done: 0,
        }
    }

    /// One manager per volume; loggers in view by configuration: none for baseline and
    /// vanilla, the same server's for machine, the same rack's for rack.
    fn managers(
        layout: &Layout,
        kind: ConfigKind,
        start: VirtualInstant,
    ) -> (Vec<VolumeManager>, Vec<Vec<u32>>) {
        let policy = &layout.policy;
        let power_policy = match kind {
            ConfigKind::Baseline => PowerPolicy::AlwaysOn,
            ConfigKind::Vanilla => PowerPolicy::SpinDownWhenIdle { idle: policy.vanilla_idle },
            ConfigKind::Machine | ConfigKind::Rack => PowerPolicy::Offload {
                read_idle: policy.read_idle,
                write_idle: policy.write_idle,
                offload_limit_bytes: policy.offload_limit_bytes,
            },
        };
        let mut watchers = vec![Vec::new(); layout.volumes.len()];
        let mut managers = Vec::with_capacity(layout.volumes.len());
        for (index, volume) in layout.volumes.iter().enumerate() {
            let in_view = |other: &crate::topology::VolumeLayout| match kind {
                ConfigKind::Baseline | ConfigKind::Vanilla => false,
                ConfigKind::Machine => other.server == volume.server,
                ConfigKind::Rack => other.rack == volume.rack,
            };
            let view: Vec<ViewEntry> = layout
                .volumes
                .iter()
                .enumerate()
                .filter(|(_, other)| in_view(other))
                .map(|(logger, other)| {
                    watchers[logger].push(index as u32);
                    ViewEntry {
                        logger: LoggerId(logger as u32),
                        remote: other.server != volume.server,
                        shares_home_disks: logger == index,
                        host_idle_power: idle_power(layout, other),
                    }
                })
                .collect();
            let mut config = ManagerConfig::new(VolumeId(index as u32), power_policy, view);
            config.reclaim_after_idle = policy.reclaim_after_idle;
            config.logger_host = policy.logger_host;
            config.home_idle_power = idle_power(layout, volume);
            managers.push(VolumeManager::new(config, start, HomePower::Active));
        }
        (managers, watchers)
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
        for manager in 0..self.managers.len() {
            self.arm_timer(manager as u32);
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
                self.take_start_snapshot();
            }
            self.run_events_until(request.arrival, false);
            self.arrive(request)?;
            self.drain_deferred();
            if self.requests_done & 0xffff == 0 {
                progress(self.progress());
            }
        }
        if self.start_snapshot.is_none() {
            self.run_events_until(self.measure_from, false);
            self.take_start_snapshot();
        }
        self.run_events_until(self.end, false);
        self.take_snapshot();
        // Finish requests still in flight, without letting timers run forever.
        self.run_events_until(self.end + DRAIN_AFTER_END, true);
        progress(self.progress());
        Ok(self.finish())
    }

    fn progress(&self) -> Progress {
        Progress {
            kind: self.kind,
            requests_done: self.requests_done,
            virtual_now: self.now,
            span: self.end.duration_since(VirtualInstant::ZERO),
        }
    }

    /// Processes events up to and including `until`; with `only_requests`, stops as
    /// soon as no client request is in flight.
    fn run_events_until(&mut self, until: VirtualInstant, only_requests: bool) {
        while let Some(&Reverse((time, _, event))) = self.events.peek() {
            if time > until || (only_requests && self.requests_in_flight == 0) {
                break;
            }
            if time > self.end && self.snapshot.is_none() {
                self.take_snapshot();
            }
            self.events.pop();
            self.now = time;
            self.handle_event(event);
            self.drain_deferred();
        }
        if !only_requests {
            self.now = self.now.max(until);
        }
    }

    fn handle_event(&mut self, event: EventKind) {
        match event {
            EventKind::VioDone(vio) => self.vio_done(vio),
            EventKind::NetArrive(vio) => self.at_logger(vio),
            EventKind::NetReply(vio) => self.complete_vio(vio),
            EventKind::SpinDownStart(volume) => self.spin_down_start(volume),
            EventKind::PowerDone(volume) => self.power_done(volume),
            EventKind::Timer(volume) => {
                let state = &mut self.volumes[volume as usize];
                if state.timer_at == Some(self.now) {
                    state.timer_at = None;
                    self.deliver(volume, ManagerEvent::TimerFired);
                }
            }
        }
    }

    fn schedule(&mut self, at: VirtualInstant, event: EventKind) {
        assert!(at >= self.now, "event scheduled in the past");
        self.sequence += 1;
        self.events.push(Reverse((at, self.sequence, event)));
    }

    fn deliver(&mut self, manager: u32, event: ManagerEvent) {
        self.deferred.push_back((manager, event));
    }

    /// Feeds queued manager events one by one, executing each manager's actions.
    fn drain_deferred(&mut self) {
        while let Some((manager, event)) = self.deferred.pop_front() {
            let statuses = Statuses { volumes: &self.volumes, loggers: &self.loggers };
            self.managers[manager as usize].handle(self.now, event, &statuses);
            // Actions may queue events (never run them), so the manager is free again
            // by the time the next action is taken.
            while let Some(action) = self.managers[manager as usize].poll_action() {
                self.execute(manager, action);
            }
            self.arm_timer(manager);
        }
    }

    fn arm_timer(&mut self, manager: u32) {
        let Some(deadline) = self.managers[manager as usize].poll_timeout() else { return };
        let state = &mut self.volumes[manager as usize];
        if state.timer_at.is_none_or(|armed| deadline < armed) {
            state.timer_at = Some(deadline);
            self.schedule(deadline, EventKind::Timer(manager));
        }
    }

    fn arrive(&mut self, request: SimRequest) -> Result<(), EngineError> {
        if self.requests_in_flight >= CLIENT_REQUESTS_MAX {
            return Err(EngineError::Overloaded { at: request.arrival });
        }
        let slot = match self.requests_free.pop() {
            Some(slot) => slot,
            None => {
                self.requests.push(ClientRequest {
                    arrival: request.arrival,
                    volume: 0,
                    range: request.range,
                    kind: request.kind,
                    spin_delayed: false,
                    generation: 0,
                    waiting_on: 0,
                    dependents: Vec::new(),
                });
                (self.requests.len() - 1) as u32
            }
        };
        let client = &mut self.requests[slot as usize];
        client.generation = client.generation.wrapping_add(1);
        client.arrival = request.arrival;
        client.volume = request.volume.0;
        client.range = request.range;
        client.kind = request.kind;
        client.spin_delayed = false;
        client.waiting_on = 0;
        client.dependents.clear();
        self.requests_in_flight += 1;
        let id = self.request_id(slot);
        let measured = request.arrival >= self.measure_from;
        let volume = &mut self.volumes[request.volume.index()];
        match request.kind {
            IoKind::Read if measured => volume.reads += 1,
            IoKind::Write if measured => volume.writes += 1,
            IoKind::Read | IoKind::Write => {}
        }
        let mut blockers = std::mem::take(&mut self.blockers);
        blockers.clear();
        volume.pending.add(request.range, id.0, &mut blockers);
        for &earlier in &blockers {
            // The low half of a request id is its slot.
            self.requests[earlier as u32 as usize].dependents.push(slot);
        }
        self.requests[slot as usize].waiting_on = blockers.len() as u32;
        let ready = blockers.is_empty();
        self.blockers = blockers;
        if ready {
            self.dispatch(slot);
        }
        Ok(())
    }

    fn request_id(&self, slot: u32) -> RequestId {
        RequestId(u64::from(self.requests[slot as usize].generation) << 32 | u64::from(slot))
    }

    fn dispatch(&mut self, slot: u32) {
        let request = &self.requests[slot as usize];
        let (volume, kind, range) = (request.volume, request.kind, request.range);
        let id = self.request_id(slot);
        self.deliver(volume, ManagerEvent::RequestArrived { request: id, kind, range });
    }

    fn slot_of(&self, request: RequestId) -> u32 {
        let slot = request.0 as u32;
        assert_eq!(self.request_id(slot), request, "stale request id {request}");
        slot
    }

    fn execute(&mut self, manager: u32, action: ManagerAction) {
        match action {
            ManagerAction::ReadHome { io, request, range } => {
                self.submit_local(manager, manager, io, VioKind::HomeRead, range, request);
            }
            ManagerAction::WriteHome { io, range, source } => {
                let request = match source {
                    somnus_core::offload::DataSource::Request(request) => Some(request),
                    somnus_core::offload::DataSource::Log { .. } => None,
                };
                self.submit_local(manager, manager, io, VioKind::HomeWrite, range, request);
            }
            ManagerAction::WriteLog { io, request, logger, range, version } => {
                self.send_to_logger(
                    manager,
                    logger,
                    io,
                    VioKind::LogWrite { version: version.0 },
                    range,
                    Some(request),
                );
            }
            ManagerAction::ReadLog { io, request, logger, range, version } => {
                self.send_to_logger(
                    manager,
                    logger,
                    io,
                    VioKind::LogRead { version: version.0 },
                    range,
                    request,
                );
            }
            ManagerAction::Invalidate { io, logger, range, version } => {
                self.send_to_logger(
                    manager,
                    logger,
                    io,
                    VioKind::Invalidate { version: version.0 },
                    range,
                    None,
                );
            }
            ManagerAction::SpinDown => self.spin_down_requested(manager),
            ManagerAction::SpinUp => self.spin_up_requested(manager),
            ManagerAction::Reply { request, kind, outcome, waited_for_spin_up } => {
                self.reply(request, kind, outcome, waited_for_spin_up);
            }
        }
    }

    fn new_vio(&mut self, vio: VolumeIo) -> u32 {
        match self.vios_free.pop() {
            Some(index) => {
                self.vios[index as usize] = vio;
                index
            }
            None => {
                self.vios.push(vio);
                (self.vios.len() - 1) as u32
            }
        }
    }

    fn submit_local(
        &mut self,
        manager: u32,
        target: u32,
        io: IoId,
        kind: VioKind,
        range: ByteRange,
        request: Option<RequestId>,
    ) {
        let vio = VolumeIo {
            target,
            manager,
            io,
            kind,
            range,
            placement: range,
            request,
            remote: false,
            result: Ok(()),
        };
        let index = self.new_vio(vio);
        self.submit(index);
    }

    /// Sends a logger operation, over the network when the logger is on another server.
    fn send_to_logger(
        &mut self,
        manager: u32,
        logger: LoggerId,
        io: IoId,
        kind: VioKind,
        range: ByteRange,
        request: Option<RequestId>,
    ) {
        let target = logger.0;
        let remote = self.volumes[manager as usize].server != self.volumes[target as usize].server;
        let vio = VolumeIo {
            target,
            manager,
            io,
            kind,
            range,
            placement: range,
            request,
            remote,
            result: Ok(()),
        };
        let index = self.new_vio(vio);
        if !remote {
            self.at_logger(index);
            return;
        }
        let payload = match kind {
            VioKind::LogWrite { .. } => range.size_bytes(),
            VioKind::LogRead { .. }
            | VioKind::Invalidate { .. }
            | VioKind::HomeRead
            | VioKind::HomeWrite => 0,
        };
        let source = self.volumes[manager as usize].server;
        let target_server = self.volumes[target as usize].server;
        let arrival = self.send(source, target_server, RPC_HEADER_BYTES + payload);
        self.schedule(arrival, EventKind::NetArrive(index));
    }

    /// The logger's side of an operation: its metadata changes now, its disk I/O follows.
    fn at_logger(&mut self, index: u32) {
        let vio = self.vios[index as usize];
        let owner = VolumeId(vio.manager);
        let logger = &mut self.loggers[vio.target as usize];
        let state = &mut self.volumes[vio.target as usize];
        let record_bytes = match vio.kind {
            VioKind::LogWrite { version } => {
                if logger.append(owner, vio.range, somnus_core::Version(version)).is_err() {
                    self.vios[index as usize].result = Err(IoFailure::LoggerFull);
                    self.finish_vio(index);
                    return;
                }
                vio.range.size_bytes() + RECORD_HEADER_BYTES
            }
            VioKind::Invalidate { version } => {
                logger.invalidate(owner, vio.range, somnus_core::Version(version));
                RECORD_HEADER_BYTES
            }
            VioKind::LogRead { version } => {
                let version = somnus_core::Version(version);
                assert!(
                    logger.holds(owner, vio.range, version),
                    "O2: {owner} reads {version:?} that the log lost"
                );
                // Where a record sits in the partition is not tracked: a fixed hash of
                // its identity places it, which is what a seek model needs.
                let spread =
                    (u64::from(vio.manager) << 40 ^ version.0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let position = state.log_start + spread % state.log_bytes.max(1);
                self.vios[index as usize].placement =
                    ByteRange::new(position, vio.range.size_bytes());
                self.submit(index);
                return;
            }
            VioKind::HomeRead | VioKind::HomeWrite => {
                unreachable!("home I/O does not go to a logger")
            }
        };
        // Appends go to the log head, wrapping within the partition.
        if state.log_head + record_bytes > state.log_bytes {
            state.log_head = 0;
        }
        let position = state.log_start + state.log_head;
        state.log_head += record_bytes;
        self.vios[index as usize].placement = ByteRange::new(position, record_bytes);
        self.submit(index);
    }

    /// Queues a volume I/O on its target's disks, waiting for a spin-up if needed.
    fn submit(&mut self, index: u32) {
        let vio = self.vios[index as usize];
        let state = &mut self.volumes[vio.target as usize];
        state.ios_in_flight += 1;
        match state.power {
            VolumePower::Active => self.start_vio(index),
            VolumePower::Standby | VolumePower::SpinningUp | VolumePower::SpinningDown => {
                state.parked.push(index);
                if let Some(request) = vio.request {
                    let slot = self.slot_of(request);
                    self.requests[slot as usize].spin_delayed = true;
                }
                self.wake(vio.target);
            }
        }
    }

    fn start_vio(&mut self, index: u32) {
        let vio = self.vios[index as usize];
        let write = !matches!(vio.kind, VioKind::HomeRead | VioKind::LogRead { .. });
        let (start, end) = (vio.placement.start, vio.placement.end);
        if let Some(cache) = &mut self.volumes[vio.target as usize].read_cache {
            if !write && cache.hit(start, end) {
                let done = self.now + CACHE_HIT_OVERHEAD + bus_transfer(vio.placement.size_bytes());
                self.schedule(done, EventKind::VioDone(index));
                return;
            }
            cache.insert(start, end);
        }
        let mut first = std::mem::take(&mut self.first_ops);
        let mut second = std::mem::take(&mut self.second_ops);
        first.clear();
        second.clear();
        let state = &mut self.volumes[vio.target as usize];
        // A write the cache takes is background work for the disks, gathered into
        // whole stripes if it continues the previous write; reads and writes no cache
        // takes are foreground.
        let cached = write && vio.placement.size_bytes() <= state.cache_bytes;
        let access = match (write, cached && start == state.last_write_end) {
            (false, _) => Access::Read,
            (true, true) => Access::GatheredWrite,
            (true, false) => Access::Write,
        };
        if write {
            state.last_write_end = end;
        }
        let (now, state) = (self.now, &self.volumes[vio.target as usize]);
        let pick_mirror = || {
            // The mirror that can start the read soonest, then the nearer head, then
            // the lower index.
            let key = |(i, disk): (usize, &Disk)| {
                (disk.foreground_start(now), disk.head.abs_diff(vio.placement.start), i)
            };
            state
                .disks
                .iter()
                .enumerate()
                .min_by_key(|&entry| key(entry))
                .map_or(0, |(i, _)| i as u32)
        };
        state.array.plan(vio.placement, access, pick_mirror, &mut first, &mut second);
        let foreground = !cached;
        let mut done = self.serve(vio.target, &first, self.now, foreground);
        if !second.is_empty() {
            // The write half of a read-modify-write is queued on its disks right behind
            // the read half, as a controller holding the stripe lock does: the new
            // parity needs every old block first.
            done = self.serve(vio.target, &second, done, foreground);
        }
        if write {
            done = self.cache_write(vio.target, vio.placement.size_bytes(), done);
        }
        self.schedule(done, EventKind::VioDone(index));
        self.first_ops = first;
        self.second_ops = second;
    }

    /// When a write whose disk work completes at `destaged` is acknowledged: at once if
    /// the write cache has room, after enough earlier writes are destaged if it is
    /// full, and at `destaged` without a cache or for a write larger than it.
    fn cache_write(
        &mut self,
        volume: u32,
        size_bytes: u64,
        destaged: VirtualInstant,
    ) -> VirtualInstant {
        let now = self.now;
        let state = &mut self.volumes[volume as usize];
        if size_bytes > state.cache_bytes {
            return destaged;
        }
        let mut room_at = now;
        while let Some(&(at, bytes)) = state.destages.front() {
            if at > now && state.cache_used + size_bytes <= state.cache_bytes {
                break;
            }
            state.destages.pop_front();
            state.cache_used -= bytes;
            room_at = room_at.max(at);
        }
        state.cache_used += size_bytes;
        state.destages.push_back((destaged, size_bytes));
        let transfer = bus_transfer(size_bytes);
        (room_at + CACHE_HIT_OVERHEAD + transfer).min(destaged.max(now + CACHE_HIT_OVERHEAD))
    }

    /// Serves operations on their disks, none before `not_before`: background ones
    /// first come first served, foreground ones ahead of queued background work (see
    /// `disk`); returns when the last one completes.
    fn serve(
        &mut self,
        volume: u32,
        ops: &[DiskOp],
        not_before: VirtualInstant,
        foreground: bool,
    ) -> VirtualInstant {
        let state = &mut self.volumes[volume as usize];
        let mut done = not_before;
        for op in ops {
            let queued =
                state.disks[op.disk as usize].queue(&state.model, op, not_before, foreground);
            state.meter.add_busy(queued.start, queued.busy);
            done = done.max(queued.end);
        }
        done
    }

    fn vio_done(&mut self, index: u32) {
        let vio = self.vios[index as usize];
        if matches!(
            vio.kind,
            VioKind::LogWrite { .. } | VioKind::LogRead { .. } | VioKind::Invalidate { .. }
        ) {
            self.deliver(vio.target, ManagerEvent::LoggerIoServed);
        }
        let state = &mut self.volumes[vio.target as usize];
        state.ios_in_flight -= 1;
        if state.ios_in_flight == 0 && state.spin_down_wanted {
            state.spin_down_wanted = false;
            self.begin_spin_down(vio.target);
        }
        self.finish_vio(index);
    }

    /// The target is done with an I/O: reply, over the network if it came from there.
    fn finish_vio(&mut self, index: u32) {
        let vio = self.vios[index as usize];
        if !vio.remote {
            self.complete_vio(index);
            return;
        }
        let payload = match (vio.kind, vio.result) {
            (VioKind::LogRead { .. }, Ok(())) => vio.range.size_bytes(),
            _ => 0,
        };
        let source = self.volumes[vio.target as usize].server;
        let target = self.volumes[vio.manager as usize].server;
        let arrival = self.send(source, target, RPC_HEADER_BYTES + payload);
        self.schedule(arrival, EventKind::NetReply(index));
    }

    fn complete_vio(&mut self, index: u32) {
        let vio = self.vios[index as usize];
        self.vios_free.push(index);
        self.deliver(vio.manager, ManagerEvent::IoCompleted { io: vio.io, result: vio.result });
    }

    /// Puts `bytes` on the wire from one server to another; returns the arrival time.
    fn send(&mut self, source: u32, target: u32, bytes: u64) -> VirtualInstant {
        let network = self.layout.network;
        let transfer = VirtualDuration::from_nanos(
            (bytes as f64 / network.link_bytes_per_second * 1e9) as u64,
        );
        let start = self
            .now
            .max(self.links[source as usize].transmit_free)
            .max(self.links[target as usize].receive_free);
        let end = start + transfer;
        self.links[source as usize].transmit_free = end;
        self.links[target as usize].receive_free = end;
        if self.now < self.measure_from || self.now >= self.end {
            // Traffic of the warm-up, or of the drain after the window, is not measured.
            return end + VirtualDuration::from_nanos(network.round_trip.as_nanos() / 2);
        }
        self.measured.network_bytes += bytes;
        // Counted in the power timeline's windows, for the peak rate.
        if let Some(window) = self.measured.timeline.window_index(self.now) {
            let per_window = &mut self.measured.network_bytes_per_window;
            per_window.resize(self.measured.timeline.windows().len(), 0);
            per_window[window] += bytes;
        }
        end + VirtualDuration::from_nanos(network.round_trip.as_nanos() / 2)
    }

    fn spin_down_requested(&mut self, volume: u32) {
        let state = &mut self.volumes[volume as usize];
        assert_eq!(
            state.power,
            VolumePower::Active,
            "O3: spin-down of {volume} while {:?}",
            state.power
        );
        if state.ios_in_flight > 0 {
            // Logger I/O from other managers finishes first; the logger already counts
            // as asleep so that no new write is sent here.
            state.spin_down_wanted = true;
            self.notify_watchers(volume);
        } else {
            self.begin_spin_down(volume);
        }
    }

    fn spin_up_requested(&mut self, volume: u32) {
        self.wake(volume);
    }

    /// Starts a spin-up unless one is under way or the volume spins.
    fn wake(&mut self, volume: u32) {
        let state = &mut self.volumes[volume as usize];
        match state.power {
            VolumePower::Standby => self.begin_spin_up(volume),
            VolumePower::SpinningDown => state.spin_up_wanted = true,
            VolumePower::SpinningUp | VolumePower::Active => {}
        }
    }

    /// Stops taking I/O; the disks spin down once the cached writes are on them.
    fn begin_spin_down(&mut self, volume: u32) {
        let now = self.now;
        let state = &mut self.volumes[volume as usize];
        assert_eq!(state.ios_in_flight, 0, "O3: spinning down {volume} with I/O queued");
        state.power = VolumePower::SpinningDown;
        let idle_at = state.disks.iter().map(|disk| disk.busy_until).max().unwrap_or(now).max(now);
        self.schedule(idle_at, EventKind::SpinDownStart(volume));
        self.notify_watchers(volume);
    }

    fn spin_down_start(&mut self, volume: u32) {
        let now = self.now;
        let state = &mut self.volumes[volume as usize];
        assert_eq!(state.power, VolumePower::SpinningDown, "spin-down of {volume} lost its state");
        assert!(
            state.disks.iter().all(|disk| disk.busy_until <= now),
            "O3: {volume} spins down with disk work left"
        );
        let duration = match state.meter.begin_transition(now, PowerState::Standby) {
            Ok(duration) => duration,
            Err(error) => panic!("volume {volume}: {error}"),
        };
        self.schedule(now + duration, EventKind::PowerDone(volume));
    }

    fn begin_spin_up(&mut self, volume: u32) {
        let now = self.now;
        let state = &mut self.volumes[volume as usize];
        state.power = VolumePower::SpinningUp;
        let duration = match state.meter.begin_transition(now, PowerState::Idle) {
            Ok(duration) => duration,
            Err(error) => panic!("volume {volume}: {error}"),
        };
        self.schedule(now + duration, EventKind::PowerDone(volume));
    }

    fn power_done(&mut self, volume: u32) {
        let now = self.now;
        let state = &mut self.volumes[volume as usize];
        state.meter.advance(now);
        match state.power {
            VolumePower::SpinningDown => {
                state.power = VolumePower::Standby;
                self.deliver(volume, ManagerEvent::HomePowerChanged { power: HomePower::Standby });
                let state = &mut self.volumes[volume as usize];
                if state.spin_up_wanted || !state.parked.is_empty() {
                    state.spin_up_wanted = false;
                    self.begin_spin_up(volume);
                }
            }
            VolumePower::SpinningUp => {
                state.power = VolumePower::Active;
                state.spin_up_wanted = false;
                self.deliver(volume, ManagerEvent::HomePowerChanged { power: HomePower::Active });
                let parked = std::mem::take(&mut self.volumes[volume as usize].parked);
                for index in parked {
                    self.start_vio(index);
                }
                self.notify_watchers(volume);
            }
            VolumePower::Active | VolumePower::Standby => {
                unreachable!("power event without a transition")
            }
        }
    }

    fn notify_watchers(&mut self, logger: u32) {
        for i in 0..self.watchers[logger as usize].len() {
            let manager = self.watchers[logger as usize][i];
            if manager != logger {
                self.deliver(manager, ManagerEvent::LoggersChanged);
            }
        }
    }

    fn reply(
        &mut self,
        request: RequestId,
        kind: IoKind,
        outcome: ReplyOutcome,
        waited_for_spin_up: bool,
    ) {
        let slot = self.slot_of(request);
        let client = &self.requests[slot as usize];
        assert_eq!(client.kind, kind, "reply of the wrong kind for {request}");
        let (arrival, volume, range) = (client.arrival, client.volume as usize, client.range);
        let latency = self.now.duration_since(arrival).as_nanos();
        let spin_delayed = client.spin_delayed || waited_for_spin_up;
        if arrival >= self.measure_from {
            self.measure_reply(kind, outcome, latency, spin_delayed);
        }
        self.requests_in_flight -= 1;
        self.requests_done += 1;
        self.requests_free.push(slot);
        self.volumes[volume].pending.remove(range, request.0);
        self.release_dependents(slot, spin_delayed);
    }

    /// Counts a finished request of the measured window.
    fn measure_reply(
        &mut self,
        kind: IoKind,
        outcome: ReplyOutcome,
        latency: u64,
        spin_delayed: bool,
    ) {
        let measured = &mut self.measured;
        let (histogram, sum) = match kind {
            IoKind::Read => (&mut measured.read_latency_ns, &mut measured.read_latency_sum_ns),
            IoKind::Write => (&mut measured.write_latency_ns, &mut measured.write_latency_sum_ns),
        };
        histogram.saturating_record(latency.max(1));
        *sum += u128::from(latency);
        match (kind, outcome) {
            (IoKind::Read, ReplyOutcome::Logged { remote }) => {
                measured.reads_logged += 1;
                measured.reads_remote += u64::from(remote);
            }
            (IoKind::Write, ReplyOutcome::Logged { .. }) => measured.writes_logged += 1,
            (_, ReplyOutcome::Busy | ReplyOutcome::Home) => {}
        }
        if spin_delayed {
            match kind {
                IoKind::Read => measured.reads_spin_delayed += 1,
                IoKind::Write => measured.writes_spin_delayed += 1,
            }
        }
    }

    /// Dispatches the requests that waited only for `slot`. A request held behind one
    /// that a spin-up delayed was delayed by that spin-up too: it counts as such.
    fn release_dependents(&mut self, slot: u32, spin_delayed: bool) {
        let dependents = std::mem::take(&mut self.requests[slot as usize].dependents);
        for &dependent in &dependents {
            let client = &mut self.requests[dependent as usize];
            client.spin_delayed |= spin_delayed;
            let waiting = &mut client.waiting_on;
            assert!(*waiting > 0, "request slot {dependent} released twice");
            *waiting -= 1;
            if *waiting == 0 {
                self.dispatch(dependent);
            }
        }
        self.requests[slot as usize].dependents = dependents;
    }

    fn take_start_snapshot(&mut self) {
        let at = self.measure_from;
        let readings = self
            .volumes
            .iter_mut()
            .zip(&self.managers)
            .map(|(volume, manager)| (volume.meter.reading(at), manager.counters()))
            .collect();
        self.start_snapshot = Some(readings);
    }

    fn take_snapshot(&mut self) {
        if self.snapshot.is_some() {
            return;
        }
        let end = self.end;
        let readings = self
            .volumes
            .iter_mut()
            .zip(&self.managers)
            .map(|(volume, manager)| {
                (volume.meter.reading(end), volume.meter.timeline().cloned(), manager.counters())
            })
            .collect();
        self.snapshot = Some(readings);
    }

    fn finish(mut self) -> RunMeasurements {
        let readings = self.snapshot.take().unwrap_or_default();
        let starts = self.start_snapshot.take().unwrap_or_default();
        for (index, ((reading, timeline, counters), (reading_at_start, counters_at_start))) in
            readings.into_iter().zip(starts).enumerate()
        {
            let state = &self.volumes[index];
            if let Some(timeline) = &timeline {
                self.measured.timeline.accumulate(timeline);
            }
            self.measured.volumes.push(VolumeMeasurements {
                reading: reading.since(&reading_at_start),
                counters: counters.since(&counters_at_start),
                reads: state.reads,
                writes: state.writes,
            });
        }
        self.measured.requests_unfinished = self.requests_in_flight as u64;
        self.measured
    }
}
