//! The engine: segment files on a [`Disk`], group commit, recovery, reads, reclaim and
//! compaction, one module per job:
//!
//! - `open` and `recovery`: taking the directory, its identity, and rebuilding the index
//!   (from the snapshot of a clean close, else by a scan);
//! - `commit`: group commit of appends, invalidations, delete-alls and compaction copies;
//! - `read`: reads, extents and reclaim;
//! - `compaction`: garbage collection and the background [`Compactor`];
//! - this module: the [`LogStore`] itself, its shared state, counters and `close`.
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

mod commit;
mod compaction;
mod open;
mod options;
mod read;
mod recovery;
mod report;

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

pub use compaction::Compactor;
pub use options::{CommitMode, Options, SyncMode, system_clock_ms};
pub use read::{Extent, Piece, ReadResult, Reclaim, ReclaimedExtent};
pub use report::{
    Collected, CompactionReport, OwnerUsage, RecoveryMode, RecoveryReport, SegmentDamage, Stats,
};

use crate::disk::{Disk, DiskFile};
use crate::error::{Error, Result};
use crate::format::{RecordHeader, RecordKind};
use crate::index::{DeleteAllEntry, Entry, Index};
use crate::snapshot::{self, SNAPSHOT_FILE, SNAPSHOT_TMP_FILE, Snapshot, SnapshotRecord};
use crate::{LogId, SegmentId};
use commit::Writer;

#[allow(clippy::disallowed_methods, reason = "recovery and compaction report how long they took")]
fn stopwatch() -> std::time::Instant {
    std::time::Instant::now()
}

/// Group commits are counted by size in buckets of powers of two.
const BATCH_BUCKETS: usize = 24;

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

impl LogStore {
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

    /// Bytes of the live records: [`LogStore::stats`]'s `live_bytes` alone, without
    /// the counters it gathers (a simulation checks it after every disk completion).
    pub fn live_bytes(&self) -> u64 {
        self.read_shared().index.live_bytes()
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

    /// Stops accepting writes, waits for those under way, and writes the index snapshot
    /// so that the next open is fast (unless open found damage: then the next open
    /// scans and reports it again). Calls after this fail with `Closed`.
    pub fn close(&self) -> Result<()> {
        let next_lsn = {
            // No appender leads a stepped log's batch: close flushes what is queued (a
            // failure poisons the log, reported below).
            if self.options.commit == CommitMode::Stepped {
                let _poisoned_if_failed = self.flush_queued();
            }
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
