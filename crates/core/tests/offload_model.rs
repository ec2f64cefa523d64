//! Property test of the write off-loading volume manager against a plain model.
//!
//! Goal: whatever the interleaving of client reads and writes, I/O completions and
//! logger replies delivered zero, one or two times in any order, spin-ups and
//! spin-downs, logger sleep, logger failures (with writes in flight that may or may not
//! have reached the log), logger garbage collection and manager crashes with recovery
//! from the loggers, every read returns the latest acknowledged write of every block,
//! and a recovery at any moment would find the right data. After the faults stop, the
//! manager drains every logged block back home.
//!
//! Method: this file is the manager's shell. It keeps the home volume's bytes (one
//! value per 512-byte block), three loggers (the core's log model plus the value of
//! each version), and a queue of the manager's actions that it executes in a random
//! order, each before its deadline (a request to a logger may instead be lost; a home
//! I/O, on a local device, always finishes in time: only its completion may be lost).
//! Executing an action changes the home or a log at once; its answer goes into a bag,
//! lost (the manager's deadline must act), or put in twice (the manager must drop the
//! repeat), and answers leave the bag in a random order. The model is a map
//! from block to the latest acknowledged value. Each seed is one run; a failure prints
//! `SEED=<n>`, and `OFFLOAD_SEED=<n>` replays only that run. `OFFLOAD_SEEDS=<count>`
//! runs more seeds (default 1000).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test helpers may panic.

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use somnus_core::Version;
use somnus_core::extent::ExtentMap;
use somnus_core::logger::{LogGeometry, Logger};
use somnus_core::offload::{
    DataSource, HomeIoError, LogFailure, LoggerAvailability, LoggerReply, LoggerStatus,
    ManagerAction, ManagerConfig, ManagerEvent, PowerPolicy, ReplyOutcome, SteadyPower, ViewEntry,
    VolumeManager,
};
use somnus_types::{
    ByteRange, IoKind, LoggerId, ObjectId, OwnerId, Power, RequestId, VirtualDuration,
    VirtualInstant, VolumeId,
};

const BLOCK_BYTES: u64 = 512;
const BLOCKS: u64 = 24;
const STEPS: usize = 1_500;
const HOME: VolumeId = VolumeId(0);
const OWNER: OwnerId = OwnerId(0);
const OBJECT: ObjectId = ObjectId(0);
/// Logger 0 lives on the home volume's disks; 1 is local, 2 remote.
const LOGGERS: usize = 3;
/// Of every hundred answers, this many are lost and this many delivered twice.
const LOST_PERCENT: u32 = 8;
const TWICE_PERCENT: u32 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PhysicalHome {
    Active,
    SpinningDown,
    Standby,
    SpinningUp,
}

struct ClientRequest {
    kind: IoKind,
    range: ByteRange,
    value: u64,
    /// Values read so far, per block of the range (a retried read reads again).
    read: BTreeMap<u64, u64>,
}

struct Harness {
    rng: Pcg64,
    now: VirtualInstant,
    manager: VolumeManager,
    config: ManagerConfig,
    home: PhysicalHome,
    home_data: ExtentMap<u64>,
    loggers: Vec<Logger>,
    /// The value of each version on each logger.
    log_values: Vec<BTreeMap<Version, u64>>,
    failed: [bool; LOGGERS],
    asleep: [bool; LOGGERS],
    /// Actions the manager asked for, not yet carried out, with when it asked.
    pending: Vec<(VirtualInstant, ManagerAction)>,
    /// Answers on their way back, in no order.
    bag: Vec<ManagerEvent>,
    requests: BTreeMap<RequestId, ClientRequest>,
    next_request: u64,
    acked: BTreeMap<u64, u64>,
    /// Values of writes whose fate is unknown (lost in a crash, or failed), which may or
    /// may not have landed.
    maybe: BTreeMap<u64, Vec<u64>>,
    replies: u64,
    reads_checked: u64,
    answers_lost: u64,
    answers_repeated: u64,
    /// What each reclaim read returned, by the version it asked for: a reclaim writes
    /// home the bytes it read.
    reclaim_reads: BTreeMap<(LoggerId, Version), Vec<(ByteRange, u64)>>,
    /// The liveness phase: no more faults, every answer arrives once.
    healed: bool,
    /// Numbers the statuses the loggers give.
    status_sequence: u64,
}

/// The logger a request goes to.
fn action_logger(action: &ManagerAction) -> Option<LoggerId> {
    match *action {
        ManagerAction::WriteLog { logger, .. }
        | ManagerAction::ReadLog { logger, .. }
        | ManagerAction::Invalidate { logger, .. }
        | ManagerAction::Reserve { logger, .. }
        | ManagerAction::ProbeLogger { logger, .. } => Some(logger),
        _ => None,
    }
}

fn action_io(action: &ManagerAction) -> Option<somnus_types::IoId> {
    match *action {
        ManagerAction::WriteLog { io, .. }
        | ManagerAction::ReadLog { io, .. }
        | ManagerAction::Invalidate { io, .. }
        | ManagerAction::Reserve { io, .. }
        | ManagerAction::ProbeLogger { io, .. } => Some(io),
        _ => None,
    }
}

fn blocks_of(range: ByteRange) -> impl Iterator<Item = u64> {
    (range.start / BLOCK_BYTES)..(range.end / BLOCK_BYTES)
}

impl Harness {
    fn new(seed: u64) -> Harness {
        let mut rng = Pcg64::seed_from_u64(seed);
        let limit_blocks = rng.random_range(4..40);
        let policy = PowerPolicy::Offload {
            read_idle: VirtualDuration::from_secs(60),
            write_idle: VirtualDuration::from_secs(10),
            offload_limit_bytes: limit_blocks * BLOCK_BYTES,
        };
        let view = (0..LOGGERS as u32)
            .map(|i| ViewEntry {
                logger: LoggerId(i),
                remote: i == 2,
                shares_home_disks: i == 0,
                host_idle_power: Power::ZERO,
            })
            .collect();
        let mut config = ManagerConfig::new(HOME, policy, view);
        config.requests_max = 64;
        config.logger_room_min_bytes = 2 * BLOCK_BYTES;
        let geometry = LogGeometry {
            capacity_bytes: rng.random_range(2..8) * 4096,
            segment_bytes: 4096,
            compact_live_percent_max: 50,
        };
        let loggers = (0..LOGGERS as u32).map(|i| Logger::new(LoggerId(i), geometry)).collect();
        let now = VirtualInstant::ZERO;
        let mut harness = Harness {
            rng,
            now,
            manager: VolumeManager::new(config.clone(), now, SteadyPower::Active),
            config,
            home: PhysicalHome::Active,
            home_data: ExtentMap::new(),
            loggers,
            log_values: vec![BTreeMap::new(); LOGGERS],
            failed: [false; LOGGERS],
            asleep: [false; LOGGERS],
            pending: Vec::new(),
            bag: Vec::new(),
            requests: BTreeMap::new(),
            next_request: 1,
            acked: BTreeMap::new(),
            maybe: BTreeMap::new(),
            replies: 0,
            reads_checked: 0,
            answers_lost: 0,
            answers_repeated: 0,
            reclaim_reads: BTreeMap::new(),
            healed: false,
            status_sequence: 0,
        };
        harness.report_all();
        harness
    }

    fn status(&mut self, i: usize) -> LoggerStatus {
        let home_logger_asleep = i == 0 && self.home != PhysicalHome::Active;
        let availability = if self.failed[i] {
            LoggerAvailability::Failed
        } else if self.asleep[i] || home_logger_asleep {
            LoggerAvailability::Asleep
        } else {
            LoggerAvailability::Awake
        };
        self.status_sequence += 1;
        LoggerStatus {
            availability,
            queue_length: 0,
            free_bytes: self.loggers[i].free_bytes(),
            hosting_until: VirtualInstant::ZERO,
            sequence: self.status_sequence,
        }
    }

    /// Every logger pushes its status (the harness plays their reports).
    fn report_all(&mut self) {
        for i in 0..LOGGERS {
            let status = self.status(i);
            self.feed(ManagerEvent::LoggerReported { logger: LoggerId(i as u32), status });
        }
    }

    fn feed(&mut self, event: ManagerEvent) {
        if std::env::var_os("OFFLOAD_TRACE").is_some() {
            eprintln!("{:?} <- {event:?}", self.now);
        }
        self.manager.handle(self.now, event);
        while let Some(action) = self.manager.poll_action() {
            if std::env::var_os("OFFLOAD_TRACE").is_some() {
                eprintln!("{:?} -> {action:?}", self.now);
            }
            match action {
                ManagerAction::SpinDown => {
                    assert_eq!(
                        self.home,
                        PhysicalHome::Active,
                        "spin-down of a volume not spinning"
                    );
                    self.home = PhysicalHome::SpinningDown;
                }
                ManagerAction::SpinUp => {
                    assert_eq!(
                        self.home,
                        PhysicalHome::Standby,
                        "spin-up of a volume not in standby"
                    );
                    self.home = PhysicalHome::SpinningUp;
                }
                ManagerAction::Reply { request, kind, outcome, .. } => {
                    self.reply(request, kind, outcome)
                }
                other => self.pending.push((self.now, other)),
            }
        }
    }

    fn reply(&mut self, request: RequestId, kind: IoKind, outcome: ReplyOutcome) {
        assert_ne!(outcome, ReplyOutcome::Busy, "requests_max is not reached in this test");
        let done =
            self.requests.remove(&request).unwrap_or_else(|| panic!("reply to unknown {request}"));
        assert_eq!(done.kind, kind);
        self.replies += 1;
        match (kind, outcome) {
            (IoKind::Write, ReplyOutcome::Failed) => {
                for block in blocks_of(done.range) {
                    self.maybe.entry(block).or_default().push(done.value);
                }
            }
            (IoKind::Write, _) => {
                for block in blocks_of(done.range) {
                    self.acked.insert(block, done.value);
                    self.maybe.remove(&block);
                }
            }
            (IoKind::Read, ReplyOutcome::Failed) => {}
            (IoKind::Read, _) => {
                for block in blocks_of(done.range) {
                    let got = done.read.get(&block).copied();
                    let got = got
                        .unwrap_or_else(|| panic!("read {request} never returned block {block}"));
                    self.assert_allowed(block, got, &format!("read {request}"));
                }
                self.reads_checked += 1;
            }
        }
    }

    fn assert_allowed(&self, block: u64, got: u64, what: &str) {
        let acked = self.acked.get(&block).copied().unwrap_or(0);
        let maybe = self.maybe.get(&block).map(Vec::as_slice).unwrap_or(&[]);
        let in_flight = self.requests.values().any(|r| {
            r.kind == IoKind::Write && r.value == got && blocks_of(r.range).any(|b| b == block)
        });
        assert!(
            got == acked || maybe.contains(&got) || in_flight,
            "{what}: block {block} has {got}, latest acknowledged is {acked} (lost writes {maybe:?})"
        );
    }

    /// Puts an answer in the bag: lost, once, or twice.
    fn answer(&mut self, event: ManagerEvent) {
        if self.healed {
            self.bag.push(event);
            return;
        }
        let roll = self.rng.random_range(0..100);
        if roll < LOST_PERCENT {
            self.answers_lost += 1;
            return;
        }
        self.bag.push(event);
        if roll < LOST_PERCENT + TWICE_PERCENT {
            self.answers_repeated += 1;
            self.bag.push(event);
        }
    }

    fn log_answer(
        &mut self,
        io: somnus_types::IoId,
        logger: usize,
        result: Result<(), LogFailure>,
    ) {
        let reply = LoggerReply { result, status: self.status(logger), waited_for_spin_up: false };
        self.answer(ManagerEvent::LoggerReplied { io, reply });
    }

    /// Executes one pending action chosen at random.
    fn execute_one(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let index = self.rng.random_range(0..self.pending.len());
        let (_, action) = self.pending.swap_remove(index);
        self.execute(action);
    }

    /// Carries out (or, for a logger request, may lose) every action whose deadline
    /// falls by `until`, so that nothing lands after the manager gave up on it: a late
    /// landing needs a fence the manager does not have (docs/invariants.md, known limits).
    fn resolve_due(&mut self, until: VirtualInstant) {
        let deadline = self.config.io_deadline;
        while let Some(index) = self.pending.iter().position(|(at, _)| *at + deadline <= until) {
            let (_, action) = self.pending.swap_remove(index);
            let home =
                matches!(action, ManagerAction::ReadHome { .. } | ManagerAction::WriteHome { .. });
            if home || self.healed || self.rng.random_bool(0.5) {
                self.execute(action);
            }
        }
    }

    /// Delivers one answer from the bag, chosen at random.
    fn deliver_one(&mut self) {
        if self.bag.is_empty() {
            return;
        }
        let index = self.rng.random_range(0..self.bag.len());
        let event = self.bag.swap_remove(index);
        self.feed(event);
    }

    fn read_into(&mut self, request: Option<RequestId>, pieces: Vec<(ByteRange, u64)>) {
        if let Some(request) = request.and_then(|r| self.requests.get_mut(&r)) {
            for (piece, value) in pieces {
                for block in blocks_of(piece) {
                    request.read.insert(block, value);
                }
            }
        }
    }

    fn execute(&mut self, action: ManagerAction) {
        if std::env::var_os("OFFLOAD_TRACE").is_some() {
            eprintln!("{:?} exec {action:?}", self.now);
        }
        match action {
            ManagerAction::ReadHome { io, request, range } => {
                assert_eq!(self.home, PhysicalHome::Active, "home read while not spinning");
                let mut pieces = Vec::new();
                self.home_data
                    .split(range, |piece, value| pieces.push((piece, value.unwrap_or(0))));
                self.read_into(request, pieces);
                self.answer(ManagerEvent::HomeIoCompleted { io, result: Ok(()) });
            }
            ManagerAction::WriteHome { io, range, source } => {
                assert_eq!(self.home, PhysicalHome::Active, "home write while not spinning");
                if !self.healed && self.rng.random_bool(0.03) {
                    // The device fails this write: nothing lands.
                    return self.answer(ManagerEvent::HomeIoCompleted {
                        io,
                        result: Err(HomeIoError::Device),
                    });
                }
                self.write_home(range, source);
                self.answer(ManagerEvent::HomeIoCompleted { io, result: Ok(()) });
            }
            ManagerAction::WriteLog { io, request, logger, range, version } => {
                let i = logger.index();
                if self.failed[i] {
                    return self.log_answer(io, i, Err(LogFailure::Unavailable));
                }
                let result = match self.loggers[i].append(OWNER, OBJECT, range, version) {
                    Ok(_) => {
                        self.log_values[i].insert(version, self.requests[&request].value);
                        Ok(())
                    }
                    Err(_) => Err(LogFailure::Full),
                };
                self.log_answer(io, i, result);
            }
            ManagerAction::ReadLog { io, request, logger, range, version } => {
                let i = logger.index();
                if self.failed[i] {
                    return self.log_answer(io, i, Err(LogFailure::Unavailable));
                }
                if !self.loggers[i].serves(OWNER, OBJECT, range, version) {
                    assert!(request.is_some(), "a reclaim read of a version the log lost");
                    panic!("O2: {logger} lost {range} of {version:?}");
                }
                // What the log holds there: the version asked for, or a newer write of
                // a request still in flight (a reclaim read races the owner's writes).
                let (data, _) = self.loggers[i].read(OWNER, OBJECT, range);
                let pieces: Vec<(ByteRange, u64)> =
                    data.into_iter().map(|(piece, v)| (piece, self.log_values[i][&v])).collect();
                if request.is_none() {
                    self.reclaim_reads.insert((logger, version), pieces.clone());
                }
                self.read_into(request, pieces);
                self.log_answer(io, i, Ok(()));
            }
            ManagerAction::Invalidate { io, logger, range, version } => {
                let i = logger.index();
                if self.failed[i] {
                    return self.log_answer(io, i, Err(LogFailure::Unavailable));
                }
                if version > self.loggers[i].newest_version(OWNER) {
                    // Never landed here: nothing to hide (as a node's logger answers).
                    return self.log_answer(io, i, Ok(()));
                }
                let result = self.loggers[i].invalidate(OWNER, OBJECT, range, version);
                assert!(result.is_ok(), "an invalidation the log refuses: {result:?}");
                self.check_recovery_view("after an invalidation");
                self.log_answer(io, i, Ok(()));
            }
            ManagerAction::Reserve { io, logger, bytes } => {
                let i = logger.index();
                let granted = self.status(i).availability == LoggerAvailability::Awake
                    && self.loggers[i].free_bytes() >= bytes;
                let result = if granted { Ok(()) } else { Err(LogFailure::Refused) };
                self.log_answer(io, i, result);
            }
            ManagerAction::ProbeLogger { io, logger } => {
                let i = logger.index();
                if !self.failed[i] {
                    self.log_answer(io, i, Ok(()));
                }
            }
            ManagerAction::SpinDown | ManagerAction::SpinUp | ManagerAction::Reply { .. } => {
                unreachable!("handled in feed")
            }
        }
    }

    /// Writes home what `source` holds for `range`: the request's value, or the bytes a
    /// reclaim read (piece by piece).
    fn write_home(&mut self, range: ByteRange, source: DataSource) {
        match source {
            DataSource::Request(request) => {
                let value = self.requests[&request].value;
                self.home_data.insert(range, value, |_, _| {});
            }
            DataSource::Log { logger, version } => {
                let read = self
                    .reclaim_reads
                    .get(&(logger, version))
                    .expect("reclaim write without a read");
                let pieces: Vec<(ByteRange, u64)> = read
                    .iter()
                    .filter_map(|&(piece, value)| Some((piece.intersection(range)?, value)))
                    .collect();
                let covered: u64 = pieces.iter().map(|(piece, _)| piece.size_bytes()).sum();
                assert_eq!(covered, range.size_bytes(), "a reclaim write of bytes it did not read");
                for (piece, value) in pieces {
                    self.home_data.insert(piece, value, |_, _| {});
                }
            }
        }
    }

    /// What a recovery would read for each block right now: the latest valid logged
    /// version, else the home copy. It must always be an allowed value.
    fn check_recovery_view(&self, when: &str) {
        for block in 0..BLOCKS {
            let range = ByteRange::new(block * BLOCK_BYTES, BLOCK_BYTES);
            let mut latest: Option<(Version, u64)> = None;
            for (i, logger) in self.loggers.iter().enumerate() {
                let (data, _) = logger.read(OWNER, OBJECT, range);
                for (_, version) in data {
                    if latest.is_none_or(|(v, _)| version > v) {
                        latest = Some((version, self.log_values[i][&version]));
                    }
                }
            }
            let mut home = 0;
            self.home_data.split(range, |_, value| home = value.unwrap_or(0));
            let value = latest.map_or(home, |(_, value)| value);
            self.assert_allowed(block, value, &format!("recovery view {when}"));
        }
    }

    fn client_request(&mut self, kind: IoKind) {
        let start = self.rng.random_range(0..BLOCKS);
        let size = self.rng.random_range(1..=4).min(BLOCKS - start);
        let range = ByteRange::new(start * BLOCK_BYTES, size * BLOCK_BYTES);
        // Overlapping requests are admitted in order by the manager itself (O5).
        if self.requests.len() >= 32 {
            return;
        }
        let id = RequestId(self.next_request);
        self.next_request += 1;
        let request = ClientRequest { kind, range, value: id.0, read: BTreeMap::new() };
        self.requests.insert(id, request);
        self.feed(ManagerEvent::RequestArrived { request: id, kind, range });
    }

    fn finish_home_transition(&mut self) {
        let power = match self.home {
            PhysicalHome::SpinningDown => {
                self.home = PhysicalHome::Standby;
                SteadyPower::Standby
            }
            PhysicalHome::SpinningUp => {
                self.home = PhysicalHome::Active;
                SteadyPower::Active
            }
            PhysicalHome::Active | PhysicalHome::Standby => return,
        };
        // The home volume's own logger follows the volume; like a node, the harness
        // tells the owner only of the power change, not of its own logger.
        self.feed(ManagerEvent::HomePowerChanged { power });
    }

    fn advance_time(&mut self, max: VirtualDuration) {
        let step = VirtualDuration::from_nanos(self.rng.random_range(0..=max.as_nanos()));
        self.resolve_due(self.now + step);
        self.now += step;
        if self.manager.poll_timeout().is_some_and(|t| t <= self.now) {
            self.feed(ManagerEvent::TimerFired);
        }
    }

    fn toggle_logger(&mut self) {
        let i = self.rng.random_range(0..LOGGERS);
        if self.rng.random_bool(0.5) {
            self.asleep[i] = !self.asleep[i];
        } else if self.failed[i] {
            self.failed[i] = false;
        } else {
            self.fail_logger(i);
        }
        let status = self.status(i);
        self.feed(ManagerEvent::LoggerReported { logger: LoggerId(i as u32), status });
    }

    /// A logger collects a segment of its log (when it has garbage to collect).
    fn collect_garbage(&mut self) {
        let i = self.rng.random_range(0..LOGGERS);
        if !self.failed[i] {
            let _ = self.loggers[i].compact();
            self.check_recovery_view("after a collection");
        }
    }

    /// A logger fails: each request in flight to it is cut off — a write reaches the log
    /// or not, at random — and answered "unavailable" (that answer may itself be lost
    /// or repeated); every request to it fails until it returns.
    fn fail_logger(&mut self, i: usize) {
        let logger = LoggerId(i as u32);
        let (cut, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(_, action)| action_logger(action) == Some(logger));
        self.pending = kept;
        self.failed[i] = true;
        for (_, action) in cut {
            if let ManagerAction::WriteLog { request, range, version, .. } = action
                && self.rng.random_bool(0.5)
                && self.loggers[i].append(OWNER, OBJECT, range, version).is_ok()
            {
                self.log_values[i].insert(version, self.requests[&request].value);
            }
            if let Some(io) = action_io(&action) {
                self.log_answer(io, i, Err(LogFailure::Unavailable));
            }
        }
        self.check_recovery_view("after a logger failure");
    }

    /// The manager crashes: actions in flight land or not at random, answers in flight
    /// are lost with the connections, client requests in flight are lost, and a new
    /// manager recovers from the loggers.
    fn crash_manager(&mut self) {
        if self.failed.iter().any(|f| *f)
            || matches!(self.home, PhysicalHome::SpinningDown | PhysicalHome::SpinningUp)
        {
            // 004 3.2: a manager comes back once all loggers of its view are on-line.
            return;
        }
        self.bag.clear();
        for (_, action) in std::mem::take(&mut self.pending) {
            if self.rng.random_bool(0.5) {
                self.land_in_crash(action);
            }
        }
        for request in std::mem::take(&mut self.requests).into_values() {
            if request.kind == IoKind::Write {
                for block in blocks_of(request.range) {
                    self.maybe.entry(block).or_default().push(request.value);
                }
            }
        }
        self.check_recovery_view("at a manager crash");
        let records: Vec<_> = self
            .loggers
            .iter()
            .flat_map(|logger| {
                logger
                    .extents(OWNER)
                    .into_iter()
                    .map(move |(_, range, version)| (logger.id(), range, version))
            })
            .collect();
        let home = if self.home == PhysicalHome::Active {
            SteadyPower::Active
        } else {
            SteadyPower::Standby
        };
        self.manager = VolumeManager::recover(self.config.clone(), self.now, home, records);
        self.report_all();
        self.feed(ManagerEvent::TimerFired);
    }

    /// An action in flight when the manager crashed lands (the caller chose it).
    fn land_in_crash(&mut self, action: ManagerAction) {
        match action {
            ManagerAction::WriteLog { logger, request, range, version, .. } => {
                let i = logger.index();
                if !self.failed[i] && self.loggers[i].append(OWNER, OBJECT, range, version).is_ok()
                {
                    let value = self.requests[&request].value;
                    self.log_values[i].insert(version, value);
                }
            }
            ManagerAction::WriteHome { range, source, .. } => {
                self.write_home(range, source);
                self.check_recovery_view("after a home write landed in a crash");
            }
            ManagerAction::Invalidate { logger, range, version, .. } => {
                let log = &mut self.loggers[logger.index()];
                if version <= log.newest_version(OWNER) {
                    let result = log.invalidate(OWNER, OBJECT, range, version);
                    assert!(result.is_ok(), "an invalidation the log refuses: {result:?}");
                }
            }
            _ => {}
        }
    }

    fn step(&mut self) {
        match self.rng.random_range(0..100) {
            0..=14 => self.client_request(IoKind::Write),
            15..=24 => self.client_request(IoKind::Read),
            25..=49 => self.execute_one(),
            50..=64 => self.deliver_one(),
            65..=71 => self.finish_home_transition(),
            72..=85 => self.advance_time(VirtualDuration::from_secs(30)),
            86..=93 => self.toggle_logger(),
            94..=96 => self.collect_garbage(),
            _ => self.crash_manager(),
        }
    }

    /// Heals every fault (answers are no longer lost), asks the manager to drain (the
    /// operator's maintenance command), then runs until all work is done and every
    /// logged block is home.
    fn drain(&mut self) {
        self.healed = true;
        self.failed = [false; LOGGERS];
        self.asleep = [false; LOGGERS];
        self.report_all();
        self.feed(ManagerEvent::DrainRequested);
        for round in 0..200_000 {
            let idle = self.pending.is_empty() && self.bag.is_empty() && self.requests.is_empty();
            if idle && !self.manager.draining() && self.manager.garbage_entries() == 0 {
                assert_eq!(self.manager.logged_bytes(), 0, "drain ended with data logged");
                return;
            }
            match round % 5 {
                0 => self.finish_home_transition(),
                1 => self.advance_time(VirtualDuration::from_secs(5)),
                2 => self.deliver_all(),
                _ => self.execute_all(),
            }
        }
        eprintln!("{:#?}", self.manager);
        panic!(
            "no convergence: {} pending actions, {} answers, {} requests, home {:?}, {} bytes logged, {} garbage",
            self.pending.len(),
            self.bag.len(),
            self.requests.len(),
            self.home,
            self.manager.logged_bytes(),
            self.manager.garbage_entries()
        );
    }

    /// Carries out every pending action.
    fn execute_all(&mut self) {
        while let Some((_, action)) = self.pending.pop() {
            self.execute(action);
        }
    }

    fn deliver_all(&mut self) {
        while !self.bag.is_empty() {
            self.deliver_one();
        }
    }
}

fn run(seed: u64) -> (u64, u64, u64) {
    let mut harness = Harness::new(seed);
    for _ in 0..STEPS {
        harness.step();
    }
    harness.drain();
    for block in 0..BLOCKS {
        let mut value = 0;
        harness
            .home_data
            .split(ByteRange::new(block * BLOCK_BYTES, BLOCK_BYTES), |_, v| value = v.unwrap_or(0));
        harness.assert_allowed(block, value, "home copy after draining");
    }
    for logger in &harness.loggers {
        let extents = logger.extents(OWNER);
        assert!(
            extents.is_empty(),
            "{} still holds live records after draining: {extents:?}",
            logger.id()
        );
    }
    let counters = harness.manager.counters();
    (harness.replies, harness.reads_checked, counters.deadlines_missed + counters.replies_dropped)
}

#[test]
fn reads_return_the_latest_acknowledged_write_under_faults() {
    let seeds = somnus_testkit::seeds("OFFLOAD_SEED", "OFFLOAD_SEEDS", 1000);
    let (mut replies, mut reads, mut handled) = (0, 0, 0);
    for seed in seeds {
        let outcome = std::panic::catch_unwind(|| run(seed));
        match outcome {
            Ok((r, c, h)) => {
                replies += r;
                reads += c;
                handled += h;
            }
            Err(panic) => {
                eprintln!("SEED={seed}");
                std::panic::resume_unwind(panic);
            }
        }
    }
    assert!(
        reads > 0 && replies > reads,
        "the runs did too little: {replies} replies, {reads} reads"
    );
    assert!(handled > 0, "no lost or repeated answer reached the manager's deadline or drop");
}
