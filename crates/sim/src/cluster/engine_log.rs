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

use somnus_core::cluster::logvolume::{BackendError, LogBackend, LogPiece, SEGMENT_BYTES};
use somnus_core::cluster::{Payload, Stamp};
#[cfg(test)]
use somnus_logstore::Disk;
use somnus_logstore::{Crash, Error, LogId, LogStore, MemDisk, Options};
use somnus_types::{ByteRange, ObjectId, OwnerId, Version};

pub(crate) struct EngineLog {
    disk: MemDisk,
    store: LogStore,
    options: Options,
    /// A broken device for the test of D7's check: its crash loses the end of the
    /// newest segment, synced or not.
    #[cfg(test)]
    lies: bool,
}

impl std::fmt::Debug for EngineLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EngineLog({:?})", self.store.log_id())
    }
}

fn failed(error: Error) -> BackendError {
    match error {
        Error::Full { .. } => BackendError::Full,
        error => BackendError::Failed(error.to_string()),
    }
}

impl EngineLog {
    /// An empty log of `capacity_bytes` for server `server`.
    pub(crate) fn new(server: u32, capacity_bytes: u64) -> Result<EngineLog, BackendError> {
        let log = LogId(u64::from(server) + 1);
        let options = Options::stepped_logger(log, SEGMENT_BYTES, capacity_bytes);
        let disk = MemDisk::new();
        let store = LogStore::open(Arc::new(disk.clone()), options.clone()).map_err(failed)?;
        Ok(EngineLog {
            disk,
            store,
            options,
            #[cfg(test)]
            lies: false,
        })
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

impl LogBackend for EngineLog {
    fn fits(&self, payload_bytes: u64) -> bool {
        self.store.fits(payload_bytes)
    }

    fn newest_version(&self, owner: OwnerId) -> Version {
        self.store.newest_version(owner)
    }

    fn append(
        &mut self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
        version: Version,
        stamp: Stamp,
        _data: &Payload,
    ) -> Result<(), BackendError> {
        self.store.append(owner, object, range, version, &payload(stamp, range)).map_err(failed)
    }

    fn invalidate(
        &mut self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
        version: Version,
    ) -> Result<(), BackendError> {
        self.store.invalidate(owner, object, range, version).map_err(failed)
    }

    fn flush(&mut self) -> Result<(), BackendError> {
        self.store.flush_queued().map(|_| ()).map_err(failed)
    }

    fn read(
        &self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
    ) -> Result<Vec<LogPiece>, BackendError> {
        let read = self.store.read(owner, object, range).map_err(failed)?;
        read.pieces
            .into_iter()
            .map(|piece| match stamp_of(piece.range, &piece.bytes) {
                Some(stamp) => Ok(LogPiece {
                    range: piece.range,
                    version: piece.version,
                    stamp: Some(stamp),
                    data: Payload::NONE,
                }),
                None => Err(BackendError::Failed(format!(
                    "{owner:?} {object:?} {:?} version {:?} reads back bytes no single \
                     write wrote",
                    piece.range, piece.version
                ))),
            })
            .collect()
    }

    fn versions(
        &self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
    ) -> Vec<(ByteRange, Version)> {
        let extents = self.store.versions(owner, object, range);
        extents.into_iter().map(|extent| (extent.range, extent.version)).collect()
    }

    fn collect(&mut self) -> Result<u64, BackendError> {
        Ok(self.store.collect_garbage().map_err(failed)?.bytes_written)
    }

    fn live_bytes(&self) -> u64 {
        self.store.stats().live_bytes
    }

    fn used_bytes(&self) -> u64 {
        self.store.stats().used_bytes
    }

    fn crash(&mut self) -> Result<(), BackendError> {
        // What was not synced is lost (the stepped log flushes at each disk completion,
        // so nothing is); the reopened engine recovers from its segments by a scan.
        #[cfg(test)]
        if self.lies {
            let newest = self.disk.list().ok().and_then(|names| names.into_iter().max());
            if let Some(name) = newest {
                let len = self.disk.contents(&name).map_or(0, |bytes| bytes.len() as u64);
                let _ = self.disk.cut(&name, len.saturating_sub(100));
            }
        }
        self.disk = self.disk.crash(Crash::LoseUnsynced);
        self.store =
            LogStore::open(Arc::new(self.disk.clone()), self.options.clone()).map_err(failed)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use somnus_core::cluster::logvolume::LogVolume;
    use somnus_core::cluster::{ChunkId, ChunkIndex, Epoch, LogRecord, UnstableWrite};
    use somnus_types::ChunkGroupId;

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

    /// A logger on the engine: a batch, a marker, a crash; it reads back the same
    /// after, unless the device loses what was synced (D7's check, shown failing).
    fn crash_once(lies: bool) -> Vec<String> {
        let mut engine = EngineLog::new(0, 64 << 20).unwrap();
        engine.lies = lies;
        let mut log = LogVolume::on(1 << 20, Box::new(engine));
        let group = ChunkGroupId(1);
        let writes = [write(0, 1), write(1, 2), write(8, 3)];
        assert_eq!(log.append_batch(group, Epoch(1), &writes).0.len(), 3);
        let first = LogRecord {
            owner: Epoch(1),
            chunk: writes[0].chunk,
            range: writes[0].range,
            version: writes[0].version,
        };
        log.invalidate_batch(group, &[first]);
        let live = log.live_bytes();
        log.crash();
        assert_eq!(log.records(group).len(), 2);
        if !lies {
            assert_eq!(log.live_bytes(), live);
            let second = LogRecord { version: Version(2), range: writes[1].range, ..first };
            assert_eq!(log.read(group, &second), Some(writes[1].clone()));
        }
        log.faults().to_vec()
    }

    #[test]
    fn a_logger_on_the_engine_reads_back_the_same_after_a_crash() {
        assert_eq!(crash_once(false), Vec::<String>::new());
    }

    #[test]
    fn a_late_append_stays_a_repeat_after_collection_and_a_crash_emptied_the_log() {
        let mut log = LogVolume::on(1 << 20, Box::new(EngineLog::new(0, 64 << 20).unwrap()));
        let group = ChunkGroupId(1);
        // Enough 8 KiB records to seal a few 4 MiB segments, then every one reclaimed.
        let writes: Vec<UnstableWrite> = (1..=1200).map(|v| write(v % 100, v)).collect();
        for batch in writes.chunks(50) {
            assert_eq!(log.append_batch(group, Epoch(1), batch).1, vec![]);
        }
        let records: Vec<LogRecord> = writes
            .iter()
            .map(|w| LogRecord {
                owner: Epoch(1),
                chunk: w.chunk,
                range: w.range,
                version: w.version,
            })
            .collect();
        log.invalidate_batch(group, &records);
        // The head segment is collected once a reopen has sealed it.
        for _ in 0..2 {
            log.collect();
            log.crash();
        }
        assert_eq!((log.write_count(), log.live_bytes()), (0, 0));
        // A duplicate of an early batch arrives late: D1 takes it as a repeat.
        let (logged, full) = log.append_batch(group, Epoch(1), &writes[..3]);
        assert_eq!((logged.len(), full.len()), (3, 0));
        assert_eq!(log.write_count(), 0, "a late repeat was logged again");
        assert_eq!(log.faults(), &[] as &[String]);
    }

    #[test]
    fn d7_catches_a_device_that_loses_synced_records_in_a_crash() {
        let faults = crash_once(true);
        assert!(!faults.is_empty(), "a lost record went unnoticed");
        assert!(faults.iter().any(|f| f.contains("before a crash")), "{faults:?}");
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
