//! One chunk's blocks: the version and stamp of the write that last painted each, in
//! pages of 16 blocks (16 bytes per 4 KiB block) made at a page's first write.
//!
//! Pages, not one array for the whole chunk: a long trace touches hundreds of
//! thousands of chunks with a few small writes each, and a whole chunk's array (4 KiB
//! for a 1 MiB chunk) per replica was half the memory of a 6 h msr-fast08 replay.
//! A page keeps a block's lookup one index away, as the array did.

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

/// Blocks per page: 256 bytes of state for 64 KiB of data, about one small write's.
const PAGE: usize = 16;

type Page = Box<[Block; PAGE]>;

/// A chunk's blocks, from the first up to the page of the last one written, and how
/// many are written (kept as they change: the orphan scan asks every chunk's).
#[derive(Clone, Debug, Default)]
pub(super) struct ChunkBlocks {
    pages: Vec<Option<Page>>,
    written: u64,
}

impl ChunkBlocks {
    /// How many blocks the pages reach (those past the last page are unwritten).
    pub(super) fn len(&self) -> usize {
        self.pages.len() * PAGE
    }

    /// Block `index`; unwritten where no page holds it.
    pub(super) fn get(&self, index: u64) -> Block {
        let index = index as usize;
        match self.pages.get(index / PAGE) {
            Some(Some(page)) => page[index % PAGE],
            _ => Block::default(),
        }
    }

    /// Puts `block` at `index`, only where a page holds it already.
    pub(super) fn set(&mut self, index: u64, block: Block) {
        let index = index as usize;
        if let Some(Some(page)) = self.pages.get_mut(index / PAGE) {
            let cell = &mut page[index % PAGE];
            self.written = self.written + u64::from(block.written()) - u64::from(cell.written());
            *cell = block;
        }
    }

    /// Every block from the first up to the end of the last page.
    pub(super) fn iter(&self) -> impl Iterator<Item = Block> + '_ {
        (0..self.len() as u64).map(|index| self.get(index))
    }

    /// Paints `block` on the blocks of `range` that hold an older version (making
    /// the pages it needs, in a chunk of at most `most` blocks), calls `painted`
    /// with the index of each block painted, and returns how many of them were
    /// unwritten before.
    pub(super) fn paint(
        &mut self,
        range: std::ops::Range<u64>,
        block: Block,
        most: u64,
        mut painted: impl FnMut(u64),
    ) -> u64 {
        if range.is_empty() {
            return 0;
        }
        let mut new = 0;
        let pages = &mut self.pages;
        let last_page = (range.end as usize - 1) / PAGE;
        if pages.len() <= last_page {
            // The page table for the whole chunk at once (8 bytes a page): it is
            // small, and growing it step by step would copy it.
            let whole = (most as usize).div_ceil(PAGE).max(last_page + 1);
            pages.reserve_exact(whole - pages.len());
            pages.resize(last_page + 1, None);
        }
        for index in range {
            let at = index as usize;
            let page = pages[at / PAGE].get_or_insert_with(|| Box::new([Block::default(); PAGE]));
            let cell = &mut page[at % PAGE];
            if cell.version < block.version {
                new += u64::from(!cell.written());
                *cell = block;
                painted(index);
            }
        }
        self.written += new;
        new
    }

    /// Blocks written (a freed chunk's count goes from the store's total).
    pub(super) fn written(&self) -> u64 {
        debug_assert_eq!(
            self.written,
            self.pages
                .iter()
                .flatten()
                .map(|p| p.iter().filter(|b| b.written()).count() as u64)
                .sum(),
            "a chunk's count of written blocks"
        );
        self.written
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
        assert_eq!(held[..7], [70, 70, 80, 80, 80, 80, 0]);
        assert_eq!(blocks.len(), 16, "one page");
        assert_eq!(blocks.get(9), Block::default());
        blocks.set(40, block(9, 90));
        assert_eq!(blocks.get(40), Block::default(), "past the pages held: nothing to overwrite");
        assert_eq!(blocks.len(), 16);
        blocks.set(1, block(9, 90));
        assert_eq!(blocks.get(1), block(9, 90));
        assert_eq!(blocks.written(), 6, "blocks 0..6 written, whatever painted or set them");
        blocks.set(1, Block::default());
        assert_eq!(blocks.written(), 5, "a block set back to unwritten");
    }

    #[test]
    fn a_write_far_into_a_chunk_makes_only_its_own_pages() {
        let mut blocks = ChunkBlocks::default();
        blocks.paint(250..256, block(3, 30), 256, |_| {});
        assert_eq!(blocks.len(), 256);
        let made = blocks.pages.iter().filter(|page| page.is_some()).count();
        assert_eq!(made, 1, "blocks 250..256 lie in the last page only");
        blocks.paint(15..17, block(4, 40), 256, |_| {});
        let made = blocks.pages.iter().filter(|page| page.is_some()).count();
        assert_eq!(made, 3, "a write across a page boundary makes both pages");
        assert_eq!(blocks.get(16), block(4, 40));
        assert_eq!(blocks.get(14), Block::default());
        assert_eq!(blocks.iter().filter(|b| b.written()).count(), 8);
    }
}
