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
}

/// One set's blocks, most recently used first: the order is the LRU state, so a set
/// needs no timestamps and fits one 64-byte cache line of the host (a busy cluster's
/// caches outgrow the host's L2, and each lookup then costs one line, not two). An
/// empty way holds `EMPTY` and sits behind every used one, so it is filled before any
/// block is evicted.
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
struct Set([u64; WAYS]);

impl Set {
    /// Moves `block` to the front if the set holds it.
    fn touch(&mut self, block: u64) -> bool {
        let Some(way) = self.0.iter().position(|tag| *tag == block) else { return false };
        self.0[..=way].rotate_right(1);
        true
    }

    /// Puts `block` in front, evicting the least recently used block if it is new.
    fn insert(&mut self, block: u64) {
        if !self.touch(block) {
            self.0.rotate_right(1);
            self.0[0] = block;
        }
    }
}

impl BlockCache {
    /// A cache of `capacity_bytes` (rounded down to whole sets); `None` for too small a
    /// capacity to hold one set.
    pub(crate) fn new(capacity_bytes: u64) -> Option<BlockCache> {
        let sets = (capacity_bytes / BLOCK_BYTES / WAYS as u64) as usize;
        (sets > 0).then(|| BlockCache { sets: vec![Set([EMPTY; WAYS]); sets] })
    }

    fn set_of(&mut self, block: u64) -> &mut Set {
        // Fibonacci hashing spreads neighbouring blocks over the sets.
        let index = (block.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 16) as usize % self.sets.len();
        &mut self.sets[index]
    }

    fn blocks(start: u64, end: u64) -> std::ops::Range<u64> {
        (start / BLOCK_BYTES)..end.div_ceil(BLOCK_BYTES)
    }

    /// Whether every block of `[start, end)` is cached; refreshes those that are, up
    /// to the first that is not.
    pub(crate) fn hit(&mut self, start: u64, end: u64) -> bool {
        let mut blocks = Self::blocks(start, end);
        if blocks.end - blocks.start > BLOCKS_PER_REQUEST_MAX {
            return false;
        }
        blocks.all(|block| self.set_of(block).touch(block))
    }

    /// Remembers the blocks of `[start, end)`, evicting the least recently used block
    /// of each set as needed.
    pub(crate) fn insert(&mut self, start: u64, end: u64) {
        let blocks = Self::blocks(start, end);
        let last = blocks.end.min(blocks.start + BLOCKS_PER_REQUEST_MAX);
        for block in blocks.start..last {
            self.set_of(block).insert(block);
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::{RngCore, SeedableRng};
    use rand_pcg::Pcg64;

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

    #[test]
    fn agrees_with_a_plain_lru_model() {
        // Goal: the move-to-front sets evict exactly what timestamped LRU sets evict
        // (empty ways first, then the least recently used block), so every hit and miss
        // is the same. Method: random reads and writes over a block space four times the
        // cache, against per-set lists of (block, last use).
        let mut cache = BlockCache::new(4 * WAYS as u64 * BLOCK_BYTES).unwrap();
        let sets = cache.sets.len();
        let mut model: Vec<Vec<(u64, u64)>> = vec![Vec::new(); sets];
        let mut clock = 0_u64;
        let mut rng = Pcg64::seed_from_u64(7);
        let mut next = move || rng.next_u64();
        let set_index =
            |block: u64| (block.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 16) as usize % sets;
        let (mut hits, mut misses) = (0, 0);
        for _ in 0..50_000 {
            let first = next() % (4 * 4 * WAYS as u64);
            let count = 1 + next() % 4;
            let (start, end) = (first * BLOCK_BYTES, (first + count) * BLOCK_BYTES);
            let read = next() % 3 != 0;
            if read {
                // The model: a hit only if every block is held, refreshing up to the first
                // that is not.
                let mut expected = true;
                for block in first..first + count {
                    let set = &mut model[set_index(block)];
                    match set.iter_mut().find(|(b, _)| *b == block) {
                        Some(entry) => {
                            clock += 1;
                            entry.1 = clock;
                        }
                        None => {
                            expected = false;
                            break;
                        }
                    }
                }
                let actual = cache.hit(start, end);
                assert_eq!(actual, expected, "read of blocks {first}..{}", first + count);
                if actual {
                    hits += 1;
                    continue;
                }
                misses += 1;
            }
            for block in first..first + count {
                let set = &mut model[set_index(block)];
                clock += 1;
                if let Some(entry) = set.iter_mut().find(|(b, _)| *b == block) {
                    entry.1 = clock;
                } else if set.len() < WAYS {
                    set.push((block, clock));
                } else {
                    let oldest = (0..WAYS).min_by_key(|&i| set[i].1).unwrap();
                    set[oldest] = (block, clock);
                }
            }
            cache.insert(start, end);
        }
        assert!(hits > 1_000 && misses > 1_000, "hits {hits}, misses {misses}");
    }
}
