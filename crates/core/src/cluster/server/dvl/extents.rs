//! A DVL's map of logged writes, with the indexes its hot paths look up instead of
//! scanning: while a replica sleeps for hours, a group's map holds thousands of
//! extents, and every logged write, acknowledgement, client read and timer would
//! otherwise walk all of them.

use std::collections::{BTreeMap, BTreeSet};

use somnus_types::{ByteRange, ObjectId, ServerId, Version, VirtualDuration, VirtualInstant};

use crate::cluster::{ChunkId, ChunkIndex, Epoch, LogRecord};

/// A logged write in the map.
#[derive(Clone, Debug, Default)]
pub(super) struct Extent {
    /// The loggers known to hold it: reads back ask them.
    pub(super) holders: Vec<ServerId>,
    /// Every logger that may hold it: each appends its deletion marker.
    pub(super) loggers: Vec<ServerId>,
    pub(super) applied: Vec<ServerId>,
    /// Loggers that appended its deletion marker.
    pub(super) invalidated: Vec<ServerId>,
    /// When its reclaimed copy was sent to the replicas lacking it: not read back
    /// again before their answers are due (indexed: set it through
    /// [`Extents::reclaim_sent`]).
    reclaim_sent_at: Option<VirtualInstant>,
    /// When its deletion markers were last sent (indexed: set it through
    /// [`Extents::invalidation_sent`]).
    invalidate_sent_at: Option<VirtualInstant>,
}

impl Extent {
    pub(super) fn reclaim_sent_at(&self) -> Option<VirtualInstant> {
        self.reclaim_sent_at
    }

    pub(super) fn invalidate_sent_at(&self) -> Option<VirtualInstant> {
        self.invalidate_sent_at
    }
}

/// The lowest record of `owner`'s epoch in the map's order: the map's records of
/// older epochs come before it.
pub(super) fn first_record_of(owner: Epoch) -> LogRecord {
    let chunk = ChunkId { object: ObjectId(0), chunk: ChunkIndex(0) };
    LogRecord { owner, chunk, range: ByteRange::new(0, 0), version: Version(0) }
}

#[derive(Clone, Debug, Default)]
pub(super) struct Extents {
    map: BTreeMap<LogRecord, Extent>,
    by_version: BTreeSet<(Version, LogRecord)>,
    by_chunk: BTreeSet<(ChunkId, LogRecord)>,
    invalidations_sent: BTreeSet<(VirtualInstant, LogRecord)>,
    reclaims_sent: BTreeSet<(VirtualInstant, LogRecord)>,
    /// The extents every replica of `everywhere_of` has applied (each waits only for
    /// its deletion markers), as of the last [`Extents::everywhere`]; the extents
    /// changed since are in `touched`.
    everywhere: BTreeSet<LogRecord>,
    everywhere_of: Vec<ServerId>,
    touched: BTreeSet<LogRecord>,
    /// Bumped at every change of an extent's `applied`, `holders`, `loggers` or
    /// `invalidated` (every [`Extents::get_mut`]), and when one is added or removed:
    /// scans that found nothing to do are skipped while it stays the same.
    changes: u64,
}

impl Extents {
    pub(super) fn changes(&self) -> u64 {
        self.changes
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub(super) fn get(&self, record: &LogRecord) -> Option<&Extent> {
        self.map.get(record)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&LogRecord, &Extent)> {
        self.map.iter()
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Extent> {
        self.map.values()
    }

    /// The extent of `record`, to change (counted as a change).
    pub(super) fn get_mut(&mut self, record: &LogRecord) -> Option<&mut Extent> {
        let extent = self.map.get_mut(record)?;
        self.changes += 1;
        self.touched.insert(*record);
        Some(extent)
    }

    /// The extent of `record`, added empty if the map lacks it, to change.
    pub(super) fn entry(&mut self, record: LogRecord) -> &mut Extent {
        if !self.map.contains_key(&record) {
            self.by_version.insert((record.version, record));
            self.by_chunk.insert((record.chunk, record));
        }
        self.changes += 1;
        self.touched.insert(record);
        self.map.entry(record).or_default()
    }

    pub(super) fn remove(&mut self, record: &LogRecord) -> Option<Extent> {
        let extent = self.map.remove(record)?;
        self.changes += 1;
        self.by_version.remove(&(record.version, *record));
        self.by_chunk.remove(&(record.chunk, *record));
        if let Some(at) = extent.invalidate_sent_at {
            self.invalidations_sent.remove(&(at, *record));
        }
        if let Some(at) = extent.reclaim_sent_at {
            self.reclaims_sent.remove(&(at, *record));
        }
        self.everywhere.remove(record);
        self.touched.remove(record);
        Some(extent)
    }

    /// Notes that the deletion markers of `record` were sent at `at`.
    pub(super) fn invalidation_sent(&mut self, record: &LogRecord, at: VirtualInstant) {
        let Some(extent) = self.map.get_mut(record) else { return };
        if let Some(before) = extent.invalidate_sent_at.replace(at) {
            self.invalidations_sent.remove(&(before, *record));
        }
        self.invalidations_sent.insert((at, *record));
    }

    /// Notes that the reclaimed copy of `record` was sent at `at`; false if the map
    /// lacks it.
    pub(super) fn reclaim_sent(&mut self, record: &LogRecord, at: VirtualInstant) -> bool {
        let Some(extent) = self.map.get_mut(record) else { return false };
        if let Some(before) = extent.reclaim_sent_at.replace(at) {
            self.reclaims_sent.remove(&(before, *record));
        }
        self.reclaims_sent.insert((at, *record));
        true
    }

    /// How many reclaimed copies were sent less than `timeout` before `now`.
    pub(super) fn reclaims_in_flight(
        &self,
        now: VirtualInstant,
        timeout: VirtualDuration,
    ) -> usize {
        let in_flight = |(at, _): &&(VirtualInstant, LogRecord)| at.saturating_add(timeout) > now;
        self.reclaims_sent.iter().rev().take_while(in_flight).count()
    }

    /// The earliest time deletion markers were sent and not all answered.
    pub(super) fn oldest_invalidation_sent(&self) -> Option<VirtualInstant> {
        self.invalidations_sent.first().map(|(at, _)| *at)
    }

    /// The records of the write of `version` (one per epoch that logged it).
    pub(super) fn of_version(&self, version: Version) -> Vec<LogRecord> {
        let low = (version, first_record_of(Epoch(0)));
        self.by_version.range(low..).take_while(|(v, _)| *v == version).map(|(_, r)| *r).collect()
    }

    /// The extents of `chunk`, in the map's order within it.
    pub(super) fn of_chunk(&self, chunk: ChunkId) -> impl Iterator<Item = (&LogRecord, &Extent)> {
        let low = (chunk, first_record_of(Epoch(0)));
        self.by_chunk
            .range(low..)
            .take_while(move |(c, _)| *c == chunk)
            .filter_map(|(_, record)| self.map.get_key_value(record))
    }

    /// The extents every one of `replicas` has applied, in the map's order.
    pub(super) fn everywhere(&mut self, replicas: &[ServerId]) -> Vec<LogRecord> {
        let applied_by_all = |e: &Extent| replicas.iter().all(|r| e.applied.contains(r));
        if self.everywhere_of != replicas {
            self.everywhere_of = replicas.to_vec();
            self.touched.clear();
            self.everywhere =
                self.map.iter().filter(|(_, e)| applied_by_all(e)).map(|(r, _)| *r).collect();
        }
        for record in std::mem::take(&mut self.touched) {
            match self.map.get(&record) {
                Some(extent) if applied_by_all(extent) => self.everywhere.insert(record),
                _ => self.everywhere.remove(&record),
            };
        }
        self.everywhere.iter().copied().collect()
    }
}
