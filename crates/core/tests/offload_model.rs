//! Property test of the write off-loading volume manager against a plain model.
//!
//! Goal: whatever the interleaving of client reads and writes, I/O completions,
//! spin-ups and spin-downs, logger sleep, logger failures (with writes in flight that
//! may or may not have reached the log) and manager crashes with recovery from the
//! loggers, every read returns the latest acknowledged write of every block, and a
//! recovery at any moment would find the right data. After the faults stop, the
//! manager drains every logged block back home.
//!
//! Method: this file is the manager's shell. It keeps the home volume's bytes (one
//! value per 512-byte block), three loggers (the core's logger model plus the value of
//! each version), and a queue of the manager's actions that it executes in a random
//! order, so I/Os complete out of order as they would on real disks. The model is a
//! map from block to the latest acknowledged value. Each seed is one run; a failure
//! prints `SEED=<n>`, and `OFFLOAD_SEED=<n>` replays only that run.
//! `OFFLOAD_SEEDS=<count>` runs more seeds (default 256).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test helpers may panic.

use std::collections::{BTreeMap, BTreeSet};

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use somnus_core::Version;
use somnus_core::extent::ExtentMap;
use somnus_core::logger::Logger;
use somnus_core::offload::{
    DataSource, HomePower, IoFailure, LoggerAvailability, LoggerStatus, LoggerStatuses,
    ManagerAction, ManagerConfig, ManagerEvent, PowerPolicy, ReplyOutcome, ViewEntry,
    VolumeManager,
};
use somnus_types::{
    ByteRange, IoId, IoKind, LoggerId, Power, RequestId, VirtualDuration, VirtualInstant, VolumeId,
};

const BLOCK_BYTES: u64 = 512;
const BLOCKS: u64 = 24;
const STEPS: usize = 1_500;
const HOME: VolumeId = VolumeId(0);
/// Logger 0 lives on the home volume's disks; 1 is local, 2 remote.
const LOGGERS: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PhysicalHome {
    Active,
    SpinningDown,
    Standby,
    SpinningUp,
}

struct Statuses {
    availability: [LoggerAvailability; LOGGERS],
    free_bytes: [u64; LOGGERS],
}

impl LoggerStatuses for Statuses {
    fn status(&self, logger: LoggerId) -> LoggerStatus {
        LoggerStatus {
            availability: self.availability[logger.index()],
            queue_length: 0,
            free_bytes: self.free_bytes[logger.index()],
        }
    }
}

struct ClientRequest {
    kind: IoKind,
    range: ByteRange,
    value: u64,
    /// Values read so far, per block of the range.
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
    /// Failed loggers; a sleeping logger is only a preference of the manager's.
    failed: [bool; LOGGERS],
    asleep: [bool; LOGGERS],
    pending: Vec<ManagerAction>,
    /// I/Os that were in flight to a logger when it failed: they fail, whatever
    /// happens to the logger afterwards.
    doomed: BTreeSet<IoId>,
    /// Versions the manager has read back for reclaim.
    reclaim_reads: BTreeSet<(LoggerId, Version)>,
    requests: BTreeMap<RequestId, ClientRequest>,
    next_request: u64,
    acked: BTreeMap<u64, u64>,
    /// Values of writes lost in a manager crash, which may or may not have landed.
    maybe: BTreeMap<u64, Vec<u64>>,
    replies: u64,
    reads_checked: u64,
}

fn action_io(action: &ManagerAction) -> Option<IoId> {
    match *action {
        ManagerAction::ReadHome { io, .. }
        | ManagerAction::WriteHome { io, .. }
        | ManagerAction::ReadLog { io, .. }
        | ManagerAction::WriteLog { io, .. }
        | ManagerAction::Invalidate { io, .. } => Some(io),
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
        let capacity = rng.random_range(8..64) * BLOCK_BYTES + 4096;
        let loggers = (0..LOGGERS as u32).map(|i| Logger::new(LoggerId(i), capacity)).collect();
        let now = VirtualInstant::ZERO;
        Harness {
            rng,
            now,
            manager: VolumeManager::new(config.clone(), now, HomePower::Active),
            config,
            home: PhysicalHome::Active,
            home_data: ExtentMap::new(),
            loggers,
            log_values: vec![BTreeMap::new(); LOGGERS],
            failed: [false; LOGGERS],
            asleep: [false; LOGGERS],
            pending: Vec::new(),
            doomed: BTreeSet::new(),
            reclaim_reads: BTreeSet::new(),
            requests: BTreeMap::new(),
            next_request: 1,
            acked: BTreeMap::new(),
            maybe: BTreeMap::new(),
            replies: 0,
            reads_checked: 0,
        }
    }

    fn statuses(&self) -> Statuses {
        let mut availability = [LoggerAvailability::Awake; LOGGERS];
        for (i, slot) in availability.iter_mut().enumerate() {
            let home_logger_asleep = i == 0 && self.home != PhysicalHome::Active;
            *slot = if self.failed[i] {
                LoggerAvailability::Failed
            } else if self.asleep[i] || home_logger_asleep {
                LoggerAvailability::Asleep
            } else {
                LoggerAvailability::Awake
            };
        }
        let free_bytes = std::array::from_fn(|i| self.loggers[i].free_bytes());
        Statuses { availability, free_bytes }
    }

    fn feed(&mut self, event: ManagerEvent) {
        let statuses = self.statuses();
        self.manager.handle(self.now, event, &statuses);
        while let Some(action) = self.manager.poll_action() {
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
                other => self.pending.push(other),
            }
        }
    }

    fn complete(&mut self, io: IoId, result: Result<(), IoFailure>) {
        self.feed(ManagerEvent::IoCompleted { io, result });
    }

    fn reply(&mut self, request: RequestId, kind: IoKind, outcome: ReplyOutcome) {
        assert_ne!(outcome, ReplyOutcome::Busy, "requests_max is not reached in this test");
        let done =
            self.requests.remove(&request).unwrap_or_else(|| panic!("reply to unknown {request}"));
        assert_eq!(done.kind, kind);
        self.replies += 1;
        match kind {
            IoKind::Write => {
                for block in blocks_of(done.range) {
                    self.acked.insert(block, done.value);
                    self.maybe.remove(&block);
                }
            }
            IoKind::Read => {
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

    /// Executes one pending action chosen at random.
    fn execute_one(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let index = self.rng.random_range(0..self.pending.len());
        let action = self.pending.swap_remove(index);
        self.execute(action);
    }

    fn execute(&mut self, action: ManagerAction) {
        match action {
            ManagerAction::ReadHome { io, request, range } => {
                assert_eq!(self.home, PhysicalHome::Active, "home read while not spinning");
                let mut values = Vec::new();
                self.home_data
                    .split(range, |piece, value| values.push((piece, value.unwrap_or(0))));
                if let Some(request) = request.and_then(|r| self.requests.get_mut(&r)) {
                    for (piece, value) in values {
                        for block in blocks_of(piece) {
                            assert!(
                                request.read.insert(block, value).is_none(),
                                "block {block} read twice"
                            );
                        }
                    }
                }
                self.complete(io, Ok(()));
            }
            ManagerAction::WriteHome { io, range, source } => {
                assert_eq!(self.home, PhysicalHome::Active, "home write while not spinning");
                let value = match source {
                    DataSource::Request(request) => self.requests[&request].value,
                    DataSource::Log { logger, version } => {
                        // The manager holds the bytes it read back; the record itself
                        // may have been invalidated since, once superseded.
                        assert!(
                            self.reclaim_reads.contains(&(logger, version)),
                            "reclaim write without a read"
                        );
                        self.log_values[logger.index()][&version]
                    }
                };
                self.home_data.insert(range, value, |_, _| {});
                self.complete(io, Ok(()));
            }
            ManagerAction::WriteLog { io, request, logger, range, version } => {
                let i = logger.index();
                if self.failed[i] || self.doomed.remove(&io) {
                    return self.complete(io, Err(IoFailure::LoggerUnavailable));
                }
                if self.loggers[i].append(HOME, range, version).is_err() {
                    return self.complete(io, Err(IoFailure::LoggerFull));
                }
                self.log_values[i].insert(version, self.requests[&request].value);
                self.complete(io, Ok(()));
            }
            ManagerAction::ReadLog { io, request, logger, range, version } => {
                let i = logger.index();
                if self.failed[i] || self.doomed.remove(&io) {
                    return self.complete(io, Err(IoFailure::LoggerUnavailable));
                }
                assert!(
                    self.loggers[i].holds(HOME, range, version),
                    "O2: {logger} lost {range} of {version:?}"
                );
                let value = self.log_values[i][&version];
                if request.is_none() {
                    self.reclaim_reads.insert((logger, version));
                }
                if let Some(request) = request.and_then(|r| self.requests.get_mut(&r)) {
                    for block in blocks_of(range) {
                        assert!(
                            request.read.insert(block, value).is_none(),
                            "block {block} read twice"
                        );
                    }
                }
                self.complete(io, Ok(()));
            }
            ManagerAction::Invalidate { io, logger, range, version } => {
                let i = logger.index();
                if self.failed[i] {
                    return self.complete(io, Err(IoFailure::LoggerUnavailable));
                }
                if self.doomed.remove(&io) {
                    // The invalidation may have reached the log before the failure.
                    if self.rng.random_bool(0.5) {
                        self.loggers[i].invalidate(HOME, range, version);
                        self.check_recovery_view("after an invalidation");
                    }
                    return self.complete(io, Err(IoFailure::LoggerUnavailable));
                }
                self.loggers[i].invalidate(HOME, range, version);
                self.check_recovery_view("after an invalidation");
                self.complete(io, Ok(()));
            }
            ManagerAction::SpinDown | ManagerAction::SpinUp | ManagerAction::Reply { .. } => {
                unreachable!("handled in feed")
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
                for (piece, version) in logger.records_of(HOME) {
                    if piece.contains(range) && latest.is_none_or(|(v, _)| version > v) {
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
        // The replayer serializes overlapping requests (004 section 4.1); so does this client.
        if self.requests.values().any(|r| r.range.overlaps(range)) || self.requests.len() >= 32 {
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
                HomePower::Standby
            }
            PhysicalHome::SpinningUp => {
                self.home = PhysicalHome::Active;
                HomePower::Active
            }
            PhysicalHome::Active | PhysicalHome::Standby => return,
        };
        // The home volume's own logger follows the volume; like the simulator, the
        // harness tells the owner only of the power change, not LoggersChanged.
        self.feed(ManagerEvent::HomePowerChanged { power });
    }

    fn advance_time(&mut self, max: VirtualDuration) {
        let step = VirtualDuration::from_nanos(self.rng.random_range(0..=max.as_nanos()));
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
        self.feed(ManagerEvent::LoggersChanged);
    }

    /// A logger fails: each write in flight to it reaches the log or not, at random,
    /// and then every I/O to it fails.
    fn fail_logger(&mut self, i: usize) {
        let logger = LoggerId(i as u32);
        for action in &self.pending {
            match *action {
                ManagerAction::WriteLog { io, logger: target, request, range, version }
                    if target == logger =>
                {
                    // A write doomed by an earlier failure already landed or not.
                    let first_failure = self.doomed.insert(io);
                    if first_failure
                        && self.rng.random_bool(0.5)
                        && self.loggers[i].append(HOME, range, version).is_ok()
                    {
                        self.log_values[i].insert(version, self.requests[&request].value);
                    }
                }
                ManagerAction::ReadLog { io, logger: target, .. }
                | ManagerAction::Invalidate { io, logger: target, .. }
                    if target == logger =>
                {
                    self.doomed.insert(io);
                }
                _ => {}
            }
        }
        self.failed[i] = true;
        self.check_recovery_view("after a logger failure");
    }

    /// The manager crashes: actions in flight land or not at random, client requests
    /// in flight are lost, and a new manager recovers from the loggers.
    fn crash_manager(&mut self) {
        if self.failed.iter().any(|f| *f)
            || matches!(self.home, PhysicalHome::SpinningDown | PhysicalHome::SpinningUp)
        {
            // 004 3.2: a manager comes back once all loggers of its view are on-line.
            return;
        }
        let doomed = std::mem::take(&mut self.doomed);
        for action in std::mem::take(&mut self.pending) {
            // A doomed I/O already landed or not when its logger failed.
            if action_io(&action).is_some_and(|io| doomed.contains(&io))
                || !self.rng.random_bool(0.5)
            {
                continue;
            }
            match action {
                ManagerAction::WriteLog { logger, request, range, version, .. }
                    if self.loggers[logger.index()].append(HOME, range, version).is_ok() =>
                {
                    let value = self.requests[&request].value;
                    self.log_values[logger.index()].insert(version, value);
                }
                ManagerAction::WriteHome { range, source, .. } => {
                    let value = match source {
                        DataSource::Request(request) => self.requests[&request].value,
                        DataSource::Log { logger, version } => {
                            self.log_values[logger.index()][&version]
                        }
                    };
                    self.home_data.insert(range, value, |_, _| {});
                    self.check_recovery_view("after a home write landed in a crash");
                }
                ManagerAction::Invalidate { logger, range, version, .. } => {
                    self.loggers[logger.index()].invalidate(HOME, range, version);
                }
                _ => {}
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
                logger.records_of(HOME).map(move |(range, version)| (logger.id(), range, version))
            })
            .collect();
        let home =
            if self.home == PhysicalHome::Active { HomePower::Active } else { HomePower::Standby };
        self.manager = VolumeManager::recover(self.config.clone(), self.now, home, records);
        self.feed(ManagerEvent::TimerFired);
    }

    fn step(&mut self) {
        match self.rng.random_range(0..100) {
            0..=14 => self.client_request(IoKind::Write),
            15..=24 => self.client_request(IoKind::Read),
            25..=69 => self.execute_one(),
            70..=77 => self.finish_home_transition(),
            78..=89 => self.advance_time(VirtualDuration::from_secs(30)),
            90..=97 => self.toggle_logger(),
            _ => self.crash_manager(),
        }
    }

    /// Heals every fault, asks the manager to drain (the operator's maintenance
    /// command), then runs until all work is done and every logged block is home.
    fn drain(&mut self) {
        self.failed = [false; LOGGERS];
        self.asleep = [false; LOGGERS];
        self.feed(ManagerEvent::LoggersChanged);
        self.feed(ManagerEvent::DrainRequested);
        for round in 0..100_000 {
            if self.pending.is_empty() && self.requests.is_empty() && !self.manager.draining() {
                assert_eq!(self.manager.logged_bytes(), 0, "drain ended with data logged");
                assert_eq!(self.manager.garbage_entries(), 0, "drain ended with garbage");
                return;
            }
            match round % 4 {
                0 => self.finish_home_transition(),
                1 => self.advance_time(VirtualDuration::from_millis(200)),
                _ => self.execute_one(),
            }
        }
        eprintln!("{:#?}", self.manager);
        panic!(
            "no convergence: {} pending actions, {} requests, home {:?}, {} bytes logged, {} garbage",
            self.pending.len(),
            self.requests.len(),
            self.home,
            self.manager.logged_bytes(),
            self.manager.garbage_entries()
        );
    }
}

fn run(seed: u64) -> (u64, u64) {
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
        assert_eq!(
            logger.records_of(HOME).count(),
            0,
            "{} still holds records after draining",
            logger.id()
        );
    }
    (harness.replies, harness.reads_checked)
}

#[test]
fn reads_return_the_latest_acknowledged_write_under_faults() {
    let seeds = somnus_testkit::seeds("OFFLOAD_SEED", "OFFLOAD_SEEDS", 256);
    let (mut replies, mut reads) = (0, 0);
    for seed in seeds {
        let outcome = std::panic::catch_unwind(|| run(seed));
        match outcome {
            Ok((r, c)) => {
                replies += r;
                reads += c;
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
}
