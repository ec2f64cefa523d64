//! A storage server as a process: the core's `Server` driven by one task, over its
//! disk (chunk files, journal, logger on files) and its connections.
//!
//! The task waits for the first of: an inbound message, writes made durable by the
//! disk worker, the timer the core asked for, a wake, or shutdown. It hands the event
//! to the core and carries out the actions the core returns, in order:
//! - `Send` goes to the peer's queue (`net::Outbox`);
//! - `Disk` with a change goes to the disk worker, and `DiskDone` follows once the
//!   journal has synced it and its runs are written; a read of blocks the page cache
//!   holds is done at once (without waiting for the disk: `RWF_NOWAIT`), any other
//!   goes to the server's reader thread (`server/block_reader.rs`), and either comes back as
//!   `DiskRead` (or `DiskFailed` with the blocks that fail their checksum); a
//!   commit or a read of the logger's log goes to the logger's worker
//!   (`log_worker.rs`), which carries them out in order on its own thread and answers
//!   `DiskDone` (or `DiskFailed`) and `LogRead`;
//! - `Halt` stops the server with its reason;
//! - `Sleep` goes to the power task (`power::PowerDriver`), which powers the
//!   server's units down and, on its wake packet, up, and then sends `Woken`; the core
//!   answers nothing but that meanwhile.
//!
//! The core touches no file: the task never blocks on the disk.
//!
//! Bounded: no more than [`CHANGES_IN_FLIGHT_MAX`] changes (and
//! [`CHANGE_BYTES_IN_FLIGHT_MAX`] of their data) go to the disk worker, and no more
//! than [`READS_MAX`] reads to the reader thread and [`LOG_JOBS_MAX`] operations to the
//! logger's worker; the rest wait on the task, and while
//! they do the task reads no message: its inbox fills, the connections that feed it
//! stop being read, and TCP holds the peers' writers back, whose queues to this server
//! are bounded (`net/outbox.rs`). A slow disk slows its senders; it grows no memory.
//!
//! A checkpoint snapshots the store's groups, so it begins only with no change durable
//! in the journal and not yet applied by the core: while one is due, new changes are
//! held back until those in flight are done (one journal sync). The disk worker then
//! starts a new journal and finishes the checkpoint beside the writes that follow
//! (`server/disk/checkpoint.rs`); the task serves on meanwhile.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use somnus_core::cluster::server::{
    DiskError, DiskOp, Durable, Server, ServerAction, ServerCounters, ServerEvent,
};
use somnus_core::cluster::store::{BlockRun, StoreOp};
use somnus_core::cluster::{
    ChunkId, ClusterConfig, Message, Payload, Peer, ReplyBody, ServerPlaces,
};
use somnus_types::{IoId, ServerId};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::clock::Clock;
use crate::files::durable;
use crate::net::outbox::Outbox;
use crate::net::transport::Inbound;
use crate::observe::metrics;
use crate::server::block_reader::{BlockReader, READS_MAX, ReadOutcome};
use crate::server::disk::{DiskWatch, ServerDisk, ServerDiskError};
use crate::server::disk_worker;
use crate::server::disk_worker::{Job, Synced};
use crate::server::file_log::{FileLog, FileLogError};
use crate::server::log_worker::{self, LOG_JOBS_MAX, LogDone, LogJob};
use crate::server::packs::SharedPacks;

#[derive(Debug, thiserror::Error)]
pub enum ServerNodeError {
    #[error(transparent)]
    Disk(#[from] ServerDiskError),
    #[error(transparent)]
    Log(#[from] FileLogError),
    #[error(transparent)]
    Incarnation(#[from] crate::server::incarnation::IncarnationError),
}

/// How often the server publishes its status, at the least (real time): its status
/// is at most this old (publishing per event would cost the data path).
const STATUS_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// How long after a checkpoint found no room the server tries again (real time).
const CHECKPOINT_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Reads of blocks at most this long are served on the server's task when the page
/// cache holds them (`RWF_NOWAIT`: nothing waits for the disk there): a hand-off to the
/// reader thread and back cost a fifth of a page-cached 4 KiB read's throughput
/// (`bench runtime`). Longer ones go to the thread, whose copy then overlaps the task's
/// work.
const READ_AT_ONCE_BYTES: u64 = 128 << 10;

/// Replica changes sent to the disk worker and not yet reported, at most.
pub const CHANGES_IN_FLIGHT_MAX: usize = disk_worker::JOBS_MAX - 1;

/// Bytes of data of the replica changes sent to the disk worker and not yet reported,
/// at most (beyond the first change, which goes whatever its size).
pub const CHANGE_BYTES_IN_FLIGHT_MAX: u64 = 256 << 20;

/// How long without a replica change before the journals are checkpointed whatever
/// their size (real time): at rest, a server's disk holds its packs, not a second copy
/// of its recent writes in the journal.
const IDLE_CHECKPOINT: std::time::Duration = std::time::Duration::from_secs(2);

/// What the server's task publishes for status and metrics.
#[derive(Clone, Debug, Default)]
pub struct ServerStatus {
    pub power: Option<somnus_core::cluster::ServerPower>,
    /// Free bytes on its disk, last measured, and whether it counts itself full.
    pub free_bytes: Option<u64>,
    pub full: bool,
    pub leads: usize,
    pub log_live_bytes: u64,
    pub log_used_bytes: u64,
    pub counters: ServerCounters,
    /// Bytes of data its replicas hold, each block once.
    pub stored_bytes: u64,
    /// Bytes its files take on its disk (data directory), last measured.
    pub disk_bytes: Option<u64>,
    /// What its packs hold, and its journals' bytes no snapshot covers.
    pub packs: crate::server::packs::PackStats,
    pub journal_bytes: u64,
}

/// Opens server `id`'s state in `dir`: its replicas and its logger, in a new
/// incarnation.
pub fn open_durable(
    dir: &Path,
    id: ServerId,
    config: &ClusterConfig,
) -> Result<(ServerFiles, Durable), ServerNodeError> {
    let (disk, store) = ServerDisk::open(&dir.join("replicas"), config.chunk_size_bytes)?;
    let (file_log, log) = FileLog::open(
        &dir.join("logger"),
        id.0,
        config.chunk_size_bytes,
        config.logger_capacity_bytes,
    )?;
    let incarnation = crate::server::incarnation::next(dir)?;
    let files = ServerFiles { disk: Arc::new(Mutex::new(disk)), log: file_log };
    Ok((files, Durable { store, log, incarnation }))
}

/// What a server's process holds open of its disk: its replicas and its logger's log
/// (the core holds the metadata of both).
pub struct ServerFiles {
    pub disk: Arc<Mutex<ServerDisk>>,
    pub log: FileLog,
}

/// The server's inputs.
pub struct ServerInputs {
    pub inbox: mpsc::Receiver<Inbound>,
    /// The wake channel: the only input a sleeping server answers.
    pub wake: mpsc::Receiver<()>,
    pub shutdown: watch::Receiver<bool>,
    /// Where the server's free disk space is measured (its data directory).
    pub disk_dir: PathBuf,
}

/// Where the server's task sends what is not a message.
pub struct ServerOutputs {
    pub outbox: Outbox,
    pub status: watch::Sender<ServerStatus>,
    /// The power task: one `()` per `ServerAction::Sleep`.
    pub sleeps: mpsc::Sender<()>,
}

/// Runs server `id` until shutdown, or until its disk fails (the error is returned:
/// a server that cannot make writes durable stops).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    id: ServerId,
    config: ClusterConfig,
    topology: Arc<ServerPlaces>,
    files: ServerFiles,
    durable: Durable,
    clock: Clock,
    mut inputs: ServerInputs,
    outputs: ServerOutputs,
) -> Result<(), ServerDiskError> {
    let ServerOutputs { outbox, status, sleeps } = outputs;
    let heartbeat_gap_told = (clock.real_of(config.failure_timeout) / 2)
        .max(clock.real_of(config.heartbeat_interval) * 2);
    let mut server = Server::new(id, config, topology, durable, clock.now(), None);
    let disk = files.disk;
    let (watch, packs) = {
        let disk = disk.lock().map_err(|_| poisoned())?;
        (disk.watch(), disk.packs())
    };
    let (changes, mut durable_ios) = disk_worker::spawn(disk);
    let (log_jobs, mut log_done) = log_worker::spawn(files.log, id.0)
        .map_err(|error| ServerDiskError::Io(format!("starting the logger's worker: {error}")))?;
    let (reads, mut reads_done) = BlockReader::spawn(packs.clone(), id.0)
        .map_err(|error| ServerDiskError::Io(format!("starting the reader of blocks: {error}")))?;
    let mut node = ServerTask {
        watch,
        changes,
        in_flight: VecDeque::new(),
        in_flight_bytes: 0,
        reads_in_flight: 0,
        reads_waiting: VecDeque::new(),
        log_jobs,
        log_in_flight: 0,
        log_waiting: VecDeque::new(),
        checkpointing: false,
        held: VecDeque::new(),
        held_bytes: 0,
        ready: Vec::new(),
        sleeps,
        requests: BTreeMap::new(),
        checkpoint_after: None,
        told_no_room: false,
        told_no_room_checkpoint: false,
        last_change: Instant::now(),
        packs,
        reads,
        halted: None,
        id,
        last_heartbeat: None,
        heartbeat_gap_told,
    };
    node.carry_out(&mut server, &outbox);
    // A sleeping core asks for no timer: status is published on this tick as well.
    let mut status_tick = tokio::time::interval(STATUS_INTERVAL);
    loop {
        let event = tokio::select! {
            inbound = inputs.inbox.recv(), if node.takes_messages() => match inbound {
                Some(Inbound { from, message, .. }) => {
                    node.arrived(from, &message);
                    ServerEvent::MessageReceived { from, message }
                }
                None => break,
            },
            Some((io, found)) = reads_done.recv() => {
                node.reads_in_flight -= 1;
                read_event(io, found)
            }
            Some((io, done)) = log_done.recv() => {
                node.log_in_flight -= 1;
                log_event(io, done)
            }
            done = durable_ios.recv() => match done {
                Some(Ok(synced)) => {
                    node.synced(synced, &mut server, &outbox, &clock, &inputs.disk_dir, id);
                    node.after_events(&server)?;
                    continue;
                }
                Some(Err(error)) => return Err(error),
                None => return Err(ServerDiskError::Io("the disk worker stopped".into())),
            },
            () = clock.sleep_until(server.poll_timeout()) => {
                publish(&server, &status, &node.watch);
                ServerEvent::TimerFired
            }
            Some(()) = inputs.wake.recv() => ServerEvent::Woken,
            _ = status_tick.tick() => {
                // The disk's free and used space, then the status published with it;
                // an idle server's checkpoint.
                node.measure_space(&mut server, &outbox, &clock, &inputs.disk_dir);
                node.measure_used(&mut server, &clock, &inputs.disk_dir);
                publish(&server, &status, &node.watch);
                node.after_events(&server)?;
                continue;
            }
            _ = inputs.shutdown.changed() => break,
        };
        server.handle(clock.now(), event);
        node.carry_out(&mut server, &outbox);
        node.finish_ready(&mut server, &outbox, &clock);
        node.after_events(&server)?;
    }
    publish(&server, &status, &node.watch);
    Ok(())
}

/// Publishes the server's state (at each timer and status tick, and when it stops).
fn publish(server: &Server, status: &watch::Sender<ServerStatus>, disk: &DiskWatch) {
    let log = server.log_volume();
    let space = server.space();
    let _ = status.send(ServerStatus {
        power: Some(server.power()),
        free_bytes: server.free_bytes(),
        full: server.is_full(),
        leads: server.leads().len(),
        log_live_bytes: log.live_bytes(),
        log_used_bytes: log.used_bytes(),
        counters: server.counters(),
        stored_bytes: space.stored_bytes,
        disk_bytes: space.disk_bytes,
        packs: disk.packs(),
        journal_bytes: disk.journal_bytes(),
    });
}

fn poisoned() -> ServerDiskError {
    ServerDiskError::Io("the disk's lock was poisoned".into())
}

struct ServerTask {
    watch: DiskWatch,
    changes: mpsc::Sender<Job>,
    /// The bytes of data of each change sent to the disk worker and not yet reported
    /// durable, in the order sent (the worker reports them in that order), and their sum.
    in_flight: VecDeque<u64>,
    in_flight_bytes: u64,
    /// Reads sent to the reader thread and not yet answered, and those waiting to be
    /// sent (past `READS_MAX`).
    reads_in_flight: usize,
    reads_waiting: VecDeque<(IoId, ChunkId, Range<u64>)>,
    /// The logger's worker, the operations sent to it and not yet answered, and
    /// those waiting to be sent (past `LOG_JOBS_MAX`).
    log_jobs: mpsc::Sender<LogJob>,
    log_in_flight: usize,
    log_waiting: VecDeque<LogJob>,
    /// A checkpoint is under way (begun, not yet finished).
    checkpointing: bool,
    /// Changes held back while a checkpoint waits for those in flight, or for room
    /// among those in flight, and their bytes of data.
    held: VecDeque<(IoId, StoreOp, Vec<BlockRun>)>,
    held_bytes: u64,
    /// I/Os done as soon as issued, to report to the core.
    ready: Vec<ServerEvent>,
    sleeps: mpsc::Sender<()>,
    /// Client requests being served, for the latency histograms: when each arrived.
    requests: BTreeMap<(Peer, u64), (&'static str, Instant)>,
    /// A checkpoint found no room: not tried again before then.
    checkpoint_after: Option<Instant>,
    /// The log has said the disk had no room for writes, for a checkpoint (once per
    /// server run each, not per batch).
    told_no_room: bool,
    told_no_room_checkpoint: bool,
    /// When a replica change was last sent to the disk worker.
    last_change: Instant,
    /// The packs, for reads the page cache serves at once, and the reader thread for
    /// the others (they come back to the task's loop).
    packs: SharedPacks,
    reads: BlockReader,
    /// Why the core halted the server, if it did.
    halted: Option<String>,
    id: ServerId,
    /// When the last heartbeat went out (none while asleep), and the gap between two
    /// that is logged: half the failure timeout (at least two heartbeat intervals), in
    /// real time. A server held up that long comes near to looking dead to the MDS.
    last_heartbeat: Option<Instant>,
    heartbeat_gap_told: Duration,
}

/// The core's event for what a read of blocks found.
fn read_event(io: IoId, found: ReadOutcome) -> ServerEvent {
    match found {
        Ok(Ok(read)) => ServerEvent::DiskRead { io, read },
        Ok(Err(blocks)) => ServerEvent::DiskFailed { io, error: DiskError::Corrupt { blocks } },
        Err(error) => ServerEvent::DiskFailed { io, error: DiskError::Io(error.to_string()) },
    }
}

/// The core's event for how an operation of the logger's worker ended.
fn log_event(io: IoId, done: LogDone) -> ServerEvent {
    match done {
        LogDone::Committed => ServerEvent::DiskDone { io },
        LogDone::NoSpace => ServerEvent::DiskFailed { io, error: DiskError::NoSpace },
        LogDone::Read(pieces) => ServerEvent::LogRead { io, pieces },
        LogDone::Failed(why) => ServerEvent::DiskFailed { io, error: DiskError::Io(why) },
    }
}

/// Client requests tracked at once: beyond it (clients that never hear back), the
/// oldest are forgotten.
const TRACKED_REQUESTS_MAX: usize = 65_536;

impl ServerTask {
    /// Notes when a client's request arrived.
    fn arrived(&mut self, from: Peer, message: &Message) {
        let (kind, request) = match message {
            Message::ClientWrite { request, .. } => ("write", *request),
            Message::ClientRead { request, .. } => ("read", *request),
            _ => return,
        };
        if self.requests.len() >= TRACKED_REQUESTS_MAX {
            self.requests.pop_first();
        }
        self.requests.insert((from, request), (kind, Instant::now()));
    }

    /// Records the latency of a request answered by `message`.
    fn answered(&mut self, to: Peer, message: &Message) {
        let Message::ClientReply { request, body } = message else { return };
        let Some((kind, arrived)) = self.requests.remove(&(to, *request)) else { return };
        match body {
            ReplyBody::Refused(_) => metrics::request_failed(kind),
            _ => metrics::request_done(kind, arrived.elapsed().as_secs_f64()),
        }
    }

    fn carry_out(&mut self, server: &mut Server, outbox: &Outbox) {
        while let Some(action) = server.poll_action() {
            match action {
                ServerAction::Send { to, message } => {
                    self.answered(to, &message);
                    if matches!(message, Message::Heartbeat { .. }) {
                        self.heartbeat_sent();
                    }
                    outbox.send(to, message)
                }
                ServerAction::Disk { io, op, .. } => match op {
                    DiskOp::Change { change, runs } => {
                        self.held_bytes += change_bytes(&change);
                        self.held.push_back((io, change, runs));
                    }
                    DiskOp::Read { chunk, blocks } => {
                        // What the page cache holds is read at once, without waiting
                        // for the disk; anything else on the reader thread.
                        match self.packs.read_cached(chunk, blocks.clone(), READ_AT_ONCE_BYTES) {
                            Some(found) => self.ready.push(read_event(io, Ok(found))),
                            None => self.reads_waiting.push_back((io, chunk, blocks)),
                        }
                    }
                    DiskOp::LogCommit(commit) => {
                        self.log_waiting.push_back(LogJob::Commit(io, commit))
                    }
                    DiskOp::LogRead { reads } => {
                        self.log_waiting.push_back(LogJob::Read(io, reads))
                    }
                    // The engine made the copies in the commit before.
                    DiskOp::LogCopies => self.ready.push(ServerEvent::DiskDone { io }),
                },
                ServerAction::Halt { reason } => {
                    self.halted.get_or_insert(reason);
                }
                // The core answers nothing but its wake from now on.
                ServerAction::Sleep => {
                    self.last_heartbeat = None;
                    // One is pending at most: a sleeping core asks for no other.
                    let _ = self.sleeps.try_send(());
                }
            }
        }
    }

    /// Logs a heartbeat that went out long after the one before it.
    fn heartbeat_sent(&mut self) {
        let now = Instant::now();
        if let Some(gap) = self.last_heartbeat.map(|last| now - last)
            && gap > self.heartbeat_gap_told
        {
            let told = self.heartbeat_gap_told.as_secs_f64();
            eprintln!(
                "server {}: a heartbeat went out {:.2} s after the one before (more than {told:.2} s)",
                self.id.0,
                gap.as_secs_f64()
            );
        }
        self.last_heartbeat = Some(now);
    }

    /// Tells the core what a sync made of the replica changes sent to the disk worker.
    fn synced(
        &mut self,
        synced: Synced,
        server: &mut Server,
        outbox: &Outbox,
        clock: &Clock,
        disk_dir: &Path,
        id: ServerId,
    ) {
        match synced {
            // Made durable: done, like the reads, in the order they were sent; the
            // free space measured after every sync too, so the server counts itself
            // full as soon as writes take the room.
            Synced::Durable(ios) => {
                self.reported(ios.len());
                self.ready.extend(ios.into_iter().map(|io| ServerEvent::DiskDone { io }));
                self.finish_ready(server, outbox, clock);
                self.measure_space(server, outbox, clock, disk_dir);
            }
            // What of them is durable is unknown: the core halts the server.
            Synced::Failed(ios, why) => {
                self.reported(ios.len());
                for io in ios {
                    let error = DiskError::Io(why.clone());
                    server.handle(clock.now(), ServerEvent::DiskFailed { io, error });
                    self.carry_out(server, outbox);
                }
            }
            // No room: none took effect; the core forgets them (their writers send
            // them again) and counts itself full.
            Synced::NoRoom(ios, why) => {
                self.reported(ios.len());
                if !self.told_no_room {
                    eprintln!("server {}: {why}; writes wait for room", id.0);
                    self.told_no_room = true;
                }
                for io in ios {
                    let error = DiskError::NoSpace;
                    server.handle(clock.now(), ServerEvent::DiskFailed { io, error });
                    self.carry_out(server, outbox);
                }
                self.finish_ready(server, outbox, clock);
            }
            Synced::Checkpointed(took) => {
                self.checkpointing = false;
                metrics::checkpoint_done(took.as_secs_f64());
            }
            // The journals stay whole, holding every change; tried again later.
            Synced::CheckpointNoRoom(why) => {
                self.checkpointing = false;
                self.checkpoint_after = Some(Instant::now() + CHECKPOINT_RETRY);
                if !self.told_no_room_checkpoint {
                    eprintln!("server {}: {why}; the checkpoint is tried again each second", id.0);
                    self.told_no_room_checkpoint = true;
                }
            }
        }
    }

    /// Tells the core the disk's free space (a statvfs: microseconds); the core
    /// heartbeats at once if it crossed the reserve.
    fn measure_space(&mut self, server: &mut Server, outbox: &Outbox, clock: &Clock, dir: &Path) {
        if let Ok(free_bytes) = durable::free_bytes(dir) {
            server.handle(clock.now(), ServerEvent::DiskSpace { free_bytes, used_bytes: None });
            self.carry_out(server, outbox);
        }
    }

    /// Tells the core the bytes the server's files take (a walk of its directory,
    /// a few files: at the status tick only).
    fn measure_used(&mut self, server: &mut Server, clock: &Clock, dir: &Path) {
        let (Ok(free_bytes), Ok(used)) = (durable::free_bytes(dir), durable::disk_bytes(dir))
        else {
            return;
        };
        let event = ServerEvent::DiskSpace { free_bytes, used_bytes: Some(used) };
        server.handle(clock.now(), event);
    }

    /// Tells the core of the I/Os done (reads and the logger's writes are done as soon
    /// as issued; replica changes once durable), and of those their answers issue.
    fn finish_ready(&mut self, server: &mut Server, outbox: &Outbox, clock: &Clock) {
        while !self.ready.is_empty() {
            for event in std::mem::take(&mut self.ready) {
                server.handle(clock.now(), event);
                self.carry_out(server, outbox);
            }
        }
    }

    /// After the core's events: stops on an I/O error of the chunk files or of the
    /// logger; sends held changes to the worker, unless a checkpoint is due: then it
    /// waits for those in flight, sends the checkpoint, and the held changes after it.
    fn after_events(&mut self, server: &Server) -> Result<(), ServerDiskError> {
        if let Some(reason) = &self.halted {
            return Err(ServerDiskError::Io(reason.clone()));
        }
        // A logger whose write or sync failed takes nothing more (the engine stops its
        // write path) and answers nothing it could not make durable: the server stops,
        // as on a chunk file's I/O error, and its restart recovers the log.
        if let Some(fault) = server.log_volume().faults().first() {
            return Err(ServerDiskError::Io(format!("the logger failed: {fault}")));
        }
        while self.reads_in_flight < READS_MAX
            && let Some((io, chunk, blocks)) = self.reads_waiting.pop_front()
        {
            self.reads_in_flight += 1;
            self.reads.read(io, chunk, blocks).map_err(ServerDiskError::Io)?;
        }
        while self.log_in_flight < LOG_JOBS_MAX
            && let Some(job) = self.log_waiting.pop_front()
        {
            self.log_in_flight += 1;
            self.log_jobs.try_send(job).map_err(|_| {
                ServerDiskError::Io("the logger's worker stopped, or took more than counted".into())
            })?;
        }
        let due = !self.checkpointing
            && self.checkpoint_after.is_none_or(|after| Instant::now() >= after);
        let idle = self.held.is_empty()
            && self.watch.journal_bytes() > 0
            && self.last_change.elapsed() >= IDLE_CHECKPOINT;
        if (self.watch.wants_checkpoint() || idle) && due {
            if !self.in_flight.is_empty() {
                return Ok(());
            }
            // Every change made durable is applied: the groups are the journal's.
            self.send(Job::Checkpoint(server.store().groups()))?;
            self.checkpointing = true;
            self.checkpoint_after = None;
        }
        while self.in_flight.len() < CHANGES_IN_FLIGHT_MAX
            && (self.in_flight.is_empty() || self.in_flight_bytes < CHANGE_BYTES_IN_FLIGHT_MAX)
            && let Some((io, change, runs)) = self.held.pop_front()
        {
            let bytes = change_bytes(&change);
            self.held_bytes -= bytes;
            self.in_flight.push_back(bytes);
            self.in_flight_bytes += bytes;
            self.last_change = Instant::now();
            self.send(Job::Change(io, change, runs))?;
        }
        Ok(())
    }

    /// Whether the task reads messages: not while as many changes wait as may be in
    /// flight, or reads wait for room (module docs). (Changes wait for a checkpoint to
    /// begin too, for one sync: messages are read meanwhile.)
    fn takes_messages(&self) -> bool {
        self.held.len() < CHANGES_IN_FLIGHT_MAX
            && self.held_bytes < CHANGE_BYTES_IN_FLIGHT_MAX
            && self.reads_waiting.is_empty()
            && self.log_waiting.is_empty()
    }

    /// The disk worker reported the first `count` changes in flight.
    fn reported(&mut self, count: usize) {
        let reported = self.in_flight.drain(..count.min(self.in_flight.len()));
        self.in_flight_bytes -= reported.sum::<u64>();
    }

    fn send(&self, job: Job) -> Result<(), ServerDiskError> {
        self.changes.try_send(job).map_err(|error| match error {
            mpsc::error::TrySendError::Closed(_) => {
                ServerDiskError::Io("the disk worker stopped".into())
            }
            mpsc::error::TrySendError::Full(_) => ServerDiskError::Io(
                "the disk worker's queue is full (more jobs than counted)".into(),
            ),
        })
    }
}

/// Bytes of data a replica change carries.
fn change_bytes(change: &StoreOp) -> u64 {
    Payload::total_bytes(&change.payloads()) as u64
}
