//! The event queue of every simulation: events in virtual-time order, ties broken by
//! the order in which they were scheduled, so every run is deterministic.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use somnus_types::VirtualInstant;

pub struct EventQueue<E: Ord> {
    now: VirtualInstant,
    sequence: u64,
    heap: BinaryHeap<Reverse<(VirtualInstant, u64, E)>>,
}

impl<E: Ord> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue { now: VirtualInstant::ZERO, sequence: 0, heap: BinaryHeap::new() }
    }
}

impl<E: Ord + Copy> EventQueue<E> {
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
        self.sequence += 1;
        self.heap.push(Reverse((at, self.sequence, event)));
    }

    /// The time of the next event.
    pub fn peek_time(&self) -> Option<VirtualInstant> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Takes the next event if it is due at or before `until`, moving the clock to it.
    pub fn pop_until(&mut self, until: VirtualInstant) -> Option<(VirtualInstant, E)> {
        let &Reverse((at, _, event)) = self.heap.peek()?;
        if at > until {
            return None;
        }
        self.heap.pop();
        self.now = at;
        Some((at, event))
    }

    /// Moves the clock forward to `at` with no event (the end of a window).
    pub fn advance_to(&mut self, at: VirtualInstant) {
        self.now = self.now.max(at);
    }
}
