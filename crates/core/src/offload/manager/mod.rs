//! The volume manager of Write Off-Loading (004 section 3.1).
//!
//! Call protocol: call [`VolumeManager::handle`] with one event, then drain
//! [`VolumeManager::poll_action`] until it returns `None`, then arm a timer for
//! [`VolumeManager::poll_timeout`] and call `handle(now, TimerFired)` when it expires.
//! Times passed to `handle` never decrease. Replies are matched to requests by their
//! `IoId`; a reply to a request no longer outstanding (late, repeated or unknown) is
//! dropped and counted, never trusted.
//!
//! Invariants (docs/invariants.md):
//! - O1: a block with any valid logged version (latest in the redirect cache, older or
//!   reclaimed ones in the garbage cache) is written only to a logger, with a newer
//!   version, so the home copy is never newer than a valid logged one and recovery
//!   (latest valid version wins) cannot resurrect stale data.
//! - O2: the latest version of a block is invalidated only after every older version
//!   (the garbage cache enforces it). An invalidation hides its version and every
//!   older one on its logger (docs/format/log.md), so it waits while a read of any of
//!   them is in flight there, and while part of its range is still mapped to an older
//!   version on that logger.
//! - O3: the home volume is put in standby only with no home I/O in flight and, under
//!   off-load, once a logger on other disks that reported itself awake granted a
//!   reservation of room for the next writes; and not while its own logger holds such
//!   a reservation for another manager (it is that manager's host until the lease ends).
//! - O4: a request is replied to exactly once, after every part of it is durable
//!   (writes) or read, or after it failed.
//! - O5: overlapping requests are served one at a time, in arrival order; a logged
//!   write's version is above every version it displaces.
//! - O6: every I/O and logger request has a deadline the manager acts on.

mod background;
mod completions;
mod requests;

use std::collections::{BTreeMap, VecDeque};

use somnus_types::{ByteRange, IoId, IoKind, LoggerId, RequestId, VirtualDuration, VirtualInstant};

use super::admission::PendingRanges;
use super::garbage::{GarbageCache, GarbageEntry};
use super::view::LoggerView;
use super::{HomePower, ManagerAction, ManagerConfig, ManagerEvent, PowerPolicy, ReplyOutcome};
use crate::Version;
use crate::extent::ExtentMap;
use crate::slab::{Key, Slab};

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
    /// Requests that failed (a home I/O failed on every attempt, or a logger lost the
    /// version a read needed).
    pub requests_failed: u64,
    /// Writes retried after a logger failed, filled up or missed a deadline.
    pub write_retries: u64,
    /// Home I/Os tried again after a failure or a missed deadline.
    pub home_io_retries: u64,
    /// Requests to loggers and home I/Os whose deadline passed unanswered.
    pub deadlines_missed: u64,
    /// Replies to requests no longer outstanding (late, repeated, unknown): dropped.
    pub replies_dropped: u64,
    /// Log reads a logger answered with "missing": an O2 violation somewhere.
    pub log_reads_missing: u64,
    /// Nanoseconds the home volume spent idle past its thresholds but spinning, for
    /// want of an awake logger on other disks to sleep on (004 3.1).
    pub sleep_blocked_ns: u64,
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
            requests_failed: self.requests_failed - earlier.requests_failed,
            write_retries: self.write_retries - earlier.write_retries,
            home_io_retries: self.home_io_retries - earlier.home_io_retries,
            deadlines_missed: self.deadlines_missed - earlier.deadlines_missed,
            replies_dropped: self.replies_dropped - earlier.replies_dropped,
            log_reads_missing: self.log_reads_missing - earlier.log_reads_missing,
            sleep_blocked_ns: self.sleep_blocked_ns - earlier.sleep_blocked_ns,
        }
    }
}

#[derive(Clone, Debug)]
struct PendingRequest {
    id: RequestId,
    kind: IoKind,
    range: ByteRange,
    parts_outstanding: u32,
    logged: bool,
    remote: bool,
    /// A spin-up lengthened its response (see `ManagerAction::Reply`).
    waited_for_spin_up: bool,
    /// Some part of it failed for good.
    failed: bool,
    /// Earlier overlapping requests still pending: it is dispatched at zero.
    waiting_on: u32,
    /// Later overlapping requests waiting for this one.
    dependents: Vec<Key>,
}

#[derive(Clone, Copy, Debug)]
enum IoPurpose {
    /// A foreground home read or write of (part of) a request.
    Home {
        request: Key,
        kind: IoKind,
        range: ByteRange,
        attempt: u32,
    },
    LogRead {
        request: Key,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
    },
    LogWrite {
        request: Key,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
    },
    ReclaimRead {
        logger: LoggerId,
        range: ByteRange,
        version: Version,
    },
    ReclaimWrite {
        logger: LoggerId,
        range: ByteRange,
        version: Version,
        attempt: u32,
    },
    Invalidate {
        entry: GarbageEntry,
    },
    Reserve {
        logger: LoggerId,
    },
    Probe {
        logger: LoggerId,
    },
}

impl IoPurpose {
    /// The logger a request goes to; `None` for home I/O.
    fn logger(self) -> Option<LoggerId> {
        match self {
            IoPurpose::Home { .. } | IoPurpose::ReclaimWrite { .. } => None,
            IoPurpose::LogRead { logger, .. }
            | IoPurpose::LogWrite { logger, .. }
            | IoPurpose::ReclaimRead { logger, .. }
            | IoPurpose::Reserve { logger }
            | IoPurpose::Probe { logger } => Some(logger),
            IoPurpose::Invalidate { entry } => Some(entry.logger),
        }
    }
}

/// An outstanding I/O or logger request and its deadline (O6).
#[derive(Clone, Copy, Debug)]
struct IoRecord {
    purpose: IoPurpose,
    deadline: VirtualInstant,
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
    /// The last read and write dispatched (the start, before the first).
    last_read: VirtualInstant,
    last_write: VirtualInstant,
    /// The last foreground dispatch or home completion: reclaim waits for quiet.
    last_foreground: VirtualInstant,
    /// The last I/O the logger on the home disks served.
    last_logger_io: VirtualInstant,
    /// Set when a spin-down found no logger to sleep on, or was refused.
    probe_again_at: Option<VirtualInstant>,
    /// A reservation is asked for: the spin-down waits for the answer.
    reservation_in_flight: bool,
    /// Since when the home volume is idle enough to sleep but has no logger to sleep on.
    sleep_blocked_since: Option<VirtualInstant>,
    /// Latest logged version of each off-loaded block, and where it is.
    redirect: ExtentMap<(LoggerId, Version)>,
    garbage: GarbageCache,
    garbage_dirty: bool,
    next_version: u64,
    requests: Slab<PendingRequest>,
    admission: PendingRanges,
    ios: Slab<IoRecord>,
    /// Outstanding I/Os by deadline. Every I/O gets the same deadline duration, so
    /// issue order is deadline order; entries of I/Os already answered are skipped.
    deadlines: VecDeque<(VirtualInstant, Key)>,
    view: LoggerView,
    waiting_for_home: VecDeque<HomeWait>,
    /// Off-load writes that found no logger.
    waiting_writes: VecDeque<Key>,
    /// Log reads whose logger had failed: (request, logger, range, version).
    waiting_log_reads: VecDeque<(Key, LoggerId, ByteRange, Version)>,
    home_ios_in_flight: u32,
    /// Foreground home I/O in flight: reclaim waits for it.
    foreground_home_in_flight: u32,
    reclaim: Option<Reclaim>,
    /// Where the next reclaim looks first: reclaim walks the redirect cache in address
    /// order, round and round, past extents it may not copy yet.
    reclaim_cursor: u64,
    /// What `poll_timeout` answers, computed when the manager's state last changed.
    timeout: Option<VirtualInstant>,
    /// Set when reclaim found nothing it may copy now (every logged extent is on a
    /// sleeping or failed logger); cleared by any change that could unblock it.
    reclaim_blocked: bool,
    invalidations_in_flight: usize,
    /// Log reads in flight (waits included) by logger, version and range: an
    /// invalidation waits for those it would hide (O2).
    log_reads_in_flight: BTreeMap<(LoggerId, Version, u64, u64), u32>,
    actions: VecDeque<ManagerAction>,
    counters: ManagerCounters,
    scratch_pieces: Vec<(ByteRange, Option<(LoggerId, Version)>)>,
    scratch_garbage: Vec<GarbageEntry>,
    scratch_blockers: Vec<u64>,
    scratch_loggers: Vec<LoggerId>,
    /// Dependents lists of finished requests, reused to spare the allocator.
    spare_dependents: Vec<Vec<Key>>,
}

impl VolumeManager {
    /// A manager with nothing off-loaded, its home volume at rest in `home`. It knows
    /// nothing of its loggers until they report (`LoggerReported`).
    pub fn new(
        config: ManagerConfig,
        now: VirtualInstant,
        home: super::SteadyPower,
    ) -> VolumeManager {
        assert!(config.requests_max > 0 && config.ios_max > 0, "bounds must be positive");
        assert!(config.probe_interval > VirtualDuration::ZERO, "probe interval must be positive");
        assert!(config.io_deadline > VirtualDuration::ZERO, "I/O deadline must be positive");
        assert!(config.home_io_attempts_max > 0, "a home I/O is tried at least once");
        if let PowerPolicy::Offload { offload_limit_bytes, .. } = config.policy {
            assert!(
                offload_limit_bytes > 0,
                "an off-load limit of 0 would never let the volume sleep"
            );
        }
        let requests = Slab::new(config.requests_max);
        let ios = Slab::new(config.ios_max);
        let view = LoggerView::new(&config.logger_view);
        let mut manager = VolumeManager {
            config,
            now,
            home: home.into(),
            spin_up_after_down: false,
            draining: false,
            last_read: now,
            last_write: now,
            last_foreground: now,
            last_logger_io: now,
            probe_again_at: None,
            reservation_in_flight: false,
            sleep_blocked_since: None,
            redirect: ExtentMap::new(),
            garbage: GarbageCache::default(),
            garbage_dirty: false,
            next_version: 1,
            requests,
            admission: PendingRanges::default(),
            ios,
            deadlines: VecDeque::new(),
            view,
            waiting_for_home: VecDeque::new(),
            waiting_writes: VecDeque::new(),
            waiting_log_reads: VecDeque::new(),
            home_ios_in_flight: 0,
            foreground_home_in_flight: 0,
            reclaim: None,
            reclaim_cursor: 0,
            timeout: None,
            reclaim_blocked: false,
            invalidations_in_flight: 0,
            log_reads_in_flight: BTreeMap::new(),
            actions: VecDeque::new(),
            counters: ManagerCounters::default(),
            scratch_pieces: Vec::new(),
            scratch_garbage: Vec::new(),
            scratch_blockers: Vec::new(),
            scratch_loggers: Vec::new(),
            spare_dependents: Vec::new(),
        };
        manager.timeout = manager.next_timeout();
        manager
    }

    /// A manager restarted after a crash, rebuilding its redirect and garbage caches
    /// from what its loggers hold (004 section 3.2): for each block the latest valid
    /// version wins; every older one is garbage.
    pub fn recover(
        config: ManagerConfig,
        now: VirtualInstant,
        home: super::SteadyPower,
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
        manager.timeout = manager.next_timeout();
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

    /// The counters, with a sleep still blocked counted up to `at`.
    pub fn counters_at(&self, at: VirtualInstant) -> ManagerCounters {
        let mut counters = self.counters;
        if let Some(since) = self.sleep_blocked_since {
            counters.sleep_blocked_ns += at.saturating_duration_since(since).as_nanos();
        }
        counters
    }

    pub fn counters(&self) -> ManagerCounters {
        self.counters_at(self.now)
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

    /// Client requests held: waiting for an overlapping one, or in service.
    pub fn requests_pending(&self) -> usize {
        self.requests.len()
    }

    /// The version `range` is mapped to, if all of it is logged under one version (for
    /// tests of O5).
    pub fn logged_version(&self, range: ByteRange) -> Option<(LoggerId, Version)> {
        let mut found: Option<(LoggerId, Version)> = None;
        let mut covered = 0;
        let mut uniform = true;
        self.redirect.for_each_overlap(range, |piece, value| {
            covered += piece.size_bytes();
            uniform &= found.is_none_or(|f| f == value);
            found = Some(value);
        });
        (uniform && covered == range.size_bytes()).then_some(found).flatten()
    }

    /// Records a logger's load and room (from `status`) for the next decision, without
    /// acting on it now: the cheap path for a shell that sees a logger's load change at
    /// every I/O. A change of availability, which can unblock work, comes as
    /// `LoggerReported` through [`VolumeManager::handle`] instead; the availability in
    /// `status` is not read here.
    pub fn observe_logger_load(&mut self, logger: LoggerId, status: super::LoggerStatus) {
        if self.view.note_load(logger, status) {
            // Hosting keeps the home volume up: the sleep deadline moved.
            self.timeout = self.next_timeout();
        }
    }

    /// Feeds one event; see the module's call protocol.
    pub fn handle(&mut self, now: VirtualInstant, event: ManagerEvent) {
        assert!(now >= self.now, "manager time went backwards: {now:?} < {:?}", self.now);
        self.now = now;
        match event {
            ManagerEvent::RequestArrived { request, kind, range } => {
                self.handle_request_arrived(request, kind, range)
            }
            ManagerEvent::HomeIoCompleted { io, result } => self.handle_home_completed(io, result),
            ManagerEvent::LoggerReplied { io, reply } => self.handle_logger_replied(io, reply),
            ManagerEvent::HomePowerChanged { power } => self.handle_home_power(power),
            ManagerEvent::LoggerReported { logger, status } => {
                self.handle_logger_reported(logger, status)
            }
            ManagerEvent::LoggerIoServed => self.last_logger_io = now,
            ManagerEvent::DrainRequested => {
                self.draining = true;
                self.reclaim_blocked = false;
                self.garbage_dirty = true;
                self.ensure_spinning();
            }
            ManagerEvent::TimerFired => {}
        }
        self.expire_deadlines(now);
        self.background(now);
        self.forget_answered_deadlines();
        self.timeout = self.next_timeout();
        self.check();
    }

    pub fn poll_action(&mut self) -> Option<ManagerAction> {
        self.actions.pop_front()
    }

    /// The next time the manager wants a `TimerFired`, always in the future. (Kept from
    /// the last event: a shell asks after every step of every manager of its node.)
    pub fn poll_timeout(&self) -> Option<VirtualInstant> {
        #[cfg(feature = "expensive-checks")]
        assert_eq!(
            self.timeout,
            self.next_timeout(),
            "volume {}: stale timeout",
            self.config.volume
        );
        self.timeout
    }

    fn next_timeout(&self) -> Option<VirtualInstant> {
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
            let hosting_until = self.view.own_hosting_until();
            consider(
                idle_deadline.max(self.probe_again_at.unwrap_or(idle_deadline)).max(hosting_until),
            );
        }
        if self.reclaim_possible() {
            consider(self.last_foreground + self.config.reclaim_after_idle);
        }
        if !self.waiting_writes.is_empty() {
            // A write may be waiting for another manager's invalidation to free log
            // space, which no event of ours reports: look again now and then.
            consider(self.now + self.config.probe_interval);
        }
        if let Some(&(at, _)) = self.deadlines.front() {
            consider(at);
        }
        if let Some(at) = self.view.next_probe_at() {
            consider(at);
        }
        deadline
    }

    /// Registers an I/O with its deadline (O6) and returns its id.
    fn new_io(&mut self, purpose: IoPurpose) -> IoId {
        let deadline = self.now + self.config.io_deadline;
        // Exceeding ios_max means a caller ignored requests_max: a configuration bug.
        let Some(key) = self.ios.insert(IoRecord { purpose, deadline }) else {
            panic!(
                "volume {}: more than {} I/Os in flight",
                self.config.volume, self.config.ios_max
            );
        };
        self.deadlines.push_back((deadline, key));
        IoId(key.0)
    }

    /// Takes back an answered I/O: a home I/O for a disk completion, a logger request
    /// for a logger's reply. `None` (the answer dropped and counted) for an answer to
    /// nothing outstanding, or of the wrong kind: input never trusted blindly.
    fn take_io(&mut self, io: IoId, from_logger: bool) -> Option<IoPurpose> {
        let matches = self
            .ios
            .get_mut(Key(io.0))
            .is_some_and(|record| record.purpose.logger().is_some() == from_logger);
        if !matches {
            self.counters.replies_dropped += 1;
            return None;
        }
        self.ios.remove(Key(io.0)).map(|record| record.purpose)
    }

    /// Acts on every I/O whose deadline has passed (O6).
    fn expire_deadlines(&mut self, now: VirtualInstant) {
        while let Some(&(at, key)) = self.deadlines.front() {
            if at > now {
                break;
            }
            self.deadlines.pop_front();
            let Some(record) = self.ios.remove(key) else { continue };
            assert_eq!(record.deadline, at, "O6: a deadline entry names another I/O");
            self.counters.deadlines_missed += 1;
            self.io_timed_out(record.purpose);
        }
    }

    /// Drops deadline entries of I/Os already answered from the front, so that
    /// `poll_timeout` names a deadline that still matters.
    fn forget_answered_deadlines(&mut self) {
        while let Some(&(_, key)) = self.deadlines.front() {
            if self.ios.get_mut(key).is_some() {
                break;
            }
            self.deadlines.pop_front();
        }
    }

    fn request_mut(&mut self, request: Key) -> &mut PendingRequest {
        let volume = self.config.volume;
        let Some(pending) = self.requests.get_mut(request) else {
            panic!("volume {volume}: unknown request slot {request:?}");
        };
        pending
    }

    fn reply_busy(&mut self, request: RequestId, kind: IoKind) {
        self.counters.requests_refused += 1;
        self.actions.push_back(ManagerAction::Reply {
            request,
            kind,
            outcome: ReplyOutcome::Busy,
            waited_for_spin_up: false,
        });
    }

    fn check(&self) {
        assert!(
            self.invalidations_in_flight <= self.config.invalidations_in_flight_max,
            "invalidations past their bound"
        );
        if self.home != HomePower::Active {
            assert_eq!(self.home_ios_in_flight, 0, "O3: home I/O in flight while not spinning");
        }
        #[cfg(feature = "expensive-checks")]
        {
            for (range, (logger, _)) in self.redirect.iter() {
                assert!(self.view.contains(logger), "redirect {range} points outside the view");
            }
            assert!(self.deadlines.len() >= self.ios.len(), "O6: an I/O without a deadline");
        }
    }
}
