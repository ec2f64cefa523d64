//! The groups a server leads, with an index of what the server asks of all of them
//! after every event: the next instant its timer must fire, and which groups are
//! being handed over. A server of a 300-server cluster leads about 100 groups; a
//! scan of each on every event was most of the simulation's time (each `Led` is cold
//! in the cache), so the index is kept up to date instead: every group handed out
//! mutably is marked, and [`LedGroups::refresh`] (called at the end of each event)
//! summarises the marked ones again. Debug builds check the index against a full
//! scan after every event.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use somnus_types::{ChunkGroupId, VirtualDuration, VirtualInstant};

use super::primary::Led;

/// What the index keeps of one group: the parts of its timer deadline that do not
/// depend on the time, and whether it is being handed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Summary {
    /// The oldest message sent and not answered: its retransmission is due a retry
    /// interval after it.
    pub(super) oldest_sent: Option<VirtualInstant>,
    /// DVL work (reclaim) waits on a retry with no message in flight.
    pub(super) work: bool,
    pub(super) lease_until: VirtualInstant,
    pub(super) migrating: bool,
}

impl Summary {
    /// When the group needs the timer: the next retransmission due, a retry interval
    /// from `now` while work waits, or the lease's end if it is still ahead.
    pub(super) fn deadline(
        self,
        now: VirtualInstant,
        retry: VirtualDuration,
    ) -> Option<VirtualInstant> {
        let retransmit = self.oldest_sent.map(|at| at.saturating_add(retry));
        let work = self.work.then(|| now.saturating_add(retry));
        let lease = Some(self.lease_until).filter(|at| *at > now);
        retransmit.into_iter().chain(work).chain(lease).min()
    }
}

#[derive(Debug, Default)]
pub(super) struct LedGroups {
    groups: BTreeMap<ChunkGroupId, Led>,
    /// Groups handed out mutably (or inserted) since the last refresh.
    dirty: Vec<ChunkGroupId>,
    /// Each group's summary as the sets below hold it.
    indexed: BTreeMap<ChunkGroupId, Summary>,
    retransmits: BTreeSet<(VirtualInstant, ChunkGroupId)>,
    leases: BTreeSet<(VirtualInstant, ChunkGroupId)>,
    working: BTreeSet<ChunkGroupId>,
    migrating: BTreeSet<ChunkGroupId>,
}

impl LedGroups {
    pub(super) fn get(&self, group: &ChunkGroupId) -> Option<&Led> {
        self.groups.get(group)
    }

    /// The group, marked for the next refresh (whatever the caller changes in it).
    pub(super) fn get_mut(&mut self, group: &ChunkGroupId) -> Option<&mut Led> {
        let led = self.groups.get_mut(group)?;
        if self.dirty.last() != Some(group) {
            self.dirty.push(*group);
        }
        Some(led)
    }

    pub(super) fn contains_key(&self, group: &ChunkGroupId) -> bool {
        self.groups.contains_key(group)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &ChunkGroupId> {
        self.groups.keys()
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Led> {
        self.groups.values()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&ChunkGroupId, &Led)> {
        self.groups.iter()
    }

    pub(super) fn insert(&mut self, group: ChunkGroupId, led: Led) {
        self.groups.insert(group, led);
        self.dirty.push(group);
    }

    pub(super) fn remove(&mut self, group: &ChunkGroupId) -> Option<Led> {
        let led = self.groups.remove(group)?;
        self.unindex(*group);
        Some(led)
    }

    /// Brings the index level with every group changed since the last refresh.
    pub(super) fn refresh(&mut self) {
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.sort_unstable();
        dirty.dedup();
        for group in dirty.drain(..) {
            let summary = self.groups.get(&group).map(Led::summary);
            if summary == self.indexed.get(&group).copied() {
                continue;
            }
            self.unindex(group);
            if let Some(summary) = summary {
                self.index(group, summary);
            }
        }
        // The list's allocation is kept for the next event.
        self.dirty = dirty;
    }

    fn index(&mut self, group: ChunkGroupId, summary: Summary) {
        if let Some(at) = summary.oldest_sent {
            self.retransmits.insert((at, group));
        }
        self.leases.insert((summary.lease_until, group));
        if summary.work {
            self.working.insert(group);
        }
        if summary.migrating {
            self.migrating.insert(group);
        }
        self.indexed.insert(group, summary);
    }

    fn unindex(&mut self, group: ChunkGroupId) {
        let Some(summary) = self.indexed.remove(&group) else { return };
        if let Some(at) = summary.oldest_sent {
            self.retransmits.remove(&(at, group));
        }
        self.leases.remove(&(summary.lease_until, group));
        self.working.remove(&group);
        self.migrating.remove(&group);
    }

    /// The earliest of the groups' deadlines ([`Summary::deadline`]), from the index.
    pub(super) fn next_deadline(
        &self,
        now: VirtualInstant,
        retry: VirtualDuration,
    ) -> Option<VirtualInstant> {
        let retransmit = self.retransmits.first().map(|(at, _)| at.saturating_add(retry));
        let work = (!self.working.is_empty()).then(|| now.saturating_add(retry));
        // Leases still running: past every entry at `now` itself.
        let running = (Bound::Excluded((now, ChunkGroupId(u32::MAX))), Bound::Unbounded);
        let lease = self.leases.range(running).next().map(|(at, _)| *at);
        retransmit.into_iter().chain(work).chain(lease).min()
    }

    /// The groups being handed over.
    pub(super) fn migrating(&self) -> impl Iterator<Item = ChunkGroupId> + '_ {
        self.migrating.iter().copied()
    }

    /// Whether the index agrees with a summary of every group taken now: the check
    /// debug builds make after every event.
    pub(super) fn index_agrees(&self) -> bool {
        let summaries: BTreeMap<ChunkGroupId, Summary> =
            self.groups.iter().map(|(group, led)| (*group, led.summary())).collect();
        let mut rebuilt = LedGroups::default();
        for (group, summary) in &summaries {
            rebuilt.index(*group, *summary);
        }
        rebuilt.indexed == self.indexed
            && rebuilt.retransmits == self.retransmits
            && rebuilt.leases == self.leases
            && rebuilt.working == self.working
            && rebuilt.migrating == self.migrating
    }
}

#[cfg(test)]
mod tests {
    use somnus_types::ServerId;

    use super::super::dvl::Dvl;
    use super::*;
    use crate::cluster::{Epoch, GroupView};

    const RETRY: VirtualDuration = VirtualDuration::from_secs(1);

    fn led(group: u32, lease_secs: u64) -> Led {
        let replicas = vec![ServerId(0), ServerId(1), ServerId(2)];
        let view = GroupView {
            group: ChunkGroupId(group),
            epoch: Epoch(1),
            primary: Some(ServerId(0)),
            replicas,
        };
        let lease = VirtualInstant::ZERO.saturating_add(VirtualDuration::from_secs(lease_secs));
        Led::new(view, lease, Dvl::new(Vec::new(), None, 2), Vec::new())
    }

    fn at(secs: u64) -> VirtualInstant {
        VirtualInstant::ZERO.saturating_add(VirtualDuration::from_secs(secs))
    }

    /// The debug check catches a group changed behind the index's back (a change with
    /// no refresh after it), and the index answers as a scan of the groups would.
    #[test]
    fn the_index_answers_as_a_scan_and_a_stale_index_is_caught() {
        let mut groups = LedGroups::default();
        groups.insert(ChunkGroupId(1), led(1, 10));
        groups.insert(ChunkGroupId(2), led(2, 20));
        assert!(!groups.index_agrees(), "inserted groups are not indexed before a refresh");
        groups.refresh();
        assert!(groups.index_agrees());
        let scan = |groups: &LedGroups, now| {
            groups.values().filter_map(|led| led.summary().deadline(now, RETRY)).min()
        };
        for now in [0, 10, 15, 20, 25] {
            assert_eq!(groups.next_deadline(at(now), RETRY), scan(&groups, at(now)), "at {now} s");
        }
        assert_eq!(groups.next_deadline(at(10), RETRY), Some(at(20)), "a lease at now has ended");
        assert_eq!(groups.next_deadline(at(20), RETRY), None);

        if let Some(led) = groups.get_mut(&ChunkGroupId(2)) {
            led.migrating = true;
        }
        assert!(!groups.index_agrees(), "a change without a refresh is caught");
        assert_eq!(groups.migrating().count(), 0);
        groups.refresh();
        assert!(groups.index_agrees());
        assert_eq!(groups.migrating().collect::<Vec<_>>(), [ChunkGroupId(2)]);

        assert!(groups.remove(&ChunkGroupId(2)).is_some());
        assert!(groups.index_agrees(), "a removal leaves the index level");
        assert_eq!(groups.migrating().count(), 0);
        assert_eq!(groups.next_deadline(at(0), RETRY), Some(at(10)));
    }
}
