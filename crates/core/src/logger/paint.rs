//! The painting of docs/format/log.md ("Meaning"): the range is cut at every boundary
//! of the records that touch it, and each elementary piece goes to the record that wins
//! it (highest version; a marker wins a tie with data of its version; then a record
//! outside the segment being collected; then the older record). A sweep over the cuts
//! keeps the records covering the current piece ordered by those rules, so a painting
//! of n records costs O(n log n): a volume's whole log is painted at every collection.
//! It shares nothing with the engine's index, on purpose: the two are compared.

use std::cmp::Reverse;
use std::collections::BTreeSet;

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

/// The order of the painting rules: where two records cover a byte, the greater wins.
/// Record ids are unique, so no two candidates tie.
pub(crate) type Rank = (Version, bool, bool, Reverse<RecordId>);

pub(crate) fn rank(candidate: &Candidate, avoid: Option<SegmentNo>) -> Rank {
    (candidate.version, candidate.marker, Some(candidate.segment) != avoid, Reverse(candidate.id))
}

/// Paints `range` with `candidates` (records that overlap it and no delete-all hides):
/// the won pieces in order (adjacent pieces of one winner joined), and the bytes no
/// record covers.
pub(crate) fn paint(
    candidates: &[Candidate],
    range: ByteRange,
    avoid: Option<SegmentNo>,
) -> (Vec<Won>, Vec<ByteRange>) {
    // Each candidate clipped to the range, by start; and the same, by end.
    let mut by_start: Vec<(ByteRange, usize)> = candidates
        .iter()
        .enumerate()
        .filter_map(|(index, c)| c.range.intersection(range).map(|clipped| (clipped, index)))
        .collect();
    by_start.sort_unstable_by_key(|&(clipped, index)| (clipped.start, index));
    let mut by_end = by_start.clone();
    by_end.sort_unstable_by_key(|&(clipped, index)| (clipped.end, index));
    let mut cuts: Vec<u64> = vec![range.start, range.end];
    cuts.extend(by_start.iter().flat_map(|(clipped, _)| [clipped.start, clipped.end]));
    cuts.sort_unstable();
    cuts.dedup();

    let mut covering: BTreeSet<(Rank, usize)> = BTreeSet::new();
    let (mut started, mut ended) = (0, 0);
    let mut won: Vec<Won> = Vec::new();
    let mut missing: Vec<ByteRange> = Vec::new();
    for pair in cuts.windows(2) {
        let at = pair[0];
        while let Some(&(clipped, index)) = by_end.get(ended).filter(|(c, _)| c.end <= at) {
            debug_assert!(clipped.end == at, "every end is a cut");
            covering.remove(&(rank(&candidates[index], avoid), index));
            ended += 1;
        }
        while let Some(&(_, index)) = by_start.get(started).filter(|(c, _)| c.start <= at) {
            covering.insert((rank(&candidates[index], avoid), index));
            started += 1;
        }
        let piece = ByteRange::from_bounds(at, pair[1]);
        let winner = covering.last().map(|&(_, index)| &candidates[index]);
        push_piece(&mut won, &mut missing, piece, winner);
    }
    (won, missing)
}

/// Adds the next elementary piece to the painting, merged with the previous one when it
/// goes the same way.
fn push_piece(
    won: &mut Vec<Won>,
    missing: &mut Vec<ByteRange>,
    piece: ByteRange,
    winner: Option<&Candidate>,
) {
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

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_pcg::Pcg64;

    use super::*;

    /// The painting by its definition: each elementary piece goes to the greatest of the
    /// candidates containing it, found by looking at all of them. Quadratic; the oracle.
    fn paint_plainly(
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
            let winner = candidates
                .iter()
                .filter(|c| c.range.contains(piece))
                .max_by_key(|c| rank(c, avoid));
            push_piece(&mut won, &mut missing, piece, winner);
        }
        (won, missing)
    }

    #[test]
    fn the_sweep_paints_as_the_definition_does() {
        // Goal: the O(n log n) sweep and the plain definition agree on random records
        // (crowded into a small space so that they overlap, share boundaries and tie on
        // versions), on random ranges and with or without a segment to avoid.
        let mut rng = Pcg64::seed_from_u64(7);
        for _ in 0..3000 {
            let count = rng.random_range(0..12);
            let candidates: Vec<Candidate> = (0..count)
                .map(|id| {
                    let start = rng.random_range(0..40);
                    let end = rng.random_range(start + 1..=48);
                    Candidate {
                        id: RecordId(id),
                        marker: rng.random_bool(0.3),
                        range: ByteRange::from_bounds(start, end),
                        version: Version(rng.random_range(1..4)),
                        segment: SegmentNo(rng.random_range(1..3)),
                    }
                })
                .collect();
            let start = rng.random_range(0..44);
            let range = ByteRange::from_bounds(start, rng.random_range(start + 1..=50));
            let avoid = rng.random_bool(0.5).then_some(SegmentNo(1));
            assert_eq!(
                paint(&candidates, range, avoid),
                paint_plainly(&candidates, range, avoid),
                "{candidates:?} over {range:?} avoiding {avoid:?}"
            );
        }
    }

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
