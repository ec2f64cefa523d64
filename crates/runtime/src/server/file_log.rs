//! A storage server's logger on files: the `logstore` engine over a directory
//! (`FsDisk`), stepped by the core (each disk completion of the logger is one group
//! commit, synced before the core acknowledges it), and beside it a journal of the
//! logger's index changes (fences, the writes logged with their stamps, tombstones,
//! each owner's newest version), synced in the same flush, so that a restarted process
//! rebuilds the index it had ([`LogVolume::restore`]).
//!
//! The engine holds the records' bytes; the index journal holds no bytes, and is
//! rewritten whole (`Journal::rewrite`) once it has grown past a bound.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use somnus_core::cluster::logvolume::{
    BackendError, IndexChange, LogBackend, LogPiece, LogVolume, SEGMENT_BYTES,
};
use somnus_core::cluster::{Payload, Stamp};
use somnus_logstore::{Error, FsDisk, LogId, LogStore, Options};
use somnus_types::{ByteRange, ObjectId, OwnerId, Version};

use crate::files::journal::Journal;

/// The index journal is rewritten once it holds this many bytes.
const INDEX_REWRITE_BYTES: u64 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum FileLogError {
    #[error("cannot open the log directory {path}: {source}")]
    Dir { path: PathBuf, source: std::io::Error },
    #[error("the log in {path} does not open: {source}")]
    Engine { path: PathBuf, source: Box<Error> },
    #[error(transparent)]
    Index(#[from] crate::files::journal::JournalError),
}

pub struct FileLog {
    store: LogStore,
    index: Journal<IndexChange>,
    /// Index changes noted since the last flush.
    noted: Vec<IndexChange>,
    dir: PathBuf,
}

impl std::fmt::Debug for FileLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FileLog({})", self.dir.display())
    }
}

fn failed(error: Error) -> BackendError {
    match error {
        Error::Full { .. } => BackendError::Full,
        error => BackendError::Failed(error.to_string()),
    }
}

impl FileLog {
    /// Opens (or creates) the logger of server `server` in `dir`: the engine's
    /// segments in `dir/segments`, the index journal at `dir/index`. Returns the
    /// logger with its index rebuilt.
    pub fn open(
        dir: &Path,
        server: u32,
        chunk_size_bytes: u64,
        capacity_bytes: u64,
    ) -> Result<LogVolume, FileLogError> {
        let segments = dir.join("segments");
        let disk = FsDisk::new(&segments)
            .map_err(|source| FileLogError::Dir { path: segments.clone(), source })?;
        let log = LogId(u64::from(server) + 1);
        let options = Options::stepped_logger(log, SEGMENT_BYTES, capacity_bytes);
        let store = LogStore::open(Arc::new(disk), options)
            .map_err(|source| FileLogError::Engine { path: segments, source: Box::new(source) })?;
        let (index, changes) = Journal::open(&dir.join("index"))?;
        let log = FileLog { store, index, noted: Vec::new(), dir: dir.to_owned() };
        Ok(LogVolume::restore(chunk_size_bytes, Box::new(log), changes))
    }
}

impl LogBackend for FileLog {
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
        _stamp: Stamp,
        data: &Payload,
    ) -> Result<(), BackendError> {
        let Some(bytes) = data.bytes() else {
            return Err(BackendError::Failed(format!(
                "a write of {range:?} of {object:?} came without its bytes"
            )));
        };
        self.store.append(owner, object, range, version, bytes).map_err(failed)
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
        self.store.flush_queued().map_err(failed)?;
        if !self.noted.is_empty() {
            self.index.append(&self.noted).map_err(|e| BackendError::Failed(e.to_string()))?;
            self.noted.clear();
        }
        Ok(())
    }

    fn read(
        &self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
    ) -> Result<Vec<LogPiece>, BackendError> {
        let read = self.store.read(owner, object, range).map_err(failed)?;
        let piece = |piece: somnus_logstore::Piece| LogPiece {
            range: piece.range,
            version: piece.version,
            // The engine keeps no stamps: the index has them.
            stamp: None,
            data: Payload::new(piece.bytes.into()),
        };
        Ok(read.pieces.into_iter().map(piece).collect())
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
        // A real crash ends the process; the next one opens the directory again.
        Ok(())
    }

    fn note(&mut self, change: &IndexChange) {
        self.noted.push(change.clone());
    }

    fn index_rewrite_due(&self) -> bool {
        self.index.bytes() > INDEX_REWRITE_BYTES
    }

    fn rewrite_index(&mut self, state: &[IndexChange]) -> Result<(), BackendError> {
        self.index.rewrite(state).map_err(|e| BackendError::Failed(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use somnus_core::cluster::{ChunkId, ChunkIndex, Epoch, LogRecord, UnstableWrite};
    use somnus_types::ChunkGroupId;

    use super::*;

    fn write(block: u64, version: u64, fill: u8) -> UnstableWrite {
        UnstableWrite {
            chunk: ChunkId { object: ObjectId(2), chunk: ChunkIndex(1) },
            range: ByteRange::new(block * 4096, 8192),
            version: Version(version),
            stamp: Stamp(1000 + version),
            data: Payload::new(vec![fill; 8192].into()),
        }
    }

    #[test]
    fn a_reopened_logger_has_its_index_fences_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let group = ChunkGroupId(4);
        let writes = [write(0, 1, 0xa1), write(1, 2, 0xb2), write(8, 3, 0xc3)];
        let before = {
            let mut log = FileLog::open(dir.path(), 0, 1 << 20, 64 << 20).unwrap();
            assert_eq!(log.append_batch(group, Epoch(2), &writes).0.len(), 3);
            let first = LogRecord {
                owner: Epoch(2),
                chunk: writes[0].chunk,
                range: writes[0].range,
                version: writes[0].version,
            };
            log.invalidate_batch(group, &[first]);
            log.set_fence(group, Epoch(3));
            assert_eq!(log.faults(), &[] as &[String]);
            log.records(group)
        };
        let mut log = FileLog::open(dir.path(), 0, 1 << 20, 64 << 20).unwrap();
        assert_eq!(log.records(group), before);
        assert_eq!(log.fence(group), Epoch(3));
        let third = &before[1];
        let read = log.read(group, third).unwrap();
        assert_eq!(read.stamp, writes[2].stamp);
        assert_eq!(read.data.bytes().unwrap(), &vec![0xc3; 8192][..]);
        // The second write's first block is hidden by nothing: its bytes come back.
        let second = log.read(group, &before[0]).unwrap();
        assert_eq!(second.data.bytes().unwrap()[..4096], vec![0xb2; 4096][..]);
        // A repeat of an appended version is taken as one (D1).
        assert_eq!(log.append_batch(group, Epoch(3), &writes[..0]).0.len(), 0);
        assert_eq!(log.faults(), &[] as &[String]);
    }
}
