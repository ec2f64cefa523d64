//! Vocabulary shared by every somnus crate: identifiers as newtypes, byte ranges,
//! power and energy units with exact integer arithmetic, and virtual time.
//!
//! This crate has no behaviour of its own and no dependency on the rest of somnus.
//! It never reads a clock: a [`VirtualInstant`] is whatever the shell says it is.

mod ids;
mod range;
mod time;
mod units;

pub use ids::{
    ChunkGroupId, DiskId, GearGroupId, IoId, LogId, LoggerId, Lsn, ObjectId, OwnerId, RackId,
    RequestId, ServerId, VolumeId,
};
pub use range::{ByteRange, join_touching};
pub use time::{VirtualDuration, VirtualInstant};
pub use units::{Energy, Power};

/// The version of a logged write: unique and monotonically increasing per writer
/// (004 section 3.1, Sierra 3.3), so that the latest copy of a block can be told apart
/// from older ones after a failure.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct Version(pub u64);

/// Whether a block request reads or writes.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum IoKind {
    Read,
    Write,
}

impl IoKind {
    pub fn is_write(self) -> bool {
        self == IoKind::Write
    }
}
