//! The on-disk format of the log, specified in `docs/format/log.md`: segment headers
//! and records, their encoding, and the checks that decide whether bytes read back
//! are a record of this log at this place.

use somnus_types::{ByteRange, Version};

use crate::{LogId, Lsn, ObjectId, OwnerId, SegmentId};

/// The first bytes of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"SOMNUSLG";
/// The format this code writes and reads.
pub const FORMAT_VERSION: u16 = 1;
pub const SEGMENT_HEADER_BYTES: u64 = 64;
/// The first four bytes of every record, little-endian.
pub const RECORD_MAGIC: u32 = 0x4C52_4345;
pub const RECORD_HEADER_BYTES: u64 = 88;
/// The largest payload a record may carry.
pub const PAYLOAD_BYTES_MAX: u64 = 16 << 20;

/// What a record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordKind {
    /// Bytes of `range` of `object` at `version`.
    Data,
    /// `version` of `range` of `object` is obsolete.
    Invalidate,
    /// Every earlier record (lower LSN) of the owner is obsolete.
    DeleteAll,
}

impl RecordKind {
    fn code(self) -> u8 {
        match self {
            RecordKind::Data => 1,
            RecordKind::Invalidate => 2,
            RecordKind::DeleteAll => 3,
        }
    }

    fn from_code(code: u8) -> Option<RecordKind> {
        match code {
            1 => Some(RecordKind::Data),
            2 => Some(RecordKind::Invalidate),
            3 => Some(RecordKind::DeleteAll),
            _ => None,
        }
    }
}

/// A record's header fields (the payload travels beside it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    pub kind: RecordKind,
    pub lsn: Lsn,
    pub owner: OwnerId,
    pub object: ObjectId,
    pub range: ByteRange,
    pub version: Version,
    /// When the record was first appended (Unix milliseconds; copies keep it): what
    /// `somnus logstore inspect` reports as the age of the oldest record.
    pub written_ms: u64,
}

impl RecordHeader {
    /// The payload length the header implies.
    pub fn payload_bytes(&self) -> u64 {
        match self.kind {
            RecordKind::Data => self.range.size_bytes(),
            RecordKind::Invalidate | RecordKind::DeleteAll => 0,
        }
    }

    /// Header and payload.
    pub fn encoded_bytes(&self) -> u64 {
        RECORD_HEADER_BYTES + self.payload_bytes()
    }

    /// The structural rules every record obeys (docs/format/log.md, "Record"): its
    /// range by kind (data: 1 byte to the largest payload; an invalidation: not empty; a
    /// delete-all: empty, with object and version zero) and an LSN that is not 0. The
    /// encoder asserts them of what it writes; the decoder refuses bytes that break them.
    pub fn check(&self) -> Result<(), Invalid> {
        let range_bytes = self.range.size_bytes();
        let lengths_ok = match self.kind {
            RecordKind::Data => range_bytes > 0 && range_bytes <= PAYLOAD_BYTES_MAX,
            RecordKind::Invalidate => range_bytes > 0,
            RecordKind::DeleteAll => {
                range_bytes == 0 && self.object == ObjectId(0) && self.version == Version(0)
            }
        };
        if !lengths_ok || self.lsn == Lsn(0) {
            return Err(Invalid::Lengths);
        }
        Ok(())
    }
}

fn put_u64(buffer: &mut [u8], offset: usize, value: u64) {
    buffer[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
}

fn get_u64(buffer: &[u8], offset: usize) -> u64 {
    let mut bytes = [0; 8];
    bytes.copy_from_slice(&buffer[offset..offset + 8]);
    u64::from_le_bytes(bytes)
}

fn get_u32(buffer: &[u8], offset: usize) -> u32 {
    let mut bytes = [0; 4];
    bytes.copy_from_slice(&buffer[offset..offset + 4]);
    u32::from_le_bytes(bytes)
}

/// Appends the encoding of a record (header then payload) to `out`.
pub fn encode_record(
    log: LogId,
    segment: SegmentId,
    header: &RecordHeader,
    payload: &[u8],
    out: &mut Vec<u8>,
) {
    encode_record_with_crc(log, segment, header, payload, crc32c::crc32c(payload), out);
}

/// [`encode_record`] given the payload's own crc32c, which an appender computes before
/// it takes the writer lock. The record's checksum is the crc32c of the payload followed
/// by the header (with its checksum field zero): payload first, so that only the 88
/// header bytes are left to checksum under the lock.
pub fn encode_record_with_crc(
    log: LogId,
    segment: SegmentId,
    header: &RecordHeader,
    payload: &[u8],
    payload_crc: u32,
    out: &mut Vec<u8>,
) {
    // Pair assertions, before: the record obeys the rules the decoder checks.
    assert_eq!(header.check(), Ok(()), "a record the format forbids: {header:?}");
    assert_eq!(payload.len() as u64, header.payload_bytes(), "payload does not match the header");
    let start = out.len();
    out.resize(start + RECORD_HEADER_BYTES as usize, 0);
    write_header_fields(log, segment, header, &mut out[start..]);
    let crc = crc32c::crc32c_append(payload_crc, &out[start..]);
    out[start + 12..start + 16].copy_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
    // And after (O(payload), so in debug builds): the bytes decode to this very record,
    // of this log and segment, with a matching checksum.
    #[cfg(debug_assertions)]
    {
        let written = &out[start..];
        let header_bytes = &written[..RECORD_HEADER_BYTES as usize];
        let decoded = decode_header(log, segment, header_bytes);
        assert_eq!(decoded.map(|(h, _)| h), Ok(*header), "a record does not decode as encoded");
        let crc = decoded.map_or(0, |(_, crc)| crc);
        let payload_written = &written[RECORD_HEADER_BYTES as usize..];
        assert!(checksum_matches(header_bytes, payload_written, crc), "checksum does not match");
    }
}

/// Writes every header field but the checksum (left zero) into `bytes`.
fn write_header_fields(log: LogId, segment: SegmentId, header: &RecordHeader, bytes: &mut [u8]) {
    assert_eq!(bytes.len() as u64, RECORD_HEADER_BYTES, "a header is {RECORD_HEADER_BYTES} bytes");
    bytes.fill(0);
    bytes[0..4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
    bytes[4] = header.kind.code();
    // The payload is at most PAYLOAD_BYTES_MAX (16 MiB, `check`), so it fits the u32.
    bytes[8..12].copy_from_slice(&(header.payload_bytes() as u32).to_le_bytes());
    put_u64(bytes, 16, log.0);
    put_u64(bytes, 24, segment.0);
    put_u64(bytes, 32, header.lsn.0);
    put_u64(bytes, 40, header.owner.0);
    put_u64(bytes, 48, header.object.0);
    put_u64(bytes, 56, header.range.start);
    put_u64(bytes, 64, header.range.size_bytes());
    put_u64(bytes, 72, header.version.0);
    put_u64(bytes, 80, header.written_ms);
}

/// Why bytes at some place are not a valid record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    Magic,
    Kind,
    Lengths,
    /// A record of another log, or of another segment of this one (a misdirected write).
    Misplaced,
    Checksum,
}

/// Decodes a header, checking everything but the checksum (which needs the payload).
pub fn decode_header(
    log: LogId,
    segment: SegmentId,
    bytes: &[u8],
) -> Result<(RecordHeader, u32), Invalid> {
    assert_eq!(bytes.len() as u64, RECORD_HEADER_BYTES, "a header is {RECORD_HEADER_BYTES} bytes");
    if get_u32(bytes, 0) != RECORD_MAGIC {
        return Err(Invalid::Magic);
    }
    let kind = RecordKind::from_code(bytes[4]).ok_or(Invalid::Kind)?;
    if bytes[5..8] != [0, 0, 0] {
        return Err(Invalid::Kind);
    }
    if get_u64(bytes, 16) != log.0 || get_u64(bytes, 24) != segment.0 {
        return Err(Invalid::Misplaced);
    }
    let payload_bytes = u64::from(get_u32(bytes, 8));
    let range_start = get_u64(bytes, 56);
    let range_len = get_u64(bytes, 64);
    let end = range_start.checked_add(range_len).ok_or(Invalid::Lengths)?;
    let header = RecordHeader {
        kind,
        lsn: Lsn(get_u64(bytes, 32)),
        owner: OwnerId(get_u64(bytes, 40)),
        object: ObjectId(get_u64(bytes, 48)),
        range: ByteRange::from_bounds(range_start, end),
        version: Version(get_u64(bytes, 72)),
        written_ms: get_u64(bytes, 80),
    };
    // Bytes from a device: a broken rule is a Result, never a panic.
    header.check()?;
    if payload_bytes != header.payload_bytes() {
        return Err(Invalid::Lengths);
    }
    // Pair assertion, after (debug builds): the decoder read every field the encoder
    // writes, so the header encodes back to the very bytes it came from.
    #[cfg(debug_assertions)]
    {
        let mut again = [0u8; RECORD_HEADER_BYTES as usize];
        write_header_fields(log, segment, &header, &mut again);
        again[12..16].copy_from_slice(&bytes[12..16]);
        assert_eq!(&again[..], bytes, "a header decoded to other fields than it holds");
    }
    Ok((header, get_u32(bytes, 12)))
}

/// Whether `crc` is the checksum of `header_bytes` (with its checksum field) and `payload`.
pub fn checksum_matches(header_bytes: &[u8], payload: &[u8], crc: u32) -> bool {
    let mut zeroed = [0u8; RECORD_HEADER_BYTES as usize];
    zeroed.copy_from_slice(header_bytes);
    zeroed[12..16].fill(0);
    crc32c::crc32c_append(crc32c::crc32c(payload), &zeroed) == crc
}

/// The 64-byte header at the start of every segment file.
pub fn encode_segment_header(
    log: LogId,
    segment: SegmentId,
) -> [u8; SEGMENT_HEADER_BYTES as usize] {
    let mut bytes = [0u8; SEGMENT_HEADER_BYTES as usize];
    bytes[0..8].copy_from_slice(&SEGMENT_MAGIC);
    bytes[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes[10..12].copy_from_slice(&(SEGMENT_HEADER_BYTES as u16).to_le_bytes());
    put_u64(&mut bytes, 16, log.0);
    put_u64(&mut bytes, 24, segment.0);
    let crc = crc32c::crc32c(&bytes[..60]);
    bytes[60..64].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// Why a segment header is not valid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadSegmentHeader {
    Short,
    Magic,
    Version(u16),
    Checksum,
    /// The header names another segment id than its file name.
    Misplaced {
        found: u64,
    },
    /// The header names another log than the directory's.
    OtherLog {
        found: u64,
    },
}

impl std::fmt::Display for BadSegmentHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadSegmentHeader::Short => write!(f, "shorter than a segment header"),
            BadSegmentHeader::Magic => write!(f, "no segment magic"),
            BadSegmentHeader::Version(v) => {
                write!(f, "format version {v}, this code reads {FORMAT_VERSION}")
            }
            BadSegmentHeader::Checksum => write!(f, "segment header checksum mismatch"),
            BadSegmentHeader::Misplaced { found } => write!(f, "header names segment {found:#x}"),
            BadSegmentHeader::OtherLog { found } => {
                write!(f, "header names another log ({found:#x})")
            }
        }
    }
}

/// Decodes a segment header: its log id.
pub fn decode_segment_header(segment: SegmentId, bytes: &[u8]) -> Result<LogId, BadSegmentHeader> {
    if (bytes.len() as u64) < SEGMENT_HEADER_BYTES {
        return Err(BadSegmentHeader::Short);
    }
    if bytes[0..8] != SEGMENT_MAGIC {
        return Err(BadSegmentHeader::Magic);
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version != FORMAT_VERSION {
        return Err(BadSegmentHeader::Version(version));
    }
    if crc32c::crc32c(&bytes[..60]) != get_u32(bytes, 60) {
        return Err(BadSegmentHeader::Checksum);
    }
    let found = get_u64(bytes, 24);
    if found != segment.0 {
        return Err(BadSegmentHeader::Misplaced { found });
    }
    Ok(LogId(get_u64(bytes, 16)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_header() -> RecordHeader {
        RecordHeader {
            kind: RecordKind::Data,
            lsn: Lsn(7),
            owner: OwnerId(3),
            object: ObjectId(9),
            range: ByteRange::new(4096, 5),
            version: Version(42),
            written_ms: 1_700_000_000_000,
        }
    }

    #[test]
    fn records_round_trip_and_every_flipped_bit_is_caught() {
        // Goal: a record decodes to what was encoded, and flipping any single bit of it
        // makes it invalid (by magic, kind, lengths, placement or checksum): nothing
        // damaged is ever taken for a record.
        let mut out = Vec::new();
        encode_record(LogId(1), SegmentId(2), &data_header(), b"hello", &mut out);
        assert_eq!(out.len() as u64, RECORD_HEADER_BYTES + 5);
        let (header, crc) = decode_header(LogId(1), SegmentId(2), &out[..88]).unwrap();
        assert_eq!(header, data_header());
        assert!(checksum_matches(&out[..88], &out[88..], crc));
        for bit in 0..out.len() * 8 {
            let mut damaged = out.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            let valid = decode_header(LogId(1), SegmentId(2), &damaged[..88])
                .is_ok_and(|(_, crc)| checksum_matches(&damaged[..88], &damaged[88..], crc));
            assert!(!valid, "bit {bit} flipped went unnoticed");
        }
        assert_eq!(decode_header(LogId(1), SegmentId(3), &out[..88]), Err(Invalid::Misplaced));
        assert_eq!(decode_header(LogId(4), SegmentId(2), &out[..88]), Err(Invalid::Misplaced));
    }

    #[test]
    fn the_encoder_asserts_the_rules_the_decoder_checks() {
        // Goal: pair assertions: a record the code builds against the format's rules is
        // a bug and panics at encode; the same breach read from a device is an error.
        let forbidden = [
            RecordHeader { lsn: Lsn(0), ..data_header() },
            RecordHeader { range: ByteRange::new(0, 0), ..data_header() },
            RecordHeader {
                kind: RecordKind::Invalidate,
                range: ByteRange::new(0, 0),
                ..data_header()
            },
            RecordHeader {
                kind: RecordKind::DeleteAll,
                range: ByteRange::new(0, 0),
                ..data_header()
            },
        ];
        for header in forbidden {
            assert_eq!(header.check(), Err(Invalid::Lengths), "{header:?}");
            let payload = vec![0; header.payload_bytes() as usize];
            let encoded = std::panic::catch_unwind(|| {
                encode_record(LogId(1), SegmentId(2), &header, &payload, &mut Vec::new())
            });
            assert!(encoded.is_err(), "{header:?} was encoded");
        }
        // A delete-all naming an object (or a version), as a device might hold it: the
        // decoder refuses it with a Result.
        let delete_all = RecordHeader {
            kind: RecordKind::DeleteAll,
            object: ObjectId(0),
            range: ByteRange::new(0, 0),
            version: Version(0),
            ..data_header()
        };
        let mut out = Vec::new();
        encode_record(LogId(1), SegmentId(2), &delete_all, &[], &mut out);
        assert_eq!(
            decode_header(LogId(1), SegmentId(2), &out[..88]).map(|(h, _)| h),
            Ok(delete_all)
        );
        for field in [48, 72] {
            let mut other = out.clone();
            other[field] = 1;
            assert_eq!(decode_header(LogId(1), SegmentId(2), &other[..88]), Err(Invalid::Lengths));
        }
    }

    #[test]
    fn segment_headers_round_trip_and_name_their_defect() {
        let bytes = encode_segment_header(LogId(5), SegmentId(6));
        assert_eq!(decode_segment_header(SegmentId(6), &bytes), Ok(LogId(5)));
        assert_eq!(
            decode_segment_header(SegmentId(7), &bytes),
            Err(BadSegmentHeader::Misplaced { found: 6 })
        );
        let mut damaged = bytes;
        damaged[20] ^= 1;
        assert_eq!(decode_segment_header(SegmentId(6), &damaged), Err(BadSegmentHeader::Checksum));
        assert_eq!(decode_segment_header(SegmentId(6), &bytes[..10]), Err(BadSegmentHeader::Short));
        let mut other_version = bytes;
        other_version[8] = 2;
        assert_eq!(
            decode_segment_header(SegmentId(6), &other_version),
            Err(BadSegmentHeader::Version(2))
        );
    }
}
