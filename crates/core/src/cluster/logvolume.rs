//! A storage server's logger (Sierra 3.3): the records the DVLs of other servers'
//! primaries log here, kept in the one logger model every somnus log follows
//! (`crate::logger`, the `logstore` engine's semantics: versions grow per owner, a
//! deletion marker hides its version and older ones, space comes back when a segment
//! is collected), and per group the epoch the logger is fenced at.
//!
//! Like [`super::store::ChunkStore`], it changes only when the shell reports a disk
//! write done, so a crash keeps exactly what was durable.
//!
//! Each primary's epoch is one owner of the log (D1): a new primary appends under its
//! own owner, so it may log again, in its own order, writes an older epoch logged.

use std::collections::BTreeMap;

use somnus_types::{ByteRange, ChunkGroupId, LoggerId, ObjectId, OwnerId, Version};

use super::{ChunkId, Epoch, LogRecord, UnstableWrite};
use crate::logger::{LogGeometry, Logger, LoggerError, RECORD_HEADER_BYTES};

/// Bytes of one segment of a server's log: small, so collection frees space soon.
const SEGMENT_BYTES: u64 = 4 << 20;

#[derive(Clone, Debug)]
pub struct LogVolume {
    log: Logger,
    chunk_size_bytes: u64,
    /// Per group, the epoch the logger is fenced at: older primaries are refused.
    fences: BTreeMap<ChunkGroupId, Epoch>,
    /// The writes logged and still visible in part, by group, owner and version: what
    /// recovery reports and reads return (the log's payload, here the stamp).
    writes: BTreeMap<(ChunkGroupId, Epoch, Version), UnstableWrite>,
    /// Markers that came before their append (it was delayed, or never sent): the
    /// append is dropped when it comes, until a newer epoch fences the owner.
    tombstones: std::collections::BTreeSet<(ChunkGroupId, Epoch, Version)>,
}

impl LogVolume {
    pub fn new(chunk_size_bytes: u64, capacity_bytes: u64) -> LogVolume {
        let geometry = LogGeometry {
            capacity_bytes: capacity_bytes.max(SEGMENT_BYTES),
            segment_bytes: SEGMENT_BYTES,
            compact_live_percent_max: 50,
        };
        LogVolume {
            log: Logger::new(LoggerId(0), geometry),
            chunk_size_bytes,
            fences: BTreeMap::new(),
            writes: BTreeMap::new(),
            tombstones: std::collections::BTreeSet::new(),
        }
    }

    pub fn fence(&self, group: ChunkGroupId) -> Epoch {
        self.fences.get(&group).copied().unwrap_or_default()
    }

    /// Raises the group's fence (never lowers it).
    pub fn set_fence(&mut self, group: ChunkGroupId, epoch: Epoch) {
        let fence = self.fences.entry(group).or_default();
        *fence = (*fence).max(epoch);
        // Appends of older owners are refused now: their tombstones are not needed.
        let fence = *fence;
        self.tombstones.retain(|(g, owner, _)| *g != group || *owner >= fence);
    }

    /// Whether a record of `write` fits now.
    pub fn fits(&self, write: &UnstableWrite) -> bool {
        self.log.fits(write.range.size_bytes())
    }

    /// Appends `write` under the owner of `epoch`. A version at or below the owner's
    /// newest is one appended already (a primary sends a logger its batches one at a
    /// time, in version order): it is taken as a repeat. Only `Full` fails.
    pub fn append(
        &mut self,
        group: ChunkGroupId,
        epoch: Epoch,
        write: &UnstableWrite,
    ) -> Result<(), LoggerError> {
        let owner = owner(group, epoch);
        if write.version <= self.log.newest_version(owner)
            || self.tombstones.contains(&(group, epoch, write.version))
        {
            return Ok(());
        }
        let (object, range) = self.address(write.chunk, write.range);
        match self.log.append(owner, object, range, write.version) {
            Ok(_) => {
                self.writes.insert((group, epoch, write.version), *write);
                Ok(())
            }
            Err(error @ LoggerError::Full { .. }) => Err(error),
            Err(error) => unreachable!("a logger refused a checked append: {error}"),
        }
    }

    /// Appends a deletion marker for `record` and forgets the writes it leaves with no
    /// visible byte. A record this logger never held needs none.
    pub fn invalidate(&mut self, group: ChunkGroupId, record: &LogRecord) {
        let owner = owner(group, record.owner);
        if record.version > self.log.newest_version(owner) {
            self.tombstones.insert((group, record.owner, record.version));
            return;
        }
        let (object, range) = self.address(record.chunk, record.range);
        // Markers may use the segment of headroom past the capacity, so they never fail
        // on a log that can hold them at all.
        if self.log.invalidate(owner, object, range, record.version).is_err() {
            return;
        }
        let hidden: Vec<Version> = self
            .writes
            .range((group, record.owner, Version(0))..=(group, record.owner, record.version))
            .filter(|(_, w)| w.chunk == record.chunk && w.range.overlaps(record.range))
            .filter(|(_, w)| !self.visible(group, record.owner, w))
            .map(|((_, _, v), _)| *v)
            .collect();
        for version in hidden {
            self.writes.remove(&(group, record.owner, version));
        }
    }

    /// Whether any byte of `write` still reads as its version.
    fn visible(&self, group: ChunkGroupId, epoch: Epoch, write: &UnstableWrite) -> bool {
        let (object, range) = self.address(write.chunk, write.range);
        let (pieces, _) = self.log.read(owner(group, epoch), object, range);
        pieces.iter().any(|(_, version)| *version == write.version)
    }

    /// Every write of `group` with a visible byte, without data (D4).
    pub fn records(&self, group: ChunkGroupId) -> Vec<LogRecord> {
        let all = (group, Epoch(0), Version(0))..=(group, Epoch(u64::MAX), Version(u64::MAX));
        self.writes
            .range(all)
            .map(|(&(_, owner, _), w)| LogRecord {
                owner,
                chunk: w.chunk,
                range: w.range,
                version: w.version,
            })
            .collect()
    }

    /// Every group with a visible write, and its records (the simulation's report).
    pub fn held(&self) -> Vec<(ChunkGroupId, LogRecord)> {
        let groups: std::collections::BTreeSet<ChunkGroupId> =
            self.writes.keys().map(|(group, _, _)| *group).collect();
        groups.into_iter().flat_map(|g| self.records(g).into_iter().map(move |r| (g, r))).collect()
    }

    /// The write `record` names, if a byte of it is still visible.
    pub fn read(&self, group: ChunkGroupId, record: &LogRecord) -> Option<UnstableWrite> {
        self.writes.get(&(group, record.owner, record.version)).copied()
    }

    /// Whether a record of the write of `version` over `range` of `chunk`, or of a
    /// newer write over all of it, is held (the simulation's check of copies at
    /// acknowledgement: an acknowledgement delayed past a rewrite of its bytes finds
    /// the older record hidden, and the newer one keeps what a read must return).
    pub fn holds(&self, chunk: ChunkId, range: ByteRange, version: Version) -> bool {
        self.writes.values().any(|w| {
            w.version >= version
                && w.chunk == chunk
                && w.range.start <= range.start
                && range.end <= w.range.end
        })
    }

    /// Collects every segment collection may take; returns the bytes it wrote (copies).
    pub fn collect(&mut self) -> u64 {
        let mut written = 0;
        while let Ok(Some(collection)) = self.log.compact() {
            written += collection.record_bytes_written;
        }
        written
    }

    /// Data bytes a read would see, across groups: zero once every DVL is reclaimed.
    pub fn live_bytes(&self) -> u64 {
        self.log.live_bytes()
    }

    pub fn used_bytes(&self) -> u64 {
        self.log.used_bytes()
    }

    /// The writes still visible, for the simulation's end check.
    pub fn write_count(&self) -> usize {
        self.writes.len()
    }

    /// Bytes a record of `write` takes in the log.
    pub fn record_bytes(write: &UnstableWrite) -> u64 {
        RECORD_HEADER_BYTES + write.range.size_bytes()
    }

    /// The log addresses a chunk's range as a range of its object.
    fn address(&self, chunk: ChunkId, range: ByteRange) -> (ObjectId, ByteRange) {
        let base = u64::from(chunk.chunk.0) * self.chunk_size_bytes;
        (chunk.object, ByteRange::from_bounds(base + range.start, base + range.end))
    }
}

/// The log owner of a group's primary in one epoch.
fn owner(group: ChunkGroupId, epoch: Epoch) -> OwnerId {
    assert!(epoch.0 < 1 << 32, "epoch {} past the owner id's 32 bits", epoch.0);
    OwnerId(u64::from(group.0) << 32 | epoch.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ChunkIndex, Stamp};

    fn write(start: u64, end: u64, version: u64) -> UnstableWrite {
        let chunk = ChunkId { object: ObjectId(3), chunk: ChunkIndex(1) };
        UnstableWrite {
            chunk,
            range: ByteRange::from_bounds(start, end),
            version: Version(version),
            stamp: Stamp(version * 10),
        }
    }

    fn record(epoch: u64, w: &UnstableWrite) -> LogRecord {
        LogRecord { owner: Epoch(epoch), chunk: w.chunk, range: w.range, version: w.version }
    }

    #[test]
    fn records_are_reported_until_every_byte_is_invalidated() {
        let group = ChunkGroupId(2);
        let mut log = LogVolume::new(1 << 20, 64 << 20);
        let (a, b) = (write(0, 8192, 5), write(4096, 12288, 6));
        log.append(group, Epoch(1), &a).unwrap();
        log.append(group, Epoch(1), &b).unwrap();
        // A repeat of an appended version changes nothing.
        log.append(group, Epoch(1), &a).unwrap();
        assert_eq!(log.records(group).len(), 2);
        assert_eq!(log.read(group, &record(1, &a)), Some(a));
        // The marker of b hides a as well (it is older) where they overlap; a's first
        // block is still visible.
        log.invalidate(group, &record(1, &b));
        assert_eq!(log.records(group), vec![record(1, &a)]);
        log.invalidate(group, &record(1, &a));
        assert!(log.records(group).is_empty());
        assert_eq!(log.live_bytes(), 0);
        assert_eq!(log.write_count(), 0);
    }

    #[test]
    fn each_epoch_is_its_own_owner_and_fences_only_grow() {
        let group = ChunkGroupId(0);
        let mut log = LogVolume::new(1 << 20, 64 << 20);
        log.append(group, Epoch(1), &write(0, 4096, 9)).unwrap();
        // A newer primary logs an older version again under its own owner.
        log.append(group, Epoch(2), &write(0, 4096, 7)).unwrap();
        assert_eq!(log.records(group).len(), 2);
        log.set_fence(group, Epoch(3));
        log.set_fence(group, Epoch(2));
        assert_eq!(log.fence(group), Epoch(3));
        assert_eq!(log.fence(ChunkGroupId(1)), Epoch(0));
    }

    #[test]
    fn a_full_log_refuses_and_collection_gives_space_back() {
        let group = ChunkGroupId(0);
        let mut log = LogVolume::new(1 << 20, SEGMENT_BYTES * 2);
        let mut version = 0;
        let mut appended = Vec::new();
        loop {
            version += 1;
            let w = write(0, 1 << 20, version);
            match log.append(group, Epoch(1), &w) {
                Ok(()) => appended.push(w),
                Err(LoggerError::Full { .. }) => break,
                Err(error) => panic!("{error}"),
            }
        }
        assert!(!log.fits(&write(0, 1 << 20, version)));
        for w in &appended {
            log.invalidate(group, &record(1, w));
        }
        log.collect();
        assert!(log.fits(&write(0, 1 << 20, version)), "used {}", log.used_bytes());
        assert_eq!(log.live_bytes(), 0);
    }
}
