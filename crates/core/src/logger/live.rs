//! Visible data bytes per segment, kept as records come and go, and the sealed
//! segments ordered by their live share: collection looks for the segments of fewest
//! live bytes after every segment's worth of writes, and a logger holding a day of
//! writes has thousands of segments. Walking them all at every step of a collection
//! was an eighth of a geared replay; the order kept here gives the next ones at once.
//! A segment's place in it is brought up to date when collection asks, not at each
//! of the many changes of its live bytes between two collections.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use super::SegmentNo;

/// A sealed segment's live bytes and size, ordered by live share (live / size,
/// compared exactly by cross-multiplying), the segment breaking ties: the order in
/// which collection looks at segments (the engine's, `logstore`'s).
#[derive(Clone, Copy, Debug)]
pub(super) struct Share {
    pub(super) live: u64,
    /// The segment's size, at least 1.
    pub(super) size: u64,
    pub(super) segment: SegmentNo,
}

impl Share {
    /// Whether the live share is at most `percent` % of the size.
    pub(super) fn at_most(&self, percent: u8) -> bool {
        u128::from(self.live) * 100 <= u128::from(self.size) * u128::from(percent)
    }
}

impl Ord for Share {
    fn cmp(&self, other: &Share) -> Ordering {
        let mine = u128::from(self.live) * u128::from(other.size);
        let theirs = u128::from(other.live) * u128::from(self.size);
        (mine, self.segment).cmp(&(theirs, other.segment))
    }
}

impl PartialOrd for Share {
    fn partial_cmp(&self, other: &Share) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Share {
    fn eq(&self, other: &Share) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Share {}

#[derive(Clone, Copy, Debug, Default)]
struct OfSegment {
    live: u64,
    /// The segment's size once it is sealed (no longer the head): from then on it is
    /// in the order by share.
    sealed: Option<u64>,
    /// Where it is in the order by share now, and whether that is out of date (it is
    /// then among the segments to move).
    placed: Option<Share>,
    moved: bool,
}

impl OfSegment {
    fn share(&self, segment: SegmentNo) -> Option<Share> {
        let size = self.sealed?.max(1);
        Some(Share { live: self.live, size, segment })
    }
}

#[derive(Clone, Debug, Default)]
pub(super) struct Live {
    by_segment: BTreeMap<SegmentNo, OfSegment>,
    total: u64,
    by_share: BTreeSet<Share>,
    /// Sealed segments whose place in `by_share` is out of date.
    to_move: Vec<SegmentNo>,
}

impl Live {
    /// Adds (`add`) or takes `bytes` of `segment`'s live bytes.
    pub(super) fn credit(&mut self, segment: SegmentNo, bytes: u64, add: bool) {
        let of = self.by_segment.entry(segment).or_default();
        if of.sealed.is_some() && !of.moved {
            of.moved = true;
            self.to_move.push(segment);
        }
        if add {
            of.live += bytes;
            self.total += bytes;
        } else {
            // A bug in the painting's upkeep, never input: the model's own arithmetic.
            assert!(of.live >= bytes, "live bytes taken that were never added");
            of.live -= bytes;
            self.total -= bytes;
        }
    }

    /// `segment` is no longer the head: its size is final.
    pub(super) fn seal(&mut self, segment: SegmentNo, size: u64) {
        let of = self.by_segment.entry(segment).or_default();
        of.sealed = Some(size);
        if !of.moved {
            of.moved = true;
            self.to_move.push(segment);
        }
    }

    /// `segment` was collected: its live bytes (which should be none).
    pub(super) fn remove(&mut self, segment: SegmentNo) -> u64 {
        let Some(of) = self.by_segment.remove(&segment) else { return 0 };
        if let Some(placed) = of.placed {
            self.by_share.remove(&placed);
        }
        of.live
    }

    pub(super) fn of(&self, segment: SegmentNo) -> u64 {
        self.by_segment.get(&segment).map_or(0, |of| of.live)
    }

    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// The segments holding live bytes, in order, with their live bytes.
    #[cfg(any(test, feature = "expensive-checks"))]
    pub(super) fn nonzero(&self) -> BTreeMap<SegmentNo, u64> {
        let live = self.by_segment.iter().filter(|(_, of)| of.live > 0);
        live.map(|(&segment, of)| (segment, of.live)).collect()
    }

    /// The sealed segments whose live share is at most `percent` %, fewest live first.
    pub(super) fn fewest_live(&mut self, percent: u8) -> impl Iterator<Item = Share> + '_ {
        self.move_changed();
        self.by_share.iter().copied().take_while(move |share| share.at_most(percent))
    }

    /// Brings the place of every segment changed since in the order by share.
    fn move_changed(&mut self) {
        for segment in std::mem::take(&mut self.to_move) {
            // Collected since: out of the order already.
            let Some(of) = self.by_segment.get_mut(&segment) else { continue };
            if let Some(placed) = of.placed.take() {
                self.by_share.remove(&placed);
            }
            of.placed = of.share(segment);
            of.moved = false;
            if let Some(share) = of.placed {
                self.by_share.insert(share);
            }
        }
    }

    /// The order by share holds every sealed segment once, with its live bytes and
    /// size now, unless it is among those to move.
    #[cfg(any(test, feature = "expensive-checks"))]
    pub(super) fn assert_ordered(&self, sealed: &BTreeMap<SegmentNo, u64>) {
        for (&segment, &size) in sealed {
            let of = self.by_segment.get(&segment).copied().unwrap_or_default();
            assert_eq!(of.sealed, Some(size), "{segment:?} sealed at another size");
            if of.moved {
                assert!(self.to_move.contains(&segment), "{segment:?} moved, not to move");
                continue;
            }
            let placed = of.placed.map(|p| (p.segment, p.live, p.size));
            let now = of.share(segment).map(|p| (p.segment, p.live, p.size));
            assert_eq!(placed, now, "the order of segments by live share drifted");
            assert!(of.placed.is_some_and(|p| self.by_share.contains(&p)), "{segment:?} unordered");
        }
        let placed = self.by_segment.values().filter(|of| of.placed.is_some()).count();
        assert_eq!(self.by_share.len(), placed, "the order by share holds what is not placed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealed(sizes: &[(u64, u64)]) -> BTreeMap<SegmentNo, u64> {
        sizes.iter().map(|&(segment, size)| (SegmentNo(segment), size)).collect()
    }

    #[test]
    fn sealed_segments_come_fewest_live_first_as_their_bytes_change() {
        // Goal: the order follows every credit, ties go to the lower segment, the head
        // (not sealed) is never offered, and a collected segment leaves it.
        let mut live = Live::default();
        for (segment, bytes) in [(1, 300), (2, 100), (3, 100), (4, 50)] {
            live.credit(SegmentNo(segment), bytes, true);
        }
        live.seal(SegmentNo(1), 1000);
        live.seal(SegmentNo(2), 1000);
        live.seal(SegmentNo(3), 200);
        let order = |live: &mut Live, percent| {
            live.fewest_live(percent).map(|share| share.segment.0).collect::<Vec<u64>>()
        };
        assert_eq!(order(&mut live, 100), [2, 1, 3]);
        assert_eq!(order(&mut live, 30), [2, 1]);
        live.credit(SegmentNo(1), 200, false);
        assert_eq!(order(&mut live, 100), [1, 2, 3]);
        live.credit(SegmentNo(2), 100, false);
        live.credit(SegmentNo(1), 100, false);
        assert_eq!(order(&mut live, 0), [1, 2]);
        assert_eq!(live.remove(SegmentNo(1)), 0);
        assert_eq!(order(&mut live, 100), [2, 3]);
        assert_eq!(live.total(), 150);
        live.assert_ordered(&sealed(&[(2, 1000), (3, 200)]));
        live.move_changed();
        live.assert_ordered(&sealed(&[(2, 1000), (3, 200)]));
    }

    #[test]
    #[should_panic(expected = "drifted")]
    fn an_order_left_behind_by_a_credit_is_caught() {
        // Goal: the check of the order can fail: a segment whose live bytes changed
        // while its place in the order did not is found.
        let mut live = Live::default();
        live.credit(SegmentNo(1), 10, true);
        live.seal(SegmentNo(1), 100);
        live.move_changed();
        let Some(of) = live.by_segment.get_mut(&SegmentNo(1)) else { unreachable!() };
        of.live = 20;
        live.assert_ordered(&sealed(&[(1, 100)]));
    }
}
