//! The io-server state (001) on the cluster simulation: the MDS's controller sizes the
//! max-perf set to a given compute load, the servers on that it does not need serve
//! their disks in the io-server state, and the gear keeps at least the compute's
//! servers on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use somnus_core::gear::{Gearing, IoServerConfig, Policy};
use somnus_core::power::builtin_profile;
use somnus_sim::cluster::{ComputeLoad, TraceWorkload};
use somnus_sim::sierra::{SierraConfig, run_sierra};
use somnus_trace::{ReadOptions, TraceSet};
use somnus_types::VirtualDuration;

fn workload(seconds: f64) -> Option<Arc<TraceWorkload>> {
    let traces = somnus_testkit::traces_dir()?;
    let path = traces.join("msr-csv/hm_0.excerpt7016.csv");
    let set = TraceSet::open(&[path], &ReadOptions::default()).unwrap();
    Some(Arc::new(TraceWorkload::read(&set, Some(seconds)).unwrap()))
}

fn config(profile: &str, servers: u32, replicas: u32, steps: Vec<(u64, f64)>) -> SierraConfig {
    SierraConfig {
        servers: Some(servers),
        replicas,
        timescale_s: 60,
        gearing: Gearing::Fractional,
        gear_min: 1,
        policy: Policy::Hybrid,
        headroom: 0.2,
        dwell_s: None,
        quiet_intervals: 2,
        profile: builtin_profile(profile).unwrap(),
        seed: 1,
        check_history: true,
        sweep_s: Vec::new(),
        sample_s: 5,
        logger_capacity_bytes: 16 << 30,
        compute: Some(ComputeLoad {
            config: IoServerConfig {
                io_server: true,
                headroom: 0.0,
                dwell: VirtualDuration::from_secs(30),
            },
            steps,
        }),
    }
}

#[test]
fn table_2_of_001_comes_out_of_the_cluster_simulation() {
    // Goal: 001's 4-node cluster, every node on (r = 2, g_min 2), k nodes' compute:
    // the cluster's steady watts are k at max-perf and 4 - k io-servers, Table 2's
    // figures, and the all-on run keeps all four in max-perf (1008 W).
    let Some(workload) = workload(120.0) else { return };
    let table = [
        ("obelix", [585.0, 726.0, 867.0, 1008.0]),
        ("asterix-i", [483.0, 658.0, 833.0, 1008.0]),
        ("asterix-ii", [369.0, 582.0, 795.0, 1008.0]),
    ];
    for (profile, watts) in table {
        for (k, paper) in (1..=4).zip(watts) {
            let config =
                SierraConfig { gear_min: 2, ..config(profile, 4, 2, vec![(0, f64::from(k))]) };
            let result = run_sierra(workload.clone(), &config, |_, _| {}).unwrap();
            let geared = &result.geared;
            assert_eq!(result.violations().count(), 0, "{profile} k={k}");
            assert!(
                (geared.median_watts - paper).abs() < 0.01,
                "{profile}, {k} max-perf: {} W, 001 says {paper} W",
                geared.median_watts
            );
            assert!((result.all_on.median_watts - 1008.0).abs() < 0.01);
            assert_eq!(result.all_on.io_server_hours, 0.0);
        }
    }
}

#[test]
fn the_gear_keeps_the_compute_on_and_the_rest_sleep_or_serve_as_io_servers() {
    // Goal: nine servers in three gear groups under a light block load (one group
    // serves it; the excerpt lasts 150 s, geared every 10 s). For the first minute the
    // compute needs 5 max-perf servers: the gear keeps at least 5 on, 5 in max-perf,
    // the others io-servers. Then the compute stops: the gear falls to one group, the
    // others sleep, and the servers on are io-servers. Nothing is lost, and it uses
    // less than all on.
    let Some(workload) = workload(150.0) else { return };
    let config =
        SierraConfig { timescale_s: 10, ..config("asterix-ii", 9, 3, vec![(0, 5.0), (60, 0.0)]) };
    let result = run_sierra(workload, &config, |_, _| {}).unwrap();
    let geared = &result.geared;
    assert_eq!(result.violations().count(), 0, "{:?}", geared.violations);
    assert_eq!((geared.errors, geared.unfinished), (0, 0));
    let on = |from: f64, to: f64| {
        let samples = geared.samples.iter().filter(|s| s.at_s > from && s.at_s <= to);
        samples.map(|s| s.servers_on).collect::<Vec<_>>()
    };
    let computing = on(0.0, 60.0);
    assert!(computing.iter().all(|&n| n >= 5), "servers on while computing: {computing:?}");
    // (A burst at 130 s wakes every server again.)
    let after = on(110.0, 125.0);
    assert!(after.iter().all(|&n| n == 3), "servers on after the compute: {after:?}");
    // 5 max-perf servers for the minute and the 30 s dwell after it, less the 5 s
    // transition into the role.
    let max_perf_s = geared.max_perf_hours * 3600.0;
    assert!((5.0 * 80.0..5.0 * 95.0).contains(&max_perf_s), "{max_perf_s} s in max-perf");
    assert!(geared.io_server_hours > 0.0);
    // Five in max-perf, four io-servers: 5 x 252 + 4 x 39 W (Asterix-II); then three
    // io-servers and six asleep: 3 x 39 + 6 x 5.4 W.
    let watts = |at: f64| geared.samples.iter().find(|s| s.at_s == at).unwrap().watts;
    assert!((watts(30.0) - 1416.0).abs() < 0.01, "{}", watts(30.0));
    assert!((watts(120.0) - 149.4).abs() < 0.01, "{}", watts(120.0));
    assert!(geared.energy_share < 0.5, "{} of all-on", geared.energy_share);
}

#[test]
fn a_compute_load_needs_an_io_server_profile_and_rising_seconds() {
    let error = config("ecs2-storage-node", 9, 3, vec![(0, 1.0)]).validate().unwrap_err();
    assert!(error.contains("io_server") && error.contains("ecs2-storage-node"), "{error}");
    let error = config("obelix", 9, 3, vec![(10, 1.0), (5, 2.0)]).validate().unwrap_err();
    assert!(error.contains("second 5") && error.contains("rise"), "{error}");
    let error = config("obelix", 9, 3, vec![(0, -1.0)]).validate().unwrap_err();
    assert!(error.contains("second 0"), "{error}");
}
