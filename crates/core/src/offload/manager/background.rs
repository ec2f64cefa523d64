//! The background: invalidations, reclaim, probes of silent loggers, and the decision
//! to sleep (O3). Background work never wakes a sleeping disk: invalidations go only to
//! loggers the view shows awake, reclaim copies only from awake loggers unless the
//! off-load limit or a drain forces it (a bounded buffer wakes its target, DESIGN.md),
//! and nothing here spins the home volume up.

use somnus_types::{ByteRange, LoggerId, VirtualInstant};

use super::{IoPurpose, Reclaim, VolumeManager};
use crate::Version;
use crate::offload::garbage::GarbageEntry;
use crate::offload::{DataSource, HomePower, LoggerAvailability, ManagerAction, PowerPolicy};

/// The largest extent one reclaim step copies home.
const RECLAIM_CHUNK_BYTES_MAX: u64 = 1 << 20;

impl VolumeManager {
    /// Work that runs after every event: invalidations, reclaim, probes, spin-down.
    pub(super) fn background(&mut self, now: VirtualInstant) {
        if !self.waiting_writes.is_empty() {
            // Space may have been freed or a range un-logged since they last tried.
            self.retry_waiting_writes();
        }
        if self.garbage_dirty {
            self.garbage_dirty = false;
            self.issue_invalidations();
        }
        if self.reclaim_possible() && now >= self.last_foreground + self.config.reclaim_after_idle {
            self.start_reclaim();
        }
        self.issue_probes(now);
        self.maybe_spin_down(now);
    }

    /// Sends invalidations for garbage on awake loggers; never wakes a sleeping one.
    fn issue_invalidations(&mut self) {
        if self.garbage.len() == 0 {
            return;
        }
        let mut sendable = std::mem::take(&mut self.scratch_garbage);
        sendable.clear();
        let mut pending_loggers = std::mem::take(&mut self.scratch_loggers);
        pending_loggers.clear();
        pending_loggers.extend(self.garbage.loggers_pending());
        for &logger in &pending_loggers {
            let room = self
                .config
                .invalidations_in_flight_max
                .saturating_sub(self.invalidations_in_flight + sendable.len());
            if room == 0 {
                break;
            }
            if self.logger_availability(logger) == LoggerAvailability::Awake {
                let reads = &self.log_reads_in_flight;
                let redirect = &self.redirect;
                let busy = |entry: GarbageEntry| {
                    // A marker hides its version and every older one over its range: it
                    // waits for the reads in flight of any of them there (O2).
                    let older_reads = (entry.logger, Version(0), 0, 0)
                        ..=(entry.logger, entry.version, u64::MAX, u64::MAX);
                    let range = entry.range;
                    reads
                        .range(older_reads)
                        .any(|(&(_, _, start, end), _)| start < range.end && range.start < end)
                        || hides_a_mapped_version(redirect, entry)
                };
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
        self.scratch_loggers = pending_loggers;
    }

    /// Probes the loggers that stopped answering and are due, so that work waiting on
    /// them resumes once they answer.
    fn issue_probes(&mut self, now: VirtualInstant) {
        if self.view.next_probe_at().is_none_or(|at| at > now) {
            return;
        }
        let mut due = std::mem::take(&mut self.scratch_loggers);
        due.clear();
        self.view.take_due_probes(now, &mut due);
        for &logger in &due {
            let io = self.new_io(IoPurpose::Probe { logger });
            self.actions.push_back(ManagerAction::ProbeLogger { io, logger });
        }
        self.scratch_loggers = due;
    }

    pub(super) fn reclaim_possible(&self) -> bool {
        self.home == HomePower::Active
            && self.reclaim.is_none()
            && !self.reclaim_blocked
            && !self.redirect.is_empty()
            && self.foreground_home_in_flight == 0
            && self.waiting_for_home.is_empty()
    }

    /// Copies one logged extent home (004 3.1: when the home volume is idle, the
    /// manager reclaims off-loaded blocks in the background).
    fn start_reclaim(&mut self) {
        let view = &self.view;
        let availability = |logger: LoggerId| view.availability(logger, true);
        let from = self.reclaim_cursor;
        let awake = self
            .redirect
            .find_from(from, |(logger, _)| availability(logger) == LoggerAvailability::Awake);
        // Background work leaves sleeping loggers alone, except to bring the logged
        // data back under the off-load limit or to finish a drain: then reading wakes
        // the logger (a bounded buffer wakes its target, DESIGN.md).
        let must_drain = self.draining || self.over_offload_limit();
        let found = awake.or_else(|| {
            must_drain
                .then(|| {
                    self.redirect.find_from(from, |(logger, _)| {
                        availability(logger) == LoggerAvailability::Asleep
                    })
                })
                .flatten()
        });
        let Some((range, (logger, version))) = found else {
            self.reclaim_blocked = true;
            return;
        };
        let end = range.end.min(range.start + RECLAIM_CHUNK_BYTES_MAX);
        let range = ByteRange::from_bounds(range.start, end);
        self.reclaim_cursor = range.end;
        self.reclaim = Some(Reclaim { writes_outstanding: 0 });
        self.log_read_started(logger, range, version);
        let io = self.new_io(IoPurpose::ReclaimRead { logger, range, version });
        self.actions.push_back(ManagerAction::ReadLog {
            io,
            request: None,
            logger,
            range,
            version,
        });
    }

    pub(super) fn reclaim_read_done(
        &mut self,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
        read: bool,
    ) {
        assert!(
            self.reclaim.is_some_and(|r| r.writes_outstanding == 0),
            "reclaim read without a reclaim"
        );
        if !read || self.home != HomePower::Active {
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
            writes_outstanding += 1;
            self.issue_reclaim_write(logger, piece, version, 1);
        }
        self.scratch_pieces = pieces;
        self.reclaim = (writes_outstanding > 0).then_some(Reclaim { writes_outstanding });
    }

    /// Copies a logged piece home. It is the latest version of those blocks (O1 allows
    /// it: the home copy becomes equal to the logged one, never newer).
    pub(super) fn issue_reclaim_write(
        &mut self,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
        attempt: u32,
    ) {
        assert_eq!(self.home, HomePower::Active, "O3: reclaim onto a sleeping volume");
        assert_eq!(
            self.logged_version(range),
            Some((logger, version)),
            "O1: reclaim of {range} that is not the latest logged version"
        );
        let io = self.new_io(IoPurpose::ReclaimWrite { logger, range, version, attempt });
        self.home_ios_in_flight += 1;
        self.actions.push_back(ManagerAction::WriteHome {
            io,
            range,
            source: DataSource::Log { logger, version },
        });
    }

    pub(super) fn reclaim_write_done(
        &mut self,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
    ) {
        self.reclaim_step_done();
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

    /// One home write of the current reclaim step finished, copied or not.
    pub(super) fn reclaim_step_done(&mut self) {
        let Some(reclaim) = &mut self.reclaim else {
            unreachable!("reclaim write without a reclaim")
        };
        reclaim.writes_outstanding -= 1;
        if reclaim.writes_outstanding == 0 {
            self.reclaim = None;
        }
    }

    /// Whether the home volume could go to sleep now, logger aside.
    fn idle_enough_to_sleep(&self, now: VirtualInstant) -> bool {
        if self.home != HomePower::Active
            || self.home_ios_in_flight > 0
            || self.reclaim.is_some()
            || !self.waiting_for_home.is_empty()
            || !self.waiting_writes.is_empty()
        {
            return false;
        }
        // The logger on the home disks hosts managers that sleep on it: stay up.
        let hosting = self.view.own_hosting_until() > now;
        !hosting && self.idle_deadline().is_some_and(|deadline| now >= deadline)
    }

    fn maybe_spin_down(&mut self, now: VirtualInstant) {
        if self.draining {
            // Requests in flight may still log a write.
            if !self.redirect.is_empty() || self.garbage.len() > 0 || !self.requests.is_empty() {
                return;
            }
            self.draining = false;
        }
        if !self.idle_enough_to_sleep(now) {
            self.close_sleep_block(now);
            return;
        }
        if self.probe_again_at.is_some_and(|t| now < t) {
            return;
        }
        if !matches!(self.config.policy, PowerPolicy::Offload { .. }) {
            self.spin_down(now);
            return;
        }
        if self.reservation_in_flight {
            return;
        }
        // O3: never sleep without an awake logger on other disks for the next write.
        let host = self.view.sleep_host(
            self.config.logger_host,
            self.config.home_idle_power,
            self.config.logger_room_min_bytes,
        );
        let Some(logger) = host else {
            self.sleep_blocked_since.get_or_insert(now);
            self.probe_again_at = Some(now + self.config.probe_interval);
            return;
        };
        self.close_sleep_block(now);
        if self.staying_up_to_reclaim() {
            return;
        }
        // The view may be stale: the logger itself confirms, and sets room aside.
        self.reservation_in_flight = true;
        let bytes = self.config.logger_room_min_bytes;
        let io = self.new_io(IoPurpose::Reserve { logger });
        self.actions.push_back(ManagerAction::Reserve { io, logger, bytes });
    }

    /// A logger answered a reservation: granted, the volume sleeps if it still may (O3);
    /// refused (or unanswered), it looks again later.
    pub(super) fn reservation_replied(&mut self, granted: bool) {
        self.reservation_in_flight = false;
        let now = self.now;
        if !granted {
            self.sleep_blocked_since.get_or_insert(now);
            self.probe_again_at = Some(now + self.config.probe_interval);
            return;
        }
        if self.idle_enough_to_sleep(now) && !self.draining && !self.staying_up_to_reclaim() {
            self.spin_down(now);
        }
    }

    fn spin_down(&mut self, now: VirtualInstant) {
        assert_eq!(self.home, HomePower::Active, "O3: spin-down of a volume not spinning");
        assert_eq!(self.home_ios_in_flight, 0, "O3: spin-down with home I/O in flight");
        self.close_sleep_block(now);
        self.probe_again_at = None;
        self.home = HomePower::SpinningDown;
        self.counters.spin_downs_requested += 1;
        self.actions.push_back(ManagerAction::SpinDown);
    }

    /// When the idle thresholds of the policy are met, if it ever spins down.
    pub(super) fn idle_deadline(&self) -> Option<VirtualInstant> {
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

    /// Woken by the off-load limit, the volume stays up while there is reclaim to do.
    fn staying_up_to_reclaim(&self) -> bool {
        self.over_offload_limit() && !self.reclaim_blocked
    }

    pub(super) fn over_offload_limit(&self) -> bool {
        match self.config.policy {
            PowerPolicy::Offload { offload_limit_bytes, .. } => {
                self.redirect.total_bytes() >= offload_limit_bytes
            }
            PowerPolicy::AlwaysOn | PowerPolicy::SpinDownWhenIdle { .. } => false,
        }
    }
}

/// Whether invalidating `entry` would hide data still mapped (O2): an invalidation
/// hides its version and every older one on its logger (docs/format/log.md), so it
/// waits while part of its range is mapped to an older version on the same logger.
/// Only a write that failed and may have landed leaves such an entry: its retry takes
/// a newer version, and once that lands nothing older is mapped any more.
fn hides_a_mapped_version(
    redirect: &crate::extent::ExtentMap<(LoggerId, Version)>,
    entry: GarbageEntry,
) -> bool {
    let mut hides = false;
    redirect.for_each_overlap(entry.range, |_, (logger, version)| {
        hides |= logger == entry.logger && version < entry.version;
    });
    hides
}
