//! The garbage cache of a manager (004 section 3.1): logged versions that are no longer
//! the latest (displaced by a newer write, or reclaimed to the home volume) and must be
//! invalidated on their loggers.
//!
//! Entries of different versions may overlap. Two queries matter: whether any logged
//! version still overlaps a range (then a new write to it must be off-loaded too, so
//! that it gets a newer version than anything a recovery could find), and whether a
//! reclaimed entry still has older versions beside it (then it must wait: the latest
//! version of a block is invalidated only after all older versions).

use std::collections::{BTreeMap, BTreeSet};

use somnus_types::{ByteRange, LoggerId};

use crate::Version;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GarbageEntry {
    pub(crate) range: ByteRange,
    pub(crate) logger: LoggerId,
    pub(crate) version: Version,
    /// The entry was the latest version and has been copied home; it is invalidated
    /// only after every older overlapping version.
    pub(crate) reclaimed: bool,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct GarbageCache {
    /// Keyed by (start, version, logger); a version may sit on two loggers when a
    /// write failed on one and was retried on another.
    entries: BTreeMap<(u64, Version, LoggerId), (u64, bool)>,
    /// Entries not yet sent for invalidation, per logger.
    pending: BTreeMap<LoggerId, BTreeSet<(u64, Version)>>,
    /// Entries found waiting for an overlapping entry to go first (O2), per logger.
    /// Only the removal of an overlapping entry can free them, so they are looked at
    /// again then, not at every scan: a logger asleep for days may hold back thousands.
    held: BTreeMap<LoggerId, BTreeSet<(u64, Version)>>,
    /// How many entries `held` holds: none, nearly always, and then a removal has
    /// nothing to release.
    held_count: usize,
    /// The longest entry ever added: bounds the backward scan of overlap queries.
    length_max: u64,
}

impl GarbageCache {
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn add(&mut self, entry: GarbageEntry) {
        assert!(!entry.range.is_empty(), "empty garbage entry");
        let key = (entry.range.start, entry.version, entry.logger);
        if let Some((end, reclaimed)) = self.entries.get_mut(&key) {
            // The same version of the same start again: keep the wider range. This
            // happens when a failed write's range is re-added.
            assert!(*end == entry.range.end || !entry.reclaimed, "conflicting garbage for {key:?}");
            *reclaimed |= entry.reclaimed;
            return;
        }
        self.entries.insert(key, (entry.range.end, entry.reclaimed));
        self.pending.entry(entry.logger).or_default().insert((entry.range.start, entry.version));
        self.length_max = self.length_max.max(entry.range.size_bytes());
    }

    /// Removes an entry once its invalidation is durable.
    pub(crate) fn remove(&mut self, entry: GarbageEntry) {
        let key = (entry.range.start, entry.version, entry.logger);
        let removed = self.entries.remove(&key);
        assert!(removed.is_some(), "garbage entry {entry:?} removed twice");
        let key = (entry.range.start, entry.version);
        if let Some(set) = self.pending.get_mut(&entry.logger) {
            set.remove(&key);
        }
        if self.held.get_mut(&entry.logger).is_some_and(|set| set.remove(&key)) {
            self.held_count -= 1;
        }
        self.release_overlapping(entry.range);
    }

    /// Puts the held entries overlapping `range` back in the queue: what held them may
    /// have gone.
    fn release_overlapping(&mut self, range: ByteRange) {
        #[cfg(feature = "expensive-checks")]
        assert_eq!(self.held_count, self.held.values().map(BTreeSet::len).sum::<usize>());
        if self.held_count == 0 {
            return;
        }
        let overlapping: Vec<GarbageEntry> = self.overlapping(range).collect();
        for other in overlapping {
            let key = (other.range.start, other.version);
            if self.held.get_mut(&other.logger).is_some_and(|set| set.remove(&key)) {
                self.held_count -= 1;
                self.pending.entry(other.logger).or_default().insert(key);
            }
        }
    }

    /// Puts an entry whose invalidation failed back in the queue.
    pub(crate) fn requeue(&mut self, entry: GarbageEntry) {
        assert!(self.entries.contains_key(&(entry.range.start, entry.version, entry.logger)));
        self.pending.entry(entry.logger).or_default().insert((entry.range.start, entry.version));
    }

    fn overlapping(&self, range: ByteRange) -> impl Iterator<Item = GarbageEntry> + '_ {
        let from = range.start.saturating_sub(self.length_max);
        let lower = (from, Version(0), LoggerId(0));
        self.entries
            .range(lower..)
            .take_while(move |((start, _, _), _)| *start < range.end)
            .filter(move |(_, (end, _))| *end > range.start)
            .map(|(&(start, version, logger), &(end, reclaimed))| GarbageEntry {
                range: ByteRange::from_bounds(start, end),
                logger,
                version,
                reclaimed,
            })
    }

    pub(crate) fn overlaps(&self, range: ByteRange) -> bool {
        !self.entries.is_empty() && self.overlapping(range).next().is_some()
    }

    /// Whether an entry may be invalidated now: a reclaimed (latest) version waits for
    /// every older overlapping version (O2). An invalidation also hides every older
    /// version on its logger, so it waits too while it would hide a reclaimed version
    /// there that must itself still wait.
    fn may_invalidate(&self, entry: GarbageEntry) -> bool {
        if entry.reclaimed && self.has_older(entry) {
            return false;
        }
        !self.overlapping(entry.range).any(|other| {
            other.logger == entry.logger
                && other.reclaimed
                && other.version < entry.version
                && self.has_older(other)
        })
    }

    /// Whether an older version overlapping `entry` is still to be invalidated.
    fn has_older(&self, entry: GarbageEntry) -> bool {
        self.overlapping(entry.range).any(|other| other.version < entry.version)
    }

    /// Takes up to `count_max` entries for `logger` that may be invalidated now and that
    /// `busy` does not hold back (a read of that version in flight), and marks them sent.
    /// Entries that must wait for others are set aside until one of those is removed.
    pub(crate) fn take_sendable(
        &mut self,
        logger: LoggerId,
        count_max: usize,
        busy: impl Fn(GarbageEntry) -> bool,
        out: &mut Vec<GarbageEntry>,
    ) {
        let Some(set) = self.pending.get(&logger) else {
            return;
        };
        let first = out.len();
        let mut held = Vec::new();
        for &(start, version) in set {
            if out.len() - first >= count_max {
                break;
            }
            let Some(&(end, reclaimed)) = self.entries.get(&(start, version, logger)) else {
                unreachable!(
                    "pending entry ({start}, {version:?}) of {logger} has no garbage entry"
                );
            };
            let entry = GarbageEntry {
                range: ByteRange::from_bounds(start, end),
                logger,
                version,
                reclaimed,
            };
            if !self.may_invalidate(entry) {
                held.push((start, version));
            } else if !busy(entry) {
                out.push(entry);
            }
        }
        if let Some(set) = self.pending.get_mut(&logger) {
            for entry in &out[first..] {
                set.remove(&(entry.range.start, entry.version));
            }
            for key in &held {
                set.remove(key);
            }
        }
        if !held.is_empty() {
            let set = self.held.entry(logger).or_default();
            for key in held {
                self.held_count += usize::from(set.insert(key));
            }
        }
    }

    /// Loggers that have entries waiting to be sent.
    pub(crate) fn loggers_pending(&self) -> impl Iterator<Item = LoggerId> + '_ {
        self.pending.iter().filter(|(_, set)| !set.is_empty()).map(|(logger, _)| *logger)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(start: u64, end: u64, version: u64, reclaimed: bool) -> GarbageEntry {
        GarbageEntry {
            range: ByteRange::from_bounds(start, end),
            logger: LoggerId(1),
            version: Version(version),
            reclaimed,
        }
    }

    #[test]
    fn reclaimed_latest_waits_for_older_versions() {
        // Goal: the "latest version invalidated last" rule of 004 section 3.1: a
        // reclaimed entry is not sendable while an older overlapping version remains.
        let mut cache = GarbageCache::default();
        cache.add(entry(0, 4096, 1, false));
        cache.add(entry(0, 8192, 2, true));
        let mut out = Vec::new();
        cache.take_sendable(LoggerId(1), 10, |_| false, &mut out);
        assert_eq!(out, vec![entry(0, 4096, 1, false)]);
        out.clear();
        cache.take_sendable(LoggerId(1), 10, |_| false, &mut out);
        assert!(out.is_empty(), "{out:?}");
        cache.remove(entry(0, 4096, 1, false));
        cache.take_sendable(LoggerId(1), 10, |_| false, &mut out);
        assert_eq!(out, vec![entry(0, 8192, 2, true)]);
        assert!(cache.overlaps(ByteRange::from_bounds(8000, 9000)));
        assert!(!cache.overlaps(ByteRange::from_bounds(8192, 9000)));
    }
}
