//! The index snapshot a clean close leaves behind (`index.snap`), so that the next open
//! need not scan every segment, and the log's identity file (`meta`).
//!
//! The snapshot is trusted only if it checks out whole (magic, checksum, the log's id)
//! and names exactly the segment files present, at exactly their lengths; otherwise open
//! scans. Open deletes it before accepting any write, so it can never describe a log
//! that changed after it was written.

use somnus_types::{ByteRange, Version};

use crate::format::{RecordHeader, RecordKind};
use crate::{LogId, Lsn, ObjectId, OwnerId, SegmentId};

pub(crate) const SNAPSHOT_FILE: &str = "index.snap";
pub(crate) const SNAPSHOT_TMP_FILE: &str = "index.snap.tmp";
pub(crate) const META_FILE: &str = "meta";
pub(crate) const META_TMP_FILE: &str = "meta.tmp";

const SNAPSHOT_MAGIC: [u8; 8] = *b"SOMNUSIX";
const META_MAGIC: [u8; 8] = *b"SOMNUSLM";
const SNAPSHOT_VERSION: u16 = 1;
const RECORD_BYTES: usize = 80;
const HEADER_BYTES: usize = 48;

/// One record of the snapshot: what its header says and where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SnapshotRecord {
    pub(crate) header: RecordHeader,
    pub(crate) segment: SegmentId,
    pub(crate) offset: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) log: LogId,
    pub(crate) next_lsn: Lsn,
    /// Every segment file and its length.
    pub(crate) segments: Vec<(SegmentId, u64)>,
    pub(crate) records: Vec<SnapshotRecord>,
}

fn put(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn u64(&mut self) -> Result<u64, String> {
        let bytes = self.bytes.get(self.at..self.at + 8).ok_or("cut short")?;
        self.at += 8;
        let mut value = [0; 8];
        value.copy_from_slice(bytes);
        Ok(u64::from_le_bytes(value))
    }
}

fn kind_code(kind: RecordKind) -> u64 {
    match kind {
        RecordKind::Data => 1,
        RecordKind::Invalidate => 2,
        RecordKind::DeleteAll => 3,
    }
}

pub(crate) fn encode_snapshot(snapshot: &Snapshot) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        HEADER_BYTES + 16 * snapshot.segments.len() + RECORD_BYTES * snapshot.records.len() + 4,
    );
    out.extend_from_slice(&SNAPSHOT_MAGIC);
    out.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    out.extend_from_slice(&[0; 6]);
    put(&mut out, snapshot.log.0);
    put(&mut out, snapshot.next_lsn.0);
    put(&mut out, snapshot.segments.len() as u64);
    put(&mut out, snapshot.records.len() as u64);
    for &(segment, len) in &snapshot.segments {
        put(&mut out, segment.0);
        put(&mut out, len);
    }
    for record in &snapshot.records {
        let header = &record.header;
        put(&mut out, kind_code(header.kind));
        put(&mut out, header.owner.0);
        put(&mut out, header.object.0);
        put(&mut out, header.range.start);
        put(&mut out, header.range.size_bytes());
        put(&mut out, header.version.0);
        put(&mut out, header.lsn.0);
        put(&mut out, header.written_ms);
        put(&mut out, record.segment.0);
        put(&mut out, record.offset);
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes a snapshot, or says why it cannot be used.
pub(crate) fn decode_snapshot(bytes: &[u8]) -> Result<Snapshot, String> {
    if bytes.len() < HEADER_BYTES + 4 || bytes[..8] != SNAPSHOT_MAGIC {
        return Err("not an index snapshot".into());
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
        return Err("checksum mismatch".into());
    }
    if u16::from_le_bytes([body[8], body[9]]) != SNAPSHOT_VERSION {
        return Err("another snapshot version".into());
    }
    let mut reader = Reader { bytes: body, at: 16 };
    let log = LogId(reader.u64()?);
    let next_lsn = Lsn(reader.u64()?);
    let segment_count = reader.u64()?;
    let record_count = reader.u64()?;
    let expected = (HEADER_BYTES as u64)
        .checked_add(segment_count.checked_mul(16).ok_or("impossible counts")?)
        .and_then(|n| n.checked_add(record_count.checked_mul(RECORD_BYTES as u64)?))
        .ok_or("impossible counts")?;
    if expected != body.len() as u64 {
        return Err("length does not match its counts".into());
    }
    let mut segments = Vec::with_capacity(segment_count as usize);
    for _ in 0..segment_count {
        segments.push((SegmentId(reader.u64()?), reader.u64()?));
    }
    let mut records = Vec::with_capacity(record_count as usize);
    for _ in 0..record_count {
        let kind = match reader.u64()? {
            1 => RecordKind::Data,
            2 => RecordKind::Invalidate,
            3 => RecordKind::DeleteAll,
            other => return Err(format!("unknown record kind {other}")),
        };
        let owner = OwnerId(reader.u64()?);
        let object = ObjectId(reader.u64()?);
        let start = reader.u64()?;
        let len = reader.u64()?;
        let end = start.checked_add(len).ok_or("impossible range")?;
        let header = RecordHeader {
            kind,
            owner,
            object,
            range: ByteRange::from_bounds(start, end),
            version: Version(reader.u64()?),
            lsn: Lsn(reader.u64()?),
            written_ms: reader.u64()?,
        };
        records.push(SnapshotRecord {
            header,
            segment: SegmentId(reader.u64()?),
            offset: reader.u64()?,
        });
    }
    Ok(Snapshot { log, next_lsn, segments, records })
}

pub(crate) fn encode_meta(log: LogId) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    out.extend_from_slice(&META_MAGIC);
    out.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    out.extend_from_slice(&[0; 2]);
    out.extend_from_slice(&crc32c::crc32c(&log.0.to_le_bytes()).to_le_bytes());
    put(&mut out, log.0);
    out
}

pub(crate) fn decode_meta(bytes: &[u8]) -> Result<LogId, String> {
    if bytes.len() != 24 || bytes[..8] != META_MAGIC {
        return Err("not a somnus log meta file".into());
    }
    let mut id = [0; 8];
    id.copy_from_slice(&bytes[16..24]);
    let crc = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
    if crc32c::crc32c(&id) != crc {
        return Err("meta file checksum mismatch".into());
    }
    Ok(LogId(u64::from_le_bytes(id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_round_trip_and_any_damage_is_refused() {
        let snapshot = Snapshot {
            log: LogId(7),
            next_lsn: Lsn(99),
            segments: vec![(SegmentId(1), 4096), (SegmentId(3), 64)],
            records: vec![SnapshotRecord {
                header: RecordHeader {
                    kind: RecordKind::Invalidate,
                    owner: OwnerId(2),
                    object: ObjectId(5),
                    range: ByteRange::new(10, 20),
                    version: Version(8),
                    lsn: Lsn(98),
                    written_ms: 1234,
                },
                segment: SegmentId(3),
                offset: 64,
            }],
        };
        let bytes = encode_snapshot(&snapshot);
        assert_eq!(decode_snapshot(&bytes), Ok(snapshot));
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 4;
            assert!(decode_snapshot(&damaged).is_err(), "byte {at}");
        }
        assert!(decode_snapshot(&bytes[..bytes.len() - 1]).is_err());
        assert_eq!(decode_meta(&encode_meta(LogId(42))), Ok(LogId(42)));
    }
}
