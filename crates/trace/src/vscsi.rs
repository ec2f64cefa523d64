//! CloudPhysics vSCSI binary traces. Record layouts follow libCacheSim's reader
//! (`traceReader/customizedReader/vscsi.h`), little-endian:
//!
//! - v1, 32 bytes: `u32 sn, u32 len_bytes, u32 nSG, u16 cmd, u16 ver, u64 lbn_512B, u64 ts_us`
//! - v2, 40 bytes: `u16 cmd, u16 ver, u32 sn, u32 len_bytes, u32 nSG, u64 lbn_512B,
//!   u64 ts_us, u64 rt_us`
//!
//! The high byte of `ver` is the record version. `cmd` is a SCSI opcode; only the
//! READ and WRITE commands are block I/O, the others (TEST UNIT READY, INQUIRY,
//! SYNCHRONIZE CACHE, ...) are skipped and counted.

use std::io::{BufReader, Cursor, Read};

use somnus_types::IoKind;

use crate::error::FieldError;
use crate::input::{Input, read_up_to};
use crate::text::SECTOR_BYTES;

/// A vSCSI record version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VscsiVersion {
    V1,
    V2,
}

const V1_RECORD_BYTES: usize = 32;
const V2_RECORD_BYTES: usize = 40;
/// The prefix read to tell the version: two v2 records.
const VERSION_PROBE_BYTES: usize = 2 * V2_RECORD_BYTES;
const READ_BUFFER_BYTES: usize = 256 * 1024;

impl VscsiVersion {
    pub(crate) fn record_bytes(self) -> usize {
        match self {
            VscsiVersion::V1 => V1_RECORD_BYTES,
            VscsiVersion::V2 => V2_RECORD_BYTES,
        }
    }

    fn version_offset(self) -> usize {
        match self {
            VscsiVersion::V1 => 14,
            VscsiVersion::V2 => 2,
        }
    }

    fn number(self) -> u8 {
        match self {
            VscsiVersion::V1 => 1,
            VscsiVersion::V2 => 2,
        }
    }
}

/// The version whose `ver` field (high byte) matches in every whole record of the
/// sample, v1 first; `None` when neither does or the sample has no whole record.
pub(crate) fn detect_version(sample: &[u8]) -> Option<VscsiVersion> {
    [VscsiVersion::V1, VscsiVersion::V2].into_iter().find(|&version| {
        let records = sample.chunks_exact(version.record_bytes());
        records.len() > 0
            && records
                .into_iter()
                .all(|record| record[version.version_offset() + 1] == version.number())
    })
}

/// One vSCSI record, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct VscsiRecord {
    pub(crate) timestamp_ns: u64,
    pub(crate) offset_bytes: u64,
    pub(crate) size_bytes: u32,
    /// `None` for a command that is not block I/O.
    pub(crate) kind: Option<IoKind>,
}

/// Why the next record could not be read.
#[derive(Debug)]
pub(crate) enum VscsiError {
    Io(std::io::Error),
    /// Structural damage at this byte offset; the file cannot be read further.
    Corrupt(u64, String),
    /// A malformed field in the record at this byte offset; the next record is fine.
    Field(u64, FieldError),
}

/// Streams the records of one vSCSI file.
pub(crate) struct VscsiReader {
    source: BufReader<Box<dyn Read + Send>>,
    version: VscsiVersion,
    record: [u8; V2_RECORD_BYTES],
    /// The byte offset of the next record.
    offset_bytes: u64,
}

impl VscsiReader {
    /// Reads the first records to learn the version. An empty file reads as empty.
    pub(crate) fn new(mut input: Input) -> Result<VscsiReader, VscsiError> {
        let mut probe = [0_u8; VERSION_PROBE_BYTES];
        let probe_bytes = read_up_to(&mut input, &mut probe).map_err(VscsiError::Io)?;
        let version = match detect_version(&probe[..probe_bytes]) {
            Some(version) => version,
            None if probe_bytes == 0 => VscsiVersion::V1,
            None if probe_bytes < V1_RECORD_BYTES => {
                return Err(VscsiError::Corrupt(
                    0,
                    format!("partial record: the file has only {probe_bytes} bytes"),
                ));
            }
            None => {
                let ver = u16::from_le_bytes([probe[14], probe[15]]);
                return Err(VscsiError::Corrupt(
                    14,
                    format!(
                        "unsupported vSCSI version: ver field 0x{ver:04x} is neither 0x01xx (v1) nor, at byte 2, 0x02xx (v2)"
                    ),
                ));
            }
        };
        let replay: Box<dyn Read + Send> =
            Box::new(Cursor::new(probe[..probe_bytes].to_vec()).chain(input));
        let source = BufReader::with_capacity(READ_BUFFER_BYTES, replay);
        Ok(VscsiReader { source, version, record: [0; V2_RECORD_BYTES], offset_bytes: 0 })
    }

    /// The byte offset of the next record.
    pub(crate) fn offset_bytes(&self) -> u64 {
        self.offset_bytes
    }

    /// The next record, or `None` at the end of the file.
    pub(crate) fn next_record(&mut self) -> Result<Option<VscsiRecord>, VscsiError> {
        let length = self.version.record_bytes();
        let record = &mut self.record[..length];
        let read = read_up_to(&mut self.source, record).map_err(VscsiError::Io)?;
        let offset = self.offset_bytes;
        if read == 0 {
            return Ok(None);
        }
        if read < length {
            return Err(VscsiError::Corrupt(
                offset,
                format!("the file ends in a partial record ({read} of {length} bytes)"),
            ));
        }
        self.offset_bytes += length as u64;
        let decoded = decode(self.version, record);
        decoded.map(Some).map_err(|error| match error {
            DecodeError::Version(message) => VscsiError::Corrupt(offset, message),
            DecodeError::Field(field) => VscsiError::Field(offset, field),
        })
    }
}

enum DecodeError {
    Version(String),
    Field(FieldError),
}

fn decode(version: VscsiVersion, record: &[u8]) -> Result<VscsiRecord, DecodeError> {
    assert_eq!(record.len(), version.record_bytes());
    let u16_at = |at: usize| u16::from_le_bytes([record[at], record[at + 1]]);
    let u32_at = |at: usize| {
        u32::from_le_bytes([record[at], record[at + 1], record[at + 2], record[at + 3]])
    };
    let u64_at = |at: usize| {
        let mut bytes = [0_u8; 8];
        bytes.copy_from_slice(&record[at..at + 8]);
        u64::from_le_bytes(bytes)
    };
    let (cmd, ver, length, lbn, micros) = match version {
        VscsiVersion::V1 => (u16_at(12), u16_at(14), u32_at(4), u64_at(16), u64_at(24)),
        VscsiVersion::V2 => (u16_at(0), u16_at(2), u32_at(8), u64_at(16), u64_at(24)),
    };
    if (ver >> 8) as u8 != version.number() {
        return Err(DecodeError::Version(format!(
            "record version field 0x{ver:04x} differs from the file's version {}",
            version.number()
        )));
    }
    let kind = opcode_kind(cmd);
    let timestamp_ns = micros.checked_mul(1_000).ok_or_else(|| {
        DecodeError::Field(FieldError::new("ts_us", format!("{micros} us overflows u64 ns")))
    })?;
    if kind.is_none() {
        return Ok(VscsiRecord { timestamp_ns, offset_bytes: 0, size_bytes: 0, kind });
    }
    if length == 0 {
        return Err(DecodeError::Field(FieldError::new("len_bytes", "is zero")));
    }
    let offset_bytes = lbn
        .checked_mul(SECTOR_BYTES)
        .filter(|offset| offset.checked_add(u64::from(length)).is_some())
        .ok_or_else(|| {
            DecodeError::Field(FieldError::new(
                "lbn_512B",
                format!("{lbn} x 512 + {length} overflows u64"),
            ))
        })?;
    Ok(VscsiRecord { timestamp_ns, offset_bytes, size_bytes: length, kind })
}

/// The kind of a SCSI opcode: READ(6/10/12/16) and WRITE(6/10/12/16) are block I/O.
pub(crate) fn opcode_kind(cmd: u16) -> Option<IoKind> {
    match cmd {
        0x08 | 0x28 | 0xA8 | 0x88 => Some(IoKind::Read),
        0x0A | 0x2A | 0xAA | 0x8A => Some(IoKind::Write),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1_record(cmd: u16, length: u32, lbn: u64, micros: u64) -> [u8; 32] {
        let mut record = [0_u8; 32];
        record[4..8].copy_from_slice(&length.to_le_bytes());
        record[12..14].copy_from_slice(&cmd.to_le_bytes());
        record[14..16].copy_from_slice(&0x0100_u16.to_le_bytes());
        record[16..24].copy_from_slice(&lbn.to_le_bytes());
        record[24..32].copy_from_slice(&micros.to_le_bytes());
        record
    }

    fn v2_record(cmd: u16, length: u32, lbn: u64, micros: u64) -> [u8; 40] {
        let mut record = [0_u8; 40];
        record[0..2].copy_from_slice(&cmd.to_le_bytes());
        record[2..4].copy_from_slice(&0x0200_u16.to_le_bytes());
        record[8..12].copy_from_slice(&length.to_le_bytes());
        record[16..24].copy_from_slice(&lbn.to_le_bytes());
        record[24..32].copy_from_slice(&micros.to_le_bytes());
        record
    }

    fn read_all(bytes: Vec<u8>) -> Result<Vec<VscsiRecord>, VscsiError> {
        let mut reader = VscsiReader::new(Box::new(Cursor::new(bytes)))?;
        let mut records = Vec::new();
        while let Some(record) = reader.next_record()? {
            records.push(record);
        }
        Ok(records)
    }

    #[test]
    fn both_versions_decode_the_same_requests() {
        // Goal: v1 and v2 records with the same fields decode identically, and a
        // non-I/O command (SYNCHRONIZE CACHE) decodes with no kind.
        let v1: Vec<u8> = [
            v1_record(0x2a, 4096, 8, 100),
            v1_record(0x35, 0, 0, 101),
            v1_record(0x28, 512, 9, 102),
        ]
        .concat();
        let v2: Vec<u8> = [
            v2_record(0x2a, 4096, 8, 100),
            v2_record(0x35, 0, 0, 101),
            v2_record(0x28, 512, 9, 102),
        ]
        .concat();
        assert_eq!(detect_version(&v1), Some(VscsiVersion::V1));
        assert_eq!(detect_version(&v2), Some(VscsiVersion::V2));
        let from_v1 = read_all(v1).unwrap();
        assert_eq!(from_v1, read_all(v2).unwrap());
        assert_eq!(
            from_v1[0],
            VscsiRecord {
                timestamp_ns: 100_000,
                offset_bytes: 4096,
                size_bytes: 4096,
                kind: Some(IoKind::Write)
            }
        );
        assert_eq!(from_v1[1].kind, None);
        assert_eq!(from_v1[2].kind, Some(IoKind::Read));
    }

    #[test]
    fn partial_record_names_its_offset() {
        // Goal: a file that ends inside a record is corrupt at that record's offset.
        let mut bytes = [v1_record(0x2a, 4096, 8, 100), v1_record(0x2a, 4096, 8, 100)].concat();
        bytes.extend_from_slice(&[1, 2, 3]);
        let error = read_all(bytes).unwrap_err();
        assert!(
            matches!(error, VscsiError::Corrupt(64, ref m) if m.contains("partial record")),
            "{error:?}"
        );
    }

    #[test]
    fn zero_length_is_a_field_error() {
        // Goal: an I/O command with length 0 is a skippable field error.
        let bytes = [v1_record(0x2a, 0, 8, 100)].concat();
        let error = read_all(bytes).unwrap_err();
        assert!(
            matches!(error, VscsiError::Field(0, ref f) if f.field == "len_bytes"),
            "{error:?}"
        );
    }
}
