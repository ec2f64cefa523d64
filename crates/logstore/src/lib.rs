//! The logger's storage engine: a durable, versioned, crash-safe log of off-loaded
//! writes (004 section 3, Sierra 3.3-3.4), shared by many writers ("owners", one per
//! volume manager or DVL) on one device.
//!
//! - [`LogStore::append`] is durable when it returns: the record (header, payload and
//!   a crc32c over both) is written at the log head and synced; concurrent appenders
//!   share one write and one sync (group commit).
//! - [`LogStore::read`] returns, per byte, the latest version that no deletion marker
//!   hides, and names the bytes the log does not hold.
//! - [`LogStore::invalidate`] appends a versioned deletion marker; [`LogStore::delete_all`]
//!   one record that makes every earlier record of an owner obsolete.
//! - Opening scans the segments (or loads the index a clean close left behind) and stops
//!   each segment at its first bad record; garbage collection copies live records
//!   forward and deletes segments; a size limit turns into [`Error::Full`].
//!
//! The semantics are a function of the *set* of records present, never of the order in
//! which they are found, so that recovery, compaction (which copies records with their
//! original sequence number and version) and crashes between the two cannot change what
//! a read returns. `docs/format/log.md` specifies the format and the rules.
//!
//! The engine has no async runtime in its API: every call blocks the calling thread,
//! and a runtime wraps it in its blocking pool.

mod disk;
mod error;
pub mod format;
mod index;
pub mod memdisk;
pub mod scan;
mod snapshot;
mod store;
mod verify;

pub use disk::{Disk, DiskFile, FsDisk};
pub use error::{Error, Result};
pub use memdisk::{Crash, MemDisk};
pub use store::{
    CompactionReport, Compactor, Extent, LogStore, Options, OwnerUsage, Piece, ReadResult, Reclaim,
    ReclaimedExtent, RecoveryMode, RecoveryReport, SegmentDamage, Stats, SyncMode, system_clock_ms,
};
pub use verify::{SegmentCheck, SegmentState, VerifyReport, verify};

/// Identifies one log (one directory): every segment header and record carries it, so
/// that a segment copied in from another log is never taken for one of this log's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogId(pub u64);

/// A segment file of the log; ids only grow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentId(pub u64);

/// The log sequence number of a record, assigned at append and kept by compaction
/// copies. It orders records only for `delete_all`; versions order data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

/// A writer of the log: one volume manager or DVL, whose versions are monotonic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OwnerId(pub u64);

/// An object (a volume, a chunk) of an owner, addressed by byte ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId(pub u64);

impl std::fmt::Display for SegmentId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", segment_file_name(*self))
    }
}

/// The file name of a segment: fixed width so that names sort as ids do.
pub fn segment_file_name(segment: SegmentId) -> String {
    format!("seg-{:016x}.log", segment.0)
}

/// The segment id a file name denotes, if it names a segment.
pub fn parse_segment_file_name(name: &str) -> Option<SegmentId> {
    let hex = name.strip_prefix("seg-")?.strip_suffix(".log")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok().map(SegmentId)
}
