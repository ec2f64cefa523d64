//! The engine: segment files on a [`Disk`], group commit, recovery, reads, reclaim and
//! compaction.
//!
//! Writes go through one *writer* state (a mutex): an appender encodes its record into
//! the batch being filled, then either becomes the batch's *leader* (no flush under way)
//! or waits for the leader that will take it. The leader takes the whole batch, writes
//! it at the log head in one write per segment, syncs, applies it to the index and wakes
//! everyone: so one appender costs one write and one sync, and many share them.
//!
//! Lock order: `writer` before `shared`. The leader does its I/O holding neither.
//! An I/O error on the write path stops the log (`Poisoned`): after a failed write or
//! fsync the device's contents are unknown, so only recovery may decide them.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use somnus_types::{ByteRange, Version};

use crate::disk::{Disk, DiskFile, read_all, read_exact_at};
use crate::error::{Error, Result};
use crate::format::{
    self, PAYLOAD_BYTES_MAX, RECORD_HEADER_BYTES, RecordHeader, RecordKind, SEGMENT_HEADER_BYTES,
};
use crate::index::{CopyItem, DeleteAllEntry, Entry, Index, Painted};
use crate::scan::{SegmentEnd, is_unwritten_segment, scan_segment};
use crate::snapshot::{
    self, META_FILE, META_TMP_FILE, SNAPSHOT_FILE, SNAPSHOT_TMP_FILE, Snapshot, SnapshotRecord,
};
use crate::{LogId, Lsn, ObjectId, OwnerId, SegmentId, parse_segment_file_name, segment_file_name};

/// Which sync makes an append durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// fdatasync: the data and the metadata needed to read it (the file's size).
    Data,
    /// fsync: all metadata too.
    All,
}

/// How a log is opened and run.
#[derive(Clone, Debug)]
pub struct Options {
    /// A segment file is sealed when the next record would take it past this size.
    pub segment_bytes: u64,
    /// The most bytes all segment files may hold; an append past it is `Error::Full`.
    /// Invalidations, `delete_all` and compaction copies may go one segment past it, so
    /// that a full log can always be emptied.
    pub capacity_bytes: u64,
    pub sync: SyncMode,
    /// Open without writing anything (no recovery repairs, no appends).
    pub read_only: bool,
    /// Compaction picks a sealed segment whose live bytes are at most this percentage
    /// of its size (segments with none are deleted whatever this says).
    pub compact_live_percent_max: u64,
    /// The wall clock, in Unix milliseconds, stamped on records (their age in `inspect`).
    pub clock: fn() -> u64,
    /// The id a new log gets (`None`: one drawn from the clock and the process id).
    pub new_log_id: Option<LogId>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            segment_bytes: 64 << 20,
            capacity_bytes: 8 << 30,
            sync: SyncMode::Data,
            read_only: false,
            compact_live_percent_max: 50,
            clock: system_clock_ms,
            new_log_id: None,
        }
    }
}

/// Unix milliseconds from the system clock.
pub fn system_clock_ms() -> u64 {
    #[allow(
        clippy::disallowed_methods,
        reason = "a record's age is wall-clock metadata, not policy"
    )]
    let now = std::time::SystemTime::now();
    now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[allow(clippy::disallowed_methods, reason = "recovery and compaction report how long they took")]
fn stopwatch() -> std::time::Instant {
    std::time::Instant::now()
}

/// How the index was rebuilt at open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecoveryMode {
    /// A new, empty log.
    Created,
    /// From the snapshot of a clean close.
    Snapshot,
    /// By scanning every segment (after a crash, or because the snapshot was unusable:
    /// the reason is given).
    Scan { snapshot_refused: Option<String> },
}

/// A segment whose valid records end before bytes that were once written whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentDamage {
    pub segment: SegmentId,
    pub offset: u64,
    pub reason: String,
    /// Valid records found after the damage, which are not returned.
    pub records_after: u64,
}

/// What opening the log found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryReport {
    pub mode: RecoveryMode,
    pub duration: Duration,
    pub segments: u64,
    pub records: u64,
    pub bytes_scanned: u64,
    /// Segments that ended in an interrupted write, cut back to their last valid record.
    pub torn_tails: Vec<(SegmentId, u64)>,
    /// Segments whose damage hides records; they are kept as found for inspection.
    pub damage: Vec<SegmentDamage>,
    /// Segment files whose creation a crash interrupted (no header), removed.
    pub unwritten_removed: Vec<SegmentId>,
}

/// Bytes of a read that the log holds, at one version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub range: ByteRange,
    pub version: Version,
    pub bytes: Vec<u8>,
}

/// The answer to a read: pieces in order of offset, and the parts the log does not hold.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ReadResult {
    pub pieces: Vec<Piece>,
    pub missing: Vec<ByteRange>,
}

/// A valid extent an owner holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub object: ObjectId,
    pub range: ByteRange,
    pub version: Version,
}

/// A valid extent with its bytes, as reclaim hands it out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReclaimedExtent {
    pub object: ObjectId,
    pub range: ByteRange,
    pub version: Version,
    pub bytes: Vec<u8>,
}

/// One owner's share of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerUsage {
    pub owner: OwnerId,
    pub objects: u64,
    pub records: u64,
    pub live_bytes: u64,
    pub version_max: Version,
    /// When the oldest record that still holds live bytes was appended (Unix ms).
    pub oldest_live_ms: Option<u64>,
}

/// Counters of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Bytes reads can return (the latest, non-invalidated versions).
    pub live_bytes: u64,
    /// Bytes of segment files not live: superseded or invalidated data, markers,
    /// headers, torn tails. Compaction turns them into free space.
    pub obsolete_bytes: u64,
    pub used_bytes: u64,
    pub capacity_bytes: u64,
    pub records: u64,
    pub segments: u64,
    pub owners: u64,
    pub appends: u64,
    pub invalidates: u64,
    pub delete_alls: u64,
    /// File syncs (fdatasync or fsync) of segments.
    pub syncs: u64,
    /// Directory syncs (segment creation and deletion).
    pub dir_syncs: u64,
    /// Group commits; `records_per_batch[i]` counts those of 2^i to 2^(i+1)-1 records.
    pub batches: u64,
    pub records_per_batch: Vec<u64>,
    pub batch_records_max: u64,
    pub compactions: u64,
    pub segments_deleted: u64,
    pub bytes_copied: u64,
    /// Time spent writing and syncing batches (the device busy on the log's behalf).
    pub flush_time: Duration,
    /// Bytes written to segments: records, headers, compaction copies.
    pub bytes_written: u64,
    pub recovery: RecoveryReport,
}

/// What one compaction step did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactionReport {
    pub segment: SegmentId,
    pub segment_bytes: u64,
    pub records_copied: u64,
    pub bytes_copied: u64,
    pub duration: Duration,
}

const BATCH_BUCKETS: usize = 24;

/// The most batches one appender flushes in a row before it hands the lead over: enough
/// to keep the device busy across scheduling delays, few enough to bound its own wait.
const LEADER_BATCHES_MAX: u32 = 4;

#[derive(Default)]
struct Counters {
    appends: AtomicU64,
    invalidates: AtomicU64,
    delete_alls: AtomicU64,
    syncs: AtomicU64,
    dir_syncs: AtomicU64,
    batches: AtomicU64,
    records_per_batch: [AtomicU64; BATCH_BUCKETS],
    batch_records_max: AtomicU64,
    compactions: AtomicU64,
    segments_deleted: AtomicU64,
    bytes_copied: AtomicU64,
    flush_ns: AtomicU64,
    bytes_flushed: AtomicU64,
}

/// Open segment files, by id.
type SegmentFiles = Vec<(SegmentId, Arc<dyn DiskFile>)>;

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

/// A segment file present in the log.
struct Segment {
    file: Arc<dyn DiskFile>,
    /// Bytes of the file (durable ones: the index only learns of synced writes).
    bytes: u64,
}

/// The index and the segment table, which reads share.
struct Shared {
    index: Index,
    segments: BTreeMap<SegmentId, Segment>,
}

/// A record in the batch being filled, where it will be once written.
struct PendingRecord {
    header: RecordHeader,
    segment: SegmentId,
    offset: u64,
    /// Compaction copies enter the index when their source segment leaves it.
    apply: bool,
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
struct Batch {
    writes: Vec<SegmentWrite>,
    records: Vec<PendingRecord>,
}

/// The log head: the segment new records go to.
struct Head {
    segment: SegmentId,
    /// Bytes of the segment, the pending ones included.
    bytes: u64,
}

struct Writer {
    head: Option<Head>,
    next_segment: SegmentId,
    next_lsn: Lsn,
    /// Bytes of all segment files, the pending ones included.
    used_bytes: u64,
    /// The highest version per owner, the pending ones included: appends must exceed it.
    versions: BTreeMap<OwnerId, Version>,
    pending: Batch,
    /// Waiters of the batch being filled wait on its ticket.
    ticket: Arc<Ticket>,
    /// An appender is flushing (or has been handed the lead).
    leader: bool,
    /// Segments that pending or in-flight batches write: never compacted.
    unsettled: BTreeSet<SegmentId>,
    poisoned: Option<String>,
    closed: bool,
    /// Write buffers of flushed batches, reused so that batches do not regrow them.
    spare: Vec<Vec<u8>>,
}

/// The log. Share it between threads with an `Arc`; every method takes `&self`.
pub struct LogStore {
    disk: Arc<dyn Disk>,
    options: Options,
    log: LogId,
    shared: RwLock<Shared>,
    writer: Mutex<Writer>,
    compacting: Mutex<()>,
    counters: Counters,
    recovery: RecoveryReport,
    /// Segments found damaged at open: never compacted, and no snapshot is written while
    /// they exist (the next open must find the damage again).
    damaged: BTreeSet<SegmentId>,
    _lock: Box<dyn Any + Send + Sync>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The engine never panics holding a lock on purpose; if a bug did, failing every
    // later call would hide the original panic, so carry on with the state as it is.
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn bucket(records: u64) -> usize {
    (63 - records.max(1).leading_zeros() as usize).min(BATCH_BUCKETS - 1)
}

impl LogStore {
    /// Opens the log in `disk` (creating an empty one if the directory holds none),
    /// recovering its index: from the snapshot of a clean close, else by scanning every
    /// segment up to its first bad record.
    pub fn open(disk: Arc<dyn Disk>, options: Options) -> Result<LogStore> {
        if options.segment_bytes < SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES + 1 {
            return Err(Error::Invalid(format!(
                "segment_bytes {} cannot hold a record",
                options.segment_bytes
            )));
        }
        let started = stopwatch();
        let where_ = disk.describe();
        let dir_lock = disk
            .lock(!options.read_only)
            .map_err(|source| Error::io("locking", where_.clone(), source))?;
        let names = disk.list().map_err(|source| Error::io("listing", where_.clone(), source))?;
        let mut segment_ids: Vec<SegmentId> =
            names.iter().filter_map(|name| parse_segment_file_name(name)).collect();
        segment_ids.sort();
        let has = |name: &str| names.iter().any(|n| n == name);

        let created = !has(META_FILE);
        let log = if created {
            if !segment_ids.is_empty() {
                return Err(Error::NotALog {
                    path: where_,
                    reason: format!("{} segment files but no meta file", segment_ids.len()),
                });
            }
            if options.read_only {
                return Err(Error::NotALog { path: where_, reason: "no meta file".into() });
            }
            let log = options.new_log_id.unwrap_or_else(|| {
                LogId(system_clock_ms().rotate_left(20) ^ u64::from(std::process::id()))
            });
            write_durably(disk.as_ref(), META_TMP_FILE, META_FILE, &snapshot::encode_meta(log))?;
            log
        } else {
            let file = disk
                .open(META_FILE, false)
                .map_err(|source| Error::io("opening", format!("{where_}/{META_FILE}"), source))?;
            let bytes = read_all(file.as_ref())
                .map_err(|source| Error::io("reading", format!("{where_}/{META_FILE}"), source))?;
            snapshot::decode_meta(&bytes).map_err(|reason| Error::NotALog {
                path: format!("{where_}/{META_FILE}"),
                reason,
            })?
        };

        let mut shared = Shared { index: Index::default(), segments: BTreeMap::new() };
        let mut report = RecoveryReport {
            mode: RecoveryMode::Created,
            duration: Duration::ZERO,
            segments: 0,
            records: 0,
            bytes_scanned: 0,
            torn_tails: Vec::new(),
            damage: Vec::new(),
            unwritten_removed: Vec::new(),
        };
        let mut next_lsn = Lsn(1);
        if segment_ids.last().is_some_and(|id| id.0 == u64::MAX) {
            return Err(Error::NotALog {
                path: where_,
                reason: format!("{} is past the last segment id", SegmentId(u64::MAX)),
            });
        }
        let mut next_segment = SegmentId(segment_ids.last().map_or(1, |id| id.0 + 1));

        if !created {
            let snapshot_refused = if has(SNAPSHOT_FILE) {
                match load_snapshot(disk.as_ref(), log, &segment_ids) {
                    Ok((snapshot, files)) => {
                        next_lsn = snapshot.next_lsn;
                        for (id, file) in files {
                            shared.index.add_segment(id);
                            let bytes = snapshot
                                .segments
                                .iter()
                                .find(|(s, _)| *s == id)
                                .map_or(0, |(_, len)| *len);
                            shared.segments.insert(id, Segment { file, bytes });
                        }
                        for record in &snapshot.records {
                            insert_header(
                                &mut shared.index,
                                &record.header,
                                record.segment,
                                record.offset,
                            );
                        }
                        report.mode = RecoveryMode::Snapshot;
                        None
                    }
                    Err(reason) => Some(reason),
                }
            } else {
                Some("no snapshot (the log was not closed cleanly)".to_string())
            };
            if let Some(reason) = snapshot_refused {
                report.mode =
                    RecoveryMode::Scan { snapshot_refused: has(SNAPSHOT_FILE).then_some(reason) };
                next_lsn = scan_segments(
                    disk.as_ref(),
                    log,
                    &segment_ids,
                    options.read_only,
                    &mut shared,
                    &mut report,
                )?;
            }
            if !options.read_only {
                let mut removed = false;
                for name in [SNAPSHOT_FILE, SNAPSHOT_TMP_FILE, META_TMP_FILE] {
                    if has(name) {
                        disk.remove(name)
                            .map_err(|source| Error::io("removing", name.to_string(), source))?;
                        removed = true;
                    }
                }
                if removed {
                    disk.sync_dir()
                        .map_err(|source| Error::io("syncing", where_.clone(), source))?;
                }
            }
        }
        if let Some(last) = report.unwritten_removed.last() {
            next_segment = next_segment.max(SegmentId(last.0 + 1));
        }

        let versions = shared.index.owner_versions();
        let used_bytes = shared.segments.values().map(|segment| segment.bytes).sum();
        report.segments = shared.segments.len() as u64;
        report.records = shared.index.records();
        report.duration = started.elapsed();
        Ok(LogStore {
            disk,
            options,
            log,
            shared: RwLock::new(shared),
            writer: Mutex::new(Writer {
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
            }),
            compacting: Mutex::new(()),
            counters: Counters::default(),
            damaged: report.damage.iter().map(|damage| damage.segment).collect(),
            recovery: report,
            _lock: dir_lock,
        })
    }

    pub fn log_id(&self) -> LogId {
        self.log
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    /// What opening the log found.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    fn read_shared(&self) -> RwLockReadGuard<'_, Shared> {
        self.shared.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write_shared(&self) -> RwLockWriteGuard<'_, Shared> {
        self.shared.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

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
            return Err(Error::Invalid(format!(
                "{} bytes given for range {range} of {} bytes",
                bytes.len(),
                range.size_bytes()
            )));
        }
        if range.is_empty() {
            return Err(Error::Invalid("an append of no bytes".into()));
        }
        let limit = self.payload_limit();
        if range.size_bytes() > limit {
            return Err(Error::Invalid(format!(
                "an append of {} bytes is over the largest record ({limit} bytes); split it",
                range.size_bytes()
            )));
        }
        // The checksum of the payload is the bulk of the work: done before the lock.
        let payload_crc = crc32c::crc32c(bytes);
        self.commit(|writer| {
            let last = writer.versions.get(&owner).copied().unwrap_or(Version(0));
            if version <= last {
                return Err(Error::Invalid(format!(
                    "owner {} appended version {} but already holds version {}: versions must grow",
                    owner.0, version.0, last.0
                )));
            }
            let header = self.new_header(writer, RecordKind::Data, owner, object, range, version);
            self.enqueue(writer, header, bytes, payload_crc, true, false)?;
            writer.versions.insert(owner, version);
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
            return Err(Error::Invalid("an invalidation of no bytes".into()));
        }
        self.commit(|writer| {
            let last = writer.versions.get(&owner).copied().unwrap_or(Version(0));
            if version > last {
                return Err(Error::Invalid(format!(
                    "owner {} invalidated version {} but its newest version is {}",
                    owner.0, version.0, last.0
                )));
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
    fn enqueue(
        &self,
        writer: &mut Writer,
        header: RecordHeader,
        payload: &[u8],
        payload_crc: u32,
        apply: bool,
        headroom: bool,
    ) -> Result<()> {
        let record_bytes = header.encoded_bytes();
        let rotate = match &writer.head {
            None => true,
            Some(head) => head.bytes + record_bytes > self.options.segment_bytes,
        };
        let needed = record_bytes + if rotate { SEGMENT_HEADER_BYTES } else { 0 };
        let capacity =
            self.options.capacity_bytes + if headroom { self.options.segment_bytes } else { 0 };
        if writer.used_bytes + needed > capacity {
            return Err(Error::Full {
                needed,
                used: writer.used_bytes,
                capacity: self.options.capacity_bytes,
            });
        }
        if rotate {
            let segment = writer.next_segment;
            writer.next_segment = SegmentId(segment.0 + 1);
            writer.head = Some(Head { segment, bytes: SEGMENT_HEADER_BYTES });
            let mut bytes = writer.spare.pop().unwrap_or_default();
            bytes.extend_from_slice(&format::encode_segment_header(self.log, segment));
            writer.pending.writes.push(SegmentWrite { segment, create: true, offset: 0, bytes });
            writer.used_bytes += SEGMENT_HEADER_BYTES;
        }
        let Some(head) = writer.head.as_mut() else {
            return Err(Error::Invalid("no log head".into()));
        };
        let offset = head.bytes;
        let segment = head.segment;
        head.bytes += record_bytes;
        writer.used_bytes += record_bytes;
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

    /// Runs `enqueue` under the writer lock, then waits until the batch holding what it
    /// queued is durable (leading the flush if no one is).
    fn commit<T>(&self, enqueue: impl FnOnce(&mut Writer) -> Result<T>) -> Result<T> {
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
            let batch = std::mem::take(&mut writer.pending);
            let ticket = std::mem::replace(&mut writer.ticket, Arc::new(Ticket::default()));
            drop(writer);
            let flush_started = stopwatch();
            let mut wake_last = || {
                if let Some(last) = flushed_last.take() {
                    last.finish(TicketState::Done);
                }
            };
            let flushed = self.flush(&batch, &mut wake_last);
            wake_last();
            self.counters
                .flush_ns
                .fetch_add(flush_started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            let batch_bytes: u64 = batch.writes.iter().map(|w| w.bytes.len() as u64).sum();
            self.counters.bytes_flushed.fetch_add(batch_bytes, Ordering::Relaxed);
            match flushed {
                Ok(created) => {
                    let buffers = self.apply_batch(batch, created);
                    writer = lock(&self.writer);
                    for buffer in buffers {
                        if writer.spare.len() < 4 {
                            writer.spare.push(buffer);
                        }
                    }
                    // Segments no pending batch writes are settled (the head stays).
                    let pending: BTreeSet<SegmentId> =
                        writer.pending.writes.iter().map(|write| write.segment).collect();
                    let head = writer.head.as_ref().map(|head| head.segment);
                    writer.unsettled.retain(|s| pending.contains(s) || Some(*s) == head);
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
            shared.segments.insert(segment, Segment { file, bytes: 0 });
        }
        for write in &batch.writes {
            if let Some(segment) = shared.segments.get_mut(&write.segment) {
                segment.bytes = segment.bytes.max(write.offset + write.bytes.len() as u64);
            }
        }
        for record in batch.records.iter().filter(|record| record.apply) {
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

    /// The latest non-invalidated version of every byte of `range`, and what the log
    /// does not hold. Every record read is checked against its checksum.
    pub fn read(&self, owner: OwnerId, object: ObjectId, range: ByteRange) -> Result<ReadResult> {
        let (painted, missing, files) = {
            let shared = self.read_shared();
            let (painted, missing) = shared.index.read(owner, object, range);
            let files = files_of(&shared, painted.iter().map(|piece| piece.entry.segment))?;
            (painted, missing, files)
        };
        let mut pieces: Vec<Piece> = Vec::with_capacity(painted.len());
        let mut last: Option<((SegmentId, u64), Vec<u8>)> = None;
        for piece in painted {
            let key = (piece.entry.segment, piece.entry.offset);
            if last.as_ref().is_none_or(|(at, _)| *at != key) {
                let payload = self.read_record(&files, &piece.entry)?;
                last = Some((key, payload));
            }
            if let Some((_, payload)) = &last {
                pieces.push(Piece {
                    range: piece.range,
                    version: piece.entry.version,
                    bytes: slice_of(payload, piece.entry.range, piece.range).to_vec(),
                });
            }
        }
        Ok(ReadResult { pieces, missing })
    }

    /// Reads a record's payload, checking that the header is the one the index names
    /// and that the checksum matches.
    fn read_record(
        &self,
        files: &BTreeMap<SegmentId, Arc<dyn DiskFile>>,
        entry: &Entry,
    ) -> Result<Vec<u8>> {
        let Some(file) = files.get(&entry.segment) else {
            return Err(Error::Corrupt {
                segment: entry.segment,
                offset: entry.offset,
                reason: "segment missing".into(),
            });
        };
        let total = RECORD_HEADER_BYTES + entry.range.size_bytes() * u64::from(!entry.marker);
        let mut bytes = vec![0; total as usize];
        read_exact_at(file.as_ref(), &mut bytes, entry.offset).map_err(|source| {
            Error::io("reading", format!("{}/{}", self.disk.describe(), entry.segment), source)
        })?;
        let corrupt = |reason: &str| Error::Corrupt {
            segment: entry.segment,
            offset: entry.offset,
            reason: reason.to_string(),
        };
        let header_bytes = &bytes[..RECORD_HEADER_BYTES as usize];
        let (header, crc) = format::decode_header(self.log, entry.segment, header_bytes)
            .map_err(|invalid| corrupt(&format!("record header invalid ({invalid:?})")))?;
        if header.lsn != entry.lsn || header.range != entry.range || header.version != entry.version
        {
            return Err(corrupt("record is not the one the index names"));
        }
        let payload = &bytes[RECORD_HEADER_BYTES as usize..];
        if !format::checksum_matches(header_bytes, payload, crc) {
            return Err(corrupt("checksum mismatch"));
        }
        Ok(payload.to_vec())
    }

    /// The valid extents an owner holds (what reclaim would copy), without their bytes.
    pub fn extents(&self, owner: OwnerId) -> Vec<Extent> {
        let shared = self.read_shared();
        shared
            .index
            .extents(owner)
            .into_iter()
            .map(|(object, piece)| Extent {
                object,
                range: piece.range,
                version: piece.entry.version,
            })
            .collect()
    }

    /// Iterates the valid extents an owner holds, with their bytes, for the background
    /// copy back to the home replica. The set is taken when this is called; each
    /// extent's bytes are read (and checked) as the iterator reaches it.
    pub fn reclaim(&self, owner: OwnerId) -> Result<Reclaim<'_>> {
        let shared = self.read_shared();
        let extents = shared.index.extents(owner);
        let files = files_of(&shared, extents.iter().map(|(_, piece)| piece.entry.segment))?;
        drop(shared);
        Ok(Reclaim { store: self, extents: extents.into_iter(), files })
    }

    /// The owners with records in the log.
    pub fn owners(&self) -> Vec<OwnerUsage> {
        let shared = self.read_shared();
        shared
            .index
            .owner_summaries()
            .into_iter()
            .map(|s| OwnerUsage {
                owner: s.owner,
                objects: s.objects,
                records: s.records,
                live_bytes: s.live_bytes,
                version_max: s.version_max,
                oldest_live_ms: s.oldest_live_ms,
            })
            .collect()
    }

    /// The segments: id, bytes, records, live bytes.
    pub fn segments(&self) -> Vec<(SegmentId, u64, u64, u64)> {
        let shared = self.read_shared();
        shared
            .segments
            .iter()
            .map(|(&id, segment)| {
                (
                    id,
                    segment.bytes,
                    shared.index.segment_records(id),
                    shared.index.segment_live_bytes(id),
                )
            })
            .collect()
    }

    pub fn stats(&self) -> Stats {
        let (live_bytes, records, segments, owners) = {
            let shared = self.read_shared();
            (
                shared.index.live_bytes(),
                shared.index.records(),
                shared.segments.len() as u64,
                shared.index.owner_count(),
            )
        };
        let used_bytes = lock(&self.writer).used_bytes;
        let c = &self.counters;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Stats {
            live_bytes,
            obsolete_bytes: used_bytes.saturating_sub(live_bytes),
            used_bytes,
            capacity_bytes: self.options.capacity_bytes,
            records,
            segments,
            owners,
            appends: get(&c.appends),
            invalidates: get(&c.invalidates),
            delete_alls: get(&c.delete_alls),
            syncs: get(&c.syncs),
            dir_syncs: get(&c.dir_syncs),
            batches: get(&c.batches),
            records_per_batch: c.records_per_batch.iter().map(get).collect(),
            batch_records_max: get(&c.batch_records_max),
            compactions: get(&c.compactions),
            segments_deleted: get(&c.segments_deleted),
            bytes_copied: get(&c.bytes_copied),
            flush_time: Duration::from_nanos(get(&c.flush_ns)),
            bytes_written: get(&c.bytes_flushed),
            recovery: self.recovery.clone(),
        }
    }

    /// One step of garbage collection: among the sealed segments whose live bytes are
    /// at most `compact_live_percent_max` of their size, the first (fewest live bytes
    /// first) whose copies would take at most that share too (deletion markers that must
    /// be kept count) has its records copied forward and is deleted. `None` if none
    /// qualifies.
    pub fn compact(&self) -> Result<Option<CompactionReport>> {
        let _one_at_a_time = lock(&self.compacting);
        for segment in self.candidates() {
            if !self.is_settled(segment) {
                continue;
            }
            let Some((plan, files, segment_bytes)) = self.plan(segment)? else { continue };
            let copy_bytes: u64 = plan.iter().map(|item| item.header.encoded_bytes()).sum();
            if u128::from(copy_bytes) * 100
                > u128::from(segment_bytes) * u128::from(self.options.compact_live_percent_max)
            {
                continue;
            }
            return self.run_compaction(segment, plan, files, segment_bytes).map(Some);
        }
        Ok(None)
    }

    /// Runs compaction steps until no segment qualifies; returns how many ran.
    pub fn collect_garbage(&self) -> Result<u64> {
        let mut steps = 0;
        while self.compact()?.is_some() {
            steps += 1;
        }
        Ok(steps)
    }

    /// The segments worth a look, fewest live bytes (as a share of size) first; the
    /// damaged ones are kept for the operator (`verify`).
    fn candidates(&self) -> Vec<SegmentId> {
        const LOOK_AT_MAX: usize = 8;
        let shared = self.read_shared();
        let mut candidates: Vec<(u128, u128, SegmentId)> = shared
            .segments
            .iter()
            .filter(|(id, _)| !self.damaged.contains(id))
            .map(|(&id, segment)| {
                let live = u128::from(shared.index.segment_live_bytes(id));
                (live, u128::from(segment.bytes.max(1)), id)
            })
            .filter(|&(live, bytes, _)| {
                live * 100 <= bytes * u128::from(self.options.compact_live_percent_max)
            })
            .collect();
        candidates.sort_by(|a, b| (a.0 * b.1, a.2).cmp(&(b.0 * a.1, b.2)));
        candidates.into_iter().take(LOOK_AT_MAX).map(|(_, _, id)| id).collect()
    }

    /// Whether `segment` is sealed and no batch writes it: then it never changes again.
    fn is_settled(&self, segment: SegmentId) -> bool {
        let writer = lock(&self.writer);
        !writer.unsettled.contains(&segment)
            && writer.head.as_ref().is_none_or(|head| head.segment != segment)
    }

    /// The copies compaction of `segment` needs, its file, its size.
    #[allow(clippy::type_complexity)]
    fn plan(
        &self,
        segment: SegmentId,
    ) -> Result<Option<(Vec<CopyItem>, BTreeMap<SegmentId, Arc<dyn DiskFile>>, u64)>> {
        let shared = self.read_shared();
        let Some(info) = shared.segments.get(&segment) else { return Ok(None) };
        let plan = shared.index.plan_compaction(segment);
        let files = files_of(&shared, std::iter::once(segment))?;
        Ok(Some((plan, files, info.bytes)))
    }

    /// Copies the live records of `segment` forward and deletes it, however little it
    /// frees. The head, segments with writes in flight and damaged ones are refused.
    pub fn compact_segment(&self, segment: SegmentId) -> Result<CompactionReport> {
        let _one_at_a_time = lock(&self.compacting);
        if self.damaged.contains(&segment) {
            return Err(Error::Invalid(format!(
                "{segment} is damaged and kept as found for inspection (somnus logstore verify)"
            )));
        }
        if !self.is_settled(segment) {
            return Err(Error::Invalid(format!("{segment} is being written")));
        }
        let Some((plan, files, segment_bytes)) = self.plan(segment)? else {
            return Err(Error::Invalid(format!("no segment {segment}")));
        };
        self.run_compaction(segment, plan, files, segment_bytes)
    }

    /// The compaction itself; the caller holds `compacting` and checked the segment.
    fn run_compaction(
        &self,
        segment: SegmentId,
        plan: Vec<CopyItem>,
        files: BTreeMap<SegmentId, Arc<dyn DiskFile>>,
        segment_bytes: u64,
    ) -> Result<CompactionReport> {
        let started = stopwatch();
        let mut copied: Vec<(RecordHeader, SegmentId, u64)> = Vec::with_capacity(plan.len());
        let mut bytes_copied = 0;
        if let Err(error) = self.copy_forward(&plan, &files, &mut copied, &mut bytes_copied) {
            return Err(self.abandon_compaction(copied, error));
        }
        // The copies are durable: swap them in for the segment, then delete it. A log
        // closed or stopped meanwhile is left as it is (its snapshot or its recovery
        // must find what it expects).
        {
            let writer = lock(&self.writer);
            if let Some(cause) = &writer.poisoned {
                let error = Error::Poisoned { cause: cause.clone() };
                drop(writer);
                return Err(self.abandon_compaction(copied, error));
            }
            if writer.closed {
                drop(writer);
                return Err(self.abandon_compaction(copied, Error::Closed));
            }
        }
        {
            let mut shared = self.write_shared();
            for (header, at_segment, offset) in &copied {
                insert_header(&mut shared.index, header, *at_segment, *offset);
            }
            shared.index.remove_segment(segment);
            shared.segments.remove(&segment);
        }
        let name = segment_file_name(segment);
        let where_ = self.disk.describe();
        // The index has forgotten the segment: if it cannot be deleted, what hides its
        // records may be collected next and a recovery would bring them back. Stop.
        let deleted = self
            .disk
            .remove(&name)
            .map_err(|source| Error::io("removing", format!("{where_}/{name}"), source))
            .and_then(|()| {
                self.disk.sync_dir().map_err(|source| Error::io("syncing", where_.clone(), source))
            });
        let mut writer = lock(&self.writer);
        if let Err(error) = deleted {
            writer.poisoned.get_or_insert_with(|| error.to_string());
            return Err(error);
        }
        writer.used_bytes -= segment_bytes;
        drop(writer);
        self.counters.dir_syncs.fetch_add(1, Ordering::Relaxed);
        self.counters.compactions.fetch_add(1, Ordering::Relaxed);
        self.counters.segments_deleted.fetch_add(1, Ordering::Relaxed);
        self.counters.bytes_copied.fetch_add(bytes_copied, Ordering::Relaxed);
        Ok(CompactionReport {
            segment,
            segment_bytes,
            records_copied: copied.len() as u64,
            bytes_copied,
            duration: started.elapsed(),
        })
    }

    /// Writes the copies of a plan through group commit, in chunks so that appends
    /// never wait behind one huge write; `copied` gets every copy made durable.
    fn copy_forward(
        &self,
        plan: &[CopyItem],
        files: &BTreeMap<SegmentId, Arc<dyn DiskFile>>,
        copied: &mut Vec<(RecordHeader, SegmentId, u64)>,
        bytes_copied: &mut u64,
    ) -> Result<()> {
        const CHUNK_BYTES: u64 = 4 << 20;
        let mut chunk: Vec<(RecordHeader, Vec<u8>)> = Vec::new();
        let mut chunk_bytes = 0;
        for (i, item) in plan.iter().enumerate() {
            let header = item.header;
            let payload = if header.kind == RecordKind::Data {
                let entry = Entry {
                    marker: false,
                    range: item.source_range,
                    version: header.version,
                    lsn: header.lsn,
                    written_ms: header.written_ms,
                    segment: item.source_segment,
                    offset: item.source_offset,
                };
                let whole = self.read_record(files, &entry)?;
                slice_of(&whole, item.source_range, header.range).to_vec()
            } else {
                Vec::new()
            };
            chunk_bytes += header.encoded_bytes();
            *bytes_copied += payload.len() as u64;
            chunk.push((header, payload));
            if chunk_bytes < CHUNK_BYTES && i + 1 < plan.len() {
                continue;
            }
            let mut placed = Vec::with_capacity(chunk.len());
            let committed = self.commit(|writer| {
                for (header, payload) in &chunk {
                    let crc = crc32c::crc32c(payload);
                    self.enqueue(writer, *header, payload, crc, false, true)?;
                    if let Some(record) = writer.pending.records.last() {
                        placed.push((*header, record.segment, record.offset));
                    }
                }
                Ok(())
            });
            match committed {
                Ok(()) => copied.append(&mut placed),
                // The flush failed: the copies may not be on the device.
                Err(error @ Error::Poisoned { .. }) => return Err(error),
                // What was queued before the error was flushed: it is on the device.
                Err(error) => {
                    copied.append(&mut placed);
                    return Err(error);
                }
            }
            chunk.clear();
            chunk_bytes = 0;
        }
        Ok(())
    }

    /// A compaction that stops part-way keeps its segment; the copies it made durable
    /// join the index beside their originals (a copy means what its original means), so
    /// that the index still holds every record on the device and the garbage rules stay
    /// sound.
    fn abandon_compaction(
        &self,
        copied: Vec<(RecordHeader, SegmentId, u64)>,
        error: Error,
    ) -> Error {
        if !copied.is_empty() {
            let mut shared = self.write_shared();
            for (header, at_segment, offset) in &copied {
                insert_header(&mut shared.index, header, *at_segment, *offset);
            }
        }
        error
    }

    /// Stops accepting writes, waits for those under way, and writes the index snapshot
    /// so that the next open is fast (unless open found damage: then the next open
    /// scans and reports it again). Calls after this fail with `Closed`.
    pub fn close(&self) -> Result<()> {
        let next_lsn = {
            let mut writer = lock(&self.writer);
            writer.closed = true;
            while writer.leader || (!writer.pending.records.is_empty() && writer.poisoned.is_none())
            {
                // The appenders drive their batches; look again in a moment.
                drop(writer);
                std::thread::sleep(Duration::from_millis(1));
                writer = lock(&self.writer);
            }
            if let Some(cause) = &writer.poisoned {
                return Err(Error::Poisoned { cause: cause.clone() });
            }
            writer.next_lsn
        };
        if self.options.read_only || !self.damaged.is_empty() {
            // Without a snapshot the next open scans, and reports the damage again.
            return Ok(());
        }
        // A compaction under way fails its next commit (closed) or finishes its swap.
        let _no_compaction = lock(&self.compacting);
        let snapshot = {
            let shared = self.read_shared();
            Snapshot {
                log: self.log,
                next_lsn,
                segments: shared.segments.iter().map(|(&id, s)| (id, s.bytes)).collect(),
                records: shared
                    .index
                    .all_records()
                    .into_iter()
                    .map(|(owner, object, kind, entry)| SnapshotRecord {
                        header: RecordHeader {
                            kind,
                            owner,
                            object,
                            range: entry.range,
                            version: entry.version,
                            lsn: entry.lsn,
                            written_ms: entry.written_ms,
                        },
                        segment: entry.segment,
                        offset: entry.offset,
                    })
                    .collect(),
            }
        };
        write_durably(
            self.disk.as_ref(),
            SNAPSHOT_TMP_FILE,
            SNAPSHOT_FILE,
            &snapshot::encode_snapshot(&snapshot),
        )
    }
}

/// A background thread that collects garbage every `interval` until dropped: the
/// "compacted in the background" of the log, for callers without a runtime of their own.
pub struct Compactor {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
    failure: Arc<Mutex<Option<String>>>,
}

impl Compactor {
    /// Starts collecting garbage in `store` every `interval`.
    pub fn start(store: Arc<LogStore>, interval: Duration) -> Compactor {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let failure = Arc::new(Mutex::new(None));
        let (stop_in, failure_in) = (stop.clone(), failure.clone());
        #[allow(
            clippy::disallowed_methods,
            reason = "the engine, not the core: it may own a thread"
        )]
        let thread = std::thread::spawn(move || {
            let (stopped, wake) = &*stop_in;
            let mut stopped_now = lock(stopped);
            while !*stopped_now {
                drop(stopped_now);
                match store.collect_garbage() {
                    Ok(_) | Err(Error::Closed) => {}
                    Err(error) => {
                        // Keep the first failure for the owner; a poisoned log stops us.
                        lock(&failure_in).get_or_insert_with(|| error.to_string());
                        if matches!(error, Error::Poisoned { .. }) {
                            return;
                        }
                    }
                }
                stopped_now = lock(stopped);
                if !*stopped_now {
                    stopped_now = wake
                        .wait_timeout(stopped_now, interval)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0;
                }
            }
        });
        Compactor { stop, thread: Some(thread), failure }
    }

    /// The first error a compaction step met, if any (steps continue after errors other
    /// than a stopped log).
    pub fn failure(&self) -> Option<String> {
        lock(&self.failure).clone()
    }
}

impl Drop for Compactor {
    fn drop(&mut self) {
        *lock(&self.stop.0) = true;
        self.stop.1.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Iterator over an owner's valid extents with their bytes; see [`LogStore::reclaim`].
pub struct Reclaim<'a> {
    store: &'a LogStore,
    extents: std::vec::IntoIter<(ObjectId, Painted)>,
    files: BTreeMap<SegmentId, Arc<dyn DiskFile>>,
}

impl Reclaim<'_> {
    /// Extents not yet handed out.
    pub fn remaining(&self) -> usize {
        self.extents.len()
    }
}

impl Iterator for Reclaim<'_> {
    type Item = Result<ReclaimedExtent>;

    fn next(&mut self) -> Option<Self::Item> {
        let (object, piece) = self.extents.next()?;
        Some(self.store.read_record(&self.files, &piece.entry).map(|payload| ReclaimedExtent {
            object,
            range: piece.range,
            version: piece.entry.version,
            bytes: slice_of(&payload, piece.entry.range, piece.range).to_vec(),
        }))
    }
}

/// The bytes of `part` in the payload of a record over `whole`.
fn slice_of(payload: &[u8], whole: ByteRange, part: ByteRange) -> &[u8] {
    let start = (part.start - whole.start) as usize;
    &payload[start..start + part.size_bytes() as usize]
}

fn files_of(
    shared: &Shared,
    segments: impl Iterator<Item = SegmentId>,
) -> Result<BTreeMap<SegmentId, Arc<dyn DiskFile>>> {
    let mut files = BTreeMap::new();
    for segment in segments {
        if files.contains_key(&segment) {
            continue;
        }
        let Some(info) = shared.segments.get(&segment) else {
            return Err(Error::Corrupt { segment, offset: 0, reason: "segment missing".into() });
        };
        files.insert(segment, info.file.clone());
    }
    Ok(files)
}

fn insert_header(index: &mut Index, header: &RecordHeader, segment: SegmentId, offset: u64) {
    match header.kind {
        RecordKind::DeleteAll => index.insert_delete_all(
            header.owner,
            DeleteAllEntry { lsn: header.lsn, written_ms: header.written_ms, segment, offset },
        ),
        RecordKind::Data | RecordKind::Invalidate => {
            index.insert(
                header.owner,
                header.object,
                Entry {
                    marker: header.kind == RecordKind::Invalidate,
                    range: header.range,
                    version: header.version,
                    lsn: header.lsn,
                    written_ms: header.written_ms,
                    segment,
                    offset,
                },
            );
        }
    }
}

/// Writes `bytes` to `name` atomically and durably: a temporary file, synced, renamed
/// over, and the directory synced.
fn write_durably(disk: &dyn Disk, tmp: &str, name: &str, bytes: &[u8]) -> Result<()> {
    let where_ = disk.describe();
    let path = |file: &str| format!("{where_}/{file}");
    match disk.remove(tmp) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(Error::io("removing", path(tmp), source)),
    }
    let file = disk.create(tmp).map_err(|source| Error::io("creating", path(tmp), source))?;
    file.write_all_at(bytes, 0).map_err(|source| Error::io("writing", path(tmp), source))?;
    file.sync_all().map_err(|source| Error::io("syncing", path(tmp), source))?;
    disk.rename(tmp, name).map_err(|source| Error::io("renaming", path(tmp), source))?;
    disk.sync_dir().map_err(|source| Error::io("syncing", where_.clone(), source))
}

/// Loads the snapshot if it describes exactly the segment files present.
fn load_snapshot(
    disk: &dyn Disk,
    log: LogId,
    segment_ids: &[SegmentId],
) -> std::result::Result<(Snapshot, SegmentFiles), String> {
    let file = disk.open(SNAPSHOT_FILE, false).map_err(|error| error.to_string())?;
    let bytes = read_all(file.as_ref()).map_err(|error| error.to_string())?;
    let snapshot = snapshot::decode_snapshot(&bytes)?;
    if snapshot.log != log {
        return Err("the snapshot is of another log".into());
    }
    let listed: Vec<SegmentId> = snapshot.segments.iter().map(|(id, _)| *id).collect();
    if listed != segment_ids {
        return Err("the segment files changed since the snapshot".into());
    }
    let mut files = Vec::with_capacity(listed.len());
    for &(id, len) in &snapshot.segments {
        let file = disk.open(&segment_file_name(id), false).map_err(|error| error.to_string())?;
        if file.len().map_err(|error| error.to_string())? != len {
            return Err(format!("{id} changed length since the snapshot"));
        }
        files.push((id, file));
    }
    // The checksum vouches for the bytes, not for the code that wrote them: check that
    // every record is one the format allows, inside its segment.
    for record in &snapshot.records {
        let header = &record.header;
        let Ok(at) = snapshot.segments.binary_search_by_key(&record.segment, |(id, _)| *id) else {
            return Err(format!("a record in unknown {}", record.segment));
        };
        let segment_len = snapshot.segments[at].1;
        let lengths_ok = match header.kind {
            RecordKind::Data => {
                !header.range.is_empty() && header.range.size_bytes() <= PAYLOAD_BYTES_MAX
            }
            RecordKind::Invalidate => !header.range.is_empty(),
            RecordKind::DeleteAll => header.range.is_empty(),
        };
        let inside = record.offset >= SEGMENT_HEADER_BYTES
            && record
                .offset
                .checked_add(header.encoded_bytes())
                .is_some_and(|end| end <= segment_len);
        if !lengths_ok || !inside || header.lsn.0 == 0 || header.lsn >= snapshot.next_lsn {
            return Err(format!(
                "an impossible record in {} at byte {}",
                record.segment, record.offset
            ));
        }
    }
    Ok((snapshot, files))
}

/// Rebuilds the index from every segment; returns the next LSN.
fn scan_segments(
    disk: &dyn Disk,
    log: LogId,
    segment_ids: &[SegmentId],
    read_only: bool,
    shared: &mut Shared,
    report: &mut RecoveryReport,
) -> Result<Lsn> {
    let where_ = disk.describe();
    let mut lsn_max = Lsn(0);
    // Only the last segment can hold an interrupted write: a batch syncs a segment
    // before it starts the next one, and an open never appends to an old one.
    let last = segment_ids.last().copied();
    for &id in segment_ids {
        let name = segment_file_name(id);
        let path = format!("{where_}/{name}");
        let file = disk
            .open(&name, !read_only)
            .map_err(|source| Error::io("opening", path.clone(), source))?;
        let bytes =
            read_all(file.as_ref()).map_err(|source| Error::io("reading", path.clone(), source))?;
        report.bytes_scanned += bytes.len() as u64;
        let damage = |offset: u64, reason: String, records_after: u64| SegmentDamage {
            segment: id,
            offset,
            reason,
            records_after,
        };
        let scan = match scan_segment(id, Some(log), &bytes) {
            Ok(scan) => scan,
            Err(_) if Some(id) == last && is_unwritten_segment(&bytes) => {
                if !read_only {
                    disk.remove(&name).map_err(|source| Error::io("removing", path, source))?;
                    disk.sync_dir()
                        .map_err(|source| Error::io("syncing", where_.clone(), source))?;
                }
                report.unwritten_removed.push(id);
                continue;
            }
            Err(problem) => {
                // Records the log cannot trust to be its own: keep the file as
                // evidence, count its bytes, return none of them.
                report.damage.push(damage(0, format!("segment header: {problem}"), 0));
                shared.index.add_segment(id);
                shared.segments.insert(id, Segment { file, bytes: bytes.len() as u64 });
                continue;
            }
        };
        let mut file_bytes = bytes.len() as u64;
        match &scan.end {
            SegmentEnd::Clean => {}
            SegmentEnd::Torn { .. } if Some(id) == last => {
                report.torn_tails.push((id, scan.valid_end));
                if !read_only {
                    file.truncate(scan.valid_end)
                        .and_then(|()| file.sync_all())
                        .map_err(|source| Error::io("truncating", path.clone(), source))?;
                    file_bytes = scan.valid_end;
                }
            }
            SegmentEnd::Torn { offset, reason } => report.damage.push(damage(
                *offset,
                format!(
                    "{reason}, at the end of a segment that was sealed (synced) before the next"
                ),
                0,
            )),
            SegmentEnd::Damaged { offset, reason, records_after } => {
                report.damage.push(damage(*offset, reason.clone(), *records_after));
            }
        }
        shared.index.add_segment(id);
        for record in &scan.records {
            lsn_max = lsn_max.max(record.header.lsn);
            insert_header(&mut shared.index, &record.header, id, record.offset);
        }
        shared.segments.insert(id, Segment { file, bytes: file_bytes });
    }
    lsn_max.0.checked_add(1).map(Lsn).ok_or_else(|| Error::NotALog {
        path: where_,
        reason: "a record carries the largest possible LSN".into(),
    })
}
