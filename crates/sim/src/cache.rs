//! The read cache of an array controller, as a performance model: which 4 KiB blocks it
//! holds, not their bytes. Eight-way set associative with least-recently-used
//! replacement inside a set, like a hardware cache: a fixed amount of memory, O(1)
//! per block, and deterministic (the set is a fixed hash of the block number).

/// The cache's unit.
pub(crate) const BLOCK_BYTES: u64 = 4096;
const WAYS: usize = 8;
const EMPTY: u64 = u64::MAX;
/// A request touching more blocks than this is not looked up block by block: it is a
/// miss, and only its first blocks are remembered (a scan would flush the cache).
const BLOCKS_PER_REQUEST_MAX: u64 = 256;

#[derive(Clone, Debug)]
pub(crate) struct BlockCache {
    sets: Vec<Set>,
    clock: u64,
}

/// One set: its ways' blocks and when each was last used (0 for never), side by side
/// so that a lookup touches one place.
#[derive(Clone, Copy, Debug)]
struct Set {
    tags: [u64; WAYS],
    stamps: [u64; WAYS],
}

impl Set {
    fn way_of(&self, block: u64) -> Option<usize> {
        self.tags.iter().position(|tag| *tag == block)
    }

    /// The least recently used way; the first of equals (an empty way before another).
    fn victim(&self) -> usize {
        let mut victim = 0;
        for way in 1..WAYS {
            if self.stamps[way] < self.stamps[victim] {
                victim = way;
            }
        }
        victim
    }
}

impl BlockCache {
    /// A cache of `capacity_bytes` (rounded down to whole sets); `None` for too small a
    /// capacity to hold one set.
    pub(crate) fn new(capacity_bytes: u64) -> Option<BlockCache> {
        let sets = (capacity_bytes / BLOCK_BYTES / WAYS as u64) as usize;
        let empty = Set { tags: [EMPTY; WAYS], stamps: [0; WAYS] };
        (sets > 0).then(|| BlockCache { sets: vec![empty; sets], clock: 0 })
    }

    fn set_of(&mut self, block: u64) -> &mut Set {
        // Fibonacci hashing spreads neighbouring blocks over the sets.
        let index = (block.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 16) as usize % self.sets.len();
        &mut self.sets[index]
    }

    fn blocks(start: u64, end: u64) -> std::ops::Range<u64> {
        (start / BLOCK_BYTES)..end.div_ceil(BLOCK_BYTES)
    }

    /// Whether every block of `[start, end)` is cached; refreshes those that are.
    pub(crate) fn hit(&mut self, start: u64, end: u64) -> bool {
        let blocks = Self::blocks(start, end);
        if blocks.end - blocks.start > BLOCKS_PER_REQUEST_MAX {
            return false;
        }
        for block in blocks {
            let clock = self.clock + 1;
            let set = self.set_of(block);
            let Some(way) = set.way_of(block) else { return false };
            set.stamps[way] = clock;
            self.clock = clock;
        }
        true
    }

    /// Remembers the blocks of `[start, end)`, evicting the least recently used way of
    /// each set as needed.
    pub(crate) fn insert(&mut self, start: u64, end: u64) {
        let blocks = Self::blocks(start, end);
        let last = blocks.end.min(blocks.start + BLOCKS_PER_REQUEST_MAX);
        for block in blocks.start..last {
            let clock = self.clock + 1;
            self.clock = clock;
            let set = self.set_of(block);
            let way = set.way_of(block).unwrap_or_else(|| set.victim());
            set.tags[way] = block;
            set.stamps[way] = clock;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_after_insert_and_evicts_least_recently_used() {
        // Goal: a block read twice hits the second time; a cache of one set (8 ways)
        // keeps the 8 most recently used blocks; a request is a hit only if every one
        // of its blocks is cached.
        let mut cache = BlockCache::new(8 * BLOCK_BYTES).unwrap();
        assert!(!cache.hit(0, 4096));
        cache.insert(0, 4096);
        assert!(cache.hit(0, 4096));
        assert!(cache.hit(100, 200));
        assert!(!cache.hit(0, 8192));
        for block in 1..8 {
            cache.insert(block * BLOCK_BYTES, (block + 1) * BLOCK_BYTES);
        }
        assert!(cache.hit(0, 8 * BLOCK_BYTES));
        // Block 0 was used last; block 1 is the least recently used and goes.
        assert!(cache.hit(0, 4096));
        cache.insert(8 * BLOCK_BYTES, 9 * BLOCK_BYTES);
        assert!(!cache.hit(BLOCK_BYTES, 2 * BLOCK_BYTES));
        assert!(cache.hit(0, 4096));
        assert!(BlockCache::new(BLOCK_BYTES).is_none());
    }
}
