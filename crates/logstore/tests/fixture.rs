//! Format version 1, frozen: `fixtures/v1` is a small log the engine wrote (several
//! owners, data, deletion markers, a delete-all, several segments, the snapshot of a
//! clean close). The test opens a copy of it, never the fixture itself, and checks what
//! every read returns, what recovery reports and that verify calls it clean, so that
//! neither the segment format nor the snapshot format can drift silently (STYLE.md
//! rule 10). `generate_fixture` wrote it; it refuses to overwrite a fixture, and the one
//! of version 1 must never be regenerated (fixtures/v1/README.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use somnus_logstore::format::FORMAT_VERSION;
use somnus_logstore::{
    Disk, LogId, LogStore, MemDisk, ObjectId, Options, OwnerId, Piece, ReadResult, RecoveryMode,
    SegmentId, SegmentState, verify,
};
use somnus_types::{ByteRange, Version};

const LOG: LogId = LogId(0x0123_4567_89ab_cdef);
/// The clock of the history: every record was written at this Unix millisecond.
const WRITTEN_MS: u64 = 1_700_000_000_000;
/// Small segments, so that the history spans several.
const SEGMENT_BYTES: u64 = 1024;

fn options(read_only: bool) -> Options {
    Options {
        segment_bytes: SEGMENT_BYTES,
        new_log_id: Some(LOG),
        clock: || WRITTEN_MS,
        read_only,
        ..Options::default()
    }
}

fn fixture_dir(version: u16) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(format!("v{version}"))
}

/// The bytes of version `version` at byte `at`: a function of both, so that a read
/// shows which version and which offset it returned.
fn byte(version: u64, at: u64) -> u8 {
    (version * 37 + at * 7 % 251) as u8
}

fn bytes(version: u64, range: ByteRange) -> Vec<u8> {
    (range.start..range.end).map(|at| byte(version, at)).collect()
}

fn append(store: &LogStore, owner: u64, object: u64, start: u64, len: u64, version: u64) {
    let range = ByteRange::new(start, len);
    let payload = bytes(version, range);
    store.append(OwnerId(owner), ObjectId(object), range, Version(version), &payload).unwrap();
}

fn invalidate(store: &LogStore, owner: u64, object: u64, start: u64, len: u64, version: u64) {
    let range = ByteRange::new(start, len);
    store.invalidate(OwnerId(owner), ObjectId(object), range, Version(version)).unwrap();
}

/// The history the fixture holds.
fn history(store: &LogStore) {
    // Owner 1: an overwrite, and a marker over the start of version 1.
    append(store, 1, 10, 0, 300, 1);
    append(store, 1, 10, 100, 100, 2);
    invalidate(store, 1, 10, 0, 50, 1);
    // Owner 2: data, then a delete-all, then data again.
    append(store, 2, 20, 0, 600, 1);
    append(store, 2, 20, 300, 200, 2);
    store.delete_all(OwnerId(2)).unwrap();
    append(store, 2, 20, 0, 100, 3);
    // Owner 3: data wholly invalidated.
    append(store, 3, 30, 4096, 256, 5);
    invalidate(store, 3, 30, 4096, 256, 5);
    // Owner 1 again, another object.
    append(store, 1, 11, 0, 64, 3);
}

#[test]
#[ignore = "writes fixtures/vN for a new format version N; never for version 1"]
fn generate_fixture() {
    let dir = fixture_dir(FORMAT_VERSION);
    assert!(!dir.exists(), "{} exists: a released fixture is never regenerated", dir.display());
    let disk = MemDisk::new();
    let store = LogStore::open(Arc::new(disk.clone()), options(false)).unwrap();
    history(&store);
    store.close().unwrap();
    drop(store);
    std::fs::create_dir_all(&dir).unwrap();
    for name in disk.list().unwrap() {
        std::fs::write(dir.join(&name), disk.contents(&name).unwrap()).unwrap();
    }
}

/// A copy of the fixture on a fresh device, with or without its snapshot.
fn copy_of_fixture(with_snapshot: bool) -> MemDisk {
    let disk = MemDisk::new();
    let mut names: Vec<String> = std::fs::read_dir(fixture_dir(1))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name != "README.md")
        .collect();
    names.sort();
    assert_eq!(names.len(), 6, "{names:?}");
    for name in names.iter().filter(|name| with_snapshot || *name != "index.snap") {
        let file = disk.create(name).unwrap();
        file.write_all_at(&std::fs::read(fixture_dir(1).join(name)).unwrap(), 0).unwrap();
        file.sync_all().unwrap();
    }
    disk.sync_dir().unwrap();
    disk
}

fn piece(start: u64, len: u64, version: u64) -> Piece {
    let range = ByteRange::new(start, len);
    Piece { range, version: Version(version), bytes: bytes(version, range) }
}

fn read(store: &LogStore, owner: u64, object: u64, start: u64, len: u64) -> ReadResult {
    store.read(OwnerId(owner), ObjectId(object), ByteRange::new(start, len)).unwrap()
}

/// What every read of the fixture returns, worked out by hand from `history` and the
/// rules of docs/format/log.md ("Meaning"), not by running the history again.
fn check_reads(store: &LogStore) {
    let missing = |start, len| vec![ByteRange::new(start, len)];
    // Owner 1, object 10: v1 hidden over 0..50 by its marker, v2 over 100..200.
    let read10 = read(store, 1, 10, 0, 400);
    assert_eq!(read10.pieces, vec![piece(50, 50, 1), piece(100, 100, 2), piece(200, 100, 1)]);
    assert_eq!(read10.missing, [missing(0, 50), missing(300, 100)].concat());
    // Owner 1, object 11.
    let read11 = read(store, 1, 11, 0, 64);
    assert_eq!((read11.pieces, read11.missing), (vec![piece(0, 64, 3)], vec![]));
    // Owner 2: only what followed the delete-all.
    let read20 = read(store, 2, 20, 0, 600);
    assert_eq!((read20.pieces, read20.missing), (vec![piece(0, 100, 3)], missing(100, 500)));
    // Owner 3: its only data invalidated.
    let read30 = read(store, 3, 30, 4096, 256);
    assert_eq!((read30.pieces, read30.missing), (vec![], missing(4096, 256)));
    // An owner the log never saw.
    assert_eq!(read(store, 4, 10, 0, 10).missing, missing(0, 10));

    let owners: Vec<(OwnerId, u64, u64, Version, Option<u64>)> = store
        .owners()
        .into_iter()
        .map(|o| (o.owner, o.objects, o.live_bytes, o.version_max, o.oldest_live_ms))
        .collect();
    let live = Some(WRITTEN_MS);
    assert_eq!(
        owners,
        vec![
            (OwnerId(1), 2, 250 + 64, Version(3), live),
            (OwnerId(2), 1, 100, Version(3), live),
            (OwnerId(3), 1, 0, Version(5), None),
        ]
    );
}

#[test]
fn fixture_v1_opens_from_its_snapshot_and_reads_as_written() {
    // Goal: the snapshot format of version 1 still loads, and the log it describes
    // reads exactly as written.
    let disk = copy_of_fixture(true);
    let store = LogStore::open(Arc::new(disk), options(true)).unwrap();
    assert_eq!(store.log_id(), LOG);
    let report = store.recovery();
    assert_eq!(report.mode, RecoveryMode::Snapshot);
    assert_eq!((report.segments, report.records), (4, 10));
    assert!(report.torn_tails.is_empty() && report.damage.is_empty(), "{report:?}");
    assert!(report.unwritten_removed.is_empty());
    check_reads(&store);
}

#[test]
fn fixture_v1_opens_by_a_scan_and_reads_as_written() {
    // Goal: the segment and record format of version 1 still scans to the same log.
    let disk = copy_of_fixture(false);
    let store = LogStore::open(Arc::new(disk.clone()), options(false)).unwrap();
    let report = store.recovery().clone();
    assert_eq!(report.mode, RecoveryMode::Scan { snapshot_refused: None });
    assert_eq!((report.segments, report.records), (4, 10));
    let bytes: u64 = disk
        .list()
        .unwrap()
        .iter()
        .filter(|name| name.starts_with("seg-"))
        .map(|name| disk.contents(name).unwrap().len() as u64)
        .sum();
    assert_eq!(report.bytes_scanned, bytes);
    assert!(report.torn_tails.is_empty() && report.damage.is_empty(), "{report:?}");
    check_reads(&store);
}

#[test]
fn fixture_v1_verifies_clean() {
    // Goal: verify reads every segment of version 1 as clean, and the snapshot as
    // matching them.
    let disk = copy_of_fixture(true);
    let report = verify(&disk).unwrap();
    assert_eq!(report.log, Some(LOG));
    assert!(!report.is_damaged(), "{report:?}");
    let segments: Vec<(SegmentId, SegmentState)> =
        report.segments.iter().map(|check| (check.segment, check.state.clone())).collect();
    let clean = |id| (SegmentId(id), SegmentState::Clean);
    assert_eq!(segments, vec![clean(1), clean(2), clean(3), clean(4)]);
    assert_eq!(report.records(), 10);
    assert!(report.notes.iter().any(|note| note.contains("matches the segments")), "{report:?}");
}
