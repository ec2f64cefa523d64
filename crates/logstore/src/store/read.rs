//! Reads: the latest non-invalidated bytes of a range, the extents an owner holds, and
//! reclaim (the extents with their bytes). Every record read is checked against its
//! checksum and against the index entry that named it (L4).

use std::collections::BTreeMap;
use std::sync::Arc;

use somnus_types::{ByteRange, Version};

use super::{LogStore, Shared};
use crate::disk::{DiskFile, read_exact_at};
use crate::error::{Error, Result};
use crate::format::{self, RECORD_HEADER_BYTES};
use crate::index::{Entry, Painted};
use crate::{ObjectId, OwnerId, SegmentId};

/// Bytes of a read that the log holds, at one version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub range: ByteRange,
    pub version: Version,
    pub bytes: Vec<u8>,
}

/// The answer to a read: pieces in order of offset, and the parts the log does not hold.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ReadResult {
    pub pieces: Vec<Piece>,
    pub missing: Vec<ByteRange>,
}

/// A valid extent an owner holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub object: ObjectId,
    pub range: ByteRange,
    pub version: Version,
}

/// A valid extent with its bytes, as reclaim hands it out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReclaimedExtent {
    pub object: ObjectId,
    pub range: ByteRange,
    pub version: Version,
    pub bytes: Vec<u8>,
}

impl LogStore {
    /// The latest non-invalidated version of every byte of `range`, and what the log
    /// does not hold. Every record read is checked against its checksum.
    pub fn read(&self, owner: OwnerId, object: ObjectId, range: ByteRange) -> Result<ReadResult> {
        let (painted, missing, files) = {
            let shared = self.read_shared();
            let (painted, missing) = shared.index.read(owner, object, range);
            let files = files_of(&shared, painted.iter().map(|piece| piece.entry.segment))?;
            (painted, missing, files)
        };
        let mut pieces: Vec<Piece> = Vec::with_capacity(painted.len());
        let mut last: Option<((SegmentId, u64), Vec<u8>)> = None;
        for piece in painted {
            let key = (piece.entry.segment, piece.entry.offset);
            if last.as_ref().is_none_or(|(at, _)| *at != key) {
                let payload = self.read_record(&files, &piece.entry)?;
                last = Some((key, payload));
            }
            if let Some((_, payload)) = &last {
                let bytes = slice_of(payload, piece.entry.range, piece.range).to_vec();
                assert_eq!(bytes.len() as u64, piece.range.size_bytes(), "L4: a piece is whole");
                pieces.push(Piece { range: piece.range, version: piece.entry.version, bytes });
            }
        }
        // What is returned lies in the range asked for, in order, without overlaps.
        let mut end = range.start;
        for piece in &pieces {
            assert!(piece.range.start >= end, "L4: pieces out of order or overlapping");
            end = piece.range.end;
        }
        assert!(end <= range.end, "L4: a piece past the range read");
        Ok(ReadResult { pieces, missing })
    }

    /// The version every byte of `range` reads as (the pieces of [`LogStore::read`],
    /// without their bytes): from the index alone, no I/O.
    pub fn versions(&self, owner: OwnerId, object: ObjectId, range: ByteRange) -> Vec<Extent> {
        let shared = self.read_shared();
        let (painted, _) = shared.index.read(owner, object, range);
        painted
            .into_iter()
            .map(|piece| Extent { object, range: piece.range, version: piece.entry.version })
            .collect()
    }

    /// Reads a record's payload, checking that the header is the one the index names
    /// and that the checksum matches.
    pub(super) fn read_record(
        &self,
        files: &BTreeMap<SegmentId, Arc<dyn DiskFile>>,
        entry: &Entry,
    ) -> Result<Vec<u8>> {
        let Some(file) = files.get(&entry.segment) else {
            return Err(Error::Corrupt {
                segment: entry.segment,
                offset: entry.offset,
                reason: "segment missing".into(),
            });
        };
        let total = RECORD_HEADER_BYTES + entry.range.size_bytes() * u64::from(!entry.marker);
        let mut bytes = vec![0; total as usize];
        read_exact_at(file.as_ref(), &mut bytes, entry.offset).map_err(|source| {
            Error::io("reading", format!("{}/{}", self.disk.describe(), entry.segment), source)
        })?;
        let corrupt = |reason: &str| Error::Corrupt {
            segment: entry.segment,
            offset: entry.offset,
            reason: reason.to_string(),
        };
        let header_bytes = &bytes[..RECORD_HEADER_BYTES as usize];
        let (header, crc) = format::decode_header(self.log, entry.segment, header_bytes)
            .map_err(|invalid| corrupt(&format!("record header invalid ({invalid:?})")))?;
        if header.lsn != entry.lsn || header.range != entry.range || header.version != entry.version
        {
            return Err(corrupt("record is not the one the index names"));
        }
        let payload = &bytes[RECORD_HEADER_BYTES as usize..];
        if !format::checksum_matches(header_bytes, payload, crc) {
            return Err(corrupt("checksum mismatch"));
        }
        Ok(payload.to_vec())
    }

    /// The valid extents an owner holds (what reclaim would copy), without their bytes.
    pub fn extents(&self, owner: OwnerId) -> Vec<Extent> {
        let shared = self.read_shared();
        shared
            .index
            .extents(owner)
            .into_iter()
            .map(|(object, piece)| Extent {
                object,
                range: piece.range,
                version: piece.entry.version,
            })
            .collect()
    }

    /// Iterates the valid extents an owner holds, with their bytes, for the background
    /// copy back to the home replica. The set is taken when this is called; each
    /// extent's bytes are read (and checked) as the iterator reaches it.
    pub fn reclaim(&self, owner: OwnerId) -> Result<Reclaim<'_>> {
        let shared = self.read_shared();
        let extents = shared.index.extents(owner);
        let files = files_of(&shared, extents.iter().map(|(_, piece)| piece.entry.segment))?;
        drop(shared);
        Ok(Reclaim { store: self, extents: extents.into_iter(), files })
    }
}

/// Iterator over an owner's valid extents with their bytes; see [`LogStore::reclaim`].
pub struct Reclaim<'a> {
    store: &'a LogStore,
    extents: std::vec::IntoIter<(ObjectId, Painted)>,
    files: BTreeMap<SegmentId, Arc<dyn DiskFile>>,
}

impl Reclaim<'_> {
    /// Extents not yet handed out.
    pub fn remaining(&self) -> usize {
        self.extents.len()
    }
}

impl Iterator for Reclaim<'_> {
    type Item = Result<ReclaimedExtent>;

    fn next(&mut self) -> Option<Self::Item> {
        let (object, piece) = self.extents.next()?;
        Some(self.store.read_record(&self.files, &piece.entry).map(|payload| ReclaimedExtent {
            object,
            range: piece.range,
            version: piece.entry.version,
            bytes: slice_of(&payload, piece.entry.range, piece.range).to_vec(),
        }))
    }
}

/// The bytes of `part` in the payload of a record over `whole`.
pub(super) fn slice_of(payload: &[u8], whole: ByteRange, part: ByteRange) -> &[u8] {
    let start = (part.start - whole.start) as usize;
    &payload[start..start + part.size_bytes() as usize]
}

pub(super) fn files_of(
    shared: &Shared,
    segments: impl Iterator<Item = SegmentId>,
) -> Result<BTreeMap<SegmentId, Arc<dyn DiskFile>>> {
    let mut files = BTreeMap::new();
    for segment in segments {
        if files.contains_key(&segment) {
            continue;
        }
        let Some(info) = shared.segments.get(&segment) else {
            return Err(Error::Corrupt { segment, offset: 0, reason: "segment missing".into() });
        };
        files.insert(segment, info.file.clone());
    }
    Ok(files)
}
