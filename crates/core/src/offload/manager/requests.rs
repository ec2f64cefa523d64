//! The foreground: admitting client requests in arrival order, splitting reads between
//! the loggers and the home volume, deciding where each write goes, and replying.

use somnus_types::{ByteRange, IoKind, LoggerId, RequestId, VirtualInstant};

use super::{HomeWait, IoPurpose, PendingRequest, VolumeManager};
use crate::Version;
use crate::offload::{
    DataSource, HomePower, LoggerAvailability, ManagerAction, PowerPolicy, ReplyOutcome,
};
use crate::slab::Key;

impl VolumeManager {
    /// A request arrived: it is dispatched at once, or waits for the pending requests it
    /// overlaps (O5).
    pub(super) fn handle_request_arrived(
        &mut self,
        request: RequestId,
        kind: IoKind,
        range: ByteRange,
    ) {
        assert!(!range.is_empty(), "empty request {request}");
        let pending = PendingRequest {
            id: request,
            kind,
            range,
            parts_outstanding: 0,
            logged: false,
            remote: false,
            waited_for_spin_up: false,
            failed: false,
            waiting_on: 0,
            dependents: self.spare_dependents.pop().unwrap_or_default(),
        };
        let Some(key) = self.requests.insert(pending) else {
            self.reply_busy(request, kind);
            return;
        };
        let mut blockers = std::mem::take(&mut self.scratch_blockers);
        blockers.clear();
        self.admission.add(range, key.0, &mut blockers);
        for &earlier in &blockers {
            self.request_mut(Key(earlier)).dependents.push(key);
        }
        let waiting_on = u32::try_from(blockers.len()).unwrap_or(u32::MAX);
        self.request_mut(key).waiting_on = waiting_on;
        self.scratch_blockers = blockers;
        if waiting_on == 0 {
            self.dispatch(key);
        }
    }

    /// Serves a request whose overlapping predecessors are all done.
    fn dispatch(&mut self, key: Key) {
        let now = self.now;
        let (kind, range) = {
            let pending = self.request_mut(key);
            assert_eq!(pending.waiting_on, 0, "O5: dispatched before an overlapping request");
            (pending.kind, pending.range)
        };
        self.last_foreground = now;
        self.close_sleep_block(now);
        match kind {
            IoKind::Read => {
                self.counters.reads += 1;
                self.last_read = now;
                self.start_read(key, range);
            }
            IoKind::Write => {
                self.counters.writes += 1;
                self.last_write = now;
                self.start_write(key);
            }
        }
    }

    /// Splits a read between the loggers holding the latest versions and the home volume.
    fn start_read(&mut self, request: Key, range: ByteRange) {
        let mut pieces = std::mem::take(&mut self.scratch_pieces);
        pieces.clear();
        self.redirect.split(range, |piece, value| pieces.push((piece, value)));
        for &(piece, value) in &pieces {
            match value {
                Some((logger, version)) => self.read_log_piece(request, logger, piece, version),
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
    ) {
        let remote = self.view.is_remote(logger);
        let pending = self.request_mut(request);
        pending.parts_outstanding += 1;
        pending.logged = true;
        pending.remote |= remote;
        // Counted until the read succeeds, waits included.
        self.log_read_started(logger, range, version);
        if self.logger_availability(logger) == LoggerAvailability::Failed {
            self.waiting_log_reads.push_back((request, logger, range, version));
            return;
        }
        self.issue_log_read(request, logger, range, version);
    }

    pub(super) fn issue_log_read(
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
        self.issue_home_io(request, IoKind::Read, range, 1);
    }

    /// Issues a foreground home read or write (attempt `attempt`, from 1).
    pub(super) fn issue_home_io(
        &mut self,
        request: Key,
        kind: IoKind,
        range: ByteRange,
        attempt: u32,
    ) {
        assert_eq!(self.home, HomePower::Active, "O3: home I/O on a sleeping volume");
        let id = self.request_mut(request).id;
        if kind == IoKind::Write {
            // O1: a block with a valid logged version is never written home by a client.
            assert!(!self.is_logged(range), "O1: client write home over logged blocks {range}");
        }
        let io = self.new_io(IoPurpose::Home { request, kind, range, attempt });
        self.home_ios_in_flight += 1;
        self.foreground_home_in_flight += 1;
        self.actions.push_back(match kind {
            IoKind::Read => ManagerAction::ReadHome { io, request: Some(id), range },
            IoKind::Write => {
                ManagerAction::WriteHome { io, range, source: DataSource::Request(id) }
            }
        });
    }

    /// Decides where a write goes: home, a logger, or a wait.
    pub(super) fn start_write(&mut self, request: Key) {
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
        let needed_bytes = range.size_bytes() + self.config.log_record_header_bytes;
        match self.view.choose(needed_bytes, self.home == HomePower::Active) {
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
        let pending = self.request_mut(request);
        pending.parts_outstanding += 1;
        let range = pending.range;
        self.issue_home_io(request, IoKind::Write, range, 1);
    }

    fn issue_log_write(&mut self, request: Key, logger: LoggerId) {
        let remote = self.view.is_remote(logger);
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

    pub(super) fn retry_waiting_writes(&mut self) {
        let waiting = std::mem::take(&mut self.waiting_writes);
        for request in waiting {
            self.start_write(request);
        }
    }

    /// One part of a request is done (or failed for good): replies once all are, then
    /// lets the requests held behind it go.
    pub(super) fn part_done(&mut self, request: Key) {
        let pending = self.request_mut(request);
        assert!(pending.parts_outstanding > 0, "O4: request {} completed twice", pending.id);
        pending.parts_outstanding -= 1;
        if pending.parts_outstanding > 0 {
            return;
        }
        let Some(mut done) = self.requests.remove(request) else { unreachable!("looked up above") };
        self.admission.remove(done.range, request.0);
        self.reply(&done);
        let dependents = std::mem::take(&mut done.dependents);
        for &dependent in &dependents {
            // A request held behind one that a spin-up delayed was delayed by it too.
            let held = self.request_mut(dependent);
            held.waited_for_spin_up |= done.waited_for_spin_up;
            assert!(held.waiting_on > 0, "O5: request slot {dependent:?} released twice");
            held.waiting_on -= 1;
            if held.waiting_on == 0 {
                self.dispatch(dependent);
            }
        }
        let mut spare = dependents;
        spare.clear();
        self.spare_dependents.push(spare);
    }

    fn reply(&mut self, done: &PendingRequest) {
        let outcome = if done.failed {
            self.counters.requests_failed += 1;
            ReplyOutcome::Failed
        } else if done.logged {
            ReplyOutcome::Logged { remote: done.remote }
        } else {
            ReplyOutcome::Home
        };
        if done.kind == IoKind::Read && done.logged && !done.failed {
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

    /// Ends a stretch of sleep blocked for want of a logger (the volume got work, or
    /// went to sleep).
    pub(super) fn close_sleep_block(&mut self, now: VirtualInstant) {
        if let Some(since) = self.sleep_blocked_since.take() {
            self.counters.sleep_blocked_ns += now.saturating_duration_since(since).as_nanos();
        }
    }

    pub(super) fn logger_availability(&self, logger: LoggerId) -> LoggerAvailability {
        self.view.availability(logger, self.home == HomePower::Active)
    }

    pub(super) fn is_logged(&self, range: ByteRange) -> bool {
        self.redirect.overlaps(range) || self.garbage.overlaps(range)
    }
}
