//! The log under injected faults (`MemDisk`): torn writes, bit flips, short reads,
//! ENOSPC, failed syncs, a full log, foreign segments, a second opener, bad requests.
//! Each is detected and reported; nothing wrong is ever returned; nothing acknowledged
//! is lost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use somnus_logstore::format::{RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use somnus_logstore::{
    Crash, Disk, Error, LogStore, MemDisk, ObjectId, Options, OwnerId, RecoveryMode, Request,
    SegmentId, segment_file_name,
};
use somnus_types::{ByteRange, Version};

const OWNER: OwnerId = OwnerId(1);
const OBJECT: ObjectId = ObjectId(9);

fn options() -> Options {
    Options { new_log_id: Some(somnus_logstore::LogId(5)), ..Options::default() }
}

fn open(disk: &MemDisk) -> LogStore {
    LogStore::open(Arc::new(disk.clone()), options()).unwrap()
}

fn payload(i: u64) -> Vec<u8> {
    (0..1000).map(|b| (b as u64 * 7 + i * 13) as u8).collect()
}

/// Appends record `i` (1-based): bytes [1000(i-1), 1000i) at version i.
fn append(store: &LogStore, i: u64) -> Result<(), Error> {
    store.append(OWNER, OBJECT, ByteRange::new(1000 * (i - 1), 1000), Version(i), &payload(i))
}

/// Whether record `i` reads back whole and exact; panics on anything else than whole
/// and exact or entirely missing.
fn present(store: &LogStore, i: u64) -> bool {
    let range = ByteRange::new(1000 * (i - 1), 1000);
    let read = store.read(OWNER, OBJECT, range).unwrap();
    match read.pieces.as_slice() {
        [] => {
            assert_eq!(read.missing, vec![range]);
            false
        }
        [piece] => {
            assert_eq!((piece.range, piece.version), (range, Version(i)));
            assert_eq!(piece.bytes, payload(i), "record {i} returned wrong bytes");
            true
        }
        pieces => panic!("record {i} came back in pieces: {pieces:?}"),
    }
}

/// Where record `i` starts in the first segment, when records 1.. were appended alone.
fn offset_of(i: u64) -> u64 {
    SEGMENT_HEADER_BYTES + (i - 1) * (RECORD_HEADER_BYTES + 1000)
}

#[test]
fn a_torn_last_write_loses_only_the_unacknowledged_record_at_every_cut() {
    // Goal: a crash that persists any prefix of the last write (whose sync failed, so
    // it was never acknowledged) loses that record alone, reported as a torn tail.
    let disk = MemDisk::new();
    let store = open(&disk);
    append(&store, 1).unwrap();
    append(&store, 2).unwrap();
    disk.fail_syncs_after(Some(0));
    let error = append(&store, 3).unwrap_err();
    assert!(matches!(&error, Error::Poisoned { cause } if cause.contains("sync")), "{error}");
    drop(store);
    let whole = (RECORD_HEADER_BYTES + 1000) as usize;
    for cut in (0..=whole).step_by(37).chain([whole - 1, whole]) {
        let crashed = disk.crash(Crash::TornLast { bytes: cut });
        let store = open(&crashed);
        assert!(present(&store, 1) && present(&store, 2), "cut {cut}");
        assert_eq!(present(&store, 3), cut == whole, "cut {cut}");
        let report = store.recovery();
        assert!(report.damage.is_empty(), "cut {cut}: {report:?}");
        let torn = cut != 0 && cut != whole;
        assert_eq!(
            report.torn_tails,
            if torn { vec![(SegmentId(1), offset_of(3))] } else { vec![] }
        );
        // The torn tail was cut away: the next open finds a clean segment.
        drop(store);
        let again = open(&crashed);
        assert!(again.recovery().torn_tails.is_empty());
        assert_eq!(present(&again, 3), cut == whole);
    }
}

#[test]
fn a_flipped_bit_mid_segment_ends_it_and_is_reported_as_damage() {
    // Goal: bit rot in the middle of a segment is found at open (by the scan after a
    // crash) and the scan stops there: the damaged record and those after it are not
    // returned, and the report says how many valid records were hidden.
    let disk = MemDisk::new();
    let store = open(&disk);
    for i in 1..=5 {
        append(&store, i).unwrap();
    }
    drop(store);
    let crashed = disk.crash(Crash::LoseUnsynced);
    crashed.flip_bit(&segment_file_name(SegmentId(1)), offset_of(3) + 500, 2).unwrap();
    let store = open(&crashed);
    assert!(present(&store, 1) && present(&store, 2));
    assert!(!present(&store, 3) && !present(&store, 4) && !present(&store, 5));
    let damage = &store.recovery().damage;
    assert_eq!(damage.len(), 1, "{damage:?}");
    assert_eq!(
        (damage[0].segment, damage[0].offset, damage[0].records_after),
        (SegmentId(1), offset_of(3), 2)
    );
    assert_eq!(damage[0].reason, "checksum mismatch");
    // The damaged segment is kept as found for inspection, not truncated or compacted.
    assert!(store.compact().unwrap().is_none());
    assert!(store.recovery().torn_tails.is_empty());
}

#[test]
fn bit_rot_after_open_is_a_corrupt_error_never_wrong_bytes() {
    // Goal: a record damaged after the index was built (here: loaded from the clean
    // close's snapshot, which skips the scan) fails its checksum when read.
    let disk = MemDisk::new();
    let store = open(&disk);
    for i in 1..=3 {
        append(&store, i).unwrap();
    }
    store.close().unwrap();
    drop(store);
    disk.flip_bit(&segment_file_name(SegmentId(1)), offset_of(2) + RECORD_HEADER_BYTES + 10, 0)
        .unwrap();
    let store = open(&disk);
    assert_eq!(store.recovery().mode, RecoveryMode::Snapshot);
    assert!(present(&store, 1) && present(&store, 3));
    let error = store.read(OWNER, OBJECT, ByteRange::new(1000, 10)).unwrap_err();
    match error {
        Error::Corrupt { segment, offset, reason } => {
            assert_eq!((segment, offset), (SegmentId(1), offset_of(2)));
            assert_eq!(reason, "checksum mismatch");
        }
        other => panic!("expected Corrupt, got {other}"),
    }
    // Reclaim meets the same record and says so rather than hand out bad bytes.
    let results: Vec<_> = store.reclaim(OWNER).unwrap().collect();
    assert_eq!(results.iter().filter(|r| r.is_err()).count(), 1);
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 2);
}

#[test]
fn short_reads_are_completed_and_a_cut_file_is_an_error() {
    // Goal: a device that returns fewer bytes than asked is read until done (scan and
    // reads); a file cut short behind the log's back is an error naming the segment.
    let disk = MemDisk::new();
    let store = open(&disk);
    for i in 1..=4 {
        append(&store, i).unwrap();
    }
    drop(store);
    let crashed = disk.crash(Crash::LoseUnsynced);
    crashed.set_short_reads(true);
    let store = open(&crashed);
    assert_eq!(store.recovery().records, 4);
    assert!((1..=4).all(|i| present(&store, i)));
    crashed.cut(&segment_file_name(SegmentId(1)), offset_of(4) + 100).unwrap();
    let error = store.read(OWNER, OBJECT, ByteRange::new(3000, 1000)).unwrap_err();
    let message = error.to_string();
    assert!(matches!(&error, Error::Io { .. }), "{message}");
    assert!(message.contains(&segment_file_name(SegmentId(1))), "{message}");
    assert!(message.contains("file ends at byte"), "{message}");
    assert!(present(&store, 1));
}

#[test]
fn enospc_stops_the_log_and_loses_nothing_acknowledged() {
    // Goal: a device out of space fails the append (saying so), stops the log, and
    // after reopening with space again everything acknowledged is there.
    let disk = MemDisk::new();
    let store = open(&disk);
    append(&store, 1).unwrap();
    append(&store, 2).unwrap();
    disk.set_space(Some(SEGMENT_HEADER_BYTES + 2 * (RECORD_HEADER_BYTES + 1000) + 500));
    let error = append(&store, 3).unwrap_err();
    let message = error.to_string();
    assert!(message.contains("No space left on device"), "{message}");
    assert!(matches!(append(&store, 4), Err(Error::Poisoned { .. })));
    assert!(matches!(store.close(), Err(Error::Poisoned { .. })));
    drop(store);
    disk.set_space(None);
    let store = open(&disk);
    assert!(present(&store, 1) && present(&store, 2) && !present(&store, 3));
    append(&store, 3).unwrap();
    assert!(present(&store, 3));
}

#[test]
fn a_full_log_refuses_appends_at_once_and_takes_them_again_after_reclaim() {
    // Goal: past the configured size an append is `Full` (nothing written, nothing
    // blocked); invalidating what was reclaimed and compacting makes room again.
    let disk = MemDisk::new();
    let options = Options { segment_bytes: 8 << 10, capacity_bytes: 24 << 10, ..options() };
    let store = LogStore::open(Arc::new(disk.clone()), options).unwrap();
    let mut acknowledged = 0;
    let full = loop {
        match append(&store, acknowledged + 1) {
            Ok(()) => acknowledged += 1,
            Err(error) => break error,
        }
    };
    match full {
        Error::Full { needed, used, capacity } => {
            assert_eq!(capacity, 24 << 10);
            assert!(used + needed > capacity && used <= capacity, "{used} + {needed}");
        }
        other => panic!("expected Full, got {other}"),
    }
    assert!(acknowledged >= 20);
    assert!((1..=acknowledged).all(|i| present(&store, i)));
    // Reclaim copies home, then invalidates: markers may use the headroom.
    for extent in store.reclaim(OWNER).unwrap() {
        let extent = extent.unwrap();
        store.invalidate(OWNER, extent.object, extent.range, extent.version).unwrap();
    }
    assert_eq!(store.stats().live_bytes, 0);
    assert!(store.collect_garbage().unwrap().steps >= 2);
    append(&store, acknowledged + 1).unwrap();
    assert!(present(&store, acknowledged + 1));
    assert!(!present(&store, 1));
}

#[test]
fn a_new_segment_and_the_log_itself_survive_a_crash_right_after_the_first_append() {
    // Goal: creating the log and a segment syncs the directory too: a crash that keeps
    // only what was synced (file contents and names) keeps the acknowledged record.
    let disk = MemDisk::new();
    let store = open(&disk);
    append(&store, 1).unwrap();
    drop(store);
    let crashed = disk.crash(Crash::LoseUnsynced);
    let store = open(&crashed);
    assert!(present(&store, 1));
    assert_eq!(store.log_id(), somnus_logstore::LogId(5));
}

#[test]
fn a_segment_of_another_log_is_refused_and_reported() {
    // Goal: a segment file copied in from another log (another log id in its header)
    // is never read as this log's.
    // The other log reopens twice, so its third segment is named seg-…3.
    let other = MemDisk::new();
    let other_options =
        Options { new_log_id: Some(somnus_logstore::LogId(6)), ..Options::default() };
    for i in 1..=3 {
        let other_store = LogStore::open(Arc::new(other.clone()), other_options.clone()).unwrap();
        append(&other_store, i).unwrap();
    }
    let stranger = other.contents(&segment_file_name(SegmentId(3))).unwrap();

    let disk = MemDisk::new();
    let store = open(&disk);
    append(&store, 1).unwrap();
    drop(store);
    let file = disk.create(&segment_file_name(SegmentId(3))).unwrap();
    file.write_all_at(&stranger, 0).unwrap();
    let store = open(&disk);
    let damage = &store.recovery().damage;
    assert_eq!(damage.len(), 1);
    assert_eq!(damage[0].segment, SegmentId(3));
    assert!(damage[0].reason.contains("another log"), "{}", damage[0].reason);
    assert_eq!(store.recovery().records, 1);
    // New segments get ids past the stranger's, never reusing its name.
    append(&store, 2).unwrap();
    assert!(store.segments().iter().any(|(id, ..)| *id == SegmentId(4)));
}

#[test]
fn a_second_opener_is_refused_while_the_first_holds_the_log() {
    let disk = MemDisk::new();
    let store = open(&disk);
    let error = LogStore::open(Arc::new(disk.clone()), options()).err().unwrap();
    assert!(error.to_string().contains("open elsewhere"), "{error}");
    drop(store);
    open(&disk);
}

#[test]
fn bad_requests_are_refused_with_their_reason_and_write_nothing() {
    let disk = MemDisk::new();
    let store = open(&disk);
    append(&store, 2).unwrap();
    let writes = disk.write_count();
    // Each refusal is a typed variant a caller can match on, with its reason in words.
    type Case<'a> = (Result<(), Error>, &'a str, fn(&Error) -> bool);
    let cases: Vec<Case> = vec![
        (
            store.append(OWNER, OBJECT, ByteRange::new(0, 10), Version(9), &[0; 9]),
            "9 bytes given",
            |e| matches!(e, Error::PayloadMismatch { given_bytes: 9, .. }),
        ),
        (store.append(OWNER, OBJECT, ByteRange::new(0, 0), Version(9), &[]), "no bytes", |e| {
            matches!(e, Error::EmptyRange { request: Request::Append })
        }),
        (
            store.append(OWNER, OBJECT, ByteRange::new(0, 1), Version(2), &[0]),
            "versions must grow",
            |e| {
                matches!(
                    e,
                    Error::VersionNotGrowing { version: Version(2), newest: Version(2), .. }
                )
            },
        ),
        (
            store.append(OWNER, OBJECT, ByteRange::new(0, 1), Version(1), &[0]),
            "versions must grow",
            |e| {
                matches!(
                    e,
                    Error::VersionNotGrowing { version: Version(1), newest: Version(2), .. }
                )
            },
        ),
        (
            store.invalidate(OWNER, OBJECT, ByteRange::new(0, 1), Version(3)),
            "newest version is 2",
            |e| {
                matches!(
                    e,
                    Error::VersionAboveNewest { version: Version(3), newest: Version(2), .. }
                )
            },
        ),
        (store.invalidate(OWNER, OBJECT, ByteRange::new(0, 0), Version(2)), "no bytes", |e| {
            matches!(e, Error::EmptyRange { request: Request::Invalidate })
        }),
        (
            store.append(
                OWNER,
                OBJECT,
                ByteRange::new(0, 80 << 20),
                Version(9),
                &vec![0; 80 << 20],
            ),
            "over the largest record",
            |e| matches!(e, Error::RecordTooLarge { bytes, .. } if *bytes == 80 << 20),
        ),
    ];
    for (result, expected, is_variant) in cases {
        let error = result.unwrap_err();
        assert!(is_variant(&error), "{error}: {error:?}");
        assert!(error.to_string().contains(expected), "{error} lacks {expected:?}");
    }
    assert_eq!(disk.write_count(), writes);
    assert!(present(&store, 2));
}

#[test]
fn one_appender_costs_one_sync_per_append_and_many_share_syncs() {
    // Goal: group commit: alone, each append is one write and one sync (no more);
    // with many threads, batches form and every acknowledged append reads back.
    let disk = MemDisk::new();
    let store = Arc::new(open(&disk));
    append(&store, 1).unwrap(); // creates the segment
    let (writes, syncs) = (disk.write_count(), disk.sync_count());
    for i in 2..=50 {
        append(&store, i).unwrap();
    }
    assert_eq!(disk.sync_count() - syncs, 49);
    assert_eq!(disk.write_count() - writes, 49);

    let threads = 16;
    let per_thread = 40;
    // Each flush takes a millisecond, as a device's does: the appenders that arrive
    // while one runs form the next batch, however the threads are scheduled (without
    // it a busy machine could run them one after another and no batch would form).
    disk.set_sync_latency(Some(std::time::Duration::from_millis(1)));
    let start = std::sync::Barrier::new(threads as usize);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let store = store.clone();
            let start = &start;
            scope.spawn(move || {
                start.wait();
                for i in 0..per_thread {
                    let owner = OwnerId(100 + t);
                    let range = ByteRange::new(i * 64, 64);
                    store.append(owner, OBJECT, range, Version(i + 1), &[t as u8; 64]).unwrap();
                }
            });
        }
    });
    let stats = store.stats();
    let appends = 50 + threads * per_thread;
    assert_eq!(stats.appends, appends);
    assert!(stats.batches < appends, "{stats:?}");
    assert!(stats.batch_records_max > 1, "{stats:?}");
    assert_eq!(stats.records_per_batch.iter().sum::<u64>(), stats.batches);
    for t in 0..threads {
        let read =
            store.read(OwnerId(100 + t), OBJECT, ByteRange::new(0, 64 * per_thread)).unwrap();
        assert!(read.missing.is_empty());
        assert!(read.pieces.iter().all(|p| p.bytes.iter().all(|&b| b == t as u8)));
    }
}

#[test]
fn refusals_of_open_and_compaction_are_typed() {
    // Goal: a caller can match on why open or a compaction was refused (no stringly
    // `Invalid`), and the message still says it in words.
    let disk = MemDisk::new();
    let tiny = Options { segment_bytes: 100, ..options() };
    let error = LogStore::open(Arc::new(disk.clone()), tiny).err().unwrap();
    assert!(
        matches!(error, Error::SegmentTooSmall { segment_bytes: 100, minimum: 153 }),
        "{error}"
    );
    let read_only = Options { read_only: true, ..options() };
    let error = LogStore::open(Arc::new(disk.clone()), read_only).err().unwrap();
    assert!(matches!(&error, Error::NoLog { .. }), "{error}");
    assert!(error.to_string().contains("no meta file"), "{error}");

    let store = open(&disk);
    append(&store, 1).unwrap();
    let error = store.compact_segment(SegmentId(1)).unwrap_err();
    assert!(matches!(error, Error::SegmentBusy { segment: SegmentId(1) }), "{error}");
    let error = store.compact_segment(SegmentId(7)).unwrap_err();
    assert!(matches!(error, Error::NoSuchSegment { segment: SegmentId(7) }), "{error}");
    assert_eq!(error.to_string(), "no segment seg-0000000000000007.log");
}
