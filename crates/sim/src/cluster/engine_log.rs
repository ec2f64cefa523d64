//! A storage server's logger on the real `somnus-logstore` engine, over the engine's
//! fault-injecting in-memory device (`MemDisk`): the bytes-on-disk code of the runtime
//! is the one the cluster simulation tests. The engine runs stepped
//! (`CommitMode::Stepped`): the logger queues a disk completion's records and flushes
//! them as one group commit at that event, with no thread or clock of the engine's.
//!
//! Payloads are real bytes of the record's size: every byte at object offset `a` is
//! byte `a % 8` of the little-endian stamp that wrote it, so any piece a read returns
//! names its writer, and a byte the engine misplaces shows as a wrong stamp.

use std::sync::Arc;

use somnus_core::cluster::logvolume::{
    LogAddress, LogCommit, LogOp, LogPiece, LogVolume, SEGMENT_BYTES,
};
use somnus_core::cluster::{Payload, Stamp};
#[cfg(test)]
use somnus_logstore::Disk;
use somnus_logstore::{Crash, Error, LogId, LogStore, MemDisk, Options};
use somnus_types::ByteRange;

pub(crate) struct EngineLog {
    disk: MemDisk,
    store: LogStore,
    options: Options,
    /// A broken device for the test of D7's check: its crash loses the end of the
    /// newest segment, synced or not.
    #[cfg(test)]
    pub(crate) lies: bool,
}

impl std::fmt::Debug for EngineLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EngineLog({:?})", self.store.log_id())
    }
}

/// Why the engine did not take a commit.
#[derive(Debug)]
pub(crate) enum CommitError {
    /// Its appends do not all fit: none of it took effect.
    NoSpace,
    Failed(String),
}

impl EngineLog {
    /// An empty log of `capacity_bytes` for server `server`.
    pub(crate) fn new(server: u32, capacity_bytes: u64) -> Result<EngineLog, String> {
        let log = LogId(u64::from(server) + 1);
        let options = Options::stepped_logger(log, SEGMENT_BYTES, capacity_bytes);
        let disk = MemDisk::new();
        let store =
            LogStore::open(Arc::new(disk.clone()), options.clone()).map_err(|e| e.to_string())?;
        Ok(EngineLog {
            disk,
            store,
            options,
            #[cfg(test)]
            lies: false,
        })
    }

    /// Carries out `commit`'s steps, in order, and makes them durable (one group
    /// commit), or nothing of it when its appends do not all fit.
    pub(crate) fn commit(&mut self, commit: &LogCommit) -> Result<(), CommitError> {
        let failed = |e: Error| CommitError::Failed(e.to_string());
        if !self.store.all_fit(&commit.append_sizes()) {
            return Err(CommitError::NoSpace);
        }
        for op in &commit.ops {
            match op {
                LogOp::Append { owner, object, range, version, stamp, .. } => {
                    let bytes = payload(*stamp, *range);
                    self.store.append(*owner, *object, *range, *version, &bytes).map_err(failed)?
                }
                LogOp::Invalidate { owner, object, range, version } => {
                    self.store.invalidate(*owner, *object, *range, *version).map_err(failed)?
                }
                LogOp::Collect => {
                    self.store.flush_queued().map_err(failed)?;
                    self.store.collect_garbage().map_err(failed)?;
                }
            }
        }
        self.store.flush_queued().map(|_| ()).map_err(failed)
    }

    /// What the log reads over each of `reads`: pieces with the stamp their bytes
    /// name (none kept: the core's index has the writes).
    pub(crate) fn read(&self, reads: &[LogAddress]) -> Result<Vec<Vec<LogPiece>>, String> {
        reads.iter().map(|address| self.read_one(address)).collect()
    }

    fn read_one(&self, address: &LogAddress) -> Result<Vec<LogPiece>, String> {
        let LogAddress { owner, object, range } = *address;
        let read = self.store.read(owner, object, range).map_err(|e| e.to_string())?;
        read.pieces
            .into_iter()
            .map(|piece| match stamp_of(piece.range, &piece.bytes) {
                Some(stamp) => Ok(LogPiece {
                    range: piece.range,
                    version: piece.version,
                    stamp: Some(stamp),
                    data: Payload::NONE,
                }),
                None => Err(format!(
                    "{owner:?} {object:?} {:?} version {:?} reads back bytes no single write wrote",
                    piece.range, piece.version
                )),
            })
            .collect()
    }

    pub(crate) fn live_bytes(&self) -> u64 {
        self.store.live_bytes()
    }

    /// The machine crashed: what was not synced is lost (each commit syncs, so
    /// nothing is), and the reopened engine recovers from its segments by a scan.
    pub(crate) fn crash(&mut self) -> Result<(), String> {
        #[cfg(test)]
        if self.lies {
            let newest = self.disk.list().ok().and_then(|names| names.into_iter().max());
            if let Some(name) = newest {
                let len = self.disk.contents(&name).map_or(0, |bytes| bytes.len() as u64);
                let _ = self.disk.cut(&name, len.saturating_sub(100));
            }
        }
        self.disk = self.disk.crash(Crash::LoseUnsynced);
        self.store = LogStore::open(Arc::new(self.disk.clone()), self.options.clone())
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// The 8 bytes that repeat through `stamp`'s payload from object offset `start`.
fn pattern(stamp: Stamp, start: u64) -> [u8; 8] {
    let mut bytes = stamp.0.to_le_bytes();
    bytes.rotate_left((start % 8) as usize);
    bytes
}

/// The payload of `stamp`'s write of `range`.
fn payload(stamp: Stamp, range: ByteRange) -> Vec<u8> {
    let size = range.size_bytes() as usize;
    let mut bytes = pattern(stamp, range.start).repeat(size.div_ceil(8));
    bytes.truncate(size);
    bytes
}

/// The stamp a piece's bytes name, if they all name the same one.
fn stamp_of(range: ByteRange, bytes: &[u8]) -> Option<Stamp> {
    if bytes.len() < 8 || bytes.len() as u64 != range.size_bytes() {
        return None;
    }
    let mut stamp = [0u8; 8];
    stamp.copy_from_slice(&bytes[..8]);
    stamp.rotate_right((range.start % 8) as usize);
    let stamp = Stamp(u64::from_le_bytes(stamp));
    let expected = pattern(stamp, range.start);
    let word = u64::from_ne_bytes(expected);
    let mut chunks = bytes.chunks_exact(8);
    let whole = chunks.by_ref().all(|chunk| {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(chunk);
        u64::from_ne_bytes(eight) == word
    });
    let rest = chunks.remainder();
    (whole && rest == &expected[..rest.len()]).then_some(stamp)
}

/// The machine of `log` crashed: the engine reopens from what was durable, and the
/// model with it. Everything the engine held was durable (each commit syncs), so it
/// must read back every write of the index exactly as before, and hold as many live
/// bytes (D7): where it does not, a fault of the log.
pub(crate) fn crash(engine: &mut EngineLog, log: &mut LogVolume) {
    let addresses = log.addresses();
    let before = (engine.read(&addresses), engine.live_bytes());
    if let Err(error) = engine.crash() {
        log.report_fault(format!("opening the log after a crash: {error}"));
    }
    let after = (engine.read(&addresses), engine.live_bytes());
    if before.1 != after.1 {
        log.report_fault(format!("{} live bytes before a crash, {} after", before.1, after.1));
    }
    match (before.0, after.0) {
        (Ok(was), Ok(is)) => {
            if let Some(((address, was), is)) =
                addresses.iter().zip(&was).zip(&is).find(|((_, was), is)| was != is)
            {
                log.report_fault(format!("{address:?} read {was:?} before a crash, {is:?} after"));
            }
        }
        (Err(error), _) | (_, Err(error)) => log.report_fault(format!("reading the log: {error}")),
    }
    log.crash();
}

#[cfg(test)]
mod tests {
    use somnus_core::cluster::logvolume::{LogVolume, Staged};
    use somnus_core::cluster::{ChunkId, ChunkIndex, Epoch, LogRecord, UnstableWrite};
    use somnus_types::{ChunkGroupId, ObjectId, Version};

    use super::*;

    fn write(block: u64, version: u64) -> UnstableWrite {
        UnstableWrite {
            chunk: ChunkId { object: ObjectId(2), chunk: ChunkIndex(0) },
            range: ByteRange::new(block * 4096, 8192),
            version: Version(version),
            stamp: Stamp(1000 + version),
            data: Payload::NONE,
        }
    }

    fn record(w: &UnstableWrite) -> LogRecord {
        LogRecord { owner: Epoch(1), chunk: w.chunk, range: w.range, version: w.version }
    }

    /// Hands a planned commit to the engine, and applies it once durable.
    fn commit(engine: &mut EngineLog, log: &mut LogVolume, (commit, staged): (LogCommit, Staged)) {
        engine.commit(&commit).unwrap();
        log.committed(staged);
    }

    fn read(engine: &EngineLog, log: &mut LogVolume, r: &LogRecord) -> Option<UnstableWrite> {
        let (addresses, plan) = log.stage_read(ChunkGroupId(1), vec![*r]);
        let pieces = engine.read(&addresses).unwrap();
        log.read_done(plan, Some(pieces)).pop().and_then(|(_, w)| w)
    }

    /// A logger on the engine: a batch, a marker, a crash; it reads back the same
    /// after, unless the device loses what was synced (D7's check, shown failing).
    fn crash_once(lies: bool) -> Vec<String> {
        let mut engine = EngineLog::new(0, 64 << 20).unwrap();
        engine.lies = lies;
        let mut log = LogVolume::new(1 << 20, 64 << 20);
        let group = ChunkGroupId(1);
        let writes = [write(0, 1), write(1, 2), write(8, 3)];
        let planned = log.stage_append(group, Epoch(1), &writes);
        assert_eq!(planned.1.appended.len(), 3);
        commit(&mut engine, &mut log, planned);
        let planned = log.stage_invalidate(group, &[record(&writes[0])]);
        commit(&mut engine, &mut log, planned);
        let live = log.live_bytes();
        assert_eq!(engine.live_bytes(), live, "the engine and the model disagree");
        crash(&mut engine, &mut log);
        assert_eq!(log.records(group).len(), 2);
        if !lies {
            assert_eq!(engine.live_bytes(), live);
            assert_eq!(read(&engine, &mut log, &record(&writes[1])), Some(writes[1].clone()));
        }
        log.faults().to_vec()
    }

    #[test]
    fn a_logger_on_the_engine_reads_back_the_same_after_a_crash() {
        assert_eq!(crash_once(false), Vec::<String>::new());
    }

    #[test]
    fn d7_catches_a_device_that_loses_synced_records_in_a_crash() {
        let faults = crash_once(true);
        assert!(!faults.is_empty(), "a lost record went unnoticed");
        assert!(faults.iter().any(|f| f.contains("before a crash")), "{faults:?}");
    }

    /// After collection and crashes emptied the log, a duplicate of an early batch is
    /// still a repeat (D1), and the engine and the model agree throughout.
    #[test]
    fn a_late_append_stays_a_repeat_after_collection_and_a_crash_emptied_the_log() {
        let mut engine = EngineLog::new(0, 64 << 20).unwrap();
        let mut log = LogVolume::new(1 << 20, 64 << 20);
        let group = ChunkGroupId(1);
        // Enough 8 KiB records to seal a few 4 MiB segments, then every one reclaimed.
        let writes: Vec<UnstableWrite> = (1..=1200).map(|v| write(v % 100, v)).collect();
        for batch in writes.chunks(50) {
            let planned = log.stage_append(group, Epoch(1), batch);
            assert_eq!(planned.1.full, vec![]);
            commit(&mut engine, &mut log, planned);
        }
        let records: Vec<LogRecord> = writes.iter().map(record).collect();
        let planned = log.stage_invalidate(group, &records);
        commit(&mut engine, &mut log, planned);
        // The head segment is collected once a reopen has sealed it.
        for _ in 0..2 {
            if let Some(planned) = log.stage_collect() {
                commit(&mut engine, &mut log, planned);
            }
            crash(&mut engine, &mut log);
            assert_eq!(engine.live_bytes(), log.live_bytes());
            assert_eq!(engine.store.stats().used_bytes, log.used_bytes());
        }
        assert_eq!((log.write_count(), log.live_bytes()), (0, 0));
        // A duplicate of an early batch arrives late: D1 takes it as a repeat.
        let planned = log.stage_append(group, Epoch(1), &writes[..3]);
        assert_eq!((planned.1.repeats.len(), planned.1.appended.len()), (3, 0));
        commit(&mut engine, &mut log, planned);
        assert_eq!(log.write_count(), 0, "a late repeat was logged again");
        assert_eq!(log.faults(), &[] as &[String]);
    }

    #[test]
    fn a_payload_names_its_stamp_from_any_piece_and_a_changed_byte_shows() {
        let stamp = Stamp(0x0102_0304_0506_0708);
        let range = ByteRange::new(4096, 8192);
        let bytes = payload(stamp, range);
        assert_eq!(stamp_of(range, &bytes), Some(stamp));
        // A piece starting at an offset that is not a multiple of 8.
        let piece = ByteRange::new(4099, 100);
        let at = (piece.start - range.start) as usize;
        assert_eq!(stamp_of(piece, &bytes[at..at + 100]), Some(stamp));
        let mut broken = bytes.clone();
        broken[5000] ^= 1;
        assert_eq!(stamp_of(range, &broken), None);
    }
}
