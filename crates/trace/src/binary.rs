//! somnus's compact binary trace format, version 1: a header with the volume table
//! and time base, then checksummed blocks of delta/varint-encoded records, then an
//! end block so that truncation is detected. The byte-level specification is
//! `docs/format/trace.md`; change both together, and keep the v1 fixture test passing.

use std::io::{self, BufReader, Read, Write};

use somnus_types::{IoKind, VolumeId};

use crate::input::Input;
use crate::volume::{VOLUME_NAME_BYTES_MAX, VOLUMES_MAX, VolumeTable};
use crate::{Request, TimeBase};

/// The first eight bytes of every somnus trace file.
pub const MAGIC: [u8; 8] = *b"SOMNUSTR";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u16 = 1;
/// Records per block written by [`BinaryWriter`].
pub const RECORDS_PER_BLOCK: u32 = 4096;

/// The most records a reader accepts in one block.
const RECORDS_PER_BLOCK_MAX: u32 = 65_536;
/// The largest encoded record: varints of at most 10 + 5 + 5 + 10 bytes.
const RECORD_BYTES_MAX: usize = 30;
/// The largest payload a reader accepts (a full block of the largest records).
const PAYLOAD_BYTES_MAX: u32 = RECORDS_PER_BLOCK_MAX * RECORD_BYTES_MAX as u32;
/// The smallest encoded record (four one-byte varints), to bound record counts.
const RECORD_BYTES_MIN: u32 = 4;
const FILE_HEADER_FIXED_BYTES: usize = 20;
const BLOCK_HEADER_BYTES: usize = 28;
const BLOCK_KIND_RECORDS: u8 = 1;
const BLOCK_KIND_END: u8 = 2;
const END_PAYLOAD_BYTES: u32 = 8;
const TIME_BASE_RELATIVE: u8 = 0;
const TIME_BASE_UNIX_EPOCH: u8 = 1;
const READ_BUFFER_BYTES: usize = 256 * 1024;

const _: () = assert!(RECORDS_PER_BLOCK <= RECORDS_PER_BLOCK_MAX);
const _: () = assert!(VOLUMES_MAX <= u32::MAX as usize);
const _: () = assert!(VOLUME_NAME_BYTES_MAX <= u16::MAX as usize);

/// Why a request could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("writing the binary trace: {0}")]
    Io(#[from] io::Error),
    #[error("request at {timestamp_ns} ns is before the previous one at {previous_ns} ns")]
    OutOfOrder { timestamp_ns: u64, previous_ns: u64 },
    #[error("request names {volume} but the volume table has {volume_count} volumes")]
    UnknownVolume { volume: VolumeId, volume_count: u32 },
    #[error("request has size 0")]
    ZeroSize,
    #[error("request offset {offset_bytes} + size {size_bytes} overflows u64")]
    RangeOverflow { offset_bytes: u64, size_bytes: u32 },
}

/// Writes requests in the somnus binary format. Call [`BinaryWriter::finish`] at the
/// end: without it the file has no end block and readers report it as truncated.
pub struct BinaryWriter<W: Write> {
    sink: W,
    volume_count: u32,
    encoder: BlockCodec,
    payload: Vec<u8>,
    block_records: u32,
    block_base_ns: u64,
    previous_ns: Option<u64>,
    record_count: u64,
    bytes_written: u64,
}

impl<W: Write> BinaryWriter<W> {
    /// Writes the file header: magic, version, time base and the volume table.
    pub fn new(
        mut sink: W,
        volumes: &VolumeTable,
        time_base: TimeBase,
    ) -> Result<BinaryWriter<W>, WriteError> {
        let header = encode_header(volumes, time_base);
        sink.write_all(&header)?;
        let volume_count = volumes.len() as u32;
        Ok(BinaryWriter {
            sink,
            volume_count,
            encoder: BlockCodec::new(volume_count),
            payload: Vec::with_capacity(RECORDS_PER_BLOCK as usize * RECORD_BYTES_MAX),
            block_records: 0,
            block_base_ns: 0,
            previous_ns: None,
            record_count: 0,
            bytes_written: header.len() as u64,
        })
    }

    /// Appends one request; requests must come in non-decreasing time order.
    pub fn write(&mut self, request: &Request) -> Result<(), WriteError> {
        let timestamp_ns = request.timestamp.0;
        if let Some(previous_ns) = self.previous_ns.filter(|&previous| timestamp_ns < previous) {
            return Err(WriteError::OutOfOrder { timestamp_ns, previous_ns });
        }
        if request.volume.0 >= self.volume_count {
            return Err(WriteError::UnknownVolume {
                volume: request.volume,
                volume_count: self.volume_count,
            });
        }
        if request.size_bytes == 0 {
            return Err(WriteError::ZeroSize);
        }
        if request.offset_bytes.checked_add(u64::from(request.size_bytes)).is_none() {
            let (offset_bytes, size_bytes) = (request.offset_bytes, request.size_bytes);
            return Err(WriteError::RangeOverflow { offset_bytes, size_bytes });
        }
        if self.block_records == 0 {
            self.block_base_ns = timestamp_ns;
            self.encoder.start_block(timestamp_ns);
        }
        let before = self.payload.len();
        self.encoder.encode(request, &mut self.payload);
        assert!(
            self.payload.len() - before <= RECORD_BYTES_MAX,
            "record encoding exceeds its bound"
        );
        self.block_records += 1;
        self.record_count += 1;
        self.previous_ns = Some(timestamp_ns);
        if self.block_records == RECORDS_PER_BLOCK {
            self.flush_block()?;
        }
        Ok(())
    }

    /// The number of requests written so far.
    pub fn record_count(&self) -> u64 {
        self.record_count
    }

    /// The number of bytes handed to the sink so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Writes the last block and the end block, flushes, and returns the sink.
    pub fn finish(mut self) -> Result<W, WriteError> {
        self.flush_block()?;
        let last_ns = self.previous_ns.unwrap_or(0);
        let payload = self.record_count.to_le_bytes();
        let header = block_header(BLOCK_KIND_END, 0, &payload, last_ns);
        self.sink.write_all(&header)?;
        self.sink.write_all(&payload)?;
        self.bytes_written += (header.len() + payload.len()) as u64;
        self.sink.flush()?;
        Ok(self.sink)
    }

    fn flush_block(&mut self) -> Result<(), WriteError> {
        if self.block_records == 0 {
            return Ok(());
        }
        assert!(self.payload.len() <= PAYLOAD_BYTES_MAX as usize);
        let header =
            block_header(BLOCK_KIND_RECORDS, self.block_records, &self.payload, self.block_base_ns);
        self.sink.write_all(&header)?;
        self.sink.write_all(&self.payload)?;
        self.bytes_written += (header.len() + self.payload.len()) as u64;
        self.payload.clear();
        self.block_records = 0;
        Ok(())
    }
}

fn encode_header(volumes: &VolumeTable, time_base: TimeBase) -> Vec<u8> {
    let mut names = Vec::new();
    for (_, name) in volumes.iter() {
        // VolumeTable bounds names to VOLUME_NAME_BYTES_MAX, which fits u16.
        names.extend_from_slice(&(name.len() as u16).to_le_bytes());
        names.extend_from_slice(name.as_bytes());
    }
    let mut header = Vec::with_capacity(FILE_HEADER_FIXED_BYTES + names.len() + 4);
    header.extend_from_slice(&MAGIC);
    header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    header.push(match time_base {
        TimeBase::Relative => TIME_BASE_RELATIVE,
        TimeBase::UnixEpoch => TIME_BASE_UNIX_EPOCH,
    });
    header.push(0);
    header.extend_from_slice(&(volumes.len() as u32).to_le_bytes());
    header.extend_from_slice(&(names.len() as u32).to_le_bytes());
    assert_eq!(header.len(), FILE_HEADER_FIXED_BYTES);
    header.extend_from_slice(&names);
    let checksum = crc32c::crc32c(&header);
    header.extend_from_slice(&checksum.to_le_bytes());
    header
}

fn block_header(
    kind: u8,
    record_count: u32,
    payload: &[u8],
    base_ns: u64,
) -> [u8; BLOCK_HEADER_BYTES] {
    let mut header = [0_u8; BLOCK_HEADER_BYTES];
    header[0] = kind;
    header[4..8].copy_from_slice(&record_count.to_le_bytes());
    header[8..12].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    header[12..16].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    header[16..24].copy_from_slice(&base_ns.to_le_bytes());
    let checksum = crc32c::crc32c(&header[..24]);
    header[24..28].copy_from_slice(&checksum.to_le_bytes());
    header
}

/// The per-block delta state shared by the encoder and the decoder: the previous
/// timestamp and, per volume, the end of the previous request. It is reset at each
/// block so that every block decodes on its own.
struct BlockCodec {
    previous_ns: u64,
    last_end: Vec<u64>,
    touched: Vec<u32>,
}

impl BlockCodec {
    fn new(volume_count: u32) -> BlockCodec {
        BlockCodec { previous_ns: 0, last_end: vec![0; volume_count as usize], touched: Vec::new() }
    }

    fn start_block(&mut self, base_ns: u64) {
        for &volume in &self.touched {
            self.last_end[volume as usize] = 0;
        }
        self.touched.clear();
        self.previous_ns = base_ns;
    }

    fn remember(&mut self, volume: u32, end: u64) {
        let slot = &mut self.last_end[volume as usize];
        if *slot == 0 {
            self.touched.push(volume);
        }
        *slot = end;
    }

    fn encode(&mut self, request: &Request, out: &mut Vec<u8>) {
        let volume = request.volume.0;
        let time_delta = request.timestamp.0.wrapping_sub(self.previous_ns) as i64;
        put_varint(out, zigzag(time_delta));
        put_varint(out, u64::from(volume));
        let write_bit = u64::from(request.kind == IoKind::Write);
        put_varint(out, (u64::from(request.size_bytes) << 1) | write_bit);
        let offset_delta = request.offset_bytes.wrapping_sub(self.last_end[volume as usize]) as i64;
        put_varint(out, zigzag(offset_delta));
        self.previous_ns = request.timestamp.0;
        self.remember(volume, request.offset_bytes + u64::from(request.size_bytes));
    }
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// One record as stored, with the file's own volume index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StoredRecord {
    pub(crate) timestamp_ns: u64,
    pub(crate) volume_index: u32,
    pub(crate) offset_bytes: u64,
    pub(crate) size_bytes: u32,
    pub(crate) kind: IoKind,
}

/// Why the binary reader stopped.
#[derive(Debug)]
pub(crate) enum BinaryError {
    Io(io::Error),
    Corrupt(u64, String),
}

fn read_error(offset: u64) -> impl Fn(io::Error) -> BinaryError {
    move |error| match error.kind() {
        io::ErrorKind::UnexpectedEof => {
            BinaryError::Corrupt(offset, "truncated: the file ends early".to_owned())
        }
        _ => BinaryError::Io(error),
    }
}

/// Streams the records of one somnus binary file, checking every checksum.
pub(crate) struct BinaryReader {
    source: BufReader<Input>,
    offset_bytes: u64,
    time_base: TimeBase,
    names: Vec<String>,
    codec: BlockCodec,
    payload: Vec<u8>,
    position: usize,
    block_remaining: u32,
    block_offset: u64,
    record_count: u64,
    finished: bool,
}

impl BinaryReader {
    /// Reads and checks the file header.
    pub(crate) fn new(input: Input) -> Result<BinaryReader, BinaryError> {
        let mut source = BufReader::with_capacity(READ_BUFFER_BYTES, input);
        let (time_base, names, header_bytes) = read_header(&mut source)?;
        assert!(names.len() <= VOLUMES_MAX);
        Ok(BinaryReader {
            source,
            offset_bytes: header_bytes,
            time_base,
            codec: BlockCodec::new(names.len() as u32),
            names,
            payload: Vec::new(),
            position: 0,
            block_remaining: 0,
            block_offset: 0,
            record_count: 0,
            finished: false,
        })
    }

    pub(crate) fn time_base(&self) -> TimeBase {
        self.time_base
    }

    /// The byte offset of the block that holds the record last returned.
    pub(crate) fn block_offset(&self) -> u64 {
        self.block_offset
    }

    /// The volume names of the file, in the order of their indexes.
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// The next record, or `None` after a valid end block.
    pub(crate) fn next_record(&mut self) -> Result<Option<StoredRecord>, BinaryError> {
        while self.block_remaining == 0 {
            if self.finished {
                return Ok(None);
            }
            self.read_block()?;
        }
        let record = self
            .decode_record()
            .map_err(|message| BinaryError::Corrupt(self.block_offset, message))?;
        self.block_remaining -= 1;
        self.record_count += 1;
        if self.block_remaining == 0 && self.position != self.payload.len() {
            let unused = self.payload.len() - self.position;
            return Err(BinaryError::Corrupt(
                self.block_offset,
                format!("block payload has {unused} bytes after its last record"),
            ));
        }
        Ok(Some(record))
    }

    fn read_block(&mut self) -> Result<(), BinaryError> {
        let offset = self.offset_bytes;
        let mut header = [0_u8; BLOCK_HEADER_BYTES];
        let header_bytes =
            crate::input::read_up_to(&mut self.source, &mut header).map_err(BinaryError::Io)?;
        if header_bytes < BLOCK_HEADER_BYTES {
            return Err(BinaryError::Corrupt(
                offset,
                "truncated: the file ends before its end block".to_owned(),
            ));
        }
        let stored_checksum = u32_le(&header[24..28]);
        if crc32c::crc32c(&header[..24]) != stored_checksum {
            return Err(BinaryError::Corrupt(offset, "block header checksum mismatch".to_owned()));
        }
        let kind = header[0];
        let record_count = u32_le(&header[4..8]);
        let payload_bytes = u32_le(&header[8..12]);
        let payload_checksum = u32_le(&header[12..16]);
        let base_ns = u64_le(&header[16..24]);
        if header[1..4] != [0, 0, 0] {
            return Err(BinaryError::Corrupt(
                offset + 1,
                "reserved block header bytes are not zero".to_owned(),
            ));
        }
        let expected_payload = match kind {
            BLOCK_KIND_RECORDS if (1..=RECORDS_PER_BLOCK_MAX).contains(&record_count) => {
                (record_count * RECORD_BYTES_MIN..=PAYLOAD_BYTES_MAX).contains(&payload_bytes)
            }
            BLOCK_KIND_END => record_count == 0 && payload_bytes == END_PAYLOAD_BYTES,
            _ => false,
        };
        if !expected_payload {
            let message = format!(
                "block kind {kind} with {record_count} records and {payload_bytes} payload bytes is invalid"
            );
            return Err(BinaryError::Corrupt(offset, message));
        }
        self.payload.resize(payload_bytes as usize, 0);
        let payload_offset = offset + BLOCK_HEADER_BYTES as u64;
        self.source.read_exact(&mut self.payload).map_err(read_error(payload_offset))?;
        if crc32c::crc32c(&self.payload) != payload_checksum {
            return Err(BinaryError::Corrupt(offset, "block payload checksum mismatch".to_owned()));
        }
        self.offset_bytes = payload_offset + u64::from(payload_bytes);
        self.block_offset = offset;
        if kind == BLOCK_KIND_END {
            return self.finish(offset, base_ns);
        }
        self.position = 0;
        self.block_remaining = record_count;
        self.codec.start_block(base_ns);
        Ok(())
    }

    fn finish(&mut self, offset: u64, last_ns: u64) -> Result<(), BinaryError> {
        let total = u64_le(&self.payload[..8]);
        if total != self.record_count {
            return Err(BinaryError::Corrupt(
                offset,
                format!(
                    "end block counts {total} records but the file holds {}",
                    self.record_count
                ),
            ));
        }
        let expected_last = if self.record_count == 0 { 0 } else { self.codec.previous_ns };
        if last_ns != expected_last {
            return Err(BinaryError::Corrupt(
                offset,
                format!(
                    "end block names last timestamp {last_ns} ns, the records end at {expected_last} ns"
                ),
            ));
        }
        let mut probe = [0_u8; 1];
        if crate::input::read_up_to(&mut self.source, &mut probe).map_err(BinaryError::Io)? != 0 {
            return Err(BinaryError::Corrupt(
                self.offset_bytes,
                "bytes follow the end block".to_owned(),
            ));
        }
        self.finished = true;
        Ok(())
    }

    fn decode_record(&mut self) -> Result<StoredRecord, String> {
        let time_delta = unzigzag(self.varint("time delta")?);
        let volume = self.varint("volume")?;
        let size_kind = self.varint("size")?;
        let offset_delta = unzigzag(self.varint("offset delta")?);
        let previous_ns = self.codec.previous_ns;
        let timestamp_ns = if time_delta >= 0 {
            previous_ns.checked_add(time_delta as u64)
        } else {
            previous_ns.checked_sub(time_delta.unsigned_abs())
        }
        .ok_or_else(|| format!("time delta {time_delta} from {previous_ns} ns leaves u64"))?;
        let volume_index = u32::try_from(volume).ok().filter(|&v| (v as usize) < self.names.len());
        let volume_index = volume_index
            .ok_or_else(|| format!("volume index {volume} is not in the volume table"))?;
        let size_bytes = u32::try_from(size_kind >> 1).ok().filter(|&size| size > 0);
        let size_bytes =
            size_bytes.ok_or_else(|| format!("size {} is zero or exceeds u32", size_kind >> 1))?;
        let kind = if size_kind & 1 == 1 { IoKind::Write } else { IoKind::Read };
        let offset_bytes =
            self.codec.last_end[volume_index as usize].wrapping_add(offset_delta as u64);
        let end = offset_bytes
            .checked_add(u64::from(size_bytes))
            .ok_or_else(|| format!("offset {offset_bytes} + size {size_bytes} overflows u64"))?;
        self.codec.previous_ns = timestamp_ns;
        self.codec.remember(volume_index, end);
        Ok(StoredRecord { timestamp_ns, volume_index, offset_bytes, size_bytes, kind })
    }

    fn varint(&mut self, what: &str) -> Result<u64, String> {
        const VARINT_BYTES_MAX: usize = 10;
        let mut value = 0_u64;
        for index in 0..VARINT_BYTES_MAX {
            let Some(&byte) = self.payload.get(self.position) else {
                return Err(format!("{what}: the block payload ends inside a record"));
            };
            self.position += 1;
            if index == VARINT_BYTES_MAX - 1 && byte > 1 {
                return Err(format!("{what}: varint overflows u64"));
            }
            value |= u64::from(byte & 0x7f) << (7 * index);
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(format!("{what}: varint longer than {VARINT_BYTES_MAX} bytes"))
    }
}

/// Reads the file header; returns the time base, the names and the header length.
fn read_header(source: &mut impl Read) -> Result<(TimeBase, Vec<String>, u64), BinaryError> {
    let mut fixed = [0_u8; FILE_HEADER_FIXED_BYTES];
    source.read_exact(&mut fixed).map_err(read_error(0))?;
    if fixed[..8] != MAGIC {
        return Err(BinaryError::Corrupt(
            0,
            "bad magic: not a somnus trace (expected \"SOMNUSTR\")".to_owned(),
        ));
    }
    let version = u16::from_le_bytes([fixed[8], fixed[9]]);
    if version != FORMAT_VERSION {
        return Err(BinaryError::Corrupt(
            8,
            format!(
                "unsupported format version {version}; this build reads version {FORMAT_VERSION}"
            ),
        ));
    }
    let time_base = match fixed[10] {
        TIME_BASE_RELATIVE => TimeBase::Relative,
        TIME_BASE_UNIX_EPOCH => TimeBase::UnixEpoch,
        other => {
            return Err(BinaryError::Corrupt(10, format!("time base {other} is neither 0 nor 1")));
        }
    };
    if fixed[11] != 0 {
        return Err(BinaryError::Corrupt(11, "reserved header byte is not zero".to_owned()));
    }
    let volume_count = u32_le(&fixed[12..16]);
    let names_bytes = u32_le(&fixed[16..20]);
    let names_bytes_max = volume_count as u64 * (2 + VOLUME_NAME_BYTES_MAX as u64);
    if volume_count as usize > VOLUMES_MAX || u64::from(names_bytes) > names_bytes_max {
        return Err(BinaryError::Corrupt(
            12,
            format!("{volume_count} volumes in {names_bytes} name bytes is out of bounds"),
        ));
    }
    // Read through `take` so that a damaged length cannot allocate before data arrives.
    let mut names_table = Vec::new();
    let names_offset = FILE_HEADER_FIXED_BYTES as u64;
    source
        .take(u64::from(names_bytes))
        .read_to_end(&mut names_table)
        .map_err(read_error(names_offset))?;
    let mut checksum_bytes = [0_u8; 4];
    if names_table.len() < names_bytes as usize {
        return Err(BinaryError::Corrupt(
            names_offset,
            "truncated: the file ends in the volume table".to_owned(),
        ));
    }
    let checksum_offset = names_offset + u64::from(names_bytes);
    source.read_exact(&mut checksum_bytes).map_err(read_error(checksum_offset))?;
    let checksum = crc32c::crc32c_append(crc32c::crc32c(&fixed), &names_table);
    if checksum != u32::from_le_bytes(checksum_bytes) {
        return Err(BinaryError::Corrupt(0, "file header checksum mismatch".to_owned()));
    }
    let names = parse_names(&names_table, volume_count)
        .map_err(|m| BinaryError::Corrupt(names_offset, m))?;
    Ok((time_base, names, checksum_offset + 4))
}

fn parse_names(mut table: &[u8], volume_count: u32) -> Result<Vec<String>, String> {
    let mut names = Vec::with_capacity(volume_count.min(1024) as usize);
    let mut unique = VolumeTable::new();
    for index in 0..volume_count {
        let [low, high, rest @ ..] = table else {
            return Err(format!("volume table ends before name {index}"));
        };
        let length = usize::from(u16::from_le_bytes([*low, *high]));
        let (name, rest) = rest
            .split_at_checked(length)
            .ok_or_else(|| format!("name {index} runs past the table"))?;
        let name = std::str::from_utf8(name).map_err(|_| format!("name {index} is not UTF-8"))?;
        let id = unique.intern(name).map_err(|error| format!("name {index}: {error}"))?;
        if id.0 != index {
            return Err(format!("name {index} {name:?} repeats an earlier name"));
        }
        names.push(name.to_owned());
        table = rest;
    }
    if !table.is_empty() {
        return Err(format!("volume table has {} bytes after its last name", table.len()));
    }
    Ok(names)
}

fn u32_le(bytes: &[u8]) -> u32 {
    let mut array = [0_u8; 4];
    array.copy_from_slice(&bytes[..4]);
    u32::from_le_bytes(array)
}

fn u64_le(bytes: &[u8]) -> u64 {
    let mut array = [0_u8; 8];
    array.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(array)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_zigzag_round_trip() {
        // Goal: the integer codecs are exact at the edges of their ranges.
        for value in [0_i64, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(value)), value);
        }
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
        let mut out = Vec::new();
        put_varint(&mut out, u64::MAX);
        assert_eq!(out.len(), 10);
        assert_eq!(out[9], 1);
    }
}
