//! The version 1 fixture of the somnus binary format (STYLE.md rule 10): a file
//! written by the first release must read forever with the same contents. If this
//! test fails, the reader broke old files: fix the reader, never the fixture.
// Test helpers outside #[test] functions may panic: a failure is the test's result.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use somnus_trace::{BinaryWriter, Format, SyntheticConfig, SyntheticTrace, TimeBase, TraceReader};

const FIXTURE: &str = "fixtures/v1/synthetic-seed7.somnus";
const RECORD_COUNT: u64 = 591;
const CONTENT_CRC32C: u32 = 0x4473_6f38;

fn fixture_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE)
}

/// The config the fixture was generated from (kept for `write_v1_fixture`).
fn fixture_config() -> SyntheticConfig {
    SyntheticConfig {
        servers: 2,
        volumes_per_server: 2,
        duration_s: 600.0,
        start_unix_s: Some(1_172_163_600),
        mean_rate_per_s: 0.2,
        ..SyntheticConfig::default()
    }
}

/// A checksum of every decoded field of every request, in order.
fn content_checksum(path: &Path) -> (u64, u32, Vec<String>, TimeBase) {
    let mut reader = TraceReader::open(path, Some(Format::Somnus), false).unwrap();
    let mut crc = 0_u32;
    let mut count = 0_u64;
    for request in reader.by_ref() {
        let request = request.unwrap();
        let mut bytes = Vec::with_capacity(25);
        bytes.extend_from_slice(&request.timestamp.0.to_le_bytes());
        bytes.extend_from_slice(&request.volume.0.to_le_bytes());
        bytes.extend_from_slice(&request.offset_bytes.to_le_bytes());
        bytes.extend_from_slice(&request.size_bytes.to_le_bytes());
        bytes.push(u8::from(request.kind.is_write()));
        crc = crc32c::crc32c_append(crc, &bytes);
        count += 1;
    }
    let names = reader.volumes().iter().map(|(_, name)| name.to_owned()).collect();
    (count, crc, names, reader.time_base())
}

#[test]
fn v1_fixture_reads_with_its_recorded_contents() {
    // Goal: the committed v1 file decodes to exactly the requests it held when it was
    // written. Method: compare the record count and a CRC of all decoded fields with
    // the values recorded at creation.
    let (count, crc, names, time_base) = content_checksum(&fixture_path());
    assert_eq!(count, RECORD_COUNT);
    assert_eq!(crc, CONTENT_CRC32C, "content checksum");
    assert_eq!(names, ["s00_0", "s00_1", "s01_0", "s01_1"]);
    assert_eq!(time_base, TimeBase::UnixEpoch);
}

#[test]
#[ignore = "writes the fixture; run once when creating a new format version's fixture"]
fn write_v1_fixture() {
    // Goal: document how the fixture was made. Method: generate with seed 7 and write
    // it; then record the printed count and checksum in the constants above.
    let trace = SyntheticTrace::new(&fixture_config(), 7).unwrap();
    let volumes = trace.volumes().clone();
    let path = fixture_path();
    let file = std::fs::File::create(&path).unwrap();
    let mut writer = BinaryWriter::new(file, &volumes, TimeBase::UnixEpoch).unwrap();
    for request in trace {
        writer.write(&request).unwrap();
    }
    writer.finish().unwrap();
    let (count, crc, _, _) = content_checksum(&path);
    println!("RECORD_COUNT = {count}; CONTENT_CRC32C = 0x{crc:08x}");
}
