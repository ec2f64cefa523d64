//! The model of a logger's log (Write Off-Loading 3.1; the engine is `somnus-logstore`):
//! the records a log holds and what they mean, following docs/format/log.md exactly —
//! record and segment header sizes, rotation to a new segment, the painting that
//! decides what a read sees (an invalidation hides its version and every older one),
//! capacity as the sum of segment sizes, and space that comes back only when a
//! segment is collected (its live records copied forward, the segment deleted).
//!
//! This is a log's metadata and geometry, not its bytes: the simulator charges the I/O
//! to the disks of the volume that hosts the log partition, and the real log is the
//! `logstore` crate's job. A test drives this model and the engine with the same
//! operations and checks that they agree on every read and on live bytes.

mod live;
mod paint;

use std::collections::{BTreeMap, BTreeSet};

use somnus_types::{ByteRange, LoggerId, Lsn, ObjectId, OwnerId, Version, join_touching};

use live::Live;
use paint::{Candidate, Won, paint, rank};

/// Bytes of a record header (docs/format/log.md, "Record").
pub const RECORD_HEADER_BYTES: u64 = 88;
/// Bytes of a segment header (docs/format/log.md, "Segment header").
pub const SEGMENT_HEADER_BYTES: u64 = 64;
/// The largest payload of one record.
pub const PAYLOAD_BYTES_MAX: u64 = 16 << 20;

/// A segment of the model, numbered as the engine numbers its files (from 1, growing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentNo(pub u64);

/// A record's identity in the model, in insertion order (ties go to the older).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct RecordId(pub(crate) u64);

/// The shape of a log: how big it may grow and how it is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogGeometry {
    /// The sum of segment sizes may not exceed it (invalidations and compaction copies
    /// may go one segment past, so a full log can always be emptied).
    pub capacity_bytes: u64,
    pub segment_bytes: u64,
    /// Collection takes a sealed segment whose live share, and whose copies' share, are
    /// at most this percentage of its size.
    pub compact_live_percent_max: u8,
}

impl LogGeometry {
    /// The engine's default segment size.
    pub const SEGMENT_BYTES_DEFAULT: u64 = 64 << 20;

    /// The engine's defaults (64 MiB segments, 50 %) for a log of `capacity_bytes`.
    pub fn with_capacity(capacity_bytes: u64) -> LogGeometry {
        let segment_bytes = LogGeometry::SEGMENT_BYTES_DEFAULT;
        LogGeometry { capacity_bytes, segment_bytes, compact_live_percent_max: 50 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoggerError {
    #[error("logger {logger} is full: {needed_bytes} bytes needed, {free_bytes} free")]
    Full { logger: LoggerId, needed_bytes: u64, free_bytes: u64 },
    #[error("a record of {size_bytes} bytes is larger than a record may be ({max_bytes})")]
    TooLarge { size_bytes: u64, max_bytes: u64 },
    #[error("{owner} appends {version:?}, not above its newest {newest:?}")]
    VersionNotGrowing { owner: OwnerId, version: Version, newest: Version },
    #[error("{owner} invalidates {version:?}, above its newest {newest:?}")]
    VersionAboveNewest { owner: OwnerId, version: Version, newest: Version },
    #[error("an empty range")]
    EmptyRange,
}

/// Where a record landed: what the host's disks write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub segment: SegmentNo,
    /// Offset of the record's header in its segment.
    pub offset_bytes: u64,
    /// Header plus payload.
    pub record_bytes: u64,
    /// A new segment was started for it (its header written too).
    pub new_segment: bool,
}

/// What one collection did: what the disks read and wrote, and the space it freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Collection {
    pub segment: SegmentNo,
    pub records_copied: u64,
    /// Data bytes copied (as the engine's report counts them).
    pub bytes_copied: u64,
    /// Bytes the copies take at the head, headers included: what the disks write.
    pub record_bytes_written: u64,
    /// The collected segment's size, freed.
    pub bytes_freed: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Data,
    Marker,
    DeleteAll,
}

#[derive(Clone, Copy, Debug)]
struct Record {
    kind: Kind,
    owner: OwnerId,
    object: ObjectId,
    range: ByteRange,
    version: Version,
    lsn: Lsn,
    segment: SegmentNo,
}

impl Record {
    fn candidate(&self, id: RecordId) -> Candidate {
        let marker = self.kind == Kind::Marker;
        let (range, version, segment) = (self.range, self.version, self.segment);
        Candidate { id, marker, range, version, segment }
    }

    fn bytes(&self) -> u64 {
        let payload = if self.kind == Kind::Data { self.range.size_bytes() } else { 0 };
        RECORD_HEADER_BYTES + payload
    }
}

/// Records by start, each with what a painting needs of it, to find those touching a
/// range without looking each up.
#[derive(Clone, Debug, Default)]
struct Spans {
    by_start: BTreeMap<(u64, RecordId), Span>,
    length_max: u64,
}

/// What [`Spans`] keeps of a record (a record never changes: copies are new ones).
#[derive(Clone, Copy, Debug)]
struct Span {
    end: u64,
    version: Version,
    segment: SegmentNo,
    lsn: Lsn,
}

impl Spans {
    fn insert(&mut self, id: RecordId, record: &Record) {
        let span = Span {
            end: record.range.end,
            version: record.version,
            segment: record.segment,
            lsn: record.lsn,
        };
        self.by_start.insert((record.range.start, id), span);
        self.length_max = self.length_max.max(record.range.size_bytes());
    }

    fn remove(&mut self, id: RecordId, range: ByteRange) {
        self.by_start.remove(&(range.start, id));
    }

    /// The records touching `range` that no delete-all below `hidden_below` hides, as
    /// candidates of a painting (`marker`: these are markers).
    fn touching(
        &self,
        range: ByteRange,
        hidden_below: Lsn,
        marker: bool,
    ) -> impl Iterator<Item = Candidate> + '_ {
        let low = range.start.saturating_sub(self.length_max);
        self.by_start
            .range((low, RecordId(0))..(range.end, RecordId(0)))
            .filter(move |&(_, span)| span.end > range.start && span.lsn >= hidden_below)
            .map(move |(&(start, id), span)| Candidate {
                id,
                marker,
                range: ByteRange::from_bounds(start, span.end),
                version: span.version,
                segment: span.segment,
            })
    }
}

/// The records of one object: data and markers apart, since a hot block gathers a
/// marker per write, and whether a marker must outlive its segment asks only about
/// data.
#[derive(Clone, Debug, Default)]
struct ObjectRecords {
    data: Spans,
    markers: Spans,
    /// The painting of the object's records, kept as they come and go: pieces by
    /// start, each with its end and the record that wins it (bytes no record covers
    /// have no piece). A record added changes only the pieces it outranks, and one
    /// removed only those it won, so a hot block's hundreds of records are not painted
    /// again at every write and marker.
    painted: BTreeMap<u64, (u64, Candidate)>,
}

impl ObjectRecords {
    fn is_empty(&self) -> bool {
        self.data.by_start.is_empty() && self.markers.by_start.is_empty()
    }

    fn spans_of(&mut self, kind: Kind) -> &mut Spans {
        if kind == Kind::Marker { &mut self.markers } else { &mut self.data }
    }
}

/// A segment of the model: its size, and its records in the order they were written
/// (and so of growing ids).
#[derive(Clone, Debug)]
struct Segment {
    size: u64,
    records: Vec<(RecordId, Record)>,
}

/// A logger's log, modelled.
#[derive(Clone, Debug)]
pub struct Logger {
    id: LoggerId,
    geometry: LogGeometry,
    used_bytes: u64,
    head: Option<(SegmentNo, u64)>,
    next_segment: u64,
    next_lsn: u64,
    next_record: u64,
    /// The segments, each with its records: a record is found through its segment
    /// (collection walks a segment's records; a painting names a record's segment).
    segments: BTreeMap<SegmentNo, Segment>,
    objects: BTreeMap<(OwnerId, ObjectId), ObjectRecords>,
    /// Per owner, the LSN of its latest delete-all: records below it are hidden.
    hidden_below: BTreeMap<OwnerId, Lsn>,
    /// Per owner, the newest version it ever appended (appends must grow).
    versions: BTreeMap<OwnerId, Version>,
    /// Visible data bytes per segment, kept as records come and go: collection looks
    /// at it after every write, and painting the whole log each time is quadratic.
    live: Live,
    /// Segments whose collection stopped `Full` partway: the copies made stay beside
    /// their records with the same version, so avoiding such a segment changes what
    /// its records win. Only there; elsewhere the kept painting tells what to copy.
    copied_beside: BTreeSet<SegmentNo>,
}

impl Logger {
    pub fn new(id: LoggerId, geometry: LogGeometry) -> Logger {
        assert!(
            geometry.segment_bytes > SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES,
            "logger {id}: a segment must hold a record"
        );
        assert!(
            geometry.capacity_bytes >= geometry.segment_bytes,
            "logger {id}: capacity below a segment"
        );
        assert!(geometry.compact_live_percent_max <= 100, "a share is a percentage");
        Logger {
            id,
            geometry,
            used_bytes: 0,
            head: None,
            next_segment: 1,
            next_lsn: 1,
            next_record: 0,
            segments: BTreeMap::new(),
            objects: BTreeMap::new(),
            hidden_below: BTreeMap::new(),
            versions: BTreeMap::new(),
            live: Live::default(),
            copied_beside: BTreeSet::new(),
        }
    }

    pub fn id(&self) -> LoggerId {
        self.id
    }

    pub fn geometry(&self) -> LogGeometry {
        self.geometry
    }

    /// The sum of the segments' sizes.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    /// Room for new records before the capacity.
    pub fn free_bytes(&self) -> u64 {
        self.geometry.capacity_bytes.saturating_sub(self.used_bytes)
    }

    /// The newest version `owner` appended (0 if none).
    pub fn newest_version(&self, owner: OwnerId) -> Version {
        self.versions.get(&owner).copied().unwrap_or(Version(0))
    }

    /// The segment new records go to, and its size so far.
    pub fn head(&self) -> Option<(SegmentNo, u64)> {
        self.head
    }

    pub fn record_count(&self) -> usize {
        self.segments.values().map(|segment| segment.records.len()).sum()
    }

    /// Every record, by segment and in order.
    fn records(&self) -> impl Iterator<Item = &(RecordId, Record)> {
        self.segments.values().flat_map(|segment| &segment.records)
    }

    /// The largest payload one record may carry.
    pub fn payload_limit(&self) -> u64 {
        PAYLOAD_BYTES_MAX
            .min(self.geometry.segment_bytes - SEGMENT_HEADER_BYTES - RECORD_HEADER_BYTES)
    }

    /// Whether a data record of `size_bytes` fits now.
    pub fn fits(&self, size_bytes: u64) -> bool {
        size_bytes <= self.payload_limit() && self.space_needed(size_bytes) <= self.free_bytes()
    }

    /// Whether each of data records of `sizes`, appended in turn, fits: a refused one
    /// takes no space, and those after it are tried as the engine would.
    pub fn fit_in_turn(&self, sizes: impl IntoIterator<Item = u64>) -> Vec<bool> {
        let (mut head, mut used) = (self.head.map(|(_, bytes)| bytes), self.used_bytes);
        let segment_bytes = self.geometry.segment_bytes;
        sizes
            .into_iter()
            .map(|size| {
                let record_bytes = RECORD_HEADER_BYTES + size;
                let rotates = head.is_none_or(|bytes| bytes + record_bytes > segment_bytes);
                let needed = record_bytes + if rotates { SEGMENT_HEADER_BYTES } else { 0 };
                let fits =
                    size <= self.payload_limit() && used + needed <= self.geometry.capacity_bytes;
                if fits {
                    used += needed;
                    let start = if rotates { SEGMENT_HEADER_BYTES } else { head.unwrap_or(0) };
                    head = Some(start + record_bytes);
                }
                fits
            })
            .collect()
    }

    /// The log space a data record of `size_bytes` takes if appended now: its header,
    /// and the header of a new segment when it starts one.
    pub fn space_needed(&self, size_bytes: u64) -> u64 {
        self.needed_bytes(RECORD_HEADER_BYTES + size_bytes)
    }

    /// The bytes a record of `record_bytes` takes at the head now, with the header of
    /// the new segment it starts if it does not fit in the head segment.
    fn needed_bytes(&self, record_bytes: u64) -> u64 {
        record_bytes + if self.rotates(record_bytes) { SEGMENT_HEADER_BYTES } else { 0 }
    }

    fn rotates(&self, record_bytes: u64) -> bool {
        self.head.is_none_or(|(_, bytes)| bytes + record_bytes > self.geometry.segment_bytes)
    }

    /// Appends data: durable and visible when it returns (in the model, at once). The
    /// version must be above any the owner appended.
    pub fn append(
        &mut self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
        version: Version,
    ) -> Result<Placement, LoggerError> {
        if range.is_empty() {
            return Err(LoggerError::EmptyRange);
        }
        if range.size_bytes() > self.payload_limit() {
            return Err(LoggerError::TooLarge {
                size_bytes: range.size_bytes(),
                max_bytes: self.payload_limit(),
            });
        }
        let newest = self.versions.get(&owner).copied().unwrap_or(Version(0));
        if version <= newest {
            return Err(LoggerError::VersionNotGrowing { owner, version, newest });
        }
        let lsn = Lsn(self.next_lsn);
        let record =
            Record { kind: Kind::Data, owner, object, range, version, lsn, segment: SegmentNo(0) };
        let placement = self.enqueue(record, false)?;
        self.versions.insert(owner, version);
        Ok(placement)
    }

    /// The log was opened again (a crash, a restart): as the engine does, it appends
    /// to a new segment, the one it wrote to before sealed.
    /// Each owner's newest version is then what its records still in the log say
    /// (the engine's recovery finds no other): an owner whose records collection took
    /// has none.
    pub fn reopen(&mut self) {
        self.seal_head();
        self.head = None;
        let mut versions: BTreeMap<OwnerId, Version> = BTreeMap::new();
        for (_, record) in self.records() {
            let newest = versions.entry(record.owner).or_insert(Version(0));
            *newest = (*newest).max(record.version);
        }
        versions.retain(|_, version| version.0 > 0);
        self.versions = versions;
    }

    /// Rebuilds what a reopened engine holds (`extents`: per owner, each visible
    /// extent with the version it reads as), as data records of those extents: reads
    /// and visibility as the engine's; space as if the log were just collected (an
    /// engine that finds itself fuller refuses an append, and collects).
    pub fn restored(
        id: LoggerId,
        geometry: LogGeometry,
        extents: impl IntoIterator<Item = (OwnerId, ObjectId, ByteRange, Version)>,
    ) -> Result<Logger, LoggerError> {
        let mut logger = Logger::new(id, geometry);
        for (owner, object, range, version) in extents {
            if range.is_empty() || range.size_bytes() > logger.payload_limit() {
                continue;
            }
            let lsn = Lsn(logger.next_lsn);
            let record = Record {
                kind: Kind::Data,
                owner,
                object,
                range,
                version,
                lsn,
                segment: SegmentNo(0),
            };
            // Pieces of one write share its version: growth is not asked of them (the
            // reopen below sets each owner's newest from the records).
            logger.enqueue(record, true)?;
        }
        logger.reopen();
        Ok(logger)
    }

    /// Appends a deletion marker: `version` and every older version of `range` are no
    /// longer read. The version may not be above the owner's newest.
    pub fn invalidate(
        &mut self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
        version: Version,
    ) -> Result<Placement, LoggerError> {
        if range.is_empty() {
            return Err(LoggerError::EmptyRange);
        }
        let newest = self.versions.get(&owner).copied().unwrap_or(Version(0));
        if version > newest {
            return Err(LoggerError::VersionAboveNewest { owner, version, newest });
        }
        let lsn = Lsn(self.next_lsn);
        let record = Record {
            kind: Kind::Marker,
            owner,
            object,
            range,
            version,
            lsn,
            segment: SegmentNo(0),
        };
        self.enqueue(record, true)
    }

    /// Appends a delete-all: every earlier record of `owner` is hidden.
    pub fn delete_all(&mut self, owner: OwnerId) -> Result<Placement, LoggerError> {
        let lsn = Lsn(self.next_lsn);
        let record = Record {
            kind: Kind::DeleteAll,
            owner,
            object: ObjectId(0),
            range: ByteRange::new(0, 0),
            version: Version(0),
            lsn,
            segment: SegmentNo(0),
        };
        self.enqueue(record, true)
    }

    /// Writes `record` at the head (a new segment if it does not fit), or refuses it
    /// whole when the capacity (plus a segment of `headroom`) would be passed.
    fn enqueue(&mut self, mut record: Record, headroom: bool) -> Result<Placement, LoggerError> {
        let record_bytes = record.bytes();
        let new_segment = self.rotates(record_bytes);
        let needed_bytes = self.needed_bytes(record_bytes);
        let capacity =
            self.geometry.capacity_bytes + if headroom { self.geometry.segment_bytes } else { 0 };
        if self.used_bytes + needed_bytes > capacity {
            return Err(LoggerError::Full {
                logger: self.id,
                needed_bytes,
                free_bytes: self.free_bytes(),
            });
        }
        if new_segment {
            self.seal_head();
            let segment = SegmentNo(self.next_segment);
            self.next_segment += 1;
            let records = Vec::new();
            self.segments.insert(segment, Segment { size: SEGMENT_HEADER_BYTES, records });
            self.used_bytes += SEGMENT_HEADER_BYTES;
            self.head = Some((segment, SEGMENT_HEADER_BYTES));
        }
        let Some((segment, offset_bytes)) = self.head else { unreachable!("a head was just made") };
        assert!(
            offset_bytes + record_bytes <= self.geometry.segment_bytes,
            "a record past its segment"
        );
        self.head = Some((segment, offset_bytes + record_bytes));
        self.used_bytes += record_bytes;
        self.next_lsn = self.next_lsn.max(record.lsn.0 + 1);
        record.segment = segment;
        self.insert(record);
        Ok(Placement { segment, offset_bytes, record_bytes, new_segment })
    }

    /// The head segment (if any) takes no more records: its size is final.
    fn seal_head(&mut self) {
        let Some((head, _)) = self.head else { return };
        let Some(segment) = self.segments.get(&head) else {
            unreachable!("a head segment the model does not hold")
        };
        self.live.seal(head, segment.size);
    }

    fn insert(&mut self, record: Record) {
        let id = RecordId(self.next_record);
        self.next_record += 1;
        let Some(segment) = self.segments.get_mut(&record.segment) else {
            unreachable!("a record in a segment the model does not hold")
        };
        segment.size += record.bytes();
        segment.records.push((id, record));
        if record.kind == Kind::DeleteAll {
            let hidden = self.hidden_below.entry(record.owner).or_insert(Lsn(0));
            *hidden = (*hidden).max(record.lsn);
            self.repaint_owner(record.owner);
            return;
        }
        let object = self.objects.entry((record.owner, record.object)).or_default();
        object.spans_of(record.kind).insert(id, &record);
        self.paint_over(record.owner, record.object, record.candidate(id));
    }

    /// Paints `over` (a record just added) onto its object's painting: it takes the
    /// pieces of its range it outranks and the bytes no record covered; each segment's
    /// live bytes follow the data pieces that change hands.
    fn paint_over(&mut self, owner: OwnerId, object: ObjectId, over: Candidate) {
        let Some(records) = self.objects.get_mut(&(owner, object)) else { return };
        let painted = &mut records.painted;
        let range = over.range;
        split_piece_at(painted, range.start);
        split_piece_at(painted, range.end);
        let pieces: Vec<(u64, u64, Candidate)> =
            painted.range(range.start..range.end).map(|(&s, &(e, w))| (s, e, w)).collect();
        let mut at = range.start;
        let mut taken = Vec::new();
        for (start, end, winner) in pieces {
            if at < start {
                taken.push((at, start, None));
            }
            if rank(&over, None) > rank(&winner, None) {
                taken.push((start, end, Some(winner)));
            }
            at = end;
        }
        if at < range.end {
            taken.push((at, range.end, None));
        }
        for (start, end, before) in taken {
            if let Some(before) = before {
                credit(&mut self.live, &before, end - start, false);
            }
            credit(&mut self.live, &over, end - start, true);
            painted.insert(start, (end, over));
        }
        join_pieces(painted, range);
    }

    /// Paints again the pieces `gone` (a record just taken out of the object's indexes)
    /// won, from the records left.
    fn paint_without(&mut self, owner: OwnerId, object: ObjectId, gone: Candidate) {
        let range = gone.range;
        let won = self.kept_pieces_won(owner, object, &gone);
        let repainted: Vec<(ByteRange, Vec<Won>)> = won
            .into_iter()
            .map(|piece| (piece, paint(&self.candidates(owner, object, piece), piece, None).0))
            .collect();
        let Some(records) = self.objects.get_mut(&(owner, object)) else { return };
        for (piece, winners) in repainted {
            records.painted.remove(&piece.start);
            credit(&mut self.live, &gone, piece.size_bytes(), false);
            for won in winners {
                credit(&mut self.live, &won.winner, won.range.size_bytes(), true);
                records.painted.insert(won.range.start, (won.range.end, won.winner));
            }
        }
        join_pieces(&mut records.painted, range);
    }

    /// Paints every object of `owner` anew: a delete-all changes what they all show.
    fn repaint_owner(&mut self, owner: OwnerId) {
        let objects: Vec<ObjectId> = self
            .objects
            .range((owner, ObjectId(0))..=(owner, ObjectId(u64::MAX)))
            .map(|(&(_, object), _)| object)
            .collect();
        for object in objects {
            let key = (owner, object);
            let painted = self.objects.get_mut(&key).map(|r| std::mem::take(&mut r.painted));
            for (start, (end, winner)) in painted.into_iter().flatten() {
                credit(&mut self.live, &winner, end - start, false);
            }
            let Some(span) = self.data_span(owner, object) else { continue };
            let (won, _) = paint(&self.candidates(owner, object, span), span, None);
            let Some(records) = self.objects.get_mut(&key) else { continue };
            for piece in won {
                credit(&mut self.live, &piece.winner, piece.range.size_bytes(), true);
                records.painted.insert(piece.range.start, (piece.range.end, piece.winner));
            }
        }
    }
}

/// Adds (or takes) `bytes` to the live bytes of `winner`'s segment if it is data.
fn credit(live: &mut Live, winner: &Candidate, bytes: u64, add: bool) {
    if winner.marker {
        return;
    }
    live.credit(winner.segment, bytes, add);
}

/// Cuts the piece that spans `at` in two there.
fn split_piece_at(painted: &mut BTreeMap<u64, (u64, Candidate)>, at: u64) {
    let Some((&start, &(end, winner))) = painted.range(..at).next_back() else { return };
    if start < at && at < end {
        painted.insert(start, (at, winner));
        painted.insert(at, (end, winner));
    }
}

/// Joins touching pieces of one winner from the piece before `range` to the one after.
fn join_pieces(painted: &mut BTreeMap<u64, (u64, Candidate)>, range: ByteRange) {
    let from = painted.range(..range.start).next_back().map_or(range.start, |(&s, _)| s);
    let pieces: Vec<(u64, u64, Candidate)> =
        painted.range(from..=range.end).map(|(&s, &(e, w))| (s, e, w)).collect();
    let mut last: Option<(u64, u64, RecordId)> = None;
    for (start, end, winner) in pieces {
        match last {
            Some((first, last_end, id)) if last_end == start && id == winner.id => {
                painted.remove(&start);
                painted.insert(first, (end, winner));
                last = Some((first, end, id));
            }
            _ => last = Some((start, end, winner.id)),
        }
    }
}

impl Logger {
    /// The records of an object that touch `range` and no delete-all hides.
    fn candidates(&self, owner: OwnerId, object: ObjectId, range: ByteRange) -> Vec<Candidate> {
        let Some(records) = self.objects.get(&(owner, object)) else { return Vec::new() };
        let hidden_below = self.hidden_below.get(&owner).copied().unwrap_or(Lsn(0));
        let data = records.data.touching(range, hidden_below, false);
        data.chain(records.markers.touching(range, hidden_below, true)).collect()
    }

    /// What a read of `range` sees: the data pieces and their versions in order, and
    /// the bytes the log does not hold.
    pub fn read(
        &self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
    ) -> (Vec<(ByteRange, Version)>, Vec<ByteRange>) {
        let (won, mut missing) = self.painted(owner, object, range);
        #[cfg(feature = "expensive-checks")]
        {
            let anew = paint(&self.candidates(owner, object, range), range, None);
            assert_eq!((&won, &missing), (&anew.0, &anew.1), "logger {}: painting kept", self.id);
        }
        let mut data = Vec::with_capacity(won.len());
        for piece in won {
            if piece.winner.marker {
                missing.push(piece.range);
            } else {
                data.push((piece.range, piece.winner.version));
            }
        }
        missing.sort_by_key(|range| range.start);
        (data, join_touching(missing))
    }

    /// The pieces of `range` in the painting kept of the object, as a painting of its
    /// records anew would give them (adjacent pieces of one winner joined), and the
    /// bytes no record covers: a read of a hot block without painting its hundreds of
    /// records.
    fn painted(
        &self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
    ) -> (Vec<Won>, Vec<ByteRange>) {
        let (mut won, mut missing): (Vec<Won>, Vec<ByteRange>) = (Vec::new(), Vec::new());
        let mut at = range.start;
        for (piece, winner) in self.kept_pieces(owner, object, range) {
            if at < piece.start {
                missing.push(ByteRange::from_bounds(at, piece.start));
            }
            match won.last_mut() {
                Some(last) if last.range.end == piece.start && last.winner.id == winner.id => {
                    last.range = ByteRange::from_bounds(last.range.start, piece.end);
                }
                _ => won.push(Won { range: piece, winner }),
            }
            at = piece.end;
        }
        if at < range.end {
            missing.push(ByteRange::from_bounds(at, range.end));
        }
        (won, missing)
    }

    /// Whether every byte of `range` reads as `version`.
    pub fn holds(
        &self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
        version: Version,
    ) -> bool {
        self.reads_all(owner, object, range, |v| v == version)
    }

    /// Whether a read of `version` over `range` can be served: every byte reads as that
    /// version or a newer one. (A newer one is a write of its owner whose answer the
    /// owner has not seen yet; the log never shows an older one over a newer.)
    pub fn serves(
        &self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
        version: Version,
    ) -> bool {
        self.reads_all(owner, object, range, |v| v >= version)
    }

    /// Whether a read of `range` sees data on every byte, each piece of a version
    /// `accept` takes: `read`'s answer without building it.
    fn reads_all(
        &self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
        accept: impl Fn(Version) -> bool,
    ) -> bool {
        let (won, missing) = self.painted(owner, object, range);
        missing.is_empty() && won.iter().all(|p| !p.winner.marker && accept(p.winner.version))
    }

    /// Every data piece a read of `owner` would see, by object: what a manager
    /// rebuilding its redirect cache after a crash asks for (004 3.2).
    pub fn extents(&self, owner: OwnerId) -> Vec<(ObjectId, ByteRange, Version)> {
        let mut extents = Vec::new();
        let objects = self.objects.range((owner, ObjectId(0))..=(owner, ObjectId(u64::MAX)));
        for (&(_, object), _) in objects {
            let Some(span) = self.data_span(owner, object) else { continue };
            for (range, version) in self.read(owner, object, span).0 {
                extents.push((object, range, version));
            }
        }
        extents
    }

    /// The smallest range covering every record of an object.
    fn data_span(&self, owner: OwnerId, object: ObjectId) -> Option<ByteRange> {
        let records = self.objects.get(&(owner, object))?;
        let spans = [&records.data, &records.markers];
        let start = spans.iter().filter_map(|s| s.by_start.keys().next()).map(|k| k.0).min()?;
        let end = spans.iter().flat_map(|s| s.by_start.values()).map(|span| span.end).max()?;
        Some(ByteRange::from_bounds(start, end))
    }

    /// Visible data bytes per segment (ties to the older record), as the engine counts
    /// them for collection: the whole log painted anew. `live` must equal it.
    #[cfg(any(test, feature = "expensive-checks"))]
    fn live_bytes_repainted(&self) -> BTreeMap<SegmentNo, u64> {
        let mut live: BTreeMap<SegmentNo, u64> = BTreeMap::new();
        for &(owner, object) in self.objects.keys() {
            let Some(span) = self.data_span(owner, object) else { continue };
            let (won, _) = paint(&self.candidates(owner, object, span), span, None);
            for piece in won.iter().filter(|piece| !piece.winner.marker) {
                *live.entry(piece.winner.segment).or_insert(0) += piece.range.size_bytes();
            }
        }
        live
    }

    /// Visible data bytes per segment, as kept up to date; with expensive checks, also
    /// painted anew and compared, and the order by share checked.
    fn live(&self) -> &Live {
        #[cfg(feature = "expensive-checks")]
        self.assert_live_kept();
        &self.live
    }

    /// The live bytes kept equal those of a painting anew, and the order of the
    /// sealed segments by share holds each with its live bytes and size.
    #[cfg(any(test, feature = "expensive-checks"))]
    fn assert_live_kept(&self) {
        let kept = self.live.nonzero();
        assert_eq!(kept, self.live_bytes_repainted(), "logger {}: live bytes drifted", self.id);
        assert_eq!(self.live.total(), kept.values().sum::<u64>(), "logger {}: total", self.id);
        let head = self.head.map(|(segment, _)| segment);
        let sealed: BTreeMap<SegmentNo, u64> = self
            .segments
            .iter()
            .filter(|(segment, _)| Some(**segment) != head)
            .map(|(&segment, of)| (segment, of.size))
            .collect();
        self.live.assert_ordered(&sealed);
    }

    /// The data bytes a read would see, across owners.
    pub fn live_bytes(&self) -> u64 {
        self.live().total()
    }

    /// Every segment: its number, size and live data bytes.
    pub fn segments(&self) -> Vec<(SegmentNo, u64, u64)> {
        let live = self.live();
        let segment = |(&segment, of): (&SegmentNo, &Segment)| (segment, of.size, live.of(segment));
        self.segments.iter().map(segment).collect()
    }
}

impl Logger {
    /// The records of `segment` that must outlive it (docs/format/log.md, "Garbage
    /// collection"), in the segment's order: the bytes of data it holds that win the
    /// painting; a marker while data of its version or older remains elsewhere; an
    /// owner's latest delete-all while records below it remain elsewhere.
    fn plan_collection(&self, segment: SegmentNo) -> Vec<Record> {
        self.plan_collection_within(segment, |_| true).unwrap_or_default()
    }

    /// [`Logger::plan_collection`], given up (`None`) as soon as the copies' bytes are
    /// more than `fits` takes: a segment found too full is looked at again at every
    /// collection until its records die, and most of the records walked by a geared
    /// replay's collections were those of segments too full.
    fn plan_collection_within(
        &self,
        segment: SegmentNo,
        fits: impl Fn(u64) -> bool,
    ) -> Option<Vec<Record>> {
        let Some(of) = self.segments.get(&segment) else { return Some(Vec::new()) };
        // Avoiding the segment only demotes its records: a data record that wins no
        // piece of the painting kept up to date wins none here. In a segment with no
        // live byte none does (most segments collected hold only markers' victims).
        let any_live = self.live.of(segment) > 0;
        let (mut copies, mut copy_bytes, mut counted) = (Vec::new(), 0, 0);
        for &(id, record) in &of.records {
            let hidden_below = self.hidden_below.get(&record.owner).copied().unwrap_or(Lsn(0));
            if record.lsn < hidden_below {
                continue;
            }
            match record.kind {
                // Most of a segment collected, which is mostly dead: found without
                // painting.
                Kind::Data if !any_live => {
                    #[cfg(feature = "expensive-checks")]
                    assert!(
                        self.pieces_won_avoiding(&record, id, segment).is_empty(),
                        "logger {}: {id:?} wins a piece only when its segment is avoided",
                        self.id
                    );
                }
                Kind::Data => {
                    let pieces = self.pieces_to_copy(&record, id, segment);
                    copies.extend(pieces.into_iter().map(|range| Record { range, ..record }));
                }
                Kind::Marker => {
                    let Some(object) = self.objects.get(&(record.owner, record.object)) else {
                        continue;
                    };
                    let older_elsewhere = object
                        .data
                        .touching(record.range, hidden_below, false)
                        .any(|c| c.segment != segment && c.version <= record.version);
                    if older_elsewhere {
                        copies.push(record);
                    }
                }
                Kind::DeleteAll => {
                    if self.delete_all_needed_elsewhere(record, segment) {
                        copies.push(record);
                    }
                }
            }
            copy_bytes += copies[counted..].iter().map(Record::bytes).sum::<u64>();
            counted = copies.len();
            if !fits(copy_bytes) {
                return None;
            }
        }
        Some(copies)
    }

    /// The pieces of data record `id` that win the painting when records of `segment`
    /// lose ties to others (what its collection must copy).
    fn pieces_won_avoiding(
        &self,
        record: &Record,
        id: RecordId,
        segment: SegmentNo,
    ) -> Vec<ByteRange> {
        let candidates = self.candidates(record.owner, record.object, record.range);
        let (won, _) = paint(&candidates, record.range, Some(segment));
        let mine = won.into_iter().filter(|piece| piece.winner.id == id);
        join_touching(mine.map(|piece| piece.range).collect())
    }

    /// What collecting `segment` must copy of its data record `id`: the pieces it wins
    /// when the segment's records lose ties ([`Logger::pieces_won_avoiding`]). Losing
    /// ties changes a winner only where another data record of the same owner, object
    /// and version covers it, and such twins are only copies a collection stopped
    /// `Full` left beside their records (an owner appends a version once): anywhere
    /// else the pieces the record wins in the kept painting are the answer, without
    /// painting a hot block's hundreds of records.
    fn pieces_to_copy(&self, record: &Record, id: RecordId, segment: SegmentNo) -> Vec<ByteRange> {
        if self.copied_beside.contains(&segment) {
            return self.pieces_won_avoiding(record, id, segment);
        }
        let won =
            join_touching(self.kept_pieces_won(record.owner, record.object, &record.candidate(id)));
        #[cfg(feature = "expensive-checks")]
        assert_eq!(
            won,
            self.pieces_won_avoiding(record, id, segment),
            "logger {}: {id:?}'s pieces in the kept painting are not what its collection copies",
            self.id
        );
        won
    }

    /// The pieces `candidate` wins in the kept painting of its object, in order. A
    /// record's pieces lie within its range, so they start inside it.
    fn kept_pieces_won(
        &self,
        owner: OwnerId,
        object: ObjectId,
        candidate: &Candidate,
    ) -> Vec<ByteRange> {
        let Some(records) = self.objects.get(&(owner, object)) else { return Vec::new() };
        let range = candidate.range;
        records
            .painted
            .range(range.start..range.end)
            .filter(|(_, (_, winner))| winner.id == candidate.id)
            .map(|(&start, &(end, _))| ByteRange::from_bounds(start, end))
            .collect()
    }

    /// The pieces of the object's kept painting that overlap `range`, cut to it, in
    /// order: the piece that starts at or before the range (it may reach into it), then
    /// those that start inside it.
    fn kept_pieces(
        &self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
    ) -> impl Iterator<Item = (ByteRange, Candidate)> + '_ {
        let painted = self.objects.get(&(owner, object)).map(|records| &records.painted);
        let before = painted.and_then(|p| p.range(..=range.start).next_back());
        let inside = painted.into_iter().flat_map(move |p| p.range(range.start + 1..range.end));
        before.into_iter().chain(inside).filter_map(move |(&start, &(end, winner))| {
            ByteRange::from_bounds(start, end).intersection(range).map(|piece| (piece, winner))
        })
    }

    /// Whether a delete-all of `segment` must be kept: no copy of it lives elsewhere,
    /// and records of its owner below it do.
    fn delete_all_needed_elsewhere(&self, record: Record, segment: SegmentNo) -> bool {
        let elsewhere = || {
            let others = self.segments.iter().filter(|(other, _)| **other != segment);
            let records = others.flat_map(|(_, of)| of.records.iter().map(|(_, r)| r));
            records.filter(|other| other.owner == record.owner)
        };
        let copy_elsewhere =
            elsewhere().any(|other| other.kind == Kind::DeleteAll && other.lsn == record.lsn);
        let older_elsewhere =
            elsewhere().any(|other| other.kind != Kind::DeleteAll && other.lsn < record.lsn);
        !copy_elsewhere && older_elsewhere
    }

    /// Collects `segment` however little it frees: its records that must outlive it are
    /// copied to the head (with their LSN and version), then it is deleted. `Ok(None)`
    /// for the head segment or one the log does not hold. A copy that does not fit ends
    /// the collection with `Full`: the segment stays, and the copies made stay beside
    /// their originals (they mean the same), as the engine leaves them.
    pub fn compact_segment(
        &mut self,
        segment: SegmentNo,
    ) -> Result<Option<Collection>, LoggerError> {
        if self.head.is_some_and(|(head, _)| head == segment)
            || !self.segments.contains_key(&segment)
        {
            return Ok(None);
        }
        let copies = self.plan_collection(segment);
        self.collect(segment, copies).map(Some)
    }

    /// One step of garbage collection, as the engine's `compact`: among the sealed
    /// segments whose live share is at most `compact_live_percent_max`, fewest live first
    /// (eight at most are looked at), the first whose copies take at most that share too.
    pub fn compact(&mut self) -> Result<Option<Collection>, LoggerError> {
        self.compact_skipping(&mut BTreeSet::new())
    }

    /// Collection steps until none qualifies, as the engine's `collect_garbage`: a
    /// segment whose copies took too much is not looked at again in the same run.
    /// Returns the bytes the copies wrote.
    pub fn collect_garbage(&mut self) -> Result<u64, LoggerError> {
        let (mut written, mut too_full) = (0, BTreeSet::new());
        while let Some(collection) = self.compact_skipping(&mut too_full)? {
            written += collection.record_bytes_written;
        }
        Ok(written)
    }

    /// [`Logger::compact`] among the segments not in `too_full`, adding to it those
    /// whose copies took too much.
    fn compact_skipping(
        &mut self,
        too_full: &mut BTreeSet<SegmentNo>,
    ) -> Result<Option<Collection>, LoggerError> {
        const LOOK_AT_MAX: usize = 8;
        let percent = self.geometry.compact_live_percent_max;
        // Fewest live first (a total order: the segment breaks ties), kept in that
        // order as live bytes change; the head is not sealed, so not among them.
        #[cfg(feature = "expensive-checks")]
        self.assert_live_kept();
        let candidates: Vec<live::Share> = self
            .live
            .fewest_live(percent)
            .filter(|share| !too_full.contains(&share.segment))
            .take(LOOK_AT_MAX)
            .collect();
        for share in candidates {
            let fits = |copy_bytes| live::Share { live: copy_bytes, ..share }.at_most(percent);
            match self.plan_collection_within(share.segment, fits) {
                Some(copies) => return self.collect(share.segment, copies).map(Some),
                None => too_full.insert(share.segment),
            };
        }
        Ok(None)
    }

    fn collect(
        &mut self,
        segment: SegmentNo,
        copies: Vec<Record>,
    ) -> Result<Collection, LoggerError> {
        let mut record_bytes_written = 0;
        let records_copied = copies.len() as u64;
        let bytes_copied = copies
            .iter()
            .filter(|copy| copy.kind == Kind::Data)
            .map(|copy| copy.range.size_bytes())
            .sum();
        for copy in copies {
            // Copies may go one segment past the capacity, so a full log can empty.
            let placement = self.enqueue(copy, true).inspect_err(|_| {
                self.copied_beside.insert(segment);
            })?;
            record_bytes_written += placement.record_bytes
                + if placement.new_segment { SEGMENT_HEADER_BYTES } else { 0 };
        }
        let Some(Segment { size: bytes_freed, records }) = self.segments.remove(&segment) else {
            unreachable!("collect of a segment the model does not hold")
        };
        for (at, &(id, record)) in records.iter().enumerate() {
            self.remove_record(id, record, &records[at + 1..]);
        }
        let left = self.live.remove(segment);
        assert_eq!(left, 0, "logger {}: a collected segment still had live bytes", self.id);
        self.copied_beside.remove(&segment);
        self.used_bytes -= bytes_freed;
        Ok(Collection { segment, records_copied, bytes_copied, record_bytes_written, bytes_freed })
    }

    /// Takes `record` out of the log, its segment's records after it (`rest`) not yet
    /// (its segment is out of the model's map while its records are taken one by one).
    fn remove_record(&mut self, id: RecordId, record: Record, rest: &[(RecordId, Record)]) {
        if record.kind == Kind::DeleteAll {
            let latest = self
                .records()
                .chain(rest)
                .map(|(_, other)| other)
                .filter(|other| other.owner == record.owner && other.kind == Kind::DeleteAll)
                .map(|other| other.lsn)
                .max();
            match latest {
                Some(lsn) => self.hidden_below.insert(record.owner, lsn),
                None => self.hidden_below.remove(&record.owner),
            };
            self.repaint_owner(record.owner);
            return;
        }
        let key = (record.owner, record.object);
        if let Some(object) = self.objects.get_mut(&key) {
            object.spans_of(record.kind).remove(id, record.range);
        }
        let hidden_below = self.hidden_below.get(&record.owner).copied().unwrap_or(Lsn(0));
        if record.lsn >= hidden_below {
            self.paint_without(record.owner, record.object, record.candidate(id));
        }
        if self.objects.get(&key).is_some_and(|object| object.is_empty()) {
            self.objects.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_pcg::Pcg64;

    use super::*;

    /// A random log: two owners crowded into a small space, appends, markers,
    /// delete-alls and collections, with the checks of the kept state after each step.
    fn random_log(seed: u64, segments: u64, mut check: impl FnMut(&Logger)) -> Logger {
        let mut rng = Pcg64::seed_from_u64(seed);
        let geometry = LogGeometry {
            capacity_bytes: segments * 4096,
            segment_bytes: 4096,
            compact_live_percent_max: 50,
        };
        let mut log = Logger::new(LoggerId(0), geometry);
        for _ in 0..300 {
            let owner = OwnerId(rng.random_range(1..3));
            let start = rng.random_range(0..16) * 64;
            let range = ByteRange::new(start, rng.random_range(1..8) * 64);
            let newest = log.newest_version(owner);
            let _ = match rng.random_range(0..20) {
                0 => log.delete_all(owner).map(drop),
                1..=5 if newest > Version(0) => {
                    let version = Version(rng.random_range(1..=newest.0));
                    log.invalidate(owner, OBJECT, range, version).map(drop)
                }
                6..=7 => log.compact().map(drop),
                // However much it copies: in a small log, it may stop full.
                8 => {
                    log.compact_segment(SegmentNo(rng.random_range(1..=log.next_segment))).map(drop)
                }
                _ => log.append(owner, OBJECT, range, Version(newest.0 + 1)).map(drop),
            };
            check(&log);
            let start = rng.random_range(0..24) * 64;
            let range = ByteRange::new(start, rng.random_range(1..16) * 64);
            for owner in [OwnerId(1), OwnerId(2)] {
                log.assert_painted_as_anew(owner, range, seed);
            }
        }
        log
    }

    #[test]
    fn live_bytes_kept_up_to_date_equal_a_painting_anew() {
        // Goal: the live bytes kept per segment as records come and go are those of a
        // painting of the whole log, and what collection copies of a record is what a
        // painting anew gives it, through appends, markers, delete-alls and
        // collections, in logs roomy and small.
        for seed in 0..300 {
            let segments = if seed % 2 == 0 { 16 } else { 3 };
            random_log(seed, segments, |log| {
                log.assert_copies_as_painted_anew(seed);
                log.assert_live_kept();
            });
        }
    }

    impl Logger {
        /// What a read takes from the kept painting over `range` is what a painting of
        /// the object's records anew gives.
        fn assert_painted_as_anew(&self, owner: OwnerId, range: ByteRange, seed: u64) {
            let anew = paint(&self.candidates(owner, OBJECT, range), range, None);
            assert_eq!(self.painted(owner, OBJECT, range), anew, "seed {seed}: {range:?}");
        }

        /// What collection copies of every data record ([`Logger::pieces_to_copy`]) is
        /// what a painting anew avoiding its segment gives it.
        fn assert_copies_as_painted_anew(&self, seed: u64) {
            for &(id, ref record) in self.records() {
                let hidden_below = self.hidden_below.get(&record.owner).copied().unwrap_or(Lsn(0));
                if record.kind != Kind::Data || record.lsn < hidden_below {
                    continue;
                }
                let anew = self.pieces_won_avoiding(record, id, record.segment);
                let copied = self.pieces_to_copy(record, id, record.segment);
                assert_eq!(copied, anew, "seed {seed}: {id:?} in {:?}", record.segment);
            }
        }
    }

    #[test]
    fn a_broken_kept_painting_is_caught() {
        // Goal: the check above can fail: a record that lost its pieces in the kept
        // painting, but not in a painting anew, is found.
        let mut log = Logger::new(LoggerId(0), LogGeometry::with_capacity(1 << 30));
        log.append(OWNER, OBJECT, r(0, 8192), Version(1)).unwrap();
        log.assert_copies_as_painted_anew(0);
        let object = log.objects.get_mut(&(OWNER, OBJECT)).unwrap();
        object.painted.clear();
        let caught = std::panic::catch_unwind(|| log.assert_copies_as_painted_anew(0));
        assert!(caught.is_err(), "a kept painting that lost a record's pieces");
        let caught = std::panic::catch_unwind(|| log.assert_painted_as_anew(OWNER, r(0, 8192), 0));
        assert!(caught.is_err(), "a read of a kept painting that lost a record's pieces");
    }

    #[test]
    fn copies_left_beside_their_records_are_caught_if_forgotten() {
        // Goal: where a collection stopped full, leaving twins (copies beside their
        // records, the same version), what it copies next is still a painting's; and
        // the check above can fail there: a log that forgot which segment its twins
        // are beside is found copying what they already hold.
        let geometry = LogGeometry {
            capacity_bytes: 2 * 4096,
            segment_bytes: 4096,
            compact_live_percent_max: 50,
        };
        let mut log = Logger::new(LoggerId(0), geometry);
        let mut version = 0;
        // Two segments of live data, each record its own range.
        while log
            .append(OWNER, OBJECT, r(version * 448, (version + 1) * 448), Version(version + 1))
            .is_ok()
        {
            version += 1;
        }
        // Markers of another object (they hide nothing) take most of the room past the
        // capacity: two copies fit in what is left.
        while log.used_bytes + 1200 < 3 * 4096 {
            log.invalidate(OWNER, ObjectId(1), r(0, 64), Version(1)).unwrap();
        }
        assert!(
            matches!(log.compact_segment(SegmentNo(1)), Err(LoggerError::Full { .. })),
            "the first segment's copies do not fit"
        );
        assert_eq!(log.copied_beside, BTreeSet::from([SegmentNo(1)]));
        log.assert_copies_as_painted_anew(0);
        log.assert_live_kept();
        let mut forgetful = log.clone();
        forgetful.copied_beside.clear();
        let caught = std::panic::catch_unwind(|| forgetful.assert_copies_as_painted_anew(0));
        assert!(caught.is_err(), "a log that forgot its twins copies them again");
    }

    fn r(start: u64, end: u64) -> ByteRange {
        ByteRange::from_bounds(start, end)
    }

    const OWNER: OwnerId = OwnerId(3);
    const OBJECT: ObjectId = ObjectId(0);

    #[test]
    fn an_invalidation_hides_its_version_and_older_never_newer() {
        // Goal: the meaning of docs/format/log.md: the highest version covering a byte
        // wins, a marker hides its version and older ones, a delete-all hides every
        // earlier record of its owner; space comes from segment and record headers.
        let mut log = Logger::new(LoggerId(0), LogGeometry::with_capacity(1 << 30));
        log.append(OWNER, OBJECT, r(0, 8192), Version(1)).unwrap();
        log.append(OWNER, OBJECT, r(4096, 12288), Version(2)).unwrap();
        assert_eq!(log.used_bytes(), SEGMENT_HEADER_BYTES + 2 * RECORD_HEADER_BYTES + 8192 + 8192);
        assert!(log.holds(OWNER, OBJECT, r(0, 4096), Version(1)));
        assert!(log.holds(OWNER, OBJECT, r(4096, 12288), Version(2)));
        log.invalidate(OWNER, OBJECT, r(0, 12288), Version(1)).unwrap();
        assert!(!log.holds(OWNER, OBJECT, r(0, 4096), Version(1)), "v1 hidden");
        assert!(log.holds(OWNER, OBJECT, r(4096, 12288), Version(2)), "v2 not hidden");
        assert_eq!(log.extents(OWNER), vec![(OBJECT, r(4096, 12288), Version(2))]);
        assert_eq!(log.live_bytes(), 8192);
        let error = log.append(OWNER, OBJECT, r(0, 512), Version(2)).unwrap_err();
        assert!(matches!(error, LoggerError::VersionNotGrowing { .. }), "{error}");
        let error = log.invalidate(OWNER, OBJECT, r(0, 512), Version(9)).unwrap_err();
        assert!(matches!(error, LoggerError::VersionAboveNewest { .. }), "{error}");
        log.delete_all(OWNER).unwrap();
        assert_eq!(log.extents(OWNER), vec![]);
        assert_eq!(log.live_bytes(), 0);
    }

    /// A log of `count` segments of 4 KiB.
    fn small_segments(count: u64) -> LogGeometry {
        LogGeometry {
            capacity_bytes: count * 4096,
            segment_bytes: 4096,
            compact_live_percent_max: 50,
        }
    }

    #[test]
    fn space_comes_back_only_when_a_segment_is_collected() {
        // Goal: invalidated records keep their space until their segment is collected;
        // a full log refuses a write whole; collection copies what is still live and
        // frees the segment; invalidations may use a segment of headroom.
        let mut log = Logger::new(LoggerId(7), small_segments(3));
        let record = 4096 - SEGMENT_HEADER_BYTES - RECORD_HEADER_BYTES;
        for version in 1..=3 {
            log.append(OWNER, OBJECT, r(0, record), Version(version)).unwrap();
        }
        assert_eq!(log.used_bytes(), 3 * 4096);
        let error = log.append(OWNER, OBJECT, r(0, 512), Version(4)).unwrap_err();
        assert!(matches!(error, LoggerError::Full { logger: LoggerId(7), .. }), "{error}");
        assert_eq!(log.record_count(), 3, "nothing written");
        log.invalidate(OWNER, OBJECT, r(0, record), Version(3)).unwrap();
        assert_eq!(
            log.used_bytes(),
            4 * 4096 - (4096 - SEGMENT_HEADER_BYTES - RECORD_HEADER_BYTES),
            "headroom"
        );
        assert_eq!(log.free_bytes(), 0, "invalidated space is not free yet");
        let collected = log.compact().unwrap().unwrap();
        assert_eq!((collected.segment, collected.records_copied), (SegmentNo(1), 0));
        assert_eq!(collected.bytes_freed, 4096);
        assert_eq!(log.live_bytes(), 0);
        // The marker is kept while older data remains elsewhere.
        let before = log.used_bytes();
        log.compact_segment(SegmentNo(2)).unwrap().unwrap();
        log.compact_segment(SegmentNo(3)).unwrap().unwrap();
        assert!(log.used_bytes() < before);
        assert!(log.fits(512));
    }

    #[test]
    fn a_record_that_starts_a_segment_needs_its_header_too() {
        // Goal: the space a write needs, which the node checks against reservations,
        // counts the new segment's header when the record does not fit in the head.
        let mut log = Logger::new(LoggerId(1), small_segments(4));
        let first = 4096 - SEGMENT_HEADER_BYTES - RECORD_HEADER_BYTES - 512;
        assert_eq!(log.space_needed(first), SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES + first);
        let before = log.free_bytes();
        log.append(OWNER, OBJECT, r(0, first), Version(1)).unwrap();
        assert_eq!(before - log.free_bytes(), SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES + first);
        // 512 bytes are left in the head: a 256-byte record stays there, a 1024-byte
        // one starts the next segment.
        assert_eq!(log.space_needed(256), RECORD_HEADER_BYTES + 256);
        assert_eq!(log.space_needed(1024), SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES + 1024);
        let before = log.free_bytes();
        log.append(OWNER, OBJECT, r(8192, 8192 + 1024), Version(2)).unwrap();
        assert_eq!(before - log.free_bytes(), SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES + 1024);
    }
}
