//! The painting of docs/format/log.md ("Meaning"), computed plainly: the range is cut
//! at every boundary of the records that touch it, and each elementary piece goes to
//! the record that wins it (highest version; a marker wins a tie with data of its
//! version; then a record outside the segment being collected; then the older record).
//! Simpler and slower than the engine's index, on purpose: the two are compared.

use somnus_types::{ByteRange, Version};

use super::{RecordId, SegmentNo};

/// A record as the painting sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub(crate) id: RecordId,
    pub(crate) marker: bool,
    pub(crate) range: ByteRange,
    pub(crate) version: Version,
    pub(crate) segment: SegmentNo,
}

/// A piece of the painted range and the record that wins it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Won {
    pub(crate) range: ByteRange,
    pub(crate) winner: Candidate,
}

/// Whether `a` beats `b` where both cover a byte.
fn beats(a: &Candidate, b: &Candidate, avoid: Option<SegmentNo>) -> bool {
    let key =
        |c: &Candidate| (c.version, c.marker, Some(c.segment) != avoid, std::cmp::Reverse(c.id));
    key(a) > key(b)
}

/// Paints `range` with `candidates` (records that overlap it and no delete-all hides):
/// the won pieces in order (adjacent pieces of one winner joined), and the bytes no
/// record covers.
pub(crate) fn paint(
    candidates: &[Candidate],
    range: ByteRange,
    avoid: Option<SegmentNo>,
) -> (Vec<Won>, Vec<ByteRange>) {
    let mut cuts: Vec<u64> = vec![range.start, range.end];
    for candidate in candidates {
        for at in [candidate.range.start, candidate.range.end] {
            if range.start < at && at < range.end {
                cuts.push(at);
            }
        }
    }
    cuts.sort_unstable();
    cuts.dedup();
    let mut won: Vec<Won> = Vec::new();
    let mut missing: Vec<ByteRange> = Vec::new();
    for pair in cuts.windows(2) {
        let piece = ByteRange::from_bounds(pair[0], pair[1]);
        let winner = candidates.iter().filter(|c| c.range.contains(piece)).fold(
            None::<&Candidate>,
            |best, c| match best {
                Some(b) if !beats(c, b, avoid) => Some(b),
                _ => Some(c),
            },
        );
        match winner {
            Some(winner) => match won.last_mut() {
                Some(last) if last.winner.id == winner.id && last.range.end == piece.start => {
                    last.range.end = piece.end;
                }
                _ => won.push(Won { range: piece, winner: *winner }),
            },
            None => match missing.last_mut() {
                Some(last) if last.end == piece.start => last.end = piece.end,
                _ => missing.push(piece),
            },
        }
    }
    (won, missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: u64, marker: bool, start: u64, end: u64, version: u64) -> Candidate {
        Candidate {
            id: RecordId(id),
            marker,
            range: ByteRange::from_bounds(start, end),
            version: Version(version),
            segment: SegmentNo(1),
        }
    }

    #[test]
    fn the_highest_version_wins_and_a_marker_hides_its_version_and_older() {
        // Goal: the rules of docs/format/log.md on a hand-made case: data v1 [0,100),
        // data v3 [50,150), marker v2 [0,60): [0,50) hidden (marker beats v1), [50,150)
        // v3, and [150,200) not covered.
        let candidates = [c(1, false, 0, 100, 1), c(2, false, 50, 150, 3), c(3, true, 0, 60, 2)];
        let (won, missing) = paint(&candidates, ByteRange::from_bounds(0, 200), None);
        let shown: Vec<(u64, u64, u64, bool)> = won
            .iter()
            .map(|w| (w.range.start, w.range.end, w.winner.version.0, w.winner.marker))
            .collect();
        assert_eq!(shown, vec![(0, 50, 2, true), (50, 150, 3, false)]);
        assert_eq!(missing, vec![ByteRange::from_bounds(150, 200)]);
        let tie = [c(1, false, 0, 10, 4), c(2, true, 0, 10, 4)];
        assert!(paint(&tie, ByteRange::new(0, 10), None).0[0].winner.marker, "marker wins a tie");
    }
}
