//! One trace file as a stream of [`Request`]s, whatever its format: format dispatch,
//! volume naming, the time-order check and `skip_bad` accounting live here once.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use somnus_types::VolumeId;

use crate::binary::{BinaryError, BinaryReader};
use crate::error::{FieldError, Location};
use crate::format::{SAMPLE_BYTES, TRIED, starts_with_digit};
use crate::input::{self, Input, LineError, LineReader};
use crate::text::parse_line;
use crate::volume::{VolumeResolver, VolumeTable};
use crate::vscsi::{VscsiError, VscsiReader};
use crate::{Format, Request, TimeBase, TraceError, TraceTimestamp};

/// How many skipped-record errors are kept for a summary; the rest are only counted.
pub const SKIPPED_ERRORS_KEPT: usize = 5;

/// Records skipped by `skip_bad` in one file.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SkipLog {
    /// The number of malformed or out-of-order records skipped.
    pub skipped_count: u64,
    /// The first [`SKIPPED_ERRORS_KEPT`] errors, as messages.
    pub first_errors: Vec<String>,
}

impl SkipLog {
    fn record(&mut self, error: &TraceError) {
        self.skipped_count += 1;
        if self.first_errors.len() < SKIPPED_ERRORS_KEPT {
            self.first_errors.push(error.to_string());
        }
    }
}

/// The volume name of a file: its name without `.gz` and then without its last
/// extension (`cloudPhysicsIO.vscsi.gz` gives `cloudPhysicsIO`).
pub fn file_stem(path: &Path) -> String {
    let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let name = name.strip_suffix(".gz").unwrap_or(&name);
    let stem = match name.rfind('.') {
        Some(dot) if dot > 0 => &name[..dot],
        _ => name,
    };
    if stem.is_empty() { "trace".to_owned() } else { stem.to_owned() }
}

/// Detects the format of `path` from its first bytes (see `docs/format/trace.md`).
pub fn detect_format(path: &Path) -> Result<Format, TraceError> {
    let sample = input::sample(path, SAMPLE_BYTES)?;
    crate::format::detect(&sample).map_err(|reason| TraceError::UnknownFormat {
        path: path.to_owned(),
        reason,
        tried: TRIED,
    })
}

enum Body {
    Text { lines: LineReader<Input>, seen_data: bool },
    Vscsi(VscsiReader),
    Binary { reader: BinaryReader, volume_ids: Vec<VolumeId> },
}

/// The volumes seen under one number, each with its name prefix.
type PrefixList = Vec<(Box<[u8]>, VolumeId)>;

/// Maps a volume name's parts (prefix bytes and number) to an id, with a one-entry
/// cache in front: trace files rarely switch volume between consecutive records.
#[derive(Default)]
struct VolumeCache {
    last: Option<(u64, VolumeId)>,
    last_prefix: Vec<u8>,
    by_number: BTreeMap<u64, PrefixList>,
    name: String,
}

impl VolumeCache {
    fn resolve(
        &mut self,
        prefix: &[u8],
        number: u64,
        field: &'static str,
        volumes: &mut dyn VolumeResolver,
    ) -> Result<VolumeId, FieldError> {
        if let Some((last_number, id)) = self.last
            && last_number == number
            && self.last_prefix == prefix
        {
            return Ok(id);
        }
        let known =
            self.by_number.get(&number).and_then(|list| list.iter().find(|(p, _)| **p == *prefix));
        let id = match known {
            Some(&(_, id)) => id,
            None => self.intern(prefix, number, field, volumes)?,
        };
        self.last = Some((number, id));
        self.last_prefix.clear();
        self.last_prefix.extend_from_slice(prefix);
        Ok(id)
    }

    fn intern(
        &mut self,
        prefix: &[u8],
        number: u64,
        field: &'static str,
        volumes: &mut dyn VolumeResolver,
    ) -> Result<VolumeId, FieldError> {
        let prefix_text = std::str::from_utf8(prefix)
            .map_err(|_| FieldError::new(field, "volume name is not UTF-8"))?;
        self.name.clear();
        // Writing to a String cannot fail.
        let _ = write!(self.name, "{prefix_text}_{number}");
        let id = volumes.resolve(&self.name).map_err(|message| FieldError::new(field, message))?;
        self.by_number.entry(number).or_default().push((prefix.into(), id));
        Ok(id)
    }
}

/// Reads one file of a trace set. The caller passes the volume resolver on each call
/// so that many readers can share one table during a merge.
pub(crate) struct FileReader {
    path: PathBuf,
    format: Format,
    time_base: TimeBase,
    body: Body,
    stem: String,
    cache: VolumeCache,
    /// Added to every timestamp: places a relative file at the set's origin.
    shift_ns: u64,
    skip_bad: bool,
    previous_ns: Option<u64>,
    record_count: u64,
    non_io_count: u64,
    skipped: SkipLog,
    first_ns: Option<u64>,
    done: bool,
}

impl FileReader {
    /// Opens `path` in `format` (detected if `None`).
    pub(crate) fn open(
        path: &Path,
        format: Option<Format>,
        skip_bad: bool,
        shift_ns: u64,
        volumes: &mut dyn VolumeResolver,
    ) -> Result<FileReader, TraceError> {
        let format = match format {
            Some(format) => format,
            None => detect_format(path)?,
        };
        let input = input::open(path)?;
        let (body, time_base) = match format {
            Format::Vscsi => {
                let reader = VscsiReader::new(input).map_err(|error| vscsi_error(path, error))?;
                (Body::Vscsi(reader), TimeBase::Relative)
            }
            Format::Somnus => {
                let reader = BinaryReader::new(input).map_err(|error| binary_error(path, error))?;
                let volume_ids = binary_volume_ids(path, reader.names(), volumes)?;
                let time_base = reader.time_base();
                (Body::Binary { reader, volume_ids }, time_base)
            }
            _ => {
                let time_base = format.time_base().unwrap_or(TimeBase::Relative);
                (Body::Text { lines: LineReader::new(input), seen_data: false }, time_base)
            }
        };
        Ok(FileReader {
            path: path.to_owned(),
            format,
            time_base,
            body,
            stem: file_stem(path),
            cache: VolumeCache::default(),
            shift_ns,
            skip_bad,
            previous_ns: None,
            record_count: 0,
            non_io_count: 0,
            skipped: SkipLog::default(),
            first_ns: None,
            done: false,
        })
    }

    pub(crate) fn format(&self) -> Format {
        self.format
    }

    pub(crate) fn time_base(&self) -> TimeBase {
        self.time_base
    }

    pub(crate) fn record_count(&self) -> u64 {
        self.record_count
    }

    pub(crate) fn non_io_count(&self) -> u64 {
        self.non_io_count
    }

    pub(crate) fn skipped(&self) -> &SkipLog {
        &self.skipped
    }

    /// The first and last timestamps read so far, as in the file (before shifting).
    pub(crate) fn first_last_ns(&self) -> Option<(u64, u64)> {
        self.first_ns.zip(self.previous_ns)
    }

    /// The next request, `None` at the end; after an error that `skip_bad` does not
    /// cover, the reader returns `None` forever.
    pub(crate) fn next(
        &mut self,
        volumes: &mut dyn VolumeResolver,
    ) -> Option<Result<Request, TraceError>> {
        while !self.done {
            let item = match &mut self.body {
                Body::Text { lines, seen_data } => next_text(
                    lines,
                    seen_data,
                    self.format,
                    &self.stem,
                    &mut self.cache,
                    volumes,
                    &self.path,
                ),
                Body::Vscsi(reader) => next_vscsi(
                    reader,
                    &mut self.non_io_count,
                    &self.stem,
                    &mut self.cache,
                    volumes,
                    &self.path,
                ),
                Body::Binary { reader, volume_ids } => next_binary(reader, volume_ids, &self.path),
            };
            match item.and_then(|parsed| self.check_order(parsed)) {
                Ok(Some(request)) => return Some(Ok(request)),
                Ok(None) => self.done = true,
                Err(error) if self.skip_bad && error.is_record_error() => {
                    self.skipped.record(&error)
                }
                Err(error) => {
                    self.done = true;
                    return Some(Err(error));
                }
            }
        }
        None
    }

    fn check_order(
        &mut self,
        parsed: Option<(Request, Location)>,
    ) -> Result<Option<Request>, TraceError> {
        let Some((mut request, location)) = parsed else { return Ok(None) };
        let timestamp_ns = request.timestamp.0;
        if let Some(previous_ns) = self.previous_ns
            && timestamp_ns < previous_ns
        {
            return Err(TraceError::OutOfOrder {
                path: self.path.clone(),
                location,
                timestamp_ns,
                previous_ns,
            });
        }
        self.previous_ns = Some(timestamp_ns);
        self.first_ns.get_or_insert(timestamp_ns);
        self.record_count += 1;
        request.timestamp =
            TraceTimestamp(timestamp_ns.checked_add(self.shift_ns).ok_or_else(|| {
                TraceError::Parse {
                    path: self.path.clone(),
                    location,
                    field: "Timestamp",
                    message: format!(
                        "{timestamp_ns} ns overflows u64 when placed at the set's origin"
                    ),
                }
            })?);
        Ok(Some(request))
    }
}

fn next_text(
    lines: &mut LineReader<Input>,
    seen_data: &mut bool,
    format: Format,
    stem: &str,
    cache: &mut VolumeCache,
    volumes: &mut dyn VolumeResolver,
    path: &Path,
) -> Result<Option<(Request, Location)>, TraceError> {
    loop {
        let (line_number, line) = match lines.next_line() {
            Ok(Some(numbered)) => numbered,
            Ok(None) => return Ok(None),
            Err(LineError::Io(source)) => {
                return Err(TraceError::Io { path: path.to_owned(), source });
            }
            Err(LineError::TooLong(offset)) => {
                let message =
                    format!("a line longer than {} bytes starts here", input::LINE_BUFFER_BYTES);
                return Err(TraceError::Corrupt { path: path.to_owned(), offset, message });
            }
        };
        let trimmed = crate::format::trim_spaces(line);
        if trimmed.is_empty() {
            continue;
        }
        // The first non-blank line is a header when its first field is not a number.
        if !*seen_data {
            *seen_data = true;
            if !starts_with_digit(trimmed) {
                continue;
            }
        }
        let location = Location::Line(line_number);
        let field_error = |error: FieldError| TraceError::Parse {
            path: path.to_owned(),
            location,
            field: error.field,
            message: error.message,
        };
        let parsed = parse_line(format, trimmed).map_err(field_error)?;
        let prefix = if parsed.host.is_empty() { stem.as_bytes() } else { parsed.host };
        let volume = cache
            .resolve(prefix, parsed.number, parsed.number_field, volumes)
            .map_err(field_error)?;
        let request = Request {
            timestamp: TraceTimestamp(parsed.timestamp_ns),
            volume,
            offset_bytes: parsed.offset_bytes,
            size_bytes: parsed.size_bytes,
            kind: parsed.kind,
        };
        return Ok(Some((request, location)));
    }
}

fn next_vscsi(
    reader: &mut VscsiReader,
    non_io_count: &mut u64,
    stem: &str,
    cache: &mut VolumeCache,
    volumes: &mut dyn VolumeResolver,
    path: &Path,
) -> Result<Option<(Request, Location)>, TraceError> {
    loop {
        let offset = reader.offset_bytes();
        let Some(record) = reader.next_record().map_err(|error| vscsi_error(path, error))? else {
            return Ok(None);
        };
        let Some(kind) = record.kind else {
            *non_io_count += 1;
            continue;
        };
        let location = Location::Byte(offset);
        let volume = cache.resolve(stem.as_bytes(), 0, "sn", volumes).map_err(|error| {
            TraceError::Parse {
                path: path.to_owned(),
                location,
                field: error.field,
                message: error.message,
            }
        })?;
        let request = Request {
            timestamp: TraceTimestamp(record.timestamp_ns),
            volume,
            offset_bytes: record.offset_bytes,
            size_bytes: record.size_bytes,
            kind,
        };
        return Ok(Some((request, location)));
    }
}

fn next_binary(
    reader: &mut BinaryReader,
    volume_ids: &[VolumeId],
    path: &Path,
) -> Result<Option<(Request, Location)>, TraceError> {
    let Some(record) = reader.next_record().map_err(|error| binary_error(path, error))? else {
        return Ok(None);
    };
    // The reader checked the index against the file's table, which `volume_ids` mirrors.
    let volume = volume_ids[record.volume_index as usize];
    let request = Request {
        timestamp: TraceTimestamp(record.timestamp_ns),
        volume,
        offset_bytes: record.offset_bytes,
        size_bytes: record.size_bytes,
        kind: record.kind,
    };
    Ok(Some((request, Location::Byte(reader.block_offset()))))
}

fn binary_volume_ids(
    path: &Path,
    names: &[String],
    volumes: &mut dyn VolumeResolver,
) -> Result<Vec<VolumeId>, TraceError> {
    names
        .iter()
        .map(|name| volumes.resolve(name))
        .collect::<Result<Vec<_>, String>>()
        .map_err(|message| TraceError::Corrupt { path: path.to_owned(), offset: 0, message })
}

fn vscsi_error(path: &Path, error: VscsiError) -> TraceError {
    let path = path.to_owned();
    match error {
        VscsiError::Io(source) => TraceError::Io { path, source },
        VscsiError::Corrupt(offset, message) => TraceError::Corrupt { path, offset, message },
        VscsiError::Field(offset, field) => TraceError::Parse {
            path,
            location: Location::Byte(offset),
            field: field.field,
            message: field.message,
        },
    }
}

fn binary_error(path: &Path, error: BinaryError) -> TraceError {
    let path = path.to_owned();
    match error {
        BinaryError::Io(source) => TraceError::Io { path, source },
        BinaryError::Corrupt(offset, message) => TraceError::Corrupt { path, offset, message },
    }
}

/// A single trace file as an iterator of requests, with its own [`VolumeTable`].
/// Use [`crate::TraceSet`] to read several files merged in time order.
pub struct TraceReader {
    reader: FileReader,
    volumes: VolumeTable,
}

impl TraceReader {
    /// Opens `path` in `format`, or in the format detected from its content if `None`.
    /// With `skip_bad`, malformed and out-of-order records are skipped and counted.
    pub fn open(
        path: &Path,
        format: Option<Format>,
        skip_bad: bool,
    ) -> Result<TraceReader, TraceError> {
        let mut volumes = VolumeTable::new();
        let reader = FileReader::open(path, format, skip_bad, 0, &mut volumes)?;
        Ok(TraceReader { reader, volumes })
    }

    /// The format being read.
    pub fn format(&self) -> Format {
        self.reader.format()
    }

    /// What the timestamps count from.
    pub fn time_base(&self) -> TimeBase {
        self.reader.time_base()
    }

    /// The volumes named so far (complete once the iterator has ended).
    pub fn volumes(&self) -> &VolumeTable {
        &self.volumes
    }

    /// The records skipped so far by `skip_bad`.
    pub fn skipped(&self) -> &SkipLog {
        self.reader.skipped()
    }

    /// The vSCSI records skipped because their command is not block I/O.
    pub fn non_io_count(&self) -> u64 {
        self.reader.non_io_count()
    }
}

impl Iterator for TraceReader {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.reader.next(&mut self.volumes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_drop_gz_then_one_extension() {
        // Goal: volume names come from the stem the brief specifies.
        assert_eq!(file_stem(Path::new("/x/cloudPhysicsIO.vscsi.gz")), "cloudPhysicsIO");
        assert_eq!(file_stem(Path::new("MSN-FS-30s-ms.trace")), "MSN-FS-30s-ms");
        assert_eq!(file_stem(Path::new("cloudPhysicsIO.us.csv.gz")), "cloudPhysicsIO.us");
        assert_eq!(file_stem(Path::new("noext")), "noext");
    }
}
