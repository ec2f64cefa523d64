//! A storage server's replica state on disk: chunk files, the groups' snapshot and the
//! journal, brought back as the core's [`ChunkStore`] at start (docs/runtime.md).
//!
//! - A write the core issues is made durable by [`ServerDisk::make_durable`] (journal
//!   append and sync) before the core hears `DiskDone`; at `DiskDone` the core applies
//!   it ([`ChunkStore::redo`]'s code), which writes the chunk files' blocks.
//! - [`ServerDisk::checkpoint`] syncs the chunk files, writes every group's fence and
//!   unstable writes (with their bytes: a new primary may ask for them, C3) as
//!   `groups.snap`, and cuts the journal.
//! - [`ServerDisk::open`] loads the chunk files' blocks (checking each block's
//!   checksum: a block that fails it is corrupt, and repaired from a replica), then the
//!   snapshot, then replays the journal through `ChunkStore::redo`: the state is the
//!   one the core last acknowledged from.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use somnus_core::cluster::Epoch;
use somnus_core::cluster::store::{BLOCK_BYTES, ChunkStore, StoreOp};
use somnus_core::cluster::{Payload, UnstableWrite};
use somnus_types::ChunkGroupId;

use crate::chunk_files::{ChunkFileError, ChunkFiles, IoErrors, SharedChunkFiles};
use crate::journal::{Journal, JournalError};
use crate::{durable, record};

const SNAPSHOT: &str = "groups.snap";
const JOURNAL: &str = "journal";
const CHUNKS: &str = "chunks";

/// Journal bytes past which [`ServerDisk::wants_checkpoint`] says so.
pub const JOURNAL_BYTES_MAX: u64 = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ServerDiskError {
    #[error(transparent)]
    Chunks(#[from] ChunkFileError),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("cannot use the groups' snapshot {path}: {source}")]
    SnapshotIo { path: PathBuf, source: std::io::Error },
    #[error("the groups' snapshot {path} is damaged ({what}); the server does not start on it")]
    SnapshotDamaged { path: PathBuf, what: String },
    /// The disk had no room: nothing of what was asked took effect, and the server
    /// goes on (a write is refused, or sent again by its primary).
    #[error("no room on the disk: {0}")]
    NoSpace(String),
    #[error("{0}")]
    Io(String),
}

impl ServerDiskError {
    /// Whether the error is the disk having no room (the server goes on), not a
    /// failing disk (the server stops).
    pub fn is_no_space(&self) -> bool {
        match self {
            ServerDiskError::NoSpace(_)
            | ServerDiskError::Journal(JournalError::NoSpace { .. }) => true,
            ServerDiskError::SnapshotIo { source, .. } => durable::is_no_space(source),
            _ => false,
        }
    }
}

type Groups = Vec<(ChunkGroupId, Epoch, Vec<UnstableWrite>)>;

#[derive(Debug)]
pub struct ServerDisk {
    dir: PathBuf,
    journal: Journal<StoreOp>,
    files: SharedChunkFiles,
    watch: DiskWatch,
}

/// What the server's task asks of its disk after every event, without the disk's lock
/// (which the disk worker holds through each sync): the chunk files' I/O errors, and
/// whether a checkpoint is due.
#[derive(Clone, Debug)]
pub struct DiskWatch {
    errors: IoErrors,
    journal_bytes: Arc<AtomicU64>,
}

impl DiskWatch {
    /// Whether the journal has grown past its bound.
    pub fn wants_checkpoint(&self) -> bool {
        self.journal_bytes.load(Ordering::Relaxed) > JOURNAL_BYTES_MAX
    }

    /// An I/O error the chunk files met since the last check: the server stops on it.
    pub fn check(&self) -> Result<(), ServerDiskError> {
        let errors = self.errors.lock().map(|e| e.clone()).unwrap_or_default();
        match errors.first() {
            Some(error) => Err(ServerDiskError::Io(error.clone())),
            None => Ok(()),
        }
    }
}

impl ServerDisk {
    /// Opens (creating) the replica state in `dir`, and the store it holds.
    pub fn open(
        dir: &Path,
        chunk_size_bytes: u64,
    ) -> Result<(ServerDisk, ChunkStore), ServerDiskError> {
        let errors = IoErrors::default();
        let (files, found) = ChunkFiles::open(&dir.join(CHUNKS), chunk_size_bytes, errors.clone())?;
        let files = SharedChunkFiles::new(files);
        let mut store = ChunkStore::with_data(chunk_size_bytes, Box::new(files.clone()));
        for block in found {
            store.restore_block(block.group, block.chunk, block.index, block.version, block.stamp);
            if !block.intact {
                store.corrupt_block(block.chunk, block.index * BLOCK_BYTES);
            }
        }
        for (group, epoch, unstable) in read_snapshot(&dir.join(SNAPSHOT))? {
            store.restore_group(group, epoch, unstable);
        }
        let (journal, ops) = Journal::open(&dir.join(JOURNAL))?;
        for op in ops {
            store.redo(op);
        }
        let journal_bytes = Arc::new(AtomicU64::new(journal.bytes()));
        let watch = DiskWatch { errors, journal_bytes };
        let disk = ServerDisk { dir: dir.to_owned(), journal, files, watch };
        disk.check()?;
        Ok((disk, store))
    }

    /// Makes `ops` durable, as one group commit: first the files of new chunks they
    /// write to, their space allocated, then the journal's append. With no room for
    /// either, none of `ops` is durable ([`ServerDiskError::is_no_space`]).
    pub fn make_durable(&mut self, ops: &[StoreOp]) -> Result<(), ServerDiskError> {
        self.files.prepare(ops).map_err(|error| {
            let what = format!("creating a chunk file in {}: {error}", self.dir.display());
            match durable::is_no_space(&error) {
                true => ServerDiskError::NoSpace(what),
                false => ServerDiskError::Io(what),
            }
        })?;
        self.journal.append(ops)?;
        self.watch.journal_bytes.store(self.journal.bytes(), Ordering::Relaxed);
        Ok(())
    }

    /// The errors and checkpoint bound, readable without this disk's lock.
    pub fn watch(&self) -> DiskWatch {
        self.watch.clone()
    }

    /// Whether the journal has grown past its bound.
    pub fn wants_checkpoint(&self) -> bool {
        self.watch.wants_checkpoint()
    }

    /// An I/O error the chunk files met since the last check: the server stops on it.
    pub fn check(&self) -> Result<(), ServerDiskError> {
        self.watch.check()
    }

    /// Makes the store's state durable without the journal, then cuts it.
    pub fn checkpoint(&mut self, store: &mut ChunkStore) -> Result<(), ServerDiskError> {
        store.sync_data().map_err(ServerDiskError::Io)?;
        let path = self.dir.join(SNAPSHOT);
        durable::replace(&path, &encode_snapshot(&store.groups()))
            .map_err(|source| ServerDiskError::SnapshotIo { path, source })?;
        self.journal.cut()?;
        self.watch.journal_bytes.store(0, Ordering::Relaxed);
        Ok(())
    }
}

/// The payloads of every unstable write, in order.
fn payloads_of(groups: &mut Groups) -> Vec<&mut Payload> {
    groups.iter_mut().flat_map(|(_, _, w)| w.iter_mut().map(|w| &mut w.data)).collect()
}

/// The snapshot: one record (`record.rs`) of every group and its unstable writes' bytes.
fn encode_snapshot(groups: &Groups) -> Vec<u8> {
    let payloads: Vec<_> = groups.iter().flat_map(|(_, _, w)| w.iter().map(|w| &w.data)).collect();
    let mut out = Vec::new();
    record::encode(groups, &payloads, &mut out);
    out
}

fn read_snapshot(path: &Path) -> Result<Groups, ServerDiskError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => Bytes::from(bytes),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(ServerDiskError::SnapshotIo { path: path.to_owned(), source }),
    };
    let damaged = |what: String| ServerDiskError::SnapshotDamaged { path: path.to_owned(), what };
    match record::decode(&bytes, payloads_of).map_err(damaged)? {
        Some((groups, length)) if length == bytes.len() => Ok(groups),
        Some((_, length)) => Err(damaged(format!("{} bytes past its end", bytes.len() - length))),
        None => Err(damaged(format!("cut short at {} bytes", bytes.len()))),
    }
}

#[cfg(test)]
mod tests {
    use somnus_core::cluster::{ChunkId, ChunkIndex, Payload, Piece, Stamp};
    use somnus_types::{ByteRange, ObjectId, Version};

    use super::*;

    const CHUNK_BYTES: u64 = 1 << 20;
    const GROUP: ChunkGroupId = ChunkGroupId(3);

    fn chunk(n: u32) -> ChunkId {
        ChunkId { object: ObjectId(7), chunk: ChunkIndex(n) }
    }

    fn write(n: u32, block: u64, blocks: u64, version: u64, fill: u8) -> UnstableWrite {
        let range = ByteRange::new(block * BLOCK_BYTES, blocks * BLOCK_BYTES);
        let data = Payload::new(vec![fill; range.size_bytes() as usize].into());
        UnstableWrite {
            chunk: chunk(n),
            range,
            version: Version(version),
            stamp: Stamp(version * 10),
            data,
        }
    }

    /// What the core would do: make durable, then apply.
    fn commit(disk: &mut ServerDisk, store: &mut ChunkStore, ops: Vec<StoreOp>) {
        disk.make_durable(&ops).unwrap();
        for op in ops {
            store.redo(op);
        }
        disk.check().unwrap();
    }

    /// Everything a replica holds: blocks with bytes, fences, unstable writes.
    fn state(store: &mut ChunkStore) -> (Vec<Vec<Piece>>, Groups) {
        let chunks: Vec<ChunkId> = store.chunk_ids().collect();
        let whole = ByteRange::new(0, CHUNK_BYTES);
        let reads = chunks.into_iter().map(|c| store.read(c, whole).unwrap()).collect();
        (reads, store.groups())
    }

    #[test]
    fn a_restart_brings_back_exactly_what_was_made_durable() {
        let dir = tempfile::tempdir().unwrap();
        let (mut disk, mut store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        commit(
            &mut disk,
            &mut store,
            vec![
                StoreOp::Fence { group: GROUP, epoch: Epoch(2) },
                StoreOp::Apply { group: GROUP, write: write(0, 0, 4, 5, 0xa1), stable: Version(0) },
                StoreOp::Apply { group: GROUP, write: write(0, 2, 4, 6, 0xa2), stable: Version(5) },
                StoreOp::Apply { group: GROUP, write: write(1, 0, 1, 7, 0xa3), stable: Version(5) },
            ],
        );
        let before = state(&mut store);
        assert_eq!(before.1[0].2.len(), 2, "versions 6 and 7 are unstable");
        assert_eq!(before.1[0].2[0].data, write(0, 2, 4, 6, 0xa2).data, "with their bytes");
        drop((disk, store));

        // From the journal alone.
        let (mut disk, mut store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        assert_eq!(state(&mut store), before);
        // From a checkpoint, then a journal after it.
        disk.checkpoint(&mut store).unwrap();
        commit(
            &mut disk,
            &mut store,
            vec![StoreOp::Apply {
                group: GROUP,
                write: write(0, 1, 1, 8, 0xa4),
                stable: Version(7),
            }],
        );
        let after = state(&mut store);
        drop((disk, store));
        let (_, mut store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        assert_eq!(state(&mut store), after);
        assert_ne!(after, before);
    }

    #[test]
    fn a_torn_last_record_is_dropped_and_damage_before_the_end_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let (mut disk, mut store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        let first =
            StoreOp::Apply { group: GROUP, write: write(0, 0, 1, 5, 1), stable: Version(0) };
        let second =
            StoreOp::Apply { group: GROUP, write: write(0, 1, 1, 6, 2), stable: Version(0) };
        commit(&mut disk, &mut store, vec![first.clone()]);
        commit(&mut disk, &mut store, vec![second]);
        drop((disk, store));
        let journal = dir.path().join(JOURNAL);
        let bytes = std::fs::read(&journal).unwrap();

        // A crash in the middle of the second append: it was never acknowledged.
        std::fs::write(&journal, &bytes[..bytes.len() - 100]).unwrap();
        // Its blocks reached the chunk file before the crash: start from none.
        std::fs::remove_dir_all(dir.path().join(CHUNKS)).unwrap();
        let (_, store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        assert_eq!(store.groups()[0].2.len(), 1, "only the first write");
        assert_eq!(
            std::fs::metadata(&journal).unwrap().len() as usize,
            bytes.len() / 2,
            "the torn record is cut off"
        );
        drop(store);

        // A flipped bit in the first record, with the second after it: damage.
        let mut damaged = bytes.clone();
        damaged[20] ^= 1;
        std::fs::write(&journal, &damaged).unwrap();
        let error = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap_err().to_string();
        assert!(error.contains("damaged at byte 0 (checksum mismatch)"), "{error}");
        assert_eq!(
            std::fs::read(&journal).unwrap(),
            damaged,
            "nothing is cut from a damaged journal"
        );
    }

    #[test]
    fn a_block_garbled_on_disk_is_found_corrupt_at_start_and_on_read() {
        let dir = tempfile::tempdir().unwrap();
        let (mut disk, mut store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        commit(
            &mut disk,
            &mut store,
            vec![StoreOp::Apply {
                group: GROUP,
                write: write(0, 0, 2, 5, 0x77),
                stable: Version(5),
            }],
        );
        disk.checkpoint(&mut store).unwrap();
        let path = dir.path().join(CHUNKS).join("0000000000000007-00000000.chunk");
        let garble = |path: &Path| {
            let mut bytes = std::fs::read(path).unwrap();
            let at = bytes.len() - CHUNK_BYTES as usize + 100; // block 0's data
            bytes[at] ^= 0xff;
            std::fs::write(path, bytes).unwrap();
        };
        // While the server runs: the next read finds it.
        garble(&path);
        let one = ByteRange::new(0, BLOCK_BYTES);
        assert!(store.read(chunk(0), one).is_err());
        assert_eq!(store.corrupt_ranges(), [(GROUP, chunk(0), one)]);
        assert!(store.read(chunk(0), ByteRange::new(BLOCK_BYTES, BLOCK_BYTES)).is_ok());
        drop((disk, store));
        // At start.
        let (_, store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        assert_eq!(store.corrupt_ranges(), [(GROUP, chunk(0), one)]);
        // A crash lost the file's size (set at creation, never synced): blocks past
        // the end read as unwritten, and the written one beside them still reads.
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(CHUNK_BYTES / 2).unwrap();
        drop((store, file));
        let (_, mut store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        let across = store.read(chunk(0), ByteRange::new(BLOCK_BYTES, CHUNK_BYTES - BLOCK_BYTES));
        assert_eq!(across.unwrap()[0].data.bytes().map(|b| b[0]), Some(0x77));
        // A damaged file header stops the start, naming the file.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[3] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        let error = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap_err().to_string();
        assert!(error.contains("00000000.chunk has a damaged header"), "{error}");
    }
}
