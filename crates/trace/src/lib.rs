//! Block I/O traces: the record type every somnus experiment replays, streaming parsers
//! for the public trace formats (MSR Cambridge CSV, SPC, DiskSim and MQSim ASCII, the
//! replayer ASCII format, CloudPhysics vSCSI binary and CSV) and somnus's own compact
//! binary format, a seeded synthetic generator, and the trace analysis of the Write
//! Off-Loading paper (FAST'08, section 2).
//!
//! This crate knows nothing of disks, power or policies. It never holds a whole trace
//! in memory: every reader streams.
//!
//! Modules:
//! - [`format`]: the [`Format`] enum and detection of a file's format from its content.
//! - [`reader`]: [`TraceReader`], one file as an iterator of requests.
//! - [`set`]: [`TraceSet`], several files pre-scanned and merged in time order.
//! - [`day`]: calendar days of a set ([`DaySpec`], [`day_window`]).
//! - [`binary`]: somnus's compact binary format ([`BinaryWriter`]), specified in
//!   `docs/format/trace.md`.
//! - [`synthetic`]: a seeded generator of server-like workloads ([`SyntheticTrace`]).
//! - [`stats`]: the volume activity analysis of the Write Off-Loading paper.
//! - [`volume`]: the [`VolumeTable`] of volume names.
//!
//! Errors from a trace file are values ([`TraceError`]); no input bytes make this
//! crate panic.

use somnus_types::{IoKind, VolumeId};

pub mod binary;
pub mod day;
mod error;
pub mod format;
mod input;
mod load;
pub mod load_gen;
pub mod reader;
pub mod set;
pub mod stats;
pub mod synthetic;
mod text;
pub mod volume;
mod vscsi;

pub use binary::{BinaryWriter, WriteError};
pub use day::{DayError, DaySpec, day_window};
pub use error::{Location, TraceError};
pub use format::Format;
pub use reader::{SkipLog, TraceReader};
pub use set::{FileSummary, ReadOptions, Requests, TraceSet, TraceSummary};
pub use synthetic::{SyntheticConfig, SyntheticTrace};
pub use volume::VolumeTable;

/// A trace timestamp in nanoseconds. For formats with absolute time (MSR Cambridge) it
/// counts from the Unix epoch; for the others it counts from the trace's own origin,
/// as the file states it (see [`TimeBase`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct TraceTimestamp(pub u64);

/// What a file's timestamps count from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeBase {
    /// Nanoseconds since 1970-01-01 UTC.
    UnixEpoch,
    /// Nanoseconds since an origin of the trace's own; calendar days are not known.
    Relative,
}

/// One block request of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// When the request arrived (see [`TraceTimestamp`] for the origin).
    pub timestamp: TraceTimestamp,
    /// Index into the [`VolumeTable`] of the trace set that produced this request.
    pub volume: VolumeId,
    /// The first byte addressed; `offset_bytes + size_bytes` never overflows.
    pub offset_bytes: u64,
    /// The number of bytes; never zero.
    pub size_bytes: u32,
    pub kind: IoKind,
}
