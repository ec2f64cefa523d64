//! What the engine reports: recovery at open, counters, compaction steps, owners.

use std::time::Duration;

use somnus_types::Version;

use crate::{OwnerId, SegmentId};

/// How the index was rebuilt at open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecoveryMode {
    /// A new, empty log.
    Created,
    /// From the snapshot of a clean close.
    Snapshot,
    /// By scanning every segment (after a crash, or because the snapshot was unusable:
    /// the reason is given).
    Scan { snapshot_refused: Option<String> },
}

impl RecoveryMode {
    /// The mode's name in JSON output (documented in the README): `created`,
    /// `snapshot` or `scan`.
    pub fn name(&self) -> &'static str {
        match self {
            RecoveryMode::Created => "created",
            RecoveryMode::Snapshot => "snapshot",
            RecoveryMode::Scan { .. } => "scan",
        }
    }
}

/// A segment whose valid records end before bytes that were once written whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentDamage {
    pub segment: SegmentId,
    pub offset: u64,
    pub reason: String,
    /// Valid records found after the damage, which are not returned.
    pub records_after: u64,
}

/// The damage in words, for operators.
impl std::fmt::Display for SegmentDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at byte {}: {} ({} valid records after it are not returned)",
            self.segment, self.offset, self.reason, self.records_after
        )
    }
}

/// What opening the log found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryReport {
    pub mode: RecoveryMode,
    pub duration: Duration,
    pub segments: u64,
    pub records: u64,
    pub bytes_scanned: u64,
    /// Segments that ended in an interrupted write, cut back to their last valid record.
    pub torn_tails: Vec<(SegmentId, u64)>,
    /// Segments whose damage hides records; they are kept as found for inspection.
    pub damage: Vec<SegmentDamage>,
    /// Segment files whose creation a crash interrupted (no header), removed.
    pub unwritten_removed: Vec<SegmentId>,
}

/// One owner's share of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerUsage {
    pub owner: OwnerId,
    pub objects: u64,
    pub records: u64,
    pub live_bytes: u64,
    pub version_max: Version,
    /// When the oldest record that still holds live bytes was appended (Unix ms).
    pub oldest_live_ms: Option<u64>,
}

/// Counters of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Bytes reads can return (the latest, non-invalidated versions).
    pub live_bytes: u64,
    /// Bytes of segment files not live: superseded or invalidated data, markers,
    /// headers, torn tails. Compaction turns them into free space.
    pub obsolete_bytes: u64,
    pub used_bytes: u64,
    pub capacity_bytes: u64,
    pub records: u64,
    pub segments: u64,
    pub owners: u64,
    pub appends: u64,
    pub invalidates: u64,
    pub delete_alls: u64,
    /// File syncs (fdatasync or fsync) of segments.
    pub syncs: u64,
    /// Directory syncs (segment creation and deletion).
    pub dir_syncs: u64,
    /// Group commits; `records_per_batch[i]` counts those of 2^i to 2^(i+1)-1 records.
    pub batches: u64,
    pub records_per_batch: Vec<u64>,
    pub batch_records_max: u64,
    pub compactions: u64,
    pub segments_deleted: u64,
    pub bytes_copied: u64,
    /// Time spent writing and syncing batches (the device busy on the log's behalf).
    pub flush_time: Duration,
    /// Bytes written to segments: records, headers, compaction copies.
    pub bytes_written: u64,
    pub recovery: RecoveryReport,
}

/// What one compaction step did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactionReport {
    pub segment: SegmentId,
    pub segment_bytes: u64,
    pub records_copied: u64,
    pub bytes_copied: u64,
    pub duration: Duration,
}

impl CompactionReport {
    /// Bytes the step's copies wrote: their records, headers and payloads.
    pub fn bytes_written(&self) -> u64 {
        self.records_copied * crate::format::RECORD_HEADER_BYTES + self.bytes_copied
    }
}

/// What [`LogStore::collect_garbage`](crate::LogStore::collect_garbage) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Collected {
    /// Compaction steps run.
    pub steps: u64,
    /// Bytes their copies wrote.
    pub bytes_written: u64,
}
