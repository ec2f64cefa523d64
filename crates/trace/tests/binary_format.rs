//! The somnus binary format: requests round-trip exactly (property test against the
//! written `Vec<Request>`), and damage of any kind (a flipped byte anywhere, a
//! truncation at any length, a bad magic) is a `Corrupt` error naming a byte offset.
// Test helpers outside #[test] functions may panic: a failure is the test's result.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use somnus_trace::{
    BinaryWriter, Format, Request, TimeBase, TraceError, TraceReader, TraceTimestamp, VolumeTable,
    WriteError,
};
use somnus_types::{IoKind, VolumeId};

fn table(count: usize) -> VolumeTable {
    let mut volumes = VolumeTable::new();
    for index in 0..count {
        volumes.intern(&format!("host{}_{index}", index % 3)).unwrap();
    }
    volumes
}

fn encode(volumes: &VolumeTable, time_base: TimeBase, requests: &[Request]) -> Vec<u8> {
    let mut writer = BinaryWriter::new(Vec::new(), volumes, time_base).unwrap();
    for request in requests {
        writer.write(request).unwrap();
    }
    let bytes_written = writer.bytes_written();
    let bytes = writer.finish().unwrap();
    assert!(bytes.len() as u64 > bytes_written, "finish writes the end block");
    bytes
}

fn read(path: &Path) -> Result<(Vec<Request>, VolumeTable, TimeBase), TraceError> {
    let mut reader = TraceReader::open(path, Some(Format::Somnus), false)?;
    let requests = reader.by_ref().collect::<Result<Vec<_>, _>>()?;
    Ok((requests, reader.volumes().clone(), reader.time_base()))
}

fn sample_requests(count: u64) -> Vec<Request> {
    (0..count)
        .map(|index| Request {
            timestamp: TraceTimestamp(1_000 + index * 37 / 3),
            volume: VolumeId((index % 4) as u32),
            offset_bytes: (index * 7919 % 1000) * 512,
            size_bytes: 512 * (1 + (index % 8) as u32),
            kind: if index % 3 == 0 { IoKind::Read } else { IoKind::Write },
        })
        .collect()
}

fn request_strategy(volume_count: u32) -> impl Strategy<Value = (u64, Request)> {
    (
        prop_oneof![Just(0_u64), 0..1_000_u64, 0..u64::MAX / 1_000_000],
        0..volume_count,
        any::<u64>(),
        1..=u32::MAX,
        any::<bool>(),
    )
        .prop_map(|(delta, volume, offset, size, write)| {
            let offset_bytes = offset.min(u64::MAX - u64::from(size));
            let kind = if write { IoKind::Write } else { IoKind::Read };
            (
                delta,
                Request {
                    timestamp: TraceTimestamp(0),
                    volume: VolumeId(volume),
                    offset_bytes,
                    size_bytes: size,
                    kind,
                },
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn round_trip(start in any::<u32>(), steps in prop::collection::vec(request_strategy(5), 0..6000), absolute in any::<bool>()) {
        // Goal: whatever is written is read back exactly, across block boundaries
        // (4096 records per block), with extreme offsets, sizes and time gaps.
        // Method: non-decreasing timestamps from random deltas; compare with the Vec.
        let mut time = u64::from(start);
        let requests: Vec<Request> = steps.into_iter().map(|(delta, mut request)| {
            time = time.saturating_add(delta);
            request.timestamp = TraceTimestamp(time);
            request
        }).collect();
        let volumes = table(5);
        let time_base = if absolute { TimeBase::UnixEpoch } else { TimeBase::Relative };
        let dir = common::scratch_dir("roundtrip");
        let path = common::write_file(&dir, "t.somnus", &encode(&volumes, time_base, &requests));
        let (read_back, read_volumes, read_base) = read(&path).unwrap();
        prop_assert_eq!(read_back, requests);
        prop_assert_eq!(read_volumes, volumes);
        prop_assert_eq!(read_base, time_base);
    }
}

fn damaged(dir: &Path, bytes: &[u8]) -> TraceError {
    let path: PathBuf = common::write_file(dir, "damaged.somnus", bytes);
    read(&path).expect_err("damage must be detected")
}

#[test]
fn every_flipped_byte_is_corruption() {
    // Goal: a flipped byte anywhere (header, volume table, block header, payload, end
    // block) is detected as Corrupt, never read as different requests or a panic.
    // Method: flip bytes of a two-block file in turn: every byte of the first and
    // last 2 KiB (all headers, the second block and the end block) and every 13th
    // byte between (payload), to keep the test fast.
    let requests = sample_requests(4200);
    let bytes = encode(&table(4), TimeBase::Relative, &requests);
    let dir = common::scratch_dir("flip");
    let edge = 2048;
    for position in (0..bytes.len()).filter(|&p| p < edge || p + edge >= bytes.len() || p % 13 == 0)
    {
        let mut copy = bytes.clone();
        copy[position] ^= 0x20;
        let error = damaged(&dir, &copy);
        assert!(matches!(error, TraceError::Corrupt { .. }), "flip at {position}: {error}");
        assert!(error.to_string().contains(": byte "), "{error}");
    }
}

#[test]
fn every_truncation_is_corruption() {
    // Goal: a file cut at any length is Corrupt (the end block makes a cut at a block
    // boundary visible too).
    let bytes = encode(&table(4), TimeBase::UnixEpoch, &sample_requests(300));
    let dir = common::scratch_dir("truncate");
    for length in 0..bytes.len() {
        let error = damaged(&dir, &bytes[..length]);
        assert!(matches!(error, TraceError::Corrupt { .. }), "cut at {length}: {error}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(
        matches!(damaged(&dir, &longer), TraceError::Corrupt { offset, .. } if offset == bytes.len() as u64)
    );
}

#[test]
fn bad_magic_and_version_name_their_offset() {
    // Goal: a foreign file and a future version are refused at the right byte.
    let bytes = encode(&table(1), TimeBase::Relative, &[]);
    let dir = common::scratch_dir("magic");
    let mut foreign = bytes.clone();
    foreign[0] = b'X';
    let error = damaged(&dir, &foreign);
    assert!(
        matches!(&error, TraceError::Corrupt { offset: 0, message, .. } if message.contains("bad magic")),
        "{error}"
    );
    let mut future = bytes.clone();
    future[8] = 2;
    let error = damaged(&dir, &future);
    assert!(
        matches!(&error, TraceError::Corrupt { offset: 8, message, .. } if message.contains("version 2")),
        "{error}"
    );
    let (requests, _, _) = read(&common::write_file(&dir, "empty.somnus", &bytes)).unwrap();
    assert!(requests.is_empty());
}

#[test]
fn writer_refuses_bad_requests() {
    // Goal: the writer checks a record before writing it (the reader checks it again).
    let mut writer = BinaryWriter::new(Vec::new(), &table(2), TimeBase::Relative).unwrap();
    let good = sample_requests(1)[0];
    writer.write(&good).unwrap();
    let earlier = Request { timestamp: TraceTimestamp(good.timestamp.0 - 1), ..good };
    assert!(matches!(writer.write(&earlier), Err(WriteError::OutOfOrder { .. })));
    assert!(matches!(
        writer.write(&Request { volume: VolumeId(2), ..good }),
        Err(WriteError::UnknownVolume { .. })
    ));
    assert!(matches!(writer.write(&Request { size_bytes: 0, ..good }), Err(WriteError::ZeroSize)));
    let overflow = Request { offset_bytes: u64::MAX, ..good };
    assert!(matches!(writer.write(&overflow), Err(WriteError::RangeOverflow { .. })));
    assert_eq!(writer.record_count(), 1);
}

#[test]
fn binary_is_detected_and_much_smaller_than_csv() {
    // Goal: the format is detected by its magic, also inside gzip.
    let bytes = encode(&table(4), TimeBase::Relative, &sample_requests(1000));
    let dir = common::scratch_dir("detect-binary");
    let plain = common::write_file(&dir, "x.bin", &bytes);
    let packed = common::write_file(&dir, "y.bin", &common::gzip(&bytes));
    assert_eq!(somnus_trace::reader::detect_format(&plain).unwrap(), Format::Somnus);
    assert_eq!(somnus_trace::reader::detect_format(&packed).unwrap(), Format::Somnus);
    assert!(bytes.len() < 1000 * 10, "{} bytes for 1000 requests", bytes.len());
}
