//! Shard buffers laid out so that the kernels' many streams do not fight over cache
//! sets.
//!
//! An encode of k + r shards reads and writes k + r streams at the same offset at once.
//! When the shards start at the same address modulo 4 KiB (as separately allocated
//! large buffers, or shards cut from one buffer at a power-of-two size, do), the lines
//! of all streams fall into the same cache sets; past the caches' associativity they
//! evict each other, prefetched lines included (`docs/ec.md` gives what this measured
//! to on this machine: a large gain in a standalone loop, none in the benchmark).
//! [`StripeBuffer`] puts shard `i` at `i * stride` with `stride` a multiple of 4 KiB plus
//! 64 bytes, so that the same offset of consecutive shards lands in consecutive sets.

/// `count` shards of `len` bytes each in one allocation, each 64-byte aligned and
/// staggered across cache sets.
#[derive(Clone, Debug)]
pub struct StripeBuffer {
    bytes: Vec<u8>,
    start: usize,
    count: usize,
    len: usize,
    stride: usize,
}

impl StripeBuffer {
    /// Zeroed shards.
    pub fn new(count: usize, len: usize) -> StripeBuffer {
        let stride = len.next_multiple_of(4096) + 4096 + 64;
        let bytes = vec![0u8; count * stride + 64];
        let start = bytes.as_ptr().align_offset(64).min(63);
        StripeBuffer { bytes, start, count, len, stride }
    }

    /// How many shards.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The length of each shard.
    pub fn shard_len(&self) -> usize {
        self.len
    }

    /// Shard `i`. Panics if `i >= count`.
    pub fn shard(&self, i: usize) -> &[u8] {
        assert!(i < self.count, "shard {i} of {}", self.count);
        let at = self.start + i * self.stride;
        &self.bytes[at..at + self.len]
    }

    /// Shard `i`, to write. Panics if `i >= count`.
    pub fn shard_mut(&mut self, i: usize) -> &mut [u8] {
        assert!(i < self.count, "shard {i} of {}", self.count);
        let at = self.start + i * self.stride;
        &mut self.bytes[at..at + self.len]
    }

    /// Every shard.
    pub fn shards(&self) -> Vec<&[u8]> {
        (0..self.count).map(|i| self.shard(i)).collect()
    }

    /// Every shard, to write: what [`crate::Code::encode_shards`] and
    /// [`crate::Code::reconstruct`] take.
    pub fn shards_mut(&mut self) -> Vec<&mut [u8]> {
        let (len, count) = (self.len, self.count);
        self.bytes[self.start..]
            .chunks_mut(self.stride)
            .take(count)
            .map(|chunk| &mut chunk[..len])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_disjoint_aligned_and_staggered() {
        for len in [0, 1, 63, 4096, 4097, 1 << 20] {
            let mut buffer = StripeBuffer::new(14, len);
            for (i, shard) in buffer.shards_mut().into_iter().enumerate() {
                assert_eq!(shard.len(), len);
                assert_eq!(shard.as_ptr() as usize % 64, 0);
                shard.fill(i as u8 + 1);
            }
            let starts: Vec<usize> = buffer.shards().iter().map(|s| s.as_ptr() as usize).collect();
            for i in 0..14 {
                assert!(buffer.shard(i).iter().all(|&b| b == i as u8 + 1), "len {len}, shard {i}");
                // Consecutive 64-byte sets modulo 4 KiB.
                assert_eq!((starts[i] - starts[0]) % 4096, 64 * i);
            }
        }
    }
}
