//! A storage server's replica state on disk: block packs, the groups' snapshot and
//! the journal, brought back as the core's [`ChunkStore`] at start (docs/runtime.md).
//!
//! - A change the core issues comes with the runs of blocks it lands on; it is made
//!   durable by [`ServerDisk::make_durable`] (the slots of its new blocks reserved,
//!   the journal's append and sync, then the runs written into their slots) before the
//!   core hears `DiskDone` and records the runs.
//! - [`ServerDisk::begin_checkpoint`] starts a new journal; its [`Checkpoint`], off the
//!   server's task, syncs the packs, writes every group's fence and unstable writes
//!   (with their bytes: a new primary may ask for them, C3) as the snapshot, and
//!   removes the journals before it (`server/disk/checkpoint.rs`).
//! - [`ServerDisk::open`] moves the blocks of an earlier build's chunk files into the
//!   packs, loads the packs' blocks (checking each block's checksum: a block that
//!   fails it is corrupt, and repaired from a replica), then the newest snapshot, then
//!   replays the journals from it through `ChunkStore::redo`, writing the runs each
//!   change lands on again: the state is the one the core last acknowledged from.

pub mod checkpoint;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use somnus_core::cluster::Epoch;
use somnus_core::cluster::store::{BLOCK_BYTES, BlockRun, BlocksRead, ChunkStore, StoreOp};
use somnus_core::cluster::{ChunkId, Payload, UnstableWrite};
use somnus_types::ChunkGroupId;

use crate::files::file_header::{self, Found};
use crate::files::journal::{Journal, JournalError};
use crate::files::{durable, record};
use crate::server::legacy_chunks::{self, ChunkFileError};
use crate::server::packs::{PackError, PackStats, Packs, SharedPacks};
use checkpoint::Checkpoint;

/// The packs' directory.
const PACKS: &str = "packs";
/// An earlier build's chunk files, moved into the packs at start.
const LEGACY_CHUNKS: &str = "chunks";

/// Journal bytes past which [`ServerDisk::wants_checkpoint`] says so, at the least.
pub const JOURNAL_BYTES_FLOOR: u64 = 64 << 20;

/// The journal may also grow to this many times the last snapshot before the next:
/// a snapshot holds every unstable write's bytes (the last write of each group, up
/// to a chunk each), so under large writes it is tens of megabytes, and taken every
/// 64 MiB it would cost more than half as much again as the journal. Measured with
/// 1 MiB S3 PUTs on `somnus up` (docs/results/s3-peers.md): 4 times gave 161 op/s,
/// 16 times (with the ceiling below) 183, medians of alternating rounds.
const JOURNAL_PER_SNAPSHOT: u64 = 16;

/// ... but never past this: the journal's bytes are disk the packs cannot use until
/// the next checkpoint, and a restart reads them all. The cluster's default disk
/// reserve (`disk_reserve_bytes`) is as large.
const JOURNAL_BYTES_CEILING: u64 = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ServerDiskError {
    #[error(transparent)]
    Packs(#[from] PackError),
    #[error(transparent)]
    Chunks(#[from] ChunkFileError),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("cannot use the groups' snapshot {path}: {source}")]
    SnapshotIo { path: PathBuf, source: std::io::Error },
    #[error("the groups' snapshot {path} is damaged ({what}); the server does not start on it")]
    SnapshotDamaged { path: PathBuf, what: String },
    #[error(
        "the groups' snapshot {path} cannot be read: {source}; the server does not start on it"
    )]
    SnapshotFormat { path: PathBuf, source: file_header::HeaderError },
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

/// Every group's fence and unstable writes: what a snapshot holds.
pub type Groups = Vec<(ChunkGroupId, Epoch, Vec<UnstableWrite>)>;

#[derive(Debug)]
pub struct ServerDisk {
    dir: PathBuf,
    /// The journal appends go to, and its sequence.
    journal: Journal<StoreOp>,
    seq: u64,
    files: SharedPacks,
    watch: DiskWatch,
}

/// What the server's task asks of its disk after every event, without the disk's lock
/// (which the disk worker holds through each sync): whether a checkpoint is due.
#[derive(Clone, Debug)]
pub struct DiskWatch {
    /// Bytes of every journal no snapshot covers yet.
    pub(crate) journal_bytes: Arc<AtomicU64>,
    pub(crate) snapshot_bytes: Arc<AtomicU64>,
    files: SharedPacks,
}

impl DiskWatch {
    /// Whether the journals have grown past their bound.
    pub fn wants_checkpoint(&self) -> bool {
        let snapshot = self.snapshot_bytes.load(Ordering::Relaxed);
        let bound = snapshot
            .saturating_mul(JOURNAL_PER_SNAPSHOT)
            .clamp(JOURNAL_BYTES_FLOOR, JOURNAL_BYTES_CEILING);
        self.journal_bytes.load(Ordering::Relaxed) > bound
    }

    /// Bytes of the journals no snapshot covers yet.
    pub fn journal_bytes(&self) -> u64 {
        self.journal_bytes.load(Ordering::Relaxed)
    }

    /// What the packs hold.
    pub fn packs(&self) -> PackStats {
        self.files.stats()
    }
}

impl ServerDisk {
    /// Opens (creating) the replica state in `dir`, and the store it holds.
    pub fn open(
        dir: &Path,
        chunk_size_bytes: u64,
    ) -> Result<(ServerDisk, ChunkStore), ServerDiskError> {
        migrate(dir, chunk_size_bytes)?;
        let (files, found) = Packs::open(&dir.join(PACKS), chunk_size_bytes)?;
        let scan_error = |e| ServerDiskError::Io(format!("cannot read {}: {e}", dir.display()));
        let generations = checkpoint::scan(dir).map_err(scan_error)?;
        let files = SharedPacks::new(files);
        let mut store = ChunkStore::new(chunk_size_bytes);
        for block in found {
            store.restore_block(block.group, block.chunk, block.index, block.version, block.stamp);
            if !block.intact {
                store.corrupt_block(block.chunk, block.index * BLOCK_BYTES);
            }
        }
        let mut snapshot_bytes = 0;
        if let Some(seq) = generations.snapshot {
            let groups;
            (groups, snapshot_bytes) = read_snapshot(&checkpoint::snapshot_path(dir, seq))?;
            for (group, epoch, unstable) in groups {
                store.restore_group(group, epoch, unstable);
            }
        }
        let mut journal = None;
        let mut journal_bytes = 0;
        for &seq in &generations.journals {
            let (opened, ops) = Journal::open_direct(&checkpoint::journal_path(dir, seq))?;
            for op in ops {
                replay(&files, &mut store, op).map_err(|error| {
                    ServerDiskError::Io(format!(
                        "replaying the journal in {}: {error}",
                        dir.display()
                    ))
                })?;
            }
            journal_bytes += opened.bytes();
            journal = Some((opened, seq));
        }
        // The journals' frees: their slots back before the server serves.
        files.punch_all_released().map_err(|error| ServerDiskError::Io(error.to_string()))?;
        let (journal, seq) = match journal {
            Some(last) => last,
            None => new_journal(dir, generations.snapshot.unwrap_or(0))?,
        };
        let journal_bytes = Arc::new(AtomicU64::new(journal_bytes));
        let snapshot_bytes = Arc::new(AtomicU64::new(snapshot_bytes));
        let watch = DiskWatch { journal_bytes, snapshot_bytes, files: files.clone() };
        let disk = ServerDisk { dir: dir.to_owned(), journal, seq, files, watch };
        Ok((disk, store))
    }

    /// Makes `ops` durable, as one group commit, and puts each one's runs in place:
    /// first the slots of the blocks they write that have none, their space
    /// allocated, then the journal's append and sync, then the runs' writes and the
    /// frees' releases. With no room for the first two, none of `ops` is durable and
    /// nothing stays reserved ([`ServerDiskError::is_no_space`]).
    pub fn make_durable(
        &mut self,
        ops: &[StoreOp],
        runs: &[Vec<BlockRun>],
    ) -> Result<(), ServerDiskError> {
        let reservation = self.files.prepare(runs.iter().flatten()).map_err(|error| {
            let what = format!("reserving room in {}: {error}", self.dir.display());
            match durable::is_no_space(&error) {
                true => ServerDiskError::NoSpace(what),
                false => ServerDiskError::Io(what),
            }
        })?;
        let before = self.journal.bytes();
        if let Err(error) = self.journal.append(ops) {
            // A punch that failed too stops the server (as any I/O error does) rather
            // than leaving it to think it out of room only.
            self.files.release(reservation).map_err(|e| ServerDiskError::Io(e.to_string()))?;
            return Err(error.into());
        }
        let appended = self.journal.bytes() - before;
        self.watch.journal_bytes.fetch_add(appended, Ordering::Relaxed);
        for (op, runs) in ops.iter().zip(runs) {
            self.files.write_runs(runs).map_err(|e| ServerDiskError::Io(e.to_string()))?;
            if let StoreOp::Free { objects } = op {
                self.files.free_objects(objects);
            }
        }
        Ok(())
    }

    /// Blocks `blocks` of `chunk` with their headers, or those that fail their
    /// checksum.
    pub fn read_blocks(
        &self,
        chunk: ChunkId,
        blocks: std::ops::Range<u64>,
    ) -> std::io::Result<Result<BlocksRead, Vec<u64>>> {
        self.files.read_blocks(chunk, blocks)
    }

    /// The errors and checkpoint bound, readable without this disk's lock.
    pub fn watch(&self) -> DiskWatch {
        self.watch.clone()
    }

    /// The packs, for the disk worker to punch out freed slots without this disk's
    /// lock.
    pub fn packs(&self) -> SharedPacks {
        self.files.clone()
    }

    /// Whether the journal has grown past its bound.
    pub fn wants_checkpoint(&self) -> bool {
        self.watch.wants_checkpoint()
    }

    /// Begins a checkpoint of `groups`, the store's groups with every change made
    /// durable so far applied: later appends go to a new journal, and the returned
    /// [`Checkpoint`] makes the state before it durable without the older journals.
    pub fn begin_checkpoint(&mut self, groups: Groups) -> Result<Checkpoint, ServerDiskError> {
        let covered_bytes = self.watch.journal_bytes.load(Ordering::Relaxed);
        (self.journal, self.seq) = new_journal(&self.dir, self.seq + 1)?;
        Ok(Checkpoint {
            dir: self.dir.clone(),
            files: self.files.clone(),
            groups,
            seq: self.seq,
            covered_bytes,
            watch: self.watch.clone(),
        })
    }

    /// A whole checkpoint at once, every change made durable so far applied to `store`.
    pub fn checkpoint(&mut self, store: &ChunkStore) -> Result<(), ServerDiskError> {
        self.begin_checkpoint(store.groups())?.finish()
    }
}

/// Redoes `op`, a change the journal holds, on `store` and writes the runs it lands
/// on into the packs (a free's slots released).
fn replay(files: &SharedPacks, store: &mut ChunkStore, op: StoreOp) -> std::io::Result<()> {
    if let StoreOp::Free { objects } = &op {
        files.free_objects(objects);
    }
    files.write_runs(&store.redo(op))
}

/// Moves the blocks of an earlier build's chunk files in `dir` into the packs, each as
/// it is on disk, and removes the files once the packs holding them are synced. A
/// crash half way leaves blocks in both, which the packs' open reads as one.
fn migrate(dir: &Path, chunk_size_bytes: u64) -> Result<(), ServerDiskError> {
    let legacy = dir.join(LEGACY_CHUNKS);
    if !legacy.is_dir() {
        return Ok(());
    }
    let io = |what: &str, error: std::io::Error| {
        ServerDiskError::Io(format!("{what} {}: {error}", legacy.display()))
    };
    let paths = legacy_chunks::files(&legacy)?;
    let (mut packs, _) = Packs::open(&dir.join(PACKS), chunk_size_bytes)?;
    for path in &paths {
        for block in legacy_chunks::read(path, chunk_size_bytes)? {
            packs.adopt(&block).map_err(|e| io("moving the blocks of", e))?;
        }
    }
    packs.sync_all().map_err(|e| io("syncing the packs the blocks of", e))?;
    std::fs::remove_dir_all(&legacy).map_err(|e| io("removing", e))?;
    durable::sync_dir(dir).map_err(|e| io("syncing the directory of", e))
}

/// Creates journal `seq` in `dir`, empty (its name durable before anything is
/// appended to it: `Journal::open`).
fn new_journal(dir: &Path, seq: u64) -> Result<(Journal<StoreOp>, u64), ServerDiskError> {
    let path = checkpoint::journal_path(dir, seq);
    let (journal, ops) = Journal::open_direct(&path)?;
    if !ops.is_empty() {
        return Err(ServerDiskError::Io(format!("{} is not new", path.display())));
    }
    Ok((journal, seq))
}

/// The payloads of every unstable write, in order.
fn payloads_of(groups: &mut Groups) -> Vec<&mut Payload> {
    groups.iter_mut().flat_map(|(_, _, w)| w.iter_mut().map(|w| &mut w.data)).collect()
}

/// The snapshot: its header (`file_header`), then one record (`files/record.rs`) of every
/// group and its unstable writes' bytes.
pub(crate) fn encode_snapshot(groups: &Groups) -> Vec<u8> {
    let payloads: Vec<_> = groups.iter().flat_map(|(_, _, w)| w.iter().map(|w| &w.data)).collect();
    let mut out = file_header::encode(&file_header::GROUPS_SNAPSHOT).to_vec();
    record::encode(groups, &payloads, &mut out);
    out
}

/// The groups of the snapshot at `path` (none if there is none) and its size.
pub(crate) fn read_snapshot(path: &Path) -> Result<(Groups, u64), ServerDiskError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => Bytes::from(bytes),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(source) => return Err(ServerDiskError::SnapshotIo { path: path.to_owned(), source }),
    };
    let damaged = |what: String| ServerDiskError::SnapshotDamaged { path: path.to_owned(), what };
    // Format 1, an earlier build's, is the record alone.
    let start = match file_header::read(&file_header::GROUPS_SNAPSHOT, &bytes) {
        Ok(Found::Format(_)) => file_header::HEADER_BYTES,
        Ok(Found::Unversioned) => 0,
        Ok(Found::Torn) => return Err(damaged(format!("cut short at {} bytes", bytes.len()))),
        Err(source) => {
            return Err(ServerDiskError::SnapshotFormat { path: path.to_owned(), source });
        }
    };
    let record = bytes.slice(start..);
    match record::decode(&record, payloads_of).map_err(damaged)? {
        Some((groups, length)) if length == record.len() => Ok((groups, bytes.len() as u64)),
        Some((_, length)) => Err(damaged(format!("{} bytes past its end", record.len() - length))),
        None => Err(damaged(format!("cut short at {} bytes", bytes.len()))),
    }
}

#[cfg(test)]
mod tests {
    use crate::server::packs;
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

    /// A write of `blocks` blocks of chunk 0 from block 0, applied with `stable`.
    fn apply_new(blocks: u64, version: u64, stable: u64, fill: u8) -> StoreOp {
        let write = write(0, 0, blocks, version, fill);
        StoreOp::Apply { group: GROUP, write, stable: Version(stable) }
    }

    /// What the core would do: decide the runs, make durable, then record them.
    fn commit(disk: &mut ServerDisk, store: &mut ChunkStore, ops: Vec<StoreOp>) {
        let mut runs = Vec::new();
        for op in &ops {
            // Each change's runs as the ones before it left the store.
            let landing = store.landing(op);
            store.land(op.clone(), &landing);
            runs.push(landing);
        }
        disk.make_durable(&ops, &runs).unwrap();
    }

    /// A read as the server makes it: the store's pieces with the disk's bytes, or
    /// the corrupt blocks (found so).
    fn read(
        disk: &ServerDisk,
        store: &mut ChunkStore,
        chunk: ChunkId,
        range: ByteRange,
    ) -> Result<Vec<Piece>, somnus_core::cluster::store::Corrupt> {
        let pieces = store.read(chunk, range)?;
        let blocks = range.start / BLOCK_BYTES..range.end.div_ceil(BLOCK_BYTES);
        match disk.read_blocks(chunk, blocks).unwrap() {
            Ok(found) => Ok(somnus_core::cluster::store::fill(pieces, &found).unwrap()),
            Err(bad) => {
                store.found_corrupt(chunk, &bad);
                store.read(chunk, range)
            }
        }
    }

    /// Everything a replica holds: blocks with bytes, fences, unstable writes.
    fn state(disk: &ServerDisk, store: &mut ChunkStore) -> (Vec<Vec<Piece>>, Groups) {
        let chunks: Vec<ChunkId> = store.chunk_ids().collect();
        let whole = ByteRange::new(0, CHUNK_BYTES);
        let reads = chunks.into_iter().map(|c| read(disk, store, c, whole).unwrap()).collect();
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
        let before = state(&disk, &mut store);
        assert_eq!(before.1[0].2.len(), 2, "versions 6 and 7 are unstable");
        assert_eq!(before.1[0].2[0].data, write(0, 2, 4, 6, 0xa2).data, "with their bytes");
        drop((disk, store));

        // From the journal alone.
        let (mut disk, mut store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        assert_eq!(state(&disk, &mut store), before);
        // From a checkpoint, then a journal after it.
        disk.checkpoint(&store).unwrap();
        commit(
            &mut disk,
            &mut store,
            vec![StoreOp::Apply {
                group: GROUP,
                write: write(0, 1, 1, 8, 0xa4),
                stable: Version(7),
            }],
        );
        let after = state(&disk, &mut store);
        drop((disk, store));
        let (disk, mut store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        assert_eq!(state(&disk, &mut store), after);
        assert_ne!(after, before);
        // Where the file system writes around the cache, each batch was padded to
        // 4 KiB (and read back above through its padding).
        let direct = {
            use std::os::unix::fs::OpenOptionsExt;
            let flags = nix::fcntl::OFlag::O_DIRECT.bits();
            let probe = dir.path().join("probe");
            std::fs::write(&probe, b"").unwrap();
            std::fs::OpenOptions::new().write(true).custom_flags(flags).open(&probe).is_ok()
        };
        let journal = checkpoint::journal_path(dir.path(), 1);
        let length = std::fs::metadata(&journal).unwrap().len();
        assert!(
            !direct || (length > 0 && length.is_multiple_of(4096)),
            "a journal of {length} bytes"
        );
    }

    /// The file names a replica directory holds, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n != PACKS)
            .collect();
        names.sort();
        names
    }

    /// A crash at either point of a checkpoint loses nothing and doubles nothing:
    /// after it began (a new journal, no snapshot yet) and after its snapshot (the
    /// journal it covers still there).
    #[test]
    fn a_crash_in_a_checkpoint_restarts_to_the_same_state() {
        let dir = tempfile::tempdir().unwrap();
        let (mut disk, mut store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        let apply = |block, version, fill| StoreOp::Apply {
            group: GROUP,
            write: write(0, block, 1, version, fill),
            stable: Version(version - 1),
        };
        commit(&mut disk, &mut store, vec![apply(0, 5, 0xc1), apply(1, 6, 0xc2)]);
        let begun = disk.begin_checkpoint(store.groups()).unwrap();
        commit(&mut disk, &mut store, vec![apply(0, 7, 0xc3)]);
        let expected = state(&disk, &mut store);
        drop((disk, store));
        // Begun, never finished: the old journal and the new one, replayed in order.
        assert_eq!(names(dir.path()), ["journal-0000000000000000", "journal-0000000000000001"]);
        let (mut disk, mut store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        assert_eq!(state(&disk, &mut store), expected);
        drop(begun);

        // Finished with writes after its beginning; the journal it covers comes back
        // as a crash before its removal would leave it.
        let covered = std::fs::read(checkpoint::journal_path(dir.path(), 1)).unwrap();
        let begun = disk.begin_checkpoint(store.groups()).unwrap();
        commit(&mut disk, &mut store, vec![apply(1, 8, 0xc4)]);
        begun.finish().unwrap();
        let expected = state(&disk, &mut store);
        assert_eq!(names(dir.path()), ["groups-0000000000000002.snap", "journal-0000000000000002"]);
        std::fs::write(checkpoint::journal_path(dir.path(), 1), covered).unwrap();
        drop((disk, store));
        let (disk, mut store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        assert_eq!(state(&disk, &mut store), expected);
        assert_eq!(names(dir.path()), ["groups-0000000000000002.snap", "journal-0000000000000002"]);
    }

    /// A checkpoint does not remove the journals once the packs met an I/O error: a
    /// free whose punch failed leaves its chunk's headers on disk, and only the
    /// journal's replay frees it again at a restart.
    #[test]
    fn a_checkpoint_keeps_the_journals_after_an_error_of_the_packs() {
        let dir = tempfile::tempdir().unwrap();
        let (mut disk, mut store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        commit(&mut disk, &mut store, vec![apply_new(2, 5, 4, 0xe1)]);
        commit(&mut disk, &mut store, vec![StoreOp::Free { objects: vec![ObjectId(7)] }]);
        disk.files.fail_punch("freeing slots: injected");
        let failed = disk.checkpoint(&store).unwrap_err();
        assert!(failed.to_string().contains("injected"), "{failed}");
        assert_eq!(names(dir.path()), ["journal-0000000000000000", "journal-0000000000000001"]);
        drop((disk, store));
        let (_, store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        assert!(store.is_freed(ObjectId(7)), "the journal's free replayed");
        assert_eq!(store.bytes_held(), 0);
    }

    /// An earlier build's `journal` and `groups.snap` are read as generation 0.
    #[test]
    fn the_files_of_an_earlier_build_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let (mut disk, mut store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        commit(&mut disk, &mut store, vec![apply_new(1, 5, 0, 0xd1)]);
        let snapshot = encode_snapshot(&store.groups());
        let expected = state(&disk, &mut store);
        drop((disk, store));
        std::fs::rename(checkpoint::journal_path(dir.path(), 0), dir.path().join("journal"))
            .unwrap();
        std::fs::write(dir.path().join("groups.snap"), snapshot).unwrap();
        let (disk, mut store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        assert_eq!(state(&disk, &mut store), expected);
        assert_eq!(names(dir.path()), ["groups-0000000000000000.snap", "journal-0000000000000000"]);
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
        let journal = checkpoint::journal_path(dir.path(), 0);
        let bytes = std::fs::read(&journal).unwrap();

        // A crash in the middle of the second append (after the journal's header block,
        // each starts on 4 KiB, the same length padded): it was never acknowledged.
        let header = 4096;
        let first_ends = header + (bytes.len() - header) / 2;
        std::fs::write(&journal, &bytes[..first_ends + 100]).unwrap();
        // Its blocks reached the packs before the crash: start from none.
        std::fs::remove_dir_all(dir.path().join(PACKS)).unwrap();
        let (_, store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        assert_eq!(store.groups()[0].2.len(), 1, "only the first write");
        assert_eq!(
            std::fs::metadata(&journal).unwrap().len() as usize,
            first_ends,
            "the torn record is cut off"
        );
        drop(store);

        // A flipped bit in the first record, with the second after it: damage.
        let mut damaged = bytes.clone();
        damaged[header + 20] ^= 1;
        std::fs::write(&journal, &damaged).unwrap();
        let error = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap_err().to_string();
        assert!(error.contains("damaged at byte 4096 (checksum mismatch)"), "{error}");
        assert_eq!(
            std::fs::read(&journal).unwrap(),
            damaged,
            "nothing is cut from a damaged journal"
        );
    }

    /// The first pack of a replica directory, and where slot `slot`'s bytes are.
    fn pack(dir: &Path) -> PathBuf {
        dir.join(PACKS).join("pack-00000000")
    }

    /// A crash before the packs were synced can leave a block's header on disk
    /// without its bytes: the journal's replay of the write gives them back, so a
    /// write every replica acknowledged survives a power cut of every replica.
    #[test]
    fn a_block_torn_by_a_crash_is_rewritten_from_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let (mut disk, mut store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        let written = write(0, 0, 2, 5, 0x6b);
        let op = StoreOp::Apply { group: GROUP, write: written, stable: Version(5) };
        commit(&mut disk, &mut store, vec![op]);
        drop((disk, store));
        // Block 1's bytes never reached the disk (slot 1); its header did.
        let file = std::fs::OpenOptions::new().write(true).open(pack(dir.path())).unwrap();
        let zeros = vec![0u8; BLOCK_BYTES as usize];
        std::os::unix::fs::FileExt::write_all_at(&file, &zeros, packs::slot_data_at(1)).unwrap();
        drop(file);

        let (disk, mut store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        assert!(store.corrupt_ranges().is_empty(), "{:?}", store.corrupt_ranges());
        let read = read(&disk, &mut store, chunk(0), ByteRange::new(0, 2 * BLOCK_BYTES)).unwrap();
        assert_eq!(read[0].data.bytes().unwrap()[..], vec![0x6b; 2 * BLOCK_BYTES as usize][..]);
        // And on disk: the next start finds the block whole without the journal.
        let (mut disk, store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        disk.checkpoint(&store).unwrap();
        drop((disk, store));
        let (_, store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        assert!(store.corrupt_ranges().is_empty());
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
        disk.checkpoint(&store).unwrap();
        let path = pack(dir.path());
        let flip = |at: u64| {
            let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
            let mut byte = [0u8];
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut byte, at).unwrap();
            byte[0] ^= 0xff;
            std::os::unix::fs::FileExt::write_all_at(&file, &byte, at).unwrap();
        };
        // While the server runs (block 0's bytes, in slot 0): the next read finds it.
        flip(packs::slot_data_at(0) + 100);
        let one = ByteRange::new(0, BLOCK_BYTES);
        assert!(read(&disk, &mut store, chunk(0), one).is_err());
        assert_eq!(store.corrupt_ranges(), [(GROUP, chunk(0), one)]);
        assert!(
            read(&disk, &mut store, chunk(0), ByteRange::new(BLOCK_BYTES, BLOCK_BYTES)).is_ok()
        );
        drop((disk, store));
        // At start.
        let (_, store) = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap();
        assert_eq!(store.corrupt_ranges(), [(GROUP, chunk(0), one)]);
        drop(store);
        // A damaged slot header stops the start, naming the pack and the slot: whose
        // block it held cannot be told, and a block read as unwritten would be lost.
        flip(packs::slot_header_at(1) + 3);
        let error = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap_err().to_string();
        assert!(error.contains("pack-00000000 is damaged (slot 1:"), "{error}");
        flip(packs::slot_header_at(1) + 3);
        // A damaged pack header too.
        flip(3);
        let error = ServerDisk::open(dir.path(), CHUNK_BYTES).unwrap_err().to_string();
        assert!(error.contains("pack-00000000 is damaged (not a somnus pack)"), "{error}");
    }

    /// Goal: the chunk files of an earlier build move into the packs at start, each
    /// block as it was (a corrupt one stays corrupt, to be repaired), and are gone
    /// after. Method: the format-1 fixture, opened as a replica directory.
    #[test]
    fn the_chunk_files_of_an_earlier_build_move_into_the_packs() {
        let dir = tempfile::tempdir().unwrap();
        let legacy = dir.path().join(LEGACY_CHUNKS);
        std::fs::create_dir(&legacy).unwrap();
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/chunks-v1");
        for entry in std::fs::read_dir(fixture).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), legacy.join(entry.file_name())).unwrap();
        }
        let chunk_bytes = 64 << 10;
        let (disk, mut store) = ServerDisk::open(dir.path(), chunk_bytes).unwrap();
        assert!(!legacy.exists(), "the chunk files are gone");
        let first = ChunkId { object: ObjectId(7), chunk: ChunkIndex(0) };
        let found = read(&disk, &mut store, first, ByteRange::new(0, 2 * BLOCK_BYTES)).unwrap();
        assert_eq!(found[0].data.bytes().unwrap()[..], vec![0xa1; 2 * BLOCK_BYTES as usize][..]);
        assert_eq!((found[0].version, found[0].stamp), (Version(5), Stamp(50)));
        let garbled = ByteRange::new(5 * BLOCK_BYTES, BLOCK_BYTES);
        assert_eq!(store.corrupt_ranges(), [(ChunkGroupId(3), first, garbled)]);
        let second = ChunkId { object: ObjectId(8), chunk: ChunkIndex(1) };
        let last = ByteRange::new(15 * BLOCK_BYTES, BLOCK_BYTES);
        let found = read(&disk, &mut store, second, last).unwrap();
        assert_eq!(found[0].data.bytes().unwrap()[0], 0xb1);
        assert_eq!(store.bytes_held(), 4 * BLOCK_BYTES);
        drop(store);
        let (_, store) = ServerDisk::open(dir.path(), chunk_bytes).unwrap();
        assert_eq!(store.bytes_held(), 4 * BLOCK_BYTES, "moved once");
    }
}
