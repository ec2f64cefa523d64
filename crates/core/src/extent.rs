//! A map from non-overlapping byte ranges to values.
//!
//! Inserting a range overwrites whatever overlapped it, splitting partly covered
//! extents, and reports the displaced pieces to the caller (the redirect cache turns
//! them into garbage to invalidate). Adjacent extents with equal values are not merged:
//! a value here is usually a version, and each write has its own.

use std::collections::BTreeMap;

use somnus_types::ByteRange;

#[derive(Clone, Debug)]
pub struct ExtentMap<V> {
    /// Keyed by start offset; the value holds the end offset and the payload.
    extents: BTreeMap<u64, (u64, V)>,
    total_bytes: u64,
    scratch: Vec<(u64, u64, V)>,
}

impl<V: Copy + Eq> Default for ExtentMap<V> {
    fn default() -> ExtentMap<V> {
        ExtentMap::new()
    }
}

impl<V: Copy + Eq> ExtentMap<V> {
    pub fn new() -> ExtentMap<V> {
        ExtentMap { extents: BTreeMap::new(), total_bytes: 0, scratch: Vec::new() }
    }

    pub fn is_empty(&self) -> bool {
        self.extents.is_empty()
    }

    pub fn len(&self) -> usize {
        self.extents.len()
    }

    /// The number of bytes covered.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Maps `range` to `value`, calling `displaced` with each piece that was mapped
    /// before (in ascending order).
    pub fn insert(&mut self, range: ByteRange, value: V, displaced: impl FnMut(ByteRange, V)) {
        assert!(!range.is_empty(), "empty extent");
        self.remove_where(range, |_| true, displaced);
        self.extents.insert(range.start, (range.end, value));
        self.total_bytes += range.size_bytes();
        self.check();
    }

    /// Unmaps the parts of `range` whose value satisfies `predicate`, reporting each
    /// removed piece. Pieces outside `range` stay mapped.
    pub fn remove_where(
        &mut self,
        range: ByteRange,
        mut predicate: impl FnMut(V) -> bool,
        mut removed: impl FnMut(ByteRange, V),
    ) {
        if self.extents.is_empty() {
            return;
        }
        // Reuse one buffer: this runs on every off-loaded write.
        let mut overlapping = std::mem::take(&mut self.scratch);
        overlapping.clear();
        let first = self.extents.range(..range.start).next_back().map(|(start, _)| *start);
        let start_key = first.unwrap_or(range.start);
        for (&start, &(end, value)) in self.extents.range(start_key..range.end) {
            if end > range.start && predicate(value) {
                overlapping.push((start, end, value));
            }
        }
        for &(start, end, value) in &overlapping {
            self.extents.remove(&start);
            self.total_bytes -= end - start;
            if start < range.start {
                self.extents.insert(start, (range.start, value));
                self.total_bytes += range.start - start;
            }
            if end > range.end {
                self.extents.insert(range.end, (end, value));
                self.total_bytes += end - range.end;
            }
            let cut = ByteRange::from_bounds(start.max(range.start), end.min(range.end));
            removed(cut, value);
        }
        self.scratch = overlapping;
    }

    /// Calls `visit` with each mapped piece of `range`, clipped to it, in order.
    pub fn for_each_overlap(&self, range: ByteRange, mut visit: impl FnMut(ByteRange, V)) {
        if self.extents.is_empty() {
            return;
        }
        let first = self.extents.range(..range.start).next_back().map(|(start, _)| *start);
        let start_key = first.unwrap_or(range.start);
        for (&start, &(end, value)) in self.extents.range(start_key..range.end) {
            if end > range.start {
                visit(ByteRange::from_bounds(start.max(range.start), end.min(range.end)), value);
            }
        }
    }

    /// Whether any byte of `range` is mapped.
    pub fn overlaps(&self, range: ByteRange) -> bool {
        if self.extents.is_empty() {
            return false;
        }
        let before = self.extents.range(..range.start).next_back();
        if before.is_some_and(|(_, (end, _))| *end > range.start) {
            return true;
        }
        self.extents.range(range.start..range.end).next().is_some()
    }

    /// Splits `range` into pieces that are mapped (with their values) and gaps.
    pub fn split(&self, range: ByteRange, mut visit: impl FnMut(ByteRange, Option<V>)) {
        let mut cursor = range.start;
        self.for_each_overlap(range, |piece, value| {
            if piece.start > cursor {
                visit(ByteRange::from_bounds(cursor, piece.start), None);
            }
            visit(piece, Some(value));
            cursor = piece.end;
        });
        if cursor < range.end {
            visit(ByteRange::from_bounds(cursor, range.end), None);
        }
    }

    /// All extents in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = (ByteRange, V)> + '_ {
        self.extents
            .iter()
            .map(|(&start, &(end, value))| (ByteRange::from_bounds(start, end), value))
    }

    /// The first extent whose value satisfies `predicate`, in ascending order from the
    /// first extent starting at or after `from`, then wrapping round to the lowest: a
    /// caller walking the map step by step resumes where it stopped instead of
    /// passing again every extent it skipped.
    pub fn find_from(
        &self,
        from: u64,
        mut predicate: impl FnMut(V) -> bool,
    ) -> Option<(ByteRange, V)> {
        let to_extent = |(&start, &(end, value)): (&u64, &(u64, V))| {
            (ByteRange::from_bounds(start, end), value)
        };
        let mut wrapped = self.extents.range(from..).chain(self.extents.range(..from));
        wrapped.find(|(_, (_, value))| predicate(*value)).map(to_extent)
    }

    fn check(&self) {
        #[cfg(feature = "expensive-checks")]
        {
            let mut previous_end = 0;
            let mut total = 0;
            for (&start, &(end, _)) in &self.extents {
                assert!(start < end, "empty extent at {start}");
                assert!(start >= previous_end, "extents overlap at {start}");
                previous_end = end;
                total += end - start;
            }
            assert_eq!(total, self.total_bytes, "total_bytes out of date");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn r(start: u64, end: u64) -> ByteRange {
        ByteRange::from_bounds(start, end)
    }

    #[test]
    fn insert_splits_and_reports_displaced_pieces() {
        // Goal: overwriting the middle of an extent keeps both ends and reports exactly
        // the overwritten piece, as the redirect cache needs for its garbage.
        let mut map = ExtentMap::new();
        map.insert(r(0, 100), 1u32, |_, _| panic!("nothing to displace"));
        let mut displaced = Vec::new();
        map.insert(r(40, 60), 2, |piece, value| displaced.push((piece, value)));
        assert_eq!(displaced, vec![(r(40, 60), 1)]);
        assert_eq!(
            map.iter().collect::<Vec<_>>(),
            vec![(r(0, 40), 1), (r(40, 60), 2), (r(60, 100), 1)]
        );
        assert_eq!(map.total_bytes(), 100);
        let mut pieces = Vec::new();
        map.split(r(50, 120), |piece, value| pieces.push((piece, value)));
        assert_eq!(pieces, vec![(r(50, 60), Some(2)), (r(60, 100), Some(1)), (r(100, 120), None)]);
        assert!(map.overlaps(r(99, 200)));
        assert!(!map.overlaps(r(100, 200)));
    }

    proptest! {
        #[test]
        fn behaves_like_a_map_of_bytes(ops in proptest::collection::vec((0u64..64, 1u64..16, 0u8..3, any::<u8>()), 1..60)) {
            // Goal: the extent map agrees byte for byte with a plain array model under
            // random inserts and conditional removals.
            let mut map = ExtentMap::new();
            let mut model = [None::<u8>; 80];
            for (start, size, op, value) in ops {
                let range = r(start, start + size);
                if op < 2 {
                    let mut displaced_bytes = 0;
                    map.insert(range, value, |piece, old| {
                        displaced_bytes += piece.size_bytes();
                        for byte in piece.start..piece.end {
                            assert_eq!(model[byte as usize], Some(old));
                        }
                    });
                    let expected = (range.start..range.end).filter(|b| model[*b as usize].is_some()).count();
                    prop_assert_eq!(displaced_bytes, expected as u64);
                    for byte in range.start..range.end { model[byte as usize] = Some(value); }
                } else {
                    map.remove_where(range, |v| v % 2 == 0, |_, _| {});
                    for byte in range.start..range.end {
                        if model[byte as usize].is_some_and(|v| v % 2 == 0) { model[byte as usize] = None; }
                    }
                }
                let mut seen = [None::<u8>; 80];
                for (piece, value) in map.iter() {
                    for byte in piece.start..piece.end { seen[byte as usize] = Some(value); }
                }
                prop_assert_eq!(seen, model);
                prop_assert_eq!(map.total_bytes(), model.iter().filter(|b| b.is_some()).count() as u64);
            }
        }
    }
}
