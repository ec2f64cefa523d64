//! The event queue of every simulation: events in virtual-time order, ties broken by
//! the order in which they were scheduled, so every run is deterministic.
//!
//! The heap holds 16-byte keys, not events: a key is the event's time and its
//! scheduling sequence packed with the slot of the event in a slab. A pop then
//! moves small keys down a heap that mostly stays in cache and reads its event once.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use somnus_types::VirtualInstant;

/// Bits of a key's order that hold the event's slot; the sequence takes the rest.
const SLOT_BITS: u32 = 32;

pub struct EventQueue<E> {
    now: VirtualInstant,
    /// The next scheduling sequence; renumbered from 0 when it reaches `sequence_limit`.
    sequence: u64,
    sequence_limit: u64,
    heap: BinaryHeap<Reverse<Key>>,
    /// Each pending event, at its key's slot; `free` lists the slots taken since.
    slots: Vec<E>,
    free: Vec<u32>,
}

/// When an event is due: its time, then its sequence (high bits of `order`). The slot
/// (low bits) never decides, since no two pending events share a sequence.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Key {
    at: VirtualInstant,
    order: u64,
}

impl Key {
    fn packed(self) -> u128 {
        u128::from(self.at.as_nanos()) << 64 | u128::from(self.order)
    }

    fn slot(self) -> usize {
        (self.order & ((1 << SLOT_BITS) - 1)) as usize
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.packed().cmp(&other.packed())
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            now: VirtualInstant::ZERO,
            sequence: 0,
            sequence_limit: 1 << (64 - SLOT_BITS),
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<E: Copy> EventQueue<E> {
    pub fn new() -> EventQueue<E> {
        EventQueue::default()
    }

    /// The time of the last event taken (or that the clock was moved to).
    pub fn now(&self) -> VirtualInstant {
        self.now
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    pub fn schedule(&mut self, at: VirtualInstant, event: E) {
        assert!(at >= self.now, "event scheduled in the past: {at:?} < {:?}", self.now);
        if self.sequence == self.sequence_limit {
            self.renumber();
        }
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = event;
                u64::from(slot)
            }
            None => {
                self.slots.push(event);
                (self.slots.len() - 1) as u64
            }
        };
        assert!(slot < 1 << SLOT_BITS, "more than 2^{SLOT_BITS} events pending");
        self.heap.push(Reverse(Key { at, order: self.sequence << SLOT_BITS | slot }));
        self.sequence += 1;
    }

    /// Gives the pending events sequences 0, 1, ... in their order, so the sequence
    /// never runs out of bits however long a run is.
    fn renumber(&mut self) {
        let mut keys: Vec<Key> = self.heap.drain().map(|Reverse(key)| key).collect();
        keys.sort_unstable();
        for (sequence, key) in keys.iter_mut().enumerate() {
            key.order = (sequence as u64) << SLOT_BITS | key.slot() as u64;
        }
        self.sequence = keys.len() as u64;
        self.heap = keys.into_iter().map(Reverse).collect();
    }

    /// The time of the next event.
    pub fn peek_time(&self) -> Option<VirtualInstant> {
        self.heap.peek().map(|Reverse(key)| key.at)
    }

    /// Takes the next event if it is due at or before `until`, moving the clock to it.
    pub fn pop_until(&mut self, until: VirtualInstant) -> Option<(VirtualInstant, E)> {
        let &Reverse(key) = self.heap.peek()?;
        if key.at > until {
            return None;
        }
        self.heap.pop();
        self.now = key.at;
        let slot = key.slot();
        self.free.push(slot as u32);
        Some((key.at, self.slots[slot]))
    }

    /// Moves the clock forward to `at` with no event (the end of a window).
    pub fn advance_to(&mut self, at: VirtualInstant) {
        self.now = self.now.max(at);
    }
}

#[cfg(test)]
mod tests {
    use somnus_types::VirtualDuration;

    use super::*;

    fn at(nanos: u64) -> VirtualInstant {
        VirtualInstant::ZERO.saturating_add(VirtualDuration::from_nanos(nanos))
    }

    fn drain(queue: &mut EventQueue<u32>) -> Vec<(u64, u32)> {
        let mut taken = Vec::new();
        while let Some((when, event)) = queue.pop_until(VirtualInstant::MAX) {
            taken.push((when.as_nanos(), event));
        }
        taken
    }

    #[test]
    fn events_come_in_time_order_and_ties_in_scheduling_order() {
        let mut queue = EventQueue::new();
        for (when, event) in [(5, 1), (3, 2), (5, 3), (1, 4), (3, 5), (5, 6)] {
            queue.schedule(at(when), event);
        }
        assert_eq!(queue.pop_until(at(0)), None, "nothing due yet");
        assert_eq!(drain(&mut queue), [(1, 4), (3, 2), (3, 5), (5, 1), (5, 3), (5, 6)]);
        assert_eq!(queue.now(), at(5));
    }

    #[test]
    fn a_renumbered_sequence_keeps_the_order_of_ties() {
        let mut queue = EventQueue::new();
        queue.sequence_limit = 4;
        for event in 0..10u32 {
            queue.schedule(at(u64::from(event % 3)), event);
        }
        let first: Vec<u32> = (0..3).map(|_| queue.pop_until(at(10)).unwrap().1).collect();
        assert_eq!(first, [0, 3, 6], "time 0 first, in scheduling order");
        // The freed slots are reused by later events, across more renumberings.
        for event in 10..20u32 {
            queue.schedule(at(2 + u64::from(event % 3)), event);
        }
        assert!(queue.slots.len() < 20, "slots reused");
        let rest = drain(&mut queue);
        assert_eq!(rest.len(), 17);
        let mut expected = rest.clone();
        expected.sort_by_key(|&(when, event)| (when, event));
        assert_eq!(rest, expected, "time order, ties in scheduling order");
    }

    /// Random schedules and takes, with renumberings, in the order a sorted list of
    /// (time, scheduling count) gives: the reference a broken heap departs from.
    #[test]
    fn random_interleavings_come_in_the_order_of_a_sorted_reference() {
        use rand::{Rng, SeedableRng};

        let mut rng = rand_pcg::Pcg64::seed_from_u64(48);
        let mut next = move |bound: u64| rng.random_range(0..bound);
        let mut queue = EventQueue::new();
        queue.sequence_limit = 64;
        let mut reference: Vec<(u64, u32)> = Vec::new();
        let mut count = 0u32;
        for _ in 0..20_000 {
            if next(3) > 0 {
                let (ties, scale) = (next(4), next(40));
                let when = queue.now().as_nanos() + ties * next(1 << scale);
                queue.schedule(at(when), count);
                reference.push((when, count));
                count += 1;
            } else {
                let until = queue.now().as_nanos() + next(1 << 20);
                reference.sort_unstable();
                let due = reference.partition_point(|&(when, _)| when <= until);
                let expected: Vec<(u64, u32)> = reference.drain(..due.min(3)).collect();
                for (when, event) in expected {
                    assert_eq!(queue.pop_until(at(until)), Some((at(when), event)));
                }
                if due < 3 {
                    assert_eq!(queue.pop_until(at(until)), None);
                }
            }
            assert_eq!(queue.len(), reference.len());
        }
        reference.sort_unstable();
        assert_eq!(drain(&mut queue), reference);
    }
}
