//! Admission of a volume's requests: requests that access overlapping block ranges are
//! served one after the other, in arrival order, as the Write Off-Loading testbed
//! replayed its traces (004 section 4.1). Two overlapping writes are never in service
//! at once, so their completions cannot come back in the wrong order and leave an
//! older version mapped over a newer one (O5).
//!
//! A new request waits for the pending requests it overlaps. While few requests are
//! pending (the common case) they sit in a small vector scanned linearly; past
//! [`FEW_MAX`] they move to an extent map of the latest pending request touching each
//! byte, so a burst of thousands queued behind a spin-up costs O(log n) per request.

use somnus_types::ByteRange;

use crate::extent::ExtentMap;

/// Pending requests held in the linear vector before switching to the extent map.
const FEW_MAX: usize = 128;

#[derive(Debug, Default)]
pub(crate) struct PendingRanges {
    /// All pending requests in arrival order, while at most `FEW_MAX`.
    few: Vec<(ByteRange, u64)>,
    /// The latest pending request touching each byte, once more were pending.
    many: ExtentMap<u64>,
    in_many: bool,
    count: usize,
}

impl PendingRanges {
    /// Registers request `id` over `range`, pushing onto `blockers` the ids of the
    /// pending requests it must wait for (each once).
    pub(crate) fn add(&mut self, range: ByteRange, id: u64, blockers: &mut Vec<u64>) {
        assert!(!range.is_empty(), "empty request range");
        if !self.in_many && self.few.len() >= FEW_MAX {
            for &(earlier_range, earlier) in &self.few {
                self.many.insert(earlier_range, earlier, |_, _| {});
            }
            self.few.clear();
            self.in_many = true;
        }
        self.count += 1;
        if self.in_many {
            self.many.insert(range, id, |_, earlier| {
                if !blockers.contains(&earlier) {
                    blockers.push(earlier);
                }
            });
            return;
        }
        blockers.extend(
            self.few.iter().filter(|(r, _)| r.overlaps(range)).map(|(_, earlier)| *earlier),
        );
        self.few.push((range, id));
    }

    /// Forgets request `id`, done.
    pub(crate) fn remove(&mut self, range: ByteRange, id: u64) {
        assert!(self.count > 0, "removing request {id} from an empty volume");
        self.count -= 1;
        if self.in_many {
            self.many.remove_where(range, |toucher| toucher == id, |_, _| {});
            if self.count == 0 {
                assert!(self.many.is_empty(), "requests left behind in the extent map");
                self.in_many = false;
            }
            return;
        }
        let Some(position) = self.few.iter().position(|(_, pending)| *pending == id) else {
            panic!("request {id} is not pending");
        };
        // Keep arrival order: the switch to the extent map replays the vector in order,
        // and an older request must never overwrite a newer one as the latest toucher.
        self.few.remove(position);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_to_the_extent_map_keeps_arrival_order() {
        // Goal: after completions reorder nothing, a request arriving after the switch
        // waits for the newest overlapping request too. Method: X, A(r), fillers, B(r)
        // (waits for A); X completes; arrivals force the switch; C(r) must wait for B.
        let mut pending = PendingRanges::default();
        let mut blockers = Vec::new();
        let r = ByteRange::new(1 << 30, 4096);
        pending.add(ByteRange::new(0, 512), 0, &mut blockers);
        pending.add(r, 1, &mut blockers);
        for id in 2..(FEW_MAX as u64 - 1) {
            pending.add(ByteRange::new(id * 4096, 512), id, &mut blockers);
        }
        blockers.clear();
        pending.add(r, 500, &mut blockers);
        assert_eq!(blockers, vec![1]);
        pending.remove(ByteRange::new(0, 512), 0);
        for id in 600..603u64 {
            pending.add(ByteRange::new(id * 4096, 512), id, &mut blockers);
        }
        assert!(pending.in_many);
        blockers.clear();
        pending.add(r, 700, &mut blockers);
        assert!(blockers.contains(&500), "C must wait for B: {blockers:?}");
    }

    #[test]
    fn waits_for_overlapping_requests_only_in_both_modes() {
        // Goal: in the vector and in the extent-map mode alike, a request waits for the
        // pending requests it overlaps and for no other, and the structure returns to
        // the vector once drained. Method: 200 disjoint requests (forcing the switch),
        // then one overlapping two of them.
        let mut pending = PendingRanges::default();
        let mut blockers = Vec::new();
        for id in 0..200u64 {
            pending.add(ByteRange::new(id * 4096, 4096), id, &mut blockers);
            assert!(blockers.is_empty(), "disjoint request {id} blocked by {blockers:?}");
        }
        assert!(pending.in_many);
        pending.add(ByteRange::new(4096 + 100, 4096), 1000, &mut blockers);
        assert_eq!(blockers, vec![1, 2]);
        for id in 0..200u64 {
            pending.remove(ByteRange::new(id * 4096, 4096), id);
        }
        pending.remove(ByteRange::new(4096 + 100, 4096), 1000);
        assert!(!pending.in_many);
        blockers.clear();
        pending.add(ByteRange::new(0, 512), 7, &mut blockers);
        pending.add(ByteRange::new(256, 512), 8, &mut blockers);
        assert_eq!(blockers, vec![7]);
    }
}
