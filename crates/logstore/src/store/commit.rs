//! Group commit: appends, invalidations and delete-alls enter the batch being filled;
//! one leader writes the batch at the log head (one write per segment), syncs it,
//! applies it to the index and wakes its waiters (L1).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use somnus_types::{ByteRange, Version};

use super::{
    BATCH_BUCKETS, CommitMode, LogStore, Segment, SegmentFiles, SyncMode, insert_header, lock,
    stopwatch,
};
use crate::disk::DiskFile;
use crate::error::{Error, Request, Result};
use crate::format::{
    self, PAYLOAD_BYTES_MAX, RECORD_HEADER_BYTES, RecordHeader, RecordKind, SEGMENT_HEADER_BYTES,
};
use crate::{Lsn, ObjectId, OwnerId, SegmentId, segment_file_name};

/// The most batches one appender flushes in a row before it hands the lead over: enough
/// to keep the device busy across scheduling delays, few enough to bound its own wait.
const LEADER_BATCHES_MAX: u32 = 4;

/// Where a batch's waiters learn its fate.
#[derive(Default)]
struct Ticket {
    state: Mutex<TicketState>,
    changed: Condvar,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum TicketState {
    #[default]
    Waiting,
    /// The previous leader handed the lead to one waiter of this batch.
    Lead,
    Done,
    Failed(String),
}

impl Ticket {
    /// Settles the batch and wakes all its waiters.
    fn finish(&self, state: TicketState) {
        *lock(&self.state) = state;
        self.changed.notify_all();
    }

    /// Wakes one waiter to lead the batch.
    fn hand_lead(&self) {
        *lock(&self.state) = TicketState::Lead;
        self.changed.notify_one();
    }

    /// Waits until the batch is settled or its lead handed over; exactly one waiter
    /// takes a handed lead.
    fn wait(&self) -> TicketState {
        let mut state = lock(&self.state);
        loop {
            match &*state {
                TicketState::Waiting => {
                    state =
                        self.changed.wait(state).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                TicketState::Lead => {
                    *state = TicketState::Waiting;
                    return TicketState::Lead;
                }
                settled => return settled.clone(),
            }
        }
    }
}

/// A record in the batch being filled, where it will be once written.
pub(super) struct PendingRecord {
    pub(super) header: RecordHeader,
    pub(super) segment: SegmentId,
    pub(super) offset: u64,
    /// Compaction copies enter the index when their source segment leaves it.
    pub(super) apply: bool,
}

/// The bytes a batch writes to one segment.
struct SegmentWrite {
    segment: SegmentId,
    /// The write creates the segment file (its bytes start with the segment header).
    create: bool,
    offset: u64,
    bytes: Vec<u8>,
}

#[derive(Default)]
pub(super) struct Batch {
    writes: Vec<SegmentWrite>,
    pub(super) records: Vec<PendingRecord>,
}

/// The log head: the segment new records go to.
#[derive(Clone, Copy)]
pub(super) struct Head {
    pub(super) segment: SegmentId,
    /// Bytes of the segment, the pending ones included.
    pub(super) bytes: u64,
}

pub(super) struct Writer {
    pub(super) head: Option<Head>,
    pub(super) next_segment: SegmentId,
    pub(super) next_lsn: Lsn,
    /// Bytes of all segment files, the pending ones included.
    pub(super) used_bytes: u64,
    /// The highest version per owner, the pending ones included: appends must exceed it.
    pub(super) versions: BTreeMap<OwnerId, Version>,
    pub(super) pending: Batch,
    /// Waiters of the batch being filled wait on its ticket.
    ticket: Arc<Ticket>,
    /// An appender is flushing (or has been handed the lead).
    pub(super) leader: bool,
    /// Segments that pending or in-flight batches write: never compacted.
    pub(super) unsettled: BTreeSet<SegmentId>,
    pub(super) poisoned: Option<String>,
    pub(super) closed: bool,
    /// Write buffers of flushed batches, reused so that batches do not regrow them.
    pub(super) spare: Vec<Vec<u8>>,
}

impl Writer {
    /// After a batch is durable and applied: keeps a few of its buffers for reuse, and
    /// marks settled the segments no pending batch writes (the head stays unsettled).
    fn settle(&mut self, buffers: Vec<Vec<u8>>) {
        const SPARE_BUFFERS_MAX: usize = 4;
        for buffer in buffers {
            if self.spare.len() < SPARE_BUFFERS_MAX {
                self.spare.push(buffer);
            }
        }
        let pending: BTreeSet<SegmentId> =
            self.pending.writes.iter().map(|write| write.segment).collect();
        let head = self.head.as_ref().map(|head| head.segment);
        self.unsettled.retain(|s| pending.contains(s) || Some(*s) == head);
    }

    /// The writer of a log just opened: the head is a new segment (an open never appends
    /// to an existing one), created with the first record.
    pub(super) fn new(
        next_segment: SegmentId,
        next_lsn: Lsn,
        used_bytes: u64,
        versions: BTreeMap<OwnerId, Version>,
    ) -> Writer {
        Writer {
            head: None,
            next_segment,
            next_lsn,
            used_bytes,
            versions,
            pending: Batch::default(),
            ticket: Arc::new(Ticket::default()),
            leader: false,
            unsettled: BTreeSet::new(),
            poisoned: None,
            closed: false,
            spare: Vec::new(),
        }
    }
}

fn bucket(records: u64) -> usize {
    (63 - records.max(1).leading_zeros() as usize).min(BATCH_BUCKETS - 1)
}

impl LogStore {
    /// Appends `bytes` as `version` of `range` of `object`; durable when it returns.
    /// Versions are the owner's: each append must carry a higher version than every
    /// record of the owner in the log.
    pub fn append(
        &self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
        version: Version,
        bytes: &[u8],
    ) -> Result<()> {
        if bytes.len() as u64 != range.size_bytes() {
            return Err(Error::PayloadMismatch { given_bytes: bytes.len() as u64, range });
        }
        if range.is_empty() {
            return Err(Error::EmptyRange { request: Request::Append });
        }
        let limit = self.payload_limit();
        if range.size_bytes() > limit {
            return Err(Error::RecordTooLarge { bytes: range.size_bytes(), limit });
        }
        // The checksum of the payload is the bulk of the work: done before the lock.
        let payload_crc = crc32c::crc32c(bytes);
        self.commit(|writer| {
            let newest = writer.versions.get(&owner).copied().unwrap_or(Version(0));
            if version <= newest {
                return Err(Error::VersionNotGrowing { owner, version, newest });
            }
            let header = self.new_header(writer, RecordKind::Data, owner, object, range, version);
            self.enqueue(writer, header, bytes, payload_crc, true, false)?;
            let previous = writer.versions.insert(owner, version);
            assert!(previous < Some(version), "L3: owner {} versions must grow", owner.0);
            Ok(())
        })?;
        self.counters.appends.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Marks `version` of `range` obsolete with a durable deletion marker. It hides that
    /// version and older ones of those bytes, never a newer one.
    pub fn invalidate(
        &self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
        version: Version,
    ) -> Result<()> {
        if range.is_empty() {
            return Err(Error::EmptyRange { request: Request::Invalidate });
        }
        self.commit(|writer| {
            let newest = writer.versions.get(&owner).copied().unwrap_or(Version(0));
            if version > newest {
                return Err(Error::VersionAboveNewest { owner, version, newest });
            }
            let kind = RecordKind::Invalidate;
            let header = self.new_header(writer, kind, owner, object, range, version);
            self.enqueue(writer, header, &[], 0, true, true)
        })?;
        self.counters.invalidates.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Makes every record the owner has in the log obsolete, in one record (Sierra 3.4:
    /// a logger joining a DVL's view starts empty).
    pub fn delete_all(&self, owner: OwnerId) -> Result<()> {
        self.commit(|writer| {
            let empty = ByteRange::new(0, 0);
            let header = self.new_header(
                writer,
                RecordKind::DeleteAll,
                owner,
                ObjectId(0),
                empty,
                Version(0),
            );
            self.enqueue(writer, header, &[], 0, true, true)
        })?;
        self.counters.delete_alls.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The header of a new record at the next LSN, stamped now.
    fn new_header(
        &self,
        writer: &Writer,
        kind: RecordKind,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
        version: Version,
    ) -> RecordHeader {
        let written_ms = (self.options.clock)();
        RecordHeader { kind, lsn: writer.next_lsn, owner, object, range, version, written_ms }
    }

    /// The largest payload one record may carry here.
    pub fn payload_limit(&self) -> u64 {
        PAYLOAD_BYTES_MAX
            .min(self.options.segment_bytes - SEGMENT_HEADER_BYTES - RECORD_HEADER_BYTES)
    }

    /// Adds a record to the batch being filled, at the log head (starting a new segment
    /// if it does not fit in the current one). Checks the capacity first: nothing is
    /// queued if it fails.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn enqueue(
        &self,
        writer: &mut Writer,
        header: RecordHeader,
        payload: &[u8],
        payload_crc: u32,
        apply: bool,
        headroom: bool,
    ) -> Result<()> {
        if apply {
            assert_eq!(header.lsn, writer.next_lsn, "L2: a new record takes the next LSN");
        } else {
            assert!(header.lsn < writer.next_lsn, "L2: a copy keeps its original's LSN");
        }
        let record_bytes = header.encoded_bytes();
        let (needed, rotate) = self.space_needed(writer, record_bytes);
        let capacity =
            self.options.capacity_bytes + if headroom { self.options.segment_bytes } else { 0 };
        if writer.used_bytes + needed > capacity {
            return Err(Error::Full {
                needed,
                used: writer.used_bytes,
                capacity: self.options.capacity_bytes,
            });
        }
        let head = match writer.head {
            Some(head) if !rotate => head,
            _ => self.start_segment(writer),
        };
        let (segment, offset) = (head.segment, head.bytes);
        writer.head = Some(Head { segment, bytes: offset + record_bytes });
        writer.used_bytes += record_bytes;
        assert!(writer.used_bytes <= capacity, "L5: Full is checked before anything is queued");
        if writer.pending.writes.last().is_none_or(|write| write.segment != segment) {
            let bytes = writer.spare.pop().unwrap_or_default();
            writer.pending.writes.push(SegmentWrite { segment, create: false, offset, bytes });
        }
        if let Some(write) = writer.pending.writes.last_mut() {
            format::encode_record_with_crc(
                self.log,
                segment,
                &header,
                payload,
                payload_crc,
                &mut write.bytes,
            );
        }
        writer.unsettled.insert(segment);
        // Compaction copies keep their old LSN: the counter only moves forward.
        writer.next_lsn = writer.next_lsn.max(Lsn(header.lsn.0.saturating_add(1)));
        writer.pending.records.push(PendingRecord { header, segment, offset, apply });
        Ok(())
    }

    /// Starts a new head segment in the batch being filled: its file is created, with
    /// its header, when the batch is flushed.
    fn start_segment(&self, writer: &mut Writer) -> Head {
        let segment = writer.next_segment;
        writer.next_segment = SegmentId(segment.0 + 1);
        let mut bytes = writer.spare.pop().unwrap_or_default();
        bytes.extend_from_slice(&format::encode_segment_header(self.log, segment));
        writer.pending.writes.push(SegmentWrite { segment, create: true, offset: 0, bytes });
        writer.used_bytes += SEGMENT_HEADER_BYTES;
        Head { segment, bytes: SEGMENT_HEADER_BYTES }
    }

    /// Runs `enqueue` under the writer lock, then waits until the batch holding what it
    /// queued is durable (leading the flush if no one is).
    pub(super) fn commit<T>(&self, enqueue: impl FnOnce(&mut Writer) -> Result<T>) -> Result<T> {
        let mut writer = lock(&self.writer);
        if writer.closed {
            return Err(Error::Closed);
        }
        if self.options.read_only {
            return Err(Error::ReadOnly);
        }
        if let Some(cause) = &writer.poisoned {
            return Err(Error::Poisoned { cause: cause.clone() });
        }
        let queued_before = writer.pending.records.len();
        let value = enqueue(&mut writer);
        if value.is_err() && writer.pending.records.len() == queued_before {
            return value;
        }
        if self.options.commit == CommitMode::Stepped {
            // Durable at the caller's next `flush_queued`.
            return value;
        }
        // Something is queued (even if a later part of `enqueue` failed): see it durable.
        let ticket = writer.ticket.clone();
        if writer.leader {
            drop(writer);
        } else {
            writer.leader = true;
            self.lead(writer);
        }
        loop {
            match ticket.wait() {
                TicketState::Done => return value,
                TicketState::Failed(cause) => return Err(Error::Poisoned { cause }),
                // The lead was handed to us (we hold it from here).
                TicketState::Lead | TicketState::Waiting => self.lead(lock(&self.writer)),
            }
        }
    }

    /// In [`CommitMode::Stepped`]: writes, syncs and applies every record queued since
    /// the last flush, as one group commit on the calling thread; returns how many
    /// records became durable (0 when nothing was queued). In `Group` mode the
    /// appenders flush their own records: this does nothing and returns 0.
    ///
    /// A stepped log is driven by one thread (the simulator's): a flush called while
    /// another thread leads one would return before that batch is durable.
    pub fn flush_queued(&self) -> Result<u64> {
        let mut writer = lock(&self.writer);
        if let Some(cause) = &writer.poisoned {
            return Err(Error::Poisoned { cause: cause.clone() });
        }
        let queued = writer.pending.records.len() as u64;
        if queued == 0 || writer.leader {
            return Ok(0);
        }
        writer.leader = true;
        self.lead(writer);
        match &lock(&self.writer).poisoned {
            Some(cause) => Err(Error::Poisoned { cause: cause.clone() }),
            None => Ok(queued),
        }
    }

    /// Whether an append of `payload_bytes` would fit now (`Full` otherwise), the
    /// queued records counted.
    pub fn fits(&self, payload_bytes: u64) -> bool {
        if payload_bytes > self.payload_limit() {
            return false;
        }
        let writer = lock(&self.writer);
        let (needed, _) = self.space_needed(&writer, RECORD_HEADER_BYTES + payload_bytes);
        writer.used_bytes + needed <= self.options.capacity_bytes
    }

    /// Whether appends of `payloads_bytes`, one after the other, would all fit now
    /// (the queued records counted): a caller that must append all of them or none
    /// asks first.
    pub fn all_fit(&self, payloads_bytes: &[u64]) -> bool {
        let writer = lock(&self.writer);
        let (mut head, mut used) = (writer.head.map(|head| head.bytes), writer.used_bytes);
        payloads_bytes.iter().all(|&payload_bytes| {
            let record_bytes = RECORD_HEADER_BYTES + payload_bytes;
            let rotate = head.is_none_or(|bytes| bytes + record_bytes > self.options.segment_bytes);
            let needed = record_bytes + if rotate { SEGMENT_HEADER_BYTES } else { 0 };
            used += needed;
            head =
                Some(if rotate { SEGMENT_HEADER_BYTES } else { head.unwrap_or(0) } + record_bytes);
            payload_bytes <= self.payload_limit() && used <= self.options.capacity_bytes
        })
    }

    /// The highest version `owner` has appended, the queued records counted: the next
    /// append must exceed it.
    pub fn newest_version(&self, owner: OwnerId) -> Version {
        lock(&self.writer).versions.get(&owner).copied().unwrap_or(Version(0))
    }

    /// Bytes a record of `record_bytes` takes at the head, a new segment's header
    /// counted when it does not fit in the current one; and whether it starts one.
    fn space_needed(&self, writer: &Writer, record_bytes: u64) -> (u64, bool) {
        let rotate =
            writer.head.is_none_or(|head| head.bytes + record_bytes > self.options.segment_bytes);
        (record_bytes + if rotate { SEGMENT_HEADER_BYTES } else { 0 }, rotate)
    }

    /// Flushes the batch being filled, and the next ones while more is queued (up to
    /// `LEADER_BATCHES_MAX`): handing over to another thread would leave the device idle
    /// until that thread is scheduled. The caller holds the lead (`writer.leader`); on
    /// return it has been released, or handed to a waiter of the pending batch.
    fn lead<'a>(&'a self, mut writer: MutexGuard<'a, Writer>) {
        let mut led = 0;
        // The batch flushed last (durable and applied): its waiters are woken once the
        // next batch's write is issued, so that they compete for the CPU with the
        // device's sync, not with the leader on its way to the next write.
        let mut flushed_last: Option<Arc<Ticket>> = None;
        loop {
            if let Some(cause) = writer.poisoned.clone() {
                // A compaction that could not delete its segment stopped the log while
                // this leader flushed: what is queued is never written (L5).
                if let Some(last) = flushed_last.take() {
                    last.finish(TicketState::Done);
                }
                writer.ticket.finish(TicketState::Failed(cause));
                writer.leader = false;
                return;
            }
            let batch = std::mem::take(&mut writer.pending);
            let ticket = std::mem::replace(&mut writer.ticket, Arc::new(Ticket::default()));
            drop(writer);
            // A stepped log reads no clock: its flush time is not measured.
            let flush_started = (self.options.commit == CommitMode::Group).then(stopwatch);
            let mut wake_last = || {
                if let Some(last) = flushed_last.take() {
                    last.finish(TicketState::Done);
                }
            };
            let flushed = self.flush(&batch, &mut wake_last);
            wake_last();
            if let Some(started) = flush_started {
                let nanos = started.elapsed().as_nanos() as u64;
                self.counters.flush_ns.fetch_add(nanos, Ordering::Relaxed);
            }
            let batch_bytes: u64 = batch.writes.iter().map(|w| w.bytes.len() as u64).sum();
            self.counters.bytes_flushed.fetch_add(batch_bytes, Ordering::Relaxed);
            match flushed {
                Ok(created) => {
                    let buffers = self.apply_batch(batch, created);
                    writer = lock(&self.writer);
                    writer.settle(buffers);
                }
                Err(cause) => {
                    writer = lock(&self.writer);
                    writer.poisoned = Some(cause.clone());
                    ticket.finish(TicketState::Failed(cause.clone()));
                    // Nothing more will be written: fail the batch being filled too.
                    writer.ticket.finish(TicketState::Failed(cause));
                    writer.leader = false;
                    return;
                }
            }
            led += 1;
            if writer.pending.records.is_empty() {
                writer.leader = false;
                drop(writer);
                ticket.finish(TicketState::Done);
                return;
            }
            if led >= LEADER_BATCHES_MAX {
                writer.ticket.hand_lead();
                drop(writer);
                ticket.finish(TicketState::Done);
                return;
            }
            flushed_last = Some(ticket);
        }
    }

    /// Writes and syncs a batch; returns the segment files it created.
    /// `written` runs once the last write is issued, before its sync (or on failure).
    fn flush(
        &self,
        batch: &Batch,
        written: &mut dyn FnMut(),
    ) -> std::result::Result<SegmentFiles, String> {
        let mut created = Vec::new();
        let where_ = self.disk.describe();
        let sync = |segment: SegmentId, file: &Arc<dyn DiskFile>| {
            let synced = match self.options.sync {
                SyncMode::Data => file.sync_data(),
                SyncMode::All => file.sync_all(),
            };
            synced.map_err(|error| format!("syncing {where_}/{segment}: {error}"))?;
            self.counters.syncs.fetch_add(1, Ordering::Relaxed);
            Ok::<(), String>(())
        };
        // A batch that spans a rotation writes the old segment, then the new one. The
        // old one is synced before the new one is created, so that a crash can only
        // ever tear the last segment: a bad tail anywhere else is damage.
        let mut last: Option<(SegmentId, Arc<dyn DiskFile>)> = None;
        for write in &batch.writes {
            let name = segment_file_name(write.segment);
            if let Some((segment, file)) = last.take() {
                if segment == write.segment {
                    last = Some((segment, file));
                } else {
                    sync(segment, &file)?;
                }
            }
            let file = if let Some((_, file)) = &last {
                file.clone()
            } else if write.create {
                let file = self
                    .disk
                    .create(&name)
                    .map_err(|error| format!("creating {where_}/{name}: {error}"))?;
                created.push((write.segment, file.clone()));
                file
            } else {
                // Created by an earlier batch, so in the segment table already.
                let shared = self.read_shared();
                match shared.segments.get(&write.segment) {
                    Some(segment) => segment.file.clone(),
                    None => return Err(format!("no open file for {name}")),
                }
            };
            if !write.bytes.is_empty() {
                file.write_all_at(&write.bytes, write.offset)
                    .map_err(|error| format!("writing {where_}/{name}: {error}"))?;
            }
            last = Some((write.segment, file));
        }
        written();
        if let Some((segment, file)) = &last {
            sync(*segment, file)?;
        }
        if !created.is_empty() {
            self.disk.sync_dir().map_err(|error| format!("syncing directory {where_}: {error}"))?;
            self.counters.dir_syncs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(created)
    }

    /// Makes a durable batch visible: new segments, lengths, index entries, counters.
    /// Returns the batch's write buffers, emptied, for reuse.
    fn apply_batch(&self, batch: Batch, created: SegmentFiles) -> Vec<Vec<u8>> {
        let records = batch.records.len() as u64;
        let mut shared = self.write_shared();
        for (segment, file) in created {
            shared.index.add_segment(segment);
            let replaced = shared.segments.insert(segment, Segment { file, bytes: 0 });
            assert!(replaced.is_none(), "L1: {segment} created twice");
        }
        for write in &batch.writes {
            if let Some(segment) = shared.segments.get_mut(&write.segment) {
                segment.bytes = segment.bytes.max(write.offset + write.bytes.len() as u64);
            }
        }
        for record in batch.records.iter().filter(|record| record.apply) {
            // The index learns only of records inside bytes the flush synced.
            let durable = shared.segments.get(&record.segment).map_or(0, |s| s.bytes);
            let end = record.offset + record.header.encoded_bytes();
            assert!(end <= durable, "L1: a record past the synced end of {}", record.segment);
            insert_header(&mut shared.index, &record.header, record.segment, record.offset);
        }
        drop(shared);
        self.counters.batches.fetch_add(1, Ordering::Relaxed);
        self.counters.records_per_batch[bucket(records)].fetch_add(1, Ordering::Relaxed);
        self.counters.batch_records_max.fetch_max(records, Ordering::Relaxed);
        batch
            .writes
            .into_iter()
            .map(|write| {
                let mut bytes = write.bytes;
                bytes.clear();
                bytes
            })
            .collect()
    }
}
