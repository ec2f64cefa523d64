//! A storage server's logger on files: the `logstore` engine over a directory
//! (`FsDisk`), stepped by the core's commits (each one group commit, synced before the
//! core is told it is done), and beside it a journal of the logger's index changes
//! (fences, the writes logged with their stamps, tombstones, each owner's newest
//! version), written in the same commit, so that a restarted process rebuilds the index
//! it had ([`LogVolume::restore`]).
//!
//! The engine holds the records' bytes; the index journal holds no bytes, and is
//! written whole again when the core says so (`IndexWrite::Rewrite`). The shell's
//! logger worker (`log_worker.rs`) owns it and carries out the core's operations on
//! it in order, off the server's task.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use somnus_core::cluster::Payload;
use somnus_core::cluster::logvolume::{
    IndexChange, IndexWrite, LogAddress, LogCommit, LogOp, LogPiece, LogVolume, SEGMENT_BYTES,
};
use somnus_logstore::{Error, FsDisk, LogId, LogStore, Options};

use crate::files::journal::Journal;

#[derive(Debug, thiserror::Error)]
pub enum FileLogError {
    #[error("cannot open the log directory {path}: {source}")]
    Dir { path: PathBuf, source: std::io::Error },
    #[error("the log in {path} does not open: {source}")]
    Engine { path: PathBuf, source: Box<Error> },
    #[error(transparent)]
    Index(#[from] crate::files::journal::JournalError),
    #[error("the logger's index in {path} does not match its log: {why}")]
    Restore { path: PathBuf, why: String },
}

/// Why a commit did not take effect.
#[derive(Debug)]
pub enum CommitError {
    /// Its appends do not all fit: nothing of it took effect.
    NoSpace,
    /// The engine or the journal failed (what is durable is unknown).
    Failed(String),
}

pub struct FileLog {
    store: LogStore,
    index: Journal<IndexChange>,
    dir: PathBuf,
}

impl std::fmt::Debug for FileLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FileLog({})", self.dir.display())
    }
}

impl FileLog {
    /// Opens (or creates) the logger of server `server` in `dir`: the engine's
    /// segments in `dir/segments`, the index journal at `dir/index`. Returns it, and
    /// the core's logger with its index rebuilt from the journal and its model from
    /// what the engine holds.
    pub fn open(
        dir: &Path,
        server: u32,
        chunk_size_bytes: u64,
        capacity_bytes: u64,
    ) -> Result<(FileLog, LogVolume), FileLogError> {
        let segments = dir.join("segments");
        let disk = FsDisk::new(&segments)
            .map_err(|source| FileLogError::Dir { path: segments.clone(), source })?;
        let log = LogId(u64::from(server) + 1);
        let options = Options::stepped_logger(log, SEGMENT_BYTES, capacity_bytes);
        let store = LogStore::open(Arc::new(disk), options)
            .map_err(|source| FileLogError::Engine { path: segments, source: Box::new(source) })?;
        let (index, changes) = Journal::open(&dir.join("index"))?;
        let owners = store.owners();
        let extents = owners.iter().flat_map(|usage| {
            let owner = usage.owner;
            store.extents(owner).into_iter().map(move |e| (owner, e.object, e.range, e.version))
        });
        let newest = owners.iter().map(|usage| (usage.owner, usage.version_max));
        let volume = LogVolume::restore(chunk_size_bytes, capacity_bytes, changes, extents, newest)
            .map_err(|why| FileLogError::Restore { path: dir.to_owned(), why })?;
        Ok((FileLog { store, index, dir: dir.to_owned() }, volume))
    }

    /// Carries out `commit`'s steps in order and makes them durable (one sync of the
    /// engine), then its index changes (one sync of the journal); or nothing of it when
    /// its appends do not all fit.
    pub fn commit(&mut self, commit: &LogCommit) -> Result<(), CommitError> {
        let failed = |e: Error| CommitError::Failed(e.to_string());
        if !self.store.all_fit(&commit.append_sizes()) {
            return Err(CommitError::NoSpace);
        }
        for op in &commit.ops {
            match op {
                LogOp::Append { owner, object, range, version, data, .. } => {
                    let Some(bytes) = data.bytes() else {
                        return Err(CommitError::Failed(format!(
                            "a write of {range:?} of {object:?} came without its bytes"
                        )));
                    };
                    self.store.append(*owner, *object, *range, *version, bytes).map_err(failed)?
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
        self.store.flush_queued().map_err(failed)?;
        let journaled = match &commit.index {
            IndexWrite::Append(changes) if changes.is_empty() => Ok(()),
            IndexWrite::Append(changes) => self.index.append(changes),
            IndexWrite::Rewrite(state) => self.index.rewrite(state),
        };
        journaled.map_err(|e| CommitError::Failed(e.to_string()))
    }

    /// What the log reads over each of `reads`: pieces with their bytes (the engine
    /// keeps no stamps: the core's index has them).
    pub fn read(&self, reads: &[LogAddress]) -> Result<Vec<Vec<LogPiece>>, String> {
        let piece = |piece: somnus_logstore::Piece| LogPiece {
            range: piece.range,
            version: piece.version,
            stamp: None,
            data: Payload::new(piece.bytes.into()),
        };
        reads
            .iter()
            .map(|LogAddress { owner, object, range }| {
                let read = self.store.read(*owner, *object, *range).map_err(|e| e.to_string())?;
                Ok(read.pieces.into_iter().map(piece).collect())
            })
            .collect()
    }

    /// Bytes of data a read would see, and bytes the log takes.
    pub fn live_and_used_bytes(&self) -> (u64, u64) {
        let stats = self.store.stats();
        (stats.live_bytes, stats.used_bytes)
    }
}

#[cfg(test)]
mod tests {
    use somnus_core::cluster::logvolume::Staged;
    use somnus_core::cluster::{ChunkId, ChunkIndex, Epoch, LogRecord, Stamp, UnstableWrite};
    use somnus_types::{ByteRange, ChunkGroupId, ObjectId, Version};

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

    fn commit(file: &mut FileLog, log: &mut LogVolume, (commit, staged): (LogCommit, Staged)) {
        file.commit(&commit).unwrap();
        log.committed(staged);
    }

    fn read(
        file: &FileLog,
        log: &mut LogVolume,
        group: ChunkGroupId,
        r: &LogRecord,
    ) -> UnstableWrite {
        let (addresses, plan) = log.stage_read(group, vec![*r]);
        let pieces = file.read(&addresses).unwrap();
        log.read_done(plan, Some(pieces)).pop().and_then(|(_, w)| w).unwrap()
    }

    #[test]
    fn a_reopened_logger_has_its_index_fences_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let group = ChunkGroupId(4);
        let writes = [write(0, 1, 0xa1), write(1, 2, 0xb2), write(8, 3, 0xc3)];
        let before = {
            let (mut file, mut log) = FileLog::open(dir.path(), 0, 1 << 20, 64 << 20).unwrap();
            let planned = log.stage_append(group, Epoch(2), &writes);
            assert_eq!(planned.1.appended.len(), 3);
            commit(&mut file, &mut log, planned);
            let first = LogRecord {
                owner: Epoch(2),
                chunk: writes[0].chunk,
                range: writes[0].range,
                version: writes[0].version,
            };
            let planned = log.stage_invalidate(group, &[first]);
            commit(&mut file, &mut log, planned);
            let planned = log.stage_fence(group, Epoch(3));
            commit(&mut file, &mut log, planned);
            assert_eq!(log.faults(), &[] as &[String]);
            assert_eq!(file.live_and_used_bytes().0, log.live_bytes());
            log.records(group)
        };
        let (file, mut log) = FileLog::open(dir.path(), 0, 1 << 20, 64 << 20).unwrap();
        assert_eq!(log.records(group), before);
        assert_eq!(log.fence(group), Epoch(3));
        assert_eq!(file.live_and_used_bytes().0, log.live_bytes());
        let third = read(&file, &mut log, group, &before[1]);
        assert_eq!(third.stamp, writes[2].stamp);
        assert_eq!(third.data.bytes().unwrap(), &vec![0xc3; 8192][..]);
        // The second write's first block is hidden by nothing: its bytes come back.
        let second = read(&file, &mut log, group, &before[0]);
        assert_eq!(second.data.bytes().unwrap()[..4096], vec![0xb2; 4096][..]);
        // A repeat of an appended version is taken as one (D1).
        let planned = log.stage_append(group, Epoch(2), &writes[..1]);
        assert_eq!((planned.1.repeats.len(), planned.0.ops.len()), (1, 0));
        assert_eq!(log.faults(), &[] as &[String]);
    }

    /// A commit whose appends do not all fit takes no effect: nothing is appended,
    /// and the log reads as before.
    #[test]
    fn a_commit_that_does_not_fit_takes_no_effect() {
        let dir = tempfile::tempdir().unwrap();
        let (mut file, mut log) = FileLog::open(dir.path(), 0, 1 << 20, SEGMENT_BYTES).unwrap();
        let group = ChunkGroupId(1);
        let planned = log.stage_append(group, Epoch(1), &[write(0, 1, 1)]);
        commit(&mut file, &mut log, planned);
        let (live, used) = file.live_and_used_bytes();
        // More than the engine can take, planned behind the core's back.
        let mut big = log.stage_append(group, Epoch(1), &[write(2, 2, 2)]).0;
        big.ops = (0..600u64)
            .map(|i| LogOp::Append {
                owner: somnus_types::OwnerId(1),
                object: ObjectId(9),
                range: ByteRange::new(i * 8192, 8192),
                version: Version(10 + i),
                stamp: Stamp(1),
                data: Payload::new(vec![0; 8192].into()),
            })
            .collect();
        assert!(matches!(file.commit(&big), Err(CommitError::NoSpace)));
        assert_eq!(file.live_and_used_bytes(), (live, used));
    }
}
