//! A block trace replayed against the simulated cluster, as `somnus replay` replays
//! it against the running one, with a gear schedule: the piece of the two shells'
//! agreement test (crates/cli/tests/cluster_processes.rs) that the simulator runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use somnus_sim::cluster::{ClusterSpec, GearAt, TraceWorkload, replay_trace};
use somnus_trace::{ReadOptions, TraceSet};
use somnus_types::VirtualDuration;

#[test]
fn a_trace_with_a_gear_schedule_sleeps_logs_and_comes_back() {
    let Some(traces) = somnus_testkit::traces_dir() else { return };
    let path = traces.join("msr-csv/hm_0.excerpt7016.csv");
    let set = TraceSet::open(&[path], &ReadOptions::default()).unwrap();
    let workload = Arc::new(TraceWorkload::read(&set, Some(60.0)).unwrap());
    let gears = [
        GearAt { at: VirtualDuration::from_secs(5), gear: 1 },
        GearAt { at: VirtualDuration::from_secs(31), gear: 3 },
    ];
    let spec = ClusterSpec { groups_per_server: 16, ..ClusterSpec::small() };
    let report = replay_trace(&spec, 1, workload.clone(), &gears);
    // The same seed, the same run, to the byte and the joule.
    let again = replay_trace(&spec, 1, workload.clone(), &gears);
    assert_eq!(
        (again.primaries.clone(), again.bytes_logged),
        (report.primaries.clone(), report.bytes_logged)
    );
    assert_eq!(again.energy_joules.to_bits(), report.energy_joules.to_bits());
    let moved = |a: usize, b: usize| {
        report.primaries[a].iter().zip(&report.primaries[b]).filter(|(x, y)| x != y).count()
    };
    // Gear 1 keeps one gear group of three on: the others' primaries move to it, and
    // come back (some of them) once the woken servers are on again.
    assert!(moved(0, 1) > 0 && moved(1, 2) > 0, "{:?}", report.primaries);
    assert!(report.primaries[1].iter().all(Option::is_some), "every group led in gear 1");
    assert!(report.writes_logged > 0 && report.bytes_logged >= report.writes_logged * 4096);
    assert!(report.energy_saved_joules() > 0.0, "six servers slept");
    // A write across a chunk boundary is two, at two primaries.
    assert!(report.acknowledged.iter().sum::<u64>() >= report.writes);
    assert_eq!(report.end.violations, Vec::<String>::new());
    assert_eq!((report.errors, report.unfinished), (0, 0));
    assert_eq!(report.reads + report.writes, workload.ops.len() as u64);
}
