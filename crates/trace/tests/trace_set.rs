//! Trace sets: deterministic k-way merge order, placement of relative files at the
//! set's origin, shared volume names across files, calendar days, and the statistics
//! of a set or one of its days.
// Test helpers outside #[test] functions may panic: a failure is the test's result.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use somnus_trace::stats::{StatsOptions, compute_set};
use somnus_trace::{DaySpec, ReadOptions, TimeBase, TraceSet, TraceTimestamp, day_window};

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

#[test]
fn merge_orders_by_time_then_file_then_record() {
    // Goal: the merged stream is non-decreasing, and ties go to the earlier file, then
    // to the earlier record. Method: two replayer files with interleaved and equal
    // times, told apart by their offsets.
    let dir = common::scratch_dir("merge");
    let a = common::write_file(
        &dir,
        "a.trace",
        b"1 0 0 512 1\n3 0 512 512 1\n3 0 1024 512 1\n5 0 1536 512 1\n",
    );
    let b = common::write_file(
        &dir,
        "b.trace",
        b"0 0 1000000 512 0\n3 0 1000512 512 0\n4 0 1001024 512 0\n",
    );
    let set = TraceSet::open(&[a, b], &ReadOptions::default()).unwrap();
    let order: Vec<(u64, u64)> =
        set.requests().map(|r| r.unwrap()).map(|r| (r.timestamp.0 / MS, r.offset_bytes)).collect();
    assert_eq!(
        order,
        [(0, 1_000_000), (1, 0), (3, 512), (3, 1024), (3, 1_000_512), (4, 1_001_024), (5, 1536)]
    );
    let names: Vec<&str> = set.volumes().iter().map(|(_, name)| name).collect();
    assert_eq!(names, ["a_0", "b_0"]);
    assert_eq!(set.summary().time_base, TimeBase::Relative);
    assert_eq!(set.summary().span(), Some((TraceTimestamp(0), TraceTimestamp(5 * MS))));
    let window: Vec<u64> = set
        .requests_between(TraceTimestamp(3 * MS), TraceTimestamp(4 * MS))
        .map(|r| r.unwrap().offset_bytes)
        .collect();
    assert_eq!(window, [512, 1024, 1_000_512]);
}

#[test]
fn passes_from_memory_and_from_the_files_agree() {
    // Goal: a set small enough to be kept in memory by the pre-scan replays exactly the
    // requests, order and placement of a set read from its files each pass, and a set
    // over the budget falls back to the files. Method: an absolute MSR file and a
    // relative replayer file (placed at the MSR origin), opened three ways.
    let dir = common::scratch_dir("memory");
    let msr = common::write_file(
        &dir,
        "m.csv",
        b"128166372000000000,hm,0,Read,0,512,1\n128166372000010000,hm,1,Write,4096,512,1\n",
    );
    let relative = common::write_file(&dir, "r.trace", b"0 0 0 512 1\n0.5 0 512 512 0\n");
    let paths = [msr, relative];
    let in_memory = TraceSet::open(&paths, &ReadOptions::default()).unwrap();
    let from_files =
        TraceSet::open(&paths, &ReadOptions { memory_records_max: 0, ..ReadOptions::default() })
            .unwrap();
    let over_budget =
        TraceSet::open(&paths, &ReadOptions { memory_records_max: 3, ..ReadOptions::default() })
            .unwrap();
    assert!(in_memory.is_in_memory());
    assert!(!from_files.is_in_memory());
    assert!(!over_budget.is_in_memory());
    let pass = |set: &TraceSet| set.requests().map(|r| r.unwrap()).collect::<Vec<_>>();
    let expected = pass(&from_files);
    assert_eq!(expected.len(), 4);
    assert_eq!(pass(&in_memory), expected);
    assert_eq!(pass(&in_memory), expected, "a second pass from memory");
    assert_eq!(pass(&over_budget), expected);
    assert_eq!(
        expected[0].timestamp, expected[1].timestamp,
        "the relative file starts at the MSR origin"
    );
}

#[test]
fn same_volume_name_in_two_files_is_one_volume_and_relative_files_move_to_the_origin() {
    // Goal: files share the volume table by name, and a relative file's time 0 is
    // placed at the earliest absolute first timestamp.
    let dir = common::scratch_dir("place");
    let first = common::write_file(
        &dir,
        "one.csv",
        b"128166372000000000,hm,0,Read,0,512,1\n128166372010000000,hm,1,Read,0,512,1\n",
    );
    let second = common::write_file(&dir, "two.csv", b"128166372005000000,hm,0,Write,0,512,1\n");
    let relative = common::write_file(&dir, "rel.trace", b"500.0 0 0 512 1\n");
    let set = TraceSet::open(&[first, second, relative], &ReadOptions::default()).unwrap();
    let names: Vec<&str> = set.volumes().iter().map(|(_, name)| name).collect();
    assert_eq!(names, ["hm_0", "hm_1", "rel_0"]);
    let origin = 1_172_163_600 * S;
    assert_eq!(set.summary().files[2].placement_offset_ns, origin);
    let times: Vec<u64> = set.requests().map(|r| r.unwrap().timestamp.0 - origin).collect();
    assert_eq!(times, [0, 500 * MS, 500 * MS, S]);
    assert_eq!(set.summary().time_base, TimeBase::UnixEpoch);
}

#[test]
fn days_of_an_msr_set_start_at_utc_midnight() {
    // Goal: FILETIME 128166372000000000 is 2007-02-22 17:00 UTC and day 0 of its set
    // starts at 2007-02-22 00:00 UTC; day 1 and the date 2007-02-23 agree.
    let dir = common::scratch_dir("days");
    let path = common::write_file(
        &dir,
        "hm.csv",
        b"128166372000000000,hm,0,Read,0,512,1\n128167236000000000,hm,0,Read,0,512,1\n",
    );
    let set = TraceSet::open(&[path], &ReadOptions::default()).unwrap();
    let midnight = 1_172_102_400 * S;
    let (start, end) = day_window(set.summary(), DaySpec::Index(0)).unwrap();
    assert_eq!((start.0, end.0), (midnight, midnight + 86_400 * S));
    assert_eq!(
        day_window(set.summary(), "2007-02-23".parse().unwrap()),
        day_window(set.summary(), DaySpec::Index(1))
    );
    assert!(day_window(set.summary(), DaySpec::Index(2)).is_err());
}

#[test]
fn stats_of_a_set_and_of_one_day() {
    // Goal: compute_set covers the set's span, or one day clipped to it. Method: one
    // volume with requests at 17:00:00 and 17:00:30 on day 0 and one on day 1.
    let dir = common::scratch_dir("stats");
    let path = common::write_file(
        &dir,
        "hm.csv",
        b"128166372000000000,hm,0,Read,0,512,1\n128166372300000000,hm,0,Write,0,512,1\n128167236000000000,hm,0,Read,0,512,1\n",
    );
    let set = TraceSet::open(&[path], &ReadOptions::default()).unwrap();
    let report = compute_set(&set, None, &StatsOptions::default()).unwrap();
    assert_eq!(report.request_count, 3);
    assert_eq!(report.span_s, 86_400.0);
    assert_eq!(report.volumes[0].active_share, 90.0 / 86_400.0);
    assert_eq!(report.volumes[0].read_active_share, 60.0 / 86_400.0);
    assert_eq!(report.days.len(), 2);
    assert_eq!(report.days[0].label, "2007-02-22");
    let day = compute_set(&set, Some(DaySpec::Index(0)), &StatsOptions::default()).unwrap();
    assert_eq!(day.request_count, 2);
    assert_eq!(day.span_start.0, 1_172_163_600 * S);
    let json = serde_json::to_string(&day).unwrap();
    assert!(json.contains("\"active_share\""), "{json}");
}

#[test]
fn a_file_named_twice_is_refused_and_an_empty_set_has_no_statistics() {
    // Goal: naming one file twice (even spelt two ways) is an error that names it,
    // since its requests would count twice; and the statistics of a set with no
    // requests are a clear error, not a report on 1970-01-01.
    let dir = common::scratch_dir("twice");
    let a = common::write_file(&dir, "a.trace", b"1 0 0 512 1\n");
    let also_a = dir.join(".").join("a.trace");
    let Err(error) = TraceSet::open(&[a.clone(), also_a], &ReadOptions::default()) else {
        panic!("a file named twice was accepted");
    };
    assert!(matches!(&error, somnus_trace::TraceError::DuplicateFile { .. }), "{error}");
    assert!(error.to_string().contains("a.trace: named twice"), "{error}");
    let empty = common::write_file(&dir, "empty.trace", b"");
    let options =
        ReadOptions { format: Some(somnus_trace::Format::Replayer), ..ReadOptions::default() };
    let set = TraceSet::open(&[empty], &options).unwrap();
    let error = compute_set(&set, None, &StatsOptions { window_ns: 60 * S }).unwrap_err();
    assert_eq!(error.to_string(), "the trace set holds no requests");
}
