//! The logger's worker: it owns the server's log on files (`file_log.rs`) and carries
//! out the core's operations on it (commits and reads) in the order the core issued
//! them, on a thread of its own, so the server's task never waits for the log's syncs
//! or reads. Each outcome comes back to the task as the core's event.

use somnus_core::cluster::logvolume::{LogAddress, LogCommit, LogPiece};
use somnus_types::IoId;
use tokio::sync::mpsc;

use super::file_log::{CommitError, FileLog};

/// Operations sent to the worker and not yet answered, at most: the server's task
/// holds the rest (and then reads no message) until one is.
pub const LOG_JOBS_MAX: usize = 64;

/// An operation of the core's on the log.
#[derive(Debug)]
pub enum LogJob {
    Commit(IoId, LogCommit),
    Read(IoId, Vec<LogAddress>),
}

/// How an operation ended.
#[derive(Debug)]
pub enum LogDone {
    /// The commit is durable.
    Committed,
    /// The commit's appends did not all fit: nothing of it took effect.
    NoSpace,
    /// The pieces each range of a read found, in order.
    Read(Vec<Vec<LogPiece>>),
    /// The engine or the journal failed (for a commit: what is durable is unknown).
    Failed(String),
}

/// Where the outcomes of the worker's operations come back, each with its I/O.
pub type Outcomes = mpsc::Receiver<(IoId, LogDone)>;

/// Starts the worker of server `server` on `log`; returns where to send operations
/// and where their outcomes come back. The worker ends when the sender is dropped.
pub fn spawn(log: FileLog, server: u32) -> std::io::Result<(mpsc::Sender<LogJob>, Outcomes)> {
    let (jobs, mut incoming) = mpsc::channel::<LogJob>(LOG_JOBS_MAX);
    // Room for every job in flight: the worker never waits to report.
    let (report, done) = mpsc::channel(LOG_JOBS_MAX);
    let mut log = log;
    std::thread::Builder::new().name(format!("log-{server}")).spawn(move || {
        while let Some(job) = incoming.blocking_recv() {
            let outcome = match job {
                LogJob::Commit(io, commit) => (io, committed(log.commit(&commit))),
                LogJob::Read(io, reads) => match log.read(&reads) {
                    Ok(pieces) => (io, LogDone::Read(pieces)),
                    Err(error) => (io, LogDone::Failed(error)),
                },
            };
            if report.blocking_send(outcome).is_err() {
                break;
            }
        }
    })?;
    Ok((jobs, done))
}

fn committed(outcome: Result<(), CommitError>) -> LogDone {
    match outcome {
        Ok(()) => LogDone::Committed,
        Err(CommitError::NoSpace) => LogDone::NoSpace,
        Err(CommitError::Failed(error)) => LogDone::Failed(error),
    }
}
