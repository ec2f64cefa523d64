//! `verify` against open: both apply one rule (docs/format/log.md, "Recovery"): a torn
//! tail or an interrupted creation is legitimate only in the last segment, because a
//! batch syncs a segment before it creates the next; anywhere else it is damage.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use somnus_logstore::format::{RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use somnus_logstore::{
    Crash, Disk, LogId, LogStore, MemDisk, ObjectId, Options, OwnerId, SegmentId, SegmentState,
    segment_file_name, verify,
};
use somnus_types::{ByteRange, Version};

const RECORD: u64 = RECORD_HEADER_BYTES + 1000;
const SEGMENT: u64 = SEGMENT_HEADER_BYTES + 3 * RECORD;

fn options(read_only: bool) -> Options {
    Options { new_log_id: Some(LogId(5)), segment_bytes: SEGMENT, read_only, ..Options::default() }
}

/// Seven acknowledged records, three per segment: S1 and S2 sealed, S3 the last; then a
/// crash (no snapshot, so open scans).
fn three_segments() -> MemDisk {
    let disk = MemDisk::new();
    let store = LogStore::open(Arc::new(disk.clone()), options(false)).unwrap();
    for i in 1..=7u64 {
        let range = ByteRange::new(1000 * i, 1000);
        store.append(OwnerId(1), ObjectId(1), range, Version(i), &[i as u8; 1000]).unwrap();
    }
    drop(store);
    let crashed = disk.crash(Crash::LoseUnsynced);
    assert_eq!(crashed.list().unwrap().iter().filter(|n| n.starts_with("seg-")).count(), 3);
    crashed
}

fn name(segment: u64) -> String {
    segment_file_name(SegmentId(segment))
}

fn state_of(disk: &MemDisk, segment: u64) -> SegmentState {
    let report = verify(disk).unwrap();
    let check = report.segments.iter().find(|c| c.segment == SegmentId(segment)).unwrap();
    check.state.clone()
}

/// Whether a read-only open reports damage (it repairs nothing, so the disk is left as
/// verify will see it).
fn open_finds_damage(disk: &MemDisk) -> bool {
    let store = LogStore::open(Arc::new(disk.clone()), options(true)).unwrap();
    !store.recovery().damage.is_empty()
}

#[test]
fn a_sealed_segment_cut_short_is_damaged_not_a_torn_tail() {
    // Goal: the case: most of a sealed segment is gone (cut to 100 bytes); verify
    // must call it damage, as open does, not "an interrupted write".
    let disk = three_segments();
    disk.cut(&name(1), 100).unwrap();
    let state = state_of(&disk, 1);
    assert!(
        matches!(&state, SegmentState::Damaged { offset, records_after: 0, .. }
            if *offset == SEGMENT_HEADER_BYTES),
        "{state:?}"
    );
    assert!(verify(&disk).unwrap().is_damaged());
    assert!(open_finds_damage(&disk));
}

#[test]
fn a_sealed_segment_without_its_header_is_damaged_not_an_interrupted_creation() {
    // Goal: only the last segment can be an interrupted creation; a sealed one cut below
    // its header, or zeroed, lost records the log once wrote whole.
    for damage in ["cut", "zeros"] {
        let disk = three_segments();
        match damage {
            "cut" => disk.cut(&name(2), 30).unwrap(),
            _ => {
                let file = disk.open(&name(2), true).unwrap();
                file.write_all_at(&vec![0; SEGMENT as usize], 0).unwrap();
            }
        }
        let state = state_of(&disk, 2);
        assert!(matches!(state, SegmentState::BadHeader(_)), "{damage}: {state:?}");
        assert!(verify(&disk).unwrap().is_damaged(), "{damage}");
        assert!(open_finds_damage(&disk), "{damage}");
    }
}

#[test]
fn the_last_segment_may_be_torn_or_unwritten() {
    // Goal: the legitimate traces of a crash stay legitimate in the last segment.
    let disk = three_segments();
    disk.cut(&name(3), SEGMENT_HEADER_BYTES + 50).unwrap();
    assert!(matches!(state_of(&disk, 3), SegmentState::Torn { .. }), "{:?}", state_of(&disk, 3));
    assert!(!verify(&disk).unwrap().is_damaged());
    assert!(!open_finds_damage(&disk));
    disk.cut(&name(3), 10).unwrap();
    assert_eq!(state_of(&disk, 3), SegmentState::Unwritten);
    assert!(!verify(&disk).unwrap().is_damaged());
    assert!(!open_finds_damage(&disk));
}

#[test]
fn verify_and_open_agree_on_damage_at_every_cut_of_every_segment() {
    // Goal: one rule, two readers: cut each segment at many lengths (every record
    // boundary and bytes around it, and inside headers) and check that verify calls the
    // log damaged exactly when open reports damage: for a cut sealed segment, unless the
    // cut falls on a record boundary, which no reader can tell from a segment that was
    // sealed there (a known limit of format version 1, which stores no segment length).
    let mut cuts = Vec::new();
    for boundary in (0..=3).map(|r| SEGMENT_HEADER_BYTES + r * RECORD) {
        for delta in [0, 1, 40, RECORD_HEADER_BYTES, RECORD - 1] {
            cuts.extend([boundary.saturating_sub(delta), boundary + delta]);
        }
    }
    cuts.extend([0, 1, 10, SEGMENT_HEADER_BYTES - 1]);
    cuts.retain(|&cut| cut <= SEGMENT);
    cuts.sort_unstable();
    cuts.dedup();
    for segment in 1..=3 {
        for &cut in &cuts {
            let disk = three_segments();
            let before = disk.contents(&name(segment)).unwrap().len() as u64;
            disk.cut(&name(segment), cut.min(before)).unwrap();
            let verified = verify(&disk).unwrap().is_damaged();
            assert_eq!(verified, open_finds_damage(&disk), "segment {segment} cut to {cut}");
            let cut = cut.min(before);
            let on_boundary =
                cut >= SEGMENT_HEADER_BYTES && (cut - SEGMENT_HEADER_BYTES).is_multiple_of(RECORD);
            assert_eq!(verified, segment < 3 && !on_boundary, "segment {segment} cut to {cut}");
        }
    }
}
