//! When the MDS's timer must fire next: each group's lease end (plus the margin),
//! each serving server's silence deadline and each waking server's next wake packet,
//! kept in order as they change. A scan of
//! every group and server after every MDS event was a sixteenth of a 300-server
//! simulation's instructions (`somnus bench cluster`); every change goes through
//! [`Deadlines::set`], and debug builds check the whole index against a scan after
//! every event.

use std::collections::BTreeSet;

use somnus_types::VirtualInstant;

/// What a deadline is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Due {
    /// A group's lease (by index).
    Lease(u32),
    /// A server's silence (by index).
    Silence(u32),
    /// A waking server's next wake packet (by index).
    WakeResend(u32),
}

#[derive(Clone, Debug, Default)]
pub(super) struct Deadlines {
    ordered: BTreeSet<(VirtualInstant, Due)>,
    leases: Vec<Option<VirtualInstant>>,
    silences: Vec<Option<VirtualInstant>>,
    wake_resends: Vec<Option<VirtualInstant>>,
}

impl Deadlines {
    /// Sets (or clears) the deadline of `due`.
    pub(super) fn set(&mut self, due: Due, at: Option<VirtualInstant>) {
        let (slots, index) = match due {
            Due::Lease(index) => (&mut self.leases, index as usize),
            Due::Silence(index) => (&mut self.silences, index as usize),
            Due::WakeResend(index) => (&mut self.wake_resends, index as usize),
        };
        if slots.len() <= index {
            slots.resize(index + 1, None);
        }
        let old = std::mem::replace(&mut slots[index], at);
        if old == at {
            return;
        }
        if let Some(old) = old {
            self.ordered.remove(&(old, due));
        }
        if let Some(at) = at {
            self.ordered.insert((at, due));
        }
    }

    /// Whether the index holds exactly these deadlines (every group's lease, then
    /// every server's silence and its wake's resend, by index): the check debug builds
    /// make after every event.
    pub(super) fn agree(
        &self,
        leases: impl Iterator<Item = Option<VirtualInstant>>,
        servers: impl Iterator<Item = (Option<VirtualInstant>, Option<VirtualInstant>)>,
    ) -> bool {
        let mut expected = Deadlines::default();
        for (index, at) in (0..).zip(leases) {
            expected.set(Due::Lease(index), at);
        }
        for (index, (silence, wake_resend)) in (0..).zip(servers) {
            expected.set(Due::Silence(index), silence);
            expected.set(Due::WakeResend(index), wake_resend);
        }
        expected.ordered == self.ordered
    }

    /// The earliest deadline.
    pub(super) fn first(&self) -> Option<VirtualInstant> {
        self.ordered.first().map(|(at, _)| *at)
    }
}

#[cfg(test)]
mod tests {
    use somnus_types::VirtualDuration;

    use super::*;

    fn at(secs: u64) -> Option<VirtualInstant> {
        Some(VirtualInstant::ZERO.saturating_add(VirtualDuration::from_secs(secs)))
    }

    #[test]
    fn the_first_deadline_follows_every_change() {
        let mut deadlines = Deadlines::default();
        assert_eq!(deadlines.first(), None);
        deadlines.set(Due::Lease(3), at(10));
        deadlines.set(Due::Silence(0), at(7));
        assert_eq!(deadlines.first(), at(7));
        // Moved later: the old entry goes.
        deadlines.set(Due::Silence(0), at(12));
        assert_eq!(deadlines.first(), at(10));
        deadlines.set(Due::Lease(3), None);
        assert_eq!(deadlines.first(), at(12));
        // A lease and a silence at the same instant are two entries.
        deadlines.set(Due::Lease(0), at(12));
        deadlines.set(Due::Silence(0), None);
        assert_eq!(deadlines.first(), at(12));
        deadlines.set(Due::Lease(0), None);
        assert_eq!(deadlines.first(), None);
    }

    #[test]
    fn a_deadline_not_set_again_after_a_change_is_caught() {
        let mut deadlines = Deadlines::default();
        deadlines.set(Due::Lease(1), at(10));
        deadlines.set(Due::Silence(0), at(3));
        let leases = || [None, at(10)].into_iter();
        assert!(deadlines.agree(leases(), [(at(3), None)].into_iter()));
        // Not the earliest, and still caught.
        assert!(!deadlines.agree(leases(), [(at(4), None)].into_iter()));
        assert!(!deadlines.agree([None, None].into_iter(), [(at(3), None)].into_iter()));
        assert!(!deadlines.agree(leases(), [(at(3), at(5))].into_iter()));
        deadlines.set(Due::WakeResend(0), at(5));
        assert!(deadlines.agree(leases(), [(at(3), at(5))].into_iter()));
    }
}
