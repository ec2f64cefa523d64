//! How a log is opened and run.

use crate::LogId;

/// Which sync makes an append durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// fdatasync: the data and the metadata needed to read it (the file's size).
    Data,
    /// fsync: all metadata too.
    All,
}

/// Who makes queued records durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitMode {
    /// Group commit on the appenders' threads: a call returns once its record is
    /// durable, one appender leading each flush for all that queued meanwhile.
    Group,
    /// The deterministic mode a simulator steps, from one thread: appends,
    /// invalidations and `delete_all` only queue their record (it is not durable, and
    /// reads do not see it, when they return);
    /// [`LogStore::flush_queued`](crate::LogStore::flush_queued) writes, syncs and
    /// applies everything queued, as one group commit, on the caller's thread, when
    /// the caller's events say the device is done. A compaction flushes the queue with
    /// its copies. The engine starts no thread, and nothing it writes or decides reads
    /// a clock: records carry [`Options::clock`] (time 0 from [`Options::stepped`]);
    /// only the durations in recovery and compaction reports are measured.
    Stepped,
}

/// How a log is opened and run.
#[derive(Clone, Debug)]
pub struct Options {
    /// A segment file is sealed when the next record would take it past this size.
    pub segment_bytes: u64,
    /// The most bytes all segment files may hold; an append past it is `Error::Full`.
    /// Invalidations, `delete_all` and compaction copies may go one segment past it, so
    /// that a full log can always be emptied.
    pub capacity_bytes: u64,
    /// Which sync makes a batch durable.
    pub sync: SyncMode,
    /// Open without writing anything (no recovery repairs, no appends).
    pub read_only: bool,
    /// Compaction picks a sealed segment whose live bytes are at most this percentage
    /// of its size (segments with none are deleted whatever this says).
    pub compact_live_percent_max: u64,
    /// The wall clock, in Unix milliseconds, stamped on records (their age in `inspect`).
    pub clock: fn() -> u64,
    /// The id a new log gets (`None`: one drawn from the clock and the process id).
    pub new_log_id: Option<LogId>,
    /// Who flushes queued records: the appenders (group commit), or the caller.
    pub commit: CommitMode,
}

impl Options {
    /// The options of a log a simulator steps: group commit driven by its events, no
    /// wall clock (records carry time 0), the log id given, everything else default.
    pub fn stepped(log: LogId) -> Options {
        Options {
            commit: CommitMode::Stepped,
            clock: no_clock,
            new_log_id: Some(log),
            ..Options::default()
        }
    }

    /// A storage server's logger as the cluster steps it (the simulator's and the
    /// runtime's alike): `stepped`, segments of `segment_bytes`, room for
    /// `capacity_bytes` but never less than one segment, and a segment compacted once
    /// under half of it is live.
    pub fn stepped_logger(log: LogId, segment_bytes: u64, capacity_bytes: u64) -> Options {
        Options {
            segment_bytes,
            capacity_bytes: capacity_bytes.max(segment_bytes),
            compact_live_percent_max: 50,
            ..Options::stepped(log)
        }
    }
}

/// The clock of a log in virtual time: records carry no wall-clock age.
fn no_clock() -> u64 {
    0
}

impl Default for Options {
    fn default() -> Options {
        Options {
            segment_bytes: 64 << 20,
            capacity_bytes: 8 << 30,
            sync: SyncMode::Data,
            read_only: false,
            compact_live_percent_max: 50,
            clock: system_clock_ms,
            new_log_id: None,
            commit: CommitMode::Group,
        }
    }
}

/// Unix milliseconds from the system clock.
pub fn system_clock_ms() -> u64 {
    #[allow(
        clippy::disallowed_methods,
        reason = "a record's age is wall-clock metadata, not policy"
    )]
    let now = std::time::SystemTime::now();
    now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
