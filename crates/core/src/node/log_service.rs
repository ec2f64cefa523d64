//! The logger side of a node: a manager's request becomes a change to the log model
//! and a disk I/O at the right place in the log partition, then a reply that carries
//! the logger's status; room is set aside for managers going to sleep (reservations);
//! watchers hear when the logger's availability changes; garbage is collected while
//! the disks spin. A logger wakes its disks only to read data it alone holds: a write
//! to a logger that is not awake (the writer's view was stale) is refused (`Asleep`)
//! and goes elsewhere, and an invalidation to a sleeping logger is refused too; the
//! manager sends it again once the logger reports itself awake.

use std::collections::BTreeMap;

use somnus_types::{
    ByteRange, IoId, LoggerId, ObjectId, OwnerId, VirtualDuration, VirtualInstant, VolumeId,
};

use super::{DiskPurpose, Node, NodeAction, NodeDiskOp, NodeMessage};
use crate::Version;
use crate::logger::{Logger, LoggerError, Placement, SEGMENT_HEADER_BYTES, SegmentNo};
use crate::offload::{LogFailure, LoggerAvailability, LoggerReply, LoggerStatus, ManagerEvent};

use super::LogOp;

/// The object every volume manager logs its volume under: one object per owner.
const VOLUME_OBJECT: ObjectId = ObjectId(0);

/// The owner a volume's manager writes the log as.
fn log_owner(volume: VolumeId) -> OwnerId {
    OwnerId(u64::from(volume.0))
}

/// One logger: its log model, where its partition sits, its watchers and the room it
/// set aside.
#[derive(Clone, Debug)]
pub(super) struct LogService {
    model: Logger,
    offset_bytes: u64,
    watchers: Vec<VolumeId>,
    lease: VirtualDuration,
    /// Per manager, the room set aside for it and until when.
    reservations: BTreeMap<VolumeId, (u64, VirtualInstant)>,
    /// The number of the last status given.
    sequence: u64,
    /// Used bytes before which garbage collection is not looked for again (set when a
    /// look found nothing).
    collect_next_at_used: Option<u64>,
}

impl LogService {
    pub(super) fn new(
        model: Logger,
        offset_bytes: u64,
        watchers: Vec<VolumeId>,
        lease: VirtualDuration,
    ) -> LogService {
        LogService {
            model,
            offset_bytes,
            watchers,
            lease,
            reservations: BTreeMap::new(),
            sequence: 0,
            collect_next_at_used: None,
        }
    }

    pub(super) fn model(&self) -> &Logger {
        &self.model
    }

    /// Until when room is set aside for managers other than `host` (the volume the log
    /// is on): they sleep on this logger until then. ZERO when none.
    fn hosting_until(&self, host: VolumeId, now: VirtualInstant) -> VirtualInstant {
        self.reservations
            .iter()
            .filter(|&(&holder, &(_, until))| holder != host && until > now)
            .map(|(_, &(_, until))| until)
            .max()
            .unwrap_or(VirtualInstant::ZERO)
    }

    /// Room set aside at `now` for managers other than `owner` (all, without one).
    fn reserved(&self, owner: Option<VolumeId>, now: VirtualInstant) -> u64 {
        self.reservations
            .iter()
            .filter(|&(&holder, &(_, until))| Some(holder) != owner && until > now)
            .map(|(_, &(bytes, _))| bytes)
            .sum()
    }

    /// Room for `owner`'s records: free space less what others hold.
    fn free_for(&self, owner: VolumeId, now: VirtualInstant) -> u64 {
        self.model.free_bytes().saturating_sub(self.reserved(Some(owner), now))
    }

    /// Sets `bytes` aside for `owner` for a lease, if there is room.
    fn reserve(&mut self, owner: VolumeId, bytes: u64, now: VirtualInstant) -> bool {
        self.reservations.retain(|_, &mut (_, until)| until > now);
        if self.free_for(owner, now) < bytes {
            return false;
        }
        self.reservations.insert(owner, (bytes, now + self.lease));
        true
    }

    /// `owner` wrote `bytes`: they come out of its reservation first.
    fn consume(&mut self, owner: VolumeId, bytes: u64) {
        if let Some((held, _)) = self.reservations.get_mut(&owner) {
            *held = held.saturating_sub(bytes);
        }
    }

    /// Where a record lands in the volume: its segment's slot in the partition (the
    /// partition a ring of segment-sized slots), at its offset; a new segment's header
    /// is written with its first record.
    fn placement(&self, placement: Placement) -> ByteRange {
        let base = self.slot_base(placement.segment);
        if placement.new_segment {
            let start = base + placement.offset_bytes - SEGMENT_HEADER_BYTES;
            return ByteRange::new(start, placement.record_bytes + SEGMENT_HEADER_BYTES);
        }
        ByteRange::new(base + placement.offset_bytes, placement.record_bytes)
    }

    /// Where a read of `owner`'s `version` goes. Record positions are not tracked: a
    /// fixed hash of the record's identity places it, which is what a seek model needs.
    fn read_placement(&self, owner: VolumeId, version: Version, size_bytes: u64) -> ByteRange {
        let spread = (u64::from(owner.0) << 40 ^ version.0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let partition = self.model.geometry().capacity_bytes.max(1);
        ByteRange::new(self.offset_bytes + spread % partition, size_bytes)
    }

    /// Where a collection's copies are read (the collected segment's slot) and written
    /// (the head).
    fn segment_placement(&self, segment: SegmentNo, bytes: u64) -> ByteRange {
        ByteRange::new(self.slot_base(segment), bytes.min(self.model.geometry().segment_bytes))
    }

    /// Where `segment`'s slot starts in the volume: the partition is a ring of
    /// segment-sized slots.
    fn slot_base(&self, segment: SegmentNo) -> u64 {
        let geometry = self.model.geometry();
        let slots = (geometry.capacity_bytes / geometry.segment_bytes).max(1);
        self.offset_bytes + (segment.0.saturating_sub(1) % slots) * geometry.segment_bytes
    }
}

impl Node {
    /// The status a logger reports of itself, numbered so a late copy is told apart.
    pub(super) fn status(&mut self, slot: usize) -> LoggerStatus {
        let reserved = self.slots[slot].log.reserved(None, self.now);
        let hosting_until = self.slots[slot].log.hosting_until(self.slots[slot].volume, self.now);
        let availability = self.availability(slot);
        let slot = &mut self.slots[slot];
        let queue =
            slot.unit.ios_in_flight() + u32::try_from(slot.parked.len()).unwrap_or(u32::MAX);
        slot.log.sequence += 1;
        LoggerStatus {
            availability,
            queue_length: queue,
            free_bytes: slot.log.model.free_bytes().saturating_sub(reserved),
            hosting_until,
            sequence: slot.log.sequence,
        }
    }

    /// The logger's availability now.
    pub(super) fn availability(&self, slot: usize) -> LoggerAvailability {
        if self.slots[slot].unit.is_awake() {
            LoggerAvailability::Awake
        } else {
            LoggerAvailability::Asleep
        }
    }

    /// A manager's request reached the logger of `slot`: it is answered at once, or
    /// after the disk I/O it needs.
    pub(super) fn log_request(&mut self, owner: VolumeId, slot: usize, io: IoId, op: LogOp) {
        let now = self.now;
        let outcome = match op {
            LogOp::Probe => Outcome::Done(Ok(())),
            LogOp::Reserve { bytes } => {
                let granted = self.slots[slot].unit.is_awake()
                    && self.slots[slot].log.reserve(owner, bytes, now);
                Outcome::Done(if granted { Ok(()) } else { Err(LogFailure::Refused) })
            }
            LogOp::Write { range, version } => self.log_write(slot, owner, range, version),
            LogOp::Read { range, version } => self.log_read(slot, owner, range, version),
            LogOp::Invalidate { range, version } => {
                self.log_invalidate(slot, owner, range, version)
            }
        };
        let result = match outcome {
            Outcome::Done(result) => result,
            Outcome::Disk { op, at, payload_bytes } => {
                let purpose = DiskPurpose::Log { owner, io, payload_bytes };
                return self.issue_disk(slot, op, at, purpose);
            }
        };
        let reply = LoggerReply { result, status: self.status(slot), waited_for_spin_up: false };
        self.reply_to(owner, io, reply, 0);
        // A reservation granted makes the logger's own volume a host: it learns at once.
        self.observe_load(slot);
    }

    /// A write: appended to the log model now, and written at its place in the
    /// partition; refused if the logger is not awake or has no room for it.
    fn log_write(
        &mut self,
        slot: usize,
        owner: VolumeId,
        range: ByteRange,
        version: Version,
    ) -> Outcome {
        if !self.slots[slot].unit.is_awake() {
            // The writer's view was stale: this logger is going to sleep, or sleeps. It
            // does not wake for a write another logger (or the home volume) can take:
            // the reply's status tells the writer to go elsewhere.
            return Outcome::Done(Err(LogFailure::Asleep));
        }
        let log = &mut self.slots[slot].log;
        if log.free_for(owner, self.now) < log.model.space_needed(range.size_bytes()) {
            return Outcome::Done(Err(LogFailure::Full));
        }
        let owner_id = log_owner(owner);
        let placement = match log.model.append(owner_id, VOLUME_OBJECT, range, version) {
            Ok(placement) => placement,
            Err(error) => return Outcome::Done(Err(refusal(error))),
        };
        log.consume(owner, placement.record_bytes);
        Outcome::Disk { op: NodeDiskOp::Write, at: log.placement(placement), payload_bytes: 0 }
    }

    /// A read: served (waking the disks if they sleep: the data is only here) if the log
    /// holds that version or a newer one over the whole range.
    fn log_read(
        &self,
        slot: usize,
        owner: VolumeId,
        range: ByteRange,
        version: Version,
    ) -> Outcome {
        let log = &self.slots[slot].log;
        if !log.model.serves(log_owner(owner), VOLUME_OBJECT, range, version) {
            return Outcome::Done(Err(LogFailure::Missing));
        }
        let at = log.read_placement(owner, version, range.size_bytes());
        Outcome::Disk { op: NodeDiskOp::Read, at, payload_bytes: range.size_bytes() }
    }

    /// An invalidation: a deletion marker appended and written, never waking the disks.
    fn log_invalidate(
        &mut self,
        slot: usize,
        owner: VolumeId,
        range: ByteRange,
        version: Version,
    ) -> Outcome {
        let owner_id = log_owner(owner);
        if version > self.slots[slot].log.model.newest_version(owner_id) {
            // A version above any this log took never reached it (a write that failed
            // before landing): there is nothing to hide, and the log would refuse a
            // marker above the owner's newest version.
            return Outcome::Done(Ok(()));
        }
        if !self.slots[slot].unit.serves_io() {
            // Background work never wakes a sleeping disk (DESIGN.md).
            return Outcome::Done(Err(LogFailure::Asleep));
        }
        let log = &mut self.slots[slot].log;
        match log.model.invalidate(owner_id, VOLUME_OBJECT, range, version) {
            Ok(placement) => Outcome::Disk {
                op: NodeDiskOp::Write,
                at: log.placement(placement),
                payload_bytes: 0,
            },
            Err(error) => Outcome::Done(Err(refusal(error))),
        }
    }

    /// A logger's disk I/O for a request finished: the reply goes out.
    pub(super) fn log_io_done(
        &mut self,
        slot: usize,
        owner: VolumeId,
        io: IoId,
        payload_bytes: u64,
        ok: bool,
        waited_for_spin_up: bool,
    ) {
        // A failed log device may or may not hold the record: "unavailable".
        let result = if ok { Ok(()) } else { Err(LogFailure::Unavailable) };
        let reply = LoggerReply { result, status: self.status(slot), waited_for_spin_up };
        self.reply_to(owner, io, reply, if ok { payload_bytes } else { 0 });
        self.collect_garbage(slot);
    }

    /// Collects one segment of a logger's log when it is full enough and its disks spin
    /// (never waking them): the live records are read and written again at the head.
    fn collect_garbage(&mut self, slot: usize) {
        let log = &self.slots[slot].log;
        let geometry = log.model.geometry();
        let full_enough = u128::from(log.model.used_bytes()) * 100
            >= u128::from(geometry.capacity_bytes) * u128::from(self.collect_at_percent);
        // After a look that found nothing to collect, the next waits for another
        // segment's worth of records: a look plans the copies of up to eight segments,
        // painting each of their records.
        let due = log.collect_next_at_used.is_none_or(|at| log.model.used_bytes() >= at);
        if !full_enough || !due || !self.slots[slot].unit.is_awake() {
            return;
        }
        let log = &mut self.slots[slot].log;
        // A collection that runs out of room stops part-way and frees nothing yet.
        let Ok(Some(collection)) = log.model.compact() else {
            log.collect_next_at_used = Some(log.model.used_bytes() + geometry.segment_bytes);
            return;
        };
        log.collect_next_at_used = None;
        self.counters.log_collections += 1;
        self.counters.log_bytes_copied += collection.bytes_copied;
        if collection.record_bytes_written == 0 {
            return;
        }
        let bytes = collection.record_bytes_written;
        let log = &self.slots[slot].log;
        let read = log.segment_placement(collection.segment, bytes);
        let head = log.model.head().map_or(collection.segment, |(segment, _)| segment);
        let write = log.segment_placement(head, bytes);
        self.issue_disk(slot, NodeDiskOp::Read, read, DiskPurpose::Collection);
        self.issue_disk(slot, NodeDiskOp::Write, write, DiskPurpose::Collection);
    }

    /// Refreshes the load every local manager sees of this logger (no decision is taken
    /// on it now; the next one uses it).
    pub(super) fn observe_load(&mut self, slot: usize) {
        let status = self.status(slot);
        let logger = LoggerId(self.slots[slot].volume.0);
        for index in 0..self.slots[slot].local_watchers.len() {
            let watcher = self.slots[slot].local_watchers[index];
            self.slots[watcher].manager.observe_logger_load(logger, status);
        }
    }

    /// Tells the watchers when the logger's availability changed.
    pub(super) fn report_if_changed(&mut self, slot: usize) {
        if self.availability(slot) != self.slots[slot].reported {
            self.report_to_watchers(slot);
        }
    }

    /// Pushes the logger's status to every manager whose view holds it.
    pub(super) fn report_to_watchers(&mut self, slot: usize) {
        let status = self.status(slot);
        self.slots[slot].reported = status.availability;
        let logger = LoggerId(self.slots[slot].volume.0);
        for index in 0..self.slots[slot].log.watchers.len() {
            let watcher = self.slots[slot].log.watchers[index];
            match self.slot_of.get(&watcher) {
                Some(&local) => self
                    .deferred
                    .push_back((local, ManagerEvent::LoggerReported { logger, status })),
                None => {
                    let Some(&to) = self.servers.get(&watcher) else {
                        panic!("node {}: no server known for watcher {watcher}", self.server);
                    };
                    let message = NodeMessage::LoggerReport { watcher, logger, status };
                    self.actions.push_back(NodeAction::Send { to, message });
                }
            }
        }
    }
}

/// How a logger answers a request: at once, or after a disk I/O.
enum Outcome {
    Done(Result<(), LogFailure>),
    Disk { op: NodeDiskOp, at: ByteRange, payload_bytes: u64 },
}

/// What a refused log change tells the manager.
fn refusal(error: LoggerError) -> LogFailure {
    match error {
        LoggerError::Full { .. } => LogFailure::Full,
        LoggerError::TooLarge { .. }
        | LoggerError::VersionNotGrowing { .. }
        | LoggerError::VersionAboveNewest { .. }
        | LoggerError::EmptyRange => LogFailure::Refused,
    }
}
