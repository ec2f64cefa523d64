//! Tests against the real trace files of the shared developer set. They find it
//! beside the workspace (`../shared/traces`) or through `SOMNUS_TRACES`, and skip,
//! saying so, when there is none, so the crate's tests pass on a machine without it.
// Test helpers outside #[test] functions may panic: a failure is the test's result.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use somnus_trace::{Format, ReadOptions, Request, TimeBase, TraceReader, TraceSet};

use somnus_testkit::traces_dir;

/// Each shipped file, its detected format and its record count from the README.
const FILES: [(&str, Format, u64); 8] = [
    ("msr-csv/rsrch_1.csv", Format::Msr, 13_780),
    ("msr-csv/hm_0.excerpt7016.csv", Format::Msr, 7_016),
    ("msr-csv/hm_1.writes-excerpt13069.csv", Format::Msr, 13_069),
    ("replayer-ascii/msr.cut.per_10k.rw_20_80.105.trace", Format::Replayer, 10_000),
    ("mqsim-ascii/wsrch-small.trace", Format::Mqsim, 24_783),
    ("disksim-ascii/MSN-FS-30s-ms.trace", Format::Disksim, 149_999),
    ("cloudphysics-vscsi/cloudPhysicsIO.vscsi.gz", Format::Vscsi, 113_872),
    ("cloudphysics-vscsi/cloudPhysicsIO.us.csv.gz", Format::CloudphysicsCsv, 113_872),
];

#[test]
fn every_shipped_file_parses_with_its_readme_count() {
    // Goal: every file of the developer set is detected as the right format and
    // parses completely with the record count the README gives, in time order.
    // Method: open each file alone as a trace set without naming its format.
    let Some(dir) = traces_dir() else { return };
    for (name, format, count) in FILES {
        let set = TraceSet::open(&[dir.join(name)], &ReadOptions::default()).unwrap();
        let file = &set.summary().files[0];
        assert_eq!(file.format, format, "{name}");
        assert_eq!(file.record_count, count, "{name}");
        assert_eq!(file.skipped.skipped_count, 0, "{name}");
        assert_eq!(file.non_io_record_count, 0, "{name}");
        let mut previous = None;
        let mut seen = 0_u64;
        for request in set.requests() {
            let request = request.unwrap();
            assert!(previous <= Some(request.timestamp), "{name}: time order");
            previous = Some(request.timestamp);
            seen += 1;
        }
        assert_eq!(seen, count, "{name}");
    }
}

#[test]
fn vscsi_binary_and_converted_csv_agree() {
    // Goal: the vSCSI binary and our CSV conversion of it give the same requests
    // (time, offset, size, kind; the volume names differ with the file stems).
    let Some(dir) = traces_dir() else { return };
    let binary = TraceReader::open(&dir.join(FILES[6].0), None, false).unwrap();
    let csv = TraceReader::open(&dir.join(FILES[7].0), None, false).unwrap();
    let strip = |request: Request| {
        (request.timestamp, request.offset_bytes, request.size_bytes, request.kind)
    };
    let mut count = 0;
    for (from_binary, from_csv) in binary.zip(csv) {
        assert_eq!(strip(from_binary.unwrap()), strip(from_csv.unwrap()));
        count += 1;
    }
    assert_eq!(count, 113_872);
}

#[test]
fn msr_volumes_merge_at_the_absolute_origin() {
    // Goal: a set of all three MSR files and a relative file has the MSR volumes by
    // name, absolute time, and the relative file placed at the earliest MSR start.
    let Some(dir) = traces_dir() else { return };
    let paths: Vec<PathBuf> =
        [FILES[0].0, FILES[1].0, FILES[2].0, FILES[3].0].iter().map(|f| dir.join(f)).collect();
    let set = TraceSet::open(&paths, &ReadOptions::default()).unwrap();
    let names: Vec<&str> = set.volumes().iter().map(|(_, name)| name).collect();
    assert_eq!(names, ["rsrch_1", "hm_0", "hm_1", "msr.cut.per_10k.rw_20_80.105_0"]);
    let summary = set.summary();
    assert_eq!(summary.time_base, TimeBase::UnixEpoch);
    let origin = summary.files[1]
        .first_timestamp
        .unwrap()
        .0
        .min(summary.files[0].first_timestamp.unwrap().0);
    assert_eq!(summary.files[3].placement_offset_ns, origin);
    assert_eq!(summary.record_count, 13_780 + 7_016 + 13_069 + 10_000);
    let merged = set.requests().inspect(|r| assert!(r.is_ok())).count() as u64;
    assert_eq!(merged, summary.record_count);
}
