//! A trace set: several files read as one stream of requests in time order.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};

use crate::reader::{FileReader, SkipLog};
use crate::volume::{FrozenVolumes, VolumeTable};
use crate::{Format, Request, TimeBase, TraceError, TraceTimestamp};

/// The most files one set may hold (each holds an open file and buffers during replay).
pub const FILES_MAX: usize = 4096;

/// How to read the files of a set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// The format of every file; `None` detects each file's format from its content.
    pub format: Option<Format>,
    /// Skip and count malformed or out-of-order records instead of failing.
    pub skip_bad: bool,
    /// Keep the parsed requests in memory when the whole set has at most this many
    /// (32 bytes each), so that replaying it again costs no parsing; larger sets are
    /// read from their files on every pass. Zero never keeps them.
    pub memory_records_max: u64,
}

impl Default for ReadOptions {
    fn default() -> ReadOptions {
        ReadOptions { format: None, skip_bad: false, memory_records_max: MEMORY_RECORDS_DEFAULT }
    }
}

/// Sixteen million requests (512 MiB) are kept in memory by default.
pub const MEMORY_RECORDS_DEFAULT: u64 = 16 << 20;

/// What the pre-scan learned about one file.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FileSummary {
    pub path: PathBuf,
    pub format: Format,
    pub time_base: TimeBase,
    /// The number of requests (block I/O records) in the file.
    pub record_count: u64,
    /// The first and last timestamps as the file states them (before placement).
    pub first_timestamp: Option<TraceTimestamp>,
    pub last_timestamp: Option<TraceTimestamp>,
    /// Added to the file's timestamps in the merged stream (see [`TraceSet::open`]).
    pub placement_offset_ns: u64,
    /// Records skipped by `skip_bad`.
    pub skipped: SkipLog,
    /// vSCSI records skipped because their SCSI command is not a read or a write.
    pub non_io_record_count: u64,
    /// The size of the file on disk (compressed size for gzip files).
    pub size_bytes: u64,
}

/// What the pre-scan learned about the whole set.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TraceSummary {
    pub files: Vec<FileSummary>,
    pub record_count: u64,
    /// The first and last timestamps of the merged stream; `None` for an empty set.
    pub first_timestamp: Option<TraceTimestamp>,
    pub last_timestamp: Option<TraceTimestamp>,
    /// `UnixEpoch` if any file has absolute time, else `Relative`.
    pub time_base: TimeBase,
    pub volume_count: u64,
    /// Records skipped by `skip_bad` over all files.
    pub skipped_count: u64,
}

impl TraceSummary {
    /// The span from the first to the last request, or `None` for an empty set.
    pub fn span(&self) -> Option<(TraceTimestamp, TraceTimestamp)> {
        self.first_timestamp.zip(self.last_timestamp)
    }
}

/// A validated set of trace files. Opening reads every file once (the pre-scan), so a
/// bad trace fails before a long simulation starts; [`TraceSet::requests`] reads them
/// again, merged into one time-ordered stream.
pub struct TraceSet {
    options: ReadOptions,
    volumes: VolumeTable,
    summary: TraceSummary,
    /// Each file's requests as parsed by the pre-scan (before placement), when the set
    /// fits `memory_records_max`.
    cached: Option<Vec<Vec<Request>>>,
}

impl TraceSet {
    /// Opens and pre-scans `paths`. Volumes are interned in file order, then record
    /// order. Files with relative time are placed at the set's origin: if any file has
    /// absolute time, a relative file's time 0 becomes the earliest first timestamp of
    /// the absolute files; otherwise relative files keep their own times.
    pub fn open(paths: &[PathBuf], options: &ReadOptions) -> Result<TraceSet, TraceError> {
        if paths.len() > FILES_MAX {
            let path = paths[FILES_MAX].clone();
            return Err(TraceError::TooManyFiles { path, files_max: FILES_MAX });
        }
        let mut seen = std::collections::BTreeSet::new();
        for path in paths {
            // Two spellings of one file are one file; a path that cannot be resolved
            // fails to open below, with its own error.
            let resolved = path.canonicalize().unwrap_or_else(|_| path.clone());
            if !seen.insert(resolved) {
                return Err(TraceError::DuplicateFile { path: path.clone() });
            }
        }
        let mut volumes = VolumeTable::new();
        let mut files = Vec::with_capacity(paths.len());
        let mut cache =
            Cache { records_max: options.memory_records_max, records: 0, files: Some(Vec::new()) };
        for path in paths {
            files.push(prescan(path, options, &mut volumes, &mut cache)?);
        }
        let origin_ns = files
            .iter()
            .filter(|file| file.time_base == TimeBase::UnixEpoch)
            .filter_map(|file| file.first_timestamp)
            .map(|timestamp| timestamp.0)
            .min();
        let time_base = if files.iter().any(|f| f.time_base == TimeBase::UnixEpoch) {
            TimeBase::UnixEpoch
        } else {
            TimeBase::Relative
        };
        for file in files.iter_mut().filter(|file| file.time_base == TimeBase::Relative) {
            file.placement_offset_ns = origin_ns.unwrap_or(0);
        }
        let summary = summarize(files, time_base, volumes.len() as u64)?;
        assert!(summary.first_timestamp <= summary.last_timestamp);
        Ok(TraceSet { options: *options, volumes, summary, cached: cache.files })
    }

    /// Whether the requests are held in memory (see [`ReadOptions::memory_records_max`]).
    pub fn is_in_memory(&self) -> bool {
        self.cached.is_some()
    }

    /// The volumes of every file, interned in file order then record order.
    pub fn volumes(&self) -> &VolumeTable {
        &self.volumes
    }

    /// Per-file and whole-set facts from the pre-scan.
    pub fn summary(&self) -> &TraceSummary {
        &self.summary
    }

    /// Every request of every file in non-decreasing timestamp order; ties are broken
    /// by file order, then record order. The files are read again as the iterator
    /// advances; the iterator ends after the first error it yields.
    pub fn requests(&self) -> Requests<'_> {
        Requests::new(self)
    }

    /// The requests with `start <= timestamp < end`. The files are still read from the
    /// beginning, but nothing after `end` is parsed.
    pub fn requests_between(
        &self,
        start: TraceTimestamp,
        end: TraceTimestamp,
    ) -> impl Iterator<Item = Result<Request, TraceError>> + '_ {
        self.requests()
            .filter(move |item| item.as_ref().map_or(true, |request| request.timestamp >= start))
            .take_while(move |item| item.as_ref().map_or(true, |request| request.timestamp < end))
    }
}

/// The requests the pre-scan keeps, until they exceed the budget.
struct Cache {
    records_max: u64,
    records: u64,
    files: Option<Vec<Vec<Request>>>,
}

impl Cache {
    fn keep(&mut self, file: &mut Vec<Request>, request: Request) {
        if self.files.is_none() {
            return;
        }
        self.records += 1;
        if self.records > self.records_max {
            // Over budget: give the memory back and read the files on every pass.
            self.files = None;
            *file = Vec::new();
            return;
        }
        file.push(request);
    }
}

fn prescan(
    path: &Path,
    options: &ReadOptions,
    volumes: &mut VolumeTable,
    cache: &mut Cache,
) -> Result<FileSummary, TraceError> {
    let metadata = std::fs::metadata(path)
        .map_err(|source| TraceError::Io { path: path.to_owned(), source })?;
    let mut reader = FileReader::open(path, options.format, options.skip_bad, 0, volumes)?;
    let mut kept = Vec::new();
    while let Some(item) = reader.next(volumes) {
        cache.keep(&mut kept, item?);
    }
    if let Some(files) = &mut cache.files {
        files.push(kept);
    }
    let first_last = reader.first_last_ns();
    Ok(FileSummary {
        path: path.to_owned(),
        format: reader.format(),
        time_base: reader.time_base(),
        record_count: reader.record_count(),
        first_timestamp: first_last.map(|(first, _)| TraceTimestamp(first)),
        last_timestamp: first_last.map(|(_, last)| TraceTimestamp(last)),
        placement_offset_ns: 0,
        skipped: reader.skipped().clone(),
        non_io_record_count: reader.non_io_count(),
        size_bytes: metadata.len(),
    })
}

fn summarize(
    files: Vec<FileSummary>,
    time_base: TimeBase,
    volume_count: u64,
) -> Result<TraceSummary, TraceError> {
    let mut first = None;
    let mut last = None;
    for file in &files {
        let placed = |timestamp: Option<TraceTimestamp>| -> Result<Option<u64>, TraceError> {
            timestamp
                .map(|t| {
                    t.0.checked_add(file.placement_offset_ns).ok_or_else(|| TraceError::Parse {
                        path: file.path.clone(),
                        location: crate::Location::Line(0),
                        field: "Timestamp",
                        message: "overflows u64 when placed at the set's origin".to_owned(),
                    })
                })
                .transpose()
        };
        if let Some(file_first) = placed(file.first_timestamp)? {
            first = Some(first.map_or(file_first, |f: u64| f.min(file_first)));
        }
        if let Some(file_last) = placed(file.last_timestamp)? {
            last = Some(last.map_or(file_last, |l: u64| l.max(file_last)));
        }
    }
    Ok(TraceSummary {
        record_count: files.iter().map(|file| file.record_count).sum(),
        skipped_count: files.iter().map(|file| file.skipped.skipped_count).sum(),
        first_timestamp: first.map(TraceTimestamp),
        last_timestamp: last.map(TraceTimestamp),
        files,
        time_base,
        volume_count,
    })
}

/// A file's next request waiting in the merge heap, ordered by (time, file index).
struct Head {
    request: Request,
    file: u32,
}

impl PartialEq for Head {
    fn eq(&self, other: &Head) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Head {}

impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Head) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Head {
    fn cmp(&self, other: &Head) -> Ordering {
        (self.request.timestamp, self.file).cmp(&(other.request.timestamp, other.file))
    }
}

/// Where one file's requests come from during a pass.
enum Source<'a> {
    File(Box<FileReader>),
    /// The pre-scan's copy: the requests and the next index.
    Memory(&'a [Request], usize),
}

/// The merged request stream of a [`TraceSet`] (a k-way merge over its files).
pub struct Requests<'a> {
    set: &'a TraceSet,
    readers: Vec<Source<'a>>,
    heap: BinaryHeap<Reverse<Head>>,
    pending_error: Option<TraceError>,
    failed: bool,
    /// With a single in-memory file there is nothing to merge: its index.
    single: Option<usize>,
}

impl<'a> Requests<'a> {
    fn new(set: &'a TraceSet) -> Requests<'a> {
        let mut requests = Requests {
            set,
            readers: Vec::with_capacity(set.summary.files.len()),
            heap: BinaryHeap::with_capacity(set.summary.files.len()),
            pending_error: None,
            failed: false,
            single: None,
        };
        if let Some(cached) = &set.cached {
            for (index, file) in cached.iter().enumerate() {
                requests.readers.push(Source::Memory(file, 0));
                if cached.len() > 1 {
                    requests.advance(index);
                }
            }
            requests.single = (cached.len() == 1).then_some(0);
            return requests;
        }
        let mut volumes = FrozenVolumes(&set.volumes);
        for (index, file) in set.summary.files.iter().enumerate() {
            let opened = FileReader::open(
                &file.path,
                Some(file.format),
                set.options.skip_bad,
                file.placement_offset_ns,
                &mut volumes,
            );
            match opened {
                Ok(reader) => requests.readers.push(Source::File(Box::new(reader))),
                Err(error) => {
                    requests.pending_error = Some(error);
                    return requests;
                }
            }
            requests.advance(index);
        }
        requests
    }

    /// The next request of file `index`, placed at the set's origin.
    fn next_of(&mut self, index: usize) -> Option<Result<Request, TraceError>> {
        match &mut self.readers[index] {
            Source::File(reader) => reader.next(&mut FrozenVolumes(&self.set.volumes)),
            Source::Memory(requests, next) => {
                let mut request = *requests.get(*next)?;
                *next += 1;
                // The pre-scan checked that placement does not overflow.
                request.timestamp.0 += self.set.summary.files[index].placement_offset_ns;
                Some(Ok(request))
            }
        }
    }

    /// Reads the next request of file `index` into the heap.
    fn advance(&mut self, index: usize) {
        match self.next_of(index) {
            // FILES_MAX bounds the index far below u32::MAX.
            Some(Ok(request)) => self.heap.push(Reverse(Head { request, file: index as u32 })),
            Some(Err(error)) => {
                self.pending_error.get_or_insert(error);
            }
            None => {
                let expected = &self.set.summary.files[index];
                let Source::File(reader) = &self.readers[index] else { return };
                if reader.record_count() != expected.record_count {
                    let message = format!(
                        "the file changed after the trace set was opened: {} records, the pre-scan found {}",
                        reader.record_count(),
                        expected.record_count
                    );
                    let path = expected.path.clone();
                    self.pending_error.get_or_insert(TraceError::Corrupt {
                        path,
                        offset: 0,
                        message,
                    });
                }
            }
        }
    }
}

impl Iterator for Requests<'_> {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if let Some(error) = self.pending_error.take() {
            self.failed = true;
            return Some(Err(error));
        }
        if let Some(index) = self.single {
            return self.next_of(index);
        }
        let Reverse(head) = self.heap.pop()?;
        let file = head.file as usize;
        self.advance(file);
        Some(Ok(head.request))
    }
}
