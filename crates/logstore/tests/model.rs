//! The log against a plain model, over random sequences of append, read, invalidate,
//! delete_all, reclaim, compaction, clean reopen and crash (with torn writes when a sync
//! fails), on the fault-injecting `MemDisk`.
//!
//! The model keeps, per byte of every object, the newest data version with its byte and
//! the newest marker version: a byte is in the log iff its data version is above its
//! marker version (the log's painting over intervals must agree byte for byte). Every
//! read, every reclaim and the live-byte counter are checked against it.
//!
//! Seeds: `LOGSTORE_SEEDS=N` runs seeds 0..N (default 48); `LOGSTORE_SEED=S` replays one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use somnus_logstore::{Crash, Error, LogStore, MemDisk, ObjectId, Options, OwnerId, RecoveryMode};
use somnus_types::{ByteRange, Version};

const OWNERS: u64 = 3;
const OBJECTS: u64 = 3;
const OBJECT_BYTES: u64 = 16 << 10;

#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct ByteState {
    data: Option<(u64, u8)>,
    marker: u64,
}

impl ByteState {
    fn visible(self) -> Option<(u64, u8)> {
        self.data.filter(|&(version, _)| version > self.marker)
    }
}

#[derive(Default)]
struct Model {
    bytes: BTreeMap<(u64, u64), Vec<ByteState>>,
    versions: BTreeMap<u64, u64>,
}

impl Model {
    fn object(&mut self, owner: u64, object: u64) -> &mut Vec<ByteState> {
        self.bytes
            .entry((owner, object))
            .or_insert_with(|| vec![ByteState::default(); OBJECT_BYTES as usize])
    }

    fn append(&mut self, owner: u64, object: u64, range: ByteRange, version: u64, bytes: &[u8]) {
        let states = self.object(owner, object);
        for (i, at) in (range.start..range.end).enumerate() {
            let state = &mut states[at as usize];
            if state.data.is_none_or(|(v, _)| v < version) {
                state.data = Some((version, bytes[i]));
            }
        }
        let last = self.versions.entry(owner).or_default();
        *last = (*last).max(version);
    }

    fn invalidate(&mut self, owner: u64, object: u64, range: ByteRange, version: u64) {
        let states = self.object(owner, object);
        for at in range.start..range.end {
            let state = &mut states[at as usize];
            state.marker = state.marker.max(version);
        }
    }

    fn delete_all(&mut self, owner: u64) {
        for object in 0..OBJECTS {
            self.bytes.remove(&(owner, object));
        }
    }

    fn visible(&self, owner: u64, object: u64, at: u64) -> Option<(u64, u8)> {
        self.bytes.get(&(owner, object)).and_then(|states| states[at as usize].visible())
    }

    fn live_bytes(&self) -> u64 {
        let visible =
            |states: &Vec<ByteState>| states.iter().filter(|s| s.visible().is_some()).count();
        self.bytes.values().map(|states| visible(states) as u64).sum()
    }
}

fn options(rng: &mut Pcg64Mcg) -> Options {
    let segment_bytes = [8 << 10, 32 << 10, 256 << 10][rng.random_range(0..3)];
    let tight = rng.random_bool(0.5);
    Options {
        segment_bytes,
        capacity_bytes: if tight { (3 * segment_bytes).max(40 << 10) } else { 1 << 30 },
        compact_live_percent_max: 60,
        clock: || 1_700_000_000_000,
        new_log_id: Some(somnus_logstore::LogId(77)),
        ..Options::default()
    }
}

/// Checks a read of `range` against the model: every byte, and the shape of the answer.
fn check_read(
    store: &LogStore,
    model: &Model,
    owner: u64,
    object: u64,
    range: ByteRange,
    context: &str,
) {
    let result = store.read(OwnerId(owner), ObjectId(object), range).unwrap();
    let mut seen: Vec<Option<(u64, u8)>> = vec![None; range.size_bytes() as usize];
    let mut covered = vec![false; range.size_bytes() as usize];
    let mut last_end = range.start;
    for piece in &result.pieces {
        assert!(piece.range.start >= last_end, "{context}: pieces overlap or are unordered");
        last_end = piece.range.end;
        assert_eq!(piece.bytes.len() as u64, piece.range.size_bytes());
        for (i, at) in (piece.range.start..piece.range.end).enumerate() {
            let k = (at - range.start) as usize;
            seen[k] = Some((piece.version.0, piece.bytes[i]));
            covered[k] = true;
        }
    }
    for missing in &result.missing {
        for at in missing.start..missing.end {
            let k = (at - range.start) as usize;
            assert!(!covered[k], "{context}: byte {at} both missing and returned");
            covered[k] = true;
        }
    }
    assert!(covered.iter().all(|&c| c), "{context}: the answer does not cover the range");
    for at in range.start..range.end {
        let expected = model.visible(owner, object, at);
        assert_eq!(
            seen[(at - range.start) as usize],
            expected,
            "{context}: owner {owner} object {object} byte {at}"
        );
    }
}

fn check_everything(store: &LogStore, model: &Model, context: &str) {
    for owner in 0..OWNERS {
        for object in 0..OBJECTS {
            check_read(store, model, owner, object, ByteRange::new(0, OBJECT_BYTES), context);
        }
        // Reclaim hands out exactly the visible bytes, each once.
        let mut reclaimed: BTreeMap<(u64, u64), u8> = BTreeMap::new();
        for extent in store.reclaim(OwnerId(owner)).unwrap() {
            let extent = extent.unwrap();
            for (i, at) in (extent.range.start..extent.range.end).enumerate() {
                let expected = model.visible(owner, extent.object.0, at);
                assert_eq!(
                    expected,
                    Some((extent.version.0, extent.bytes[i])),
                    "{context}: reclaim of owner {owner} object {} byte {at}",
                    extent.object.0
                );
                assert!(reclaimed.insert((extent.object.0, at), extent.bytes[i]).is_none());
            }
        }
        let visible: usize = (0..OBJECTS)
            .map(|object| {
                (0..OBJECT_BYTES).filter(|&at| model.visible(owner, object, at).is_some()).count()
            })
            .sum();
        assert_eq!(reclaimed.len(), visible, "{context}: reclaim of owner {owner} missed bytes");
    }
    assert_eq!(store.stats().live_bytes, model.live_bytes(), "{context}: live bytes");
}

fn random_range(rng: &mut Pcg64Mcg, len_max: u64) -> ByteRange {
    let len = if rng.random_bool(0.1) {
        rng.random_range(1..=(OBJECT_BYTES / 2).min(len_max))
    } else {
        rng.random_range(1..=1500)
    };
    let start = rng.random_range(0..=OBJECT_BYTES - len);
    ByteRange::new(start, len)
}

/// What the histories exercised, summed over seeds: each must happen for the test to
/// mean anything.
#[derive(Default, Debug)]
struct Coverage {
    fulls: u64,
    compactions: u64,
    records_copied: u64,
    snapshot_reopens: u64,
    crashes: u64,
    torn_appends_survived: u64,
    torn_appends_lost: u64,
    torn_tails: u64,
}

fn run_seed(seed: u64, steps: usize, coverage: &mut Coverage) {
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    let options = options(&mut rng);
    let mut disk = MemDisk::new();
    let mut store = LogStore::open(Arc::new(disk.clone()), options.clone()).unwrap();
    let mut model = Model::default();
    let trace = std::env::var("LOGSTORE_TRACE").is_ok();
    for step in 0..steps {
        let context = format!("seed {seed} step {step}");
        let owner = rng.random_range(0..OWNERS);
        let object = rng.random_range(0..OBJECTS);
        let op = rng.random_range(0..100);
        if trace {
            eprintln!("step {step}: op {op} owner {owner} object {object}");
        }
        match op {
            0..45 => {
                let range = random_range(&mut rng, store.payload_limit());
                let version =
                    model.versions.get(&owner).copied().unwrap_or(0) + rng.random_range(1..4);
                let bytes: Vec<u8> = (0..range.size_bytes()).map(|_| rng.random()).collect();
                match store.append(
                    OwnerId(owner),
                    ObjectId(object),
                    range,
                    Version(version),
                    &bytes,
                ) {
                    Ok(()) => {
                        if trace {
                            eprintln!("  append {range} v{version}");
                        }
                        model.append(owner, object, range, version, &bytes)
                    }
                    Err(Error::Full { .. }) => {
                        coverage.fulls += 1;
                        // The caller's answer to Full: reclaim (here: invalidate what
                        // the owner holds) and collect garbage.
                        for extent in store.extents(OwnerId(owner)) {
                            let (object, range, version) =
                                (extent.object, extent.range, extent.version);
                            match store.invalidate(OwnerId(owner), object, range, version) {
                                Ok(()) => model.invalidate(owner, object.0, range, version.0),
                                Err(Error::Full { .. }) => break,
                                Err(error) => panic!("{context}: invalidate: {error}"),
                            }
                        }
                        store.collect_garbage().unwrap();
                    }
                    Err(error) => panic!("{context}: append: {error}"),
                }
            }
            45..57 => {
                // Invalidate a version the owner holds somewhere, over a range that
                // may or may not match the record's.
                let extents = store.extents(OwnerId(owner));
                if extents.is_empty() {
                    continue;
                }
                let extent = extents[rng.random_range(0..extents.len())];
                let range = if rng.random_bool(0.5) {
                    extent.range
                } else {
                    random_range(&mut rng, store.payload_limit())
                };
                match store.invalidate(OwnerId(owner), extent.object, range, extent.version) {
                    Ok(()) => {
                        if trace {
                            eprintln!(
                                "  invalidate object {} {range} v{}",
                                extent.object.0, extent.version.0
                            );
                        }
                        model.invalidate(owner, extent.object.0, range, extent.version.0)
                    }
                    Err(Error::Full { .. }) => coverage.fulls += 1,
                    Err(error) => panic!("{context}: invalidate: {error}"),
                }
            }
            57..59 => match store.delete_all(OwnerId(owner)) {
                Ok(()) => model.delete_all(owner),
                Err(Error::Full { .. }) => coverage.fulls += 1,
                Err(error) => panic!("{context}: delete_all: {error}"),
            },
            59..79 => {
                let range = random_range(&mut rng, store.payload_limit());
                check_read(&store, &model, owner, object, range, &context);
            }
            79..87 => {
                if rng.random_bool(0.5) {
                    if let Some(report) = store.compact().unwrap() {
                        coverage.compactions += 1;
                        coverage.records_copied += report.records_copied;
                    }
                } else {
                    let segments = store.segments();
                    if segments.is_empty() {
                        continue;
                    }
                    let (id, ..) = segments[rng.random_range(0..segments.len())];
                    match store.compact_segment(id) {
                        Ok(report) => {
                            coverage.compactions += 1;
                            coverage.records_copied += report.records_copied;
                        }
                        // The head, a segment being written, or a damaged one.
                        Err(Error::SegmentBusy { .. } | Error::SegmentDamaged { .. }) => {}
                        Err(error) => panic!("{context}: compact {id}: {error}"),
                    }
                }
            }
            87..90 => {
                store.close().unwrap();
                drop(store);
                store = LogStore::open(Arc::new(disk.clone()), options.clone()).unwrap();
                assert_eq!(store.recovery().mode, RecoveryMode::Snapshot, "{context}");
                coverage.snapshot_reopens += 1;
                check_everything(&store, &model, &context);
            }
            90..93 => {
                drop(store);
                let mode = [Crash::LoseUnsynced, Crash::KeepAll, Crash::Torn { seed: step as u64 }]
                    [rng.random_range(0..3)];
                disk = disk.crash(mode);
                store = LogStore::open(Arc::new(disk.clone()), options.clone()).unwrap();
                assert!(matches!(store.recovery().mode, RecoveryMode::Scan { .. }), "{context}");
                assert!(store.recovery().damage.is_empty(), "{context}: {:?}", store.recovery());
                coverage.crashes += 1;
                check_everything(&store, &model, &context);
            }
            93..96 => {
                // A sync fails under an append: the append is not acknowledged, the log
                // stops, and after the crash the record is there whole or not at all.
                let range = random_range(&mut rng, store.payload_limit());
                let version = model.versions.get(&owner).copied().unwrap_or(0) + 1;
                let bytes: Vec<u8> = (0..range.size_bytes()).map(|_| rng.random()).collect();
                disk.fail_syncs_after(Some(0));
                let result =
                    store.append(OwnerId(owner), ObjectId(object), range, Version(version), &bytes);
                match result {
                    Err(Error::Poisoned { cause }) => {
                        assert!(cause.contains("sync"), "{context}: {cause}")
                    }
                    Err(Error::Full { .. }) => {
                        disk.fail_syncs_after(None);
                        continue;
                    }
                    other => panic!("{context}: append under a failing sync gave {other:?}"),
                }
                assert!(matches!(store.delete_all(OwnerId(owner)), Err(Error::Poisoned { .. })));
                drop(store);
                disk = disk.crash(Crash::Torn { seed: seed ^ step as u64 });
                store = LogStore::open(Arc::new(disk.clone()), options.clone()).unwrap();
                let after = store.read(OwnerId(owner), ObjectId(object), range).unwrap();
                let survived = after.pieces.iter().any(|piece| piece.version.0 == version);
                assert!(store.recovery().damage.is_empty(), "{context}: {:?}", store.recovery());
                coverage.torn_tails += store.recovery().torn_tails.len() as u64;
                if survived {
                    coverage.torn_appends_survived += 1;
                } else {
                    coverage.torn_appends_lost += 1;
                }
                if survived {
                    model.append(owner, object, range, version, &bytes);
                } else {
                    // Not acknowledged and not there: the version is still burnt for the
                    // model, which only ever moves forward.
                    model.versions.insert(owner, version);
                }
                check_everything(&store, &model, &format!("{context} (survived: {survived})"));
            }
            _ => {
                store.collect_garbage().unwrap();
            }
        }
        if step % 64 == 63 {
            check_everything(&store, &model, &context);
        }
    }
    store.collect_garbage().unwrap();
    check_everything(&store, &model, &format!("seed {seed} end"));
    let stats = store.stats();
    if std::env::var("LOGSTORE_TRACE").is_ok() {
        eprintln!(
            "seed {seed}: segment {} capacity {} used {} live {}",
            options.segment_bytes, options.capacity_bytes, stats.used_bytes, stats.live_bytes
        );
    }
    assert!(
        stats.used_bytes <= options.capacity_bytes + options.segment_bytes,
        "seed {seed}: {stats:?}"
    );
}

#[test]
fn the_log_agrees_with_a_plain_model_over_random_histories() {
    // Goal: every read, reclaim and live-byte count equals the per-byte model, through
    // compactions, clean reopens (from the snapshot), crashes (scans) and torn writes.
    let mut coverage = Coverage::default();
    let seeds = somnus_testkit::seeds("LOGSTORE_SEED", "LOGSTORE_SEEDS", 32);
    for &seed in &seeds {
        run_seed(seed, 600, &mut coverage);
    }
    eprintln!("{} seed(s): {coverage:?}", seeds.len());
    if seeds.len() == 1 {
        // Replaying one seed: its coverage alone proves nothing.
        return;
    }
    let c = &coverage;
    for (what, count) in [
        ("Full errors", c.fulls),
        ("compactions", c.compactions),
        ("records copied", c.records_copied),
        ("snapshot reopens", c.snapshot_reopens),
        ("crashes", c.crashes),
        ("torn appends that survived", c.torn_appends_survived),
        ("torn appends lost", c.torn_appends_lost),
        ("torn tails", c.torn_tails),
    ] {
        assert!(count > 0, "the histories never exercised {what}: {coverage:?}");
    }
}
