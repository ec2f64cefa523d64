//! The errors of the log. Each names what failed and where, so that an operator can act;
//! each is a variant with fields, so that a caller can match on it. Corruption (stored
//! bytes that fail their checks) is its own variant, never folded into I/O.

use somnus_types::{ByteRange, OwnerId, Version};

use crate::SegmentId;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The append would take the log past its configured size. Nothing was written; the
    /// caller wakes the home replica (and reclaim plus compaction make room).
    #[error(
        "log full: a record of {needed} bytes does not fit ({used} of {capacity} bytes used); \
         reclaim and compact, or write to the home replica"
    )]
    Full { needed: u64, used: u64, capacity: u64 },

    /// The device failed an operation. The I/O error is part of the message and not
    /// also a `source()`, so that an error chain prints it once.
    #[error("{op} {path}: {error}")]
    Io { op: &'static str, path: String, error: std::io::Error },

    /// Stored bytes failed their checks where the log had accepted them before.
    #[error("corrupt log: {segment} at byte {offset}: {reason}")]
    Corrupt { segment: SegmentId, offset: u64, reason: String },

    /// The directory holds something that is not a log this code can open.
    #[error("not a somnus log: {path}: {reason}")]
    NotALog { path: String, reason: String },

    /// A read-only open of a directory where no log was ever created (no `meta` file
    /// and no segment): a writer's open would create one there.
    #[error("not a somnus log: {path}: no meta file (no log was created here)")]
    NoLog { path: String },

    /// An earlier write or sync failed, so what the device holds is unknown: the log
    /// accepts nothing more until it is reopened (and recovery has rescanned it).
    #[error("log stopped after an earlier failure ({cause}); reopen it to recover")]
    Poisoned { cause: String },

    /// `Options::segment_bytes` cannot hold a segment header and one record.
    #[error("segment_bytes {segment_bytes} cannot hold a record (the least is {minimum})")]
    SegmentTooSmall { segment_bytes: u64, minimum: u64 },

    /// The bytes given to an append are not as many as its range covers.
    #[error("{given_bytes} bytes given for range {range} of {} bytes", range.size_bytes())]
    PayloadMismatch { given_bytes: u64, range: ByteRange },

    /// An append or invalidation of an empty range.
    #[error("an {request} of no bytes")]
    EmptyRange { request: Request },

    /// An append larger than one record may carry here.
    #[error("an append of {bytes} bytes is over the largest record ({limit} bytes); split it")]
    RecordTooLarge { bytes: u64, limit: u64 },

    /// An append whose version is not above every version of its owner in the log
    /// (versions must grow, so that no later append can fall under an old marker: L3).
    #[error(
        "owner {} appended version {} but already holds version {}: versions must grow",
        owner.0, version.0, newest.0
    )]
    VersionNotGrowing { owner: OwnerId, version: Version, newest: Version },

    /// An invalidation naming a version its owner never reached.
    #[error(
        "owner {} invalidated version {} but its newest version is {}",
        owner.0, version.0, newest.0
    )]
    VersionAboveNewest { owner: OwnerId, version: Version, newest: Version },

    /// A compaction of a segment found damaged at open, which is kept for the operator.
    #[error("{segment} is damaged and kept as found for inspection (somnus logstore verify)")]
    SegmentDamaged { segment: SegmentId },

    /// A compaction of the head segment or of one a batch is writing.
    #[error("{segment} is being written")]
    SegmentBusy { segment: SegmentId },

    /// A compaction of a segment the log does not hold.
    #[error("no segment {segment}")]
    NoSuchSegment { segment: SegmentId },

    #[error("the log is closed")]
    Closed,

    #[error("the log was opened read-only")]
    ReadOnly,
}

/// The requests that name a byte range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    Append,
    Invalidate,
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Request::Append => "append",
            Request::Invalidate => "invalidation",
        })
    }
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<String>, error: std::io::Error) -> Error {
        Error::Io { op, path: path.into(), error }
    }

    /// Whether the error is the configured size limit (the one error an off-loading
    /// writer expects in normal operation).
    pub fn is_full(&self) -> bool {
        matches!(self, Error::Full { .. })
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    /// The error and its sources joined as anyhow's `{:#}` prints them.
    fn chain(error: &Error) -> String {
        let mut text = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        text
    }

    #[test]
    fn an_io_error_prints_its_cause_once() {
        // Goal: an error chain (the CLI prints `{:#}`) names the I/O error once: the
        // variant's message holds it, so it is not also the error's source.
        let cause = std::io::Error::other("another process has the log open (LOCK is held)");
        let error = Error::io("locking", "/logs/a", cause);
        let text = chain(&error);
        assert_eq!(text, "locking /logs/a: another process has the log open (LOCK is held)");
        assert_eq!(text.matches("LOCK is held").count(), 1, "{text}");
    }
}
