//! The error type of every trace reader. Operating errors from a trace file are values
//! (STYLE.md rule 5): a malformed field, a corrupt binary block and an unreadable file
//! are distinct variants, so a caller can skip the first and must stop on the others.

use std::fmt;
use std::path::PathBuf;

/// Where in a file a problem was found: a 1-based line of a text format, or a byte
/// offset (of the decompressed stream) for a binary one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Location {
    /// A 1-based line number of a text format.
    Line(u64),
    /// A byte offset from the start of the (decompressed) file.
    Byte(u64),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Line(line) => write!(f, "{line}"),
            Location::Byte(offset) => write!(f, "byte {offset}"),
        }
    }
}

/// Why a trace file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// One record (line) is malformed; with `skip_bad` it is skipped and counted.
    #[error("{}:{location}: field {field}: {message}", .path.display())]
    Parse { path: PathBuf, location: Location, field: &'static str, message: String },
    /// A binary file is damaged: bad magic, checksum mismatch, truncation, a partial
    /// record. Never skipped: the rest of the file cannot be trusted.
    #[error("{}: byte {offset}: corrupt: {message}", .path.display())]
    Corrupt { path: PathBuf, offset: u64, message: String },
    /// The format was not named and could not be detected from the content.
    #[error(
        "{}: cannot detect the trace format ({reason}); tried {tried}; name it with --format",
        .path.display()
    )]
    UnknownFormat { path: PathBuf, reason: String, tried: &'static str },
    /// A record's timestamp is earlier than the one before it in the same file.
    #[error(
        "{}:{location}: field Timestamp: {timestamp_ns} ns goes backwards (previous record at {previous_ns} ns)",
        .path.display()
    )]
    OutOfOrder { path: PathBuf, location: Location, timestamp_ns: u64, previous_ns: u64 },
    /// The same file was named twice in one trace set: its requests would count twice.
    #[error("{}: named twice in one trace set (its requests would count twice)", .path.display())]
    DuplicateFile { path: PathBuf },
    /// More files than a trace set holds.
    #[error("{}: a trace set holds at most {files_max} files", .path.display())]
    TooManyFiles { path: PathBuf, files_max: usize },
}

impl TraceError {
    /// Whether `skip_bad` may skip the record that caused this error and go on: true
    /// for a malformed or out-of-order record, false for I/O and corruption.
    pub fn is_record_error(&self) -> bool {
        matches!(self, TraceError::Parse { .. } | TraceError::OutOfOrder { .. })
    }
}

/// A field-level parse failure before the file and line are known; the reader adds them.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct FieldError {
    pub(crate) field: &'static str,
    pub(crate) message: String,
}

impl FieldError {
    pub(crate) fn new(field: &'static str, message: impl Into<String>) -> FieldError {
        FieldError { field, message: message.into() }
    }
}

/// The longest field text quoted in an error message; longer text is cut.
const QUOTED_BYTES_MAX: usize = 40;

/// Quotes a field's bytes for an error message, lossily and cut to a bounded length,
/// so that a binary file read as text does not produce a megabyte-long message.
pub(crate) fn quote(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(QUOTED_BYTES_MAX)];
    let text = String::from_utf8_lossy(cut);
    if cut.len() < bytes.len() { format!("{text:?}...") } else { format!("{text:?}") }
}
