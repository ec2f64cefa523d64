//! A storage server's durable state: its chunk replicas and, per chunk group, the
//! epoch it is fenced at and the writes it holds that are not yet known to be on every
//! replica (docs/protocol.md, C3 and C4).
//!
//! The state changes only when the shell reports a disk write done, so what a crash
//! leaves is exactly what was durable: the simulator keeps the store across a crash
//! and hands it back to the restarted server; the runtime keeps it in files.
//!
//! A replica holds, per 4 KiB block, the version and stamp (see [`Stamp`]) of the
//! write that last painted it: a write lands only on the blocks where it is newer
//! than what is there, so replicas that apply the same writes in any order end up
//! equal. Blocks a fault garbled are kept apart; every read checks for them, as a
//! real disk's checksums would fail on them.
//!
//! The blocks are arrays per chunk in pages of 16 (16 bytes per 4 KiB block, a page
//! made at its first write), not a map of extents: requests are a few blocks at random
//! offsets, and a write or read then touches only its own blocks' few cache lines.
//! This is the simulation's hottest state (`somnus bench cluster`), and its largest
//! over a long trace (see `blocks.rs`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use somnus_types::{ByteRange, ChunkGroupId, ObjectId, Version};

mod blocks;

use blocks::{Block, ChunkBlocks};

use super::{ChunkId, Epoch, Payload, Piece, Stamp, UnstableWrite};

/// A change of a replica's durable state, as one disk write makes it. The server
/// hands it to its shell with the [`BlockRun`]s it puts in place
/// ([`ChunkStore::landing`]): the simulator charges its disk model for the write's
/// size; the runtime journals the change (with its bytes), syncs, and writes the runs
/// into their blocks before it reports the write done, and after a restart replays its
/// journal through [`ChunkStore::redo`], which gives each change's runs again.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum StoreOp {
    /// A replica write of the group's primary (C3).
    Apply { group: ChunkGroupId, write: UnstableWrite, stable: Version },
    /// The replica is fenced at `epoch` (C1).
    Fence { group: ChunkGroupId, epoch: Epoch },
    /// Corrupt blocks of `range` overwritten with another replica's intact copy.
    Repair { chunk: ChunkId, range: ByteRange, pieces: Vec<Piece> },
    /// A rebuild's copy of a chunk, applied where newer (R1).
    Copy { group: ChunkGroupId, chunk: ChunkId, pieces: Vec<Piece> },
    /// Deleted objects: every chunk of them is freed, and nothing of them is stored
    /// again (docs/space.md).
    Free { objects: Vec<ObjectId> },
}

impl StoreOp {
    /// The payloads the change carries, in a fixed order (a journal stores them
    /// beside the change's serialized form, which skips them).
    pub fn payloads(&self) -> Vec<&Payload> {
        match self {
            StoreOp::Apply { write, .. } => vec![&write.data],
            StoreOp::Fence { .. } | StoreOp::Free { .. } => Vec::new(),
            StoreOp::Repair { pieces, .. } | StoreOp::Copy { pieces, .. } => {
                pieces.iter().map(|p| &p.data).collect()
            }
        }
    }

    /// The payloads, to fill in when the change is read back, in the same order.
    pub fn payloads_mut(&mut self) -> Vec<&mut Payload> {
        match self {
            StoreOp::Apply { write, .. } => vec![&mut write.data],
            StoreOp::Fence { .. } | StoreOp::Free { .. } => Vec::new(),
            StoreOp::Repair { pieces, .. } | StoreOp::Copy { pieces, .. } => {
                pieces.iter_mut().map(|p| &mut p.data).collect()
            }
        }
    }
}

/// Consecutive blocks of one chunk that a change puts in place, all of one write's
/// version and stamp, with their bytes (whole blocks; none in the simulator, whose
/// stamps stand for the bytes). The core decides which blocks a change lands on
/// ([`ChunkStore::landing`]: where it is newer than what is held); the shell only
/// writes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRun {
    pub group: ChunkGroupId,
    pub chunk: ChunkId,
    /// The blocks, as indices within the chunk.
    pub blocks: std::ops::Range<u64>,
    pub version: Version,
    pub stamp: Stamp,
    pub data: Payload,
}

/// What a read of blocks found on the disk: their bytes (whole blocks, zeros where
/// none was written) and, per block, the version and stamp its header holds (version
/// 0 where none was written). The core serves the bytes only where every header is
/// what it expected ([`fill`]): a write that landed while the read was under way
/// shows as a newer header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlocksRead {
    pub data: Payload,
    pub held: Vec<(Version, Stamp)>,
}

/// Deleted objects a store remembers, so that a late write of one (a primary's
/// retransmission, a reclaim, a rebuild's copy) stores nothing: beyond this many, the
/// lowest ids are forgotten (the orphan scan finds what a late write leaves).
pub const FREED_KEPT: usize = 1 << 20;

/// The unit of checksums and of the stamps a write leaves: requests are whole blocks.
pub const BLOCK_BYTES: u64 = 4096;

/// What a corrupt block reads as: its stamp garbled (the checker's replicas differ).
const GARBLE: u64 = 0x5a5a_5a5a;

#[derive(Clone, Debug, Default)]
struct GroupRecord {
    /// The epoch this replica is fenced at: it refuses writes of older epochs.
    epoch: Epoch,
    /// By version: a replica applies its primary's writes about in their order, so
    /// most arrive at the back and the stable ones leave from the front.
    unstable: VecDeque<UnstableWrite>,
}

impl GroupRecord {
    /// Records `write` (replacing one of its version), then forgets every write up
    /// to `stable`.
    fn hold(&mut self, write: UnstableWrite, stable: Version) {
        if write.version > stable {
            match self.unstable.binary_search_by_key(&write.version, |w| w.version) {
                Ok(at) => self.unstable[at] = write,
                Err(at) => self.unstable.insert(at, write),
            }
        }
        while self.unstable.front().is_some_and(|w| w.version <= stable) {
            self.unstable.pop_front();
        }
    }
}

/// A chunk replica: its group (a scrub repairs through it) and its blocks.
#[derive(Clone, Debug)]
struct ChunkRecord {
    group: ChunkGroupId,
    blocks: ChunkBlocks,
}

/// A read that met blocks whose checksum does not match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Corrupt {
    pub ranges: Vec<ByteRange>,
}

#[derive(Debug)]
pub struct ChunkStore {
    /// Blocks a chunk has, past which nothing is stored (a range reaching beyond
    /// is cut there: the primary refuses such requests, so only a bug sends one).
    chunk_blocks: u64,
    chunks: BTreeMap<ChunkId, ChunkRecord>,
    groups: BTreeMap<ChunkGroupId, GroupRecord>,
    /// The blocks (chunk, index) a fault garbled and no write or repair has
    /// overwritten since.
    corrupt: BTreeSet<(ChunkId, u64)>,
    /// Deleted objects freed here (at most [`FREED_KEPT`]): nothing of them is
    /// stored again.
    freed: BTreeSet<ObjectId>,
    /// Blocks held, over every chunk (`bytes_held`).
    blocks_held: u64,
    /// Per object held: its blocks and its chunks in each group (the orphan scan's
    /// answer, kept as chunks come and go rather than counted over every chunk at
    /// every scan: a volume's object has hundreds of thousands).
    held: BTreeMap<ObjectId, ObjectHeld>,
}

/// What the store holds of one object.
#[derive(Clone, Debug, Default)]
struct ObjectHeld {
    blocks: u64,
    /// Chunks held, by group.
    chunks: BTreeMap<ChunkGroupId, u32>,
}

/// The blocks `range` covers, as indices (ranges are block-aligned).
fn blocks(range: ByteRange) -> std::ops::Range<u64> {
    range.start / BLOCK_BYTES..range.end.div_ceil(BLOCK_BYTES)
}

fn block_range(blocks: std::ops::Range<u64>) -> ByteRange {
    ByteRange::from_bounds(blocks.start * BLOCK_BYTES, blocks.end * BLOCK_BYTES)
}

/// A piece of another replica's copy as the write that made it.
fn piece_write(chunk: ChunkId, piece: &Piece) -> UnstableWrite {
    UnstableWrite {
        chunk,
        range: piece.range,
        version: piece.version,
        stamp: piece.stamp,
        data: piece.data.clone(),
    }
}

/// `pieces` ([`ChunkStore::read`]'s answer when the read of their blocks was issued)
/// with the bytes the read found, each piece its own slice; none if a block's header
/// is not its piece's: a write landed on the blocks while the read was under way, and
/// the bytes are not those the pieces name.
pub fn fill(mut pieces: Vec<Piece>, read: &BlocksRead) -> Option<Vec<Piece>> {
    let Some(first) = pieces.first().map(|p| p.range.start) else { return Some(pieces) };
    let held = |block: u64| read.held.get(((block * BLOCK_BYTES - first) / BLOCK_BYTES) as usize);
    for piece in &mut pieces {
        let expected = (piece.version, piece.stamp);
        if !blocks(piece.range).all(|block| held(block) == Some(&expected)) {
            return None;
        }
        piece.data = read.data.slice(piece.range.start - first, piece.range.size_bytes());
    }
    Some(pieces)
}

impl ChunkStore {
    pub fn new(chunk_size_bytes: u64) -> ChunkStore {
        ChunkStore {
            chunk_blocks: chunk_size_bytes.div_ceil(BLOCK_BYTES),
            chunks: BTreeMap::new(),
            groups: BTreeMap::new(),
            corrupt: BTreeSet::new(),
            freed: BTreeSet::new(),
            blocks_held: 0,
            held: BTreeMap::new(),
        }
    }

    /// The blocks of `range` a chunk can hold.
    fn clamped(&self, range: ByteRange) -> std::ops::Range<u64> {
        let blocks = blocks(range);
        blocks.start.min(self.chunk_blocks)..blocks.end.min(self.chunk_blocks)
    }

    fn blocks(&self, chunk: ChunkId) -> Option<&ChunkBlocks> {
        self.chunks.get(&chunk).map(|c| &c.blocks)
    }

    fn is_corrupt(&self, chunk: ChunkId, block: u64) -> bool {
        !self.corrupt.is_empty() && self.corrupt.contains(&(chunk, block))
    }

    /// Applies `write`, a write of `group`, to the blocks where it is newer than
    /// what is stored, and holds it as unstable until `stable` covers it (the primary
    /// knows every write up to `stable` is on every replica). Returns the runs it
    /// landed on ([`ChunkStore::redo`]).
    pub fn apply(
        &mut self,
        group: ChunkGroupId,
        write: UnstableWrite,
        stable: Version,
    ) -> Vec<BlockRun> {
        self.redo(StoreOp::Apply { group, write, stable })
    }

    /// The runs of blocks `change` puts in place, as the store stands: a write (or a
    /// rebuild's copy) lands on the blocks where it is newer than what is held, and on
    /// the corrupt blocks it wrote before (a restart finds a block whose header reached
    /// the disk without its bytes corrupt, and the journal's replay of the write that
    /// made it durable gives them back; a write adopted again does the same: a
    /// version is one write's, so its bytes are the block's); a repair on the corrupt
    /// blocks its copy holds at their version or newer. Nothing of a freed object
    /// lands. A shell writes exactly these; [`ChunkStore::land`] records them.
    pub fn landing(&self, change: &StoreOp) -> Vec<BlockRun> {
        let mut runs = Vec::new();
        match change {
            StoreOp::Apply { group, write, .. } => self.write_landing(*group, write, &mut runs),
            StoreOp::Copy { group, chunk, pieces } => {
                for piece in pieces {
                    self.write_landing(*group, &piece_write(*chunk, piece), &mut runs);
                }
            }
            StoreOp::Repair { chunk, range, pieces } => {
                self.repair_landing(*chunk, *range, pieces, &mut runs)
            }
            StoreOp::Fence { .. } | StoreOp::Free { .. } => {}
        }
        runs
    }

    fn write_landing(&self, group: ChunkGroupId, write: &UnstableWrite, runs: &mut Vec<BlockRun>) {
        if self.is_freed(write.chunk.object) {
            // A late write of a deleted object (a retransmission, a reclaim, a
            // rebuild's copy) stores nothing.
            return;
        }
        let painted = Block { version: write.version, stamp: write.stamp };
        let held = self.blocks(write.chunk);
        let lands = |index: u64| {
            let block = held.map(|held| held.get(index)).unwrap_or_default();
            block.version < painted.version
                || (block == painted && self.is_corrupt(write.chunk, index))
        };
        let first = runs.len();
        for index in self.clamped(write.range) {
            if !lands(index) {
                continue;
            }
            let own_run = runs.len() > first;
            match runs.last_mut() {
                Some(run) if own_run && run.blocks.end == index => run.blocks.end += 1,
                _ => runs.push(BlockRun {
                    group,
                    chunk: write.chunk,
                    blocks: index..index + 1,
                    version: write.version,
                    stamp: write.stamp,
                    data: Payload::NONE,
                }),
            }
        }
        for run in &mut runs[first..] {
            let at = run.blocks.start * BLOCK_BYTES - write.range.start;
            run.data = write.data.slice(at, (run.blocks.end - run.blocks.start) * BLOCK_BYTES);
        }
    }

    fn repair_landing(
        &self,
        chunk: ChunkId,
        range: ByteRange,
        pieces: &[Piece],
        runs: &mut Vec<BlockRun>,
    ) {
        let Some(record) = self.chunks.get(&chunk) else { return };
        for block in self.corrupt_in(chunk, range) {
            if block as usize >= record.blocks.len() {
                continue;
            }
            let held = record.blocks.get(block);
            let bad = block_range(block..block + 1);
            let copy = pieces.iter().find(|p| p.range.contains(bad) && p.version >= held.version);
            let Some(copy) = copy else { continue };
            let data = copy.data.slice(bad.start - copy.range.start, BLOCK_BYTES);
            runs.push(BlockRun {
                group: record.group,
                chunk,
                blocks: block..block + 1,
                version: copy.version,
                stamp: copy.stamp,
                data,
            });
        }
    }

    /// Records that `change` is durable and its `runs` ([`ChunkStore::landing`], given
    /// when it was issued) are in place: the blocks of the runs hold their writes,
    /// intact. What a completed disk write does.
    pub fn land(&mut self, change: StoreOp, runs: &[BlockRun]) {
        match change {
            StoreOp::Apply { group, write, stable } => {
                self.paint_runs(runs);
                self.groups.entry(group).or_default().hold(write, stable);
            }
            StoreOp::Copy { .. } => self.paint_runs(runs),
            StoreOp::Repair { chunk, .. } => {
                let Some(record) = self.chunks.get_mut(&chunk) else { return };
                for run in runs {
                    for block in run.blocks.clone() {
                        let painted = Block { version: run.version, stamp: run.stamp };
                        record.blocks.set(block, painted);
                        self.corrupt.remove(&(chunk, block));
                    }
                }
            }
            StoreOp::Fence { group, epoch } => self.fence(group, epoch),
            StoreOp::Free { objects } => self.free(&objects),
        }
    }

    fn paint_runs(&mut self, runs: &[BlockRun]) {
        for run in runs {
            if self.is_freed(run.chunk.object) {
                // Freed while the write was under way: its blocks went with the free.
                continue;
            }
            let painted = Block { version: run.version, stamp: run.stamp };
            let blocks =
                run.blocks.start.min(self.chunk_blocks)..run.blocks.end.min(self.chunk_blocks);
            self.paint_blocks(run.group, run.chunk, blocks.clone(), painted);
            if !self.corrupt.is_empty() {
                for block in blocks {
                    self.corrupt.remove(&(run.chunk, block));
                }
            }
        }
    }

    /// What `range` of `chunk` holds, in order (adjacent blocks of one write as one
    /// piece), by version and stamp, without bytes ([`fill`] puts a read's bytes in),
    /// or the corrupt blocks of it.
    pub fn read(&self, chunk: ChunkId, range: ByteRange) -> Result<Vec<Piece>, Corrupt> {
        let corrupt: Vec<ByteRange> =
            self.corrupt_in(chunk, range).map(|block| block_range(block..block + 1)).collect();
        if !corrupt.is_empty() {
            return Err(Corrupt { ranges: corrupt });
        }
        Ok(self.pieces(chunk, range))
    }

    /// The version and stamp of each of `blocks` of `chunk` (version 0 where none
    /// was written): what a disk whose blocks are this store's headers holds.
    pub fn headers(&self, chunk: ChunkId, blocks: std::ops::Range<u64>) -> Vec<(Version, Stamp)> {
        let held = self.blocks(chunk);
        let block = |index| held.map(|held| held.get(index)).unwrap_or_default();
        blocks.map(block).map(|b| (b.version, b.stamp)).collect()
    }

    /// A read of `blocks` of `chunk` found them unreadable (a checksum that fails, or
    /// an I/O error): those that hold data are corrupt from now on, until a write of
    /// them or a repair.
    pub fn found_corrupt(&mut self, chunk: ChunkId, blocks: &[u64]) {
        let Some(record) = self.chunks.get(&chunk) else { return };
        let written: Vec<u64> =
            blocks.iter().copied().filter(|b| record.blocks.get(*b).written()).collect();
        self.corrupt.extend(written.into_iter().map(|block| (chunk, block)));
    }

    /// What `range` of `chunk` holds by its blocks' versions and stamps, without bytes.
    fn pieces(&self, chunk: ChunkId, range: ByteRange) -> Vec<Piece> {
        let mut pieces: Vec<Piece> = Vec::new();
        let held = self.blocks(chunk);
        for index in blocks(range) {
            let block = held.map(|held| held.get(index)).unwrap_or_default();
            match pieces.last_mut() {
                Some(last) if last.version == block.version && last.stamp == block.stamp => {
                    last.range.end += BLOCK_BYTES;
                }
                _ => pieces.push(Piece {
                    range: block_range(index..index + 1),
                    version: block.version,
                    stamp: block.stamp,
                    data: Payload::NONE,
                }),
            }
        }
        pieces
    }

    /// The corrupt blocks of `range` of `chunk`, in order.
    fn corrupt_in(&self, chunk: ChunkId, range: ByteRange) -> impl Iterator<Item = u64> + '_ {
        let blocks = blocks(range);
        let within = if self.corrupt.is_empty() {
            None
        } else {
            Some(self.corrupt.range((chunk, blocks.start)..(chunk, blocks.end)))
        };
        within.into_iter().flatten().map(|&(_, block)| block)
    }

    /// Whether `pieces` (another replica's copy of `range`) hold every corrupt block
    /// of it at the version this store expects or newer: an older copy would undo a
    /// write this replica acknowledged.
    pub fn repairable(&self, chunk: ChunkId, range: ByteRange, pieces: &[Piece]) -> bool {
        let held = self.blocks(chunk);
        self.corrupt_in(chunk, range).all(|block| {
            let expected = held.map(|held| held.get(block)).unwrap_or_default().version;
            let bad = block_range(block..block + 1);
            pieces.iter().any(|p| p.range.contains(bad) && p.version >= expected)
        })
    }

    /// Overwrites the corrupt blocks of `range` with the pieces of `pieces` (another
    /// replica's intact copy) that are at their expected version or newer; intact
    /// blocks keep what they hold.
    pub fn repair(&mut self, chunk: ChunkId, range: ByteRange, pieces: &[Piece]) -> Vec<BlockRun> {
        self.redo(StoreOp::Repair { chunk, range, pieces: pieces.to_vec() })
    }

    /// Fault injection: garbles the block at `offset` of `chunk`, as a bad sector
    /// would. Returns whether the block held data.
    pub fn corrupt_block(&mut self, chunk: ChunkId, offset: u64) -> bool {
        let index = offset / BLOCK_BYTES;
        let held = self.blocks(chunk).map(|held| held.get(index));
        if !held.is_some_and(|block| block.written()) {
            return false;
        }
        self.corrupt.insert((chunk, index));
        true
    }

    /// Every corrupt range held, with its chunk's group (a scrub's findings).
    pub fn corrupt_ranges(&self) -> Vec<(ChunkGroupId, ChunkId, ByteRange)> {
        let found = self.corrupt.iter().filter_map(|&(chunk, block)| {
            let group = self.chunks.get(&chunk)?.group;
            Some((group, chunk, block_range(block..block + 1)))
        });
        found.collect()
    }

    /// The chunks this store holds, for the simulation's convergence check.
    pub fn chunk_ids(&self) -> impl Iterator<Item = ChunkId> + '_ {
        self.chunks.keys().copied()
    }

    /// Every written piece of `chunk`, adjacent equal pieces merged, corrupt blocks
    /// as their garbled stamps: two replicas are equal when these are.
    pub fn contents(&self, chunk: ChunkId) -> Vec<Piece> {
        let mut pieces: Vec<Piece> = Vec::new();
        let Some(held) = self.blocks(chunk) else { return pieces };
        for (index, block) in (0..).zip(held.iter()) {
            if !block.written() {
                continue;
            }
            let stamp = if self.is_corrupt(chunk, index) {
                Stamp(block.stamp.0 ^ GARBLE)
            } else {
                block.stamp
            };
            let range = block_range(index..index + 1);
            match pieces.last_mut() {
                Some(last)
                    if last.range.end == range.start
                        && last.version == block.version
                        && last.stamp == stamp =>
                {
                    last.range.end = range.end;
                }
                _ => {
                    pieces.push(Piece { range, version: block.version, stamp, data: Payload::NONE })
                }
            }
        }
        pieces
    }

    /// Whether every byte of `range` of `chunk` holds `version` or a newer one (intact
    /// or not: a corrupt block is still a copy a repair can be told about).
    pub fn holds(&self, chunk: ChunkId, range: ByteRange, version: Version) -> bool {
        let Some(held) = self.blocks(chunk) else { return false };
        blocks(range).all(|index| {
            let b = held.get(index);
            b.written() && b.version >= version
        })
    }

    pub fn epoch(&self, group: ChunkGroupId) -> Epoch {
        self.groups.get(&group).map_or(Epoch(0), |g| g.epoch)
    }

    /// Fences `group` at `epoch`: writes of older epochs are refused from now on.
    pub fn fence(&mut self, group: ChunkGroupId, epoch: Epoch) {
        let record = self.groups.entry(group).or_default();
        record.epoch = record.epoch.max(epoch);
    }

    /// The chunks of `group` this store holds (a rebuild copies them).
    pub fn chunks_of(&self, group: ChunkGroupId) -> Vec<ChunkId> {
        self.chunks.iter().filter(|(_, c)| c.group == group).map(|(id, _)| *id).collect()
    }

    /// Applies another replica's copy of `chunk` (a rebuild), where newer.
    pub fn paint_copy(
        &mut self,
        group: ChunkGroupId,
        chunk: ChunkId,
        pieces: &[Piece],
    ) -> Vec<BlockRun> {
        self.redo(StoreOp::Copy { group, chunk, pieces: pieces.to_vec() })
    }

    /// Restart: block `index` of `chunk` (of `group`) holds `version` by `stamp`, as
    /// the shell found it on its disk (its bytes are there already).
    pub fn restore_block(
        &mut self,
        group: ChunkGroupId,
        chunk: ChunkId,
        index: u64,
        version: Version,
        stamp: Stamp,
    ) {
        self.paint_blocks(group, chunk, index..index + 1, Block { version, stamp });
    }

    /// Paints `block` on `blocks` of `chunk` (made in `group` if new), counting the
    /// blocks newly written.
    fn paint_blocks(
        &mut self,
        group: ChunkGroupId,
        chunk: ChunkId,
        blocks: std::ops::Range<u64>,
        block: Block,
    ) {
        let held = self.held.entry(chunk.object).or_default();
        let record = self.chunks.entry(chunk).or_insert_with(|| {
            *held.chunks.entry(group).or_default() += 1;
            ChunkRecord { group, blocks: ChunkBlocks::default() }
        });
        let new = record.blocks.paint(blocks, block, self.chunk_blocks, |_| {});
        self.blocks_held += new;
        held.blocks += new;
    }

    /// Restart: `group` is fenced at `epoch` and holds `unstable`, as the shell's
    /// snapshot of [`ChunkStore::groups`] kept them.
    pub fn restore_group(
        &mut self,
        group: ChunkGroupId,
        epoch: Epoch,
        unstable: Vec<UnstableWrite>,
    ) {
        let record = self.groups.entry(group).or_default();
        record.epoch = epoch;
        record.unstable = unstable.into();
    }

    /// Every group's fence and unstable writes (with their bytes): with the blocks,
    /// the whole durable state (the runtime's snapshot, before it cuts its journal).
    pub fn groups(&self) -> Vec<(ChunkGroupId, Epoch, Vec<UnstableWrite>)> {
        let groups = self.groups.iter();
        groups.map(|(g, r)| (*g, r.epoch, r.unstable.iter().cloned().collect())).collect()
    }

    /// Makes the change `op` describes at once, as the store stands, and returns the
    /// runs of blocks it put in place: what the runtime's journal replays after a
    /// restart (the runs are those the change had when it was made durable: changes
    /// of overlapping blocks are made one after the other, in the journal's order).
    pub fn redo(&mut self, op: StoreOp) -> Vec<BlockRun> {
        let runs = self.landing(&op);
        self.land(op, &runs);
        runs
    }

    /// Frees every chunk of `objects` (deleted: no name holds them, and their grace
    /// has passed), their unstable writes and corrupt blocks with them, and remembers
    /// them so that nothing of them is stored again. Idempotent.
    pub fn free(&mut self, objects: &[ObjectId]) {
        for object in objects {
            let first = ChunkId { object: *object, chunk: super::ChunkIndex(0) };
            let last = ChunkId { object: *object, chunk: super::ChunkIndex(u32::MAX) };
            let chunks: Vec<ChunkId> = self.chunks.range(first..=last).map(|(c, _)| *c).collect();
            for chunk in chunks {
                if let Some(record) = self.chunks.remove(&chunk) {
                    self.blocks_held -= record.blocks.written();
                }
            }
            self.held.remove(object);
            if !self.corrupt.is_empty() {
                self.corrupt.retain(|(chunk, _)| chunk.object != *object);
            }
        }
        let gone: BTreeSet<ObjectId> = objects.iter().copied().collect();
        for record in self.groups.values_mut() {
            record.unstable.retain(|w| !gone.contains(&w.chunk.object));
        }
        self.forbid(objects);
    }

    /// A free of `objects` is under way: nothing of them lands from now on (a write
    /// issued after it would otherwise put blocks in place that the free, made durable
    /// before it, never takes).
    pub fn forbid(&mut self, objects: &[ObjectId]) {
        self.freed.extend(objects.iter().copied());
        while self.freed.len() > FREED_KEPT {
            self.freed.pop_first();
        }
    }

    /// Whether `object` was freed here (and is remembered).
    pub fn is_freed(&self, object: ObjectId) -> bool {
        !self.freed.is_empty() && self.freed.contains(&object)
    }

    /// Bytes of data the replicas hold, each block once.
    pub fn bytes_held(&self) -> u64 {
        self.blocks_held * BLOCK_BYTES
    }

    /// The objects held, in id order, from `after` on (exclusive), at most `most`,
    /// each with the groups of its chunks held and their bytes: the orphan scan's
    /// batch.
    pub fn objects_held(
        &self,
        after: ObjectId,
        most: usize,
    ) -> Vec<(ObjectId, Vec<ChunkGroupId>, u64)> {
        #[cfg(feature = "expensive-checks")]
        self.check_held();
        let from = ObjectId(after.0.saturating_add(1));
        let held = self.held.range(from..).take(most);
        let of = |held: &ObjectHeld| held.chunks.keys().copied().collect();
        held.map(|(object, held)| (*object, of(held), held.blocks * BLOCK_BYTES)).collect()
    }

    /// Asserts that what is counted per object held is what its chunks hold. O(n):
    /// run under `expensive-checks`.
    #[cfg(any(test, feature = "expensive-checks"))]
    fn check_held(&self) {
        let mut scanned: BTreeMap<ObjectId, (u64, BTreeMap<ChunkGroupId, u32>)> = BTreeMap::new();
        for (chunk, record) in &self.chunks {
            let (blocks, chunks) = scanned.entry(chunk.object).or_default();
            *blocks += record.blocks.written();
            *chunks.entry(record.group).or_default() += 1;
        }
        let counted: BTreeMap<ObjectId, (u64, BTreeMap<ChunkGroupId, u32>)> =
            self.held.iter().map(|(o, h)| (*o, (h.blocks, h.chunks.clone()))).collect();
        assert_eq!(counted, scanned, "the store's count of what it holds per object");
    }

    /// Forgets the unstable writes of `group` up to `stable` (its primary knows them
    /// on every replica). Not a durable change: after a restart the journal's writes
    /// may be unstable again, which only makes a new primary write them again.
    pub fn forget_stable(&mut self, group: ChunkGroupId, stable: Version) {
        if let Some(record) = self.groups.get_mut(&group) {
            while record.unstable.front().is_some_and(|w| w.version <= stable) {
                record.unstable.pop_front();
            }
        }
    }

    pub fn unstable(&self, group: ChunkGroupId) -> Vec<UnstableWrite> {
        self.groups.get(&group).map_or_else(Vec::new, |g| g.unstable.iter().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use somnus_types::ObjectId;

    use super::*;
    use crate::cluster::ChunkIndex;

    const CHUNK: ChunkId = ChunkId { object: ObjectId(1), chunk: ChunkIndex(0) };
    const CHUNK_BYTES: u64 = 1 << 20;
    const GROUP: ChunkGroupId = ChunkGroupId(0);

    fn write(start: u64, blocks: u64, version: u64, stamp: u64) -> UnstableWrite {
        UnstableWrite {
            chunk: CHUNK,
            range: ByteRange::new(start * BLOCK_BYTES, blocks * BLOCK_BYTES),
            version: Version(version),
            stamp: Stamp(stamp),
            data: Payload::NONE,
        }
    }

    /// A shell's disk in memory: per block its bytes, version and stamp, and whether
    /// its checksum fails. It writes the runs it is given and nothing else.
    #[derive(Debug, Default)]
    struct MemDisk(BTreeMap<(ChunkId, u64), HeldBlock>);

    /// A block on the disk: its bytes, version, stamp, and whether its checksum fails.
    type HeldBlock = (Vec<u8>, Version, Stamp, bool);

    impl MemDisk {
        fn write(&mut self, runs: &[BlockRun]) {
            for run in runs {
                let bytes = run.data.bytes().expect("a run with bytes");
                for (index, block) in run.blocks.clone().zip(bytes.chunks(BLOCK_BYTES as usize)) {
                    let held = (block.to_vec(), run.version, run.stamp, false);
                    self.0.insert((run.chunk, index), held);
                }
            }
        }

        /// The read a shell answers, or the blocks that fail their checksum.
        fn read(&self, chunk: ChunkId, range: ByteRange) -> Result<BlocksRead, Vec<u64>> {
            let blocks = blocks(range);
            let held = |i| self.0.get(&(chunk, i));
            let bad: Vec<u64> = blocks.clone().filter(|i| held(*i).is_some_and(|b| b.3)).collect();
            if !bad.is_empty() {
                return Err(bad);
            }
            let zero = (vec![0; BLOCK_BYTES as usize], Version(0), Stamp(0), false);
            let data: Vec<u8> =
                blocks.clone().flat_map(|i| held(i).unwrap_or(&zero).0.clone()).collect();
            let headers = blocks.map(|i| held(i).map_or((Version(0), Stamp(0)), |b| (b.1, b.2)));
            Ok(BlocksRead { data: Payload::new(data.into()), held: headers.collect() })
        }

        /// A read as the server makes it: the store's pieces with the disk's bytes.
        fn serve(&self, store: &mut ChunkStore, range: ByteRange) -> Result<Vec<Piece>, Corrupt> {
            let pieces = store.read(CHUNK, range)?;
            match self.read(CHUNK, range) {
                Ok(read) => Ok(fill(pieces, &read).expect("the headers the store expects")),
                Err(bad) => {
                    store.found_corrupt(CHUNK, &bad);
                    store.read(CHUNK, range)
                }
            }
        }
    }

    fn with_bytes(write: UnstableWrite, fill: u8) -> UnstableWrite {
        let data = Payload::new(vec![fill; write.range.size_bytes() as usize].into());
        UnstableWrite { data, ..write }
    }

    /// The runs a change lands on carry exactly the bytes of the blocks where it is
    /// newer, a read's bytes are sliced per piece, and a block whose checksum fails
    /// on reading is found corrupt and repaired with its copy's bytes.
    #[test]
    fn bytes_follow_the_blocks_a_write_lands_on() {
        let (mut store, mut disk) = (ChunkStore::new(CHUNK_BYTES), MemDisk::default());
        disk.write(&store.apply(GROUP, with_bytes(write(0, 2, 5, 50), 0xaa), Version(0)));
        let runs = store.apply(GROUP, with_bytes(write(1, 2, 4, 40), 0xbb), Version(0));
        // Block 1 keeps version 5's bytes: version 4 lands on block 2 only.
        assert_eq!(
            runs.iter().map(|r| (r.blocks.start, r.blocks.end)).collect::<Vec<_>>(),
            [(2, 3)]
        );
        disk.write(&runs);
        let pieces = disk.serve(&mut store, ByteRange::new(0, 3 * BLOCK_BYTES)).unwrap();
        let got: Vec<(u64, u8, usize)> = pieces
            .iter()
            .map(|p| {
                let bytes = p.data.bytes().unwrap();
                assert!(bytes.iter().all(|b| *b == bytes[0]));
                (p.version.0, bytes[0], bytes.len())
            })
            .collect();
        assert_eq!(got, [(5, 0xaa, 2 * BLOCK_BYTES as usize), (4, 0xbb, BLOCK_BYTES as usize)]);

        let mut copy = ChunkStore::new(CHUNK_BYTES);
        copy.apply(GROUP, write(0, 2, 5, 50), Version(0));
        // The disk garbles block 0: its checksum fails on the next read.
        let range = ByteRange::new(0, BLOCK_BYTES);
        disk.0.get_mut(&(CHUNK, 0)).unwrap().3 = true;
        assert_eq!(disk.serve(&mut store, range), Err(Corrupt { ranges: vec![range] }));
        assert_eq!(store.corrupt_ranges(), [(GROUP, CHUNK, range)], "found on reading");
        let intact = copy.read(CHUNK, range).unwrap()[0].clone();
        let intact = [Piece { data: Payload::new(vec![0xcc; 4096].into()), ..intact }];
        disk.write(&store.repair(CHUNK, range, &intact));
        let repaired = disk.serve(&mut store, range).unwrap();
        assert_eq!(repaired[0].data.bytes().map(|b| b[0]), Some(0xcc));
    }

    /// The orphan scan's answer comes from counts kept as chunks come and go: each
    /// object held with its chunks' groups and bytes, until it is freed.
    #[test]
    fn what_is_held_per_object_follows_writes_and_frees() {
        let mut store = ChunkStore::new(CHUNK_BYTES);
        let at = |object: u64, chunk: u32, start: u64, blocks: u64, version: u64| UnstableWrite {
            chunk: ChunkId { object: ObjectId(object), chunk: ChunkIndex(chunk) },
            ..write(start, blocks, version, version)
        };
        store.apply(GROUP, at(1, 0, 0, 2, 1), Version(0));
        store.apply(ChunkGroupId(3), at(1, 1, 4, 1, 2), Version(0));
        // Over blocks already written: one block more, not two.
        store.apply(GROUP, at(1, 0, 1, 2, 3), Version(0));
        store.apply(ChunkGroupId(2), at(7, 0, 0, 1, 4), Version(0));
        store.check_held();
        let held = store.objects_held(ObjectId(0), 10);
        let expected = vec![
            (ObjectId(1), vec![GROUP, ChunkGroupId(3)], 4 * BLOCK_BYTES),
            (ObjectId(7), vec![ChunkGroupId(2)], BLOCK_BYTES),
        ];
        assert_eq!(held, expected);
        assert_eq!(store.objects_held(ObjectId(1), 10), expected[1..], "after object 1");
        assert_eq!(store.objects_held(ObjectId(0), 1), expected[..1], "one at most");
        store.free(&[ObjectId(1)]);
        store.check_held();
        assert_eq!(store.objects_held(ObjectId(0), 10), expected[1..]);
        assert_eq!(store.bytes_held(), BLOCK_BYTES);
    }

    /// The check of the counts per object fails on a count that missed a change.
    #[test]
    #[should_panic(expected = "the store's count of what it holds per object")]
    fn a_count_held_that_missed_a_write_is_caught() {
        let mut store = ChunkStore::new(CHUNK_BYTES);
        store.apply(GROUP, write(0, 2, 1, 1), Version(0));
        // Blocks painted behind the count's back.
        if let Some(record) = store.chunks.get_mut(&CHUNK) {
            record.blocks.paint(4..6, Block { version: Version(2), stamp: Stamp(2) }, 256, |_| {});
        }
        store.check_held();
    }

    /// A read whose blocks a write landed on while it was under way is told so: the
    /// headers it found are not those of the pieces it was issued for.
    #[test]
    fn a_read_that_meets_a_write_landing_is_refused_its_bytes() {
        let (mut store, mut disk) = (ChunkStore::new(CHUNK_BYTES), MemDisk::default());
        disk.write(&store.apply(GROUP, with_bytes(write(0, 2, 5, 50), 0xaa), Version(0)));
        let range = ByteRange::new(0, 2 * BLOCK_BYTES);
        let issued = store.read(CHUNK, range).unwrap();
        disk.write(&store.apply(GROUP, with_bytes(write(1, 1, 6, 60), 0xbb), Version(0)));
        let read = disk.read(CHUNK, range).unwrap();
        assert_eq!(fill(issued, &read), None);
        let again = fill(store.read(CHUNK, range).unwrap(), &read).unwrap();
        assert_eq!(again.iter().map(|p| p.version.0).collect::<Vec<_>>(), [5, 6]);
    }

    /// A block found corrupt takes its bytes again from the write that made it (the
    /// journal's replay after a crash that tore the block, or a write adopted again);
    /// in the simulator, which keeps no bytes, the block is whole again too.
    #[test]
    fn a_corrupt_block_is_mended_by_the_write_that_made_it() {
        let first = with_bytes(write(0, 2, 5, 50), 0xaa);
        let mut disk = MemDisk::default();
        disk.0.insert((CHUNK, 0), (vec![0xaa; BLOCK_BYTES as usize], Version(5), Stamp(50), false));
        disk.0.insert((CHUNK, 1), (vec![0; BLOCK_BYTES as usize], Version(5), Stamp(50), true));
        let mut store = ChunkStore::new(CHUNK_BYTES);
        for block in 0..2 {
            store.restore_block(GROUP, CHUNK, block, Version(5), Stamp(50));
        }
        let whole = ByteRange::new(0, 2 * BLOCK_BYTES);
        assert!(disk.serve(&mut store, whole).is_err(), "block 1 is found corrupt");
        let runs = store.redo(StoreOp::Apply { group: GROUP, write: first, stable: Version(0) });
        assert_eq!(
            runs.iter().map(|r| (r.blocks.start, r.blocks.end)).collect::<Vec<_>>(),
            [(1, 2)]
        );
        disk.write(&runs);
        let pieces = disk.serve(&mut store, whole).unwrap();
        assert_eq!(pieces.len(), 1);
        assert_eq!(pieces[0].data.bytes().unwrap()[..], vec![0xaa; 2 * BLOCK_BYTES as usize][..]);
        assert!(store.corrupt_ranges().is_empty());

        let mut stamps = ChunkStore::new(CHUNK_BYTES);
        stamps.apply(GROUP, write(0, 2, 5, 50), Version(0));
        assert!(stamps.corrupt_block(CHUNK, BLOCK_BYTES));
        assert!(stamps.read(CHUNK, whole).is_err());
        stamps.apply(GROUP, write(0, 2, 5, 50), Version(0));
        assert!(stamps.read(CHUNK, whole).is_ok(), "the simulator's store mends it the same");
    }

    /// An older write around a newer one lands in two runs, each block's own bytes at
    /// its own place (the bytes differ per block, so a run cut one block off shows).
    #[test]
    fn an_older_write_lands_around_a_newer_one_in_runs_with_each_blocks_bytes() {
        let (mut store, mut disk) = (ChunkStore::new(CHUNK_BYTES), MemDisk::default());
        disk.write(&store.apply(GROUP, with_bytes(write(2, 1, 9, 90), 0xee), Version(0)));
        let per_block: Vec<u8> =
            (0..6u8).flat_map(|b| vec![0x10 + b; BLOCK_BYTES as usize]).collect();
        let older = UnstableWrite { data: Payload::new(per_block.into()), ..write(0, 6, 5, 50) };
        disk.write(&store.apply(GROUP, older, Version(0)));
        let pieces = disk.serve(&mut store, ByteRange::new(0, 6 * BLOCK_BYTES)).unwrap();
        let bytes: Vec<u8> = pieces.iter().flat_map(|p| p.data.bytes().unwrap().to_vec()).collect();
        let firsts: Vec<u8> = bytes.chunks(BLOCK_BYTES as usize).map(|b| b[0]).collect();
        assert_eq!(firsts, [0x10, 0x11, 0xee, 0x13, 0x14, 0x15]);
        assert!(bytes.chunks(BLOCK_BYTES as usize).all(|b| b.iter().all(|x| *x == b[0])));
    }

    impl ChunkStore {
        /// Lands `write` where it is newer, as a replica write does, without holding it.
        fn paint(&mut self, group: ChunkGroupId, write: &UnstableWrite) {
            let runs = self.landing(&StoreOp::Copy {
                group,
                chunk: write.chunk,
                pieces: vec![Piece {
                    range: write.range,
                    version: write.version,
                    stamp: write.stamp,
                    data: write.data.clone(),
                }],
            });
            self.paint_runs(&runs);
        }
    }

    #[test]
    fn writes_applied_in_any_order_leave_equal_replicas() {
        let writes =
            [write(0, 4, 3, 30), write(2, 4, 5, 50), write(1, 1, 4, 40), write(5, 2, 1, 10)];
        let mut forward = ChunkStore::new(CHUNK_BYTES);
        let mut backward = ChunkStore::new(CHUNK_BYTES);
        for w in &writes {
            forward.paint(GROUP, w);
        }
        for w in writes.iter().rev() {
            backward.paint(GROUP, w);
        }
        assert_eq!(forward.contents(CHUNK), backward.contents(CHUNK));
        let stamps: Vec<u64> = forward.contents(CHUNK).iter().map(|p| p.stamp.0).collect();
        // Block 6 keeps the oldest write: nothing newer covers it.
        assert_eq!(stamps, [30, 40, 50, 10]);
    }

    #[test]
    fn a_corrupt_block_is_found_on_read_and_repaired_from_a_copy() {
        let mut store = ChunkStore::new(CHUNK_BYTES);
        let mut copy = ChunkStore::new(CHUNK_BYTES);
        for s in [&mut store, &mut copy] {
            s.paint(GROUP, &write(0, 4, 7, 70));
        }
        assert!(store.corrupt_block(CHUNK, 2 * BLOCK_BYTES + 10));
        let range = ByteRange::new(0, 4 * BLOCK_BYTES);
        let corrupt = store.read(CHUNK, range).unwrap_err();
        assert_eq!(corrupt.ranges, [ByteRange::new(2 * BLOCK_BYTES, BLOCK_BYTES)]);
        let older = [Piece { range, version: Version(6), stamp: Stamp(60), data: Payload::NONE }];
        assert!(!store.repairable(CHUNK, range, &older), "an older copy must not repair");
        store.repair(CHUNK, range, &older);
        assert!(store.read(CHUNK, range).is_err());
        let copy_pieces = copy.read(CHUNK, range).unwrap();
        assert!(store.repairable(CHUNK, range, &copy_pieces));
        store.repair(CHUNK, range, &copy_pieces);
        assert!(store.read(CHUNK, range).is_ok());
        assert_eq!(store.contents(CHUNK), copy.contents(CHUNK));
    }

    #[test]
    fn a_block_garbled_twice_stays_corrupt_until_a_write_of_it_or_a_repair() {
        let mut store = ChunkStore::new(CHUNK_BYTES);
        store.paint(GROUP, &write(0, 2, 7, 70));
        assert!(!store.corrupt_block(CHUNK, 5 * BLOCK_BYTES), "an unwritten block holds no data");
        assert!(store.corrupt_block(CHUNK, BLOCK_BYTES));
        assert!(store.corrupt_block(CHUNK, BLOCK_BYTES + 100));
        let range = ByteRange::new(0, 2 * BLOCK_BYTES);
        assert_eq!(
            store.read(CHUNK, range).unwrap_err().ranges,
            [ByteRange::new(BLOCK_BYTES, BLOCK_BYTES)]
        );
        // Another write of the same version is not that block's: it stays garbled.
        store.paint(GROUP, &write(1, 1, 7, 71));
        assert!(store.read(CHUNK, range).is_err());
        // The write that made it mends it (a version is one write: its bytes).
        store.paint(GROUP, &write(1, 1, 7, 70));
        assert!(store.read(CHUNK, range).is_ok());
        assert!(store.corrupt_block(CHUNK, BLOCK_BYTES));
        store.paint(GROUP, &write(1, 1, 8, 80));
        let pieces = store.read(CHUNK, range).unwrap();
        let stamps: Vec<u64> = pieces.iter().map(|p| p.stamp.0).collect();
        assert_eq!(stamps, [70, 80]);
        assert!(store.corrupt_ranges().is_empty());
    }

    #[test]
    fn a_range_past_the_chunk_is_cut_at_its_end() {
        let mut store = ChunkStore::new(4 * BLOCK_BYTES);
        store.paint(GROUP, &write(2, 1_000_000, 3, 30));
        assert_eq!(
            store.contents(CHUNK),
            [Piece {
                range: ByteRange::new(2 * BLOCK_BYTES, 2 * BLOCK_BYTES),
                version: Version(3),
                stamp: Stamp(30),
                data: Payload::NONE,
            }]
        );
    }

    /// The store agrees with a plain array of blocks (a model kept apart from it) under random writes, garbling and
    /// repairs: every read and the whole contents, after every step.
    #[test]
    fn the_store_agrees_with_a_model_of_every_block() {
        const BLOCKS: u64 = 64;
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |bound: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % bound
        };
        let mut store = ChunkStore::new(BLOCKS * BLOCK_BYTES);
        let mut model = [(0u64, 0u64); BLOCKS as usize];
        let mut garbled = [false; BLOCKS as usize];
        for step in 0..20_000u64 {
            let start = next(BLOCKS);
            let len = 1 + next(16.min(BLOCKS - start));
            // Half way, stamps outgrow 32 bits: nothing may cut them.
            let wide = if step >= 10_000 { 1 << 32 } else { 0 };
            let (version, stamp) = (1 + next(500), 1 + next(3) + wide);
            match next(10) {
                0 => {
                    let held = store.corrupt_block(CHUNK, start * BLOCK_BYTES);
                    assert_eq!(held, model[start as usize].0 > 0, "step {step}");
                    garbled[start as usize] |= held;
                }
                1 => {
                    let copy = [Piece {
                        range: ByteRange::new(start * BLOCK_BYTES, len * BLOCK_BYTES),
                        version: Version(version),
                        stamp: Stamp(stamp),
                        data: Payload::NONE,
                    }];
                    store.repair(CHUNK, copy[0].range, &copy);
                    for b in start..start + len {
                        if garbled[b as usize] && version >= model[b as usize].0 {
                            model[b as usize] = (version, stamp);
                            garbled[b as usize] = false;
                        }
                    }
                }
                _ => {
                    store.paint(GROUP, &write(start, len, version, stamp));
                    for b in start..start + len {
                        if model[b as usize].0 < version {
                            model[b as usize] = (version, stamp);
                            garbled[b as usize] = false;
                        } else if model[b as usize] == (version, stamp) {
                            garbled[b as usize] = false;
                        }
                    }
                }
            }
            let range = ByteRange::new(start * BLOCK_BYTES, len * BLOCK_BYTES);
            let bad: Vec<u64> = (start..start + len).filter(|b| garbled[*b as usize]).collect();
            match store.read(CHUNK, range) {
                Err(corrupt) => {
                    let found: Vec<u64> =
                        corrupt.ranges.iter().map(|r| r.start / BLOCK_BYTES).collect();
                    assert_eq!(found, bad, "step {step}");
                }
                Ok(pieces) => {
                    assert!(bad.is_empty(), "step {step}: garbled blocks read as intact");
                    let mut at = range.start;
                    for (i, piece) in pieces.iter().enumerate() {
                        assert_eq!(piece.range.start, at, "step {step}: pieces not contiguous");
                        at = piece.range.end;
                        for b in blocks(piece.range) {
                            let held = (piece.version.0, piece.stamp.0);
                            assert_eq!(held, model[b as usize], "step {step} block {b}");
                        }
                        if i > 0 {
                            let before = &pieces[i - 1];
                            let alike =
                                (before.version, before.stamp) == (piece.version, piece.stamp);
                            assert!(!alike, "step {step}: equal neighbours not merged");
                        }
                    }
                    assert_eq!(at, range.end, "step {step}");
                }
            }
            let mut expected: Vec<Piece> = Vec::new();
            for b in 0..BLOCKS {
                let (version, stamp) = model[b as usize];
                if version == 0 {
                    continue;
                }
                let stamp = if garbled[b as usize] { stamp ^ GARBLE } else { stamp };
                match expected.last_mut() {
                    Some(last)
                        if last.range.end == b * BLOCK_BYTES
                            && (last.version.0, last.stamp.0) == (version, stamp) =>
                    {
                        last.range.end += BLOCK_BYTES;
                    }
                    _ => expected.push(Piece {
                        range: ByteRange::new(b * BLOCK_BYTES, BLOCK_BYTES),
                        version: Version(version),
                        stamp: Stamp(stamp),
                        data: Payload::NONE,
                    }),
                }
            }
            assert_eq!(store.contents(CHUNK), expected, "step {step}");
        }
    }

    #[test]
    fn unstable_writes_up_to_the_stable_version_are_forgotten() {
        let mut store = ChunkStore::new(CHUNK_BYTES);
        let group = ChunkGroupId(3);
        store.apply(group, write(0, 1, 5, 1), Version(0));
        store.apply(group, write(1, 1, 6, 2), Version(0));
        store.apply(group, write(2, 1, 9, 3), Version(0));
        // Out of order, then again with another stamp: it replaces the first.
        store.apply(group, write(3, 1, 7, 4), Version(0));
        store.apply(group, write(3, 1, 7, 5), Version(0));
        store.apply(group, write(2, 1, 8, 6), Version(6));
        let left: Vec<(u64, u64)> =
            store.unstable(group).iter().map(|w| (w.version.0, w.stamp.0)).collect();
        assert_eq!(left, [(7, 5), (8, 6), (9, 3)]);
        // A write already stable is applied but not held.
        store.apply(group, write(4, 1, 2, 7), Version(6));
        assert_eq!(store.unstable(group).len(), 3);
        assert_eq!(store.chunks_of(group), [CHUNK]);
    }
}
