//! The server's disk as messages: every disk operation is an action that carries
//! what it needs, and every completion an event that carries the bytes or a typed
//! error. The core keeps the metadata (each block's version and stamp, the groups'
//! fences and unstable writes); the shell keeps the bytes and decides nothing.
//!
//! - A **change** ([`StoreOp`]) goes with the runs of blocks it puts in place
//!   ([`ChunkStore::landing`](crate::cluster::store::ChunkStore::landing), decided
//!   here when it is issued): the shell makes it durable, writes the runs, and answers
//!   `DiskDone`; the core then records the runs
//!   ([`ChunkStore::land`](crate::cluster::store::ChunkStore::land)). Changes of
//!   overlapping blocks of one chunk are issued one after the other: each one's runs
//!   are decided against the store as the one before left it, so a change that fails
//!   (no room) leaves no later one's runs wrong, and a journal replays them as made.
//! - A **read** of blocks is answered with their bytes and the version and stamp each
//!   block's header holds; the bytes are served only where those are what the read
//!   was issued for ([`fill`]): a write that landed meanwhile sends the read round
//!   again. Blocks that fail their checksum come back as a typed error and are
//!   repaired from another replica.
//! - The **logger's log** changes by commits ([`LogCommit`]: the engine's steps with
//!   the bytes of its appends, and the index's changes), one at a time, each planned
//!   from the log as the one before left it (`logging.rs`); a read of the log is
//!   answered with the pieces the engine read, which the core checks against its
//!   index.

use std::collections::{BTreeMap, VecDeque};

use somnus_types::{ByteRange, IoId};

use super::{Io, Message, Server, ServerAction};
use crate::cluster::logvolume::{LogAddress, LogCommit};
use crate::cluster::store::{self, BLOCK_BYTES, BlockRun, BlocksRead, StoreOp};
use crate::cluster::{ChunkId, Piece};
use crate::slab::Key;

/// What the shell is asked to do on the server's disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiskOp {
    /// Make `change` durable, then write `runs` into their blocks (exactly those: the
    /// core decided where the change lands); answer `DiskDone` once both are done.
    /// The simulator charges its disk model for the size.
    Change { change: StoreOp, runs: Vec<BlockRun> },
    /// Read `blocks` of `chunk`: answer `DiskRead` with their bytes and headers
    /// (`DiskDone` from a shell that keeps no bytes), or `DiskFailed` with the blocks
    /// that fail their checksum.
    Read { chunk: ChunkId, blocks: std::ops::Range<u64> },
    /// Carry out a commit of the logger's log and make it durable (`LogCommit` says
    /// how): answer `DiskDone`, or `DiskFailed` (`NoSpace`: none of it took effect).
    LogCommit(LogCommit),
    /// Read these ranges of the logger's log: answer `LogRead` with the pieces of
    /// each, in order (`DiskDone` from a shell that runs no engine: the core's model
    /// says what a read sees).
    LogRead { reads: Vec<LogAddress> },
    /// A collection's copies, which the engine made in the commit before: disk time
    /// only (the simulator charges its model), nothing to do.
    LogCopies,
}

impl DiskOp {
    /// Whether the operation writes (the simulator's disk model).
    pub fn writes(&self) -> bool {
        match self {
            DiskOp::Change { .. } => true,
            DiskOp::Read { .. } => false,
            DiskOp::LogCommit(_) | DiskOp::LogCopies => true,
            DiskOp::LogRead { .. } => false,
        }
    }
}

/// Why the disk could not do an operation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DiskError {
    /// No room: nothing of the change took effect.
    #[error("no room on the disk")]
    NoSpace,
    /// These blocks of the read fail their checksum.
    #[error("blocks {blocks:?} fail their checksum")]
    Corrupt { blocks: Vec<u64> },
    /// The disk failed the operation (for a read: its blocks are unreadable; for a
    /// change: what is durable is unknown).
    #[error("I/O error: {0}")]
    Io(String),
}

/// A disk I/O of the server's: issued, or waiting for an overlapping change.
#[derive(Debug)]
pub(super) struct InFlight {
    pub(super) io: Io,
    /// A logger's operation, planned with the I/O (handed to the shell as it is).
    log: Option<DiskOp>,
    /// The change and the runs it was issued with (recorded when it is done).
    change: Option<(StoreOp, Vec<BlockRun>)>,
    position: u64,
    bytes: u64,
    background: bool,
}

/// The block ranges of changes issued and not done, per chunk, and the changes and
/// reads waiting for one of them.
#[derive(Debug, Default)]
pub(super) struct Changing {
    issued: BTreeMap<ChunkId, Vec<ByteRange>>,
    waiting: VecDeque<IoId>,
}

impl Changing {
    /// Whether `io` must wait for a change under way: it changes or reads blocks one
    /// is landing on.
    fn holds_back(&self, io: &Io, chunk_bytes: u64) -> bool {
        io.blocks_touched(chunk_bytes).is_some_and(|(chunk, range)| self.overlaps(chunk, range))
    }

    fn overlaps(&self, chunk: ChunkId, range: ByteRange) -> bool {
        self.issued.get(&chunk).is_some_and(|ranges| ranges.iter().any(|r| r.overlaps(range)))
    }

    fn add(&mut self, chunk: ChunkId, range: ByteRange) {
        // Changes of overlapping blocks go one at a time (each one's runs decided
        // against the store as the one before left it).
        assert!(!self.overlaps(chunk, range), "a change of {chunk:?} {range:?} over one under way");
        self.issued.entry(chunk).or_default().push(range);
    }

    fn remove(&mut self, chunk: ChunkId, range: ByteRange) {
        let Some(ranges) = self.issued.get_mut(&chunk) else { return };
        if let Some(at) = ranges.iter().position(|r| *r == range) {
            ranges.swap_remove(at);
        }
        if ranges.is_empty() {
            self.issued.remove(&chunk);
        }
    }
}

impl Io {
    /// The change of the replica's durable state the I/O makes.
    fn change(&self) -> Option<StoreOp> {
        match self {
            Io::ReplicaWrite { group, write, stable, .. } => {
                Some(StoreOp::Apply { group: *group, write: write.clone(), stable: *stable })
            }
            Io::Fence { group, epoch, .. } => Some(StoreOp::Fence { group: *group, epoch: *epoch }),
            Io::Repair { chunk, range, pieces, .. } => {
                Some(StoreOp::Repair { chunk: *chunk, range: *range, pieces: pieces.clone() })
            }
            Io::RebuildWrite { group, chunk, pieces, .. } => {
                Some(StoreOp::Copy { group: *group, chunk: *chunk, pieces: pieces.clone() })
            }
            Io::Free { objects, .. } => Some(StoreOp::Free { objects: objects.clone() }),
            _ => None,
        }
    }

    /// The blocks a change puts in place: changes of overlapping ones go one at a time.
    fn blocks_changed(&self, chunk_bytes: u64) -> Option<(ChunkId, ByteRange)> {
        match self {
            Io::ReplicaWrite { write, .. } => Some((write.chunk, write.range)),
            Io::Repair { chunk, range, .. } => Some((*chunk, *range)),
            Io::RebuildWrite { chunk, .. } => Some((*chunk, ByteRange::new(0, chunk_bytes))),
            _ => None,
        }
    }

    /// The blocks the I/O changes or reads: either waits for a change under way over
    /// them (a read would find blocks the store does not hold yet, and go round again).
    fn blocks_touched(&self, chunk_bytes: u64) -> Option<(ChunkId, ByteRange)> {
        self.blocks_changed(chunk_bytes).or_else(|| self.blocks_read(chunk_bytes))
    }

    /// The blocks a read reads.
    fn blocks_read(&self, chunk_bytes: u64) -> Option<(ChunkId, ByteRange)> {
        match self {
            Io::ClientRead { read, .. } => Some((read.chunk, read.range)),
            Io::RepairRead { chunk, range, .. } => Some((*chunk, *range)),
            Io::RebuildRead { chunk, .. } => Some((*chunk, ByteRange::new(0, chunk_bytes))),
            _ => None,
        }
    }

    /// The pieces a read was issued for, to fill with its bytes.
    fn pieces_mut(&mut self) -> Option<&mut Vec<Piece>> {
        match self {
            Io::ClientRead { pieces, .. }
            | Io::RebuildRead { pieces, .. }
            | Io::RepairRead { pieces: Some(pieces), .. } => Some(pieces),
            _ => None,
        }
    }
}

/// The blocks `range` covers, as indices.
fn blocks_of(range: ByteRange) -> std::ops::Range<u64> {
    range.start / BLOCK_BYTES..range.end.div_ceil(BLOCK_BYTES)
}

impl Server {
    /// Issues `io` (`bytes` at `position`, where the simulator's disk model places
    /// it), or holds it back while a change overlapping it is under way: a change
    /// until that one is done, and a read too, since it would find blocks the store
    /// does not hold yet and go round again, at once where a shell answers from its
    /// cache, without end and without the event loop ever taking the change's
    /// completion (a server's heartbeats stopped so in the runtime).
    pub(super) fn disk(&mut self, io: Io, position: u64, bytes: u64) {
        self.issue_new(io, None, position, bytes, false);
    }

    /// Issues the logger's `io`, whose operation `op` carries what it needs.
    pub(super) fn disk_log(&mut self, io: Io, op: DiskOp, position: u64, bytes: u64) {
        self.disk_log_with(io, op, position, bytes, false);
    }

    pub(super) fn disk_log_with(
        &mut self,
        io: Io,
        op: DiskOp,
        position: u64,
        bytes: u64,
        background: bool,
    ) {
        self.issue_new(io, Some(op), position, bytes, background);
    }

    fn issue_new(
        &mut self,
        io: Io,
        log: Option<DiskOp>,
        position: u64,
        bytes: u64,
        background: bool,
    ) {
        let held_back = self.disk.holds_back(&io, self.config.chunk_size_bytes);
        let entry = InFlight { io, log, change: None, position, bytes, background };
        let Some(key) = self.ios.insert(entry) else {
            unreachable!("more than {} disk I/Os in flight", super::IOS_MAX);
        };
        let io = IoId(key.0);
        if held_back {
            self.disk.waiting.push_back(io);
        } else {
            self.issue(io);
        }
    }

    /// Hands `io` to the shell: a change with the runs it lands on as the store stands.
    fn issue(&mut self, io: IoId) {
        let chunk_bytes = self.config.chunk_size_bytes;
        let Some(entry) = self.ios.get_mut(Key(io.0)) else { return };
        let op = if let Some(op) = entry.log.take() {
            op
        } else if let Some(change) = entry.io.change() {
            let runs = self.store.landing(&change);
            if let Some((chunk, range)) = entry.io.blocks_changed(chunk_bytes) {
                self.disk.add(chunk, range);
            }
            entry.change = Some((change.clone(), runs.clone()));
            DiskOp::Change { change, runs }
        } else if let Some((chunk, range)) = entry.io.blocks_read(chunk_bytes) {
            DiskOp::Read { chunk, blocks: blocks_of(range) }
        } else {
            unreachable!("a disk I/O that neither changes, reads nor logs: {:?}", entry.io)
        };
        let (position, bytes, background) = (entry.position, entry.bytes, entry.background);
        self.actions.push_back(ServerAction::Disk { io, op, position, bytes, background });
    }

    /// Takes `io` off the disk: its blocks free for the changes waiting on them.
    pub(super) fn take_io(&mut self, io: IoId) -> InFlight {
        let Some(entry) = self.ios.remove(Key(io.0)) else {
            unreachable!("a disk I/O completed twice or was never issued");
        };
        if let Some((chunk, range)) = entry.io.blocks_changed(self.config.chunk_size_bytes) {
            self.disk.remove(chunk, range);
            if !self.disk.waiting.is_empty() {
                self.issue_waiting(chunk);
            }
        }
        entry
    }

    /// Issues the changes and reads of `chunk` that waited and overlap no change under
    /// way now, in order (a later one waits for an earlier change it overlaps).
    fn issue_waiting(&mut self, chunk: ChunkId) {
        let chunk_bytes = self.config.chunk_size_bytes;
        let waiting = std::mem::take(&mut self.disk.waiting);
        for io in waiting {
            let target = self.ios.get(Key(io.0)).and_then(|e| e.io.blocks_touched(chunk_bytes));
            match target {
                Some((c, range)) if c == chunk && !self.disk.overlaps(c, range) => self.issue(io),
                Some(_) => self.disk.waiting.push_back(io),
                None => {}
            }
        }
    }

    /// What the read `io` finds on a disk whose blocks are the store's own (the
    /// simulator's): each block's version and stamp as they are now, no bytes. None if
    /// `io` is no read of blocks.
    pub fn read_found(&self, io: IoId) -> Option<BlocksRead> {
        let entry = self.ios.get(Key(io.0))?;
        let (chunk, range) = entry.io.blocks_read(self.config.chunk_size_bytes)?;
        let held = self.store.headers(chunk, blocks_of(range));
        Some(BlocksRead { data: crate::cluster::Payload::NONE, held })
    }

    /// `io` is done: a change's runs are recorded, a read's bytes are checked and
    /// put in its pieces (a read that met a write landing meanwhile goes round again).
    pub(super) fn disk_done(&mut self, io: IoId, read: Option<BlocksRead>) {
        let InFlight { mut io, change, .. } = self.take_io(io);
        if let Some((change, runs)) = change {
            self.store.land(change, &runs);
        }
        if let (Some(read), Some(pieces)) = (read, io.pieces_mut()) {
            match store::fill(std::mem::take(pieces), &read) {
                Some(filled) => *pieces = filled,
                None => return self.read_again(io),
            }
        }
        self.io_done(io);
    }

    /// A read whose blocks changed while it was under way: a client's goes back to
    /// the front of its group's queue (admitted again, it waits for a write pending
    /// over it and reads what that left); a copy for a repair or a rebuild is read
    /// again as the store stands.
    fn read_again(&mut self, io: Io) {
        self.counters.reads_again += 1;
        match io {
            Io::ClientRead { group, read, .. } => self.requeue_read(group, read),
            Io::RepairRead { to, group, epoch, chunk, range, .. } => {
                self.repair_read(to, group, epoch, chunk, range)
            }
            Io::RebuildRead { to, group, epoch, chunk, .. } => {
                self.rebuild_read(to, group, epoch, chunk)
            }
            _ => {}
        }
    }

    /// The disk could not do `io`.
    pub(super) fn disk_failed(&mut self, io: IoId, error: super::DiskError) {
        let InFlight { io, change, .. } = self.take_io(io);
        if change.is_some() {
            match error {
                DiskError::NoSpace => self.change_failed(io),
                error => {
                    let reason = format!("the disk failed a change of the replicas: {error}");
                    self.actions.push_back(ServerAction::Halt { reason });
                }
            }
            return;
        }
        let chunk_bytes = self.config.chunk_size_bytes;
        let Some((chunk, range)) = io.blocks_read(chunk_bytes) else {
            return self.log_io_failed(io, error);
        };
        let bad: Vec<u64> = match error {
            DiskError::Corrupt { blocks } => blocks,
            DiskError::NoSpace | DiskError::Io(_) => blocks_of(range).collect(),
        };
        self.store.found_corrupt(chunk, &bad);
        match io {
            Io::ClientRead { group, read, .. } => {
                self.counters.corrupt_reads += 1;
                self.repair_for_read(group, read);
            }
            Io::RepairRead { to, group, epoch, chunk, range, .. } => {
                let message = Message::RepairData { group, epoch, chunk, range, pieces: None };
                self.answer_primary(to, message);
            }
            // The chunk waits for the scrub's repair; its copy is tried again when
            // its retry interval has passed.
            Io::RebuildRead { .. } => {}
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use somnus_types::{ChunkGroupId, ObjectId, ServerId};

    use super::*;
    use crate::cluster::{ChunkIndex, Epoch};

    const CHUNK_BYTES: u64 = 1 << 20;

    fn chunk(index: u32) -> ChunkId {
        ChunkId { object: ObjectId(1), chunk: ChunkIndex(index) }
    }

    fn read(chunk: ChunkId, start: u64, end: u64) -> Io {
        let (to, group, epoch) = (ServerId(1), ChunkGroupId(0), Epoch(1));
        let range = ByteRange::from_bounds(start, end);
        Io::RepairRead { to, group, epoch, chunk, range, pieces: None }
    }

    fn repair(chunk: ChunkId, start: u64, end: u64) -> Io {
        let range = ByteRange::from_bounds(start, end);
        Io::Repair { group: ChunkGroupId(0), chunk, range, pieces: Vec::new() }
    }

    #[test]
    fn a_read_or_change_over_blocks_a_change_is_landing_on_waits_for_it() {
        let mut changing = Changing::default();
        changing.add(chunk(0), ByteRange::from_bounds(0, 8192));
        assert!(changing.holds_back(&read(chunk(0), 4096, 12288), CHUNK_BYTES), "a read over it");
        assert!(changing.holds_back(&repair(chunk(0), 0, 4096), CHUNK_BYTES), "a change over it");
        assert!(!changing.holds_back(&read(chunk(0), 8192, 12288), CHUNK_BYTES), "beside it");
        assert!(!changing.holds_back(&read(chunk(1), 0, 4096), CHUNK_BYTES), "another chunk");
        changing.remove(chunk(0), ByteRange::from_bounds(0, 8192));
        assert!(!changing.holds_back(&read(chunk(0), 0, 4096), CHUNK_BYTES), "the change done");
    }

    /// The assertion that two changes of the same blocks are never under way at once
    /// fires (a broken queue that issued both would decide the second's runs against
    /// a store the first is still changing).
    #[test]
    #[should_panic(expected = "over one under way")]
    fn a_second_change_over_blocks_under_way_is_refused_loudly() {
        let mut changing = Changing::default();
        changing.add(chunk(0), ByteRange::from_bounds(0, 8192));
        changing.add(chunk(0), ByteRange::from_bounds(4096, 12288));
    }
}
