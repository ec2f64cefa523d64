//! A storage server's durable state: its chunk replicas and, per chunk group, the
//! epoch it is fenced at and the writes it holds that are not yet known to be on every
//! replica (docs/protocol.md, C3 and C4).
//!
//! The state changes only when the shell reports a disk write done, so what a crash
//! leaves is exactly what was durable: the simulator keeps the store across a crash
//! and hands it back to the restarted server; the runtime keeps it in files.
//!
//! Replicas hold stamps (see [`Stamp`]) in extents painted by version: a write lands
//! only on the blocks where it is newer than what is there, so replicas that apply the
//! same writes in any order end up equal. Every extent carries a checksum of what it
//! holds, verified on every read.

use std::collections::{BTreeMap, BTreeSet};

use somnus_types::{ByteRange, ChunkGroupId, Version};

use super::mds::mix;
use super::{ChunkId, Epoch, Piece, Stamp, UnstableWrite};
use crate::extent::ExtentMap;

/// The unit of checksums and of the stamps a write leaves: requests are whole blocks.
pub const BLOCK_BYTES: u64 = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cell {
    version: Version,
    stamp: Stamp,
    checksum: u64,
}

impl Cell {
    fn new(version: Version, stamp: Stamp) -> Cell {
        Cell { version, stamp, checksum: checksum(version, stamp) }
    }

    fn intact(self) -> bool {
        self.checksum == checksum(self.version, self.stamp)
    }
}

fn checksum(version: Version, stamp: Stamp) -> u64 {
    mix(version.0 ^ mix(stamp.0))
}

#[derive(Clone, Debug, Default)]
struct GroupRecord {
    /// The epoch this replica is fenced at: it refuses writes of older epochs.
    epoch: Epoch,
    unstable: BTreeMap<Version, UnstableWrite>,
}

/// A read that met blocks whose checksum does not match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Corrupt {
    pub ranges: Vec<ByteRange>,
}

#[derive(Clone, Debug, Default)]
pub struct ChunkStore {
    chunks: BTreeMap<ChunkId, ExtentMap<Cell>>,
    /// The group of every chunk held (a scrub repairs through it).
    group_of: BTreeMap<ChunkId, ChunkGroupId>,
    groups: BTreeMap<ChunkGroupId, GroupRecord>,
    /// The chunks that may hold a corrupt block: only these are verified by a scrub
    /// (a real disk's scrub reads everything; the model knows where it garbled).
    suspect: BTreeSet<ChunkId>,
}

impl ChunkStore {
    pub fn new() -> ChunkStore {
        ChunkStore::default()
    }

    /// Applies `write` to the blocks where it is newer than what is stored.
    pub fn paint(&mut self, write: &UnstableWrite) {
        let extents = self.chunks.entry(write.chunk).or_default();
        // The pieces this write replaces, adjacent ones joined: one insert each.
        let mut gaps: Vec<ByteRange> = Vec::new();
        extents.split(write.range, |piece, cell| {
            if cell.is_none_or(|c| c.version < write.version) {
                match gaps.last_mut() {
                    Some(last) if last.end == piece.start => last.end = piece.end,
                    _ => gaps.push(piece),
                }
            }
        });
        let cell = Cell::new(write.version, write.stamp);
        for gap in gaps {
            extents.insert(gap, cell, |_, _| {});
        }
    }

    /// What `range` of `chunk` holds, in order, or the corrupt parts of it.
    pub fn read(&self, chunk: ChunkId, range: ByteRange) -> Result<Vec<Piece>, Corrupt> {
        let mut pieces = Vec::new();
        let mut corrupt = Vec::new();
        let unwritten = |range| Piece { range, version: Version(0), stamp: Stamp(0) };
        match self.chunks.get(&chunk) {
            None => pieces.push(unwritten(range)),
            Some(extents) => extents.split(range, |piece, cell| match cell {
                None => pieces.push(unwritten(piece)),
                Some(c) if c.intact() => {
                    pieces.push(Piece { range: piece, version: c.version, stamp: c.stamp })
                }
                Some(_) => corrupt.push(piece),
            }),
        }
        if corrupt.is_empty() { Ok(pieces) } else { Err(Corrupt { ranges: corrupt }) }
    }

    /// Whether `pieces` (another replica's copy of `range`) hold every corrupt block
    /// of it at the version this store expects or newer: an older copy would undo a
    /// write this replica acknowledged.
    pub fn repairable(&self, chunk: ChunkId, range: ByteRange, pieces: &[Piece]) -> bool {
        let Some(extents) = self.chunks.get(&chunk) else { return true };
        let mut fits = true;
        extents.split(range, |bad, cell| {
            let Some(cell) = cell.filter(|c| !c.intact()) else { return };
            let mut covered = bad.start;
            for piece in pieces.iter().filter(|p| p.range.overlaps(bad)) {
                if piece.range.start > covered || piece.version < cell.version {
                    break;
                }
                covered = piece.range.end;
            }
            fits &= covered >= bad.end;
        });
        fits
    }

    /// Overwrites the corrupt blocks of `range` with the pieces of `pieces` (another
    /// replica's intact copy) that are at their expected version or newer; intact
    /// blocks keep what they hold.
    pub fn repair(&mut self, chunk: ChunkId, range: ByteRange, pieces: &[Piece]) {
        let extents = self.chunks.entry(chunk).or_default();
        let mut corrupt = Vec::new();
        extents.split(range, |piece, cell| {
            if let Some(cell) = cell.filter(|c| !c.intact()) {
                corrupt.push((piece, cell.version));
            }
        });
        for (bad, expected) in corrupt {
            for piece in pieces.iter().filter(|p| p.version >= expected) {
                let Some(overlap) = piece.range.intersection(bad) else { continue };
                let cell = Cell::new(piece.version, piece.stamp);
                extents.insert(overlap, cell, |_, _| {});
            }
        }
        if extents.iter().all(|(_, cell)| cell.intact()) {
            self.suspect.remove(&chunk);
        }
    }

    /// Fault injection: garbles the block at `offset` of `chunk` behind its checksum,
    /// as a bad sector would. Returns whether the block held data.
    pub fn corrupt_block(&mut self, chunk: ChunkId, offset: u64) -> bool {
        let block = ByteRange::new(offset / BLOCK_BYTES * BLOCK_BYTES, BLOCK_BYTES);
        let Some(extents) = self.chunks.get_mut(&chunk) else { return false };
        let mut held = None;
        extents.for_each_overlap(block, |_, cell| held = Some(cell));
        let Some(cell) = held else { return false };
        let garbled = Cell { stamp: Stamp(cell.stamp.0 ^ 0x5a5a_5a5a), ..cell };
        extents.insert(block, garbled, |_, _| {});
        self.suspect.insert(chunk);
        true
    }

    /// Every corrupt range held, with its chunk's group (a scrub's findings).
    pub fn corrupt_ranges(&self) -> Vec<(ChunkGroupId, ChunkId, ByteRange)> {
        let mut found = Vec::new();
        for chunk in &self.suspect {
            let Some(extents) = self.chunks.get(chunk) else { continue };
            let Some(group) = self.group_of.get(chunk) else { continue };
            for (range, cell) in extents.iter() {
                if !cell.intact() {
                    found.push((*group, *chunk, range));
                }
            }
        }
        found
    }

    /// The chunks this store holds, for the simulation's convergence check.
    pub fn chunk_ids(&self) -> impl Iterator<Item = ChunkId> + '_ {
        self.chunks.keys().copied()
    }

    /// Every written piece of `chunk`, adjacent equal pieces merged, corrupt blocks
    /// as their (garbled) stamps: two replicas are equal when these are.
    pub fn contents(&self, chunk: ChunkId) -> Vec<Piece> {
        let mut pieces: Vec<Piece> = Vec::new();
        let Some(extents) = self.chunks.get(&chunk) else { return pieces };
        for (range, cell) in extents.iter() {
            match pieces.last_mut() {
                Some(last)
                    if last.range.end == range.start
                        && last.version == cell.version
                        && last.stamp == cell.stamp =>
                {
                    last.range.end = range.end;
                }
                _ => pieces.push(Piece { range, version: cell.version, stamp: cell.stamp }),
            }
        }
        pieces
    }

    /// Whether every byte of `range` of `chunk` holds `version` or a newer one (intact
    /// or not: a corrupt block is still a copy a repair can be told about).
    pub fn holds(&self, chunk: ChunkId, range: ByteRange, version: Version) -> bool {
        let Some(extents) = self.chunks.get(&chunk) else { return false };
        let mut holds = true;
        extents.split(range, |_, cell| holds &= cell.is_some_and(|c| c.version >= version));
        holds
    }

    pub fn epoch(&self, group: ChunkGroupId) -> Epoch {
        self.groups.get(&group).map_or(Epoch(0), |g| g.epoch)
    }

    /// Fences `group` at `epoch`: writes of older epochs are refused from now on.
    pub fn fence(&mut self, group: ChunkGroupId, epoch: Epoch) {
        let record = self.groups.entry(group).or_default();
        record.epoch = record.epoch.max(epoch);
    }

    /// Records `write` as unstable, then forgets every write up to `stable` (the
    /// primary knows those are on every replica).
    pub fn hold_unstable(&mut self, group: ChunkGroupId, write: UnstableWrite, stable: Version) {
        self.group_of.insert(write.chunk, group);
        let record = self.groups.entry(group).or_default();
        if write.version > stable {
            record.unstable.insert(write.version, write);
        }
        let newer = record.unstable.split_off(&Version(stable.0 + 1));
        record.unstable = newer;
    }

    /// The chunks of `group` this store holds (a rebuild copies them).
    pub fn chunks_of(&self, group: ChunkGroupId) -> Vec<ChunkId> {
        self.group_of.iter().filter(|(_, g)| **g == group).map(|(c, _)| *c).collect()
    }

    /// Applies another replica's copy of `chunk` (a rebuild), where newer.
    pub fn paint_copy(&mut self, group: ChunkGroupId, chunk: ChunkId, pieces: &[Piece]) {
        self.group_of.insert(chunk, group);
        for piece in pieces {
            let write = UnstableWrite {
                chunk,
                range: piece.range,
                version: piece.version,
                stamp: piece.stamp,
            };
            self.paint(&write);
        }
    }

    pub fn unstable(&self, group: ChunkGroupId) -> Vec<UnstableWrite> {
        self.groups.get(&group).map_or_else(Vec::new, |g| g.unstable.values().copied().collect())
    }
}

#[cfg(test)]
mod tests {
    use somnus_types::ObjectId;

    use super::*;
    use crate::cluster::ChunkIndex;

    const CHUNK: ChunkId = ChunkId { object: ObjectId(1), chunk: ChunkIndex(0) };

    fn write(start: u64, blocks: u64, version: u64, stamp: u64) -> UnstableWrite {
        UnstableWrite {
            chunk: CHUNK,
            range: ByteRange::new(start * BLOCK_BYTES, blocks * BLOCK_BYTES),
            version: Version(version),
            stamp: Stamp(stamp),
        }
    }

    #[test]
    fn writes_applied_in_any_order_leave_equal_replicas() {
        let writes =
            [write(0, 4, 3, 30), write(2, 4, 5, 50), write(1, 1, 4, 40), write(5, 2, 1, 10)];
        let mut forward = ChunkStore::new();
        let mut backward = ChunkStore::new();
        for w in &writes {
            forward.paint(w);
        }
        for w in writes.iter().rev() {
            backward.paint(w);
        }
        assert_eq!(forward.contents(CHUNK), backward.contents(CHUNK));
        let stamps: Vec<u64> = forward.contents(CHUNK).iter().map(|p| p.stamp.0).collect();
        // Block 6 keeps the oldest write: nothing newer covers it.
        assert_eq!(stamps, [30, 40, 50, 10]);
    }

    #[test]
    fn a_corrupt_block_is_found_on_read_and_repaired_from_a_copy() {
        let mut store = ChunkStore::new();
        let mut copy = ChunkStore::new();
        for s in [&mut store, &mut copy] {
            s.paint(&write(0, 4, 7, 70));
        }
        assert!(store.corrupt_block(CHUNK, 2 * BLOCK_BYTES + 10));
        let range = ByteRange::new(0, 4 * BLOCK_BYTES);
        let corrupt = store.read(CHUNK, range).unwrap_err();
        assert_eq!(corrupt.ranges, [ByteRange::new(2 * BLOCK_BYTES, BLOCK_BYTES)]);
        let older = [Piece { range, version: Version(6), stamp: Stamp(60) }];
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
    fn unstable_writes_up_to_the_stable_version_are_forgotten() {
        let mut store = ChunkStore::new();
        let group = ChunkGroupId(3);
        store.hold_unstable(group, write(0, 1, 5, 1), Version(0));
        store.hold_unstable(group, write(1, 1, 6, 2), Version(0));
        store.hold_unstable(group, write(2, 1, 8, 3), Version(6));
        let left: Vec<u64> = store.unstable(group).iter().map(|w| w.version.0).collect();
        assert_eq!(left, [8]);
    }
}
