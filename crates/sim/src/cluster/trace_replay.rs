//! A block trace replayed open-loop against the simulated cluster, as `somnus replay`
//! replays it against the running one (Sierra 4.3): each device an object of 1 MiB
//! chunks (`replay/<device>`), each request issued at its trace time, a request that
//! overlaps one still open on the same device waiting for it (in arrival order), gear
//! shifts at chosen trace times, and devices replaced (deleted and made again empty,
//! as a volume is discarded) at chosen trace times. Both shells read the trace with
//! [`TraceWorkload::read`], so the agreement test (docs/runtime.md, "Agreement of the
//! two shells") compares the same requests.

use std::collections::BTreeMap;
use std::sync::Arc;

use somnus_core::cluster::Payload;
use somnus_core::cluster::client::{ClientEvent, ClientOp, ClientOutcome};
use somnus_core::cluster::mds::MdsCounters;
use somnus_core::cluster::replay::{AdmissionError, IN_FLIGHT_MAX, ReplayAdmission};
use somnus_core::gear::{IoServerConfig, SchedulerConfig, SchedulerCounters};
use somnus_trace::{TraceError, TraceSet};
use somnus_types::{ByteRange, ChunkGroupId, IoKind, ServerId, VirtualDuration, VirtualInstant};

use super::{ClusterSim, ClusterSpec, Event, FaultSet, SeedReport};

/// Bytes of a block: requests are widened to whole blocks.
pub const REPLAY_BLOCK_BYTES: u64 = 4096;

/// One request of a trace, at its time from the trace's first request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceOp {
    pub at: VirtualDuration,
    pub device: u32,
    /// Whole blocks (a replacement: the whole device).
    pub range: ByteRange,
    pub kind: ReplayKind,
}

/// What a request of the replay does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayKind {
    Read,
    Write,
    /// The device's object is deleted and created again, empty: the data it held goes
    /// to the free log (the trace's requests have no delete; this is the replay's).
    Replace,
}

impl From<IoKind> for ReplayKind {
    fn from(kind: IoKind) -> ReplayKind {
        match kind {
            IoKind::Read => ReplayKind::Read,
            IoKind::Write => ReplayKind::Write,
        }
    }
}

/// A device replaced at a trace time (`somnus replay --replace-schedule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplaceAt {
    pub at: VirtualDuration,
    pub device: u32,
}

/// A trace as a cluster's workload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceWorkload {
    /// Each device's object name (`replay/<device>`) and the bytes it must hold.
    pub devices: Vec<(String, u64)>,
    /// In time order.
    pub ops: Vec<TraceOp>,
}

impl TraceWorkload {
    /// The requests of `set` (the first `duration_s` seconds, if given), widened to
    /// whole blocks, and each device's extent (at least a block).
    pub fn read(set: &TraceSet, duration_s: Option<f64>) -> Result<TraceWorkload, TraceError> {
        let mut devices: Vec<(String, u64)> = set
            .volumes()
            .iter()
            .map(|(_, name)| (format!("replay/{name}"), REPLAY_BLOCK_BYTES))
            .collect();
        let mut ops = Vec::new();
        let mut first = None;
        for request in set.requests() {
            let request = request?;
            let start = *first.get_or_insert(request.timestamp.0);
            let trace_ns = request.timestamp.0.saturating_sub(start);
            if duration_s.is_some_and(|d| trace_ns as f64 / 1e9 >= d) {
                break;
            }
            let begin = request.offset_bytes / REPLAY_BLOCK_BYTES * REPLAY_BLOCK_BYTES;
            let end = (request.offset_bytes + u64::from(request.size_bytes))
                .div_ceil(REPLAY_BLOCK_BYTES)
                * REPLAY_BLOCK_BYTES;
            let end = end.max(begin + REPLAY_BLOCK_BYTES);
            let device = request.volume.0;
            if let Some((_, size)) = devices.get_mut(device as usize) {
                *size = (*size).max(end);
            }
            ops.push(TraceOp {
                at: VirtualDuration::from_nanos(trace_ns),
                device,
                range: ByteRange::new(begin, end - begin),
                kind: request.kind.into(),
            });
        }
        // A week's trace is 20 M requests: the capacity doubling left up to half again
        // of them unused for the whole replay.
        ops.shrink_to_fit();
        Ok(TraceWorkload { devices, ops })
    }

    /// The replacements `replaces` among the requests, each after the requests of its
    /// time; an error names a device the trace does not have.
    pub fn with_replacements(mut self, replaces: &[ReplaceAt]) -> Result<TraceWorkload, String> {
        for replace in replaces {
            let Some((_, size)) = self.devices.get(replace.device as usize) else {
                return Err(format!(
                    "device {} is not one of the trace's {} (0..{})",
                    replace.device,
                    self.devices.len(),
                    self.devices.len()
                ));
            };
            let at = self.ops.partition_point(|op| op.at <= replace.at);
            let op = TraceOp {
                at: replace.at,
                device: replace.device,
                range: ByteRange::new(0, *size),
                kind: ReplayKind::Replace,
            };
            self.ops.insert(at, op);
        }
        Ok(self)
    }

    /// The trace time of the last request.
    pub fn span(&self) -> VirtualDuration {
        self.ops.last().map_or(VirtualDuration::ZERO, |op| op.at)
    }
}

/// How the replay's gears are chosen.
#[derive(Clone, Debug, Default)]
pub enum Gearing {
    /// Every server on throughout.
    #[default]
    AllOn,
    /// Shifts at fixed trace times (`somnus replay --gear-schedule`).
    Schedule(Vec<GearAt>),
    /// The MDS's gear scheduler, from the replay's start (its `origin` is set to it).
    Scheduler(SchedulerConfig),
}

/// The cluster at one sample of the replay (`Replay::SAMPLE_EVERY`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Trace time.
    pub at_s: f64,
    /// Servers the MDS has on, waking or draining (not asleep, failed or removed).
    pub servers_on: u32,
    /// Servers the gear plan keeps on.
    pub planned_on: u32,
    /// The servers' mean power since the sample before.
    pub watts: f64,
}

/// A gear shift at a trace time (`somnus replay --gear-schedule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GearAt {
    pub at: VirtualDuration,
    pub gear: u32,
}

/// What a replay measured, in the terms the two shells are compared on.
#[derive(Clone, Debug)]
pub struct TraceReplayReport {
    /// Each device's object and the chunk group of each of its chunks.
    pub placement: Vec<(String, Vec<ChunkGroupId>)>,
    /// Each chunk group's replicas.
    pub replicas: Vec<Vec<ServerId>>,
    /// Each chunk group's primary just before each gear shift, then once the last
    /// shift has settled (every server on or asleep, no primary moved for 2 s).
    pub primaries: Vec<Vec<Option<ServerId>>>,
    /// The servers' modelled energy from the start to the settled end, and what it
    /// would have been always on.
    pub energy_joules: f64,
    pub energy_if_always_on_joules: f64,
    pub writes_logged: u64,
    pub bytes_logged: u64,
    /// Writes each server acknowledged as a primary.
    pub acknowledged: Vec<u64>,
    pub reads: u64,
    pub writes: u64,
    pub errors: u64,
    pub unfinished: u64,
    /// Latencies in milliseconds, in completion order.
    pub read_ms: Vec<f64>,
    pub write_ms: Vec<f64>,
    /// The cluster every `sample_every` of trace time.
    pub samples: Vec<Sample>,
    /// The gear scheduler's counters, when it chose the gears.
    pub scheduler: Option<SchedulerCounters>,
    pub mds: MdsCounters,
    pub end: SeedReport,
    /// Server-seconds in max-perf and in the io-server state (001), with a compute
    /// load; zero without.
    pub role_seconds: [f64; 2],
    /// Each server's bytes of data held once every free due was applied (the
    /// replacements' old data freed a grace after them).
    pub stored_bytes: Vec<u64>,
}

impl TraceReplayReport {
    /// The energy the sleeps saved: always on minus used.
    pub fn energy_saved_joules(&self) -> f64 {
        self.energy_if_always_on_joules - self.energy_joules
    }
}

/// The cluster's compute over a replay, for the MDS's io-server controller (001): the
/// block traces carry none, so it is given.
#[derive(Clone, Debug, PartialEq)]
pub struct ComputeLoad {
    pub config: IoServerConfig,
    /// From each step's trace second on, the max-perf servers the compute needs;
    /// sorted by second. Before the first step, none.
    pub steps: Vec<(u64, f64)>,
}

impl ComputeLoad {
    /// The max-perf servers the compute needs in trace second `second`.
    pub fn servers_at(&self, second: u64) -> f64 {
        match self.steps.partition_point(|(s, _)| *s <= second) {
            0 => 0.0,
            i => self.steps[i - 1].1,
        }
    }
}

/// The replay's state inside the simulation: client 0 creates the devices' objects,
/// then submits every request at its time.
#[derive(Debug)]
pub(super) struct Replay {
    workload: Arc<TraceWorkload>,
    gears: Vec<GearAt>,
    scheduler: Option<SchedulerConfig>,
    compute: Option<ComputeLoad>,
    sample_every: VirtualDuration,
    samples: Vec<Sample>,
    /// Joules used at the last sample.
    sampled_joules: f64,
    created: usize,
    start: Option<VirtualInstant>,
    next: usize,
    /// Which arrived requests may go (the core's rule, as `somnus replay`'s), by
    /// their index in the trace.
    admission: ReplayAdmission,
    /// Requests submitted: tag to request and arrival.
    submitted: BTreeMap<u64, (usize, VirtualInstant)>,
    /// A replacement's create, by its tag: the replacement's tag.
    recreating: BTreeMap<u64, u64>,
    done: usize,
    errors: u64,
    read_ms: Vec<f64>,
    write_ms: Vec<f64>,
    primaries: Vec<Vec<Option<ServerId>>>,
    placement: Vec<(String, Vec<ChunkGroupId>)>,
}

/// How long past the trace's end the replay may take to finish and settle.
const SETTLE_MAX: VirtualDuration = VirtualDuration::from_secs(120);
/// After the trace, how long the woken cluster may take to reclaim every DVL: a day
/// of writes logged while replicas slept is read back at the loggers' random-read
/// rate (a day of the diurnal trace left 150,000 records, about 6 minutes' worth).
const RECLAIM_MAX: VirtualDuration = VirtualDuration::from_secs(3600);
const NANOS_PER_SECOND: u64 = 1_000_000_000;
const ONE_SECOND: VirtualDuration = VirtualDuration::from_secs(1);
/// Primaries unchanged this long, with every server on or asleep: settled.
const SETTLED_FOR: VirtualDuration = VirtualDuration::from_secs(2);

/// Replays `workload` on a cluster of `spec` (its workload and faults ignored: one
/// client, no fault) with `seed`, shifting gears at `gears`' trace times.
pub fn replay_trace(
    spec: &ClusterSpec,
    seed: u64,
    workload: Arc<TraceWorkload>,
    gears: &[GearAt],
) -> TraceReplayReport {
    let gearing = Gearing::Schedule(gears.to_vec());
    let spec = ClusterSpec { check_history: false, ..spec.clone() };
    let sample = VirtualDuration::from_secs(60);
    replay_trace_with(&spec, seed, workload, &gearing, None, sample, &mut |_| {})
}

/// How far a replay is: requests answered of the trace's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayProgress {
    pub done: u64,
    pub total: u64,
}

/// [`replay_trace`] with the gears chosen by `gearing`, the io-server controller fed
/// `compute` if given, sampling the cluster every `sample_every` of trace time, the
/// history checked as `spec.check_history` says.
/// `progress` hears of every thousandth of the requests answered (a shell shows it).
pub fn replay_trace_with(
    spec: &ClusterSpec,
    seed: u64,
    workload: Arc<TraceWorkload>,
    gearing: &Gearing,
    compute: Option<&ComputeLoad>,
    sample_every: VirtualDuration,
    progress: &mut dyn FnMut(ReplayProgress),
) -> TraceReplayReport {
    let (gears, scheduler) = match gearing {
        Gearing::AllOn => (Vec::new(), None),
        Gearing::Schedule(gears) => (gears.clone(), None),
        Gearing::Scheduler(config) => (Vec::new(), Some(config.clone())),
    };
    let span = workload.span();
    let spec = ClusterSpec {
        clients: 1,
        objects: 0,
        fill: false,
        faults: FaultSet::none(),
        virtual_secs: (span + SETTLE_MAX).as_secs_f64().ceil() as u64 + 60,
        op_deadline: Some(somnus_core::cluster::ClusterConfig::sierra().op_deadline),
        ..spec.clone()
    };
    let devices = workload.devices.len();
    let (reads, writes) = workload.ops.iter().fold((0, 0), |(r, w), op| match op.kind {
        ReplayKind::Read => (r + 1, w),
        ReplayKind::Write => (r, w + 1),
        ReplayKind::Replace => (r, w),
    });
    let mut sim = ClusterSim::new(&spec, seed, None);
    sim.quiesce_max = RECLAIM_MAX;
    sim.replay = Some(Replay {
        workload,
        gears,
        scheduler,
        compute: compute.cloned(),
        sample_every: sample_every.max(VirtualDuration::from_secs(1)),
        samples: Vec::new(),
        sampled_joules: 0.0,
        created: 0,
        start: None,
        next: 0,
        admission: ReplayAdmission::new(devices, IN_FLIGHT_MAX),
        submitted: BTreeMap::new(),
        recreating: BTreeMap::new(),
        done: 0,
        errors: 0,
        // A latency per request, held to the end: no capacity beyond the trace's.
        read_ms: Vec::with_capacity(reads),
        write_ms: Vec::with_capacity(writes),
        primaries: Vec::new(),
        placement: Vec::new(),
    });
    let limit = sim.heal_at();
    let total = sim.replay.as_ref().map_or(0, |r| r.workload.ops.len()) as u64;
    let step = (total / 1000).max(1);
    let mut told = 0;
    let finished = |sim: &ClusterSim| {
        let Some(replay) = sim.replay.as_ref() else { return true };
        let done = replay.done as u64;
        if done >= told + step {
            told = done;
            progress(ReplayProgress { done, total });
        }
        replay.start.is_some() && replay.done == replay.workload.ops.len()
    };
    sim.run_until_true(limit, finished);
    // Settled: every server on or asleep as the MDS has it, primaries unchanged.
    let (mut previous, mut unsettled_at) = (sim.primaries(), sim.now());
    sim.run_until_true(limit, |sim| {
        let now = sim.primaries();
        if now != previous || !sim.power_steady() {
            previous = now;
            unsettled_at = sim.now();
        }
        sim.now().duration_since(unsettled_at) >= SETTLED_FOR
    });
    let (energy_joules, energy_if_always_on_joules) = sim.energy_joules();
    let now = sim.now();
    let role_seconds = sim
        .servers
        .iter_mut()
        .map(|slot| slot.meter.role_seconds(now))
        .fold([0.0; 2], |[max_perf, io_server], [m, i]| [max_perf + m, io_server + i]);
    let final_map = sim.primaries();
    // Every free due applied (by the servers on: a sleeper's wait for its wake): the
    // replaced devices' old data gone.
    sim.run_until_true(limit, |sim| sim.mds.frees_queued() == 0);
    let stored_bytes = (0..sim.spec.servers)
        .map(|s| {
            let server = sim.servers[s as usize].server.as_ref();
            server.map_or(0, |server| server.space().stored_bytes)
        })
        .collect();
    let groups = sim.mds.group_count();
    let replicas = (0..groups).map(|g| sim.mds.replicas(ChunkGroupId(g as u32)).to_vec()).collect();
    let writes_logged = sim.servers_total(|c| c.writes_logged);
    let bytes_logged = sim.servers_total(|c| c.bytes_logged);
    let acknowledged = (0..sim.spec.servers)
        .map(|s| {
            let server = sim.servers[s as usize].server.as_ref();
            server.map_or(0, |server| server.counters().writes_acknowledged)
        })
        .collect();
    let scheduler = sim.mds.scheduler().map(|s| s.counters());
    let mds = sim.mds.counters();
    let mut replay = sim.replay.take().unwrap_or_else(|| unreachable!("set above"));
    replay.primaries.push(final_map);
    let end = sim.finish_run();
    TraceReplayReport {
        placement: replay.placement,
        replicas,
        primaries: replay.primaries,
        energy_joules,
        energy_if_always_on_joules,
        writes_logged,
        bytes_logged,
        acknowledged,
        reads: replay.read_ms.len() as u64,
        writes: replay.write_ms.len() as u64,
        errors: replay.errors,
        unfinished: (replay.workload.ops.len() - replay.done) as u64,
        read_ms: replay.read_ms,
        write_ms: replay.write_ms,
        samples: replay.samples,
        scheduler,
        mds,
        end,
        role_seconds,
        stored_bytes,
    }
}

impl ClusterSim<'_> {
    /// Client 0's next step of the replay: the next create, or nothing (the requests
    /// come by their own events).
    pub(super) fn replay_next_create(&mut self) {
        let Some(replay) = self.replay.as_mut() else { return };
        let Some((name, size_bytes)) = replay.workload.devices.get(replay.created).cloned() else {
            return;
        };
        let tag = self.next_op;
        self.next_op += 1;
        self.feed_client(
            0,
            ClientEvent::Submit { tag, op: ClientOp::Create { name, size_bytes }, deadline: None },
        );
    }

    /// Every request due now arrives; the next one is scheduled.
    pub(super) fn replay_arrivals(&mut self) {
        let now = self.now();
        loop {
            let Some(replay) = self.replay.as_mut() else { return };
            let Some(start) = replay.start else { return };
            let Some(op) = replay.workload.ops.get(replay.next).copied() else { return };
            if start + op.at > now {
                self.events.schedule(start + op.at, Event::ReplayNext);
                return;
            }
            let index = replay.next;
            replay.next += 1;
            let ready = replay.admission.arrive(index as u64, op.device, op.range);
            self.replay_submit_all(ready);
        }
    }

    /// Submits the requests the admission let go (or reports its refusal: a bug).
    fn replay_submit_all(&mut self, ready: Result<Vec<u64>, AdmissionError>) {
        match ready {
            Ok(ready) => ready.into_iter().for_each(|index| self.replay_submit(index as usize)),
            Err(error) => self.checker.violate(format!("the replay's admission: {error}")),
        }
    }

    fn replay_submit(&mut self, index: usize) {
        let tag = self.next_op;
        self.next_op += 1;
        let Some(replay) = self.replay.as_mut() else { return };
        let op = replay.workload.ops[index];
        // Latency counts from the arrival, any wait for an overlapping one included.
        let arrived = replay.start.unwrap_or_default() + op.at;
        let name = replay.workload.devices[op.device as usize].0.clone();
        replay.submitted.insert(tag, (index, arrived));
        let op = match op.kind {
            ReplayKind::Read => ClientOp::Read { name, range: op.range },
            ReplayKind::Write => {
                let stamp = self.clients[0].stamps.mint();
                ClientOp::Write { name, range: op.range, stamp, data: Payload::NONE }
            }
            ReplayKind::Replace => ClientOp::Delete { name },
        };
        self.feed_client(0, ClientEvent::Submit { tag, op, deadline: None });
    }

    /// The second just ended's compute, to the MDS; the next is scheduled while the
    /// trace runs.
    pub(super) fn replay_compute(&mut self) {
        let now = self.now();
        let Some(replay) = self.replay.as_ref() else { return };
        let (Some(start), Some(compute)) = (replay.start, replay.compute.as_ref()) else {
            return;
        };
        let trace_second = (now.duration_since(start).as_nanos() / NANOS_PER_SECOND).max(1) - 1;
        let servers = compute.servers_at(trace_second);
        let second = start.as_nanos() / NANOS_PER_SECOND + trace_second;
        if replay.done < replay.workload.ops.len() {
            self.events.schedule(now + ONE_SECOND, Event::ReplayCompute);
        }
        self.feed_mds(super::MdsEvent::Compute { second, servers });
    }

    /// Samples the cluster's power and plan; the next sample is scheduled while the
    /// trace runs.
    pub(super) fn replay_sample(&mut self) {
        let now = self.now();
        let joules = self.energy_joules().0;
        let servers = self.spec.servers;
        let servers_on = (0..servers)
            .filter(|s| {
                use somnus_core::cluster::ServerPower as P;
                let power = self.mds.server_power(ServerId(*s));
                matches!(power, P::On | P::Waking | P::Draining)
            })
            .count() as u32;
        let planned_on = self.mds.planned_on_count();
        let Some(replay) = self.replay.as_mut() else { return };
        let Some(start) = replay.start else { return };
        let seconds = replay.sample_every.as_secs_f64();
        if now == start {
            replay.sampled_joules = joules;
            self.events.schedule(now + replay.sample_every, Event::ReplaySample);
            return;
        }
        replay.samples.push(Sample {
            at_s: now.duration_since(start).as_secs_f64(),
            servers_on,
            planned_on,
            watts: (joules - replay.sampled_joules) / seconds,
        });
        replay.sampled_joules = joules;
        if replay.done < replay.workload.ops.len() {
            self.events.schedule(now + replay.sample_every, Event::ReplaySample);
        }
    }

    /// A gear shift of the schedule: the primaries as they stand, then the shift.
    pub(super) fn replay_gear(&mut self, gear: u32) {
        let map = self.primaries();
        if let Some(replay) = self.replay.as_mut() {
            replay.primaries.push(map);
        }
        self.report.gear_shifts += 1;
        self.trace(|| format!("gear {gear} (schedule)"));
        self.feed_mds(super::MdsEvent::GearSet { gear });
    }

    /// Client 0 finished `tag`: a create (the next, or the replay starts), or a
    /// request (its latency; the requests that waited for it may go).
    pub(super) fn replay_done(&mut self, tag: u64, outcome: ClientOutcome) {
        let now = self.now();
        let Some(replay) = self.replay.as_mut() else { return };
        if replay.start.is_none() {
            let ClientOutcome::Object(info) = outcome else {
                let name = &replay.workload.devices[replay.created].0;
                let error = format!("the replay could not create {name:?}: {outcome:?}");
                self.checker.violate(error);
                return;
            };
            let name = replay.workload.devices[replay.created].0.clone();
            replay.placement.push((name, info.chunk_groups.to_vec()));
            self.chunk_groups.insert(info.object, info.chunk_groups);
            let Some(replay) = self.replay.as_mut() else { return };
            replay.created += 1;
            if replay.created < replay.workload.devices.len() {
                self.replay_next_create();
                return;
            }
            // The trace starts on the next whole second: the scheduler's days count
            // from it, and its loads come by whole seconds of the clock.
            let start = whole_second_from(now);
            replay.start = Some(start);
            let gears: Vec<GearAt> = replay.gears.clone();
            let scheduler = replay.scheduler.take();
            for gear in gears {
                self.events.schedule(start + gear.at, Event::ReplayGear(gear.gear));
            }
            // The first sample, at the start, only takes the energy so far.
            self.events.schedule(start, Event::ReplaySample);
            if let Some(compute) = &replay.compute {
                if let Err(error) = self.mds.enable_io_server(compute.config) {
                    self.checker.violate(format!("the io-server controller's config: {error}"));
                }
                self.events.schedule(start + ONE_SECOND, Event::ReplayCompute);
                self.drain(super::Actor::Mds);
            }
            if let Some(config) = scheduler {
                let config = SchedulerConfig { origin: start, ..config };
                if let Err(error) = self.mds.enable_scheduler(config) {
                    self.checker.violate(format!("the gear scheduler's config: {error}"));
                }
                self.drain(super::Actor::Mds);
            }
            self.replay_arrivals();
            return;
        }
        let Some(replay) = self.replay.as_mut() else { return };
        let (tag, outcome) = match replay.recreating.remove(&tag) {
            Some(replaced) => (replaced, outcome),
            None => (tag, outcome),
        };
        let Some(&(index, arrived)) = replay.submitted.get(&tag) else { return };
        let op = replay.workload.ops[index];
        if op.kind == ReplayKind::Replace && outcome == ClientOutcome::Deleted {
            // Deleted: the device is made again, empty, before the requests after it.
            let (name, size_bytes) = replay.workload.devices[op.device as usize].clone();
            let create = self.next_op;
            self.next_op += 1;
            replay.recreating.insert(create, tag);
            let op = ClientOp::Create { name, size_bytes };
            self.feed_client(0, ClientEvent::Submit { tag: create, op, deadline: None });
            return;
        }
        replay.submitted.remove(&tag);
        replay.done += 1;
        let ms = now.duration_since(arrived).as_secs_f64() * 1e3;
        match outcome {
            ClientOutcome::Read(_) => replay.read_ms.push(ms),
            ClientOutcome::Written(_) => replay.write_ms.push(ms),
            ClientOutcome::Object(info) if op.kind == ReplayKind::Replace => {
                self.chunk_groups.insert(info.object, info.chunk_groups);
            }
            _ => replay.errors += 1,
        }
        let Some(replay) = self.replay.as_mut() else { return };
        let ready = replay.admission.done(index as u64);
        self.replay_submit_all(ready);
    }
}

/// The first whole second of the clock at or after `at`.
fn whole_second_from(at: VirtualInstant) -> VirtualInstant {
    let nanos = at.as_nanos().div_ceil(NANOS_PER_SECOND).saturating_mul(NANOS_PER_SECOND);
    VirtualInstant::ZERO.saturating_add(VirtualDuration::from_nanos(nanos))
}
