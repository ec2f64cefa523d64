//! The core's model of a logger's log (`somnus_core::logger`, which the simulator and
//! the storage nodes use) against the engine itself.
//!
//! Goal: one logger semantics. Driven by the same random operations — appends of
//! growing versions, invalidations (which hide their version and every older one),
//! delete-alls, and garbage collections — the model and the engine (over `MemDisk`)
//! agree on every read (pieces, versions, missing bytes), on the live bytes, on the
//! bytes the segments take and on which segments exist, and refuse the same requests
//! (a full log, a version that does not grow). Method: one seeded history per seed;
//! `AGREEMENT_SEEDS=N` runs more (default 64), `AGREEMENT_SEED=S` replays one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use somnus_core::logger::{LogGeometry, Logger, LoggerError, SegmentNo};
use somnus_logstore::{Error, LogStore, MemDisk, ObjectId, Options, OwnerId, SegmentId};
use somnus_types::{ByteRange, LoggerId, Version};

const OWNERS: u64 = 3;
const OBJECTS: u64 = 2;
const OBJECT_BYTES: u64 = 16 << 10;
const STEPS: usize = 400;

struct Pair {
    engine: LogStore,
    model: Logger,
    versions: [u64; OWNERS as usize],
}

fn random_range(rng: &mut Pcg64Mcg) -> ByteRange {
    let start = rng.random_range(0..OBJECT_BYTES - 1);
    let size = rng.random_range(1..=(OBJECT_BYTES - start).min(3000));
    ByteRange::new(start, size)
}

impl Pair {
    fn new(rng: &mut Pcg64Mcg) -> Pair {
        let segment_bytes = [4 << 10, 16 << 10][rng.random_range(0..2)];
        let capacity_bytes = [6 * segment_bytes, 1 << 30][rng.random_range(0..2)];
        let options = Options {
            segment_bytes,
            capacity_bytes,
            compact_live_percent_max: 50,
            clock: || 1_700_000_000_000,
            new_log_id: Some(somnus_logstore::LogId(5)),
            ..Options::default()
        };
        let engine = LogStore::open(Arc::new(MemDisk::new()), options).unwrap();
        let geometry = LogGeometry { capacity_bytes, segment_bytes, compact_live_percent_max: 50 };
        Pair { engine, model: Logger::new(LoggerId(0), geometry), versions: [0; OWNERS as usize] }
    }

    fn append(&mut self, rng: &mut Pcg64Mcg) {
        let owner = rng.random_range(0..OWNERS);
        let object = ObjectId(rng.random_range(0..OBJECTS));
        let range = random_range(rng);
        // Now and then a version that does not grow: both must refuse it.
        let version = if rng.random_bool(0.05) {
            self.versions[owner as usize]
        } else {
            self.versions[owner as usize] + rng.random_range(1..4)
        };
        let bytes = vec![owner as u8; range.size_bytes() as usize];
        let engine = self.engine.append(OwnerId(owner), object, range, Version(version), &bytes);
        let model = self.model.append(OwnerId(owner), object, range, Version(version));
        match (&engine, &model) {
            (Ok(()), Ok(_)) => self.versions[owner as usize] = version,
            (Err(Error::Full { .. }), Err(LoggerError::Full { .. })) => {}
            (Err(Error::VersionNotGrowing { .. }), Err(LoggerError::VersionNotGrowing { .. })) => {}
            _ => panic!("append {owner} {range} v{version}: engine {engine:?}, model {model:?}"),
        }
    }

    fn invalidate(&mut self, rng: &mut Pcg64Mcg) {
        let owner = rng.random_range(0..OWNERS);
        let newest = self.versions[owner as usize];
        if newest == 0 {
            return;
        }
        let object = ObjectId(rng.random_range(0..OBJECTS));
        let range = random_range(rng);
        let version = Version(rng.random_range(1..=newest));
        let engine = self.engine.invalidate(OwnerId(owner), object, range, version);
        let model = self.model.invalidate(OwnerId(owner), object, range, version);
        match (&engine, &model) {
            (Ok(()), Ok(_)) | (Err(Error::Full { .. }), Err(LoggerError::Full { .. })) => {}
            _ => {
                panic!("invalidate {owner} {range} {version:?}: engine {engine:?}, model {model:?}")
            }
        }
    }

    fn delete_all(&mut self, rng: &mut Pcg64Mcg) {
        let owner = OwnerId(rng.random_range(0..OWNERS));
        let engine = self.engine.delete_all(owner);
        let model = self.model.delete_all(owner);
        assert_eq!(
            engine.is_ok(),
            model.is_ok(),
            "delete_all {owner}: engine {engine:?}, model {model:?}"
        );
    }

    fn collect(&mut self, rng: &mut Pcg64Mcg) {
        if rng.random_bool(0.2) {
            // A whole run: both leave the same segments behind.
            let engine = self.engine.collect_garbage();
            let model = self.model.collect_garbage();
            match (&engine, &model) {
                (Ok(_), Ok(_)) | (Err(Error::Full { .. }), Err(LoggerError::Full { .. })) => {}
                _ => panic!("collect_garbage: engine {engine:?}, model {model:?}"),
            }
            let segments = |list: Vec<(SegmentNo, u64, u64)>| -> Vec<u64> {
                list.into_iter().map(|(segment, _, _)| segment.0).collect()
            };
            let engine_segments: Vec<u64> = self.engine.segments().iter().map(|s| s.0.0).collect();
            assert_eq!(engine_segments, segments(self.model.segments()), "collect_garbage");
            return;
        }
        if rng.random_bool(0.5) {
            let engine = self.engine.compact();
            let model = self.model.compact();
            match (&engine, &model) {
                (Ok(engine), Ok(model)) => assert_eq!(
                    engine.as_ref().map(|report| (
                        report.segment.0,
                        report.records_copied,
                        report.bytes_copied
                    )),
                    model.as_ref().map(|collection| (
                        collection.segment.0,
                        collection.records_copied,
                        collection.bytes_copied
                    )),
                    "compact: what was collected"
                ),
                (Err(Error::Full { .. }), Err(LoggerError::Full { .. })) => {}
                _ => panic!("compact: engine {engine:?}, model {model:?}"),
            }
            return;
        }
        // A given sealed segment, whatever it frees.
        let segments = self.model.segments();
        let head = self.model.head().map(|(segment, _)| segment);
        let sealed: Vec<SegmentNo> =
            segments.iter().map(|&(segment, _, _)| segment).filter(|s| Some(*s) != head).collect();
        if sealed.is_empty() {
            return;
        }
        let segment = sealed[rng.random_range(0..sealed.len())];
        let engine = self.engine.compact_segment(SegmentId(segment.0));
        let model = self.model.compact_segment(segment);
        match (&engine, &model) {
            (Ok(engine), Ok(Some(model))) => assert_eq!(
                (engine.records_copied, engine.bytes_copied),
                (model.records_copied, model.bytes_copied),
                "copies of {segment:?}"
            ),
            (Err(Error::Full { .. }), Err(LoggerError::Full { .. })) => {}
            _ => panic!("compact_segment {segment:?}: engine {engine:?}, model {model:?}"),
        }
    }

    fn check(&self, rng: &mut Pcg64Mcg, when: &str) {
        for _ in 0..4 {
            let owner = OwnerId(rng.random_range(0..OWNERS));
            let object = ObjectId(rng.random_range(0..OBJECTS));
            let range = random_range(rng);
            let engine = self.engine.read(owner, object, range).unwrap();
            let pieces: Vec<(ByteRange, Version)> =
                engine.pieces.iter().map(|piece| (piece.range, piece.version)).collect();
            let (model_pieces, model_missing) = self.model.read(owner, object, range);
            assert_eq!(pieces, model_pieces, "{when}: read {owner} {object} {range}");
            assert_eq!(
                engine.missing, model_missing,
                "{when}: missing of {owner} {object} {range}"
            );
        }
        let stats = self.engine.stats();
        assert_eq!(stats.live_bytes, self.model.live_bytes(), "{when}: live bytes");
        assert_eq!(stats.used_bytes, self.model.used_bytes(), "{when}: used bytes");
        let engine_segments: Vec<(u64, u64, u64)> = self
            .engine
            .segments()
            .iter()
            .map(|&(id, bytes, _, live)| (id.0, bytes, live))
            .collect();
        let model_segments: Vec<(u64, u64, u64)> =
            self.model.segments().iter().map(|&(id, bytes, live)| (id.0, bytes, live)).collect();
        assert_eq!(engine_segments, model_segments, "{when}: segments (id, bytes, live)");
    }
}

fn run(seed: u64) {
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    let mut pair = Pair::new(&mut rng);
    for step in 0..STEPS {
        match rng.random_range(0..100) {
            0..=54 => pair.append(&mut rng),
            55..=79 => pair.invalidate(&mut rng),
            80..=82 => pair.delete_all(&mut rng),
            _ => pair.collect(&mut rng),
        }
        pair.check(&mut rng, &format!("step {step}"));
    }
}

#[test]
fn the_core_model_and_the_engine_agree() {
    for seed in somnus_testkit::seeds("AGREEMENT_SEED", "AGREEMENT_SEEDS", 256) {
        if let Err(panic) = std::panic::catch_unwind(|| run(seed)) {
            eprintln!("AGREEMENT_SEED={seed}");
            std::panic::resume_unwind(panic);
        }
    }
}
