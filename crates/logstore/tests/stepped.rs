//! The deterministic mode a simulator steps (`CommitMode::Stepped`): records queue
//! until the caller flushes them as one group commit, a crash before the flush loses
//! them and after it keeps them, `Full` and `fits` agree, compaction makes its copies
//! durable itself, and the same operations leave byte-identical devices.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use somnus_logstore::{
    CommitMode, Crash, Disk, Error, LogId, LogStore, MemDisk, ObjectId, Options, OwnerId,
};
use somnus_types::{ByteRange, Version};

const OWNER: OwnerId = OwnerId(7);
const OBJECT: ObjectId = ObjectId(3);

fn options() -> Options {
    Options { segment_bytes: 64 << 10, capacity_bytes: 1 << 20, ..Options::stepped(LogId(11)) }
}

fn open(disk: &MemDisk) -> LogStore {
    LogStore::open(Arc::new(disk.clone()), options()).unwrap()
}

fn range(i: u64) -> ByteRange {
    ByteRange::new(4096 * i, 4096)
}

fn payload(i: u64) -> Vec<u8> {
    (0..4096u64).map(|b| (b * 3 + i * 17) as u8).collect()
}

fn append(store: &LogStore, i: u64) -> Result<(), Error> {
    store.append(OWNER, OBJECT, range(i), Version(i + 1), &payload(i))
}

/// Whether record `i` reads back whole and exact (and not at all otherwise).
fn present(store: &LogStore, i: u64) -> bool {
    let read = store.read(OWNER, OBJECT, range(i)).unwrap();
    match read.pieces.as_slice() {
        [] => false,
        [piece] => {
            assert_eq!((piece.range, piece.version), (range(i), Version(i + 1)));
            assert_eq!(piece.bytes, payload(i), "record {i} reads back other bytes");
            true
        }
        pieces => panic!("record {i} reads back in {} pieces", pieces.len()),
    }
}

#[test]
fn queued_records_become_durable_and_visible_only_when_flushed_as_one_batch() {
    let disk = MemDisk::new();
    let store = open(&disk);
    let syncs_at_open = disk.sync_count();
    assert_eq!(store.options().commit, CommitMode::Stepped);
    for i in 0..5 {
        append(&store, i).unwrap();
    }
    // Queued: versions count them, reads and the device do not.
    assert_eq!(store.newest_version(OWNER), Version(5));
    assert!((0..5).all(|i| !present(&store, i)));
    assert_eq!(disk.sync_count(), syncs_at_open);
    assert_eq!(store.flush_queued().unwrap(), 5);
    assert!((0..5).all(|i| present(&store, i)));
    let stats = store.stats();
    assert_eq!((stats.batches, stats.syncs, stats.appends), (1, 1, 5));
    // Nothing queued: a flush does nothing.
    assert_eq!(store.flush_queued().unwrap(), 0);
    assert_eq!(store.stats().batches, 1);
}

#[test]
fn a_crash_loses_what_was_queued_and_keeps_what_was_flushed() {
    let disk = MemDisk::new();
    let store = open(&disk);
    append(&store, 0).unwrap();
    append(&store, 1).unwrap();
    store.flush_queued().unwrap();
    append(&store, 2).unwrap();
    store.invalidate(OWNER, OBJECT, range(0), Version(1)).unwrap();
    let after = disk.crash(Crash::KeepAll);
    drop(store);
    let store = open(&after);
    assert!(present(&store, 0) && present(&store, 1));
    assert!(!present(&store, 2));
    // The lost record's version may be appended again.
    assert_eq!(store.newest_version(OWNER), Version(2));
    append(&store, 2).unwrap();
    store.flush_queued().unwrap();
    assert!(present(&store, 2));
}

#[test]
fn fits_agrees_with_full_and_queued_records_count() {
    let store = open(&MemDisk::new());
    let mut i = 0;
    loop {
        let fits = store.fits(4096);
        match append(&store, i) {
            Ok(()) => assert!(fits, "record {i} was taken though fits said no"),
            Err(Error::Full { .. }) => {
                assert!(!fits, "record {i} was refused though fits said yes");
                break;
            }
            Err(error) => panic!("{error}"),
        }
        i += 1;
    }
    // Nothing was flushed, yet the log is full: the queue counts.
    assert_eq!(store.stats().batches, 0);
    store.flush_queued().unwrap();
    assert!((0..i).all(|j| present(&store, j)));
}

#[test]
fn compaction_in_a_stepped_log_makes_its_copies_durable_before_deleting() {
    let disk = MemDisk::new();
    let store = open(&disk);
    // Fill several segments, then invalidate most records so that the sealed
    // segments qualify for collection.
    for i in 0..60 {
        append(&store, i).unwrap();
        store.flush_queued().unwrap();
    }
    for i in (0..60).filter(|i| i % 5 != 0) {
        store.invalidate(OWNER, OBJECT, range(i), Version(i + 1)).unwrap();
    }
    store.flush_queued().unwrap();
    let segments_before = disk.list().unwrap().len();
    let steps = store.collect_garbage().unwrap().steps;
    assert!(steps > 0, "nothing was collected");
    assert!(disk.list().unwrap().len() < segments_before);
    // A crash right after collection keeps every live record (the copies were synced).
    let after = disk.crash(Crash::LoseUnsynced);
    drop(store);
    let store = open(&after);
    for i in 0..60 {
        assert_eq!(present(&store, i), i % 5 == 0, "record {i}");
    }
}

#[test]
fn the_same_operations_leave_byte_identical_devices() {
    let run = || {
        let disk = MemDisk::new();
        let store = open(&disk);
        for i in 0..40 {
            append(&store, i).unwrap();
            if i % 3 == 0 {
                store.flush_queued().unwrap();
            }
            if i % 4 == 3 {
                store.invalidate(OWNER, OBJECT, range(i - 2), Version(i - 1)).unwrap();
            }
        }
        store.flush_queued().unwrap();
        store.collect_garbage().unwrap();
        store.close().unwrap();
        let mut names = disk.list().unwrap();
        names.sort();
        names.into_iter().map(|name| (disk.contents(&name).unwrap(), name)).collect::<Vec<_>>()
    };
    let (first, second) = (run(), run());
    assert!(!first.is_empty());
    assert_eq!(first, second, "two runs wrote different bytes");
}

#[test]
fn close_flushes_what_is_queued() {
    let disk = MemDisk::new();
    let store = open(&disk);
    append(&store, 0).unwrap();
    store.close().unwrap();
    drop(store);
    let store = open(&disk.crash(Crash::LoseUnsynced));
    assert!(present(&store, 0));
}
