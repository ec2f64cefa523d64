//! Garbage collection: a sealed segment's records that must outlive it are copied to
//! the head (keeping LSN and version, L2), the copies replace it in the index, and the
//! file is deleted. Only what no later record can make live again is dropped (L3).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::read::{files_of, slice_of};
use super::{Collected, CommitMode, CompactionReport, LogStore, insert_header, lock, stopwatch};
use crate::disk::DiskFile;
use crate::error::{Error, Result};
use crate::format::{RecordHeader, RecordKind};
use crate::index::{CopyItem, Entry};
use crate::{SegmentId, segment_file_name};

impl LogStore {
    /// One step of garbage collection: among the sealed segments whose live bytes are
    /// at most `compact_live_percent_max` of their size, the first (fewest live bytes
    /// first) whose copies would take at most that share too (deletion markers that must
    /// be kept count) has its records copied forward and is deleted. `None` if none
    /// qualifies.
    pub fn compact(&self) -> Result<Option<CompactionReport>> {
        self.compact_skipping(&mut BTreeSet::new())
    }

    /// [`LogStore::compact`] among the segments not in `too_full`, adding to it those
    /// whose copies took too much.
    fn compact_skipping(
        &self,
        too_full: &mut BTreeSet<SegmentId>,
    ) -> Result<Option<CompactionReport>> {
        let _one_at_a_time = lock(&self.compacting);
        for segment in self.candidates(too_full) {
            if !self.is_settled(segment) {
                continue;
            }
            let Some((plan, files, segment_bytes)) = self.plan(segment)? else { continue };
            let copy_bytes: u64 = plan.iter().map(|item| item.header.encoded_bytes()).sum();
            if u128::from(copy_bytes) * 100
                > u128::from(segment_bytes) * u128::from(self.options.compact_live_percent_max)
            {
                too_full.insert(segment);
                continue;
            }
            return self.run_compaction(segment, plan, files, segment_bytes).map(Some);
        }
        Ok(None)
    }

    /// Runs compaction steps until no segment qualifies; returns how many ran and the
    /// bytes their copies wrote. A segment whose copies took too much is not looked at
    /// again in the same run (planning paints each of its records; a later run looks
    /// again, once other collections may have freed what its markers keep).
    pub fn collect_garbage(&self) -> Result<Collected> {
        let mut collected = Collected::default();
        let mut too_full = BTreeSet::new();
        while let Some(report) = self.compact_skipping(&mut too_full)? {
            collected.steps += 1;
            collected.bytes_written += report.bytes_written();
        }
        Ok(collected)
    }

    /// The segments worth a look, fewest live bytes (as a share of size) first; the
    /// damaged ones are kept for the operator (`verify`).
    fn candidates(&self, skipped: &BTreeSet<SegmentId>) -> Vec<SegmentId> {
        const LOOK_AT_MAX: usize = 8;
        let shared = self.read_shared();
        let mut candidates: Vec<(u128, u128, SegmentId)> = shared
            .segments
            .iter()
            .filter(|(id, _)| !self.damaged.contains(id) && !skipped.contains(id))
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
            return Err(Error::SegmentDamaged { segment });
        }
        if !self.is_settled(segment) {
            return Err(Error::SegmentBusy { segment });
        }
        let Some((plan, files, segment_bytes)) = self.plan(segment)? else {
            return Err(Error::NoSuchSegment { segment });
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
        self.swap_in(segment, &copied);
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

    /// Replaces `segment` in the index by its durable copies.
    fn swap_in(&self, segment: SegmentId, copied: &[(RecordHeader, SegmentId, u64)]) {
        assert!(!self.damaged.contains(&segment), "L3: {segment} is damaged and kept");
        assert!(self.is_settled(segment), "L3: {segment} is still written");
        let mut shared = self.write_shared();
        for (header, at_segment, offset) in copied {
            assert_ne!(*at_segment, segment, "L2: a copy lands in the segment it replaces");
            insert_header(&mut shared.index, header, *at_segment, *offset);
        }
        shared.index.remove_segment(segment);
        shared.segments.remove(&segment);
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
            let source = item.source_range;
            let inside = header.range.start >= source.start && header.range.end <= source.end;
            assert!(inside, "L2: a copy holds only bytes of its original");
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
            // A stepped log makes the copies durable here, whatever part of them was
            // queued: they must be before they join the index, and before the segment
            // they replace is deleted. A failed flush poisons the log.
            let committed = match self.options.commit {
                CommitMode::Stepped => self.flush_queued().and(committed),
                CommitMode::Group => committed,
            };
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
