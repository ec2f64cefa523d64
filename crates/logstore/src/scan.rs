//! The recovery scanner: pure functions from a segment's bytes to the records it holds
//! and how it ends. Recovery, `verify` and the tests share it.
//!
//! A segment ends at its first bad record (bad magic, kind, lengths, placement or
//! checksum, or cut short): nothing after it is returned. The scanner then looks for
//! valid records past that point: if there are none the segment has a *torn tail* (a
//! crash during an unacknowledged write); if there are some, bytes the log had once
//! written whole were damaged, which `verify` reports as damage.
//!
//! [`judge_segment`] adds the rule that open and `verify` share: a torn tail or an
//! interrupted creation is legitimate only in the last segment (docs/format/log.md,
//! "Recovery"); anywhere else it is damage.

use crate::format::{
    self, BadSegmentHeader, Invalid, RECORD_HEADER_BYTES, RECORD_MAGIC, RecordHeader,
    SEGMENT_HEADER_BYTES,
};
use crate::{LogId, SegmentId};

/// A valid record found in a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScannedRecord {
    /// Where its header starts in the segment file.
    pub offset: u64,
    pub header: RecordHeader,
}

/// How the valid part of a segment ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SegmentEnd {
    /// At the end of the file.
    Clean,
    /// At bad bytes that run to the end of the file, with no valid record among them.
    Torn { offset: u64, reason: String },
    /// At bad bytes followed by `records_after` valid records, which are not returned.
    Damaged { offset: u64, reason: String, records_after: u64 },
}

/// What a segment holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentScan {
    pub log: LogId,
    pub records: Vec<ScannedRecord>,
    /// The end of the last valid record (the segment header's end if there is none).
    pub valid_end: u64,
    pub end: SegmentEnd,
}

fn describe(invalid: Invalid) -> &'static str {
    match invalid {
        Invalid::Magic => "no record magic",
        Invalid::Kind => "unknown record kind",
        Invalid::Lengths => "impossible lengths",
        Invalid::Misplaced => "a record of another log or segment",
        Invalid::Checksum => "checksum mismatch",
    }
}

/// The record at `offset`, if a valid one starts there, and its encoded length.
fn record_at(
    log: LogId,
    segment: SegmentId,
    bytes: &[u8],
    offset: usize,
) -> Result<(RecordHeader, usize), &'static str> {
    let header_end = offset + RECORD_HEADER_BYTES as usize;
    let Some(header_bytes) = bytes.get(offset..header_end) else {
        return Err("record header cut short");
    };
    let (header, crc) = format::decode_header(log, segment, header_bytes).map_err(describe)?;
    let end = header_end + header.payload_bytes() as usize;
    let Some(payload) = bytes.get(header_end..end) else {
        return Err("record payload cut short");
    };
    if !format::checksum_matches(header_bytes, payload, crc) {
        return Err(describe(Invalid::Checksum));
    }
    Ok((header, end - offset))
}

/// Counts the valid records that start after `from` (each found by its magic and
/// checked whole, stepping over the records found).
fn count_records_after(log: LogId, segment: SegmentId, bytes: &[u8], from: usize) -> u64 {
    let magic = RECORD_MAGIC.to_le_bytes();
    let mut count = 0;
    let mut at = from + 1;
    while at + RECORD_HEADER_BYTES as usize <= bytes.len() {
        if bytes[at..at + 4] == magic
            && let Ok((_, len)) = record_at(log, segment, bytes, at)
        {
            count += 1;
            at += len;
            continue;
        }
        at += 1;
    }
    count
}

/// Scans one segment file's bytes. `log` is the log the segment must belong to (`None`
/// accepts the one its header names). A bad segment header is an error: the segment's
/// records cannot be trusted to be this log's.
pub fn scan_segment(
    segment: SegmentId,
    log: Option<LogId>,
    bytes: &[u8],
) -> Result<SegmentScan, BadSegmentHeader> {
    let found = format::decode_segment_header(segment, bytes)?;
    if let Some(log) = log
        && log != found
    {
        return Err(BadSegmentHeader::OtherLog { found: found.0 });
    }
    let log = found;
    let mut records = Vec::new();
    let mut at = SEGMENT_HEADER_BYTES as usize;
    let end = loop {
        if at == bytes.len() {
            break SegmentEnd::Clean;
        }
        match record_at(log, segment, bytes, at) {
            Ok((header, len)) => {
                records.push(ScannedRecord { offset: at as u64, header });
                at += len;
            }
            Err(reason) => {
                let records_after = count_records_after(log, segment, bytes, at);
                let reason = reason.to_string();
                break if records_after == 0 {
                    SegmentEnd::Torn { offset: at as u64, reason }
                } else {
                    SegmentEnd::Damaged { offset: at as u64, reason, records_after }
                };
            }
        }
    };
    Ok(SegmentScan { log, records, valid_end: at as u64, end })
}

/// What a segment file holds, judged by the rule recovery applies (docs/format/log.md,
/// "Recovery"). Its names in JSON output are [`SegmentState::name`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SegmentState {
    /// Every byte belongs to a valid record.
    Clean,
    /// The last segment ends in an interrupted, unacknowledged write (cut away at the
    /// next open). Only the last segment can be torn.
    Torn { offset: u64, reason: String },
    /// Bytes the log once wrote whole are lost: valid records follow bad bytes, or a
    /// sealed segment (synced before the next was created) ends in bad bytes.
    Damaged { offset: u64, reason: String, records_after: u64 },
    /// The last segment's creation was interrupted before anything was written to it
    /// (removed at the next open).
    Unwritten,
    /// Its header is bad (or gone, in a sealed segment): none of its records can be
    /// trusted to be this log's.
    BadHeader(String),
}

impl SegmentState {
    /// The state's name in JSON output (documented in the README): `clean`, `torn`,
    /// `damaged`, `unwritten` or `bad_header`.
    pub fn name(&self) -> &'static str {
        match self {
            SegmentState::Clean => "clean",
            SegmentState::Torn { .. } => "torn",
            SegmentState::Damaged { .. } => "damaged",
            SegmentState::Unwritten => "unwritten",
            SegmentState::BadHeader(_) => "bad_header",
        }
    }

    /// Whether the state means bytes the log once wrote whole are lost.
    pub fn is_damage(&self) -> bool {
        matches!(self, SegmentState::Damaged { .. } | SegmentState::BadHeader(_))
    }
}

/// The state in words, for operators.
impl std::fmt::Display for SegmentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SegmentState::Clean => write!(f, "clean"),
            SegmentState::Torn { offset, reason } => {
                write!(f, "torn tail at byte {offset} ({reason}): an interrupted write")
            }
            SegmentState::Damaged { offset, reason, records_after } => write!(
                f,
                "DAMAGED at byte {offset}: {reason}; {records_after} valid records after it"
            ),
            SegmentState::Unwritten => write!(f, "never written (interrupted creation)"),
            SegmentState::BadHeader(reason) => write!(f, "DAMAGED header: {reason}"),
        }
    }
}

/// Judges one segment file: whether it is the log's `last` decides whether a torn tail
/// or an unwritten header is a crash's legitimate trace or damage. Returns the scan of
/// its records too, unless its header is unusable (then none of them count).
pub fn judge_segment(
    segment: SegmentId,
    log: Option<LogId>,
    bytes: &[u8],
    last: bool,
) -> (SegmentState, Option<SegmentScan>) {
    let scan = match scan_segment(segment, log, bytes) {
        Ok(scan) => scan,
        Err(_) if last && is_unwritten_segment(bytes) => return (SegmentState::Unwritten, None),
        Err(problem) if is_unwritten_segment(bytes) => {
            let reason = format!("{problem}; only the last segment can be an unwritten one");
            return (SegmentState::BadHeader(reason), None);
        }
        Err(problem) => return (SegmentState::BadHeader(problem.to_string()), None),
    };
    let state = match &scan.end {
        SegmentEnd::Clean => SegmentState::Clean,
        SegmentEnd::Torn { offset, reason } if last => {
            SegmentState::Torn { offset: *offset, reason: reason.clone() }
        }
        // A batch syncs a segment before it creates the next, and an open never appends
        // to an old one: only the last segment can hold an interrupted write.
        SegmentEnd::Torn { offset, reason } => SegmentState::Damaged {
            offset: *offset,
            reason: format!(
                "{reason}, at the end of a segment that was sealed (synced) before the next"
            ),
            records_after: 0,
        },
        SegmentEnd::Damaged { offset, reason, records_after } => SegmentState::Damaged {
            offset: *offset,
            reason: reason.clone(),
            records_after: *records_after,
        },
    };
    (state, Some(scan))
}

/// Whether a segment file that failed its header check is just an interrupted
/// creation: shorter than a header, or nothing but zeros (a crash between creating the
/// file and syncing its header, before any record could be written to it).
pub fn is_unwritten_segment(bytes: &[u8]) -> bool {
    (bytes.len() as u64) < SEGMENT_HEADER_BYTES || bytes.iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use somnus_types::{ByteRange, Version};

    use super::*;
    use crate::format::{RecordKind, encode_record, encode_segment_header};
    use crate::{Lsn, ObjectId, OwnerId};

    fn segment_with(records: u64) -> (Vec<u8>, Vec<u64>) {
        let mut bytes = encode_segment_header(LogId(1), SegmentId(4)).to_vec();
        let mut offsets = Vec::new();
        for i in 0..records {
            offsets.push(bytes.len() as u64);
            let header = RecordHeader {
                kind: RecordKind::Data,
                lsn: Lsn(i + 1),
                owner: OwnerId(1),
                object: ObjectId(2),
                range: ByteRange::new(i * 100, 100),
                version: Version(i + 1),
                written_ms: 0,
            };
            encode_record(LogId(1), SegmentId(4), &header, &[i as u8; 100], &mut bytes);
        }
        (bytes, offsets)
    }

    #[test]
    fn every_cut_of_the_last_record_is_a_torn_tail() {
        // Goal: a crash at any byte of the last write loses exactly that record and is
        // told apart from damage.
        let (bytes, offsets) = segment_with(3);
        for cut in offsets[2] as usize..bytes.len() {
            let scan = scan_segment(SegmentId(4), Some(LogId(1)), &bytes[..cut]).unwrap();
            assert_eq!(scan.records.len(), 2, "cut at {cut}");
            assert_eq!(scan.valid_end, offsets[2]);
            let expected = if cut == offsets[2] as usize {
                SegmentEnd::Clean
            } else {
                SegmentEnd::Torn {
                    offset: offsets[2],
                    reason: if cut < offsets[2] as usize + 88 {
                        "record header cut short".into()
                    } else {
                        "record payload cut short".into()
                    },
                }
            };
            assert_eq!(scan.end, expected, "cut at {cut}");
        }
        let whole = scan_segment(SegmentId(4), Some(LogId(1)), &bytes).unwrap();
        assert_eq!((whole.records.len(), whole.end), (3, SegmentEnd::Clean));
    }

    #[test]
    fn a_flipped_bit_mid_segment_is_damage_and_ends_the_segment() {
        // Goal: bit rot in the middle stops the scan there (nothing after it returned)
        // and is reported with the count of valid records it hides.
        let (mut bytes, offsets) = segment_with(4);
        bytes[offsets[1] as usize + 120] ^= 0x10;
        let scan = scan_segment(SegmentId(4), Some(LogId(1)), &bytes).unwrap();
        assert_eq!(scan.records.len(), 1);
        assert_eq!(
            scan.end,
            SegmentEnd::Damaged {
                offset: offsets[1],
                reason: "checksum mismatch".into(),
                records_after: 2
            }
        );
        // Zeros after the records (a file extended but never written) are a torn tail.
        let (mut bytes, _) = segment_with(2);
        bytes.extend_from_slice(&[0; 4096]);
        let scan = scan_segment(SegmentId(4), Some(LogId(1)), &bytes).unwrap();
        assert!(matches!(scan.end, SegmentEnd::Torn { .. }));
        assert_eq!(scan.records.len(), 2);
    }

    #[test]
    fn segments_of_other_logs_are_refused() {
        let (bytes, _) = segment_with(1);
        assert_eq!(
            scan_segment(SegmentId(4), Some(LogId(9)), &bytes),
            Err(BadSegmentHeader::OtherLog { found: 1 })
        );
        assert!(is_unwritten_segment(&[0; 30]));
        assert!(is_unwritten_segment(&[]));
        assert!(is_unwritten_segment(&bytes[..30]), "a torn header write");
        assert!(!is_unwritten_segment(&bytes[..64]));
    }
}
