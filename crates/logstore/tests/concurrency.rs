//! The log on real files under concurrent appenders, invalidations, readers and the
//! background compactor: every read sees, per block, a version at least as new as the
//! last one acknowledged before it started, with that version's exact bytes, while
//! segments are copied and deleted under it; a reopen (scan, then snapshot) agrees.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use somnus_logstore::{Compactor, FsDisk, LogStore, ObjectId, Options, OwnerId, RecoveryMode};
use somnus_types::{ByteRange, Version};

const BLOCK: u64 = 512;
const BLOCKS: u64 = 32;
const WRITERS: u64 = 4;

fn block_bytes(owner: u64, version: u64, block: u64) -> Vec<u8> {
    (0..BLOCK).map(|i| (owner * 31 + version * 7 + block * 3 + i) as u8).collect()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("somnus-logstore-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Checks one owner's object: each block's version is at least `floor[block]` (or the
/// block is gone, if an invalidation may have run during the read) and its bytes are
/// that version's. Returns the versions seen (0: not in the log).
fn check(
    store: &LogStore,
    owner: u64,
    floor: &[u64],
    invalidated_meanwhile: &dyn Fn() -> bool,
) -> Vec<u64> {
    let read = store.read(OwnerId(owner), ObjectId(0), ByteRange::new(0, BLOCK * BLOCKS)).unwrap();
    let mut seen = vec![0; BLOCKS as usize];
    for piece in &read.pieces {
        assert_eq!(piece.range.start % BLOCK, 0, "pieces follow the block-aligned writes");
        for (k, chunk) in piece.bytes.chunks(BLOCK as usize).enumerate() {
            let block = piece.range.start / BLOCK + k as u64;
            assert_eq!(
                chunk,
                block_bytes(owner, piece.version.0, block),
                "owner {owner} block {block}"
            );
            seen[block as usize] = piece.version.0;
        }
    }
    let may_be_gone = invalidated_meanwhile();
    for block in 0..BLOCKS as usize {
        assert!(
            seen[block] >= floor[block] || (seen[block] == 0 && may_be_gone),
            "owner {owner} block {block}: read {} after {} was acknowledged",
            seen[block],
            floor[block]
        );
    }
    seen
}

#[test]
fn concurrent_appends_reads_invalidations_and_compaction_agree() {
    let dir = scratch("concurrency");
    let options =
        Options { segment_bytes: 64 << 10, compact_live_percent_max: 70, ..Options::default() };
    let store =
        Arc::new(LogStore::open(Arc::new(FsDisk::new(&dir).unwrap()), options.clone()).unwrap());
    let compactor = Compactor::start(store.clone(), Duration::from_millis(1));
    // acked[owner][block]: the newest version acknowledged and not invalidated.
    let acked: Arc<Vec<Vec<AtomicU64>>> =
        Arc::new((0..WRITERS).map(|_| (0..BLOCKS).map(|_| AtomicU64::new(0)).collect()).collect());
    // Per owner, a sequence count that is odd while an invalidation is under way.
    let invalidating: Arc<Vec<AtomicU64>> =
        Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (store, acked, invalidating) = (&store, &acked, &invalidating);
                scope.spawn(move || {
                    let owner = w + 1;
                    for version in 1..=400u64 {
                        let start = (version * 7 + w) % (BLOCKS - 3);
                        let blocks = 1 + version % 3;
                        let mut payload = Vec::new();
                        for block in start..start + blocks {
                            payload.extend(block_bytes(owner, version, block));
                        }
                        let range = ByteRange::new(start * BLOCK, blocks * BLOCK);
                        store
                            .append(OwnerId(owner), ObjectId(0), range, Version(version), &payload)
                            .unwrap();
                        for block in start..start + blocks {
                            acked[w as usize][block as usize].store(version, Ordering::SeqCst);
                        }
                        // Now and then "reclaim" a block: invalidate its newest version.
                        if version % 5 == 0 {
                            let block = start;
                            invalidating[w as usize].fetch_add(1, Ordering::SeqCst);
                            let newest = acked[w as usize][block as usize].load(Ordering::SeqCst);
                            acked[w as usize][block as usize].store(0, Ordering::SeqCst);
                            let range = ByteRange::new(block * BLOCK, BLOCK);
                            store
                                .invalidate(OwnerId(owner), ObjectId(0), range, Version(newest))
                                .unwrap();
                            invalidating[w as usize].fetch_add(1, Ordering::SeqCst);
                        }
                    }
                })
            })
            .collect();
        for r in 0..2u64 {
            let (store, acked, done, invalidating) = (&store, &acked, &done, &invalidating);
            scope.spawn(move || {
                let mut reads = 0;
                while !done.load(Ordering::SeqCst) || reads < 10 {
                    let w = (reads + r) % WRITERS;
                    let before = invalidating[w as usize].load(Ordering::SeqCst);
                    let floor: Vec<u64> =
                        acked[w as usize].iter().map(|a| a.load(Ordering::SeqCst)).collect();
                    let meanwhile = || {
                        before % 2 == 1 || invalidating[w as usize].load(Ordering::SeqCst) != before
                    };
                    check(store, w + 1, &floor, &meanwhile);
                    reads += 1;
                }
            });
        }
        for writer in writers {
            writer.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
    });
    drop(compactor);
    let stats = store.stats();
    assert!(stats.compactions > 0 && stats.segments_deleted > 0, "{stats:?}");
    let floors: Vec<Vec<u64>> = acked
        .iter()
        .map(|blocks| blocks.iter().map(|a| a.load(Ordering::SeqCst)).collect())
        .collect();
    let final_view: Vec<Vec<u64>> =
        (0..WRITERS).map(|w| check(&store, w + 1, &floors[w as usize], &|| false)).collect();
    // Quiescent: exactly the acknowledged state, no older and no newer.
    assert_eq!(final_view, floors);
    // After a crash (no close) the scan agrees; after a clean close the snapshot does.
    drop(store);
    let store = LogStore::open(Arc::new(FsDisk::new(&dir).unwrap()), options.clone()).unwrap();
    assert!(matches!(store.recovery().mode, RecoveryMode::Scan { .. }));
    let scanned: Vec<Vec<u64>> =
        (0..WRITERS).map(|w| check(&store, w + 1, &floors[w as usize], &|| false)).collect();
    assert_eq!(scanned, floors);
    store.close().unwrap();
    drop(store);
    let store = LogStore::open(Arc::new(FsDisk::new(&dir).unwrap()), options).unwrap();
    assert_eq!(store.recovery().mode, RecoveryMode::Snapshot);
    let loaded: Vec<Vec<u64>> =
        (0..WRITERS).map(|w| check(&store, w + 1, &floors[w as usize], &|| false)).collect();
    assert_eq!(loaded, floors);
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}
