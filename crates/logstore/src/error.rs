//! The errors of the log. Each names what failed and where, so that an operator can act.

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

    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },

    /// Stored bytes failed their checks where the log had accepted them before.
    #[error("corrupt log: {segment} at byte {offset}: {reason}")]
    Corrupt { segment: SegmentId, offset: u64, reason: String },

    /// The directory holds something that is not a log this code can open.
    #[error("not a somnus log: {path}: {reason}")]
    NotALog { path: String, reason: String },

    /// An earlier write or sync failed, so what the device holds is unknown: the log
    /// accepts nothing more until it is reopened (and recovery has rescanned it).
    #[error("log stopped after an earlier failure ({cause}); reopen it to recover")]
    Poisoned { cause: String },

    /// The caller broke the API's contract; nothing was written.
    #[error("invalid request: {0}")]
    Invalid(String),

    #[error("the log is closed")]
    Closed,

    #[error("the log was opened read-only")]
    ReadOnly,
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io { op, path: path.into(), source }
    }

    /// Whether the error is the configured size limit (the one error an off-loading
    /// writer expects in normal operation).
    pub fn is_full(&self) -> bool {
        matches!(self, Error::Full { .. })
    }
}
