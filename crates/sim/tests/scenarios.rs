//! Hand-written timelines for the write off-loading engine.
//!
//! Goal: each configuration of 004 section 4.1 behaves as the paper describes on a
//! timeline small enough to reason about by hand: who spins down when, which requests
//! wait for a spin-up, which writes are off-loaded, and where the energy goes.
//! Method: a two-rack topology (servers `a` and `b` in one rack, `c` in another) with
//! three or four volumes, requests written out by hand, one engine run per
//! configuration, and assertions on the measurements.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test helpers may panic.

use somnus_core::power::PowerState;
use somnus_sim::engine::{ConfigKind, RunMeasurements, SimRequest};
use somnus_sim::experiment::run_one;
use somnus_sim::topology::{Layout, Topology};
use somnus_types::{ByteRange, IoKind, VirtualDuration, VirtualInstant, VolumeId};

const TOPOLOGY: &str = r#"
[defaults]
boot_array = { raid = "raid1", disks = 2, profile = "seagate-cheetah-15k4-36gb" }
data_array = { raid = "raid5", disks = 4, profile = "seagate-cheetah-15k4-146gb" }
stripe_unit_kib = 64
log_partition_gib = 4.0

[[rack]]
name = "r1"
servers = ["a", "b"]

[[rack]]
name = "r2"
servers = ["c"]

[network]
rtt_ms = 0.2
link_gbps = 1.0

[policy]
vanilla_idle_s = 60.0
read_idle_s = 60.0
write_idle_s = 10.0
offload_limit_gib = 1.0
reclaim_after_idle_ms = 100.0
power_window_s = 60.0
"#;

fn layout(names: &[&str]) -> Layout {
    let topology = Topology::from_toml(TOPOLOGY, "scenario").unwrap();
    topology.layout(&names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
}

fn at(secs: f64) -> VirtualInstant {
    VirtualInstant::ZERO + VirtualDuration::try_from_secs_f64(secs).unwrap()
}

fn request(secs: f64, volume: u32, offset: u64, kind: IoKind) -> SimRequest {
    SimRequest {
        arrival: at(secs),
        volume: VolumeId(volume),
        range: ByteRange::new(offset, 4096),
        kind,
    }
}

fn run(layout: &Layout, span_s: u64, kind: ConfigKind, requests: &[SimRequest]) -> RunMeasurements {
    run_one(layout, VirtualDuration::from_secs(span_s), kind, requests).unwrap()
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

#[test]
fn baseline_never_sleeps_and_serves_in_milliseconds() {
    // Two data volumes on one server, a read and a write each minute for ten minutes.
    let layout = layout(&["a_1", "a_2"]);
    let requests: Vec<_> = (0..10)
        .flat_map(|i| {
            [
                request(i as f64 * 60.0, 0, 0, IoKind::Read),
                request(i as f64 * 60.0 + 1.0, 1, 8192, IoKind::Write),
            ]
        })
        .collect();
    let measured = run(&layout, 600, ConfigKind::Baseline, &requests);
    assert_eq!(measured.requests_unfinished, 0);
    assert_eq!(measured.read_latency_ns.len() + measured.write_latency_ns.len(), 20);
    assert!(
        ms(measured.read_latency_ns.max()) < 20.0,
        "read max {}",
        ms(measured.read_latency_ns.max())
    );
    assert!(
        ms(measured.write_latency_ns.max()) < 30.0,
        "write max {}",
        ms(measured.write_latency_ns.max())
    );
    for volume in &measured.volumes {
        assert_eq!(volume.reading.spin_ups, 0);
        // Four Cheetah 146 GB disks at 12 W for 600 s.
        assert_eq!(volume.reading.energy.as_joules(), 4.0 * 12.0 * 600.0);
    }
    assert_eq!(measured.reads_spin_delayed + measured.writes_spin_delayed, 0);
}

#[test]
fn vanilla_spins_down_after_a_minute_and_the_next_request_waits() {
    // One volume: a write at 0 s, then a read at 200 s. Vanilla spins down at 60 s and
    // the read waits the 15 s spin-up of a 146 GB Cheetah.
    let layout = layout(&["a_1"]);
    let requests = [request(0.0, 0, 0, IoKind::Write), request(200.0, 0, 4096, IoKind::Read)];
    let measured = run(&layout, 300, ConfigKind::Vanilla, &requests);
    let read_ms = ms(measured.read_latency_ns.max());
    assert!((15_000.0..15_050.0).contains(&read_ms), "read waited {read_ms} ms");
    assert_eq!(measured.reads_spin_delayed, 1);
    assert_eq!(measured.writes_spin_delayed, 0);
    let volume = &measured.volumes[0];
    assert_eq!(volume.reading.spin_ups, 1);
    assert_eq!(volume.reading.spin_downs, 2);
    // Idle 0-60 s, standby 60-200 s, a 15 s and 200 J spin-up per disk, idle until a
    // minute after the read completed (275 s), standby again to 300 s.
    // The idle clock starts when the last I/O completes.
    let write_done = measured.write_latency_sum_ns as f64 / 1e9;
    let read_done = 200.0 + measured.read_latency_sum_ns as f64 / 1e9;
    let standby = volume.reading.state_time[PowerState::Standby.index()].as_secs_f64();
    let expected_standby = (200.0 - (write_done + 60.0)) + (300.0 - (read_done + 60.0));
    assert!(
        (standby - expected_standby).abs() < 1e-6,
        "standby {standby} s, expected {expected_standby}"
    );
    let idle = (write_done + 60.0) + (read_done + 60.0 - 215.0);
    let expected = 4.0 * (12.0 * idle + 2.6 * standby + 200.0);
    assert!(
        (volume.reading.energy.as_joules() - expected).abs() < 1e-6,
        "{:?}",
        volume.reading.energy
    );
}

#[test]
fn machine_level_offloads_writes_while_home_sleeps() {
    // Volume a_1 is read at 0 s and then only written every 20 s; a_2 on the same server
    // is busy with reads every 5 s, so its logger stays awake. a_1 spins down at 60 s and
    // its later writes go to a_2's logger without waiting; reading an off-loaded block
    // back is served by the logger, locally.
    let layout = layout(&["a_1", "a_2"]);
    let mut requests = vec![request(0.0, 0, 0, IoKind::Read)];
    for i in 0..40 {
        requests.push(request(i as f64 * 5.0 + 0.5, 1, (i % 8) * 65536, IoKind::Read));
    }
    for i in 0..10 {
        requests.push(request(20.0 + i as f64 * 20.0, 0, 1 << 20, IoKind::Write));
    }
    requests.push(request(195.0, 0, 1 << 20, IoKind::Read));
    requests.sort_by_key(|r| r.arrival);
    let measured = run(&layout, 200, ConfigKind::Machine, &requests);
    assert_eq!(measured.requests_unfinished, 0);
    assert_eq!(measured.writes_spin_delayed, 0, "off-loaded writes never wait for a spin-up");
    assert!(measured.writes_logged >= 6, "writes logged: {}", measured.writes_logged);
    assert_eq!(measured.reads_logged, 1, "the last read is served by the logger");
    assert_eq!(measured.reads_remote, 0, "machine-level off-load stays on the server");
    assert_eq!(measured.network_bytes, 0);
    assert!(
        ms(measured.write_latency_ns.max()) < 50.0,
        "write max {}",
        ms(measured.write_latency_ns.max())
    );
    let home = &measured.volumes[0];
    assert_eq!(home.reading.spin_downs, 1);
    assert_eq!(
        home.reading.spin_ups, 0,
        "reading an off-loaded block does not wake the home volume"
    );
    assert_eq!(measured.volumes[1].reading.spin_downs, 0);
}

#[test]
fn a_lone_volume_never_sleeps_without_another_logger() {
    // 004 3.1: "Before putting the volume into standby, the manager first ensures that
    // there is at least one logger ... using a set of disks different from its own and
    // that is not currently in standby." Alone on its server, c_1 stays up under
    // machine- and rack-level off-load, while vanilla spins it down.
    let layout = layout(&["c_1"]);
    let requests = [request(0.0, 0, 0, IoKind::Write)];
    for kind in [ConfigKind::Machine, ConfigKind::Rack] {
        let measured = run(&layout, 600, kind, &requests);
        assert_eq!(measured.volumes[0].reading.spin_downs, 0, "{kind:?}");
    }
    assert_eq!(run(&layout, 600, ConfigKind::Vanilla, &requests).volumes[0].reading.spin_downs, 1);
}

#[test]
fn rack_level_offloads_across_servers_over_the_network() {
    // a_1 and b_1 are on different servers of one rack. b_1 is kept busy; a_1 sleeps and
    // off-loads its writes to b_1's logger over the network. Machine-level off-load
    // cannot (a_1 is alone on a), so there a_1 never sleeps and uses more energy.
    let layout = layout(&["a_1", "b_1"]);
    let mut requests = vec![];
    for i in 0..120 {
        requests.push(request(i as f64 * 5.0 + 0.5, 1, (i % 16) * 65536, IoKind::Read));
    }
    for i in 0..25 {
        requests.push(request(100.0 + i as f64 * 20.0, 0, (i % 4) * 4096, IoKind::Write));
    }
    requests.sort_by_key(|r| r.arrival);
    let rack = run(&layout, 600, ConfigKind::Rack, &requests);
    let machine = run(&layout, 600, ConfigKind::Machine, &requests);
    assert!(rack.writes_logged >= 20, "rack writes logged: {}", rack.writes_logged);
    assert!(rack.network_bytes >= 20 * 4096, "network bytes: {}", rack.network_bytes);
    assert_eq!(machine.writes_logged, 0);
    let energy = |m: &RunMeasurements| m.volumes[0].reading.energy.as_joules();
    assert!(
        energy(&rack) < 0.5 * energy(&machine),
        "rack {} J vs machine {} J",
        energy(&rack),
        energy(&machine)
    );
    assert_eq!(rack.writes_spin_delayed, 0);
}

#[test]
fn the_offload_limit_wakes_the_home_volume_and_reclaim_empties_the_log() {
    // With a 1 MiB off-load limit, a sleeping volume that keeps being written wakes up
    // in the background once a MiB is logged, copies it home, and invalidates it.
    let text = TOPOLOGY.replace("offload_limit_gib = 1.0", "offload_limit_gib = 0.0009765625");
    let topology = Topology::from_toml(&text, "scenario").unwrap();
    let layout = topology.layout(&["a_1".to_string(), "a_2".to_string()]).unwrap();
    let mut requests = vec![];
    for i in 0..200 {
        requests.push(request(i as f64 * 2.0 + 0.5, 1, (i % 16) * 65536, IoKind::Read));
    }
    for i in 0..64 {
        let mut write = request(70.0 + i as f64, 0, i * 65536, IoKind::Write);
        write.range = ByteRange::new(i * 65536, 65536);
        requests.push(write);
    }
    requests.sort_by_key(|r| r.arrival);
    let measured = run(&layout, 400, ConfigKind::Machine, &requests);
    let home = &measured.volumes[0];
    assert!(home.counters.writes_logged >= 16, "logged {}", home.counters.writes_logged);
    assert!(home.counters.spin_ups_requested >= 1, "the limit should wake the home volume");
    assert!(
        home.counters.bytes_reclaimed >= 1 << 20,
        "reclaimed {}",
        home.counters.bytes_reclaimed
    );
    assert_eq!(measured.writes_spin_delayed, 0);
}

#[test]
fn the_same_input_gives_the_same_measurements() {
    // Determinism: two runs of one configuration agree on every figure.
    let layout = layout(&["a_1", "a_2", "b_1"]);
    let mut requests = vec![];
    for i in 0..500u64 {
        let kind = if i % 3 == 0 { IoKind::Read } else { IoKind::Write };
        requests.push(request(i as f64 * 1.7, (i % 3) as u32, (i * 7919 % 512) * 4096, kind));
    }
    let first = run(&layout, 900, ConfigKind::Rack, &requests);
    let second = run(&layout, 900, ConfigKind::Rack, &requests);
    assert_eq!(first.read_latency_ns, second.read_latency_ns);
    assert_eq!(first.write_latency_ns, second.write_latency_ns);
    assert_eq!(first.timeline, second.timeline);
    assert_eq!(first.network_bytes, second.network_bytes);
}
