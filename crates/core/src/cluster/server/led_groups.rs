//! The groups a server leads, with an index of what the server asks of all of them
//! after every event: the next instant its timer must fire, and which groups are
//! being handed over. A server of a 300-server cluster leads about 100 groups; a
//! scan of each on every event was most of the simulation's time (each `Led` is cold
//! in the cache), so the index is kept up to date instead: every group handed out
//! mutably is marked, and [`LedGroups::refresh`] (called at the end of each event)
//! summarises the marked ones again. Debug builds check the index against a full
//! scan after every event.

use std::collections::{BTreeMap, btree_map};

use somnus_types::{ChunkGroupId, VirtualDuration, VirtualInstant};

use super::primary::Led;

/// What the index keeps of one group: the parts of its timer deadline that do not
/// depend on the time, and whether it is being handed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Summary {
    /// The oldest message sent and not answered: its retransmission is due a retry
    /// interval after it.
    pub(super) oldest_sent: Option<VirtualInstant>,
    /// DVL work (reclaim) waits on a retry with no message in flight: not looked at
    /// again before this time (idle looks back off; zero while they do not).
    pub(super) work: Option<VirtualInstant>,
    pub(super) lease_until: VirtualInstant,
    pub(super) migrating: bool,
}

impl Summary {
    /// When the group needs the timer: the next retransmission due, a retry interval
    /// from `now` (or later, while idle visits back off) while work waits, or the
    /// lease's end if it is still ahead.
    pub(super) fn deadline(
        self,
        now: VirtualInstant,
        retry: VirtualDuration,
    ) -> Option<VirtualInstant> {
        let retransmit = self.oldest_sent.map(|at| at.saturating_add(retry));
        let work = self.work.map(|not_before| now.saturating_add(retry).max(not_before));
        let lease = Some(self.lease_until).filter(|at| *at > now);
        retransmit.into_iter().chain(work).chain(lease).min()
    }
}

/// What a key of the index is: each kind is a run of its own, sorted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Retransmit = 0,
    Lease = 1,
    Working = 2,
    Migrating = 3,
}

const KINDS: usize = 4;

/// One key of a run: its time (zero for `Migrating`) and group packed in one
/// integer, so a run is sorted with its earliest key first and a search compares
/// integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key(u128);

impl Key {
    fn new(at: VirtualInstant, group: ChunkGroupId) -> Key {
        Key(u128::from(at.as_nanos()) << 32 | u128::from(group.0))
    }

    fn at(self) -> VirtualInstant {
        VirtualInstant((self.0 >> 32) as u64)
    }

    fn group(self) -> ChunkGroupId {
        ChunkGroupId(self.0 as u32)
    }

    /// The keys of a group's summary, by kind.
    fn of(group: ChunkGroupId, summary: Summary) -> [Option<Key>; KINDS] {
        let key = |at| Key::new(at, group);
        let mut keys = [None; KINDS];
        keys[Kind::Retransmit as usize] = summary.oldest_sent.map(key);
        keys[Kind::Lease as usize] = Some(key(summary.lease_until));
        keys[Kind::Working as usize] = summary.work.map(key);
        keys[Kind::Migrating as usize] = summary.migrating.then(|| key(VirtualInstant::ZERO));
        keys
    }
}

#[derive(Debug)]
struct Entry {
    led: Led,
    /// The summary the index holds of this group, if any.
    indexed: Option<Summary>,
}

/// The last group id, as a bound of a run.
const LAST: ChunkGroupId = ChunkGroupId(u32::MAX);

#[derive(Debug, Default)]
pub(super) struct LedGroups {
    groups: BTreeMap<ChunkGroupId, Entry>,
    /// Groups handed out mutably (or inserted) since the last refresh.
    dirty: Vec<ChunkGroupId>,
    /// Every indexed summary's keys, a sorted run per kind: the earliest of a kind is
    /// the run's first, found without a search (that search, after every event, was a
    /// twelfth of a 300-server simulation's instructions).
    index: [Vec<Key>; KINDS],
}

impl LedGroups {
    pub(super) fn get(&self, group: &ChunkGroupId) -> Option<&Led> {
        self.groups.get(group).map(|entry| &entry.led)
    }

    /// The group, marked for the next refresh (whatever the caller changes in it).
    pub(super) fn get_mut(&mut self, group: &ChunkGroupId) -> Option<&mut Led> {
        let entry = self.groups.get_mut(group)?;
        if self.dirty.last() != Some(group) {
            self.dirty.push(*group);
        }
        Some(&mut entry.led)
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
        self.groups.values().map(|entry| &entry.led)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&ChunkGroupId, &Led)> {
        self.groups.iter().map(|(group, entry)| (group, &entry.led))
    }

    pub(super) fn insert(&mut self, group: ChunkGroupId, led: Led) {
        match self.groups.entry(group) {
            btree_map::Entry::Occupied(mut held) => held.get_mut().led = led,
            btree_map::Entry::Vacant(free) => {
                free.insert(Entry { led, indexed: None });
            }
        }
        self.dirty.push(group);
    }

    pub(super) fn remove(&mut self, group: &ChunkGroupId) -> Option<Led> {
        let entry = self.groups.remove(group)?;
        if let Some(summary) = entry.indexed {
            self.unindex(*group, summary);
        }
        Some(entry.led)
    }

    /// Brings the index level with every group changed since the last refresh.
    pub(super) fn refresh(&mut self) {
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.sort_unstable();
        dirty.dedup();
        for group in dirty.drain(..) {
            // A group removed since was unindexed then.
            let Some(entry) = self.groups.get_mut(&group) else { continue };
            let summary = entry.led.summary();
            if entry.indexed == Some(summary) {
                continue;
            }
            let old = entry.indexed.replace(summary).map(|old| Key::of(group, old));
            rekey(&mut self.index, old.unwrap_or_default(), Key::of(group, summary));
        }
        // The list's allocation is kept for the next event.
        self.dirty = dirty;
    }

    fn unindex(&mut self, group: ChunkGroupId, summary: Summary) {
        rekey(&mut self.index, Key::of(group, summary), [None; KINDS]);
    }

    /// The earliest of the groups' deadlines ([`Summary::deadline`]), from the index.
    pub(super) fn next_deadline(
        &self,
        now: VirtualInstant,
        retry: VirtualDuration,
    ) -> Option<VirtualInstant> {
        let retransmit = self.first(Kind::Retransmit).map(|at| at.saturating_add(retry));
        // The earliest work, no sooner than a retry interval from now.
        let work = self.first(Kind::Working).map(|at| now.saturating_add(retry).max(at));
        // Leases still running: past every key at `now` itself.
        let leases = &self.index[Kind::Lease as usize];
        let running = leases.partition_point(|k| *k <= Key::new(now, LAST));
        let lease = leases.get(running).map(|k| k.at());
        retransmit.into_iter().chain(work).chain(lease).min()
    }

    /// The time of the earliest key of `kind`.
    fn first(&self, kind: Kind) -> Option<VirtualInstant> {
        self.index[kind as usize].first().map(|k| k.at())
    }

    /// The groups being handed over.
    pub(super) fn migrating(&self) -> impl Iterator<Item = ChunkGroupId> + '_ {
        self.index[Kind::Migrating as usize].iter().map(|k| k.group())
    }

    /// Whether the index agrees with a summary of every group taken now: the check
    /// debug builds make after every event.
    pub(super) fn index_agrees(&self) -> bool {
        let mut rebuilt: [Vec<Key>; KINDS] = Default::default();
        for (group, entry) in &self.groups {
            let summary = entry.led.summary();
            if entry.indexed != Some(summary) {
                return false;
            }
            for (run, key) in rebuilt.iter_mut().zip(Key::of(*group, summary)) {
                run.extend(key);
            }
        }
        rebuilt.iter_mut().for_each(|run| run.sort_unstable());
        rebuilt == self.index
    }
}

/// Moves a group's keys in each run from `old` to `new`: only those that changed (a
/// lease mostly stays put).
fn rekey(index: &mut [Vec<Key>; KINDS], old: [Option<Key>; KINDS], new: [Option<Key>; KINDS]) {
    for (run, (old, new)) in index.iter_mut().zip(old.into_iter().zip(new)) {
        if old == new {
            continue;
        }
        if let Some(at) = old.and_then(|key| run.binary_search(&key).ok()) {
            run.remove(at);
        }
        if let Some(key) = new
            && let Err(at) = run.binary_search(&key)
        {
            run.insert(at, key);
        }
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

    /// Work waiting asks for the timer a retry interval from now, or later while idle
    /// visits back off.
    #[test]
    fn waiting_work_is_due_a_retry_from_now_or_when_its_backoff_ends() {
        let summary = |work_not_before| Summary {
            oldest_sent: None,
            work: Some(work_not_before),
            lease_until: VirtualInstant::ZERO,
            migrating: false,
        };
        assert_eq!(summary(VirtualInstant::ZERO).deadline(at(10), RETRY), Some(at(11)));
        assert_eq!(summary(at(15)).deadline(at(10), RETRY), Some(at(15)), "backing off");
        assert_eq!(summary(at(15)).deadline(at(20), RETRY), Some(at(21)), "backoff ended");
        let idle = Summary { work: None, ..summary(at(15)) };
        assert_eq!(idle.deadline(at(10), RETRY), None, "no work, no timer");
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
