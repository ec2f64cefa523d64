//! One chunk's blocks: the version and stamp of the write that last painted each, in
//! a dense array (16 bytes per 4 KiB block, room for the whole chunk taken at its
//! first write).

use somnus_types::Version;

use crate::cluster::Stamp;

/// One block of a replica; version 0 (stamp 0): never written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Block {
    pub(super) version: Version,
    pub(super) stamp: Stamp,
}

impl Block {
    pub(super) fn written(self) -> bool {
        self.version.0 > 0
    }
}

/// A chunk's blocks, from the first up to the last one written.
#[derive(Clone, Debug, Default)]
pub(super) struct ChunkBlocks(Vec<Block>);

impl ChunkBlocks {
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// Block `index`; unwritten past the last one written.
    pub(super) fn get(&self, index: u64) -> Block {
        self.0.get(index as usize).copied().unwrap_or_default()
    }

    /// Puts `block` at `index`, within the blocks held.
    pub(super) fn set(&mut self, index: u64, block: Block) {
        if let Some(cell) = self.0.get_mut(index as usize) {
            *cell = block;
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = Block> + '_ {
        self.0.iter().copied()
    }

    /// Paints `block` on the blocks of `range` that hold an older version (growing
    /// the chunk to the range's end, at most `most` blocks), and calls `painted`
    /// with the index of each block painted.
    pub(super) fn paint(
        &mut self,
        range: std::ops::Range<u64>,
        block: Block,
        most: u64,
        mut painted: impl FnMut(u64),
    ) {
        let cells = &mut self.0;
        let end = range.end as usize;
        if cells.len() < end {
            // Room for the whole chunk at its first write (4 KiB for a 1 MiB chunk):
            // most chunks end up whole, and growing step by step copies them.
            cells.reserve_exact((most as usize).max(end) - cells.len());
            cells.resize(end, Block::default());
        }
        for index in range {
            let cell = &mut cells[index as usize];
            if cell.version < block.version {
                *cell = block;
                painted(index);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(version: u64, stamp: u64) -> Block {
        Block { version: Version(version), stamp: Stamp(stamp) }
    }

    #[test]
    fn a_paint_lands_only_where_it_is_newer_and_a_set_only_within_the_blocks() {
        let mut blocks = ChunkBlocks::default();
        blocks.paint(0..4, block(7, 70), 256, |_| {});
        let mut painted = Vec::new();
        blocks.paint(2..6, block(8, 80), 256, |i| painted.push(i));
        assert_eq!(painted, [2, 3, 4, 5]);
        blocks.paint(0..6, block(7, 1), 256, |i| painted.push(i));
        assert_eq!(painted.len(), 4, "an older write paints nothing");
        let held: Vec<u64> = blocks.iter().map(|b| b.stamp.0).collect();
        assert_eq!(held, [70, 70, 80, 80, 80, 80]);
        assert_eq!(blocks.get(9), Block::default());
        blocks.set(9, block(9, 90));
        assert_eq!(blocks.len(), 6, "past the blocks held: nothing to overwrite");
        blocks.set(1, block(9, 90));
        assert_eq!(blocks.get(1), block(9, 90));
    }
}
