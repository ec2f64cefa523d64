//! The deterministic cluster simulation (issue 11): the MDS, N storage servers and M
//! clients of `somnus_core::cluster`, on the simulator's event queue, disk model and
//! network model, with faults injected from a seed, and a checker of every read.
//!
//! The simulation decides nothing of the protocol: it delivers messages (late, twice,
//! never, or across a partition), runs disk I/O on each server's disk model, crashes
//! and restarts servers (a crash loses the disk I/O in flight; the store survives
//! with what completed), and drives the clients' closed-loop workload. Payloads are
//! stamps (see `somnus_core::cluster::Stamp`), the request sizes drive the models.
//!
//! A run goes: objects created, then `virtual_secs` of workload under faults, then
//! every fault healed and the workload stopped; once every op has finished and every
//! server is idle, the checker compares all replicas.

mod checker;
mod drawn;
mod engine_log;
mod faults;
mod outage;
pub mod scenario;
mod trace_replay;

pub use scenario::{Injection, OpKind, OpRecord};
pub use trace_replay::{
    ComputeLoad, GearAt, Gearing, REPLAY_BLOCK_BYTES, ReplaceAt, ReplayKind, ReplayProgress,
    Sample, TraceOp, TraceReplayReport, TraceWorkload, replay_trace, replay_trace_with,
};

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use somnus_core::cluster::client::{
    Client, ClientAction, ClientError, ClientEvent, ClientOp, ClientOutcome,
};
use somnus_core::cluster::logvolume::LogVolume;
use somnus_core::cluster::mds::{Command, Mds, MdsAction, MdsEvent};
use somnus_core::cluster::server::{
    Broken, DiskError, DiskOp as ServerDiskOp, Durable, Server, ServerAction, ServerCounters,
    ServerEvent,
};
use somnus_core::cluster::store::{BLOCK_BYTES, ChunkStore, StoreOp};
use somnus_core::cluster::{
    ChunkId, ClientId, ClusterConfig, Message, MetadataError, ObjectRef, Payload, Peer,
    ServerPlaces, Stamp, Stamps,
};
use somnus_core::layout::{Layout, LayoutSpec, RackAssignment, Scheme};
use somnus_core::power::{DiskMechanics, PowerProfile, ServerMeter, builtin_profile};
use somnus_core::slab::{Key, Slab};
use somnus_types::{
    ByteRange, ChunkGroupId, IoId, ObjectId, RackId, ServerId, Version, VirtualDuration,
    VirtualInstant,
};

pub use checker::Checker;
pub use faults::{FaultCounts, FaultKind, FaultRates, FaultSet};

use crate::disk::{Disk, DiskModel, DiskRequest};
use crate::engine::network::Network;
use crate::engine::queue::EventQueue;
use crate::topology::NetworkParams;

/// What a cluster run is.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterSpec {
    pub servers: u32,
    pub replicas: u32,
    pub racks: u32,
    pub clients: u32,
    /// Chunk groups per server (Sierra: enough that every server leads several).
    pub groups_per_server: u32,
    pub objects: u32,
    pub object_bytes: u64,
    pub chunk_bytes: u64,
    /// The largest request, in blocks.
    pub request_blocks_max: u64,
    /// Virtual time of workload under faults (the heal and quiesce come after).
    pub virtual_secs: u64,
    pub faults: FaultSet,
    /// How often each fault kind in `faults` strikes.
    pub rates: FaultRates,
    pub broken: Option<Broken>,
    /// The lowest gear the MDS shifts to (`ClusterConfig::gear_min`).
    pub gear_min: u32,
    /// Before the random ops, the clients write every chunk of every object whole, so
    /// every replica holds a chunk's worth of data (a rebuild's measure).
    pub fill: bool,
    /// Each client reads and writes only the objects it created (as a VM its own
    /// volumes), instead of any object: fewer lookups, no two clients on one block.
    pub private_objects: bool,
    /// Check the history as it happens (C1, C3, C4 on every op). Off, only the end
    /// checks run (D5, liveness): a replay that measures speed, not correctness.
    pub check_history: bool,
    /// What each server's logger keeps its records in.
    pub logger: LoggerBackend,
    /// Each server's power profile: its sleep and wake take the profile's times, and
    /// its meter charges the profile's watts (as the runtime's do).
    pub server_profile: PowerProfile,
    /// Room of each server's logger (`ClusterConfig::logger_capacity_bytes`; the
    /// full-disk fault cuts it to 8 MiB).
    pub logger_capacity_bytes: u64,
    /// The share of the random ops that replace an object: a new data object written
    /// and bound to its name, or the name deleted and created again; what they
    /// replace is freed a grace later (docs/space.md).
    pub churn: f64,
    /// How long a client works at an op before the core ends it (`ClusterConfig::
    /// op_deadline`). None: longer than the run, so that an op stuck under faults is
    /// found by the end's liveness check instead of ended quietly; a trace replay
    /// takes the runtime's default, as `somnus replay` does.
    pub op_deadline: Option<VirtualDuration>,
}

/// What a simulated logger keeps its records in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoggerBackend {
    /// The real `somnus-logstore` engine over its in-memory device, carrying out the
    /// core's commits as the simulated disk finishes them: the bytes-on-disk code under
    /// test, checked against the core's model and index.
    Logstore,
    /// No engine: the core's model of the log (its metadata, which the core keeps
    /// either way) answers the reads. The core decides the same either way, so a seed
    /// runs the same.
    Model,
}

impl ClusterSpec {
    /// A small cluster that exercises every path in little time: 9 servers in 3 racks.
    pub fn small() -> ClusterSpec {
        ClusterSpec {
            servers: 9,
            replicas: 3,
            racks: 3,
            clients: 4,
            groups_per_server: 4,
            objects: 8,
            object_bytes: 2 << 20,
            chunk_bytes: 1 << 20,
            request_blocks_max: 16,
            virtual_secs: 20,
            faults: FaultSet::all(),
            rates: FaultRates::default(),
            broken: None,
            gear_min: 1,
            fill: false,
            private_objects: false,
            check_history: true,
            logger: LoggerBackend::Logstore,
            server_profile: builtin_profile(SERVER_PROFILE)
                .unwrap_or_else(|error| panic!("the built-in {SERVER_PROFILE}: {error}")),
            logger_capacity_bytes: ClusterConfig::sierra().logger_capacity_bytes,
            churn: 0.05,
            op_deadline: None,
        }
    }

    /// The power-aware layout a run of this spec builds for `seed`, or why none can be
    /// (the shells check a user's spec with this before running it).
    /// Whether a cluster of this spec can be simulated with `seed`: its layout and
    /// the protocol's config checked as the core checks them (as a cluster file's).
    pub fn validate(&self, seed: u64) -> Result<(), String> {
        self.layout(seed).map_err(|error| error.to_string())?;
        self.config(seed).validate()
    }

    /// The protocol's config of this spec's cluster, simulated with `seed`.
    pub fn config(&self, seed: u64) -> ClusterConfig {
        let logger_capacity_bytes = if self.faults.has(FaultKind::FullDisk) {
            FULL_LOGGER_BYTES
        } else {
            self.logger_capacity_bytes
        };
        ClusterConfig {
            replicas: self.replicas,
            chunk_size_bytes: self.chunk_bytes,
            gear_min: self.gear_min,
            logger_capacity_bytes,
            free_grace: FREE_GRACE,
            pending_grace: PENDING_GRACE,
            orphan_scan_interval: ORPHAN_SCAN,
            seed,
            op_deadline: self.op_deadline.unwrap_or(
                VirtualDuration::from_secs(self.virtual_secs.saturating_add(60)) + QUIESCE_MAX,
            ),
            ..ClusterConfig::sierra()
        }
    }

    pub fn layout(&self, seed: u64) -> Result<Layout, somnus_core::layout::LayoutError> {
        Layout::build(&LayoutSpec {
            servers: self.servers,
            replicas: self.replicas,
            racks: self.racks,
            chunk_groups: self.servers * self.groups_per_server,
            scheme: Scheme::PowerAware(RackAssignment::Rotated),
            seed,
        })
    }
}

/// What one seed's run did and found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeedReport {
    pub seed: u64,
    pub ops: u64,
    pub writes: u64,
    pub reads: u64,
    pub messages: u64,
    pub disk_ios: u64,
    /// Crashes of servers, of the MDS: the faults' and the power cut's (`faults`
    /// counts partitions, corruptions, losses and the rest by kind).
    pub crashes: u64,
    pub mds_crashes: u64,
    pub view_changes: u64,
    pub client_retries: u64,
    /// Repeats of writes already answered, answered again with their version (S1).
    pub repeats_answered: u64,
    pub blocks_repaired: u64,
    pub gear_shifts: u64,
    /// The bytes the rebuilds of lost servers' replicas copied.
    pub rebuilt_bytes: u64,
    /// Writes the DVLs logged (a replica was down), logged writes reclaimed, and
    /// logged writes a newer one covered before they were (stale, not reclaimed).
    pub writes_logged: u64,
    pub writes_reclaimed: u64,
    pub writes_superseded: u64,
    /// Reads served with logged writes read back from the loggers on demand, and
    /// times a primary asked to wake the sleeping holders of writes such a read
    /// awaited (P7).
    pub reads_from_loggers: u64,
    pub holder_wakes_asked: u64,
    /// Reads whose blocks a write landed on while they were under way (read again).
    pub reads_again: u64,
    pub ops_unfinished: u64,
    /// Objects replaced (bound anew or deleted and created again), objects freed on
    /// servers (each once per server), logged writes of freed objects dropped, and
    /// objects the orphan scan found.
    pub churns: u64,
    pub objects_freed: u64,
    pub logged_writes_dropped: u64,
    pub orphans_found: u64,
    /// Virtual time the run took, heal and quiesce included.
    pub virtual_nanos: u64,
    /// A hash of every event the run handled, with its time: two runs of a seed
    /// that differ anywhere differ here (the simulation must be deterministic).
    pub event_hash: u64,
    /// Faults injected, by kind.
    pub faults: FaultCounts,
    pub violations: Vec<String>,
    pub violation_count: u64,
}

/// The servers' profile unless a spec says otherwise (the runtime's default too).
pub const SERVER_PROFILE: &str = "ecs2-storage-node";
/// Timers due at once in a row before a node is reported stuck.
const TIMER_REFIRES_MAX: u32 = 100_000;
/// After the heal, how long the cluster may take to finish every op and go idle.
const QUIESCE_MAX: VirtualDuration = VirtualDuration::from_secs(300);
/// How often the quiesce is probed.
const PROBE_INTERVAL: VirtualDuration = VirtualDuration::from_millis(100);
/// Mean pause between a client's ops.
const THINK_MEAN_MS: f64 = 2.0;
/// The longest a delayed message is held (the rates are the spec's `FaultRates`).
const DELAY_MAX_MS: u64 = 50;
/// A few delayed messages are held far longer than a lease's margin (a stalled link,
/// a paused process): only the epochs and fences, not the leases' timing, keep them
/// harmless.
const STALLED_OF_DELAYED: f64 = 0.04;
const STALL_MS: std::ops::RangeInclusive<u64> = 500..=8_000;
const SLOWDOWN: f64 = 10.0;
/// A logger's room under the full-disk fault.
const FULL_LOGGER_BYTES: u64 = 8 << 20;
/// The simulation's graces and scans (docs/space.md), short so that a seed frees what
/// it replaced within its run.
const FREE_GRACE: VirtualDuration = VirtualDuration::from_secs(3);
const PENDING_GRACE: VirtualDuration = VirtualDuration::from_secs(10);
const ORPHAN_SCAN: VirtualDuration = VirtualDuration::from_secs(2);

/// A state machine the simulation drives: the MDS, a server, or a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Actor {
    Mds,
    Server(u32),
    Client(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Event {
    Deliver(Key),
    DiskDone {
        server: u32,
        incarnation: u32,
        io: u64,
    },
    Timer(Actor),
    ClientNext(u32),
    Crash,
    Restart(u32),
    MdsCrash,
    MdsRestart,
    Partition,
    PartitionEnd(u32),
    Corrupt,
    SlowDisk,
    SlowEnd(u32),
    /// A wake packet reaches the server (sent again while the MDS waits for it).
    Wake(u32),
    /// The server's wake is done: it is on.
    Woken(u32),
    Gear,
    /// The replayed trace's requests due now arrive.
    ReplayNext,
    /// A gear shift of the replay's schedule.
    ReplayGear(u32),
    /// The replay samples the cluster's power and plan.
    ReplaySample,
    /// The replay tells the MDS the compute of the second just ended.
    ReplayCompute,
    Lose,
    DeclareLost(u32),
    /// The next disk I/O of a server (not a read of its replicas' blocks) fails.
    DiskError,
    /// Every server and the MDS lose power; it comes back at `PowerBack`.
    PowerCut,
    PowerBack,
    Heal,
    Probe,
}

/// How a server is cut off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cut {
    Everyone,
    MdsOnly,
}

/// A server of the simulated cluster: its state machine while it runs, its disks while
/// it is down, and what the simulation models around it.
struct SimServer {
    server: Option<Server>,
    /// The disk of a crashed server, until it restarts.
    down_store: Option<Durable>,
    incarnation: u32,
    /// When its process started, on the simulation's clock: the server's own clock
    /// counts from there (0 at each restart, as a real process's does).
    started: VirtualInstant,
    rack: RackId,
    disk: Disk,
    slow: bool,
    /// Added to the arrival of every message it sends (a script's `Lag`): a server
    /// that answers late, overloaded or behind a congested link.
    lag: VirtualDuration,
    cut: Option<Cut>,
    /// Lost for good (the `lost` fault): never restarted.
    lost: bool,
    /// What a lost server held, for the check of copies at acknowledgement only: a
    /// write it acknowledged before it was lost had its copy when the primary counted
    /// it, however late the client hears.
    lost_store: Option<Durable>,
    /// Its modelled energy, charged by its sleeps and wakes.
    meter: ServerMeter,
    /// The engine its logger's bytes are in (none where the model runs alone), and
    /// the logger's operations on the disk, done by the engine as the disk finishes
    /// each (by I/O id, this incarnation's).
    engine: Option<engine_log::EngineLog>,
    log_ops: BTreeMap<u64, ServerDiskOp>,
    /// The `disk-error` fault: its next I/O that is no read of its replicas' blocks
    /// fails.
    fail_next_io: bool,
}

impl SimServer {
    /// What the slot's disk holds: the running server's, or a crashed or lost one's.
    fn disk_contents(&self) -> Option<(&ChunkStore, &LogVolume)> {
        match (&self.server, self.down_store.as_ref().or(self.lost_store.as_ref())) {
            (Some(server), _) => Some((server.store(), server.log_volume())),
            (None, durable) => durable.map(|d| (&d.store, &d.log)),
        }
    }

    fn store(&self) -> Option<&ChunkStore> {
        self.disk_contents().map(|(store, _)| store)
    }

    fn log(&self) -> Option<&LogVolume> {
        self.disk_contents().map(|(_, log)| log)
    }
}

/// A client's op in flight: its id, the object (index) it is on, and the stamp of a
/// write (for the checker).
#[derive(Clone, Copy, Debug)]
struct OpInFlight {
    id: u64,
    object: u32,
    stamp: Option<Stamp>,
    started: VirtualInstant,
}

/// A replacement of an object under way, one step at a time.
#[derive(Clone, Debug)]
enum Churn {
    /// A new data object allocated, then written, then bound to the name.
    Allocating {
        index: u32,
    },
    Writing {
        index: u32,
        data: ObjectRef,
    },
    Binding {
        index: u32,
        data: ObjectId,
    },
    /// The name deleted, then created again.
    Deleting {
        index: u32,
    },
    Creating {
        index: u32,
    },
}

struct ClientSlot {
    client: Client,
    op: Option<OpInFlight>,
    /// A replacement under way: the op in flight is one of its steps.
    churn: Option<Churn>,
    creates_left: Vec<u32>,
    /// The stamps its writes carry.
    stamps: Stamps,
    /// Whole-chunk writes left of the fill (`ClusterSpec::fill`): object, chunk index.
    fill_left: Vec<(u32, u64)>,
}

pub struct ClusterSim<'t> {
    spec: ClusterSpec,
    config: ClusterConfig,
    topology: Arc<ServerPlaces>,
    rng: Pcg64,
    events: EventQueue<Event>,
    mds: Mds,
    /// What the MDS restarts from: its persisted commands (kept only when it crashes
    /// among the faults) and the layout it was made on; when its process started (its
    /// clock counts from there); whether it is down.
    mds_log: Vec<Command>,
    layout: Layout,
    mds_started: VirtualInstant,
    mds_down: bool,
    /// The power cut is on: nothing restarts before power is back.
    power_off: bool,
    servers: Vec<SimServer>,
    clients: Vec<ClientSlot>,
    /// Per node, the earliest timer event scheduled and not yet fired.
    timers: Vec<Option<VirtualInstant>>,
    /// Per node, the deadline it asked for after its last event: its timer fires then,
    /// as the runtime's `sleep_until(poll_timeout())` does. A timer event scheduled
    /// for an earlier deadline the node has since moved past fires nothing (it is
    /// scheduled again for the new one): feeding it anyway woke every primary five
    /// times a second to look over every group it leads, for nothing.
    wanted: Vec<Option<VirtualInstant>>,
    /// Per node, its timers in a row that were due at once (a stuck state machine).
    timers_due_now: Vec<u32>,
    network: Network,
    disk_model: DiskModel,
    slow_model: DiskModel,
    messages: Slab<(Actor, Peer, Message)>,
    checker: Checker,
    /// Each object's id once created, by index (`object-{index}`).
    objects: Vec<Option<ObjectId>>,
    /// Each object's name, by index, made once (an op carries a copy).
    names: Vec<String>,
    /// The chunk group of every chunk of every object created.
    chunk_groups: BTreeMap<ObjectId, Arc<[ChunkGroupId]>>,
    objects_created: u32,
    next_op: u64,
    healed: bool,
    /// Servers cut off by a partition now: none, and no send looks at the slots.
    cuts: usize,
    report: SeedReport,
    /// Every read and write finished, when a scenario asks (`record_ops`).
    op_log: Option<Vec<OpRecord>>,
    trace: Option<&'t mut dyn FnMut(String)>,
    /// A trace replayed instead of the random workload (`replay_trace`).
    replay: Option<trace_replay::Replay>,
    /// After the heal, how long the cluster may take to finish every op and go idle.
    quiesce_max: VirtualDuration,
    /// Per object index: a replacement under way, and when the last one ended (an op
    /// begun before that may find the object gone).
    churning: Vec<bool>,
    churned_at: Vec<VirtualInstant>,
    /// Per data object no name holds any more, when its end began at the latest (a
    /// delete or bind invoked, an allocation's grace run out): F1's reference.
    dying: BTreeMap<ObjectId, VirtualInstant>,
    /// The frees in flight on the servers' disks: (server, incarnation, io).
    frees: BTreeMap<(u32, u32, u64), Vec<ObjectId>>,
}

/// A new server's empty disks.
fn durable(config: &ClusterConfig) -> Durable {
    Durable {
        store: ChunkStore::new(config.chunk_size_bytes),
        log: LogVolume::new(config.chunk_size_bytes, config.logger_capacity_bytes),
        incarnation: 0,
    }
}

/// Server `server`'s logger's engine on `logger` (none for the model alone).
fn engine(
    logger: LoggerBackend,
    server: u32,
    config: &ClusterConfig,
) -> Option<engine_log::EngineLog> {
    match logger {
        LoggerBackend::Model => None,
        LoggerBackend::Logstore => {
            match engine_log::EngineLog::new(server, config.logger_capacity_bytes) {
                Ok(engine) => Some(engine),
                Err(error) => panic!("a new log on an empty in-memory disk failed: {error}"),
            }
        }
    }
}

impl<'t> ClusterSim<'t> {
    pub fn new(
        spec: &ClusterSpec,
        seed: u64,
        trace: Option<&'t mut dyn FnMut(String)>,
    ) -> ClusterSim<'t> {
        // The caller checked the spec (`ClusterSpec::validate`): a bad one here is a bug.
        let layout =
            spec.layout(seed).unwrap_or_else(|error| panic!("cluster spec {spec:?}: {error}"));
        let config = spec.config(seed);
        let start = VirtualInstant::ZERO;
        let topology = Arc::new(ServerPlaces::of(&layout));
        let servers = (0..spec.servers)
            .map(|s| SimServer {
                server: Some(Server::new(
                    ServerId(s),
                    config,
                    topology.clone(),
                    durable(&config),
                    start,
                    spec.broken,
                )),
                down_store: None,
                incarnation: 0,
                started: start,
                rack: layout.servers()[s as usize].rack,
                disk: Disk::default(),
                slow: false,
                lag: VirtualDuration::ZERO,
                cut: None,
                lost: false,
                lost_store: None,
                meter: ServerMeter::new(spec.server_profile.clone(), start),
                engine: engine(spec.logger, s, &config),
                log_ops: BTreeMap::new(),
                fail_next_io: false,
            })
            .collect();
        let clients = (0..spec.clients)
            .map(|c| ClientSlot {
                client: {
                    let mut client = Client::new(ClientId::counted(c), config, start);
                    if spec.broken == Some(Broken::ReadFromSecondary) {
                        client.send_reads_to_secondaries();
                    }
                    client
                },
                stamps: Stamps::of(ClientId::counted(c)),
                op: None,
                churn: None,
                creates_left: (0..spec.objects).filter(|o| o % spec.clients == c).collect(),
                fill_left: if spec.fill {
                    let chunks = spec.object_bytes.div_ceil(spec.chunk_bytes);
                    let mine = (0..spec.objects).filter(|o| o % spec.clients == c);
                    mine.flat_map(|o| (0..chunks).map(move |k| (o, k))).collect()
                } else {
                    Vec::new()
                },
            })
            .collect();
        let nodes = 1 + spec.servers + spec.clients;
        let mechanics = disk_mechanics();
        let slow = DiskMechanics {
            transfer_mb_s: mechanics.transfer_mb_s / SLOWDOWN,
            seek_track_ms: mechanics.seek_track_ms * SLOWDOWN,
            seek_full_ms: mechanics.seek_full_ms * SLOWDOWN,
            overhead_ms: mechanics.overhead_ms * SLOWDOWN,
            ..mechanics
        };
        let mut sim = ClusterSim {
            topology,
            spec: spec.clone(),
            config,
            rng: Pcg64::seed_from_u64(seed),
            events: EventQueue::new(),
            mds: Mds::new(config, &layout, start),
            mds_log: Vec::new(),
            layout,
            mds_started: start,
            mds_down: false,
            power_off: false,
            servers,
            clients,
            timers: vec![None; nodes as usize],
            wanted: vec![None; nodes as usize],
            timers_due_now: vec![0; nodes as usize],
            network: Network::new(
                NetworkParams {
                    round_trip: VirtualDuration::from_micros(200),
                    link_bytes_per_second: 125e6,
                },
                nodes as usize,
            ),
            disk_model: DiskModel::new(&mechanics),
            slow_model: DiskModel::new(&slow),
            messages: Slab::new(u32::MAX as usize),
            checker: Checker::new(),
            objects: vec![None; spec.objects as usize],
            names: (0..spec.objects).map(object_name).collect(),
            chunk_groups: BTreeMap::new(),
            objects_created: 0,
            next_op: 1,
            healed: false,
            cuts: 0,
            report: SeedReport { seed, ..SeedReport::default() },
            op_log: None,
            trace,
            replay: None,
            quiesce_max: QUIESCE_MAX,
            churning: vec![false; spec.objects as usize],
            churned_at: vec![VirtualInstant::ZERO; spec.objects as usize],
            dying: BTreeMap::new(),
            frees: BTreeMap::new(),
        };
        sim.mds.set_broken(spec.broken);
        sim.drain(Actor::Mds);
        for s in 0..spec.servers {
            sim.drain(Actor::Server(s));
        }
        for c in 0..spec.clients {
            sim.events.schedule(start, Event::ClientNext(c));
        }
        sim.schedule_faults();
        sim.events.schedule(sim.heal_at(), Event::Heal);
        sim
    }

    fn heal_at(&self) -> VirtualInstant {
        VirtualInstant::ZERO + VirtualDuration::from_secs(self.spec.virtual_secs)
    }

    /// Runs the seed to its end and checks it.
    pub fn run(mut self) -> SeedReport {
        use std::hash::{BuildHasher, Hash, Hasher};
        let deadline = self.heal_at() + self.quiesce_max;
        // A fixed seed: the same events hash the same in every run (foldhash rather
        // than SipHash, which took 1 % of a 300-server run).
        let mut events = foldhash::fast::FixedState::with_seed(0).build_hasher();
        while let Some((at, event)) = self.events.pop_until(deadline) {
            (at, event).hash(&mut events);
            if self.handle(event) {
                break;
            }
        }
        self.report.event_hash = events.finish();
        self.finish()
    }

    fn now(&self) -> VirtualInstant {
        self.events.now()
    }

    fn trace(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = self.trace.as_mut() {
            let now = self.events.now().duration_since(VirtualInstant::ZERO);
            trace(format!("{:>12.6} {}", now.as_secs_f64(), line()));
        }
    }

    fn exp_delay(&mut self, mean_s: f64) -> VirtualDuration {
        let u: f64 = self.rng.random_range(f64::EPSILON..1.0);
        VirtualDuration::from_nanos((-u.ln() * mean_s * 1e9) as u64)
    }

    fn schedule_faults(&mut self) {
        let (faults, rates) = (self.spec.faults, self.spec.rates);
        let plan = [
            (FaultKind::Crash, rates.crash_every_s, Event::Crash),
            (FaultKind::Partition, rates.partition_every_s, Event::Partition),
            (FaultKind::Corrupt, rates.corrupt_every_s, Event::Corrupt),
            (FaultKind::SlowDisk, rates.slow_disk_every_s, Event::SlowDisk),
            (FaultKind::Gear, rates.gear_every_s, Event::Gear),
            (FaultKind::MdsCrash, rates.mds_crash_every_s, Event::MdsCrash),
            (FaultKind::DiskError, rates.disk_error_every_s, Event::DiskError),
        ];
        for (kind, every, event) in plan {
            if faults.has(kind) {
                let at = self.now() + self.exp_delay(every);
                self.events.schedule(at, event);
            }
        }
        if faults.has(FaultKind::Lost) {
            // Early enough that the rebuild runs under the other faults.
            let window = (self.spec.virtual_secs * 1_000 / 2).max(1);
            let at = self.now() + VirtualDuration::from_millis(self.rng.random_range(0..window));
            self.events.schedule(at, Event::Lose);
        }
        if faults.has(FaultKind::PowerCut) {
            // Within the first three quarters: the cluster works on under the other
            // faults once power is back.
            let window = (self.spec.virtual_secs * 750).max(1);
            let at = self.now() + VirtualDuration::from_millis(self.rng.random_range(0..window));
            self.events.schedule(at, Event::PowerCut);
        }
    }

    fn again(&mut self, every_s: f64, event: Event) {
        if !self.healed {
            let at = self.now() + self.exp_delay(every_s);
            self.events.schedule(at, event);
        }
    }

    /// Handles one event; true when the run is over.
    fn handle(&mut self, event: Event) -> bool {
        match event {
            Event::Deliver(key) => self.deliver(key),
            Event::DiskDone { server, incarnation, io } => {
                let slot = &self.servers[server as usize];
                if slot.incarnation == incarnation && slot.server.is_some() {
                    if let Some(objects) = self.frees.remove(&(server, incarnation, io)) {
                        self.check_frees(server, &objects);
                    }
                    // A read finds the blocks as the disk holds them now (the store
                    // is the simulated disk: it changes as a change completes): a
                    // write that landed while the read waited shows in their headers.
                    // The logger's engine does its operation as the disk finishes it.
                    let io = IoId(io);
                    if let Some(failed) = self.inject_disk_error(server, io) {
                        self.feed_server(server, failed);
                        return false;
                    }
                    let event = match self.servers[server as usize].log_ops.remove(&io.0) {
                        Some(op) => self.log_op_done(server, io, op),
                        None => {
                            let slot = &self.servers[server as usize];
                            match slot.server.as_ref().and_then(|server| server.read_found(io)) {
                                Some(read) => ServerEvent::DiskRead { io, read },
                                None => ServerEvent::DiskDone { io },
                            }
                        }
                    };
                    self.feed_server(server, event);
                    self.check_engine(server);
                }
            }
            Event::Timer(node) => {
                let index = self.node_index(node);
                let now = self.now();
                if self.timers[index] == Some(now) {
                    self.timers[index] = None;
                    match self.wanted[index] {
                        Some(at) if at <= now => self.fire(node),
                        Some(later) => {
                            self.timers[index] = Some(later);
                            self.events.schedule(later, Event::Timer(node));
                        }
                        None => {}
                    }
                }
            }
            Event::ClientNext(c) => self.client_next(c),
            Event::Crash => self.crash(),
            Event::Restart(s) => self.restart(s),
            Event::MdsCrash => self.crash_mds(),
            Event::MdsRestart => self.restart_mds(),
            Event::Partition => self.partition(),
            Event::PartitionEnd(s) if !self.healed => {
                self.set_cut(s, None);
                self.trace(|| format!("partition of s{s} healed"));
            }
            Event::Corrupt => self.corrupt(),
            Event::SlowDisk => self.slow_disk(),
            Event::PartitionEnd(_) => {}
            Event::SlowEnd(s) => self.servers[s as usize].slow = false,
            Event::Wake(s) => self.wake_packet(s),
            Event::Woken(s) => {
                if self.servers[s as usize].server.is_some() {
                    self.feed_server(s, ServerEvent::Woken);
                }
            }
            Event::Gear => self.gear_shift(),
            Event::ReplayNext => self.replay_arrivals(),
            Event::ReplayGear(gear) => self.replay_gear(gear),
            Event::ReplaySample => self.replay_sample(),
            Event::ReplayCompute => self.replay_compute(),
            Event::Lose => self.lose(),
            Event::DeclareLost(s) if self.mds_down => {
                // The operator's command finds no MDS: tried again a second later.
                let at = self.now() + VirtualDuration::from_secs(1);
                self.events.schedule(at, Event::DeclareLost(s));
            }
            Event::DeclareLost(s) => {
                self.trace(|| format!("s{s} declared lost"));
                self.feed_mds(MdsEvent::DeclareLost { server: ServerId(s) });
            }
            Event::DiskError => self.arm_disk_error(),
            Event::PowerCut => self.power_cut(),
            Event::PowerBack => self.power_back(),
            Event::Heal => self.heal(),
            Event::Probe => return self.quiet(),
        }
        false
    }

    /// A wake packet reaches server `s`: the core's rule (`ServerMeter::wake_packet`),
    /// which the runtime's power task follows too; on after the profile's time.
    fn wake_packet(&mut self, s: u32) {
        let now = self.now();
        if let Some(on_at) = self.servers[s as usize].meter.wake_packet(now) {
            self.trace(|| format!("s{s} wakes, on at {:.3}", on_at.as_secs_f64()));
            self.events.schedule(on_at, Event::Woken(s));
        }
    }

    /// The modelled energy of every server so far: used, and had each stayed on.
    pub fn energy_joules(&mut self) -> (f64, f64) {
        let now = self.now();
        let readings = self.servers.iter_mut().map(|slot| slot.meter.reading(now));
        readings.fold((0.0, 0.0), |(j, a), r| (j + r.joules, a + r.joules_if_always_on))
    }

    /// A gear shift to a random gear (the MDS keeps at least `g_min` gear groups on).
    fn gear_shift(&mut self) {
        if self.healed {
            return;
        }
        let gear = self.rng.random_range(1..=self.spec.replicas);
        self.report.gear_shifts += 1;
        self.trace(|| format!("gear {gear}"));
        self.feed_mds(MdsEvent::GearSet { gear });
        self.report.faults.add(FaultKind::Gear);
        self.again(self.spec.rates.gear_every_s, Event::Gear);
    }

    fn heal(&mut self) {
        self.healed = true;
        self.power_off = false;
        self.trace(|| "heal: faults end, workload stops".to_owned());
        if self.mds_down {
            self.restart_mds();
        }
        // Top gear: every server wakes, so every DVL can be reclaimed.
        self.feed_mds(MdsEvent::GearSet { gear: self.spec.replicas });
        for s in 0..self.spec.servers {
            self.set_cut(s, None);
            let slot = &mut self.servers[s as usize];
            slot.slow = false;
            if slot.server.is_none() {
                self.restart(s);
            }
        }
        let at = self.now() + PROBE_INTERVAL;
        self.events.schedule(at, Event::Probe);
    }

    /// Whether every op finished and every server is idle (then the run ends).
    fn quiet(&mut self) -> bool {
        let clients_done = self.clients.iter().all(|c| c.op.is_none());
        let live = self.servers.iter().filter(|s| !s.lost);
        let servers_idle = live
            .clone()
            .all(|s| s.server.as_ref().is_some_and(|s| s.is_idle() && !s.holds_corrupt()));
        let logs_empty = live.clone().all(|s| {
            s.server.as_ref().is_some_and(|s| s.dvls_empty() && s.log_volume().write_count() == 0)
        });
        let rebuilt = self.mds.rebuilds_under_way() == 0;
        let logs_empty = logs_empty && rebuilt;
        // Every group is led where the MDS says: a primary that stepped down (its lease
        // ran out while cut off) is noticed at its next heartbeat, and the view change
        // that follows brings its replicas level.
        let led_as_granted = (0..self.mds.group_count()).all(|g| {
            let view = self.mds.view(ChunkGroupId(g as u32));
            view.primary.is_some_and(|p| {
                let server = self.servers[p.index()].server.as_ref();
                server.is_some_and(|s| s.leads_at(view.group, view.epoch))
            })
        });
        let servers_idle = servers_idle && logs_empty && led_as_granted && self.all_freed();
        let clients_done = clients_done && self.clients.iter().all(|c| c.churn.is_none());
        if clients_done && servers_idle && self.messages.is_empty() {
            return true;
        }
        let at = self.now() + PROBE_INTERVAL;
        self.events.schedule(at, Event::Probe);
        false
    }

    /// F3's state: the free log is empty and no server holds a chunk of an object no
    /// name holds and no allocation writes (every freed byte is gone).
    fn all_freed(&self) -> bool {
        self.mds.frees_queued() == 0 && self.unfreed().is_none()
    }

    /// A chunk some running server holds of an object that is no one's.
    fn unfreed(&self) -> Option<(u32, ChunkId)> {
        let live = self.servers.iter().enumerate().filter(|(_, s)| !s.lost);
        live.filter_map(|(s, slot)| Some((s as u32, slot.server.as_ref()?.store()))).find_map(
            |(s, store)| store.chunk_ids().find(|c| !self.mds.is_live(c.object)).map(|c| (s, c)),
        )
    }

    /// A node's timer is due: it is told so.
    fn fire(&mut self, node: Actor) {
        match node {
            Actor::Mds => self.feed_mds(MdsEvent::TimerFired),
            Actor::Server(s) if self.servers[s as usize].server.is_some() => {
                self.feed_server(s, ServerEvent::TimerFired)
            }
            Actor::Server(_) => {}
            Actor::Client(c) => self.feed_client(c, ClientEvent::TimerFired),
        }
    }

    fn node_index(&self, node: Actor) -> usize {
        match node {
            Actor::Mds => self.spec.servers as usize,
            Actor::Server(s) => s as usize,
            Actor::Client(c) => (self.spec.servers + 1 + c) as usize,
        }
    }

    fn arm(&mut self, node: Actor, deadline: Option<VirtualInstant>) {
        let index = self.node_index(node);
        self.wanted[index] = deadline;
        let Some(deadline) = deadline else { return };
        // A timer due at once, again and again, is a state machine that does not
        // advance: reported, and not armed again (the run would never end).
        if deadline <= self.now() {
            self.timers_due_now[index] += 1;
            if self.timers_due_now[index] == TIMER_REFIRES_MAX {
                let now = self.now();
                self.checker.violate(format!(
                    "liveness: the timer of {node:?} is due at once {TIMER_REFIRES_MAX} times at {now:?}"
                ));
            }
            if self.timers_due_now[index] >= TIMER_REFIRES_MAX {
                return;
            }
        } else {
            self.timers_due_now[index] = 0;
        }
        let deadline = deadline.max(self.now());
        if self.timers[index].is_none_or(|at| deadline < at) {
            self.timers[index] = Some(deadline);
            self.events.schedule(deadline, Event::Timer(node));
        }
    }

    fn feed_mds(&mut self, event: MdsEvent) {
        if self.mds_down {
            return;
        }
        // The MDS's own clock, which starts at 0 with its process.
        let now = VirtualInstant::ZERO + self.now().duration_since(self.mds_started);
        self.mds.handle(now, event);
        self.drain(Actor::Mds);
    }

    fn feed_server(&mut self, s: u32, event: ServerEvent) {
        let now = self.server_clock(s);
        if let Some(server) = self.servers[s as usize].server.as_mut() {
            server.handle(now, event);
        }
        self.drain(Actor::Server(s));
    }

    /// Now on server `s`'s own clock.
    fn server_clock(&self, s: u32) -> VirtualInstant {
        let started = self.servers[s as usize].started;
        VirtualInstant::ZERO + self.now().duration_since(started)
    }

    fn feed_client(&mut self, c: u32, event: ClientEvent) {
        let now = self.now();
        self.clients[c as usize].client.handle(now, event);
        self.drain(Actor::Client(c));
    }

    /// Carries out a node's actions and arms its timer.
    fn drain(&mut self, node: Actor) {
        match node {
            Actor::Mds => {
                while let Some(action) = self.mds.poll_action() {
                    match action {
                        MdsAction::Persist(command) => {
                            let faults = self.spec.faults;
                            if faults.has(FaultKind::MdsCrash) || faults.has(FaultKind::PowerCut) {
                                self.mds_log.push(command);
                            }
                        }
                        MdsAction::Send { to, message } => self.send(Peer::Mds, to, message),
                        MdsAction::WakeServer(s) => {
                            let now = self.now();
                            self.events.schedule(now, Event::Wake(s.0));
                        }
                        MdsAction::ComputeRole { server, role } => {
                            let now = self.now();
                            self.servers[server.index()].meter.set_role(now, Some(role));
                        }
                    }
                }
                // The MDS's deadline is on its own clock.
                let started = self.mds_started;
                let deadline = self
                    .mds
                    .poll_timeout()
                    .map(|at| started.saturating_add(at.duration_since(VirtualInstant::ZERO)));
                self.arm(node, deadline);
            }
            Actor::Server(s) => {
                let from = Peer::Server(ServerId(s));
                loop {
                    let Some(server) = self.servers[s as usize].server.as_mut() else { return };
                    let Some(action) = server.poll_action() else { break };
                    match action {
                        ServerAction::Send { to, message } => self.send(from, to, message),
                        ServerAction::Disk { io, op, position, bytes, background } => {
                            let writes = op.writes();
                            match op {
                                ServerDiskOp::Change {
                                    change: StoreOp::Free { objects }, ..
                                } => {
                                    let incarnation = self.servers[s as usize].incarnation;
                                    self.frees.insert((s, incarnation, io.0), objects);
                                }
                                op
                                @ (ServerDiskOp::LogCommit(_) | ServerDiskOp::LogRead { .. }) => {
                                    self.servers[s as usize].log_ops.insert(io.0, op);
                                }
                                _ => {}
                            }
                            self.disk_io(s, io, writes, position, bytes, !background)
                        }
                        ServerAction::Halt { reason } => {
                            // The server stops, as on a crash; it restarts a little later.
                            self.trace(|| format!("s{s} halts: {reason}"));
                            self.crash_server(s);
                            let at = self.now() + VirtualDuration::from_secs(5);
                            self.events.schedule(at, Event::Restart(s));
                            return;
                        }
                        ServerAction::Sleep => {
                            let now = self.now();
                            self.servers[s as usize].meter.sleep(now);
                            self.trace(|| format!("s{s} sleeps"));
                        }
                    }
                }
                // The server's deadline is on its own clock.
                let slot = &self.servers[s as usize];
                let deadline =
                    slot.server.as_ref().and_then(Server::poll_timeout).map(|at| {
                        slot.started.saturating_add(at.duration_since(VirtualInstant::ZERO))
                    });
                self.arm(node, deadline);
            }
            Actor::Client(c) => {
                while let Some(action) = self.clients[c as usize].client.poll_action() {
                    match action {
                        ClientAction::Send { to, message } => {
                            self.send(Peer::Client(ClientId(c)), to, message)
                        }
                        ClientAction::Done { tag, outcome } => self.op_done(c, tag, outcome),
                    }
                }
                let deadline = self.clients[c as usize].client.poll_timeout();
                self.arm(node, deadline);
            }
        }
    }

    /// The logger's engine of server `s` does `op` as the disk finishes it (a shell
    /// without an engine only reports it done: the core's model answers). The engine
    /// fails nothing in the simulation: where it does, a fault of the log (D7).
    fn log_op_done(&mut self, s: u32, io: IoId, op: ServerDiskOp) -> ServerEvent {
        let slot = &mut self.servers[s as usize];
        let Some(engine) = slot.engine.as_mut() else { return ServerEvent::DiskDone { io } };
        let failed = match op {
            ServerDiskOp::LogCommit(commit) => match engine.commit(&commit) {
                Ok(()) => return ServerEvent::DiskDone { io },
                Err(engine_log::CommitError::NoSpace) => {
                    return ServerEvent::DiskFailed { io, error: DiskError::NoSpace };
                }
                Err(engine_log::CommitError::Failed(error)) => error,
            },
            ServerDiskOp::LogRead { reads } => match engine.read(&reads) {
                Ok(pieces) => return ServerEvent::LogRead { io, pieces },
                Err(error) => error,
            },
            _ => return ServerEvent::DiskDone { io },
        };
        self.checker.violate(format!("D7: the log engine of s{s} failed: {failed}"));
        ServerEvent::DiskFailed { io, error: DiskError::Io(failed) }
    }

    /// Where server `s` runs its logger on an engine, the engine and the core's model
    /// of the log must hold the same live bytes after every operation.
    fn check_engine(&mut self, s: u32) {
        let slot = &self.servers[s as usize];
        let (Some(engine), Some(server)) = (slot.engine.as_ref(), slot.server.as_ref()) else {
            return;
        };
        let (engine_live, model_live) = (engine.live_bytes(), server.log_volume().live_bytes());
        if engine_live != model_live {
            self.checker.violate(format!(
                "D7: the log engine of s{s} holds {engine_live} live bytes, the core's model \
                 {model_live}"
            ));
        }
    }

    fn disk_io(&mut self, s: u32, io: IoId, write: bool, position: u64, bytes: u64, fore: bool) {
        self.report.disk_ios += 1;
        let now = self.now();
        let slot = &mut self.servers[s as usize];
        let model = if slot.slow { &self.slow_model } else { &self.disk_model };
        let op = DiskRequest { disk: 0, position, size_bytes: bytes, write, rewrite: false };
        let queued = slot.disk.queue(model, &op, now, fore);
        let incarnation = slot.incarnation;
        self.events.schedule(queued.end, Event::DiskDone { server: s, incarnation, io: io.0 });
    }

    fn peer_node(&self, peer: Peer) -> Actor {
        match peer {
            Peer::Mds => Actor::Mds,
            Peer::Server(s) => Actor::Server(s.0),
            Peer::Client(c) => Actor::Client(c.0),
        }
    }

    fn set_cut(&mut self, s: u32, cut: Option<Cut>) {
        let slot = &mut self.servers[s as usize].cut;
        self.cuts -= usize::from(slot.is_some());
        self.cuts += usize::from(cut.is_some());
        *slot = cut;
    }

    /// Whether a partition separates two nodes.
    fn cut_off(&self, a: Actor, b: Actor) -> bool {
        if self.cuts == 0 {
            return false;
        }
        let cut = |node: Actor, other: Actor| match node {
            Actor::Server(s) => match self.servers[s as usize].cut {
                Some(Cut::Everyone) => true,
                Some(Cut::MdsOnly) => other == Actor::Mds,
                None => false,
            },
            _ => false,
        };
        cut(a, b) || cut(b, a)
    }

    fn send(&mut self, from: Peer, to: Peer, message: Message) {
        self.report.messages += 1;
        if let (Peer::Server(s), Message::ReplicaWrite { group, epoch, .. }) = (from, &message)
            && self.spec.check_history
        {
            self.checker.replica_write_sent(*group, *epoch, s);
        }
        let (source, target) = (self.peer_node(from), self.peer_node(to));
        let faults = self.spec.faults;
        let live = !self.healed;
        if self.cut_off(source, target)
            || (live && faults.has(FaultKind::Loss) && self.lose_message())
        {
            self.trace(|| format!("lost {from:?} -> {to:?}: {}", brief(&message)));
            return;
        }
        let bytes = 64 + message.payload_bytes();
        let (a, b) = (self.node_index(source) as u32, self.node_index(target) as u32);
        let mut arrival = self.network.send(self.now(), a, b, bytes);
        if let Peer::Server(s) = from {
            arrival += self.servers[s.index()].lag;
        }
        let delay = self.spec.rates.delay;
        if live && faults.has(FaultKind::Delay) && self.rng.random_bool(delay) {
            self.report.faults.add(FaultKind::Delay);
            arrival += VirtualDuration::from_millis(self.rng.random_range(1..=DELAY_MAX_MS));
            if self.rng.random_bool(STALLED_OF_DELAYED) {
                arrival += VirtualDuration::from_millis(self.rng.random_range(STALL_MS));
            }
        }
        if faults.has(FaultKind::FullDisk) && matches!(message, Message::LogFull { .. }) {
            self.report.faults.add(FaultKind::FullDisk);
        }
        let duplication = self.spec.rates.duplication;
        let twice = live && faults.has(FaultKind::Duplication) && self.rng.random_bool(duplication);
        if twice {
            self.report.faults.add(FaultKind::Duplication);
            let later =
                arrival + VirtualDuration::from_millis(self.rng.random_range(0..=DELAY_MAX_MS));
            self.enqueue(later, target, from, message.clone());
        }
        self.enqueue(arrival, target, from, message);
    }

    fn enqueue(&mut self, at: VirtualInstant, target: Actor, from: Peer, message: Message) {
        let Some(key) = self.messages.insert((target, from, message)) else {
            unreachable!("more than 2^32 messages in flight");
        };
        self.events.schedule(at, Event::Deliver(key));
    }

    fn deliver(&mut self, key: Key) {
        let Some((target, from, message)) = self.messages.remove(key) else {
            unreachable!("a message delivered twice");
        };
        if self.cut_off(self.peer_node(from), target) {
            return;
        }
        if self.trace.is_some() {
            self.trace(|| format!("{from:?} -> {target:?}: {}", brief(&message)));
        }
        match target {
            Actor::Mds => self.feed_mds(MdsEvent::MessageReceived { from, message }),
            Actor::Server(s) => {
                if self.servers[s as usize].server.is_some() {
                    self.feed_server(s, ServerEvent::MessageReceived { from, message });
                }
            }
            Actor::Client(c) => self.feed_client(c, ClientEvent::MessageReceived { from, message }),
        }
    }

    /// A client's next op: its creates first, then (once every object exists) random
    /// reads and writes until the heal.
    fn client_next(&mut self, c: u32) {
        if self.replay.is_some() {
            return self.replay_next_create();
        }
        // A replacement under way is finished after the heal too.
        let churn = self.clients[c as usize].churn.clone();
        if (self.healed && churn.is_none()) || self.clients[c as usize].op.is_some() {
            return;
        }
        let id = self.next_op;
        let (object, op) = if let Some(churn) = churn {
            self.churn_step(c, churn)
        } else if let Some(object) = self.clients[c as usize].creates_left.pop() {
            let size_bytes = self.spec.object_bytes;
            (object, ClientOp::Create { name: self.names[object as usize].clone(), size_bytes })
        } else if self.objects_created < self.spec.objects {
            let at = self.now() + VirtualDuration::from_millis(10);
            self.events.schedule(at, Event::ClientNext(c));
            return;
        } else if let Some((object, chunk)) = self.clients[c as usize].fill_left.pop() {
            let start = chunk * self.spec.chunk_bytes;
            let end = (start + self.spec.chunk_bytes).min(self.spec.object_bytes);
            let range = ByteRange::new(start, end - start);
            let stamp = self.clients[c as usize].stamps.mint();
            let name = self.names[object as usize].clone();
            (object, ClientOp::Write { name, range, stamp, data: Payload::NONE })
        } else {
            self.random_op(c)
        };
        self.next_op += 1;
        let stamp = match &op {
            ClientOp::Write { stamp, .. } | ClientOp::WriteTo { stamp, .. } => Some(*stamp),
            _ => None,
        };
        let target = match &op {
            ClientOp::Write { range, .. } | ClientOp::Read { range, .. } => {
                self.objects[object as usize].map(|o| (o, *range))
            }
            ClientOp::WriteTo { object, range, .. } | ClientOp::ReadFrom { object, range } => {
                Some((object.object, *range))
            }
            _ => None,
        };
        if let Some((id_of, range)) = target
            && self.spec.check_history
        {
            let ranges: Vec<_> = ChunkId::split(id_of, self.spec.chunk_bytes, range).collect();
            let now = self.now();
            self.checker.invoke(id, now, &ranges, stamp);
        }
        let started = self.now();
        self.clients[c as usize].op = Some(OpInFlight { id, object, stamp, started });
        self.feed_client(c, ClientEvent::Submit { tag: id, op, deadline: None });
    }

    /// A random read or write of whole blocks of a random object (of client `c`'s own
    /// if the spec says so), or now and then the start of its replacement.
    fn random_op(&mut self, c: u32) -> (u32, ClientOp) {
        let (objects, clients) = (self.spec.objects, self.spec.clients);
        let object = if self.spec.private_objects && objects >= clients {
            // Client c created objects c, c + clients, c + 2 clients, ...
            let own = (objects - c).div_ceil(clients);
            c + clients * self.rng.random_range(0..own)
        } else {
            self.rng.random_range(0..objects)
        };
        if self.spec.churn > 0.0
            && self.rng.random_bool(self.spec.churn)
            && !self.churning[object as usize]
        {
            self.churning[object as usize] = true;
            let churn = match self.rng.random_bool(0.5) {
                true => Churn::Allocating { index: object },
                false => Churn::Deleting { index: object },
            };
            self.clients[c as usize].churn = Some(churn.clone());
            return self.churn_step(c, churn);
        }
        let range = self.random_range();
        let name = self.names[object as usize].clone();
        // With replacements, ops go to the data object the name holds as the
        // simulation knows it (a client's cache of a name may be a view old, and the
        // checker must know which object an op is on).
        let data = (self.spec.churn > 0.0).then(|| self.object_ref(object)).flatten();
        let write = self.rng.random_bool(0.5);
        let op = match (write, data) {
            (true, data) => {
                let stamp = self.clients[c as usize].stamps.mint();
                match data {
                    Some(object) => ClientOp::WriteTo { object, range, stamp, data: Payload::NONE },
                    None => ClientOp::Write { name, range, stamp, data: Payload::NONE },
                }
            }
            (false, Some(object)) => ClientOp::ReadFrom { object, range },
            (false, None) => ClientOp::Read { name, range },
        };
        (object, op)
    }

    /// The data object object index `index`'s name holds, as the simulation knows it.
    fn object_ref(&self, index: u32) -> Option<ObjectRef> {
        let object = self.objects[index as usize]?;
        let chunk_groups = self.chunk_groups.get(&object)?.clone();
        Some(ObjectRef { object, size_bytes: self.spec.object_bytes, chunk_groups })
    }

    /// A random range of whole blocks of an object.
    fn random_range(&mut self) -> ByteRange {
        let blocks_total = self.spec.object_bytes / BLOCK_BYTES;
        let blocks = self.rng.random_range(1..=self.spec.request_blocks_max.min(blocks_total));
        let first = self.rng.random_range(0..=blocks_total - blocks);
        ByteRange::new(first * BLOCK_BYTES, blocks * BLOCK_BYTES)
    }

    /// The op of a replacement's step (which the op's end moves on, `churn_done`);
    /// where the step ends the object's life, when that begins (F1's reference).
    fn churn_step(&mut self, c: u32, churn: Churn) -> (u32, ClientOp) {
        let now = self.now();
        let (index, op) = match &churn {
            Churn::Allocating { index } => {
                (*index, ClientOp::Allocate { size_bytes: self.spec.object_bytes })
            }
            Churn::Writing { index, data } => {
                let range = self.random_range();
                let stamp = self.clients[c as usize].stamps.mint();
                let object = data.clone();
                (*index, ClientOp::WriteTo { object, range, stamp, data: Payload::NONE })
            }
            Churn::Binding { index, data } => {
                if let Some(old) = self.objects[*index as usize] {
                    self.dying.entry(old).or_insert(now);
                }
                let op = ClientOp::Bind {
                    name: self.names[*index as usize].clone(),
                    data: vec![*data],
                    attrs: Vec::new(),
                    taking: Vec::new(),
                    require: None,
                    condition: somnus_core::cluster::BindCondition::Any,
                };
                (*index, op)
            }
            Churn::Deleting { index } => {
                if let Some(old) = self.objects[*index as usize] {
                    self.dying.entry(old).or_insert(now);
                }
                (*index, ClientOp::Delete { name: self.names[*index as usize].clone() })
            }
            Churn::Creating { index } => {
                let name = self.names[*index as usize].clone();
                (*index, ClientOp::Create { name, size_bytes: self.spec.object_bytes })
            }
        };
        (index, op)
    }

    fn op_done(&mut self, c: u32, tag: u64, outcome: ClientOutcome) {
        if self.replay.is_some() {
            return self.replay_done(tag, outcome);
        }
        let Some(op) = self.clients[c as usize].op.take() else { return };
        debug_assert_eq!(op.id, tag);
        self.report.ops += 1;
        let now = self.now();
        if let Some(churn) = self.clients[c as usize].churn.take() {
            self.churn_done(c, tag, churn, outcome, op.stamp);
            let think = self.exp_delay(THINK_MEAN_MS / 1e3);
            self.events.schedule(now + think, Event::ClientNext(c));
            return;
        }
        if let Some(log) = self.op_log.as_mut() {
            let kind = match &outcome {
                ClientOutcome::Written(_) => Some(OpKind::Write),
                ClientOutcome::Read(_) => Some(OpKind::Read),
                _ => None,
            };
            if let Some(kind) = kind {
                log.push(OpRecord { kind, started: op.started, done: now });
            }
        }
        match outcome {
            ClientOutcome::Object(info) => {
                self.objects[op.object as usize] = Some(info.object);
                self.chunk_groups.insert(info.object, info.chunk_groups);
                self.objects_created += 1;
            }
            ClientOutcome::Written(parts) => self.written(tag, op.stamp, &parts),
            ClientOutcome::Read(pieces) => {
                self.report.reads += 1;
                if self.spec.check_history {
                    self.checker.read(tag, now, &pieces);
                }
            }
            ClientOutcome::Deleted | ClientOutcome::Listed { .. } => {}
            // The object was replaced since the op began (or is being replaced): the
            // op found the old one gone, as a client of a changing name may.
            ClientOutcome::Failed(ClientError::Metadata(MetadataError::NoSuchObject(_)))
                if self.churning[op.object as usize]
                    || self.churned_at[op.object as usize] >= op.started => {}
            ClientOutcome::Failed(error) => {
                self.checker.violate(format!("client c{c} op {tag} failed: {error}"));
            }
        }
        let think = self.exp_delay(THINK_MEAN_MS / 1e3);
        self.events.schedule(now + think, Event::ClientNext(c));
    }

    fn written(&mut self, tag: u64, stamp: Option<Stamp>, parts: &[(ChunkId, ByteRange, Version)]) {
        self.report.writes += 1;
        if self.spec.check_history {
            self.check_copies(parts);
            self.checker.written(tag, stamp.unwrap_or_default(), parts);
        }
    }

    /// A replacement's step ended: the next step, or the end of the replacement.
    fn churn_done(
        &mut self,
        c: u32,
        tag: u64,
        churn: Churn,
        outcome: ClientOutcome,
        stamp: Option<Stamp>,
    ) {
        let next = match (churn, outcome) {
            (Churn::Allocating { index }, ClientOutcome::Object(info)) => {
                self.chunk_groups.insert(info.object, info.chunk_groups.clone());
                let data = info.first().cloned();
                data.map(|data| Churn::Writing { index, data })
            }
            (Churn::Writing { index, data }, ClientOutcome::Written(parts)) => {
                self.written(tag, stamp, &parts);
                Some(Churn::Binding { index, data: data.object })
            }
            (Churn::Binding { index, data }, ClientOutcome::Object(_)) => {
                self.objects[index as usize] = Some(data);
                self.report.churns += 1;
                self.end_churn(index);
                None
            }
            (Churn::Creating { index }, ClientOutcome::Object(info)) => {
                self.objects[index as usize] = Some(info.object);
                self.chunk_groups.insert(info.object, info.chunk_groups);
                self.report.churns += 1;
                self.end_churn(index);
                None
            }
            // A retried delete whose first send was applied finds the name gone.
            (
                Churn::Deleting { index },
                ClientOutcome::Deleted
                | ClientOutcome::Failed(ClientError::Metadata(MetadataError::NoSuchObject(_))),
            ) => Some(Churn::Creating { index }),
            // An allocation that outlived its grace (a write slowed by faults), or a
            // disk without room: the replacement is given up; what it allocated is
            // freed by its expiry.
            (
                Churn::Writing { index, .. } | Churn::Binding { index, .. },
                ClientOutcome::Failed(
                    ClientError::NoSpace { .. }
                    | ClientError::Metadata(
                        MetadataError::NotBindable(_) | MetadataError::NoSuchObject(_),
                    ),
                ),
            ) => {
                self.end_churn(index);
                None
            }
            (churn, outcome) => {
                self.checker
                    .violate(format!("client c{c}'s replacement {churn:?} ended with {outcome:?}"));
                let (Churn::Allocating { index }
                | Churn::Writing { index, .. }
                | Churn::Binding { index, .. }
                | Churn::Deleting { index }
                | Churn::Creating { index }) = churn;
                self.end_churn(index);
                None
            }
        };
        self.clients[c as usize].churn = next;
    }

    fn end_churn(&mut self, index: u32) {
        self.churning[index as usize] = false;
        self.churned_at[index as usize] = self.now();
    }

    /// F1 and F2 (docs/space.md), as server `s` frees `objects`: no name holds them
    /// and no allocation writes them, and their end began a grace ago at least.
    fn check_frees(&mut self, s: u32, objects: &[ObjectId]) {
        let now = self.now();
        for object in objects {
            if self.mds.is_live(*object) {
                self.checker.violate(format!(
                    "F2: s{s} freed {object:?}, which a name holds or an allocation writes"
                ));
            }
            if let Some(since) = self.dying.get(object)
                && now < *since + self.config.free_grace
            {
                self.checker.violate(format!(
                    "F1: s{s} freed {object:?} {:.3}s after its end began, within the {}s \
                     grace a read begun on it has",
                    now.duration_since(*since).as_secs_f64(),
                    self.config.free_grace.as_secs_f64()
                ));
            }
        }
    }

    /// C3 as the world sees it: when a write is acknowledged, every replica of its
    /// chunk (up or crashed: a crash keeps what was durable) holds it or a newer
    /// version on every block, in as many racks as replicas.
    fn check_copies(&mut self, parts: &[(ChunkId, ByteRange, somnus_types::Version)]) {
        let lost = self.servers.iter().enumerate().filter(|(_, s)| s.lost);
        let lost: Vec<ServerId> = lost.map(|(i, _)| ServerId(i as u32)).collect();
        for (chunk, range, version) in parts {
            // A write of an object replaced meanwhile (the client had its old view):
            // its copies may be freed already, and no name holds them.
            if !self.mds.is_live(chunk.object) {
                continue;
            }
            let replicas = self.mds.replicas(self.group_of(*chunk));
            let mut racks = Vec::new();
            for replica in replicas.iter().chain(&lost) {
                let slot = &self.servers[replica.index()];
                let Some(store) = slot.store() else { continue };
                if store.holds(*chunk, *range, *version) && !racks.contains(&slot.rack) {
                    racks.push(slot.rack);
                }
            }
            // Log records count too (D2): the DVL holds them for the down replicas.
            let logs = if racks.len() < replicas.len() { &self.servers[..] } else { &[] };
            for slot in logs {
                let Some(log) = slot.log() else { continue };
                if !racks.contains(&slot.rack) && log.holds(*chunk, *range, *version) {
                    racks.push(slot.rack);
                }
            }
            if racks.len() < replicas.len() {
                self.checker.violate(format!(
                    "C3: write of {chunk:?} {range:?} at {version:?} acknowledged with copies in {} racks, not {}",
                    racks.len(),
                    replicas.len()
                ));
            }
        }
    }

    /// A counter summed over the running servers.
    fn servers_total(&self, counter: fn(&ServerCounters) -> u64) -> u64 {
        let servers = self.servers.iter().filter_map(|s| s.server.as_ref());
        servers.map(|s| counter(&s.counters())).sum()
    }

    /// Racks with a server down or cut off now (faults are kept to r - 1 of them).
    fn racks_down(&self, except: Option<u32>) -> Vec<RackId> {
        let mut racks: Vec<RackId> = self
            .servers
            .iter()
            .enumerate()
            .filter(|(i, s)| Some(*i as u32) != except && (s.server.is_none() || s.cut.is_some()))
            .filter(|(i, s)| !s.lost || !self.rebuilt_from(ServerId(*i as u32)))
            .map(|(_, s)| s.rack)
            .collect();
        racks.sort_unstable();
        racks.dedup();
        racks
    }

    /// For a lost server, whether its replicas are all rebuilt elsewhere: until then
    /// its rack counts as a fault domain down.
    fn rebuilt_from(&self, server: ServerId) -> bool {
        let declared = self.mds.server_power(server) == somnus_core::cluster::ServerPower::Removed;
        declared && self.mds.rebuilds_under_way() == 0
    }

    /// Per block of `chunk`, how many servers hold it corrupt now (running or crashed).
    fn corrupt_copies(&self, chunk: ChunkId) -> BTreeMap<u64, usize> {
        let mut copies = BTreeMap::new();
        // A lost server's copies count as lost, not corrupt.
        for slot in self.servers.iter().filter(|s| !s.lost) {
            let Some(store) = slot.store() else { continue };
            for (_, corrupt, range) in store.corrupt_ranges() {
                if corrupt == chunk {
                    for block in range.start / BLOCK_BYTES..range.end.div_ceil(BLOCK_BYTES) {
                        *copies.entry(block).or_insert(0) += 1;
                    }
                }
            }
        }
        copies
    }

    fn losses_not_rebuilt(&self) -> usize {
        let lost = self.servers.iter().enumerate().filter(|(_, s)| s.lost);
        lost.filter(|(i, _)| !self.rebuilt_from(ServerId(*i as u32))).count()
    }

    /// Whether losing server `s` leaves a block of a chunk it holds with more than
    /// r - 1 copies lost or corrupt (the victim's own corrupt copy is lost either way).
    fn loss_exceeds_faults(&self, s: usize) -> bool {
        let Some(server) = &self.servers[s].server else { return false };
        let own: Vec<(ChunkId, ByteRange)> =
            server.store().corrupt_ranges().into_iter().map(|(_, c, r)| (c, r)).collect();
        let budget = self.spec.replicas as usize - 1;
        server.store().chunk_ids().any(|chunk| {
            self.corrupt_copies(chunk).iter().any(|(block, copies)| {
                let offset = block * BLOCK_BYTES;
                let own_corrupt =
                    own.iter().any(|(c, r)| *c == chunk && r.start <= offset && offset < r.end);
                copies - usize::from(own_corrupt) + 1 + self.losses_not_rebuilt() > budget
            })
        }) || self.logged_copy_exceeds_faults(s, budget)
    }

    /// Whether `s`'s log holds a write over a block whose copies elsewhere are corrupt
    /// up to the budget already: the log's copy is one of the write's copies (with
    /// r = 2, a write logged while a replica slept is on the primary and one logger).
    fn logged_copy_exceeds_faults(&self, s: usize, budget: usize) -> bool {
        let Some(server) = &self.servers[s].server else { return false };
        let log = server.log_volume();
        let groups = (0..self.mds.group_count()).map(|g| ChunkGroupId(g as u32));
        groups.flat_map(|group| log.records(group)).any(|record| {
            let corrupt = self.corrupt_copies(record.chunk);
            let blocks = record.range.start / BLOCK_BYTES..record.range.end.div_ceil(BLOCK_BYTES);
            blocks.into_iter().any(|block| {
                corrupt.get(&block).copied().unwrap_or(0) + 1 + self.losses_not_rebuilt() > budget
            })
        })
    }

    /// A server that may fail now without more than r - 1 fault domains down.
    fn pick_victim(&mut self) -> Option<u32> {
        let s = self.rng.random_range(0..self.spec.servers);
        let slot = &self.servers[s as usize];
        if slot.server.is_none() || slot.cut.is_some() {
            return None;
        }
        self.may_go_down(s).then_some(s)
    }

    /// Whether server `s` going down leaves no more than r - 1 fault domains down.
    fn may_go_down(&self, s: u32) -> bool {
        let mut racks = self.racks_down(None);
        let rack = self.servers[s as usize].rack;
        if !racks.contains(&rack) {
            racks.push(rack);
        }
        racks.len() < self.spec.replicas as usize
    }

    /// Whether the `loss` fault drops a message now (counted).
    fn lose_message(&mut self) -> bool {
        let lost = self.rng.random_bool(self.spec.rates.loss);
        if lost {
            self.report.faults.add(FaultKind::Loss);
        }
        lost
    }

    fn crash(&mut self) {
        if self.healed {
            return;
        }
        if let Some(s) = self.pick_victim() {
            self.report.faults.add(FaultKind::Crash);
            self.crash_server(s);
            let down = VirtualDuration::from_millis(self.rng.random_range(1_000..=15_000));
            let at = self.now() + down;
            self.events.schedule(at, Event::Restart(s));
        }
        self.again(self.spec.rates.crash_every_s, Event::Crash);
    }

    /// Server `s` stops: what its disk had not finished is lost.
    fn crash_server(&mut self, s: u32) {
        self.report.crashes += 1;
        let slot = &mut self.servers[s as usize];
        if let Some(server) = slot.server.take() {
            let mut durable = server.into_durable();
            // The logger's engine loses what it had not synced and recovers from its
            // segments; its index must read back from it.
            match slot.engine.as_mut() {
                Some(engine) => engine_log::crash(engine, &mut durable.log),
                None => durable.log.crash(),
            }
            slot.down_store = Some(durable);
        }
        slot.log_ops.clear();
        slot.incarnation += 1;
        slot.disk = Disk::default();
        self.trace(|| format!("crash s{s}"));
    }

    /// The MDS stops: its soft state is gone, messages to it are lost, and it restarts
    /// a little later. Half the time its log is compacted first (as the runtime does
    /// once the log has grown), so that it restarts from a snapshot.
    fn crash_mds(&mut self) {
        if self.healed || self.mds_down {
            return;
        }
        self.report.faults.add(FaultKind::MdsCrash);
        self.stop_mds();
        let down = VirtualDuration::from_millis(self.rng.random_range(1_000..=10_000));
        let at = self.now() + down;
        self.events.schedule(at, Event::MdsRestart);
        self.again(self.spec.rates.mds_crash_every_s, Event::MdsCrash);
    }

    /// The MDS stops (a crash, or the power cut): its soft state is gone.
    fn stop_mds(&mut self) {
        self.report.mds_crashes += 1;
        self.mds_down = true;
        if self.rng.random_bool(0.5) {
            self.mds_log = self.mds.snapshot(&self.layout);
        }
        let index = self.node_index(Actor::Mds);
        self.timers[index] = None;
        self.wanted[index] = None;
        let powers: Vec<_> =
            (0..self.spec.servers).map(|s| self.mds.server_power(ServerId(s))).collect();
        self.trace(|| format!("crash mds (servers {powers:?})"));
    }

    /// The MDS restarts from its persisted commands, its clock at 0.
    fn restart_mds(&mut self) {
        if !self.mds_down || self.power_off {
            return;
        }
        let commands = self.mds_log.iter().cloned();
        self.mds = Mds::restore(self.config, &self.layout, VirtualInstant::ZERO, commands);
        self.mds.set_broken(self.spec.broken);
        self.mds_started = self.now();
        self.mds_down = false;
        let powers: Vec<_> =
            (0..self.spec.servers).map(|s| self.mds.server_power(ServerId(s))).collect();
        self.trace(|| format!("restart mds (servers {powers:?})"));
        self.drain(Actor::Mds);
    }

    /// The `lost` fault: a server crashes and never returns; the operator declares it
    /// lost a little later. Tried again a second later when no server may go down.
    fn lose(&mut self) {
        if self.healed {
            return;
        }
        let victim = self.pick_victim().filter(|s| !self.loss_exceeds_faults(*s as usize));
        let Some(s) = victim else {
            let at = self.now() + VirtualDuration::from_secs(1);
            self.events.schedule(at, Event::Lose);
            return;
        };
        self.lose_server(s);
        let at = self.now() + VirtualDuration::from_secs(2);
        self.events.schedule(at, Event::DeclareLost(s));
    }

    /// Server `s` is gone for good (it is never restarted).
    fn lose_server(&mut self, s: u32) {
        self.report.faults.add(FaultKind::Lost);
        let slot = &mut self.servers[s as usize];
        slot.lost_store = slot.server.take().map(Server::into_durable).or(slot.down_store.take());
        slot.lost = true;
        slot.incarnation += 1;
        self.trace(|| format!("lose s{s}"));
    }

    fn restart(&mut self, s: u32) {
        let now = self.now();
        let slot = &mut self.servers[s as usize];
        if self.power_off {
            // It comes back with the power.
            return;
        }
        let Some(mut durable) = slot.down_store.take() else { return };
        // A restarted server comes up on (a power cycle, if it crashed asleep).
        slot.meter.wake_packet(now);
        // A new process: a new incarnation, and its clock starts at 0.
        durable.incarnation += 1;
        slot.started = now;
        let topology = self.topology.clone();
        let (broken, zero) = (self.spec.broken, VirtualInstant::ZERO);
        slot.server = Some(Server::new(ServerId(s), self.config, topology, durable, zero, broken));
        self.trace(|| format!("restart s{s}"));
        self.drain(Actor::Server(s));
    }

    fn partition(&mut self) {
        if self.healed {
            return;
        }
        if let Some(s) = self.pick_victim() {
            self.report.faults.add(FaultKind::Partition);
            let cut = if self.rng.random_bool(0.5) { Cut::Everyone } else { Cut::MdsOnly };
            self.set_cut(s, Some(cut));
            self.trace(|| format!("partition s{s} from {cut:?}"));
            let at =
                self.now() + VirtualDuration::from_millis(self.rng.random_range(1_000..=8_000));
            self.events.schedule(at, Event::PartitionEnd(s));
        }
        self.again(self.spec.rates.partition_every_s, Event::Partition);
    }

    fn corrupt(&mut self) {
        if self.healed {
            return;
        }
        let s = self.rng.random_range(0..self.spec.servers) as usize;
        let chunks: Vec<ChunkId> = match &self.servers[s].server {
            Some(server) => server.store().chunk_ids().collect(),
            None => Vec::new(),
        };
        if !chunks.is_empty() {
            let chunk = chunks[self.rng.random_range(0..chunks.len())];
            let offset = self.rng.random_range(0..self.spec.chunk_bytes);
            // Each copy of a block that is corrupt or lost is a fault of its own: the
            // run stays within r - 1 of them, as the checker's promise assumes.
            let block = offset / BLOCK_BYTES;
            let faults = self.corrupt_copies(chunk).get(&block).copied().unwrap_or(0)
                + self.losses_not_rebuilt();
            let hit = faults < self.spec.replicas as usize - 1
                && self.servers[s]
                    .server
                    .as_mut()
                    .is_some_and(|server| server.store_mut().corrupt_block(chunk, offset));
            if hit {
                self.report.faults.add(FaultKind::Corrupt);
                self.trace(|| format!("corrupt s{s} {chunk:?} at {offset}"));
            }
        }
        self.again(self.spec.rates.corrupt_every_s, Event::Corrupt);
    }

    fn slow_disk(&mut self) {
        if self.healed {
            return;
        }
        let s = self.rng.random_range(0..self.spec.servers);
        self.servers[s as usize].slow = true;
        self.report.faults.add(FaultKind::SlowDisk);
        let at = self.now() + VirtualDuration::from_millis(self.rng.random_range(2_000..=10_000));
        self.events.schedule(at, Event::SlowEnd(s));
        self.again(self.spec.rates.slow_disk_every_s, Event::SlowDisk);
    }

    fn finish(mut self) -> SeedReport {
        // D7: every logger's log (the engine's bytes, after every crash's recovery)
        // read back what its index holds.
        for (s, slot) in self.servers.iter().enumerate() {
            for fault in slot.log().map(LogVolume::faults).unwrap_or_default() {
                self.checker.violate(format!("D7: the logger of s{s}: {fault}"));
            }
        }
        // D5: once the faults healed and the cluster is quiet, every DVL is reclaimed
        // and every logger's space is free.
        for (s, slot) in self.servers.iter().enumerate() {
            let Some(server) = slot.server.as_ref() else { continue };
            let log = server.log_volume();
            if !server.dvls_empty() || log.write_count() > 0 || log.live_bytes() > 0 {
                self.checker.violate(format!(
                    "D5: after the heal s{s} still has a DVL to reclaim ({:?}) or a logger \
                     holding {} records ({} live bytes), first {:?}",
                    server.dvl_left(),
                    log.write_count(),
                    log.live_bytes(),
                    log.held().first()
                ));
            }
        }
        // F3: once the faults healed and the cluster is quiet, every freed byte is gone.
        if self.mds.frees_queued() > 0 {
            self.checker.violate(format!(
                "F3: after the heal the free log still holds {} entries",
                self.mds.frees_queued()
            ));
        }
        if let Some((s, chunk)) = self.unfreed() {
            self.checker.violate(format!(
                "F3: after the heal s{s} still holds {chunk:?}, of an object no name holds"
            ));
        }
        let unfinished = self.clients.iter().filter(|c| c.op.is_some()).count() as u64;
        if unfinished > 0 {
            self.checker.violate(format!(
                "liveness: {unfinished} ops unfinished {}s after every fault healed",
                self.quiesce_max.as_secs_f64()
            ));
        }
        for chunk in self.checker.chunks() {
            // A replaced object's chunks are freed, not kept (F3 above).
            if !self.mds.is_live(chunk.object) {
                continue;
            }
            let group = self.group_of(chunk);
            let replicas: Vec<(String, Vec<somnus_core::cluster::Piece>)> = self
                .mds
                .view(group)
                .replicas
                .iter()
                .filter_map(|s| {
                    let server = self.servers[s.index()].server.as_ref()?;
                    Some((format!("s{}", s.0), server.store().contents(chunk)))
                })
                .collect();
            self.checker.check_final(chunk, &replicas);
        }
        let mds = self.mds.counters();
        self.report.view_changes = mds.view_changes;
        self.report.client_retries = self.clients.iter().map(|c| c.client.counters().retries).sum();
        self.report.repeats_answered = self.servers_total(|c| c.repeats_answered);
        self.report.blocks_repaired = self.servers_total(|c| c.blocks_repaired);
        self.report.writes_logged = self.servers_total(|c| c.writes_logged);
        self.report.writes_reclaimed = self.servers_total(|c| c.writes_reclaimed);
        self.report.writes_superseded = self.servers_total(|c| c.logged_writes_superseded);
        self.report.holder_wakes_asked = self.servers_total(|c| c.holder_wakes_asked);
        self.report.reads_from_loggers = self.servers_total(|c| c.reads_from_loggers);
        self.report.reads_again = self.servers_total(|c| c.reads_again);
        self.report.rebuilt_bytes = self.servers_total(|c| c.rebuilt_bytes);
        self.report.objects_freed = self.servers_total(|c| c.objects_freed);
        self.report.logged_writes_dropped = self.servers_total(|c| c.logged_writes_dropped);
        self.report.orphans_found = mds.orphans_found;
        self.report.ops_unfinished = unfinished;
        self.report.virtual_nanos = self.now().duration_since(VirtualInstant::ZERO).as_nanos();
        self.report.violations = self.checker.violations().to_vec();
        self.report.violation_count = self.checker.violation_count();
        self.report
    }

    fn group_of(&self, chunk: ChunkId) -> ChunkGroupId {
        match self.chunk_groups.get(&chunk.object) {
            Some(groups) => groups[chunk.chunk.0 as usize],
            None => unreachable!("a chunk of an object the simulation did not create"),
        }
    }
}

fn object_name(index: u32) -> String {
    format!("object-{index}")
}

/// A message in one line for the event trace.
fn brief(message: &Message) -> String {
    let text = format!("{message:?}");
    if text.len() > 1600 { format!("{}...", &text[..1600]) } else { text }
}

/// The disks of the simulated servers: the Seagate Cheetah 15K.4 of the built-in
/// profiles.
/// The simulated servers' disk (a Cheetah 15K.4, as the trace replays').
pub fn disk_mechanics() -> DiskMechanics {
    let profile = somnus_core::power::builtin_profile("seagate-cheetah-15k4-146gb");
    match profile.map(|p| p.mechanics) {
        Ok(Some(mechanics)) => mechanics,
        _ => unreachable!("the built-in Cheetah profile has mechanics"),
    }
}
