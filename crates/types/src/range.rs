//! Half-open byte ranges `[start, end)`, the unit of every extent map.

use std::fmt;

/// A half-open range of byte offsets `[start, end)` within a volume or log.
///
/// Deserializing checks `start <= end`: a range from a file or a peer that ends
/// before it starts is refused there, not turned into a huge size later.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "UncheckedRange")]
pub struct ByteRange {
    pub start: u64,
    pub end: u64,
}

/// A range as read, before its bounds are checked.
#[derive(serde::Deserialize)]
struct UncheckedRange {
    start: u64,
    end: u64,
}

impl TryFrom<UncheckedRange> for ByteRange {
    type Error = String;

    fn try_from(raw: UncheckedRange) -> Result<ByteRange, String> {
        if raw.start <= raw.end {
            Ok(ByteRange { start: raw.start, end: raw.end })
        } else {
            Err(format!("byte range starts at {} after its end {}", raw.start, raw.end))
        }
    }
}

impl ByteRange {
    /// A range from `start` of `size_bytes`; panics if the end overflows `u64`,
    /// which a parser must have rejected before.
    pub fn new(start: u64, size_bytes: u64) -> ByteRange {
        let end = start.checked_add(size_bytes);
        assert!(end.is_some(), "range {start}+{size_bytes} overflows u64");
        ByteRange { start, end: end.unwrap_or(u64::MAX) }
    }

    pub fn from_bounds(start: u64, end: u64) -> ByteRange {
        assert!(start <= end, "range start {start} after end {end}");
        ByteRange { start, end }
    }

    pub fn size_bytes(self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(self) -> bool {
        self.start == self.end
    }

    pub fn overlaps(self, other: ByteRange) -> bool {
        self.start < other.end && other.start < self.end
    }

    pub fn contains(self, other: ByteRange) -> bool {
        self.start <= other.start && other.end <= self.end
    }

    /// The common part of two ranges, or `None` when they do not overlap.
    pub fn intersection(self, other: ByteRange) -> Option<ByteRange> {
        let start = self.start.max(other.start);
        let end = self.end.min(other.end);
        (start < end).then_some(ByteRange { start, end })
    }
}

/// Joins ranges, sorted by start and not overlapping, that touch into one.
pub fn join_touching(ranges: Vec<ByteRange>) -> Vec<ByteRange> {
    let mut joined: Vec<ByteRange> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match joined.last_mut() {
            Some(last) if last.end == range.start => last.end = range.end,
            _ => joined.push(range),
        }
    }
    joined
}

impl fmt::Debug for ByteRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {})", self.start, self.end)
    }
}

impl fmt::Display for ByteRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_read_with_its_end_before_its_start_is_refused() {
        let good: ByteRange = serde_json::from_str(r#"{"start":4,"end":9}"#).unwrap();
        assert_eq!(good, ByteRange::from_bounds(4, 9));
        let bad = serde_json::from_str::<ByteRange>(r#"{"start":9,"end":4}"#).unwrap_err();
        assert!(bad.to_string().contains("starts at 9 after its end 4"), "{bad}");
    }

    #[test]
    fn intersection_and_overlap_agree() {
        // Goal: the overlap predicate and the intersection never disagree, including at
        // touching ends (half-open ranges that touch do not overlap).
        let a = ByteRange::from_bounds(10, 20);
        for (s, e) in [(0, 10), (0, 11), (19, 30), (20, 30), (12, 15), (0, 40)] {
            let b = ByteRange::from_bounds(s, e);
            assert_eq!(a.overlaps(b), a.intersection(b).is_some(), "{a} vs {b}");
        }
        assert_eq!(
            a.intersection(ByteRange::from_bounds(15, 40)),
            Some(ByteRange::from_bounds(15, 20))
        );
        assert!(a.contains(ByteRange::from_bounds(12, 20)));
        assert!(!a.contains(ByteRange::from_bounds(12, 21)));
    }
}
