//! The volume manager of Write Off-Loading (004 section 3.1).
//!
//! Call protocol: call [`VolumeManager::handle`] with one event, then drain
//! [`VolumeManager::poll_action`] until it returns `None`, then arm a timer for
//! [`VolumeManager::poll_timeout`] and call `handle(now, TimerFired, ..)` when it
//! expires. Times passed to `handle` never decrease.
//!
//! Invariants:
//! - O1: a block with any valid logged version (latest in the redirect cache, older or
//!   reclaimed ones in the garbage cache) is written only to a logger, with a newer
//!   version, so the home copy is never newer than a valid logged one and recovery
//!   (latest valid version wins) cannot resurrect stale data.
//! - O2: the latest version of a block is invalidated only after every older version
//!   (the garbage cache enforces it).
//! - O3: the home volume is put in standby only with no home I/O in flight and, under
//!   off-load, with an awake logger on other disks to take the next write.
//! - O4: a request is replied to exactly once, after every part of it is durable (writes)
//!   or read.

use std::collections::{BTreeMap, VecDeque};

use somnus_types::{ByteRange, IoId, IoKind, LoggerId, RequestId, VirtualInstant};

use super::garbage::{GarbageCache, GarbageEntry};
use super::{
    DataSource, HomePower, IoFailure, LoggerAvailability, LoggerHost, LoggerStatuses,
    ManagerAction, ManagerConfig, ManagerEvent, PowerPolicy, ReplyOutcome,
};
use crate::Version;
use crate::extent::ExtentMap;
use crate::logger::RECORD_HEADER_BYTES;
use crate::slab::{Key, Slab};

/// The largest extent one reclaim step copies home.
const RECLAIM_CHUNK_BYTES_MAX: u64 = 1 << 20;

/// What a manager has done, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ManagerCounters {
    pub reads: u64,
    pub writes: u64,
    /// Writes stored on a logger.
    pub writes_logged: u64,
    /// Reads that needed at least one logger.
    pub reads_logged: u64,
    /// Reads that needed a logger on another server.
    pub reads_remote: u64,
    pub bytes_logged: u64,
    pub bytes_reclaimed: u64,
    pub invalidations: u64,
    pub spin_ups_requested: u64,
    pub spin_downs_requested: u64,
    /// Requests refused because `requests_max` were held.
    pub requests_refused: u64,
    /// Writes retried after a logger failed or filled up.
    pub write_retries: u64,
}

impl ManagerCounters {
    /// What was counted between `earlier` (of the same manager) and these counters.
    pub fn since(&self, earlier: &ManagerCounters) -> ManagerCounters {
        ManagerCounters {
            reads: self.reads - earlier.reads,
            writes: self.writes - earlier.writes,
            writes_logged: self.writes_logged - earlier.writes_logged,
            reads_logged: self.reads_logged - earlier.reads_logged,
            reads_remote: self.reads_remote - earlier.reads_remote,
            bytes_logged: self.bytes_logged - earlier.bytes_logged,
            bytes_reclaimed: self.bytes_reclaimed - earlier.bytes_reclaimed,
            invalidations: self.invalidations - earlier.invalidations,
            spin_ups_requested: self.spin_ups_requested - earlier.spin_ups_requested,
            spin_downs_requested: self.spin_downs_requested - earlier.spin_downs_requested,
            requests_refused: self.requests_refused - earlier.requests_refused,
            write_retries: self.write_retries - earlier.write_retries,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct PendingRequest {
    id: RequestId,
    kind: IoKind,
    range: ByteRange,
    parts_outstanding: u32,
    logged: bool,
    remote: bool,
    /// Some part waited for the home volume to spin up.
    waited_for_spin_up: bool,
}

#[derive(Clone, Copy, Debug)]
enum IoPurpose {
    Home { request: Key },
    LogRead { request: Key, logger: LoggerId, range: ByteRange, version: Version },
    LogWrite { request: Key, logger: LoggerId, range: ByteRange, version: Version },
    ReclaimRead { logger: LoggerId, range: ByteRange, version: Version },
    ReclaimWrite { logger: LoggerId, range: ByteRange, version: Version },
    Invalidate { entry: GarbageEntry },
}

/// Work that waits for the home volume to spin.
#[derive(Clone, Copy, Debug)]
enum HomeWait {
    ReadPart { request: Key, range: ByteRange },
    Write { request: Key },
}

#[derive(Clone, Copy, Debug)]
struct Reclaim {
    /// Home writes of this step still in flight; zero while the log read is.
    writes_outstanding: u32,
}

/// The manager of one home volume.
#[derive(Debug)]
pub struct VolumeManager {
    config: ManagerConfig,
    now: VirtualInstant,
    home: HomePower,
    /// A spin-up was asked for while the volume was spinning down.
    spin_up_after_down: bool,
    /// An operator drain is under way: stay up until nothing is logged.
    draining: bool,
    /// The last read and write arrivals (the start, before the first).
    last_read: VirtualInstant,
    last_write: VirtualInstant,
    /// The last foreground arrival or home completion: reclaim waits for quiet.
    last_foreground: VirtualInstant,
    /// The last I/O the logger on the home disks served.
    last_logger_io: VirtualInstant,
    /// Set when a spin-down was blocked for want of an awake logger.
    probe_again_at: Option<VirtualInstant>,
    /// Latest logged version of each off-loaded block, and where it is.
    redirect: ExtentMap<(LoggerId, Version)>,
    garbage: GarbageCache,
    garbage_dirty: bool,
    next_version: u64,
    requests: Slab<PendingRequest>,
    ios: Slab<IoPurpose>,
    waiting_for_home: VecDeque<HomeWait>,
    /// Off-load writes that found no logger.
    waiting_writes: VecDeque<Key>,
    /// Log reads whose logger had failed: (request, logger, range, version).
    waiting_log_reads: VecDeque<(Key, LoggerId, ByteRange, Version)>,
    home_ios_in_flight: u32,
    foreground_home_in_flight: u32,
    reclaim: Option<Reclaim>,
    /// No redirect extent sits on an awake logger; cleared when that may change.
    reclaim_blocked: bool,
    invalidations_in_flight: usize,
    /// Log reads in flight per version: a version is not invalidated under a read.
    log_reads_in_flight: BTreeMap<(LoggerId, Version), u32>,
    actions: VecDeque<ManagerAction>,
    counters: ManagerCounters,
    scratch_pieces: Vec<(ByteRange, Option<(LoggerId, Version)>)>,
    scratch_garbage: Vec<GarbageEntry>,
}

impl VolumeManager {
    /// A manager with nothing off-loaded, its home volume in `home` (Active or Standby).
    pub fn new(config: ManagerConfig, now: VirtualInstant, home: HomePower) -> VolumeManager {
        assert!(matches!(home, HomePower::Active | HomePower::Standby), "start in a steady state");
        assert!(config.requests_max > 0 && config.ios_max > 0, "bounds must be positive");
        assert!(
            config.probe_interval > somnus_types::VirtualDuration::ZERO,
            "probe interval must be positive"
        );
        if let PowerPolicy::Offload { offload_limit_bytes, .. } = config.policy {
            assert!(
                offload_limit_bytes > 0,
                "an off-load limit of 0 would never let the volume sleep"
            );
        }
        let requests = Slab::new(config.requests_max);
        let ios = Slab::new(config.ios_max);
        VolumeManager {
            config,
            now,
            home,
            spin_up_after_down: false,
            draining: false,
            last_read: now,
            last_write: now,
            last_foreground: now,
            last_logger_io: now,
            probe_again_at: None,
            redirect: ExtentMap::new(),
            garbage: GarbageCache::default(),
            garbage_dirty: false,
            next_version: 1,
            requests,
            ios,
            waiting_for_home: VecDeque::new(),
            waiting_writes: VecDeque::new(),
            waiting_log_reads: VecDeque::new(),
            home_ios_in_flight: 0,
            foreground_home_in_flight: 0,
            reclaim: None,
            reclaim_blocked: false,
            invalidations_in_flight: 0,
            log_reads_in_flight: BTreeMap::new(),
            actions: VecDeque::new(),
            counters: ManagerCounters::default(),
            scratch_pieces: Vec::new(),
            scratch_garbage: Vec::new(),
        }
    }

    /// A manager restarted after a crash, rebuilding its redirect and garbage caches
    /// from what its loggers hold (004 section 3.2): for each block the latest valid
    /// version wins; every older one is garbage.
    pub fn recover(
        config: ManagerConfig,
        now: VirtualInstant,
        home: HomePower,
        records: impl IntoIterator<Item = (LoggerId, ByteRange, Version)>,
    ) -> VolumeManager {
        let mut manager = VolumeManager::new(config, now, home);
        let mut records: Vec<_> = records.into_iter().collect();
        records.sort_by_key(|(logger, range, version)| (*version, *logger, range.start));
        for (logger, range, version) in records {
            let garbage = &mut manager.garbage;
            manager.redirect.insert(
                range,
                (logger, version),
                |piece, (old_logger, old_version)| {
                    garbage.add(GarbageEntry {
                        range: piece,
                        logger: old_logger,
                        version: old_version,
                        reclaimed: false,
                    });
                },
            );
            manager.next_version = manager.next_version.max(version.0 + 1);
        }
        manager.garbage_dirty = true;
        manager
    }

    pub fn volume(&self) -> somnus_types::VolumeId {
        self.config.volume
    }

    pub fn config(&self) -> &ManagerConfig {
        &self.config
    }

    pub fn home_power(&self) -> HomePower {
        self.home
    }

    pub fn counters(&self) -> ManagerCounters {
        self.counters
    }

    /// Bytes whose latest version is on a logger.
    pub fn logged_bytes(&self) -> u64 {
        self.redirect.total_bytes()
    }

    /// Older or reclaimed logged versions still to invalidate.
    pub fn garbage_entries(&self) -> usize {
        self.garbage.len()
    }

    /// Whether an operator drain is still under way.
    pub fn draining(&self) -> bool {
        self.draining
    }

    pub fn requests_pending(&self) -> usize {
        self.requests.len()
    }

    /// Feeds one event; see the module's call protocol.
    pub fn handle(
        &mut self,
        now: VirtualInstant,
        event: ManagerEvent,
        loggers: &impl LoggerStatuses,
    ) {
        assert!(now >= self.now, "manager time went backwards: {now:?} < {:?}", self.now);
        self.now = now;
        match event {
            ManagerEvent::RequestArrived { request, kind, range } => {
                self.handle_request(now, request, kind, range, loggers);
            }
            ManagerEvent::IoCompleted { io, result } => {
                self.handle_io_completed(now, io, result, loggers)
            }
            ManagerEvent::HomePowerChanged { power } => self.handle_home_power(power, loggers),
            ManagerEvent::LoggersChanged => self.handle_loggers_changed(loggers),
            ManagerEvent::LoggerIoServed => self.last_logger_io = now,
            ManagerEvent::DrainRequested => {
                self.draining = true;
                self.reclaim_blocked = false;
                self.garbage_dirty = true;
                self.ensure_spinning();
            }
            ManagerEvent::TimerFired => {}
        }
        self.background(now, loggers);
        self.check();
    }

    pub fn poll_action(&mut self) -> Option<ManagerAction> {
        self.actions.pop_front()
    }

    /// The next time the manager wants a `TimerFired`, always in the future.
    pub fn poll_timeout(&self) -> Option<VirtualInstant> {
        let mut deadline: Option<VirtualInstant> = None;
        let mut consider = |t: VirtualInstant| {
            if t > self.now {
                deadline = Some(deadline.map_or(t, |d| d.min(t)));
            }
        };
        if self.home == HomePower::Active
            && self.home_ios_in_flight == 0
            && let Some(idle_deadline) = self.idle_deadline()
        {
            consider(idle_deadline.max(self.probe_again_at.unwrap_or(idle_deadline)));
        }
        if self.reclaim_possible() {
            consider(self.last_foreground + self.config.reclaim_after_idle);
        }
        if !self.waiting_writes.is_empty() {
            // A write may be waiting for another manager's invalidation to free log
            // space, which no event of ours reports: look again now and then.
            consider(self.now + self.config.probe_interval);
        }
        deadline
    }

    fn handle_request(
        &mut self,
        now: VirtualInstant,
        request: RequestId,
        kind: IoKind,
        range: ByteRange,
        loggers: &impl LoggerStatuses,
    ) {
        assert!(!range.is_empty(), "empty request {request}");
        self.last_foreground = now;
        let pending = PendingRequest {
            id: request,
            kind,
            range,
            parts_outstanding: 0,
            logged: false,
            remote: false,
            waited_for_spin_up: false,
        };
        let Some(key) = self.requests.insert(pending) else {
            self.counters.requests_refused += 1;
            self.actions.push_back(ManagerAction::Reply {
                request,
                kind,
                outcome: ReplyOutcome::Busy,
                waited_for_spin_up: false,
            });
            return;
        };
        match kind {
            IoKind::Read => {
                self.counters.reads += 1;
                self.last_read = now;
                self.start_read(key, range, loggers);
            }
            IoKind::Write => {
                self.counters.writes += 1;
                self.last_write = now;
                self.start_write(key, loggers);
            }
        }
    }

    /// Splits a read between the loggers holding the latest versions and the home volume.
    fn start_read(&mut self, request: Key, range: ByteRange, loggers: &impl LoggerStatuses) {
        let mut pieces = std::mem::take(&mut self.scratch_pieces);
        pieces.clear();
        self.redirect.split(range, |piece, value| pieces.push((piece, value)));
        for &(piece, value) in &pieces {
            match value {
                Some((logger, version)) => {
                    self.read_log_piece(request, logger, piece, version, loggers)
                }
                None => self.read_home_piece(request, piece),
            }
        }
        self.scratch_pieces = pieces;
    }

    fn read_log_piece(
        &mut self,
        request: Key,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
        loggers: &impl LoggerStatuses,
    ) {
        let remote = self.is_remote(logger);
        let pending = self.request_mut(request);
        pending.parts_outstanding += 1;
        pending.logged = true;
        pending.remote |= remote;
        // Counted until the read succeeds, waits included.
        self.log_read_started(logger, version);
        if loggers.status(logger).availability == LoggerAvailability::Failed {
            self.waiting_log_reads.push_back((request, logger, range, version));
            return;
        }
        self.issue_log_read(request, logger, range, version);
    }

    fn issue_log_read(
        &mut self,
        request: Key,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
    ) {
        let id = self.request_mut(request).id;
        let io = self.new_io(IoPurpose::LogRead { request, logger, range, version });
        self.actions.push_back(ManagerAction::ReadLog {
            io,
            request: Some(id),
            logger,
            range,
            version,
        });
    }

    fn read_home_piece(&mut self, request: Key, range: ByteRange) {
        self.request_mut(request).parts_outstanding += 1;
        if self.home != HomePower::Active {
            self.request_mut(request).waited_for_spin_up = true;
            self.waiting_for_home.push_back(HomeWait::ReadPart { request, range });
            self.ensure_spinning();
            return;
        }
        self.issue_home_read(request, range);
    }

    fn issue_home_read(&mut self, request: Key, range: ByteRange) {
        assert_eq!(self.home, HomePower::Active, "O3: home I/O on a sleeping volume");
        let id = self.request_mut(request).id;
        let io = self.new_io(IoPurpose::Home { request });
        self.home_ios_in_flight += 1;
        self.foreground_home_in_flight += 1;
        self.actions.push_back(ManagerAction::ReadHome { io, request: Some(id), range });
    }

    /// Decides where a write goes: home, a logger, or a wait.
    fn start_write(&mut self, request: Key, loggers: &impl LoggerStatuses) {
        let range = self.request_mut(request).range;
        let offload = matches!(self.config.policy, PowerPolicy::Offload { .. });
        if !offload {
            if self.home == HomePower::Active {
                self.issue_home_write(request);
            } else {
                self.request_mut(request).waited_for_spin_up = true;
                self.waiting_for_home.push_back(HomeWait::Write { request });
                self.ensure_spinning();
            }
            return;
        }
        // O1: a logged block's next version must be logged too.
        let must_log = self.home != HomePower::Active || self.is_logged(range);
        if !must_log {
            self.issue_home_write(request);
            return;
        }
        match self.choose_logger(range.size_bytes(), loggers) {
            Some(logger) => self.issue_log_write(request, logger),
            None => {
                // 004 3.1: with no logger available, spin the home volume up in the
                // background and retry until a logger is found or the volume spins.
                self.request_mut(request).waited_for_spin_up |= self.home != HomePower::Active;
                self.waiting_writes.push_back(request);
                self.ensure_spinning();
            }
        }
    }

    fn issue_home_write(&mut self, request: Key) {
        assert_eq!(self.home, HomePower::Active, "O3: home I/O on a sleeping volume");
        let pending = self.request_mut(request);
        pending.parts_outstanding += 1;
        let (id, range) = (pending.id, pending.range);
        let io = self.new_io(IoPurpose::Home { request });
        self.home_ios_in_flight += 1;
        self.foreground_home_in_flight += 1;
        self.actions.push_back(ManagerAction::WriteHome {
            io,
            range,
            source: DataSource::Request(id),
        });
    }

    fn issue_log_write(&mut self, request: Key, logger: LoggerId) {
        let remote = self.is_remote(logger);
        let version = Version(self.next_version);
        self.next_version += 1;
        let pending = self.request_mut(request);
        pending.parts_outstanding += 1;
        pending.logged = true;
        pending.remote = remote;
        let (id, range) = (pending.id, pending.range);
        let io = self.new_io(IoPurpose::LogWrite { request, logger, range, version });
        self.actions.push_back(ManagerAction::WriteLog { io, request: id, logger, range, version });
    }

    /// Ranks the loggers of the view (004 3.1: by power state, queue length and free
    /// space): only awake loggers with room qualify; then the shortest queue, then a
    /// local one, then the most free space, then view order.
    fn choose_logger(&self, size_bytes: u64, loggers: &impl LoggerStatuses) -> Option<LoggerId> {
        let needed_bytes = size_bytes + RECORD_HEADER_BYTES;
        let home_spins = self.home == HomePower::Active;
        type Rank = (u32, bool, std::cmp::Reverse<u64>, usize);
        let mut best: Option<(Rank, LoggerId)> = None;
        for (index, entry) in self.config.logger_view.iter().enumerate() {
            if entry.shares_home_disks && !home_spins {
                continue;
            }
            let status = loggers.status(entry.logger);
            if status.availability != LoggerAvailability::Awake || status.free_bytes < needed_bytes
            {
                continue;
            }
            let rank =
                (status.queue_length, entry.remote, std::cmp::Reverse(status.free_bytes), index);
            if best.is_none_or(|(best_rank, _)| rank < best_rank) {
                best = Some((rank, entry.logger));
            }
        }
        best.map(|(_, logger)| logger)
    }

    fn handle_io_completed(
        &mut self,
        now: VirtualInstant,
        io: IoId,
        result: Result<(), IoFailure>,
        loggers: &impl LoggerStatuses,
    ) {
        let Some(purpose) = self.ios.remove(Key(io.0)) else {
            panic!("volume {}: completion of unknown {io}", self.config.volume);
        };
        match purpose {
            IoPurpose::Home { request } => {
                assert!(result.is_ok(), "home I/O does not fail in this model");
                self.home_ios_in_flight -= 1;
                self.foreground_home_in_flight -= 1;
                self.last_foreground = now;
                self.part_done(request);
            }
            IoPurpose::LogRead { request, logger, range, version } => match result {
                Ok(()) => {
                    self.log_read_finished(logger, version);
                    self.part_done(request);
                }
                Err(_) if loggers.status(logger).availability != LoggerAvailability::Failed => {
                    // The logger failed and came back while the read was in flight.
                    self.issue_log_read(request, logger, range, version);
                }
                Err(_) => self.waiting_log_reads.push_back((request, logger, range, version)),
            },
            IoPurpose::LogWrite { request, logger, range, version } => match result {
                Ok(()) => self.log_write_done(request, logger, range, version),
                Err(failure) => {
                    self.log_write_failed(request, logger, range, version, failure, loggers)
                }
            },
            IoPurpose::ReclaimRead { logger, range, version } => {
                self.log_read_finished(logger, version);
                self.reclaim_read_done(logger, range, version, result);
            }
            IoPurpose::ReclaimWrite { logger, range, version } => {
                self.reclaim_write_done(logger, range, version)
            }
            IoPurpose::Invalidate { entry } => {
                self.invalidations_in_flight -= 1;
                self.garbage_dirty = true;
                match result {
                    Ok(()) => {
                        self.counters.invalidations += 1;
                        self.garbage.remove(entry);
                    }
                    Err(_) => self.garbage.requeue(entry),
                }
            }
        }
    }

    fn log_write_done(
        &mut self,
        request: Key,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
    ) {
        let garbage = &mut self.garbage;
        self.redirect.insert(range, (logger, version), |piece, (old_logger, old_version)| {
            garbage.add(GarbageEntry {
                range: piece,
                logger: old_logger,
                version: old_version,
                reclaimed: false,
            });
        });
        self.garbage_dirty = true;
        self.reclaim_blocked = false;
        self.counters.writes_logged += 1;
        self.counters.bytes_logged += range.size_bytes();
        self.part_done(request);
        if self.over_offload_limit() && self.home != HomePower::Active {
            self.ensure_spinning();
        }
    }

    fn log_write_failed(
        &mut self,
        request: Key,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
        failure: IoFailure,
        loggers: &impl LoggerStatuses,
    ) {
        if failure == IoFailure::LoggerUnavailable {
            // The record may have reached the log before the failure: treat it as
            // garbage so that it is invalidated when the logger returns (O1, O2).
            self.garbage.add(GarbageEntry { range, logger, version, reclaimed: false });
            self.garbage_dirty = true;
        }
        self.counters.write_retries += 1;
        self.request_mut(request).parts_outstanding -= 1;
        self.start_write(request, loggers);
    }

    fn part_done(&mut self, request: Key) {
        let pending = self.request_mut(request);
        assert!(pending.parts_outstanding > 0, "O4: request {} completed twice", pending.id);
        pending.parts_outstanding -= 1;
        if pending.parts_outstanding > 0 {
            return;
        }
        let Some(done) = self.requests.remove(request) else { unreachable!("looked up above") };
        let outcome = if done.logged {
            ReplyOutcome::Logged { remote: done.remote }
        } else {
            ReplyOutcome::Home
        };
        if done.kind == IoKind::Read && done.logged {
            self.counters.reads_logged += 1;
            self.counters.reads_remote += u64::from(done.remote);
        }
        self.actions.push_back(ManagerAction::Reply {
            request: done.id,
            kind: done.kind,
            outcome,
            waited_for_spin_up: done.waited_for_spin_up,
        });
    }

    fn handle_home_power(&mut self, power: HomePower, loggers: &impl LoggerStatuses) {
        match power {
            HomePower::Active => {
                self.home = HomePower::Active;
                self.spin_up_after_down = false;
                self.reclaim_blocked = false;
                // The logger on the home disks woke with them: garbage queued for it
                // may go now (the shell tells other managers, not this one).
                self.garbage_dirty = true;
                let waiting = std::mem::take(&mut self.waiting_for_home);
                for wait in waiting {
                    match wait {
                        HomeWait::ReadPart { request, range } => {
                            self.issue_home_read(request, range)
                        }
                        HomeWait::Write { request } => self.start_write(request, loggers),
                    }
                }
                self.retry_waiting_writes(loggers);
            }
            HomePower::Standby => {
                self.home = HomePower::Standby;
                let wanted = self.spin_up_after_down
                    || !self.waiting_for_home.is_empty()
                    || !self.waiting_writes.is_empty();
                self.spin_up_after_down = false;
                if wanted {
                    self.ensure_spinning();
                }
            }
            HomePower::SpinningDown | HomePower::SpinningUp => {
                panic!("the shell reports only finished transitions, not {power:?}");
            }
        }
    }

    fn handle_loggers_changed(&mut self, loggers: &impl LoggerStatuses) {
        self.garbage_dirty = true;
        self.reclaim_blocked = false;
        self.probe_again_at = None;
        let waiting = std::mem::take(&mut self.waiting_log_reads);
        for (request, logger, range, version) in waiting {
            if loggers.status(logger).availability == LoggerAvailability::Failed {
                self.waiting_log_reads.push_back((request, logger, range, version));
            } else {
                self.issue_log_read(request, logger, range, version);
            }
        }
        self.retry_waiting_writes(loggers);
    }

    fn retry_waiting_writes(&mut self, loggers: &impl LoggerStatuses) {
        let waiting = std::mem::take(&mut self.waiting_writes);
        for request in waiting {
            self.start_write(request, loggers);
        }
    }

    fn ensure_spinning(&mut self) {
        match self.home {
            HomePower::Standby => {
                self.home = HomePower::SpinningUp;
                self.counters.spin_ups_requested += 1;
                self.actions.push_back(ManagerAction::SpinUp);
            }
            HomePower::SpinningDown => self.spin_up_after_down = true,
            HomePower::Active | HomePower::SpinningUp => {}
        }
    }

    /// Work that runs after every event: invalidations, reclaim, spin-down.
    fn background(&mut self, now: VirtualInstant, loggers: &impl LoggerStatuses) {
        if !self.waiting_writes.is_empty() {
            // Space may have been freed or a range un-logged since they last tried.
            self.retry_waiting_writes(loggers);
        }
        if self.garbage_dirty {
            self.garbage_dirty = false;
            self.issue_invalidations(loggers);
        }
        if self.reclaim_possible() && now >= self.last_foreground + self.config.reclaim_after_idle {
            self.start_reclaim(loggers);
        }
        self.maybe_spin_down(now, loggers);
    }

    /// Sends invalidations for garbage on awake loggers; never wakes a sleeping one.
    fn issue_invalidations(&mut self, loggers: &impl LoggerStatuses) {
        if self.garbage.len() == 0 {
            return;
        }
        let mut sendable = std::mem::take(&mut self.scratch_garbage);
        sendable.clear();
        let pending_loggers: Vec<LoggerId> = self.garbage.loggers_pending().collect();
        for logger in pending_loggers {
            let room = self
                .config
                .invalidations_in_flight_max
                .saturating_sub(self.invalidations_in_flight + sendable.len());
            if room == 0 {
                break;
            }
            if loggers.status(logger).availability == LoggerAvailability::Awake {
                let reads = &self.log_reads_in_flight;
                let busy = |entry: GarbageEntry| reads.contains_key(&(entry.logger, entry.version));
                self.garbage.take_sendable(logger, room, busy, &mut sendable);
            }
        }
        for &entry in &sendable {
            self.invalidations_in_flight += 1;
            let io = self.new_io(IoPurpose::Invalidate { entry });
            self.actions.push_back(ManagerAction::Invalidate {
                io,
                logger: entry.logger,
                range: entry.range,
                version: entry.version,
            });
        }
        self.scratch_garbage = sendable;
    }

    fn reclaim_possible(&self) -> bool {
        self.home == HomePower::Active
            && self.reclaim.is_none()
            && !self.reclaim_blocked
            && !self.redirect.is_empty()
            && self.foreground_home_in_flight == 0
            && self.waiting_for_home.is_empty()
    }

    /// Copies one logged extent home (004 3.1: when the home volume is idle, the
    /// manager reclaims off-loaded blocks in the background).
    fn start_reclaim(&mut self, loggers: &impl LoggerStatuses) {
        let availability = |logger: LoggerId| loggers.status(logger).availability;
        let awake =
            self.redirect.find(|(logger, _)| availability(logger) == LoggerAvailability::Awake);
        // Background work leaves sleeping loggers alone, except to bring the logged
        // data back under the off-load limit or to finish a drain: then reading wakes
        // the logger (a bounded buffer wakes its target, DESIGN.md).
        let must_drain = self.draining || self.over_offload_limit();
        let found = awake.or_else(|| {
            must_drain
                .then(|| {
                    self.redirect
                        .find(|(logger, _)| availability(logger) == LoggerAvailability::Asleep)
                })
                .flatten()
        });
        let Some((range, (logger, version))) = found else {
            self.reclaim_blocked = true;
            return;
        };
        let end = range.end.min(range.start + RECLAIM_CHUNK_BYTES_MAX);
        let range = ByteRange::from_bounds(range.start, end);
        self.reclaim = Some(Reclaim { writes_outstanding: 0 });
        self.log_read_started(logger, version);
        let io = self.new_io(IoPurpose::ReclaimRead { logger, range, version });
        self.actions.push_back(ManagerAction::ReadLog {
            io,
            request: None,
            logger,
            range,
            version,
        });
    }

    fn reclaim_read_done(
        &mut self,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
        result: Result<(), IoFailure>,
    ) {
        assert!(
            self.reclaim.is_some_and(|r| r.writes_outstanding == 0),
            "reclaim read without a reclaim"
        );
        if result.is_err() || self.home != HomePower::Active {
            self.reclaim = None;
            return;
        }
        // Only the parts still mapped to this version go home: a newer write may have
        // replaced some while the read was in flight.
        let mut pieces = std::mem::take(&mut self.scratch_pieces);
        pieces.clear();
        self.redirect.for_each_overlap(range, |piece, value| {
            if value == (logger, version) {
                pieces.push((piece, Some(value)));
            }
        });
        let mut writes_outstanding = 0;
        for &(piece, _) in &pieces {
            let io = self.new_io(IoPurpose::ReclaimWrite { logger, range: piece, version });
            self.home_ios_in_flight += 1;
            writes_outstanding += 1;
            self.actions.push_back(ManagerAction::WriteHome {
                io,
                range: piece,
                source: DataSource::Log { logger, version },
            });
        }
        self.scratch_pieces = pieces;
        self.reclaim = (writes_outstanding > 0).then_some(Reclaim { writes_outstanding });
    }

    fn reclaim_write_done(&mut self, logger: LoggerId, range: ByteRange, version: Version) {
        self.home_ios_in_flight -= 1;
        let Some(reclaim) = &mut self.reclaim else {
            unreachable!("reclaim write without a reclaim")
        };
        reclaim.writes_outstanding -= 1;
        if reclaim.writes_outstanding == 0 {
            self.reclaim = None;
        }
        let garbage = &mut self.garbage;
        let mut reclaimed_bytes = 0;
        self.redirect.remove_where(
            range,
            |value| value == (logger, version),
            |piece, _| {
                reclaimed_bytes += piece.size_bytes();
                garbage.add(GarbageEntry { range: piece, logger, version, reclaimed: true });
            },
        );
        self.counters.bytes_reclaimed += reclaimed_bytes;
        self.garbage_dirty = true;
    }

    fn maybe_spin_down(&mut self, now: VirtualInstant, loggers: &impl LoggerStatuses) {
        if self.draining {
            // Requests in flight may still log a write.
            if !self.redirect.is_empty() || self.garbage.len() > 0 || self.requests.len() > 0 {
                return;
            }
            self.draining = false;
        }
        if self.home != HomePower::Active
            || self.home_ios_in_flight > 0
            || self.reclaim.is_some()
            || !self.waiting_for_home.is_empty()
            || !self.waiting_writes.is_empty()
        {
            return;
        }
        let Some(idle_deadline) = self.idle_deadline() else {
            return;
        };
        if now < idle_deadline || self.probe_again_at.is_some_and(|t| now < t) {
            return;
        }
        if let PowerPolicy::Offload { .. } = self.config.policy {
            // O3: never sleep without an awake logger on other disks for the next write.
            if !self.awake_logger_elsewhere(loggers) {
                self.probe_again_at = Some(now + self.config.probe_interval);
                return;
            }
            // Woken by the off-load limit: stay up while there is reclaim to do.
            if self.over_offload_limit() && !self.reclaim_blocked {
                return;
            }
        }
        self.probe_again_at = None;
        self.home = HomePower::SpinningDown;
        self.counters.spin_downs_requested += 1;
        self.actions.push_back(ManagerAction::SpinDown);
    }

    /// When the idle thresholds of the policy are met, if it ever spins down.
    fn idle_deadline(&self) -> Option<VirtualInstant> {
        match self.config.policy {
            PowerPolicy::AlwaysOn => None,
            PowerPolicy::SpinDownWhenIdle { idle } => {
                Some(self.last_read.max(self.last_write).max(self.last_foreground) + idle)
            }
            PowerPolicy::Offload { read_idle, write_idle, .. } => Some(
                (self.last_read + read_idle)
                    .max(self.last_write + write_idle)
                    .max(self.last_logger_io + write_idle),
            ),
        }
    }

    fn awake_logger_elsewhere(&self, loggers: &impl LoggerStatuses) -> bool {
        let cheapest = self.config.logger_host == LoggerHost::Cheapest;
        self.config.logger_view.iter().any(|entry| {
            let status = loggers.status(entry.logger);
            !entry.shares_home_disks
                && (!cheapest || entry.host_idle_power <= self.config.home_idle_power)
                && status.availability == LoggerAvailability::Awake
                && status.free_bytes >= self.config.logger_room_min_bytes
        })
    }

    fn log_read_started(&mut self, logger: LoggerId, version: Version) {
        *self.log_reads_in_flight.entry((logger, version)).or_insert(0) += 1;
    }

    fn log_read_finished(&mut self, logger: LoggerId, version: Version) {
        let Some(count) = self.log_reads_in_flight.get_mut(&(logger, version)) else {
            unreachable!("log read of {logger} {version:?} finished twice");
        };
        *count -= 1;
        if *count == 0 {
            self.log_reads_in_flight.remove(&(logger, version));
            // An invalidation held back by this read may go now.
            self.garbage_dirty = true;
        }
    }

    fn over_offload_limit(&self) -> bool {
        match self.config.policy {
            PowerPolicy::Offload { offload_limit_bytes, .. } => {
                self.redirect.total_bytes() >= offload_limit_bytes
            }
            PowerPolicy::AlwaysOn | PowerPolicy::SpinDownWhenIdle { .. } => false,
        }
    }

    fn is_logged(&self, range: ByteRange) -> bool {
        self.redirect.overlaps(range) || self.garbage.overlaps(range)
    }

    fn is_remote(&self, logger: LoggerId) -> bool {
        self.config
            .logger_view
            .iter()
            .find(|entry| entry.logger == logger)
            .is_some_and(|entry| entry.remote)
    }

    fn new_io(&mut self, purpose: IoPurpose) -> IoId {
        // Exceeding ios_max means a caller ignored requests_max: a configuration bug.
        let Some(key) = self.ios.insert(purpose) else {
            panic!(
                "volume {}: more than {} I/Os in flight",
                self.config.volume, self.config.ios_max
            );
        };
        IoId(key.0)
    }

    fn request_mut(&mut self, request: Key) -> &mut PendingRequest {
        let volume = self.config.volume;
        let Some(pending) = self.requests.get_mut(request) else {
            panic!("volume {volume}: unknown request slot {request:?}");
        };
        pending
    }

    fn check(&self) {
        #[cfg(feature = "expensive-checks")]
        {
            for (range, (logger, _)) in self.redirect.iter() {
                assert!(
                    self.config.logger_view.iter().any(|e| e.logger == logger),
                    "redirect {range} points outside the logger view"
                );
            }
            assert!(self.invalidations_in_flight <= self.config.invalidations_in_flight_max);
            if self.home != HomePower::Active {
                assert_eq!(self.home_ios_in_flight, 0, "O3: home I/O in flight while not spinning");
            }
        }
    }
}
