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
pub use error::{Error, Request, Result};
pub use memdisk::{Crash, MemDisk};
pub use scan::SegmentState;
pub use store::{
    Collected, CommitMode, CompactionReport, Compactor, Extent, LogStore, Options, OwnerUsage,
    Piece, ReadResult, Reclaim, ReclaimedExtent, RecoveryMode, RecoveryReport, SegmentDamage,
    Stats, SyncMode, system_clock_ms,
};
pub use verify::{SegmentCheck, VerifyReport, verify};

/// The ids of the log live in `somnus_types` beside the cluster's; re-exported here so
/// that users of the engine need not name both crates.
pub use somnus_types::{LogId, Lsn, ObjectId, OwnerId};

/// A segment file of the log; ids only grow. The engine's own: no other crate sees
/// segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentId(pub u64);

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
