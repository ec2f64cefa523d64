//! Answers and their absence: home I/O completions, logger replies, missed deadlines
//! (O6), power changes and logger reports. Everything here comes from outside — a disk,
//! a peer — so nothing here panics on what it is told: a reply to nothing outstanding
//! is dropped and counted, a failure is retried elsewhere or reported to the client.

use somnus_types::{ByteRange, IoId, IoKind, LoggerId};

use super::{HomeWait, IoPurpose, VolumeManager};
use crate::Version;
use crate::offload::garbage::GarbageEntry;
use crate::offload::{
    HomeIoError, HomePower, LogFailure, LoggerAvailability, LoggerReply, LoggerStatus,
    ManagerAction, SteadyPower,
};
use crate::slab::Key;

impl VolumeManager {
    pub(super) fn handle_home_completed(&mut self, io: IoId, result: Result<(), HomeIoError>) {
        let Some(purpose) = self.take_io(io, false) else { return };
        match purpose {
            IoPurpose::Home { request, kind, range, attempt } => {
                self.home_ios_in_flight -= 1;
                self.foreground_home_in_flight -= 1;
                self.last_foreground = self.now;
                match result {
                    Ok(()) => self.part_done(request),
                    Err(HomeIoError::Device) => self.home_io_failed(request, kind, range, attempt),
                }
            }
            IoPurpose::ReclaimWrite { logger, range, version, attempt } => {
                self.home_ios_in_flight -= 1;
                match result {
                    Ok(()) => self.reclaim_write_done(logger, range, version),
                    Err(HomeIoError::Device) => {
                        self.reclaim_write_failed(logger, range, version, attempt)
                    }
                }
            }
            other => unreachable!("take_io returns home I/O here, not {other:?}"),
        }
    }

    pub(super) fn handle_logger_replied(&mut self, io: IoId, reply: LoggerReply) {
        let Some(purpose) = self.take_io(io, true) else { return };
        let Some(logger) = purpose.logger() else {
            unreachable!("take_io returns logger requests here, not {purpose:?}")
        };
        if self.view.report(logger, reply.status) {
            self.availability_changed();
        }
        match purpose {
            IoPurpose::LogRead { request, logger, range, version } => {
                self.request_mut(request).waited_for_spin_up |= reply.waited_for_spin_up;
                self.log_read_replied(request, logger, range, version, reply.result);
            }
            IoPurpose::LogWrite { request, logger, range, version } => {
                self.request_mut(request).waited_for_spin_up |= reply.waited_for_spin_up;
                match reply.result {
                    Ok(()) => self.log_write_done(request, logger, range, version),
                    Err(failure) => self.log_write_failed(request, logger, range, version, failure),
                }
            }
            IoPurpose::ReclaimRead { logger, range, version } => {
                self.log_read_finished(logger, range, version);
                self.reclaim_read_done(logger, range, version, reply.result.is_ok());
            }
            IoPurpose::Invalidate { entry } => self.invalidation_replied(entry, reply.result),
            IoPurpose::Reserve { .. } => self.reservation_replied(reply.result.is_ok()),
            IoPurpose::Probe { logger } => {
                self.view.probe_done(logger, self.now + self.config.probe_interval)
            }
            IoPurpose::Home { .. } | IoPurpose::ReclaimWrite { .. } => {
                unreachable!("matched above")
            }
        }
    }

    /// An I/O missed its deadline: a home I/O is tried again; a logger is marked
    /// unreachable and the work goes elsewhere or waits for it (O6).
    pub(super) fn io_timed_out(&mut self, purpose: IoPurpose) {
        let probe_at = self.now + self.config.probe_interval;
        if let Some(logger) = purpose.logger() {
            self.view.mark_unreachable(logger, probe_at);
            self.availability_changed();
        }
        let unavailable = Err(LogFailure::Unavailable);
        match purpose {
            IoPurpose::Home { request, kind, range, attempt } => {
                self.home_ios_in_flight -= 1;
                self.foreground_home_in_flight -= 1;
                self.home_io_failed(request, kind, range, attempt);
            }
            IoPurpose::ReclaimWrite { logger, range, version, attempt } => {
                self.home_ios_in_flight -= 1;
                self.reclaim_write_failed(logger, range, version, attempt);
            }
            IoPurpose::LogRead { request, logger, range, version } => {
                self.log_read_replied(request, logger, range, version, unavailable)
            }
            IoPurpose::LogWrite { request, logger, range, version } => {
                self.log_write_failed(request, logger, range, version, LogFailure::Unavailable)
            }
            IoPurpose::ReclaimRead { logger, version, range } => {
                self.log_read_finished(logger, range, version);
                self.reclaim_read_done(logger, range, version, false);
            }
            IoPurpose::Invalidate { entry } => self.invalidation_replied(entry, unavailable),
            IoPurpose::Reserve { .. } => self.reservation_replied(false),
            IoPurpose::Probe { logger } => self.view.probe_done(logger, probe_at),
        }
    }

    /// A foreground home I/O failed (or missed its deadline): try again up to the
    /// bound, then fail the request.
    fn home_io_failed(&mut self, request: Key, kind: IoKind, range: ByteRange, attempt: u32) {
        if attempt < self.config.home_io_attempts_max && self.home == HomePower::Active {
            self.counters.home_io_retries += 1;
            self.issue_home_io(request, kind, range, attempt + 1);
            return;
        }
        self.request_mut(request).failed = true;
        self.part_done(request);
    }

    /// A reclaim copy failed: the data stays logged (nothing is lost), and reclaim
    /// moves on; a later pass copies it again.
    fn reclaim_write_failed(
        &mut self,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
        attempt: u32,
    ) {
        // Retried only while the piece is still the latest logged version: a newer
        // write may have replaced it since (then it is not copied home at all).
        let still_latest = self.logged_version(range) == Some((logger, version));
        if attempt < self.config.home_io_attempts_max
            && self.home == HomePower::Active
            && still_latest
        {
            self.counters.home_io_retries += 1;
            self.issue_reclaim_write(logger, range, version, attempt + 1);
            return;
        }
        self.reclaim_step_done();
    }

    fn log_read_replied(
        &mut self,
        request: Key,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
        result: Result<(), LogFailure>,
    ) {
        match result {
            Ok(()) => {
                self.log_read_finished(logger, range, version);
                self.part_done(request);
            }
            Err(LogFailure::Missing) => {
                // The logger lost a version the manager still maps: an O2 violation
                // somewhere. The client gets an error; the count tells the operator.
                self.counters.log_reads_missing += 1;
                self.log_read_finished(logger, range, version);
                self.request_mut(request).failed = true;
                self.part_done(request);
            }
            Err(_) if self.logger_availability(logger) != LoggerAvailability::Failed => {
                // The logger failed and came back while the read was in flight.
                self.issue_log_read(request, logger, range, version);
            }
            Err(_) => self.waiting_log_reads.push_back((request, logger, range, version)),
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
            // O5: requests are admitted in arrival order, so a write never lands over
            // a newer version of its own blocks.
            assert!(old_version < version, "O5: {version:?} over newer {old_version:?}");
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
        failure: LogFailure,
    ) {
        if failure == LogFailure::Unavailable {
            // The record may have reached the log before the failure: treat it as
            // garbage so that it is invalidated when the logger returns (O1, O2).
            self.garbage.add(GarbageEntry { range, logger, version, reclaimed: false });
            self.garbage_dirty = true;
        }
        self.counters.write_retries += 1;
        self.request_mut(request).parts_outstanding -= 1;
        self.start_write(request);
    }

    fn invalidation_replied(&mut self, entry: GarbageEntry, result: Result<(), LogFailure>) {
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

    pub(super) fn handle_home_power(&mut self, power: SteadyPower) {
        match power {
            SteadyPower::Active => {
                self.home = HomePower::Active;
                self.spin_up_after_down = false;
                self.reclaim_blocked = false;
                // The logger on the home disks woke with them: garbage queued for it
                // may go now.
                self.garbage_dirty = true;
                let waiting = std::mem::take(&mut self.waiting_for_home);
                for wait in waiting {
                    match wait {
                        HomeWait::ReadPart { request, range } => {
                            self.issue_home_io(request, IoKind::Read, range, 1)
                        }
                        HomeWait::Write { request } => self.start_write(request),
                    }
                }
                self.retry_waiting_writes();
            }
            SteadyPower::Standby => {
                self.home = HomePower::Standby;
                let wanted = self.spin_up_after_down
                    || !self.waiting_for_home.is_empty()
                    || !self.waiting_writes.is_empty();
                self.spin_up_after_down = false;
                if wanted {
                    self.ensure_spinning();
                }
            }
        }
    }

    pub(super) fn handle_logger_reported(&mut self, logger: LoggerId, status: LoggerStatus) {
        if self.view.report(logger, status) {
            self.availability_changed();
        }
    }

    /// Some logger's availability changed: waits on loggers may end.
    fn availability_changed(&mut self) {
        self.garbage_dirty = true;
        self.reclaim_blocked = false;
        self.probe_again_at = None;
        let waiting = std::mem::take(&mut self.waiting_log_reads);
        for (request, logger, range, version) in waiting {
            if self.logger_availability(logger) == LoggerAvailability::Failed {
                self.waiting_log_reads.push_back((request, logger, range, version));
            } else {
                self.issue_log_read(request, logger, range, version);
            }
        }
        self.retry_waiting_writes();
    }

    pub(super) fn ensure_spinning(&mut self) {
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

    pub(super) fn log_read_started(
        &mut self,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
    ) {
        let key = (logger, version, range.start, range.end);
        *self.log_reads_in_flight.entry(key).or_insert(0) += 1;
    }

    pub(super) fn log_read_finished(
        &mut self,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
    ) {
        let key = (logger, version, range.start, range.end);
        let Some(count) = self.log_reads_in_flight.get_mut(&key) else {
            unreachable!("log read of {logger} {version:?} {range} finished twice");
        };
        *count -= 1;
        if *count == 0 {
            self.log_reads_in_flight.remove(&key);
            // An invalidation held back by this read may go now.
            self.garbage_dirty = true;
        }
    }
}
