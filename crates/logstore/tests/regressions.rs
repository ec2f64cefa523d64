//! Regressions from the review of the log engine: each test is a scenario that once
//! lost or resurrected data, or misbehaved, and states the behaviour now required.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use somnus_logstore::format::{RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use somnus_logstore::{
    Crash, Disk, Error, LogId, LogStore, MemDisk, ObjectId, Options, OwnerId, RecoveryMode,
    SegmentId, segment_file_name,
};
use somnus_types::{ByteRange, Version};

const O: OwnerId = OwnerId(1);

fn open_with(disk: &MemDisk, segment_bytes: u64) -> LogStore {
    let options = Options { new_log_id: Some(LogId(5)), segment_bytes, ..Options::default() };
    LogStore::open(Arc::new(disk.clone()), options).unwrap()
}

const MIB4: u64 = 4 << 20;

/// Finding 1: A compaction that failed after a chunk of copies was committed left durable copies
/// the index never learned of; the garbage rules then dropped the marker that hid them,
/// and a crash + scan resurrected invalidated data. Now the copies join the index.
#[test]
fn copies_of_an_abandoned_compaction_keep_invalidated_data_hidden() {
    let disk = MemDisk::new();
    let seg = 5 << 20;
    let store = open_with(&disk, seg);
    let a = vec![0xAA; MIB4 as usize];
    store.append(O, ObjectId(1), ByteRange::new(0, MIB4), Version(1), &a).unwrap(); // S1
    store.append(O, ObjectId(2), ByteRange::new(0, 1000), Version(2), &[0xBB; 1000]).unwrap(); // S1
    store.append(O, ObjectId(3), ByteRange::new(0, MIB4), Version(3), &a).unwrap(); // S2
    // Bit rot in record B (after open): compaction of S1 reads A, commits its copy (a
    // full 4 MiB chunk), then fails reading B.
    let b_at = SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES + MIB4 + RECORD_HEADER_BYTES + 10;
    disk.flip_bit(&segment_file_name(SegmentId(1)), b_at, 1).unwrap();
    let error = store.compact_segment(SegmentId(1)).unwrap_err();
    assert!(matches!(error, Error::Corrupt { .. }), "{error}");
    // The copy A' sits durably in S3, outside the index.
    store.append(O, ObjectId(4), ByteRange::new(0, MIB4), Version(4), &a).unwrap(); // S4
    store.invalidate(O, ObjectId(1), ByteRange::new(0, MIB4), Version(1)).unwrap(); // S4
    store.invalidate(O, ObjectId(2), ByteRange::new(0, 1000), Version(2)).unwrap(); // S4
    store.append(O, ObjectId(5), ByteRange::new(0, MIB4), Version(5), &a).unwrap(); // S5: seals S4
    assert!(store.read(O, ObjectId(1), ByteRange::new(0, 16)).unwrap().pieces.is_empty());
    store.compact_segment(SegmentId(1)).unwrap(); // everything hidden: nothing copied
    // The copy A' made before the failure is in the index: the v1 marker must stay.
    let report = store.compact_segment(SegmentId(4)).unwrap();
    assert!(report.records_copied >= 2, "{report:?}");
    assert!(store.read(O, ObjectId(1), ByteRange::new(0, 16)).unwrap().pieces.is_empty());
    drop(store);
    let crashed = disk.crash(Crash::LoseUnsynced);
    let store = open_with(&crashed, seg);
    let read = store.read(O, ObjectId(1), ByteRange::new(0, 16)).unwrap();
    assert!(read.pieces.is_empty(), "invalidated v1 came back: {:?}", read.pieces[0].version);
}

const REC: u64 = RECORD_HEADER_BYTES + 1000;

/// Four records of 1000 bytes in segments of three (S1 sealed, S2 the last), all
/// acknowledged, then a crash; returns the device, a record's size and the segment size.
fn three_records_per_segment_then_a_crash() -> (MemDisk, u64, u64) {
    let disk = MemDisk::new();
    let seg = SEGMENT_HEADER_BYTES + 3 * REC;
    let store = open_with(&disk, seg);
    for i in 1..=4u64 {
        store
            .append(O, ObjectId(1), ByteRange::new(1000 * i, 1000), Version(i), &[i as u8; 1000])
            .unwrap();
    }
    drop(store);
    (disk.crash(Crash::LoseUnsynced), REC, seg)
}

/// Finding 2: A damaged segment was protected from compaction only by the in-memory recovery
/// report; after a clean close the snapshot forgot the damage and the next open's
/// compaction deleted the segment with the valid records it still held. Now no
/// snapshot is written while there is damage: the next open scans and finds it again.
#[test]
fn a_damaged_segment_is_never_compacted_even_after_a_clean_close() {
    let (disk, rec, seg) = three_records_per_segment_then_a_crash();
    // Rot in record 2 of S1: record 3 (valid, acknowledged) is hidden behind it.
    disk.flip_bit(&segment_file_name(SegmentId(1)), SEGMENT_HEADER_BYTES + rec + 500, 0).unwrap();
    let store = open_with(&disk, seg);
    assert_eq!(store.recovery().damage.len(), 1);
    assert_eq!(store.recovery().damage[0].records_after, 1);
    assert!(store.compact().unwrap().is_none(), "damaged S1 is kept");
    store.close().unwrap();
    drop(store);
    let store = open_with(&disk, seg);
    assert!(matches!(store.recovery().mode, RecoveryMode::Scan { .. }));
    assert_eq!(store.recovery().damage.len(), 1);
    assert!(store.compact_segment(SegmentId(1)).is_err(), "damaged segments are refused");
    let compacted = store.compact().unwrap();
    assert!(
        compacted.is_none(),
        "damaged segment deleted after reopen: {compacted:?}; file present: {}",
        disk.list().unwrap().contains(&segment_file_name(SegmentId(1)))
    );
}

/// Finding 3: Bit rot in the last record of a sealed segment was taken for a torn tail and the
/// acknowledged record truncated away. Only the last segment can be torn now (a batch
/// syncs a segment before it starts the next): elsewhere it is damage.
#[test]
fn rot_in_the_last_record_of_a_sealed_segment_is_damage_not_a_torn_tail() {
    let (disk, rec, seg) = three_records_per_segment_then_a_crash();
    disk.flip_bit(&segment_file_name(SegmentId(1)), SEGMENT_HEADER_BYTES + 2 * rec + 500, 0)
        .unwrap();
    let store = open_with(&disk, seg);
    let report = store.recovery().clone();
    assert!(
        report.torn_tails.is_empty() && !report.damage.is_empty(),
        "acknowledged record 3 of sealed S1 silently truncated as a torn tail: {report:?}"
    );
}

/// Finding 4: Markers that must be kept made a segment with 0 live bytes that was always chosen,
/// its markers copied to the head, which sealed into another such segment: forever.
/// Now a segment is compacted only if its copies, markers included, are small.
#[test]
fn collect_garbage_ends_when_needed_markers_fill_a_segment() {
    let disk = MemDisk::new();
    let seg = 1200;
    let store = open_with(&disk, seg);
    let mut version = 0;
    let mut small = Vec::new();
    for object in 0..6u64 {
        // A segment per object: 650 live bytes and four 1-byte records (>50% live after).
        version += 1;
        store
            .append(O, ObjectId(object), ByteRange::new(0, 650), Version(version), &[1; 650])
            .unwrap();
        for k in 0..4u64 {
            version += 1;
            let range = ByteRange::new(1000 + k, 1);
            store.append(O, ObjectId(object), range, Version(version), &[2]).unwrap();
            small.push((ObjectId(object), range, Version(version)));
        }
    }
    for (object, range, v) in small {
        store.invalidate(O, object, range, v).unwrap();
    }
    let mut steps = 0;
    while store.compact().unwrap().is_some() {
        steps += 1;
        assert!(steps < 200, "compaction does not converge: {:?}", store.segments());
    }
}

/// Finding 5: A stray file named like the last possible segment id panicked open (debug) or
/// wrapped the next id to 0 (release). Now open refuses it with a reason.
#[test]
fn a_segment_named_u64_max_is_refused_at_open() {
    let disk = MemDisk::new();
    let store = open_with(&disk, 64 << 20);
    store.append(O, ObjectId(1), ByteRange::new(0, 10), Version(1), &[1; 10]).unwrap();
    store.close().unwrap();
    drop(store);
    disk.create(&segment_file_name(SegmentId(u64::MAX))).unwrap();
    disk.sync_dir().unwrap();
    let result = std::panic::catch_unwind(|| {
        LogStore::open(
            Arc::new(disk.clone()),
            Options { new_log_id: Some(LogId(5)), ..Options::default() },
        )
        .map(|_| ())
    });
    let error = result.expect("open panicked on a file name").unwrap_err();
    assert!(error.to_string().contains("past the last segment id"), "{error}");
}
