//! The model of a logger (Write Off-Loading, section 3.1): a small log partition that
//! temporarily stores blocks off-loaded by managers, with versioned metadata.
//!
//! A logger supports write, read, invalidate and reclaim. It keeps, per owner (the
//! volume whose manager off-loaded the data) and per version, which parts of the record
//! are still valid. Space is taken by whole records, data plus a header, and is freed
//! when every byte of a record has been invalidated (the paper's lazy garbage
//! collection, here immediate; compaction of partly valid records is not modelled).
//!
//! This is the logger's metadata and capacity, not its bytes: the simulator charges
//! the I/O to the disks of the volume that hosts the log partition, and the real
//! on-disk log is the `logstore` crate's job.

use std::collections::BTreeMap;

use somnus_types::{ByteRange, LoggerId, VolumeId};

use crate::Version;

/// Bytes of metadata written with each record (one sector: owner, range, version,
/// checksum), so that data and metadata go to the log head in one write.
pub const RECORD_HEADER_BYTES: u64 = 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoggerError {
    #[error("logger {logger} is full: {needed_bytes} bytes needed, {free_bytes} free")]
    Full { logger: LoggerId, needed_bytes: u64, free_bytes: u64 },
}

/// The valid parts of one record. Almost always one range; partial invalidation by a
/// later, smaller write splits it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct LogRecord {
    size_bytes: u64,
    valid: Vec<ByteRange>,
}

/// A logger's metadata and capacity.
#[derive(Clone, Debug)]
pub struct Logger {
    id: LoggerId,
    capacity_bytes: u64,
    used_bytes: u64,
    valid_bytes: u64,
    records: BTreeMap<(VolumeId, Version), LogRecord>,
}

impl Logger {
    pub fn new(id: LoggerId, capacity_bytes: u64) -> Logger {
        assert!(capacity_bytes > RECORD_HEADER_BYTES, "logger {id} too small to hold a record");
        Logger { id, capacity_bytes, used_bytes: 0, valid_bytes: 0, records: BTreeMap::new() }
    }

    pub fn id(&self) -> LoggerId {
        self.id
    }

    pub fn free_bytes(&self) -> u64 {
        self.capacity_bytes - self.used_bytes
    }

    /// Bytes still valid (not invalidated) across all owners.
    pub fn valid_bytes(&self) -> u64 {
        self.valid_bytes
    }

    pub fn record_count(&self) -> usize {
        self.records.len()
    }

    /// Whether a write of `size_bytes` fits.
    pub fn fits(&self, size_bytes: u64) -> bool {
        size_bytes + RECORD_HEADER_BYTES <= self.free_bytes()
    }

    /// Persists a record. The version must be new for this owner.
    pub fn append(
        &mut self,
        owner: VolumeId,
        range: ByteRange,
        version: Version,
    ) -> Result<(), LoggerError> {
        assert!(!range.is_empty(), "empty record");
        let needed_bytes = range.size_bytes() + RECORD_HEADER_BYTES;
        if needed_bytes > self.free_bytes() {
            return Err(LoggerError::Full {
                logger: self.id,
                needed_bytes,
                free_bytes: self.free_bytes(),
            });
        }
        let record = LogRecord { size_bytes: needed_bytes, valid: vec![range] };
        let previous = self.records.insert((owner, version), record);
        assert!(previous.is_none(), "logger {} already holds {owner} {version:?}", self.id);
        self.used_bytes += needed_bytes;
        self.valid_bytes += range.size_bytes();
        Ok(())
    }

    /// Whether every byte of `range` is valid in `owner`'s record `version`.
    pub fn holds(&self, owner: VolumeId, range: ByteRange, version: Version) -> bool {
        let Some(record) = self.records.get(&(owner, version)) else {
            return false;
        };
        let mut cursor = range.start;
        for piece in &record.valid {
            if piece.start <= cursor && piece.end > cursor {
                cursor = piece.end;
            }
        }
        cursor >= range.end
    }

    /// Marks `range` of exactly `version` invalid; returns the bytes invalidated. An
    /// unknown version is not an error: the write may never have reached the log.
    pub fn invalidate(&mut self, owner: VolumeId, range: ByteRange, version: Version) -> u64 {
        let Some(record) = self.records.get_mut(&(owner, version)) else {
            return 0;
        };
        let mut invalidated = 0;
        let mut kept = Vec::with_capacity(record.valid.len() + 1);
        for piece in record.valid.drain(..) {
            let Some(cut) = piece.intersection(range) else {
                kept.push(piece);
                continue;
            };
            invalidated += cut.size_bytes();
            if piece.start < cut.start {
                kept.push(ByteRange::from_bounds(piece.start, cut.start));
            }
            if cut.end < piece.end {
                kept.push(ByteRange::from_bounds(cut.end, piece.end));
            }
        }
        record.valid = kept;
        self.valid_bytes -= invalidated;
        if record.valid.is_empty() {
            self.used_bytes -= record.size_bytes;
            self.records.remove(&(owner, version));
        }
        invalidated
    }

    /// Any valid extent held for `owner` (the reclaim operation): the oldest version.
    pub fn reclaim(&self, owner: VolumeId) -> Option<(ByteRange, Version)> {
        self.records_of(owner).next()
    }

    /// Every valid extent held for `owner`, oldest version first: what a manager asks
    /// for when it rebuilds its redirect cache after a failure.
    pub fn records_of(&self, owner: VolumeId) -> impl Iterator<Item = (ByteRange, Version)> + '_ {
        self.records.range((owner, Version(0))..=(owner, Version(u64::MAX))).flat_map(
            |((_, version), record)| record.valid.iter().map(move |piece| (*piece, *version)),
        )
    }

    /// Drops every record of `owner` (a decommissioned volume).
    pub fn delete_all(&mut self, owner: VolumeId) {
        let keys: Vec<_> = self
            .records
            .range((owner, Version(0))..=(owner, Version(u64::MAX)))
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            if let Some(record) = self.records.remove(&key) {
                self.used_bytes -= record.size_bytes;
                self.valid_bytes -=
                    record.valid.iter().map(|piece| piece.size_bytes()).sum::<u64>();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, end: u64) -> ByteRange {
        ByteRange::from_bounds(start, end)
    }

    #[test]
    fn invalidation_is_per_version_and_frees_whole_records() {
        // Goal: invalidating one version never touches another version of the same
        // blocks, partial invalidation keeps the rest readable, and space comes back
        // only when a record is wholly invalid.
        let owner = VolumeId(3);
        let mut logger = Logger::new(LoggerId(0), 1 << 20);
        logger.append(owner, r(0, 8192), Version(1)).unwrap();
        logger.append(owner, r(4096, 8192), Version(2)).unwrap();
        assert_eq!(logger.free_bytes(), (1 << 20) - 8192 - 4096 - 2 * RECORD_HEADER_BYTES);
        assert_eq!(logger.invalidate(owner, r(4096, 8192), Version(1)), 4096);
        assert!(logger.holds(owner, r(0, 4096), Version(1)));
        assert!(!logger.holds(owner, r(0, 8192), Version(1)));
        assert!(logger.holds(owner, r(4096, 8192), Version(2)));
        assert_eq!(logger.invalidate(owner, r(0, 4096), Version(9)), 0);
        assert_eq!(
            logger.records_of(owner).collect::<Vec<_>>(),
            vec![(r(0, 4096), Version(1)), (r(4096, 8192), Version(2))]
        );
        assert_eq!(logger.invalidate(owner, r(0, 4096), Version(1)), 4096);
        assert_eq!(logger.record_count(), 1);
        assert_eq!(logger.free_bytes(), (1 << 20) - 4096 - RECORD_HEADER_BYTES);
        assert_eq!(logger.reclaim(owner), Some((r(4096, 8192), Version(2))));
    }

    #[test]
    fn a_full_logger_refuses_and_loses_nothing() {
        // Goal: an append past capacity is a clear Full error and leaves the log as it was.
        let owner = VolumeId(0);
        let mut logger = Logger::new(LoggerId(7), 3 * 4096);
        logger.append(owner, r(0, 4096), Version(1)).unwrap();
        logger.append(owner, r(4096, 8192), Version(2)).unwrap();
        let error = logger.append(owner, r(0, 4096), Version(3)).unwrap_err();
        assert!(matches!(error, LoggerError::Full { logger: LoggerId(7), .. }), "{error}");
        assert_eq!(logger.record_count(), 2);
        assert!(!logger.fits(4096));
        logger.delete_all(owner);
        assert_eq!(logger.record_count(), 0);
        assert_eq!(logger.valid_bytes(), 0);
        assert!(logger.fits(4096));
    }
}
