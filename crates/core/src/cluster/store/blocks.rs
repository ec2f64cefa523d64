//! One chunk's blocks: the version and stamp of the write that last painted each.
//!
//! Eight bytes a block while every version and stamp fits in 32 bits, sixteen once
//! one does not: the blocks are most of a simulated cluster's memory (a 300-server
//! run holds 7,200 chunk replicas), and half the bytes is half the cache lines a
//! random request misses. A chunk widens once, the first time a value outgrows 32
//! bits, and never narrows; the two forms read the same.

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

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Narrow {
    version: u32,
    stamp: u32,
}

impl Narrow {
    fn of(block: Block) -> Option<Narrow> {
        let version = u32::try_from(block.version.0).ok()?;
        let stamp = u32::try_from(block.stamp.0).ok()?;
        Some(Narrow { version, stamp })
    }

    fn wide(self) -> Block {
        Block { version: Version(self.version.into()), stamp: Stamp(self.stamp.into()) }
    }
}

/// A chunk's blocks, from the first up to the last one written.
#[derive(Clone, Debug)]
pub(super) enum ChunkBlocks {
    Narrow(Vec<Narrow>),
    Wide(Vec<Block>),
}

impl Default for ChunkBlocks {
    fn default() -> Self {
        ChunkBlocks::Narrow(Vec::new())
    }
}

/// Lengthens `cells` to `end`, as a vector grows but never past `most` cells: most
/// chunks end up whole, and a doubling past their end would waste half the memory.
fn grow<C: Clone + Default>(cells: &mut Vec<C>, end: usize, most: usize) {
    if cells.len() < end {
        let capacity = (cells.capacity() * 2).clamp(end, most.max(end));
        cells.reserve_exact(capacity - cells.len());
        cells.resize(end, C::default());
    }
}

impl ChunkBlocks {
    pub(super) fn len(&self) -> usize {
        match self {
            ChunkBlocks::Narrow(cells) => cells.len(),
            ChunkBlocks::Wide(cells) => cells.len(),
        }
    }

    /// Block `index`; unwritten past the last one written.
    pub(super) fn get(&self, index: u64) -> Block {
        let index = index as usize;
        match self {
            ChunkBlocks::Narrow(cells) => cells.get(index).map(|c| c.wide()).unwrap_or_default(),
            ChunkBlocks::Wide(cells) => cells.get(index).copied().unwrap_or_default(),
        }
    }

    /// Puts `block` at `index`, within the blocks held.
    pub(super) fn set(&mut self, index: u64, block: Block) {
        if index as usize >= self.len() {
            return;
        }
        self.fit(block);
        match self {
            ChunkBlocks::Narrow(cells) => {
                if let Some(narrow) = Narrow::of(block) {
                    cells[index as usize] = narrow;
                }
            }
            ChunkBlocks::Wide(cells) => cells[index as usize] = block,
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = Block> + '_ {
        let (narrow, wide) = match self {
            ChunkBlocks::Narrow(cells) => (Some(cells.iter().map(|c| c.wide())), None),
            ChunkBlocks::Wide(cells) => (None, Some(cells.iter().copied())),
        };
        narrow.into_iter().flatten().chain(wide.into_iter().flatten())
    }

    /// Widens the blocks if `block` does not fit narrow ones.
    fn fit(&mut self, block: Block) {
        if let ChunkBlocks::Narrow(cells) = self
            && Narrow::of(block).is_none()
        {
            let wide: Vec<Block> = cells.iter().map(|c| c.wide()).collect();
            *self = ChunkBlocks::Wide(wide);
        }
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
        self.fit(block);
        let (end, most) = (range.end as usize, most as usize);
        match self {
            ChunkBlocks::Narrow(cells) => {
                let Some(narrow) = Narrow::of(block) else { return };
                grow(cells, end, most);
                for index in range {
                    let cell = &mut cells[index as usize];
                    if cell.version < narrow.version {
                        *cell = narrow;
                        painted(index);
                    }
                }
            }
            ChunkBlocks::Wide(cells) => {
                grow(cells, end, most);
                for index in range {
                    let cell = &mut cells[index as usize];
                    if cell.version < block.version {
                        *cell = block;
                        painted(index);
                    }
                }
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
    fn a_chunk_widens_when_a_value_outgrows_32_bits_and_keeps_what_it_held() {
        let mut blocks = ChunkBlocks::default();
        blocks.paint(0..4, block(7, 70), 256, |_| {});
        assert!(matches!(blocks, ChunkBlocks::Narrow(_)));
        let big = u64::from(u32::MAX) + 1;
        let mut painted = Vec::new();
        blocks.paint(2..6, block(8, big), 256, |i| painted.push(i));
        assert!(matches!(blocks, ChunkBlocks::Wide(_)));
        assert_eq!(painted, [2, 3, 4, 5]);
        let held: Vec<Block> = blocks.iter().collect();
        assert_eq!(
            held,
            [block(7, 70), block(7, 70), block(8, big), block(8, big)]
                .iter()
                .chain([block(8, big), block(8, big)].iter())
                .copied()
                .collect::<Vec<_>>()
        );
        // An older write paints nothing, in either form.
        blocks.paint(0..6, block(7, 1), 256, |i| painted.push(i));
        assert_eq!(painted.len(), 4);
        assert_eq!(blocks.get(9), Block::default());
    }

    #[test]
    fn a_set_of_a_wide_value_widens_the_chunk() {
        let mut blocks = ChunkBlocks::default();
        blocks.paint(0..2, block(1, 10), 256, |_| {});
        let big = block(u64::from(u32::MAX) + 5, 3);
        blocks.set(1, big);
        assert_eq!(blocks.iter().collect::<Vec<_>>(), [block(1, 10), big]);
        // Past the blocks held: nothing to overwrite.
        blocks.set(5, big);
        assert_eq!(blocks.len(), 2);
    }
}
