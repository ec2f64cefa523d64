//! The in-memory index of every record physically present in the log, and the rules
//! that turn that set into what a read sees and what garbage collection may drop.
//!
//! Visibility, per byte of an object (the *painting*): among the owner's records not
//! hidden by a `delete_all` (those with a lower LSN than the owner's latest one), the
//! record of the highest version covering the byte decides; a deletion marker wins a
//! tie with data of its own version. If the winner is data, the byte is in the log with
//! that record's bytes; if it is a marker, or nothing covers the byte, it is not.
//! So a marker hides its version and every older one, never a newer one (Sierra 3.3),
//! and the result depends only on which records exist, not on the order they were
//! found in: recovery and compaction copies (which keep LSN and version) cannot change it.
//!
//! Garbage, per record, given the segment being collected (records elsewhere stay):
//! - a data record's bytes are live where it wins the painting (ties between copies of
//!   one record going to the copy outside the collected segment);
//! - a marker is live while data of its version or older, not hidden by a
//!   `delete_all`, overlaps it in another segment (Sierra: a marker is dropped only
//!   when no older version of its data remains anywhere in the log);
//! - a `delete_all` is live while it is the owner's latest and records with lower LSNs
//!   remain in other segments.
//!
//! The index keeps, incrementally, the live (visible) data bytes per segment and per
//! owner: every change repaints the range it touches before and after.

use std::collections::BTreeMap;

use somnus_types::{ByteRange, Version, join_touching};

use crate::format::{RecordHeader, RecordKind};
use crate::{Lsn, ObjectId, OwnerId, SegmentId};

pub(crate) type EntryId = u64;

/// A data record or a deletion marker of one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) marker: bool,
    pub(crate) range: ByteRange,
    pub(crate) version: Version,
    pub(crate) lsn: Lsn,
    pub(crate) written_ms: u64,
    pub(crate) segment: SegmentId,
    /// Where the record's header starts in its segment.
    pub(crate) offset: u64,
}

/// A `delete_all` record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DeleteAllEntry {
    pub(crate) lsn: Lsn,
    pub(crate) written_ms: u64,
    pub(crate) segment: SegmentId,
    pub(crate) offset: u64,
}

/// A piece of a painted range: bytes a data record supplies, or bytes a marker hides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Painted {
    pub(crate) range: ByteRange,
    pub(crate) id: EntryId,
    pub(crate) entry: Entry,
}

/// A record that compaction must copy forward, with its original LSN and version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CopyItem {
    /// The copy's header: the source's, over the bytes to copy (for data, a part of
    /// the source record's range).
    pub(crate) header: RecordHeader,
    pub(crate) source_segment: SegmentId,
    pub(crate) source_offset: u64,
    /// The source record's whole range (data), to find `range` in its payload.
    pub(crate) source_range: ByteRange,
}

#[derive(Default)]
struct ObjectIndex {
    data: BTreeMap<(u64, EntryId), Entry>,
    markers: BTreeMap<(u64, EntryId), Entry>,
    /// Upper bounds of the lengths in each map, to find overlaps from a start key.
    data_len_max: u64,
    marker_len_max: u64,
}

impl ObjectIndex {
    /// The records overlapping `range` that no `delete_all` hides.
    fn overlapping(&self, range: ByteRange, hidden_below: Lsn, out: &mut Vec<(EntryId, Entry)>) {
        for (map, len_max) in
            [(&self.data, self.data_len_max), (&self.markers, self.marker_len_max)]
        {
            let low = range.start.saturating_sub(len_max);
            for (&(_, id), entry) in map.range((low, 0)..(range.end, 0)) {
                if entry.range.end > range.start && entry.lsn >= hidden_below {
                    out.push((id, *entry));
                }
            }
        }
    }

    /// The smallest range covering every data record.
    fn data_span(&self) -> Option<ByteRange> {
        let start = self.data.keys().next()?.0;
        let end = self.data.values().map(|entry| entry.range.end).max()?;
        Some(ByteRange::from_bounds(start, end))
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty() && self.markers.is_empty()
    }
}

/// Paints `range` from `candidates`: returns the covered pieces in order of start and
/// the uncovered rest. Ties of version between data records go to one outside `avoid`,
/// then to the lowest id.
fn paint(
    mut candidates: Vec<(EntryId, Entry)>,
    range: ByteRange,
    avoid: Option<SegmentId>,
) -> (Vec<Painted>, Vec<ByteRange>) {
    candidates.sort_by_key(|(id, entry)| {
        (std::cmp::Reverse(entry.version), !entry.marker, Some(entry.segment) == avoid, *id)
    });
    let mut uncovered: BTreeMap<u64, u64> = BTreeMap::new();
    if !range.is_empty() {
        uncovered.insert(range.start, range.end);
    }
    let mut painted = Vec::new();
    for (id, entry) in candidates {
        if uncovered.is_empty() {
            break;
        }
        let Some(clip) = entry.range.intersection(range) else { continue };
        let mut hits: Vec<(u64, u64)> = Vec::new();
        if let Some((&start, &end)) = uncovered.range(..=clip.start).next_back()
            && end > clip.start
        {
            hits.push((start, end));
        }
        hits.extend(uncovered.range(clip.start + 1..clip.end).map(|(&start, &end)| (start, end)));
        for (start, end) in hits {
            let piece = ByteRange::from_bounds(start.max(clip.start), end.min(clip.end));
            uncovered.remove(&start);
            if start < piece.start {
                uncovered.insert(start, piece.start);
            }
            if piece.end < end {
                uncovered.insert(piece.end, end);
            }
            painted.push(Painted { range: piece, id, entry });
        }
    }
    painted.sort_by_key(|piece| piece.range.start);
    let missing = uncovered.into_iter().map(|(start, end)| ByteRange::from_bounds(start, end));
    (painted, missing.collect())
}

/// Everything the index knows of one owner.
#[derive(Default)]
struct OwnerIndex {
    objects: BTreeMap<ObjectId, ObjectIndex>,
    delete_alls: BTreeMap<(Lsn, EntryId), DeleteAllEntry>,
    /// Records with a lower LSN are hidden: the LSN of the latest `delete_all`.
    hidden_below: Lsn,
    /// The highest version of any record of the owner present.
    version_max: Version,
    live_bytes: u64,
}

impl OwnerIndex {
    fn recompute_hidden_below(&mut self) {
        self.hidden_below = self.delete_alls.keys().next_back().map_or(Lsn(0), |&(lsn, _)| lsn);
    }
}

/// Where an entry is, to remove it with its segment.
#[derive(Clone, Copy, Debug)]
enum EntryRef {
    Object { owner: OwnerId, object: ObjectId, marker: bool, start: u64, id: EntryId },
    DeleteAll { owner: OwnerId, lsn: Lsn, id: EntryId },
}

/// The index's view of one segment.
#[derive(Default)]
struct SegmentEntries {
    refs: Vec<EntryRef>,
    live_bytes: u64,
}

/// A summary of one owner, for `inspect` and stats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OwnerSummary {
    pub(crate) owner: OwnerId,
    pub(crate) objects: u64,
    pub(crate) records: u64,
    pub(crate) live_bytes: u64,
    pub(crate) version_max: Version,
    /// The oldest `written_ms` among records that hold live bytes.
    pub(crate) oldest_live_ms: Option<u64>,
}

/// Every record present in the log.
#[derive(Default)]
pub(crate) struct Index {
    owners: BTreeMap<OwnerId, OwnerIndex>,
    segments: BTreeMap<SegmentId, SegmentEntries>,
    next_id: EntryId,
    live_bytes: u64,
    records: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sign {
    Add,
    Sub,
}

impl Index {
    fn visible_pieces(&self, owner: OwnerId, object: ObjectId, range: ByteRange) -> Vec<Painted> {
        let Some(owner_index) = self.owners.get(&owner) else { return Vec::new() };
        let Some(object_index) = owner_index.objects.get(&object) else { return Vec::new() };
        let mut candidates = Vec::new();
        object_index.overlapping(range, owner_index.hidden_below, &mut candidates);
        let (painted, _) = paint(candidates, range, None);
        painted.into_iter().filter(|piece| !piece.entry.marker).collect()
    }

    /// Adds or takes the visible bytes of `range` to or from the live counters.
    fn account(&mut self, owner: OwnerId, object: ObjectId, range: ByteRange, sign: Sign) {
        for piece in self.visible_pieces(owner, object, range) {
            let bytes = piece.range.size_bytes();
            let segment = self.segments.entry(piece.entry.segment).or_default();
            let owner_index = self.owners.entry(owner).or_default();
            match sign {
                Sign::Add => {
                    segment.live_bytes += bytes;
                    owner_index.live_bytes += bytes;
                    self.live_bytes += bytes;
                }
                Sign::Sub => {
                    segment.live_bytes -= bytes;
                    owner_index.live_bytes -= bytes;
                    self.live_bytes -= bytes;
                }
            }
        }
    }

    fn account_owner(&mut self, owner: OwnerId, sign: Sign) {
        let spans: Vec<(ObjectId, ByteRange)> = match self.owners.get(&owner) {
            Some(owner_index) => owner_index
                .objects
                .iter()
                .filter_map(|(&object, index)| Some((object, index.data_span()?)))
                .collect(),
            None => Vec::new(),
        };
        for (object, span) in spans {
            self.account(owner, object, span, sign);
        }
    }

    /// Adds a data record or marker found at (`segment`, `offset`).
    pub(crate) fn insert(&mut self, owner: OwnerId, object: ObjectId, entry: Entry) -> EntryId {
        let id = self.next_id;
        self.next_id += 1;
        self.account(owner, object, entry.range, Sign::Sub);
        let owner_index = self.owners.entry(owner).or_default();
        owner_index.version_max = owner_index.version_max.max(entry.version);
        let object_index = owner_index.objects.entry(object).or_default();
        let len = entry.range.size_bytes();
        if entry.marker {
            object_index.markers.insert((entry.range.start, id), entry);
            object_index.marker_len_max = object_index.marker_len_max.max(len);
        } else {
            object_index.data.insert((entry.range.start, id), entry);
            object_index.data_len_max = object_index.data_len_max.max(len);
        }
        self.segments.entry(entry.segment).or_default().refs.push(EntryRef::Object {
            owner,
            object,
            marker: entry.marker,
            start: entry.range.start,
            id,
        });
        self.records += 1;
        self.account(owner, object, entry.range, Sign::Add);
        id
    }

    /// Adds a `delete_all` record.
    pub(crate) fn insert_delete_all(&mut self, owner: OwnerId, entry: DeleteAllEntry) {
        let id = self.next_id;
        self.next_id += 1;
        self.account_owner(owner, Sign::Sub);
        let owner_index = self.owners.entry(owner).or_default();
        owner_index.delete_alls.insert((entry.lsn, id), entry);
        owner_index.recompute_hidden_below();
        self.segments.entry(entry.segment).or_default().refs.push(EntryRef::DeleteAll {
            owner,
            lsn: entry.lsn,
            id,
        });
        self.records += 1;
        self.account_owner(owner, Sign::Add);
    }

    /// Registers a segment that holds no records yet.
    pub(crate) fn add_segment(&mut self, segment: SegmentId) {
        self.segments.entry(segment).or_default();
    }

    /// Forgets every record of `segment` (deleted from the device).
    pub(crate) fn remove_segment(&mut self, segment: SegmentId) {
        let Some(entries) = self.segments.get(&segment) else { return };
        let refs = entries.refs.clone();
        for entry_ref in refs {
            match entry_ref {
                EntryRef::Object { owner, object, marker, start, id } => {
                    let Some(range) = self.entry(owner, object, marker, start, id).map(|e| e.range)
                    else {
                        continue;
                    };
                    self.account(owner, object, range, Sign::Sub);
                    if let Some(owner_index) = self.owners.get_mut(&owner)
                        && let Some(object_index) = owner_index.objects.get_mut(&object)
                    {
                        let map =
                            if marker { &mut object_index.markers } else { &mut object_index.data };
                        map.remove(&(start, id));
                        if object_index.is_empty() {
                            owner_index.objects.remove(&object);
                        }
                    }
                    self.records -= 1;
                    self.account(owner, object, range, Sign::Add);
                }
                EntryRef::DeleteAll { owner, lsn, id } => {
                    self.account_owner(owner, Sign::Sub);
                    if let Some(owner_index) = self.owners.get_mut(&owner) {
                        owner_index.delete_alls.remove(&(lsn, id));
                        owner_index.recompute_hidden_below();
                    }
                    self.records -= 1;
                    self.account_owner(owner, Sign::Add);
                }
            }
        }
        for owner in self.owners_of_refs(segment) {
            if let Some(owner_index) = self.owners.get(&owner)
                && owner_index.objects.is_empty()
                && owner_index.delete_alls.is_empty()
            {
                self.owners.remove(&owner);
            }
        }
        self.segments.remove(&segment);
    }

    fn owners_of_refs(&self, segment: SegmentId) -> Vec<OwnerId> {
        let Some(entries) = self.segments.get(&segment) else { return Vec::new() };
        let mut owners: Vec<OwnerId> = entries
            .refs
            .iter()
            .map(|entry_ref| match *entry_ref {
                EntryRef::Object { owner, .. } | EntryRef::DeleteAll { owner, .. } => owner,
            })
            .collect();
        owners.sort();
        owners.dedup();
        owners
    }

    fn entry(
        &self,
        owner: OwnerId,
        object: ObjectId,
        marker: bool,
        start: u64,
        id: EntryId,
    ) -> Option<&Entry> {
        let object_index = self.owners.get(&owner)?.objects.get(&object)?;
        let map = if marker { &object_index.markers } else { &object_index.data };
        map.get(&(start, id))
    }

    /// What a read of `range` sees: the data pieces in order, and the bytes not in the log.
    pub(crate) fn read(
        &self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
    ) -> (Vec<Painted>, Vec<ByteRange>) {
        let Some(owner_index) = self.owners.get(&owner) else {
            return (Vec::new(), vec![range]);
        };
        let Some(object_index) = owner_index.objects.get(&object) else {
            return (Vec::new(), vec![range]);
        };
        let mut candidates = Vec::new();
        object_index.overlapping(range, owner_index.hidden_below, &mut candidates);
        let (painted, mut missing) = paint(candidates, range, None);
        let mut data = Vec::with_capacity(painted.len());
        for piece in painted {
            if piece.entry.marker {
                missing.push(piece.range);
            } else {
                data.push(piece);
            }
        }
        missing.sort();
        (data, join_touching(missing))
    }

    /// Every visible data piece of an owner: what reclaim copies home.
    pub(crate) fn extents(&self, owner: OwnerId) -> Vec<(ObjectId, Painted)> {
        let Some(owner_index) = self.owners.get(&owner) else { return Vec::new() };
        let mut extents = Vec::new();
        for (&object, object_index) in &owner_index.objects {
            let Some(span) = object_index.data_span() else { continue };
            for piece in self.visible_pieces(owner, object, span) {
                extents.push((object, piece));
            }
        }
        extents
    }

    pub(crate) fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    pub(crate) fn records(&self) -> u64 {
        self.records
    }

    pub(crate) fn segment_live_bytes(&self, segment: SegmentId) -> u64 {
        self.segments.get(&segment).map_or(0, |entries| entries.live_bytes)
    }

    pub(crate) fn segment_records(&self, segment: SegmentId) -> u64 {
        self.segments.get(&segment).map_or(0, |entries| entries.refs.len() as u64)
    }

    /// The highest version each owner holds (cheap: no painting).
    pub(crate) fn owner_versions(&self) -> BTreeMap<OwnerId, Version> {
        self.owners.iter().map(|(&owner, index)| (owner, index.version_max)).collect()
    }

    pub(crate) fn owner_count(&self) -> u64 {
        self.owners.len() as u64
    }

    /// Per owner, its counts and the age of its oldest live record (paints everything).
    pub(crate) fn owner_summaries(&self) -> Vec<OwnerSummary> {
        let mut summaries = Vec::new();
        for (&owner, owner_index) in &self.owners {
            let records = owner_index.delete_alls.len() as u64
                + owner_index
                    .objects
                    .values()
                    .map(|index| (index.data.len() + index.markers.len()) as u64)
                    .sum::<u64>();
            let oldest_live_ms =
                self.extents(owner).iter().map(|(_, piece)| piece.entry.written_ms).min();
            summaries.push(OwnerSummary {
                owner,
                objects: owner_index.objects.len() as u64,
                records,
                live_bytes: owner_index.live_bytes,
                version_max: owner_index.version_max,
                oldest_live_ms,
            });
        }
        summaries
    }

    /// Every record, for the index snapshot a clean close writes.
    pub(crate) fn all_records(&self) -> Vec<(OwnerId, ObjectId, RecordKind, Entry)> {
        let mut records = Vec::with_capacity(self.records as usize);
        for (&owner, owner_index) in &self.owners {
            for delete_all in owner_index.delete_alls.values() {
                records.push((
                    owner,
                    ObjectId(0),
                    RecordKind::DeleteAll,
                    Entry {
                        marker: false,
                        range: ByteRange::new(0, 0),
                        version: Version(0),
                        lsn: delete_all.lsn,
                        written_ms: delete_all.written_ms,
                        segment: delete_all.segment,
                        offset: delete_all.offset,
                    },
                ));
            }
            for (&object, object_index) in &owner_index.objects {
                for entry in object_index.data.values() {
                    records.push((owner, object, RecordKind::Data, *entry));
                }
                for entry in object_index.markers.values() {
                    records.push((owner, object, RecordKind::Invalidate, *entry));
                }
            }
        }
        records
    }

    /// The records of `segment` that must outlive it, copied forward before it goes.
    pub(crate) fn plan_compaction(&self, segment: SegmentId) -> Vec<CopyItem> {
        let Some(entries) = self.segments.get(&segment) else { return Vec::new() };
        let mut copies = Vec::new();
        for entry_ref in &entries.refs {
            match *entry_ref {
                EntryRef::Object { owner, object, marker, start, id } => {
                    let at = (owner, object, marker, start, id);
                    self.plan_object_entry(segment, at, &mut copies);
                }
                EntryRef::DeleteAll { owner, lsn, id } => {
                    copies.extend(self.plan_delete_all(segment, owner, lsn, id));
                }
            }
        }
        copies
    }

    /// The copies a data record or marker of `segment` needs: the bytes of data that
    /// win the painting; a marker whole while data of its version or older, not hidden
    /// by a delete-all, overlaps it in another segment.
    fn plan_object_entry(
        &self,
        segment: SegmentId,
        (owner, object, marker, start, id): (OwnerId, ObjectId, bool, u64, EntryId),
        copies: &mut Vec<CopyItem>,
    ) {
        let Some(entry) = self.entry(owner, object, marker, start, id) else { return };
        let Some(owner_index) = self.owners.get(&owner) else { return };
        let Some(object_index) = owner_index.objects.get(&object) else { return };
        if entry.lsn < owner_index.hidden_below {
            return;
        }
        let mut candidates = Vec::new();
        object_index.overlapping(entry.range, owner_index.hidden_below, &mut candidates);
        let kind = if marker { RecordKind::Invalidate } else { RecordKind::Data };
        let copy = |range| CopyItem {
            header: RecordHeader {
                kind,
                owner,
                object,
                range,
                version: entry.version,
                lsn: entry.lsn,
                written_ms: entry.written_ms,
            },
            source_segment: segment,
            source_offset: entry.offset,
            source_range: entry.range,
        };
        if marker {
            let older_data_elsewhere = candidates.iter().any(|(_, other)| {
                !other.marker && other.segment != segment && other.version <= entry.version
            });
            if older_data_elsewhere {
                copies.push(copy(entry.range));
            }
        } else {
            let (painted, _) = paint(candidates, entry.range, Some(segment));
            let mine = painted.into_iter().filter(|piece| piece.id == id);
            let ranges = join_touching(mine.map(|piece| piece.range).collect());
            copies.extend(ranges.into_iter().map(copy));
        }
    }

    /// The copy a delete-all of `segment` needs: one while it is its owner's latest, no
    /// copy of it is elsewhere, and records of the owner with lower LSNs remain in other
    /// segments.
    fn plan_delete_all(
        &self,
        segment: SegmentId,
        owner: OwnerId,
        lsn: Lsn,
        id: EntryId,
    ) -> Option<CopyItem> {
        let owner_index = self.owners.get(&owner)?;
        let entry = owner_index.delete_alls.get(&(lsn, id))?;
        if lsn < owner_index.hidden_below {
            return None;
        }
        let copy_elsewhere = owner_index
            .delete_alls
            .iter()
            .any(|(&(other, _), other_entry)| other == lsn && other_entry.segment != segment);
        let older_elsewhere = owner_index.objects.values().any(|object_index| {
            object_index
                .data
                .values()
                .chain(object_index.markers.values())
                .any(|other| other.lsn < lsn && other.segment != segment)
        });
        if copy_elsewhere || !older_elsewhere {
            return None;
        }
        Some(CopyItem {
            header: RecordHeader {
                kind: RecordKind::DeleteAll,
                owner,
                object: ObjectId(0),
                range: ByteRange::new(0, 0),
                version: Version(0),
                lsn,
                written_ms: entry.written_ms,
            },
            source_segment: segment,
            source_offset: entry.offset,
            source_range: ByteRange::new(0, 0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(marker: bool, start: u64, len: u64, version: u64, segment: u64) -> Entry {
        Entry {
            marker,
            range: ByteRange::new(start, len),
            version: Version(version),
            lsn: Lsn(version),
            written_ms: 0,
            segment: SegmentId(segment),
            offset: 0,
        }
    }

    fn shown(index: &Index, range: ByteRange) -> Vec<(u64, u64, u64)> {
        let (pieces, _) = index.read(OwnerId(1), ObjectId(1), range);
        pieces.iter().map(|p| (p.range.start, p.range.end, p.entry.version.0)).collect()
    }

    #[test]
    fn the_highest_version_wins_and_markers_hide_their_version_and_older() {
        // Goal: the painting rules of the module documentation, on a hand-made case.
        let mut index = Index::default();
        let (owner, object) = (OwnerId(1), ObjectId(1));
        index.insert(owner, object, entry(false, 0, 100, 1, 1));
        index.insert(owner, object, entry(false, 50, 100, 3, 1));
        index.insert(owner, object, entry(true, 0, 60, 2, 2));
        // v1 on [0,50) is hidden by the v2 marker; v3 covers [50,150).
        assert_eq!(shown(&index, ByteRange::new(0, 200)), vec![(50, 150, 3)]);
        let (_, missing) = index.read(owner, object, ByteRange::new(0, 200));
        assert_eq!(missing, vec![ByteRange::new(0, 50), ByteRange::new(150, 50)]);
        // An older marker never hides a newer version.
        index.insert(owner, object, entry(true, 0, 200, 2, 2));
        assert_eq!(shown(&index, ByteRange::new(0, 200)), vec![(50, 150, 3)]);
        // A marker of the newest version hides it and everything older.
        index.insert(owner, object, entry(true, 100, 100, 3, 2));
        assert_eq!(shown(&index, ByteRange::new(0, 200)), vec![(50, 100, 3)]);
        assert_eq!(index.live_bytes(), 50);
        assert_eq!(index.segment_live_bytes(SegmentId(1)), 50);
    }

    #[test]
    fn insertion_order_does_not_change_what_is_visible_or_live() {
        // Goal: the result is a function of the set of records (recovery finds them in
        // any order), checked over every permutation of a small set.
        let records = [
            entry(false, 0, 100, 1, 1),
            entry(false, 20, 30, 2, 2),
            entry(true, 0, 40, 2, 3),
            entry(false, 90, 20, 4, 3),
            entry(true, 95, 5, 1, 1),
        ];
        let mut reference = None;
        let mut order: Vec<usize> = (0..records.len()).collect();
        permute(&mut order, 0, &mut |order| {
            let mut index = Index::default();
            for &i in order {
                index.insert(OwnerId(1), ObjectId(1), records[i]);
            }
            let seen = (
                shown(&index, ByteRange::new(0, 200)),
                index.live_bytes(),
                [1, 2, 3].map(|s| index.segment_live_bytes(SegmentId(s))),
            );
            match &reference {
                None => reference = Some(seen),
                Some(reference) => assert_eq!(&seen, reference, "order {order:?}"),
            }
        });
        let (pieces, live, _) = reference.unwrap();
        // The v2 marker hides [0,40) (v2 and v1); v2 data shows on [40,50).
        assert_eq!(pieces, vec![(40, 50, 2), (50, 90, 1), (90, 110, 4)]);
        assert_eq!(live, 70);
    }

    fn permute(items: &mut Vec<usize>, k: usize, visit: &mut dyn FnMut(&[usize])) {
        if k == items.len() {
            visit(items);
            return;
        }
        for i in k..items.len() {
            items.swap(k, i);
            permute(items, k + 1, visit);
            items.swap(k, i);
        }
    }

    #[test]
    fn delete_all_hides_every_earlier_record_of_its_owner_only() {
        let mut index = Index::default();
        index.insert(OwnerId(1), ObjectId(1), entry(false, 0, 10, 1, 1));
        index.insert(OwnerId(2), ObjectId(1), entry(false, 0, 10, 1, 1));
        index.insert_delete_all(
            OwnerId(1),
            DeleteAllEntry { lsn: Lsn(5), written_ms: 0, segment: SegmentId(2), offset: 0 },
        );
        assert!(shown(&index, ByteRange::new(0, 10)).is_empty());
        assert_eq!(index.read(OwnerId(2), ObjectId(1), ByteRange::new(0, 10)).0.len(), 1);
        index.insert(OwnerId(1), ObjectId(1), entry(false, 0, 5, 6, 2));
        assert_eq!(shown(&index, ByteRange::new(0, 10)), vec![(0, 5, 6)]);
        assert_eq!(index.live_bytes(), 15);
        // Segment 1 holds only records the delete_all hides (owner 1) and owner 2's.
        let plan = index.plan_compaction(SegmentId(1));
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].header.owner, OwnerId(2));
        // The delete_all must stay while segment 1 holds older records of owner 1...
        assert_eq!(index.plan_compaction(SegmentId(2)).len(), 2);
        index.remove_segment(SegmentId(1));
        assert_eq!(index.live_bytes(), 5);
        // ...and may go once they are gone; the newer data is copied.
        let plan = index.plan_compaction(SegmentId(2));
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].header.kind, RecordKind::Data);
    }

    #[test]
    fn compaction_copies_only_the_winning_pieces_and_needed_markers() {
        let mut index = Index::default();
        let (owner, object) = (OwnerId(1), ObjectId(1));
        index.insert(owner, object, entry(false, 0, 100, 1, 1)); // partly overwritten
        index.insert(owner, object, entry(false, 10, 20, 2, 2));
        index.insert(owner, object, entry(true, 60, 10, 1, 1)); // hides v1 on [60,70)
        index.insert(owner, object, entry(true, 200, 10, 1, 1)); // hides nothing anywhere
        let plan = index.plan_compaction(SegmentId(1));
        let ranges: Vec<(RecordKind, ByteRange)> =
            plan.iter().map(|c| (c.header.kind, c.header.range)).collect();
        assert_eq!(
            ranges,
            vec![
                (RecordKind::Data, ByteRange::from_bounds(0, 10)),
                (RecordKind::Data, ByteRange::from_bounds(30, 60)),
                (RecordKind::Data, ByteRange::from_bounds(70, 100)),
            ],
            "the markers only cover data of segment 1, which goes with them"
        );
        // A marker over older data in another segment stays.
        index.insert(owner, object, entry(true, 10, 5, 2, 3));
        let plan = index.plan_compaction(SegmentId(3));
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].header.kind, RecordKind::Invalidate);
    }
}
